/* nn_mlp.c - timing, not a test: chapter 5's training step (784 -> 256 -> ReLU -> 10,
 * softmax cross-entropy, batch 32, SGD) on one rank, under the BLAS GEMM and the reference
 * GEMM, printed as samples per second. tests/bench/torch_mlp.py times the same step in
 * PyTorch. Build (after make has built $BUILD/libmlsys.a):
 *   cc -std=c11 -O2 -D_GNU_SOURCE -o build/nn_mlp tests/bench/nn_mlp.c build/libmlsys.a \
 *      $(pkg-config --libs openblas) -lm -lpthread
 * Usage: nn_mlp [SECONDS]   (per kernel; default 2) */
#include "../../core/nn/nn.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { B = 32, IN = 784, HID = 256, OUT = 10 };

/* Everything the step touches, allocated once: no allocation inside the loop. */
typedef struct model {
    nn_params p;
    float *w1, *b1, *w2, *b2;          /* [HID,IN] [HID] [OUT,HID] [OUT] views into p.data */
    float *dw1, *db1, *dw2, *db2;      /* same views into p.grad */
    float *x;                          /* [B,IN] */
    int *y;                            /* [B] */
    float *h;                          /* [B,HID] pre-activation, then ReLU'd in place */
    float *logits;                     /* [B,OUT], then dlogits in place */
    float *dh;                         /* [B,HID] */
    nn_sgd opt;
} model;

static void model_init(model *m, uint64_t seed)
{
    nn_params_init(&m->p);
    nn_params_add2(&m->p, "fc1.weight", HID, IN);
    nn_params_add1(&m->p, "fc1.bias", HID);
    nn_params_add2(&m->p, "fc2.weight", OUT, HID);
    nn_params_add1(&m->p, "fc2.bias", OUT);
    nn_params_alloc(&m->p, 1);
    m->w1 = m->p.t[0].data; m->dw1 = m->p.t[0].grad;
    m->b1 = m->p.t[1].data; m->db1 = m->p.t[1].grad;
    m->w2 = m->p.t[2].data; m->dw2 = m->p.t[2].grad;
    m->b2 = m->p.t[3].data; m->db2 = m->p.t[3].grad;
    mlsys_rng r;
    mlsys_rng_seed(&r, seed);
    nn_init_linear(m->w1, (size_t)HID * IN, IN, &r);
    nn_init_linear(m->b1, HID, IN, &r);
    nn_init_linear(m->w2, (size_t)OUT * HID, HID, &r);
    nn_init_linear(m->b2, OUT, HID, &r);
    m->x = mlsys_alloc_aligned((size_t)B * IN * sizeof(float));
    m->h = mlsys_alloc_aligned((size_t)B * HID * sizeof(float));
    m->dh = mlsys_alloc_aligned((size_t)B * HID * sizeof(float));
    m->logits = mlsys_alloc_aligned((size_t)B * OUT * sizeof(float));
    m->y = mlsys_xcalloc(B, sizeof(int));
    nn_init_uniform(m->x, (size_t)B * IN, 0.0f, 1.0f, &r);     /* a fixed synthetic batch */
    for (int i = 0; i < B; i++)
        m->y[i] = (int)(mlsys_rng_u64(&r) % OUT);
    nn_sgd_init(&m->opt, 0.01f, 0.0f, 0, m->p.numel);
}

static float train_step(model *m)
{
    nn_params_zero_grad(&m->p);
    nn_linear_forward(m->h, m->x, m->w1, m->b1, B, IN, HID);
    nn_relu_forward(m->h, m->h, (size_t)B * HID);
    nn_linear_forward(m->logits, m->h, m->w2, m->b2, B, HID, OUT);
    float loss = nn_softmax_ce(m->logits, m->logits, m->y, B, OUT, 1.0f);
    nn_linear_backward(m->dh, m->dw2, m->db2, m->logits, m->h, m->w2, B, HID, OUT);
    nn_relu_backward(m->dh, m->dh, m->h, (size_t)B * HID);
    nn_linear_backward(NULL, m->dw1, m->db1, m->dh, m->x, m->w1, B, IN, HID);
    nn_sgd_step(&m->opt, m->p.data, m->p.grad);
    return loss;
}

/* Runs steps until at least min_s seconds have passed; returns samples per second. */
static double measure(model *m, double min_s, float *first, float *last)
{
    for (int i = 0; i < 20; i++)                /* warm-up: caches, BLAS buffers, pages */
        train_step(m);
    long steps = 0;
    double t0 = mlsys_now_s(), t;
    *first = train_step(m);
    do {
        *last = train_step(m);
        steps += 1;
        t = mlsys_now_s();
    } while (t - t0 < min_s);
    return (double)(steps + 1) * B / (t - t0);
}

int main(int argc, char **argv)
{
    double secs = argc > 1 ? atof(argv[1]) : 2.0;
    if (secs <= 0)
        secs = 2.0;
    printf("nn_mlp: %d -> %d -> relu -> %d, softmax ce, batch %d, sgd, 1 thread\n", IN, HID,
           OUT, B);
    nn_gemm_kernel kernels[2] = { NN_GEMM_BLAS, NN_GEMM_REF };
    for (int k = 0; k < 2; k++) {
        if (nn_set_gemm_kernel(kernels[k]) != 0) {
            printf("%-5s skipped: not built with OpenBLAS\n", nn_gemm_kernel_name(kernels[k]));
            continue;
        }
        model m;
        model_init(&m, 1);
        float first, last;
        double sps = measure(&m, kernels[k] == NN_GEMM_REF ? secs / 2 : secs, &first, &last);
        printf("%-5s %10.0f samples/s  (%.1f us/step, loss %.3f -> %.3f)\n",
               nn_gemm_kernel_name(kernels[k]), sps, 1e6 * B / sps, first, last);
    }
    return 0;
}
