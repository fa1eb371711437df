/* test_rl.c - core/rl against independent references: CartPole's step against the equations
 * of motion written out again here, its limits (12°, 2.4, 500 steps) and the toy
 * environment's return = steps - 1; GAE against the curriculum's golden table and the
 * λ = 0 (one-step TD) and λ = 1 (return minus value) identities and the explicit sum; the
 * PPO term's goldens (§12.4); every gradient (policy, value, log-softmax and entropy, the
 * whole agent's loss) against central finite differences; the per-token rewards of §13.2;
 * and the trainer: deterministic per seed, the same on 1, 2 and 4 ranks up to rounding, and
 * a short run that learns. */
#include "../../core/rl/rl.h"
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

/* ---- CartPole ---- */

START_TEST(cartpole_step_matches_physics)
{
    mlsys_rng r;
    mlsys_rng_seed(&r, 5);
    rl_cartpole e;
    for (int trial = 0; trial < 50; trial++) {
        rl_cartpole_reset(&e, RL_CARTPOLE_V1, &r);
        ck_assert(fabs(e.x) <= 0.05 && fabs(e.x_dot) <= 0.05 && fabs(e.theta) <= 0.05 &&
                  fabs(e.theta_dot) <= 0.05 && e.steps == 0);
        /* put it somewhere interesting, then one step each way */
        e.theta = 0.15 * (2 * mlsys_rng_uniform(&r) - 1);
        e.theta_dot = 2 * mlsys_rng_uniform(&r) - 1;
        e.x_dot = 2 * mlsys_rng_uniform(&r) - 1;
        for (int a = 0; a < 2; a++) {
            rl_cartpole s = e;
            /* Lagrangian of a cart (M = 1) and a uniform rod (m = 0.1, half-length l = 0.5):
             * solve the 2x2 system for (ẍ, θ̈) directly instead of the substitution form */
            double F = a ? 10.0 : -10.0, M = 1.0, m = 0.1, l = 0.5, g = 9.8;
            double th = s.theta, w = s.theta_dot, c = cos(th), sn = sin(th);
            /* (M+m) ẍ + m l c θ̈ = F + m l w² sn ;  c ẍ + (4/3) l θ̈ = g sn */
            double a11 = M + m, a12 = m * l * c, b1 = F + m * l * w * w * sn;
            double a21 = c, a22 = 4.0 / 3.0 * l, b2 = g * sn;
            double det = a11 * a22 - a12 * a21;
            double xacc = (b1 * a22 - a12 * b2) / det, thacc = (a11 * b2 - a21 * b1) / det;
            int term, trunc;
            float rew = rl_cartpole_step(&s, a, &r, &term, &trunc);
            ck_assert(rew == 1.0f);
            ck_assert(fabs(s.x - (e.x + 0.02 * e.x_dot)) < 1e-12);
            ck_assert(fabs(s.theta - (e.theta + 0.02 * e.theta_dot)) < 1e-12);
            ck_assert_msg(fabs(s.x_dot - (e.x_dot + 0.02 * xacc)) < 1e-12, "x_dot %g vs %g",
                          s.x_dot, e.x_dot + 0.02 * xacc);
            ck_assert_msg(fabs(s.theta_dot - (e.theta_dot + 0.02 * thacc)) < 1e-12,
                          "theta_dot %g vs %g", s.theta_dot, e.theta_dot + 0.02 * thacc);
            ck_assert_int_eq(s.steps, 1);
        }
    }
}
END_TEST

START_TEST(cartpole_limits)
{
    mlsys_rng r;
    mlsys_rng_seed(&r, 1);
    rl_cartpole e;
    int term, trunc;
    /* past 12° = 0.20944 rad ends it, just inside does not */
    rl_cartpole_reset(&e, RL_CARTPOLE_V1, &r);
    e.x = e.x_dot = e.theta_dot = 0;
    e.theta = 0.2094;
    rl_cartpole_step(&e, 1, &r, &term, &trunc);     /* θ moves by 0.02·θ̇ = 0 this step */
    ck_assert(!term);
    e.theta = -0.2095;
    e.theta_dot = 0;
    ck_assert(rl_cartpole_step(&e, 1, &r, &term, &trunc) == 1.0f);
    ck_assert(term && !trunc);
    rl_cartpole_reset(&e, RL_CARTPOLE_V1, &r);
    e.x = 2.39;
    e.x_dot = 1.0;                                  /* x = 2.41 after the step */
    rl_cartpole_step(&e, 0, &r, &term, &trunc);
    ck_assert(term);
    /* a hand-written balancing policy lasts to the time limit: truncated at step 500 */
    rl_cartpole_reset(&e, RL_CARTPOLE_V1, &r);
    int steps = 0;
    float ret = 0;
    for (;;) {
        int a = (e.theta + 0.3 * e.theta_dot + 0.01 * e.x + 0.1 * e.x_dot) > 0;
        ret += rl_cartpole_step(&e, a, &r, &term, &trunc);
        steps++;
        if (term || trunc)
            break;
    }
    ck_assert_int_eq(steps, 500);
    ck_assert(trunc && !term && ret == 500.0f);
    /* always pushing right falls over within a few dozen steps, paying 1 on the last step */
    rl_cartpole_reset(&e, RL_CARTPOLE_V1, &r);
    steps = 0;
    ret = 0;
    do {
        ret += rl_cartpole_step(&e, 1, &r, &term, &trunc);
        steps++;
    } while (!term && !trunc);
    ck_assert(term && steps < 60 && ret == (float)steps);
}
END_TEST

START_TEST(toy_env_returns_steps_minus_one)
{
    mlsys_rng r;
    mlsys_rng_seed(&r, 2);
    rl_cartpole e;
    long total = 0;
    for (int ep = 0; ep < 200; ep++) {
        rl_cartpole_reset(&e, RL_CARTPOLE_TOY, &r);
        int term, trunc, steps = 0;
        float ret = 0;
        do {
            int a = mlsys_rng_uniform(&r) < 0.5;
            ret += rl_cartpole_step(&e, a, &r, &term, &trunc);
            steps++;
        } while (!term);
        ck_assert(!trunc && steps <= 201);
        ck_assert_msg(ret == (float)(steps - 1), "return %g after %d steps", ret, steps);
        total += steps;
    }
    /* the tutorial's episodes are short: tens of steps */
    ck_assert(total / 200 > 3 && total / 200 < 60);
}
END_TEST

/* ---- GAE ---- */

static const float traj_r[10] = {0.1f, 0.1f, 0.2f, 0.1f, 0.5f, 0.1f, 0.3f, 0.1f, 0.1f, 1.0f};
static const float traj_v[10] = {0.8f, 0.7f, 0.7f, 0.6f, 0.5f, 0.4f, 0.4f, 0.3f, 0.2f, 0.1f};

START_TEST(gae_golden_table)
{
    /* §12.2, γ = 0.99: columns λ = 0, 0.5, 0.9, 0.95, 1 */
    static const double want[10][5] = {
        {-0.0070, 0.0926, 0.8662, 1.1925, 1.6489}, {0.0930, 0.2012, 0.9801, 1.2754, 1.6726},
        {0.0940, 0.2185, 0.9956, 1.2572, 1.5956}, {-0.0050, 0.2515, 1.0119, 1.2368, 1.5167},
        {0.3960, 0.5182, 1.1413, 1.3204, 1.5371}, {0.0960, 0.2469, 0.8365, 0.9828, 1.1526},
        {0.1970, 0.3049, 0.8310, 0.9430, 1.0673}, {-0.0020, 0.2180, 0.7116, 0.7931, 0.8791},
        {-0.0010, 0.4445, 0.8009, 0.8455, 0.8900}, {0.9000, 0.9000, 0.9000, 0.9000, 0.9000},
    };
    const float lams[5] = {0.0f, 0.5f, 0.9f, 0.95f, 1.0f};
    float adv[10];
    for (int k = 0; k < 5; k++) {
        rl_gae(adv, traj_r, traj_v, NULL, 0.0f, 10, 0.99f, lams[k]);
        for (int t = 0; t < 10; t++)
            ck_assert_msg(fabs(adv[t] - want[t][k]) < 5.01e-5, "λ=%g t=%d: %.6f, want %.4f",
                          lams[k], t, adv[t], want[t][k]);
    }
    /* γ = 1, the first 5 steps: λ = 0.5 and λ = 1 columns */
    const double half[5] = {0.0750, 0.1500, 0.1000, 0, 0}, one[5] = {0.2, 0.2, 0.1, 0, 0};
    float a5[5];
    rl_gae(a5, traj_r, traj_v, NULL, 0.0f, 5, 1.0f, 0.5f);
    for (int t = 0; t < 5; t++)
        ck_assert(fabs(a5[t] - half[t]) < 5e-5);
    rl_gae(a5, traj_r, traj_v, NULL, 0.0f, 5, 1.0f, 1.0f);
    for (int t = 0; t < 5; t++)
        ck_assert(fabs(a5[t] - one[t]) < 5e-5);
    /* the worked example: r = (0.1, 0.2, 1.0), V = (0.5, 0.4, 0.2), γ 0.99, λ 0.95 */
    const float r3[3] = {0.1f, 0.2f, 1.0f}, v3[3] = {0.5f, 0.4f, 0.2f};
    float a3[3];
    rl_gae(a3, r3, v3, NULL, 0.0f, 3, 0.99f, 0.95f);
    ck_assert(fabs(a3[0] - 0.7018) < 5e-5 && fabs(a3[1] - 0.7504) < 5e-5 &&
              fabs(a3[2] - 0.8000) < 5e-5);
}
END_TEST

START_TEST(gae_identities)
{
    mlsys_rng r;
    mlsys_rng_seed(&r, 11);
    enum { T = 40 };
    float rew[T], val[T], adv[T], g[T];
    uint8_t done[T];
    for (int trial = 0; trial < 20; trial++) {
        for (int t = 0; t < T; t++) {
            rew[t] = (float)(2 * mlsys_rng_uniform(&r) - 1);
            val[t] = (float)(2 * mlsys_rng_uniform(&r) - 1);
            done[t] = mlsys_rng_uniform(&r) < 0.1;
        }
        float last = (float)mlsys_rng_uniform(&r), gamma = (float)(0.9 + 0.1 * trial / 19.0);
        /* λ = 0: the one-step TD error, δ_t = r_t + γV_{t+1}(1 - done_t) - V_t */
        rl_gae(adv, rew, val, done, last, T, gamma, 0.0f);
        for (int t = 0; t < T; t++) {
            double next = t + 1 < T ? val[t + 1] : last;
            double delta = rew[t] + gamma * next * (done[t] ? 0 : 1) - val[t];
            ck_assert(fabs(adv[t] - delta) < 1e-6);
        }
        /* λ = 1: the discounted return minus the value, returns summed forwards here */
        rl_gae(adv, rew, val, done, last, T, gamma, 1.0f);
        for (int t = 0; t < T; t++) {
            double G = 0, disc = 1;
            int u = t, ended = 0;
            for (; u < T; u++) {
                G += disc * rew[u];
                disc *= gamma;
                if (done[u]) {
                    ended = 1;
                    break;
                }
            }
            if (!ended)
                G += disc * last;
            ck_assert_msg(fabs(adv[t] - (G - val[t])) < 1e-5, "t=%d: %g vs %g", t, adv[t],
                          G - val[t]);
        }
        rl_discounted_returns(g, rew, done, last, T, gamma);
        for (int t = 0; t < T; t++)
            ck_assert(fabs(g[t] - val[t] - adv[t]) < 1e-5);
        /* any λ: the explicit sum Σ_k (γλ)^k δ_{t+k} up to the episode's end */
        float lam = 0.95f;
        rl_gae(adv, rew, val, done, last, T, gamma, lam);
        for (int t = 0; t < T; t++) {
            double s = 0, w = 1;
            for (int u = t; u < T; u++) {
                double next = u + 1 < T ? val[u + 1] : last;
                s += w * (rew[u] + gamma * next * (done[u] ? 0 : 1) - val[u]);
                if (done[u])
                    break;
                w *= (double)gamma * lam;
            }
            ck_assert(fabs(adv[t] - s) < 1e-5);
        }
        /* the last step: δ_{T-1} for every λ */
        for (int k = 0; k <= 4; k++) {
            rl_gae(adv, rew, val, done, last, T, gamma, 0.25f * k);
            double next = done[T - 1] ? 0 : last;
            ck_assert(fabs(adv[T - 1] - (rew[T - 1] + gamma * next - val[T - 1])) < 1e-6);
        }
    }
    /* REINFORCE's returns (§12.4): [1, 1, 1] at γ = 0.99 → [2.9701, 1.99, 1] */
    const float ones[3] = {1, 1, 1};
    rl_discounted_returns(g, ones, NULL, 0.0f, 3, 0.99f);
    ck_assert(fabs(g[0] - 2.9701) < 1e-6 && fabs(g[1] - 1.99) < 1e-6 && g[2] == 1.0f);
}
END_TEST

/* ---- the PPO losses ---- */

START_TEST(ppo_term_goldens)
{
    /* §12.4 exercise 3, ε = 0.2 */
    struct { double r, a, want, grad; } c[] = {
        {1.5, 1, 1.2, 0}, {0.7, 1, 0.7, 1}, {0.7, -1, -0.8, 0}, {1.5, -1, -1.5, -1},
        {1.1, 1, 1.1, 1}, {1.1, -1, -1.1, -1}, {0.9, 1, 0.9, 1}, {0.9, -1, -0.9, -1},
    };
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        double d = 99;
        double v = rl_ppo_term(c[i].r, c[i].a, 0.2, &d);
        ck_assert_msg(fabs(v - c[i].want) < 1e-12 && d == c[i].grad, "r=%g A=%g: %g (d %g)",
                      c[i].r, c[i].a, v, d);
    }
}
END_TEST

typedef struct loss_ctx {
    int n, A;
    float *logp, *old, *adv, *v, *vold, *ret, *logits;
    int *act;
    float clip;
    int which;              /* 0 policy, 1 value, 2 logp·w + entropy·u */
    float *w, *u;
} loss_ctx;

static double loss_eval(void *p)
{
    loss_ctx *c = p;
    if (c->which == 0)
        return rl_ppo_policy_loss(NULL, c->logp, c->old, c->adv, c->n, c->clip, NULL, NULL);
    if (c->which == 1)
        return rl_value_loss(NULL, c->v, c->vold, c->ret, c->n, c->clip);
    float *lp_all = malloc((size_t)c->n * c->A * sizeof *lp_all);
    float *lp = malloc((size_t)c->n * sizeof *lp), *h = malloc((size_t)c->n * sizeof *h);
    rl_categorical_forward(lp_all, lp, h, c->logits, c->act, c->n, c->A);
    double s = 0;
    for (int i = 0; i < c->n; i++)
        s += (double)c->w[i] * lp[i] + (double)c->u[i] * h[i];
    free(lp_all);
    free(lp);
    free(h);
    return s;
}

static float frand(mlsys_rng *r, double lo, double hi)
{
    return (float)(lo + (hi - lo) * mlsys_rng_uniform(r));
}

START_TEST(policy_and_value_gradcheck)
{
    mlsys_rng r;
    mlsys_rng_seed(&r, 21);
    enum { N = 64 };
    float logp[N], old[N], adv[N], dlogp[N], v[N], vold[N], ret[N], dv[N];
    int clipped = 0;
    for (int i = 0; i < N; i++) {
        /* ratios in [0.5, 1.6], kept 0.02 away from the kinks at 0.8 and 1.2 */
        double ratio;
        do
            ratio = 0.5 + 1.1 * mlsys_rng_uniform(&r);
        while (fabs(ratio - 0.8) < 0.02 || fabs(ratio - 1.2) < 0.02);
        old[i] = frand(&r, -2, -0.1);
        logp[i] = old[i] + (float)log(ratio);
        adv[i] = frand(&r, -2, 2);
        clipped += fabs(exp((double)logp[i] - old[i]) - 1) > 0.2;
        vold[i] = frand(&r, -1, 1);
        double moved;
        do
            moved = -0.6 + 1.2 * mlsys_rng_uniform(&r);
        while (fabs(fabs(moved) - 0.2) < 0.02);
        v[i] = vold[i] + (float)moved;
        ret[i] = frand(&r, -2, 2);
    }
    double cf, kl;
    double L = rl_ppo_policy_loss(dlogp, logp, old, adv, N, 0.2f, &cf, &kl);
    ck_assert(fabs(cf - (double)clipped / N) < 1e-12 && clipped > 5 && clipped < N - 5);
    ck_assert(kl > 0);
    double want = 0;
    for (int i = 0; i < N; i++)
        want += rl_ppo_term(exp((double)logp[i] - old[i]), adv[i], 0.2, NULL);
    ck_assert(fabs(L + want / N) < 1e-9);
    loss_ctx c = {.n = N, .logp = logp, .old = old, .adv = adv, .v = v, .vold = vold,
                  .ret = ret, .clip = 0.2f, .which = 0};
    nn_gradcheck_result res;
    double e = nn_gradcheck(loss_eval, &c, logp, dlogp, N, 1e-3f, 1e-3, 0, &res);
    printf("policy loss: max relative error %.3g\n", e);
    ck_assert_msg(e < 1e-2, "policy gradient off by %g at %zu (%g vs %g)", e, res.worst,
                  res.worst_analytic, res.worst_numeric);
    /* the clipped samples get exactly no gradient where the clip holds */
    int zero = 0;
    for (int i = 0; i < N; i++)
        zero += dlogp[i] == 0.0f;
    ck_assert(zero > 0);
    /* value loss, clipped and not */
    for (int k = 0; k < 2; k++) {
        c.which = 1;
        c.clip = k ? 0.2f : 0.0f;
        rl_value_loss(dv, v, vold, ret, N, c.clip);
        e = nn_gradcheck(loss_eval, &c, v, dv, N, 1e-3f, 1e-3, 0, &res);
        printf("value loss (clip %g): max relative error %.3g\n", c.clip, e);
        ck_assert_msg(e < 1e-2, "value gradient (clip %g) off by %g", c.clip, e);
    }
    /* unclipped: ½ mean (v - R)² exactly */
    double sq = 0;
    for (int i = 0; i < N; i++)
        sq += 0.5 * ((double)v[i] - ret[i]) * ((double)v[i] - ret[i]);
    ck_assert(fabs(rl_value_loss(NULL, v, NULL, ret, N, 0.0f) - sq / N) < 1e-9);
}
END_TEST

START_TEST(categorical_gradcheck)
{
    mlsys_rng r;
    mlsys_rng_seed(&r, 31);
    for (int A = 2; A <= 5; A += 3) {
        enum { N = 16 };
        float logits[N * 5], lp_all[N * 5], lp[N], h[N], w[N], u[N], d[N * 5];
        int act[N];
        for (int i = 0; i < N * A; i++)
            logits[i] = frand(&r, -3, 3);
        for (int i = 0; i < N; i++) {
            act[i] = (int)(mlsys_rng_u64(&r) % (uint64_t)A);
            w[i] = frand(&r, -1, 1);
            u[i] = frand(&r, -1, 1);
        }
        rl_categorical_forward(lp_all, lp, h, logits, act, N, A);
        for (int i = 0; i < N; i++) {        /* against the definitions, in double */
            double m = -1e30, s = 0, H = 0;
            for (int a = 0; a < A; a++)
                m = fmax(m, logits[i * A + a]);
            for (int a = 0; a < A; a++)
                s += exp(logits[i * A + a] - m);
            for (int a = 0; a < A; a++) {
                double p = exp(logits[i * A + a] - m) / s;
                H -= p * log(p);
            }
            ck_assert(fabs(lp[i] - (logits[i * A + act[i]] - m - log(s))) < 1e-6);
            ck_assert(fabs(h[i] - H) < 1e-6);
        }
        rl_categorical_backward(d, w, u, lp_all, h, act, N, A);
        loss_ctx c = {.n = N, .A = A, .logits = logits, .act = act, .w = w, .u = u,
                      .which = 2};
        /* the forward rounds log-probabilities to float: h = 1e-2 keeps that noise (about
         * 1e-6 over 2h) far below the floor, and the O(h²) error of the smooth softmax too */
        nn_gradcheck_result res;
        double e = nn_gradcheck(loss_eval, &c, logits, d, (size_t)N * A, 1e-2f, 1e-2, 0, &res);
        printf("log-softmax + entropy, %d actions: max relative error %.3g\n", A, e);
        ck_assert_msg(e < 1e-2, "A=%d: off by %g", A, e);
    }
    /* huge logits stay finite */
    float big[2] = {1000.0f, -1000.0f}, lpb[2], hb;
    int a0 = 1;
    float lp1;
    rl_categorical_forward(lpb, &lp1, &hb, big, &a0, 1, 2);
    ck_assert(isfinite(lp1) && lp1 < -1999.0f && isfinite(hb) && hb >= 0.0f);
}
END_TEST

/* The whole agent: loss = PPO policy loss + 0.5 value loss (clipped) - 0.01 entropy, as the
 * trainer computes it, differentiated by rl_agent_backward and by finite differences. */
typedef struct agent_ctx {
    rl_agent *ag;
    rl_agent_ws *ws;
    int n;
    float *obs, *old, *adv, *vold, *ret;
    int *act;
} agent_ctx;

static double agent_loss(void *p)
{
    agent_ctx *c = p;
    int n = c->n;
    float lp_all[64 * 2], lp[64], h[64];
    rl_agent_forward(c->ag, c->ws, c->obs, n);
    rl_categorical_forward(lp_all, lp, h, c->ws->logits, c->act, n, 2);
    double pg = rl_ppo_policy_loss(NULL, lp, c->old, c->adv, n, 0.2f, NULL, NULL);
    double vl = rl_value_loss(NULL, c->ws->value, c->vold, c->ret, n, 0.2f);
    double ent = 0;
    for (int i = 0; i < n; i++)
        ent += h[i];
    return pg + 0.5 * vl - 0.01 * ent / n;
}

START_TEST(agent_gradcheck)
{
    nn_set_gemm_kernel(NN_GEMM_REF);
    rl_agent ag;
    rl_agent_ws ws;
    ck_assert_int_eq(rl_agent_init(&ag, 4, 8, 2, 3), 0);
    /* larger output weights than CleanRL's 0.01 so the policy's gradient is not tiny */
    mlsys_rng r;
    mlsys_rng_seed(&r, 41);
    nn_tensor *head = nn_params_find(&ag.p, "actor.4.weight");
    for (size_t i = 0; i < head->numel; i++)
        head->data[i] = frand(&r, -1, 1);
    for (size_t i = 0; i < ag.p.numel; i++)       /* biases off zero too */
        ag.p.data[i] += frand(&r, -0.1, 0.1);
    enum { N = 24 };
    rl_agent_ws_init(&ws, &ag, N);
    float obs[N * 4], old[N], adv[N], vold[N], ret[N], lp_all[N * 2], lp[N], h[N];
    float dlp[N], dent[N], dv[N], dlogits[N * 2];
    int act[N];
    for (int i = 0; i < N * 4; i++)
        obs[i] = frand(&r, -1, 1);
    rl_agent_forward(&ag, &ws, obs, N);
    rl_categorical_forward(lp_all, lp, h, ws.logits, NULL, N, 2);
    for (int i = 0; i < N; i++) {
        act[i] = (int)(mlsys_rng_u64(&r) % 2);
        /* old log-probs away from the current ones by a ratio 0.6..1.5, off the kinks */
        double ratio;
        do
            ratio = 0.6 + 0.9 * mlsys_rng_uniform(&r);
        while (fabs(ratio - 0.8) < 0.03 || fabs(ratio - 1.2) < 0.03);
        old[i] = lp_all[i * 2 + act[i]] - (float)log(ratio);
        adv[i] = frand(&r, -2, 2);
        vold[i] = ws.value[i] + frand(&r, -0.1, 0.1);
        ret[i] = frand(&r, -2, 2);
    }
    /* analytic: the trainer's chain */
    rl_agent_forward(&ag, &ws, obs, N);
    rl_categorical_forward(lp_all, lp, h, ws.logits, act, N, 2);
    rl_ppo_policy_loss(dlp, lp, old, adv, N, 0.2f, NULL, NULL);
    rl_value_loss(dv, ws.value, vold, ret, N, 0.2f);
    for (int i = 0; i < N; i++) {
        dv[i] *= 0.5f;
        dent[i] = -0.01f / N;
    }
    rl_categorical_backward(dlogits, dlp, dent, lp_all, h, act, N, 2);
    nn_params_zero_grad(&ag.p);
    rl_agent_backward(&ag, &ws, obs, dlogits, dv, N);
    float *grad = malloc(ag.p.numel * sizeof *grad);
    memcpy(grad, ag.p.grad, ag.p.numel * sizeof *grad);
    agent_ctx c = {&ag, &ws, N, obs, old, adv, vold, ret, act};
    for (int t = 0; t < 12; t++) {
        nn_tensor *tn = &ag.p.t[t];
        double m = 0;
        for (size_t i = 0; i < tn->numel; i++)
            m = fmax(m, fabs(grad[tn->offset + i]));
        nn_gradcheck_result res;
        double e = nn_gradcheck(agent_loss, &c, tn->data, grad + tn->offset, tn->numel, 1e-2f,
                                fmax(0.05 * m, 1e-6), 0, &res);
        printf("agent %-16s max relative error %.3g\n", tn->name, e);
        ck_assert_msg(e < 2e-2, "%s: off by %g at %zu (%g vs %g)", tn->name, e, res.worst,
                      res.worst_analytic, res.worst_numeric);
    }
    free(grad);
    rl_agent_ws_fini(&ws);
    rl_agent_fini(&ag);
}
END_TEST

START_TEST(agent_init_layout)
{
    rl_agent ag;
    ck_assert_int_eq(rl_agent_init(&ag, 4, 64, 2, 1), 0);
    /* CleanRL's sizes: 4·64+64 + 64·64+64 + 64·2+2 and the same with one output */
    ck_assert_uint_eq(ag.p.numel, 4610 + 4545);
    ck_assert_ptr_nonnull(nn_params_find(&ag.p, "critic.4.weight"));
    for (int t = 1; t < 12; t += 2)               /* biases 0 */
        for (size_t i = 0; i < ag.p.t[ag.t[t]].numel; i++)
            ck_assert(ag.p.t[ag.t[t]].data[i] == 0.0f);
    /* the policy head has gain 0.01: rows of norm 0.01 */
    nn_tensor *h = nn_params_find(&ag.p, "actor.4.weight");
    for (int row = 0; row < 2; row++) {
        double s = nn_sumsq(h->data + row * 64, 64);
        ck_assert(fabs(sqrt(s) - 0.01) < 1e-6);
    }
    rl_agent_fini(&ag);
}
END_TEST

/* ---- per-token rewards (§13.2) ---- */

START_TEST(token_rewards_golden)
{
    const float actor[8] = {-1.2f, -0.8f, -1.5f, -0.9f, -1.1f, -1.0f, -0.7f, -1.3f};
    const float ref[8] = {-1.0f, -1.0f, -1.2f, -1.0f, -1.0f, -1.1f, -1.0f, -1.0f};
    const double kl_want[8] = {-0.2, 0.2, -0.3, 0.1, -0.1, 0.1, 0.3, -0.3};
    const double r_want[8] = {0.0040, -0.0040, 0.0060, -0.0020, 0.0020, -0.0020, -0.0060,
                              0.5060};
    float rew[8], kl[8];
    rl_token_rewards(rew, kl, actor, ref, 8, 0.02f, 0.5f, RL_REWARD_END);
    double sr = 0, sk = 0;
    for (int t = 0; t < 8; t++) {
        ck_assert(fabs(kl[t] - kl_want[t]) < 1e-6 && fabs(rew[t] - r_want[t]) < 1e-6);
        sr += rew[t];
        sk += kl[t];
    }
    ck_assert(fabs(sr - 0.5040) < 1e-6 && fabs(sk + 0.2) < 1e-6);
    /* spread mode: the same total, the score shared out */
    rl_token_rewards(rew, NULL, actor, ref, 8, 0.02f, 0.5f, RL_REWARD_SPREAD);
    double s2 = 0;
    for (int t = 0; t < 8; t++)
        s2 += rew[t];
    ck_assert(fabs(s2 - sr) < 1e-6 && fabs(rew[0] - (0.004 + 0.0625)) < 1e-6);
    /* Σr = score - β·ΣKL for any β and score */
    mlsys_rng r;
    mlsys_rng_seed(&r, 8);
    for (int k = 0; k < 50; k++) {
        float a[20], b[20], rr[20];
        int T = 1 + (int)(mlsys_rng_u64(&r) % 20);
        float beta = frand(&r, 0, 1), score = frand(&r, -2, 2);
        double skl = 0, s = 0;
        for (int t = 0; t < T; t++) {
            a[t] = frand(&r, -5, 0);
            b[t] = frand(&r, -5, 0);
            skl += (double)(a[t] - b[t]);
        }
        rl_token_rewards(rr, NULL, a, b, T, beta, score, k % 2 ? RL_REWARD_SPREAD
                                                                 : RL_REWARD_END);
        for (int t = 0; t < T; t++)
            s += rr[t];
        ck_assert(fabs(s - (score - beta * skl)) < 1e-4);
    }
}
END_TEST

/* ---- the trainer ---- */

static void small_config(rl_ppo_config *c, long steps)
{
    rl_ppo_defaults(c);
    c->total_steps = steps;
}

START_TEST(ppo_deterministic_per_seed)
{
    rl_ppo_config cfg;
    small_config(&cfg, 3 * 512);
    char err[256];
    float *w[3];
    for (int k = 0; k < 3; k++) {
        cfg.seed = k < 2 ? 7 : 8;
        rl_ppo *p = rl_ppo_create(&cfg, NULL, err, sizeof err);
        ck_assert_msg(p != NULL, "%s", err);
        rl_ppo_stats st;
        while (rl_ppo_iterate(p, &st) == 0)
            ;
        ck_assert_int_eq(st.iteration, 0);          /* the call past the end does nothing */
        const rl_agent *ag = rl_ppo_agent(p);
        w[k] = malloc(ag->p.numel * sizeof(float));
        memcpy(w[k], ag->p.data, ag->p.numel * sizeof(float));
        rl_ppo_free(p);
    }
    size_t n = 4610 + 4545;
    ck_assert(memcmp(w[0], w[1], n * sizeof(float)) == 0);
    ck_assert(memcmp(w[0], w[2], n * sizeof(float)) != 0);
    for (int k = 0; k < 3; k++)
        free(w[k]);
}
END_TEST

START_TEST(ppo_rejects_bad_configs)
{
    rl_ppo_config cfg;
    char err[256];
    small_config(&cfg, 100);
    ck_assert_ptr_null(rl_ppo_create(&cfg, NULL, err, sizeof err));
    ck_assert(strstr(err, "less than one rollout"));
    small_config(&cfg, 5000);
    cfg.num_minibatches = 3;
    ck_assert_ptr_null(rl_ppo_create(&cfg, NULL, err, sizeof err));
    ck_assert(strstr(err, "minibatches"));
}
END_TEST

/* 2 iterations on 1, 2 and 4 ranks under the reference GEMM: the same parameters up to the
 * order of float additions in the all-reduce */
typedef struct shared_out {
    float w[4610 + 4545];
    double mean100;
    long episodes;
} shared_out;

static shared_out *g_out;

static int ppo_rank(mlsys_comm *c, void *arg)
{
    (void)arg;
    nn_set_gemm_kernel(NN_GEMM_REF);
    rl_ppo_config cfg;
    small_config(&cfg, 2 * 512);
    char err[256];
    rl_ppo *p = rl_ppo_create(&cfg, c, err, sizeof err);
    if (!p) {
        fprintf(stderr, "rank %d: %s\n", mlsys_rank(c), err);
        return 1;
    }
    rl_ppo_stats st;
    int rc;
    while ((rc = rl_ppo_iterate(p, &st)) == 0) {
        if (mlsys_rank(c) == 0) {
            g_out->mean100 = st.mean100;
            g_out->episodes = st.episodes_total;
        }
    }
    if (mlsys_rank(c) == 0)
        memcpy(g_out->w, rl_ppo_agent(p)->p.data, sizeof g_out->w);
    rl_ppo_free(p);
    return rc == 1 ? 0 : 1;
}

START_TEST(ppo_same_on_any_world_size)
{
    g_out = mmap(NULL, sizeof *g_out, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1,
                 0);
    ck_assert(g_out != MAP_FAILED);
    nn_set_gemm_kernel(NN_GEMM_REF);
    rl_ppo_config cfg;
    small_config(&cfg, 2 * 512);
    char err[256], why[256];
    rl_ppo *p = rl_ppo_create(&cfg, NULL, err, sizeof err);
    rl_ppo_stats st;
    double mean = 0;
    long eps = 0;
    while (rl_ppo_iterate(p, &st) == 0) {
        mean = st.mean100;
        eps = st.episodes_total;
    }
    float *ref = malloc(sizeof g_out->w);
    memcpy(ref, rl_ppo_agent(p)->p.data, sizeof g_out->w);
    rl_ppo_free(p);
    for (int world = 2; world <= 4; world *= 2) {
        memset(g_out, 0, sizeof *g_out);
        ck_assert_msg(mlsys_run_fn(world, 30000, ppo_rank, NULL, why, sizeof why) == 0, "%s",
                      why);
        double worst = 0;
        for (size_t i = 0; i < 4610 + 4545; i++)
            worst = fmax(worst, fabs(g_out->w[i] - ref[i]));
        printf("ppo on %d ranks: largest parameter difference to 1 rank %.3g; %ld episodes, "
               "mean %.2f (1 rank: %ld, %.2f)\n", world, worst, g_out->episodes,
               g_out->mean100, eps, mean);
        ck_assert_msg(worst < 1e-5, "%d ranks: parameters differ by %g", world, worst);
        ck_assert_int_eq(g_out->episodes, eps);
        ck_assert(fabs(g_out->mean100 - mean) < 1e-9);
    }
    free(ref);
    munmap(g_out, sizeof *g_out);
}
END_TEST

/* The clip acts in the default run: over the first 40 updates, the share of samples whose
 * ratio left [1 - ε, 1 + ε] (a mean over each update's 16 minibatches) averages above 1 %
 * and the approximate KL above 0.001 nats. At CleanRL's learning rate, 2.5e-4, both were
 * near 0 (0.06 % and 0.0003, in PyTorch too), and a last-minibatch figure read 0 on most
 * lines. */
START_TEST(ppo_default_clip_acts)
{
    rl_ppo_config cfg;
    rl_ppo_defaults(&cfg);
    char err[256];
    rl_ppo *p = rl_ppo_create(&cfg, NULL, err, sizeof err);
    ck_assert_ptr_nonnull(p);
    rl_ppo_stats st;
    double clip = 0, kl = 0, most = 0;
    for (int i = 0; i < 40; i++) {
        ck_assert_int_eq(rl_ppo_iterate(p, &st), 0);
        ck_assert(st.clipfrac >= 0 && st.clipfrac <= 1 && st.approx_kl >= 0);
        clip += st.clipfrac / 40;
        kl += st.approx_kl / 40;
        most = fmax(most, st.clipfrac);
    }
    printf("ppo default, first 40 updates: clip fraction %.4f on average (most %.3f), "
           "approximate KL %.5f\n", clip, most, kl);
    ck_assert_msg(clip > 0.01, "the clip hardly acts: %.4f", clip);
    ck_assert_msg(kl > 0.001, "the policy hardly moves: approximate KL %.5f", kl);
    rl_ppo_free(p);
}
END_TEST

START_TEST(ppo_short_run_learns)
{
    /* 80 rollouts (40,960 steps), seed 1: the mean return of the last 100 episodes must
     * well exceed that of the first rollout's episodes (a random policy lasts ~20 steps) */
    rl_ppo_config cfg;
    small_config(&cfg, 80 * 512);
    char err[256];
    rl_ppo *p = rl_ppo_create(&cfg, NULL, err, sizeof err);
    ck_assert_ptr_nonnull(p);
    rl_ppo_stats st;
    double first = -1, last = 0;
    while (rl_ppo_iterate(p, &st) == 0) {
        if (first < 0 && st.episodes > 0) {
            double s = 0;
            for (int i = 0; i < st.episodes; i++)
                s += st.returns[i];
            first = s / st.episodes;
        }
        last = st.mean100;
    }
    printf("ppo short run: first rollout's episodes %.1f, last 100 episodes %.1f\n", first,
           last);
    ck_assert(first > 5 && first < 50);
    ck_assert_msg(last > 3 * first && last > 80, "no learning: %.1f -> %.1f", first, last);
    rl_ppo_free(p);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("rl");
    TCase *tc = tcase_create("rl");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, cartpole_step_matches_physics);
    tcase_add_test(tc, cartpole_limits);
    tcase_add_test(tc, toy_env_returns_steps_minus_one);
    tcase_add_test(tc, gae_golden_table);
    tcase_add_test(tc, gae_identities);
    tcase_add_test(tc, ppo_term_goldens);
    tcase_add_test(tc, policy_and_value_gradcheck);
    tcase_add_test(tc, categorical_gradcheck);
    tcase_add_test(tc, agent_gradcheck);
    tcase_add_test(tc, agent_init_layout);
    tcase_add_test(tc, token_rewards_golden);
    tcase_add_test(tc, ppo_deterministic_per_seed);
    tcase_add_test(tc, ppo_rejects_bad_configs);
    tcase_add_test(tc, ppo_same_on_any_world_size);
    tcase_add_test(tc, ppo_short_run_learns);
    tcase_add_test(tc, ppo_default_clip_acts);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
