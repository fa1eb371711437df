/* test_gemm_promises.c - the batch-invariant GEMM computes each element by the arithmetic its
 * comment states, to the bit (test_nn holds it to batch invariance and to a tolerance, which
 * any fixed order passes). NT (x·Wᵀ): eight lanes, lane u summing the products k ≡ u mod 8 in
 * increasing k (fused multiply-adds with AVX2 and FMA, the last group zero-padded; plain
 * multiply and add in the C path), then ((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7)), then alpha·s.
 * NN and TN with AVX2: one fused running sum over k in increasing order, then alpha·s; in the
 * C path the reference kernel's rank-1 updates, c += (alpha·a)·b for k in order. Written out
 * here in scalar C from that text and compared bit for bit. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../../core/nn/nn.h"

static float *rand_vec(size_t n, mlsys_rng *r)
{
    float *v = malloc(n * sizeof *v);
    for (size_t i = 0; i < n; i++)
        v[i] = (float)(2.0 * mlsys_rng_uniform(r) - 1.0);
    return v;
}

/* One NT element from its text: fused or not. */
static float nt_element(const float *a, const float *b, int K, int fused)
{
    float l[8] = {0};
    int k = 0;
    for (; k + 8 <= K; k += 8)
        for (int u = 0; u < 8; u++) {
            if (fused) {
                l[u] = fmaf(a[k + u], b[k + u], l[u]);
            } else {
                float p = a[k + u] * b[k + u];
                l[u] = l[u] + p;
            }
        }
    if (k < K)
        for (int u = 0; u < 8; u++) {
            if (fused) {                       /* the padded lanes add 0·0 too */
                float x = k + u < K ? a[k + u] : 0.0f, y = k + u < K ? b[k + u] : 0.0f;
                l[u] = fmaf(x, y, l[u]);
            } else if (k + u < K) {
                float p = a[k + u] * b[k + u];
                l[u] = l[u] + p;
            }
        }
    float lo = (l[0] + l[4]) + (l[2] + l[6]), hi = (l[1] + l[5]) + (l[3] + l[7]);
    return lo + hi;
}

static void check_nt(int fused, const char *what)
{
    static const int Ks[] = {1, 5, 7, 8, 9, 13, 16, 31, 64, 100, 129};
    const int M = 6, N = 10;
    const float alphas[] = {1.0f, 0.75f};
    mlsys_rng r;
    mlsys_rng_seed(&r, 91);
    ck_assert_int_eq(nn_set_gemm_kernel(NN_GEMM_INVARIANT), 0);
    for (size_t ki = 0; ki < sizeof Ks / sizeof Ks[0]; ki++)
        for (int ai = 0; ai < 2; ai++) {
            int K = Ks[ki];
            float *A = rand_vec((size_t)M * K, &r), *B = rand_vec((size_t)N * K, &r);
            float *C = calloc((size_t)M * N, sizeof *C);
            nn_gemm(0, 1, M, N, K, alphas[ai], A, K, B, K, 0.0f, C, N);
            for (int i = 0; i < M; i++)
                for (int j = 0; j < N; j++) {
                    float want = alphas[ai] * nt_element(A + (size_t)i * K, B + (size_t)j * K,
                                                         K, fused);
                    float got = C[(size_t)i * N + j];
                    ck_assert_msg(!memcmp(&got, &want, sizeof got), "%s NT K=%d alpha %g: "
                                  "C[%d,%d] = %.9g, its stated arithmetic gives %.9g", what,
                                  K, (double)alphas[ai], i, j, (double)got, (double)want);
                }
            free(A);
            free(B);
            free(C);
        }
}

/* NN (trans_a 0) and TN (1): one running sum over k, fused (AVX2) or as the reference's
 * rank-1 updates (alpha 1 there, so (alpha·a)·b = a·b). */
static void check_nn(int fused, const char *what)
{
    static const int Ks[] = {1, 3, 8, 17, 64};
    static const int Ns[] = {1, 7, 8, 9, 24, 33, 70};
    const int M = 5;
    mlsys_rng r;
    mlsys_rng_seed(&r, 92);
    ck_assert_int_eq(nn_set_gemm_kernel(NN_GEMM_INVARIANT), 0);
    for (int ta = 0; ta < 2; ta++)
        for (size_t ki = 0; ki < sizeof Ks / sizeof Ks[0]; ki++)
            for (size_t ni = 0; ni < sizeof Ns / sizeof Ns[0]; ni++) {
                int K = Ks[ki], N = Ns[ni], lda = ta ? M : K;
                float alpha = fused ? 0.5f : 1.0f;
                float *A = rand_vec((size_t)M * K, &r), *B = rand_vec((size_t)K * N, &r);
                float *C = calloc((size_t)M * N, sizeof *C);
                nn_gemm(ta, 0, M, N, K, alpha, A, lda, B, N, 0.0f, C, N);
                for (int i = 0; i < M; i++)
                    for (int j = 0; j < N; j++) {
                        float s = 0.0f;
                        for (int k = 0; k < K; k++) {
                            float a = ta ? A[(size_t)k * lda + i] : A[(size_t)i * lda + k];
                            if (fused) {
                                s = fmaf(a, B[(size_t)k * N + j], s);
                            } else {
                                float p = (alpha * a) * B[(size_t)k * N + j];
                                s = s + p;
                            }
                        }
                        float want = fused ? alpha * s : s, got = C[(size_t)i * N + j];
                        ck_assert_msg(!memcmp(&got, &want, sizeof got), "%s %s K=%d N=%d: "
                                      "C[%d,%d] = %.9g, its stated arithmetic gives %.9g", what,
                                      ta ? "TN" : "NN", K, N, i, j, (double)got, (double)want);
                    }
                free(A);
                free(B);
                free(C);
            }
}

START_TEST(nt_lanes_as_stated)
{
    int avx2 = !strcmp(nn_gemm_invariant_isa(), "avx2+fma");
    if (avx2)
        check_nt(1, "avx2+fma");
    else
        printf("gemm: this CPU has no AVX2+FMA: its fused path is not checked here\n");
    nn_gemm_invariant_generic(1);
    check_nt(0, "plain C");
    nn_gemm_invariant_generic(0);
}
END_TEST

START_TEST(nn_tn_running_sum_as_stated)
{
    if (!strcmp(nn_gemm_invariant_isa(), "avx2+fma"))
        check_nn(1, "avx2+fma");
    nn_gemm_invariant_generic(1);
    check_nn(0, "plain C");
    nn_gemm_invariant_generic(0);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("gemm_promises");
    TCase *tc = tcase_create("arithmetic");
    tcase_add_test(tc, nt_lanes_as_stated);
    tcase_add_test(tc, nn_tn_running_sum_as_stated);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
