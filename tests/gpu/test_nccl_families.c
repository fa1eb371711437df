/* test_nccl_families.c - the NCCL path of each parallelism family the labs teach, one rank
 * per GPU (tests/gpu/run): DDP's gradient buckets all-reduced (AVG) as non-blocking
 * collectives with NCCL's algorithm from the progress thread, as ch05's labs do under
 * --backend nccl; tensor parallelism's all-reduce on TP groups of two (split communicators,
 * one NCCL communicator each); pipeline parallelism's activations sent stage to stage on
 * device buffers (ncclSend/ncclRecv), checked on the device; RLHF's weight broadcast from the
 * trainer in buckets. Values are small integers, so every expected result is exact. Prints one
 * line per case and "N passed, M failed"; with fewer than two GPUs the families that need two
 * say so and are skipped. Usage: test_nccl_families PLUGIN.so */
#include "../../core/coll/coll.h"
#include "../../core/nccl/nccl_plugin.h"

#include <cuda_runtime.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define MAX_CASES 32
#define MAX_RANKS 8

typedef struct results {
    int ncases;
    char name[MAX_CASES][96];
    int failed[MAX_CASES];
    char why[MAX_CASES][200];
    int ngpus;
} results;

static results *g_res;
static void *g_plugin;

static void record(mlsys_comm *c, int k, const char *name, int ok, const char *why)
{
    if (k >= MAX_CASES)
        return;
    if (mlsys_rank(c) == 0) {
        snprintf(g_res->name[k], sizeof g_res->name[k], "%s", name);
        if (k + 1 > g_res->ncases)
            g_res->ncases = k + 1;
    }
    if (!ok) {
        __atomic_fetch_add(&g_res->failed[k], 1, __ATOMIC_SEQ_CST);
        snprintf(g_res->why[k], sizeof g_res->why[k], "rank %d: %s", mlsys_rank(c), why);
    }
}

/* DDP: simple-ddp's gradient (203530 floats) in 32 Ki-float buckets, each an iallreduce(AVG)
 * issued as backward would, all in flight at once, then waited for. */
static int ddp_buckets(mlsys_comm *c, char *why, size_t n)
{
    const size_t total = 203530, bucket = 32768;
    int r = mlsys_rank(c), N = mlsys_size(c), ok = 1;
    float *g = malloc(total * sizeof *g);
    mlsys_request *q[16];
    int nq = 0;
    for (size_t i = 0; i < total; i++)
        g[i] = (float)((r + 1) * (int)(i % 7 + 1));
    for (size_t off = 0; off < total && ok; off += bucket) {
        size_t len = total - off < bucket ? total - off : bucket;
        if (mlsys_iallreduce(c, g + off, g + off, len, MLSYS_F32, MLSYS_AVG, &q[nq++]) != 0) {
            snprintf(why, n, "iallreduce of bucket %d: %s", nq - 1, mlsys_errmsg(c));
            ok = 0;
        }
    }
    if (ok && mlsys_waitall(q, nq) != 0) {
        snprintf(why, n, "waitall: %s", mlsys_errmsg(c));
        ok = 0;
    }
    for (size_t i = 0; ok && i < total; i++) {
        float want = (float)(i % 7 + 1) * (float)(N + 1) / 2.0f;   /* mean of (r+1) */
        if (g[i] != want) {
            snprintf(why, n, "gradient %zu: %g, want %g", i, g[i], want);
            ok = 0;
        }
    }
    if (ok && strcmp(mlsys_last_algo(c), "native") != 0) {
        snprintf(why, n, "the buckets ran %s, not NCCL's", mlsys_last_algo(c));
        ok = 0;
    }
    free(g);
    return ok;
}

/* TP: groups of two ranks (0-1, 2-3, ...), each all-reducing a [4, 16, 64] activation. */
static int tp_allreduce(mlsys_comm *c, char *why, size_t n)
{
    int r = mlsys_rank(c);
    mlsys_comm *tp = NULL;
    if (mlsys_split(c, r / 2, r, &tp) != 0 || !tp) {
        snprintf(why, n, "split: %s", mlsys_errmsg(c));
        return 0;
    }
    mlsys_set_algo(tp, MLSYS_COLL_ALLREDUCE, "native");
    const size_t cnt = 4 * 16 * 64;
    float *x = malloc(cnt * sizeof *x);
    for (size_t i = 0; i < cnt; i++)
        x[i] = (float)((r + 1) * (int)(i % 5 + 1));
    int ok = mlsys_allreduce(tp, x, x, cnt, MLSYS_F32, MLSYS_SUM) == 0;
    if (!ok)
        snprintf(why, n, "all-reduce on the TP group: %s", mlsys_errmsg(tp));
    int lo = r / 2 * 2, hi = lo + mlsys_size(tp);     /* the group's world ranks */
    float sum = 0;
    for (int k = lo; k < hi; k++)
        sum += (float)(k + 1);
    for (size_t i = 0; ok && i < cnt; i++)
        if (x[i] != sum * (float)(i % 5 + 1)) {
            snprintf(why, n, "element %zu: %g, want %g", i, x[i], sum * (float)(i % 5 + 1));
            ok = 0;
        }
    free(x);
    return ok;
}

/* PP: stage r receives stage r-1's activations (filled with scale r) on its GPU, checks them
 * there, "computes" (fills with scale r+1) and sends them on; the last stage checks last. */
static int pp_sendrecv(mlsys_comm *c, char *why, size_t n)
{
    mlsys_nccl_sendrecv_fn sr = (mlsys_nccl_sendrecv_fn)dlsym(g_plugin, "mlsys_nccl_sendrecv");
    int (*fill)(float *, size_t, float, void *) =
        (int (*)(float *, size_t, float, void *))dlsym(g_plugin, "mlsys_cuda_fill");
    int (*wrongk)(const float *, size_t, float, unsigned long long *, void *) =
        (int (*)(const float *, size_t, float, unsigned long long *, void *))
            dlsym(g_plugin, "mlsys_cuda_count_wrong");
    if (!sr || !fill || !wrongk) {
        snprintf(why, n, "the plugin lacks mlsys_nccl_sendrecv or its kernels");
        return 0;
    }
    int r = mlsys_rank(c), N = mlsys_size(c), ok = 1;
    const size_t cnt = 64 * 1024;           /* a micro-batch of 64 rows x 1024 */
    float *d = NULL;
    unsigned long long *dw = NULL, wrong = 0;
    char err[256] = "";
    if (cudaMalloc((void **)&d, cnt * sizeof *d) != cudaSuccess ||
        cudaMalloc((void **)&dw, sizeof *dw) != cudaSuccess) {
        snprintf(why, n, "cudaMalloc failed");
        ok = 0;
    }
    for (int mb = 0; ok && mb < 4; mb++) {           /* four micro-batches */
        if (r > 0 && sr(c, NULL, 0, -1, d, cnt, r - 1, MLSYS_F32, err, sizeof err) != 0) {
            snprintf(why, n, "micro-batch %d: %s", mb, err);
            ok = 0;
            break;
        }
        if (r > 0 && (wrongk(d, cnt, (float)(r + mb), dw, NULL) != 0 ||
                      cudaMemcpy(&wrong, dw, sizeof wrong, cudaMemcpyDeviceToHost) != cudaSuccess ||
                      wrong != 0)) {
            snprintf(why, n, "micro-batch %d from stage %d: %llu of %zu elements wrong", mb,
                     r - 1, wrong, cnt);
            ok = 0;
            break;
        }
        if (fill(d, cnt, (float)(r + 1 + mb), NULL) != 0 || cudaDeviceSynchronize() != cudaSuccess) {
            snprintf(why, n, "the fill kernel failed");
            ok = 0;
            break;
        }
        if (r < N - 1 && sr(c, d, cnt, r + 1, NULL, 0, -1, MLSYS_F32, err, sizeof err) != 0) {
            snprintf(why, n, "micro-batch %d: %s", mb, err);
            ok = 0;
        }
    }
    cudaFree(d);
    cudaFree(dw);
    return ok;
}

/* RLHF: the trainer (rank 0) broadcasts 3.8 MiB of weights to the generators in 256 KiB
 * buckets with NCCL's broadcast; each generator compares every float. */
static int rlhf_broadcast(mlsys_comm *c, char *why, size_t n)
{
    const size_t total = 988640, bucket = 65536;     /* the lab's actor, floats */
    int r = mlsys_rank(c), ok = 1;
    float *w = malloc(total * sizeof *w);
    for (size_t i = 0; i < total; i++)
        w[i] = r == 0 ? (float)((int)(i % 1021) - 510) / 64.0f : -1.0f;
    mlsys_set_algo(c, MLSYS_COLL_BROADCAST, "native");
    for (size_t off = 0; off < total && ok; off += bucket) {
        size_t len = total - off < bucket ? total - off : bucket;
        if (mlsys_broadcast(c, w + off, len, MLSYS_F32, 0) != 0) {
            snprintf(why, n, "bucket at %zu: %s", off, mlsys_errmsg(c));
            ok = 0;
        }
    }
    for (size_t i = 0; ok && i < total; i++)
        if (w[i] != (float)((int)(i % 1021) - 510) / 64.0f) {
            snprintf(why, n, "weight %zu: %g", i, w[i]);
            ok = 0;
        }
    free(w);
    return ok;
}

static int world_fn(mlsys_comm *c, void *arg)
{
    (void)arg;
    char err[512] = "", name[96];
    int N = mlsys_size(c), k = 0;
    mlsys_nccl_attach_comm_fn attach =
        (mlsys_nccl_attach_comm_fn)dlsym(g_plugin, "mlsys_nccl_attach_comm");
    snprintf(name, sizeof name, "[%d ranks] attach", N);
    int ok = attach && attach(c, err, sizeof err) == 0;
    record(c, k++, name, ok, err);
    if (!ok)
        return 1;
    mlsys_set_algo(c, MLSYS_COLL_ALLREDUCE, "native");
    err[0] = 0;
    snprintf(name, sizeof name, "[%d] DDP: 7 gradient buckets, iallreduce AVG, NCCL's", N);
    record(c, k++, name, ddp_buckets(c, err, sizeof err), err);
    err[0] = 0;
    snprintf(name, sizeof name, "[%d] TP: all-reduce on groups of two (split)", N);
    record(c, k++, name, tp_allreduce(c, err, sizeof err), err);
    err[0] = 0;
    snprintf(name, sizeof name, "[%d] PP: 4 micro-batches stage to stage, device buffers", N);
    record(c, k++, name, pp_sendrecv(c, err, sizeof err), err);
    err[0] = 0;
    snprintf(name, sizeof name, "[%d] RLHF: weights broadcast in 256 KiB buckets", N);
    record(c, k++, name, rlhf_broadcast(c, err, sizeof err), err);
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
        fprintf(stderr, "usage: test_nccl_families PLUGIN.so\n");
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
    int ngpus = g_res->ngpus < MAX_RANKS ? g_res->ngpus : MAX_RANKS;
    if (ngpus < 2) {
        printf("skipped: the families need two ranks, one GPU each: %d GPU%s here\n"
               "0 passed, 0 failed\n", ngpus, ngpus == 1 ? "" : "s");
        return 0;
    }
    int passed = 0, failed = 0;
    fflush(NULL);
    int rc = mlsys_run_fn(ngpus, 180000, world_fn, NULL, why, sizeof why);
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
        printf("FAIL [%d ranks] the job: %s\n", ngpus, why);
    }
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
