/* exercises.c - Chapter 5's exercises: data parallelism by hand (the initial broadcast and
 * the gradient all-reduce, checked against one process on the whole batch), gradient
 * bucketing (checked by value and by the runtime's all-reduce counter), and a predict
 * question on how many buckets a model's gradients fill. Implement files are in
 * assets/exercises/<id>/. */
#include "../../lab/exercise/exercise.h"
#include <stdio.h>

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
    NULL
};
