/* test_icoll.c - the non-blocking collectives (mlsys_iallreduce, mlsys_ireduce_scatter,
 * mlsys_iallgather): bit for bit the blocking result and a serial reference for every type,
 * operator, count (0, 1, primes, fewer than the ranks, a few MiB) and world size 1-8, in
 * place and not; 1, 2 and 8 in flight waited for in reverse order; real overlap with a
 * compute loop (the request is done before anyone waits); blocking calls while some are in
 * flight; argument errors, a peer that never joins or dies, finalize with requests open, and
 * the events of both threads. Integer-valued data keeps float sums exact. */
#include <check.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "../../core/mlsys.h"
#include "rank_fail.h"

#define TIMEOUT_MS 20000
#define GUARD 3                   /* elements past every output that must stay untouched */
#define SENTINEL (-77)
#define JUNK (-55)

/* ---- typed values ---- */

static void put(void *buf, mlsys_dtype dt, size_t i, int64_t v)
{
    switch (dt) {
    case MLSYS_F32: ((float *)buf)[i] = (float)v; break;
    case MLSYS_F64: ((double *)buf)[i] = (double)v; break;
    case MLSYS_I32: ((int32_t *)buf)[i] = (int32_t)v; break;
    default: ((int64_t *)buf)[i] = v; break;
    }
}

static int64_t get(const void *buf, mlsys_dtype dt, size_t i)
{
    switch (dt) {
    case MLSYS_F32: return (int64_t)((const float *)buf)[i];
    case MLSYS_F64: return (int64_t)((const double *)buf)[i];
    case MLSYS_I32: return ((const int32_t *)buf)[i];
    default: return ((const int64_t *)buf)[i];
    }
}

/* Rank r's element i of call k: small, signed, and for PROD in {-2..2} \ {0} so that eight
 * ranks' products stay exact in every type. */
static int64_t input(int r, size_t i, int k, mlsys_op op)
{
    if (op == MLSYS_PROD) {
        int64_t v = (int64_t)((r + (int)(i % 7) + k) % 2) + 1;
        return (i + (size_t)r) % 3 == 0 ? -v : v;
    }
    return (int64_t)((i * 7 + (size_t)r * 13 + (size_t)k * 5) % 201) - 100;
}

static int64_t reduce_ref(int n, size_t i, int k, mlsys_op op, mlsys_dtype dt)
{
    int64_t acc = input(0, i, k, op);
    for (int r = 1; r < n; r++) {
        int64_t v = input(r, i, k, op);
        switch (op) {
        case MLSYS_PROD: acc *= v; break;
        case MLSYS_MIN: acc = v < acc ? v : acc; break;
        case MLSYS_MAX: acc = v > acc ? v : acc; break;
        default: acc += v; break;
        }
    }
    if (op == MLSYS_AVG) {
        if (dt == MLSYS_I32 || dt == MLSYS_I64)
            return acc / n;      /* C division truncates toward zero, as mlsys_scale_avg */
        double d = dt == MLSYS_F32 ? (double)((float)acc / (float)n) : (double)acc / n;
        return (int64_t)d;       /* compared through get(), which truncates the same way */
    }
    return acc;
}

/* ---- one call, checked three ways ---- */

typedef struct call {
    mlsys_coll coll;              /* ALLREDUCE, REDUCE_SCATTER or ALLGATHER */
    size_t count;                 /* as mlsys.h: per rank for reduce_scatter and allgather */
    mlsys_dtype dt;
    mlsys_op op;
    int inplace;
    int k;                        /* which data set */
    int heap;                     /* buffers from mlsys_alloc_aligned */
    /* set up by call_prepare */
    void *in, *out, *bout, *bin;  /* icoll send/recv; the blocking call's */
    size_t in_elems, out_elems, bytes_in, bytes_out;
    const void *sbuf;
    void *rbuf;
    mlsys_request *req;
} call;

static void *buf_new(const call *x, size_t bytes)
{
    return x->heap ? mlsys_alloc_aligned(bytes) : malloc(bytes ? bytes : 1);
}

static void buf_free(const call *x, void *p, size_t bytes)
{
    if (x->heap)
        mlsys_free_aligned(p, bytes);
    else
        free(p);
}

/* Input and output sizes in elements, and where this rank's part lies. */
static void shape(const call *x, int n, size_t *in_e, size_t *out_e)
{
    switch (x->coll) {
    case MLSYS_COLL_ALLREDUCE: *in_e = x->count; *out_e = x->count; break;
    case MLSYS_COLL_REDUCE_SCATTER: *in_e = x->count * (size_t)n; *out_e = x->count; break;
    default: *in_e = x->count; *out_e = x->count * (size_t)n; break;
    }
}

static void fill_in(const call *x, void *buf, size_t off, int r)
{
    for (size_t i = 0; i < x->in_elems; i++)
        put(buf, x->dt, off + i, input(r, i, x->k, x->op));
}

/* Buffers for the non-blocking call and the blocking one, filled; in place: one vector
 * laid out as mlsys.h says. Allocation happens here, never while a call is in flight. */
static void call_prepare(call *x, int n, int r)
{
    size_t es = mlsys_dtype_size(x->dt);
    shape(x, n, &x->in_elems, &x->out_elems);
    size_t big = x->in_elems > x->out_elems ? x->in_elems : x->out_elems;
    if (x->inplace) {
        x->bytes_in = 0;
        x->bytes_out = (big + GUARD) * es;
        x->in = NULL;
        x->out = buf_new(x, x->bytes_out);
        x->bin = NULL;
        x->bout = buf_new(x, x->bytes_out);
        for (size_t i = 0; i < big + GUARD; i++) {
            put(x->out, x->dt, i, i < big ? JUNK : SENTINEL);
            put(x->bout, x->dt, i, i < big ? JUNK : SENTINEL);
        }
        size_t off = x->coll == MLSYS_COLL_ALLGATHER ? (size_t)r * x->count : 0;
        fill_in(x, x->out, off, r);
        fill_in(x, x->bout, off, r);
        if (x->coll == MLSYS_COLL_ALLGATHER) {
            x->sbuf = (char *)x->out + (size_t)r * x->count * es;
            x->rbuf = x->out;
        } else if (x->coll == MLSYS_COLL_REDUCE_SCATTER) {
            x->sbuf = x->out;
            x->rbuf = (char *)x->out + (size_t)r * x->count * es;
        } else {
            x->sbuf = x->rbuf = x->out;
        }
    } else {
        x->bytes_in = x->in_elems * es;
        x->bytes_out = (x->out_elems + GUARD) * es;
        x->in = buf_new(x, x->bytes_in);
        x->bin = buf_new(x, x->bytes_in);
        x->out = buf_new(x, x->bytes_out);
        x->bout = buf_new(x, x->bytes_out);
        fill_in(x, x->in, 0, r);
        fill_in(x, x->bin, 0, r);
        for (size_t i = 0; i < x->out_elems + GUARD; i++) {
            put(x->out, x->dt, i, i < x->out_elems ? JUNK : SENTINEL);
            put(x->bout, x->dt, i, i < x->out_elems ? JUNK : SENTINEL);
        }
        x->sbuf = x->in;
        x->rbuf = x->out;
    }
}

static int call_issue(mlsys_comm *c, call *x)
{
    switch (x->coll) {
    case MLSYS_COLL_ALLREDUCE:
        return mlsys_iallreduce(c, x->sbuf, x->rbuf, x->count, x->dt, x->op, &x->req);
    case MLSYS_COLL_REDUCE_SCATTER:
        return mlsys_ireduce_scatter(c, x->sbuf, x->rbuf, x->count, x->dt, x->op, &x->req);
    default:
        return mlsys_iallgather(c, x->sbuf, x->rbuf, x->count, x->dt, &x->req);
    }
}

/* The same call, blocking, on the second set of buffers. */
static int call_blocking(mlsys_comm *c, call *x, int r)
{
    size_t es = mlsys_dtype_size(x->dt);
    const void *s = x->inplace ? x->bout : x->bin;
    void *o = x->bout;
    if (x->inplace && x->coll == MLSYS_COLL_ALLGATHER)
        s = (char *)x->bout + (size_t)r * x->count * es;
    if (x->inplace && x->coll == MLSYS_COLL_REDUCE_SCATTER)
        o = (char *)x->bout + (size_t)r * x->count * es;
    switch (x->coll) {
    case MLSYS_COLL_ALLREDUCE: return mlsys_allreduce(c, s, o, x->count, x->dt, x->op);
    case MLSYS_COLL_REDUCE_SCATTER:
        return mlsys_reduce_scatter(c, s, o, x->count, x->dt, x->op);
    default: return mlsys_allgather(c, s, o, x->count, x->dt);
    }
}

/* 0 when the non-blocking result equals the blocking one byte for byte and the serial
 * reference; else a description in why. */
static int call_check(const call *x, int n, int r, char *why, size_t wl)
{
    size_t es = mlsys_dtype_size(x->dt);
    size_t total = x->inplace ? x->bytes_out / es : x->out_elems + GUARD;
    const char *o = x->out, *b = x->bout;
    size_t res_off = 0;
    if (x->inplace && x->coll == MLSYS_COLL_REDUCE_SCATTER)
        res_off = (size_t)r * x->count;
    if (memcmp(o, b, total * es) != 0) {
        for (size_t i = 0; i < total; i++)
            if (memcmp(o + i * es, b + i * es, es)) {
                snprintf(why, wl, "element %zu differs from the blocking call's (%lld vs %lld)",
                         i, (long long)get(o, x->dt, i), (long long)get(b, x->dt, i));
                break;
            }
        return 1;
    }
    size_t out_e = x->out_elems;
    for (size_t i = 0; i < out_e; i++) {
        int64_t want;
        if (x->coll == MLSYS_COLL_ALLGATHER)
            want = input((int)(i / x->count), i % x->count, x->k, x->op);
        else if (x->coll == MLSYS_COLL_REDUCE_SCATTER)
            want = reduce_ref(n, (size_t)r * x->count + i, x->k, x->op, x->dt);
        else
            want = reduce_ref(n, i, x->k, x->op, x->dt);
        int64_t got = get(o, x->dt, res_off + i);
        if (got != want) {
            snprintf(why, wl, "element %zu is %lld, the reference says %lld", i,
                     (long long)got, (long long)want);
            return 1;
        }
    }
    size_t end = x->inplace ? x->bytes_out / es - GUARD : out_e;
    for (size_t i = end; i < end + GUARD; i++)
        if (get(o, x->dt, i) != SENTINEL) {
            snprintf(why, wl, "guard element %zu past the output was written", i - end);
            return 1;
        }
    return 0;
}

static void call_free(call *x)
{
    if (x->in)
        buf_free(x, x->in, x->bytes_in);
    if (x->bin)
        buf_free(x, x->bin, x->bytes_in);
    buf_free(x, x->out, x->bytes_out);
    buf_free(x, x->bout, x->bytes_out);
}

static const char *coll_label(const call *x)
{
    return x->coll == MLSYS_COLL_ALLREDUCE ? "iallreduce"
           : x->coll == MLSYS_COLL_REDUCE_SCATTER ? "ireduce_scatter" : "iallgather";
}

#define CALL_FAIL(x, fmt, ...)                                                                \
    FAIL_IF(1, "%s count %zu %s %s %s: " fmt, coll_label(x), (x)->count,                    \
            mlsys_dtype_name((x)->dt), (x)->coll == MLSYS_COLL_ALLGATHER ? "-" :           \
            mlsys_op_name((x)->op), (x)->inplace ? "in place" : "out of place", __VA_ARGS__)

/* Issue, then the blocking twin (which fences: the icoll ends first), then wait and check. */
static int one_call(mlsys_comm *c, call *x)
{
    int n = mlsys_size(c), r = mlsys_rank(c);
    char why[256];
    call_prepare(x, n, r);
    if (call_issue(c, x))
        CALL_FAIL(x, "issue: %s", mlsys_errmsg(c));
    if (call_blocking(c, x, r))
        CALL_FAIL(x, "blocking: %s", mlsys_errmsg(c));
    if (mlsys_wait(x->req))
        CALL_FAIL(x, "wait: %s", mlsys_errmsg(c));
    if (call_check(x, n, r, why, sizeof why))
        CALL_FAIL(x, "%s", why);
    call_free(x);
    return 0;
}

/* ---- the matrix: every type and operator, awkward counts, in place and not ---- */

static int matrix_rank(mlsys_comm *c, void *arg)
{
    (void)arg;
    int n = mlsys_size(c);
    size_t counts[] = {0, 1, 2, 7, 13, 131, (size_t)(n > 1 ? n - 1 : 1)};
    static const mlsys_coll colls[] = {MLSYS_COLL_ALLREDUCE, MLSYS_COLL_REDUCE_SCATTER,
                                       MLSYS_COLL_ALLGATHER};
    int k = 0;
    for (size_t ci = 0; ci < sizeof counts / sizeof counts[0]; ci++)
        for (int cc = 0; cc < 3; cc++)
            for (int dt = 0; dt < MLSYS_DTYPE_COUNT; dt++)
                for (int op = 0; op < MLSYS_OP_COUNT; op++)
                    for (int ip = 0; ip < 2; ip++) {
                        if (colls[cc] == MLSYS_COLL_ALLGATHER && op > 0)
                            continue;
                        call x = {.coll = colls[cc], .count = counts[ci], .dt = (mlsys_dtype)dt,
                                  .op = colls[cc] == MLSYS_COLL_ALLGATHER ? MLSYS_OP_NONE
                                                                          : (mlsys_op)op,
                                  .inplace = ip, .k = k++, .heap = (k % 3) == 0};
                        if (one_call(c, &x))
                            return 1;
                    }
    return 0;
}

START_TEST(test_matrix)
{
    char why[512] = "";
    int rc = mlsys_run_fn(_i, TIMEOUT_MS, matrix_rank, NULL, why, sizeof why);
    ck_assert_msg(rc == 0, "%d ranks: %s", _i, why);
}
END_TEST

/* ---- large: a few MiB, with every forced algorithm of all_reduce ---- */

static int large_rank(mlsys_comm *c, void *arg)
{
    const char *algo = arg;
    int n = mlsys_size(c);
    size_t big = (3u << 20) / 4 + 17;     /* about 3 MiB of f32, not a multiple of N */
    if (algo)
        mlsys_set_algo_all(c, algo);
    for (int heap = 0; heap < 2; heap++) {
        call a = {.coll = MLSYS_COLL_ALLREDUCE, .count = big, .dt = MLSYS_F32, .op = MLSYS_SUM,
                  .inplace = heap, .k = 1, .heap = heap};
        call rs = {.coll = MLSYS_COLL_REDUCE_SCATTER, .count = big / (size_t)n, .dt = MLSYS_I64,
                   .op = MLSYS_MAX, .inplace = !heap, .k = 2, .heap = heap};
        call ag = {.coll = MLSYS_COLL_ALLGATHER, .count = big / (size_t)n / 2, .dt = MLSYS_F64,
                   .op = MLSYS_OP_NONE, .inplace = heap, .k = 3, .heap = heap};
        if (one_call(c, &a) || one_call(c, &rs) || one_call(c, &ag))
            return 1;
    }
    return 0;
}

static const struct { int n; const char *algo; } large_cases[] = {
    {2, NULL}, {3, NULL}, {4, NULL}, {8, NULL}, {4, "ring"}, {4, "recursive_halving"},
    {5, "tree"}, {4, "shm_direct"},
};

START_TEST(test_large)
{
    char why[512] = "";
    int rc = mlsys_run_fn(large_cases[_i].n, TIMEOUT_MS, large_rank,
                          (void *)large_cases[_i].algo, why, sizeof why);
    ck_assert_msg(rc == 0, "%d ranks, algo %s: %s", large_cases[_i].n,
                  large_cases[_i].algo ? large_cases[_i].algo : "auto", why);
}
END_TEST

/* ---- several in flight, waited for in reverse order (or by waitall) ---- */

typedef struct inflight { int depth; int use_waitall; } inflight;

static int inflight_rank(mlsys_comm *c, void *arg)
{
    const inflight *f = arg;
    int n = mlsys_size(c), r = mlsys_rank(c);
    call x[8];
    mlsys_request *reqs[8];
    char why[256];
    for (int round = 0; round < 3; round++) {
        for (int i = 0; i < f->depth; i++) {
            mlsys_coll cl = i % 3 == 0 ? MLSYS_COLL_ALLREDUCE
                            : i % 3 == 1 ? MLSYS_COLL_REDUCE_SCATTER : MLSYS_COLL_ALLGATHER;
            x[i] = (call){.coll = cl, .count = (size_t)(round == 2 ? 40000 : 1 + 37 * i),
                          .dt = (mlsys_dtype)(i % MLSYS_DTYPE_COUNT),
                          .op = cl == MLSYS_COLL_ALLGATHER ? MLSYS_OP_NONE
                                                           : (mlsys_op)(i % MLSYS_OP_COUNT),
                          .inplace = (i + round) % 2, .k = 10 * round + i, .heap = round == 1};
            call_prepare(&x[i], n, r);
        }
        for (int i = 0; i < f->depth; i++)
            if (call_issue(c, &x[i]))
                CALL_FAIL(&x[i], "issue: %s", mlsys_errmsg(c));
        if (f->use_waitall) {
            for (int i = 0; i < f->depth; i++)
                reqs[f->depth - 1 - i] = x[i].req;
            if (mlsys_waitall(reqs, f->depth))
                FAIL_IF(1, "waitall of %d: %s", f->depth, mlsys_errmsg(c));
            for (int i = 0; i < f->depth; i++)
                FAIL_IF(reqs[i] != NULL, "waitall left request %d set", i);
        } else {
            for (int i = f->depth - 1; i >= 0; i--)
                if (mlsys_wait(x[i].req))
                    CALL_FAIL(&x[i], "wait (reverse order): %s", mlsys_errmsg(c));
        }
        /* now the blocking twins, one by one, to compare with */
        for (int i = 0; i < f->depth; i++) {
            if (call_blocking(c, &x[i], r))
                CALL_FAIL(&x[i], "blocking: %s", mlsys_errmsg(c));
            if (call_check(&x[i], n, r, why, sizeof why))
                CALL_FAIL(&x[i], "%d in flight: %s", f->depth, why);
            call_free(&x[i]);
        }
    }
    return 0;
}

static const struct { int n; inflight f; } inflight_cases[] = {
    {2, {1, 0}}, {3, {2, 0}}, {4, {8, 0}}, {8, {8, 0}}, {5, {8, 1}}, {1, {8, 0}},
};

START_TEST(test_inflight)
{
    char why[512] = "";
    int rc = mlsys_run_fn(inflight_cases[_i].n, TIMEOUT_MS, inflight_rank,
                          (void *)&inflight_cases[_i].f, why, sizeof why);
    ck_assert_msg(rc == 0, "%d ranks, %d in flight: %s", inflight_cases[_i].n,
                  inflight_cases[_i].f.depth, why);
}
END_TEST

/* ---- overlap: the collective finishes while the caller computes ---- */

/* A compute loop that calls nothing of the runtime: the clock straight from the kernel's
 * vDSO and arithmetic. Returns something so the compiler keeps the loop. */
static double compute_for(long ms)
{
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    double acc = 1.0;
    for (;;) {
        for (int i = 0; i < 20000; i++)
            acc = acc * 1.0000001 + 1e-9;
        clock_gettime(CLOCK_MONOTONIC, &t);
        long el = (t.tv_sec - t0.tv_sec) * 1000L + (t.tv_nsec - t0.tv_nsec) / 1000000L;
        if (el >= ms)
            return acc;
    }
}

/* Issue, compute without touching the runtime, then mlsys_test: under the progress thread
 * test only reads the request's state, so done = 1 means the all-reduce ran during the
 * compute. Every rank must see it; a round where one did not (a loaded machine) is retried
 * with twice the compute, up to five times. The counts are checked too. */
static int overlap_rank(mlsys_comm *c, void *arg)
{
    (void)arg;
    int n = mlsys_size(c), r = mlsys_rank(c);
    size_t count = 64 * 1024;
    float *in = mlsys_alloc_aligned(count * sizeof(float));
    float *out = mlsys_alloc_aligned(count * sizeof(float));
    for (size_t i = 0; i < count; i++)
        in[i] = (float)(r + 1);
    long ms = 40;
    double sink = 0;
    for (int attempt = 0; attempt < 5; attempt++, ms *= 2) {
        mlsys_request *q;
        FAIL_IF(mlsys_barrier(c), "barrier: %s", mlsys_errmsg(c));
        FAIL_IF(mlsys_iallreduce(c, in, out, count, MLSYS_F32, MLSYS_SUM, &q), "issue: %s",
                mlsys_errmsg(c));
        sink += compute_for(ms);
        int done = -1;
        FAIL_IF(mlsys_test(q, &done), "test: %s", mlsys_errmsg(c));
        FAIL_IF(mlsys_wait(q), "wait: %s", mlsys_errmsg(c));
        for (size_t i = 0; i < count; i++)
            FAIL_IF(out[i] != (float)(n * (n + 1) / 2), "element %zu is %g", i, (double)out[i]);
        int32_t mine = done, all = 0;
        FAIL_IF(mlsys_allreduce(c, &mine, &all, 1, MLSYS_I32, MLSYS_MIN), "allreduce: %s",
                mlsys_errmsg(c));
        if (all == 1) {
            mlsys_free_aligned(in, count * sizeof(float));
            mlsys_free_aligned(out, count * sizeof(float));
            return sink < 0;     /* never: keeps the compute */
        }
    }
    FAIL_IF(1, "after 5 rounds (up to %ld ms of compute) the all-reduce had still not "
            "finished when the caller came back: no progress while computing", ms / 2);
}

START_TEST(test_overlap)
{
    char why[512] = "";
    int rc = mlsys_run_fn(_i, TIMEOUT_MS, overlap_rank, NULL, why, sizeof why);
    ck_assert_msg(rc == 0, "%d ranks: %s", _i, why);
}
END_TEST

/* ---- mixing: blocking collectives, p2p and a split communicator while some are in flight */

static int mixed_rank(mlsys_comm *c, void *arg)
{
    (void)arg;
    int n = mlsys_size(c), r = mlsys_rank(c);
    mlsys_comm *half = NULL;
    FAIL_IF(mlsys_split(c, r % 2, r, &half), "split: %s", mlsys_errmsg(c));
    int hn = mlsys_size(half);
    int64_t a[5], b[5], h[3], blk[2], got = -1;
    for (int i = 0; i < 5; i++)
        a[i] = r + i;
    for (int i = 0; i < 3; i++)
        h[i] = 10 * r + i;
    mlsys_request *qa, *qh;
    mlsys_reset_counters(c);
    FAIL_IF(mlsys_iallreduce(c, a, b, 5, MLSYS_I64, MLSYS_SUM, &qa), "issue: %s", mlsys_errmsg(c));
    FAIL_IF(mlsys_iallreduce(half, h, h, 3, MLSYS_I64, MLSYS_MAX, &qh), "issue half: %s",
            mlsys_errmsg(half));
    /* a blocking all-reduce and a ring of p2p messages while both are (maybe) in flight */
    int64_t one[2] = {1, r};
    FAIL_IF(mlsys_allreduce(c, one, blk, 2, MLSYS_I64, MLSYS_SUM), "blocking: %s",
            mlsys_errmsg(c));
    int64_t me = r;
    FAIL_IF(mlsys_sendrecv(c, &me, 1, (r + 1) % n, 4, &got, 1, (r + n - 1) % n, 4, MLSYS_I64),
            "sendrecv: %s", mlsys_errmsg(c));
    FAIL_IF(mlsys_wait(qh), "wait half: %s", mlsys_errmsg(half));
    FAIL_IF(mlsys_wait(qa), "wait: %s", mlsys_errmsg(c));
    FAIL_IF(blk[0] != n || blk[1] != (int64_t)n * (n - 1) / 2, "blocking result %lld %lld",
            (long long)blk[0], (long long)blk[1]);
    FAIL_IF(got != (r + n - 1) % n, "sendrecv got %lld", (long long)got);
    for (int i = 0; i < 5; i++)
        FAIL_IF(b[i] != (int64_t)n * (n - 1) / 2 + (int64_t)n * i, "b[%d] = %lld", i,
                (long long)b[i]);
    int top = r % 2 + 2 * (hn - 1);     /* the largest rank of my half */
    for (int i = 0; i < 3; i++)
        FAIL_IF(h[i] != 10 * top + i, "half h[%d] = %lld, want %d", i, (long long)h[i],
                10 * top + i);
    const mlsys_counters *k = mlsys_get_counters(c);
    FAIL_IF(k->coll_calls[MLSYS_COLL_ALLREDUCE] != 2, "all_reduce counted %llu times, not 2",
            (unsigned long long)k->coll_calls[MLSYS_COLL_ALLREDUCE]);
    FAIL_IF(n > 1 && (k->sends == 0 || k->recvs == 0), "no messages counted");
    return 0;
}

START_TEST(test_mixed)
{
    char why[512] = "";
    int rc = mlsys_run_fn(_i, TIMEOUT_MS, mixed_rank, NULL, why, sizeof why);
    ck_assert_msg(rc == 0, "%d ranks: %s", _i, why);
}
END_TEST

/* ---- argument errors ---- */

static int errors_rank(mlsys_comm *c, void *arg)
{
    (void)arg;
    float x[4] = {0}, y[16];
    mlsys_request *q = (mlsys_request *)&q;   /* must be reset to NULL */
    FAIL_IF(mlsys_iallreduce(c, x, y, 4, MLSYS_F32, MLSYS_SUM, NULL) != MLSYS_ERR_ARG,
            "null request pointer accepted");
    FAIL_IF(!strstr(mlsys_errmsg(c), "null request"), "message: %s", mlsys_errmsg(c));
    FAIL_IF(mlsys_iallreduce(c, x, y, 4, (mlsys_dtype)42, MLSYS_SUM, &q) != MLSYS_ERR_ARG,
            "bad type accepted");
    FAIL_IF(q != NULL, "request not reset on error");
    FAIL_IF(!strstr(mlsys_errmsg(c), "iallreduce") || !strstr(mlsys_errmsg(c), "type"),
            "message: %s", mlsys_errmsg(c));
    FAIL_IF(mlsys_ireduce_scatter(c, x, y, 1, MLSYS_F32, (mlsys_op)9, &q) != MLSYS_ERR_ARG,
            "bad operator accepted");
    FAIL_IF(mlsys_ireduce_scatter(c, x, y, 1, MLSYS_F32, MLSYS_OP_NONE, &q) != MLSYS_ERR_ARG,
            "reduce_scatter without an operator accepted");
    FAIL_IF(mlsys_iallgather(c, x, y, SIZE_MAX / 4, MLSYS_F64, &q) != MLSYS_ERR_ARG,
            "overflowing count accepted");
    FAIL_IF(!strstr(mlsys_errmsg(c), "overflows"), "message: %s", mlsys_errmsg(c));
    FAIL_IF(mlsys_iallgather(c, NULL, y, 1, MLSYS_F32, &q) != MLSYS_ERR_ARG,
            "null sendbuf accepted");
    FAIL_IF(mlsys_iallreduce(c, x, NULL, 1, MLSYS_F32, MLSYS_MAX, &q) != MLSYS_ERR_ARG,
            "null recvbuf accepted");
    FAIL_IF(mlsys_iallreduce(NULL, x, y, 1, MLSYS_F32, MLSYS_MAX, &q) != MLSYS_ERR_ARG,
            "null communicator accepted");
    /* count 0 with NULL buffers is fine, and nothing was issued above: this one matches */
    FAIL_IF(mlsys_iallreduce(c, NULL, NULL, 0, MLSYS_F32, MLSYS_SUM, &q), "count 0: %s",
            mlsys_errmsg(c));
    FAIL_IF(mlsys_wait(q), "wait count 0: %s", mlsys_errmsg(c));
    int done = 0;
    FAIL_IF(mlsys_test(NULL, &done) || !done, "test(NULL)");
    return 0;
}

START_TEST(test_errors)
{
    char why[512] = "";
    int rc = mlsys_run_fn(_i, TIMEOUT_MS, errors_rank, NULL, why, sizeof why);
    ck_assert_msg(rc == 0, "%d ranks: %s", _i, why);
}
END_TEST

/* ---- a peer that never joins: timeout, then the rest fail at once ---- */

static int absent_rank(mlsys_comm *c, void *arg)
{
    (void)arg;
    if (mlsys_rank(c) == 1) {
        sleep(2);                /* alive, but never issues: rank 0 must time out */
        return 0;
    }
    mlsys_set_timeout_ms(c, 300);
    float x[1000], y[1000];
    for (int i = 0; i < 1000; i++)
        x[i] = 1;
    mlsys_request *q[3];
    for (int i = 0; i < 3; i++)
        FAIL_IF(mlsys_iallreduce(c, x, y, 1000, MLSYS_F32, MLSYS_SUM, &q[i]), "issue: %s",
                mlsys_errmsg(c));
    int rc = mlsys_wait(q[0]);
    FAIL_IF(rc != MLSYS_ERR_TIMEOUT, "first wait returned %d (%s), not a timeout", rc,
            mlsys_errmsg(c));
    FAIL_IF(!strstr(mlsys_errmsg(c), "deadlock suspected"), "message: %s", mlsys_errmsg(c));
    rc = mlsys_wait(q[2]);
    FAIL_IF(rc != MLSYS_ERR_ABORTED, "a later one returned %d (%s)", rc, mlsys_errmsg(c));
    FAIL_IF(!strstr(mlsys_errmsg(c), "earlier non-blocking collective"), "message: %s",
            mlsys_errmsg(c));
    int done = 0;
    rc = mlsys_test(q[1], &done);
    FAIL_IF(!done || rc != MLSYS_ERR_ABORTED, "test of the middle one: done %d rc %d", done, rc);
    FAIL_IF(mlsys_wait(q[1]) != MLSYS_ERR_ABORTED, "wait of the middle one");
    return 0;
}

START_TEST(test_absent_peer)
{
    char why[512] = "";
    int rc = mlsys_run_fn(2, TIMEOUT_MS, absent_rank, NULL, why, sizeof why);
    ck_assert_msg(rc == 0, "%s", why);
}
END_TEST

/* ---- a peer that dies mid-collective: the job ends, naming it, instead of hanging ---- */

static int dying_rank(mlsys_comm *c, void *arg)
{
    (void)arg;
    size_t count = 1 << 20;
    float *x = mlsys_alloc_aligned(count * sizeof(float));
    mlsys_request *q;
    for (int round = 0; round < 1000; round++) {
        FAIL_IF(mlsys_iallreduce(c, x, x, count, MLSYS_F32, MLSYS_MAX, &q), "issue: %s",
                mlsys_errmsg(c));
        if (mlsys_rank(c) == 1 && round == 2)
            raise(SIGKILL);      /* while its progress thread is in the middle of it */
        int rc = mlsys_wait(q);
        if (rc)
            return rc == MLSYS_ERR_ABORTED || rc == MLSYS_ERR_TIMEOUT ? 5 : 6;
    }
    return 0;
}

START_TEST(test_dying_peer)
{
    char why[512] = "";
    int rc = mlsys_run_fn(3, TIMEOUT_MS, dying_rank, NULL, why, sizeof why);
    ck_assert_msg(rc != 0, "the job succeeded although rank 1 died");
    ck_assert_msg(strstr(why, "rank 1") && strstr(why, "signal 9"), "why: %s", why);
}
END_TEST

/* ---- finalize with requests nobody waited for: they complete, nothing crashes ---- */

static int unwaited_rank(mlsys_comm *c, void *arg)
{
    (void)arg;
    static double v[3][4096];
    mlsys_request *q;
    for (int i = 0; i < 3; i++)
        FAIL_IF(mlsys_iallreduce(c, v[i], v[i], 4096, MLSYS_F64, MLSYS_SUM, &q), "issue: %s",
                mlsys_errmsg(c));
    return 0;                    /* mlsys_run_fn finalizes with three in flight */
}

START_TEST(test_finalize_inflight)
{
    char why[512] = "";
    int rc = mlsys_run_fn(_i, TIMEOUT_MS, unwaited_rank, NULL, why, sizeof why);
    ck_assert_msg(rc == 0, "%d ranks: %s", _i, why);
}
END_TEST

/* ---- events: both threads into one ring, the collective's span labelled async ---- */

typedef struct ev_count { int coll_begin_async, coll_end_async, compute, marks, bad; } ev_count;

static void ev_sink(void *u, const mlsys_event *ev, size_t n)
{
    ev_count *k = u;
    for (size_t i = 0; i < n; i++) {
        const mlsys_event *e = &ev[i];
        if (e->kind < 0 || e->kind >= MLSYS_EV_KIND_COUNT || e->rank < 0 || e->rank > 3)
            k->bad++;
        if (e->kind == MLSYS_EV_COLL_BEGIN && strstr(e->label, "async") &&
            e->coll == MLSYS_COLL_ALLREDUCE)
            k->coll_begin_async++;
        if (e->kind == MLSYS_EV_COLL_END && strstr(e->label, "async"))
            k->coll_end_async++;
        if (e->kind == MLSYS_EV_COMPUTE_BEGIN || e->kind == MLSYS_EV_COMPUTE_END)
            k->compute++;
        if (e->kind == MLSYS_EV_MARK && e->coll == MLSYS_COLL_ALLREDUCE &&
            (!strcmp(e->label, "icoll issue") || !strcmp(e->label, "icoll waited")))
            k->marks++;
    }
}

static int traced_rank(mlsys_comm *c, void *arg)
{
    (void)arg;
    static float g[8][2048];
    mlsys_request *q[8];
    for (int b = 0; b < 8; b++) {
        FAIL_IF(mlsys_iallreduce(c, g[b], g[b], 2048, MLSYS_F32, MLSYS_SUM, &q[b]), "issue: %s",
                mlsys_errmsg(c));
        mlsys_compute_begin(c, "B");
        compute_for(1);
        mlsys_compute_end(c, "B");
    }
    FAIL_IF(mlsys_waitall(q, 8), "waitall: %s", mlsys_errmsg(c));
    return 0;
}

START_TEST(test_events)
{
    char why[512] = "";
    ev_count k;
    memset(&k, 0, sizeof k);
    mlsys_launch_opts o = {.world_size = 4, .timeout_ms = TIMEOUT_MS, .trace_capacity = 64};
    mlsys_job *j = mlsys_job_start(&o, NULL, traced_rank, NULL, why, sizeof why);
    ck_assert_msg(j != NULL, "%s", why);
    mlsys_job_sink sink = {NULL, ev_sink, &k};
    int rc = mlsys_job_wait(j, &sink, -1, why, sizeof why);
    uint64_t lost = mlsys_job_events_lost(j);
    mlsys_job_free(j);
    ck_assert_msg(rc == 0, "%s", why);
    ck_assert_uint_eq(lost, 0);
    ck_assert_int_eq(k.bad, 0);
    ck_assert_int_eq(k.coll_begin_async, 4 * 8);
    ck_assert_int_eq(k.coll_end_async, 4 * 8);
    ck_assert_int_eq(k.compute, 4 * 8 * 2);
    ck_assert_int_eq(k.marks, 4 * 8 * 2);      /* issue and waited */
}
END_TEST

static Suite *icoll_suite(void)
{
    Suite *s = suite_create("icoll");
    TCase *m = tcase_create("matrix");
    tcase_add_loop_test(m, test_matrix, 1, 9);
    tcase_add_loop_test(m, test_large, 0, (int)(sizeof large_cases / sizeof large_cases[0]));
    tcase_add_loop_test(m, test_inflight, 0,
                        (int)(sizeof inflight_cases / sizeof inflight_cases[0]));
    tcase_set_timeout(m, 120);
    suite_add_tcase(s, m);

    TCase *o = tcase_create("overlap");
    tcase_add_loop_test(o, test_overlap, 2, 5);
    tcase_add_loop_test(o, test_mixed, 1, 7);
    tcase_add_test(o, test_events);
    tcase_set_timeout(o, 60);
    suite_add_tcase(s, o);

    TCase *e = tcase_create("errors");
    tcase_add_loop_test(e, test_errors, 1, 4);
    tcase_add_test(e, test_absent_peer);
    tcase_add_test(e, test_dying_peer);
    tcase_add_loop_test(e, test_finalize_inflight, 1, 5);
    tcase_set_timeout(e, 60);
    suite_add_tcase(s, e);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(icoll_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
