/* ppo_loss.c - the three terms of PPO's loss and their gradients, written out so that each
 * can be checked by finite differences (tests/unit/test_rl.c) and the clipped objective
 * replaced by a learner's (rl_ppo_policy_loss is the seam):
 *   loss = policy loss  +  vf_coef · value loss  -  ent_coef · entropy
 * The policy loss is PPO's clipped surrogate, the value loss a squared error to the GAE
 * returns, and the entropy bonus keeps the policy from turning deterministic too early.
 * The log-softmax of the categorical policy is core/nn's (logprob.c). */
#include "rl.h"
#include <math.h>

/* min(r·A, clip(r)·A). For A > 0 the clipped term is the smaller once r > 1+ε: raising the
 * probability further earns nothing (gradient 0). For A < 0 it is the smaller once r < 1-ε:
 * lowering it further earns nothing. Inside [1-ε, 1+ε] both terms are r·A. */
double rl_ppo_term(double ratio, double adv, double eps, double *d_dr)
{
    double clipped = ratio < 1.0 - eps ? 1.0 - eps : ratio > 1.0 + eps ? 1.0 + eps : ratio;
    double unclipped_term = ratio * adv, clipped_term = clipped * adv;
    if (unclipped_term <= clipped_term) {
        if (d_dr)
            *d_dr = adv;
        return unclipped_term;
    }
    if (d_dr)
        *d_dr = 0.0;
    return clipped_term;
}

/* L = -(1/n) Σ term(r_i, A_i). With r = exp(logp - old): ∂r/∂logp = r, so
 * ∂L/∂logp_i = -(1/n)·∂term/∂r·r_i. */
double rl_ppo_policy_loss(float *dlogp, const float *logp, const float *old_logp,
                          const float *adv, int n, float eps, double *clipfrac,
                          double *approx_kl)
{
    double sum = 0.0, kl = 0.0;
    int clipped = 0;
    for (int i = 0; i < n; i++) {
        double logratio = (double)logp[i] - old_logp[i];
        double r = exp(logratio), d_dr;
        sum += rl_ppo_term(r, adv[i], eps, &d_dr);
        if (dlogp)
            dlogp[i] = (float)(-d_dr * r / n);
        clipped += fabs(r - 1.0) > eps;
        kl += (r - 1.0) - logratio;
    }
    if (clipfrac)
        *clipfrac = n ? (double)clipped / n : 0.0;
    if (approx_kl)
        *approx_kl = n ? kl / n : 0.0;
    return n ? -sum / n : 0.0;
}

/* ½(v - R)², or ½·max((v - R)², (v_clipped - R)²) with v_clipped = v_old + clip(v - v_old).
 * The gradient follows whichever square is larger; through v_clipped it is 0 once the clip
 * holds (v moved more than clip from v_old). */
double rl_value_loss(float *dv, const float *v, const float *v_old, const float *ret, int n,
                     float clip)
{
    double sum = 0.0;
    for (int i = 0; i < n; i++) {
        double err = (double)v[i] - ret[i], g = err;
        double sq = err * err;
        if (clip > 0.0f) {
            double moved = (double)v[i] - v_old[i];
            double held = moved < -clip ? -clip : moved > clip ? clip : moved;
            double err_c = (double)v_old[i] + held - ret[i];
            if (err_c * err_c > sq) {
                sq = err_c * err_c;
                g = (held == moved) ? err_c : 0.0;
            }
        }
        sum += 0.5 * sq;
        if (dv)
            dv[i] = (float)(g / n);
    }
    return n ? sum / n : 0.0;
}

void rl_categorical_forward(float *logp_all, float *logp, float *entropy,
                            const float *logits, const int *actions, int n, int A)
{
    nn_log_softmax_forward(logp_all, logits, n, A);
    for (int i = 0; i < n; i++) {
        const float *lp = logp_all + (size_t)i * A;
        if (logp && actions)
            logp[i] = lp[actions[i]];
        if (entropy) {
            double h = 0.0;
            for (int a = 0; a < A; a++)
                h -= exp((double)lp[a]) * lp[a];
            entropy[i] = (float)h;
        }
    }
}

/* Through the softmax p = softmax(z):
 *   ∂ log p_a / ∂z_j = [j = a] - p_j
 *   ∂H / ∂z_j = -p_j·(log p_j + H)        (H = -Σ p log p)
 * and the two incoming gradients add. */
void rl_categorical_backward(float *dlogits, const float *dlogp, const float *dent,
                             const float *logp_all, const float *entropy, const int *actions,
                             int n, int A)
{
    for (int i = 0; i < n; i++) {
        const float *lp = logp_all + (size_t)i * A;
        float *d = dlogits + (size_t)i * A;
        double gl = dlogp ? dlogp[i] : 0.0, ge = dent ? dent[i] : 0.0;
        double h = entropy ? entropy[i] : 0.0;
        for (int j = 0; j < A; j++) {
            double p = exp((double)lp[j]);
            double g = gl * (((actions && actions[i] == j) ? 1.0 : 0.0) - p);
            g += ge * (-p * (lp[j] + h));
            d[j] = (float)g;
        }
    }
}
