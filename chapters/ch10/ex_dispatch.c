/* ex_dispatch.c - Chapter 10's experiment: the dispatch work a captured plan removes, read
 * from cuda-graph-simple's CPU analogue (--force-cpu), small model against large. (The
 * curriculum's scheduling-overhead benchmark is not in the lab yet; this measures the same
 * kind of per-step CPU overhead.) The answers must follow from each other, within the lab's
 * rounding; the lab is run again to see that its own figures do too. */
#include "../../lab/exercise/exercise.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DISPATCH_CMD "mlsys-lab run ch10/cuda-graph-simple --force-cpu"
#define OPS 5

typedef struct block {
    double eager, plan, speedup, per_op, pct;
    int equal;
} block;

/* The block after the k-th "eager (interpreter" line. 0, or -1. */
static int parse_block(const char *out, int k, block *b)
{
    const char *p = out;
    for (int i = 0; i <= k; i++) {
        p = strstr(p, "eager (interpreter, op by op):");
        if (!p)
            return -1;
        if (i < k)
            p++;
    }
    const char *q = strstr(p, "replayed:"), *r = strstr(p, "speed-up "), *s = strstr(p, "per op (");
    const char *t = strstr(p, "max |diff| ");
    if (!q || !r || !s || !t)
        return -1;
    double removed;
    if (sscanf(p, "eager (interpreter, op by op): %lf", &b->eager) != 1 ||
        sscanf(q, "replayed: %lf", &b->plan) != 1 ||
        sscanf(r, "speed-up %lfx; dispatch work removed: %lf", &b->speedup, &removed) != 2)
        return -1;
    const char *u = s;
    while (u > r && u[-1] != ',')
        u--;
    if (sscanf(u, " %lf us per op (%lf", &b->per_op, &b->pct) != 2)
        return -1;
    double d;
    b->equal = sscanf(t, "max |diff| %lf", &d) == 1 && d == 0.0;
    return 0;
}

/* x within [lo, hi], widened by 1 % and by the rounding of x's printed digits (r). */
static int within(double x, double lo, double hi, double r)
{
    double slack = fmax(0.01 * fmax(fabs(lo), fabs(hi)), r);
    return x >= lo - slack && x <= hi + slack;
}

/* NULL when speed-up, per-op work and share follow from the two times, which the lab prints
 * to 0.01 us (each may be 0.005 off: the ranges below are over those bounds); else what does
 * not follow. */
static const char *follows(double e, double g, double sp, double per_op, double pct)
{
    const double h = 0.005;
    if (!(e > 2 * h) || !(g > 2 * h) || !isfinite(e + g))
        return "both times are positive numbers of us";
    if (!within(sp, (e - h) / (g + h), (e + h) / (g - h), 0.006))
        return "speedup is eager / plan";
    if (!within(per_op, (e - g - 2 * h) / OPS, (e - g + 2 * h) / OPS, 0.0006))
        return "removed_per_op_us is (eager - plan) / 5 ops";
    if (!within(pct, 100.0 * (1.0 - (g + h) / (e - h)), 100.0 * (1.0 - (g - h) / (e + h)), 0.06))
        return "removed_percent is 100 x (eager - plan) / eager";
    return NULL;
}

static int check_dispatch(const ex_context *cx, const exercise *ex, const char *file,
                          ex_verdict *v)
{
    (void)ex;
    static const char *const yesno[] = {"yes", "no", NULL};
    static const char *const where[] = {"small", "large", NULL};
    ex_answers a;
    char err[512];
    if (ex_answers_read(file, &a, err, sizeof err) != 0) {
        ex_verdict_set(v, EX_ERROR, EXF_SETUP, "%s", err);
        return v->result;
    }
    double e, g, sp, per_op, pct, large;
    int eq, pays;
    if (ex_answer_number(&a, "eager_us", &e, v) || ex_answer_number(&a, "plan_us", &g, v) ||
        ex_answer_number(&a, "speedup", &sp, v) ||
        ex_answer_number(&a, "removed_per_op_us", &per_op, v) ||
        ex_answer_number(&a, "removed_percent", &pct, v) ||
        ex_answer_choice(&a, "outputs_equal", yesno, &eq, v) ||
        ex_answer_number(&a, "large_removed_percent", &large, v) ||
        ex_answer_choice(&a, "pays_most", where, &pays, v))
        return v->result;
    const char *why = follows(e, g, sp, per_op, pct);
    if (why) {
        ex_verdict_set(v, EX_FAIL, EXF_ANSWER, "eager %g us, plan %g us, speedup %g, %g us per "
                       "op, %g %%: %s", e, g, sp, per_op, pct, why);
        return v->result;
    }
    if (eq != 0) {
        ex_verdict_set(v, EX_FAIL, EXF_ANSWER, "outputs_equal = no: the plan runs the same "
                       "kernels on the same numbers; read the outputs line again");
        return v->result;
    }
    if (pct != large && pays != (pct > large ? 0 : 1)) {
        ex_verdict_set(v, EX_FAIL, EXF_ANSWER, "pays_most = %s, but by your numbers the plan "
                       "removes %g %% of the small model's step and %g %% of the large one's",
                       where[pays], pct, large);
        return v->result;
    }
    if (!cx->bin[0]) {
        ex_verdict_set(v, EX_ERROR, EXF_SETUP, "cannot find the mlsys-lab program (set "
                       "MLSYS_LAB_BIN)");
        return v->result;
    }
    char *argv[] = {(char *)cx->bin, "run", "ch10/cuda-graph-simple", "--force-cpu",
                    "--iterations", "60", NULL};
    char *out = NULL;
    int st = 0;
    block big, small;
    int bad = ex_run_capture(argv, 300000, &out, &st) != 0 || st != 0 ||
              parse_block(out, 0, &big) != 0 || parse_block(out, 1, &small) != 0;
    free(out);
    if (!bad)
        bad = follows(big.eager, big.plan, big.speedup, big.per_op, big.pct) ||
              follows(small.eager, small.plan, small.speedup, small.per_op, small.pct) ||
              !big.equal || !small.equal;
    if (bad) {
        ex_verdict_set(v, EX_ERROR, EXF_SETUP, "`" DISPATCH_CMD " --iterations 60` (status %d) "
                       "printed figures that do not follow from each other (a bug of the lab, "
                       "not yours)", st);
        return v->result;
    }
    ex_verdict_set(v, EX_PASS, EXF_NONE, "the plan removes %.3f us of dispatch per op, %.1f %% "
                   "of the small model's step", per_op, pct);
    ex_verdict_add(v, "this run: small model %.2f -> %.2f us (%.1f %%), large %.2f -> %.2f us "
                   "(%.1f %%)", small.eager, small.plan, small.pct, big.eager, big.plan,
                   big.pct);
    ex_verdict_add(v, "The plan removes lookups, checks and buffer handling, not arithmetic "
                   "(the large model's ops hand bigger buffers around, so more is removed per "
                   "op there), yet its share of the step is large only where each op computes "
                   "little: decoding one token, not prefilling a prompt. A "
                   "GPU launch costs microseconds, not these nanoseconds, which is why serving "
                   "engines capture their decode steps in CUDA graphs.");
    return v->result;
}

static const char *const dispatch_hints[] = {
    "Which block of the output is the small model (1/16 of the width, batch 1)?",
    "Is the work removed per op the difference of the two times per forward, divided by "
    "what?",
    "Which model computes more per op? Then in which one can the same kind of bookkeeping "
    "be a large share of the step?",
    NULL
};

const exercise ch10_dispatch = {
    .id = "ch10-dispatch-overhead",
    .chapter = 10,
    .kind = EX_EXPERIMENT,
    .title = "The per-step overhead a captured plan removes",
    .task = "Run `" DISPATCH_CMD "` and report, for the small model, the eager and replayed "
            "times, the speed-up, the work removed per op and its share of the step; then "
            "compare the share with the large model's.",
    .hints = dispatch_hints,
    .lab = "ch10/cuda-graph-simple",
    .starter = "starter.txt",
    .solution = "solution.txt",
    .workfile = "answers.txt",
    .check = check_dispatch,
};
