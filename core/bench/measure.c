/* measure.c - the measuring engine of `mlsys-lab bench` and of the labs that time
 * collectives: known inputs whose results are computed here independently of the runtime's
 * kernels, the buffers of one call in either placement, and one measurement (warm-up, one
 * barrier, n calls with nothing else in the timed loop, the max over ranks, then a check of
 * every element outside the loop). */
#include "bench.h"
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BENCH_SENTINEL (-4194303)   /* never a valid result: not a sum in range, not a +-2^k */

/* ---- known inputs and the results they must give ----
 * Rank r's element i is a small integer, so that sums, minima and maxima are exact in every
 * type and a misplaced block or index shows: 7i + 37r mod 1021 repeats only after 1021
 * elements or ranks. PROD uses +-1 and 2 so that a product of 64 ranks stays exact. */

static int64_t in_val(mlsys_op op, int r, size_t i)
{
    if (op == MLSYS_PROD) {
        unsigned k = (unsigned)((i * 3 + (size_t)r * 5) % 7);
        return k == 0 ? 2 : k == 1 ? -1 : 1;
    }
    return (int64_t)((i * 7 + (size_t)r * 37) % 1021) - 510;
}

static void store(void *buf, size_t i, mlsys_dtype dt, int64_t v)
{
    switch (dt) {
    case MLSYS_F32: ((float *)buf)[i] = (float)v; break;
    case MLSYS_F64: ((double *)buf)[i] = (double)v; break;
    case MLSYS_I32: ((int32_t *)buf)[i] = (int32_t)v; break;
    default: ((int64_t *)buf)[i] = v; break;
    }
}

/* An expected value: q for the integer types, d for the floating ones. */
typedef struct bench_val { int64_t q; double d; } bench_val;

static bench_val val_of(int64_t v)
{
    bench_val e = {v, (double)v};
    return e;
}

/* Integer results wrap as the type does; the 64-bit product is reduced to 32 bits last,
 * which gives the same value as wrapping at each step. */
static int64_t wrap(mlsys_dtype dt, uint64_t u)
{
    return dt == MLSYS_I32 ? (int64_t)(int32_t)(uint32_t)u : (int64_t)u;
}

/* The reduction over ranks 0..n-1 of element i, computed here, independently of the
 * runtime's kernels. */
static bench_val expect_red(mlsys_op op, mlsys_dtype dt, int n, size_t i)
{
    uint64_t usum = 0, uprod = 1;
    double dsum = 0, dprod = 1;
    int64_t lo = INT64_MAX, hi = INT64_MIN;
    for (int r = 0; r < n; r++) {
        int64_t v = in_val(op, r, i);
        usum += (uint64_t)v;
        uprod *= (uint64_t)v;
        dsum += (double)v;
        dprod *= (double)v;
        lo = v < lo ? v : lo;
        hi = v > hi ? v : hi;
    }
    bench_val e;
    switch (op) {
    case MLSYS_PROD: e.q = wrap(dt, uprod); e.d = dprod; break;
    case MLSYS_MIN: e = val_of(lo); break;
    case MLSYS_MAX: e = val_of(hi); break;
    case MLSYS_AVG: e.q = wrap(dt, usum) / n; e.d = dsum / n; break;
    default: e.q = wrap(dt, usum); e.d = dsum; break;
    }
    return e;
}

/* 1 when element i of buf is not e. Only AVG in floating point is inexact (one division). */
static int differs(const void *buf, size_t i, mlsys_dtype dt, mlsys_op op, bench_val e)
{
    double got, tol;
    switch (dt) {
    case MLSYS_I32: return ((const int32_t *)buf)[i] != (int32_t)e.q;
    case MLSYS_I64: return ((const int64_t *)buf)[i] != e.q;
    case MLSYS_F32: got = ((const float *)buf)[i]; tol = 1e-6; break;
    default: got = ((const double *)buf)[i]; tol = 1e-12; break;
    }
    if (op != MLSYS_AVG)
        return got != e.d;
    return !(fabs(got - e.d) <= tol * fmax(1.0, fabs(e.d)));
}

/* ---- one rank ---- */

struct bench_ctx {
    bench_call k;                /* a copy: what every measurement calls */
    mlsys_comm *c;
    int rank, n;
    size_t esize;
    void *send, *recv;
    size_t buf_bytes;
    mlsys_op gen_op;             /* which inputs in_val makes */
    int inject;                  /* test hook: corrupt one checked element (MLSYS_BENCH_INJECT) */
};

static char *at(void *base, size_t elems, size_t esize)
{
    return (char *)base + elems * esize;
}

/* The two buffers of one call for a placement (0 out-of-place, 1 in-place), following the
 * in-place conventions of mlsys.h. Broadcast has one buffer: both placements use recv. */
static void call_buffers(const bench_ctx *b, size_t count, int inplace, const void **s, void **r)
{
    mlsys_coll coll = b->k.coll;
    *s = b->send;
    *r = b->recv;
    if (coll == MLSYS_COLL_BROADCAST) {
        *s = b->recv;
        return;
    }
    if (!inplace)
        return;
    switch (coll) {
    case MLSYS_COLL_ALLGATHER: case MLSYS_COLL_GATHER:
        *s = at(b->recv, (size_t)b->rank * count, b->esize);
        break;
    case MLSYS_COLL_REDUCE_SCATTER: case MLSYS_COLL_SCATTER:
        *r = at(b->send, (size_t)b->rank * count, b->esize);
        break;
    default:
        *s = b->recv;
        break;
    }
}

static int call(bench_ctx *b, const void *s, void *r, size_t count)
{
    const bench_call *g = &b->k;
    mlsys_comm *c = b->c;
    switch (g->coll) {
    case MLSYS_COLL_BROADCAST: return mlsys_broadcast(c, r, count, g->dt, g->root);
    case MLSYS_COLL_REDUCE: return mlsys_reduce(c, s, r, count, g->dt, g->op, g->root);
    case MLSYS_COLL_ALLREDUCE: return mlsys_allreduce(c, s, r, count, g->dt, g->op);
    case MLSYS_COLL_ALLGATHER: return mlsys_allgather(c, s, r, count, g->dt);
    case MLSYS_COLL_REDUCE_SCATTER: return mlsys_reduce_scatter(c, s, r, count, g->dt, g->op);
    case MLSYS_COLL_GATHER: return mlsys_gather(c, s, r, count, g->dt, g->root);
    case MLSYS_COLL_SCATTER: return mlsys_scatter(c, s, r, count, g->dt, g->root);
    case MLSYS_COLL_ALLTOALL: return mlsys_alltoall(c, s, r, count, g->dt);
    default: return MLSYS_ERR_ARG;
    }
}

static void fill_inputs(const bench_ctx *b, void *buf, size_t off, size_t n_elems, int src)
{
    for (size_t i = 0; i < n_elems; i++)
        store(buf, off + i, b->k.dt, in_val(b->gen_op, src, i));
}

static void fill_sentinel(const bench_ctx *b, void *buf, size_t n_elems)
{
    for (size_t i = 0; i < n_elems; i++)
        store(buf, i, b->k.dt, BENCH_SENTINEL);
}

/* Put this rank's known inputs where the call reads them and the sentinel where it writes,
 * so that a call that writes nothing cannot pass the check with an earlier result. */
static void prepare(const bench_ctx *b, size_t count, int inplace)
{
    mlsys_coll coll = b->k.coll;
    int n = b->n, me = b->rank, root = b->k.root;
    size_t ns = bench_send_elems(coll, count, n), nr = bench_recv_elems(coll, count, n);
    if (coll == MLSYS_COLL_BROADCAST) {
        if (me == root)
            fill_inputs(b, b->recv, 0, count, root);
        else
            fill_sentinel(b, b->recv, count);
        return;
    }
    if (!inplace) {
        if (coll == MLSYS_COLL_SCATTER && me != root)
            fill_sentinel(b, b->send, ns);
        else
            fill_inputs(b, b->send, 0, ns, me);
        fill_sentinel(b, b->recv, nr);
        return;
    }
    switch (coll) {
    case MLSYS_COLL_ALLGATHER: case MLSYS_COLL_GATHER:
        fill_sentinel(b, b->recv, nr);
        for (size_t j = 0; j < count; j++)
            store(b->recv, (size_t)me * count + j, b->k.dt, in_val(b->gen_op, me, j));
        break;
    case MLSYS_COLL_REDUCE_SCATTER:
        fill_inputs(b, b->send, 0, ns, me);
        break;
    case MLSYS_COLL_SCATTER:
        if (me == root)
            fill_inputs(b, b->send, 0, ns, me);
        else
            fill_sentinel(b, b->send, ns);
        break;
    default:      /* all_reduce, reduce, all_to_all: the input is the buffer */
        fill_inputs(b, b->recv, 0, ns, me);
        break;
    }
}

/* Elements of res (the call's receive pointer) that differ from what the known inputs give. */
static uint64_t count_wrong(const bench_ctx *b, const void *res, size_t count)
{
    const bench_call *g = &b->k;
    mlsys_coll coll = g->coll;
    int n = b->n, me = b->rank, root = g->root;
    if ((coll == MLSYS_COLL_REDUCE || coll == MLSYS_COLL_GATHER) && me != root)
        return 0;
    size_t nr = bench_recv_elems(coll, count, n);
    uint64_t wrong = 0;
    for (size_t k = 0; k < nr; k++) {
        bench_val e;
        switch (coll) {
        case MLSYS_COLL_ALLREDUCE: case MLSYS_COLL_REDUCE:
            e = expect_red(g->op, g->dt, n, k);
            break;
        case MLSYS_COLL_REDUCE_SCATTER:
            e = expect_red(g->op, g->dt, n, (size_t)me * count + k);
            break;
        case MLSYS_COLL_BROADCAST:
            e = val_of(in_val(b->gen_op, root, k));
            break;
        case MLSYS_COLL_ALLGATHER: case MLSYS_COLL_GATHER:
            e = val_of(in_val(b->gen_op, (int)(k / count), k % count));
            break;
        case MLSYS_COLL_SCATTER:
            e = val_of(in_val(b->gen_op, root, (size_t)me * count + k));
            break;
        default:  /* all_to_all: block s of my result is block "me" of rank s's input */
            e = val_of(in_val(b->gen_op, (int)(k / count), (size_t)me * count + k % count));
            break;
        }
        wrong += (uint64_t)differs(res, k, g->dt, g->op, e);
    }
    return wrong;
}

/* Which rank the test hook corrupts: one whose result is checked. */
static int inject_rank(const bench_call *g, int n)
{
    mlsys_coll coll = g->coll;
    return coll == MLSYS_COLL_REDUCE || coll == MLSYS_COLL_GATHER ? g->root : n - 1;
}

static int fail(bench_ctx *b, const char *what, uint64_t bytes, int rc)
{
    fprintf(stderr, "%s: rank %d: %s of %" PRIu64 " B failed (%d): %s\n",
            b->k.who ? b->k.who : "mlsys-lab bench", b->rank, what, bytes, rc,
            mlsys_errmsg(b->c));
    return 1;
}

/* The bookkeeping all-reduces (max of times, sum of #wrong) run with the automatic rule, so
 * that a forced algorithm under test only times itself. */
static int bookkeeping(bench_ctx *b, const void *s, void *r, size_t count, mlsys_dtype dt,
                       mlsys_op op, const char *algo)
{
    int rc = 0;
    if (b->k.coll == MLSYS_COLL_ALLREDUCE)
        mlsys_set_algo(b->c, MLSYS_COLL_ALLREDUCE, NULL);
    rc = mlsys_allreduce(b->c, s, r, count, dt, op);
    if (b->k.coll == MLSYS_COLL_ALLREDUCE)
        mlsys_set_algo(b->c, MLSYS_COLL_ALLREDUCE, algo);
    return rc;
}

size_t bench_count(const bench_call *k, uint64_t bytes, int n, uint64_t *used)
{
    size_t es = mlsys_dtype_size(k->dt), div = bench_per_rank_count(k->coll) ? (size_t)n : 1;
    size_t count = (size_t)(bytes / es / div);
    if (used)
        *used = (uint64_t)count * es * div;
    return count;
}

bench_ctx *bench_ctx_new(mlsys_comm *c, const bench_call *k, uint64_t max_bytes)
{
    bench_ctx *b = mlsys_xcalloc(1, sizeof *b);
    b->k = *k;
    b->c = c;
    b->rank = mlsys_rank(c);
    b->n = mlsys_size(c);
    b->esize = mlsys_dtype_size(k->dt);
    b->gen_op = bench_is_reduction(k->coll) ? k->op : MLSYS_SUM;
    const char *inj = getenv("MLSYS_BENCH_INJECT");
    b->inject = inj && *inj && strcmp(inj, "0") != 0;
    uint64_t biggest = 0;
    bench_count(k, max_bytes, b->n, &biggest);
    b->buf_bytes = biggest ? biggest : b->esize;
    b->send = mlsys_alloc_aligned(b->buf_bytes);
    b->recv = mlsys_alloc_aligned(b->buf_bytes);
    return b;
}

void bench_ctx_free(bench_ctx *b)
{
    if (!b)
        return;
    mlsys_free_aligned(b->send, b->buf_bytes);
    mlsys_free_aligned(b->recv, b->buf_bytes);
    free(b);
}

/* One placement of one size: warm-up, barrier, n timed calls with nothing else inside the
 * loop (a clock read per call with per_call), then the max over ranks of the per-rank
 * average (and fastest call), then the check. */
int bench_measure(bench_ctx *b, uint64_t bytes, int inplace, const char *algo, bench_result *res)
{
    const bench_call *g = &b->k;
    const void *s;
    void *r;
    int rc;
    memset(res, 0, sizeof *res);
    res->algo = "none";
    size_t count = bench_count(g, bytes, b->n, &res->bytes);
    if (count == 0)
        return 0;
    if (res->bytes > b->buf_bytes) {
        fprintf(stderr, "%s: rank %d: %" PRIu64 " B is more than the %zu B the buffers were "
                "made for\n", g->who ? g->who : "mlsys-lab bench", b->rank, res->bytes,
                b->buf_bytes);
        return 1;
    }
    res->count = count;
    if ((rc = mlsys_set_algo(b->c, g->coll, algo && *algo ? algo : NULL)))
        return fail(b, "set algorithm", bytes, rc);
    call_buffers(b, count, inplace, &s, &r);
    prepare(b, count, inplace);
    for (long i = 0; i < g->warmup; i++)
        if ((rc = call(b, s, r, count)))
            return fail(b, mlsys_coll_name(g->coll), res->bytes, rc);
    if ((rc = mlsys_barrier(b->c)))
        return fail(b, "barrier", res->bytes, rc);
    uint64_t t0 = mlsys_now_ns(), t1;
    double best = 0;
    if (g->per_call) {
        uint64_t prev = t0, fastest = UINT64_MAX;
        for (long i = 0; i < g->iters; i++) {
            if ((rc = call(b, s, r, count)))
                return fail(b, mlsys_coll_name(g->coll), res->bytes, rc);
            uint64_t t = mlsys_now_ns();
            fastest = t - prev < fastest ? t - prev : fastest;
            prev = t;
        }
        t1 = prev;
        best = (double)fastest / 1e3;
    } else {
        for (long i = 0; i < g->iters; i++)
            if ((rc = call(b, s, r, count)))
                return fail(b, mlsys_coll_name(g->coll), res->bytes, rc);
        t1 = mlsys_now_ns();
    }
    res->algo = mlsys_last_algo(b->c);
    double local[2] = {(double)(t1 - t0) / 1e3 / (double)g->iters, best}, worst[2] = {0, 0};
    if ((rc = bookkeeping(b, local, worst, 2, MLSYS_F64, MLSYS_MAX, algo)))
        return fail(b, "time all_reduce", res->bytes, rc);

    int64_t wrong = 0, total = 0;
    if (g->check) {
        prepare(b, count, inplace);
        if ((rc = call(b, s, r, count)))
            return fail(b, mlsys_coll_name(g->coll), res->bytes, rc);
        if (b->inject && b->rank == inject_rank(g, b->n))
            store(r, 0, g->dt, BENCH_SENTINEL);
        wrong = (int64_t)count_wrong(b, r, count);
        if ((rc = bookkeeping(b, &wrong, &total, 1, MLSYS_I64, MLSYS_SUM, algo)))
            return fail(b, "check all_reduce", res->bytes, rc);
    }
    res->time_us = worst[0];
    res->min_us = worst[1];
    res->algbw = worst[0] > 0 ? (double)res->bytes / (worst[0] * 1e3) : 0.0;
    res->busbw = res->algbw * bench_busbw_factor(g->coll, b->n);
    res->wrong = (uint64_t)total;
    return 0;
}
