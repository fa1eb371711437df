/* swiglu.c - the gate of Llama's feed-forward block: y = silu(a) ⊙ b, where a = x·W1ᵀ is the
 * gate and b = x·W3ᵀ the "up" projection (the block then ends with y·W2ᵀ). The gate decides,
 * feature by feature, how much of the up projection passes; silu(a) = a·σ(a). */
#include "transformer.h"
#include <math.h>

void nn_swiglu_forward(float *y, const float *a, const float *b, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        float sig = 1.0f / (1.0f + expf(-a[i]));
        y[i] = a[i] * sig * b[i];
    }
}

/* With s = σ(a): d silu(a)/da = s + a·s·(1 - s) = s·(1 + a·(1 - s)), so
 *   da = dy ⊙ b ⊙ s(1 + a(1 - s))      db = dy ⊙ silu(a)
 * da and db are written; they may alias dy (each element is read before it is written)
 * but not each other. */
void nn_swiglu_backward(float *da, float *db, const float *dy, const float *a, const float *b,
                        size_t n)
{
    for (size_t i = 0; i < n; i++) {
        float sig = 1.0f / (1.0f + expf(-a[i]));
        float g = dy[i], ai = a[i], bi = b[i];
        db[i] = g * ai * sig;
        da[i] = g * bi * sig * (1.0f + ai * (1.0f - sig));
    }
}
