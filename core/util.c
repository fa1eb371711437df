/* util.c - small things every part of the runtime needs: clocks, allocation that never
 * returns NULL, page-aligned buffers, a counter-based random generator, the parsing of
 * sizes and integers given on command lines, and the one percentile (medians included). */
#include "internal.h"
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>
#include <time.h>

uint64_t mlsys_now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

double mlsys_now_s(void)
{
    return (double)mlsys_now_ns() * 1e-9;
}

void mlsys_deadline(struct timespec *ts, double s)
{
    clock_gettime(CLOCK_MONOTONIC, ts);
    long long ns = (long long)ts->tv_nsec + (long long)(s > 0 ? s * 1e9 : 0);
    ts->tv_sec += (time_t)(ns / 1000000000LL);
    ts->tv_nsec = (long)(ns % 1000000000LL);
}

static void oom(size_t n)
{
    fprintf(stderr, "mlsys-lab: out of memory allocating %zu bytes\n", n);
    exit(70);
}

void *mlsys_xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p)
        oom(n);
    return p;
}

void *mlsys_xcalloc(size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p)
        oom(n * size);
    return p;
}

void *mlsys_xrealloc(void *p, size_t n)
{
    void *q = realloc(p, n ? n : 1);
    if (!q)
        oom(n);
    return q;
}

char *mlsys_xstrdup(const char *s)
{
    size_t n = strlen(s) + 1;
    return memcpy(mlsys_xmalloc(n), s, n);
}

/* Communication buffers come from the rank's heap (or mmap outside a job): page-aligned (glibc's memcpy is slow when a
 * destination sits just past a page-aligned source) and zeroed. */
static void *alloc_pages(size_t n, int zero)
{
    void *h = heap_alloc(n, zero);  /* in a job: the rank's shared heap */
    if (h)
        return h;
    void *p = mmap(NULL, n ? n : 1, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        oom(n);
    return p;
}

void *mlsys_alloc_aligned(size_t n)
{
    return alloc_pages(n, 1);
}

void *mlsys_alloc_scratch(size_t n)
{
    return alloc_pages(n, 0);
}

void mlsys_free_aligned(void *p, size_t n)
{
    if (p && !heap_free(p, n))
        munmap(p, n ? n : 1);
}

int mlsys_parse_long(const char *s, long *out)
{
    if (!s || !*s)
        return -1;
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end || end == s)
        return -1;
    *out = v;
    return 0;
}

int mlsys_parse_size(const char *s, uint64_t *out)
{
    if (!s || !*s || *s == '-' || *s == '+')
        return -1;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s)
        return -1;
    unsigned shift = 0;
    switch (*end) {
    case 'k': case 'K': shift = 10; end++; break;
    case 'm': case 'M': shift = 20; end++; break;
    case 'g': case 'G': shift = 30; end++; break;
    default: break;
    }
    if (shift && (*end == 'i' || *end == 'I'))
        end++;
    if (shift && (*end == 'b' || *end == 'B'))
        end++;
    if (*end)
        return -1;
    if (shift && v > (ULLONG_MAX >> shift))
        return -1;
    *out = (uint64_t)v << shift;
    return 0;
}

/* A number from a one-line file like /sys/fs/cgroup/memory.max; 0 when absent or "max". */
static uint64_t read_u64_file(const char *path)
{
    FILE *f = fopen(path, "r");
    unsigned long long v = 0;
    if (!f)
        return 0;
    if (fscanf(f, "%llu", &v) != 1)
        v = 0;
    fclose(f);
    return v;
}

uint64_t mlsys_mem_available(void)
{
    uint64_t best = UINT64_MAX, v;
    const char *env = getenv("MLSYS_MEM_LIMIT");
    if (env && *env && mlsys_parse_size(env, &v) == 0 && v > 0)
        best = v;
    /* the kernel's estimate of what can be allocated without swapping */
    FILE *f = fopen("/proc/meminfo", "r");
    char line[256];
    uint64_t avail = 0;
    while (f && fgets(line, sizeof line, f)) {
        unsigned long long kib;
        if (sscanf(line, "MemAvailable: %llu kB", &kib) == 1)
            avail = (uint64_t)kib << 10;
    }
    if (f)
        fclose(f);
    if (!avail) {
        long pages = sysconf(_SC_AVPHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
        if (pages > 0 && psz > 0)
            avail = (uint64_t)pages * (uint64_t)psz;
    }
    if (avail && avail < best)
        best = avail;
    /* a cgroup v2 limit ("0::/path" in /proc/self/cgroup): what is left under it */
    f = fopen("/proc/self/cgroup", "r");
    while (f && fgets(line, sizeof line, f)) {
        if (strncmp(line, "0::", 3) != 0)
            continue;
        line[strcspn(line, "\n")] = 0;
        char p[512];
        snprintf(p, sizeof p, "/sys/fs/cgroup%s/memory.max", line + 3);
        uint64_t max = read_u64_file(p);
        snprintf(p, sizeof p, "/sys/fs/cgroup%s/memory.current", line + 3);
        uint64_t cur = read_u64_file(p);
        if (max) {
            uint64_t left = max > cur ? max - cur : 0;
            if (left < best)
                best = left;
        }
    }
    if (f)
        fclose(f);
    struct rlimit rl;
    if (getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
        (uint64_t)rl.rlim_cur < best)
        best = (uint64_t)rl.rlim_cur;
    if (getrlimit(RLIMIT_DATA, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
        (uint64_t)rl.rlim_cur < best)
        best = (uint64_t)rl.rlim_cur;
    return best;
}

static int by_value(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double mlsys_percentile(double *v, size_t n, double p)
{
    if (n == 0)
        return 0.0;
    qsort(v, n, sizeof *v, by_value);
    double pos = (p < 0 ? 0 : p > 100 ? 100 : p) / 100.0 * (double)(n - 1);
    size_t lo = (size_t)pos;
    if (lo >= n - 1)
        return v[n - 1];
    return v[lo] + (pos - (double)lo) * (v[lo + 1] - v[lo]);
}

void mlsys_format_size(uint64_t b, char *out, size_t n)
{
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    while (u < 4 && b >= 1024 && b % 1024 == 0) {
        b /= 1024;
        u++;
    }
    snprintf(out, n, "%llu %s", (unsigned long long)b, units[u]);
}

void mlsys_format_approx(double b, char *out, size_t n)
{
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    int u = 0;
    while (u < 6 && b >= 1024.0) {
        b /= 1024.0;
        u++;
    }
    snprintf(out, n, u ? "%.1f %s" : "%.0f %s", b, units[u]);
}

/* splitmix64 over a counter: the stream of a seed is the same on every rank and every
 * machine, which is all the labs need ("same seed => same data"). */
static uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void mlsys_rng_seed(mlsys_rng *r, uint64_t seed)
{
    r->key = mix64(seed + 0x9e3779b97f4a7c15ull);
    r->ctr = 0;
    r->have_spare = 0;
    r->spare = 0;
}

uint64_t mlsys_rng_u64(mlsys_rng *r)
{
    return mix64(r->key + 0x9e3779b97f4a7c15ull * ++r->ctr);
}

double mlsys_rng_uniform(mlsys_rng *r)
{
    return (double)(mlsys_rng_u64(r) >> 11) * (1.0 / 9007199254740992.0);
}

double mlsys_rng_normal(mlsys_rng *r)
{
    if (r->have_spare) {
        r->have_spare = 0;
        return r->spare;
    }
    double u1, u2;
    do
        u1 = mlsys_rng_uniform(r);
    while (u1 <= 0.0);
    u2 = mlsys_rng_uniform(r);
    double m = sqrt(-2.0 * log(u1));
    r->spare = m * sin(2.0 * M_PI * u2);
    r->have_spare = 1;
    return m * cos(2.0 * M_PI * u2);
}
