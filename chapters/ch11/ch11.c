/* ch11.c - Chapter 11, "Speculative and Constraint Decoding": the chapter entry. Its labs are not written yet;
 * they will be listed here, one line each, as they are added to this folder. */
#include "../../lab/lab.h"

static const lab *const ch11_labs[] = {
    NULL
};

const chapter ch11_chapter = {
    .number = 11,
    .part = "Part III: LLM inference",
    .title = "Speculative and Constraint Decoding",
    .text_asset = NULL,
    .labs = ch11_labs,
};
