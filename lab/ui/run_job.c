/* run_job.c - the run screen's job: it starts the lab the way the runner does (fork + exec of
 * `mlsys-lab worker LAB flags` on N ranks, one rank for a single-process lab so that its
 * engines can emit, the lab's before/after hooks captured), pumps its output and events
 * without blocking into the step model in time order (and into --trace's buffer), reports
 * each rank's state, lets a gated job's ranks take their next step (mlsys_job_grant_step),
 * reads each rank's watched buffer while all of them wait at the gate
 * (core/trace_values.h), and ends the job: how it ended, the trace written, the after hook.
 * A replay's trace goes into the same model here too. */
#include "run.h"
#include "../../core/trace_values.h"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define RUN_RING_EVENTS 65536       /* per rank ring in the job segment */

void job_alloc_ranks(run *r, int n)
{
    r->nranks = n;
    free(r->rank_state);
    free(r->rank_code);
    free(r->gate);
    free(r->watch);
    free(r->steps_seen);
    free(r->step_t);
    free(r->floor_t);
    size_t k = (size_t)(n ? n : 1);
    r->steps_seen = mlsys_xcalloc(k, sizeof *r->steps_seen);
    r->step_t = mlsys_xcalloc(k, sizeof *r->step_t);
    r->floor_t = mlsys_xcalloc(k, sizeof *r->floor_t);
    r->rank_state = mlsys_xcalloc(k, sizeof(int));
    r->rank_code = mlsys_xcalloc(k, sizeof(int));
    r->gate = mlsys_xcalloc(k, sizeof(int));
    r->watch = mlsys_xcalloc(k, sizeof *r->watch);
    for (int i = 0; i < n; i++)
        r->gate[i] = -1;
}

/* ---- into the model, in time order ---- */

static run_item *in_push(run *r, uint64_t t)
{
    if (r->nin == r->incap) {
        r->incap = r->incap ? r->incap * 2 : 1024;
        r->in = mlsys_xrealloc(r->in, r->incap * sizeof *r->in);
    }
    run_item *it = &r->in[r->nin++];
    memset(it, 0, sizeof *it);
    it->t = t;
    it->seq = r->inseq++;
    return it;
}

static int by_time(const void *a, const void *b)
{
    const run_item *x = a, *y = b;
    if (x->t != y->t)
        return x->t < y->t ? -1 : 1;
    if (x->line != y->line)
        return x->line - y->line;       /* an event before a line of the same instant */
    return x->seq < y->seq ? -1 : x->seq > y->seq;     /* else as they came */
}

/* Items come to the model in time order: a drain that began at `upto` has delivered every
 * event written before it, so those can go in; the rest wait for the next drain. */
static void in_feed(run *r, uint64_t upto)
{
    if (!r->nin)
        return;
    qsort(r->in, r->nin, sizeof *r->in, by_time);
    size_t i = 0;
    for (; i < r->nin && r->in[i].t < upto; i++) {
        run_item *it = &r->in[i];
        if (it->line) {
            sm_line(r->sm, it->rank, it->is_err, it->text);
            free(it->text);
        } else {
            sm_event(r->sm, &it->ev);
        }
    }
    memmove(r->in, r->in + i, (r->nin - i) * sizeof *r->in);
    r->nin -= i;
}

static void in_clear(run *r)
{
    for (size_t i = 0; i < r->nin; i++)
        free(r->in[i].text);
    r->nin = 0;
}

static void line_at(run *r, uint64_t t, int rank, int is_err, const char *text)
{
    run_item *it = in_push(r, t);
    it->line = 1;
    it->rank = rank;
    it->is_err = is_err;
    it->text = mlsys_xstrdup(text);
}

void job_line(run *r, int rank, int is_err, const char *text)
{
    line_at(r, mlsys_now_ns(), rank, is_err, text);
}

/* Several lines of text (a hook's captured output) as runner lines. */
static void job_text(run *r, const char *text, int is_err)
{
    if (!text)
        return;
    const char *p = text;
    while (*p) {
        const char *nl = strchr(p, '\n');
        size_t len = nl ? (size_t)(nl - p) : strlen(p);
        char buf[1024];
        snprintf(buf, sizeof buf, "%.*s", (int)(len < sizeof buf ? len : sizeof buf - 1), p);
        job_line(r, -1, is_err, buf);
        p += len + (nl ? 1 : 0);
    }
}

/* ---- the job's sink ---- */

/* A collective call of rank 0 that did not run the algorithm the learner chose: kept for the
 * notice above the status line, and said once in the log. A call whose algorithm the lab
 * chose itself (mlsys_set_algo) is the lab's choice, not a fallback of the learner's. */
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
    job_line(r, -1, 0, line);
}

/* A rank's line goes in at the time of the read before this one, the earliest it can have
 * been written: a line that a rank printed before its next gate then comes before that
 * gate's STEP event (which may have been drained in the same pump), so the log shows it in
 * the frame it belongs to, not one step late. Gated, no earlier than the gate it was let
 * through last (job_grant): what it prints after a grant comes after that gate. */
static void sink_line(void *u, int rank, int is_err, const char *line)
{
    run *r = u;
    line = mlsys_print_untag(line, &rank);      /* rank 0 printed it for another rank */
    uint64_t t = r->line_t;
    if (rank >= 0 && rank < r->nranks && r->floor_t[rank] > t)
        t = r->floor_t[rank];
    if (r->trace_path && r->trace_tmp[0]) {
        mlsys_trace_add_line(&r->tb, rank, is_err, line);
        r->tb.lines[r->tb.nl - 1].t_ns = t;     /* the trace keeps the same order */
    }
    line_at(r, t, rank, is_err, line);
}

static void sink_events(void *u, const mlsys_event *ev, size_t n)
{
    run *r = u;
    for (size_t i = 0; i < n; i++) {
        const mlsys_event *e = &ev[i];
        r->events++;
        if (e->rank < 0 || e->rank >= r->nranks)
            continue;
        if (e->kind == MLSYS_EV_STEP) {
            r->steps_seen[e->rank]++;
            r->step_t[e->rank] = e->t_ns;
        }
        if (e->kind == MLSYS_EV_COLL_BEGIN && e->rank == 0 && r->forced[0])
            note_fallback(r, e);
        if (e->kind == MLSYS_EV_MARK && !strcmp(e->label, MLSYS_MARK_WATCH)) {
            r->watch[e->rank].addr = (uint64_t)e->val[0];
            r->watch[e->rank].count = e->bytes;
            r->watch[e->rank].dtype = e->dtype;
        }
        if (r->trace_path && r->trace_tmp[0])
            mlsys_trace_collect(&r->tb, e, 1);
        run_item *it = in_push(r, e->t_ns);
        it->ev = *e;
    }
}

/* ---- starting and ending ---- */

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
    if (r->job) {
        update_states(r);
        r->lost = mlsys_job_events_lost(r->job);
        for (int k = 0; k < r->nranks; k++)
            r->gate[k] = -1;
        /* a single-process lab's own exit status says how it ended */
        const mlsys_rank_status *s0 = mlsys_job_status(r->job, 0);
        if (r->l && !r->l->rank_main && rc && s0 && s0->exited)
            snprintf(r->why, sizeof r->why, "the lab exited with status %d", s0->code);
        if (r->trace_path && r->trace_tmp[0]) {
            char line[600];
            if (mlsys_trace_commit(r->trace_path, r->trace_tmp, &r->tb, mlsys_job_t0_ns(r->job)))
                snprintf(line, sizeof line, "could not write the trace to %s", r->trace_path);
            else
                snprintf(line, sizeof line, "trace: %zu events written to %s (%llu lost)",
                         r->tb.n, r->trace_path, (unsigned long long)r->lost);
            r->trace_tmp[0] = 0;
            job_line(r, -1, 0, line);
        }
        mlsys_trace_free(&r->tb);
        mlsys_job_free(r->job);
        r->job = NULL;
    }
    if (r->have_args && r->l && r->l->after) {
        hook_call h = {r->l, &r->a, rc};
        int ignored;
        char *text = ui_capture(call_after, &h, &ignored);
        job_text(r, text, 0);
        free(text);
    }
    char line[400];
    snprintf(line, sizeof line, "%s", rc == 0 ? "finished: every rank exited 0" : r->why);
    job_line(r, -1, rc != 0, line);
    in_feed(r, UINT64_MAX);
    sm_finish(r->sm);
    if (r->l)
        ui_progress_record(r->l->id, rc == 0);
}

void job_stop(run *r)
{
    if (r->job) {
        mlsys_job_free(r->job);
        r->job = NULL;
    }
    if (r->trace_tmp[0]) {             /* stopped before the end: an old trace stays */
        unlink(r->trace_tmp);
        r->trace_tmp[0] = 0;
    }
    mlsys_trace_free(&r->tb);
    if (r->have_args) {
        lab_args_free(&r->a);
        r->have_args = 0;
    }
}

static void clear_tape(run *r)
{
    for (int k = 0; k < r->nranks; k++) {
        r->steps_seen[k] = 0;
        r->step_t[k] = r->floor_t[k] = 0;
        memset(&r->watch[k], 0, sizeof r->watch[k]);
    }
    in_clear(r);
    r->events = r->lost = 0;
}

/* Start the job through the runner: the lab's ranks (`mlsys-lab worker LAB flags`, one for a
 * single-process lab), or the function on forked ranks; lines keep the rank they belong to. */
static int start_ranks(run *r, mlsys_launch_opts *o, char *err, size_t n)
{
    o->trace_capacity = RUN_RING_EVENTS;
    o->capture_output = 1;
    runner_spec spec = {.l = r->fn ? NULL : r->l, .argc = r->argc, .argv = r->argv,
                        .fn = r->fn, .arg = r->fn_arg, .tagged = 1};
    r->job = runner_start(o, &spec, err, n);
    if (!r->job)
        return -1;
    r->started = 1;
    r->ran_ranks = 1;
    r->pump_at = r->line_t = mlsys_now_ns();
    for (int k = 0; k < r->nranks; k++)
        r->rank_state[k] = VIEW_RANK_RUNNING;
    return 0;
}

/* The lab's before() answered without ranks: its text is all, or events it made up for its
 * view (a schedule drawn slot by slot) go into the model as a finished job's would. */
static void answered_alone(run *r, int brc)
{
    in_feed(r, UINT64_MAX);         /* its text first: it is what the whole run says */
    mlsys_event *sev = NULL;
    size_t ns = brc == 0 && r->l->synth_events ? r->l->synth_events(&r->a, &sev) : 0;
    int lanes = 0;
    for (size_t i = 0; i < ns; i++)
        if (sev[i].rank >= lanes && sev[i].rank < SM_MAX_RANKS)
            lanes = sev[i].rank + 1;
    if (lanes > r->nranks) {
        job_alloc_ranks(r, lanes);
        play_reset(r);
    }
    for (size_t i = 0; i < ns; i++)
        if (sev[i].rank >= 0 && sev[i].rank < r->nranks)
            in_push(r, sev[i].t_ns)->ev = sev[i];
    r->events = ns;
    free(sev);
    play_select_view(r, ns && r->l->view ? r->l->view : "log");
    snprintf(r->why, sizeof r->why, "%s", brc == 0 ? "finished: the lab answered without "
             "starting ranks" : "the lab stopped before starting its ranks");
    r->started = 1;
    r->done = 1;
    r->result = brc;
    job_line(r, -1, brc != 0, r->why);
    if (r->trace_tmp[0]) {          /* asked for, and nothing to record: say so */
        unlink(r->trace_tmp);
        r->trace_tmp[0] = 0;
        char line[1200];
        snprintf(line, sizeof line, "trace: nothing written to %s: no ranks started, so there "
                 "were no events to record", r->trace_path);
        job_line(r, -1, 0, line);
    }
    in_feed(r, UINT64_MAX);
    sm_finish(r->sm);
}

int job_begin(run *r, char *err, size_t n)
{
    err[0] = 0;
    r->done = r->started = r->ran_ranks = 0;
    r->result = 0;
    r->why[0] = 0;
    r->nnotes = 0;
    r->noted = 0;
    r->grants = r->read_epoch = 0;
    mlsys_launch_opts o;
    memset(&o, 0, sizeof o);
    if (r->fn) {                        /* a function instead of a lab: tests, measurements */
        o.world_size = r->nranks;
        o.timeout_ms = 30000;
        o.gated = r->fn_gated;
        r->gated = o.gated;
        clear_tape(r);
        play_reset(r);
        return start_ranks(r, &o, err, n);
    }
    if (lab_args_parse(r->l, r->argc, r->argv, &r->a, err, n))
        return -1;
    r->have_args = 1;
    if (runner_fill_opts(r->l, &r->a, &o, err, n))
        return -1;
    const char *backend = lab_arg_str(&r->a, "backend");
    if (backend && !strcmp(backend, "mpi")) {
        snprintf(err, n, "the mpi backend runs headless for now: mlsys-lab run %s --backend mpi",
                 r->l->id);
        return -1;
    }
    const char *algo = lab_arg_str(&r->a, "algo");
    snprintf(r->forced, sizeof r->forced, "%s", algo && strcmp(algo, "auto") ? algo : "");
    r->trace_path = lab_arg_str(&r->a, "trace");
    if (r->trace_path && mlsys_trace_prepare(r->trace_path, r->trace_tmp, sizeof r->trace_tmp,
                                              err, n) != 0)
        return -1;                   /* checked before the job, as the command line does */
    r->gated = o.gated;
    job_alloc_ranks(r, o.world_size);       /* 1 for a single-process lab */
    clear_tape(r);
    play_reset(r);
    if (r->l->before) {
        hook_call h = {r->l, &r->a, 0};
        int brc;
        char *text = ui_capture(call_before, &h, &brc);
        job_text(r, text, 0);
        free(text);
        if (brc >= 0) {
            answered_alone(r, brc);
            return 0;
        }
    }
    return start_ranks(r, &o, err, n);
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
        struct run_watch *w = &r->watch[k];
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
            in_push(r, e.t_ns)->ev = e;
        }
    }
    free(v);
}

int job_all_at_gate(const run *r)
{
    int waiting = 0;
    for (int k = 0; k < r->nranks; k++) {
        if (r->rank_state[k] == VIEW_RANK_RUNNING && r->gate[k] < 0)
            return 0;
        waiting |= r->gate[k] >= 0;
    }
    return waiting;
}

/* Before the ranks go on: read what they printed before the gates they wait at (twice: the
 * first read also sees who waits, the second has every STEP event and line written before
 * that), and from now on their lines go in after those gates. */
void job_grant(run *r)
{
    for (int i = 0; i < 2 && r->job && !r->done; i++)
        job_pump(r);
    if (!r->job || r->done)
        return;
    for (int k = 0; k < r->nranks; k++)     /* at its gate, whose STEP event came */
        if (r->gate[k] >= 0 && r->steps_seen[k] == r->grants + 1 &&
            r->step_t[k] + 1 > r->floor_t[k])
            r->floor_t[k] = r->step_t[k] + 1;
    mlsys_job_grant_step(r->job);
    r->grants++;
}

int job_pump(run *r)
{
    if (!r->job || r->done)
        return 0;
    mlsys_job_sink sink = {sink_line, sink_events, r};
    char why[256];
    uint64_t now = mlsys_now_ns(), drained = now - 1000000ull;
    r->line_t = r->pump_at;         /* what is read now was written after the last read */
    r->pump_at = now;
    int rc = mlsys_job_wait(r->job, &sink, 0, why, sizeof why);
    if (rc != 1) {
        snprintf(r->why, sizeof r->why, "%s", why);
        finish(r, rc);
        return UI_REDRAW;
    }
    int before[SM_MAX_RANKS], nb = r->nranks < SM_MAX_RANKS ? r->nranks : SM_MAX_RANKS;
    memcpy(before, r->gate, (size_t)nb * sizeof(int));
    update_states(r);
    read_watched(r);
    in_feed(r, drained);
    for (int k = 0; k < r->nranks; k++)
        if (r->rank_state[k] != VIEW_RANK_RUNNING)
            sm_rank_ended(r->sm, k);
    r->lost = mlsys_job_events_lost(r->job);
    return memcmp(before, r->gate, (size_t)nb * sizeof(int)) ? UI_REDRAW : 0;
}

/* The replay's trace: its events and lines into the model in time order, as a finished job. */
void job_replay_load(run *r)
{
    clear_tape(r);
    play_reset(r);
    const mlsys_trace *d = &r->rd;
    size_t i = 0, j = 0;
    while (i < d->n || j < d->nl) {
        if (j >= d->nl || (i < d->n && d->ev[i].t_ns <= d->lines[j].t_ns)) {
            sm_event(r->sm, &d->ev[i++]);
        } else {
            const mlsys_trace_line *l = &d->lines[j++];
            sm_line(r->sm, l->rank, l->is_err, l->text);
        }
    }
    sm_finish(r->sm);
    r->events = d->n;
}

void job_free(run *r)
{
    job_stop(r);
    in_clear(r);
    free(r->in);
    free(r->rank_state);
    free(r->rank_code);
    free(r->gate);
    free(r->watch);
    free(r->steps_seen);
    free(r->step_t);
    free(r->floor_t);
    mlsys_trace_free(&r->rd);
}
