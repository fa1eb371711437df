/* check.c - ch13-rm-loss, rank side (see ../harness.h). Hand values, then seeded batches of
 * preference pairs with margins from small to far past exp's float range, against a stable
 * reference written here, and the learner's gradient against central differences of the
 * learner's own loss. */
#include "harness.h"
#include "api.h"

#define BATCHES 20
#define NMAX 512
#define FD_H 1e-2

/* -log sigmoid(m) and sigmoid(-m), both stable. */
static double ref_loss(double m)
{
    return m > 0 ? log1p(exp(-m)) : -m + log1p(exp(m));
}

static double ref_sig_neg(double m)
{
    return m > 0 ? exp(-m) / (1.0 + exp(-m)) : 1.0 / (1.0 + exp(m));
}

static void hand(harness *h)
{
    h_case(h, "hand values: one pair of equal scores, one of margin +-2");
    float w[2] = {0.3f, 1.0f}, l[2] = {0.3f, -1.0f}, dw[2], dl[2];
    double L = rm_pairwise_loss(w, l, 1, dw, dl);
    h_returned(h, 0, "rm_pairwise_loss");
    if (!h_close(log(2.0), L, 1e-6, 0)) {
        h_fail(h, "pair 0 (r_w = r_l = 0.3): the loss is -log sigmoid(0) = log 2 = 0.693147, "
               "got %.9g", L);
        return;
    }
    if (!h_close(-0.5, dw[0], 1e-6, 0) || !h_close(0.5, dl[0], 1e-6, 0)) {
        h_fail(h, "pair 0 (r_w = r_l = 0.3): expected d_rw = -0.5, d_rl = +0.5, got %.6g, %.6g",
               (double)dw[0], (double)dl[0]);
        return;
    }
    L = rm_pairwise_loss(w, l, 2, NULL, NULL);
    double want = (log(2.0) + log1p(exp(-2.0))) / 2;
    if (!h_close(want, L, 1e-6, 0))
        h_fail(h, "pairs (0.3, 0.3) and (1, -1): expected the mean loss %.7f, got %.9g (with "
               "d_rw = d_rl = NULL)", want, L);
}

static void batch(harness *h, int b, mlsys_rng *g)
{
    int n = b < 3 ? b + 1 : 1 + (int)(mlsys_rng_u64(g) % NMAX);
    double scale = b % 4 == 3 ? 600.0 : b % 4 == 2 ? 20.0 : 2.0;
    h_case(h, "batch %d: %d pairs, margins ~ +-%g", b, n, scale);
    float w[NMAX], l[NMAX], dw[NMAX + 1], dl[NMAX + 1];
    double want = 0.0;
    for (int i = 0; i < n; i++) {
        w[i] = (float)(scale * mlsys_rng_normal(g));
        l[i] = (float)(scale * mlsys_rng_normal(g));
        want += ref_loss((double)w[i] - l[i]);
    }
    want /= n;
    dw[n] = dl[n] = 4242.0f;
    double L = rm_pairwise_loss(w, l, n, dw, dl);
    h_returned(h, 0, "rm_pairwise_loss");
    if (!h_close(want, L, 1e-6, 1e-5)) {
        double worst = INFINITY;
        int wi = 0;
        for (int i = 0; i < n; i++)
            if ((double)w[i] - l[i] < worst) {
                worst = (double)w[i] - l[i];
                wi = i;
            }
        h_fail(h, "the mean loss: expected %.9g, got %.9g%s (the most negative margin: pair "
               "%d, r_w %.3f, r_l %.3f)", want, L, isfinite(L) ? "" : " - an overflow?", wi,
               (double)w[wi], (double)l[wi]);
        return;
    }
    if (dw[n] != 4242.0f || dl[n] != 4242.0f) {
        h_fail(h, "a gradient written past the end (index %d of %d)", n, n);
        return;
    }
    /* central differences of a float loss mean something only at moderate margins */
    for (int i = 0; i < n && i < 16 && n <= 64 && scale < 100.0; i++) {
        float keep = w[i];
        w[i] = keep + (float)FD_H;
        double up = rm_pairwise_loss(w, l, n, NULL, NULL);
        w[i] = keep - (float)FD_H;
        double down = rm_pairwise_loss(w, l, n, NULL, NULL);
        w[i] = keep;
        double fd = (up - down) / ((double)(keep + (float)FD_H) - (double)(keep - (float)FD_H));
        if (!h_close(fd, dw[i], 1e-4, 1e-2)) {
            h_fail(h, "pair %d (r_w %.4f, r_l %.4f): your d_rw = %.6g, but your loss changes at "
                   "the rate %.6g (central difference, h = %g)", i, (double)w[i], (double)l[i],
                   (double)dw[i], fd, FD_H);
            return;
        }
    }
    for (int i = 0; i < n; i++) {
        double s = ref_sig_neg((double)w[i] - l[i]) / n;
        if (!h_close(-s, dw[i], 1e-9, 1e-5) || !h_close(s, dl[i], 1e-9, 1e-5)) {
            h_fail(h, "pair %d (r_w %.4f, r_l %.4f, margin %.4f): expected d_rw = %.7g, d_rl = "
                   "%.7g; got %.7g, %.7g", i, (double)w[i], (double)l[i], (double)w[i] - l[i],
                   -s, s, (double)dw[i], (double)dl[i]);
            return;
        }
    }
}

static void ex_check_main(harness *h)
{
    hand(h);
    if (!h_case_end(h))
        return;
    mlsys_rng g;
    mlsys_rng_seed(&g, h->seed);
    for (int b = 0; b < BATCHES; b++) {
        batch(h, b, &g);
        if (!h_case_end(h))
            return;
    }
}
