/* tp_lab.h - what chapter 6's three labs share beyond the blocks of tp.h: checking the TP
 * degree and shapes before any rank starts, the "max |diff| ... correct" verification line
 * (the largest difference over all ranks, printed by rank 0), a number with thousands
 * separators and the ring's per-GPU volume formula. */
#ifndef CH06_TP_LAB_H
#define CH06_TP_LAB_H

#include "../common/common.h"
#include "tp.h"

#define TP_TOL 1e-5     /* every TP result must match its serial reference this closely */

/* n zeroed floats (never NULL). */
float *tp_fa(size_t n);

/* The verification line, collective over c: the max over ranks of d.abs, printed by rank 0
 * as "  what  [shape]  max |diff| 1.2e-07  correct". Correct means below TP_TOL times
 * max(1, |reference|): 1e-5 absolute for numbers of order one, relative for larger ones
 * (weight gradients sum over B·S rows and grow with them). Adds 1 to *bad on every rank when
 * the check fails. Returns an MLSYS_* code. */
int tp_check(mlsys_comm *c, const char *what, const char *shape, tp_diff d, int *bad);
/* s padded with spaces to width characters on screen (UTF-8 aware), into buf. */
char *tp_pad(char *buf, size_t n, const char *s, int width);
/* "4,096" */
char *tp_thousands(char *buf, size_t n, unsigned long long v);
/* Bytes each GPU sends in a ring all-reduce of `bytes` over T ranks: 2·bytes·(T−1)/T. */
double tp_ring_bytes_per_gpu(double bytes, int T);
/* Inside a rank: refuse a job whose size is not the TP degree (one line, status 2). */
int tp_rank_size_ok(mlsys_comm *c, long T, const char *lab_id);
/* The runtime's ring all-reduce is what the volume formula describes: use it unless the
 * learner chose an algorithm with --algo. Returns the algorithm name in use. */
const char *tp_use_ring(mlsys_comm *c, const lab_args *a);

/* The serial MLP every rank can compute from the full matrices, written straight on the GEMM
 * (not on the TP blocks) so that it is an independent reference. w1[H, I], w2[I, H].
 * Forward: h[B, I] = x·W1, a = GELU(h), y[B, H] = a·W2. Backward from dy[B, H]: dW1[H, I],
 * dW2[I, H], dx[B, H]; h and a must hold the forward's values. */
void tp_mlp_serial_forward(float *y, float *h, float *a, const float *x, const float *w1,
                           const float *w2, int B, int H, int I);
void tp_mlp_serial_backward(float *dx, float *dw1, float *dw2, const float *dy, const float *x,
                            const float *h, const float *a, const float *w1, const float *w2,
                            int B, int H, int I);

#endif
