/* ch02-p2p-timing - reference solution. With nothing to do between isend and wait, the
 * non-blocking transfer takes about as long as the blocking one: "i" only means the call
 * returns at once; the bytes still have to move, and wait is where we sit while they do.
 * The gain comes from doing other work before wait (see ch02/async-communication). */
#include "mlsys.h"
#include "api.h"

int time_p2p(mlsys_comm *c, float *buf, size_t count, double *blocking_us,
             double *nonblocking_us)
{
    int r = mlsys_rank(c), rc;
    uint64_t t0 = mlsys_now_ns();
    if (r == 0)
        rc = mlsys_send(c, buf, count, MLSYS_F32, 1, 0);
    else
        rc = mlsys_recv(c, buf, count, MLSYS_F32, 0, 0);
    if (rc)
        return rc;
    *blocking_us = (double)(mlsys_now_ns() - t0) / 1000.0;

    mlsys_request *q = NULL;
    t0 = mlsys_now_ns();
    if (r == 0)
        rc = mlsys_isend(c, buf, count, MLSYS_F32, 1, 1, &q);
    else
        rc = mlsys_irecv(c, buf, count, MLSYS_F32, 0, 1, &q);
    if (rc)
        return rc;
    rc = mlsys_wait(q);            /* nothing in between: no overlap to gain */
    *nonblocking_us = (double)(mlsys_now_ns() - t0) / 1000.0;
    return rc;
}
