/* test_trace.c - the collector and the trace file (core/trace.h): events appended across
 * batches and regrown, the job's size from ranks and message peers (never from the memory
 * and flow records that share the peer's place, nor from ranks no job can have), the sort
 * into time order that keeps collection order for equal times, and a --trace file that is
 * refused before the job when it cannot be written, written whole and read back, or left as
 * it was. */
#include "../../core/trace.h"
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static mlsys_event ev_at(int kind, int rank, int peer, uint64_t t_ns, int step)
{
    mlsys_event e;
    memset(&e, 0, sizeof e);
    e.kind = (int16_t)kind;
    e.rank = rank;
    e.t_ns = t_ns;
    e.coll = e.algo = e.op = -1;
    e.chunk = e.dtype = -1;
    e.tag = -1;
    e.peer = peer;
    e.step = step;
    return e;
}

START_TEST(collects_across_batches)
{
    mlsys_trace t = {0};
    enum { BATCH = 1000, BATCHES = 9 };         /* past the first 4096 and a regrowth */
    mlsys_event b[BATCH];
    for (int k = 0; k < BATCHES; k++) {
        for (int i = 0; i < BATCH; i++)
            b[i] = ev_at(MLSYS_EV_MARK, k % 3, -1, 1, k * BATCH + i);
        mlsys_trace_collect(&t, b, BATCH);
    }
    ck_assert_uint_eq(t.n, BATCH * BATCHES);
    ck_assert_uint_ge(t.cap, t.n);
    for (size_t i = 0; i < t.n; i++)
        ck_assert_int_eq(t.ev[i].step, (int)i);
    ck_assert_int_eq(t.nranks, 3);
    mlsys_trace_free(&t);
    ck_assert_ptr_null(t.ev);
    ck_assert_uint_eq(t.n, 0);
    ck_assert_int_eq(t.nranks, 0);
}
END_TEST

START_TEST(job_size_from_ranks_and_peers)
{
    mlsys_trace t = {0};
    mlsys_event e = ev_at(MLSYS_EV_SEND_BEGIN, 1, 5, 10, 0);    /* rank 1 sends to 5 */
    mlsys_trace_collect(&t, &e, 1);
    ck_assert_int_eq(t.nranks, 6);
    /* a memory record: its owner sits where a message's peer is, and is no rank */
    e = ev_at(MLSYS_EV_MEM, 0, -1, 11, 0);
    e.mem.op = MLSYS_MEM_ALLOC;
    e.mem.block = 40;
    e.mem.owner = 40;
    e.mem.index = 40;           /* (index shares its bytes with a message's peer) */
    ck_assert_int_eq(e.peer, 40);
    mlsys_trace_collect(&t, &e, 1);
    e = ev_at(MLSYS_EV_FLOW, 0, -1, 12, 0);
    e.flow.from = 30;
    e.flow.to = 31;
    e.flow.seq = 30;            /* (and seq) */
    ck_assert_int_eq(e.peer, 30);
    mlsys_trace_collect(&t, &e, 1);
    ck_assert_int_eq(t.nranks, 6);
    e = ev_at(MLSYS_EV_RECV_END, 2, MLSYS_TRACE_MAX_RANKS + 7, 13, 0);    /* damaged */
    mlsys_trace_collect(&t, &e, 1);
    ck_assert_int_eq(t.nranks, 6);
    mlsys_trace_add_line(&t, 9, 0, "a line of rank 9");
    ck_assert_int_eq(t.nranks, 10);
    ck_assert_uint_eq(t.nl, 1);
    ck_assert_str_eq(t.lines[0].text, "a line of rank 9");
    mlsys_trace_free(&t);
}
END_TEST

START_TEST(sort_is_stable)
{
    /* ranks drained one after the other: rank 1's batch comes after rank 0's, with equal and
     * earlier times; equal times must keep the order they were collected in */
    mlsys_trace t = {0};
    mlsys_event b[8];
    uint64_t times[8] = {30, 10, 10, 50, 20, 10, 30, 5};
    for (int i = 0; i < 8; i++)
        b[i] = ev_at(MLSYS_EV_MARK, i / 4, -1, times[i], i);
    mlsys_trace_collect(&t, b, 4);
    mlsys_trace_collect(&t, b + 4, 4);
    mlsys_trace_add_line(&t, 0, 0, "second");
    mlsys_trace_add_line(&t, 1, 1, "third");
    t.lines[0].t_ns = 7;
    t.lines[1].t_ns = 7;
    mlsys_trace_add_line(&t, 0, 0, "first");
    t.lines[2].t_ns = 6;
    mlsys_trace_sort(&t);
    static const int want[8] = {7, 1, 2, 5, 4, 0, 6, 3};
    for (int i = 0; i < 8; i++)
        ck_assert_msg(t.ev[i].step == want[i], "position %d holds event %d, expected %d", i,
                      t.ev[i].step, want[i]);
    ck_assert_str_eq(t.lines[0].text, "first");
    ck_assert_str_eq(t.lines[1].text, "second");
    ck_assert_str_eq(t.lines[2].text, "third");
    ck_assert_int_eq(t.lines[2].is_err, 1);
    mlsys_trace_collect(&t, b, 1);                  /* sorted arrays still grow */
    ck_assert_uint_eq(t.n, 9);
    mlsys_trace_free(&t);
    mlsys_trace_sort(&t);                           /* empty: nothing to do */
}
END_TEST

static char dir[] = "/tmp/mlsys-test-trace-XXXXXX";

static void setup(void)
{
    snprintf(dir, sizeof dir, "/tmp/mlsys-test-trace-XXXXXX");    /* afresh for every test */
    ck_assert_ptr_nonnull(mkdtemp(dir));
}

static void teardown(void)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    ck_assert_int_eq(system(cmd), 0);
}

START_TEST(file_refused_before_the_job)
{
    char tmp[4200], err[512];
    ck_assert_int_eq(mlsys_trace_prepare(dir, tmp, sizeof tmp, err, sizeof err), 2);
    ck_assert_msg(strstr(err, "is a directory"), "%s", err);
    ck_assert_str_eq(tmp, "");
    ck_assert_int_eq(mlsys_trace_prepare("/dev/null", tmp, sizeof tmp, err, sizeof err), 2);
    ck_assert_msg(strstr(err, "not a regular file"), "%s", err);
    ck_assert_int_eq(mlsys_trace_prepare("", tmp, sizeof tmp, err, sizeof err), 2);
    char path[512];
    snprintf(path, sizeof path, "%s/no/such/folder/t.json", dir);
    ck_assert_int_eq(mlsys_trace_prepare(path, tmp, sizeof tmp, err, sizeof err), 2);
    ck_assert_msg(strstr(err, "cannot create a file there"), "%s", err);
    snprintf(path, sizeof path, "%s/t.json", dir);
    char small[8];
    ck_assert_int_eq(mlsys_trace_prepare(path, small, sizeof small, err, sizeof err), 2);
    ck_assert_msg(strstr(err, "too long"), "%s", err);
}
END_TEST

START_TEST(file_written_whole_or_left_alone)
{
    char path[512], tmp[4200], err[512];
    snprintf(path, sizeof path, "%s/t.json", dir);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs("an older trace", f);
    fclose(f);
    /* a job that ends badly: the temp file goes, the older trace stays */
    ck_assert_int_eq(mlsys_trace_prepare(path, tmp, sizeof tmp, err, sizeof err), 0);
    struct stat st;
    ck_assert_int_eq(stat(tmp, &st), 0);
    ck_assert_int_eq(unlink(tmp), 0);
    ck_assert_int_eq(stat(path, &st), 0);
    ck_assert_int_eq(st.st_size, 14);
    /* a job that ends well: the collected events and lines replace it, and read back */
    mlsys_trace t = {0};
    mlsys_event b[3] = {ev_at(MLSYS_EV_STEP, 0, -1, 1000 + 300, 2),
                        ev_at(MLSYS_EV_STEP, 1, -1, 1000 + 100, 1),
                        ev_at(MLSYS_EV_MARK, 1, -1, 1000 + 200, 0)};
    snprintf(b[2].label, sizeof b[2].label, "gate");
    mlsys_trace_collect(&t, b, 3);
    mlsys_trace_add_line(&t, 1, 0, "Rank 1: done");
    t.lines[0].t_ns = 1000 + 250;
    ck_assert_int_eq(mlsys_trace_prepare(path, tmp, sizeof tmp, err, sizeof err), 0);
    ck_assert_int_eq(mlsys_trace_commit(path, tmp, &t, 1000), 0);
    ck_assert_int_ne(stat(tmp, &st), 0);
    mlsys_trace_free(&t);
    char err2[256];
    int rc = mlsys_trace_load(path, &t, err2, sizeof err2);
#ifdef HAVE_CJSON
    ck_assert_msg(rc == 0, "%s", err2);
    ck_assert_uint_eq(t.n, 3);
    ck_assert_int_eq(t.ev[0].step, 1);              /* in time order, from t0 on */
    ck_assert_uint_eq(t.ev[0].t_ns, 100 * 1 + 1);
    ck_assert_str_eq(t.ev[1].label, "gate");
    ck_assert_int_eq(t.ev[2].step, 2);
    ck_assert_int_eq(t.ev[2].rank, 0);
    ck_assert_uint_eq(t.nl, 1);
    ck_assert_str_eq(t.lines[0].text, "Rank 1: done");
    ck_assert_int_eq(t.nranks, 2);
    mlsys_trace_free(&t);
#else
    ck_assert_int_eq(rc, -1);
#endif
    /* a commit that cannot write: -1, and the temp file is gone */
    snprintf(tmp, sizeof tmp, "%s/missing-folder/t.tmp", dir);
    ck_assert_int_eq(mlsys_trace_commit(path, tmp, &t, 0), -1);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("trace");
    TCase *tc = tcase_create("collector");
    tcase_add_test(tc, collects_across_batches);
    tcase_add_test(tc, job_size_from_ranks_and_peers);
    tcase_add_test(tc, sort_is_stable);
    suite_add_tcase(s, tc);
    TCase *tf = tcase_create("file");
    tcase_add_checked_fixture(tf, setup, teardown);
    tcase_add_test(tf, file_refused_before_the_job);
    tcase_add_test(tf, file_written_whole_or_left_alone);
    suite_add_tcase(s, tf);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
