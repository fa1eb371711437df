/* ch03-ring-allreduce - reference solution: ring all-reduce from isend/irecv.
 *
 * Chunk i is [i*count/N, (i+1)*count/N): sizes differ by at most one element, and some are
 * empty when count < N (empty chunks still travel, so every rank sends 2(N-1) messages).
 *
 * Reduce-scatter, step k = 0..N-2: send chunk (r-k) mod N to the right, receive chunk
 * (r-k-1) mod N from the left into a scratch buffer and add it in. After N-1 steps rank r
 * holds the complete sum of chunk (r+1) mod N.
 * All-gather, step k = 0..N-2: send chunk (r+1-k) mod N to the right, receive chunk
 * (r-k) mod N from the left straight into place.
 *
 * Posting the receive and the send together (then waiting for both) is what keeps the
 * ring from deadlocking: with a synchronous send, "everyone sends first" never finishes. */
#include "mlsys.h"
#include "api.h"
#include <stdlib.h>

static size_t lo_of(int i, size_t count, int n)
{
    return (size_t)i * count / (size_t)n;
}

static int mod(int a, int n)
{
    return ((a % n) + n) % n;
}

int my_ring_allreduce(mlsys_comm *c, float *buf, size_t count)
{
    int n = mlsys_size(c), r = mlsys_rank(c);
    if (n == 1)
        return 0;
    int right = mod(r + 1, n), left = mod(r - 1, n);
    size_t max_chunk = count / (size_t)n + 1;
    float *tmp = malloc(max_chunk * sizeof *tmp);
    if (!tmp)
        return MLSYS_ERR_SYS;
    int rc = 0;
    for (int k = 0; k < n - 1 && !rc; k++) {
        int s = mod(r - k, n), g = mod(r - k - 1, n);
        size_t s0 = lo_of(s, count, n), s1 = lo_of(s + 1, count, n);
        size_t g0 = lo_of(g, count, n), g1 = lo_of(g + 1, count, n);
        mlsys_request *q[2] = {NULL, NULL};
        rc = mlsys_irecv(c, tmp, g1 - g0, MLSYS_F32, left, 0, &q[0]);
        if (!rc)
            rc = mlsys_isend(c, buf + s0, s1 - s0, MLSYS_F32, right, 0, &q[1]);
        int rc2 = mlsys_waitall(q, 2);
        rc = rc ? rc : rc2;
        for (size_t i = 0; !rc && i < g1 - g0; i++)
            buf[g0 + i] += tmp[i];
    }
    for (int k = 0; k < n - 1 && !rc; k++) {
        int s = mod(r + 1 - k, n), g = mod(r - k, n);
        size_t s0 = lo_of(s, count, n), s1 = lo_of(s + 1, count, n);
        size_t g0 = lo_of(g, count, n), g1 = lo_of(g + 1, count, n);
        mlsys_request *q[2] = {NULL, NULL};
        rc = mlsys_irecv(c, buf + g0, g1 - g0, MLSYS_F32, left, 0, &q[0]);
        if (!rc)
            rc = mlsys_isend(c, buf + s0, s1 - s0, MLSYS_F32, right, 0, &q[1]);
        int rc2 = mlsys_waitall(q, 2);
        rc = rc ? rc : rc2;
    }
    free(tmp);
    return rc;
}
