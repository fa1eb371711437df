/* activations.c - elementwise nonlinearities and their derivatives. Each backward is the
 * chain rule for one element: dx = dy · f'(x). They run in place (y may be x, dx may be dy)
 * because an activation's input is usually not needed once its output exists, except where
 * the backward reads x itself (GELU, SiLU): then keep x. */
#include "nn.h"
#include <math.h>

/* ReLU: f(x) = max(x, 0), f'(x) = 1 for x > 0 and 0 otherwise (at 0 we pick 0, as torch).
 * Since y > 0 exactly where x > 0, the backward may be handed y instead of x. */
void nn_relu_forward(float *y, const float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

void nn_relu_backward(float *dx, const float *dy, const float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dx[i] = x[i] > 0.0f ? dy[i] : 0.0f;
}

/* GELU, the exact form: f(x) = x·Φ(x) with Φ the standard normal CDF,
 * Φ(x) = (1 + erf(x/√2)) / 2. Product rule: f'(x) = Φ(x) + x·φ(x), with φ the normal
 * density exp(-x²/2)/√(2π). (The tanh approximation is a different function; we do not
 * use it.) */
#define NN_INV_SQRT2 0.70710678118654752f
#define NN_INV_SQRT_2PI 0.39894228040143268f

void nn_gelu_forward(float *y, const float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        y[i] = 0.5f * x[i] * (1.0f + erff(x[i] * NN_INV_SQRT2));
}

void nn_gelu_backward(float *dx, const float *dy, const float *x, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        float cdf = 0.5f * (1.0f + erff(x[i] * NN_INV_SQRT2));
        float pdf = NN_INV_SQRT_2PI * expf(-0.5f * x[i] * x[i]);
        dx[i] = dy[i] * (cdf + x[i] * pdf);
    }
}

/* SiLU (swish), Llama's gate activation: f(x) = x·σ(x), σ(x) = 1/(1 + e^-x).
 * With σ' = σ(1 - σ): f'(x) = σ + x·σ(1 - σ) = σ·(1 + x(1 - σ)).
 * For very negative x, e^-x overflows to inf and σ becomes exactly 0: no NaN appears. */
static inline float sigmoidf(float x)
{
    return 1.0f / (1.0f + expf(-x));
}

void nn_silu_forward(float *y, const float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        y[i] = x[i] * sigmoidf(x[i]);
}

void nn_silu_backward(float *dx, const float *dy, const float *x, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        float s = sigmoidf(x[i]);
        dx[i] = dy[i] * s * (1.0f + x[i] * (1.0f - s));
    }
}
