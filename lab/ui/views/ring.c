/* ring.c - the ring/graph view: ranks on a circle (a grid when N > 8), each rank's buffer as
 * exactly N chunk cells that say whose data they hold ("0+3", "all") with their values
 * under them, the messages of the current step as arrows labelled with the chunk they carry,
 * and a caption of the step. Everything it draws comes from one frame of the step model
 * (lab/ui/stepmodel.h), so the header, boxes, arrows and values always show the same moment. */
#include "view.h"
#include "../stepmodel.h"
#include "../../../core/trace_values.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct ring {
    int n;
} ring;

typedef struct box { int x, y, w, h; } box;

static void ring_reset(void *data, int nranks)
{
    ring *v = data;
    v->n = nranks > 0 ? nranks : 1;
}

static void *ring_create(void)
{
    ring *v = calloc(1, sizeof *v);
    if (!v)
        abort();
    ring_reset(v, 1);
    return v;
}

static void ring_free(void *data)
{
    free(data);
}

/* ---- drawing ---- */

/* Do the boxes overlap or touch? Two columns stay between boxes side by side and a row
 * between boxes one above the other, so that every message has a path for its arrow. */
static int overlap(const box *a, const box *b)
{
    return a->x < b->x + b->w + 2 && b->x < a->x + a->w + 2 && a->y < b->y + b->h + 1 &&
           b->y < a->y + a->h + 1;
}

static void status_text(const view_ctx *ctx, int r, char *out, size_t n, grid_attr *a)
{
    int st = ctx->rank_state && r < ctx->nranks ? ctx->rank_state[r] : VIEW_RANK_UNKNOWN;
    int code = ctx->rank_code && r < ctx->nranks ? ctx->rank_code[r] : 0;
    int as = ctx->ascii;
    *a = 0;
    out[0] = 0;
    if (st == VIEW_RANK_FAILED) {
        const char *x = view_glyph(as, "✗", "X");
        if (!ctx->rank_code)
            snprintf(out, n, "%s failed", x);
        else if (code > 0)
            snprintf(out, n, "%s exit %d", x, code);
        else if (code == -9)
            snprintf(out, n, "%s killed", x);
        else if (code == -11)
            snprintf(out, n, "%s segfault", x);
        else if (code == -6)
            snprintf(out, n, "%s aborted", x);
        else
            snprintf(out, n, "%s signal %d", x, -code);
        *a = GRID_PAIR(UI_PAIR_ERR) | GRID_BOLD;
    } else if (st == VIEW_RANK_DONE) {
        snprintf(out, n, "%s done", view_glyph(as, "✓", "ok"));
        *a = GRID_PAIR(UI_PAIR_OK);
    } else if (st == VIEW_RANK_STOPPED) {
        snprintf(out, n, "stopped");
        *a = GRID_PAIR(UI_PAIR_WARN);
    } else if (ctx->gate_step && r < ctx->nranks && ctx->gate_step[r] >= 0) {
        snprintf(out, n, "%s waits", view_glyph(as, "⏸", "||"));
        *a = GRID_PAIR(UI_PAIR_WARN) | GRID_BOLD;
    } else if (st == VIEW_RANK_RUNNING) {
        snprintf(out, n, "%s", view_glyph(as, "▶", ">"));
        *a = GRID_PAIR(UI_PAIR_OK);
    }
}

static int in_any_box(const box *b, int n, int x, int y)
{
    for (int i = 0; i < n; i++)
        if (x >= b[i].x && x < b[i].x + b[i].w && y >= b[i].y && y < b[i].y + b[i].h)
            return 1;
    return 0;
}


/* Boxes for n ranks: a circle up to 8 ranks with boxes as wide as the area allows (up to
 * what N cells of 8 columns need), else a grid. Returns the box height used (6 full: role,
 * chunk names, cells, values; 5 without the chunk names; 4 without the role; 2 bare). */
static int layout(int n, int ax, int ay, int aw, int ah, box *b, int *shown)
{
    *shown = n;
    if (n <= 8 && n > 0) {
        int maxw = n * 9 + 3 < 20 ? 20 : n * 9 + 3;
        for (int bh = 6; bh >= 4; bh--) {
            for (int bw = maxw; bw >= 16; bw -= 2) {
                double cx = ax + aw / 2.0, cy = ay + ah / 2.0;
                double rx = (aw - bw) / 2.0, ry = (ah - bh) / 2.0;
                if (rx < 0 || ry < 0)
                    continue;
                if (n == 2)
                    ry = 0;
                for (int i = 0; i < n; i++) {
                    double t = -M_PI / 2 + 2 * M_PI * i / n;
                    if (n == 2)
                        t = i == 0 ? M_PI : 0;
                    b[i].w = bw;
                    b[i].h = bh;
                    b[i].x = (int)lround(cx + rx * cos(t) - bw / 2.0);
                    b[i].y = (int)lround(cy + ry * sin(t) - bh / 2.0);
                    if (n == 1) {
                        b[i].x = (int)(cx - bw / 2.0);
                        b[i].y = (int)(cy - bh / 2.0);
                    }
                }
                int ok = 1;
                for (int i = 0; i < n && ok; i++) {
                    if (b[i].x < ax || b[i].y < ay || b[i].x + bw > ax + aw || b[i].y + bh > ay + ah)
                        ok = 0;
                    for (int j = i + 1; j < n && ok; j++)
                        if (overlap(&b[i], &b[j]))
                            ok = 0;
                }
                if (ok)
                    return bh;
            }
        }
    }
    for (int bh = 5; bh >= 2; bh--) {
        if (bh == 3)
            continue;
        for (int bw = 24; bw >= 12; bw -= 2) {
            int cols = (aw + 1) / (bw + 1);
            if (cols < 1)
                continue;
            int rows = (n + cols - 1) / cols;
            if (rows * bh > ah)
                continue;
            int xpad = (aw - cols * (bw + 1) + 1) / 2;
            for (int i = 0; i < n; i++) {
                b[i].w = bw;
                b[i].h = bh;
                b[i].x = ax + xpad + (i % cols) * (bw + 1);
                b[i].y = ay + (i / cols) * bh;
            }
            return bh;
        }
    }
    int bw = 12, cols = (aw + 1) / (bw + 1), rows = ah / 2;
    if (cols < 1 || rows < 1)
        return 0;
    *shown = cols * rows < n ? cols * rows : n;
    for (int i = 0; i < *shown; i++) {
        b[i].w = bw;
        b[i].h = 2;
        b[i].x = ax + (i % cols) * (bw + 1);
        b[i].y = ay + (i / cols) * 2;
    }
    return 2;
}

static grid_attr mask_attr(uint64_t m, int n)
{
    if (m == 0)
        return GRID_PAIR(UI_PAIR_DIM) | GRID_DIM;
    if (n > 1 && __builtin_popcountll(m) == n)
        return GRID_PAIR(UI_PAIR_FULL) | GRID_BOLD;
    if (__builtin_popcountll(m) == 1)
        return UI_CELL_ATTR(__builtin_ctzll(m));
    return GRID_PAIR(UI_PAIR_PARTIAL);
}

/* The value in at most w columns: "6.0", else "10" (an integer without its ".0"), else
 * fewer digits ("3.14" -> "3.1"), else a k/M/G suffix ("1500" -> "2k"); "" when even that
 * does not fit. A cell never drops a value that a narrower form can show. */
static void fit_value(double v, int w, char *out, size_t n)
{
    view_fmt_value(v, out, n);
    if ((int)strlen(out) <= w)
        return;
    if (v == floor(v) && fabs(v) < 1e15) {
        snprintf(out, n, "%.0f", v);
        if ((int)strlen(out) <= w)
            return;
    }
    for (int p = w; p >= 1; p--) {
        snprintf(out, n, "%.*g", p, v);
        if ((int)strlen(out) <= w && !strchr(out, 'e'))
            return;
    }
    static const char suf[] = "kMGT";
    double a = fabs(v);
    for (int k = 0; k < 4; k++) {
        a /= 1000.0;
        snprintf(out, n, "%s%.0f%c", v < 0 ? "-" : "", a, suf[k]);
        if ((int)strlen(out) <= w)
            return;
    }
    out[0] = 0;
}

typedef struct scene {
    const stepmodel *m;
    int k, n;                   /* frame, ranks */
    const sm_frame *f;
    int before;                 /* the packets are moving: cells show the frame before */
} scene;

static const sm_cell *cells_of(const scene *s, int r)
{
    if (!s->f || s->f->data_call < 0)
        return NULL;
    const sm_cell *c = sm_cells(s->m, s->k, r);
    if (s->before) {
        /* the previous frame's state of the same call, or the call's start */
        const sm_frame *p = sm_frame_at(s->m, s->k - 1);
        if (p && p->data_call == s->f->data_call)
            return sm_cells(s->m, s->k - 1, r);
    }
    return c;
}

/* What rank r does in this frame: "sends c1 → 3  gets c0 ← 2". */
static void role_text(const scene *s, int r, int ascii, char *out, size_t n)
{
    int used = 0, ns = 0, nr = 0;
    out[0] = 0;
    if (!s->f)
        return;
    for (int i = 0; i < s->f->nsend; i++) {
        const sm_send *d = sm_frame_send(s->m, s->k, i);
        char what[24] = "";
        if (d->chunks && __builtin_popcountll(d->chunks) < s->n)
            snprintf(what, sizeof what, "c%d ", __builtin_ctzll(d->chunks));
        else if (d->call < 0 && d->has_val)
            view_fmt_value(d->val, what, sizeof what), strcat(what, " ");
        if (d->src == r && ns++ == 0)
            used += snprintf(out + used, n - (size_t)used, "%ssends %s%s %d", used ? "  " : "",
                             what, ascii ? "->" : "→", d->dst);
        if (d->dst == r && nr++ == 0 && (size_t)used < n)
            used += snprintf(out + used, n - (size_t)used, "%sgets %s%s %d", used ? "  " : "",
                             what, ascii ? "<-" : "←", d->src);
        if ((size_t)used >= n)
            return;
    }
    if (ns > 1 && (size_t)used < n)
        used += snprintf(out + used, n - (size_t)used, " +%d", ns - 1);
    if (!used && s->f->call >= 0)
        snprintf(out, n, "idle this step");
}

static void draw_box(const scene *s, grid *g, const box *b, int r, int bh, const view_ctx *ctx)
{
    int failed = ctx->rank_state && r < ctx->nranks && ctx->rank_state[r] == VIEW_RANK_FAILED;
    grid_attr frame = failed ? GRID_PAIR(UI_PAIR_ERR) | GRID_BOLD : UI_RANK_ATTR(r);
    char st[32], line[128];
    grid_attr sa;
    status_text(ctx, r, st, sizeof st, &sa);
    grid_fill(g, b->x, b->y, b->w, b->h, ' ', 0);
    int inner = b->w - 2, y = b->y, x0 = b->x + 1;
    if (bh >= 4) {
        grid_box(g, b->x, b->y, b->w, b->h, 0, frame);
        grid_printf(g, b->x + 1, y, frame | GRID_BOLD, " rank %d ", r);
        int sw = grid_text_width(st, strlen(st));
        if (sw && sw + 2 <= inner - 8)
            grid_printf(g, b->x + b->w - 3 - sw, y, sa, " %s ", st);
        y++;
    } else {
        grid_printf(g, b->x, y, frame | GRID_BOLD, "r%d", r);
        x0 = b->x + (r >= 10 ? 4 : 3);
        inner = b->w - (x0 - b->x);
        if (st[0])
            grid_put(g, x0, y + 1, st, sa);
    }
    int x = x0 + (bh >= 4 ? 1 : 0), avail = inner - (bh >= 4 ? 2 : 0);
    if (bh >= 5) {
        role_text(s, r, ctx->ascii, line, sizeof line);
        view_put_clipped(g, x, y++, avail, line, GRID_DIM);
    }
    int n = s->n;
    /* the chunks that exist: a buffer of fewer elements than ranks has fewer cells */
    int nc = s->f && s->f->data_call >= 0 ? sm_call_chunks(s->m, s->f->data_call) : n;
    int cw = nc ? (avail - (nc - 1)) / nc : 0;
    if (cw > 8)
        cw = 8;
    int shown = nc;
    if (cw < 3) {                     /* many ranks in a small box: the first cells, then … */
        cw = 3;
        shown = (avail + 1) / 4 - 1;
        if (shown < 1)
            shown = 1;
    }
    /* the chunk that leaves this rank and the one that lands here in this frame */
    uint64_t out_set = 0, in_set = 0;
    for (int i = 0; s->f && i < s->f->nsend; i++) {
        const sm_send *d = sm_frame_send(s->m, s->k, i);
        if (d->src == r)
            out_set |= d->chunks;
        if (d->dst == r)
            in_set |= d->land >= 0 ? 1ull << d->land : d->chunks;
    }
    const sm_cell *c = cells_of(s, r);
    if (bh >= 6 && c) {
        for (int j = 0; j < shown; j++) {
            snprintf(line, sizeof line, "c%d", j);
            grid_put(g, x + j * (cw + 1) + (cw - (int)strlen(line) + 1) / 2, y, line, GRID_DIM);
        }
        y++;
    }
    if (c) {
        for (int j = 0; j < shown; j++) {
            char t[32];
            sm_mask_text(c[j].mask, n, cw, ctx->ascii, t, sizeof t);
            grid_attr a = mask_attr(c[j].mask, n);
            if (out_set >> j & 1)
                a |= GRID_BOLD | GRID_REVERSE;
            if ((in_set >> j & 1) && !s->before)
                a |= GRID_BOLD | GRID_UNDERLINE;
            grid_fill(g, x + j * (cw + 1), y, cw, 1, ' ', a);
            int tw = grid_text_width(t, strlen(t));
            grid_put(g, x + j * (cw + 1) + (cw - tw + 1) / 2, y, t, a);
        }
        if (shown < nc)
            grid_put(g, x + shown * (cw + 1), y, view_glyph(ctx->ascii, "…", "+"), GRID_DIM);
    } else {
        double pv;
        const char *why = "";
        if (s->f && s->f->call >= 0 && sm_call_at(s->m, s->f->call)->coll == MLSYS_COLL_BARRIER)
            why = "barrier: no data, waits for all";
        else if (sm_p2p_value(s->m, s->before ? s->k - 1 : s->k, r, &pv)) {
            char t[32];
            view_fmt_value(pv, t, sizeof t);
            snprintf(line, sizeof line, "holds %s", t);
            why = line;
        }
        view_put_clipped(g, x, y, avail, why, why == line ? GRID_BOLD : GRID_DIM);
    }
    y++;
    if (bh == 2 || !c)
        return;
    for (int j = 0; j < shown; j++) {
        char t[32] = "";
        if (c[j].mask && c[j].has_val)
            fit_value(c[j].val, cw, t, sizeof t);
        int tw = grid_text_width(t, strlen(t));
        grid_put(g, x + j * (cw + 1) + (cw - tw + 1) / 2, y, t, 0);
    }
}

static uint32_t arrow_cp(int dx, int dy, int ascii)
{
    if (abs(dx) >= 2 * abs(dy))
        return dx > 0 ? (ascii ? '>' : 0x25b6) : (ascii ? '<' : 0x25c0);
    if (abs(dy) * 2 >= abs(dx) * 1 && abs(dx) < abs(dy))
        return dy > 0 ? (ascii ? 'v' : 0x25bc) : (ascii ? '^' : 0x25b2);
    if (dx > 0)
        return dy > 0 ? (ascii ? '\\' : 0x2198) : (ascii ? '/' : 0x2197);
    return dy > 0 ? (ascii ? '/' : 0x2199) : (ascii ? '\\' : 0x2196);
}

/* A message from box a to box b: the path, an arrow head, the packet at t (t < 1). */
static void draw_packet(grid *g, const box *bx, int nb, int a, int b, double t, grid_attr at,
                        int ascii, const char *label, int pass)
{
    int x0 = bx[a].x + bx[a].w / 2, y0 = bx[a].y + bx[a].h / 2;
    int x1 = bx[b].x + bx[b].w / 2, y1 = bx[b].y + bx[b].h / 2;
    if (a < b) {
        y0++; y1++;
    }
    int dx = abs(x1 - x0), sx = x0 < x1 ? 1 : -1, dy = -abs(y1 - y0), sy = y0 < y1 ? 1 : -1;
    int err = dx + dy, x = x0, y = y0;
    int px[512], py[512], np = 0;
    for (;;) {
        if (!in_any_box(bx, nb, x, y) && np < 512) {
            px[np] = x;
            py[np] = y;
            np++;
        }
        if (x == x1 && y == y1)
            break;
        int e2 = 2 * err;
        if (e2 >= dy) {
            err += dy;
            x += sx;
        }
        if (e2 <= dx) {
            err += dx;
            y += sy;
        }
    }
    if (np == 0)
        return;
    if (pass == 0) {
        /* the path in dashes: the dot stays the symbol of an empty cell */
        uint32_t dash = ascii ? ':' : 0x2504;
        for (int i = 0; i < np - 1; i++)
            grid_set(g, px[i], py[i], dash, at | GRID_DIM);
        grid_set(g, px[np - 1], py[np - 1], arrow_cp(x1 - x0, y1 - y0, ascii), at | GRID_BOLD);
        return;
    }
    if (label && np > 4) {
        int mid = np / 2, vertical = abs(x1 - x0) < abs(y1 - y0) / 2;
        int lx = vertical ? px[mid] + 2 : px[mid] - (int)strlen(label) / 2;
        int ly = vertical ? py[mid] : py[mid] + (a < b ? 1 : -1);
        grid_put(g, lx, ly, label, at | GRID_BOLD);
    }
    if (t < 1.0) {
        int i = (int)(t * (np - 1) + 0.5);
        grid_set(g, px[i], py[i], ascii ? '@' : 0x25cf, at | GRID_BOLD);
    }
}

/* The arrow's label: the chunk and whose data it carries, a value, or nothing (a signal). */
static void send_label(const scene *s, const sm_send *d, int ascii, char *out, size_t n)
{
    out[0] = 0;
    if (d->call >= 0) {
        const sm_call *c = sm_call_at(s->m, d->call);
        if (!c || c->coll == MLSYS_COLL_BARRIER || !d->chunks)
            return;
        char mt[24], v[16] = "";
        sm_mask_text(d->mask, s->n, 8, ascii, mt, sizeof mt);
        if (d->has_val && d->mask)
            fit_value(d->val, 7, v, sizeof v);
        if (__builtin_popcountll(d->chunks) == s->n)
            snprintf(out, n, "all chunks");
        else if (__builtin_popcountll(d->chunks) == 1)
            snprintf(out, n, "c%d %s%s%s", __builtin_ctzll(d->chunks), mt, v[0] ? "=" : "", v);
        else
            snprintf(out, n, "%d chunks", __builtin_popcountll(d->chunks));
        return;
    }
    if (d->has_val)
        view_fmt_value(d->val, out, n);
}

static void draw_header(const scene *s, grid *g, int x, int y, int w, const view_ctx *ctx)
{
    char line[512], t[32];
    const char *dot = view_glyph(ctx->ascii, " · ", " - ");
    int n = s->n;
    const sm_frame *f = s->f;
    const sm_call *c = f && f->call >= 0 ? sm_call_at(s->m, f->call) : NULL;
    if (!c) {
        snprintf(line, sizeof line, "%d rank%s%s%s", n, n == 1 ? "" : "s", dot,
                 f && f->nsend ? "point-to-point messages only" :
                 !f || s->k == 0 ? "before the first step" : "between collectives");
        view_put_clipped(g, x, y, w, line, GRID_BOLD);
    } else {
        int used = snprintf(line, sizeof line, "%s", mlsys_coll_name((mlsys_coll)c->coll));
        if (c->coll != MLSYS_COLL_BARRIER) {
            view_fmt_bytes(c->bytes, t, sizeof t);
            used += snprintf(line + used, sizeof line - (size_t)used, "%s%s", dot, t);
            if (c->dtype >= 0 && c->dtype < MLSYS_DTYPE_COUNT)
                used += snprintf(line + used, sizeof line - (size_t)used, " %s",
                                 mlsys_dtype_name((mlsys_dtype)c->dtype));
            if (c->op >= 0 && c->op < MLSYS_OP_COUNT)
                used += snprintf(line + used, sizeof line - (size_t)used, " %s",
                                 mlsys_op_name((mlsys_op)c->op));
            if (c->coll == MLSYS_COLL_BROADCAST || c->coll == MLSYS_COLL_REDUCE ||
                c->coll == MLSYS_COLL_GATHER || c->coll == MLSYS_COLL_SCATTER)
                used += snprintf(line + used, sizeof line - (size_t)used, " root %d", c->root);
        } else {
            used += snprintf(line + used, sizeof line - (size_t)used, "%sno data", dot);
        }
        snprintf(line + used, sizeof line - (size_t)used, "%s%d ranks%salgorithm ", dot, n, dot);
        int cx = x + view_put_clipped(g, x, y, w, line, GRID_BOLD);
        if (cx < x + w)
            view_put_clipped(g, cx, y, x + w - cx, c->algo, GRID_BOLD | GRID_PAIR(UI_PAIR_OK));
    }
    /* the caption of this frame */
    sm_caption(s->m, s->k, ctx->ascii, line, sizeof line);
    view_put_clipped(g, x, y + 1, w, line, GRID_PAIR(UI_PAIR_WARN) | GRID_BOLD);
    if (!c)
        return;
    int fell = sm_call_why(s->m, f->call, line, sizeof line);
    view_put_clipped(g, x, y + 2, w, line, fell ? GRID_PAIR(UI_PAIR_WARN) | GRID_BOLD : GRID_DIM);
}

static void draw_side(const scene *s, grid *g, int x, int y, int w, int h, const view_ctx *ctx)
{
    int row = y;
    char t[128], u[32];
    grid_vline(g, x - 1, y, h, GRID_PAIR(UI_PAIR_DIM));
    int total = sm_nframes(s->m);
    snprintf(t, sizeof t, "step %d of %d so far", s->k, total - 1);
    grid_put(g, x + 1, row++, t, GRID_BOLD);
    uint64_t bytes, msgs = sm_messages(s->m, s->k, &bytes);
    view_fmt_bytes(bytes, u, sizeof u);
    snprintf(t, sizeof t, "%llu message%s, %s", (unsigned long long)msgs, msgs == 1 ? "" : "s", u);
    view_put_clipped(g, x + 1, row++, w - 1, t, 0);
    row++;
    /* the calls up to this frame, newest first */
    int nc = sm_ncalls(s->m), shown = 0;
    if (nc && row + 3 < y + h - 8) {
        grid_put(g, x + 1, row++, "collectives so far", GRID_BOLD);
        for (int i = nc - 1; i >= 0 && row < y + h - 9; i--) {
            const sm_call *c = sm_call_at(s->m, i);
            if (c->first_frame < 0 || c->first_frame > s->k)
                continue;
            snprintf(t, sizeof t, "%s %s", mlsys_coll_name((mlsys_coll)c->coll), c->algo);
            int cur = s->f && s->f->call == i;
            view_put_clipped(g, x + 1, row++, w - 1, t, cur ? GRID_BOLD : GRID_DIM);
            if (++shown >= 6)
                break;
        }
    }
    /* the legend */
    int ly = y + h - 8;
    if (ly <= row)
        return;
    grid_put(g, x + 1, ly++, "cells: whose data a chunk holds", GRID_BOLD);
    grid_put(g, x + 1, ly, " 2 ", UI_CELL_ATTR(2));
    grid_put(g, x + 6, ly++, "rank 2's data", 0);
    grid_put(g, x + 1, ly, "0+3", GRID_PAIR(UI_PAIR_PARTIAL));
    grid_put(g, x + 6, ly++, "ranks 0 and 3 summed", 0);
    grid_put(g, x + 1, ly, "3/5", GRID_PAIR(UI_PAIR_PARTIAL));
    grid_put(g, x + 6, ly++, "3 of 5 ranks' data", 0);
    grid_put(g, x + 1, ly, "all", GRID_PAIR(UI_PAIR_FULL) | GRID_BOLD);
    grid_put(g, x + 6, ly++, "every rank's data", 0);
    grid_put(g, x + 2, ly, view_glyph(ctx->ascii, "·", "."), GRID_PAIR(UI_PAIR_DIM));
    grid_put(g, x + 6, ly++, "empty", 0);
    grid_put(g, x + 1, ly, " 1 ", GRID_REVERSE | GRID_BOLD);
    grid_put(g, x + 6, ly++, "leaves in this step", 0);
    grid_put(g, x + 1, ly, " 1 ", GRID_UNDERLINE | GRID_BOLD);
    grid_put(g, x + 6, ly, "arrived in this step", 0);
}

static void ring_draw(void *data, grid *g, int x, int y, int w, int h, const view_ctx *ctx)
{
    (void)data;
    scene s;
    memset(&s, 0, sizeof s);
    if (!ctx->sm)
        return;
    s.m = ctx->sm;
    s.n = sm_nranks(s.m);
    s.k = ctx->frame < 0 ? 0 : ctx->frame;
    if (s.k >= sm_nframes(s.m))
        s.k = sm_nframes(s.m) - 1;
    s.f = sm_frame_at(s.m, s.k);
    double t = ctx->anim < 0 ? 0 : ctx->anim > 1 ? 1 : ctx->anim;
    s.before = t < 1.0 && s.k > 0;
    grid_clip(g, x, y, w, h);
    if (h < 4 || w < 20) {
        grid_unclip(g);
        return;
    }
    draw_header(&s, g, x, y, w, ctx);
    int side = w >= 100 ? 34 : 0;
    int ax = x, ay = y + 3, aw = w - side - (side ? 2 : 0), ah = h - 3;
    if (side)
        draw_side(&s, g, x + w - side, ay, side, ah, ctx);
    int n = s.n;
    box bx[SM_MAX_RANKS];
    int shown;
    int bh = layout(n, ax, ay, aw, ah, bx, &shown);
    if (!bh) {
        grid_put(g, ax, ay, "no room for the ranks: enlarge the terminal", GRID_DIM);
        grid_unclip(g);
        return;
    }
    grid_clip(g, ax, ay, aw, ah);
    int grid_mode = n > 8, nsend = s.f ? s.f->nsend : 0;
    for (int pass = 0; pass < 2 && !grid_mode; pass++)
        for (int i = 0; i < nsend; i++) {
            const sm_send *d = sm_frame_send(s.m, s.k, i);
            if (d->src >= shown || d->dst >= shown || d->src == d->dst)
                continue;
            char lb[48];
            send_label(&s, d, ctx->ascii, lb, sizeof lb);
            draw_packet(g, bx, shown, d->src, d->dst, t, UI_RANK_ATTR(d->src), ctx->ascii,
                        nsend <= 8 && lb[0] ? lb : NULL, pass);
        }
    for (int r = 0; r < shown; r++)
        draw_box(&s, g, &bx[r], r, bh, ctx);
    if (shown < n)
        grid_printf(g, ax, ay + ah - 1, GRID_PAIR(UI_PAIR_WARN), "+%d ranks not shown: "
                    "enlarge the terminal", n - shown);
    grid_unclip(g);
}

static const ui_key_help ring_keys[] = {{NULL, NULL}};

static const char *const *ring_notes(int ascii)
{
    static const char *const utf8[] = {
        "Cells: the rank whose data a cell holds (2), several (0+1), all of them (all), none (·).",
        "The values under the cells are what the rank printed, sent, or (gated) had in memory at "
        "the gate.", NULL
    };
    static const char *const plain[] = {
        "Cells: the rank whose data a cell holds (2), several (0+1), all of them (all), none (.).",
        "The values under the cells are what the rank printed, sent, or (gated) had in memory at "
        "the gate.", NULL
    };
    return ascii ? plain : utf8;
}

/* The ring reads the step model's frames themselves: it is fed nothing. */
const view_class view_ring_class = {
    .name = "ring",
    .title = "ring",
    .help = "ranks with their buffers cut in N chunks: a cell says whose data the chunk holds "
            "(0+3: ranks 0 and 3 summed), the number under it is its first value; arrows are "
            "this step's messages",
    .keys = ring_keys,
    .notes = ring_notes,
    .create = ring_create,
    .free = ring_free,
    .reset = ring_reset,
    .draw = ring_draw,
};
