/* graph.c - the CPU analogue of chapter 10's CUDA graphs: one MLP described as data, run by an
 * eager interpreter that does at every call what a framework does before each kernel launch
 * (find the kernel by name, find the tensors by name, check shapes, take an output buffer,
 * give back the input's), and by a captured plan that did all of that once. Both call the
 * same kernels (core/nn's GEMM, a bias add, ReLU), so their outputs are equal bit for bit; the
 * difference in time is the dispatch work the plan removed. */
#include "graph.h"
#include "../mlsys.h"
#include "../nn/nn.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- kernels: y = x·Wᵀ + b, and ReLU in place ---- */

static void k_linear(const graph_step *s)
{
    nn_gemm(0, 1, s->rows, s->out_f, s->in_f, 1.0f, s->in, s->in_f, s->w, s->in_f, 0.0f,
            s->out, s->out_f);
    for (int r = 0; r < s->rows; r++) {
        float *y = s->out + (size_t)r * s->out_f;
        for (int j = 0; j < s->out_f; j++)
            y[j] += s->b[j];
    }
}

static void k_relu(const graph_step *s)
{
    size_t n = (size_t)s->rows * s->out_f;
    if (s->out != s->in)
        memcpy(s->out, s->in, n * sizeof(float));
    for (size_t i = 0; i < n; i++)
        s->out[i] = s->out[i] > 0.0f ? s->out[i] : 0.0f;
}

/* The kernel table the interpreter searches by name. */
static const struct {
    const char *name;
    void (*fn)(const graph_step *);
    int has_params;
} kernels[] = {
    {"linear", k_linear, 1},
    {"relu", k_relu, 0},
};

static int find_kernel(const char *name)
{
    for (size_t i = 0; i < sizeof kernels / sizeof kernels[0]; i++)
        if (!strcmp(kernels[i].name, name))
            return (int)i;
    return -1;
}

static const graph_param *find_param(const graph_model *m, const char *name)
{
    for (int i = 0; i < m->n_params; i++)
        if (!strcmp(m->params[i].name, name))
            return &m->params[i];
    return NULL;
}

/* ---- the model ---- */

int graph_mlp_init(graph_model *m, const int *dims, int n_dims, uint64_t seed)
{
    memset(m, 0, sizeof *m);
    if (n_dims < 2 || n_dims > GRAPH_MAX_LAYERS + 1)
        return -1;
    size_t floats = 0;
    for (int l = 0; l + 1 < n_dims; l++) {
        if (dims[l] < 1 || dims[l + 1] < 1)
            return -1;
        floats += (size_t)dims[l + 1] * dims[l] + (size_t)dims[l + 1];
    }
    m->n_dims = n_dims;
    memcpy(m->dims, dims, (size_t)n_dims * sizeof(int));
    m->mem = mlsys_xmalloc(floats * sizeof(float));
    mlsys_rng r;
    mlsys_rng_seed(&r, seed);
    float *p = m->mem;
    int nn = 0;
    const char *prev = "x";
    for (int l = 0; l + 1 < n_dims; l++) {
        int in = dims[l], out = dims[l + 1], last = l + 2 == n_dims;
        char *wn = m->names[nn++], *bn = m->names[nn++];
        snprintf(wn, sizeof m->names[0], "fc%d.weight", (l + 1) % 100);
        snprintf(bn, sizeof m->names[0], "fc%d.bias", (l + 1) % 100);
        graph_param *w = &m->params[m->n_params++], *b = &m->params[m->n_params++];
        *w = (graph_param){wn, out, in, p};
        p += (size_t)out * in;
        *b = (graph_param){bn, 1, out, p};
        p += out;
        float sc = 1.0f / sqrtf((float)in);
        for (size_t i = 0; i < (size_t)out * in; i++)
            w->data[i] = (float)mlsys_rng_normal(&r) * sc;
        for (int i = 0; i < out; i++)
            b->data[i] = (float)mlsys_rng_normal(&r) * 0.01f;
        /* tensor names: h<l>a after the linear, h<l>b after its ReLU, y at the end */
        static const char *const lin_out[] = {"h1", "h3", "h5", "h7", "h9", "h11", "h13", "h15"};
        static const char *const relu_out[] = {"h2", "h4", "h6", "h8", "h10", "h12", "h14",
                                               "h16"};
        const char *o = last ? "y" : lin_out[l];
        m->ops[m->n_ops++] = (graph_op){"linear", prev, o, wn, bn};
        if (!last) {
            m->ops[m->n_ops++] = (graph_op){"relu", o, relu_out[l], NULL, NULL};
            prev = relu_out[l];
        }
    }
    return 0;
}

void graph_model_free(graph_model *m)
{
    free(m->mem);
    memset(m, 0, sizeof *m);
}

int graph_kernels_per_forward(const graph_model *m)
{
    return m->n_ops;
}

/* ---- the eager interpreter ---- */

/* A live tensor: a name bound to a buffer of rows x cols. */
typedef struct eager_tensor {
    const char *name;
    float *data;
    int rows, cols;
    int owned;                /* from the buffer cache (1) or the caller's (0) */
} eager_tensor;

#define EAGER_CACHE 16
struct graph_eager {
    eager_tensor live[GRAPH_MAX_OPS + 1];
    int n_live;
    /* a caching allocator, as frameworks keep one: freed buffers wait for the next request
     * of the same size instead of going back to malloc */
    float *cache[EAGER_CACHE];
    size_t cache_n[EAGER_CACHE];
};

graph_eager *graph_eager_create(void)
{
    return mlsys_xcalloc(1, sizeof(graph_eager));
}

void graph_eager_free(graph_eager *e)
{
    if (!e)
        return;
    for (int i = 0; i < EAGER_CACHE; i++)
        free(e->cache[i]);
    free(e);
}

static float *cache_take(graph_eager *e, size_t n)
{
    for (int i = 0; i < EAGER_CACHE; i++)
        if (e->cache[i] && e->cache_n[i] == n) {
            float *p = e->cache[i];
            e->cache[i] = NULL;
            return p;
        }
    return mlsys_xmalloc(n * sizeof(float));
}

static void cache_give(graph_eager *e, float *p, size_t n)
{
    for (int i = 0; i < EAGER_CACHE; i++)
        if (!e->cache[i]) {
            e->cache[i] = p;
            e->cache_n[i] = n;
            return;
        }
    free(p);
}

static eager_tensor *find_live(graph_eager *e, const char *name)
{
    for (int i = 0; i < e->n_live; i++)
        if (!strcmp(e->live[i].name, name))
            return &e->live[i];
    return NULL;
}

/* Does any op after `from` read tensor `name`? (The interpreter's liveness, asked per call.) */
static int read_later(const graph_model *m, int from, const char *name)
{
    for (int i = from + 1; i < m->n_ops; i++)
        if (!strcmp(m->ops[i].in, name))
            return 1;
    return 0;
}

static void drop_live(graph_eager *e, eager_tensor *t)
{
    if (t->owned)
        cache_give(e, t->data, (size_t)t->rows * t->cols);
    *t = e->live[--e->n_live];
}

int graph_run_eager(graph_eager *e, const graph_model *m, int batch, const float *x, float *y,
                    char *err, size_t errlen)
{
    e->n_live = 0;
    e->live[e->n_live++] = (eager_tensor){"x", (float *)x, batch, m->dims[0], 0};
    int rc = -1;
    for (int i = 0; i < m->n_ops; i++) {
        const graph_op *op = &m->ops[i];
        int k = find_kernel(op->kind);
        if (k < 0) {
            snprintf(err, errlen, "eager: op %d: no kernel named '%s'", i, op->kind);
            goto out;
        }
        eager_tensor *in = find_live(e, op->in);
        if (!in) {
            snprintf(err, errlen, "eager: op %d (%s): no tensor '%s'", i, op->kind, op->in);
            goto out;
        }
        graph_step s = {kernels[k].fn, in->data, NULL, NULL, NULL, in->rows, in->cols,
                        in->cols};
        if (kernels[k].has_params) {
            const graph_param *w = find_param(m, op->weight), *b = find_param(m, op->bias);
            if (!w || !b || w->cols != in->cols || b->cols != w->rows) {
                snprintf(err, errlen, "eager: op %d (%s): %s does not fit an input of %d x %d",
                         i, op->kind, op->weight, in->rows, in->cols);
                goto out;
            }
            s.w = w->data, s.b = b->data, s.out_f = w->rows;
        }
        int last = !strcmp(op->out, "y");
        s.out = last ? y : cache_take(e, (size_t)s.rows * s.out_f);
        kernels[k].fn(&s);
        eager_tensor o = {op->out, s.out, s.rows, s.out_f, !last};
        if (!read_later(m, i, op->in))
            drop_live(e, in);
        if (e->n_live >= GRAPH_MAX_OPS + 1) {
            snprintf(err, errlen, "eager: too many live tensors");
            goto out;
        }
        e->live[e->n_live++] = o;
    }
    rc = 0;
out:
    while (e->n_live > 0)
        drop_live(e, &e->live[e->n_live - 1]);
    return rc;
}

/* ---- capture and replay ---- */

int graph_capture(graph_plan *p, const graph_model *m, int batch, char *err, size_t errlen)
{
    memset(p, 0, sizeof *p);
    if (batch < 1 || m->n_ops < 1) {
        snprintf(err, errlen, "capture: batch %d, %d ops", batch, m->n_ops);
        return -1;
    }
    /* one allocation: the static input, then each op's output (the last is the output) */
    size_t floats = (size_t)batch * m->dims[0];
    int cols = m->dims[0];
    for (int i = 0; i < m->n_ops; i++) {
        int k = find_kernel(m->ops[i].kind);
        if (k < 0) {
            snprintf(err, errlen, "capture: op %d: no kernel named '%s'", i, m->ops[i].kind);
            return -1;
        }
        if (kernels[k].has_params) {
            const graph_param *w = find_param(m, m->ops[i].weight);
            if (!w || w->cols != cols) {
                snprintf(err, errlen, "capture: op %d: %s does not fit %d features", i,
                         m->ops[i].weight, cols);
                return -1;
            }
            cols = w->rows;
        }
        floats += (size_t)batch * cols;
    }
    p->mem = mlsys_xmalloc(floats * sizeof(float));
    p->batch = batch;
    p->in_f = m->dims[0];
    p->static_in = p->mem;
    float *cur = p->static_in, *next = p->mem + (size_t)batch * m->dims[0];
    cols = m->dims[0];
    for (int i = 0; i < m->n_ops; i++) {
        int k = find_kernel(m->ops[i].kind);
        graph_step *s = &p->steps[p->n_steps++];
        *s = (graph_step){kernels[k].fn, cur, NULL, NULL, next, batch, cols, cols};
        if (kernels[k].has_params) {
            const graph_param *w = find_param(m, m->ops[i].weight);
            const graph_param *b = find_param(m, m->ops[i].bias);
            s->w = w->data, s->b = b->data, s->out_f = w->rows;
        }
        cols = s->out_f;
        cur = next;
        next += (size_t)batch * cols;
    }
    p->static_out = cur;
    p->out_f = cols;
    return 0;
}

void graph_replay(const graph_plan *p, const float *x, float *y)
{
    memcpy(p->static_in, x, (size_t)p->batch * p->in_f * sizeof(float));
    for (int i = 0; i < p->n_steps; i++)
        p->steps[i].fn(&p->steps[i]);
    memcpy(y, p->static_out, (size_t)p->batch * p->out_f * sizeof(float));
}

void graph_plan_free(graph_plan *p)
{
    free(p->mem);
    memset(p, 0, sizeof *p);
}

int graph_bucket(const int *sizes, int n, int bs)
{
    for (int i = 0; i < n; i++)
        if (sizes[i] >= bs)
            return sizes[i];
    return -1;
}
