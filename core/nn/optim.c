/* optim.c - SGD (with optional momentum) and AdamW, each over one flat range of the
 * parameter vector. An optimizer owns the state of its range only, which is the whole trick
 * of ZeRO stage 1: each rank keeps the Adam moments of its 1/N shard instead of all of them.
 * State lives in page-aligned memory (the communication heap inside a job). */
#include "nn.h"
#include <math.h>
#include <string.h>
#include <unistd.h>

static size_t page_round(size_t bytes)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    return (bytes + page - 1) / page * page;
}

void nn_sgd_init(nn_sgd *o, float lr, float momentum, size_t offset, size_t n)
{
    memset(o, 0, sizeof *o);
    o->lr = lr;
    o->momentum = momentum;
    o->offset = offset;
    o->n = n;
    if (momentum != 0.0f && n) {
        o->bytes = page_round(n * sizeof(float));
        o->velocity = mlsys_alloc_aligned(o->bytes);     /* zeroed: v starts at 0 */
    }
}

/* Plain SGD: w -= lr·g. With momentum μ (torch's form, no dampening):
 *   v = μ·v + g,  w -= lr·v
 * so v is a running, exponentially weighted sum of past gradients; on the first step v = g. */
void nn_sgd_step(nn_sgd *o, float *w, const float *g)
{
    float lr = o->lr, mu = o->momentum;
    if (o->velocity) {
        float *v = o->velocity;
        for (size_t i = 0; i < o->n; i++) {
            v[i] = mu * v[i] + g[i];
            w[i] -= lr * v[i];
        }
    } else {
        for (size_t i = 0; i < o->n; i++)
            w[i] -= lr * g[i];
    }
    o->steps++;
}

void nn_sgd_fini(nn_sgd *o)
{
    if (o->velocity)
        mlsys_free_aligned(o->velocity, o->bytes);
    memset(o, 0, sizeof *o);
}

void nn_adamw_init(nn_adamw *o, float lr, float beta1, float beta2, float eps,
                   float weight_decay, size_t offset, size_t n)
{
    memset(o, 0, sizeof *o);
    o->lr = lr;
    o->beta1 = beta1;
    o->beta2 = beta2;
    o->eps = eps;
    o->weight_decay = weight_decay;
    o->offset = offset;
    o->n = n;
    if (n) {
        o->bytes = page_round(2 * n * sizeof(float));
        o->m = mlsys_alloc_aligned(o->bytes);            /* m[n] then v[n], both zeroed */
        o->v = o->m + n;
    }
}

/* AdamW, step t (counting from 1):
 *   w -= lr·wd·w                          decoupled weight decay: shrinks w directly, not
 *                                         through the gradient (that is the "W")
 *   m  = β1·m + (1-β1)·g                  running mean of gradients
 *   v  = β2·v + (1-β2)·g²                 running mean of squared gradients
 *   m̂ = m / (1-β1^t),  v̂ = v / (1-β2^t)   bias correction: m and v start at 0, so early
 *                                         averages are too small by exactly these factors
 *   w -= lr · m̂ / (√v̂ + eps)
 * The corrections are scalars, computed once per step in double. */
void nn_adamw_step(nn_adamw *o, float *w, const float *g)
{
    o->steps++;
    double t = (double)o->steps;
    float bc1 = (float)(1.0 - pow(o->beta1, t));
    float bc2 = (float)(1.0 - pow(o->beta2, t));
    float b1 = o->beta1, b2 = o->beta2, eps = o->eps, lr = o->lr;
    float decay = 1.0f - o->lr * o->weight_decay;
    float *m = o->m, *v = o->v;
    size_t n = o->n;            /* a local bound: the loop vectorises (w may alias *o) */
    for (size_t i = 0; i < n; i++) {
        w[i] *= decay;
        m[i] = b1 * m[i] + (1.0f - b1) * g[i];
        v[i] = b2 * v[i] + (1.0f - b2) * g[i] * g[i];
        float mhat = m[i] / bc1, vhat = v[i] / bc2;
        w[i] -= lr * mhat / (sqrtf(vhat) + eps);
    }
}

void nn_adamw_fini(nn_adamw *o)
{
    if (o->m)
        mlsys_free_aligned(o->m, o->bytes);
    memset(o, 0, sizeof *o);
}

double nn_sumsq(const float *x, size_t n)
{
    double s = 0.0;
    for (size_t i = 0; i < n; i++)
        s += (double)x[i] * x[i];
    return s;
}

void nn_scale(float *x, size_t n, float s)
{
    for (size_t i = 0; i < n; i++)
        x[i] *= s;
}
