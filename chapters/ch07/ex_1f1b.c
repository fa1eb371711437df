/* ex_1f1b.c - Chapter 7's implement exercise: the 1F1B schedule generator, checked on one
 * rank against the rules of a pipeline (one F and one B per stage and micro-batch,
 * dependencies, one task per slot) and of 1F1B (at most min(P - s, M) micro-batches in
 * flight, 2(M + P - 1) slots) for P and M drawn from the seed. Listed in ch07_exercises.c. */
#include "../../lab/exercise/exercise.h"

static const int sizes_1[] = {1, 0};

static const char *const onef1b_hints[] = {
    "In fill-drain, when does stage s start its first backward, and how many forwards has it "
    "run by then?",
    "The last stage can run B0 right after F0. Stage s must wait for the backward to come "
    "back from stage s+1: how many forwards can it fit in before that, P - 1 - s?",
    "After the warm-up, what happens to a stage's activations if it runs one forward and then "
    "one backward, again and again?",
    "When M < P, there are fewer micro-batches than warm-up slots: what is the warm-up then?",
    NULL
};

static const ex_implement onef1b_impl = {
    .function = "build_1f1b", .world_sizes = sizes_1, .timeout_ms = 5000, .limit_ms = 20000,
};

const exercise ch07_1f1b = {
    .id = "ch07-1f1b",
    .chapter = 7,
    .kind = EX_IMPLEMENT,
    .title = "The 1F1B schedule generator",
    .task = "Order each stage's forwards and backwards as 1F1B does (warm-up, one forward one "
            "backward, drain), so that stage s holds at most min(P - s, M) micro-batches and "
            "the whole schedule still takes 2(M + P - 1) slots.",
    .hints = onef1b_hints,
    .lab = "ch07/pipeline-schedule-viz",
    .starter = "starter.c",
    .solution = "solution.c",
    .workfile = "schedule_1f1b.c",
    .impl = &onef1b_impl,
};
