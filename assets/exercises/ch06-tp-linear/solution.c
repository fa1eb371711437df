/* ch06-tp-linear - reference solution. Column-parallel: every rank has all of x, so its
 * columns of y need nothing from the others; in the backward each rank's dy_r·W_rᵀ is one
 * part of a sum over the output columns, so dx is one all-reduce (Megatron's f). Row-parallel:
 * each rank's x_r·W_r is one part of the sum over the input features, so y is one all-reduce
 * (Megatron's g); the backward needs nothing: dy is whole on every rank. */
#include "mlsys.h"
#include "api.h"
#include <string.h>

/* out[n, m] = a[n, k] · b[k, m] */
static void matmul(float *out, const float *a, const float *b, int n, int k, int m)
{
    for (int i = 0; i < n; i++)
        for (int j = 0; j < m; j++) {
            float s = 0.0f;
            for (int p = 0; p < k; p++)
                s += a[i * k + p] * b[p * m + j];
            out[i * m + j] = s;
        }
}

/* out[k, m] = a[n, k]ᵀ · b[n, m] */
static void matmul_tn(float *out, const float *a, const float *b, int n, int k, int m)
{
    memset(out, 0, sizeof(float) * (size_t)k * m);
    for (int i = 0; i < n; i++)
        for (int p = 0; p < k; p++)
            for (int j = 0; j < m; j++)
                out[p * m + j] += a[i * k + p] * b[i * m + j];
}

/* out[n, k] = a[n, m] · b[k, m]ᵀ */
static void matmul_nt(float *out, const float *a, const float *b, int n, int m, int k)
{
    for (int i = 0; i < n; i++)
        for (int p = 0; p < k; p++) {
            float s = 0.0f;
            for (int j = 0; j < m; j++)
                s += a[i * m + j] * b[p * m + j];
            out[i * k + p] = s;
        }
}

int col_forward(mlsys_comm *c, const float *x, const float *w_r, float *y_r, int B, int in,
                int out_r)
{
    (void)c;
    matmul(y_r, x, w_r, B, in, out_r);
    return 0;
}

int col_backward(mlsys_comm *c, const float *x, const float *w_r, const float *dy_r,
                 float *dx, float *dw_r, int B, int in, int out_r)
{
    matmul_tn(dw_r, x, dy_r, B, in, out_r);
    matmul_nt(dx, dy_r, w_r, B, out_r, in);         /* a partial sum over this rank's columns */
    return mlsys_allreduce(c, dx, dx, (size_t)B * in, MLSYS_F32, MLSYS_SUM);
}

int row_forward(mlsys_comm *c, const float *x_r, const float *w_r, float *y, int B, int in_r,
                int out)
{
    matmul(y, x_r, w_r, B, in_r, out);              /* a partial sum over this rank's rows */
    return mlsys_allreduce(c, y, y, (size_t)B * out, MLSYS_F32, MLSYS_SUM);
}

int row_backward(mlsys_comm *c, const float *x_r, const float *w_r, const float *dy,
                 float *dx_r, float *dw_r, int B, int in_r, int out)
{
    (void)c;
    matmul_tn(dw_r, x_r, dy, B, in_r, out);
    matmul_nt(dx_r, dy, w_r, B, out, in_r);
    return 0;
}
