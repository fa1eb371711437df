/* tp.c - chapter 6's tensor-parallel blocks (see tp.h): sharding, the f/g operators, the
 * column- and row-parallel linear layers, the Megatron MLP and the head-split attention, all
 * as forward/backward pairs on core/nn's GEMM. Compute is wrapped in compute spans and the
 * all-reduces are the runtime's collectives, so the timeline and ring views show both. */
#include "tp.h"
#include "../../core/nn/nn.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- sharding and full matrices ---- */

void tp_fill_xavier(float *w, int rows, int cols, uint64_t seed)
{
    mlsys_rng g;
    mlsys_rng_seed(&g, seed);
    double a = sqrt(6.0 / (double)(rows + cols));
    for (size_t i = 0; i < (size_t)rows * (size_t)cols; i++)
        w[i] = (float)((2.0 * mlsys_rng_uniform(&g) - 1.0) * a);
}

void tp_fill_normal(float *x, size_t n, uint64_t seed)
{
    mlsys_rng g;
    mlsys_rng_seed(&g, seed);
    for (size_t i = 0; i < n; i++)
        x[i] = (float)mlsys_rng_normal(&g);
}

void tp_shard_cols(float *dst, const float *full, int rows, int cols, int T, int r)
{
    int w = cols / T;
    for (int i = 0; i < rows; i++)
        memcpy(dst + (size_t)i * w, full + (size_t)i * cols + (size_t)r * w,
               (size_t)w * sizeof *dst);
}

void tp_shard_rows(float *dst, const float *full, int rows, int cols, int T, int r)
{
    size_t h = (size_t)(rows / T);
    memcpy(dst, full + (size_t)r * h * (size_t)cols, h * (size_t)cols * sizeof *dst);
}

void tp_concat_cols(float *full, const float *parts, int rows, int cols, int T)
{
    int w = cols / T;
    for (int q = 0; q < T; q++)
        for (int i = 0; i < rows; i++)
            memcpy(full + (size_t)i * cols + (size_t)q * w,
                   parts + (size_t)q * rows * w + (size_t)i * w, (size_t)w * sizeof *full);
}

tp_diff tp_max_diff(const float *a, const float *b, size_t n)
{
    tp_diff r = {0, 0};
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]), m = fabs((double)b[i]);
        r.abs = d > r.abs || d != d ? (d != d ? INFINITY : d) : r.abs;
        r.mag = m > r.mag ? m : r.mag;
    }
    return r;
}

tp_diff tp_max_diff_strided(const float *a, const float *b, int rows, int w, int ldb)
{
    tp_diff r = {0, 0};
    for (int i = 0; i < rows; i++) {
        tp_diff d = tp_max_diff(a + (size_t)i * w, b + (size_t)i * ldb, (size_t)w);
        r.abs = d.abs > r.abs ? d.abs : r.abs;
        r.mag = d.mag > r.mag ? d.mag : r.mag;
    }
    return r;
}

/* ---- f and g ---- */

/* The one communication of a TP block: sum the ranks' partial tensors in place. */
static int reduce_partials(mlsys_comm *c, float *buf, size_t n, tp_clock *clk)
{
    if (!c || mlsys_size(c) == 1)
        return MLSYS_OK;
    uint64_t t0 = mlsys_now_ns();
    int rc = mlsys_allreduce(c, buf, buf, n, MLSYS_F32, MLSYS_SUM);
    if (clk) {
        clk->comm_ns += mlsys_now_ns() - t0;
        clk->allreduces++;
    }
    return rc;
}

int tp_f_backward(mlsys_comm *c, float *dx, size_t n)
{
    return reduce_partials(c, dx, n, NULL);
}

int tp_g_forward(mlsys_comm *c, float *y, size_t n)
{
    return reduce_partials(c, y, n, NULL);
}

/* ---- column- and row-parallel linear layers ---- */

void tp_column_forward(float *y_r, const float *x, const float *w_r, int B, int in, int out_r)
{
    nn_gemm(0, 0, B, out_r, in, 1.0f, x, in, w_r, out_r, 0.0f, y_r, out_r);
}

void tp_column_backward(float *dx_part, float *dw_r, const float *dy_r, const float *x,
                        const float *w_r, int B, int in, int out_r, int accumulate)
{
    nn_gemm(1, 0, in, out_r, B, 1.0f, x, in, dy_r, out_r, 0.0f, dw_r, out_r);
    if (dx_part)
        nn_gemm(0, 1, B, in, out_r, 1.0f, dy_r, out_r, w_r, out_r, accumulate ? 1.0f : 0.0f,
                dx_part, in);
}

void tp_row_forward(float *y_part, const float *x_r, int ldx, const float *w_r, int B, int in_r,
                    int out)
{
    nn_gemm(0, 0, B, out, in_r, 1.0f, x_r, ldx, w_r, out, 0.0f, y_part, out);
}

void tp_row_backward(float *dx_r, float *dw_r, const float *dy, const float *x_r, int ldx,
                     const float *w_r, int B, int in_r, int out)
{
    nn_gemm(1, 0, in_r, out, B, 1.0f, x_r, ldx, dy, out, 0.0f, dw_r, out);
    if (dx_r)
        nn_gemm(0, 1, B, in_r, out, 1.0f, dy, out, w_r, out, 0.0f, dx_r, in_r);
}

/* ---- small helpers ---- */

uint64_t tp_allreduce_count(const mlsys_comm *c)
{
    return c ? mlsys_get_counters(c)->coll_calls[MLSYS_COLL_ALLREDUCE] : 0;
}

/* Exact GELU: x·Φ(x) = x/2·(1 + erf(x/√2)); its derivative Φ(x) + x·φ(x). Local to this
 * chapter so the blocks do not depend on which activations core/nn has. */
void tp_gelu_forward(float *y, const float *x, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        double v = x[i];
        y[i] = (float)(0.5 * v * (1.0 + erf(v * M_SQRT1_2)));
    }
}

void tp_gelu_backward(float *dx, const float *dy, const float *x, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        double v = x[i];
        double cdf = 0.5 * (1.0 + erf(v * M_SQRT1_2));
        double pdf = exp(-0.5 * v * v) / sqrt(2.0 * M_PI);
        dx[i] = (float)(dy[i] * (cdf + v * pdf));
    }
}

/* Compute spans for the timeline; timed into clk for the benchmark's split. */
static uint64_t span_begin(mlsys_comm *c, const char *label)
{
    if (c)
        mlsys_compute_begin(c, label);
    return mlsys_now_ns();
}

static void span_end(mlsys_comm *c, const char *label, uint64_t t0, tp_clock *clk)
{
    clk->compute_ns += mlsys_now_ns() - t0;
    if (c)
        mlsys_compute_end(c, label);
}

static float *falloc(size_t n)
{
    return mlsys_xcalloc(n ? n : 1, sizeof(float));
}

/* ---- the Megatron MLP ---- */

void tp_mlp_init(tp_mlp *m, const float *w1_full, const float *w2_full, int H, int T, int r,
                 int max_rows)
{
    memset(m, 0, sizeof *m);
    m->H = H;
    m->I = 4 * H;
    m->T = T;
    m->r = r;
    m->max_rows = max_rows;
    int Il = m->I / T;
    m->w1 = falloc((size_t)H * Il);
    m->w2 = falloc((size_t)Il * H);
    m->dw1 = falloc((size_t)H * Il);
    m->dw2 = falloc((size_t)Il * H);
    m->h = falloc((size_t)max_rows * Il);
    m->a = falloc((size_t)max_rows * Il);
    m->da = falloc((size_t)max_rows * Il);
    tp_shard_cols(m->w1, w1_full, H, m->I, T, r);
    tp_shard_rows(m->w2, w2_full, m->I, H, T, r);
}

void tp_mlp_free(tp_mlp *m)
{
    free(m->w1);
    free(m->w2);
    free(m->dw1);
    free(m->dw2);
    free(m->h);
    free(m->a);
    free(m->da);
    memset(m, 0, sizeof *m);
}

int tp_mlp_forward(mlsys_comm *c, tp_mlp *m, const float *x, float *y, int B)
{
    int Il = m->I / m->T;
    /* f: identity, x is already on every rank */
    uint64_t t = span_begin(c, "col GEMM");
    tp_column_forward(m->h, x, m->w1, B, m->H, Il);
    span_end(c, "col GEMM", t, &m->clk);
    t = span_begin(c, "GELU");
    tp_gelu_forward(m->a, m->h, (size_t)B * Il);
    span_end(c, "GELU", t, &m->clk);
    t = span_begin(c, "row GEMM");
    tp_row_forward(y, m->a, Il, m->w2, B, Il, m->H);
    span_end(c, "row GEMM", t, &m->clk);
    /* g: the partial outputs are summed: the MLP's one forward all-reduce */
    return reduce_partials(c, y, (size_t)B * m->H, &m->clk);
}

int tp_mlp_backward(mlsys_comm *c, tp_mlp *m, const float *x, const float *dy, float *dx,
                    int B)
{
    int Il = m->I / m->T;
    /* g backward: identity, dy is the same on every rank */
    uint64_t t = span_begin(c, "row GEMM bwd");
    tp_row_backward(m->da, m->dw2, dy, m->a, Il, m->w2, B, Il, m->H);
    span_end(c, "row GEMM bwd", t, &m->clk);
    t = span_begin(c, "GELU bwd");
    tp_gelu_backward(m->da, m->da, m->h, (size_t)B * Il);
    span_end(c, "GELU bwd", t, &m->clk);
    t = span_begin(c, "col GEMM bwd");
    tp_column_backward(dx, m->dw1, m->da, x, m->w1, B, m->H, Il, 0);
    span_end(c, "col GEMM bwd", t, &m->clk);
    /* f backward: each rank's dx holds only its inner features' share */
    return reduce_partials(c, dx, (size_t)B * m->H, &m->clk);
}

/* ---- attention ---- */

void tp_attn_init(tp_attn *m, const float *wq, const float *wk, const float *wv,
                  const float *wo, int H, int NH, int T, int r, int max_b, int max_s)
{
    memset(m, 0, sizeof *m);
    m->H = H;
    m->NH = NH;
    m->T = T;
    m->r = r;
    m->hl = NH / T;
    m->d = H / NH;
    m->Hl = m->hl * m->d;
    m->max_b = max_b;
    m->max_s = max_s;
    size_t wsz = (size_t)H * m->Hl, act = (size_t)max_b * max_s * m->Hl;
    m->wq = falloc(wsz);
    m->wk = falloc(wsz);
    m->wv = falloc(wsz);
    m->wo = falloc(wsz);
    m->dwq = falloc(wsz);
    m->dwk = falloc(wsz);
    m->dwv = falloc(wsz);
    m->dwo = falloc(wsz);
    m->q = falloc(act);
    m->k = falloc(act);
    m->v = falloc(act);
    m->o = falloc(act);
    m->dq = falloc(act);
    m->dk = falloc(act);
    m->dv = falloc(act);
    m->dout = falloc(act);
    m->p = falloc((size_t)max_b * m->hl * max_s * max_s);
    m->dp = falloc((size_t)max_s * max_s);
    tp_shard_cols(m->wq, wq, H, H, T, r);
    tp_shard_cols(m->wk, wk, H, H, T, r);
    tp_shard_cols(m->wv, wv, H, H, T, r);
    tp_shard_rows(m->wo, wo, H, H, T, r);
}

void tp_attn_free(tp_attn *m)
{
    float *all[] = {m->wq, m->wk, m->wv, m->wo, m->dwq, m->dwk, m->dwv, m->dwo, m->q, m->k,
                    m->v, m->o, m->dq, m->dk, m->dv, m->dout, m->p, m->dp};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        free(all[i]);
    memset(m, 0, sizeof *m);
}

/* Row-wise softmax of s[S, S] in place with the causal mask: row i sees keys 0..i. */
static void causal_softmax(float *s, int S)
{
    for (int i = 0; i < S; i++) {
        float *row = s + (size_t)i * S;
        double mx = row[0], sum = 0;
        for (int j = 1; j <= i; j++)
            mx = row[j] > mx ? row[j] : mx;
        for (int j = 0; j <= i; j++) {
            double e = exp((double)row[j] - mx);
            row[j] = (float)e;
            sum += e;
        }
        for (int j = 0; j <= i; j++)
            row[j] = (float)(row[j] / sum);
        for (int j = i + 1; j < S; j++)
            row[j] = 0.0f;
    }
}

/* ds[S, S] = p ⊙ (dp - rowsum(dp ⊙ p)) in place in dp; masked entries have p = 0. */
static void softmax_backward(float *dp, const float *p, int S)
{
    for (int i = 0; i < S; i++) {
        const float *pr = p + (size_t)i * S;
        float *dr = dp + (size_t)i * S;
        double dot = 0;
        for (int j = 0; j <= i; j++)
            dot += (double)dr[j] * pr[j];
        for (int j = 0; j < S; j++)
            dr[j] = j <= i ? (float)(pr[j] * (dr[j] - dot)) : 0.0f;
    }
}

int tp_attn_forward(mlsys_comm *c, tp_attn *m, const float *x, float *y, int B, int S)
{
    int rows = B * S, Hl = m->Hl, d = m->d;
    float scale = (float)(1.0 / sqrt((double)d));
    uint64_t t = span_begin(c, "QKV GEMM");
    tp_column_forward(m->q, x, m->wq, rows, m->H, Hl);
    tp_column_forward(m->k, x, m->wk, rows, m->H, Hl);
    tp_column_forward(m->v, x, m->wv, rows, m->H, Hl);
    span_end(c, "QKV GEMM", t, &m->clk);
    t = span_begin(c, "attention");
    for (int b = 0; b < B; b++)
        for (int j = 0; j < m->hl; j++) {
            size_t off = (size_t)b * S * Hl + (size_t)j * d;
            float *p = m->p + ((size_t)b * m->hl + j) * S * S;
            nn_gemm(0, 1, S, S, d, scale, m->q + off, Hl, m->k + off, Hl, 0.0f, p, S);
            causal_softmax(p, S);
            nn_gemm(0, 0, S, d, S, 1.0f, p, S, m->v + off, Hl, 0.0f, m->o + off, Hl);
        }
    span_end(c, "attention", t, &m->clk);
    t = span_begin(c, "out GEMM");
    tp_row_forward(y, m->o, Hl, m->wo, rows, Hl, m->H);
    span_end(c, "out GEMM", t, &m->clk);
    return reduce_partials(c, y, (size_t)rows * m->H, &m->clk);
}

int tp_attn_backward(mlsys_comm *c, tp_attn *m, const float *x, const float *dy, float *dx,
                     int B, int S)
{
    int rows = B * S, Hl = m->Hl, d = m->d;
    float scale = (float)(1.0 / sqrt((double)d));
    uint64_t t = span_begin(c, "out GEMM bwd");
    tp_row_backward(m->dout, m->dwo, dy, m->o, Hl, m->wo, rows, Hl, m->H);
    span_end(c, "out GEMM bwd", t, &m->clk);
    t = span_begin(c, "attention bwd");
    for (int b = 0; b < B; b++)
        for (int j = 0; j < m->hl; j++) {
            size_t off = (size_t)b * S * Hl + (size_t)j * d;
            const float *p = m->p + ((size_t)b * m->hl + j) * S * S;
            /* dV = Pᵀ·dO, dP = dO·Vᵀ, dS = softmax' (dP), dQ = dS·K/√d, dK = dSᵀ·Q/√d */
            nn_gemm(1, 0, S, d, S, 1.0f, p, S, m->dout + off, Hl, 0.0f, m->dv + off, Hl);
            nn_gemm(0, 1, S, S, d, 1.0f, m->dout + off, Hl, m->v + off, Hl, 0.0f, m->dp, S);
            softmax_backward(m->dp, p, S);
            nn_gemm(0, 0, S, d, S, scale, m->dp, S, m->k + off, Hl, 0.0f, m->dq + off, Hl);
            nn_gemm(1, 0, S, d, S, scale, m->dp, S, m->q + off, Hl, 0.0f, m->dk + off, Hl);
        }
    span_end(c, "attention bwd", t, &m->clk);
    t = span_begin(c, "QKV GEMM bwd");
    tp_column_backward(dx, m->dwq, m->dq, x, m->wq, rows, m->H, Hl, 0);
    tp_column_backward(dx, m->dwk, m->dk, x, m->wk, rows, m->H, Hl, 1);
    tp_column_backward(dx, m->dwv, m->dv, x, m->wv, rows, m->H, Hl, 1);
    span_end(c, "QKV GEMM bwd", t, &m->clk);
    /* f backward: x fed all three projections, so one all-reduce of the summed dx */
    return reduce_partials(c, dx, (size_t)rows * m->H, &m->clk);
}
