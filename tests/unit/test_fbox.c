/* test_fbox.c - the shm transport's fast box, white box: messages of a collective's context
 * (the test enters one by hand) that arrive before their receive, out of tag order, mixed
 * with slot messages of the same tag, more of them than the ring has cells, a receive too
 * small for a kept message, and a receive-reduce from one; through requests and through
 * the request-free shortcuts. Matching must stay MPI's: per source, context and tag, in
 * sending order, whichever path each message took. */
#include "../../core/internal.h"
#include "rank_fail.h"
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char why[512];

enum { FLOOD = 3 * FBOX_CELLS + 5, BIG = SHM_INLINE / 4 };   /* BIG: int32s, a slot message */

static int32_t val(int msg, int i) { return msg * 1000 + i; }

/* Rank 0 sends, in this order: A (tag 5, 2 ints, fast box), B (tag 5, 16 ints: 64 B, a
 * slot), C (tag 5, 1 int, fast box), D (tag 7, 1 int), E (tag 8, 8 ints, for a receive
 * that is too small), F (tag 9, 4 ints, for a receive-reduce), then FLOOD messages of tag
 * 11. Rank 1 sleeps first, so that everything piles up, then takes D first, then A B C. */
static int sender(mlsys_comm *c)
{
    static int32_t a[2], b[16], cc[1], d[1], e[8], f[4], flood[FLOOD];
    mlsys_request *req[6 + FLOOD];
    int n = 0;
    for (int i = 0; i < 2; i++) a[i] = val(1, i);
    for (int i = 0; i < 16; i++) b[i] = val(2, i);
    cc[0] = val(3, 0);
    d[0] = val(4, 0);
    for (int i = 0; i < 8; i++) e[i] = val(5, i);
    for (int i = 0; i < 4; i++) f[i] = val(6, i);
    FAIL_IF(mlsys_isend(c, a, 2, MLSYS_I32, 1, 5, &req[n++]), "%s", mlsys_errmsg(c));
    FAIL_IF(mlsys_isend(c, b, 16, MLSYS_I32, 1, 5, &req[n++]), "%s", mlsys_errmsg(c));
    FAIL_IF(mlsys_isend(c, cc, 1, MLSYS_I32, 1, 5, &req[n++]), "%s", mlsys_errmsg(c));
    FAIL_IF(mlsys_isend(c, d, 1, MLSYS_I32, 1, 7, &req[n++]), "%s", mlsys_errmsg(c));
    FAIL_IF(mlsys_isend(c, e, 8, MLSYS_I32, 1, 8, &req[n++]), "%s", mlsys_errmsg(c));
    FAIL_IF(mlsys_isend(c, f, 4, MLSYS_I32, 1, 9, &req[n++]), "%s", mlsys_errmsg(c));
    for (int k = 0; k < FLOOD; k++) {
        flood[k] = val(7, k);
        FAIL_IF(mlsys_isend(c, &flood[k], 1, MLSYS_I32, 1, 11, &req[n++]), "%s",
                mlsys_errmsg(c));
    }
    FAIL_IF(mlsys_waitall(req, n), "waitall: %s", mlsys_errmsg(c));
    /* G (tag 12, a slot) then H and I (tag 12, fast box), to receives already posted: a
     * cell must not overtake the slot message before it */
    static int32_t g[16], h[1], ii[1], j[1], k1[1], go;
    for (int i = 0; i < 16; i++) g[i] = val(8, i);
    h[0] = val(9, 0);
    ii[0] = val(10, 0);
    n = 0;
    FAIL_IF(mlsys_isend(c, g, 16, MLSYS_I32, 1, 12, &req[n++]), "%s", mlsys_errmsg(c));
    FAIL_IF(mlsys_isend(c, h, 1, MLSYS_I32, 1, 12, &req[n++]), "%s", mlsys_errmsg(c));
    FAIL_IF(mlsys_isend(c, ii, 1, MLSYS_I32, 1, 12, &req[n++]), "%s", mlsys_errmsg(c));
    FAIL_IF(mlsys_waitall(req, n), "waitall: %s", mlsys_errmsg(c));
    /* J (tag 13) is kept before any receive of tag 13 (the receiver takes L, sent after
     * it); K (tag 13) is in the fast box when the receive of tag 13 is posted: the kept J
     * goes first */
    j[0] = val(11, 0);
    k1[0] = val(12, 0);
    static int32_t l[1];
    l[0] = val(13, 0);
    FAIL_IF(mlsys_send(c, j, 1, MLSYS_I32, 1, 13), "%s", mlsys_errmsg(c));
    FAIL_IF(mlsys_send(c, l, 1, MLSYS_I32, 1, 14), "%s", mlsys_errmsg(c));
    c->in_coll--;
    FAIL_IF(mlsys_recv(c, &go, 1, MLSYS_I32, 1, 99), "%s", mlsys_errmsg(c));  /* J kept */
    c->in_coll++;
    FAIL_IF(mlsys_send(c, k1, 1, MLSYS_I32, 1, 13), "%s", mlsys_errmsg(c));
    /* M (tag 16, a slot) then N (tag 16, fast box), received by plain receives posted after
     * both arrived: N is first in the fast box, but M is older */
    static int32_t mm[16], nn[1];
    for (int i = 0; i < 16; i++) mm[i] = val(14, i);
    nn[0] = val(15, 0);
    c->in_coll--;
    FAIL_IF(mlsys_recv(c, &go, 1, MLSYS_I32, 1, 99), "%s", mlsys_errmsg(c));  /* K taken */
    c->in_coll++;
    n = 0;
    FAIL_IF(mlsys_isend(c, mm, 16, MLSYS_I32, 1, 16, &req[n++]), "%s", mlsys_errmsg(c));
    FAIL_IF(mlsys_isend(c, nn, 1, MLSYS_I32, 1, 16, &req[n++]), "%s", mlsys_errmsg(c));
    FAIL_IF(mlsys_waitall(req, n), "waitall: %s", mlsys_errmsg(c));
    /* P then Q (tag 17, fast box) after the receiver posted an irecv of tag 17: its later
     * blocking receive must not take P, first in line, from the older irecv */
    static int32_t pq[2];
    pq[0] = val(16, 0);
    pq[1] = val(17, 0);
    c->in_coll--;
    FAIL_IF(mlsys_recv(c, &go, 1, MLSYS_I32, 1, 99), "%s", mlsys_errmsg(c));  /* irecv up */
    c->in_coll++;
    usleep(20 * 1000);     /* the receiver has left its wait and sleeps */
    FAIL_IF(mlsys_send(c, &pq[0], 1, MLSYS_I32, 1, 17), "%s", mlsys_errmsg(c));
    FAIL_IF(mlsys_send(c, &pq[1], 1, MLSYS_I32, 1, 17), "%s", mlsys_errmsg(c));
    return 0;
}

static int receiver(mlsys_comm *c)
{
    int32_t got[16], gh[3][16];
    mlsys_request *pre[3];
    for (int k = 0; k < 3; k++)        /* for G, H and I, posted long before they come */
        FAIL_IF(mlsys_irecv(c, gh[k], 16, MLSYS_I32, 0, 12, &pre[k]), "%s", mlsys_errmsg(c));
    usleep(100 * 1000);
    FAIL_IF(mlsys_recv(c, got, 1, MLSYS_I32, 0, 7), "D: %s", mlsys_errmsg(c));
    FAIL_IF(got[0] != val(4, 0), "D: got %d", got[0]);
    memset(got, 0, sizeof got);
    FAIL_IF(mlsys_recv(c, got, 16, MLSYS_I32, 0, 5), "A: %s", mlsys_errmsg(c));
    for (int i = 0; i < 2; i++)
        FAIL_IF(got[i] != val(1, i), "A first (sent first): element %d is %d", i, got[i]);
    FAIL_IF(mlsys_recv(c, got, 16, MLSYS_I32, 0, 5), "B: %s", mlsys_errmsg(c));
    for (int i = 0; i < 16; i++)
        FAIL_IF(got[i] != val(2, i), "B second (from a slot): element %d is %d", i, got[i]);
    FAIL_IF(mlsys_recv(c, got, 16, MLSYS_I32, 0, 5), "C: %s", mlsys_errmsg(c));
    FAIL_IF(got[0] != val(3, 0), "C third: got %d", got[0]);
    int rc = mlsys_recv(c, got, 4, MLSYS_I32, 0, 8);
    FAIL_IF(rc != MLSYS_ERR_TRUNCATE, "E: 32 B into 16 B gave %d, not a truncation error", rc);
    FAIL_IF(!strstr(mlsys_errmsg(c), "does not fit"), "E: message \"%s\"", mlsys_errmsg(c));
    int32_t in[4] = {1, 2, 3, 4}, out[4];
    FAIL_IF(mlsys_recv_reduce(c, in, out, 4, MLSYS_I32, MLSYS_SUM, 0, 9), "F: %s",
            mlsys_errmsg(c));
    for (int i = 0; i < 4; i++)
        FAIL_IF(out[i] != val(6, i) + i + 1, "F: element %d is %d", i, out[i]);
    for (int k = 0; k < FLOOD; k++) {
        FAIL_IF(mlsys_recv(c, got, 1, MLSYS_I32, 0, 11), "flood %d: %s", k, mlsys_errmsg(c));
        FAIL_IF(got[0] != val(7, k), "flood %d: got %d (order lost)", k, got[0]);
    }
    FAIL_IF(mlsys_waitall(pre, 3), "G H I: %s", mlsys_errmsg(c));
    for (int i = 0; i < 16; i++)
        FAIL_IF(gh[0][i] != val(8, i), "G first (a slot, sent first): element %d is %d", i,
                gh[0][i]);
    FAIL_IF(gh[1][0] != val(9, 0) || gh[2][0] != val(10, 0), "H, I: got %d %d", gh[1][0],
            gh[2][0]);
    /* J is kept while we take L (tag 14, sent after it); K arrives before we post the
     * receive of tag 13 */
    int32_t go = 1;
    usleep(50 * 1000);
    FAIL_IF(mlsys_recv(c, got, 1, MLSYS_I32, 0, 14), "L: %s", mlsys_errmsg(c));
    FAIL_IF(got[0] != val(13, 0), "L: got %d", got[0]);
    c->in_coll--;
    FAIL_IF(mlsys_send(c, &go, 1, MLSYS_I32, 0, 99), "%s", mlsys_errmsg(c));
    c->in_coll++;
    usleep(50 * 1000);     /* K is in the fast box by now, J still kept */
    int32_t jk[2] = {0, 0};
    FAIL_IF(mlsys_recv(c, &jk[0], 1, MLSYS_I32, 0, 13), "J: %s", mlsys_errmsg(c));
    FAIL_IF(mlsys_recv(c, &jk[1], 1, MLSYS_I32, 0, 13), "K: %s", mlsys_errmsg(c));
    FAIL_IF(jk[0] != val(11, 0) || jk[1] != val(12, 0), "J then K: got %d %d", jk[0], jk[1]);
    c->in_coll--;
    FAIL_IF(mlsys_send(c, &go, 1, MLSYS_I32, 0, 99), "%s", mlsys_errmsg(c));
    c->in_coll++;
    usleep(50 * 1000);     /* M in a slot, N first in the fast box, nothing kept */
    FAIL_IF(mlsys_recv(c, got, 16, MLSYS_I32, 0, 16), "M: %s", mlsys_errmsg(c));
    for (int i = 0; i < 16; i++)
        FAIL_IF(got[i] != val(14, i), "M first (a slot, sent first): element %d is %d", i,
                got[i]);
    FAIL_IF(mlsys_recv(c, got, 16, MLSYS_I32, 0, 16), "N: %s", mlsys_errmsg(c));
    FAIL_IF(got[0] != val(15, 0), "N second: got %d", got[0]);
    int32_t p1 = 0, q1 = 0;
    mlsys_request *early;
    FAIL_IF(mlsys_irecv(c, &p1, 1, MLSYS_I32, 0, 17, &early), "%s", mlsys_errmsg(c));
    c->in_coll--;
    FAIL_IF(mlsys_send(c, &go, 1, MLSYS_I32, 0, 99), "%s", mlsys_errmsg(c));
    c->in_coll++;
    usleep(50 * 1000);     /* P and Q wait in the fast box; the irecv has not looked yet */
    FAIL_IF(mlsys_recv(c, &q1, 1, MLSYS_I32, 0, 17), "Q: %s", mlsys_errmsg(c));
    FAIL_IF(mlsys_wait(early), "P: %s", mlsys_errmsg(c));
    FAIL_IF(p1 != val(16, 0) || q1 != val(17, 0), "the older irecv must get P: irecv %d, "
            "recv %d", p1, q1);
    return 0;
}

static int pile_up(mlsys_comm *c, void *arg)
{
    (void)arg;
    c->in_coll++;           /* a collective's context: these sends are eager */
    int rc = mlsys_rank(c) == 0 ? sender(c) : mlsys_rank(c) == 1 ? receiver(c) : 0;
    c->in_coll--;
    return rc;
}

START_TEST(test_out_of_order_and_mixed_paths)
{
    ck_assert_msg(mlsys_run_fn(2, 10000, pile_up, NULL, why, sizeof why) == 0, "%s", why);
}
END_TEST

/* Many small collectives back to back on more ranks than cores, each checked: the ring of
 * every channel wraps thousands of times and fast ranks run ahead of slow ones. */
static int many_small(mlsys_comm *c, void *arg)
{
    (void)arg;
    int n = mlsys_size(c), r = mlsys_rank(c);
    for (int k = 0; k < 2000; k++) {
        int32_t x[3] = {r + k, 2 * r, k}, y[3];
        FAIL_IF(mlsys_allreduce(c, x, y, 3, MLSYS_I32, MLSYS_SUM), "%s", mlsys_errmsg(c));
        int32_t sum_r = n * (n - 1) / 2;
        FAIL_IF(y[0] != sum_r + n * k || y[1] != 2 * sum_r || y[2] != n * k,
                "round %d: %d %d %d", k, y[0], y[1], y[2]);
        int32_t g[8];
        FAIL_IF(mlsys_allgather(c, &x[0], g, 1, MLSYS_I32), "%s", mlsys_errmsg(c));
        for (int i = 0; i < n; i++)
            FAIL_IF(g[i] != i + k, "round %d: gathered[%d] = %d", k, i, g[i]);
    }
    return 0;
}

START_TEST(test_many_small_collectives)
{
    for (int n = 2; n <= 5; n += 3)
        ck_assert_msg(mlsys_run_fn(n, 10000, many_small, NULL, why, sizeof why) == 0,
                      "N=%d: %s", n, why);
}
END_TEST

static Suite *fbox_suite(void)
{
    Suite *s = suite_create("fbox");
    TCase *t = tcase_create("shm");
    tcase_set_timeout(t, 60);
    tcase_add_test(t, test_out_of_order_and_mixed_paths);
    tcase_add_test(t, test_many_small_collectives);
    suite_add_tcase(s, t);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(fbox_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
