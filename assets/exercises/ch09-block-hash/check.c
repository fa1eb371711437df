/* check.c - ch09-block-hash, one rank (see ../harness.h). On drawn blocks: deterministic, and
 * changed by each token, a swap of two tokens and the parent. Then a real paged cache with
 * 4-token blocks registers drawn prompts sharing blocks (also after different prefixes); for
 * each drawn query the learner's chain of hashes must predict exactly the tokens
 * llm_paged_match finds. */
#include "harness.h"
#include "api.h"
#include "llm/engine.h"

static int rnd_tok(mlsys_rng *g)
{
    return 1 + (int)(mlsys_rng_u64(g) % 50000);
}

static void props_case(harness *h)
{
    h_case(h, "the hash alone on 200 drawn blocks");
    mlsys_rng g;
    mlsys_rng_seed(&g, h->seed * 3u + 1u);
    int t[32];
    for (int c = 0; c < 200 && !h->failed; c++) {
        int n = 2 + (int)(mlsys_rng_u64(&g) % 15);
        uint64_t parent = c % 4 == 0 ? ROOT_HASH : mlsys_rng_u64(&g);
        for (int i = 0; i < n; i++)
            t[i] = rnd_tok(&g);
        uint64_t h0 = block_hash(parent, t, n);
        if (block_hash(parent, t, n) != h0) {
            h_fail(h, "block %d (%d tokens): two calls on the same block give different hashes",
                   c, n);
            break;
        }
        for (int i = 0; i < n && !h->failed; i++) {
            int old = t[i];
            t[i] = old + 1 + (int)(mlsys_rng_u64(&g) % 1000);
            if (block_hash(parent, t, n) == h0)
                h_fail(h, "block %d (%d tokens): changing token %d from %d to %d leaves the "
                       "hash at %016llx", c, n, i, old, t[i], (unsigned long long)h0);
            t[i] = old;
        }
        int i = (int)(mlsys_rng_u64(&g) % (uint64_t)n), j = (i + 1) % n;
        if (!h->failed && t[i] != t[j]) {
            int x = t[i];
            t[i] = t[j];
            t[j] = x;
            if (block_hash(parent, t, n) == h0)
                h_fail(h, "block %d (%d tokens): swapping tokens %d and %d (%d and %d) leaves "
                       "the hash unchanged: the order matters", c, n, i, j, t[j], t[i]);
            t[j] = t[i];
            t[i] = x;
        }
        uint64_t other = parent ^ (1ull << (mlsys_rng_u64(&g) % 64));
        if (!h->failed && block_hash(other, t, n) == h0)
            h_fail(h, "block %d (%d tokens): parent %016llx and parent %016llx give the same "
                   "hash: a block's key must depend on the blocks before it", c, n,
                   (unsigned long long)parent, (unsigned long long)other);
    }
    h_returned(h, 0, "block_hash");
}

#define BS 4
#define MAXLEN 32
#define NREG 6

static void cache_case(harness *h, int k)
{
    h_case(h, "the real paged cache, blocks of %d tokens, workload %d", BS, k);
    mlsys_rng g;
    mlsys_rng_seed(&g, h->seed * 7u + (uint64_t)k * 101u);
    llm_config c = {.dim = 8, .hidden_dim = 16, .n_layers = 1, .n_heads = 2, .n_kv_heads = 2,
                    .vocab_size = 64, .seq_len = MAXLEN, .shared_classifier = 1};
    char err[256];
    llm_kv kv;
    llm_paged_opts o = {BS, NREG * MAXLEN / BS, NREG, MAXLEN, 0, NULL, NULL, 0};
    if (llm_config_check(&c, err, sizeof err) || llm_kv_init_paged(&kv, &c, &o, err, sizeof err)) {
        h_fail(h, "rank %d: the paged cache: %s", h->rank, err);
        return;
    }
    /* blocks to build prompts from: block A, B, C, D; prompts are sequences of them with
     * random tails, so the same block appears after different prefixes */
    int blk[4][BS];
    for (int b = 0; b < 4; b++)
        for (int i = 0; i < BS; i++)
            blk[b][i] = 1 + (int)(mlsys_rng_u64(&g) % 60);
    int tok[NREG][MAXLEN], len[NREG];
    uint64_t known[NREG * MAXLEN / BS];
    int nknown = 0;
    for (int s = 0; s < NREG && !h->failed; s++) {
        int nb = 1 + (int)(mlsys_rng_u64(&g) % 5);
        len[s] = 0;
        for (int b = 0; b < nb; b++) {
            int which = (int)(mlsys_rng_u64(&g) % 4);
            memcpy(tok[s] + len[s], blk[which], sizeof blk[which]);
            len[s] += BS;
        }
        int tail = 1 + (int)(mlsys_rng_u64(&g) % 3);
        for (int i = 0; i < tail; i++)
            tok[s][len[s]++] = 1 + (int)(mlsys_rng_u64(&g) % 60);
        llm_paged_attach(&kv, s, tok[s], len[s]);
        if (kv.ops->reserve(&kv, s, len[s]) != 0) {
            h_fail(h, "rank %d: the cache could not hold prompt %d (a bug of the check)",
                   h->rank, s);
            break;
        }
        llm_paged_commit(&kv, s, tok[s], len[s]);
        uint64_t hh = ROOT_HASH;
        for (int b = 0; b + BS <= len[s]; b += BS) {
            hh = block_hash(hh, tok[s] + b, BS);
            known[nknown++] = hh;
        }
    }
    /* queries: a few blocks of the same alphabet and a tail; predict the hits */
    for (int qn = 0; qn < 60 && !h->failed; qn++) {
        int q[MAXLEN], n = 0, nb = 1 + (int)(mlsys_rng_u64(&g) % 6);
        for (int b = 0; b < nb; b++) {
            int which = (int)(mlsys_rng_u64(&g) % 4);
            memcpy(q + n, blk[which], sizeof blk[which]);
            n += BS;
        }
        q[n++] = 1 + (int)(mlsys_rng_u64(&g) % 60);
        int real = llm_paged_match(&kv, q, n, NULL);
        uint64_t hh = ROOT_HASH;
        int pred = 0;
        for (int b = 0; b + BS <= n - 1; b += BS) {
            hh = block_hash(hh, q + b, BS);
            int found = 0;
            for (int i = 0; i < nknown && !found; i++)
                found = known[i] == hh;
            if (!found)
                break;
            pred += BS;
        }
        if (pred != real) {
            char blocks[64] = "";
            for (int b = 0; b + BS < n; b += BS)
                for (int w = 0; w < 4; w++)
                    if (!memcmp(q + b, blk[w], sizeof blk[w]))
                        snprintf(blocks + strlen(blocks), sizeof blocks - strlen(blocks), "%c",
                                 'A' + w);
            h_fail(h, "query %d (blocks %s + 1 token): your hashes find the first %d block%s "
                   "cached, the cache finds %d: block %d is where they part", qn, blocks,
                   pred / BS, pred == BS ? "" : "s", real / BS, (pred < real ? pred : real) / BS);
        }
    }
    h_returned(h, 0, "block_hash");
    int same = 1;
    for (int t = 0; t < 8; t++) {
        int x[BS];
        for (int i = 0; i < BS; i++)
            x[i] = 1 + (int)(mlsys_rng_u64(&g) % 60);
        same &= block_hash(ROOT_HASH, x, BS) == llm_paged_hash(LLM_PAGED_ROOT_HASH, x, BS);
    }
    if (!h->failed && k == 0)
        h_info(h, "your hash %s the engine's llm_paged_hash bit for bit%s", same ? "equals" :
               "differs from", same ? "" : " (allowed: any chained hash keys the cache)");
    llm_kv_free(&kv);
}

static void ex_check_main(harness *h)
{
    props_case(h);
    if (!h_case_end(h))
        return;
    for (int k = 0; k < 3; k++) {
        cache_case(h, k);
        if (!h_case_end(h))
            return;
    }
}
