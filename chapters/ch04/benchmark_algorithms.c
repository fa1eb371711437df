/* benchmark_algorithms.c - ch04/benchmark-algorithms: all_reduce latency and bandwidth
 * against size, ring and tree side by side, timed by the engine of `mlsys-lab bench` (no
 * barrier inside the timed loop), checked outside the loop, plotted live (busbw per
 * algorithm), and set against the alpha-beta model: alpha, beta fitted to the means (or
 * given), and the ring/tree crossover it predicts next to the measured one. */
#include "../common/common.h"
#include "../../core/trace_values.h"
#include "../../core/bench/bench.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define LAB_ID "ch04/benchmark-algorithms"
#define W 70
#define WARMUP 10                /* fixed, as in the original (no flag) */
#define MAX_SIZES 64
#define MAX_ALGOS 2

static const lab_flag algos_flags[] = {
    {"sizes", 0, FLAG_STR, "1000,10000,100000,1000000,10000000,100000000", NULL, 0, 0,
     "comma-separated message sizes in bytes (64K, 1M also work)"},
    {"world-size", 'w', FLAG_INT, "4", NULL, 1, 64, "number of ranks (processes)"},
    {"iterations", 'i', FLAG_INT, "50", NULL, 1, 10000000,
     "timed all_reduce calls per size and algorithm"},
    {"alpha", 0, FLAG_DOUBLE, NULL, NULL, 0, 100000000,
     "cost model: latency per message in us (with --beta; default: fitted to the means)"},
    {"beta", 0, FLAG_DOUBLE, NULL, NULL, 0, 100000000,
     "cost model: bandwidth of one link in GB/s (with --alpha; default: fitted)"},
    {"barrier-in-loop", 0, FLAG_BOOL, NULL, NULL, 0, 0,
     "also time the original's loop (all_reduce + barrier per call) and print the ratio"},
    {NULL, 0, 0, NULL, NULL, 0, 0, NULL}
};

/* ---- sizes and formats ---- */

/* The --sizes list in the given order. Returns the count, or -1 with a message in err. */
static int parse_sizes(const char *text, uint64_t *out, char *err, size_t n)
{
    char *copy = mlsys_xstrdup(text), *save = NULL;
    int cnt = 0;
    for (char *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        while (*t == ' ')
            t++;
        uint64_t s;
        if (mlsys_parse_size(t, &s) != 0) {
            snprintf(err, n, "--sizes: '%s' is not a size in bytes (use 1000, 64K, 1M)", t);
            cnt = -1;
            break;
        }
        if (s < 4) {
            snprintf(err, n, "--sizes: %s B is less than one float32 (4 B)", t);
            cnt = -1;
            break;
        }
        if (cnt == MAX_SIZES) {
            snprintf(err, n, "--sizes: more than %d sizes", MAX_SIZES);
            cnt = -1;
            break;
        }
        out[cnt++] = s;
    }
    if (cnt == 0) {
        snprintf(err, n, "--sizes: '%s' names no size", text);
        cnt = -1;
    }
    free(copy);
    return cnt;
}

/* The original's format: divide by 1024 while the value is 1024 or more, units B, KB, MB,
 * GB, then TB; decimals after the point. */
static char *fmt_bytes(double v, int decimals, char *buf, size_t n)
{
    static const char *const units[] = {"B", "KB", "MB", "GB", "TB"};
    int u = 0;
    while (v >= 1024 && u < 4) {
        v /= 1024;
        u++;
    }
    snprintf(buf, n, "%.*f %s", decimals, v, units[u]);
    return buf;
}

/* Bandwidth in bytes per second, as the original prints it but with two decimals, so that
 * the printed value is within 0.5 % of the exact one. */
static char *fmt_bw(double bytes_per_s, char *buf, size_t n)
{
    size_t len = strlen(fmt_bytes(bytes_per_s, 2, buf, n));
    snprintf(buf + len, n - len, "/s");
    return buf;
}

/* Milliseconds with 4 significant digits and no exponent ("0.004213", "12.35"). */
static char *fmt_ms(double ms, char *buf, size_t n)
{
    int dec = 3;
    if (ms > 0)
        dec = 3 - (int)floor(log10(ms));
    dec = dec < 0 ? 0 : dec > 7 ? 7 : dec;
    snprintf(buf, n, "%.*f", dec, ms);
    return buf;
}

static int log2_ceil(int n)
{
    int l = 0;
    while ((1 << l) < n)
        l++;
    return l;
}

/* The algorithms to time: ring and tree side by side, or the one --algo names. */
static int pick_algos(const lab_args *a, const char **names)
{
    const char *algo = lab_arg_str(a, "algo");
    if (!algo || !strcmp(algo, "auto")) {
        names[0] = "ring";
        names[1] = "tree";
        return 2;
    }
    names[0] = algo;
    return 1;
}

/* ---- the parent: flags that need more than their own check, and the banner ---- */

static int algos_before(const lab_args *a)
{
    int n = (int)lab_arg_int(a, "world-size");
    uint64_t sizes[MAX_SIZES];
    char err[256], buf[64];
    int ns = parse_sizes(lab_arg_str(a, "sizes"), sizes, err, sizeof err);
    if (ns < 0) {
        fprintf(stderr, "mlsys-lab: %s: %s\n", LAB_ID, err);
        return 2;
    }
    if (lab_arg_given(a, "alpha") != lab_arg_given(a, "beta")) {
        fprintf(stderr, "mlsys-lab: %s: --alpha and --beta go together (or give neither: "
                "they are fitted to the measurements)\n", LAB_ID);
        return 2;
    }
    const char *algo = lab_arg_str(a, "algo");
    if (algo && strcmp(algo, "auto") && strcmp(algo, "native") &&
        mlsys_algo_index(MLSYS_COLL_ALLREDUCE, algo) < 0) {
        char list[256] = "";
        const char *const *names = mlsys_algo_names(MLSYS_COLL_ALLREDUCE);
        for (int i = 0; names && names[i]; i++) {
            strncat(list, names[i], sizeof list - strlen(list) - 1);
            strncat(list, ", ", sizeof list - strlen(list) - 1);
        }
        fprintf(stderr, "mlsys-lab: %s: all_reduce has no algorithm '%s': use %sauto (ring "
                "and tree side by side) or native (--backend mpi)\n", LAB_ID, algo, list);
        return 2;
    }
    uint64_t biggest = 0;
    for (int i = 0; i < ns; i++)
        biggest = sizes[i] > biggest ? sizes[i] : biggest;
    long pages = sysconf(_SC_PHYS_PAGES), psize = sysconf(_SC_PAGESIZE);
    double need = 2.0 * (double)biggest * n;
    if (pages > 0 && psize > 0 && need > 0.8 * (double)pages * (double)psize) {
        fprintf(stderr, "mlsys-lab: %s: the buffers need %.1f GiB (2 x the largest size x %d "
                "ranks) and the machine has %.1f GiB: use smaller --sizes\n", LAB_ID,
                need / (1u << 30), n, (double)pages * (double)psize / (1u << 30));
        return 2;
    }

    const char *names[MAX_ALGOS];
    int na = pick_algos(a, names);
    const char *backend = lab_arg_str(a, "backend");
    common_box(stdout, COMMON_BOX_WIDTH, "NCCL algorithm benchmark");
    printf("\nMessage sizes: [");
    for (int i = 0; i < ns; i++)
        printf("%s%s", i ? ", " : "", fmt_bytes((double)sizes[i], 1, buf, sizeof buf));
    printf("]\n");
    printf("World size: %d\n", n);
    printf("Backend: %s%s\n", backend, lab_backend_is_shm(backend) ?
           " (our shared-memory CPU transport)" : "");
    printf("Iterations: %ld\n", lab_arg_int(a, "iterations"));
    if (na == 2)
        printf("Algorithms: %s and %s side by side (--algo NAME times one)\n", names[0],
               names[1]);
    else
        printf("Algorithm: %s (--algo %s)\n", names[0], names[0]);
    fflush(stdout);
    return -1;
}

/* ---- the cost model ---- */

typedef struct fit_point {
    const char *algo;
    double S, t_us;
} fit_point;

/* alpha and 1/beta from T = alpha * A + B / beta (A, B from the model with alpha = 1, beta
 * = inf and alpha = 0, beta = 1), least squares on the relative error so that every decade
 * of sizes counts. 0 and *alpha, *beta (GB/s) when both come out positive. */
static int fit_alpha_beta(const fit_point *p, int np, int n, double *alpha, double *beta)
{
    double saa = 0, sab = 0, sbb = 0, sat = 0, sbt = 0;
    int used = 0;
    for (int i = 0; i < np; i++) {
        double A = bench_model_us(MLSYS_COLL_ALLREDUCE, p[i].algo, p[i].S, n, 1.0, INFINITY);
        double B = bench_model_us(MLSYS_COLL_ALLREDUCE, p[i].algo, p[i].S, n, 0.0, 1.0);
        if (A < 0 || B < 0 || !(p[i].t_us > 0))
            continue;
        double w = 1.0 / (p[i].t_us * p[i].t_us);
        saa += w * A * A;
        sab += w * A * B;
        sbb += w * B * B;
        sat += w * A * p[i].t_us;
        sbt += w * B * p[i].t_us;
        used++;
    }
    double det = saa * sbb - sab * sab;
    if (used < 2 || !(fabs(det) > 1e-12 * saa * sbb))
        return -1;
    double a = (sat * sbb - sbt * sab) / det, g = (saa * sbt - sab * sat) / det;
    if (!(a > 0) || !(g > 0))
        return -1;
    *alpha = a;
    *beta = 1.0 / g;
    return 0;
}

/* ---- the ranks ---- */

typedef struct cell {
    bench_result r;
    double barrier_us;        /* --barrier-in-loop: mean of all_reduce + barrier, else 0 */
    int done;
} cell;

static int fail(mlsys_comm *c, const char *what)
{
    fprintf(stderr, "rank %d: %s failed: %s\n", mlsys_rank(c), what, mlsys_errmsg(c));
    return 1;
}

/* The original's timing, for --barrier-in-loop: iters calls of all_reduce followed by a
 * barrier, each inside the timed region. bench_measure left the algorithm forced, so this
 * runs the same one. Out: the max over ranks of each rank's mean per call, in us. */
static int time_with_barrier(mlsys_comm *c, uint64_t bytes, long iters, double *us)
{
    size_t count = (size_t)(bytes / 4);
    size_t len = count ? count * sizeof(float) : sizeof(float);
    float *in = mlsys_alloc_aligned(len), *out = mlsys_alloc_aligned(len);
    int rc = 0;
    for (size_t i = 0; i < count; i++)
        in[i] = 1.0f;
    for (int w = 0; w < WARMUP && !rc; w++)
        rc = mlsys_allreduce(c, in, out, count, MLSYS_F32, MLSYS_SUM) != MLSYS_OK;
    rc = rc || mlsys_barrier(c) != MLSYS_OK;
    double t0 = mlsys_now_s();
    for (long i = 0; i < iters && !rc; i++)
        rc = mlsys_allreduce(c, in, out, count, MLSYS_F32, MLSYS_SUM) != MLSYS_OK ||
             mlsys_barrier(c) != MLSYS_OK;
    double t = (mlsys_now_s() - t0) / (double)iters * 1e6;
    rc = rc || mlsys_allreduce(c, &t, us, 1, MLSYS_F64, MLSYS_MAX) != MLSYS_OK;
    mlsys_free_aligned(in, len);
    mlsys_free_aligned(out, len);
    return rc ? fail(c, "all_reduce + barrier loop") : 0;
}

/* --barrier-in-loop: the clean mean next to the original's, per size and algorithm. */
static void print_barrier_effect(const uint64_t *sizes, int ns, const cell *cells,
                                 const char **names, int na)
{
    char rule[W * 3 + 1];
    common_rule(rule, sizeof rule, "=", W);
    printf("\n%s\n THE ORIGINAL'S TIMING: A BARRIER INSIDE THE TIMED LOOP\n%s\n", rule, rule);
    printf("%-12s %-6s %14s %18s %8s\n", "Size", "Algo", "Mean (ms)", "+barrier (ms)", "Ratio");
    for (int i = 0; i < ns; i++)
        for (int j = 0; j < na; j++) {
            const cell *x = &cells[i * MAX_ALGOS + j];
            char sz[32];
            fmt_bytes((double)sizes[i], 1, sz, sizeof sz);
            printf("%-12s %-6s %14.3f %18.3f %7.2fx\n", sz, names[j], x->r.time_us / 1e3,
                   x->barrier_us / 1e3, x->r.time_us > 0 ? x->barrier_us / x->r.time_us : 0.0);
        }
    printf("Ratio = (all_reduce + barrier) / all_reduce alone. The barrier is a second\n"
           "collective per call: it adds its own latency, which matters for small messages\n"
           "and vanishes for large ones.\n");
}

static void print_header(const lab_args *a, mlsys_comm *c, const char **names, int na)
{
    char rule[W * 3 + 1], dash[W * 3 + 1];
    long iters = lab_arg_int(a, "iterations");
    int n = mlsys_size(c);
    common_rule(rule, sizeof rule, "=", W);
    common_rule(dash, sizeof dash, "-", W);
    printf("\n%s\n ALL_REDUCE BENCHMARK RESULTS\n%s\n", rule, rule);
    printf("Backend: %s (%s transport)\n", lab_arg_str(a, "backend"), mlsys_backend_name(c));
    printf("World size: %d\n", n);
    printf("Device: cpu\n");
    printf("Iterations per test: %ld (after %d warm-up calls)\n", iters, WARMUP);
    printf("Timing: one barrier, then %ld back-to-back call%s, no barrier inside the loop\n"
           "        (the original timed a barrier with each call: small sizes looked slower)\n",
           iters, iters == 1 ? "" : "s");
    printf("Mean = max over ranks of each rank's average; Min = max over ranks of each rank's "
           "fastest call\n");
    printf("Bandwidth = busbw = 2*S*(N-1)/N / Mean = algbw x %.3f; algbw = S / Mean; "
           "S = 4 x Elements\n", bench_busbw_factor(MLSYS_COLL_ALLREDUCE, n));
    printf("Check: every element of the result against the sum over ranks, once per size and "
           "algorithm,\n       outside the timed loop\n");
    if (mlsys_tracing(c))
        printf("[INFO] a viewer collects events: every message is traced, which slows the "
               "small sizes\n");
    printf("%s\n\n", rule);
    /* group line: the algorithm over its four columns */
    printf("%-10s %-10s ", "", "");
    for (int j = 0; j < na; j++) {
        char g[64];
        snprintf(g, sizeof g, "%s ", names[j]);
        size_t len = strlen(g);
        while (len < 45) {
            g[len++] = '-';
            g[len] = 0;
        }
        printf(j + 1 < na ? "%-46s" : "%s", g);
    }
    printf("\n%-10s %-10s ", "Size", "Elements");
    for (int j = 0; j < na; j++)
        printf("%-10s %-10s %-12s %-12s ", "Mean (ms)", "Min (ms)", "algbw", "Bandwidth");
    if (na == 2)
        printf("%-7s ", "Faster");
    printf("%-6s %s\n", "Check", "Rule");
    int width = 22 + 46 * na + (na == 2 ? 8 : 0) + 12;
    common_rule(dash, sizeof dash, "-", width > W * 3 ? W * 3 : width);
    printf("%s\n", dash);
}

static void print_row(uint64_t size, const cell *row, const char **names, int na, int n)
{
    char b[64], e[32];
    snprintf(e, sizeof e, "%zu", row[0].r.count);
    printf("%-10s %-10s ", fmt_bytes((double)size, 1, b, sizeof b), e);
    uint64_t wrong = 0;
    for (int j = 0; j < na; j++) {
        const bench_result *r = &row[j].r;
        char m[32], mn[32], ab[32], bb[32];
        fmt_ms(r->time_us / 1e3, m, sizeof m);
        if (strcmp(r->algo, names[j]))      /* the dispatcher fell back: mark it */
            strncat(m, "*", sizeof m - strlen(m) - 1);
        printf("%-10s %-10s %-12s %-12s ", m, fmt_ms(r->min_us / 1e3, mn, sizeof mn),
               fmt_bw(r->algbw * 1e9, ab, sizeof ab), fmt_bw(r->busbw * 1e9, bb, sizeof bb));
        wrong += r->wrong;
    }
    if (na == 2)
        printf("%-7s ", row[0].r.time_us <= row[1].r.time_us ? names[0] : names[1]);
    char ck[32];
    if (wrong)
        snprintf(ck, sizeof ck, "%llu!", (unsigned long long)wrong);
    else
        snprintf(ck, sizeof ck, "ok");
    const char *why;
    const char *rule = mlsys_algo_rule(MLSYS_COLL_ALLREDUCE, n, (size_t)row[0].r.bytes, &why);
    printf("%-6s %s\n", ck, rule ? rule : "?");
    fflush(stdout);
}

/* The original's ANALYSIS for one algorithm: first size against last, as given. */
static void print_analysis(const char *algo, const uint64_t *sizes, int ns, const cell *c0,
                           const cell *c1)
{
    char b1[64], b2[64];
    double size_ratio = (double)sizes[ns - 1] / (double)sizes[0];
    double lat_ratio = c1->r.time_us / c0->r.time_us;
    printf("\nLatency scaling (%s):\n", algo);
    if (size_ratio >= 1)
        printf("  Message size increased %.0fx\n", size_ratio);
    else
        printf("  Message size changed %.3gx (the last size is the smaller)\n", size_ratio);
    printf("  Latency increased %.1fx\n", lat_ratio);
    if (lat_ratio < size_ratio * 0.5)
        printf("  -> Latency grows sub-linearly with size (good bandwidth utilization)\n");
    else if (lat_ratio < size_ratio)
        printf("  -> Latency grows roughly linearly with size\n");
    else
        printf("  -> Latency grows super-linearly (possible bottleneck)\n");
    printf("\nBandwidth comparison (%s):\n", algo);
    printf("  Small messages (%s): %s\n", fmt_bytes((double)sizes[0], 1, b1, sizeof b1),
           fmt_bw(c0->r.busbw * 1e9, b2, sizeof b2));
    printf("  Large messages (%s): %s\n", fmt_bytes((double)sizes[ns - 1], 1, b1, sizeof b1),
           fmt_bw(c1->r.busbw * 1e9, b2, sizeof b2));
    if (c1->r.busbw > c0->r.busbw * 1.5) {
        printf("  -> Large messages achieve much better bandwidth utilization\n");
        printf("  -> This is typical: large messages amortize fixed overhead\n");
    }
}

/* Indices of the sizes in increasing order (the crossover is a statement about order). */
static void sort_index(const uint64_t *sizes, int ns, int *idx)
{
    for (int i = 0; i < ns; i++)
        idx[i] = i;
    for (int i = 1; i < ns; i++)
        for (int j = i; j > 0 && sizes[idx[j]] < sizes[idx[j - 1]]; j--) {
            int t = idx[j];
            idx[j] = idx[j - 1];
            idx[j - 1] = t;
        }
}

/* What the measurement says about the crossover of names[0] (ring) and names[1] (tree). */
static void print_measured_crossover(const uint64_t *sizes, int ns, const cell *cells,
                                     const char **names)
{
    int idx[MAX_SIZES], changes = 0, first_ring = -1;
    char b1[64], b2[64];
    sort_index(sizes, ns, idx);
    for (int k = 0; k < ns; k++) {
        const cell *row = &cells[idx[k] * MAX_ALGOS];
        int ring = row[0].r.time_us <= row[1].r.time_us;
        if (k > 0) {
            const cell *prev = &cells[idx[k - 1] * MAX_ALGOS];
            changes += ring != (prev[0].r.time_us <= prev[1].r.time_us);
        }
        if (ring && first_ring < 0)
            first_ring = k;
    }
    printf("Measured: ");
    if (first_ring == 0 && changes == 0) {
        printf("%s was faster at every size (%s .. %s)\n", names[0],
               fmt_bytes((double)sizes[idx[0]], 1, b1, sizeof b1),
               fmt_bytes((double)sizes[idx[ns - 1]], 1, b2, sizeof b2));
    } else if (first_ring < 0) {
        printf("%s was faster at every size (%s .. %s)\n", names[1],
               fmt_bytes((double)sizes[idx[0]], 1, b1, sizeof b1),
               fmt_bytes((double)sizes[idx[ns - 1]], 1, b2, sizeof b2));
    } else if (changes == 1 && first_ring > 0) {
        printf("%s faster up to %s, %s faster from %s: the crossover lies between them\n",
               names[1], fmt_bytes((double)sizes[idx[first_ring - 1]], 1, b1, sizeof b1),
               names[0], fmt_bytes((double)sizes[idx[first_ring]], 1, b2, sizeof b2));
    } else {
        printf("the faster algorithm changes %d times over the sorted sizes (noise, or more "
               "than one regime); %s faster at:", changes, names[1]);
        for (int k = 0; k < ns; k++) {
            const cell *row = &cells[idx[k] * MAX_ALGOS];
            if (row[0].r.time_us > row[1].r.time_us)
                printf(" %s", fmt_bytes((double)sizes[idx[k]], 1, b1, sizeof b1));
        }
        printf("\n");
    }
}

/* With one algorithm timed there is no measured crossover to compare with the model. */
static void print_one_algo_note(const char *name)
{
    printf("\nMeasured: only %s ran (--algo %s): run without --algo to time ring and tree side "
           "by side\n", name, name);
}

static void print_model(const lab_args *a, const uint64_t *sizes, int ns, const cell *cells,
                        const char **names, int na, int n)
{
    char rule[W * 3 + 1], b[64], m1[32], m2[32];
    common_rule(rule, sizeof rule, "=", W);
    printf("\n%s\n COST MODEL (alpha-beta)\n%s\n", rule, rule);
    int L = log2_ceil(n);
    printf("T_ring = 2(N-1)(alpha + S/(N beta))    T_tree = 2 ceil(log2 N)(alpha + S/beta)\n");
    if (n < 2) {
        printf("1 rank: nothing is sent, so there is nothing to model\n");
        return;
    }
    double alpha = 0, beta = 0;
    fit_point pts[MAX_SIZES * MAX_ALGOS];
    int np = 0;
    for (int i = 0; i < ns; i++)
        for (int j = 0; j < na; j++) {
            const bench_result *r = &cells[i * MAX_ALGOS + j].r;
            if (!strcmp(r->algo, names[j]))       /* only what really ran that algorithm */
                pts[np++] = (fit_point){names[j], (double)r->bytes, r->time_us};
        }
    if (lab_arg_given(a, "alpha")) {
        alpha = lab_arg_double(a, "alpha");
        beta = lab_arg_double(a, "beta");
        printf("alpha = %.4g us per message, beta = %.4g GB/s per link (given)\n", alpha, beta);
    } else if (fit_alpha_beta(pts, np, n, &alpha, &beta) == 0) {
        printf("alpha = %.4g us per message, beta = %.4g GB/s per link (fitted to the %d "
               "measured means, least squares on the relative error)\n", alpha, beta, np);
    } else {
        printf("alpha and beta cannot be fitted to %s %d mean%s (too few sizes, or a "
               "negative fit); give them with --alpha US --beta GB/s\n", np == 1 ? "this" : "these",
               np, np == 1 ? "" : "s");
        /* what was measured is said whether or not a model fits it */
        if (na == 2 && !strcmp(names[0], "ring") && !strcmp(names[1], "tree")) {
            printf("\n");
            print_measured_crossover(sizes, ns, cells, names);
        } else {
            print_one_algo_note(names[0]);
        }
        return;
    }
    double ab = alpha * beta * 1e3;               /* us x bytes/us: bytes */
    int num = n - 1 - L;
    double den = L - (double)(n - 1) / n;
    if (num <= 0) {
        printf("Crossover: on %d ranks 2(N-1) = %d <= 2 ceil(log2 N) = %d: the model says ring "
               "is never slower (S* = 0)\n", n, 2 * (n - 1), 2 * L);
    } else {
        double s_star = ab * num / den;
        printf("Crossover: S* = alpha beta (N-1-L)/(L-(N-1)/N) = %.4g alpha beta = %.0f B "
               "(%s), L = %d: below S* tree should be faster\n", num / den, s_star,
               fmt_bytes(s_star, 1, b, sizeof b), L);
    }
    printf("\n%-10s %-14s %-14s %-8s %s\n", "Size", "ring model", "tree model", "model",
           na == 2 ? "measured" : "");
    printf("%-10s %-14s %-14s %-8s %s\n", "", "(ms)", "(ms)", "faster", na == 2 ? "faster" : "");
    int agree = 0;
    for (int i = 0; i < ns; i++) {
        double S = (double)cells[i * MAX_ALGOS].r.bytes;
        double tr = bench_model_us(MLSYS_COLL_ALLREDUCE, "ring", S, n, alpha, beta);
        double tt = bench_model_us(MLSYS_COLL_ALLREDUCE, "tree", S, n, alpha, beta);
        const char *mf = tr <= tt ? "ring" : "tree";
        printf("%-10s %-14s %-14s %-8s ", fmt_bytes((double)sizes[i], 1, b, sizeof b),
               fmt_ms(tr / 1e3, m1, sizeof m1), fmt_ms(tt / 1e3, m2, sizeof m2), mf);
        if (na == 2) {
            const cell *row = &cells[i * MAX_ALGOS];
            const char *meas = row[0].r.time_us <= row[1].r.time_us ? names[0] : names[1];
            agree += !strcmp(meas, mf);
            printf("%s", meas);
        }
        printf("\n");
    }
    if (na == 2 && !strcmp(names[0], "ring") && !strcmp(names[1], "tree")) {
        printf("\n");
        print_measured_crossover(sizes, ns, cells, names);
        printf("Model and measurement agree on the faster algorithm at %d of %d sizes\n", agree,
               ns);
    } else {
        print_one_algo_note(names[0]);
    }
}

static void print_understanding(void)
{
    printf("\nUnderstanding the results:\n\n"
           "1. SMALL MESSAGES (< 1 MB):\n"
           "   - The fixed cost per message (latency, alpha) dominates\n"
           "   - Tree needs fewer steps (2 ceil(log2 N) instead of 2(N-1)), so it wins when N is "
           "large enough\n"
           "   - Little of the bandwidth is used\n\n"
           "2. LARGE MESSAGES (> 10 MB):\n"
           "   - The bytes dominate (bandwidth, beta)\n"
           "   - Ring moves only 2(N-1)/N of the data per rank and keeps every link busy\n"
           "   - The step count hardly matters any more\n\n"
           "3. AUTOMATIC SELECTION:\n"
           "   - NCCL picks Ring or Tree from the size (and the machine): tree small, ring "
           "large,\n     with the crossover typically around 1-10 MB on GPUs\n"
           "   - Our runtime has its own size/rank rule: the Rule column says what --algo auto "
           "runs\n\n"
           "4. WHAT TO COMPARE WITH:\n"
           "   - NVLink 4.0: about 450 GB/s effective for all_reduce; PCIe 4.0: about 16 GB/s\n"
           "   - Here, on CPU, one core's memcpy is the ceiling (mlsys-lab bench --memcpy)\n"
           "   - If your numbers are much lower, check the topology!\n");
}

static int algos_rank(mlsys_comm *c, const lab_args *a)
{
    int me = mlsys_rank(c), n = mlsys_size(c), rc = 0;
    uint64_t sizes[MAX_SIZES];
    char err[256];
    int ns = parse_sizes(lab_arg_str(a, "sizes"), sizes, err, sizeof err);
    if (ns < 0) {
        fprintf(stderr, "rank %d: %s\n", me, err);
        return 2;
    }
    const char *names[MAX_ALGOS];
    int na = pick_algos(a, names);
    bench_call k = {
        .coll = MLSYS_COLL_ALLREDUCE, .dt = MLSYS_F32, .op = MLSYS_SUM, .root = 0,
        .iters = lab_arg_int(a, "iterations"), .warmup = WARMUP, .check = 1, .per_call = 1,
        .who = LAB_ID,
    };
    uint64_t biggest = 0;
    for (int i = 0; i < ns; i++)
        biggest = sizes[i] > biggest ? sizes[i] : biggest;
    bench_ctx *b = bench_ctx_new(c, &k, biggest);
    cell *cells = mlsys_xcalloc((size_t)ns * MAX_ALGOS, sizeof *cells);
    if (me == 0)
        print_header(a, c, names, na);
    uint64_t wrong = 0;
    for (int i = 0; i < ns && !rc; i++) {
        mlsys_step(c, i, "size");
        cell *row = &cells[i * MAX_ALGOS];
        for (int j = 0; j < na && !rc; j++) {
            rc = bench_measure(b, sizes[i], 0, names[j], &row[j].r);
            if (rc)
                break;
            row[j].done = 1;
            wrong += row[j].r.wrong;
            if (lab_arg_bool(a, "barrier-in-loop") &&
                (rc = time_with_barrier(c, sizes[i], k.iters, &row[j].barrier_us)) != 0)
                break;
            if (me == 0) {
                char series[32];
                snprintf(series, sizeof series, "%s busbw GB/s", names[j]);
                mlsys_emit_point(c, series, (double)row[j].r.bytes, row[j].r.busbw);
            }
        }
        if (rc)
            break;
        if (me == 0)
            print_row(sizes[i], row, names, na, n);
        if (mlsys_barrier(c) != MLSYS_OK)
            rc = fail(c, "barrier");
    }
    if (!rc && me == 0) {
        int fell_back = 0, rounded = 0;
        for (int i = 0; i < ns; i++) {
            rounded |= cells[i * MAX_ALGOS].r.bytes != sizes[i];
            for (int j = 0; j < na; j++)
                fell_back |= strcmp(cells[i * MAX_ALGOS + j].r.algo, names[j]) != 0;
        }
        if (fell_back)
            printf("* the dispatcher ran another algorithm there (ring needs at least N "
                   "elements; MLSYS_DEBUG=1 says why)\n");
        if (rounded)
            printf("Sizes that are not a multiple of 4 B move 4 x Elements bytes; the "
                   "bandwidth uses that\n");
        printf("Rule: what --algo auto runs for that size on %d rank%s (our size/rank rule)\n",
               n, n == 1 ? "" : "s");
        printf("KB, MB and GB here are 1024-based, as the original prints them; the plot "
               "view shows busbw in GB/s of 10^9 bytes, as mlsys-lab bench does\n");
        if (wrong)
            printf("[FAIL] %llu result element%s differed from the sum over ranks\n",
                   (unsigned long long)wrong, wrong == 1 ? "" : "s");
        else
            printf("[OK] every all_reduce result equalled the sum over ranks\n");

        char rule[W * 3 + 1];
        common_rule(rule, sizeof rule, "=", W);
        printf("\n%s\n ANALYSIS\n%s\n", rule, rule);
        if (ns >= 2)
            for (int j = 0; j < na; j++)
                print_analysis(names[j], sizes, ns, &cells[j], &cells[(ns - 1) * MAX_ALGOS + j]);
        else
            printf("\n(one size: give two or more --sizes for the scaling analysis)\n");
        print_model(a, sizes, ns, cells, names, na, n);
        if (lab_arg_bool(a, "barrier-in-loop"))
            print_barrier_effect(sizes, ns, cells, names, na);
        print_understanding();
        fflush(stdout);
    }
    bench_ctx_free(b);
    free(cells);
    if (rc)
        return 1;
    /* Every rank knows the count, but only rank 0 says so with its status: a rank that
     * failed first would make the runner stop rank 0 before it printed the verdict. */
    return wrong && me == 0 ? 1 : 0;
}

const lab ch04_benchmark_algorithms_lab = {
    .id = LAB_ID,
    .title = "Ring and tree all_reduce benchmark",
    .summary = "all_reduce latency and bandwidth against size, ring and tree side by side, "
               "with the alpha-beta crossover",
    .flags = algos_flags,
    .port = 29505,
    .min_ranks = 1,
    .max_ranks = 64,
    .before = algos_before,
    .rank_main = algos_rank,
    .view = "plot",
};
