/* test_transformer.c - the Llama-style transformer of core/nn against independent references:
 * RoPE against run.c's loop, attention against a direct triple loop, and every new layer and
 * the whole model (tied and untied classifier, both GEMM kernels) against central finite
 * differences. Tiny configurations: the suite runs in seconds. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../../core/nn/transformer.h"

static void fill(float *x, size_t n, float scale, uint64_t seed)
{
    mlsys_rng r;
    mlsys_rng_seed(&r, seed);
    for (size_t i = 0; i < n; i++)
        x[i] = (float)(mlsys_rng_normal(&r) * scale);
}

/* ---- RoPE ---- */

START_TEST(rope_matches_run_c)
{
    /* run.c rotates q (and k while i < kv_dim) of the token at pos with, for each even i,
     * freq = 1 / 10000^((i % hs) / hs), angle = pos · freq; written here straight from that
     * description */
    enum { B = 2, T = 5, NX = 3, HS = 8 };
    float x[B * T * NX * HS], ref[B * T * NX * HS], cs[T * HS / 2], sn[T * HS / 2];
    fill(x, B * T * NX * HS, 1.0f, 1);
    memcpy(ref, x, sizeof x);
    nn_rope_table(cs, sn, T, HS);
    nn_rope_forward(x, cs, sn, B, T, NX, HS);
    double worst = 0;
    for (int b = 0; b < B; b++)
        for (int pos = 0; pos < T; pos++) {
            float *vec = ref + ((size_t)b * T + pos) * NX * HS;
            for (int i = 0; i < NX * HS; i += 2) {
                int head_dim = i % HS;
                float freq = 1.0f / powf(10000.0f, head_dim / (float)HS);
                float val = pos * freq, fcr = cosf(val), fci = sinf(val);
                float v0 = vec[i], v1 = vec[i + 1];
                vec[i] = v0 * fcr - v1 * fci;
                vec[i + 1] = v0 * fci + v1 * fcr;
            }
        }
    for (size_t i = 0; i < sizeof x / sizeof x[0]; i++)
        worst = fmax(worst, fabs(x[i] - ref[i]));
    printf("rope vs run.c: max diff %.3g %s\n", worst, worst < 1e-6 ? "OK" : "NOT OK");
    ck_assert(worst < 1e-6);
    /* the backward undoes the forward (a rotation is orthogonal) */
    nn_rope_backward(x, cs, sn, B, T, NX, HS);
    fill(ref, B * T * NX * HS, 1.0f, 1);
    worst = 0;
    for (size_t i = 0; i < sizeof x / sizeof x[0]; i++)
        worst = fmax(worst, fabs(x[i] - ref[i]));
    ck_assert(worst < 1e-5);
}
END_TEST

/* A layer under check: loss = Σ r ⊙ layer(inputs), the inputs in one flat buffer. */
typedef struct layer_ctx {
    int kind;                  /* 0 rope, 1 attention, 2 swiglu */
    int B, T, NH, NKV, HS;
    size_t nin, nout;
    float *in, *out, *r, *scratch;
    const float *cs, *sn;
} layer_ctx;

static void layer_fwd(layer_ctx *c)
{
    int B = c->B, T = c->T;
    if (c->kind == 0) {
        memcpy(c->out, c->in, c->nin * sizeof(float));
        nn_rope_forward(c->out, c->cs, c->sn, B, T, c->NH, c->HS);
    } else if (c->kind == 1) {
        size_t nq = (size_t)B * T * c->NH * c->HS, nk = (size_t)B * T * c->NKV * c->HS;
        nn_attention_forward(c->out, c->scratch, c->in, c->in + nq, c->in + nq + nk, B, T,
                             c->NH, c->NKV, c->HS);
    } else {
        nn_swiglu_forward(c->out, c->in, c->in + c->nout, c->nout);
    }
}

static double layer_loss(void *u)
{
    layer_ctx *c = u;
    layer_fwd(c);
    double s = 0;
    for (size_t i = 0; i < c->nout; i++)
        s += (double)c->r[i] * c->out[i];
    return s;
}

static void layer_check(layer_ctx *c, const char *what)
{
    float *grad = calloc(c->nin, sizeof(float));
    layer_fwd(c);
    if (c->kind == 0) {
        memcpy(grad, c->r, c->nin * sizeof(float));
        nn_rope_backward(grad, c->cs, c->sn, c->B, c->T, c->NH, c->HS);
    } else if (c->kind == 1) {
        size_t nq = (size_t)c->B * c->T * c->NH * c->HS, nk = (size_t)c->B * c->T * c->NKV * c->HS;
        float *tt = malloc((size_t)c->T * c->T * sizeof(float));
        nn_attention_backward(grad, grad + nq, grad + nq + nk, tt, c->r, c->scratch, c->in,
                              c->in + nq, c->in + nq + nk, c->B, c->T, c->NH, c->NKV, c->HS);
        free(tt);
    } else {
        nn_swiglu_backward(grad, grad + c->nout, c->r, c->in, c->in + c->nout, c->nout);
    }
    nn_gradcheck_result res;
    double e = nn_gradcheck(layer_loss, c, c->in, grad, c->nin, 1e-2f, 1e-3, 0, &res);
    printf("gradcheck %-10s %zu entries: max rel %.3g (abs %.3g) %s\n", what, res.checked, e,
           res.max_abs_err, e < 1e-2 ? "OK" : "NOT OK");
    ck_assert_msg(e < 1e-2, "%s: max rel err %g at %zu (analytic %g numeric %g)", what, e,
                  res.worst, res.worst_analytic, res.worst_numeric);
    free(grad);
}

START_TEST(rope_gradcheck)
{
    enum { B = 2, T = 4, NX = 2, HS = 6 };
    float cs[T * HS / 2], sn[T * HS / 2];
    nn_rope_table(cs, sn, T, HS);
    size_t n = B * T * NX * HS;
    layer_ctx c = {.kind = 0, .B = B, .T = T, .NH = NX, .HS = HS, .nin = n, .nout = n,
                   .cs = cs, .sn = sn};
    c.in = malloc(n * sizeof(float));
    c.out = malloc(n * sizeof(float));
    c.r = malloc(n * sizeof(float));
    fill(c.in, n, 1.0f, 2);
    fill(c.r, n, 1.0f, 3);
    layer_check(&c, "rope");
    free(c.in), free(c.out), free(c.r);
}
END_TEST

/* the attention of one query head against a plain loop, GQA mapping h -> h / (NH/NKV) */
static void attention_ref(float *out, const float *q, const float *k, const float *v, int B,
                          int T, int NH, int NKV, int HS)
{
    int g = NH / NKV;
    double *s = malloc((size_t)T * sizeof(double));
    for (int b = 0; b < B; b++)
        for (int h = 0; h < NH; h++)
            for (int i = 0; i < T; i++) {
                const float *qi = q + ((size_t)(b * T + i) * NH + h) * HS;
                double mx = -1e300, sum = 0;
                for (int j = 0; j <= i; j++) {
                    const float *kj = k + ((size_t)(b * T + j) * NKV + h / g) * HS;
                    double d = 0;
                    for (int e = 0; e < HS; e++)
                        d += (double)qi[e] * kj[e];
                    s[j] = d / sqrt((double)HS);
                    mx = fmax(mx, s[j]);
                }
                for (int j = 0; j <= i; j++)
                    sum += (s[j] = exp(s[j] - mx));
                for (int e = 0; e < HS; e++) {
                    double o = 0;
                    for (int j = 0; j <= i; j++)
                        o += s[j] / sum * v[((size_t)(b * T + j) * NKV + h / g) * HS + e];
                    out[((size_t)(b * T + i) * NH + h) * HS + e] = (float)o;
                }
            }
    free(s);
}

START_TEST(attention_forward_and_gradcheck)
{
    enum { B = 2, T = 5, NH = 4, NKV = 2, HS = 4 };
    size_t nq = B * T * NH * HS, nk = B * T * NKV * HS;
    layer_ctx c = {.kind = 1, .B = B, .T = T, .NH = NH, .NKV = NKV, .HS = HS,
                   .nin = nq + 2 * nk, .nout = nq};
    c.in = malloc(c.nin * sizeof(float));
    c.out = malloc(nq * sizeof(float));
    c.r = malloc(nq * sizeof(float));
    c.scratch = malloc((size_t)B * NH * T * T * sizeof(float));
    float *ref = malloc(nq * sizeof(float));
    fill(c.in, c.nin, 1.0f, 4);
    fill(c.r, nq, 1.0f, 5);
    for (int kern = 0; kern < 1 + nn_have_blas(); kern++) {
        nn_set_gemm_kernel((nn_gemm_kernel)kern);
        layer_fwd(&c);
        attention_ref(ref, c.in, c.in + nq, c.in + nq + nk, B, T, NH, NKV, HS);
        double worst = 0;
        for (size_t i = 0; i < nq; i++)
            worst = fmax(worst, fabs(c.out[i] - ref[i]));
        printf("attention (%s) vs loops: max diff %.3g %s\n",
               nn_gemm_kernel_name((nn_gemm_kernel)kern), worst, worst < 1e-5 ? "OK" : "NOT OK");
        ck_assert(worst < 1e-5);
        /* nothing attends to the future */
        for (int b = 0; b < B; b++)
            for (int h = 0; h < NH; h++)
                for (int i = 0; i < T; i++)
                    for (int j = i + 1; j < T; j++)
                        ck_assert(c.scratch[(((size_t)b * NH + h) * T + i) * T + j] == 0.0f);
        layer_check(&c, "attention");
    }
    free(c.in), free(c.out), free(c.r), free(c.scratch), free(ref);
}
END_TEST

START_TEST(swiglu_gradcheck)
{
    size_t n = 40;
    layer_ctx c = {.kind = 2, .nin = 2 * n, .nout = n};
    c.in = malloc(2 * n * sizeof(float));
    c.out = malloc(n * sizeof(float));
    c.r = malloc(n * sizeof(float));
    fill(c.in, 2 * n, 2.0f, 6);
    fill(c.r, n, 1.0f, 7);
    /* against the definition: silu(a)·b = a·b / (1 + e^-a) */
    layer_fwd(&c);
    for (size_t i = 0; i < n; i++) {
        double a = c.in[i], b = c.in[n + i];
        ck_assert(fabs(c.out[i] - a * b / (1 + exp(-a))) < 1e-5);
    }
    layer_check(&c, "swiglu");
    free(c.in), free(c.out), free(c.r);
}
END_TEST

/* ---- the whole model ---- */

typedef struct model_ctx {
    nn_tf m;
    llm_config c;
    llm_weights w, g;
    int *ids, *tgt;
    int B, T;
} model_ctx;

static void model_setup(model_ctx *x, int shared, int T)
{
    memset(x, 0, sizeof *x);
    llm_config c = {.dim = 16, .hidden_dim = 24, .n_layers = 2, .n_heads = 4, .n_kv_heads = 2,
                    .vocab_size = 32, .seq_len = 8, .shared_classifier = shared};
    char err[256];
    ck_assert_msg(llm_config_check(&c, err, sizeof err) == 0, "%s", err);
    x->c = c;
    x->B = 2;
    x->T = T;
    ck_assert(llm_weights_alloc(&x->w, &c, err, sizeof err) == 0);
    ck_assert(llm_weights_alloc(&x->g, &c, err, sizeof err) == 0);
    ck_assert(nn_tf_init(&x->m, &c, x->B, c.seq_len) == 0);
    /* larger weights than training's N(0, 0.02), so the gradients stand above float noise
     * (the embedding at unit scale: RMSNorm reads it); gains around 1 but not all equal */
    size_t off[12], len[12];
    int nr = llm_weights_param_ranges(&c, off, len);
    for (int r = 0; r < nr; r++)
        fill(x->w.mem + off[r], len[r], r == 0 ? 1.0f : 0.3f, 100 + (uint64_t)r);
    for (int i = 0; i < c.n_layers * c.dim; i++) {
        x->w.rms_att[i] += 1.0f;
        x->w.rms_ffn[i] += 1.0f;
    }
    for (int i = 0; i < c.dim; i++)
        x->w.rms_final[i] += 1.0f;
    x->ids = malloc((size_t)2 * x->B * T * sizeof(int));
    x->tgt = x->ids + x->B * T;
    mlsys_rng r;
    mlsys_rng_seed(&r, 9);
    for (int i = 0; i < x->B * T; i++) {
        x->ids[i] = (int)(mlsys_rng_u64(&r) % 32);
        x->tgt[i] = (int)(mlsys_rng_u64(&r) % 32);
    }
}

static void model_teardown(model_ctx *x)
{
    nn_tf_fini(&x->m);
    llm_weights_free(&x->w);
    llm_weights_free(&x->g);
    free(x->ids);
}

/* mean cross-entropy from the logits, in double */
static double model_loss(void *u)
{
    model_ctx *x = u;
    int V = x->c.vocab_size, N = x->B * x->T;
    nn_tf_forward(&x->m, &x->w, x->ids, NULL, x->B, x->T);
    double tot = 0;
    for (int i = 0; i < N; i++) {
        const float *row = x->m.logits + (size_t)i * V;
        double mx = row[0], s = 0;
        for (int v = 1; v < V; v++)
            mx = fmax(mx, row[v]);
        for (int v = 0; v < V; v++)
            s += exp(row[v] - mx);
        tot += log(s) + mx - row[x->tgt[i]];
    }
    return tot / N;
}

static int hook_calls[64];
static void count_hook(void *u, int i)
{
    (void)u;
    hook_calls[i]++;
}

/* Directional finite differences, one per tensor: for a random unit direction d inside tensor
 * i, (L(w + h·d) - L(w - h·d)) / 2h must equal the analytic g·d. Summing over the whole
 * tensor lifts the signal far above float noise, where single entries of a deep float32
 * model drown in it (the single-entry check runs on the top of the model below); a wiring
 * mistake anywhere (a missing residual path, a transposed weight) shows as an O(1) error. */
static double directional_check(model_ctx *x, int i, float h, char *name, size_t namelen)
{
    size_t off, n;
    nn_tf_tensor(&x->c, &x->w, i, &off, &n, name, namelen);
    float *d = malloc(n * sizeof(float)), *w = x->w.mem + off;
    fill(d, n, 1.0f, 1000 + (uint64_t)i);
    double norm = sqrt(nn_sumsq(d, n)), an = 0;
    for (size_t k = 0; k < n; k++) {
        d[k] = (float)(d[k] / norm);
        an += (double)d[k] * x->g.mem[off + k];
    }
    float *save = malloc(n * sizeof(float));
    memcpy(save, w, n * sizeof(float));
    for (size_t k = 0; k < n; k++)
        w[k] = save[k] + h * d[k];
    double lp = model_loss(x);
    for (size_t k = 0; k < n; k++)
        w[k] = save[k] - h * d[k];
    double lm = model_loss(x);
    memcpy(w, save, n * sizeof(float));
    double num = (lp - lm) / (2.0 * h);
    free(d);
    free(save);
    if (getenv("TF_VERBOSE"))
        printf("  %-16s analytic %+.6e numeric %+.6e\n", name, an, num);
    /* floor 1e-2: a direction nearly orthogonal to the gradient (g·d ~ 1e-4) is judged by
     * its absolute error, which float noise sets near 1e-5 */
    return fabs(an - num) / fmax(fmax(fabs(an), fabs(num)), 1e-2);
}

static void model_gradcheck(int shared, int T)
{
    for (int kern = 0; kern < 1 + nn_have_blas(); kern++) {
        nn_set_gemm_kernel((nn_gemm_kernel)kern);
        model_ctx x;
        model_setup(&x, shared, T);
        double l = model_loss(&x);
        memset(x.g.mem, 0, x.g.n_floats * sizeof(float));
        float lf = nn_tf_forward(&x.m, &x.w, x.ids, x.tgt, x.B, x.T);
        ck_assert(fabs(lf - l) < 1e-4);
        memset(hook_calls, 0, sizeof hook_calls);
        nn_tf_backward(&x.m, &x.w, &x.g, x.ids, x.tgt, 1.0f, count_hook, NULL);
        int nt = nn_tf_tensor_count(&x.c);
        for (int i = 0; i < nt; i++)
            ck_assert_int_eq(hook_calls[i], 1);
        /* the RoPE tables are not parameters: the backward leaves them untouched */
        size_t rope = (size_t)x.c.seq_len * x.c.head_size;
        for (size_t k = 0; k < rope; k++)
            ck_assert(x.g.freq_cis_real[k] == 0.0f);
        double worst = 0;
        char name[48], wname[48] = "";
        for (int i = 0; i < nt; i++) {
            double e = directional_check(&x, i, 1e-2f, name, sizeof name);
            if (e > worst) {
                worst = e;
                snprintf(wname, sizeof wname, "%s", name);
            }
        }
        /* entry by entry on the top of the model (final norm and classifier), where float
         * noise is small next to the gradients */
        size_t off, n;
        nn_tf_tensor(&x.c, &x.w, 9 * x.c.n_layers + 1 + !shared, &off, &n, NULL, 0);
        nn_gradcheck_result res;
        double e = nn_gradcheck(model_loss, &x, x.w.mem + off, x.g.mem + off, n, 1e-2f, 1e-3,
                                0, &res);
        printf("gradcheck model (%s, %s, T=%d): %d tensors by direction, worst %.3g (%s); "
               "%s entry by entry %.3g %s\n", shared ? "tied" : "untied",
               nn_gemm_kernel_name((nn_gemm_kernel)kern), T, nt, worst, wname,
               shared ? "rms_final" : "wcls", e, worst < 1e-2 && e < 1e-2 ? "OK" : "NOT OK");
        ck_assert_msg(worst < 1e-2, "direction check of %s: rel err %g", wname, worst);
        ck_assert_msg(e < 1e-2, "entry check: rel err %g at %zu (analytic %g numeric %g)", e,
                      res.worst, res.worst_analytic, res.worst_numeric);
        model_teardown(&x);
    }
}

START_TEST(model_gradcheck_tied) { model_gradcheck(1, 8); }
END_TEST

START_TEST(model_gradcheck_untied_short) { model_gradcheck(0, 5); }
END_TEST

START_TEST(tensor_table_covers_parameters)
{
    model_ctx x;
    for (int shared = 0; shared < 2; shared++) {
        model_setup(&x, shared, 8);
        size_t off[12], len[12], total = 0, prev_end = 0;
        llm_weights_param_ranges(&x.c, off, len);
        for (int i = 0; i < nn_tf_tensor_count(&x.c); i++) {
            size_t o, n;
            char name[48];
            ck_assert(nn_tf_tensor(&x.c, &x.w, i, &o, &n, name, sizeof name) == 0);
            ck_assert(o >= prev_end);
            prev_end = o + n;
            total += n;
        }
        ck_assert(nn_tf_tensor(&x.c, &x.w, nn_tf_tensor_count(&x.c), off, len, NULL, 0) < 0);
        ck_assert_uint_eq(total, llm_param_count(&x.c));
        model_teardown(&x);
    }
}
END_TEST

/* ---- llama2.c's inference, token by token, as the reference of the whole forward ----
 * Written from run.c's description: a KV cache, RMSNorm in float, RoPE by its loop over i
 * with rotn = 2 while i < kv_dim, GQA through kv_mul = n_heads / n_kv_heads, attention over
 * positions 0..pos, SwiGLU, logits = wcls · x. Our batched forward must give its logits at
 * every position: that is what "a model trained here generates the same in llama2.c" means. */
static void rmsnorm_run_c(float *o, const float *x, const float *w, int size)
{
    float ss = 0.0f;
    for (int j = 0; j < size; j++)
        ss += x[j] * x[j];
    ss = 1.0f / sqrtf(ss / size + 1e-5f);
    for (int j = 0; j < size; j++)
        o[j] = w[j] * (ss * x[j]);
}

static void matmul_run_c(float *xout, const float *x, const float *w, int n, int d)
{
    for (int i = 0; i < d; i++) {
        float v = 0.0f;
        for (int j = 0; j < n; j++)
            v += w[(size_t)i * n + j] * x[j];
        xout[i] = v;
    }
}

static void forward_run_c(const llm_config *p, const llm_weights *w, const int *tokens, int T,
                          float *logits_out)
{
    int dim = p->dim, kv_dim = p->kv_dim, hs = p->head_size, hidden = p->hidden_dim;
    int kv_mul = p->n_heads / p->n_kv_heads, L = p->n_layers, V = p->vocab_size;
    float *x = calloc(dim, 4), *xb = calloc(dim, 4), *xb2 = calloc(dim, 4);
    float *hb = calloc(hidden, 4), *hb2 = calloc(hidden, 4), *q = calloc(dim, 4);
    float *att = calloc(T, 4);
    float *kc = calloc((size_t)L * T * kv_dim, 4), *vc = calloc((size_t)L * T * kv_dim, 4);
    for (int pos = 0; pos < T; pos++) {
        memcpy(x, w->token_embedding + (size_t)tokens[pos] * dim, dim * 4);
        for (int l = 0; l < L; l++) {
            rmsnorm_run_c(xb, x, w->rms_att + (size_t)l * dim, dim);
            float *k = kc + ((size_t)l * T + pos) * kv_dim;
            float *v = vc + ((size_t)l * T + pos) * kv_dim;
            matmul_run_c(q, xb, w->wq + (size_t)l * dim * dim, dim, dim);
            matmul_run_c(k, xb, w->wk + (size_t)l * dim * kv_dim, dim, kv_dim);
            matmul_run_c(v, xb, w->wv + (size_t)l * dim * kv_dim, dim, kv_dim);
            for (int i = 0; i < dim; i += 2) {
                int head_dim = i % hs;
                float freq = 1.0f / powf(10000.0f, head_dim / (float)hs);
                float val = pos * freq, fcr = cosf(val), fci = sinf(val);
                int rotn = i < kv_dim ? 2 : 1;
                for (int r = 0; r < rotn; r++) {
                    float *vec = r == 0 ? q : k;
                    float v0 = vec[i], v1 = vec[i + 1];
                    vec[i] = v0 * fcr - v1 * fci;
                    vec[i + 1] = v0 * fci + v1 * fcr;
                }
            }
            for (int h = 0; h < p->n_heads; h++) {
                const float *qh = q + h * hs;
                for (int t = 0; t <= pos; t++) {
                    const float *kt = kc + ((size_t)l * T + t) * kv_dim + (h / kv_mul) * hs;
                    float sc = 0.0f;
                    for (int i = 0; i < hs; i++)
                        sc += qh[i] * kt[i];
                    att[t] = sc / sqrtf((float)hs);
                }
                float mx = att[0], sum = 0.0f;
                for (int t = 1; t <= pos; t++)
                    mx = att[t] > mx ? att[t] : mx;
                for (int t = 0; t <= pos; t++)
                    sum += (att[t] = expf(att[t] - mx));
                float *o = xb + h * hs;
                memset(o, 0, hs * 4);
                for (int t = 0; t <= pos; t++) {
                    const float *vt = vc + ((size_t)l * T + t) * kv_dim + (h / kv_mul) * hs;
                    for (int i = 0; i < hs; i++)
                        o[i] += att[t] / sum * vt[i];
                }
            }
            matmul_run_c(xb2, xb, w->wo + (size_t)l * dim * dim, dim, dim);
            for (int i = 0; i < dim; i++)
                x[i] += xb2[i];
            rmsnorm_run_c(xb, x, w->rms_ffn + (size_t)l * dim, dim);
            matmul_run_c(hb, xb, w->w1 + (size_t)l * dim * hidden, dim, hidden);
            matmul_run_c(hb2, xb, w->w3 + (size_t)l * dim * hidden, dim, hidden);
            for (int i = 0; i < hidden; i++)
                hb[i] = hb[i] * (1.0f / (1.0f + expf(-hb[i]))) * hb2[i];
            matmul_run_c(xb, hb, w->w2 + (size_t)l * dim * hidden, hidden, dim);
            for (int i = 0; i < dim; i++)
                x[i] += xb[i];
        }
        rmsnorm_run_c(x, x, w->rms_final, dim);
        matmul_run_c(logits_out + (size_t)pos * V, x, w->wcls, dim, V);
    }
    free(x), free(xb), free(xb2), free(hb), free(hb2), free(q), free(att), free(kc), free(vc);
}

START_TEST(forward_matches_run_c)
{
    for (int shared = 0; shared < 2; shared++) {
        model_ctx x;
        model_setup(&x, shared, 8);
        int V = x.c.vocab_size;
        float *ref = malloc((size_t)x.T * V * sizeof(float));
        nn_tf_forward(&x.m, &x.w, x.ids, NULL, x.B, x.T);
        double worst = 0;
        for (int b = 0; b < x.B; b++) {
            forward_run_c(&x.c, &x.w, x.ids + b * x.T, x.T, ref);
            for (int i = 0; i < x.T * V; i++)
                worst = fmax(worst, fabs(ref[i] - x.m.logits[(size_t)b * x.T * V + i]));
        }
        printf("forward vs run.c token by token (%s): max logit diff %.3g %s\n",
               shared ? "tied" : "untied", worst, worst < 1e-4 ? "OK" : "NOT OK");
        ck_assert(worst < 1e-4);
        free(ref);
        model_teardown(&x);
    }
}
END_TEST

START_TEST(kernels_agree)
{
    if (!nn_have_blas())
        return;
    model_ctx x;
    model_setup(&x, 1, 8);
    size_t n = (size_t)x.B * x.T * x.c.vocab_size;
    float *a = malloc(n * sizeof(float));
    nn_set_gemm_kernel(NN_GEMM_REF);
    nn_tf_forward(&x.m, &x.w, x.ids, NULL, x.B, x.T);
    memcpy(a, x.m.logits, n * sizeof(float));
    nn_set_gemm_kernel(NN_GEMM_BLAS);
    nn_tf_forward(&x.m, &x.w, x.ids, NULL, x.B, x.T);
    double worst = 0;
    for (size_t i = 0; i < n; i++)
        worst = fmax(worst, fabs(a[i] - x.m.logits[i]));
    printf("logits ref vs blas: max diff %.3g\n", worst);
    ck_assert(worst < 1e-4);
    free(a);
    model_teardown(&x);
}
END_TEST

int main(int argc, char **argv)
{
    (void)argc;
    nn_gemm_start(argv);      /* BLAS threads and MLSYS_GEMM, as every program of the lab */
    Suite *s = suite_create("transformer");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, rope_matches_run_c);
    tcase_add_test(tc, rope_gradcheck);
    tcase_add_test(tc, attention_forward_and_gradcheck);
    tcase_add_test(tc, swiglu_gradcheck);
    tcase_add_test(tc, tensor_table_covers_parameters);
    tcase_add_test(tc, kernels_agree);
    tcase_add_test(tc, forward_matches_run_c);
    tcase_add_test(tc, model_gradcheck_tied);
    tcase_add_test(tc, model_gradcheck_untied_short);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
