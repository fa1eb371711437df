/* ddp.c - our DistributedDataParallel. The gradients of every tensor sit back to back in one
 * flat vector (nn_params), so a bucket is just a range of it: no packing, no copy. Buckets
 * are cut from the END of the vector (backward produces the last layer's gradients first),
 * the first one small so that the first all-reduce starts early. When the backward has
 * written the last gradient that overlaps a bucket, that bucket's all-reduce is issued
 * non-blocking and runs on the progress thread while backward goes on; finish() waits once,
 * then divides by N. A lab that draws the buckets sets on_bucket (chapter 5's simple-ddp). */
#include "train.h"
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

/* Bucket k's gradients at launch (summed over nothing yet) and after the average. */
static void on_bucket(ddp *d, int k)
{
    if (d->on_bucket && d->c)
        d->on_bucket(d->on_bucket_arg, d, k);
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
    on_bucket(d, k);
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
        on_bucket(d, k);
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
