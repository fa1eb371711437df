/* ch09.c - Chapter 9, "KV Cache Management": the chapter entry. Its labs are not written yet;
 * they will be listed here, one line each, as they are added to this folder. */
#include "../../lab/lab.h"

static const lab *const ch09_labs[] = {
    NULL
};

const chapter ch09_chapter = {
    .number = 9,
    .part = "Part III: LLM inference",
    .title = "KV Cache Management",
    .text_asset = NULL,
    .labs = ch09_labs,
};
