/* cases.c - the MPI backend's test program (tests/mpi/run.sh builds it against the build's
 * libraries). `cases job MODE N [events|rogue]` starts N ranks of `cases rank MODE` through
 * the runner's mpirun launcher (lab/mpirun.c) and prints how the job ended; `cases rank MODE`
 * is one rank: p2p and native checks against values computed here independently, a real
 * send/send deadlock, a failing rank, a known number of events for the collector, and typed
 * memory and flow records whose every field the runner checks. */
#include "../../core/coll/coll.h"
#include "../../core/net_events.h"
#include "../../lab/backend/mpirun.h"
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static int fails;

#define CHECK(cond, ...) do { if (!(cond)) { fails++; fprintf(stderr, "rank %d: NOT OK: ", \
    mlsys_rank(c)); fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); } } while (0)

/* ---- rank side ---- */

/* Small integers, so every sum, product and average is exact in every type. */
static double val(int rank, size_t i)
{
    return (double)(1 + (rank + (int)i) % 3);
}

static void put(void *buf, mlsys_dtype dt, size_t i, double v)
{
    switch (dt) {
    case MLSYS_F32: ((float *)buf)[i] = (float)v; break;
    case MLSYS_F64: ((double *)buf)[i] = v; break;
    case MLSYS_I32: ((int32_t *)buf)[i] = (int32_t)v; break;
    default: ((int64_t *)buf)[i] = (int64_t)v; break;
    }
}

static double get(const void *buf, mlsys_dtype dt, size_t i)
{
    switch (dt) {
    case MLSYS_F32: return ((const float *)buf)[i];
    case MLSYS_F64: return ((const double *)buf)[i];
    case MLSYS_I32: return ((const int32_t *)buf)[i];
    default: return (double)((const int64_t *)buf)[i];
    }
}

/* The reduction of val(r, i) over the n ranks, AVG as the dispatcher finishes it. */
static double reduced(mlsys_op op, int n, size_t i, mlsys_dtype dt)
{
    double acc = val(0, i);
    for (int r = 1; r < n; r++) {
        double v = val(r, i);
        acc = op == MLSYS_PROD ? acc * v : op == MLSYS_MIN ? (v < acc ? v : acc)
            : op == MLSYS_MAX ? (v > acc ? v : acc) : acc + v;
    }
    if (op == MLSYS_AVG)
        acc = dt == MLSYS_F32 || dt == MLSYS_F64 ? acc / n : (double)((long)acc / n);
    return acc;
}

static int p2p_case(mlsys_comm *c)
{
    int r = mlsys_rank(c), n = mlsys_size(c);
    int right = (r + 1) % n, left = (r + n - 1) % n;
    CHECK(!strcmp(mlsys_backend_name(c), "mpi"), "backend is %s", mlsys_backend_name(c));

    /* a ring of sendrecvs, sizes from empty to 4 MiB */
    static const size_t sizes[] = {0, 1, 1000, 1u << 20};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        size_t m = sizes[s];
        float *out = mlsys_alloc_aligned(m * 4 + 4), *in = mlsys_alloc_aligned(m * 4 + 4);
        for (size_t i = 0; i < m; i++)
            out[i] = (float)(r * 1000 + (int)(i % 977));
        int rc = mlsys_sendrecv(c, out, m, right, 3, in, m, left, 3, MLSYS_F32);
        CHECK(rc == 0, "sendrecv of %zu floats: %s", m, mlsys_errmsg(c));
        size_t bad = 0;
        for (size_t i = 0; i < m; i++)
            bad += in[i] != (float)(left * 1000 + (int)(i % 977));
        CHECK(bad == 0, "sendrecv of %zu floats: %zu wrong", m, bad);
        mlsys_free_aligned(out, m * 4 + 4);
        mlsys_free_aligned(in, m * 4 + 4);
    }

    /* recv-reduce with every operator and type, from the left neighbour */
    for (int dt = 0; dt < MLSYS_DTYPE_COUNT; dt++)
        for (int op = 0; op < MLSYS_OP_COUNT; op++) {
            size_t m = 257, es = mlsys_dtype_size((mlsys_dtype)dt);
            char *mine = malloc(m * es), *msg = malloc(m * es), *res = malloc(m * es);
            for (size_t i = 0; i < m; i++) {
                put(mine, (mlsys_dtype)dt, i, val(r, i));
                put(msg, (mlsys_dtype)dt, i, val(r, i));
            }
            mlsys_request *q[2];
            int rc = mlsys_irecv_reduce(c, mine, res, m, (mlsys_dtype)dt, (mlsys_op)op, left, 4,
                                        &q[0]);
            rc |= mlsys_isend(c, msg, m, (mlsys_dtype)dt, right, 4, &q[1]);
            rc |= mlsys_waitall(q, 2);
            CHECK(rc == 0, "recv-reduce %s %s: %s", mlsys_dtype_name((mlsys_dtype)dt),
                  mlsys_op_name((mlsys_op)op), mlsys_errmsg(c));
            size_t bad = 0;
            for (size_t i = 0; i < m; i++) {
                double a = val(r, i), b = val(left, i);
                double want = op == MLSYS_PROD ? a * b : op == MLSYS_MIN ? (a < b ? a : b)
                            : op == MLSYS_MAX ? (a > b ? a : b) : a + b;
                bad += get(res, (mlsys_dtype)dt, i) != want;
            }
            CHECK(bad == 0, "recv-reduce %s %s: %zu wrong", mlsys_dtype_name((mlsys_dtype)dt),
                  mlsys_op_name((mlsys_op)op), bad);
            free(mine);
            free(msg);
            free(res);
        }

    /* 16 messages in flight, received in the opposite order of their tags */
    {
        int out[16], in[16];
        mlsys_request *q[32];
        for (int t = 0; t < 16; t++) {
            out[t] = r * 100 + t;
            in[t] = -1;
        }
        int rc = 0;
        for (int t = 15; t >= 0; t--)
            rc |= mlsys_irecv(c, &in[t], 1, MLSYS_I32, left, 100 + t, &q[15 - t]);
        for (int t = 0; t < 16; t++)
            rc |= mlsys_isend(c, &out[t], 1, MLSYS_I32, right, 100 + t, &q[16 + t]);
        rc |= mlsys_waitall(q, 32);
        CHECK(rc == 0, "16 tags in flight: %s", mlsys_errmsg(c));
        for (int t = 0; t < 16; t++)
            CHECK(in[t] == left * 100 + t, "tag %d carried %d, want %d", 100 + t, in[t],
                  left * 100 + t);
    }

    /* a message larger than the receive buffer */
    if (n >= 2 && r < 2) {
        int big[8] = {1, 2, 3, 4, 5, 6, 7, 8}, small[4];
        if (r == 0) {
            int rc = mlsys_send(c, big, 8, MLSYS_I32, 1, 6);
            CHECK(rc == 0 || rc == MLSYS_ERR_TRUNCATE, "truncated send: %s", mlsys_errmsg(c));
        } else {
            int rc = mlsys_recv(c, small, 4, MLSYS_I32, 0, 6);
            CHECK(rc == MLSYS_ERR_TRUNCATE, "recv of 32 B into 16 B gave %d, want truncation", rc);
            CHECK(strstr(mlsys_errmsg(c), "does not fit") != NULL, "message: %s",
                  mlsys_errmsg(c));
        }
    }

    /* split: odd and even ranks, in reverse order; then halve again */
    mlsys_comm *sub = NULL, *sub2 = NULL;
    int rc = mlsys_split(c, r % 2, -r, &sub);
    CHECK(rc == 0 && sub, "split: %s", mlsys_errmsg(c));
    if (sub) {
        int sr = mlsys_rank(sub), sn = mlsys_size(sub);
        CHECK(sn == (n - r % 2 + 1) / 2, "sub size %d", sn);
        /* reversed: the highest world rank of the colour is sub rank 0 */
        int top = (n - 1) - ((n - 1 - r % 2) % 2);
        CHECK(sr == (top - r) / 2, "sub rank %d for world rank %d", sr, r);
        int me = r, sum = -1;
        CHECK(mlsys_allreduce(sub, &me, &sum, 1, MLSYS_I32, MLSYS_SUM) == 0, "sub allreduce: %s",
              mlsys_errmsg(sub));
        int want = 0;
        for (int k = r % 2; k < n; k += 2)
            want += k;
        CHECK(sum == want, "sub allreduce %d, want %d", sum, want);
        if (sn > 1) {
            int got = -1;
            rc = mlsys_sendrecv(sub, &me, 1, (sr + 1) % sn, 1, &got, 1, (sr + sn - 1) % sn, 1,
                                MLSYS_I32);
            int from = (sr + sn - 1) % sn;          /* sub rank s is world rank top - 2s */
            CHECK(rc == 0 && got == top - 2 * from, "sub ring got %d, want %d", got,
                  top - 2 * from);
        }
        rc = mlsys_split(sub, sr < 2 ? 0 : -1, sr, &sub2);
        CHECK(rc == 0, "nested split: %s", mlsys_errmsg(sub));
        if (sub2) {
            int s = -1;
            CHECK(mlsys_allreduce(sub2, &me, &s, 1, MLSYS_I32, MLSYS_MAX) == 0 && s == top,
                  "nested allreduce max %d, want %d", s, top);
        }
    }
    CHECK(mlsys_barrier(c) == 0, "barrier: %s", mlsys_errmsg(c));
    const mlsys_counters *k = mlsys_get_counters(c);
    CHECK(k->sends > 0 && k->recvs > 0, "counters stayed at 0");
    if (r == 0)
        printf("p2p: %s on %d ranks\n", fails ? "FAILED" : "ok", n);
    return fails ? 1 : 0;
}

/* One native collective, in place or not, checked against reduced()/val(). */
static void native_one(mlsys_comm *c, mlsys_coll coll, mlsys_dtype dt, mlsys_op op,
                       size_t m, int root, int inplace)
{
    int r = mlsys_rank(c), n = mlsys_size(c);
    size_t es = mlsys_dtype_size(dt), tot = m * (size_t)n;
    char *sb = calloc(tot + 1, es), *rb = calloc(tot + 1, es);
    const char *cn = mlsys_coll_name(coll);
    for (size_t i = 0; i < tot; i++)
        put(sb, dt, i, val(r, i));
    coll_args a = {sb, rb, m, dt, op, root};
    switch (coll) {
    case MLSYS_COLL_BROADCAST:
        for (size_t i = 0; i < m; i++)
            put(rb, dt, i, r == root ? val(root, i) : -1);
        a.sendbuf = rb;
        break;
    case MLSYS_COLL_ALLREDUCE: case MLSYS_COLL_ALLTOALL: case MLSYS_COLL_REDUCE:
        if (inplace && (coll != MLSYS_COLL_REDUCE || r == root)) {
            memcpy(rb, sb, (coll == MLSYS_COLL_ALLTOALL ? tot : m) * es);
            a.sendbuf = rb;
        }
        break;
    case MLSYS_COLL_ALLGATHER: case MLSYS_COLL_GATHER:
        if (inplace && (coll == MLSYS_COLL_ALLGATHER || r == root)) {
            for (size_t i = 0; i < m; i++)
                put(rb, dt, (size_t)r * m + i, val(r, i));
            a.sendbuf = rb + (size_t)r * m * es;
        }
        break;
    case MLSYS_COLL_REDUCE_SCATTER: case MLSYS_COLL_SCATTER:
        if (inplace && (coll == MLSYS_COLL_REDUCE_SCATTER || r == root))
            a.recvbuf = sb + (size_t)r * m * es;
        break;
    default:
        break;
    }
    int rc = c->w->tp->native(c, coll, &a);
    int reduction = coll == MLSYS_COLL_REDUCE || coll == MLSYS_COLL_ALLREDUCE ||
                    coll == MLSYS_COLL_REDUCE_SCATTER;
    void *res = a.recvbuf;
    if (!rc && reduction && op == MLSYS_AVG && (coll != MLSYS_COLL_REDUCE || r == root))
        mlsys_scale_avg(res, m, dt, n);      /* what coll_run does after any algorithm */
    CHECK(rc == 0, "native %s: %s", cn, mlsys_errmsg(c));
    size_t bad = 0;
    switch (coll) {
    case MLSYS_COLL_BROADCAST:
        for (size_t i = 0; i < m; i++)
            bad += get(rb, dt, i) != val(root, i);
        break;
    case MLSYS_COLL_REDUCE: case MLSYS_COLL_ALLREDUCE:
        if (coll == MLSYS_COLL_ALLREDUCE || r == root)
            for (size_t i = 0; i < m; i++)
                bad += get(res, dt, i) != reduced(op, n, i, dt);
        break;
    case MLSYS_COLL_REDUCE_SCATTER:
        for (size_t i = 0; i < m; i++)
            bad += get(res, dt, i) != reduced(op, n, (size_t)r * m + i, dt);
        break;
    case MLSYS_COLL_ALLGATHER: case MLSYS_COLL_GATHER:
        if (coll == MLSYS_COLL_ALLGATHER || r == root)
            for (int k = 0; k < n; k++)
                for (size_t i = 0; i < m; i++)
                    bad += get(rb, dt, (size_t)k * m + i) != val(k, i);
        break;
    case MLSYS_COLL_SCATTER:
        for (size_t i = 0; i < m; i++)
            bad += get(res, dt, i) != val(root, (size_t)r * m + i);
        break;
    case MLSYS_COLL_ALLTOALL:
        for (int k = 0; k < n; k++)
            for (size_t i = 0; i < m; i++)
                bad += get(rb, dt, (size_t)k * m + i) != val(k, (size_t)r * m + i);
        break;
    default:
        break;
    }
    CHECK(bad == 0, "native %s %s %s count %zu root %d %s: %zu wrong", cn,
          mlsys_dtype_name(dt), reduction ? mlsys_op_name(op) : "-", m, root,
          inplace ? "in place" : "out of place", bad);
    free(sb);
    free(rb);
}

static void native_all(mlsys_comm *c)
{
    static const size_t counts[] = {1, 7, 1000};
    int n = mlsys_size(c);
    for (int coll = 0; coll < MLSYS_COLL_BARRIER; coll++)
        for (int dt = 0; dt < MLSYS_DTYPE_COUNT; dt++)
            for (size_t k = 0; k < 3; k++)
                for (int ip = 0; ip < 2; ip++) {
                    int reduction = coll == MLSYS_COLL_REDUCE || coll == MLSYS_COLL_ALLREDUCE ||
                                    coll == MLSYS_COLL_REDUCE_SCATTER;
                    int rooted = coll == MLSYS_COLL_BROADCAST || coll == MLSYS_COLL_REDUCE ||
                                 coll == MLSYS_COLL_GATHER || coll == MLSYS_COLL_SCATTER;
                    for (int op = 0; op < (reduction ? MLSYS_OP_COUNT : 1); op++)
                        for (int root = 0; root < (rooted ? 2 : 1); root++)
                            native_one(c, (mlsys_coll)coll, (mlsys_dtype)dt,
                                       reduction ? (mlsys_op)op : MLSYS_OP_NONE, counts[k],
                                       root ? n - 1 : 0, ip);
                }
    coll_args a = {0};
    CHECK(c->w->tp->native(c, MLSYS_COLL_BARRIER, &a) == 0, "native barrier: %s",
          mlsys_errmsg(c));
}

static int native_case(mlsys_comm *c)
{
    int r = mlsys_rank(c), n = mlsys_size(c);
    if (!c->w->tp->native) {
        fprintf(stderr, "rank %d: the transport has no native collectives\n", r);
        return 1;
    }
    native_all(c);
    mlsys_comm *sub = NULL;
    CHECK(mlsys_split(c, r % 2, -r, &sub) == 0 && sub, "split: %s", mlsys_errmsg(c));
    if (sub)
        native_all(sub);
    int took = mlsys_set_algo(c, MLSYS_COLL_ALLREDUCE, "native") == 0;
    if (took) {                          /* the tables know it: through the dispatcher too */
        double me = r + 1, sum = 0;
        CHECK(mlsys_allreduce(c, &me, &sum, 1, MLSYS_F64, MLSYS_AVG) == 0 &&
              sum == (n + 1) / 2.0, "allreduce avg through the dispatcher: %g", sum);
    }
    if (r == 0)
        printf("native: %s on %d ranks (algorithm \"native\" in the tables: %s)\n",
               fails ? "FAILED" : "ok", n, took ? "yes" : "no");
    return fails ? 1 : 0;
}

/* Non-blocking collectives through MPI_Iallreduce / MPI_Ireduce_scatter_block /
 * MPI_Iallgather: every type and operator, in place and not, against val(); 8 in flight
 * waited for in reverse order with p2p and a blocking collective in between; the same on a
 * split communicator; a request left open at finalize. */
static int icoll_one(mlsys_comm *c, int coll, mlsys_dtype dt, mlsys_op op, int inplace,
                     size_t m, mlsys_request **q, char **keep)
{
    int r = mlsys_rank(c), n = mlsys_size(c);
    size_t es = mlsys_dtype_size(dt), in_e = coll == MLSYS_COLL_REDUCE_SCATTER ? m * n : m;
    size_t out_e = coll == MLSYS_COLL_ALLGATHER ? m * n : m;
    size_t big = in_e > out_e ? in_e : out_e;
    char *buf = calloc(big * 2 + 1, es), *in = buf, *out = buf + big * es;
    const char *sb = in;
    char *rb = out;
    if (inplace) {
        sb = rb = in;
        if (coll == MLSYS_COLL_ALLGATHER)
            sb = in + (size_t)r * m * es;
        if (coll == MLSYS_COLL_REDUCE_SCATTER)
            rb = in + (size_t)r * m * es;
    }
    for (size_t i = 0; i < in_e; i++)
        put((char *)sb, dt, i, val(r, coll == MLSYS_COLL_ALLGATHER ? i : i));
    int rc = coll == MLSYS_COLL_ALLREDUCE ? mlsys_iallreduce(c, sb, rb, m, dt, op, q)
             : coll == MLSYS_COLL_REDUCE_SCATTER ? mlsys_ireduce_scatter(c, sb, rb, m, dt, op, q)
             : mlsys_iallgather(c, sb, rb, m, dt, q);
    CHECK(rc == 0, "%s: %s", mlsys_coll_name((mlsys_coll)coll), mlsys_errmsg(c));
    keep[0] = buf;
    keep[1] = rb;
    return rc;
}

static void icoll_verify(mlsys_comm *c, int coll, mlsys_dtype dt, mlsys_op op, int inplace,
                         size_t m, char **keep)
{
    int r = mlsys_rank(c), n = mlsys_size(c);
    size_t out_e = coll == MLSYS_COLL_ALLGATHER ? m * n : m, bad = 0;
    for (size_t i = 0; i < out_e; i++) {
        double want = coll == MLSYS_COLL_ALLGATHER ? val((int)(i / m), i % m)
                      : coll == MLSYS_COLL_REDUCE_SCATTER ? reduced(op, n, (size_t)r * m + i, dt)
                      : reduced(op, n, i, dt);
        bad += get(keep[1], dt, i) != want;
    }
    CHECK(bad == 0, "%s %s %s %s, %zu elements: %zu wrong", mlsys_coll_name((mlsys_coll)coll),
          mlsys_dtype_name(dt), coll == MLSYS_COLL_ALLGATHER ? "-" : mlsys_op_name(op),
          inplace ? "in place" : "out of place", m, bad);
    free(keep[0]);
}

static void icoll_all(mlsys_comm *c)
{
    static const int colls[] = {MLSYS_COLL_ALLREDUCE, MLSYS_COLL_REDUCE_SCATTER,
                                MLSYS_COLL_ALLGATHER};
    for (int k = 0; k < 3; k++)
        for (int dt = 0; dt < MLSYS_DTYPE_COUNT; dt++)
            for (int op = 0; op < MLSYS_OP_COUNT; op++)
                for (int ip = 0; ip < 2; ip++) {
                    if (colls[k] == MLSYS_COLL_ALLGATHER && op)
                        continue;
                    mlsys_request *q = NULL;
                    char *keep[2];
                    size_t m = 1 + (size_t)(dt * 37 + op * 11 + ip);
                    if (icoll_one(c, colls[k], (mlsys_dtype)dt, (mlsys_op)op, ip, m, &q, keep)) {
                        free(keep[0]);
                        continue;
                    }
                    CHECK(mlsys_wait(q) == 0, "wait: %s", mlsys_errmsg(c));
                    icoll_verify(c, colls[k], (mlsys_dtype)dt, (mlsys_op)op, ip, m, keep);
                }
}

static int icoll_case(mlsys_comm *c)
{
    int r = mlsys_rank(c), n = mlsys_size(c);
    icoll_all(c);
    /* eight in flight, waited for in reverse order, p2p and a blocking one in between */
    mlsys_request *q[8];
    char *keep[8][2];
    int coll_of[8];
    size_t m_of[8];
    for (int i = 0; i < 8; i++) {
        coll_of[i] = i % 3 == 0 ? MLSYS_COLL_ALLREDUCE : i % 3 == 1 ? MLSYS_COLL_REDUCE_SCATTER
                                                                    : MLSYS_COLL_ALLGATHER;
        m_of[i] = i == 7 ? 300000 : (size_t)(5 + i);
        if (icoll_one(c, coll_of[i], MLSYS_F64, MLSYS_SUM, i % 2, m_of[i], &q[i], keep[i])) {
            free(keep[i][0]);
            return 1;
        }
    }
    int out = r, in = -1;
    CHECK(mlsys_sendrecv(c, &out, 1, (r + 1) % n, 6, &in, 1, (r + n - 1) % n, 6, MLSYS_I32) == 0
          && in == (r + n - 1) % n, "sendrecv with collectives in flight: %s", mlsys_errmsg(c));
    double one = 1, all = 0;
    CHECK(mlsys_allreduce(c, &one, &all, 1, MLSYS_F64, MLSYS_SUM) == 0 && all == n,
          "blocking all-reduce with collectives in flight: %g", all);
    for (int i = 7; i >= 0; i--) {
        CHECK(mlsys_wait(q[i]) == 0, "wait %d: %s", i, mlsys_errmsg(c));
        icoll_verify(c, coll_of[i], MLSYS_F64, MLSYS_SUM, i % 2, m_of[i], keep[i]);
    }
    mlsys_comm *sub = NULL;
    CHECK(mlsys_split(c, r % 2, r, &sub) == 0 && sub, "split: %s", mlsys_errmsg(c));
    if (sub)
        icoll_all(sub);
    /* one left open: finalize must complete it, not crash */
    static double lonely[64];
    mlsys_request *open_req = NULL;
    CHECK(mlsys_iallreduce(c, lonely, lonely, 64, MLSYS_F64, MLSYS_MAX, &open_req) == 0,
          "open one: %s", mlsys_errmsg(c));
    if (r == 0)
        printf("icoll: %s on %d ranks\n", fails ? "FAILED" : "ok", n);
    return fails ? 1 : 0;
}

static int deadlock_case(mlsys_comm *c)
{
    int r = mlsys_rank(c);
    float x = (float)r, y = 0;
    int rc = mlsys_send(c, &x, 1, MLSYS_F32, 1 - r, 5);     /* both send first */
    if (rc == 0)
        rc = mlsys_recv(c, &y, 1, MLSYS_F32, 1 - r, 5);
    if (rc)
        fprintf(stderr, "rank %d: %s\n", r, mlsys_errmsg(c));
    return rc == MLSYS_ERR_TIMEOUT ? 1 : 0;
}

static int fail_case(mlsys_comm *c)
{
    int r = mlsys_rank(c);
    mlsys_barrier(c);
    if (r == 1)
        return 3;                                   /* rank 1 fails ... */
    float x;
    int rc = mlsys_recv(c, &x, 1, MLSYS_F32, 1, 9);  /* ... while rank 0 waits for it */
    fprintf(stderr, "rank %d: recv returned %d (it should have been stopped)\n", r, rc);
    return 0;
}

/* Exactly k compute spans (2k events) and k ring messages (4k events) per rank. */
static int events_case(mlsys_comm *c, int k)
{
    int r = mlsys_rank(c), n = mlsys_size(c);
    if (!mlsys_tracing(c)) {
        fprintf(stderr, "rank %d: tracing is off (MLSYS_EVENTS_ADDR not set)\n", r);
        return 1;
    }
    for (int i = 0; i < k; i++) {
        mlsys_compute_begin(c, "work");
        mlsys_compute_end(c, "work");
        int out = i, in = -1;
        if (mlsys_sendrecv(c, &out, 1, (r + 1) % n, 2, &in, 1, (r + n - 1) % n, 2, MLSYS_I32) ||
            in != i) {
            fprintf(stderr, "rank %d: ring message %d: %s\n", r, i, mlsys_errmsg(c));
            return 1;
        }
    }
    return 0;
}

/* k memory and k flow records per rank, every field from (rank, i): the runner checks them. */
static void typed_of(int r, int n, int i, mlsys_mem_info *m, mlsys_flow_info *f)
{
    *m = (mlsys_mem_info){(int16_t)r, (int8_t)(i % MLSYS_MEM_OP_COUNT), (uint8_t)(i & 1), i,
                          r * 1000 + i, i % 7, i % 5, -i};
    *f = (mlsys_flow_info){(int16_t)r, (int16_t)((r + 1) % n), (int16_t)(i % MLSYS_FLOW_WHAT_COUNT),
                           (int16_t)(i % 5), i, r, 3 * i, 0};
}

static int typed_case(mlsys_comm *c, int k)
{
    int r = mlsys_rank(c), n = mlsys_size(c);
    if (!mlsys_tracing(c)) {
        fprintf(stderr, "rank %d: tracing is off (MLSYS_EVENTS_ADDR not set)\n", r);
        return 1;
    }
    for (int i = 0; i < k; i++) {
        mlsys_mem_info m;
        mlsys_flow_info f;
        typed_of(r, n, i, &m, &f);
        char lb[16];
        snprintf(lb, sizeof lb, "m%d", i);
        mlsys_emit_mem_value(c, &m, (uint64_t)i * 8, lb, i + 0.5 * r);
        mlsys_emit_flow_value(c, &f, (uint64_t)i * 16, NULL, -i - 0.25 * r);
    }
    return mlsys_barrier(c);
}

static int rank_main(const char *mode, int k)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    mlsys_comm *c = mlsys_init();
    if (!c)
        return 2;
    int rc = 2;
    if (!strcmp(mode, "p2p"))
        rc = p2p_case(c);
    else if (!strcmp(mode, "native"))
        rc = native_case(c);
    else if (!strcmp(mode, "icoll"))
        rc = icoll_case(c);
    else if (!strcmp(mode, "deadlock"))
        rc = deadlock_case(c);
    else if (!strcmp(mode, "fail"))
        rc = fail_case(c);
    else if (!strcmp(mode, "events"))
        rc = events_case(c, k);
    else if (!strcmp(mode, "typed"))
        rc = typed_case(c, k);
    fflush(stdout);
    mlsys_finalize(c);
    return rc;
}

/* ---- runner side ---- */

static uint64_t g_events, g_typed_ok, g_typed_bad;
static int g_ranks_seen[64], g_world;

/* A memory or flow record against the one typed_case sent: every field. */
static void check_typed(const mlsys_event *e)
{
    mlsys_mem_info m;
    mlsys_flow_info f;
    int i = e->kind == MLSYS_EV_MEM ? e->mem.block : e->flow.count;
    typed_of(e->rank, g_world, i, &m, &f);
    char lb[16];
    snprintf(lb, sizeof lb, "m%d", i);
    int ok = e->kind == MLSYS_EV_MEM
             ? !memcmp(&e->mem, &m, sizeof m) && e->bytes == (uint64_t)i * 8 &&
               e->val[0] == i + 0.5 * e->rank && !strcmp(e->label, lb)
             : !memcmp(&e->flow, &f, sizeof f) && e->bytes == (uint64_t)i * 16 &&
               e->val[0] == -i - 0.25 * e->rank && !e->label[0];
    if (ok)
        g_typed_ok++;
    else
        g_typed_bad++;
}

static void count_events(void *u, const mlsys_event *ev, size_t n)
{
    (void)u;
    g_events += n;
    for (size_t i = 0; i < n; i++) {
        if (ev[i].rank >= 0 && ev[i].rank < 64)
            g_ranks_seen[ev[i].rank] = 1;
        if (ev[i].kind == MLSYS_EV_MEM || ev[i].kind == MLSYS_EV_FLOW)
            check_typed(&ev[i]);
    }
}

/* Connect to the collector and say hello with a wrong token (or not even the magic). */
static void rogue(const char *addr, int bad_magic)
{
    char host[64];
    const char *colon = strrchr(addr, ':');
    snprintf(host, sizeof host, "%.*s", (int)(colon - addr), addr);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(colon + 1))};
    inet_pton(AF_INET, host, &sa.sin_addr);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        perror("rogue: connect");
        return;
    }
    net_ev_hello h;
    memset(&h, 0, sizeof h);
    memcpy(h.magic, bad_magic ? "GET / HT" : NET_EV_MAGIC, sizeof h.magic);
    h.version = NET_EV_VERSION;
    h.size = 2;
    memset(h.token, 'a', sizeof h.token);
    if (send(fd, &h, sizeof h, MSG_NOSIGNAL) != (ssize_t)sizeof h)
        perror("rogue: send");
    struct pollfd p = {.fd = fd, .events = POLLIN};
    char ack = 0;
    /* the collector reads the hello when the runner pumps: wait here in the background */
    if (fork() == 0) {
        int got = poll(&p, 1, 5000) == 1 ? (int)recv(fd, &ack, 1, 0) : -1;
        printf("rogue%s: %s\n", bad_magic ? " (bad magic)" : "",
               got == 0 ? "closed without an ack" : got == 1 ? "GOT AN ACK" : "no answer");
        fflush(stdout);
        _exit(0);
    }
    close(fd);
}

static int job_main(int argc, char **argv)
{
    const char *mode = argv[2];
    int n = atoi(argv[3]);
    int events = argc > 4 && (!strcmp(argv[4], "events") || !strcmp(argv[4], "rogue"));
    g_world = n;
    int rogues = argc > 4 && !strcmp(argv[4], "rogue");
    char k[16] = "0";
    if (argc > 5)
        snprintf(k, sizeof k, "%s", argv[5]);
    char self[4096], err[512], why[300];
    ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
    self[len < 0 ? 0 : len] = 0;
    mpirun_opts o = {.world_size = n, .events = events, .verbose = getenv("V") != NULL};
    const char *t = getenv("MLSYS_TIMEOUT_MS");
    o.timeout_ms = t ? atoi(t) : 30000;
    char *args[] = {"rank", (char *)mode, k, NULL};
    uint64_t t0 = mlsys_now_ns();
    mpirun_job *j = mpirun_start(&o, self, args, err, sizeof err);
    if (!j) {
        fprintf(stderr, "cases: %s\n", err);
        return 2;
    }
    if (rogues) {
        rogue(mpirun_events_addr(j), 0);
        rogue(mpirun_events_addr(j), 1);
    }
    mlsys_job_install_signal_stop();
    mlsys_job_sink sink = {NULL, count_events, NULL};
    int rc = mpirun_wait(j, &sink, -1, why, sizeof why);
    char inc[128];
    int ninc = mpirun_events_incomplete(j, inc, sizeof inc);
    int seen = 0;
    for (int r = 0; r < 64; r++)
        seen += g_ranks_seen[r];
    printf("job: rc=%d status=%d failed_rank=%d seconds=%.1f\n", rc, mpirun_exit_status(j),
           mpirun_failed_rank(j), (double)(mlsys_now_ns() - t0) * 1e-9);
    printf("why: %s\n", why);
    if (events)
        printf("events: %llu from %d ranks, lost %llu, refused %d, incomplete %d%s%s\n",
               (unsigned long long)g_events, seen, (unsigned long long)mpirun_events_lost(j),
               mpirun_events_refused(j), ninc, ninc ? ": " : "", inc);
    if (g_typed_ok || g_typed_bad)
        printf("typed: %llu intact, %llu wrong\n", (unsigned long long)g_typed_ok,
               (unsigned long long)g_typed_bad);
    mpirun_free(j);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc >= 3 && !strcmp(argv[1], "rank"))
        return rank_main(argv[2], argc > 3 ? atoi(argv[3]) : 0);
    if (argc >= 4 && !strcmp(argv[1], "job"))
        return job_main(argc, argv);
    fprintf(stderr, "usage: cases job MODE N [events|rogue [K]] | cases rank MODE [K]\n");
    return 2;
}
