/* test_rl_numerics.c - what reinforcement learning needs from core/nn, against independent
 * references: log-softmax and per-token log-probabilities against their definitions in
 * double, the KL estimators k1, k2, k3 against their formulas and (k1, k3) against the exact
 * KL of two distributions by sampling, the masked and weighted cross-entropy against the
 * plain one on the kept rows, the scalar head against loops; and every backward against
 * central finite differences, the transformer's backward from any dlogits and from the final
 * hidden state included (an RL objective through the whole model: policy gradient, KL
 * penalty, value head), under the reference, OpenBLAS and batch-invariant GEMM kernels. */
#include "../../core/nn/transformer.h"
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void fill(float *x, size_t n, float scale, mlsys_rng *r)
{
    for (size_t i = 0; i < n; i++)
        x[i] = (float)(scale * mlsys_rng_normal(r));
}

/* The gradient checker's floor: 5% of the largest analytic entry (float noise in the loss,
 * divided by 2h, would otherwise swamp the tiny entries; anything off by more than 0.05% of
 * the tensor's scale still fails). */
static double grad_floor(const float *g, size_t n)
{
    double m = 0.0;
    for (size_t i = 0; i < n; i++)
        m = fmax(m, fabs(g[i]));
    return fmax(0.05 * m, 1e-6);
}

#define TOL 1e-2
static const nn_gemm_kernel kernels[3] = {NN_GEMM_REF, NN_GEMM_BLAS, NN_GEMM_INVARIANT};

/* Loop tests run _i under kernel _i (BLAS skipped where it is not built in). */
static int use_kernel(int i)
{
    if (kernels[i] == NN_GEMM_BLAS && !nn_have_blas())
        return 0;
    ck_assert_int_eq(nn_set_gemm_kernel(kernels[i]), 0);
    return 1;
}

/* ---- per-row terms: one context, one loss per kind ---- */
enum { B = 7, C = 11 };

typedef struct row_ctx {
    int kind;                    /* 0 log-softmax, 1 logprob, 2 masked CE, 3 KL (k in kl) */
    float x[B * C], y[B * C], coef[B * C];
    int tok[B];
    unsigned char mask[B];
    float weight[B];
    float lp[B], lq[B];          /* KL: the two log-prob sets */
    nn_kl_kind kl;
} row_ctx;

/* The loss in double from the float forward: Σ coef · output. */
static double row_loss(void *u)
{
    row_ctx *c = u;
    double tot = 0.0;
    float out[B * C];
    switch (c->kind) {
    case 0:
        nn_log_softmax_forward(out, c->x, B, C);
        for (int i = 0; i < B * C; i++)
            tot += (double)c->coef[i] * out[i];
        break;
    case 1:
        nn_logprob_forward(out, c->x, c->tok, c->mask, B, C);
        for (int r = 0; r < B; r++)
            tot += (double)c->coef[r] * out[r];
        break;
    case 2:
        tot = nn_softmax_ce_masked(out, c->x, c->tok, c->mask, c->weight, B, C, 1.0f);
        break;
    default:
        nn_kl_forward(out, c->lp, c->lq, c->mask, B, c->kl);
        for (int r = 0; r < B; r++)
            tot += (double)c->coef[r] * out[r];
        break;
    }
    return tot;
}

static void row_setup(row_ctx *c, int kind, uint64_t seed)
{
    mlsys_rng r;
    mlsys_rng_seed(&r, seed);
    memset(c, 0, sizeof *c);
    c->kind = kind;
    fill(c->x, B * C, 2.0f, &r);
    fill(c->coef, B * C, 1.0f, &r);
    for (int i = 0; i < B; i++) {
        c->tok[i] = (int)(mlsys_rng_u64(&r) % C);
        c->mask[i] = i % 3 != 1;           /* rows 1 and 4 dropped */
        c->weight[i] = (float)(mlsys_rng_uniform(&r) * 3.0 - 1.0);   /* negative ones too */
        c->lp[i] = (float)(-0.5 - mlsys_rng_uniform(&r));
        c->lq[i] = c->lp[i] + (float)(0.8 * mlsys_rng_normal(&r));
    }
    for (int i = 0; i < B; i++)
        if (!c->mask[i])
            c->tok[i] = -1000000;          /* a dropped row's token must never be read */
}

static void report(const char *what, const nn_gradcheck_result *res, double e)
{
    printf("gradcheck %-22s max rel err %.2e over %zu entries %s\n", what, e, res->checked,
           e < TOL ? "OK" : "NOT OK");
    ck_assert_msg(e < TOL, "%s: rel err %g at %zu (analytic %g numeric %g)", what, e,
                  res->worst, res->worst_analytic, res->worst_numeric);
}

START_TEST(log_softmax_and_logprob)
{
    row_ctx c;
    row_setup(&c, 0, 1);
    c.x[3] = 60.0f, c.x[4] = -70.0f;       /* a row with large logits stays finite */
    /* forward against the definition in double */
    nn_log_softmax_forward(c.y, c.x, B, C);
    for (int r = 0; r < B; r++) {
        double m = -INFINITY, s = 0;
        for (int k = 0; k < C; k++)
            m = fmax(m, c.x[r * C + k]);
        for (int k = 0; k < C; k++)
            s += exp(c.x[r * C + k] - m);
        for (int k = 0; k < C; k++) {
            double want = c.x[r * C + k] - m - log(s);
            ck_assert_msg(fabs(c.y[r * C + k] - want) <= 1e-6 * fmax(1, fabs(want)),
                          "log_softmax[%d,%d] = %g, want %g", r, k, c.y[r * C + k], want);
        }
    }
    /* backward: Σ coef·y */
    float an[B * C];
    nn_log_softmax_backward(an, c.coef, c.y, B, C);
    nn_gradcheck_result res;
    report("log_softmax", &res, nn_gradcheck(row_loss, &c, c.x, an, B * C, 1e-2f,
                                             grad_floor(an, B * C), 0, &res));

    /* log-probabilities of the given tokens, with the mask: the kept rows pick their token
     * out of the log-softmax; the dropped rows give 0 and never read their token */
    c.kind = 1;
    float lp[B];
    nn_logprob_forward(lp, c.x, c.tok, c.mask, B, C);
    for (int r = 0; r < B; r++) {
        if (!c.mask[r]) {
            ck_assert(lp[r] == 0.0f);
            continue;
        }
        ck_assert_msg(fabs(lp[r] - c.y[r * C + c.tok[r]]) <= 1e-6 * fmax(1, fabs(lp[r])),
                      "logprob row %d: %g vs log_softmax %g", r, lp[r], c.y[r * C + c.tok[r]]);
    }
    nn_logprob_backward(an, c.coef, c.x, c.tok, c.mask, B, C);
    for (int r = 0; r < B; r++)
        for (int k = 0; !c.mask[r] && k < C; k++)
            ck_assert(an[r * C + k] == 0.0f);
    report("logprob (masked)", &res, nn_gradcheck(row_loss, &c, c.x, an, B * C, 1e-2f,
                                                  grad_floor(an, B * C), 0, &res));
    /* in place: dlogits written over the logits gives the same */
    float inplace[B * C];
    memcpy(inplace, c.x, sizeof inplace);
    nn_logprob_backward(inplace, c.coef, inplace, c.tok, c.mask, B, C);
    ck_assert(!memcmp(inplace, an, sizeof inplace));
}
END_TEST

/* KL(p ‖ q) of two categorical distributions, exactly, and by the estimators on tokens drawn
 * from p: k1 and k3 are unbiased (their means agree with the exact value within 5 standard
 * errors), k2 and k3 are never negative; had an estimator the direction backwards (log q/p,
 * or samples from q), its mean would land on KL(q ‖ p), which is chosen far away. */
START_TEST(kl_estimators)
{
    /* forward against the formulas in double, with the mask; k3 accurate for close
     * policies (d = 1e-4: e^{-d} - 1 + d = d²/2 - d³/6 + ..., no cancellation) */
    row_ctx c;
    row_setup(&c, 3, 2);
    c.lp[0] = -1.0f, c.lq[0] = -1.0001f;
    for (int k = NN_KL_K1; k <= NN_KL_K3; k++) {
        float kl[B];
        nn_kl_forward(kl, c.lp, c.lq, c.mask, B, (nn_kl_kind)k);
        for (int r = 0; r < B; r++) {
            double d = (double)c.lp[r] - c.lq[r];
            double want = !c.mask[r] ? 0 : k == 1 ? d : k == 2 ? d * d / 2 : exp(-d) - 1 + d;
            if (k == 3 && r == 0)
                want = d * d / 2 - d * d * d / 6 + d * d * d * d / 24;
            ck_assert_msg(fabs(kl[r] - want) <= 1e-6 * fabs(want) + 1e-12,
                          "%s row %d: %.9g, want %.9g", nn_kl_name((nn_kl_kind)k), r, kl[r],
                          want);
            if (k != 1)
                ck_assert(kl[r] >= 0.0f);
        }
        /* backward through lp and through lq */
        c.kl = (nn_kl_kind)k;
        float dlp[B], dlq[B];
        nn_kl_backward(dlp, dlq, c.coef, c.lp, c.lq, c.mask, B, (nn_kl_kind)k);
        for (int r = 0; r < B; r++) {
            ck_assert(dlq[r] == -dlp[r]);
            ck_assert(c.mask[r] || dlp[r] == 0.0f);
        }
        char what[32];
        nn_gradcheck_result res;
        snprintf(what, sizeof what, "kl %s d/dlp", nn_kl_name((nn_kl_kind)k));
        report(what, &res, nn_gradcheck(row_loss, &c, c.lp, dlp, B, 1e-2f, grad_floor(dlp, B),
                                        0, &res));
        snprintf(what, sizeof what, "kl %s d/dlq", nn_kl_name((nn_kl_kind)k));
        report(what, &res, nn_gradcheck(row_loss, &c, c.lq, dlq, B, 1e-2f, grad_floor(dlq, B),
                                        0, &res));
    }

    /* by sampling */
    enum { K = 6, S = 200000 };
    double p[K] = {0.35, 0.25, 0.15, 0.12, 0.08, 0.05}, q[K] = {0.05, 0.1, 0.15, 0.2, 0.2, 0.3};
    double kl_pq = 0, kl_qp = 0;
    for (int i = 0; i < K; i++) {
        kl_pq += p[i] * log(p[i] / q[i]);
        kl_qp += q[i] * log(q[i] / p[i]);
    }
    mlsys_rng r;
    mlsys_rng_seed(&r, 3);
    float *lp = malloc(sizeof(float) * S), *lq = malloc(sizeof(float) * S);
    float *kl = malloc(sizeof(float) * S);
    for (int s = 0; s < S; s++) {
        double u = mlsys_rng_uniform(&r), acc = 0;
        int x = K - 1;
        for (int i = 0; i < K; i++)
            if (u < (acc += p[i])) {
                x = i;
                break;
            }
        lp[s] = (float)log(p[x]);
        lq[s] = (float)log(q[x]);
    }
    printf("KL(p || q) = %.5f exactly (KL(q || p) = %.5f); by %d samples from p:", kl_pq,
           kl_qp, S);
    for (int k = NN_KL_K1; k <= NN_KL_K3; k++) {
        nn_kl_forward(kl, lp, lq, NULL, S, (nn_kl_kind)k);
        double mean = nn_masked_mean(kl, NULL, S), var = 0;
        for (int s = 0; s < S; s++)
            var += (kl[s] - mean) * (kl[s] - mean);
        double se = sqrt(var / (S - 1) / S);
        printf(" %s %.5f (se %.5f)", nn_kl_name((nn_kl_kind)k), mean, se);
        if (k != NN_KL_K2) {
            ck_assert_msg(fabs(mean - kl_pq) < 5 * se, "%s is biased: %g vs %g",
                          nn_kl_name((nn_kl_kind)k), mean, kl_pq);
            ck_assert(fabs(mean - kl_qp) > 20 * se);
        }
    }
    printf(" OK\n");
    free(lp);
    free(lq);
    free(kl);
}
END_TEST

START_TEST(masked_weighted_cross_entropy)
{
    row_ctx c;
    row_setup(&c, 2, 4);
    float d1[B * C], d2[B * C];
    /* no mask, no weights: the plain fused cross-entropy, bit for bit */
    int tok[B];
    for (int r = 0; r < B; r++)
        tok[r] = (r * 5 + 1) % C;
    float l1 = nn_softmax_ce_masked(d1, c.x, tok, NULL, NULL, B, C, 0.7f);
    float l2 = nn_softmax_ce(d2, c.x, tok, B, C, 0.7f);
    ck_assert(l1 == l2 && !memcmp(d1, d2, sizeof d1));
    /* a mask with unit weights: the plain cross-entropy over the kept rows only, bit for bit
     * (the dropped rows' gradients are zero) */
    float kept[B * C], dk[B * C];
    int tk[B], n = 0;
    for (int r = 0; r < B; r++)
        if (c.mask[r]) {
            memcpy(kept + n * C, c.x + r * C, sizeof(float) * C);
            tk[n++] = c.tok[r];
        }
    l1 = nn_softmax_ce_masked(d1, c.x, c.tok, c.mask, NULL, B, C, 1.0f);
    l2 = nn_softmax_ce(dk, kept, tk, n, C, 1.0f);
    ck_assert_msg(l1 == l2, "masked %g, kept rows %g", l1, l2);
    for (int r = 0, k = 0; r < B; r++) {
        if (!c.mask[r]) {
            for (int j = 0; j < C; j++)
                ck_assert(d1[r * C + j] == 0.0f);
            continue;
        }
        ck_assert(!memcmp(d1 + r * C, dk + k++ * C, sizeof(float) * C));
    }
    /* weights (negative ones too) against the definition in double, and the backward */
    float lw = nn_softmax_ce_masked(d1, c.x, c.tok, c.mask, c.weight, B, C, 1.0f);
    double want = 0;
    for (int r = 0; r < B; r++) {
        if (!c.mask[r])
            continue;
        double m = -INFINITY, s = 0;
        for (int j = 0; j < C; j++)
            m = fmax(m, c.x[r * C + j]);
        for (int j = 0; j < C; j++)
            s += exp(c.x[r * C + j] - m);
        want += c.weight[r] * (m + log(s) - c.x[r * C + c.tok[r]]);
    }
    want /= n;
    ck_assert_msg(fabs(lw - want) < 1e-5 * fmax(1, fabs(want)), "weighted ce %g, want %g", lw,
                  want);
    nn_gradcheck_result res;
    report("ce (mask, weights)", &res, nn_gradcheck(row_loss, &c, c.x, d1, B * C, 1e-2f,
                                                    grad_floor(d1, B * C), 0, &res));
    /* every row dropped: nothing to learn from */
    unsigned char none[B] = {0};
    ck_assert(nn_softmax_ce_masked(d1, c.x, c.tok, none, c.weight, B, C, 1.0f) == 0.0f);
    for (int i = 0; i < B * C; i++)
        ck_assert(d1[i] == 0.0f);
    /* the masked mean and its backward */
    float x[B] = {1, 2, 3, 4, 5, 6, 7}, dx[B];
    ck_assert(fabsf(nn_masked_mean(x, c.mask, B) - (1 + 3 + 4 + 6 + 7) / 5.0f) < 1e-6f);
    ck_assert(nn_masked_mean(x, none, B) == 0.0f);
    nn_masked_mean_backward(dx, c.mask, B, 2.0f);
    for (int r = 0; r < B; r++)
        ck_assert(dx[r] == (c.mask[r] ? 2.0f / 5 : 0.0f));
}
END_TEST

/* ---- the scalar head ---- */
typedef struct head_ctx {
    float h[B * 9], w[9], b, coef[B], v[B];
    int which;
} head_ctx;

static double head_loss(void *u)
{
    head_ctx *c = u;
    nn_scalar_head_forward(c->v, c->h, c->w, &c->b, B, 9);
    double tot = 0;
    for (int r = 0; r < B; r++)
        tot += (double)c->coef[r] * c->v[r];
    return tot;
}

START_TEST(scalar_head)
{
    if (!use_kernel(_i))
        return;
    head_ctx c;
    mlsys_rng r;
    mlsys_rng_seed(&r, 5);
    fill(c.h, B * 9, 1.0f, &r);
    fill(c.w, 9, 1.0f, &r);
    fill(c.coef, B, 1.0f, &r);
    c.b = 0.3f;
    head_loss(&c);
    for (int n = 0; n < B; n++) {
        double s = c.b;
        for (int k = 0; k < 9; k++)
            s += (double)c.h[n * 9 + k] * c.w[k];
        ck_assert(fabs(c.v[n] - s) < 1e-5);
    }
    float dh[B * 9], dw[9] = {0}, db = 0;
    nn_scalar_head_backward(dh, dw, &db, c.coef, c.h, c.w, B, 9);
    nn_gradcheck_result res;
    report("scalar head dh", &res,
           nn_gradcheck(head_loss, &c, c.h, dh, B * 9, 1e-2f, grad_floor(dh, B * 9), 0, &res));
    report("scalar head dw", &res,
           nn_gradcheck(head_loss, &c, c.w, dw, 9, 1e-2f, grad_floor(dw, 9), 0, &res));
    report("scalar head db", &res, nn_gradcheck(head_loss, &c, &c.b, &db, 1, 1e-2f, 1e-6, 0,
                                                &res));
}
END_TEST

/* ---- the transformer, backward from any dlogits and from the final hidden state ----
 * An RL step's objective on a small model (B sequences of T tokens, the actions being the
 * next tokens, the first two positions of each sequence masked as "prompt"):
 *   L = mean_kept( -A·logπ(a) + β·k3(logπ(a), lq) ) + ½·mean_kept( (v - R)² )
 * with advantages A, reference log-probs lq and returns R fixed, v = the scalar head on the
 * final hidden state. Its gradient flows through dlogits (policy and KL) and dhidden (value)
 * at once; checked by directional finite differences per tensor (as test_transformer does
 * for the cross-entropy) and entry by entry on the head. */
enum { TB = 2, TT = 6 };
typedef struct tf_ctx {
    nn_tf m;
    llm_config c;
    llm_weights w, g;
    int ids[TB * TT], act[TB * TT];
    unsigned char mask[TB * TT];
    float adv[TB * TT], lq[TB * TT], ret[TB * TT];
    float wv[16], bv, gwv[16], gbv;
    int with_value, with_policy;
} tf_ctx;

static double tf_loss(void *u)
{
    tf_ctx *x = u;
    int N = TB * TT, V = x->c.vocab_size;
    float lp[TB * TT], kl[TB * TT], v[TB * TT], t[TB * TT];
    nn_tf_forward(&x->m, &x->w, x->ids, NULL, TB, TT);
    double loss = 0;
    if (x->with_policy) {
        nn_logprob_forward(lp, x->m.logits, x->act, x->mask, N, V);
        nn_kl_forward(kl, lp, x->lq, x->mask, N, NN_KL_K3);
        for (int i = 0; i < N; i++)
            t[i] = -x->adv[i] * lp[i] + 0.1f * kl[i];
        loss += nn_masked_mean(t, x->mask, N);
    }
    if (x->with_value) {
        nn_scalar_head_forward(v, x->m.xn_final, x->wv, &x->bv, N, x->c.dim);
        for (int i = 0; i < N; i++)
            t[i] = 0.5f * (v[i] - x->ret[i]) * (v[i] - x->ret[i]);
        loss += nn_masked_mean(t, x->mask, N);
    }
    return loss;
}

/* The analytic gradient, composed from the pieces' backwards. */
static void tf_grad(tf_ctx *x)
{
    int N = TB * TT, V = x->c.vocab_size, D = x->c.dim;
    float lp[TB * TT], dt[TB * TT], dlp[TB * TT], dkl[TB * TT], v[TB * TT], dv[TB * TT];
    memset(x->g.mem, 0, x->g.n_floats * sizeof(float));
    memset(x->gwv, 0, sizeof x->gwv);
    x->gbv = 0;
    nn_tf_forward(&x->m, &x->w, x->ids, NULL, TB, TT);
    nn_masked_mean_backward(dt, x->mask, N, 1.0f);
    const float *dlogits = NULL, *dhidden = NULL;
    if (x->with_policy) {
        nn_logprob_forward(lp, x->m.logits, x->act, x->mask, N, V);
        for (int i = 0; i < N; i++)
            dkl[i] = 0.1f * dt[i];
        nn_kl_backward(dlp, NULL, dkl, lp, x->lq, x->mask, N, NN_KL_K3);
        for (int i = 0; i < N; i++)
            dlp[i] += -x->adv[i] * dt[i];
        /* the logits' gradient written over the logits themselves */
        nn_logprob_backward(x->m.logits, dlp, x->m.logits, x->act, x->mask, N, V);
        dlogits = x->m.logits;
    }
    if (x->with_value) {
        nn_scalar_head_forward(v, x->m.xn_final, x->wv, &x->bv, N, D);
        for (int i = 0; i < N; i++)
            dv[i] = dt[i] * (v[i] - x->ret[i]);
        nn_scalar_head_backward(x->m.d_hidden, x->gwv, &x->gbv, dv, x->m.xn_final, x->wv, N, D);
        dhidden = x->m.d_hidden;
    }
    nn_tf_backward_from(&x->m, &x->w, &x->g, x->ids, dlogits, dhidden, NULL, NULL);
}

static void tf_setup(tf_ctx *x, int shared)
{
    memset(x, 0, sizeof *x);
    llm_config c = {.dim = 16, .hidden_dim = 24, .n_layers = 2, .n_heads = 4, .n_kv_heads = 2,
                    .vocab_size = 32, .seq_len = 8, .shared_classifier = shared};
    char err[256];
    ck_assert_msg(llm_config_check(&c, err, sizeof err) == 0, "%s", err);
    x->c = c;
    ck_assert(llm_weights_alloc(&x->w, &c, err, sizeof err) == 0);
    ck_assert(llm_weights_alloc(&x->g, &c, err, sizeof err) == 0);
    ck_assert(nn_tf_init(&x->m, &c, TB, TT) == 0);
    mlsys_rng r;
    mlsys_rng_seed(&r, 40 + shared);
    size_t off[12], len[12];
    int nr = llm_weights_param_ranges(&c, off, len);
    for (int k = 0; k < nr; k++)
        fill(x->w.mem + off[k], len[k], k == 0 ? 1.0f : 0.3f, &r);
    for (int i = 0; i < c.n_layers * c.dim; i++) {
        x->w.rms_att[i] += 1.0f;
        x->w.rms_ffn[i] += 1.0f;
    }
    for (int i = 0; i < c.dim; i++)
        x->w.rms_final[i] += 1.0f;
    fill(x->wv, 16, 0.5f, &r);
    x->bv = 0.2f;
    for (int i = 0; i < TB * TT; i++) {
        x->ids[i] = (int)(mlsys_rng_u64(&r) % 32);
        x->mask[i] = i % TT >= 2;
        x->act[i] = x->mask[i] ? (int)(mlsys_rng_u64(&r) % 32) : -1;
        x->adv[i] = (float)mlsys_rng_normal(&r);
        x->lq[i] = (float)(-3.5 + 0.5 * mlsys_rng_normal(&r));
        x->ret[i] = (float)mlsys_rng_normal(&r);
    }
}

static void tf_teardown(tf_ctx *x)
{
    nn_tf_fini(&x->m);
    llm_weights_free(&x->w);
    llm_weights_free(&x->g);
}

/* For a random unit direction d inside tensor i: (L(w + h·d) - L(w - h·d)) / 2h = g·d. */
static double tf_direction(tf_ctx *x, int i, char *name, size_t namelen)
{
    size_t off, n;
    nn_tf_tensor(&x->c, &x->w, i, &off, &n, name, namelen);
    float *d = malloc(n * sizeof(float)), *w = x->w.mem + off, *save = malloc(n * sizeof(float));
    mlsys_rng r;
    mlsys_rng_seed(&r, 700 + (uint64_t)i);
    fill(d, n, 1.0f, &r);
    double norm = sqrt(nn_sumsq(d, n)), an = 0;
    for (size_t k = 0; k < n; k++) {
        d[k] = (float)(d[k] / norm);
        an += (double)d[k] * x->g.mem[off + k];
    }
    float h = 1e-2f;
    memcpy(save, w, n * sizeof(float));
    for (size_t k = 0; k < n; k++)
        w[k] = save[k] + h * d[k];
    double lp = tf_loss(x);
    for (size_t k = 0; k < n; k++)
        w[k] = save[k] - h * d[k];
    double lm = tf_loss(x);
    memcpy(w, save, n * sizeof(float));
    free(d);
    free(save);
    double num = (lp - lm) / (2.0 * h);
    return fabs(an - num) / fmax(fmax(fabs(an), fabs(num)), 1e-2);
}

static void tf_check(int shared, int policy, int value, int kern)
{
    tf_ctx x;
    tf_setup(&x, shared);
    x.with_policy = policy;
    x.with_value = value;
    tf_grad(&x);
    int nt = nn_tf_tensor_count(&x.c);
    double worst = 0;
    char name[48], wname[48] = "";
    for (int i = 0; i < nt; i++) {
        double e = tf_direction(&x, i, name, sizeof name);
        if (e > worst) {
            worst = e;
            snprintf(wname, sizeof wname, "%s", name);
        }
    }
    /* entry by entry where float noise is small: the final norm, and the head */
    size_t off, n;
    nn_tf_tensor(&x.c, &x.w, 9 * x.c.n_layers + 1, &off, &n, NULL, 0);
    nn_gradcheck_result res;
    double e = nn_gradcheck(tf_loss, &x, x.w.mem + off, x.g.mem + off, n, 1e-2f, 1e-3, 0, &res);
    double eh = 0;
    if (value) {
        eh = fmax(nn_gradcheck(tf_loss, &x, x.wv, x.gwv, 16, 1e-2f, 1e-3, 0, &res),
                  nn_gradcheck(tf_loss, &x, &x.bv, &x.gbv, 1, 1e-2f, 1e-3, 0, &res));
    }
    /* without a policy term nothing reaches a separate classifier */
    if (!policy && !shared) {
        nn_tf_tensor(&x.c, &x.w, 9 * x.c.n_layers + 2, &off, &n, NULL, 0);
        for (size_t k = 0; k < n; k++)
            ck_assert(x.g.mem[off + k] == 0.0f);
    }
    printf("gradcheck RL objective (%s%s%s, %s, %s): %d tensors by direction, worst %.3g (%s); "
           "rms_final %.3g, head %.3g %s\n", policy ? "policy+KL" : "", policy && value ? " + " : "",
           value ? "value" : "", shared ? "tied" : "untied", nn_gemm_kernel_name(kernels[kern]),
           nt, worst, wname, e, eh, worst < TOL && e < TOL && eh < TOL ? "OK" : "NOT OK");
    ck_assert_msg(worst < TOL, "direction check of %s: rel err %g", wname, worst);
    ck_assert(e < TOL && eh < TOL);
    tf_teardown(&x);
}

START_TEST(transformer_backward_rl)
{
    if (!use_kernel(_i))
        return;
    tf_check(1, 1, 1, _i);
    tf_check(0, 1, 1, _i);
    tf_check(0, 0, 1, _i);      /* from the final hidden state alone */
    tf_check(1, 1, 0, _i);      /* from the logits alone */
}
END_TEST

/* The cross-entropy backward is the backward from the cross-entropy's dlogits: the same
 * gradients, bit for bit, as nn_tf_backward computes. */
START_TEST(backward_from_equals_backward)
{
    if (!use_kernel(_i))
        return;
    tf_ctx x;
    tf_setup(&x, 0);
    int N = TB * TT, V = x.c.vocab_size;
    float *ga = malloc(x.g.n_floats * sizeof(float));
    memset(x.g.mem, 0, x.g.n_floats * sizeof(float));
    nn_tf_forward(&x.m, &x.w, x.ids, x.ids, TB, TT);
    nn_tf_backward(&x.m, &x.w, &x.g, x.ids, x.ids, 0.5f, NULL, NULL);
    memcpy(ga, x.g.mem, x.g.n_floats * sizeof(float));
    memset(x.g.mem, 0, x.g.n_floats * sizeof(float));
    nn_tf_forward(&x.m, &x.w, x.ids, NULL, TB, TT);
    nn_softmax_ce_forward(x.m.logits, x.m.logits, x.ids, N, V);
    nn_softmax_ce_backward(x.m.logits, x.m.logits, x.ids, N, V, 0.5f);
    nn_tf_backward_from(&x.m, &x.w, &x.g, x.ids, x.m.logits, NULL, NULL, NULL);
    ck_assert(!memcmp(ga, x.g.mem, x.g.n_floats * sizeof(float)));
    free(ga);
    tf_teardown(&x);
}
END_TEST

int main(int argc, char **argv)
{
    (void)argc;
    nn_gemm_start(argv);
    Suite *s = suite_create("rl_numerics");
    TCase *tc = tcase_create("terms");
    tcase_add_test(tc, log_softmax_and_logprob);
    tcase_add_test(tc, kl_estimators);
    tcase_add_test(tc, masked_weighted_cross_entropy);
    tcase_add_loop_test(tc, scalar_head, 0, 3);
    suite_add_tcase(s, tc);
    tc = tcase_create("transformer");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, transformer_backward_rl, 0, 3);
    tcase_add_loop_test(tc, backward_from_equals_backward, 0, 3);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
