/* test_mem_refuse.c - engines reckon what they will allocate before they allocate it
 * (core/llm/engine_mem.c): a cache sized by what the run needs (the sequences' length given)
 * or, for a server, by what fits in half the free memory; a plan that does not fit refused
 * in one line. The engine on a context cut to what the run needs generates the very tokens
 * it generates on the whole context. The real program refuses with exit 2 and one line:
 * the server on a model whose header says seq_len 1,000,000, ch09 and ch10 past the free
 * memory (MLSYS_MEM_LIMIT stands for a small machine), ch14 --measure-bytes past it. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "../../core/llm/engine.h"
#include "run_bin.h"

#define MODEL "assets/models/model.bin"

/* The shipped model's shape with a context of a million tokens (no weights needed to plan). */
static llm_config long_config(void)
{
    llm_config c = {128, 352, 5, 4, 2, 512, 1000000, 1, 0, 0};
    char err[256];
    ck_assert_msg(llm_config_check(&c, err, sizeof err) == 0, "%s", err);
    return c;
}

static double kv_block(const llm_config *c, int bs)
{
    return 2.0 * c->n_layers * bs * (double)c->kv_dim * sizeof(float);
}

START_TEST(plan_sizes_by_need)
{
    llm_config c = long_config();
    char err[512];
    setenv("MLSYS_MEM_LIMIT", "1G", 1);
    /* 16 sequences of at most 104 tokens: 16 x ceil(104 / 16) blocks, the context cut */
    llm_engine_opts o = {.max_model_len = 104};
    ck_assert_msg(llm_engine_plan(&c, &o, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(o.max_num_seqs, 16);
    ck_assert_int_eq(o.block_size, 16);
    ck_assert_int_eq(o.n_blocks, 16 * 7);
    ck_assert_int_eq(o.max_model_len, 104);
    /* a length beyond the model's context is refused */
    llm_engine_opts bad = {.max_model_len = 1000001};
    ck_assert(llm_engine_plan(&c, &bad, err, sizeof err) != 0);
    /* a known need that does not fit is refused, not shrunk */
    setenv("MLSYS_MEM_LIMIT", "4M", 1);
    llm_engine_opts o2 = {.max_model_len = 104};
    ck_assert(llm_engine_plan(&c, &o2, err, sizeof err) != 0);
    ck_assert_msg(strstr(err, "more than this machine has free") && !strchr(err, '\n') &&
                  strstr(err, "112 blocks"), "%s", err);
    unsetenv("MLSYS_MEM_LIMIT");
}
END_TEST

START_TEST(plan_server_fits_free_memory)
{
    llm_config c = long_config();
    char err[512];
    /* 16 whole contexts would take 16 x 62500 blocks (41 GB); half of 24 GiB holds fewer:
     * the pool is cut to that, one whole context at least */
    setenv("MLSYS_MEM_LIMIT", "24G", 1);
    llm_engine_opts o = {0};
    ck_assert_msg(llm_engine_plan(&c, &o, err, sizeof err) == 0, "%s", err);
    double per = kv_block(&c, 16);
    ck_assert_int_ge(o.n_blocks, 62500);
    ck_assert_int_lt(o.n_blocks, 16 * 62500);
    ck_assert((double)o.n_blocks * per <= 12.0 * (1ull << 30));
    ck_assert_int_eq(o.max_model_len, 1000000);
    /* not even one context and the scratch fit in 4 GiB: refused in one line */
    setenv("MLSYS_MEM_LIMIT", "4G", 1);
    llm_engine_opts o2 = {0};
    ck_assert(llm_engine_plan(&c, &o2, err, sizeof err) != 0);
    ck_assert_msg(strstr(err, "62500 blocks") && !strchr(err, '\n'), "%s", err);
    unsetenv("MLSYS_MEM_LIMIT");
}
END_TEST

/* ---- the engine on a cut context ---- */
typedef struct got {
    int tok[64], n, done;
} got;

static void on_event(void *u, const llm_engine_event *ev)
{
    got *g = u;
    if (ev->token >= 0 && g->n < 64)
        g->tok[g->n++] = ev->token;
    if (ev->finish != LLM_FINISH_NONE)
        g->done = 1;
}

static void greedy(const llm_config *c, const llm_weights *w, int max_model_len, got *g)
{
    char err[256];
    llm_engine_opts o = {.max_num_seqs = 2, .max_model_len = max_model_len};
    llm_engine *s = llm_engine_create(c, w, &o, err, sizeof err);
    ck_assert_msg(s, "%s", err);
    int prompt[5] = {1, 300, 41, 77, 12};
    memset(g, 0, sizeof *g);
    llm_request r = {.prompt = prompt, .n_prompt = 5, .max_tokens = 30, .ignore_eos = 1,
                     .on_event = on_event, .u = g};
    ck_assert_msg(llm_engine_submit(s, &r, err, sizeof err) >= 0, "%s", err);
    while (llm_engine_has_work(s))
        ck_assert(llm_engine_step(s, NULL) >= 0);
    ck_assert(g->done);
    llm_engine_free(s);
}

START_TEST(cut_context_same_tokens)
{
    llm_config c;
    llm_weights w;
    char err[256];
    ck_assert_msg(llm_checkpoint_read(MODEL, &c, &w, err, sizeof err) == 0, "%s", err);
    got whole, cut;
    greedy(&c, &w, 0, &whole);
    greedy(&c, &w, 35, &cut);
    ck_assert_int_eq(whole.n, 30);
    ck_assert_int_eq(cut.n, 30);
    ck_assert(memcmp(whole.tok, cut.tok, sizeof whole.tok) == 0);
    llm_weights_free(&w);
}
END_TEST

/* ---- the real program ---- */
static int err_lines(const char *s)
{
    int n = 0;
    for (; *s; s++)
        n += *s == '\n';
    return n;
}

static void refused(bin_result r, const char *want)
{
    ck_assert_msg(r.status == 2, "exit %d: %s", r.status, r.err);
    ck_assert_msg(err_lines(r.err) == 1 && strstr(r.err, want), "%s", r.err);
    bin_result_free(&r);
}

START_TEST(program_refuses_exit_2)
{
    char dir[] = "/tmp/mlsys-test-mem-XXXXXX", cmd[512];
    ck_assert(mkdtemp(dir));
    /* a consistent model whose header says a context of a million tokens */
    bin_result m = run_bin("model init %s/long.bin --dim 16 --layers 1 --heads 2 --kv-heads 1 "
                           "--hidden 32 --vocab 512 --seq-len 1000000", dir);
    ck_assert_msg(m.status == 0, "%s", m.err);
    bin_result_free(&m);
    setenv("MLSYS_MEM_LIMIT", "1G", 1);
    refused(run_bin("run ch08/minimal-inference-server --serve 127.0.0.1:0 --model %s/long.bin",
                    dir), "more than this machine has free");
    setenv("MLSYS_MEM_LIMIT", "16M", 1);
    refused(run_bin("run ch09/prefix-sharing-demo --max-num-seqs 256"),
            "more than this machine has free");
    setenv("MLSYS_MEM_LIMIT", "8M", 1);
    refused(run_bin("run ch10/scheduling-overhead-benchmark --batch-sizes 64 --prompt-len 64 "
                    "--steps 60"), "more than this machine has free");
    setenv("MLSYS_MEM_LIMIT", "1G", 1);
    refused(run_bin("run ch14/weight-update-demo --measure-bytes 1G -w 2"),
            "a buffer per rank");
    unsetenv("MLSYS_MEM_LIMIT");
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    ck_assert_int_eq(system(cmd), 0);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("mem_refuse");
    TCase *tc = tcase_create("plan");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, plan_sizes_by_need);
    tcase_add_test(tc, plan_server_fits_free_memory);
    tcase_add_test(tc, cut_context_same_tokens);
    tcase_add_test(tc, program_refuses_exit_2);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
