/* test_nn_params.c - core/nn's bookkeeping: the flat parameter set (layout, names, page
 * alignment, shards), the optimizers against steps worked out by hand and against a
 * double-precision formula, range-sharded optimizers against a whole-vector one (what ZeRO
 * relies on), and the seeded initialisers' ranges, moments and determinism. */
#include "../../core/nn/nn.h"
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

START_TEST(test_params_layout)
{
    nn_params p;
    nn_params_init(&p);
    int shape3[3] = { 2, 3, 4 };
    ck_assert_int_eq(nn_params_add2(&p, "w", 3, 5), 0);
    ck_assert_int_eq(nn_params_add1(&p, "b", 3), 1);
    ck_assert_int_eq(nn_params_add(&p, "k", 3, shape3), 2);
    ck_assert_int_eq(nn_params_add1(&p, "b", 4), -1);          /* duplicate name */
    ck_assert_int_eq(nn_params_add1(&p, "z", 0), -1);          /* empty shape */
    ck_assert_int_eq(nn_params_add(&p, "q", 5, shape3), -1);   /* too many dims */
    ck_assert_int_eq(nn_params_add1(&p, "", 2), -1);
    ck_assert_uint_eq(p.numel, 15 + 3 + 24);
    ck_assert_int_eq(nn_params_alloc(&p, 1), 0);
    ck_assert_int_eq(nn_params_alloc(&p, 1), -1);
    ck_assert_int_eq(nn_params_add1(&p, "late", 2), -1);       /* after alloc */

    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    ck_assert_uint_eq((uintptr_t)p.data % page, 0);
    ck_assert_uint_eq((uintptr_t)p.grad % page, 0);
    ck_assert_uint_eq(p.bytes % page, 0);
    ck_assert(p.bytes >= p.numel * sizeof(float));
    for (size_t i = 0; i < p.numel; i++)
        ck_assert(p.data[i] == 0.0f && p.grad[i] == 0.0f);

    /* back to back, in declaration order, grads in the same layout */
    nn_tensor *w = nn_params_find(&p, "w"), *b = nn_params_find(&p, "b");
    nn_tensor *k = nn_params_find(&p, "k");
    ck_assert(w && b && k && !nn_params_find(&p, "nope"));
    ck_assert_uint_eq(w->offset, 0);
    ck_assert_uint_eq(b->offset, 15);
    ck_assert_uint_eq(k->offset, 18);
    ck_assert_uint_eq(k->numel, 24);
    ck_assert_int_eq(k->ndim, 3);
    ck_assert_int_eq(k->shape[2], 4);
    ck_assert_str_eq(k->name, "k");
    ck_assert(b->data == p.data + 15 && b->grad == p.grad + 15);
    k->grad[23] = 5.0f;
    ck_assert(p.grad[p.numel - 1] == 5.0f);
    nn_params_zero_grad(&p);
    ck_assert(p.grad[p.numel - 1] == 0.0f);
    nn_params_fini(&p);
    ck_assert(p.data == NULL && p.count == 0);

    nn_params_init(&p);                      /* inference: no gradient vector */
    nn_params_add1(&p, "g", 10);
    ck_assert_int_eq(nn_params_alloc(&p, 0), 0);
    ck_assert(p.grad == NULL && p.t[0].grad == NULL && p.t[0].data == p.data);
    nn_params_zero_grad(&p);
    nn_params_fini(&p);
}
END_TEST

START_TEST(test_params_many)
{
    nn_params p;                             /* the tensor table grows past its first size */
    nn_params_init(&p);
    char name[32];
    for (int i = 0; i < 100; i++) {
        snprintf(name, sizeof name, "layer%d.w", i);
        ck_assert_int_eq(nn_params_add2(&p, name, 2, i + 1), i);
    }
    nn_params_alloc(&p, 1);
    size_t off = 0;
    for (int i = 0; i < 100; i++) {
        ck_assert_uint_eq(p.t[i].offset, off);
        off += p.t[i].numel;
    }
    ck_assert_uint_eq(off, p.numel);
    ck_assert(nn_params_find(&p, "layer99.w") == &p.t[99]);
    nn_params_fini(&p);
}
END_TEST

START_TEST(test_shard_range)
{
    static const size_t ns[] = { 0, 1, 2, 7, 10, 1000003 };
    for (size_t k = 0; k < sizeof ns / sizeof ns[0]; k++) {
        for (int world = 1; world <= 8; world++) {
            size_t next = 0;
            for (int i = 0; i < world; i++) {
                size_t off, len;
                nn_shard_range(ns[k], i, world, &off, &len);
                ck_assert_uint_eq(off, next);              /* tiles [0, n) in order */
                ck_assert(len == ns[k] / world || len == ns[k] / world + 1);
                next = off + len;
            }
            ck_assert_uint_eq(next, ns[k]);
        }
    }
}
END_TEST

/* ---- optimizers ---- */

START_TEST(test_sgd_by_hand)
{
    /* w = 1, lr = 0.1.  Plain: g = 0.5 -> w = 1 - 0.05 = 0.95.
     * Momentum 0.9: step 1, g = 0.5:   v = 0.5,              w = 1 - 0.05 = 0.95
     *               step 2, g = -0.25: v = 0.45 - 0.25 = 0.2, w = 0.95 - 0.02 = 0.93 */
    float w[2] = { 1.0f, 1.0f }, g[2] = { 0.5f, 0.5f };
    nn_sgd plain, mom;
    nn_sgd_init(&plain, 0.1f, 0.0f, 0, 1);
    nn_sgd_init(&mom, 0.1f, 0.9f, 1, 1);
    ck_assert(plain.velocity == NULL && mom.velocity != NULL);
    nn_sgd_step(&plain, &w[0], &g[0]);
    nn_sgd_step(&mom, &w[mom.offset], &g[mom.offset]);
    ck_assert(fabsf(w[0] - 0.95f) < 1e-7f && fabsf(w[1] - 0.95f) < 1e-7f);
    g[1] = -0.25f;
    nn_sgd_step(&mom, &w[1], &g[1]);
    ck_assert_msg(fabsf(w[1] - 0.93f) < 1e-6f, "w = %.8f", w[1]);
    ck_assert(fabsf(mom.velocity[0] - 0.2f) < 1e-7f);
    ck_assert_int_eq(mom.steps, 2);
    nn_sgd_fini(&plain);
    nn_sgd_fini(&mom);
}
END_TEST

START_TEST(test_adamw_by_hand)
{
    /* w = 1, lr = 0.1, β1 = 0.9, β2 = 0.999, eps = 1e-8, wd = 0.01.
     * t=1, g = 0.5:  w = 1·(1 - 0.001) = 0.999; m = 0.05; v = 0.00025;
     *                m̂ = 0.05/0.1 = 0.5; v̂ = 0.00025/0.001 = 0.25;
     *                w = 0.999 - 0.1·0.5/(0.5 + 1e-8) = 0.899
     * t=2, g = -0.25: w = 0.899·0.999 = 0.898101; m = 0.045 - 0.025 = 0.02;
     *                v = 0.00024975 + 0.0000625 = 0.00031225;
     *                m̂ = 0.02/0.19 = 0.1052632; v̂ = 0.00031225/0.001999 = 0.1562031;
     *                w = 0.898101 - 0.1·0.1052632/0.3952254 = 0.8714673
     * t=3, g = 2:    (same arithmetic) w = 0.8035311 */
    float w = 1.0f, g;
    nn_adamw o;
    nn_adamw_init(&o, 0.1f, 0.9f, 0.999f, 1e-8f, 0.01f, 0, 1);
    g = 0.5f;
    nn_adamw_step(&o, &w, &g);
    ck_assert_msg(fabsf(w - 0.899f) < 1e-6f, "t=1: w = %.8f", w);
    ck_assert(fabsf(o.m[0] - 0.05f) < 1e-7f && fabsf(o.v[0] - 0.00025f) < 1e-8f);
    g = -0.25f;
    nn_adamw_step(&o, &w, &g);
    ck_assert_msg(fabsf(w - 0.8714673f) < 2e-6f, "t=2: w = %.8f", w);
    g = 2.0f;
    nn_adamw_step(&o, &w, &g);
    ck_assert_msg(fabsf(w - 0.8035311f) < 3e-6f, "t=3: w = %.8f", w);
    ck_assert_int_eq(o.steps, 3);
    nn_adamw_fini(&o);
}
END_TEST

/* AdamW on a random vector for 10 steps against the formulas in double, and two optimizers
 * on the two halves of the range against one on the whole (ZeRO's premise: the update of
 * an element needs only that element's state). */
START_TEST(test_adamw_sharded)
{
    enum { N = 1001, STEPS = 10 };
    static float w_whole[N], w_split[N], g[N];
    static double wd[N], md[N], vd[N];
    mlsys_rng r;
    mlsys_rng_seed(&r, 3);
    for (int i = 0; i < N; i++)
        w_whole[i] = w_split[i] = (float)(wd[i] = mlsys_rng_normal(&r));
    const float lr = 1e-2f, b1 = 0.9f, b2 = 0.95f, eps = 1e-6f, decay = 0.1f;
    nn_adamw whole, lo, hi;
    size_t off, len;
    nn_adamw_init(&whole, lr, b1, b2, eps, decay, 0, N);
    nn_shard_range(N, 0, 2, &off, &len);
    nn_adamw_init(&lo, lr, b1, b2, eps, decay, off, len);
    nn_shard_range(N, 1, 2, &off, &len);
    nn_adamw_init(&hi, lr, b1, b2, eps, decay, off, len);
    for (int t = 1; t <= STEPS; t++) {
        for (int i = 0; i < N; i++)
            g[i] = (float)mlsys_rng_normal(&r);
        nn_adamw_step(&whole, w_whole, g);
        nn_adamw_step(&lo, w_split + lo.offset, g + lo.offset);
        nn_adamw_step(&hi, w_split + hi.offset, g + hi.offset);
        for (int i = 0; i < N; i++) {
            wd[i] -= (double)lr * decay * wd[i];
            md[i] = b1 * md[i] + (1.0 - b1) * g[i];
            vd[i] = b2 * vd[i] + (1.0 - b2) * (double)g[i] * g[i];
            double mh = md[i] / (1.0 - pow(b1, t)), vh = vd[i] / (1.0 - pow(b2, t));
            wd[i] -= lr * mh / (sqrt(vh) + eps);
        }
    }
    for (int i = 0; i < N; i++) {
        ck_assert_msg(fabs(w_whole[i] - wd[i]) < 1e-5, "w[%d] = %.7f, want %.7f", i,
                      w_whole[i], wd[i]);
        ck_assert_msg(w_whole[i] == w_split[i], "sharded w[%d] differs", i);
    }
    nn_adamw_fini(&whole);
    nn_adamw_fini(&lo);
    nn_adamw_fini(&hi);
}
END_TEST

START_TEST(test_sumsq_scale)
{
    float x[4] = { 3, -4, 0, 12 };
    ck_assert(nn_sumsq(x, 4) == 169.0);
    nn_scale(x, 4, 0.5f);
    ck_assert(x[0] == 1.5f && x[1] == -2.0f && x[3] == 6.0f);
}
END_TEST

/* ---- initialisers ---- */

static void moments(const float *w, size_t n, double *mean, double *var, float *lo, float *hi)
{
    double s = 0, ss = 0;
    *lo = INFINITY;
    *hi = -INFINITY;
    for (size_t i = 0; i < n; i++) {
        s += w[i];
        ss += (double)w[i] * w[i];
        *lo = w[i] < *lo ? w[i] : *lo;
        *hi = w[i] > *hi ? w[i] : *hi;
    }
    *mean = s / n;
    *var = ss / n - *mean * *mean;
}

START_TEST(test_init)
{
    enum { N = 40000 };
    float *a = mlsys_xcalloc(N, sizeof(float)), *b = mlsys_xcalloc(N, sizeof(float));
    double mean, var;
    float lo, hi;
    mlsys_rng r;

    /* Linear default: U(±1/√fan_in), variance k²/3 */
    mlsys_rng_seed(&r, 9);
    nn_init_linear(a, N, 784, &r);
    moments(a, N, &mean, &var, &lo, &hi);
    double k = 1.0 / sqrt(784.0);
    ck_assert(lo >= -k && hi <= k && lo < -0.99 * k && hi > 0.99 * k);
    ck_assert_msg(fabs(mean) < 0.02 * k && fabs(var / (k * k / 3) - 1) < 0.03, "var %g", var);

    /* the same seed gives the same weights; another seed does not */
    mlsys_rng_seed(&r, 9);
    nn_init_linear(b, N, 784, &r);
    ck_assert(memcmp(a, b, N * sizeof(float)) == 0);
    mlsys_rng_seed(&r, 10);
    nn_init_linear(b, N, 784, &r);
    ck_assert(memcmp(a, b, N * sizeof(float)) != 0);

    /* Xavier: U(±√(6/(in+out))) */
    nn_init_xavier_uniform(a, N, 256, 10, &r);
    moments(a, N, &mean, &var, &lo, &hi);
    double x = sqrt(6.0 / 266.0);
    ck_assert(lo >= -x && hi <= x && fabs(var / (x * x / 3) - 1) < 0.03);

    /* normal(mean 0.5, std 0.02) */
    nn_init_normal(a, N, 0.5f, 0.02f, &r);
    moments(a, N, &mean, &var, &lo, &hi);
    ck_assert_msg(fabs(mean - 0.5) < 0.001 && fabs(sqrt(var) / 0.02 - 1) < 0.03,
                  "mean %g std %g", mean, sqrt(var));

    nn_init_uniform(a, N, 2.0f, 3.0f, &r);
    moments(a, N, &mean, &var, &lo, &hi);
    ck_assert(lo >= 2.0f && hi < 3.0f && fabs(mean - 2.5) < 0.01);
    nn_init_const(a, N, 0.25f);
    ck_assert(a[0] == 0.25f && a[N - 1] == 0.25f);
    free(a);
    free(b);
}
END_TEST

static Suite *nn_params_suite(void)
{
    Suite *s = suite_create("nn_params");
    TCase *tc = tcase_create("params");
    tcase_add_test(tc, test_params_layout);
    tcase_add_test(tc, test_params_many);
    tcase_add_test(tc, test_shard_range);
    suite_add_tcase(s, tc);
    tc = tcase_create("optim");
    tcase_add_test(tc, test_sgd_by_hand);
    tcase_add_test(tc, test_adamw_by_hand);
    tcase_add_test(tc, test_adamw_sharded);
    tcase_add_test(tc, test_sumsq_scale);
    suite_add_tcase(s, tc);
    tc = tcase_create("init");
    tcase_add_test(tc, test_init);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(nn_params_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
