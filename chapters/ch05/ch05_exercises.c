/* ch05_exercises.c - Chapter 5's exercises: data parallelism by hand (the initial broadcast and
 * the gradient all-reduce, checked against one process on the whole batch), gradient
 * bucketing (checked by value and by the runtime's all-reduce counter), the times of one
 * step and its communication-to-compute ratio (an experiment on simple-ddp), and a predict
 * question on how many buckets a model's gradients fill. Implement files are in
 * assets/exercises/<id>/. */
#include "../../lab/exercise/exercise.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const int sizes_1_2_4[] = {1, 2, 4, 0};
static const int sizes_2_4[] = {2, 4, 0};

/* ---- implement ---- */

static const char *const manual_ddp_hints[] = {
    "Before the first step, which rank's weights should everyone hold, and which collective "
    "copies one rank's buffer to all the others?",
    "After all_reduce(SUM), a rank holds the sum of N shard gradients. Each shard gradient is "
    "already a mean over that shard's samples. What do you divide the sum by to get the mean "
    "over the whole batch?",
    "nn_params gives you the tensors one by one (p->t[i].grad, p->t[i].numel). How many "
    "all-reduces does the hand-written loop make per step?",
    "The check starts ranks 1..N-1 from slightly different weights. If you skip the "
    "broadcast, will averaging the gradients ever make the replicas equal again?",
    NULL
};

static const ex_implement manual_ddp_impl = {
    .function = "dp_sync_grads", .world_sizes = sizes_1_2_4, .timeout_ms = 5000,
    .limit_ms = 20000,
};

static const exercise ch05_manual_ddp = {
    .id = "ch05-manual-ddp",
    .chapter = 5,
    .kind = EX_IMPLEMENT,
    .title = "Data parallelism by hand: broadcast, all-reduce, divide",
    .task = "Write the initial broadcast of the parameters from rank 0 and dp_sync_grads(): "
            "all_reduce(SUM) each gradient tensor, then divide by N, so that N ranks train "
            "exactly like one process on the whole batch.",
    .hints = manual_ddp_hints,
    .lab = "ch05/simple-ddp",
    .starter = "starter.c",
    .solution = "solution.c",
    .workfile = "manual_ddp.c",
    .impl = &manual_ddp_impl,
};

static const char *const bucketing_hints[] = {
    "How many floats fit in one bucket of bucket_bytes? Where does bucket k start in the "
    "tensors laid end to end?",
    "A bucket's window can begin in the middle of one tensor and end in the middle of "
    "another. For tensor i, which part of it falls inside the window [start, start + cap)?",
    "Pack, all_reduce the bucket buffer once, divide by N, unpack the same pieces back: how "
    "many all_reduce calls does that make for 814,120 bytes in buckets of 64 KB?",
    "Is the last bucket full? How many elements do you pass to all_reduce for it?",
    NULL
};

static const ex_implement bucketing_impl = {
    .function = "bucketed_sync_grads", .world_sizes = sizes_2_4, .timeout_ms = 5000,
    .limit_ms = 30000,
};

static const exercise ch05_bucketing = {
    .id = "ch05-bucketing",
    .chapter = 5,
    .kind = EX_IMPLEMENT,
    .title = "Gradient bucketing: one all-reduce per bucket",
    .task = "Pack the gradient tensors into fixed-size buckets and all_reduce each bucket "
            "once: the same averaged gradients as one all-reduce per tensor, in "
            "ceil(total bytes / bucket bytes) calls.",
    .hints = bucketing_hints,
    .lab = "ch05/simple-ddp",
    .starter = "starter.c",
    .solution = "solution.c",
    .workfile = "bucketing.c",
    .impl = &bucketing_impl,
};

/* ---- ch05-step-times (experiment) ---- */

#define STEP_TIMES_CMD "mlsys-lab run ch05/simple-ddp"
#define BREAKDOWN "Manual step breakdown"

/* The four times and the ratio of the lab's manual step breakdown. 0, or -1. */
static int parse_breakdown(const char *out, double *f, double *b, double *k, double *st,
                           double *ratio)
{
    const char *p = strstr(out, BREAKDOWN);
    p = p ? strstr(p, "t_fwd ") : NULL;
    const char *q = p ? strstr(p, "= ") : NULL;
    if (!p || !q)
        return -1;
    if (sscanf(p, "t_fwd %lf ms, t_bwd_compute %lf ms, t_comm %lf ms, t_step %lf ms", f, b, k,
               st) != 4 || sscanf(q, "= %lf", ratio) != 1)
        return -1;
    return 0;
}

/* The ratio from the four times: t_comm / (t_fwd + t_bwd_compute), within 1 %. */
static int ratio_matches(double f, double b, double k, double ratio, double *want)
{
    *want = f + b > 0 ? k / (f + b) : 0.0;
    return fabs(ratio - *want) <= 0.01 * *want;
}

/* The curriculum's rules for one set of times: positive, the parts within 1.05 step
 * (nothing overlaps in the manual loop), the ratio following from them. NULL, or why not. */
static const char *times_problem(double f, double b, double k, double st, double ratio,
                                 double *want)
{
    if (!(f > 0) || !(b > 0) || !(k > 0) || !(st > 0) || !isfinite(f + b + k + st))
        return "every time is a positive number of ms";
    if (!(f + b + k <= 1.05 * st))
        return "forward, backward and communication run one after the other inside one step, "
               "so together they cannot exceed t_step (5 % allowed for rounding)";
    if (!ratio_matches(f, b, k, ratio, want))
        return "the ratio is t_comm / (t_fwd + t_bwd_compute) of these times (1 % allowed)";
    return NULL;
}

static int check_step_times(const ex_context *cx, const exercise *ex, const char *file,
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
    double f, b, k, st, ratio, want = 0;
    int side;
    if (ex_answer_number(&a, "t_fwd_ms", &f, v) ||
        ex_answer_number(&a, "t_bwd_compute_ms", &b, v) ||
        ex_answer_number(&a, "t_comm_ms", &k, v) ||
        ex_answer_number(&a, "t_step_ms", &st, v) ||
        ex_answer_number(&a, "ratio", &ratio, v) ||
        ex_answer_choice(&a, "bottleneck", sides, &side, v))
        return v->result;
    const char *why = times_problem(f, b, k, st, ratio, &want);
    if (why) {
        ex_verdict_set(v, EX_FAIL, EXF_ANSWER, "t_fwd %g, t_bwd_compute %g, t_comm %g, t_step "
                       "%g ms, ratio %g: %s", f, b, k, st, ratio, why);
        if (strstr(why, "ratio is"))
            ex_verdict_add(v, "your times give %.4g", want);
        return v->result;
    }
    if (ratio != 1.0 && side != (ratio > 1.0)) {
        ex_verdict_set(v, EX_FAIL, EXF_ANSWER, "bottleneck = %s, but by your numbers the "
                       "communication takes %.2f times the compute", sides[side], ratio);
        return v->result;
    }
    /* the lab's own figures must obey the same rules (the curriculum's check of the lab) */
    if (!cx->bin[0]) {
        ex_verdict_set(v, EX_ERROR, EXF_SETUP, "cannot find the mlsys-lab program to run "
                       "ch05/simple-ddp (set MLSYS_LAB_BIN)");
        return v->result;
    }
    char *argv[] = {(char *)cx->bin, "run", "ch05/simple-ddp", NULL};
    char *out = NULL;
    int status = 0;
    if (ex_run_capture(argv, 120000, &out, &status) != 0 || status != 0) {
        ex_verdict_set(v, EX_ERROR, EXF_SETUP, "`" STEP_TIMES_CMD "` failed (status %d)", status);
        free(out);
        return v->result;
    }
    double lf, lb, lk, lst, lr, lwant;
    int bad = parse_breakdown(out, &lf, &lb, &lk, &lst, &lr) != 0 ||
              times_problem(lf, lb, lk, lst, lr, &lwant) != NULL;
    free(out);
    if (bad) {
        ex_verdict_set(v, EX_ERROR, EXF_SETUP, "the lab's printed step breakdown breaks its own "
                       "rules (a bug of the lab, not yours)");
        return v->result;
    }
    ex_verdict_set(v, EX_PASS, EXF_NONE, "your ratio follows from your times");
    ex_verdict_add(v, "this run: t_fwd %.3f ms, t_bwd_compute %.3f ms, t_comm %.3f ms, t_step "
                   "%.3f ms, ratio %.3g", lf, lb, lk, lst, lr);
    ex_verdict_add(v, "Above 1, the step waits longer for its gradients than it computes: "
                   "buckets cut the per-call cost, overlap hides what remains behind backward "
                   "(when a core or a network card is free to move it), and a larger batch per "
                   "rank raises the compute against the same gradient bytes.");
    return v->result;
}

static const char *const step_times_hints[] = {
    "Which block of the lab's output breaks one manual step into forward, backward and "
    "communication?",
    "Is the ratio communication over the whole step, or over the compute (forward plus "
    "backward)?",
    "Why can the three parts of a manual step not add up to more than the step itself?",
    NULL
};

static const exercise ch05_step_times = {
    .id = "ch05-step-times",
    .chapter = 5,
    .kind = EX_EXPERIMENT,
    .title = "One step's times: forward, backward, communication",
    .task = "Run `" STEP_TIMES_CMD "` and report from its manual step breakdown t_fwd, "
            "t_bwd_compute, t_comm, t_step and the ratio t_comm / (t_fwd + t_bwd_compute), "
            "and whether compute or communication dominates.",
    .hints = step_times_hints,
    .lab = "ch05/simple-ddp",
    .starter = "starter.txt",
    .solution = "solution.txt",
    .workfile = "answers.txt",
    .check = check_step_times,
};

/* ---- predict ---- */

static void draw_buckets(uint64_t seed, ex_question *q)
{
    mlsys_rng g;
    mlsys_rng_seed(&g, seed);
    static const int ins[] = {784, 1024, 3072, 4096};
    static const int hids[] = {256, 512, 1024, 2048};
    static const int outs[] = {10, 100, 1000};
    static const int kbs[] = {64, 256, 1024, 4096, 25 * 1024};
    int in = ins[ex_draw_int(&g, 0, 3)], hid = hids[ex_draw_int(&g, 0, 3)];
    int out = outs[ex_draw_int(&g, 0, 2)], kb = kbs[ex_draw_int(&g, 0, 4)];
    long long params = (long long)in * hid + hid + (long long)hid * out + out;
    long long bytes = 4 * params, bucket = 1024LL * kb;
    long long n = (bytes + bucket - 1) / bucket;
    char a[32], b[32], c[32];
    snprintf(q->text, sizeof q->text,
             "An MLP %d -> %d -> %d with biases trains in FP32 under data parallelism. Its "
             "gradients are packed end to end into buckets of %d KiB (a tensor may straddle "
             "two buckets), and each bucket is all-reduced once. How many all-reduces does "
             "one step make?", in, hid, out, kb);
    q->answer = (double)n;
    snprintf(q->unit, sizeof q->unit, "all-reduces");
    snprintf(q->explain, sizeof q->explain,
             "Parameters: %d x %d + %d + %d x %d + %d = %s, so %s bytes of gradients. Buckets "
             "of %s bytes: ceil(%s / %s) = %lld. The hand-written loop would make 4, one per "
             "tensor; the count only drops below that when the buckets are big.", in, hid,
             hid, hid, out, out, ex_fmt_int(a, sizeof a, params), ex_fmt_int(b, sizeof b, bytes),
             ex_fmt_int(c, sizeof c, bucket), b, c, n);
}

static const char *const buckets_hints[] = {
    "How many parameters do two dense layers with biases hold? Count weights and biases.",
    "How many bytes is that in FP32, and how many buckets of the given size does it fill, "
    "counting a partly filled last one?",
    NULL
};

static const exercise ch05_predict_buckets = {
    .id = "ch05-predict-buckets",
    .chapter = 5,
    .kind = EX_PREDICT,
    .title = "How many buckets a step all-reduces",
    .task = "Predict the number of bucket all-reduces per step for a given MLP and bucket size.",
    .hints = buckets_hints,
    .lab = "ch05/simple-ddp",
    .draw = draw_buckets,
};

const exercise *const ch05_exercises[] = {
    &ch05_manual_ddp,
    &ch05_predict_buckets,
    &ch05_bucketing,
    &ch05_step_times,
    NULL
};
