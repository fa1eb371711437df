/* check.c - ch12-ppo-clip, rank side (see ../harness.h). The curriculum's table of clipped
 * and unclipped cases, seeded (r, A, eps) against core/rl's rl_ppo_term, then seeded batches
 * against rl_ppo_policy_loss, with the learner's gradient also held against central finite
 * differences of the learner's own loss (away from the clip's kinks). */
#include "harness.h"
#include "rl/rl.h"
#include "api.h"

#define TERMS 2000
#define BATCHES 12
#define NMAX 256
#define FD_H 1e-2

static void table(harness *h)
{
    h_case(h, "the curriculum's table, eps = 0.2");
    static const struct { double r, a, val, d; const char *what; } t[] = {
        {1.5, 1.0, 1.2, 0.0, "A > 0, r past 1 + eps: clipped"},
        {0.7, 1.0, 0.7, 1.0, "A > 0, r below 1 - eps: unclipped (the smaller)"},
        {0.7, -1.0, -0.8, 0.0, "A < 0, r below 1 - eps: clipped"},
        {1.5, -1.0, -1.5, -1.0, "A < 0, r past 1 + eps: unclipped (the smaller)"},
        {1.1, 1.0, 1.1, 1.0, "A > 0, r inside the range"},
        {1.1, -1.0, -1.1, -1.0, "A < 0, r inside the range"},
        {1.2, 2.0, 2.4, 2.0, "A > 0, r exactly 1 + eps: a tie, the unclipped derivative"},
        {0.8, -2.0, -1.6, -2.0, "A < 0, r exactly 1 - eps: a tie, the unclipped derivative"},
        {1.0, 0.0, 0.0, 0.0, "A = 0"},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        double d = NAN;
        double v = ppo_term(t[i].r, t[i].a, 0.2, &d);
        if (!h_close(t[i].val, v, 1e-12, 1e-12)) {
            h_fail(h, "ppo_term(r = %g, A = %g, eps = 0.2), %s: expected %g, got %.9g",
                   t[i].r, t[i].a, t[i].what, t[i].val, v);
            return;
        }
        if (!h_close(t[i].d, d, 1e-12, 0)) {
            h_fail(h, "ppo_term(r = %g, A = %g, eps = 0.2), %s: expected d/dr = %g, got %.9g",
                   t[i].r, t[i].a, t[i].what, t[i].d, d);
            return;
        }
    }
    if (ppo_term(1.5, 1.0, 0.2, NULL) != ppo_term(1.5, 1.0, 0.2, &(double){0}))
        h_fail(h, "ppo_term(1.5, 1, 0.2, NULL): d_dr may be NULL, and the value must not "
               "change with it");
}

static void terms(harness *h, mlsys_rng *g)
{
    static const double epss[] = {0.1, 0.2, 0.3};
    h_case(h, "%d seeded (r, A, eps) against rl_ppo_term", TERMS);
    for (int i = 0; i < TERMS && !h->failed; i++) {
        double r = exp(0.35 * mlsys_rng_normal(g)), a = mlsys_rng_normal(g);
        double eps = epss[mlsys_rng_u64(g) % 3], dw, dg = NAN;
        double w = rl_ppo_term(r, a, eps, &dw), v = ppo_term(r, a, eps, &dg);
        if (!h_close(w, v, 1e-12, 1e-12))
            h_fail(h, "term %d: ppo_term(r = %.6f, A = %.6f, eps = %g): expected %.9g, got %.9g",
                   i, r, a, eps, w, v);
        else if (!h_close(dw, dg, 1e-12, 1e-12))
            h_fail(h, "term %d: ppo_term(r = %.6f, A = %.6f, eps = %g): expected d/dr = %.9g "
                   "(%s), got %.9g", i, r, a, eps, dw, dw == 0.0 ? "the clip holds it" :
                   "unclipped", dg);
    }
    h_returned(h, 0, "ppo_term");
}

/* 1 when logp_i can move by 2h either way without r_i crossing 1 - eps or 1 + eps. */
static int away_from_kinks(double r, double eps)
{
    double lo = r * exp(-2 * FD_H), hi = r * exp(2 * FD_H);
    return !((lo <= 1 - eps && hi >= 1 - eps) || (lo <= 1 + eps && hi >= 1 + eps));
}

static void batch(harness *h, int b, mlsys_rng *g)
{
    int n = b == 0 ? 1 : b < 6 ? 1 + (int)(mlsys_rng_u64(g) % 16) :
            1 + (int)(mlsys_rng_u64(g) % NMAX);
    float eps = b % 2 ? 0.2f : 0.1f + 0.05f * (float)(mlsys_rng_u64(g) % 5);
    h_case(h, "batch %d: n = %d samples, eps = %.2f", b, n, (double)eps);
    float logp[NMAX], old[NMAX], adv[NMAX], want[NMAX], got[NMAX + 1];
    for (int i = 0; i < n; i++) {
        logp[i] = (float)log(0.05 + 0.95 * mlsys_rng_uniform(g));
        old[i] = logp[i] + (float)(0.25 * mlsys_rng_normal(g));
        adv[i] = (float)mlsys_rng_normal(g);
    }
    got[n] = 4242.0f;
    double lw = rl_ppo_policy_loss(want, logp, old, adv, n, eps, NULL, NULL);
    double lg = ppo_policy_loss(got, logp, old, adv, n, eps);
    h_returned(h, 0, "ppo_policy_loss");
    if (!h_close(lw, lg, 1e-6, 1e-5)) {
        h_fail(h, "the loss: expected %.9g, got %.9g", lw, lg);
        return;
    }
    if (got[n] != 4242.0f) {
        h_fail(h, "dlogp written past the end (index %d of %d)", n, n);
        return;
    }
    for (int i = 0; i < n && i < 24; i++) {
        double r = exp((double)logp[i] - old[i]);
        if (!away_from_kinks(r, eps))
            continue;
        float keep = logp[i];
        logp[i] = keep + (float)FD_H;
        double up = ppo_policy_loss(NULL, logp, old, adv, n, eps);
        logp[i] = keep - (float)FD_H;
        double down = ppo_policy_loss(NULL, logp, old, adv, n, eps);
        logp[i] = keep;
        double fd = (up - down) / (2 * FD_H);
        if (!h_close(fd, got[i], 1e-4, 1e-2)) {
            h_fail(h, "sample %d (r = %.4f, A = %.4f): your dlogp = %.6g, but your loss changes "
                   "at the rate %.6g (central difference, h = %g)", i, r, (double)adv[i],
                   (double)got[i], fd, FD_H);
            return;
        }
    }
    for (int i = 0; i < n; i++)
        if (!h_close(want[i], got[i], 1e-7, 1e-5)) {
            double r = exp((double)logp[i] - old[i]);
            h_fail(h, "sample %d (r = %.4f, A = %.4f%s): dlogp expected %.9g, got %.9g", i, r,
                   (double)adv[i], fabs(r - 1) > eps ? ", outside the clip range" : "",
                   (double)want[i], (double)got[i]);
            return;
        }
}

static void ex_check_main(harness *h)
{
    table(h);
    h_returned(h, 0, "ppo_term");
    if (!h_case_end(h))
        return;
    mlsys_rng g;
    mlsys_rng_seed(&g, h->seed);
    terms(h, &g);
    if (!h_case_end(h))
        return;
    for (int b = 0; b < BATCHES; b++) {
        batch(h, b, &g);
        if (!h_case_end(h))
            return;
    }
}
