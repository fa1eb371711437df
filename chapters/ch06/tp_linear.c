/* tp_linear.c - ch06/tp-linear: a column-parallel layer, a row-parallel layer and the
 * Megatron pattern (column → GELU → row, one all-reduce), forward and backward, each checked
 * against the serial layer within 1e-5. Fixed from the original: the shards are carved from
 * one full seeded matrix, so each rank holds a different block (the original seeded every
 * rank alike); the Megatron demo uses the exact GELU its text names (the original ran ReLU).
 * Weights are stored [in, out] and used as y = x·W. The matrices are 8 wide, so the lab
 * multiplies with the reference GEMM kernel: its additions run in one fixed order on every
 * machine, and the differences it prints are the same everywhere (an exercise checks them). */
#include "tp_lab.h"
#include "../../core/nn/nn.h"
#include <stdlib.h>
#include <string.h>

#define LIN_B 4         /* rows of x */
#define LIN_IN 8        /* in = out = 8 for parts A and B, H = 8 in part C */
#define MEG_I 32        /* Megatron's inner size 4H */

static const lab_flag linear_flags[] = {
    {"tp-size", 't', FLAG_INT, "4", NULL, 1, 8, "TP degree T (ranks): 1, 2, 4 or 8"},
    {NULL, 0, 0, NULL, NULL, 0, 0, NULL}
};

static int linear_before(const lab_args *a)
{
    long T = lab_arg_int(a, "tp-size");
    if (T < 1 || 8 % T != 0) {
        fprintf(stderr, "mlsys-lab: ch06/tp-linear: --tp-size %ld must divide the layer width "
                "8: use 1, 2, 4 or 8\n", T);
        return 2;
    }
    common_box(stdout, COMMON_BOX_WIDTH, "Tensor parallel linear layers");
    printf("TP degree (T): %ld\n", T);
    printf("Weights are stored [in, out] and used as y = x·W; every rank builds the same full\n"
           "seeded matrix and keeps only its own block of it.\n\n");
    fflush(stdout);
    return -1;
}

static char *shape2(char *buf, size_t n, int a, int b)
{
    int d[2] = {a, b};
    return common_shape(buf, n, d, 2);
}

/* Each rank prints the first row of its shard: different numbers on different ranks. */
static int show_shards(mlsys_comm *c, const char *what, const float *w_r, int cols)
{
    char list[256];
    return mlsys_print_ordered(c, "Rank %d: %s first row %s\n", mlsys_rank(c), what,
                               common_list_prec(list, sizeof list, w_r, (size_t)cols, 3));
}

/* The all-reduces this rank made since *mark, and a new mark. */
static uint64_t allreduces_since(mlsys_comm *c, uint64_t *mark)
{
    uint64_t now = tp_allreduce_count(c), d = now - *mark;
    *mark = now;
    return d;
}

/* ---- A. column-parallel ---- */
static int part_column(mlsys_comm *c, int *bad)
{
    int r = mlsys_rank(c), T = mlsys_size(c), B = LIN_B, in = LIN_IN, out = LIN_IN;
    int w = out / T, rc = MLSYS_OK;
    char s1[32], s2[32], s3[32];
    float *W = tp_fa(in * out), *w_r = tp_fa(in * w);
    float *parts = tp_fa(in * out), *recon = tp_fa(in * out);
    float *x = tp_fa(B * in), *y_r = tp_fa(B * w);
    float *ys = tp_fa(B * out), *y = tp_fa(B * out);
    float *yref = tp_fa(B * out), *dy = tp_fa(B * out);
    float *dy_r = tp_fa(B * w), *dw_r = tp_fa(in * w);
    float *dx = mlsys_alloc_aligned(sizeof(float) * B * in), *dxref = tp_fa(B * in);
    float *dwref = tp_fa(in * out);

    mlsys_step(c, 0, "column-parallel");
    common_root_banner(c, 60, "A. Column-parallel linear (B=4, in=8, out=8)");
    tp_fill_xavier(W, in, out, 42);
    tp_shard_cols(w_r, W, in, out, T, r);
    mlsys_print_root(c, "W [8, 8] Xavier from seed 42; rank r keeps columns [r·%d, (r+1)·%d): "
                     "W_r %s\n", w, w, shape2(s1, sizeof s1, in, w));
    if ((rc = show_shards(c, "W_r", w_r, w)))
        goto out;
    if ((rc = mlsys_allgather(c, w_r, parts, (size_t)in * w, MLSYS_F32)))
        goto out;
    tp_concat_cols(recon, parts, in, out, T);
    mlsys_print_root(c, "Shapes: local %s, reconstructed %s, full %s\n",
                     shape2(s1, sizeof s1, in, w), shape2(s2, sizeof s2, in, out),
                     shape2(s3, sizeof s3, in, out));
    if ((rc = tp_check(c, "[W_0 | … | W_T-1] = W (all_gather)", s3,
                       tp_max_diff(recon, W, (size_t)in * out), bad)))
        goto out;

    /* forward: f is the identity (x is on every rank), no communication */
    tp_fill_normal(x, (size_t)B * in, 123);
    uint64_t mark = tp_allreduce_count(c);
    tp_column_forward(y_r, x, w_r, B, in, w);
    uint64_t fwd = allreduces_since(c, &mark);
    if ((rc = mlsys_allgather(c, y_r, ys, (size_t)B * w, MLSYS_F32)))
        goto out;
    tp_concat_cols(y, ys, B, out, T);
    tp_column_forward(yref, x, W, B, in, out);
    mlsys_print_root(c, "Forward: x %s (seed 123) · W_r → y_r %s; all_gather → y %s\n",
                     shape2(s1, sizeof s1, B, in), shape2(s2, sizeof s2, B, w),
                     shape2(s3, sizeof s3, B, out));
    if ((rc = tp_check(c, "y = [x·W_0 | … ] vs x·W", s3, tp_max_diff(y, yref, (size_t)B * out),
                       bad)))
        goto out;

    /* backward: each rank's dy is its columns of dy; dx needs f's all-reduce */
    tp_fill_normal(dy, (size_t)B * out, 300);
    tp_shard_cols(dy_r, dy, B, out, T, r);
    mark = tp_allreduce_count(c);
    tp_column_backward(dx, dw_r, dy_r, x, w_r, B, in, w, 0);
    if ((rc = tp_f_backward(c, dx, (size_t)B * in)))
        goto out;
    uint64_t bwd = allreduces_since(c, &mark);
    tp_column_backward(dxref, dwref, dy, x, W, B, in, out, 0);
    mlsys_print_root(c, "Backward: dy %s (seed 300), rank r uses its columns dy_r %s\n",
                     shape2(s1, sizeof s1, B, out), shape2(s2, sizeof s2, B, w));
    if ((rc = tp_check(c, "dW_r = xᵀ·dy_r vs columns of xᵀ·dy", shape2(s1, sizeof s1, in, w),
                       tp_max_diff_strided(dw_r, dwref + (size_t)r * w, in, w, out), bad)) ||
        (rc = tp_check(c, "dx = all_reduce(dy_r·W_rᵀ) vs dy·Wᵀ", shape2(s2, sizeof s2, B, in),
                       tp_max_diff(dx, dxref, (size_t)B * in), bad)))
        goto out;
    mlsys_print_root(c, "All-reduces in the layer: forward %llu, backward %llu (f: dx is a sum "
                     "over the output columns)\n\n", (unsigned long long)fwd,
                     (unsigned long long)bwd);
out:
    free(W); free(w_r); free(parts); free(recon); free(x); free(y_r); free(ys); free(y);
    free(yref); free(dy); free(dy_r); free(dw_r); free(dxref); free(dwref);
    mlsys_free_aligned(dx, sizeof(float) * B * in);
    return rc;
}

/* ---- B. row-parallel ---- */
static int part_row(mlsys_comm *c, int *bad)
{
    int r = mlsys_rank(c), T = mlsys_size(c), B = LIN_B, in = LIN_IN, out = LIN_IN;
    int h = in / T, rc = MLSYS_OK;
    char s1[32], s2[32], s3[32];
    float *W = tp_fa(in * out), *w_r = tp_fa(h * out);
    float *recon = tp_fa(in * out);
    float *x = tp_fa(B * in), *x_r = tp_fa(B * h);
    float *y = mlsys_alloc_aligned(sizeof(float) * B * out), *yref = tp_fa(B * out);
    float *dy = tp_fa(B * out), *dw_r = tp_fa(h * out);
    float *dx_r = tp_fa(B * h), *dxref = tp_fa(B * in);
    float *dwref = tp_fa(in * out);

    mlsys_step(c, 1, "row-parallel");
    common_root_banner(c, 60, "B. Row-parallel linear (B=4, in=8, out=8)");
    tp_fill_xavier(W, in, out, 42);
    tp_shard_rows(w_r, W, in, out, T, r);
    tp_fill_normal(x, (size_t)B * in, 123);
    tp_shard_cols(x_r, x, B, in, T, r);
    mlsys_print_root(c, "W [8, 8] from seed 42; rank r keeps rows [r·%d, (r+1)·%d): W_r %s\n",
                     h, h, shape2(s1, sizeof s1, h, out));
    if ((rc = show_shards(c, "W_r", w_r, out)))
        goto out;
    mlsys_print_root(c, "x_full %s (seed 123); rank r keeps its columns x_r %s: a row-parallel "
                     "layer takes split input\n", shape2(s1, sizeof s1, B, in),
                     shape2(s2, sizeof s2, B, h));

    uint64_t mark = tp_allreduce_count(c);
    tp_row_forward(y, x_r, h, w_r, B, h, out);
    if ((rc = tp_g_forward(c, y, (size_t)B * out)))
        goto out;
    uint64_t fwd = allreduces_since(c, &mark);
    if ((rc = mlsys_allgather(c, w_r, recon, (size_t)h * out, MLSYS_F32)))
        goto out;
    tp_column_forward(yref, x, W, B, in, out);
    if ((rc = tp_check(c, "[W_0; … ; W_T-1] = W (all_gather)", shape2(s3, sizeof s3, in, out),
                       tp_max_diff(recon, W, (size_t)in * out), bad)) ||
        (rc = tp_check(c, "y = all_reduce(x_r·W_r) vs x·W", shape2(s3, sizeof s3, B, out),
                       tp_max_diff(y, yref, (size_t)B * out), bad)))
        goto out;

    /* backward: g's backward is the identity; no communication at all */
    tp_fill_normal(dy, (size_t)B * out, 301);
    mark = tp_allreduce_count(c);
    tp_row_backward(dx_r, dw_r, dy, x_r, h, w_r, B, h, out);
    uint64_t bwd = allreduces_since(c, &mark);
    tp_column_backward(dxref, dwref, dy, x, W, B, in, out, 0);
    mlsys_print_root(c, "Backward: dy %s (seed 301), the same on every rank\n",
                     shape2(s1, sizeof s1, B, out));
    if ((rc = tp_check(c, "dW_r = x_rᵀ·dy vs rows of xᵀ·dy", shape2(s1, sizeof s1, h, out),
                       tp_max_diff(dw_r, dwref + (size_t)r * h * out, (size_t)h * out), bad)) ||
        (rc = tp_check(c, "dx_r = dy·W_rᵀ vs columns of dy·Wᵀ", shape2(s2, sizeof s2, B, h),
                       tp_max_diff_strided(dx_r, dxref + (size_t)r * h, B, h, in), bad)))
        goto out;
    mlsys_print_root(c, "All-reduces in the layer: forward %llu (g: the partial outputs are "
                     "summed), backward %llu\n\n", (unsigned long long)fwd,
                     (unsigned long long)bwd);
out:
    free(W); free(w_r); free(recon); free(x); free(x_r); free(yref); free(dy); free(dw_r);
    free(dx_r); free(dxref); free(dwref);
    mlsys_free_aligned(y, sizeof(float) * B * out);
    return rc;
}

/* ---- C. the Megatron pattern ---- */
static int part_megatron(mlsys_comm *c, int *bad)
{
    int r = mlsys_rank(c), T = mlsys_size(c), B = LIN_B, H = LIN_IN, I = MEG_I, Il = I / T;
    int rc = MLSYS_OK;
    char s1[32], s2[32];
    tp_mlp m;
    float *w1 = tp_fa(H * I), *w2 = tp_fa(I * H);
    float *x = tp_fa(B * H), *y = mlsys_alloc_aligned(sizeof(float) * B * H);
    float *all = tp_fa(B * H * T), *dy = tp_fa(B * H);
    float *dx = mlsys_alloc_aligned(sizeof(float) * B * H);
    float *yref = tp_fa(B * H), *h = tp_fa(B * I);
    float *a = tp_fa(B * I), *dxref = tp_fa(B * H);
    float *dw1 = tp_fa(H * I), *dw2 = tp_fa(I * H);

    mlsys_step(c, 2, "Megatron MLP");
    common_root_banner(c, 60, "C. Megatron pattern (B=4, H=8, I=32)");
    mlsys_print_root(c, "  1. x [b, H] on every rank → column-parallel W1_r → [b, 4H/T] (f: "
                     "identity)\n"
                     "  2. GELU on the local slice: no communication (exact GELU, element by "
                     "element,\n     so a rank's slice needs nothing from the others)\n"
                     "  3. row-parallel W2_r → partial [b, H] → one all-reduce (g) → y [b, H]\n");
    tp_fill_xavier(w1, H, I, 42);
    tp_fill_xavier(w2, I, H, 142);
    tp_mlp_init(&m, w1, w2, H, T, r, B);
    tp_fill_normal(x, (size_t)B * H, 200);
    mlsys_print_root(c, "W1 [8, 32] (seed 42) → W1_r %s; W2 [32, 8] (seed 142) → W2_r %s\n",
                     shape2(s1, sizeof s1, H, Il), shape2(s2, sizeof s2, Il, H));
    uint64_t mark = tp_allreduce_count(c);
    if ((rc = tp_mlp_forward(c, &m, x, y, B)))
        goto out;
    uint64_t fwd = allreduces_since(c, &mark);
    mlsys_print_root(c, "Column: input %s → output [b, 4H/T] = %s; row: %s → %s\n",
                     shape2(s1, sizeof s1, B, H), shape2(s2, sizeof s2, B, Il), s2, s1);
    tp_mlp_serial_forward(yref, h, a, x, w1, w2, B, H, I);
    if ((rc = mlsys_allgather(c, y, all, (size_t)B * H, MLSYS_F32)))
        goto out;
    tp_diff same = {0, 0};
    for (int q = 0; q < T; q++) {
        tp_diff d = tp_max_diff(all + (size_t)q * B * H, all, (size_t)B * H);
        same.abs = d.abs > same.abs ? d.abs : same.abs;
    }
    if ((rc = tp_check(c, "y identical on every rank", shape2(s1, sizeof s1, B, H), same, bad)) ||
        (rc = tp_check(c, "y vs GELU(x·W1)·W2 (full matrices)", s1,
                       tp_max_diff(y, yref, (size_t)B * H), bad)))
        goto out;

    tp_fill_normal(dy, (size_t)B * H, 301);
    mark = tp_allreduce_count(c);
    if ((rc = tp_mlp_backward(c, &m, x, dy, dx, B)))
        goto out;
    uint64_t bwd = allreduces_since(c, &mark);
    tp_mlp_serial_backward(dxref, dw1, dw2, dy, x, h, a, w1, w2, B, H, I);
    mlsys_print_root(c, "Backward: dy %s (seed 301)\n", shape2(s1, sizeof s1, B, H));
    if ((rc = tp_check(c, "dW1_r vs columns of the serial dW1", shape2(s1, sizeof s1, H, Il),
                       tp_max_diff_strided(m.dw1, dw1 + (size_t)r * Il, H, Il, I), bad)) ||
        (rc = tp_check(c, "dW2_r vs rows of the serial dW2", shape2(s1, sizeof s1, Il, H),
                       tp_max_diff(m.dw2, dw2 + (size_t)r * Il * H, (size_t)Il * H), bad)) ||
        (rc = tp_check(c, "dx = all_reduce(dh_r·W1_rᵀ) vs serial dx",
                       shape2(s1, sizeof s1, B, H), tp_max_diff(dx, dxref, (size_t)B * H), bad)))
        goto out;
    mlsys_print_root(c, "All-reduces: forward %llu, backward %llu (runtime counter)\n",
                     (unsigned long long)fwd, (unsigned long long)bwd);
    mlsys_print_root(c, "Insight: the column output [b, 4H/T] is exactly the row input, so the "
                     "MLP needs one\nall-reduce forward and one backward%s. With attention "
                     "split the same way, a\ntransformer layer makes 4 per training step: 2 "
                     "forward, 2 backward.\n",
                     T == 1 ? " (none at T = 1: one rank has nothing to sum)" : "");
out:
    tp_mlp_free(&m);
    free(w1); free(w2); free(x); free(all); free(dy); free(yref); free(h); free(a);
    free(dxref); free(dw1); free(dw2);
    mlsys_free_aligned(y, sizeof(float) * B * H);
    mlsys_free_aligned(dx, sizeof(float) * B * H);
    return rc;
}

static int linear_rank(mlsys_comm *c, const lab_args *a)
{
    int bad = 0, rc;
    long T = lab_arg_int(a, "tp-size");
    if (!tp_rank_size_ok(c, T, "ch06/tp-linear"))
        return 2;
    const char *algo = tp_use_ring(c, a);
    /* set once, before any multiply: a fixed order of additions, the same on every machine */
    nn_set_gemm_kernel(NN_GEMM_REF);
    mlsys_print_root(c, "All-reduce algorithm: %s\n", algo);
    mlsys_print_root(c, "Matrix multiplies: the reference kernel, whose additions run in the "
                     "same order\non every machine, so every difference printed below is too.\n\n");
    if ((rc = part_column(c, &bad)) || (rc = part_row(c, &bad)) ||
        (rc = part_megatron(c, &bad)) || (rc = mlsys_barrier(c))) {
        fprintf(stderr, "rank %d: %s\n", mlsys_rank(c), mlsys_errmsg(c));
        return 1;
    }
    mlsys_print_root(c, "\n%s\n", bad ? "Some checks FAILED" : "All checks correct");
    return bad ? 1 : 0;
}

const lab ch06_tp_linear_lab = {
    .id = "ch06/tp-linear",
    .title = "Column and row parallel linear layers",
    .summary = "column-, row-parallel layers and the Megatron pattern, forward and backward, "
               "vs serial",
    .flags = linear_flags,
    .port = 29508,
    .ranks_flag = "tp-size",
    .min_ranks = 1,
    .max_ranks = 8,
    .before = linear_before,
    .rank_main = linear_rank,
    .view = "ring",
};
