/* gather.c - the root ends with N blocks of count elements, block i from rank i. Two
 * algorithms: the root receives from each rank (direct) and a binomial tree.
 *
 * Contract: sendbuf (count elements) is only read; recvbuf (N * count) is written on the
 * root only and may be NULL elsewhere. In place at the root: sendbuf == recvbuf + root *
 * count. Any count >= 1.
 *
 * Binomial tree, N = 8, vr = (r - root) mod N; a rank collects its subtree's blocks
 * [vr, vr + m) in order, then sends them up in one message:
 *
 *   step  mask  messages (blocks)                        rank 0 holds
 *   0     1     1->0 (1)  3->2 (3)  5->4 (5)  7->6 (7)   0 1
 *   1     2     2->0 (2,3)          6->4 (6,7)           0 1 2 3
 *   2     4     4->0 (4,5,6,7)                           all
 *
 * ceil(log2 N) steps instead of N - 1 messages into the root, but inner ranks copy their
 * subtree's data once more. The blocks arrive in vr order; a root other than 0 rotates
 * them into rank order at the end. */
#include "coll.h"
#include <stdlib.h>

int coll_gather_direct(mlsys_comm *c, const coll_args *a)
{
    int n = c->size, r = c->rank, rc, nreq = 0;
    int tag = COLL_TAG(MLSYS_COLL_GATHER, 0);
    if ((rc = mlsys_step(c, 0, "all send to the root")))
        return rc;
    if (r != a->root)
        return mlsys_send(c, a->sendbuf, a->count, a->dt, a->root, tag);
    coll_copy(coll_at(a->recvbuf, (size_t)r * a->count, a->dt), a->sendbuf, a->count, a->dt);
    mlsys_request **req = mlsys_xmalloc((size_t)n * sizeof *req);
    for (int i = 0; i < n && !rc; i++) {
        if (i == r)
            continue;
        rc = mlsys_irecv(c, coll_at(a->recvbuf, (size_t)i * a->count, a->dt), a->count, a->dt, i,
                         tag, &req[nreq]);
        if (!rc)
            nreq++;
    }
    int rc2 = mlsys_waitall(req, nreq);
    free(req);
    return rc ? rc : rc2;
}

int coll_gather_tree(mlsys_comm *c, const coll_args *a)
{
    int n = c->size, root = a->root, vr = (c->rank - root + n) % n, rc = 0;
    int steps = coll_log2_ceil(n);
    size_t cnt = a->count, es = dt_size(a->dt);
    int low = vr ? (vr & -vr) : n;                 /* subtree: [vr, vr + sub) */
    int sub = low < n - vr ? low : n - vr;
    void *tmp = NULL, *work = NULL;                /* our subtree's blocks, in vr order */
    if (vr == 0 && root == 0) {
        work = a->recvbuf;
    } else if (sub > 1) {
        work = tmp = coll_scratch((size_t)sub * cnt * es);
    }
    if (work)
        coll_copy(work, a->sendbuf, cnt, a->dt);
    const void *buf = work ? work : a->sendbuf;    /* a leaf sends its sendbuf as it is */
    int sent = 0;
    for (int s = 0; s < steps && !rc; s++) {
        if ((rc = mlsys_step(c, s, "gather up the tree")))
            break;
        int mask = 1 << s, tag = COLL_TAG(MLSYS_COLL_GATHER, s);
        if (sent)
            continue;
        if (vr & mask) {
            rc = mlsys_send(c, buf, (size_t)sub * cnt, a->dt, (vr - mask + root) % n, tag);
            sent = 1;
        } else if (vr + mask < n) {
            int child = vr + mask, m = mask < n - child ? mask : n - child;
            rc = mlsys_recv(c, coll_at(work, (size_t)mask * cnt, a->dt), (size_t)m * cnt, a->dt,
                            (child + root) % n, tag);
        }
    }
    if (!rc && vr == 0 && root != 0)
        for (int j = 0; j < n; j++)      /* block of vr j belongs to rank (j + root) mod N */
            coll_copy(coll_at(a->recvbuf, (size_t)((j + root) % n) * cnt, a->dt),
                      coll_at(work, (size_t)j * cnt, a->dt), cnt, a->dt);
    coll_scratch_free(tmp);
    return rc;
}

static const coll_algo algos[] = {
    {"direct", coll_gather_direct, 0, "every rank sends its block to the root"},
    {"tree", coll_gather_tree, 0, "binomial tree: subtrees forward their blocks together"},
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
    *why = "otherwise: direct (the root must take in N-1 blocks anyway; no extra copies)";
    return 0;
}

const coll_table coll_gather_table = {
    MLSYS_COLL_GATHER, "gather", algos, (int)(sizeof algos / sizeof algos[0]), names, decide,
};
