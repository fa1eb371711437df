/* icoll.c - non-blocking collectives: mlsys_iallreduce, mlsys_ireduce_scatter and
 * mlsys_iallgather return a request at once; mlsys_wait / mlsys_waitall / mlsys_test complete
 * it. A progress thread per process runs them while the caller computes, on shm and on any
 * transport that allows it (MPI with MPI_THREAD_SERIALIZED): the same algorithms, the same
 * bits; a transport that does not (an MPI without thread support) runs its own non-blocking
 * collectives (MPI_Iallreduce & co.).
 *
 * How it works on shm
 *   - The first non-blocking collective of a process starts one progress thread (the
 *     "engine") and gives the communicator a shadow: the same group on a context of its own
 *     (ctx | ICOLL_CTX_BIT, collectives on its odd partner), so their messages can never
 *     match the caller's blocking traffic, and tags stay those of the blocking algorithms.
 *   - A call validates its arguments, copies them into a request and appends it to the
 *     engine's queue. The thread takes requests in issue order and runs each with the very
 *     dispatcher and algorithm the blocking call would use (coll_run on the shadow, the
 *     algorithm forced on the caller's communicator at issue time, or the size rule): the
 *     result is bit for bit the blocking one, and since every rank issues in the same order
 *     and the thread runs them in that order, the k-th call of every rank meets the k-th
 *     of every other, as in MPI. Requests may be waited for in any order.
 *   - One at a time: the queue is a stream (as NCCL's), which keeps matching trivial and
 *     costs nothing in overlap, since the caller's compute is what the collectives hide
 *     behind. Waiting (and testing) only looks at a flag: the thread drives the transport.
 *
 * The threading rule (the transport, the request lists and the fast box are single-threaded)
 *   - While non-blocking collectives are in flight the progress thread owns the transport.
 *     The caller may compute, issue more of them (on any communicator), and wait for / test
 *     them. Any other runtime call that moves messages (send, recv, their non-blocking
 *     forms, wait/test of p2p requests, blocking collectives, split) first waits until the
 *     thread has finished everything issued so far (icoll_fence), then proceeds: correct
 *     and deadlock-free whenever the ranks' programs would be with blocking calls in place
 *     of the non-blocking ones. A program that needs a p2p message to overtake a collective
 *     in flight (legal in MPI) ends with the collective's timeout, never a hang.
 *   - mlsys_alloc_aligned / mlsys_free_aligned (the shared heap, also used by the
 *     algorithms' scratch on the thread) take heap.c's lock, so the caller may allocate
 *     while collectives are in flight.
 *   - Events of both threads go through one lock into the rank's ring (w->emit), or
 *     through the transport's emitter (events over TCP, which takes its own lock); the
 *     thread's collective spans are labelled "<algo> async" so that a timeline can put
 *     them on their own lane beside the caller's compute spans.
 *   - Failure: a collective that fails (timeout, abort, a dead peer) fails its request; the
 *     shadow's sequence is then lost, so the later ones of that communicator fail at once
 *     with MLSYS_ERR_ABORTED instead of waiting out one timeout each. mlsys_finalize lets
 *     every queued collective run to its end (the peers expect them), then stops the thread
 *     and frees requests nobody waited for, saying so on stderr. */
#include "coll/coll.h"
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define WAIT_SPIN_NS 20000ull     /* a waiter polls the flag this long before it sleeps */
#define WAIT_SLICE_MS 50          /* then sleeps in slices, checking the job's abort flag */
#define BACKPRESSURE_NS 2000000000ull

enum { OP_QUEUED = 0, OP_RUNNING = 1, OP_DONE = 2 };

typedef struct icoll_op {
    mlsys_request req;          /* first: the caller's handle (req.comm: the caller's comm) */
    mlsys_coll coll;
    coll_args a;
    int algo;                   /* the caller's algo_forced[coll] when it issued */
    int algo_by;                /* and who had chosen it */
    int timeout_ms;
    _Atomic int state;          /* OP_*: written by the engine, read by the caller */
    /* written by the engine before state becomes OP_DONE, read by the caller after */
    int rc;
    mlsys_counters delta;       /* what the run added to the shadow's counters */
    const char *algo_name;
    char errmsg[512];
    struct icoll_op *qnext;     /* the engine's queue (under mu) */
    struct icoll_op *onext, *oprev;   /* every request not released yet (caller only) */
} icoll_op;

_Static_assert(sizeof(((icoll_op *)0)->errmsg) == sizeof(((mlsys_comm *)0)->errmsg),
               "an op keeps the shadow's whole message");

typedef struct icoll_engine {
    mlsys_world *w;
    int threaded;               /* 1: our progress thread; 0: the transport's icoll() */
    int started;
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t work_cv, done_cv;
    icoll_op *qhead, *qtail;    /* issued, not started (under mu) */
    int stop;                   /* under mu */
    uint64_t issued;            /* caller only */
    _Atomic uint64_t finished;  /* engine only */
    icoll_op *open;             /* caller only */
    pthread_mutex_t emit_mu;
    void (*next_emit)(mlsys_world *w, const mlsys_event *ev);   /* see chained_emit */
} icoll_engine;

static _Thread_local int on_engine;     /* this thread is a progress thread */

/* ---- events: two producers, one ring ---- */

/* trace.c's ring write, under the engine's lock; the time is taken inside the lock so the
 * ring stays in time order. The engine's collective spans get " async" in their label. */
static void locked_emit(mlsys_world *w, const mlsys_event *ev)
{
    icoll_engine *e = w->icoll;
    shm_header *h = w->h;
    mlsys_event x = *ev;
    if (on_engine && (x.kind == MLSYS_EV_COLL_BEGIN || x.kind == MLSYS_EV_COLL_END)) {
        size_t n = strnlen(x.label, sizeof x.label);
        snprintf(x.label + n, sizeof x.label - n, " async");
    }
    pthread_mutex_lock(&e->emit_mu);
    shm_ring *ring = shm_ring_of(h, w->rank);
    uint64_t head = atomic_load_explicit(&ring->head, memory_order_relaxed);
    uint64_t since = 0;
    while (head - atomic_load_explicit(&ring->tail, memory_order_acquire) >= h->ring_cap) {
        uint64_t now = mlsys_now_ns();
        if (!since)
            since = now;
        if (now - since > BACKPRESSURE_NS || atomic_load(&h->abort)) {
            atomic_fetch_add(&ring->lost, 1);
            pthread_mutex_unlock(&e->emit_mu);
            return;
        }
        atomic_fetch_add(&h->runner_bell, 1);
        struct timespec ts = {0, 200000};
        nanosleep(&ts, NULL);
    }
    x.t_ns = mlsys_now_ns();
    x.rank = w->rank;
    shm_ring_events(ring)[head % h->ring_cap] = x;
    atomic_store_explicit(&ring->head, head + 1, memory_order_release);
    pthread_mutex_unlock(&e->emit_mu);
}

/* Events that go elsewhere (w->emit was set: over TCP under mpirun, whose emitter takes
 * both threads' events itself): the same label rule as locked_emit's. */
static void chained_emit(mlsys_world *w, const mlsys_event *ev)
{
    icoll_engine *e = w->icoll;
    mlsys_event x = *ev;
    if (on_engine && (x.kind == MLSYS_EV_COLL_BEGIN || x.kind == MLSYS_EV_COLL_END)) {
        size_t n = strnlen(x.label, sizeof x.label);
        snprintf(x.label + n, sizeof x.label - n, " async");
    }
    e->next_emit(w, &x);
}

static void emit_mark(mlsys_comm *c, int kind, const icoll_op *op, const char *what)
{
    if (!mlsys_tracing(c))
        return;
    mlsys_event ev;
    memset(&ev, 0, sizeof ev);
    ev.kind = (int16_t)kind;
    ev.coll = (int16_t)op->coll;
    ev.algo = -1;
    ev.op = (int16_t)op->a.op;
    ev.dtype = (int32_t)op->a.dt;
    ev.bytes = op->req.bytes;
    ev.peer = -1;
    ev.tag = -1;
    ev.step = -1;
    ev.chunk = -1;
    snprintf(ev.label, sizeof ev.label, "%s", what);
    mlsys_emit(c, &ev);
}

/* ---- the progress thread ---- */

static void counters_delta(mlsys_counters *d, const mlsys_counters *after,
                           const mlsys_counters *before)
{
    d->sends = after->sends - before->sends;
    d->recvs = after->recvs - before->recvs;
    d->bytes_sent = after->bytes_sent - before->bytes_sent;
    d->bytes_recv = after->bytes_recv - before->bytes_recv;
    for (int k = 0; k < 16; k++)
        d->coll_calls[k] = after->coll_calls[k] - before->coll_calls[k];
}

static void run_op(icoll_op *op)
{
    mlsys_comm *c = op->req.comm, *s = c->icoll_shadow;
    mlsys_counters before = s->counters;
    s->timeout_ms = op->timeout_ms;
    s->algo_forced[op->coll] = op->algo;
    s->algo_by[op->coll] = (int8_t)op->algo_by;
    if (s->icoll_broken) {
        op->rc = MLSYS_ERR_ABORTED;
        snprintf(op->errmsg, sizeof op->errmsg, "rank %d: non-blocking %s of %zu B not run: an "
                 "earlier non-blocking collective on this communicator failed", c->rank,
                 mlsys_coll_name(op->coll), op->req.bytes);
    } else {
        op->rc = coll_run(s, op->coll, &op->a);
        if (op->rc) {
            memcpy(op->errmsg, s->errmsg, sizeof op->errmsg);     /* the same size */
            s->icoll_broken = 1;
        }
    }
    counters_delta(&op->delta, &s->counters, &before);
    op->algo_name = s->last_algo;
}

static void *engine_main(void *arg)
{
    icoll_engine *e = arg;
    on_engine = 1;
    pthread_mutex_lock(&e->mu);
    for (;;) {
        while (!e->qhead && !e->stop)
            pthread_cond_wait(&e->work_cv, &e->mu);
        icoll_op *op = e->qhead;
        if (!op)
            break;                  /* stopped and drained */
        e->qhead = op->qnext;
        if (!e->qhead)
            e->qtail = NULL;
        atomic_store_explicit(&op->state, OP_RUNNING, memory_order_relaxed);
        pthread_mutex_unlock(&e->mu);
        run_op(op);
        pthread_mutex_lock(&e->mu);
        atomic_store_explicit(&op->state, OP_DONE, memory_order_release);
        atomic_fetch_add_explicit(&e->finished, 1, memory_order_release);
        pthread_cond_broadcast(&e->done_cv);
    }
    pthread_mutex_unlock(&e->mu);
    return NULL;
}

/* The ranks are bound to one CPU each; the thread may run on any CPU of the machine, so
 * that a core left idle can carry the communication while the rank computes. */
static void unbind_thread(pthread_t th)
{
    const char *b = getenv("MLSYS_BIND");
    if (b && !strcmp(b, "none"))
        return;
    cpu_set_t all;
    CPU_ZERO(&all);
    long n = sysconf(_SC_NPROCESSORS_CONF);
    for (long i = 0; i < n && i < CPU_SETSIZE; i++)
        CPU_SET((int)i, &all);
    pthread_setaffinity_np(th, sizeof all, &all);   /* best effort: cgroups may narrow it */
}

static int engine_start(mlsys_comm *c, icoll_engine *e)
{
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_mutex_init(&e->mu, NULL);
    pthread_mutex_init(&e->emit_mu, NULL);
    pthread_cond_init(&e->work_cv, &ca);
    pthread_cond_init(&e->done_cv, &ca);
    pthread_condattr_destroy(&ca);
    if (!e->threaded)
        return 0;
    mlsys_world *w = e->w;
    if (w->tracing && w->h && !w->emit) {
        w->emit = locked_emit;      /* before the thread exists: the caller sees it set */
    } else if (w->emit) {
        e->next_emit = w->emit;
        w->emit = chained_emit;
    }
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);   /* signals stay the caller's business */
    int rc = pthread_create(&e->th, NULL, engine_main, e);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc) {
        if (w->emit == locked_emit)
            w->emit = NULL;
        else if (w->emit == chained_emit)
            w->emit = e->next_emit;
        mlsys_set_error(c, MLSYS_ERR_SYS, "rank %d: cannot start the progress thread of "
                        "non-blocking collectives: %s", c->rank, strerror(rc));
        return MLSYS_ERR_SYS;
    }
    e->started = 1;
    unbind_thread(e->th);
    return 0;
}

static icoll_engine *engine_of(mlsys_comm *c, int *rc)
{
    mlsys_world *w = c->w;
    *rc = 0;
    if (w->icoll)
        return w->icoll;
    icoll_engine *e = mlsys_xcalloc(1, sizeof *e);
    e->w = w;
    e->threaded = w->tp->serialized_threads;
    if (!e->threaded && !w->tp->icoll) {
        free(e);
        *rc = MLSYS_ERR_UNSUPPORTED;
        return NULL;
    }
    if ((*rc = engine_start(c, e)) != 0) {
        free(e);
        return NULL;
    }
    w->icoll = e;
    return e;
}

/* ---- the caller's side ---- */

static const char *call_name(mlsys_coll coll)
{
    return coll == MLSYS_COLL_ALLREDUCE ? "iallreduce"
           : coll == MLSYS_COLL_REDUCE_SCATTER ? "ireduce_scatter" : "iallgather";
}

static int check_args(mlsys_comm *c, mlsys_coll coll, const coll_args *a)
{
    const char *name = call_name(coll);
    size_t total;
    if ((unsigned)a->dt >= MLSYS_DTYPE_COUNT)
        mlsys_set_error(c, MLSYS_ERR_ARG, "rank %d: %s: unknown element type %d", c->rank, name,
                        (int)a->dt);
    else if (coll != MLSYS_COLL_ALLGATHER && (unsigned)a->op >= MLSYS_OP_COUNT)
        mlsys_set_error(c, MLSYS_ERR_ARG, "rank %d: %s: unknown reduction operator %d", c->rank,
                        name, (int)a->op);
    else if (__builtin_mul_overflow(a->count, dt_size(a->dt) * (size_t)c->size, &total))
        mlsys_set_error(c, MLSYS_ERR_ARG, "rank %d: %s: count %zu overflows", c->rank, name,
                        a->count);
    else if (a->count && !a->sendbuf)
        mlsys_set_error(c, MLSYS_ERR_ARG, "rank %d: %s: null sendbuf (count %zu)", c->rank, name,
                        a->count);
    else if (a->count && !a->recvbuf)
        mlsys_set_error(c, MLSYS_ERR_ARG, "rank %d: %s: null recvbuf (count %zu)", c->rank, name,
                        a->count);
    else
        return 0;
    return MLSYS_ERR_ARG;
}

static void op_unlink(icoll_engine *e, icoll_op *op)
{
    if (op->oprev)
        op->oprev->onext = op->onext;
    else
        e->open = op->onext;
    if (op->onext)
        op->onext->oprev = op->oprev;
}

/* The transport is the caller's again once everything issued has finished. */
static void note_idle(icoll_engine *e)
{
    if (atomic_load_explicit(&e->finished, memory_order_acquire) == e->issued)
        atomic_store_explicit(&e->w->icoll_busy, 0, memory_order_relaxed);
}

static int issue(mlsys_comm *c, mlsys_coll coll, const coll_args *a, mlsys_request **req)
{
    if (!c) {
        if (req)
            *req = NULL;
        return MLSYS_ERR_ARG;
    }
    if (!req) {
        mlsys_set_error(c, MLSYS_ERR_ARG, "rank %d: %s: null request pointer", c->rank,
                        call_name(coll));
        return MLSYS_ERR_ARG;
    }
    *req = NULL;
    int rc = check_args(c, coll, a);
    if (rc)
        return rc;
    icoll_engine *e = engine_of(c, &rc);
    if (!e) {
        if (rc == MLSYS_ERR_UNSUPPORTED)
            mlsys_set_error(c, rc, "rank %d: %s: the %s backend has no non-blocking "
                            "collectives (use --backend shm or mpi)", c->rank, call_name(coll),
                            c->w->tp->name);
        return rc;
    }
    mlsys_world *w = c->w;
    icoll_op *op = mlsys_xcalloc(1, sizeof *op);
    size_t es = dt_size(a->dt);
    op->req = (mlsys_request){.comm = c, .kind = REQ_COLL, .peer_world = -1, .tag = -1,
                              .ctx = c->ctx | 1u, .bytes = a->count * es, .sbuf = a->sendbuf,
                              .rbuf = a->recvbuf, .dt = a->dt, .op = a->op, .slot = -1,
                              .scanned = UINT64_MAX};
    op->coll = coll;
    op->a = *a;
    op->algo = c->algo_forced[coll];
    op->algo_by = c->algo_by[coll];
    op->timeout_ms = c->timeout_ms;
    if (e->threaded) {
        if (!c->icoll_shadow) {
            mlsys_comm *s = comm_create(w, c->size, c->world_of, c->ctx | ICOLL_CTX_BIT);
            s->is_shadow = 1;
            /* the transport's side of it (MPI_Comm_dup): collective, and the thread must
             * not be inside the transport meanwhile */
            if (w->tp->dup && ((rc = icoll_fence(c)) != 0 || (rc = w->tp->dup(c, s)) != 0)) {
                free(op);
                return rc;
            }
            c->icoll_shadow = s;
        }
        emit_mark(c, MLSYS_EV_MARK, op, "icoll issue");
        atomic_store_explicit(&w->icoll_busy, 1, memory_order_relaxed);
        e->issued++;
        pthread_mutex_lock(&e->mu);
        if (e->qtail)
            e->qtail->qnext = op;
        else
            e->qhead = op;
        e->qtail = op;
        pthread_cond_signal(&e->work_cv);
        pthread_mutex_unlock(&e->mu);
    } else {
        c->counters.coll_calls[coll]++;
        emit_mark(c, MLSYS_EV_COLL_BEGIN, op, "native async");
        req_pending_add(w, &op->req);
        rc = w->tp->icoll(&op->req, (int)coll, &op->a);
        if (rc) {
            if (!op->req.done)
                req_pending_remove(w, &op->req);
            free(op);
            return rc;
        }
    }
    op->onext = e->open;
    if (e->open)
        e->open->oprev = op;
    e->open = op;
    *req = &op->req;
    return 0;
}

/* Until the engine has run op (or the job is torn down and the engine still has not). */
static void wait_done(icoll_engine *e, icoll_op *op)
{
    uint64_t t0 = mlsys_now_ns();
    while (mlsys_now_ns() - t0 < (e->w->spin_ns ? WAIT_SPIN_NS : 0)) {
        for (int i = 0; i < 64; i++) {
            if (atomic_load_explicit(&op->state, memory_order_acquire) == OP_DONE)
                return;
            cpu_relax();
        }
    }
    pthread_mutex_lock(&e->mu);
    while (atomic_load_explicit(&op->state, memory_order_acquire) != OP_DONE) {
        struct timespec ts;
        mlsys_deadline(&ts, WAIT_SLICE_MS * 1e-3);
        pthread_cond_timedwait(&e->done_cv, &e->mu, &ts);
    }
    pthread_mutex_unlock(&e->mu);
}

/* The caller takes op's outcome: counters, error, the algorithm's name; AVG for the
 * transport's collectives (coll_run did it for ours). */
static int take_result(icoll_engine *e, icoll_op *op, int rc)
{
    mlsys_comm *c = op->req.comm;
    if (e->threaded) {
        mlsys_counters *k = &c->counters;
        k->sends += op->delta.sends;
        k->recvs += op->delta.recvs;
        k->bytes_sent += op->delta.bytes_sent;
        k->bytes_recv += op->delta.bytes_recv;
        for (int i = 0; i < 16; i++)
            k->coll_calls[i] += op->delta.coll_calls[i];
        if (op->algo_name)
            c->last_algo = op->algo_name;
        if (rc)
            mlsys_set_error(c, rc, "%s", op->errmsg);
        emit_mark(c, MLSYS_EV_MARK, op, "icoll waited");
    } else {
        if (!rc && op->a.op == MLSYS_AVG && op->coll != MLSYS_COLL_ALLGATHER && op->a.count)
            mlsys_scale_avg(op->a.recvbuf, op->a.count, op->a.dt, c->size);
        c->last_algo = "native";
        emit_mark(c, MLSYS_EV_COLL_END, op, "native async");
    }
    return rc;
}

static void release(icoll_engine *e, icoll_op *op)
{
    op_unlink(e, op);
    free(op);
}

/* The transport's collective: wait through it; a request given up on is withdrawn. */
static int native_wait(icoll_op *op)
{
    mlsys_world *w = op->req.comm->w;
    int rc = op->req.done ? op->req.status : w->tp->wait(&op->req);
    if (!op->req.done) {
        req_pending_remove(w, &op->req);
        w->tp->cancel(&op->req);
    }
    return rc;
}

int icoll_wait(mlsys_request *r)
{
    icoll_op *op = (icoll_op *)r;
    icoll_engine *e = r->comm->w->icoll;
    int rc;
    if (e->threaded) {
        wait_done(e, op);
        rc = op->rc;
        note_idle(e);
    } else {
        rc = native_wait(op);
    }
    take_result(e, op, rc);
    release(e, op);
    return rc;
}

int icoll_test(mlsys_request *r, int *done)
{
    icoll_op *op = (icoll_op *)r;
    icoll_engine *e = r->comm->w->icoll;
    if (e->threaded) {
        *done = atomic_load_explicit(&op->state, memory_order_acquire) == OP_DONE;
        if (!*done)
            return 0;
        note_idle(e);
        return op->rc;
    }
    if (!r->done)
        r->comm->w->tp->progress(r->comm->w);
    *done = r->done;
    return r->done ? r->status : 0;
}

/* Dropped (mlsys_waitall after a failure): the peers expect the collective, so ours runs to
 * its end all the same; only its outcome is not reported. */
void icoll_drop(mlsys_request *r)
{
    icoll_op *op = (icoll_op *)r;
    icoll_engine *e = r->comm->w->icoll;
    if (e->threaded) {
        wait_done(e, op);
        note_idle(e);
    } else if (!r->done) {
        req_pending_remove(r->comm->w, r);
        r->comm->w->tp->cancel(r);
    }
    release(e, op);
}

int icoll_fence(mlsys_comm *c)
{
    mlsys_world *w = c->w;
    icoll_engine *e = w->icoll;
    if (!e) {
        atomic_store_explicit(&w->icoll_busy, 0, memory_order_relaxed);
        return 0;
    }
    /* Bounded by the collectives' own timeouts: each of them ends, by success or error. */
    pthread_mutex_lock(&e->mu);
    while (atomic_load_explicit(&e->finished, memory_order_acquire) != e->issued) {
        if (w->h && atomic_load(&w->h->abort)) {
            pthread_mutex_unlock(&e->mu);
            mlsys_set_error(c, MLSYS_ERR_ABORTED, "rank %d: job aborted while waiting for the "
                            "non-blocking collectives in flight", c->rank);
            return MLSYS_ERR_ABORTED;
        }
        struct timespec ts;
        mlsys_deadline(&ts, WAIT_SLICE_MS * 1e-3);
        pthread_cond_timedwait(&e->done_cv, &e->mu, &ts);
    }
    pthread_mutex_unlock(&e->mu);
    atomic_store_explicit(&w->icoll_busy, 0, memory_order_relaxed);
    return 0;
}

void icoll_fini(mlsys_world *w)
{
    icoll_engine *e = w->icoll;
    if (!e)
        return;
    int unwaited = 0;
    if (e->threaded && e->started) {
        pthread_mutex_lock(&e->mu);
        e->stop = 1;                /* the thread empties its queue first */
        pthread_cond_signal(&e->work_cv);
        pthread_mutex_unlock(&e->mu);
        pthread_join(e->th, NULL);
        if (w->emit == locked_emit)
            w->emit = NULL;
        else if (w->emit == chained_emit)
            w->emit = e->next_emit;
    }
    while (e->open) {
        icoll_op *op = e->open;
        if (!e->threaded)
            native_wait(op);
        unwaited++;
        release(e, op);
    }
    if (unwaited)
        fprintf(stderr, "mlsys-lab: rank %d: finalize: %d non-blocking collective%s never "
                "waited for (run to completion here)\n", w->rank, unwaited,
                unwaited == 1 ? " was" : "s were");
    pthread_mutex_destroy(&e->mu);
    pthread_mutex_destroy(&e->emit_mu);
    pthread_cond_destroy(&e->work_cv);
    pthread_cond_destroy(&e->done_cv);
    atomic_store(&w->icoll_busy, 0);
    w->icoll = NULL;
    free(e);
}

/* ---- the public calls ---- */

int mlsys_iallreduce(mlsys_comm *c, const void *sendbuf, void *recvbuf, size_t count,
                     mlsys_dtype dt, mlsys_op op, mlsys_request **req)
{
    coll_args a = {sendbuf, recvbuf, count, dt, op, 0};
    return issue(c, MLSYS_COLL_ALLREDUCE, &a, req);
}

int mlsys_ireduce_scatter(mlsys_comm *c, const void *sendbuf, void *recvbuf, size_t count,
                          mlsys_dtype dt, mlsys_op op, mlsys_request **req)
{
    coll_args a = {sendbuf, recvbuf, count, dt, op, 0};
    return issue(c, MLSYS_COLL_REDUCE_SCATTER, &a, req);
}

int mlsys_iallgather(mlsys_comm *c, const void *sendbuf, void *recvbuf, size_t count,
                     mlsys_dtype dt, mlsys_request **req)
{
    coll_args a = {sendbuf, recvbuf, count, dt, MLSYS_OP_NONE, 0};
    return issue(c, MLSYS_COLL_ALLGATHER, &a, req);
}
