/* ddp.c - our DistributedDataParallel. The gradients of every tensor sit back to back in one
 * flat vector (nn_params), so a bucket is just a range of it: no packing, no copy. Buckets
 * are cut from the END of the vector (backward produces the last layer's gradients first),
 * the first one small so that the first all-reduce starts early. When the backward has
 * written the last gradient that overlaps a bucket, that bucket's all-reduce is issued
 * non-blocking and runs on the progress thread while backward goes on; finish() waits once,
 * then divides by N. Also the MLP of the chapter's labs, written layer by layer so that the
 * engines can hook between layers (DDP launches buckets, ZeRO-3 gathers parameters). */
#include "ddp.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int ddp_bucket_count(size_t n, size_t f, size_t b)
{
    if (n == 0)
        return 0;
    if (n <= f)
        return 1;
    return 1 + (int)((n - f + b - 1) / b);
}

int ddp_create(ddp **out, mlsys_comm *c, nn_params *p, size_t bucket_bytes,
               size_t first_bucket_bytes)
{
    *out = NULL;
    if (!p || !p->grad || p->numel == 0 || bucket_bytes < sizeof(float) ||
        first_bucket_bytes < sizeof(float))
        return MLSYS_ERR_ARG;
    ddp *d = mlsys_xcalloc(1, sizeof *d);
    d->c = c;
    d->p = p;
    d->bucket_elems = bucket_bytes / sizeof(float);
    d->first_elems = first_bucket_bytes / sizeof(float);
    d->overlap = 1;
    d->nbuckets = ddp_bucket_count(p->numel, d->first_elems, d->bucket_elems);
    d->b = mlsys_xcalloc((size_t)d->nbuckets, sizeof *d->b);
    d->ready = mlsys_xcalloc((size_t)p->count, sizeof *d->ready);
    size_t end = p->numel;
    for (int k = 0; k < d->nbuckets; k++) {
        size_t want = k == 0 ? d->first_elems : d->bucket_elems;
        size_t n = want < end ? want : end;
        ddp_bucket *b = &d->b[k];
        b->off = end - n;
        b->n = n;
        end -= n;
        /* tensors overlapping [off, off + n) */
        b->t_lo = -1;
        for (int t = 0; t < p->count; t++) {
            size_t lo = p->t[t].offset, hi = lo + p->t[t].numel;
            if (lo < b->off + b->n && hi > b->off) {
                if (b->t_lo < 0)
                    b->t_lo = t;
                b->t_hi = t;
            }
        }
    }
    ddp_begin(d);
    *out = d;
    return 0;
}

int ddp_broadcast_params(ddp *d)
{
    if (!d->c)
        return 0;
    return mlsys_broadcast(d->c, d->p->data, d->p->numel, MLSYS_F32, 0);
}

void ddp_begin(ddp *d)
{
    memset(d->ready, 0, (size_t)d->p->count * sizeof *d->ready);
    for (int k = 0; k < d->nbuckets; k++) {
        d->b[k].pending = d->b[k].t_hi - d->b[k].t_lo + 1;
        d->b[k].launched = 0;
        d->b[k].req = NULL;
    }
    d->late = 0;
    d->nlaunched = 0;
}

void ddp_show(ddp *d)
{
    if (!d->c || !mlsys_tracing(d->c))
        return;
    mlsys_mem_info m = {.pool = DDP_POOL, .op = MLSYS_MEM_POOL, .block = -1, .owner = -1,
                        .index = 0, .aux = d->nbuckets};
    mlsys_emit_mem(d->c, &m, d->bucket_elems * sizeof(float), "buckets");
    for (int k = 0; k < d->nbuckets; k++) {
        char name[32];
        snprintf(name, sizeof name, "bucket %d", k);
        m = (mlsys_mem_info){.pool = DDP_POOL, .op = MLSYS_MEM_OWNER, .block = -1, .owner = k,
                             .index = -1};
        mlsys_emit_mem(d->c, &m, 0, name);
        m = (mlsys_mem_info){.pool = DDP_POOL, .op = MLSYS_MEM_ALLOC, .block = k, .owner = k,
                             .refs = 1, .index = 0};
        mlsys_emit_mem(d->c, &m, d->b[k].n * sizeof(float), NULL);
    }
    d->emit = 1;
}

/* The blocks view's record of bucket k: its mean gradient (WRITE), then in flight (BUSY)
 * while its all-reduce runs. */
static void emit_bucket(ddp *d, int k, int busy)
{
    if (!d->emit || !d->c || !mlsys_tracing(d->c))
        return;
    const float *g = d->p->grad + d->b[k].off;
    double s = 0;
    for (size_t i = 0; i < d->b[k].n; i++)
        s += g[i];
    mlsys_mem_info m = {.pool = DDP_POOL, .op = MLSYS_MEM_WRITE, .block = k, .owner = k,
                        .index = -1};
    mlsys_emit_mem_value(d->c, &m, d->b[k].n * sizeof(float), NULL, s / (double)d->b[k].n);
    if (busy) {
        m.op = MLSYS_MEM_BUSY;
        mlsys_emit_mem(d->c, &m, d->b[k].n * sizeof(float), NULL);
    }
}

static int launch(ddp *d, int k)
{
    ddp_bucket *b = &d->b[k];
    b->launched = 1;
    if (d->nlaunched < (int)(sizeof d->launch_order / sizeof d->launch_order[0]))
        d->launch_order[d->nlaunched] = k;
    d->nlaunched++;
    if (!d->c)
        return 0;
    emit_bucket(d, k, 1);
    return mlsys_iallreduce(d->c, d->p->grad + b->off, d->p->grad + b->off, b->n, MLSYS_F32,
                            MLSYS_SUM, &b->req);
}

int ddp_grad_ready(ddp *d, int t)
{
    if (t < 0 || t >= d->p->count || d->ready[t])
        return MLSYS_ERR_ARG;
    d->ready[t] = 1;
    for (int k = 0; k < d->nbuckets; k++) {
        ddp_bucket *b = &d->b[k];
        if (t < b->t_lo || t > b->t_hi)
            continue;
        b->pending--;
        if (b->pending == 0 && d->overlap) {
            /* issue in bucket order: every rank must issue the same sequence */
            for (int j = 0; j <= k; j++)
                if (!d->b[j].launched && d->b[j].pending == 0) {
                    int rc = launch(d, j);
                    if (rc) {
                        if (!d->err)
                            d->err = rc;
                        return rc;
                    }
                }
        }
    }
    return 0;
}

int ddp_finish(ddp *d)
{
    int rc = d->err;
    d->err = 0;
    double t0 = mlsys_now_s();
    for (int k = 0; k < d->nbuckets; k++)
        if (!d->b[k].launched) {
            if (d->overlap)
                d->late++;
            if ((rc = launch(d, k)) != 0)
                break;
        }
    for (int k = 0; k < d->nbuckets; k++) {
        if (d->b[k].req) {
            int w = mlsys_wait(d->b[k].req);
            d->b[k].req = NULL;
            if (w && !rc)
                rc = w;
        }
    }
    d->wait_s = mlsys_now_s() - t0;
    /* ready for the next backward without a ddp_begin (the counters stay for reading) */
    memset(d->ready, 0, (size_t)d->p->count * sizeof *d->ready);
    for (int k = 0; k < d->nbuckets; k++) {
        d->b[k].pending = d->b[k].t_hi - d->b[k].t_lo + 1;
        d->b[k].launched = 0;
    }
    if (rc || !d->c)
        return rc;
    /* the average: SUM over ranks, then / N, as the manual loop does */
    float n = (float)mlsys_size(d->c);
    float *g = d->p->grad;
    for (size_t i = 0; i < d->p->numel; i++)
        g[i] /= n;
    for (int k = 0; k < d->nbuckets; k++)
        emit_bucket(d, k, 0);
    return 0;
}

void ddp_free(ddp *d)
{
    if (!d)
        return;
    for (int k = 0; k < d->nbuckets; k++)
        if (d->b[k].req)
            mlsys_wait(d->b[k].req);
    free(d->b);
    free(d->ready);
    free(d);
}

/* ---- the MLP ---- */

int mlp_declare(nn_params *p, const mlp_shape *s)
{
    char name[16];
    for (int l = 0; l < s->nl; l++) {
        snprintf(name, sizeof name, "w%d", l + 1);
        if (nn_params_add2(p, name, s->dims[l + 1], s->dims[l]) < 0)
            return -1;
        snprintf(name, sizeof name, "b%d", l + 1);
        if (nn_params_add1(p, name, s->dims[l + 1]) < 0)
            return -1;
    }
    return 0;
}

void mlp_init(nn_params *p, const mlp_shape *s, uint64_t seed)
{
    mlsys_rng r;
    mlsys_rng_seed(&r, seed);
    for (int l = 0; l < s->nl; l++) {
        nn_init_linear(p->t[2 * l].data, p->t[2 * l].numel, s->dims[l], &r);
        nn_init_linear(p->t[2 * l + 1].data, p->t[2 * l + 1].numel, s->dims[l], &r);
    }
}

static int max_dim(const mlp_shape *s)
{
    int m = 0;
    for (int l = 0; l <= s->nl; l++)
        if (s->dims[l] > m)
            m = s->dims[l];
    return m;
}

void mlp_acts_init(mlp_acts *m, const mlp_shape *s, int B)
{
    memset(m, 0, sizeof *m);
    m->B = B;
    for (int l = 1; l <= s->nl; l++)
        m->a[l] = mlsys_xcalloc((size_t)B * (size_t)s->dims[l], sizeof(float));
    for (int i = 0; i < 2; i++)
        m->d[i] = mlsys_xcalloc((size_t)B * (size_t)max_dim(s), sizeof(float));
}

void mlp_acts_fini(mlp_acts *m, const mlp_shape *s)
{
    for (int l = 1; l <= s->nl; l++)
        free(m->a[l]);
    free(m->d[0]);
    free(m->d[1]);
    memset(m, 0, sizeof *m);
}

void mlp_layer_forward(const mlp_shape *s, int l, const float *w, const float *b,
                       const float *in, float *out, int B)
{
    int In = s->dims[l], Out = s->dims[l + 1];
    nn_linear_forward(out, in, w, b, B, In, Out);
    if (l < s->nl - 1)
        nn_relu_forward(out, out, (size_t)B * (size_t)Out);
}

void mlp_layer_backward(const mlp_shape *s, int l, const float *w, float *dw, float *db,
                        const float *in, const float *dy, float *dx, int B,
                        int (*hook)(void *u, int t), void *u)
{
    int In = s->dims[l], Out = s->dims[l + 1];
    /* weight gradients first, so their buckets can leave before dx is computed */
    nn_linear_backward(NULL, dw, db, dy, in, w, B, In, Out);
    if (hook) {
        hook(u, 2 * l + 1);
        hook(u, 2 * l);
    }
    if (l == 0 || !dx)
        return;
    nn_gemm(0, 0, B, In, Out, 1.0f, dy, Out, w, In, 0.0f, dx, In);
    nn_relu_backward(dx, dx, in, (size_t)B * (size_t)In);   /* in = ReLU output of l-1 */
}

float mlp_forward_loss(const mlp_shape *s, nn_params *p, mlp_acts *m, const float *x,
                       const int *y, int B)
{
    m->a[0] = (float *)x;
    for (int l = 0; l < s->nl; l++)
        mlp_layer_forward(s, l, p->t[2 * l].data, p->t[2 * l + 1].data, m->a[l], m->a[l + 1],
                          B);
    return nn_softmax_ce(m->d[0], m->a[s->nl], y, B, s->dims[s->nl], 1.0f);
}

void mlp_backward(const mlp_shape *s, nn_params *p, mlp_acts *m, int B,
                  int (*hook)(void *u, int t), void *u)
{
    float *dy = m->d[0];
    for (int l = s->nl - 1; l >= 0; l--) {
        float *dx = (dy == m->d[0]) ? m->d[1] : m->d[0];
        mlp_layer_backward(s, l, p->t[2 * l].data, p->t[2 * l].grad, p->t[2 * l + 1].grad,
                           m->a[l], dy, dx, B, hook, u);
        dy = dx;
    }
}

float mlp_forward_backward(const mlp_shape *s, nn_params *p, mlp_acts *m, const float *x,
                           const int *y, int B, int (*hook)(void *u, int t), void *u)
{
    float loss = mlp_forward_loss(s, p, m, x, y, B);
    mlp_backward(s, p, m, B, hook, u);
    return loss;
}
