/* infer.c - the Llama forward for inference, computed as llama2.c's run.c computes it, in two
 * forms: llm_forward, which takes any set of rows (token, sequence, position) and keeps keys
 * and values in an llm_kv cache, so a decode step of B sequences reads each weight once; and
 * llm_forward_nocache, which recomputes every position from scratch (the reference). */
#include "llm.h"
#include "../nn/transformer.h"

#include <math.h>
#include <stdio.h>
#ifdef HAVE_OPENBLAS
#include <cblas.h>
#endif
#include <stdlib.h>
#include <string.h>

/* ---- the pieces both forms share ---- */

/* RMSNorm as run.c: the mean of the squares summed in float in index order, 1e-5 added
 * inside the square root (it keeps an all-zero row finite), then o = w ⊙ (x / rms). There is
 * no mean subtraction, unlike LayerNorm: only the row's scale is normalised. o may be x. */
static void rmsnorm_row(float *o, const float *x, const float *w, int D)
{
    float ss = 0.0f;
    for (int j = 0; j < D; j++)
        ss += x[j] * x[j];
    ss /= (float)D;
    ss += 1e-5f;
    ss = 1.0f / sqrtf(ss);
    for (int j = 0; j < D; j++)
        o[j] = w[j] * (ss * x[j]);
}

/* run.c's angles, tabulated: pair i of a head turns by pos·θ_i with θ_i = 10000^(-2i/HS),
 * evaluated in float with powf, cosf, sinf exactly as run.c does at each token. Low pairs
 * spin fast (θ_0 = 1 rad per position), high pairs slowly: many wavelengths of position. */
static void rope_tables(float *cos_t, float *sin_t, int S, int HS)
{
    int half = HS / 2;
    for (int p = 0; p < S; p++)
        for (int i = 0; i < half; i++) {
            float freq = 1.0f / powf(10000.0f, (float)(2 * i) / (float)HS);
            float val = (float)p * freq;
            cos_t[(size_t)p * half + i] = cosf(val);
            sin_t[(size_t)p * half + i] = sinf(val);
        }
}

/* Rotate the pairs (2i, 2i+1) of each of nh heads of vec by the angles of one position. */
static void rope_row(float *vec, int nh, int HS, const float *cs, const float *sn)
{
    for (int h = 0; h < nh; h++) {
        float *v = vec + (size_t)h * HS;
        for (int i = 0; i < HS / 2; i++) {
            float v0 = v[2 * i], v1 = v[2 * i + 1];
            v[2 * i] = v0 * cs[i] - v1 * sn[i];
            v[2 * i + 1] = v0 * sn[i] + v1 * cs[i];
        }
    }
}

/* y[R,Out] = x[R,In] · W[Out,In]ᵀ: one GEMM, so W streams through the caches once for all R
 * rows. At R = 1 this is a matrix-vector product bound by reading W; at R = 16 the same read
 * feeds 16 rows, which is where batched decoding gets its throughput. */
static void matmul(float *y, const float *x, const float *W, int R, int In, int Out)
{
#ifdef HAVE_OPENBLAS
    /* one row: BLAS's GEMM would still pack W into its blocked layout first, a copy as
     * costly as the product itself; the matrix-vector kernel streams W straight through */
    if (R == 1 && nn_get_gemm_kernel() == NN_GEMM_BLAS) {
        cblas_sgemv(CblasRowMajor, CblasNoTrans, Out, In, 1.0f, W, In, x, 1, 0.0f, y, 1);
        return;
    }
#endif
    nn_gemm(0, 1, R, Out, In, 1.0f, x, In, W, In, 0.0f, y, Out);
}

/* q·k with eight running sums: one sum would make every addition wait for the last, and
 * the compiler may not reorder float additions on its own; eight independent sums fill a
 * vector register. (run.c sums in index order: the results differ in the last bits.) */
static float dot(const float *a, const float *b, int n)
{
    float part[8] = {0};
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int u = 0; u < 8; u++)
            part[u] += a[i + u] * b[i + u];
    float s = 0.0f;
    for (; i < n; i++)
        s += a[i] * b[i];
    for (int u = 0; u < 8; u++)
        s += part[u];
    return s;
}

/* Attention of one row (the query at position npos-1) over positions 0..npos-1 whose keys
 * and values sit at kbase/vbase + slots[t]·KVD. The NH/NKV query heads of a group share one
 * key/value head (grouped-query attention), so each key and value row is fetched once per
 * group and used by all of its heads. Scores are q·k / √HS; softmax subtracts the maximum
 * first so exp never overflows; the output is the probability-weighted sum of the values.
 * att [NH, S]. */
static void attend_row(float *out, float *att, const float *q, const float *kbase,
                       const float *vbase, const int *slots, int npos, const llm_config *c)
{
    int HS = c->head_size, KVD = c->kv_dim, S = c->seq_len;
    int kv_mul = c->n_heads / c->n_kv_heads;
    float inv_scale = 1.0f / sqrtf((float)HS);
    for (int g = 0; g < c->n_kv_heads; g++) {
        const float *qg = q + (size_t)g * kv_mul * HS;
        float *ag = att + (size_t)g * kv_mul * S;
        size_t goff = (size_t)g * HS;
        for (int t = 0; t < npos; t++) {
            const float *kt = kbase + (size_t)slots[t] * KVD + goff;
            for (int j = 0; j < kv_mul; j++)
                ag[(size_t)j * S + t] = dot(qg + (size_t)j * HS, kt, HS) * inv_scale;
        }
        for (int j = 0; j < kv_mul; j++) {
            float *a = ag + (size_t)j * S;
            float mx = a[0];
            for (int t = 1; t < npos; t++)
                mx = a[t] > mx ? a[t] : mx;
            float sum = 0.0f;
            for (int t = 0; t < npos; t++) {
                a[t] = expf(a[t] - mx);
                sum += a[t];
            }
            float inv = 1.0f / sum;
            for (int t = 0; t < npos; t++)
                a[t] *= inv;
        }
        float *og = out + (size_t)g * kv_mul * HS;
        memset(og, 0, (size_t)kv_mul * HS * sizeof(float));
        for (int t = 0; t < npos; t++) {
            const float *vt = vbase + (size_t)slots[t] * KVD + goff;
            for (int j = 0; j < kv_mul; j++) {
                float p = ag[(size_t)j * S + t], *oh = og + (size_t)j * HS;
                for (int i = 0; i < HS; i++)
                    oh[i] += p * vt[i];
            }
        }
    }
}

/* SwiGLU in place: hb = silu(hb) ⊙ hb2, silu(g) = g·σ(g) = g / (1 + e^-g). */
static void swiglu(float *hb, const float *hb2, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        float g = hb[i];
        hb[i] = g * (1.0f / (1.0f + expf(-g))) * hb2[i];
    }
}

/* ---- the engine ---- */

uint64_t llm_engine_bytes(const llm_config *c, int max_rows)
{
    /* in double: seq_len x heads x rows can pass 2^64 for headers inside the limits */
    double R = max_rows, D = c->dim, KVD = c->kv_dim, H = c->hidden_dim, S = c->seq_len;
    double NH = c->n_heads, half = c->head_size / 2;
    double b = 4.0 * (2 * S * half + 4 * R * D + 2 * R * KVD + 2 * R * H + R * NH * S) +
               4.0 * R * S;
    return b >= 1.8e19 ? UINT64_MAX : (uint64_t)b;
}

int llm_engine_rows_that_fit(const llm_config *c, int want)
{
    uint64_t have = mlsys_mem_available();
    if (have > LLM_ENGINE_MAX_BYTES)
        have = LLM_ENGINE_MAX_BYTES;
    while (want > 1 && llm_engine_bytes(c, want) > have)
        want /= 2;
    return llm_engine_bytes(c, want) <= have ? want : 0;
}

int llm_engine_init(llm_engine *e, const llm_config *c, const llm_weights *w, int max_rows,
                    char *err, size_t errlen)
{
    memset(e, 0, sizeof *e);
    if (max_rows < 1 || max_rows > 65536) {
        snprintf(err, errlen, "engine: max_rows %d out of range [1, 65536]", max_rows);
        return -1;
    }
    /* every row holds attention scores over the whole context for every head: a header
     * inside the limits (seq_len 2^20, many heads) can ask for more than the machine has */
    uint64_t need = llm_engine_bytes(c, max_rows), have = mlsys_mem_available();
    if (need > LLM_ENGINE_MAX_BYTES || need > have) {
        char a[32], b[32];
        mlsys_format_approx((double)need, a, sizeof a);
        mlsys_format_approx((double)(need > LLM_ENGINE_MAX_BYTES ? LLM_ENGINE_MAX_BYTES : have),
                            b, sizeof b);
        snprintf(err, errlen, "the engine's scratch for %d row%s needs %s (scores over seq_len "
                 "%d for %d heads per row), more than %s %s", max_rows, max_rows == 1 ? "" : "s",
                 a, c->seq_len, c->n_heads, need > LLM_ENGINE_MAX_BYTES ? "the limit of" :
                 "this machine has free:", b);
        return -1;
    }
    e->c = *c;
    e->w = w;
    e->max_rows = max_rows;
    size_t R = (size_t)max_rows, D = (size_t)c->dim, KVD = (size_t)c->kv_dim;
    size_t H = (size_t)c->hidden_dim, S = (size_t)c->seq_len, NH = (size_t)c->n_heads;
    size_t half = (size_t)c->head_size / 2;
    size_t floats = 2 * S * half + 4 * R * D + 2 * R * KVD + 2 * R * H + R * NH * S;
    e->bytes = floats * sizeof(float) + R * S * sizeof(int);
    e->mem = mlsys_xmalloc(e->bytes);
    float *p = e->mem;
    e->rope_cos = p, p += S * half;
    e->rope_sin = p, p += S * half;
    e->x = p, p += R * D;
    e->xb = p, p += R * D;
    e->xb2 = p, p += R * D;
    e->q = p, p += R * D;
    e->k = p, p += R * KVD;
    e->v = p, p += R * KVD;
    e->hb = p, p += R * H;
    e->hb2 = p, p += R * H;
    e->att = p, p += R * NH * S;
    e->slots = (int *)p;
    rope_tables(e->rope_cos, e->rope_sin, c->seq_len, c->head_size);
    return 0;
}

void llm_engine_fini(llm_engine *e)
{
    free(e->mem);
    memset(e, 0, sizeof *e);
}

/* Rows [0, m) of one chunk (m <= max_rows), already validated. */
static void forward_chunk(llm_engine *e, llm_kv *kv, int m, const int *seq, const int *pos,
                          const int *tok, const unsigned char *want, float *logits)
{
    const llm_config *c = &e->c;
    const llm_weights *w = e->w;
    int D = c->dim, KVD = c->kv_dim, H = c->hidden_dim, S = c->seq_len, V = c->vocab_size;
    int HS = c->head_size, half = HS / 2;
    size_t DD = (size_t)D * D, KD = (size_t)KVD * D, HD = (size_t)H * D;

    for (int r = 0; r < m; r++) {
        memcpy(e->x + (size_t)r * D, w->token_embedding + (size_t)tok[r] * D,
               (size_t)D * sizeof(float));
        /* the slot list is the same for every layer: ask the map once per row */
        int *sl = e->slots + (size_t)r * S;
        for (int t = 0; t <= pos[r]; t++)
            sl[t] = kv->ops->slot(kv, seq[r], t);
    }
    for (int l = 0; l < c->n_layers; l++) {
        for (int r = 0; r < m; r++)
            rmsnorm_row(e->xb + (size_t)r * D, e->x + (size_t)r * D, w->rms_att + (size_t)l * D,
                        D);
        matmul(e->q, e->xb, w->wq + l * DD, m, D, D);
        matmul(e->k, e->xb, w->wk + l * KD, m, D, KVD);
        matmul(e->v, e->xb, w->wv + l * KD, m, D, KVD);
        /* rotate, then store this call's keys and values at their slots before any row
         * attends: a row may attend to an earlier row of the same sequence in this call */
        for (int r = 0; r < m; r++) {
            const float *cs = e->rope_cos + (size_t)pos[r] * half;
            const float *sn = e->rope_sin + (size_t)pos[r] * half;
            rope_row(e->q + (size_t)r * D, c->n_heads, HS, cs, sn);
            rope_row(e->k + (size_t)r * KVD, c->n_kv_heads, HS, cs, sn);
            int s = e->slots[(size_t)r * S + pos[r]];
            memcpy(llm_kv_k(kv, l, s), e->k + (size_t)r * KVD, (size_t)KVD * sizeof(float));
            memcpy(llm_kv_v(kv, l, s), e->v + (size_t)r * KVD, (size_t)KVD * sizeof(float));
        }
        const float *kbase = llm_kv_k(kv, l, 0), *vbase = llm_kv_v(kv, l, 0);
        for (int r = 0; r < m; r++)
            attend_row(e->xb2 + (size_t)r * D, e->att + (size_t)r * c->n_heads * S,
                       e->q + (size_t)r * D, kbase, vbase, e->slots + (size_t)r * S,
                       pos[r] + 1, c);
        matmul(e->xb, e->xb2, w->wo + l * DD, m, D, D);
        for (size_t i = 0; i < (size_t)m * D; i++)
            e->x[i] += e->xb[i];
        for (int r = 0; r < m; r++)
            rmsnorm_row(e->xb + (size_t)r * D, e->x + (size_t)r * D, w->rms_ffn + (size_t)l * D,
                        D);
        matmul(e->hb, e->xb, w->w1 + l * HD, m, D, H);
        matmul(e->hb2, e->xb, w->w3 + l * HD, m, D, H);
        swiglu(e->hb, e->hb2, (size_t)m * H);
        matmul(e->xb, e->hb, w->w2 + l * HD, m, H, D);
        for (size_t i = 0; i < (size_t)m * D; i++)
            e->x[i] += e->xb[i];
    }
    /* final norm and the classifier, only for the rows whose logits are wanted */
    int nw = 0;
    for (int r = 0; r < m; r++)
        if (!want || want[r])
            rmsnorm_row(e->xb2 + (size_t)nw++ * D, e->x + (size_t)r * D, w->rms_final, D);
    matmul(logits, e->xb2, w->wcls, nw, D, V);
}

int llm_forward(llm_engine *e, llm_kv *kv, int n, const int *seq, const int *pos,
                const int *tok, const unsigned char *want, float *logits, char *err,
                size_t errlen)
{
    const llm_config *c = &e->c;
    if (kv->n_layers != c->n_layers || kv->kv_dim != c->kv_dim) {
        snprintf(err, errlen, "forward: kv cache of %d layers x %d does not fit the model "
                 "(%d x %d)", kv->n_layers, kv->kv_dim, c->n_layers, c->kv_dim);
        return -1;
    }
    for (int r = 0; r < n; r++) {
        if (tok[r] < 0 || tok[r] >= c->vocab_size || pos[r] < 0 || pos[r] >= c->seq_len ||
            seq[r] < 0 || seq[r] >= kv->n_seqs || kv->ops->slot(kv, seq[r], pos[r]) < 0) {
            snprintf(err, errlen, "forward: row %d (token %d, sequence %d, position %d): "
                     "out of range or not reserved in the cache", r, tok[r], seq[r], pos[r]);
            return -1;
        }
    }
    for (int r0 = 0; r0 < n; r0 += e->max_rows) {
        int m = n - r0 < e->max_rows ? n - r0 : e->max_rows;
        const unsigned char *wr = want ? want + r0 : NULL;
        forward_chunk(e, kv, m, seq + r0, pos + r0, tok + r0, wr, logits);
        int nw = m;
        if (want) {
            nw = 0;
            for (int r = 0; r < m; r++)
                nw += wr[r] != 0;
        }
        logits += (size_t)nw * c->vocab_size;
    }
    return 0;
}

/* ---- the reference without a cache ---- */

int llm_forward_nocache(const llm_config *c, const llm_weights *w, const int *tokens, int T,
                        int last_only, float *logits)
{
    if (T < 1 || T > c->seq_len)
        return -1;
    for (int t = 0; t < T; t++)
        if (tokens[t] < 0 || tokens[t] >= c->vocab_size)
            return -1;
    int D = c->dim, KVD = c->kv_dim, H = c->hidden_dim, V = c->vocab_size, HS = c->head_size;
    int half = HS / 2, NH = c->n_heads;
    size_t DD = (size_t)D * D, KD = (size_t)KVD * D, HD = (size_t)H * D;
    size_t Tz = (size_t)T;
    /* every position's activations side by side: [T, ...] each */
    size_t floats = 2 * Tz * half + 4 * Tz * D + 2 * Tz * KVD + 2 * Tz * H + (size_t)NH * c->seq_len;
    float *mem = malloc(floats * sizeof(float) + Tz * sizeof(int));
    if (!mem)
        return -1;
    float *p = mem;
    float *cs = p; p += Tz * half;
    float *sn = p; p += Tz * half;
    float *x = p; p += Tz * D;
    float *xb = p; p += Tz * D;
    float *xb2 = p; p += Tz * D;
    float *q = p; p += Tz * D;
    float *k = p; p += Tz * KVD;
    float *v = p; p += Tz * KVD;
    float *hb = p; p += Tz * H;
    float *hb2 = p; p += Tz * H;
    float *att = p; p += (size_t)NH * c->seq_len;
    int *ident = (int *)p;               /* position t's key is row t of k: "slot" t */
    for (int t = 0; t < T; t++)
        ident[t] = t;
    rope_tables(cs, sn, T, HS);

    for (int t = 0; t < T; t++)
        memcpy(x + (size_t)t * D, w->token_embedding + (size_t)tokens[t] * D,
               (size_t)D * sizeof(float));
    for (int l = 0; l < c->n_layers; l++) {
        for (int t = 0; t < T; t++)
            rmsnorm_row(xb + (size_t)t * D, x + (size_t)t * D, w->rms_att + (size_t)l * D, D);
        matmul(q, xb, w->wq + l * DD, T, D, D);
        matmul(k, xb, w->wk + l * KD, T, D, KVD);
        matmul(v, xb, w->wv + l * KD, T, D, KVD);
        for (int t = 0; t < T; t++) {
            rope_row(q + (size_t)t * D, NH, HS, cs + (size_t)t * half, sn + (size_t)t * half);
            rope_row(k + (size_t)t * KVD, c->n_kv_heads, HS, cs + (size_t)t * half,
                     sn + (size_t)t * half);
        }
        /* causal: position t sees keys 0..t only */
        for (int t = 0; t < T; t++)
            attend_row(xb2 + (size_t)t * D, att, q + (size_t)t * D, k, v, ident, t + 1, c);
        matmul(xb, xb2, w->wo + l * DD, T, D, D);
        for (size_t i = 0; i < Tz * D; i++)
            x[i] += xb[i];
        for (int t = 0; t < T; t++)
            rmsnorm_row(xb + (size_t)t * D, x + (size_t)t * D, w->rms_ffn + (size_t)l * D, D);
        matmul(hb, xb, w->w1 + l * HD, T, D, H);
        matmul(hb2, xb, w->w3 + l * HD, T, D, H);
        swiglu(hb, hb2, Tz * H);
        matmul(xb, hb, w->w2 + l * HD, T, H, D);
        for (size_t i = 0; i < Tz * D; i++)
            x[i] += xb[i];
    }
    int t0 = last_only ? T - 1 : 0;
    for (int t = t0; t < T; t++)
        rmsnorm_row(xb + (size_t)(t - t0) * D, x + (size_t)t * D, w->rms_final, D);
    matmul(logits, xb, w->wcls, T - t0, D, V);
    free(mem);
    return 0;
}
