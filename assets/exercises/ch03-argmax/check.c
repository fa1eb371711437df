/* check.c - ch03-argmax, rank side (see ../harness.h). Every rank draws every rank's values
 * from the seed and finds the reference (maximum, lowest owner) itself. Cases: random
 * values; negative values only (a maximum that starts at 0 is wrong); a tie between two
 * ranks (the lower must win); all values equal (rank 0 wins). */
#include "harness.h"
#include "api.h"

#define K 5

static void values_of(uint64_t seed, int kase, int r, int n, float *v)
{
    mlsys_rng g;
    mlsys_rng_seed(&g, seed * 7919u + (uint64_t)kase * 131u + (uint64_t)r);
    for (int i = 0; i < K; i++) {
        float x = (float)(mlsys_rng_normal(&g) * 10.0);
        v[i] = kase == 1 ? -fabsf(x) - 1.0f : x;
        if (kase == 3)
            v[i] = 7.5f;
    }
    if (kase == 2 && n >= 2) {
        /* the tie: ranks a < b both hold 100.0, at different positions */
        int a = (int)(seed % (uint64_t)(n - 1)), b = n - 1;
        if (a == b)
            a = 0;
        if (r == a)
            v[1] = 100.0f;
        if (r == b)
            v[3] = 100.0f;
    }
}

static void ex_check_main(harness *h)
{
    static const char *const names[] = {"random values", "negative values only",
                                        "a tie between two ranks", "all values equal"};
    float v[K], all[K];
    for (int kase = 0; kase < 4; kase++) {
        h_case(h, "N=%d, %s", h->size, names[kase]);
        float want = 0.0f;
        int owner = -1;
        for (int r = 0; r < h->size; r++) {
            values_of(h->seed, kase, r, h->size, all);
            for (int i = 0; i < K; i++)
                if (owner < 0 || all[i] > want) {
                    want = all[i];
                    owner = r;
                }
        }
        values_of(h->seed, kase, h->rank, h->size, v);
        float got = -1.0f;
        int got_owner = -1;
        int rc = distributed_argmax(h->c, v, K, &got, &got_owner);
        h_returned(h, rc, "distributed_argmax");
        char a[48], b[48];
        if (got != want)
            h_fail(h, "rank %d: expected the maximum %s, got %s", h->rank,
                   h_num(a, sizeof a, want), h_num(b, sizeof b, got));
        else if (got_owner != owner)
            h_fail(h, "rank %d: expected owner rank %d, got %d%s", h->rank, owner, got_owner,
                   kase == 2 ? " (a tie: the lowest rank that holds the maximum wins)" : "");
        if (!h_case_end(h))
            return;
    }
}
