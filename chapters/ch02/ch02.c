/* ch02.c - Chapter 2, "Point-to-point communication": blocking and non-blocking send and
 * receive, deadlock, overlap, and a pipeline built from them. */
#include "../../lab/lab.h"

extern const lab ch02_send_recv_basic_lab;
extern const lab ch02_pipeline_simulation_lab;
extern const lab ch02_async_communication_lab;

extern const struct exercise *const ch02_exercises[];   /* ch02_exercises.c */

static const lab *const ch02_labs[] = {
    &ch02_send_recv_basic_lab,
    &ch02_pipeline_simulation_lab,
    &ch02_async_communication_lab,
    NULL
};

const chapter ch02_chapter = {
    .number = 2,
    .part = "Part I: Distributed computing",
    .title = "Point-to-point communication",
    .text_asset = "assets/chapters/ch02.md",
    .labs = ch02_labs,
    .exercises = ch02_exercises,
};
