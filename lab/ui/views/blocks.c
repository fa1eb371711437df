/* blocks.c - the blocks view: memory as blocks, from the typed memory records of core/mlsys.h
 * (MLSYS_EV_MEM). Each rank's pools (a KV cache, a gradient buffer, ZeRO's shards) are rows
 * of blocks: a block is coloured and lettered by the owner that holds it (a sequence, a
 * bucket, a tensor), a shared block shows its reference count, free and cached blocks are
 * marked, an eviction or a copy on write shows in the step it happens (and a line says what
 * happened to a KV cache in that step), and a block with a value (a gradient's mean) is shaded
 * by it. Beside the map, the selected pool's block
 * tables: which blocks each owner holds, in order. Pools without blocks are gauges of bytes
 * in use. Everything is rebuilt from the records up to the frame shown. */
#include "view.h"
#include "serve_model.h"
#include "../stepmodel.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BLK_MAX_BLOCKS 65536        /* block ids at or above this are ignored */
#define BLK_OWNERS 4                /* owners remembered per block (refs counts them all) */

enum { B_FREE, B_USED, B_CACHED };

typedef struct bblock {
    int refs;
    int own[BLK_OWNERS];        /* indices into the pool's owners */
    int nown;
    unsigned char state, busy, has_val, last_op;
    double val;
    int changed;                /* frame of the last change, -1 */
    int evicted;                /* frame of its last eviction, -1 */
} bblock;

typedef struct bowner {
    int id;
    char name[32];
    int *table;                 /* block ids by index, -1 a hole */
    int ntable, cap;
    int cow_index, changed;     /* the entry a copy on write moved, and in which frame */
} bowner;

/* What happened to a pool in one frame (the newest it was fed), for the line that says it. */
typedef struct bstep {
    int frame;                  /* -1: nothing yet */
    int alloc, share, evict, cow;
    int let_go, held, kept, freed;      /* FREE records: still held by others, cached, free */
    int freers[8], nfreers;             /* who let go (the first 8 owners; more: 9) */
    int evicted[4];             /* the first blocks evicted */
    int cow_owner, cow_from, cow_to;    /* the first copy on write (owner index, blocks) */
} bstep;

typedef struct bpool {
    int rank, id;
    char name[32];
    int nblocks, described;
    uint64_t block_bytes;
    int tokens;                 /* per block, 0 unknown */
    bblock *b;
    int cap;
    bowner *o;
    int no, ocap;
    int tables;                 /* some owner has a table (an ALLOC with an index) */
    uint64_t usage, usage_max;
    int has_usage;
    bstep st;
} bpool;

/* Why an owner let go in a frame, from a serving engine's request moves (an owner of its
 * KV cache is a request, by the same id): preempted (scheduler -> queue) or finished. */
enum { WHY_NONE, WHY_PREEMPTED, WHY_FINISHED };
#define BLK_GONE 32

typedef struct bgone {
    int rank, id, why;
} bgone;

typedef struct blocks {
    bpool *p;
    int np, pcap;
    bgone gone[BLK_GONE];       /* requests that left the running set, in gone_frame */
    int ngone, gone_frame;
    double scale;               /* the largest |value| seen in the run: shades never rescale
                                   between steps, only when a larger value first appears */
    int sel_pool, sel_block;    /* the selected block (pool index in display order) */
    int top;                    /* first pool drawn */
    int nranks;
} blocks;

static void *blocks_create(void)
{
    blocks *b = calloc(1, sizeof *b);
    if (!b)
        abort();
    return b;
}

static void forget_pools(blocks *b)
{
    b->ngone = 0;
    b->gone_frame = -1;
    for (int i = 0; i < b->np; i++) {
        for (int k = 0; k < b->p[i].no; k++)
            free(b->p[i].o[k].table);
        free(b->p[i].o);
        free(b->p[i].b);
    }
    b->np = 0;
}

static void blocks_reset(void *data, int nranks)
{
    blocks *b = data;
    forget_pools(b);
    b->scale = 0;
    b->sel_pool = b->sel_block = b->top = 0;
    b->nranks = nranks;
}

/* The same run from its start: the pools go; the selection and the shading scale stay. */
static void blocks_rewind(void *data)
{
    forget_pools(data);
}

static void blocks_free(void *data)
{
    blocks *b = data;
    if (!b)
        return;
    forget_pools(b);
    free(b->p);
    free(b);
}

/* A serving engine's request leaving the running set: preempted or finished. */
static int request_leaves(const mlsys_event *e)
{
    const mlsys_flow_info *f = &e->flow;
    return e->kind == MLSYS_EV_FLOW && f->what == MLSYS_FLOW_REQUESTS && f->seq >= 0 &&
           ((f->from == SVM_SCHED && f->to == SVM_QUEUE) ||
            (f->from == SVM_MODEL && f->to == SVM_CLIENTS));
}

static int blocks_wants(const mlsys_event *e)
{
    return e->kind == MLSYS_EV_MEM || request_leaves(e);
}

static void note_gone(blocks *b, const mlsys_event *e, int frame)
{
    if (b->gone_frame != frame) {
        b->ngone = 0;
        b->gone_frame = frame;
    }
    if (b->ngone < BLK_GONE)
        b->gone[b->ngone++] = (bgone){e->rank, e->flow.seq,
                                      e->flow.to == SVM_QUEUE ? WHY_PREEMPTED : WHY_FINISHED};
}

/* Why owner id of a pool on rank let go in frame (the last word of that frame). */
static int why_gone(const blocks *b, int rank, int id, int frame)
{
    int why = WHY_NONE;
    for (int i = 0; b->gone_frame == frame && i < b->ngone; i++)
        if (b->gone[i].rank == rank && b->gone[i].id == id)
            why = b->gone[i].why;
    return why;
}

/* ---- the model: pools, blocks, owners ---- */

static bpool *pool_of(blocks *b, int rank, int id)
{
    for (int i = 0; i < b->np; i++)
        if (b->p[i].rank == rank && b->p[i].id == id)
            return &b->p[i];
    if (b->np == b->pcap) {
        b->pcap = b->pcap ? b->pcap * 2 : 8;
        b->p = mlsys_xrealloc(b->p, (size_t)b->pcap * sizeof *b->p);
    }
    /* kept in (rank, id) order, the order they are drawn in */
    int at = b->np;
    while (at > 0 && (b->p[at - 1].rank > rank ||
                      (b->p[at - 1].rank == rank && b->p[at - 1].id > id)))
        at--;
    memmove(&b->p[at + 1], &b->p[at], (size_t)(b->np - at) * sizeof *b->p);
    b->np++;
    bpool *p = &b->p[at];
    memset(p, 0, sizeof *p);
    p->rank = rank;
    p->id = id;
    p->st.frame = -1;
    snprintf(p->name, sizeof p->name, "pool %d", id);
    return p;
}

static void pool_grow(bpool *p, int n)
{
    if (n <= p->nblocks)
        return;
    if (n > p->cap) {
        int cap = p->cap ? p->cap : 16;
        while (cap < n)
            cap *= 2;
        p->b = mlsys_xrealloc(p->b, (size_t)cap * sizeof *p->b);
        p->cap = cap;
    }
    for (int i = p->nblocks; i < n; i++) {
        memset(&p->b[i], 0, sizeof p->b[i]);
        p->b[i].changed = p->b[i].evicted = -1;
    }
    p->nblocks = n;
}

static bblock *block_of(bpool *p, int id)
{
    if (id < 0 || id >= BLK_MAX_BLOCKS)
        return NULL;
    pool_grow(p, id + 1);
    return &p->b[id];
}

static int owner_of(bpool *p, int id)
{
    for (int i = 0; i < p->no; i++)
        if (p->o[i].id == id)
            return i;
    if (p->no == p->ocap) {
        p->ocap = p->ocap ? p->ocap * 2 : 8;
        p->o = mlsys_xrealloc(p->o, (size_t)p->ocap * sizeof *p->o);
    }
    bowner *o = &p->o[p->no];
    memset(o, 0, sizeof *o);
    o->id = id;
    o->cow_index = -1;
    o->changed = -1;
    snprintf(o->name, sizeof o->name, "owner %d", id);
    return p->no++;
}

static void table_set(bpool *p, int oi, int index, int block)
{
    bowner *o = &p->o[oi];
    if (index < 0 || index >= BLK_MAX_BLOCKS)
        return;
    if (index >= o->cap) {
        int cap = o->cap ? o->cap : 8;
        while (cap <= index)
            cap *= 2;
        o->table = mlsys_xrealloc(o->table, (size_t)cap * sizeof *o->table);
        o->cap = cap;
    }
    for (int i = o->ntable; i <= index; i++)
        o->table[i] = -1;
    if (index >= o->ntable)
        o->ntable = index + 1;
    o->table[index] = block;
    p->tables = 1;
}

/* Owner oi lets go of block id: out of the block's owners and out of its table. */
static void let_go(bpool *p, bblock *bk, int id, int oi)
{
    for (int i = 0; i < bk->nown; i++)
        if (bk->own[i] == oi) {
            memmove(&bk->own[i], &bk->own[i + 1], (size_t)(bk->nown - i - 1) * sizeof bk->own[0]);
            bk->nown--;
            break;
        }
    bowner *o = &p->o[oi];
    for (int i = 0; i < o->ntable; i++)
        if (o->table[i] == id)
            o->table[i] = -1;
    while (o->ntable > 0 && o->table[o->ntable - 1] < 0)
        o->ntable--;
}

static void take(bblock *bk, int oi)
{
    for (int i = 0; i < bk->nown; i++)
        if (bk->own[i] == oi)
            return;
    if (bk->nown < BLK_OWNERS)
        bk->own[bk->nown++] = oi;
}

static int seen_freer(const bstep *t, int owner)
{
    for (int i = 0; i < t->nfreers && i < 8; i++)
        if (t->freers[i] == owner)
            return 1;
    return 0;
}

/* Count what a block record does in its frame (a new frame starts the counts afresh). */
static void tally(bpool *p, const mlsys_mem_info *m, int frame)
{
    bstep *t = &p->st;
    if (t->frame != frame) {
        memset(t, 0, sizeof *t);
        t->frame = frame;
        t->cow_owner = -1;
    }
    switch (m->op) {
    case MLSYS_MEM_ALLOC: t->alloc++; break;
    case MLSYS_MEM_SHARE: t->share++; break;
    case MLSYS_MEM_FREE:
        t->let_go++;
        t->held += m->refs > 0;
        t->kept += m->refs <= 0 && m->cached;
        t->freed += m->refs <= 0 && !m->cached;
        if (!seen_freer(t, m->owner))
            t->nfreers < 8 ? (void)(t->freers[t->nfreers++] = m->owner) : (void)(t->nfreers = 9);
        break;
    case MLSYS_MEM_EVICT:
        if (t->evict < 4)
            t->evicted[t->evict] = m->block;
        t->evict++;
        break;
    case MLSYS_MEM_COW:
        if (!t->cow++) {
            t->cow_owner = m->owner;
            t->cow_from = m->block;
            t->cow_to = m->aux;
        }
        break;
    default:
        break;
    }
}

static void blocks_event(void *data, const mlsys_event *e, int frame)
{
    blocks *b = data;
    if (request_leaves(e))
        note_gone(b, e, frame);
    if (e->kind != MLSYS_EV_MEM)
        return;
    const mlsys_mem_info *m = &e->mem;
    bpool *p = pool_of(b, e->rank, m->pool);
    bblock *bk = NULL;
    int oi = -1;
    switch (m->op) {
    case MLSYS_MEM_POOL:            /* described (again): the pool starts afresh */
        for (int k = 0; k < p->no; k++)
            free(p->o[k].table);
        if (m->aux <= 0) {          /* no blocks: gone from the picture */
            free(p->o);
            free(p->b);
            int at = (int)(p - b->p);
            memmove(&b->p[at], &b->p[at + 1], (size_t)(b->np - at - 1) * sizeof *b->p);
            b->np--;
            return;
        }
        p->no = 0;
        p->nblocks = 0;
        p->tables = 0;
        p->has_usage = 0;
        p->usage = p->usage_max = 0;
        if (e->label[0])
            snprintf(p->name, sizeof p->name, "%s", e->label);
        p->described = 1;
        p->block_bytes = e->bytes;
        p->tokens = m->index > 0 ? m->index : 0;
        pool_grow(p, m->aux > 0 && m->aux < BLK_MAX_BLOCKS ? m->aux : 0);
        return;
    case MLSYS_MEM_OWNER:
        oi = owner_of(p, m->owner);
        if (e->label[0])
            snprintf(p->o[oi].name, sizeof p->o[oi].name, "%s", e->label);
        return;
    case MLSYS_MEM_USAGE:
        p->usage = e->bytes;
        p->has_usage = 1;
        if (e->bytes > p->usage_max)
            p->usage_max = e->bytes;
        if (e->label[0] && !p->described)
            snprintf(p->name, sizeof p->name, "%s", e->label);
        return;
    default:
        break;
    }
    if (!(bk = block_of(p, m->block)))
        return;
    int id = m->block;
    tally(p, m, frame);
    if (m->owner >= 0 && m->op != MLSYS_MEM_EVICT)
        oi = owner_of(p, m->owner);
    bk = &p->b[id];                 /* owner_of never moves blocks, but be plain about it */
    switch (m->op) {
    case MLSYS_MEM_ALLOC:
        while (bk->nown)            /* a held block moves: FREE + ALLOC */
            let_go(p, bk, id, bk->own[0]);
        bk->state = B_USED;
        bk->refs = m->refs > 0 ? m->refs : 1;
        bk->busy = 0;
        bk->has_val = 0;
        if (oi >= 0) {
            take(bk, oi);
            table_set(p, oi, m->index, id);
        }
        break;
    case MLSYS_MEM_SHARE:
        bk->state = B_USED;
        if (oi >= 0) {
            take(bk, oi);
            table_set(p, oi, m->index, id);
        }
        bk->refs = m->refs > 0 ? m->refs : bk->refs + 1;
        break;
    case MLSYS_MEM_FREE:
        if (oi >= 0)
            let_go(p, bk, id, oi);
        bk->refs = m->refs > 0 ? m->refs : 0;
        bk->busy = 0;
        if (bk->refs == 0) {
            bk->state = m->cached ? B_CACHED : B_FREE;
            bk->nown = 0;
            if (!m->cached)
                bk->has_val = 0;
        }
        break;
    case MLSYS_MEM_EVICT:
        for (int i = 0; i < p->no; i++)        /* nobody holds it; its tables forget it too */
            let_go(p, bk, id, i);
        bk->evicted = frame;
        bk->state = B_FREE;
        bk->refs = 0;
        bk->nown = 0;
        bk->has_val = 0;
        break;
    case MLSYS_MEM_COW: {
        bblock *nb = block_of(p, m->aux);
        if (!nb)
            return;
        bk = &p->b[id];
        if (oi >= 0)
            let_go(p, bk, id, oi);
        bk->refs = m->refs > 0 ? m->refs : bk->refs > 1 ? bk->refs - 1 : 0;
        if (bk->refs == 0)
            bk->state = B_FREE;
        nb->state = B_USED;
        nb->refs = 1;
        nb->nown = 0;
        nb->has_val = bk->has_val;
        nb->val = bk->val;
        if (oi >= 0) {
            take(nb, oi);
            table_set(p, oi, m->index, m->aux);
            p->o[oi].cow_index = m->index;
            p->o[oi].changed = frame;
        }
        nb->changed = frame;
        nb->last_op = MLSYS_MEM_COW;
        break;
    }
    case MLSYS_MEM_WRITE:
        if (isfinite(e->val[0])) {
            bk->val = e->val[0];
            bk->has_val = 1;
            if (fabs(bk->val) > b->scale)
                b->scale = fabs(bk->val);
        }
        bk->busy = 0;
        if (bk->state == B_FREE)
            bk->state = B_USED;
        break;
    case MLSYS_MEM_BUSY:
        bk->busy = 1;
        break;
    default:
        return;
    }
    bk->changed = frame;
    bk->last_op = (unsigned char)m->op;
}

/* ---- drawing ---- */

/* Owner i's letter: a..z, then A..Z, then digits. */
static char owner_letter(int i)
{
    static const char s[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
    return s[i % (int)(sizeof s - 1)];
}

/* Shade glyphs: level 0 (zero) .. 4 (the largest |value| of the run), on a square-root scale
 * so that one large value does not wash out the rest; under --ascii the sign picks the set
 * (in UTF-8 a negative block of two columns or more starts with a minus sign). */
static const char *shade(double v, double mx, int ascii)
{
    static const char *const up[] = {"0", "░", "▒", "▓", "█"};
    static const char *const ap[] = {"0", ":", "+", "*", "#"};
    static const char *const an[] = {"0", ";", "-", "=", "%"};
    int lv = 0;
    if (mx > 0 && v != 0 && isfinite(v)) {
        lv = (int)ceil(4.0 * sqrt(fabs(v) / mx));
        lv = lv < 1 ? 1 : lv > 4 ? 4 : lv;
    }
    if (ascii)
        return v < 0 ? an[lv] : ap[lv];
    return up[lv];
}

typedef struct look {
    int ascii, frame, cw;
    double scale;
} look;

/* One block in cw columns. */
static void draw_block(grid *g, int x, int y, const bpool *p, int k, const look *lk, int sel)
{
    const bblock *bk = &p->b[k];
    char gl[16];
    grid_attr a = 0;
    int now = bk->changed == lk->frame && lk->frame >= 0;
    if (bk->state == B_FREE) {
        if (now && bk->last_op == MLSYS_MEM_EVICT) {
            snprintf(gl, sizeof gl, "x");
            a = GRID_PAIR(UI_PAIR_WARN) | GRID_BOLD;
        } else {
            snprintf(gl, sizeof gl, "%s", lk->ascii ? "." : "·");
            a = GRID_PAIR(UI_PAIR_DIM) | GRID_DIM;
        }
    } else if (bk->state == B_CACHED) {
        snprintf(gl, sizeof gl, "%s", lk->ascii ? "o" : "○");
        a = GRID_PAIR(UI_PAIR_DIM);
    } else if (bk->refs >= 2) {
        if (bk->refs > 99 || (bk->refs > 9 && lk->cw < 3))
            snprintf(gl, sizeof gl, "+");
        else
            snprintf(gl, sizeof gl, "%d", bk->refs);
        a = GRID_PAIR(UI_PAIR_PARTIAL) | GRID_BOLD;
    } else if (bk->has_val) {
        snprintf(gl, sizeof gl, "%s", shade(bk->val, lk->scale, lk->ascii));
        a = bk->nown ? UI_RANK_ATTR(bk->own[0]) : GRID_PAIR(UI_PAIR_OK);
    } else {
        snprintf(gl, sizeof gl, "%c", bk->nown ? owner_letter(bk->own[0]) : '?');
        a = bk->nown ? UI_CELL_ATTR(bk->own[0]) : 0;
    }
    if (bk->evicted == lk->frame && lk->frame >= 0 && bk->state != B_FREE)
        a = GRID_PAIR(UI_PAIR_WARN) | GRID_BOLD;    /* evicted in this step, and reused */
    if (bk->busy)
        a |= GRID_REVERSE | GRID_BOLD;
    if (now && !(bk->state == B_FREE && bk->last_op == MLSYS_MEM_EVICT))
        a |= GRID_UNDERLINE | GRID_BOLD;
    if (sel)
        a ^= GRID_REVERSE;
    int w = lk->cw > 1 ? lk->cw - 1 : 1;        /* a gap after each block when there is room */
    if (bk->state == B_USED && bk->has_val && bk->refs < 2) {
        for (int c = 0; c < w; c++)
            grid_put(g, x + c, y, gl, a);
        if (!lk->ascii && w >= 2 && bk->val < 0)
            grid_put(g, x, y, "−", a);
        return;
    }
    if (bk->state == B_USED && bk->refs >= 2 && bk->nown >= 2 && w >= 2 &&
        !(bk->evicted == lk->frame && lk->frame >= 0)) {
        /* shared: its cells in its owners' colours (the first w of them), the count on top;
         * selected or in flight: reversed as any block */
        grid_attr extra = a & (GRID_UNDERLINE | GRID_BOLD | GRID_REVERSE);
        int gw = (int)strlen(gl), at = (w - gw) / 2;
        for (int c = 0; c < w; c++) {
            grid_attr ca = UI_CELL_ATTR(bk->own[c % bk->nown]) | GRID_BOLD | extra;
            char one[2] = {c >= at && c < at + gw ? gl[c - at] : ' ', 0};
            grid_put(g, x + c, y, one, ca);
        }
        return;
    }
    grid_fill(g, x, y, w, 1, ' ', a);
    grid_put(g, x + (w - 1) / 2, y, gl, a);
}

static int pool_counts(const bpool *p, int *used, int *shared, int *cached)
{
    *used = *shared = *cached = 0;
    for (int k = 0; k < p->nblocks; k++) {
        *used += p->b[k].state == B_USED;
        *shared += p->b[k].state == B_USED && p->b[k].refs >= 2;
        *cached += p->b[k].state == B_CACHED;
    }
    return p->nblocks - *used - *cached;
}

/* The name a pool goes by on screen: "r1 grads" when more than one rank has pools. */
static void pool_label(const blocks *b, const bpool *p, char *out, size_t n)
{
    int ranks = 0;
    for (int i = 0; i < b->np; i++)
        if (i == 0 || b->p[i].rank != b->p[i - 1].rank)
            ranks++;
    if (ranks > 1 || p->rank > 0)
        snprintf(out, n, "r%d %s", p->rank, p->name);
    else
        snprintf(out, n, "%s", p->name);
}

/* "kv cache: 12 blocks x 16 tokens = 480 KiB, 5 used, 2 shared, 0 cached, 7 free": the
 * pool's size (one block's is on the selected block's line). */
static void pool_summary(const blocks *b, const bpool *p, char *line, size_t n)
{
    char lab[64];
    pool_label(b, p, lab, sizeof lab);
    int u, sh, ca, fr = pool_counts(p, &u, &sh, &ca);
    char size[40] = "", all[24], tk[32] = "";
    if (p->tokens)
        snprintf(tk, sizeof tk, " x %d tokens", p->tokens);
    if (p->block_bytes) {
        view_fmt_bytes(p->block_bytes * (uint64_t)p->nblocks, all, sizeof all);
        snprintf(size, sizeof size, " = %s", all);
    }
    snprintf(line, n, "%s: %d blocks%s%s, %d used, %d shared, %d cached, %d free", lab,
             p->nblocks, tk, size, u, sh, ca, fr);
}

/* Is row y blank from x over w cells (nothing drawn there)? */
static int row_blank(const grid *g, int x, int y, int w)
{
    for (int i = 0; i < w; i++) {
        const grid_cell *c = grid_get(g, x + i, y);
        if (!c || c->ch != ' ')
            return 0;
    }
    return 1;
}

/* What happened to the pool in the frame shown: "in this step: 3 allocated, 2 shared (prefix
 * hits), req 2 was preempted and let go of 3 blocks (1 kept cached, 2 freed), 1 evicted
 * (block 5), copy on write: req 2's block 4 copied to 9". Empty when nothing did. */
static void step_text(const blocks *b, const bpool *p, int frame, char *out, size_t n)
{
    const bstep *t = &p->st;
    size_t k = 0;
    out[0] = 0;
    if (t->frame != frame || frame < 0)
        return;
#define ADD(...) (k += (size_t)snprintf(out + k, k < n ? n - k : 0, __VA_ARGS__))
    if (t->alloc)
        ADD("%s%d allocated", k ? ", " : "", t->alloc);
    if (t->share)
        ADD("%s%d shared (prefix hits)", k ? ", " : "", t->share);
    if (t->let_go) {
        /* who let go and why (a serving engine's request: preempted or finished), and what
         * became of the blocks */
        const char *who = NULL, *blk = t->let_go == 1 ? "block" : "blocks";
        for (int i = 0; i < p->no && t->nfreers == 1; i++)
            if (p->o[i].id == t->freers[0])
                who = p->o[i].name;
        const char *sep = " (";
        if (who) {
            int why = why_gone(b, p->rank, t->freers[0], frame);
            ADD("%s%s%s let go of %d %s", k ? ", " : "", who, why == WHY_PREEMPTED ?
                " was preempted and" : why == WHY_FINISHED ? " finished and" : "", t->let_go,
                blk);
        } else {
            ADD("%s%s%d owners let go of %d %s", k ? ", " : "", t->nfreers > 8 ? "over " : "",
                t->nfreers > 8 ? 8 : t->nfreers, t->let_go, blk);
            int np = 0;
            for (int i = 0; i < t->nfreers && i < 8; i++) {
                if (why_gone(b, p->rank, t->freers[i], frame) != WHY_PREEMPTED)
                    continue;
                const char *name = "?";
                for (int o = 0; o < p->no; o++)
                    if (p->o[o].id == t->freers[i])
                        name = p->o[o].name;
                ADD("%s%s", np++ ? ", " : sep, name);
                sep = ", ";
            }
            if (np)
                ADD(" preempted"), sep = "; ";
        }
        if (t->held)
            ADD("%s%d still held by others", sep, t->held), sep = ", ";
        if (t->kept)
            ADD("%s%d kept cached", sep, t->kept), sep = ", ";
        if (t->freed)
            ADD("%s%d freed", sep, t->freed), sep = ", ";
        if (sep[0] != ' ')
            ADD(")");
    }
    if (t->evict) {
        ADD("%s%d evicted (block", k ? ", " : "", t->evict);
        for (int i = 0; i < t->evict && i < 4; i++)
            ADD("%s %d", i ? "," : t->evict > 1 ? "s" : "", t->evicted[i]);
        ADD("%s)", t->evict > 4 ? ", ..." : "");
    }
    if (t->cow) {
        const char *who = "?";
        for (int i = 0; i < p->no; i++)
            if (p->o[i].id == t->cow_owner)
                who = p->o[i].name;
        ADD("%scopy on write: %s's block %d copied to %d", k ? ", " : "", who, t->cow_from,
            t->cow_to);
        if (t->cow > 1)
            ADD(" (and %d more)", t->cow - 1);
    }
#undef ADD
    if (k && k < n) {
        char tmp[256];
        snprintf(tmp, sizeof tmp, "in this step: %s", out);
        snprintf(out, n, "%s", tmp);
    }
}

/* A gauge of bytes in use: "▇▇▇▇░░░ 3.8 MiB". */
static void draw_gauge(grid *g, int x, int y, int w, const bpool *p, uint64_t max, int ascii)
{
    char t[32];
    view_fmt_bytes(p->usage, t, sizeof t);
    int tw = (int)strlen(t), bw = w - tw - 1;
    if (bw > 24)
        bw = 24;
    if (bw >= 4 && max) {
        int fill = (int)((double)p->usage / (double)max * bw + 0.5);
        for (int i = 0; i < bw; i++)
            grid_put(g, x + i, y, i < fill ? (ascii ? "#" : "▇") : (ascii ? "-" : "░"),
                     i < fill ? UI_RANK_ATTR(p->rank) : GRID_DIM);
        grid_put(g, x + bw + 1, y, t, 0);
    } else {
        grid_put(g, x, y, t, 0);
    }
}

/* The selected pool's block tables from (x, y) down, at most h lines: "req 0 │ 0 1 5*". */
static int draw_tables(grid *g, int x, int y, int w, int h, const bpool *p, const look *lk)
{
    int rows = 0, nw = 4;
    for (int i = 0; i < p->no; i++) {
        int l = (int)strlen(p->o[i].name);
        if (p->o[i].ntable && l > nw)
            nw = l > 12 ? 12 : l;
    }
    int total = 0;
    for (int i = 0; i < p->no; i++)
        total += p->o[i].ntable > 0;
    int limit = total > h && h > 1 ? h - 1 : h;     /* the last line says how many more */
    for (int i = 0; i < p->no && rows < limit; i++) {
        const bowner *o = &p->o[i];
        if (!o->ntable)
            continue;
        char head[40];
        snprintf(head, sizeof head, "%c %s", owner_letter(i), o->name);
        view_put_clipped(g, x, y + rows, nw + 2, head, UI_RANK_ATTR(i) | GRID_BOLD);
        int cx = x + nw + 4;
        grid_set(g, cx - 1, y + rows, grid_line_cp(GRID_V, lk->ascii), GRID_DIM);
        for (int k = 0; k < o->ntable; k++) {
            char t[16];
            int cow = o->cow_index == k && o->changed == lk->frame;
            if (o->table[k] < 0)
                snprintf(t, sizeof t, "-");
            else
                snprintf(t, sizeof t, "%d%s", o->table[k], cow ? "*" : "");
            int tw = (int)strlen(t);
            if (cx + tw + 1 > x + w) {
                grid_put(g, cx, y + rows, lk->ascii ? ">" : "…", GRID_DIM);
                break;
            }
            int shared = o->table[k] >= 0 && o->table[k] < p->nblocks &&
                         p->b[o->table[k]].refs >= 2;
            grid_put(g, cx + 1, y + rows, t, cow ? GRID_BOLD | GRID_UNDERLINE :
                     shared ? GRID_PAIR(UI_PAIR_PARTIAL) | GRID_BOLD : 0);
            cx += tw + 1;
        }
        rows++;
    }
    if (rows < total && rows < h) {
        char t[64];
        snprintf(t, sizeof t, "+%d more table%s (a taller terminal shows them)",
                 total - rows, total - rows == 1 ? "" : "s");
        view_put_clipped(g, x, y + rows++, w, t, GRID_DIM);
    }
    return rows;
}

/* "step 3: bucket 2" for the frame shown. */
static void frame_caption(const view_ctx *ctx, char *out, size_t n)
{
    out[0] = 0;
    if (!ctx->sm)
        return;
    const sm_frame *f = sm_frame_at(ctx->sm, ctx->frame);
    if (!f || ctx->frame == 0) {
        snprintf(out, n, "before the first step");
        return;
    }
    const sm_call *c = f->call >= 0 ? sm_call_at(ctx->sm, f->call) : NULL;
    if (c)
        snprintf(out, n, "step %d: %s %s", ctx->frame, mlsys_coll_name((mlsys_coll)c->coll),
                 f->label);
    else
        snprintf(out, n, "step %d: %s", ctx->frame, f->label);
}

static void blocks_draw(void *data, grid *g, int x, int y, int w, int h, const view_ctx *ctx)
{
    blocks *b = data;
    look lk = {ctx->ascii || g->ascii, ctx->frame, 3, b->scale};
    grid_clip(g, x, y, w, h);
    char line[256], cap[128];
    frame_caption(ctx, cap, sizeof cap);
    snprintf(line, sizeof line, "blocks%s%s", cap[0] ? ": " : "", cap);
    view_put_clipped(g, x, y, w, line, GRID_BOLD);
    if (!b->np) {
        view_put_clipped(g, x + 2, y + 2, w - 2, "no memory to show yet", GRID_DIM);
        view_put_clipped(g, x + 2, y + 3, w - 2, "This view draws memory as blocks once the "
                         "lab describes it: chapter 5's gradient buckets and ZeRO shards, "
                         "chapter 9's KV cache.", GRID_DIM);
        grid_unclip(g);
        return;
    }
    if (b->sel_pool >= b->np)
        b->sel_pool = b->np - 1;
    const bpool *sp = &b->p[b->sel_pool];
    if (b->sel_block >= sp->nblocks)
        b->sel_block = sp->nblocks > 0 ? sp->nblocks - 1 : 0;
    /* the legend: only what this picture has */
    int max_refs = 0, any_big = 0, any_val = 0, any_shared = 0, any_cached = 0, any_free = 0, any_busy = 0, any_tables = 0;
    for (int i = 0; i < b->np; i++) {
        const bpool *p = &b->p[i];
        any_tables |= p->tables;
        for (int k = 0; k < p->nblocks; k++) {
            const bblock *bk = &p->b[k];
            any_val |= bk->has_val && bk->state == B_USED;
            any_shared |= bk->refs >= 2 && bk->state == B_USED;
            any_big |= bk->refs > 9 && bk->state == B_USED;
            if (bk->state == B_USED && bk->refs > max_refs)
                max_refs = bk->refs;
            any_cached |= bk->state == B_CACHED;
            any_free |= bk->state == B_FREE;
            any_busy |= bk->busy;
        }
    }
    size_t used = 0;
    line[0] = 0;
    const char *sep = ", ";
#define LEG(...) (used += (size_t)snprintf(line + used, used < sizeof line ? sizeof line - used : 0, __VA_ARGS__))
    LEG("%s", any_val ? "shade: value" : "letter: owner");
    if (any_val) {
        char mx[32];
        view_fmt_value(b->scale, mx, sizeof mx);
        LEG(lk.ascii ? " (|v| up to %s: 0 :+*# and ;-=%%)" : " (|v| up to %s, √ scale: 0 ░▒▓█, "
            "−: negative)", mx);
    }
    if (any_shared)
        LEG("%s%d: shared by %d", sep, any_big ? max_refs : 2, any_big ? max_refs : 2);
    if (any_cached)
        LEG("%s%s cached", sep, lk.ascii ? "o" : "○");
    if (any_free)
        LEG("%s%s free", sep, lk.ascii ? "." : "·");
    if (any_busy)
        LEG("%sreversed: in flight", sep);
    LEG("%sunderlined: changed in this step", sep);
#undef LEG
    view_put_clipped(g, x, y + 1, w, line, GRID_DIM);
    /* the block tables go beside the map when there is room, else under it */
    int side = any_tables && sp->tables && w >= 100 ? 34 : 0;
    int mw = w - (side ? side + 2 : 0);
    int lw = 4;
    for (int i = 0; i < b->np; i++) {
        pool_label(b, &b->p[i], line, sizeof line);
        int l = (int)strlen(line);
        if (l > lw)
            lw = l > 16 ? 16 : l;
    }
    int avail = mw - lw - 1, maxn = 1;
    for (int i = 0; i < b->np; i++)
        if (b->p[i].nblocks > maxn)
            maxn = b->p[i].nblocks;
    /* one row per pool when the largest fits in two columns a block, else rows of blocks
     * under a title line per pool */
    int compact = avail / maxn >= 2 || (maxn <= avail && avail / maxn >= 1);
    lk.cw = compact ? (avail / maxn >= 4 ? 4 : avail / maxn >= 3 ? 3 : avail / maxn) : 2;
    if (compact && lk.cw < 3 && any_big) {   /* two-digit counts: rows of blocks instead */
        compact = 0;
        lk.cw = 2;
    }
    int per_row = compact ? maxn : (mw - 2) / lk.cw;
    if (per_row < 1)
        per_row = 1;
    int sel_y = y + h - 1;              /* the selected block's line */
    /* above it, for a cache of tokens (a KV cache), what happened in this step */
    int bottom = sp->tables && sp->tokens > 0 && h >= 8 ? sel_y - 1 : sel_y;
    int below_tables = any_tables && sp->tables && !side;
    if (!compact && (mw - 2) / 3 >= 1) {
        /* three columns a block (two-digit reference counts) when the rows still fit */
        int per3 = (mw - 2) / 3, need = 0;
        for (int i = 0; i < b->np; i++)
            need += 1 + (b->p[i].nblocks + per3 - 1) / per3;
        if (y + 3 + need <= bottom - (below_tables ? 3 : 0)) {
            lk.cw = 3;
            per_row = per3;
        }
    }
    int cy = y + 3;
    if (b->top > b->sel_pool)
        b->top = b->sel_pool;
    uint64_t gmax = 0;
    for (int i = 0; i < b->np; i++)
        if (b->p[i].usage_max > gmax)
            gmax = b->p[i].usage_max;
    for (int pass = 0; pass < 2; pass++) {
        /* pass 0 finds the first pool so that the selected one is on screen */
        cy = y + 3;
        int last_shown = -1;
        for (int i = b->top; i < b->np; i++) {
            const bpool *p = &b->p[i];
            int rows = p->nblocks ? (compact ? 1 : 1 + (p->nblocks + per_row - 1) / per_row) : 1;
            if (cy + rows > bottom - (below_tables ? 3 : 0))
                break;
            last_shown = i;
            if (pass == 1) {
                char lab[64];
                pool_label(b, p, lab, sizeof lab);
                grid_attr la = UI_RANK_ATTR(p->rank) | (i == b->sel_pool ? GRID_BOLD : 0);
                if (!p->nblocks) {              /* a gauge only */
                    view_put_clipped(g, x, cy, lw, lab, la);
                    draw_gauge(g, x + lw + 1, cy, mw - lw - 1, p, gmax, lk.ascii);
                } else if (compact) {
                    view_put_clipped(g, x, cy, lw, lab, la);
                    for (int k = 0; k < p->nblocks; k++)
                        draw_block(g, x + lw + 1 + k * lk.cw, cy, p, k, &lk,
                                   i == b->sel_pool && k == b->sel_block);
                } else {
                    pool_summary(b, p, line, sizeof line);
                    view_put_clipped(g, x, cy, mw, line, la);
                    for (int k = 0; k < p->nblocks; k++)
                        draw_block(g, x + 2 + (k % per_row) * lk.cw, cy + 1 + k / per_row, p,
                                   k, &lk, i == b->sel_pool && k == b->sel_block);
                }
                if (p->has_usage && p->nblocks && compact) {
                    char t[32];
                    view_fmt_bytes(p->usage, t, sizeof t);
                    int bx = x + lw + 1 + p->nblocks * lk.cw + 1;
                    if (bx + (int)strlen(t) <= x + mw)
                        grid_put(g, bx, cy, t, GRID_DIM);
                }
            }
            cy += rows;
        }
        if (pass == 0 && last_shown >= 0 && b->sel_pool > last_shown) {
            b->top += b->sel_pool - last_shown;
            if (b->top >= b->np)
                b->top = b->np - 1;
        }
        if (pass == 1 && (b->top > 0 || last_shown + 1 < b->np) && cy < bottom)
            grid_printf(g, x, cy, GRID_PAIR(UI_PAIR_WARN), "pools %d-%d of %d (j/k)",
                        b->top + 1, last_shown + 1, b->np);
    }
    /* the selected pool in numbers (the map's own title line says it when not compact) */
    if (compact && sp->nblocks && cy + 1 < bottom) {
        pool_summary(b, sp, line, sizeof line);
        view_put_clipped(g, x, ++cy, mw, line, GRID_DIM);
        cy++;
    }
    /* the selected pool's owners, their letters, and its block tables */
    if (sp->tables) {
        char lab[64];
        pool_label(b, sp, lab, sizeof lab);
        snprintf(line, sizeof line, "block tables of %s", lab);
        if (side) {
            int sx = x + w - side;
            grid_vline(g, sx - 1, y + 2, bottom - y - 2, GRID_PAIR(UI_PAIR_DIM));
            view_put_clipped(g, sx + 1, y + 2, side - 1, line, GRID_BOLD);
            draw_tables(g, sx + 1, y + 3, side - 1, bottom - y - 3, sp, &lk);
        } else if (cy + 1 < bottom) {
            view_put_clipped(g, x, cy + 1, w, line, GRID_BOLD);
            draw_tables(g, x, cy + 2, w, bottom - cy - 2, sp, &lk);
        }
    } else if (sp->no && !any_val && cy + 1 < bottom) {
        /* owners without tables: their letters */
        int cx = x;
        for (int i = 0; i < sp->no && cx < x + w - 4; i++) {
            char t[48];
            snprintf(t, sizeof t, "%c %s", owner_letter(i), sp->o[i].name);
            grid_put(g, cx, cy + 1, t, UI_RANK_ATTR(i));
            cx += (int)strlen(t) + 2;
        }
    }
    /* the selected block */
    if (sp->nblocks) {
        const bblock *bk = &sp->b[b->sel_block];
        char lab[96], who[96] = "", v[32] = "";
        pool_label(b, sp, lab, sizeof lab);
        if (sp->block_bytes) {      /* "kv cache, block 3 (40 KiB): ..." */
            char one[24];
            view_fmt_bytes(sp->block_bytes, one, sizeof one);
            size_t l = strlen(lab);
            snprintf(lab + l, sizeof lab - l, ", block %d (%s)", b->sel_block, one);
        } else {
            size_t l = strlen(lab);
            snprintf(lab + l, sizeof lab - l, ", block %d", b->sel_block);
        }
        size_t wu = 0;
        /* every owner by name up to four; more: three by name and how many others */
        int names = bk->refs > 4 && bk->nown > 3 ? 3 : bk->nown;
        for (int i = 0; i < names && wu < sizeof who; i++)
            wu += (size_t)snprintf(who + wu, sizeof who - wu, "%s%s", i ? ", " : "",
                                   sp->o[bk->own[i]].name);
        if (bk->refs > names && names && wu < sizeof who)
            snprintf(who + wu, sizeof who - wu, " and %d more", bk->refs - names);
        if (bk->has_val) {
            char t[24];
            view_fmt_value(bk->val, t, sizeof t);
            snprintf(v, sizeof v, ", value %s", t);
        }
        static const char *const st[] = {"free", "used", "cached"};
        if (bk->state == B_USED)
            snprintf(line, sizeof line, "%s: %s by %s%s%s%s", lab,
                     bk->refs >= 2 ? "shared" : "held", who[0] ? who : "?", v,
                     bk->busy ? ", in flight" : "", bk->evicted == lk.frame && lk.frame >= 0 ?
                     " (evicted from the cache in this step and given to it)" : "");
        else
            snprintf(line, sizeof line, "%s: %s%s%s", lab, st[bk->state % 3], v,
                     bk->state == B_CACHED ? " (nobody holds it; its "
                     "contents stay for a prefix hit until it is evicted)" :
                     bk->evicted == lk.frame && lk.frame >= 0 ? " (evicted from the cache in "
                     "this step)" : "");
        if (bk->refs >= 2) {
            size_t l = strlen(line);
            snprintf(line + l, sizeof line - l, " (%d references)", bk->refs);
        }
        view_put_clipped(g, x, sel_y, w, line, 0);
        if (bottom < sel_y) {
            step_text(b, sp, lk.frame, line, sizeof line);
            grid_attr sa = sp->st.evict || sp->st.cow ?
                           GRID_PAIR(UI_PAIR_WARN) | GRID_BOLD : GRID_DIM;
            int lw = grid_text_width(line, strlen(line)), cut = (int)strlen(line);
            if (lw > w && row_blank(g, x, bottom - 1, w)) {
                /* too long for one line: its first part on the blank line above */
                cut = w < cut ? w : cut;
                while (cut > 0 && line[cut] != ' ')
                    cut--;
            }
            if (lw > w && cut > 0 && cut < (int)strlen(line)) {
                grid_putn(g, x, bottom - 1, line, (size_t)cut, sa);
                view_put_clipped(g, x + 2, bottom, w - 2, line + cut + 1, sa);
            } else {
                view_put_clipped(g, x, bottom, w, line, sa);
            }
        }
    } else if (sp->has_usage) {
        char lab[64], t[32];
        pool_label(b, sp, lab, sizeof lab);
        view_fmt_bytes(sp->usage, t, sizeof t);
        snprintf(line, sizeof line, "%s: %s in use", lab, t);
        view_put_clipped(g, x, sel_y, w, line, 0);
    }
    grid_unclip(g);
}

/* h/l move along the selected pool's blocks, j/k between pools (the arrows belong to the
 * player: they step through the run). */
static int blocks_key(void *data, int key)
{
    blocks *b = data;
    if (!b->np)
        return 0;
    const bpool *p = &b->p[b->sel_pool < b->np ? b->sel_pool : 0];
    switch (key) {
    case 'h':
        if (b->sel_block > 0)
            b->sel_block--;
        return UI_HANDLED | UI_REDRAW;
    case 'l':
        if (b->sel_block + 1 < p->nblocks)
            b->sel_block++;
        return UI_HANDLED | UI_REDRAW;
    case 'k':
        if (b->sel_pool > 0)
            b->sel_pool--;
        return UI_HANDLED | UI_REDRAW;
    case 'j':
        if (b->sel_pool + 1 < b->np)
            b->sel_pool++;
        return UI_HANDLED | UI_REDRAW;
    default:
        return 0;
    }
}

static const ui_key_help blocks_keys[] = {
    {"h/l", "block"}, {"j/k", "pool"}, {NULL, NULL}
};

static const char *const *blocks_notes(int ascii)
{
    static const char *const utf8[] = {
        "A block is lettered and coloured by its owner (a sequence, a bucket, a tensor); a number "
        "is a block shared by that many owners (in its first owners' colours); ○ cached (free, "
        "contents kept), · free, x evicted in this step, * in a block table: copied on write in "
        "this step.",
        "Blocks with a value are shaded by it on one scale for the whole run. Step back (b) to "
        "see a block before it changed.", NULL
    };
    static const char *const plain[] = {
        "A block is lettered and coloured by its owner (a sequence, a bucket, a tensor); a number "
        "is a block shared by that many owners; o cached (free, contents kept), . free, x evicted "
        "in this step, * in a block table: copied on write in this step.",
        "Blocks with a value are shaded by it on one scale for the whole run. Step back (b) to "
        "see a block before it changed.", NULL
    };
    return ascii ? plain : utf8;
}

const view_class view_blocks_class = {
    .name = "blocks",
    .title = "blocks",
    .help = "memory as blocks: who holds each block, shared blocks with their reference count, "
            "free and cached ones, each owner's block table",
    .keys = blocks_keys,
    .notes = blocks_notes,
    .create = blocks_create,
    .free = blocks_free,
    .reset = blocks_reset,
    .rewind = blocks_rewind,
    .wants = blocks_wants,
    .event = blocks_event,
    .draw = blocks_draw,
    .key = blocks_key,
};
