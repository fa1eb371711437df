/* init.c - seeded weight initialisers. They draw from mlsys_rng, a counter-based generator:
 * the same seed gives the same weights on every rank, which is how data-parallel replicas
 * start identical without broadcasting anything. Scales follow torch's defaults. */
#include "nn.h"
#include <math.h>

/* U(lo, hi) */
void nn_init_uniform(float *w, size_t n, float lo, float hi, mlsys_rng *r)
{
    for (size_t i = 0; i < n; i++)
        w[i] = (float)(lo + (hi - lo) * mlsys_rng_uniform(r));
}

/* torch.nn.Linear's default, for weight and bias alike: U(-k, k) with k = 1/√fan_in, which
 * keeps the variance of each output near that of one input (Var U(-k,k) = k²/3). */
void nn_init_linear(float *w, size_t n, int fan_in, mlsys_rng *r)
{
    float k = fan_in > 0 ? 1.0f / sqrtf((float)fan_in) : 0.0f;
    nn_init_uniform(w, n, -k, k, r);
}

/* Xavier/Glorot: Var(w) = 2/(fan_in + fan_out), the compromise that keeps activations and
 * gradients alike in scale; for a uniform that means a = √(6/(fan_in + fan_out)). */
void nn_init_xavier_uniform(float *w, size_t n, int fan_in, int fan_out, mlsys_rng *r)
{
    float a = sqrtf(6.0f / (float)(fan_in + fan_out));
    nn_init_uniform(w, n, -a, a, r);
}

void nn_init_normal(float *w, size_t n, float mean, float std, mlsys_rng *r)
{
    for (size_t i = 0; i < n; i++)
        w[i] = (float)(mean + std * mlsys_rng_normal(r));
}

void nn_init_const(float *w, size_t n, float value)
{
    for (size_t i = 0; i < n; i++)
        w[i] = value;
}
