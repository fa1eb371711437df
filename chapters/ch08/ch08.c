/* ch08.c - Chapter 8, "Anatomy of an LLM Inference Server": the chapter entry, one line per
 * lab of this folder. */
#include "../../lab/lab.h"

extern const lab ch08_minimal_inference_server_lab;
extern const struct exercise *const ch08_exercises[];   /* ch08_exercises.c */

static const lab *const ch08_labs[] = {
    &ch08_minimal_inference_server_lab,
    NULL
};

const chapter ch08_chapter = {
    .number = 8,
    .part = "Part III: LLM inference",
    .title = "Anatomy of an LLM Inference Server",
    .text_asset = "assets/chapters/ch08.md",
    .labs = ch08_labs,
    .exercises = ch08_exercises,
};
