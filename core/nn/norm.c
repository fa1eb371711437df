/* norm.c - RMSNorm (Llama) and LayerNorm (GPT-2), each over the last dimension D of x[B,D].
 * Both rescale a row to unit size and then apply a learned per-feature gain g[D] (and for
 * LayerNorm a bias b[D]). The forward saves the per-row statistics (rstd, mean) that the
 * backward needs, so the backward never recomputes a reduction it can read. */
#include "nn.h"
#include <math.h>

/* RMSNorm: r = 1/sqrt(mean(x²) + eps), x̂ = x·r, y = x̂ ⊙ g. No mean is subtracted, unlike
 * LayerNorm: only the row's scale is normalised. The sum of squares is taken in double, so
 * the result does not depend on how the row's D elements happen to be grouped. Each row is
 * normalised on its own: training and inference (core/llm/infer.c) share it. */
void nn_rmsnorm_forward(float *y, float *rstd, const float *x, const float *g, int B, int D,
                        float eps)
{
    for (int b = 0; b < B; b++) {
        const float *xr = x + (size_t)b * D;
        float *yr = y + (size_t)b * D;
        double ss = 0.0;
        for (int i = 0; i < D; i++)
            ss += (double)xr[i] * xr[i];
        float r = (float)(1.0 / sqrt(ss / D + eps));
        for (int i = 0; i < D; i++)
            yr[i] = xr[i] * r * g[i];
        if (rstd)
            rstd[b] = r;
    }
}

/* Backward of RMSNorm. Write dx̂ = dy ⊙ g. Since r depends on every x_j,
 *   dr/dx_i = -r³ x_i / D,
 * so dx_i = r·dx̂_i + Σ_j dx̂_j x_j · (-r³ x_i / D) = r · (dx̂_i - x̂_i · mean_j(dx̂_j x̂_j)).
 * The gain sees dg_i += Σ_rows dy_i · x̂_i. */
void nn_rmsnorm_backward(float *dx, float *dg, const float *dy, const float *x, const float *g,
                         const float *rstd, int B, int D)
{
    for (int b = 0; b < B; b++) {
        const float *xr = x + (size_t)b * D;
        const float *dyr = dy + (size_t)b * D;
        float *dxr = dx + (size_t)b * D;
        float r = rstd[b];
        double dot = 0.0;                       /* Σ dx̂ ⊙ x̂ */
        for (int i = 0; i < D; i++)
            dot += (double)(dyr[i] * g[i]) * (xr[i] * r);
        float mdot = (float)(dot / D);
        for (int i = 0; i < D; i++) {
            float xhat = xr[i] * r;
            dg[i] += dyr[i] * xhat;
            dxr[i] = r * (dyr[i] * g[i] - xhat * mdot);
        }
    }
}

/* LayerNorm: μ = mean(x), σ² = mean((x - μ)²) (biased, as torch), r = 1/sqrt(σ² + eps),
 * x̂ = (x - μ)·r, y = x̂ ⊙ g + b. The variance is taken around μ in a second pass rather
 * than as mean(x²) - μ², which cancels catastrophically when |μ| ≫ σ. */
void nn_layernorm_forward(float *y, float *mean, float *rstd, const float *x, const float *g,
                          const float *b, int B, int D, float eps)
{
    for (int row = 0; row < B; row++) {
        const float *xr = x + (size_t)row * D;
        float *yr = y + (size_t)row * D;
        double s = 0.0;
        for (int i = 0; i < D; i++)
            s += xr[i];
        float mu = (float)(s / D);
        double v = 0.0;
        for (int i = 0; i < D; i++) {
            double d = (double)xr[i] - mu;
            v += d * d;
        }
        float r = (float)(1.0 / sqrt(v / D + eps));
        for (int i = 0; i < D; i++)
            yr[i] = (xr[i] - mu) * r * g[i] + (b ? b[i] : 0.0f);
        mean[row] = mu;
        rstd[row] = r;
    }
}

/* Backward of LayerNorm, with dx̂ = dy ⊙ g. Subtracting μ makes the row's gradient lose
 * its mean, and dividing by σ makes it lose its component along x̂:
 *   dx_i = r · (dx̂_i - mean_j(dx̂_j) - x̂_i · mean_j(dx̂_j x̂_j)).
 * dg += Σ_rows dy ⊙ x̂ and db += Σ_rows dy. */
void nn_layernorm_backward(float *dx, float *dg, float *db, const float *dy, const float *x,
                           const float *g, const float *mean, const float *rstd, int B, int D)
{
    for (int row = 0; row < B; row++) {
        const float *xr = x + (size_t)row * D;
        const float *dyr = dy + (size_t)row * D;
        float *dxr = dx + (size_t)row * D;
        float mu = mean[row], r = rstd[row];
        double sum = 0.0, dot = 0.0;
        for (int i = 0; i < D; i++) {
            float dxhat = dyr[i] * g[i];
            sum += dxhat;
            dot += (double)dxhat * ((xr[i] - mu) * r);
        }
        float msum = (float)(sum / D), mdot = (float)(dot / D);
        for (int i = 0; i < D; i++) {
            float xhat = (xr[i] - mu) * r;
            dg[i] += dyr[i] * xhat;
            if (db)
                db[i] += dyr[i];
            dxr[i] = r * (dyr[i] * g[i] - msum - xhat * mdot);
        }
    }
}
