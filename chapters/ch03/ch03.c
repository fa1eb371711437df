/* ch03.c - Chapter 3, "Collective operations": what each collective does, and the global
 * mean and softmax built from them. */
#include "../../lab/lab.h"

extern const lab ch03_collective_cheatsheet_lab;
extern const lab ch03_distributed_mean_lab;
extern const lab ch03_distributed_softmax_lab;

extern const struct exercise *const ch03_exercises[];   /* ch03_exercises.c */

static const lab *const ch03_labs[] = {
    &ch03_collective_cheatsheet_lab,
    &ch03_distributed_mean_lab,
    &ch03_distributed_softmax_lab,
    NULL
};

const chapter ch03_chapter = {
    .number = 3,
    .part = "Part I: Distributed computing",
    .title = "Collective operations",
    .text_asset = "assets/chapters/ch03.md",
    .labs = ch03_labs,
    .exercises = ch03_exercises,
};
