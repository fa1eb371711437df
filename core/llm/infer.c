/* infer.c - the Llama forward for inference, on core/nn's kernels (one RMSNorm, one RoPE,
 * one attention, one SwiGLU, one GEMM entry point: the same arithmetic as the training
 * forward, nn_tf_forward). llm_forward takes any set of rows (token, sequence, position) and
 * keeps keys and values in an llm_kv cache, so a decode step of B sequences reads each weight
 * once; llm_forward_nocache runs one fresh prefill of the whole sequence (the reference).
 * With a batch-invariant GEMM (NN_GEMM_INVARIANT, or the reference kernel) a row's logits do
 * not depend on which other rows share its call: decode equals prefill equals the training
 * forward, bit for bit. Under OpenBLAS they differ only by how BLAS rounds a GEMM of one row
 * against one of many (test_generate checks both statements). */
#include "llm.h"
#include "../nn/transformer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the engine ---- */

uint64_t llm_fwd_bytes(const llm_config *c, int max_rows)
{
    /* in double: seq_len x heads x rows can pass 2^64 for headers inside the limits */
    double R = max_rows, D = c->dim, KVD = c->kv_dim, H = c->hidden_dim, S = c->seq_len;
    double NH = c->n_heads, half = c->head_size / 2;
    double b = 4.0 * (2 * S * half + 4 * R * D + 2 * R * KVD + 2 * R * H + R * NH * S) +
               4.0 * R * S;
    return b >= 1.8e19 ? UINT64_MAX : (uint64_t)b;
}

int llm_fwd_rows_that_fit(const llm_config *c, int want)
{
    uint64_t have = mlsys_mem_available();
    if (have > LLM_FWD_MAX_BYTES)
        have = LLM_FWD_MAX_BYTES;
    while (want > 1 && llm_fwd_bytes(c, want) > have)
        want /= 2;
    return llm_fwd_bytes(c, want) <= have ? want : 0;
}

int llm_fwd_init(llm_fwd *e, const llm_config *c, const llm_weights *w, int max_rows,
                    char *err, size_t errlen)
{
    memset(e, 0, sizeof *e);
    if (max_rows < 1 || max_rows > 65536) {
        snprintf(err, errlen, "engine: max_rows %d out of range [1, 65536]", max_rows);
        return -1;
    }
    /* every row holds attention scores over the whole context for every head: a header
     * inside the limits (seq_len 2^20, many heads) can ask for more than the machine has */
    uint64_t need = llm_fwd_bytes(c, max_rows), have = mlsys_mem_available();
    if (need > LLM_FWD_MAX_BYTES || need > have) {
        char a[32], b[32];
        mlsys_format_approx((double)need, a, sizeof a);
        mlsys_format_approx((double)(need > LLM_FWD_MAX_BYTES ? LLM_FWD_MAX_BYTES : have),
                            b, sizeof b);
        snprintf(err, errlen, "the engine's scratch for %d row%s needs %s (scores over seq_len "
                 "%d for %d heads per row), more than %s %s", max_rows, max_rows == 1 ? "" : "s",
                 a, c->seq_len, c->n_heads, need > LLM_FWD_MAX_BYTES ? "the limit of" :
                 "this machine has free:", b);
        return -1;
    }
    e->c = *c;
    e->w = w;
    e->max_rows = max_rows;
    e->tp_size = 1;                  /* the whole model (llm_fwd_init_tp shares it) */
    e->nh = c->n_heads;
    e->nkv = c->n_kv_heads;
    e->hid = c->hidden_dim;
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
    nn_rope_table(e->rope_cos, e->rope_sin, c->seq_len, c->head_size);
    return 0;
}

void llm_fwd_fini(llm_fwd *e)
{
    free(e->mem);
    free(e->shard);
    memset(e, 0, sizeof *e);
}

/* ---- tensor parallelism: one rank's share of every layer ---- */

int llm_tp_kv_config(const llm_config *c, int tp_size, llm_config *out)
{
    *out = *c;
    if (tp_size < 1 || c->n_kv_heads % tp_size)
        return -1;
    out->kv_dim = c->kv_dim / tp_size;
    return 0;
}

/* Rows [r0, r0 + n) of a [rows, cols] matrix, then columns [c0, c0 + n) of a [rows, cols]
 * matrix, copied contiguous to dst; each returns the floats written. */
static size_t copy_rows(float *dst, const float *m, size_t cols, size_t r0, size_t n)
{
    memcpy(dst, m + r0 * cols, n * cols * sizeof(float));
    return n * cols;
}

static size_t copy_cols(float *dst, const float *m, size_t rows, size_t cols, size_t c0,
                        size_t n)
{
    for (size_t i = 0; i < rows; i++)
        memcpy(dst + i * n, m + i * cols + c0, n * sizeof(float));
    return rows * n;
}

int llm_fwd_init_tp(llm_fwd *e, const llm_config *c, const llm_weights *w, int max_rows,
                    mlsys_comm *tp, char *err, size_t errlen)
{
    int T = tp ? mlsys_size(tp) : 1, r = tp ? mlsys_rank(tp) : 0;
    if (T > 1 && (c->n_heads % T || c->n_kv_heads % T || c->hidden_dim % T)) {
        snprintf(err, errlen, "tensor parallelism over %d ranks needs %d to divide the heads "
                 "(%d), the key/value heads (%d) and the MLP's hidden units (%d)", T, T,
                 c->n_heads, c->n_kv_heads, c->hidden_dim);
        return -1;
    }
    if (llm_fwd_init(e, c, w, max_rows, err, errlen))
        return -1;
    if (T == 1)
        return 0;
    size_t D = (size_t)c->dim, KVD = (size_t)c->kv_dim;
    size_t H = (size_t)c->hidden_dim;
    size_t dq = D / T, dkv = KVD / T, dh = H / T;
    e->tp = tp;
    e->tp_size = T;
    e->tp_rank = r;
    e->nh = c->n_heads / T;
    e->nkv = c->n_kv_heads / T;
    e->hid = (int)dh;
    e->shard_layer = dq * D + 2 * dkv * D + D * dq + 2 * dh * D + D * dh;
    e->shard = mlsys_xmalloc(e->shard_layer * (size_t)c->n_layers * sizeof(float));
    for (int l = 0; l < c->n_layers; l++) {
        float *p = e->shard + (size_t)l * e->shard_layer;
        p += copy_rows(p, w->wq + (size_t)l * D * D, D, (size_t)r * dq, dq);
        p += copy_rows(p, w->wk + (size_t)l * KVD * D, D, (size_t)r * dkv, dkv);
        p += copy_rows(p, w->wv + (size_t)l * KVD * D, D, (size_t)r * dkv, dkv);
        p += copy_cols(p, w->wo + (size_t)l * D * D, D, D, (size_t)r * dq, dq);
        p += copy_rows(p, w->w1 + (size_t)l * H * D, D, (size_t)r * dh, dh);
        p += copy_rows(p, w->w3 + (size_t)l * H * D, D, (size_t)r * dh, dh);
        copy_cols(p, w->w2 + (size_t)l * D * H, D, H, (size_t)r * dh, dh);
    }
    return 0;
}

/* The row-parallel half's partial sums (in xb) summed over the group, timed. */
static int tp_allreduce(llm_fwd *e, size_t count)
{
    uint64_t t0 = mlsys_now_ns();
    int rc = mlsys_allreduce(e->tp, e->xb, e->xb, count, MLSYS_F32, MLSYS_SUM);
    e->tp_allreduce_ns += mlsys_now_ns() - t0;
    e->tp_allreduces++;
    return rc;
}

/* Rows [0, m) of one chunk (m <= max_rows), already validated. The layer is the training
 * forward's (core/nn/transformer.c) step for step; only where keys and values live differs:
 * here in the cache's slots, written before any row attends (a row may attend to an earlier
 * row of the same sequence in this call). On a tensor-parallel rank the same steps run on
 * its share: nh heads, nkv key/value heads, hid hidden units; the two row-parallel products
 * (Wo, W2) are partial sums, all-reduced over tp before they join the residual stream.
 * 0, or an MLSYS_ERR_ code of that all-reduce. */
static int forward_chunk(llm_fwd *e, llm_kv *kv, int m, const int *seq, const int *pos,
                         const int *tok, const unsigned char *want, float *logits)
{
    const llm_config *c = &e->c;
    const llm_weights *w = e->w;
    int D = c->dim, S = c->seq_len, V = c->vocab_size, HS = c->head_size;
    int NH = e->nh, NKV = e->nkv, H = e->hid, DQ = NH * HS, KVD = NKV * HS;
    size_t DD = (size_t)D * D, KD = (size_t)c->kv_dim * D, HD = (size_t)c->hidden_dim * D;
    int rc;

    nn_embedding_forward(e->x, tok, w->token_embedding, m, V, D);
    for (int r = 0; r < m; r++) {
        /* the slot list is the same for every layer: ask the map once per row */
        int *sl = e->slots + (size_t)r * S;
        for (int t = 0; t <= pos[r]; t++)
            sl[t] = kv->ops->slot(kv, seq[r], t);
    }
    for (int l = 0; l < c->n_layers; l++) {
        /* this layer's matrices: the model's, or this rank's share of them */
        const float *wq = w->wq + l * DD, *wk = w->wk + l * KD, *wv = w->wv + l * KD;
        const float *wo = w->wo + l * DD, *w1 = w->w1 + l * HD, *w3 = w->w3 + l * HD;
        const float *w2 = w->w2 + l * HD;
        if (e->shard) {
            const float *p = e->shard + (size_t)l * e->shard_layer;
            wq = p, p += (size_t)DQ * D;
            wk = p, p += (size_t)KVD * D;
            wv = p, p += (size_t)KVD * D;
            wo = p, p += (size_t)D * DQ;
            w1 = p, p += (size_t)H * D;
            w3 = p, p += (size_t)H * D;
            w2 = p;
        }
        /* attention half: x += Wo·attn(rope(Wq·n(x)), rope(Wk·n(x)), Wv·n(x)) */
        nn_rmsnorm_forward(e->xb, NULL, e->x, w->rms_att + (size_t)l * D, m, D, NN_TF_RMS_EPS);
        nn_linear_forward(e->q, e->xb, wq, NULL, m, D, DQ);
        nn_linear_forward(e->k, e->xb, wk, NULL, m, D, KVD);
        nn_linear_forward(e->v, e->xb, wv, NULL, m, D, KVD);
        nn_rope_rows(e->q, e->rope_cos, e->rope_sin, pos, m, NH, HS);
        nn_rope_rows(e->k, e->rope_cos, e->rope_sin, pos, m, NKV, HS);
        for (int r = 0; r < m; r++) {
            int s = e->slots[(size_t)r * S + pos[r]];
            memcpy(llm_kv_k(kv, l, s), e->k + (size_t)r * KVD, (size_t)KVD * sizeof(float));
            memcpy(llm_kv_v(kv, l, s), e->v + (size_t)r * KVD, (size_t)KVD * sizeof(float));
        }
        const float *kbase = llm_kv_k(kv, l, 0), *vbase = llm_kv_v(kv, l, 0);
        for (int r = 0; r < m; r++)
            nn_attention_row(e->xb2 + (size_t)r * DQ, e->att + (size_t)r * NH * S, (size_t)S,
                             e->q + (size_t)r * DQ, kbase, vbase, (size_t)KVD,
                             e->slots + (size_t)r * S, pos[r] + 1, NH, NKV, HS);
        nn_linear_forward(e->xb, e->xb2, wo, NULL, m, DQ, D);
        if (e->tp && (rc = tp_allreduce(e, (size_t)m * D)) != 0)
            return rc;
        for (size_t i = 0; i < (size_t)m * D; i++)
            e->x[i] += e->xb[i];
        /* MLP half: x += W2·(silu(W1·n(x)) ⊙ W3·n(x)) */
        nn_rmsnorm_forward(e->xb, NULL, e->x, w->rms_ffn + (size_t)l * D, m, D, NN_TF_RMS_EPS);
        nn_linear_forward(e->hb, e->xb, w1, NULL, m, D, H);
        nn_linear_forward(e->hb2, e->xb, w3, NULL, m, D, H);
        nn_swiglu_forward(e->hb, e->hb, e->hb2, (size_t)m * H);
        nn_linear_forward(e->xb, e->hb, w2, NULL, m, H, D);
        if (e->tp && (rc = tp_allreduce(e, (size_t)m * D)) != 0)
            return rc;
        for (size_t i = 0; i < (size_t)m * D; i++)
            e->x[i] += e->xb[i];
    }
    /* final norm and the classifier, only for the rows whose logits are wanted */
    int nw = 0;
    for (int r = 0; r < m; r++)
        if (!want || want[r])
            nn_rmsnorm_forward(e->xb2 + (size_t)nw++ * D, NULL, e->x + (size_t)r * D,
                               w->rms_final, 1, D, NN_TF_RMS_EPS);
    nn_linear_forward(logits, e->xb2, w->wcls, NULL, nw, D, V);
    return 0;
}

int llm_forward(llm_fwd *e, llm_kv *kv, int n, const int *seq, const int *pos,
                const int *tok, const unsigned char *want, float *logits, char *err,
                size_t errlen)
{
    const llm_config *c = &e->c;
    int kvd = e->nkv * c->head_size;      /* a tensor-parallel rank caches its share */
    if (kv->n_layers != c->n_layers || kv->kv_dim != kvd) {
        snprintf(err, errlen, "forward: kv cache of %d layers x %d does not fit the model "
                 "(%d x %d)", kv->n_layers, kv->kv_dim, c->n_layers, kvd);
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
        if (forward_chunk(e, kv, m, seq + r0, pos + r0, tok + r0, wr, logits)) {
            snprintf(err, errlen, "forward: tensor-parallel all-reduce: %s",
                     mlsys_errmsg(e->tp));
            return -1;
        }
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

/* A fresh engine and cache for this call only, all T positions in one prefill: nothing
 * survives between calls, every key and value is recomputed. Both are sized for a context of
 * T, not the model's (a header may ask for 2^20 positions), and the engine takes the rows in
 * chunks whose attention scratch (rows x heads x T) stays near 16 MiB. */
int llm_forward_nocache(const llm_config *c, const llm_weights *w, const int *tokens, int T,
                        int last_only, float *logits)
{
    if (T < 1 || T > c->seq_len)
        return -1;
    for (int t = 0; t < T; t++)
        if (tokens[t] < 0 || tokens[t] >= c->vocab_size)
            return -1;
    llm_config cT = *c;
    cT.seq_len = T;
    long budget = (1L << 22) / ((long)c->n_heads * T);
    int chunk = budget < 1 ? 1 : budget < T ? (int)budget : T;
    llm_fwd e;
    llm_kv kv;
    char err[200];
    if (llm_fwd_init(&e, &cT, w, chunk, err, sizeof err) != 0)
        return -1;
    if (llm_kv_init_contiguous(&kv, &cT, 1, T, err, sizeof err) != 0) {
        llm_fwd_fini(&e);
        return -1;
    }
    int *rows = malloc(2 * (size_t)T * sizeof(int));
    unsigned char *want = last_only ? calloc((size_t)T, 1) : NULL;
    int rc = -1;
    if (rows && (!last_only || want) && kv.ops->reserve(&kv, 0, T) == 0) {
        int *seq = rows, *pos = rows + T;
        for (int t = 0; t < T; t++)
            seq[t] = 0, pos[t] = t;
        if (want)
            want[T - 1] = 1;
        rc = llm_forward(&e, &kv, T, seq, pos, tokens, want, logits, err, sizeof err);
    }
    free(rows);
    free(want);
    llm_kv_free(&kv);
    llm_fwd_fini(&e);
    return rc;
}
