/* api.h - ch02-p2p-timing: the function the learner writes, as the check calls it. */
#ifndef EX_API_H
#define EX_API_H
#include "mlsys.h"

/* Run on 2 ranks. Rank 0 sends buf (count floats) to rank 1 twice: once with blocking
 * mlsys_send / mlsys_recv, once with mlsys_isend / mlsys_irecv followed at once by
 * mlsys_wait. Both ranks time both transfers and store them in microseconds. After the call
 * rank 1's buf must hold rank 0's data. Returns 0 or the runtime's error code. */
int time_p2p(mlsys_comm *c, float *buf, size_t count, double *blocking_us,
             double *nonblocking_us);

#endif
