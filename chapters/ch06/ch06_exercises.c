/* ch06_exercises.c - Chapter 6's exercises: the column-parallel check of tp-linear on 1 to 8
 * ranks (experiment), the all-reduces of one tensor-parallel transformer layer (predict),
 * and the matmul/all-reduce split of tp-mlp (experiment). The experiments' checks run the
 * labs themselves; the predict answers come from the Megatron layout, computed here. */
#include "../../lab/exercise/exercise.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Run `mlsys-lab run LAB --tp-size T`; the output in *out (free it). 0, or -1 with v set. */
static int run_tp_lab(const ex_context *cx, const char *lab, int t, char **out, ex_verdict *v)
{
    if (!cx->bin[0]) {
        ex_verdict_set(v, EX_ERROR, EXF_SETUP, "cannot find the mlsys-lab program to run %s "
                       "(set MLSYS_LAB_BIN)", lab);
        return -1;
    }
    char ts[16];
    snprintf(ts, sizeof ts, "%d", t);
    char *argv[] = {(char *)cx->bin, "run", (char *)lab, "--tp-size", ts, NULL};
    int st;
    *out = NULL;
    if (ex_run_capture(argv, 60000, out, &st) != 0 || st != 0) {
        ex_verdict_set(v, EX_ERROR, EXF_SETUP, "`mlsys-lab run %s --tp-size %d` failed "
                       "(status %d)", lab, t, st);
        if (*out)
            ex_verdict_add(v, "%s", *out);
        free(*out);
        *out = NULL;
        return -1;
    }
    return 0;
}

/* ---- ch06-column-check (experiment) ---- */

#define COLUMN_LINE "y = [x·W_0 | … ] vs x·W"

static int check_column(const ex_context *cx, const exercise *ex, const char *file,
                        ex_verdict *v)
{
    (void)ex;
    static const char *const yesno[] = {"yes", "no", NULL};
    ex_answers a;
    char err[512];
    if (ex_answers_read(file, &a, err, sizeof err) != 0) {
        ex_verdict_set(v, EX_ERROR, EXF_SETUP, "%s", err);
        return v->result;
    }
    double c8, c2, diff, fwd, bwd;
    int all;
    if (ex_answer_number(&a, "local_cols_t8", &c8, v) ||
        ex_answer_number(&a, "local_cols_t2", &c2, v) ||
        ex_answer_number(&a, "max_diff_t4", &diff, v) ||
        ex_answer_choice(&a, "correct_all", yesno, &all, v) ||
        ex_answer_number(&a, "forward_allreduces", &fwd, v) ||
        ex_answer_number(&a, "backward_allreduces", &bwd, v))
        return v->result;
    /* the lab, for every T: its column check must hold, and y_r must have 8/T columns */
    static const int ts[] = {1, 2, 4, 8};
    double printed4 = -1.0;
    for (int i = 0; i < 4; i++) {
        char *out;
        if (run_tp_lab(cx, "ch06/tp-linear", ts[i], &out, v) != 0)
            return v->result;
        const char *line = strstr(out, COLUMN_LINE);
        const char *d = line ? strstr(line, "max |diff| ") : NULL;
        const char *eol = line ? strchr(line, '\n') : NULL;
        double md;
        int cols = 0;
        const char *yr = strstr(out, "→ y_r [4, ");
        int ok = d && sscanf(d, "max |diff| %lf", &md) == 1 && yr &&
                 sscanf(yr, "→ y_r [4, %d]", &cols) == 1;
        int correct = ok && eol && strstr(d, "correct") && strstr(d, "correct") < eol &&
                      !(strstr(d, "INCORRECT") && strstr(d, "INCORRECT") < eol);
        free(out);
        if (!ok || !correct || !(md < 1e-5) || cols != 8 / ts[i]) {
            ex_verdict_set(v, EX_ERROR, EXF_SETUP, "the lab's own column check did not pass at "
                           "T = %d (a bug of the lab, not yours)", ts[i]);
            return v->result;
        }
        if (ts[i] == 4)
            printed4 = md;
    }
    if (c8 != 1 || c2 != 4) {
        ex_verdict_set(v, EX_FAIL, EXF_ANSWER, "local_cols_t8 = %g, local_cols_t2 = %g: rank r "
                       "keeps 8/T of W's 8 columns, and y_r = x·W_r has as many", c8, c2);
        return v->result;
    }
    /* the learner's number is the lab's, to the digits it prints (%.1e: half a unit of
     * the second significant digit); the lab's GEMM order is fixed, so it is the same on
     * every machine */
    double half = printed4 > 0 ? 0.05 * pow(10.0, floor(log10(printed4))) : 0.0;
    if (!(fabs(diff - printed4) <= half * 1.0001)) {
        ex_verdict_set(v, EX_FAIL, EXF_ANSWER, "max_diff_t4 = %g, but the lab prints %.1e for "
                       "the gathered outputs at T = 4: copy the number from the " COLUMN_LINE
                       " line", diff, printed4);
        return v->result;
    }
    if (all != 0) {
        ex_verdict_set(v, EX_FAIL, EXF_ANSWER, "correct_all = no, but the lab reports \"correct\" "
                       "for T = 1, 2, 4 and 8: read the " COLUMN_LINE " lines again");
        return v->result;
    }
    if (fwd != 0 || bwd != 1) {
        ex_verdict_set(v, EX_FAIL, EXF_ANSWER, "forward_allreduces = %g, backward_allreduces = "
                       "%g: the lab's section A ends with the count. Which pass needs a sum "
                       "over the ranks' columns?", fwd, bwd);
        return v->result;
    }
    ex_verdict_set(v, EX_PASS, EXF_NONE, "the column-parallel layer is the full layer, cut by "
                   "columns");
    ex_verdict_add(v, "Each output column j of y = x·W depends only on column j of W, so the "
                   "ranks need nothing from each other in the forward: gathering the y_r side by "
                   "side rebuilds y (max |diff| %.1e at T = 4: each column is the same dot "
                   "product, added in the same order). In the backward dx = dy·Wᵀ sums over all "
                   "output columns, which are spread over the ranks: one all-reduce, and its "
                   "additions in another order leave rounding differences (the dx line).",
                   printed4);
    return v->result;
}

static const char *const column_hints[] = {
    "Which columns of W does rank r keep when W [8, 8] is cut into T column blocks?",
    "Output column j of y = x·W needs which columns of W? Does it need any other rank's?",
    "In the backward, dx = dy·Wᵀ: over which index does that product sum, and where do those "
    "pieces live?",
    NULL
};

static const exercise ch06_column_check = {
    .id = "ch06-column-check",
    .chapter = 6,
    .kind = EX_EXPERIMENT,
    .title = "Column-parallel outputs, gathered, are the full layer",
    .task = "Run ch06/tp-linear with --tp-size 1, 2, 4 and 8, and report from section A the "
            "local output width, the max |diff| against the full layer, and the all-reduces "
            "the layer needs.",
    .hints = column_hints,
    .lab = "ch06/tp-linear",
    .starter = "starter.txt",
    .solution = "solution.txt",
    .workfile = "answers.txt",
    .check = check_column,
};

/* ---- ch06-tp-overhead (experiment) ---- */

/* The benchmark's three printed figures and the counter line of one tp-mlp run. */
static int parse_mlp(const char *out, double *mm, double *ar, double *pct, long *calls,
                     long *fwds)
{
    const char *p = strstr(out, "t_matmul:"), *q = strstr(out, "t_allreduce:");
    const char *r = strstr(out, "comm%:"), *s = strstr(out, "All-reduces in the ");
    if (!p || !q || !r || !s)
        return -1;
    if (sscanf(p, "t_matmul: %lf", mm) != 1 || sscanf(q, "t_allreduce: %lf", ar) != 1 ||
        sscanf(r, "comm%%: %lf", pct) != 1 ||
        sscanf(s, "All-reduces in the %ld timed forwards: %ld", fwds, calls) != 2)
        return -1;
    return 0;
}

/* Does pct follow from the two times? 1 % of the value, or 0.1 points for the rounding. */
static int pct_matches(double mm, double ar, double pct, double *want)
{
    *want = 100.0 * ar / (mm + ar);
    return fabs(pct - *want) <= fmax(0.01 * *want, 0.1);
}

static int check_overhead(const ex_context *cx, const exercise *ex, const char *file,
                          ex_verdict *v)
{
    (void)ex;
    static const char *const sides[] = {"compute", "communication", NULL};
    ex_answers a;
    char err[512];
    if (ex_answers_read(file, &a, err, sizeof err) != 0) {
        ex_verdict_set(v, EX_ERROR, EXF_SETUP, "%s", err);
        return v->result;
    }
    double mm, ar, pct, per, want = 0.0;
    int side;
    if (ex_answer_number(&a, "t_matmul_ms", &mm, v) ||
        ex_answer_number(&a, "t_allreduce_ms", &ar, v) ||
        ex_answer_number(&a, "comm_percent", &pct, v) ||
        ex_answer_number(&a, "allreduces_per_forward", &per, v) ||
        ex_answer_choice(&a, "bottleneck", sides, &side, v))
        return v->result;
    if (!(mm > 0.0) || !(ar > 0.0) || !isfinite(mm) || !isfinite(ar)) {
        ex_verdict_set(v, EX_FAIL, EXF_ANSWER, "t_matmul_ms = %g, t_allreduce_ms = %g: both are "
                       "positive times, in ms", mm, ar);
        return v->result;
    }
    int follows = pct_matches(mm, ar, pct, &want);     /* want: what the times give */
    if (!(pct >= 0.0 && pct <= 100.0)) {
        ex_verdict_set(v, EX_FAIL, EXF_ANSWER, "comm_percent = %g: a share of the time lies "
                       "between 0 and 100; your times give t_allreduce / (t_matmul + "
                       "t_allreduce) x 100 = %.2f", pct, want);
        return v->result;
    }
    if (!follows) {
        ex_verdict_set(v, EX_FAIL, EXF_ANSWER, "comm_percent = %g, but your times give "
                       "t_allreduce / (t_matmul + t_allreduce) x 100 = %.2f", pct, want);
        return v->result;
    }
    if (per != 1) {
        ex_verdict_set(v, EX_FAIL, EXF_ANSWER, "allreduces_per_forward = %g: the lab counts the "
                       "all-reduces of its timed forwards; divide by the number of forwards", per);
        return v->result;
    }
    if (pct != 50.0 && side != (pct > 50.0)) {
        ex_verdict_set(v, EX_FAIL, EXF_ANSWER, "bottleneck = %s, but by your numbers the "
                       "all-reduce takes %.1f %% of the time", sides[side], pct);
        return v->result;
    }
    /* the lab's own figures must agree with each other (the curriculum's check of it) */
    char *out;
    if (run_tp_lab(cx, "ch06/tp-mlp", 4, &out, v) != 0)
        return v->result;
    double lmm, lar, lpct;
    long calls, fwds;
    int bad = parse_mlp(out, &lmm, &lar, &lpct, &calls, &fwds) != 0 || !(lmm > 0) ||
              !(lar >= 0) || !(lpct >= 0 && lpct <= 100) || !pct_matches(lmm, lar, lpct, &want) ||
              fwds <= 0 || calls != fwds;
    free(out);
    if (bad) {
        ex_verdict_set(v, EX_ERROR, EXF_SETUP, "the lab's printed t_matmul, t_allreduce, comm%% "
                       "and all-reduce count disagree with each other (a bug of the lab, not yours)");
        return v->result;
    }
    ex_verdict_set(v, EX_PASS, EXF_NONE, "your comm%% follows from your times");
    ex_verdict_add(v, "this run: t_matmul %.5f ms, t_allreduce %.5f ms, comm%% %.1f, %ld "
                   "all-reduces in %ld forwards", lmm, lar, lpct, calls, fwds);
    ex_verdict_add(v, "One all-reduce of B·S·H floats per MLP forward, whatever T: the GEMMs "
                   "shrink by T, the all-reduce does not, and the bytes each rank sends, "
                   "2(T-1)/T·B·S·H·4, grow with T. On these shared CPU cores the all-reduce is a "
                   "memory copy. On GPUs, in BF16, all-reduce time / GEMM time ≈ (T-1)·F / (4·H·B_link) "
                   "(F the FLOP rate, B_link the link bandwidth): a few %% across NVLink only for "
                   "wide layers and small T (H = 8192, T = 2 on an A100), a third or more at T = 8 "
                   "on an H100, and nine times that across nodes, which is why TP stays inside a "
                   "node.");
    return v->result;
}

static const char *const overhead_hints[] = {
    "Which section of the lab's output is the benchmark? Which two lines are the times?",
    "Is comm% the all-reduce over the matmul, or over the sum of both times?",
    "The counter line gives all-reduces over all timed forwards: how many per forward?",
    NULL
};

static const exercise ch06_tp_overhead = {
    .id = "ch06-tp-overhead",
    .chapter = 6,
    .kind = EX_EXPERIMENT,
    .title = "What tensor parallelism costs: matmul against all-reduce",
    .task = "Run ch06/tp-mlp with --tp-size 4 and report its t_matmul, t_allreduce, the "
            "communication share comm%, the all-reduces per forward, and which side dominates.",
    .hints = overhead_hints,
    .lab = "ch06/tp-mlp",
    .starter = "starter.txt",
    .solution = "solution.txt",
    .workfile = "answers.txt",
    .check = check_overhead,
};

/* ---- predict ---- */

static void draw_layer_allreduces(uint64_t seed, ex_question *q)
{
    mlsys_rng g;
    mlsys_rng_seed(&g, seed);
    static const int tps[] = {2, 4, 8};
    static const int heads_of[] = {16, 32, 48, 64};
    static const int dims[] = {64, 128, 256};
    int t = tps[ex_draw_int(&g, 0, 2)];
    int heads = heads_of[ex_draw_int(&g, 0, 3)];          /* all multiples of 8 */
    int hd = dims[ex_draw_int(&g, 0, 2)];
    int layers = (int)ex_draw_int(&g, 2, 96);
    int kind = (int)ex_draw_int(&g, 0, 4);
    static const char *const asks[] = {
        "How many all-reduces does one layer make in its forward pass?",
        "How many all-reduces does one layer make in its backward pass?",
        "How many all-reduces does one layer make per training step (forward and backward)?",
        "How many attention heads does each rank compute?",
        NULL,
    };
    char ask[160];
    if (kind == 4)
        snprintf(ask, sizeof ask, "The model has %d such layers. How many all-reduces does "
                 "tensor parallelism make per training step (forward and backward)?", layers);
    else
        snprintf(ask, sizeof ask, "%s", asks[kind]);
    snprintf(q->text, sizeof q->text,
             "A transformer layer (attention, then an MLP) runs with Megatron tensor "
             "parallelism, TP = %d: Q, K, V and the MLP's up-projection are column-parallel, "
             "the attention output projection and the MLP's down-projection row-parallel. It "
             "has %d heads of dimension %d, hidden size %d. %s", t, heads, hd, heads * hd, ask);
    switch (kind) {
    case 0:
    case 1:
        q->answer = 2;
        snprintf(q->explain, sizeof q->explain,
                 "%s: one after each row-parallel projection (attention output, MLP down) in "
                 "the forward, whose partial sums must be added; in the backward one for each "
                 "column-parallel input (QKV, MLP up), whose input gradients are partial. 2 "
                 "either way, whatever TP = %d or the %d heads.",
                 kind == 0 ? "Forward 2" : "Backward 2", t, heads);
        break;
    case 2:
        q->answer = 4;
        snprintf(q->explain, sizeof q->explain,
                 "2 in the forward (after the attention output projection and after the MLP "
                 "down-projection) and 2 in the backward (the input gradients of QKV and of the "
                 "MLP up-projection): 4 per layer per training step, for any TP (here %d).", t);
        break;
    case 3:
        q->answer = (double)heads / t;
        snprintf(q->explain, sizeof q->explain,
                 "Heads are split whole: %d / %d = %d per rank, each of dimension %d, so rank "
                 "r's Q, K and V have %d columns. (A common version of this question has 12 "
                 "heads and hidden 4096: 4096 / 12 is not a whole head dimension, so no real "
                 "model has that shape; 16 heads of 256 or 12 of 384 would.)", heads, t,
                 heads / t, hd,
                 heads / t * hd);
        break;
    default:
        q->answer = 4.0 * layers;
        snprintf(q->explain, sizeof q->explain,
                 "4 per layer (2 forward, 2 backward) x %d layers = %d. The count never "
                 "depends on TP = %d; the bytes do: each all-reduce of B·S·H activations sends "
                 "2(T-1)/T of them per rank, which grows with T.", layers, 4 * layers, t);
        break;
    }
    snprintf(q->unit, sizeof q->unit, "%s", kind == 3 ? "heads" : "all-reduces");
}

static const char *const layer_hints[] = {
    "Which of the four projections leave each rank with a partial sum of the output?",
    "In the backward, the roles swap: which layer's input gradient is a sum over ranks?",
    "Does the number of heads or of ranks change how many times the ranks must meet?",
    NULL
};

static const exercise ch06_predict_layer_allreduces = {
    .id = "ch06-predict-layer-allreduces",
    .chapter = 6,
    .kind = EX_PREDICT,
    .title = "All-reduces in one tensor-parallel transformer layer",
    .task = "Predict the all-reduces of a Megatron transformer layer (forward, backward, per "
            "step, per model) and the heads each rank computes.",
    .hints = layer_hints,
    .lab = "ch06/tp-attention",
    .draw = draw_layer_allreduces,
};

extern const exercise ch06_tp_linear;     /* ex_tp_linear.c */

const exercise *const ch06_exercises[] = {
    &ch06_column_check,
    &ch06_tp_linear,
    &ch06_predict_layer_allreduces,
    &ch06_tp_overhead,
    NULL
};
