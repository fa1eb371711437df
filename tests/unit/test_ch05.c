/* test_ch05.c - chapter 5 for real: ch05/simple-ddp and ch05/gradient-sync-visualizer run
 * through the built binary (MLSYS_LAB_BIN) for N = 1..4, their printed numbers checked
 * against references computed here (the sampler from its definition, the ZeRO byte formulas
 * from the model's shapes, the tiny network's gradient in plain loops), bad input (exit 2,
 * one line), and unit tests of the DDP engine (bucket layout, the launch rule, the average)
 * on in-process ranks. Never a wall-clock assertion. */
#include "run_bin.h"
#include <check.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include "../../core/train/train.h"

/* ---- running the binary ---- */

/* run_bin.h's runner (stdout and stderr apart, 120 s limit), under this suite's names */
typedef bin_result run_result;
#define run run_bin

/* The last 1500 bytes of s: failure messages stay small enough for Check's pipe. */
static const char *tail_of(const char *s)
{
    size_t n = strlen(s);
    return n > 1500 ? s + n - 1500 : s;
}

#define run_free bin_result_free

#define ASSERT_OK(r, what) \
    ck_assert_msg((r).status == 0, "%s: exit %d\nstdout (end):\n%.1500s\nstderr:\n%.500s", (what), \
                  (r).status, tail_of((r).out), (r).err)

/* The text right after the first occurrence of key at or after from, or NULL. */
static const char *after(const char *from, const char *key)
{
    const char *p = strstr(from, key);
    return p ? p + strlen(key) : NULL;
}

static int count_of(const char *s, const char *key)
{
    int n = 0;
    for (const char *p = strstr(s, key); p; p = strstr(p + 1, key))
        n++;
    return n;
}

/* ---- references ---- */

/* The distributed sampler as the curriculum defines it: Fisher-Yates on mlsys_rng seeded
 * 0 + epoch, padded by repeating from the start, rank r takes r, r+N, ... */
static int ref_sampler(int epoch, int r, int N, int *out)
{
    int perm[1000];
    mlsys_rng g;
    mlsys_rng_seed(&g, (uint64_t)epoch);
    for (int i = 0; i < 1000; i++)
        perm[i] = i;
    for (int i = 999; i > 0; i--) {
        int j = (int)(mlsys_rng_u64(&g) % (uint64_t)(i + 1)), t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    int per = (1000 + N - 1) / N, k = 0;
    for (int pos = r; pos < per * N; pos += N)
        out[k++] = perm[pos % 1000];
    return k;
}

/* Ψ' of the 784 -> 256 -> 10 model with every tensor padded to a multiple of N. */
static size_t ref_padded(int N)
{
    static const size_t numel[4] = {256 * 784, 256, 10 * 256, 10};
    size_t P = 0;
    for (int t = 0; t < 4; t++)
        P += (numel[t] + (size_t)N - 1) / (size_t)N * (size_t)N;
    return P;
}

/* ---- simple-ddp ---- */

START_TEST(simple_ddp_checks)
{
    int N = _i;
    run_result r = run("run ch05/simple-ddp -w %d", N);
    ASSERT_OK(r, "simple-ddp");
    ck_assert_int_eq(count_of(r.out, ": PASS"), 7);
    ck_assert_int_eq(count_of(r.out, "FAIL"), 0);
    double l1 = atof(after(r.out, "Manual - Average loss: "));
    double l2 = atof(after(r.out, "DDP - Average loss: "));
    ck_assert(fabs(l1 - l2) < 1e-4);
    ck_assert(l1 > 2.0 && l1 < 2.7);        /* random labels: about ln 10 */
    ck_assert_ptr_nonnull(strstr(r.out, "all-reduces per step, manual: 4 (= 4 tensors): PASS"));
    /* the defaults put several buckets in flight: 814120 B, first 8 KiB, then 128 KiB each */
    int nb = ddp_bucket_count(203530, 8192 / 4, 131072 / 4);
    ck_assert_int_eq(nb, 8);
    char want[128];
    snprintf(want, sizeof want, "all-reduces per step, bucketed: %d (= %d buckets): PASS", nb, nb);
    ck_assert_msg(strstr(r.out, want), "missing '%s'", want);
    /* the sampler: rank 0's first index and the batch count, from the definition */
    int idx[1000];
    int per = ref_sampler(0, 0, N, idx);
    snprintf(want, sizeof want, "epoch 0: sampler seed 0, rank 0 first index %d, %d batches",
             idx[0], (per + 31) / 32);
    ck_assert_msg(strstr(r.out, want), "missing '%s' in:\n%s", want, tail_of(r.out));
    ck_assert_int_eq(count_of(r.out, want), 2);     /* same order in both methods */
    run_free(&r);
}
END_TEST

START_TEST(simple_ddp_bucket_count)
{
    /* 814120 B of gradients, first bucket 16 KiB, then 64 KiB: 1 + ceil(797736 / 65536) = 14 */
    run_result r = run("run ch05/simple-ddp -w 2 --bucket-size 64K --first-bucket 16K");
    ASSERT_OK(r, "simple-ddp buckets");
    ck_assert_ptr_nonnull(strstr(r.out, "Buckets: 14 = "));
    ck_assert_ptr_nonnull(strstr(r.out, "all-reduces per step, bucketed: 14 (= 14 buckets): PASS"));
    ck_assert_int_eq(count_of(r.out, "FAIL"), 0);
    run_free(&r);
}
END_TEST

START_TEST(simple_ddp_epochs)
{
    run_result r = run("run ch05/simple-ddp -w 2 --epochs 2");
    ASSERT_OK(r, "simple-ddp --epochs 2");
    int idx0[1000], idx1[1000];
    ref_sampler(0, 0, 2, idx0);
    ref_sampler(1, 0, 2, idx1);
    ck_assert_int_ne(idx0[0], idx1[0]);
    char w0[96], w1[96];
    snprintf(w0, sizeof w0, "epoch 0: sampler seed 0, rank 0 first index %d,", idx0[0]);
    snprintf(w1, sizeof w1, "epoch 1: sampler seed 1, rank 0 first index %d,", idx1[0]);
    ck_assert_int_eq(count_of(r.out, w0), 2);
    ck_assert_int_eq(count_of(r.out, w1), 2);
    double e0 = atof(after(after(r.out, w0), "loss "));
    double e1 = atof(after(after(r.out, w1), "loss "));
    ck_assert(e0 != e1);
    ck_assert_int_eq(count_of(r.out, "FAIL"), 0);
    run_free(&r);
}
END_TEST

/* simple-ddp's dataset and initial model, as the lab defines them: x standard normals and
 * y uniform in 0..9 from one rng seeded 0, torch's Linear init from seed 42. */
static double ref_first_step_loss(int N, int B)
{
    float *x = malloc(1000 * 784 * sizeof(float)), *xb = malloc((size_t)N * B * 784 * sizeof(float));
    int y[1000], *yb = malloc((size_t)N * B * sizeof(int)), idx[1000];
    mlsys_rng g;
    mlsys_rng_seed(&g, 0);
    for (int i = 0; i < 1000 * 784; i++)
        x[i] = (float)mlsys_rng_normal(&g);
    for (int i = 0; i < 1000; i++)
        y[i] = (int)(mlsys_rng_u64(&g) % 10);
    for (int q = 0; q < N; q++) {
        ref_sampler(0, q, N, idx);
        for (int i = 0; i < B; i++) {
            memcpy(xb + ((size_t)q * B + i) * 784, x + (size_t)idx[i] * 784, 784 * sizeof(float));
            yb[q * B + i] = y[idx[i]];
        }
    }
    mlp_shape sh = {.nl = 2, .dims = {784, 256, 10}};
    nn_params p;
    nn_params_init(&p);
    mlp_declare(&p, &sh);
    nn_params_alloc(&p, 1);
    mlp_init(&p, &sh, 42);
    mlp_acts m;
    mlp_acts_init(&m, &sh, N * B);
    double loss = mlp_forward_loss(&sh, &p, &m, xb, yb, N * B);
    mlp_acts_fini(&m, &sh);
    nn_params_fini(&p);
    free(x);
    free(xb);
    free(yb);
    return loss;
}

/* The loss printed is every rank's, not rank 0's: one step, the mean over the union of the
 * ranks' first batches, computed in one process here. */
START_TEST(simple_ddp_loss_all_ranks)
{
    int N = _i;
    run_result r = run("run ch05/simple-ddp -w %d --max-steps 1", N);
    ASSERT_OK(r, "simple-ddp --max-steps 1");
    double want = ref_first_step_loss(N, 32);
    const char *p = after(r.out, "Manual - Average loss: ");
    ck_assert_ptr_nonnull(p);
    ck_assert_msg(fabs(atof(p) - want) < 1e-4, "N=%d: printed %.6f, the union's loss %.6f", N,
                  atof(p), want);
    ck_assert_ptr_nonnull(strstr(p, "all ranks"));
    p = after(r.out, "DDP - Average loss: ");
    ck_assert_ptr_nonnull(p);
    ck_assert(fabs(atof(p) - want) < 1e-4);
    char scope[96];
    if (N == 1)
        snprintf(scope, sizeof scope, "(mean over the 32 samples)");
    else
        snprintf(scope, sizeof scope, "(mean over the %d ranks' %d samples)", N, 32 * N);
    ck_assert_msg(count_of(r.out, scope) == 2, "missing '%s'", scope);
    run_free(&r);
}
END_TEST

/* One row of the times table: step forward backward optimizer in-sync alone hidden. */
static void times_row(const char *out, const char *name, double v[7])
{
    char key[32];
    snprintf(key, sizeof key, "\n  %-6s ", name);
    const char *p = after(out, key);
    ck_assert_msg(p != NULL, "no '%s' row in:\n%s", name, tail_of(out));
    ck_assert_int_eq(sscanf(p, "%lf %lf %lf %lf %lf %lf %lf", &v[0], &v[1], &v[2], &v[3], &v[4],
                            &v[5], &v[6]), 7);
}

/* Both methods print the same quantities; the figures agree with each other (never with a
 * clock): the parts of the median step fit in it, the manual loop hides nothing, hidden is
 * comm alone less in sync, the median lies in the spread, the breakdown is the manual row
 * and its ratio follows from its times; the timed steps are counted from the sampler. */
START_TEST(simple_ddp_times)
{
    int N = _i;
    run_result r = run("run ch05/simple-ddp -w %d", N);
    ASSERT_OK(r, "simple-ddp");
    int idx[1000], per = ref_sampler(0, 0, N, idx);
    int full = per / 32, steps = (per + 31) / 32;
    int timed = full - 1 > 0 ? full - 1 : steps;
    char want[160];
    snprintf(want, sizeof want, "the median step of %d: the first (a warm-up)", timed);
    ck_assert_msg(strstr(r.out, want), "missing '%s' in:\n%s", want, tail_of(r.out));
    double m[7], d[7];
    times_row(r.out, "manual", m);
    times_row(r.out, "DDP", d);
    for (int k = 0; k < 7; k++)
        ck_assert(m[k] >= 0 && d[k] >= 0);
    ck_assert(m[0] > 0 && d[0] > 0);
    ck_assert_msg(m[1] + m[2] + m[3] + m[4] <= m[0] + 0.004, "manual parts exceed its step");
    ck_assert_msg(d[1] + d[2] + d[3] + d[4] <= d[0] + 0.004, "DDP parts exceed its step");
    ck_assert(m[6] == 0.0 && fabs(m[5] - m[4]) < 1e-9);
    ck_assert_msg(fabs(d[6] - fmax(0.0, d[5] - d[4])) <= 0.0015, "DDP hidden %.3f, alone %.3f, "
                  "in sync %.3f", d[6], d[5], d[4]);
    double lo, hi, dlo, dhi;
    const char *p = after(r.out, "noise: those ");
    ck_assert_ptr_nonnull(p);
    int n;
    ck_assert_int_eq(sscanf(p, "%d steps took %lf to %lf (manual), %lf to %lf (DDP)", &n, &lo,
                            &hi, &dlo, &dhi), 5);
    ck_assert_int_eq(n, timed);
    ck_assert(lo <= m[0] && m[0] <= hi && dlo <= d[0] && d[0] <= dhi);
    double f, b, k, st, ratio;
    p = after(r.out, "Manual step breakdown (the median step, nothing overlapped):");
    ck_assert_ptr_nonnull(p);
    ck_assert_int_eq(sscanf(p, " t_fwd %lf ms, t_bwd_compute %lf ms, t_comm %lf ms, t_step %lf "
                            "ms ratio t_comm / (t_fwd + t_bwd_compute) = %lf", &f, &b, &k, &st,
                            &ratio), 5);
    ck_assert(f == m[1] && b == m[2] && k == m[4] && st == m[0]);
    ck_assert_msg(fabs(ratio - k / (f + b)) <= 1e-3 * ratio, "ratio %g, times give %g", ratio,
                  k / (f + b));
    /* the machine's limit, in one line: this machine's cores against the ranks */
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    snprintf(want, sizeof want, "Machine: %ld core%s for %d rank", cores, cores == 1 ? "" : "s", N);
    ck_assert_msg(strstr(r.out, want), "missing '%s'", want);
    ck_assert_int_eq(count_of(r.out, "FAIL"), 0);
    run_free(&r);
}
END_TEST

/* --sweep: every bucket size from 1 KiB to 1 MiB, its all-reduce count ceil(bytes / size),
 * and the per-call figure is the sync time over the count. */
START_TEST(simple_ddp_sweep)
{
    run_result r = run("run ch05/simple-ddp -w 2 --max-steps 2 --sweep");
    ASSERT_OK(r, "simple-ddp --sweep");
    static const struct { const char *name; long bytes; } rows[] = {
        {"1 KiB", 1024}, {"4 KiB", 4096}, {"16 KiB", 16384}, {"64 KiB", 65536},
        {"256 KiB", 262144}, {"1 MiB", 1048576},
    };
    const char *p = after(r.out, "Bucket-size sweep");
    ck_assert_ptr_nonnull(p);
    for (int i = 0; i < 6; i++) {
        char key[32];
        snprintf(key, sizeof key, "%8s ", rows[i].name);
        p = after(p, key);
        ck_assert_msg(p != NULL, "no row for %s", rows[i].name);
        long calls;
        double ms, us;
        ck_assert_int_eq(sscanf(p, "%ld %lf %lf us", &calls, &ms, &us), 3);
        ck_assert_int_eq(calls, (814120 + rows[i].bytes - 1) / rows[i].bytes);
        ck_assert(ms > 0);
        ck_assert_msg(fabs(us - ms * 1e3 / calls) <= fmax(0.06, 0.01 * us), "%s: %.1f us per "
                      "call, %.3f ms / %ld", rows[i].name, us, ms, calls);
    }
    ck_assert_int_eq(count_of(r.out, "FAIL"), 0);
    run_free(&r);
}
END_TEST

/* Columns of a UTF-8 line (every character here is one column wide). */
static int columns(const char *s, const char *e)
{
    int n = 0;
    for (; s < e; s++)
        n += ((unsigned char)*s & 0xc0) != 0x80;
    return n;
}

/* The labs' lines fit a terminal of 80 columns (box rules aside), and every [check] line
 * keeps its PASS within 75, so the front end's log ("[r0] " before each line) shows it. */
START_TEST(lines_fit_80_columns)
{
    static const char *const runs[] = {
        "run ch05/simple-ddp -w 2 --max-steps 3 --zero 1",
        "run ch05/simple-ddp -w 3 --max-steps 2 --zero 3 --optim adamw",
        "run ch05/gradient-sync-visualizer -w 4 -v",
    };
    for (int i = 0; i < 3; i++) {
        run_result r = run("%s", runs[i]);
        ASSERT_OK(r, runs[i]);
        for (const char *l = r.out; *l;) {
            const char *e = strchr(l, '\n');
            if (!e)
                e = l + strlen(l);
            int cols = columns(l, e);
            int box = strncmp(l, "\xe2\x95", 2) == 0;        /* ╔═╗ ║ ╚═╝ */
            ck_assert_msg(box || cols <= 79, "`%s`: %d columns: %.*s", runs[i], cols,
                          (int)(e - l), l);
            if (!strncmp(l, "[check]", 7))
                ck_assert_msg(cols <= 75, "`%s`: a [check] line of %d columns: %.*s", runs[i],
                              cols, (int)(e - l), l);
            l = *e ? e + 1 : e;
        }
        run_free(&r);
    }
}
END_TEST

static const struct { int n, stage, adamw; } zero_cases[] = {
    {2, 1, 0}, {3, 1, 0}, {2, 2, 0}, {3, 2, 0}, {4, 2, 0}, {2, 3, 0}, {3, 3, 0}, {4, 3, 1},
    {1, 3, 0}, {3, 1, 1},
};

START_TEST(simple_ddp_zero)
{
    int N = zero_cases[_i].n, z = zero_cases[_i].stage, adamw = zero_cases[_i].adamw;
    run_result r = run("run ch05/simple-ddp -w %d --zero %d --optim %s", N, z,
                       adamw ? "adamw" : "sgd");
    ASSERT_OK(r, "simple-ddp --zero");
    ck_assert_int_eq(count_of(r.out, "FAIL"), 0);
    ck_assert_int_eq(count_of(r.out, ": PASS"), 10);
    char key[64];
    snprintf(key, sizeof key, "[check] ZeRO-%d final parameters = DDP's", z);
    ck_assert_ptr_nonnull(strstr(r.out, key));
    /* the bytes, from the shapes: params, grads, optimizer, sent per step */
    size_t P = ref_padded(N), S = P / (size_t)N;
    size_t params = z == 3 ? 4 * S : 4 * P, grads = z >= 2 ? 4 * S : 4 * P;
    size_t optim = adamw ? 8 * S : 0;
    unsigned long long unit = 4ull * S * (unsigned long long)(N - 1);
    unsigned long long sent = z == 2 ? 2 * unit : 3 * unit;
    for (int q = 0; q < N; q++) {
        char want[160];
        snprintf(want, sizeof want, "Rank %d: params %zu B (", q, params);
        ck_assert_msg(strstr(r.out, want), "missing '%s'\n%s", want, tail_of(r.out));
        snprintf(want, sizeof want, "grads %zu B (", grads);
        ck_assert_msg(strstr(r.out, want), "missing '%s'", want);
        snprintf(want, sizeof want, "optimizer %zu B (", optim);
        ck_assert_msg(strstr(r.out, want), "missing '%s'", want);
        snprintf(want, sizeof want, "Rank %d: sent per step %llu B\n", q, sent);
        ck_assert_msg(strstr(r.out, want), "missing '%s'\n%s", want, tail_of(r.out));
    }
    run_free(&r);
}
END_TEST

/* ---- gradient-sync-visualizer ---- */

/* Rank q's data and the 4 -> 3 -> 2 network in plain loops (torch's init from seed 42). */
static void ref_data(int q, double *x, double *t)
{
    mlsys_rng g;
    mlsys_rng_seed(&g, 100u * (uint64_t)q);
    for (int i = 0; i < 32; i++)
        x[i] = (float)mlsys_rng_normal(&g);
    for (int i = 0; i < 16; i++)
        t[i] = (float)mlsys_rng_normal(&g);
}

static void ref_weights(double *w1, double *w2)
{
    float f1[12], f2[6];
    mlsys_rng g;
    mlsys_rng_seed(&g, 42);
    nn_init_linear(f1, 12, 4, &g);
    nn_init_linear(f2, 6, 3, &g);
    for (int i = 0; i < 12; i++)
        w1[i] = f1[i];
    for (int i = 0; i < 6; i++)
        w2[i] = f2[i];
}

/* MSE over B rows of x[B,4], t[B,2]; accumulates its gradient times scale into g1, g2. */
static double ref_loss_grad(const double *w1, const double *w2, const double *x,
                            const double *t, int B, double *g1, double *g2, double scale)
{
    double loss = 0;
    for (int b = 0; b < B; b++) {
        double h[3], y[2];
        for (int j = 0; j < 3; j++) {
            h[j] = 0;
            for (int i = 0; i < 4; i++)
                h[j] += w1[j * 4 + i] * x[b * 4 + i];
            h[j] = h[j] > 0 ? h[j] : 0;
        }
        for (int k = 0; k < 2; k++) {
            y[k] = 0;
            for (int j = 0; j < 3; j++)
                y[k] += w2[k * 3 + j] * h[j];
            double d = y[k] - t[b * 2 + k];
            loss += d * d;
            double dy = 2 * d / (B * 2) * scale;
            for (int j = 0; j < 3; j++) {
                g2[k * 3 + j] += dy * h[j];
                if (h[j] > 0)
                    for (int i = 0; i < 4; i++)
                        g1[j * 4 + i] += dy * w2[k * 3 + j] * x[b * 4 + i];
            }
        }
    }
    return loss / (B * 2);
}

START_TEST(visualizer)
{
    int N = _i;
    run_result r = run("run ch05/gradient-sync-visualizer -w %d -v", N);
    ASSERT_OK(r, "gradient-sync-visualizer");
    ck_assert_int_eq(count_of(r.out, "identical on all ranks: True"), 2);
    ck_assert_ptr_nonnull(strstr(r.out, "[check] synced gradient = one process's: max |diff|"));
    ck_assert_int_eq(count_of(r.out, ": PASS"), 1);
    double w1[12], w2[6], g1[12] = {0}, g2[6] = {0};
    ref_weights(w1, w2);
    for (int q = 0; q < N; q++) {
        double x[32], t[16], l1[12] = {0}, l2[6] = {0};
        ref_data(q, x, t);
        double loss = ref_loss_grad(w1, w2, x, t, 8, l1, l2, 1.0);
        /* the union gradient: the mean of the shard gradients */
        ref_loss_grad(w1, w2, x, t, 8, g1, g2, 1.0 / N);
        char key[48];
        snprintf(key, sizeof key, "Rank %d: loss ", q);
        const char *p = after(r.out, key);
        ck_assert_ptr_nonnull(p);
        ck_assert_msg(fabs(atof(p) - loss) < 2e-6, "rank %d loss %s vs %.6f", q, p, loss);
        /* before the sync: the rank's own gradient; after: the union's */
        snprintf(key, sizeof key, "Rank %d: grad w1[0,0] = ", q);
        p = after(r.out, key);
        ck_assert_ptr_nonnull(p);
        ck_assert(fabs(atof(p) - l1[0]) < 2e-6);
    }
    const char *sync = strstr(r.out, "Step 3:");
    ck_assert_ptr_nonnull(sync);
    for (int q = 0; q < N; q++) {
        char key[48];
        snprintf(key, sizeof key, "Rank %d: grad w1[0,0] = ", q);
        const char *p = after(sync, key);
        ck_assert_ptr_nonnull(p);
        ck_assert_msg(fabs(atof(p) - g1[0]) < 2e-6, "synced w1[0,0] %s vs %.6f", p, g1[0]);
        p = after(p, "w2[0,0] = ");
        ck_assert(fabs(atof(p) - g2[0]) < 2e-6);
    }
    run_free(&r);
}
END_TEST

/* ---- bad input ---- */

START_TEST(bad_input)
{
    static const char *const cases[] = {
        "run ch05/simple-ddp --bucket-size 0",
        "run ch05/simple-ddp --first-bucket 0",
        "run ch05/simple-ddp --hidden 12x",
        "run ch05/gradient-sync-visualizer -w 20 --zero 1",
        "run ch05/gradient-sync-visualizer --bucket-size 0",
    };
    run_result r = run("%s", cases[_i]);
    ck_assert_msg(r.status == 2, "`%s`: exit %d, stderr %s", cases[_i], r.status, r.err);
    ck_assert_msg(r.out[0] == 0, "`%s`: stdout not empty: %.500s", cases[_i], r.out);
    size_t len = strlen(r.err);
    ck_assert_msg(len > 1 && strchr(r.err, '\n') == r.err + len - 1, "`%s`: want one line: %s",
                  cases[_i], r.err);
    run_free(&r);
}
END_TEST

/* ---- the DDP engine in-process ---- */

/* Tensors of 10, 3, 7 and 5 floats (25): buckets of 8 floats, the first of 3. */
static void small_params(nn_params *p)
{
    nn_params_init(p);
    nn_params_add1(p, "a", 10);
    nn_params_add1(p, "b", 3);
    nn_params_add1(p, "c", 7);
    nn_params_add1(p, "d", 5);
    nn_params_alloc(p, 1);
}

START_TEST(ddp_layout)
{
    nn_params p;
    small_params(&p);
    ddp *d;
    ck_assert_int_eq(ddp_create(&d, NULL, &p, 32, 12), 0);
    ck_assert_int_eq(d->nbuckets, 4);           /* 1 + ceil((25 - 3) / 8) */
    static const size_t off[4] = {22, 14, 6, 0}, len[4] = {3, 8, 8, 6};
    for (int k = 0; k < 4; k++) {
        ck_assert_uint_eq(d->b[k].off, off[k]);  /* from the end: reverse parameter order */
        ck_assert_uint_eq(d->b[k].n, len[k]);
    }
    ck_assert_uint_lt(d->b[0].n, d->b[1].n);     /* the first bucket is the small one */
    ddp_free(d);
    /* the count formula for other sizes, against a direct loop */
    for (size_t n = 1; n < 60; n++)
        for (size_t f = 1; f < 9; f++)
            for (size_t b = 1; b < 9; b++) {
                size_t left = n, k = 0;
                for (size_t take = f; left; take = b, k++)
                    left -= take < left ? take : left;
                ck_assert_int_eq(ddp_bucket_count(n, f, b), (int)k);
            }
    ck_assert_int_ne(ddp_create(&d, NULL, &p, 0, 12), 0);     /* a bucket of 0 bytes */
    nn_params_fini(&p);
}
END_TEST

START_TEST(ddp_launch_rule)
{
    nn_params p;
    small_params(&p);
    ddp *d;
    ck_assert_int_eq(ddp_create(&d, NULL, &p, 32, 12), 0);
    ddp_begin(d);
    int ready[4] = {0};
    for (int t = 3; t >= 0; t--) {
        ck_assert_int_eq(ddp_grad_ready(d, t), 0);
        ready[t] = 1;
        /* a bucket is launched exactly when every tensor overlapping it is ready */
        for (int k = 0; k < d->nbuckets; k++) {
            int all = 1;
            for (int u = 0; u < 4; u++) {
                size_t lo = p.t[u].offset, hi = lo + p.t[u].numel;
                if (lo < d->b[k].off + d->b[k].n && hi > d->b[k].off)
                    all &= ready[u];
            }
            ck_assert_msg(d->b[k].launched == all, "after tensor %d: bucket %d launched %d, "
                          "ready %d", t, k, d->b[k].launched, all);
        }
    }
    for (int k = 0; k < d->nbuckets; k++)
        ck_assert_int_eq(d->launch_order[k], k);
    ck_assert_int_eq(ddp_finish(d), 0);
    ck_assert_int_eq(d->late, 0);
    ddp_free(d);
    nn_params_fini(&p);
}
END_TEST

/* Each rank writes tensor t's gradient (values depending on rank), then says it is ready; the
 * engine must produce the average on every rank, with one all-reduce per bucket. */
static int average_rank(mlsys_comm *c, void *arg)
{
    (void)arg;
    int r = mlsys_rank(c), N = mlsys_size(c), bad = 0;
    nn_params p;
    small_params(&p);
    ddp *d;
    if (ddp_create(&d, c, &p, 32, 12))
        return 1;
    for (int step = 0; step < 3; step++) {
        uint64_t calls0 = mlsys_get_counters(c)->coll_calls[MLSYS_COLL_ALLREDUCE];
        ddp_begin(d);
        for (int t = 3; t >= 0; t--) {
            for (size_t i = 0; i < p.t[t].numel; i++)
                p.t[t].grad[i] = (float)((r + 1) * (int)(p.t[t].offset + i + 1) + step);
            usleep(2000);       /* give an early launch the time to read stale values */
            if (ddp_grad_ready(d, t))
                return 1;
        }
        if (ddp_finish(d))
            return 1;
        for (size_t i = 0; i < p.numel; i++) {
            double want = 0;
            for (int q = 0; q < N; q++)
                want += (q + 1) * (double)(i + 1) + step;
            want /= N;
            if (fabs(p.grad[i] - want) > 1e-5 * fabs(want))
                bad++;
        }
        if (mlsys_get_counters(c)->coll_calls[MLSYS_COLL_ALLREDUCE] - calls0 !=
            (uint64_t)d->nbuckets)
            bad++;
    }
    ddp_free(d);
    nn_params_fini(&p);
    return bad ? 1 : 0;
}

START_TEST(ddp_average)
{
    char why[256] = "";
    int rc = mlsys_run_fn(_i, 20000, average_rank, NULL, why, sizeof why);
    ck_assert_msg(rc == 0, "N = %d: %s", _i, why);
}
END_TEST

static Suite *ch05_suite(void)
{
    Suite *s = suite_create("ch05");
    TCase *tc = tcase_create("labs");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, simple_ddp_checks, 1, 5);
    tcase_add_test(tc, simple_ddp_bucket_count);
    tcase_add_test(tc, simple_ddp_epochs);
    tcase_add_loop_test(tc, simple_ddp_loss_all_ranks, 1, 4);
    tcase_add_loop_test(tc, simple_ddp_times, 2, 5);
    tcase_add_test(tc, simple_ddp_sweep);
    tcase_add_test(tc, lines_fit_80_columns);
    tcase_add_loop_test(tc, simple_ddp_zero, 0, (int)(sizeof zero_cases / sizeof zero_cases[0]));
    tcase_add_loop_test(tc, visualizer, 1, 5);
    tcase_add_loop_test(tc, bad_input, 0, 5);
    suite_add_tcase(s, tc);
    TCase *te = tcase_create("engine");
    tcase_set_timeout(te, 60);
    tcase_add_test(te, ddp_layout);
    tcase_add_test(te, ddp_launch_rule);
    tcase_add_loop_test(te, ddp_average, 1, 5);
    suite_add_tcase(s, te);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(ch05_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
