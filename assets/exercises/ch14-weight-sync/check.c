/* check.c - ch14-weight-sync, rank side (see ../harness.h). Every rank draws the same
 * tensor sizes and, per version, the same bit patterns from the seed, so each rank knows what
 * it must hold after a sync: the new version's bits (or, after a refusal, its old ones),
 * compared bit for bit, with the version number and the runtime's collective counters. */
#include "harness.h"
#include "api.h"

#define NT 6
#define GUARD 2
#define GUARD_BITS 0x7fc0beefu

static const char *const names[NT] = {"embed", "attn.qkv", "attn.out", "mlp.up", "mlp.down",
                                      "norm"};
static size_t sizes[NT];

static uint32_t bits_of(uint64_t seed, uint64_t version, int t, size_t i)
{
    uint64_t x = seed * 0x9e3779b97f4a7c15ull + version * 0xbf58476d1ce4e5b9ull +
                 (uint64_t)t * 0x94d049bb133111ebull + i * 0x2545f4914f6cdd1dull;
    x ^= x >> 31;
    x *= 0xd6e8feb86659fd93ull;
    x ^= x >> 32;
    switch (i % 97) {                   /* the awkward values, bit patterns kept exactly */
    case 3: return 0x80000000u;                         /* -0 */
    case 5: return 0x7fc00000u | (uint32_t)(x & 0x3fffff);   /* a NaN with a payload */
    case 7: return (uint32_t)(x & 0x7fffff);            /* a denormal */
    case 11: return 0xff800000u;                        /* -inf */
    default: return (uint32_t)x & 0xbfffffffu;          /* finite, |x| < 2 */
    }
}

static void fill(uint32_t *dst, uint64_t seed, uint64_t version, int t, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = bits_of(seed, version, t, i);
}

static const char *verdict_name(int v)
{
    return v == WS_OK ? "WS_OK" : v == WS_STALE ? "WS_STALE" : v == WS_MISMATCH ?
           "WS_MISMATCH" : "not a verdict";
}

typedef struct state {
    uint32_t *data[NT];     /* this rank's tensors (+ GUARD words) */
    uint64_t held;          /* the version whose bits they hold */
    uint64_t version;       /* what the rank passes as *version */
} state;

/* One sync: the trainer offers version `offer`; expect is the verdict every rank must return;
 * mismatch_rank's tensor 2 is handed over one float short (-1: none). */
static void one_sync(harness *h, state *s, int trainer, uint64_t offer, size_t bucket,
                     int expect, int mismatch_rank, const char *what)
{
    int me_trains = h->rank == trainer;
    h_case(h, "N=%d, trainer rank %d, %s", h->size, trainer, what);
    ws_tensor t[NT];
    size_t total = 0;
    for (int i = 0; i < NT; i++) {
        if (me_trains)
            fill(s->data[i], h->seed, offer, i, sizes[i]);
        t[i].name = names[i];
        t[i].data = (float *)s->data[i];
        t[i].numel = sizes[i] - (h->rank == mismatch_rank && i == 2);
        total += sizes[i];
        for (int g = 0; g < GUARD; g++)
            s->data[i][sizes[i] + g] = GUARD_BITS;
    }
    uint64_t before = s->version;
    if (me_trains)
        s->version = s->held = offer;
    uint64_t v = s->version;
    int rc = weight_sync(h->c, trainer, t, NT, bucket, &v);
    mlsys_counters k = *mlsys_get_counters(h->c);
    h_returned(h, rc < 0 ? rc : 0, "weight_sync");
    const char *role = me_trains ? "trainer" : "generator";
    if (rc != expect) {
        char who[64];
        snprintf(who, sizeof who, "%s version %llu", me_trains ? "offering" : "holding",
                 (unsigned long long)(me_trains ? offer : before));
        h_fail(h, "rank %d (%s, %s): weight_sync returned %d (%s), expected %d (%s), the "
               "verdict every rank must agree on: the trainer offered version %llu%s", h->rank,
               role, who, rc, verdict_name(rc), expect, verdict_name(expect),
               (unsigned long long)offer, mismatch_rank >= 0 ? ", and one generator's tensor "
               "attn.out is one float short" : "");
        return;
    }
    uint64_t want_v = me_trains ? offer : expect == WS_OK ? offer : before;
    if (v != want_v) {
        h_fail(h, "rank %d (%s): *version is %llu after the sync, expected %llu", h->rank, role,
               (unsigned long long)v, (unsigned long long)want_v);
        return;
    }
    uint64_t want_held = me_trains || expect == WS_OK ? offer : s->held;
    uint32_t *ref = malloc(70001 * sizeof(uint32_t));
    if (!ref)
        abort();
    for (int i = 0; i < NT && !h->failed; i++) {
        fill(ref, h->seed, want_held, i, sizes[i]);
        for (size_t e = 0; e < sizes[i]; e++)
            if (s->data[i][e] != ref[e]) {
                float fe, fg;
                memcpy(&fe, &ref[e], 4);
                memcpy(&fg, &s->data[i][e], 4);
                h_fail(h, "rank %d (%s), tensor %s (t[%d]), element %zu: expected bits 0x%08x "
                       "(%g, version %llu's), got 0x%08x (%g)%s", h->rank, role, names[i], i, e,
                       ref[e], (double)fe, (unsigned long long)want_held, s->data[i][e],
                       (double)fg, expect != WS_OK ? ": a refused sync must leave the weights "
                       "as they were" : me_trains ? ": the trainer's own weights changed" : "");
                break;
            }
        for (int g = 0; g < GUARD && !h->failed; g++)
            if (s->data[i][sizes[i] + g] != GUARD_BITS)
                h_fail(h, "rank %d (%s) wrote past the end of tensor %s (element %zu of %zu)",
                       h->rank, role, names[i], sizes[i] + (size_t)g, sizes[i]);
    }
    free(ref);
    if (h->failed)
        return;
    uint64_t nb = expect == WS_OK ? (total * 4 + bucket - 1) / bucket : 0;
    uint64_t bc = k.coll_calls[MLSYS_COLL_BROADCAST], ar = k.coll_calls[MLSYS_COLL_ALLREDUCE];
    if (bc != 1 + nb || ar != 1) {
        h_fail(h, "rank %d (%s) made %llu broadcast%s and %llu all_reduce%s; expected 1 + %llu "
               "broadcasts (the header, then %s) and 1 all_reduce (the agreement)", h->rank,
               role, (unsigned long long)bc, bc == 1 ? "" : "s", (unsigned long long)ar,
               ar == 1 ? "" : "s", (unsigned long long)nb, expect == WS_OK ?
               "ceil(total bytes / bucket bytes) buckets" : "no bucket: the sync was refused");
        return;
    }
    s->held = want_held;
    s->version = v;
}

static void ex_check_main(harness *h)
{
    mlsys_rng g;
    mlsys_rng_seed(&g, h->seed);
    static const size_t caps[NT] = {70000, 20000, 9000, 40000, 40000, 3};
    for (int i = 0; i < NT; i++)
        sizes[i] = 1 + (size_t)(mlsys_rng_u64(&g) % caps[i]);
    state s;
    for (int i = 0; i < NT; i++) {
        s.data[i] = malloc((sizes[i] + GUARD) * sizeof(uint32_t));
        if (!s.data[i])
            abort();
    }
    /* one trainer for the whole run: rank 0 on 2 ranks, the last rank on 3 (so a learner's
     * code cannot take the trainer for rank 0); the generators start from versions 4 (and 2
     * on the other generator of 3 ranks) with their bits */
    int n = h->size, tr = n == 2 ? 0 : n - 1;
    s.version = s.held = h->rank == 0 && n > 2 ? 2 : 4;
    for (int i = 0; i < NT; i++)
        fill(s.data[i], h->seed, s.held, i, sizes[i]);
    one_sync(h, &s, tr, 5, 4096, WS_OK, -1, "version 5 over 4, buckets of 4 KB");
    if (!h_case_end(h))
        goto out;
    one_sync(h, &s, tr, 6, 65536, WS_OK, -1, "version 6, buckets of 64 KB");
    if (!h_case_end(h))
        goto out;
    one_sync(h, &s, tr, 7, 1 << 20, WS_OK, -1, "version 7, buckets of 1 MB");
    if (!h_case_end(h))
        goto out;
    one_sync(h, &s, tr, 3, 65536, WS_STALE, -1, "a stale version: 3 offered over 7");
    if (!h_case_end(h))
        goto out;
    one_sync(h, &s, tr, 7, 65536, WS_STALE, -1, "the same version again: 7 over 7");
    if (!h_case_end(h))
        goto out;
    if (n >= 3) {
        if (h->rank == 1)
            s.version = 8;                  /* this generator says it has 8 already */
        one_sync(h, &s, tr, 8, 65536, WS_STALE, -1, "version 8 while rank 1 holds 8 already");
        if (h->rank == 1)
            s.version = 7;
        if (!h_case_end(h))
            goto out;
    }
    one_sync(h, &s, tr, 8, 65536, WS_MISMATCH, 1, "rank 1's tensor attn.out one float short");
    if (!h_case_end(h))
        goto out;
    one_sync(h, &s, tr, 9, 12284, WS_OK, -1, "version 9 in buckets of 12,284 bytes");
    h_case_end(h);
out:
    for (int i = 0; i < NT; i++)
        free(s.data[i]);
}
