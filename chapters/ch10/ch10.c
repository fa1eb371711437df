/* ch10.c - Chapter 10, "Advanced Scheduling and CUDA Graphs": the chapter entry. Its labs are not written yet;
 * they will be listed here, one line each, as they are added to this folder. */
#include "../../lab/lab.h"

static const lab *const ch10_labs[] = {
    NULL
};

const chapter ch10_chapter = {
    .number = 10,
    .part = "Part III: LLM inference",
    .title = "Advanced Scheduling and CUDA Graphs",
    .text_asset = NULL,
    .labs = ch10_labs,
};
