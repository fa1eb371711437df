/* ch10.c - Chapter 10, "Advanced Scheduling and CUDA Graphs": the chapter entry, one line per
 * lab. */
#include "../../lab/lab.h"

extern const lab ch10_cuda_graph_simple_lab;
extern const lab ch10_scheduling_overhead_benchmark_lab;
extern const struct exercise *const ch10_exercises[];   /* ch10_exercises.c */

static const lab *const ch10_labs[] = {
    &ch10_cuda_graph_simple_lab,
    &ch10_scheduling_overhead_benchmark_lab,
    NULL
};

const chapter ch10_chapter = {
    .number = 10,
    .part = "Part III: LLM inference",
    .title = "Advanced Scheduling and CUDA Graphs",
    .text_asset = "assets/chapters/ch10.md",
    .labs = ch10_labs,
    .exercises = ch10_exercises,
};
