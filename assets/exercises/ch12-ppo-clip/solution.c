/* ch12-ppo-clip - reference solution: the clipped surrogate, its derivative, the loss. */
#include "api.h"
#include <math.h>

double ppo_term(double ratio, double adv, double eps, double *d_dr)
{
    double c = ratio < 1.0 - eps ? 1.0 - eps : ratio > 1.0 + eps ? 1.0 + eps : ratio;
    double plain = ratio * adv, clipped = c * adv;
    if (plain <= clipped) {
        if (d_dr)
            *d_dr = adv;
        return plain;
    }
    if (d_dr)
        *d_dr = 0.0;
    return clipped;
}

double ppo_policy_loss(float *dlogp, const float *logp, const float *old_logp, const float *adv,
                       int n, float eps)
{
    if (n <= 0)
        return 0.0;
    double sum = 0.0;
    for (int i = 0; i < n; i++) {
        double r = exp((double)logp[i] - old_logp[i]), d;
        sum += ppo_term(r, adv[i], eps, &d);
        if (dlogp)
            dlogp[i] = (float)(-d * r / n);     /* dr/dlogp = r */
    }
    return -sum / n;
}
