/* broadcast.c - the root's buffer ends up on every rank. Four algorithms: the root sending
 * to each rank (direct), a binomial tree, a pipelined chain ("ring") and scatter followed by
 * a ring all-gather (van de Geijn).
 *
 * Contract: buf holds count elements on every rank; on the root it is only read, on the
 * others it is only written. Any N, any count (count 0 never reaches here). Ranks are
 * renumbered relative to the root, vr = (r - root + N) mod N, so every algorithm below is
 * written as if the root were rank 0.
 *
 * Binomial tree, N = 8 (vr numbers), who holds the data after each step:
 *
 *   step  mask  messages            ranks holding the data
 *   0     4     0->4                0 4
 *   1     2     0->2 4->6           0 2 4 6
 *   2     1     0->1 2->3 4->5 6->7 all
 *
 * Pipelined chain, N = 4, data cut into S = 3 segments (s0 s1 s2); step t: rank vr forwards
 * segment t - vr to vr + 1 while it receives segment t - vr + 1:
 *
 *   step  0->1  1->2  2->3   rank 3 holds
 *   0     s0    -     -      -
 *   1     s1    s0    -      -
 *   2     s2    s1    s0     s0
 *   3     -     s2    s1     s0 s1
 *   4     -     -     s2     s0 s1 s2       (S + N - 2 = 5 steps)
 *
 * Scatter + all-gather, N = 4: chunk k belongs to vr = k. The binomial scatter gives vr its
 * chunk (step 0: 0->2 chunks 2,3; step 1: 0->1 chunk 1, 2->3 chunk 3); then N - 1 ring
 * steps as in all_gather: step k, vr sends chunk (vr - k) mod N to vr + 1. */
#include "coll.h"
#include <stdlib.h>

static int rel(int r, int root, int n) { return (r - root + n) % n; }
static int real(int vr, int root, int n) { return (vr + root) % n; }

/* direct: the root posts one send per rank and waits for all; N - 1 messages leave one rank. */
int coll_broadcast_direct(mlsys_comm *c, const coll_args *a)
{
    int n = c->size, r = c->rank, rc;
    if ((rc = mlsys_step(c, 0, "root sends to all")))
        return rc;
    int tag = COLL_TAG(MLSYS_COLL_BROADCAST, 0);
    if (r != a->root)
        return mlsys_recv(c, a->recvbuf, a->count, a->dt, a->root, tag);
    mlsys_request **req = mlsys_xmalloc((size_t)n * sizeof *req);
    int nreq = 0;
    for (int i = 1; i < n && !rc; i++) {
        rc = mlsys_isend(c, a->recvbuf, a->count, a->dt, real(i, a->root, n), tag, &req[nreq]);
        if (!rc)
            nreq++;
    }
    int rc2 = mlsys_waitall(req, nreq);
    free(req);
    return rc ? rc : rc2;
}

int coll_tree_bcast(mlsys_comm *c, void *buf, size_t count, mlsys_dtype dt, int root,
                    int step0)
{
    int n = c->size, vr = rel(c->rank, root, n), steps = coll_log2_ceil(n), rc = 0;
    for (int s = 0; s < steps; s++) {
        if ((rc = mlsys_step(c, step0 + s, "broadcast down the tree")))
            return rc;
        int mask = 1 << (steps - 1 - s), tag = COLL_TAG(MLSYS_COLL_BROADCAST, step0 + s);
        int low = vr & (2 * mask - 1);      /* vr mod 2 mask */
        if (low == 0 && vr + mask < n)
            rc = mlsys_send(c, buf, count, dt, real(vr + mask, root, n), tag);
        else if (low == mask)
            rc = mlsys_recv(c, buf, count, dt, real(vr - mask, root, n), tag);
        if (rc)
            return rc;
    }
    return 0;
}

int coll_broadcast_tree(mlsys_comm *c, const coll_args *a)
{
    return coll_tree_bcast(c, a->recvbuf, a->count, a->dt, a->root, 0);
}

/* ring: a chain 0 -> 1 -> ... -> N-1 in segments, so that every link works at once. The
 * transport copies once, so segments are large: 256 KiB, or 1/(8N) of the message when that
 * is larger, which keeps the chain to about 9N steps at most. */
int coll_broadcast_ring(mlsys_comm *c, const coll_args *a)
{
    int n = c->size, vr = rel(c->rank, a->root, n), rc = 0;
    size_t es = dt_size(a->dt), bytes = a->count * es;
    size_t seg_bytes = bytes / (8 * (size_t)n);
    if (seg_bytes < COLL_SEGMENT_BYTES)
        seg_bytes = COLL_SEGMENT_BYTES;
    size_t seg = seg_bytes / es, nseg = (a->count + seg - 1) / seg;
    int prev = vr > 0 ? real(vr - 1, a->root, n) : -1;
    int next = vr < n - 1 ? real(vr + 1, a->root, n) : -1;
    long steps = (long)nseg + n - 2;
    for (long t = 0; t < steps; t++) {
        if ((rc = mlsys_step(c, (int)t, "pipeline")))
            return rc;
        long out = t - vr, in = t - vr + 1;    /* segment sent / received at this step */
        size_t so = 0, sl = 0, ro = 0, rl = 0;
        if (next >= 0 && out >= 0 && out < (long)nseg) {
            so = (size_t)out * seg;
            sl = a->count - so < seg ? a->count - so : seg;
        }
        if (prev >= 0 && in >= 0 && in < (long)nseg) {
            ro = (size_t)in * seg;
            rl = a->count - ro < seg ? a->count - ro : seg;
        }
        rc = coll_exchange(c, coll_at(a->recvbuf, so, a->dt), sl, next,
                           coll_at(a->recvbuf, ro, a->dt), rl, prev,
                           COLL_TAG(MLSYS_COLL_BROADCAST, t), a->dt);
        if (rc)
            return rc;
    }
    return 0;
}

/* scatter_allgather: chunk k (coll_chunk of count into N) belongs to vr = k, so a subtree
 * [vr, vr + m) of the binomial tree owns one contiguous range of buf and nothing is copied. */
int coll_broadcast_scatter_allgather(mlsys_comm *c, const coll_args *a)
{
    int n = c->size, vr = rel(c->rank, a->root, n), steps = coll_log2_ceil(n), rc = 0;
    size_t off, len, end, dummy;
    for (int s = 0; s < steps; s++) {
        if ((rc = mlsys_step(c, s, "scatter")))
            return rc;
        int mask = 1 << (steps - 1 - s), tag = COLL_TAG(MLSYS_COLL_BROADCAST, s);
        int lo = -1, hi = -1, peer = -1, sending = 0;
        if (vr % (2 * mask) == 0 && vr + mask < n) {
            lo = vr + mask;
            peer = lo;
            sending = 1;
        } else if (vr % (2 * mask) == mask) {
            lo = vr;
            peer = vr - mask;
        }
        if (lo < 0)
            continue;
        hi = lo + mask < n ? lo + mask : n;
        coll_chunk(a->count, n, lo, &off, &dummy);
        coll_chunk(a->count, n, hi - 1, &end, &len);
        end += len;
        void *p = coll_at(a->recvbuf, off, a->dt);
        rc = sending ? coll_send(c, p, end - off, a->dt, real(peer, a->root, n), tag)
                     : coll_recv(c, p, end - off, a->dt, real(peer, a->root, n), tag);
        if (rc)
            return rc;
    }
    int right = real((vr + 1) % n, a->root, n), left = real((vr - 1 + n) % n, a->root, n);
    for (int k = 0; k < n - 1; k++) {
        if ((rc = mlsys_step(c, steps + k, "all-gather")))
            return rc;
        size_t so, sl, ro, rl;
        coll_chunk(a->count, n, ((vr - k) % n + n) % n, &so, &sl);
        coll_chunk(a->count, n, ((vr - k - 1) % n + n) % n, &ro, &rl);
        rc = coll_exchange(c, coll_at(a->recvbuf, so, a->dt), sl, right,
                           coll_at(a->recvbuf, ro, a->dt), rl, left,
                           COLL_TAG(MLSYS_COLL_BROADCAST, steps + k), a->dt);
        if (rc)
            return rc;
    }
    return 0;
}

static const coll_algo algos[] = {
    {"direct", coll_broadcast_direct, 0, "the root sends the whole buffer to each rank"},
    {"tree", coll_broadcast_tree, 0, "binomial tree: ceil(log2 N) steps, the data doubles"},
    {"ring", coll_broadcast_ring, 0, "pipelined chain in large segments: every link busy"},
    {"scatter_allgather", coll_broadcast_scatter_allgather, 0,
     "scatter N chunks, then ring all-gather them (large messages)"},
};
static const char *const names[] = {"direct", "tree", "ring", "scatter_allgather", NULL};

static int decide(int n, size_t bytes, const char **why)
{
    if (n == 1) {
        *why = "1 rank: nothing to send";
        return 0;
    }
    if (bytes < COLL_SMALL_BYTES) {
        *why = "< 64 KiB: tree (latency-bound: ceil(log2 N) steps)";
        return 1;
    }
    *why = ">= 64 KiB: ring (pipelined chain: each rank receives the data once, in segments)";
    return 2;
}

const coll_table coll_broadcast_table = {
    MLSYS_COLL_BROADCAST, "broadcast", algos, (int)(sizeof algos / sizeof algos[0]), names,
    decide,
};
