/* ch07.c - Chapter 7, "Pipeline and expert parallelism": the chapter entry. Its labs: the
 * pipeline schedule visualiser (GPipe, 1F1B, interleaved, ZB-H1; --run executes them on
 * ranks) and the parallel strategy calculator (TP x PP x DP x EP layouts). */
#include "../../lab/lab.h"

extern const lab ch07_pipeline_schedule_viz_lab;
extern const lab ch07_parallel_strategy_calculator_lab;
extern const struct exercise *const ch07_exercises[];   /* ch07_exercises.c */

static const lab *const ch07_labs[] = {
    &ch07_pipeline_schedule_viz_lab,
    &ch07_parallel_strategy_calculator_lab,
    NULL
};

const chapter ch07_chapter = {
    .number = 7,
    .part = "Part II: Parallelism strategies",
    .title = "Pipeline and expert parallelism",
    .text_asset = "assets/chapters/ch07.md",
    .labs = ch07_labs,
    .exercises = ch07_exercises,
};
