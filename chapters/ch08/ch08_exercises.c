/* ch08_exercises.c - Chapter 8's exercises: the continuous-batching admission rule inside the
 * real serving engine (implement, assets/exercises/ch08-admission/), the KV-cache size of a
 * model and how many requests fit (predict), and one request's life read from
 * minimal-inference-server's step table (experiment, ex_trace.c). */
#include "../../lab/exercise/exercise.h"
#include <stdio.h>

static const int sizes_1[] = {1, 0};

/* ---- ch08-admission (implement) ---- */

static const char *const admission_hints[] = {
    "A batch has max_num_seqs seats. What must be true of q->running before anyone new can "
    "join?",
    "If the request's whole prompt does not fit in the free blocks now, what happens a few "
    "steps later when its prefill reaches them?",
    "A prompt of 200 tokens with 50 tokens of budget left: must it wait for an empty step, "
    "or can it start with 50 now and continue in the next steps?",
    NULL
};

static const ex_implement admission_impl = {
    .function = "admit_rule", .world_sizes = sizes_1, .timeout_ms = 5000, .limit_ms = 30000,
};

static const exercise ch08_admission = {
    .id = "ch08-admission",
    .chapter = 8,
    .kind = EX_IMPLEMENT,
    .title = "The continuous-batching admission rule",
    .task = "Write the rule that decides, for each waiting request, how many prompt tokens the "
            "next step computes: a seat, room for its blocks, then as much as the token "
            "budget allows. It runs inside the real engine.",
    .hints = admission_hints,
    .lab = "ch08/minimal-inference-server",
    .starter = "starter.c",
    .solution = "solution.c",
    .workfile = "admission.c",
    .impl = &admission_impl,
};

/* ---- ch08-predict-kv-size (predict) ---- */

static void draw_kv_size(uint64_t seed, ex_question *q)
{
    mlsys_rng g;
    mlsys_rng_seed(&g, seed);
    static const int layers_of[] = {24, 32, 40, 48, 64, 80};
    static const int hidden_of[] = {4096, 5120, 8192};
    static const int heads_of[] = {32, 64, 128};
    static const int ctx_of[] = {4096, 8192, 16384, 32768};
    static const int free_of[] = {40, 60, 80};
    int L = layers_of[ex_draw_int(&g, 0, 5)], H = hidden_of[ex_draw_int(&g, 0, 2)];
    int NH = heads_of[ex_draw_int(&g, 0, 2)], ctx = ctx_of[ex_draw_int(&g, 0, 3)];
    int gb = free_of[ex_draw_int(&g, 0, 2)];
    int kind = (int)ex_draw_int(&g, 0, 2);
    long long hd = H / NH;
    long long per_tok = 2LL * L * NH * hd * 2;          /* K and V, FP16 */
    long long per_req = per_tok * ctx;
    long long fits = (long long)gb * 1000000000LL / per_req;
    char a[32], b[32], c[32];
    static const char *const asks[] = {
        "How many bytes of KV cache does one token take?",
        "How many bytes of KV cache does one request of the full context take?",
        "How many requests of the full context fit at once in the memory left for the cache?",
    };
    snprintf(q->text, sizeof q->text,
             "A model with %d layers, hidden size %d and %d attention heads (no grouped-query "
             "attention: as many key/value heads) keeps its KV cache in FP16. Its context is "
             "%d tokens, and %d GB (10^9 bytes) of GPU memory are left for the cache. %s",
             L, H, NH, ctx, gb, asks[kind]);
    q->answer = kind == 0 ? (double)per_tok : kind == 1 ? (double)per_req : (double)fits;
    snprintf(q->unit, sizeof q->unit, "%s", kind == 2 ? "requests" : "bytes");
    snprintf(q->explain, sizeof q->explain,
             "head_dim = %d / %d = %lld. Per token: K and V, for each of %d layers, %d heads of "
             "%lld values, 2 bytes each: 2 x %d x %d x %lld x 2 = %s bytes. Per request: x %d "
             "tokens = %s bytes. Requests: floor(%d x 10^9 / %s) = %lld (floor: a request "
             "needs its whole context; paging lets more start when most are shorter).",
             H, NH, hd, L, NH, hd, L, NH, hd, ex_fmt_int(a, sizeof a, per_tok), ctx,
             ex_fmt_int(b, sizeof b, per_req), gb, ex_fmt_int(c, sizeof c, per_req), fits);
}

static const char *const kv_size_hints[] = {
    "What does one layer store per token: the key, the value, or both? How many values each?",
    "How wide is one head (hidden size / heads), and how many bytes is one FP16 value?",
    "Can a request of the full context run with part of its cache? So do you round up or "
    "down?",
    NULL
};

static const exercise ch08_predict_kv_size = {
    .id = "ch08-predict-kv-size",
    .chapter = 8,
    .kind = EX_PREDICT,
    .title = "How big the KV cache is, and how many requests fit",
    .task = "Predict the KV cache per token, per full-context request, and how many such "
            "requests fit in the memory left after the weights.",
    .hints = kv_size_hints,
    .lab = "ch08/minimal-inference-server",
    .draw = draw_kv_size,
};

extern const exercise ch08_trace;       /* ex_trace.c */

const exercise *const ch08_exercises[] = {
    &ch08_trace,
    &ch08_predict_kv_size,
    &ch08_admission,
    NULL
};
