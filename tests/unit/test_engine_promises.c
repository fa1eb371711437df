/* test_engine_promises.c - engine promises its other suites leave unchecked (shipped model):
 * the prefix cache keeps what a request generated (no future or draft hashed); n samples wait
 * for the blocks their forks copy; JSON closes within the context; a time on a histogram
 * bound counts in that bucket; no plan made ahead preempts; the sampler breaks ties by the
 * lower id and ends its nucleus where top_p is reached. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef HAVE_CJSON
#include <cjson/cJSON.h>
#endif
#include "../../core/llm/engine.h"
#include "../../core/nn/nn.h"

#define MODEL "assets/models/model.bin"
#define TOKENIZER "assets/models/tokenizer.bin"

static llm_config g_c;
static llm_weights g_w;
static llm_tokenizer g_t;

static void load(void)
{
    char err[256];
    ck_assert_msg(llm_checkpoint_read(MODEL, &g_c, &g_w, err, sizeof err) == 0, "%s", err);
    ck_assert_msg(llm_tokfile_read(TOKENIZER, 0, &g_t, err, sizeof err) == 0, "%s", err);
    nn_set_gemm_kernel(NN_GEMM_INVARIANT);
}

static void unload(void)
{
    llm_weights_free(&g_w);
    llm_tokenizer_free(&g_t);
}

static llm_engine *make(llm_engine_opts *o)
{
    char err[256];
    llm_engine *s = llm_engine_create(&g_c, &g_w, o, err, sizeof err);
    ck_assert_msg(s != NULL, "%s", err);
    return s;
}

static void prompt(int *p, int n, int salt)
{
    for (int i = 0; i < n; i++)
        p[i] = 3 + (i * 13 + salt * 31) % 250;
}

/* Run every step to the end; every step must succeed. */
static void run_all(llm_engine *s)
{
    while (llm_engine_has_work(s))
        ck_assert(llm_engine_step(s, NULL) >= 0);
}

static void clean_end(llm_engine *s)
{
    char err[256];
    llm_engine_metrics m;
    llm_engine_metrics_get(s, &m);
    ck_assert_int_eq(m.kv_used, 0);
    ck_assert_msg(llm_paged_check(llm_engine_kv(s), err, sizeof err) == 0, "%s", err);
    llm_engine_free(s);
}

/* What the callbacks of up to 8 choices saw. */
enum { MAXCH = 8, MAXTOK = 64 };
typedef struct choices {
    int tok[MAXCH][MAXTOK], n[MAXCH], finals[MAXCH];
    llm_finish why[MAXCH];
    long first_step[MAXCH], final_step[MAXCH];
    const long *step;             /* the test's step counter */
} choices;

static void on_choice(void *u, const llm_engine_event *ev)
{
    choices *c = u;
    int i = ev->index;
    ck_assert(i >= 0 && i < MAXCH);
    if (ev->token >= 0 && c->n[i] < MAXTOK) {
        if (c->n[i] == 0 && c->step)
            c->first_step[i] = *c->step;
        c->tok[i][c->n[i]++] = ev->token;
    }
    if (ev->finish != LLM_FINISH_NONE) {
        c->finals[i]++;
        c->why[i] = ev->finish;
        if (c->step)
            c->final_step[i] = *c->step;
    }
}

static int submit(llm_engine *s, const int *p, int np, int n, int max, float temp,
                  uint64_t seed, choices *c)
{
    char err[256];
    llm_request r = {.prompt = p, .n_prompt = np, .max_tokens = max, .temperature = temp,
                     .top_p = 1.0f, .seed = seed, .ignore_eos = 1, .n = n,
                     .on_event = on_choice, .u = c};
    int id = llm_engine_submit(s, &r, err, sizeof err);
    ck_assert_msg(id >= 0, "%s", err);
    return id;
}

/* ---- the prefix cache keeps what a request generated ---- */

/* A second turn of a chat sends the first turn's prompt and answer back: after a request
 * ends, its prompt followed by its output must find every full block of the positions the
 * engine computed (all but the last token, which is never fed), on the plain engine and with
 * the overlap scheduler, whose token still being drawn (a future) must not be hashed into a
 * block. With speculation (the draft is the target itself, greedy: every draft is kept) the
 * drafts are not committed tokens either; blocks the last round completes may go
 * unregistered (nothing is planned after it), so there the bound is the blocks full before
 * that round: at most k + 1 tokens fewer. */
START_TEST(generated_blocks_are_found_again)
{
    load();
    enum { NP = 13, OUT = 30, BS = 8, K = 4 };
    const char *mode[3] = {"speculative", "overlap", "plain"};
    /* a prompt of its own each (a sequence's token array past its end holds whatever the
     * allocator gave it: maybe an earlier engine's tokens, which must not be these) */
    for (int m = 0; m < 3; m++) {
        llm_engine_opts o = {.max_num_seqs = 2, .block_size = BS, .max_model_len = 64,
                             .overlap = m == 1};
        if (m == 0) {
            o.spec_k = K;
            o.draft_c = &g_c;
            o.draft_w = &g_w;
        }
        llm_engine *s = make(&o);
        int p[NP + OUT];
        prompt(p, NP, 7 + m);
        static choices c;
        memset(&c, 0, sizeof c);
        submit(s, p, NP, 1, OUT, 0.0f, 1, &c);
        run_all(s);
        ck_assert_int_eq(c.finals[0], 1);
        ck_assert_int_eq(c.n[0], OUT);
        memcpy(p + NP, c.tok[0], OUT * sizeof(int));
        int L = NP + OUT, computed = L - 1;
        int want = computed / BS * BS;
        if (m == 0)
            want = (computed - (K + 1)) / BS * BS;
        int hit = llm_paged_match(llm_engine_kv(s), p, L, NULL);
        printf("%s: prompt %d + output %d tokens, %d computed: the prefix cache finds %d "
               "(%s %d)\n", mode[m], NP, OUT, computed, hit, m == 0 ? "at least" : "want",
               want);
        if (m == 0)
            ck_assert_int_ge(hit, want);
        else
            ck_assert_int_eq(hit, want);
        clean_end(s);
    }
    unload();
}
END_TEST

/* ---- n samples: the copies their forks will make are part of the admission ---- */

/* n = 4 on a 13-token prompt in blocks of 8: its second block is partial, and the first
 * write of each choice but the last copies it, so the request needs 2 + 3 blocks. B (9 + 5
 * tokens, 2 blocks all its life) runs first in a pool of 6: A must wait for B's blocks (4
 * free, 5 needed) rather than be admitted on its prompt's 2 and preempted at its first
 * decode. */
START_TEST(n_samples_admitted_with_their_copies)
{
    load();
    llm_engine_opts o = {.max_num_seqs = 5, .block_size = 8, .n_blocks = 6,
                         .max_model_len = 24};
    llm_engine *s = make(&o);
    long step = 0;
    int a[13], b[9];
    prompt(a, 13, 1);
    prompt(b, 9, 2);
    static choices ca, cb;
    memset(&ca, 0, sizeof ca);
    memset(&cb, 0, sizeof cb);
    ca.step = cb.step = &step;
    submit(s, b, 9, 1, 5, 0.0f, 1, &cb);
    submit(s, a, 13, 4, 3, 1.0f, 2, &ca);
    while (llm_engine_has_work(s)) {
        step++;
        ck_assert(llm_engine_step(s, NULL) >= 0);
    }
    llm_engine_metrics m;
    llm_engine_metrics_get(s, &m);
    llm_paged_stats ps;
    llm_paged_stats_get(llm_engine_kv(s), &ps);
    printf("n = 4 beside a running request: B ends in step %ld, A's first token in step %ld; "
           "%ld preemptions, %ld copies on write\n", cb.final_step[0], ca.first_step[0],
           m.preemptions, ps.cows);
    ck_assert_int_eq(cb.finals[0], 1);
    ck_assert_int_eq(cb.n[0], 5);
    for (int i = 0; i < 4; i++) {
        ck_assert_int_eq(ca.finals[i], 1);
        ck_assert_int_eq(ca.why[i], LLM_FINISH_LENGTH);
        ck_assert_int_eq(ca.n[i], 3);
    }
    ck_assert_int_eq(m.preemptions, 0);
    ck_assert_int_eq(ps.cows, 3);
    ck_assert_msg(ca.first_step[0] > cb.final_step[0], "A drew its first token in step %ld, "
                  "while B (ended in step %ld) held the blocks its copies need",
                  ca.first_step[0], cb.final_step[0]);
    clean_end(s);
    unload();
}
END_TEST

/* ---- JSON mode closes its value within the context ---- */

/* What a JSON request's events carried: its text, its end. */
typedef struct json_out {
    char text[1024];
    size_t len;
    int finals, n_tok;
    llm_finish why;
} json_out;

static void on_json(void *u, const llm_engine_event *ev)
{
    json_out *o = u;
    if (ev->text_len > 0 && o->len + (size_t)ev->text_len < sizeof o->text) {
        memcpy(o->text + o->len, ev->text, (size_t)ev->text_len);
        o->len += (size_t)ev->text_len;
        o->text[o->len] = 0;
    }
    o->n_tok += ev->token >= 0;
    if (ev->finish != LLM_FINISH_NONE) {
        o->finals++;
        o->why = ev->finish;
    }
}

/* max_tokens above what the context leaves is cut to that room, and the JSON mask's budget
 * with it: with a context of 44 positions and a 29-token prompt, 16 tokens remain, and every
 * answer asked for 500 tokens must still be a complete JSON value within them (stop, not
 * length), which cJSON parses whole. */
START_TEST(json_closes_within_the_context)
{
    load();
    enum { NP = 40, CTX = 44, NREQ = 12 };
    llm_engine_opts o = {.max_num_seqs = 4, .max_model_len = CTX, .tok = &g_t};
    llm_engine *s = make(&o);
    int p[NP];
    int np = (int)llm_bpe_encode_prompt(&g_t, "{\"name\": \"Tom\", \"age\": 7, \"city\": "
                                        "\"Paris\", \"pets\": [", 48, 1, p);
    ck_assert_int_le(np, NP);
    static json_out out[NREQ];
    memset(out, 0, sizeof out);
    char err[256];
    for (int i = 0; i < NREQ; i++) {
        llm_request r = {.prompt = p, .n_prompt = np, .max_tokens = 500,
                         .temperature = 1.0f, .top_p = 1.0f, .seed = 40 + (uint64_t)i,
                         .ignore_eos = 1, .json = 1, .on_event = on_json, .u = &out[i]};
        ck_assert_msg(llm_engine_submit(s, &r, err, sizeof err) >= 0, "%s", err);
    }
    run_all(s);
    int room = CTX - np + 1;
    for (int i = 0; i < NREQ; i++) {
        ck_assert_int_eq(out[i].finals, 1);
        ck_assert_msg(out[i].why == LLM_FINISH_STOP && out[i].n_tok <= room,
                      "answer %d ended '%s' after %d tokens (room %d): '%s'", i,
                      llm_finish_name(out[i].why), out[i].n_tok, room, out[i].text);
#ifdef HAVE_CJSON
        cJSON *v = cJSON_ParseWithOpts(out[i].text, NULL, 1);
        ck_assert_msg(v != NULL, "answer %d is not JSON: '%s'", i, out[i].text);
        cJSON_Delete(v);
#endif
    }
#ifndef HAVE_CJSON
    printf("json: built without cJSON, the answers' parse is not checked (only their end)\n");
#endif
    clean_end(s);
    unload();
}
END_TEST

/* ---- the histograms: a value on a bucket's bound is in that bucket ---- */

static double g_now;
static double step_clock(void *u)
{
    (void)u;
    return g_now;
}

/* Prometheus' buckets are "le": a TTFT or TPOT of exactly 0.25 s counts in the bucket whose
 * bound is 0.25 (then /metrics' cumulative counts say so). On a clock that moves 0.25 s a
 * step: the first token in step 1 (TTFT 0.25), one more a step (TPOT 0.25). */
START_TEST(histogram_bound_is_its_bucket)
{
    load();
    int b = 0;
    while (b < LLM_ENGINE_HIST_N - 1 && llm_engine_hist_bounds[b] != 0.25)
        b++;
    ck_assert_msg(b < LLM_ENGINE_HIST_N - 1, "no bucket bound of 0.25 s");
    llm_engine_opts o = {.max_num_seqs = 1, .clock = step_clock};
    llm_engine *s = make(&o);
    int p[6];
    prompt(p, 6, 4);
    g_now = 0;
    static choices c;
    memset(&c, 0, sizeof c);
    submit(s, p, 6, 1, 5, 0.0f, 1, &c);
    while (llm_engine_has_work(s)) {
        g_now += 0.25;
        ck_assert(llm_engine_step(s, NULL) >= 0);
    }
    llm_engine_metrics m;
    llm_engine_metrics_get(s, &m);
    ck_assert_int_eq(m.ttft_count, 1);
    ck_assert_int_eq(m.tpot_count, 1);
    ck_assert_double_eq(m.ttft_sum, 0.25);
    ck_assert_double_eq(m.tpot_sum, 0.25);
    ck_assert_msg(m.ttft_hist[b] == 1 && m.tpot_hist[b] == 1, "TTFT and TPOT of 0.25 s: "
                  "bucket le=0.25 holds %ld and %ld, the next %ld and %ld", m.ttft_hist[b],
                  m.tpot_hist[b], m.ttft_hist[b + 1], m.tpot_hist[b + 1]);
    clean_end(s);
    unload();
}
END_TEST

/* ---- the overlap scheduler plans ahead only when planning cannot preempt ---- */

/* Eight requests on a pool of 14 blocks of 4 tokens: they outgrow it, and the plain
 * planning preempts. A step planned on the worker thread while the forward runs must never
 * preempt (it would take blocks back from sequences that forward is writing): it may plan
 * ahead only when the pool holds every running sequence's blocks up to its next token, the
 * one being drawn included. Whatever step ran a plan made ahead reports no preemption, and
 * the tokens are those of the engine without overlap. */
START_TEST(overlap_never_preempts_ahead)
{
    load();
    enum { NREQ = 8, OUT = 20 };
    static choices c[2][NREQ];
    long ahead_steps = 0, preempted = 0;
    for (int overlap = 0; overlap < 2; overlap++) {
        llm_engine_opts o = {.max_num_seqs = 8, .block_size = 4, .n_blocks = 14,
                             .max_model_len = 32, .overlap = overlap};
        llm_engine *s = make(&o);
        for (int i = 0; i < NREQ; i++) {
            int p[12];
            prompt(p, 5 + i % 4, 20 + i);
            memset(&c[overlap][i], 0, sizeof c[overlap][i]);
            submit(s, p, 5 + i % 4, 1, OUT, 0.0f, 1, &c[overlap][i]);
        }
        int planned_ahead = 0;
        while (llm_engine_has_work(s)) {
            llm_step_info info;
            ck_assert(llm_engine_step(s, &info) >= 0);
            if (planned_ahead) {
                ahead_steps++;
                ck_assert_msg(info.n_preempted == 0, "step %ld ran a plan made ahead that "
                              "preempted %d requests", info.step, info.n_preempted);
            }
            preempted += info.n_preempted;
            llm_step_stats st;
            llm_engine_last_stats(s, &st);
            planned_ahead = st.step == info.step && st.overlapped;
        }
        clean_end(s);
    }
    printf("overlap on a pool of 14 blocks: %ld steps ran a plan made ahead, %ld preemptions "
           "in all\n", ahead_steps, preempted);
    ck_assert_int_gt(ahead_steps, 0);
    ck_assert_int_gt(preempted, 0);
    for (int i = 0; i < NREQ; i++) {
        ck_assert_int_eq(c[1][i].finals[0], 1);
        ck_assert_int_eq(c[1][i].n[0], c[0][i].n[0]);
        ck_assert_msg(!memcmp(c[1][i].tok[0], c[0][i].tok[0], sizeof(int) * (size_t)OUT),
                      "request %d: other tokens with overlap", i);
    }
    unload();
}
END_TEST

/* ---- the sampler: ties and the nucleus's edge ---- */

/* Equal probabilities are ordered by id, the lower first, so top-k over four equal logits
 * keeps ids 0 and 1, never 2 or 3. The nucleus is the shortest head whose share reaches
 * top_p: with two tokens of exactly 1/2 each, top_p 0.5 is reached by the first alone (the
 * second is never drawn); top_p 0.75 needs both (each drawn about half the time). */
START_TEST(sampler_ties_and_nucleus_edge)
{
    enum { V = 8, N = 400 };
    float four[V], two[V];
    for (int i = 0; i < V; i++) {
        four[i] = i < 4 ? 1.0f : -1e30f;
        two[i] = i < 2 ? 0.0f : -1e30f;
    }
    llm_sampler k2, p50, p75;
    ck_assert(llm_sampler_init(&k2, V, 1.0f, 2, 1.0f, 11) == 0);
    ck_assert(llm_sampler_init(&p50, V, 1.0f, 0, 0.5f, 12) == 0);
    ck_assert(llm_sampler_init(&p75, V, 1.0f, 0, 0.75f, 13) == 0);
    int cnt_k2[V] = {0}, cnt_p50[V] = {0}, cnt_p75[V] = {0};
    for (int i = 0; i < N; i++) {
        int a = llm_sample(&k2, four), b = llm_sample(&p50, two), c = llm_sample(&p75, two);
        ck_assert(a >= 0 && a < V && b >= 0 && b < V && c >= 0 && c < V);
        cnt_k2[a]++, cnt_p50[b]++, cnt_p75[c]++;
    }
    printf("sampler: top-k 2 of four equal logits drew ids 0..3 %d %d %d %d; top-p 0.5 of two "
           "halves %d %d, top-p 0.75 %d %d\n", cnt_k2[0], cnt_k2[1], cnt_k2[2], cnt_k2[3],
           cnt_p50[0], cnt_p50[1], cnt_p75[0], cnt_p75[1]);
    ck_assert_msg(cnt_k2[0] + cnt_k2[1] == N, "top-k 2 over a tie kept higher ids");
    ck_assert_msg(cnt_p50[0] == N, "top-p 0.5 over two halves drew the second %d times",
                  cnt_p50[1]);
    /* both, each in [150, 250] of 400: about 5 standard deviations either side of 200 */
    ck_assert(cnt_p75[0] + cnt_p75[1] == N && cnt_p75[0] >= 150 && cnt_p75[0] <= 250);
    llm_sampler_fini(&k2);
    llm_sampler_fini(&p50);
    llm_sampler_fini(&p75);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("engine_promises");
    TCase *tc = tcase_create("engine");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, generated_blocks_are_found_again);
    tcase_add_test(tc, n_samples_admitted_with_their_copies);
    tcase_add_test(tc, json_closes_within_the_context);
    tcase_add_test(tc, histogram_bound_is_its_bucket);
    tcase_add_test(tc, overlap_never_preempts_ahead);
    tcase_add_test(tc, sampler_ties_and_nucleus_edge);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
