/* params.c - the parameter set: every tensor of a model is a named window into ONE flat
 * float vector, and its gradient the same window into a second vector of the same layout.
 * Flat vectors are what distributed training wants: DDP cuts the gradient vector into
 * buckets, ZeRO cuts both into one shard per rank, a view draws them as one arena. */
#include "nn.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void nn_params_init(nn_params *p)
{
    memset(p, 0, sizeof *p);
}

int nn_params_add(nn_params *p, const char *name, int ndim, const int *shape)
{
    if (p->data || !name || !*name || strlen(name) >= NN_NAME_MAX || ndim < 1 ||
        ndim > NN_MAX_DIMS || nn_params_find(p, name))
        return -1;
    size_t numel = 1;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] <= 0)
            return -1;
        numel *= (size_t)shape[d];
    }
    if (p->count == p->cap) {
        int cap = p->cap ? 2 * p->cap : 16;
        nn_tensor *t = mlsys_xcalloc((size_t)cap, sizeof *t);
        if (p->count)
            memcpy(t, p->t, (size_t)p->count * sizeof *t);
        free(p->t);
        p->t = t;
        p->cap = cap;
    }
    nn_tensor *t = &p->t[p->count];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->ndim = ndim;
    for (int d = 0; d < ndim; d++)
        t->shape[d] = shape[d];
    t->offset = p->numel;               /* packed back to back, in declaration order */
    t->numel = numel;
    p->numel += numel;
    return p->count++;
}

int nn_params_add1(nn_params *p, const char *name, int n)
{
    return nn_params_add(p, name, 1, &n);
}

int nn_params_add2(nn_params *p, const char *name, int rows, int cols)
{
    int shape[2] = { rows, cols };
    return nn_params_add(p, name, 2, shape);
}

/* One allocation per family, rounded up to whole pages (page-aligned buffers are what the
 * shm transport copies fastest, and a whole page never shares with another buffer). */
int nn_params_alloc(nn_params *p, int with_grad)
{
    if (p->data)
        return -1;
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t bytes = p->numel * sizeof(float);
    p->bytes = bytes ? (bytes + page - 1) / page * page : page;
    p->data = mlsys_alloc_aligned(p->bytes);
    p->grad = with_grad ? mlsys_alloc_aligned(p->bytes) : NULL;
    for (int i = 0; i < p->count; i++) {
        p->t[i].data = p->data + p->t[i].offset;
        p->t[i].grad = p->grad ? p->grad + p->t[i].offset : NULL;
    }
    return 0;
}

void nn_params_fini(nn_params *p)
{
    if (p->data)
        mlsys_free_aligned(p->data, p->bytes);
    if (p->grad)
        mlsys_free_aligned(p->grad, p->bytes);
    free(p->t);
    memset(p, 0, sizeof *p);
}

nn_tensor *nn_params_find(nn_params *p, const char *name)
{
    for (int i = 0; i < p->count; i++)
        if (strcmp(p->t[i].name, name) == 0)
            return &p->t[i];
    return NULL;
}

void nn_params_zero_grad(nn_params *p)
{
    if (p->grad)
        memset(p->grad, 0, p->numel * sizeof(float));
}

/* Shard i of world: the first n % world shards hold one element more, so sizes differ by at
 * most one and the shards tile [0, n) in rank order. */
void nn_shard_range(size_t n, int i, int world, size_t *off, size_t *len)
{
    size_t w = world > 0 ? (size_t)world : 1, r = (size_t)i;
    size_t base = n / w, extra = n % w;
    *len = base + (r < extra ? 1 : 0);
    *off = r * base + (r < extra ? r : extra);
}
