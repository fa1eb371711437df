/* api.h - ch03-softmax: the function the learner writes, as the check calls it. */
#ifndef EX_API_H
#define EX_API_H
#include "mlsys.h"

/* A vector is sharded across the ranks in rank order; this rank holds n elements x (n may
 * be 0). Write into y[0..n) this rank's part of the softmax of the WHOLE vector.
 * Returns 0, or the runtime's error code. */
int distributed_softmax(mlsys_comm *c, const float *x, float *y, size_t n);

#endif
