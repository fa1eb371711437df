/* train.h - the engines of data-parallel training, shared by chapter 5's labs, the
 * language model's trainer (core/llm/trainer.c) and the chapters after: our own
 * DistributedDataParallel (ddp.c: the flat gradient vector of any nn_params model cut into
 * buckets in reverse parameter order, the first one small, a non-blocking all-reduce launched
 * the moment a bucket's last gradient is written during backward, one wait before the step,
 * then SUM / N), ZeRO stages 1-3 (zero.c) and the small MLP the labs train (mlp.c).
 * Table of contents: prototypes sit under the file that has them. */
#ifndef MLSYS_TRAIN_H
#define MLSYS_TRAIN_H

#include "../nn/nn.h"

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
    /* Called with bucket k when its all-reduce is launched (the local gradients) and again
     * after finish() averaged it: a lab draws the buckets from here. NULL: nothing. */
    void (*on_bucket)(void *arg, const struct ddp *d, int k);
    void *on_bucket_arg;
} ddp;

/* ---- ddp.c ---- */
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

/* ---- mlp.c: the labs' MLP: dims[0] -> dims[1] -> ... -> dims[nl], ReLU between, bias on ---- */
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

/* ---- zero.c: ZeRO for the labs' MLP ----
 * Stage 1 shards the optimizer state, stage 2 also the gradients (reduce_scatter), stage 3
 * also the parameters (all_gather before each layer's forward and backward, freed after).
 * Each tensor is padded to a multiple of N and cut into N equal pieces (nn_shard_range), as
 * FSDP and DeepSpeed do, so a layer can be gathered alone; a rank's shard is its piece of
 * every tensor. */
/* Bytes a rank holds, counted where they are allocated. */
typedef struct zero_mem {
    size_t params, grads, optim;   /* kept for the whole run */
    size_t temp_now, temp_peak;    /* gathered layers and per-layer gradients, freed after use */
} zero_mem;

typedef struct zero_optim {
    int adamw;              /* 0: SGD (no state), 1: AdamW (m and v: 8 bytes per parameter) */
    float lr;
} zero_optim;

typedef struct zero {
    mlsys_comm *c;
    int stage, N, r;
    mlp_shape s;
    int nt;                 /* tensors: w1, b1, w2, b2, ... */
    size_t numel[2 * MLP_MAX_LAYERS], pad[2 * MLP_MAX_LAYERS], piece[2 * MLP_MAX_LAYERS];
    size_t poff[2 * MLP_MAX_LAYERS];   /* offset in the padded full vector */
    size_t soff[2 * MLP_MAX_LAYERS];   /* offset in this rank's shard */
    size_t P, S;            /* padded total Ψ' and shard size Ψ'/N (floats) */
    size_t max_layer;       /* max over layers of pad(w) + pad(b) */
    size_t max_tensor;      /* max pad over tensors */
    float *W, *Ws, *G, *Gs; /* full params (1, 2), shard params (3), full grads (1), shard (2, 3) */
    zero_optim opt;
    nn_sgd sgd[2 * MLP_MAX_LAYERS];
    nn_adamw adam[2 * MLP_MAX_LAYERS];
    zero_mem mem;
    mlp_acts acts;
    int B;
} zero;


/* From the full initial parameters p (identical on every rank). Collective only in that it
 * must be called by all ranks; sends nothing. Returns 0 or MLSYS_ERR_ARG (stage not 1-3,
 * a model with fewer parameters than ranks). */
int zero_create(zero **out, mlsys_comm *c, int stage, const mlp_shape *s, const nn_params *p,
                zero_optim opt, int max_batch);
/* One training step on x[B, dims[0]], y[B]: forward, backward, gradient reduction, the
 * shard's optimizer step, the parameter all_gather where the stage needs it. Returns the
 * loss; *rc gets an MLSYS_* code. */
float zero_step(zero *z, const float *x, const int *y, int B, int *rc);
/* The full parameters, unpadded, in nn_params order, into out[numel] (collective). */
int zero_full_params(zero *z, float *out);
void zero_free(zero *z);
/* What the stage should hold and send, from Ψ', N, K (optimizer bytes per parameter). */
void zero_formula_mem(int stage, size_t P, int N, int K, size_t max_tensor, size_t max_layer,
                      zero_mem *m);
/* Bytes a rank sends per step on a ring (all-reduce 2(N-1)/N, gather/scatter (N-1)/N). */
uint64_t zero_formula_sent(int stage, size_t P, int N);

#endif
