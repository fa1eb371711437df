/* ch11.c - Chapter 11, "Speculative and Constraint Decoding": the chapter entry, one line per
 * lab. Both labs run the lab's own models (assets/models); the engines are in core/llm
 * (speculative.c, json_mask.c), the labs only measure and show them. */
#include "../../lab/lab.h"

extern const lab ch11_speculative_demo_lab, ch11_json_constraint_demo_lab;
extern const struct exercise *const ch11_exercises[];   /* ch11_exercises.c */

static const lab *const ch11_labs[] = {
    &ch11_speculative_demo_lab,
    &ch11_json_constraint_demo_lab,
    NULL
};

const chapter ch11_chapter = {
    .number = 11,
    .part = "Part III: LLM inference",
    .title = "Speculative and Constraint Decoding",
    .text_asset = "assets/chapters/ch11.md",
    .labs = ch11_labs,
    .exercises = ch11_exercises,
};
