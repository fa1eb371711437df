/* check.c - ch13-token-rewards, rank side (see ../harness.h). reward-calculator's golden
 * response, seeded responses in both modes against core/rl's rl_token_rewards, then the
 * adaptive KL controller against its formula (computed here in double). */
#include "harness.h"
#include "rl/rl.h"
#include "api.h"

#define RESPONSES 30
#define TMAX 200
#define CONTROLLER 500

static void golden(harness *h)
{
    h_case(h, "ch13/reward-calculator's response: beta 0.02, score 0.5, score on the last token");
    static const float lp[8] = {-1.2f, -0.8f, -1.5f, -0.9f, -1.1f, -1.0f, -0.7f, -1.3f};
    static const float rp[8] = {-1.0f, -1.0f, -1.2f, -1.0f, -1.0f, -1.1f, -1.0f, -1.0f};
    static const float want[8] = {0.0040f, -0.0040f, 0.0060f, -0.0020f, 0.0020f, -0.0020f,
                                  -0.0060f, 0.5060f};
    float r[8], kl[8];
    for (int t = 0; t < 8; t++)
        r[t] = kl[t] = NAN;             /* unwritten values show as nan */
    token_rewards(r, kl, lp, rp, 8, 0.02f, 0.5f, 0);
    h_returned(h, 0, "token_rewards");
    double sum = 0.0;
    for (int t = 0; t < 8; t++) {
        if (!h_close(want[t], r[t], 2e-6, 0) || !h_close(lp[t] - rp[t], kl[t], 1e-6, 0)) {
            h_fail(h, "token %d (log pi %.2f, log pi_ref %.2f): expected KL %+.4f, reward "
                   "%+.4f; got KL %+.6f, reward %+.6f", t, (double)lp[t], (double)rp[t],
                   (double)(lp[t] - rp[t]), (double)want[t], (double)kl[t], (double)r[t]);
            return;
        }
        sum += r[t];
    }
    if (fabs(sum - 0.504) > 1e-5)
        h_fail(h, "the rewards sum to %+.6f, expected score - beta * sum KL = +0.5040", sum);
}

static void response(harness *h, int k, mlsys_rng *g)
{
    static const float betas[] = {0.0f, 0.01f, 0.02f, 0.05f, 0.1f, 10.0f};
    int T = k < 2 ? k + 1 : 1 + (int)(mlsys_rng_u64(g) % TMAX);
    float beta = betas[mlsys_rng_u64(g) % 6], score = (float)mlsys_rng_normal(g);
    int spread = k % 3 == 2, with_kl = k % 4 != 3;
    h_case(h, "response %d: T = %d, beta %g, score %.4f, %s%s", k, T, (double)beta,
           (double)score, spread ? "score spread over the tokens" : "score on the last token",
           with_kl ? "" : ", kl = NULL");
    float lp[TMAX], rp[TMAX], want[TMAX], wkl[TMAX], got[TMAX + 1], gkl[TMAX + 1];
    for (int t = 0; t < T; t++) {
        lp[t] = (float)log(0.01 + 0.99 * mlsys_rng_uniform(g));
        rp[t] = lp[t] + (float)(0.3 * mlsys_rng_normal(g));
    }
    got[T] = gkl[T] = 4242.0f;
    rl_token_rewards(want, wkl, lp, rp, T, beta, score,
                     spread ? RL_REWARD_SPREAD : RL_REWARD_END);
    token_rewards(got, with_kl ? gkl : NULL, lp, rp, T, beta, score, spread);
    h_returned(h, 0, "token_rewards");
    for (int t = 0; t < T; t++) {
        if (with_kl && !h_close(wkl[t], gkl[t], 1e-6, 1e-6)) {
            h_fail(h, "token %d: KL expected %.7f (log pi %.4f - log pi_ref %.4f), got %.7f", t,
                   (double)wkl[t], (double)lp[t], (double)rp[t], (double)gkl[t]);
            return;
        }
        if (!h_close(want[t], got[t], 1e-6, 1e-6)) {
            h_fail(h, "token %d%s: reward expected %.7f, got %.7f", t,
                   t == T - 1 ? " (the last)" : "", (double)want[t], (double)got[t]);
            return;
        }
    }
    if (got[T] != 4242.0f || gkl[T] != 4242.0f) {
        h_fail(h, "written past the end (index %d of %d)", T, T);
        return;
    }
    if (beta == 0.0f && !spread) {
        for (int t = 0; t < T; t++)
            if (got[t] != (t == T - 1 ? score : 0.0f)) {
                h_fail(h, "beta = 0, token %d: the reward must be exactly %s, got %.9g", t,
                       t == T - 1 ? "the score" : "0", (double)got[t]);
                return;
            }
    }
}

static void controller(harness *h, mlsys_rng *g)
{
    h_case(h, "%d seeded (beta, kl, target) for the adaptive KL controller", CONTROLLER);
    for (int i = 0; i < CONTROLLER && !h->failed; i++) {
        float beta = (float)(0.001 + 0.2 * mlsys_rng_uniform(g));
        float target = (float)(0.5 + 10.0 * mlsys_rng_uniform(g));
        float kl = (float)(target * exp(0.6 * mlsys_rng_normal(g)));
        if (i % 50 == 0)
            kl = target;
        double e = ((double)kl - target) / target;
        e = e < -0.2 ? -0.2 : e > 0.2 ? 0.2 : e;
        double want = beta * (1.0 + 0.1 * e);
        float got = kl_controller(beta, kl, target);
        if (!h_close(want, got, 1e-7, 1e-5))
            h_fail(h, "update %d: beta %.5f, kl %.4f, target %.4f (error %+.3f, clipped %+.3f): "
                   "expected the next beta %.7f, got %.7f%s", i, (double)beta, (double)kl,
                   (double)target, ((double)kl - target) / target, e, want, (double)got,
                   (kl > target && got <= beta) ? " (kl above target: beta must rise)" :
                   (kl < target && got >= beta) ? " (kl below target: beta must fall)" : "");
    }
    h_returned(h, 0, "kl_controller");
}

static void ex_check_main(harness *h)
{
    golden(h);
    if (!h_case_end(h))
        return;
    mlsys_rng g;
    mlsys_rng_seed(&g, h->seed);
    for (int k = 0; k < RESPONSES; k++) {
        response(h, k, &g);
        if (!h_case_end(h))
            return;
    }
    controller(h, &g);
    h_case_end(h);
}
