/* ch13-rm-loss - reference solution: softplus(-m), computed without overflow. */
#include "api.h"
#include <math.h>

double rm_pairwise_loss(const float *r_w, const float *r_l, int n, float *d_rw, float *d_rl)
{
    double sum = 0.0;
    for (int i = 0; i < n; i++) {
        double m = (double)r_w[i] - r_l[i];
        /* -log sigmoid(m) = log(1 + e^-m) = max(-m, 0) + log1p(e^-|m|) */
        sum += fmax(-m, 0.0) + log1p(exp(-fabs(m)));
        /* dL/dm = -sigmoid(-m) = -(1 - sigmoid(m)) */
        double s = m >= 0 ? exp(-m) / (1.0 + exp(-m)) : 1.0 / (1.0 + exp(m));
        if (d_rw)
            d_rw[i] = (float)(-s / n);
        if (d_rl)
            d_rl[i] = (float)(s / n);
    }
    return sum / n;
}
