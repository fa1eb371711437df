/* ch06.c - Chapter 6, "Tensor parallelism": one layer split across ranks. Column- and
 * row-parallel linear layers, the Megatron MLP with its one all-reduce, and attention with
 * its heads split across ranks, all checked against the serial layer. */
#include "../../lab/lab.h"

extern const lab ch06_tp_linear_lab;
extern const lab ch06_tp_mlp_lab;
extern const lab ch06_tp_attention_lab;
extern const struct exercise *const ch06_exercises[];   /* ch06_exercises.c */

static const lab *const ch06_labs[] = {
    &ch06_tp_linear_lab,
    &ch06_tp_mlp_lab,
    &ch06_tp_attention_lab,
    NULL
};

const chapter ch06_chapter = {
    .number = 6,
    .part = "Part II: Parallelism strategies",
    .title = "Tensor parallelism",
    .text_asset = "assets/chapters/ch06.md",
    .labs = ch06_labs,
    .exercises = ch06_exercises,
};
