/* api.h - ch13-token-rewards: RLHF's per-token rewards with the KL penalty and an adaptive KL
 * coefficient, the functions the learner writes, as the check calls them. token_rewards has
 * the contract of core/rl's seam rl_token_rewards (rl.h), the mode as an int. */
#ifndef EX_API_H
#define EX_API_H

/* One response of T tokens: logp[t] = log pi_actor(x_t), ref_logp[t] = log pi_ref(x_t).
 * kl_t = logp_t - ref_logp_t (kl[T] may be NULL: then it is not written),
 * rewards[t] = -beta * kl_t, plus the reward model's score:
 *   spread == 0: all of it on the last token (rewards[T-1] += score)
 *   spread == 1: score / T on every token.
 * Either way sum_t rewards[t] = score - beta * sum_t kl_t. */
void token_rewards(float *rewards, float *kl, const float *logp, const float *ref_logp, int T,
                   float beta, float score, int spread);

/* The adaptive KL controller (Ziegler et al.): after a batch whose mean KL was kl, against a
 * target KL target > 0, the next beta is
 *   beta * (1 + 0.1 * clip((kl - target) / target, -0.2, 0.2))
 * so beta rises (by at most 2 %) when the actor drifts further than wanted, and falls when it
 * stays closer. */
float kl_controller(float beta, float kl, float target);

#endif
