/* test_trace_async.c - a non-blocking collective's spans in a Chrome trace: they run on the
 * rank's progress thread and overlap its compute, so they get a track of their own (tid
 * 1000 + rank) instead of breaking the B/E nesting of the rank's track; a replay maps them
 * back to their rank. */
#include "../../core/mlsys.h"
#include "../../lab/ui/ui.h"
#include "run_bin.h"
#include <check.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static mlsys_event mk(int kind, int rank, uint64_t t, const char *label)
{
    mlsys_event e;
    memset(&e, 0, sizeof e);
    e.kind = (int16_t)kind;
    e.rank = rank;
    e.t_ns = t;
    e.peer = e.tag = e.step = e.chunk = e.dtype = -1;
    e.coll = e.algo = e.op = -1;
    snprintf(e.label, sizeof e.label, "%s", label);
    return e;
}

START_TEST(async_collectives_get_their_own_track)
{
    /* rank 1: compute B from 100 to 400 us, an async all-reduce from 150 to 300 us (it starts
     * inside B and ends inside it too, but B is not its parent), a blocking one after */
    mlsys_event ev[6] = {
        mk(MLSYS_EV_COMPUTE_BEGIN, 1, 100000, "B"),
        mk(MLSYS_EV_COLL_BEGIN, 1, 150000, "ring async"),
        mk(MLSYS_EV_COLL_END, 1, 300000, "ring async"),
        mk(MLSYS_EV_COMPUTE_END, 1, 400000, "B"),
        mk(MLSYS_EV_COLL_BEGIN, 1, 500000, "ring"),
        mk(MLSYS_EV_COLL_END, 1, 600000, "ring"),
    };
    for (int i = 1; i < 6; i++)
        if (ev[i].kind == MLSYS_EV_COLL_BEGIN || ev[i].kind == MLSYS_EV_COLL_END)
            ev[i].coll = MLSYS_COLL_ALLREDUCE;
    char path[] = "/tmp/mlsys-trace-async-XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(mlsys_trace_write_json(path, ev, 6, 0), 0);
    char *json = slurp_fd(fd);
    close(fd);
    unlink(path);
    /* the async spans on tid 1001, everything else on tid 1 */
    int async_tid = 0, rank_tid = 0;
    for (const char *p = json; (p = strstr(p, "\"tid\":")); p += 6) {
        int tid = atoi(p + 6);
        if (tid == 1001)
            async_tid++;
        else if (tid == 1)
            rank_tid++;
        else
            ck_abort_msg("unexpected tid %d in %s", tid, json);
    }
    ck_assert_int_eq(async_tid, 2);
    ck_assert_int_eq(rank_tid, 4);
    /* and a replay puts them back on rank 1 */
    mlsys_trace rd;
    char err[256];
    ck_assert_msg(mlsys_trace_parse(json, strlen(json), &rd, err, sizeof err) == 0, "%s", err);
    ck_assert_uint_eq(rd.n, 6);
    ck_assert_int_eq(rd.nranks, 2);
    for (size_t i = 0; i < rd.n; i++)
        ck_assert_int_eq(rd.ev[i].rank, 1);
    mlsys_trace_free(&rd);
    free(json);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("trace_async");
    TCase *t = tcase_create("json");
    tcase_add_test(t, async_collectives_get_their_own_track);
    suite_add_tcase(s, t);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
