/* pipeline_schedule_viz.c - ch07/pipeline-schedule-viz: pipeline schedules as Gantt charts
 * (GPipe, 1F1B, interleaved 1F1B, ZB-H1) with their bubble and peak activations, counted
 * from the generated schedule (schedule.c) and set beside the closed forms. The original's
 * wrong bubble formula, broken 1F1B grid and crashing summary are fixed. --run executes a
 * schedule for real: an MLP cut into P stages on P ranks, activations sent forward and
 * gradients backward per micro-batch, checked against the unpipelined model. */
#include "../common/common.h"
#include "../../core/nn/nn.h"
#include "schedule.h"
#include "../../core/trace_values.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define LAB_ID "ch07/pipeline-schedule-viz"
#define SLOT_NS 1000000ull          /* synthetic events: one slot is drawn as 1 ms */
#define TOL 1e-5

static const lab_flag viz_flags[] = {
    {"stages", 'P', FLAG_INT, "4", NULL, 1, 64,
     "pipeline stages P (-s was this; it is --seq-len in every lab)"},
    {"microbatches", 'm', FLAG_INT, "8", NULL, 1, 1024, "micro-batches M per step"},
    {"schedule", 0, FLAG_CHOICE, "all", "all|gpipe|1f1b|interleaved|zb-h1", 0, 0,
     "which schedule to draw or run (all: every one, in turn)"},
    {"virtual", 0, FLAG_INT, "2", NULL, 1, 16,
     "interleaved: model chunks per stage v (virtual stages)"},
    {"run", 0, FLAG_BOOL, NULL, NULL, 0, 0,
     "execute the schedule on one rank per stage with a real MLP"},
    {"layers", 0, FLAG_INT, "16", NULL, 1, 4096,
     "--run: layers of the MLP, split evenly over P stages (x v chunks)"},
    {"hidden", 0, FLAG_INT, "256", NULL, 1, 4096, "--run: width H of every layer"},
    {"batch-size", 0, FLAG_INT, "64", NULL, 1, 65536,
     "--run: rows per micro-batch (-b was this; it is --backend wherever ranks run)"},
    {NULL, 0, 0, NULL, NULL, 0, 0, NULL}
};

/* ---- flags: the pipeline's shape, checked once for before() and the ranks ---- */

typedef struct shape {
    int P, M, v, L, H, B, run;
    int all;                    /* --schedule all */
    sched_kind one;             /* the schedule when not all */
    int skip_inter;             /* all with --run: the layers do not split for interleaved */
    char skip_why[160];         /* ...and why, said once before the ranks start */
} shape;

static int shape_of(const lab_args *a, shape *sh, char *err, size_t n)
{
    memset(sh, 0, sizeof *sh);
    sh->run = lab_arg_bool(a, "run");
    sh->P = (int)lab_arg_int(a, "stages");     /* --run: one rank per stage (ranks_flag) */
    sh->M = (int)lab_arg_int(a, "microbatches");
    sh->v = (int)lab_arg_int(a, "virtual");
    sh->L = (int)lab_arg_int(a, "layers");
    sh->H = (int)lab_arg_int(a, "hidden");
    sh->B = (int)lab_arg_int(a, "batch-size");
    const char *name = lab_arg_str(a, "schedule");
    sh->all = !name || !strcmp(name, "all");
    if (!sh->all && sched_parse(name, &sh->one) != 0) {
        snprintf(err, n, "unknown schedule '%s' (gpipe, 1f1b, interleaved, zb-h1 or all)",
                 name);
        return -1;
    }
    if (sh->run || lab_arg_given(a, "layers")) {
        int inter = sh->all || sh->one == SCHED_INTERLEAVED;
        if (sh->P > sh->L) {
            snprintf(err, n, "%d stages need at least %d layers (--layers is %d)", sh->P, sh->P,
                     sh->L);
            return -1;
        }
        if (inter && sh->L % (sh->P * sh->v) != 0) {
            /* with every schedule asked for, the others can still run (and the charts do not
             * use the layers at all): skip interleaved and say so; asked for alone, refuse */
            if (sh->all) {
                sh->skip_inter = sh->run;
                snprintf(sh->skip_why, sizeof sh->skip_why, "interleaved 1F1B skipped: --layers "
                         "%d does not split into %d stages x %d chunks (it needs a multiple of "
                         "%d)", sh->L, sh->P, sh->v, sh->P * sh->v);
            } else {
                snprintf(err, n, "--layers %d does not split into %d stages x %d chunks "
                         "(interleaved needs a multiple of %d; change --layers or --virtual)",
                         sh->L, sh->P, sh->v, sh->P * sh->v);
                return -1;
            }
        }
        if (sh->L % sh->P != 0) {
            snprintf(err, n, "--layers %d does not split into %d equal stages", sh->L, sh->P);
            return -1;
        }
    }
    return 0;
}

static int kinds_of(const shape *sh, sched_kind *k)
{
    if (!sh->all) {
        k[0] = sh->one;
        return 1;
    }
    int nk = 0;
    for (int i = 0; i < SCHED_COUNT; i++)
        if (!(sh->skip_inter && i == SCHED_INTERLEAVED))
            k[nk++] = (sched_kind)i;
    return nk;
}

/* ---- the chart (no ranks) ---- */

static const char *const strategy[SCHED_COUNT] = {
    "Strategy: every micro-batch forward, then every micro-batch backward.\n"
    "Memory: a stage holds the activations of ALL micro-batches until their backward.",
    "Strategy: P-1-s forwards to fill the pipe, then one forward and one backward in turn.\n"
    "Memory: a stage holds at most P-s micro-batches. The bubble is the SAME as GPipe's:\n"
    "1F1B only moves the idle slots around; what it saves is activation memory.",
    "Strategy: each stage holds v chunks of layers (virtual stages c*P+s), so a micro-batch\n"
    "crosses the ranks v times. Each op is 1/v as long, and the fill and drain shrink by v:\n"
    "this is the schedule that reduces the bubble. Cells read F<mb><chunk>: F3b = mb 3, chunk 1.",
    "Strategy: the backward is split into B (input gradient, which the stage before waits\n"
    "for) and W (weight gradient, which nobody waits for). W's are delayed and fill the\n"
    "slots where 1F1B would idle; a stage holds at most P micro-batches (F done, W not)."
};

static void peaks_text(const schedule *s, char *out, size_t n)
{
    size_t used = 0;
    out[0] = 0;
    for (int st = 0; st < s->P && used + 8 < n; st++)
        used += (size_t)snprintf(out + used, n - used, "%s%d", st ? ", " : "",
                                 sched_peak_inflight(s, st));
}

static void print_section(const schedule *s)
{
    char rule[256], peaks[512];
    common_rule(rule, sizeof rule, "-", 70);
    printf("%s\n %s SCHEDULE\n%s\n\n%s\n\n", rule, sched_title(s->kind), rule,
           strategy[s->kind]);
    sched_print_grid(s, stdout);
    long idle = 0;
    for (int st = 0; st < s->P; st++)
        idle += s->total - s->n[st];
    double f = sched_bubble_formula(s->kind, s->P, s->M, s->v);
    printf("\nBubble ratio: %.1f%% (%ld idle of %d x %d slots)", 100.0 * sched_bubble(s), idle,
           s->P, s->total);
    if (f >= 0)
        printf("; closed form %s = %.1f%%", s->kind == SCHED_INTERLEAVED ? "(P-1)/(v*M+P-1)" :
               s->kind == SCHED_ZBH1 ? "(P-1)/(3M+P-1)" : "(P-1)/(M+P-1)", 100.0 * f);
    printf("\n");
    if (f < 0 && s->kind == SCHED_INTERLEAVED && s->v > 1)
        printf("(The closed form (P-1)/(v*M+P-1) holds when M is a multiple of P, micro-batches\n"
               "going round in groups of P; with M = %d and P = %d the last group is short and\n"
               "the grid's count is the only figure.)\n", s->M, s->P);
    else if (f < 0 && s->kind == SCHED_ZBH1)
        printf("(The closed form (P-1)/(3M+P-1) needs M >= P, a full steady phase; with M = %d "
               "and\nP = %d the grid's count is the only figure.)\n", s->M, s->P);
    peaks_text(s, peaks, sizeof peaks);
    if (s->kind == SCHED_INTERLEAVED)
        printf("Peak activation memory: %.1f micro-batches' worth on stage 0 (chunks held per "
               "stage: %s; a chunk is 1/%d of a stage)\n", sched_peak_inflight(s, 0) /
               (double)s->v, peaks, s->v);
    else
        printf("Peak activation memory: %d %s worth on stage 0 (per stage: %s)\n",
               sched_peak_inflight(s, 0), sched_peak_inflight(s, 0) == 1 ? "micro-batch's" :
               "micro-batches'", peaks);
    printf("\n\n");
}

static void print_summary(schedule *all, int v)
{
    char rule[256], head[64];
    common_rule(rule, sizeof rule, "=", 70);
    printf("%s\n SUMMARY\n%s\n\n", rule, rule);
    snprintf(head, sizeof head, "Interleaved v=%d", v);
    printf("%-22s %-11s %-11s %-17s %-11s\n", "Metric", "GPipe", "1F1B", head, "ZB-H1");
    common_rule(rule, sizeof rule, "-", 76);
    printf("%s\n", rule);
    printf("%-22s", "Bubble ratio");
    for (int k = 0; k < SCHED_COUNT; k++) {
        char b[32];
        snprintf(b, sizeof b, "%.1f%%", 100.0 * sched_bubble(&all[k]));
        printf(" %-*s", k == SCHED_INTERLEAVED ? 17 : 11, b);
    }
    printf("\n%-22s", "Peak memory (stage 0)");
    for (int k = 0; k < SCHED_COUNT; k++) {
        char b[32];
        double p = sched_peak_inflight(&all[k], 0) / (double)all[k].v;
        snprintf(b, sizeof b, p == floor(p) ? "%.0f" : "%.1f", p);
        printf(" %-*s", k == SCHED_INTERLEAVED ? 17 : 11, b);
    }
    printf("\n%-22s", "Slots (F = B = W = 1)");
    for (int k = 0; k < SCHED_COUNT; k++) {
        char b[48];
        if (k == SCHED_INTERLEAVED)
            snprintf(b, sizeof b, "%d (of 1/%d)", all[k].total, v);
        else
            snprintf(b, sizeof b, "%d", all[k].total);
        printf(" %-*s", k == SCHED_INTERLEAVED ? 17 : 11, b);
    }
    printf("\n\nPeak memory is in micro-batches' worth of one stage's activations.\n"
           "Costs: GPipe, 1F1B and interleaved count a backward as long as a forward; ZB-H1\n"
           "splits it into B and W of one slot each (a backward of two forwards' time, nearer\n"
           "the truth). Bubbles are shares of each schedule's own time, so they compare.\n");
    printf("\nKey insights:\n"
           "1. 1F1B has the SAME bubble as GPipe; it only lowers peak memory (P instead of M).\n"
           "2. Only splitting the work differently lowers the bubble: interleaving (v chunks\n"
           "   per stage) divides the fill and drain by v; ZB-H1 fills them with W passes.\n"
           "3. More micro-batches lower every bubble (towards 0 as M grows), and with 1F1B\n"
           "   the memory stays bounded by the pipeline depth.\n\n");
}

static void print_bubble_table(int P)
{
    char rule[256];
    common_rule(rule, sizeof rule, "=", 70);
    printf("%s\n BUBBLE RATIO vs MICRO-BATCHES\n%s\n\n", rule, rule);
    printf("Bubble ratio = (P-1) / (M + P - 1)   (GPipe and 1F1B)\n\n"
           "Where P = pipeline stages, M = micro-batches\n\n");
    printf("For P = %d stage%s:\n\n", P, P == 1 ? "" : "s");
    printf("%-15s %-15s %-15s\n", "Micro-batches", "Bubble Ratio", "Efficiency");
    common_rule(rule, sizeof rule, "-", 45);
    printf("%s\n", rule);
    static const int ms[] = {1, 2, 4, 8, 16, 32, 64};
    for (size_t i = 0; i < sizeof ms / sizeof ms[0]; i++) {
        double b = (double)(P - 1) / (double)(ms[i] + P - 1);
        char x[16], y[16];
        snprintf(x, sizeof x, "%.1f%%", 100.0 * b);
        snprintf(y, sizeof y, "%.1f%%", 100.0 * (1.0 - b));
        printf("%-15d %-15s %-15s\n", ms[i], x, y);
    }
    printf("\nTakeaway: use at least 4x as many micro-batches as stages (M >= 4P)\n"
           "          for > 80%% efficiency.\n\n");
}

static void print_tradeoff(void)
{
    char rule[256];
    common_rule(rule, sizeof rule, "=", 70);
    printf("%s\n MEMORY vs THROUGHPUT TRADEOFF\n%s\n\n", rule, rule);
    printf("MORE MICRO-BATCHES:\n"
           "  + lower bubble ratio (better throughput)\n"
           "  - more activation memory with GPipe (1F1B: unchanged)\n"
           "  - smaller micro-batches (less efficient GEMMs)\n\n"
           "FEWER MICRO-BATCHES:\n"
           "  - higher bubble ratio\n"
           "  + less activation memory\n"
           "  + larger micro-batches\n\n"
           "1F1B ADVANTAGE:\n"
           "  Memory is bounded by the pipeline depth, not by the number of micro-batches,\n"
           "  so many micro-batches (a small bubble) no longer cost memory.\n\n"
           "Example: 24 layers, hidden 4096, batch 512 on 4 stages (6 layers each),\n"
           "16 micro-batches of 32 samples. Counting one hidden vector per sample per layer:\n"
           "  GPipe: 16 x 32 x 4096 x 6 = 12,582,912 values per stage\n"
           "  1F1B:   4 x 32 x 4096 x 6 =  3,145,728 values per stage\n"
           "A 4x cut. In bytes multiply by the bytes per value (2 in bf16: 25.2 MB and\n"
           "6.3 MB) and by the tensors a layer keeps for its backward (often 10 or more).\n");
}

static int viz_chart(const shape *sh)
{
    sched_kind ks[SCHED_COUNT];
    int nk = kinds_of(sh, ks);
    schedule all[SCHED_COUNT];
    char err[256], rule[256];
    for (int i = 0; i < nk; i++)
        if (sched_build(&all[i], ks[i], sh->P, sh->M, sh->v, err, sizeof err) != 0 ||
            sched_validate(&all[i], err, sizeof err) != 0) {
            fprintf(stderr, "mlsys-lab: %s: %s\n", LAB_ID, err);
            for (int j = 0; j < i; j++)
                sched_free(&all[j]);
            return 1;
        }
    common_box(stdout, 68, "Pipeline parallelism schedule visualizer");
    common_rule(rule, sizeof rule, "=", 70);
    printf("%s\n PIPELINE SCHEDULE COMPARISON\n%s\n\n", rule, rule);
    printf("Configuration: %d stage%s, %d micro-batch%s\n", sh->P, sh->P == 1 ? "" : "s", sh->M,
           sh->M == 1 ? "" : "es");
    printf("One slot = one forward (F) or backward (B, W) of one micro-batch on one stage;\n"
           "'.' = idle. The schedules are generated and checked (every dependency holds).\n\n");
    for (int i = 0; i < nk; i++)
        print_section(&all[i]);
    if (sh->all)
        print_summary(all, sh->v);
    print_bubble_table(sh->P);
    print_tradeoff();
    for (int i = 0; i < nk; i++)
        sched_free(&all[i]);
    fflush(stdout);
    return 0;
}

static int viz_before(const lab_args *a)
{
    shape sh;
    char err[300];
    if (shape_of(a, &sh, err, sizeof err) != 0) {
        fprintf(stderr, "mlsys-lab: %s: %s\n", LAB_ID, err);
        return 2;
    }
    if (!sh.run)
        return viz_chart(&sh);
    char rule[256];
    common_rule(rule, sizeof rule, "=", 70);
    printf("%s\n Pipeline schedules, executed: %d ranks\n%s\n", rule, sh.P, rule);
    printf("MLP: %d layers of %dx%d (Linear + ReLU), %d per stage; %d micro-batch%s of %d rows;"
           "\nMSE loss. Each rank is one stage; activations go forward and gradients backward\n"
           "point-to-point, one message per micro-batch.\n\n", sh.L, sh.H, sh.H, sh.L / sh.P,
           sh.M, sh.M == 1 ? "" : "es", sh.B);
    if (sh.skip_inter)
        printf("Note: %s; the other schedules run.\n\n", sh.skip_why);
    fflush(stdout);
    return -1;
}

/* The front end's timeline: the chosen schedule, or every one in turn for "all", as compute
 * spans one slot per 1 ms of drawn time, each schedule a section of its own (a lab step named
 * after it) so that the timeline shows it with its title and its own bubble. Nothing with
 * --run: the ranks' own events show it. */
static size_t viz_events(const lab_args *a, mlsys_event **ev)
{
    shape sh;
    char err[300];
    *ev = NULL;
    if (shape_of(a, &sh, err, sizeof err) != 0 || sh.run)
        return 0;
    sched_kind ks[SCHED_COUNT];
    int nk = kinds_of(&sh, ks), first = 0;
    size_t n = 0;
    for (int i = 0; i < nk; i++) {
        schedule s;
        if (sched_build(&s, ks[i], sh.P, sh.M, sh.v, err, sizeof err))
            break;
        mlsys_event *one;
        size_t k = sched_events_at(&s, SLOT_NS, first, i, &one);
        *ev = realloc(*ev, (n + k) * sizeof **ev);
        if (!*ev)
            abort();
        memcpy(*ev + n, one, k * sizeof *one);
        n += k;
        free(one);
        first += s.total + 2;           /* two idle slots between schedules */
        sched_free(&s);
    }
    return n;
}

/* ---- --run: the schedule on real ranks ---- */

/* One stage's share of the MLP: chunk c of this rank holds layers [first(c), first(c)+per). */
typedef struct stage_model {
    int H, B, per, v, P, M, L;
    float *w, *b, *dw, *db;     /* [v*per][H][H], [v*per][H] and their gradients */
    float *act;                 /* [v][M][per+1][B][H]: the chunk's input, then each output */
    float *dz;                  /* [v][M][per][B][H]: a layer's output gradient, kept for W */
    float *g, *dx;              /* [v][M][B][H]: gradient received, gradient sent */
} stage_model;

#define BH(m) ((size_t)(m)->B * (size_t)(m)->H)

static float *act_at(stage_model *m, int c, int mb, int j)
{
    return m->act + (((size_t)c * m->M + mb) * (size_t)(m->per + 1) + j) * BH(m);
}

static float *dz_at(stage_model *m, int c, int mb, int j)
{
    return m->dz + (((size_t)c * m->M + mb) * (size_t)m->per + j) * BH(m);
}

static int global_layer(const stage_model *m, int stage, int c, int j)
{
    return (c * m->P + stage) * m->per + j;
}

/* Layer l's weights: nn.Linear's default init from seed 1000 + l, the same on every rank. */
static void init_layer(float *w, float *b, int H, int l)
{
    mlsys_rng r;
    mlsys_rng_seed(&r, 1000u + (uint64_t)l);
    nn_init_linear(w, (size_t)H * H, H, &r);
    nn_init_linear(b, (size_t)H, H, &r);
}

static void make_data(float *x, float *y, int B, int H, int mb)
{
    mlsys_rng r;
    mlsys_rng_seed(&r, (uint64_t)mb);
    for (size_t i = 0; i < (size_t)B * H; i++)
        x[i] = (float)mlsys_rng_normal(&r);
    mlsys_rng_seed(&r, 5000u + (uint64_t)mb);
    for (size_t i = 0; i < (size_t)B * H; i++)
        y[i] = (float)mlsys_rng_normal(&r);
}

/* y = relu(x·Wᵀ + b), no ReLU after the model's last layer. */
static void layer_fwd(float *y, const float *x, const float *w, const float *b, int B, int H,
                      int relu)
{
    nn_linear_forward(y, x, w, b, B, H, H);
    if (relu)
        nn_relu_forward(y, y, (size_t)B * H);
}

/* The input-gradient half: dz = dy masked by the ReLU (y > 0), dx = dz·W. */
static void layer_bwd_input(float *dx, float *dz, const float *dy, const float *y,
                            const float *w, int B, int H, int relu)
{
    size_t n = (size_t)B * H;
    if (relu)
        nn_relu_backward(dz, dy, y, n);
    else
        memcpy(dz, dy, n * sizeof *dz);
    if (dx)
        nn_gemm(0, 0, B, H, H, 1.0f, dz, H, w, H, 0.0f, dx, H);
}

/* The weight-gradient half: dW += dzᵀ·x, db += column sums of dz. */
static void layer_bwd_weight(float *dw, float *db, const float *dz, const float *x, int B, int H)
{
    nn_gemm(1, 0, H, H, B, 1.0f, dz, H, x, H, 1.0f, dw, H);
    for (int i = 0; i < B; i++)
        for (int o = 0; o < H; o++)
            db[o] += dz[(size_t)i * H + o];
}

/* The unpipelined model: every micro-batch through all L layers and back, gradients summed
 * in micro-batch order. dw [L][H][H], db [L][H]. */
static void serial_grads(int L, int H, int B, int M, float *dw, float *db)
{
    size_t n = (size_t)B * H;
    float *w = mlsys_xmalloc((size_t)L * H * H * sizeof *w), *b = mlsys_xmalloc((size_t)L * H *
                                                                                  sizeof *b);
    float *a = mlsys_xmalloc((size_t)(L + 1) * n * sizeof *a), *t = mlsys_xmalloc(n * sizeof *t);
    float *g = mlsys_xmalloc(n * sizeof *g), *dz = mlsys_xmalloc(n * sizeof *dz);
    for (int l = 0; l < L; l++)
        init_layer(w + (size_t)l * H * H, b + (size_t)l * H, H, l);
    memset(dw, 0, (size_t)L * H * H * sizeof *dw);
    memset(db, 0, (size_t)L * H * sizeof *db);
    for (int mb = 0; mb < M; mb++) {
        make_data(a, t, B, H, mb);
        for (int l = 0; l < L; l++)
            layer_fwd(a + (size_t)(l + 1) * n, a + (size_t)l * n, w + (size_t)l * H * H,
                      b + (size_t)l * H, B, H, l < L - 1);
        nn_mse_backward(g, a + (size_t)L * n, t, n, 1.0f / (float)M);
        for (int l = L - 1; l >= 0; l--) {
            layer_bwd_input(l ? g : NULL, dz, g, a + (size_t)(l + 1) * n, w + (size_t)l * H * H,
                            B, H, l < L - 1);
            layer_bwd_weight(dw + (size_t)l * H * H, db + (size_t)l * H, dz, a + (size_t)l * n,
                             B, H);
        }
    }
    free(w);
    free(b);
    free(a);
    free(t);
    free(g);
    free(dz);
}

static void model_init(stage_model *m, const shape *sh, int v, int stage)
{
    memset(m, 0, sizeof *m);
    m->H = sh->H;
    m->B = sh->B;
    m->P = sh->P;
    m->M = sh->M;
    m->L = sh->L;
    m->v = v;
    m->per = sh->L / (sh->P * v);
    size_t nl = (size_t)v * m->per, hh = (size_t)m->H * m->H;
    m->w = mlsys_xmalloc(nl * hh * sizeof(float));
    m->b = mlsys_xmalloc(nl * (size_t)m->H * sizeof(float));
    m->dw = mlsys_xcalloc(nl * hh, sizeof(float));
    m->db = mlsys_xcalloc(nl * (size_t)m->H, sizeof(float));
    for (int c = 0; c < v; c++)
        for (int j = 0; j < m->per; j++) {
            size_t k = (size_t)c * m->per + j;
            init_layer(m->w + k * hh, m->b + k * m->H, m->H, global_layer(m, stage, c, j));
        }
    size_t cm = (size_t)v * m->M;
    m->act = mlsys_xcalloc(cm * (size_t)(m->per + 1) * BH(m), sizeof(float));
    m->dz = mlsys_xcalloc(cm * (size_t)m->per * BH(m), sizeof(float));
    m->g = mlsys_xcalloc(cm * BH(m), sizeof(float));
    m->dx = mlsys_xcalloc(cm * BH(m), sizeof(float));
}

static void model_free(stage_model *m)
{
    free(m->w);
    free(m->b);
    free(m->dw);
    free(m->db);
    free(m->act);
    free(m->dz);
    free(m->g);
    free(m->dx);
}

/* Tags name the pass, the receiving virtual stage and the micro-batch: unique per pair. */
static int tag_of(int kind_b, int vs, int mb, int M)
{
    return ((vs * M + mb) << 1) | kind_b;
}

typedef struct run_out {
    double busy_ns, span_ns, loss;
    int reqs;               /* point-to-point sends this rank made, each of msg_bytes */
    size_t msg_bytes;
} run_out;

/* This rank's ops of schedule s, in order: receive the input if another rank makes it,
 * compute (a span the timeline shows), send the output on without waiting. */
static int run_schedule(mlsys_comm *c, const schedule *s, stage_model *m, run_out *out)
{
    int st = mlsys_rank(c), P = s->P, M = s->M, V = P * s->v, rc = MLSYS_OK;
    int zb = s->kind == SCHED_ZBH1, nops = s->n[st];
    size_t n = BH(m), hh = (size_t)m->H * m->H;
    mlsys_request **reqs = mlsys_xcalloc((size_t)nops + 1, sizeof *reqs);
    int nreq = 0;
    float *target = mlsys_xmalloc(n * sizeof *target), *tmp = mlsys_xmalloc(n * sizeof *tmp);
    char label[32];
    memset(m->dw, 0, (size_t)m->v * m->per * hh * sizeof(float));
    memset(m->db, 0, (size_t)m->v * m->per * m->H * sizeof(float));
    out->busy_ns = out->loss = 0;
    if ((rc = mlsys_barrier(c)) != MLSYS_OK)
        goto done;
    uint64_t t_start = mlsys_now_ns();
    for (int i = 0; i < nops && rc == MLSYS_OK; i++) {
        const sched_op *o = &s->ops[st][i];
        int ch = o->chunk, mb = o->mb, vs = ch * P + st;
        int last = vs == V - 1;
        size_t cm = (size_t)ch * M + mb;
        if (s->kind == SCHED_INTERLEAVED)
            snprintf(label, sizeof label, "%c mb%d c%d", o->kind, mb, ch);
        else
            snprintf(label, sizeof label, "%c mb%d", o->kind, mb);
        /* the input: from the rank of the neighbouring virtual stage (none for the ends) */
        if (o->kind == 'F' && vs > 0 && (vs - 1) % P != st)
            rc = mlsys_recv(c, act_at(m, ch, mb, 0), n, MLSYS_F32, (vs - 1) % P,
                            tag_of(0, vs, mb, M));
        else if (o->kind == 'B' && !last && (vs + 1) % P != st)
            rc = mlsys_recv(c, m->g + cm * n, n, MLSYS_F32, (vs + 1) % P, tag_of(1, vs, mb, M));
        if (rc != MLSYS_OK)
            break;
        uint64_t t0 = mlsys_now_ns();
        mlsys_compute_begin(c, label);
        float *send = NULL;
        int dst = -1, dtag = 0;
        size_t dcm = 0;
        if (o->kind == 'F') {
            if (vs == 0)
                make_data(act_at(m, ch, mb, 0), tmp, m->B, m->H, mb);
            for (int j = 0; j < m->per; j++) {
                size_t k = (size_t)ch * m->per + j;
                int gl = global_layer(m, st, ch, j);
                layer_fwd(act_at(m, ch, mb, j + 1), act_at(m, ch, mb, j), m->w + k * hh,
                          m->b + k * m->H, m->B, m->H, gl < m->L - 1);
            }
            if (last) {
                make_data(tmp, target, m->B, m->H, mb);
                out->loss += nn_mse_forward(act_at(m, ch, mb, m->per), target, n) / M;
            } else {
                send = act_at(m, ch, mb, m->per);
                dst = (vs + 1) % P;
                dtag = tag_of(0, vs + 1, mb, M);
                dcm = (size_t)((vs + 1) / P) * M + mb;
            }
        } else if (o->kind == 'B') {
            float *dy = m->g + cm * n;
            if (last) {
                make_data(tmp, target, m->B, m->H, mb);
                nn_mse_backward(dy, act_at(m, ch, mb, m->per), target, n, 1.0f / (float)M);
            }
            for (int j = m->per - 1; j >= 0; j--) {
                size_t k = (size_t)ch * m->per + j;
                int gl = global_layer(m, st, ch, j);
                float *dxo = j > 0 ? dy : (vs > 0 ? m->dx + cm * n : NULL);
                /* dz is kept per layer; dy can be overwritten by the next layer's input grad */
                layer_bwd_input(dxo, dz_at(m, ch, mb, j), dy, act_at(m, ch, mb, j + 1),
                                m->w + k * hh, m->B, m->H, gl < m->L - 1);
                if (!zb)
                    layer_bwd_weight(m->dw + k * hh, m->db + k * m->H, dz_at(m, ch, mb, j),
                                     act_at(m, ch, mb, j), m->B, m->H);
            }
            if (vs > 0) {
                send = m->dx + cm * n;
                dst = (vs - 1) % P;
                dtag = tag_of(1, vs - 1, mb, M);
                dcm = (size_t)((vs - 1) / P) * M + mb;
            }
        } else {
            for (int j = m->per - 1; j >= 0; j--) {
                size_t k = (size_t)ch * m->per + j;
                layer_bwd_weight(m->dw + k * hh, m->db + k * m->H, dz_at(m, ch, mb, j),
                                 act_at(m, ch, mb, j), m->B, m->H);
            }
        }
        mlsys_compute_end(c, label);
        out->busy_ns += (double)(mlsys_now_ns() - t0);
        if (send && dst == st) {
            /* the next virtual stage lives here too (P = 1 interleaved): hand it over */
            float *into = o->kind == 'F' ? act_at(m, (int)(dcm / M), mb, 0) : m->g + dcm * n;
            memcpy(into, send, n * sizeof *into);
        } else if (send) {
            rc = mlsys_isend(c, send, n, MLSYS_F32, dst, dtag, &reqs[nreq++]);
        }
    }
    if (rc == MLSYS_OK)
        rc = mlsys_waitall(reqs, nreq);
    out->span_ns = (double)(mlsys_now_ns() - t_start);
    out->reqs = nreq;
    out->msg_bytes = n * sizeof(float);
done:
    free(reqs);
    free(target);
    free(tmp);
    return rc;
}

/* "65,536" */
static char *thousands(char *buf, size_t n, long long v)
{
    char raw[32];
    int len = snprintf(raw, sizeof raw, "%lld", v), o = 0;
    for (int i = 0; i < len && o + 2 < (int)n; i++) {
        if (i && raw[i - 1] != '-' && (len - i) % 3 == 0)
            buf[o++] = ',';
        buf[o++] = raw[i];
    }
    buf[o] = 0;
    return buf;
}

static int viz_rank(mlsys_comm *c, const lab_args *a)
{
    shape sh;
    char err[300];
    int st = mlsys_rank(c), P = mlsys_size(c), rc = 0;
    if (shape_of(a, &sh, err, sizeof err) != 0 || sh.P != P) {
        if (st == 0)
            fprintf(stderr, "mlsys-lab: %s: %s\n", LAB_ID, sh.P != P ? "one rank per stage"
                    : err);
        return 2;
    }
    sched_kind ks[SCHED_COUNT];
    int nk = kinds_of(&sh, ks);
    long ncores = sysconf(_SC_NPROCESSORS_ONLN);
    int cores = ncores > 0 ? (int)ncores : 1;
    float *ref_w = mlsys_xmalloc((size_t)sh.L * sh.H * sh.H * sizeof *ref_w);
    float *ref_b = mlsys_xmalloc((size_t)sh.L * sh.H * sizeof *ref_b);
    serial_grads(sh.L, sh.H, sh.B, sh.M, ref_w, ref_b);
    double *busy = mlsys_xcalloc((size_t)P, sizeof *busy);
    char rule[256];
    common_rule(rule, sizeof rule, "-", 70);
    for (int i = 0; i < nk && rc == 0; i++) {
        schedule s;
        if (sched_build(&s, ks[i], P, sh.M, sh.v, err, sizeof err) != 0) {
            fprintf(stderr, "mlsys-lab: %s: rank %d: %s\n", LAB_ID, st, err);
            rc = 1;
            break;
        }
        stage_model m;
        model_init(&m, &sh, s.v, st);
        run_out o;
        memset(&o, 0, sizeof o);
        /* each schedule a section of the timeline, named after it */
        if (mlsys_step(c, i, sched_short(ks[i])) != MLSYS_OK) {
            model_free(&m);
            sched_free(&s);
            rc = 1;
            break;
        }
        if (run_schedule(c, &s, &m, &o) != MLSYS_OK) {
            fprintf(stderr, "mlsys-lab: %s: rank %d: %s\n", LAB_ID, st, mlsys_errmsg(c));
            rc = 1;
        }
        /* this rank's layers against the serial model's gradients */
        double diff = 0.0;
        size_t hh = (size_t)sh.H * sh.H;
        for (int ch = 0; ch < s.v && rc == 0; ch++)
            for (int j = 0; j < m.per; j++) {
                size_t k = (size_t)ch * m.per + j;
                int gl = global_layer(&m, st, ch, j);
                for (size_t e = 0; e < hh; e++) {
                    double d = fabs((double)m.dw[k * hh + e] - ref_w[(size_t)gl * hh + e]);
                    diff = d > diff || isnan(d) ? (isnan(d) ? INFINITY : d) : diff;
                }
                for (int e = 0; e < sh.H; e++) {
                    double d = fabs((double)m.db[k * sh.H + e] - ref_b[(size_t)gl * sh.H + e]);
                    diff = d > diff || isnan(d) ? (isnan(d) ? INFINITY : d) : diff;
                }
            }
        double span = o.span_ns, loss = o.loss;
        int64_t sent = o.reqs;              /* the schedule's own messages, summed below */
        if (rc == 0 && (mlsys_allreduce(c, &sent, &sent, 1, MLSYS_I64, MLSYS_SUM) != MLSYS_OK ||
                        mlsys_allreduce(c, &diff, &diff, 1, MLSYS_F64, MLSYS_MAX) != MLSYS_OK ||
                        mlsys_allreduce(c, &span, &span, 1, MLSYS_F64, MLSYS_MAX) != MLSYS_OK ||
                        mlsys_allreduce(c, &loss, &loss, 1, MLSYS_F64, MLSYS_SUM) != MLSYS_OK ||
                        mlsys_allgather(c, &o.busy_ns, busy, 1, MLSYS_F64) != MLSYS_OK)) {
            fprintf(stderr, "mlsys-lab: %s: rank %d: %s\n", LAB_ID, st, mlsys_errmsg(c));
            rc = 1;
        }
        if (rc == 0) {
            double sum = 0.0;
            for (int r = 0; r < P; r++)
                sum += busy[r];
            double measured = span > 0 ? 1.0 - sum / (P * span) : 0.0;
            /* the same figures to the timeline: its bubble for this section is this one */
            mlsys_emit_bubble(c, o.busy_ns, span);
            char vtext[48] = "";
            if (s.kind == SCHED_INTERLEAVED)
                snprintf(vtext, sizeof vtext, ", v=%d chunks per stage", s.v);
            mlsys_print_root(c, "%s\n %s on %d rank%s: %d micro-batch%s%s\n%s\n", rule,
                             sched_title(s.kind), P, P == 1 ? "" : "s", sh.M,
                             sh.M == 1 ? "" : "es", vtext, rule);
            mlsys_print_root(c, "loss (mean over micro-batches): %.6f\n", loss);
            mlsys_print_root(c, "weight gradients vs the unpipelined model: max |pipelined - "
                             "serial| = %.3g (%s, tolerance %.0e)\n", diff,
                             diff <= TOL ? "OK" : "NOT OK", TOL);
            mlsys_print_root(c, "bubble: measured %.1f%% (idle / total from timestamps, "
                             "%.2f ms), predicted %.1f%% (from the schedule, F = B = W)\n",
                             100.0 * measured, span / 1e6, 100.0 * sched_bubble(&s));
            mlsys_print_root(c, "per stage, measured / predicted:");
            for (int r = 0; r < P; r++)
                mlsys_print_root(c, " %d: %.1f%% / %.1f%%", r, 100.0 * (1.0 - busy[r] / span),
                                 100.0 * sched_stage_bubble(&s, r));
            mlsys_print_root(c, "\n");
            /* a micro-batch crosses v·P - 1 boundaries each way: interleaving multiplies the
             * messages, each one the same activation of B x H floats */
            long hops = (long)s.v * P - 1, want = 2L * sh.M * hops;
            char nb[32];
            mlsys_print_root(c, "messages: %lld point-to-point sends of %s B each (2·M·(vP-1) = "
                             "%ld)\n", (long long)sent, thousands(nb, sizeof nb,
                             (long long)o.msg_bytes), want);
            if (cores < P)
                mlsys_print_root(c, "(%d ranks on %d cores: a rank that is ready also waits for "
                                 "a core, so these\nmeasured bubbles, and the order of the "
                                 "schedules by them, mean nothing here)\n", P, cores);
            mlsys_print_root(c, "\n");
            if (diff > TOL)
                rc = 1;
        }
        model_free(&m);
        sched_free(&s);
    }
    if (rc == 0)
        mlsys_print_root(c, "Why measured and predicted differ: the prediction counts slots of "
                         "compute only.\nA real run also pays for every message (a send waits "
                         "for its receiver) and for\nstarting every op, and interleaving has "
                         "v times the messages. A backward costing\ntwice a forward is not a "
                         "cause: it stretches busy and idle slots alike. With\nmore ranks than "
                         "cores, ranks also wait for a core%s.\n", cores < P ?
                         " (here: the measured ranking\nmeans nothing)" : "");
    free(busy);
    free(ref_w);
    free(ref_b);
    return rc;
}

const lab ch07_pipeline_schedule_viz_lab = {
    .id = LAB_ID,
    .title = "Pipeline schedule visualizer",
    .summary = "GPipe, 1F1B, interleaved and ZB-H1 schedules: Gantt charts, bubble, peak "
               "activations; --run executes them on ranks",
    .flags = viz_flags,
    .port = 0,
    .ranks_flag = "stages",
    .min_ranks = 1,
    .max_ranks = 64,
    .before = viz_before,
    .rank_main = viz_rank,
    .synth_events = viz_events,
    .view = "timeline",
};
