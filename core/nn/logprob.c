/* logprob.c - what reinforcement learning asks of a policy's logits: log-softmax, the
 * log-probability of the tokens (actions) that were taken, and estimators of the KL divergence
 * between two policies from those log-probabilities alone (Schulman, "Approximating KL
 * Divergence", 2020). Every per-token term takes a mask: a position the mask drops (a prompt
 * token, padding) gives 0 and receives no gradient, and its token is never read. */
#include "nn.h"
#include <math.h>

/* log Σ_c e^{x_c}, computed as m + log Σ_c e^{x_c - m} with m the row's maximum (every
 * exponent <= 0, the sum in [1, C]: finite for any finite logits), in double. */
static double logsumexp(const float *x, int C)
{
    float m = x[0];
    for (int c = 1; c < C; c++)
        m = x[c] > m ? x[c] : m;
    double s = 0.0;
    for (int c = 0; c < C; c++)
        s += exp((double)x[c] - m);
    return (double)m + log(s);
}

/* log softmax(x)_c = x_c - logsumexp(x). */
void nn_log_softmax_forward(float *y, const float *x, int B, int C)
{
    for (int r = 0; r < B; r++) {
        const float *xr = x + (size_t)r * C;
        float *yr = y + (size_t)r * C;
        double lse = logsumexp(xr, C);
        for (int c = 0; c < C; c++)
            yr[c] = (float)((double)xr[c] - lse);
    }
}

/* ∂y_j/∂x_c = δ_jc - softmax_c, so dx_c = dy_c - softmax_c · Σ_j dy_j, with
 * softmax_c = e^{y_c} read back from the forward's output. */
void nn_log_softmax_backward(float *dx, const float *dy, const float *y, int B, int C)
{
    for (int r = 0; r < B; r++) {
        const float *dyr = dy + (size_t)r * C, *yr = y + (size_t)r * C;
        float *dxr = dx + (size_t)r * C;
        double sum = 0.0;
        for (int c = 0; c < C; c++)
            sum += dyr[c];
        for (int c = 0; c < C; c++)
            dxr[c] = (float)(dyr[c] - exp((double)yr[c]) * sum);
    }
}

/* lp_r = log softmax(logits_r)[tokens_r] = logits_r[t] - logsumexp(logits_r). */
void nn_logprob_forward(float *lp, const float *logits, const int *tokens,
                        const unsigned char *mask, int B, int C)
{
    for (int r = 0; r < B; r++) {
        if (mask && !mask[r]) {
            lp[r] = 0.0f;
            continue;
        }
        const float *xr = logits + (size_t)r * C;
        lp[r] = (float)((double)xr[tokens[r]] - logsumexp(xr, C));
    }
}

/* ∂lp_r/∂logits_r[c] = [c = t] - softmax_c: the one-hot of the taken token minus the policy
 * (the score function of REINFORCE). Scaled by the gradient arriving at lp_r. */
void nn_logprob_backward(float *dlogits, const float *dlp, const float *logits,
                         const int *tokens, const unsigned char *mask, int B, int C)
{
    for (int r = 0; r < B; r++) {
        const float *xr = logits + (size_t)r * C;
        float *dr = dlogits + (size_t)r * C;
        if (mask && !mask[r]) {
            for (int c = 0; c < C; c++)
                dr[c] = 0.0f;
            continue;
        }
        double lse = logsumexp(xr, C), g = dlp[r];
        int t = tokens[r];
        for (int c = 0; c < C; c++)      /* reads xr[c] before writing dr[c]: may alias */
            dr[c] = (float)(-g * exp((double)xr[c] - lse));
        dr[t] += (float)g;
    }
}

/* With d = lp - lq for a token drawn from p (p the policy that sampled, q the other, e.g.
 * the reference model), r = q/p = e^{-d}, each estimates KL(p ‖ q) = E_p[log p/q]:
 *   k1 = d                     unbiased, high variance, negative on some tokens
 *   k2 = d²/2                  biased (low for close policies), always >= 0
 *   k3 = (r - 1) - log r = e^{-d} - 1 + d     unbiased and always >= 0
 * k3 is evaluated as expm1(-d) + d so that nothing cancels when p and q are close. */
static double kl_term(double d, nn_kl_kind k)
{
    switch (k) {
    case NN_KL_K1:
        return d;
    case NN_KL_K2:
        return 0.5 * d * d;
    default:
        return expm1(-d) + d;
    }
}

/* ∂k/∂d: 1, d, 1 - e^{-d}; and ∂d/∂lp = 1, ∂d/∂lq = -1. */
static double kl_slope(double d, nn_kl_kind k)
{
    switch (k) {
    case NN_KL_K1:
        return 1.0;
    case NN_KL_K2:
        return d;
    default:
        return -expm1(-d);
    }
}

void nn_kl_forward(float *kl, const float *lp, const float *lq, const unsigned char *mask,
                   size_t n, nn_kl_kind k)
{
    for (size_t i = 0; i < n; i++)
        kl[i] = mask && !mask[i] ? 0.0f : (float)kl_term((double)lp[i] - lq[i], k);
}

void nn_kl_backward(float *dlp, float *dlq, const float *dkl, const float *lp, const float *lq,
                    const unsigned char *mask, size_t n, nn_kl_kind k)
{
    for (size_t i = 0; i < n; i++) {
        double g = mask && !mask[i] ? 0.0 : dkl[i] * kl_slope((double)lp[i] - lq[i], k);
        if (dlp)
            dlp[i] = (float)g;
        if (dlq)
            dlq[i] = (float)-g;
    }
}

const char *nn_kl_name(nn_kl_kind k)
{
    return k == NN_KL_K1 ? "k1" : k == NN_KL_K2 ? "k2" : k == NN_KL_K3 ? "k3" : "?";
}
