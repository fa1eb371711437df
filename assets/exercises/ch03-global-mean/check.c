/* check.c - ch03-global-mean, rank side (see ../harness.h). Every rank draws every rank's
 * number from the seed, so it knows the mean without asking anyone. */
#include "harness.h"
#include "api.h"

static double value_of(uint64_t seed, int kase, int r)
{
    mlsys_rng g;
    mlsys_rng_seed(&g, seed * 1000003u + (uint64_t)kase * 101u + (uint64_t)r);
    double x = mlsys_rng_normal(&g) * 10.0 + 3.0;
    return kase == 2 ? 1e6 + x : x;     /* case 2: large numbers, small spread */
}

static void ex_check_main(harness *h)
{
    for (int kase = 0; kase < 3; kase++) {
        h_case(h, "N=%d, case %d", h->size, kase + 1);
        double want = 0.0;
        for (int r = 0; r < h->size; r++)
            want += value_of(h->seed, kase, r);
        want /= h->size;
        double v = value_of(h->seed, kase, h->rank);
        double got = global_mean(h->c, v);
        h_returned(h, 0, "global_mean");
        if (!h_close(want, got, 1e-12, 1e-9)) {
            char a[48], b[48], c[48];
            h_fail(h, "rank %d (v = %s): expected the mean %s, got %s", h->rank,
                   h_num(c, sizeof c, v), h_num(a, sizeof a, want), h_num(b, sizeof b, got));
        }
        if (!h_case_end(h))
            return;
    }
}
