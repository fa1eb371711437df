/* gemm.c - the one matrix multiply every layer calls: C = alpha·op(A)·op(B) + beta·C,
 * row-major. Two kernels sit behind it: a short reference kernel meant to be read, and
 * OpenBLAS's cblas_sgemm meant to be fast. nn_set_gemm_kernel (or MLSYS_GEMM=ref|blas)
 * picks one; both must agree to float rounding, which tests/unit/test_nn.c checks. */
#include "nn.h"
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef HAVE_OPENBLAS
#include <cblas.h>
#endif

static nn_gemm_kernel g_kernel = NN_GEMM_REF;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

/* Runs once per process, before the first multiply: one BLAS thread per rank (ranks are
 * processes already; BLAS threads on top would fight them for the cores), unless the user
 * asked for a count in OPENBLAS_NUM_THREADS; then the default kernel, from MLSYS_GEMM. */
static void gemm_setup(void)
{
#ifdef HAVE_OPENBLAS
    /* The count OpenBLAS read at program start may not be the one in force now: a rank
     * forked by the launcher (mlsys_run_fn) gets OPENBLAS_NUM_THREADS=1 after the library
     * started, so the count is set here, from the variable or 1. */
    const char *nt = getenv("OPENBLAS_NUM_THREADS");
    openblas_set_num_threads(nt && atoi(nt) > 0 ? atoi(nt) : 1);
    g_kernel = NN_GEMM_BLAS;
#endif
    const char *env = getenv("MLSYS_GEMM");
    if (!env || !*env)
        return;
    if (strcmp(env, "ref") == 0)
        g_kernel = NN_GEMM_REF;
    else if (strcmp(env, "blas") == 0 && nn_have_blas())
        g_kernel = NN_GEMM_BLAS;
    else
        fprintf(stderr, "mlsys: MLSYS_GEMM=%s not usable here (ref%s), using %s\n", env,
                nn_have_blas() ? "|blas" : "", nn_gemm_kernel_name(g_kernel));
}

int nn_have_blas(void)
{
#ifdef HAVE_OPENBLAS
    return 1;
#else
    return 0;
#endif
}

/* Setup runs first, so an explicit choice always wins over MLSYS_GEMM. */
int nn_set_gemm_kernel(nn_gemm_kernel k)
{
    pthread_once(&g_once, gemm_setup);
    if (k != NN_GEMM_REF && !(k == NN_GEMM_BLAS && nn_have_blas()))
        return -1;
    g_kernel = k;
    return 0;
}

nn_gemm_kernel nn_get_gemm_kernel(void)
{
    pthread_once(&g_once, gemm_setup);
    return g_kernel;
}

const char *nn_gemm_kernel_name(nn_gemm_kernel k)
{
    return k == NN_GEMM_BLAS ? "blas" : "ref";
}

/* A dot product with eight running partial sums instead of one. With a single sum every
 * addition waits for the previous one, and the compiler may not reorder float additions
 * (the rounding would change), so it cannot use SIMD. Eight independent sums are one
 * vector register's worth: the loop vectorises, and the sums are combined at the end. */
static float dot(const float *a, const float *b, int K)
{
    float part[8] = { 0 };
    int k = 0;
    for (; k + 8 <= K; k += 8)
        for (int u = 0; u < 8; u++)
            part[u] += a[k + u] * b[k + u];
    float s = 0.0f;
    for (; k < K; k++)
        s += a[k] * b[k];
    for (int u = 0; u < 8; u++)
        s += part[u];
    return s;
}

/* The reference kernel. First C = beta·C (beta = 0 writes zeros, so garbage or NaN in C
 * never leaks through). Then each of the four layouts gets the loop order whose innermost
 * loop walks memory with stride 1, which is most of what makes a GEMM cache friendly:
 *   NN  C[i,:] += A[i,k] · B[k,:]    (a row of B, scaled, added to a row of C)
 *   TN  same, with A[i,k] read as A[k][i]
 *   NT  C[i,j] += dot(A[i,:], B[j,:]) (both rows contiguous: a dot product)
 *   TT  C[i,j] += dot(A[:,i], B[j,:]) (rare; the A column is strided)
 * The compiler vectorises the stride-1 loops. BLAS adds blocking for the caches, packing
 * and hand-written SIMD micro-kernels on top of the same arithmetic. */
void nn_gemm_ref(int trans_a, int trans_b, int M, int N, int K, float alpha, const float *A,
                 int lda, const float *B, int ldb, float beta, float *C, int ldc)
{
    if (M <= 0 || N <= 0)
        return;
    for (int i = 0; i < M; i++) {
        float *c = C + (size_t)i * ldc;
        for (int j = 0; j < N; j++)
            c[j] = beta == 0.0f ? 0.0f : beta * c[j];
    }
    if (alpha == 0.0f || K == 0)
        return;

    if (!trans_b) {
        /* NN and TN: rank-1 updates row by row */
        for (int i = 0; i < M; i++) {
            float *c = C + (size_t)i * ldc;
            for (int k = 0; k < K; k++) {
                float a = alpha * (trans_a ? A[(size_t)k * lda + i] : A[(size_t)i * lda + k]);
                const float *b = B + (size_t)k * ldb;
                for (int j = 0; j < N; j++)
                    c[j] += a * b[j];
            }
        }
    } else {
        /* NT and TT: one dot product per element of C */
        for (int i = 0; i < M; i++) {
            float *c = C + (size_t)i * ldc;
            for (int j = 0; j < N; j++) {
                const float *b = B + (size_t)j * ldb;
                float s = 0.0f;
                if (!trans_a) {
                    s = dot(A + (size_t)i * lda, b, K);
                } else {
                    for (int k = 0; k < K; k++)
                        s += A[(size_t)k * lda + i] * b[k];
                }
                c[j] += alpha * s;
            }
        }
    }
}

void nn_gemm(int trans_a, int trans_b, int M, int N, int K, float alpha, const float *A,
             int lda, const float *B, int ldb, float beta, float *C, int ldc)
{
    if (M <= 0 || N <= 0)
        return;
    pthread_once(&g_once, gemm_setup);
#ifdef HAVE_OPENBLAS
    if (g_kernel == NN_GEMM_BLAS && K > 0) {
        cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                    trans_b ? CblasTrans : CblasNoTrans, M, N, K, alpha, A, lda, B, ldb, beta,
                    C, ldc);
        return;
    }
#endif
    nn_gemm_ref(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}
