/* mlp.c - the small MLP that chapter 5's labs train (and ZeRO shards): layers of Linear +
 * ReLU with a bias, written layer by layer so that an engine can hook between layers (DDP
 * launches a bucket once a layer's gradients are written, ZeRO-3 gathers parameters). */
#include "train.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
