/* gemm.c - the one matrix multiply every layer calls: C = alpha·op(A)·op(B) + beta·C,
 * row-major. Three kernels sit behind it: a short reference kernel meant to be read,
 * OpenBLAS's cblas_sgemm meant to be fast, and a batch-invariant kernel (gemm_inv.c) in which
 * a row of C comes out bit for bit the same however many rows are multiplied with it.
 * nn_set_gemm_kernel (or MLSYS_GEMM=ref|blas|invariant, read by nn_gemm_start) picks one;
 * all must agree to float rounding, which tests/unit/test_nn.c checks. */
#include "nn.h"
#include "../dynlib.h"
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef HAVE_OPENBLAS
#include <cblas.h>
#endif

/* The kernel is a plain variable with its default set at compile time: nn_gemm reads it and
 * checks nothing else (nothing to prime, no once-flag on every call). */
#ifdef HAVE_OPENBLAS
static nn_gemm_kernel g_kernel = NN_GEMM_BLAS;
#else
static nn_gemm_kernel g_kernel = NN_GEMM_REF;
#endif

#ifdef HAVE_OPENBLAS
/* OpenBLAS is loaded with dlopen by the first multiply that needs it, not by the dynamic
 * loader at start: a process that never multiplies (a rank of chapters 1-3, a command that
 * reads a file) neither loads it (with libgfortran and libquadmath) nor runs its start-up,
 * and a machine without it still runs every kernel but this one. The library reads
 * OPENBLAS_NUM_THREADS once, when it starts, and starts that many threads (one per core when
 * unset), which spin for a while even when no multiply uses them; nn_gemm_start exports 1
 * when the variable is unset (one BLAS thread per process: ranks are processes already), so
 * the library starts with it, and so does every process the lab starts. */
static struct {
    pthread_once_t once;
    void *so;
    __typeof__(cblas_sgemm) *sgemm;
    __typeof__(cblas_sgemv) *sgemv;
    __typeof__(openblas_get_num_threads) *threads;
    char why[300];
} g_blas = {.once = PTHREAD_ONCE_INIT};

static void blas_load(void)
{
    static const char *const names[] = {"libopenblas.so.0", "libopenblas.so", NULL};
    const char *env = getenv("MLSYS_OPENBLAS");      /* another build of it */
    const char *const own[] = {env, NULL};
    char err[256];
    if (!(g_blas.so = mlsys_dl_open_first(env && *env ? own : names, err, sizeof err))) {
        snprintf(g_blas.why, sizeof g_blas.why, "%s", err);
        return;
    }
    __typeof__(cblas_sgemm) *sgemm;
    const mlsys_dl_fn fns[] = {
        {(void **)&sgemm, "cblas_sgemm"},
        {(void **)&g_blas.sgemv, "cblas_sgemv"},
    };
    if (mlsys_dl_bind(g_blas.so, fns, 2)) {
        snprintf(g_blas.why, sizeof g_blas.why, "%s has no cblas_sgemm/cblas_sgemv",
                 env && *env ? env : "libopenblas.so.0");
        dlclose(g_blas.so);
        g_blas.so = NULL;
        return;
    }
    g_blas.threads = (__typeof__(openblas_get_num_threads) *)dlsym(g_blas.so,
                                                                   "openblas_get_num_threads");
    /* last: nn_gemm's look at it without the once (a thread that sees it set sees the
     * others set too) */
    __atomic_store_n(&g_blas.sgemm, sgemm, __ATOMIC_RELEASE);
}

/* The library's functions, loaded on the first call; 0, or -1 (g_blas.why says why). */
static int blas_ready(void)
{
    pthread_once(&g_blas.once, blas_load);
    return g_blas.sgemm ? 0 : -1;
}
#endif

void nn_gemm_start(char **argv)
{
    (void)argv;
#ifdef HAVE_OPENBLAS
    const char *nt = getenv("OPENBLAS_NUM_THREADS");
    if (!nt || !*nt)
        setenv("OPENBLAS_NUM_THREADS", "1", 1);     /* before any thread, before the library */
#endif
    const char *env = getenv("MLSYS_GEMM");
    if (!env || !*env)
        return;
    if (strcmp(env, "ref") == 0)
        g_kernel = NN_GEMM_REF;
    else if (strcmp(env, "blas") == 0 && nn_have_blas())
        g_kernel = NN_GEMM_BLAS;
    else if (strcmp(env, "invariant") == 0)
        g_kernel = NN_GEMM_INVARIANT;
    else
        fprintf(stderr, "mlsys: MLSYS_GEMM=%s not usable here (ref|invariant%s), using %s\n",
                env, nn_have_blas() ? "|blas" : "", nn_gemm_kernel_name(g_kernel));
}

int nn_have_blas(void)
{
#ifdef HAVE_OPENBLAS
    return blas_ready() == 0;
#else
    return 0;
#endif
}

const char *nn_blas_why(void)
{
#ifdef HAVE_OPENBLAS
    return blas_ready() == 0 ? NULL : g_blas.why;
#else
    return "built without OpenBLAS (apt-get install libopenblas-dev, then make)";
#endif
}

int nn_blas_threads(void)
{
#ifdef HAVE_OPENBLAS
    return blas_ready() == 0 && g_blas.threads ? g_blas.threads() : 0;
#else
    return 0;
#endif
}

int nn_set_gemm_kernel(nn_gemm_kernel k)
{
    if (k != NN_GEMM_REF && k != NN_GEMM_INVARIANT && !(k == NN_GEMM_BLAS && nn_have_blas()))
        return -1;
    g_kernel = k;
    return 0;
}

nn_gemm_kernel nn_get_gemm_kernel(void)
{
    return g_kernel;
}

const char *nn_gemm_kernel_name(nn_gemm_kernel k)
{
    return k == NN_GEMM_BLAS ? "blas" : k == NN_GEMM_INVARIANT ? "invariant" : "ref";
}

/* The reference kernel. First C = beta·C (beta = 0 writes zeros, so garbage or NaN in C
 * never leaks through). Then each of the four layouts gets the loop order whose innermost
 * loop walks memory with stride 1, which is most of what makes a GEMM cache friendly:
 *   NN  C[i,:] += A[i,k] · B[k,:]    (a row of B, scaled, added to a row of C)
 *   TN  same, with A[i,k] read as A[k][i]
 *   NT  C[i,j] += dot(A[i,:], B[j,:]) (both rows contiguous: a dot product)
 *   TT  C[i,j] += dot(A[:,i], B[j,:]) (rare; the A column is strided)
 * The compiler vectorises the stride-1 loops. BLAS adds blocking for the caches, packing
 * and hand-written SIMD micro-kernels on top of the same arithmetic. Every row of C is
 * computed on its own here, so this kernel is batch-invariant too (slowly). */
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
                    s = nn_dot(A + (size_t)i * lda, b, K);
                } else {
                    for (int k = 0; k < K; k++)
                        s += A[(size_t)k * lda + i] * b[k];
                }
                c[j] += alpha * s;
            }
        }
    }
}

#ifdef HAVE_OPENBLAS
/* OpenBLAS. One row (a decode step of one sequence, a single sample): sgemm would still pack
 * B into its blocked layout first, a copy as costly as the product itself, so the
 * matrix-vector kernel streams B straight through instead. */
static void gemm_blas(int trans_a, int trans_b, int M, int N, int K, float alpha,
                      const float *A, int lda, const float *B, int ldb, float beta, float *C,
                      int ldc)
{
    if (M == 1) {
        if (beta == 0.0f)        /* our contract: C is not read when beta = 0 */
            memset(C, 0, (size_t)N * sizeof(float));
        int incx = trans_a ? lda : 1;
        if (trans_b)             /* C[j] = Σ_k B[j,k] a[k]: B [N,K] as it is */
            g_blas.sgemv(CblasRowMajor, CblasNoTrans, N, K, alpha, B, ldb, A, incx, beta, C, 1);
        else                     /* C[j] = Σ_k B[k,j] a[k]: B [K,N] transposed */
            g_blas.sgemv(CblasRowMajor, CblasTrans, K, N, alpha, B, ldb, A, incx, beta, C, 1);
        return;
    }
    g_blas.sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                 trans_b ? CblasTrans : CblasNoTrans, M, N, K, alpha, A, lda, B, ldb, beta, C,
                 ldc);
}

/* The default kernel's first call: the library is loaded here. Where it cannot be (not
 * installed), the kernel becomes the reference one, said once on stderr. */
static int blas_or_fallback(void)
{
    if (blas_ready() == 0)
        return 0;
    static int said;
    if (!__atomic_exchange_n(&said, 1, __ATOMIC_RELAXED))
        fprintf(stderr, "mlsys: OpenBLAS cannot be loaded here (%s): multiplying with the "
                "reference kernel (MLSYS_GEMM=ref|invariant chooses one)\n", g_blas.why);
    g_kernel = NN_GEMM_REF;
    return -1;
}
#endif

void nn_gemm(int trans_a, int trans_b, int M, int N, int K, float alpha, const float *A,
             int lda, const float *B, int ldb, float beta, float *C, int ldc)
{
    if (M <= 0 || N <= 0)
        return;
    switch (g_kernel) {
#ifdef HAVE_OPENBLAS
    case NN_GEMM_BLAS:
        if (K > 0 && (__atomic_load_n(&g_blas.sgemm, __ATOMIC_ACQUIRE) ||
                      blas_or_fallback() == 0)) {
            gemm_blas(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
            return;
        }
        break;
#endif
    case NN_GEMM_INVARIANT:
        nn_gemm_invariant(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        return;
    default:
        break;
    }
    nn_gemm_ref(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}
