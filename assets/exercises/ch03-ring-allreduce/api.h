/* api.h - ch03-ring-allreduce: the function the learner writes, as the check calls it. */
#ifndef EX_API_H
#define EX_API_H
#include "mlsys.h"

/* In-place SUM all-reduce of count floats over every rank of c, with point-to-point calls
 * only: on return buf holds, on every rank, the elementwise sum of all ranks' buf.
 * Returns 0, or the runtime's error code when a call failed. */
int my_ring_allreduce(mlsys_comm *c, float *buf, size_t count);

#endif
