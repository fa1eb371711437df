/* gemm_inv.c - the batch-invariant GEMM (NN_GEMM_INVARIANT): every element of C is computed by
 * one fixed sequence of float operations that depends on K and on nothing else, so a row of
 * C comes out bit for bit the same whether it is multiplied alone or inside a batch of 128,
 * at any position in it. BLAS gives no such promise: it picks a matrix-vector kernel for one
 * row and blocked, packed kernels for many, and they round differently. Here the tiles (how
 * many rows and columns share one pass over K, chosen for speed) change with the shape; the
 * arithmetic of an element never does:
 *   NT (y = x·Wᵀ, every linear layer's forward): element (i,j) is a dot product over K in
 *      eight lanes, lane u summing the products k ≡ u (mod 8) in increasing k with fused
 *      multiply-adds (the last partial group zero-padded), then the lanes added as
 *      ((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7)); then alpha·s (+ beta·c).
 *   NN, TN (backward: dx = dy·W, dW = dyᵀ·x): element (i,j) is one running sum over k in
 *      increasing order, one fused multiply-add per k; then alpha·s (+ beta·c).
 *   TT: the reference kernel (row by row already).
 * With AVX2 and FMA (checked once, when the program loads) the lanes are vector lanes; on
 * other CPUs the same structure runs in plain C without fusing, so the bits are the same for
 * any batch on one machine, not across machines. */
#include "nn.h"
#include <string.h>
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define INV_X86 1
#endif

static int g_use_avx2;       /* set once at load (inv_pick); tests may force plain C */
static int g_cpu_avx2;

#ifdef INV_X86
__attribute__((constructor)) static void inv_pick(void)
{
    __builtin_cpu_init();
    g_cpu_avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    g_use_avx2 = g_cpu_avx2;
}
#endif

const char *nn_gemm_invariant_isa(void)
{
    return g_use_avx2 ? "avx2+fma" : "generic";
}

void nn_gemm_invariant_generic(int on)
{
    g_use_avx2 = on ? 0 : g_cpu_avx2;
}

/* C = beta·C over an M x N block (the whole result when alpha = 0 or K = 0). */
static void scale_c(int M, int N, float beta, float *C, int ldc)
{
    for (int i = 0; i < M; i++) {
        float *c = C + (size_t)i * ldc;
        for (int j = 0; j < N; j++)
            c[j] = beta == 0.0f ? 0.0f : beta * c[j];
    }
}

/* ---- plain C: the same lane structure, unfused ---- */

static float dot_lanes(const float *a, const float *b, int K)
{
    float l[8] = {0};
    int k = 0;
    for (; k + 8 <= K; k += 8)
        for (int u = 0; u < 8; u++)
            l[u] += a[k + u] * b[k + u];
    for (int u = 0; k + u < K; u++)
        l[u] += a[k + u] * b[k + u];
    return ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7]));
}

static void nt_generic(int M, int N, int K, float alpha, const float *A, int lda,
                       const float *B, int ldb, float beta, float *C, int ldc)
{
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            float s = alpha * dot_lanes(A + (size_t)i * lda, B + (size_t)j * ldb, K);
            float *c = C + (size_t)i * ldc + j;
            *c = beta == 0.0f ? s : s + beta * *c;
        }
}

#ifdef INV_X86
/* ---- AVX2 + FMA ---- */
#define AVX2 __attribute__((target("avx2,fma")))
#define TILE static inline __attribute__((always_inline, target("avx2,fma")))

/* The fixed order of the lanes: ((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7)). */
TILE float hsum8(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
    return _mm_cvtss_f32(s);
}

/* NT: RB rows of A against CB rows of B (RB·CB dot products sharing their loads). The loops
 * have constant trip counts once inlined, and are unrolled into registers. */
TILE void nt_tile(const int RB, const int CB, int K, float alpha, const float *A, int lda,
                  const float *B, int ldb, float beta, float *C, int ldc, __m256i tail)
{
    __m256 acc[4][8];
#pragma GCC unroll 4
    for (int r = 0; r < RB; r++)
#pragma GCC unroll 8
        for (int c = 0; c < CB; c++)
            acc[r][c] = _mm256_setzero_ps();
    int k = 0;
    for (; k + 8 <= K; k += 8) {
        __m256 b[8];
#pragma GCC unroll 8
        for (int c = 0; c < CB; c++)
            b[c] = _mm256_loadu_ps(B + (size_t)c * ldb + k);
#pragma GCC unroll 4
        for (int r = 0; r < RB; r++) {
            __m256 a = _mm256_loadu_ps(A + (size_t)r * lda + k);
#pragma GCC unroll 8
            for (int c = 0; c < CB; c++)
                acc[r][c] = _mm256_fmadd_ps(a, b[c], acc[r][c]);
        }
    }
    if (k < K) {                       /* the last K % 8: masked loads read zeros beyond */
        __m256 b[8];
#pragma GCC unroll 8
        for (int c = 0; c < CB; c++)
            b[c] = _mm256_maskload_ps(B + (size_t)c * ldb + k, tail);
#pragma GCC unroll 4
        for (int r = 0; r < RB; r++) {
            __m256 a = _mm256_maskload_ps(A + (size_t)r * lda + k, tail);
#pragma GCC unroll 8
            for (int c = 0; c < CB; c++)
                acc[r][c] = _mm256_fmadd_ps(a, b[c], acc[r][c]);
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < RB; r++)
#pragma GCC unroll 8
        for (int c = 0; c < CB; c++) {
            float s = alpha * hsum8(acc[r][c]);
            float *o = C + (size_t)r * ldc + c;
            *o = beta == 0.0f ? s : s + beta * *o;
        }
}

/* A mask whose first n lanes (0..8) are on. */
AVX2 static __m256i lane_mask(int n)
{
    int m[8];
    for (int u = 0; u < 8; u++)
        m[u] = u < n ? -1 : 0;
    return _mm256_loadu_si256((const __m256i *)m);
}

/* Tiles of 4 rows x 3 columns (12 accumulators: the 16 registers minus the loads), then the
 * rows left over one at a time against 8 columns (8 independent sums keep the FMA units busy
 * when M = 1, a decode step of one sequence). */
AVX2 static void nt_avx2(int M, int N, int K, float alpha, const float *A, int lda,
                         const float *B, int ldb, float beta, float *C, int ldc)
{
    __m256i tail = lane_mask(K % 8);
    int i = 0;
    for (; i + 4 <= M; i += 4) {
        const float *a = A + (size_t)i * lda;
        float *c = C + (size_t)i * ldc;
        int j = 0;
        for (; j + 3 <= N; j += 3)
            nt_tile(4, 3, K, alpha, a, lda, B + (size_t)j * ldb, ldb, beta, c + j, ldc, tail);
        for (; j < N; j++)
            nt_tile(4, 1, K, alpha, a, lda, B + (size_t)j * ldb, ldb, beta, c + j, ldc, tail);
    }
    for (; i < M; i++) {
        const float *a = A + (size_t)i * lda;
        float *c = C + (size_t)i * ldc;
        int j = 0;
        for (; j + 8 <= N; j += 8)
            nt_tile(1, 8, K, alpha, a, lda, B + (size_t)j * ldb, ldb, beta, c + j, ldc, tail);
        for (; j < N; j++)
            nt_tile(1, 1, K, alpha, a, lda, B + (size_t)j * ldb, ldb, beta, c + j, ldc, tail);
    }
}

/* NN and TN: RB rows of C x CB vectors of 8 columns, one running sum per element over k in
 * order. Columns past N (the last partial vector) are masked off on load and store. */
TILE void nn_tile(const int RB, const int CB, int trans_a, int K, float alpha, const float *A,
                  int lda, const float *B, int ldb, float beta, float *C, int ldc,
                  __m256i last, int nlast)
{
    __m256 acc[4][8];
#pragma GCC unroll 4
    for (int r = 0; r < RB; r++)
#pragma GCC unroll 8
        for (int c = 0; c < CB; c++)
            acc[r][c] = _mm256_setzero_ps();
    for (int k = 0; k < K; k++) {
        const float *brow = B + (size_t)k * ldb;
        __m256 b[8];
#pragma GCC unroll 8
        for (int c = 0; c < CB; c++)
            b[c] = (nlast && c == CB - 1) ? _mm256_maskload_ps(brow + 8 * c, last)
                                          : _mm256_loadu_ps(brow + 8 * c);
#pragma GCC unroll 4
        for (int r = 0; r < RB; r++) {
            __m256 a = _mm256_set1_ps(trans_a ? A[(size_t)k * lda + r] : A[(size_t)r * lda + k]);
#pragma GCC unroll 8
            for (int c = 0; c < CB; c++)
                acc[r][c] = _mm256_fmadd_ps(a, b[c], acc[r][c]);
        }
    }
    __m256 al = _mm256_set1_ps(alpha), be = _mm256_set1_ps(beta);
#pragma GCC unroll 4
    for (int r = 0; r < RB; r++)
#pragma GCC unroll 8
        for (int c = 0; c < CB; c++) {
            float *o = C + (size_t)r * ldc + 8 * c;
            int part = nlast && c == CB - 1;
            __m256 v = _mm256_mul_ps(al, acc[r][c]);
            if (beta != 0.0f) {
                __m256 old = part ? _mm256_maskload_ps(o, last) : _mm256_loadu_ps(o);
                v = _mm256_add_ps(v, _mm256_mul_ps(be, old));
            }
            if (part)
                _mm256_maskstore_ps(o, last, v);
            else
                _mm256_storeu_ps(o, v);
        }
}

/* Tiles of 4 rows x 24 columns (12 accumulators), then the rows left over one at a time
 * against 64 columns (8 independent sums); the last partial vector of columns is masked. */
AVX2 static void nn_avx2(int trans_a, int M, int N, int K, float alpha, const float *A,
                         int lda, const float *B, int ldb, float beta, float *C, int ldc)
{
    int nfull = N / 8, rem = N % 8;
    __m256i last = lane_mask(rem);
    int i = 0;
    for (; i + 4 <= M; i += 4) {
        const float *a = trans_a ? A + i : A + (size_t)i * lda;
        float *c = C + (size_t)i * ldc;
        int v = 0;
        for (; v + 3 <= nfull; v += 3)
            nn_tile(4, 3, trans_a, K, alpha, a, lda, B + 8 * v, ldb, beta, c + 8 * v, ldc,
                    last, 0);
        for (; v < nfull; v++)
            nn_tile(4, 1, trans_a, K, alpha, a, lda, B + 8 * v, ldb, beta, c + 8 * v, ldc,
                    last, 0);
        if (rem)
            nn_tile(4, 1, trans_a, K, alpha, a, lda, B + 8 * v, ldb, beta, c + 8 * v, ldc,
                    last, 1);
    }
    for (; i < M; i++) {
        const float *a = trans_a ? A + i : A + (size_t)i * lda;
        float *c = C + (size_t)i * ldc;
        int v = 0;
        for (; v + 8 <= nfull; v += 8)
            nn_tile(1, 8, trans_a, K, alpha, a, lda, B + 8 * v, ldb, beta, c + 8 * v, ldc,
                    last, 0);
        for (; v < nfull; v++)
            nn_tile(1, 1, trans_a, K, alpha, a, lda, B + 8 * v, ldb, beta, c + 8 * v, ldc,
                    last, 0);
        if (rem)
            nn_tile(1, 1, trans_a, K, alpha, a, lda, B + 8 * v, ldb, beta, c + 8 * v, ldc,
                    last, 1);
    }
}
#endif

void nn_gemm_invariant(int trans_a, int trans_b, int M, int N, int K, float alpha,
                       const float *A, int lda, const float *B, int ldb, float beta, float *C,
                       int ldc)
{
    if (M <= 0 || N <= 0)
        return;
    if (alpha == 0.0f || K <= 0) {
        scale_c(M, N, beta, C, ldc);
        return;
    }
#ifdef INV_X86
    if (g_use_avx2 && !trans_a && trans_b) {
        nt_avx2(M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        return;
    }
    if (g_use_avx2 && !trans_b) {
        nn_avx2(trans_a, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
        return;
    }
#endif
    if (!trans_a && trans_b)
        nt_generic(M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    else
        nn_gemm_ref(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}
