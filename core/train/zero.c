/* zero.c - ZeRO stages 1-3 for the chapter's MLP, on the runtime's ring collectives so that
 * the bytes each rank sends follow the textbook formulas exactly. Every buffer is allocated
 * through zalloc/tfree, which count the bytes as they are allocated: the memory the lab
 * prints is what was really held, not a formula. Tensor t is padded to pad[t] (a multiple of
 * N, zeros) and rank r owns the piece [r·pad/N, (r+1)·pad/N) of it (nn_shard_range). */
#include "train.h"
#include <stdlib.h>
#include <string.h>

static float *zalloc(size_t n, size_t *counter)
{
    *counter += n * sizeof(float);
    return mlsys_alloc_aligned(n * sizeof(float));
}

static float *talloc(zero *z, size_t n)
{
    z->mem.temp_now += n * sizeof(float);
    if (z->mem.temp_now > z->mem.temp_peak)
        z->mem.temp_peak = z->mem.temp_now;
    return mlsys_alloc_aligned(n * sizeof(float));
}

static void tfree(zero *z, float *p, size_t n)
{
    z->mem.temp_now -= n * sizeof(float);
    mlsys_free_aligned(p, n * sizeof(float));
}

void zero_formula_mem(int stage, size_t P, int N, int K, size_t max_tensor, size_t max_layer,
                      zero_mem *m)
{
    size_t full = 4 * P, shard = 4 * P / (size_t)N;
    memset(m, 0, sizeof *m);
    m->params = stage >= 3 ? shard : full;
    m->grads = stage >= 2 ? shard : full;
    m->optim = (size_t)K * P / (size_t)N;
    /* stage 2: one layer's full gradients (weight and bias) at a time; stage 3: a layer's
     * gathered parameters and its full gradients, during that layer's backward */
    (void)max_tensor;
    m->temp_peak = stage == 2 ? 4 * max_layer : stage == 3 ? 8 * max_layer : 0;
}

uint64_t zero_formula_sent(int stage, size_t P, int N)
{
    uint64_t unit = 4 * (uint64_t)P / (uint64_t)N * (uint64_t)(N - 1);   /* (N-1)/N · 4Ψ' */
    switch (stage) {
    case 1: return 3 * unit;    /* all_reduce (2) + all_gather of the parameters (1) */
    case 2: return 2 * unit;    /* reduce_scatter (1) + all_gather (1) */
    case 3: return 3 * unit;    /* all_gather in forward, again in backward, reduce_scatter */
    default: return 2 * unit;   /* DDP: all_reduce */
    }
}

int zero_create(zero **out, mlsys_comm *c, int stage, const mlp_shape *s, const nn_params *p,
                zero_optim opt, int max_batch)
{
    *out = NULL;
    int N = mlsys_size(c);
    if (stage < 1 || stage > 3 || p->numel < (size_t)N || p->count != 2 * s->nl)
        return MLSYS_ERR_ARG;
    zero *z = mlsys_xcalloc(1, sizeof *z);
    z->c = c;
    z->stage = stage;
    z->N = N;
    z->r = mlsys_rank(c);
    z->s = *s;
    z->nt = p->count;
    z->opt = opt;
    z->B = max_batch;
    for (int t = 0; t < z->nt; t++) {
        size_t off, len;
        z->numel[t] = p->t[t].numel;
        z->pad[t] = (p->t[t].numel + (size_t)N - 1) / (size_t)N * (size_t)N;
        nn_shard_range(z->pad[t], z->r, N, &off, &len);
        z->piece[t] = len;
        z->poff[t] = z->P;
        z->soff[t] = z->S;
        z->P += z->pad[t];
        z->S += len;
        if (z->pad[t] > z->max_tensor)
            z->max_tensor = z->pad[t];
    }
    for (int l = 0; l < s->nl; l++)
        if (z->pad[2 * l] + z->pad[2 * l + 1] > z->max_layer)
            z->max_layer = z->pad[2 * l] + z->pad[2 * l + 1];
    /* the parameters: a full padded copy (1, 2) or this rank's pieces (3) */
    if (stage < 3) {
        z->W = zalloc(z->P, &z->mem.params);
        for (int t = 0; t < z->nt; t++)
            memcpy(z->W + z->poff[t], p->t[t].data, z->numel[t] * sizeof(float));
    } else {
        z->Ws = zalloc(z->S, &z->mem.params);
        for (int t = 0; t < z->nt; t++) {
            size_t lo = (size_t)z->r * z->piece[t];
            for (size_t i = 0; i < z->piece[t]; i++)
                z->Ws[z->soff[t] + i] = lo + i < z->numel[t] ? p->t[t].data[lo + i] : 0.0f;
        }
    }
    if (stage == 1)
        z->G = zalloc(z->P, &z->mem.grads);
    else
        z->Gs = zalloc(z->S, &z->mem.grads);
    /* the optimizer state of this rank's pieces only */
    for (int t = 0; t < z->nt; t++) {
        size_t first = z->poff[t] + (size_t)z->r * z->piece[t];
        if (opt.adamw) {
            nn_adamw_init(&z->adam[t], opt.lr, 0.9f, 0.999f, 1e-8f, 0.01f, first, z->piece[t]);
            /* m and v: what nn_adamw asked for (its allocation rounds up to pages) */
            z->mem.optim += 2 * z->adam[t].n * sizeof(float);
        } else {
            nn_sgd_init(&z->sgd[t], opt.lr, 0.0f, first, z->piece[t]);
            z->mem.optim += z->sgd[t].velocity ? z->sgd[t].n * sizeof(float) : 0;
        }
    }
    mlp_acts_init(&z->acts, s, max_batch);
    /* ring everywhere, so the bytes sent are the ring formulas */
    mlsys_set_algo(c, MLSYS_COLL_ALLREDUCE, "ring");
    mlsys_set_algo(c, MLSYS_COLL_ALLGATHER, "ring");
    mlsys_set_algo(c, MLSYS_COLL_REDUCE_SCATTER, "ring");
    *out = z;
    return 0;
}

/* Tensor t's full values for use: a view of W (1, 2) or a freshly gathered buffer (3). */
static int use_tensor(zero *z, int t, float **out)
{
    if (z->stage < 3) {
        *out = z->W + z->poff[t];
        return 0;
    }
    *out = talloc(z, z->pad[t]);
    return mlsys_allgather(z->c, z->Ws + z->soff[t], *out, z->piece[t], MLSYS_F32);
}

static void done_tensor(zero *z, int t, float *buf)
{
    if (z->stage == 3)
        tfree(z, buf, z->pad[t]);
}

float zero_step(zero *z, const float *x, const int *y, int B, int *rc)
{
    const mlp_shape *s = &z->s;
    mlp_acts *m = &z->acts;
    float loss = 0;
    *rc = 0;
    m->a[0] = (float *)x;
    /* ---- forward, layer by layer ---- */
    for (int l = 0; l < s->nl && !*rc; l++) {
        float *w = NULL, *b = NULL;
        if ((*rc = use_tensor(z, 2 * l, &w)) == 0 && (*rc = use_tensor(z, 2 * l + 1, &b)) == 0)
            mlp_layer_forward(s, l, w, b, m->a[l], m->a[l + 1], B);
        if (b)
            done_tensor(z, 2 * l + 1, b);
        if (w)
            done_tensor(z, 2 * l, w);
    }
    if (*rc)
        return 0;
    float *dy = m->d[0];
    loss = nn_softmax_ce(dy, m->a[s->nl], y, B, s->dims[s->nl], 1.0f);
    if (z->G)
        memset(z->G, 0, z->P * sizeof(float));
    /* ---- backward: gradients full (1) or reduce_scattered layer by layer (2, 3) ---- */
    for (int l = s->nl - 1; l >= 0 && !*rc; l--) {
        int tw = 2 * l, tb = 2 * l + 1;
        float *dx = (dy == m->d[0]) ? m->d[1] : m->d[0];
        float *w = NULL, *b = NULL, *gw, *gb;
        if ((*rc = use_tensor(z, tw, &w)) == 0)
            *rc = use_tensor(z, tb, &b);
        if (!*rc) {
            if (z->stage == 1) {
                gw = z->G + z->poff[tw];
                gb = z->G + z->poff[tb];
            } else {
                gw = talloc(z, z->pad[tw]);
                gb = talloc(z, z->pad[tb]);
            }
            mlp_layer_backward(s, l, w, gw, gb, m->a[l], dy, dx, B, NULL, NULL);
            if (z->stage >= 2) {
                *rc = mlsys_reduce_scatter(z->c, gw, z->Gs + z->soff[tw], z->piece[tw],
                                           MLSYS_F32, MLSYS_SUM);
                if (!*rc)
                    *rc = mlsys_reduce_scatter(z->c, gb, z->Gs + z->soff[tb], z->piece[tb],
                                               MLSYS_F32, MLSYS_SUM);
                tfree(z, gb, z->pad[tb]);
                tfree(z, gw, z->pad[tw]);
            }
        }
        if (b)
            done_tensor(z, tb, b);
        if (w)
            done_tensor(z, tw, w);
        dy = dx;
    }
    if (*rc)
        return 0;
    /* ---- the average, then this rank's pieces with this rank's optimizer state ---- */
    float n = (float)z->N;
    if (z->stage == 1) {
        if ((*rc = mlsys_allreduce(z->c, z->G, z->G, z->P, MLSYS_F32, MLSYS_SUM)) != 0)
            return 0;
        for (size_t i = 0; i < z->P; i++)
            z->G[i] /= n;
    } else {
        for (size_t i = 0; i < z->S; i++)
            z->Gs[i] /= n;
    }
    for (int t = 0; t < z->nt; t++) {
        size_t mine = z->poff[t] + (size_t)z->r * z->piece[t];
        float *w = z->stage < 3 ? z->W + mine : z->Ws + z->soff[t];
        const float *g = z->stage == 1 ? z->G + mine : z->Gs + z->soff[t];
        if (z->opt.adamw)
            nn_adamw_step(&z->adam[t], w, g);
        else
            nn_sgd_step(&z->sgd[t], w, g);
    }
    /* ---- stages 1 and 2: every rank gets the updated pieces of the others ---- */
    if (z->stage < 3)
        for (int t = 0; t < z->nt && !*rc; t++)
            *rc = mlsys_allgather(z->c, z->W + z->poff[t] + (size_t)z->r * z->piece[t],
                                  z->W + z->poff[t], z->piece[t], MLSYS_F32);
    return loss;
}

int zero_full_params(zero *z, float *out)
{
    size_t at = 0;
    for (int t = 0; t < z->nt; t++) {
        float *w = NULL;
        int rc = use_tensor(z, t, &w);
        if (rc)
            return rc;
        memcpy(out + at, w, z->numel[t] * sizeof(float));
        at += z->numel[t];
        done_tensor(z, t, w);
    }
    return 0;
}

void zero_free(zero *z)
{
    if (!z)
        return;
    if (z->W)
        mlsys_free_aligned(z->W, z->P * sizeof(float));
    if (z->Ws)
        mlsys_free_aligned(z->Ws, z->S * sizeof(float));
    if (z->G)
        mlsys_free_aligned(z->G, z->P * sizeof(float));
    if (z->Gs)
        mlsys_free_aligned(z->Gs, z->S * sizeof(float));
    for (int t = 0; t < z->nt; t++) {
        if (z->opt.adamw)
            nn_adamw_fini(&z->adam[t]);
        else
            nn_sgd_fini(&z->sgd[t]);
    }
    mlp_acts_fini(&z->acts, &z->s);
    free(z);
}
