/* test_generate.c - the inference side of the lab's model: the forward's logits against a
 * naive run.c-style loop written here (double precision), cached == uncached and batched ==
 * one at a time (token ids, and bit for bit on the reference GEMM), the sampler against the
 * softmax it should draw from, and the generate / model info commands (bad input: exit 2). */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include "../../core/nn/transformer.h"
#include "../../core/llm/engine.h"
#include "../../lab/cli/generate.h"
#include "run_bin.h"

static char g_dir[256];          /* fixtures: tok.bin (vocab g_vocab), tiny.bin, zero.bin */
static int g_vocab;

/* ---- models ---- */

static void fill(float *x, size_t n, float scale, mlsys_rng *r)
{
    for (size_t i = 0; i < n; i++)
        x[i] = (float)(mlsys_rng_normal(r) * scale);
}

/* A random model whose logits spread over a few units (so argmax is rarely a near tie),
 * norm gains around 1. */
static void make_model(llm_config *c, llm_weights *w, int D, int H, int L, int NH, int NKV,
                       int V, int S, int shared, uint64_t seed, float scale)
{
    char err[256];
    llm_config cc = {D, H, L, NH, NKV, V, S, shared, 0, 0};
    *c = cc;
    ck_assert_msg(llm_config_check(c, err, sizeof err) == 0, "%s", err);
    ck_assert_msg(llm_weights_alloc(w, c, err, sizeof err) == 0, "%s", err);
    mlsys_rng r;
    mlsys_rng_seed(&r, seed);
    size_t off[12], len[12];
    int n = llm_weights_param_ranges(c, off, len);
    for (int k = 0; k < n; k++)
        fill(w->mem + off[k], len[k], scale, &r);
    for (size_t i = 0; i < (size_t)L * D; i++) {
        w->rms_att[i] = 1.0f + 0.2f * (float)mlsys_rng_normal(&r);
        w->rms_ffn[i] = 1.0f + 0.2f * (float)mlsys_rng_normal(&r);
    }
    for (int i = 0; i < D; i++)
        w->rms_final[i] = 1.0f + 0.2f * (float)mlsys_rng_normal(&r);
}

/* ---- the naive reference: run.c's forward for one token, written from its description,
 * in double, with its own cache [L][S][KVD] ---- */
typedef struct naive {
    const llm_config *c;
    const llm_weights *w;
    double *kc, *vc;
} naive;

static void nv_rms(double *o, const double *x, const float *g, int D)
{
    double ss = 0;
    for (int j = 0; j < D; j++)
        ss += x[j] * x[j];
    double s = 1.0 / sqrt(ss / D + 1e-5);
    for (int j = 0; j < D; j++)
        o[j] = g[j] * s * x[j];
}

static void nv_mat(double *y, const double *x, const float *W, int in, int out)
{
    for (int i = 0; i < out; i++) {
        double s = 0;
        for (int j = 0; j < in; j++)
            s += (double)W[(size_t)i * in + j] * x[j];
        y[i] = s;
    }
}

static void naive_step(naive *n, int token, int pos, float *logits)
{
    const llm_config *c = n->c;
    const llm_weights *w = n->w;
    int D = c->dim, H = c->hidden_dim, KVD = c->kv_dim, HS = D / c->n_heads, S = c->seq_len;
    double x[256], xb[256], q[256], o[256], hb[512], hb2[512], att[256];
    for (int i = 0; i < D; i++)
        x[i] = w->token_embedding[(size_t)token * D + i];
    for (int l = 0; l < c->n_layers; l++) {
        double *kr = n->kc + ((size_t)l * S + pos) * KVD, *vr = n->vc + ((size_t)l * S + pos) * KVD;
        nv_rms(xb, x, w->rms_att + l * D, D);
        nv_mat(q, xb, w->wq + (size_t)l * D * D, D, D);
        nv_mat(kr, xb, w->wk + (size_t)l * KVD * D, D, KVD);
        nv_mat(vr, xb, w->wv + (size_t)l * KVD * D, D, KVD);
        /* RoPE: even i, angle pos / 10000^((i % HS) / HS); k only while i < KVD */
        for (int i = 0; i < D; i += 2) {
            double ang = pos / pow(10000.0, (double)(i % HS) / HS);
            double cr = cos(ang), ci = sin(ang);
            for (int which = 0; which < (i < KVD ? 2 : 1); which++) {
                double *v = which ? kr : q;
                double a = v[i], b = v[i + 1];
                v[i] = a * cr - b * ci;
                v[i + 1] = a * ci + b * cr;
            }
        }
        for (int h = 0; h < c->n_heads; h++) {
            int g = h / (c->n_heads / c->n_kv_heads);
            double mx = -1e300, sum = 0;
            for (int t = 0; t <= pos; t++) {
                double s = 0;
                for (int i = 0; i < HS; i++)
                    s += q[h * HS + i] * n->kc[((size_t)l * S + t) * KVD + g * HS + i];
                att[t] = s / sqrt((double)HS);
                mx = fmax(mx, att[t]);
            }
            for (int t = 0; t <= pos; t++)
                sum += att[t] = exp(att[t] - mx);
            for (int i = 0; i < HS; i++) {
                double a = 0;
                for (int t = 0; t <= pos; t++)
                    a += att[t] / sum * n->vc[((size_t)l * S + t) * KVD + g * HS + i];
                o[h * HS + i] = a;
            }
        }
        nv_mat(xb, o, w->wo + (size_t)l * D * D, D, D);
        for (int i = 0; i < D; i++)
            x[i] += xb[i];
        nv_rms(xb, x, w->rms_ffn + l * D, D);
        nv_mat(hb, xb, w->w1 + (size_t)l * H * D, D, H);
        nv_mat(hb2, xb, w->w3 + (size_t)l * H * D, D, H);
        for (int i = 0; i < H; i++)
            hb[i] = hb[i] / (1.0 + exp(-hb[i])) * hb2[i];
        nv_mat(xb, hb, w->w2 + (size_t)l * D * H, H, D);
        for (int i = 0; i < D; i++)
            x[i] += xb[i];
    }
    nv_rms(xb, x, w->rms_final, D);
    const float *cls = c->shared_classifier ? w->token_embedding : w->wcls;
    for (int v = 0; v < c->vocab_size; v++) {
        double s = 0;
        for (int j = 0; j < D; j++)
            s += (double)cls[(size_t)v * D + j] * xb[j];
        logits[v] = (float)s;
    }
}

/* max |a - b| / max(1, |b|) */
static double rel_diff(const float *a, const float *b, size_t n)
{
    double worst = 0;
    for (size_t i = 0; i < n; i++)
        worst = fmax(worst, fabs((double)a[i] - b[i]) / fmax(1.0, fabs((double)b[i])));
    return worst;
}

/* ---- forward against the naive loop ---- */

static void check_vs_naive(int shared, nn_gemm_kernel kern)
{
    llm_config c;
    llm_weights w;
    char err[256];
    nn_set_gemm_kernel(kern);
    make_model(&c, &w, 32, 72, 2, 4, 2, 41, 20, shared, 7 + shared, 0.25f);
    int T = c.seq_len, V = c.vocab_size;
    int tok[20], seq[20] = {0}, pos[20];
    mlsys_rng r;
    mlsys_rng_seed(&r, 99);
    for (int t = 0; t < T; t++)
        tok[t] = (int)(mlsys_rng_u64(&r) % V), pos[t] = t;
    float *ref = malloc(sizeof(float) * T * V), *got = malloc(sizeof(float) * T * V);
    naive n = {&c, &w, calloc((size_t)c.n_layers * T * c.kv_dim, sizeof(double)),
               calloc((size_t)c.n_layers * T * c.kv_dim, sizeof(double))};
    for (int t = 0; t < T; t++)
        naive_step(&n, tok[t], t, ref + (size_t)t * V);
    double spread = 0;
    for (int i = 0; i < T * V; i++)
        spread = fmax(spread, fabs(ref[i]));
    ck_assert_msg(spread > 1.0, "logits too flat to test anything: %g", spread);

    /* 1. no cache, every position */
    ck_assert_int_eq(llm_forward_nocache(&c, &w, tok, T, 0, got), 0);
    double d1 = rel_diff(got, ref, (size_t)T * V);
    /* 2. cached, the whole sequence as one prefill call (chunks of 6 rows) */
    llm_fwd e;
    llm_kv kv;
    ck_assert(llm_fwd_init(&e, &c, &w, 6, err, sizeof err) == 0);
    ck_assert(llm_kv_init_contiguous(&kv, &c, 2, 0, err, sizeof err) == 0);
    ck_assert(kv.ops->reserve(&kv, 0, T) == 0);
    ck_assert_msg(llm_forward(&e, &kv, T, seq, pos, tok, NULL, got, err, sizeof err) == 0, "%s",
                  err);
    double d2 = rel_diff(got, ref, (size_t)T * V);
    /* 3. cached, one token per call (decode), in sequence 1 */
    double d3 = 0;
    for (int t = 0; t < T; t++) {
        int s1 = 1;
        ck_assert(kv.ops->reserve(&kv, 1, t + 1) == 0);
        ck_assert(llm_forward(&e, &kv, 1, &s1, &t, &tok[t], NULL, got, err, sizeof err) == 0);
        d3 = fmax(d3, rel_diff(got, ref + (size_t)t * V, V));
    }
    printf("forward vs naive (%s, %s): first logits %.5f %.5f | %.5f %.5f; max rel diff "
           "nocache %.2g prefill %.2g decode %.2g %s\n", shared ? "shared" : "separate wcls",
           nn_gemm_kernel_name(kern), got[0], got[1], ref[(size_t)(T - 1) * V],
           ref[(size_t)(T - 1) * V + 1], d1, d2, d3,
           d1 < 1e-5 && d2 < 1e-5 && d3 < 1e-5 ? "OK" : "NOT OK");
    ck_assert(d1 < 1e-5 && d2 < 1e-5 && d3 < 1e-5);
    free(n.kc);
    free(n.vc);
    free(ref);
    free(got);
    llm_kv_free(&kv);
    llm_fwd_fini(&e);
    llm_weights_free(&w);
}

START_TEST(forward_matches_naive)
{
    check_vs_naive(1, NN_GEMM_REF);
    check_vs_naive(0, NN_GEMM_REF);
    check_vs_naive(0, NN_GEMM_INVARIANT);
    if (nn_have_blas()) {
        check_vs_naive(1, NN_GEMM_BLAS);
        check_vs_naive(0, NN_GEMM_BLAS);
    }
}
END_TEST

/* ---- one forward: the training forward, the uncached and the cached inference ----
 * They share every kernel, so with a batch-invariant GEMM (the reference kernel, or
 * NN_GEMM_INVARIANT) a row's logits are the same bits however the rows are grouped into
 * calls: the training forward over B sequences, a fresh prefill of one (nocache), token by
 * token, chunked prefills, and random mixes of prefill and decode rows of several sequences
 * in one call (continuous batching, a speculative verify). */

/* [B, T] logits of the training forward over B sequences (tok [B,T]). */
static float *tf_logits(const llm_config *c, const llm_weights *w, const int *tok, int B, int T)
{
    nn_tf m;
    ck_assert(nn_tf_init(&m, c, B, T) == 0);
    nn_tf_forward(&m, w, tok, NULL, B, T);
    float *out = malloc(sizeof(float) * B * T * c->vocab_size);
    memcpy(out, m.logits, sizeof(float) * B * T * c->vocab_size);
    nn_tf_fini(&m);
    return out;
}

static void check_one_forward(nn_gemm_kernel kern, int generic, int shared)
{
    enum { B = 3, T = 20 };
    llm_config c;
    llm_weights w;
    char err[256];
    ck_assert(nn_set_gemm_kernel(kern) == 0);
    nn_gemm_invariant_generic(generic);
    make_model(&c, &w, 32, 72, 2, 4, 2, 41, T, shared, 5 + shared, 0.25f);
    int V = c.vocab_size, tok[B * T];
    mlsys_rng r;
    mlsys_rng_seed(&r, 31);
    for (int i = 0; i < B * T; i++)
        tok[i] = (int)(mlsys_rng_u64(&r) % V);
    size_t row = sizeof(float) * V;
    float *ref = tf_logits(&c, &w, tok, B, T), *got = malloc(row * B * T);

    /* the uncached reference, one sequence at a time */
    for (int b = 0; b < B; b++) {
        ck_assert(llm_forward_nocache(&c, &w, tok + b * T, T, 0, got) == 0);
        ck_assert_msg(!memcmp(got, ref + (size_t)b * T * V, row * T),
                      "%s: nocache differs from the training forward (sequence %d)",
                      nn_gemm_kernel_name(kern), b);
    }
    /* the cache, rows grouped at random: every call takes 1..9 of the rows not yet run,
     * each sequence's rows in order, sequences interleaved; engines of 4 and 16 rows */
    for (int trial = 0; trial < 6; trial++) {
        llm_fwd e;
        llm_kv kv;
        ck_assert(llm_fwd_init(&e, &c, &w, trial % 2 ? 4 : 16, err, sizeof err) == 0);
        ck_assert(llm_kv_init_contiguous(&kv, &c, B, 0, err, sizeof err) == 0);
        for (int b = 0; b < B; b++)
            ck_assert(kv.ops->reserve(&kv, b, T) == 0);
        int next[B] = {0}, done = 0;
        while (done < B * T) {
            int n = trial == 0 ? 1 : trial == 1 ? B * T : 1 + (int)(mlsys_rng_u64(&r) % 9);
            int seq[B * T], pos[B * T], tk[B * T], m = 0;
            while (m < n && done + m < B * T) {
                int b = (int)(mlsys_rng_u64(&r) % B);
                if (next[b] == T)
                    continue;
                seq[m] = b, pos[m] = next[b]++, tk[m] = tok[b * T + pos[m]];
                m++;
            }
            ck_assert_msg(llm_forward(&e, &kv, m, seq, pos, tk, NULL, got, err, sizeof err) == 0,
                          "%s", err);
            for (int i = 0; i < m; i++)
                ck_assert_msg(!memcmp(got + (size_t)i * V,
                                      ref + ((size_t)seq[i] * T + pos[i]) * V, row),
                              "%s%s, trial %d: sequence %d position %d (in a call of %d "
                              "rows) differs from the training forward",
                              nn_gemm_kernel_name(kern), generic ? " (plain C)" : "", trial,
                              seq[i], pos[i], m);
            done += m;
        }
        llm_kv_free(&kv);
        llm_fwd_fini(&e);
    }
    printf("one forward (%s%s, %s): training forward = nocache = cached in any grouping of "
           "rows, bit for bit OK\n", nn_gemm_kernel_name(kern), generic ? ", plain C" : "",
           shared ? "shared" : "separate wcls");
    nn_gemm_invariant_generic(0);
    free(ref);
    free(got);
    llm_weights_free(&w);
}

START_TEST(one_forward_bitwise)
{
    for (int shared = 0; shared < 2; shared++) {
        check_one_forward(NN_GEMM_REF, 0, shared);
        check_one_forward(NN_GEMM_INVARIANT, 0, shared);
        check_one_forward(NN_GEMM_INVARIANT, 1, shared);
    }
}
END_TEST

/* Under OpenBLAS the same rows in the same GEMMs still give the same bits (the training
 * forward of one sequence and its uncached prefill multiply the same T rows), and the only
 * difference left between decoding and prefilling has one cause: BLAS rounds a one-row GEMM
 * differently from a many-row one. Changing that one thing (the GEMM kernel for the
 * invariant one, everything else as it was) makes the difference vanish. */
START_TEST(blas_difference_is_the_gemm)
{
    if (!nn_have_blas())
        return;
    enum { T = 20 };
    llm_config c;
    llm_weights w;
    char err[256];
    make_model(&c, &w, 32, 72, 2, 4, 2, 41, T, 1, 5, 0.25f);
    int V = c.vocab_size, tok[T];
    for (int t = 0; t < T; t++)
        tok[t] = (t * 7 + 3) % V;
    float *pre = malloc(sizeof(float) * T * V), *dec = malloc(sizeof(float) * T * V);
    double diff[2] = {0, 0};
    for (int k = 0; k < 2; k++) {
        ck_assert(nn_set_gemm_kernel(k ? NN_GEMM_INVARIANT : NN_GEMM_BLAS) == 0);
        float *tf = tf_logits(&c, &w, tok, 1, T);
        ck_assert(llm_forward_nocache(&c, &w, tok, T, 0, pre) == 0);
        ck_assert_msg(!memcmp(tf, pre, sizeof(float) * T * V), "%s: training forward and "
                      "prefill of the same rows differ", nn_gemm_kernel_name(nn_get_gemm_kernel()));
        free(tf);
        llm_fwd e;
        llm_kv kv;
        ck_assert(llm_fwd_init(&e, &c, &w, 4, err, sizeof err) == 0);
        ck_assert(llm_kv_init_contiguous(&kv, &c, 1, 0, err, sizeof err) == 0);
        ck_assert(kv.ops->reserve(&kv, 0, T) == 0);
        for (int t = 0, s0 = 0; t < T; t++)
            ck_assert(llm_forward(&e, &kv, 1, &s0, &t, &tok[t], NULL, dec + (size_t)t * V, err,
                                  sizeof err) == 0);
        for (int i = 0; i < T * V; i++)
            diff[k] = fmax(diff[k], fabs((double)dec[i] - pre[i]));
        llm_kv_free(&kv);
        llm_fwd_fini(&e);
    }
    /* and the GEMM alone shows it: one row through x·Wᵀ alone and among T rows */
    ck_assert(nn_set_gemm_kernel(NN_GEMM_BLAS) == 0);
    float *x = malloc(sizeof(float) * T * c.dim), *yb = malloc(sizeof(float) * T * V);
    float *y1 = malloc(sizeof(float) * V);
    for (int i = 0; i < T * c.dim; i++)
        x[i] = sinf(0.37f * i);
    nn_linear_forward(yb, x, w.wcls, NULL, T, c.dim, V);
    int rows = 0;
    for (int t = 0; t < T; t++) {
        nn_linear_forward(y1, x + (size_t)t * c.dim, w.wcls, NULL, 1, c.dim, V);
        rows += memcmp(y1, yb + (size_t)t * V, sizeof(float) * V) != 0;
    }
    printf("decode vs prefill logits: blas max diff %.2g (a one-row GEMM rounds differently: "
           "%d of %d rows of x·Wᵀ differ alone), invariant %.2g %s\n", diff[0], rows, T,
           diff[1], diff[1] == 0 && diff[0] < 1e-4 ? "OK" : "NOT OK");
    ck_assert(diff[1] == 0.0);
    ck_assert(diff[0] < 1e-4);
    free(x);
    free(yb);
    free(y1);
    free(pre);
    free(dec);
    llm_weights_free(&w);
}
END_TEST

/* ---- generation: cached vs uncached, batched vs one at a time ---- */

typedef struct run {
    int out[5][64];
    int n_out[5];
} run;

/* B sequences on a fresh engine (B seats, every prompt in one step), or through the
 * reference without a cache; sequence b draws with seed 100 + b. */
static void gen(const llm_config *c, const llm_weights *w, int B, int **pr, const int *np,
                float temp, int no_cache, int max_new, run *res)
{
    int *outs[5];
    char err[256];
    for (int b = 0; b < B; b++)
        outs[b] = res->out[b];
    llm_gen_opts o = {.max_new = max_new, .temperature = temp, .top_p = 1.0f, .seed = 100};
    llm_gen_stats st;
    if (no_cache) {
        llm_sampler s[5];
        for (int b = 0; b < B; b++)
            ck_assert(llm_sampler_init(&s[b], c->vocab_size, temp, 0, 1.0f, 100 + b) == 0);
        ck_assert_msg(llm_generate_nocache(c, w, s, B, (const int *const *)pr, np, outs,
                                           res->n_out, &o, &st, err, sizeof err) == 0, "%s", err);
        for (int b = 0; b < B; b++)
            llm_sampler_fini(&s[b]);
        return;
    }
    llm_engine_opts eo = {.max_num_seqs = B, .max_num_batched_tokens = 64, .block_size = 4};
    llm_engine *eng = llm_engine_create(c, w, &eo, err, sizeof err);
    ck_assert_msg(eng != NULL, "%s", err);
    ck_assert_msg(llm_generate(eng, B, (const int *const *)pr, np, outs, res->n_out, &o, &st,
                               err, sizeof err) == 0, "%s", err);
    llm_engine_free(eng);
}

static int diverse(const run *r, int n)
{
    int seen[64] = {0}, k = 0;
    for (int i = 0; i < n; i++)
        k += !seen[r->out[0][i] % 64]++;
    return k;
}

static void check_cache_identity(nn_gemm_kernel kern)
{
    llm_config c;
    llm_weights w;
    nn_set_gemm_kernel(kern);
    make_model(&c, &w, 32, 64, 2, 4, 2, 53, 48, 1, 11, 0.3f);
    int prompt[5] = {1, 17, 4, 33, 9}, *pr[1] = {prompt}, np[1] = {5};
    run a, b;
    gen(&c, &w, 1, pr, np, 0.0f, 0, 40, &a);
    gen(&c, &w, 1, pr, np, 0.0f, 1, 40, &b);
    ck_assert_int_eq(a.n_out[0], 40);
    ck_assert_int_eq(b.n_out[0], 40);
    int same = !memcmp(a.out[0], b.out[0], sizeof(int) * 40);
    printf("greedy with / without the kv cache (%s): %d %d %d %d ... (%d distinct) %s\n",
           nn_gemm_kernel_name(kern), a.out[0][0], a.out[0][1], a.out[0][2], a.out[0][3],
           diverse(&a, 40), same ? "OK" : "NOT OK");
    ck_assert(diverse(&a, 40) >= 5);   /* not a constant stream: the test means something */
    ck_assert(same);
    llm_weights_free(&w);
}

START_TEST(greedy_cache_equals_nocache)
{
    check_cache_identity(NN_GEMM_REF);
    if (nn_have_blas())
        check_cache_identity(NN_GEMM_BLAS);
}
END_TEST

/* On a batch-invariant GEMM (the reference kernel, the invariant one) every row is computed
 * as if alone, so the cached logits must equal the recomputed ones bit for bit, step after
 * step, with greedy tokens fed back. */
static void check_cache_bitwise(nn_gemm_kernel kern)
{
    llm_config c;
    llm_weights w;
    char err[256];
    nn_set_gemm_kernel(kern);
    make_model(&c, &w, 32, 64, 2, 4, 1, 29, 24, 0, 13, 0.3f);
    int V = c.vocab_size, tok[24], seq = 0;
    llm_fwd e;
    llm_kv kv;
    ck_assert(llm_fwd_init(&e, &c, &w, 4, err, sizeof err) == 0);
    ck_assert(llm_kv_init_contiguous(&kv, &c, 1, 0, err, sizeof err) == 0);
    float *a = malloc(sizeof(float) * V), *b = malloc(sizeof(float) * V);
    tok[0] = 1;
    for (int t = 0; t < 23; t++) {
        ck_assert(kv.ops->reserve(&kv, 0, t + 1) == 0);
        ck_assert(llm_forward(&e, &kv, 1, &seq, &t, &tok[t], NULL, a, err, sizeof err) == 0);
        ck_assert(llm_forward_nocache(&c, &w, tok, t + 1, 1, b) == 0);
        ck_assert_msg(!memcmp(a, b, sizeof(float) * V), "%s: position %d differs",
                      nn_gemm_kernel_name(kern), t);
        tok[t + 1] = llm_argmax(a, V);
    }
    free(a);
    free(b);
    llm_kv_free(&kv);
    llm_fwd_fini(&e);
    llm_weights_free(&w);
}

START_TEST(cache_logits_bitwise_on_ref)
{
    check_cache_bitwise(NN_GEMM_REF);
    check_cache_bitwise(NN_GEMM_INVARIANT);
}
END_TEST

static void check_batched(nn_gemm_kernel kern, float temp)
{
    llm_config c;
    llm_weights w;
    char err[256];
    nn_set_gemm_kernel(kern);
    make_model(&c, &w, 32, 64, 2, 4, 2, 53, 40, 1, 21, 0.3f);
    int p[5][12], np[5] = {1, 7, 3, 12, 5}, *pr[5];
    for (int b = 0; b < 5; b++) {
        p[b][0] = 1;
        for (int t = 1; t < np[b]; t++)
            p[b][t] = (b * 13 + t * 5) % c.vocab_size;
        pr[b] = p[b];
    }
    llm_engine_opts eo = {.max_num_seqs = 1, .block_size = 4, .no_prefix_cache = 1};
    llm_engine *one_eng = llm_engine_create(&c, &w, &eo, err, sizeof err);
    ck_assert_msg(one_eng != NULL, "%s", err);
    for (int B = 1; B <= 5; B++) {
        run all, one;
        /* max_new 30 > room for sequence 3 (40 - 12 + 1 = 29): it stops at the context */
        gen(&c, &w, B, pr, np, temp, 0, 30, &all);
        for (int b = 0; b < B; b++) {
            run r;
            /* alone, in an engine of one seat, with the same sampler seed */
            int *prb[1] = {pr[b]};
            int *o[1] = {r.out[0]};
            uint64_t seed = 100 + (uint64_t)b;
            llm_gen_opts go = {.max_new = 30, .temperature = temp, .top_p = 1.0f,
                               .seeds = &seed};
            llm_gen_stats st;
            ck_assert(llm_generate(one_eng, 1, (const int *const *)prb, &np[b], o, r.n_out,
                                   &go, &st, err, sizeof err) == 0);
            one.n_out[b] = r.n_out[0];
            memcpy(one.out[b], r.out[0], sizeof r.out[0]);
            ck_assert_int_eq(all.n_out[b], np[b] == 12 ? 29 : 30);
            ck_assert_int_eq(all.n_out[b], one.n_out[b]);
            ck_assert_msg(!memcmp(all.out[b], one.out[b], sizeof(int) * all.n_out[b]),
                          "B=%d sequence %d differs (%s, T %.1f)", B, b,
                          nn_gemm_kernel_name(kern), temp);
        }
    }
    printf("batched B=1..5 == one at a time (%s, temperature %.1f) OK\n",
           nn_gemm_kernel_name(kern), temp);
    llm_engine_free(one_eng);
    llm_weights_free(&w);
}

START_TEST(batched_equals_one_at_a_time)
{
    check_batched(NN_GEMM_REF, 0.0f);
    check_batched(NN_GEMM_REF, 1.0f);    /* sampled too: each sequence has its own stream */
    check_batched(NN_GEMM_INVARIANT, 1.0f);
    if (nn_have_blas())
        check_batched(NN_GEMM_BLAS, 0.0f);
}
END_TEST

START_TEST(forward_rejects_bad_rows)
{
    llm_config c;
    llm_weights w;
    char err[256];
    make_model(&c, &w, 16, 32, 1, 2, 2, 20, 8, 1, 3, 0.3f);
    llm_fwd e;
    llm_kv kv;
    ck_assert(llm_fwd_init(&e, &c, &w, 4, err, sizeof err) == 0);
    ck_assert(llm_kv_init_contiguous(&kv, &c, 1, 0, err, sizeof err) == 0);
    float lg[20];
    int s = 0, p = 0, t = 3, bad = 20, p8 = 8;
    ck_assert(llm_forward(&e, &kv, 1, &s, &p, &t, NULL, lg, err, sizeof err) == -1); /* unreserved */
    ck_assert(kv.ops->reserve(&kv, 0, 9) == -1);           /* beyond seq_len */
    ck_assert(kv.ops->reserve(&kv, 0, 1) == 0);
    ck_assert(llm_forward(&e, &kv, 1, &s, &p, &bad, NULL, lg, err, sizeof err) == -1);
    ck_assert(llm_forward(&e, &kv, 1, &s, &p8, &t, NULL, lg, err, sizeof err) == -1);
    ck_assert(llm_forward(&e, &kv, 1, &s, &p, &t, NULL, lg, err, sizeof err) == 0);
    kv.ops->release(&kv, 0);
    ck_assert_int_eq(kv.ops->slot(&kv, 0, 0), -1);
    ck_assert(llm_forward_nocache(&c, &w, &t, 9, 1, lg) == -1);
    llm_kv_free(&kv);
    llm_fwd_fini(&e);
    llm_weights_free(&w);
}
END_TEST

/* ---- the sampler ---- */

START_TEST(sampler_greedy_and_limits)
{
    enum { V = 50 };
    float lg[V];
    mlsys_rng r;
    mlsys_rng_seed(&r, 5);
    for (int trial = 0; trial < 200; trial++) {
        fill(lg, V, 2.0f, &r);
        int am = 0;
        for (int i = 1; i < V; i++)
            if (lg[i] > lg[am])
                am = i;
        llm_sampler g, k1, p0;
        ck_assert(llm_sampler_init(&g, V, 0.0f, 0, 1.0f, trial) == 0);
        ck_assert(llm_sampler_init(&k1, V, 1.5f, 1, 1.0f, trial) == 0);
        ck_assert(llm_sampler_init(&p0, V, 1.0f, 0, 1e-6f, trial) == 0);
        ck_assert_int_eq(llm_argmax(lg, V), am);
        ck_assert_int_eq(llm_sample(&g, lg), am);
        ck_assert_int_eq(llm_sample(&k1, lg), am);
        ck_assert_int_eq(llm_sample(&p0, lg), am);
        llm_sampler_fini(&g);
        llm_sampler_fini(&k1);
        llm_sampler_fini(&p0);
    }
    /* ties: the lowest id */
    float tie[4] = {0.5f, 2.0f, 2.0f, 1.0f};
    ck_assert_int_eq(llm_argmax(tie, 4), 1);
    llm_sampler s;
    ck_assert(llm_sampler_init(&s, V, -0.1f, 0, 1.0f, 1) == -1);
    ck_assert(llm_sampler_init(&s, V, 1.0f, 0, 0.0f, 1) == -1);
    ck_assert(llm_sampler_init(&s, V, 1.0f, 0, 1.01f, 1) == -1);
    ck_assert(llm_sampler_init(&s, V, NAN, 0, 0.5f, 1) == -1);
}
END_TEST

START_TEST(sampler_seeded_determinism)
{
    enum { V = 30 };
    float lg[V];
    mlsys_rng r;
    mlsys_rng_seed(&r, 8);
    fill(lg, V, 1.0f, &r);
    llm_sampler a, b, d;
    llm_sampler_init(&a, V, 0.9f, 10, 0.95f, 77);
    llm_sampler_init(&b, V, 0.9f, 10, 0.95f, 77);
    llm_sampler_init(&d, V, 0.9f, 10, 0.95f, 78);
    int differ = 0;
    for (int i = 0; i < 500; i++) {
        int x = llm_sample(&a, lg), y = llm_sample(&b, lg), z = llm_sample(&d, lg);
        ck_assert_int_eq(x, y);
        differ += x != z;
    }
    ck_assert(differ > 50);    /* another seed is another stream */
    llm_sampler_fini(&a);
    llm_sampler_fini(&b);
    llm_sampler_fini(&d);
}
END_TEST

/* Draw many times and compare the frequencies with the distribution computed here: softmax
 * of logits / T, cut to the top k, cut to the nucleus, renormalised. */
static void check_freq(float temp, int top_k, float top_p)
{
    enum { V = 8, N = 200000 };
    const float lg[V] = {1.0f, 0.2f, -0.5f, 2.0f, 0.0f, 1.5f, -2.0f, 0.7f};
    double p[V], sum = 0;
    int order[V];
    for (int i = 0; i < V; i++)
        sum += p[i] = exp(lg[i] / temp), order[i] = i;
    for (int i = 0; i < V; i++)
        p[i] /= sum;
    for (int i = 0; i < V; i++)          /* selection sort, most likely first */
        for (int j = i + 1; j < V; j++)
            if (p[order[j]] > p[order[i]]) {
                int t = order[i];
                order[i] = order[j];
                order[j] = t;
            }
    int keep = top_k > 0 && top_k < V ? top_k : V;
    double kept = 0, cum = 0;
    for (int i = 0; i < keep; i++)
        kept += p[order[i]];
    int nk = keep;
    if (top_p < 1.0f)
        for (nk = 0; nk < keep;) {
            cum += p[order[nk++]] / kept;
            if (cum >= top_p)
                break;
        }
    double want[V] = {0}, tot = 0;
    for (int i = 0; i < nk; i++)
        tot += p[order[i]];
    for (int i = 0; i < nk; i++)
        want[order[i]] = p[order[i]] / tot;
    llm_sampler s;
    ck_assert(llm_sampler_init(&s, V, temp, top_k, top_p, 2024) == 0);
    long count[V] = {0};
    for (int i = 0; i < N; i++)
        count[llm_sample(&s, lg)]++;
    float probs[V];
    llm_sampler_probs(&s, lg, probs);
    double worst = 0, pworst = 0;
    for (int i = 0; i < V; i++) {
        worst = fmax(worst, fabs((double)count[i] / N - want[i]));
        pworst = fmax(pworst, fabs(probs[i] - want[i]));
        if (want[i] == 0)
            ck_assert_int_eq(count[i], 0);
    }
    printf("sampler T %.1f top-k %d top-p %.2f: %d kept, max |freq - p| %.4f, probs %.2g %s\n",
           temp, top_k, top_p, nk, worst, pworst, worst < 0.005 ? "OK" : "NOT OK");
    /* the standard error of a frequency is at most sqrt(0.25 / N) = 0.0011: 0.005 is 4.5σ */
    ck_assert(worst < 0.005);
    ck_assert(pworst < 1e-6);
    llm_sampler_fini(&s);
}

START_TEST(sampler_distribution)
{
    check_freq(1.0f, 0, 1.0f);
    check_freq(0.6f, 0, 1.0f);
    check_freq(2.0f, 3, 1.0f);
    check_freq(1.0f, 0, 0.7f);
    check_freq(1.3f, 5, 0.8f);
}
END_TEST

/* ---- the commands ---- */

/* Run the program with args (a shell fragment); stdout and stderr into the given buffers
 * (caller frees). Returns the exit status. */
static int run_cli(const char *args, char **out, char **err)
{
    char cmd[2048], po[300], pe[300];
    snprintf(po, sizeof po, "%s/out.txt", g_dir);
    snprintf(pe, sizeof pe, "%s/err.txt", g_dir);
    snprintf(cmd, sizeof cmd, "cd %s && %s%s %s >%s 2>%s", g_dir, bin()[0] == '/' ? "" : "$OLDPWD/",
             bin(), args, po, pe);
    int st = system(cmd);
    FILE *f = fopen(po, "r");
    *out = slurp_fd(fileno(f));
    fclose(f);
    f = fopen(pe, "r");
    *err = slurp_fd(fileno(f));
    fclose(f);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static int lines(const char *s)
{
    int n = 0;
    for (; *s; s++)
        n += *s == '\n';
    return n;
}

static void expect_usage_error(const char *args)
{
    char *o, *e;
    int rc = run_cli(args, &o, &e);
    ck_assert_msg(rc == 2, "'%s': exit %d, stderr: %s", args, rc, e);
    ck_assert_msg(lines(e) == 1 && strstr(e, "mlsys-lab"), "'%s': stderr not one line: %s", args,
                  e);
    free(o);
    free(e);
}

/* Issue 19 item 17: the shipped model is found from any folder (run_cli runs in a scratch
 * folder), as the chapter texts are: by default, and by its path in the source tree. */
START_TEST(cli_shipped_model_from_any_folder)
{
    char *o, *e;
    unsetenv("MLSYS_LAB_SRC");          /* found next to the program, not through the env */
    int rc = run_cli("generate -n 4 --temperature 0 --prompt Once", &o, &e);
    ck_assert_msg(rc == 0 && !strncmp(o, "Once", 4), "generate from another folder: exit %d: "
                  "%s%s", rc, o, e);
    free(o);
    free(e);
    rc = run_cli("model info assets/models/model.bin --samples 0 --val-tokens 64", &o, &e);
    ck_assert_msg(rc == 0 && strstr(o, "parameters  988544"), "model info from another "
                  "folder: exit %d: %s%s", rc, o, e);
    free(o);
    free(e);
    /* a file the user names that exists nowhere is still refused in one line, by its name */
    rc = run_cli("model info assets/models/nosuch.bin", &o, &e);
    ck_assert_msg(rc == 2 && strstr(e, "assets/models/nosuch.bin: cannot open"), "%s", e);
    free(o);
    free(e);
}
END_TEST

START_TEST(cli_bad_input_exit_2)
{
    const char *m = "--model tiny.bin --tokenizer tok.bin";
    char a[512];
    expect_usage_error("generate --model nosuch.bin --tokenizer tok.bin");
    expect_usage_error("generate --model garbage.bin --tokenizer tok.bin");
    expect_usage_error("generate --model tiny.bin --tokenizer nosuch.bin");
    expect_usage_error("generate --model tiny.bin --tokenizer garbage.bin");
    expect_usage_error("generate --model other_vocab.bin --tokenizer tok.bin");
    snprintf(a, sizeof a, "generate %s --prompt \"$(printf 'Tom ran home. %%.0s' $(seq 40))\"", m);
    expect_usage_error(a);
    const char *flags[] = {"-n -1", "-n x", "--top-p 0", "--top-p 1.5", "--top-p", "--batch 0",
                           "--temperature -1", "--top-k -2", "--bogus", NULL};
    for (int i = 0; flags[i]; i++) {
        snprintf(a, sizeof a, "generate %s %s", m, flags[i]);
        expect_usage_error(a);
    }
    expect_usage_error("model info nosuch.bin --tokenizer tok.bin");
    expect_usage_error("model info garbage.bin --tokenizer tok.bin");
    expect_usage_error("model info other_vocab.bin --tokenizer tok.bin");
    expect_usage_error("model info");
    expect_usage_error("model frobnicate");
}
END_TEST

START_TEST(cli_generate_streams_and_agrees)
{
    const char *m = "--model tiny.bin --tokenizer tok.bin --prompt 'Tom saw a' -n 30";
    char a[512], *o1, *e1, *o2, *e2, *o3, *e3;
    snprintf(a, sizeof a, "generate %s --temperature 0", m);
    ck_assert_int_eq(run_cli(a, &o1, &e1), 0);
    ck_assert_msg(!strncmp(o1, "Tom saw a", 9), "output: %s", o1);
    ck_assert(strstr(e1, "tokens/s") && strstr(e1, "peak RSS"));
    snprintf(a, sizeof a, "generate %s --temperature 0 --no-cache", m);
    ck_assert_int_eq(run_cli(a, &o2, &e2), 0);
    ck_assert_str_eq(o1, o2);                 /* greedy: cache or not, the same text */
    snprintf(a, sizeof a, "generate %s --temperature 0 --batch 3", m);
    ck_assert_int_eq(run_cli(a, &o3, &e3), 0);
    /* every sequence of a greedy batch is the single sequence's text */
    char want[4096];
    for (int b = 0; b < 3; b++) {
        snprintf(want, sizeof want, "[%d] %s", b, o1);
        ck_assert_msg(strstr(o3, want), "batch output:\n%s\nsingle:\n%s", o3, o1);
    }
    free(o1), free(e1), free(o2), free(e2), free(o3), free(e3);
    /* sampling: seeded, so repeatable; another seed, another text */
    snprintf(a, sizeof a, "generate %s --temperature 1 --top-k 40 --top-p 0.95 --seed 5", m);
    ck_assert_int_eq(run_cli(a, &o1, &e1), 0);
    ck_assert_int_eq(run_cli(a, &o2, &e2), 0);
    ck_assert_str_eq(o1, o2);
    snprintf(a, sizeof a, "generate %s --temperature 1 --top-k 40 --top-p 0.95 --seed 6", m);
    ck_assert_int_eq(run_cli(a, &o3, &e3), 0);
    ck_assert_str_ne(o1, o3);
    free(o1), free(e1), free(o2), free(e2), free(o3), free(e3);
}
END_TEST

START_TEST(cli_model_info)
{
    char *o, *e, want[128];
    /* all-zero weights: every logit is 0, so the loss is exactly ln V */
    ck_assert_int_eq(run_cli("model info zero.bin --tokenizer tok.bin --val-tokens 512 "
                             "--samples 4", &o, &e), 0);
    double loss = 0;
    const char *l = strstr(o, "val loss");
    ck_assert_msg(l && sscanf(l, "val loss %lf", &loss) == 1, "%s", o);
    printf("model info on an all-zero model: val loss %.4f, ln V = %.4f %s\n", loss,
           log((double)g_vocab), fabs(loss - log((double)g_vocab)) < 1e-3 ? "OK" : "NOT OK");
    ck_assert(fabs(loss - log((double)g_vocab)) < 1e-3);
    llm_config c = {32, 64, 2, 4, 2, g_vocab, 64, 1, 0, 0};
    char err[128];
    llm_config_check(&c, err, sizeof err);
    snprintf(want, sizeof want, "parameters  %zu\n", llm_param_count(&c));
    ck_assert_msg(strstr(o, want), "%s", o);
    ck_assert(strstr(o, "dim 32, hidden 64, layers 2, heads 4, kv heads 2"));
    ck_assert(strstr(o, "grammar") && strstr(o, "accepted"));
    free(o), free(e);
    /* a random model: the loss is finite and not below zero */
    ck_assert_int_eq(run_cli("model info tiny.bin --tokenizer tok.bin --val-tokens 256 "
                             "--samples 3", &o, &e), 0);
    l = strstr(o, "val loss");
    ck_assert(l && sscanf(l, "val loss %lf", &loss) == 1 && loss > 0 && isfinite(loss));
    free(o), free(e);
}
END_TEST

/* The model that ships (when it does): `model info` quality stays above what was measured. */
/* The shipped model under the batch-invariant GEMM: 16 sequences decoded in one forward per
 * step give each the logits, bit for bit, that it gets decoded alone, and a prompt prefilled
 * in one call the logits of feeding it token by token: "identical to greedy" holds exactly on
 * the lab's own model, whatever the batch (what the serving engine and speculative decoding
 * test on this path). */
START_TEST(shipped_model_batch_invariant)
{
    const char *root = getenv("MLSYS_LAB_ROOT");
    char mp[512];
    snprintf(mp, sizeof mp, "%s/assets/models/model.bin", root ? root : ".");
    if (access(mp, R_OK)) {
        printf("shipped model: %s not there yet, skipped\n", mp);
        return;
    }
    enum { NS = 16, P = 12, STEPS = 20 };
    llm_config c;
    llm_weights w;
    char err[512];
    ck_assert_msg(llm_checkpoint_read(mp, &c, &w, err, sizeof err) == 0, "%s", err);
    ck_assert(nn_set_gemm_kernel(NN_GEMM_INVARIANT) == 0);
    int V = c.vocab_size;
    llm_fwd e;
    llm_kv kv;
    ck_assert(llm_fwd_init(&e, &c, &w, 64, err, sizeof err) == 0);
    ck_assert(llm_kv_init_contiguous(&kv, &c, 2 * NS, 0, err, sizeof err) == 0);
    /* sequences 0..15 together (prefills in one call each, then decode steps of 16 rows);
     * sequences 16..31 the same tokens one row per call */
    int tok[NS][P + STEPS], seq[NS], pos[NS], cur[NS];
    float *lg = malloc(sizeof(float) * NS * P * V), *one = malloc(sizeof(float) * V);
    unsigned char want[P];
    for (int b = 0; b < NS; b++)
        for (int t = 0; t < P; t++)
            tok[b][t] = t == 0 ? 1 : 3 + (b * 31 + t * 7) % (V - 3);
    int differ = 0;
    for (int b = 0; b < NS; b++) {
        int sq[P], ps[P];
        for (int t = 0; t < P; t++)
            sq[t] = b, ps[t] = t, want[t] = 1;
        ck_assert(kv.ops->reserve(&kv, b, P) == 0 && kv.ops->reserve(&kv, NS + b, P) == 0);
        ck_assert(llm_forward(&e, &kv, P, sq, ps, tok[b], want, lg, err, sizeof err) == 0);
        for (int t = 0; t < P; t++) {
            int s1 = NS + b;
            ck_assert(llm_forward(&e, &kv, 1, &s1, &t, &tok[b][t], NULL, one, err,
                                  sizeof err) == 0);
            differ += memcmp(one, lg + (size_t)t * V, sizeof(float) * V) != 0;
        }
        tok[b][P] = llm_argmax(lg + (size_t)(P - 1) * V, V);
    }
    ck_assert_msg(!differ, "%d prompt positions: prefill differs from token by token", differ);
    for (int step = 0; step < STEPS - 1; step++) {
        int p = P + step;
        for (int b = 0; b < NS; b++) {
            seq[b] = b, pos[b] = p, cur[b] = tok[b][p];
            ck_assert(kv.ops->reserve(&kv, b, p + 1) == 0);
            ck_assert(kv.ops->reserve(&kv, NS + b, p + 1) == 0);
        }
        ck_assert(llm_forward(&e, &kv, NS, seq, pos, cur, NULL, lg, err, sizeof err) == 0);
        for (int b = 0; b < NS; b++) {
            int s1 = NS + b;
            ck_assert(llm_forward(&e, &kv, 1, &s1, &p, &cur[b], NULL, one, err,
                                  sizeof err) == 0);
            differ += memcmp(one, lg + (size_t)b * V, sizeof(float) * V) != 0;
            tok[b][p + 1] = llm_argmax(lg + (size_t)b * V, V);
        }
    }
    printf("shipped model, invariant GEMM: prefill = token by token (%d positions), decode "
           "of %d together = alone (%d steps), logits bit for bit %s\n", NS * P, NS,
           STEPS - 1, differ ? "NOT OK" : "OK");
    ck_assert_msg(!differ, "%d decode rows differ from the same row alone", differ);
    free(lg);
    free(one);
    llm_kv_free(&kv);
    llm_fwd_fini(&e);
    llm_weights_free(&w);
}
END_TEST

START_TEST(shipped_model_quality)
{
    const char *root = getenv("MLSYS_LAB_ROOT");
    char mp[512], tp[512];
    snprintf(mp, sizeof mp, "%s/assets/models/model.bin", root ? root : ".");
    snprintf(tp, sizeof tp, "%s/assets/models/tokenizer.bin", root ? root : ".");
    if (access(mp, R_OK) || access(tp, R_OK)) {
        printf("shipped model: %s not there yet, skipped\n", mp);
        return;
    }
    llm_config c;
    llm_weights w;
    llm_tokenizer t;
    char err[512];
    ck_assert_msg(llm_checkpoint_read(mp, &c, &w, err, sizeof err) == 0, "%s", err);
    ck_assert_msg(llm_tokfile_read(tp, c.vocab_size, &t, err, sizeof err) == 0, "%s", err);
    gen_quality q;
    ck_assert_msg(gen_measure(&c, &w, &t, 1, 8192, 64, 1234, 0.8f, &q, err, sizeof err) == 0,
                  "%s", err);
    double share = q.gs.units ? (double)q.gs.accepted / q.gs.units : 0;
    printf("shipped model: val loss %.4f, grammar acceptance %.3f (%zu units)\n", q.val_loss,
           share, q.gs.units);
    /* measured on two of the trainer's checkpoints on the way to the shipped one (dim 128,
     * 5 layers, seq 128, data seed 1): val loss 0.540 / 0.520, accepted 94.9% of 491 /
     * 92.0% of 439 units. The share's sampling error is about 1.2 points at ~450 units, so
     * the threshold sits several of those below what was measured. */
    ck_assert(q.gs.units >= 50);
    ck_assert(q.val_loss < 0.75);
    ck_assert(share >= 0.85);
    llm_tokenizer_free(&t);
    llm_weights_free(&w);
}
END_TEST

/* ---- fixtures: a tokenizer trained on the corpus, a random and an all-zero model ---- */

static void write_model(const char *name, int V, int zero, uint64_t seed)
{
    llm_config c = {32, 64, 2, 4, 2, V, 64, 1, 0, 0};
    llm_weights w;
    char err[256], path[400];
    if (llm_config_check(&c, err, sizeof err) || llm_weights_alloc(&w, &c, err, sizeof err)) {
        fprintf(stderr, "fixture: %s\n", err);
        exit(1);
    }
    if (!zero) {
        mlsys_rng r;
        mlsys_rng_seed(&r, seed);
        size_t off[12], len[12];
        int n = llm_weights_param_ranges(&c, off, len);
        for (int k = 0; k < n; k++)
            fill(w.mem + off[k], len[k], 0.2f, &r);
    }
    snprintf(path, sizeof path, "%s/%s", g_dir, name);
    if (llm_checkpoint_write(path, &c, &w, err, sizeof err)) {
        fprintf(stderr, "fixture: %s\n", err);
        exit(1);
    }
    llm_weights_free(&w);
}

static void fixtures(void)
{
    snprintf(g_dir, sizeof g_dir, "/tmp/mlsys-test-generate.XXXXXX");
    if (!mkdtemp(g_dir)) {
        perror("mkdtemp");
        exit(1);
    }
    llm_corpus cp;
    llm_tokenizer t;
    char err[256], path[400];
    if (llm_corpus_generate(&cp, 1, LLM_SPLIT_TRAIN, 0, 24 << 10) ||
        llm_bpe_train(&t, cp.text, cp.len, 300, err, sizeof err)) {
        fprintf(stderr, "fixture: tokenizer: %s\n", err);
        exit(1);
    }
    snprintf(path, sizeof path, "%s/tok.bin", g_dir);
    if (llm_tokfile_write(path, &t, err, sizeof err)) {
        fprintf(stderr, "fixture: %s\n", err);
        exit(1);
    }
    g_vocab = t.vocab_size;
    llm_tokenizer_free(&t);
    llm_corpus_free(&cp);
    write_model("tiny.bin", g_vocab, 0, 3);
    write_model("zero.bin", g_vocab, 1, 0);
    write_model("other_vocab.bin", g_vocab + 5, 0, 4);
    snprintf(path, sizeof path, "%s/garbage.bin", g_dir);
    FILE *f = fopen(path, "w");
    fputs("this is not a model and not a tokenizer either\n", f);
    fclose(f);
}

int main(int argc, char **argv)
{
    (void)argc;
    nn_gemm_start(argv);      /* BLAS threads and MLSYS_GEMM, as every program of the lab */
    fixtures();
    Suite *s = suite_create("generate");
    TCase *tc = tcase_create("forward");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, forward_matches_naive);
    tcase_add_test(tc, one_forward_bitwise);
    tcase_add_test(tc, blas_difference_is_the_gemm);
    tcase_add_test(tc, greedy_cache_equals_nocache);
    tcase_add_test(tc, cache_logits_bitwise_on_ref);
    tcase_add_test(tc, batched_equals_one_at_a_time);
    tcase_add_test(tc, forward_rejects_bad_rows);
    suite_add_tcase(s, tc);
    TCase *ts = tcase_create("sampler");
    tcase_set_timeout(ts, 60);
    tcase_add_test(ts, sampler_greedy_and_limits);
    tcase_add_test(ts, sampler_seeded_determinism);
    tcase_add_test(ts, sampler_distribution);
    suite_add_tcase(s, ts);
    TCase *tcl = tcase_create("cli");
    tcase_set_timeout(tcl, 120);
    tcase_add_test(tcl, cli_bad_input_exit_2);
    tcase_add_test(tcl, cli_generate_streams_and_agrees);
    tcase_add_test(tcl, cli_model_info);
    tcase_add_test(tcl, cli_shipped_model_from_any_folder);
    tcase_add_test(tcl, shipped_model_quality);
    tcase_add_test(tcl, shipped_model_batch_invariant);
    suite_add_tcase(s, tcl);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf %s", g_dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", g_dir);
    return failed ? 1 : 0;
}
