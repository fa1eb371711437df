/* tp_attention.c - ch06/tp-attention: causal self-attention with its heads split across
 * ranks. Q, K and V are column-parallel (rank r computes only its heads), each head's softmax
 * is local, the output projection is row-parallel and one all-reduce (g) sums it; backward
 * makes one all-reduce too (f, on dx). Checked forward and backward against the serial block
 * within 1e-5. An addition to the original chapter, which only describes this split. */
#include "tp_lab.h"
#include <stdlib.h>
#include <string.h>

static const lab_flag attn_flags[] = {
    {"tp-size", 't', FLAG_INT, "4", NULL, 1, 64, "TP degree T (ranks); must divide --heads"},
    {"hidden-size", 'H', FLAG_INT, "64", NULL, 1, 4096, "hidden size H"},
    {"heads", 0, FLAG_INT, "8", NULL, 1, 256, "attention heads NH; H must divide by NH"},
    {"batch-size", 0, FLAG_INT, "2", NULL, 1, 256,
     "batch B (-b was this; it is --backend wherever ranks run)"},
    {"seq-len", 's', FLAG_INT, "16", NULL, 1, 1024, "sequence length S"},
    {NULL, 0, 0, NULL, NULL, 0, 0, NULL}
};

static int attn_before(const lab_args *a)
{
    long T = lab_arg_int(a, "tp-size"), H = lab_arg_int(a, "hidden-size");
    long NH = lab_arg_int(a, "heads"), B = lab_arg_int(a, "batch-size");
    long S = lab_arg_int(a, "seq-len");
    if (NH % T != 0) {
        fprintf(stderr, "mlsys-lab: ch06/tp-attention: %ld heads do not split evenly over "
                "--tp-size %ld\n", NH, T);
        return 2;
    }
    if (H % NH != 0) {
        fprintf(stderr, "mlsys-lab: ch06/tp-attention: --hidden-size %ld does not divide into "
                "%ld heads\n", H, NH);
        return 2;
    }
    /* the serial reference holds everything: 4 weights [H, H], activations, B·NH·S² probs */
    double floats = 8.0 * H * H + 9.0 * B * S * H + (double)B * NH * S * S + (double)S * S;
    if (2 * floats * 4 > (double)(1u << 30)) {
        fprintf(stderr, "mlsys-lab: ch06/tp-attention: H=%ld, B=%ld, S=%ld, %ld heads need "
                "%.1f GiB per rank; keep it under 1 GiB\n", H, B, S, NH,
                2 * floats * 4 / (1u << 30));
        return 2;
    }
    common_box(stdout, COMMON_BOX_WIDTH, "Tensor parallel attention");
    printf("TP degree (T): %ld\n", T);
    printf("Hidden size (H): %ld, heads: %ld, head size d = H/heads: %ld\n", H, NH, H / NH);
    printf("Heads per rank: %ld\n\n", NH / T);
    fflush(stdout);
    return -1;
}

static char *shape(char *buf, size_t n, int a, int b, int c)
{
    int d[3] = {a, b, c};
    return common_shape(buf, n, d, c < 0 ? 2 : 3);
}

static int attn_rank(mlsys_comm *c, const lab_args *a)
{
    long T = lab_arg_int(a, "tp-size");
    int H = (int)lab_arg_int(a, "hidden-size"), NH = (int)lab_arg_int(a, "heads");
    int B = (int)lab_arg_int(a, "batch-size"), S = (int)lab_arg_int(a, "seq-len");
    int r = mlsys_rank(c), bad = 0, rc = MLSYS_OK, rows = B * S;
    if (!tp_rank_size_ok(c, T, "ch06/tp-attention"))
        return 2;
    const char *algo = tp_use_ring(c, a);
    size_t hh = (size_t)H * H, act = (size_t)rows * H;
    char s1[48], s2[48], s3[48];
    tp_attn m, ref;
    float *wq = tp_fa(hh), *wk = tp_fa(hh), *wv = tp_fa(hh), *wo = tp_fa(hh);
    float *x = tp_fa(act), *dy = tp_fa(act), *yref = tp_fa(act), *dxref = tp_fa(act);
    float *y = mlsys_alloc_aligned(sizeof(float) * act);
    float *dx = mlsys_alloc_aligned(sizeof(float) * act);
    tp_fill_xavier(wq, H, H, 10);
    tp_fill_xavier(wk, H, H, 11);
    tp_fill_xavier(wv, H, H, 12);
    tp_fill_xavier(wo, H, H, 13);
    tp_attn_init(&m, wq, wk, wv, wo, H, NH, (int)T, r, B, S);
    tp_attn_init(&ref, wq, wk, wv, wo, H, NH, 1, 0, B, S);
    tp_fill_normal(x, act, 42);
    int Hl = m.Hl;

    mlsys_print_root(c, "All-reduce algorithm: %s\n\n", algo);
    mlsys_step(c, 0, "verification");
    common_root_banner(c, 60, "1. Heads split across ranks");
    mlsys_print_root(c, "x %s (seed 42); Wq, Wk, Wv, Wo %s Xavier (seeds 10..13)\n",
                     shape(s1, sizeof s1, B, S, H), shape(s2, sizeof s2, H, H, -1));
    mlsys_print_root(c, "Q/K/V column-parallel: rank r keeps the columns of its heads, Wq_r %s;"
                     "\nWo row-parallel: the matching rows, Wo_r %s\n",
                     shape(s1, sizeof s1, H, Hl, -1), shape(s2, sizeof s2, Hl, H, -1));
    if ((rc = mlsys_print_ordered(c, "Rank %d: heads %d..%d, features [%d, %d)\n", r,
                                  r * m.hl, (r + 1) * m.hl - 1, r * Hl, (r + 1) * Hl)))
        goto err;
    mlsys_print_root(c, "Per rank: Q_r, K_r, V_r = x·W_r %s, softmax(Q Kᵀ/√d, causal) V per "
                     "head,\nO_r %s · Wo_r → partial y %s → one all-reduce → y\n",
                     shape(s1, sizeof s1, B, S, Hl), s1, shape(s3, sizeof s3, B, S, H));

    uint64_t mark = tp_allreduce_count(c);
    if ((rc = tp_attn_forward(c, &m, x, y, B, S)))
        goto err;
    uint64_t fwd = tp_allreduce_count(c) - mark;
    tp_attn_forward(NULL, &ref, x, yref, B, S);
    mlsys_print_root(c, "Forward, all-reduces: %llu\n", (unsigned long long)fwd);
    if ((rc = tp_check(c, "y vs serial attention (all heads)", s3,
                       tp_max_diff(y, yref, act), &bad)))
        goto err;

    tp_fill_normal(dy, act, 300);
    mark = tp_allreduce_count(c);
    if ((rc = tp_attn_backward(c, &m, x, dy, dx, B, S)))
        goto err;
    uint64_t bwd = tp_allreduce_count(c) - mark;
    tp_attn_backward(NULL, &ref, x, dy, dxref, B, S);
    mlsys_print_root(c, "Backward from dy %s (seed 300), all-reduces: %llu\n", s3,
                     (unsigned long long)bwd);
    shape(s1, sizeof s1, H, Hl, -1);
    shape(s2, sizeof s2, Hl, H, -1);
    if ((rc = tp_check(c, "dWq_r vs its columns of the serial dWq", s1,
                       tp_max_diff_strided(m.dwq, ref.dwq + (size_t)r * Hl, H, Hl, H), &bad)) ||
        (rc = tp_check(c, "dWk_r vs its columns of the serial dWk", s1,
                       tp_max_diff_strided(m.dwk, ref.dwk + (size_t)r * Hl, H, Hl, H), &bad)) ||
        (rc = tp_check(c, "dWv_r vs its columns of the serial dWv", s1,
                       tp_max_diff_strided(m.dwv, ref.dwv + (size_t)r * Hl, H, Hl, H), &bad)) ||
        (rc = tp_check(c, "dWo_r vs its rows of the serial dWo", s2,
                       tp_max_diff(m.dwo, ref.dwo + (size_t)r * Hl * H, (size_t)Hl * H), &bad)) ||
        (rc = tp_check(c, "dx = all_reduce(Σ dQKV_r·W_rᵀ) vs serial", s3,
                       tp_max_diff(dx, dxref, act), &bad)))
        goto err;
    mlsys_print_root(c, "All-reduces per attention block: forward %llu, backward %llu (runtime "
                     "counter)\n\n", (unsigned long long)fwd, (unsigned long long)bwd);

    mlsys_step(c, 1, "communication");
    common_root_banner(c, 60, "2. Communication");
    double bytes = 4.0 * (double)act, ring = tp_ring_bytes_per_gpu(bytes, (int)T);
    char num[32];
    mlsys_print_root(c, "Elements per all-reduce: B·S·H = %s, %.1f KB (FP32, 1 KB = 1024 B)\n",
                     tp_thousands(num, sizeof num, act), bytes / 1024);
    mlsys_print_root(c, "Ring volume per GPU: 2·bytes·(T−1)/T = %.1f KB, total over %ld GPU%s "
                     "%.1f KB\n", ring / 1024, T, T == 1 ? "" : "s", ring * (double)T / 1024);
    mlsys_print_root(c, "Nothing moves inside the block: each head's softmax needs only its own "
                     "Q, K and V,\nso splitting by heads keeps attention local until Wo.\n");
    mlsys_print_root(c, "A transformer layer = this block + the MLP: 2 all-reduces forward and 2 "
                     "backward,\n4 per layer per training step, whatever T and the head count "
                     "(T must divide the heads).\n");
    if ((rc = mlsys_barrier(c)))
        goto err;
    mlsys_print_root(c, "\n%s\n", bad ? "Some checks FAILED" : "All checks correct");
    rc = bad ? 1 : 0;
    goto out;
err:
    fprintf(stderr, "rank %d: %s\n", r, mlsys_errmsg(c));
    rc = 1;
out:
    tp_attn_free(&m);
    tp_attn_free(&ref);
    free(wq); free(wk); free(wv); free(wo); free(x); free(dy); free(yref); free(dxref);
    mlsys_free_aligned(y, sizeof(float) * act);
    mlsys_free_aligned(dx, sizeof(float) * act);
    return rc;
}

const lab ch06_tp_attention_lab = {
    .id = "ch06/tp-attention",
    .title = "Attention with heads split across ranks",
    .summary = "Q/K/V column-parallel, output row-parallel, one all-reduce, vs serial",
    .flags = attn_flags,
    .port = 29510,
    .ranks_flag = "tp-size",
    .min_ranks = 1,
    .max_ranks = 64,
    .before = attn_before,
    .rank_main = attn_rank,
    .view = "ring",
};
