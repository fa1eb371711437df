/* check.c - ch09-block-alloc, one rank (see ../harness.h). The learner's functions alone
 * against a model of the pool on drawn put/take/get sequences; the curriculum's LRU scenario
 * on a real paged cache of 3 blocks; then two real caches (core/llm/paged.c), the learner's
 * allocator and the reference, in lockstep on a drawn workload: the same hits, reservations
 * and evictions, and llm_paged_check after every operation. */
#include "harness.h"
#include "api.h"

enum { M_OUT, M_FREE, M_CACHED };

static void model_case(harness *h, int n, int nops)
{
    h_case(h, "the allocator alone: %d blocks, %d operations", n, nops);
    mlsys_rng g;
    mlsys_rng_seed(&g, h->seed * 131u + (uint64_t)n);
    int *st = malloc(sizeof(int) * (size_t)n), *when = malloc(sizeof(int) * (size_t)n);
    if (!st || !when)
        abort();
    for (int b = 0; b < n; b++)
        st[b] = M_FREE, when[b] = -1;
    void *a = my_block_alloc.create(n);
    int in_pool = n;
    for (int op = 1; op <= nops && !h->failed; op++) {
        int r = (int)(mlsys_rng_u64(&g) % 10), pick = (int)(mlsys_rng_u64(&g) % (uint64_t)n);
        int cached = (int)(mlsys_rng_u64(&g) % 3 != 0);
        if (r < 4) {                                    /* get */
            int nf = 0, oldest = -1;
            for (int b = 0; b < n; b++) {
                nf += st[b] == M_FREE;
                if (st[b] == M_CACHED && (oldest < 0 || when[b] < when[oldest]))
                    oldest = b;
            }
            int b = my_block_alloc.get(a);
            if (b < -1 || b >= n)
                h_fail(h, "operation %d, get(): returned %d, not a block (0..%d) or -1", op, b,
                       n - 1);
            else if (b == -1 && in_pool > 0)
                h_fail(h, "operation %d, get(): returned -1, but %d blocks are in the pool", op,
                       in_pool);
            else if (b >= 0 && st[b] == M_OUT)
                h_fail(h, "operation %d, get(): returned block %d, which is not in the pool "
                       "(handed out already, or taken)", op, b);
            else if (b >= 0 && st[b] == M_CACHED && nf > 0)
                h_fail(h, "operation %d, get(): returned block %d, which is cached (put at "
                       "operation %d), while %d uncached block%s in the pool", op, b, when[b],
                       nf, nf == 1 ? " is" : "s are");
            else if (b >= 0 && st[b] == M_CACHED && b != oldest)
                h_fail(h, "operation %d, get(): returned cached block %d (put at operation %d), "
                       "but cached block %d was put longer ago (operation %d)", op, b, when[b],
                       oldest, when[oldest]);
            if (b >= 0 && b < n && st[b] != M_OUT) {
                st[b] = M_OUT;
                in_pool--;
            }
        } else if (r < 8) {                             /* put a block that is out */
            int b = -1;
            for (int k = 0; k < n && b < 0; k++)
                if (st[(pick + k) % n] == M_OUT)
                    b = (pick + k) % n;
            if (b < 0)
                continue;
            my_block_alloc.put(a, b, cached);
            st[b] = cached ? M_CACHED : M_FREE;
            when[b] = op;
            in_pool++;
        } else {                                        /* take a cached block back */
            int b = -1;
            for (int k = 0; k < n && b < 0; k++)
                if (st[(pick + k) % n] == M_CACHED)
                    b = (pick + k) % n;
            if (b < 0)
                continue;
            my_block_alloc.take(a, b);
            st[b] = M_OUT;
            in_pool--;
        }
        int c = h->failed ? in_pool : my_block_alloc.count(a);
        if (c != in_pool)
            h_fail(h, "after operation %d: count() = %d, but the pool holds %d blocks", op, c,
                   in_pool);
    }
    my_block_alloc.destroy(a);
    h_returned(h, 0, "my_block_alloc");
    free(st);
    free(when);
}

/* ---- part 2: the real cache, the learner's allocator against the reference ---- */

#define NSEQ 4
#define BS 4
#define MAXLEN 32

typedef struct pair {
    llm_kv k[2];                /* 0: the reference allocator, 1: the learner's */
    int tok[NSEQ][MAXLEN], len[NSEQ];
} pair;

/* Compare the two caches after an operation; 0 when they agree and the learner's is sound. */
static int same(harness *h, pair *p, int op, const char *what)
{
    char err[256];
    if (llm_paged_check(&p->k[1], err, sizeof err) != 0) {
        h_fail(h, "operation %d (%s): the cache's checker: %s", op, what, err);
        return 0;
    }
    llm_paged_stats a, b;
    llm_paged_stats_get(&p->k[0], &a);
    llm_paged_stats_get(&p->k[1], &b);
    if (a.hits != b.hits || a.evictions != b.evictions || a.cached != b.cached ||
        a.free != b.free) {
        h_fail(h, "operation %d (%s): with your allocator %ld prefix-hit blocks, %ld "
               "evictions, %d cached and %d uncached blocks in the pool; with the reference "
               "%ld, %ld, %d and %d", op, what, b.hits, b.evictions, b.cached, b.free, a.hits,
               a.evictions, a.cached, a.free);
        return 0;
    }
    return 1;
}

static void cache_case(harness *h, const llm_config *c, int nblocks, int nops)
{
    h_case(h, "the real paged cache: %d blocks of %d tokens, %d tables, %d operations",
           nblocks, BS, NSEQ, nops);
    mlsys_rng g;
    mlsys_rng_seed(&g, h->seed * 977u + (uint64_t)nblocks);
    pair *p = calloc(1, sizeof *p);
    if (!p)
        abort();
    char err[256];
    for (int i = 0; i < 2; i++) {
        llm_paged_opts o = {BS, nblocks, NSEQ, MAXLEN, 0,
                            i ? &my_block_alloc : &llm_block_alloc_lru, NULL, 0};
        if (llm_kv_init_paged(&p->k[i], c, &o, err, sizeof err) != 0) {
            h_fail(h, "rank %d: the paged cache: %s", h->rank, err);
            free(p);
            return;
        }
    }
    int fam[3][12];
    for (int f = 0; f < 3; f++)
        for (int i = 0; i < 12; i++)
            fam[f][i] = 1 + (int)(mlsys_rng_u64(&g) % 60);
    for (int op = 1; op <= nops && !h->failed; op++) {
        int s = (int)(mlsys_rng_u64(&g) % NSEQ), r = (int)(mlsys_rng_u64(&g) % 20);
        char what[96];
        if (p->len[s] == 0) {                           /* a new request on table s */
            int f = (int)(mlsys_rng_u64(&g) % 3), keep = (int)(mlsys_rng_u64(&g) % 13);
            int n = keep + 1 + (int)(mlsys_rng_u64(&g) % (uint64_t)(MAXLEN - 4 - keep));
            for (int i = 0; i < n; i++)
                p->tok[s][i] = i < keep ? fam[f][i] : 1 + (int)(mlsys_rng_u64(&g) % 60);
            int hit[2], ok[2];
            for (int i = 0; i < 2; i++) {
                hit[i] = llm_paged_attach(&p->k[i], s, p->tok[s], n);
                ok[i] = p->k[i].ops->reserve(&p->k[i], s, n) == 0;
                if (ok[i])
                    llm_paged_commit(&p->k[i], s, p->tok[s], n);
                else
                    p->k[i].ops->release(&p->k[i], s);
            }
            snprintf(what, sizeof what, "a prompt of %d tokens on table %d", n, s);
            if (hit[0] != hit[1] || ok[0] != ok[1]) {
                h_fail(h, "operation %d (%s): your allocator's cache found %d tokens in the "
                       "prefix cache and %s; the reference's found %d and %s", op, what, hit[1],
                       ok[1] ? "reserved the rest" : "could not reserve", hit[0],
                       ok[0] ? "reserved the rest" : "could not reserve");
                break;
            }
            p->len[s] = ok[0] ? n : 0;
        } else if (r < 7) {                             /* finished: release */
            for (int i = 0; i < 2; i++)
                p->k[i].ops->release(&p->k[i], s);
            p->len[s] = 0;
            snprintf(what, sizeof what, "table %d released", s);
        } else if (r < 16) {                            /* decode a few tokens */
            int k = 1 + (int)(mlsys_rng_u64(&g) % 6), n = p->len[s] + k;
            if (n > MAXLEN)
                continue;
            for (int i = p->len[s]; i < n; i++)
                p->tok[s][i] = 1 + (int)(mlsys_rng_u64(&g) % 60);
            int ok[2];
            for (int i = 0; i < 2; i++) {
                ok[i] = p->k[i].ops->reserve(&p->k[i], s, n) == 0;
                if (ok[i])
                    llm_paged_commit(&p->k[i], s, p->tok[s], n);
            }
            snprintf(what, sizeof what, "table %d grows to %d tokens", s, n);
            if (ok[0] != ok[1]) {
                h_fail(h, "operation %d (%s): your allocator's cache %s, the reference's %s",
                       op, what, ok[1] ? "reserved" : "could not reserve",
                       ok[0] ? "did" : "could not");
                break;
            }
            if (ok[0])
                p->len[s] = n;
        } else {                                        /* fork into an empty table */
            int t = -1;
            for (int i = 0; i < NSEQ && t < 0; i++)
                if (p->len[i] == 0)
                    t = i;
            if (t < 0)
                continue;
            for (int i = 0; i < 2; i++)
                llm_paged_fork(&p->k[i], s, t, p->len[s]);
            memcpy(p->tok[t], p->tok[s], sizeof(int) * (size_t)p->len[s]);
            p->len[t] = p->len[s];
            snprintf(what, sizeof what, "table %d forked into table %d", s, t);
        }
        if (!same(h, p, op, what))
            break;
    }
    h_returned(h, 0, "my_block_alloc");
    for (int i = 0; i < 2; i++)
        llm_kv_free(&p->k[i]);
    free(p);
}

/* The curriculum's scenario on a real cache of 3 one-block entries (4 tokens a block):
 * use A, B, C; use A again; pin B; a new D evicts C; with A, B and D held a new E finds
 * nothing to evict; unpin B; E evicts B. */
static void scenario_case(harness *h, const llm_config *c)
{
    h_case(h, "the LRU scenario: a pool of 3 blocks, entries A B C D E");
    llm_kv kv;
    char err[256];
    llm_paged_opts o = {BS, 3, NSEQ, 8, 0, &my_block_alloc, NULL, 0};
    if (llm_kv_init_paged(&kv, c, &o, err, sizeof err) != 0) {
        h_fail(h, "rank %d: the paged cache: %s", h->rank, err);
        return;
    }
    int e[5][BS + 1];
    for (int k = 0; k < 5; k++)
        for (int i = 0; i <= BS; i++)
            e[k][i] = 1 + 10 * k + i;
    const char *step = "";
#define HAS(k) (llm_paged_match(&kv, e[k], BS + 1, NULL) == BS)
    /* insert A, B, C: each computed on table 0, then released (cached in the pool) */
    for (int k = 0; k < 3; k++) {
        if (kv.ops->reserve(&kv, 0, BS) != 0) {
            h_fail(h, "inserting %c into an empty pool of 3 failed", 'A' + k);
            goto out;
        }
        llm_paged_commit(&kv, 0, e[k], BS);
        kv.ops->release(&kv, 0);
    }
    llm_paged_attach(&kv, 0, e[0], BS + 1);         /* touch A */
    kv.ops->release(&kv, 0);
    llm_paged_attach(&kv, 1, e[1], BS + 1);         /* pin B */
    step = "insert D (A was used again, B is pinned)";
    if (kv.ops->reserve(&kv, 2, BS) != 0) {
        h_fail(h, "%s: the cache found no block to hand out", step);
        goto out;
    }
    llm_paged_commit(&kv, 2, e[3], BS);
    if (HAS(2) || !HAS(0) || !HAS(1))
        h_fail(h, "%s: C must be evicted (the least recently used unpinned entry); still "
               "cached: A %s, B %s, C %s", step, HAS(0) ? "yes" : "no", HAS(1) ? "yes" : "no",
               HAS(2) ? "yes" : "no");
    if (h->failed)
        goto out;
    llm_paged_attach(&kv, 3, e[0], BS + 1);         /* pin A (D is held by table 2) */
    step = "insert E with A, B and D pinned";
    if (kv.ops->reserve(&kv, 0, BS) == 0) {
        h_fail(h, "%s: the cache handed out a block although every block is referenced", step);
        goto out;
    }
    kv.ops->release(&kv, 1);                        /* unpin B */
    step = "insert E after B was unpinned";
    if (kv.ops->reserve(&kv, 0, BS) != 0) {
        h_fail(h, "%s: the cache found no block, but B is in the pool", step);
        goto out;
    }
    llm_paged_commit(&kv, 0, e[4], BS);
    if (HAS(1))
        h_fail(h, "%s: B must be evicted (the only unpinned entry)", step);
    if (!h->failed && llm_paged_check(&kv, err, sizeof err) != 0)
        h_fail(h, "after the scenario: the cache's checker: %s", err);
#undef HAS
out:
    h_returned(h, 0, "my_block_alloc");
    llm_kv_free(&kv);
}

static void ex_check_main(harness *h)
{
    model_case(h, 6, 200);
    if (!h_case_end(h))
        return;
    model_case(h, 32, 2000);
    if (!h_case_end(h))
        return;
    llm_config c = {.dim = 8, .hidden_dim = 16, .n_layers = 1, .n_heads = 2, .n_kv_heads = 2,
                    .vocab_size = 64, .seq_len = MAXLEN, .shared_classifier = 1};
    char err[256];
    if (llm_config_check(&c, err, sizeof err) != 0)
        abort();
    scenario_case(h, &c);
    if (!h_case_end(h))
        return;
    static const int nb[] = {8, 12, 20};
    for (int i = 0; i < 3; i++) {
        cache_case(h, &c, nb[i], 400);
        if (!h_case_end(h))
            return;
    }
}
