/* api.h - ch06-tp-linear: the column- and row-parallel linear layer, forward and backward,
 * as the check calls them. Weights are [in, out], row-major, used as y = x·W (so a
 * column-parallel layer splits W's columns). T = mlsys_size(c) ranks, r = mlsys_rank(c). */
#ifndef EX_API_H
#define EX_API_H
#include "mlsys.h"

/* ---- column-parallel: rank r holds W_r [in, out_r], columns r·out_r .. of W [in, T·out_r] ----
 * x [B, in] is the whole input, the same on every rank. */
/* y_r [B, out_r] = x·W_r: this rank's columns of y = x·W. */
int col_forward(mlsys_comm *c, const float *x, const float *w_r, float *y_r, int B, int in,
                int out_r);
/* Given dy_r [B, out_r] (this rank's columns of dy): dw_r [in, out_r] = xᵀ·dy_r, and
 * dx [B, in] = dy·Wᵀ, the WHOLE input gradient, the same on every rank. */
int col_backward(mlsys_comm *c, const float *x, const float *w_r, const float *dy_r,
                 float *dx, float *dw_r, int B, int in, int out_r);

/* ---- row-parallel: rank r holds W_r [in_r, out], rows r·in_r .. of W [T·in_r, out] ----
 * x_r [B, in_r] is this rank's columns of the input x [B, T·in_r]. */
/* y [B, out] = x·W, the WHOLE output, the same on every rank. */
int row_forward(mlsys_comm *c, const float *x_r, const float *w_r, float *y, int B, int in_r,
                int out);
/* Given dy [B, out] (the whole gradient, the same on every rank): dw_r [in_r, out] =
 * x_rᵀ·dy and dx_r [B, in_r] = dy·W_rᵀ, this rank's columns of dx. */
int row_backward(mlsys_comm *c, const float *x_r, const float *w_r, const float *dy,
                 float *dx_r, float *dw_r, int B, int in_r, int out);

/* Each returns 0, or the runtime's error code. */
#endif
