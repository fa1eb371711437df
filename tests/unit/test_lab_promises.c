/* test_lab_promises.c - edges of the lab's shared parts that other tests let slip. The flag
 * parser's message names a size bound as the learner may type it (1536 stays 1536; only whole
 * multiples of 1024 become K, M, G). A choice question answered by number: 1 is a), 2 is b).
 * Experiment checks hold the learner to the precision they state: chapter 6's comm% within
 * 1 % (0.1 point at least), chapter 7's traffic per GPU within 1 %, chapter 13's k3 within
 * the lab's four printed decimals; a near miss just outside fails. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../../lab/lab.h"
#include "ex_env.h"

START_TEST(size_bounds_in_messages)
{
    static const struct { long min, max; const char *value, *said; } cases[] = {
        {1000, 1536, "2K", "from 1000 to 1536"},
        {65536, 1 << 20, "1", "from 64K to 1M"},
        {1024, 3 << 29, "2G", "from 1K to 1536M"},
        {1536, FLAG_NO_MAX, "1K", "of 1536 or more"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        lab_flag f = {"bytes", 0, FLAG_SIZE, NULL, NULL, cases[i].min, cases[i].max, "a size"};
        char err[256] = "";
        ck_assert_int_eq(lab_flag_check(&f, cases[i].value, err, sizeof err), -1);
        ck_assert_msg(strstr(err, cases[i].said), "'%s' does not say '%s'", err, cases[i].said);
    }
}
END_TEST

START_TEST(choice_by_number)
{
    ex_question q;
    memset(&q, 0, sizeof q);
    q.nchoices = 3;
    snprintf(q.choices[0], sizeof q.choices[0], "ring");
    snprintf(q.choices[1], sizeof q.choices[1], "tree");
    snprintf(q.choices[2], sizeof q.choices[2], "direct");
    static const struct { const char *answer; int right, pass; } cases[] = {
        {"1", 0, 1}, {"2", 0, 0}, {"2", 1, 1}, {"3", 2, 1}, {"1", 2, 0}, {"4", 0, 0},
        {"a", 0, 1}, {"b)", 1, 1}, {"tree", 1, 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        ex_verdict v;
        memset(&v, 0, sizeof v);
        q.answer = cases[i].right;
        ex_question_judge(&q, cases[i].answer, &v);
        ck_assert_msg((v.result == EX_PASS) == cases[i].pass, "answer '%s' to a question whose "
                      "answer is %c): %s", cases[i].answer, 'a' + cases[i].right, v.summary);
        ex_verdict_free(&v);
    }
}
END_TEST

/* Check the answers text for exercise id; the verdict. */
static void check_answers(const char *id, const char *text, ex_verdict *v)
{
    ex_context cx;
    get_cx(&cx);
    const exercise *ex = ex_find(id);
    ck_assert_ptr_nonnull(ex);
    char path[PATH_MAX + 16];
    snprintf(path, sizeof path, "%s/answers.txt", g_ex_tmp);
    FILE *f = fopen(path, "w");
    ck_assert(f && fputs(text, f) >= 0 && fclose(f) == 0);
    memset(v, 0, sizeof *v);
    exercise_check_file(&cx, ex, path, 0, v);
}

START_TEST(comm_percent_near_miss)
{
    fresh_env();
    /* t_allreduce / (t_matmul + t_allreduce) = 0.05 / 0.25 = 20 %: 1 % of it is 0.2 */
    static const char *const near[] = {"20.3", "19.7", "20.25"};
    for (size_t i = 0; i < sizeof near / sizeof near[0]; i++) {
        char text[256];
        snprintf(text, sizeof text, "t_matmul_ms = 0.2\nt_allreduce_ms = 0.05\ncomm_percent = "
                 "%s\nallreduces_per_forward = 1\nbottleneck = compute\n", near[i]);
        ex_verdict v;
        check_answers("ch06-tp-overhead", text, &v);
        ck_assert_msg(v.result == EX_FAIL && strstr(v.summary, "comm_percent"),
                      "comm_percent %s (20 is right, 1 %% allowed): %s", near[i], v.summary);
        ex_verdict_free(&v);
    }
    remove_tmp();
}
END_TEST

START_TEST(moe_traffic_near_miss)
{
    fresh_env();
    /* per GPU in MiB: TP 112 (or 64, 56: the simpler counts), EP 14 (or 2); 1 % allowed */
    static const struct { const char *tp, *ep, *field; } cases[] = {
        {"114.5", "14", "tp_per_layer"}, {"110", "14", "tp_per_layer"},
        {"65.3", "14", "tp_per_layer"}, {"57.2", "14", "tp_per_layer"},
        {"112", "14.3", "ep_per_layer"}, {"112", "13.7", "ep_per_layer"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char text[256];
        snprintf(text, sizeof text, "unit = MiB\ntp_per_layer = %s\nep_per_layer = %s\n",
                 cases[i].tp, cases[i].ep);
        ex_verdict v;
        check_answers("ch07-moe-traffic", text, &v);
        ck_assert_msg(v.result == EX_FAIL && strstr(v.summary, cases[i].field), "tp %s, ep %s: "
                      "%s", cases[i].tp, cases[i].ep, v.summary);
        ex_verdict_free(&v);
    }
    ex_verdict v;
    check_answers("ch07-moe-traffic", "unit = MiB\ntp_per_layer = 112.5\nep_per_layer = "
                  "13.95\n", &v);
    ck_assert_msg(v.result == EX_PASS, "within 1 %%: %s", v.summary);
    ex_verdict_free(&v);
    remove_tmp();
}
END_TEST

START_TEST(k3_near_miss)
{
    fresh_env();
    /* the lab prints k3 = +0.1955 to four decimals: 0.1957 is two units off */
    static const char *const near[] = {"0.1957", "0.1953"};
    for (size_t i = 0; i < sizeof near / sizeof near[0]; i++) {
        char text[256];
        snprintf(text, sizeof text, "net_beta0 = 0.5\nnet_beta10 = 2.5\ndominates_beta10 = kl\n"
                 "k3 = %s\nbeta_negative = 0.25\n", near[i]);
        ex_verdict v;
        check_answers("ch13-beta", text, &v);
        ck_assert_msg(v.result == EX_FAIL && strstr(v.summary, "k3"), "k3 = %s: %s", near[i],
                      v.summary);
        ex_verdict_free(&v);
    }
    remove_tmp();
}
END_TEST

int main(void)
{
    Suite *s = suite_create("lab_promises");
    TCase *tc = tcase_create("lab");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, size_bounds_in_messages);
    tcase_add_test(tc, choice_by_number);
    tcase_add_test(tc, comm_percent_near_miss);
    tcase_add_test(tc, moe_traffic_near_miss);
    tcase_add_test(tc, k3_near_miss);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
