/* reduce_scatter.c - rank i ends with block i (count elements) of the element-wise reduction
 * of every rank's N * count sendbuf. Three algorithms: each rank sends block j straight to
 * rank j (direct), the ring, and recursive halving (power-of-two N only; the dispatcher
 * uses direct otherwise).
 *
 * Contract: sendbuf holds N * count elements and is only read; recvbuf holds count. In
 * place: recvbuf == sendbuf + rank * count (the other blocks of sendbuf are left as they
 * were). Any count >= 1. AVG reduces as SUM; the dispatcher divides once.
 *
 * Ring, N = 4, blocks A B C D; a1+a2 = block A of ranks 1 and 2 reduced. Step k: rank r
 * sends the partial block (r - k - 1) mod N to r + 1, which adds its own copy of that block;
 * the partials travel in two chunk-sized scratch buffers and the last step lands in recvbuf:
 *
 *   step   rank 0 sends / holds       rank 1            rank 2            rank 3
 *   0      d0 / c3+c0                 a1 / d0+d1        b2 / a1+a2        c3 / b2+b3
 *   1      c3+c0 / b2+b3+b0           d0+d1 / c3+c0+c1  a1+a2 / d0+d1+d2  b2+b3 / a1+a2+a3
 *   2      .. / A = a1+a2+a3+a0       .. / B            .. / C            .. / D
 *
 * N - 1 steps, (N - 1) blocks sent per rank: half of a ring all-reduce.
 *
 * Recursive halving, N = 4: step 0 swaps halves with r xor 2 (ranks 0 1 keep blocks A B,
 * ranks 2 3 keep C D, each reducing the half it keeps), step 1 swaps blocks with r xor 1:
 * rank r keeps block r. log2 N steps; the halves sent shrink N/2, N/4, ... blocks. */
#include "coll.h"
#include <stdlib.h>

/* direct: post a send of block j to every rank j, then receive and reduce the N - 1
 * incoming blocks in rank order, starting from our own block. */
int coll_reduce_scatter_direct(mlsys_comm *c, const coll_args *a)
{
    int n = c->size, r = c->rank, rc, nreq = 0;
    int tag = COLL_TAG(MLSYS_COLL_REDUCE_SCATTER, 0);
    if ((rc = mlsys_step(c, 0, "blocks go to their owners")))
        return rc;
    mlsys_request **req = mlsys_xmalloc((size_t)n * sizeof *req);
    for (int k = 1; k < n && !rc; k++) {
        int to = (r + k) % n;
        rc = mlsys_isend(c, coll_at(a->sendbuf, (size_t)to * a->count, a->dt), a->count, a->dt,
                         to, tag, &req[nreq]);
        if (!rc)
            nreq++;
    }
    const void *in = coll_at(a->sendbuf, (size_t)r * a->count, a->dt);
    for (int j = 0; j < n && !rc; j++) {
        if (j == r)
            continue;
        rc = mlsys_recv_reduce(c, in, a->recvbuf, a->count, a->dt, a->op, j, tag);
        in = a->recvbuf;
    }
    int rc2 = mlsys_waitall(req, nreq);
    free(req);
    return rc ? rc : rc2;
}

int coll_ring_reduce_scatter(mlsys_comm *c, const void *sendbuf, void *out, size_t total,
                             mlsys_dtype dt, mlsys_op op, int step0)
{
    int n = c->size, r = c->rank, rc = 0;
    int right = (r + 1) % n, left = (r - 1 + n) % n;
    size_t off0, maxlen;
    coll_chunk(total, n, 0, &off0, &maxlen);       /* chunk 0 is a largest one */
    void *tmp = n > 2 ? coll_scratch(2 * maxlen * dt_size(dt)) : NULL;
    void *part[2] = {tmp, tmp ? coll_at(tmp, maxlen, dt) : NULL};
    size_t so, sl;
    coll_chunk(total, n, (r - 1 + n) % n, &so, &sl);
    const void *cur = coll_at(sendbuf, so, dt);    /* step 0 sends our own copy */
    for (int k = 0; k < n - 1; k++) {
        if ((rc = mlsys_step(c, step0 + k, "reduce-scatter")))
            break;
        size_t ro, rl;
        coll_chunk(total, n, ((r - k - 2) % n + n) % n, &ro, &rl);
        void *dst = k == n - 2 ? out : part[k % 2];
        rc = coll_exchange_reduce(c, cur, sl, right, coll_at(sendbuf, ro, dt), dst, rl, left,
                                  COLL_TAG(MLSYS_COLL_REDUCE_SCATTER, step0 + k), dt, op);
        if (rc)
            break;
        cur = dst;
        sl = rl;
    }
    coll_scratch_free(tmp);
    return rc;
}

int coll_reduce_scatter_ring(mlsys_comm *c, const coll_args *a)
{
    return coll_ring_reduce_scatter(c, a->sendbuf, a->recvbuf, (size_t)c->size * a->count,
                                    a->dt, a->op, 0);
}

/* recursive_halving: keep the half of the block range on our side of the bit, send the
 * other half; partials live in a scratch of N blocks (indexed like sendbuf), the last step
 * writes recvbuf. */
int coll_reduce_scatter_recursive_halving(mlsys_comm *c, const coll_args *a)
{
    int n = c->size, r = c->rank, rc = 0, step = 0;
    size_t cnt = a->count;
    void *tmp = n > 2 ? coll_scratch((size_t)n * cnt * dt_size(a->dt)) : NULL;
    const void *src = a->sendbuf;
    int lo = 0, hi = n;
    for (int mask = n / 2; mask >= 1; mask >>= 1, step++) {
        if ((rc = mlsys_step(c, step, "reduce-scatter")))
            break;
        int mid = lo + (hi - lo) / 2, peer = r ^ mask;
        int keep_lo = (r & mask) ? mid : lo, give_lo = (r & mask) ? lo : mid;
        size_t half = (size_t)(hi - lo) / 2 * cnt;
        void *out = mask == 1 ? a->recvbuf : coll_at(tmp, (size_t)keep_lo * cnt, a->dt);
        rc = coll_exchange_reduce(c, coll_at(src, (size_t)give_lo * cnt, a->dt), half, peer,
                                  coll_at(src, (size_t)keep_lo * cnt, a->dt), out, half, peer,
                                  COLL_TAG(MLSYS_COLL_REDUCE_SCATTER, step), a->dt, a->op);
        if (rc)
            break;
        src = tmp;
        hi = keep_lo + (hi - lo) / 2;
        lo = keep_lo;
    }
    coll_scratch_free(tmp);
    return rc;
}

static const coll_algo algos[] = {
    {"direct", coll_reduce_scatter_direct, 0, "each rank sends block j straight to rank j"},
    {"ring", coll_reduce_scatter_ring, 0, "N-1 steps round a ring, one partial block per step"},
    {"recursive_halving", coll_reduce_scatter_recursive_halving, COLL_NEEDS_POW2,
     "log2 N steps, the exchanged half shrinking (power-of-two N)"},
};
static const char *const names[] = {"direct", "ring", "recursive_halving", NULL};

static int decide(int n, size_t bytes, const char **why)
{
    if (n == 1) {
        *why = "1 rank: copy";
        return 0;
    }
    if (coll_is_pow2(n) && bytes * (size_t)n < COLL_SMALL_BYTES) {
        *why = "< 64 KiB in all and N a power of two: recursive_halving (log2 N steps)";
        return 2;
    }
    *why = "otherwise: ring (N-1 steps, each rank sends N-1 blocks: bandwidth-optimal)";
    return 1;
}

const coll_table coll_reduce_scatter_table = {
    MLSYS_COLL_REDUCE_SCATTER, "reduce_scatter", algos, (int)(sizeof algos / sizeof algos[0]),
    names, decide,
};
