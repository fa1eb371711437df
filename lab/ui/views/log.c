/* log.c - the log view: every rank's output (stdout and stderr, plus the runner's own lines),
 * interleaved in arrival order or grouped in rank order, optionally one rank only. It
 * follows the tail until the learner scrolls up. */
#include "view.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LOG_MAX_LINES 200000    /* older lines are dropped, and the header says how many */

typedef struct log_line {
    int rank;                   /* -1: the runner */
    int is_err;
    char *text;
} log_line;

typedef struct logv {
    log_line *l;
    size_t n, cap, dropped;
    int by_rank;                /* 0 interleaved, 1 rank order */
    int filter;                 /* -2 all ranks, -1 the runner, else one rank */
    int maxrank;
    int nranks;                 /* of the job: f offers every one of them */
    size_t *order;              /* the lines shown, as indices into l */
    size_t norder;
    int dirty;
    long top;                   /* first shown row of order; -1 follows the tail */
    int page;                   /* rows at the last draw */
} logv;

static void *log_create(void)
{
    logv *v = calloc(1, sizeof *v);
    if (!v)
        abort();
    v->filter = -2;
    v->top = -1;
    v->maxrank = -1;
    return v;
}

static void log_clear(logv *v)
{
    for (size_t i = 0; i < v->n; i++)
        free(v->l[i].text);
    v->n = 0;
    v->dropped = 0;
    v->norder = 0;
    v->dirty = 1;
    v->top = -1;
    v->maxrank = -1;
}

static void log_free(void *data)
{
    logv *v = data;
    if (!v)
        return;
    log_clear(v);
    free(v->l);
    free(v->order);
    free(v);
}

static void log_reset(void *data, int nranks)
{
    logv *v = data;
    log_clear(v);
    v->nranks = nranks;
    if (v->filter >= nranks)
        v->filter = -2;
}

static void log_event(void *data, const mlsys_event *ev)
{
    (void)data;
    (void)ev;
}

static void log_line_add(void *data, int rank, int is_err, const char *text)
{
    logv *v = data;
    if (v->n == LOG_MAX_LINES) {
        size_t drop = LOG_MAX_LINES / 4;
        for (size_t i = 0; i < drop; i++)
            free(v->l[i].text);
        memmove(v->l, v->l + drop, (v->n - drop) * sizeof v->l[0]);
        v->n -= drop;
        v->dropped += drop;
    }
    if (v->n == v->cap) {
        v->cap = v->cap ? v->cap * 2 : 256;
        v->l = grid_xrealloc(v->l, v->cap * sizeof v->l[0]);
    }
    size_t len = strlen(text);
    char *t = grid_xrealloc(NULL, len + 1);
    memcpy(t, text, len + 1);
    v->l[v->n++] = (log_line){rank, is_err, t};
    if (rank > v->maxrank)
        v->maxrank = rank;
    v->dirty = 1;
}

/* The shown lines: filtered, and in rank order a stable counting sort by rank. */
static void rebuild(logv *v)
{
    if (!v->dirty)
        return;
    v->order = grid_xrealloc(v->order, (v->n ? v->n : 1) * sizeof v->order[0]);
    v->norder = 0;
    if (!v->by_rank) {
        for (size_t i = 0; i < v->n; i++)
            if (v->filter == -2 || v->l[i].rank == v->filter)
                v->order[v->norder++] = i;
    } else {
        for (int r = -1; r <= v->maxrank; r++) {
            if (v->filter != -2 && r != v->filter)
                continue;
            for (size_t i = 0; i < v->n; i++)
                if (v->l[i].rank == r)
                    v->order[v->norder++] = i;
        }
    }
    v->dirty = 0;
}

static void log_draw(void *data, grid *g, int x, int y, int w, int h, const view_ctx *ctx)
{
    logv *v = data;
    rebuild(v);
    grid_clip(g, x, y, w, h);
    char head[160], f[32];
    if (v->filter == -2)
        snprintf(f, sizeof f, "all");
    else if (v->filter == -1)
        snprintf(f, sizeof f, "runner");
    else
        snprintf(f, sizeof f, "rank %d", v->filter);
    const char *sep = view_glyph(ctx->ascii, "·", "-");
    snprintf(head, sizeof head, "output %s %s showing %s %s %zu line%s%s", v->by_rank ?
             "in rank order" : "interleaved", sep, f, sep, v->norder, v->norder == 1 ? "" : "s",
             v->dropped ? " (oldest dropped)" : "");
    view_put_clipped(g, x, y, w, head, GRID_BOLD);
    int rows = h - 1;
    v->page = rows > 1 ? rows : 1;
    long maxtop = (long)v->norder - rows;
    if (maxtop < 0)
        maxtop = 0;
    long top = v->top < 0 || v->top > maxtop ? maxtop : v->top;
    if (v->top > maxtop)
        v->top = -1;
    if (v->norder == 0)
        grid_put(g, x + 2, y + 2, "no output yet", GRID_DIM);
    for (int i = 0; i < rows && (size_t)(top + i) < v->norder; i++) {
        const log_line *l = &v->l[v->order[top + i]];
        char pre[16];
        grid_attr pa;
        if (l->rank < 0) {
            snprintf(pre, sizeof pre, "[run]");
            pa = GRID_PAIR(UI_PAIR_DIM) | GRID_BOLD;
        } else {
            snprintf(pre, sizeof pre, "[r%d]", l->rank);
            pa = UI_RANK_ATTR(l->rank) | GRID_BOLD;
        }
        int cx = x + grid_put(g, x, y + 1 + i, pre, pa);
        if (l->is_err)
            cx += grid_put(g, cx, y + 1 + i, "!", GRID_PAIR(UI_PAIR_ERR) | GRID_BOLD);
        cx += 1;
        view_put_clipped(g, cx, y + 1 + i, x + w - cx, l->text,
                         l->is_err ? GRID_PAIR(UI_PAIR_ERR) : 0);
    }
    if (v->top >= 0 && top < maxtop)
        grid_printf(g, x + w - 18, y, GRID_PAIR(UI_PAIR_WARN), "%ld more below", maxtop - top);
    grid_unclip(g);
}

static int log_key(void *data, int key)
{
    logv *v = data;
    rebuild(v);
    long maxtop = (long)v->norder - v->page;
    if (maxtop < 0)
        maxtop = 0;
    long top = v->top < 0 ? maxtop : v->top;
    switch (key) {
    case UI_KEY_UP: case 'k': case UI_KEY_WHEEL_UP: top -= key == UI_KEY_WHEEL_UP ? 3 : 1; break;
    case UI_KEY_DOWN: case 'j': case UI_KEY_WHEEL_DOWN: top += key == UI_KEY_WHEEL_DOWN ? 3 : 1; break;
    case UI_KEY_PGUP: case UI_CTRL('b'): top -= v->page - 1; break;
    case UI_KEY_PGDN: case UI_CTRL('f'): top += v->page - 1; break;
    case UI_KEY_HOME: case 'g': top = 0; break;
    case UI_KEY_END: case 'G': top = maxtop; break;
    case 'o':
        v->by_rank = !v->by_rank;
        v->dirty = 1;
        return UI_HANDLED | UI_REDRAW;
    case 'f': case 'F': {
        /* all, the runner, then every rank of the job (and any other that printed) */
        int last = v->nranks - 1 > v->maxrank ? v->nranks - 1 : v->maxrank;
        if (key == 'f')
            v->filter = v->filter >= last ? -2 : v->filter + 1;
        else
            v->filter = v->filter <= -2 ? last : v->filter - 1;
        v->dirty = 1;
        v->top = -1;
        return UI_HANDLED | UI_REDRAW;
    }
    default:
        return 0;
    }
    if (top < 0)
        top = 0;
    v->top = top >= maxtop ? -1 : top;
    return UI_HANDLED | UI_REDRAW;
}

static const ui_key_help log_keys[] = {
    {"j/k", "scroll"}, {"g/G", "top/end"}, {"o", "rank order"}, {"f/F", "next/previous rank"},
    {NULL, NULL}
};

const view_class view_log_class = {
    .name = "log",
    .title = "log",
    .help = "every rank's output: interleaved as it came, or in rank order (o); one rank at a time (f and F)",
    .keys = log_keys,
    .create = log_create,
    .free = log_free,
    .reset = log_reset,
    .event = log_event,
    .line = log_line_add,
    .phase = NULL,
    .draw = log_draw,
    .key = log_key,
};
