/* test_serve_view.c - the serve view's model (lab/ui/views/serve_model.h) and drawing: a
 * hand-written stream of the engine's records (submissions, admissions with prefix hits, a
 * chunked prefill, a preemption, finishes, STEP records) decoded into queues, batches and
 * throughput; the real engine's records agree with what it was asked (every request's tokens,
 * every step); gated, the engine runs one iteration per grant and waits at an "engine idle"
 * gate when it has nothing to do, also while another thread submits (as HTTP handlers do);
 * the view draws the queues and the batch in words; each move says its unit on the flow
 * view's arrows. */
#include <check.h>
#include <math.h>
#include <pthread.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../../lab/ui/views/view.h"
#include "../../lab/ui/views/serve_model.h"
#include "../../lab/ui/stepmodel.h"
#include "../../core/llm/engine.h"
#include "../../core/nn/nn.h"

#define MODEL "assets/models/model.bin"

static uint64_t now_t = 1000;

static mlsys_event rec(int from, int to, int what, int phase, int count, int version, int seq)
{
    mlsys_event e;
    memset(&e, 0, sizeof e);
    e.kind = MLSYS_EV_FLOW;
    e.t_ns = now_t += 1000;
    e.coll = e.algo = e.op = -1;
    e.step = e.chunk = -1;
    e.val[0] = NAN;
    e.flow = (mlsys_flow_info){(int16_t)from, (int16_t)to, (int16_t)what, (int16_t)phase, count,
                               version, seq, 0};
    return e;
}

static void req(void (*feed)(void *, const mlsys_event *), void *u, int from, int to, int id,
                int count, int phase, int step)
{
    mlsys_event e = rec(from, to, MLSYS_FLOW_REQUESTS, phase, count, step, id);
    feed(u, &e);
}

static void steprec(void (*feed)(void *, const mlsys_event *), void *u, int step, int rows,
                    int tokens, double secs, int waiting, int running, int finished)
{
    mlsys_event e = rec(SVM_MODEL, -1, MLSYS_FLOW_STEP, -1, rows, step, -1);
    e.flow.spare = tokens;
    e.val[0] = secs;
    e.val[1] = waiting;
    e.val[2] = running;
    e.val[3] = finished;
    feed(u, &e);
}

/* Two steps of a server: 0 (10 tokens), 1 (20, 8 cached, a chunk of 12), 2 (5) submitted;
 * step 1 prefills 0 and 1; step 2 preempts 1, decodes 0 (which then finishes) and prefills
 * 2. */
static void scenario(void (*feed)(void *, const mlsys_event *), void *u, int upto)
{
    req(feed, u, 0, 1, 0, 10, -1, 0);
    req(feed, u, 0, 1, 1, 20, -1, 0);
    req(feed, u, 0, 1, 2, 5, -1, 0);
    req(feed, u, 1, 2, 0, 0, -1, 1);
    req(feed, u, 1, 2, 1, 8, -1, 1);
    req(feed, u, 2, 3, 0, 10, 1, 1);
    req(feed, u, 2, 3, 1, 12, 1, 1);
    steprec(feed, u, 1, 22, 2, 0.004, 1, 2, 0);
    if (upto < 2)
        return;
    req(feed, u, 2, 1, 1, 0, -1, 2);
    req(feed, u, 1, 2, 2, 0, -1, 2);
    req(feed, u, 2, 3, 0, 1, 0, 2);
    req(feed, u, 2, 3, 2, 5, 1, 2);
    req(feed, u, 3, 0, 0, 2, -1, 2);
    steprec(feed, u, 2, 6, 2, 0.001, 1, 1, 1);
}

static void model_feed(void *u, const mlsys_event *e)
{
    svm_event(u, e);
}

START_TEST(model_decodes_the_engine_records)
{
    serve_model m;
    svm_init(&m);
    scenario(model_feed, &m, 1);
    ck_assert(m.seen);
    ck_assert_int_eq(svm_count(&m, SVM_WAITING), 1);
    ck_assert_int_eq(svm_count(&m, SVM_RUNNING), 2);
    const svm_req *r1 = svm_find(&m, 1);
    ck_assert_int_eq(r1->prompt, 20);
    ck_assert_int_eq(r1->cached, 8);
    ck_assert_int_eq(r1->pos, 20);
    ck_assert_int_eq(r1->out, 1);           /* its prompt is done: one token drawn */
    ck_assert_int_eq(svm_find(&m, 0)->out, 1);
    ck_assert_int_eq((int)m.last.step, 1);
    ck_assert_int_eq(m.last.prefill_rows, 22);
    ck_assert_int_eq(m.last.decode_rows, 0);
    char t[256];
    svm_batch_text(&m, t, sizeof t);
    ck_assert_str_eq(t, "prefill req 0 (10), req 1 (12)");
    ck_assert_str_eq(m.last.batch, "P0:10 P1:12");
    double last, tps = svm_tokens_per_s(&m, &last);
    ck_assert(fabs(tps - 2 / 0.004) < 1e-9 && fabs(last - 500.0) < 1e-9);

    svm_free(&m);
    scenario(model_feed, &m, 2);
    ck_assert_int_eq(svm_count(&m, SVM_WAITING), 1);
    ck_assert_int_eq(svm_count(&m, SVM_RUNNING), 1);
    ck_assert_int_eq(svm_count(&m, SVM_FINISHED), 1);
    r1 = svm_find(&m, 1);
    ck_assert_int_eq(r1->state, SVM_WAITING);
    ck_assert_int_eq(r1->preempted, 1);
    ck_assert_int_eq(r1->pos, 0);
    ck_assert_int_eq(r1->out, 1);           /* what it generated stays counted */
    ck_assert_int_eq(svm_find(&m, 0)->out, 2);
    ck_assert_int_eq((int)svm_find(&m, 0)->step_done, 2);
    ck_assert_int_eq(svm_nth(&m, SVM_FINISHED, 0)->id, 0);
    ck_assert_int_eq(svm_nth(&m, SVM_RUNNING, 0)->id, 2);
    ck_assert_int_eq(m.npreempted, 1);
    ck_assert_int_eq(m.preempted_now[0], 1);
    ck_assert_int_eq(m.nadmitted, 1);
    ck_assert_int_eq(m.nfinished, 1);
    svm_batch_text(&m, t, sizeof t);
    ck_assert_str_eq(t, "prefill req 2 (5); decode req 0");
    ck_assert_str_eq(m.last.batch, "P2:5 D0");
    ck_assert_int_eq(m.nhist, 2);
    ck_assert_int_eq((int)m.tokens_total, 4);
    ck_assert(fabs(svm_tokens_per_s(&m, NULL) - 4 / 0.005) < 1e-9);
    svm_free(&m);
    /* a batch larger than the model keeps: the rest is counted */
    for (int i = 0; i < SVM_BATCH + 6; i++)
        req(model_feed, &m, 2, 3, i, 1, 0, 7);
    char big[4096];
    svm_batch_text(&m, big, sizeof big);
    ck_assert_msg(strstr(big, ", 63 (and 6 more)"), "%s", big);
    ck_assert_int_eq(m.last.decode_rows, SVM_BATCH + 6);
    svm_free(&m);
}
END_TEST

/* ---- the view, drawn ---- */

static void *g_view;
static void view_feed(void *u, const mlsys_event *e)
{
    (void)u;
    view_serve_class.event(g_view, e, 1);
}

static void flow_feed(void *u, const mlsys_event *e)
{
    view_flow_class.event(u, e, 1);
}

static char *draw(int w, int h)
{
    grid *g = grid_create(w, h);
    view_ctx ctx;
    memset(&ctx, 0, sizeof ctx);
    ctx.nranks = 1;
    ctx.anim = 1;
    ctx.frame = 2;
    view_serve_class.draw(g_view, g, 0, 0, w, h, &ctx);
    char *s = grid_dump(g);
    grid_free(g);
    return s;
}

START_TEST(view_draws_queues_and_batch)
{
    ck_assert(view_find("serve") == &view_serve_class);
    ck_assert(view_serve_class.wants(&(mlsys_event){.kind = MLSYS_EV_FLOW,
                                                     .flow = {.what = MLSYS_FLOW_STEP}}));
    ck_assert(!view_serve_class.wants(&(mlsys_event){.kind = MLSYS_EV_MEM}));
    g_view = view_serve_class.create();
    char *s = draw(100, 30);
    ck_assert_msg(strstr(s, "taken in no request yet"), "%s", s);
    free(s);
    scenario(view_feed, NULL, 2);
    s = draw(100, 30);
    ck_assert_msg(strstr(s, "1 waiting") && strstr(s, "1 running") && strstr(s, "1 finished"),
                  "%s", s);
    ck_assert_msg(strstr(s, "prefill req 2 (5); decode req 0"), "%s", s);
    ck_assert_msg(strstr(s, "preempted req 1"), "%s", s);
    ck_assert_msg(strstr(s, "waiting (1)") && strstr(s, "running (1)") &&
                  strstr(s, "finished (1)"), "%s", s);
    ck_assert_msg(strstr(s, "req 0   2 out, step 2"), "%s", s);
    ck_assert_msg(strstr(s, "P2:5 D0"), "recent steps: %s", s);
    free(s);
    s = draw(40, 8);                        /* small: clipped, never past the area */
    ck_assert(strstr(s, "server"));
    free(s);
    view_serve_class.rewind(g_view);        /* fed again from the start: the same picture */
    scenario(view_feed, NULL, 2);
    s = draw(100, 30);
    ck_assert(strstr(s, "prefill req 2 (5); decode req 0"));
    free(s);
    view_serve_class.free(g_view);
}
END_TEST

/* Each of the engine's moves says its unit on the flow view's arrows (core/llm/engine.h's
 * table: submitted prompt tokens, tokens found cached at admission, rows this step,
 * preempted, tokens generated); a move the engine never makes keeps the bare count. */
START_TEST(moves_say_their_unit)
{
    static const struct { int from, to, count, known; const char *want; } cases[] = {
        {SVM_CLIENTS, SVM_QUEUE, 24, 1, "req 3: 24 prompt tokens"},
        {SVM_CLIENTS, SVM_QUEUE, 1, 1, "req 3: 1 prompt token"},
        {SVM_QUEUE, SVM_SCHED, 16, 1, "req 3 admitted, 16 cached"},
        {SVM_QUEUE, SVM_SCHED, 0, 1, "req 3 admitted"},
        {SVM_SCHED, SVM_MODEL, 24, 1, "req 3: 24 rows this step"},
        {SVM_SCHED, SVM_MODEL, 1, 1, "req 3: 1 row this step"},
        {SVM_SCHED, SVM_QUEUE, 0, 1, "req 3 preempted"},
        {SVM_MODEL, SVM_CLIENTS, 20, 1, "req 3 finished: 20 tokens"},
        {SVM_SCHED, SVM_CLIENTS, 24, 0, "req 3: 24"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char t[64];
        int k = svm_move_text(cases[i].from, cases[i].to, 3, cases[i].count, t, sizeof t);
        ck_assert_str_eq(t, cases[i].want);
        ck_assert_int_eq(k, cases[i].known);
    }
    /* on the flow view: the scenario's moves with their units */
    void *fv = view_flow_class.create();
    view_flow_class.reset(fv, 1);
    static const char *const roles[] = {"clients", "queue", "scheduler", "model"};
    for (int r = 0; r < 4; r++) {
        mlsys_event e = rec(r, -1, MLSYS_FLOW_ROLE, -1, 0, 0, -1);
        snprintf(e.label, sizeof e.label, "%s", roles[r]);
        view_flow_class.event(fv, &e, 0);
    }
    g_view = fv;
    scenario(flow_feed, fv, 1);
    grid *g = grid_create(120, 30);
    view_ctx ctx;
    memset(&ctx, 0, sizeof ctx);
    ctx.nranks = 1;
    ctx.anim = 1;
    ctx.frame = 1;
    view_flow_class.draw(fv, g, 0, 0, 120, 30, &ctx);
    char *f = grid_dump(g);
    ck_assert_msg(strstr(f, "req 1: 20 prompt tokens") && strstr(f, "req 1 admitted, 8 cached") &&
                  strstr(f, "req 1: 12 rows this step"), "%s", f);
    free(f);
    grid_free(g);
    view_flow_class.free(fv);
    g_view = NULL;
}
END_TEST

/* ---- the real engine's records ---- */

static serve_model g_m;
static int g_steps_ev, g_compute, g_idle, g_bad_label, g_gates_seen, g_max_compute_per_grant;
static int g_compute_since;

static void ev_sink(void *u, const mlsys_event *ev, size_t n)
{
    (void)u;
    for (size_t i = 0; i < n; i++) {
        const mlsys_event *e = &ev[i];
        svm_event(&g_m, e);
        if (e->kind == MLSYS_EV_COMPUTE_BEGIN && e->tag == 0) {   /* the forward's span */
            g_compute++;
            g_compute_since++;
        }
        if (e->kind == MLSYS_EV_STEP) {
            g_steps_ev++;
            if (!strncmp(e->label, "engine idle", 11))
                g_idle++;
            else if (strncmp(e->label, "engine step ", 12))
                g_bad_label++;
        }
    }
}

#define NREQ 5
static int engine_rank(mlsys_comm *c, void *arg)
{
    (void)arg;
    char err[256];
    llm_config cfg;
    llm_weights w;
    if (llm_checkpoint_read(MODEL, &cfg, &w, err, sizeof err))
        return 1;
    nn_set_gemm_kernel(NN_GEMM_INVARIANT);
    llm_engine_opts o = {.max_num_seqs = 3, .block_size = 8, .n_blocks = 16, .comm = c};
    llm_engine *s = llm_engine_create(&cfg, &w, &o, err, sizeof err);
    if (!s)
        return 1;
    int p[40];
    for (int i = 0; i < 40; i++)
        p[i] = 3 + (i * 13) % 200;
    for (int i = 0; i < NREQ; i++) {
        llm_request r = {.prompt = p, .n_prompt = 12 + 2 * i, .max_tokens = 4 + i,
                         .ignore_eos = 1};
        if (llm_engine_submit(s, &r, err, sizeof err) < 0)
            return 1;
    }
    long steps = llm_engine_run(s);
    llm_engine_wait(s, 0.01);                /* idle: an "engine idle" gate */
    llm_engine_free(s);
    llm_weights_free(&w);
    return steps > 0 ? 0 : 2;
}

/* A server's shape: another thread submits requests now and then while this one waits for
 * work and steps (what an HTTP front end does). */
#define NEXT 3
typedef struct outside { llm_engine *s; int *p; } outside;
static int g_done;

static void on_done(void *u, const llm_engine_event *ev)
{
    (void)u;
    g_done += ev->finish != LLM_FINISH_NONE;
}

static void *submitter(void *arg)
{
    outside *o = arg;
    char err[256];
    for (int i = 0; i < NEXT; i++) {
        usleep(30000);
        llm_request r = {.prompt = o->p, .n_prompt = 10 + i, .max_tokens = 3 + i,
                         .ignore_eos = 1, .on_event = on_done};
        if (llm_engine_submit(o->s, &r, err, sizeof err) < 0)
            return (void *)1;
    }
    return NULL;
}

static int outside_rank(mlsys_comm *c, void *arg)
{
    (void)arg;
    char err[256];
    llm_config cfg;
    llm_weights w;
    if (llm_checkpoint_read(MODEL, &cfg, &w, err, sizeof err))
        return 1;
    llm_engine_opts o = {.max_num_seqs = 2, .block_size = 8, .comm = c};
    llm_engine *s = llm_engine_create(&cfg, &w, &o, err, sizeof err);
    if (!s)
        return 1;
    int p[16];
    for (int i = 0; i < 16; i++)
        p[i] = 5 + 7 * i;
    outside ou = {s, p};
    pthread_t th;
    pthread_create(&th, NULL, submitter, &ou);
    g_done = 0;
    double t0 = mlsys_now_s();
    while (g_done < NEXT && mlsys_now_s() - t0 < 30.0)
        if (llm_engine_wait(s, 0.02))
            llm_engine_step(s, NULL);
    void *rv;
    pthread_join(th, &rv);
    llm_engine_free(s);
    llm_weights_free(&w);
    return g_done == NEXT && !rv ? 0 : 2;
}

static void run_engine_fn(int gated, int (*fn)(mlsys_comm *, void *))
{
    svm_init(&g_m);
    g_steps_ev = g_compute = g_idle = g_bad_label = g_gates_seen = 0;
    g_max_compute_per_grant = g_compute_since = 0;
    char why[512] = "";
    mlsys_launch_opts o = {.world_size = 1, .timeout_ms = 60000, .trace_capacity = 8192,
                           .gated = gated};
    mlsys_job *j = mlsys_job_start(&o, NULL, fn, NULL, why, sizeof why);
    ck_assert_msg(j != NULL, "%s", why);
    mlsys_job_sink sink = {NULL, ev_sink, NULL};
    int rc;
    uint64_t grants = 0;
    while ((rc = mlsys_job_wait(j, &sink, gated ? 20 : -1, why, sizeof why)) == 1) {
        /* at a gate it has not been let through yet (its STEP record is in) */
        if (mlsys_job_gate_step(j, 0) < 0 || (uint64_t)g_steps_ev <= grants)
            continue;
        /* at a gate: drain what came before it, then let one step through */
        rc = mlsys_job_wait(j, &sink, 0, why, sizeof why);
        if (rc != 1)
            break;
        if (g_compute_since > g_max_compute_per_grant)
            g_max_compute_per_grant = g_compute_since;
        g_compute_since = 0;
        g_gates_seen++;
        grants = mlsys_job_grant_step(j);
    }
    ck_assert_msg(rc == 0, "%s", why);
    ck_assert_int_eq((int)mlsys_job_events_lost(j), 0);
    mlsys_job_free(j);
}

static void run_engine(int gated)
{
    run_engine_fn(gated, engine_rank);
}

START_TEST(requests_from_another_thread)
{
    for (int gated = 0; gated < 2; gated++) {
        run_engine_fn(gated, outside_rank);
        ck_assert_int_eq(svm_count(&g_m, SVM_FINISHED), NEXT);
        for (int i = 0; i < NEXT; i++) {
            ck_assert_int_eq(svm_find(&g_m, i)->prompt, 10 + i);
            ck_assert_int_eq(svm_find(&g_m, i)->out, 3 + i);
        }
        ck_assert_int_eq((int)g_m.tokens_total, 3 + 4 + 5);
        ck_assert_int_eq(g_bad_label, 0);
        ck_assert_int_ge(g_idle, 1);        /* it waited between requests, and said so */
        if (gated) {
            ck_assert_int_le(g_max_compute_per_grant, 1);
        } else {
            /* not gated: once per idle period, and forwards separate the periods */
            ck_assert_int_le(g_idle, g_compute + 1);
        }
        svm_free(&g_m);
    }
}
END_TEST

START_TEST(engine_records_agree_with_the_requests)
{
    run_engine(0);
    ck_assert_int_eq(svm_count(&g_m, SVM_FINISHED), NREQ);
    long want = 0;
    for (int i = 0; i < NREQ; i++) {
        const svm_req *q = svm_find(&g_m, i);
        ck_assert_msg(q != NULL, "request %d never seen", i);
        ck_assert_int_eq(q->prompt, 12 + 2 * i);
        ck_assert_int_eq(q->out, 4 + i);
        want += 4 + i;
    }
    ck_assert_int_eq((int)g_m.tokens_total, (int)want);
    ck_assert_int_eq((int)g_m.steps_total, g_compute);      /* a STEP record per forward */
    ck_assert_int_eq((int)g_m.last.step, g_compute);
    ck_assert_int_eq(g_m.last.finished, NREQ);
    ck_assert_int_eq(g_bad_label, 0);
    ck_assert_int_eq(g_idle, 1);            /* said once for the idle period */
    ck_assert_int_ge(g_steps_ev, g_compute + 1);
    svm_free(&g_m);
}
END_TEST

START_TEST(gated_engine_one_iteration_per_grant)
{
    run_engine(1);
    ck_assert_int_eq(svm_count(&g_m, SVM_FINISHED), NREQ);
    ck_assert_int_le(g_max_compute_per_grant, 1);
    ck_assert_int_ge(g_gates_seen, g_compute);
    ck_assert_int_eq(g_idle, 1);            /* waited at an idle gate, not silently */
    ck_assert_int_eq(g_bad_label, 0);
    svm_free(&g_m);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("serve_view");
    TCase *tc = tcase_create("serve_view");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, model_decodes_the_engine_records);
    tcase_add_test(tc, view_draws_queues_and_batch);
    tcase_add_test(tc, moves_say_their_unit);
    tcase_add_test(tc, engine_records_agree_with_the_requests);
    tcase_add_test(tc, gated_engine_one_iteration_per_grant);
    tcase_add_test(tc, requests_from_another_thread);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int nf = srunner_ntests_failed(sr);
    srunner_free(sr);
    return nf ? 1 : 0;
}
