/* ch06-tp-linear - the column- and row-parallel linear layer, forward and backward (api.h).
 *
 * The check draws x, W and dy from a seed (printed: `mlsys-lab check ch06-tp-linear --seed S`
 * reruns it), gives each of T = 1, 2, 4 ranks its shard, and compares what you return with
 * the serial layer y = x·W, dW = xᵀ·dy, dx = dy·Wᵀ computed in double on every rank
 * (tolerance 1e-4 relative), naming the rank, the array and the element that differ. It also
 * counts your all-reduces: the whole layer (both kinds, forward and backward) needs two.
 *
 *   mlsys-lab check ch06-tp-linear      mlsys-lab hint ch06-tp-linear */
#include "mlsys.h"
#include "api.h"
#include <string.h>

int col_forward(mlsys_comm *c, const float *x, const float *w_r, float *y_r, int B, int in,
                int out_r)
{
    (void)c; (void)x; (void)w_r; (void)in;
    /* TODO: y_r = x · w_r. Does this rank need anything from the others? */
    memset(y_r, 0, sizeof(float) * (size_t)B * out_r);
    return 0;
}

int col_backward(mlsys_comm *c, const float *x, const float *w_r, const float *dy_r,
                 float *dx, float *dw_r, int B, int in, int out_r)
{
    (void)c; (void)x; (void)w_r; (void)dy_r;
    /* TODO: dw_r = xᵀ · dy_r; dx = dy · Wᵀ, where this rank holds only some columns of W */
    memset(dw_r, 0, sizeof(float) * (size_t)in * out_r);
    memset(dx, 0, sizeof(float) * (size_t)B * in);
    return 0;
}

int row_forward(mlsys_comm *c, const float *x_r, const float *w_r, float *y, int B, int in_r,
                int out)
{
    (void)c; (void)x_r; (void)w_r; (void)in_r;
    /* TODO: y = x · W, where this rank holds only rows r·in_r .. of W and the matching
     * columns of x */
    memset(y, 0, sizeof(float) * (size_t)B * out);
    return 0;
}

int row_backward(mlsys_comm *c, const float *x_r, const float *w_r, const float *dy,
                 float *dx_r, float *dw_r, int B, int in_r, int out)
{
    (void)c; (void)x_r; (void)w_r; (void)dy; (void)out;
    /* TODO: dw_r = x_rᵀ · dy; dx_r = dy · w_rᵀ */
    memset(dw_r, 0, sizeof(float) * (size_t)in_r * out);
    memset(dx_r, 0, sizeof(float) * (size_t)B * in_r);
    return 0;
}
