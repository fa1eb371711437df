/* timeline.c - the timeline view: one lane per rank over time, with two rows each: compute
 * (F forward, B backward, W weight gradient, other labels by their first letter, '.' idle,
 * the micro-batch number written into each span) and communication (C for sends and
 * receives, collectives by name), so overlap shows as the two rows busy at once. Each lane
 * ends with its bubble (idle share of the time shown); the title has the overall one. The
 * axis grows in steps of two and gaps where no rank does anything (gated waits) are squeezed
 * to a few columns. Events whose step is >= 0 on COMPUTE_BEGIN/END come from a schedule
 * drawn without ranks (one slot each): the axis then counts slots. Keys: > < zoom, h l
 * scroll, g/G start/end, z whole run (the run screen keeps + - [ ] and the arrows). */
#include "view.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TL_SPANS 65536          /* per rank; later spans are counted, not kept */
#define TL_LANES 64
#define TL_LABEL 4              /* "r12" and a bar */
#define TL_RIGHT 7              /* " 27.3%" */

enum { SP_F, SP_B, SP_W, SP_OTHER, SP_SEND, SP_RECV, SP_COLL };

typedef struct span {
    uint64_t t0, t1;            /* t1 == 0: still open */
    int kind;
    int mb;                     /* micro-batch from a label "F mb3", or -1 */
    int peer;                   /* p2p: the other rank */
    char tag;                   /* the letter shown */
    char name[15];              /* a collective's name */
} span;

typedef struct lane {
    span *s;
    int n, cap;
    int open_compute;           /* index of the open compute span, -1 */
    int open_coll;
    uint64_t dropped;
} lane;

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
    for (int i = 0; i < t->n; i++)
        free(t->ln[i].s);
    free(t->ln);
    memset(t, 0, sizeof *t);
    t->follow = 1;
    (void)nranks;
}

/* The same run from its start: the spans go, the zoom and the window stay. */
static void tl_rewind(void *data)
{
    timeline *t = data;
    int zoom = t->zoom, follow = t->follow;
    uint64_t off = t->off;
    tl_reset(t, 0);
    t->zoom = zoom;
    t->follow = follow;
    t->off = off;
}

static int tl_wants(const mlsys_event *e)
{
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
        t->ln = grid_xrealloc(t->ln, (size_t)(r + 1) * sizeof *t->ln);
        for (int i = t->n; i <= r; i++)
            t->ln[i] = (lane){NULL, 0, 0, -1, -1, 0};
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
        l->s = grid_xrealloc(l->s, (size_t)l->cap * sizeof *l->s);
    }
    l->s[l->n] = (span){t0, 0, kind, -1, -1, tag, ""};
    return l->n++;
}

/* "F mb3", "B mb12 c1": the kind from the first letter, the micro-batch after "mb". */
static void compute_kind(const char *label, int *kind, int *mb, char *tag)
{
    char c = label[0] ? label[0] : 'c';
    *tag = c;
    *kind = c == 'F' ? SP_F : c == 'B' ? SP_B : c == 'W' ? SP_W : SP_OTHER;
    const char *p = strstr(label, "mb");
    *mb = p && p[2] >= '0' && p[2] <= '9' ? atoi(p + 2) : -1;
}

static void tl_event(void *data, const mlsys_event *e, int frame)
{
    timeline *t = data;
    (void)frame;
    lane *l = lane_of(t, e->rank);
    if (!l)
        return;
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
        int kind, mb;
        char tag;
        compute_kind(e->label, &kind, &mb, &tag);
        l->open_compute = span_add(l, e->t_ns, kind, tag);
        if (l->open_compute >= 0)
            l->s[l->open_compute].mb = mb;
        break;
    }
    case MLSYS_EV_COMPUTE_END:
        if (l->open_compute >= 0)
            l->s[l->open_compute].t1 = e->t_ns;
        l->open_compute = -1;
        break;
    case MLSYS_EV_COLL_BEGIN:
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

static int by_t0(const void *a, const void *b)
{
    const gap *x = a, *y = b;
    return x->t0 < y->t0 ? -1 : x->t0 > y->t0;
}

/* Intervals longer than min_len where no lane has a span open; the caller frees *out. */
static int find_gaps(const timeline *t, uint64_t min_len, gap **out)
{
    size_t n = 0;
    for (int r = 0; r < t->n; r++)
        n += (size_t)t->ln[r].n;
    gap *iv = grid_xrealloc(NULL, (n ? n : 1) * sizeof *iv);
    size_t k = 0;
    for (int r = 0; r < t->n; r++)
        for (int i = 0; i < t->ln[r].n; i++) {
            const span *s = &t->ln[r].s[i];
            iv[k++] = (gap){s->t0, s->t1 ? s->t1 : t->t_max};
        }
    qsort(iv, k, sizeof *iv, by_t0);
    gap *g = NULL;
    int ng = 0;
    uint64_t reach = t->t_min;
    for (size_t i = 0; i < k; i++) {
        if (iv[i].t0 > reach && iv[i].t0 - reach > min_len) {
            g = grid_xrealloc(g, (size_t)(ng + 1) * sizeof *g);
            g[ng++] = (gap){reach, iv[i].t0};
        }
        if (iv[i].t1 > reach)
            reach = iv[i].t1;
    }
    free(iv);
    *out = g;
    return ng;
}

typedef struct axis {
    gap *g;
    int ng;
    uint64_t keep;              /* what a squeezed gap still counts for */
    double w0, w1;              /* the window in squeezed time */
    int cols;
} axis;

/* Squeezed time: real time minus what the gaps before it lose. */
static double squeeze(const axis *a, const timeline *t, uint64_t x)
{
    double v = (double)(x - (x > t->t_min ? t->t_min : x));
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

static grid_attr kind_attr(int kind, int ascii)
{
    (void)ascii;
    switch (kind) {
    case SP_F: return GRID_PAIR(UI_PAIR_FULL);
    case SP_B: return GRID_PAIR(UI_PAIR_PARTIAL);
    case SP_W: return GRID_PAIR(UI_PAIR_CELL0 + 2);
    case SP_OTHER: return GRID_PAIR(UI_PAIR_CELL0 + 5);
    default: return GRID_PAIR(UI_PAIR_CELL0);
    }
}

/* One row of spans into a->cols columns: mode 0 compute ('.' where idle), 1 communication
 * (blank where none), 2 both in one row (compute drawn over communication). */
static void draw_row(grid *g, int x, int y, const axis *a, const timeline *t, const lane *l,
                     int mode, int ascii)
{
    for (int c = 0; c < a->cols; c++)
        grid_set(g, x + c, y, mode == 1 ? ' ' : '.', GRID_PAIR(UI_PAIR_DIM) | GRID_DIM);
    for (int pass = 0; pass < 2; pass++) {
        int comm = pass == 0;           /* communication first, so compute wins a column */
        if ((mode == 0 && comm) || (mode == 1 && !comm))
            continue;
        for (int i = 0; i < l->n; i++) {
            const span *s = &l->s[i];
            if ((s->kind >= SP_SEND) != comm)
                continue;
            uint64_t e = s->t1 ? s->t1 : t->t_max;
            double f0 = (squeeze(a, t, s->t0) - a->w0) / (a->w1 - a->w0) * a->cols;
            double f1 = (squeeze(a, t, e) - a->w0) / (a->w1 - a->w0) * a->cols;
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
            else if (s->mb >= 0)
                snprintf(text, sizeof text, "%c%d", s->tag, s->mb);
            else
                snprintf(text, sizeof text, "%c", s->tag);
            int width = c1 - c0 + 1, len = (int)strlen(text);
            grid_attr at = kind_attr(s->kind, ascii);
            for (int k = 0; k < width; k++) {
                int c = c0 + k;
                if (c < 0 || c >= a->cols)
                    continue;
                char ch = len <= width && k < len ? text[k] : (comm ? 'C' : s->tag);
                grid_set(g, x + c, y, (uint32_t)(unsigned char)ch, at);
            }
        }
    }
}

/* The bubble of a lane over [a, b]: the share of time with no compute span. */
static double lane_bubble(const timeline *t, const lane *l, uint64_t a, uint64_t b,
                          const gap *g, int ng)
{
    if (b <= a)
        return 0.0;
    double busy = 0.0, gaps = 0.0;
    for (int i = 0; i < l->n; i++) {
        const span *s = &l->s[i];
        if (s->kind >= SP_SEND)
            continue;
        uint64_t e = s->t1 ? s->t1 : t->t_max;
        uint64_t lo = s->t0 > a ? s->t0 : a, hi = e < b ? e : b;
        if (hi > lo)
            busy += (double)(hi - lo);
    }
    for (int i = 0; i < ng; i++)
        gaps += (double)(g[i].t1 - g[i].t0);      /* gated waits are nobody's bubble */
    double total = (double)(b - a) - gaps;
    return total > 0 ? 1.0 - busy / total : 0.0;
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
    /* start-up (launch, rendezvous, the barrier before the first op) is not the pipeline:
     * the picture starts at the first compute span; t_min is restored before returning */
    uint64_t saved_min = t->t_min, skipped = 0;
    if (t->have_c0 && t->t_c0 > t->t_min && t->t_c0 < t->t_max) {
        skipped = t->t_c0 - t->t_min;
        t->t_min = t->t_c0;
    }
    /* the axis: the run so far, in doublings so that it does not rescale every event */
    uint64_t len = t->t_max - t->t_min;
    if (t->synthetic || !ctx->live) {
        t->scale = len;                 /* everything is known: fit it */
    } else {
        if (!t->scale)
            t->scale = len ? len : 1;
        while (t->scale < len)
            t->scale *= 2;
    }
    axis a = {0};
    /* gaps where nobody works (gated waits), longer than a tenth of the busy time and
     * 1 ms: each squeezed to a twentieth of the busy time */
    a.ng = t->synthetic ? 0 : find_gaps(t, 0, &a.g);
    uint64_t idle = 0;
    for (int i = 0; i < a.ng; i++)
        idle += a.g[i].t1 - a.g[i].t0;
    uint64_t busy = len - idle, min_gap = busy / 10 > 1000000 ? busy / 10 : 1000000;
    int kept = 0;
    for (int i = 0; i < a.ng; i++)
        if (a.g[i].t1 - a.g[i].t0 > min_gap)
            a.g[kept++] = a.g[i];
    a.ng = kept;
    a.keep = busy / 20;
    double squeezed_len = squeeze(&a, t, t->t_min + len);
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
    int rows_per = h >= 4 + 2 * t->n ? 2 : 1;
    a.cols = w - TL_LABEL - TL_RIGHT;
    if (a.cols < 8 || h < 4) {
        view_put_clipped(g, x, y, w, "timeline: too small", GRID_DIM);
        free(a.g);
        t->t_min = saved_min;
        grid_unclip(g);
        return;
    }
    /* title: overall bubble over the whole run */
    double sum = 0.0;
    for (int r = 0; r < t->n; r++)
        sum += lane_bubble(t, &t->ln[r], t->t_min, t->t_max, a.g, a.ng);
    char title[160];
    snprintf(title, sizeof title, "timeline %s %d lane%s %s bubble %.1f%% overall%s",
             view_glyph(ascii, "·", "-"), t->n, t->n == 1 ? "" : "s", view_glyph(ascii, "·", "-"),
             100.0 * sum / t->n, t->synthetic ? " (schedule, one slot per op)" : "");
    view_put_clipped(g, x, y, w, title, GRID_BOLD);
    /* legend: a coloured letter per kind */
    static const struct { int kind; char ch; const char *what; } leg[] = {
        {SP_F, 'F', "forward"}, {SP_B, 'B', "backward"}, {SP_W, 'W', "weight grad"},
        {SP_SEND, 'C', "communication"}, {-1, '.', "idle"}
    };
    int lx = x;
    for (size_t i = 0; i < sizeof leg / sizeof leg[0] && lx < x + w - 8; i++) {
        grid_set(g, lx, y + 1, (uint32_t)leg[i].ch, leg[i].kind < 0 ?
                 GRID_PAIR(UI_PAIR_DIM) | GRID_DIM : kind_attr(leg[i].kind, ascii));
        lx += 2;
        lx += grid_put(g, lx, y + 1, leg[i].what, GRID_DIM) + 2;
    }
    if (a.ng && lx < x + w - 12)
        grid_put(g, lx, y + 1, view_glyph(ascii, "≈ waits squeezed", "~ waits squeezed"),
                 GRID_DIM);
    int row = y + 2, shown = 0;
    for (int r = 0; r < t->n && row + rows_per <= y + h - 2; r++, shown++) {
        lane *l = &t->ln[r];
        grid_printf(g, x, row, UI_RANK_ATTR(r) | GRID_BOLD, "r%-2d", r);
        grid_set(g, x + TL_LABEL - 1, row, grid_line_cp(GRID_V, ascii), GRID_DIM);
        draw_row(g, x + TL_LABEL, row, &a, t, l, rows_per == 2 ? 0 : 2, ascii);
        double b = lane_bubble(t, l, t->t_min, t->t_max, a.g, a.ng);
        grid_printf(g, x + TL_LABEL + a.cols, row, GRID_DIM, " %5.1f%%", 100.0 * b);
        if (rows_per == 2) {
            grid_put(g, x, row + 1, "  c", GRID_DIM);
            grid_set(g, x + TL_LABEL - 1, row + 1, grid_line_cp(GRID_V, ascii), GRID_DIM);
            draw_row(g, x + TL_LABEL, row + 1, &a, t, l, 1, ascii);
        }
        row += rows_per;
    }
    /* the squeezed gaps, marked on the axis */
    grid_hline(g, x + TL_LABEL, row, a.cols, GRID_DIM);
    for (int i = 0; i < a.ng; i++) {
        int c = col_of(&a, squeeze(&a, t, a.g[i].t0));
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
    t->t_min = saved_min;
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
    {"</>", "zoom"}, {"h/l", "scroll"}, {"g/G", "start/end"}, {"z", "whole run"}, {NULL, NULL}
};

const view_class view_timeline_class = {
    .name = "timeline",
    .title = "timeline",
    .help = "one lane per rank over time: F/B/W compute with micro-batch numbers, "
            "communication on its own row, idle '.', bubble per lane; < > zoom, h l scroll",
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
