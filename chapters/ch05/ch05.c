/* ch05.c - Chapter 5, "Data parallelism deep dive": the hand-written data-parallel loop
 * against our DDP engine (ddp.c) and the ZeRO stages (zero.c), and gradients before and
 * after the all-reduce in the blocks view. */
#include "../../lab/lab.h"

extern const lab ch05_simple_ddp_lab;
extern const lab ch05_gradient_sync_visualizer_lab;
extern const lab ch05_train_lm_lab;
extern const struct exercise *const ch05_exercises[];   /* ch05_exercises.c */

static const lab *const ch05_labs[] = {
    &ch05_simple_ddp_lab,
    &ch05_gradient_sync_visualizer_lab,
    &ch05_train_lm_lab,
    NULL
};

const chapter ch05_chapter = {
    .number = 5,
    .part = "Part II: Parallelism strategies",
    .title = "Data parallelism deep dive",
    .text_asset = "assets/chapters/ch05.md",
    .labs = ch05_labs,
    .exercises = ch05_exercises,
};
