/* blocks.c - the blocks view: rows of blocks (a rank's gradient, a shard of parameters, a
 * sequence's KV pages), each block shaded by its value and drawn by its state (free, used,
 * shared, owned, evicted), groups outlined above the rows (DDP buckets, tensors, page
 * tables), and a caption naming the phase. Fed by the "blk:" MARK events of blocks.h; a new
 * phase keeps the picture before it, and `p` shows that one (before/after an all-reduce). */
#include "view.h"
#include "../../../chapters/common/blocks.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct brow {
    char name[32];
    int n;
    double v[BLK_MAX_BLOCKS];
    unsigned char st[BLK_MAX_BLOCKS];
} brow;

typedef struct bgroup {
    int id, row, first, n;
    char name[24];
} bgroup;

typedef struct picture {
    brow rows[BLK_MAX_ROWS];
    int nrows;
    bgroup g[BLK_MAX_GROUPS];
    int ng;
    char caption[32];
    int focus;              /* group id the phase is about, -1 */
} picture;

typedef struct blocks {
    picture now, before;
    int have_before, show_before;
    int phases;
    int clear_gen;          /* generation of the last blk:clear, -1 none */
    int cur_row, cur_blk;
} blocks;

static void *blocks_create(void)
{
    blocks *b = calloc(1, sizeof *b);
    if (!b)
        abort();
    b->now.focus = b->before.focus = -1;
    b->clear_gen = -1;
    return b;
}

static void blocks_reset(void *data, int nranks)
{
    blocks *b = data;
    (void)nranks;
    memset(b, 0, sizeof *b);
    b->now.focus = b->before.focus = -1;
    b->clear_gen = -1;
}

static void blocks_free(void *data)
{
    free(data);
}

static brow *row_of(blocks *b, const mlsys_event *e)
{
    int r = e->peer >= 0 ? e->peer : e->rank;
    if (r < 0 || r >= BLK_MAX_ROWS)
        return NULL;
    picture *p = &b->now;
    while (p->nrows <= r) {
        brow *nr = &p->rows[p->nrows];
        snprintf(nr->name, sizeof nr->name, "rank %d", p->nrows);
        p->nrows++;
    }
    return &p->rows[r];
}

static int starts(const char *s, const char *prefix)
{
    return strncmp(s, prefix, strlen(prefix)) == 0;
}

static void blocks_event(void *data, const mlsys_event *e)
{
    blocks *b = data;
    picture *p = &b->now;
    if (e->kind != MLSYS_EV_MARK || !starts(e->label, "blk:"))
        return;
    const char *l = e->label + 4;
    if (!strcmp(l, "clear")) {
        if (e->step == b->clear_gen)
            return;         /* the same clear from another rank */
        int gen = e->step, cr = b->cur_row, cb = b->cur_blk;
        blocks_reset(b, 0);
        b->clear_gen = gen;
        b->cur_row = cr;
        b->cur_blk = cb;
        return;
    }
    if (starts(l, "phase:")) {
        if (!strcmp(p->caption, l + 6))
            return;         /* the same phase from another rank */
        b->before = *p;
        b->have_before = 1;
        snprintf(p->caption, sizeof p->caption, "%s", l + 6);
        p->focus = e->step;
        b->phases++;
        return;
    }
    if (starts(l, "group:")) {
        bgroup *g = NULL;
        for (int i = 0; i < p->ng; i++)
            if (p->g[i].id == e->step && p->g[i].row == e->peer)
                g = &p->g[i];
        if (!g) {
            if (p->ng == BLK_MAX_GROUPS)
                return;
            g = &p->g[p->ng++];
        }
        g->id = e->step;
        g->row = e->peer;
        g->first = e->chunk < 0 ? 0 : e->chunk;
        g->n = e->tag < 1 ? 1 : e->tag;
        snprintf(g->name, sizeof g->name, "%s", l + 6);
        return;
    }
    brow *r = row_of(b, e);
    if (!r)
        return;
    if (!strcmp(l, "size")) {
        int n = e->tag < 0 ? 0 : e->tag > BLK_MAX_BLOCKS ? BLK_MAX_BLOCKS : e->tag;
        r->n = n;
        memset(r->v, 0, sizeof r->v);
        memset(r->st, BLK_USED, sizeof r->st);
    } else if (starts(l, "name:")) {
        snprintf(r->name, sizeof r->name, "%s", l + 5);
    } else if (!strcmp(l, "val") || !strcmp(l, "state")) {
        int st = l[0] == 's';
        for (int i = 0; i < e->tag && i < 4; i++) {
            int k = e->chunk + i;
            if (k < 0 || k >= BLK_MAX_BLOCKS)
                continue;
            if (k >= r->n)
                r->n = k + 1;
            if (st)
                r->st[k] = (unsigned char)(e->val[i] >= 0 && e->val[i] < BLK_STATE_COUNT
                                           ? e->val[i] : BLK_USED);
            else
                r->v[k] = e->val[i];
        }
    }
}

/* Shade glyphs: level 0 (zero) .. 4 (the largest |value|), on a square-root scale so that
 * one large value does not wash out the rest; the sign picks the colour and, under --ascii,
 * the glyph set (in UTF-8 a negative block also starts with a minus sign). */
static const char *shade(double v, double mx, int ascii, grid_attr *a)
{
    static const char *const up[] = {"·", "░", "▒", "▓", "█"};
    static const char *const ap[] = {"0", ":", "+", "*", "#"};
    static const char *const an[] = {"0", ";", "-", "=", "%"};
    int lv = 0;
    if (mx > 0 && v != 0 && isfinite(v)) {
        lv = (int)ceil(4.0 * sqrt(fabs(v) / mx));
        lv = lv < 1 ? 1 : lv > 4 ? 4 : lv;
    }
    *a = lv == 0 ? GRID_DIM : GRID_PAIR(v < 0 ? UI_PAIR_ERR : UI_PAIR_OK);
    if (ascii)
        return v < 0 ? an[lv] : ap[lv];
    return up[lv];
}

/* The outlines of the groups of one row (row -1: those of every row) on line yy; returns
 * how many were drawn. */
static int draw_groups(grid *g, const picture *p, int row, int bx, int bw, int gap, int shown,
                       int yy, int ascii)
{
    int drawn = 0;
    for (int i = 0; i < p->ng; i++) {
        const bgroup *gr = &p->g[i];
        if (gr->row != row || gr->first >= shown)
            continue;
        drawn++;
        int last = gr->first + gr->n > shown ? shown : gr->first + gr->n;
        int x0 = bx + gr->first * bw, x1 = bx + last * bw - 1 - gap;
        grid_attr a = gr->id == p->focus ? GRID_BOLD | GRID_PAIR(UI_PAIR_WARN) : GRID_DIM;
        if (x1 <= x0) {
            grid_put(g, x0, yy, "|", a);
            continue;
        }
        grid_set(g, x0, yy, grid_line_cp(GRID_TL, ascii), a);
        for (int cx = x0 + 1; cx < x1; cx++)
            grid_set(g, cx, yy, grid_line_cp(GRID_H, ascii), a);
        grid_set(g, x1, yy, grid_line_cp(GRID_TR, ascii), a);
        view_put_clipped(g, x0 + 1, yy, x1 - x0 - 1, gr->name, a);
    }
    return drawn;
}

static void blocks_draw(void *data, grid *g, int x, int y, int w, int h, const view_ctx *ctx)
{
    blocks *b = data;
    const picture *p = b->show_before && b->have_before ? &b->before : &b->now;
    int ascii = ctx->ascii || g->ascii;
    grid_clip(g, x, y, w, h);
    char head[96];
    snprintf(head, sizeof head, "blocks%s%s%s", p->caption[0] ? ": " : "", p->caption,
             b->show_before ? "   [p] showing: before" : "");
    view_put_clipped(g, x, y, w, head, GRID_BOLD);
    if (!p->nrows) {
        view_put_clipped(g, x + 2, y + 2, w - 2, "no blocks yet: a lab sends \"blk:\" events "
                         "(lab/ui/views/blocks.h)", GRID_DIM);
        grid_unclip(g);
        return;
    }
    double mx = 0;
    int nmax = 0, lw = 4;
    for (int r = 0; r < p->nrows; r++) {
        const brow *row = &p->rows[r];
        for (int k = 0; k < row->n; k++)
            if (isfinite(row->v[k]) && fabs(row->v[k]) > mx)
                mx = fabs(row->v[k]);
        if (row->n > nmax)
            nmax = row->n;
        int nl = (int)strlen(row->name);
        if (nl > lw)
            lw = nl > 12 ? 12 : nl;
    }
    /* legend */
    char lg[160], mxs[32];
    view_fmt_value(mx, mxs, sizeof mxs);
    if (ascii)
        snprintf(lg, sizeof lg, "|v| up to %s (sqrt scale): 0 zero, :+*# positive, "
                 ";-=%% negative, "
                 ". free, ^ owned", mxs);
    else
        snprintf(lg, sizeof lg, "|v| up to %s (√ scale): · zero ░▒▓█ positive, −▒▒ negative, "
                 "▔ owned", mxs);
    view_put_clipped(g, x, y + 1, w, lg, GRID_DIM);
    int bx = x + lw + 2, avail = w - lw - 2;
    int bw = nmax ? avail / nmax : 1;
    bw = bw > 4 ? 4 : bw;
    int shown = nmax;
    if (bw < 1) {
        bw = 1;
        shown = avail - 2 > 0 ? avail - 2 : 0;
    }
    int gap = bw >= 3;
    int cy = y + 3;
    /* outlines of the groups that span every row, on the line above the rows */
    draw_groups(g, p, -1, bx, bw, gap, shown, cy - 1, ascii);
    for (int r = 0; r < p->nrows && cy < y + h - 1; r++) {
        const brow *row = &p->rows[r];
        /* a row's own groups (a sequence's page table) on a line above it */
        if (draw_groups(g, p, r, bx, bw, gap, shown, cy, ascii) && ++cy >= y + h - 1)
            break;
        grid_attr na = UI_RANK_ATTR(r) | (r == b->cur_row ? GRID_BOLD : 0);
        view_put_clipped(g, x, cy, lw, row->name, na);
        int owned = 0;
        for (int k = 0; k < row->n && k < shown; k++) {
            grid_attr a;
            const char *gl;
            if (row->st[k] == BLK_FREE) {
                gl = ascii ? "." : "·";
                a = GRID_DIM;
            } else if (row->st[k] == BLK_EVICTED) {
                gl = "x";
                a = GRID_PAIR(UI_PAIR_WARN);
            } else {
                gl = shade(row->v[k], mx, ascii, &a);
                if (row->st[k] == BLK_SHARED)
                    a |= GRID_BOLD;
            }
            if (r == b->cur_row && k == b->cur_blk)
                a |= GRID_REVERSE;
            for (int c = 0; c < bw - gap; c++)
                grid_put(g, bx + k * bw + c, cy, gl, a);
            if (!ascii && bw - gap >= 2 && row->st[k] != BLK_FREE && row->st[k] != BLK_EVICTED &&
                row->v[k] < 0)
                grid_put(g, bx + k * bw, cy, "−", a);
            owned |= row->st[k] == BLK_OWNED;
        }
        if (row->n > shown)
            grid_put(g, bx + shown * bw, cy, ascii ? ">" : "…", GRID_DIM);
        cy++;
        if (owned && cy < y + h - 1) {
            for (int k = 0; k < row->n && k < shown; k++)
                if (row->st[k] == BLK_OWNED)
                    for (int c = 0; c < bw - gap; c++)
                        grid_put(g, bx + k * bw + c, cy, ascii ? "^" : "▔", UI_RANK_ATTR(r));
            cy++;
        }
    }
    /* the selected block */
    if (b->cur_row < p->nrows && b->cur_blk < p->rows[b->cur_row].n) {
        static const char *const names[] = {"free", "used", "shared", "owned", "evicted"};
        const brow *row = &p->rows[b->cur_row];
        char vs[32], line[128];
        view_fmt_value(row->v[b->cur_blk], vs, sizeof vs);
        snprintf(line, sizeof line, "%s, block %d: %s (%s)%s", row->name, b->cur_blk, vs,
                 names[row->st[b->cur_blk] % BLK_STATE_COUNT],
                 b->have_before ? "   p: before/after" : "");
        view_put_clipped(g, x, y + h - 1, w, line, 0);
    }
    grid_unclip(g);
}

static int blocks_key(void *data, int key)
{
    blocks *b = data;
    const picture *p = &b->now;
    switch (key) {
    case 'p':
        b->show_before = !b->show_before && b->have_before;
        return UI_HANDLED | UI_REDRAW;
    case UI_KEY_LEFT: case 'h':
        if (b->cur_blk > 0)
            b->cur_blk--;
        return UI_HANDLED | UI_REDRAW;
    case UI_KEY_RIGHT: case 'l':
        if (b->cur_row < p->nrows && b->cur_blk + 1 < p->rows[b->cur_row].n)
            b->cur_blk++;
        return UI_HANDLED | UI_REDRAW;
    case UI_KEY_UP: case 'k':
        if (b->cur_row > 0)
            b->cur_row--;
        return UI_HANDLED | UI_REDRAW;
    case UI_KEY_DOWN: case 'j':
        if (b->cur_row + 1 < p->nrows)
            b->cur_row++;
        return UI_HANDLED | UI_REDRAW;
    default:
        return 0;
    }
}

static const ui_key_help blocks_keys[] = {
    {"arrows", "select a block"}, {"p", "before/after the last phase"}, {NULL, NULL}
};

const view_class view_blocks_class = {
    .name = "blocks",
    .title = "blocks",
    .help = "rows of blocks shaded by value: gradients, shards, pages; groups outlined",
    .keys = blocks_keys,
    .create = blocks_create,
    .free = blocks_free,
    .reset = blocks_reset,
    .event = blocks_event,
    .line = NULL,
    .phase = NULL,
    .draw = blocks_draw,
    .key = blocks_key,
};
