/* trainer.h - the trainer as a library. A model is seen as one flat vector of parameters
 * (train_model: ranges for the optimizer, tensors for DDP's buckets, and three calls: the
 * gradient of step s's batch, the validation loss, save); trainer.c trains any such model
 * data-parallel across ranks (DDP buckets or one all-reduce, ZeRO-1/2 shards, global-norm
 * clipping, warm-up + cosine schedule, AdamW, evaluation, atomic checkpoints, and a rank's
 * whole loop with its log lines and plot points). The lab's language model is one such model
 * (trainer_lm.c); `mlsys-lab train`, ch05/train-lm and chapter 13's reward model (the same
 * transformer with a scalar head and its own loss: another train_model) call it.
 * Table of contents: prototypes sit under the file that has them. */
#ifndef MLSYS_TRAINER_H
#define MLSYS_TRAINER_H

#include "llm.h"
#include "../nn/transformer.h"
#include "../train/train.h"
#include <limits.h>

#define TRAIN_MAX_RANGES 16

typedef enum { TRAIN_SYNC_DDP = 0, TRAIN_SYNC_ALLREDUCE = 1 } train_sync_kind;

/* What the loop does, whatever the model. */
typedef struct train_opts {
    int batch;                /* examples per step, all ranks together (B) */
    long steps;               /* the schedule's length */
    long stop_at;             /* stop after this step (0: at steps); the schedule is unchanged */
    long warmup, eval_every, ckpt_every, log_every;
    int eval_batches;         /* validation: eval_batches x batch examples */
    float lr, min_lr, weight_decay, clip, beta1, beta2, eps;
    int zero;                 /* 0, 1 or 2 */
    train_sync_kind sync;
    size_t bucket_bytes;
    int quiet;
    const char *who;          /* prefix of messages; NULL: "mlsys-lab train" */
} train_opts;

/* A model the trainer can train. The model owns w and g (g in the communication heap,
 * mlsys_alloc_aligned, so the peers' all-reduce reads it without a copy). */
typedef struct train_model {
    float *w, *g;             /* [n] weights and gradients, the same layout */
    size_t n;
    int nranges;              /* trainable ranges of w, one AdamW each */
    size_t roff[TRAIN_MAX_RANGES], rlen[TRAIN_MAX_RANGES];
    int no_decay[TRAIN_MAX_RANGES];   /* 1: no weight decay (norm gains) */
    int per_example;          /* tokens one example counts (throughput and tokens_seen) */
    const char *path;         /* what save writes (the "saved" line) */
    /* The flat vector as tensors in order, for DDP's buckets; a gap between trainable ranges
     * is a tensor too. Tensor i: its offset and length in floats, its name. */
    int ntensors;
    void (*tensor)(const struct train_model *m, int i, size_t *off, size_t *len, char *name,
                   size_t namelen);
    /* Step s's batch: this rank's Bl examples of the global batch (rank r takes examples
     * r·Bl .. r·Bl+Bl-1), forward and backward. g is zeroed before; the gradient is added
     * to it, ready(u, t) called once tensor t's gradient is complete (ready may be NULL).
     * *loss: the mean over the rank's examples. 0, or an MLSYS_* code. */
    int (*grad)(struct train_model *m, long step, int rank, int Bl,
                void (*ready)(void *u, int t), void *u, float *loss);
    /* Validation over up to want fixed examples, example j on rank j mod world, Bl at a
     * time: the sum of the per-example losses and their count on this rank. */
    int (*eval)(struct train_model *m, int rank, int world, int Bl, size_t want, double *sum,
                double *count);
    /* Rank 0 only: the weights and the optimizer state st (moments over the ranges, in
     * order; the model fills in what only it knows: the data stream's key, the weights'
     * hash) to the model's files, atomically. 0, or -1 with err. */
    int (*save)(struct train_model *m, llm_train_state *st, char *err, size_t errlen);
    /* One line: what is trained ("34816 parameters (dim 32, ...)"). */
    void (*describe)(const struct train_model *m, char *out, size_t n);
} train_model;

/* One rank's trainer. */
typedef struct train_ctx {
    mlsys_comm *c;            /* NULL: one process, no communication */
    int rank, world;
    const train_opts *o;
    train_model *m;
    int Bl;                   /* this rank's examples per step */
    size_t ooff[TRAIN_MAX_RANGES], olen[TRAIN_MAX_RANGES];  /* what this rank's optimizer updates */
    nn_adamw opt[TRAIN_MAX_RANGES];
    size_t opt_bytes;         /* optimizer state this rank holds */
    int zero;                 /* ZeRO stage in effect (0: none) */
    size_t zS;                /* shard size in floats: ceil(n / world) */
    float *zbuf;              /* [world·zS] padded flat vector for reduce_scatter/all_gather */
    nn_params view;           /* the flat gradient as tensors, for the DDP engine */
    ddp *d;
    long step;                /* steps done */
    long saved_step;          /* the step of the last checkpoint written or resumed (-1: none) */
    uint64_t tokens_seen;
    double grad_norm;         /* before clipping, of the last step */
} train_ctx;

/* ---- trainer.c: any train_model ---- */
/* Per rank: optimizer and sync engine over m. st: the optimizer state to continue (NULL:
 * fresh). 0, or -1 with err. */
int train_ctx_init(train_ctx *t, mlsys_comm *c, const train_opts *o, train_model *m,
                   const llm_train_state *st, char *err, size_t errlen);
void train_ctx_fini(train_ctx *t);
/* Forward, backward, gradient averaged over ranks; *loss: mean over all ranks. 0 or error. */
int train_grad(train_ctx *t, float *loss);
/* train_grad, clipping, learning rate of the schedule, AdamW. TRAIN_DIVERGED (on every rank
 * alike: the loss and the norm are the same everywhere) when the loss or the gradient is not
 * finite: then nothing is updated and the step does not count. */
#define TRAIN_DIVERGED 3
int train_step(train_ctx *t, float *loss, float *lr);
/* The schedule: linear warm-up to lr over warmup steps, cosine down to min_lr at steps. */
float train_lr(const train_opts *o, long step);
/* Validation loss over the fixed examples (collective). */
int train_eval(train_ctx *t, double *loss);
/* Checkpoint (collective: ZeRO gathers the moments; rank 0 writes, and refuses weights that
 * are not finite: a file its own readers would refuse). 0, or -1 with err. */
int train_save(train_ctx *t, char *err, size_t errlen);
/* A rank's whole run from t->step: steps with log lines (rank 0) and the "train loss" and
 * "val loss" plot points, evaluations and checkpoints as the options say, then a last
 * evaluation, a checkpoint and the summary. 0, or 1 (said on stderr). A run that diverges
 * keeps the last good checkpoint: rank 0 says the step in one line and returns
 * TRAIN_RUN_SAID, the other ranks stop at the same step and return 0 (so that the job's
 * failure is rank 0's, reported after its line). */
#define TRAIN_RUN_SAID 3
int train_run(train_ctx *t);

/* ---- trainer_lm.c: the lab's language model as a train_model ---- */
/* Options of a language-model run: the loop's, the model's shape and its data. */
typedef struct train_lm_opts {
    train_opts t;
    llm_config cfg;           /* dim, hidden_dim, n_layers, n_heads, n_kv_heads, seq_len,
                                 shared_classifier; vocab_size comes from the tokenizer */
    uint64_t seed;            /* weights */
    uint64_t data_seed;       /* corpus and tokenizer */
    size_t data_bytes;        /* training text (0: the data kit's 2 MiB) */
    int world;
    const char *out;          /* directory: model.bin, model.train, tokenizer.bin */
    int resume, force;
    const char *trace;
} train_lm_opts;

/* The shipped model's options (assets/models/README.md): dim 128, 5 layers, 4 heads, 2 kv
 * heads, hidden 352, seq 128, vocab 512; batch 32, 1000 steps, lr 3e-3 down to 3e-4 after
 * 100 warm-up steps, evaluation and checkpoint every 100, AdamW (0.9, 0.95, 1e-8, decay
 * 0.1), clipping at 1, DDP buckets of 256 KiB, seeds 1337 (weights) and 1 (data), out "out". */
void train_lm_opts_default(train_lm_opts *o);

/* The model: a transformer over the data kit's token ids. */
typedef struct train_lm {
    train_model base;         /* first: a train_lm is a train_model */
    llm_config cfg;
    const llm_datakit *kit;
    llm_weights w, g;         /* the same carving; g.mem from mlsys_alloc_aligned */
    size_t g_bytes;
    nn_tf tf;
    int Bl, T;                /* sequences per rank and step, tokens per sequence */
    int *ids, *tgt;           /* [Bl, T] */
    int gap;                  /* tensor index of the RoPE tables' gap (-1: none) */
    int batch;                /* the global batch (the data stream is drawn for it) */
    uint64_t data_seed;
    int ntf;                  /* nn_tf's tensors */
    char bin_path[PATH_MAX], train_path[PATH_MAX];
    char out[PATH_MAX];       /* the checkpoint's directory ("": no files) */
    llm_run_record run;       /* what the checkpoint records of the run (train_lm_run_record) */
} train_lm;

/* The model for Bl sequences per step of a global batch: init_w to start from (NULL: seeded
 * init from seed), files in out (NULL: none). 0, or -1 with err. */
int train_lm_init(train_lm *m, const llm_config *cfg, const llm_datakit *kit, int batch, int Bl,
                  uint64_t seed, uint64_t data_seed, const llm_weights *init_w, const char *out,
                  char *err, size_t errlen);
void train_lm_fini(train_lm *m);
/* The windows of step s for rank: global windows rank·Bl .. rank·Bl+Bl-1 of that step. */
void train_lm_batch(const train_lm *m, long s, int rank, int *ids, int *tgt);
/* What a checkpoint records of the run o describes (llm_run_compare reads it back). */
void train_lm_run_record(const train_lm_opts *o, llm_run_record *r);
/* The model/batch/world combination (cfg->vocab_size must be set). 0, or 2 with err. */
int train_lm_check(const train_lm_opts *o, const llm_config *cfg, char *err, size_t errlen);
/* One rank of a run over a data kit already built: model, trainer, loop. cfg: the model's
 * shape (vocab from the kit); init_w and st continue a checkpoint (NULL: from scratch). */
int train_lm_rank(mlsys_comm *c, const train_lm_opts *o, const llm_datakit *kit,
                  const llm_config *cfg, const llm_weights *init_w, const llm_train_state *st);
/* One rank of a whole run from scratch, for a lab's rank_main (the front end's plot view then
 * shows the "train loss" and "val loss" series rank 0 emits): builds the data kit from the
 * seed on every rank, rank 0 writes the tokenizer into o->out, trains, checkpoints into
 * o->out. 0, 1 or 2. */
int train_rank_run(mlsys_comm *c, const train_lm_opts *o);

#endif
