/* test_train_promises.c - promises of the data- and tensor-parallel code that the chapter
 * suites let slip. DDP: a bucket holds exactly the tensors that overlap its range (one that
 * only touches its edge is not one of them), so a bucket whose tensors are all ready is
 * launched at once, during backward, in the order backward fills them (a dry run: the layout
 * and the launch rule, no messages). TP's comparison: a NaN anywhere counts as an infinite
 * difference, never as none (the labs' "max diff" checks rest on it). */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "../../core/train/train.h"
#include "../../chapters/ch06/tp.h"

/* Tensors of 6, 4 and 8 floats (offsets 0, 6, 10); buckets of 4 floats after a first of 8,
 * cut from the end: [10, 18) = tensor 2, [6, 10) = tensor 1, [2, 6) and [0, 2) in tensor 0. */
START_TEST(ddp_bucket_holds_what_overlaps)
{
    nn_params p;
    nn_params_init(&p);
    ck_assert_int_eq(nn_params_add1(&p, "a", 6), 0);
    ck_assert_int_eq(nn_params_add1(&p, "b", 4), 1);
    ck_assert_int_eq(nn_params_add1(&p, "c", 8), 2);
    ck_assert_int_eq(nn_params_alloc(&p, 1), 0);
    ddp *d;
    ck_assert_int_eq(ddp_create(&d, NULL, &p, 4 * sizeof(float), 8 * sizeof(float)), 0);
    ck_assert_int_eq(d->nbuckets, 4);
    static const int lo[4] = {2, 1, 0, 0}, hi[4] = {2, 1, 0, 0};
    static const size_t off[4] = {10, 6, 2, 0}, n[4] = {8, 4, 4, 2};
    for (int k = 0; k < 4; k++) {
        ck_assert_msg(d->b[k].off == off[k] && d->b[k].n == n[k], "bucket %d: [%zu, +%zu)", k,
                      d->b[k].off, d->b[k].n);
        ck_assert_msg(d->b[k].t_lo == lo[k] && d->b[k].t_hi == hi[k], "bucket %d holds tensors "
                      "%d..%d, expected %d..%d", k, d->b[k].t_lo, d->b[k].t_hi, lo[k], hi[k]);
    }
    /* backward: c, then b, then a; each bucket goes as soon as its tensors are ready */
    ddp_begin(d);
    ck_assert_int_eq(ddp_grad_ready(d, 2), 0);
    ck_assert_int_eq(d->nlaunched, 1);
    ck_assert_int_eq(d->launch_order[0], 0);
    ck_assert_int_eq(ddp_grad_ready(d, 1), 0);
    ck_assert_int_eq(d->nlaunched, 2);
    ck_assert_int_eq(d->launch_order[1], 1);
    ck_assert_int_eq(ddp_grad_ready(d, 0), 0);
    ck_assert_int_eq(d->nlaunched, 4);
    ck_assert_int_eq(ddp_finish(d), 0);
    ck_assert_int_eq(d->late, 0);
    ddp_free(d);
    nn_params_fini(&p);
}
END_TEST

START_TEST(tp_diff_sees_nan)
{
    const float ref[4] = {1, 2, 3, 4};
    float got[4] = {1, 2, 3, 4};
    tp_diff d = tp_max_diff(got, ref, 4);
    ck_assert(d.abs == 0 && d.mag == 4);
    got[2] = NAN;
    d = tp_max_diff(got, ref, 4);
    ck_assert_msg(isinf(d.abs), "a NaN output differs by %g", d.abs);
    got[2] = 3;
    got[0] = NAN;                 /* the first element, before any larger difference */
    got[3] = 4.5f;
    d = tp_max_diff(got, ref, 4);
    ck_assert_msg(isinf(d.abs), "a NaN output differs by %g", d.abs);
    /* row by row, the reference strided (the third column is not compared) */
    const float want[2][3] = {{1, 2, 9}, {3, 4, 9}};
    float rows[4] = {1, 2, 3, NAN};
    d = tp_max_diff_strided(rows, &want[0][0], 2, 2, 3);
    ck_assert_msg(isinf(d.abs), "strided: a NaN in the second row differs by %g", d.abs);
    rows[3] = 4;
    d = tp_max_diff_strided(rows, &want[0][0], 2, 2, 3);
    ck_assert(d.abs == 0);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("train_promises");
    TCase *tc = tcase_create("train");
    tcase_add_test(tc, ddp_bucket_holds_what_overlaps);
    tcase_add_test(tc, tp_diff_sees_nan);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
