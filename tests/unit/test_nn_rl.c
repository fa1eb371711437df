/* test_nn_rl.c - what core/nn gained for reinforcement learning, against independent
 * references: tanh against libm's double tanh over a dense grid and at the edges (0, 0.5,
 * 9, infinities, NaN) and its backward against central finite differences; the categorical
 * draw against its distribution by a chi-square test with a fixed seed (and the same test
 * rejecting a wrong distribution, so it has teeth); orthogonal initialisation against
 * WᵀW = gain²·I. */
#include "../../core/nn/nn.h"
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- tanh ---- */

START_TEST(tanh_matches_libm)
{
    /* every 1/4096 over [-20, 20] plus the points where the code changes method */
    int n = 40 * 4096 + 1;
    float *x = malloc((size_t)(n + 16) * sizeof *x), *y = malloc((size_t)(n + 16) * sizeof *y);
    for (int i = 0; i < n; i++)
        x[i] = -20.0f + (float)i / 4096.0f;
    const float edges[] = {0.0f, -0.0f, 0.5f, -0.5f, nextafterf(0.5f, 0.0f), 9.0f, -9.0f,
                           nextafterf(9.0f, 0.0f), 1e-30f, -1e-20f, 1e-45f, 88.0f, -104.0f,
                           3.4e38f, 0.25f, 2.0f};
    for (int i = 0; i < 16; i++)
        x[n + i] = edges[i];
    nn_tanh_forward(y, x, (size_t)n + 16);
    double worst = 0.0;
    float worst_x = 0.0f;
    for (int i = 0; i < n + 16; i++) {
        double want = tanh((double)x[i]);
        double rel = want == 0.0 ? fabs(y[i]) : fabs(y[i] - want) / fabs(want);
        if (rel > worst) {
            worst = rel;
            worst_x = x[i];
        }
    }
    printf("tanh: largest relative error %.3g at x = %.9g\n", worst, worst_x);
    ck_assert_msg(worst <= 2e-7, "tanh off by %g (relative) at %.9g", worst, worst_x);
    /* signs of zeros, infinities, NaN */
    float sp[4] = {-0.0f, INFINITY, -INFINITY, NAN}, out[4];
    nn_tanh_forward(out, sp, 4);
    ck_assert(out[0] == 0.0f && signbit(out[0]));
    ck_assert(out[1] == 1.0f && out[2] == -1.0f);
    ck_assert(isnan(out[3]));
    /* in place */
    memcpy(y, x, (size_t)n * sizeof *x);
    nn_tanh_forward(y, y, (size_t)n);
    for (int i = 0; i < n; i += 97)
        ck_assert(fabs(y[i] - tanh((double)x[i])) <= 2e-7 * fabs(tanh((double)x[i])) + 1e-30);
    free(x);
    free(y);
}
END_TEST

typedef struct tanh_ctx {
    float *x, *w;
    size_t n;
} tanh_ctx;

/* f(x) = Σ w_i·tanh(x_i), in double so that the differences are meaningful */
static double tanh_loss(void *u)
{
    tanh_ctx *c = u;
    double s = 0.0;
    for (size_t i = 0; i < c->n; i++) {
        float y;
        nn_tanh_forward(&y, &c->x[i], 1);
        s += (double)c->w[i] * y;
    }
    return s;
}

START_TEST(tanh_backward_gradcheck)
{
    mlsys_rng r;
    mlsys_rng_seed(&r, 7);
    size_t n = 200;
    float *x = malloc(n * sizeof *x), *w = malloc(n * sizeof *w), *y = malloc(n * sizeof *y);
    float *dx = malloc(n * sizeof *dx);
    for (size_t i = 0; i < n; i++) {
        x[i] = (float)(-4.0 + 8.0 * mlsys_rng_uniform(&r));
        w[i] = (float)(-1.0 + 2.0 * mlsys_rng_uniform(&r));
    }
    nn_tanh_forward(y, x, n);
    nn_tanh_backward(dx, w, y, n);
    tanh_ctx c = {x, w, n};
    nn_gradcheck_result res;
    /* h = 3e-3: the truncation error (h²/6·|tanh'''| <= 3e-6) and the float rounding of one
     * term over 2h (about 1e-5) both stay far below the floor of 1e-2 */
    double err = nn_gradcheck(tanh_loss, &c, x, dx, n, 3e-3f, 1e-2, 0, &res);
    printf("tanh backward: max relative error %.3g (entry %zu: %g vs %g)\n", err, res.worst,
           res.worst_analytic, res.worst_numeric);
    ck_assert_msg(err < 1e-2, "tanh backward off by %g", err);
    /* in place on the forward's buffer: dx = dy·(1 - y²) with dx == y */
    float yy[3] = {0.0f, 0.5f, -0.9f}, dy[3] = {2.0f, 2.0f, 2.0f};
    nn_tanh_backward(yy, dy, yy, 3);
    ck_assert(yy[0] == 2.0f && fabsf(yy[1] - 1.5f) < 1e-7f && fabsf(yy[2] - 0.38f) < 1e-6f);
    free(x);
    free(w);
    free(y);
    free(dx);
}
END_TEST

/* ---- the categorical draw ---- */

/* Pearson's statistic of counts[k] against N·p[k]/Σp over the categories with p > 0. */
static double chi_square(const long *counts, const double *p, int k, long N)
{
    double tot = 0.0, chi = 0.0;
    for (int i = 0; i < k; i++)
        tot += p[i];
    for (int i = 0; i < k; i++) {
        if (p[i] <= 0.0)
            continue;
        double e = (double)N * p[i] / tot, d = (double)counts[i] - e;
        chi += d * d / e;
    }
    return chi;
}

START_TEST(categorical_chi_square)
{
    /* unnormalised weights, one of them 0; 5 categories of positive weight: 4 degrees of
     * freedom, whose 0.1% critical value is 18.47 */
    const float w[6] = {1.0f, 2.0f, 0.0f, 3.0f, 4.0f, 0.5f};
    const double wd[6] = {1, 2, 0, 3, 4, 0.5};
    const double uniform[6] = {1, 1, 0, 1, 1, 1};
    long counts[6] = {0}, N = 200000;
    mlsys_rng r;
    mlsys_rng_seed(&r, 12345);
    for (long i = 0; i < N; i++) {
        int k = nn_sample_categorical(w, 6, &r);
        ck_assert(k >= 0 && k < 6);
        counts[k]++;
    }
    ck_assert_int_eq(counts[2], 0);             /* weight 0 is never drawn */
    double chi = chi_square(counts, wd, 6, N);
    double wrong = chi_square(counts, uniform, 6, N);
    printf("categorical: chi-square %.2f (4 dof, critical 18.47); against uniform %.0f\n", chi,
           wrong);
    ck_assert_msg(chi < 18.47, "draws do not follow the weights: chi-square %g", chi);
    ck_assert_msg(wrong > 1000.0, "the test cannot tell the weights from uniform: %g", wrong);
    /* one uniform per draw: the same seed gives the same sequence */
    mlsys_rng a, b;
    mlsys_rng_seed(&a, 3);
    mlsys_rng_seed(&b, 3);
    for (int i = 0; i < 100; i++)
        ck_assert_int_eq(nn_sample_categorical(w, 6, &a), nn_sample_categorical(w, 6, &b));
    ck_assert(mlsys_rng_u64(&a) == mlsys_rng_u64(&b));
}
END_TEST

START_TEST(categorical_edges)
{
    mlsys_rng r;
    mlsys_rng_seed(&r, 1);
    const float one[3] = {0.0f, 5.0f, 0.0f};
    for (int i = 0; i < 1000; i++)
        ck_assert_int_eq(nn_sample_categorical(one, 3, &r), 1);
    const float zero[2] = {0.0f, 0.0f}, neg[2] = {1.0f, -1.0f}, nan_[2] = {NAN, 1.0f};
    mlsys_rng keep = r;
    ck_assert_int_eq(nn_sample_categorical(zero, 2, &r), -1);
    ck_assert_int_eq(nn_sample_categorical(neg, 2, &r), -1);
    ck_assert_int_eq(nn_sample_categorical(nan_, 2, &r), -1);
    ck_assert_int_eq(nn_sample_categorical(one, 0, &r), -1);
    ck_assert(r.ctr == keep.ctr);               /* refused draws take no uniform */
    /* a weight of 1e-30 next to 1: drawn about never, yet never out of range */
    const float tiny[2] = {1e-30f, 1.0f};
    for (int i = 0; i < 1000; i++)
        ck_assert_int_eq(nn_sample_categorical(tiny, 2, &r), 1);
}
END_TEST

/* ---- orthogonal initialisation ---- */

static void check_orthogonal(int rows, int cols, float gain, uint64_t seed)
{
    mlsys_rng r;
    mlsys_rng_seed(&r, seed);
    float *w = malloc((size_t)rows * cols * sizeof *w);
    nn_init_orthogonal(w, rows, cols, gain, &r);
    /* tall: columns orthonormal (WᵀW); wide: rows orthonormal (WWᵀ) */
    int k = rows < cols ? rows : cols;
    double worst = 0.0;
    for (int a = 0; a < k; a++)
        for (int b = 0; b < k; b++) {
            double dot = 0.0;
            if (rows >= cols)
                for (int i = 0; i < rows; i++)
                    dot += (double)w[(size_t)i * cols + a] * w[(size_t)i * cols + b];
            else
                for (int j = 0; j < cols; j++)
                    dot += (double)w[(size_t)a * cols + j] * w[(size_t)b * cols + j];
            double want = a == b ? (double)gain * gain : 0.0;
            worst = fmax(worst, fabs(dot - want));
        }
    ck_assert_msg(worst < 1e-5 * gain * gain + 1e-6, "%dx%d gain %g: off by %g", rows, cols,
                  gain, worst);
    free(w);
}

START_TEST(orthogonal_init)
{
    check_orthogonal(64, 4, sqrtf(2.0f), 1);
    check_orthogonal(4, 64, 1.0f, 2);
    check_orthogonal(64, 64, sqrtf(2.0f), 3);
    check_orthogonal(2, 64, 0.01f, 4);
    check_orthogonal(1, 64, 1.0f, 5);
    /* a seed fixes the weights; another seed changes them */
    float a[64 * 4], b[64 * 4], c[64 * 4];
    mlsys_rng r1, r2, r3;
    mlsys_rng_seed(&r1, 9);
    mlsys_rng_seed(&r2, 9);
    mlsys_rng_seed(&r3, 10);
    nn_init_orthogonal(a, 64, 4, 1.0f, &r1);
    nn_init_orthogonal(b, 64, 4, 1.0f, &r2);
    nn_init_orthogonal(c, 64, 4, 1.0f, &r3);
    ck_assert(memcmp(a, b, sizeof a) == 0);
    ck_assert(memcmp(a, c, sizeof a) != 0);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("nn_rl");
    TCase *tc = tcase_create("nn_rl");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, tanh_matches_libm);
    tcase_add_test(tc, tanh_backward_gradcheck);
    tcase_add_test(tc, categorical_chi_square);
    tcase_add_test(tc, categorical_edges);
    tcase_add_test(tc, orthogonal_init);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
