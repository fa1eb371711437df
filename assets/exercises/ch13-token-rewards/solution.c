/* ch13-token-rewards - reference solution. */
#include "api.h"

void token_rewards(float *rewards, float *kl, const float *logp, const float *ref_logp, int T,
                   float beta, float score, int spread)
{
    for (int t = 0; t < T; t++) {
        float k = logp[t] - ref_logp[t];
        if (kl)
            kl[t] = k;
        rewards[t] = -beta * k;
        if (spread)
            rewards[t] += score / (float)T;
    }
    if (!spread && T > 0)
        rewards[T - 1] += score;
}

float kl_controller(float beta, float kl, float target)
{
    double e = (kl - target) / target;
    e = e < -0.2 ? -0.2 : e > 0.2 ? 0.2 : e;
    return (float)(beta * (1.0 + 0.1 * e));
}
