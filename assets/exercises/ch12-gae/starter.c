/* ch12-gae - generalized advantage estimation (see api.h).
 *
 * GAE turns a trajectory's rewards and the critic's values into advantages: how much better
 * each step went than the critic expected, looking lambda-weighted into the future. One
 * backward pass: A_t = delta_t + gamma*lambda*A_{t+1}, restarting wherever an episode ended.
 *
 * The check (one rank): the hand case rewards [1, 1, 1], gamma 0.99 -> returns
 * [2.9701, 1.99, 1]; gae-visualizer's 10-step trajectory (gamma 0.99, lambda 0.95: A_0 =
 * 1.1925); then 40 seeded trajectories of 1..300 steps with episodes ending inside them
 * (done[t] = 1), gamma in {0.9, 0.99, 1}, lambda in {0, 0.5, 0.95, 1}, compared with core/rl's
 * rl_gae and rl_discounted_returns within 1e-4 (absolute and relative), and nothing written
 * past adv[T-1]. A failure names the trajectory and the timestep. The seed is printed.
 *
 *   mlsys-lab check ch12-gae      mlsys-lab hint ch12-gae */
#include "api.h"

void gae(float *adv, const float *rewards, const float *values, const uint8_t *done,
         float last_value, int T, float gamma, float lambda)
{
    (void)done;
    (void)last_value;
    (void)lambda;
    for (int t = 0; t < T; t++) {
        /* TODO: this is only the one-step TD error, and it ignores the next value; walk
         * backwards instead, carrying A_{t+1} and V_{t+1}, and cut both at a done step */
        adv[t] = rewards[t] - values[t];
    }
    (void)gamma;
}

void discounted_returns(float *ret, const float *rewards, const uint8_t *done,
                        float last_value, int T, float gamma)
{
    (void)done;
    (void)last_value;
    (void)gamma;
    /* TODO: G_t = r_t + gamma * G_{t+1}, backwards from G_T = last_value, cut at a done step */
    for (int t = 0; t < T; t++)
        ret[t] = rewards[t];
}
