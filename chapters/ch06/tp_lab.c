/* tp_lab.c - chapter 6's shared lab plumbing (tp_lab.h): verification lines reduced over the
 * ranks, number formats, the ring volume formula and the checks that run before ranks
 * start. */
#include "tp_lab.h"
#include "../../core/nn/nn.h"
#include <stdlib.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

char *tp_pad(char *buf, size_t n, const char *s, int width)
{
    size_t len = strlen(s);
    int shown = 0;
    for (size_t i = 0; i < len; i++)
        shown += ((unsigned char)s[i] & 0xC0) != 0x80;     /* count UTF-8 lead bytes */
    snprintf(buf, n, "%s%*s", s, shown < width ? width - shown : 0, "");
    return buf;
}

int tp_check(mlsys_comm *c, const char *what, const char *shape, tp_diff d, int *bad)
{
    double mine[2] = {d.abs, d.mag}, worst[2];
    int rc = mlsys_allreduce(c, mine, worst, 2, MLSYS_F64, MLSYS_MAX);
    if (rc != MLSYS_OK)
        return rc;
    double tol = TP_TOL * (worst[1] > 1.0 ? worst[1] : 1.0);
    int ok = worst[0] < tol;
    if (!ok)
        (*bad)++;
    char a[160], b[48], t[48] = "";
    if (tol > TP_TOL)
        snprintf(t, sizeof t, " (tol %.1e)", tol);
    mlsys_print_root(c, "  %s %s max |diff| %.1e  %s%s\n", tp_pad(a, sizeof a, what, 42),
                     tp_pad(b, sizeof b, shape, 10), worst[0], ok ? "correct" : "INCORRECT", t);
    return MLSYS_OK;
}

float *tp_fa(size_t n)
{
    return mlsys_xcalloc(n ? n : 1, sizeof(float));
}

char *tp_thousands(char *buf, size_t n, unsigned long long v)
{
    char digits[32];
    int len = snprintf(digits, sizeof digits, "%llu", v);
    size_t o = 0;
    for (int i = 0; i < len && o + 2 < n; i++) {
        if (i > 0 && (len - i) % 3 == 0)
            buf[o++] = ',';
        buf[o++] = digits[i];
    }
    buf[o < n ? o : n - 1] = 0;
    return buf;
}

double tp_ring_bytes_per_gpu(double bytes, int T)
{
    return 2.0 * bytes * (double)(T - 1) / (double)T;
}

int tp_rank_size_ok(mlsys_comm *c, long T, const char *lab_id)
{
    if (mlsys_size(c) == T)
        return 1;
    if (mlsys_rank(c) == 0)
        fprintf(stderr, "mlsys-lab: %s: --tp-size %ld but the job has %d ranks: the runner "
                "must start one rank per TP shard\n", lab_id, T, mlsys_size(c));
    return 0;
}

const char *tp_use_ring(mlsys_comm *c, const lab_args *a)
{
    const char *algo = lab_arg_str(a, "algo");
    if (!algo || !strcmp(algo, "auto"))
        mlsys_set_algo(c, MLSYS_COLL_ALLREDUCE, "ring");
    return mlsys_size(c) == 1 ? "none (1 rank)" :
           mlsys_algo_decide(c, MLSYS_COLL_ALLREDUCE, 1 << 20, &(const char *){NULL});
}

void tp_mlp_serial_forward(float *y, float *h, float *a, const float *x, const float *w1,
                           const float *w2, int B, int H, int I)
{
    nn_gemm(0, 0, B, I, H, 1.0f, x, H, w1, I, 0.0f, h, I);
    tp_gelu_forward(a, h, (size_t)B * I);
    nn_gemm(0, 0, B, H, I, 1.0f, a, I, w2, H, 0.0f, y, H);
}

void tp_mlp_serial_backward(float *dx, float *dw1, float *dw2, const float *dy, const float *x,
                            const float *h, const float *a, const float *w1, const float *w2,
                            int B, int H, int I)
{
    float *da = mlsys_xmalloc((size_t)B * I * sizeof *da);
    nn_gemm(1, 0, I, H, B, 1.0f, a, I, dy, H, 0.0f, dw2, H);      /* dW2 = aᵀ·dy */
    nn_gemm(0, 1, B, I, H, 1.0f, dy, H, w2, H, 0.0f, da, I);      /* da = dy·W2ᵀ */
    tp_gelu_backward(da, da, h, (size_t)B * I);                   /* dh = da ⊙ GELU'(h) */
    nn_gemm(1, 0, H, I, B, 1.0f, x, H, da, I, 0.0f, dw1, I);      /* dW1 = xᵀ·dh */
    nn_gemm(0, 1, B, H, I, 1.0f, da, I, w1, I, 0.0f, dx, H);      /* dx = dh·W1ᵀ */
    free(da);
}
