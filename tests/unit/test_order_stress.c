/* test_order_stress.c - MPI's non-overtaking rule across the shm transport's two paths (fast
 * box and slots) when a receiver is descheduled at the worst moment: between its look at the
 * fast box and its slot scan. A debug hook of shm_p2p.c stops it there; the sender then posts
 * an older fast-box message and a younger slot message of the same tag, and the receive
 * must still take the older one. Then the collective that first showed it (ring
 * reduce_scatter, counts 3 and 13 in turn), all ranks on one CPU, yielding in that window. */
#include "../../core/internal.h"
#include "rank_fail.h"
#include <check.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* shm_p2p.c's hook: between a receive's fast-box look and its slot scan */

static char why[512];

/* Shared by the ranks (forked after the test maps it). */
typedef struct {
    _Atomic int armed;          /* rank 1: stop at the next window */
    _Atomic int in_window;      /* rank 1 is stopped in it */
    _Atomic int sent;           /* rank 0 has sent both messages */
} flags;

static flags *fl;

static int wait_flag(_Atomic int *f, int ms)
{
    for (int i = 0; i < ms * 10; i++) {
        if (atomic_load(f))
            return 1;
        usleep(100);
    }
    return 0;
}

static void stop_in_window(mlsys_request *r)
{
    (void)r;
    int one = 1;
    if (!atomic_compare_exchange_strong(&fl->armed, &one, 0))
        return;
    atomic_store(&fl->in_window, 1);
    wait_flag(&fl->sent, 5000);
}

/* Rank 0 sends A (tag 5, 1 int: a fast-box cell) then B (tag 5, 16 ints: a slot) while
 * rank 1 is stopped in its receive's window; rank 1 must get A, then B. Repeated with the
 * receive posted as an irecv and as a blocking recv, and with a recv-reduce. */
enum { ROUNDS = 3, BIG = 16 };

static int window(mlsys_comm *c, void *arg)
{
    (void)arg;
    if (mlsys_rank(c) == 1)
        shm_recv_window_hook = stop_in_window;
    c->in_coll++;               /* a collective's context: eager sends, the fast box */
    for (int k = 0; k < ROUNDS; k++) {
        int32_t a = 100 + k, b[BIG];
        for (int i = 0; i < BIG; i++)
            b[i] = 1000 * (k + 1) + i;
        if (mlsys_rank(c) == 0) {
            FAIL_IF(!wait_flag(&fl->in_window, 5000), "round %d: rank 1 never reached the "
                    "window", k);
            atomic_store(&fl->in_window, 0);
            mlsys_request *req[2];
            FAIL_IF(mlsys_isend(c, &a, 1, MLSYS_I32, 1, 5, &req[0]), "%s", mlsys_errmsg(c));
            FAIL_IF(mlsys_isend(c, b, BIG, MLSYS_I32, 1, 5, &req[1]), "%s", mlsys_errmsg(c));
            FAIL_IF(mlsys_waitall(req, 2), "%s", mlsys_errmsg(c));
            atomic_store(&fl->sent, 1);
            int32_t ack;
            FAIL_IF(mlsys_recv(c, &ack, 1, MLSYS_I32, 1, 6), "%s", mlsys_errmsg(c));
            atomic_store(&fl->sent, 0);
            continue;
        }
        int32_t got = -1, gb[BIG], in = 7, ack = 0;
        memset(gb, 0, sizeof gb);
        atomic_store(&fl->armed, 1);
        int rc;
        if (k == 0) {
            mlsys_request *r;
            rc = mlsys_irecv(c, &got, 1, MLSYS_I32, 0, 5, &r);
            if (!rc)
                rc = mlsys_wait(r);
        } else if (k == 1) {
            rc = mlsys_recv(c, &got, 1, MLSYS_I32, 0, 5);
        } else {
            rc = mlsys_recv_reduce(c, &in, &got, 1, MLSYS_I32, MLSYS_SUM, 0, 5);
        }
        FAIL_IF(rc, "round %d: first receive of tag 5: %s", k, mlsys_errmsg(c));
        FAIL_IF(got != a + (k == 2 ? in : 0), "round %d: first receive got %d, not A", k, got);
        FAIL_IF(mlsys_recv(c, gb, BIG, MLSYS_I32, 0, 5), "round %d: %s", k, mlsys_errmsg(c));
        for (int i = 0; i < BIG; i++)
            FAIL_IF(gb[i] != b[i], "round %d: B[%d] = %d, not %d", k, i, gb[i], b[i]);
        FAIL_IF(mlsys_send(c, &ack, 1, MLSYS_I32, 0, 6), "%s", mlsys_errmsg(c));
    }
    c->in_coll--;
    return 0;
}

static void yield_in_window(mlsys_request *r)
{
    (void)r;
    sched_yield();
}

/* Ring reduce_scatter of int32 prod on n ranks bound to one CPU, counts 3 (in place) and 13
 * in turn: a rank that lags in count 3's last step sees count 13's messages of the same
 * tags arrive behind the fast-box cell it still waits for. Checked against the product
 * computed here. */
enum { CALLS = 300 };

static int first_cpu;           /* the test process's first allowed CPU, set before the job */

static int32_t elem(int rank, int call, size_t i)
{
    return (int32_t)((rank + call + (int)i) % 3) + 1;      /* 1..3: products stay small */
}

static int ring_lag(mlsys_comm *c, void *arg)
{
    (void)arg;
    cpu_set_t one;              /* every rank on one CPU: the launcher spread them */
    CPU_ZERO(&one);
    CPU_SET(first_cpu, &one);
    sched_setaffinity(0, sizeof one, &one);
    shm_recv_window_hook = yield_in_window;
    int n = mlsys_size(c), me = mlsys_rank(c);
    FAIL_IF(mlsys_set_algo(c, MLSYS_COLL_REDUCE_SCATTER, "ring"), "%s", mlsys_errmsg(c));
    int32_t sbuf[8 * 13], rbuf[13];
    for (int call = 0; call < CALLS; call++) {
        size_t count = call % 2 ? 13 : 3;
        int inplace = !(call % 2);
        for (size_t i = 0; i < (size_t)n * count; i++)
            sbuf[i] = elem(me, call, i);
        int32_t *out = inplace ? sbuf + (size_t)me * count : rbuf;
        FAIL_IF(mlsys_reduce_scatter(c, sbuf, out, count, MLSYS_I32, MLSYS_PROD),
                "call %d (count %zu%s): %s", call, count, inplace ? ", in place" : "",
                mlsys_errmsg(c));
        for (size_t i = 0; i < count; i++) {
            int32_t want = 1;
            for (int q = 0; q < n; q++)
                want *= elem(q, call, (size_t)me * count + i);
            FAIL_IF(out[i] != want, "call %d (count %zu): element %zu = %d, not %d", call,
                    count, i, out[i], want);
        }
    }
    return 0;
}

START_TEST(test_cell_older_than_slot_in_window)
{
    fl = mmap(NULL, sizeof *fl, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    ck_assert_ptr_ne(fl, MAP_FAILED);
    memset(fl, 0, sizeof *fl);
    int rc = mlsys_run_fn(2, 20000, window, NULL, why, sizeof why);
    munmap(fl, sizeof *fl);
    ck_assert_msg(rc == 0, "%s", why);
}
END_TEST

START_TEST(test_ring_reduce_scatter_lagging_rank)
{
    int n = 3 + _i;
    cpu_set_t all;
    first_cpu = 0;
    if (sched_getaffinity(0, sizeof all, &all) == 0)
        while (first_cpu < CPU_SETSIZE - 1 && !CPU_ISSET(first_cpu, &all))
            first_cpu++;
    ck_assert_msg(mlsys_run_fn(n, 20000, ring_lag, NULL, why, sizeof why) == 0, "N=%d: %s", n,
                  why);
}
END_TEST

static Suite *order_suite(void)
{
    Suite *s = suite_create("order_stress");
    TCase *t = tcase_create("window");
    tcase_set_timeout(t, 60);
    tcase_add_test(t, test_cell_older_than_slot_in_window);
    suite_add_tcase(s, t);
    t = tcase_create("ring");
    tcase_set_timeout(t, 60);
    tcase_add_loop_test(t, test_ring_reduce_scatter_lagging_rank, 0, 2);
    suite_add_tcase(s, t);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(order_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
