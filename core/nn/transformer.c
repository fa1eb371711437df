/* transformer.c - the lab's Llama-style model, forward and backward, straight on its weights
 * (llm_weights, weights.c: llama2.c's layout). Per layer: RMSNorm → Q,K,V projections → RoPE on
 * Q and K → causal GQA attention → Wo → residual add; RMSNorm → SwiGLU MLP (W1 gate, W3 up,
 * W2 down) → residual add. Then the final RMSNorm and the classifier (tied or not) feed a
 * softmax cross-entropy. The backward walks the same list in reverse, from the
 * cross-entropy's gradient or from any other that arrives at the logits or at the final
 * hidden state (RL: a policy gradient, a KL penalty, a value or reward head). */
#include "transformer.h"
#include <math.h>
#include <stdio.h>
#include <string.h>


/* Offsets into the layer-major activation tensors: layer l of a family holding `per` floats
 * per layer (sized for the largest batch, so one forward may use a smaller B or T). */
#define AT(base, l, per) ((base) + (size_t)(l) * (per))

/* The floats of every activation (size, 19 entries) and activation gradient (dsize, 11),
 * in the order nn_tf_init carves them: one table for the allocation and for nn_tf_bytes.
 * In double: a batch asked for on a command line may overflow size_t arithmetic, and the
 * estimate must say so before anything is allocated. */
static void tf_sizes(const llm_config *cfg, int B, int T, double size[19], double dsize[11])
{
    double L = cfg->n_layers, N = (double)B * T, C = cfg->dim, KV = cfg->kv_dim;
    double H = cfg->hidden_dim, V = cfg->vocab_size, NH = cfg->n_heads;
    double half = cfg->head_size / 2, Td = T;
    double a[19] = {Td * half, Td * half, (L + 1) * N * C, L * N, L * N * C, L * N * C,
                    L * N * KV, L * N * KV, L * N * NH * Td, L * N * C, L * N * C, L * N,
                    L * N * C, L * N * H, L * N * H, L * N * H, N, N * C, N * V};
    double d[11] = {N * C, N * C, N * C, N * C, N * KV, N * KV, N * H, N * H, N * H,
                    Td * Td, N * C};
    memcpy(size, a, sizeof a);
    memcpy(dsize, d, sizeof d);
}

double nn_tf_bytes(const llm_config *cfg, int B, int T)
{
    double size[19], dsize[11], n = 0;
    tf_sizes(cfg, B, T, size, dsize);
    for (int i = 0; i < 19; i++)
        n += size[i];
    for (int i = 0; i < 11; i++)
        n += dsize[i];
    return 4.0 * n;
}

int nn_tf_init(nn_tf *m, const llm_config *cfg, int B, int T)
{
    memset(m, 0, sizeof *m);
    if (B < 1 || T < 1 || T > cfg->seq_len || cfg->head_size < 2 || cfg->head_size % 2)
        return -1;
    m->c = *cfg;
    m->B = B;
    m->T = T;

    /* activations: every size in one table, then one allocation carved in this order */
    float **slot[] = {&m->rope_cos, &m->rope_sin, &m->resid, &m->rstd_att, &m->xn_att, &m->q,
                      &m->k, &m->v, &m->att, &m->atty, &m->resid_mid, &m->rstd_ffn,
                      &m->xn_ffn, &m->h1, &m->h3, &m->hg, &m->rstd_final, &m->xn_final,
                      &m->logits};
    double fsize[19], fdsize[11];
    tf_sizes(cfg, B, T, fsize, fdsize);
    if (nn_tf_bytes(cfg, B, T) > 4e18)
        return -1;
    size_t size[19], dsize[11];
    for (int i = 0; i < 19; i++)
        size[i] = (size_t)fsize[i];
    for (int i = 0; i < 11; i++)
        dsize[i] = (size_t)fdsize[i];
    size_t n = 0, count = sizeof size / sizeof size[0];
    for (size_t i = 0; i < count; i++)
        n += size[i];
    m->act_floats = n;
    m->act_bytes = (n * sizeof(float) + 4095) & ~(size_t)4095;
    m->act_mem = mlsys_alloc_aligned(m->act_bytes);
    float *p = m->act_mem;
    for (size_t i = 0; i < count; i++) {
        *slot[i] = p;
        p += size[i];
    }
    nn_rope_table(m->rope_cos, m->rope_sin, T, cfg->head_size);

    /* activation gradients: one layer's worth, reused by every layer on the way down */
    float **dslot[] = {&m->d_resid, &m->d_xn, &m->d_tmp, &m->dq, &m->dk, &m->dv, &m->d_h1,
                       &m->d_h3, &m->d_hg, &m->d_att, &m->d_hidden};
    n = 0;
    count = sizeof dsize / sizeof dsize[0];
    for (size_t i = 0; i < count; i++)
        n += dsize[i];
    m->grad_floats = n;
    m->grad_bytes = (n * sizeof(float) + 4095) & ~(size_t)4095;
    m->grad_mem = mlsys_alloc_aligned(m->grad_bytes);
    p = m->grad_mem;
    for (size_t i = 0; i < count; i++) {
        *dslot[i] = p;
        p += dsize[i];
    }
    return 0;
}

void nn_tf_fini(nn_tf *m)
{
    if (m->act_mem)
        mlsys_free_aligned(m->act_mem, m->act_bytes);
    if (m->grad_mem)
        mlsys_free_aligned(m->grad_mem, m->grad_bytes);
    memset(m, 0, sizeof *m);
}

/* The trainable tensors at the granularity the backward finishes them: the embedding, each
 * layer's slice of the nine per-layer tensors, the final norm and (when separate) wcls. */
int nn_tf_tensor_count(const llm_config *c)
{
    return 2 + 9 * c->n_layers + (c->shared_classifier ? 0 : 1);
}

int nn_tf_tensor(const llm_config *c, const llm_weights *w, int i, size_t *off, size_t *len,
                 char *name, size_t namelen)
{
    int L = c->n_layers;
    size_t D = (size_t)c->dim, KV = (size_t)c->kv_dim, H = (size_t)c->hidden_dim;
    static const char *kind[9] = {"rms_att", "wq", "wk", "wv", "wo", "rms_ffn", "w1", "w2",
                                  "w3"};
    if (i < 0 || i >= nn_tf_tensor_count(c))
        return -1;
    const float *base;
    size_t n;
    char buf[48];
    if (i == 0) {
        base = w->token_embedding;
        n = (size_t)c->vocab_size * D;
        snprintf(buf, sizeof buf, "token_embedding");
    } else if (i <= 9 * L) {
        int k = (i - 1) / L, l = (i - 1) % L;
        const float *arr[9] = {w->rms_att, w->wq, w->wk, w->wv, w->wo, w->rms_ffn, w->w1,
                               w->w2, w->w3};
        size_t per[9] = {D, D * D, KV * D, KV * D, D * D, D, H * D, D * H, H * D};
        base = arr[k] + (size_t)l * per[k];
        n = per[k];
        snprintf(buf, sizeof buf, "%s.%d", kind[k], l);
    } else if (i == 9 * L + 1) {
        base = w->rms_final;
        n = D;
        snprintf(buf, sizeof buf, "rms_final");
    } else {
        base = w->wcls;
        n = (size_t)c->vocab_size * D;
        snprintf(buf, sizeof buf, "wcls");
    }
    *off = (size_t)(base - w->mem);
    *len = n;
    if (name)
        snprintf(name, namelen, "%s", buf);
    return 0;
}

/* llama2.c's training recipe: N(0, 0.02) for the embedding and every matrix, the two
 * projections that write into the residual stream (wo, w2) scaled down by √(2L) so the
 * stream's variance does not grow with depth, and norm gains of 1. One seeded stream in file
 * order: the same seed gives the same model on every rank. */
void nn_tf_init_weights(llm_weights *w, const llm_config *c, uint64_t seed)
{
    mlsys_rng r;
    mlsys_rng_seed(&r, seed);
    size_t L = (size_t)c->n_layers, D = (size_t)c->dim, KV = (size_t)c->kv_dim;
    size_t H = (size_t)c->hidden_dim, V = (size_t)c->vocab_size;
    float std = 0.02f, std_out = 0.02f / sqrtf(2.0f * (float)L);
    nn_init_normal(w->token_embedding, V * D, 0.0f, std, &r);
    nn_init_const(w->rms_att, L * D, 1.0f);
    nn_init_normal(w->wq, L * D * D, 0.0f, std, &r);
    nn_init_normal(w->wk, L * KV * D, 0.0f, std, &r);
    nn_init_normal(w->wv, L * KV * D, 0.0f, std, &r);
    nn_init_normal(w->wo, L * D * D, 0.0f, std_out, &r);
    nn_init_const(w->rms_ffn, L * D, 1.0f);
    nn_init_normal(w->w1, L * H * D, 0.0f, std, &r);
    nn_init_normal(w->w2, L * D * H, 0.0f, std_out, &r);
    nn_init_normal(w->w3, L * H * D, 0.0f, std, &r);
    nn_init_const(w->rms_final, D, 1.0f);
    if (!c->shared_classifier)
        nn_init_normal(w->wcls, V * D, 0.0f, std, &r);
}

/* The body's forward over B sequences of T tokens (positions 0..T-1), up to the final
 * hidden state m->xn_final. Every activation the backward reads is kept. */
void nn_tf_forward_hidden(nn_tf *m, const llm_weights *w, const int *ids, int B, int T)
{
    const llm_config *c = &m->c;
    int L = c->n_layers, C = c->dim, KV = c->kv_dim, H = c->hidden_dim, V = c->vocab_size;
    int NH = c->n_heads, NKV = c->n_kv_heads, HS = c->head_size, N = B * T;
    size_t NM = (size_t)m->B * m->T;          /* rows the per-layer buffers are sized for */
    size_t sC = NM * C, sKV = NM * KV, sH = NM * H, sA = NM * NH * m->T;

    /* x[N,C] = token_embedding[ids] : the residual stream starts as the token's row */
    nn_embedding_forward(m->resid, ids, w->token_embedding, N, V, C);
    for (int l = 0; l < L; l++) {
        float *x = AT(m->resid, l, sC), *xn = AT(m->xn_att, l, sC);
        float *q = AT(m->q, l, sC), *k = AT(m->k, l, sKV), *v = AT(m->v, l, sKV);
        float *att = AT(m->att, l, sA), *atty = AT(m->atty, l, sC);
        float *xm = AT(m->resid_mid, l, sC), *xn2 = AT(m->xn_ffn, l, sC);
        float *h1 = AT(m->h1, l, sH), *h3 = AT(m->h3, l, sH), *hg = AT(m->hg, l, sH);
        float *xout = AT(m->resid, l + 1, sC);

        /* attention half: xm = x + Wo·attn(rope(Wq·n(x)), rope(Wk·n(x)), Wv·n(x)) */
        nn_rmsnorm_forward(xn, AT(m->rstd_att, l, NM), x, w->rms_att + (size_t)l * C, N, C,
                           NN_TF_RMS_EPS);
        nn_linear_forward(q, xn, w->wq + (size_t)l * C * C, NULL, N, C, C);
        nn_linear_forward(k, xn, w->wk + (size_t)l * KV * C, NULL, N, C, KV);
        nn_linear_forward(v, xn, w->wv + (size_t)l * KV * C, NULL, N, C, KV);
        nn_rope_forward(q, m->rope_cos, m->rope_sin, B, T, NH, HS);
        nn_rope_forward(k, m->rope_cos, m->rope_sin, B, T, NKV, HS);
        nn_attention_forward(atty, att, q, k, v, B, T, NH, NKV, HS);
        nn_linear_forward(xm, atty, w->wo + (size_t)l * C * C, NULL, N, C, C);
        for (size_t i = 0; i < (size_t)N * C; i++)
            xm[i] += x[i];

        /* MLP half: xout = xm + W2·(silu(W1·n(xm)) ⊙ W3·n(xm)) */
        nn_rmsnorm_forward(xn2, AT(m->rstd_ffn, l, NM), xm, w->rms_ffn + (size_t)l * C, N, C,
                           NN_TF_RMS_EPS);
        nn_linear_forward(h1, xn2, w->w1 + (size_t)l * H * C, NULL, N, C, H);
        nn_linear_forward(h3, xn2, w->w3 + (size_t)l * H * C, NULL, N, C, H);
        nn_swiglu_forward(hg, h1, h3, (size_t)N * H);
        nn_linear_forward(xout, hg, w->w2 + (size_t)l * C * H, NULL, N, H, C);
        for (size_t i = 0; i < (size_t)N * C; i++)
            xout[i] += xm[i];
    }
    nn_rmsnorm_forward(m->xn_final, m->rstd_final, AT(m->resid, L, sC), w->rms_final, N, C,
                       NN_TF_RMS_EPS);
    m->last_B = B;
    m->last_T = T;
}

/* The body, then the classifier. With targets, returns the mean cross-entropy and leaves the
 * probabilities in m->logits; without, leaves the logits and returns 0. */
float nn_tf_forward(nn_tf *m, const llm_weights *w, const int *ids, const int *targets, int B,
                    int T)
{
    int N = B * T, C = m->c.dim, V = m->c.vocab_size;
    nn_tf_forward_hidden(m, w, ids, B, T);
    nn_linear_forward(m->logits, m->xn_final, w->wcls, NULL, N, C, V);
    if (!targets)
        return 0.0f;
    return nn_softmax_ce_forward(m->logits, m->logits, targets, N, V);
}

/* Backward of the last forward (which had targets): the cross-entropy's gradient is written
 * over the probabilities in m->logits, and the rest is the backward from those logits. */
void nn_tf_backward(nn_tf *m, const llm_weights *w, llm_weights *g, const int *ids,
                    const int *targets, float dloss, nn_tf_grad_hook hook, void *u)
{
    int N = m->last_B * m->last_T;
    nn_softmax_ce_backward(m->logits, m->logits, targets, N, m->c.vocab_size, dloss);
    nn_tf_backward_from(m, w, g, ids, m->logits, NULL, hook, u);
}

/* Backward of the last forward from any gradient arriving at its outputs: dlogits [B,T,V]
 * (a policy-gradient term, a KL penalty, a cross-entropy with a mask...) and/or dhidden
 * [B,T,C] at the final hidden state m->xn_final (what a value or reward head reads). g (same
 * layout as w, from llm_weights_alloc) accumulates ∂loss/∂w — zero it before the first
 * micro-batch. hook(u, i) is called as tensor i (nn_tf_tensor) is complete. */
void nn_tf_backward_from(nn_tf *m, const llm_weights *w, llm_weights *g, const int *ids,
                         const float *dlogits, const float *dhidden, nn_tf_grad_hook hook,
                         void *u)
{
    const llm_config *c = &m->c;
    int L = c->n_layers, C = c->dim, KV = c->kv_dim, H = c->hidden_dim, V = c->vocab_size;
    int NH = c->n_heads, NKV = c->n_kv_heads, HS = c->head_size;
    int B = m->last_B, T = m->last_T, N = B * T;
    size_t NM = (size_t)m->B * m->T;
    size_t sC = NM * C, sKV = NM * KV, sH = NM * H, sA = NM * NH * m->T;
    size_t nC = (size_t)N * C;
    float *dx = m->d_resid, *dxn = m->d_xn, *dt = m->d_tmp;

    /* logits → the final hidden state (+ what the heads send there) → the final norm: dx is
     * then the gradient of the residual stream's end */
    if (dlogits)
        nn_linear_backward(dxn, g->wcls, NULL, dlogits, m->xn_final, w->wcls, N, C, V);
    else
        memset(dxn, 0, nC * sizeof(float));
    if (dhidden)
        for (size_t i = 0; i < nC; i++)
            dxn[i] += dhidden[i];
    nn_rmsnorm_backward(dx, g->rms_final, dxn, AT(m->resid, L, sC), w->rms_final,
                        m->rstd_final, N, C);
    if (hook) {
        hook(u, 9 * L + 1);
        if (!c->shared_classifier)
            hook(u, 9 * L + 2);
    }
    for (int l = L - 1; l >= 0; l--) {
        float *x = AT(m->resid, l, sC), *xn = AT(m->xn_att, l, sC);
        float *q = AT(m->q, l, sC), *k = AT(m->k, l, sKV), *v = AT(m->v, l, sKV);
        float *att = AT(m->att, l, sA), *atty = AT(m->atty, l, sC);
        float *xm = AT(m->resid_mid, l, sC), *xn2 = AT(m->xn_ffn, l, sC);
        float *h1 = AT(m->h1, l, sH), *h3 = AT(m->h3, l, sH), *hg = AT(m->hg, l, sH);
        const float *w1 = w->w1 + (size_t)l * H * C, *w3 = w->w3 + (size_t)l * H * C;
        const float *wq = w->wq + (size_t)l * C * C, *wk = w->wk + (size_t)l * KV * C;
        const float *wv = w->wv + (size_t)l * KV * C;

        /* MLP half, reversed: the residual add passes dx through unchanged and into W2 */
        nn_linear_backward(m->d_hg, g->w2 + (size_t)l * C * H, NULL, dx, hg,
                           w->w2 + (size_t)l * C * H, N, H, C);
        nn_swiglu_backward(m->d_h1, m->d_h3, m->d_hg, h1, h3, (size_t)N * H);
        nn_linear_backward(dxn, g->w1 + (size_t)l * H * C, NULL, m->d_h1, xn2, w1, N, C, H);
        nn_gemm(1, 0, H, C, N, 1.0f, m->d_h3, H, xn2, C, 1.0f, g->w3 + (size_t)l * H * C, C);
        nn_gemm(0, 0, N, C, H, 1.0f, m->d_h3, H, w3, C, 1.0f, dxn, C);  /* dxn += dh3·W3 */
        nn_rmsnorm_backward(dt, g->rms_ffn + (size_t)l * C, dxn, xm, w->rms_ffn + (size_t)l * C,
                            AT(m->rstd_ffn, l, NM), N, C);
        for (size_t i = 0; i < nC; i++)
            dx[i] += dt[i];                  /* dx is now ∂loss/∂xm */

        /* attention half, reversed */
        nn_linear_backward(dt, g->wo + (size_t)l * C * C, NULL, dx, atty,
                           w->wo + (size_t)l * C * C, N, C, C);
        nn_attention_backward(m->dq, m->dk, m->dv, m->d_att, dt, att, q, k, v, B, T, NH, NKV,
                              HS);
        nn_rope_backward(m->dq, m->rope_cos, m->rope_sin, B, T, NH, HS);
        nn_rope_backward(m->dk, m->rope_cos, m->rope_sin, B, T, NKV, HS);
        nn_linear_backward(dxn, g->wq + (size_t)l * C * C, NULL, m->dq, xn, wq, N, C, C);
        nn_gemm(1, 0, KV, C, N, 1.0f, m->dk, KV, xn, C, 1.0f, g->wk + (size_t)l * KV * C, C);
        nn_gemm(0, 0, N, C, KV, 1.0f, m->dk, KV, wk, C, 1.0f, dxn, C);
        nn_gemm(1, 0, KV, C, N, 1.0f, m->dv, KV, xn, C, 1.0f, g->wv + (size_t)l * KV * C, C);
        nn_gemm(0, 0, N, C, KV, 1.0f, m->dv, KV, wv, C, 1.0f, dxn, C);
        nn_rmsnorm_backward(dt, g->rms_att + (size_t)l * C, dxn, x, w->rms_att + (size_t)l * C,
                            AT(m->rstd_att, l, NM), N, C);
        for (size_t i = 0; i < nC; i++)
            dx[i] += dt[i];                  /* dx is now ∂loss/∂x of layer l */
        if (hook)                            /* layer l's slices, last kind first */
            for (int kind = 8; kind >= 0; kind--)
                hook(u, 1 + kind * L + l);
    }
    nn_embedding_backward(g->token_embedding, dx, ids, N, V, C);
    if (hook)
        hook(u, 0);
}
