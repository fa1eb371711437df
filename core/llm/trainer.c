/* trainer.c - data-parallel training of any train_model (trainer.h): each rank takes its
 * share of every batch; the gradients are averaged by chapter 5's DDP engine (buckets
 * launched during backward), by one all-reduce after it, or reduce-scattered to ZeRO-2
 * shards; global-norm clipping, the warm-up + cosine schedule, AdamW per range (on this
 * rank's shard only under ZeRO), evaluation, checkpoints written by rank 0 with the moments
 * gathered, and the rank's loop that prints, plots and saves. */
#include "trainer.h"
#include "../trace_values.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

static const char *who(const train_ctx *t)
{
    return t->o->who ? t->o->who : "mlsys-lab train";
}

static void grad_ready(void *u, int i)
{
    train_ctx *t = u;
    ddp_grad_ready(t->d, i);
}

/* The flat gradient seen as tensors for the DDP engine, pointing at the model's buffers. */
static int ddp_view(train_ctx *t, char *err, size_t errlen)
{
    train_model *m = t->m;
    nn_params *p = &t->view;
    nn_params_init(p);
    char name[NN_NAME_MAX];
    for (int i = 0; i < m->ntensors; i++) {
        size_t off, len;
        m->tensor(m, i, &off, &len, name, sizeof name);
        nn_params_add1(p, name, (int)len);
    }
    /* point the declared tensors at our buffers instead of allocating new ones */
    size_t o2 = 0;
    for (int i = 0; i < p->count; i++) {
        p->t[i].offset = o2;
        p->t[i].data = m->w + o2;
        p->t[i].grad = m->g + o2;
        o2 += p->t[i].numel;
    }
    p->numel = o2;
    p->data = m->w;
    p->grad = m->g;
    if (ddp_create(&t->d, t->c, p, t->o->bucket_bytes, t->o->bucket_bytes / 4) != 0) {
        snprintf(err, errlen, "cannot build the DDP engine over %zu floats", o2);
        return -1;
    }
    return 0;
}

int train_ctx_init(train_ctx *t, mlsys_comm *c, const train_opts *o, train_model *m,
                   const llm_train_state *st, char *err, size_t errlen)
{
    memset(t, 0, sizeof *t);
    t->c = c;
    t->rank = c ? mlsys_rank(c) : 0;
    t->world = c ? mlsys_size(c) : 1;
    t->o = o;
    t->m = m;
    if (o->batch % t->world) {
        snprintf(err, errlen, "batch %d does not divide among %d ranks", o->batch, t->world);
        return -1;
    }
    t->Bl = o->batch / t->world;

    /* ZeRO: the flat vector, padded to a multiple of the world size, is cut into equal
     * shards; this rank keeps the optimizer state of its shard only (stage 1), and with
     * stage 2 receives only its shard of the averaged gradient (reduce_scatter) */
    t->zero = c && t->world > 1 ? o->zero : 0;
    t->zS = (m->n + (size_t)t->world - 1) / (size_t)t->world;
    size_t lo = 0, hi = m->n;
    if (t->zero) {
        lo = (size_t)t->rank * t->zS;
        hi = lo + t->zS < m->n ? lo + t->zS : m->n;
        t->zbuf = mlsys_alloc_aligned(t->world * t->zS * sizeof(float));
    }

    /* AdamW per trainable range (its part inside this rank's shard under ZeRO) */
    size_t moff = 0;
    for (int r = 0; r < m->nranges; r++) {
        size_t a = m->roff[r] > lo ? m->roff[r] : lo;
        size_t b = m->roff[r] + m->rlen[r] < hi ? m->roff[r] + m->rlen[r] : hi;
        t->ooff[r] = a;
        t->olen[r] = b > a ? b - a : 0;
        nn_adamw_init(&t->opt[r], o->lr, o->beta1, o->beta2, o->eps,
                      m->no_decay[r] ? 0.0f : o->weight_decay, t->ooff[r], t->olen[r]);
        t->opt_bytes += 2 * t->olen[r] * sizeof(float);
        if (st && t->olen[r]) {
            size_t in = moff + (t->ooff[r] - m->roff[r]);
            memcpy(t->opt[r].m, st->m + in, t->olen[r] * sizeof(float));
            memcpy(t->opt[r].v, st->v + in, t->olen[r] * sizeof(float));
            t->opt[r].steps = (long)st->step;
        }
        moff += m->rlen[r];
    }
    t->saved_step = -1;
    if (st) {
        t->step = (long)st->step;
        t->saved_step = t->step;
        t->tokens_seen = st->tokens_seen;
    }
    if (c && t->world > 1 && o->sync == TRAIN_SYNC_DDP && t->zero != 2)
        return ddp_view(t, err, errlen);
    return 0;
}

void train_ctx_fini(train_ctx *t)
{
    if (t->d)
        ddp_free(t->d);
    free(t->view.t);
    if (t->zbuf)
        mlsys_free_aligned(t->zbuf, t->world * t->zS * sizeof(float));
    for (int r = 0; t->m && r < t->m->nranges; r++)
        nn_adamw_fini(&t->opt[r]);
    memset(t, 0, sizeof *t);
}

int train_grad(train_ctx *t, float *loss)
{
    train_model *m = t->m;
    float l = 0;
    int rc;
    memset(m->g, 0, m->n * sizeof(float));
    if (t->zero == 2) {
        /* ZeRO-2: every rank sums only its own shard of the gradient (reduce_scatter, in
         * place in the padded buffer: shard r lands at zbuf + r·S, its flat position) */
        if ((rc = m->grad(m, t->step, t->rank, t->Bl, NULL, NULL, &l)) != 0)
            return rc;
        size_t P = (size_t)t->world * t->zS;
        memcpy(t->zbuf, m->g, m->n * sizeof(float));
        memset(t->zbuf + m->n, 0, (P - m->n) * sizeof(float));
        float *mine = t->zbuf + (size_t)t->rank * t->zS;
        if ((rc = mlsys_reduce_scatter(t->c, t->zbuf, mine, t->zS, MLSYS_F32, MLSYS_SUM)))
            return rc;
        nn_scale(mine, t->zS, 1.0f / (float)t->world);
    } else if (t->d) {
        ddp_begin(t->d);
        if ((rc = m->grad(m, t->step, t->rank, t->Bl, grad_ready, t, &l)) != 0)
            return rc;
        if ((rc = ddp_finish(t->d)) != 0)
            return rc;
    } else {
        if ((rc = m->grad(m, t->step, t->rank, t->Bl, NULL, NULL, &l)) != 0)
            return rc;
        if (t->c && t->world > 1) {
            /* the plain way: one blocking all-reduce of the whole flat gradient after the
             * backward, then the average */
            if ((rc = mlsys_allreduce(t->c, m->g, m->g, m->n, MLSYS_F32, MLSYS_SUM)) != 0)
                return rc;
            nn_scale(m->g, m->n, 1.0f / (float)t->world);
        }
    }
    double ls = l;
    if (t->c && t->world > 1) {
        if ((rc = mlsys_allreduce(t->c, &ls, &ls, 1, MLSYS_F64, MLSYS_SUM)) != 0)
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
    train_model *m = t->m;
    int rc = train_grad(t, loss);
    if (rc)
        return rc;
    /* global-norm clipping: the gradients are the same on every rank after the average, so
     * every rank computes the same norm and scales the same way */
    double ss = 0.0;
    float *G = t->zero == 2 ? t->zbuf : m->g;   /* where the (shard's) gradient lives */
    if (t->zero == 2) {
        /* each rank holds a shard: the squares are summed across ranks */
        for (int r = 0; r < m->nranges; r++)
            ss += nn_sumsq(G + t->ooff[r], t->olen[r]);
        if ((rc = mlsys_allreduce(t->c, &ss, &ss, 1, MLSYS_F64, MLSYS_SUM)) != 0)
            return rc;
    } else {
        for (int r = 0; r < m->nranges; r++)
            ss += nn_sumsq(G + m->roff[r], m->rlen[r]);
    }
    t->grad_norm = sqrt(ss);
    /* a NaN or an infinity anywhere in the loss or the gradient: AdamW would spread it to
     * every weight it touches; stop before it does */
    if (!isfinite(*loss) || !isfinite(t->grad_norm))
        return TRAIN_DIVERGED;
    if (t->o->clip > 0 && t->grad_norm > t->o->clip) {
        float s = (float)(t->o->clip / t->grad_norm);
        for (int r = 0; r < m->nranges; r++)
            nn_scale(G + t->ooff[r], t->olen[r], s);
    }
    *lr = train_lr(t->o, t->step);
    for (int r = 0; r < m->nranges; r++) {
        t->opt[r].lr = *lr;
        nn_adamw_step(&t->opt[r], m->w + t->ooff[r], G + t->ooff[r]);
    }
    if (t->zero) {
        /* every rank updated its shard only: all_gather the parameters back together */
        float *mine = t->zbuf + (size_t)t->rank * t->zS;
        size_t lo = (size_t)t->rank * t->zS;
        size_t n = lo < m->n ? m->n - lo : 0;
        n = n < t->zS ? n : t->zS;
        memcpy(mine, m->w + lo, n * sizeof(float));
        if ((rc = mlsys_allgather(t->c, mine, t->zbuf, t->zS, MLSYS_F32)) != 0)
            return rc;
        memcpy(m->w, t->zbuf, m->n * sizeof(float));
    }
    t->step++;
    t->tokens_seen += (uint64_t)t->o->batch * (uint64_t)m->per_example;
    return 0;
}

/* The model sums its share of the fixed examples; the sums are all-reduced. */
int train_eval(train_ctx *t, double *loss)
{
    double sum[2] = {0.0, 0.0};
    size_t want = (size_t)t->o->eval_batches * (size_t)t->o->batch;
    int rc = t->m->eval(t->m, t->rank, t->world, t->Bl, want, &sum[0], &sum[1]);
    if (rc)
        return rc;
    if (t->c && t->world > 1 && (rc = mlsys_allreduce(t->c, sum, sum, 2, MLSYS_F64, MLSYS_SUM)))
        return rc;
    *loss = sum[1] > 0 ? sum[0] / sum[1] : NAN;
    return 0;
}

/* Optimizer moments of every range into dst (m or v: which = 0 or 1). Under ZeRO each rank
 * has its shard's: they are put at their flat positions and all_gathered (collective). */
static int gather_moments(train_ctx *t, float *dst, int which)
{
    train_model *m = t->m;
    if (!t->zero) {
        size_t moff = 0;
        for (int r = 0; r < m->nranges; r++) {
            memcpy(dst + moff, which ? t->opt[r].v : t->opt[r].m, m->rlen[r] * sizeof(float));
            moff += m->rlen[r];
        }
        return 0;
    }
    float *mine = t->zbuf + (size_t)t->rank * t->zS;
    memset(mine, 0, t->zS * sizeof(float));
    for (int r = 0; r < m->nranges; r++)
        if (t->olen[r])
            memcpy(t->zbuf + t->ooff[r], which ? t->opt[r].v : t->opt[r].m,
                   t->olen[r] * sizeof(float));
    int rc = mlsys_allgather(t->c, mine, t->zbuf, t->zS, MLSYS_F32);
    size_t moff = 0;
    for (int r = 0; r < m->nranges && !rc; r++) {
        memcpy(dst + moff, t->zbuf + m->roff[r], m->rlen[r] * sizeof(float));
        moff += m->rlen[r];
    }
    return rc;
}

int train_save(train_ctx *t, char *err, size_t errlen)
{
    train_model *m = t->m;
    llm_train_state st;
    memset(&st, 0, sizeof st);
    for (int r = 0; r < m->nranges; r++)
        st.n += m->rlen[r];
    st.m = calloc(2 * st.n + 1, sizeof(float));     /* as llm_train_state_alloc: one block */
    if (!st.m) {
        snprintf(err, errlen, "cannot allocate the optimizer state to save");
        return -1;
    }
    st.v = st.m + st.n;
    int grc = gather_moments(t, st.m, 0);
    if (!grc)
        grc = gather_moments(t, st.v, 1);
    if (grc || t->rank != 0) {
        llm_train_state_free(&st);
        if (grc)
            snprintf(err, errlen, "gathering the optimizer state: %s", mlsys_errmsg(t->c));
        return grc ? -1 : 0;
    }
    for (size_t i = 0; i < m->n; i++)
        if (!isfinite(m->w[i])) {
            snprintf(err, errlen, "weight %zu of %zu is %g after step %ld: not saved (the "
                     "last good checkpoint stays)", i, m->n, (double)m->w[i], t->step);
            llm_train_state_free(&st);
            return -1;
        }
    st.step = (uint64_t)t->step;
    st.tokens_seen = t->tokens_seen;
    st.data_pos = (uint64_t)t->step;
    st.rng_ctr = (uint64_t)t->step * (uint64_t)t->o->batch;
    st.lr = t->o->lr;
    st.beta1 = t->o->beta1;
    st.beta2 = t->o->beta2;
    st.eps = t->o->eps;
    st.weight_decay = t->o->weight_decay;
    int rc = m->save(m, &st, err, errlen);
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

/* A checkpoint every rank agrees on: rank 0's failure is broadcast. 0, 1, or an MLSYS_*. */
static int checkpoint(train_ctx *t, long s)
{
    char err[512];
    int bad = train_save(t, err, sizeof err);
    if (!bad)
        t->saved_step = t->step;
    if (bad && s >= 0)
        fprintf(stderr, "%s: rank %d: checkpoint at step %ld: %s\n", who(t), t->rank, s, err);
    else if (bad)
        fprintf(stderr, "%s: rank %d: checkpoint: %s\n", who(t), t->rank, err);
    int rc = t->c ? mlsys_broadcast(t->c, &bad, 1, MLSYS_I32, 0) : 0;
    return rc ? rc : bad ? 1 : 0;
}

int train_run(train_ctx *t)
{
    const train_opts *o = t->o;
    mlsys_comm *c = t->c;
    int rank = t->rank, rc = 0;
    int tty = rank == 0 && !o->quiet && mlsys_stdout_is_terminal();
    long stop = o->stop_at > 0 && o->stop_at < o->steps ? o->stop_at : o->steps;
    long first = t->step;
    double per_step = (double)o->batch * t->m->per_example;
    /* throughput is timed from the end of the run's first step: that step also pays for
     * the first touch of every activation page (and the BLAS buffers), once */
    double t0 = mlsys_now_s(), t1 = 0, last_val = NAN, shown = 0;
    float loss = NAN, lr = 0;
    if (rank == 0 && !o->quiet) {
        char what[256];
        t->m->describe(t->m, what, sizeof what);
        printf("train: %s, batch %d on %d rank%s, steps %ld..%ld of %ld\n", what, o->batch,
               t->world, t->world == 1 ? "" : "s", first, stop, o->steps);
    }
    while (t->step < stop && !rc) {
        if ((rc = train_step(t, &loss, &lr)) == TRAIN_DIVERGED) {
            if (rank == 0) {
                char kept[64] = "no checkpoint was written";
                if (t->saved_step >= 0)
                    snprintf(kept, sizeof kept, "the checkpoint of step %ld stays",
                             t->saved_step);
                fprintf(stderr, "%s%s: step %ld: the loss is %g and the gradient norm %g: "
                        "training diverged (lower --lr, or --clip); stopped, %s\n",
                        tty ? "\n" : "", who(t), t->step + 1, (double)loss, t->grad_norm,
                        kept);
                return TRAIN_RUN_SAID;
            }
            return 0;
        }
        if (rc)
            break;
        long s = t->step;
        if (rank == 0)          /* every rank has the same loss: one curve, not N */
            mlsys_emit_point(c, "train loss", (double)s, loss);
        double now = mlsys_now_s(), el = now - t0;
        if (s == first + 1)
            t1 = now;
        double tps = s > first + 1 ? (double)(s - first - 1) * per_step / (now - t1)
                                   : per_step / (el > 0 ? el : 1e-9);
        double eta = (double)(stop - s) * per_step / tps;
        int do_eval = o->eval_every > 0 && (s % o->eval_every == 0) && s != stop;
        /* a terminal gets the line rewritten in place (at most 10 times a second), a file or
         * a pipe every log_every steps */
        int show = tty ? now - shown >= 0.1 : s % o->log_every == 0;
        if (rank == 0 && !o->quiet && (show || s == stop || do_eval)) {
            shown = now;
            char e[32];
            fmt_eta(eta, e, sizeof e);
            printf("%sstep %6ld/%ld | loss %.4f | lr %.2e | norm %.2f | %.0f tok/s | ETA %s%s",
                   tty ? "\r" : "", s, o->steps, loss, lr, t->grad_norm, tps, e,
                   tty ? "\033[K" : "\n");
            fflush(stdout);
        }
        if (do_eval) {
            if ((rc = train_eval(t, &last_val)) != 0)
                break;
            if (rank == 0)
                mlsys_emit_point(c, "val loss", (double)s, last_val);
            if (rank == 0 && !o->quiet)
                printf("%sstep %6ld | val loss %.4f\n", tty ? "\n" : "", s, last_val);
        }
        if (o->ckpt_every > 0 && s % o->ckpt_every == 0 && s != stop)
            rc = checkpoint(t, s);
    }
    double end = mlsys_now_s(), el = end - t0;
    if (!rc && tty)
        printf("\n");
    if (!rc)
        rc = train_eval(t, &last_val);
    if (!rc) {
        if (rank == 0)
            mlsys_emit_point(c, "val loss", (double)t->step, last_val);
        rc = checkpoint(t, -1);
    }
    double rss[2] = {(double)peak_rss_kib(), (double)peak_rss_kib()};
    if (!rc && c)
        rc = mlsys_allreduce(c, rss, rss, 1, MLSYS_F64, MLSYS_MAX);
    if (!rc && rank == 0 && !o->quiet) {
        double tps = t->step > first + 1 && end > t1
                         ? (double)(t->step - first - 1) * per_step / (end - t1)
                         : (double)(t->step - first) * per_step / (el > 0 ? el : 1e-9);
        printf("done: step %ld | train loss %.4f | val loss %.4f | %.1f s | %.0f tok/s | "
               "peak RSS rank 0 %.1f MiB, max over ranks %.1f MiB | optimizer state %.2f MiB "
               "per rank%s\nsaved %s\n", t->step, loss, last_val, el, tps, rss[1] / 1024.0,
               rss[0] / 1024.0, t->opt_bytes / 1048576.0, t->zero ? " (ZeRO shard)" : "",
               t->m->path ? t->m->path : "");
    }
    /* the runtime's message names the rank already; an aborted job is another rank's
     * failure, which the launcher reports in its one line */
    if (rc && rc != 1 && rc != MLSYS_ERR_ABORTED)
        fprintf(stderr, "%s: %s\n", who(t), mlsys_errmsg(c));
    return rc ? 1 : 0;
}
