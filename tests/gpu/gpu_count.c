/* gpu_count.c - how many GPUs the CUDA runtime sees, for tests/gpu/run: libcudart through
 * dlopen (so this builds without CUDA), the count starting at 0. Prints the count and exits 0
 * when there is at least one GPU; otherwise prints "cudaGetDeviceCount: <reason>" and exits 1. */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

int main(void)
{
    static const char *const names[] = {"libcudart.so", "libcudart.so.13", "libcudart.so.12",
                                        "/usr/local/cuda/lib64/libcudart.so", NULL};
    const char *home = getenv("CUDA_HOME");
    char own[1024];
    void *h = NULL;
    if (home && *home) {
        snprintf(own, sizeof own, "%s/lib64/libcudart.so", home);
        h = dlopen(own, RTLD_NOW | RTLD_LOCAL);
    }
    for (int i = 0; !h && names[i]; i++)
        h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        printf("cudaGetDeviceCount: libcudart not found (no CUDA runtime)\n");
        return 1;
    }
    int (*count_fn)(int *) = (int (*)(int *))dlsym(h, "cudaGetDeviceCount");
    const char *(*errstr)(int) = (const char *(*)(int))dlsym(h, "cudaGetErrorString");
    if (!count_fn) {
        printf("cudaGetDeviceCount: not in libcudart\n");
        return 1;
    }
    int count = 0;
    int rc = count_fn(&count);
    if (rc != 0) {
        printf("cudaGetDeviceCount: %s\n", errstr ? errstr(rc) : "error");
        return 1;
    }
    if (count < 1) {
        printf("cudaGetDeviceCount: 0 devices\n");
        return 1;
    }
    printf("%d\n", count);
    return 0;
}
