/* check.c - ch12-gae, rank side (see ../harness.h). Hand values first (the curriculum's
 * returns and gae-visualizer's table), then seeded trajectories with episodes ending inside
 * them against core/rl's rl_gae and rl_discounted_returns; a guard after adv[T-1] catches
 * writes past the end. */
#include "harness.h"
#include "rl/rl.h"
#include "api.h"

#define TRAJ 40
#define TMAX 300
#define GUARD 4
#define GUARD_VALUE -4242.0f

/* Going backwards (the order the values are computed in), the first t where got differs
 * from want: fail naming it, since every earlier step inherits its error. label may be "". */
static int cmp_steps(harness *h, const char *what, const char *label, const float *want,
                     const float *got, int T, const uint8_t *done)
{
    for (int t = T - 1; t >= 0; t--)
        if (!h_close(want[t], got[t], 1e-4, 1e-4)) {
            char a[48], b[48];
            h_fail(h, "%s%s%s t = %d%s (going backwards from t = %d, the first wrong step): "
                   "expected %s, got %s", label, label[0] ? ", " : "", what, t,
                   done && done[t] ? ", where an episode ends" : "", T - 1,
                   h_num(a, sizeof a, want[t]), h_num(b, sizeof b, got[t]));
            return 0;
        }
    for (int g = 0; g < GUARD; g++)
        if (got[T + g] != GUARD_VALUE) {
            h_fail(h, "%s written past the end (index %d of %d)", what, T + g, T);
            return 0;
        }
    return 1;
}

static void hand_cases(harness *h)
{
    h_case(h, "hand values: returns of [1, 1, 1] and gae-visualizer's trajectory");
    float r3[3] = {1, 1, 1}, ret[3 + GUARD], want3[3] = {2.9701f, 1.99f, 1.0f};
    for (int g = 0; g < GUARD; g++)
        ret[3 + g] = GUARD_VALUE;
    discounted_returns(ret, r3, NULL, 0.0f, 3, 0.99f);
    if (!cmp_steps(h, "return G_t at", "rewards [1, 1, 1], gamma 0.99", want3, ret, 3, NULL))
        return;
    static const float r[10] = {0.1f, 0.1f, 0.2f, 0.1f, 0.5f, 0.1f, 0.3f, 0.1f, 0.1f, 1.0f};
    static const float v[10] = {0.8f, 0.7f, 0.7f, 0.6f, 0.5f, 0.4f, 0.4f, 0.3f, 0.2f, 0.1f};
    static const float a95[10] = {1.1925f, 1.2754f, 1.2572f, 1.2368f, 1.3204f, 0.9828f,
                                  0.9430f, 0.7931f, 0.8455f, 0.9000f};
    float adv[10 + GUARD];
    for (int g = 0; g < GUARD; g++)
        adv[10 + g] = GUARD_VALUE;
    gae(adv, r, v, NULL, 0.0f, 10, 0.99f, 0.95f);
    for (int t = 0; t < 10; t++)
        if (fabs(adv[t] - a95[t]) > 6e-4 || !isfinite(adv[t])) {
            char b[48];
            h_fail(h, "gae-visualizer's trajectory (gamma 0.99, lambda 0.95, V after the last "
                   "step 0), advantage A at t = %d: expected %.4f, got %s", t, (double)a95[t],
                   h_num(b, sizeof b, adv[t]));
            return;
        }
}

static void random_case(harness *h, int k, mlsys_rng *g)
{
    static const float gammas[] = {0.9f, 0.99f, 1.0f};
    static const float lambdas[] = {0.0f, 0.5f, 0.95f, 1.0f};
    int T = k < 3 ? k + 1 : 1 + (int)(mlsys_rng_u64(g) % TMAX);
    float gamma = gammas[mlsys_rng_u64(g) % 3], lambda = lambdas[mlsys_rng_u64(g) % 4];
    int use_done = k % 5 != 4;          /* every fifth: done = NULL */
    float r[TMAX], v[TMAX], last = (float)mlsys_rng_normal(g);
    uint8_t d[TMAX];
    int ends = 0;
    for (int t = 0; t < T; t++) {
        r[t] = mlsys_rng_uniform(g) < 0.3 ? (float)mlsys_rng_normal(g) : 0.0f;
        v[t] = (float)(2.0 * mlsys_rng_uniform(g) - 0.5);
        d[t] = use_done && mlsys_rng_uniform(g) < 0.06;
        ends += d[t];
    }
    char label[160];
    snprintf(label, sizeof label, "trajectory %d (T = %d, gamma %.2f, lambda %.2f, last_value "
             "%.3f, %s%d episode ends)", k, T, (double)gamma, (double)lambda, (double)last,
             use_done ? "" : "done = NULL, ", ends);
    h_case(h, "%s", label);
    float want[TMAX], got[TMAX + GUARD];
    for (int g2 = 0; g2 < GUARD; g2++)
        got[T + g2] = GUARD_VALUE;
    const uint8_t *dp = use_done ? d : NULL;
    rl_gae(want, r, v, dp, last, T, gamma, lambda);
    gae(got, r, v, dp, last, T, gamma, lambda);
    h_returned(h, 0, "gae");
    if (!cmp_steps(h, "advantage A at", "", want, got, T, dp))
        return;
    for (int g2 = 0; g2 < GUARD; g2++)
        got[T + g2] = GUARD_VALUE;
    rl_discounted_returns(want, r, dp, last, T, gamma);
    discounted_returns(got, r, dp, last, T, gamma);
    h_returned(h, 0, "discounted_returns");
    cmp_steps(h, "return G at", "", want, got, T, dp);
}

static void ex_check_main(harness *h)
{
    hand_cases(h);
    h_returned(h, 0, "gae");
    if (!h_case_end(h))
        return;
    mlsys_rng g;
    mlsys_rng_seed(&g, h->seed);
    for (int k = 0; k < TRAJ; k++) {
        random_case(h, k, &g);
        if (!h_case_end(h))
            return;
    }
}
