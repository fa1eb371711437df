/* run_play.c - the run screen's player: one step model (lab/ui/stepmodel.h) behind every
 * view, and the frame they all show. A frame is what happened until every rank passed its
 * next gate; the player shows the last complete one or, stepped back, any earlier one, and
 * each view is fed the model's tape up to that frame when it is drawn. Playing moves one
 * frame per period of the chosen speed, animating its arrival; a live job that runs ahead
 * of the animation is caught up with (the frames jumped over stay one key away), a gated
 * job's ranks get one step per period, and a replay (or what a lab drew without ranks)
 * plays from its start. */
#include "run.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const int speeds_ms[] = {2000, 1200, 700, 400, 200, 80, 0};
#define NSPEEDS ((int)(sizeof speeds_ms / sizeof speeds_ms[0]))
#define SPEED_DEFAULT 2
#define CATCHUP_NS 2000000000ull    /* a live job is never more than this of playing ahead */

/* Does some view read events like e? Only those go on the tape. */
static int any_view_wants(void *u, const mlsys_event *e)
{
    run *r = u;
    for (int i = 0; i < r->nviews; i++)
        if (r->v[i].cls->wants && r->v[i].cls->wants(e))
            return 1;
    return 0;
}

void play_create(run *r, const char *first)
{
    r->sm = sm_create();
    sm_set_keep(r->sm, any_view_wants, r);
    r->nviews = view_count();
    r->v = mlsys_xcalloc((size_t)r->nviews, sizeof *r->v);
    for (int i = 0; i < r->nviews; i++) {
        r->v[i].cls = view_classes[i];
        r->v[i].data = view_classes[i]->create();
        sm_cursor_init(&r->v[i].cur);
    }
    r->cur = 0;
    r->speed = SPEED_DEFAULT;
    play_select_view(r, first);
    play_reset(r);
}

void play_free(run *r)
{
    for (int i = 0; i < r->nviews; i++) {
        r->v[i].cls->free(r->v[i].data);
        sm_cursor_fini(&r->v[i].cur);
    }
    free(r->v);
    sm_free(r->sm);
}

void play_reset(run *r)
{
    sm_reset(r->sm, r->nranks);
    for (int i = 0; i < r->nviews; i++) {
        r->v[i].cls->reset(r->v[i].data, r->nranks);
        sm_cursor_fini(&r->v[i].cur);
    }
    r->frame = 0;
    r->want_next = 0;
    r->animating = 0;
    r->anim_t0 = 0;
    r->skipped = 0;
}

int play_select_view(run *r, const char *name)
{
    for (int i = 0; name && i < r->nviews; i++)
        if (!strcmp(r->v[i].cls->name, name)) {
            r->cur = i;
            return 1;
        }
    return 0;
}

int play_speed_ms(const run *r)
{
    return speeds_ms[r->speed];
}

int play_last(const run *r)
{
    int nc = sm_ncomplete(r->sm);
    return nc > 0 ? nc - 1 : 0;
}

static void rewind_view(void *u)
{
    run_view *v = u;
    if (v->cls->rewind)
        v->cls->rewind(v->data);
    else
        v->cls->reset(v->data, 0);
}

static void view_event(void *u, const mlsys_event *e, int frame)
{
    run_view *v = u;
    if (v->cls->event)
        v->cls->event(v->data, e, frame);
}

static void view_line(void *u, int rank, int is_err, const char *text)
{
    run_view *v = u;
    if (v->cls->line)
        v->cls->line(v->data, rank, is_err, text);
}

void play_sync(run *r, int i)
{
    run_view *v = &r->v[i];
    sm_sink s = {rewind_view, view_event, view_line, v};
    sm_sync(r->sm, &v->cur, r->frame, &s);
}

void play_show(run *r, int k, int animate)
{
    int last = play_last(r);
    if (k > last)
        k = last;
    if (k < 0)
        k = 0;
    r->animating = animate && k == r->frame + 1 && speeds_ms[r->speed] > 0;
    r->anim_t0 = mlsys_now_ns();
    r->frame = k;
}

double play_anim(const run *r, uint64_t now)
{
    int ms = speeds_ms[r->speed];
    if (!r->animating || ms == 0)
        return 1.0;
    double p = (double)(now - r->anim_t0) / (ms * 1e6);
    return p > 1.0 ? 1.0 : p;
}

int play_tick(run *r, uint64_t now, int *tmo)
{
    int flags = 0, ms = speeds_ms[r->speed], last = play_last(r);
    uint64_t period = (uint64_t)(ms ? ms : 1) * 1500000ull;     /* the move, then a pause */
    if (r->animating && now - r->anim_t0 >= (uint64_t)ms * 1000000ull) {
        r->animating = 0;
        flags |= UI_REDRAW;
    }
    if (r->animating)
        flags |= UI_REDRAW;
    int live = r->job && !r->done && !r->replay;
    /* a live job ahead of the animation by more than CATCHUP_NS: jump to just before its
     * newest frame (which then animates); an ended job's backlog: to its end */
    if (!r->paused && !r->gated && !r->replay && r->ran_ranks && r->frame < last &&
        (uint64_t)(last - r->frame) * (ms ? period : 0) > CATCHUP_NS) {
        int to = live ? last - 1 : last;
        r->skipped += to - r->frame;
        play_show(r, to, 0);
        flags |= UI_REDRAW;
    }
    if (r->want_next && r->frame < last) {
        r->want_next = 0;
        play_show(r, r->frame + 1, 1);
        flags |= UI_REDRAW;
    } else if (!r->paused && !r->animating && r->frame < last &&
               now - r->anim_t0 >= (ms ? period : 0)) {
        play_show(r, r->frame + 1, 1);
        flags |= UI_REDRAW;
    }
    if (r->frame < last || r->animating)
        *tmo = 33;
    return flags;
}

/* A tenth of the run, at least one frame. */
static int tenth(const run *r)
{
    int t = (play_last(r) + 1) / 10;
    return t > 0 ? t : 1;
}

int play_key(run *r, int key)
{
    switch (key) {
    case ' ':
        r->paused = !r->paused;
        return UI_HANDLED | UI_REDRAW;
    case 'b': case UI_KEY_LEFT:
        r->paused = 1;
        play_show(r, r->frame - 1, 0);
        return UI_HANDLED | UI_REDRAW;
    case UI_KEY_HOME:
        r->paused = 1;
        play_show(r, 0, 0);
        return UI_HANDLED | UI_REDRAW;
    case UI_KEY_END:
        play_show(r, play_last(r), 0);
        return UI_HANDLED | UI_REDRAW;
    case '[': case ']': {
        int k = sm_next_call_frame(r->sm, r->frame, key == ']' ? 1 : -1);
        r->paused = 1;
        if (k >= 0)
            play_show(r, k, 0);
        else if (key == '[')
            snprintf(r->say, sizeof r->say, "no collective before this step");
        else if (r->gated && r->job && !r->done)
            snprintf(r->say, sizeof r->say, "no later collective recorded yet: n lets the ranks "
                     "take their next step");
        else
            snprintf(r->say, sizeof r->say, "no collective after this step");
        return UI_HANDLED | UI_REDRAW;
    }
    case '{': case '}':
        r->paused = 1;
        play_show(r, r->frame + (key == '}' ? tenth(r) : -tenth(r)), 0);
        return UI_HANDLED | UI_REDRAW;
    case '+': case '=':
        if (r->speed < NSPEEDS - 1)
            r->speed++;
        return UI_HANDLED | UI_REDRAW;
    case '-': case '_':
        if (r->speed > 0)
            r->speed--;
        return UI_HANDLED | UI_REDRAW;
    default:
        return 0;
    }
}
