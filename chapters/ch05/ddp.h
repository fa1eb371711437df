/* ddp.h - chapter 5's data-parallel engine, our own DistributedDataParallel: the flat
 * gradient vector of any nn_params model cut into buckets in reverse parameter order (the
 * first one small), a non-blocking all-reduce launched the moment a bucket's last gradient is
 * written during backward, one wait before the step, then SUM / N. Chapter 10 trains the
 * language model with it. Also the small MLP that chapter 5's labs train. */
#ifndef CH05_DDP_H
#define CH05_DDP_H

#include "../../core/nn/nn.h"

/* One bucket: a view [off, off + n) of the flat gradient vector (no copy). Tensors
 * t_lo..t_hi (declaration indices) overlap it; it is ready when all of them are. */
typedef struct ddp_bucket {
    size_t off, n;
    int t_lo, t_hi;
    int pending;            /* overlapping tensors whose gradient is not written yet */
    int launched;           /* 1 once its all-reduce is issued */
    mlsys_request *req;
} ddp_bucket;

typedef struct ddp {
    mlsys_comm *c;          /* NULL: dry run (layout and launch rule only, no messages) */
    nn_params *p;
    size_t bucket_elems, first_elems;
    int nbuckets;
    ddp_bucket *b;          /* [nbuckets], b[0] covers the END of the flat vector */
    int *ready;             /* [p->count] 1 once grad_ready(t) was called this step */
    int overlap;            /* 1 (default): launch at grad_ready; 0: all at finish */
    int late;               /* buckets launched by finish (never completed during backward) */
    int launch_order[256];  /* bucket index of the k-th launch this step (first 256) */
    int nlaunched;
    double wait_s;          /* seconds spent in the last finish() waiting */
    int err;                /* first error of a launch during backward, reported by finish */
    int emit;               /* 1: memory records for the blocks view (ddp_show) */
} ddp;

/* ddp.c */
/* The bucket count for n floats, first bucket f floats, then b floats each:
 * 1 + ceil((n - f) / b) when n > f, else 1 (0 when n == 0). */
int ddp_bucket_count(size_t n, size_t f, size_t b);
/* Build the engine over p (allocated, with gradients). Sizes in bytes, rounded down to whole
 * floats (at least one). c may be NULL for a dry run. Returns 0, or MLSYS_ERR_ARG. */
int ddp_create(ddp **out, mlsys_comm *c, nn_params *p, size_t bucket_bytes,
               size_t first_bucket_bytes);
/* Rank 0's parameters to every rank (DDP's start-up broadcast). */
int ddp_broadcast_params(ddp *d);
/* Before a backward: every tensor not ready, nothing launched, the per-step counters (late,
 * launch_order) cleared. finish() already leaves the engine ready for the next backward;
 * call begin to start over after an error or to clear the counters. */
void ddp_begin(ddp *d);
/* The model's backward calls this once tensor t's gradient is completely written; every
 * bucket whose last tensor this was is all-reduced (non-blocking) at once, in bucket order. */
int ddp_grad_ready(ddp *d, int t);
/* Launch what is left, wait for every bucket, then divide the gradients by N. */
int ddp_finish(ddp *d);
void ddp_free(ddp *d);
/* Memory records for the blocks view (pool DDP_POOL of this rank: a block per bucket, each
 * bucket its owner) and, from then on, each bucket's mean gradient as it is launched (in
 * flight while its all-reduce runs) and after the average. Nothing when no one traces. */
#define DDP_POOL 0
void ddp_show(ddp *d);

/* ---- the labs' MLP: dims[0] -> dims[1] -> ... -> dims[nl], ReLU between, bias on ---- */
#define MLP_MAX_LAYERS 8
typedef struct mlp_shape {
    int nl;
    int dims[MLP_MAX_LAYERS + 1];
} mlp_shape;
/* Declare w1, b1, w2, b2, ... (tensor 2l = w_{l+1} [dims[l+1], dims[l]], 2l+1 = its bias). */
int mlp_declare(nn_params *p, const mlp_shape *s);
/* torch's default Linear init from one rng, tensor by tensor. */
void mlp_init(nn_params *p, const mlp_shape *s, uint64_t seed);
/* Activations for B rows: act[0] = input, act[l] = output of layer l (ReLU'd but the last). */
typedef struct mlp_acts {
    float *a[MLP_MAX_LAYERS + 1];
    float *d[2];            /* two [B, max dim] gradient buffers, used in turns */
    int B;
} mlp_acts;
void mlp_acts_init(mlp_acts *m, const mlp_shape *s, int B);
void mlp_acts_fini(mlp_acts *m, const mlp_shape *s);
/* One layer's forward: out[B, dims[l+1]] = in · wᵀ + b, ReLU unless it is the last. */
void mlp_layer_forward(const mlp_shape *s, int l, const float *w, const float *b,
                       const float *in, float *out, int B);
/* One layer's backward from dy (the gradient at its output, ReLU already applied):
 * dw += dyᵀ·in, db += Σ dy (weight gradients first), then hook(u, 2l+1) and hook(u, 2l),
 * then dx = dy·w and the previous layer's ReLU backward (skipped for l == 0). */
void mlp_layer_backward(const mlp_shape *s, int l, const float *w, float *dw, float *db,
                        const float *in, const float *dy, float *dx, int B,
                        int (*hook)(void *u, int t), void *u);
/* Forward and mean CE loss; dlogits go to m->d[0] for mlp_backward. */
float mlp_forward_loss(const mlp_shape *s, nn_params *p, mlp_acts *m, const float *x,
                       const int *y, int B);
/* Backward from m->d[0], gradients accumulated into p->grad, hook per tensor (reverse). */
void mlp_backward(const mlp_shape *s, nn_params *p, mlp_acts *m, int B,
                  int (*hook)(void *u, int t), void *u);
/* Whole model on x[B, dims[0]]: loss (mean CE) and the gradients accumulated into p->grad,
 * hook called per tensor in reverse order. */
float mlp_forward_backward(const mlp_shape *s, nn_params *p, mlp_acts *m, const float *x,
                           const int *y, int B, int (*hook)(void *u, int t), void *u);

#endif
