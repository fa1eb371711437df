/* timeline.c - the timeline view: one lane per rank over time, with two rows each: compute
 * (F forward, B backward, W weight gradient, other labels by their first letter, reversed
 * when they are a backward pass, '.' idle, the micro-batch number and the interleaved chunk
 * written into each span: F3b) and communication (collectives by name, C>2 / C<2 for
 * messages; or, for a compute span of the rank's second thread (tag 1: the serving engine's
 * schedule / prepare / sample / detokenize beside its forward), that span: the row is then
 * named "cpu"), so overlap shows as the two rows busy at once. A lab's steps (mlsys_step outside
 * collectives) cut the run into sections (a schedule, a training step): the view shows the
 * section of the step shown, with its name and its own bubble (a shows the whole run); a
 * lab that measured its section (MARK "bubble") has its own figures shown, and the lab's
 * phase (a FLOW_PHASE record: "batch 4 overlap") names the sections begun in it, so that an
 * engine's many steps each say what they belong to. A span narrower than a column keeps its
 * column against wider ones (a round's outcome stays visible); the second row is drawn only
 * when the run has communication or CPU spans to put there. Each lane ends
 * with its bubble: the idle share of its time, waits at a gate not counted; gaps where
 * nobody works, or every rank waits at a gate, are squeezed to a few columns. Events whose
 * step is >= 0 on COMPUTE_BEGIN/END come from a schedule drawn without ranks (one slot
 * each): the axis then counts slots. Keys: > < zoom, h l scroll, g/G start/end, z whole
 * window, a whole run or this section. */
#include "view.h"
#include "../stepmodel.h"
#include "../../../core/trace_values.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TL_SPANS 65536          /* per rank; later spans are counted, not kept */
#define TL_LANES 64
#define TL_LABEL 4              /* "r12" and a bar */
#define TL_RIGHT 7              /* " 27.3%" */

enum { SP_F, SP_B, SP_W, SP_OTHER, SP_SEND, SP_RECV, SP_COLL };

#define TL_SECTIONS 4096        /* sections kept; later lab steps join the last one */
#define TL_WAITS 4096           /* gate waits kept per lane */

typedef struct span {
    uint64_t t0, t1;            /* t1 == 0: still open */
    int kind;
    int mb;                     /* micro-batch from a label "F mb3", or -1 */
    int chunk;                  /* interleaved model chunk from "c1", or -1 */
    int bwd;                    /* a backward pass ("B ...", "... bwd", "backward") */
    int peer;                   /* p2p: the other rank */
    int sec;                    /* the section it began in */
    char tag;                   /* the letter shown */
    char name[15];              /* a collective's name; a compute span's label (legend) */
    int host;                   /* a compute span of the rank's second thread (tag 1): the
                                   serving engine's CPU phases, drawn on the second row */
} span;

typedef struct lane {
    span *s;
    int n, cap;
    int open_compute;           /* index of the open compute span, -1 */
    int open_host;              /* the same for the second thread's spans */
    int has_host;               /* it has some: its second row is named "cpu" */
    int open_coll;
    uint64_t dropped;
    int sec;                    /* its current section */
    uint64_t step_t;            /* its last step event's time (a gate wait starts there) */
    int have_step;
    struct { uint64_t t0, t1; } *wait;     /* its gate waits */
    int nwait, wcap;
    double lab_busy;            /* MARK "bubble" of its current section: busy ns, -1 none */
    char phase[32];             /* the lab's phase it is in (a FLOW_PHASE record), "" none */
} lane;

typedef struct section {
    char name[32];
    char phase[32];             /* the lab's phase it began in ("batch 4 overlap"), "" none */
    uint64_t t0;                /* the first rank's step into it */
    int frame;
    double span_ns;             /* the lab's own measure (MARK "bubble"), 0 none */
    double *busy;               /* [lanes] busy ns per lane, or NULL */
    int nbusy;
} section;

typedef struct gap {            /* an interval where no rank had any span: squeezed */
    uint64_t t0, t1;
} gap;

typedef struct timeline {
    lane *ln;
    int n;
    uint64_t t_min, t_max;
    int have_t;
    uint64_t t_c0;              /* the first compute span's start (have_c0) */
    int have_c0;
    uint64_t scale;             /* the axis length: grows in doublings, never shrinks */
    int synthetic;              /* slots, not nanoseconds */
    uint64_t slot_ns;
    int zoom;                   /* the window is scale >> zoom */
    uint64_t off;               /* the window's start, from t_min */
    int follow;                 /* the window follows the newest events */
    section *sec;
    int nsec;                   /* sections begun (a lab step begins one) */
    int whole;                  /* a: the whole run instead of the current section */
    int has_comm;               /* a collective or a message somewhere: its row is drawn */
} timeline;

static void *tl_create(void)
{
    timeline *t = calloc(1, sizeof *t);
    if (!t)
        abort();
    t->follow = 1;
    return t;
}

static void tl_reset(void *data, int nranks)
{
    timeline *t = data;
    for (int i = 0; i < t->n; i++) {
        free(t->ln[i].s);
        free(t->ln[i].wait);
    }
    free(t->ln);
    for (int i = 0; i < t->nsec; i++)
        free(t->sec[i].busy);
    free(t->sec);
    int whole = t->whole;
    memset(t, 0, sizeof *t);
    t->follow = 1;
    t->whole = whole;
    (void)nranks;
}

/* The same run from its start: the spans go, the zoom and the window stay. */
static void tl_rewind(void *data)
{
    timeline *t = data;
    int zoom = t->zoom, follow = t->follow, whole = t->whole;
    uint64_t off = t->off;
    tl_reset(t, 0);
    t->whole = whole;
    t->zoom = zoom;
    t->follow = follow;
    t->off = off;
}

static int tl_wants(const mlsys_event *e)
{
    if (e->kind == MLSYS_EV_MARK)
        return !strcmp(e->label, MLSYS_MARK_GATE) || !strcmp(e->label, MLSYS_MARK_BUBBLE);
    if (e->kind == MLSYS_EV_FLOW)
        return e->flow.what == MLSYS_FLOW_PHASE;    /* names the sections it holds */
    return e->kind <= MLSYS_EV_COMPUTE_END;    /* messages, collectives, steps, compute */
}

static void tl_free(void *data)
{
    if (!data)
        return;
    tl_reset(data, 0);
    free(data);
}

static lane *lane_of(timeline *t, int r)
{
    if (r < 0 || r >= TL_LANES)
        return NULL;
    if (r >= t->n) {
        t->ln = mlsys_xrealloc(t->ln, (size_t)(r + 1) * sizeof *t->ln);
        for (int i = t->n; i <= r; i++) {
            memset(&t->ln[i], 0, sizeof t->ln[i]);
            t->ln[i].open_compute = t->ln[i].open_coll = t->ln[i].open_host = -1;
            t->ln[i].lab_busy = -1;
            t->ln[i].sec = 0;           /* every rank starts before its first lab step */
        }
        t->n = r + 1;
    }
    return &t->ln[r];
}

static int span_add(lane *l, uint64_t t0, int kind, char tag)
{
    if (l->n == TL_SPANS) {
        l->dropped++;
        return -1;
    }
    if (l->n == l->cap) {
        l->cap = l->cap ? l->cap * 2 : 64;
        l->s = mlsys_xrealloc(l->s, (size_t)l->cap * sizeof *l->s);
    }
    l->s[l->n] = (span){t0, 0, kind, -1, -1, 0, -1, l->sec, tag, "", 0};
    return l->n++;
}

/* "F mb3", "B mb12 c1", "row GEMM bwd": the kind from the first letter, the micro-batch
 * after "mb", the chunk after " c", backward when it says so. */
static void compute_kind(const char *label, span *sp)
{
    char c = label[0] ? label[0] : 'c';
    sp->tag = c;
    sp->kind = c == 'F' && (label[1] == ' ' || !label[1]) ? SP_F
               : c == 'B' && (label[1] == ' ' || !label[1]) ? SP_B
               : c == 'W' && (label[1] == ' ' || !label[1]) ? SP_W : SP_OTHER;
    sp->bwd = sp->kind == SP_B || strstr(label, "bwd") || strstr(label, "backward");
    const char *p = strstr(label, "mb");
    sp->mb = p && p[2] >= '0' && p[2] <= '9' ? atoi(p + 2) : -1;
    p = strstr(label, " c");
    sp->chunk = p && p[2] >= '0' && p[2] <= '9' ? atoi(p + 2) : -1;
    /* the legend names the kind by its label, without the numbers and the direction */
    size_t n = strcspn(label, "0123456789");
    snprintf(sp->name, sizeof sp->name, "%.*s", (int)n, label);
    char *b = strstr(sp->name, " bwd");
    if (b)
        *b = 0;
    b = strstr(sp->name, " mb");
    if (b)
        *b = 0;
    size_t k = strlen(sp->name);
    while (k && sp->name[k - 1] == ' ')
        sp->name[--k] = 0;
    /* "forward P3:24 D0,1" leaves "forward P": the letter before the numbers goes too */
    if (k > 2 && sp->name[k - 2] == ' ' && sp->name[k - 1] != ' ') {
        sp->name[k - 2] = 0;
        k -= 2;
    }
}

/* A lab step (not a collective's): a section begins for this lane. */
static void section_step(timeline *t, lane *l, const mlsys_event *e, int frame)
{
    int k = ++l->sec;
    if (k >= TL_SECTIONS)
        k = l->sec = TL_SECTIONS - 1;
    while (t->nsec <= k) {
        t->sec = mlsys_xrealloc(t->sec, (size_t)(t->nsec + 1) * sizeof *t->sec);
        section *s = &t->sec[t->nsec++];
        memset(s, 0, sizeof *s);
        s->t0 = e->t_ns;
        s->frame = frame;
        snprintf(s->name, sizeof s->name, "%s", e->label);
        snprintf(s->phase, sizeof s->phase, "%s", l->phase);
    }
    section *s = &t->sec[k];
    if (e->t_ns < s->t0)
        s->t0 = e->t_ns;
    if (frame < s->frame)
        s->frame = frame;
    l->lab_busy = -1;
}

static void tl_event(void *data, const mlsys_event *e, int frame)
{
    timeline *t = data;
    lane *l = lane_of(t, e->rank);
    if (!l)
        return;
    if (t->nsec == 0) {             /* the part of the run before any lab step */
        t->sec = mlsys_xrealloc(t->sec, sizeof *t->sec);
        memset(&t->sec[0], 0, sizeof t->sec[0]);
        t->sec[0].t0 = e->t_ns;
        t->nsec = 1;
    }
    if (e->kind == MLSYS_EV_FLOW) {     /* a phase: the sections begun in it carry its name */
        if (e->flow.what == MLSYS_FLOW_PHASE && e->flow.version >= 0)   /* not a naming */
            snprintf(l->phase, sizeof l->phase, "%s", e->label);
        return;
    }
    if (e->kind == MLSYS_EV_STEP) {
        l->step_t = e->t_ns;
        l->have_step = 1;
        if (e->coll < 0)
            section_step(t, l, e, frame);
    }
    if (e->kind == MLSYS_EV_MARK) {
        if (!strcmp(e->label, MLSYS_MARK_GATE) && l->have_step && e->t_ns > l->step_t &&
            l->nwait < TL_WAITS) {
            if (l->nwait == l->wcap) {
                l->wcap = l->wcap ? l->wcap * 2 : 16;
                l->wait = mlsys_xrealloc(l->wait, (size_t)l->wcap * sizeof *l->wait);
            }
            l->wait[l->nwait].t0 = l->step_t;
            l->wait[l->nwait++].t1 = e->t_ns;
        } else if (!strcmp(e->label, MLSYS_MARK_BUBBLE) && isfinite(e->val[0]) &&
                   isfinite(e->val[1])) {
            section *s = &t->sec[l->sec < t->nsec ? l->sec : t->nsec - 1];
            int r = e->rank;
            if (r >= s->nbusy) {
                s->busy = mlsys_xrealloc(s->busy, (size_t)(r + 1) * sizeof *s->busy);
                for (int i = s->nbusy; i <= r; i++)
                    s->busy[i] = -1;
                s->nbusy = r + 1;
            }
            s->busy[r] = e->val[0];
            s->span_ns = e->val[1];
        }
        return;
    }
    if ((e->kind == MLSYS_EV_COMPUTE_BEGIN || e->kind == MLSYS_EV_COMPUTE_END) && e->step >= 0) {
        t->synthetic = 1;           /* a schedule's slot clock: step = the slot */
        if (e->step > 0 && !t->slot_ns)
            t->slot_ns = e->t_ns / (uint64_t)e->step;
    }
    if (!t->have_t || e->t_ns < t->t_min)
        t->t_min = e->t_ns;
    if (!t->have_t || e->t_ns > t->t_max)
        t->t_max = e->t_ns;
    t->have_t = 1;
    if (e->kind == MLSYS_EV_COMPUTE_BEGIN && (!t->have_c0 || e->t_ns < t->t_c0)) {
        t->t_c0 = e->t_ns;
        t->have_c0 = 1;
    }
    switch (e->kind) {
    case MLSYS_EV_COMPUTE_BEGIN: {
        span sp;
        memset(&sp, 0, sizeof sp);
        compute_kind(e->label, &sp);
        int host = e->tag == 1, i = span_add(l, e->t_ns, sp.kind, sp.tag);
        if (host) {
            l->open_host = i;
            l->has_host = 1;
        } else {
            l->open_compute = i;
        }
        if (i >= 0) {
            span *x = &l->s[i];
            x->mb = sp.mb;
            x->chunk = sp.chunk;
            x->bwd = sp.bwd;
            x->host = host;
            memcpy(x->name, sp.name, sizeof x->name);
        }
        break;
    }
    case MLSYS_EV_COMPUTE_END: {
        int *open = e->tag == 1 ? &l->open_host : &l->open_compute;
        if (*open >= 0)
            l->s[*open].t1 = e->t_ns;
        *open = -1;
        break;
    }
    case MLSYS_EV_COLL_BEGIN:
        t->has_comm = 1;
        l->open_coll = span_add(l, e->t_ns, SP_COLL, 'C');
        if (l->open_coll >= 0)
            snprintf(l->s[l->open_coll].name, sizeof l->s[l->open_coll].name, "%.14s",
                     e->coll >= 0 ? mlsys_coll_name((mlsys_coll)e->coll) : e->label);
        break;
    case MLSYS_EV_COLL_END:
        if (l->open_coll >= 0)
            l->s[l->open_coll].t1 = e->t_ns;
        l->open_coll = -1;
        break;
    case MLSYS_EV_SEND_BEGIN: case MLSYS_EV_RECV_BEGIN: {
        /* p2p inside a collective is already shown by the collective's span */
        if (l->open_coll >= 0)
            break;
        int i = span_add(l, e->t_ns, e->kind == MLSYS_EV_SEND_BEGIN ? SP_SEND : SP_RECV, 'C');
        t->has_comm = 1;
        if (i >= 0)
            l->s[i].peer = e->peer;
        break;
    }
    case MLSYS_EV_SEND_END: case MLSYS_EV_RECV_END: {
        int want = e->kind == MLSYS_EV_SEND_END ? SP_SEND : SP_RECV;
        for (int i = l->n - 1; i >= 0 && i >= l->n - 64; i--)
            if (l->s[i].kind == want && l->s[i].t1 == 0) {
                l->s[i].t1 = e->t_ns;
                break;
            }
        break;
    }
    default:
        break;
    }
}

/* ---- time: squeezed gaps, the window, columns ---- */

/* What is drawn: the current section's spans, or every span (a). */
typedef struct view_win {
    int sec;                    /* -1: the whole run */
    uint64_t lo, hi;            /* its time window */
} view_win;

static int visible(const view_win *vw, const span *s)
{
    return vw->sec < 0 || s->sec == vw->sec;
}

typedef struct brk {
    uint64_t t;
    int busy, wait;             /* +1 / -1 */
} brk;

static int by_t(const void *a, const void *b)
{
    const brk *x = a, *y = b;
    return x->t < y->t ? -1 : x->t > y->t;
}

/* Intervals of the window longer than min_len where no lane has a span open, or where every
 * lane waits at a gate: what the axis squeezes. The caller frees *out. */
static int find_gaps(const timeline *t, const view_win *vw, uint64_t min_len, gap **out)
{
    size_t n = 0;
    for (int r = 0; r < t->n; r++)
        n += (size_t)t->ln[r].n + (size_t)t->ln[r].nwait;
    brk *b = mlsys_xrealloc(NULL, (2 * n + 2) * sizeof *b);
    size_t k = 0;
    int lanes_waiting_ever = 0;
    for (int r = 0; r < t->n; r++) {
        const lane *l = &t->ln[r];
        for (int i = 0; i < l->n; i++) {
            const span *s = &l->s[i];
            if (!visible(vw, s))
                continue;
            uint64_t a = s->t0 > vw->lo ? s->t0 : vw->lo, e = s->t1 ? s->t1 : t->t_max;
            e = e < vw->hi ? e : vw->hi;
            if (e <= a)
                continue;
            b[k++] = (brk){a, 1, 0};
            b[k++] = (brk){e, -1, 0};
        }
        lanes_waiting_ever += l->nwait > 0;
        for (int i = 0; i < l->nwait; i++) {
            uint64_t a = l->wait[i].t0 > vw->lo ? l->wait[i].t0 : vw->lo;
            uint64_t e = l->wait[i].t1 < vw->hi ? l->wait[i].t1 : vw->hi;
            if (e <= a)
                continue;
            b[k++] = (brk){a, 0, 1};
            b[k++] = (brk){e, 0, -1};
        }
    }
    b[k++] = (brk){vw->hi, 0, 0};
    qsort(b, k, sizeof *b, by_t);
    gap *g = NULL;
    int ng = 0, busy = 0, wait = 0;
    uint64_t prev = vw->lo, open_at = vw->lo;
    int in_gap = 1;
    for (size_t i = 0; i <= k; i++) {
        uint64_t now = i < k ? b[i].t : vw->hi;
        if (now > prev) {
            int gapnow = busy == 0 || (t->n > 0 && wait >= t->n && lanes_waiting_ever == t->n);
            if (gapnow && !in_gap) {
                open_at = prev;
                in_gap = 1;
            } else if (!gapnow && in_gap) {
                if (prev > open_at && prev - open_at > min_len) {
                    g = mlsys_xrealloc(g, (size_t)(ng + 1) * sizeof *g);
                    g[ng++] = (gap){open_at, prev};
                }
                in_gap = 0;
            }
        }
        if (i == k)
            break;
        busy += b[i].busy;
        wait += b[i].wait;
        prev = now;
    }
    if (in_gap && vw->hi > open_at && vw->hi - open_at > min_len) {
        g = mlsys_xrealloc(g, (size_t)(ng + 1) * sizeof *g);
        g[ng++] = (gap){open_at, vw->hi};
    }
    free(b);
    *out = g;
    return ng;
}

typedef struct axis {
    gap *g;
    int ng;
    uint64_t keep;              /* what a squeezed gap still counts for */
    double w0, w1;              /* the window in squeezed time */
    int cols;
    uint64_t lo;                /* where squeezed time 0 is */
} axis;

/* Squeezed time: real time minus what the gaps before it lose. */
static double squeeze(const axis *a, uint64_t x)
{
    double v = (double)(x - (x > a->lo ? a->lo : x));
    for (int i = 0; i < a->ng; i++) {
        if (x <= a->g[i].t0)
            break;
        uint64_t end = x < a->g[i].t1 ? x : a->g[i].t1, len = end - a->g[i].t0;
        if (len > a->keep)
            v -= (double)(len - a->keep);
    }
    return v;
}

static int col_of(const axis *a, double v)
{
    return (int)((v - a->w0) / (a->w1 - a->w0) * a->cols);
}

static void fmt_time(const timeline *t, double ns, char *out, size_t n)
{
    if (t->synthetic && t->slot_ns)
        snprintf(out, n, "%.0f slot%s", ns / (double)t->slot_ns,
                 ns / (double)t->slot_ns == 1.0 ? "" : "s");
    else if (ns >= 1e9)
        snprintf(out, n, "%.2f s", ns / 1e9);
    else if (ns >= 1e6)
        snprintf(out, n, "%.1f ms", ns / 1e6);
    else
        snprintf(out, n, "%.0f us", ns / 1e3);
}

static grid_attr kind_attr(int kind, int bwd)
{
    grid_attr a;
    switch (kind) {
    case SP_F: a = GRID_PAIR(UI_PAIR_FULL); break;
    case SP_B: a = GRID_PAIR(UI_PAIR_PARTIAL); break;
    case SP_W: a = GRID_PAIR(UI_PAIR_CELL0 + 2); break;
    case SP_OTHER: a = GRID_PAIR(UI_PAIR_CELL0 + 5); break;
    default: a = GRID_PAIR(UI_PAIR_CELL0); break;
    }
    return bwd && kind == SP_OTHER ? a | GRID_REVERSE : a;
}

/* One row of spans into a->cols columns: mode 0 compute ('.' where idle), 1 communication
 * and the second thread's spans (blank where none), 2 both in one row (compute drawn over
 * the rest). A span's text
 * goes in only where it fits and no text of the span before it is: never two run together. */
static void draw_row(grid *g, int x, int y, const axis *a, const timeline *t, const lane *l,
                     const view_win *vw, int mode)
{
    for (int c = 0; c < a->cols; c++)
        grid_set(g, x + c, y, mode == 1 ? ' ' : '.', GRID_PAIR(UI_PAIR_DIM) | GRID_DIM);
    /* what holds each column: the width in columns of the span drawn there (HUGE_VAL none).
     * A span narrower than a column (a round's outcome beside its forward) keeps the column
     * it falls in against any wider span, and against a narrow one only if it is narrower:
     * what would otherwise vanish is what is shown. */
    double *held = mlsys_xrealloc(NULL, (size_t)(a->cols > 0 ? a->cols : 1) * sizeof *held);
    for (int c = 0; c < a->cols; c++)
        held[c] = HUGE_VAL;
    for (int pass = 0; pass < 2; pass++) {
        int comm = pass == 0;           /* communication first, so compute wins a column */
        if ((mode == 0 && comm) || (mode == 1 && !comm))
            continue;
        int text_end = -1;
        for (int i = 0; i < l->n; i++) {
            const span *s = &l->s[i];
            if ((s->kind >= SP_SEND || s->host) != comm || !visible(vw, s))
                continue;
            uint64_t e = s->t1 ? s->t1 : t->t_max;
            uint64_t b0 = s->t0 > vw->lo ? s->t0 : vw->lo;
            e = e < vw->hi ? e : vw->hi;
            if (e < b0)
                continue;
            double f0 = (squeeze(a, b0) - a->w0) / (a->w1 - a->w0) * a->cols;
            double f1 = (squeeze(a, e) - a->w0) / (a->w1 - a->w0) * a->cols;
            /* a span owns the columns it covers; one ending on a column's edge does not
             * enter that column (the small slack absorbs rounding) */
            int c0 = (int)floor(f0 + 1e-6), c1 = (int)ceil(f1 - 1e-6) - 1;
            if (c1 < c0)
                c1 = c0;
            if (c1 < 0 || c0 >= a->cols)
                continue;
            char text[24];
            if (s->kind == SP_COLL)
                snprintf(text, sizeof text, "%s", s->name);
            else if (s->kind == SP_SEND)
                snprintf(text, sizeof text, "C>%d", s->peer);
            else if (s->kind == SP_RECV)
                snprintf(text, sizeof text, "C<%d", s->peer);
            else if (s->mb >= 0 && s->chunk >= 0)
                snprintf(text, sizeof text, "%c%d%c", s->tag, s->mb, 'a' + s->chunk % 26);
            else if (s->mb >= 0)
                snprintf(text, sizeof text, "%c%d", s->tag, s->mb);
            else
                snprintf(text, sizeof text, "%c", s->tag);
            int width = c1 - c0 + 1, len = (int)strlen(text);
            int say = len <= width && c0 >= text_end;
            grid_attr at = kind_attr(s->kind, s->bwd);
            double wide = f1 - f0;
            for (int k = 0; k < width; k++) {
                int c = c0 + k;
                if (c < 0 || c >= a->cols || (held[c] < 1.0 && wide >= held[c]))
                    continue;
                held[c] = wide;
                char ch = say && k < len ? text[k] : (comm && !s->host ? 'C' : s->tag);
                grid_set(g, x + c, y, (uint32_t)(unsigned char)ch, at);
            }
            if (say)
                text_end = c0 + len;
        }
    }
    free(held);
}

/* Measure of the union of sorted, disjoint-in-themselves interval lists a and b within
 * [lo, hi]. */
static double union_len(const gap *a, int na, const void *bw, int nb, uint64_t lo, uint64_t hi)
{
    const struct { uint64_t t0, t1; } *w = bw;
    brk *b = mlsys_xrealloc(NULL, (size_t)(2 * (na + nb) + 1) * sizeof *b);
    int k = 0;
    for (int i = 0; i < na; i++) {
        b[k++] = (brk){a[i].t0, 1, 0};
        b[k++] = (brk){a[i].t1, -1, 0};
    }
    for (int i = 0; i < nb; i++) {
        b[k++] = (brk){w[i].t0, 1, 0};
        b[k++] = (brk){w[i].t1, -1, 0};
    }
    qsort(b, (size_t)k, sizeof *b, by_t);
    double len = 0;
    int depth = 0;
    uint64_t prev = lo;
    for (int i = 0; i < k; i++) {
        uint64_t now = b[i].t < lo ? lo : b[i].t > hi ? hi : b[i].t;
        if (depth > 0 && now > prev)
            len += (double)(now - prev);
        depth += b[i].busy;
        prev = now;
    }
    free(b);
    return len;
}

/* The bubble of a lane over its window: the share of time with no compute span, the gaps
 * where nobody works and its own waits at a gate not counted. -1 when it has no compute. */
static double lane_bubble(const timeline *t, const lane *l, const view_win *vw, const gap *g,
                          int ng)
{
    if (vw->hi <= vw->lo)
        return 0.0;
    double busy = 0.0;
    int any = 0;
    for (int i = 0; i < l->n; i++) {
        const span *s = &l->s[i];
        if (s->kind >= SP_SEND || s->host || !visible(vw, s))
            continue;
        any = 1;
        uint64_t e = s->t1 ? s->t1 : t->t_max;
        uint64_t lo = s->t0 > vw->lo ? s->t0 : vw->lo, hi = e < vw->hi ? e : vw->hi;
        if (hi > lo)
            busy += (double)(hi - lo);
    }
    if (!any)
        return -1.0;
    double total = (double)(vw->hi - vw->lo) - union_len(g, ng, l->wait, l->nwait, vw->lo,
                                                           vw->hi);
    return total > 0 ? 1.0 - busy / total : 0.0;
}

/* The lab's own figure for lane r of section s (MARK "bubble"), or -1. */
static double lab_bubble(const section *s, int r)
{
    if (!s || s->span_ns <= 0 || r >= s->nbusy || s->busy[r] < 0)
        return -1.0;
    return 1.0 - s->busy[r] / s->span_ns;
}

/* The legend: one entry per kind of span the window shows. */
static void draw_legend(grid *g, int x, int y, int w, const timeline *t, const view_win *vw,
                        int ng, int ascii)
{
    struct { char ch; int kind, bwd; char what[20]; } seen[16];
    int ns = 0, p2p = 0, coll = 0;
    for (int r = 0; r < t->n; r++)
        for (int i = 0; i < t->ln[r].n; i++) {
            const span *s = &t->ln[r].s[i];
            if (!visible(vw, s))
                continue;
            if (s->kind == SP_SEND || s->kind == SP_RECV) {
                p2p = 1;
                continue;
            }
            if (s->kind == SP_COLL) {
                coll = 1;
                continue;
            }
            int k = 0;
            while (k < ns && !(seen[k].ch == s->tag && seen[k].kind == s->kind))
                k++;
            if (k == ns && ns < 16) {
                seen[ns].ch = s->tag;
                seen[ns].kind = s->kind;
                seen[ns].bwd = s->bwd;
                snprintf(seen[ns].what, sizeof seen[ns].what, "%s",
                         s->kind == SP_F ? "forward" : s->kind == SP_B ? "backward" :
                         s->kind == SP_W ? "weight grad" : s->name);
                ns++;
            } else if (k < ns) {
                seen[k].bwd |= s->bwd;
            }
        }
    int lx = x, bwd_other = 0;
    for (int i = 0; i < ns && lx < x + w - 8; i++) {
        grid_set(g, lx, y, (uint32_t)(unsigned char)seen[i].ch, kind_attr(seen[i].kind, 0));
        lx += 2;
        lx += view_put_clipped(g, lx, y, x + w - lx, seen[i].what, GRID_DIM) + 2;
        bwd_other |= seen[i].bwd && seen[i].kind == SP_OTHER;
    }
    if (bwd_other && lx < x + w - 16) {
        grid_set(g, lx, y, 'x', GRID_REVERSE);
        lx += 2;
        lx += grid_put(g, lx, y, "backward", GRID_DIM) + 2;
    }
    if (coll && lx < x + w - 16)
        lx += grid_put(g, lx, y, "C collective", GRID_DIM) + 2;
    if (p2p && lx < x + w - 22)
        lx += grid_put(g, lx, y, "C>2/C<2 send/recv", GRID_DIM) + 2;
    if (lx < x + w - 8) {
        grid_set(g, lx, y, '.', GRID_PAIR(UI_PAIR_DIM) | GRID_DIM);
        lx += 2;
        lx += grid_put(g, lx, y, "idle", GRID_DIM) + 2;
    }
    if (ng && lx < x + w - 18)
        grid_put(g, lx, y, view_glyph(ascii, "≈ waits squeezed", "~ waits squeezed"),
                 GRID_DIM);
}

static void tl_draw(void *data, grid *g, int x, int y, int w, int h, const view_ctx *ctx)
{
    timeline *t = data;
    int ascii = ctx->ascii;
    grid_clip(g, x, y, w, h);
    if (!t->n || t->t_max <= t->t_min) {
        view_put_clipped(g, x, y, w, "timeline: one lane per rank over time", GRID_BOLD);
        grid_put(g, x + 2, y + 2, "no spans yet: compute (F/B/W) and messages appear here",
                 GRID_DIM);
        grid_unclip(g);
        return;
    }
    /* the window: the current section (the newest this frame has), or the whole run */
    view_win vw = {-1, t->t_min, t->t_max};
    const section *sec = NULL;
    if (!t->whole && t->nsec > 1) {
        vw.sec = t->nsec - 1;
        sec = &t->sec[vw.sec];
        vw.lo = sec->t0 > t->t_min ? sec->t0 : t->t_min;
    }
    /* start-up (launch, rendezvous, the barrier before the first op) is not the pipeline:
     * the whole-run picture starts at the first compute span */
    uint64_t skipped = 0;
    if (vw.sec < 0 && t->have_c0 && t->t_c0 > t->t_min && t->t_c0 < t->t_max) {
        skipped = t->t_c0 - t->t_min;
        vw.lo = t->t_c0;
    }
    if (vw.hi <= vw.lo)
        vw.hi = vw.lo + 1;
    /* the axis: the run so far, in doublings so that it does not rescale every event */
    uint64_t len = vw.hi - vw.lo;
    if (t->synthetic || !ctx->live || vw.sec >= 0) {
        t->scale = len;                 /* everything is known: fit it */
    } else {
        if (!t->scale)
            t->scale = len ? len : 1;
        while (t->scale < len)
            t->scale *= 2;
    }
    axis a = {0};
    a.lo = vw.lo;
    /* gaps where nobody works or every rank waits at a gate, longer than a tenth of the busy
     * time and 1 ms: each squeezed to a twentieth of the busy time */
    a.ng = t->synthetic ? 0 : find_gaps(t, &vw, 0, &a.g);
    uint64_t idle = 0;
    for (int i = 0; i < a.ng; i++)
        idle += a.g[i].t1 - a.g[i].t0;
    uint64_t busy = len > idle ? len - idle : 0, min_gap = busy / 10 > 1000000 ? busy / 10
                                                                                : 1000000;
    int kept = 0;
    for (int i = 0; i < a.ng; i++)
        if (a.g[i].t1 - a.g[i].t0 > min_gap)
            a.g[kept++] = a.g[i];
    a.ng = kept;
    a.keep = busy / 20;
    double squeezed_len = squeeze(&a, vw.lo + len);
    double scale = t->scale > len ? squeezed_len * (double)t->scale / (double)len : squeezed_len;
    if (t->zoom < 0)
        t->zoom = 0;
    double win = scale / (double)(1u << t->zoom);
    if (t->follow && t->zoom > 0)
        t->off = squeezed_len > win ? (uint64_t)(squeezed_len - win) : 0;
    if ((double)t->off > scale - win)
        t->off = scale > win ? (uint64_t)(scale - win) : 0;
    a.w0 = (double)t->off;
    a.w1 = a.w0 + (win > 0 ? win : 1);
    /* the second row of a lane: communication ("com"), or the serving engine's CPU work
     * ("cpu"); none when the run has neither */
    int second = t->has_comm;
    for (int r = 0; r < t->n; r++)
        second |= t->ln[r].has_host;
    int rows_per = second && h >= 4 + 2 * t->n ? 2 : 1;
    a.cols = w - TL_LABEL - TL_RIGHT;
    if (a.cols < 8 || h < 4) {
        view_put_clipped(g, x, y, w, "timeline: too small", GRID_DIM);
        free(a.g);
        grid_unclip(g);
        return;
    }
    /* title: the section and its bubble, the lab's own figure when it sent one */
    double sum = 0.0, labsum = 0.0;
    int nb = 0, nlab = 0;
    for (int r = 0; r < t->n; r++) {
        double b = lane_bubble(t, &t->ln[r], &vw, a.g, a.ng);
        if (b >= 0) {
            sum += b;
            nb++;
        }
        double lb = lab_bubble(sec, r);
        if (lb >= 0) {
            labsum += lb;
            nlab++;
        }
    }
    const char *dot = view_glyph(ascii, "·", "-");
    char title[240], what[120] = "";
    int used = 0, nsteps = t->nsec - 1;
    if (ctx->sm) {                  /* the lab steps of the whole run, not only those fed */
        int k = 0;
        for (int i = 1; i < sm_nframes(ctx->sm); i++)
            k += sm_frame_at(ctx->sm, i)->call < 0;
        if (k > nsteps)
            nsteps = k;
    }
    if (sec && sec->phase[0] && strcmp(sec->phase, sec->name))
        used = snprintf(what, sizeof what, "%s %s %s %s step %d of %d", sec->phase, dot,
                        sec->name[0] ? sec->name : "section", dot, vw.sec, nsteps);
    else if (sec)
        used = snprintf(what, sizeof what, "%s %s step %d of %d", sec->name[0] ? sec->name :
                        "section", dot, vw.sec, nsteps);
    else if (t->nsec > 1)
        used = snprintf(what, sizeof what, "the whole run");
    else
        used = snprintf(what, sizeof what, "%d lane%s", t->n, t->n == 1 ? "" : "s");
    (void)used;
    if (nlab && nlab == t->n)
        snprintf(title, sizeof title, "timeline %s %s %s bubble %.1f%% measured by the lab "
                 "(span %.2f ms)", dot, what, dot, 100.0 * labsum / nlab, sec->span_ns / 1e6);
    else if (nb)
        snprintf(title, sizeof title, "timeline %s %s %s bubble %.1f%% overall%s", dot, what,
                 dot, 100.0 * sum / nb, t->synthetic ? " (schedule, one slot per op)" : "");
    else
        snprintf(title, sizeof title, "timeline %s %s %s no compute spans: this lab marks none, "
                 "the rows show its communication", dot, what, dot);
    view_put_clipped(g, x, y, w, title, GRID_BOLD);
    draw_legend(g, x, y + 1, w, t, &vw, a.ng, ascii);
    int row = y + 2, shown = 0;
    for (int r = 0; r < t->n && row + rows_per <= y + h - 2; r++, shown++) {
        lane *l = &t->ln[r];
        grid_printf(g, x, row, UI_RANK_ATTR(r) | GRID_BOLD, "r%-2d", r);
        grid_set(g, x + TL_LABEL - 1, row, grid_line_cp(GRID_V, ascii), GRID_DIM);
        draw_row(g, x + TL_LABEL, row, &a, t, l, &vw, rows_per == 2 ? 0 : 2);
        double b = lab_bubble(sec, r);
        if (b < 0 || nlab != t->n)
            b = lane_bubble(t, l, &vw, a.g, a.ng);
        if (b >= 0)
            grid_printf(g, x + TL_LABEL + a.cols, row, GRID_DIM, " %5.1f%%", 100.0 * b);
        else
            grid_put(g, x + TL_LABEL + a.cols, row, "    n/a", GRID_DIM);
        if (rows_per == 2) {
            grid_put(g, x, row + 1, l->has_host ? "cpu" : "com", GRID_DIM);
            grid_set(g, x + TL_LABEL - 1, row + 1, grid_line_cp(GRID_V, ascii), GRID_DIM);
            draw_row(g, x + TL_LABEL, row + 1, &a, t, l, &vw, 1);
        }
        row += rows_per;
    }
    /* the squeezed gaps, marked on the axis */
    grid_hline(g, x + TL_LABEL, row, a.cols, GRID_DIM);
    for (int i = 0; i < a.ng; i++) {
        int c = col_of(&a, squeeze(&a, a.g[i].t0));
        if (c >= 0 && c < a.cols)
            grid_put(g, x + TL_LABEL + c, row, view_glyph(ascii, "≈", "~"), GRID_PAIR(UI_PAIR_WARN));
    }
    char l0[32], l1[32], more[96] = "";
    fmt_time(t, a.w0, l0, sizeof l0);
    fmt_time(t, a.w1, l1, sizeof l1);
    if (t->synthetic && t->slot_ns)
        snprintf(l0, sizeof l0, "%.0f", a.w0 / (double)t->slot_ns);
    else if (a.w0 == 0)
        snprintf(l0, sizeof l0, "0");
    if (shown < t->n)
        snprintf(more, sizeof more, "+%d lanes below (taller terminal)", t->n - shown);
    else if (skipped && a.w0 == 0) {
        char sk[24];
        fmt_time(t, (double)skipped, sk, sizeof sk);
        snprintf(more, sizeof more, "(from the first compute; %s of start-up before)", sk);
    }
    if (row + 1 < y + h) {
        grid_put(g, x + TL_LABEL, row + 1, l0, GRID_DIM);
        if (more[0])
            view_put_clipped(g, x + TL_LABEL + (int)strlen(l0) + 2, row + 1,
                             a.cols - (int)strlen(l0) - (int)strlen(l1) - 4, more,
                             shown < t->n ? GRID_PAIR(UI_PAIR_WARN) : GRID_DIM);
        if (t->zoom)
            grid_printf(g, x + TL_LABEL + a.cols / 2 - 4, row + 1, GRID_DIM, "zoom x%d",
                        1 << t->zoom);
        grid_put(g, x + TL_LABEL + a.cols - (int)strlen(l1), row + 1, l1, GRID_DIM);
    }
    free(a.g);
    grid_unclip(g);
}

static int tl_key(void *data, int key)
{
    timeline *t = data;
    uint64_t len = t->t_max > t->t_min ? t->t_max - t->t_min : 0;
    uint64_t win = (t->scale > len ? t->scale : len) >> t->zoom;
    switch (key) {
    case '>': case '.':
        if (t->zoom < 12)
            t->zoom++;
        return UI_HANDLED | UI_REDRAW;
    case '<': case ',':
        if (t->zoom > 0)
            t->zoom--;
        if (!t->zoom)
            t->off = 0;
        return UI_HANDLED | UI_REDRAW;
    case 'z':
        t->zoom = 0;
        t->off = 0;
        t->follow = 1;
        return UI_HANDLED | UI_REDRAW;
    case 'a':
        t->whole = !t->whole;
        t->zoom = 0;
        t->off = 0;
        t->follow = 1;
        return UI_HANDLED | UI_REDRAW;
    case 'h':
        t->follow = 0;
        t->off = t->off > win / 4 ? t->off - win / 4 : 0;
        return UI_HANDLED | UI_REDRAW;
    case 'l':
        t->follow = 0;
        t->off += win / 4;
        return UI_HANDLED | UI_REDRAW;
    case 'g':
        t->follow = 0;
        t->off = 0;
        return UI_HANDLED | UI_REDRAW;
    case 'G':
        t->follow = 1;
        t->off = (uint64_t)-1 / 4;      /* clamped to the end when drawn */
        return UI_HANDLED | UI_REDRAW;
    default:
        return 0;
    }
}

static const ui_key_help tl_keys[] = {
    {"</>", "zoom"}, {"h/l", "scroll"}, {"g/G", "start/end"}, {"z", "unzoom"},
    {"a", "this step/whole run"}, {NULL, NULL}
};

const view_class view_timeline_class = {
    .name = "timeline",
    .title = "timeline",
    .help = "one lane per rank over time: F/B/W compute with micro-batch numbers, "
            "communication on its own row (a serving engine's CPU phases on a row 'cpu' under "
            "its forward), idle '.', bubble per lane (gate waits not counted); "
            "a lab's steps are sections, a shows the whole run; < > zoom, h l scroll",
    .keys = tl_keys,
    .create = tl_create,
    .free = tl_free,
    .reset = tl_reset,
    .rewind = tl_rewind,
    .wants = tl_wants,
    .event = tl_event,
    .draw = tl_draw,
    .key = tl_key,
};
