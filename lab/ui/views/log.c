/* log.c - the log view: every rank's output (stdout and stderr, plus the runner's own lines),
 * interleaved in arrival order or grouped in rank order, optionally one rank only. Long
 * lines wrap under their text (w cuts them instead). It follows the tail until the learner
 * scrolls up. */
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
    long top;                   /* first shown line of order; -1 follows the tail */
    int page;                   /* rows at the last draw */
    int cut;                    /* 1: long lines are cut, not wrapped */
    int textw;                  /* columns for the text at the last draw (wrapping) */
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

/* The same job from its start: the lines go, the order, filter and wrapping stay. */
static void log_rewind(void *data)
{
    logv *v = data;
    long top = v->top;
    log_clear(v);
    v->top = top;
}

/* Bytes of s that fill at most w columns, cut after the last space when there is one in the
 * second half of the piece (so words stay whole), never 0 for a non-empty s. */
static size_t wrap_piece(const char *s, int w)
{
    size_t i = 0, len = strlen(s), space = 0;
    int col = 0;
    while (i < len) {
        uint32_t cp;
        size_t k = grid_utf8_decode(s + i, len - i, &cp);
        int cw = grid_cp_width(cp);
        if (col + cw > w)
            break;
        col += cw;
        i += k;
        if (cp == ' ' && col > w / 2)
            space = i;
    }
    if (i == len)
        return len;
    if (space)
        return space;
    return i ? i : grid_utf8_decode(s, len, &(uint32_t){0});
}

static int line_rows(const logv *v, const log_line *l, int w);

/* The first line of the last page: from the end, as many lines as fit in rows (at least
 * the last one). */
static long last_page(const logv *v, int rows, int w)
{
    long top = (long)v->norder, used = 0;
    while (top > 0) {
        int lr = line_rows(v, &v->l[v->order[top - 1]], w);
        if (used + lr > rows)
            break;
        used += lr;
        top--;
    }
    if (top == (long)v->norder && top > 0)
        top--;
    return top;
}

/* Columns before a line's text: "[r3]" or "[run]", "!" for stderr, a space. */
static int text_col(const log_line *l)
{
    int n = l->rank < 0 ? 5 : l->rank < 10 ? 4 : l->rank < 100 ? 5 : l->rank < 1000 ? 6 : 9;
    return n + (l->is_err ? 1 : 0) + 1;
}

/* Rows line l takes when the view is w columns wide. */
static int line_rows(const logv *v, const log_line *l, int w)
{
    w -= text_col(l);
    if (v->cut || w < 8)
        return 1;
    int rows = 0;
    const char *p = l->text;
    do {
        p += wrap_piece(p, w);
        rows++;
    } while (*p);
    return rows;
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
        v->l = mlsys_xrealloc(v->l, v->cap * sizeof v->l[0]);
    }
    size_t len = strlen(text);
    char *t = mlsys_xrealloc(NULL, len + 1);
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
    v->order = mlsys_xrealloc(v->order, (v->n ? v->n : 1) * sizeof v->order[0]);
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
    int textw = w;                  /* each line's text starts after its own prefix */
    v->textw = textw;
    /* the first line of the last page: from the end, as many lines as their rows fit */
    long maxtop = last_page(v, rows, textw);
    long top = v->top < 0 || v->top > maxtop ? maxtop : v->top;
    if (v->top > maxtop)
        v->top = -1;
    if (v->norder == 0)
        grid_put(g, x + 2, y + 2, "no output yet", GRID_DIM);
    int row = 0;
    for (long li = top; row < rows && (size_t)li < v->norder; li++) {
        const log_line *l = &v->l[v->order[li]];
        char pre[16];
        grid_attr pa;
        if (l->rank < 0) {
            snprintf(pre, sizeof pre, "[run]");
            pa = GRID_PAIR(UI_PAIR_DIM) | GRID_BOLD;
        } else {
            snprintf(pre, sizeof pre, "[r%d]", l->rank);
            pa = UI_RANK_ATTR(l->rank) | GRID_BOLD;
        }
        int cx = x + grid_put(g, x, y + 1 + row, pre, pa);
        if (l->is_err)
            cx += grid_put(g, cx, y + 1 + row, "!", GRID_PAIR(UI_PAIR_ERR) | GRID_BOLD);
        cx += 1;
        grid_attr ta = l->is_err ? GRID_PAIR(UI_PAIR_ERR) : 0;
        int tw = x + w - cx;
        if (v->cut || tw < 8) {
            view_put_clipped(g, cx, y + 1 + row, tw, l->text, ta);
            row++;
            continue;
        }
        const char *p = l->text;
        do {
            size_t k = wrap_piece(p, tw);
            grid_putn(g, cx, y + 1 + row, p, k, ta);
            p += k;
            row++;
        } while (*p && row < rows);
    }
    if (v->top >= 0 && top < maxtop)
        grid_printf(g, x + w - 18, y, GRID_PAIR(UI_PAIR_WARN), "%ld more below", maxtop - top);
    grid_unclip(g);
}

static int log_key(void *data, int key)
{
    logv *v = data;
    rebuild(v);
    long maxtop = last_page(v, v->page, v->textw);
    long top = v->top < 0 ? maxtop : v->top;
    switch (key) {
    case UI_KEY_UP: case 'k': case UI_KEY_WHEEL_UP: top -= key == UI_KEY_WHEEL_UP ? 3 : 1; break;
    case UI_KEY_DOWN: case 'j': case UI_KEY_WHEEL_DOWN: top += key == UI_KEY_WHEEL_DOWN ? 3 : 1; break;
    case UI_KEY_PGUP: case UI_CTRL('b'): top -= v->page - 1; break;
    case UI_KEY_PGDN: case UI_CTRL('f'): top += v->page - 1; break;
    case UI_KEY_HOME: case 'g': top = 0; break;
    case UI_KEY_END: case 'G': top = maxtop; break;
    case 'w':
        v->cut = !v->cut;
        return UI_HANDLED | UI_REDRAW;
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
    {"w", "wrap/cut"}, {NULL, NULL}
};

const view_class view_log_class = {
    .name = "log",
    .title = "log",
    .help = "every rank's output: interleaved as it came, or in rank order (o); one rank at a "
            "time (f and F); long lines wrap (w cuts them)",
    .keys = log_keys,
    .create = log_create,
    .free = log_free,
    .reset = log_reset,
    .rewind = log_rewind,
    .line = log_line_add,
    .draw = log_draw,
    .key = log_key,
};
