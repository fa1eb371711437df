/* ex_dispatch.c - Chapter 10's experiment: the dispatch work a captured plan removes, read
 * from cuda-graph-simple's CPU analogue (--force-cpu), small model against large, each with
 * the spread of its saving over repeats and the verdict "within noise" when that spread
 * crosses zero. The answers must follow from each other, within the lab's rounding, and
 * where the plan pays is judged by which saving is real; the lab is run again to see that
 * its own figures do too. */
#include "../../lab/exercise/exercise.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DISPATCH_CMD "mlsys-lab run ch10/cuda-graph-simple --force-cpu"
#define OPS 5

typedef struct block {
    double eager, plan, save, save_min, save_max, speedup, per_op, pct;
    int noise, equal;           /* the lab's verdict: within noise (1) or a real difference */
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
    const char *q = strstr(p, "replayed:"), *r = strstr(p, "saving per forward:");
    const char *s = strstr(p, "speed-up "), *t = strstr(p, "max |diff| ");
    if (!q || !r || !s || !t)
        return -1;
    if (sscanf(p, "eager (interpreter, op by op): %lf", &b->eager) != 1 ||
        sscanf(q, "replayed: %lf", &b->plan) != 1 ||
        sscanf(r, "saving per forward: %lf us, from %lf to %lf", &b->save, &b->save_min,
               &b->save_max) != 3 ||
        sscanf(s, "speed-up %lfx; per op %lf us (%lf", &b->speedup, &b->per_op, &b->pct) != 3)
        return -1;
    const char *noise = strstr(r, "within noise"), *real = strstr(r, "a real ");
    if ((!noise || noise > s) == (!real || real > s))
        return -1;
    b->noise = noise && noise < s;
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

/* NULL when the verdict fits a saving's range over the repeats: within noise when it runs
 * from a loss to a gain, real when every repeat is on one side of 0 (a bound that prints as
 * 0.00 may be either); and, when mean is given, when the range holds the mean saving. */
static const char *spread_follows(const double *mean, double lo, double hi, int noise)
{
    const double h = 0.005;
    if (!(lo <= hi))
        return "the saving's least is above its most";
    if (mean && (*mean < lo - 3 * h || *mean > hi + 3 * h))
        return "the mean saving, eager - plan, lies between the least and the most repeat's";
    if (lo < -h && hi > h && !noise)
        return "some repeats saw a gain and some a loss: that is within noise";
    if ((lo > h || hi < -h) && noise)
        return "every repeat is on one side of 0: the saving (or loss) is real";
    return NULL;
}

static int check_dispatch(const ex_context *cx, const exercise *ex, const char *file,
                          ex_verdict *v)
{
    (void)ex;
    static const char *const yesno[] = {"yes", "no", NULL};
    static const char *const where[] = {"small", "large", "neither", NULL};
    ex_answers a;
    char err[512];
    if (ex_answers_read(file, &a, err, sizeof err) != 0) {
        ex_verdict_set(v, EX_ERROR, EXF_SETUP, "%s", err);
        return v->result;
    }
    double e, g, sp, per_op, pct, lo, hi, large, llo, lhi;
    int noise, lnoise, eq, pays;
    if (ex_answer_number(&a, "eager_us", &e, v) || ex_answer_number(&a, "plan_us", &g, v) ||
        ex_answer_number(&a, "speedup", &sp, v) ||
        ex_answer_number(&a, "removed_per_op_us", &per_op, v) ||
        ex_answer_number(&a, "removed_percent", &pct, v) ||
        ex_answer_number(&a, "saving_min_us", &lo, v) ||
        ex_answer_number(&a, "saving_max_us", &hi, v) ||
        ex_answer_choice(&a, "small_within_noise", yesno, &noise, v) ||
        ex_answer_choice(&a, "outputs_equal", yesno, &eq, v) ||
        ex_answer_number(&a, "large_removed_percent", &large, v) ||
        ex_answer_number(&a, "large_saving_min_us", &llo, v) ||
        ex_answer_number(&a, "large_saving_max_us", &lhi, v) ||
        ex_answer_choice(&a, "large_within_noise", yesno, &lnoise, v) ||
        ex_answer_choice(&a, "pays_most", where, &pays, v))
        return v->result;
    noise = noise == 0;             /* yesno: 0 is "yes" */
    lnoise = lnoise == 0;
    const char *why = follows(e, g, sp, per_op, pct);
    if (why) {
        ex_verdict_set(v, EX_FAIL, EXF_ANSWER, "eager %g us, plan %g us, speedup %g, %g us per "
                       "op, %g %%: %s", e, g, sp, per_op, pct, why);
        return v->result;
    }
    double save = e - g;
    if ((why = spread_follows(&save, lo, hi, noise))) {
        ex_verdict_set(v, EX_FAIL, EXF_ANSWER, "small model: saving %.2f us, from %g to %g, "
                       "small_within_noise = %s: %s", e - g, lo, hi, noise ? "yes" : "no", why);
        return v->result;
    }
    if ((why = spread_follows(NULL, llo, lhi, lnoise))) {
        ex_verdict_set(v, EX_FAIL, EXF_ANSWER, "large model: saving from %g to %g, "
                       "large_within_noise = %s: %s", llo, lhi, lnoise ? "yes" : "no", why);
        return v->result;
    }
    if (eq != 0) {
        ex_verdict_set(v, EX_FAIL, EXF_ANSWER, "outputs_equal = no: the plan runs the same "
                       "kernels on the same numbers; read the outputs line again");
        return v->result;
    }
    /* where the plan pays: where its saving is real, and of the two, the larger share */
    int want = noise && lnoise ? 2 : noise ? (large > 0 ? 1 : 2) : lnoise ? (pct > 0 ? 0 : 2)
             : pct >= large ? 0 : 1;
    if (pays != want) {
        ex_verdict_set(v, EX_FAIL, EXF_ANSWER, "pays_most = %s, but by your numbers the small "
                       "model's saving is %s (%g %% of its step) and the large one's %s (%g %%): "
                       "%s", where[pays], noise ? "within noise" : "real", pct,
                       lnoise ? "within noise" : "real", large,
                       want == 2 ? "a saving within noise shows nothing, so neither"
                                 : "the plan pays where its saving is real");
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
              spread_follows(&big.save, big.save_min, big.save_max, big.noise) ||
              spread_follows(&small.save, small.save_min, small.save_max, small.noise) ||
              !big.equal || !small.equal;
    if (bad) {
        ex_verdict_set(v, EX_ERROR, EXF_SETUP, "`" DISPATCH_CMD " --iterations 60` (status %d) "
                       "printed figures that do not follow from each other (a bug of the lab, "
                       "not yours)", st);
        return v->result;
    }
    ex_verdict_set(v, EX_PASS, EXF_NONE, "by your run the plan %s %.3f us of dispatch per op, "
                   "%.1f %% of the small model's step%s", noise ? "seemed to remove" : "removes",
                   per_op, pct, noise ? ", within noise" : "");
    ex_verdict_add(v, "this run: small model %.2f -> %.2f us (%s: %.2f to %.2f us over the "
                   "repeats), large %.2f -> %.2f us (%s: %.2f to %.2f us)", small.eager,
                   small.plan, small.noise ? "within noise" : "real", small.save_min,
                   small.save_max, big.eager, big.plan, big.noise ? "within noise" : "real",
                   big.save_min, big.save_max);
    ex_verdict_add(v, "The plan removes lookups, checks and buffer handling: tens of "
                   "nanoseconds per op, never arithmetic. Next to a forward of under a "
                   "microsecond that is a share every repeat sees; next to a forward of "
                   "milliseconds it is smaller than the forward's own jitter, and the "
                   "difference measured there, of either sign, is noise. A GPU launch costs "
                   "microseconds, not these nanoseconds, which is why serving engines capture "
                   "their decode steps in CUDA graphs.");
    return v->result;
}

static const char *const dispatch_hints[] = {
    "Which block of the output is the small model (1/16 of the width, batch 1)?",
    "A saving measured once can be luck. If some repeats saw the plan win and others lose, "
    "what do you know about its sign?",
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
            "times, the speed-up, the work removed per op, its share of the step and the "
            "saving's spread over the repeats; then the large model's share and spread, which "
            "of the two savings is within noise, and where the plan pays.",
    .hints = dispatch_hints,
    .lab = "ch10/cuda-graph-simple",
    .starter = "starter.txt",
    .solution = "solution.txt",
    .workfile = "answers.txt",
    .check = check_dispatch,
};
