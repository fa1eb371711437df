/* nccl_probe.c - loads the NCCL backend plugin (core/nccl/, built as libmlsys-nccl.so only
 * where nvcc and nccl.h exist) with dlopen, so that mlsys-lab starts on machines without
 * CUDA and says why --backend nccl cannot run there. The GPU count comes from the plugin's
 * mlsys_nccl_probe, or from core/probe.c's (driver, then runtime) when the plugin is absent or
 * does not load. */
#include "nccl_probe.h"
#include "../../core/nccl/nccl_plugin.h"
#include "../../core/probe.h"

#include <dlfcn.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define NO_GPU_MSG "NCCL needs one GPU per rank: 0 GPUs found; use --backend shm"

static void *g_plugin;
static char g_plugin_err[512];
static int g_tried;

const char *nccl_plugin_path(char *buf, size_t n)
{
    const char *env = getenv("MLSYS_NCCL_PLUGIN");
    char exe[4096], dir[4096], cand[2][4200];
    if (env && *env) {
        snprintf(buf, n, "%s", env);
        return buf;
    }
    ssize_t l = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (l <= 0) {
        snprintf(buf, n, "./%s", MLSYS_NCCL_PLUGIN_FILE);
        return buf;
    }
    exe[l] = 0;
    snprintf(dir, sizeof dir, "%s", dirname(exe));
    snprintf(cand[0], sizeof cand[0], "%s/%s", dir, MLSYS_NCCL_PLUGIN_FILE);
    snprintf(cand[1], sizeof cand[1], "%s/../%s", dir, MLSYS_NCCL_PLUGIN_FILE);
    snprintf(buf, n, "%s", access(cand[1], F_OK) == 0 && access(cand[0], F_OK) != 0 ? cand[1]
                                                                                   : cand[0]);
    return buf;
}

/* The plugin's handle, NULL with the reason in g_plugin_err (cached). *missing = 1 when the
 * file does not exist (the build had no CUDA/NCCL). */
static void *plugin(int *missing)
{
    static int was_missing;
    if (!g_tried) {
        char path[4300];
        g_tried = 1;
        nccl_plugin_path(path, sizeof path);
        if (access(path, F_OK) != 0) {
            was_missing = 1;
            snprintf(g_plugin_err, sizeof g_plugin_err, "no %s at %.400s", MLSYS_NCCL_PLUGIN_FILE,
                     path);
        } else if (!(g_plugin = dlopen(path, RTLD_NOW | RTLD_LOCAL))) {
            const char *e = dlerror();
            snprintf(g_plugin_err, sizeof g_plugin_err, "the NCCL plugin %.200s does not load: %.250s",
                     path, e ? e : "unknown error");
        }
    }
    if (missing)
        *missing = was_missing;
    return g_plugin;
}

/* Without the plugin: cudaGetDeviceCount through libcudart, 0 when anything is missing. */
int nccl_available(char *why, size_t n)
{
    int missing = 0, gpus = 0;
    void *h = plugin(&missing);
    if (h) {
        mlsys_nccl_probe_fn probe = (mlsys_nccl_probe_fn)dlsym(h, "mlsys_nccl_probe");
        char perr[256];
        if (!probe) {
            snprintf(why, n, "the NCCL plugin has no mlsys_nccl_probe; rebuild mlsys-lab");
            return 0;
        }
        if (probe(&gpus, perr, sizeof perr) != 0)
            gpus = 0;
    } else {
        char pwhy[256];     /* the count says it: 0 GPUs is the one line below */
        gpus = probe_gpu_count(pwhy, sizeof pwhy);
    }
    if (gpus <= 0) {
        snprintf(why, n, NO_GPU_MSG);
        return 0;
    }
    if (missing) {
        snprintf(why, n, "mlsys-lab was built without CUDA/NCCL (%s); use --backend shm",
                 g_plugin_err);
        return 0;
    }
    if (!h) {
        snprintf(why, n, "%s; use --backend shm", g_plugin_err);
        return 0;
    }
    snprintf(why, n, "%d GPU%s for NCCL", gpus, gpus == 1 ? "" : "s");
    return gpus;
}

int nccl_backend_check(const char *lab_id, int world_size, char *err, size_t n)
{
    char why[700];
    int gpus = nccl_available(why, sizeof why);
    if (gpus <= 0) {
        snprintf(err, n, "mlsys-lab: %s: %s", lab_id, why);
        return 2;
    }
    if (world_size > gpus) {
        snprintf(err, n, "mlsys-lab: %s: NCCL needs one GPU per rank: %d GPU%s found for %d "
                 "ranks; use --backend shm or --world-size %d", lab_id, gpus,
                 gpus == 1 ? "" : "s", world_size, gpus);
        return 2;
    }
    return 0;
}

int nccl_attach(mlsys_comm *c, char *err, size_t n)
{
    void *h = plugin(NULL);
    if (!h) {
        snprintf(err, n, "rank %d: %s", mlsys_rank(c), g_plugin_err);
        return -1;
    }
    mlsys_nccl_attach_comm_fn attach =
        (mlsys_nccl_attach_comm_fn)dlsym(h, "mlsys_nccl_attach_comm");
    mlsys_nccl_describe_fn describe = (mlsys_nccl_describe_fn)dlsym(h, "mlsys_nccl_describe");
    if (!attach) {
        snprintf(err, n, "rank %d: the NCCL plugin has no mlsys_nccl_attach_comm", mlsys_rank(c));
        return -1;
    }
    if (attach(c, err, n) != 0)
        return -1;
    if (describe && mlsys_rank(c) == 0) {
        char line[512];
        describe(line, sizeof line);
        printf("nccl: %s\n", line);
        /* the labs keep their tensors in host memory: NCCL needs device buffers */
        printf("nccl: the lab's tensors are in host memory; each collective copies them to "
               "this rank's GPU, runs NCCL's there and copies the result back (--algo NAME "
               "runs ours over shared memory instead)\n");
        fflush(stdout);
    }
    return 0;
}
