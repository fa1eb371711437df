/* zero.h - chapter 5's ZeRO engine for the labs' MLP: stage 1 shards the optimizer state,
 * stage 2 also the gradients (reduce_scatter), stage 3 also the parameters (all_gather
 * before each layer's forward and backward, freed after). Each tensor is padded to a
 * multiple of N and cut into N equal pieces (nn_shard_range), as FSDP and DeepSpeed do, so a
 * layer can be gathered alone; a rank's shard is its piece of every tensor. */
#ifndef CH05_ZERO_H
#define CH05_ZERO_H

#include "ddp.h"

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

/* zero.c */
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
/* Memory records for the blocks view: this rank's pools (ZERO_POOL + 0 parameters, + 1
 * gradients, + 2 optimizer state, + 3 temporaries as a gauge), a block per piece of every
 * tensor (tensor t's piece q is block t*N + q, tensor t its owner), the pieces the stage
 * keeps held, and the bytes really allocated; a pool described again starts afresh. Under
 * stage 3 each layer's gathered pieces are held while it is used, then freed. */
#define ZERO_POOL 1
void zero_show(zero *z);
/* What the stage should hold and send, from Ψ', N, K (optimizer bytes per parameter). */
void zero_formula_mem(int stage, size_t P, int N, int K, size_t max_tensor, size_t max_layer,
                      zero_mem *m);
/* Bytes a rank sends per step on a ring (all-reduce 2(N-1)/N, gather/scatter (N-1)/N). */
uint64_t zero_formula_sent(int stage, size_t P, int N);

#endif
