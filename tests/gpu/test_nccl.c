/* test_nccl.c - GPU checks of the NCCL plugin, run by tests/gpu/run: the CUDA kernels (fill vs
 * a CPU formula, the wrong-element counter vs planted errors), the device self-test, and every
 * native collective in every type and operator, in and out of place, against host references;
 * world size 1, then one rank per GPU. Prints one line per case and "N passed, M failed". All
 * CUDA work happens in forked ranks (a parent that touched CUDA cannot fork users of it). */
#include "../../core/coll/coll.h"
#include "../../core/nccl/nccl_plugin.h"

#include <cuda_runtime.h>
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define MAX_CASES 256
#define MAX_RANKS 8

typedef struct results {
    int ncases;
    char name[MAX_CASES][96];
    int failed[MAX_CASES];      /* ranks that failed the case */
    char why[MAX_CASES][160];
    int ngpus;
} results;

static results *g_res;
static void *g_plugin;

/* Records a case; every rank records the same cases in the same order. */
static void record(mlsys_comm *c, int *idx, const char *name, int ok, const char *why)
{
    int k = (*idx)++;
    if (k >= MAX_CASES)
        return;
    if (mlsys_rank(c) == 0) {
        snprintf(g_res->name[k], sizeof g_res->name[k], "%s", name);
        if (k + 1 > g_res->ncases)
            g_res->ncases = k + 1;
    }
    if (!ok) {
        __atomic_fetch_add(&g_res->failed[k], 1, __ATOMIC_SEQ_CST);
        if (strncmp(why, "rank ", 5) == 0)
            snprintf(g_res->why[k], sizeof g_res->why[k], "%s", why);
        else
            snprintf(g_res->why[k], sizeof g_res->why[k], "rank %d: %s", mlsys_rank(c), why);
    }
}

/* ---- data: small integers, exact in every type and under every operator ---- */

static double val(int r, size_t i) { return (double)((r + 1) * (int)(i % 7 + 1)); }
static double pval(int r, size_t i) { return (double)(1 + (r + (int)i) % 2); }   /* for PROD */

static void put(void *buf, mlsys_dtype dt, size_t i, double v)
{
    switch (dt) {
    case MLSYS_F32: ((float *)buf)[i] = (float)v; break;
    case MLSYS_F64: ((double *)buf)[i] = v; break;
    case MLSYS_I32: ((int32_t *)buf)[i] = (int32_t)v; break;
    default: ((int64_t *)buf)[i] = (int64_t)v; break;
    }
}

static double get(const void *buf, mlsys_dtype dt, size_t i)
{
    switch (dt) {
    case MLSYS_F32: return ((const float *)buf)[i];
    case MLSYS_F64: return ((const double *)buf)[i];
    case MLSYS_I32: return ((const int32_t *)buf)[i];
    default: return (double)((const int64_t *)buf)[i];
    }
}

static double value_of(mlsys_op op, int r, size_t i)
{
    return op == MLSYS_PROD ? pval(r, i) : val(r, i);
}

/* The reduction over ranks 0..n-1 of element i (AVG reduces as SUM: the dispatcher divides). */
static double reduced(mlsys_op op, int n, size_t i)
{
    double acc = value_of(op, 0, i);
    for (int r = 1; r < n; r++) {
        double v = value_of(op, r, i);
        switch (op) {
        case MLSYS_PROD: acc *= v; break;
        case MLSYS_MIN: acc = v < acc ? v : acc; break;
        case MLSYS_MAX: acc = v > acc ? v : acc; break;
        default: acc += v;
        }
    }
    return acc;
}

/* First mismatch between buf and want(i), or -1. */
static long first_wrong(const void *buf, mlsys_dtype dt, size_t count,
                        double (*want)(size_t i, const void *ctx), const void *ctx, double *got,
                        double *exp)
{
    for (size_t i = 0; i < count; i++) {
        double g = get(buf, dt, i), w = want(i, ctx);
        if (g != w) {
            *got = g;
            *exp = w;
            return (long)i;
        }
    }
    return -1;
}

typedef struct ref_ctx { int coll, n, rank, root; mlsys_op op; size_t cnt; } ref_ctx;

static double want_of(size_t i, const void *p)
{
    const ref_ctx *x = p;
    size_t blk = i / x->cnt, off = i % x->cnt;
    switch (x->coll) {
    case MLSYS_COLL_BROADCAST: return val(x->root, i);
    case MLSYS_COLL_REDUCE: case MLSYS_COLL_ALLREDUCE: return reduced(x->op, x->n, i);
    case MLSYS_COLL_ALLGATHER: case MLSYS_COLL_GATHER: return val((int)blk, off);
    case MLSYS_COLL_REDUCE_SCATTER: return reduced(x->op, x->n, (size_t)x->rank * x->cnt + i);
    case MLSYS_COLL_SCATTER: return val(x->root, (size_t)x->rank * x->cnt + i);
    case MLSYS_COLL_ALLTOALL: return val((int)blk, (size_t)x->rank * x->cnt + off);
    default: return 0;
    }
}

/* One native call of coll with count cnt (per rank where the API says so). inplace uses the
 * NCCL in-place conventions of mlsys.h. Returns 1 when this rank's result is right. */
static int run_case(mlsys_comm *c, int coll, mlsys_dtype dt, mlsys_op op, size_t cnt,
                    int inplace, int root, char *why, size_t wn)
{
    int n = mlsys_size(c), r = mlsys_rank(c);
    size_t es = mlsys_dtype_size(dt);
    size_t scount = cnt, rcount = cnt;     /* elements of the send and receive buffers */
    switch (coll) {
    case MLSYS_COLL_ALLGATHER: case MLSYS_COLL_GATHER: rcount = cnt * (size_t)n; break;
    case MLSYS_COLL_REDUCE_SCATTER: case MLSYS_COLL_SCATTER: scount = cnt * (size_t)n; break;
    case MLSYS_COLL_ALLTOALL: scount = rcount = cnt * (size_t)n; break;
    default: break;
    }
    char *sbuf = calloc(scount + rcount + 1, es), *rbuf = calloc(rcount + 1, es);
    char *s = sbuf, *d = rbuf;
    for (size_t i = 0; i < scount; i++)
        put(sbuf, dt, i, coll == MLSYS_COLL_BROADCAST ? (r == root ? val(r, i) : -1.0)
                         : coll == MLSYS_COLL_SCATTER ? val(r, i) : value_of(op, r, i));
    if (inplace) {
        switch (coll) {
        case MLSYS_COLL_ALLGATHER: case MLSYS_COLL_GATHER:
            memcpy(rbuf + (size_t)r * cnt * es, sbuf, cnt * es);
            s = rbuf + (size_t)r * cnt * es;
            break;
        case MLSYS_COLL_REDUCE_SCATTER: case MLSYS_COLL_SCATTER:
            s = sbuf;
            d = sbuf + (size_t)r * cnt * es;
            break;
        default:
            memcpy(rbuf, sbuf, scount * es);
            s = d = rbuf;
        }
    }
    if (coll == MLSYS_COLL_BROADCAST)
        s = d = inplace ? rbuf : (memcpy(rbuf, sbuf, cnt * es), rbuf);
    coll_args a = {s, d, cnt, dt, op, root};
    int rc = c->w->tp->native(c, coll, &a);
    int ok = 1;
    if (rc != MLSYS_OK) {
        snprintf(why, wn, "native returned %d: %s", rc, mlsys_errmsg(c));
        ok = 0;
    } else {
        int check = coll != MLSYS_COLL_BARRIER &&
                    !((coll == MLSYS_COLL_REDUCE || coll == MLSYS_COLL_GATHER) && r != root);
        ref_ctx x = {coll, n, r, root, op, cnt};
        double g = 0, w = 0;
        long bad = check ? first_wrong(d, dt, rcount, want_of, &x, &g, &w) : -1;
        if (coll == MLSYS_COLL_SCATTER || coll == MLSYS_COLL_REDUCE_SCATTER)
            bad = check ? first_wrong(d, dt, cnt, want_of, &x, &g, &w) : -1;
        if (bad >= 0) {
            snprintf(why, wn, "element %ld is %g, expected %g", bad, g, w);
            ok = 0;
        }
    }
    free(sbuf);
    free(rbuf);
    return ok;
}

/* ---- the kernels, on this rank's GPU ---- */

static void kernel_cases(mlsys_comm *c, int *idx)
{
    int (*fill)(float *, size_t, float, void *) =
        (int (*)(float *, size_t, float, void *))dlsym(g_plugin, "mlsys_cuda_fill");
    int (*wrongk)(const float *, size_t, float, unsigned long long *, void *) =
        (int (*)(const float *, size_t, float, unsigned long long *, void *))dlsym(
            g_plugin, "mlsys_cuda_count_wrong");
    char why[160] = "";
    int ok = fill && wrongk;
    size_t counts[] = {1, 250, 251, 252, 1000003};
    for (size_t k = 0; k < sizeof counts / sizeof counts[0] && ok; k++) {
        size_t n = counts[k];
        float *d = NULL, *h = malloc(n * sizeof *h);
        unsigned long long *dw = NULL, wrong = 99;
        int good = cudaMalloc((void **)&d, n * sizeof *d) == cudaSuccess &&
                   cudaMalloc((void **)&dw, sizeof *dw) == cudaSuccess &&
                   fill(d, n, 3.0f, NULL) == 0 && cudaDeviceSynchronize() == cudaSuccess &&
                   cudaMemcpy(h, d, n * sizeof *h, cudaMemcpyDeviceToHost) == cudaSuccess;
        for (size_t i = 0; good && i < n; i++)
            if (h[i] != (float)(i % 251 + 1) * 3.0f) {
                snprintf(why, sizeof why, "fill: element %zu is %g", i, (double)h[i]);
                good = 0;
            }
        /* plant errors at known places: the counter must find exactly those */
        size_t planted = n < 37 ? n : 37;
        if (good && (wrongk(d, n, 3.0f, dw, NULL) != 0 ||
                     cudaMemcpy(&wrong, dw, sizeof wrong, cudaMemcpyDeviceToHost) != cudaSuccess ||
                     wrong != 0)) {
            snprintf(why, sizeof why, "count_wrong on a correct buffer of %zu: %llu", n, wrong);
            good = 0;
        }
        for (size_t p = 0; good && p < planted; p++) {
            float bad = -1.0f;
            size_t at = (p * 7919) % n;
            cudaMemcpy(d + at, &bad, sizeof bad, cudaMemcpyHostToDevice);
        }
        size_t distinct = 0;
        for (size_t p = 0; p < planted; p++) {
            int dup = 0;
            for (size_t q = 0; q < p; q++)
                dup |= (p * 7919) % n == (q * 7919) % n;
            distinct += !dup;
        }
        if (good && (wrongk(d, n, 3.0f, dw, NULL) != 0 ||
                     cudaMemcpy(&wrong, dw, sizeof wrong, cudaMemcpyDeviceToHost) != cudaSuccess ||
                     wrong != distinct)) {
            snprintf(why, sizeof why, "count_wrong found %llu of %zu planted errors in %zu",
                     wrong, distinct, n);
            good = 0;
        }
        cudaFree(d);
        cudaFree(dw);
        free(h);
        char name[96];
        snprintf(name, sizeof name, "cuda kernels: fill + count_wrong, %zu floats", n);
        record(c, idx, name, good, why);
    }
    if (!fill || !wrongk)
        record(c, idx, "cuda kernels: entry points", 0, "mlsys_cuda_fill/count_wrong missing");
}

/* ---- one world: attach, self-test, every collective ---- */

static int world_fn(mlsys_comm *c, void *arg)
{
    (void)arg;
    int idx = 0;
    char err[512] = "", name[96];
    mlsys_nccl_attach_comm_fn attach =
        (mlsys_nccl_attach_comm_fn)dlsym(g_plugin, "mlsys_nccl_attach_comm");
    mlsys_nccl_selftest_fn selftest = (mlsys_nccl_selftest_fn)dlsym(g_plugin, "mlsys_nccl_selftest");
    mlsys_nccl_describe_fn describe = (mlsys_nccl_describe_fn)dlsym(g_plugin, "mlsys_nccl_describe");
    int n = mlsys_size(c);
    snprintf(name, sizeof name, "[%d rank%s] attach (cudaSetDevice, id over shm, InitRank)", n,
             n == 1 ? "" : "s");
    int ok = attach && attach(c, err, sizeof err) == 0;
    record(c, &idx, name, ok, err);
    if (!ok)
        return 1;
    if (mlsys_rank(c) == 0 && describe) {
        char line[512];
        describe(line, sizeof line);
        printf("  %s\n", line);
    }
    ok = strcmp(c->w->tp->name, "nccl") == 0 && c->w->tp->native != NULL;
    snprintf(name, sizeof name, "[%d] transport is nccl with a native hook", n);
    record(c, &idx, name, ok, "w->tp not replaced");
    if (n == 1)
        kernel_cases(c, &idx);
    size_t sizes[] = {1, 1000, 1 << 20};
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        long wrong = selftest ? selftest(c, sizes[k], err, sizeof err) : -1;
        snprintf(name, sizeof name, "[%d] device self-test: fill, ncclAllReduce, count (%zu)", n,
                 sizes[k]);
        if (wrong > 0)
            snprintf(err, sizeof err, "%ld wrong elements", wrong);
        record(c, &idx, name, wrong == 0, err);
    }
    static const int colls[] = {MLSYS_COLL_BROADCAST, MLSYS_COLL_REDUCE, MLSYS_COLL_ALLREDUCE,
                                MLSYS_COLL_ALLGATHER, MLSYS_COLL_REDUCE_SCATTER,
                                MLSYS_COLL_GATHER, MLSYS_COLL_SCATTER, MLSYS_COLL_ALLTOALL,
                                MLSYS_COLL_BARRIER};
    for (size_t ci = 0; ci < sizeof colls / sizeof colls[0]; ci++) {
        int coll = colls[ci];
        int reduction = coll == MLSYS_COLL_REDUCE || coll == MLSYS_COLL_ALLREDUCE ||
                        coll == MLSYS_COLL_REDUCE_SCATTER;
        for (int dt = 0; dt < MLSYS_DTYPE_COUNT; dt++)
            for (int op = 0; op < (reduction ? MLSYS_OP_COUNT : 1); op++)
                for (int inplace = 0; inplace < 2; inplace++) {
                    if (coll == MLSYS_COLL_BARRIER && (dt || inplace))
                        continue;
                    if (!reduction && !(dt == MLSYS_F32 || dt == MLSYS_I64) && coll != MLSYS_COLL_BARRIER)
                        continue;   /* data movement: two types are enough */
                    int root = n > 1 ? n - 1 : 0;
                    size_t cnt = 1000 + (size_t)dt;    /* not a multiple of anything */
                    char why[160] = "";
                    int good = run_case(c, coll, (mlsys_dtype)dt,
                                        reduction ? (mlsys_op)op : MLSYS_OP_NONE, cnt, inplace,
                                        root, why, sizeof why);
                    snprintf(name, sizeof name, "[%d] native %s %s%s%s%s", n,
                             mlsys_coll_name((mlsys_coll)coll),
                             coll == MLSYS_COLL_BARRIER ? "" : mlsys_dtype_name((mlsys_dtype)dt),
                             reduction ? " " : "", reduction ? mlsys_op_name((mlsys_op)op) : "",
                             inplace ? " in place" : "");
                    record(c, &idx, name, good, why);
                }
    }
    c->w->tp->fini(c->w);
    snprintf(name, sizeof name, "[%d] fini restores the shm transport", n);
    record(c, &idx, name, strcmp(c->w->tp->name, "nccl") != 0 && c->w->tp_state == NULL,
           "tp still nccl after fini");
    return 0;
}

static int probe_fn(mlsys_comm *c, void *arg)
{
    (void)c;
    (void)arg;
    mlsys_nccl_probe_fn probe = (mlsys_nccl_probe_fn)dlsym(g_plugin, "mlsys_nccl_probe");
    char err[256];
    int n = 0;
    if (!probe || probe(&n, err, sizeof err) != 0)
        n = 0;
    g_res->ngpus = n;
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: test_nccl PLUGIN.so\n");
        return 2;
    }
    g_plugin = dlopen(argv[1], RTLD_NOW | RTLD_GLOBAL);
    if (!g_plugin) {
        printf("FAIL plugin loads: %s\n0 passed, 1 failed\n", dlerror());
        return 1;
    }
    g_res = mmap(NULL, sizeof *g_res, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (g_res == MAP_FAILED) {
        perror("mmap");
        return 1;
    }
    memset(g_res, 0, sizeof *g_res);
    char why[256];
    fflush(NULL);
    mlsys_run_fn(1, 60000, probe_fn, NULL, why, sizeof why);
    int ngpus = g_res->ngpus;
    printf("GPUs: %d\n", ngpus);
    int passed = 0, failed = 0;
    int worlds[2] = {1, ngpus < MAX_RANKS ? ngpus : MAX_RANKS};
    for (int wi = 0; wi < (worlds[1] > 1 ? 2 : 1); wi++) {
        memset(g_res->failed, 0, sizeof g_res->failed);
        g_res->ncases = 0;
        fflush(NULL);
        int rc = mlsys_run_fn(worlds[wi], 120000, world_fn, NULL, why, sizeof why);
        for (int k = 0; k < g_res->ncases; k++) {
            if (g_res->failed[k]) {
                failed++;
                printf("FAIL %s: %s\n", g_res->name[k], g_res->why[k]);
            } else {
                passed++;
                printf("ok   %s\n", g_res->name[k]);
            }
        }
        if (rc != 0) {
            failed++;
            printf("FAIL [%d rank%s] the job: %s\n", worlds[wi], worlds[wi] == 1 ? "" : "s", why);
        }
    }
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
