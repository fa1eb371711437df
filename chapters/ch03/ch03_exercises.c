/* ch03_exercises.c - Chapter 3's exercises: the global mean, distributed argmax, ring all-reduce
 * from send and recv, distributed softmax (implement), and predict questions on ring
 * volumes, message counts, reduce_scatter and weighted means. The implement files are in
 * assets/exercises/<id>/; the predict answers are computed here from the formulas. */
#include "../../lab/exercise/exercise.h"
#include <math.h>
#include <stdio.h>
#include <string.h>

static const int sizes_1_to_8[] = {1, 2, 3, 4, 8, 0};
static const int sizes_1_to_4[] = {1, 2, 3, 4, 0};

/* ---- implement ---- */

static const char *const mean_hints[] = {
    "Which collective gives every rank the sum of one number from each rank?",
    "Which element type keeps 1e-9 relative precision: MLSYS_F32 or MLSYS_F64?",
    "Once you have the sum, what do you divide it by: mlsys_rank(c) or mlsys_size(c)?",
    NULL
};

static const ex_implement mean_impl = {
    .function = "global_mean", .world_sizes = sizes_1_to_8, .timeout_ms = 5000,
    .limit_ms = 12000,
};

static const exercise ch03_global_mean = {
    .id = "ch03-global-mean",
    .chapter = 3,
    .kind = EX_IMPLEMENT,
    .title = "Global mean with all_reduce",
    .task = "Each rank holds one number; return the mean of all ranks' numbers on every rank.",
    .hints = mean_hints,
    .lab = "ch03/distributed-mean",
    .starter = "starter.c",
    .solution = "solution.c",
    .workfile = "global_mean.c",
    .impl = &mean_impl,
};

static const char *const argmax_hints[] = {
    "all_reduce(MAX) tells every rank the maximum. How can a rank then tell whether it owns it?",
    "If two ranks own the maximum, which single number could all ranks reduce so that the "
    "lowest owner wins? Which operator picks the lowest?",
    "What should a rank that does not own the maximum contribute, so that it never wins that "
    "reduction?",
    "Where does your local maximum start? What if every value is negative?",
    NULL
};

static const ex_implement argmax_impl = {
    .function = "distributed_argmax", .world_sizes = sizes_1_to_8, .timeout_ms = 5000,
    .limit_ms = 12000,
};

static const exercise ch03_argmax = {
    .id = "ch03-argmax",
    .chapter = 3,
    .kind = EX_IMPLEMENT,
    .title = "Distributed argmax, lowest rank wins a tie",
    .task = "Return on every rank the global maximum of all ranks' values and the rank that "
            "holds it; on a tie, the lowest such rank.",
    .hints = argmax_hints,
    .lab = "ch03/collective-cheatsheet",
    .starter = "starter.c",
    .solution = "solution.c",
    .workfile = "argmax.c",
    .impl = &argmax_impl,
};

static const char *const ring_hints[] = {
    "If every rank calls a blocking mlsys_send before its mlsys_recv, who is receiving? "
    "(send is synchronous here: it returns once the receiver has the data.)",
    "How do you cut count elements into N chunks whose sizes differ by at most one? Where "
    "does chunk i start? What happens when count < N?",
    "At reduce-scatter step k, which chunk does rank r send to the right, and which chunk "
    "arrives from the left? Try N = 3 on paper.",
    "After N-1 reduce-scatter steps, which chunk is complete on rank r? Which way must it "
    "travel during the all-gather, and for how many steps?",
    "May you add into the chunk you are sending in the same step? (The send buffer belongs "
    "to the runtime until wait returns.)",
    NULL
};

static const ex_implement ring_impl = {
    .function = "my_ring_allreduce", .world_sizes = sizes_1_to_8, .timeout_ms = 5000,
    .limit_ms = 15000,
};

static const exercise ch03_ring_allreduce = {
    .id = "ch03-ring-allreduce",
    .chapter = 3,
    .kind = EX_IMPLEMENT,
    .title = "Ring all-reduce from send and recv",
    .task = "Write an in-place SUM all-reduce with point-to-point calls only: reduce-scatter "
            "then all-gather round a ring, 2(N-1) messages per rank.",
    .hints = ring_hints,
    .lab = "ch03/collective-cheatsheet",
    .starter = "starter.c",
    .solution = "solution.c",
    .workfile = "ring_allreduce.c",
    .impl = &ring_impl,
};

static const char *const softmax_hints[] = {
    "Which value can you subtract from every x_i without changing the softmax? How do all "
    "ranks learn that value?",
    "Which sum is the denominator, and which collective gives it to every rank?",
    "What is the maximum of an empty shard? Which float value never wins a MAX?",
    "In which precision should you add up many small exponentials?",
    NULL
};

static const ex_implement softmax_impl = {
    .function = "distributed_softmax", .world_sizes = sizes_1_to_4, .timeout_ms = 5000,
    .limit_ms = 12000,
};

static const exercise ch03_softmax = {
    .id = "ch03-softmax",
    .chapter = 3,
    .kind = EX_IMPLEMENT,
    .title = "Distributed softmax of a sharded vector",
    .task = "Each rank holds a shard of a vector; write its part of the softmax of the whole "
            "vector, without overflow for inputs around 1000.",
    .hints = softmax_hints,
    .lab = "ch03/distributed-softmax",
    .starter = "starter.c",
    .solution = "solution.c",
    .workfile = "softmax.c",
    .impl = &softmax_impl,
};

/* ---- predict ---- */

static void draw_ring_bytes(uint64_t seed, ex_question *q)
{
    mlsys_rng g;
    mlsys_rng_seed(&g, seed);
    int n = (int)ex_draw_int(&g, 2, 16);
    long long s = ex_draw_int(&g, 1, 1000) * 1000000LL;
    double ans = 2.0 * (n - 1) / n * (double)s;
    char a[32], b[32];
    snprintf(q->text, sizeof q->text,
             "A ring all-reduce of S = %s bytes runs on N = %d ranks. How many bytes does each "
             "rank send in total, over both phases?", ex_fmt_int(a, sizeof a, s), n);
    q->answer = ans;
    q->rel_tol = 1e-3;
    snprintf(q->unit, sizeof q->unit, "bytes");
    snprintf(q->explain, sizeof q->explain,
             "There are 2(N-1) steps (N-1 of reduce-scatter, N-1 of all-gather) and each sends "
             "one chunk of S/N: 2(N-1)/N x S = 2 x %d/%d x %s = %s bytes. It barely grows with "
             "N: the ring moves about 2S per rank whatever the number of ranks.",
             n - 1, n, a, ex_fmt_int(b, sizeof b, (long long)llround(ans)));
}

static const char *const ring_bytes_hints[] = {
    "How many steps does a ring all-reduce take, counting both phases?",
    "How big is the piece one rank sends in one step?",
    NULL
};

static const exercise ch03_predict_ring_bytes = {
    .id = "ch03-predict-ring-bytes",
    .chapter = 3,
    .kind = EX_PREDICT,
    .title = "Bytes each rank sends in a ring all-reduce",
    .task = "Predict the per-rank send volume of a ring all-reduce of S bytes on N ranks.",
    .hints = ring_bytes_hints,
    .draw = draw_ring_bytes,
};

static void draw_ring_sends(uint64_t seed, ex_question *q)
{
    mlsys_rng g;
    mlsys_rng_seed(&g, seed);
    int n = (int)ex_draw_int(&g, 2, 64);
    int total = (int)ex_draw_int(&g, 0, 1);
    if (total) {
        snprintf(q->text, sizeof q->text,
                 "A ring all-reduce runs on N = %d ranks. How many point-to-point messages are "
                 "sent in all, adding up every rank?", n);
        q->answer = 2.0 * n * (n - 1);
        snprintf(q->explain, sizeof q->explain,
                 "Each rank sends one message per step and there are 2(N-1) steps, so "
                 "N x 2(N-1) = %d x %d = %d messages.", n, 2 * (n - 1), 2 * n * (n - 1));
    } else {
        snprintf(q->text, sizeof q->text,
                 "A ring all-reduce runs on N = %d ranks. How many point-to-point messages "
                 "does each rank send?", n);
        q->answer = 2.0 * (n - 1);
        snprintf(q->explain, sizeof q->explain,
                 "One message per step: N-1 steps of reduce-scatter and N-1 of all-gather, "
                 "2(N-1) = %d. This is what the counters of ch03-ring-allreduce check.",
                 2 * (n - 1));
    }
    q->abs_tol = 0.0;
    snprintf(q->unit, sizeof q->unit, "messages");
}

static const char *const ring_sends_hints[] = {
    "In one step of the ring, how many messages does a rank send?",
    "How many steps do the reduce-scatter and the all-gather take together?",
    NULL
};

static const exercise ch03_predict_ring_sends = {
    .id = "ch03-predict-ring-sends",
    .chapter = 3,
    .kind = EX_PREDICT,
    .title = "Messages in a ring all-reduce",
    .task = "Predict how many messages a ring all-reduce sends, per rank or in all.",
    .hints = ring_sends_hints,
    .draw = draw_ring_sends,
};

static void draw_reduce_scatter(uint64_t seed, ex_question *q)
{
    mlsys_rng g;
    mlsys_rng_seed(&g, seed);
    int n = (int)ex_draw_int(&g, 2, 12);
    int i = (int)ex_draw_int(&g, 0, n - 1);
    snprintf(q->text, sizeof q->text,
             "reduce_scatter(SUM) runs on N = %d ranks. Rank r's input has N elements, "
             "[1, 2, ..., N] x (r+1), and element i is the chunk for rank i. What value does "
             "rank %d end with?", n, i);
    long long s = (long long)(i + 1) * n * (n + 1) / 2;
    q->answer = (double)s;
    snprintf(q->explain, sizeof q->explain,
             "Rank %d gets the sum over r of element %d of each input: (%d) x (1 + 2 + ... + N) "
             "= %d x %d = %lld.", i, i, i + 1, i + 1, n * (n + 1) / 2, s);
}

static const char *const reduce_scatter_hints[] = {
    "Which element of each rank's input lands on rank i?",
    "What is that element on rank r, and what is the sum of it over r = 0..N-1?",
    NULL
};

static const exercise ch03_predict_reduce_scatter = {
    .id = "ch03-predict-reduce-scatter",
    .chapter = 3,
    .kind = EX_PREDICT,
    .title = "What reduce_scatter leaves on a rank",
    .task = "Predict one rank's result of the cheat-sheet's reduce_scatter for a given N.",
    .hints = reduce_scatter_hints,
    .lab = "ch03/collective-cheatsheet",
    .draw = draw_reduce_scatter,
};

static void draw_weighted_mean(uint64_t seed, ex_question *q)
{
    mlsys_rng g;
    mlsys_rng_seed(&g, seed);
    int n = (int)ex_draw_int(&g, 2, 5);
    long cnt[5];
    double mean[5], num = 0.0, den = 0.0, plain = 0.0;
    char list[512] = "";
    for (int r = 0; r < n; r++) {
        cnt[r] = ex_draw_int(&g, 1, 20) * 10;
        mean[r] = (double)ex_draw_int(&g, -20, 40) / 10.0;
        num += (double)cnt[r] * mean[r];
        den += (double)cnt[r];
        plain += mean[r];
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s rank %d: %ld values, mean %.1f",
                 r ? ";" : "", r, cnt[r], mean[r]);
    }
    snprintf(q->text, sizeof q->text,
             "Unequal shards:%s. What is the mean of all the values together?", list);
    q->answer = num / den;
    q->abs_tol = 1e-3;
    q->rel_tol = 1e-3;
    snprintf(q->explain, sizeof q->explain,
             "Weight each local mean by its count: sum(n_r m_r) / sum(n_r) = %.1f / %.0f = %.4f. "
             "The plain average of the local means, %.4f, is right only when the shards are "
             "equal; distributed-mean all_reduces the sums and the counts separately.",
             num, den, num / den, plain / n);
}

static const char *const weighted_mean_hints[] = {
    "From a shard's count and mean, can you get the sum of its values?",
    "Is the average of the local means the mean of all values when the shards differ in size?",
    NULL
};

static const exercise ch03_predict_weighted_mean = {
    .id = "ch03-predict-weighted-mean",
    .chapter = 3,
    .kind = EX_PREDICT,
    .title = "The mean of unequal shards",
    .task = "Predict the global mean from each shard's size and local mean.",
    .hints = weighted_mean_hints,
    .lab = "ch03/distributed-mean",
    .draw = draw_weighted_mean,
};

const exercise *const ch03_exercises[] = {
    &ch03_predict_reduce_scatter,
    &ch03_global_mean,
    &ch03_predict_weighted_mean,
    &ch03_argmax,
    &ch03_predict_ring_sends,
    &ch03_predict_ring_bytes,
    &ch03_ring_allreduce,
    &ch03_softmax,
    NULL
};
