/* probe.c - what this machine can run, found at run time so that the lab builds and runs
 * without CUDA: libcudart/libcuda/libnccl/libcudnn through dlopen, mpirun on PATH through
 * popen. Every probe answers "no, because ..." instead of failing; libcudart and libcuda
 * are opened once. */
#include "probe.h"
#include "mlsys.h"
#include <stdio.h>
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void *open_first(const char *const *names)
{
    for (int i = 0; names[i]; i++) {
        void *h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
        if (h)
            return h;
    }
    return NULL;
}

static void *cudart(void)
{
    static const char *const names[] = {"libcudart.so", "libcudart.so.13", "libcudart.so.12",
                                        "libcudart.so.11.0", NULL};
    static void *h;
    static int tried;
    if (!tried) {
        tried = 1;
        h = open_first(names);
    }
    return h;
}

static void *cudrv(void)
{
    static const char *const names[] = {"libcuda.so.1", "libcuda.so", NULL};
    static void *h;
    static int tried, ok;
    if (!tried) {
        tried = 1;
        h = open_first(names);
        if (h) {
            int (*init)(unsigned) = (int (*)(unsigned))dlsym(h, "cuInit");
            ok = init && init(0) == 0;
        }
    }
    return ok ? h : NULL;
}

int probe_gpu_count(char *why, size_t n)
{
    /* the driver first: without it no GPU can be used, and the CUDA runtime (a large
     * library) is not loaded for nothing, as a lab's banner would on every start */
    void *drv = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!drv) {
        snprintf(why, n, "no NVIDIA driver (libcuda.so.1 not found)");
        return 0;
    }
    void *h = cudart();
    if (!h) {
        snprintf(why, n, "no CUDA runtime (libcudart) found");
        return 0;
    }
    int (*count_fn)(int *) = (int (*)(int *))dlsym(h, "cudaGetDeviceCount");
    const char *(*errstr)(int) = (const char *(*)(int))dlsym(h, "cudaGetErrorString");
    if (!count_fn) {
        snprintf(why, n, "libcudart has no cudaGetDeviceCount");
        return 0;
    }
    int count = 0;   /* stays 0 when the call fails (no driver, no device) */
    int rc = count_fn(&count);
    if (rc != 0) {
        snprintf(why, n, "cudaGetDeviceCount failed: %s", errstr ? errstr(rc) : "error");
        return 0;
    }
    if (count == 0)
        snprintf(why, n, "the CUDA runtime sees no GPU");
    else
        snprintf(why, n, "%d GPU%s found", count, count == 1 ? "" : "s");
    return count;
}

int probe_gpu_info(int i, char *name, size_t n, double *gib)
{
    void *h = cudrv();
    if (!h)
        return -1;
    int (*get)(int *, int) = (int (*)(int *, int))dlsym(h, "cuDeviceGet");
    int (*getname)(char *, int, int) = (int (*)(char *, int, int))dlsym(h, "cuDeviceGetName");
    int (*mem)(size_t *, int) = (int (*)(size_t *, int))dlsym(h, "cuDeviceTotalMem_v2");
    int dev = 0;
    size_t bytes = 0;
    if (!get || !getname || !mem || get(&dev, i) != 0)
        return -1;
    if (getname(name, (int)n, dev) != 0)
        snprintf(name, n, "GPU %d", i);
    if (mem(&bytes, dev) != 0)
        bytes = 0;
    *gib = (double)bytes / (1024.0 * 1024.0 * 1024.0);
    return 0;
}

void probe_cuda_versions(int *runtime, int *driver)
{
    *runtime = *driver = 0;
    void *h = cudart();
    if (!h)
        return;
    int (*rv)(int *) = (int (*)(int *))dlsym(h, "cudaRuntimeGetVersion");
    int (*dv)(int *) = (int (*)(int *))dlsym(h, "cudaDriverGetVersion");
    if (rv && rv(runtime) != 0)
        *runtime = 0;
    if (dv && dv(driver) != 0)
        *driver = 0;
}

long probe_cudnn_version(void)
{
    static const char *const names[] = {"libcudnn.so", "libcudnn.so.9", "libcudnn.so.8", NULL};
    void *h = open_first(names);
    if (!h)
        return 0;
    size_t (*ver)(void) = (size_t (*)(void))dlsym(h, "cudnnGetVersion");
    return ver ? (long)ver() : 0;
}

int probe_nccl(int *version, char *why, size_t n)
{
    static const char *const names[] = {"libnccl.so.2", NULL};
    void *h = open_first(names);
    *version = 0;
    if (!h) {
        snprintf(why, n, "libnccl.so.2 not found (install NCCL)");
        return 0;
    }
    int (*gv)(int *) = (int (*)(int *))dlsym(h, "ncclGetVersion");
    if (gv && gv(version) != 0)
        *version = 0;
    snprintf(why, n, "libnccl.so.2 loads");
    return 1;
}

int probe_mpirun(char *path, size_t pn, char *version, size_t vn)
{
    const char *env = getenv("PATH");
    char *dirs = mlsys_xstrdup(env ? env : "/usr/bin:/bin");
    int found = 0;
    path[0] = version[0] = 0;
    for (char *save = NULL, *d = strtok_r(dirs, ":", &save); d; d = strtok_r(NULL, ":", &save)) {
        char cand[4096];
        snprintf(cand, sizeof cand, "%s/mpirun", *d ? d : ".");
        if (access(cand, X_OK) == 0) {
            snprintf(path, pn, "%s", cand);
            found = 1;
            break;
        }
    }
    free(dirs);
    if (!found)
        return 0;
    fflush(NULL);
    FILE *p = popen("mpirun --version 2>&1", "r");
    if (p) {
        if (fgets(version, (int)vn, p)) {
            size_t l = strlen(version);
            while (l && (version[l - 1] == '\n' || version[l - 1] == '\r'))
                version[--l] = 0;
        }
        pclose(p);
    }
    return 1;
}
