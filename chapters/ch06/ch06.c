/* ch06.c - Chapter 6, "Tensor parallelism": the chapter entry. Its labs are not written yet;
 * they will be listed here, one line each, as they are added to this folder. */
#include "../../lab/lab.h"

static const lab *const ch06_labs[] = {
    NULL
};

const chapter ch06_chapter = {
    .number = 6,
    .part = "Part II: Parallelism strategies",
    .title = "Tensor parallelism",
    .text_asset = NULL,
    .labs = ch06_labs,
};
