/* api.h - ch03-global-mean: the function the learner writes, as the check calls it. */
#ifndef EX_API_H
#define EX_API_H
#include "mlsys.h"

/* Every rank passes its own number v; every rank returns the mean of all ranks' numbers.
 * Returns NaN when a runtime call failed. */
double global_mean(mlsys_comm *c, double v);

#endif
