/* ui_run.c - the run screen: a live job (or a replayed trace) shown in the views. This file
 * is the screen class that ties the parts of run.h together: the job (run_job.c) feeds the
 * step model, the player (run_play.c) chooses the frame every view shows, the drawing
 * (run_draw.c) puts it on screen. A gated job's ranks wait at every step until n (or playing)
 * grants the next one. */
#include "run.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int run_tick(ui_screen *s, uint64_t now, int *tmo)
{
    run *r = s->data;
    size_t tape = sm_tape_len(r->sm);
    int nframes = sm_nframes(r->sm);
    int flags = job_pump(r);
    flags |= play_tick(r, now, tmo);
    /* playing a gated job: one step per period, once what it did so far is shown */
    int ms = play_speed_ms(r);
    if (!r->paused && r->gated && r->job && !r->done && job_all_at_gate(r) &&
        r->frame >= play_last(r) && !r->animating &&
        now - r->anim_t0 >= (uint64_t)(ms ? ms : 1) * 1500000ull) {
        job_grant(r);
        r->anim_t0 = now;
    }
    /* new items for the frame shown (a live tail) or new frames: draw again */
    if (sm_tape_len(r->sm) != tape || sm_nframes(r->sm) != nframes)
        flags |= UI_REDRAW;
    if (r->job && !r->done && *tmo > (r->gated ? 100 : 20))
        *tmo = r->gated ? 100 : 20;
    return flags;
}

static void run_title(ui_screen *s, char *out, size_t n)
{
    run_draw_title(s->data, out, n);
}

static int run_busy(ui_screen *s)
{
    run *r = s->data;
    return !r->done && r->job != NULL;
}

static const ui_key_help *run_keys(ui_screen *s)
{
    return run_draw_keys(s->data);
}

static const char *const *run_help(ui_screen *s)
{
    return run_draw_help(s->data);
}

static void run_draw(ui_screen *s, grid *g, int x, int y, int w, int h)
{
    run_draw_screen(s->data, g, x, y, w, h);
}

static int rerun(run *r)
{
    if (r->replay) {
        job_replay_load(r);
        r->paused = 0;
        return UI_HANDLED | UI_REDRAW;
    }
    job_stop(r);
    char err[512];
    if (job_begin(r, err, sizeof err) != 0) {
        r->started = 1;
        r->done = 1;
        r->result = 2;
        snprintf(r->why, sizeof r->why, "%.250s", err);
        job_line(r, -1, 1, err);
    }
    return UI_HANDLED | UI_REDRAW;
}

/* n: the next recorded step, or (gated) let the ranks take it and show it when it is done. */
static int step_on(run *r)
{
    r->paused = 1;
    if (r->frame < play_last(r)) {
        play_show(r, r->frame + 1, 1);
    } else if (r->gated && r->job && !r->done) {
        job_grant(r);
        r->want_next = 1;
    } else if (r->done || r->replay) {
        snprintf(r->say, sizeof r->say, "this is the last step%s", r->replay ?
                 " (r plays the replay again)" : "");
    } else {
        snprintf(r->say, sizeof r->say, "the next step has not happened yet");
    }
    return UI_HANDLED | UI_REDRAW;
}

static int run_key(ui_screen *s, int key)
{
    run *r = s->data;
    r->say[0] = 0;
    int f;
    if ((f = play_key(r, key)))
        return f;
    switch (key) {
    case 'n': case UI_KEY_RIGHT:
        return step_on(r);
    case 'r':
        return rerun(r);
    case UI_KEY_TAB:
        r->cur = (r->cur + 1) % r->nviews;
        return UI_HANDLED | UI_REDRAW;
    case UI_KEY_BTAB:
        r->cur = (r->cur + r->nviews - 1) % r->nviews;
        return UI_HANDLED | UI_REDRAW;
    default:
        if (key >= '1' && key < '1' + r->nviews && key <= '9') {
            r->cur = key - '1';
            return UI_HANDLED | UI_REDRAW;
        }
        if (r->v[r->cur].cls->key)
            return r->v[r->cur].cls->key(r->v[r->cur].data, key);
        return 0;
    }
}

static void run_free(ui_screen *s)
{
    run *r = s->data;
    job_free(r);
    play_free(r);
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
    job_alloc_ranks(r, 1);
    play_create(r, l->view);
    if (job_begin(r, err, n) != 0) {
        run_free(wrap(r));
        return NULL;
    }
    r->paused = r->gated;           /* gated: wait for n; otherwise play */
    return wrap(r);
}

ui_screen *run_create_fn(const char *title, int nranks, int gated,
                         int (*fn)(mlsys_comm *, void *), void *arg, char *err, size_t n)
{
    run *r = mlsys_xcalloc(1, sizeof *r);
    r->fn = fn;
    r->fn_arg = arg;
    r->fn_gated = gated;
    r->argv = mlsys_xcalloc(1, sizeof(char *));
    snprintf(r->title, sizeof r->title, "%s", title);
    job_alloc_ranks(r, nranks);
    play_create(r, "ring");
    if (job_begin(r, err, n) != 0) {
        run_free(wrap(r));
        return NULL;
    }
    r->paused = r->gated;
    return wrap(r);
}

void run_stats(ui_screen *s, run_stats_t *st)
{
    run *r = s->data;
    st->events = r->events;
    st->forwarded = 0;
    st->lost = r->lost;
    st->queued = r->nin;
    st->phases = (uint64_t)sm_nframes(r->sm);
    st->done = r->done;
    st->result = r->result;
    st->frame = r->frame;
    st->last = play_last(r);
    st->skipped = r->skipped;
    st->view = r->v[r->cur].cls->name;
}

/* The view a replay opens in: the one its trace has the most to show for (blocks changing
 * hands: blocks; a serving engine's steps without them: serve; flow records: flow; compute spans without collectives: the timeline; only
 * output: the log; else ring). */
static const char *replay_view(const mlsys_trace *d)
{
    size_t mem = 0, flow = 0, comp = 0, coll = 0, serve = 0;
    for (size_t i = 0; i < d->n; i++)
        switch (d->ev[i].kind) {
        case MLSYS_EV_MEM: mem += d->ev[i].mem.op >= MLSYS_MEM_ALLOC &&
                                  d->ev[i].mem.op <= MLSYS_MEM_COW; break;
        case MLSYS_EV_FLOW: flow++; serve += d->ev[i].flow.what == MLSYS_FLOW_STEP; break;
        case MLSYS_EV_COMPUTE_BEGIN: comp++; break;
        case MLSYS_EV_COLL_BEGIN: coll++; break;
        default: break;
        }
    if (serve && !mem)
        return "serve";
    if (mem)
        return "blocks";
    if (flow)
        return "flow";
    if (comp && !coll)
        return "timeline";
    if (!coll && d->nl)
        return "log";
    return "ring";
}

ui_screen *run_create_replay(const char *title, mlsys_trace *d)
{
    run *r = mlsys_xcalloc(1, sizeof *r);
    r->replay = 1;
    r->rd = *d;
    memset(d, 0, sizeof *d);
    r->started = 1;
    r->done = 1;
    int nranks = r->rd.nranks > 0 ? r->rd.nranks : 1;
    snprintf(r->title, sizeof r->title, "replay %s %s %d rank%s", title,
             ui_options()->ascii ? "-" : "·", nranks, nranks == 1 ? "" : "s");
    job_alloc_ranks(r, nranks);
    for (int k = 0; k < nranks; k++)
        r->rank_state[k] = VIEW_RANK_UNKNOWN;
    play_create(r, replay_view(&r->rd));
    job_replay_load(r);
    return wrap(r);
}
