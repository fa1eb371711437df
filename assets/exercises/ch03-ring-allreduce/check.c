/* check.c - ch03-ring-allreduce, rank side (see ../harness.h). Inputs are small integers,
 * so the sum is exact in float whatever order the ranks add in, and every rank can work out
 * the reference itself. After each call: the result and a guard past the end of the buffer,
 * no collective in the counters, exactly 2(N-1) sends, and bytes sent within one chunk of
 * 2(N-1)/N of the buffer. */
#include "harness.h"
#include "api.h"

#define GUARD 8
#define GUARD_VALUE 12345.0f

static float input(uint64_t seed, int r, size_t i)
{
    uint64_t x = seed * 0x9e3779b97f4a7c15ull + (uint64_t)r * 0xbf58476d1ce4e5b9ull +
                 (uint64_t)i * 0x94d049bb133111ebull;
    x ^= x >> 31;
    x *= 0xd6e8feb86659fd93ull;
    x ^= x >> 32;
    return (float)((int)(x % 17) - 8);
}

static void one_case(harness *h, size_t count)
{
    int n = h->size;
    h_case(h, "N=%d, length %zu", n, count);
    float *buf = malloc((count + GUARD) * sizeof *buf);
    float *ref = malloc((count + 1) * sizeof *ref);
    if (!buf || !ref)
        abort();
    for (size_t i = 0; i < count; i++) {
        buf[i] = input(h->seed, h->rank, i);
        float s = 0.0f;
        for (int r = 0; r < n; r++)
            s += input(h->seed, r, i);
        ref[i] = s;
    }
    for (int g = 0; g < GUARD; g++)
        buf[count + g] = GUARD_VALUE;

    int rc = my_ring_allreduce(h->c, buf, count);
    mlsys_counters k = *mlsys_get_counters(h->c);
    h_returned(h, rc, "my_ring_allreduce");

    if (h_cmp_f32(h, ref, buf, count, 0.0, 0.0, "", 0)) {
        for (int g = 0; g < GUARD; g++)
            if (buf[count + g] != GUARD_VALUE) {
                h_fail(h, "rank %d wrote past the end of the buffer (element %zu of %zu)",
                       h->rank, count + (size_t)g, count);
                break;
            }
    }
    for (int i = 0; i < MLSYS_COLL_COUNT && !h->failed; i++)
        if (k.coll_calls[i])
            h_fail(h, "rank %d called the built-in %s (%llu time%s): use only send and recv",
                   h->rank, mlsys_coll_name((mlsys_coll)i), (unsigned long long)k.coll_calls[i],
                   k.coll_calls[i] == 1 ? "" : "s");
    uint64_t want = 2u * (uint64_t)(n - 1);
    if (!h->failed && k.sends != want)
        h_fail(h, "rank %d sent %llu messages; a ring all-reduce sends exactly 2(N-1) = %llu",
               h->rank, (unsigned long long)k.sends, (unsigned long long)want);
    double ideal = 2.0 * (n - 1) / n * (double)(count * sizeof(float));
    double chunk = (double)((count + (size_t)n - 1) / (size_t)n * sizeof(float));
    if (!h->failed && fabs((double)k.bytes_sent - ideal) > chunk)
        h_fail(h, "rank %d sent %llu bytes; 2(N-1)/N of the buffer is %.0f (one chunk is %.0f)",
               h->rank, (unsigned long long)k.bytes_sent, ideal, chunk);
    if (!h->failed && h->rank == 0 && count == 1000003 && n > 1)
        h_info(h, "N=%d, length %zu: %llu sends and %llu bytes sent per rank (2(N-1)/N x %zu B = %.0f)",
               n, count, (unsigned long long)k.sends, (unsigned long long)k.bytes_sent,
               count * sizeof(float), ideal);
    free(buf);
    free(ref);
}

static void ex_check_main(harness *h)
{
    int n = h->size;
    size_t lens[4] = {1, (size_t)n - 1, (size_t)n, 1000003};
    for (int i = 0; i < 4; i++) {
        int dup = 0;
        for (int j = 0; j < i; j++)
            dup |= lens[j] == lens[i];
        if (dup)
            continue;
        one_case(h, lens[i]);
        if (!h_case_end(h))
            return;
    }
}
