/* test_events.c - typed memory and flow records (mlsys.h's mlsys_mem_info, mlsys_flow_info)
 * travel intact every way an event travels: through the Chrome trace that --trace writes and
 * replay reads (with the ranks' output lines), through a job's shared-memory rings, over TCP
 * from a rank to the runner's collector (the --backend mpi path), and from a single-process
 * lab through the one-rank communicator its runner gives it (runner_worker). Every field of
 * every op is compared with what was sent. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include "../../core/internal.h"
#include "../../core/net_events.h"
#include "../../lab/ui/ui.h"
#include "../../lab/job/runner.h"
#include "run_bin.h"

/* ---- the records every test sends: each memory op and each flow kind once ---- */

#define NREC (MLSYS_MEM_OP_COUNT + MLSYS_FLOW_WHAT_COUNT)

static void make_record(int i, mlsys_event *e, int rank)
{
    memset(e, 0, sizeof *e);
    e->rank = rank;
    e->coll = e->algo = e->op = -1;
    e->step = 100 + i;
    e->chunk = e->dtype = -1;
    e->bytes = 4096ull * (uint64_t)(i + 1);
    e->val[0] = i % 3 == 0 ? NAN : 0.25 * i - 1.0;
    if (i < MLSYS_MEM_OP_COUNT) {
        e->kind = MLSYS_EV_MEM;
        e->mem = (mlsys_mem_info){(int16_t)(2 + i % 3), (int8_t)i, (uint8_t)(i == MLSYS_MEM_FREE),
                                  i == MLSYS_MEM_POOL ? -1 : 10 + i, i % 4 - 1, i % 5,
                                  i == MLSYS_MEM_POOL ? 16 : i - 3, i == MLSYS_MEM_COW ? 77 : 64};
        snprintf(e->label, sizeof e->label, "%s", i == MLSYS_MEM_POOL ? "KV cache \"main\"" :
                 i == MLSYS_MEM_OWNER ? "req 3" : "");
    } else {
        int w = i - MLSYS_MEM_OP_COUNT;
        e->kind = MLSYS_EV_FLOW;
        e->flow = (mlsys_flow_info){(int16_t)(w % 4), (int16_t)((w + 1) % 4 - (w == 0)),
                                    (int16_t)w, (int16_t)(w % 5), 8 * w, w + 1, w * 3 - 1, 0};
        snprintf(e->label, sizeof e->label, "%s", w == MLSYS_FLOW_ROLE ? "actor" :
                 w == MLSYS_FLOW_PHASE ? "generate" : "");
    }
}

static void emit_record(mlsys_comm *c, int i)
{
    mlsys_event e;
    make_record(i, &e, 0);
    if (e.kind == MLSYS_EV_MEM) {
        if (isnan(e.val[0]))
            mlsys_emit_mem(c, &e.mem, e.bytes, e.label[0] ? e.label : NULL);
        else
            mlsys_emit_mem_value(c, &e.mem, e.bytes, e.label[0] ? e.label : NULL, e.val[0]);
    } else {
        if (isnan(e.val[0]))
            mlsys_emit_flow(c, &e.flow, e.bytes, e.label[0] ? e.label : NULL);
        else
            mlsys_emit_flow_value(c, &e.flow, e.bytes, e.label[0] ? e.label : NULL, e.val[0]);
    }
}

/* got equals record i in every field a typed record has. */
static void same_record(const mlsys_event *got, int i, int rank)
{
    mlsys_event w;
    make_record(i, &w, rank);
    ck_assert_int_eq(got->kind, w.kind);
    ck_assert_int_eq(got->rank, rank);
    ck_assert_uint_eq(got->bytes, w.bytes);
    ck_assert_msg(!memcmp(&got->mem, &w.mem, sizeof w.mem), "record %d: the union differs", i);
    ck_assert_msg(isnan(w.val[0]) ? isnan(got->val[0]) : got->val[0] == w.val[0],
                  "record %d: value %g, sent %g", i, got->val[0], w.val[0]);
    ck_assert_str_eq(got->label, w.label);
}

/* ---- a job whose rank 0 emits the records (the others none) ---- */

typedef struct kept {
    mlsys_event e[4 * NREC];
    int n;
} kept;

static void keep_typed(void *u, const mlsys_event *ev, size_t n)
{
    kept *k = u;
    for (size_t i = 0; i < n; i++)
        if ((ev[i].kind == MLSYS_EV_MEM || ev[i].kind == MLSYS_EV_FLOW) && k->n < 4 * NREC)
            k->e[k->n++] = ev[i];
}

static int emit_rank(mlsys_comm *c, void *arg)
{
    (void)arg;
    if (mlsys_rank(c) == 0)
        for (int i = 0; i < NREC; i++)
            emit_record(c, i);
    return mlsys_barrier(c);
}

START_TEST(through_shared_memory)
{
    mlsys_launch_opts o = {.world_size = 2, .timeout_ms = 10000, .trace_capacity = 4096};
    char err[256];
    mlsys_job *j = mlsys_job_start(&o, NULL, emit_rank, NULL, err, sizeof err);
    ck_assert_msg(j != NULL, "%s", err);
    static kept k;
    k.n = 0;
    mlsys_job_sink sink = {NULL, keep_typed, &k};
    int rc;
    while ((rc = mlsys_job_wait(j, &sink, 50, err, sizeof err)) == 1)
        ;
    mlsys_job_free(j);
    ck_assert_msg(rc == 0, "%s", err);
    ck_assert_int_eq(k.n, NREC);
    for (int i = 0; i < NREC; i++)
        same_record(&k.e[i], i, 0);
}
END_TEST

/* ---- Chrome trace and back, with output lines ---- */

START_TEST(through_a_trace)
{
    static mlsys_event ev[NREC];
    for (int i = 0; i < NREC; i++) {
        make_record(i, &ev[i], i % 3);
        ev[i].t_ns = 2000 + 1000ull * (uint64_t)i;
    }
    mlsys_trace_line lines[3] = {
        {2500, 1, 0, "Rank 1: [10.0, 20.0] \"quoted\" and a \\ backslash"},
        {3500, 0, 1, "rank 0: warning: a tab\there, and ✓ UTF-8"},
        {9000, 2, 0, ""},
    };
    char path[] = "/tmp/mlsys-test-events-XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    close(fd);
    ck_assert_int_eq(mlsys_trace_write_json_lines(path, ev, NREC, lines, 3, 1000), 0);
    mlsys_trace d;
    char err[256];
    int rc = mlsys_trace_load(path, &d, err, sizeof err);
    unlink(path);
#ifdef HAVE_CJSON
    ck_assert_msg(rc == 0, "%s", err);
    ck_assert_uint_eq(d.n, NREC);
    for (int i = 0; i < NREC; i++) {
        same_record(&d.ev[i], i, i % 3);
        ck_assert_int_eq(d.ev[i].step, 100 + i);
        ck_assert_uint_eq(d.ev[i].t_ns, ev[i].t_ns - 1000 + 1);    /* replay's time base */
    }
    ck_assert_uint_eq(d.nl, 3);
    for (int i = 0; i < 3; i++) {
        ck_assert_int_eq(d.lines[i].rank, lines[i].rank);
        ck_assert_int_eq(d.lines[i].is_err, lines[i].is_err);
        ck_assert_str_eq(d.lines[i].text, lines[i].text);
    }
    ck_assert_int_eq(d.nranks, 3);
    mlsys_trace_free(&d);
#else
    ck_assert_int_eq(rc, -1);
#endif
}
END_TEST

/* ---- over TCP: a rank's stream to the collector, as under --backend mpi ---- */

START_TEST(over_tcp)
{
    char err[256];
    collector *col = collector_open(NULL, 2, err, sizeof err);
    ck_assert_msg(col != NULL, "%s", err);
    char addr[300], token[64];
    snprintf(addr, sizeof addr, "%s", collector_addr(col));
    snprintf(token, sizeof token, "%s", collector_token(col));
    pid_t pid = fork();
    if (pid == 0) {
        /* the rank side: a world without a job segment whose events go over the wire */
        mlsys_world w;
        memset(&w, 0, sizeof w);
        w.rank = 1;
        w.size = 2;
        mlsys_comm c;
        memset(&c, 0, sizeof c);
        c.w = &w;
        c.cur_coll = c.cur_algo = -1;
        if (net_events_start(&w, addr, token) != 0)
            _exit(3);
        for (int i = 0; i < NREC; i++)
            emit_record(&c, i);
        net_events_stop(&w);
        _exit(0);
    }
    ck_assert_int_gt(pid, 0);
    static kept k;
    k.n = 0;
    mlsys_job_sink sink = {NULL, keep_typed, &k};
    int status = -1;
    for (int i = 0; i < 5000 && waitpid(pid, &status, WNOHANG) == 0; i++) {
        collector_pump(col, &sink);
        usleep(1000);
    }
    collector_finish(col, &sink, 2000);
    collector_close(col);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the rank side failed (%d)",
                  status);
    ck_assert_int_eq(k.n, NREC);
    for (int i = 0; i < NREC; i++)
        same_record(&k.e[i], i, 1);
}
END_TEST

/* ---- a single-process lab: runner_worker gives its main() a one-rank communicator ---- */

static int solo_main(const lab_args *a)
{
    if (!a->comm)
        return 9;               /* no channel: the test fails on the count below */
    for (int i = 0; i < NREC; i++)
        emit_record(a->comm, i);
    return mlsys_size(a->comm) == 1 && mlsys_rank(a->comm) == 0 ? 0 : 8;
}

static const lab_flag solo_flags[] = {{NULL, 0, 0, NULL, NULL, 0, 0, NULL}};
static const lab solo_lab = {.id = "test/solo", .title = "Solo", .summary = "one process",
                             .flags = solo_flags, .main = solo_main};

/* The launcher's child: as `mlsys-lab worker test/solo` would be, on this job's segment. */
static int worker_rank(mlsys_comm *c, void *arg)
{
    (void)c;
    (void)arg;
    return runner_worker(&solo_lab, 0, NULL);
}

START_TEST(single_process_lab)
{
    mlsys_launch_opts o = {.world_size = 1, .timeout_ms = 10000, .trace_capacity = 4096};
    char err[256];
    mlsys_job *j = mlsys_job_start(&o, NULL, worker_rank, NULL, err, sizeof err);
    ck_assert_msg(j != NULL, "%s", err);
    static kept k;
    k.n = 0;
    mlsys_job_sink sink = {NULL, keep_typed, &k};
    int rc;
    while ((rc = mlsys_job_wait(j, &sink, 50, err, sizeof err)) == 1)
        ;
    mlsys_job_free(j);
    ck_assert_msg(rc == 0, "%s", err);
    ck_assert_int_eq(k.n, NREC);
    for (int i = 0; i < NREC; i++)
        same_record(&k.e[i], i, 0);
    /* without anyone collecting (headless, no --trace) there is no communicator: NULL is a
     * valid one for the emit calls, which then do nothing */
    lab_args a;
    memset(&a, 0, sizeof a);
    ck_assert_int_eq(solo_main(&a), 9);
    for (int i = 0; i < NREC; i++)
        emit_record(NULL, i);
}
END_TEST

/* ---- headless --trace keeps the ranks' output (and each line's rank), prints the same ---- */

START_TEST(trace_keeps_output_headless)
{
    char path[] = "/tmp/mlsys-test-trace-out-XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    close(fd);
    /* ranks: the cheatsheet on 3 ranks prints through rank 0 in rank order */
    bin_result plain = run_bin("run ch03/collective-cheatsheet -w 3");
    bin_result traced = run_bin("run ch03/collective-cheatsheet -w 3 --trace %s", path);
    ck_assert_int_eq(plain.status, 0);
    ck_assert_int_eq(traced.status, 0);
    ck_assert_str_eq(traced.out, plain.out);        /* byte for byte: no tag leaks out */
    mlsys_trace d;
    char err[256];
#ifdef HAVE_CJSON
    ck_assert_msg(mlsys_trace_load(path, &d, err, sizeof err) == 0, "%s", err);
    ck_assert_uint_gt(d.nl, 2);
    int ranks_seen = 0;
    for (size_t i = 0; i < d.nl; i++) {
        ck_assert_msg(strstr(plain.out, d.lines[i].text) != NULL, "'%s' not in the output",
                      d.lines[i].text);
        ck_assert_ptr_null(strchr(d.lines[i].text, '\001'));
        ranks_seen |= 1 << d.lines[i].rank;
    }
    ck_assert_msg(ranks_seen == 7, "lines kept under ranks %x, not every rank's own", ranks_seen);
    mlsys_trace_free(&d);
#endif
    bin_result_free(&plain);
    bin_result_free(&traced);
    /* a single-process lab: --trace runs it as one rank; same output, same exit status */
    plain = run_bin("run ch07/parallel-strategy-calculator");
    traced = run_bin("run ch07/parallel-strategy-calculator --trace %s", path);
    ck_assert_int_eq(traced.status, plain.status);
    ck_assert_str_eq(traced.out, plain.out);
#ifdef HAVE_CJSON
    ck_assert_msg(mlsys_trace_load(path, &d, err, sizeof err) == 0, "%s", err);
    ck_assert_uint_gt(d.nl, 5);
    ck_assert_int_eq(d.nranks, 1);
    mlsys_trace_free(&d);
#endif
    bin_result_free(&plain);
    bin_result_free(&traced);
    /* and a usage error keeps its status 2 */
    plain = run_bin("run ch07/parallel-strategy-calculator --gpus 0");
    traced = run_bin("run ch07/parallel-strategy-calculator --gpus 0 --trace %s", path);
    ck_assert_int_eq(traced.status, plain.status);
    bin_result_free(&plain);
    bin_result_free(&traced);
    unlink(path);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("events");
    TCase *t = tcase_create("typed");
    tcase_set_timeout(t, 60);
    tcase_add_test(t, through_shared_memory);
    tcase_add_test(t, through_a_trace);
    tcase_add_test(t, over_tcp);
    tcase_add_test(t, single_process_lab);
    tcase_add_test(t, trace_keeps_output_headless);
    suite_add_tcase(s, t);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
