/* test_speculative.c - speculative decoding (core/llm/speculative.c) on the shipped target and
 * draft: greedy output equal to the target's own greedy decoding token for token on 120
 * prompts under the batch-invariant GEMM (and 24 under the reference kernel), the acceptance rule against the distribution it
 * must produce (chi-square, fixed seeds; a wrong rule must fail the same test), the whole
 * engine sampling (first two tokens' joint distribution against the target's, computed
 * without a cache), the bookkeeping identities, the expected-tokens formula, bad input. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "../../core/llm/llm.h"
#include "../../core/nn/nn.h"
#include "ref_decode.h"

/* ---- the shipped pair, loaded once per test (CK_FORK) ---- */
typedef struct pair {
    llm_config tc, dc;
    llm_weights tw, dw;
    llm_tokenizer tok;
    llm_fwd te, de;
    llm_kv tkv, dkv;
} pair;

static int load_pair(pair *p)
{
    const char *root = getenv("MLSYS_LAB_ROOT");
    char mp[512], dp[512], tp[512], err[512];
    snprintf(mp, sizeof mp, "%s/assets/models/model.bin", root ? root : ".");
    snprintf(dp, sizeof dp, "%s/assets/models/draft.bin", root ? root : ".");
    snprintf(tp, sizeof tp, "%s/assets/models/tokenizer.bin", root ? root : ".");
    if (access(mp, R_OK) || access(dp, R_OK) || access(tp, R_OK)) {
        printf("speculative: the shipped models are not there (%s), skipped\n", mp);
        return 0;
    }
    ck_assert_msg(llm_checkpoint_read(mp, &p->tc, &p->tw, err, sizeof err) == 0, "%s", err);
    ck_assert_msg(llm_checkpoint_read(dp, &p->dc, &p->dw, err, sizeof err) == 0, "%s", err);
    ck_assert_msg(llm_tokfile_read(tp, p->tc.vocab_size, &p->tok, err, sizeof err) == 0, "%s",
                  err);
    ck_assert(llm_fwd_init(&p->te, &p->tc, &p->tw, LLM_SPEC_MAX_K + 1, err, sizeof err) == 0);
    ck_assert(llm_fwd_init(&p->de, &p->dc, &p->dw, 8, err, sizeof err) == 0);
    ck_assert(llm_kv_init_contiguous(&p->tkv, &p->tc, 1, 0, err, sizeof err) == 0);
    ck_assert(llm_kv_init_contiguous(&p->dkv, &p->dc, 1, 0, err, sizeof err) == 0);
    return 1;
}

static void free_pair(pair *p)
{
    llm_kv_free(&p->tkv);
    llm_kv_free(&p->dkv);
    llm_fwd_fini(&p->te);
    llm_fwd_fini(&p->de);
    llm_tokenizer_free(&p->tok);
    llm_weights_free(&p->tw);
    llm_weights_free(&p->dw);
}

/* Prompt i: the first words of validation document i (stories, JSON records and sums), as
 * the model saw documents in training: BOS, then " " + text. */
static int prompt(const pair *p, int i, int *ids)
{
    char doc[LLM_DOC_MAX];
    size_t len = llm_corpus_doc(1, LLM_SPLIT_VAL, (uint64_t)i, doc, sizeof doc, NULL);
    size_t cut = 8 + (size_t)(i % 5) * 6;
    if (cut > len)
        cut = len;
    return (int)llm_bpe_encode_prompt(&p->tok, doc, cut, 1, ids);
}

/* The target alone, greedy (ref_decode.h: one prefill, then one row per step). */
static int target_greedy(pair *p, const int *ids, int n, int max_new, int stop, int *out)
{
    llm_sampler s;
    ck_assert(llm_sampler_init(&s, p->tc.vocab_size, 0.0f, 0, 1.0f, 1) == 0);
    int n_out = ref_decode(&p->tc, &p->tw, &s, ids, n, max_new, stop, out);
    llm_sampler_fini(&s);
    return n_out;
}

/* ---- greedy: the target's own tokens, on 120 prompts, k from 1 to 8 ---- */
/* n prompts under kernel kern (a batch-invariant one: a row comes out the same alone and
 * among k + 1 rows, so the verify's logits are plain decoding's bit for bit). */
static void greedy_equal(nn_gemm_kernel kern, int n_prompts)
{
    pair p;
    if (!load_pair(&p))
        return;
    ck_assert(nn_set_gemm_kernel(kern) == 0);
    long tokens = 0, kept = 0, tried = 0;
    for (int i = 0; i < n_prompts; i++) {
        int ids[LLM_DOC_MAX], a[256], b[256], nb;
        int n = prompt(&p, i, ids);
        int max_new = 24 + i % 17;
        int stop = i % 3 == 0;
        int na = target_greedy(&p, ids, n, max_new, stop, a);
        llm_spec_opts o = {.k = 1 + i % 8, .max_new = max_new, .stop_at_eos = stop,
                           .temperature = 0.0f, .top_p = 1.0f, .draft_temperature = -1,
                           .seed = (uint64_t)i};
        llm_spec_stats st;
        char err[256];
        ck_assert_msg(llm_spec_generate(&p.te, &p.tkv, &p.de, &p.dkv, ids, n, &o, b, &nb, &st,
                                        err, sizeof err) == 0, "%s", err);
        ck_assert_msg(na == nb, "prompt %d (k %d): %d tokens alone, %d speculative", i, o.k,
                      na, nb);
        for (int t = 0; t < na; t++)
            ck_assert_msg(a[t] == b[t], "prompt %d (k %d): token %d is %d alone, %d "
                          "speculative", i, o.k, t, a[t], b[t]);
        /* bookkeeping: every round commits 1..k+1 tokens, one verify each */
        ck_assert_int_eq(st.tokens, nb);
        ck_assert(st.rounds >= (nb + o.k) / (o.k + 1));
        ck_assert(st.rounds <= nb + 1);
        ck_assert_int_eq(st.target_forwards, st.rounds + (n > 1));
        ck_assert(st.accepted <= st.drafted);
        long hist = 0, pk = 0, pt = 0;
        for (int j = 0; j <= o.k; j++)
            hist += st.kept_hist[j];
        for (int j = 0; j < o.k; j++) {
            ck_assert(st.pos_kept[j] <= st.pos_tried[j]);
            if (j > 0)
                ck_assert(st.pos_tried[j] <= st.pos_kept[j - 1]);   /* reached only past j-1 */
            pk += st.pos_kept[j], pt += st.pos_tried[j];
        }
        ck_assert_int_eq(hist, st.rounds);
        ck_assert_int_eq(pk, st.accepted);
        tokens += nb, kept += pk, tried += pt;
    }
    /* the pair agrees often enough for speculation to matter (measured 0.85 at k = 4) */
    printf("greedy (%s): %d prompts, %ld tokens identical; acceptance %.3f\n",
           nn_gemm_kernel_name(kern), n_prompts, tokens, (double)kept / (double)tried);
    ck_assert((double)kept / (double)tried > 0.6);
    free_pair(&p);
}

/* ---- greedy: the target's own tokens, on 120 prompts, k from 1 to 8 ---- */
START_TEST(greedy_equals_target)
{
    greedy_equal(NN_GEMM_INVARIANT, 120);
}
END_TEST

START_TEST(greedy_equals_target_ref)
{
    greedy_equal(NN_GEMM_REF, 24);
}
END_TEST

/* ---- the rule on its own: chi-square of the produced tokens against p ---- */

typedef int (*rule_fn)(const float *, const float *, int, int, mlsys_rng *, int *);

/* Draw x ~ q, apply rule, count the result; return the chi-square statistic against p (all
 * cells have expected counts >= 100 here) and the share kept. */
static double rule_chi2(rule_fn rule, const float *p, const float *q, int V, long N,
                        uint64_t seed, double *kept_share)
{
    long cnt[64] = {0}, kept = 0;
    mlsys_rng r;
    mlsys_rng_seed(&r, seed);
    for (long i = 0; i < N; i++) {
        int x = nn_sample_categorical(q, V, &r), y = -1;
        if (rule(p, q, V, x, &r, &y)) {
            cnt[x]++;
            kept++;
        } else {
            ck_assert(y >= 0 && y < V);
            cnt[y]++;
        }
    }
    double chi = 0.0;
    for (int t = 0; t < V; t++) {
        double e = (double)N * p[t];
        chi += (cnt[t] - e) * (cnt[t] - e) / e;
    }
    *kept_share = (double)kept / (double)N;
    return chi;
}

/* Wilson-Hilferty: the chi-square quantile for df degrees of freedom at normal quantile z. */
static double chi2_crit(int df, double z)
{
    double a = 2.0 / (9.0 * df);
    return df * pow(1.0 - a + z * sqrt(a), 3.0);
}

/* Keeps every draft: the output then follows q, not p. */
static int rule_always(const float *p, const float *q, int V, int x, mlsys_rng *r, int *y)
{
    (void)p, (void)q, (void)V, (void)x, (void)r, (void)y;
    return 1;
}

/* A plausible mistake: on refusal, draw from p instead of the residual max(0, p - q). */
static int rule_resample_p(const float *p, const float *q, int V, int x, mlsys_rng *r, int *y)
{
    if ((double)q[x] * mlsys_rng_uniform(r) < (double)p[x])
        return 1;
    *y = nn_sample_categorical(p, V, r);
    return 0;
}

START_TEST(rule_follows_target)
{
    /* q far from p in both directions, and a token the draft never proposes */
    const float p[8] = {0.30f, 0.05f, 0.20f, 0.10f, 0.15f, 0.05f, 0.10f, 0.05f};
    const float q[8] = {0.10f, 0.30f, 0.20f, 0.00f, 0.05f, 0.20f, 0.05f, 0.10f};
    double min_sum = 0.0;
    for (int t = 0; t < 8; t++)
        min_sum += p[t] < q[t] ? p[t] : q[t];
    long N = 200000;
    double crit = chi2_crit(7, 3.72);      /* p = 1e-4 */
    for (uint64_t seed = 1; seed <= 3; seed++) {
        double kept, chi = rule_chi2(llm_spec_rule_standard, p, q, 8, N, seed, &kept);
        printf("rule: seed %llu chi2 %.2f (crit %.2f), kept %.4f (expected %.4f)\n",
               (unsigned long long)seed, chi, crit, kept, min_sum);
        ck_assert_msg(chi < crit, "standard rule: chi2 %.2f >= %.2f", chi, crit);
        /* P(keep) = sum min(p, q): within 5 standard errors */
        double se = sqrt(min_sum * (1 - min_sum) / (double)N);
        ck_assert_msg(fabs(kept - min_sum) < 5 * se, "kept %.4f vs %.4f", kept, min_sum);
    }
    /* the same test catches the wrong rules */
    double kept, chi = rule_chi2(rule_always, p, q, 8, N, 1, &kept);
    ck_assert_msg(chi > 100 * crit, "always-keep passed: chi2 %.2f", chi);
    chi = rule_chi2(rule_resample_p, p, q, 8, N, 1, &kept);
    ck_assert_msg(chi > 10 * crit, "resample-from-p passed: chi2 %.2f", chi);
    /* one-hot p and q (greedy): keep exactly when they agree, else the target's argmax */
    float p1[4] = {0, 0, 1, 0}, q1[4] = {0, 1, 0, 0}, q2[4] = {0, 0, 1, 0};
    mlsys_rng r;
    mlsys_rng_seed(&r, 9);
    for (int i = 0; i < 100; i++) {
        int y = -1;
        ck_assert_int_eq(llm_spec_rule_standard(p1, q1, 4, 1, &r, &y), 0);
        ck_assert_int_eq(y, 2);
        ck_assert_int_eq(llm_spec_rule_standard(p1, q2, 4, 2, &r, &y), 1);
    }
}
END_TEST

/* ---- the whole engine sampling: the joint law of the first two tokens ---- */

static void target_probs(pair *p, const int *ctx, int n, float *out)
{
    float *logits = malloc((size_t)p->tc.vocab_size * sizeof(float));
    ck_assert(llm_forward_nocache(&p->tc, &p->tw, ctx, n, 1, logits) == 0);
    llm_sampler s;
    ck_assert(llm_sampler_init(&s, p->tc.vocab_size, 1.0f, 0, 1.0f, 1) == 0);
    llm_sampler_probs(&s, logits, out);
    llm_sampler_fini(&s);
    free(logits);
}

/* Run the engine N times from text (2 new tokens, k 3, target at temperature 1, a cold draft
 * so refusals are common) and return the chi-square of the (first, second) token counts
 * against p(a) p(b | a); cells expected below 5 are lumped into one. The draft samples at
 * temperature 0.3, sharper than the target: it is refused where it over-favours its top
 * token, and the residual max(0, p - q) then sends the mass elsewhere, the case a wrong
 * replacement would get most wrong (drawing from p instead fails this test by far). */
static double engine_chi2(pair *p, const char *text, rule_fn rule, long N, int *df_out,
                          long *refusals)
{
    int V = p->tc.vocab_size;
    int ids[64];
    int n = (int)llm_bpe_encode_prompt(&p->tok, text, strlen(text), 1, ids);
    long *cnt = calloc((size_t)V * V, sizeof(long));
    *refusals = 0;
    for (long s = 0; s < N; s++) {
        llm_spec_opts o = {.k = 3, .max_new = 2, .temperature = 1.0f, .top_p = 1.0f,
                           .draft_temperature = 0.3f, .seed = 1000 + (uint64_t)s,
                           .rule = rule};
        int out[4], no;
        llm_spec_stats st;
        char err[256];
        ck_assert_msg(llm_spec_generate(&p->te, &p->tkv, &p->de, &p->dkv, ids, n, &o, out,
                                        &no, &st, err, sizeof err) == 0, "%s", err);
        ck_assert_int_eq(no, 2);
        *refusals += st.drafted - st.accepted;
        cnt[(size_t)out[0] * V + out[1]]++;
    }
    float *p1 = malloc((size_t)V * sizeof(float)), *p2 = malloc((size_t)V * sizeof(float));
    target_probs(p, ids, n, p1);
    double chi = 0.0, lump_e = 0.0;
    long lump_o = 0;
    int df = 0;
    int ctx[70];
    memcpy(ctx, ids, (size_t)n * sizeof(int));
    for (int a = 0; a < V; a++) {
        long row = 0;
        for (int b = 0; b < V; b++)
            row += cnt[(size_t)a * V + b];
        if ((double)N * p1[a] < 5.0) {     /* a rare first token: into the lumped cell */
            lump_e += (double)N * p1[a];
            lump_o += row;
            continue;
        }
        ctx[n] = a;
        target_probs(p, ctx, n + 1, p2);
        for (int b = 0; b < V; b++) {
            double e = (double)N * p1[a] * p2[b];
            long o = cnt[(size_t)a * V + b];
            if (e < 5.0) {
                lump_e += e;
                lump_o += o;
                continue;
            }
            chi += (o - e) * (o - e) / e;
            df++;
        }
    }
    chi += (lump_o - lump_e) * (lump_o - lump_e) / lump_e;
    *df_out = df;             /* cells + the lumped one - 1 */
    free(p1), free(p2), free(cnt);
    return chi;
}

START_TEST(engine_samples_target)
{
    pair p;
    if (!load_pair(&p))
        return;
    ck_assert(nn_set_gemm_kernel(NN_GEMM_INVARIANT) == 0);
    /* a name comes next: many likely first tokens, then the rest of the name (a two-token
     * prompt, so each run's prefill is one row: the runs cost little under a sanitizer) */
    const char *text = "named";
    long N = 3000, refusals;
    int df;
    double chi = engine_chi2(&p, text, NULL, N, &df, &refusals);
    double crit = chi2_crit(df, 3.72);
    printf("engine: %ld runs, %ld refusals, df %d, chi2 %.2f, crit %.2f\n", N, refusals, df,
           chi, crit);
    ck_assert_msg(refusals > N / 10, "only %ld refusals: the test would not exercise them",
                  refusals);
    ck_assert(df >= 5);
    ck_assert_msg(chi < crit, "joint law of two tokens: chi2 %.2f >= %.2f (df %d)", chi, crit,
                  df);
    /* the same measurement tells a wrong rule inside the engine */
    chi = engine_chi2(&p, text, rule_resample_p, N / 2, &df, &refusals);
    printf("engine, resampling from p: chi2 %.2f, crit %.2f\n", chi, chi2_crit(df, 3.72));
    ck_assert_msg(chi > chi2_crit(df, 3.72), "a wrong rule passed: chi2 %.2f", chi);
    free_pair(&p);
}
END_TEST

START_TEST(expected_tokens_formula)
{
    /* the curriculum's numbers: gamma 0.8, k 5 -> 3.69 (3.36 is the no-bonus (1-g^k)/(1-g)) */
    ck_assert(fabs(llm_spec_expected_tokens(0.8, 5) - 3.68928) < 1e-4);
    ck_assert(fabs(llm_spec_expected_tokens(0.75, 4) - 3.05078) < 1e-4);
    ck_assert(fabs(llm_spec_expected_tokens(0.0, 4) - 1.0) < 1e-12);
    ck_assert(fabs(llm_spec_expected_tokens(1.0, 4) - 5.0) < 1e-12);
    /* against the sum it stands for */
    for (int k = 1; k <= 8; k++) {
        double s = 0, a = 0.37 + 0.05 * k;
        for (int i = 0; i <= k; i++)
            s += pow(a, i);
        ck_assert(fabs(llm_spec_expected_tokens(a, k) - s) < 1e-9);
    }
    /* the replacement's draw (nn_sample_categorical_excess): weights max(0, p - q), so
     * only where the target puts more than the draft; none: -1 and no uniform taken */
    float p3[3] = {0.5f, 0.3f, 0.2f}, q3[3] = {0.1f, 0.3f, 0.0f};
    mlsys_rng r;
    mlsys_rng_seed(&r, 9);
    long cnt[3] = {0}, N = 30000;
    for (long i = 0; i < N; i++) {
        int t = nn_sample_categorical_excess(p3, q3, 3, &r);
        ck_assert(t == 0 || t == 2);
        cnt[t]++;
    }
    double f0 = (double)cnt[0] / N;         /* 0.4 / 0.6 */
    printf("excess draw: token 0 %.4f (2/3), token 2 %.4f (1/3)\n", f0, 1 - f0);
    ck_assert_msg(fabs(f0 - 2.0 / 3.0) < 0.015, "token 0 drawn %.4f of the time, 2/3 expected",
                  f0);
    mlsys_rng keep = r;
    ck_assert_int_eq(nn_sample_categorical_excess(q3, q3, 3, &r), -1);
    ck_assert(r.ctr == keep.ctr);
}
END_TEST

/* Round by round: what a round reports matches what it committed, and the caches' fill marks
 * never run ahead of the text. */
START_TEST(rounds_report)
{
    pair p;
    if (!load_pair(&p))
        return;
    int ids[64];
    const char *text = "{\"name\": \"Tom\", \"age\"";
    int n = (int)llm_bpe_encode_prompt(&p.tok, text, strlen(text), 1, ids);
    llm_spec_opts o = {.k = 5, .max_new = 40, .temperature = 0.8f, .top_p = 1.0f,
                       .draft_temperature = -1, .seed = 7};
    llm_spec s;
    char err[256];
    ck_assert(llm_spec_start(&s, &p.te, &p.tkv, 0, &p.de, &p.dkv, 0, ids, n, &o, err,
                             sizeof err) == 0);
    int r, rounds = 0;
    llm_spec_round_info info;
    do {
        int before = s.n;
        r = llm_spec_round(&s, &info, err, sizeof err);
        ck_assert_msg(r >= 0, "%s", err);
        rounds++;
        ck_assert(info.kept >= 0 && info.kept <= info.k);
        ck_assert_int_eq(info.committed, s.n - before);
        ck_assert(info.committed <= info.kept + 1);
        for (int i = 0; i < info.kept && i < info.committed; i++)
            ck_assert_int_eq(s.ctx[before + i], info.x[i]);
        if (info.committed == info.kept + 1)
            ck_assert_int_eq(s.ctx[before + info.kept], info.y);
        ck_assert(s.t_fed <= s.n - 1 && s.d_fed <= s.t_fed);
    } while (r == 1);
    ck_assert_int_eq(s.n - s.n_prompt, 40);
    ck_assert_int_eq(s.st.rounds, rounds);
    llm_spec_end(&s);
    free_pair(&p);
}
END_TEST

START_TEST(bad_input)
{
    pair p;
    if (!load_pair(&p))
        return;
    char err[256];
    int ids[200], out[200], no;
    for (int i = 0; i < 200; i++)
        ids[i] = 5;
    llm_spec_opts o = {.k = 4, .max_new = 8, .temperature = 0.0f, .top_p = 1.0f,
                       .draft_temperature = -1};
    o.k = 0;
    ck_assert(llm_spec_generate(&p.te, &p.tkv, &p.de, &p.dkv, ids, 3, &o, out, &no, NULL, err,
                                sizeof err) == -1);
    ck_assert(strstr(err, "k 0"));
    o.k = 4;
    ck_assert(llm_spec_generate(&p.te, &p.tkv, &p.de, &p.dkv, ids, 129, &o, out, &no, NULL,
                                err, sizeof err) == -1);
    ck_assert(strstr(err, "prompt of 129"));
    ids[1] = 9999;
    ck_assert(llm_spec_generate(&p.te, &p.tkv, &p.de, &p.dkv, ids, 3, &o, out, &no, NULL, err,
                                sizeof err) == -1);
    ids[1] = 5;
    /* a full context: 128 prompt tokens leave room for exactly one new token */
    ck_assert(llm_spec_generate(&p.te, &p.tkv, &p.de, &p.dkv, ids, 128, &o, out, &no, NULL,
                                err, sizeof err) == 0);
    ck_assert_int_eq(no, 1);
    ck_assert(llm_spec_generate(&p.te, &p.tkv, &p.de, &p.dkv, ids, 125, &o, out, &no, NULL,
                                err, sizeof err) == 0);
    ck_assert_int_eq(no, 4);
    /* a draft with another vocabulary is refused */
    llm_config c = {32, 64, 1, 4, 2, 300, 128, 1, 0, 0};
    llm_weights w;
    llm_fwd e;
    llm_kv kv;
    ck_assert(llm_config_check(&c, err, sizeof err) == 0);
    ck_assert(llm_weights_alloc(&w, &c, err, sizeof err) == 0);
    ck_assert(llm_fwd_init(&e, &c, &w, 4, err, sizeof err) == 0);
    ck_assert(llm_kv_init_contiguous(&kv, &c, 1, 0, err, sizeof err) == 0);
    ck_assert(llm_spec_generate(&p.te, &p.tkv, &e, &kv, ids, 3, &o, out, &no, NULL, err,
                                sizeof err) == -1);
    ck_assert(strstr(err, "vocabulary"));
    llm_kv_free(&kv);
    llm_fwd_fini(&e);
    llm_weights_free(&w);
    free_pair(&p);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("speculative");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, greedy_equals_target);
    tcase_add_test(tc, greedy_equals_target_ref);
    tcase_add_test(tc, rule_follows_target);
    tcase_add_test(tc, engine_samples_target);
    tcase_add_test(tc, expected_tokens_formula);
    tcase_add_test(tc, rounds_report);
    tcase_add_test(tc, bad_input);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed != 0;
}
