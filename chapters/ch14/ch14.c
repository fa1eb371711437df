/* ch14.c - Chapter 14, "RLHF System Architecture": memory per phase for real model sizes,
 * and how weights reach the inference engine, with a broadcast measured on the runtime. */
#include "../../lab/lab.h"

extern const lab ch14_memory_timeline_lab;
extern const lab ch14_weight_update_demo_lab;
extern const struct exercise *const ch14_exercises[];   /* ch14_exercises.c */

static const lab *const ch14_labs[] = {
    &ch14_memory_timeline_lab,
    &ch14_weight_update_demo_lab,
    NULL
};

const chapter ch14_chapter = {
    .number = 14,
    .part = "Part IV: RLHF",
    .title = "RLHF System Architecture",
    .text_asset = "assets/chapters/ch14.md",
    .labs = ch14_labs,
    .exercises = ch14_exercises,
};
