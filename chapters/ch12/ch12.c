/* ch12.c - Chapter 12, "RL Fundamentals for LLMs": generalized advantage estimation on a
 * small trajectory, and PPO that learns CartPole across ranks (core/rl is the engine). */
#include "../../lab/lab.h"

extern const lab ch12_gae_visualizer_lab;
extern const lab ch12_ppo_cartpole_lab;
extern const struct exercise *const ch12_exercises[];   /* ch12_exercises.c */

static const lab *const ch12_labs[] = {
    &ch12_gae_visualizer_lab,
    &ch12_ppo_cartpole_lab,
    NULL
};

const chapter ch12_chapter = {
    .number = 12,
    .part = "Part IV: RLHF",
    .title = "RL Fundamentals for LLMs",
    .text_asset = "assets/chapters/ch12.md",
    .labs = ch12_labs,
    .exercises = ch12_exercises,
};
