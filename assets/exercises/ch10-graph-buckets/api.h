/* api.h - ch10-graph-buckets: serving any batch size with graphs captured for a few sizes
 * (core/graph/graph.h: a plan replays one batch size only), the functions the learner
 * writes, as the check calls them. */
#ifndef EX_API_H
#define EX_API_H
#include "graph/graph.h"

/* The smallest of sizes[0..n) (ascending) that holds bs rows, or -1 when none does. */
int pick_bucket(const int *sizes, int n, int bs);

/* y [bs, out] = the model's forward of x [bs, in]. plans[i] was captured for sizes[i] rows.
 * When a plan holds bs rows, replay the smallest such plan ONCE (graph_replay), on an input
 * of its own size: x's bs rows followed by zero rows, and copy back only the first bs rows
 * of its output. When none does, run the interpreter eagerly (graph_run_eager with e).
 * Touch no other plan. Returns 0, or -1. */
int run_batch(const graph_plan *plans, const int *sizes, int n, const graph_model *m,
              graph_eager *e, int bs, const float *x, float *y);

#endif
