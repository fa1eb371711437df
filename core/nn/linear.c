/* linear.c - the fully connected layer, in torch's layout: the weight is [Out,In] (one row per
 * output feature), y = x·Wᵀ + b. Forward is one GEMM; backward is two GEMMs (input gradient
 * and weight gradient) and a column sum (bias gradient). Tensor and pipeline parallel code
 * call these on their own slices of W, so nothing here allocates. */
#include "nn.h"

/* y[B,Out] = x[B,In] · w[Out,In]ᵀ + b[Out]
 * The bias is broadcast into y first and the GEMM then adds x·Wᵀ on top (beta = 1), so the
 * bias costs one pass over y and no temporary. */
void nn_linear_forward(float *y, const float *x, const float *w, const float *b,
                       int B, int In, int Out)
{
    if (b) {
        for (int r = 0; r < B; r++) {
            float *yr = y + (size_t)r * Out;
            for (int o = 0; o < Out; o++)
                yr[o] = b[o];
        }
    }
    nn_gemm(0, 1, B, Out, In, 1.0f, x, In, w, In, b ? 1.0f : 0.0f, y, Out);
}

/* With y = x·Wᵀ + b and dy = dL/dy:
 *   dL/dx = dy · W        [B,Out]·[Out,In] = [B,In]
 *   dL/dW = dyᵀ · x       [Out,B]·[B,In] = [Out,In]   (summed over the batch by the GEMM itself)
 *   dL/db = Σ_rows dy     [Out]
 * Parameter gradients accumulate (beta = 1), so micro-batches can add up before a step. */
void nn_linear_backward(float *dx, float *dw, float *db, const float *dy, const float *x,
                        const float *w, int B, int In, int Out)
{
    if (dx)
        nn_gemm(0, 0, B, In, Out, 1.0f, dy, Out, w, In, 0.0f, dx, In);
    nn_gemm(1, 0, Out, In, B, 1.0f, dy, Out, x, In, 1.0f, dw, In);
    if (db) {
        for (int r = 0; r < B; r++) {
            const float *dyr = dy + (size_t)r * Out;
            for (int o = 0; o < Out; o++)
                db[o] += dyr[o];
        }
    }
}

/* The scalar head: a linear layer with one output, reading a hidden state [C] per row and
 * giving one number (a value for PPO's critic, a reward for a reward model). */
void nn_scalar_head_forward(float *v, const float *h, const float *w, const float *b, int N,
                            int C)
{
    nn_linear_forward(v, h, w, b, N, C, 1);
}

void nn_scalar_head_backward(float *dh, float *dw, float *db, const float *dv, const float *h,
                             const float *w, int N, int C)
{
    nn_linear_backward(dh, dw, db, dv, h, w, N, C, 1);
}
