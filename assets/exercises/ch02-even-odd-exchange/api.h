/* api.h - ch02-even-odd-exchange: the function the learner writes, as the check calls it. */
#ifndef EX_API_H
#define EX_API_H
#include "mlsys.h"

/* Pair rank r with rank r XOR 1 (0-1, 2-3, ...). Send your rank number (an int) to your
 * partner and receive the partner's into *received, at the same time. A rank with no
 * partner (the last one when N is odd) sets *received = -1. Returns 0 or the runtime's
 * error code. */
int exchange_with_partner(mlsys_comm *c, int *received);

#endif
