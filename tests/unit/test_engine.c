/* test_engine.c - the generation engine (core/llm/engine.c, sched.c, runner.c, seq.c) on the
 * shipped model, on the batch-invariant GEMM (NN_GEMM_INVARIANT): a request's tokens are the
 * same alone and inside a busy batch with chunked prefill (greedy and seeded sampling);
 * preempted requests resume with unchanged output; finish reasons (EOS, max_tokens, the
 * context, stop strings with held-back text); cancel frees blocks at once, also from a
 * callback; bad requests are refused; submissions from other threads; static against
 * continuous admission; the metrics' accounting; the memory events, replayed, rebuild the
 * cache's state; n samples of one prompt (prefilled once, forked blocks, copy on write,
 * seats, cancel); the text handed out is valid UTF-8. All of it twice: the plain engine, then
 * the overlap scheduler. */
#include <check.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "../../core/llm/engine.h"
#include "../../core/nn/nn.h"

#define MODEL "assets/models/model.bin"
#define TOKENIZER "assets/models/tokenizer.bin"
#define MAXREQ 64
#define MAXOUT 130

static llm_config g_c;
static llm_weights g_w;
static llm_tokenizer g_t;
static int g_overlap;         /* the "overlap" case: every engine with the overlap scheduler */

static void overlap_on(void)
{
    g_overlap = 1;
}

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

/* What the callbacks saw, per request id. */
typedef struct seen {
    int tok[MAXREQ][MAXOUT];
    int n[MAXREQ];
    int finals[MAXREQ], after_final[MAXREQ];
    llm_finish why[MAXREQ];
    llm_req_stats st[MAXREQ];
    char text[MAXREQ][1024];
    size_t text_len[MAXREQ];
    int cancel_at[MAXREQ];    /* cancel itself after this many tokens (0: never) */
    llm_engine *s;
} seen;

static void on_event(void *u, const llm_engine_event *ev)
{
    seen *w = u;
    int id = ev->id;
    if (w->finals[id])
        w->after_final[id]++;
    if (ev->token >= 0 && w->n[id] < MAXOUT)
        w->tok[id][w->n[id]++] = ev->token;
    if (ev->text_len > 0 && w->text_len[id] + (size_t)ev->text_len < sizeof w->text[id]) {
        memcpy(w->text[id] + w->text_len[id], ev->text, (size_t)ev->text_len);
        w->text_len[id] += (size_t)ev->text_len;
    }
    if (ev->finish != LLM_FINISH_NONE) {
        w->finals[id]++;
        w->why[id] = ev->finish;
        w->st[id] = *ev->st;
    } else if (w->cancel_at[id] && w->n[id] == w->cancel_at[id]) {
        ck_assert_int_eq(llm_engine_cancel(w->s, id), 0);
    }
}

static int prompt_of(const char *text, int *ids)
{
    return (int)llm_bpe_encode_prompt(&g_t, text, strlen(text), 1, ids);
}

static llm_engine *make(const llm_engine_opts *o)
{
    char err[256];
    llm_engine_opts oo = *o;
    oo.overlap = g_overlap;
    llm_engine *s = llm_engine_create(&g_c, &g_w, &oo, err, sizeof err);
    ck_assert_msg(s != NULL, "%s", err);
    return s;
}

static int submit(llm_engine *s, seen *w, const int *p, int n, int max, float temp,
                  uint64_t seed)
{
    char err[256];
    llm_request r = {.prompt = p, .n_prompt = n, .max_tokens = max, .temperature = temp,
                     .top_p = 0.95f, .seed = seed, .ignore_eos = 1, .on_event = on_event,
                     .u = w};
    int id = llm_engine_submit(s, &r, err, sizeof err);
    ck_assert_msg(id >= 0, "%s", err);
    return id;
}

static void finish_clean(llm_engine *s)
{
    char err[256];
    llm_engine_metrics m;
    llm_engine_metrics_get(s, &m);
    ck_assert_int_eq(m.kv_used, 0);
    ck_assert_int_eq(m.running + m.waiting, 0);
    ck_assert_msg(llm_paged_check(llm_engine_kv(s), err, sizeof err) == 0, "%s", err);
    llm_engine_free(s);
}

static const char *const texts[] = {
    "Once upon a time, there was a little dog named",
    "{\"name\": \"Tom\", \"age\":",
    "12 + 7 = 19\n30 - 4 =",
    "The sun was hot. Lily went to the park with her",
    "One day, a big bird saw a red ball in the garden. The bird wanted to",
    "Sam said, \"Let us go",
    "{\"city\": \"Paris\",",
    "It was a cold day.",
};
#define NTEXT 8

/* ---- a request's output does not depend on its batch ---- */

static void alone_vs_busy(float temp)
{
    int x[160], nx = prompt_of("Once upon a time, there was a girl named Lily. She loved to "
                               "play with her red ball in the garden every day.", x);
    static seen a, b;
    memset(&a, 0, sizeof a);
    memset(&b, 0, sizeof b);
    llm_engine_opts o = {0};
    llm_engine *s = make(&o);
    submit(s, &a, x, nx, 40, temp, 7);
    llm_engine_run(s);
    finish_clean(s);
    ck_assert_int_eq(a.n[0], 40);

    /* busy: a token budget of 16 (chunked prefill), six others before it, two after */
    llm_engine_opts ob = {.max_num_seqs = 8, .max_num_batched_tokens = 16};
    s = make(&ob);
    int ids[NTEXT][64], n[NTEXT];
    for (int i = 0; i < 6; i++) {
        n[i] = prompt_of(texts[i], ids[i]);
        submit(s, &b, ids[i], n[i], 10 + 7 * i, 0.9f, 100 + (uint64_t)i);
    }
    llm_engine_step(s, NULL);
    llm_engine_step(s, NULL);
    int xid = submit(s, &b, x, nx, 40, temp, 7);
    llm_engine_step(s, NULL);
    for (int i = 6; i < NTEXT; i++) {
        n[i] = prompt_of(texts[i], ids[i]);
        submit(s, &b, ids[i], n[i], 30, 0.0f, 1);
    }
    llm_engine_run(s);
    finish_clean(s);
    ck_assert_int_eq(b.n[xid], 40);
    ck_assert_msg(!memcmp(a.tok[0], b.tok[xid], 40 * sizeof(int)),
                  "temperature %g: alone and in a busy batch differ", (double)temp);
    for (int i = 0; i <= NTEXT; i++)
        ck_assert_int_eq(b.finals[i], 1);
}

START_TEST(output_independent_of_batch)
{
    load();
    alone_vs_busy(0.0f);
    alone_vs_busy(0.8f);
    /* and the seed matters at T > 0 (else the test above proves little) */
    int x[64], nx = prompt_of("Once upon a time", x);
    static seen a;
    memset(&a, 0, sizeof a);
    llm_engine_opts o = {0};
    llm_engine *s = make(&o);
    submit(s, &a, x, nx, 30, 1.0f, 1);
    submit(s, &a, x, nx, 30, 1.0f, 2);
    submit(s, &a, x, nx, 30, 1.0f, 1);
    llm_engine_run(s);
    finish_clean(s);
    ck_assert(memcmp(a.tok[0], a.tok[1], 30 * sizeof(int)) != 0);
    ck_assert(memcmp(a.tok[0], a.tok[2], 30 * sizeof(int)) == 0);
    unload();
}
END_TEST

/* ---- preemption by recompute ---- */

static void preempt_case(int no_prefix)
{
    static seen alone, tiny;
    memset(&alone, 0, sizeof alone);
    memset(&tiny, 0, sizeof tiny);
    int ids[4][64], n[4];
    for (int i = 0; i < 4; i++)
        n[i] = prompt_of(texts[i], ids[i]);
    for (int i = 0; i < 4; i++) {
        static seen one;
        memset(&one, 0, sizeof one);
        llm_engine_opts o = {.no_prefix_cache = no_prefix};
        llm_engine *s = make(&o);
        ck_assert_int_eq(submit(s, &one, ids[i], n[i], 60, 0.7f, 40 + (uint64_t)i), 0);
        llm_engine_run(s);
        finish_clean(s);
        memcpy(alone.tok[i], one.tok[0], sizeof one.tok[0]);
        alone.n[i] = one.n[0];
    }
    /* 8 blocks of 16 = one full context; four requests of ~75 tokens each need 20 */
    llm_engine_opts o = {.max_num_seqs = 4, .n_blocks = 8, .no_prefix_cache = no_prefix};
    llm_engine *s = make(&o);
    for (int i = 0; i < 4; i++)
        submit(s, &tiny, ids[i], n[i], 60, 0.7f, 40 + (uint64_t)i);
    llm_engine_run(s);
    llm_engine_metrics m;
    llm_engine_metrics_get(s, &m);
    finish_clean(s);
    int preempted = 0;
    for (int i = 0; i < 4; i++) {
        preempted += tiny.st[i].preemptions;
        ck_assert_int_eq(tiny.finals[i], 1);
        ck_assert_int_eq(tiny.n[i], 60);
        ck_assert_msg(!memcmp(tiny.tok[i], alone.tok[i], 60 * sizeof(int)),
                      "request %d (preempted %d times) changed its output", i,
                      tiny.st[i].preemptions);
    }
    printf("  tiny pool%s: %ld preemptions, outputs unchanged; %ld prefill rows for %ld "
           "prompt tokens\n", no_prefix ? " (no prefix cache)" : "", m.preemptions,
           m.prefill_tokens, m.prompt_tokens);
    ck_assert_int_gt(m.preemptions, 0);
    ck_assert_int_eq(preempted, m.preemptions);
    /* recompute costs rows: more prefill rows than prompt tokens without the cache */
    if (no_prefix)
        ck_assert_int_gt(m.prefill_tokens, m.prompt_tokens);
}

START_TEST(preemption_keeps_outputs)
{
    load();
    preempt_case(0);
    preempt_case(1);
    unload();
}
END_TEST

/* ---- how requests end ---- */

START_TEST(finish_reasons_and_stop_strings)
{
    load();
    char err[256];
    static seen w;
    memset(&w, 0, sizeof w);
    llm_engine_opts o = {.tok = &g_t};
    llm_engine *s = make(&o);
    w.s = s;
    int p[200], np = prompt_of(texts[0], p);
    /* 0: max_tokens */
    submit(s, &w, p, np, 25, 0.0f, 1);
    /* 1: the context: 120 prompt tokens leave room for 9 (the last is never fed back) */
    int longp[128];
    for (int i = 0; i < 120; i++)
        longp[i] = p[i % np];
    submit(s, &w, longp, 120, 100, 0.0f, 1);
    /* 2: EOS, from a sums document the model finishes */
    int sp[200];
    int nsp = prompt_of("3 + 4 = 7\n10 - 2 = 8", sp);
    llm_request r = {.prompt = sp, .n_prompt = nsp, .max_tokens = 120, .on_event = on_event,
                     .u = &w};
    ck_assert_int_eq(llm_engine_submit(s, &r, err, sizeof err), 2);
    llm_engine_run(s);
    ck_assert_int_eq(w.why[0], LLM_FINISH_LENGTH);
    ck_assert_int_eq(w.n[0], 25);
    ck_assert_int_eq(w.why[1], LLM_FINISH_LENGTH);
    ck_assert_int_eq(w.n[1], 128 + 1 - 120);
    ck_assert_int_eq(w.why[2], LLM_FINISH_STOP);
    ck_assert_msg(w.tok[2][w.n[2] - 1] == LLM_TOK_EOS || w.tok[2][w.n[2] - 1] == LLM_TOK_BOS,
                  "ended by stop but the last token is %d", w.tok[2][w.n[2] - 1]);
    /* the text streamed is the tokens' text */
    char want[1024];
    size_t k = 0;
    for (int i = 0; i < w.n[0]; i++) {
        int len;
        const char *b = llm_bpe_token_bytes(&g_t, i ? w.tok[0][i - 1] : p[np - 1], w.tok[0][i],
                                            &len);
        memcpy(want + k, b, (size_t)len);
        k += (size_t)len;
    }
    ck_assert_uint_eq(w.text_len[0], k);
    ck_assert(!memcmp(w.text[0], want, k));

    /* 3: a stop string taken from the middle of that text: the output ends before it, and
     * no streamed piece ever showed any of it */
    char stop[8];
    size_t at = k / 2;
    memcpy(stop, want + at, 5);
    stop[5] = 0;
    const char *first = strstr(want, stop);
    const char *stops[2] = {"#never#", stop};
    llm_request r3 = {.prompt = p, .n_prompt = np, .max_tokens = 25, .stop = stops,
                      .n_stop = 2, .on_event = on_event, .u = &w, .ignore_eos = 1};
    ck_assert_int_eq(llm_engine_submit(s, &r3, err, sizeof err), 3);
    llm_engine_run(s);
    ck_assert_int_eq(w.why[3], LLM_FINISH_STOP);
    ck_assert_uint_eq(w.text_len[3], (size_t)(first - want));
    ck_assert(!memcmp(w.text[3], want, w.text_len[3]));
    ck_assert_int_lt(w.n[3], 25);
    printf("  stop string \"%s\": %zu bytes out of %zu, %d tokens\n", stop, w.text_len[3], k,
           w.n[3]);
    for (int i = 0; i < 4; i++) {
        ck_assert_int_eq(w.finals[i], 1);
        ck_assert_int_eq(w.after_final[i], 0);
    }
    finish_clean(s);
    unload();
}
END_TEST

/* ---- cancel ---- */

START_TEST(cancel_frees_blocks)
{
    load();
    static seen w;
    memset(&w, 0, sizeof w);
    llm_engine_opts o = {.max_num_seqs = 2};
    llm_engine *s = make(&o);
    w.s = s;
    int p[64], np = prompt_of(texts[3], p);
    submit(s, &w, p, np, 50, 0.0f, 1);       /* 0: cancelled while running */
    submit(s, &w, p, np, 50, 0.0f, 1);       /* 1: cancels itself from its callback */
    submit(s, &w, p, np, 50, 0.0f, 1);       /* 2: cancelled while waiting */
    submit(s, &w, p, np, 8, 0.0f, 1);        /* 3: runs to the end */
    w.cancel_at[1] = 6;
    for (int i = 0; i < 4; i++)
        llm_engine_step(s, NULL);
    llm_engine_metrics m0, m1;
    llm_engine_metrics_get(s, &m0);
    ck_assert_int_eq(m0.running, 2);
    ck_assert_int_eq(llm_engine_cancel(s, 0), 0);
    ck_assert_int_eq(llm_engine_cancel(s, 2), 0);
    ck_assert_int_eq(llm_engine_cancel(s, 99), -1);
    llm_step_info info;
    llm_engine_step(s, &info);
    /* both finished at the start of that step: request 0's blocks are back already */
    ck_assert_int_eq(w.why[0], LLM_FINISH_CANCEL);
    ck_assert_int_eq(w.why[2], LLM_FINISH_CANCEL);
    ck_assert_int_eq(w.n[2], 0);
    ck_assert_int_ge(info.n_finished, 2);
    llm_engine_metrics_get(s, &m1);
    ck_assert_int_eq(m1.cancelled, 2 + (w.finals[1] ? 1 : 0));
    llm_engine_run(s);
    ck_assert_int_eq(w.why[1], LLM_FINISH_CANCEL);
    ck_assert_int_eq(w.n[1], 6);
    ck_assert_int_eq(w.why[3], LLM_FINISH_LENGTH);
    for (int i = 0; i < 4; i++) {
        ck_assert_int_eq(w.finals[i], 1);
        ck_assert_int_eq(w.after_final[i], 0);
    }
    /* cancelling a finished request changes nothing */
    ck_assert_int_eq(llm_engine_cancel(s, 3), 0);
    llm_engine_run(s);
    ck_assert_int_eq(w.finals[3], 1);
    finish_clean(s);
    /* freeing the engine ends what is left, with one final event each */
    memset(&w, 0, sizeof w);
    s = make(&o);
    submit(s, &w, p, np, 50, 0.0f, 1);
    submit(s, &w, p, np, 50, 0.0f, 1);
    submit(s, &w, p, np, 50, 0.0f, 1);
    llm_engine_step(s, NULL);
    llm_engine_free(s);
    for (int i = 0; i < 3; i++) {
        ck_assert_int_eq(w.finals[i], 1);
        ck_assert_int_eq(w.why[i], LLM_FINISH_CANCEL);
    }
    unload();
}
END_TEST

/* ---- bad requests ---- */

START_TEST(bad_requests_refused)
{
    load();
    char err[256];
    llm_engine_opts o = {0};
    llm_engine *s = make(&o);
    int p[200] = {1, 5, 6};
    const char *stop[1] = {"x"};
    llm_request good = {.prompt = p, .n_prompt = 3, .max_tokens = 4};
    llm_request bad[8];
    for (int i = 0; i < 8; i++)
        bad[i] = good;
    bad[0].n_prompt = 0;
    bad[1].n_prompt = g_c.seq_len + 1;
    bad[2].max_tokens = 0;
    bad[3].temperature = -1.0f;
    bad[4].top_p = 1.5f;
    bad[5].stop = stop, bad[5].n_stop = 1;          /* no tokenizer in this engine */
    bad[6].prompt = NULL;
    int q[3] = {1, 5, 512};
    bad[7].prompt = q;
    for (int i = 0; i < 8; i++) {
        err[0] = 0;
        ck_assert_int_eq(llm_engine_submit(s, &bad[i], err, sizeof err), -1);
        ck_assert_msg(err[0] != 0, "case %d: no message", i);
    }
    ck_assert_int_eq(llm_engine_has_work(s), 0);
    ck_assert_int_eq(llm_engine_submit(s, &good, err, sizeof err), 0);
    ck_assert_int_eq(llm_engine_has_work(s), 1);
    ck_assert_int_gt(llm_engine_run(s), 0);
    llm_engine_free(s);
    /* bad options */
    llm_engine_opts bo = {.max_num_seqs = 8, .max_num_batched_tokens = 4};
    ck_assert(llm_engine_create(&g_c, &g_w, &bo, err, sizeof err) == NULL);
    llm_engine_opts bo2 = {.n_blocks = 3};
    ck_assert(llm_engine_create(&g_c, &g_w, &bo2, err, sizeof err) == NULL);
    unload();
}
END_TEST

/* ---- other threads submit while one steps ---- */

typedef struct sub_arg {
    llm_engine *s;
    seen *w;
    int base;
} sub_arg;

static void *submitter(void *u)
{
    sub_arg *a = u;
    int p[64], np = prompt_of(texts[a->base % NTEXT], p);
    for (int i = 0; i < 8; i++) {
        char err[256];
        llm_request r = {.prompt = p, .n_prompt = np, .max_tokens = 5 + i, .on_event = on_event,
                         .u = a->w, .ignore_eos = 1};
        if (llm_engine_submit(a->s, &r, err, sizeof err) < 0)
            return (void *)1;
        usleep(2000);
    }
    return NULL;
}

START_TEST(submit_from_threads)
{
    load();
    static seen w;
    memset(&w, 0, sizeof w);
    llm_engine_opts o = {.max_num_seqs = 4};
    llm_engine *s = make(&o);
    sub_arg a[2] = {{s, &w, 0}, {s, &w, 1}};
    pthread_t th[2];
    for (int i = 0; i < 2; i++)
        pthread_create(&th[i], NULL, submitter, &a[i]);
    /* the driver: step while there is work, wait when there is none, until 16 finished */
    llm_engine_metrics m;
    int rounds = 0;
    do {
        if (!llm_engine_wait(s, 0.05))
            rounds++;
        llm_engine_step(s, NULL);
        llm_engine_metrics_get(s, &m);
    } while (m.finished < 16 && rounds < 400);
    for (int i = 0; i < 2; i++) {
        void *rv;
        pthread_join(th[i], &rv);
        ck_assert(rv == NULL);
    }
    ck_assert_msg(m.finished == 16, "waited 400 idle rounds of 50 ms for 16 requests, %ld "
                  "finished", m.finished);
    long out = 0;
    for (int i = 0; i < 16; i++) {
        ck_assert_int_eq(w.finals[i], 1);
        out += w.n[i];
    }
    ck_assert_int_eq(out, 2 * (5 + 6 + 7 + 8 + 9 + 10 + 11 + 12));
    ck_assert_int_eq(m.generated_tokens, out);
    finish_clean(s);
    unload();
}
END_TEST

/* ---- chunked prefill mixes with decodes; static batching waits for the batch ---- */

static double g_steps;
static double step_clock(void *u)
{
    (void)u;
    return g_steps;
}

/* Eight requests, one arriving every other step; times counted in steps. */
static void arrivals(llm_admit_fn admit, seen *w, double *ttft_max, long *steps)
{
    llm_engine_opts o = {.max_num_seqs = 8, .max_num_batched_tokens = 24, .admit = admit,
                        .clock = step_clock};
    llm_engine *s = make(&o);
    int p[NTEXT][64], n[NTEXT];
    for (int i = 0; i < NTEXT; i++)
        n[i] = prompt_of(texts[i], p[i]);
    g_steps = 0;
    int next = 0;
    llm_step_info info;
    *ttft_max = 0;
    while (next < NTEXT || llm_engine_has_work(s)) {
        if (next < NTEXT && (long)g_steps >= 2 * next) {
            submit(s, w, p[next], n[next], 6 + 5 * next, 0.0f, 1);
            next++;
        }
        llm_engine_step(s, &info);
        int dec = 0, pre = 0;
        for (int i = 0; i < info.n_items; i++) {
            dec += !info.items[i].prefill;
            pre += info.items[i].prefill;
        }
        ck_assert_int_le(info.rows, 24);
        if (admit == llm_admit_static && info.n_admitted > 0)
            ck_assert_msg(dec == 0 || info.n_admitted == info.n_items,
                          "static batching admitted while a batch was decoding");
        g_steps += 1;
    }
    for (int i = 0; i < NTEXT; i++)
        if (w->st[i].ttft > *ttft_max)
            *ttft_max = w->st[i].ttft;
    *steps = (long)g_steps;
    finish_clean(s);
}

START_TEST(continuous_against_static)
{
    load();
    static seen wc, ws;
    memset(&wc, 0, sizeof wc);
    memset(&ws, 0, sizeof ws);
    double tc, ts;
    long sc, ss;
    arrivals(llm_admit_continuous, &wc, &tc, &sc);
    arrivals(llm_admit_static, &ws, &ts, &ss);
    printf("  worst TTFT in steps: continuous %.0f, static %.0f; steps in all: %ld and %ld\n",
           tc, ts, sc, ss);
    ck_assert(tc < ts);
    for (int i = 0; i < NTEXT; i++) {
        ck_assert_int_eq(wc.n[i], 6 + 5 * i);
        ck_assert(!memcmp(wc.tok[i], ws.tok[i], (size_t)wc.n[i] * sizeof(int)));
    }
    /* chunked prefill: a 60-token prompt under a budget of 8 is computed in chunks while a
     * running request keeps decoding in the same steps */
    static seen w;
    memset(&w, 0, sizeof w);
    llm_engine_opts o = {.max_num_seqs = 4, .max_num_batched_tokens = 8};
    llm_engine *s = make(&o);
    int a[64], na = prompt_of("Tom", a), b[128];
    for (int i = 0; i < 60; i++)
        b[i] = 3 + i % 90;
    submit(s, &w, a, na, 30, 0.0f, 1);
    llm_engine_step(s, NULL);
    submit(s, &w, b, 60, 5, 0.0f, 1);
    llm_step_info info;
    int mixed = 0, chunks = 0;
    while (llm_engine_step(s, &info) > 0) {
        int dec = 0, pre = 0;
        for (int i = 0; i < info.n_items; i++) {
            if (info.items[i].id == 1 && info.items[i].prefill)
                chunks++;
            dec += !info.items[i].prefill;
            pre += info.items[i].prefill;
        }
        mixed += dec && pre;
        ck_assert_int_le(info.rows, 8);
    }
    ck_assert_int_eq(chunks, 9);         /* 60 rows, 7 per step beside one decode: ceil 8.6 */
    ck_assert_int_ge(mixed, 8);
    finish_clean(s);
    unload();
}
END_TEST

/* ---- metrics ---- */

START_TEST(metrics_accounting)
{
    load();
    static seen w;
    memset(&w, 0, sizeof w);
    llm_engine_opts o = {.max_num_seqs = 4};
    llm_engine *s = make(&o);
    int p[128], np = prompt_of("Once upon a time, there was a boy named Jake. He had a pink "
                               "book that he loved very much. It was a cold day.", p);
    long prompt_sum = 0;
    for (int i = 0; i < 6; i++) {
        submit(s, &w, p, np - i, 10, 0.0f, 1);
        prompt_sum += np - i;
    }
    llm_engine_run(s);
    llm_engine_metrics m;
    llm_engine_metrics_get(s, &m);
    ck_assert_int_eq(m.submitted, 6);
    ck_assert_int_eq(m.finished, 6);
    ck_assert_int_eq(m.prompt_tokens, prompt_sum);
    ck_assert_int_eq(m.generated_tokens, 60);
    ck_assert_int_eq(m.decode_tokens, 6 * 9);
    ck_assert_int_eq(m.prefix_query_tokens, prompt_sum);
    ck_assert_int_eq(m.prefill_tokens + m.prefix_hit_tokens, prompt_sum);
    ck_assert_int_gt(m.prefix_hit_tokens, 0);
    ck_assert(m.prefix_hit_rate > 0.0 && m.prefix_hit_rate < 1.0);
    long th = 0, tp = 0;
    for (int b = 0; b < LLM_ENGINE_HIST_N; b++)
        th += m.ttft_hist[b], tp += m.tpot_hist[b];
    ck_assert_int_eq(th, 6);
    ck_assert_int_eq(tp, 6);
    ck_assert_int_eq(m.ttft_count, 6);
    ck_assert_int_gt(m.kv_cached, 0);        /* the shared prefix stays cached */
    ck_assert_int_eq(m.kv_used, 0);
    ck_assert_int_eq(m.kv_free + m.kv_cached, m.kv_blocks);
    for (int i = 0; i < 6; i++) {
        ck_assert(w.st[i].ttft >= 0.0 && w.st[i].e2e >= w.st[i].ttft);
        ck_assert_int_eq(w.st[i].n_prompt, np - i);
        ck_assert_int_eq(w.st[i].n_out, 10);
    }
    finish_clean(s);
    unload();
}
END_TEST

/* ---- memory events: replayed, they rebuild the cache's state ---- */

typedef struct shadow {
    int refs[512], cached[512], pool_blocks, pool_bs, bad, n_ev, n_cow, n_share, n_evict;
    int steps_compute, flows;
    int other;                /* events that are not memory records */
    int want_pool, wrong_pool, pool_owner;   /* the pool id expected, records in another */
    int moves[4][4];          /* flow records by (from, to) */
    long rows;                /* scheduler -> model rows */
    int first[16], last[16];  /* per request: its first and last move, as from*4 + to */
    char first_bad[160];
} shadow;
static shadow g_sh;

static void sh_bad(const char *what, const mlsys_mem_info *m)
{
    if (!g_sh.bad++)
        snprintf(g_sh.first_bad, sizeof g_sh.first_bad, "%s: op %d block %d refs %d", what,
                 m->op, m->block, m->refs);
}

static void ev_sink(void *u, const mlsys_event *ev, size_t n)
{
    (void)u;
    for (size_t i = 0; i < n; i++) {
        const mlsys_event *e = &ev[i];
        if (e->kind == MLSYS_EV_COMPUTE_BEGIN && e->tag == 0)
            g_sh.steps_compute++;     /* the forward's span (row 1: the CPU's phases) */
        if (e->kind == MLSYS_EV_FLOW && e->flow.what == MLSYS_FLOW_REQUESTS) {
            const mlsys_flow_info *f = &e->flow;
            g_sh.flows++;
            if (f->from >= 0 && f->from < 4 && f->to >= 0 && f->to < 4 && f->seq >= 0 &&
                f->seq < 16) {
                g_sh.moves[f->from][f->to]++;
                if (f->from == 2 && f->to == 3)
                    g_sh.rows += f->count;
                if (!g_sh.first[f->seq])
                    g_sh.first[f->seq] = 1 + f->from * 4 + f->to;
                g_sh.last[f->seq] = 1 + f->from * 4 + f->to;
            }
        }
        if (e->kind != MLSYS_EV_MEM) {
            g_sh.other++;
            continue;
        }
        const mlsys_mem_info *m = &e->mem;
        g_sh.n_ev++;
        g_sh.wrong_pool += m->pool != g_sh.want_pool;
        int b = m->block;
        if (m->op != MLSYS_MEM_POOL && m->op != MLSYS_MEM_OWNER && (b < 0 || b >= 512)) {
            sh_bad("block out of range", m);
            continue;
        }
        switch (m->op) {
        case MLSYS_MEM_POOL:
            g_sh.pool_bs = m->index;
            g_sh.pool_blocks = m->aux;
            g_sh.pool_owner = m->owner;
            break;
        case MLSYS_MEM_ALLOC:
            if (g_sh.refs[b] != 0 || g_sh.cached[b] || m->refs != 1)
                sh_bad("alloc of a block in use or cached", m);
            g_sh.refs[b] = 1;
            break;
        case MLSYS_MEM_SHARE:
            g_sh.refs[b]++;
            g_sh.cached[b] = 0;
            g_sh.n_share++;
            if (m->refs != g_sh.refs[b])
                sh_bad("share count", m);
            break;
        case MLSYS_MEM_FREE:
            g_sh.refs[b]--;
            if (m->refs != g_sh.refs[b] || g_sh.refs[b] < 0)
                sh_bad("free count", m);
            g_sh.cached[b] = g_sh.refs[b] == 0 && m->cached;
            break;
        case MLSYS_MEM_EVICT:
            if (!g_sh.cached[b])
                sh_bad("evict of a block not cached", m);
            g_sh.cached[b] = 0;
            g_sh.n_evict++;
            break;
        case MLSYS_MEM_COW:
            g_sh.refs[b]--;
            g_sh.n_cow++;
            if (m->refs != g_sh.refs[b] || m->aux < 0 || m->aux >= 512 || g_sh.refs[m->aux] != 1)
                sh_bad("cow", m);
            break;
        default:
            break;
        }
    }
}

static int events_rank(mlsys_comm *c, void *arg)
{
    (void)arg;
    char err[256];
    llm_config cfg;
    llm_weights w;
    if (llm_checkpoint_read(MODEL, &cfg, &w, err, sizeof err))
        return 1;
    nn_set_gemm_kernel(NN_GEMM_INVARIANT);
    /* a pool of 10 blocks of 8 for 3 seats: shares, evictions and preemptions all happen */
    llm_engine_opts o = {.max_num_seqs = 3, .block_size = 8, .n_blocks = 16, .comm = c,
                        .overlap = g_overlap};
    llm_engine *s = llm_engine_create(&cfg, &w, &o, err, sizeof err);
    if (!s)
        return 1;
    int p[40];
    for (int i = 0; i < 40; i++)
        p[i] = 3 + (i * 13) % 200;
    for (int i = 0; i < 9; i++) {
        llm_request r = {.prompt = p, .n_prompt = 20 + 2 * i, .max_tokens = 30 + 3 * i,
                         .ignore_eos = 1};
        p[19] = 3 + i % 3;                 /* three families of prefixes */
        if (llm_engine_submit(s, &r, err, sizeof err) < 0)
            return 1;
    }
    long steps = llm_engine_run(s);
    llm_engine_metrics m;
    llm_engine_metrics_get(s, &m);
    llm_engine_free(s);
    llm_weights_free(&w);
    return steps > 0 && m.preemptions > 0 ? 0 : 2;
}

START_TEST(memory_events_rebuild_the_cache)
{
    memset(&g_sh, 0, sizeof g_sh);
    char why[512] = "";
    mlsys_launch_opts o = {.world_size = 1, .timeout_ms = 60000, .trace_capacity = 8192};
    mlsys_job *j = mlsys_job_start(&o, NULL, events_rank, NULL, why, sizeof why);
    ck_assert_msg(j != NULL, "%s", why);
    mlsys_job_sink sink = {NULL, ev_sink, NULL};
    int rc = mlsys_job_wait(j, &sink, -1, why, sizeof why);
    ck_assert_msg(rc == 0, "%s", why);
    ck_assert_int_eq((int)mlsys_job_events_lost(j), 0);
    mlsys_job_free(j);
    printf("  %d memory events: %d shares, %d evictions, %d copies; %d steps, %d request "
           "flows\n", g_sh.n_ev, g_sh.n_share, g_sh.n_evict, g_sh.n_cow, g_sh.steps_compute,
           g_sh.flows);
    ck_assert_msg(g_sh.bad == 0, "%d inconsistent events, first: %s", g_sh.bad,
                  g_sh.first_bad);
    ck_assert_int_eq(g_sh.pool_blocks, 16);
    ck_assert_int_eq(g_sh.pool_bs, 8);
    ck_assert_int_eq(g_sh.wrong_pool, 0);
    ck_assert_int_eq(g_sh.pool_owner, -1);     /* no role holds the engine's own pool */
    ck_assert_int_gt(g_sh.n_share, 0);
    ck_assert_int_gt(g_sh.n_evict, 0);
    ck_assert_int_gt(g_sh.steps_compute, 0);
    ck_assert_int_gt(g_sh.flows, g_sh.steps_compute);
    for (int b = 0; b < 16; b++)
        ck_assert_int_eq(g_sh.refs[b], 0);
    /* the requests' flow: each arrives once, is admitted (again after a preemption), runs,
     * and finishes once */
    ck_assert_int_eq(g_sh.moves[0][1], 9);
    ck_assert_int_eq(g_sh.moves[3][0], 9);
    ck_assert_int_gt(g_sh.moves[2][1], 0);
    ck_assert_int_eq(g_sh.moves[1][2], 9 + g_sh.moves[2][1]);
    ck_assert_int_gt(g_sh.rows, 9 * 20);
    for (int i = 0; i < 9; i++) {
        ck_assert_int_eq(g_sh.first[i], 1 + 0 * 4 + 1);
        ck_assert_int_eq(g_sh.last[i], 1 + 3 * 4 + 0);
    }
}
END_TEST

/* The cache's memory records alone (mem_comm: the RLHF loop's generator), under the
 * caller's pool id and role: nothing else reaches the trace (no ROLE records, request or
 * STEP flows, spans or gates), and the records still rebuild the cache, n samples' shares
 * and copies included. */
static int events_alone_rank(mlsys_comm *c, void *arg)
{
    (void)arg;
    char err[256];
    llm_config cfg;
    llm_weights w;
    if (llm_checkpoint_read(MODEL, &cfg, &w, err, sizeof err))
        return 1;
    nn_set_gemm_kernel(NN_GEMM_INVARIANT);
    llm_engine_opts o = {.max_num_seqs = 4, .block_size = 8, .n_blocks = 16,
                         .overlap = g_overlap, .mem_comm = c, .mem_pool = 5, .mem_role = 2};
    llm_engine *s = llm_engine_create(&cfg, &w, &o, err, sizeof err);
    if (!s)
        return 1;
    int p[40];
    for (int i = 0; i < 40; i++)
        p[i] = 3 + (i * 13) % 200;
    for (int i = 0; i < 4; i++) {
        /* three samples of a 21-token prompt (a partial last block: copies), then three
         * requests of one prefix (shares) */
        llm_request r = {.prompt = p, .n_prompt = i ? 20 : 21, .max_tokens = 12,
                         .ignore_eos = 1, .n = i ? 1 : 3, .temperature = 1.0f, .top_p = 1.0f,
                         .seed = 7};
        if (llm_engine_submit(s, &r, err, sizeof err) < 0)
            return 1;
    }
    long steps = llm_engine_run(s);
    llm_engine_free(s);
    llm_weights_free(&w);
    return steps > 0 ? 0 : 2;
}

START_TEST(memory_events_alone)
{
    memset(&g_sh, 0, sizeof g_sh);
    g_sh.want_pool = 5;
    char why[512] = "";
    mlsys_launch_opts o = {.world_size = 1, .timeout_ms = 60000, .trace_capacity = 8192};
    mlsys_job *j = mlsys_job_start(&o, NULL, events_alone_rank, NULL, why, sizeof why);
    ck_assert_msg(j != NULL, "%s", why);
    mlsys_job_sink sink = {NULL, ev_sink, NULL};
    int rc = mlsys_job_wait(j, &sink, -1, why, sizeof why);
    ck_assert_msg(rc == 0, "%s", why);
    ck_assert_int_eq((int)mlsys_job_events_lost(j), 0);
    mlsys_job_free(j);
    ck_assert_msg(g_sh.bad == 0, "%d inconsistent events, first: %s", g_sh.bad,
                  g_sh.first_bad);
    ck_assert_int_gt(g_sh.n_ev, 0);
    ck_assert_msg(g_sh.other == 0, "%d events besides the memory records", g_sh.other);
    ck_assert_int_eq(g_sh.wrong_pool, 0);
    ck_assert_int_eq(g_sh.pool_owner, 2);
    ck_assert_int_eq(g_sh.pool_blocks, 16);
    ck_assert_int_gt(g_sh.n_share, 0);
    ck_assert_int_gt(g_sh.n_cow, 0);
    for (int b = 0; b < 16; b++)
        ck_assert_int_eq(g_sh.refs[b], 0);
}
END_TEST

/* ---- n samples of one prompt: prefilled once, blocks forked, copy on write ---- */

#define NCH 8
typedef struct choices {
    int tok[NCH][MAXOUT];
    int n[NCH], finals[NCH], after_final[NCH];
    llm_finish why[NCH];
    char text[NCH][1024];
    size_t text_len[NCH];
    int id;                   /* the request whose events these are */
    int cancel_index, cancel_at;   /* cancel the request when that choice has that many */
    llm_engine *s;
} choices;

static void on_choice(void *u, const llm_engine_event *ev)
{
    choices *c = u;
    ck_assert_int_eq(ev->id, c->id);
    ck_assert(ev->index >= 0 && ev->index < NCH);
    int i = ev->index;
    if (c->finals[i])
        c->after_final[i]++;
    if (ev->token >= 0 && c->n[i] < MAXOUT)
        c->tok[i][c->n[i]++] = ev->token;
    if (ev->text_len > 0 && c->text_len[i] + (size_t)ev->text_len < sizeof c->text[i]) {
        memcpy(c->text[i] + c->text_len[i], ev->text, (size_t)ev->text_len);
        c->text_len[i] += (size_t)ev->text_len;
    }
    if (ev->finish != LLM_FINISH_NONE) {
        c->finals[i]++;
        c->why[i] = ev->finish;
    } else if (c->cancel_at && i == c->cancel_index && c->n[i] == c->cancel_at) {
        ck_assert_int_eq(llm_engine_cancel(c->s, c->id), 0);
    }
}

static int submit_n(llm_engine *s, choices *c, const int *p, int np, int n, int max,
                    float temp, uint64_t seed)
{
    char err[256];
    llm_request r = {.prompt = p, .n_prompt = np, .max_tokens = max, .temperature = temp,
                     .top_p = 1.0f, .seed = seed, .ignore_eos = 1, .n = n,
                     .on_event = on_choice, .u = c};
    c->s = s;
    c->id = llm_engine_submit(s, &r, err, sizeof err);
    ck_assert_msg(c->id >= 0, "%s", err);
    return c->id;
}

/* n = 4: the prompt is computed once, the four tables share its blocks, and the first write
 * into the shared partial last block copies it: once per choice but the last to write (n - 1
 * copies), none when the prompt ends on a block's end. Choice i draws exactly what a request
 * of its own with seed + i draws. Every reference is gone at the end. */
START_TEST(n_samples_fork_the_prompt)
{
    load();
    char err[256];
    for (int whole = 0; whole < 2; whole++) {
        int p[200], np = prompt_of(texts[4], p);
        np = whole ? np / 16 * 16 : (np % 16 ? np : np - 1);
        ck_assert(np >= 16);
        static choices c;
        memset(&c, 0, sizeof c);
        llm_engine_opts o = {.max_num_seqs = 8};
        llm_engine *s = make(&o);
        submit_n(s, &c, p, np, 4, 30, 1.0f, 77);
        ck_assert_int_gt(llm_engine_run(s), 0);
        llm_engine_metrics m;
        llm_engine_metrics_get(s, &m);
        llm_paged_stats ps;
        llm_paged_stats_get(llm_engine_kv(s), &ps);
        int cows = whole ? 0 : 3;
        printf("n = 4, a prompt of %d tokens (%s blocks of 16): %ld prompt rows computed, "
               "%ld copies on write (%d expected)\n", np, whole ? "whole" : "a partial last of",
               m.prefill_tokens, ps.cows, cows);
        ck_assert_int_eq(m.prefill_tokens, np);
        ck_assert_int_eq(ps.cows, cows);
        ck_assert_int_eq(m.kv_used, 0);
        ck_assert_msg(llm_paged_check(llm_engine_kv(s), err, sizeof err) == 0, "%s", err);
        for (int i = 0; i < 4; i++) {
            ck_assert_int_eq(c.finals[i], 1);
            ck_assert_int_eq(c.after_final[i], 0);
            ck_assert_int_eq(c.why[i], LLM_FINISH_LENGTH);
            ck_assert_int_eq(c.n[i], 30);
        }
        ck_assert_int_eq(c.finals[4], 0);
        llm_engine_free(s);
        /* the same choices as four requests of their own, nothing shared */
        llm_engine_opts o1 = {.max_num_seqs = 8, .no_prefix_cache = 1};
        s = make(&o1);
        static choices one[4];
        for (int i = 0; i < 4; i++) {
            memset(&one[i], 0, sizeof one[i]);
            submit_n(s, &one[i], p, np, 1, 30, 1.0f, 77 + (uint64_t)i);
        }
        llm_engine_run(s);
        llm_engine_metrics_get(s, &m);
        ck_assert_int_eq(m.prefill_tokens, 4 * np);
        int differ = 0;
        for (int i = 0; i < 4; i++)
            differ += one[i].n[0] != c.n[i] || memcmp(one[i].tok[0], c.tok[i],
                                                     sizeof(int) * (size_t)c.n[i]);
        ck_assert_msg(!differ, "%d choices differ from requests of their own", differ);
        /* and they are samples, not one answer four times */
        ck_assert(memcmp(c.tok[0], c.tok[1], sizeof(int) * 30) ||
                  memcmp(c.tok[0], c.tok[2], sizeof(int) * 30));
        finish_clean(s);
    }
    unload();
}
END_TEST

/* A request of n samples holds n seats from its admission: two of n = 4 on 4 seats run one
 * after the other; a cancel ends every choice (before the fork, while running, from a
 * callback) and gives every block back; n beyond the seats is refused. */
START_TEST(n_samples_seats_and_cancel)
{
    load();
    char err[256];
    int p[200], np = prompt_of(texts[3], p);
    llm_engine_opts o = {.max_num_seqs = 4, .max_num_batched_tokens = 8};
    llm_engine *s = make(&o);
    static choices a, b, c;
    memset(&a, 0, sizeof a);
    memset(&b, 0, sizeof b);
    memset(&c, 0, sizeof c);
    /* a: cancelled while its prompt is still being prefilled in chunks (nothing forked) */
    submit_n(s, &a, p, np, 4, 20, 1.0f, 1);
    /* b: waits for a's seats, then cancels itself after choice 2 drew 5 tokens */
    submit_n(s, &b, p, np, 4, 20, 1.0f, 2);
    b.cancel_index = 2, b.cancel_at = 5;
    /* c: then runs to its end */
    submit_n(s, &c, p, np, 4, 6, 0.0f, 3);
    llm_step_info info;
    ck_assert_int_eq(llm_engine_step(s, &info), 1);
    ck_assert_int_eq(info.n_items, 1);           /* only a's prompt: 8 rows */
    llm_engine_metrics m;
    llm_engine_metrics_get(s, &m);
    ck_assert_int_eq(m.running, 1);
    ck_assert_int_eq(m.waiting, 2);
    ck_assert_int_eq(llm_engine_cancel(s, a.id), 0);
    ck_assert_int_gt(llm_engine_run(s), 0);
    for (int i = 0; i < 4; i++) {
        ck_assert_int_eq(a.finals[i], 1);
        ck_assert_int_eq(a.why[i], LLM_FINISH_CANCEL);
        ck_assert_int_eq(a.n[i], 0);
        ck_assert_int_eq(b.finals[i], 1);
        ck_assert_int_eq(b.why[i], LLM_FINISH_CANCEL);
        ck_assert_int_eq(c.finals[i], 1);
        ck_assert_int_eq(c.why[i], LLM_FINISH_LENGTH);
        ck_assert_int_eq(c.n[i], 6);
        ck_assert_int_eq(a.after_final[i] + b.after_final[i] + c.after_final[i], 0);
    }
    ck_assert_int_eq(b.n[2], 5);
    /* greedy choices are one answer n times */
    for (int i = 1; i < 4; i++)
        ck_assert(!memcmp(c.tok[0], c.tok[i], sizeof(int) * 6));
    llm_engine_metrics_get(s, &m);
    ck_assert_int_eq(m.cancelled, 8);
    ck_assert_int_eq(m.finished, 12);
    /* n beyond the engine's seats */
    llm_request r = {.prompt = p, .n_prompt = np, .max_tokens = 4, .n = 5};
    err[0] = 0;
    ck_assert_int_eq(llm_engine_submit(s, &r, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "n 5") != NULL, "%s", err);
    r.n = -1;
    ck_assert_int_eq(llm_engine_submit(s, &r, err, sizeof err), -1);
    finish_clean(s);
    /* freeing the engine ends choices that never forked */
    memset(&a, 0, sizeof a);
    s = make(&o);
    submit_n(s, &a, p, np, 3, 20, 1.0f, 1);
    llm_engine_step(s, NULL);
    llm_engine_free(s);
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(a.finals[i], 1);
    unload();
}
END_TEST

/* ---- the text handed out is valid UTF-8 ---- */

/* The tokenizer's byte tokens (id 3 + byte) one by one into a sequence: what take_text hands
 * out after each, and at the end, is what Python's bytes.decode("utf-8", "replace") gives
 * for those bytes (checked there once: b"\xed\xa0\x80" -> three U+FFFD, b"\xf0\x9fa" -> one
 * and "a", b"\xc0\xaf" -> two, a cut b"\xe2\x82" at the end -> one). */
static void bytes_through(const char *in, size_t n, int stop_a, const char *want_mid,
                          const char *want_all)
{
    char err[256];
    int prompt[1] = {LLM_TOK_BOS};
    const char *stop[1] = {"a\xe2\x82"};
    llm_request r = {.prompt = prompt, .n_prompt = 1, .max_tokens = 64, .stop = stop,
                     .n_stop = stop_a};
    llm_seq *q = llm_seq_create(0, 0, &r, &g_c, 0, &g_t, err, sizeof err);
    ck_assert_msg(q != NULL, "%s", err);
    char got[256];
    size_t len = 0;
    int ended = 0;
    for (size_t i = 0; i < n && !ended; i++) {
        ended = llm_seq_append(q, LLM_TOK_BYTE0 + (unsigned char)in[i], &g_t, g_c.seq_len) !=
                LLM_FINISH_NONE;
        const char *t;
        int k = llm_seq_take_text(q, ended, &t);
        memcpy(got + len, t, (size_t)k);
        len += (size_t)k;
        int bad;
        ck_assert(llm_utf8_valid_prefix(got, len, &bad) == len);
    }
    got[len] = 0;
    ck_assert_msg(!strcmp(got, want_mid), "before the end: '%s', want '%s'", got, want_mid);
    const char *t;
    int k = llm_seq_take_text(q, 1, &t);
    memcpy(got + len, t, (size_t)k);
    got[len + (size_t)k] = 0;
    ck_assert_msg(!strcmp(got, want_all), "at the end: '%s', want '%s'", got, want_all);
    llm_seq_free(q);
}

START_TEST(utf8_held_back_and_replaced)
{
    load();
#define R "\xef\xbf\xbd"
    bytes_through("\xe2\x82\xac!", 4, 0, "\xe2\x82\xac!", "\xe2\x82\xac!");
    bytes_through("x\xe2\x82", 3, 0, "x", "x" R);                 /* cut: held, then U+FFFD */
    bytes_through("\xed\xa0\x80", 3, 0, R R R, R R R);           /* a surrogate */
    bytes_through("\xf0\x9f" "a", 3, 0, R "a", R "a");
    bytes_through("\xc0\xaf", 2, 0, R R, R R);                   /* overlong */
    bytes_through("\xf0\x9f\x98\x80", 4, 0, "\xf0\x9f\x98\x80", "\xf0\x9f\x98\x80");
    bytes_through("\xff" "b", 2, 0, R "b", R "b");
    /* a stop string's prefix held back too, then released when it cannot match */
    bytes_through("xa\xe2", 3, 1, "x", "xa" R);
    bytes_through("xa\xe2\x82" "b", 5, 1, "x", "x");      /* the stop string ends it there */
#undef R
    unload();
}
END_TEST

/* Temperature 2 makes the model draw byte tokens that split characters or are no UTF-8 at
 * all: every text handed out, streamed piece by piece, must still be valid UTF-8 (and the
 * raw bytes of the tokens must not be, or the test proves nothing). */
START_TEST(text_is_valid_utf8)
{
    load();
    static seen w;
    memset(&w, 0, sizeof w);
    llm_engine_opts o = {.max_num_seqs = 16, .tok = &g_t};
    llm_engine *s = make(&o);
    w.s = s;
    enum { NREQ = 48 };
    char err[256];
    const char *stops[2] = {"\xc3", "e."};
    for (int i = 0; i < NREQ; i++) {
        int p[64], np = prompt_of(texts[i % NTEXT], p);
        llm_request r = {.prompt = p, .n_prompt = np, .max_tokens = 60, .temperature = 2.0f,
                         .top_p = 1.0f, .seed = 1000 + (uint64_t)i, .ignore_eos = 1,
                         .stop = stops, .n_stop = i % 3 == 0 ? 2 : 0, .on_event = on_event,
                         .u = &w};
        ck_assert_msg(llm_engine_submit(s, &r, err, sizeof err) == i, "%s", err);
    }
    llm_engine_run(s);
    int raw_bad = 0, replaced = 0;
    for (int i = 0; i < NREQ; i++) {
        int bad;
        ck_assert_int_eq(w.finals[i], 1);
        ck_assert_msg(llm_utf8_valid_prefix(w.text[i], w.text_len[i], &bad) == w.text_len[i],
                      "request %d: text not valid UTF-8 at byte %zu", i,
                      llm_utf8_valid_prefix(w.text[i], w.text_len[i], &bad));
        char raw[4096];
        long n = llm_bpe_decode(&g_t, w.tok[i], (size_t)w.n[i], raw, sizeof raw);
        if (n > 0 && n < (long)sizeof raw)
            raw_bad += llm_utf8_valid_prefix(raw, (size_t)n, &bad) != (size_t)n;
        replaced += w.text_len[i] >= 3 && memmem(w.text[i], w.text_len[i], "\xef\xbf\xbd", 3);
    }
    printf("temperature 2, %d requests: raw token bytes not UTF-8 in %d, every text handed "
           "out valid (%d with U+FFFD)\n", NREQ, raw_bad, replaced);
    ck_assert_msg(raw_bad >= 5, "only %d raw outputs are invalid: the test proves little",
                  raw_bad);
    finish_clean(s);
    unload();
}
END_TEST

int main(void)
{
    Suite *s = suite_create("engine");
    /* the same tests with the overlap scheduler (core/llm/engine.c): it must keep every
     * promise of the plain engine */
    for (int k = 0; k < 2; k++) {
        TCase *tc = tcase_create(k ? "overlap" : "engine");
        tcase_set_timeout(tc, 300);
        if (k)
            tcase_add_checked_fixture(tc, overlap_on, NULL);
        tcase_add_test(tc, output_independent_of_batch);
        tcase_add_test(tc, preemption_keeps_outputs);
        tcase_add_test(tc, finish_reasons_and_stop_strings);
        tcase_add_test(tc, cancel_frees_blocks);
        tcase_add_test(tc, bad_requests_refused);
        tcase_add_test(tc, submit_from_threads);
        tcase_add_test(tc, continuous_against_static);
        tcase_add_test(tc, metrics_accounting);
        tcase_add_test(tc, memory_events_rebuild_the_cache);
        tcase_add_test(tc, memory_events_alone);
        tcase_add_test(tc, n_samples_fork_the_prompt);
        tcase_add_test(tc, n_samples_seats_and_cancel);
        tcase_add_test(tc, text_is_valid_utf8);
        if (!k)
            tcase_add_test(tc, utf8_held_back_and_replaced);
        suite_add_tcase(s, tc);
    }
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
