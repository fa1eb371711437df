/* reward_calculator.c - ch13/reward-calculator: the per-token reward of PPO-based RLHF,
 * r_t = -β·(log π(x_t) - log π_ref(x_t)) plus the reward model's score on the last token,
 * on the original's built-in 8-token response, then a sweep of β and four KL scenarios.
 * The rewards come from core/rl's rl_token_rewards (the seam a learner's exercise
 * replaces). Beyond the original: the summary's KL penalty carries one sign convention, not
 * two; the non-negative k3 estimate of the same KL beside the log-ratios' sum; --spread
 * shows the score shared over the tokens (same total); and a second β sweep runs on a
 * response that really drifted (positive KL), where the original's example, whose KL is
 * negative, turns the "penalty" into a bonus. */
#include "../common/common.h"
#include "../../core/rl/rl.h"
#include "../../core/nn/nn.h"
#include <math.h>
#include <string.h>

#define LAB_ID "ch13/reward-calculator"

static const lab_flag rc_flags[] = {
    {"kl-coef", 0, FLAG_DOUBLE, "0.02", NULL, 0, 0, "β, the weight of the KL penalty (>= 0)"},
    {"rm-score", 0, FLAG_DOUBLE, "0.5", NULL, 0, 0, "the reward model's score of the response"},
    {"spread", 0, FLAG_BOOL, NULL, NULL, 0, 0,
     "share the score over all tokens instead of putting it on the last one"},
    {NULL, 0, 0, NULL, NULL, 0, 0, NULL}
};

static const float resp_actor[8] = {-1.2f, -0.8f, -1.5f, -0.9f, -1.1f, -1.0f, -0.7f, -1.3f};
static const float resp_ref[8] = {-1.0f, -1.0f, -1.2f, -1.0f, -1.0f, -1.1f, -1.0f, -1.0f};

/* the original's labels: how much of the score is left after the penalty */
static const char *effect(double net, double rm)
{
    if (net > 0.8 * rm)
        return "weak";
    if (net > 0.0)
        return "moderate";
    if (net > -0.5)
        return "strong";
    return "overwhelming";
}

/* Print s right-aligned in width columns after one space (printf counts bytes, and β, π,
 * − and · take two or three). */
static void col(const char *s, int width)
{
    int n = 0;
    for (const char *p = s; *p; p++)
        n += ((unsigned char)*p & 0xC0) != 0x80;
    printf("%*s%s", width - n > 0 ? width - n : 0, "", s);
}

static double sum(const float *v, int n)
{
    double s = 0.0;
    for (int i = 0; i < n; i++)
        s += v[i];
    return s;
}

static void sweep(const float *actor, const float *ref, int T, double rm, const double *betas,
                  int nb)
{
    float kl[16], r[16];
    col("β", 8);
    col("penalty β·ΣKL", 14);
    col("net reward", 13);
    printf("  effect\n");
    for (int i = 0; i < nb; i++) {
        rl_token_rewards(r, kl, actor, ref, T, (float)betas[i], (float)rm, RL_REWARD_END);
        double net = sum(r, T), pen = betas[i] * sum(kl, T);
        printf("%8.2f %+14.4f %+13.4f  %s\n", betas[i], pen, net, effect(net, rm));
    }
}

static int rc_main(const lab_args *a)
{
    double beta = lab_arg_double(a, "kl-coef"), rm = lab_arg_double(a, "rm-score");
    int spread = lab_arg_bool(a, "spread");
    if (beta < 0.0) {
        fprintf(stderr, "mlsys-lab: %s: --kl-coef cannot be negative, got %g\n", LAB_ID, beta);
        return 2;
    }
    rl_reward_mode mode = spread ? RL_REWARD_SPREAD : RL_REWARD_END;
    char rule[512];
    common_rule(rule, sizeof rule, "=", 72);
    common_box(stdout, 68, "RLHF reward calculator");
    printf("\nConfiguration: β (KL coefficient) %g, reward-model score %+.4f, response of 8 "
           "tokens,\nscore %s\n", beta, rm, spread ? "shared over every token (--spread)"
                                                    : "on the last token");

    float kl[8], r[8];
    rl_token_rewards(r, kl, resp_actor, resp_ref, 8, (float)beta, (float)rm, mode);
    printf("\n%s\n PER-TOKEN REWARDS: r_t = −β·KL_t (+ the score)\n%s\n", rule, rule);
    const char *head[] = {"token", "log π", "log π_ref", "KL_t", "−β·KL_t", "score", "r_t"};
    const int width[] = {5, 10, 10, 10, 11, 10, 10};
    for (int i = 0; i < 7; i++)
        col(head[i], width[i]);
    printf("\n");
    for (int t = 0; t < 8; t++) {
        double part = spread ? rm / 8 : (t == 7 ? rm : 0.0);
        printf("%5d %+9.4f %+9.4f %+9.4f %+10.4f %+9.4f %+9.4f\n", t, resp_actor[t],
               resp_ref[t], kl[t], -beta * kl[t], part, r[t]);
    }
    double skl = sum(kl, 8), sr = sum(r, 8);
    printf("%5s %9s %9s %+9.4f %+10.4f %+9.4f %+9.4f\n", "total", "", "", skl, -beta * skl, rm,
           sr);
    printf("\nKL_t = log π(x_t) − log π_ref(x_t), the log-ratio of the token the actor "
           "sampled:\nits average over samples is KL(π ‖ π_ref), but one token's can be "
           "negative.\n");

    printf("\n%s\n SUMMARY\n%s\n", rule, rule);
    printf("reward-model score       %+.4f\n", rm);
    printf("total KL ΣKL_t           %+.4f\n", skl);
    printf("KL penalty β·ΣKL_t       %+.4f   (subtracted from the score)\n", beta * skl);
    printf("net reward Σr_t          %+.4f   = %+.4f − (%+.4f)\n", sr, rm, beta * skl);
    /* the same divergence by Schulman's k3 = e^(-d) - 1 + d, d = the log-ratio: unbiased
     * too, and never negative (core/nn's estimator) */
    float k3[8];
    nn_kl_forward(k3, resp_actor, resp_ref, NULL, 8, NN_KL_K3);
    printf("KL by the k3 estimator   %+.4f   (e^−d − 1 + d per token: never negative)\n",
           sum(k3, 8));
    printf("\nThe score arrives %s; the KL part, %+.4f in all, is spread over the\n"
           "tokens that caused it. A negative total KL (this response is, token for token, "
           "less\nlikely under the actor than under the reference) turns the penalty into a "
           "bonus.\n", spread ? "an eighth on every token" : "on the last token", -beta * skl);

    printf("\n%s\n SWEEPING β (5 tokens, score 0.5)\n%s\n", rule, rule);
    const float sa[5] = {-1.0f, -1.2f, -0.8f, -1.5f, -0.9f}, sf[5] = {-1.1f, -1.0f, -1.0f,
                                                                     -1.2f, -1.0f};
    const float ca[3] = {-0.2f, -0.3f, -0.2f}, cf[3] = {-1.0f, -1.0f, -1.0f};
    printf("The original's example, ΣKL = %+.1f (negative: every β adds to the reward):\n\n",
           sum(sa, 5) - sum(sf, 5));
    const double betas[] = {0.0, 0.01, 0.02, 0.05, 0.1, 0.5};
    const double more[] = {0.0, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5};
    sweep(sa, sf, 5, 0.5, betas, 6);
    printf("\nA response more confident than the reference (ΣKL = %+.1f), where β bites:\n\n",
           sum(ca, 3) - sum(cf, 3));
    sweep(ca, cf, 3, 0.5, more, 7);
    printf("\nβ ≈ 0: no anchor, the actor may drift to whatever games the reward model.\n"
           "β ≈ 0.01-0.05: the usual range. β ≈ 0.1: strong regularisation.\n"
           "β ≈ 0.5: the KL term dominates and the score barely matters.\n");

    printf("\n%s\n KL SCENARIOS (β = 0.02, score 0.5, three tokens)\n%s\n", rule, rule);
    struct { const char *name; float a[3], f[3]; } sc[] = {
        {"low divergence", {-1.0f, -1.1f, -0.9f}, {-1.0f, -1.0f, -1.0f}},
        {"high divergence", {-0.5f, -2.0f, -0.3f}, {-1.5f, -0.8f, -1.2f}},
        {"more confident", {-0.2f, -0.3f, -0.2f}, {-1.0f, -1.0f, -1.0f}},
        {"less confident", {-2.0f, -2.5f, -2.0f}, {-1.0f, -1.0f, -1.0f}},
    };
    for (size_t i = 0; i < sizeof sc / sizeof sc[0]; i++) {
        float kl3[3], r3[3];
        rl_token_rewards(r3, kl3, sc[i].a, sc[i].f, 3, 0.02f, 0.5f, RL_REWARD_END);
        double s = sum(kl3, 3);
        printf("\n%s\n", sc[i].name);
        printf("  actor     %+.2f %+.2f %+.2f\n", sc[i].a[0], sc[i].a[1], sc[i].a[2]);
        printf("  reference %+.2f %+.2f %+.2f\n", sc[i].f[0], sc[i].f[1], sc[i].f[2]);
        printf("  KL_t      %+.2f %+.2f %+.2f   ΣKL %+.4f   penalty %+.4f   net %.4f\n", kl3[0],
               kl3[1], kl3[2], s, 0.02 * s, sum(r3, 3));
    }

    printf("\n%s\n WHAT TO TAKE AWAY\n%s\n", rule, rule);
    printf("1. reward = score − β·KL: the KL term keeps the actor near the reference, so it "
           "cannot\n   win by text that fools the reward model.\n"
           "2. The KL is paid per token; the score usually arrives once, at the end, and GAE\n"
           "   carries it back (chapter 12).\n"
           "3. β matters: too low invites reward hacking, too high stops learning.\n"
           "4. Negative rewards are fine: PPO uses advantages, which are relative.\n"
           "5. The sampled token's log-ratio is an estimate; averaged over many tokens it is\n"
           "   the KL, but any single one can be negative.\n");
    return 0;
}

const lab ch13_reward_calculator_lab = {
    .id = LAB_ID,
    .title = "Reward calculator",
    .summary = "per-token RLHF rewards: the score on the last token, −β·KL on every token",
    .flags = rc_flags,
    .main = rc_main,
    .view = "log",
};
