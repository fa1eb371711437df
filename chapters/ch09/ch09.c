/* ch09.c - Chapter 9, "KV Cache Management": the chapter entry, one line per lab of this
 * folder. */
#include "../../lab/lab.h"

extern const lab ch09_kv_cache_calculator_lab;
extern const lab ch09_prefix_sharing_demo_lab;
extern const struct exercise *const ch09_exercises[];   /* ch09_exercises.c */

static const lab *const ch09_labs[] = {
    &ch09_kv_cache_calculator_lab,
    &ch09_prefix_sharing_demo_lab,
    NULL
};

const chapter ch09_chapter = {
    .number = 9,
    .part = "Part III: LLM inference",
    .title = "KV Cache Management",
    .text_asset = "assets/chapters/ch09.md",
    .labs = ch09_labs,
    .exercises = ch09_exercises,
};
