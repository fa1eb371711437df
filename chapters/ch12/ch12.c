/* ch12.c - Chapter 12, "RL Fundamentals for LLMs": the chapter entry. Its labs are not written yet;
 * they will be listed here, one line each, as they are added to this folder. */
#include "../../lab/lab.h"

static const lab *const ch12_labs[] = {
    NULL
};

const chapter ch12_chapter = {
    .number = 12,
    .part = "Part IV: RLHF",
    .title = "RL Fundamentals for LLMs",
    .text_asset = NULL,
    .labs = ch12_labs,
};
