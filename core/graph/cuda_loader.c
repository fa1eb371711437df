/* cuda_loader.c - finds and loads the CUDA side of chapter 10 (libmlsys-cudagraph.so, built
 * from cuda_graph.cu by nvcc where nvcc exists) with dlopen, so the program itself never
 * links CUDA: where the plugin or a GPU is missing, the caller gets a reason, not a crash. */
#include "graph.h"

#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

const char *graph_cuda_plugin_path(char *buf, size_t n)
{
    const char *p = getenv("MLSYS_CUDAGRAPH_PLUGIN");
    if (p && *p) {
        snprintf(buf, n, "%s", p);
        return buf;
    }
    char exe[PATH_MAX];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (len < 0)
        len = 0;
    exe[len] = 0;
    char *slash = strrchr(exe, '/');
    if (slash)
        slash[1] = 0;
    else
        exe[0] = 0;
    snprintf(buf, n, "%s%s", exe, GRAPH_CUDA_PLUGIN);
    return buf;
}

graph_cuda_fn graph_cuda_load(char *why, size_t n)
{
    static void *so;
    char path[PATH_MAX + 64];
    graph_cuda_plugin_path(path, sizeof path);
    if (!so && access(path, R_OK) != 0) {
        snprintf(why, n, "%s is not built (it needs nvcc: make builds it where "
                 "/usr/local/cuda/bin/nvcc exists)", path);
        return NULL;
    }
    if (!so && !(so = dlopen(path, RTLD_NOW | RTLD_LOCAL))) {
        const char *e = dlerror();
        snprintf(why, n, "cannot load %s: %s", path, e ? e : "?");
        return NULL;
    }
    graph_cuda_fn fn = (graph_cuda_fn)(uintptr_t)dlsym(so, GRAPH_CUDA_SYMBOL);
    if (!fn)
        snprintf(why, n, "%s has no %s", path, GRAPH_CUDA_SYMBOL);
    return fn;
}
