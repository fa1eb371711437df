/* api.h - ch12-gae: generalized advantage estimation and discounted returns, the functions
 * the learner writes, as the check calls them. Same contract as core/rl's seam rl_gae and
 * rl_discounted_returns (rl.h). */
#ifndef EX_API_H
#define EX_API_H
#include <stdint.h>

/* One trajectory of T steps: rewards[T], values[T] = V(s_t), done[T] (done[t] = 1: the
 * episode ended with step t; done may be NULL: none ended), last_value = V of the state after
 * the last step (used only when done[T-1] is 0). Writes adv[T], computed backwards:
 *   delta_t = r_t + gamma * V_{t+1} * (1 - done_t) - V_t        (V_T = last_value)
 *   A_t     = delta_t + gamma * lambda * (1 - done_t) * A_{t+1}  (A_T = 0)
 * Nothing after a done step belongs to that episode. adv does not alias the inputs. */
void gae(float *adv, const float *rewards, const float *values, const uint8_t *done,
         float last_value, int T, float gamma, float lambda);

/* Discounted returns G_t = r_t + gamma * (1 - done_t) * G_{t+1}, G_T = last_value. */
void discounted_returns(float *ret, const float *rewards, const uint8_t *done,
                        float last_value, int T, float gamma);

#endif
