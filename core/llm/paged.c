/* paged.c - the paged KV cache: the pool of llm_kv cut into fixed-size blocks, a block table
 * per sequence, reference counts, the prefix cache (full blocks found again by a hash chain
 * over (parent hash, block tokens), confirmed by comparing tokens, as vLLM does), copy on
 * write for a shared partial block, and the llm_kv_ops through which attention reads keys
 * and values. Which free block comes next is the allocator's business (block_alloc.c). */
#include "engine.h"
#include "llm_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct pg_block {
    int refs;                 /* tables holding it */
    int registered;           /* 1: in the hash table, a prefix-cache entry */
    int in_pool;              /* 1: the allocator holds it (exactly when refs == 0) */
    int hnext;                /* next block of its hash bucket, -1 */
    uint64_t hash;            /* chain hash, when registered */
} pg_block;

typedef struct pg_table {
    int *blk;                 /* [max_blocks] physical block of logical block i */
    uint64_t *hash;           /* [max_blocks] chain hash of logical block i, when hashed */
    int n_blk;                /* blocks held: ceil(n_tok / bs) */
    int n_tok;                /* positions mapped */
    int n_hashed;             /* leading full blocks whose chain hash is known */
    int owner;                /* the id memory events name (a request id) */
} pg_table;

typedef struct pg {
    int bs, n_blocks, max_len, max_blocks, prefix_cache;
    pg_block *b;              /* [n_blocks] */
    int *btok;                /* [n_blocks, bs] tokens of registered blocks */
    int *bucket;              /* [n_buckets] first block of each hash chain, -1 */
    uint64_t mask;            /* n_buckets - 1 */
    uint64_t hmask;           /* the bits of a chain hash kept (all but in tests) */
    pg_table *t;              /* [n_seqs] */
    const llm_block_alloc_ops *alloc;
    void *ast;
    mlsys_comm *comm;
    int pool;
    uint64_t block_bytes;
    long allocs, hits, evictions, cows;
} pg;

static const llm_kv_ops paged_ops;

/* ---- events ---- */

static void emit(pg *p, int op, int block, int owner, int refs, int index, int aux, int cached)
{
    if (!p->comm)
        return;
    mlsys_mem_info m = {(int16_t)p->pool, (int8_t)op, (uint8_t)cached, block, owner, refs,
                        index, aux};
    mlsys_emit_mem(p->comm, &m, p->block_bytes, NULL);
}

/* ---- the hash chain ---- */

uint64_t llm_paged_hash(uint64_t parent, const int *tokens, int n)
{
    unsigned char buf[8];
    for (int i = 0; i < 8; i++)
        buf[i] = (unsigned char)(parent >> (8 * i));
    uint64_t h = llm_fnv1a64(buf, 8, LLM_FNV_INIT);
    for (int k = 0; k < n; k++) {
        uint32_t v = (uint32_t)tokens[k];
        unsigned char tb[4] = {(unsigned char)v, (unsigned char)(v >> 8),
                               (unsigned char)(v >> 16), (unsigned char)(v >> 24)};
        h = llm_fnv1a64(tb, 4, h);
    }
    return h;
}

/* The registered block with chain hash h and exactly these tokens, or -1. */
static int lookup(const pg *p, uint64_t h, const int *tokens)
{
    for (int b = p->bucket[h & p->mask]; b >= 0; b = p->b[b].hnext)
        if (p->b[b].hash == h &&
            !memcmp(p->btok + (size_t)b * p->bs, tokens, (size_t)p->bs * sizeof(int)))
            return b;
    return -1;
}

static void do_register(pg *p, int b, uint64_t h, const int *tokens)
{
    if (!p->prefix_cache || p->b[b].registered || lookup(p, h, tokens) >= 0)
        return;               /* one entry per content: a duplicate block stays private */
    memcpy(p->btok + (size_t)b * p->bs, tokens, (size_t)p->bs * sizeof(int));
    p->b[b].hash = h;
    p->b[b].registered = 1;
    p->b[b].hnext = p->bucket[h & p->mask];
    p->bucket[h & p->mask] = b;
}

static void unregister(pg *p, int b)
{
    int *link = &p->bucket[p->b[b].hash & p->mask];
    while (*link >= 0 && *link != b)
        link = &p->b[*link].hnext;
    if (*link == b)
        *link = p->b[b].hnext;
    p->b[b].hnext = -1;
    p->b[b].registered = 0;
}

/* ---- blocks in and out of the pool ---- */

/* A block from the allocator for owner's table entry index; a cached block it hands out
 * is evicted (its entry forgotten). -1 when the pool is empty. */
static int take_block(pg *p, int owner, int index)
{
    int b = p->alloc->get(p->ast);
    if (b < 0 || b >= p->n_blocks || !p->b[b].in_pool) {
        if (b >= 0)
            fprintf(stderr, "paged kv: allocator %s handed out block %d, which is not in the "
                    "pool\n", p->alloc->name, b);
        return -1;
    }
    p->b[b].in_pool = 0;
    if (p->b[b].registered) {
        unregister(p, b);
        p->evictions++;
        emit(p, MLSYS_MEM_EVICT, b, -1, 0, -1, -1, 0);
    }
    p->b[b].refs = 1;
    p->allocs++;
    emit(p, MLSYS_MEM_ALLOC, b, owner, 1, index, -1, 0);
    return b;
}

static void drop_ref(pg *p, int b, int owner, int index)
{
    pg_block *k = &p->b[b];
    k->refs--;
    if (k->refs == 0) {
        k->in_pool = 1;
        p->alloc->put(p->ast, b, k->registered);
    }
    emit(p, MLSYS_MEM_FREE, b, owner, k->refs, index, -1, k->refs == 0 && k->registered);
}

/* ---- the llm_kv_ops ---- */

static int paged_reserve(llm_kv *kv, int seq, int n)
{
    pg *p = kv->impl;
    if (seq < 0 || seq >= kv->n_seqs || n < 0 || n > p->max_len)
        return -1;
    pg_table *t = &p->t[seq];
    if (n <= t->n_tok)
        return 0;
    int need = (n + p->bs - 1) / p->bs - t->n_blk;
    int last = t->n_blk - 1;
    /* a partial last block that another table holds, or that the prefix cache lists (a
     * fork of a prefix ending inside a block its parent filled), must not change */
    int cow = t->n_tok % p->bs != 0 &&
              (p->b[t->blk[last]].refs > 1 || p->b[t->blk[last]].registered);
    if (p->alloc->count(p->ast) < need + cow)
        return -1;            /* nothing changed */
    if (cow) {
        /* the partial last block is shared (a fork): new positions would overwrite what
         * the other tables read, so this table gets a copy first */
        int old = t->blk[last];
        int nb = take_block(p, t->owner, last);
        if (nb < 0)
            return -1;
        int used = t->n_tok % p->bs;
        for (int l = 0; l < kv->n_layers; l++) {
            memcpy(llm_kv_k(kv, l, nb * p->bs), llm_kv_k(kv, l, old * p->bs),
                   (size_t)used * kv->kv_dim * sizeof(float));
            memcpy(llm_kv_v(kv, l, nb * p->bs), llm_kv_v(kv, l, old * p->bs),
                   (size_t)used * kv->kv_dim * sizeof(float));
        }
        int cached = 0;
        if (--p->b[old].refs == 0) {      /* only the prefix cache kept it: to the pool */
            p->b[old].in_pool = 1;
            p->alloc->put(p->ast, old, 1);
            cached = 1;
        }
        t->blk[last] = nb;
        p->cows++;
        emit(p, MLSYS_MEM_COW, old, t->owner, p->b[old].refs, last, nb, cached);
    }
    for (int i = 0; i < need; i++) {
        int b = take_block(p, t->owner, t->n_blk);
        if (b < 0)
            return -1;        /* cannot happen: counted above */
        t->blk[t->n_blk++] = b;
    }
    __atomic_store_n(&t->n_tok, n, __ATOMIC_RELEASE);
    return 0;
}

static int paged_slot(const llm_kv *kv, int seq, int pos)
{
    const pg *p = kv->impl;
    if (seq < 0 || seq >= kv->n_seqs)
        return -1;
    const pg_table *t = &p->t[seq];
    /* the overlap scheduler's planning may extend this table (n_tok, entries past the
     * ones read here) while a forward on another thread reads it */
    if (pos < 0 || pos >= __atomic_load_n(&t->n_tok, __ATOMIC_RELAXED))
        return -1;
    return t->blk[pos / p->bs] * p->bs + pos % p->bs;
}

static void paged_release(llm_kv *kv, int seq)
{
    pg *p = kv->impl;
    if (seq < 0 || seq >= kv->n_seqs)
        return;
    pg_table *t = &p->t[seq];
    /* last block first: the pool's LRU order then evicts a prefix's tail before its head */
    for (int i = t->n_blk - 1; i >= 0; i--)
        drop_ref(p, t->blk[i], t->owner, i);
    t->n_blk = t->n_tok = t->n_hashed = 0;
}

static void paged_destroy(llm_kv *kv)
{
    pg *p = kv->impl;
    if (!p)
        return;
    if (p->ast)
        p->alloc->destroy(p->ast);
    for (int s = 0; p->t && s < kv->n_seqs; s++) {
        free(p->t[s].blk);
        free(p->t[s].hash);
    }
    free(p->t);
    free(p->b);
    free(p->btok);
    free(p->bucket);
    free(p);
    kv->impl = NULL;
}

static const llm_kv_ops paged_ops = {
    "paged", paged_reserve, paged_slot, paged_release, paged_destroy,
};

int llm_kv_is_paged(const llm_kv *kv)
{
    return kv && kv->ops == &paged_ops;
}

int llm_kv_init_paged(llm_kv *kv, const llm_config *c, const llm_paged_opts *o, char *err,
                      size_t errlen)
{
    memset(kv, 0, sizeof *kv);
    int bs = o->block_size > 0 ? o->block_size : 16;
    int max_len = o->max_len > 0 ? o->max_len : c->seq_len;
    if (o->n_seqs < 1 || o->n_seqs > 65536 || bs > 4096 || max_len > c->seq_len) {
        snprintf(err, errlen, "paged kv: %d sequences, block size %d, %d positions: out of "
                 "range (seq_len %d)", o->n_seqs, bs, max_len, c->seq_len);
        return -1;
    }
    int max_blocks = (max_len + bs - 1) / bs;
    long long nb = o->n_blocks > 0 ? o->n_blocks : (long long)o->n_seqs * max_blocks;
    if (nb < 1 || nb * bs > (1LL << 30)) {
        snprintf(err, errlen, "paged kv: %lld blocks of %d tokens: out of range", nb, bs);
        return -1;
    }
    kv->n_layers = c->n_layers;
    kv->kv_dim = c->kv_dim;
    kv->n_seqs = o->n_seqs;
    kv->n_slots = (int)nb * bs;
    size_t per = (size_t)c->n_layers * kv->n_slots * (size_t)c->kv_dim;
    kv->bytes = 2 * per * sizeof(float);
    kv->k = mlsys_xcalloc(2 * per, sizeof(float));
    kv->v = kv->k + per;

    pg *p = mlsys_xcalloc(1, sizeof *p);
    p->bs = bs;
    p->n_blocks = (int)nb;
    p->max_len = max_len;
    p->max_blocks = max_blocks;
    p->prefix_cache = !o->no_prefix_cache;
    p->hmask = o->hash_bits > 0 && o->hash_bits < 64 ? (1ull << o->hash_bits) - 1 : ~0ull;
    p->b = mlsys_xcalloc((size_t)nb, sizeof *p->b);
    for (int b = 0; b < p->n_blocks; b++) {
        p->b[b].in_pool = 1;
        p->b[b].hnext = -1;
    }
    p->btok = mlsys_xcalloc((size_t)nb * bs, sizeof(int));
    size_t nbuck = 1;
    while (nbuck < (size_t)nb)
        nbuck <<= 1;
    p->bucket = mlsys_xmalloc(nbuck * sizeof(int));
    memset(p->bucket, 0xff, nbuck * sizeof(int));     /* all -1 */
    p->mask = nbuck - 1;
    p->t = mlsys_xcalloc((size_t)o->n_seqs, sizeof *p->t);
    for (int s = 0; s < o->n_seqs; s++) {
        p->t[s].blk = mlsys_xmalloc((size_t)max_blocks * sizeof(int));
        p->t[s].hash = mlsys_xmalloc((size_t)max_blocks * sizeof(uint64_t));
        p->t[s].owner = s;
    }
    p->alloc = o->alloc ? o->alloc : &llm_block_alloc_lru;
    p->ast = p->alloc->create(p->n_blocks);
    p->comm = o->comm;
    p->pool = o->pool;
    p->block_bytes = (uint64_t)(kv->bytes / (size_t)p->n_blocks);
    kv->impl = p;
    kv->ops = &paged_ops;
    if (p->comm) {
        /* POOL: index = tokens per block, aux = blocks, bytes = bytes per block */
        int role = o->named_role ? o->role : -1;
        mlsys_mem_info m = {(int16_t)p->pool, MLSYS_MEM_POOL, 0, -1, role, 0, bs, p->n_blocks};
        mlsys_emit_mem(p->comm, &m, p->block_bytes, "kv cache");
    }
    return 0;
}

/* ---- the prefix cache ---- */

/* Walk the chain of leading full blocks within tokens[0..n-1) while they are cached. With
 * tbl, attach each hit to it. Returns the blocks hit. */
static int walk_hits(pg *p, pg_table *tbl, const int *tokens, int n, int *from_pool)
{
    int limit = n > 0 ? (n - 1) / p->bs : 0, hits = 0, pool = 0;
    uint64_t h = LLM_PAGED_ROOT_HASH;
    if (!p->prefix_cache)
        limit = 0;
    for (int i = 0; i < limit; i++) {
        const int *bt = tokens + (size_t)i * p->bs;
        h = llm_paged_hash(h, bt, p->bs) & p->hmask;
        int b = lookup(p, h, bt);
        if (b < 0)
            break;
        hits++;
        if (p->b[b].refs == 0)
            pool++;
        if (tbl) {
            if (p->b[b].in_pool) {
                p->alloc->take(p->ast, b);
                p->b[b].in_pool = 0;
            }
            p->b[b].refs++;
            tbl->blk[tbl->n_blk] = b;
            tbl->hash[tbl->n_blk] = h;
            tbl->n_blk++;
            p->hits++;
            emit(p, MLSYS_MEM_SHARE, b, tbl->owner, p->b[b].refs, i, -1, 0);
        }
    }
    if (from_pool)
        *from_pool = pool;
    return hits;
}

int llm_paged_match(const llm_kv *kv, const int *tokens, int n, int *from_pool)
{
    pg *p = kv->impl;
    return walk_hits(p, NULL, tokens, n, from_pool) * p->bs;
}

int llm_paged_attach(llm_kv *kv, int seq, const int *tokens, int n)
{
    pg *p = kv->impl;
    if (seq < 0 || seq >= kv->n_seqs || p->t[seq].n_blk != 0)
        return -1;
    pg_table *t = &p->t[seq];
    int hits = walk_hits(p, t, tokens, n, NULL);
    t->n_tok = hits * p->bs;
    t->n_hashed = hits;
    return t->n_tok;
}

void llm_paged_commit(llm_kv *kv, int seq, const int *tokens, int n)
{
    pg *p = kv->impl;
    if (seq < 0 || seq >= kv->n_seqs)
        return;
    pg_table *t = &p->t[seq];
    int full = (n < t->n_tok ? n : t->n_tok) / p->bs;
    for (int i = t->n_hashed; i < full; i++) {
        uint64_t parent = i > 0 ? t->hash[i - 1] : LLM_PAGED_ROOT_HASH;
        const int *bt = tokens + (size_t)i * p->bs;
        t->hash[i] = llm_paged_hash(parent, bt, p->bs) & p->hmask;
        do_register(p, t->blk[i], t->hash[i], bt);
    }
    if (full > t->n_hashed)
        t->n_hashed = full;
}

int llm_paged_fork(llm_kv *kv, int parent, int child, int n)
{
    pg *p = kv->impl;
    if (parent < 0 || parent >= kv->n_seqs || child < 0 || child >= kv->n_seqs ||
        parent == child || p->t[child].n_blk != 0 || n < 0 || n > p->t[parent].n_tok)
        return -1;
    pg_table *a = &p->t[parent], *c = &p->t[child];
    int nb = (n + p->bs - 1) / p->bs;
    for (int i = 0; i < nb; i++) {
        int b = a->blk[i];
        p->b[b].refs++;
        c->blk[i] = b;
        c->hash[i] = a->hash[i];
        emit(p, MLSYS_MEM_SHARE, b, c->owner, p->b[b].refs, i, -1, 0);
    }
    c->n_blk = nb;
    c->n_tok = n;
    c->n_hashed = a->n_hashed < n / p->bs ? a->n_hashed : n / p->bs;
    return 0;
}

int llm_paged_truncate(llm_kv *kv, int seq, int n)
{
    pg *p = kv->impl;
    if (seq < 0 || seq >= kv->n_seqs || n < 0)
        return -1;
    pg_table *t = &p->t[seq];
    if (n >= t->n_tok)
        return 0;
    int keep = (n + p->bs - 1) / p->bs;
    for (int i = t->n_blk - 1; i >= keep; i--)     /* last first, as release does */
        drop_ref(p, t->blk[i], t->owner, i);
    t->n_blk = keep;
    __atomic_store_n(&t->n_tok, n, __ATOMIC_RELEASE);
    if (t->n_hashed > n / p->bs)
        t->n_hashed = n / p->bs;
    return 0;
}

void llm_paged_set_owner(llm_kv *kv, int seq, int owner, const char *label)
{
    pg *p = kv->impl;
    if (seq < 0 || seq >= kv->n_seqs)
        return;
    p->t[seq].owner = owner;
    if (p->comm) {
        mlsys_mem_info m = {(int16_t)p->pool, MLSYS_MEM_OWNER, 0, -1, owner, 0, -1, -1};
        mlsys_emit_mem(p->comm, &m, 0, label);
    }
}

int llm_paged_table(const llm_kv *kv, int seq, const int **blocks, int *n_blocks)
{
    const pg *p = kv->impl;
    if (seq < 0 || seq >= kv->n_seqs)
        return -1;
    if (blocks)
        *blocks = p->t[seq].blk;
    if (n_blocks)
        *n_blocks = p->t[seq].n_blk;
    return p->t[seq].n_tok;
}

int llm_paged_block_size(const llm_kv *kv)
{
    return ((const pg *)kv->impl)->bs;
}

int llm_paged_pool_count(const llm_kv *kv)
{
    const pg *p = kv->impl;
    return p->alloc->count(p->ast);
}

void llm_paged_stats_get(const llm_kv *kv, llm_paged_stats *st)
{
    const pg *p = kv->impl;
    memset(st, 0, sizeof *st);
    st->n_blocks = p->n_blocks;
    st->block_size = p->bs;
    for (int b = 0; b < p->n_blocks; b++) {
        const pg_block *k = &p->b[b];
        st->used += k->refs > 0;
        st->shared += k->refs > 1;
        st->cached += k->refs == 0 && k->registered;
        st->free += k->refs == 0 && !k->registered;
        st->registered += k->registered;
    }
    for (int s = 0; s < kv->n_seqs; s++) {
        st->tokens += p->t[s].n_tok;
        st->table_blocks += p->t[s].n_blk;
    }
    st->allocs = p->allocs;
    st->hits = p->hits;
    st->evictions = p->evictions;
    st->cows = p->cows;
    st->bytes_per_block = p->block_bytes;
}

/* ---- the invariants ---- */

#define FAIL(...) do { snprintf(err, errlen, __VA_ARGS__); rc = -1; goto done; } while (0)

int llm_paged_check(const llm_kv *kv, char *err, size_t errlen)
{
    const pg *p = kv->impl;
    int rc = 0, pooled = 0;
    int *count = mlsys_xcalloc((size_t)p->n_blocks, sizeof(int));
    int *seen = mlsys_xmalloc((size_t)p->n_blocks * sizeof(int));
    memset(seen, 0xff, (size_t)p->n_blocks * sizeof(int));
    for (int s = 0; s < kv->n_seqs; s++) {
        const pg_table *t = &p->t[s];
        if (t->n_tok < 0 || t->n_tok > p->max_len || t->n_blk != (t->n_tok + p->bs - 1) / p->bs)
            FAIL("sequence %d: %d positions in %d blocks of %d", s, t->n_tok, t->n_blk, p->bs);
        if (t->n_hashed > t->n_tok / p->bs)
            FAIL("sequence %d: %d hashed blocks of %d full ones", s, t->n_hashed,
                 t->n_tok / p->bs);
        for (int i = 0; i < t->n_blk; i++) {
            int b = t->blk[i];
            if (b < 0 || b >= p->n_blocks)
                FAIL("sequence %d: table entry %d is block %d (pool of %d)", s, i, b,
                     p->n_blocks);
            if (seen[b] == s)
                FAIL("sequence %d holds block %d twice", s, b);
            seen[b] = s;
            count[b]++;
        }
    }
    for (int b = 0; b < p->n_blocks; b++) {
        const pg_block *k = &p->b[b];
        if (k->refs != count[b])
            FAIL("block %d: reference count %d, held by %d tables", b, k->refs, count[b]);
        if (k->in_pool != (k->refs == 0))
            FAIL("block %d: %s the pool with %d references", b, k->in_pool ? "in" : "out of",
                 k->refs);
        pooled += k->in_pool;
        if (k->registered && lookup(p, k->hash, p->btok + (size_t)b * p->bs) != b)
            FAIL("block %d: registered but not found under its hash", b);
    }
    if (pooled != p->alloc->count(p->ast))
        FAIL("the pool holds %d blocks, the allocator counts %d", pooled,
             p->alloc->count(p->ast));
    /* every block on a hash chain is registered and in the right bucket, once */
    memset(count, 0, (size_t)p->n_blocks * sizeof(int));
    for (uint64_t h = 0; h <= p->mask; h++)
        for (int b = p->bucket[h], n = 0; b >= 0; b = p->b[b].hnext, n++) {
            if (n > p->n_blocks || !p->b[b].registered || (p->b[b].hash & p->mask) != h ||
                count[b]++)
                FAIL("hash bucket %llu: block %d does not belong there", (unsigned long long)h,
                     b);
        }
    for (int b = 0; b < p->n_blocks; b++)
        if (p->b[b].registered && count[b] != 1)
            FAIL("block %d: registered but on no hash chain", b);
done:
    free(count);
    free(seen);
    return rc;
}
