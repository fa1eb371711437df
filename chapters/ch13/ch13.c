/* ch13.c - Chapter 13, "RLHF Computation Flow": the per-token reward with its KL penalty
 * (core/rl/reward.c), and the four-model RLHF loop on the lab's own model (core/rl/rlhf.c). */
#include "../../lab/lab.h"

extern const lab ch13_reward_calculator_lab;
extern const struct exercise *const ch13_exercises[];   /* ch13_exercises.c */
extern const lab ch13_rlhf_loop_lab;

static const lab *const ch13_labs[] = {
    &ch13_reward_calculator_lab,
    &ch13_rlhf_loop_lab,
    NULL
};

const chapter ch13_chapter = {
    .number = 13,
    .part = "Part IV: RLHF",
    .title = "RLHF Computation Flow",
    .text_asset = "assets/chapters/ch13.md",
    .labs = ch13_labs,
    .exercises = ch13_exercises,
};
