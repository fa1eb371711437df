/* allgather.c - every rank ends with the N blocks of count elements, block i from rank i.
 * Three algorithms: everyone sends to everyone at once (direct), the ring, and recursive
 * doubling (power-of-two N only; the dispatcher uses direct otherwise).
 *
 * Contract: sendbuf holds count elements and is only read; recvbuf holds N * count. In
 * place: sendbuf == recvbuf + rank * count (then nothing is copied). Any count >= 1.
 *
 * Ring, N = 4, blocks A B C D (block i is rank i's sendbuf). Step k: rank r sends block
 * (r - k) mod N to r + 1 and receives block (r - k - 1) mod N from r - 1:
 *
 *   after step   rank 0     rank 1     rank 2     rank 3
 *   (start)      A          B          C          D
 *   0            A D        A B        B C        C D
 *   1            A C D      A B D      A B C      B C D
 *   2            all        all        all        all
 *
 * N - 1 steps; each rank sends and receives (N - 1) blocks, the minimum.
 *
 * Recursive doubling, N = 4: step k exchanges everything gathered so far with r xor 2^k,
 * the held range doubling each time:
 *
 *   step  pairs    rank 0    rank 1    rank 2    rank 3
 *   0     0-1 2-3  A B       A B       C D       C D
 *   1     0-2 1-3  all       all       all       all */
#include "coll.h"
#include <stdlib.h>

static void place_own(mlsys_comm *c, const coll_args *a)
{
    coll_copy(coll_at(a->recvbuf, (size_t)c->rank * a->count, a->dt), a->sendbuf, a->count,
              a->dt);
}

typedef struct own_block { mlsys_comm *c; const coll_args *a; } own_block;

static void place_own_cb(void *arg)
{
    const own_block *o = arg;
    place_own(o->c, o->a);
}

/* direct: post a receive from each rank and a send to each rank, then wait for all. */
int coll_allgather_direct(mlsys_comm *c, const coll_args *a)
{
    int n = c->size, r = c->rank, rc, nreq = 0;
    int tag = COLL_TAG(MLSYS_COLL_ALLGATHER, 0);
    if ((rc = mlsys_step(c, 0, "everyone sends to all")))
        return rc;
    place_own(c, a);
    mlsys_request **req = mlsys_xmalloc(2 * (size_t)n * sizeof *req);
    for (int k = 1; k < n; k++) {
        int from = (r - k + n) % n, to = (r + k) % n;
        rc = mlsys_irecv(c, coll_at(a->recvbuf, (size_t)from * a->count, a->dt), a->count, a->dt,
                         from, tag, &req[nreq]);
        if (rc)
            break;
        nreq++;
        rc = mlsys_isend(c, a->sendbuf, a->count, a->dt, to, tag, &req[nreq]);
        if (rc)
            break;
        nreq++;
    }
    int rc2 = mlsys_waitall(req, nreq);
    free(req);
    return rc ? rc : rc2;
}

int coll_allgather_ring(mlsys_comm *c, const coll_args *a)
{
    int n = c->size, r = c->rank, rc = 0;
    int right = (r + 1) % n, left = (r - 1 + n) % n;
    own_block own = {c, a};
    for (int k = 0; k < n - 1; k++) {
        if ((rc = mlsys_step(c, k, "all-gather")))
            return rc;
        size_t sb = (size_t)((r - k + n) % n), rb = (size_t)((r - k - 1 + 2 * n) % n);
        /* step 0 sends our block straight from sendbuf and copies it into place while the
         * right neighbour reads it: the two copies overlap instead of queueing */
        const void *sbuf = k ? coll_at(a->recvbuf, sb * a->count, a->dt) : a->sendbuf;
        rc = coll_exchange_during(c, sbuf, a->count, right,
                                  coll_at(a->recvbuf, rb * a->count, a->dt), a->count, left,
                                  COLL_TAG(MLSYS_COLL_ALLGATHER, k), a->dt,
                                  k ? NULL : place_own_cb, &own);
        if (rc)
            return rc;
    }
    return 0;
}

int coll_allgather_recursive_doubling(mlsys_comm *c, const coll_args *a)
{
    int n = c->size, r = c->rank, rc = 0, step = 0;
    place_own(c, a);
    for (int mask = 1; mask < n; mask <<= 1, step++) {
        if ((rc = mlsys_step(c, step, "exchange")))
            return rc;
        int peer = r ^ mask;
        size_t mine = (size_t)(r & ~(mask - 1)), theirs = (size_t)(peer & ~(mask - 1));
        size_t len = (size_t)mask * a->count;
        rc = coll_exchange(c, coll_at(a->recvbuf, mine * a->count, a->dt), len, peer,
                           coll_at(a->recvbuf, theirs * a->count, a->dt), len, peer,
                           COLL_TAG(MLSYS_COLL_ALLGATHER, step), a->dt);
        if (rc)
            return rc;
    }
    return 0;
}

static const coll_algo algos[] = {
    {"direct", coll_allgather_direct, 0, "every rank sends its block to every rank at once"},
    {"ring", coll_allgather_ring, 0, "N-1 steps round a ring, one block per step"},
    {"recursive_doubling", coll_allgather_recursive_doubling, COLL_NEEDS_POW2,
     "log2 N steps, the gathered range doubling (power-of-two N)"},
};
static const char *const names[] = {"direct", "ring", "recursive_doubling", NULL};

static int decide(int n, size_t bytes, const char **why)
{
    if (n == 1) {
        *why = "1 rank: copy";
        return 0;
    }
    if (coll_is_pow2(n) && bytes * (size_t)n < COLL_SMALL_BYTES) {
        *why = "< 64 KiB gathered and N a power of two: recursive_doubling (log2 N steps)";
        return 2;
    }
    *why = "otherwise: ring (N-1 steps, each rank moves only the N-1 blocks it lacks)";
    return 1;
}

const coll_table coll_allgather_table = {
    MLSYS_COLL_ALLGATHER, "all_gather", algos, (int)(sizeof algos / sizeof algos[0]), names,
    decide,
};
