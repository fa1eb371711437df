/* ring.c - the ring/graph view: ranks on a circle (a grid when N > 8), each rank's buffer as
 * cells coloured by whose contributions they hold, the packets of the current step moving
 * along the edges, the step every rank is at, bytes per link, and the algorithm that ran
 * with the rule that chose it.
 *
 * Where the cells come from. Events say who sent how many bytes to whom and when (SEND_BEGIN
 * pairs with RECV_END by msg_id), not which elements; the view places a message by, in order:
 * (1) the element offset in ev->chunk when the transport fills it; (2) the known chunk
 * schedule of the ring algorithms (all_reduce, all_gather and reduce_scatter "ring": the
 * chunk index follows from the receiver's step, see core/coll/), checked against the bytes;
 * (3) the whole buffer when the message is exactly the buffer's size (recursive doubling,
 * tree, direct). A message it cannot place only marks the rank's box with "≈" and the
 * ranks whose data reached it. The values under the cells are real: what the rank printed
 * ("Rank r: [..]"), what it emitted (MARK "values") or, in gated mode, what the shell read
 * from its memory at the gate (core/trace_values.h). */
#include "view.h"
#include "../../../core/trace_values.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RING_CELLS 64          /* model cells per rank buffer */
#define RING_VALS 64           /* values kept per rank */
#define RING_MSGS 1024         /* messages in flight that the view remembers (power of two) */
#define RING_PACKETS 256       /* packets drawn in one phase */
#define RING_HISTORY 6

enum { SRC_NONE, SRC_PRINTED, SRC_EVENT, SRC_LIVE };

typedef struct ring_rank {
    uint64_t len;               /* elements in the buffer the cells show */
    int m;                      /* model cells (<= RING_CELLS); cell j covers cell_range() */
    uint64_t mask[RING_CELLS];  /* bit s: holds rank s's contribution */
    uint64_t reached;           /* ranks whose data reached it through unplaced messages */
    int approx;                 /* some message could not be placed */
    int coll;                   /* collective in progress, -1 */
    int last_coll;              /* the cells belong to this collective */
    int esize;
    char algo[24];
    int step;
    char step_label[32];
    int lab_step;
    char lab_label[32];
    double val[RING_VALS];
    int nval, val_total, val_src;
    int event_values;           /* values came as events: printed lines no longer count */
    uint64_t sent, recvd;
} ring_rank;

typedef struct ring_msg {
    uint64_t id;                /* 0 = free slot */
    int src, dst;
    uint64_t bytes;
    int coll;
    int m;
    uint64_t len;
    int32_t chunk;              /* sender's element offset, -1 unknown */
    int pk;                     /* its packet in pending[] (valid while pk_gen == phase) */
    int pk_gen;
    uint64_t snap[RING_CELLS];  /* sender's masks when it sent */
} ring_msg;

typedef struct ring_packet {
    uint64_t id;
    int src, dst;
    uint64_t bytes;
    int arrived;
    int in_coll;
} ring_packet;

typedef struct ring_hist {
    int coll;
    char algo[24];
    uint64_t bytes;
} ring_hist;

typedef struct ring {
    int n;
    ring_rank *rk;
    uint64_t *links;            /* [n * n] bytes, row sends to column */
    uint64_t msgs, bytes, events;
    ring_msg *inflight;         /* [RING_MSGS] open addressing on msg_id */
    int ninflight;
    ring_packet pk[RING_PACKETS];
    int npk, pk_more;
    ring_packet pending[RING_PACKETS];   /* since the last phase() */
    int npending, pending_more;
    int phase;
    /* the collective the header describes (the last one to begin) */
    int coll, algo_idx, dtype, op, root;
    uint64_t coll_bytes;
    char algo[24];
    ring_hist hist[RING_HISTORY];
    int nhist;
    uint64_t lines;
} ring;

static ring_rank *rank_of(ring *v, int r);

/* ---- model cells ---- */

static int popcount64(uint64_t x)
{
    return __builtin_popcountll(x);
}

static uint64_t all_mask(int n)
{
    return n >= 64 ? ~0ull : (1ull << n) - 1;
}

/* Chunk k of n over total elements, the first total % n chunks one longer (as coll_chunk). */
static void chunk_of(uint64_t total, int n, int k, uint64_t *off, uint64_t *len)
{
    uint64_t base = total / (uint64_t)n, extra = total % (uint64_t)n, kk = (uint64_t)k;
    *off = kk * base + (kk < extra ? kk : extra);
    *len = base + (kk < extra ? 1 : 0);
}

/* Cells of a buffer of len elements on n ranks: one per element up to RING_CELLS, else
 * n chunks (the ring algorithms' unit) each cut into equal sub-cells. */
static int cells_for(uint64_t len, int n)
{
    if (len <= RING_CELLS)
        return (int)len;
    int per = RING_CELLS / (n > 0 ? n : 1);
    return per >= 1 ? per * n : RING_CELLS;
}

static void cell_range(uint64_t len, int n, int m, int j, uint64_t *off, uint64_t *cnt)
{
    if ((uint64_t)m == len) {
        *off = (uint64_t)j;
        *cnt = 1;
        return;
    }
    if (m % n == 0 && m >= n) {
        int per = m / n;
        uint64_t co, cl, so, sl;
        chunk_of(len, n, j / per, &co, &cl);
        chunk_of(cl, per, j % per, &so, &sl);
        *off = co + so;
        *cnt = sl;
        return;
    }
    chunk_of(len, m, j, off, cnt);
}

static int is_reduction(int coll)
{
    return coll == MLSYS_COLL_REDUCE || coll == MLSYS_COLL_ALLREDUCE ||
           coll == MLSYS_COLL_REDUCE_SCATTER;
}

/* What a rank's buffer holds when a collective begins: see the file comment. */
static void cells_begin(ring *v, int r, const mlsys_event *e)
{
    ring_rank *k = rank_of(v, r);
    int n = v->n, coll = e->coll;
    int es = e->dtype >= 0 && e->dtype < MLSYS_DTYPE_COUNT ? (int)mlsys_dtype_size(e->dtype) : 4;
    uint64_t count = e->bytes / (uint64_t)es;
    int root = e->peer >= 0 && e->peer < n ? e->peer : 0;
    uint64_t len;
    switch (coll) {
    case MLSYS_COLL_ALLGATHER: case MLSYS_COLL_REDUCE_SCATTER: case MLSYS_COLL_ALLTOALL:
        len = count * (uint64_t)n;
        break;
    case MLSYS_COLL_GATHER: case MLSYS_COLL_SCATTER:
        len = r == root ? count * (uint64_t)n : count;
        break;
    case MLSYS_COLL_BARRIER:
        len = 0;
        break;
    default:
        len = count;
    }
    if (coll == MLSYS_COLL_BARRIER) {
        /* no buffer: the cells keep showing the last collective that moved data */
        k->coll = coll;
        k->step = -1;
        k->step_label[0] = 0;
        return;
    }
    k->len = len;
    k->esize = es;
    k->m = cells_for(len, n);
    k->approx = 0;
    k->reached = 0;
    k->coll = coll;
    k->last_coll = coll;
    snprintf(k->algo, sizeof k->algo, "%.23s", e->label);
    k->step = -1;
    k->step_label[0] = 0;
    for (int j = 0; j < k->m; j++) {
        uint64_t off, cnt, blk = 0;
        cell_range(len, n, k->m, j, &off, &cnt);
        if (count)
            blk = off / count;       /* block of a blocked buffer */
        uint64_t m = 0;
        switch (coll) {
        case MLSYS_COLL_BROADCAST: m = r == root ? 1ull << root : 0; break;
        case MLSYS_COLL_ALLGATHER: m = blk == (uint64_t)r ? 1ull << r : 0; break;
        case MLSYS_COLL_GATHER:
            m = r != root ? 1ull << r : (blk == (uint64_t)root ? 1ull << root : 0);
            break;
        case MLSYS_COLL_SCATTER: m = r == root ? 1ull << root : 0; break;
        default: m = 1ull << (r & 63);
        }
        k->mask[j] = m;
    }
}

/* Combine src's masks for the element range [soff, soff+cnt) into dst's [doff, ...). */
static void cells_apply(ring *v, ring_rank *d, const ring_msg *msg, uint64_t soff, uint64_t doff,
                        uint64_t cnt, int reduce)
{
    for (int j = 0; j < d->m; j++) {
        uint64_t off, c;
        cell_range(d->len, v->n, d->m, j, &off, &c);
        if (off < doff || off + c > doff + cnt)
            continue;
        /* the sender's cell that holds the same element */
        uint64_t se = off - doff + soff, sm = 0;
        for (int i = 0; i < msg->m; i++) {
            uint64_t o2, c2;
            cell_range(msg->len, v->n, msg->m, i, &o2, &c2);
            if (se >= o2 && se < o2 + c2) {
                sm = msg->snap[i];
                break;
            }
        }
        d->mask[j] = reduce ? d->mask[j] | sm : sm;
    }
}

static int mod(int a, int n) { return (a % n + n) % n; }

/* The chunk a ring algorithm's receiver gets at its current step, -1 when not a ring. */
static int ring_chunk(const ring_rank *d, int r, int n)
{
    if (strcmp(d->algo, "ring") || d->step < 0)
        return -1;
    switch (d->coll) {
    case MLSYS_COLL_ALLREDUCE:
        return d->step < n - 1 ? mod(r - d->step - 1, n) : mod(r - (d->step - (n - 1)), n);
    case MLSYS_COLL_ALLGATHER:
        return mod(r - d->step - 1, n);
    case MLSYS_COLL_REDUCE_SCATTER:
        return mod(r - d->step - 2, n);
    default:
        return -1;
    }
}

static void place(ring *v, int r, const ring_msg *msg, const mlsys_event *e)
{
    ring_rank *d = rank_of(v, r);
    if (d->coll < 0 || d->coll == MLSYS_COLL_BARRIER || msg->coll != d->coll || !d->m || !msg->m)
        return;                  /* a barrier's messages carry no data */
    int reduce = is_reduction(d->coll);
    uint64_t cnt = msg->bytes / (uint64_t)(d->esize > 0 ? d->esize : 1);
    if (e->chunk >= 0 && msg->chunk >= 0) {                 /* (1) the transport says */
        cells_apply(v, d, msg, (uint64_t)msg->chunk, (uint64_t)e->chunk, cnt, reduce);
        return;
    }
    int k = ring_chunk(d, r, v->n);                          /* (2) the ring schedule */
    if (k >= 0) {
        uint64_t off, len;
        chunk_of(d->len, v->n, k, &off, &len);
        if (len == cnt && msg->len == d->len) {
            cells_apply(v, d, msg, off, off, cnt, reduce);
            return;
        }
    }
    if (cnt == d->len && msg->len == d->len) {               /* (3) the whole buffer */
        cells_apply(v, d, msg, 0, 0, cnt, reduce);
        return;
    }
    uint64_t u = 0;
    for (int i = 0; i < msg->m; i++)
        u |= msg->snap[i];
    d->reached |= u;
    d->approx = 1;
}

/* ---- messages in flight ---- */

static ring_msg *msg_slot(ring *v, uint64_t id, int create)
{
    uint64_t h = (id * 0x9e3779b97f4a7c15ull) >> 54;    /* 10 bits: RING_MSGS */
    for (int i = 0; i < RING_MSGS; i++) {
        ring_msg *m = &v->inflight[(h + (uint64_t)i) & (RING_MSGS - 1)];
        if (m->id == id)
            return m;
        if (m->id == 0)
            return create ? m : NULL;
    }
    return NULL;
}

/* Backward-shift deletion keeps the probe chains of linear probing intact. */
static void msg_remove(ring *v, ring_msg *m)
{
    size_t i = (size_t)(m - v->inflight);
    for (;;) {
        v->inflight[i].id = 0;
        size_t j = i;
        for (;;) {
            j = (j + 1) & (RING_MSGS - 1);
            if (v->inflight[j].id == 0)
                return;
            size_t home = (size_t)((v->inflight[j].id * 0x9e3779b97f4a7c15ull) >> 54);
            /* move j back to i unless its home lies cyclically in (i, j] */
            int between = i <= j ? (home > i && home <= j) : (home > i || home <= j);
            if (!between)
                break;
        }
        v->inflight[i] = v->inflight[j];
        i = j;
    }
}

/* A packet of the phase being collected; returns its index, -1 when the phase is full. */
static int pending_add(ring *v, const ring_packet *p)
{
    if (v->npending < RING_PACKETS) {
        v->pending[v->npending] = *p;
        return v->npending++;
    }
    v->pending_more++;
    return -1;
}

/* ---- the class ---- */

static ring_rank *rank_of(ring *v, int r)
{
    return &v->rk[r];
}

static void ring_reset(void *data, int nranks)
{
    ring *v = data;
    free(v->rk);
    free(v->links);
    memset(v->inflight, 0, RING_MSGS * sizeof *v->inflight);
    ring_msg *keep = v->inflight;
    memset(v, 0, sizeof *v);
    v->inflight = keep;
    v->n = nranks > 0 ? (nranks > 64 ? 64 : nranks) : 0;
    v->rk = calloc((size_t)(v->n ? v->n : 1), sizeof *v->rk);
    v->links = calloc((size_t)(v->n ? v->n * v->n : 1), sizeof *v->links);
    if (!v->rk || !v->links)
        abort();
    for (int r = 0; r < v->n; r++) {
        v->rk[r].coll = v->rk[r].last_coll = -1;
        v->rk[r].step = v->rk[r].lab_step = -1;
    }
    v->coll = -1;
    v->algo_idx = -1;
}

static void *ring_create(void)
{
    ring *v = calloc(1, sizeof *v);
    if (!v)
        abort();
    v->inflight = calloc(RING_MSGS, sizeof *v->inflight);
    if (!v->inflight)
        abort();
    ring_reset(v, 0);
    return v;
}

static void ring_free(void *data)
{
    ring *v = data;
    if (!v)
        return;
    free(v->rk);
    free(v->links);
    free(v->inflight);
    free(v);
}

/* Grow to a rank seen in an event (a replay learns N as it goes). */
static void ensure_ranks(ring *v, int r)
{
    if (r < v->n || r >= 64)
        return;
    int n = r + 1;
    ring_rank *rk = calloc((size_t)n, sizeof *rk);
    uint64_t *links = calloc((size_t)n * (size_t)n, sizeof *links);
    if (!rk || !links)
        abort();
    for (int i = 0; i < n; i++) {
        if (i < v->n) {
            rk[i] = v->rk[i];
        } else {
            rk[i].coll = rk[i].last_coll = -1;
            rk[i].step = rk[i].lab_step = -1;
        }
    }
    for (int a = 0; a < v->n; a++)
        for (int b = 0; b < v->n; b++)
            links[a * n + b] = v->links[a * v->n + b];
    free(v->rk);
    free(v->links);
    v->rk = rk;
    v->links = links;
    v->n = n;
}

static void set_values(ring_rank *k, const mlsys_event *e)
{
    int total = (int)(e->bytes > RING_VALS ? RING_VALS : e->bytes);
    k->event_values = 1;
    if (e->chunk <= 0) {
        k->nval = 0;
        k->val_total = (int)(e->bytes > 1u << 30 ? 1u << 30 : e->bytes);
        k->val_src = e->span_id == 1 ? SRC_LIVE : SRC_EVENT;
    }
    for (int j = 0; j < e->tag && j < 4; j++) {
        int i = e->chunk + j;
        if (i >= 0 && i < total) {
            k->val[i] = e->val[j];
            if (i + 1 > k->nval)
                k->nval = i + 1;
        }
    }
}

static void ring_event(void *data, const mlsys_event *e)
{
    ring *v = data;
    if (e->rank < 0 || e->rank >= 64)
        return;
    ensure_ranks(v, e->rank);
    if (e->peer >= 0 && e->peer < 64 && e->kind != MLSYS_EV_COLL_BEGIN)
        ensure_ranks(v, e->peer);
    v->events++;
    ring_rank *k = rank_of(v, e->rank);
    switch (e->kind) {
    case MLSYS_EV_COLL_BEGIN:
        if (e->coll < 0 || e->coll >= MLSYS_COLL_COUNT)
            break;
        cells_begin(v, e->rank, e);
        if (e->rank == 0 || v->coll < 0 || e->coll != v->coll) {
            v->coll = e->coll;
            v->algo_idx = e->algo;
            v->dtype = e->dtype;
            v->op = e->op;
            v->root = e->peer;
            v->coll_bytes = e->bytes;
            snprintf(v->algo, sizeof v->algo, "%.23s", e->label);
        }
        break;
    case MLSYS_EV_COLL_END:
        k->coll = -1;
        if (e->rank == 0 && e->coll >= 0) {
            if (v->nhist == RING_HISTORY) {
                memmove(v->hist, v->hist + 1, (RING_HISTORY - 1) * sizeof v->hist[0]);
                v->nhist--;
            }
            ring_hist *h = &v->hist[v->nhist++];
            h->coll = e->coll;
            h->bytes = e->bytes;
            snprintf(h->algo, sizeof h->algo, "%.23s", e->label);
        }
        break;
    case MLSYS_EV_STEP:
        if (e->coll >= 0 && k->coll >= 0) {
            k->step = e->step;
            snprintf(k->step_label, sizeof k->step_label, "%s", e->label);
        } else {
            k->lab_step = e->step;
            snprintf(k->lab_label, sizeof k->lab_label, "%s", e->label);
        }
        break;
    case MLSYS_EV_SEND_BEGIN: {
        if (e->peer < 0 || e->peer >= v->n)
            break;
        v->links[e->rank * v->n + e->peer] += e->bytes;
        v->msgs++;
        v->bytes += e->bytes;
        k->sent += e->bytes;
        ring_packet p = {e->msg_id, e->rank, e->peer, e->bytes, 0, e->coll >= 0};
        int pi = pending_add(v, &p);
        if (!e->msg_id)
            break;
        ring_msg *m = msg_slot(v, e->msg_id, 1);
        if (!m)
            break;             /* more than RING_MSGS in flight: it will be unplaced */
        m->pk = pi;
        m->pk_gen = v->phase;
        if (m->id == 0)
            v->ninflight++;
        m->id = e->msg_id;
        m->src = e->rank;
        m->dst = e->peer;
        m->bytes = e->bytes;
        m->coll = k->coll >= 0 && e->coll >= 0 ? k->coll : -1;
        m->chunk = e->chunk;
        m->m = m->coll >= 0 ? k->m : 0;
        m->len = k->len;
        memcpy(m->snap, k->mask, (size_t)m->m * sizeof m->snap[0]);
        break;
    }
    case MLSYS_EV_RECV_END: {
        if (e->peer < 0 || e->peer >= v->n)
            break;
        k->recvd += e->bytes;
        ring_msg *m = e->msg_id ? msg_slot(v, e->msg_id, 0) : NULL;
        if (m && m->pk >= 0 && m->pk_gen == v->phase && m->pk < v->npending) {
            v->pending[m->pk].arrived = 1;       /* sent and received in this phase */
        } else {
            ring_packet p = {e->msg_id, e->peer, e->rank, e->bytes, 1, e->coll >= 0};
            pending_add(v, &p);
        }
        if (m) {
            place(v, e->rank, m, e);
            msg_remove(v, m);
            v->ninflight--;
        } else if (k->coll >= 0 && k->coll != MLSYS_COLL_BARRIER && e->coll >= 0) {
            k->reached |= 1ull << e->peer;
            k->approx = 1;
        }
        break;
    }
    case MLSYS_EV_MARK:
        if (!strcmp(e->label, MLSYS_MARK_VALUES))
            set_values(k, e);
        break;
    default:
        break;
    }
}

static void ring_line(void *data, int rank, int is_err, const char *text)
{
    ring *v = data;
    (void)rank;
    (void)is_err;
    v->lines++;
    double vals[RING_VALS];
    int r, n = view_parse_rank_values(text, &r, vals, RING_VALS);
    if (n < 0 || r < 0 || r >= 64)
        return;
    ensure_ranks(v, r);
    ring_rank *k = rank_of(v, r);
    /* a line's time is when the runner read it, a little after it was written; values that
     * came as events are exact, so once a rank sends them its printed lines step aside */
    if (k->event_values)
        return;
    memcpy(k->val, vals, (size_t)n * sizeof vals[0]);
    k->nval = n;
    k->val_total = n;
    k->val_src = SRC_PRINTED;
}

static void ring_phase(void *data)
{
    ring *v = data;
    /* packets still in flight stay on screen; arrived ones of the old phase go */
    memcpy(v->pk, v->pending, (size_t)v->npending * sizeof v->pk[0]);
    v->npk = v->npending;
    v->pk_more = v->pending_more;
    v->npending = 0;
    v->pending_more = 0;
    v->phase++;
    /* a packet still in flight moves again in the next phase, until it arrives */
    for (int i = 0; i < v->npk; i++) {
        ring_msg *m = !v->pk[i].arrived && v->pk[i].id ? msg_slot(v, v->pk[i].id, 0) : NULL;
        if (m) {
            m->pk = pending_add(v, &v->pk[i]);
            m->pk_gen = v->phase;
        }
    }
}

/* ---- drawing ---- */

typedef struct box { int x, y, w, h; } box;

static int overlap(const box *a, const box *b)
{
    return a->x < b->x + b->w && b->x < a->x + a->w && a->y < b->y + b->h && b->y < a->y + a->h;
}

/* Boxes for n ranks in the area: a circle up to 8 ranks, else a grid. Returns the height
 * of each box actually used (5 full, 4 without the step line, 2 bare), 0 if nothing fits. */
static int layout(int n, int ax, int ay, int aw, int ah, box *b, int *shown)
{
    *shown = n;
    if (n <= 8 && n > 0) {
        for (int bh = 5; bh >= 4; bh--) {
            for (int bw = n <= 2 ? 34 : n <= 4 ? 30 : 24; bw >= 16; bw -= 2) {
                double cx = ax + aw / 2.0, cy = ay + ah / 2.0;
                double rx = (aw - bw) / 2.0, ry = (ah - bh) / 2.0;
                if (rx < 0 || ry < 0)
                    continue;
                if (n == 2)
                    ry = 0;            /* side by side reads better than top and bottom */
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
            int gap = bh == 2 ? 0 : 0;
            if (rows * (bh + gap) > ah)
                continue;
            int xpad = (aw - cols * (bw + 1) + 1) / 2;
            for (int i = 0; i < n; i++) {
                b[i].w = bw;
                b[i].h = bh;
                b[i].x = ax + xpad + (i % cols) * (bw + 1);
                b[i].y = ay + (i / cols) * (bh + gap);
            }
            return bh;
        }
    }
    /* not even bare boxes fit: show as many as there is room for */
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

static void mask_text(uint64_t m, int n, int cw, char *out, size_t len, int ascii)
{
    int pc = popcount64(m);
    if (m == 0) {
        snprintf(out, len, "%s", ascii ? "." : "·");
    } else if (m == all_mask(n) && n > 1) {
        snprintf(out, len, "all");
    } else if (pc == 1) {
        snprintf(out, len, "%d", __builtin_ctzll(m));
    } else {
        int a = __builtin_ctzll(m), b = 63 - __builtin_clzll(m);
        char t[24];
        snprintf(t, sizeof t, "%d+%d", a, b);
        int run = (m >> a) == (pc >= 64 ? ~0ull : (1ull << pc) - 1);   /* ranks a..b */
        char rr[24];
        snprintf(rr, sizeof rr, "%d-%d", a, b);
        if (pc == 2 && (int)strlen(t) <= cw)
            snprintf(out, len, "%.15s", t);
        else if (run && (int)strlen(rr) <= cw)
            snprintf(out, len, "%.15s", rr);
        else if (pc == 3 && cw >= 5 && b < 10) {
            int mid = __builtin_ctzll(m & ~(1ull << a));
            snprintf(out, len, "%d+%d+%d", a, mid, b);
        } else {
            snprintf(t, sizeof t, "%d/%d", pc, n);
            snprintf(out, len, "%.15s", (int)strlen(t) <= cw ? t : "+");
        }
    }
}

static grid_attr mask_attr(uint64_t m, int n)
{
    if (m == 0)
        return GRID_PAIR(UI_PAIR_DIM) | GRID_DIM;
    if (m == all_mask(n))
        return GRID_PAIR(UI_PAIR_FULL) | GRID_BOLD;
    if (popcount64(m) == 1)
        return UI_CELL_ATTR(__builtin_ctzll(m));
    return GRID_PAIR(UI_PAIR_PARTIAL);
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
        snprintf(out, n, "%s gate %d", view_glyph(as, "⏸", "||"), ctx->gate_step[r]);
        *a = GRID_PAIR(UI_PAIR_WARN) | GRID_BOLD;
    } else if (st == VIEW_RANK_RUNNING) {
        snprintf(out, n, "%s", view_glyph(as, "▶", ">"));
        *a = GRID_PAIR(UI_PAIR_OK);
    }
}

static void draw_box(ring *v, grid *g, const box *b, int r, int bh, const view_ctx *ctx)
{
    ring_rank *k = rank_of(v, r);
    int failed = ctx->rank_state && r < ctx->nranks && ctx->rank_state[r] == VIEW_RANK_FAILED;
    grid_attr frame = failed ? GRID_PAIR(UI_PAIR_ERR) | GRID_BOLD : UI_RANK_ATTR(r);
    char st[32];
    grid_attr sa;
    status_text(ctx, r, st, sizeof st, &sa);
    grid_fill(g, b->x, b->y, b->w, b->h, ' ', 0);
    int inner = b->w - 2, y = b->y, x0 = b->x + 1;
    if (bh >= 4) {
        grid_box(g, b->x, b->y, b->w, b->h, 0, frame);
        grid_printf(g, b->x + 1, y, frame | GRID_BOLD, " rank %d%s ", r, k->approx ?
                    view_glyph(ctx->ascii, " ≈", " ~") : "");
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
    if (bh == 5) {
        char line[64];
        if (k->step >= 0)
            snprintf(line, sizeof line, "step %d %s", k->step, k->step_label);
        else if (k->last_coll >= 0)
            snprintf(line, sizeof line, "%s", mlsys_coll_name((mlsys_coll)k->last_coll));
        else if (k->lab_step >= 0)
            snprintf(line, sizeof line, "lab step %d %s", k->lab_step, k->lab_label);
        else
            line[0] = 0;
        view_put_clipped(g, x0 + 1, y, inner - 2, line, GRID_DIM);
        y++;
    }
    /* the cells */
    int n = v->n, cw = n <= 10 ? 3 : 5;
    int x = x0 + (bh >= 4 ? 1 : 0), avail = inner - (bh >= 4 ? 2 : 0);
    if (n <= 10 && k->m * 6 - 1 <= avail)
        cw = 5;                                   /* room for "0+2+3" */
    if (k->m > 0) {
        int fit = (avail + 1) / (cw + 1);
        int d = k->m < fit ? k->m : fit;
        if (d < k->m && d > 1)
            d--;                                  /* room for the ellipsis */
        for (int i = 0; i < d; i++) {
            int lo = (int)((long)i * k->m / d), hi = (int)((long)(i + 1) * k->m / d);
            uint64_t m = 0, first = k->mask[lo];
            int uniform = 1;
            for (int j = lo; j < hi; j++) {
                m |= k->mask[j];
                uniform &= k->mask[j] == first;
            }
            char t[16];
            mask_text(m, n, cw, t, sizeof t, ctx->ascii);
            grid_attr a = mask_attr(m, n);
            if (!uniform)
                a |= GRID_UNDERLINE;
            grid_fill(g, x + i * (cw + 1), y, cw, 1, ' ', a);
            int tw = grid_text_width(t, strlen(t));
            grid_put(g, x + i * (cw + 1) + (cw - tw + 1) / 2, y, t, a);
        }
        if (d < k->m)
            grid_put(g, x + d * (cw + 1), y, view_glyph(ctx->ascii, "…", "~"), GRID_DIM);
    } else if (k->reached) {
        char t[64];
        snprintf(t, sizeof t, "got data of %d rank%s", popcount64(k->reached),
                 popcount64(k->reached) == 1 ? "" : "s");
        view_put_clipped(g, x, y, avail, t, GRID_DIM);
    } else {
        view_put_clipped(g, x, y, avail, k->last_coll == MLSYS_COLL_BARRIER ? "barrier" : "",
                         GRID_DIM);
    }
    y++;
    if (bh == 2)
        return;
    /* the values, as the rank reported them */
    char vals[256];
    size_t used = 0;
    vals[0] = 0;
    if (k->nval > 0 || k->val_src != SRC_NONE) {
        used += (size_t)snprintf(vals, sizeof vals, "=");
        for (int i = 0; i < k->nval && used + 16 < sizeof vals; i++) {
            char t[32];
            view_fmt_value(k->val[i], t, sizeof t);
            used += (size_t)snprintf(vals + used, sizeof vals - used, " %s", t);
        }
        if (k->val_total > k->nval && used + 8 < sizeof vals)
            snprintf(vals + used, sizeof vals - used, " %s", view_glyph(ctx->ascii, "…", "..."));
    }
    const char *src = k->val_src == SRC_LIVE ? "live" : k->val_src == SRC_PRINTED ? "printed"
                      : k->val_src == SRC_EVENT ? "sent" : "";
    int sw = (int)strlen(src);
    int vw = grid_text_width(vals, strlen(vals));
    if (vw + sw + 1 <= avail) {
        grid_put(g, x, y, vals, k->val_src == SRC_LIVE ? GRID_BOLD : 0);
        grid_put(g, x + avail - sw, y, src, GRID_DIM);
    } else {
        view_put_clipped(g, x, y, avail, vals, k->val_src == SRC_LIVE ? GRID_BOLD : 0);
    }
}

static int in_any_box(const box *b, int n, int x, int y)
{
    for (int i = 0; i < n; i++)
        if (x >= b[i].x && x < b[i].x + b[i].w && y >= b[i].y && y < b[i].y + b[i].h)
            return 1;
    return 0;
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

/* A packet from box a to box b: the path, an arrow head at the end, the packet at t. */
static void draw_packet(grid *g, const box *bx, int nb, int a, int b, double t, grid_attr at,
                        int ascii, const char *label, int pass)
{
    int x0 = bx[a].x + bx[a].w / 2, y0 = bx[a].y + bx[a].h / 2;
    int x1 = bx[b].x + bx[b].w / 2, y1 = bx[b].y + bx[b].h / 2;
    /* an offset so that a->b and b->a do not share a path */
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
    uint32_t dot = ascii ? '.' : 0x00b7;
    if (pass == 0) {               /* every path first, so that labels stay readable */
        for (int i = 0; i < np - 1; i++)
            grid_set(g, px[i], py[i], dot, at | GRID_DIM);
        grid_set(g, px[np - 1], py[np - 1], arrow_cp(x1 - x0, y1 - y0, ascii), at | GRID_BOLD);
        return;
    }
    if (label && np > 6) {
        /* beside the path, so that the moving packet never covers it */
        int mid = np / 2, vertical = abs(x1 - x0) < abs(y1 - y0) / 2;
        int lx = vertical ? px[mid] + 2 : px[mid] - (int)strlen(label) / 2;
        int ly = vertical ? py[mid] : py[mid] + (a < b ? 1 : -1);
        grid_put(g, lx, ly, label, at);
    }
    if (t < 1.0) {
        int i = (int)(t * (np - 1) + 0.5);
        grid_set(g, px[i], py[i], ascii ? 'o' : 0x25cf, at | GRID_BOLD);
    }
}

static void short_bytes(uint64_t b, char *out, size_t n)
{
    if (b < 1000)
        snprintf(out, n, "%llu", (unsigned long long)b);
    else if (b < 10240)
        snprintf(out, n, "%.1fK", b / 1024.0);
    else if (b < 1000ull * 1024)
        snprintf(out, n, "%lluK", (unsigned long long)(b / 1024));
    else if (b < 10ull * 1024 * 1024)
        snprintf(out, n, "%.1fM", b / 1048576.0);
    else if (b < 1000ull * 1024 * 1024)
        snprintf(out, n, "%lluM", (unsigned long long)(b >> 20));
    else
        snprintf(out, n, "%.1fG", b / 1073741824.0);
}

static void draw_header(ring *v, grid *g, int x, int y, int w, const view_ctx *ctx)
{
    char line[512], t[32];
    int n = ctx->nranks > v->n ? ctx->nranks : v->n;
    if (v->coll < 0) {
        snprintf(line, sizeof line, "%d rank%s %s no collective yet%s", n, n == 1 ? "" : "s",
                 view_glyph(ctx->ascii, "·", "-"),
                 v->msgs ? ": point-to-point messages only" : "");
        view_put_clipped(g, x, y, w, line, GRID_BOLD);
        return;
    }
    view_fmt_bytes(v->coll_bytes, t, sizeof t);
    const char *dot = view_glyph(ctx->ascii, " · ", " - ");
    int used = snprintf(line, sizeof line, "%s%s%s", mlsys_coll_name((mlsys_coll)v->coll), dot, t);
    if (v->dtype >= 0 && v->dtype < MLSYS_DTYPE_COUNT)
        used += snprintf(line + used, sizeof line - (size_t)used, " %s",
                         mlsys_dtype_name((mlsys_dtype)v->dtype));
    if (v->op >= 0 && v->op < MLSYS_OP_COUNT)
        used += snprintf(line + used, sizeof line - (size_t)used, " %s",
                         mlsys_op_name((mlsys_op)v->op));
    snprintf(line + used, sizeof line - (size_t)used, "%s%d ranks%salgorithm ", dot, n, dot);
    int cx = x + view_put_clipped(g, x, y, w, line, GRID_BOLD);
    if (cx < x + w)
        cx += view_put_clipped(g, cx, y, x + w - cx, v->algo, GRID_BOLD | GRID_PAIR(UI_PAIR_OK));
    /* the rule that chose it */
    const char *why = NULL;
    const char *ruled = mlsys_algo_rule((mlsys_coll)v->coll, n, v->coll_bytes, &why);
    if (ctx->forced_algo && *ctx->forced_algo) {
        if (!strcmp(ctx->forced_algo, v->algo))
            snprintf(line, sizeof line, "why: forced with --algo %s", v->algo);
        else if (mlsys_algo_index((mlsys_coll)v->coll, ctx->forced_algo) < 0)
            snprintf(line, sizeof line, "why: %s has no \"%s\"; its rule: %s",
                     mlsys_coll_name((mlsys_coll)v->coll), ctx->forced_algo, why ? why : "?");
        else
            snprintf(line, sizeof line, "why: --algo %s does not fit %d ranks and this count, "
                     "so the baseline %s ran", ctx->forced_algo, n, v->algo);
    } else if (n == 1) {
        snprintf(line, sizeof line, "why: 1 rank: a local copy");
    } else if (ruled && strcmp(ruled, v->algo) != 0) {
        snprintf(line, sizeof line, "why: the rule picks %s (%s), which does not fit this "
                 "count; %s ran instead", ruled, why ? why : "", v->algo);
    } else {
        snprintf(line, sizeof line, "why: %s", why ? why : "?");
    }
    view_put_clipped(g, x, y + 1, w, line, GRID_DIM);
}

static void draw_side(ring *v, grid *g, int x, int y, int w, int h, const view_ctx *ctx)
{
    int n = v->n, row = y;
    char t[128], u[32];
    grid_vline(g, x - 1, y, h, GRID_PAIR(UI_PAIR_DIM));
    snprintf(t, sizeof t, "phase %d", v->phase);
    grid_put(g, x + 1, row++, t, GRID_BOLD);
    view_fmt_bytes(v->bytes, u, sizeof u);
    snprintf(t, sizeof t, "%llu messages, %s", (unsigned long long)v->msgs, u);
    view_put_clipped(g, x + 1, row++, w - 1, t, 0);
    snprintf(t, sizeof t, "%llu events, %llu lost", (unsigned long long)ctx->events,
             (unsigned long long)ctx->lost);
    view_put_clipped(g, x + 1, row++, w - 1, t, ctx->lost ? GRID_PAIR(UI_PAIR_ERR) | GRID_BOLD : 0);
    row++;
    if (n > 0 && n <= 8 && row + n + 2 < y + h) {
        grid_put(g, x + 1, row++, "bytes per link (row to col)", GRID_BOLD);
        int cw = (w - 4) / n;
        if (cw > 6)
            cw = 6;
        if (cw >= 3) {
            for (int c = 0; c < n; c++)
                grid_printf(g, x + 4 + c * cw + cw - 2, row, UI_RANK_ATTR(c) | GRID_BOLD, "%d", c);
            row++;
            for (int r = 0; r < n; r++, row++) {
                grid_printf(g, x + 1, row, UI_RANK_ATTR(r) | GRID_BOLD, "%d", r);
                for (int c = 0; c < n; c++) {
                    uint64_t b = v->links[r * n + c];
                    if (r == c)
                        snprintf(u, sizeof u, "%s", view_glyph(ctx->ascii, "·", "."));
                    else if (!b)
                        snprintf(u, sizeof u, "-");
                    else
                        short_bytes(b, u, sizeof u);
                    int uw = grid_text_width(u, strlen(u));
                    grid_put(g, x + 4 + c * cw + cw - 1 - uw, row, u, b ? 0 : GRID_DIM);
                }
            }
        }
        row++;
    } else if (n > 8) {
        grid_put(g, x + 1, row++, "busiest links", GRID_BOLD);
        /* the largest links in turn: each pass takes the largest below the last one */
        uint64_t prev = ~0ull;
        int prev_i = -1;
        for (int shown = 0; shown < 6 && row < y + h - 6; shown++) {
            uint64_t best = 0;
            int bi = -1;
            for (int i = 0; i < n * n; i++) {
                uint64_t lb = v->links[i];
                int below = lb < prev || (lb == prev && i > prev_i);
                if (lb && below && (bi < 0 || lb > best)) {
                    best = lb;
                    bi = i;
                }
            }
            if (bi < 0)
                break;
            view_fmt_bytes(best, u, sizeof u);
            snprintf(t, sizeof t, "%d %s %d  %s", bi / n, view_glyph(ctx->ascii, "→", "->"),
                     bi % n, u);
            grid_put(g, x + 1, row++, t, 0);
            prev = best;
            prev_i = bi;
        }
        row++;
    }
    if (v->nhist && row + 2 < y + h) {
        grid_put(g, x + 1, row++, "calls so far", GRID_BOLD);
        for (int i = v->nhist - 1; i >= 0 && row < y + h - 5; i--) {
            view_fmt_bytes(v->hist[i].bytes, u, sizeof u);
            snprintf(t, sizeof t, "%s %s, %s", mlsys_coll_name((mlsys_coll)v->hist[i].coll),
                     v->hist[i].algo, u);
            view_put_clipped(g, x + 1, row++, w - 1, t, GRID_DIM);
        }
        row++;
    }
    /* the legend at the bottom */
    int ly = y + h - 5;
    if (ly > row) {
        grid_put(g, x + 1, ly, view_glyph(ctx->ascii, "···", "..."), GRID_PAIR(UI_PAIR_DIM));
        grid_put(g, x + 5, ly++, "message outside a collective", GRID_DIM);
        grid_put(g, x + 1, ly, " 2 ", UI_CELL_ATTR(2));
        grid_put(g, x + 5, ly++, "one rank's data", 0);
        grid_put(g, x + 1, ly, "0-3", GRID_PAIR(UI_PAIR_PARTIAL));
        grid_put(g, x + 5, ly++, "ranks 0 to 3 (0+1: two)", 0);
        grid_put(g, x + 1, ly, "all", GRID_PAIR(UI_PAIR_FULL) | GRID_BOLD);
        grid_put(g, x + 5, ly++, "every rank's data", 0);
        grid_put(g, x + 1, ly, view_glyph(ctx->ascii, " ≈ ", " ~ "), 0);
        grid_put(g, x + 5, ly, "some messages unplaced", GRID_DIM);
    }
}

/* With a grid of boxes, paths would run under the boxes: each box says in its bottom
 * border what it sent and received in this phase instead ("→0 8 B", "←11 ranks"). */
static void draw_grid_traffic(ring *v, grid *g, const box *bx, int shown, double t, int ascii)
{
    for (int r = 0; r < shown; r++) {
        int nout = 0, nin = 0, to = -1, from = -1;
        uint64_t bout = 0, bin = 0;
        for (int i = 0; i < v->npk; i++) {
            const ring_packet *p = &v->pk[i];
            if (p->src == r) {
                nout++;
                bout += p->bytes;
                to = p->dst;
            }
            if (p->dst == r && p->arrived) {
                nin++;
                bin += p->bytes;
                from = p->src;
            }
        }
        char a[40] = "", b[40] = "", u[24], line[96];
        if (nout == 1) {
            short_bytes(bout, u, sizeof u);
            snprintf(a, sizeof a, "%s%d %sB", ascii ? "->" : "→", to, u);
        } else if (nout > 1) {
            snprintf(a, sizeof a, "%s%d ranks", ascii ? "->" : "→", nout);
        }
        if (nin == 1) {
            short_bytes(bin, u, sizeof u);
            snprintf(b, sizeof b, "%s%d %sB", ascii ? "<-" : "←", from, u);
        } else if (nin > 1) {
            snprintf(b, sizeof b, "%s%d ranks", ascii ? "<-" : "←", nin);
        }
        snprintf(line, sizeof line, "%s%s%s", a, a[0] && b[0] ? " " : "", b);
        if (!line[0])
            continue;
        grid_attr at = UI_RANK_ATTR(r) | (t < 1.0 ? GRID_BOLD | GRID_REVERSE : GRID_BOLD);
        grid_put(g, bx[r].x + 1, bx[r].y + bx[r].h - 1, " ", UI_RANK_ATTR(r));
        view_put_clipped(g, bx[r].x + 2, bx[r].y + bx[r].h - 1, bx[r].w - 4, line, at);
    }
}

static void ring_draw(void *data, grid *g, int x, int y, int w, int h, const view_ctx *ctx)
{
    ring *v = data;
    if (ctx->nranks > v->n)
        ensure_ranks(v, ctx->nranks - 1);
    grid_clip(g, x, y, w, h);
    if (h < 3 || w < 20) {
        grid_unclip(g);
        return;
    }
    draw_header(v, g, x, y, w, ctx);
    int side = w >= 100 ? 34 : 0;
    int ax = x, ay = y + 2, aw = w - side - (side ? 2 : 0), ah = h - 2;
    if (side)
        draw_side(v, g, x + w - side, ay, side, ah, ctx);
    int n = v->n;
    if (n == 0) {
        grid_put(g, ax + 2, ay + 1, "waiting for the ranks' first events", GRID_DIM);
        grid_unclip(g);
        return;
    }
    box bx[64];
    int shown;
    int bh = layout(n, ax, ay, aw, ah, bx, &shown);
    if (!bh) {
        grid_put(g, ax, ay, "no room for the ranks: enlarge the terminal", GRID_DIM);
        grid_unclip(g);
        return;
    }
    grid_clip(g, ax, ay, aw, ah);
    double t = ctx->anim < 0 ? 0 : ctx->anim > 1 ? 1 : ctx->anim;
    int labels = v->npk <= 8, grid_mode = n > 8;
    for (int pass = 0; pass < 2 && !grid_mode; pass++)
        for (int i = 0; i < v->npk; i++) {
            ring_packet *p = &v->pk[i];
            if (p->src >= shown || p->dst >= shown || p->src == p->dst)
                continue;
            char lb[32];
            view_fmt_bytes(p->bytes, lb, sizeof lb);
            /* a pair that exchanges in both directions gets one label */
            int twin = 0;
            for (int j = 0; j < v->npk && p->src > p->dst; j++)
                twin |= v->pk[j].src == p->dst && v->pk[j].dst == p->src;
            grid_attr at = p->in_coll ? UI_RANK_ATTR(p->src) : GRID_PAIR(UI_PAIR_DIM);
            draw_packet(g, bx, shown, p->src, p->dst, p->arrived ? t : t * 0.5, at,
                        ctx->ascii, labels && !twin ? lb : NULL, pass);
        }
    for (int r = 0; r < shown; r++)
        draw_box(v, g, &bx[r], r, bh, ctx);
    if (grid_mode && bh >= 4)
        draw_grid_traffic(v, g, bx, shown, t, ctx->ascii);
    if (shown < n)
        grid_printf(g, ax, ay + ah - 1, GRID_PAIR(UI_PAIR_WARN), "+%d ranks not shown: "
                    "enlarge the terminal", n - shown);
    if (v->pk_more)
        grid_printf(g, ax, ay + ah - 1, GRID_DIM, "+%d more messages in this phase", v->pk_more);
    grid_unclip(g);
}

static const ui_key_help ring_keys[] = {{NULL, NULL}};

const view_class view_ring_class = {
    .name = "ring",
    .title = "ring",
    .help = "ranks with their buffers: cells show whose data they hold, packets move along "
            "the edges, the header says which algorithm ran and why",
    .keys = ring_keys,
    .create = ring_create,
    .free = ring_free,
    .reset = ring_reset,
    .event = ring_event,
    .line = ring_line,
    .phase = ring_phase,
    .draw = ring_draw,
    .key = NULL,
};
