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
    int nonblocking;        /* all_reduce: mlsys_iallreduce + wait */
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
    case MLSYS_COLL_ALLREDUCE:
        if (a->nonblocking) {           /* on the progress thread, as DDP's buckets */
            mlsys_request *q = NULL;
            rc = mlsys_iallreduce(c, in, out, (size_t)a->count, MLSYS_F32, MLSYS_SUM, &q);
            if (!rc)
                rc = mlsys_wait(q);
        } else {
            rc = mlsys_allreduce(c, in, out, (size_t)a->count, MLSYS_F32, MLSYS_SUM);
        }
        break;
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

static const char *user_algo;      /* --algo for the next job (MLSYS_ALGO), NULL none */

static stepmodel *run_model(int n, int (*fn)(mlsys_comm *, void *), void *arg)
{
    mlsys_launch_opts o = {.world_size = n, .timeout_ms = 10000, .trace_capacity = 8192,
                           .algo = user_algo};
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

/* Ring all-reduce of n chunks (one element each): the table of core/coll/allreduce.c; the
 * same for the non-blocking one (DDP's buckets) that the progress thread runs. */
START_TEST(ring_allreduce_table)
{
    for (int n = 3; n <= 5 + 3; n++) {
        int nb = n > 5;
        if (nb)
            n -= 3;
        job_arg a = {MLSYS_COLL_ALLREDUCE, "ring", n, 0, nb};
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
        ck_assert_int_eq(sm_call_at(m, 0)->async, nb);
        ck_assert_str_eq(sm_call_at(m, 0)->algo, "ring");
        sm_free(m);
        if (nb)
            n += 3;
    }
}
END_TEST

START_TEST(allgather_reduce_scatter_broadcast_reduce)
{
    for (int n = 3; n <= 5; n++) {
        /* all_gather ring, 2 elements per rank: after step s rank r holds blocks r-s-1..r */
        job_arg a = {MLSYS_COLL_ALLGATHER, "ring", 2, 0, 0};
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
        job_arg rs = {MLSYS_COLL_REDUCE_SCATTER, "ring", 1, 0, 0};
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
        job_arg bc = {MLSYS_COLL_BROADCAST, "tree", n, 1, 0};
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
        job_arg rd = {MLSYS_COLL_REDUCE, "tree", n, 0, 0};
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
        job_arg b = {MLSYS_COLL_BARRIER, NULL, 0, 0, 0};
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

/* ---- the tape: every event and line in its frame, fed to a view up to any frame ---- */

typedef struct fedlog {
    char text[64][24];          /* what was fed, in order: "e r<rank> f<frame> <label>" */
    int n, rewinds;
} fedlog;

static void fl_rewind(void *u)
{
    fedlog *l = u;
    l->n = 0;
    l->rewinds++;
}

static void fl_event(void *u, const mlsys_event *e, int f)
{
    fedlog *l = u;
    if (l->n < 64)
        snprintf(l->text[l->n++], sizeof l->text[0], "e%d f%d %.8s", e->rank, f, e->label);
}

static void fl_line(void *u, int rank, int is_err, const char *text)
{
    fedlog *l = u;
    (void)is_err;
    if (l->n < 64)
        snprintf(l->text[l->n++], sizeof l->text[0], "l%d %.12s", rank, text);
}

static mlsys_event mark(int rank, int kind, const char *label, uint64_t *t)
{
    mlsys_event e;
    memset(&e, 0, sizeof e);
    e.kind = (int16_t)kind;
    e.rank = rank;
    e.t_ns = *t += 10;
    e.coll = e.algo = e.op = -1;
    e.peer = e.tag = e.step = e.chunk = e.dtype = -1;
    snprintf(e.label, sizeof e.label, "%s", label);
    return e;
}

/* Rank 0 runs two steps ahead of rank 1; lines come in between. A consumer brought to frame
 * k has seen exactly the items of frames <= k, each rank's in order, whether it got there
 * step by step, in one go, or after going back. */
START_TEST(tape_sync_any_frame)
{
    stepmodel *m = sm_create();
    sm_reset(m, 2);
    uint64_t t = 0;
    mlsys_event e;
    e = mark(0, MLSYS_EV_MARK, "a0", &t); sm_event(m, &e);
    e = mark(1, MLSYS_EV_MARK, "b0", &t); sm_event(m, &e);
    sm_line(m, 0, 0, "rank 0 says");
    for (int k = 0; k < 3; k++) {                   /* rank 0: steps 0 1 2 with a mark each */
        e = mark(0, MLSYS_EV_STEP, "s", &t); e.step = k; sm_event(m, &e);
        char lb[16];
        snprintf(lb, sizeof lb, "a%d", k + 1);
        e = mark(0, MLSYS_EV_MARK, lb, &t); sm_event(m, &e);
    }
    sm_line(m, 1, 0, "rank 1 says");               /* rank 1 is still in frame 0 */
    e = mark(1, MLSYS_EV_STEP, "s", &t); e.step = 0; sm_event(m, &e);
    e = mark(1, MLSYS_EV_MARK, "b1", &t); sm_event(m, &e);
    sm_line(m, -1, 0, "runner");                    /* the runner's: the newest frame (3) */
    ck_assert_int_eq(sm_nframes(m), 4);
    ck_assert_int_eq(sm_ncomplete(m), 1);           /* only frame 0: rank 1 is in frame 1 */
    /* independent expectation for each frame: the items whose frame is <= k */
    static const char *const items[][2] = {
        {"e0 f0 a0", "0"}, {"e1 f0 b0", "0"}, {"l0 rank 0 says", "0"},
        {"e0 f1 s", "1"}, {"e0 f1 a1", "1"}, {"e0 f2 s", "2"}, {"e0 f2 a2", "2"},
        {"e0 f3 s", "3"}, {"e0 f3 a3", "3"}, {"l1 rank 1 says", "0"}, {"e1 f1 s", "1"},
        {"e1 f1 b1", "1"}, {"l-1 runner", "3"},
    };
    int nitems = (int)(sizeof items / sizeof items[0]);
    fedlog step_by_step = {0}, fresh = {0};
    sm_cursor c1, c2;
    sm_cursor_init(&c1);
    sm_sink s1 = {fl_rewind, fl_event, fl_line, &step_by_step};
    sm_sink s2 = {fl_rewind, fl_event, fl_line, &fresh};
    for (int k = 0; k <= 3; k++) {
        sm_sync(m, &c1, k, &s1);
        sm_cursor_init(&c2);
        fresh.n = 0;
        sm_sync(m, &c2, k, &s2);
        sm_cursor_fini(&c2);
        /* the same set: count and membership */
        int want = 0;
        for (int i = 0; i < nitems; i++)
            want += atoi(items[i][1]) <= k;
        ck_assert_int_eq(step_by_step.n, want);
        ck_assert_int_eq(fresh.n, want);
        for (int i = 0; i < nitems; i++) {
            int in1 = 0, in2 = 0;
            for (int j = 0; j < want; j++) {
                in1 |= !strcmp(step_by_step.text[j], items[i][0]);
                in2 |= !strcmp(fresh.text[j], items[i][0]);
            }
            ck_assert_msg(in1 == (atoi(items[i][1]) <= k) && in2 == in1, "frame %d: %s", k,
                          items[i][0]);
        }
        /* each rank's own items in their order: a0 before a1 before a2 ... */
        const char *prev = "";
        for (int j = 0; j < step_by_step.n; j++)
            if (!strncmp(step_by_step.text[j], "e0", 2) && strstr(step_by_step.text[j], " a")) {
                ck_assert_msg(strcmp(prev, step_by_step.text[j] + 6) < 0, "%s after %s",
                              step_by_step.text[j], prev);
                prev = step_by_step.text[j] + 6;
            }
    }
    ck_assert_int_eq(step_by_step.rewinds, 0);
    /* back to frame 1: rewound and fed again from the start */
    sm_sync(m, &c1, 1, &s1);
    ck_assert_int_eq(step_by_step.rewinds, 1);
    ck_assert_int_eq(step_by_step.n, 8);
    sm_cursor_fini(&c1);
    /* a filter keeps what a view reads off the tape, but the model still reads it all */
    sm_reset(m, 1);
    sm_set_keep(m, NULL, NULL);
    size_t before = sm_tape_len(m);
    e = mark(0, MLSYS_EV_STEP, "s", &t); e.step = 0; sm_event(m, &e);
    ck_assert_uint_eq(sm_tape_len(m), before + 1);
    sm_free(m);
}
END_TEST

static int keep_none(void *u, const mlsys_event *e)
{
    (void)u;
    (void)e;
    return 0;
}

START_TEST(tape_filter)
{
    stepmodel *m = sm_create();
    sm_set_keep(m, keep_none, NULL);
    sm_reset(m, 1);
    uint64_t t = 0;
    mlsys_event e = mark(0, MLSYS_EV_STEP, "s", &t);
    e.step = 0;
    sm_event(m, &e);
    e = mark(0, MLSYS_EV_MARK, "x", &t);
    sm_event(m, &e);
    ck_assert_uint_eq(sm_tape_len(m), 0);           /* nobody reads them: not kept */
    ck_assert_int_eq(sm_nframes(m), 2);             /* but the step opened its frame */
    sm_line(m, 0, 0, "a line is always kept");
    ck_assert_uint_eq(sm_tape_len(m), 1);
    sm_free(m);
}
END_TEST

/* ---- who chose the algorithm, as the run and its replays say ---- */

static int rs_rank(mlsys_comm *c, void *arg)
{
    (void)arg;
    float x[8] = {1, 2, 3, 4, 5, 6, 7, 8}, y[8];
    return mlsys_allreduce(c, x, y, 8, MLSYS_F32, MLSYS_SUM) ||
           mlsys_scatter(c, x, y, 2, MLSYS_F32, 0);
}

START_TEST(who_chose_the_algorithm)
{
    char t[300];
    /* the lab (mlsys_set_algo) */
    job_arg a = {MLSYS_COLL_ALLREDUCE, "ring", 4, 0, 0};
    stepmodel *m = run_model(4, coll_rank, &a);
    ck_assert_int_eq(sm_call_why(m, 0, t, sizeof t), 0);
    ck_assert_msg(!strcmp(t, "why: the lab chose ring"), "%s", t);
    sm_free(m);
    /* the rule */
    m = run_model(4, rs_rank, NULL);
    ck_assert_int_eq(sm_call_why(m, 0, t, sizeof t), 0);
    ck_assert_msg(strstr(t, "why: < 64 KiB: recursive_doubling"), "%s", t);
    sm_free(m);
    /* the learner (--algo: MLSYS_ALGO) */
    user_algo = "ring";
    m = run_model(4, rs_rank, NULL);
    user_algo = NULL;
    ck_assert_int_eq(sm_call_why(m, 0, t, sizeof t), 0);
    ck_assert_msg(!strcmp(t, "why: you chose ring (--algo)"), "%s", t);
    /* scatter has no ring: its rule chose, and it is not said to be the learner's */
    ck_assert_int_eq(sm_call_why(m, 1, t, sizeof t), 0);
    ck_assert_msg(strstr(t, "scatter has no algorithm of the name you chose, so its rule "
                            "chose"), "%s", t);
    sm_free(m);
    /* the learner's choice does not fit: what ran instead */
    user_algo = "recursive_doubling";             /* all_gather's needs a power of two */
    job_arg ag = {MLSYS_COLL_ALLGATHER, NULL, 2, 0, 0};
    m = run_model(3, coll_rank, &ag);
    user_algo = NULL;
    ck_assert_int_eq(sm_call_why(m, 0, t, sizeof t), 1);
    ck_assert_msg(strstr(t, "note: you chose recursive_doubling, which does not fit 3 ranks "
                            "and this size, so ") && strstr(t, " ran instead"), "%s", t);
    sm_free(m);
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
    tcase_add_test(t, tape_sync_any_frame);
    tcase_add_test(t, tape_filter);
    tcase_add_test(t, who_chose_the_algorithm);
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
