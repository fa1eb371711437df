/* reduce.c - the element-wise reduction of every rank's sendbuf lands in the root's recvbuf.
 * Three algorithms: the root receiving from each rank in turn (direct), a binomial tree,
 * and a ring reduce-scatter followed by a gather of the chunks (ring).
 *
 * Contract: sendbuf (count elements) is only read on every rank; recvbuf is written on the
 * root only. A non-root's recvbuf may be NULL and is never touched, nor is anything else the
 * caller owns ([fix]: gloo leaves partial sums in non-root buffers; here a rank that needs
 * room for partial sums takes a scratch buffer). In place at the root: sendbuf == recvbuf.
 * AVG reduces as SUM; the dispatcher divides at the root.
 *
 * Binomial tree, N = 8 (vr = (r - root) mod N), what each rank holds after each step
 * (x_a..b = the reduction of the ranks a..b):
 *
 *   step  mask  messages              rank 0    rank 2    rank 4    rank 6
 *   0     1     1->0 3->2 5->4 7->6   x_0..1    x_2..3    x_4..5    x_6..7
 *   1     2     2->0 6->4             x_0..3              x_4..7
 *   2     4     4->0                  x_0..7
 *
 * Ring, N = 4: the reduce-scatter ring of reduce_scatter.c leaves rank r with the complete
 * chunk r (three steps, see the table there), then one step in which the root receives the
 * other N - 1 chunks straight into their place in recvbuf. */
#include "coll.h"
#include <stdlib.h>

/* direct: the root receives from ranks 0, 1, ..., N-1 in that order and reduces as it goes,
 * so the result is ((x0 op x1) op x2) ... whatever the root: the reference order. */
int coll_reduce_direct(mlsys_comm *c, const coll_args *a)
{
    int n = c->size, r = c->rank, root = a->root, rc;
    int tag = COLL_TAG(MLSYS_COLL_REDUCE, 0);
    if ((rc = mlsys_step(c, 0, "root receives from each")))
        return rc;
    if (r != root)
        return mlsys_send(c, a->sendbuf, a->count, a->dt, root, tag);
    const void *own = a->sendbuf;
    void *tmp = NULL, *acc = a->recvbuf;
    if (root != 0 && a->sendbuf == a->recvbuf) {
        /* in place: x0 arrives into recvbuf first, so keep our own contribution aside */
        tmp = coll_scratch(a->count * dt_size(a->dt));
        coll_copy(tmp, a->sendbuf, a->count, a->dt);
        own = tmp;
    }
    for (int i = 0; i < n && !rc; i++) {
        if (i == 0 && root == 0)
            continue;                       /* own data is x0: the next receive starts from it */
        if (i == 0)
            rc = mlsys_recv(c, acc, a->count, a->dt, 0, tag);
        else if (i == root)
            mlsys_reduce_local(acc, acc, own, a->count, a->dt, a->op);
        else
            rc = mlsys_recv_reduce(c, i == 1 && root == 0 ? own : acc, acc, a->count, a->dt,
                                   a->op, i, tag);
    }
    coll_scratch_free(tmp);
    return rc;
}

int coll_tree_reduce(mlsys_comm *c, const void *sendbuf, void *work, size_t count,
                     mlsys_dtype dt, mlsys_op op, int root, int step0)
{
    int n = c->size, vr = (c->rank - root + n) % n, steps = coll_log2_ceil(n), rc = 0;
    const void *acc = sendbuf;      /* what this rank would send up: its data, then partials */
    void *tmp = NULL;
    int sent = 0;
    for (int s = 0; s < steps && !rc; s++) {
        if ((rc = mlsys_step(c, step0 + s, "reduce up the tree")))
            break;
        int mask = 1 << s, tag = COLL_TAG(MLSYS_COLL_REDUCE, step0 + s);
        if (sent)
            continue;
        if (vr & mask) {
            rc = mlsys_send(c, acc, count, dt, (vr - mask + root) % n, tag);
            sent = 1;
        } else if (vr + mask < n) {
            if (!work)
                work = tmp = coll_scratch(count * dt_size(dt));
            rc = mlsys_recv_reduce(c, acc, work, count, dt, op, (vr + mask + root) % n, tag);
            acc = work;
        }
    }
    coll_scratch_free(tmp);
    return rc;
}

int coll_reduce_tree(mlsys_comm *c, const coll_args *a)
{
    return coll_tree_reduce(c, a->sendbuf, c->rank == a->root ? a->recvbuf : NULL, a->count,
                            a->dt, a->op, a->root, 0);
}

int coll_reduce_ring(mlsys_comm *c, const coll_args *a)
{
    int n = c->size, r = c->rank, rc;
    size_t es = dt_size(a->dt), off, len;
    coll_chunk(a->count, n, r, &off, &len);
    void *tmp = NULL, *mine;
    if (r == a->root) {
        mine = coll_at(a->recvbuf, off, a->dt);
    } else {
        tmp = coll_scratch(len * es);
        mine = tmp;
    }
    rc = coll_ring_reduce_scatter(c, a->sendbuf, mine, a->count, a->dt, a->op, 0);
    if (!rc)
        rc = mlsys_step(c, n - 1, "gather chunks at the root");
    int tag = COLL_TAG(MLSYS_COLL_REDUCE, n - 1);
    if (!rc && r != a->root) {
        rc = coll_send(c, mine, len, a->dt, a->root, tag);
    } else if (!rc) {
        mlsys_request **req = mlsys_xmalloc((size_t)n * sizeof *req);
        int nreq = 0;
        for (int i = 0; i < n && !rc; i++) {
            size_t o, l;
            coll_chunk(a->count, n, i, &o, &l);
            if (i == r || l == 0)
                continue;
            rc = mlsys_irecv(c, coll_at(a->recvbuf, o, a->dt), l, a->dt, i, tag, &req[nreq]);
            if (!rc)
                nreq++;
        }
        int rc2 = mlsys_waitall(req, nreq);
        free(req);
        if (!rc)
            rc = rc2;
    }
    coll_scratch_free(tmp);
    return rc;
}

static const coll_algo algos[] = {
    {"direct", coll_reduce_direct, 0, "the root receives from each rank and reduces in rank order"},
    {"tree", coll_reduce_tree, 0, "binomial tree: ceil(log2 N) steps of partial sums"},
    {"ring", coll_reduce_ring, COLL_NEEDS_COUNT_GE_RANKS,
     "ring reduce-scatter, then the root gathers the N reduced chunks"},
};
static const char *const names[] = {"direct", "tree", "ring", NULL};

static int decide(int n, size_t bytes, const char **why)
{
    if (n == 1) {
        *why = "1 rank: copy";
        return 0;
    }
    if (bytes < COLL_SMALL_BYTES) {
        *why = "< 64 KiB: tree (latency-bound: ceil(log2 N) steps)";
        return 1;
    }
    *why = ">= 64 KiB: ring (each rank sends about the data once, the root is no bottleneck)";
    return 2;
}

const coll_table coll_reduce_table = {
    MLSYS_COLL_REDUCE, "reduce", algos, (int)(sizeof algos / sizeof algos[0]), names, decide,
};
