/* memory_timeline.c - ch14/memory-timeline: how much memory each phase of an RLHF step needs
 * (generation, scoring, training) for a 7B to 405B model, against the GPUs you have, and what
 * grows with the batch. The default computes it for the real models (Llama 2 7B, 13B, 70B
 * and Llama 3.1 405B: their parameter counts from their shapes, their KV caches with grouped
 * KV heads), gives both trained models their own optimizer state, counts weights, gradients
 * and optimizer state as the fixed cost (the original counted only the optimizer) and keeps
 * the batch table's totals consistent. Training's memory per GPU depends on the layout: tensor
 * and pipeline parallelism shard every model state, data parallelism copies them unless a
 * ZeRO stage shards them too; the lab prints the four stages for the GPUs given, or for a
 * layout of --tp-size x --pp-size x --dp-size. --faithful prints the original's numbers.
 * --measured: the lab's own RLHF loop, colocated and split, from its memory events
 * (memory_measured.c). */
#include "../common/common.h"
#include <math.h>
#include <string.h>

#define LAB_ID "ch14/memory-timeline"
#define GB 1e9
#define MAX_COMP 10

static const lab_flag mt_flags[] = {
    {"model-size", 0, FLAG_CHOICE, "70b", "7b|13b|70b|405b", 0, 0,
     "model (the original's -m: -m is --microbatches in every lab)"},
    {"batch-size", 0, FLAG_INT, "4", NULL, 1, 1000000,
     "sequences per batch (the original's -b: -b is --backend wherever ranks run)"},
    {"seq-len", 's', FLAG_INT, "2048", NULL, 1, 10000000, "tokens per sequence"},
    {"gpu-memory", 'g', FLAG_DOUBLE, "80", NULL, 0, 1000000, "GB per GPU"},
    {"num-gpus", 'n', FLAG_INT, "8", NULL, 1, 1000000, "GPUs"},
    {"tp-size", 't', FLAG_INT, NULL, NULL, 1, 64, "training layout: tensor-parallel degree "
     "(with --pp-size and --dp-size; default: the GPUs as plain data parallelism)"},
    {"pp-size", 0, FLAG_INT, NULL, NULL, 1, 1024, "training layout: pipeline stages"},
    {"dp-size", 0, FLAG_INT, NULL, NULL, 1, 1000000, "training layout: data-parallel replicas"},
    {"zero", 0, FLAG_INT, NULL, NULL, 0, 3, "training layout: the ZeRO stage to judge it by "
     "(0 plain DP, 1 optimizer state, 2 + gradients, 3 + weights sharded; default: all four)"},
    {"faithful", 0, FLAG_BOOL, NULL, NULL, 0, 0,
     "the original's estimates: nominal sizes, no grouped KV, one optimizer, its scaling bug"},
    {"measured", 0, FLAG_BOOL, NULL, NULL, 0, 0,
     "run the lab's RLHF loop (colocated, split) and measure its memory per role and phase"},
    {NULL, 0, 0, NULL, NULL, 0, 0, NULL}
};

/* The models: the original's nominal size and (hidden, layers), and the real shape. */
typedef struct shape {
    const char *key, *name;
    double nominal;             /* billions, as the original counts */
    long H, L, heads, kv_heads, ffn, vocab;
} shape;

static const shape shapes[] = {
    {"7b", "Llama-2-7B", 7, 4096, 32, 32, 32, 11008, 32000},
    {"13b", "Llama-2-13B", 13, 5120, 40, 40, 40, 13824, 32000},
    {"70b", "Llama-2-70B", 70, 8192, 80, 64, 8, 28672, 32000},
    {"405b", "Llama-3.1-405B", 405, 16384, 126, 128, 8, 53248, 128256},
};

/* Parameters of a Llama-style decoder: embeddings and an untied output layer (V·H each);
 * per layer the query and output projections (H² each), keys and values (H·kv·d each), the
 * SwiGLU MLP (3·H·F) and two norms; a final norm. */
static double param_count(const shape *s)
{
    double H = (double)s->H, d = H / (double)s->heads, kv = (double)s->kv_heads * d;
    double layer = 2 * H * H + 2 * H * kv + 3 * H * (double)s->ffn + 2 * H;
    return 2 * (double)s->vocab * H + (double)s->L * layer + H;
}

typedef struct comp {
    const char *name;
    double gb;
    int fixed;                  /* does not grow with batch or sequence */
} comp;

typedef struct phase {
    const char *name;
    comp c[MAX_COMP];
    int n;
    double total;
} phase;

static void add(phase *p, const char *name, double gb, int fixed)
{
    p->c[p->n++] = (comp){name, gb, fixed};
    p->total += gb;
}

typedef struct sizes {
    double P;                   /* parameters, billions */
    double w, g, opt;           /* per model: weights, gradients, optimizer state (GB) */
    double kv_token;            /* bytes of KV cache per token */
    double act_token;           /* bytes of activations per token (training) */
} sizes;

static sizes sizes_of(const shape *s, int faithful)
{
    sizes z;
    z.P = faithful ? s->nominal : param_count(s) / 1e9;
    z.w = 2 * z.P;                                  /* bf16 */
    z.g = 2 * z.P;
    /* faithful: Adam's m and v, 8 bytes, once; fixed: an fp32 master copy, m and v, 12
     * bytes per parameter of each trained model (the ZeRO paper's K = 12) */
    z.opt = (faithful ? 8.0 : 12.0) * z.P;
    double kv_width = faithful ? (double)s->H : (double)s->kv_heads * s->H / s->heads;
    z.kv_token = 2.0 * (double)s->L * kv_width * 2.0;       /* K and V, bf16, every layer */
    z.act_token = (double)s->H * 10 * 2 * (double)s->L;     /* the original's estimate */
    return z;
}

/* The four phases for batch B and sequence S. */
static void build(const sizes *z, int faithful, long B, long S, phase ph[4])
{
    memset(ph, 0, 4 * sizeof *ph);
    double tokens = (double)B * (double)S;
    double kv = z->kv_token * tokens / GB, act = z->act_token * tokens / GB;
    ph[0].name = "GENERATION (actor generates; reward and reference wait)";
    add(&ph[0], "Actor weights", z->w, 1);
    add(&ph[0], "KV cache", kv, 0);
    add(&ph[0], "Reward model weights", z->w, 1);
    add(&ph[0], "Reference model weights", z->w, 1);
    add(&ph[0], "Misc buffers", 2.0, 1);
    ph[1].name = "SCORING (forward passes only)";
    if (!faithful) {
        /* the actor too: PPO's old log-probabilities are a forward of the actor over the
         * sampled tokens (the original scored with the reward model alone) */
        add(&ph[1], "Actor weights", z->w, 1);
        add(&ph[1], "Reference model weights", z->w, 1);
        add(&ph[1], "Critic weights", z->w, 1);
    }
    add(&ph[1], "Reward model weights", z->w, 1);
    add(&ph[1], "Activations (forward)", 0.2 * act, 0);
    ph[2].name = "TRAINING (PPO updates of actor and critic)";
    add(&ph[2], "Actor weights", z->w, 1);
    add(&ph[2], "Critic weights", z->w, 1);
    add(&ph[2], "Actor gradients", z->g, 1);
    add(&ph[2], "Critic gradients", z->g, 1);
    if (faithful) {
        add(&ph[2], "Optimizer states", z->opt, 1);
    } else {
        add(&ph[2], "Actor optimizer state", z->opt, 1);
        add(&ph[2], "Critic optimizer state", z->opt, 1);
    }
    add(&ph[2], "Activations", act, 0);
    /* everything resident at once: what the scaling analysis and the advice use. The
     * original named these weights "Actor", "Critic"... and picked its fixed costs by the
     * word "weights" in the name, so only the optimizer counted as fixed */
    ph[3].name = "ALL AT ONCE";
    add(&ph[3], "Actor", z->w, !faithful);
    add(&ph[3], "Critic", z->w, !faithful);
    add(&ph[3], "Reward", z->w, !faithful);
    add(&ph[3], "Reference", z->w, !faithful);
    add(&ph[3], "Optimizer states", faithful ? z->opt : 2 * z->opt, 1);
    add(&ph[3], "Gradients (actor + critic)", 2 * z->g, !faithful);
    add(&ph[3], "KV cache", kv, 0);
    add(&ph[3], "Activations", act, 0);
}

/* components by size, largest first; equal sizes keep their order (insertion sort) */
static void sort_desc(comp *c, int n)
{
    for (int i = 1; i < n; i++) {
        comp k = c[i];
        int j = i - 1;
        while (j >= 0 && c[j].gb < k.gb) {
            c[j + 1] = c[j];
            j--;
        }
        c[j + 1] = k;
    }
}

/* Training's memory on one GPU of a layout tp x pp x dp under ZeRO stage zero, for the two
 * trained models (actor and critic): tensor and pipeline parallelism split every state over
 * tp x pp GPUs; data parallelism keeps a whole copy on each of its dp replicas of what ZeRO
 * does not shard (stage 1 the optimizer state, 2 the gradients too, 3 the weights too: FSDP);
 * the batch's activations are split over all tp x pp x dp GPUs (perfectly, as the phases'
 * "sharded perfectly" lines assume). out: weights, gradients, optimizer, activations, GB. */
static double layout_gb(const sizes *z, double act, long tp, long pp, long dp, int zero,
                        double out[4])
{
    double mp = (double)tp * (double)pp;
    out[0] = 2 * z->w / mp / (zero >= 3 ? dp : 1);
    out[1] = 2 * z->g / mp / (zero >= 2 ? dp : 1);
    out[2] = 2 * z->opt / mp / (zero >= 1 ? dp : 1);
    out[3] = act / (mp * (double)dp);
    return out[0] + out[1] + out[2] + out[3];
}

static const char *const zero_names[4] = {
    "ZeRO-0 (plain DP: copies)", "ZeRO-1 (optimizer)", "ZeRO-2 (+ gradients)",
    "ZeRO-3 (+ weights: FSDP)",
};

/* The training phase of a layout, under each ZeRO stage (or the one asked for), per GPU. */
static void layout_section(const lab_args *a, const sizes *z, double act, long B, long N,
                           double G, const char *gtext, const char *rule)
{
    int given = lab_arg_given(a, "tp-size") || lab_arg_given(a, "pp-size") ||
                lab_arg_given(a, "dp-size");
    long tp = lab_arg_given(a, "tp-size") ? lab_arg_int(a, "tp-size") : 1;
    long pp = lab_arg_given(a, "pp-size") ? lab_arg_int(a, "pp-size") : 1;
    long dp = lab_arg_given(a, "dp-size") ? lab_arg_int(a, "dp-size") : given ? 1 : N;
    int z0 = 0, z1 = 3;
    if (lab_arg_given(a, "zero"))
        z0 = z1 = (int)lab_arg_int(a, "zero");
    printf("\n%s\n TRAINING ON %ld GPUs: REPLICATED OR SHARDED\n%s\n", rule, tp * pp * dp, rule);
    printf("Tensor and pipeline parallelism split every model state over tp x pp GPUs. Data\n"
           "parallelism copies them: each of its dp replicas holds a whole copy of what ZeRO\n"
           "does not shard (DeepSpeed's stages; PyTorch's FSDP is stage 3). Training, the\n"
           "actor and the critic, per GPU in GB:\n\n");
    printf("  %-25s %8s %9s %9s %11s %8s\n", "", "weights", "gradients", "optimizer",
           "activations", "total");
    printf("  tp %ld x pp %ld x dp %ld\n", tp, pp, dp);
    int valid = !given || (dp <= B && tp <= 8);
    for (int k = z0; k <= z1; k++) {
        double c[4], t = layout_gb(z, act, tp, pp, dp, k, c);
        printf("  %-25s %8.1f %9.1f %9.1f %11.1f %8.1f %s\n", zero_names[k], c[0], c[1], c[2],
               c[3], t, t <= G && valid ? "✓" : "✗");
    }
    if (given && dp > B)
        printf("  ✗ dp %ld is above the batch of %ld sequences: %ld replicas would have "
               "none\n", dp, B, dp - B);
    if (given && tp > 8)
        printf("  ✗ tp %ld spans nodes: tensor parallelism stays inside a node's 8 GPUs\n", tp);
    printf("  (✓ fits in %s GB. ZeRO-1 and -2 move as many bytes as plain DP; stage 3\n"
           "   gathers every layer's weights before using them: 1.5 times the traffic.)\n",
           gtext);
    if (!given)
        printf("Your layout: --tp-size T --pp-size P --dp-size D, and --zero Z for one stage.\n");
}

/* "80" for the default, "80.0" when given: as the original echoes a float */
static void gpu_text(const lab_args *a, char *buf, size_t n)
{
    double g = lab_arg_double(a, "gpu-memory");
    if (lab_arg_given(a, "gpu-memory") && g == floor(g))
        snprintf(buf, n, "%.1f", g);
    else
        snprintf(buf, n, "%g", g);
}

int mt_measured(const lab_args *a);     /* memory_measured.c */

static int mt_main(const lab_args *a)
{
    if (lab_arg_bool(a, "measured"))
        return mt_measured(a);
    int faithful = lab_arg_bool(a, "faithful");
    const char *key = lab_arg_str(a, "model-size");
    const shape *s = &shapes[0];
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        if (!strcmp(shapes[i].key, key))
            s = &shapes[i];
    long B = lab_arg_int(a, "batch-size"), S = lab_arg_int(a, "seq-len");
    double G = lab_arg_double(a, "gpu-memory");
    long N = lab_arg_int(a, "num-gpus");
    char gtext[32], rule[512], thin[512];
    gpu_text(a, gtext, sizeof gtext);
    sizes z = sizes_of(s, faithful);
    common_box(stdout, 68, "RLHF memory timeline");
    common_rule(rule, sizeof rule, "=", 70);
    common_rule(thin, sizeof thin, "-", 70);
    printf("\nModel: %s", faithful ? s->key : s->name);
    if (faithful)
        printf(" (%.0fB parameters, hidden %ld, %ld layers)\n", z.P, s->H, s->L);
    else
        printf(" (%.2fB parameters: hidden %ld, %ld layers, %ld heads, %ld KV heads, MLP "
               "%ld, vocabulary %ld)\n", z.P, s->H, s->L, s->heads, s->kv_heads, s->ffn,
               s->vocab);
    printf("Batch: %ld sequences x %ld tokens\nGPU memory: %s GB x %ld GPUs\n", B, S, gtext, N);
    if (faithful)
        printf("--faithful: the original's estimates (nominal sizes, a KV cache as wide as the "
               "model,\none optimizer state for two trained models, its scaling analysis)\n");
    else
        printf("bf16 weights and gradients (2 bytes each per parameter), mixed-precision Adam "
               "(an fp32\nmaster copy, m and v: 12 bytes per parameter) for each trained model, "
               "KV cache\n%.0f bytes per token, activations %.0f bytes per token (the "
               "original's rough count)\n", z.kv_token, z.act_token);

    phase ph[4];
    build(&z, faithful, B, S, ph);
    double largest = fmax(ph[0].total, fmax(ph[1].total, ph[2].total));
    printf("\n%s\n MEMORY BY PHASE\n%s\n", rule, rule);
    for (int k = 0; k < 3; k++) {
        phase *p = &ph[k];
        sort_desc(p->c, p->n);
        printf("\n%s\n%s\n", p->name, thin);
        for (int i = 0; i < p->n; i++) {
            int len = (int)floor(p->c[i].gb * 50.0 / (1.1 * largest));
            char bar[256];
            common_rule(bar, sizeof bar, "█", len);
            printf("  %-25s %7.1f GB %s\n", p->c[i].name, p->c[i].gb, bar);
        }
        printf("  %-25s %7.1f GB\n", "TOTAL", p->total);
        if (p->total > G)
            printf("  ⚠ exceeds one GPU (%s GB): needs %.1f× that\n", gtext, p->total / G);
        else
            printf("  ✓ fits in one GPU (%s GB): %.0f%% of it\n", gtext, 100.0 * p->total / G);
        if (!faithful)
            printf("  sharded perfectly over %ld GPUs: %.1f GB each (%s)\n", N, p->total / N,
                   p->total / N <= G ? "fits" : "does not fit");
    }

    if (!faithful)
        layout_section(a, &z, z.act_token * (double)B * (double)S / GB, B, N, G, gtext, rule);

    /* what grows with the batch */
    long Bs = faithful ? 4 : B, Ss = faithful ? 2048 : S;
    phase full[4];
    build(&z, faithful, Bs, Ss, full);
    double fixed = 0.0, scaling = 0.0;
    for (int i = 0; i < full[3].n; i++)
        *(full[3].c[i].fixed ? &fixed : &scaling) += full[3].c[i].gb;
    printf("\n%s\n WHAT SCALES WITH THE BATCH (all four models resident, batch %ld, %ld "
           "tokens)\n%s\n", rule, Bs, Ss, rule);
    if (faithful)
        printf("(the original: always batch 4 and 2048 tokens, and only the optimizer counted "
               "as fixed)\n");
    printf("\n  fixed (%s): %.1f GB\n", faithful ? "optimizer states"
           : "weights, gradients, optimizer state", fixed);
    printf("  scaling (KV cache, activations%s): %.1f GB\n",
           faithful ? ", and by the original's mistake the weights and gradients" : "",
           scaling);
    printf("  total: %.1f GB\n\n", fixed + scaling);
    printf("  %6s %10s %12s %10s  %s\n", "batch", "KV cache", "activations", "total", "fits "
           "one GPU");
    for (long b = 1; b <= 32; b *= 2) {
        double kv = z.kv_token * (double)b * (double)Ss / GB;
        double act = z.act_token * (double)b * (double)Ss / GB;
        double tot = fixed + kv + act;
        printf("  %6ld %9.1f %12.1f %10.1f  %s\n", b, kv, act, tot, tot <= G ? "✓" : "✗");
    }
    if (faithful)
        printf("  (this total leaves out the weights and gradients the line above counted)\n");

    /* advice */
    double need = full[3].total, avail = (double)N * G;
    printf("\n%s\n RECOMMENDATION (%s on %ld x %s GB)\n%s\n", rule, s->key, N, gtext, rule);
    printf("\n  required with everything resident: %.1f GB\n  available: %.1f GB\n", need,
           avail);
    if (need <= G) {
        printf("  ✓ fits on one GPU: co-locate the four models\n");
    } else if (need <= avail) {
        long tp = (long)floor(need / G * 0.7);
        if (tp < 1)
            tp = 1;
        long cap = N < 8 ? N : 8;
        if (tp > cap)
            tp = cap;
        long rest = N / tp;
        printf("  ✓ fits across the %ld GPUs if it is sharded perfectly (%.1f GB each)\n", N,
               need / (double)N);
        if (faithful) {
            printf("  tensor parallel: %ld\n", tp);
            if (rest > 1)
                printf("  data/pipeline parallel: %ld\n", rest);
        } else {
            /* the original's rule of thumb, shown as advice with what it costs a GPU */
            printf("  a rule of thumb (the original's: TP = 0.7 x required / GPU memory, at "
                   "most 8):\n  tensor parallel %ld x data parallel %ld. Data parallelism "
                   "copies what ZeRO does not\n  shard: without ZeRO each GPU holds %.1f GB "
                   "(everything / TP: %s);\n  with ZeRO-3 across the data-parallel ranks too, "
                   "%.1f GB (%s).\n", tp, rest, need / (double)tp,
                   need / (double)tp <= G ? "fits" : "does not fit", need / (double)(tp * rest),
                   need / (double)(tp * rest) <= G ? "fits" : "does not fit");
        }
    } else {
        /* the original rounds to the nearest (165.8/80 prints 2); enough GPUs is the ceiling */
        double ratio = need / G;
        long gpus = faithful ? (long)nearbyint(ratio) : (long)ceil(ratio);
        printf("  ✗ does not fit: needs %ld GPUs of %s GB%s\n", gpus, gtext,
               faithful ? "" : " even with perfect sharding");
        printf("  options: shard weights, gradients and optimizer state (ZeRO-3 / FSDP), "
               "recompute\n  activations (gradient checkpointing), offload the optimizer, or "
               "put generation and\n  training on separate GPUs (disaggregation)\n");
    }

    printf("\n%s\n WHAT TO TAKE AWAY\n%s\n", rule, rule);
    printf("1. Four models mean four copies of the weights: %.0f GB for %s in bf16.\n",
           4 * z.w, s->key);
    printf("2. Adam's state dominates training: %.0f GB for the actor and critic here.\n",
           faithful ? z.opt : 2 * z.opt);
    printf("3. Generation needs weights + KV cache, training needs weights + gradients +\n"
           "   optimizer state: a co-located system swaps by phase.\n"
           "4. A larger batch adds activations and KV cache, nothing else.\n"
           "5. Longer sequences grow the KV cache linearly: 4K -> 32K tokens is 8x.\n");
    return 0;
}

const lab ch14_memory_timeline_lab = {
    .id = LAB_ID,
    .title = "RLHF memory timeline",
    .summary = "memory of generation, scoring and training for 7B-405B against your GPUs",
    .flags = mt_flags,
    .main = mt_main,
    .view = "log",
};
