/* ch13.c - Chapter 13, "RLHF Computation Flow": the chapter entry. Its labs are not written yet;
 * they will be listed here, one line each, as they are added to this folder. */
#include "../../lab/lab.h"

static const lab *const ch13_labs[] = {
    NULL
};

const chapter ch13_chapter = {
    .number = 13,
    .part = "Part IV: RLHF",
    .title = "RLHF Computation Flow",
    .text_asset = NULL,
    .labs = ch13_labs,
};
