/* gae.c - generalized advantage estimation (Schulman et al. 2016), the way PPO and RLHF turn
 * rewards and a critic's values into "how much better than expected was this action".
 * A learner's exercise can replace rl_gae: its whole contract is in rl.h.
 *
 * The one-step TD error δ_t = r_t + γV(s_{t+1}) - V(s_t) says how much better step t went
 * than the critic expected. GAE averages the k-step estimates with weights (γλ)^k:
 *   A_t = δ_t + (γλ)·δ_{t+1} + (γλ)²·δ_{t+2} + ...
 * which is cheapest computed backwards: A_t = δ_t + γλ·A_{t+1}, one pass from the end.
 * λ = 0 keeps only δ_t (low variance, biased by the critic); λ = 1 sums every reward to the
 * end, A_t = G_t - V(s_t) (unbiased, noisy). Where an episode ends at step t, nothing after
 * it belongs to it: V(s_{t+1}) is replaced by 0 and the backward sum restarts. */
#include "rl.h"

void rl_gae(float *adv, const float *rewards, const float *values, const uint8_t *done,
            float last_value, int T, float gamma, float lambda)
{
    double next_adv = 0.0, next_value = last_value;
    for (int t = T - 1; t >= 0; t--) {
        double keep = (done && done[t]) ? 0.0 : 1.0;   /* 0: the episode ended at t */
        double delta = rewards[t] + gamma * next_value * keep - values[t];
        next_adv = delta + (double)gamma * lambda * keep * next_adv;
        adv[t] = (float)next_adv;
        next_value = values[t];
    }
}

/* G_t = r_t + γ·G_{t+1}: what λ = 1 estimates, A_t = G_t - V_t; REINFORCE weights the
 * log-probabilities by it directly. */
void rl_discounted_returns(float *ret, const float *rewards, const uint8_t *done,
                           float last_value, int T, float gamma)
{
    double g = last_value;
    for (int t = T - 1; t >= 0; t--) {
        if (done && done[t])
            g = 0.0;
        g = rewards[t] + gamma * g;
        ret[t] = (float)g;
    }
}
