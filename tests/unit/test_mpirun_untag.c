/* test_mpirun_untag.c - reading mpirun's --tag-output: the rank, the stream and the text,
 * and a line mpirun forwarded in two pieces ("[1,0]<stdout>:R[1,0]<stdout>:ank 2") read
 * back whole (it made the MPI suite's output differ from shm's now and then). */
#include <check.h>
#include <string.h>
#include "../../lab/backend/mpirun.h"

static void expect(const char *in, int rank, int is_err, const char *text)
{
    char line[256];
    snprintf(line, sizeof line, "%s", in);
    int r = -1, e = -1;
    char *t = NULL;
    ck_assert_msg(mpirun_untag(line, &r, &e, &t) == 1, "%s: not read as tagged", in);
    ck_assert_int_eq(r, rank);
    ck_assert_int_eq(e, is_err);
    ck_assert_str_eq(t, text);
}

START_TEST(tags)
{
    expect("[1,3]<stdout>:Rank 3: [30.0]", 3, 0, "Rank 3: [30.0]");
    expect("[1,0]<stderr>:oops", 0, 1, "oops");
    expect("[12,7]<stddiag>:note", 7, 1, "note");
    expect("[1,0]<stdout>:", 0, 0, "");
    /* a line cut by mpirun's reads: the same tag again inside it */
    expect("[1,0]<stdout>:R[1,0]<stdout>:ank 2: [30.0]", 0, 0, "Rank 2: [30.0]");
    expect("[1,0]<stdout>:a[1,0]<stdout>:[1,0]<stdout>:b", 0, 0, "ab");
    /* brackets of the rank's own, and another rank's tag, are text */
    expect("[1,0]<stdout>:x = [1, 2] [1,1]<stdout>:y", 0, 0, "x = [1, 2] [1,1]<stdout>:y");
    char line[64] = "[1,0] plain text";
    int r, e;
    char *t;
    ck_assert_int_eq(mpirun_untag(line, &r, &e, &t), 0);
    snprintf(line, sizeof line, "no tag at all");
    ck_assert_int_eq(mpirun_untag(line, &r, &e, &t), 0);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("mpirun_untag");
    TCase *tc = tcase_create("untag");
    tcase_add_test(tc, tags);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed != 0;
}
