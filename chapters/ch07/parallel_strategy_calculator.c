/* parallel_strategy_calculator.c - ch07/parallel-strategy-calculator: for a model and a
 * cluster, memory per GPU, communication per step and pipeline bubble of every (TP, PP, DP)
 * layout, which fit, and the one to choose. The default follows the chapters: the model's
 * shape follows --params (or --hidden/--layers/--vocab; with --moe the experts are part of
 * --params), Adam in mixed precision keeps 12 B per parameter (chapter 5), TP sends four
 * ring all-reduces per layer (chapter 6), the 1F1B bubble weighs in the choice (chapter 7),
 * PP costs nothing at pp=1, a batch smaller than the pipeline is handled, TP wider than a
 * node is tried and marked "*", and --moe adds expert parallelism (EP). --compat prints the
 * table of the calculator as it was first written, formulas and quirks included. */
#include "../common/common.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define LAB_ID "ch07/parallel-strategy-calculator"
#define DTYPE 2.0                    /* bf16 training: bytes per parameter and activation */
#define OPT_BYTES 12.0               /* Adam in mixed precision: fp32 master copy, m and v */
#define COMPAT_OPT_BYTES 8.0         /* the first version's: m and v only */
#define FIT_SHARE 0.9                /* a layout fits below 90 % of a GPU's memory */
#define BUBBLE_OK 0.2                /* M >= 4P keeps the 1F1B bubble under 20 % */

static const lab_flag calc_flags[] = {
    {"params", 'p', FLAG_DOUBLE, "70", NULL, 0, 1000000, "model parameters in billions"},
    {"gpus", 'g', FLAG_INT, "64", NULL, 1, 1048576, "total number of GPUs"},
    {"memory", 0, FLAG_DOUBLE, "80", NULL, 0, 100000,
     "GPU memory in GB (-m was this; it is --microbatches in every lab)"},
    {"batch-size", 0, FLAG_INT, "512", NULL, 1, 100000000,
     "global batch size (-b was this; it is --backend wherever ranks run)"},
    {"seq-len", 's', FLAG_INT, "4096", NULL, 1, 100000000, "sequence length"},
    {"moe", 0, FLAG_BOOL, NULL, NULL, 0, 0, "the model is a mixture of experts"},
    {"num-experts", 0, FLAG_INT, "64", NULL, 1, 65536, "experts per MoE layer"},
    {"hidden", 0, FLAG_INT, NULL, NULL, 1, 1048576, "hidden size (default: from --params)"},
    {"layers", 0, FLAG_INT, NULL, NULL, 1, 100000, "layers (default: from --params)"},
    {"vocab", 0, FLAG_INT, "128000", NULL, 1, 100000000, "vocabulary size"},
    {"gpus-per-node", 0, FLAG_INT, "8", NULL, 1, 1024, "GPUs per node (NVLink domain)"},
    {"compat", 0, FLAG_BOOL, NULL, NULL, 0, 0,
     "the calculator before its fixes (fixed 65.5B shape, 8 B of optimizer state, its "
     "formulas and quirks; see the chapter's Pitfalls)"},
    {NULL, 0, 0, NULL, NULL, 0, 0, NULL}
};

typedef struct model {
    double params_b;            /* --params */
    long H, L, V, E;            /* E = 1 for a dense model */
    double count;               /* parameters from the shape */
    double expert_count;        /* of which in expert FFNs (MoE) */
} model;

typedef struct row {
    int tp, pp, dp, ep;
    double mem, tpc, ppc, dpc, epc, total;
    double bubble;              /* 1F1B, one-sample micro-batches: (pp-1)/(M+pp-1) */
    int fits, intra, skipped;
} row;

/* Python's repr of a float for the values the original echoes ("70.0", "40.5"). */
static void pyfloat(double v, char *out, size_t n)
{
    if (v == floor(v) && fabs(v) < 1e15)
        snprintf(out, n, "%.1f", v);
    else
        snprintf(out, n, "%.15g", v);
}

static void count_params(model *m)
{
    double H = (double)m->H, ffn = 2.0 * H * (double)(m->H * 4) * (double)m->E;
    m->count = (double)m->V * H + (double)m->L * (4.0 * H * H + ffn);
    m->expert_count = m->E > 1 ? (double)m->L * ffn : 0.0;
}

/* A shape for --params billions in all: hidden and layers in the ratio of the first
 * version's 8192 x 80 (H = 102.4 L), hidden a multiple of 128, and c L H^2 + V H close to
 * Ψ, where a layer holds c H^2 = (4 + 8E) H^2 (attention, and E feed-forward blocks of
 * 8 H^2: one for a dense model). */
static void derive_shape(model *m, long hidden, long layers)
{
    double psi = m->params_b * 1e9, V = (double)m->V, c = 4.0 + 8.0 * (double)m->E;
    if (hidden > 0 && layers > 0) {
        m->H = hidden;
        m->L = layers;
        return;
    }
    if (hidden > 0) {
        m->H = hidden;
        double l = (psi - V * hidden) / (c * hidden * (double)hidden);
        m->L = l < 1 ? 1 : lround(l);
        return;
    }
    double lo = 1, hi = 1e7;
    for (int i = 0; i < 200; i++) {
        double mid = (lo + hi) / 2;
        double p = (layers > 0 ? c * layers * mid * mid : c * mid * mid * mid / 102.4) +
                   V * mid;
        if (p < psi)
            lo = mid;
        else
            hi = mid;
    }
    m->H = lround(lo / 128.0) * 128;
    if (m->H < 128)
        m->H = 128;
    if (layers > 0) {
        m->L = layers;
    } else {
        double l = (psi - V * (double)m->H) / (c * (double)m->H * (double)m->H);
        m->L = l < 1 ? 1 : lround(l);
    }
}

/* ---- the original's formulas (compat) ---- */

static int compat_row(const model *m, int G, double mem_gb, long B, long S, row *r)
{
    double psi = m->count, H = (double)m->H;
    double params = psi * DTYPE / 1e9, opt = psi * COMPAT_OPT_BYTES / 1e9;
    int tp = r->tp, pp = r->pp, dp = r->dp;
    if (B / pp == 0)
        return -1;                  /* the original divides by zero here */
    long b = B / (B / pp);
    long act_layer = 10L * b * S * m->H / tp;
    double act = (double)act_layer * (double)(m->L / pp) * DTYPE / 1e9;
    r->mem = params / (tp * pp) * 2 + opt / (tp * pp) / dp + act;
    r->tpc = 4.0 * B * S * H * DTYPE * (tp - 1) / tp * (double)m->L / pp / 1e9;
    r->ppc = 2.0 * B * S * H * DTYPE / 1e9;
    r->dpc = 2.0 * (m->params_b * 1e9 / pp) * DTYPE * (dp - 1) / dp / 1e9;
    r->epc = 0;
    r->total = r->tpc + r->ppc + r->dpc;
    (void)G;
    r->fits = r->mem < mem_gb * FIT_SHARE;
    return 0;
}

/* ---- the fixed formulas ---- */

static void fixed_row(const model *m, double mem_gb, long B, long S, row *r)
{
    double H = (double)m->H, L = (double)m->L;
    int tp = r->tp, pp = r->pp, dp = r->dp, ep = r->ep;
    double dense = m->count - m->expert_count, expert = m->expert_count;
    /* parameters and gradients (2 + 2 bytes) sharded over TP x PP, experts also over EP;
     * Adam's fp32 master copy and two moments (12 bytes, chapter 5) also over DP (ZeRO-1) */
    double shard = dense / (tp * pp) + expert / ((double)tp * pp * ep);
    double params = shard * DTYPE * 2 / 1e9, opt = shard * OPT_BYTES / dp / 1e9;
    /* activations: 10 B S H bytes-per-value per layer and sample, for the samples a stage
     * holds under 1F1B: min(pp, samples per replica), one-sample micro-batches */
    long per_replica = B / dp;
    if (per_replica < 1) {
        r->skipped = 1;             /* fewer samples than replicas: DP has nothing to do */
        return;
    }
    long inflight = per_replica < pp ? per_replica : pp;
    double act = 10.0 * inflight * S * H / tp * ceil(L / pp) * DTYPE / 1e9;
    r->mem = params + opt + act;
    double tokens = (double)B / dp * S;          /* per replica and step */
    /* chapter 6: four all-reduces of B S H values per layer and step (two forward, two
     * backward), each sending 2 (tp-1)/tp of it per GPU on a ring */
    r->tpc = tp > 1 ? 8.0 * tokens * H * DTYPE * (tp - 1) / tp * ceil(L / pp) / 1e9 : 0.0;
    r->ppc = pp > 1 ? 2.0 * tokens * H * DTYPE / 1e9 : 0.0;
    r->dpc = dp > 1 ? 2.0 * (dense / (tp * pp) + expert / ((double)tp * pp * ep)) * DTYPE *
                      (dp - 1) / dp / 1e9 : 0.0;
    /* EP: dispatch and combine all-to-all per MoE layer, forward and backward, top-1 */
    r->epc = ep > 1 ? 4.0 * tokens * H * DTYPE * (ep - 1) / ep * ceil(L / pp) / 1e9 : 0.0;
    r->total = r->tpc + r->ppc + r->dpc + r->epc;
    r->fits = r->mem < mem_gb * FIT_SHARE;
    /* 1F1B over the replica's samples as micro-batches of one (chapter 7) */
    r->bubble = (double)(pp - 1) / (double)(per_replica + pp - 1);
}

/* Is a better than b? Of the layouts that fit: TP inside a node first; then a 1F1B bubble
 * under BUBBLE_OK; then, among those, the least communication, and among the others the
 * smallest bubble. compat: the first version's order (node, then communication). */
static int better(const row *a, const row *b, int compat)
{
    if (a->intra != b->intra)
        return a->intra;
    if (!compat) {
        int ok_a = a->bubble <= BUBBLE_OK, ok_b = b->bubble <= BUBBLE_OK;
        if (ok_a != ok_b)
            return ok_a;
        if (!ok_a && a->bubble != b->bubble)
            return a->bubble < b->bubble;
    }
    return a->total < b->total;
}

static void put_row(const row *r, int with_ep, int compat)
{
    if (r->skipped) {
        printf("%4d%s %3d %4d  (skipped: the batch is smaller than DP)\n", r->tp,
               r->intra ? " " : "*", r->pp, r->dp);
        return;
    }
    printf("%4d%s %3d %4d", r->tp, r->intra ? " " : "*", r->pp, r->dp);
    if (with_ep)
        printf(compat ? " %4d" : " %3d", r->ep);
    if (compat) {
        printf(" %9.1fGB %7s%s %9.2fGB %9.2fGB %9.2fGB\n", r->mem, "", r->fits ? "✓" : "✗",
               r->tpc, r->ppc, r->dpc);
        return;
    }
    printf(" %6.1fGB  %s   %8.2fGB %7.2fGB %7.2fGB", r->mem, r->fits ? "✓" : "✗", r->tpc,
           r->ppc, r->dpc);
    if (with_ep)
        printf(" %7.2fGB", r->epc);
    printf(" %5.1f%%\n", 100.0 * r->bubble);
}

static int calc_main(const lab_args *a)
{
    int compat = lab_arg_bool(a, "compat"), moe = lab_arg_bool(a, "moe");
    int G = (int)lab_arg_int(a, "gpus"), gpn = compat ? 8 : (int)lab_arg_int(a, "gpus-per-node");
    double mem_gb = lab_arg_double(a, "memory");
    long B = lab_arg_int(a, "batch-size"), S = lab_arg_int(a, "seq-len");
    int E = (int)lab_arg_int(a, "num-experts");
    model m = {.params_b = lab_arg_double(a, "params"), .V = compat ? 128000 :
               lab_arg_int(a, "vocab"), .E = moe ? E : 1};
    if (compat && (lab_arg_given(a, "hidden") || lab_arg_given(a, "layers") ||
                   lab_arg_given(a, "vocab") || lab_arg_given(a, "gpus-per-node"))) {
        fprintf(stderr, "mlsys-lab: %s: --compat keeps the first version's fixed shape: drop --hidden, "
                "--layers, --vocab and --gpus-per-node\n", LAB_ID);
        return 2;
    }
    if (compat) {
        m.H = 8192;
        m.L = 80;
    } else {
        derive_shape(&m, lab_arg_given(a, "hidden") ? lab_arg_int(a, "hidden") : 0,
                     lab_arg_given(a, "layers") ? lab_arg_int(a, "layers") : 0);
    }
    count_params(&m);
    char rule[256], thin[256], num[64];
    common_box(stdout, 78, "Parallel strategy calculator");
    common_rule(thin, sizeof thin, "─", 40);
    printf("\n%s\n MODEL CONFIGURATION\n%s\n", thin, thin);
    pyfloat(m.params_b, num, sizeof num);
    if (compat)
        printf("Parameters: %sB (%.1fB actual)\n", num, m.count / 1e9);
    else
        printf("Parameters: %sB (the shape below holds %.1fB)\n", num, m.count / 1e9);
    if (!compat)
        printf("Shape: hidden %ld, %ld layers, vocabulary %ld%s\n", m.H, m.L, m.V,
               lab_arg_given(a, "hidden") || lab_arg_given(a, "layers") ? "" :
               " (derived from --params)");
    double params = m.count * DTYPE / 1e9;
    double opt = m.count * (compat ? COMPAT_OPT_BYTES : OPT_BYTES) / 1e9;
    printf("Parameters memory: %.1f GB\n", params);
    printf("Gradients memory: %.1f GB\n", params);
    if (compat)
        printf("Optimizer memory: %.1f GB\n", opt);
    else
        printf("Optimizer memory: %.1f GB (Adam in mixed precision: an fp32 copy, momentum\n"
               "  and variance, 12 B per parameter, as in chapter 5)\n", opt);
    printf("Total model memory: %.1f GB\n", 2 * params + opt);
    if (moe && compat) {
        printf("MoE: %d experts\n", E);
    } else if (moe) {
        double per_expert = 8.0 * (double)m.H * (double)m.H;
        printf("MoE: %d experts of %.1fM parameters per layer, %.1fB in experts;\n  top-1 "
               "routing runs %.1fB parameters per token\n", E, per_expert / 1e6,
               m.expert_count / 1e9, (m.count - m.expert_count + m.expert_count / E) / 1e9);
    }
    printf("\n%s\n HARDWARE CONFIGURATION\n%s\n", thin, thin);
    int nodes = compat ? G / 8 : (G + gpn - 1) / gpn;
    printf("GPUs: %d (%d node%s)\n", G, nodes, nodes == 1 ? "" : "s");
    pyfloat(mem_gb, num, sizeof num);
    printf("Memory per GPU: %s GB\n", num);
    if (!compat)
        printf("A layout fits below 90 %% of it, %.1f GB: the rest is for the framework, "
               "buffers\n  and fragmentation\n", mem_gb * FIT_SHARE);
    printf("\n%s\n TRAINING CONFIGURATION\n%s\n", thin, thin);
    printf("Batch size: %ld\nSequence length: %ld\n", B, S);

    /* the search */
    row *rows = NULL;
    int nrows = 0, cap = 0;
    for (int tp = 1; tp <= (compat ? 8 : G); tp *= 2) {
        for (int pp = 1; pp <= 16; pp *= 2) {
            if ((long)tp * pp > G)
                continue;
            int dp = G / (tp * pp);
            if (dp < 1)
                continue;
            for (int ep = 1; ep <= (moe && !compat ? dp : 1); ep *= 2) {
                if (moe && !compat && (ep > E || dp % ep))
                    break;
                if (nrows == cap) {
                    cap = cap ? cap * 2 : 32;
                    rows = realloc(rows, (size_t)cap * sizeof *rows);
                    if (!rows)
                        abort();
                }
                row *r = &rows[nrows];
                memset(r, 0, sizeof *r);
                r->tp = tp;
                r->pp = pp;
                r->dp = dp;
                r->ep = ep;
                r->intra = tp <= gpn;
                if (compat) {
                    if (compat_row(&m, G, mem_gb, B, S, r) != 0)
                        r->skipped = 2;
                } else {
                    fixed_row(&m, mem_gb, B, S, r);
                }
                nrows++;
            }
        }
    }
    int with_ep = moe && !compat;
    common_rule(rule, sizeof rule, "=", 80);
    printf("\n%s\n STRATEGY COMPARISON\n%s\n\n", rule, rule);
    printf("%4s %4s %4s", "TP", "PP", "DP");
    if (with_ep)
        printf(compat ? " %4s" : " %3s", "EP");
    if (compat)
        printf(" %10s %8s %10s %10s %10s", "Mem/GPU", "Fits?", "TP Comm", "PP Comm", "DP Comm");
    else
        printf(" %8s %4s %10s %9s %9s", "Mem/GPU", "Fits", "TP Comm", "PP Comm", "DP Comm");
    if (with_ep)
        printf(" %9s", "EP Comm");
    if (!compat)
        printf(" %6s", "Bubble");
    common_rule(thin, sizeof thin, "-", compat ? 80 : with_ep ? 80 : 66);
    printf("\n%s\n", thin);
    int best = -1;
    for (int i = 0; i < nrows; i++) {
        row *r = &rows[i];
        if (r->skipped == 2) {
            printf("%4d  %3d %4d  (skipped: batch %ld < pp; before the fixes this divided by "
                   "zero)\n",
                   r->tp, r->pp, r->dp, B);
            continue;
        }
        put_row(r, with_ep, compat);
        if (r->skipped || !r->fits)
            continue;
        if (best < 0 || better(r, &rows[best], compat))
            best = i;
    }
    printf("\n* TP crosses node boundary (slower inter-node communication)\n");
    if (!compat) {
        printf("  (layouts with TP wider than %d GPUs per node are tried and carry the "
               "marker)\n", gpn);
        printf("Fits: memory per GPU under %.1f GB (90 %% of %s GB).\nComm: GB each GPU "
               "sends per step; TP's is four ring all-reduces per layer\n  (chapter 6).\n"
               "Bubble: 1F1B with the replica's samples as micro-batches of one,\n"
               "  (PP-1)/(M+PP-1).\n", mem_gb * FIT_SHARE, num);
    }
    printf("\n%s\n RECOMMENDATION\n%s\n", rule, rule);
    if (best < 0) {
        printf("\n⚠ No configuration fits in memory!\n");
        printf("  Consider: More GPUs, larger GPU memory, or smaller batch size\n");
    } else {
        row *r = &rows[best];
        pyfloat(mem_gb, num, sizeof num);
        printf("\nRecommended configuration:\n");
        printf("  Tensor Parallelism (TP): %d\n", r->tp);
        printf("  Pipeline Parallelism (PP): %d\n", r->pp);
        printf("  Data Parallelism (DP): %d\n", r->dp);
        if (with_ep)
            printf("  Expert Parallelism (EP): %d\n", r->ep);
        if (compat)
            printf("\nMemory per GPU: %.1f GB (limit: %s GB)\n", r->mem, num);
        else
            printf("\nMemory per GPU: %.1f GB (fits under %.1f GB, 90 %% of %s GB)\n", r->mem,
                   mem_gb * FIT_SHARE, num);
        printf("Total communication: %.2f GB per step\n", r->total);
        printf("\nReasoning:\n");
        printf("  - TP=%d %s\n", r->tp, r->intra ? "stays within a node (NVLink speed)" :
               "crosses nodes (slower)");
        if (compat) {
            printf("  - PP=%d splits model into %d stages\n", r->pp, r->pp);
        } else {
            long mb = B / r->dp;
            printf("  - PP=%d splits the model into %d stage%s; %ld micro-batch%s per "
                   "replica:\n    bubble %.1f %%%s\n", r->pp, r->pp, r->pp == 1 ? "" : "s", mb,
                   mb == 1 ? "" : "es", 100.0 * r->bubble, r->bubble <= BUBBLE_OK ? "" :
                   " (no layout inside a node that fits keeps it under 20 %)");
        }
        printf("  - DP=%d %s\n\n", r->dp, r->dp > 1 ? "provides excellent scaling" :
               "single replica");
        if (!compat)
            printf("Chosen among the layouts that fit: TP inside a node first, then a bubble\n"
                   "under 20 %% (M >= 4P), then the least communication.\n\n");
    }
    if (moe) {
        printf("\n%s\n MOE-SPECIFIC CONSIDERATIONS\n%s\n", rule, rule);
        printf("\nFor MoE models, also consider Expert Parallelism (EP):\n\n");
        printf("  With %d experts and 8-way EP:\n", E);
        printf("  - %d experts per GPU\n", E / 8);
        printf("  - Communication: 2 all-to-all per layer (dispatch and combine)\n\n");
        printf("EP vs TP for MoE:\n");
        printf("  - EP: Keeps full expert matrices → better GEMM efficiency\n");
        printf("  - TP: Slices experts → smaller GEMMs, worse efficiency\n");
        printf("  - EP preferred when num_experts >> TP degree\n\n");
        printf("Recommendation: Use EP instead of/in addition to TP for the FFN experts.\n");
        if (!compat)
            printf("(The table above already shards the experts over EP ranks taken from the "
                   "DP\ngroup.)\n");
        printf("\n");
    }
    free(rows);
    return 0;
}

const lab ch07_parallel_strategy_calculator_lab = {
    .id = LAB_ID,
    .title = "Parallel strategy calculator",
    .summary = "memory and communication of every TP x PP x DP (x EP) layout, and the best "
               "that fits",
    .flags = calc_flags,
    .main = calc_main,
    .view = "log",
};
