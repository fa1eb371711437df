/* test_wsync_nccl.c - the RLHF weight sync (core/rl/wsync.c) over the NCCL plugin, run by
 * tests/gpu/run: one rank per GPU (2 to 4), tensor sets in one block and in separate
 * allocations, buckets of 4 KiB and 1 MiB, three versions in a row, bit-identical on every
 * receiver, and a stale version refused on every rank. Needs 2 GPUs: with fewer it prints
 * why and counts nothing. Prints one line per case and "N passed, M failed". */
#include "../../core/rl/wsync.h"
#include "../../core/nccl/nccl_plugin.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define NT 40

typedef struct shared { int ngpus, ok[8], bad[8]; char why[8][200]; } shared;
static shared *g;
static void *g_plugin;

static int probe_fn(mlsys_comm *c, void *arg)
{
    (void)c;
    (void)arg;
    mlsys_nccl_probe_fn probe = (mlsys_nccl_probe_fn)dlsym(g_plugin, "mlsys_nccl_probe");
    char err[256];
    int n = 0;
    g->ngpus = probe && probe(&n, err, sizeof err) == 0 ? n : 0;
    return 0;
}

static void fill(float *p, size_t n, uint64_t seed)
{
    mlsys_rng r;
    mlsys_rng_seed(&r, seed);
    for (size_t i = 0; i < n; i++) {
        uint32_t u = (uint32_t)mlsys_rng_u64(&r);
        memcpy(&p[i], &u, 4);
    }
}

/* Case k: 0/1 block or separate with 4 KiB buckets, 2/3 the same with 1 MiB, 4 refusal. */
static int case_fn(mlsys_comm *c, int k, char *why, size_t wl)
{
    int me = mlsys_rank(c), separate = k % 2, rc = 0;
    size_t bucket = k < 2 ? 4096 : 1u << 20, n[NT], total = 0;
    rl_tensor t[NT];
    char names[NT][16];
    for (int i = 0; i < NT; i++) {
        n[i] = i % 5 == 0 ? 70000 + (size_t)i : 1 + (size_t)(i * 37 % 900);
        total += n[i];
    }
    float *block = separate ? NULL : mlsys_alloc_aligned(total * sizeof(float));
    float *want = mlsys_xcalloc(total, sizeof(float));
    size_t off = 0;
    for (int i = 0; i < NT; i++) {
        snprintf(names[i], sizeof names[i], "w%d", i);
        t[i] = (rl_tensor){names[i], separate ? mlsys_xcalloc(n[i], sizeof(float))
                                              : block + off, n[i]};
        off += n[i];
    }
    uint64_t version = k == 4 && me == 1 ? 5 : 0;
    for (int v = 1; v <= (k == 4 ? 1 : 3) && rc == 0; v++) {
        off = 0;
        for (int i = 0; i < NT; i++) {
            fill(want + off, n[i], (uint64_t)(v * 1000 + i));
            if (me == 0)
                memcpy(t[i].data, want + off, n[i] * sizeof(float));
            off += n[i];
        }
        if (me == 0)
            version = (uint64_t)v;
        char err[256] = "";
        int r = rl_wsync(c, 0, t, NT, bucket, &version, err, sizeof err);
        if (k == 4) {
            if (r != -1 || !strstr(err, me == 1 ? "holds 5" : "refused by rank 1")) {
                snprintf(why, wl, "rank %d: stale version not refused: '%s'", me, err);
                rc = 1;
            }
            break;
        }
        off = 0;
        for (int i = 0; i < NT && r == 0; i++) {
            if (memcmp(t[i].data, want + off, n[i] * sizeof(float)) != 0) {
                snprintf(why, wl, "rank %d: v%d: tensor '%s' differs", me, v, names[i]);
                r = -1;
            }
            off += n[i];
        }
        if (r != 0 || version != (uint64_t)v) {
            if (!why[0])
                snprintf(why, wl, "%s", err[0] ? err : "version not advanced");
            rc = 1;
        }
    }
    if (separate)
        for (int i = 0; i < NT; i++)
            free(t[i].data);
    else
        mlsys_free_aligned(block, total * sizeof(float));
    free(want);
    return rc;
}

static int world_fn(mlsys_comm *c, void *arg)
{
    (void)arg;
    char err[512] = "";
    mlsys_nccl_attach_comm_fn attach =
        (mlsys_nccl_attach_comm_fn)dlsym(g_plugin, "mlsys_nccl_attach_comm");
    if (!attach || attach(c, err, sizeof err) != 0) {
        fprintf(stderr, "rank %d: attach: %s\n", mlsys_rank(c), err);
        return 1;
    }
    for (int k = 0; k < 5; k++) {
        char why[200] = "";
        if (case_fn(c, k, why, sizeof why) != 0) {
            __atomic_fetch_add(&g->bad[k], 1, __ATOMIC_SEQ_CST);
            snprintf(g->why[k], sizeof g->why[k], "%s", why);
        } else {
            __atomic_fetch_add(&g->ok[k], 1, __ATOMIC_SEQ_CST);
        }
    }
    return 0;
}

int main(int argc, char **argv)
{
    static const char *const names[5] = {
        "one block, 4 KiB buckets", "separate tensors, 4 KiB buckets (staged)",
        "one block, 1 MiB buckets", "separate tensors, 1 MiB buckets",
        "a stale version refused on every rank"};
    if (argc < 2) {
        fprintf(stderr, "usage: test_wsync_nccl PLUGIN.so\n");
        return 2;
    }
    g_plugin = dlopen(argv[1], RTLD_NOW | RTLD_GLOBAL);
    g = mmap(NULL, sizeof *g, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (!g_plugin || g == MAP_FAILED) {
        printf("FAIL plugin loads: %s\n0 passed, 1 failed\n", g_plugin ? "mmap" : dlerror());
        return 1;
    }
    memset(g, 0, sizeof *g);
    char why[256];
    fflush(NULL);
    mlsys_run_fn(1, 60000, probe_fn, NULL, why, sizeof why);
    if (g->ngpus < 2) {
        printf("skip: rl_wsync over NCCL needs 2 GPUs, one per rank (%d here)\n0 passed, "
               "0 failed\n", g->ngpus);
        return 0;
    }
    int n = g->ngpus < 4 ? g->ngpus : 4, passed = 0, failed = 0;
    fflush(NULL);
    int rc = mlsys_run_fn(n, 120000, world_fn, NULL, why, sizeof why);
    for (int k = 0; k < 5; k++) {
        if (g->bad[k] || g->ok[k] != n) {
            failed++;
            printf("FAIL [%d ranks] wsync %s: %s\n", n, names[k], g->why[k]);
        } else {
            passed++;
            printf("ok   [%d ranks] wsync %s\n", n, names[k]);
        }
    }
    if (rc != 0) {
        failed++;
        printf("FAIL [%d ranks] the job: %s\n", n, why);
    }
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}
