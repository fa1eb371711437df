/* test_generate_engine.c - llm_generate is "submit B requests, step the engine until done":
 * on the shipped model under the batch-invariant GEMM it draws exactly the tokens the
 * static-batching loop it replaced drew (tests/fixtures/generate_golden.txt, recorded from
 * that loop: greedy, sampled with temperature / top-k / top-p, without EOS, at the end of
 * the context), whether the engine holds the whole batch in one step or is too small for it
 * (chunked prefill, requests queued for a seat). JSON mode is a request of the engine too:
 * its outputs equal the one-sequence JSON loop's (tests/fixtures/json_golden.txt), alone
 * and batched with plain requests. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "../../core/llm/engine.h"
#include "../../core/nn/nn.h"

#define MODEL "assets/models/model.bin"
#define TOKENIZER "assets/models/tokenizer.bin"

static llm_config g_c;
static llm_weights g_w;
static llm_tokenizer g_t;

static int load(void)
{
    char err[256];
    if (access(MODEL, R_OK) || access(TOKENIZER, R_OK)) {
        printf("skipped: the shipped model (%s, %s) is not there\n", MODEL, TOKENIZER);
        return 0;
    }
    ck_assert_msg(llm_checkpoint_read(MODEL, &g_c, &g_w, err, sizeof err) == 0, "%s", err);
    ck_assert_msg(llm_tokfile_read(TOKENIZER, 0, &g_t, err, sizeof err) == 0, "%s", err);
    ck_assert(nn_set_gemm_kernel(NN_GEMM_INVARIANT) == 0);
    return 1;
}

static void unload(void)
{
    llm_weights_free(&g_w);
    llm_tokenizer_free(&g_t);
}

/* The sets the golden file was recorded with: prompt b of a set is prompts[(first + b) %
 * NP] (long: a prompt near the end of the context), sequence b draws with seed 100 + b. */
static const char *const prompts[] = {
    "Once upon a time", "Tom saw a", "{\"name\": ", "12 + 7 =", "One day, the little",
    "The dog", "", "She said \"hello\" and", "3 - 1 = 2\n5 + 4 =", "[{\"id\": 3, ",
};
enum { NP = 10, MAXB = 8, MAXN = 100 };
typedef struct gset {
    int B, first, max_new, stop_at_eos;
    float temp, top_p;
    int top_k, long_prompt;
} gset;
static const gset sets[] = {
    {8, 0, 48, 1, 0.0f, 1.0f, 0, 0},       /* greedy */
    {8, 2, 48, 1, 0.9f, 0.95f, 0, 0},      /* sampled, nucleus */
    {5, 5, 40, 1, 1.0f, 1.0f, 20, 0},      /* sampled, top-k */
    {3, 0, 100, 0, 0.0f, 1.0f, 0, 0},      /* EOS does not stop it */
    {2, 0, 30, 1, 0.0f, 1.0f, 0, 1},       /* the context ends it */
};
enum { NSETS = sizeof sets / sizeof *sets };

typedef struct golden {
    int n[NSETS][MAXB];
    int tok[NSETS][MAXB][MAXN];
} golden;

static char *fixture_path(const char *name, char *buf, size_t n)
{
    const char *src = getenv("MLSYS_LAB_SRC");
    snprintf(buf, n, "%s%stests/fixtures/%s", src ? src : "", src ? "/" : "", name);
    return buf;
}

static void read_golden(golden *g)
{
    char path[512], line[4096];
    FILE *f = fopen(fixture_path("generate_golden.txt", path, sizeof path), "r");
    ck_assert_msg(f != NULL, "%s: cannot open", path);
    memset(g, 0, sizeof *g);
    int lines = 0;
    while (fgets(line, sizeof line, f)) {
        int si, b, np, n, off;
        if (line[0] == '#')
            continue;
        ck_assert_msg(sscanf(line, "set %d seq %d prompt %d out %d:%n", &si, &b, &np, &n,
                             &off) == 4 && si >= 0 && si < NSETS && b >= 0 && b < MAXB &&
                      n >= 0 && n <= MAXN, "%s: bad line %s", path, line);
        g->n[si][b] = n;
        char *p = line + off;
        for (int i = 0; i < n; i++)
            g->tok[si][b][i] = (int)strtol(p, &p, 10);
        lines++;
    }
    fclose(f);
    ck_assert_int_eq(lines, 26);
}

static int set_prompt(const gset *g, int b, int *ids)
{
    char buf[2048];
    const char *p = prompts[(g->first + b) % NP];
    if (g->long_prompt) {
        buf[0] = 0;
        while (strlen(buf) < 600)
            strcat(buf, "Tom saw a dog. ");
        p = buf;
    }
    int n = (int)llm_bpe_encode_prompt(&g_t, p, strlen(p), 1, ids);
    if (n > g_c.seq_len - 4 - b)
        n = g_c.seq_len - 4 - b;
    return n;
}

/* Every set through llm_generate on engines made by opts; returns the tokens that differ
 * from the golden file (0 expected). */
static int run_sets(const golden *gold, const llm_engine_opts *opts, const char *what)
{
    char err[256];
    int differ = 0, tokens = 0;
    llm_engine *eng = llm_engine_create(&g_c, &g_w, opts, err, sizeof err);
    ck_assert_msg(eng != NULL, "%s", err);
    for (int si = 0; si < NSETS; si++) {
        const gset *g = &sets[si];
        int ids[MAXB][2100], np[MAXB], out[MAXB][MAXN], n_out[MAXB];
        const int *pr[MAXB];
        int *po[MAXB];
        for (int b = 0; b < g->B; b++) {
            np[b] = set_prompt(g, b, ids[b]);
            pr[b] = ids[b];
            po[b] = out[b];
        }
        llm_gen_opts o = {.max_new = g->max_new, .stop_at_eos = g->stop_at_eos,
                          .temperature = g->temp, .top_k = g->top_k, .top_p = g->top_p,
                          .seed = 100};
        llm_gen_stats st;
        ck_assert_msg(llm_generate(eng, g->B, pr, np, po, n_out, &o, &st, err, sizeof err) == 0,
                      "%s", err);
        for (int b = 0; b < g->B; b++) {
            int same = n_out[b] == gold->n[si][b] &&
                       !memcmp(out[b], gold->tok[si][b], sizeof(int) * (size_t)n_out[b]);
            if (!same)
                printf("  %s: set %d sequence %d: %d tokens, the golden %d\n", what, si, b,
                       n_out[b], gold->n[si][b]);
            differ += !same;
            tokens += n_out[b];
        }
    }
    char ce[256];
    ck_assert_msg(llm_paged_check(llm_engine_kv(eng), ce, sizeof ce) == 0, "%s", ce);
    llm_engine_metrics m;
    llm_engine_metrics_get(eng, &m);
    ck_assert_int_eq(m.kv_used, 0);
    llm_engine_free(eng);
    printf("llm_generate on the engine (%s): %d tokens over %d sets, %s the recorded loop's\n",
           what, tokens, NSETS, differ ? "NOT" : "exactly");
    return differ;
}

START_TEST(generate_matches_the_loop_it_replaced)
{
    if (!load())
        return;
    static golden gold;
    read_golden(&gold);
    /* a batch in one step: 8 seats, every prompt's rows in one forward */
    llm_engine_opts roomy = {.max_num_seqs = 8, .max_num_batched_tokens = 2048};
    ck_assert_int_eq(run_sets(&gold, &roomy, "the whole batch per step"), 0);
    /* too small for it: 3 seats, 16 rows a step (prompts prefilled in chunks, sequences
     * queued for a seat), blocks of 4 tokens */
    llm_engine_opts tight = {.max_num_seqs = 3, .max_num_batched_tokens = 16, .block_size = 4};
    ck_assert_int_eq(run_sets(&gold, &tight, "3 seats, 16 rows a step"), 0);
    unload();
}
END_TEST

/* The generate figures keep their meaning: prompt rows in the prefill, one decode row per
 * sequence per step, the first token out of the prefill. */
START_TEST(generate_counts_rows_and_steps)
{
    if (!load())
        return;
    char err[256];
    llm_engine_opts o = {.max_num_seqs = 4, .max_num_batched_tokens = 256};
    llm_engine *eng = llm_engine_create(&g_c, &g_w, &o, err, sizeof err);
    ck_assert_msg(eng != NULL, "%s", err);
    int ids[4][64], np[4], out[4][20], n_out[4];
    const int *pr[4];
    int *po[4];
    for (int b = 0; b < 4; b++) {
        np[b] = (int)llm_bpe_encode_prompt(&g_t, prompts[b], strlen(prompts[b]), 1, ids[b]);
        pr[b] = ids[b];
        po[b] = out[b];
    }
    llm_gen_opts go = {.max_new = 20, .stop_at_eos = 0};
    llm_gen_stats st;
    ck_assert_msg(llm_generate(eng, 4, pr, np, po, n_out, &go, &st, err, sizeof err) == 0, "%s",
                  err);
    ck_assert_int_eq(st.prefill_tokens, np[0] + np[1] + np[2] + np[3]);
    ck_assert_int_eq(st.steps, 19);
    ck_assert_int_eq(st.decode_tokens, 4 * 19);
    for (int b = 0; b < 4; b++)
        ck_assert_int_eq(n_out[b], 20);
    ck_assert(st.decode_s > 0 && st.decode_cpu_s > 0 && st.prefill_s > 0);
    /* a bad prompt: nothing generated, one error, the engine clean */
    int bad = g_c.vocab_size;
    const int *pb[2] = {ids[0], &bad};
    int one = 1;
    int nps[2] = {np[0], one};
    ck_assert(llm_generate(eng, 2, pb, nps, po, n_out, &go, &st, err, sizeof err) == -1);
    ck_assert_msg(strstr(err, "sequence 1") != NULL, "%s", err);
    ck_assert(!llm_engine_has_work(eng));
    llm_engine_free(eng);
    unload();
}
END_TEST

/* n samples of each prompt: sequence b·n + i is exactly what a request of its own with
 * seed + b·n + i draws, the prompts' rows computed once instead of n times. */
START_TEST(generate_n_samples_per_prompt)
{
    if (!load())
        return;
    char err[256];
    llm_engine_opts o = {.max_num_seqs = 8, .max_num_batched_tokens = 256};
    llm_engine *eng = llm_engine_create(&g_c, &g_w, &o, err, sizeof err);
    ck_assert_msg(eng != NULL, "%s", err);
    int ids[2][64], np[2], out[6][24], n_out[6], rout[6][24], rn[6];
    const int *pr[6];
    int *po[6], *rpo[6], rnp[6];
    for (int b = 0; b < 2; b++)
        np[b] = (int)llm_bpe_encode_prompt(&g_t, prompts[b], strlen(prompts[b]), 1, ids[b]);
    for (int s = 0; s < 6; s++) {
        po[s] = out[s];
        rpo[s] = rout[s];
        pr[s] = ids[s / 3];           /* for the six requests of their own */
        rnp[s] = np[s / 3];
    }
    const int *two[2] = {ids[0], ids[1]};
    llm_gen_opts go = {.max_new = 24, .temperature = 0.9f, .top_p = 0.95f, .n = 3, .seed = 100};
    llm_gen_stats st, rst;
    ck_assert_msg(llm_generate(eng, 2, two, np, po, n_out, &go, &st, err, sizeof err) == 0,
                  "%s", err);
    go.n = 1;
    ck_assert_msg(llm_generate(eng, 6, pr, rnp, rpo, rn, &go, &rst, err, sizeof err) == 0,
                  "%s", err);
    for (int s = 0; s < 6; s++) {
        ck_assert_int_eq(n_out[s], rn[s]);
        ck_assert_msg(!memcmp(out[s], rout[s], sizeof(int) * (size_t)rn[s]),
                      "sequence %d differs from a request of its own", s);
    }
    ck_assert(memcmp(out[0], out[1], sizeof(int) * 24) || memcmp(out[0], out[2],
                                                                 sizeof(int) * 24));
    printf("n = 3 samples of 2 prompts: %ld prompt rows computed, %ld as 6 requests\n",
           st.prefill_tokens, rst.prefill_tokens);
    ck_assert_int_eq(st.prefill_tokens, np[0] + np[1]);
    llm_engine_free(eng);
    unload();
}
END_TEST

/* ---- JSON mode inside the batch ---- */

/* The sets tests/fixtures/json_golden.txt was recorded with (the one-sequence loop of
 * llm_json_generate before the engine): prompt b of a set is jprompts[(first + b) % 8],
 * sequence b draws with seed 200 + b (top-p 1), the schema "name:string,age:integer" or
 * none. */
static const char *const jprompts[] = {
    "", "{\"name\": ", "Tom saw a", "[", "A record:", "{\"id\": 3, \"tags\": [", "12 + 7 =", "{",
};
typedef struct jset {
    int first, n, max_new;
    float temp;
    int schema;
} jset;
static const jset jsets[] = {{0, 8, 64, 0.0f, 0}, {0, 8, 48, 0.8f, 0}, {0, 4, 64, 0.0f, 1},
                             {2, 3, 12, 0.0f, 0}};
enum { NJSETS = sizeof jsets / sizeof *jsets };

typedef struct jgolden {
    int n[NJSETS][8], done[NJSETS][8];
    int tok[NJSETS][8][64];
} jgolden;

static void read_json_golden(jgolden *g)
{
    char path[512], line[4096];
    FILE *f = fopen(fixture_path("json_golden.txt", path, sizeof path), "r");
    ck_assert_msg(f != NULL, "%s: cannot open", path);
    memset(g, 0, sizeof *g);
    int lines = 0;
    while (fgets(line, sizeof line, f)) {
        int si, b, np, rc, done, n, off;
        if (line[0] == '#')
            continue;
        ck_assert_msg(sscanf(line, "json %d seq %d prompt %d rc %d done %d out %d:%n", &si, &b,
                             &np, &rc, &done, &n, &off) == 6 && si >= 0 && si < NJSETS &&
                      b >= 0 && b < 8 && n >= 0 && n <= 64 && rc == 0, "%s: bad line %s",
                      path, line);
        g->n[si][b] = n;
        g->done[si][b] = done;
        char *p = line + off;
        for (int i = 0; i < n; i++)
            g->tok[si][b][i] = (int)strtol(p, &p, 10);
        lines++;
    }
    fclose(f);
    ck_assert_int_eq(lines, 23);
}

typedef struct jcollect {
    int tok[64], n, finals;
    llm_finish why;
} jcollect;

static void on_jevent(void *u, const llm_engine_event *ev)
{
    jcollect *c = u;
    if (ev->token >= 0 && c->n < 64)
        c->tok[c->n++] = ev->token;
    if (ev->finish != LLM_FINISH_NONE) {
        c->finals++;
        c->why = ev->finish;
    }
}

/* Every JSON request of the golden sets at once, between plain requests, on an engine too
 * small for them (overlap: with the overlap scheduler, a JSON row's token planned around as a
 * future). Returns the JSON outputs that differ from the recorded ones. */
static int json_batched(const jgolden *gold, llm_json_grammar *g, int overlap, int total)
{
    char err[256];
    llm_engine *eng;
    llm_engine_opts o = {.max_num_seqs = 4, .max_num_batched_tokens = 24, .block_size = 8,
                         .tok = &g_t, .overlap = overlap};
    eng = llm_engine_create(&g_c, &g_w, &o, err, sizeof err);
    ck_assert_msg(eng != NULL, "%s", err);
    static jcollect got[NJSETS][8], plain[16];
    memset(got, 0, sizeof got);
    memset(plain, 0, sizeof plain);
    int np_plain = 0;
    for (int si = 0; si < NJSETS; si++)
        for (int b = 0; b < jsets[si].n; b++) {
            const char *p = jprompts[(jsets[si].first + b) % 8];
            int ids[64], plainp[64];
            int np = (int)llm_bpe_encode_prompt(&g_t, p, strlen(p), 1, ids);
            llm_request r = {.prompt = ids, .n_prompt = np, .max_tokens = jsets[si].max_new,
                             .temperature = jsets[si].temp, .top_p = 1.0f,
                             .seed = 200 + (uint64_t)b, .ignore_eos = 1, .json = 1,
                             .grammar = jsets[si].schema ? &g[1] : NULL,
                             .on_event = on_jevent, .u = &got[si][b]};
            ck_assert_msg(llm_engine_submit(eng, &r, err, sizeof err) >= 0, "%s", err);
            if (np_plain < 16 && b % 2 == 0) {     /* a plain request between them */
                int pn = (int)llm_bpe_encode_prompt(&g_t, prompts[np_plain % NP],
                                                    strlen(prompts[np_plain % NP]), 1, plainp);
                llm_request q = {.prompt = plainp, .n_prompt = pn, .max_tokens = 30,
                                 .temperature = 1.0f, .seed = (uint64_t)np_plain,
                                 .on_event = on_jevent, .u = &plain[np_plain]};
                ck_assert_msg(llm_engine_submit(eng, &q, err, sizeof err) >= 0, "%s", err);
                np_plain++;
            }
        }
    ck_assert_int_gt(llm_engine_run(eng), 0);
    int differ = 0;
    for (int si = 0; si < NJSETS; si++)
        for (int b = 0; b < jsets[si].n; b++) {
            jcollect *c = &got[si][b];
            ck_assert_int_eq(c->finals, 1);
            ck_assert_int_eq(c->why, gold->done[si][b] ? LLM_FINISH_STOP : LLM_FINISH_LENGTH);
            differ += c->n != gold->n[si][b] ||
                      memcmp(c->tok, gold->tok[si][b], sizeof(int) * (size_t)c->n);
        }
    for (int i = 0; i < np_plain; i++)
        ck_assert_int_eq(plain[i].finals, 1);
    llm_engine_metrics m;
    llm_engine_metrics_get(eng, &m);
    ck_assert_int_eq(m.kv_used, 0);
    printf("JSON requests batched with %d plain ones (4 seats, 24 rows a step%s): %d of %d "
           "differ from the recorded loop's\n", np_plain, overlap ? ", overlap" : "", differ,
           total);
    ck_assert_int_eq(differ, 0);
    llm_engine_free(eng);
    return differ;
}

/* Every JSON request of the golden sets, greedy and sampled, draws the recorded tokens:
 * through llm_json_generate on an engine of its own, and all of them at once in one engine
 * together with plain requests (the mask applied to each JSON row only), under chunked
 * prefill with 4 seats. */
START_TEST(json_mode_matches_the_loop_it_replaced)
{
    if (!load())
        return;
    static jgolden gold;
    read_json_golden(&gold);
    char err[256];
    llm_json_schema sc;
    ck_assert(llm_json_schema_parse(&sc, "name:string,age:integer", err, sizeof err) == 0);
    llm_json_grammar g[2];
    ck_assert(llm_json_grammar_init_tok(&g[0], &g_t, NULL, err, sizeof err) == 0);
    ck_assert(llm_json_grammar_init_tok(&g[1], &g_t, &sc, err, sizeof err) == 0);
    /* one at a time */
    llm_engine_opts o1 = {.max_num_seqs = 1};
    llm_engine *eng = llm_engine_create(&g_c, &g_w, &o1, err, sizeof err);
    ck_assert_msg(eng != NULL, "%s", err);
    int differ = 0, total = 0;
    for (int si = 0; si < NJSETS; si++)
        for (int b = 0; b < jsets[si].n; b++) {
            const char *p = jprompts[(jsets[si].first + b) % 8];
            int ids[64], out[64], no;
            int np = (int)llm_bpe_encode_prompt(&g_t, p, strlen(p), 1, ids);
            llm_json_gen_opts o = {.max_new = jsets[si].max_new, .temperature = jsets[si].temp,
                                   .top_p = 1.0f, .seed = 200 + (uint64_t)b};
            llm_json_gen_stats st;
            ck_assert_msg(llm_json_generate(eng, &g[jsets[si].schema], ids, np, &o, out, &no,
                                            &st, err, sizeof err) == 0, "%s", err);
            differ += no != gold.n[si][b] || st.done != gold.done[si][b] ||
                      memcmp(out, gold.tok[si][b], sizeof(int) * (size_t)no);
            total++;
        }
    llm_engine_free(eng);
    printf("llm_json_generate on the engine: %d of %d JSON outputs differ from the recorded "
           "loop's\n", differ, total);
    ck_assert_int_eq(differ, 0);
    /* all at once, between plain requests, on an engine too small for them; again with the
     * overlap scheduler */
    ck_assert_int_eq(json_batched(&gold, g, 0, total), 0);
    ck_assert_int_eq(json_batched(&gold, g, 1, total), 0);
    llm_json_grammar_fini(&g[0]);
    llm_json_grammar_fini(&g[1]);
    unload();
}
END_TEST

int main(void)
{
    Suite *s = suite_create("generate on the engine");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, generate_matches_the_loop_it_replaced);
    tcase_add_test(tc, generate_counts_rows_and_steps);
    tcase_add_test(tc, generate_n_samples_per_prompt);
    tcase_add_test(tc, json_mode_matches_the_loop_it_replaced);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
