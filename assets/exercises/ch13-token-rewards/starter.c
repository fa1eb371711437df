/* ch13-token-rewards - per-token rewards with the KL penalty, and an adaptive beta (api.h).
 *
 * The reward model scores a whole response once; every token pays -beta * (log pi - log
 * pi_ref) for drifting from the reference model, so the response earns score - beta * KL.
 *
 * The check (one rank): ch13/reward-calculator's 8-token response (beta 0.02, score 0.5 ->
 * rewards +0.0040 ... +0.5060, sum +0.5040); then 30 seeded responses of 1..200 tokens,
 * beta 0..10, both modes, against core/rl's rl_token_rewards within 1e-6 (and beta = 0 must
 * give exactly the score); then 500 seeded (beta, kl, target) against the controller's
 * formula, beta moving up when kl > target and down when kl < target. Failures name the
 * response and the token. The seed is printed.
 *
 *   mlsys-lab check ch13-token-rewards      mlsys-lab hint ch13-token-rewards */
#include "api.h"

void token_rewards(float *rewards, float *kl, const float *logp, const float *ref_logp, int T,
                   float beta, float score, int spread)
{
    (void)kl;
    (void)logp;
    (void)ref_logp;
    (void)beta;
    (void)spread;
    /* TODO: the KL of each token, its penalty, and the score where the mode puts it */
    for (int t = 0; t < T; t++)
        rewards[t] = 0.0f;
    if (T > 0)
        rewards[T - 1] = score;
}

float kl_controller(float beta, float kl, float target)
{
    (void)kl;
    (void)target;
    /* TODO: the proportional error (kl - target) / target, clipped to [-0.2, 0.2] */
    return beta;
}
