/* flow.c - the flow view: the roles of a system (the four models of RLHF, a trainer and a
 * generator, a server's queue, scheduler and model) as boxes with their memory, the phase of
 * the lab's step (generate -> score -> advantage -> train -> sync), and the batches moving
 * between roles as arrows that carry what moves and how much. Fed by the typed flow records
 * of core/mlsys.h (MLSYS_EV_FLOW), the memory gauges (MLSYS_MEM_POOL / USAGE with the role as
 * owner; a gauge shows the most it held during the frame, per rank; a pool of blocks, such as
 * a paged KV cache whose POOL record names a role, counts the blocks its ALLOC, SHARE, FREE
 * and COW records leave referenced) and the lab's plot points (a small curve per series
 * beside, e.g. reward and KL). */
#include "view.h"
#include "serve_model.h"
#include "../stepmodel.h"
#include "../../../core/trace_values.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FLOW_ROLES 16
#define FLOW_GAUGES 48              /* per role: (rank, pool) pairs */
#define FLOW_PHASES 12
#define FLOW_MOVES 32               /* of the current phase */
#define FLOW_SERIES 4
#define FLOW_POINTS 512

typedef struct gauge {
    int rank, pool;
    char name[32];
    uint64_t bytes, cap;            /* cap: the pool's size when described, else 0 */
    uint64_t peak;                  /* the most it held in frame peak_frame */
    int peak_frame;                 /* the last frame with a record of it */
    int blocks, peak_blocks;        /* a pool of blocks: those referenced (-1: bytes only) */
    int n_blocks;                   /* and the pool's */
} gauge;

typedef struct role {
    int id;
    char name[32];
    gauge g[FLOW_GAUGES];
    int ng;
} role;

typedef struct move {
    int from, to, what, count, version, seq, frame;
    uint64_t bytes;
    double val;                     /* NaN: none */
    char label[32];                 /* what moves, in the lab's words ("" : the kind's word) */
} move;

typedef struct series {
    char name[32];
    double y[FLOW_POINTS];
    int n;                          /* points kept (the last FLOW_POINTS) */
} series;

typedef struct pooldesc {           /* POOL records: which role a (rank, pool) belongs to */
    int rank, pool, role;
    char name[32];
    uint64_t cap;
    uint64_t block_bytes;           /* bytes per block (POOL's bytes) */
    int n_blocks;                   /* POOL's aux */
    int *refs, nrefs;               /* block -> reference count, as the block records say */
    int used;                       /* blocks with a count above 0 */
} pooldesc;

typedef struct flow {
    role r[FLOW_ROLES];
    int nr;
    struct { int id; char name[32]; } ph[FLOW_PHASES];
    int nph, cur_phase, iteration, phase_frame;
    move mv[FLOW_MOVES];
    int nmv;
    uint64_t moved_total;
    int have_moves;
    series s[FLOW_SERIES];
    int ns;
    pooldesc pd[64];
    int npd;
} flow;

static void *flow_create(void)
{
    flow *f = calloc(1, sizeof *f);
    if (!f)
        abort();
    f->cur_phase = -1;
    return f;
}

static void flow_reset(void *data, int nranks)
{
    flow *f = data;
    (void)nranks;
    for (int i = 0; i < f->npd; i++)
        free(f->pd[i].refs);
    memset(f, 0, sizeof *f);
    f->cur_phase = -1;
}

static void flow_rewind(void *data)
{
    flow_reset(data, 0);
}

static void flow_free(void *data)
{
    flow_reset(data, 0);
    free(data);
}

static int flow_wants(const mlsys_event *e)
{
    if (e->kind == MLSYS_EV_FLOW)
        return 1;
    if (e->kind == MLSYS_EV_MEM)
        return e->mem.op == MLSYS_MEM_POOL || e->mem.op == MLSYS_MEM_USAGE ||
               e->mem.op == MLSYS_MEM_ALLOC || e->mem.op == MLSYS_MEM_SHARE ||
               e->mem.op == MLSYS_MEM_FREE || e->mem.op == MLSYS_MEM_COW;
    return e->kind == MLSYS_EV_MARK &&
           !strncmp(e->label, MLSYS_MARK_PLOT, strlen(MLSYS_MARK_PLOT));
}

static role *role_of(flow *f, int id)
{
    for (int i = 0; i < f->nr; i++)
        if (f->r[i].id == id)
            return &f->r[i];
    if (id < 0 || f->nr == FLOW_ROLES)
        return NULL;
    /* kept in the order of their ids (the lab's), whichever rank's record came first */
    int at = 0;
    while (at < f->nr && f->r[at].id < id)
        at++;
    memmove(&f->r[at + 1], &f->r[at], (size_t)(f->nr - at) * sizeof f->r[0]);
    f->nr++;
    role *r = &f->r[at];
    memset(r, 0, sizeof *r);
    r->id = id;
    snprintf(r->name, sizeof r->name, "role %d", id);
    return r;
}

static int role_index(const flow *f, int id)
{
    for (int i = 0; i < f->nr; i++)
        if (f->r[i].id == id)
            return i;
    return -1;
}

static pooldesc *desc_of(flow *f, int rank, int pool)
{
    for (int i = 0; i < f->npd; i++)
        if (f->pd[i].rank == rank && f->pd[i].pool == pool)
            return &f->pd[i];
    if (f->npd == (int)(sizeof f->pd / sizeof f->pd[0]))
        return NULL;
    pooldesc *d = &f->pd[f->npd++];
    memset(d, 0, sizeof *d);
    d->rank = rank;
    d->pool = pool;
    d->role = -1;
    snprintf(d->name, sizeof d->name, "pool %d", pool);
    return d;
}

/* Block b's count becomes refs (the pool's used count follows); 0 when b is out of range. */
static int set_refs(pooldesc *d, int b, int refs)
{
    if (b < 0 || b >= (1 << 24))
        return 0;
    if (b >= d->nrefs) {
        int n = d->nrefs ? d->nrefs : 64;
        while (n <= b)
            n *= 2;
        int *r = realloc(d->refs, (size_t)n * sizeof *r);
        if (!r)
            abort();
        memset(r + d->nrefs, 0, (size_t)(n - d->nrefs) * sizeof *r);
        d->refs = r;
        d->nrefs = n;
    }
    d->used += (refs > 0) - (d->refs[b] > 0);
    d->refs[b] = refs;
    return 1;
}

static void mem_event(flow *f, const mlsys_event *e, int frame)
{
    const mlsys_mem_info *m = &e->mem;
    pooldesc *d = desc_of(f, e->rank, m->pool);
    if (!d)
        return;
    if (m->op == MLSYS_MEM_POOL) {      /* a pool (again): every block free */
        d->role = m->owner;
        if (e->label[0])
            snprintf(d->name, sizeof d->name, "%s", e->label);
        d->cap = (uint64_t)(m->aux > 0 ? m->aux : 0) * e->bytes;
        d->block_bytes = e->bytes;
        d->n_blocks = m->aux;
        free(d->refs);
        d->refs = NULL;
        d->nrefs = d->used = 0;
        if (m->index <= 0 || d->role < 0)
            return;     /* a pool of bytes: its USAGE records make its gauge */
        /* a pool of blocks (index: tokens per block) that a role holds: its gauge shows from
         * now on, no block in use yet */
    }
    int blocks = -1;
    uint64_t bytes = e->bytes;
    if (m->op != MLSYS_MEM_USAGE) {     /* a block record: the blocks in use are the gauge */
        if (d->role < 0)
            return;                     /* a pool no role holds */
        int ok = 1;
        if (m->op != MLSYS_MEM_POOL)
            ok = set_refs(d, m->block, m->op == MLSYS_MEM_ALLOC ? 1 : m->refs);
        if (m->op == MLSYS_MEM_COW)
            ok &= set_refs(d, m->aux, 1);
        if (!ok)
            return;
        blocks = d->used;
        bytes = (uint64_t)d->used * d->block_bytes;
    }
    /* USAGE: the owner names the role, else the pool's; a block record: the pool's (its
     * owner is a sequence) */
    int rid = blocks < 0 && m->owner >= 0 ? m->owner : d->role;
    role *r = role_of(f, rid);
    if (!r)
        return;
    if (e->label[0] && d->name[0] == 'p' && !strncmp(d->name, "pool ", 5))
        snprintf(d->name, sizeof d->name, "%s", e->label);
    gauge *g = NULL;
    for (int i = 0; i < r->ng; i++)
        if (r->g[i].rank == e->rank && r->g[i].pool == m->pool)
            g = &r->g[i];
    if (!g) {
        if (r->ng == FLOW_GAUGES)
            return;
        g = &r->g[r->ng++];
        memset(g, 0, sizeof *g);
        g->rank = e->rank;
        g->pool = m->pool;
        g->peak_frame = frame;
        g->blocks = g->peak_blocks = blocks < 0 ? -1 : 0;
    }
    snprintf(g->name, sizeof g->name, "%s", d->name);
    /* a gauge is one rank's, whose records come in the order of its frames: the first of a
     * later frame starts that frame's peak from what the gauge held when it began */
    if (frame > g->peak_frame) {
        g->peak_frame = frame;
        g->peak = g->bytes;
        g->peak_blocks = g->blocks;
    }
    g->bytes = bytes;
    g->peak = bytes > g->peak ? bytes : g->peak;
    g->blocks = blocks;
    g->peak_blocks = blocks > g->peak_blocks ? blocks : g->peak_blocks;
    g->n_blocks = d->n_blocks;
    g->cap = d->cap;
}

/* What a gauge shows in frame k: the most it held during k (what it held all along when
 * no record of k changed it). */
static uint64_t gauge_shown(const gauge *g, int k)
{
    return g->peak_frame == k ? g->peak : g->bytes;
}

static int gauge_blocks(const gauge *g, int k)
{
    return g->peak_frame == k ? g->peak_blocks : g->blocks;
}

static void flow_event(void *data, const mlsys_event *e, int frame)
{
    flow *f = data;
    if (e->kind == MLSYS_EV_MEM) {
        if (flow_wants(e))
            mem_event(f, e, frame);
        return;
    }
    if (e->kind == MLSYS_EV_MARK) {
        const char *name = e->label + strlen(MLSYS_MARK_PLOT);
        if (strncmp(e->label, MLSYS_MARK_PLOT, strlen(MLSYS_MARK_PLOT)) || !isfinite(e->val[1]))
            return;
        series *s = NULL;
        for (int i = 0; i < f->ns; i++)
            if (!strcmp(f->s[i].name, name))
                s = &f->s[i];
        if (!s) {
            if (f->ns == FLOW_SERIES)
                return;
            s = &f->s[f->ns++];
            memset(s, 0, sizeof *s);
            snprintf(s->name, sizeof s->name, "%s", name);
        }
        if (s->n == FLOW_POINTS) {
            memmove(s->y, s->y + 1, (FLOW_POINTS - 1) * sizeof s->y[0]);
            s->n--;
        }
        s->y[s->n++] = e->val[1];
        return;
    }
    if (e->kind != MLSYS_EV_FLOW)
        return;
    const mlsys_flow_info *w = &e->flow;
    switch (w->what) {
    case MLSYS_FLOW_ROLE: {
        role *r = role_of(f, w->from);
        if (r && e->label[0])
            snprintf(r->name, sizeof r->name, "%s", e->label);
        return;
    }
    case MLSYS_FLOW_PHASE: {
        int k = 0;
        while (k < f->nph && f->ph[k].id != w->phase)
            k++;
        if (k == f->nph && f->nph < FLOW_PHASES) {
            f->ph[k].id = w->phase;
            snprintf(f->ph[k].name, sizeof f->ph[k].name, "%s",
                     e->label[0] ? e->label : "phase");
            f->nph++;
        }
        if (w->version < 0)
            return;             /* the lab names its phases before they begin */
        if (k < f->nph && (f->cur_phase != k || f->iteration != w->version))
            f->nmv = 0;         /* a new phase: its own moves from here */
        f->cur_phase = k < f->nph ? k : f->cur_phase;
        f->iteration = w->version;
        f->phase_frame = frame;
        return;
    }
    case MLSYS_FLOW_STEP:       /* an engine's step in numbers: the serve view's */
        return;
    default:
        break;
    }
    role_of(f, w->from);
    role_of(f, w->to);
    if (f->nmv == FLOW_MOVES) {
        memmove(f->mv, f->mv + 1, (FLOW_MOVES - 1) * sizeof f->mv[0]);
        f->nmv--;
    }
    move *m = &f->mv[f->nmv++];
    *m = (move){w->from, w->to, w->what, w->count, w->version, w->seq, frame, e->bytes,
                e->val[0], ""};
    snprintf(m->label, sizeof m->label, "%s", e->label);
    f->moved_total += e->bytes;
    f->have_moves = 1;
}

/* ---- drawing ---- */

/* Ranks as a short list of runs: "r0-3", "r1", "r0,2,5-6" (ranks sorted, distinct). */
static void rank_set(const int *rk, int n, char *out, size_t cap)
{
    size_t u = (size_t)snprintf(out, cap, "r");
    for (int i = 0; i < n && u < cap; ) {
        int j = i;
        while (j + 1 < n && rk[j + 1] == rk[j] + 1)
            j++;
        u += (size_t)(j > i ? snprintf(out + u, cap - u, "%s%d-%d", i ? "," : "", rk[i], rk[j])
                            : snprintf(out + u, cap - u, "%s%d", i ? "," : "", rk[i]));
        i = j + 1;
    }
}

static int cmp_int(const void *a, const void *b)
{
    return *(const int *)a - *(const int *)b;
}

/* The distinct ranks of r's gauges, sorted; returns their count. */
static int role_ranks(const role *r, int *rk)
{
    int n = 0;
    for (int i = 0; i < r->ng; i++) {
        int k = 0;
        while (k < n && rk[k] != r->g[i].rank)
            k++;
        if (k == n)
            rk[n++] = r->g[i].rank;
    }
    qsort(rk, (size_t)n, sizeof *rk, cmp_int);
    return n;
}

/* A box line: one pool, the ranks whose gauges held the same peak in the frame; a pool of
 * blocks has a second line under it (sub) with the blocks it held. */
typedef struct box_line {
    int pool, nrk, rk[FLOW_GAUGES];
    char name[32];
    uint64_t bytes, cap;
    int sub;                        /* 1: the blocks line: blk of n_blocks */
    int blk, n_blocks;
} box_line;

static int cmp_line(const void *a, const void *b)
{
    const box_line *x = a, *y = b;
    if (x->pool != y->pool)
        return x->pool < y->pool ? -1 : 1;
    if (x->rk[0] != y->rk[0])
        return x->rk[0] - y->rk[0];
    return x->sub - y->sub;
}

static int box_lines(const role *r, int frame, box_line *out, int max)
{
    unsigned char used[FLOW_GAUGES] = {0};
    int n = 0;
    for (int i = 0; i < r->ng && n + 1 < max; i++) {
        if (used[i])
            continue;
        const gauge *a = &r->g[i];
        box_line *l = &out[n++];
        int blk = gauge_blocks(a, frame);
        l->pool = a->pool;
        l->nrk = 0;
        l->bytes = gauge_shown(a, frame);
        l->cap = a->cap;
        l->sub = 0;
        snprintf(l->name, sizeof l->name, "%s", a->name);
        for (int k = i; k < r->ng; k++)
            if (!used[k] && r->g[k].pool == a->pool &&
                gauge_shown(&r->g[k], frame) == l->bytes && gauge_blocks(&r->g[k], frame) == blk) {
                used[k] = 1;
                l->rk[l->nrk++] = r->g[k].rank;
            }
        qsort(l->rk, (size_t)l->nrk, sizeof l->rk[0], cmp_int);
        if (blk >= 0) {
            box_line *u = &out[n++];
            *u = *l;
            u->sub = 1;
            u->blk = blk;
            u->n_blocks = a->n_blocks;
        }
    }
    /* in the order of the pools (the lab's numbering), then of the ranks, whichever record
     * came first */
    qsort(out, (size_t)n, sizeof *out, cmp_line);
    return n;
}

/* A role's box: its name and, when the job has several ranks, the ranks that hold it; then a
 * line per memory pool with the most it held in the frame, per rank (a line names its ranks
 * when they held different amounts; otherwise each rank of the title held that much). */
static void draw_box(grid *g, int x, int y, int w, int h, const role *r, int idx, uint64_t gmax,
                     int ascii, int active, int ranks_named, int frame)
{
    grid_attr fa = UI_RANK_ATTR(idx) | (active ? GRID_BOLD : 0);
    grid_fill(g, x, y, w, h, ' ', 0);
    grid_box(g, x, y, w, h, active, fa);
    char t[64], rs[40] = "";
    int rk[FLOW_GAUGES], nrk = role_ranks(r, rk);
    snprintf(t, sizeof t, " %s ", r->name);
    view_put_clipped(g, x + 1, y, w - 2, t, fa | GRID_BOLD);
    if (ranks_named && nrk) {           /* the ranks on the bottom border, right-aligned */
        rank_set(rk, nrk, rs, sizeof rs);
        snprintf(t, sizeof t, " %s ", rs);
        int tw = (int)strlen(t);
        if (tw <= w - 2)
            grid_put(g, x + w - 1 - tw, y + h - 1, t, fa | GRID_BOLD);
    }
    int inner = w - 2;
    box_line *ln = malloc(FLOW_GAUGES * sizeof *ln);
    if (!ln)
        abort();
    int nl = box_lines(r, frame, ln, FLOW_GAUGES);
    for (int i = 0; i < nl && i < h - 2; i++) {
        const box_line *l = &ln[i];
        char v[24], name[48], lr[40] = "";
        if (l->sub) {               /* the blocks held, in as many words as fit */
            char b[48];
            snprintf(b, sizeof b, " %d of %d blocks", l->blk, l->n_blocks);
            if ((int)strlen(b) > inner)
                snprintf(b, sizeof b, "%d/%d blocks", l->blk, l->n_blocks);
            if ((int)strlen(b) > inner)
                snprintf(b, sizeof b, "%d/%d", l->blk, l->n_blocks);
            view_put_clipped(g, x + 1, y + 1 + i, inner, b, GRID_DIM);
            continue;
        }
        view_fmt_bytes(l->bytes, v, sizeof v);
        if (ranks_named && l->nrk != nrk)
            rank_set(l->rk, l->nrk, lr, sizeof lr);
        snprintf(name, sizeof name, "%s%s%s", lr, lr[0] ? " " : "", l->name);
        int vw = (int)strlen(v), nw = inner - vw - 1;
        int lw = nw >= 14 ? 10 : nw;        /* a bar of 3 or more after 10, or the name */
        int yy = y + 1 + i;
        view_put_clipped(g, x + 1, yy, lw, name, GRID_DIM);
        int bw = nw - lw - 1;
        uint64_t max = l->cap ? l->cap : gmax;
        if (bw >= 3 && max) {
            int fill = (int)((double)l->bytes / (double)max * bw + 0.5);
            for (int k = 0; k < bw; k++)
                grid_put(g, x + 2 + lw + k, yy, k < fill ? (ascii ? "#" : "▇") :
                         (ascii ? "-" : "░"), k < fill ? UI_RANK_ATTR(idx) : GRID_DIM);
        }
        if (vw <= inner)
            grid_put(g, x + w - 1 - vw, yy, v, 0);
    }
    free(ln);
}

/* A series as a small chart of h rows: the last w points, scaled to their range. */
static void draw_curve(grid *g, int x, int y, int w, int h, const series *s, int idx, int ascii)
{
    char t[64], v[24];
    double last = s->y[s->n - 1];
    view_fmt_value(last, v, sizeof v);
    /* the value whole, the name cut where the column is narrow */
    int vw = (int)strlen(v), nw = w - vw - 1;
    if (nw >= 4 && (int)strlen(s->name) > nw) {
        view_put_clipped(g, x, y, nw, s->name, UI_RANK_ATTR(idx) | GRID_BOLD);
        grid_put(g, x + nw + 1, y, v, UI_RANK_ATTR(idx) | GRID_BOLD);
    } else {
        snprintf(t, sizeof t, "%s %s", s->name, v);
        view_put_clipped(g, x, y, w, t, UI_RANK_ATTR(idx) | GRID_BOLD);
    }
    if (h < 2 || w < 4)
        return;
    int n = s->n < w ? s->n : w;
    const double *yy = s->y + s->n - n;
    double lo = yy[0], hi = yy[0];
    for (int i = 0; i < n; i++) {
        lo = fmin(lo, yy[i]);
        hi = fmax(hi, yy[i]);
    }
    int rows = h - 1;
    static const char *const bars[] = {" ", "▁", "▂", "▃", "▄", "▅", "▆", "▇", "█"};
    for (int i = 0; i < n; i++) {
        double fr = hi > lo ? (yy[i] - lo) / (hi - lo) : 0.5;
        int level = (int)lround(fr * (rows * 8 - 1)) + 1;      /* eighths of a row, >= 1 */
        for (int r = 0; r < rows; r++) {
            int cell = level - r * 8;
            cell = cell < 0 ? 0 : cell > 8 ? 8 : cell;
            const char *c = ascii ? (cell >= 4 ? "#" : cell > 0 ? "." : " ") : bars[cell];
            if (cell)
                grid_put(g, x + i, y + rows - r, c, UI_RANK_ATTR(idx));
        }
    }
}

static const char *what_word(int what, int count)
{
    static const char *const one[] = {"role", "phase", "sequence", "log-probs", "rewards",
                                      "values", "advantages", "gradients", "weights", "request",
                                      "step"};
    static const char *const many[] = {"roles", "phases", "sequences", "log-probs", "rewards",
                                       "values", "advantages", "gradients", "weights",
                                       "requests", "steps"};
    if (what < 0 || what >= MLSYS_FLOW_WHAT_COUNT)
        return "?";
    return count == 1 ? one[what] : many[what];
}

/* "8 sequences (2 KiB)", "8 rewards = 0.5", "weights v2". */
static void move_text(const move *m, char *out, size_t n, int longer)
{
    char b[24] = "", v[32] = "";
    if (m->bytes)
        view_fmt_bytes(m->bytes, b, sizeof b);
    if (!isnan(m->val)) {
        char t[24];
        view_fmt_value(m->val, t, sizeof t);
        snprintf(v, sizeof v, " = %s", t);
    }
    int sz = b[0] && longer;
    if (m->what == MLSYS_FLOW_WEIGHTS)
        snprintf(out, n, "weights v%d%s%s%s", m->version, sz ? " (" : "", sz ? b : "",
                 sz ? ")" : "");
    else if (m->what == MLSYS_FLOW_REQUESTS && m->seq >= 0)
        svm_move_text(m->from, m->to, m->seq, m->count, out, n);   /* its unit: serve_model */
    else
        snprintf(out, n, "%d %s%s%s%s%s", m->count,
                 m->label[0] ? m->label : what_word(m->what, m->count), v, sz ? " (" : "",
                 sz ? b : "", sz ? ")" : "");
}

/* The boxes in a row over the area, the phase's moves under them as a sequence chart: a
 * line from the sender's box down to the row of the move, an arrow to the receiver's. */
static void flow_draw(void *data, grid *g, int x, int y, int w, int h, const view_ctx *ctx)
{
    flow *f = data;
    int ascii = ctx->ascii || g->ascii;
    grid_clip(g, x, y, w, h);
    char line[256];
    if (!f->nr) {
        view_put_clipped(g, x, y, w, "flow", GRID_BOLD);
        view_put_clipped(g, x + 2, y + 2, w - 2, "no roles yet", GRID_DIM);
        view_put_clipped(g, x + 2, y + 3, w - 2, "This view draws the parts of a system (the "
                         "four models of RLHF, a server's queue and model) and what moves "
                         "between them, once the lab names them.", GRID_DIM);
        grid_unclip(g);
        return;
    }
    /* title and the phases of the step, the current one marked */
    int used = snprintf(line, sizeof line, "flow %s %d role%s", view_glyph(ascii, "·", "-"),
                        f->nr, f->nr == 1 ? "" : "s");
    if (f->cur_phase >= 0 && f->iteration > 0)     /* 0: the lab's phases are no loop */
        snprintf(line + used, sizeof line - (size_t)used, " %s iteration %d",
                 view_glyph(ascii, "·", "-"), f->iteration);
    view_put_clipped(g, x, y, w, line, GRID_BOLD);
    /* the phases in a row; when they do not fit, the earlier ones give way to the current */
    int first_ph = 0;
    for (;;) {
        int cols = first_ph ? 4 : 0;
        for (int i = first_ph; i < f->nph; i++)
            cols += (int)strlen(f->ph[i].name) + (i == f->cur_phase ? 2 : 0) + (i ? 3 : 0);
        if (cols <= w || first_ph >= f->cur_phase)
            break;
        first_ph++;
    }
    int cx = x;
    if (first_ph)
        cx += grid_put(g, cx, y + 1, ascii ? "..." : "…", GRID_DIM);
    for (int i = first_ph; i < f->nph && cx < x + w; i++) {
        if (i)
            cx += grid_put(g, cx, y + 1, ascii ? " -> " : " → ", GRID_DIM);
        int cur = i == f->cur_phase;
        char t[48];
        snprintf(t, sizeof t, cur ? "[%s]" : "%s", f->ph[i].name);
        cx += grid_put(g, cx, y + 1, t, cur ? GRID_PAIR(UI_PAIR_WARN) | GRID_BOLD | GRID_REVERSE
                       : GRID_DIM);
    }
    /* curves on the right when wide, under the chart otherwise */
    int have_curves = 0;
    for (int i = 0; i < f->ns; i++)
        have_curves |= f->s[i].n > 0;
    /* five roles (RLHF with its generator) need the room: narrower curves, closer boxes */
    int many = f->nr >= 5 && w < 150;
    int side = have_curves && w >= 100 ? (many ? 22 : 28) : 0;
    int aw = w - (side ? side + 2 : 0);
    int below = have_curves && !side && h >= 16 ? 4 : 0;
    uint64_t gmax = 0;
    int maxg = 0;
    box_line *ln = malloc(FLOW_GAUGES * sizeof *ln);
    if (!ln)
        abort();
    for (int i = 0; i < f->nr; i++) {
        for (int k = 0; k < f->r[i].ng; k++)
            if (!f->r[i].g[k].cap && gauge_shown(&f->r[i].g[k], ctx->frame) > gmax)
                gmax = gauge_shown(&f->r[i].g[k], ctx->frame);
        int nl = box_lines(&f->r[i], ctx->frame, ln, FLOW_GAUGES);
        if (nl > maxg)
            maxg = nl;
    }
    free(ln);
    int n = f->nr, gap = many ? 1 : 2;
    int bw = (aw - (n - 1) * gap) / n;
    if (bw > 30)
        bw = 30;
    int bh = 2 + (maxg > 0 ? maxg : 1);
    int by = y + 3, room = h - 3 - below;
    if (bh > room - 2)
        bh = room - 2;
    if (bw < 8 || bh < 2) {
        view_put_clipped(g, x, by, w, "flow: enlarge the terminal to see the roles", GRID_DIM);
        grid_unclip(g);
        return;
    }
    int span = n * bw + (n - 1) * gap, x0 = x + (aw - span) / 2;
    int mid[FLOW_ROLES];
    for (int i = 0; i < n; i++)
        mid[i] = x0 + i * (bw + gap) + bw / 2;
    /* which roles take part in the shown frame's moves */
    int active[FLOW_ROLES] = {0};
    for (int i = 0; i < f->nmv; i++)
        if (f->mv[i].frame == ctx->frame) {
            int a = role_index(f, f->mv[i].from), b = role_index(f, f->mv[i].to);
            if (a >= 0)
                active[a] = 1;
            if (b >= 0)
                active[b] = 1;
        }
    for (int i = 0; i < n; i++)
        draw_box(g, x0 + i * (bw + gap), by, bw, bh, &f->r[i], i, gmax, ascii, active[i],
                 ctx->nranks > 1, ctx->frame);
    /* the sequence chart: a row per move of this phase, the newest last */
    double t = ctx->anim < 0 ? 0 : ctx->anim > 1 ? 1 : ctx->anim;
    int rows = room - bh, first = f->nmv > rows ? f->nmv - rows : 0;
    int ly = by + bh;
    uint32_t vline = grid_line_cp(GRID_V, ascii), hline = grid_line_cp(GRID_H, ascii);
    for (int i = first; i < f->nmv; i++) {
        const move *m = &f->mv[i];
        int a = role_index(f, m->from), b = role_index(f, m->to), yy = ly + (i - first);
        if (a < 0)
            continue;
        int now = m->frame == ctx->frame;
        grid_attr at = UI_RANK_ATTR(a) | (now ? GRID_BOLD : GRID_DIM);
        char lb[64];
        move_text(m, lb, sizeof lb, 0);
        for (int r = 0; r < n; r++)         /* the lifelines */
            grid_set(g, mid[r], yy, vline, GRID_DIM);
        if (b < 0 || b == a) {              /* kept, or to itself: a note beside */
            snprintf(line, sizeof line, "%s %s", ascii ? "*" : "↺", lb);
            int lw = grid_text_width(line, strlen(line)), right = x + aw - mid[a] - 2;
            if (lw > right && mid[a] - 1 - x > right)      /* more room on the left */
                view_put_clipped(g, lw < mid[a] - 1 - x ? mid[a] - 1 - lw : x, yy,
                                 mid[a] - 1 - x, line, at);
            else
                view_put_clipped(g, mid[a] + 2, yy, right, line, at);
            continue;
        }
        int lo = mid[a] < mid[b] ? mid[a] : mid[b], hi = mid[a] < mid[b] ? mid[b] : mid[a];
        for (int c = lo + 1; c < hi; c++)
            grid_set(g, c, yy, hline, at);
        grid_set(g, mid[b] + (b > a ? -1 : 1), yy, b > a ? (ascii ? '>' : 0x25b6)
                 : (ascii ? '<' : 0x25c0), at | GRID_BOLD);
        int lw = (int)strlen(lb);
        if (lw + 2 <= hi - lo - 2)
            grid_put(g, lo + 1 + (hi - lo - 1 - lw) / 2, yy, lb, at);
        else            /* too long for the gap: beside the arrow, on the far side */
            view_put_clipped(g, hi + 2, yy, x + aw - hi - 2, lb, at);
        if (now && t < 1.0) {
            int k = (int)lround(t * (hi - lo - 2));
            int px = b > a ? lo + 1 + k : hi - 1 - k;
            grid_set(g, px, yy, ascii ? '@' : 0x25cf, UI_RANK_ATTR(a) | GRID_BOLD);
        }
    }
    if (first > 0 && ly + rows < y + h)
        grid_printf(g, x, ly + rows, GRID_PAIR(UI_PAIR_WARN), "(%d earlier move%s of this phase "
                    "above: a taller terminal shows them)", first, first == 1 ? "" : "s");
    /* this step's moves in words (with their bytes), under the chart when there is room */
    int wy = ly + (f->nmv - first) + 1, wend = y + h - below;
    for (int i = first; i < f->nmv && wy < wend; i++) {
        const move *m = &f->mv[i];
        if (m->frame != ctx->frame)
            continue;
        int a = role_index(f, m->from), b = role_index(f, m->to);
        char mt[80];
        move_text(m, mt, sizeof mt, 1);
        snprintf(line, sizeof line, "%s %s %s: %s", a >= 0 ? f->r[a].name : "?",
                 ascii ? "->" : "→", b >= 0 ? f->r[b].name : a >= 0 ? f->r[a].name : "?", mt);
        view_put_clipped(g, x, wy++, aw, line, GRID_DIM);
    }
    /* under the chart, or beside: the curves */
    if (side) {
        int sx = x + w - side, sy = y + 3, nc = 0;
        for (int i = 0; i < f->ns; i++)
            nc += f->s[i].n > 0;
        int ch = (h - 3) / (nc ? nc : 1);
        grid_vline(g, sx - 1, y + 2, h - 2, GRID_PAIR(UI_PAIR_DIM));
        for (int i = 0, k = 0; i < f->ns; i++)
            if (f->s[i].n)
                draw_curve(g, sx + 1, sy + (k++) * ch, side - 1, ch > 7 ? 6 : ch - 1, &f->s[i],
                           i, ascii);
    } else if (below) {
        int nc = 0;
        for (int i = 0; i < f->ns; i++)
            nc += f->s[i].n > 0;
        int cw = nc ? (w - (nc - 1) * 2) / nc : w;
        for (int i = 0, k = 0; i < f->ns; i++)
            if (f->s[i].n)
                draw_curve(g, x + (k++) * (cw + 2), y + h - below, cw, below, &f->s[i], i,
                           ascii);
    }
    grid_unclip(g);
}

static const ui_key_help flow_keys[] = {{NULL, NULL}};

static const char *const *flow_notes(int ascii)
{
    static const char *const lines[] = {
        "Boxes are the roles with the memory each holds: the most it held during the step "
        "shown, per rank (a box names the ranks that hold its role; a line names its ranks "
        "when they held different amounts). The arrows are what moved in the current phase "
        "(bold: in the step shown), labelled with what and how much.", NULL
    };
    (void)ascii;
    return lines;
}

const view_class view_flow_class = {
    .name = "flow",
    .title = "flow",
    .help = "roles as boxes with their memory, the phase of the step, batches moving between "
            "roles, and the lab's curves beside",
    .keys = flow_keys,
    .notes = flow_notes,
    .create = flow_create,
    .free = flow_free,
    .reset = flow_reset,
    .rewind = flow_rewind,
    .wants = flow_wants,
    .event = flow_event,
    .draw = flow_draw,
};
