/* test_train_lab.c - ch05/train-lm, the front end's way to `mlsys-lab train`: it trains on
 * real ranks (the loss falls, a loadable llama2.c checkpoint appears, the plot points are
 * emitted), and a shape that does not divide is one line and exit 2 before any rank starts. */
#include "run_bin.h"
#include "../../core/llm/llm.h"
#include <check.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

typedef bin_result result;
#define run run_bin

START_TEST(trains_on_two_ranks)
{
    char dir[] = "/tmp/mlsys-trainlab-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    result r = run("run ch05/train-lm -w 2 --steps 40 --out %s --trace %s/t.json", dir, dir);
    ck_assert_msg(r.status == 0, "exit %d: %s\n%s", r.status, r.err, r.out);
    /* the first logged loss and the final one: training must have lowered it */
    const char *first = strstr(r.out, "| loss ");
    const char *done = strstr(r.out, "train loss ");
    ck_assert_msg(first && done, "no loss lines: %s", r.out);
    double l0 = atof(first + 7), l1 = atof(done + 11);
    ck_assert_msg(l1 < l0 - 0.5, "loss %g -> %g did not fall", l0, l1);
    ck_assert_ptr_nonnull(strstr(r.out, "val loss"));
    /* the checkpoint is a valid llama2.c file of the configured shape */
    char path[600], err[256];
    snprintf(path, sizeof path, "%s/model.bin", dir);
    llm_config c;
    llm_weights w;
    ck_assert_msg(llm_checkpoint_read(path, &c, &w, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(c.dim, 64);
    ck_assert_int_eq(c.n_layers, 2);
    ck_assert_int_eq(c.n_kv_heads, 2);
    llm_weights_free(&w);
    /* and the tokenizer the form promises beside it, of the model's vocabulary */
    snprintf(path, sizeof path, "%s/tokenizer.bin", dir);
    llm_tokenizer tok;
    ck_assert_msg(llm_tokfile_read(path, 0, &tok, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(tok.vocab_size, c.vocab_size);
    llm_tokenizer_free(&tok);
    /* the loss curve reached the event stream (the plot view's input) */
    snprintf(path, sizeof path, "%s/t.json", dir);
    FILE *f = fopen(path, "r");
    ck_assert_ptr_nonnull(f);
    char *json = slurp_fd(fileno(f));
    fclose(f);
    ck_assert_msg(strstr(json, "train loss") && strstr(json, "val loss"),
                  "no loss points in the trace");
    free(json);
    free(r.out);
    free(r.err);
    char rm[700];
    snprintf(rm, sizeof rm, "rm -rf '%s'", dir);
    ck_assert_int_eq(system(rm), 0);
}
END_TEST

START_TEST(shape_that_does_not_divide)
{
    result r = run("run ch05/train-lm --heads 3");
    ck_assert_int_eq(r.status, 2);
    ck_assert_msg(r.out[0] == 0, "stdout should be empty: %s", r.out);
    size_t n = strlen(r.err);
    ck_assert_msg(n > 1 && strchr(r.err, '\n') == r.err + n - 1, "want one line: '%s'", r.err);
    free(r.out);
    free(r.err);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("train_lab");
    TCase *t = tcase_create("lab");
    tcase_set_timeout(t, 120);
    tcase_add_test(t, trains_on_two_ranks);
    tcase_add_test(t, shape_that_does_not_divide);
    suite_add_tcase(s, t);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
