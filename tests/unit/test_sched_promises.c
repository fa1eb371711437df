/* test_sched_promises.c - promises of the scheduler, the stop strings and speculative
 * decoding that other tests let slip, on the shipped model: an admission weighs the cached
 * blocks it takes out of the pool (no admission is undone for want of them); a preemption
 * takes the newest running request, and a step that preempted admits nobody; a prompt with
 * exactly one token left is still a prefill; TPOT is (finish - first) / (n_out - 1), exactly,
 * on a step clock; a stop string that ends on a token's first byte stops; the last
 * speculative round drafts at most left - 1 tokens. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

static int submit(llm_engine *s, const int *p, int n, int max, llm_engine_fn fn, void *u)
{
    char err[256];
    llm_request r = {.prompt = p, .n_prompt = n, .max_tokens = max, .ignore_eos = 1,
                     .on_event = fn, .u = u};
    int id = llm_engine_submit(s, &r, err, sizeof err);
    ck_assert_msg(id >= 0, "%s", err);
    return id;
}

static void prompt(int *p, int n, int salt)
{
    for (int i = 0; i < n; i++)
        p[i] = 3 + (i * 13 + salt * 31) % 250;
}

/* ---- admission and the cached blocks it takes from the pool ---- */
static int g_yes, g_asked;

static int counting_admit(const llm_admit_query *q, void *u)
{
    int n = llm_admit_continuous(q, u);
    g_yes += n > 0;
    g_asked++;
    return n;
}

/* A's 33-token prompt leaves 4 full blocks cached in a pool of 10; B takes the 6 others;
 * C (A's prompt again) hits the 4 cached blocks but needs a 5th: 5 blocks from a pool of 4.
 * The rule must see that (its 4 hits come out of the pool too) and say no until B is done:
 * every yes it says is an admission, none is taken back. */
START_TEST(admission_counts_cached_blocks_taken)
{
    load();
    llm_engine_opts o = {.max_num_seqs = 2, .block_size = 8, .n_blocks = 10,
                        .max_model_len = 48, .admit = counting_admit};
    llm_engine *s = make(&o);
    int a[33], b[46];
    prompt(a, 33, 1);
    prompt(b, 46, 2);
    submit(s, a, 33, 1, NULL, NULL);
    while (llm_engine_has_work(s))
        ck_assert(llm_engine_step(s, NULL) >= 0);
    ck_assert_int_eq(llm_paged_match(llm_engine_kv(s), a, 33, NULL), 32);
    g_yes = 0;
    submit(s, b, 46, 2, NULL, NULL);
    submit(s, a, 33, 2, NULL, NULL);
    int admitted = 0;
    llm_step_info info;
    while (llm_engine_has_work(s)) {
        ck_assert(llm_engine_step(s, &info) >= 0);
        admitted += info.n_admitted;
    }
    ck_assert_int_eq(admitted, 2);
    ck_assert_msg(g_yes == admitted, "the rule said yes %d times for %d admissions: %d were "
                  "undone", g_yes, admitted, g_yes - admitted);
    llm_engine_free(s);
    unload();
}
END_TEST

/* ---- preemption: the newest goes, and nobody is admitted in that step ---- */
START_TEST(preemption_takes_the_newest_and_admits_nobody)
{
    load();
    /* 4 requests of 8 + 40 tokens (6 blocks of 8 each at the end) on 3 seats and 12 blocks:
     * the running ones outgrow the pool */
    llm_engine_opts o = {.max_num_seqs = 3, .block_size = 8, .n_blocks = 12,
                        .max_model_len = 48, .admit = counting_admit};
    llm_engine *s = make(&o);
    int p[4][8];
    for (int i = 0; i < 4; i++) {
        prompt(p[i], 8, 10 + i);
        submit(s, p[i], 8, 40, NULL, NULL);
    }
    int order[16], n_order = 0, preemptions = 0;  /* running, oldest admission first */
    llm_step_info info;
    while (llm_engine_has_work(s)) {
        int asked = g_asked;
        ck_assert(llm_engine_step(s, &info) >= 0);
        /* a step that preempted does not even ask: the pool is short, an admission would
         * only preempt again */
        ck_assert_msg(!info.n_preempted || g_asked == asked, "step %ld preempted and asked the "
                      "admission rule %d times", info.step, g_asked - asked);
        for (int k = 0; k < info.n_preempted; k++) {
            ck_assert_msg(n_order > 0 && info.preempted[k] == order[n_order - 1],
                          "step %ld preempted request %d; the newest running was %d", info.step,
                          info.preempted[k], n_order ? order[n_order - 1] : -1);
            n_order--;
            preemptions++;
        }
        if (info.n_preempted)
            ck_assert_msg(info.n_admitted == 0, "step %ld preempted and admitted %d",
                          info.step, info.n_admitted);
        /* the admitted ones are the step's last items, in admission order */
        for (int i = info.n_items - info.n_admitted; i < info.n_items; i++)
            order[n_order++] = info.items[i].id;
        for (int k = 0; k < info.n_finished; k++)
            for (int i = 0; i < n_order; i++)
                if (order[i] == info.finished[k]) {
                    memmove(order + i, order + i + 1, (size_t)(n_order - i - 1) * sizeof(int));
                    n_order--;
                    break;
                }
    }
    ck_assert_int_gt(preemptions, 0);
    llm_engine_free(s);
    unload();
}
END_TEST

/* ---- a prompt with one token left is a prefill ---- */
START_TEST(last_prompt_token_is_a_prefill)
{
    load();
    llm_engine_opts o = {.max_num_seqs = 1, .max_num_batched_tokens = 16};
    llm_engine *s = make(&o);
    int p[17];
    prompt(p, 17, 3);
    submit(s, p, 17, 3, NULL, NULL);
    llm_step_info info;
    ck_assert(llm_engine_step(s, &info) >= 0);
    ck_assert_int_eq(info.prefill_rows, 16);
    ck_assert(llm_engine_step(s, &info) >= 0);
    ck_assert_msg(info.prefill_rows == 1 && info.decode_rows == 0 && info.n_items == 1 &&
                  info.items[0].prefill == 1, "the 17th prompt token: %d prefill rows, %d decode "
                  "rows", info.prefill_rows, info.decode_rows);
    while (llm_engine_has_work(s))
        ck_assert(llm_engine_step(s, &info) >= 0);
    llm_engine_free(s);
    unload();
}
END_TEST

/* ---- TPOT on a clock that counts steps ---- */
static double g_now;
static double step_clock(void *u)
{
    (void)u;
    return g_now;
}

static llm_req_stats g_st;
static void keep_stats(void *u, const llm_engine_event *ev)
{
    (void)u;
    if (ev->finish != LLM_FINISH_NONE)
        g_st = *ev->st;
}

START_TEST(tpot_on_the_step_clock)
{
    load();
    llm_engine_opts o = {.max_num_seqs = 1, .clock = step_clock};
    llm_engine *s = make(&o);
    int p[6];
    prompt(p, 6, 4);
    g_now = 0;
    submit(s, p, 6, 10, keep_stats, NULL);
    while (llm_engine_has_work(s)) {
        g_now += 1;               /* the clock moves one unit a step */
        ck_assert(llm_engine_step(s, NULL) >= 0);
    }
    /* the first token in step 1, one more each step: the tenth in step 10 */
    ck_assert_int_eq(g_st.n_out, 10);
    ck_assert_double_eq(g_st.t_first, 1.0);
    ck_assert_double_eq(g_st.t_finish, 10.0);
    ck_assert_double_eq(g_st.tpot, 1.0);          /* (10 - 1) / (10 - 1) */
    ck_assert_double_eq(g_st.ttft, 1.0);
    llm_engine_free(s);
    unload();
}
END_TEST

/* ---- a stop string that ends on the first byte of the token that completes it ---- */
START_TEST(stop_string_ending_on_a_first_byte)
{
    load();
    /* a token of several bytes, and a byte token: text "xxxxq", then the long token */
    int tok = -1, n = 0, q[8], nq;
    const char *b = NULL;
    for (int id = 259; id < g_t.vocab_size && tok < 0; id++) {
        b = llm_bpe_token_bytes(&g_t, 'q', id, &n);
        if (b && n >= 3 && b[0] != ' ' && b[0] != 'q')
            tok = id;
    }
    ck_assert(tok >= 0);
    char stop[3] = {'q', b[0], 0};
    nq = (int)llm_bpe_encode_prompt(&g_t, "xxxxq", 5, 0, q);     /* more text than the stop */
    ck_assert_int_gt(nq, 0);
    int pr[1] = {1};
    const char *stops[1] = {stop};
    char err[256];
    llm_request r = {.prompt = pr, .n_prompt = 1, .max_tokens = 20, .stop = stops,
                     .n_stop = 1, .ignore_eos = 1};
    llm_seq *s = llm_seq_create(0, 0, &r, &g_c, g_c.seq_len, &g_t, err, sizeof err);
    ck_assert_msg(s, "%s", err);
    for (int i = 0; i < nq; i++)
        ck_assert_int_eq(llm_seq_append(s, q[i], &g_t, g_c.seq_len), LLM_FINISH_NONE);
    ck_assert_msg(llm_seq_append(s, tok, &g_t, g_c.seq_len) == LLM_FINISH_STOP, "stop '%s' "
                  "ending on the first byte of token %d ('%.*s') was not seen", stop, tok, n, b);
    const char *text;
    int len = llm_seq_take_text(s, 1, &text);
    ck_assert_msg(len >= 0 && !memmem(text, (size_t)len, stop, 2), "the text keeps the stop "
                  "string: '%.*s'", len, text);
    llm_seq_free(s);
    unload();
}
END_TEST

/* ---- speculative: the last round drafts one less than the tokens left ---- */
static long g_n_out;
static void count_tokens(void *u, const llm_engine_event *ev)
{
    (void)u;
    g_n_out += ev->token >= 0;
}

START_TEST(last_round_drafts_left_minus_one)
{
    load();
    /* the draft is the target itself, greedy: every draft is kept, a round commits k + 1.
     * 12 tokens with k = 4: the prefill draws the first (11 left), rounds of 4 and 4 drafts
     * commit 5 each (1 left), and the last token is drawn with 1 - 1 = 0 drafts: 8 drafted,
     * not 12 (a last round of 4 drafts would compute 3 the request never gets) */
    llm_engine_opts o = {.max_num_seqs = 1, .spec_k = 4, .draft_c = &g_c, .draft_w = &g_w};
    llm_engine *s = make(&o);
    int p[5];
    prompt(p, 5, 5);
    g_n_out = 0;
    submit(s, p, 5, 12, count_tokens, NULL);
    while (llm_engine_has_work(s))
        ck_assert(llm_engine_step(s, NULL) >= 0);
    llm_spec_stats st;
    llm_engine_spec_stats(s, &st);
    ck_assert_int_eq(g_n_out, 12);
    ck_assert_int_eq(st.accepted, st.drafted);
    ck_assert_int_eq(st.rounds, 2);
    ck_assert_msg(st.drafted == 8, "drafted %ld, expected 4 + 4", st.drafted);
    llm_engine_free(s);
    unload();
}
END_TEST

int main(void)
{
    Suite *s = suite_create("sched_promises");
    TCase *tc = tcase_create("engine");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, admission_counts_cached_blocks_taken);
    tcase_add_test(tc, preemption_takes_the_newest_and_admits_nobody);
    tcase_add_test(tc, last_prompt_token_is_a_prefill);
    tcase_add_test(tc, tpot_on_the_step_clock);
    tcase_add_test(tc, stop_string_ending_on_a_first_byte);
    tcase_add_test(tc, last_round_drafts_left_minus_one);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
