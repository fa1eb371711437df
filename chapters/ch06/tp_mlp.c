/* tp_mlp.c - ch06/tp-mlp: the Megatron MLP block (column-parallel W1, exact GELU,
 * row-parallel W2, one all-reduce) verified forward and backward against the serial MLP,
 * then its communication (formula and runtime counters), a benchmark on real ranks with the
 * matmul/all-reduce split, and what the split saves in memory. Fixed from the original: its
 * verification crashed on a shape mismatch and multiplied W2 by T although the shards it ran
 * were already scaled by 1/T; here shards are distinct blocks of one seeded matrix. */
#include "tp_lab.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define VER_B 4         /* the verification input is [4, 8, H], as in the original */
#define VER_S 8
#define WARMUP 10
#define ITERS 100

static const lab_flag mlp_flags[] = {
    {"tp-size", 't', FLAG_INT, "4", NULL, 1, 64, "TP degree T (ranks); must divide I = 4H"},
    {"hidden-size", 'H', FLAG_INT, "64", NULL, 1, 8192, "hidden size H (I = 4H)"},
    {"batch-size", 0, FLAG_INT, "4", NULL, 1, 1024,
     "batch B of the benchmark input (-b was this; it is --backend wherever ranks run)"},
    {"seq-len", 's', FLAG_INT, "16", NULL, 1, 8192, "sequence length S of the benchmark input"},
    {NULL, 0, 0, NULL, NULL, 0, 0, NULL}
};

static int mlp_before(const lab_args *a)
{
    long T = lab_arg_int(a, "tp-size"), H = lab_arg_int(a, "hidden-size");
    long B = lab_arg_int(a, "batch-size"), S = lab_arg_int(a, "seq-len");
    if ((4 * H) % T != 0) {
        fprintf(stderr, "mlsys-lab: ch06/tp-mlp: the intermediate size I = 4H = %ld does not "
                "divide by --tp-size %ld\n", 4 * H, T);
        return 2;
    }
    /* the largest buffer is a rank's activations [B·S, I/T], and every rank holds W1, W2 */
    double bytes = 4.0 * ((double)B * S * 4 * H + 16.0 * H * H + (double)VER_B * VER_S * 4 * H);
    if (bytes > (double)(1u << 30)) {
        fprintf(stderr, "mlsys-lab: ch06/tp-mlp: B·S·4H = %.0f activations and 8H² weights need "
                "%.1f GiB per rank; keep it under 1 GiB\n", (double)B * S * 4 * H,
                bytes / (1u << 30));
        return 2;
    }
    common_box(stdout, COMMON_BOX_WIDTH, "Tensor parallel MLP");
    printf("TP degree (T): %ld\n", T);
    printf("Hidden size (H): %ld\n", H);
    printf("Intermediate size (I = 4H): %ld\n\n", 4 * H);
    fflush(stdout);
    return -1;
}

static char *shape(char *buf, size_t n, int a, int b, int c)
{
    int d[3] = {a, b, c};
    return common_shape(buf, n, d, c < 0 ? 2 : 3);
}

/* ---- 1. verification ---- */
static int verify(mlsys_comm *c, int H, int *bad)
{
    int r = mlsys_rank(c), T = mlsys_size(c), I = 4 * H, Il = I / T, rows = VER_B * VER_S;
    int rc;
    char s1[48], s2[48], s3[48];
    tp_mlp m;
    float *w1 = tp_fa((size_t)H * I), *w2 = tp_fa((size_t)I * H);
    float *x = tp_fa((size_t)rows * H), *dy = tp_fa((size_t)rows * H);
    float *y = mlsys_alloc_aligned(sizeof(float) * rows * H);
    float *dx = mlsys_alloc_aligned(sizeof(float) * rows * H);
    float *yref = tp_fa((size_t)rows * H), *dxref = tp_fa((size_t)rows * H);
    float *h = tp_fa((size_t)rows * I), *act = tp_fa((size_t)rows * I);
    float *dw1 = tp_fa((size_t)H * I), *dw2 = tp_fa((size_t)I * H);

    mlsys_step(c, 0, "verification");
    common_root_banner(c, 60, "1. Verification");
    tp_fill_normal(x, (size_t)rows * H, 42);
    tp_fill_xavier(w1, H, I, 100);
    tp_fill_xavier(w2, I, H, 101);
    for (size_t i = 0; i < (size_t)I * H; i++)
        w2[i] /= (float)T;          /* the original's 1/T: keeps y's variance after the sum */
    tp_mlp_init(&m, w1, w2, H, T, r, rows);
    mlsys_print_root(c, "x %s (seed 42); W1 %s (seed 100), W2 %s (seed 101) scaled by 1/T\n",
                     shape(s1, sizeof s1, VER_B, VER_S, H), shape(s2, sizeof s2, H, I, -1),
                     shape(s3, sizeof s3, I, H, -1));
    mlsys_print_root(c, "Rank r holds W1_r = columns [r·%d, (r+1)·%d) %s and W2_r = the same "
                     "rows %s\n", Il, Il, shape(s1, sizeof s1, H, Il, -1),
                     shape(s2, sizeof s2, Il, H, -1));
    char list[128];
    if ((rc = mlsys_print_ordered(c, "Rank %d: W1_r[0][0..2] = %s\n", r,
                                  common_list_prec(list, sizeof list, m.w1, Il < 3 ? Il : 3, 4))))
        goto out;

    uint64_t mark = tp_allreduce_count(c);
    if ((rc = tp_mlp_forward(c, &m, x, y, rows)))
        goto out;
    uint64_t fwd = tp_allreduce_count(c) - mark;
    tp_mlp_serial_forward(yref, h, act, x, w1, w2, rows, H, I);
    mlsys_print_root(c, "Forward: y = all_reduce(GELU(x·W1_r)·W2_r) %s, all-reduces: %llu\n",
                     shape(s1, sizeof s1, VER_B, VER_S, H), (unsigned long long)fwd);
    if ((rc = tp_check(c, "y vs GELU(x·W1)·W2, no ×T", s1, tp_max_diff(y, yref, (size_t)rows * H),
                       bad)))
        goto out;
    /* the usual slip: the rebuilt W2 multiplied by T "to undo the 1/T" */
    double orig = 0;
    for (size_t i = 0; i < (size_t)rows * H; i++) {
        double d = fabs((double)y[i] - (double)T * yref[i]);
        orig = d > orig ? d : orig;
    }
    mlsys_print_root(c, "  (a reference with W2 × T:                max |diff| %.1e: %s)\n", orig,
                     T == 1 ? "harmless at T = 1" : "T× too large");
    mlsys_print_root(c, "Multiplying the rebuilt W2 by T \"to undo the 1/T\" is a slip: the "
                     "shards that ran\nwere already scaled, so that reference is T× too large; "
                     "the right one uses W2 as run.\n");

    tp_fill_normal(dy, (size_t)rows * H, 300);
    mark = tp_allreduce_count(c);
    if ((rc = tp_mlp_backward(c, &m, x, dy, dx, rows)))
        goto out;
    uint64_t bwd = tp_allreduce_count(c) - mark;
    tp_mlp_serial_backward(dxref, dw1, dw2, dy, x, h, act, w1, w2, rows, H, I);
    mlsys_print_root(c, "Backward from dy %s (seed 300), all-reduces: %llu\n",
                     shape(s1, sizeof s1, VER_B, VER_S, H), (unsigned long long)bwd);
    if ((rc = tp_check(c, "dW1_r vs columns of the serial dW1", shape(s1, sizeof s1, H, Il, -1),
                       tp_max_diff_strided(m.dw1, dw1 + (size_t)r * Il, H, Il, I), bad)) ||
        (rc = tp_check(c, "dW2_r vs rows of the serial dW2", shape(s2, sizeof s2, Il, H, -1),
                       tp_max_diff(m.dw2, dw2 + (size_t)r * Il * H, (size_t)Il * H), bad)) ||
        (rc = tp_check(c, "dx = all_reduce(dh_r·W1_rᵀ) vs serial dx",
                       shape(s3, sizeof s3, VER_B, VER_S, H),
                       tp_max_diff(dx, dxref, (size_t)rows * H), bad)))
        goto out;
    mlsys_print_root(c, "All-reduces per MLP: forward %llu, backward %llu (runtime counter)\n\n",
                     (unsigned long long)fwd, (unsigned long long)bwd);
out:
    tp_mlp_free(&m);
    free(w1); free(w2); free(x); free(dy); free(yref); free(dxref); free(h); free(act);
    free(dw1); free(dw2);
    mlsys_free_aligned(y, sizeof(float) * rows * H);
    mlsys_free_aligned(dx, sizeof(float) * rows * H);
    return rc;
}

/* ---- 2. communication: the formula, then what the ring really sent ---- */
static int analysis(mlsys_comm *c, tp_mlp *m, const float *x, float *y, float *dy, float *dx,
                    int B, int S, const char *algo)
{
    int T = mlsys_size(c), H = m->H, rows = B * S, rc;
    unsigned long long elems = (unsigned long long)rows * H;
    double bytes = 4.0 * (double)elems, ring = tp_ring_bytes_per_gpu(bytes, T);
    char num[32];

    mlsys_step(c, 1, "communication");
    common_root_banner(c, 60, "2. Communication analysis");
    mlsys_print_root(c, "Config: H=%d, B=%d, S=%d, T=%d\n", H, B, S, T);
    mlsys_print_root(c, "All-reduces per MLP forward: 1 (and 1 in backward)\n");
    mlsys_print_root(c, "Elements per all-reduce: B·S·H = %s\n",
                     tp_thousands(num, sizeof num, elems));
    mlsys_print_root(c, "Bytes per all-reduce: %.1f KB (FP32, 1 KB = 1024 B)\n", bytes / 1024);
    mlsys_print_root(c, "Ring volume per GPU: 2·bytes·(T−1)/T = %.1f KB\n", ring / 1024);
    mlsys_print_root(c, "Total over %d GPU%s: %.1f KB\n", T, T == 1 ? "" : "s", ring * T / 1024);
    mlsys_print_root(c, "Non-TP MLP: 0 bytes, but every GPU must hold all of W1 and W2\n");

    /* one forward and one backward, with the bytes each rank sent counted by the runtime */
    uint64_t s0 = mlsys_get_counters(c)->bytes_sent;
    if ((rc = tp_mlp_forward(c, m, x, y, rows)))
        return rc;
    uint64_t s1 = mlsys_get_counters(c)->bytes_sent;
    tp_fill_normal(dy, (size_t)rows * H, 300);
    if ((rc = tp_mlp_backward(c, m, x, dy, dx, rows)))
        return rc;
    uint64_t s2 = mlsys_get_counters(c)->bytes_sent;
    int64_t mine[2] = {(int64_t)(s1 - s0), (int64_t)(s2 - s1)};
    int64_t *all = mlsys_xmalloc(sizeof *all * 2 * (size_t)T);
    if ((rc = mlsys_allgather(c, mine, all, 2, MLSYS_I64))) {
        free(all);
        return rc;
    }
    if (mlsys_rank(c) == 0) {
        int64_t lo = all[0], hi = all[0];
        for (int i = 0; i < 2 * T; i++) {
            lo = all[i] < lo ? all[i] : lo;
            hi = all[i] > hi ? all[i] : hi;
        }
        int exact = lo == hi && (double)lo == ring;
        char got[64];
        if (lo == hi)
            snprintf(got, sizeof got, "%.1f KB", (double)lo / 1024);
        else
            snprintf(got, sizeof got, "%.1f to %.1f KB", (double)lo / 1024, (double)hi / 1024);
        mlsys_print_root(c, "Measured (runtime counters, all-reduce algorithm %s): each GPU "
                         "sent %s\nin the forward's all-reduce and again in the backward's: %s\n",
                         algo, got, exact ? "matches the formula" :
                         "differs from the ring formula (another algorithm, or B·S·H not a "
                         "multiple of T)");
    }
    free(all);
    mlsys_print_root(c, "With TP the model can be T× larger per GPU, at the price of this "
                     "traffic in every layer.\n\n");
    return MLSYS_OK;
}

/* ---- 3. benchmark ---- */
static int benchmark(mlsys_comm *c, tp_mlp *m, const float *x, float *y, int B, int S)
{
    int T = mlsys_size(c), H = m->H, rows = B * S, rc;
    char s1[48];
    mlsys_step(c, 2, "benchmark");
    common_root_banner(c, 60, "3. Benchmark");
    mlsys_print_root(c, "x %s (seed 42), %d warm-up forwards, then %d timed (forward + barrier)"
                     "\n", shape(s1, sizeof s1, B, S, H), WARMUP, ITERS);
    for (int i = 0; i < WARMUP; i++)
        if ((rc = tp_mlp_forward(c, m, x, y, rows)) || (rc = mlsys_barrier(c)))
            return rc;
    if ((rc = mlsys_barrier(c)))
        return rc;
    memset(&m->clk, 0, sizeof m->clk);
    uint64_t mark = tp_allreduce_count(c);
    double t0 = mlsys_now_s();
    for (int i = 0; i < ITERS; i++)
        if ((rc = tp_mlp_forward(c, m, x, y, rows)) || (rc = mlsys_barrier(c)))
            return rc;
    double per = (mlsys_now_s() - t0) / ITERS * 1e3;
    uint64_t ars = tp_allreduce_count(c) - mark;
    double t_mm = (double)m->clk.compute_ns / ITERS / 1e6;
    double t_ar = (double)m->clk.comm_ns / ITERS / 1e6;
    double pct = t_mm + t_ar > 0 ? t_ar / (t_mm + t_ar) * 100.0 : 0.0;
    mlsys_print_root(c, "Mean time per iteration: %.3f ms, output %s\n", per,
                     shape(s1, sizeof s1, B, S, H));
    mlsys_print_root(c, "t_matmul:    %.5f ms per forward (2 GEMMs + GELU, on rank 0)\n", t_mm);
    mlsys_print_root(c, "t_allreduce: %.5f ms per forward (on rank 0)\n", t_ar);
    mlsys_print_root(c, "comm%%:       %.1f %% = t_allreduce / (t_matmul + t_allreduce)\n", pct);
    mlsys_print_root(c, "All-reduces in the %d timed forwards: %llu (%s)\n", ITERS,
                     (unsigned long long)ars, T == 1 ? "T = 1: nothing to sum" : "1 per forward");
    mlsys_print_root(c, "%s\n\n", T == 1 ? "One rank: no communication at all." :
                     "These ranks share this machine's cores and the all-reduce is a memory "
                     "copy. On GPUs\nthe split depends on the layer's width: all-reduce / GEMM "
                     "≈ (T−1)·F / (4·H·B_link)\n(chapter 6).");
    return MLSYS_OK;
}

/* ---- 4. what the split saves ---- */
static void scaling(mlsys_comm *c, int H, int T)
{
    char a[32], b[32];
    unsigned long long full = 8ull * H * H;
    common_root_banner(c, 60, "4. Memory per GPU");
    mlsys_print_root(c, "Without TP: W1 and W2 hold 4H² each, 8H² = %s parameters (%.1f KB FP32)"
                     "\n", tp_thousands(a, sizeof a, full), full * 4.0 / 1024);
    mlsys_print_root(c, "With TP = %d: 8H²/T = %s per GPU (%.1f KB)\n", T,
                     tp_thousands(b, sizeof b, full / (unsigned)T), full * 4.0 / T / 1024);
    double big = 8.0 * 4096 * 4096;
    mlsys_print_root(c, "Example H=4096, T=8: %.1fM parameters (%.1f MB FP32) become %.1fM "
                     "(%.1f MB) per GPU\n(1 MB = 10⁶ B)\n", big / 1e6, big * 4 / 1e6,
                     big / 8 / 1e6, big * 4 / 8 / 1e6);
}

static int mlp_rank(mlsys_comm *c, const lab_args *a)
{
    long T = lab_arg_int(a, "tp-size");
    int H = (int)lab_arg_int(a, "hidden-size"), B = (int)lab_arg_int(a, "batch-size");
    int S = (int)lab_arg_int(a, "seq-len"), r = mlsys_rank(c), bad = 0, rc;
    if (!tp_rank_size_ok(c, T, "ch06/tp-mlp"))
        return 2;
    const char *algo = tp_use_ring(c, a);
    mlsys_print_root(c, "All-reduce algorithm: %s\n\n", algo);
    size_t rows = (size_t)B * S, I = 4 * (size_t)H;
    tp_mlp m;
    float *w1 = tp_fa((size_t)H * I), *w2 = tp_fa(I * H), *x = tp_fa(rows * H);
    float *dy = tp_fa(rows * H);
    float *y = mlsys_alloc_aligned(sizeof(float) * rows * H);
    float *dx = mlsys_alloc_aligned(sizeof(float) * rows * H);
    memset(&m, 0, sizeof m);
    if ((rc = verify(c, H, &bad)))
        goto err;
    /* a block for the [B, S, H] input (the original built a fresh one with unseeded weights;
     * values do not change the traffic or the time) */
    tp_fill_xavier(w1, H, (int)I, 7);
    tp_fill_xavier(w2, (int)I, H, 8);
    for (size_t i = 0; i < I * H; i++)
        w2[i] /= (float)T;
    tp_mlp_init(&m, w1, w2, H, (int)T, r, (int)rows);
    tp_fill_normal(x, rows * H, 42);
    if ((rc = analysis(c, &m, x, y, dy, dx, B, S, algo)) || (rc = benchmark(c, &m, x, y, B, S)))
        goto err;
    scaling(c, H, (int)T);
    if ((rc = mlsys_barrier(c)))
        goto err;
    mlsys_print_root(c, "\n%s\n", bad ? "Some checks FAILED" : "All checks correct");
    rc = bad ? 1 : 0;
    goto out;
err:
    fprintf(stderr, "rank %d: %s\n", r, mlsys_errmsg(c));
    rc = 1;
out:
    tp_mlp_free(&m);
    free(w1); free(w2); free(x); free(dy);
    mlsys_free_aligned(y, sizeof(float) * rows * H);
    mlsys_free_aligned(dx, sizeof(float) * rows * H);
    return rc;
}

const lab ch06_tp_mlp_lab = {
    .id = "ch06/tp-mlp",
    .title = "Megatron MLP",
    .summary = "the tensor-parallel MLP: verified, its all-reduce measured, benchmarked",
    .flags = mlp_flags,
    .port = 29509,
    .ranks_flag = "tp-size",
    .min_ranks = 1,
    .max_ranks = 64,
    .before = mlp_before,
    .rank_main = mlp_rank,
    .view = "ring",
};
