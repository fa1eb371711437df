/* train.c - `mlsys-lab train`: the parent parses and validates everything (flags, the
 * checkpoint to resume, the data kit) before any rank starts, so bad input costs one line
 * and exit 2; then the launcher forks the ranks, and each trains its share of every batch
 * with the gradients averaged by chapter 5's DDP engine. Rank 0 prints, plots and writes
 * the checkpoints (atomically: a good checkpoint is never cut short). */
#include "train.h"
#include "../job/runner.h"
#include "../../core/trace_values.h"
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
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

static void opts_default(train_opts *o)
{
    memset(o, 0, sizeof *o);
    o->cfg.dim = 128;
    o->cfg.n_layers = 5;
    o->cfg.n_heads = 4;
    o->cfg.n_kv_heads = 2;
    o->cfg.hidden_dim = 352;
    o->cfg.seq_len = 128;
    o->cfg.vocab_size = 512;
    o->cfg.shared_classifier = 1;
    o->batch = 32;
    o->steps = 1000;
    o->warmup = 100;
    o->eval_every = 100;
    o->eval_batches = 4;
    o->ckpt_every = -1;
    o->log_every = 10;
    o->lr = 3e-3f;
    o->min_lr = -1.0f;
    o->weight_decay = 0.1f;
    o->clip = 1.0f;
    o->beta1 = 0.9f;
    o->beta2 = 0.95f;
    o->eps = 1e-8f;
    o->seed = 1337;
    o->data_seed = 1;
    o->world = 1;
    o->bucket_bytes = 256 << 10;
    o->out = "out";
}

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

int train_parse(train_opts *o, int argc, char **argv, char *err, size_t errlen)
{
    opts_default(o);
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
            o->quiet = 1;
            used = 0;
        }
        LONGF("--dim", 1, LLM_MAX_DIM, o->cfg.dim)
        LONGF("--layers", 1, LLM_MAX_LAYERS, o->cfg.n_layers)
        LONGF("--heads", 1, LLM_MAX_DIM, o->cfg.n_heads)
        LONGF("--kv-heads", 1, LLM_MAX_DIM, o->cfg.n_kv_heads)
        LONGF("--hidden", 1, LLM_MAX_DIM, o->cfg.hidden_dim)
        LONGF("--seq-len", 2, 65536, o->cfg.seq_len)
        LONGF("--vocab", 259, 65536, o->cfg.vocab_size)
        LONGF("--batch", 1, 1 << 20, o->batch)
        LONGF("--steps", 1, 1L << 40, o->steps)
        LONGF("--stop-at", 1, 1L << 40, o->stop_at)
        LONGF("--warmup", 0, 1L << 40, o->warmup)
        LONGF("--eval-every", 0, 1L << 40, o->eval_every)
        LONGF("--eval-batches", 1, 1 << 20, o->eval_batches)
        LONGF("--ckpt-every", 0, 1L << 40, o->ckpt_every)
        LONGF("--log-every", 1, 1L << 40, o->log_every)
        LONGF("--seed", 0, LONG_MAX, o->seed)
        LONGF("--data-seed", 0, LONG_MAX, o->data_seed)
        LONGF("--zero", 0, 2, o->zero)
        LONGF("--bucket-kb", 1, 1 << 20, kib)
        else if (!strcmp(a, "-w") || !strcmp(a, "--world-size"))
            rc = flag_long(a, v, 1, 64, &n, err, errlen), o->world = (int)n;
        else if (!strcmp(a, "--lr"))
            rc = flag_float(a, v, 0.0f, &o->lr, err, errlen);
        else if (!strcmp(a, "--min-lr"))
            rc = flag_float(a, v, 0.0f, &o->min_lr, err, errlen);
        else if (!strcmp(a, "--wd"))
            rc = flag_float(a, v, 0.0f, &o->weight_decay, err, errlen);
        else if (!strcmp(a, "--clip"))
            rc = flag_float(a, v, 0.0f, &o->clip, err, errlen);
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
                o->sync = TRAIN_SYNC_DDP;
            else if (v && !strcmp(v, "allreduce"))
                o->sync = TRAIN_SYNC_ALLREDUCE;
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
        o->bucket_bytes = (size_t)kib << 10;
    if (o->min_lr < 0)
        o->min_lr = o->lr / 10.0f;
    if (o->ckpt_every < 0)
        o->ckpt_every = o->eval_every;
    return 0;
}

int train_check(const train_opts *o, const llm_config *cfg, char *err, size_t errlen)
{
    llm_config c = *cfg;
    char why[256];
    if (llm_config_check(&c, why, sizeof why) != 0) {
        snprintf(err, errlen, "mlsys-lab train: the model does not fit together: %s", why);
        return 2;
    }
    if (o->world > o->batch) {
        snprintf(err, errlen, "mlsys-lab train: world size %d is larger than the batch (%d "
                 "sequences): every rank needs at least one", o->world, o->batch);
        return 2;
    }
    if (o->batch % o->world) {
        snprintf(err, errlen, "mlsys-lab train: the batch (%d) does not divide among %d ranks",
                 o->batch, o->world);
        return 2;
    }
    if (o->zero && o->world < 2) {
        snprintf(err, errlen, "mlsys-lab train: --zero %d shards across ranks: it needs "
                 "--world-size 2 or more", o->zero);
        return 2;
    }
    return 0;
}

/* ---- the per-rank trainer ---- */

static void grad_hook(void *u, int i)
{
    train_ctx *t = u;
    /* with an own classifier the RoPE tables sit between rms_final and wcls: one more index */
    int idx = t->gap >= 0 && i >= t->gap ? i + 1 : i;
    ddp_grad_ready(t->d, idx);
}

int train_ctx_init(train_ctx *t, mlsys_comm *c, const train_opts *o, const llm_datakit *kit,
                   const llm_config *cfg, const llm_weights *init_w,
                   const llm_train_state *st, char *err, size_t errlen)
{
    memset(t, 0, sizeof *t);
    t->c = c;
    t->rank = c ? mlsys_rank(c) : 0;
    t->world = c ? mlsys_size(c) : 1;
    t->o = o;
    t->kit = kit;
    t->cfg = *cfg;
    t->gap = -1;
    if (llm_config_check(&t->cfg, err, errlen) != 0)
        return -1;
    if (o->batch % t->world) {
        snprintf(err, errlen, "batch %d does not divide among %d ranks", o->batch, t->world);
        return -1;
    }
    t->Bl = o->batch / t->world;
    t->T = t->cfg.seq_len;
    if (llm_weights_alloc(&t->w, &t->cfg, err, errlen))
        return -1;
    /* the gradients: the same carving as the weights, but in the communication heap
     * (mlsys_alloc_aligned), so the peers' all-reduce reads them without a copy */
    t->g = t->w;
    t->g_bytes = (t->w.n_floats * sizeof(float) + 4095) & ~(size_t)4095;
    t->g.mem = mlsys_alloc_aligned(t->g_bytes);
    float **gp[] = {&t->g.token_embedding, &t->g.rms_att, &t->g.wq, &t->g.wk, &t->g.wv,
                    &t->g.wo, &t->g.rms_ffn, &t->g.w1, &t->g.w2, &t->g.w3, &t->g.rms_final,
                    &t->g.freq_cis_real, &t->g.freq_cis_imag, &t->g.wcls};
    for (size_t i = 0; i < sizeof gp / sizeof gp[0]; i++)
        *gp[i] = t->g.mem + (*gp[i] - t->w.mem);
    if (init_w)
        memcpy(t->w.mem, init_w->mem, t->w.n_floats * sizeof(float));
    else
        nn_tf_init_weights(&t->w, &t->cfg, o->seed);
    if (nn_tf_init(&t->m, &t->cfg, t->Bl, t->T) != 0) {
        snprintf(err, errlen, "cannot size the activations for %d x %d", t->Bl, t->T);
        return -1;
    }
    t->ids = mlsys_xcalloc((size_t)2 * t->Bl * t->T, sizeof(int));
    t->tgt = t->ids + (size_t)t->Bl * t->T;

    /* ZeRO: the flat vector, padded to a multiple of the world size, is cut into equal
     * shards; this rank keeps the optimizer state of its shard only (stage 1), and with
     * stage 2 receives only its shard of the averaged gradient (reduce_scatter) */
    t->zero = c && t->world > 1 ? o->zero : 0;
    t->zS = (t->w.n_floats + (size_t)t->world - 1) / (size_t)t->world;
    size_t lo = 0, hi = t->w.n_floats;
    if (t->zero) {
        lo = (size_t)t->rank * t->zS;
        hi = lo + t->zS < t->w.n_floats ? lo + t->zS : t->w.n_floats;
        t->zbuf = mlsys_alloc_aligned(t->world * t->zS * sizeof(float));
    }

    /* AdamW per trainable range (its part inside this rank's shard under ZeRO); RMSNorm
     * gains are not decayed (a gain decayed to 0 would shut its features off) */
    t->nranges = llm_weights_param_ranges(&t->cfg, t->roff, t->rlen);
    size_t moff = 0;
    for (int r = 0; r < t->nranges; r++) {
        const float *p = t->w.mem + t->roff[r];
        int is_norm = p == t->w.rms_att || p == t->w.rms_ffn || p == t->w.rms_final;
        size_t a = t->roff[r] > lo ? t->roff[r] : lo;
        size_t b = t->roff[r] + t->rlen[r] < hi ? t->roff[r] + t->rlen[r] : hi;
        t->ooff[r] = a;
        t->olen[r] = b > a ? b - a : 0;
        nn_adamw_init(&t->opt[r], o->lr, o->beta1, o->beta2, o->eps,
                      is_norm ? 0.0f : o->weight_decay, t->ooff[r], t->olen[r]);
        t->opt_bytes += 2 * t->olen[r] * sizeof(float);
        if (st && t->olen[r]) {
            size_t in = moff + (t->ooff[r] - t->roff[r]);
            memcpy(t->opt[r].m, st->m + in, t->olen[r] * sizeof(float));
            memcpy(t->opt[r].v, st->v + in, t->olen[r] * sizeof(float));
            t->opt[r].steps = (long)st->step;
        }
        moff += t->rlen[r];
    }
    if (st) {
        t->step = (long)st->step;
        t->tokens_seen = st->tokens_seen;
    }

    /* the flat gradient seen as tensors for the DDP engine, in file order; with an own
     * classifier the RoPE tables are one more (always ready, all zero) tensor */
    if (c && t->world > 1 && o->sync == TRAIN_SYNC_DDP && t->zero != 2) {
        nn_params *p = &t->view;
        nn_params_init(p);
        int n = nn_tf_tensor_count(&t->cfg);
        char name[NN_NAME_MAX];
        size_t off, len, end = 0;
        for (int i = 0; i < n; i++) {
            nn_tf_tensor(&t->cfg, &t->w, i, &off, &len, name, sizeof name);
            if (off > end) {                  /* the RoPE gap */
                t->gap = p->count;
                nn_params_add1(p, "rope_tables", (int)(off - end));
            }
            nn_params_add1(p, name, (int)len);
            end = off + len;
        }
        /* point the declared tensors at our buffers instead of allocating new ones */
        size_t o2 = 0;
        for (int i = 0; i < p->count; i++) {
            p->t[i].offset = o2;
            p->t[i].data = t->w.mem + o2;
            p->t[i].grad = t->g.mem + o2;
            o2 += p->t[i].numel;
        }
        p->numel = o2;
        p->data = t->w.mem;
        p->grad = t->g.mem;
        if (ddp_create(&t->d, c, p, o->bucket_bytes, o->bucket_bytes / 4) != 0) {
            snprintf(err, errlen, "cannot build the DDP engine over %zu floats", o2);
            return -1;
        }
    }
    return 0;
}

void train_ctx_fini(train_ctx *t)
{
    if (t->d)
        ddp_free(t->d);
    free(t->view.t);
    if (t->zbuf)
        mlsys_free_aligned(t->zbuf, t->world * t->zS * sizeof(float));
    for (int r = 0; r < t->nranges; r++)
        nn_adamw_fini(&t->opt[r]);
    nn_tf_fini(&t->m);
    llm_weights_free(&t->w);
    if (t->g.mem)
        mlsys_free_aligned(t->g.mem, t->g_bytes);
    free(t->ids);
    memset(t, 0, sizeof *t);
}

/* Window i of step s starts at a position drawn from a counter-based stream keyed by the
 * data seed: stateless, so a resumed run draws exactly what the straight run drew, and the
 * global batch is the same for any world size (rank r takes windows r·Bl .. r·Bl+Bl-1). */
void train_batch(const train_ctx *t, long s, int *ids, int *tgt)
{
    size_t n = t->kit->n_train_ids, span = n - (size_t)t->T - 1;
    for (int b = 0; b < t->Bl; b++) {
        mlsys_rng r;
        mlsys_rng_seed(&r, t->o->data_seed * 0x9E3779B97F4A7C15ull + 17);
        r.ctr = (uint64_t)s * (uint64_t)t->o->batch + (uint64_t)t->rank * t->Bl + (uint64_t)b;
        size_t pos = (size_t)(mlsys_rng_u64(&r) % span);
        const int *src = t->kit->train_ids + pos;
        memcpy(ids + (size_t)b * t->T, src, (size_t)t->T * sizeof(int));
        memcpy(tgt + (size_t)b * t->T, src + 1, (size_t)t->T * sizeof(int));
    }
}

int train_grad(train_ctx *t, float *loss)
{
    train_batch(t, t->step, t->ids, t->tgt);
    memset(t->g.mem, 0, t->g.n_floats * sizeof(float));
    float l = nn_tf_forward(&t->m, &t->w, t->ids, t->tgt, t->Bl, t->T);
    if (t->zero == 2) {
        /* ZeRO-2: every rank sums only its own shard of the gradient (reduce_scatter, in
         * place in the padded buffer: shard r lands at zbuf + r·S, its flat position) */
        nn_tf_backward(&t->m, &t->w, &t->g, t->ids, t->tgt, 1.0f, NULL, NULL);
        size_t P = (size_t)t->world * t->zS;
        memcpy(t->zbuf, t->g.mem, t->g.n_floats * sizeof(float));
        memset(t->zbuf + t->g.n_floats, 0, (P - t->g.n_floats) * sizeof(float));
        float *mine = t->zbuf + (size_t)t->rank * t->zS;
        int rc = mlsys_reduce_scatter(t->c, t->zbuf, mine, t->zS, MLSYS_F32, MLSYS_SUM);
        if (rc)
            return rc;
        nn_scale(mine, t->zS, 1.0f / (float)t->world);
    } else if (t->d) {
        ddp_begin(t->d);
        if (t->gap >= 0)
            ddp_grad_ready(t->d, t->gap);
        nn_tf_backward(&t->m, &t->w, &t->g, t->ids, t->tgt, 1.0f, grad_hook, t);
        int rc = ddp_finish(t->d);
        if (rc)
            return rc;
    } else {
        nn_tf_backward(&t->m, &t->w, &t->g, t->ids, t->tgt, 1.0f, NULL, NULL);
        if (t->c && t->world > 1) {
            /* the plain way: one blocking all-reduce of the whole flat gradient after the
             * backward, then the average */
            int rc = mlsys_allreduce(t->c, t->g.mem, t->g.mem, t->g.n_floats, MLSYS_F32,
                                     MLSYS_SUM);
            if (rc)
                return rc;
            nn_scale(t->g.mem, t->g.n_floats, 1.0f / (float)t->world);
        }
    }
    double ls = l;
    if (t->c && t->world > 1) {
        int rc = mlsys_allreduce(t->c, &ls, &ls, 1, MLSYS_F64, MLSYS_SUM);
        if (rc)
            return rc;
        ls /= t->world;
    }
    *loss = (float)ls;
    return 0;
}

/* Warm-up: lr·(s+1)/warmup, so the first step already moves. Then half a cosine from lr
 * down to min_lr at the last step: small steps at the end settle the loss. */
float train_lr(const train_opts *o, long s)
{
    if (s < o->warmup)
        return o->lr * (float)(s + 1) / (float)o->warmup;
    if (o->steps <= o->warmup)
        return o->lr;
    double p = (double)(s - o->warmup) / (double)(o->steps - o->warmup);
    if (p > 1.0)
        p = 1.0;
    return o->min_lr + (float)(0.5 * (1.0 + cos(M_PI * p))) * (o->lr - o->min_lr);
}

int train_step(train_ctx *t, float *loss, float *lr)
{
    int rc = train_grad(t, loss);
    if (rc)
        return rc;
    /* global-norm clipping: the gradients are the same on every rank after the average, so
     * every rank computes the same norm and scales the same way */
    double ss = 0.0;
    float *G = t->zero == 2 ? t->zbuf : t->g.mem;   /* where the (shard's) gradient lives */
    if (t->zero == 2) {
        /* each rank holds a shard: the squares are summed across ranks */
        for (int r = 0; r < t->nranges; r++)
            ss += nn_sumsq(G + t->ooff[r], t->olen[r]);
        if ((rc = mlsys_allreduce(t->c, &ss, &ss, 1, MLSYS_F64, MLSYS_SUM)) != 0)
            return rc;
    } else {
        for (int r = 0; r < t->nranges; r++)
            ss += nn_sumsq(G + t->roff[r], t->rlen[r]);
    }
    t->grad_norm = sqrt(ss);
    if (t->o->clip > 0 && t->grad_norm > t->o->clip) {
        float s = (float)(t->o->clip / t->grad_norm);
        for (int r = 0; r < t->nranges; r++)
            nn_scale(G + t->ooff[r], t->olen[r], s);
    }
    *lr = train_lr(t->o, t->step);
    for (int r = 0; r < t->nranges; r++) {
        t->opt[r].lr = *lr;
        nn_adamw_step(&t->opt[r], t->w.mem + t->ooff[r], G + t->ooff[r]);
    }
    if (t->zero) {
        /* every rank updated its shard only: all_gather the parameters back together */
        float *mine = t->zbuf + (size_t)t->rank * t->zS;
        size_t lo = (size_t)t->rank * t->zS;
        size_t n = lo < t->w.n_floats ? t->w.n_floats - lo : 0;
        n = n < t->zS ? n : t->zS;
        memcpy(mine, t->w.mem + lo, n * sizeof(float));
        if ((rc = mlsys_allgather(t->c, mine, t->zbuf, t->zS, MLSYS_F32)) != 0)
            return rc;
        memcpy(t->w.mem, t->zbuf, t->w.n_floats * sizeof(float));
    }
    t->step++;
    t->tokens_seen += (uint64_t)t->o->batch * t->T;
    return 0;
}

/* Fixed, non-overlapping windows from the start of the validation ids; window j goes to
 * rank j mod world, and the sum of the per-window mean losses is all-reduced. */
int train_eval(train_ctx *t, double *loss)
{
    size_t avail = (t->kit->n_val_ids - 1) / (size_t)t->T;
    size_t want = (size_t)t->o->eval_batches * t->o->batch;
    size_t nw = want < avail ? want : avail;
    double sum[2] = {0.0, 0.0};
    size_t j = (size_t)t->rank;
    while (j < nw) {
        int nb = 0;
        for (; nb < t->Bl && j < nw; nb++, j += (size_t)t->world) {
            const int *src = t->kit->val_ids + j * (size_t)t->T;
            memcpy(t->ids + (size_t)nb * t->T, src, (size_t)t->T * sizeof(int));
            memcpy(t->tgt + (size_t)nb * t->T, src + 1, (size_t)t->T * sizeof(int));
        }
        float l = nn_tf_forward(&t->m, &t->w, t->ids, t->tgt, nb, t->T);
        sum[0] += (double)l * nb;
        sum[1] += nb;
    }
    if (t->c && t->world > 1) {
        int rc = mlsys_allreduce(t->c, sum, sum, 2, MLSYS_F64, MLSYS_SUM);
        if (rc)
            return rc;
    }
    *loss = sum[1] > 0 ? sum[0] / sum[1] : NAN;
    return 0;
}

/* ---- the job ---- */

typedef struct train_job {
    const train_opts *o;
    const llm_datakit *kit;
    llm_config cfg;
    const llm_weights *init_w;          /* resume: the checkpoint's weights */
    const llm_train_state *st;          /* resume: its optimizer state */
    char bin_path[PATH_MAX], train_path[PATH_MAX];
} train_job;

/* Optimizer moments of every range into st (m or v: which = 0 or 1). Under ZeRO each rank
 * has its shard's: they are put at their flat positions and all_gathered (collective). */
static int gather_moments(train_ctx *t, llm_train_state *st, int which)
{
    float *dst = which ? st->v : st->m;
    if (!t->zero) {
        size_t moff = 0;
        for (int r = 0; r < t->nranges; r++) {
            memcpy(dst + moff, which ? t->opt[r].v : t->opt[r].m, t->rlen[r] * sizeof(float));
            moff += t->rlen[r];
        }
        return 0;
    }
    float *mine = t->zbuf + (size_t)t->rank * t->zS;
    memset(mine, 0, t->zS * sizeof(float));
    for (int r = 0; r < t->nranges; r++)
        if (t->olen[r])
            memcpy(t->zbuf + t->ooff[r], which ? t->opt[r].v : t->opt[r].m,
                   t->olen[r] * sizeof(float));
    int rc = mlsys_allgather(t->c, mine, t->zbuf, t->zS, MLSYS_F32);
    size_t moff = 0;
    for (int r = 0; r < t->nranges && !rc; r++) {
        memcpy(dst + moff, t->zbuf + t->roff[r], t->rlen[r] * sizeof(float));
        moff += t->rlen[r];
    }
    return rc;
}

/* What the checkpoint records of the run, from its flags (llm_run_compare reads it back). */
static void run_record_of(const train_opts *o, llm_run_record *r)
{
    memset(r, 0, sizeof *r);
    r->data_seed = o->data_seed;
    r->data_bytes = o->data_bytes ? o->data_bytes : LLM_DATAKIT_TRAIN_BYTES;
    r->init_seed = o->seed;
    r->steps = (uint64_t)o->steps;
    r->warmup = (uint64_t)o->warmup;
    r->batch = (uint32_t)o->batch;
    r->world = (uint32_t)o->world;
    r->zero = (uint32_t)o->zero;
    r->sync = (uint32_t)o->sync;
    r->lr = o->lr;
    r->min_lr = o->min_lr;
    r->weight_decay = o->weight_decay;
    r->clip = o->clip;
}

/* Collective (ZeRO gathers the moments); rank 0 writes. 0, -1 with err (rank 0), or an
 * MLSYS_* code of the gather. */
static int save_checkpoint(train_ctx *t, const train_job *j, char *err, size_t errlen)
{
    llm_train_state st;
    if (llm_train_state_alloc(&st, &t->cfg) != 0) {
        snprintf(err, errlen, "cannot allocate the optimizer state to save");
        return -1;
    }
    int grc = gather_moments(t, &st, 0);
    if (!grc)
        grc = gather_moments(t, &st, 1);
    if (grc || t->rank != 0) {
        llm_train_state_free(&st);
        if (grc)
            snprintf(err, errlen, "gathering the optimizer state: %s", mlsys_errmsg(t->c));
        return grc ? -1 : 0;
    }
    st.step = (uint64_t)t->step;
    st.tokens_seen = t->tokens_seen;
    st.data_pos = (uint64_t)t->step;
    st.rng_key = t->o->data_seed;
    st.rng_ctr = (uint64_t)t->step * (uint64_t)t->o->batch;
    st.lr = t->o->lr;
    st.beta1 = t->o->beta1;
    st.beta2 = t->o->beta2;
    st.eps = t->o->eps;
    st.weight_decay = t->o->weight_decay;
    run_record_of(t->o, &st.run);
    (void)j;
    /* model.train (weights, moments, run) in one rename, then model.bin: see ckpt.c */
    int rc = llm_ckpt_write(t->o->out, &t->cfg, &t->w, &st, err, errlen);
    llm_train_state_free(&st);
    return rc;
}

static void fmt_eta(double s, char *out, size_t n)
{
    if (!(s >= 0) || s > 1e7)
        snprintf(out, n, "?");
    else if (s >= 3600)
        snprintf(out, n, "%dh%02dm", (int)(s / 3600), (int)(s / 60) % 60);
    else
        snprintf(out, n, "%dm%02ds", (int)(s / 60), (int)s % 60);
}

static long peak_rss_kib(void)
{
    struct rusage ru;
    return getrusage(RUSAGE_SELF, &ru) == 0 ? ru.ru_maxrss : -1;
}

static int train_rank(mlsys_comm *c, void *arg)
{
    train_job *j = arg;
    const train_opts *o = j->o;
    train_ctx t;
    char err[512];
    int rank = mlsys_rank(c), rc = 0;
    if (train_ctx_init(&t, c, o, j->kit, &j->cfg, j->init_w, j->st, err, sizeof err) != 0) {
        fprintf(stderr, "mlsys-lab train: rank %d: %s\n", rank, err);
        train_ctx_fini(&t);
        return 1;
    }
    int tty = rank == 0 && !o->quiet && isatty(STDOUT_FILENO);
    long stop = o->stop_at > 0 && o->stop_at < o->steps ? o->stop_at : o->steps;
    long first = t.step;
    /* throughput is timed from the end of the run's first step: that step also pays for
     * the first touch of every activation page (and the BLAS buffers), once */
    double t0 = mlsys_now_s(), t1 = 0, last_val = NAN, shown = 0;
    float loss = NAN, lr = 0;
    if (rank == 0 && !o->quiet)
        printf("train: %zu parameters (dim %d, %d layers, %d heads, %d kv heads, hidden %d, "
               "vocab %d, seq %d), batch %d on %d rank%s, steps %ld..%ld of %ld\n",
               llm_param_count(&t.cfg), t.cfg.dim, t.cfg.n_layers, t.cfg.n_heads,
               t.cfg.n_kv_heads, t.cfg.hidden_dim, t.cfg.vocab_size, t.cfg.seq_len, o->batch,
               t.world, t.world == 1 ? "" : "s", first, stop, o->steps);
    while (t.step < stop && !rc) {
        if ((rc = train_step(&t, &loss, &lr)) != 0)
            break;
        long s = t.step;
        if (rank == 0)          /* every rank has the same loss: one curve, not N */
            mlsys_emit_point(c, "train loss", (double)s, loss);
        double now = mlsys_now_s(), el = now - t0;
        if (s == first + 1)
            t1 = now;
        double tps = s > first + 1 ? (double)(s - first - 1) * o->batch * t.T / (now - t1)
                                   : (double)o->batch * t.T / (el > 0 ? el : 1e-9);
        double eta = (double)(stop - s) * o->batch * t.T / tps;
        int do_eval = o->eval_every > 0 && (s % o->eval_every == 0) && s != stop;
        /* a terminal gets the line rewritten in place (at most 10 times a second), a file or
         * a pipe every log_every steps */
        int show = tty ? now - shown >= 0.1 : s % o->log_every == 0;
        if (rank == 0 && !o->quiet && (show || s == stop || do_eval)) {
            shown = now;
            char e[32];
            fmt_eta(eta, e, sizeof e);
            printf("%sstep %6ld/%ld | loss %.4f | lr %.2e | norm %.2f | %.0f tok/s | ETA %s%s",
                   tty ? "\r" : "", s, o->steps, loss, lr, t.grad_norm, tps, e,
                   tty ? "\033[K" : "\n");
            fflush(stdout);
        }
        if (do_eval) {
            if ((rc = train_eval(&t, &last_val)) != 0)
                break;
            if (rank == 0)
                mlsys_emit_point(c, "val loss", (double)s, last_val);
            if (rank == 0 && !o->quiet)
                printf("%sstep %6ld | val loss %.4f\n", tty ? "\n" : "", s, last_val);
        }
        if (o->ckpt_every > 0 && s % o->ckpt_every == 0 && s != stop) {
            int bad = save_checkpoint(&t, j, err, sizeof err);
            if (bad)
                fprintf(stderr, "mlsys-lab train: rank %d: checkpoint at step %ld: %s\n", rank, s,
                        err);
            if ((rc = mlsys_broadcast(c, &bad, 1, MLSYS_I32, 0)) == 0 && bad)
                rc = 1;
        }
    }
    double end = mlsys_now_s(), el = end - t0;
    if (!rc && tty)
        printf("\n");
    if (!rc)
        rc = train_eval(&t, &last_val);
    if (!rc) {
        if (rank == 0)
            mlsys_emit_point(c, "val loss", (double)t.step, last_val);
        int bad = save_checkpoint(&t, j, err, sizeof err);
        if (bad)
            fprintf(stderr, "mlsys-lab train: rank %d: checkpoint: %s\n", rank, err);
        if ((rc = mlsys_broadcast(c, &bad, 1, MLSYS_I32, 0)) == 0 && bad)
            rc = 1;
    }
    double rss[2] = {(double)peak_rss_kib(), (double)peak_rss_kib()};
    if (!rc)
        rc = mlsys_allreduce(c, rss, rss, 1, MLSYS_F64, MLSYS_MAX);
    if (!rc && rank == 0 && !o->quiet) {
        double tps = t.step > first + 1 && end > t1
                         ? (double)(t.step - first - 1) * o->batch * t.T / (end - t1)
                         : (double)(t.step - first) * o->batch * t.T / (el > 0 ? el : 1e-9);
        printf("done: step %ld | train loss %.4f | val loss %.4f | %.1f s | %.0f tok/s | "
               "peak RSS rank 0 %.1f MiB, max over ranks %.1f MiB | optimizer state %.2f MiB "
               "per rank%s\nsaved %s\n", t.step, loss, last_val, el, tps, rss[1] / 1024.0,
               rss[0] / 1024.0, t.opt_bytes / 1048576.0, t.zero ? " (ZeRO shard)" : "",
               j->bin_path);
    }
    /* the runtime's message names the rank already; an aborted job was another rank's
     * failure, which the launcher reports */
    if (rc && rc != 1 && rc != MLSYS_ERR_ABORTED)
        fprintf(stderr, "mlsys-lab train: %s\n", mlsys_errmsg(c));
    train_ctx_fini(&t);
    return rc ? 1 : 0;
}

int train_rank_run(mlsys_comm *c, const train_opts *o)
{
    /* every rank builds the same data kit from the seed (deterministic, ~0.1 s per 2 MiB) */
    llm_datakit kit;
    char err[512];
    llm_datakit_opts ko = {.seed = o->data_seed, .train_bytes = o->data_bytes,
                           .vocab_size = o->cfg.vocab_size};
    if (llm_datakit_build(&kit, &ko, err, sizeof err) != 0) {
        fprintf(stderr, "mlsys-lab train: rank %d: the data kit: %s\n", mlsys_rank(c), err);
        return 2;
    }
    train_job j;
    memset(&j, 0, sizeof j);
    j.o = o;
    j.kit = &kit;
    j.cfg = o->cfg;
    j.cfg.vocab_size = kit.tok.vocab_size;
    int rc = train_check(o, &j.cfg, err, sizeof err) ? 2 : 0;
    if (rc)
        fprintf(stderr, "%s\n", err);
    if (!rc && (mkdir(o->out, 0755) == 0 || errno == EEXIST)) {
        snprintf(j.bin_path, sizeof j.bin_path, "%s/model.bin", o->out);
        snprintf(j.train_path, sizeof j.train_path, "%s/model.train", o->out);
        rc = train_rank(c, &j);
    } else if (!rc) {
        fprintf(stderr, "mlsys-lab train: --out %s: %s\n", o->out, strerror(errno));
        rc = 2;
    }
    llm_datakit_free(&kit);
    return rc;
}

int train_main(int argc, char **argv)
{
    train_opts o;
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
    if (snprintf(j.bin_path, sizeof j.bin_path, "%s/model.bin", o.out) >= (int)sizeof j.bin_path
        || snprintf(j.train_path, sizeof j.train_path, "%s/model.train", o.out) >=
           (int)sizeof j.train_path) {
        fprintf(stderr, "mlsys-lab train: --out %s: the name is too long\n", o.out);
        goto done;
    }
    int bin_stale = 0;
    char notes[512] = "";
    if (o.resume) {
        /* everything that --resume needs is read and cross-checked before a rank starts:
         * the checkpoint (one file, ckpt.c), and that this run continues the one it holds */
        llm_run_record given;
        run_record_of(&o, &given);
        if (llm_ckpt_read(o.out, &j.cfg, &w0, &st, &bin_stale, err, sizeof err) != 0) {
            fprintf(stderr, "mlsys-lab train: cannot resume: %s\n", err);
            goto done;
        }
        have_w = have_st = 1;
        if (llm_run_compare(&st, &given, notes, sizeof notes, err, sizeof err) != 0) {
            fprintf(stderr, "mlsys-lab train: cannot resume: %s\n", err);
            goto done;
        }
        o.cfg.vocab_size = j.cfg.vocab_size;   /* the data kit must rebuild this tokenizer */
        j.init_w = &w0;
        j.st = &st;
    } else {
        struct stat sb;
        if (stat(j.bin_path, &sb) == 0 && !o.force) {
            fprintf(stderr, "mlsys-lab train: %s exists: --resume continues it, --force starts "
                    "over (the old model stays until the first checkpoint replaces it)\n",
                    j.bin_path);
            goto done;
        }
        j.cfg = o.cfg;
    }
    if (train_check(&o, &j.cfg, err, sizeof err) != 0) {
        fprintf(stderr, "%s\n", err);
        goto done;
    }
    /* sizes in range that cannot fit: refused here, not in a rank halfway through */
    if (llm_train_mem_check(&j.cfg, o.batch, o.world, o.zero, o.data_bytes, o.resume, err,
                            sizeof err) != 0) {
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
    /* what interrupted checkpoints left behind; a resumed model.bin one checkpoint behind
     * (an interruption between model.train and model.bin) is brought level first */
    int swept = llm_ckpt_sweep(o.out);
    if (bin_stale && llm_checkpoint_write(j.bin_path, &j.cfg, &w0, err, sizeof err) != 0) {
        fprintf(stderr, "mlsys-lab train: %s\n", err);
        goto done;
    }
    if (!o.quiet && o.resume && (bin_stale || notes[0]))
        printf("train: resuming %s at step %llu%s%s%s%s\n", o.out, (unsigned long long)st.step,
               notes[0] ? " with " : "", notes, notes[0] ? " (recorded from here on)" : "",
               bin_stale ? "; model.bin rewritten from model.train" : "");
    if (!o.quiet && swept)
        printf("train: removed %d temporar%s of an interrupted write in %s\n", swept,
               swept == 1 ? "y" : "ies", o.out);
    char tok_path[PATH_MAX + 16];
    snprintf(tok_path, sizeof tok_path, "%s/tokenizer.bin", o.out);
    if (llm_tokfile_write(tok_path, &kit.tok, err, sizeof err) != 0) {
        fprintf(stderr, "mlsys-lab train: %s\n", err);
        goto done;
    }
    if (!o.quiet)
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
    /* One tiny multiply before the fork: nn_gemm's first call pins OpenBLAS to one thread.
     * Made first in a forked rank it is skipped: the launcher has exported
     * OPENBLAS_NUM_THREADS=1 by then (for exec'd ranks, whose OpenBLAS reads it at load),
     * gemm.c leaves an exported count alone, and this OpenBLAS had read the variable, unset,
     * at our start: each rank ran two BLAS threads on our two cores, and the results
     * depended on it. */
    float one = 1.0f, prod = 0.0f;
    nn_gemm(0, 0, 1, 1, 1, 1.0f, &one, 1, &one, 1, 0.0f, &prod, 1);
    mlsys_launch_opts lo;
    memset(&lo, 0, sizeof lo);
    lo.world_size = o.world;
    lo.timeout_ms = 300000;
    lo.master_port = 29500;
    lo.backend = "shm";
    lo.trace_capacity = o.trace ? 65536 : 0;
    runner_spec spec = {.fn = train_rank, .arg = &j};
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
        else if (!o.quiet)
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
