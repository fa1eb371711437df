/* train.h - `mlsys-lab train`: the lab's language model trained data-parallel across ranks
 * on the runtime (chapter 5's bucketed DDP engine), with a warm-up + cosine schedule, global
 * gradient clipping, validation, atomic checkpoints in llama2.c's format and --resume.
 * The per-rank pieces are public so tests (and a chapter's lab) can drive them directly. */
#ifndef MLSYS_LAB_TRAIN_H
#define MLSYS_LAB_TRAIN_H

#include "../../core/nn/transformer.h"
#include "../../core/llm/llm.h"
#include "../../core/train/train.h"

typedef enum { TRAIN_SYNC_DDP = 0, TRAIN_SYNC_ALLREDUCE = 1 } train_sync_kind;

typedef struct train_opts {
    llm_config cfg;           /* dim, hidden_dim, n_layers, n_heads, n_kv_heads, seq_len,
                                 shared_classifier; vocab_size comes from the tokenizer */
    int batch;                /* sequences per step, all ranks together (B) */
    long steps;               /* the schedule's length */
    long stop_at;             /* stop after this step (0: at steps); the schedule is unchanged */
    long warmup, eval_every, ckpt_every, log_every;
    int eval_batches;         /* validation: eval_batches x batch windows of seq_len */
    float lr, min_lr, weight_decay, clip, beta1, beta2, eps;
    uint64_t seed;            /* weights */
    uint64_t data_seed;       /* corpus and tokenizer */
    size_t data_bytes;        /* training text (0: the data kit's 2 MiB) */
    int world;
    int zero;                 /* 0, 1 or 2 */
    train_sync_kind sync;
    size_t bucket_bytes;
    const char *out;          /* directory */
    int resume, force, quiet;
    const char *trace;
} train_opts;

/* One rank's trainer. */
typedef struct train_ctx {
    mlsys_comm *c;            /* NULL: one process, no communication */
    int rank, world;
    const train_opts *o;
    const llm_datakit *kit;
    llm_config cfg;
    llm_weights w, g;         /* weights and gradients, the same carving (g in the
                                 communication heap: g_bytes from mlsys_alloc_aligned) */
    size_t g_bytes;
    nn_tf m;
    int nranges;
    size_t roff[12], rlen[12];/* the trainable ranges in w.mem (no RoPE tables) */
    size_t ooff[12], olen[12];/* the part of each range this rank's optimizer updates */
    nn_adamw opt[12];         /* one per range: norms get no weight decay */
    size_t opt_bytes;         /* optimizer state this rank holds */
    int zero;                 /* ZeRO stage in effect (0: none) */
    size_t zS;                /* shard size in floats: ceil(n_floats / world) */
    float *zbuf;              /* [world·zS] padded flat vector for reduce_scatter/all_gather */
    int Bl, T;                /* this rank's sequences per step, tokens per sequence */
    int *ids, *tgt;           /* [Bl, T] */
    nn_params view;           /* the flat gradient as tensors, for the DDP engine */
    ddp *d;
    int gap;                  /* view index of the RoPE tables' gap (-1: none) */
    long step;                /* steps done */
    uint64_t tokens_seen;
    double grad_norm;         /* before clipping, of the last step */
} train_ctx;

/* train.c */
int train_main(int argc, char **argv);          /* the command; exit status 0, 1 or 2 */
/* One rank of a whole training run, for a lab's rank_main (the front end's plot view then
 * shows the "train loss" and "val loss" series rank 0 emits): builds the data kit from the
 * seed on every rank, trains from scratch, checkpoints into o->out. 0, 1 or 2. */
int train_rank_run(mlsys_comm *c, const train_opts *o);
/* Parse flags into o (defaults first). 0, 1 for --help (printed), 2 with err. */
int train_parse(train_opts *o, int argc, char **argv, char *err, size_t errlen);
/* Validate the model/batch/world combination (cfg.vocab_size must be set). 0 or 2 + err. */
int train_check(const train_opts *o, const llm_config *cfg, char *err, size_t errlen);
/* Per rank: model, optimizer, sync engine. init_w: weights to start from (NULL: seeded init),
 * st: the optimizer state to continue (NULL: fresh). 0, or -1 with err. */
int train_ctx_init(train_ctx *t, mlsys_comm *c, const train_opts *o, const llm_datakit *kit,
                   const llm_config *cfg, const llm_weights *init_w,
                   const llm_train_state *st, char *err, size_t errlen);
void train_ctx_fini(train_ctx *t);
/* The batch of step s for this rank: global windows rank·Bl .. rank·Bl+Bl-1 of that step. */
void train_batch(const train_ctx *t, long s, int *ids, int *tgt);
/* Forward, backward, gradient averaged over ranks; *loss: mean over all ranks. 0 or error. */
int train_grad(train_ctx *t, float *loss);
/* train_grad, clipping, learning rate of the schedule, AdamW. */
int train_step(train_ctx *t, float *loss, float *lr);
/* The schedule: linear warm-up to lr over warmup steps, cosine down to min_lr at steps. */
float train_lr(const train_opts *o, long step);
/* Validation loss over the fixed windows (collective). */
int train_eval(train_ctx *t, double *loss);

#endif
