/* ch10_exercises.c - Chapter 10's exercises: serving any batch size with graphs captured for a
 * few (implement, assets/exercises/ch10-graph-buckets/), launch overhead against one graph
 * launch and scheduling overlapped with compute, the original's loop or SGLang's (predict),
 * and the dispatch work a captured
 * plan removes, measured on cuda-graph-simple's CPU analogue (experiment, ex_dispatch.c), and
 * scheduling overlapped with compute on two threads (implement, ch10-overlap). */
#include "../../lab/exercise/exercise.h"
#include <math.h>
#include <stdio.h>

static const int sizes_1[] = {1, 0};

/* ---- ch10-graph-buckets (implement) ---- */

static const char *const buckets_hints[] = {
    "A graph captured for 8 rows replays exactly 8 rows. Which captured size should a batch "
    "of 5 use, and what goes into the other 3 rows?",
    "graph_replay copies the plan's whole batch of input rows from x. How big must the buffer "
    "you hand it be?",
    "The padded rows produce outputs too. How many rows of the plan's output belong in y?",
    "A batch of 20 with graphs up to 16: which path is left?",
    NULL
};

static const ex_implement buckets_impl = {
    .function = "pick_bucket/run_batch", .world_sizes = sizes_1, .timeout_ms = 5000,
    .limit_ms = 30000,
};

static const exercise ch10_graph_buckets = {
    .id = "ch10-graph-buckets",
    .chapter = 10,
    .kind = EX_IMPLEMENT,
    .title = "Graphs of a few sizes for every batch: pick, pad, replay",
    .task = "Run any batch size with plans captured for a few sizes: the smallest captured "
            "size that holds the batch, the input padded with zero rows, one replay, the "
            "first rows of its output; eagerly above the largest.",
    .hints = buckets_hints,
    .lab = "ch10/cuda-graph-simple",
    .starter = "starter.c",
    .solution = "solution.c",
    .workfile = "graph_buckets.c",
    .impl = &buckets_impl,
};

/* ---- ch10-predict-launch (predict) ---- */

static void draw_launch(uint64_t seed, ex_question *q)
{
    mlsys_rng g;
    mlsys_rng_seed(&g, seed);
    int kind = (int)ex_draw_int(&g, 0, 2);
    if (kind < 2) {
        static const double launch_us[] = {5, 10, 20, 50};
        static const double compute_us[] = {20, 50, 100, 200, 500};
        double l = launch_us[ex_draw_int(&g, 0, 3)], c = compute_us[ex_draw_int(&g, 0, 4)];
        int k = (int)ex_draw_int(&g, 4, 40);
        double eager = k * l + c, graph = l + c;
        snprintf(q->text, sizeof q->text,
                 "A decode step launches %d small kernels one by one; each launch costs %.0f us "
                 "of CPU and driver time before its kernel can start, and the kernels' GPU work "
                 "adds up to %.0f us. Launches and work do not overlap. Captured in a CUDA "
                 "graph, the step is one launch of %.0f us followed by the same work. %s", k, l,
                 c, l, kind == 0 ? "How long does one eager step take, in us?" :
                 "What is the speed-up of the graph (eager time / graph time)?");
        q->answer = kind == 0 ? eager : eager / graph;
        q->rel_tol = kind == 0 ? 0.0 : 0.005;
        q->abs_tol = kind == 0 ? 0.5 : 0.0;
        snprintf(q->unit, sizeof q->unit, "%s", kind == 0 ? "us" : "x");
        snprintf(q->explain, sizeof q->explain,
                 "Eager: %d launches x %.0f us + %.0f us of work = %.0f us. Graph: 1 x %.0f + "
                 "%.0f = %.0f us. Speed-up %.0f / %.0f = %.3fx. The graph removes launch "
                 "overhead only: it pays where the kernels are many and small (decoding), and "
                 "hardly at all where one kernel runs for milliseconds.", k, l, c, eager, l, c,
                 graph, eager, graph, eager / graph);
        return;
    }
    /* scheduling overlapped with compute, two ways: the original's loop (10.3: the next
     * batch scheduled under this one's compute, post-processing still on the critical path)
     * and SGLang's (this batch's results processed, and the next scheduled, under the next
     * one's compute) */
    int n = (int)ex_draw_int(&g, 5, 50);
    double s = (double)ex_draw_int(&g, 1, 8), c = (double)ex_draw_int(&g, 2, 20);
    double p = (double)ex_draw_int(&g, 0, 3);
    int sglang = (int)ex_draw_int(&g, 0, 1);
    double seq = n * (s + c + p);
    double step = sglang ? fmax(c, s + p) : fmax(s, c) + p, ovl = (s + c + p) + (n - 1) * step;
    snprintf(q->text, sizeof q->text,
             "A server runs %d batches. Each needs %.0f ms of CPU scheduling, then %.0f ms of "
             "GPU compute, then %.0f ms of post-processing on the CPU. Run in sequence, nothing "
             "overlaps. Overlapped %s (the first batch is scheduled alone and the last one's "
             "results processed after it). What is the speed-up of the overlapped run over the "
             "sequential one?", n, s, c, p,
             sglang ? "as SGLang's scheduler does, while the GPU computes batch i+1 the CPU "
                      "post-processes batch i and schedules batch i+2 (batch i+1's tokens are "
                      "placeholders until its forward fills them)"
                    : "as the original tutorial's loop does, the CPU schedules batch i+1 while "
                      "the GPU computes batch i, and post-processes batch i after its compute, "
                      "before the GPU may start batch i+1");
    q->answer = seq / ovl;
    q->rel_tol = 0.005;
    snprintf(q->unit, sizeof q->unit, "x");
    snprintf(q->explain, sizeof q->explain,
             "Sequential: N(s + c + p) = %d x %.0f = %.0f ms. Overlapped: the first batch takes "
             "s + c + p = %.0f, each later one %s = %.0f: %.0f + %d x %.0f = %.0f ms. "
             "Speed-up %.0f / %.0f = %.3fx. %s", n, s + c + p, seq, s + c + p,
             sglang ? "max(c, s + p)" : "max(s, c) + p", step, s + c + p, n - 1, step, ovl, seq,
             ovl, seq / ovl,
             sglang ? (s + p > c ? "Here the CPU's share (s + p) is longer than the compute: "
                                   "the GPU waits for the CPU." :
                                   "Both CPU phases hide behind the compute: the GPU never "
                                   "waits, and only s + p beyond c would show.")
                    : (s > c ? "Here scheduling is longer than compute, so the GPU waits for "
                               "the CPU: the overlap hides the compute instead." :
                               "Scheduling hides behind the compute; post-processing does not: "
                               "SGLang's loop hides it too, max(c, s + p) a batch."));
}

static const char *const launch_hints[] = {
    "Eager: how many launches does one step make, and what is added to their cost?",
    "With a graph, how many launches are left, and does the GPU's work change?",
    "Overlapped: the first batch still runs s, c and p in turn. For each later batch, which "
    "CPU work runs while the GPU computes, and which still stands between two forwards?",
    NULL
};

static const exercise ch10_predict_launch = {
    .id = "ch10-predict-launch",
    .chapter = 10,
    .kind = EX_PREDICT,
    .title = "Launch overhead, one graph launch, overlapped scheduling",
    .task = "Predict an eager step's time and a CUDA graph's speed-up from launch and kernel "
            "times, or the speed-up of overlapping CPU scheduling with GPU compute.",
    .hints = launch_hints,
    .lab = "ch10/cuda-graph-simple",
    .draw = draw_launch,
};

/* ---- ch10-overlap (implement) ---- */

static const char *const overlap_hints[] = {
    "While the GPU computes batch i, what is the CPU doing in the starter? What could it "
    "prepare instead?",
    "If compute runs on a thread of its own, how does the CPU thread hand it batch i, and "
    "how does it learn that batch i is done?",
    "Post-processing needs batch i's result: when may the CPU call post(i), and must it wait "
    "before scheduling batch i+1?",
    "After the last batch, what must happen to the thread you started before returning?",
    NULL
};

static const ex_implement overlap_impl = {
    .function = "run_overlapped", .world_sizes = sizes_1, .timeout_ms = 5000,
    .limit_ms = 30000,
};

static const exercise ch10_overlap = {
    .id = "ch10-overlap",
    .chapter = 10,
    .kind = EX_IMPLEMENT,
    .title = "Overlap scheduling with compute: two threads",
    .task = "Run batches with the GPU's compute on a thread of its own, so that the CPU "
            "schedules batch i+1 while batch i computes, then post-processes batch i: each "
            "batch costs max(schedule, compute) + post instead of their sum.",
    .hints = overlap_hints,
    .lab = "ch10/cuda-graph-simple",
    .starter = "starter.c",
    .solution = "solution.c",
    .workfile = "overlap.c",
    .impl = &overlap_impl,
};

extern const exercise ch10_dispatch;    /* ex_dispatch.c */

const exercise *const ch10_exercises[] = {
    &ch10_predict_launch,
    &ch10_dispatch,
    &ch10_graph_buckets,
    &ch10_overlap,
    NULL
};
