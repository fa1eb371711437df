/* test_comm_promises.c - what the communication runtime promises beyond the buffers that
 * test_coll and test_p2p compare. A barrier: no rank leaves before every rank has arrived
 * (test_coll only sees it return 0). Each rank counts itself in a shared page before the
 * barrier and checks the count after it; one rank, a different one each round, arrives late
 * and first waits a while for anyone leaving early, so a barrier that lets a rank out too
 * soon is seen whatever the scheduling. A correct barrier passes whatever the timing.
 * Receives: two posted for the same source and tag take the messages in the order they were
 * posted (MPI's non-overtaking rule), even when the second is posted after both messages
 * arrived; and a reducing receive takes a message of exactly its size (a shorter one is an
 * error, not a partial reduction). */
#include <check.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include "../../core/mlsys.h"

#define TIMEOUT_MS 20000
#define MAX_ROUNDS 8
#define EARLY_WINDOW_S 0.1       /* how long the late rank gives an early leaver to show */
#define FLAG_WAIT_S 60.0         /* a generous limit on waiting for the other rank's flag */

/* Shared by the ranks (forked processes): a page mapped before the job starts. */
typedef struct board {
    _Atomic int arrived[MAX_ROUNDS];
    _Atomic int early[MAX_ROUNDS];      /* ranks that left before all had arrived */
    _Atomic int posted, sent;           /* the receive test's two steps */
} board;

static board *g_board;
static const char *g_algo;

static void nap_ms(int ms)
{
    struct timespec ts = {0, ms * 1000000L};
    nanosleep(&ts, NULL);
}

static int barrier_rank(mlsys_comm *c, void *arg)
{
    (void)arg;
    int n = mlsys_size(c), r = mlsys_rank(c), rc;
    if ((rc = mlsys_set_algo(c, MLSYS_COLL_BARRIER, g_algo)) != 0)
        return rc;
    for (int round = 0; round < n && round < MAX_ROUNDS; round++) {
        if (r == n - 1 - round) {
            /* the late one: wait (generously) until all the others are in their barrier,
             * then give an early leaver its chance to show */
            double t0 = mlsys_now_s();
            while (atomic_load(&g_board->arrived[round]) < n - 1 &&
                   mlsys_now_s() - t0 < FLAG_WAIT_S)
                nap_ms(1);
            t0 = mlsys_now_s();
            while (!atomic_load(&g_board->early[round]) &&
                   mlsys_now_s() - t0 < EARLY_WINDOW_S)
                nap_ms(1);
        }
        atomic_fetch_add(&g_board->arrived[round], 1);
        if ((rc = mlsys_barrier(c)) != 0)
            return rc;
        int seen = atomic_load(&g_board->arrived[round]);
        if (seen != n) {
            atomic_fetch_add(&g_board->early[round], 1);
            fprintf(stderr, "%s barrier, %d ranks, round %d: rank %d left after %d of %d "
                    "arrived\n", g_algo, n, round, r, seen, n);
            return 1;
        }
    }
    return 0;
}

START_TEST(barrier_holds_until_all_arrive)
{
    static const char *const algos[] = {"direct", "dissemination"};
    static const int sizes[] = {2, 3, 5, 8};
    g_board = mmap(NULL, sizeof *g_board, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
                   -1, 0);
    ck_assert(g_board != MAP_FAILED);
    for (size_t a = 0; a < sizeof algos / sizeof algos[0]; a++)
        for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
            memset(g_board, 0, sizeof *g_board);
            g_algo = algos[a];
            char why[512] = "";
            int rc = mlsys_run_fn(sizes[s], TIMEOUT_MS, barrier_rank, NULL, why, sizeof why);
            ck_assert_msg(rc == 0, "%s barrier on %d ranks: a rank left before all had "
                          "arrived (%s)", algos[a], sizes[s], why);
        }
    munmap(g_board, sizeof *g_board);
}
END_TEST


/* Wait until *flag is set (FLAG_WAIT_S at most): 1 when it was. */
static int wait_flag(_Atomic int *flag)
{
    double t0 = mlsys_now_s();
    while (!atomic_load(flag))
        if (mlsys_now_s() - t0 > FLAG_WAIT_S)
            return 0;
        else
            nap_ms(1);
    return 1;
}

/* Rank 0 posts receive A; rank 1 then sends 1 and 2 with the same tag; only once both are
 * posted does rank 0 post receive B. A must take 1, B 2. */
static int order_rank(mlsys_comm *c, void *arg)
{
    (void)arg;
    int32_t one = 1, two = 2, a = 0, b = 0;
    mlsys_request *req[2];
    int rc;
    if (mlsys_rank(c) == 1) {
        if (!wait_flag(&g_board->posted))
            return 2;
        if ((rc = mlsys_isend(c, &one, 1, MLSYS_I32, 0, 5, &req[0])) ||
            (rc = mlsys_isend(c, &two, 1, MLSYS_I32, 0, 5, &req[1])))
            return rc;
        atomic_store(&g_board->sent, 1);
        return mlsys_waitall(req, 2);
    }
    if ((rc = mlsys_irecv(c, &a, 1, MLSYS_I32, 1, 5, &req[0])))
        return rc;
    atomic_store(&g_board->posted, 1);
    if (!wait_flag(&g_board->sent))
        return 2;
    if ((rc = mlsys_irecv(c, &b, 1, MLSYS_I32, 1, 5, &req[1])) ||
        (rc = mlsys_waitall(req, 2)))
        return rc;
    if (a != 1 || b != 2) {
        fprintf(stderr, "the receive posted first got %d, the second %d (sent 1 then 2)\n", a,
                b);
        return 1;
    }
    return 0;
}

START_TEST(receives_do_not_overtake)
{
    g_board = mmap(NULL, sizeof *g_board, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
                   -1, 0);
    ck_assert(g_board != MAP_FAILED);
    for (int round = 0; round < 5; round++) {
        memset(g_board, 0, sizeof *g_board);
        char why[512] = "";
        ck_assert_msg(mlsys_run_fn(2, TIMEOUT_MS, order_rank, NULL, why, sizeof why) == 0,
                      "round %d: %s", round, why);
    }
    munmap(g_board, sizeof *g_board);
}
END_TEST

/* A reducing receive of 8 elements and a message of 4: an error on both sides (the sender
 * hears that the receiver's buffer did not fit); a plain receive may be larger. */
static int reduce_size_rank(mlsys_comm *c, void *arg)
{
    (void)arg;
    float msg[4] = {1, 2, 3, 4}, in[8] = {0}, out[8];
    int rc;
    if (mlsys_rank(c) == 1) {
        rc = mlsys_send(c, msg, 4, MLSYS_F32, 0, 7);
        if (rc == 0) {
            fprintf(stderr, "the sender was told a 4-element message fit an 8-element "
                    "reducing receive\n");
            return 1;
        }
        return mlsys_send(c, msg, 4, MLSYS_F32, 0, 8);
    }
    for (int i = 0; i < 8; i++)
        out[i] = -1.0f;
    rc = mlsys_recv_reduce(c, in, out, 8, MLSYS_F32, MLSYS_SUM, 1, 7);
    if (rc == 0) {
        fprintf(stderr, "a 4-element message reduced into an 8-element receive: accepted\n");
        return 1;
    }
    float big[8];
    if ((rc = mlsys_recv(c, big, 8, MLSYS_F32, 1, 8)))      /* plain: a larger buffer is fine */
        return rc;
    return big[0] == 1 && big[3] == 4 ? 0 : 1;
}

START_TEST(reducing_receive_takes_its_size)
{
    char why[512] = "";
    ck_assert_msg(mlsys_run_fn(2, TIMEOUT_MS, reduce_size_rank, NULL, why, sizeof why) == 0,
                  "%s", why);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("comm_promises");
    TCase *tc = tcase_create("barrier");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, barrier_holds_until_all_arrive);
    suite_add_tcase(s, tc);
    TCase *p2p = tcase_create("p2p");
    tcase_set_timeout(p2p, 120);
    tcase_add_test(p2p, receives_do_not_overtake);
    tcase_add_test(p2p, reducing_receive_takes_its_size);
    suite_add_tcase(s, p2p);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
