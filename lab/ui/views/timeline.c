/* timeline.c - the timeline view (a first version): one lane per rank over the job's time,
 * each column showing what the rank was doing then: a compute span by the first letter of its
 * label (F, B, W ...), a send or receive in progress, a collective, or idle. The same events
 * as the ring view; the chapters on pipelines will grow it (bubble %, micro-batch colours). */
#include "view.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TL_SPANS 65536          /* per rank; later spans are counted, not kept */

enum { SP_COMPUTE, SP_SEND, SP_RECV, SP_COLL };

typedef struct span {
    uint64_t t0, t1;            /* t1 == 0: still open */
    int kind;
    char tag;                   /* the letter shown */
} span;

typedef struct lane {
    span *s;
    int n, cap;
    int open_compute;           /* index of the open compute span, -1 */
    int open_coll;
    uint64_t dropped;
} lane;

typedef struct timeline {
    lane *ln;
    int n;
    uint64_t t_min, t_max;
} timeline;

static void *tl_create(void)
{
    timeline *t = calloc(1, sizeof *t);
    if (!t)
        abort();
    return t;
}

static void tl_reset(void *data, int nranks)
{
    timeline *t = data;
    for (int i = 0; i < t->n; i++)
        free(t->ln[i].s);
    free(t->ln);
    memset(t, 0, sizeof *t);
    (void)nranks;
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
    if (r < 0 || r >= 64)
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
    l->s[l->n] = (span){t0, 0, kind, tag};
    return l->n++;
}

static void tl_event(void *data, const mlsys_event *e)
{
    timeline *t = data;
    lane *l = lane_of(t, e->rank);
    if (!l)
        return;
    if (!t->t_min || e->t_ns < t->t_min)
        t->t_min = e->t_ns;
    if (e->t_ns > t->t_max)
        t->t_max = e->t_ns;
    switch (e->kind) {
    case MLSYS_EV_COMPUTE_BEGIN:
        l->open_compute = span_add(l, e->t_ns, SP_COMPUTE, e->label[0] ? e->label[0] : 'c');
        break;
    case MLSYS_EV_COMPUTE_END:
        if (l->open_compute >= 0)
            l->s[l->open_compute].t1 = e->t_ns;
        l->open_compute = -1;
        break;
    case MLSYS_EV_COLL_BEGIN:
        l->open_coll = span_add(l, e->t_ns, SP_COLL, '=');
        break;
    case MLSYS_EV_COLL_END:
        if (l->open_coll >= 0)
            l->s[l->open_coll].t1 = e->t_ns;
        l->open_coll = -1;
        break;
    case MLSYS_EV_SEND_BEGIN: case MLSYS_EV_RECV_BEGIN: {
        int i = span_add(l, e->t_ns, e->kind == MLSYS_EV_SEND_BEGIN ? SP_SEND : SP_RECV,
                         e->kind == MLSYS_EV_SEND_BEGIN ? 's' : 'r');
        (void)i;
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

static void tl_draw(void *data, grid *g, int x, int y, int w, int h, const view_ctx *ctx)
{
    timeline *t = data;
    grid_clip(g, x, y, w, h);
    view_put_clipped(g, x, y, w, "timeline: one lane per rank; letters are compute spans, "
                     "s/r sends and receives, = collectives", GRID_BOLD);
    if (!t->n || t->t_max <= t->t_min) {
        grid_put(g, x + 2, y + 2, "no spans yet", GRID_DIM);
        grid_unclip(g);
        return;
    }
    int lw = 5, cols = w - lw - 1;
    int rows = h - 3;
    if (cols < 10 || rows < 1) {
        grid_unclip(g);
        return;
    }
    double span_ns = (double)(t->t_max - t->t_min);
    for (int r = 0; r < t->n && r < rows; r++) {
        lane *l = &t->ln[r];
        int row = y + 2 + r;
        grid_printf(g, x, row, UI_RANK_ATTR(r) | GRID_BOLD, "r%-3d", r);
        grid_set(g, x + lw - 1, row, grid_line_cp(GRID_V, ctx->ascii), GRID_DIM);
        /* priority per column: compute > send/recv > collective > idle */
        for (int pass = 0; pass < 3; pass++)
            for (int i = 0; i < l->n; i++) {
                span *s = &l->s[i];
                int pri = s->kind == SP_COMPUTE ? 2 : s->kind == SP_COLL ? 0 : 1;
                if (pri != pass)
                    continue;
                uint64_t e = s->t1 ? s->t1 : t->t_max;
                int c0 = (int)((double)(s->t0 - t->t_min) / span_ns * (cols - 1));
                int c1 = (int)((double)(e - t->t_min) / span_ns * (cols - 1));
                for (int c = c0; c <= c1 && c < cols; c++) {
                    grid_attr a = s->kind == SP_COMPUTE ? UI_CELL_ATTR(r)
                                  : s->kind == SP_COLL ? GRID_PAIR(UI_PAIR_DIM)
                                  : UI_RANK_ATTR(r);
                    grid_set(g, x + lw + c, row, (uint32_t)(unsigned char)s->tag, a);
                }
            }
    }
    char a[32], b[32];
    view_fmt_value(0, a, sizeof a);
    snprintf(a, sizeof a, "0");
    double ms = span_ns / 1e6;
    if (ms >= 1)
        snprintf(b, sizeof b, "%.1f ms", ms);
    else
        snprintf(b, sizeof b, "%.0f us", span_ns / 1e3);
    int ay = y + 2 + (t->n < rows ? t->n : rows);
    grid_hline(g, x + lw, ay, cols, GRID_DIM);
    grid_put(g, x + lw, ay + 1 < y + h ? ay + 1 : ay, a, GRID_DIM);
    grid_put(g, x + lw + cols - (int)strlen(b), ay + 1 < y + h ? ay + 1 : ay, b, GRID_DIM);
    grid_unclip(g);
}

static const ui_key_help tl_keys[] = {{NULL, NULL}};

const view_class view_timeline_class = {
    .name = "timeline",
    .title = "timeline",
    .help = "one lane per rank over time: compute spans, sends and receives, collectives",
    .keys = tl_keys,
    .create = tl_create,
    .free = tl_free,
    .reset = tl_reset,
    .event = tl_event,
    .line = NULL,
    .phase = NULL,
    .draw = tl_draw,
    .key = NULL,
};
