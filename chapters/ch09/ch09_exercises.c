/* ch09_exercises.c - Chapter 9's exercises: the paged cache's block allocator (implement,
 * assets/exercises/ch09-block-alloc/), the chained hash of a full block for prefix caching
 * (implement, ch09-block-hash), the KV bytes of a grouped-query model and the requests that
 * fit (predict), and prefix sharing measured on the engine against the formulas (experiment,
 * ex_prefix.c). */
#include "../../lab/exercise/exercise.h"
#include <stdio.h>
#include <string.h>

static const int sizes_1[] = {1, 0};

/* ---- ch09-block-alloc (implement) ---- */

static const char *const alloc_hints[] = {
    "When the pool holds both uncached blocks and blocks that still cache a prefix, which "
    "ones cost nothing to hand out?",
    "Among the cached blocks, which prefix is least likely to be asked for again: the one "
    "released longest ago, or the one released last?",
    "take(b) removes a block from the middle of the order. Which data structure removes "
    "from the middle in O(1) and still pops the oldest from one end?",
    "Who keeps the reference counts and copies a shared block before a write: the allocator, "
    "or the cache that calls it?",
    NULL
};

static const ex_implement alloc_impl = {
    .function = "my_block_alloc", .world_sizes = sizes_1, .timeout_ms = 5000,
    .limit_ms = 30000,
};

static const exercise ch09_block_alloc = {
    .id = "ch09-block-alloc",
    .chapter = 9,
    .kind = EX_IMPLEMENT,
    .title = "The paged cache's block allocator: LRU over cached blocks",
    .task = "Write the allocator the paged cache calls (put, take, get, count): hand out an "
            "uncached block first, else evict the cached block released longest ago; the "
            "cache keeps the reference counts and copies shared blocks on write.",
    .hints = alloc_hints,
    .lab = "ch09/prefix-sharing-demo",
    .starter = "starter.c",
    .solution = "solution.c",
    .workfile = "block_alloc.c",
    .impl = &alloc_impl,
};

/* ---- ch09-block-hash (implement) ---- */

static const char *const hash_hints[] = {
    "Two requests have the same tokens in block 3 but different tokens in block 1. May block "
    "3's cached keys be reused? What must its hash include besides its own tokens?",
    "If the hash is a sum of the tokens, which two different blocks collide?",
    "FNV-1a: start from the offset basis, then for each byte XOR it in and multiply by the "
    "prime. Which bytes does a 64-bit parent hash give, and which a 32-bit token?",
    NULL
};

static const ex_implement hash_impl = {
    .function = "block_hash", .world_sizes = sizes_1, .timeout_ms = 5000, .limit_ms = 30000,
};

static const exercise ch09_block_hash = {
    .id = "ch09-block-hash",
    .chapter = 9,
    .kind = EX_IMPLEMENT,
    .title = "The hash of a full block, chained to its prefix",
    .task = "Write block_hash(parent, tokens, n): one block's key in the prefix cache, which "
            "must depend on every token, their order and the hash of the block before it, so "
            "that equal keys mean equal prefixes.",
    .hints = hash_hints,
    .lab = "ch09/prefix-sharing-demo",
    .starter = "starter.c",
    .solution = "solution.c",
    .workfile = "block_hash.c",
    .impl = &hash_impl,
};

/* ---- ch09-predict-kv-bytes (predict) ---- */

typedef struct kv_model {
    const char *name;
    int layers, kv_heads, head_dim;
    double weights_gb;
} kv_model;

static void draw_kv_bytes(uint64_t seed, ex_question *q)
{
    static const kv_model models[] = {
        {"Mistral-7B", 32, 8, 128, 14}, {"LLaMA-2-7B", 32, 32, 128, 14},
        {"LLaMA-2-13B", 40, 40, 128, 26}, {"LLaMA-3-8B", 32, 8, 128, 16},
        {"Qwen-2-7B", 28, 4, 128, 15}, {"Gemma-7B", 28, 16, 256, 17},
    };
    static const int ctxs[] = {4096, 8192, 16384, 32768};
    static const int bpes[] = {2, 1};
    mlsys_rng g;
    mlsys_rng_seed(&g, seed);
    const kv_model *m = &models[ex_draw_int(&g, 0, 5)];
    int ctx = ctxs[ex_draw_int(&g, 0, 3)], bpe = bpes[ex_draw_int(&g, 0, 1)];
    int kind = (int)ex_draw_int(&g, 0, 1);
    long long per_tok = 2LL * m->layers * m->kv_heads * m->head_dim * bpe;
    double free_gb = 80.0 - m->weights_gb - 2.0;
    long long per_req = per_tok * ctx;
    long long fits = (long long)(free_gb * 1e9 / (double)per_req);
    char a[32], b[32];
    snprintf(q->text, sizeof q->text,
             "%s has %d layers and %d key/value heads of dimension %d (grouped-query "
             "attention when fewer than its query heads). Its KV cache is kept in %s on an "
             "80 GB GPU (10^9 bytes a GB) that also holds %.0f GB of weights and 2 GB of "
             "workspace. %s", m->name, m->layers, m->kv_heads, m->head_dim,
             bpe == 2 ? "FP16" : "FP8 (1 byte per value)", m->weights_gb,
             kind == 0 ? "How many bytes of KV cache does one token take?" :
             "How many requests of a full context of ");
    if (kind == 1) {
        size_t l = strlen(q->text);
        snprintf(q->text + l, sizeof q->text - l, "%d tokens fit at once, each holding its "
                 "whole context?", ctx);
    }
    q->answer = kind == 0 ? (double)per_tok : (double)fits;
    snprintf(q->unit, sizeof q->unit, "%s", kind == 0 ? "bytes" : "requests");
    snprintf(q->explain, sizeof q->explain,
             "Per token: 2 (K and V) x %d layers x %d KV heads x %d x %d byte%s = %s bytes: the "
             "query heads do not count, only the key/value heads. Per request: x %d = %s bytes. "
             "Free: 80 - %.0f - 2 = %.0f GB, so floor(%.0f x 10^9 / %s) = %lld requests. Paging "
             "lets more run when most are shorter than the context.", m->layers, m->kv_heads,
             m->head_dim, bpe, bpe == 1 ? "" : "s", ex_fmt_int(a, sizeof a, per_tok), ctx,
             ex_fmt_int(b, sizeof b, per_req), m->weights_gb, free_gb, free_gb, b, fits);
}

static const char *const kv_bytes_hints[] = {
    "Which heads store keys and values: the query heads or the key/value heads?",
    "Per token: K and V, per layer, per KV head, head_dim values of how many bytes?",
    "What is left for the cache after the weights and the workspace, and does a request "
    "that does not fit whole count?",
    NULL
};

static const exercise ch09_predict_kv_bytes = {
    .id = "ch09-predict-kv-bytes",
    .chapter = 9,
    .kind = EX_PREDICT,
    .title = "KV bytes per token with grouped-query attention",
    .task = "Predict a real model's KV cache per token, or how many full-context requests fit "
            "on an 80 GB GPU beside its weights.",
    .hints = kv_bytes_hints,
    .lab = "ch09/kv-cache-calculator",
    .draw = draw_kv_bytes,
};

extern const exercise ch09_prefix;      /* ex_prefix.c */

const exercise *const ch09_exercises[] = {
    &ch09_predict_kv_bytes,
    &ch09_prefix,
    &ch09_block_alloc,
    &ch09_block_hash,
    NULL
};
