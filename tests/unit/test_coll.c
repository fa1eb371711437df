/* test_coll.c - every collective, every algorithm, every type and operator against a serial
 * reference that each rank computes from the deterministic inputs of all ranks. Integer-
 * valued data keeps float sums exact, so results must match bit for bit. Also: in place and
 * out of place, untouched non-root buffers, guard elements past every buffer, the algorithm
 * that really ran, sub-communicators, argument errors, counters and events. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../../core/coll/coll.h"

#define TIMEOUT_MS 20000
#define GUARD 4                  /* extra elements after every buffer, must stay untouched */
#define BIG_COUNT 1000003        /* prime, not divisible by any N */
#define SENTINEL (-7777)         /* guard and "must not be written" value */
#define JUNK (-5555)             /* initial content of outputs, must be overwritten */

/* ---- typed values ---- */

typedef union { float f; double d; int32_t i; int64_t l; } tval;

static tval tv_of(mlsys_dtype dt, int64_t v)
{
    tval t;
    memset(&t, 0, sizeof t);
    switch (dt) {
    case MLSYS_F32: t.f = (float)v; break;
    case MLSYS_F64: t.d = (double)v; break;
    case MLSYS_I32: t.i = (int32_t)v; break;
    default: t.l = v; break;
    }
    return t;
}

static tval tv_get(const void *buf, mlsys_dtype dt, size_t i)
{
    tval t;
    memset(&t, 0, sizeof t);
    memcpy(&t, (const char *)buf + i * mlsys_dtype_size(dt), mlsys_dtype_size(dt));
    return t;
}

static void tv_set(void *buf, mlsys_dtype dt, size_t i, tval t)
{
    memcpy((char *)buf + i * mlsys_dtype_size(dt), &t, mlsys_dtype_size(dt));
}

static int tv_eq(mlsys_dtype dt, tval a, tval b)
{
    switch (dt) {
    case MLSYS_F32: return a.f == b.f;
    case MLSYS_F64: return a.d == b.d;
    case MLSYS_I32: return a.i == b.i;
    default: return a.l == b.l;
    }
}

static void tv_fmt(char *s, size_t n, mlsys_dtype dt, tval t)
{
    switch (dt) {
    case MLSYS_F32: snprintf(s, n, "%.9g", (double)t.f); break;
    case MLSYS_F64: snprintf(s, n, "%.17g", t.d); break;
    case MLSYS_I32: snprintf(s, n, "%d", (int)t.i); break;
    default: snprintf(s, n, "%lld", (long long)t.l); break;
    }
}

/* ---- deterministic inputs and the serial reference ---- */

/* Rank r's element gi for a reduction: small integers, so every float result is exact
 * (|sum| <= 11 * 64); for PROD only 1, -1 and a few 2s, so products stay small too. */
static int64_t rval(mlsys_op op, int r, size_t gi)
{
    unsigned h = (unsigned)((size_t)r * 37u + gi * 11u + gi / 7u);
    if (op == MLSYS_PROD) {
        unsigned k = (unsigned)((size_t)r * 5u + gi * 3u) % 11u;
        return k == 0 ? 2 : (k < 4 ? -1 : 1);
    }
    return (int64_t)(h % 23u) - 11;
}

/* Rank r's element i of the block it sends to rank j in a data-movement collective: every
 * (r, j, i) distinct enough that a misplaced block is caught, and exact in float. */
static int64_t mval(int r, int j, size_t i)
{
    return (int64_t)r * 65536 + (int64_t)j * 512 + (int64_t)(i % 509);
}

static tval ref_reduce(mlsys_dtype dt, mlsys_op op, int n, size_t gi)
{
    int64_t acc = rval(op, 0, gi);
    for (int r = 1; r < n; r++) {
        int64_t v = rval(op, r, gi);
        switch (op) {
        case MLSYS_PROD: acc *= v; break;
        case MLSYS_MIN: acc = v < acc ? v : acc; break;
        case MLSYS_MAX: acc = v > acc ? v : acc; break;
        default: acc += v; break;
        }
    }
    if (op != MLSYS_AVG)
        return tv_of(dt, acc);
    tval t;
    memset(&t, 0, sizeof t);
    switch (dt) {
    case MLSYS_F32: t.f = (float)acc / (float)n; break;
    case MLSYS_F64: t.d = (double)acc / (double)n; break;
    case MLSYS_I32: t.i = (int32_t)(acc / n); break;
    default: t.l = acc / n; break;
    }
    return t;
}

/* ---- one case ---- */

typedef struct tcase {
    mlsys_coll coll;
    int algo;           /* index in the table, -1 = the decide() rule */
    mlsys_dtype dt;
    mlsys_op op;
    size_t count;
    int inplace;
    int root;
} tcase;

static const char *algo_label(const tcase *k)
{
    return k->algo < 0 ? "auto" : coll_table_of(k->coll)->algos[k->algo].name;
}

/* What the dispatcher must have run: the forced or decided algorithm, or direct when its
 * constraints do not hold (and always direct on one rank). */
static const char *expected_algo(const tcase *k, int n)
{
    const coll_table *t = coll_table_of(k->coll);
    const char *why;
    size_t bytes = k->coll == MLSYS_COLL_BARRIER ? 0 : k->count * mlsys_dtype_size(k->dt);
    int i = k->algo >= 0 ? k->algo : t->decide(n, bytes, &why);
    size_t count = k->coll == MLSYS_COLL_BARRIER ? (size_t)n : k->count;
    unsigned cons = t->algos[i].constraints;
    if (n == 1 || ((cons & COLL_NEEDS_POW2) && (n & (n - 1))) ||
        ((cons & COLL_NEEDS_COUNT_GE_RANKS) && count < (size_t)n))
        i = 0;
    return t->algos[i].name;
}

typedef struct checker {
    const tcase *k;
    mlsys_comm *c;
    int failed;
    int quiet;          /* stop printing after the first failure */
} checker;

static int is_reduction(mlsys_coll coll)
{
    return coll == MLSYS_COLL_REDUCE || coll == MLSYS_COLL_ALLREDUCE ||
           coll == MLSYS_COLL_REDUCE_SCATTER;
}

static int is_rooted(mlsys_coll coll)
{
    return coll == MLSYS_COLL_BROADCAST || coll == MLSYS_COLL_REDUCE ||
           coll == MLSYS_COLL_GATHER || coll == MLSYS_COLL_SCATTER;
}

/* "rank 2/5: all_reduce algo ring float sum count 7 in place" */
static void describe(const checker *ck, char *s, size_t n)
{
    const tcase *k = ck->k;
    char root[24] = "";
    if (is_rooted(k->coll))
        snprintf(root, sizeof root, " root %d", k->root);
    snprintf(s, n, "rank %d/%d: %s algo %s %s%s%s count %zu%s%s", mlsys_rank(ck->c),
             mlsys_size(ck->c), mlsys_coll_name(k->coll), algo_label(k), mlsys_dtype_name(k->dt),
             is_reduction(k->coll) ? " " : "", is_reduction(k->coll) ? mlsys_op_name(k->op) : "",
             k->count, k->coll == MLSYS_COLL_BROADCAST ? "" : k->inplace ? " in place"
                                                                        : " out of place", root);
}

static void fail_at(checker *ck, const char *what, size_t idx, mlsys_dtype dt, tval want, tval got)
{
    if (!ck->failed && !ck->quiet) {
        char d[200], w[40], g[40];
        describe(ck, d, sizeof d);
        tv_fmt(w, sizeof w, dt, want);
        tv_fmt(g, sizeof g, dt, got);
        fprintf(stderr, "%s: %s[%zu]: expected %s, got %s\n", d, what, idx, w, g);
    }
    ck->failed = 1;
}

static void fail_msg(checker *ck, const char *msg)
{
    if (!ck->failed && !ck->quiet) {
        char d[200];
        describe(ck, d, sizeof d);
        fprintf(stderr, "%s: %s\n", d, msg);
    }
    ck->failed = 1;
}

/* A buffer of n elements plus GUARD sentinels. */
static void *buf_new(size_t n, mlsys_dtype dt, int64_t fill)
{
    void *b = mlsys_xmalloc((n + GUARD) * mlsys_dtype_size(dt));
    for (size_t i = 0; i < n + GUARD; i++)
        tv_set(b, dt, i, tv_of(dt, i < n ? fill : SENTINEL));
    return b;
}

static void check_guard(checker *ck, const char *what, const void *b, size_t n, mlsys_dtype dt)
{
    for (size_t i = n; b && i < n + GUARD && !ck->failed; i++)
        if (!tv_eq(dt, tv_get(b, dt, i), tv_of(dt, SENTINEL)))
            fail_at(ck, what, i, dt, tv_of(dt, SENTINEL), tv_get(b, dt, i));
}

static void check_all(checker *ck, const char *what, const void *b, size_t n, mlsys_dtype dt,
                      int64_t v)
{
    for (size_t i = 0; i < n && !ck->failed; i++)
        if (!tv_eq(dt, tv_get(b, dt, i), tv_of(dt, v)))
            fail_at(ck, what, i, dt, tv_of(dt, v), tv_get(b, dt, i));
}

/* Fill and check helpers: the expected element i of a buffer is f(i). */
typedef tval (*elem_fn)(const tcase *k, int n, int r, size_t i);

static void fill(void *b, size_t len, const tcase *k, int n, int r, elem_fn f)
{
    for (size_t i = 0; i < len; i++)
        tv_set(b, k->dt, i, f(k, n, r, i));
}

static void check_elems(checker *ck, const char *what, const void *b, size_t len, int n, int r,
                        elem_fn f)
{
    for (size_t i = 0; i < len && !ck->failed; i++) {
        tval want = f(ck->k, n, r, i), got = tv_get(b, ck->k->dt, i);
        if (!tv_eq(ck->k->dt, want, got))
            fail_at(ck, what, i, ck->k->dt, want, got);
    }
}

/* The element functions: what element i of a buffer holds on rank r of n, before (inputs)
 * or after (expected outputs). The parameters a function does not need are ignored. */
/* reductions: rank r's vector; the reduced vector; block r of the reduced N-block vector */
static tval red_input(const tcase *k, int n, int r, size_t i)
{
    (void)n;
    return tv_of(k->dt, rval(k->op, r, i));
}

static tval red_result(const tcase *k, int n, int r, size_t i)
{
    (void)r;
    return ref_reduce(k->dt, k->op, n, i);
}

static tval red_block(const tcase *k, int n, int r, size_t i)
{
    return ref_reduce(k->dt, k->op, n, (size_t)r * k->count + i);
}

/* data movement: rank r's own block; the root's block; all N blocks in rank order */
static tval own_block(const tcase *k, int n, int r, size_t i)
{
    (void)n;
    return tv_of(k->dt, mval(r, 0, i));
}

static tval root_block(const tcase *k, int n, int r, size_t i)
{
    (void)n;
    (void)r;
    return tv_of(k->dt, mval(k->root, 0, i));
}

static tval all_blocks(const tcase *k, int n, int r, size_t i)
{
    (void)n;
    (void)r;
    return tv_of(k->dt, mval((int)(i / k->count), 0, i % k->count));
}

/* all-to-all: rank r's block j is mval(r, j, .); after, rank r's block j is mval(j, r, .) */
static tval a2a_input(const tcase *k, int n, int r, size_t i)
{
    (void)n;
    return tv_of(k->dt, mval(r, (int)(i / k->count), i % k->count));
}

static tval a2a_result(const tcase *k, int n, int r, size_t i)
{
    (void)n;
    return tv_of(k->dt, mval((int)(i / k->count), r, i % k->count));
}

/* Run one case on this rank: build the buffers, call the collective, check everything.
 * Returns 0, or the collective's error code (the caller stops: the ranks may be out of
 * step), and sets ck->failed on wrong data. */
static int run_case(mlsys_comm *c, const tcase *k, checker *ck)
{
    int n = mlsys_size(c), r = mlsys_rank(c), rc = 0, root = k->root;
    size_t cnt = k->count, ncnt = (size_t)n * cnt;
    mlsys_dtype dt = k->dt;
    const coll_table *t = coll_table_of(k->coll);
    void *sb = NULL, *rb = NULL;       /* the allocations (for the guard checks) */
    const void *sp = NULL;             /* what is passed */
    void *rp = NULL;
    ck->k = k;
    ck->c = c;
    rc = mlsys_set_algo(c, k->coll, k->algo >= 0 ? t->algos[k->algo].name : NULL);
    if (rc) {
        fprintf(stderr, "rank %d: set algorithm: %s\n", r, mlsys_errmsg(c));
        return rc;
    }

    switch (k->coll) {
    case MLSYS_COLL_BROADCAST:
        rb = buf_new(cnt, dt, JUNK);
        if (r == root)
            fill(rb, cnt, k, n, r, root_block);
        rc = mlsys_broadcast(c, rb, cnt, dt, root);
        if (!rc) {
            check_elems(ck, "buf", rb, cnt, n, r, root_block);
            check_guard(ck, "buf", rb, cnt, dt);
        }
        break;

    case MLSYS_COLL_REDUCE:
    case MLSYS_COLL_ALLREDUCE: {
        int is_reduce = k->coll == MLSYS_COLL_REDUCE, writes = !is_reduce || r == root;
        sb = buf_new(cnt, dt, 0);
        fill(sb, cnt, k, n, r, red_input);
        sp = sb;
        if (k->inplace && writes) {
            rp = sb;
        } else if (writes || cnt % 2 == 0) {
            rb = buf_new(cnt, dt, writes ? JUNK : SENTINEL);
            rp = rb;
        }                               /* else: a non-root passes recvbuf NULL */
        rc = is_reduce ? mlsys_reduce(c, sp, rp, cnt, dt, k->op, root)
                       : mlsys_allreduce(c, sp, rp, cnt, dt, k->op);
        if (rc)
            break;
        if (writes)
            check_elems(ck, "recvbuf", rp, cnt, n, r, red_result);
        else if (rb)
            check_all(ck, "non-root recvbuf", rb, cnt, dt, SENTINEL);
        if (sp != rp)
            check_elems(ck, "sendbuf (must not change)", sp, cnt, n, r, red_input);
        check_guard(ck, "sendbuf", sb, cnt, dt);
        check_guard(ck, "recvbuf", rb, cnt, dt);
        break;
    }

    case MLSYS_COLL_ALLGATHER:
        rb = buf_new(ncnt, dt, JUNK);
        rp = rb;
        if (k->inplace) {
            fill(coll_at(rb, (size_t)r * cnt, dt), cnt, k, n, r, own_block);
            sp = coll_at(rb, (size_t)r * cnt, dt);
        } else {
            sb = buf_new(cnt, dt, 0);
            fill(sb, cnt, k, n, r, own_block);
            sp = sb;
        }
        rc = mlsys_allgather(c, sp, rp, cnt, dt);
        if (rc)
            break;
        check_elems(ck, "recvbuf", rp, ncnt, n, r, all_blocks);
        if (sb)
            check_elems(ck, "sendbuf (must not change)", sb, cnt, n, r, own_block);
        check_guard(ck, "sendbuf", sb, cnt, dt);
        check_guard(ck, "recvbuf", rb, ncnt, dt);
        break;

    case MLSYS_COLL_REDUCE_SCATTER:
        sb = buf_new(ncnt, dt, 0);
        fill(sb, ncnt, k, n, r, red_input);
        sp = sb;
        if (k->inplace) {
            rp = coll_at(sb, (size_t)r * cnt, dt);
        } else {
            rb = buf_new(cnt, dt, JUNK);
            rp = rb;
        }
        rc = mlsys_reduce_scatter(c, sp, rp, cnt, dt, k->op);
        if (rc)
            break;
        check_elems(ck, "recvbuf", rp, cnt, n, r, red_block);
        if (!k->inplace)
            check_elems(ck, "sendbuf (must not change)", sb, ncnt, n, r, red_input);
        check_guard(ck, "sendbuf", sb, ncnt, dt);
        check_guard(ck, "recvbuf", rb, cnt, dt);
        break;

    case MLSYS_COLL_GATHER:
        if (r == root || cnt % 2 == 0) {
            rb = buf_new(ncnt, dt, r == root ? JUNK : SENTINEL);
            rp = rb;
        }
        if (r == root && k->inplace) {
            fill(coll_at(rb, (size_t)r * cnt, dt), cnt, k, n, r, own_block);
            sp = coll_at(rb, (size_t)r * cnt, dt);
        } else {
            sb = buf_new(cnt, dt, 0);
            fill(sb, cnt, k, n, r, own_block);
            sp = sb;
        }
        rc = mlsys_gather(c, sp, rp, cnt, dt, root);
        if (rc)
            break;
        if (r == root)
            check_elems(ck, "recvbuf", rb, ncnt, n, r, all_blocks);
        else if (rb)
            check_all(ck, "non-root recvbuf", rb, ncnt, dt, SENTINEL);
        if (sb)
            check_elems(ck, "sendbuf (must not change)", sb, cnt, n, r, own_block);
        check_guard(ck, "sendbuf", sb, cnt, dt);
        check_guard(ck, "recvbuf", rb, ncnt, dt);
        break;

    case MLSYS_COLL_SCATTER:
        if (r == root) {
            sb = buf_new(ncnt, dt, 0);
            fill(sb, ncnt, k, n, r, all_blocks);
            sp = sb;
        } else if (cnt % 2 == 0) {
            sb = buf_new(ncnt, dt, SENTINEL);      /* ignored on a non-root */
            sp = sb;
        }
        if (r == root && k->inplace) {
            rp = coll_at(sb, (size_t)r * cnt, dt);
        } else {
            rb = buf_new(cnt, dt, JUNK);
            rp = rb;
        }
        rc = mlsys_scatter(c, sp, rp, cnt, dt, root);
        if (rc)
            break;
        check_elems(ck, "recvbuf", rp, cnt, n, r, own_block);
        if (r == root && !k->inplace)
            check_elems(ck, "sendbuf (must not change)", sb, ncnt, n, r, all_blocks);
        else if (r != root && sb)
            check_all(ck, "non-root sendbuf", sb, ncnt, dt, SENTINEL);
        check_guard(ck, "sendbuf", sb, ncnt, dt);
        check_guard(ck, "recvbuf", rb, cnt, dt);
        break;

    case MLSYS_COLL_ALLTOALL:
        sb = buf_new(ncnt, dt, 0);
        fill(sb, ncnt, k, n, r, a2a_input);
        sp = sb;
        if (k->inplace) {
            rp = sb;
        } else {
            rb = buf_new(ncnt, dt, JUNK);
            rp = rb;
        }
        rc = mlsys_alltoall(c, sp, rp, cnt, dt);
        if (rc)
            break;
        check_elems(ck, "recvbuf", rp, ncnt, n, r, a2a_result);
        if (!k->inplace)
            check_elems(ck, "sendbuf (must not change)", sb, ncnt, n, r, a2a_input);
        check_guard(ck, "sendbuf", sb, ncnt, dt);
        check_guard(ck, "recvbuf", rb, ncnt, dt);
        break;

    case MLSYS_COLL_BARRIER:
        rc = mlsys_barrier(c);
        break;

    default:
        break;
    }
    if (rc) {
        char d[200];
        describe(ck, d, sizeof d);
        fprintf(stderr, "%s: returned %d: %s\n", d, rc, mlsys_errmsg(c));
    } else if (strcmp(mlsys_last_algo(c), expected_algo(k, n)) != 0) {
        char msg[120];
        snprintf(msg, sizeof msg, "ran %s, expected %s", mlsys_last_algo(c), expected_algo(k, n));
        fail_msg(ck, msg);
    }
    free(sb);
    free(rb);
    return rc;
}

/* ---- the matrix a job runs ---- */

typedef struct plan {
    mlsys_coll coll;
    const char *algo;           /* one algorithm by name; NULL = all of them and auto */
    unsigned dtypes;            /* bit per mlsys_dtype; 0 = all */
    unsigned ops;               /* bit per mlsys_op; 0 = all (reductions only) */
    size_t counts[8];           /* explicit counts, 0-terminated after the first; or: */
    int standard_counts;        /* {0, 1, 7, N-1, N, 13} */
    int roots_all;              /* every root for each case instead of a rotating one */
} plan;

static int add_unique(size_t *v, int n, size_t x)
{
    for (int i = 0; i < n; i++)
        if (v[i] == x)
            return n;
    v[n] = x;
    return n + 1;
}

static int run_plan(mlsys_comm *c, void *arg)
{
    const plan *p = arg;
    int n = mlsys_size(c);
    const coll_table *t = coll_table_of(p->coll);
    checker ck = {0};
    size_t counts[16];
    int ncounts = 0;
    if (p->standard_counts) {
        size_t std[] = {0, 1, 7, (size_t)n - 1, (size_t)n, 13};
        for (size_t i = 0; i < sizeof std / sizeof std[0]; i++)
            ncounts = add_unique(counts, ncounts, std[i]);
    } else {
        for (int i = 0; i < 8 && (i == 0 || p->counts[i]); i++)
            ncounts = add_unique(counts, ncounts, p->counts[i]);
    }
    /* rooted collectives: every root in turn (roots_all), or the root moving on by one with
     * each case, which visits every root many times at a fraction of the calls */
    int nroots = is_rooted(p->coll) && p->roots_all ? n : 1, serial = 0;
    int inplace_modes = p->coll == MLSYS_COLL_BROADCAST || p->coll == MLSYS_COLL_BARRIER ? 1 : 2;
    for (int ai = -1; ai < t->nalgos; ai++) {
        if (p->algo && (ai < 0 || strcmp(t->algos[ai].name, p->algo) != 0))
            continue;
        for (int dt = 0; dt < MLSYS_DTYPE_COUNT; dt++) {
            if (p->dtypes && !(p->dtypes & (1u << dt)))
                continue;
            if (p->coll == MLSYS_COLL_BARRIER && dt > 0)
                break;
            if (ai < 0 && dt != MLSYS_F32 && !p->dtypes)
                continue;           /* auto runs one of the forced ones: once per op is enough */
            for (int op = 0; op < MLSYS_OP_COUNT; op++) {
                if (!is_reduction(p->coll) && op > 0)
                    break;
                if (is_reduction(p->coll) && p->ops && !(p->ops & (1u << op)))
                    continue;
                for (int ci = 0; ci < ncounts; ci++)
                    for (int ip = 0; ip < inplace_modes; ip++)
                        for (int ri = 0; ri < nroots; ri++) {
                            int root = !is_rooted(p->coll) ? 0 : p->roots_all ? ri : serial % n;
                            serial++;
                            tcase k = {p->coll, ai, (mlsys_dtype)dt,
                                       is_reduction(p->coll) ? (mlsys_op)op : MLSYS_OP_NONE,
                                       counts[ci], ip, root};
                            int rc = run_case(c, &k, &ck);
                            if (rc)
                                return 2;
                            if (ck.failed)
                                ck.quiet = 1;
                        }
            }
        }
    }
    return ck.failed;
}

static void run_job(int n, plan *p)
{
    char why[512] = "";
    int rc = mlsys_run_fn(n, TIMEOUT_MS, run_plan, p, why, sizeof why);
    ck_assert_msg(rc == 0, "%s on %d ranks: %s", mlsys_coll_name(p->coll), n, why);
}

/* One test per collective, looped over N = 1..8 by Check. */
#define MATRIX_TEST(name, COLL)                                                           \
    START_TEST(name)                                                                      \
    {                                                                                     \
        plan p = {.coll = COLL, .standard_counts = 1};                                    \
        run_job(_i, &p);                                                                  \
    }                                                                                     \
    END_TEST

MATRIX_TEST(test_broadcast, MLSYS_COLL_BROADCAST)
MATRIX_TEST(test_reduce, MLSYS_COLL_REDUCE)
MATRIX_TEST(test_allreduce, MLSYS_COLL_ALLREDUCE)
MATRIX_TEST(test_allgather, MLSYS_COLL_ALLGATHER)
MATRIX_TEST(test_reduce_scatter, MLSYS_COLL_REDUCE_SCATTER)
MATRIX_TEST(test_gather, MLSYS_COLL_GATHER)
MATRIX_TEST(test_scatter, MLSYS_COLL_SCATTER)
MATRIX_TEST(test_alltoall, MLSYS_COLL_ALLTOALL)
MATRIX_TEST(test_barrier, MLSYS_COLL_BARRIER)

/* Every root for the rooted collectives, on an odd N where the tree wraps around. */
START_TEST(test_all_roots)
{
    static const mlsys_coll rooted[] = {MLSYS_COLL_BROADCAST, MLSYS_COLL_REDUCE,
                                        MLSYS_COLL_GATHER, MLSYS_COLL_SCATTER};
    for (size_t i = 0; i < sizeof rooted / sizeof rooted[0]; i++) {
        plan p = {.coll = rooted[i], .dtypes = 1u << MLSYS_I32, .ops = 1u << MLSYS_SUM,
                  .counts = {1, 5, 6}, .roots_all = 1};
        run_job(6, &p);
    }
}
END_TEST

/* The large prime count, for a few combinations: many segments, uneven chunks, scratch
 * buffers and the single-copy path of the transport. */
static const struct { mlsys_coll coll; const char *algo; mlsys_dtype dt; mlsys_op op; int n; }
big_cases[] = {
    {MLSYS_COLL_ALLREDUCE, "ring", MLSYS_F32, MLSYS_SUM, 4},
    {MLSYS_COLL_ALLREDUCE, "ring", MLSYS_I64, MLSYS_AVG, 5},
    {MLSYS_COLL_ALLREDUCE, "recursive_halving", MLSYS_F32, MLSYS_SUM, 6},
    {MLSYS_COLL_ALLREDUCE, "recursive_doubling", MLSYS_F64, MLSYS_MAX, 3},
    {MLSYS_COLL_ALLREDUCE, "tree", MLSYS_I32, MLSYS_PROD, 5},
    {MLSYS_COLL_ALLREDUCE, "direct", MLSYS_F32, MLSYS_MIN, 3},
    {MLSYS_COLL_BROADCAST, "ring", MLSYS_F64, MLSYS_OP_NONE, 5},
    {MLSYS_COLL_BROADCAST, "scatter_allgather", MLSYS_F32, MLSYS_OP_NONE, 5},
    {MLSYS_COLL_REDUCE, "ring", MLSYS_I64, MLSYS_SUM, 4},
    {MLSYS_COLL_REDUCE, "tree", MLSYS_F32, MLSYS_MAX, 5},
    {MLSYS_COLL_ALLGATHER, "ring", MLSYS_I32, MLSYS_OP_NONE, 3},
    {MLSYS_COLL_REDUCE_SCATTER, "ring", MLSYS_F32, MLSYS_SUM, 3},
    {MLSYS_COLL_REDUCE_SCATTER, "recursive_halving", MLSYS_I32, MLSYS_SUM, 2},
    {MLSYS_COLL_GATHER, "tree", MLSYS_I32, MLSYS_OP_NONE, 3},
    {MLSYS_COLL_SCATTER, "tree", MLSYS_F32, MLSYS_OP_NONE, 3},
    {MLSYS_COLL_ALLTOALL, "direct", MLSYS_I32, MLSYS_OP_NONE, 3},
};

START_TEST(test_big)
{
    plan p = {.coll = big_cases[_i].coll, .algo = big_cases[_i].algo,
              .dtypes = 1u << big_cases[_i].dt,
              .ops = big_cases[_i].op == MLSYS_OP_NONE ? 0 : 1u << big_cases[_i].op,
              .counts = {BIG_COUNT}};
    run_job(big_cases[_i].n, &p);
}
END_TEST

/* Beyond 8 ranks, once: 16 (and 13, not a power of two) for a few collectives. */
START_TEST(test_many_ranks)
{
    static const mlsys_coll colls[] = {MLSYS_COLL_ALLREDUCE, MLSYS_COLL_BROADCAST,
                                       MLSYS_COLL_ALLGATHER, MLSYS_COLL_REDUCE_SCATTER,
                                       MLSYS_COLL_BARRIER};
    int n = _i == 0 ? 16 : 13;
    for (size_t i = 0; i < sizeof colls / sizeof colls[0]; i++) {
        plan p = {.coll = colls[i], .dtypes = (1u << MLSYS_F32) | (1u << MLSYS_I64),
                  .ops = (1u << MLSYS_SUM) | (1u << MLSYS_MAX), .counts = {1, 15, 16, 100}};
        run_job(n, &p);
    }
}
END_TEST

/* ---- sub-communicators ---- */

/* Rows {0,1,2} {3,4,5} (key reverses the order) and columns r % 3, plus the parent. Row 0
 * runs its row all-reduce while row 1 is already in the world one, so world messages reach
 * ranks busy on another context; the order stays consistent on every pair of communicators
 * that share two ranks (as MPI requires). A user message posted with a colliding tag stays
 * pending across all of it. */
static int split_rank(mlsys_comm *c, void *arg)
{
    (void)arg;
    int r = mlsys_rank(c), n = mlsys_size(c), rc, bad = 0;
    mlsys_comm *row = NULL, *col = NULL;
    if ((rc = mlsys_split(c, r / 3, -r, &row)) || (rc = mlsys_split(c, r % 3, r, &col)))
        goto err;
    if (!row || !col || mlsys_size(row) != 3 || mlsys_size(col) != n / 3 ||
        mlsys_rank(row) != 2 - r % 3 || mlsys_rank(col) != r / 3) {
        fprintf(stderr, "rank %d: split gave wrong groups\n", r);
        return 1;
    }
    /* a user message with the very tag the all_reduce algorithms use at their first step */
    int tag = COLL_TAG(MLSYS_COLL_ALLREDUCE, 0);
    int32_t out_msg = 1000 + r, in_msg = -1;
    mlsys_request *req[2];
    if ((rc = mlsys_irecv(c, &in_msg, 1, MLSYS_I32, (r - 1 + n) % n, tag, &req[0])) ||
        (rc = mlsys_isend(c, &out_msg, 1, MLSYS_I32, (r + 1) % n, tag, &req[1])))
        goto err;

    static const char *const algos[] = {"ring", "recursive_doubling", "tree", "direct",
                                        "recursive_halving"};
    for (int it = 0; it < 5; it++) {
        int64_t v = r + 1, row_sum = 0, col_sum = 0, all_sum = 0;
        mlsys_set_algo_all(row, algos[it]);
        mlsys_set_algo_all(col, algos[(it + 1) % 5]);
        mlsys_set_algo_all(c, algos[(it + 2) % 5]);
        if (r / 3 == 0) {       /* row 0: row, then world, then column */
            if ((rc = mlsys_allreduce(row, &v, &row_sum, 1, MLSYS_I64, MLSYS_SUM)) ||
                (rc = mlsys_allreduce(c, &v, &all_sum, 1, MLSYS_I64, MLSYS_SUM)) ||
                (rc = mlsys_allreduce(col, &v, &col_sum, 1, MLSYS_I64, MLSYS_SUM)))
                goto err;
        } else {                /* row 1: world, then column, then row */
            if ((rc = mlsys_allreduce(c, &v, &all_sum, 1, MLSYS_I64, MLSYS_SUM)) ||
                (rc = mlsys_allreduce(col, &v, &col_sum, 1, MLSYS_I64, MLSYS_SUM)) ||
                (rc = mlsys_allreduce(row, &v, &row_sum, 1, MLSYS_I64, MLSYS_SUM)))
                goto err;
        }
        int r0 = r / 3 * 3, c0 = r % 3;
        int64_t want_row = (r0 + 1) + (r0 + 2) + (r0 + 3), want_col = (c0 + 1) + (c0 + 4);
        int64_t want_all = (int64_t)n * (n + 1) / 2;
        if (row_sum != want_row || col_sum != want_col || all_sum != want_all) {
            fprintf(stderr, "rank %d iteration %d: row %lld (want %lld) col %lld (want %lld) "
                    "world %lld (want %lld)\n", r, it, (long long)row_sum, (long long)want_row,
                    (long long)col_sum, (long long)want_col, (long long)all_sum,
                    (long long)want_all);
            bad = 1;
        }
        /* a bigger vector on the row while the column is busy elsewhere */
        size_t cnt = 1000;
        int32_t *x = mlsys_xmalloc(cnt * sizeof *x), *y = mlsys_xmalloc(cnt * 3 * sizeof *y);
        for (size_t i = 0; i < cnt; i++)
            x[i] = (int32_t)(r * 10000 + (int)i);
        rc = mlsys_allgather(row, x, y, cnt, MLSYS_I32);
        for (int j = 0; j < 3 && !rc && !bad; j++) {
            int world = r0 + (2 - j);   /* row rank j is world rank r0 + 2 - j */
            for (size_t i = 0; i < cnt; i++)
                if (y[(size_t)j * cnt + i] != (int32_t)(world * 10000 + (int)i)) {
                    fprintf(stderr, "rank %d: row all_gather block %d [%zu] = %d\n", r, j, i,
                            y[(size_t)j * cnt + i]);
                    bad = 1;
                    break;
                }
        }
        free(x);
        free(y);
        if (rc)
            goto err;
    }
    if ((rc = mlsys_waitall(req, 2)))
        goto err;
    if (in_msg != 1000 + (r - 1 + n) % n) {
        fprintf(stderr, "rank %d: user message got %d\n", r, in_msg);
        bad = 1;
    }
    return bad;
err:
    fprintf(stderr, "rank %d: %s\n", r, mlsys_errmsg(c));
    return 2;
}

START_TEST(test_split)
{
    char why[512] = "";
    int rc = mlsys_run_fn(6, TIMEOUT_MS, split_rank, NULL, why, sizeof why);
    ck_assert_msg(rc == 0, "split: %s", why);
}
END_TEST

/* ---- names, parsing, the algorithm choice ---- */

START_TEST(test_names)
{
    static const char *const want[] = {"broadcast", "reduce", "all_reduce", "all_gather",
                                       "reduce_scatter", "gather", "scatter", "all_to_all",
                                       "barrier"};
    for (int i = 0; i < MLSYS_COLL_COUNT; i++) {
        mlsys_coll got;
        ck_assert_str_eq(mlsys_coll_name((mlsys_coll)i), want[i]);
        ck_assert_int_eq(mlsys_coll_parse(want[i], &got), 0);
        ck_assert_int_eq(got, i);
        const char *const *names = mlsys_algo_names((mlsys_coll)i);
        ck_assert_ptr_nonnull(names);
        ck_assert_str_eq(names[0], "direct");
        const coll_table *t = coll_table_of((mlsys_coll)i);
        int k = 0;
        while (names[k]) {
            ck_assert_str_eq(names[k], t->algos[k].name);
            k++;
        }
        ck_assert_int_eq(k, t->nalgos);
        ck_assert_int_eq(t->coll, i);
    }
    static const struct { const char *s; mlsys_coll c; } alias[] = {
        {"allreduce", MLSYS_COLL_ALLREDUCE}, {"all-reduce", MLSYS_COLL_ALLREDUCE},
        {"All_Reduce", MLSYS_COLL_ALLREDUCE}, {"allgather", MLSYS_COLL_ALLGATHER},
        {"all-gather", MLSYS_COLL_ALLGATHER}, {"reduce-scatter", MLSYS_COLL_REDUCE_SCATTER},
        {"reducescatter", MLSYS_COLL_REDUCE_SCATTER}, {"alltoall", MLSYS_COLL_ALLTOALL},
        {"all-to-all", MLSYS_COLL_ALLTOALL}, {"bcast", MLSYS_COLL_BROADCAST},
    };
    for (size_t i = 0; i < sizeof alias / sizeof alias[0]; i++) {
        mlsys_coll got = MLSYS_COLL_COUNT;
        ck_assert_msg(mlsys_coll_parse(alias[i].s, &got) == 0 && got == alias[i].c, "%s",
                      alias[i].s);
    }
    mlsys_coll got;
    ck_assert_int_eq(mlsys_coll_parse("allreduction", &got), -1);
    ck_assert_int_eq(mlsys_coll_parse("", &got), -1);
    ck_assert_int_eq(mlsys_coll_parse(NULL, &got), -1);
    ck_assert_str_eq(mlsys_coll_name(MLSYS_COLL_COUNT), "?");
    ck_assert_ptr_null(mlsys_algo_names(MLSYS_COLL_COUNT));
}
END_TEST

/* decide() in words: the rules the chapter texts quote. */
START_TEST(test_decide_rules)
{
    const char *why = NULL;
    const coll_table *ar = coll_table_of(MLSYS_COLL_ALLREDUCE);
    ck_assert_str_eq(ar->algos[ar->decide(1, 1 << 20, &why)].name, "direct");
    ck_assert_ptr_nonnull(strstr(why, "1 rank"));
    ck_assert_str_eq(ar->algos[ar->decide(4, 1024, &why)].name, "recursive_doubling");
    ck_assert_ptr_nonnull(strstr(why, "64 KiB"));
    ck_assert_str_eq(ar->algos[ar->decide(4, 64 * 1024, &why)].name, "ring");
    ck_assert_ptr_nonnull(strstr(why, "bandwidth"));
    ck_assert_str_eq(ar->algos[ar->decide(16, 1 << 20, &why)].name, "recursive_halving");
    const coll_table *bc = coll_table_of(MLSYS_COLL_BROADCAST);
    ck_assert_str_eq(bc->algos[bc->decide(8, 100, &why)].name, "tree");
    ck_assert_str_eq(bc->algos[bc->decide(8, 1 << 20, &why)].name, "ring");
    const coll_table *ag = coll_table_of(MLSYS_COLL_ALLGATHER);
    ck_assert_str_eq(ag->algos[ag->decide(8, 100, &why)].name, "recursive_doubling");
    ck_assert_str_eq(ag->algos[ag->decide(6, 100, &why)].name, "ring");
    const coll_table *ba = coll_table_of(MLSYS_COLL_BARRIER);
    ck_assert_str_eq(ba->algos[ba->decide(5, 0, &why)].name, "dissemination");
    /* every rule of every table answers with a sentence and a valid index */
    for (int k = 0; k < MLSYS_COLL_COUNT; k++) {
        const coll_table *t = coll_table_of((mlsys_coll)k);
        for (int n = 1; n <= 64; n++)
            for (size_t b = 1; b < ((size_t)1 << 30); b *= 4) {
                why = NULL;
                int i = t->decide(n, b, &why);
                ck_assert_int_ge(i, 0);
                ck_assert_int_lt(i, t->nalgos);
                ck_assert_ptr_nonnull(why);
                ck_assert_int_gt((int)strlen(why), 5);
            }
    }
}
END_TEST

static int choice_rank(mlsys_comm *c, void *arg)
{
    (void)arg;
    const char *why = NULL;
#define EXPECT(cond) do { if (!(cond)) { fprintf(stderr, "rank %d: line %d: %s\n", \
    mlsys_rank(c), __LINE__, #cond); return 1; } } while (0)
    EXPECT(strcmp(mlsys_algo_decide(c, MLSYS_COLL_ALLREDUCE, 1 << 20, &why), "ring") == 0);
    EXPECT(mlsys_set_algo(c, MLSYS_COLL_ALLREDUCE, "tree") == 0);
    EXPECT(strcmp(mlsys_algo_decide(c, MLSYS_COLL_ALLREDUCE, 1 << 20, &why), "tree") == 0);
    EXPECT(strstr(why, "forced") != NULL);
    EXPECT(mlsys_set_algo(c, MLSYS_COLL_ALLREDUCE, "bogus") == MLSYS_ERR_ARG);
    EXPECT(strstr(mlsys_errmsg(c), "bogus") != NULL);
    EXPECT(strcmp(mlsys_algo_decide(c, MLSYS_COLL_ALLREDUCE, 1 << 20, &why), "tree") == 0);
    EXPECT(mlsys_set_algo(c, MLSYS_COLL_ALLREDUCE, "auto") == 0);
    EXPECT(strcmp(mlsys_algo_decide(c, MLSYS_COLL_ALLREDUCE, 1 << 20, &why), "ring") == 0);
    EXPECT(mlsys_set_algo(c, MLSYS_COLL_COUNT, "ring") == MLSYS_ERR_ARG);
    EXPECT(mlsys_set_algo_all(c, "ring") == 5);
    EXPECT(mlsys_set_algo_all(c, "tree") == 5);
    EXPECT(mlsys_set_algo_all(c, "recursive_doubling") == 2);
    EXPECT(mlsys_set_algo_all(c, "dissemination") == 1);
    EXPECT(mlsys_set_algo_all(c, "bogus") == 0);
    EXPECT(mlsys_set_algo_all(c, NULL) == MLSYS_COLL_COUNT);
    EXPECT(strcmp(mlsys_algo_decide(c, MLSYS_COLL_BROADCAST, 10, &why), "tree") == 0);

    /* MLSYS_ALGO, read when a communicator is made */
    setenv("MLSYS_ALGO", "recursive_halving", 1);
    coll_init_comm(c);
    EXPECT(strcmp(mlsys_algo_decide(c, MLSYS_COLL_ALLREDUCE, 10, &why), "recursive_halving") == 0);
    EXPECT(strcmp(mlsys_algo_decide(c, MLSYS_COLL_REDUCE_SCATTER, 10, &why),
                  "recursive_halving") == 0);
    EXPECT(strcmp(mlsys_algo_decide(c, MLSYS_COLL_BROADCAST, 10, &why), "tree") == 0);
    setenv("MLSYS_ALGO", "all_reduce=direct,broadcast=ring", 1);
    coll_init_comm(c);
    EXPECT(strcmp(mlsys_algo_decide(c, MLSYS_COLL_ALLREDUCE, 10, &why), "direct") == 0);
    EXPECT(strcmp(mlsys_algo_decide(c, MLSYS_COLL_BROADCAST, 10, &why), "ring") == 0);
    EXPECT(strcmp(mlsys_algo_decide(c, MLSYS_COLL_REDUCE, 10, &why), "tree") == 0);
    setenv("MLSYS_ALGO", "auto", 1);
    coll_init_comm(c);
    EXPECT(strcmp(mlsys_algo_decide(c, MLSYS_COLL_ALLREDUCE, 1 << 20, &why), "ring") == 0);
    unsetenv("MLSYS_ALGO");

    /* a forced algorithm whose constraint fails falls back to direct and says so */
    float x[3] = {1, 2, 3}, y[3];
    EXPECT(mlsys_set_algo(c, MLSYS_COLL_ALLREDUCE, "ring") == 0);
    EXPECT(mlsys_allreduce(c, x, y, 3, MLSYS_F32, MLSYS_SUM) == 0);   /* 3 < 4 ranks */
    EXPECT(strcmp(mlsys_last_algo(c), "direct") == 0);
    EXPECT(mlsys_set_algo(c, MLSYS_COLL_ALLGATHER, "recursive_doubling") == 0);
    float g[12];
    EXPECT(mlsys_allgather(c, x, g, 3, MLSYS_F32) == 0);              /* 4: a power of two */
    EXPECT(strcmp(mlsys_last_algo(c), "recursive_doubling") == 0);
    EXPECT(mlsys_get_counters(c)->coll_calls[MLSYS_COLL_ALLREDUCE] == 1);
    EXPECT(mlsys_get_counters(c)->coll_calls[MLSYS_COLL_ALLGATHER] == 1);
#undef EXPECT
    return 0;
}

START_TEST(test_choice)
{
    char why[512] = "";
    int rc = mlsys_run_fn(4, TIMEOUT_MS, choice_rank, NULL, why, sizeof why);
    ck_assert_msg(rc == 0, "%s", why);
}
END_TEST

/* The launcher's algo option travels as MLSYS_ALGO and every communicator, including one
 * made by split, starts with it: here "ring" for all, then all_reduce overridden to tree. */
static int env_algo_check(mlsys_comm *k, int rc, const char *coll, const char *want)
{
    if (!rc && strcmp(mlsys_last_algo(k), want) == 0)
        return 0;
    fprintf(stderr, "rank %d of %d: %s: rc %d, ran %s, expected %s\n", mlsys_rank(k),
            mlsys_size(k), coll, rc, mlsys_last_algo(k), want);
    return 1;
}

static int env_algo_rank(mlsys_comm *c, void *arg)
{
    (void)arg;
    int r = mlsys_rank(c), bad = 0;
    int32_t x[40] = {0}, y[40 * 4];
    mlsys_comm *half = NULL;
    if (mlsys_split(c, r % 2, r, &half) || !half)
        return 2;
    mlsys_comm *comms[2] = {c, half};
    for (int i = 0; i < 2 && !bad; i++) {
        mlsys_comm *k = comms[i];
        bad |= env_algo_check(k, mlsys_allreduce(k, x, y, 40, MLSYS_I32, MLSYS_SUM), "all_reduce",
                              "tree");
        bad |= env_algo_check(k, mlsys_broadcast(k, x, 40, MLSYS_I32, 0), "broadcast", "ring");
        bad |= env_algo_check(k, mlsys_allgather(k, x, y, 10, MLSYS_I32), "all_gather", "ring");
        /* gather has no ring and keeps its rule: tree on 4 ranks, direct on 2 */
        bad |= env_algo_check(k, mlsys_gather(k, x, y, 10, MLSYS_I32, 0), "gather",
                              i == 0 ? "tree" : "direct");
    }
    return bad;
}

START_TEST(test_env_algo)
{
    char why[512] = "";
    mlsys_launch_opts o = {.world_size = 4, .timeout_ms = TIMEOUT_MS,
                           .algo = "ring,all_reduce=tree"};
    mlsys_job *j = mlsys_job_start(&o, NULL, env_algo_rank, NULL, why, sizeof why);
    ck_assert_msg(j != NULL, "%s", why);
    int rc = mlsys_job_wait(j, NULL, -1, why, sizeof why);
    mlsys_job_free(j);
    ck_assert_msg(rc == 0, "%s", why);
}
END_TEST

/* ---- errors: every rank gets the same verdict before any message moves ---- */

/* Each call must fail with MLSYS_ERR_ARG and a message naming the rank and the problem. */
static int expect_arg_error(mlsys_comm *c, int rc, const char *needle, int line)
{
    char prefix[32];
    snprintf(prefix, sizeof prefix, "rank %d: ", mlsys_rank(c));
    if (rc == MLSYS_ERR_ARG && strstr(mlsys_errmsg(c), needle) &&
        strncmp(mlsys_errmsg(c), prefix, strlen(prefix)) == 0)
        return 0;
    fprintf(stderr, "rank %d: line %d: rc %d, message \"%s\", wanted \"%s\"\n", mlsys_rank(c),
            line, rc, mlsys_errmsg(c), needle);
    return 1;
}

static int errors_rank(mlsys_comm *c, void *arg)
{
    (void)arg;
    float x[4] = {0}, y[16] = {0};
    int n = mlsys_size(c), bad = 0;
#define TRY(call, needle) (bad |= expect_arg_error(c, (call), (needle), __LINE__))
    TRY(mlsys_allreduce(c, NULL, y, 4, MLSYS_F32, MLSYS_SUM), "all_reduce: null sendbuf");
    TRY(mlsys_allreduce(c, x, NULL, 4, MLSYS_F32, MLSYS_SUM), "all_reduce: null recvbuf");
    TRY(mlsys_allreduce(c, x, y, 4, MLSYS_DTYPE_COUNT, MLSYS_SUM), "element type");
    TRY(mlsys_allreduce(c, x, y, 4, MLSYS_F32, MLSYS_OP_COUNT), "operator");
    TRY(mlsys_reduce_scatter(c, x, y, 1, MLSYS_F32, MLSYS_OP_NONE), "operator");
    TRY(mlsys_broadcast(c, x, 4, MLSYS_F32, n), "root");
    TRY(mlsys_reduce(c, x, y, 4, MLSYS_F32, MLSYS_SUM, -1), "root");
    TRY(mlsys_broadcast(c, NULL, 4, MLSYS_F32, 0), "broadcast: null buffer");
    TRY(mlsys_alltoall(c, x, NULL, 1, MLSYS_I32), "all_to_all: null recvbuf");
    if (n == 1) {   /* the root's buffers are required (on 1 rank every rank is the root) */
        TRY(mlsys_gather(c, x, NULL, 4, MLSYS_F32, 0), "gather: null recvbuf");
        TRY(mlsys_scatter(c, NULL, y, 4, MLSYS_F32, 0), "scatter: null sendbuf");
        TRY(mlsys_reduce(c, x, NULL, 4, MLSYS_F32, MLSYS_MAX, 0), "reduce: null recvbuf");
    }
#undef TRY
    return bad;
}

static int errors_rank_nullok(mlsys_comm *c, void *arg)
{
    (void)arg;
    int r = mlsys_rank(c), rc;
    float x[4] = {1, 2, 3, 4}, y[4];
    /* count 0: null buffers are fine, nothing moves */
    if ((rc = mlsys_allreduce(c, NULL, NULL, 0, MLSYS_F32, MLSYS_SUM)) ||
        (rc = mlsys_allgather(c, NULL, NULL, 0, MLSYS_F32)))
        return 1;
    /* non-root recvbuf of reduce/gather and non-root sendbuf of scatter may be NULL */
    if ((rc = mlsys_reduce(c, x, r == 0 ? y : NULL, 4, MLSYS_F32, MLSYS_SUM, 0)) ||
        (rc = mlsys_scatter(c, r == 0 ? x : NULL, y, 1, MLSYS_F32, 0)))
        return 1;
    return 0;
}

START_TEST(test_errors)
{
    char why[512] = "";
    int rc = mlsys_run_fn(1, TIMEOUT_MS, errors_rank, NULL, why, sizeof why);
    ck_assert_msg(rc == 0, "%s", why);
    rc = mlsys_run_fn(3, TIMEOUT_MS, errors_rank, NULL, why, sizeof why);
    ck_assert_msg(rc == 0, "%s", why);
    rc = mlsys_run_fn(4, TIMEOUT_MS, errors_rank_nullok, NULL, why, sizeof why);
    ck_assert_msg(rc == 0, "%s", why);
}
END_TEST

/* ---- counters: the ring all-reduce of the chapter 3 exercise, by the numbers ---- */

static int counters_rank(mlsys_comm *c, void *arg)
{
    (void)arg;
    int n = mlsys_size(c), r = mlsys_rank(c);
    size_t cnt = 1001;
    float *x = mlsys_xcalloc(cnt, sizeof *x), *y = mlsys_xcalloc(cnt, sizeof *y);
    mlsys_set_algo(c, MLSYS_COLL_ALLREDUCE, "ring");
    mlsys_reset_counters(c);
    int rc = mlsys_allreduce(c, x, y, cnt, MLSYS_F32, MLSYS_SUM);
    const mlsys_counters *k = mlsys_get_counters(c);
    /* chunk j has cnt / n elements, one more for j < cnt % n; the reduce-scatter sends every
     * chunk but (r + 1), the all-gather every chunk but (r + 2) */
    uint64_t want = 0;
    for (int j = 0; j < n; j++) {
        uint64_t len = cnt / (size_t)n + ((size_t)j < cnt % (size_t)n);
        if (j != (r + 1) % n)
            want += len * 4;
        if (j != (r + 2) % n)
            want += len * 4;
    }
    int bad = rc || k->sends != 2u * (uint64_t)(n - 1) || k->recvs != 2u * (uint64_t)(n - 1) ||
              k->bytes_sent != want || k->coll_calls[MLSYS_COLL_ALLREDUCE] != 1;
    if (bad)
        fprintf(stderr, "rank %d: rc %d sends %llu recvs %llu bytes %llu (want %llu) calls %llu\n",
                r, rc, (unsigned long long)k->sends, (unsigned long long)k->recvs,
                (unsigned long long)k->bytes_sent, (unsigned long long)want,
                (unsigned long long)k->coll_calls[MLSYS_COLL_ALLREDUCE]);
    free(x);
    free(y);
    return bad;
}

START_TEST(test_counters)
{
    char why[512] = "";
    int rc = mlsys_run_fn(_i, TIMEOUT_MS, counters_rank, NULL, why, sizeof why);
    ck_assert_msg(rc == 0, "%s", why);
}
END_TEST

/* ---- events: begin/end around each collective, STEP events at the step boundaries ---- */

/* Gated mode grants "one more step" to all ranks at once, so within one call every rank
 * must pass the same number of step boundaries: checked for every algorithm, on a rank
 * count that is not a power of two (the recursive algorithms fold) and one that is. */
#define EV_MAX_RANKS 8
#define EV_MAX_CALLS 64
static int ev_steps[EV_MAX_RANKS][EV_MAX_CALLS], ev_calls[EV_MAX_RANKS];
static int ev_sends[EV_MAX_RANKS][EV_MAX_CALLS];
static mlsys_event ev_first[EV_MAX_RANKS][2];   /* begin and end of the first call */
static int ev_bad;

static void ev_sink(void *u, const mlsys_event *ev, size_t n)
{
    (void)u;
    for (size_t i = 0; i < n; i++) {
        const mlsys_event *e = &ev[i];
        if (e->rank < 0 || e->rank >= EV_MAX_RANKS || ev_calls[e->rank] >= EV_MAX_CALLS) {
            ev_bad = 1;
            continue;
        }
        int r = e->rank, k = ev_calls[r];
        if (e->kind == MLSYS_EV_COLL_BEGIN || e->kind == MLSYS_EV_COLL_END) {
            const coll_table *t = coll_table_of((mlsys_coll)e->coll);
            if (!t || e->algo < 0 || e->algo >= t->nalgos ||
                strcmp(e->label, t->algos[e->algo].name) != 0)
                ev_bad = 2;
            /* rooted collectives name their root (1 in this test) so views can mark it */
            int rooted = e->coll == MLSYS_COLL_BROADCAST || e->coll == MLSYS_COLL_REDUCE ||
                         e->coll == MLSYS_COLL_GATHER || e->coll == MLSYS_COLL_SCATTER;
            if (e->peer != (rooted ? 1 : -1))
                ev_bad = 4;
            if (k == 0)
                ev_first[r][e->kind == MLSYS_EV_COLL_END] = *e;
            if (e->kind == MLSYS_EV_COLL_END)
                ev_calls[r]++;
        } else if (e->kind == MLSYS_EV_STEP) {
            if (e->step < 0)
                ev_bad = 3;
            ev_steps[r][k]++;
        } else if (e->kind == MLSYS_EV_SEND_BEGIN) {
            ev_sends[r][k]++;
        }
    }
}

static int events_rank(mlsys_comm *c, void *arg)
{
    (void)arg;
    float x[64 * EV_MAX_RANKS] = {0}, y[64 * EV_MAX_RANKS];
    int rc = 0;
    mlsys_set_algo(c, MLSYS_COLL_ALLREDUCE, "ring");
    rc |= mlsys_allreduce(c, x, y, 64, MLSYS_F32, MLSYS_SUM);
    for (int k = 0; k < MLSYS_COLL_COUNT && !rc; k++) {
        const coll_table *t = coll_table_of((mlsys_coll)k);
        coll_args a = {x, y, 13, MLSYS_F32, MLSYS_SUM, 1};
        for (int i = 0; i < t->nalgos && !rc; i++) {
            mlsys_set_algo(c, (mlsys_coll)k, t->algos[i].name);
            if (k == MLSYS_COLL_BROADCAST)
                a.sendbuf = y;
            else if (k != MLSYS_COLL_REDUCE && k != MLSYS_COLL_ALLREDUCE &&
                     k != MLSYS_COLL_REDUCE_SCATTER)
                a.op = MLSYS_OP_NONE;
            rc = coll_run(c, (mlsys_coll)k, &a);
        }
    }
    if (rc)
        fprintf(stderr, "rank %d: %s\n", mlsys_rank(c), mlsys_errmsg(c));
    return rc != 0;
}

static void run_events(int n)
{
    char why[512] = "";
    memset(ev_steps, 0, sizeof ev_steps);
    memset(ev_sends, 0, sizeof ev_sends);
    memset(ev_calls, 0, sizeof ev_calls);
    ev_bad = 0;
    mlsys_launch_opts o = {.world_size = n, .timeout_ms = TIMEOUT_MS, .trace_capacity = 8192};
    mlsys_job *j = mlsys_job_start(&o, NULL, events_rank, NULL, why, sizeof why);
    ck_assert_msg(j != NULL, "%s", why);
    mlsys_job_sink sink = {NULL, ev_sink, NULL};
    int rc = mlsys_job_wait(j, &sink, -1, why, sizeof why);
    ck_assert_msg(rc == 0, "%s", why);
    ck_assert_int_eq((int)mlsys_job_events_lost(j), 0);
    mlsys_job_free(j);
    ck_assert_int_eq(ev_bad, 0);
    int calls = 1;
    for (int k = 0; k < MLSYS_COLL_COUNT; k++)
        calls += coll_table_of((mlsys_coll)k)->nalgos;
    for (int r = 0; r < n; r++) {
        /* the first call: the ring all-reduce, 2(N-1) steps and sends, fields filled in */
        for (int e = 0; e < 2; e++) {
            const mlsys_event *f = &ev_first[r][e];
            ck_assert_int_eq(f->coll, MLSYS_COLL_ALLREDUCE);
            ck_assert_int_eq(f->algo, 1);
            ck_assert_str_eq(f->label, "ring");
            ck_assert_int_eq(f->op, MLSYS_SUM);
            ck_assert_int_eq(f->dtype, MLSYS_F32);
            ck_assert_int_eq((int)f->bytes, 64 * 4);
        }
        ck_assert_int_eq(ev_steps[r][0], 2 * (n - 1));
        ck_assert_int_eq(ev_sends[r][0], 2 * (n - 1));
        ck_assert_int_eq(ev_calls[r], calls);
        for (int k = 0; k < calls; k++) {
            ck_assert_msg(ev_steps[r][k] == ev_steps[0][k] && ev_steps[r][k] > 0,
                          "call %d: rank %d passed %d steps, rank 0 %d", k, r, ev_steps[r][k],
                          ev_steps[0][k]);
        }
    }
}

START_TEST(test_events)
{
    run_events(_i == 0 ? 5 : 4);
}
END_TEST

/* Gated mode: every rank waits at each step until the runner grants it; the collectives
 * still complete, with the right data, when the runner grants one step at a time. */
static int gated_rank(mlsys_comm *c, void *arg)
{
    (void)arg;
    int n = mlsys_size(c), r = mlsys_rank(c);
    int64_t v = r + 1, sum[3] = {0};
    static const char *const algos[] = {"ring", "recursive_doubling", "recursive_halving"};
    for (int i = 0; i < 3; i++) {
        int64_t vec[8];
        for (int e = 0; e < 8; e++)
            vec[e] = v;
        int64_t out[8];
        if (mlsys_set_algo(c, MLSYS_COLL_ALLREDUCE, algos[i]) ||
            mlsys_allreduce(c, vec, out, 8, MLSYS_I64, MLSYS_SUM))
            return 2;
        sum[i] = out[7];
    }
    if (mlsys_barrier(c))
        return 2;
    for (int i = 0; i < 3; i++)
        if (sum[i] != (int64_t)n * (n + 1) / 2)
            return 1;
    return 0;
}

START_TEST(test_gated)
{
    char why[512] = "";
    mlsys_launch_opts o = {.world_size = 5, .timeout_ms = TIMEOUT_MS, .gated = 1};
    mlsys_job *j = mlsys_job_start(&o, NULL, gated_rank, NULL, why, sizeof why);
    ck_assert_msg(j != NULL, "%s", why);
    int rc, grants = 0;
    while ((rc = mlsys_job_wait(j, NULL, 2, why, sizeof why)) == 1 && grants < 10000) {
        mlsys_job_grant_step(j);
        grants++;
    }
    mlsys_job_free(j);
    ck_assert_msg(rc == 0, "gated: %s", why);
    /* ring 2(N-1) = 8, folded doubling 1 + 2 + 1, folded halving 1 + 2 + 2 + 1, barrier 3 */
    ck_assert_int_ge(grants, 8 + 4 + 6 + 3);
}
END_TEST

static Suite *coll_suite(void)
{
    Suite *s = suite_create("coll");
    TCase *api = tcase_create("api");
    tcase_add_test(api, test_names);
    tcase_add_test(api, test_decide_rules);
    tcase_add_test(api, test_choice);
    tcase_add_test(api, test_env_algo);
    tcase_add_test(api, test_errors);
    tcase_add_loop_test(api, test_counters, 2, 9);
    tcase_add_loop_test(api, test_events, 0, 2);
    tcase_add_test(api, test_gated);
    tcase_set_timeout(api, 60);
    suite_add_tcase(s, api);

    TCase *m = tcase_create("matrix");
    tcase_add_loop_test(m, test_broadcast, 1, 9);
    tcase_add_loop_test(m, test_reduce, 1, 9);
    tcase_add_loop_test(m, test_allreduce, 1, 9);
    tcase_add_loop_test(m, test_allgather, 1, 9);
    tcase_add_loop_test(m, test_reduce_scatter, 1, 9);
    tcase_add_loop_test(m, test_gather, 1, 9);
    tcase_add_loop_test(m, test_scatter, 1, 9);
    tcase_add_loop_test(m, test_alltoall, 1, 9);
    tcase_add_loop_test(m, test_barrier, 1, 9);
    tcase_add_test(m, test_all_roots);
    tcase_set_timeout(m, 120);
    suite_add_tcase(s, m);

    TCase *b = tcase_create("large");
    tcase_add_loop_test(b, test_big, 0, (int)(sizeof big_cases / sizeof big_cases[0]));
    tcase_add_loop_test(b, test_many_ranks, 0, 2);
    tcase_add_test(b, test_split);
    tcase_set_timeout(b, 120);
    suite_add_tcase(s, b);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(coll_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
