/* train.c - `mlsys-lab train`: the parent parses and validates everything (flags, the
 * checkpoint to resume, the data kit) before any rank starts, so bad input costs one line
 * and exit 2; then the runner forks the ranks, and each runs the trainer of core/llm
 * (trainer.h: its share of every batch, the gradients averaged by the DDP engine; rank 0
 * prints, plots and writes the checkpoints, atomically). */
#include "cli.h"
#include "../job/runner.h"
#include "../../core/llm/trainer.h"
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const lab_flag train_flags[] = {
    {"dim", 0, FLAG_INT, "128", NULL, 1, LLM_MAX_DIM, "model width"},
    {"layers", 0, FLAG_INT, "5", NULL, 1, LLM_MAX_LAYERS, "transformer layers"},
    {"heads", 0, FLAG_INT, "4", NULL, 1, LLM_MAX_DIM, "attention heads (divide the width)"},
    {"kv-heads", 0, FLAG_INT, "2", NULL, 1, LLM_MAX_DIM, "key/value heads (divide the heads)"},
    {"hidden", 0, FLAG_INT, "352", NULL, 1, LLM_MAX_DIM, "width of the SwiGLU MLP"},
    {"seq-len", 's', FLAG_INT, "128", NULL, 2, 65536, "tokens per sequence"},
    {"vocab", 0, FLAG_INT, "512", NULL, 259, 65536, "ids of the tokenizer it trains"},
    {"untied", 0, FLAG_BOOL, NULL, NULL, 0, 0, "an own classifier (not the embedding)"},
    {"batch", 0, FLAG_INT, "32", NULL, 1, 1 << 20, "sequences per step, all ranks together"},
    {"steps", 0, FLAG_INT, "1000", NULL, 1, 1L << 40, "the schedule's length"},
    {"stop-at", 0, FLAG_INT, NULL, NULL, 1, 1L << 40,
     "stop early at STEP; the schedule still ends at --steps"},
    {"lr", 0, FLAG_DOUBLE, "3e-3", NULL, 0, FLAG_NO_MAX, "peak learning rate"},
    {"min-lr", 0, FLAG_DOUBLE, NULL, NULL, 0, FLAG_NO_MAX, "the cosine's floor (lr / 10)"},
    {"warmup", 0, FLAG_INT, "100", NULL, 0, 1L << 40, "steps of linear warm-up"},
    {"wd", 0, FLAG_DOUBLE, "0.1", NULL, 0, FLAG_NO_MAX, "AdamW weight decay"},
    {"clip", 0, FLAG_DOUBLE, "1.0", NULL, 0, FLAG_NO_MAX, "global gradient-norm clip (0: none)"},
    {"seed", 0, FLAG_INT, "1337", NULL, 0, LONG_MAX, "seed of the initial weights"},
    {"data-seed", 0, FLAG_INT, "1", NULL, 0, LONG_MAX, "seed of the corpus and the tokenizer"},
    {"data-bytes", 0, FLAG_SIZE, "2M", NULL, 1024, 1L << 32, "training text"},
    {"world-size", 'w', FLAG_INT, "1", NULL, 1, 64, "ranks (data-parallel replicas)"},
    {"zero", 0, FLAG_INT, "0", NULL, 0, 2,
     "ZeRO stage: 1 optimizer state sharded, 2 gradients too"},
    {"sync", 0, FLAG_CHOICE, "ddp", "ddp|allreduce", 0, 0,
     "gradients: DDP buckets during backward, or one all-reduce after it"},
    {"bucket-kb", 0, FLAG_INT, "256", NULL, 1, 1 << 20, "DDP bucket size in KiB"},
    {"out", 0, FLAG_STR, "out", NULL, 0, 0, "folder: model.bin, model.train, tokenizer.bin"},
    {"resume", 0, FLAG_BOOL, NULL, NULL, 0, 0,
     "continue DIR/model.bin (its model shape wins over the flags)"},
    {"force", 0, FLAG_BOOL, NULL, NULL, 0, 0, "start over in a folder that has a model"},
    {"eval-every", 0, FLAG_INT, "100", NULL, 0, 1L << 40, "steps between evaluations (0: none)"},
    {"eval-batches", 0, FLAG_INT, "4", NULL, 1, 1 << 20, "validation: this many batches"},
    {"ckpt-every", 0, FLAG_INT, NULL, NULL, 0, 1L << 40,
     "steps between checkpoints (at each evaluation)"},
    {"log-every", 0, FLAG_INT, "10", NULL, 1, 1L << 40, "steps between lines when not a terminal"},
    {"trace", 0, FLAG_STR, NULL, NULL, 0, 0, "write a Chrome trace (Perfetto) to FILE"},
    {"quiet", 0, FLAG_BOOL, NULL, NULL, 0, 0, "print nothing but errors"},
    {"reward-model", 0, FLAG_BOOL, NULL, NULL, 0, 0,
     "chapter 13's reward model instead (OUT/reward.bin; steps 600, lr 5e-4, batch 32 pairs)"},
    {"rm-init", 0, FLAG_STR, "assets/models/draft.bin", NULL, 0, 0,
     "--reward-model: the body it starts from"},
    {"max-operand", 0, FLAG_INT, "9", NULL, 0, 49, "--reward-model: operands 0..N"},
    {NULL, 0, 0, NULL, NULL, 0, 0, NULL}
};

const lab_command train_command = {
    .name = "train",
    .args = "",
    .summary = "Train the lab's language model across ranks. The defaults are the shipped "
               "model's;\nit was trained with -w 2 (assets/models/README.md).",
    .flags = train_flags,
};

/* The parsed flags into o (the language model's run). */
static void train_opts_from(train_lm_opts *o, const lab_args *a)
{
    train_lm_opts_default(o);
    o->cfg.dim = (int)lab_arg_int(a, "dim");
    o->cfg.n_layers = (int)lab_arg_int(a, "layers");
    o->cfg.n_heads = (int)lab_arg_int(a, "heads");
    o->cfg.n_kv_heads = (int)lab_arg_int(a, "kv-heads");
    o->cfg.hidden_dim = (int)lab_arg_int(a, "hidden");
    o->cfg.seq_len = (int)lab_arg_int(a, "seq-len");
    o->cfg.vocab_size = (int)lab_arg_int(a, "vocab");
    o->cfg.shared_classifier = !lab_arg_bool(a, "untied");
    o->t.batch = (int)lab_arg_int(a, "batch");
    o->t.steps = lab_arg_int(a, "steps");
    o->t.stop_at = lab_arg_int(a, "stop-at");
    o->t.lr = (float)lab_arg_double(a, "lr");
    o->t.min_lr = lab_arg_given(a, "min-lr") ? (float)lab_arg_double(a, "min-lr")
                                             : o->t.lr / 10.0f;
    o->t.warmup = lab_arg_int(a, "warmup");
    o->t.weight_decay = (float)lab_arg_double(a, "wd");
    o->t.clip = (float)lab_arg_double(a, "clip");
    o->seed = (uint64_t)lab_arg_int(a, "seed");
    o->data_seed = (uint64_t)lab_arg_int(a, "data-seed");
    /* the data kit's own default when not given (the same 2 MiB) */
    o->data_bytes = lab_arg_given(a, "data-bytes") ? (size_t)lab_arg_size(a, "data-bytes") : 0;
    o->world = (int)lab_arg_int(a, "world-size");
    o->t.zero = (int)lab_arg_int(a, "zero");
    o->t.sync = !strcmp(lab_arg_str(a, "sync"), "allreduce") ? TRAIN_SYNC_ALLREDUCE
                                                              : TRAIN_SYNC_DDP;
    o->t.bucket_bytes = (size_t)lab_arg_int(a, "bucket-kb") << 10;
    o->resume = lab_arg_bool(a, "resume");
    o->force = lab_arg_bool(a, "force");
    o->t.eval_every = lab_arg_int(a, "eval-every");
    o->t.eval_batches = (int)lab_arg_int(a, "eval-batches");
    o->t.ckpt_every = lab_arg_given(a, "ckpt-every") ? lab_arg_int(a, "ckpt-every")
                                                     : o->t.eval_every;
    o->t.log_every = lab_arg_int(a, "log-every");
    o->t.quiet = lab_arg_bool(a, "quiet");
    o->out = lab_arg_text(a, "out");          /* in argv: they outlive the parsed values */
    o->trace = lab_arg_text(a, "trace");
}

int train_parse(train_lm_opts *o, int argc, char **argv, char *err, size_t errlen)
{
    lab_args a;
    int rc = lab_command_parse(&train_command, argc, argv, &a, err, errlen);
    if (rc)
        return rc;
    train_opts_from(o, &a);
    lab_args_free(&a);
    return 0;
}

/* ---- the job, step by step ---- */

/* What every rank of the job shares (inherited through fork), and what the parent holds. */
typedef struct train_job {
    train_lm_opts o;
    llm_config cfg;                     /* the model's shape (the checkpoint's with --resume) */
    char bin_path[PATH_MAX], train_path[PATH_MAX];
    llm_weights w0;                     /* resume: the checkpoint's weights */
    llm_train_state st;                 /* resume: its optimizer state */
    llm_datakit kit;
    int have_w, have_st, have_kit;
    int bin_stale;                      /* resume: model.bin is one checkpoint behind */
    char notes[512];                    /* resume: what changed and is recorded from here */
} train_job;

static int train_job_rank(mlsys_comm *c, void *arg)
{
    const train_job *j = arg;
    return train_lm_rank(c, &j->o, &j->kit, &j->cfg, j->have_w ? &j->w0 : NULL,
                         j->have_st ? &j->st : NULL);
}

/* --resume: the checkpoint and its optimizer state, read and cross-checked before a rank
 * starts (a run that would silently change is refused); otherwise the folder must not hold
 * a model (unless --force). 0, or 2. */
static int train_resume_or_start(train_job *j)
{
    train_lm_opts *o = &j->o;
    char err[1024];
    if (snprintf(j->bin_path, sizeof j->bin_path, "%s/model.bin", o->out) >=
            (int)sizeof j->bin_path ||
        snprintf(j->train_path, sizeof j->train_path, "%s/model.train", o->out) >=
            (int)sizeof j->train_path) {
        fprintf(stderr, "mlsys-lab train: --out %s: the name is too long\n", o->out);
        return 2;
    }
    if (!o->resume) {
        struct stat sb;
        if (stat(j->bin_path, &sb) == 0 && !o->force) {
            fprintf(stderr, "mlsys-lab train: %s exists: --resume continues it, --force starts "
                    "over (the old model stays until the first checkpoint replaces it)\n",
                    j->bin_path);
            return 2;
        }
        j->cfg = o->cfg;
        return 0;
    }
    /* everything that --resume needs is read and cross-checked before a rank starts: the
     * checkpoint (one file: core/llm/ckpt.c), and that this run continues its run */
    llm_run_record given;
    train_lm_run_record(o, &given);
    if (llm_ckpt_read(o->out, &j->cfg, &j->w0, &j->st, &j->bin_stale, err, sizeof err) != 0) {
        fprintf(stderr, "mlsys-lab train: cannot resume: %s\n", err);
        return 2;
    }
    j->have_w = j->have_st = 1;
    if (llm_run_compare(&j->st, &given, j->notes, sizeof j->notes, err, sizeof err) != 0) {
        fprintf(stderr, "mlsys-lab train: cannot resume: %s\n", err);
        return 2;
    }
    o->cfg.vocab_size = j->cfg.vocab_size;      /* the data kit must rebuild this tokenizer */
    return 0;
}

/* The shape against the batch and the world, the data kit (corpus and tokenizer from the
 * seed), its tokenizer written beside the model. 0, or 2. */
static int train_data(train_job *j)
{
    train_lm_opts *o = &j->o;
    char err[1024];
    if (train_lm_check(o, &j->cfg, err, sizeof err) != 0) {
        fprintf(stderr, "mlsys-lab train: %s\n", err);
        return 2;
    }
    /* sizes in range that cannot fit: refused here, not in a rank halfway through */
    if (llm_train_mem_check(&j->cfg, o->t.batch, o->world, o->t.zero, o->data_bytes, o->resume,
                            err, sizeof err) != 0) {
        fprintf(stderr, "mlsys-lab train: %s\n", err);
        return 2;
    }
    llm_datakit_opts ko = {.seed = o->data_seed, .train_bytes = o->data_bytes,
                           .vocab_size = o->cfg.vocab_size};
    if (llm_datakit_build(&j->kit, &ko, err, sizeof err) != 0) {
        fprintf(stderr, "mlsys-lab train: the data kit: %s\n", err);
        return 2;
    }
    j->have_kit = 1;
    const llm_datakit *kit = &j->kit;
    if (kit->tok.vocab_size != j->cfg.vocab_size) {
        fprintf(stderr, "mlsys-lab train: the tokenizer has %d ids, the model %d\n",
                kit->tok.vocab_size, j->cfg.vocab_size);
        return 2;
    }
    if (kit->n_train_ids < (size_t)j->cfg.seq_len + 2 ||
        kit->n_val_ids < (size_t)j->cfg.seq_len + 2) {
        fprintf(stderr, "mlsys-lab train: %zu training / %zu validation tokens are too few "
                "for windows of %d: raise --data-bytes\n", kit->n_train_ids, kit->n_val_ids,
                j->cfg.seq_len);
        return 2;
    }
    if (mkdir(o->out, 0755) != 0 && errno != EEXIST) {
        fprintf(stderr, "mlsys-lab train: --out %s: cannot create it: %s\n", o->out,
                strerror(errno));
        return 2;
    }
    /* what interrupted checkpoints left behind; a resumed model.bin one checkpoint behind
     * (an interruption between model.train and model.bin) is brought level first */
    int swept = llm_ckpt_sweep(o->out);
    if (j->bin_stale && llm_checkpoint_write(j->bin_path, &j->cfg, &j->w0, err,
                                             sizeof err) != 0) {
        fprintf(stderr, "mlsys-lab train: %s\n", err);
        return 2;
    }
    if (!o->t.quiet && o->resume && (j->bin_stale || j->notes[0]))
        printf("train: resuming %s at step %llu%s%s%s%s\n", o->out,
               (unsigned long long)j->st.step, j->notes[0] ? " with " : "", j->notes,
               j->notes[0] ? " (recorded from here on)" : "",
               j->bin_stale ? "; model.bin rewritten from model.train" : "");
    if (!o->t.quiet && swept)
        printf("train: removed %d temporar%s of an interrupted write in %s\n", swept,
               swept == 1 ? "y" : "ies", o->out);
    char tok_path[PATH_MAX + 16];
    snprintf(tok_path, sizeof tok_path, "%s/tokenizer.bin", o->out);
    if (llm_tokfile_write(tok_path, &kit->tok, err, sizeof err) != 0) {
        fprintf(stderr, "mlsys-lab train: %s\n", err);
        return 2;
    }
    if (!o->t.quiet)
        printf("train: data kit seed %llu: %zu train / %zu val tokens, vocab %d (%.2f s)\n",
               (unsigned long long)o->data_seed, kit->n_train_ids, kit->n_val_ids,
               kit->tok.vocab_size, kit->corpus_s + kit->bpe_s + kit->encode_s);
    fflush(stdout);
    return 0;
}

/* The ranks, through the runner; the trace written once they are done. 0, 1, 2 or 130. */
static int train_job_run(train_job *j)
{
    const train_lm_opts *o = &j->o;
    char err[1024], trace_tmp[PATH_MAX + 32] = "";
    if (o->trace && mlsys_trace_prepare(o->trace, trace_tmp, sizeof trace_tmp, err,
                                        sizeof err) != 0) {
        fprintf(stderr, "mlsys-lab train: %s\n", err);
        return 2;
    }
    mlsys_launch_opts lo;
    memset(&lo, 0, sizeof lo);
    lo.world_size = o->world;
    lo.timeout_ms = 300000;
    lo.master_port = 29500;
    lo.backend = "shm";
    lo.trace_capacity = o->trace ? 65536 : 0;
    runner_spec spec = {.fn = train_job_rank, .arg = j};
    mlsys_job *job = runner_start(&lo, &spec, err, sizeof err);
    if (!job) {
        fprintf(stderr, "mlsys-lab train: %s\n", err);
        if (trace_tmp[0])
            unlink(trace_tmp);
        return 2;
    }
    mlsys_job_install_signal_stop();
    mlsys_trace tb = {0};
    mlsys_job_sink sink = {NULL, mlsys_trace_collect, &tb};
    char why[256];
    int rc = mlsys_job_wait(job, o->trace ? &sink : NULL, -1, why, sizeof why);
    int stopped = mlsys_job_stop_requested();
    if (o->trace) {
        if (stopped || mlsys_trace_commit(o->trace, trace_tmp, &tb, mlsys_job_t0_ns(job)) != 0)
            unlink(trace_tmp);
        else if (!o->t.quiet)
            printf("trace: %zu events in %s (mlsys-lab replay %s shows the loss curves)\n",
                   tb.n, o->trace, o->trace);
    }
    mlsys_trace_free(&tb);
    /* a rank that said why in its own line (a diverged run) needs no second one */
    const mlsys_rank_status *fs = rc ? mlsys_job_status(job, mlsys_job_failed_rank(job)) : NULL;
    int said = fs && fs->exited && fs->code == TRAIN_RUN_SAID;
    mlsys_job_free(job);
    if (rc) {
        if (!said || stopped)
            fprintf(stderr, "mlsys-lab train: %s\n", why);
        rc = stopped ? 130 : 1;
    }
    return rc;
}

int train_main(int argc, char **argv)
{
    lab_args a;
    int rc = lab_command_args(&train_command, argc, argv, &a);
    if (rc >= 0)
        return rc;                      /* --help printed, or one line said what is wrong */
    if (lab_arg_bool(&a, "reward-model")) {
        rc = train_rm_run(&a);
        lab_args_free(&a);
        return rc;
    }
    train_job *j = mlsys_xcalloc(1, sizeof *j);
    train_opts_from(&j->o, &a);
    lab_args_free(&a);
    if (!(rc = train_resume_or_start(j)) && !(rc = train_data(j)))
        rc = train_job_run(j);
    if (j->have_kit)
        llm_datakit_free(&j->kit);
    if (j->have_w)
        llm_weights_free(&j->w0);
    if (j->have_st)
        llm_train_state_free(&j->st);
    free(j);
    return rc;
}
