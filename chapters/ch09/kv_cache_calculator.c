/* kv_cache_calculator.c - ch09/kv-cache-calculator: what a KV cache weighs. Bytes per token =
 * 2 (K and V) x layers x KV heads x head_dim x bytes per element, for seven well-known models
 * (FP16) and a custom one; how many requests fit on a GPU at four context lengths, with and
 * without paging (the original's 50 % and 95 % utilisation assumptions); how much
 * reserving the maximum context wastes. The lab's own model is one more row, computed from
 * its configuration (FP32) and checked against the bytes per token of a real paged pool.
 * One unit per quantity: sizes of a token and of a request in binary units named as such
 * (KiB, GiB), the capacity of a GPU in GB = 10^9 bytes throughout (its memory, the weights
 * and each request; the original divided GB by GiB). Its crash (a division by zero when no
 * request fits without paging) prints n/a instead. */
#include "../common/common.h"
#include "../../core/llm/engine.h"

#include <math.h>
#include <string.h>

static const lab_flag calc_flags[] = {
    {"model", 0, FLAG_CHOICE, "llama-70b", "llama-7b|llama-13b|llama-70b|mistral-7b|"
     "qwen-72b|qwen2-72b|deepseek-67b", 0, 0, "model of the capacity and fragmentation "
     "analyses"},
    {"gpu", 0, FLAG_CHOICE, "h100", "h100|a100|a100-40|4090", 0, 0, "GPU of the capacity "
     "analysis"},
    {"custom", 0, FLAG_BOOL, NULL, NULL, 0, 0, "analyse a model made of the three flags "
     "below (named Custom, weights taken as 14 GB)"},
    {"layers", 0, FLAG_INT, "80", NULL, 1, 100000, "layers (with --custom)"},
    {"heads", 0, FLAG_INT, "8", NULL, 1, 100000, "KV heads (with --custom)"},
    {"dim", 0, FLAG_INT, "128", NULL, 1, 100000, "head dimension (with --custom)"},
    {"lab-model", 0, FLAG_STR, "assets/models/model.bin", NULL, 0, 0, "the lab's model, "
     "added as a row (\"\" leaves it out)"},
    {NULL, 0, 0, NULL, NULL, 0, 0, NULL}
};

typedef struct kv_model {
    const char *key, *name;
    long layers, kv_heads, head_dim, weights_gb;
} kv_model;

static const kv_model models[] = {
    {"llama-7b", "LLaMA-7B", 32, 32, 128, 14},
    {"llama-13b", "LLaMA-13B", 40, 40, 128, 26},
    {"llama-70b", "LLaMA-70B", 80, 8, 128, 140},
    {"mistral-7b", "Mistral-7B", 32, 8, 128, 14},
    /* Qwen-72B (the first Qwen) has no grouped KV heads: 64 of them, one per query head (the
     * original gave it 8, which is Qwen2-72B's shape) */
    {"qwen-72b", "Qwen-72B", 80, 64, 128, 144},
    {"qwen2-72b", "Qwen2-72B", 80, 8, 128, 145},
    {"deepseek-67b", "DeepSeek-67B", 95, 8, 128, 134},
};
#define NMODELS 7

static const struct { const char *key, *name; double gb; } gpus[] = {
    {"h100", "H100 80GB", 80}, {"a100", "A100 80GB", 80}, {"a100-40", "A100 40GB", 40},
    {"4090", "RTX 4090 24GB", 24},
};

/* the size formula of the chapter */
static double bytes_per_token(const kv_model *m, int elem_bytes)
{
    return 2.0 * (double)m->layers * (double)m->kv_heads * (double)m->head_dim * elem_bytes;
}

/* 1024 at a time while the value is at least 1024: binary units, named KiB, MiB, GiB, TiB
 * (the original divided the same way and called them KB, MB, GB) */
static char *fmt_bytes(double v, char *out, size_t n)
{
    static const char *const unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    for (int i = 0; i < 5; i++) {
        if (v < 1024.0) {
            snprintf(out, n, "%.2f %s", v, unit[i]);
            return out;
        }
        v /= 1024.0;
    }
    snprintf(out, n, "%.2f PiB", v);
    return out;
}

static void table_row(const char *name, long layers, long heads, double bpt)
{
    char a[32], b[32], c[32];
    printf("%-15s %-8ld %-10ld %-12s %-12s %s\n", name, layers, heads,
           fmt_bytes(bpt, a, sizeof a), fmt_bytes(bpt * 8192, b, sizeof b),
           fmt_bytes(bpt * 32768, c, sizeof c));
}

/* The lab's model: its row from the configuration, and a real pool's bytes per token. */
static int lab_model_row(const char *path)
{
    char p[4096], err[512];
    llm_config c;
    lab_asset_path(path, p, sizeof p);
    if (llm_checkpoint_read(p, &c, NULL, err, sizeof err)) {   /* the header: the config */
        printf("(the lab's model: %s)\n", err);
        return 0;
    }
    kv_model m = {"lab", "lab model fp32", c.n_layers, c.n_kv_heads, c.head_size, 0};
    double bpt = (double)llm_kv_bytes(&c);
    table_row(m.name, m.layers, m.kv_heads, bpt);
    llm_kv kv;
    llm_paged_opts po = {.block_size = 16, .n_blocks = 4, .n_seqs = 1};
    int rc = 0;
    if (llm_kv_init_paged(&kv, &c, &po, err, sizeof err) == 0) {
        double real = (double)kv.bytes / (double)kv.n_slots;
        char a[32], b[32];
        printf("  lab model: %d layers x %d KV heads x head_dim %d x 4 bytes x 2 = %.0f bytes "
               "per token;\n  the engine's paged pool holds %.0f bytes per token slot %s; one "
               "full context of\n  %d tokens is %s, a block of 16 tokens %s\n",
               c.n_layers, c.n_kv_heads, c.head_size, bpt, real, real == bpt ? "✓" : "✗ DIFFERS",
               c.seq_len, fmt_bytes(bpt * c.seq_len, a, sizeof a), fmt_bytes(bpt * 16, b, sizeof b));
        rc = real == bpt ? 0 : 1;
        llm_kv_free(&kv);
    }
    return rc;
}

static void capacity(const kv_model *m, const char *gpu)
{
    char rule[256];
    int g = 0;
    while (g < 3 && strcmp(gpus[g].key, gpu))
        g++;
    printf("\n%s\n CAPACITY ANALYSIS: %s on %s\n%s\n", common_rule(rule, sizeof rule, "=", 70),
           m->name, gpus[g].name, rule);
    static const long ctx[4] = {2048, 4096, 8192, 32768};
    double avail = gpus[g].gb - (double)m->weights_gb - 2.0;   /* 2 GB for kernels and such */
    printf("(GB = 10^9 bytes for every figure here: the GPU's memory, the weights and each\n"
           " request; 2 GB set aside for kernels and workspace.");
    if (avail > 0) {
        /* what the original's mix of units made of it: the budget in GB over a GiB */
        double gib = bytes_per_token(m, 2) * 8192.0 / (1024.0 * 1024.0 * 1024.0);
        printf(" The original divided GB by\n GiB and called both GB: at 8K context it counted "
               "%ld requests where %ld fit.)\n", (long)(avail / gib),
               (long)(avail * 1e9 / (bytes_per_token(m, 2) * 8192.0)));
    } else {
        printf(")\n");
    }
    for (int i = 0; i < 4; i++) {
        if (avail <= 0) {
            printf("\n@ %ld context: the model does not fit in GPU memory (%.0f GB of weights + "
                   "2 GB > %.0f GB)\n", ctx[i], (double)m->weights_gb, gpus[g].gb);
            continue;
        }
        double kv_gb = bytes_per_token(m, 2) * (double)ctx[i] / 1e9;
        long max = (long)(avail / kv_gb);
        long without = (long)(max * 0.5), with = (long)(max * 0.95);
        printf("\n@ %ld context length:\n", ctx[i]);
        printf("  Available for KV cache: %.1f GB\n", avail);
        printf("  KV per request: %.2f GB\n", kv_gb);
        printf("  At full utilisation: %ld requests\n", max);
        printf("  Without PagedAttention: ~%ld concurrent requests\n", without);
        printf("  With PagedAttention: ~%ld concurrent requests\n", with);
        if (without > 0)
            printf("  Improvement: %.0f%%\n", ((double)with / (double)without - 1.0) * 100.0);
        else
            printf("  Improvement: n/a (not one request fits at 50%% utilisation)\n");
    }
}

static void fragmentation(const kv_model *m)
{
    char rule[256], a[32], b[32], c[32];
    printf("\n%s\n FRAGMENTATION ANALYSIS: %s\n%s\n", common_rule(rule, sizeof rule, "=", 70),
           m->name, rule);
    static const struct { long n, avg, max; const char *what; } sc[4] = {
        {100, 512, 8192, "Short prompts, 8K max"},
        {50, 2048, 8192, "Medium prompts, 8K max"},
        {20, 4096, 32768, "Long prompts, 32K max"},
        {10, 8192, 131072, "Very long, 128K max"},
    };
    double bpt = bytes_per_token(m, 2);
    for (int i = 0; i < 4; i++) {
        double without = (double)sc[i].n * sc[i].max * bpt, with = (double)sc[i].n * sc[i].avg * bpt;
        printf("\nScenario: %s\n", sc[i].what);
        printf("  Requests: %ld, Avg context: %ld, Max context: %ld\n", sc[i].n, sc[i].avg,
               sc[i].max);
        printf("  Without paging (every request reserves the max): %s\n",
               fmt_bytes(without, a, sizeof a));
        printf("  With paging (blocks as tokens arrive): %s\n", fmt_bytes(with, b, sizeof b));
        printf("  Memory saved: %s (%.1f%% reduction)\n", fmt_bytes(without - with, c, sizeof c),
               (without - with) / without * 100.0);
    }
}

static int calc_main(const lab_args *a)
{
    char rule[256];
    kv_model custom = {"custom", "Custom", lab_arg_int(a, "layers"), lab_arg_int(a, "heads"),
                       lab_arg_int(a, "dim"), 14};
    int use_custom = lab_arg_bool(a, "custom");
    const char *key = lab_arg_str(a, "model");
    const kv_model *m = &custom;
    for (int i = 0; i < NMODELS && !use_custom; i++)
        if (!strcmp(models[i].key, key))
            m = &models[i];

    common_box(stdout, 68, "KV cache calculator");
    printf("%s\n KV CACHE SIZE COMPARISON ACROSS MODELS (FP16 unless said)\n%s\n",
           common_rule(rule, sizeof rule, "=", 70), rule);
    printf("bytes per token = 2 (K and V) x layers x KV heads x head_dim x bytes per element\n\n");
    printf("%-15s %-8s %-10s %-12s %-12s %s\n", "Model", "Layers", "KV Heads", "Per Token",
           "@ 8K ctx", "@ 32K ctx");
    printf("%s\n", common_rule(rule, sizeof rule, "-", 70));
    for (int i = 0; i < NMODELS; i++)
        table_row(models[i].name, models[i].layers, models[i].kv_heads,
                  bytes_per_token(&models[i], 2));
    if (use_custom)
        table_row(custom.name, custom.layers, custom.kv_heads, bytes_per_token(&custom, 2));
    const char *lab_path = lab_arg_str(a, "lab-model");
    int rc = lab_path && *lab_path ? lab_model_row(lab_path) : 0;

    capacity(m, lab_arg_str(a, "gpu"));
    fragmentation(m);

    /* insight 4's budget: 8 x 80 GB less 140 GB of weights and about 20 GB of kernels */
    const double budget = 8 * 80.0 - 140.0 - 20.0, b70 = bytes_per_token(&models[2], 2);
    printf("\n%s\n KEY INSIGHTS\n%s\n", common_rule(rule, sizeof rule, "=", 70), rule);
    printf("\n1. The KV cache can outweigh the model\n"
           "   A 70B model has 140 GB of FP16 weights; one 32K-token request adds 10 GiB\n"
           "   (10.7 GB) of keys and values: thirteen such requests weigh what it weighs.\n"
           "\n2. Grouped-query attention shrinks it\n"
           "   LLaMA-70B keeps 8 KV heads for 64 query heads: 8x less cache per token.\n"
           "\n3. Paging nearly doubles how many requests fit\n"
           "   Reserving the maximum context wastes what is never used (assumed 50%%\n"
           "   utilisation); blocks allocated as tokens arrive reach about 95%%.\n"
           "\n4. Context length decides\n"
           "   LLaMA-70B on 8 x 80 GB: %.0f GB for the cache after 140 GB of weights and 20 GB\n"
           "   of kernels and workspace; at %.0f bytes a token that is %.2f million tokens:\n"
           "   %ld requests at 4K context, %ld at 32K, %ld at 128K. Same GPUs, same model.\n"
           "\n5. A quantised cache holds more\n"
           "   FP8 or INT8 keys and values: about twice the requests, at some cost in quality.\n",
           budget, b70, budget * 1e9 / b70 / 1e6, (long)(budget * 1e9 / (b70 * 4096)),
           (long)(budget * 1e9 / (b70 * 32768)), (long)(budget * 1e9 / (b70 * 131072)));
    return rc;
}

const lab ch09_kv_cache_calculator_lab = {
    .id = "ch09/kv-cache-calculator",
    .title = "KV cache calculator",
    .summary = "bytes per token for seven models and the lab's own, requests per GPU with and "
               "without paging, fragmentation",
    .flags = calc_flags,
    .main = calc_main,
    .view = "log",
};
