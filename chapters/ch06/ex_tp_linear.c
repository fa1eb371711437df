/* ex_tp_linear.c - Chapter 6's implement exercise: the column- and row-parallel linear layer,
 * forward and backward, on T = 1, 2, 4 ranks, checked against the serial layer on seeded
 * inputs (assets/exercises/ch06-tp-linear/: the starter, the solution and the rank-side
 * check). Listed in ch06_exercises.c's table. */
#include "../../lab/exercise/exercise.h"

static const int sizes_1_2_4[] = {1, 2, 4, 0};

static const char *const tp_linear_hints[] = {
    "Column-parallel: output column j of y = x·W needs only column j of W. Does the forward "
    "need any other rank's data?",
    "In the column backward, dx = dy·Wᵀ sums over all output columns. Which of them does "
    "this rank hold, and how do the ranks add their parts?",
    "Row-parallel: y = x·W sums over the input features, and this rank holds only in_r of "
    "them. What is x_r·W_r, and which collective turns it into y?",
    "In the row backward, dy is whole on every rank: which of dx's columns can this rank "
    "compute alone, and does it need a collective at all?",
    NULL
};

static const ex_implement tp_linear_impl = {
    .function = "col_forward/col_backward/row_forward/row_backward",
    .world_sizes = sizes_1_2_4, .timeout_ms = 5000, .limit_ms = 20000,
};

const exercise ch06_tp_linear = {
    .id = "ch06-tp-linear",
    .chapter = 6,
    .kind = EX_IMPLEMENT,
    .title = "Column- and row-parallel linear layers, forward and backward",
    .task = "Write the forward and backward of a column-parallel and a row-parallel linear "
            "layer on T ranks, with exactly the all-reduces they need, so that the ranks "
            "together compute the serial layer's y, dW and dx.",
    .hints = tp_linear_hints,
    .lab = "ch06/tp-linear",
    .starter = "starter.c",
    .solution = "solution.c",
    .workfile = "tp_linear.c",
    .impl = &tp_linear_impl,
};
