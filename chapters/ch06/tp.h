/* tp.h - tensor-parallel building blocks that chapter 6's labs share: carving distinct
 * per-rank shards out of one full seeded matrix, Megatron's two conjugate operators f and g,
 * column- and row-parallel linear layers, the Megatron MLP and the head-split causal
 * self-attention block, each as a forward/backward pair. Weights are stored [in, out] and
 * used as y = x·W, so "column-parallel" really splits W's columns. */
#ifndef CH06_TP_H
#define CH06_TP_H

#include "../../core/mlsys.h"
#include <stddef.h>
#include <stdint.h>

/* Shape legend: B rows of a batch (B·S tokens when a sequence is flattened), S sequence
 * length, H hidden size, I = 4H the MLP's inner size, T the TP degree, r the rank in the TP
 * group, NH attention heads, d = H/NH the head size. */

/* ---- sharding and full matrices ---- */
/* w[rows, cols] = Xavier uniform U(-a, a), a = √(6/(rows + cols)), from a generator seeded
 * with seed: every rank that calls it with the same seed gets the same full matrix. */
void tp_fill_xavier(float *w, int rows, int cols, uint64_t seed);
/* x[n] = normal(0, 1) from seed. */
void tp_fill_normal(float *x, size_t n, uint64_t seed);
/* dst[rows, cols/T] = columns [r·cols/T, (r+1)·cols/T) of full[rows, cols]. */
void tp_shard_cols(float *dst, const float *full, int rows, int cols, int T, int r);
/* dst[rows/T, cols] = rows [r·rows/T, (r+1)·rows/T) of full[rows, cols] (one copy). */
void tp_shard_rows(float *dst, const float *full, int rows, int cols, int T, int r);
/* full[rows, cols] from T column blocks laid one after another, as all_gather returns them:
 * parts = [T][rows, cols/T]. */
void tp_concat_cols(float *full, const float *parts, int rows, int cols, int T);
/* How far a result a is from its reference b: the largest |a - b| (NaN counts as infinite)
 * and the largest |b|, so a check can scale its tolerance to the numbers' size. */
typedef struct tp_diff {
    double abs;         /* max |a - b| */
    double mag;         /* max |b| */
} tp_diff;
tp_diff tp_max_diff(const float *a, const float *b, size_t n);
/* The same where b is a column block [rows, w] inside a wider matrix of row stride ldb. */
tp_diff tp_max_diff_strided(const float *a, const float *b, int rows, int w, int ldb);

/* ---- the operators f and g (Megatron-LM, section 3) ---- */
/* f sits in front of a column-parallel layer: identity forward (every rank already holds the
 * whole x), all-reduce of the input gradient in backward. g sits after a row-parallel layer:
 * all-reduce of the partial outputs in forward, identity in backward. c may be NULL or of
 * size 1: then there is nothing to reduce. Each returns an MLSYS_* code. */
int tp_f_backward(mlsys_comm *c, float *dx, size_t n);
int tp_g_forward(mlsys_comm *c, float *y, size_t n);

/* ---- column- and row-parallel linear layers (local compute only) ---- */
/* Column: W_r [in, out/T]. y_r[B, out/T] = x[B, in] · W_r. */
void tp_column_forward(float *y_r, const float *x, const float *w_r, int B, int in, int out_r);
/* dW_r[in, out/T] = xᵀ·dy_r; dx_part[B, in] = dy_r·W_rᵀ (+= when accumulate, so Q, K and V
 * can add into one buffer). dx_part is a partial sum: f's backward all-reduces it. */
void tp_column_backward(float *dx_part, float *dw_r, const float *dy_r, const float *x,
                        const float *w_r, int B, int in, int out_r, int accumulate);
/* Row: W_r [in/T, out]. y_part[B, out] = x_r[B, in/T] · W_r, a partial sum that g's forward
 * all-reduces. x_r is read with row stride ldx (in/T for a shard of its own, in to read the
 * column block of a full x in place). */
void tp_row_forward(float *y_part, const float *x_r, int ldx, const float *w_r, int B, int in_r,
                    int out);
/* dW_r[in/T, out] = x_rᵀ·dy; dx_r[B, in/T] = dy·W_rᵀ, no communication. */
void tp_row_backward(float *dx_r, float *dw_r, const float *dy, const float *x_r, int ldx,
                     const float *w_r, int B, int in_r, int out);

/* ---- time spent, for the benchmark's t_matmul / t_allreduce split ---- */
typedef struct tp_clock {
    uint64_t compute_ns, comm_ns;
    uint64_t allreduces;        /* calls of f backward / g forward that reduced */
} tp_clock;

/* ---- the Megatron MLP: x → f → column(W1) → GELU → row(W2) → g → y ---- */
typedef struct tp_mlp {
    int H, I, T, r;             /* I = 4H; this rank holds I/T of the inner features */
    int max_rows;               /* the workspaces hold this many rows */
    float *w1;                  /* [H, I/T] columns r·I/T.. of the full W1 */
    float *w2;                  /* [I/T, H] rows r·I/T.. of the full W2 */
    float *dw1, *dw2;           /* same shapes: written by backward */
    float *h;                   /* [max_rows, I/T] pre-activation x·W1_r (kept for GELU') */
    float *a;                   /* [max_rows, I/T] GELU(h) (kept for dW2) */
    float *da;                  /* [max_rows, I/T] gradient of a, then of h */
    tp_clock clk;
} tp_mlp;

/* Carve rank r's shards from the full w1[H, I] and w2[I, H] (I = 4H, I % T == 0). */
void tp_mlp_init(tp_mlp *m, const float *w1_full, const float *w2_full, int H, int T, int r,
                 int max_rows);
void tp_mlp_free(tp_mlp *m);
/* y[B, H] = Σ_r GELU(x·W1_r)·W2_r, all-reduced over c: the same y on every rank. One
 * all-reduce. Emits compute spans "col GEMM", "GELU", "row GEMM". */
int tp_mlp_forward(mlsys_comm *c, tp_mlp *m, const float *x, float *y, int B);
/* From dy[B, H] (the same on every rank): dW2_r, dW1_r and dx[B, H] (all-reduced: one
 * all-reduce). Needs the activations of the last forward of the same x. */
int tp_mlp_backward(mlsys_comm *c, tp_mlp *m, const float *x, const float *dy, float *dx,
                    int B);

/* ---- causal self-attention with heads split across ranks ----
 * Q, K, V = x·Wq_r, x·Wk_r, x·Wv_r (column-parallel: rank r owns heads r·NH/T ..), softmax
 * of QKᵀ/√d under a causal mask per head, O_r = P·V, y = g(O_r·Wo_r) with Wo row-parallel. */
typedef struct tp_attn {
    int H, NH, T, r;
    int hl, d;                  /* heads on this rank (NH/T) and head size (H/NH) */
    int Hl;                     /* hl·d = H/T: this rank's slice of the features */
    int max_b, max_s;
    float *wq, *wk, *wv;        /* [H, H/T] columns of the full [H, H] matrices */
    float *wo;                  /* [H/T, H] rows of the full Wo */
    float *dwq, *dwk, *dwv, *dwo;
    float *q, *k, *v, *o;       /* [B·S, H/T] */
    float *p;                   /* [B, hl, S, S] attention probabilities */
    float *dq, *dk, *dv, *dout; /* [B·S, H/T] */
    float *dp;                  /* [S, S] scratch */
    tp_clock clk;
} tp_attn;

void tp_attn_init(tp_attn *m, const float *wq, const float *wk, const float *wv,
                  const float *wo, int H, int NH, int T, int r, int max_b, int max_s);
void tp_attn_free(tp_attn *m);
/* y[B·S, H] from x[B·S, H], one all-reduce; the same y on every rank. */
int tp_attn_forward(mlsys_comm *c, tp_attn *m, const float *x, float *y, int B, int S);
/* dx[B·S, H] (all-reduced once) and the four local weight gradients, from dy[B·S, H]. */
int tp_attn_backward(mlsys_comm *c, tp_attn *m, const float *x, const float *dy, float *dx,
                     int B, int S);

/* ---- helpers the labs share ---- */
/* All-reduces counted by the runtime on c so far (0 when c is NULL). */
uint64_t tp_allreduce_count(const mlsys_comm *c);
/* Exact GELU and its derivative, elementwise; y may alias x, dx may alias dy. */
void tp_gelu_forward(float *y, const float *x, size_t n);
void tp_gelu_backward(float *dx, const float *dy, const float *x, size_t n);

#endif
