/* test_stepmodel.c - the front end's step model (lab/ui/stepmodel.c) fed with the events of
 * real jobs on 3, 4 and 5 ranks: after every step of every collective each rank's chunks
 * must hold what the algorithm's table says (whose data, and the values), the frames must
 * count the gates (one per mlsys_step), and the chain relay must step hop by hop with the
 * values it carries. The ring view's frames drawn from the model are in test_views.c. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../../lab/ui/stepmodel.h"
#include "../../lab/ui/views/view.h"
#include "../../core/trace_values.h"

/* ---- a real job, its events kept ---- */

typedef struct tape {
    mlsys_event *e;
    size_t n, cap;
} tape;

static void keep(void *u, const mlsys_event *ev, size_t n)
{
    tape *t = u;
    for (size_t i = 0; i < n; i++) {
        if (t->n == t->cap) {
            t->cap = t->cap ? t->cap * 2 : 1024;
            t->e = realloc(t->e, t->cap * sizeof *t->e);
        }
        t->e[t->n++] = ev[i];
    }
}

static int by_time(const void *a, const void *b)
{
    const mlsys_event *x = a, *y = b;
    return x->t_ns < y->t_ns ? -1 : x->t_ns > y->t_ns;
}

typedef struct job_arg {
    int coll;
    const char *algo;
    int count;              /* per rank for the blocked collectives */
    int root;
} job_arg;

static int coll_rank(mlsys_comm *c, void *arg)
{
    const job_arg *a = arg;
    int r = mlsys_rank(c), n = mlsys_size(c), rc = 0;
    if (a->algo)
        mlsys_set_algo(c, (mlsys_coll)a->coll, a->algo);
    int tot = a->count * n;
    float *in = calloc((size_t)tot, sizeof *in), *out = calloc((size_t)tot, sizeof *out);
    for (int i = 0; i < tot; i++)
        in[i] = (float)(10 * r + i);       /* rank r, element i: distinct and exact */
    switch (a->coll) {
    case MLSYS_COLL_ALLREDUCE: rc = mlsys_allreduce(c, in, out, (size_t)a->count, MLSYS_F32, MLSYS_SUM); break;
    case MLSYS_COLL_ALLGATHER: rc = mlsys_allgather(c, in, out, (size_t)a->count, MLSYS_F32); break;
    case MLSYS_COLL_REDUCE_SCATTER:
        rc = mlsys_reduce_scatter(c, in, out, (size_t)a->count, MLSYS_F32, MLSYS_SUM);
        break;
    case MLSYS_COLL_BROADCAST: rc = mlsys_broadcast(c, in, (size_t)a->count, MLSYS_F32, a->root); break;
    case MLSYS_COLL_REDUCE:
        rc = mlsys_reduce(c, in, out, (size_t)a->count, MLSYS_F32, MLSYS_SUM, a->root);
        break;
    case MLSYS_COLL_BARRIER: rc = mlsys_barrier(c); break;
    default: rc = -1;
    }
    free(in);
    free(out);
    return rc;
}

/* The chain relay of ch02/send-recv-basic, one gate per hop. */
static int relay_rank(mlsys_comm *c, void *arg)
{
    (void)arg;
    int r = mlsys_rank(c), n = mlsys_size(c), rc = 0;
    float v = 0;
    for (int h = 0; h < n - 1 && !rc; h++) {
        if ((rc = mlsys_step(c, h, "relay")))
            break;
        if (h == r - 1) {
            rc = mlsys_recv(c, &v, 1, MLSYS_F32, r - 1, 5);
            v += r < n - 1 ? 10.0f : 0.0f;
            double d = v;
            mlsys_emit_values(c, h, &d, 1);
        }
        if (h == r && !rc) {
            if (r == 0) {
                v = 42.0f;
                double d = v;
                mlsys_emit_values(c, h, &d, 1);
            }
            rc = mlsys_send(c, &v, 1, MLSYS_F32, r + 1, 5);
        }
    }
    return rc;
}

static stepmodel *run_model(int n, int (*fn)(mlsys_comm *, void *), void *arg)
{
    mlsys_launch_opts o = {.world_size = n, .timeout_ms = 10000, .trace_capacity = 8192};
    char err[256];
    mlsys_job *j = mlsys_job_start(&o, NULL, fn, arg, err, sizeof err);
    ck_assert_msg(j != NULL, "%s", err);
    tape t = {0};
    mlsys_job_sink sink = {NULL, keep, &t};
    int rc;
    while ((rc = mlsys_job_wait(j, &sink, 50, err, sizeof err)) == 1)
        ;
    ck_assert_msg(rc == 0, "job: %s", err);
    ck_assert_int_eq(mlsys_job_events_lost(j), 0);
    mlsys_job_free(j);
    qsort(t.e, t.n, sizeof *t.e, by_time);
    stepmodel *m = sm_create();
    sm_reset(m, n);
    for (size_t i = 0; i < t.n; i++)
        sm_event(m, &t.e[i]);
    sm_finish(m);
    free(t.e);
    return m;
}

static uint64_t bit(int r) { return 1ull << r; }
static uint64_t all(int n) { return (1ull << n) - 1; }

/* The frames of call 0, in order: [first, first + steps). */
static int call_frames(const stepmodel *m, int *first)
{
    const sm_call *c = sm_call_at(m, 0);
    ck_assert_ptr_nonnull(c);
    *first = c->first_frame;
    ck_assert_int_ge(*first, 1);
    return sm_call_steps(m, 0);
}

/* Ring all-reduce of n chunks (one element each): the table of core/coll/allreduce.c. */
START_TEST(ring_allreduce_table)
{
    for (int n = 3; n <= 5; n++) {
        job_arg a = {MLSYS_COLL_ALLREDUCE, "ring", n, 0};
        stepmodel *m = run_model(n, coll_rank, &a);
        int f0, steps = call_frames(m, &f0);
        ck_assert_int_eq(steps, 2 * (n - 1));
        ck_assert_int_eq(sm_nframes(m), 1 + steps);
        for (int s = 0; s < steps; s++) {
            const sm_frame *f = sm_frame_at(m, f0 + s);
            ck_assert_int_eq(f->step, s);
            ck_assert_int_eq(f->nsend, n);
            for (int r = 0; r < n; r++) {
                const sm_cell *c = sm_cells(m, f0 + s, r);
                ck_assert_ptr_nonnull(c);
                for (int ch = 0; ch < n; ch++) {
                    /* independent: who has contributed to chunk ch at rank r after step s */
                    uint64_t want = bit(r);
                    int dist = ((r - ch) % n + n) % n;     /* ch reached r after dist hops */
                    int rs = s < n - 1 ? s : n - 2;
                    if (dist >= 1 && dist - 1 <= rs)
                        for (int j = 0; j <= dist; j++)
                            want |= bit(((r - j) % n + n) % n);
                    if (s >= n - 1 && dist <= s - (n - 1))
                        want = all(n);
                    ck_assert_msg(c[ch].mask == want, "n %d step %d rank %d chunk %d: mask %llx "
                                  "want %llx", n, s, r, ch, (unsigned long long)c[ch].mask,
                                  (unsigned long long)want);
                    /* values: sum over the contributors of 10 * s + ch */
                    double v = 0;
                    for (int q = 0; q < n; q++)
                        if (want >> q & 1)
                            v += 10.0 * q + ch;
                    ck_assert_msg(c[ch].has_val && c[ch].val == v, "n %d step %d rank %d "
                                  "chunk %d: value %g want %g", n, s, r, ch, c[ch].val, v);
                }
            }
            /* in each step rank r sends exactly one chunk to r + 1 */
            for (int i = 0; i < f->nsend; i++) {
                const sm_send *sd = sm_frame_send(m, f0 + s, i);
                ck_assert_int_eq(sd->dst, (sd->src + 1) % n);
                ck_assert_int_eq(__builtin_popcountll(sd->chunks), 1);
            }
        }
        sm_free(m);
    }
}
END_TEST

START_TEST(allgather_reduce_scatter_broadcast_reduce)
{
    for (int n = 3; n <= 5; n++) {
        /* all_gather ring, 2 elements per rank: after step s rank r holds blocks r-s-1..r */
        job_arg a = {MLSYS_COLL_ALLGATHER, "ring", 2, 0};
        stepmodel *m = run_model(n, coll_rank, &a);
        int f0, steps = call_frames(m, &f0);
        ck_assert_int_eq(steps, n - 1);
        for (int s = 0; s < steps; s++)
            for (int r = 0; r < n; r++) {
                const sm_cell *c = sm_cells(m, f0 + s, r);
                for (int b = 0; b < n; b++) {
                    int dist = ((r - b) % n + n) % n, has = dist <= s + 1;
                    ck_assert_uint_eq(c[b].mask, has ? bit(b) : 0);
                    if (has)
                        ck_assert(c[b].has_val && c[b].val == 10.0 * b);
                }
            }
        sm_free(m);
        /* reduce_scatter ring: rank r ends with block r summed over all ranks */
        job_arg rs = {MLSYS_COLL_REDUCE_SCATTER, "ring", 1, 0};
        m = run_model(n, coll_rank, &rs);
        steps = call_frames(m, &f0);
        ck_assert_int_eq(steps, n - 1);
        for (int r = 0; r < n; r++) {
            const sm_cell *c = sm_cells(m, f0 + steps - 1, r);
            double v = 0;
            for (int q = 0; q < n; q++)
                v += 10.0 * q + r;
            ck_assert_uint_eq(c[r].mask, all(n));
            ck_assert(c[r].val == v);
        }
        sm_free(m);
        /* broadcast tree from root 1: at the end every rank holds rank 1's data */
        job_arg bc = {MLSYS_COLL_BROADCAST, "tree", n, 1};
        m = run_model(n, coll_rank, &bc);
        steps = call_frames(m, &f0);
        for (int r = 0; r < n; r++) {
            const sm_cell *c = sm_cells(m, f0 + steps - 1, r);
            for (int ch = 0; ch < n; ch++) {
                ck_assert_uint_eq(c[ch].mask, bit(1));
                ck_assert(c[ch].val == 10.0 + ch);
            }
        }
        /* and the first step of the tree moves data from the root only */
        const sm_send *sd = sm_frame_send(m, f0, 0);
        ck_assert_int_eq(sd->src, 1);
        sm_free(m);
        /* reduce tree to root 0: the root ends with every rank's data summed */
        job_arg rd = {MLSYS_COLL_REDUCE, "tree", n, 0};
        m = run_model(n, coll_rank, &rd);
        steps = call_frames(m, &f0);
        const sm_cell *c = sm_cells(m, f0 + steps - 1, 0);
        for (int ch = 0; ch < n; ch++) {
            double v = 0;
            for (int q = 0; q < n; q++)
                v += 10.0 * q + ch;
            ck_assert_uint_eq(c[ch].mask, all(n));
            ck_assert(c[ch].val == v);
        }
        sm_free(m);
    }
}
END_TEST

START_TEST(barrier_and_relay)
{
    for (int n = 3; n <= 5; n++) {
        job_arg b = {MLSYS_COLL_BARRIER, NULL, 0, 0};
        stepmodel *m = run_model(n, coll_rank, &b);
        int f0;
        call_frames(m, &f0);
        const sm_frame *f = sm_frame_at(m, f0);
        ck_assert_int_eq(f->data_call, -1);          /* a barrier moves no data */
        ck_assert_ptr_null(sm_cells(m, f0, 0));
        sm_free(m);
        /* the chain relay: one frame per hop, one message each, the value it carries */
        m = run_model(n, relay_rank, NULL);
        ck_assert_int_eq(sm_nframes(m), n);          /* frame 0 plus n - 1 hops */
        for (int h = 0; h < n - 1; h++) {
            f = sm_frame_at(m, h + 1);
            ck_assert_int_eq(f->nsend, 1);
            const sm_send *sd = sm_frame_send(m, h + 1, 0);
            ck_assert_int_eq(sd->src, h);
            ck_assert_int_eq(sd->dst, h + 1);
            ck_assert(sd->has_val && sd->val == 42.0 + 10.0 * h);
            double v;
            ck_assert(sm_p2p_value(m, h + 1, h + 1, &v));
            ck_assert(v == (h + 1 < n - 1 ? 52.0 + 10.0 * h : 42.0 + 10.0 * h));
        }
        sm_free(m);
    }
}
END_TEST

START_TEST(mask_text)
{
    char t[32];
    sm_mask_text(0, 4, 5, 0, t, sizeof t);
    ck_assert_str_eq(t, "·");
    sm_mask_text(0, 4, 5, 1, t, sizeof t);
    ck_assert_str_eq(t, ".");
    sm_mask_text(bit(0) | bit(3), 4, 5, 0, t, sizeof t);
    ck_assert_str_eq(t, "0+3");
    sm_mask_text(all(4), 4, 5, 0, t, sizeof t);
    ck_assert_str_eq(t, "all");
    sm_mask_text(bit(0) | bit(1) | bit(2), 5, 5, 0, t, sizeof t);
    ck_assert_str_eq(t, "0+1+2");
    sm_mask_text(bit(0) | bit(1) | bit(2), 5, 3, 0, t, sizeof t);
    ck_assert_str_eq(t, "3/5");
}
END_TEST

static Suite *stepmodel_suite(void)
{
    Suite *s = suite_create("stepmodel");
    TCase *t = tcase_create("frames");
    tcase_set_timeout(t, 60);
    tcase_add_test(t, ring_allreduce_table);
    tcase_add_test(t, allgather_reduce_scatter_broadcast_reduce);
    tcase_add_test(t, barrier_and_relay);
    tcase_add_test(t, mask_text);
    suite_add_tcase(s, t);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(stepmodel_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
