/* train_lm.c - ch05/train-lm: chapter 5's DDP engine at work on something larger than an
 * MLP: a small version of the lab's own language model trained data-parallel on N ranks,
 * its training and validation loss drawn live in the plot view. The training itself is
 * `mlsys-lab train` (lab/cli/train.c); this lab only turns its flags into that command's. */
#include "../../lab/lab.h"
#include "../../lab/cli/train.h"
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

/* train_parse and train_check speak as the command ("mlsys-lab train: why"): the lab's own
 * prefix replaces that one, so the line is not "mlsys-lab: ch05/train-lm: mlsys-lab train: ". */
static const char *reason(const char *err)
{
    static const char cmd[] = "mlsys-lab train: ";
    return strncmp(err, cmd, sizeof cmd - 1) ? err : err + sizeof cmd - 1;
}

/* The command line of `mlsys-lab train` that these flags stand for. */
static int build_opts(const lab_args *a, int world, train_opts *o, char *err, size_t n)
{
    const char *out = lab_arg_str(a, "out");
    char v[14][32];
    snprintf(v[0], 32, "%ld", lab_arg_int(a, "steps"));
    snprintf(v[1], 32, "%ld", lab_arg_int(a, "batch"));
    snprintf(v[2], 32, "%ld", lab_arg_int(a, "seq-len"));
    snprintf(v[3], 32, "%ld", lab_arg_int(a, "dim"));
    snprintf(v[4], 32, "%ld", lab_arg_int(a, "layers"));
    snprintf(v[5], 32, "%ld", lab_arg_int(a, "heads"));
    snprintf(v[6], 32, "%ld", lab_arg_int(a, "kv-heads"));
    snprintf(v[7], 32, "%ld", lab_arg_int(a, "hidden"));
    snprintf(v[8], 32, "%g", lab_arg_double(a, "lr"));
    snprintf(v[9], 32, "%s", lab_arg_str(a, "zero"));
    snprintf(v[10], 32, "%ld", lab_arg_int(a, "seed"));
    snprintf(v[11], 32, "%d", world);
    long steps = lab_arg_int(a, "steps");
    snprintf(v[12], 32, "%ld", steps / 10 > 0 ? steps / 10 : 1);       /* warm-up */
    snprintf(v[13], 32, "%ld", steps / 5 > 0 ? steps / 5 : 1);         /* eval every */
    char *argv[] = {"train", "--steps", v[0], "--batch", v[1], "--seq-len", v[2], "--dim", v[3],
                    "--layers", v[4], "--heads", v[5], "--kv-heads", v[6], "--hidden", v[7],
                    "--lr", v[8], "--zero", v[9], "--seed", v[10], "-w", v[11],
                    "--warmup", v[12], "--eval-every", v[13], "--out", (char *)out, "--force",
                    NULL};
    int argc = (int)(sizeof argv / sizeof argv[0]) - 1;
    if (train_parse(o, argc, argv, err, n))
        return 2;
    llm_config cfg = o->cfg;
    cfg.vocab_size = 512;           /* the data kit's tokenizer */
    return train_check(o, &cfg, err, n) ? 2 : 0;
}

static int train_lm_before(const lab_args *a)
{
    train_opts o;
    char err[512];
    if (build_opts(a, (int)lab_arg_int(a, "world-size"), &o, err, sizeof err)) {
        fprintf(stderr, "mlsys-lab: ch05/train-lm: %s\n", reason(err));
        return 2;
    }
    llm_config cfg = o.cfg;
    cfg.vocab_size = 512;
    if (llm_train_mem_check(&cfg, o.batch, o.world, o.zero, o.data_bytes, 0, err,
                            sizeof err) != 0) {
        fprintf(stderr, "mlsys-lab: ch05/train-lm: %s\n", err);
        return 2;
    }
    printf("Training the lab's language model (dim %d, %d layers, %d heads, %d kv heads) on "
           "%d ranks:\n%ld steps of %d sequences x %d tokens, DDP %s; checkpoints in %s\n\n",
           o.cfg.dim, o.cfg.n_layers, o.cfg.n_heads, o.cfg.n_kv_heads, o.world, o.steps,
           o.batch, o.cfg.seq_len, o.zero ? "with ZeRO" : "buckets", o.out);
    fflush(stdout);
    return -1;
}

static int train_lm_rank(mlsys_comm *c, const lab_args *a)
{
    train_opts o;
    char err[512];
    if (build_opts(a, mlsys_size(c), &o, err, sizeof err)) {
        if (mlsys_rank(c) == 0)
            fprintf(stderr, "mlsys-lab: ch05/train-lm: %s\n", reason(err));
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
    .rank_main = train_lm_rank,
    .view = "plot",
};
