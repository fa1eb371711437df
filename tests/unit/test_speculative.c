/* test_speculative.c - speculative decoding, a mode of the generation engine
 * (core/llm/speculative.c), on the shipped target and draft: greedy output equal to the
 * target's own greedy decoding token for token on 120 prompts under the batch-invariant GEMM
 * (and 24 under the reference kernel), one at a time and all of them in one busy batch with
 * plain and JSON requests beside them; the acceptance rule against the distribution it must
 * produce (chi-square, fixed seeds; a wrong rule must fail the same test); the engine
 * sampling (first two tokens' joint distribution against the target's, computed without a
 * cache); what a round reports; the caches rolled back past refused drafts; bad input. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "../../core/llm/engine.h"
#include "../../core/nn/nn.h"
#include "ref_decode.h"

/* ---- the shipped pair, loaded once per test (CK_FORK) ---- */
typedef struct pair {
    llm_config tc, dc;
    llm_weights tw, dw;
    llm_tokenizer tok;
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
    return 1;
}

static void free_pair(pair *p)
{
    llm_tokenizer_free(&p->tok);
    llm_weights_free(&p->tw);
    llm_weights_free(&p->dw);
}

/* An engine with the draft: k drafts a step, seats for seqs sequences. */
static llm_engine *spec_engine(pair *p, int k, int seqs, int tokens, llm_spec_rule_fn rule,
                               float draft_temp)
{
    char err[256];
    llm_engine_opts o = {.max_num_seqs = seqs, .max_num_batched_tokens = tokens,
                         .spec_k = k, .draft_c = &p->dc, .draft_w = &p->dw, .spec_rule = rule,
                         .spec_draft_temperature = draft_temp, .tok = &p->tok};
    llm_engine *e = llm_engine_create(&p->tc, &p->tw, &o, err, sizeof err);
    ck_assert_msg(e != NULL, "%s", err);
    return e;
}

/* What one request's events carried. */
typedef struct got {
    int tok[256], n, finals;
    llm_finish why;
    llm_spec_stats st;
} got;

static void on_got(void *u, const llm_engine_event *ev)
{
    got *g = u;
    if (ev->token >= 0 && g->n < 256)
        g->tok[g->n++] = ev->token;
    if (ev->finish != LLM_FINISH_NONE) {
        g->finals++;
        g->why = ev->finish;
    }
}

/* The choices of a request of n samples. */
static void on_choices(void *u, const llm_engine_event *ev)
{
    got *g = (got *)u + ev->index;
    on_got(g, ev);
}

static int submit_req(llm_engine *e, const int *ids, int n, int max_new, int stop, float temp,
                      uint64_t seed, got *g)
{
    char err[256];
    llm_request r = {.prompt = ids, .n_prompt = n, .max_tokens = max_new, .temperature = temp,
                     .top_p = 1.0f, .seed = seed, .ignore_eos = !stop, .on_event = on_got,
                     .u = g};
    int id = llm_engine_submit(e, &r, err, sizeof err);
    ck_assert_msg(id >= 0, "%s", err);
    return id;
}

/* Every round's bookkeeping: 1..k+1 tokens each, kept <= drafted, positions reached only
 * past the one before, the histogram and the per-position counts summing up. */
static void check_stats(const llm_spec_stats *st, int k)
{
    ck_assert(st->accepted <= st->drafted);
    long hist = 0, pk = 0;
    for (int j = 0; j <= k; j++)
        hist += st->kept_hist[j];
    for (int j = 0; j < k; j++) {
        ck_assert(st->pos_kept[j] <= st->pos_tried[j]);
        if (j > 0)
            ck_assert(st->pos_tried[j] <= st->pos_kept[j - 1]);   /* reached only past j-1 */
        pk += st->pos_kept[j];
    }
    ck_assert_int_eq(hist, st->rounds);
    ck_assert_int_eq(pk, st->accepted);
    ck_assert(st->tokens >= st->rounds && st->tokens <= st->rounds * (k + 1));
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
 * among k + 1 rows, so the verify's logits are plain decoding's bit for bit): each alone on
 * an engine with k = 1 + i % 8, then all of them at once on one engine (k 4) with 8 seats,
 * chunked prefill and plain and JSON requests between them. */
static void greedy_equal(nn_gemm_kernel kern, int n_prompts)
{
    pair p;
    if (!load_pair(&p))
        return;
    ck_assert(nn_set_gemm_kernel(kern) == 0);
    long tokens = 0, kept = 0, tried = 0;
    static int ref[128][256], nref[128];
    static got g[128];
    for (int i = 0; i < n_prompts; i++) {
        int ids[LLM_DOC_MAX];
        int n = prompt(&p, i, ids);
        int max_new = 24 + i % 17, stop = i % 3 == 0, k = 1 + i % 8;
        nref[i] = target_greedy(&p, ids, n, max_new, stop, ref[i]);
        llm_engine *e = spec_engine(&p, k, 1, 256, NULL, 0.0f);
        memset(&g[i], 0, sizeof g[i]);
        submit_req(e, ids, n, max_new, stop, 0.0f, (uint64_t)i, &g[i]);
        ck_assert(llm_engine_run(e) > 0);
        /* an EOS that ended it is an event, not part of the reference's output */
        int ng = g[i].n;
        if (stop && ng > 0 && g[i].why == LLM_FINISH_STOP &&
            (g[i].tok[ng - 1] == LLM_TOK_EOS || g[i].tok[ng - 1] == LLM_TOK_BOS))
            ng--;
        ck_assert_msg(nref[i] == ng, "prompt %d (k %d): %d tokens alone, %d speculative", i,
                      k, nref[i], ng);
        for (int t = 0; t < ng; t++)
            ck_assert_msg(ref[i][t] == g[i].tok[t], "prompt %d (k %d): token %d is %d alone, "
                          "%d speculative", i, k, t, ref[i][t], g[i].tok[t]);
        llm_spec_stats st;
        llm_engine_spec_stats(e, &st);
        check_stats(&st, k);
        for (int j = 0; j < k; j++)
            kept += st.pos_kept[j], tried += st.pos_tried[j];
        tokens += ng;
        llm_engine_metrics m;
        llm_engine_metrics_get(e, &m);
        ck_assert_int_eq(m.kv_used, 0);
        llm_engine_free(e);
    }
    /* the pair agrees often enough for speculation to matter (measured 0.85 at k = 4) */
    printf("greedy (%s): %d prompts alone, %ld tokens identical; acceptance %.3f\n",
           nn_gemm_kernel_name(kern), n_prompts, tokens, (double)kept / (double)tried);
    ck_assert((double)kept / (double)tried > 0.6);
    /* all at once in one busy engine: every round of the step in one target forward */
    llm_engine *e = spec_engine(&p, 4, 8, 64, NULL, 0.0f);
    static got plain[64];
    int n_plain = 0;
    for (int i = 0; i < n_prompts; i++) {
        int ids[LLM_DOC_MAX];
        int n = prompt(&p, i, ids);
        memset(&g[i], 0, sizeof g[i]);
        submit_req(e, ids, n, 24 + i % 17, i % 3 == 0, 0.0f, (uint64_t)i, &g[i]);
        if (i % 4 == 0 && n_plain < 64) {       /* plain and JSON requests between them */
            char err[256];
            memset(&plain[n_plain], 0, sizeof plain[n_plain]);
            llm_request r = {.prompt = ids, .n_prompt = n, .max_tokens = 20,
                             .temperature = 1.0f, .seed = (uint64_t)i, .no_speculate = 1,
                             .json = (i / 4) % 2, .on_event = on_got, .u = &plain[n_plain]};
            ck_assert_msg(llm_engine_submit(e, &r, err, sizeof err) >= 0, "%s", err);
            n_plain++;
        }
    }
    /* and three samples of prompt 1, greedy: three times its reference, each speculating */
    static got three[3];
    memset(three, 0, sizeof three);
    {
        int ids[LLM_DOC_MAX];
        int n = prompt(&p, 1, ids);
        char err[256];
        llm_request r = {.prompt = ids, .n_prompt = n, .max_tokens = 24 + 1 % 17,
                         .temperature = 0.0f, .top_p = 1.0f, .ignore_eos = 1, .n = 3,
                         .on_event = on_choices, .u = three};
        ck_assert_msg(llm_engine_submit(e, &r, err, sizeof err) >= 0, "%s", err);
    }
    long steps = llm_engine_run(e), batched_rounds = 0;
    for (int c = 0; c < 3; c++) {
        ck_assert_int_eq(three[c].finals, 1);
        ck_assert_int_eq(three[c].n, nref[1]);
        ck_assert(!memcmp(three[c].tok, ref[1], sizeof(int) * (size_t)nref[1]));
    }
    int differ = 0;
    for (int i = 0; i < n_prompts; i++) {
        int ng = g[i].n;
        if (i % 3 == 0 && ng > 0 && g[i].why == LLM_FINISH_STOP &&
            (g[i].tok[ng - 1] == LLM_TOK_EOS || g[i].tok[ng - 1] == LLM_TOK_BOS))
            ng--;
        differ += ng != nref[i] || memcmp(ref[i], g[i].tok, sizeof(int) * (size_t)ng);
        ck_assert_int_eq(g[i].finals, 1);
    }
    for (int i = 0; i < n_plain; i++)
        ck_assert_int_eq(plain[i].finals, 1);
    llm_spec_stats st;
    llm_engine_spec_stats(e, &st);
    check_stats(&st, 4);
    batched_rounds = st.rounds;
    llm_engine_metrics m;
    llm_engine_metrics_get(e, &m);
    ck_assert_int_eq(m.kv_used, 0);
    char err[256];
    ck_assert_msg(llm_paged_check(llm_engine_kv(e), err, sizeof err) == 0, "%s", err);
    printf("greedy (%s): the same %d prompts at once with %d plain and JSON ones, 8 seats: "
           "%d differ; %ld rounds in %ld steps (%.1f verified per target forward)\n",
           nn_gemm_kernel_name(kern), n_prompts, n_plain, differ, batched_rounds, steps,
           (double)batched_rounds / (double)steps);
    ck_assert_int_eq(differ, 0);
    ck_assert((double)batched_rounds / (double)steps > 2.0);    /* rounds share forwards */
    llm_engine_free(e);
    free_pair(&p);
}

START_TEST(greedy_equals_target)
{
    greedy_equal(NN_GEMM_INVARIANT, 120);
}
END_TEST

/* A pool too small for every speculating sequence's rounds: sequences are preempted (both
 * caches given back) and recomputed, and the tokens stay the target's own. */
START_TEST(greedy_exact_under_preemption)
{
    pair p;
    if (!load_pair(&p))
        return;
    ck_assert(nn_set_gemm_kernel(NN_GEMM_INVARIANT) == 0);
    char err[256];
    /* 8 seats, blocks of 8, room for 3 full contexts */
    llm_engine_opts o = {.max_num_seqs = 8, .max_num_batched_tokens = 64, .block_size = 8,
                         .n_blocks = 3 * 16, .spec_k = 4, .draft_c = &p.dc, .draft_w = &p.dw};
    llm_engine *e = llm_engine_create(&p.tc, &p.tw, &o, err, sizeof err);
    ck_assert_msg(e != NULL, "%s", err);
    enum { NP = 24 };
    static got g[NP];
    static int ref[NP][128], nref[NP];
    for (int i = 0; i < NP; i++) {
        int ids[LLM_DOC_MAX];
        int n = prompt(&p, i, ids);
        nref[i] = target_greedy(&p, ids, n, 60, 0, ref[i]);
        memset(&g[i], 0, sizeof g[i]);
        submit_req(e, ids, n, 60, 0, 0.0f, (uint64_t)i, &g[i]);
    }
    llm_engine_run(e);
    llm_engine_metrics m;
    llm_engine_metrics_get(e, &m);
    int differ = 0;
    for (int i = 0; i < NP; i++)
        differ += g[i].n != nref[i] || memcmp(g[i].tok, ref[i], sizeof(int) * (size_t)nref[i]);
    llm_spec_stats st;
    llm_engine_spec_stats(e, &st);
    printf("speculation under preemption: %ld preemptions, %ld rounds, %d of %d differ\n",
           m.preemptions, st.rounds, differ, NP);
    ck_assert_int_gt(m.preemptions, 0);
    ck_assert_int_eq(differ, 0);
    ck_assert_int_eq(m.kv_used, 0);
    ck_assert_msg(llm_paged_check(llm_engine_kv(e), err, sizeof err) == 0, "%s", err);
    llm_engine_free(e);
    free_pair(&p);
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

/* ---- the engine sampling: the joint law of the first two tokens ---- */

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

/* The engine on N requests from text (k 3, target at temperature 1, a cold draft so
 * refusals are common), 16 at a time: the chi-square of the (first, second) token counts
 * against p(a) p(b | a); cells expected below 5 are lumped into one. The first token comes
 * out of the prefill; the second is the first round's: its first draft kept, or the token
 * that replaced it. The draft samples at temperature 0.3, sharper than the target: it is
 * refused where it over-favours its top token, and the residual max(0, p - q) then sends
 * the mass elsewhere, the case a wrong replacement would get most wrong (drawing from p
 * instead fails this test by far). Each request asks 5 tokens, so that round drafts 3. */
static double engine_chi2(pair *p, const char *text, rule_fn rule, long N, int *df_out,
                          long *refusals)
{
    int V = p->tc.vocab_size;
    int ids[64];
    int n = (int)llm_bpe_encode_prompt(&p->tok, text, strlen(text), 1, ids);
    long *cnt = calloc((size_t)V * V, sizeof(long));
    llm_engine *e = spec_engine(p, 3, 16, 64, rule, 0.3f);
    got *g = calloc((size_t)N, sizeof *g);
    for (long s = 0; s < N; s++)
        submit_req(e, ids, n, 5, 0, 1.0f, 1000 + (uint64_t)s, &g[s]);
    llm_engine_run(e);
    llm_spec_stats st;
    llm_engine_spec_stats(e, &st);
    *refusals = st.drafted - st.accepted;
    for (long s = 0; s < N; s++) {
        ck_assert_int_eq(g[s].n, 5);
        cnt[(size_t)g[s].tok[0] * V + g[s].tok[1]]++;
    }
    llm_engine_free(e);
    free(g);
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
    long N = 4000, refusals;
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
    chi = engine_chi2(&p, text, rule_resample_p, N, &df, &refusals);
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

/* Round by round, on blocks of 4 tokens: what a round reports is what it committed (its kept
 * drafts, then y), and after every round both caches hold exactly the committed context but
 * its last token: the blocks drafts had taken are back (the target's map, the pool's use). */
START_TEST(rounds_report)
{
    pair p;
    if (!load_pair(&p))
        return;
    char err[256];
    int ids[64];
    const char *text = "{\"name\": \"Tom\", \"age\"";
    int n = (int)llm_bpe_encode_prompt(&p.tok, text, strlen(text), 1, ids);
    llm_engine_opts o = {.max_num_seqs = 1, .max_num_batched_tokens = 64, .block_size = 4,
                         .spec_k = 5, .draft_c = &p.dc, .draft_w = &p.dw};
    llm_engine *e = llm_engine_create(&p.tc, &p.tw, &o, err, sizeof err);
    ck_assert_msg(e != NULL, "%s", err);
    static got g;
    memset(&g, 0, sizeof g);
    submit_req(e, ids, n, 40, 0, 0.8f, 7, &g);
    int rounds = 0, refusals = 0, plain = 0;
    while (llm_engine_has_work(e)) {
        int before = g.n;
        llm_step_info info;
        ck_assert(llm_engine_step(e, &info) >= 0);
        if (info.n_items < 1)
            continue;
        if (info.items[0].k == 0) {
            /* the prefill, or a decode with no room for a draft: the last token */
            plain += !info.items[0].prefill;
            ck_assert(info.items[0].prefill || g.n == 40);
            continue;
        }
        const llm_step_item *it = &info.items[0];
        rounds++;
        refusals += it->kept < it->k;
        ck_assert(it->kept >= 0 && it->kept <= it->k && it->k <= 5);
        ck_assert_int_eq(it->committed, g.n - before);
        ck_assert(it->committed >= 1 && it->committed <= it->kept + 1);
        ck_assert_int_eq(it->n, it->k + 1);           /* the round's rows: 1 + k */
        for (int i = 0; i < it->kept && i < it->committed; i++)
            ck_assert_int_eq(g.tok[before + i], it->x[i]);
        if (it->committed == it->kept + 1)
            ck_assert_int_eq(g.tok[before + it->kept], it->y);
        if (g.finals)
            break;
        /* positions mapped: the prompt and the tokens but the last, in whole blocks */
        llm_paged_stats ps;
        llm_paged_stats_get(llm_engine_kv(e), &ps);
        int mapped = n + g.n - 1;
        ck_assert_int_eq(ps.tokens, mapped);
        ck_assert_int_eq(ps.used, (mapped + 3) / 4);
    }
    ck_assert_int_eq(g.n, 40);
    llm_spec_stats st;
    llm_engine_spec_stats(e, &st);
    ck_assert_int_eq(st.rounds, rounds);
    ck_assert_int_eq(st.tokens, 39 - plain);          /* the first came from the prefill */
    check_stats(&st, 5);
    printf("rounds: %d rounds for 39 tokens, %d with a refusal\n", rounds, refusals);
    ck_assert(refusals > 0);
    llm_engine_metrics m;
    llm_engine_metrics_get(e, &m);
    ck_assert_int_eq(m.kv_used, 0);
    llm_engine_free(e);
    free_pair(&p);
}
END_TEST

START_TEST(bad_input)
{
    pair p;
    if (!load_pair(&p))
        return;
    char err[256];
    int ids[200];
    for (int i = 0; i < 200; i++)
        ids[i] = 5;
    llm_engine_opts o = {.max_num_seqs = 1, .spec_k = 17, .draft_c = &p.dc, .draft_w = &p.dw};
    ck_assert(llm_engine_create(&p.tc, &p.tw, &o, err, sizeof err) == NULL);
    ck_assert_msg(strstr(err, "k 17"), "%s", err);
    o.spec_k = 4;
    o.draft_c = NULL;
    ck_assert(llm_engine_create(&p.tc, &p.tw, &o, err, sizeof err) == NULL);
    ck_assert_msg(strstr(err, "draft"), "%s", err);
    /* a draft with another vocabulary is refused */
    llm_config c = {32, 64, 1, 4, 2, 300, 128, 1, 0, 0};
    llm_weights w;
    ck_assert(llm_config_check(&c, err, sizeof err) == 0);
    ck_assert(llm_weights_alloc(&w, &c, err, sizeof err) == 0);
    o.draft_c = &c;
    o.draft_w = &w;
    ck_assert(llm_engine_create(&p.tc, &p.tw, &o, err, sizeof err) == NULL);
    ck_assert_msg(strstr(err, "vocabulary"), "%s", err);
    llm_weights_free(&w);
    llm_engine *e = spec_engine(&p, 4, 2, 256, NULL, 0.0f);
    llm_request r = {.prompt = ids, .n_prompt = 129, .max_tokens = 8};
    ck_assert(llm_engine_submit(e, &r, err, sizeof err) == -1);
    ck_assert_msg(strstr(err, "prompt of 129"), "%s", err);
    r.n_prompt = 3;
    ids[1] = 9999;
    ck_assert(llm_engine_submit(e, &r, err, sizeof err) == -1);
    ids[1] = 5;
    /* a full context: 128 prompt tokens leave room for exactly one new token, 125 for four */
    static got g1, g4;
    memset(&g1, 0, sizeof g1);
    memset(&g4, 0, sizeof g4);
    submit_req(e, ids, 128, 8, 0, 0.0f, 1, &g1);
    submit_req(e, ids, 125, 8, 0, 0.0f, 1, &g4);
    llm_engine_run(e);
    ck_assert_int_eq(g1.n, 1);
    ck_assert_int_eq(g4.n, 4);
    ck_assert_int_eq(g1.why, LLM_FINISH_LENGTH);
    ck_assert_int_eq(g4.why, LLM_FINISH_LENGTH);
    llm_engine_free(e);
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
    tcase_add_test(tc, greedy_exact_under_preemption);
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
