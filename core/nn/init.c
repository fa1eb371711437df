/* init.c - seeded weight initialisers. They draw from mlsys_rng, a counter-based generator:
 * the same seed gives the same weights on every rank, which is how data-parallel replicas
 * start identical without broadcasting anything. Scales follow torch's defaults. */
#include "nn.h"
#include <math.h>
#include <stdlib.h>

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

/* Orthogonal initialisation (Saxe et al.; CleanRL's PPO starts from it). Draw a Gaussian
 * matrix A of m = max(rows, cols) rows and k = min(rows, cols) columns, and orthonormalise
 * its columns by modified Gram-Schmidt: column j loses its components along the columns
 * already done, then is divided by its length. That is the Q of A = QR with R's diagonal
 * positive, the same Q torch gets from a Householder QR after fixing the signs, and it is
 * uniformly distributed over matrices with orthonormal columns. Tall weights take Q,
 * wide ones Qᵀ; both are scaled by gain. Worked in double: k passes of m-vectors. */
void nn_init_orthogonal(float *w, int rows, int cols, float gain, mlsys_rng *r)
{
    int m = rows > cols ? rows : cols, k = rows > cols ? cols : rows;
    if (k <= 0)
        return;
    double *q = mlsys_xmalloc((size_t)m * k * sizeof *q);     /* [m,k], column j at q[i*k+j] */
    for (size_t i = 0; i < (size_t)m * k; i++)
        q[i] = mlsys_rng_normal(r);
    for (int j = 0; j < k; j++) {
        for (int p = 0; p < j; p++) {
            double dot = 0.0;
            for (int i = 0; i < m; i++)
                dot += q[(size_t)i * k + p] * q[(size_t)i * k + j];
            for (int i = 0; i < m; i++)
                q[(size_t)i * k + j] -= dot * q[(size_t)i * k + p];
        }
        double norm = 0.0;
        for (int i = 0; i < m; i++)
            norm += q[(size_t)i * k + j] * q[(size_t)i * k + j];
        norm = sqrt(norm);
        for (int i = 0; i < m; i++)
            q[(size_t)i * k + j] /= norm;
    }
    for (int i = 0; i < rows; i++)
        for (int j = 0; j < cols; j++)
            w[(size_t)i * cols + j] = (float)(gain * (rows >= cols ? q[(size_t)i * k + j]
                                                                     : q[(size_t)j * k + i]));
    free(q);
}
