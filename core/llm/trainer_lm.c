/* trainer_lm.c - the lab's language model as a train_model (trainer.h): the transformer of
 * core/nn over the data kit's token ids, windows drawn from a counter-based stream (so a
 * resumed run and any world size draw the same global batch), validation over fixed
 * windows, checkpoints in llama2.c's format with the ".train" companion; and one rank's whole
 * run, which a lab's rank_main and `mlsys-lab train`'s ranks call. */
#include "trainer.h"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* The tensors in file order, for the DDP engine; with an own classifier the RoPE tables sit
 * between rms_final and wcls and are one more (always ready, all zero) tensor. */
static void lm_tensor(const train_model *b, int i, size_t *off, size_t *len, char *name,
                      size_t namelen)
{
    const train_lm *m = (const train_lm *)b;
    if (m->gap >= 0 && i == m->gap) {
        size_t o0, l0;
        nn_tf_tensor(&m->cfg, &m->w, i - 1, &o0, &l0, NULL, 0);
        nn_tf_tensor(&m->cfg, &m->w, i, off, len, NULL, 0);
        *len = *off - (o0 + l0);
        *off = o0 + l0;
        snprintf(name, namelen, "rope_tables");
        return;
    }
    nn_tf_tensor(&m->cfg, &m->w, m->gap >= 0 && i > m->gap ? i - 1 : i, off, len, name,
                 namelen);
}

typedef struct lm_hook {
    const train_lm *m;
    void (*ready)(void *u, int t);
    void *u;
} lm_hook;

/* nn_tf's tensor i is the trainer's i, or i + 1 past the RoPE gap */
static void lm_ready(void *u, int i)
{
    lm_hook *h = u;
    h->ready(h->u, h->m->gap >= 0 && i >= h->m->gap ? i + 1 : i);
}

void train_lm_batch(const train_lm *m, long s, int rank, int *ids, int *tgt)
{
    /* Window i of step s starts at a position drawn from a counter-based stream keyed by the
     * data seed: stateless, so a resumed run draws exactly what the straight run drew, and
     * the global batch is the same for any world size. */
    size_t n = m->kit->n_train_ids, span = n - (size_t)m->T - 1;
    for (int b = 0; b < m->Bl; b++) {
        mlsys_rng r;
        mlsys_rng_seed(&r, m->data_seed * 0x9E3779B97F4A7C15ull + 17);
        r.ctr = (uint64_t)s * (uint64_t)m->batch + (uint64_t)rank * m->Bl + (uint64_t)b;
        size_t pos = (size_t)(mlsys_rng_u64(&r) % span);
        const int *src = m->kit->train_ids + pos;
        memcpy(ids + (size_t)b * m->T, src, (size_t)m->T * sizeof(int));
        memcpy(tgt + (size_t)b * m->T, src + 1, (size_t)m->T * sizeof(int));
    }
}

static int lm_grad(train_model *b, long step, int rank, int Bl, void (*ready)(void *u, int t),
                   void *u, float *loss)
{
    train_lm *m = (train_lm *)b;
    (void)Bl;                         /* the model was sized for it */
    train_lm_batch(m, step, rank, m->ids, m->tgt);
    *loss = nn_tf_forward(&m->tf, &m->w, m->ids, m->tgt, m->Bl, m->T);
    lm_hook h = {m, ready, u};
    if (ready && m->gap >= 0)
        ready(u, m->gap);
    nn_tf_backward(&m->tf, &m->w, &m->g, m->ids, m->tgt, 1.0f, ready ? lm_ready : NULL, &h);
    return 0;
}

/* Fixed, non-overlapping windows from the start of the validation ids; window j goes to
 * rank j mod world. */
static int lm_eval(train_model *b, int rank, int world, int Bl, size_t want, double *sum,
                   double *count)
{
    train_lm *m = (train_lm *)b;
    size_t avail = (m->kit->n_val_ids - 1) / (size_t)m->T;
    size_t nw = want < avail ? want : avail;
    size_t j = (size_t)rank;
    *sum = *count = 0;
    while (j < nw) {
        int nb = 0;
        for (; nb < Bl && j < nw; nb++, j += (size_t)world) {
            const int *src = m->kit->val_ids + j * (size_t)m->T;
            memcpy(m->ids + (size_t)nb * m->T, src, (size_t)m->T * sizeof(int));
            memcpy(m->tgt + (size_t)nb * m->T, src + 1, (size_t)m->T * sizeof(int));
        }
        float l = nn_tf_forward(&m->tf, &m->w, m->ids, m->tgt, nb, m->T);
        *sum += (double)l * nb;
        *count += nb;
    }
    return 0;
}

static int lm_save(train_model *b, llm_train_state *st, char *err, size_t errlen)
{
    train_lm *m = (train_lm *)b;
    st->rng_key = m->data_seed;
    st->weights_hash = llm_weights_hash(&m->w);
    int rc = llm_checkpoint_write(m->bin_path, &m->cfg, &m->w, err, errlen);
    if (!rc)
        rc = llm_train_state_write(m->train_path, &m->cfg, st, err, errlen);
    return rc;
}

static void lm_describe(const train_model *b, char *out, size_t n)
{
    const train_lm *m = (const train_lm *)b;
    const llm_config *c = &m->cfg;
    snprintf(out, n, "%zu parameters (dim %d, %d layers, %d heads, %d kv heads, hidden %d, "
             "vocab %d, seq %d)", llm_param_count(c), c->dim, c->n_layers, c->n_heads,
             c->n_kv_heads, c->hidden_dim, c->vocab_size, c->seq_len);
}

int train_lm_init(train_lm *m, const llm_config *cfg, const llm_datakit *kit, int batch, int Bl,
                  uint64_t seed, uint64_t data_seed, const llm_weights *init_w, const char *out,
                  char *err, size_t errlen)
{
    memset(m, 0, sizeof *m);
    m->cfg = *cfg;
    m->kit = kit;
    m->batch = batch;
    m->Bl = Bl;
    m->data_seed = data_seed;
    m->gap = -1;
    if (llm_config_check(&m->cfg, err, errlen) != 0)
        return -1;
    m->T = m->cfg.seq_len;
    if (llm_weights_alloc(&m->w, &m->cfg, err, errlen))
        return -1;
    /* the gradients: the same carving as the weights, but in the communication heap
     * (mlsys_alloc_aligned), so the peers' all-reduce reads them without a copy */
    m->g = m->w;
    m->g_bytes = (m->w.n_floats * sizeof(float) + 4095) & ~(size_t)4095;
    m->g.mem = mlsys_alloc_aligned(m->g_bytes);
    float **gp[] = {&m->g.token_embedding, &m->g.rms_att, &m->g.wq, &m->g.wk, &m->g.wv,
                    &m->g.wo, &m->g.rms_ffn, &m->g.w1, &m->g.w2, &m->g.w3, &m->g.rms_final,
                    &m->g.freq_cis_real, &m->g.freq_cis_imag, &m->g.wcls};
    for (size_t i = 0; i < sizeof gp / sizeof gp[0]; i++)
        *gp[i] = m->g.mem + (*gp[i] - m->w.mem);
    if (init_w)
        memcpy(m->w.mem, init_w->mem, m->w.n_floats * sizeof(float));
    else
        nn_tf_init_weights(&m->w, &m->cfg, seed);
    if (nn_tf_init(&m->tf, &m->cfg, m->Bl, m->T) != 0) {
        snprintf(err, errlen, "cannot size the activations for %d x %d", m->Bl, m->T);
        return -1;
    }
    m->ids = mlsys_xcalloc((size_t)2 * m->Bl * m->T, sizeof(int));
    m->tgt = m->ids + (size_t)m->Bl * m->T;

    train_model *b = &m->base;
    b->w = m->w.mem;
    b->g = m->g.mem;
    b->n = m->w.n_floats;
    /* AdamW per trainable range; RMSNorm gains are not decayed (a gain decayed to 0 would
     * shut its features off) */
    b->nranges = llm_weights_param_ranges(&m->cfg, b->roff, b->rlen);
    for (int r = 0; r < b->nranges; r++) {
        const float *p = m->w.mem + b->roff[r];
        b->no_decay[r] = p == m->w.rms_att || p == m->w.rms_ffn || p == m->w.rms_final;
    }
    /* the tensors, and where the RoPE tables leave a gap among them */
    m->ntf = nn_tf_tensor_count(&m->cfg);
    size_t off, len, end = 0;
    for (int i = 0; i < m->ntf; i++) {
        nn_tf_tensor(&m->cfg, &m->w, i, &off, &len, NULL, 0);
        if (off > end)
            m->gap = i;
        end = off + len;
    }
    b->ntensors = m->ntf + (m->gap >= 0);
    b->tensor = lm_tensor;
    b->per_example = m->T;
    b->grad = lm_grad;
    b->eval = lm_eval;
    b->save = lm_save;
    b->describe = lm_describe;
    if (out) {
        if (snprintf(m->bin_path, sizeof m->bin_path, "%s/model.bin", out) >=
                (int)sizeof m->bin_path ||
            snprintf(m->train_path, sizeof m->train_path, "%s/model.train", out) >=
                (int)sizeof m->train_path) {
            snprintf(err, errlen, "--out %s: the name is too long", out);
            return -1;
        }
        b->path = m->bin_path;
    }
    return 0;
}

void train_lm_fini(train_lm *m)
{
    nn_tf_fini(&m->tf);
    llm_weights_free(&m->w);
    if (m->g.mem)
        mlsys_free_aligned(m->g.mem, m->g_bytes);
    free(m->ids);
    memset(m, 0, sizeof *m);
}

void train_lm_opts_default(train_lm_opts *o)
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
    o->t.batch = 32;
    o->t.steps = 1000;
    o->t.warmup = 100;
    o->t.eval_every = 100;
    o->t.eval_batches = 4;
    o->t.ckpt_every = 100;
    o->t.log_every = 10;
    o->t.lr = 3e-3f;
    o->t.min_lr = 3e-4f;
    o->t.weight_decay = 0.1f;
    o->t.clip = 1.0f;
    o->t.beta1 = 0.9f;
    o->t.beta2 = 0.95f;
    o->t.eps = 1e-8f;
    o->seed = 1337;
    o->data_seed = 1;
    o->world = 1;
    o->t.bucket_bytes = 256 << 10;
    o->out = "out";
}

int train_lm_check(const train_lm_opts *o, const llm_config *cfg, char *err, size_t errlen)
{
    llm_config c = *cfg;
    char why[256];
    if (llm_config_check(&c, why, sizeof why) != 0) {
        snprintf(err, errlen, "the model does not fit together: %s", why);
        return 2;
    }
    if (o->world > o->t.batch) {
        snprintf(err, errlen, "world size %d is larger than the batch (%d sequences): every "
                 "rank needs at least one", o->world, o->t.batch);
        return 2;
    }
    if (o->t.batch % o->world) {
        snprintf(err, errlen, "the batch (%d) does not divide among %d ranks", o->t.batch,
                 o->world);
        return 2;
    }
    if (o->t.zero && o->world < 2) {
        snprintf(err, errlen, "--zero %d shards across ranks: it needs --world-size 2 or more",
                 o->t.zero);
        return 2;
    }
    return 0;
}

int train_lm_rank(mlsys_comm *c, const train_lm_opts *o, const llm_datakit *kit,
                  const llm_config *cfg, const llm_weights *init_w, const llm_train_state *st)
{
    const char *who = o->t.who ? o->t.who : "mlsys-lab train";
    int rank = c ? mlsys_rank(c) : 0, world = c ? mlsys_size(c) : 1;
    char err[512];
    train_lm m;
    train_ctx t;
    memset(&t, 0, sizeof t);
    int rc = 1;
    if (train_lm_init(&m, cfg, kit, o->t.batch, o->t.batch / world, o->seed, o->data_seed,
                      init_w, o->out, err, sizeof err) != 0 ||
        train_ctx_init(&t, c, &o->t, &m.base, st, err, sizeof err) != 0) {
        fprintf(stderr, "%s: rank %d: %s\n", who, rank, err);
        goto out;
    }
    rc = train_run(&t);
out:
    train_ctx_fini(&t);
    train_lm_fini(&m);
    return rc;
}

int train_rank_run(mlsys_comm *c, const train_lm_opts *o)
{
    const char *who = o->t.who ? o->t.who : "mlsys-lab train";
    int rank = c ? mlsys_rank(c) : 0;
    /* every rank builds the same data kit from the seed (deterministic, ~0.1 s per 2 MiB) */
    llm_datakit kit;
    char err[512];
    llm_datakit_opts ko = {.seed = o->data_seed, .train_bytes = o->data_bytes,
                           .vocab_size = o->cfg.vocab_size};
    if (llm_datakit_build(&kit, &ko, err, sizeof err) != 0) {
        fprintf(stderr, "%s: rank %d: the data kit: %s\n", who, rank, err);
        return 2;
    }
    llm_config cfg = o->cfg;
    cfg.vocab_size = kit.tok.vocab_size;
    int rc = train_lm_check(o, &cfg, err, sizeof err) ? 2 : 0;
    if (rc)
        fprintf(stderr, "%s: %s\n", who, err);
    if (!rc && (mkdir(o->out, 0755) == 0 || errno == EEXIST)) {
        rc = train_lm_rank(c, o, &kit, &cfg, NULL, NULL);
    } else if (!rc) {
        fprintf(stderr, "%s: --out %s: %s\n", who, o->out, strerror(errno));
        rc = 2;
    }
    llm_datakit_free(&kit);
    return rc;
}
