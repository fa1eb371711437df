/* ch02-p2p-timing - blocking against non-blocking, timed.
 *
 * Rank 0 sends a buffer to rank 1 twice: with blocking mlsys_send/mlsys_recv, and with
 * mlsys_isend/mlsys_irecv followed immediately by mlsys_wait. Time both on both ranks, in
 * microseconds (mlsys_now_ns() is a monotonic clock in nanoseconds).
 *
 * The check runs N = 2 with a buffer of 1M floats (4 MiB): both times must be positive and finite, and
 * rank 1 must end up with rank 0's data. Then think: is one faster? Why (not)?
 * (mlsys-lab check ch02-predict-overlap asks.)
 *
 *   mlsys-lab check ch02-p2p-timing      mlsys-lab hint ch02-p2p-timing */
#include "mlsys.h"
#include "api.h"

int time_p2p(mlsys_comm *c, float *buf, size_t count, double *blocking_us,
             double *nonblocking_us)
{
    (void)c;
    (void)buf;
    (void)count;
    /* TODO: time a blocking transfer, then a non-blocking one */
    *blocking_us = 0.0;
    *nonblocking_us = 0.0;
    return 0;
}
