/* nn.h - the numerics of MLSys Lab: one GEMM entry point, layers as forward/backward pairs,
 * a flat parameter set, optimizers over flat ranges, seeded initialisers and a
 * finite-difference gradient checker. float32, row-major, no hidden allocations: every layer
 * is a pure function over buffers its caller owns (DDP, TP and pipeline code own them).
 * This header is the table of contents of core/nn: prototypes sit under their file. */
#ifndef MLSYS_NN_H
#define MLSYS_NN_H

#include <stddef.h>
#include <stdint.h>
#include "../mlsys.h"

/* Shape legend used in every comment below:
 *   B  rows of a batch (samples, or B*T tokens flattened)
 *   In input features of a linear layer      Out output features of a linear layer
 *      (not I and O: <complex.h>, which cblas.h pulls in, defines I as a macro)
 *   C  classes (logits per row)              D  features normalised / embedded per row
 *   V  vocabulary (rows of an embedding table)
 *   n  a flat element count
 * A shape [B,D] means B rows of D contiguous floats. "+=" in a comment means the function
 * accumulates into that buffer (parameter gradients); "=" means it overwrites. */

/* ---- gemm.c: C = alpha * op(A) · op(B) + beta * C, one entry point, three kernels ---- */
/* REF: a short loop nest meant to be read. BLAS: OpenBLAS, fast; it rounds a row differently
 * depending on how many rows are multiplied with it (a one-row multiply takes another code
 * path than a many-row one). INVARIANT (gemm_inv.c): nearly as fast at the model's sizes,
 * and a row's result is bit for bit the same whether it is multiplied alone or inside any
 * batch: with it, a decode step of 16 sequences gives each the logits it would get alone,
 * and a prompt prefilled in one call the logits of feeding it token by token. */
typedef enum { NN_GEMM_REF = 0, NN_GEMM_BLAS = 1, NN_GEMM_INVARIANT = 2 } nn_gemm_kernel;

/* op(A) is [M,K]: A itself (trans_a = 0, stored [M,K] with row stride lda >= K) or the
 * transpose of A (trans_a = 1, stored [K,M], lda >= M). Likewise op(B) is [K,N]: B stored
 * [K,N] (ldb >= N) or Bᵀ with B stored [N,K] (ldb >= K). C is [M,N], ldc >= N. beta = 0
 * overwrites C without reading it (NaNs in C do not survive). M, N or K may be 0. */
void nn_gemm(int trans_a, int trans_b, int M, int N, int K, float alpha, const float *A,
             int lda, const float *B, int ldb, float beta, float *C, int ldc);
/* The readable reference kernel, callable directly (tests compare it with BLAS). Each row of
 * C is computed on its own: it is batch-invariant too, slowly. */
void nn_gemm_ref(int trans_a, int trans_b, int M, int N, int K, float alpha, const float *A,
                 int lda, const float *B, int ldb, float beta, float *C, int ldc);
/* Once per process, first thing in main (before any thread or fork): exports
 * OPENBLAS_NUM_THREADS=1 when it is unset, so that OpenBLAS, loaded (dlopen) by the first
 * multiply that needs it, starts one thread per process; MLSYS_GEMM=ref|blas|invariant
 * picks the kernel. argv is not used. A process that never calls it runs the default
 * kernel, and OpenBLAS with as many threads as its own default says. */
void nn_gemm_start(char **argv);
/* Select the kernel nn_gemm dispatches to (default: BLAS when built with OpenBLAS, else
 * REF). Returns 0, or -1 when BLAS is asked for but not built in (the kernel stays). */
int nn_set_gemm_kernel(nn_gemm_kernel k);
nn_gemm_kernel nn_get_gemm_kernel(void);
const char *nn_gemm_kernel_name(nn_gemm_kernel k);   /* "ref", "blas", "invariant" */
/* 1 when built with OpenBLAS and the library loads here (it is loaded by this call, or by
 * the first BLAS multiply; where it cannot be, that multiply says so once on stderr and the
 * kernel becomes the reference one). */
int nn_have_blas(void);
const char *nn_blas_why(void);                       /* why not: NULL when it loads */
int nn_blas_threads(void);                           /* OpenBLAS's thread count (0: none) */
/* Σ a[i]·b[i] over n: the reference kernel's and attention's dot product (inline, so each
 * caller's loop vectorises it). Eight running partial sums instead of one: with a single sum
 * every addition waits for the previous one, and the compiler may not reorder float
 * additions (the rounding would change), so it cannot use SIMD; eight independent sums are
 * one vector register's worth. Partial u sums the products i ≡ u (mod 8) in increasing i;
 * then they are added as ((p0+p4)+(p2+p6)) + ((p1+p5)+(p3+p7)): a fixed order, the same
 * bits wherever it runs. */
static inline float nn_dot(const float *a, const float *b, int n)
{
    float p[8] = {0};
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int u = 0; u < 8; u++)
            p[u] += a[i + u] * b[i + u];
    for (int u = 0; i + u < n; u++)
        p[u] += a[i + u] * b[i + u];
    return ((p[0] + p[4]) + (p[2] + p[6])) + ((p[1] + p[5]) + (p[3] + p[7]));
}

/* ---- gemm_inv.c: the batch-invariant kernel (NN_GEMM_INVARIANT), callable directly ---- */
void nn_gemm_invariant(int trans_a, int trans_b, int M, int N, int K, float alpha,
                       const float *A, int lda, const float *B, int ldb, float beta, float *C,
                       int ldc);
/* "avx2+fma" (chosen when the program loads, where the CPU has both) or "generic" (plain C,
 * rounding differently: invariant across batches on one machine, not across machines). */
const char *nn_gemm_invariant_isa(void);
/* Tests only: 1 runs the plain C variant, 0 goes back to the CPU's choice. */
void nn_gemm_invariant_generic(int on);

/* ---- linear.c: y = x · Wᵀ + b (torch layout: W is [Out,In]) ---- */
/* y[B,Out] = x[B,In] · w[Out,In]ᵀ + b[Out]. b may be NULL (no bias). y must not alias x. */
void nn_linear_forward(float *y, const float *x, const float *w, const float *b,
                       int B, int In, int Out);
/* dx[B,In] = dy[B,Out] · w[Out,In]        (dx may be NULL: the first layer needs no dx)
 * dw[Out,In] += dy[B,Out]ᵀ · x[B,In]
 * db[Out]    += sum over rows of dy       (db may be NULL: no bias) */
void nn_linear_backward(float *dx, float *dw, float *db, const float *dy, const float *x,
                        const float *w, int B, int In, int Out);
/* The scalar head (value or reward): v[N] = h[N,C] · w[C] + b (b a pointer to one float, or
 * NULL), one number per row of hidden states: nn_linear_* with Out = 1. Backward:
 * dh[N,C] = dv ⊗ w (written; NULL: not wanted), dw[C] += Σ_n dv_n h_n, *db += Σ dv. */
void nn_scalar_head_forward(float *v, const float *h, const float *w, const float *b, int N,
                            int C);
void nn_scalar_head_backward(float *dh, float *dw, float *db, const float *dv, const float *h,
                             const float *w, int N, int C);

/* ---- activations.c: elementwise nonlinearities; y may alias x, dx may alias dy ---- */
/* relu: y = max(x, 0). Backward reads x (or y: both are > 0 at the same places). */
void nn_relu_forward(float *y, const float *x, size_t n);
void nn_relu_backward(float *dx, const float *dy, const float *x, size_t n);
/* gelu (exact): y = x · Φ(x) = x/2 · (1 + erf(x/√2)). Backward reads the input x. */
void nn_gelu_forward(float *y, const float *x, size_t n);
void nn_gelu_backward(float *dx, const float *dy, const float *x, size_t n);
/* silu: y = x · σ(x). Backward reads the input x. */
void nn_silu_forward(float *y, const float *x, size_t n);
void nn_silu_backward(float *dx, const float *dy, const float *x, size_t n);
/* tanh: y = tanh(x), within 2e-7 of libm's and vectorisable. The backward reads the OUTPUT
 * y (dx = dy · (1 - y²)), so it may run in place on the forward's buffer. */
void nn_tanh_forward(float *y, const float *x, size_t n);
void nn_tanh_backward(float *dx, const float *dy, const float *y, size_t n);

/* ---- softmax.c: row-wise softmax (attention uses it; the loss has its own fused one) ---- */
/* y[B,C] = softmax over each row of x[B,C]; y may alias x. */
void nn_softmax_forward(float *y, const float *x, int B, int C);
/* dx[B,C] = y ⊙ (dy - rowsum(dy ⊙ y)); reads the forward's output y; dx may alias dy. */
void nn_softmax_backward(float *dx, const float *dy, const float *y, int B, int C);

/* ---- loss.c: losses return the scalar loss; backward writes the input gradient ---- */
/* Softmax cross-entropy, mean over the B rows. logits[B,C], targets[B] in [0,C).
 * probs[B,C] = softmax(logits) is written for the backward (may alias logits).
 * Stable for any finite logits: the row maximum is subtracted before exp. */
float nn_softmax_ce_forward(float *probs, const float *logits, const int *targets, int B, int C);
/* dlogits[B,C] = dloss · (probs - onehot(targets)) / B; dlogits may alias probs.
 * dloss is the gradient arriving at the loss (1 for a plain step; 1/m when m
 * micro-batches are accumulated). */
void nn_softmax_ce_backward(float *dlogits, const float *probs, const int *targets, int B,
                            int C, float dloss);
/* Both in one pass over the logits (the training step's hot path): returns the mean loss
 * and writes dlogits[B,C] as the backward with the given dloss would; dlogits may alias
 * logits. */
float nn_softmax_ce(float *dlogits, const float *logits, const int *targets, int B, int C,
                    float dloss);
/* The same with a token mask and per-row weights (RL, and padded batches): loss =
 * Σ_r keep_r · w_r · CE_r / n, keep_r = mask[r] != 0 (mask NULL: every row), w_r = weight[r]
 * (NULL: 1; any sign: an advantage-weighted likelihood is one), n = rows kept (none: 0).
 * dlogits[B,C] = dloss · keep_r · w_r · (softmax - onehot) / n, zero on dropped rows, whose
 * targets are not read (-1 for padding is fine). dlogits may alias logits. */
float nn_softmax_ce_masked(float *dlogits, const float *logits, const int *targets,
                           const unsigned char *mask, const float *weight, int B, int C,
                           float dloss);
/* Σ_i keep_i x_i / Σ_i keep_i over x[n] (mask NULL: the plain mean; nothing kept: 0), the
 * reduction of any per-token term; backward: dx[n] = dloss · keep_i / Σ keep (written). */
float nn_masked_mean(const float *x, const unsigned char *mask, size_t n);
void nn_masked_mean_backward(float *dx, const unsigned char *mask, size_t n, float dloss);
/* Mean squared error over all n elements: mean((pred - target)²). */
float nn_mse_forward(const float *pred, const float *target, size_t n);
/* dpred[n] = dloss · 2 (pred - target) / n; dpred may alias pred. */
void nn_mse_backward(float *dpred, const float *pred, const float *target, size_t n,
                     float dloss);

/* ---- logprob.c: log-probabilities of a policy's logits, and KL estimators (RL) ----
 * B rows of C logits (tokens or actions); a mask [B] (NULL: every row) drops rows: they give
 * 0 and get no gradient, and their tokens are not read. */
/* y[B,C] = log softmax(x) per row (y may alias x); stable for any finite x. */
void nn_log_softmax_forward(float *y, const float *x, int B, int C);
/* dx[B,C] = dy - softmax(x) · rowsum(dy), from the forward's output y (dx may alias dy). */
void nn_log_softmax_backward(float *dx, const float *dy, const float *y, int B, int C);
/* lp[B] = log softmax(logits[r])[tokens[r]]: the log-probability of the token taken. */
void nn_logprob_forward(float *lp, const float *logits, const int *tokens,
                        const unsigned char *mask, int B, int C);
/* dlogits[B,C] = dlp[r] · (onehot(tokens[r]) - softmax(logits[r])) (written; may alias
 * logits: the policy gradient's score function). */
void nn_logprob_backward(float *dlogits, const float *dlp, const float *logits,
                         const int *tokens, const unsigned char *mask, int B, int C);
/* Per-token estimators of KL(p ‖ q) from lp = log p(x) and lq = log q(x) of tokens x drawn
 * from p (the policy that sampled; q e.g. the reference model), d = lp - lq:
 * k1 = d, k2 = d²/2, k3 = e^{-d} - 1 + d (Schulman's note: k1 and k3 unbiased, k3 >= 0). */
typedef enum { NN_KL_K1 = 1, NN_KL_K2 = 2, NN_KL_K3 = 3 } nn_kl_kind;
void nn_kl_forward(float *kl, const float *lp, const float *lq, const unsigned char *mask,
                   size_t n, nn_kl_kind k);
/* dlp[n] = dkl · ∂k/∂lp, dlq[n] = dkl · ∂k/∂lq = -dlp (written; either may be NULL). */
void nn_kl_backward(float *dlp, float *dlq, const float *dkl, const float *lp, const float *lq,
                    const unsigned char *mask, size_t n, nn_kl_kind k);
const char *nn_kl_name(nn_kl_kind k);     /* "k1", "k2", "k3" */

/* ---- norm.c: RMSNorm and LayerNorm over the last dimension D of x[B,D] ---- */
/* RMSNorm: y = x / sqrt(mean(x²) + eps) ⊙ g. rstd[B] = 1/sqrt(mean(x²)+eps) is saved (rstd
 * may be NULL: inference keeps nothing). y may alias x. */
void nn_rmsnorm_forward(float *y, float *rstd, const float *x, const float *g, int B, int D,
                        float eps);
/* dx[B,D] = (written); dg[D] += sum over rows of dy ⊙ x̂. dx must not alias x. */
void nn_rmsnorm_backward(float *dx, float *dg, const float *dy, const float *x, const float *g,
                         const float *rstd, int B, int D);
/* LayerNorm: y = (x - mean) · rstd ⊙ g + b; saves mean[B] and rstd[B]. b may be NULL. */
void nn_layernorm_forward(float *y, float *mean, float *rstd, const float *x, const float *g,
                          const float *b, int B, int D, float eps);
/* dx[B,D] = (written); dg[D] += dy ⊙ x̂ summed over rows; db[D] += dy summed over rows
 * (db may be NULL). dx must not alias x. */
void nn_layernorm_backward(float *dx, float *dg, float *db, const float *dy, const float *x,
                           const float *g, const float *mean, const float *rstd, int B, int D);

/* ---- embedding.c: rows of a table picked by ids ---- */
/* y[N,D] = table[ids[i]] for each of the N ids (each in [0,V)). */
void nn_embedding_forward(float *y, const int *ids, const float *table, int N, int V, int D);
/* dtable[V,D]: row ids[i] += dy[i] (scatter-add: a repeated id accumulates). */
void nn_embedding_backward(float *dtable, const float *dy, const int *ids, int N, int V, int D);

/* ---- params.c: every parameter of a model carved from one flat vector ---- */
#define NN_NAME_MAX 48
#define NN_MAX_DIMS 4

/* One named tensor inside the flat vectors: data = set->data + offset, same for grad. */
typedef struct nn_tensor {
    char name[NN_NAME_MAX];
    int ndim;
    int shape[NN_MAX_DIMS];
    size_t offset;          /* first element in the flat vector */
    size_t numel;           /* product of the shape */
    float *data;            /* [numel], NULL until nn_params_alloc */
    float *grad;            /* [numel], NULL until alloc (or when allocated without grads) */
} nn_tensor;

/* Declare tensors with nn_params_add*, then nn_params_alloc carves them, in declaration
 * order and without padding, from one page-aligned allocation for the values and one with
 * the same layout for the gradients (mlsys_alloc_aligned: inside a job these live in the
 * rank's communication heap, so peers read them without a copy). */
typedef struct nn_params {
    nn_tensor *t;           /* [count] */
    int count, cap;
    size_t numel;           /* total floats in data (and in grad) */
    size_t bytes;           /* size of each allocation, rounded up to whole pages */
    float *data;            /* [numel] all parameters, flat */
    float *grad;            /* [numel] all gradients, same layout; NULL without grads */
} nn_params;

void nn_params_init(nn_params *p);
/* Declare a tensor; returns its index (stable: the order of declaration), or -1 when called
 * after alloc, with a bad shape or a duplicate name. The table p->t may move while tensors
 * are being declared: keep indices, and take nn_tensor pointers only after nn_params_alloc. */
int nn_params_add(nn_params *p, const char *name, int ndim, const int *shape);
int nn_params_add1(nn_params *p, const char *name, int n);
int nn_params_add2(nn_params *p, const char *name, int rows, int cols);
/* Allocate (zeroed) and point every tensor into the flat vectors. with_grad = 0 skips the
 * gradient vector (inference). Returns 0, or -1 when already allocated. */
int nn_params_alloc(nn_params *p, int with_grad);
void nn_params_fini(nn_params *p);            /* frees everything; p can be init'ed again */
nn_tensor *nn_params_find(nn_params *p, const char *name);   /* NULL if none */
void nn_params_zero_grad(nn_params *p);
/* The i-th of world equal-as-possible contiguous shards of n elements (the first n % world
 * shards get one more): [*off, *off + *len). ZeRO engines shard the flat vector with it. */
void nn_shard_range(size_t n, int i, int world, size_t *off, size_t *len);

/* ---- optim.c: optimizers over one flat range [offset, offset + n) of the parameters ---- */
/* Each optimizer owns the state for its range only, so a ZeRO rank keeps the state of its
 * shard. step() takes pointers to the FIRST element of the range: w[n] = params + offset,
 * g[n] its gradient (a gradient shard may live in its own buffer). lr and the other
 * hyper-parameters are plain fields: change them between steps for a schedule. */
typedef struct nn_sgd {
    float lr, momentum;     /* momentum 0: plain SGD, no state */
    size_t offset, n;
    float *velocity;        /* [n] (torch's buffer: v = μ v + g; w -= lr v), NULL if μ = 0 */
    size_t bytes;
    long steps;
} nn_sgd;
void nn_sgd_init(nn_sgd *o, float lr, float momentum, size_t offset, size_t n);
void nn_sgd_step(nn_sgd *o, float *w, const float *g);
void nn_sgd_fini(nn_sgd *o);

typedef struct nn_adamw {
    float lr, beta1, beta2, eps, weight_decay;   /* decay is decoupled: w -= lr·wd·w */
    size_t offset, n;
    float *m, *v;           /* [n] each, carved from one allocation */
    size_t bytes;
    long steps;             /* t, for the bias corrections 1 - beta^t */
} nn_adamw;
void nn_adamw_init(nn_adamw *o, float lr, float beta1, float beta2, float eps,
                   float weight_decay, size_t offset, size_t n);
void nn_adamw_step(nn_adamw *o, float *w, const float *g);
void nn_adamw_fini(nn_adamw *o);

/* Helpers for gradient clipping and averaging: sum of squares (in double), x *= s. */
double nn_sumsq(const float *x, size_t n);
void nn_scale(float *x, size_t n, float s);

/* ---- init.c: seeded initialisers (mlsys_rng: the same seed gives the same weights on
 * every rank) ---- */
void nn_init_uniform(float *w, size_t n, float lo, float hi, mlsys_rng *r);
/* torch.nn.Linear's default for weight and bias: U(-1/√fan_in, 1/√fan_in). */
void nn_init_linear(float *w, size_t n, int fan_in, mlsys_rng *r);
/* Xavier/Glorot uniform: U(-a, a), a = √(6 / (fan_in + fan_out)). */
void nn_init_xavier_uniform(float *w, size_t n, int fan_in, int fan_out, mlsys_rng *r);
void nn_init_normal(float *w, size_t n, float mean, float std, mlsys_rng *r);
void nn_init_const(float *w, size_t n, float value);
/* Orthogonal (torch.nn.init.orthogonal_): w[rows,cols] with orthonormal rows (rows <= cols)
 * or orthonormal columns (rows >= cols), times gain: Q of the QR of a Gaussian matrix, its
 * columns' signs fixed by R's diagonal so that Q is uniform over orthogonal matrices. */
void nn_init_orthogonal(float *w, int rows, int cols, float gain, mlsys_rng *r);

/* ---- sample.c: a draw from a discrete distribution ---- */
/* An index in [0,n) drawn with probability p[i] / Σp, from one uniform of r (inverse CDF).
 * p need not sum to 1; an index of weight 0 is never returned. Returns -1 when an entry is
 * negative or NaN, or no entry is positive (r is left untouched then). */
int nn_sample_categorical(const float *p, int n, mlsys_rng *r);
/* The same draw over the weights max(0, p[i] - q[i]) (speculative decoding's replacement
 * token: where the target p puts more than the draft q). -1 when no p[i] exceeds q[i]. */
int nn_sample_categorical_excess(const float *p, const float *q, int n, mlsys_rng *r);

/* ---- gradcheck.c: compare an analytic gradient with central finite differences ---- */
/* The scalar loss at the current contents of the buffers ctx describes. Compute it as
 * precisely as you can (accumulate in double) so the differences are meaningful. */
typedef double (*nn_loss_fn)(void *ctx);

typedef struct nn_gradcheck_result {
    double max_rel_err;     /* max over checked entries of |a - f| / max(|a|, |f|, floor) */
    double max_abs_err;     /* max |a - f| */
    size_t worst;           /* index of the entry with the largest relative error */
    double worst_analytic, worst_numeric;
    size_t checked;         /* entries checked */
} nn_gradcheck_result;

/* For entries of x[n] (all of them, or max_checks of them evenly spread when max_checks > 0
 * and smaller than n), numeric = (f(x + h) - f(x - h)) / (2h), with x restored after each
 * entry, compared with analytic[i]. floor keeps tiny gradients from inflating the relative
 * error (e.g. 1e-3). Returns max_rel_err. */
double nn_gradcheck(nn_loss_fn f, void *ctx, float *x, const float *analytic, size_t n,
                    float h, double floor, size_t max_checks, nn_gradcheck_result *res);

#endif
