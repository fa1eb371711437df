/* test_rl_promises.c - numbers of the RL code that other tests let slip: PPO's clipped value
 * loss and its gradient against hand goldens (the pessimistic max, not the min); the returns
 * PPO trains its critic on are advantages + values (with gamma 0 and a constant critic the
 * first value loss is known exactly); the clip fraction counts only active clips (none at
 * r = 1, even for eps 0); and after an RLHF update the KL to the reference is above 0 (the
 * reference's log-probabilities really come from the frozen reference). */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "../../core/rl/rl.h"
#include "../../core/rl/rlhf.h"
#include "../../core/nn/nn.h"

/* ½·max((v - R)², (v_old + clip(v - v_old, ±c) - R)²), by hand:
 *   v 1,   v_old 0,   R 2: max(1, 1.8²) = 3.24 -> 1.62; the clip holds: dL/dv = 0
 *   v 0.1, v_old 0,   R 2: both (-1.9)²           -> 1.805; dL/dv = -1.9
 *   v 3,   v_old 2.5, R 2: max(1, 0.7²) = 1      -> 0.5;  dL/dv = 1 (the unclipped one)
 *   v -1,  v_old 0,   R 1: max(4, 1.2²) = 4      -> 2;    dL/dv = -2 */
START_TEST(clipped_value_loss_goldens)
{
    const float v[4] = {1.0f, 0.1f, 3.0f, -1.0f}, vold[4] = {0.0f, 0.0f, 2.5f, 0.0f};
    const float ret[4] = {2.0f, 2.0f, 2.0f, 1.0f};
    const double L1[4] = {1.62, 1.805, 0.5, 2.0}, d1[4] = {0.0, -1.9, 1.0, -2.0};
    float dv[4];
    for (int i = 0; i < 4; i++) {
        double L = rl_value_loss(dv, v + i, vold + i, ret + i, 1, 0.2f);
        ck_assert_msg(fabs(L - L1[i]) < 1e-6, "sample %d: loss %.9g, expected %g", i, L, L1[i]);
        ck_assert_msg(fabs(dv[0] - d1[i]) < 1e-6, "sample %d: dL/dv %.9g, expected %g", i,
                      (double)dv[0], d1[i]);
    }
    /* together: the mean of the four, each gradient over n */
    double L = rl_value_loss(dv, v, vold, ret, 4, 0.2f);
    ck_assert(fabs(L - (1.62 + 1.805 + 0.5 + 2.0) / 4) < 1e-6);
    for (int i = 0; i < 4; i++)
        ck_assert(fabs(dv[i] - d1[i] / 4) < 1e-6);
    /* without the clip: ½(v - R)², whatever v_old */
    L = rl_value_loss(dv, v, NULL, ret, 1, 0.0f);
    ck_assert(fabs(L - 0.5) < 1e-9 && fabs(dv[0] + 1.0) < 1e-7);
}
END_TEST

/* The clip fraction counts the samples whose clip is active, |r - 1| > eps: at r = 1 the
 * two terms of the objective are the same whatever eps, so even eps = 0 clips nothing. */
START_TEST(clip_fraction_counts_active_clips)
{
    const float old[4] = {-1.0f, -2.0f, -0.5f, -3.0f};
    float lp[4];
    double clipfrac = -1, kl = -1;
    const float adv[4] = {1.0f, -1.0f, 0.5f, 2.0f};
    memcpy(lp, old, sizeof lp);
    rl_ppo_policy_loss(NULL, lp, old, adv, 4, 0.0f, &clipfrac, &kl);
    ck_assert_msg(clipfrac == 0.0, "r = 1 everywhere, eps 0: clip fraction %g", clipfrac);
    ck_assert(kl == 0.0);
    /* r = e^0, e^0.1, e^0.3, e^-0.4 against eps 0.2: the last two clip */
    const float d[4] = {0.0f, 0.1f, 0.3f, -0.4f};
    for (int i = 0; i < 4; i++)
        lp[i] = old[i] + d[i];
    rl_ppo_policy_loss(NULL, lp, old, adv, 4, 0.2f, &clipfrac, &kl);
    ck_assert_msg(clipfrac == 0.5, "clip fraction %g, expected 2 of 4", clipfrac);
}
END_TEST

/* gamma 0: delta_t = r_t - V(s_t), so A_t = 1 - c for CartPole's reward of 1 on every step
 * and a critic that says c everywhere; returns = A + V = 1. The first (and only) minibatch's
 * value loss, before any update, is then ½(c - 1)² exactly: 2 for c = 3. Returns taken as
 * the advantages alone would give ½(c - (1 - c))² = 12.5. */
START_TEST(returns_are_advantages_plus_values)
{
    rl_ppo_config k;
    rl_ppo_defaults(&k);
    k.num_envs = 4;
    k.num_steps = 32;
    k.total_steps = 128;
    k.update_epochs = 1;
    k.num_minibatches = 1;
    k.gamma = 0.0f;
    char err[256];
    for (int clip = 0; clip < 2; clip++) {
        k.clip_vloss = clip;
        rl_ppo *p = rl_ppo_create(&k, NULL, err, sizeof err);
        ck_assert_msg(p, "%s", err);
        /* the critic's last layer: no weights, bias 3 */
        rl_agent *ag = (rl_agent *)rl_ppo_agent(p);
        nn_tensor *w = &ag->p.t[ag->t[10]], *b = &ag->p.t[ag->t[11]];
        memset(w->data, 0, w->numel * sizeof(float));
        b->data[0] = 3.0f;
        rl_ppo_stats st;
        ck_assert_int_eq(rl_ppo_iterate(p, &st), 0);
        ck_assert_msg(fabs(st.value_loss - 2.0) < 1e-6, "clip_vloss %d: the first value loss is "
                      "%.9g, expected 0.5 x (3 - 1)^2 = 2", clip, st.value_loss);
        rl_ppo_free(p);
    }
}
END_TEST

/* The first iteration's KL is 0 (the actor is the reference); after an update the actor has
 * moved and the reference has not: the mean Σ_t (log π - log π_ref) of the next iterations
 * is above 0. The reward model gets a head that scores (the initial one is zero: every
 * reward 0, nothing to learn). */
START_TEST(rlhf_kl_positive_after_an_update)
{
    llm_config c, dc;
    llm_weights w, dw;
    llm_tokenizer t;
    char err[512];
    ck_assert_msg(llm_checkpoint_read("assets/models/model.bin", &c, &w, err, sizeof err) == 0,
                  "%s", err);
    ck_assert_msg(llm_checkpoint_read("assets/models/draft.bin", &dc, &dw, err, sizeof err) == 0,
                  "%s", err);
    ck_assert_msg(llm_tokfile_read("assets/models/tokenizer.bin", c.vocab_size, &t, err,
                                   sizeof err) == 0, "%s", err);
    rl_rm rm;
    ck_assert_int_eq(rl_rm_init(&rm, &dc, &dw, err, sizeof err), 0);
    /* a head that scores (the initial one is zero: every reward 0, nothing to learn) */
    mlsys_rng r;
    mlsys_rng_seed(&r, 7);
    nn_init_normal(rm.head, (size_t)dc.dim + 1, 0.0f, 1.0f, &r);
    rl_rlhf_config k;
    rl_rlhf_defaults(&k);
    k.prompts = 8;
    k.lr = 1e-3f;
    rl_rlhf *h = rl_rlhf_create(&k, NULL, &c, &w, &rm, &t, err, sizeof err);
    ck_assert_msg(h, "%s", err);
    rl_rlhf_stats st;
    ck_assert_msg(rl_rlhf_iterate(h, &st, err, sizeof err) == 0, "%s", err);
    ck_assert_double_eq(st.kl, 0.0);
    double kl = 0;
    for (int it = 0; it < 2; it++) {
        ck_assert_msg(rl_rlhf_iterate(h, &st, err, sizeof err) == 0, "%s", err);
        printf("rlhf: iteration %d, KL to the reference %.6g over %d tokens\n", it + 2, st.kl,
               st.tokens);
        kl += st.kl;
    }
    ck_assert_msg(kl > 0, "the KL after two updates is %g", kl);
    rl_rlhf_free(h);
    rl_rm_free(&rm);
    llm_weights_free(&w);
    llm_weights_free(&dw);
    llm_tokenizer_free(&t);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("rl_promises");
    TCase *tc = tcase_create("rl");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, clipped_value_loss_goldens);
    tcase_add_test(tc, clip_fraction_counts_active_clips);
    tcase_add_test(tc, returns_are_advantages_plus_values);
    tcase_add_test(tc, rlhf_kl_positive_after_an_update);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
