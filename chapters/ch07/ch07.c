/* ch07.c - Chapter 7, "Pipeline and expert parallelism": the chapter entry. Its labs are not written yet;
 * they will be listed here, one line each, as they are added to this folder. */
#include "../../lab/lab.h"

static const lab *const ch07_labs[] = {
    NULL
};

const chapter ch07_chapter = {
    .number = 7,
    .part = "Part II: Parallelism strategies",
    .title = "Pipeline and expert parallelism",
    .text_asset = NULL,
    .labs = ch07_labs,
};
