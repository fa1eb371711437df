/* test_rlhf.c - chapter 13's RLHF engine (core/rl/rlhf.c, reward_model.c, sums.c) against
 * independent references: the sums rule, the reward model's Bradley-Terry loss and its
 * gradient against central finite differences, GRPO's advantages against the formula, the
 * ratio exactly 1 before the first update, a short fixed-seed run that raises the reward, the
 * first iteration the same under colocated and split placement, and the lab's flag errors. */
#include "../../core/rl/rlhf.h"
#include "../../core/llm/model.h"
#include "run_bin.h"
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the rule ---- */

START_TEST(sums_rule)
{
    rl_sum p = {3, 4, '+'};
    ck_assert_int_eq(rl_sum_answer(&p), 7);
    ck_assert_int_eq(rl_sum_judge(&p, " 7", 2), 1);
    ck_assert_int_eq(rl_sum_judge(&p, " 7\n2 + 2 = 5", 12), 1);   /* only the first line */
    ck_assert_int_eq(rl_sum_judge(&p, " 8", 2), 0);
    ck_assert_int_eq(rl_sum_judge(&p, " seven", 6), -1);
    ck_assert_int_eq(rl_sum_judge(&p, "", 0), -1);
    rl_sum q = {9, 2, '-'};
    ck_assert_int_eq(rl_sum_judge(&q, " 7", 2), 1);
    mlsys_rng r;
    mlsys_rng_seed(&r, 3);
    for (int i = 0; i < 2000; i++) {
        rl_sum s;
        rl_sum_draw(&s, 9, &r);
        ck_assert(s.a >= 0 && s.a <= 9 && s.b >= 0 && s.b <= 9);
        ck_assert(s.op == '+' || (s.op == '-' && s.a >= s.b));
        int w = rl_sum_wrong(&s, &r);
        ck_assert(w >= 0 && w != rl_sum_answer(&s));
    }
}
END_TEST

/* ---- GRPO ---- */

START_TEST(grpo_advantages_formula)
{
    float R[4] = {1, 2, 3, 6}, A[4];
    rl_grpo_advantages(A, R, 4);
    double sd = sqrt((4.0 + 1.0 + 0.0 + 9.0) / 4.0);     /* mean 3, population std */
    for (int i = 0; i < 4; i++)
        ck_assert_double_eq_tol(A[i], (R[i] - 3.0) / (sd + 1e-6), 1e-6);
    float same[3] = {0.5f, 0.5f, 0.5f}, B[3];
    rl_grpo_advantages(B, same, 3);                    /* no spread: no signal, no NaN */
    for (int i = 0; i < 3; i++)
        ck_assert_float_eq(B[i], 0.0f);
}
END_TEST

/* GRPO's loss (DeepSeekMath's eq. 3): against the formula written out here with the
 * ratio π_ref/π itself, and its gradient against central finite differences, with answers
 * of different lengths, both signs of the advantage and ratios inside and outside the clip. */
static double grpo_by_hand(const float *lp, const float *old, const float *ref, const float *A,
                           const int *len, int S, double eps, double beta)
{
    double total = 0.0;
    for (int i = 0, q = 0; i < S; q += len[i], i++) {
        double per = 0.0;
        for (int t = q; t < q + len[i]; t++) {
            double rho = exp((double)lp[t]) / exp((double)old[t]);
            double c = rho < 1 - eps ? 1 - eps : rho > 1 + eps ? 1 + eps : rho;
            double surrogate = fmin(rho * A[i], c * A[i]);
            double pr = exp((double)ref[t]) / exp((double)lp[t]);     /* π_ref / π */
            per += surrogate - beta * (pr - log(pr) - 1.0);
        }
        total += per / len[i];
    }
    return -total / S;
}

START_TEST(grpo_loss_formula_and_gradient)
{
    enum { S = 4, NT = 2 + 5 + 1 + 3 };
    int len[S] = {2, 5, 1, 3};
    float A[S] = {1.2f, -0.7f, 0.4f, -1.5f}, lp[NT], old[NT], ref[NT], d[NT];
    mlsys_rng r;
    mlsys_rng_seed(&r, 21);
    for (int t = 0; t < NT; t++) {
        lp[t] = -0.3f - 2.0f * (float)mlsys_rng_uniform(&r);
        old[t] = lp[t] + 0.6f * ((float)mlsys_rng_uniform(&r) - 0.5f);   /* |log ρ| <= 0.3 */
        ref[t] = lp[t] + 1.0f * ((float)mlsys_rng_uniform(&r) - 0.5f);
    }
    const float eps = 0.2f, beta = 0.3f;
    double cf, akl, k3;
    double L = rl_grpo_loss(d, lp, old, ref, A, len, S, eps, beta, &cf, &akl, &k3);
    ck_assert_double_eq_tol(L, grpo_by_hand(lp, old, ref, A, len, S, eps, beta), 1e-6);
    ck_assert_msg(cf > 0.0 && cf < 1.0, "clip fraction %g: the case needs both kinds", cf);
    ck_assert_double_gt(k3, 0.0);
    /* β = 0: the surrogate alone; A = 0 and equal ratios: the k3 term alone */
    double L0 = rl_grpo_loss(NULL, lp, old, ref, A, len, S, eps, 0.0f, NULL, NULL, NULL);
    ck_assert_double_eq_tol(L0, grpo_by_hand(lp, old, ref, A, len, S, eps, 0.0), 1e-6);
    const float h = 1e-3f;
    for (int t = 0; t < NT; t++) {
        float keep = lp[t];
        lp[t] = keep + h;
        double up = rl_grpo_loss(NULL, lp, old, ref, A, len, S, eps, beta, NULL, NULL, NULL);
        lp[t] = keep - h;
        double dn = rl_grpo_loss(NULL, lp, old, ref, A, len, S, eps, beta, NULL, NULL, NULL);
        lp[t] = keep;
        double num = (up - dn) / (2.0 * h);
        ck_assert_msg(fabs(num - d[t]) < 1e-4 + 1e-3 * fabs(num),
                      "token %d: numeric %g analytic %g", t, num, d[t]);
    }
}
END_TEST

/* ---- the reward model's loss and gradient ---- */

static void tiny_rm(rl_rm *m)
{
    llm_config c = {8, 16, 1, 2, 1, 32, 8, 1, 0, 0};
    char err[128];
    ck_assert_int_eq(llm_config_check(&c, err, sizeof err), 0);
    llm_weights w;
    ck_assert_int_eq(llm_weights_alloc(&w, &c, err, sizeof err), 0);
    nn_tf_init_weights(&w, &c, 5);
    ck_assert_int_eq(rl_rm_init(m, &c, &w, err, sizeof err), 0);
    llm_weights_free(&w);
    mlsys_rng r;
    mlsys_rng_seed(&r, 11);
    nn_init_normal(m->head, (size_t)c.dim + 1, 0.0f, 0.5f, &r);
    /* larger weights than the init's, so the finite differences see more than noise */
    for (size_t i = 0; i < m->w.n_floats; i++)
        m->w.mem[i] *= 8.0f;
}

START_TEST(rm_loss_is_bradley_terry)
{
    rl_rm m;
    tiny_rm(&m);
    nn_tf tf;
    ck_assert_int_eq(nn_tf_init(&tf, &m.c, 6, 8), 0);
    int ids[6 * 8], len[6] = {8, 5, 3, 7, 4, 2};
    mlsys_rng r;
    mlsys_rng_seed(&r, 2);
    for (int i = 0; i < 48; i++)
        ids[i] = 3 + (int)(mlsys_rng_u64(&r) % 29);
    float s[6];
    rl_rm_score(&m, &tf, ids, len, 6, 8, s);
    double want = 0.0, ok = 0.0;
    for (int i = 0; i < 3; i++) {
        want += log(1.0 + exp(-((double)s[i] - s[3 + i])));
        ok += s[i] > s[3 + i];
    }
    double correct;
    double got = rl_rm_pair_loss(&m, &tf, ids, len, 3, 8, NULL, NULL, &correct);
    ck_assert_double_eq_tol(got, want / 3.0, 1e-6);
    ck_assert_double_eq(correct, ok);
    nn_tf_fini(&tf);
    rl_rm_free(&m);
}
END_TEST

START_TEST(rm_gradient_vs_finite_differences)
{
    rl_rm m;
    tiny_rm(&m);
    nn_tf tf;
    ck_assert_int_eq(nn_tf_init(&tf, &m.c, 4, 8), 0);
    int ids[4 * 8], len[4] = {6, 8, 4, 7};
    mlsys_rng r;
    mlsys_rng_seed(&r, 4);
    for (int i = 0; i < 32; i++)
        ids[i] = 3 + (int)(mlsys_rng_u64(&r) % 29);
    llm_weights g;
    char err[128];
    ck_assert_int_eq(llm_weights_alloc(&g, &m.c, err, sizeof err), 0);
    float gh[9] = {0};
    rl_rm_pair_loss(&m, &tf, ids, len, 2, 8, &g, gh, NULL);
    /* the head: every parameter; the body: a spread of parameters over every tensor */
    const double h = 1e-2;
    int checked = 0;
    for (int i = 0; i < 9; i++) {
        float keep = m.head[i];
        m.head[i] = keep + (float)h;
        double up = rl_rm_pair_loss(&m, &tf, ids, len, 2, 8, NULL, NULL, NULL);
        m.head[i] = keep - (float)h;
        double dn = rl_rm_pair_loss(&m, &tf, ids, len, 2, 8, NULL, NULL, NULL);
        m.head[i] = keep;
        ck_assert_msg(fabs((up - dn) / (2 * h) - gh[i]) < 2e-3 + 2e-2 * fabs(gh[i]),
                      "head %d: numeric %g analytic %g", i, (up - dn) / (2 * h), gh[i]);
        checked++;
    }
    size_t off[12], ln[12];
    int nr = llm_weights_param_ranges(&m.c, off, ln);
    for (int k = 0; k < nr; k++)
        for (size_t j = 0; j < ln[k]; j += ln[k] / 5 + 1) {
            size_t i = off[k] + j;
            float keep = m.w.mem[i];
            m.w.mem[i] = keep + (float)h;
            double up = rl_rm_pair_loss(&m, &tf, ids, len, 2, 8, NULL, NULL, NULL);
            m.w.mem[i] = keep - (float)h;
            double dn = rl_rm_pair_loss(&m, &tf, ids, len, 2, 8, NULL, NULL, NULL);
            m.w.mem[i] = keep;
            double num = (up - dn) / (2 * h);
            ck_assert_msg(fabs(num - g.mem[i]) < 3e-3 + 5e-2 * fabs(num),
                          "range %d float %zu: numeric %g analytic %g", k, j, num, g.mem[i]);
            checked++;
        }
    ck_assert_int_gt(checked, 40);
    llm_weights_free(&g);
    nn_tf_fini(&tf);
    rl_rm_free(&m);
}
END_TEST

START_TEST(rm_file_round_trip)
{
    rl_rm m, back;
    tiny_rm(&m);
    char err[256], path[] = "/tmp/mlsys-test-rm-XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    close(fd);
    ck_assert_int_eq(rl_rm_save(&m, path, err, sizeof err), 0);
    ck_assert_int_eq(rl_rm_load(&back, path, err, sizeof err), 0);
    ck_assert_int_eq(back.c.dim, m.c.dim);
    ck_assert(memcmp(back.w.mem, m.w.mem, m.w.n_floats * sizeof(float)) == 0);
    ck_assert(memcmp(back.head, m.head, 9 * sizeof(float)) == 0);
    rl_rm_free(&back);
    FILE *f = fopen(path, "wb");
    fputs("not a model", f);
    fclose(f);
    ck_assert_int_eq(rl_rm_load(&back, path, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "MLSYSRM1"));
    unlink(path);
    rl_rm_free(&m);
}
END_TEST

/* ---- the loop on the shipped model ---- */

typedef struct shipped {
    llm_config c, dc;
    llm_weights w, dw;
    llm_tokenizer t;
} shipped;

static void load_shipped(shipped *s)
{
    char err[512];
    ck_assert_msg(llm_checkpoint_read("assets/models/model.bin", &s->c, &s->w, err,
                                      sizeof err) == 0, "%s", err);
    ck_assert_msg(llm_checkpoint_read("assets/models/draft.bin", &s->dc, &s->dw, err,
                                      sizeof err) == 0, "%s", err);
    ck_assert_msg(llm_tokfile_read("assets/models/tokenizer.bin", s->c.vocab_size, &s->t, err,
                                   sizeof err) == 0, "%s", err);
}

static void free_shipped(shipped *s)
{
    llm_weights_free(&s->w);
    llm_weights_free(&s->dw);
    llm_tokenizer_free(&s->t);
}

/* Rows are padded only to the batch's longest (the reward model's lines too): what follows a
 * row's last token is never read, so a row scores the same padded to 24 or 16 tokens as to
 * its batch's longest, and the body-only forward's hidden state is the full forward's. */
START_TEST(padding_is_never_read)
{
    shipped s;
    load_shipped(&s);
    char err[256];
    rl_rm rm;
    ck_assert_int_eq(rl_rm_init(&rm, &s.dc, &s.dw, err, sizeof err), 0);
    mlsys_rng r;
    mlsys_rng_seed(&r, 9);
    nn_init_normal(rm.head, (size_t)rm.c.dim + 1, 0.0f, 0.5f, &r);
    const char *lines[4] = {"3 + 4 = 7", "12 - 5 = 7", "0 + 0 =", "9 + 9 = 18 or 81"};
    nn_tf tf;
    ck_assert_int_eq(nn_tf_init(&tf, &rm.c, 4, RL_RM_T), 0);
    float got[4], want[4];
    rl_rm_score_lines(&rm, &tf, &s.t, lines, 4, got);
    int ids[4 * RL_RM_T], len[4], tmp[128], longest = 0;
    for (int b = 0; b < 4; b++) {
        int n = (int)llm_bpe_encode_prompt(&s.t, lines[b], strlen(lines[b]), 1, tmp);
        len[b] = n < RL_RM_T ? n : RL_RM_T;
        longest = len[b] > longest ? len[b] : longest;
        for (int t = 0; t < RL_RM_T; t++)
            ids[b * RL_RM_T + t] = t < len[b] ? tmp[t] : LLM_TOK_BOS;
    }
    ck_assert_int_lt(longest, RL_RM_T);      /* the lines really are shorter than the rows */
    rl_rm_score(&rm, &tf, ids, len, 4, RL_RM_T, want);
    for (int b = 0; b < 4; b++)
        ck_assert_msg(fabsf(got[b] - want[b]) < 1e-5f * (1.0f + fabsf(want[b])),
                      "line %d: %g in rows of its batch's longest, %g in rows of %d", b,
                      got[b], want[b], RL_RM_T);
    nn_tf_fini(&tf);
    /* the actor: one row of 7 real tokens as 7 and as 24, logits and hidden state */
    int C = s.c.dim, V = s.c.vocab_size, row[24];
    for (int t = 0; t < 24; t++)
        row[t] = t < 7 ? 3 + (int)(mlsys_rng_u64(&r) % (uint64_t)(V - 3)) : LLM_TOK_BOS;
    nn_tf a, b;
    ck_assert_int_eq(nn_tf_init(&a, &s.c, 1, 24), 0);
    ck_assert_int_eq(nn_tf_init(&b, &s.c, 1, 24), 0);
    nn_tf_forward(&a, &s.w, row, NULL, 1, 24);
    nn_tf_forward(&b, &s.w, row, NULL, 1, 7);
    double worst = 0.0;
    for (int i = 0; i < 7 * V; i++)
        worst = fmax(worst, fabs((double)a.logits[i] - b.logits[i]));
    ck_assert_msg(worst < 1e-4, "logits of 7 tokens in a row of 24 and of 7 differ by %g",
                  worst);
    nn_tf_forward_hidden(&b, &s.w, row, 1, 24);
    ck_assert(memcmp(a.xn_final, b.xn_final, (size_t)24 * C * sizeof(float)) == 0);
    nn_tf_fini(&a);
    nn_tf_fini(&b);
    rl_rm_free(&rm);
    free_shipped(&s);
}
END_TEST

/* A reward model that scores every line alike (its head is zero before training) cannot tell
 * the right sum from the wrong one: it is at chance, 50 %, not "0 % right". Its loss is
 * log 2 for every pair. */
START_TEST(untrained_rm_is_at_chance)
{
    shipped s;
    load_shipped(&s);
    rl_rm rm;
    char err[256];
    ck_assert_int_eq(rl_rm_init(&rm, &s.dc, &s.dw, err, sizeof err), 0);
    ck_assert_double_eq(rl_rm_accuracy(&rm, &s.t, 9, 100, 7, 1), 0.5);
    rl_rm_train_opts o;
    rl_rm_train_defaults(&o);
    o.steps = 1;
    o.quiet = 1;
    rl_rm_report rep;
    ck_assert_int_eq(rl_rm_train(&rm, &s.t, &o, &rep, err, sizeof err), 0);
    ck_assert_double_eq(rep.heldout_acc0, 0.5);
    ck_assert_double_eq_tol(rep.first_loss, log(2.0), 1e-6);
    rl_rm_free(&rm);
    free_shipped(&s);
}
END_TEST

START_TEST(ratio_is_one_before_the_first_update)
{
    shipped s;
    load_shipped(&s);
    rl_rm rm;
    char err[256];
    ck_assert_int_eq(rl_rm_init(&rm, &s.dc, &s.dw, err, sizeof err), 0);
    mlsys_rng r;                /* a head that scores answers apart: advantages not all 0 */
    mlsys_rng_seed(&r, 5);
    nn_init_normal(rm.head, (size_t)rm.c.dim + 1, 0.0f, 0.5f, &r);
    for (int algo = 0; algo < 2; algo++) {
        rl_rlhf_config k;
        rl_rlhf_defaults(&k);
        k.prompts = 8;
        k.algo = algo ? RL_ALGO_GRPO : RL_ALGO_PPO;
        k.group = algo ? 2 : 1;
        k.lr = 1e-3f;               /* large: the second minibatch's ratios move */
        rl_rlhf *h = rl_rlhf_create(&k, NULL, &s.c, &s.w, &rm, &s.t, err, sizeof err);
        ck_assert_msg(h != NULL, "%s", err);
        rl_rlhf_stats st;
        for (int it = 0; it < 2; it++) {
            ck_assert_msg(rl_rlhf_iterate(h, &st, err, sizeof err) == 0, "%s", err);
            ck_assert_msg(st.ratio_dev0 == 0.0, "iteration %d: max |ratio - 1| = %g", it + 1,
                          st.ratio_dev0);
        }
        /* after an update the actor has left the reference: the reference's log-probs are
         * really the reference's (the first iteration's KL is exactly 0, see below) */
        ck_assert_msg(fabs(st.kl) > 1e-6, "%s: KL %g after an update", algo ? "grpo" : "ppo",
                      st.kl);
        /* the first iteration's KL is 0: the actor is the reference then, bit for bit */
        ck_assert_int_eq(st.version, 2);
        ck_assert_int_gt(st.tokens, 0);
        rl_rlhf_free(h);
    }
    rl_rm_free(&rm);
    free_shipped(&s);
}
END_TEST

START_TEST(first_kl_is_zero_and_placement_counts)
{
    shipped s;
    load_shipped(&s);
    rl_rm rm;
    char err[256];
    ck_assert_int_eq(rl_rm_init(&rm, &s.dc, &s.dw, err, sizeof err), 0);
    rl_rlhf_config k;
    rl_rlhf_defaults(&k);
    k.prompts = 8;
    rl_rlhf *h = rl_rlhf_create(&k, NULL, &s.c, &s.w, &rm, &s.t, err, sizeof err);
    ck_assert_msg(h != NULL, "%s", err);
    rl_rlhf_stats st;
    ck_assert_int_eq(rl_rlhf_iterate(h, &st, err, sizeof err), 0);
    ck_assert_double_eq(st.kl, 0.0);
    ck_assert_double_eq_tol(st.right + st.wrong + st.malformed, 1.0, 1e-9);
    ck_assert_int_eq(st.sequences, 8);
    /* the memory it declared: the actor's weights and gradients, Adam's two moments */
    uint64_t wb = (uint64_t)s.w.n_floats * sizeof(float);
    ck_assert_uint_eq(rl_rlhf_mem(h, RL_ROLE_ACTOR, RL_MEM_WEIGHTS), 2 * wb);
    ck_assert_uint_eq(rl_rlhf_mem(h, RL_ROLE_REFERENCE, RL_MEM_WEIGHTS), wb);
    ck_assert_uint_eq(rl_rlhf_mem(h, RL_ROLE_GENERATOR, RL_MEM_WEIGHTS), wb);
    ck_assert_uint_ge(rl_rlhf_mem(h, RL_ROLE_ACTOR, RL_MEM_OPTIMIZER), 2 * wb - 64);
    rl_rlhf_free(h);
    rl_rm_free(&rm);
    free_shipped(&s);
}
END_TEST

/* The fixed-seed run: a reward model trained briefly, then GRPO with the defaults; the mean
 * reward of the last four of twelve iterations beats the first four's. */
START_TEST(short_run_raises_the_reward)
{
    shipped s;
    load_shipped(&s);
    rl_rm rm;
    char err[256];
    ck_assert_int_eq(rl_rm_init(&rm, &s.dc, &s.dw, err, sizeof err), 0);
    rl_rm_train_opts o;
    rl_rm_train_defaults(&o);
    o.steps = 300;
    rl_rm_report rep;
    ck_assert_int_eq(rl_rm_train(&rm, &s.t, &o, &rep, err, sizeof err), 0);
    ck_assert_double_gt(rep.heldout_acc, 0.6);
    ck_assert_double_lt(rep.last_loss, rep.first_loss);
    rl_rlhf_config k;
    rl_rlhf_defaults(&k);
    k.algo = RL_ALGO_GRPO;
    k.group = 4;
    k.prompts = 8;
    rl_rlhf *h = rl_rlhf_create(&k, NULL, &s.c, &s.w, &rm, &s.t, err, sizeof err);
    ck_assert_msg(h != NULL, "%s", err);
    const int n = 12;
    double r[12];
    for (int i = 0; i < n; i++) {
        rl_rlhf_stats st;
        ck_assert_int_eq(rl_rlhf_iterate(h, &st, err, sizeof err), 0);
        r[i] = st.reward;
    }
    double first = (r[0] + r[1] + r[2] + r[3]) / 4;
    double last = (r[n - 4] + r[n - 3] + r[n - 2] + r[n - 1]) / 4;
    printf("short run: mean reward %.3f (iterations 1-4) -> %.3f (%d-%d)\n", first, last,
           n - 3, n);
    ck_assert_msg(last > first + 0.2, "reward %.3f -> %.3f", first, last);
    rl_rlhf_free(h);
    rl_rm_free(&rm);
    free_shipped(&s);
}
END_TEST

/* GRPO's group on the engine: the G answers to one problem are one request with n = G
 * samples, the prompt prefilled once and its blocks forked, and they draw exactly the tokens
 * G requests of their own draw with the seeds seed + i (under the batch-invariant GEMM, so
 * that a row's logits do not depend on how many rows share its forward): the whole
 * iteration's figures agree, and the forks computed a quarter of the prompt rows. */
START_TEST(grpo_group_forks_and_draws_as_separate_requests)
{
    ck_assert(nn_set_gemm_kernel(NN_GEMM_INVARIANT) == 0);
    shipped s;
    load_shipped(&s);
    rl_rm rm;
    char err[256];
    ck_assert_int_eq(rl_rm_init(&rm, &s.dc, &s.dw, err, sizeof err), 0);
    mlsys_rng r;
    mlsys_rng_seed(&r, 5);
    nn_init_normal(rm.head, (size_t)rm.c.dim + 1, 0.0f, 0.5f, &r);
    enum { G = 4, P = 8, NS = G * P, IT = 2 };
    rl_rlhf_stats st[2][IT];
    static int ans[IT][NS * 12], len[IT][NS];
    for (int v = 0; v < 2; v++) {
        rl_rlhf_config k;
        rl_rlhf_defaults(&k);
        k.algo = RL_ALGO_GRPO;
        k.group = G;
        k.prompts = P;
        k.no_fork = v;
        rl_rlhf *h = rl_rlhf_create(&k, NULL, &s.c, &s.w, &rm, &s.t, err, sizeof err);
        ck_assert_msg(h != NULL, "%s", err);
        for (int it = 0; it < IT; it++) {     /* the second after an update and a sync */
            ck_assert_msg(rl_rlhf_iterate(h, &st[v][it], err, sizeof err) == 0, "%s", err);
            const int *tok, *n;
            int lo, count, M = k.max_new;
            rl_rlhf_answers(h, &tok, &n, &lo, &count);
            ck_assert_int_eq(lo, 0);
            ck_assert_int_eq(count, NS);
            if (v == 0) {           /* the forks */
                memcpy(ans[it], tok, sizeof(int) * (size_t)(NS * M));
                memcpy(len[it], n, sizeof(int) * NS);
                /* a group's answers are G different draws, not one copied */
                int differ = 0;
                for (int q = 0; q < NS; q++)
                    differ += q % G && (n[q] != n[q - q % G] ||
                                        memcmp(tok + q * M, tok + (q - q % G) * M,
                                               sizeof(int) * (size_t)n[q]));
                ck_assert_int_gt(differ, 0);
                continue;
            }
            for (int q = 0; q < NS; q++)
                ck_assert_msg(n[q] == len[it][q] && !memcmp(tok + q * M, ans[it] + q * M,
                                                            sizeof(int) * (size_t)n[q]),
                              "iteration %d: answer %d (problem %d, sample %d) differs between "
                              "the forks and a request of its own", it + 1, q, q / G, q % G);
        }
        rl_rlhf_free(h);
    }
    for (int it = 0; it < IT; it++) {
        ck_assert_double_eq(st[0][it].reward, st[1][it].reward);
        ck_assert_double_eq(st[0][it].kl, st[1][it].kl);
        ck_assert_double_eq(st[0][it].right, st[1][it].right);
        ck_assert_int_eq(st[0][it].tokens, st[1][it].tokens);
        /* every prompt computed once against once per answer */
        ck_assert_int_gt(st[0][it].prompt_rows, P);
        ck_assert_int_eq(st[1][it].prompt_rows, G * st[0][it].prompt_rows);
    }
    rl_rm_free(&rm);
    free_shipped(&s);
}
END_TEST

/* ---- the lab: placement and flags ---- */

/* reward, right, no-sum and KL of the iteration line "   1   -1.796   15.6% ..." */
static int first_line(const char *out, double v[4])
{
    const char *p = strstr(out, "% generate/score/advantage/train/sync\n");
    if (!p)
        return -1;
    p = strchr(p, '\n') + 1;
    int it;
    return sscanf(p, "%d %lf %lf%% %lf%% %lf", &it, &v[0], &v[1], &v[2], &v[3]) == 5 ? 0 : -1;
}

START_TEST(split_and_colocated_agree_on_the_first_iteration)
{
    const char *common = "run ch13/rlhf-loop --iterations 1 --prompts 8 --rm-steps 20";
    bin_result a = run_bin("%s -w 1", common);
    bin_result b = run_bin("%s --placement split -w 2", common);
    bin_result c = run_bin("%s --placement split --gen-ranks 2 -w 3 --prompts 8", common);
    ck_assert_msg(a.status == 0, "%s", a.err);
    ck_assert_msg(b.status == 0, "%s", b.err);
    ck_assert_msg(c.status == 0, "%s", c.err);
    double va[4], vb[4], vc[4];
    ck_assert_int_eq(first_line(a.out, va), 0);
    ck_assert_int_eq(first_line(b.out, vb), 0);
    ck_assert_int_eq(first_line(c.out, vc), 0);
    for (int i = 0; i < 4; i++)
        ck_assert_msg(va[i] == vb[i], "field %d: colocated %g, split %g", i, va[i], vb[i]);
    /* two generators decode 4 rows each instead of 8: each sequence has its own stream, but
     * a row's logits may round differently in a smaller batch, so only the shape is checked */
    ck_assert(vc[1] >= 0.0 && vc[1] <= 100.0);
    ck_assert_ptr_nonnull(strstr(b.out, "split: rank 0..0 generate"));
    bin_result_free(&a);
    bin_result_free(&b);
    bin_result_free(&c);
}
END_TEST

START_TEST(flag_errors)
{
    struct {
        const char *args, *says;
    } bad[] = {
        {"--rl-algo grpo --group 1", "--group must be >= 2"},
        {"--placement split -w 1", "split placement needs"},
        {"--prompts 3 -w 2", "must split evenly"},
        {"--reward-model /nonexistent/rm.bin", "/nonexistent/rm.bin"},
        {"--max-new 13", "max-new"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        bin_result r = run_bin("run ch13/rlhf-loop %s", bad[i].args);
        ck_assert_msg(r.status == 2, "%s: status %d", bad[i].args, r.status);
        ck_assert_msg(strstr(r.err, bad[i].says), "%s: said %s", bad[i].args, r.err);
        bin_result_free(&r);
    }
    bin_result r = run_bin("run ch13/rlhf-loop --simulate");
    ck_assert_int_eq(r.status, 0);
    ck_assert_ptr_nonnull(strstr(r.out, "SIMULATION"));
    ck_assert_ptr_nonnull(strstr(r.out, "clip fraction 0.00%"));
    bin_result_free(&r);
}
END_TEST

/* ch14/memory-timeline --measured: both placements, every role, the actor's training peak
 * above its generation one (its activations), and each total within 25 % of the formula. */
START_TEST(memory_timeline_measured)
{
    bin_result r = run_bin("run ch14/memory-timeline --measured");
    ck_assert_msg(r.status == 0, "%s", r.err);
    const char *pl[2] = {"colocated placement", "split placement"};
    for (int p = 0; p < 2; p++) {
        const char *s = strstr(r.out, pl[p]);
        ck_assert_ptr_nonnull(s);
        double v[6];
        const char *a = strstr(s, "\n  actor");
        ck_assert_ptr_nonnull(a);
        ck_assert_int_eq(sscanf(a, "\n  actor %lf %lf %lf %lf %lf %lf", &v[0], &v[1], &v[2],
                                &v[3], &v[4], &v[5]), 6);
        ck_assert_double_gt(v[3], v[0]);
        const char *t = strstr(s, "\n  total");
        ck_assert_ptr_nonnull(t);
        ck_assert_int_eq(sscanf(t, "\n  total %lf %lf %lf %lf %lf %lf", &v[0], &v[1], &v[2],
                                &v[3], &v[4], &v[5]), 6);
        ck_assert_msg(fabs(v[3] - v[5]) < 0.25 * v[5], "%s: train %g MiB, estimate %g", pl[p],
                      v[3], v[5]);
    }
    bin_result_free(&r);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("rlhf");
    TCase *tc = tcase_create("rlhf");
    tcase_set_timeout(tc, 240);
    tcase_add_test(tc, sums_rule);
    tcase_add_test(tc, grpo_advantages_formula);
    tcase_add_test(tc, grpo_loss_formula_and_gradient);
    tcase_add_test(tc, rm_loss_is_bradley_terry);
    tcase_add_test(tc, rm_gradient_vs_finite_differences);
    tcase_add_test(tc, rm_file_round_trip);
    tcase_add_test(tc, padding_is_never_read);
    tcase_add_test(tc, untrained_rm_is_at_chance);
    tcase_add_test(tc, ratio_is_one_before_the_first_update);
    tcase_add_test(tc, first_kl_is_zero_and_placement_counts);
    tcase_add_test(tc, short_run_raises_the_reward);
    tcase_add_test(tc, grpo_group_forks_and_draws_as_separate_requests);
    tcase_add_test(tc, split_and_colocated_agree_on_the_first_iteration);
    tcase_add_test(tc, flag_errors);
    tcase_add_test(tc, memory_timeline_measured);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
