/* loss.c - the losses that end a forward pass and start a backward one: softmax
 * cross-entropy (classification, language modelling; with a token mask and per-row weights
 * for RL), a masked mean (to reduce any per-token term) and mean squared error. Each returns
 * the scalar loss; its backward writes dL/d(input), scaled by dloss, the gradient that
 * arrives from above (1 for a plain step, 1/m when m micro-batches are accumulated). */
#include "nn.h"
#include <assert.h>
#include <math.h>

/* Cross-entropy of one row of logits l against target t:
 *   loss = -log softmax(l)_t = logsumexp(l) - l_t,
 *   logsumexp(l) = m + log Σ_c e^{l_c - m}    with m = max_c l_c.
 * With m subtracted every exponent is <= 0 and the sum lies in [1, C], so the log is
 * finite however large the logits are; the loss is (m - l_t) + log(sum), computed in double.
 * Returns the row's loss and leaves e^{l_c - m} in out[C] (which may alias l), the caller
 * then scales out by 1/sum. */
static double ce_row(float *out, const float *l, int t, int C, float *inv_sum)
{
    assert(t >= 0 && t < C);
    float m = l[0];
    for (int c = 1; c < C; c++)
        m = l[c] > m ? l[c] : m;
    float lt = l[t];                 /* read before out overwrites it when they alias */
    float sum = 0.0f;
    for (int c = 0; c < C; c++) {
        out[c] = expf(l[c] - m);
        sum += out[c];
    }
    *inv_sum = 1.0f / sum;
    return ((double)m - (double)lt) + log((double)sum);
}

/* probs[B,C] = softmax(logits); returns mean over rows of -log probs[r, targets[r]]. */
float nn_softmax_ce_forward(float *probs, const float *logits, const int *targets, int B, int C)
{
    double total = 0.0;
    for (int r = 0; r < B; r++) {
        float *pr = probs + (size_t)r * C;
        float inv;
        total += ce_row(pr, logits + (size_t)r * C, targets[r], C, &inv);
        for (int c = 0; c < C; c++)
            pr[c] *= inv;
    }
    return B > 0 ? (float)(total / B) : 0.0f;
}

/* d(loss_r)/d(l_c) = softmax(l)_c - [c == t]: the predicted distribution minus the one-hot
 * target. The mean over B rows divides every row's gradient by B. */
void nn_softmax_ce_backward(float *dlogits, const float *probs, const int *targets, int B,
                            int C, float dloss)
{
    float s = B > 0 ? dloss / (float)B : 0.0f;
    for (int r = 0; r < B; r++) {
        const float *pr = probs + (size_t)r * C;
        float *dr = dlogits + (size_t)r * C;
        for (int c = 0; c < C; c++)
            dr[c] = s * pr[c];
        dr[targets[r]] -= s;
    }
}

/* Forward and backward in one pass per row, with a mask and per-row weights: the
 * exponentials land in dlogits and are scaled by s_r/sum there (s_r = dloss·w_r/n, n the rows
 * the mask keeps); then s_r comes off the target's entry. A row the mask drops costs nothing
 * and gets a zero gradient; its target is not read. */
float nn_softmax_ce_masked(float *dlogits, const float *logits, const int *targets,
                           const unsigned char *mask, const float *weight, int B, int C,
                           float dloss)
{
    int n = 0;
    for (int r = 0; r < B; r++)
        n += !mask || mask[r];
    double total = 0.0;
    float s = n > 0 ? dloss / (float)n : 0.0f;
    for (int r = 0; r < B; r++) {
        float *dr = dlogits + (size_t)r * C;
        if (mask && !mask[r]) {
            for (int c = 0; c < C; c++)
                dr[c] = 0.0f;
            continue;
        }
        float inv, sr = weight ? s * weight[r] : s;
        double ce = ce_row(dr, logits + (size_t)r * C, targets[r], C, &inv);
        total += weight ? (double)weight[r] * ce : ce;
        float k = sr * inv;
        for (int c = 0; c < C; c++)
            dr[c] *= k;
        dr[targets[r]] -= sr;
    }
    return n > 0 ? (float)(total / n) : 0.0f;
}

float nn_softmax_ce(float *dlogits, const float *logits, const int *targets, int B, int C,
                    float dloss)
{
    return nn_softmax_ce_masked(dlogits, logits, targets, NULL, NULL, B, C, dloss);
}

/* The mean of the kept entries: Σ_i m_i x_i / Σ_i m_i (in double), 0 when none is kept. */
float nn_masked_mean(const float *x, const unsigned char *mask, size_t n)
{
    double total = 0.0;
    size_t kept = 0;
    for (size_t i = 0; i < n; i++)
        if (!mask || mask[i]) {
            total += x[i];
            kept++;
        }
    return kept ? (float)(total / (double)kept) : 0.0f;
}

/* d/dx_i of the masked mean = m_i / Σ m. */
void nn_masked_mean_backward(float *dx, const unsigned char *mask, size_t n, float dloss)
{
    size_t kept = 0;
    for (size_t i = 0; i < n; i++)
        kept += !mask || mask[i];
    float s = kept ? dloss / (float)kept : 0.0f;
    for (size_t i = 0; i < n; i++)
        dx[i] = !mask || mask[i] ? s : 0.0f;
}

/* MSE = (1/n) Σ (p_i - t_i)², accumulated in double so that large n loses nothing. */
float nn_mse_forward(const float *pred, const float *target, size_t n)
{
    double total = 0.0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)pred[i] - (double)target[i];
        total += d * d;
    }
    return n ? (float)(total / (double)n) : 0.0f;
}

/* d/dp_i of (1/n) Σ (p - t)² = 2 (p_i - t_i) / n. */
void nn_mse_backward(float *dpred, const float *pred, const float *target, size_t n,
                     float dloss)
{
    float s = n ? 2.0f * dloss / (float)n : 0.0f;
    for (size_t i = 0; i < n; i++)
        dpred[i] = s * (pred[i] - target[i]);
}
