/* ch07_exercises.c - Chapter 7's exercises: the bubble and the peak activations of fill-drain
 * and 1F1B (predict, from the closed forms that schedule.c's generator obeys), the traffic
 * of an MoE layer under tensor and expert parallelism (a quiz file), and a TP x PP x DP
 * layout for 70B on 64 GPUs, checked against the strategy calculator's --compat model. */
#include "../../lab/exercise/exercise.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- predict: the pipeline bubble ---- */

static void draw_bubble(uint64_t seed, ex_question *q)
{
    mlsys_rng g;
    mlsys_rng_seed(&g, seed);
    int p = (int)ex_draw_int(&g, 2, 8);
    int m = (int)ex_draw_int(&g, 1, 32);
    int kind = (int)ex_draw_int(&g, 0, 3);
    int s = (int)ex_draw_int(&g, 0, p - 1);
    double bubble = 100.0 * (p - 1) / (m + p - 1);
    const char *head = "A pipeline of P = %d stages runs M = %d micro-batches, forward and "
                       "backward passes of one time slot each. ";
    char intro[200];
    snprintf(intro, sizeof intro, head, p, m);
    switch (kind) {
    case 0:
    case 1:
        snprintf(q->text, sizeof q->text, "%sWith the %s schedule, what fraction of the "
                 "stages' time slots is idle (the bubble)? Answer in percent.", intro,
                 kind == 0 ? "fill-drain (GPipe)" : "1F1B");
        q->answer = bubble;
        q->abs_tol = 0.1;
        snprintf(q->unit, sizeof q->unit, "%%");
        snprintf(q->explain, sizeof q->explain,
                 "Both schedules take 2(M+P-1) = %d slots and each stage is busy for 2M = %d "
                 "of them, so the bubble is (P-1)/(M+P-1) = %d/%d = %.1f %%. 1F1B does not "
                 "shrink it (only interleaving with v chunks does: (P-1)/(vM+P-1)); what 1F1B "
                 "saves is memory.", 2 * (m + p - 1), 2 * m, p - 1, m + p - 1, bubble);
        break;
    case 2:
        snprintf(q->text, sizeof q->text, "%sWith the 1F1B schedule, how many micro-batches' "
                 "activations does stage %d hold at most at one time (stages are numbered "
                 "from 0)?", intro, s);
        q->answer = p - s < m ? p - s : m;
        snprintf(q->unit, sizeof q->unit, "micro-batches");
        snprintf(q->explain, sizeof q->explain,
                 "Stage s runs P-1-s warm-up forwards and then one more before its first "
                 "backward frees anything, so it holds min(P-s, M) = min(%d, %d) = %g. The "
                 "depth of the pipeline bounds it, not M: fill-drain would hold all %d.",
                 p - s, m, q->answer, m);
        break;
    default:
        snprintf(q->text, sizeof q->text, "%sWith the fill-drain (GPipe) schedule, how many "
                 "micro-batches' activations does stage %d hold at most at one time (stages "
                 "are numbered from 0)?", intro, s);
        q->answer = m;
        snprintf(q->unit, sizeof q->unit, "micro-batches");
        snprintf(q->explain, sizeof q->explain,
                 "Fill-drain runs all M forwards before the first backward, so every stage "
                 "holds all M = %d micro-batches' activations at its peak; 1F1B would hold "
                 "min(P-s, M) = %d on stage %d.", m, p - s < m ? p - s : m, s);
        break;
    }
}

static const char *const bubble_hints[] = {
    "How many slots does the whole schedule take, and for how many of them is one stage "
    "busy?",
    "Does 1F1B change when the last backward can finish? What does it change instead?",
    "In 1F1B, how many forwards has stage s started before its first backward arrives?",
    NULL
};

static const exercise ch07_predict_bubble = {
    .id = "ch07-predict-bubble",
    .chapter = 7,
    .kind = EX_PREDICT,
    .title = "The bubble and the activations of fill-drain and 1F1B",
    .task = "Predict a pipeline's idle fraction, or the activations a stage holds at its peak, "
            "for fill-drain and 1F1B.",
    .hints = bubble_hints,
    .lab = "ch07/pipeline-schedule-viz",
    .draw = draw_bubble,
};

/* ---- ch07-moe-traffic (a quiz file) ---- */

#define MIB 1048576.0

static int check_moe(const ex_context *cx, const exercise *ex, const char *file, ex_verdict *v)
{
    (void)cx;
    (void)ex;
    static const char *const units[] = {"bytes", "MiB", "elements", NULL};
    ex_answers a;
    char err[512];
    if (ex_answers_read(file, &a, err, sizeof err) != 0) {
        ex_verdict_set(v, EX_ERROR, EXF_SETUP, "%s", err);
        return v->result;
    }
    int u;
    double tp, ep;
    if (ex_answer_choice(&a, "unit", units, &u, v) ||
        ex_answer_number(&a, "tp_per_layer", &tp, v) ||
        ex_answer_number(&a, "ep_per_layer", &ep, v))
        return v->result;
    const double s = 4.0 * 1024 * 4096 * 2;          /* activation bytes of the batch */
    const double scale = u == 0 ? 1.0 : u == 1 ? 1.0 / MIB : 0.5;
    const int T = 8, EP = 8, k = 2, E = 64;
    /* TP, per GPU: every GPU holds every token; two all-reduces of S per layer. Accepted:
     * the simple 2S, one ring all-reduce's 2S(T-1)/T, and both ring all-reduces,
     * 2 x 2S(T-1)/T. EP, per GPU: each holds S/EP of the tokens and sends k copies, of
     * which (EP-1)/EP leave it, there and back: 2k(S/EP)(EP-1)/EP; or the simple 2kS/E. */
    const double tp_ok[3] = {2 * s * scale, 2 * s * (T - 1) / T * scale,
                             2 * 2 * s * (T - 1) / T * scale};
    const double ep_phys = 2.0 * k * (s / EP) * (EP - 1) / EP * scale;
    const double ep_simple = 2.0 * k * s / E * scale;
    const double ep_group = 2.0 * k * s * (EP - 1) / EP * scale;
    int tp_hit = -1;
    for (int i = 0; i < 3; i++)
        if (fabs(tp - tp_ok[i]) <= 0.01 * tp_ok[i])
            tp_hit = i;
    if (tp_hit < 0) {
        ex_verdict_set(v, EX_FAIL, EXF_ANSWER, "tp_per_layer = %g %s: start from S, the batch's "
                       "activations in bytes (tokens x hidden x 2), then count what TP's two "
                       "all-reduces move", tp, units[u]);
        return v->result;
    }
    int ep_phys_hit = fabs(ep - ep_phys) <= 0.01 * ep_phys;
    if (!ep_phys_hit && !(fabs(ep - ep_simple) <= 0.01 * ep_simple)) {
        if (fabs(ep - ep_group) <= 0.01 * ep_group)
            ex_verdict_set(v, EX_FAIL, EXF_ANSWER, "ep_per_layer = %g %s is what all %d GPUs "
                           "send together (or one GPU that held every token): under EP each "
                           "GPU holds 1/%d of the tokens. Per GPU?", ep, units[u], EP, EP);
        else
            ex_verdict_set(v, EX_FAIL, EXF_ANSWER, "ep_per_layer = %g %s: each token goes to "
                           "k = 2 experts and comes back; which share of the tokens does one GPU "
                           "hold, and which share of their copies leaves it?", ep, units[u]);
        return v->result;
    }
    ex_verdict_set(v, EX_PASS, EXF_NONE, "TP moves %.0f times more than EP on this layer, per GPU",
                   tp / ep);
    ex_verdict_add(v, "S = 4 x 1024 tokens x 4096 x 2 B = 32 MiB. TP, per GPU: each layer "
                   "all-reduces S twice, and a ring all-reduce sends 2S(T-1)/T = 56 MiB, so "
                   "112 MiB (the simple formula 2S says 64 MiB). EP, per GPU: a GPU holds S/8 "
                   "= 4 MiB of tokens, sends k = 2 copies of each, 7/8 of them to other GPUs, "
                   "there and back: 2 x 2 x 4 MiB x 7/8 = 14 MiB. The simple formula 2kS/E = "
                   "2 MiB divides by the 64 experts where the EP degree belongs. In elements, "
                   "halve the bytes.");
    ex_verdict_add(v, "EP is cheap because each GPU only routes its own share of the tokens; "
                   "TP's GPUs all hold every token and sum every output.");
    return v->result;
}

static const char *const moe_hints[] = {
    "How many bytes are the activations of 4 x 1024 tokens of width 4096 in BF16?",
    "TP all-reduces the layer's output twice per layer: how much is that in units of S?",
    "Under 8-way EP, which share of the tokens does one GPU hold, and which share of their "
    "k copies must leave that GPU, there and back?",
    NULL
};

static const exercise ch07_moe_traffic = {
    .id = "ch07-moe-traffic",
    .chapter = 7,
    .kind = EX_EXPERIMENT,
    .title = "An MoE layer's traffic: tensor against expert parallelism",
    .task = "Work out, with the chapter's formulas, what one GPU sends for one MoE layer "
            "(64 experts, top-2, hidden 4096, 4 x 1024 tokens, BF16) under 8-way TP and under "
            "8-way EP.",
    .hints = moe_hints,
    .starter = "starter.txt",
    .solution = "solution.txt",
    .workfile = "answers.txt",
    .check = check_moe,
};

/* ---- ch07-layout (experiment) ---- */

#define LAYOUT_CMD "mlsys-lab run ch07/parallel-strategy-calculator --compat"
#define LAYOUT_DEFAULT_CMD "mlsys-lab run ch07/parallel-strategy-calculator"
#define GPUS 64
#define LAYERS 80
#define MEM_LIMIT_GB 72.0          /* 90 % of 80 GB, the calculator's rule */

/* The Mem/GPU of row (tp, pp, dp) of the calculator's table; 0 when found. */
static int calc_row(const char *out, int tp, int pp, int dp, double *mem)
{
    for (const char *p = out; *p;) {
        const char *e = strchr(p, '\n');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        char line[256];
        snprintf(line, sizeof line, "%.*s", (int)(len < sizeof line - 1 ? len : sizeof line - 1), p);
        p += len + (e != NULL);
        int a, b, c;
        double m;
        if (sscanf(line, " %d %d %d %lfGB", &a, &b, &c, &m) == 4 && a == tp && b == pp &&
            c == dp) {
            *mem = m;
            return 0;
        }
    }
    return -1;
}

static int whole(double x)
{
    return isfinite(x) && x == floor(x) && x >= 1 && x <= 1e6;
}

static int check_layout(const ex_context *cx, const exercise *ex, const char *file,
                        ex_verdict *v)
{
    (void)ex;
    ex_answers a;
    char err[512];
    if (ex_answers_read(file, &a, err, sizeof err) != 0) {
        ex_verdict_set(v, EX_ERROR, EXF_SETUP, "%s", err);
        return v->result;
    }
    double tpf, ppf, dpf, mem;
    if (ex_answer_number(&a, "tp", &tpf, v) || ex_answer_number(&a, "pp", &ppf, v) ||
        ex_answer_number(&a, "dp", &dpf, v) || ex_answer_number(&a, "mem_per_gpu_gb", &mem, v))
        return v->result;
    if (!whole(tpf) || !whole(ppf) || !whole(dpf)) {
        ex_verdict_set(v, EX_FAIL, EXF_ANSWER, "tp, pp and dp are whole numbers of GPUs, at "
                       "least 1");
        return v->result;
    }
    int tp = (int)tpf, pp = (int)ppf, dp = (int)dpf;
    if ((long)tp * pp * dp != GPUS) {
        ex_verdict_set(v, EX_FAIL, EXF_ANSWER, "tp x pp x dp = %d x %d x %d = %ld: the layout "
                       "must use the %d GPUs exactly", tp, pp, dp, (long)tp * pp * dp, GPUS);
        return v->result;
    }
    if (tp != 1 && tp != 2 && tp != 4 && tp != 8) {
        ex_verdict_set(v, EX_FAIL, EXF_ANSWER, "tp = %d: tensor parallelism talks in every "
                       "layer and must stay inside a node of 8 GPUs (1, 2, 4 or 8)", tp);
        return v->result;
    }
    if (LAYERS % pp != 0) {
        ex_verdict_set(v, EX_FAIL, EXF_ANSWER, "pp = %d: the %d layers do not split into %d "
                       "equal stages", pp, LAYERS, pp);
        return v->result;
    }
    if (!cx->bin[0]) {
        ex_verdict_set(v, EX_ERROR, EXF_SETUP, "cannot find the mlsys-lab program to run the "
                       "calculator (set MLSYS_LAB_BIN)");
        return v->result;
    }
    char *argv[] = {(char *)cx->bin, "run", "ch07/parallel-strategy-calculator", "--compat",
                    NULL};
    char *out = NULL;
    int st = 0;
    if (ex_run_capture(argv, 60000, &out, &st) != 0 || st != 0) {
        ex_verdict_set(v, EX_ERROR, EXF_SETUP, "`" LAYOUT_CMD "` failed (status %d)", st);
        free(out);
        return v->result;
    }
    double row;
    int found = calc_row(out, tp, pp, dp, &row);
    free(out);
    if (found != 0) {
        ex_verdict_set(v, EX_ERROR, EXF_SETUP, "`" LAYOUT_CMD "` has no row for TP %d, PP %d, "
                       "DP %d (a bug of the lab, not yours)", tp, pp, dp);
        return v->result;
    }
    if (!(row < MEM_LIMIT_GB)) {
        ex_verdict_set(v, EX_FAIL, EXF_ANSWER, "(%d, %d, %d) needs %.1f GB per GPU in `"
                       LAYOUT_CMD "`, over 90 %% of 80 GB = %.0f GB. What shrinks the weights, "
                       "gradients and optimizer state per GPU?", tp, pp, dp, row, MEM_LIMIT_GB);
        return v->result;
    }
    if (!(fabs(mem - row) <= 0.1)) {
        /* a figure of the default mode is a common slip: say which table this is */
        char *dargv[] = {(char *)cx->bin, "run", "ch07/parallel-strategy-calculator", NULL};
        char *dout = NULL;
        double drow = -1;
        if (ex_run_capture(dargv, 60000, &dout, &st) != 0 || st != 0 ||
            calc_row(dout, tp, pp, dp, &drow) != 0)
            drow = -1;
        free(dout);
        ex_verdict_set(v, EX_FAIL, EXF_ANSWER, "mem_per_gpu_gb = %g, but `" LAYOUT_CMD "` "
                       "prints %.1f GB for TP %d, PP %d, DP %d%s", mem, row, tp, pp, dp,
                       drow >= 0 && fabs(mem - drow) <= 0.1 ?
                       ": yours is the default mode's row (12 B of Adam state per parameter, "
                       "the shape from --params); this exercise reads the --compat table" :
                       ": read its row again");
        return v->result;
    }
    ex_verdict_set(v, EX_PASS, EXF_NONE, "(%d, %d, %d) fits: %.1f GB per GPU of %.0f GB allowed",
                   tp, pp, dp, row, MEM_LIMIT_GB);
    ex_verdict_add(v, "Memory per GPU = (params + grads)/(tp·pp) + optimizer/(tp·pp·dp) + "
                   "activations/tp: tp and pp cut everything, dp only the optimizer state. The "
                   "--compat table recommends (2, 16, 2), the fitting layout that sends least; "
                   "TP = 8 layouts such as (8, 4, 2) fit more easily but all-reduce far more in "
                   "every layer, which is only bearable inside an NVLink node. The default mode "
                   "(`" LAYOUT_DEFAULT_CMD "`) counts 12 B of Adam state per parameter and four "
                   "all-reduces per layer, and weighs the pipeline bubble: compare its pick.");
    return v->result;
}

static const char *const layout_hints[] = {
    "Which of tp, pp and dp divide the weights and gradients, and which only the optimizer "
    "state?",
    "Why may tp not exceed 8 here? What connects the GPUs of one node, and what the nodes?",
    "80 layers in pp stages: which pp from 1, 2, 4, 8, 16 keep the stages equal?",
    NULL
};

static const exercise ch07_layout = {
    .id = "ch07-layout",
    .chapter = 7,
    .kind = EX_EXPERIMENT,
    .title = "Lay out 70B on 64 GPUs: TP x PP x DP",
    .task = "Choose (tp, pp, dp) for a 70B dense model on 64 GPUs of 80 GB (8 per node) and "
            "check it with `" LAYOUT_CMD "`: it must use every GPU, keep TP inside a node, "
            "split the 80 layers evenly and fit in memory.",
    .hints = layout_hints,
    .lab = "ch07/parallel-strategy-calculator",
    .starter = "starter.txt",
    .solution = "solution.txt",
    .workfile = "answers.txt",
    .check = check_layout,
};

extern const exercise ch07_1f1b;      /* ex_1f1b.c */

const exercise *const ch07_exercises[] = {
    &ch07_predict_bubble,
    &ch07_1f1b,
    &ch07_moe_traffic,
    &ch07_layout,
    NULL
};
