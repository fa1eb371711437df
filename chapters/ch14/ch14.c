/* ch14.c - Chapter 14, "RLHF System Architecture": the chapter entry. Its labs are not written yet;
 * they will be listed here, one line each, as they are added to this folder. */
#include "../../lab/lab.h"

static const lab *const ch14_labs[] = {
    NULL
};

const chapter ch14_chapter = {
    .number = 14,
    .part = "Part IV: RLHF",
    .title = "RLHF System Architecture",
    .text_asset = NULL,
    .labs = ch14_labs,
};
