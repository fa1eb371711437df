/* api.h - ch02-ring-relay: the function the learner writes, as the check calls it. */
#ifndef EX_API_H
#define EX_API_H
#include "mlsys.h"

/* The relay as a ring: rank 0 starts with 42.0 and sends it to rank 1; every other rank
 * receives from its left neighbour, adds 10 and sends to (r+1) mod N; rank 0 finally
 * receives from rank N-1. Rank 0 returns the value that came back, every other rank the
 * value it sent. On a runtime error, return anything (the check reads the error). */
float ring_relay(mlsys_comm *c);

#endif
