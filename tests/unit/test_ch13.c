/* test_ch13.c - chapter 13's reward calculator through the real program: the per-token
 * table and totals of the curriculum (§13.2: Σr = +0.5040), Σr = score − β·ΣKL for other β
 * and scores, --spread giving the same total, the β sweep's penalties, nets and labels
 * (every threshold of the effect scale reached), the four KL scenarios, and a negative β
 * refused in one line. */
#include "run_bin.h"
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The numbers on the line that starts (after spaces) with key, after key. */
static int numbers_after(const char *out, const char *key, double *v, int n)
{
    const char *p = out;
    size_t kl = strlen(key);
    while ((p = strstr(p, key))) {
        const char *line = p;
        while (line > out && line[-1] == ' ')
            line--;
        if (line == out || line[-1] == '\n') {
            const char *q = p + kl;
            for (int i = 0; i < n; i++) {
                char *end;
                while (*q == ' ')
                    q++;
                v[i] = strtod(q, &end);
                if (end == q)
                    return -1;
                q = end;
            }
            return 0;
        }
        p += kl;
    }
    return -1;
}

static double after_key(const char *out, const char *key)
{
    const char *p = strstr(out, key);
    ck_assert_msg(p != NULL, "missing: %s", key);
    return strtod(p + strlen(key), NULL);
}

START_TEST(token_table_golden)
{
    bin_result b = run_bin("run ch13/reward-calculator");
    ck_assert_msg(b.status == 0, "exit %d: %s", b.status, b.err);
    const double kl[8] = {-0.2, 0.2, -0.3, 0.1, -0.1, 0.1, 0.3, -0.3};
    const double r[8] = {0.0040, -0.0040, 0.0060, -0.0020, 0.0020, -0.0020, -0.0060, 0.5060};
    for (int t = 0; t < 8; t++) {
        char key[16];
        double v[6];
        snprintf(key, sizeof key, "%d ", t);
        ck_assert_msg(numbers_after(b.out, key, v, 6) == 0, "row %d", t);
        /* log π, log π_ref, KL, −β·KL, score, r */
        ck_assert(fabs(v[2] - kl[t]) < 1e-9 && fabs(v[3] + 0.02 * kl[t]) < 1e-9);
        ck_assert(fabs(v[4] - (t == 7 ? 0.5 : 0.0)) < 1e-9 && fabs(v[5] - r[t]) < 1e-9);
    }
    double tot[4];
    ck_assert(numbers_after(b.out, "total", tot, 4) == 0);
    ck_assert(fabs(tot[0] + 0.2) < 1e-9 && fabs(tot[1] - 0.004) < 1e-9 &&
              fabs(tot[2] - 0.5) < 1e-9 && fabs(tot[3] - 0.504) < 1e-9);
    ck_assert(strstr(b.out, "KL penalty β·ΣKL_t       -0.0040"));
    ck_assert(strstr(b.out, "net reward Σr_t          +0.5040"));
    /* k3 = e^(-d) - 1 + d summed over the log-ratios d: positive though Σd < 0 */
    double k3 = 0;
    for (int t = 0; t < 8; t++)
        k3 += exp(-kl[t]) - 1 + kl[t];
    ck_assert(fabs(after_key(b.out, "KL by the k3 estimator") - k3) < 1e-4 && k3 > 0.19);
    bin_result_free(&b);
}
END_TEST

START_TEST(totals_for_any_beta_and_mode)
{
    const double betas[] = {0.0, 0.1, 1.0, 10.0}, scores[] = {0.5, -1.0, 3.0};
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 3; j++)
            for (int spread = 0; spread < 2; spread++) {
                bin_result b = run_bin("run ch13/reward-calculator --kl-coef %g --rm-score %g %s", betas[i],
                                       scores[j], spread ? "--spread" : "");
                ck_assert_int_eq(b.status, 0);
                double tot[4], row0[6];
                ck_assert(numbers_after(b.out, "total", tot, 4) == 0);
                /* Σr = score − β·ΣKL, ΣKL = −0.2 */
                ck_assert_msg(fabs(tot[3] - (scores[j] + 0.2 * betas[i])) < 1.5e-4,
                              "β %g score %g: %g", betas[i], scores[j], tot[3]);
                ck_assert(numbers_after(b.out, "0 ", row0, 6) == 0);
                double want0 = 0.2 * betas[i] + (spread ? scores[j] / 8 : 0.0);
                ck_assert(fabs(row0[5] - want0) < 1.5e-4);
                bin_result_free(&b);
            }
}
END_TEST

START_TEST(beta_sweeps_and_scenarios)
{
    bin_result b = run_bin("run ch13/reward-calculator");
    ck_assert_int_eq(b.status, 0);
    /* the original's sweep: ΣKL = −0.1, so the "penalty" is a bonus, all weak */
    const char *sw = strstr(b.out, "The original's example");
    ck_assert_ptr_nonnull(sw);
    const double betas[6] = {0.0, 0.01, 0.02, 0.05, 0.1, 0.5};
    for (int i = 0; i < 6; i++) {
        char key[16];
        double v[3];
        snprintf(key, sizeof key, "%.2f ", betas[i]);
        ck_assert(numbers_after(sw, key, v, 2) == 0);
        ck_assert(fabs(v[0] + 0.1 * betas[i]) < 1e-9 && fabs(v[1] - (0.5 + 0.1 * betas[i])) <
                  1e-9);
    }
    const char *more = strstr(b.out, "more confident than the reference");
    ck_assert_ptr_nonnull(more);
    const char *labels[] = {"0.00        +0.0000       +0.5000  weak",
                            "0.05        +0.1150       +0.3850  moderate",
                            "0.25        +0.5750       -0.0750  strong",
                            "0.50        +1.1500       -0.6500  overwhelming"};
    for (int i = 0; i < 4; i++)
        ck_assert_msg(strstr(more, labels[i]), "missing: %s", labels[i]);
    /* the four scenarios: ΣKL, penalty, net */
    const char *names[] = {"low divergence", "high divergence", "more confident\n",
                           "less confident"};
    const double want[4][3] = {{0, 0, 0.5}, {0.7, 0.014, 0.486}, {2.3, 0.046, 0.454},
                               {-3.5, -0.07, 0.57}};
    for (int i = 0; i < 4; i++) {
        const char *p = strstr(b.out, names[i]);
        ck_assert_msg(p, "%s", names[i]);
        double s, pen, net;
        const char *q = strstr(p, "ΣKL ");
        ck_assert(q && sscanf(q, "ΣKL %lf penalty %lf net %lf", &s, &pen, &net) == 3);
        ck_assert_msg(fabs(s - want[i][0]) < 1e-4 && fabs(pen - want[i][1]) < 1e-4 &&
                      fabs(net - want[i][2]) < 1e-4, "%s: %g %g %g", names[i], s, pen, net);
    }
    bin_result_free(&b);
}
END_TEST

START_TEST(negative_beta_refused)
{
    bin_result b = run_bin("run ch13/reward-calculator --kl-coef -0.1");
    ck_assert_int_eq(b.status, 2);
    ck_assert(b.out[0] == 0 && strstr(b.err, "--kl-coef"));
    ck_assert(strchr(b.err, '\n') == b.err + strlen(b.err) - 1);
    bin_result_free(&b);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("ch13");
    TCase *tc = tcase_create("ch13");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, token_table_golden);
    tcase_add_test(tc, totals_for_any_beta_and_mode);
    tcase_add_test(tc, beta_sweeps_and_scenarios);
    tcase_add_test(tc, negative_beta_refused);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
