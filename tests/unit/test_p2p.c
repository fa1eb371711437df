/* test_p2p.c - point-to-point on the shared-memory transport: delivery and ordering, tags,
 * synchronous-send semantics (the chapter-2 deadlock is caught by the timeout and named),
 * non-blocking requests, receive-with-reduction, truncation errors, split groups, and the
 * zero-copy property that chapter 2's buffer-reuse pitfall relies on. */
#include "../../core/mlsys.h"
#include "rank_fail.h"
#include <check.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char why[512];

#define RUN(n, tmo, fn, arg) mlsys_run_fn((n), (tmo), (fn), (arg), why, sizeof why)

/* Ring exchange, several rounds, checked element by element. arg: {count, heap}: buffers
 * from the rank's shared heap (direct copy) or from malloc (process_vm_readv). */
static int ring_exchange(mlsys_comm *c, void *arg)
{
    size_t count = ((size_t *)arg)[0], heap = ((size_t *)arg)[1];
    int r = mlsys_rank(c), n = mlsys_size(c), right = (r + 1) % n, left = (r - 1 + n) % n;
    int32_t *a = heap ? mlsys_alloc_aligned(count * 4 + 4) : malloc(count * 4 + 4);
    int32_t *b = heap ? mlsys_alloc_aligned(count * 4 + 4) : malloc(count * 4 + 4);
    for (int round = 0; round < 3; round++) {
        for (size_t i = 0; i < count; i++)
            a[i] = (int32_t)(r * 1000003 + (int)i + round);
        int rc = mlsys_sendrecv(c, a, count, right, round, b, count, left, round, MLSYS_I32);
        FAIL_IF(rc, "sendrecv: %s", mlsys_errmsg(c));
        for (size_t i = 0; i < count; i++)
            FAIL_IF(b[i] != (int32_t)(left * 1000003 + (int)i + round),
                    "round %d element %zu: got %d", round, i, b[i]);
    }
    return 0;
}

START_TEST(test_ring_sizes)
{
    static const size_t counts[] = {0, 1, 511, 512, 513, 100000, 1 << 20};
    for (size_t heap = 0; heap < 2; heap++)
        for (int n = 1; n <= 5; n++)
            for (size_t k = 0; k < sizeof counts / sizeof counts[0]; k++) {
                size_t arg[2] = {counts[k], heap};
                ck_assert_msg(RUN(n, 10000, ring_exchange, arg) == 0, "N=%d count=%zu heap=%zu: %s",
                              n, counts[k], heap, why);
            }
}
END_TEST

/* Messages with the same tag arrive in the order sent; a receive for another tag can take
 * a later message first. */
static int tag_order(mlsys_comm *c, void *arg)
{
    (void)arg;
    if (mlsys_rank(c) == 0) {
        mlsys_request *q[4];
        int v[4] = {10, 11, 20, 12};
        int tags[4] = {1, 1, 2, 1};
        for (int i = 0; i < 4; i++)
            FAIL_IF(mlsys_isend(c, &v[i], 1, MLSYS_I32, 1, tags[i], &q[i]), "isend");
        FAIL_IF(mlsys_waitall(q, 4), "waitall: %s", mlsys_errmsg(c));
    } else {
        int x;
        FAIL_IF(mlsys_recv(c, &x, 1, MLSYS_I32, 0, 2) || x != 20, "tag 2 got %d", x);
        for (int want = 10; want <= 12; want++) {
            FAIL_IF(mlsys_recv(c, &x, 1, MLSYS_I32, 0, 1), "recv: %s", mlsys_errmsg(c));
            FAIL_IF(x != want, "tag 1 expected %d got %d", want, x);
        }
    }
    return 0;
}

START_TEST(test_tags_and_order)
{
    ck_assert_msg(RUN(2, 5000, tag_order, NULL) == 0, "%s", why);
}
END_TEST

/* Both ranks send first: synchronous sends never complete, the timeout reports the cycle. */
static int both_send_first(mlsys_comm *c, void *arg)
{
    (void)arg;
    int x = mlsys_rank(c), y;
    int rc = mlsys_send(c, &x, 1, MLSYS_I32, 1 - mlsys_rank(c), 0);
    /* The first rank to time out sees the whole cycle; the other may already see its peer
     * giving up, so only the first part of the report is common to both. */
    if (rc == MLSYS_ERR_TIMEOUT && strstr(mlsys_errmsg(c), "deadlock suspected") &&
        strstr(mlsys_errmsg(c), "waits in send to rank"))
        return 42;       /* the expected verdict */
    if (rc)
        return 1;
    mlsys_recv(c, &y, 1, MLSYS_I32, 1 - mlsys_rank(c), 0);
    return 0;
}

START_TEST(test_deadlock_detected)
{
    int rc = RUN(2, 600, both_send_first, NULL);
    ck_assert_int_ne(rc, 0);
    ck_assert_msg(strstr(why, "exited with status 42") != NULL, "%s", why);
}
END_TEST

/* The same exchange ordered (even sends first) or with isend completes. */
static int ordered_exchange(mlsys_comm *c, void *arg)
{
    int use_isend = *(int *)arg, r = mlsys_rank(c), peer = r ^ 1, x = r + 100, y = -1;
    if (peer >= mlsys_size(c))
        return 0;
    if (use_isend) {
        mlsys_request *q[2];
        FAIL_IF(mlsys_irecv(c, &y, 1, MLSYS_I32, peer, 0, &q[0]), "irecv");
        FAIL_IF(mlsys_isend(c, &x, 1, MLSYS_I32, peer, 0, &q[1]), "isend");
        FAIL_IF(mlsys_waitall(q, 2), "%s", mlsys_errmsg(c));
    } else if (r % 2 == 0) {
        FAIL_IF(mlsys_send(c, &x, 1, MLSYS_I32, peer, 0) || mlsys_recv(c, &y, 1, MLSYS_I32, peer, 0),
                "%s", mlsys_errmsg(c));
    } else {
        FAIL_IF(mlsys_recv(c, &y, 1, MLSYS_I32, peer, 0) || mlsys_send(c, &x, 1, MLSYS_I32, peer, 0),
                "%s", mlsys_errmsg(c));
    }
    FAIL_IF(y != peer + 100, "got %d from %d", y, peer);
    return 0;
}

START_TEST(test_deadlock_fixes)
{
    for (int mode = 0; mode < 2; mode++)
        for (int n = 2; n <= 7; n++)
            ck_assert_msg(RUN(n, 5000, ordered_exchange, &mode) == 0, "mode %d N=%d: %s", mode, n, why);
}
END_TEST

/* A blocking send completes only after the receiver took the data: the receiver sleeps
 * before receiving, so the send must have taken at least that long. Also: an irecv posted
 * before a blocking send progresses while the rank blocks in the send. */
static int sync_semantics(mlsys_comm *c, void *arg)
{
    (void)arg;
    int r = mlsys_rank(c), x = 7, y = 0;
    if (r == 0) {
        uint64_t t = mlsys_now_ns();
        FAIL_IF(mlsys_send(c, &x, 1, MLSYS_I32, 1, 0), "%s", mlsys_errmsg(c));
        FAIL_IF(mlsys_now_ns() - t < 150000000ull, "send returned before the receive was posted");
    } else {
        usleep(200000);
        FAIL_IF(mlsys_recv(c, &y, 1, MLSYS_I32, 0, 0) || y != 7, "got %d", y);
    }
    /* irecv then blocking send, on both sides at once: must not deadlock */
    mlsys_request *q;
    int peer = 1 - r, in = -1, out = r;
    FAIL_IF(mlsys_irecv(c, &in, 1, MLSYS_I32, peer, 5, &q), "irecv");
    FAIL_IF(mlsys_send(c, &out, 1, MLSYS_I32, peer, 5), "send: %s", mlsys_errmsg(c));
    FAIL_IF(mlsys_wait(q) || in != peer, "got %d", in);
    return 0;
}

START_TEST(test_synchronous_send)
{
    ck_assert_msg(RUN(2, 5000, sync_semantics, NULL) == 0, "%s", why);
}
END_TEST

/* Zero copy: the receiver reads the sender's buffer, so a write to it before wait reaches
 * the receiver (the pitfall chapter 2 demonstrates). */
static int zero_copy(mlsys_comm *c, void *arg)
{
    (void)arg;
    size_t n = 1 << 16;
    int32_t *buf = mlsys_alloc_aligned(n * 4);
    if (mlsys_rank(c) == 0) {
        for (size_t i = 0; i < n; i++)
            buf[i] = 1;
        mlsys_request *q;
        FAIL_IF(mlsys_isend(c, buf, n, MLSYS_I32, 1, 0, &q), "isend");
        for (size_t i = 0; i < n; i++)
            buf[i] = 2;                       /* the pitfall: touching the buffer in flight */
        int go = 1;
        FAIL_IF(mlsys_send(c, &go, 1, MLSYS_I32, 1, 1), "%s", mlsys_errmsg(c));
        FAIL_IF(mlsys_wait(q), "%s", mlsys_errmsg(c));
    } else {
        int go;
        FAIL_IF(mlsys_recv(c, &go, 1, MLSYS_I32, 0, 1), "%s", mlsys_errmsg(c));
        FAIL_IF(mlsys_recv(c, buf, n, MLSYS_I32, 0, 0), "%s", mlsys_errmsg(c));
        FAIL_IF(buf[0] != 2 || buf[n - 1] != 2, "expected the overwritten values, got %d", buf[0]);
    }
    return 0;
}

START_TEST(test_zero_copy_isend)
{
    ck_assert_msg(RUN(2, 5000, zero_copy, NULL) == 0, "%s", why);
}
END_TEST

static int recv_reduce(mlsys_comm *c, void *arg)
{
    size_t n = *(size_t *)arg;
    int r = mlsys_rank(c), peer = 1 - r;
    double *a = mlsys_alloc_aligned(n * 8 + 8), *out = mlsys_alloc_aligned(n * 8 + 8);
    for (size_t i = 0; i < n; i++)
        a[i] = (double)(r + 1) * (double)(i % 1000);
    mlsys_request *q[2];
    FAIL_IF(mlsys_irecv_reduce(c, a, out, n, MLSYS_F64, MLSYS_SUM, peer, 0, &q[0]), "irecv_reduce");
    FAIL_IF(mlsys_isend(c, a, n, MLSYS_F64, peer, 0, &q[1]), "isend");
    FAIL_IF(mlsys_waitall(q, 2), "%s", mlsys_errmsg(c));
    for (size_t i = 0; i < n; i++)
        FAIL_IF(out[i] != 3.0 * (double)(i % 1000), "element %zu: %g", i, out[i]);
    /* in place, MAX, int32 */
    int32_t v[3] = {r, -r, 5 + r};
    FAIL_IF(mlsys_irecv_reduce(c, v, v, 3, MLSYS_I32, MLSYS_MAX, peer, 1, &q[0]), "irecv_reduce");
    int32_t mine[3] = {r, -r, 5 + r};
    FAIL_IF(mlsys_isend(c, mine, 3, MLSYS_I32, peer, 1, &q[1]), "isend");
    FAIL_IF(mlsys_waitall(q, 2), "%s", mlsys_errmsg(c));
    FAIL_IF(v[0] != 1 || v[1] != 0 || v[2] != 6, "max gave %d %d %d", v[0], v[1], v[2]);
    return 0;
}

START_TEST(test_recv_reduce)
{
    static const size_t counts[] = {1, 255, 256, 257, 40000, 3 * 32768 + 5};
    for (size_t k = 0; k < sizeof counts / sizeof counts[0]; k++) {
        size_t n = counts[k];
        ck_assert_msg(RUN(2, 5000, recv_reduce, &n) == 0, "count %zu: %s", n, why);
    }
}
END_TEST

static int truncation(mlsys_comm *c, void *arg)
{
    (void)arg;
    int big[8] = {0}, small[2];
    if (mlsys_rank(c) == 0) {
        int rc = mlsys_send(c, big, 8, MLSYS_I32, 1, 0);
        FAIL_IF(rc != MLSYS_ERR_TRUNCATE, "send rc %d", rc);
    } else {
        int rc = mlsys_recv(c, small, 2, MLSYS_I32, 0, 0);
        FAIL_IF(rc != MLSYS_ERR_TRUNCATE, "recv rc %d", rc);
        FAIL_IF(!strstr(mlsys_errmsg(c), "does not fit"), "message: %s", mlsys_errmsg(c));
    }
    /* bad arguments are refused with a message, not a crash */
    FAIL_IF(mlsys_send(c, big, 1, MLSYS_I32, 5, 0) != MLSYS_ERR_ARG, "peer 5 accepted");
    FAIL_IF(!strstr(mlsys_errmsg(c), "no such rank"), "message: %s", mlsys_errmsg(c));
    FAIL_IF(mlsys_send(c, big, 1, MLSYS_I32, 0, -3) != MLSYS_ERR_ARG, "negative tag accepted");
    FAIL_IF(mlsys_send(c, NULL, 4, MLSYS_I32, 0, 0) != MLSYS_ERR_ARG, "null buffer accepted");
    return 0;
}

START_TEST(test_truncation_and_bad_args)
{
    ck_assert_msg(RUN(2, 5000, truncation, NULL) == 0, "%s", why);
}
END_TEST

/* Split into even and odd groups keyed in reverse order; messages in the two groups and
 * in the parent with the same tags never mix. */
static int split_groups(mlsys_comm *c, void *arg)
{
    (void)arg;
    int r = mlsys_rank(c), n = mlsys_size(c);
    mlsys_comm *g;
    FAIL_IF(mlsys_split(c, r % 2, -r, &g), "split: %s", mlsys_errmsg(c));
    FAIL_IF(!g, "no group");
    int gn = (n + 1 - r % 2) / 2;
    FAIL_IF(mlsys_size(g) != gn, "group size %d, want %d", mlsys_size(g), gn);
    /* key -r: the highest old rank comes first */
    int members_before = 0;
    for (int o = r + 2; o < n; o += 2)
        members_before++;
    FAIL_IF(mlsys_rank(g) != members_before, "group rank %d, want %d", mlsys_rank(g), members_before);
    int gr = mlsys_rank(g), right = (gr + 1) % gn, left = (gr - 1 + gn) % gn;
    int send = 1000 * (r % 2) + gr, got = -1;
    int parent_send = r, parent_got = -1;
    mlsys_request *q[4];
    FAIL_IF(mlsys_irecv(g, &got, 1, MLSYS_I32, left, 0, &q[0]), "irecv");
    FAIL_IF(mlsys_irecv(c, &parent_got, 1, MLSYS_I32, (r - 1 + n) % n, 0, &q[1]), "irecv");
    FAIL_IF(mlsys_isend(g, &send, 1, MLSYS_I32, right, 0, &q[2]), "isend");
    FAIL_IF(mlsys_isend(c, &parent_send, 1, MLSYS_I32, (r + 1) % n, 0, &q[3]), "isend");
    FAIL_IF(mlsys_waitall(q, 4), "%s", mlsys_errmsg(c));
    FAIL_IF(got != 1000 * (r % 2) + left, "group got %d", got);
    FAIL_IF(parent_got != (r - 1 + n) % n, "parent got %d", parent_got);
    mlsys_comm *none;
    FAIL_IF(mlsys_split(c, r == 0 ? 0 : -1, 0, &none), "split 2: %s", mlsys_errmsg(c));
    FAIL_IF((r == 0) != (none != NULL), "color -1 must give no communicator");
    if (none)
        FAIL_IF(mlsys_size(none) != 1, "size %d", mlsys_size(none));
    return 0;
}

START_TEST(test_split)
{
    for (int n = 1; n <= 7; n++)
        ck_assert_msg(RUN(n, 5000, split_groups, NULL) == 0, "N=%d: %s", n, why);
}
END_TEST

/* Counters: sends and bytes are counted per communicator. */
static int counters(mlsys_comm *c, void *arg)
{
    (void)arg;
    int r = mlsys_rank(c), n = mlsys_size(c), x[4] = {0};
    mlsys_reset_counters(c);
    for (int k = 0; k < 3; k++)
        FAIL_IF(mlsys_sendrecv(c, x, 4, (r + 1) % n, 0, x, 4, (r - 1 + n) % n, 0, MLSYS_I32), "x");
    const mlsys_counters *k = mlsys_get_counters(c);
    FAIL_IF(k->sends != 3 || k->recvs != 3 || k->bytes_sent != 48 || k->bytes_recv != 48,
            "sends %llu recvs %llu bytes %llu", (unsigned long long)k->sends,
            (unsigned long long)k->recvs, (unsigned long long)k->bytes_sent);
    return 0;
}

START_TEST(test_counters)
{
    ck_assert_msg(RUN(3, 5000, counters, NULL) == 0, "%s", why);
}
END_TEST

/* Message order under eager sends: print_ordered sends a length and then the text with one
 * tag, eagerly; if the text ever overtook the length, rank 0 would receive 40-odd bytes
 * into an 8-byte buffer and fail. Thousands of rounds on more ranks than cores, so that
 * posting and scanning interleave in every way. (Rank 0's output goes to /dev/null.) */
static int print_storm(mlsys_comm *c, void *arg)
{
    int rounds = *(int *)arg;
    if (mlsys_rank(c) == 0 && !freopen("/dev/null", "w", stdout))
        return 3;
    float x[2] = {1, 2}, y[2];
    for (int k = 0; k < rounds; k++) {
        FAIL_IF(mlsys_print_ordered(c, "#  Rank %2d Pid %6d on %10s backend %s\n", mlsys_rank(c),
                                    k, "host", "shm"),
                "round %d: %s", k, mlsys_errmsg(c));
        if (k % 7 == 0)
            FAIL_IF(mlsys_allreduce(c, x, y, 2, MLSYS_F32, MLSYS_SUM), "%s", mlsys_errmsg(c));
    }
    return 0;
}

START_TEST(test_eager_order)
{
    int rounds = 3000;
    for (int n = 3; n <= 5; n += 2)
        ck_assert_msg(RUN(n, 10000, print_storm, &rounds) == 0, "N=%d: %s", n, why);
}
END_TEST

/* mlsys_alloc_aligned promises zeroes: also for memory that an earlier free kept resident
 * (the heap keeps freed pages for the next collective's scratch), whether the new block is
 * the same size, a part of a freed one, or spans two freed neighbours. */
static int heap_reuse(mlsys_comm *c, void *arg)
{
    (void)arg;
    const size_t sizes[] = {4096, 65536, 3 * 4096 + 100, 1 << 20};
    for (int round = 0; round < 3; round++)
        for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
            size_t n = sizes[k];
            unsigned char *p = mlsys_alloc_aligned(n), *q = mlsys_alloc_aligned(n);
            FAIL_IF(((uintptr_t)p | (uintptr_t)q) % 4096, "not page-aligned");
            for (size_t i = 0; i < n; i++)
                FAIL_IF(p[i] || q[i], "round %d size %zu byte %zu: not zero", round, n, i);
            memset(p, 0xab, n);
            memset(q, 0xcd, n);
            mlsys_free_aligned(p, n);
            mlsys_free_aligned(q, n);
            unsigned char *big = mlsys_alloc_aligned(2 * n);   /* both freed blocks */
            for (size_t i = 0; i < 2 * n; i++)
                FAIL_IF(big[i], "round %d: %zu B over two freed blocks, byte %zu is %#x", round,
                        2 * n, i, big[i]);
            memset(big, 0xef, 2 * n);
            mlsys_free_aligned(big, 2 * n);
        }
    return 0;
}

START_TEST(test_heap_reuse_is_zeroed)
{
    ck_assert_msg(RUN(2, 10000, heap_reuse, NULL) == 0, "%s", why);
}
END_TEST

static Suite *p2p_suite(void)
{
    Suite *s = suite_create("p2p");
    TCase *t = tcase_create("shm");
    tcase_set_timeout(t, 60);
    tcase_add_test(t, test_ring_sizes);
    tcase_add_test(t, test_tags_and_order);
    tcase_add_test(t, test_deadlock_detected);
    tcase_add_test(t, test_deadlock_fixes);
    tcase_add_test(t, test_synchronous_send);
    tcase_add_test(t, test_zero_copy_isend);
    tcase_add_test(t, test_recv_reduce);
    tcase_add_test(t, test_truncation_and_bad_args);
    tcase_add_test(t, test_split);
    tcase_add_test(t, test_counters);
    tcase_add_test(t, test_eager_order);
    tcase_add_test(t, test_heap_reuse_is_zeroed);
    suite_add_tcase(s, t);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(p2p_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
