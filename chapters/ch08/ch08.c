/* ch08.c - Chapter 8, "Anatomy of an LLM Inference Server": the chapter entry. Its labs are not written yet;
 * they will be listed here, one line each, as they are added to this folder. */
#include "../../lab/lab.h"

static const lab *const ch08_labs[] = {
    NULL
};

const chapter ch08_chapter = {
    .number = 8,
    .part = "Part III: LLM inference",
    .title = "Anatomy of an LLM Inference Server",
    .text_asset = NULL,
    .labs = ch08_labs,
};
