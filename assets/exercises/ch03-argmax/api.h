/* api.h - ch03-argmax: the function the learner writes, as the check calls it. */
#ifndef EX_API_H
#define EX_API_H
#include "mlsys.h"

/* Every rank passes its k values (k >= 1). Every rank returns, in *max_value, the largest
 * value held by any rank and, in *owner, the rank that holds it; when several ranks hold
 * the maximum, the lowest of them. Returns 0, or the runtime's error code. */
int distributed_argmax(mlsys_comm *c, const float *vals, size_t k, float *max_value, int *owner);

#endif
