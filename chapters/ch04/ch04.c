/* ch04.c - Chapter 4, "NCCL algorithms and GPU topology": ring and tree all-reduce, the
 * alpha-beta cost model, NCCL's protocols and knobs, and what connects the GPUs of a machine.
 * One line per lab in the table below. */
#include "../../lab/lab.h"

extern const lab ch04_topology_inspector_lab;
extern const lab ch04_benchmark_algorithms_lab;

extern const struct exercise *const ch04_exercises[];   /* ch04_exercises.c */

static const lab *const ch04_labs[] = {
    &ch04_topology_inspector_lab,
    &ch04_benchmark_algorithms_lab,
    NULL
};

const chapter ch04_chapter = {
    .number = 4,
    .part = "Part I: Distributed computing",
    .title = "NCCL algorithms and GPU topology",
    .text_asset = "assets/chapters/ch04.md",
    .labs = ch04_labs,
    .exercises = ch04_exercises,
};
