/* test_tp_step.c - a serving engine's steps on tensor-parallel ranks (core/llm/tp_step.c):
 * rank 0 leads with a paged KV cache (block tables, a request admitted mid-way, one
 * released), the other ranks follow with no allocator of their own; the script of steps is
 * also run unsplit in one process. The leader's logits must be the unsplit ones within
 * 1e-5 · (1 + max |logit|) and its greedy tokens the same; every follower computes the
 * leader's logits bit for bit and runs exactly the leader's forwards; the stop ends them.
 * (A follower's map need only be one-to-one and the same from step to step: two positions
 * sharing a slot, the bug this would catch, change the leader's logits through the sums.)
 * Then engines one after another on one group (llm_tp_announce, llm_tp_follow_engines): two
 * engines of different shapes (one cuts its prompts into chunks of 8 rows), an announced
 * engine that was never made, an idle leader that keeps the followers waiting longer than
 * the group's deadlock timeout: the greedy tokens are the unsplit engines', each follower
 * runs exactly the leader's forwards and ends when told. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include "../../core/llm/engine.h"
#include "../../core/llm/tp_step.h"
#include "../../core/nn/nn.h"
#include "../../core/nn/transformer.h"

#define NSTEPS 9
#define V 256
#define NSEQ 4
#define MAXLEN 32
#define BLOCK 4

typedef struct shared {
    float logits[4][NSTEPS][3][V];    /* [rank][step][row wanted][vocab] */
    long follower_steps[4];
    char err[4][200];
} shared;

static shared *g_out;
static llm_config g_c;
static llm_weights g_w;

static int argmax(const float *l)
{
    int b = 0;
    for (int v = 1; v < V; v++)
        if (l[v] > l[b])
            b = v;
    return b;
}

/* The script: sequences 0 and 1 prefill together, decode greedily; sequence 2 arrives at
 * step 3 (its prefill beside two decodes); sequence 0 ends after step 5. lead is NULL for
 * the unsplit run. Logits of each step's wanted rows (at most 3) go to out. */
static int script(llm_fwd *e, llm_kv *kv, int lead, float (*out)[3][V], char *err, size_t n)
{
    static const int p0[] = {5, 9, 100, 7, 3, 250}, p1[] = {42, 42, 8, 1}, p2[] = {77, 6, 5, 4, 3};
    int len[3] = {6, 4, 0}, next[3] = {0, 0, 0}, alive[3] = {1, 1, 0};
    float lg[3 * V];
    for (int step = 0; step < NSTEPS; step++) {
        int seq[16], pos[16], tok[16], nr = 0, owner[3];
        unsigned char want[16];
        if (step == 3) {
            alive[2] = 1;
            len[2] = 5;
        }
        if (step == 6 && alive[0]) {
            kv->ops->release(kv, 0);
            alive[0] = 0;
        }
        int nw = 0;
        for (int s = 0; s < 3; s++) {
            if (!alive[s])
                continue;
            const int *pr = s == 0 ? p0 : s == 1 ? p1 : p2;
            int first = step == 0 || (s == 2 && step == 3);
            int from = first ? 0 : len[s] - 1, to = len[s];
            if (!first) {
                tok[nr] = next[s];
                seq[nr] = s;
                pos[nr] = len[s] - 1;
                want[nr] = 1;
                nr++;
            } else {
                for (int t = from; t < to; t++, nr++) {
                    seq[nr] = s;
                    pos[nr] = t;
                    tok[nr] = pr[t];
                    want[nr] = t == to - 1;
                }
            }
            if (kv->ops->reserve(kv, s, len[s]) != 0) {
                snprintf(err, n, "step %d: reserve seq %d", step, s);
                return -1;
            }
            owner[nw++] = s;
        }
        int rc = lead ? llm_tp_lead_forward(e, kv, nr, seq, pos, tok, want, lg, err, n)
                      : llm_forward(e, kv, nr, seq, pos, tok, want, lg, err, n);
        if (rc)
            return -1;
        for (int k = 0; k < nw; k++) {
            memcpy(out[step][k], lg + (size_t)k * V, V * sizeof(float));
            next[owner[k]] = argmax(lg + (size_t)k * V);
            len[owner[k]]++;
        }
    }
    return lead ? llm_tp_lead_stop(e) : 0;
}

static llm_paged_opts opts(void)
{
    return (llm_paged_opts){.block_size = BLOCK, .n_blocks = NSEQ * MAXLEN / BLOCK,
                            .n_seqs = NSEQ, .max_len = MAXLEN};
}

static int rank_fn(mlsys_comm *c, void *arg)
{
    (void)arg;
    int r = mlsys_rank(c), T = mlsys_size(c);
    char *err = g_out->err[r];
    size_t n = sizeof g_out->err[r];
    llm_fwd e;
    llm_kv kv;
    llm_config kc;
    if (llm_fwd_init_tp(&e, &g_c, &g_w, 16, c, err, n) || llm_tp_kv_config(&g_c, T, &kc))
        return 1;
    int rc;
    if (r == 0) {
        llm_paged_opts o = opts();
        if (llm_kv_init_paged(&kv, &kc, &o, err, n))
            return 1;
        rc = script(&e, &kv, 1, g_out->logits[0], err, n);
    } else {
        float *lg = malloc((size_t)16 * V * sizeof *lg);
        if (llm_tp_follower_kv(&kv, &g_c, T, NSEQ, NSEQ * MAXLEN, MAXLEN, err, n))
            return 1;
        rc = llm_tp_follow(&e, &kv, lg, &g_out->follower_steps[r], err, n);
        /* the last step's wanted rows stay at the front of lg: the leader's, bit for bit */
        memcpy(g_out->logits[r][NSTEPS - 1], lg, 2 * V * sizeof(float));
        free(lg);
    }
    llm_kv_free(&kv);
    llm_fwd_fini(&e);
    return rc ? 1 : 0;
}

START_TEST(leader_and_followers)
{
    static float ref[NSTEPS][3][V];
    char err[200], why[256];
    llm_fwd e;
    llm_kv kv;
    llm_paged_opts o = opts();
    ck_assert(llm_fwd_init(&e, &g_c, &g_w, 16, err, sizeof err) == 0);
    ck_assert_msg(llm_kv_init_paged(&kv, &g_c, &o, err, sizeof err) == 0, "%s", err);
    ck_assert_msg(script(&e, &kv, 0, ref, err, sizeof err) == 0, "%s", err);
    llm_kv_free(&kv);
    llm_fwd_fini(&e);
    for (int T = 2; T <= 4; T *= 2) {
        memset(g_out, 0, sizeof *g_out);
        int rc = mlsys_run_fn(T, 60000, rank_fn, NULL, why, sizeof why);
        ck_assert_msg(rc == 0, "T=%d: %s; %s | %s", T, why, g_out->err[0], g_out->err[1]);
        double worst = 0;
        int same = 1;
        for (int s = 0; s < NSTEPS; s++)
            for (int k = 0; k < 3; k++) {
                double mx = 0, d = 0;
                for (int v = 0; v < V; v++) {
                    mx = fmax(mx, fabs(ref[s][k][v]));
                    d = fmax(d, fabs((double)ref[s][k][v] - g_out->logits[0][s][k][v]));
                }
                worst = fmax(worst, d / (1 + mx));
                same &= argmax(ref[s][k]) == argmax(g_out->logits[0][s][k]);
            }
        printf("T=%d: %d steps led, max |logit diff| / (1 + max|logit|) %.2e, greedy tokens "
               "%s\n", T, NSTEPS, worst, same ? "equal" : "DIFFER");
        ck_assert_msg(worst <= 1e-5, "T=%d: %.3g", T, worst);
        ck_assert(same);
        for (int r = 1; r < T; r++) {
            ck_assert_int_eq(g_out->follower_steps[r], NSTEPS);
            ck_assert_msg(memcmp(g_out->logits[r][NSTEPS - 1], g_out->logits[0][NSTEPS - 1],
                                 2 * V * sizeof(float)) == 0,
                          "T=%d: follower %d's last logits differ from the leader's", T, r);
        }
    }
}
END_TEST

/* ---- engines one after another ---- */

#define EREQ 3
#define ENEW 6

typedef struct eng_out {
    int tok[2][EREQ][ENEW], n[2][EREQ];
    long steps[2];
    long f_engines[4], f_steps[4];
    char err[4][200];
} eng_out;

static eng_out *g_eng;
static int g_cur;               /* the engine whose tokens on_event records */

static void on_tok(void *u, const llm_engine_event *ev)
{
    eng_out *o = u;
    if (ev->token >= 0 && ev->id < EREQ && o->n[g_cur][ev->id] < ENEW)
        o->tok[g_cur][ev->id][o->n[g_cur][ev->id]++] = ev->token;
}

/* Engine k: two shapes (the first chunks a 13-token prompt into steps of 8 rows). */
static llm_engine_opts eng_opts(int k, mlsys_comm *tp)
{
    return k == 0 ? (llm_engine_opts){.max_num_seqs = 2, .max_num_batched_tokens = 8,
                                      .block_size = 4, .max_model_len = MAXLEN, .tp = tp}
                  : (llm_engine_opts){.max_num_seqs = 4, .max_num_batched_tokens = 64,
                                      .block_size = 8, .tp = tp};
}

static int run_one(int k, mlsys_comm *tp, eng_out *o, char *err, size_t n)
{
    llm_engine_opts eo = eng_opts(k, tp);
    if (tp && llm_tp_announce(&g_c, &eo, err, n))
        return -1;
    llm_engine *s = llm_engine_create(&g_c, &g_w, &eo, err, n);
    if (!s)
        return -1;
    static const int p[13] = {5, 9, 100, 7, 3, 250, 42, 42, 8, 1, 77, 6, 5};
    g_cur = k;
    for (int i = 0; i < EREQ; i++) {
        llm_request r = {.prompt = p + i, .n_prompt = 13 - 4 * i, .max_tokens = ENEW,
                         .ignore_eos = 1, .on_event = on_tok, .u = o};
        if (llm_engine_submit(s, &r, err, n) < 0) {
            llm_engine_free(s);
            return -1;
        }
    }
    llm_engine_run(s);
    llm_engine_metrics m;
    llm_engine_metrics_get(s, &m);
    o->steps[k] = m.steps;
    llm_engine_free(s);
    return m.finished == EREQ ? 0 : -1;
}

static int eng_rank(mlsys_comm *c, void *arg)
{
    int idle_ms = *(int *)arg, r = mlsys_rank(c);
    char *err = g_eng->err[r];
    size_t n = sizeof g_eng->err[r];
    if (r > 0)
        return llm_tp_follow_engines(c, &g_c, &g_w, &g_eng->f_engines[r], &g_eng->f_steps[r],
                                     err, n) ? 1 : 0;
    if (run_one(0, c, g_eng, err, n))
        return 1;
    /* announced, then never made: the followers go back to waiting for an engine */
    llm_engine_opts eo = eng_opts(1, c);
    if (llm_tp_announce(&g_c, &eo, err, n) || llm_tp_announce_cancel(c))
        return 1;
    if (idle_ms)
        usleep((useconds_t)idle_ms * 1000);     /* a server with nothing to do */
    if (run_one(1, c, g_eng, err, n))
        return 1;
    return llm_tp_announce_end(c) ? 1 : 0;
}

START_TEST(engines_one_after_another)
{
    static eng_out ref;
    char err[200], why[256];
    memset(&ref, 0, sizeof ref);
    for (int k = 0; k < 2; k++)
        ck_assert_msg(run_one(k, NULL, &ref, err, sizeof err) == 0, "%s", err);
    for (int T = 2; T <= 4; T *= 2) {
        /* on 2 ranks the leader idles 2.5 s between engines, past the 1 s timeout */
        int idle_ms = T == 2 ? 2500 : 0;
        memset(g_eng, 0, sizeof *g_eng);
        int rc = mlsys_run_fn(T, 1000, eng_rank, &idle_ms, why, sizeof why);
        ck_assert_msg(rc == 0, "T=%d: %s; %s | %s", T, why, g_eng->err[0], g_eng->err[1]);
        for (int k = 0; k < 2; k++) {
            ck_assert_int_eq(g_eng->steps[k], ref.steps[k]);
            for (int i = 0; i < EREQ; i++) {
                ck_assert_int_eq(g_eng->n[k][i], ENEW);
                ck_assert_msg(memcmp(g_eng->tok[k][i], ref.tok[k][i], sizeof ref.tok[k][i]) == 0,
                              "T=%d engine %d request %d: greedy tokens differ", T, k, i);
            }
        }
        for (int r = 1; r < T; r++) {
            ck_assert_int_eq(g_eng->f_engines[r], 3);
            ck_assert_int_eq(g_eng->f_steps[r], g_eng->steps[0] + g_eng->steps[1]);
        }
        printf("T=%d: engines of %ld and %ld steps, one announced and never made%s: tokens "
               "equal, each follower ran %ld forwards\n", T, ref.steps[0], ref.steps[1],
               idle_ms ? ", 2.5 s idle past a 1 s timeout" : "", g_eng->f_steps[1]);
    }
    /* a group the model does not split over, and a follower that is rank 0: one line each */
    memset(g_eng, 0, sizeof *g_eng);
    ck_assert(mlsys_run_fn(3, 10000, eng_rank, &(int){0}, why, sizeof why) != 0);
    ck_assert_msg(strstr(g_eng->err[0], "tensor-parallel") && !strchr(g_eng->err[0], '\n'),
                  "%s", g_eng->err[0]);
}
END_TEST

int main(int argc, char **argv)
{
    (void)argc;
    nn_gemm_start(argv);
    g_out = mmap(NULL, sizeof *g_out, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    g_eng = mmap(NULL, sizeof *g_eng, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1,
                 0);
    if (g_out == MAP_FAILED || g_eng == MAP_FAILED)
        return 1;
    g_c = (llm_config){.dim = 64, .hidden_dim = 128, .n_layers = 2, .n_heads = 8,
                       .n_kv_heads = 4, .vocab_size = V, .seq_len = MAXLEN,
                       .shared_classifier = 1};
    char err[200];
    if (llm_weights_alloc(&g_w, &g_c, err, sizeof err)) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    llm_config_check(&g_c, err, sizeof err);
    nn_tf_init_weights(&g_w, &g_c, 11);
    Suite *s = suite_create("tp_step");
    TCase *tc = tcase_create("tp");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, leader_and_followers);
    tcase_add_test(tc, engines_one_after_another);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int nf = srunner_ntests_failed(sr);
    srunner_free(sr);
    llm_weights_free(&g_w);
    return nf ? 1 : 0;
}
