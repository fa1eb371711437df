/* reward.c - the per-token reward of PPO-based RLHF: the reward model scores a whole
 * response once, and every token pays a penalty for drifting from the reference model,
 *   r_t = -β·(log π(x_t) - log π_ref(x_t))  (+ the score on the last token)
 * so that the sum over the response is score - β·KL. The log-ratio of the sampled token is
 * the simple estimate of the KL divergence: its expectation under π is KL(π ‖ π_ref), but a
 * single token's can be negative. A learner's exercise can replace rl_token_rewards. */
#include "rl.h"

void rl_token_rewards(float *rewards, float *kl, const float *logp, const float *ref_logp,
                      int T, float beta, float score, rl_reward_mode mode)
{
    for (int t = 0; t < T; t++) {
        float k = logp[t] - ref_logp[t];
        if (kl)
            kl[t] = k;
        rewards[t] = -beta * k;
        if (mode == RL_REWARD_SPREAD)
            rewards[t] += score / (float)T;
    }
    if (mode == RL_REWARD_END && T > 0)
        rewards[T - 1] += score;
}
