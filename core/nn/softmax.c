/* softmax.c - row-wise softmax, the normaliser inside attention. softmax(x)_j =
 * e^{x_j} / Σ_k e^{x_k}; subtracting the row maximum first leaves the result unchanged
 * (the factor e^{-max} cancels) but keeps every exponent <= 0, so nothing overflows.
 * The cross-entropy loss fuses its own softmax (loss.c). */
#include "nn.h"
#include <math.h>

/* y[B,C] = softmax(x[B,C]) per row; y may alias x. */
void nn_softmax_forward(float *y, const float *x, int B, int C)
{
    for (int r = 0; r < B; r++) {
        const float *xr = x + (size_t)r * C;
        float *yr = y + (size_t)r * C;
        float max = -INFINITY;
        for (int c = 0; c < C; c++)
            max = xr[c] > max ? xr[c] : max;
        float sum = 0.0f;
        for (int c = 0; c < C; c++) {
            yr[c] = expf(xr[c] - max);
            sum += yr[c];
        }
        float inv = 1.0f / sum;
        for (int c = 0; c < C; c++)
            yr[c] *= inv;
    }
}

/* The Jacobian of a softmax row is dy_j/dx_i = y_j (δ_ij - y_i), so
 *   dx_i = Σ_j dy_j · y_j (δ_ij - y_i) = y_i · (dy_i - Σ_j dy_j y_j).
 * One dot product per row, then one pass: no C×C matrix is ever formed. */
void nn_softmax_backward(float *dx, const float *dy, const float *y, int B, int C)
{
    for (int r = 0; r < B; r++) {
        const float *dyr = dy + (size_t)r * C;
        const float *yr = y + (size_t)r * C;
        float *dxr = dx + (size_t)r * C;
        float dot = 0.0f;
        for (int c = 0; c < C; c++)
            dot += dyr[c] * yr[c];
        for (int c = 0; c < C; c++)
            dxr[c] = yr[c] * (dyr[c] - dot);
    }
}
