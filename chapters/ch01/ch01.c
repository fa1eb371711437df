/* ch01.c - Chapter 1, "Your first distributed program": rank, world size, process groups,
 * and a check that this machine can run the rest of the lab. */
#include "../../lab/lab.h"

extern const lab ch01_verify_setup_lab;
extern const lab ch01_hello_distributed_lab;

extern const struct exercise *const ch01_exercises[];   /* ch01_exercises.c */

static const lab *const ch01_labs[] = {
    &ch01_verify_setup_lab,
    &ch01_hello_distributed_lab,
    NULL
};

const chapter ch01_chapter = {
    .number = 1,
    .part = "Part I: Distributed computing",
    .title = "Your first distributed program",
    .text_asset = "assets/chapters/ch01.md",
    .labs = ch01_labs,
    .exercises = ch01_exercises,
};
