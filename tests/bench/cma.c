/* cma.c - the single-copy ceiling of our shm transport for tests/bench/run.sh: how fast one
 * process reads another's buffer with process_vm_readv (what p2p does for large messages),
 * next to memcpy in one process. Prints "cma bytes=B chunk=C gbs=G" and "memcpy ... gbs=G",
 * best of 5 passes over a 64 MiB buffer. Usage: cma [MiB] */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void *map(size_t n, int byte)
{
    void *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        perror("cma: mmap");
        exit(1);
    }
    memset(p, byte, n);
    return p;
}

int main(int argc, char **argv)
{
    size_t n = (size_t)(argc > 1 ? atoi(argv[1]) : 64) << 20;
    if (n == 0) {
        fprintf(stderr, "usage: cma [MiB]\n");
        return 2;
    }
    char *src = map(n, 1);
    int go[2];
    if (pipe(go) != 0)
        return 1;
    pid_t child = fork();
    if (child == 0) {            /* holds src until the parent is done */
        char x;
        close(go[1]);
        if (read(go[0], &x, 1) < 0)
            _exit(1);
        _exit(0);
    }
    char *dst = map(n, 0);
    const size_t chunks[] = {256u << 10, 4u << 20, n};
    for (int k = 0; k < 3; k++) {
        double best = 1e30;
        for (int pass = 0; pass < 5; pass++) {
            double t = now_s();
            for (size_t off = 0; off < n; off += chunks[k]) {
                size_t len = n - off < chunks[k] ? n - off : chunks[k];
                struct iovec l = {dst + off, len}, r = {src + off, len};
                if (process_vm_readv(child, &l, 1, &r, 1, 0) != (ssize_t)len) {
                    perror("cma: process_vm_readv");
                    return 1;
                }
            }
            t = now_s() - t;
            best = t < best ? t : best;
        }
        printf("cma bytes=%zu chunk=%zu gbs=%.3f\n", n, chunks[k], (double)n / best / 1e9);
    }
    double best = 1e30;
    for (int pass = 0; pass < 5; pass++) {
        double t = now_s();
        memcpy(dst, src, n);
        t = now_s() - t;
        best = t < best ? t : best;
        src[pass] ^= dst[n - 1 - (size_t)pass];
    }
    printf("memcpy bytes=%zu gbs=%.3f\n", n, (double)n / best / 1e9);
    close(go[1]);
    waitpid(child, NULL, 0);
    return 0;
}
