/* test_ch12.c - chapter 12's labs through the real program: gae-visualizer's golden table
 * (γ 0.99 and γ 1 over 5 steps), its worked example (which the original crashed before
 * printing), the identities it reports, the true (γλ)^10, and a --trajectory-length past the
 * data refused in one line with exit 2; ppo-cartpole's faithful --no-update mode (clip
 * fraction 0 on every episode, the losses the unchanged networks must give, on both
 * environments), its refusals, and a short PPO run on 1 and 2 ranks that learns and prints
 * the same numbers twice for one seed. */
#include "run_bin.h"
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The row of the table whose first field is step t, after the line holding header. */
static int table_row(const char *out, const char *header, int t, double *v, int n)
{
    const char *p = strstr(out, header);
    if (!p)
        return -1;
    p = strchr(p, '\n');
    while (p && *p) {
        p++;
        int step, used = 0;
        if (sscanf(p, "%d%n", &step, &used) == 1 && step == t) {
            const char *q = p + used;
            for (int i = 0; i < n; i++) {
                char *end;
                v[i] = strtod(q, &end);
                if (end == q)
                    return -1;
                q = end;
            }
            return 0;
        }
        p = strchr(p, '\n');
    }
    return -1;
}

START_TEST(gae_golden_table)
{
    static const double want[10][5] = {
        {-0.0070, 0.0926, 0.8662, 1.1925, 1.6489}, {0.0930, 0.2012, 0.9801, 1.2754, 1.6726},
        {0.0940, 0.2185, 0.9956, 1.2572, 1.5956}, {-0.0050, 0.2515, 1.0119, 1.2368, 1.5167},
        {0.3960, 0.5182, 1.1413, 1.3204, 1.5371}, {0.0960, 0.2469, 0.8365, 0.9828, 1.1526},
        {0.1970, 0.3049, 0.8310, 0.9430, 1.0673}, {-0.0020, 0.2180, 0.7116, 0.7931, 0.8791},
        {-0.0010, 0.4445, 0.8009, 0.8455, 0.8900}, {0.9000, 0.9000, 0.9000, 0.9000, 0.9000},
    };
    static const double r[10] = {0.1, 0.1, 0.2, 0.1, 0.5, 0.1, 0.3, 0.1, 0.1, 1.0};
    static const double V[10] = {0.8, 0.7, 0.7, 0.6, 0.5, 0.4, 0.4, 0.3, 0.2, 0.1};
    bin_result b = run_bin("run ch12/gae-visualizer");
    ck_assert_msg(b.status == 0, "exit %d: %s", b.status, b.err);
    for (int t = 0; t < 10; t++) {
        double row[5], tr[3];
        ck_assert_msg(table_row(b.out, "step   reward", t, tr, 3) == 0, "trajectory row %d", t);
        ck_assert(fabs(tr[0] - r[t]) < 1e-9 && fabs(tr[1] - V[t]) < 1e-9);
        ck_assert(fabs(tr[2] - want[t][0]) < 1e-9);     /* δ = the λ = 0 column */
        ck_assert_msg(table_row(b.out, "λ=0.00", t, row, 5) == 0, "gae row %d", t);
        /* printed to 4 decimals; t = 8, λ = 0.95 is 0.84545 exactly, a tie that floats
         * round down and Python's doubles up, hence the tolerance of one unit */
        for (int k = 0; k < 5; k++)
            ck_assert_msg(fabs(row[k] - want[t][k]) < 1.01e-4, "t=%d col %d: %g want %g", t,
                          k, row[k], want[t][k]);
    }
    ck_assert(strstr(b.out, "λ = 0 is the one-step TD error δ_t:            ✓"));
    ck_assert(strstr(b.out, "λ = 1 is the discounted return minus V(s_t):  ✓"));
    ck_assert(strstr(b.out, "k = 10: 0.54"));             /* the original printed 0.53 */
    /* the worked example and the notes after it, which the original never printed */
    ck_assert(strstr(b.out, "= -0.0040") && strstr(b.out, "= -0.0020") &&
              strstr(b.out, "= +0.8000"));
    ck_assert(strstr(b.out, "A_1 = δ_1 + 0.9405·A_2       = +0.7504"));
    ck_assert(strstr(b.out, "A_0 = δ_0 + 0.9405·A_1       = +0.7018"));
    ck_assert(strstr(b.out, "GAE IN RLHF"));
    bin_result_free(&b);
}
END_TEST

START_TEST(gae_gamma_one_five_steps)
{
    bin_result b = run_bin("run ch12/gae-visualizer --gamma 1.0 --trajectory-length 5");
    ck_assert_int_eq(b.status, 0);
    const double delta[5] = {0, 0.1, 0.1, 0, 0}, half[5] = {0.075, 0.15, 0.1, 0, 0};
    const double one[5] = {0.2, 0.2, 0.1, 0, 0};
    for (int t = 0; t < 5; t++) {
        double row[5];
        ck_assert(table_row(b.out, "λ=0.00", t, row, 5) == 0);
        ck_assert(fabs(row[0] - delta[t]) < 1e-4 && fabs(row[1] - half[t]) < 1e-4 &&
                  fabs(row[4] - one[t]) < 1e-4);
    }
    double row[5];
    ck_assert(table_row(b.out, "λ=0.00", 5, row, 5) != 0);      /* only 5 steps */
    bin_result_free(&b);
}
END_TEST

/* one line on stderr, nothing on stdout, exit 2 */
static void refused(const char *args, const char *needle)
{
    bin_result b = run_bin("%s", args);
    ck_assert_msg(b.status == 2, "%s: exit %d", args, b.status);
    ck_assert_msg(b.out[0] == 0, "%s printed: %s", args, b.out);
    char *nl = strchr(b.err, '\n');
    ck_assert_msg(nl && nl[1] == 0, "%s: not one line: %s", args, b.err);
    ck_assert_msg(strstr(b.err, needle), "%s: %s", args, b.err);
    bin_result_free(&b);
}

START_TEST(refusals)
{
    refused("run ch12/gae-visualizer --trajectory-length 11", "trajectory-length");
    refused("run ch12/gae-visualizer --trajectory-length 0", "trajectory-length");
    refused("run ch12/gae-visualizer --gamma 1.5", "gamma");
    refused("run ch12/ppo-cartpole --no-update -w 2", "--world-size 1");
    refused("run ch12/ppo-cartpole --num-envs 3 -w 2", "3 environments");
    refused("run ch12/ppo-cartpole --total-steps 100", "less than one rollout");
    refused("run ch12/ppo-cartpole --lam 2", "lam");
}
END_TEST

/* every 10th episode's line says Clip: 0.00; the lab itself checks the losses (exit 1) */
static void check_no_update(const char *extra, int episodes)
{
    bin_result b = run_bin("run ch12/ppo-cartpole --no-update --episodes %d %s", episodes, extra);
    ck_assert_msg(b.status == 0, "%s: exit %d: %s", extra, b.status, b.err);
    int lines = 0;
    for (const char *p = b.out; (p = strstr(p, "Episode ")); p++) {
        lines++;
        const char *clip = strstr(p, "Clip: ");
        ck_assert(clip && !strncmp(clip, "Clip: 0.00 ", 11));
    }
    ck_assert_int_eq(lines, episodes / 10);
    ck_assert(strstr(b.out, "first 10 episodes:") && strstr(b.out, "never changed"));
    bin_result_free(&b);
}

START_TEST(no_update_is_the_original)
{
    check_no_update("", 60);
    check_no_update("--toy-env --seed 3", 100);
}
END_TEST

START_TEST(ppo_short_run)
{
    /* 40 rollouts; the same seed twice gives the same table (steps/s aside) */
    const char *args = "run ch12/ppo-cartpole --total-steps 20480 --print-every 10";
    bin_result a = run_bin("%s", args), b = run_bin("%s", args);
    ck_assert_msg(a.status == 0, "exit %d: %s", a.status, a.err);
    ck_assert_int_eq(b.status, 0);
    double first = 0, last = 0;
    const char *p = strstr(a.out, "first 10 episodes:"), *q = strstr(a.out, "last 10 episodes:");
    ck_assert(p && q && sscanf(p, "first 10 episodes: %lf", &first) == 1 &&
              sscanf(q, "last 10 episodes: %lf", &last) == 1);
    ck_assert_msg(last > 2 * first, "did not learn: %g -> %g", first, last);
    /* compare the table lines without their last field (steps/s) */
    for (int row = 10240; row <= 20480; row += 10240) {
        char key[32];
        snprintf(key, sizeof key, "\n%9d ", row);
        const char *la = strstr(a.out, key), *lb = strstr(b.out, key);
        ck_assert_msg(la && lb, "no row for step %d", row);
        const char *cut = strchr(la + 1, '\n');        /* back to the last field's start */
        while (cut > la && cut[-1] != ' ')
            cut--;
        while (cut > la && cut[-1] == ' ')     /* and its padding: 99,556 steps/s is wider */
            cut--;
        ck_assert_msg(!strncmp(la, lb, (size_t)(cut - la)), "step %d differs", row);
    }
    bin_result_free(&a);
    bin_result_free(&b);
    /* two ranks, split environments: runs, learns, says so */
    bin_result c = run_bin("run ch12/ppo-cartpole -w 2 --total-steps 20480 --print-every 20");
    ck_assert_msg(c.status == 0, "exit %d: %s", c.status, c.err);
    ck_assert(strstr(c.out, "Ranks: 2, each running 2 of the 4 environments"));
    p = strstr(c.out, "first 10 episodes:");
    q = strstr(c.out, "last 10 episodes:");
    ck_assert(p && q && sscanf(p, "first 10 episodes: %lf", &first) == 1 &&
              sscanf(q, "last 10 episodes: %lf", &last) == 1 && last > 2 * first);
    bin_result_free(&c);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("ch12");
    TCase *tc = tcase_create("ch12");
    tcase_set_timeout(tc, 240);
    tcase_add_test(tc, gae_golden_table);
    tcase_add_test(tc, gae_gamma_one_five_steps);
    tcase_add_test(tc, refusals);
    tcase_add_test(tc, no_update_is_the_original);
    tcase_add_test(tc, ppo_short_run);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
