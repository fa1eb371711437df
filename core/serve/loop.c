/* loop.c - the engine thread: the only thread that drives the engine. The HTTP thread
 * pushes jobs onto a queue (and raises cancel flags); each turn the loop takes the queue in,
 * submits every request to the one engine (plain, JSON-mode and, on a --speculative server,
 * speculative requests batch together), forwards cancellations, runs one engine step, then
 * unparks the connections whose answers have something new (all of a step's together: the
 * HTTP thread wakes a few times a step, not a thread per request at every token), and sleeps on a condition
 * variable when there is nothing to do (after passing the engine's idle gate). */
#include "srv_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct srv_loop {
    llm_engine *eng;
    int spec;                     /* a draft model: greedy requests speculate */
    pthread_t th;
    int started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    srv_job *qhead, *qtail;       /* handed over, not taken in yet */
    int wake, stop, in_flight, cancel_all;
    srv_job *active;              /* engine thread only: taken in, not finished */
    srv_job *wakes;               /* engine thread only: to unpark after the step (a
                                     reference each) */
};

static void active_add(srv_loop *l, srv_job *j)
{
    j->aprev = NULL;
    j->anext = l->active;
    if (l->active)
        l->active->aprev = j;
    l->active = j;
}

/* j got its final event: it leaves the loop (the loop's reference goes). */
static void job_done(srv_loop *l, srv_job *j)
{
    if (j->aprev)
        j->aprev->anext = j->anext;
    else if (l->active == j)
        l->active = j->anext;
    if (j->anext)
        j->anext->aprev = j->aprev;
    j->anext = j->aprev = NULL;
    pthread_mutex_lock(&l->mu);
    l->in_flight--;
    pthread_mutex_unlock(&l->mu);
    srv_job_unref(j);
}

static void on_event(void *u, const llm_engine_event *ev)
{
    srv_job *j = u;
    srv_loop *l = j->loop;
    if (srv_job_deliver(j, ev->index, ev->text, ev->text_len, ev->n_out, ev->finish,
                        ev->st ? ev->st->n_cached : 0)) {
        pthread_mutex_lock(&j->mu);
        j->refs++;
        pthread_mutex_unlock(&j->mu);
        j->wnext = l->wakes;
        l->wakes = j;
    }
    if (ev->finish != LLM_FINISH_NONE && ++j->ended == j->n)
        job_done(j->loop, j);
}

/* The connections that got something in this turn go back to work. */
static void unpark_all(srv_loop *l)
{
    while (l->wakes) {
        srv_job *j = l->wakes;
        l->wakes = j->wnext;
        j->wnext = NULL;
        srv_job_unpark(j, 0);
        srv_job_unref(j);
    }
}

/* One request to the engine. On a --speculative server the greedy requests speculate (their
 * tokens are exactly the target's, and the draft agrees with the target most there: on a
 * CPU, a sampled round's refused drafts cost more than they save); JSON mode never does. */
static void submit(srv_loop *l, srv_job *j)
{
    const char *stops[LLM_MAX_STOP];
    for (int i = 0; i < j->req.n_stop; i++)
        stops[i] = j->req.stop[i];
    llm_request r = {
        .prompt = j->prompt, .n_prompt = j->n_prompt, .max_tokens = j->max_tokens,
        .temperature = (float)j->req.temperature, .top_p = (float)j->req.top_p,
        .top_k = j->req.top_k, .seed = j->seed, .stop = stops, .n_stop = j->req.n_stop,
        .ignore_eos = j->req.ignore_eos, .n = j->n, .json = j->req.json_mode,
        .no_speculate = !(l->spec && j->req.temperature == 0.0),
        .on_event = on_event, .u = j,
    };
    char err[256];
    j->t_submit = mlsys_now_s();
    int id = llm_engine_submit(l->eng, &r, err, sizeof err);
    if (id < 0) {
        srv_job_fail(j, err);
        job_done(l, j);
        return;
    }
    j->engine_id = id;
}

static int cancelled(srv_job *j)
{
    return __atomic_load_n(&j->cancel, __ATOMIC_ACQUIRE);
}

/* Cancel flags raised by the HTTP side reach the engine. */
static void forward_cancels(srv_loop *l)
{
    for (srv_job *j = l->active, *nx; j; j = nx) {
        nx = j->anext;
        if (!cancelled(j) || j->cancel_sent || j->engine_id < 0)
            continue;
        llm_engine_cancel(l->eng, j->engine_id);
        j->cancel_sent = 1;
    }
}

static void *loop_main(void *arg)
{
    srv_loop *l = arg;
    for (;;) {
        int busy = llm_engine_has_work(l->eng);
        if (!busy)            /* the idle gate, once per idle period (gated: the viewer's) */
            busy = llm_engine_idle(l->eng);
        pthread_mutex_lock(&l->mu);
        while (!busy && !l->stop && !l->qhead && !l->wake) {
            struct timespec ts;
            mlsys_deadline(&ts, 0.1);
            if (pthread_cond_timedwait(&l->cv, &l->mu, &ts) == ETIMEDOUT)
                break;
        }
        srv_job *in = l->qhead;
        l->qhead = l->qtail = NULL;
        l->wake = 0;
        int stop = l->stop, all = l->cancel_all;
        pthread_mutex_unlock(&l->mu);
        for (srv_job *j = in, *nx; j; j = nx) {
            nx = j->qnext;
            j->qnext = NULL;
            active_add(l, j);
            submit(l, j);
        }
        if (stop)
            break;
        for (srv_job *j = l->active; all && j; j = j->anext)
            __atomic_store_n(&j->cancel, 1, __ATOMIC_RELEASE);
        forward_cancels(l);
        if (llm_engine_has_work(l->eng) && llm_engine_step(l->eng, NULL) < 0)
            fprintf(stderr, "mlsys-lab serve: an engine step failed; its requests got an "
                    "error\n");
        unpark_all(l);
    }
    /* the end: whatever is left gets its final event (cancelled) */
    for (srv_job *j = l->active; j; j = j->anext)
        __atomic_store_n(&j->cancel, 1, __ATOMIC_RELEASE);
    forward_cancels(l);
    llm_engine_free(l->eng);
    l->eng = NULL;
    unpark_all(l);
    return NULL;
}

srv_loop *srv_loop_start(const llm_config *c, const llm_weights *w, const llm_tokenizer *t,
                         const srv_opts *o, char *err, size_t errlen)
{
    srv_loop *l = mlsys_xcalloc(1, sizeof *l);
    pthread_mutex_init(&l->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&l->cv, &ca);
    pthread_condattr_destroy(&ca);
    llm_engine_opts eo = o->engine;
    eo.tok = t;
    if (o->speculative_k > 0) {
        eo.spec_k = o->speculative_k;
        eo.draft_c = o->draft_c;
        eo.draft_w = o->draft_w;
        l->spec = 1;
    }
    l->eng = llm_engine_create(c, w, &eo, err, errlen);
    if (!l->eng || pthread_create(&l->th, NULL, loop_main, l) != 0) {
        if (l->eng)
            snprintf(err, errlen, "cannot start the engine thread");
        srv_loop_stop(l);
        return NULL;
    }
    l->started = 1;
    return l;
}

void srv_loop_submit(srv_loop *l, srv_job *j)
{
    pthread_mutex_lock(&j->mu);
    j->refs++;
    j->loop = l;
    pthread_mutex_unlock(&j->mu);
    pthread_mutex_lock(&l->mu);
    if (l->qtail)
        l->qtail->qnext = j;
    else
        l->qhead = j;
    l->qtail = j;
    l->in_flight++;
    pthread_cond_signal(&l->cv);
    pthread_mutex_unlock(&l->mu);
}

void srv_loop_cancel(srv_loop *l, srv_job *j)
{
    __atomic_store_n(&j->cancel, 1, __ATOMIC_RELEASE);
    pthread_mutex_lock(&l->mu);
    l->wake = 1;
    pthread_cond_signal(&l->cv);
    pthread_mutex_unlock(&l->mu);
}

void srv_loop_cancel_all(srv_loop *l)
{
    pthread_mutex_lock(&l->mu);
    l->cancel_all = 1;
    pthread_cond_signal(&l->cv);
    pthread_mutex_unlock(&l->mu);
}

int srv_loop_in_flight(srv_loop *l)
{
    pthread_mutex_lock(&l->mu);
    int n = l->in_flight;
    pthread_mutex_unlock(&l->mu);
    return n;
}

void srv_loop_metrics(srv_loop *l, llm_engine_metrics *m)
{
    llm_engine_metrics_get(l->eng, m);
}

void srv_loop_stop(srv_loop *l)
{
    if (!l)
        return;
    if (l->started) {
        pthread_mutex_lock(&l->mu);
        l->stop = 1;
        pthread_cond_signal(&l->cv);
        pthread_mutex_unlock(&l->mu);
        pthread_join(l->th, NULL);
    }
    /* jobs handed over after the thread's last turn */
    for (srv_job *j = l->qhead, *nx; j; j = nx) {
        nx = j->qnext;
        srv_job_end(j, LLM_FINISH_CANCEL);
        srv_job_unref(j);
    }
    if (l->eng)
        llm_engine_free(l->eng);
    pthread_cond_destroy(&l->cv);
    pthread_mutex_destroy(&l->mu);
    free(l);
}
