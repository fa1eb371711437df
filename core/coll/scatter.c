/* scatter.c - block i (count elements) of the root's sendbuf lands in rank i's recvbuf. Two
 * algorithms: the root sends to each rank (direct) and a binomial tree.
 *
 * Contract: sendbuf (N * count) is read on the root only and may be NULL elsewhere; recvbuf
 * (count) is only written. In place at the root: recvbuf == sendbuf + root * count. Any
 * count >= 1.
 *
 * Binomial tree, N = 8, vr = (r - root) mod N; a rank receives its subtree's blocks
 * [vr, vr + m) in one message and hands the upper halves on:
 *
 *   step  mask  messages (blocks)                        ranks holding their block
 *   0     4     0->4 (4,5,6,7)                           0 4
 *   1     2     0->2 (2,3)          4->6 (6,7)           0 2 4 6
 *   2     1     0->1 (1)  2->3 (3)  4->5 (5)  6->7 (7)   all
 *
 * A root other than 0 first rotates its blocks into vr order (one copy). */
#include "coll.h"
#include <stdlib.h>

int coll_scatter_direct(mlsys_comm *c, const coll_args *a)
{
    int n = c->size, r = c->rank, rc, nreq = 0;
    int tag = COLL_TAG(MLSYS_COLL_SCATTER, 0);
    if ((rc = mlsys_step(c, 0, "root sends to all")))
        return rc;
    if (r != a->root)
        return mlsys_recv(c, a->recvbuf, a->count, a->dt, a->root, tag);
    mlsys_request **req = mlsys_xmalloc((size_t)n * sizeof *req);
    for (int i = 0; i < n && !rc; i++) {
        if (i == r)
            continue;
        rc = mlsys_isend(c, coll_at(a->sendbuf, (size_t)i * a->count, a->dt), a->count, a->dt, i,
                         tag, &req[nreq]);
        if (!rc)
            nreq++;
    }
    coll_copy(a->recvbuf, coll_at(a->sendbuf, (size_t)r * a->count, a->dt), a->count, a->dt);
    int rc2 = mlsys_waitall(req, nreq);
    free(req);
    return rc ? rc : rc2;
}

int coll_scatter_tree(mlsys_comm *c, const coll_args *a)
{
    int n = c->size, root = a->root, vr = (c->rank - root + n) % n, rc = 0;
    int steps = coll_log2_ceil(n);
    size_t cnt = a->count, es = dt_size(a->dt);
    int low = vr ? (vr & -vr) : n;                 /* subtree: [vr, vr + sub) */
    int sub = low < n - vr ? low : n - vr;
    void *tmp = NULL, *work = a->recvbuf;          /* our subtree's blocks, in vr order */
    const void *out;                               /* where we send from */
    if (vr == 0 && root == 0) {
        work = NULL;
        out = a->sendbuf;
    } else if (vr == 0) {
        tmp = coll_scratch((size_t)n * cnt * es);
        for (int j = 0; j < n; j++)
            coll_copy(coll_at(tmp, (size_t)j * cnt, a->dt),
                      coll_at(a->sendbuf, (size_t)((j + root) % n) * cnt, a->dt), cnt, a->dt);
        work = NULL;
        out = tmp;
    } else {
        if (sub > 1)
            work = tmp = coll_scratch((size_t)sub * cnt * es);
        out = work;
    }
    for (int s = 0; s < steps && !rc; s++) {
        if ((rc = mlsys_step(c, s, "scatter down the tree")))
            break;
        int mask = 1 << (steps - 1 - s), tag = COLL_TAG(MLSYS_COLL_SCATTER, s);
        if (vr % (2 * mask) == 0 && vr + mask < n) {
            int child = vr + mask, m = mask < n - child ? mask : n - child;
            rc = mlsys_send(c, coll_at(out, (size_t)mask * cnt, a->dt), (size_t)m * cnt, a->dt,
                            (child + root) % n, tag);
        } else if (vr % (2 * mask) == mask) {
            rc = mlsys_recv(c, work, (size_t)sub * cnt, a->dt, (vr - mask + root) % n, tag);
        }
    }
    if (!rc)
        coll_copy(a->recvbuf, vr == 0 ? coll_at(a->sendbuf, (size_t)root * cnt, a->dt) : out, cnt,
                  a->dt);
    coll_scratch_free(tmp);
    return rc;
}

static const coll_algo algos[] = {
    {"direct", coll_scatter_direct, 0, "the root sends each rank its block"},
    {"tree", coll_scatter_tree, 0, "binomial tree: each rank forwards the upper half it got"},
};
static const char *const names[] = {"direct", "tree", NULL};

static int decide(int n, size_t bytes, const char **why)
{
    if (n == 1) {
        *why = "1 rank: copy";
        return 0;
    }
    if (n > 2 && bytes < COLL_SMALL_BYTES) {
        *why = "< 64 KiB per rank and N > 2: tree (latency-bound: ceil(log2 N) steps)";
        return 1;
    }
    *why = "otherwise: direct (the root must send N-1 blocks anyway; no extra copies)";
    return 0;
}

const coll_table coll_scatter_table = {
    MLSYS_COLL_SCATTER, "scatter", algos, (int)(sizeof algos / sizeof algos[0]), names, decide,
};
