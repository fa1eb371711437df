/* ch05.c - Chapter 5, "Data parallelism deep dive": the chapter entry. Its labs are not written yet;
 * they will be listed here, one line each, as they are added to this folder. */
#include "../../lab/lab.h"

static const lab *const ch05_labs[] = {
    NULL
};

const chapter ch05_chapter = {
    .number = 5,
    .part = "Part II: Parallelism strategies",
    .title = "Data parallelism deep dive",
    .text_asset = NULL,
    .labs = ch05_labs,
};
