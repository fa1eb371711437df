/* ch04.c - Chapter 4, "NCCL algorithms and GPU topology": the chapter entry. Its labs are not written yet;
 * they will be listed here, one line each, as they are added to this folder. */
#include "../../lab/lab.h"

static const lab *const ch04_labs[] = {
    NULL
};

const chapter ch04_chapter = {
    .number = 4,
    .part = "Part I: Distributed computing",
    .title = "NCCL algorithms and GPU topology",
    .text_asset = "assets/chapters/ch04.md",
    .labs = ch04_labs,
};
