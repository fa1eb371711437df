/* train_lm.c - ch05/train-lm: chapter 5's DDP engine at work on something larger than an
 * MLP: a small version of the lab's own language model trained data-parallel on N ranks,
 * its training and validation loss drawn live in the plot view. The training itself is the
 * trainer of core/llm (trainer.h), the same that `mlsys-lab train` runs; this lab gives it
 * its options. */
#include "../../lab/lab.h"
#include "../../core/llm/trainer.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const lab_flag train_lm_flags[] = {
    {"world-size", 'w', FLAG_INT, "2", NULL, 1, 16, "number of ranks (data-parallel replicas)"},
    {"steps", 0, FLAG_INT, "300", NULL, 1, 100000, "optimizer steps"},
    {"batch", 0, FLAG_INT, "16", NULL, 1, 4096, "sequences per step, all ranks together"},
    {"seq-len", 0, FLAG_INT, "64", NULL, 8, 1024, "tokens per sequence"},
    {"dim", 0, FLAG_INT, "64", NULL, 8, 1024, "model width"},
    {"layers", 0, FLAG_INT, "2", NULL, 1, 32, "transformer layers"},
    {"heads", 0, FLAG_INT, "4", NULL, 1, 64, "attention heads (must divide the width)"},
    {"kv-heads", 0, FLAG_INT, "2", NULL, 1, 64, "key/value heads (must divide the heads)"},
    {"hidden", 0, FLAG_INT, "176", NULL, 8, 8192, "width of the SwiGLU MLP"},
    {"lr", 0, FLAG_DOUBLE, "5e-3", NULL, 0, 0, "peak learning rate (warm-up, then cosine)"},
    {"zero", 0, FLAG_CHOICE, "0", "0|1|2", 0, 0, "ZeRO stage: 0 DDP buckets, 1 optimizer "
     "state sharded, 2 gradients too"},
    {"seed", 0, FLAG_INT, "1337", NULL, 0, 1L << 40, "seed of the initial weights"},
    {"out", 0, FLAG_STR, "/tmp/mlsys-lab-train-lm", NULL, 0, 0,
     "folder for model.bin and tokenizer.bin"},
    {NULL, 0, 0, NULL, NULL, 0, 0, NULL}
};

/* The trainer's options from the lab's flags: the shipped model's defaults (core/llm),
 * then what the flags set; warm-up a tenth and evaluations every fifth of the run. */
static int build_opts(const lab_args *a, int world, train_lm_opts *o, char *err, size_t n)
{
    train_lm_opts_default(o);
    o->t.steps = lab_arg_int(a, "steps");
    o->t.batch = (int)lab_arg_int(a, "batch");
    o->cfg.seq_len = (int)lab_arg_int(a, "seq-len");
    o->cfg.dim = (int)lab_arg_int(a, "dim");
    o->cfg.n_layers = (int)lab_arg_int(a, "layers");
    o->cfg.n_heads = (int)lab_arg_int(a, "heads");
    o->cfg.n_kv_heads = (int)lab_arg_int(a, "kv-heads");
    o->cfg.hidden_dim = (int)lab_arg_int(a, "hidden");
    o->t.lr = (float)lab_arg_double(a, "lr");
    o->t.min_lr = o->t.lr / 10.0f;
    o->t.zero = (int)lab_arg_int(a, "zero");
    o->seed = (uint64_t)lab_arg_int(a, "seed");
    o->world = world;
    o->t.warmup = o->t.steps / 10 > 0 ? o->t.steps / 10 : 1;
    o->t.eval_every = o->t.steps / 5 > 0 ? o->t.steps / 5 : 1;
    o->t.ckpt_every = o->t.eval_every;
    o->out = lab_arg_str(a, "out");
    o->force = 1;
    o->t.who = "mlsys-lab: ch05/train-lm";
    llm_config cfg = o->cfg;
    cfg.vocab_size = 512;           /* the data kit's tokenizer */
    return train_lm_check(o, &cfg, err, n) ? 2 : 0;
}

static int train_lm_before(const lab_args *a)
{
    train_lm_opts o;
    char err[512];
    if (build_opts(a, (int)lab_arg_int(a, "world-size"), &o, err, sizeof err)) {
        fprintf(stderr, "mlsys-lab: ch05/train-lm: %s\n", err);
        return 2;
    }
    printf("Training the lab's language model (dim %d, %d layers, %d heads, %d kv heads) on "
           "%d ranks:\n%ld steps of %d sequences x %d tokens, DDP %s; checkpoints in %s\n\n",
           o.cfg.dim, o.cfg.n_layers, o.cfg.n_heads, o.cfg.n_kv_heads, o.world, o.t.steps,
           o.t.batch, o.cfg.seq_len, o.t.zero ? "with ZeRO" : "buckets", o.out);
    fflush(stdout);
    return -1;
}

static int train_lm_lab_rank(mlsys_comm *c, const lab_args *a)
{
    train_lm_opts o;
    char err[512];
    if (build_opts(a, mlsys_size(c), &o, err, sizeof err)) {
        if (mlsys_rank(c) == 0)
            fprintf(stderr, "mlsys-lab: ch05/train-lm: %s\n", err);
        return 2;
    }
    return train_rank_run(c, &o);
}

const lab ch05_train_lm_lab = {
    .id = "ch05/train-lm",
    .title = "Train the lab's language model",
    .summary = "a small Llama-style model trained data-parallel with the DDP engine; loss curves",
    .flags = train_lm_flags,
    .port = 29511,
    .min_ranks = 1,
    .max_ranks = 16,
    .before = train_lm_before,
    .rank_main = train_lm_lab_rank,
    .view = "plot",
};
