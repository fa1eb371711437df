/* plot.c - the plot view: a terminal line chart of the series a lab sends as MARK
 * "plot:<series>" events (x in val[0], y in val[1]; core/trace_values.h), e.g. chapter 4's
 * bandwidth against message size. The x axis turns logarithmic (base 2) when the points
 * span more than a factor of 64, as size sweeps do. */
#include "view.h"
#include "../../../core/trace_values.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PLOT_SERIES 8
#define PLOT_POINTS 4096

typedef struct series {
    char name[32];
    double *x, *y;
    int n;
} series;

typedef struct plot {
    series s[PLOT_SERIES];
    int ns;
    uint64_t dropped;
} plot;

static void *plot_create(void)
{
    plot *p = calloc(1, sizeof *p);
    if (!p)
        abort();
    return p;
}

static void plot_reset(void *data, int nranks)
{
    plot *p = data;
    (void)nranks;
    for (int i = 0; i < p->ns; i++) {
        free(p->s[i].x);
        free(p->s[i].y);
    }
    memset(p, 0, sizeof *p);
}

static void plot_free(void *data)
{
    if (!data)
        return;
    plot_reset(data, 0);
    free(data);
}

static void plot_rewind(void *data)
{
    plot_reset(data, 0);
}

static int plot_wants(const mlsys_event *e)
{
    return e->kind == MLSYS_EV_MARK && !strncmp(e->label, MLSYS_MARK_PLOT, strlen(MLSYS_MARK_PLOT));
}

static void plot_event(void *data, const mlsys_event *e, int frame)
{
    plot *p = data;
    size_t pl = strlen(MLSYS_MARK_PLOT);
    (void)frame;
    if (!plot_wants(e))
        return;
    const char *name = e->label + pl;
    series *s = NULL;
    for (int i = 0; i < p->ns; i++)
        if (!strcmp(p->s[i].name, name))
            s = &p->s[i];
    if (!s) {
        if (p->ns == PLOT_SERIES) {
            p->dropped++;
            return;
        }
        s = &p->s[p->ns++];
        snprintf(s->name, sizeof s->name, "%s", name);
        s->x = calloc(PLOT_POINTS, sizeof *s->x);
        s->y = calloc(PLOT_POINTS, sizeof *s->y);
        if (!s->x || !s->y)
            abort();
    }
    if (s->n == PLOT_POINTS || !isfinite(e->val[0]) || !isfinite(e->val[1])) {
        p->dropped++;
        return;
    }
    s->x[s->n] = e->val[0];
    s->y[s->n] = e->val[1];
    s->n++;
}

static void tick_text(double v, int logx, char *out, size_t n)
{
    if (logx && v >= 1024) {
        static const char units[] = "KMGT";
        int u = -1;
        while (v >= 1024 && u < 3) {
            v /= 1024;
            u++;
        }
        snprintf(out, n, "%g%c", round(v * 10) / 10, units[u]);
    } else {
        snprintf(out, n, "%.3g", v);
    }
}

static const char *marker(int i, int ascii)
{
    static const char *const u[] = {"●", "◆", "▲", "■", "○", "◇", "△", "□"};
    static const char *const a[] = {"o", "x", "+", "#", "*", "@", "%", "&"};
    return ascii ? a[i % 8] : u[i % 8];
}

static void plot_draw(void *data, grid *g, int x, int y, int w, int h, const view_ctx *ctx)
{
    plot *p = data;
    grid_clip(g, x, y, w, h);
    int total = 0;
    for (int i = 0; i < p->ns; i++)
        total += p->s[i].n;
    if (!total) {
        view_put_clipped(g, x, y, w, "plot", GRID_BOLD);
        view_put_clipped(g, x + 2, y + 2, w - 2, ctx->live ? "no points yet: the curves "
                         "appear here as the ranks measure them" : "nothing to plot: this lab "
                         "draws no curves (its output is in the log view, key 2)", GRID_DIM);
        grid_unclip(g);
        return;
    }
    double x0 = INFINITY, x1 = -INFINITY, y0 = 0, y1 = -INFINITY;
    int allpos = 1;
    for (int i = 0; i < p->ns; i++)
        for (int k = 0; k < p->s[i].n; k++) {
            double xv = p->s[i].x[k], yv = p->s[i].y[k];
            x0 = fmin(x0, xv);
            x1 = fmax(x1, xv);
            y0 = fmin(y0, yv);
            y1 = fmax(y1, yv);
            allpos &= xv > 0;
        }
    int logx = allpos && x1 / x0 > 64;
    double lx0 = logx ? log2(x0) : x0, lx1 = logx ? log2(x1) : x1;
    if (lx1 <= lx0)
        lx1 = lx0 + 1;
    if (y1 <= y0)
        y1 = y0 + 1;
    /* the legend line */
    int cx = x;
    for (int i = 0; i < p->ns && cx < x + w; i++) {
        cx += grid_put(g, cx, y, marker(i, ctx->ascii), UI_RANK_ATTR(i) | GRID_BOLD);
        cx += 1 + view_put_clipped(g, cx + 1, y, x + w - cx - 1, p->s[i].name, 0);
        cx += 2;
    }
    if (p->dropped)
        grid_printf(g, x + w - 26, y, GRID_PAIR(UI_PAIR_WARN), "%llu dropped",
                    (unsigned long long)p->dropped);
    int lw = 9;                         /* y tick labels */
    int px = x + lw + 1, py = y + 1, pw = w - lw - 2, ph = h - 3;
    if (pw < 10 || ph < 4) {
        grid_unclip(g);
        return;
    }
    grid_vline(g, px - 1, py, ph, GRID_DIM);
    grid_hline(g, px - 1, py + ph, pw + 1, GRID_DIM);
    grid_set(g, px - 1, py + ph, grid_line_cp(GRID_BL, ctx->ascii), GRID_DIM);
    for (int t = 0; t <= 4; t++) {
        double v = y0 + (y1 - y0) * t / 4;
        char s[32];
        tick_text(v, 0, s, sizeof s);
        int row = py + ph - 1 - (int)lround((double)(ph - 1) * t / 4);
        grid_printf(g, x, row, GRID_DIM, "%*s", lw, s);
    }
    if (logx) {
        /* ticks at powers of two, every k-th so that the labels do not collide */
        int lo = (int)ceil(lx0 - 1e-9), hi = (int)floor(lx1 + 1e-9);
        int every = 1;
        while ((hi - lo) / every + 1 > pw / 7 && every < 64)
            every *= 2;
        for (int e = lo; e <= hi; e += every) {
            char s[32];
            tick_text(exp2(e), 1, s, sizeof s);
            int col = px + (int)lround((e - lx0) / (lx1 - lx0) * (pw - 1));
            int sw = (int)strlen(s), at = col - sw / 2;
            if (at + sw > px + pw)
                at = px + pw - sw;
            grid_put(g, at, py + ph + 1, s, GRID_DIM);
        }
    } else {
        int nt = pw / 12 > 1 ? pw / 12 : 2;
        for (int t = 0; t <= nt; t++) {
            double lv = lx0 + (lx1 - lx0) * t / nt;
            char s[32];
            tick_text(lv, 0, s, sizeof s);
            int col = px + (int)lround((double)(pw - 1) * t / nt);
            int sw = (int)strlen(s);
            int at = col - sw / 2;
            if (at + sw > px + pw)
                at = px + pw - sw;
            grid_put(g, at, py + ph + 1, s, GRID_DIM);
        }
    }
    for (int i = 0; i < p->ns; i++) {
        series *s = &p->s[i];
        int pcol = -1, prow = -1;
        for (int k = 0; k < s->n; k++) {
            double xv = logx ? log2(s->x[k]) : s->x[k];
            int col = px + (int)lround((xv - lx0) / (lx1 - lx0) * (pw - 1));
            int row = py + ph - 1 - (int)lround((s->y[k] - y0) / (y1 - y0) * (ph - 1));
            if (pcol >= 0) {
                int steps = abs(col - pcol) > abs(row - prow) ? abs(col - pcol) : abs(row - prow);
                for (int j = 1; j < steps; j++) {
                    int c = pcol + (col - pcol) * j / steps, r = prow + (row - prow) * j / steps;
                    const grid_cell *old = grid_get(g, c, r);
                    if (old && old->ch == ' ')
                        grid_set(g, c, r, ctx->ascii ? '.' : 0x00b7, UI_RANK_ATTR(i));
                }
            }
            grid_put(g, col, row, marker(i, ctx->ascii), UI_RANK_ATTR(i) | GRID_BOLD);
            pcol = col;
            prow = row;
        }
    }
    if (logx)
        grid_put(g, x + w - 7, y, "log2 x", GRID_DIM);
    grid_unclip(g);
}

static const ui_key_help plot_keys[] = {{NULL, NULL}};

const view_class view_plot_class = {
    .name = "plot",
    .title = "plot",
    .help = "line chart of the series the lab plots (bandwidth against size in chapter 4)",
    .keys = plot_keys,
    .create = plot_create,
    .free = plot_free,
    .reset = plot_reset,
    .rewind = plot_rewind,
    .wants = plot_wants,
    .event = plot_event,
    .draw = plot_draw,
    .key = NULL,
};
