/* ui_run.c - the run screen: a live job (or a replayed trace) shown in the views. It starts
 * the job the way the runner does (fork + exec of `mlsys-lab worker LAB flags`, with the lab's
 * before/after hooks captured), pumps its output and events without blocking, and plays the
 * events to the views phase by phase: a phase ends where a rank reaches its next algorithm
 * step, and each phase's packets animate at the chosen speed. In gated mode the ranks wait at
 * every step until `n` grants the next one (mlsys_job_grant_step), and while all of them wait
 * the screen reads each rank's watched buffer (core/trace_values.h). A flood of events
 * (more than the player can animate) is fed to the views at once: views coalesce, and the
 * status line says how many events were fast-forwarded and how many the job lost. */
#include "ui.h"
#include "stepmodel.h"
#include "../job/runner.h"
#include "../../core/trace_values.h"
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#define RUN_RING_EVENTS 65536       /* per rank ring in the job segment */
#define RUN_BACKLOG_MAX 200000      /* the queue never holds more than this */
#define RUN_ANIMATE_MAX 20000       /* more queued than this cannot be animated: fast-forward */
#define RUN_FF_CHUNK 40000          /* events fed per fast-forward, so that a turn stays short */
#define RUN_PHASE_MAX 20000         /* events in one animated phase at most */
#define RUN_SETTLE_NS 30000000ull   /* wait this long after the last arrival to cut a phase */
#define RUN_MAX_VIEWS 8

static const int speeds_ms[] = {2000, 1200, 700, 400, 200, 80, 0};
#define NSPEEDS ((int)(sizeof speeds_ms / sizeof speeds_ms[0]))
#define SPEED_DEFAULT 2

/* ---- queues: one per rank (events arrive in time order per rank) and one for lines ---- */

typedef struct evq {
    mlsys_event *e;
    size_t head, n, cap;            /* ring buffer */
} evq;

typedef struct qline {
    uint64_t t;
    int rank, is_err;
    char *text;
} qline;

/* A full ring buffer of n elements of size sz, doubled (first: first elements), its
 * contents moved to the front so that head becomes 0. */
static void *ring_grow(void *buf, size_t sz, size_t *head, size_t n, size_t *cap, size_t first)
{
    size_t ncap = *cap ? *cap * 2 : first;
    char *nb = grid_xrealloc(NULL, ncap * sz);
    for (size_t i = 0; i < n; i++)
        memcpy(nb + i * sz, (char *)buf + ((*head + i) % *cap) * sz, sz);
    free(buf);
    *cap = ncap;
    *head = 0;
    return nb;
}

static void evq_push(evq *q, const mlsys_event *e)
{
    if (q->n == q->cap)
        q->e = ring_grow(q->e, sizeof *q->e, &q->head, q->n, &q->cap, 1024);
    q->e[(q->head + q->n) % q->cap] = *e;
    q->n++;
}

static const mlsys_event *evq_peek(const evq *q)
{
    return q->n ? &q->e[q->head] : NULL;
}

static void evq_pop(evq *q)
{
    if (q->n) {
        q->head = (q->head + 1) % q->cap;
        q->n--;
    }
}

/* ---- a single-process lab runs as a child `mlsys-lab run LAB ...` with its output piped ---- */

typedef struct child {
    pid_t pid;
    int fd[2];                      /* stdout, stderr read ends; -1 when closed */
    char *buf[2];
    size_t len[2], cap[2];
    int status;
    int reaped;
} child;

typedef struct run {
    const lab *l;               /* NULL for a function job (tests) or a replay */
    int (*fn)(mlsys_comm *, void *);
    void *fn_arg;
    int fn_gated;
    int argc;
    char **argv;
    lab_args a;
    int have_args;
    int replay;
    char title[160];
    /* the job */
    mlsys_job *job;
    child ch;
    int have_child;
    int started, done, result;      /* result: 0 all ranks ok */
    int ran_ranks;                  /* ranks were started (not a lab that answered alone) */
    char notes[4][200];             /* where the chosen algorithm did not run, and why */
    int nnotes;
    unsigned noted;                 /* collectives already noted (one bit each) */
    char why[256];
    int nranks;
    int gated;
    char forced[32];
    int *rank_state, *rank_code, *gate;
    struct watch { uint64_t addr, count; int dtype; } *watch;
    uint64_t grants, read_epoch;
    uint64_t *steps_seen;           /* STEP events per rank: its n-th step is its n-th gate */
    /* the tape */
    evq *q;
    qline *lines;
    size_t lhead, ln, lcap;
    size_t queued;
    uint64_t last_arrival;
    uint64_t events, forwarded, lost;
    /* replay source */
    mlsys_event *rev;
    size_t rn;
    /* trace output (--trace) */
    const char *trace_path;
    char trace_tmp[4200];           /* written there, renamed over trace_path at the end */
    mlsys_event *tev;
    size_t tn, tcap;
    /* the player */
    int paused, step_once, speed, animating;
    uint64_t anim_t0;
    int phases;
    /* views */
    const view_class *cls[RUN_MAX_VIEWS];
    void *vd[RUN_MAX_VIEWS];
    int nviews, cur;
    ui_key_help keys[24];
    char tabkey[16];
    /* the step model every run view reads, and the frame shown */
    stepmodel *sm;
    mlsys_event *smq;               /* events not yet in the model (waiting for order) */
    size_t smn, smcap;
    int frame, want_next, fanimating;
    uint64_t fanim_t0;
} run;

static int by_time(const void *a, const void *b)
{
    const mlsys_event *x = a, *y = b;
    return x->t_ns < y->t_ns ? -1 : x->t_ns > y->t_ns;
}

/* Events reach the model in time order: a drain that began at `upto` has delivered every
 * event written before it, so those can go in; the rest wait for the next drain. */
static void sm_feed(run *r, uint64_t upto)
{
    if (!r->smn)
        return;
    qsort(r->smq, r->smn, sizeof *r->smq, by_time);
    size_t i = 0;
    while (i < r->smn && r->smq[i].t_ns < upto)
        sm_event(r->sm, &r->smq[i++]);
    memmove(r->smq, r->smq + i, (r->smn - i) * sizeof *r->smq);
    r->smn -= i;
}

static int last_frame(const run *r)
{
    int nc = sm_ncomplete(r->sm);
    return nc > 0 ? nc - 1 : 0;
}

static void show_frame(run *r, int k, int animate)
{
    int last = last_frame(r);
    if (k > last)
        k = last;
    if (k < 0)
        k = 0;
    r->fanimating = animate && k == r->frame + 1 && speeds_ms[r->speed] > 0;
    r->fanim_t0 = mlsys_now_ns();
    r->frame = k;
}

static void feed_line(run *r, int rank, int is_err, const char *text)
{
    for (int i = 0; i < r->nviews; i++)
        if (r->cls[i]->line)
            r->cls[i]->line(r->vd[i], rank, is_err, text);
}

static void feed_event(run *r, const mlsys_event *e)
{
    for (int i = 0; i < r->nviews; i++)
        if (r->cls[i]->event)
            r->cls[i]->event(r->vd[i], e);
}

static void push_line(run *r, int rank, int is_err, const char *text)
{
    if (r->ln == r->lcap)
        r->lines = ring_grow(r->lines, sizeof *r->lines, &r->lhead, r->ln, &r->lcap, 256);
    size_t len = strlen(text);
    char *t = grid_xrealloc(NULL, len + 1);
    memcpy(t, text, len + 1);
    r->lines[(r->lhead + r->ln) % r->lcap] = (qline){mlsys_now_ns(), rank, is_err, t};
    r->ln++;
    r->last_arrival = mlsys_now_ns();
}

/* Several lines of text (a hook's captured output) as runner lines. */
static void push_text(run *r, const char *text, int is_err)
{
    if (!text)
        return;
    const char *p = text;
    while (*p) {
        const char *nl = strchr(p, '\n');
        size_t len = nl ? (size_t)(nl - p) : strlen(p);
        char buf[1024];
        snprintf(buf, sizeof buf, "%.*s", (int)(len < sizeof buf ? len : sizeof buf - 1), p);
        push_line(r, -1, is_err, buf);
        p += len + (nl ? 1 : 0);
    }
}

/* The queue whose head comes first: a rank (>= 0), the lines (-1), or -2 when all are empty. */
static int next_src(const run *r)
{
    int best = -2;
    uint64_t bt = 0;
    for (int k = 0; k < r->nranks; k++) {
        const mlsys_event *e = evq_peek(&r->q[k]);
        if (e && (best == -2 || e->t_ns < bt)) {
            best = k;
            bt = e->t_ns;
        }
    }
    if (r->ln && (best == -2 || r->lines[r->lhead].t < bt))
        best = -1;
    return best;
}

static void feed_one(run *r, int src)
{
    if (src == -1) {
        qline *l = &r->lines[r->lhead];
        feed_line(r, l->rank, l->is_err, l->text);
        free(l->text);
        r->lhead = (r->lhead + 1) % r->lcap;
        r->ln--;
        return;
    }
    feed_event(r, evq_peek(&r->q[src]));
    evq_pop(&r->q[src]);
    r->queued--;
}

static void phase_all(run *r)
{
    for (int i = 0; i < r->nviews; i++)
        if (r->cls[i]->phase)
            r->cls[i]->phase(r->vd[i]);
    r->phases++;
}

/* Feed one phase: up to the first step event of a rank that already stepped in it. Returns
 * the events fed, negative when none of them moved a message (nothing to animate). */
static int take_phase(run *r)
{
    unsigned char stepped[64] = {0};
    int fed = 0, src, moved = 0;
    while ((src = next_src(r)) != -2 && fed < RUN_PHASE_MAX) {
        if (src >= 0) {
            const mlsys_event *e = evq_peek(&r->q[src]);
            if (e->kind == MLSYS_EV_STEP && e->rank >= 0 && e->rank < 64) {
                if (stepped[e->rank] && fed)
                    break;
                stepped[e->rank] = 1;
            }
        }
        if (src >= 0) {
            int k = evq_peek(&r->q[src])->kind;
            moved |= k == MLSYS_EV_SEND_BEGIN || k == MLSYS_EV_RECV_END;
        }
        feed_one(r, src);
        fed++;
    }
    if (fed)
        phase_all(r);
    return moved ? fed : -fed;
}

/* Up to max queued items go to the views now, in time order, without animation: a flood
 * cannot be animated, and the views coalesce what they are fed. */
static void fast_forward(run *r, size_t max)
{
    int src;
    size_t n = 0;
    while (n < max && (src = next_src(r)) != -2) {
        if (src >= 0) {
            n++;
            r->forwarded++;
        }
        feed_one(r, src);
    }
    phase_all(r);
}

/* ---- the job's sink ---- */

/* A collective call of rank 0 that did not run the algorithm the learner chose: kept for the
 * notice above the status line, and said once in the log. */
static void note_fallback(run *r, const mlsys_event *e)
{
    char why[200], line[300];
    if (e->coll < 0 || e->coll >= 32 || (r->noted & (1u << e->coll)) ||
        !runner_algo_note(r->forced, r->nranks, e, why, sizeof why))
        return;
    r->noted |= 1u << e->coll;
    if (mlsys_algo_index((mlsys_coll)e->coll, r->forced) >= 0) {
        /* a size or rank count that did not fit comes first: it is the surprise */
        int keep = r->nnotes < 4 ? r->nnotes : 3;
        memmove(r->notes[1], r->notes[0], (size_t)keep * sizeof r->notes[0]);
        snprintf(r->notes[0], sizeof r->notes[0], "%s", why);
        r->nnotes = keep + 1;
    } else if (r->nnotes < 4) {
        snprintf(r->notes[r->nnotes++], sizeof r->notes[0], "%s", why);
    }
    snprintf(line, sizeof line, "you chose the %s algorithm, but %s", r->forced, why);
    push_line(r, -1, 0, line);
}

static void sink_line(void *u, int rank, int is_err, const char *line)
{
    run *r = u;
    line = view_line_rank(line, &rank);     /* rank 0 printed it for another rank */
    if (r->ln >= RUN_BACKLOG_MAX / 2)
        fast_forward(r, RUN_FF_CHUNK);   /* a flood of output: show it, do not hoard it */
    push_line(r, rank, is_err, line);
}

static void sink_events(void *u, const mlsys_event *ev, size_t n)
{
    run *r = u;
    for (size_t i = 0; i < n; i++) {
        const mlsys_event *e = &ev[i];
        r->events++;
        if (e->rank < 0 || e->rank >= r->nranks)
            continue;
        if (e->kind == MLSYS_EV_STEP)
            r->steps_seen[e->rank]++;
        if (e->kind == MLSYS_EV_COLL_BEGIN && e->rank == 0 && r->forced[0])
            note_fallback(r, e);
        if (e->kind == MLSYS_EV_MARK && !strcmp(e->label, MLSYS_MARK_WATCH)) {
            r->watch[e->rank].addr = (uint64_t)e->val[0];
            r->watch[e->rank].count = e->bytes;
            r->watch[e->rank].dtype = e->dtype;
        }
        if (r->trace_path) {
            if (r->tn == r->tcap) {
                r->tcap = r->tcap ? r->tcap * 2 : 4096;
                r->tev = grid_xrealloc(r->tev, r->tcap * sizeof *r->tev);
            }
            r->tev[r->tn++] = *e;
        }
        if (r->smn == r->smcap) {
            r->smcap = r->smcap ? r->smcap * 2 : 4096;
            r->smq = grid_xrealloc(r->smq, r->smcap * sizeof *r->smq);
        }
        r->smq[r->smn++] = *e;
        if (r->queued >= RUN_BACKLOG_MAX)
            fast_forward(r, RUN_FF_CHUNK);   /* the tick did not keep up: bound the memory */
        evq_push(&r->q[e->rank], e);
        r->queued++;
    }
    r->last_arrival = mlsys_now_ns();
}

/* ---- views ---- */

static void views_reset(run *r)
{
    sm_reset(r->sm, r->nranks);
    r->smn = 0;
    r->frame = r->want_next = r->fanimating = 0;
    for (int i = 0; i < r->nviews; i++)
        r->cls[i]->reset(r->vd[i], r->nranks);
    r->phases = 0;
}

static void views_create(run *r, const char *first)
{
    r->sm = sm_create();
    r->nviews = 0;
    for (int i = 0; view_classes[i] && r->nviews < RUN_MAX_VIEWS; i++) {
        r->cls[r->nviews] = view_classes[i];
        r->vd[r->nviews] = view_classes[i]->create();
        r->nviews++;
    }
    r->cur = 0;
    for (int i = 0; i < r->nviews; i++)
        if (first && !strcmp(r->cls[i]->name, first))
            r->cur = i;
    views_reset(r);
}

static void alloc_ranks(run *r, int n)
{
    r->nranks = n;
    free(r->q);
    free(r->rank_state);
    free(r->rank_code);
    free(r->gate);
    free(r->watch);
    free(r->steps_seen);
    r->steps_seen = mlsys_xcalloc((size_t)(n ? n : 1), sizeof *r->steps_seen);
    r->q = mlsys_xcalloc((size_t)(n ? n : 1), sizeof *r->q);
    r->rank_state = mlsys_xcalloc((size_t)(n ? n : 1), sizeof(int));
    r->rank_code = mlsys_xcalloc((size_t)(n ? n : 1), sizeof(int));
    r->gate = mlsys_xcalloc((size_t)(n ? n : 1), sizeof(int));
    r->watch = mlsys_xcalloc((size_t)(n ? n : 1), sizeof *r->watch);
    for (int i = 0; i < n; i++)
        r->gate[i] = -1;
}

static void clear_tape(run *r)
{
    for (int k = 0; k < r->nranks; k++) {
        r->steps_seen[k] = 0;
        memset(&r->watch[k], 0, sizeof r->watch[k]);
    }
    for (int k = 0; k < r->nranks; k++) {
        free(r->q[k].e);
        memset(&r->q[k], 0, sizeof r->q[k]);
    }
    while (r->ln) {
        free(r->lines[r->lhead].text);
        r->lhead = (r->lhead + 1) % r->lcap;
        r->ln--;
    }
    r->queued = 0;
    r->events = r->forwarded = r->lost = 0;
    r->tn = 0;
}

/* ---- starting and ending the job ---- */

typedef struct hook_call {
    const lab *l;
    const lab_args *a;
    int status;
} hook_call;

static int call_before(void *u)
{
    hook_call *h = u;
    return h->l->before(h->a);
}

static int call_after(void *u)
{
    hook_call *h = u;
    h->l->after(h->a, h->status);
    return 0;
}

static void child_start(run *r, char *err, size_t n)
{
    pid_t pid;
    int fd[2];
    if (runner_start_single(r->l, r->argc, r->argv, &pid, fd, err, n) != 0)
        return;
    memset(&r->ch, 0, sizeof r->ch);
    r->ch.pid = pid;
    r->ch.fd[0] = fd[0];
    r->ch.fd[1] = fd[1];
    r->have_child = 1;
}

/* Read what the child wrote; 1 while it runs. */
static int child_pump(run *r)
{
    child *c = &r->ch;
    for (int k = 0; k < 2; k++) {
        if (c->fd[k] < 0)
            continue;
        char buf[4096];
        for (;;) {
            ssize_t got = read(c->fd[k], buf, sizeof buf);
            if (got < 0 && errno == EINTR)
                continue;
            if (got <= 0) {
                if (got == 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) {
                    if (c->len[k]) {
                        c->buf[k][c->len[k]] = 0;
                        push_line(r, 0, k, c->buf[k]);
                        c->len[k] = 0;
                    }
                    close(c->fd[k]);
                    c->fd[k] = -1;
                }
                break;
            }
            for (ssize_t i = 0; i < got; i++) {
                if (c->len[k] + 2 > c->cap[k]) {
                    c->cap[k] = c->cap[k] ? c->cap[k] * 2 : 256;
                    c->buf[k] = grid_xrealloc(c->buf[k], c->cap[k]);
                }
                if (buf[i] == '\n') {
                    c->buf[k][c->len[k]] = 0;
                    push_line(r, 0, k, c->buf[k]);
                    c->len[k] = 0;
                } else {
                    c->buf[k][c->len[k]++] = buf[i];
                }
            }
        }
    }
    if (!c->reaped) {
        int st;
        if (waitpid(c->pid, &st, WNOHANG) == c->pid) {
            c->reaped = 1;
            c->status = st;
        }
    }
    return !(c->reaped && c->fd[0] < 0 && c->fd[1] < 0);
}

static void child_stop(run *r)
{
    child *c = &r->ch;
    if (!r->have_child)
        return;
    if (!c->reaped) {
        kill(-c->pid, SIGTERM);
        kill(c->pid, SIGKILL);
        waitpid(c->pid, &c->status, 0);
        c->reaped = 1;
    }
    for (int k = 0; k < 2; k++) {
        if (c->fd[k] >= 0)
            close(c->fd[k]);
        c->fd[k] = -1;
        free(c->buf[k]);
        c->buf[k] = NULL;
        c->len[k] = c->cap[k] = 0;
    }
    r->have_child = 0;
}

static void update_states(run *r)
{
    for (int k = 0; k < r->nranks && r->job; k++) {
        const mlsys_rank_status *s = mlsys_job_status(r->job, k);
        int st;
        if (!s->exited && s->code == 0)
            st = VIEW_RANK_RUNNING;
        else if (s->exited && s->code == 0)
            st = VIEW_RANK_DONE;
        else if (s->killed_by_us)
            st = VIEW_RANK_STOPPED;
        else
            st = VIEW_RANK_FAILED;
        r->rank_state[k] = st;
        r->rank_code[k] = s->exited ? s->code : -s->code;
        r->gate[k] = st == VIEW_RANK_RUNNING && r->gated ? mlsys_job_gate_step(r->job, k) : -1;
    }
}

static void finish(run *r, int rc)
{
    r->done = 1;
    r->result = rc;
    sm_feed(r, UINT64_MAX);
    sm_finish(r->sm);
    if (r->job) {
        update_states(r);
        r->lost = mlsys_job_events_lost(r->job);
        for (int k = 0; k < r->nranks; k++)
            r->gate[k] = -1;
        if (r->trace_path && r->trace_tmp[0]) {
            char line[600];
            trace_buf tb = {r->tev, r->tn, r->tcap};
            if (runner_trace_commit(r->trace_path, r->trace_tmp, &tb, mlsys_job_t0_ns(r->job)))
                snprintf(line, sizeof line, "could not write the trace to %s", r->trace_path);
            else
                snprintf(line, sizeof line, "trace: %zu events written to %s (%llu lost)", r->tn,
                         r->trace_path, (unsigned long long)r->lost);
            r->trace_tmp[0] = 0;
            push_line(r, -1, 0, line);
        }
        mlsys_job_free(r->job);
        r->job = NULL;
    }
    if (r->have_args && r->l && r->l->after) {
        hook_call h = {r->l, &r->a, rc};
        int ignored;
        char *text = ui_capture(call_after, &h, &ignored);
        push_text(r, text, 0);
        free(text);
    }
    char line[400];
    snprintf(line, sizeof line, "%s", rc == 0 ? "finished: every rank exited 0" : r->why);
    push_line(r, -1, rc != 0, line);
    if (r->l)
        ui_progress_record(r->l->id, rc == 0);
}

static void job_stop(run *r)
{
    if (r->job) {
        mlsys_job_free(r->job);
        r->job = NULL;
    }
    if (r->trace_tmp[0]) {             /* stopped before the end: an old trace stays */
        unlink(r->trace_tmp);
        r->trace_tmp[0] = 0;
    }
    child_stop(r);
    if (r->have_args) {
        lab_args_free(&r->a);
        r->have_args = 0;
    }
}

/* A job of a function instead of a lab (the tests' and measurements' way in). */
static int fn_begin(run *r, char *err, size_t n)
{
    mlsys_launch_opts o;
    memset(&o, 0, sizeof o);
    o.world_size = r->nranks;
    o.timeout_ms = 30000;
    o.trace_capacity = RUN_RING_EVENTS;
    o.gated = r->fn_gated;
    o.capture_output = 1;
    r->gated = o.gated;
    clear_tape(r);
    views_reset(r);
    r->paused = r->gated;
    r->step_once = r->animating = 0;
    runner_spec spec = {.fn = r->fn, .arg = r->fn_arg, .tagged = 1};
    r->job = runner_start(&o, &spec, err, n);
    if (!r->job)
        return -1;
    r->started = 1;
    r->ran_ranks = 1;
    for (int k = 0; k < r->nranks; k++)
        r->rank_state[k] = VIEW_RANK_RUNNING;
    return 0;
}

static int job_begin(run *r, char *err, size_t n)
{
    err[0] = 0;
    r->done = r->started = r->ran_ranks = 0;
    r->result = 0;
    r->why[0] = 0;
    r->nnotes = 0;
    r->noted = 0;
    r->grants = r->read_epoch = 0;
    if (r->fn)
        return fn_begin(r, err, n);
    int rc = lab_args_parse(r->l, r->argc, r->argv, &r->a, err, n);
    if (rc)
        return -1;
    r->have_args = 1;
    mlsys_launch_opts o;
    if (runner_fill_opts(r->l, &r->a, &o, err, n)) {
        return -1;
    }
    const char *backend = lab_arg_str(&r->a, "backend");
    if (backend && !strcmp(backend, "mpi")) {
        snprintf(err, n, "the mpi backend runs headless for now: mlsys-lab run %s --backend mpi",
                 r->l->id);
        return -1;
    }
    const char *algo = lab_arg_str(&r->a, "algo");
    snprintf(r->forced, sizeof r->forced, "%s", algo && strcmp(algo, "auto") ? algo : "");
    r->trace_path = r->l->rank_main ? lab_arg_str(&r->a, "trace") : NULL;
    if (r->trace_path && runner_trace_prepare(r->trace_path, r->trace_tmp, sizeof r->trace_tmp,
                                              err, n) != 0)
        return -1;                   /* checked before the job, as the command line does */
    r->gated = o.gated;
    alloc_ranks(r, r->l->rank_main ? o.world_size : 1);
    clear_tape(r);
    views_reset(r);
    r->paused = r->gated;            /* gated: wait for n; otherwise play */
    r->step_once = 0;
    r->animating = 0;
    if (!r->l->rank_main) {
        child_start(r, err, n);
        if (!r->have_child)
            return -1;
        r->started = 1;
        r->rank_state[0] = VIEW_RANK_RUNNING;
        return 0;
    }
    if (r->l->before) {
        hook_call h = {r->l, &r->a, 0};
        int brc;
        char *text = ui_capture(call_before, &h, &brc);
        push_text(r, text, 0);
        free(text);
        if (brc >= 0) {                  /* the lab answered without ranks: its text is all */
            mlsys_event *sev = NULL;     /* ... or events it made up for its view */
            size_t ns = brc == 0 && r->l->synth_events ? r->l->synth_events(&r->a, &sev) : 0;
            int lanes = 0;
            for (size_t i = 0; i < ns; i++)
                if (sev[i].rank >= lanes && sev[i].rank < 64)
                    lanes = sev[i].rank + 1;
            if (lanes > r->nranks) {
                alloc_ranks(r, lanes);
                views_reset(r);
            }
            for (size_t i = 0; i < ns; i++)
                if (sev[i].rank >= 0 && sev[i].rank < r->nranks) {
                    evq_push(&r->q[sev[i].rank], &sev[i]);
                    r->queued++;
                }
            free(sev);
            for (int i = 0; i < r->nviews; i++)
                if (!strcmp(r->cls[i]->name, ns && r->l->view ? r->l->view : "log"))
                    r->cur = i;
            if (r->trace_tmp[0]) {
                unlink(r->trace_tmp);
                r->trace_tmp[0] = 0;
            }
            snprintf(r->why, sizeof r->why, "%s", brc == 0 ? "finished: the lab answered "
                     "without starting ranks" : "the lab stopped before starting its ranks");
            r->started = 1;
            r->done = 1;
            r->result = brc;
            push_line(r, -1, brc != 0, r->why);
            return 0;
        }
    }
    o.trace_capacity = RUN_RING_EVENTS;
    o.capture_output = 1;
    runner_spec spec = {.l = r->l, .argc = r->argc, .argv = r->argv, .tagged = 1};
    r->job = runner_start(&o, &spec, err, n);
    if (!r->job)
        return -1;
    r->started = 1;
    r->ran_ranks = 1;
    for (int k = 0; k < r->nranks; k++)
        r->rank_state[k] = VIEW_RANK_RUNNING;
    return 0;
}

/* While every live rank waits at the gate, read the buffers they watch, once per grant. */
static void read_watched(run *r)
{
    if (!r->job || !r->gated || r->read_epoch == r->grants + 1)
        return;
    int any = 0;
    for (int k = 0; k < r->nranks; k++) {
        if (r->rank_state[k] != VIEW_RANK_RUNNING)
            continue;
        /* at the gate of the step after the last grant: not still at the one before it */
        if (r->gate[k] < 0 || r->steps_seen[k] != r->grants + 1)
            return;
        any |= r->watch[k].addr != 0;
    }
    r->read_epoch = r->grants + 1;
    if (!any)
        return;
    double *v = mlsys_xcalloc(64, sizeof *v);
    for (int k = 0; k < r->nranks; k++) {
        struct watch *w = &r->watch[k];
        if (!w->addr || r->rank_state[k] != VIEW_RANK_RUNNING)
            continue;
        size_t cnt = w->count < 64 ? w->count : 64;
        const mlsys_rank_status *s = mlsys_job_status(r->job, k);
        if (mlsys_values_read(s->pid, w->addr, cnt, w->dtype, v) != 0)
            continue;
        mlsys_event e;
        memset(&e, 0, sizeof e);
        e.kind = MLSYS_EV_MARK;
        e.rank = k;
        e.peer = e.tag = e.step = -1;
        e.coll = e.algo = e.op = -1;
        e.dtype = -1;
        e.span_id = 1;                   /* read live from the rank's memory */
        e.bytes = w->count;
        snprintf(e.label, sizeof e.label, "%s", MLSYS_MARK_VALUES);
        e.t_ns = mlsys_now_ns();
        for (size_t i = 0; i < cnt; i += 4) {
            e.chunk = (int32_t)i;
            e.tag = (int32_t)(cnt - i < 4 ? cnt - i : 4);
            memset(e.val, 0, sizeof e.val);
            memcpy(e.val, v + i, (size_t)e.tag * sizeof v[0]);
            evq_push(&r->q[k], &e);
            r->queued++;
        }
    }
    free(v);
    r->last_arrival = mlsys_now_ns();
}

static int all_at_gate(const run *r)
{
    int waiting = 0;
    for (int k = 0; k < r->nranks; k++) {
        if (r->rank_state[k] == VIEW_RANK_RUNNING && r->gate[k] < 0)
            return 0;
        waiting |= r->gate[k] >= 0;
    }
    return waiting;
}

static void grant(run *r)
{
    if (r->job && !r->done) {
        mlsys_job_grant_step(r->job);
        r->grants++;
    }
}

/* ---- the screen ---- */

static double anim_progress(const run *r, uint64_t now)
{
    int ms = speeds_ms[r->speed];
    if (!r->animating || ms == 0)
        return 1.0;
    double p = (double)(now - r->anim_t0) / (ms * 1e6);
    return p > 1.0 ? 1.0 : p;
}

static int run_tick(ui_screen *s, uint64_t now, int *tmo)
{
    run *r = s->data;
    int flags = 0;
    if (r->job && !r->done) {
        mlsys_job_sink sink = {sink_line, sink_events, r};
        char why[256];
        uint64_t drained = mlsys_now_ns() - 1000000ull;
        int rc = mlsys_job_wait(r->job, &sink, 0, why, sizeof why);
        if (rc == 1)
            sm_feed(r, drained);
        if (rc != 1) {
            snprintf(r->why, sizeof r->why, "%s", why);
            finish(r, rc);
            flags |= UI_REDRAW;
        } else {
            int before[64];
            int nb = r->nranks < 64 ? r->nranks : 64;
            memcpy(before, r->gate, (size_t)nb * sizeof(int));
            update_states(r);
            for (int k = 0; k < r->nranks; k++)
                if (r->rank_state[k] != VIEW_RANK_RUNNING)
                    sm_rank_ended(r->sm, k);
            r->lost = mlsys_job_events_lost(r->job);
            if (memcmp(before, r->gate, (size_t)nb * sizeof(int)))
                flags |= UI_REDRAW;
            read_watched(r);
        }
    } else if (r->have_child && !r->done) {
        if (!child_pump(r)) {
            int st = r->ch.status, code = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
            r->rank_state[0] = code == 0 ? VIEW_RANK_DONE : VIEW_RANK_FAILED;
            r->rank_code[0] = WIFEXITED(st) ? code : -WTERMSIG(st);
            snprintf(r->why, sizeof r->why, code == 0 ? "finished" : "the lab exited with "
                     "status %d", code);
            child_stop(r);
            finish(r, code);
            flags |= UI_REDRAW;
        }
    }
    /* the frame player: the ring view's frames, one per step */
    int ms = speeds_ms[r->speed];
    {
        int last = last_frame(r);
        uint64_t period = (uint64_t)(ms ? ms : 1) * 1500000ull;
        if (r->fanimating && now - r->fanim_t0 >= (uint64_t)ms * 1000000ull) {
            r->fanimating = 0;
            flags |= UI_REDRAW;
        }
        if (r->fanimating)
            flags |= UI_REDRAW;
        if (r->want_next && r->frame < last) {
            r->want_next = 0;
            show_frame(r, r->frame + 1, 1);
            flags |= UI_REDRAW;
        } else if (!r->paused && !r->fanimating && r->frame < last &&
                   now - r->fanim_t0 >= (ms ? period : 0)) {
            show_frame(r, r->frame + 1, 1);
            flags |= UI_REDRAW;
        }
        if (r->frame < last || r->fanimating)
            *tmo = 33;
    }
    if (r->animating) {
        if (now - r->anim_t0 >= (uint64_t)ms * 1500000ull) {   /* the move, then a pause */
            r->animating = 0;
        }
        flags |= UI_REDRAW;
    }
    int have = r->queued > 0 || r->ln > 0;
    int settled = r->done || r->replay || now - r->last_arrival >= RUN_SETTLE_NS ||
                  r->queued >= RUN_PHASE_MAX;
    /* a gated job's ranks stand still at the gate: what they did so far is always shown,
     * and pause only stops the automatic grants */
    int gated_live = r->gated && !r->replay && (r->job || r->done);
    if (!r->animating && have && settled && (!r->paused || r->step_once || gated_live)) {
        int moved = 1;
        if (r->queued > RUN_ANIMATE_MAX && !r->replay) {
            fast_forward(r, RUN_FF_CHUNK);
            moved = 0;
        } else
            moved = take_phase(r) > 0;
        r->step_once = 0;
        r->animating = ms > 0 && moved;
        r->anim_t0 = now;
        flags |= UI_REDRAW;
    } else if (!r->animating && !have && !r->paused && r->gated && r->job && all_at_gate(r) &&
               r->frame >= last_frame(r) && !r->fanimating) {
        grant(r);                    /* playing a gated job: one step per animation period */
        r->anim_t0 = now;
        r->animating = ms > 0;
    }
    if (r->animating)
        *tmo = 33;
    else if (have && (!r->paused || r->step_once || gated_live))
        *tmo = 10;
    else if (r->job || r->have_child)
        *tmo = r->gated ? 100 : 20;
    return flags;
}

/* The title says what ran: ranks, one process, or a lab that answered without ranks. */
static void run_title(ui_screen *s, char *out, size_t n)
{
    run *r = s->data;
    if (!r->l || r->replay) {
        snprintf(out, n, "%s", r->title);
        return;
    }
    const char *dot = ui_options()->ascii ? "-" : "·";
    if (!r->l->rank_main)
        snprintf(out, n, "%s %s one process", r->l->id, dot);
    else if (r->started && !r->ran_ranks)
        snprintf(out, n, "%s %s no ranks started", r->l->id, dot);
    else
        snprintf(out, n, "%s %s %d rank%s%s", r->l->id, dot, r->nranks, r->nranks == 1 ? "" :
                 "s", r->gated ? ", gated" : "");
}

static int run_busy(ui_screen *s)
{
    run *r = s->data;
    return !r->done && (r->job != NULL || r->have_child);
}

static const ui_key_help *run_keys(ui_screen *s)
{
    run *r = s->data;
    int k = 0;
    r->keys[k++] = (ui_key_help){"space", r->paused ? "play" : "pause"};
    int ascii = ui_options()->ascii;
    r->keys[k++] = (ui_key_help){ascii ? "n/Right" : "n/→", "step"};
    r->keys[k++] = (ui_key_help){ascii ? "b/Left" : "b/←", "back"};
    r->keys[k++] = (ui_key_help){"+/-", "speed"};
    r->keys[k++] = (ui_key_help){"[/]", "collective"};
    r->keys[k++] = (ui_key_help){"Home/End", "first/last"};
    r->keys[k++] = (ui_key_help){"r", r->replay ? "restart" : "rerun"};
    snprintf(r->tabkey, sizeof r->tabkey, "Tab/1-%d", r->nviews);
    r->keys[k++] = (ui_key_help){r->tabkey, "view"};
    const ui_key_help *vk = r->cls[r->cur]->keys;
    for (int i = 0; vk && vk[i].key && k < 22; i++)
        r->keys[k++] = vk[i];
    r->keys[k] = (ui_key_help){NULL, NULL};
    return r->keys;
}

static const char *const *run_help(ui_screen *s)
{
    run *r = s->data;
    static const char *lines[8];
    int k = 0;
    lines[k++] = r->cls[r->cur]->help;
    lines[k++] = "Events play phase by phase: a phase ends where a rank reaches its next "
                 "algorithm step.";
    if (r->gated)
        lines[k++] = "Gated: the ranks wait at every step until n lets them take the next "
                     "one; space lets them run at the chosen speed.";
    else
        lines[k++] = "Start a lab with gated on (in its form) to hold the real ranks at "
                     "every step.";
    if (!strcmp(r->cls[r->cur]->name, "ring"))
        lines[k++] = ui_options()->ascii ?
        "Cells: the rank whose data a cell holds (2), several (0+1), all of them (all), none (.)." :
        "Cells: the rank whose data a cell holds (2), several (0+1), all of them (all), none (·).";
    if (!strcmp(r->cls[r->cur]->name, "ring"))
        lines[k++] = "The values under the cells are what the rank printed, sent, or (gated) "
                     "had in memory at the gate.";
    lines[k] = NULL;
    return lines;
}

static void status_line(run *r, grid *g, int x, int y, int w)
{
    char left[400], right[200];
    grid_attr la = 0;
    if (!r->started) {
        snprintf(left, sizeof left, "not started");
    } else if (r->replay) {
        snprintf(left, sizeof left, "replay of %zu events%s", r->rn,
                 r->queued ? "" : ": the end (r plays it again)");
    } else if (r->done && r->frame < last_frame(r) && r->result == 0) {
        snprintf(left, sizeof left, "the job has ended; showing step %d of %d (End: the last)",
                 r->frame, last_frame(r));
    } else if (r->done && r->result == 0 && (r->queued || r->ln)) {
        /* the views are behind the job: say so rather than "finished" over half a log */
        snprintf(left, sizeof left, "the job has ended; its output is still playing (End: "
                 "all of it)");
    } else if (r->done) {
        snprintf(left, sizeof left, "%s", r->result != 0 ? r->why : !r->ran_ranks ? r->why :
                 "finished: every rank exited 0");
        la = r->result == 0 ? GRID_PAIR(UI_PAIR_OK) | GRID_BOLD : GRID_PAIR(UI_PAIR_ERR) | GRID_BOLD;
    } else if (r->gated && all_at_gate(r)) {
        int st = -1;
        for (int k = 0; k < r->nranks; k++)
            if (r->gate[k] >= 0) {
                st = r->gate[k];
                break;
            }
        (void)st;
        snprintf(left, sizeof left, "the ranks wait at gate %d: n lets them take it",
                 sm_nframes(r->sm) - 1);
        la = GRID_PAIR(UI_PAIR_WARN) | GRID_BOLD;
    } else {
        snprintf(left, sizeof left, "running");
        la = GRID_PAIR(UI_PAIR_OK);
    }
    const char *dot = g->ascii ? " - " : " · ";
    int ms = speeds_ms[r->speed];
    char sp[32];
    if (ms)
        snprintf(sp, sizeof sp, "%d ms/phase", ms);
    else
        snprintf(sp, sizeof sp, "no animation");
    int narrow = w < 100;
    if (narrow)
        snprintf(sp, sizeof sp, "%d ms", ms);
    int last = last_frame(r), ended = (r->done || r->replay) && r->frame >= last &&
                                      !r->queued && !r->ln;
    const char *state = ended ? "the end" : r->paused ? "paused" : "playing";
    int used;
    if (narrow) {
        /* 80 columns: what the learner acts on; the counts are in the ring's side panel */
        used = snprintf(right, sizeof right, "%s%sstep %d/%d", state, dot, r->frame,
                        sm_nframes(r->sm) - 1);
        if (r->lost)
            snprintf(right + used, sizeof right - (size_t)used, "%s%llu lost", dot,
                     (unsigned long long)r->lost);
    } else {
        used = snprintf(right, sizeof right, "%s%s%s%sstep %d/%d%s%llu events", state, dot, sp,
                        dot, r->frame, sm_nframes(r->sm) - 1, dot,
                        (unsigned long long)r->events);
        if (r->forwarded)
            used += snprintf(right + used, sizeof right - (size_t)used, "%s%llu fast-forwarded",
                             dot, (unsigned long long)r->forwarded);
        snprintf(right + used, sizeof right - (size_t)used, "%s%llu lost", dot,
                 (unsigned long long)r->lost);
    }
    int rw = grid_text_width(right, strlen(right));
    grid_fill(g, x, y, w, 1, ' ', GRID_PAIR(UI_PAIR_BAR) | GRID_REVERSE);
    view_put_clipped(g, x + 1, y, w - rw - 4, left, la | GRID_REVERSE);
    grid_put(g, x + w - rw - 1, y, right, (r->lost ? GRID_PAIR(UI_PAIR_ERR) :
             GRID_PAIR(UI_PAIR_BAR)) | GRID_REVERSE);
}

static void run_draw(ui_screen *s, grid *g, int x, int y, int w, int h)
{
    run *r = s->data;
    /* the view tabs */
    int cx = x + 1;
    for (int i = 0; i < r->nviews; i++) {
        char t[48];
        snprintf(t, sizeof t, " %d %s ", i + 1, r->cls[i]->title);
        cx += grid_put(g, cx, y, t, i == r->cur ? GRID_PAIR(UI_PAIR_SEL) | GRID_REVERSE |
                       GRID_BOLD : GRID_DIM);
        cx++;
    }
    if (!r->replay && r->l)
        view_put_clipped(g, cx + 2, y, x + w - cx - 3, r->l->title, GRID_DIM);
    view_ctx ctx;
    memset(&ctx, 0, sizeof ctx);
    ctx.nranks = r->nranks;
    ctx.anim = anim_progress(r, mlsys_now_ns());
    ctx.ascii = g->ascii;
    ctx.live = r->job != NULL && !r->done;
    ctx.gated = r->gated;
    ctx.gate_step = r->gated ? r->gate : NULL;
    /* while the player is behind a job that has ended, a rank that ended well still shows
     * as running: its box is in the past; a failure shows at once */
    int shown_state[64];
    int ns = r->nranks < 64 ? r->nranks : 64;
    for (int k = 0; k < ns; k++)
        shown_state[k] = r->done && r->q[k].n && r->rank_state[k] == VIEW_RANK_DONE ?
                         VIEW_RANK_RUNNING : r->rank_state[k];
    ctx.rank_state = r->replay ? NULL : r->nranks <= 64 ? shown_state : r->rank_state;
    ctx.rank_code = r->replay ? NULL : r->rank_code;
    ctx.failed_rank = -1;
    for (int k = 0; k < r->nranks; k++)
        if (r->rank_state[k] == VIEW_RANK_FAILED && ctx.failed_rank < 0)
            ctx.failed_rank = k;
    ctx.forced_algo = r->forced[0] ? r->forced : NULL;
    ctx.events = r->events;
    ctx.lost = r->lost;
    ctx.sm = r->sm;
    ctx.frame = r->frame;
    ctx.scrub = r->replay || r->done;
    ctx.waiting = r->gated && r->job && !r->done && all_at_gate(r);
    if (!strcmp(r->cls[r->cur]->name, "ring")) {
        int ms = speeds_ms[r->speed];
        double p = r->fanimating && ms ? (double)(mlsys_now_ns() - r->fanim_t0) / (ms * 1e6) : 1.0;
        ctx.anim = p > 1.0 ? 1.0 : p;
    }
    r->cls[r->cur]->draw(r->vd[r->cur], g, x + 1, y + 2, w - 2, h - 4, &ctx);
    grid_unclip(g);
    if (r->nnotes) {
        char note[400];
        snprintf(note, sizeof note, "you chose %s, but %s%s", r->forced, r->notes[0],
                 r->nnotes > 1 ? " (more in the log)" : "");
        grid_fill(g, x, y + h - 2, w, 1, ' ', 0);
        view_put_clipped(g, x + 1, y + h - 2, w - 2, note, GRID_PAIR(UI_PAIR_WARN) | GRID_BOLD);
    }
    status_line(r, g, x, y + h - 1, w);
}

static int rerun(run *r)
{
    if (r->replay) {
        clear_tape(r);
        views_reset(r);
        for (size_t i = 0; i < r->rn; i++) {
            int k = r->rev[i].rank;
            if (k >= 0 && k < r->nranks) {
                evq_push(&r->q[k], &r->rev[i]);
                r->queued++;
            }
        }
        r->events = r->rn;
        for (size_t i = 0; i < r->rn; i++)
            sm_event(r->sm, &r->rev[i]);
        sm_finish(r->sm);
        r->frame = 0;
        r->fanim_t0 = 0;
        r->paused = 0;
        r->animating = 0;
        return UI_HANDLED | UI_REDRAW;
    }
    job_stop(r);
    char err[512];
    if (job_begin(r, err, sizeof err) != 0) {
        r->started = 1;
        r->done = 1;
        r->result = 2;
        snprintf(r->why, sizeof r->why, "%.250s", err);
        push_line(r, -1, 1, err);
    }
    return UI_HANDLED | UI_REDRAW;
}

static int run_key(ui_screen *s, int key)
{
    run *r = s->data;
    switch (key) {
    case ' ':
        r->paused = !r->paused;
        return UI_HANDLED | UI_REDRAW;
    case 'n': case UI_KEY_RIGHT:
        r->paused = 1;
        if (r->frame < last_frame(r)) {
            show_frame(r, r->frame + 1, 1);      /* a step already recorded */
        } else if (r->gated && r->job && !r->done) {
            grant(r);                /* one more step for every rank; shown when it is done */
            r->want_next = 1;
            r->animating = 0;
        }
        if (r->queued || r->ln)
            r->step_once = 1;
        return UI_HANDLED | UI_REDRAW;
    case 'b': case UI_KEY_LEFT:
        r->paused = 1;
        show_frame(r, r->frame - 1, 0);
        return UI_HANDLED | UI_REDRAW;
    case UI_KEY_HOME:
        r->paused = 1;
        show_frame(r, 0, 0);
        return UI_HANDLED | UI_REDRAW;
    case UI_KEY_END:
        if (r->queued || r->ln)
            fast_forward(r, (size_t)-1);     /* every line and event to the views now */
        show_frame(r, last_frame(r), 0);
        return UI_HANDLED | UI_REDRAW;
    case '[': case ']': {
        int k = sm_next_call_frame(r->sm, r->frame, key == ']' ? 1 : -1);
        r->paused = 1;
        if (k >= 0)
            show_frame(r, k, 0);
        return UI_HANDLED | UI_REDRAW;
    }
    case '+': case '=':
        if (r->speed < NSPEEDS - 1)
            r->speed++;
        return UI_HANDLED | UI_REDRAW;
    case '-': case '_':
        if (r->speed > 0)
            r->speed--;
        return UI_HANDLED | UI_REDRAW;
    case 'r':
        return rerun(r);
    case UI_KEY_TAB:
        r->cur = (r->cur + 1) % r->nviews;
        return UI_HANDLED | UI_REDRAW;
    case UI_KEY_BTAB:
        r->cur = (r->cur + r->nviews - 1) % r->nviews;
        return UI_HANDLED | UI_REDRAW;
    default:
        if (key >= '1' && key < '1' + r->nviews) {
            r->cur = key - '1';
            return UI_HANDLED | UI_REDRAW;
        }
        if (r->cls[r->cur]->key)
            return r->cls[r->cur]->key(r->vd[r->cur], key);
        return 0;
    }
}

static void run_free(ui_screen *s)
{
    run *r = s->data;
    job_stop(r);
    clear_tape(r);
    free(r->lines);
    free(r->q);
    free(r->rank_state);
    free(r->rank_code);
    free(r->gate);
    free(r->watch);
    free(r->steps_seen);
    free(r->tev);
    free(r->rev);
    free(r->smq);
    sm_free(r->sm);
    for (int i = 0; i < r->nviews; i++)
        r->cls[i]->free(r->vd[i]);
    for (int i = 0; i < r->argc; i++)
        free(r->argv[i]);
    free(r->argv);
    free(r);
    free(s);
}

static const ui_screen_class run_class = {
    .name = "run",
    .title = run_title,
    .keys = run_keys,
    .help = run_help,
    .draw = run_draw,
    .key = run_key,
    .tick = run_tick,
    .free = run_free,
    .busy = run_busy,
};

static ui_screen *wrap(run *r)
{
    ui_screen *s = mlsys_xcalloc(1, sizeof *s);
    s->cls = &run_class;
    s->data = r;
    return s;
}

ui_screen *run_create_job(const lab *l, int argc, char **argv, char *err, size_t n)
{
    run *r = mlsys_xcalloc(1, sizeof *r);
    r->l = l;
    r->argc = argc;
    r->argv = mlsys_xcalloc((size_t)argc + 1, sizeof(char *));
    for (int i = 0; i < argc; i++)
        r->argv[i] = mlsys_xstrdup(argv[i]);
    r->speed = SPEED_DEFAULT;
    alloc_ranks(r, 1);
    views_create(r, l->view);
    if (job_begin(r, err, n) != 0) {
        ui_screen *s = wrap(r);
        run_free(s);
        return NULL;
    }
    snprintf(r->title, sizeof r->title, "%s %s %d rank%s%s", l->id, ui_options()->ascii ? "-" :
             "·", r->nranks, r->nranks == 1 ? "" : "s", r->gated ? ", gated" : "");
    return wrap(r);
}

ui_screen *run_create_fn(const char *title, int nranks, int gated,
                         int (*fn)(mlsys_comm *, void *), void *arg, char *err, size_t n)
{
    run *r = mlsys_xcalloc(1, sizeof *r);
    r->fn = fn;
    r->fn_arg = arg;
    r->fn_gated = gated;
    r->speed = SPEED_DEFAULT;
    r->argv = mlsys_xcalloc(1, sizeof(char *));
    alloc_ranks(r, nranks);
    views_create(r, "ring");
    snprintf(r->title, sizeof r->title, "%s", title);
    if (job_begin(r, err, n) != 0) {
        ui_screen *s = wrap(r);
        run_free(s);
        return NULL;
    }
    return wrap(r);
}

void run_stats(ui_screen *s, run_stats_t *st)
{
    run *r = s->data;
    st->events = r->events;
    st->forwarded = r->forwarded;
    st->lost = r->lost;
    st->queued = r->queued;
    st->phases = (uint64_t)r->phases;
    st->done = r->done;
    st->result = r->result;
}

ui_screen *run_create_replay(const char *title, mlsys_event *ev, size_t n, int nranks)
{
    run *r = mlsys_xcalloc(1, sizeof *r);
    r->replay = 1;
    r->rev = ev;
    r->rn = n;
    r->speed = SPEED_DEFAULT;
    r->started = 1;
    r->done = 1;
    snprintf(r->title, sizeof r->title, "replay %s %s %d rank%s", title,
             ui_options()->ascii ? "-" : "·", nranks, nranks == 1 ? "" : "s");
    alloc_ranks(r, nranks);
    for (int k = 0; k < nranks; k++)
        r->rank_state[k] = VIEW_RANK_UNKNOWN;
    views_create(r, "ring");
    rerun(r);
    return wrap(r);
}
