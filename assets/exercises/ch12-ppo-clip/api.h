/* api.h - ch12-ppo-clip: PPO's clipped objective and its gradient, the functions the learner
 * writes, as the check calls them. Same contract as core/rl's rl_ppo_term and the seam
 * rl_ppo_policy_loss (rl.h), without the diagnostics. */
#ifndef EX_API_H
#define EX_API_H

/* One sample's clipped surrogate objective (to be maximised) for ratio r and advantage A:
 *   min(r * A, clip(r, 1 - eps, 1 + eps) * A)
 * *d_dr (may be NULL) = its derivative in r: A where the unclipped term r * A is the smaller
 * or the two tie (inside [1 - eps, 1 + eps], and exactly at its edges), 0 where the clipped
 * term holds it. */
double ppo_term(double ratio, double adv, double eps, double *d_dr);

/* The clipped policy loss over n samples, to be minimised:
 *   L = -(1/n) * sum_i min(r_i * A_i, clip(r_i, 1 - eps, 1 + eps) * A_i)
 * with r_i = exp(logp_i - old_logp_i). Writes dlogp[i] = dL/dlogp_i (dlogp may be NULL).
 * Returns L (0 when n is 0). */
double ppo_policy_loss(float *dlogp, const float *logp, const float *old_logp, const float *adv,
                       int n, float eps);

#endif
