/* check.c - ch05-bucketing, rank side (see ../harness.h). The gradients are drawn from the
 * seed so that every rank knows every rank's values and works out the mean itself (the
 * per-tensor all_reduce / N, up to rounding). After the learner's call: the values, guards
 * past each tensor, and the all_reduce counter against ceil(total bytes / bucket bytes).
 * Then the time, informational: one warm-up call, then TIMED calls each started together by
 * a barrier, their median on rank 0 (one cold call on one rank measures page faults and
 * whoever arrived last, not the buckets). */
#include "harness.h"
#include "api.h"

#define NT 4
#define GUARD 4
#define GUARD_VALUE 4242.0f
#define TIMED 5

/* simple-ddp's MLP, in the order backward writes the gradients */
static const char *const names[NT] = {"b2", "w2", "b1", "w1"};
static const size_t sizes[NT] = {10, 10 * 256, 256, 256 * 784};

static float value(uint64_t seed, int r, int t, size_t i)
{
    uint64_t x = seed * 0x9e3779b97f4a7c15ull + (uint64_t)r * 0xbf58476d1ce4e5b9ull +
                 (uint64_t)t * 0x94d049bb133111ebull + i * 0x2545f4914f6cdd1dull;
    x ^= x >> 31;
    x *= 0xd6e8feb86659fd93ull;
    x ^= x >> 32;
    return (float)((int)(x % 2001) - 1000) / 256.0f;
}

static void one_case(harness *h, size_t bucket, const char *label)
{
    int n = h->size;
    h_case(h, "N=%d, buckets of %s", n, label);
    grad_tensor t[NT];
    float *want[NT];
    size_t total = 0;
    for (int i = 0; i < NT; i++) {
        t[i].name = names[i];
        t[i].numel = sizes[i];
        t[i].grad = malloc((sizes[i] + GUARD) * sizeof(float));
        want[i] = malloc(sizes[i] * sizeof(float));
        if (!t[i].grad || !want[i])
            abort();
        for (size_t k = 0; k < sizes[i]; k++) {
            t[i].grad[k] = value(h->seed, h->rank, i, k);
            double s = 0.0;
            for (int r = 0; r < n; r++)
                s += value(h->seed, r, i, k);
            want[i][k] = (float)(s / n);
        }
        for (int g = 0; g < GUARD; g++)
            t[i].grad[sizes[i] + g] = GUARD_VALUE;
        total += sizes[i];
    }
    int rc = bucketed_sync_grads(h->c, t, NT, bucket);
    mlsys_counters k = *mlsys_get_counters(h->c);
    h_returned(h, rc, "bucketed_sync_grads");

    for (int i = 0; i < NT && !h->failed; i++) {
        char what[64];
        snprintf(what, sizeof what, "tensor %s (t[%d]),", names[i], i);
        if (!h_cmp_f32(h, want[i], t[i].grad, sizes[i], 1e-6, 1e-6, what, 0))
            break;
        for (int g = 0; g < GUARD; g++)
            if (t[i].grad[sizes[i] + g] != GUARD_VALUE) {
                h_fail(h, "rank %d wrote past the end of tensor %s (element %zu of %zu)",
                       h->rank, names[i], sizes[i] + (size_t)g, sizes[i]);
                break;
            }
    }
    uint64_t bytes = total * sizeof(float);
    uint64_t expect = (bytes + bucket - 1) / bucket;
    uint64_t calls = k.coll_calls[MLSYS_COLL_ALLREDUCE];
    if (!h->failed && calls != expect)
        h_fail(h, "rank %d made %llu all_reduce call%s; %llu bytes of gradients in buckets of "
               "%zu bytes need ceil(%llu / %zu) = %llu", h->rank, (unsigned long long)calls,
               calls == 1 ? "" : "s", (unsigned long long)bytes, bucket,
               (unsigned long long)bytes, bucket, (unsigned long long)expect);
    /* the time: the values are averaged already, so averaging again leaves them the mean;
     * every rank makes the same calls (a failed rank skips them all, and so do the others
     * after the case ends) */
    int fine = !h->failed;
    if (mlsys_allreduce(h->c, &fine, &fine, 1, MLSYS_I32, MLSYS_MIN) != MLSYS_OK)
        h_sync_failed(h);
    double secs[TIMED];
    for (int i = -1; fine && i < TIMED; i++) {
        if (mlsys_barrier(h->c) != MLSYS_OK)
            h_sync_failed(h);
        double t0 = mlsys_now_s();
        if (bucketed_sync_grads(h->c, t, NT, bucket) != 0) {
            fine = 0;                       /* it worked once: no time, no verdict either */
            break;
        }
        if (i >= 0)
            secs[i] = mlsys_now_s() - t0;
    }
    if (fine && !h->failed && h->rank == 0) {
        for (int i = 1; i < TIMED; i++)             /* insertion sort: the median */
            for (int j = i; j > 0 && secs[j] < secs[j - 1]; j--) {
                double x = secs[j];
                secs[j] = secs[j - 1];
                secs[j - 1] = x;
            }
        double med = secs[TIMED / 2];
        h_info(h, "N=%d, buckets of %-6s: %4llu all-reduce%s, %.3f ms, median of %d "
               "barrier-started calls after a warm-up (%.0f MB/s)", n, label,
               (unsigned long long)calls, calls == 1 ? "" : "s", med * 1e3, TIMED,
               bytes / 1e6 / (med > 0 ? med : 1e-9));
    }
    for (int i = 0; i < NT; i++) {
        free(t[i].grad);
        free(want[i]);
    }
}

static void ex_check_main(harness *h)
{
    static const size_t buckets[] = {1024, 65536, 1048576};
    static const char *const labels[] = {"1 KB", "64 KB", "1 MB"};
    for (int i = 0; i < 3; i++) {
        one_case(h, buckets[i], labels[i]);
        if (!h_case_end(h))
            return;
    }
}
