/* ch03-ring-allreduce - ring all-reduce from send and recv.
 *
 * Write my_ring_allreduce(): an in-place SUM all-reduce of `count` floats, using only
 * point-to-point calls (mlsys_send, mlsys_recv, mlsys_isend, mlsys_irecv, mlsys_wait,
 * mlsys_waitall, mlsys_sendrecv). Rank r sends to (r+1) mod N and receives from
 * (r-1) mod N. No mlsys_allreduce, nor any other collective.
 *
 * The check runs N = 1, 2, 3, 4, 8 ranks with lengths 1, N-1, N and 1000003 and asserts:
 *   - every rank ends with the elementwise sum of all ranks' buffers;
 *   - no collective was called, and each rank sent exactly 2(N-1) messages (when
 *     count < N some chunks are empty: send those too);
 *   - each rank sent about 2(N-1)/N of the buffer's bytes (within one chunk).
 *
 * The shape: cut the buffer into N chunks. First N-1 steps where every rank passes one
 * chunk to the right and adds the chunk arriving from the left (reduce-scatter), then N-1
 * steps where the finished chunks travel round (all-gather).
 *
 *   mlsys-lab check ch03-ring-allreduce      mlsys-lab hint ch03-ring-allreduce */
#include "mlsys.h"
#include "api.h"

int my_ring_allreduce(mlsys_comm *c, float *buf, size_t count)
{
    int n = mlsys_size(c), r = mlsys_rank(c);
    (void)r;
    (void)buf;
    (void)count;
    if (n == 1)
        return 0;       /* one rank: its buffer already is the sum */

    /* TODO: phase 1, reduce-scatter: N-1 steps */

    /* TODO: phase 2, all-gather: N-1 steps */

    return 0;
}
