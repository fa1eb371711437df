/* allreduce.c - every rank ends with the element-wise reduction of all sendbufs. Five
 * algorithms: reduce to rank 0 then broadcast (direct), the ring (reduce-scatter, then
 * all-gather), binomial tree reduce + broadcast (tree), recursive doubling and Rabenseifner's
 * recursive halving (reduce-scatter by halving, all-gather by doubling).
 *
 * Contract: sendbuf and recvbuf hold count elements; sendbuf is only read (in place:
 * sendbuf == recvbuf). Any N >= 2 and any count >= 1 (the dispatcher handles 1 rank and
 * count 0); ring needs count >= N (else the dispatcher uses direct); the recursive ones fold
 * non-powers of two first. AVG reduces as SUM; the dispatcher divides once.
 *
 * Ring, N = 4, chunks A B C D (chunk k = coll_chunk(count, 4, k)); a0+a1 means chunk A of
 * ranks 0 and 1 reduced. Reduce-scatter step k: rank r sends chunk (r - k) mod N to r + 1,
 * which reduces it into its own copy; after N - 1 steps rank r owns chunk (r + 1) mod N:
 *
 *   after step   rank 0            rank 1            rank 2            rank 3
 *   RS 0         d3+d0             a0+a1             b1+b2             c2+c3
 *   RS 1         c2+c3+c0          d3+d0+d1          a0+a1+a2          b1+b2+b3
 *   RS 2         B = b1+b2+b3+b0   C = c2+c3+c0+c1   D = d3+d0+d1+d2   A = a0+a1+a2+a3
 *
 * All-gather step k: rank r sends chunk (r + 1 - k) mod N to r + 1, which overwrites:
 *
 *   AG 0         A B               B C               C D               D A
 *   AG 1         A B D             A B C             B C D             C D A
 *   AG 2         all               all               all               all
 *
 * 2(N - 1) steps and 2(N - 1) sends per rank of about count/N elements each: every rank
 * sends 2(N - 1)/N of the data, which no algorithm can beat. Out of place, the first step
 * reads sendbuf and every chunk of recvbuf is written exactly once per phase: no copy.
 *
 * Recursive doubling, N = 4: step k exchanges the whole vector with rank r xor 2^k:
 *
 *   step  pairs          rank 0      rank 1      rank 2      rank 3
 *   0     0-1 2-3        x0+x1       x0+x1       x2+x3       x2+x3
 *   1     0-2 1-3        x0..3       x0..3       x0..3       x0..3
 *
 * N not a power of two (MPICH's fold): with p the largest power of two <= N and rem = N - p,
 * each even rank r < 2 rem first gives its vector to r + 1 and sits out; the p remaining
 * ranks (new numbers: r / 2 for the odd ones, r - rem above 2 rem) run the algorithm; then
 * each odd r < 2 rem hands the result back to r - 1. N = 6: fold 0->1 2->3, then p = 4
 * over old ranks 1 3 4 5, then unfold 1->0 3->2.
 *
 * Recursive halving (Rabenseifner), p = 4, the vector in 4 chunks A B C D:
 *
 *   step           rank 0          rank 1          rank 2          rank 3
 *   RS 0 (0-2 1-3) A B of x0+x2    A B of x1+x3    C D of x0+x2    C D of x1+x3
 *   RS 1 (0-1 2-3) A of x0..3      B of x0..3      C of x0..3      D of x0..3
 *   AG 0 (0-1 2-3) A B             A B             C D             C D
 *   AG 1 (0-2 1-3) all             all             all             all
 *
 * Each rank sends 2(p - 1)/p of the data, like the ring, in 2 log2 p steps. */
#include "coll.h"
#include <stdlib.h>

static int mod(int a, int n) { return (a % n + n) % n; }

/* Where chunk k of n starts (k == n: the end of the vector). */
static size_t chunk_off(size_t count, int n, int k)
{
    size_t off, len;
    coll_chunk(count, n, k, &off, &len);
    return off;
}

/* direct: rank 0 receives from 1, 2, ... in order, reducing as it goes, then sends the
 * result to each rank. 2(N - 1) messages through one rank: the baseline. */
int coll_allreduce_direct(mlsys_comm *c, const coll_args *a)
{
    int n = c->size, r = c->rank, rc;
    int tag0 = COLL_TAG(MLSYS_COLL_ALLREDUCE, 0), tag1 = COLL_TAG(MLSYS_COLL_ALLREDUCE, 1);
    if ((rc = mlsys_step(c, 0, "reduce at rank 0")))
        return rc;
    if (r != 0) {
        if ((rc = mlsys_send(c, a->sendbuf, a->count, a->dt, 0, tag0)))
            return rc;
        if ((rc = mlsys_step(c, 1, "rank 0 sends to all")))
            return rc;
        return mlsys_recv(c, a->recvbuf, a->count, a->dt, 0, tag1);
    }
    for (int i = 1; i < n && !rc; i++)
        rc = mlsys_recv_reduce(c, i == 1 ? a->sendbuf : a->recvbuf, a->recvbuf, a->count, a->dt,
                               a->op, i, tag0);
    if (!rc)
        rc = mlsys_step(c, 1, "rank 0 sends to all");
    if (rc)
        return rc;
    mlsys_request **req = mlsys_xmalloc((size_t)n * sizeof *req);
    int nreq = 0;
    for (int i = 1; i < n && !rc; i++) {
        rc = mlsys_isend(c, a->recvbuf, a->count, a->dt, i, tag1, &req[nreq]);
        if (!rc)
            nreq++;
    }
    int rc2 = mlsys_waitall(req, nreq);
    free(req);
    return rc ? rc : rc2;
}

int coll_allreduce_ring(mlsys_comm *c, const coll_args *a)
{
    int n = c->size, r = c->rank, rc = 0;
    int right = (r + 1) % n, left = (r - 1 + n) % n;
    for (int k = 0; k < n - 1; k++) {
        if ((rc = mlsys_step(c, k, "reduce-scatter")))
            return rc;
        size_t so, sl, ro, rl;
        coll_chunk(a->count, n, mod(r - k, n), &so, &sl);
        coll_chunk(a->count, n, mod(r - k - 1, n), &ro, &rl);
        const void *src = k == 0 ? a->sendbuf : a->recvbuf;
        rc = coll_exchange_reduce(c, coll_at(src, so, a->dt), sl, right,
                                  coll_at(a->sendbuf, ro, a->dt), coll_at(a->recvbuf, ro, a->dt),
                                  rl, left, COLL_TAG(MLSYS_COLL_ALLREDUCE, k), a->dt, a->op);
        if (rc)
            return rc;
    }
    for (int k = 0; k < n - 1; k++) {
        int step = n - 1 + k;
        if ((rc = mlsys_step(c, step, "all-gather")))
            return rc;
        size_t so, sl, ro, rl;
        coll_chunk(a->count, n, mod(r + 1 - k, n), &so, &sl);
        coll_chunk(a->count, n, mod(r - k, n), &ro, &rl);
        rc = coll_exchange(c, coll_at(a->recvbuf, so, a->dt), sl, right,
                           coll_at(a->recvbuf, ro, a->dt), rl, left,
                           COLL_TAG(MLSYS_COLL_ALLREDUCE, step), a->dt);
        if (rc)
            return rc;
    }
    return 0;
}

/* tree: binomial reduce to rank 0 accumulating in recvbuf (every rank's recvbuf is written
 * anyway), then binomial broadcast of it: 2 ceil(log2 N) steps. */
int coll_allreduce_tree(mlsys_comm *c, const coll_args *a)
{
    int rc = coll_tree_reduce(c, a->sendbuf, a->recvbuf, a->count, a->dt, a->op, 0, 0);
    if (rc)
        return rc;
    return coll_tree_bcast(c, a->recvbuf, a->count, a->dt, 0, coll_log2_ceil(c->size));
}

/* The power-of-two core of the recursive algorithms: rank r's number in it, or -1 when r
 * folds its data into r + 1 and sits out; and the way back. */
typedef struct fold { int p, rem, newr; } fold;

static fold fold_of(int n, int r)
{
    fold f;
    f.p = coll_pow2_floor(n);
    f.rem = n - f.p;
    if (r < 2 * f.rem)
        f.newr = (r & 1) ? r / 2 : -1;
    else
        f.newr = r - f.rem;
    return f;
}

static int fold_real(const fold *f, int newr)
{
    return newr < f->rem ? 2 * newr + 1 : newr + f->rem;
}

/* recursive_doubling: log2 p exchanges of the whole vector. The peer reads our send buffer
 * in place while we receive, so the two never share memory: each reduction writes the buffer
 * we are not sending from (recvbuf or a scratch, alternating; the first choice is made so
 * that the last result lands in recvbuf whenever possible). */
int coll_allreduce_recursive_doubling(mlsys_comm *c, const coll_args *a)
{
    int n = c->size, r = c->rank, rc = 0, step = 0;
    fold f = fold_of(n, r);
    int logp = coll_log2_ceil(f.p);
    size_t bytes = a->count * dt_size(a->dt);
    void *tmp = NULL;
    const void *cur = a->sendbuf;
    void *outs[2] = {NULL, NULL};
    /* a latency-bound call: its few bytes of scratch on the stack, not from malloc (the
     * exchanges all complete before we return) */
    _Alignas(64) unsigned char small[COLL_STACK_SCRATCH];

    if (f.newr >= 0) {
        int reductions = logp + (r < 2 * f.rem ? 1 : 0);
        tmp = bytes <= sizeof small ? small : coll_scratch(bytes);
        void *first = (reductions & 1) ? a->recvbuf : tmp;
        if (first == a->sendbuf)
            first = tmp;          /* in place and an odd number of reductions: one copy */
        outs[0] = first;
        outs[1] = first == tmp ? a->recvbuf : tmp;
    }
    int j = 0;                    /* reductions done */
    if (f.rem) {
        if ((rc = mlsys_step(c, step, "fold")))
            goto out;
        int tag = COLL_TAG(MLSYS_COLL_ALLREDUCE, step++);
        if (r < 2 * f.rem && !(r & 1)) {
            rc = mlsys_send(c, a->sendbuf, a->count, a->dt, r + 1, tag);
        } else if (r < 2 * f.rem) {
            rc = mlsys_recv_reduce(c, cur, outs[j % 2], a->count, a->dt, a->op, r - 1, tag);
            cur = outs[j++ % 2];
        }
        if (rc)
            goto out;
    }
    for (int mask = 1; mask < f.p; mask <<= 1) {
        if ((rc = mlsys_step(c, step, "exchange")))
            goto out;
        int tag = COLL_TAG(MLSYS_COLL_ALLREDUCE, step++);
        if (f.newr < 0)
            continue;
        int peer = fold_real(&f, f.newr ^ mask);
        rc = coll_exchange_reduce(c, cur, a->count, peer, cur, outs[j % 2], a->count, peer, tag,
                                  a->dt, a->op);
        if (rc)
            goto out;
        cur = outs[j++ % 2];
    }
    if (f.newr >= 0)
        coll_copy(a->recvbuf, cur, a->count, a->dt);
    if (f.rem) {
        if ((rc = mlsys_step(c, step, "unfold")))
            goto out;
        int tag = COLL_TAG(MLSYS_COLL_ALLREDUCE, step++);
        if (r < 2 * f.rem && (r & 1))
            rc = mlsys_send(c, a->recvbuf, a->count, a->dt, r - 1, tag);
        else if (r < 2 * f.rem)
            rc = mlsys_recv(c, a->recvbuf, a->count, a->dt, r + 1, tag);
    }
out:
    if (tmp != small)
        coll_scratch_free(tmp);
    return rc;
}

/* recursive_halving: the vector is cut into p chunks; rank newr keeps a range [lo, hi) of
 * chunks that halves each step (the half on its side of the bit), then doubles back. Halves
 * exchanged at one step never overlap the half being reduced, so it works in recvbuf with
 * no scratch; src is sendbuf until this rank's first reduction has filled recvbuf. */
int coll_allreduce_recursive_halving(mlsys_comm *c, const coll_args *a)
{
    int n = c->size, r = c->rank, rc = 0, step = 0;
    fold f = fold_of(n, r);
    const void *src = a->sendbuf;
    size_t cnt = a->count;
    if (f.rem) {
        if ((rc = mlsys_step(c, step, "fold")))
            return rc;
        int tag = COLL_TAG(MLSYS_COLL_ALLREDUCE, step++);
        if (r < 2 * f.rem && !(r & 1)) {
            rc = mlsys_send(c, a->sendbuf, a->count, a->dt, r + 1, tag);
        } else if (r < 2 * f.rem) {
            rc = mlsys_recv_reduce(c, a->sendbuf, a->recvbuf, a->count, a->dt, a->op, r - 1, tag);
            src = a->recvbuf;
        }
        if (rc)
            return rc;
    }
    int lo = 0, hi = f.p;
    for (int mask = f.p / 2; mask >= 1; mask >>= 1) {
        if ((rc = mlsys_step(c, step, "reduce-scatter")))
            return rc;
        int tag = COLL_TAG(MLSYS_COLL_ALLREDUCE, step++);
        if (f.newr < 0)
            continue;
        int mid = lo + (hi - lo) / 2, peer = fold_real(&f, f.newr ^ mask);
        int keep_lo = (f.newr & mask) ? mid : lo, keep_hi = (f.newr & mask) ? hi : mid;
        int give_lo = (f.newr & mask) ? lo : mid, give_hi = (f.newr & mask) ? mid : hi;
        size_t ko = chunk_off(cnt, f.p, keep_lo), kl = chunk_off(cnt, f.p, keep_hi) - ko;
        size_t go = chunk_off(cnt, f.p, give_lo), gl = chunk_off(cnt, f.p, give_hi) - go;
        rc = coll_exchange_reduce(c, coll_at(src, go, a->dt), gl, peer, coll_at(src, ko, a->dt),
                                  coll_at(a->recvbuf, ko, a->dt), kl, peer, tag, a->dt, a->op);
        if (rc)
            return rc;
        src = a->recvbuf;
        lo = keep_lo;
        hi = keep_hi;
    }
    for (int mask = 1; mask < f.p; mask <<= 1) {
        if ((rc = mlsys_step(c, step, "all-gather")))
            return rc;
        int tag = COLL_TAG(MLSYS_COLL_ALLREDUCE, step++);
        if (f.newr < 0)
            continue;
        int width = hi - lo, peer = fold_real(&f, f.newr ^ mask);
        int plo = (f.newr & mask) ? lo - width : hi, phi = plo + width;
        size_t mo = chunk_off(cnt, f.p, lo), ml = chunk_off(cnt, f.p, hi) - mo;
        size_t po = chunk_off(cnt, f.p, plo), pl = chunk_off(cnt, f.p, phi) - po;
        rc = coll_exchange(c, coll_at(a->recvbuf, mo, a->dt), ml, peer,
                           coll_at(a->recvbuf, po, a->dt), pl, peer, tag, a->dt);
        if (rc)
            return rc;
        lo = lo < plo ? lo : plo;
        hi = hi > phi ? hi : phi;
    }
    if (f.rem) {
        if ((rc = mlsys_step(c, step, "unfold")))
            return rc;
        int tag = COLL_TAG(MLSYS_COLL_ALLREDUCE, step++);
        if (r < 2 * f.rem && (r & 1))
            rc = mlsys_send(c, a->recvbuf, a->count, a->dt, r - 1, tag);
        else if (r < 2 * f.rem)
            rc = mlsys_recv(c, a->recvbuf, a->count, a->dt, r + 1, tag);
    }
    return rc;
}

static const coll_algo algos[] = {
    {"direct", coll_allreduce_direct, 0, "reduce at rank 0, then rank 0 sends to each rank"},
    {"ring", coll_allreduce_ring, COLL_NEEDS_COUNT_GE_RANKS,
     "reduce-scatter then all-gather round a ring: 2(N-1) steps, bandwidth-optimal"},
    {"tree", coll_allreduce_tree, 0, "binomial reduce to 0, binomial broadcast: 2 log2 N steps"},
    {"recursive_doubling", coll_allreduce_recursive_doubling, 0,
     "exchange the whole vector with rank xor 2^k: log2 N steps (latency-optimal)"},
    {"recursive_halving", coll_allreduce_recursive_halving, 0,
     "Rabenseifner: reduce-scatter by halving, all-gather by doubling"},
    {"shm_direct", coll_allreduce_shm_direct, 0,
     "shared memory: each rank reduces its slice from all N buffers, then copies the others"},
};
static const char *const names[] = {"direct", "ring", "tree", "recursive_doubling",
                                    "recursive_halving", "shm_direct", NULL};

#define COLL_LARGE_BYTES (4u << 20)     /* past the L3: memory traffic is the cost */

static int decide(int n, size_t bytes, const char **why)
{
    if (n == 1) {
        *why = "1 rank: copy";
        return 0;
    }
    if (bytes < COLL_SMALL_BYTES) {
        *why = "< 64 KiB: recursive_doubling (latency-bound: ceil(log2 N) steps)";
        return 3;
    }
    if (bytes >= COLL_LARGE_BYTES) {
        *why = ">= 4 MiB: shm_direct (memory-bound: each element written once after reading its "
               "N inputs; the ring where buffers are not in the shared heaps)";
        return 5;
    }
    if (n > 8) {
        *why = ">= 64 KiB and N > 8: recursive_halving (the ring's bandwidth in 2 log2 N steps "
               "instead of 2(N-1))";
        return 4;
    }
    *why = ">= 64 KiB: ring (bandwidth-optimal: 2(N-1)/N of the data per rank)";
    return 1;
}

const coll_table coll_allreduce_table = {
    MLSYS_COLL_ALLREDUCE, "all_reduce", algos, (int)(sizeof algos / sizeof algos[0]), names,
    decide,
};
