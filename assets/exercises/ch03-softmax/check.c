/* check.c - ch03-softmax, rank side (see ../harness.h). Every rank draws the whole vector
 * from the seed, computes the serial softmax in double, and compares its own shard within
 * 1e-6; then the ranks add up their outputs (built-in all_reduce) to check the sum is 1.
 * Cases: values of a few units; values around 1000 (exp overflows a float); the last rank
 * holding no elements; a long vector. */
#include "harness.h"
#include "api.h"

static size_t shard_len(int kase, int r, int n)
{
    if (kase == 2 && r == n - 1 && n > 1)
        return 0;
    if (kase == 3)
        return 20000 + (size_t)r * 37;
    return 5 + (size_t)((r * 3) % 4);
}

static void ex_check_main(harness *h)
{
    static const char *const names[] = {"values of a few units", "values around 1000",
                                        "the last rank holds no elements", "a long vector"};
    int n = h->size;
    for (int kase = 0; kase < 4; kase++) {
        h_case(h, "N=%d, %s", n, names[kase]);
        size_t total = 0, mine = 0, off = 0;
        for (int r = 0; r < n; r++) {
            if (r == h->rank) {
                off = total;
                mine = shard_len(kase, r, n);
            }
            total += shard_len(kase, r, n);
        }
        float *x = malloc((total + 1) * sizeof *x), *y = malloc((mine + 1) * sizeof *y);
        double *ref = malloc((total + 1) * sizeof *ref);
        if (!x || !y || !ref)
            abort();
        mlsys_rng g;
        mlsys_rng_seed(&g, h->seed * 31u + (uint64_t)kase);
        double m = -INFINITY, s = 0.0;
        for (size_t i = 0; i < total; i++) {
            x[i] = (float)(mlsys_rng_normal(&g) * 3.0 + (kase == 1 ? 1000.0 : 0.0));
            m = fmax(m, x[i]);
        }
        for (size_t i = 0; i < total; i++)
            s += exp((double)x[i] - m);
        for (size_t i = 0; i < total; i++)
            ref[i] = exp((double)x[i] - m) / s;
        for (size_t i = 0; i < mine; i++)
            y[i] = -1.0f;

        int rc = distributed_softmax(h->c, x + off, y, mine);
        h_returned(h, rc, "distributed_softmax");

        double local = 0.0;
        for (size_t i = 0; i < mine; i++) {
            local += y[i];
            if (!h->failed && !h_close(ref[off + i], y[i], 1e-6, 0.0)) {
                char a[48], b[48];
                h_fail(h, "rank %d, element %zu (element %zu of the whole vector): expected %s, "
                       "got %s%s", h->rank, i, off + i, h_num(a, sizeof a, ref[off + i]),
                       h_num(b, sizeof b, y[i]),
                       isfinite(y[i]) ? "" : " (exp of a large input overflows a float: "
                                             "subtract the global maximum first)");
            }
        }
        if (mlsys_allreduce(h->c, &local, &local, 1, MLSYS_F64, MLSYS_SUM) != MLSYS_OK)
            h_sync_failed(h);
        if (!h->failed && h->rank == 0 && !h_close(1.0, local, 1e-5, 0.0))
            h_fail(h, "the outputs of all ranks sum to %.9g, not 1", local);
        free(x);
        free(y);
        free(ref);
        if (!h_case_end(h))
            return;
    }
}
