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

#define TRAIN_USAGE \
    "usage: mlsys-lab train [flags]   (the defaults are the shipped model's; it was trained\n" \
    "       with -w 2: see assets/models/README.md)\n" \
    "model:    --dim N (128) --layers N (5) --heads N (4) --kv-heads N (2) --hidden N (352)\n" \
    "          --seq-len N (128) --vocab N (512, the tokenizer's) --untied (own classifier)\n" \
    "training: --batch N (32 sequences per step, all ranks) --steps N (1000) --lr X (3e-3)\n" \
    "          --min-lr X (lr/10) --warmup N (100) --wd X (0.1) --clip X (1.0) --seed N (1337)\n" \
    "          --stop-at STEP (stop early; the schedule still ends at --steps)\n" \
    "data:     --data-seed N (1) --data-bytes SIZE (2M of training text)\n" \
    "ranks:    -w/--world-size N (1) --zero 1|2 --sync ddp|allreduce (ddp) --bucket-kb N (256)\n" \
    "output:   --out DIR (out: model.bin, model.train, tokenizer.bin) --resume (continue\n" \
    "          DIR/model.bin; its model shape wins over the flags) --force (start over)\n" \
    "          --eval-every N (100) --eval-batches N (4) --ckpt-every N (at each eval)\n" \
    "          --log-every N (10, when not a terminal) --trace FILE --quiet\n"

/* One flag value as a long within [lo, hi]. */
static int flag_long(const char *name, const char *v, long lo, long hi, long *out, char *err,
                     size_t errlen)
{
    if (!v) {
        snprintf(err, errlen, "mlsys-lab train: %s needs a value", name);
        return 2;
    }
    if (mlsys_parse_long(v, out) != 0 || *out < lo || *out > hi) {
        snprintf(err, errlen, "mlsys-lab train: %s '%s': expected a whole number in [%ld, %ld]",
                 name, v, lo, hi);
        return 2;
    }
    return 0;
}

static int flag_float(const char *name, const char *v, float lo, float *out, char *err,
                      size_t errlen)
{
    char *end;
    errno = 0;
    double d = v ? strtod(v, &end) : 0.0;
    if (!v || errno || end == v || *end || !isfinite(d) || d < lo) {
        snprintf(err, errlen, "mlsys-lab train: %s '%s': expected a number >= %g", name,
                 v ? v : "", (double)lo);
        return 2;
    }
    *out = (float)d;
    return 0;
}

int train_parse(train_lm_opts *o, int argc, char **argv, char *err, size_t errlen)
{
    train_lm_opts_default(o);
    o->t.min_lr = -1.0f;               /* unset: lr / 10 */
    o->t.ckpt_every = -1;              /* unset: at each evaluation */
    long kib = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        long n = 0;
        int rc = 0, used = 1;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(TRAIN_USAGE, stdout);
            return 1;
        }
#define LONGF(flag, lo, hi, dst) \
        else if (!strcmp(a, flag)) { rc = flag_long(flag, v, lo, hi, &n, err, errlen); dst = n; }
        if (!strcmp(a, "--untied")) {
            o->cfg.shared_classifier = 0;
            used = 0;
        } else if (!strcmp(a, "--resume")) {
            o->resume = 1;
            used = 0;
        } else if (!strcmp(a, "--force")) {
            o->force = 1;
            used = 0;
        } else if (!strcmp(a, "--quiet")) {
            o->t.quiet = 1;
            used = 0;
        }
        LONGF("--dim", 1, LLM_MAX_DIM, o->cfg.dim)
        LONGF("--layers", 1, LLM_MAX_LAYERS, o->cfg.n_layers)
        LONGF("--heads", 1, LLM_MAX_DIM, o->cfg.n_heads)
        LONGF("--kv-heads", 1, LLM_MAX_DIM, o->cfg.n_kv_heads)
        LONGF("--hidden", 1, LLM_MAX_DIM, o->cfg.hidden_dim)
        LONGF("--seq-len", 2, 65536, o->cfg.seq_len)
        LONGF("--vocab", 259, 65536, o->cfg.vocab_size)
        LONGF("--batch", 1, 1 << 20, o->t.batch)
        LONGF("--steps", 1, 1L << 40, o->t.steps)
        LONGF("--stop-at", 1, 1L << 40, o->t.stop_at)
        LONGF("--warmup", 0, 1L << 40, o->t.warmup)
        LONGF("--eval-every", 0, 1L << 40, o->t.eval_every)
        LONGF("--eval-batches", 1, 1 << 20, o->t.eval_batches)
        LONGF("--ckpt-every", 0, 1L << 40, o->t.ckpt_every)
        LONGF("--log-every", 1, 1L << 40, o->t.log_every)
        LONGF("--seed", 0, LONG_MAX, o->seed)
        LONGF("--data-seed", 0, LONG_MAX, o->data_seed)
        LONGF("--zero", 0, 2, o->t.zero)
        LONGF("--bucket-kb", 1, 1 << 20, kib)
        else if (!strcmp(a, "-w") || !strcmp(a, "--world-size"))
            rc = flag_long(a, v, 1, 64, &n, err, errlen), o->world = (int)n;
        else if (!strcmp(a, "--lr"))
            rc = flag_float(a, v, 0.0f, &o->t.lr, err, errlen);
        else if (!strcmp(a, "--min-lr"))
            rc = flag_float(a, v, 0.0f, &o->t.min_lr, err, errlen);
        else if (!strcmp(a, "--wd"))
            rc = flag_float(a, v, 0.0f, &o->t.weight_decay, err, errlen);
        else if (!strcmp(a, "--clip"))
            rc = flag_float(a, v, 0.0f, &o->t.clip, err, errlen);
        else if (!strcmp(a, "--out") || !strcmp(a, "--trace")) {
            if (!v || !*v) {
                snprintf(err, errlen, "mlsys-lab train: %s needs a value", a);
                return 2;
            }
            if (!strcmp(a, "--out"))
                o->out = v;
            else
                o->trace = v;
        } else if (!strcmp(a, "--data-bytes")) {
            uint64_t b;
            if (!v || mlsys_parse_size(v, &b) != 0 || b < 1024 || b > (1ull << 32)) {
                snprintf(err, errlen, "mlsys-lab train: --data-bytes '%s': expected a size "
                         "from 1K to 4G", v ? v : "");
                return 2;
            }
            o->data_bytes = (size_t)b;
        } else if (!strcmp(a, "--sync")) {
            if (v && !strcmp(v, "ddp"))
                o->t.sync = TRAIN_SYNC_DDP;
            else if (v && !strcmp(v, "allreduce"))
                o->t.sync = TRAIN_SYNC_ALLREDUCE;
            else {
                snprintf(err, errlen, "mlsys-lab train: --sync '%s': expected ddp or allreduce",
                         v ? v : "");
                return 2;
            }
        } else if (used) {
            snprintf(err, errlen, "mlsys-lab train: unknown flag '%s' (see mlsys-lab train "
                     "--help)", a);
            return 2;
        }
#undef LONGF
        if (rc)
            return rc;
        i += used;
    }
    if (kib)
        o->t.bucket_bytes = (size_t)kib << 10;
    if (o->t.min_lr < 0)
        o->t.min_lr = o->t.lr / 10.0f;
    if (o->t.ckpt_every < 0)
        o->t.ckpt_every = o->t.eval_every;
    return 0;
}

/* ---- the job ---- */

/* What every rank of the job shares (inherited through fork). */
typedef struct train_job {
    const train_lm_opts *o;
    const llm_datakit *kit;
    llm_config cfg;
    const llm_weights *init_w;          /* resume: the checkpoint's weights */
    const llm_train_state *st;          /* resume: its optimizer state */
} train_job;

static int train_job_rank(mlsys_comm *c, void *arg)
{
    const train_job *j = arg;
    return train_lm_rank(c, j->o, j->kit, &j->cfg, j->init_w, j->st);
}

int train_main(int argc, char **argv)
{
    train_lm_opts o;
    char err[1024];
    int rc = train_parse(&o, argc, argv, err, sizeof err);
    if (rc == 1)
        return 0;
    if (rc) {
        fprintf(stderr, "%s\n", err);
        return 2;
    }
    train_job j;
    memset(&j, 0, sizeof j);
    j.o = &o;
    llm_weights w0;
    llm_train_state st;
    llm_datakit kit;
    memset(&w0, 0, sizeof w0);
    memset(&st, 0, sizeof st);
    memset(&kit, 0, sizeof kit);
    int have_w = 0, have_st = 0, have_kit = 0;
    rc = 2;
    char bin_path[PATH_MAX], train_path[PATH_MAX];
    if (snprintf(bin_path, sizeof bin_path, "%s/model.bin", o.out) >= (int)sizeof bin_path ||
        snprintf(train_path, sizeof train_path, "%s/model.train", o.out) >=
            (int)sizeof train_path) {
        fprintf(stderr, "mlsys-lab train: --out %s: the name is too long\n", o.out);
        goto done;
    }
    if (o.resume) {
        /* everything that --resume needs is read and cross-checked before a rank starts */
        if (llm_checkpoint_read(bin_path, &j.cfg, &w0, err, sizeof err) != 0) {
            fprintf(stderr, "mlsys-lab train: cannot resume: %s\n", err);
            goto done;
        }
        have_w = 1;
        if (llm_train_state_read(train_path, &j.cfg, &st, err, sizeof err) != 0) {
            fprintf(stderr, "mlsys-lab train: cannot resume: %s\n", err);
            goto done;
        }
        have_st = 1;
        if (st.weights_hash != llm_weights_hash(&w0)) {
            fprintf(stderr, "mlsys-lab train: cannot resume: %s does not belong to %s (the "
                    "weights hash differs)\n", train_path, bin_path);
            goto done;
        }
        o.cfg.vocab_size = j.cfg.vocab_size;   /* the data kit must rebuild this tokenizer */
        j.init_w = &w0;
        j.st = &st;
    } else {
        struct stat sb;
        if (stat(bin_path, &sb) == 0 && !o.force) {
            fprintf(stderr, "mlsys-lab train: %s exists: --resume continues it, --force starts "
                    "over (the old model stays until the first checkpoint replaces it)\n",
                    bin_path);
            goto done;
        }
        j.cfg = o.cfg;
    }
    if (train_lm_check(&o, &j.cfg, err, sizeof err) != 0) {
        fprintf(stderr, "mlsys-lab train: %s\n", err);
        goto done;
    }
    llm_datakit_opts ko = {.seed = o.data_seed, .train_bytes = o.data_bytes,
                           .vocab_size = o.cfg.vocab_size};
    if (llm_datakit_build(&kit, &ko, err, sizeof err) != 0) {
        fprintf(stderr, "mlsys-lab train: the data kit: %s\n", err);
        goto done;
    }
    have_kit = 1;
    j.kit = &kit;
    if (kit.tok.vocab_size != j.cfg.vocab_size) {
        fprintf(stderr, "mlsys-lab train: the tokenizer has %d ids, the model %d\n",
                kit.tok.vocab_size, j.cfg.vocab_size);
        goto done;
    }
    if (kit.n_train_ids < (size_t)j.cfg.seq_len + 2 || kit.n_val_ids < (size_t)j.cfg.seq_len + 2) {
        fprintf(stderr, "mlsys-lab train: %zu training / %zu validation tokens are too few "
                "for windows of %d: raise --data-bytes\n", kit.n_train_ids, kit.n_val_ids,
                j.cfg.seq_len);
        goto done;
    }
    if (mkdir(o.out, 0755) != 0 && errno != EEXIST) {
        fprintf(stderr, "mlsys-lab train: --out %s: cannot create it: %s\n", o.out,
                strerror(errno));
        goto done;
    }
    char tok_path[PATH_MAX + 16];
    snprintf(tok_path, sizeof tok_path, "%s/tokenizer.bin", o.out);
    if (llm_tokfile_write(tok_path, &kit.tok, err, sizeof err) != 0) {
        fprintf(stderr, "mlsys-lab train: %s\n", err);
        goto done;
    }
    if (!o.t.quiet)
        printf("train: data kit seed %llu: %zu train / %zu val tokens, vocab %d (%.2f s)\n",
               (unsigned long long)o.data_seed, kit.n_train_ids, kit.n_val_ids,
               kit.tok.vocab_size, kit.corpus_s + kit.bpe_s + kit.encode_s);
    fflush(stdout);

    char trace_tmp[PATH_MAX + 32] = "";
    if (o.trace && runner_trace_prepare(o.trace, trace_tmp, sizeof trace_tmp, err,
                                        sizeof err) != 0) {
        fprintf(stderr, "mlsys-lab train: %s\n", err);
        goto done;
    }
    mlsys_launch_opts lo;
    memset(&lo, 0, sizeof lo);
    lo.world_size = o.world;
    lo.timeout_ms = 300000;
    lo.master_port = 29500;
    lo.backend = "shm";
    lo.trace_capacity = o.trace ? 65536 : 0;
    runner_spec spec = {.fn = train_job_rank, .arg = &j};
    mlsys_job *job = runner_start(&lo, &spec, err, sizeof err);
    if (!job) {
        fprintf(stderr, "mlsys-lab train: %s\n", err);
        if (trace_tmp[0])
            unlink(trace_tmp);
        goto done;
    }
    mlsys_job_install_signal_stop();
    trace_buf tb = {0};
    mlsys_job_sink sink = {NULL, trace_buf_collect, &tb};
    char why[256];
    rc = mlsys_job_wait(job, o.trace ? &sink : NULL, -1, why, sizeof why);
    int stopped = mlsys_job_stop_requested();
    if (o.trace) {
        if (stopped || runner_trace_commit(o.trace, trace_tmp, &tb, mlsys_job_t0_ns(job)) != 0)
            unlink(trace_tmp);
        else if (!o.t.quiet)
            printf("trace: %zu events in %s (mlsys-lab replay %s shows the loss curves)\n",
                   tb.n, o.trace, o.trace);
    }
    free(tb.ev);
    mlsys_job_free(job);
    if (rc) {
        fprintf(stderr, "mlsys-lab train: %s\n", why);
        rc = stopped ? 130 : 1;
    }
done:
    if (have_kit)
        llm_datakit_free(&kit);
    if (have_w)
        llm_weights_free(&w0);
    if (have_st)
        llm_train_state_free(&st);
    return rc;
}
