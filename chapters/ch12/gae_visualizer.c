/* gae_visualizer.c - ch12/gae-visualizer: generalized advantage estimation on a built-in
 * ten-step trajectory, for five values of λ side by side, computed by core/rl's rl_gae (the
 * seam a learner's exercise replaces). Beyond the original: the λ = 0 and λ = 1 identities
 * are checked and printed, the worked three-step example and the RLHF notes that the
 * original never reached (it crashed on an f-string) are printed, the weight (γλ)^10 is
 * the true one, and a --trajectory-length past the data is refused instead of capped. */
#include "../common/common.h"
#include "../../core/rl/rl.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define LAB_ID "ch12/gae-visualizer"
#define STEPS 10

static const float rewards[STEPS] = {0.1f, 0.1f, 0.2f, 0.1f, 0.5f, 0.1f, 0.3f, 0.1f, 0.1f, 1.0f};
static const float values[STEPS] = {0.8f, 0.7f, 0.7f, 0.6f, 0.5f, 0.4f, 0.4f, 0.3f, 0.2f, 0.1f};
static const float lambdas[] = {0.0f, 0.5f, 0.9f, 0.95f, 1.0f};
#define NLAMBDA ((int)(sizeof lambdas / sizeof lambdas[0]))

static const lab_flag gae_flags[] = {
    {"gamma", 0, FLAG_DOUBLE, "0.99", NULL, 0, 0, "discount factor γ, from 0 to 1"},
    {"trajectory-length", 0, FLAG_INT, "10", NULL, 1, STEPS,
     "steps of the built-in trajectory to use (it has 10)"},
    {NULL, 0, 0, NULL, NULL, 0, 0, NULL}
};

/* Columns a UTF-8 string takes (its lead bytes): printf pads by bytes, and λ is two. */
static int columns(const char *s)
{
    int n = 0;
    for (; *s; s++)
        n += ((unsigned char)*s & 0xC0) != 0x80;
    return n;
}

/* │ text, padded to the inside width │ */
static void panel_line(const char *text, int width)
{
    printf("│ %s%*s│\n", text, width - 1 - columns(text), "");
}

/* A box of the given inside width: a title, a rule, the lines. */
static void panel(const char *title, const char *const *lines, int width)
{
    char bar[512];
    common_rule(bar, sizeof bar, "─", width);
    printf("┌%s┐\n", bar);
    panel_line(title, width);
    printf("├%s┤\n", bar);
    for (int i = 0; lines[i]; i++)
        panel_line(lines[i], width);
    printf("└%s┘\n", bar);
}

static int gae_main(const lab_args *a)
{
    double gamma = lab_arg_double(a, "gamma");
    int T = (int)lab_arg_int(a, "trajectory-length");
    if (gamma < 0.0 || gamma > 1.0) {
        fprintf(stderr, "mlsys-lab: %s: --gamma must be between 0 and 1, got %g\n", LAB_ID,
                gamma);
        return 2;
    }
    float g = (float)gamma, delta[STEPS], adv[NLAMBDA][STEPS], ret[STEPS];
    char rule[512];
    common_box(stdout, 68, "GAE visualizer");
    printf("\nGeneralized advantage estimation on a %d-step trajectory, γ = %g\n", T, gamma);
    printf("(V after the last step is taken as 0: the trajectory ends there)\n");

    /* δ is GAE with λ = 0 */
    rl_gae(delta, rewards, values, NULL, 0.0f, T, g, 0.0f);
    for (int k = 0; k < NLAMBDA; k++)
        rl_gae(adv[k], rewards, values, NULL, 0.0f, T, g, lambdas[k]);
    rl_discounted_returns(ret, rewards, NULL, 0.0f, T, g);

    common_rule(rule, sizeof rule, "=", 60);
    printf("\n%s\n TRAJECTORY\n%s\n", rule, rule);
    printf("%6s %8s %8s %13s\n", "step", "reward", "value", "TD error δ");   /* δ: 2 bytes */
    for (int t = 0; t < T; t++)
        printf("%6d %8.2f %8.2f %12.4f\n", t, rewards[t], values[t], delta[t]);
    printf("\nδ_t = r_t + γ·V(s_{t+1}) − V(s_t): how much better step t went than the critic "
           "expected.\n");

    printf("\n%s\n GAE ADVANTAGES A_t FOR EACH λ\n%s\n", rule, rule);
    printf("%6s", "step");
    for (int k = 0; k < NLAMBDA; k++)
        printf("   λ=%-5.2f", lambdas[k]);
    printf("\n");
    for (int t = 0; t < T; t++) {
        printf("%6d", t);
        for (int k = 0; k < NLAMBDA; k++)
            printf(" %+9.4f", adv[k][t]);
        printf("\n");
    }
    /* the two ends of the family, checked on the numbers just printed */
    double d0 = 0.0, d1 = 0.0;
    for (int t = 0; t < T; t++) {
        d0 = fmax(d0, fabs((double)adv[0][t] - delta[t]));
        d1 = fmax(d1, fabs((double)adv[NLAMBDA - 1][t] - ((double)ret[t] - values[t])));
    }
    printf("\nλ = 0 is the one-step TD error δ_t:            %s (largest difference %.1e)\n",
           d0 < 1e-6 ? "✓" : "✗", d0);
    printf("λ = 1 is the discounted return minus V(s_t):  %s (largest difference %.1e)\n",
           d1 < 1e-5 ? "✓" : "✗", d1);
    printf("The last step has nothing after it: A_%d = δ_%d = %.4f for every λ.\n", T - 1,
           T - 1, delta[T - 1]);

    printf("\n%s\n BIAS AND VARIANCE\n%s\n\n", rule, rule);
    const char *l0[] = {"A_t = δ_t: one step of real reward, then the critic's guess.",
                        "High bias (the critic may be wrong), low variance.", NULL};
    const char *l1[] = {"A_t = G_t − V(s_t): every real reward to the end.",
                        "No bias from the critic, high variance (all the noise of the",
                        "rest of the episode).", NULL};
    const char *l95[] = {"A_t = Σ_k (γλ)^k·δ_{t+k}: an exponentially weighted mix of the",
                         "one-step, two-step, ... estimates. The usual balance.", NULL};
    panel("λ = 0: one-step TD", l0, 66);
    panel("λ = 1: Monte Carlo", l1, 66);
    panel("λ = 0.95: GAE", l95, 66);
    double gl = gamma * 0.95;
    printf("\nWeight of δ_{t+k} in A_t, (γλ)^k with γλ = %.4f:\n", gl);
    for (int k = 0; k <= 10; k++)
        printf("  k = %2d: %.2f\n", k, pow(gl, k));
    printf("  (after 10 steps a TD error still counts %.0f%%; after %d steps under 10%%)\n",
           100.0 * pow(gl, 10), gl > 0 && gl < 1 ? (int)ceil(log(0.1) / log(gl)) : 0);

    printf("\n%s\n A WORKED EXAMPLE (3 steps, γ = 0.99, λ = 0.95)\n%s\n", rule, rule);
    const float r3[3] = {0.1f, 0.2f, 1.0f}, v3[3] = {0.5f, 0.4f, 0.2f};
    float d3[3], a3[3];
    rl_gae(d3, r3, v3, NULL, 0.0f, 3, 0.99f, 0.0f);
    rl_gae(a3, r3, v3, NULL, 0.0f, 3, 0.99f, 0.95f);
    printf("rewards %.1f, %.1f, %.1f; values %.1f, %.1f, %.1f\n\n", r3[0], r3[1], r3[2], v3[0],
           v3[1], v3[2]);
    printf("δ_0 = 0.1 + 0.99·0.4 − 0.5 = %+.4f\n", d3[0]);
    printf("δ_1 = 0.2 + 0.99·0.2 − 0.4 = %+.4f\n", d3[1]);
    printf("δ_2 = 1.0 + 0       − 0.2 = %+.4f   (the episode ends: no V after it)\n", d3[2]);
    printf("\nbackwards, A_t = δ_t + γλ·A_{t+1} with γλ = 0.9405:\n");
    printf("A_2 = δ_2                    = %+.4f\n", a3[2]);
    printf("A_1 = δ_1 + 0.9405·A_2       = %+.4f\n", a3[1]);
    printf("A_0 = δ_0 + 0.9405·A_1       = %+.4f\n", a3[0]);
    printf("\nStep 0 earned almost nothing itself, yet its advantage is large: the final "
           "reward\nreaches it attenuated by (γλ)² = %.4f.\n", 0.9405 * 0.9405);

    printf("\n%s\n GAE IN RLHF\n%s\n", rule, rule);
    printf("• One trajectory is one generated response; a state is the prompt plus the\n"
           "  tokens so far, an action is the next token.\n"
           "• The reward usually comes once, at the end (the reward model's score), plus a\n"
           "  small KL penalty on every token (chapter 13).\n"
           "• GAE carries that final reward back to the tokens that led to it; λ sets how\n"
           "  far it reaches. Typical: γ = 0.99 or 1.0, λ = 0.95.\n"
           "• The critic predicts the expected reward from each prefix; it may share the\n"
           "  actor's layers (a value head) or be a model of its own.\n"
           "• PPO then weights each token's log-probability by its advantage, clipped.\n");
    return 0;
}

const lab ch12_gae_visualizer_lab = {
    .id = LAB_ID,
    .title = "GAE visualizer",
    .summary = "advantages for λ = 0 ... 1 on a 10-step trajectory, computed backwards",
    .flags = gae_flags,
    .main = gae_main,
    .view = "log",
};
