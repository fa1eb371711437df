/* barrier.c - no rank leaves before every rank has arrived. Two algorithms: everyone checks
 * in with rank 0, which then releases everyone (direct), and dissemination.
 *
 * Contract: any N >= 2 (one rank returns at once). Messages carry one int32 token.
 *
 * Dissemination, N = 5: at step k rank r signals r + 2^k and waits for r - 2^k. After step
 * k a rank has heard, directly or through others, from the 2^(k+1) - 1 ranks before it:
 *
 *   step  rank r signals   rank 0 has heard from (itself and)
 *   0     r + 1            4
 *   1     r + 2            4 3 2
 *   2     r + 4            4 3 2 1   (everyone: ceil(log2 5) = 3 steps)
 *
 * No rank is a bottleneck, unlike direct where rank 0 takes N - 1 messages, then sends N - 1. */
#include "coll.h"
#include <stdlib.h>

int coll_barrier_direct(mlsys_comm *c, const coll_args *a)
{
    int n = c->size, r = c->rank, rc;
    int32_t token = r, got = 0;
    int tag0 = COLL_TAG(MLSYS_COLL_BARRIER, 0), tag1 = COLL_TAG(MLSYS_COLL_BARRIER, 1);
    (void)a;
    if ((rc = mlsys_step(c, 0, "check in at rank 0")))
        return rc;
    if (r != 0) {
        if ((rc = mlsys_send(c, &token, 1, MLSYS_I32, 0, tag0)))
            return rc;
        if ((rc = mlsys_step(c, 1, "release")))
            return rc;
        return mlsys_recv(c, &got, 1, MLSYS_I32, 0, tag1);
    }
    for (int i = 1; i < n && !rc; i++)
        rc = mlsys_recv(c, &got, 1, MLSYS_I32, i, tag0);
    if (!rc)
        rc = mlsys_step(c, 1, "release");
    if (rc)
        return rc;
    mlsys_request **req = mlsys_xmalloc((size_t)n * sizeof *req);
    int nreq = 0;
    for (int i = 1; i < n && !rc; i++) {
        rc = mlsys_isend(c, &token, 1, MLSYS_I32, i, tag1, &req[nreq]);
        if (!rc)
            nreq++;
    }
    int rc2 = mlsys_waitall(req, nreq);
    free(req);
    return rc ? rc : rc2;
}

int coll_barrier_dissemination(mlsys_comm *c, const coll_args *a)
{
    int n = c->size, r = c->rank, rc = 0;
    int32_t token = r, got = 0;
    (void)a;
    for (int k = 0, dist = 1; dist < n; k++, dist <<= 1) {
        if ((rc = mlsys_step(c, k, "dissemination")))
            return rc;
        rc = coll_exchange(c, &token, 1, (r + dist) % n, &got, 1, (r - dist + n) % n,
                           COLL_TAG(MLSYS_COLL_BARRIER, k), MLSYS_I32);
        if (rc)
            return rc;
    }
    return 0;
}

static const coll_algo algos[] = {
    {"direct", coll_barrier_direct, 0, "everyone checks in with rank 0, which releases all"},
    {"dissemination", coll_barrier_dissemination, 0,
     "step k: signal r+2^k, wait for r-2^k: ceil(log2 N) steps"},
};
static const char *const names[] = {"direct", "dissemination", NULL};

static int decide(int n, size_t bytes, const char **why)
{
    (void)bytes;
    if (n == 1) {
        *why = "1 rank: nothing to wait for";
        return 0;
    }
    if (n == 2) {
        *why = "2 ranks: direct (one message each way)";
        return 0;
    }
    *why = "N > 2: dissemination (ceil(log2 N) steps, no rank is a bottleneck)";
    return 1;
}

const coll_table coll_barrier_table = {
    MLSYS_COLL_BARRIER, "barrier", algos, (int)(sizeof algos / sizeof algos[0]), names, decide,
};
