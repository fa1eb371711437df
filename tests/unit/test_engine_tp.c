/* test_engine_tp.c - the engine on a tensor-parallel group (llm_engine_opts.tp): rank 0 runs
 * the engine, whose runner sends every step's rows to the other ranks and computes its share
 * of each layer; the others follow with no scheduler (tp_step.h). On the shipped model, with
 * requests that prefill, share a cached prefix and decode beside one another, the greedy
 * tokens equal the engine's on one process, every follower runs exactly the engine's
 * forwards, and freeing the engine stops them. Bad groups are refused in one line. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include "../../core/llm/engine.h"
#include "../../core/llm/tp_step.h"
#include "../../core/nn/nn.h"

#define MODEL "assets/models/model.bin"
#define NREQ 6
#define MAXNEW 16
#define SEQS 4
#define BLOCK 8
#define BLOCKS 40
#define MAXLEN 64

typedef struct shared {
    int tok[NREQ][MAXNEW], n[NREQ];
    long steps, follower_steps[4];
    char err[4][256];
} shared;

static shared *g_out;
static llm_config g_c;
static llm_weights g_w;

static void on_event(void *u, const llm_engine_event *ev)
{
    shared *o = u;
    if (ev->token >= 0 && ev->id >= 0 && ev->id < NREQ && o->n[ev->id] < MAXNEW)
        o->tok[ev->id][o->n[ev->id]++] = ev->token;
}

static llm_engine_opts opts(mlsys_comm *tp)
{
    return (llm_engine_opts){.max_num_seqs = SEQS, .max_num_batched_tokens = 64,
                             .block_size = BLOCK, .n_blocks = BLOCKS, .max_model_len = MAXLEN,
                             .tp = tp};
}

/* Six greedy requests: three of one 20-token prefix (the later ones hit the cache), three
 * of their own lengths, more than the seats: some wait, then take a freed seat. */
static int run_engine(mlsys_comm *tp, shared *o, char *err, size_t n)
{
    llm_engine_opts eo = opts(tp);
    llm_engine *s = llm_engine_create(&g_c, &g_w, &eo, err, n);
    if (!s)
        return -1;
    int p[40];
    for (int i = 0; i < 40; i++)
        p[i] = 3 + (i * 17) % 250;
    for (int i = 0; i < NREQ; i++) {
        if (i >= 3)
            p[0] = 3 + i;
        llm_request r = {.prompt = p, .n_prompt = i < 3 ? 20 + i : 9 + 5 * i,
                         .max_tokens = MAXNEW, .ignore_eos = 1, .on_event = on_event, .u = o};
        if (llm_engine_submit(s, &r, err, n) < 0) {
            llm_engine_free(s);
            return -1;
        }
    }
    llm_engine_run(s);
    llm_engine_metrics m;
    llm_engine_metrics_get(s, &m);
    o->steps = m.steps;
    llm_engine_free(s);         /* stops the followers */
    return m.finished == NREQ ? 0 : -1;
}

static int rank_fn(mlsys_comm *c, void *arg)
{
    (void)arg;
    int r = mlsys_rank(c), T = mlsys_size(c);
    char *err = g_out->err[r];
    size_t n = sizeof g_out->err[r];
    nn_set_gemm_kernel(NN_GEMM_INVARIANT);
    if (r == 0)
        return run_engine(c, g_out, err, n) ? 1 : 0;
    /* a follower: the leader's geometry, its own share of the model and of the cache */
    llm_config cut = g_c;
    cut.seq_len = MAXLEN;
    llm_fwd e;
    llm_kv kv;
    if (llm_fwd_init_tp(&e, &cut, &g_w, 64, c, err, n))
        return 1;
    if (llm_tp_follower_kv(&kv, &cut, T, SEQS, BLOCKS * BLOCK, MAXLEN, err, n)) {
        llm_fwd_fini(&e);
        return 1;
    }
    float *lg = mlsys_xmalloc((size_t)SEQS * g_c.vocab_size * sizeof *lg);
    int rc = llm_tp_follow(&e, &kv, lg, &g_out->follower_steps[r], err, n);
    free(lg);
    llm_kv_free(&kv);
    llm_fwd_fini(&e);
    return rc ? 1 : 0;
}

START_TEST(greedy_equal_on_two_ranks)
{
    static shared ref;
    char err[256], why[256];
    memset(&ref, 0, sizeof ref);
    nn_set_gemm_kernel(NN_GEMM_INVARIANT);
    ck_assert_msg(run_engine(NULL, &ref, err, sizeof err) == 0, "%s", err);
    memset(g_out, 0, sizeof *g_out);
    int rc = mlsys_run_fn(2, 120000, rank_fn, NULL, why, sizeof why);
    ck_assert_msg(rc == 0, "%s; rank 0: %s | rank 1: %s", why, g_out->err[0], g_out->err[1]);
    int same = 0;
    for (int i = 0; i < NREQ; i++) {
        ck_assert_int_eq(g_out->n[i], MAXNEW);
        same += memcmp(g_out->tok[i], ref.tok[i], sizeof ref.tok[i]) == 0;
    }
    printf("T=2: %d of %d requests' greedy tokens equal the one-process engine's; %ld steps, "
           "the follower ran %ld forwards\n", same, NREQ, g_out->steps,
           g_out->follower_steps[1]);
    ck_assert_int_eq(same, NREQ);
    ck_assert_int_eq(g_out->steps, ref.steps);
    ck_assert_int_eq(g_out->follower_steps[1], g_out->steps);
}
END_TEST

/* Rank 1 cannot run the engine, and 3 ranks do not divide 4 heads: one line each. */
static int bad_rank(mlsys_comm *c, void *arg)
{
    (void)arg;
    int r = mlsys_rank(c);
    if (r == 0 && mlsys_size(c) == 2)
        return 0;               /* a leader would wait for a follower that never comes */
    llm_engine_opts eo = opts(c);
    llm_engine *s = llm_engine_create(&g_c, &g_w, &eo, g_out->err[r], sizeof g_out->err[r]);
    llm_engine_free(s);
    return s ? 1 : 0;
}

START_TEST(bad_groups_refused)
{
    char why[256];
    for (int T = 2; T <= 3; T++) {
        memset(g_out, 0, sizeof *g_out);
        ck_assert_msg(mlsys_run_fn(T, 60000, bad_rank, NULL, why, sizeof why) == 0, "%s", why);
        for (int r = T == 2 ? 1 : 0; r < T; r++)
            ck_assert_msg(strstr(g_out->err[r], "tensor-parallel") &&
                          !strchr(g_out->err[r], '\n'), "T=%d rank %d: '%s'", T, r,
                          g_out->err[r]);
    }
}
END_TEST

int main(int argc, char **argv)
{
    (void)argc;
    nn_gemm_start(argv);
    if (access(MODEL, R_OK) != 0) {
        printf("test_engine_tp: skipped: %s is absent (make assets)\n", MODEL);
        return 0;
    }
    char err[256];
    if (llm_checkpoint_read(MODEL, &g_c, &g_w, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    g_out = mmap(NULL, sizeof *g_out, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (g_out == MAP_FAILED)
        return 1;
    Suite *s = suite_create("engine_tp");
    TCase *tc = tcase_create("tp");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, greedy_equal_on_two_ranks);
    tcase_add_test(tc, bad_groups_refused);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
