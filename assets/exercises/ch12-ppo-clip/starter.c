/* ch12-ppo-clip - PPO's clipped objective and its gradient (see api.h).
 *
 * PPO takes several gradient steps on one batch of samples. The clip keeps each step small:
 * for A > 0 nothing is gained by raising the ratio past 1 + eps, for A < 0 nothing by lowering
 * it below 1 - eps, and there the gradient is exactly 0.
 *
 * The check (one rank): the curriculum's table at eps = 0.2 - (r, A) = (1.5, +1) -> 1.2
 * clipped, (0.7, +1) -> 0.7, (0.7, -1) -> -0.8 clipped, (1.5, -1) -> -1.5, (1.1, +-1) ->
 * +-1.1, with their derivatives, and the edges r = 1 +- eps; then 2000 seeded (r, A, eps)
 * against core/rl's rl_ppo_term; then 12 seeded batches of 1..256 samples against
 * rl_ppo_policy_loss (the loss and dlogp per sample within 1e-5 relative) and your own loss's
 * central finite differences against your dlogp. Failures name the case and the sample.
 *
 *   mlsys-lab check ch12-ppo-clip      mlsys-lab hint ch12-ppo-clip */
#include "api.h"
#include <math.h>

double ppo_term(double ratio, double adv, double eps, double *d_dr)
{
    (void)eps;
    /* TODO: clip the ratio to [1 - eps, 1 + eps], take the smaller of the two terms, and
     * say which one it was through *d_dr */
    if (d_dr)
        *d_dr = adv;
    return ratio * adv;
}

double ppo_policy_loss(float *dlogp, const float *logp, const float *old_logp, const float *adv,
                       int n, float eps)
{
    (void)dlogp;
    (void)logp;
    (void)old_logp;
    (void)adv;
    (void)eps;
    /* TODO: r_i = exp(logp_i - old_logp_i); L = -mean of ppo_term(r_i, A_i); and by the
     * chain rule dL/dlogp_i = -(1/n) * dterm/dr * dr/dlogp_i */
    return n * 0.0;
}
