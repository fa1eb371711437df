/* stepmodel.c - turns the event stream of a job into frames: frame k is what happened after
 * every rank passed its k-th mlsys_step (the gate), so a gated job, a live one and a replay
 * number their frames alike. Each collective call keeps N chunks per rank; a message is put
 * on chunks by the algorithm's schedule (the ring formulas of core/coll/), by its size (the
 * whole buffer) or by what the sender holds, and the receiver's chunks take its provenance
 * and values. The values come from the MARK "chunks" events that core/coll.c emits. */
#include "stepmodel.h"
#include "../../core/trace_values.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SM_MSG_HASH 4096           /* open addressing on msg_id, power of two */
#define SM_SNAP_FRAMES 200000      /* frames beyond this keep no buffer snapshot */

typedef struct call_state {
    sm_call c;
    sm_cell *cells;                /* [n * n] rank r's chunk j at r * n + j */
    sm_cell *begin;                /* the same at each rank's last step boundary */
    int *cur_step;                 /* [n] step number a rank is at in this call, -1 */
    char (*cur_label)[32];
    uint64_t *recv_elems;          /* [n] broadcast pipeline: elements received so far */
    int first_ag;                  /* first step labelled all-gather, -1 */
} call_state;

typedef struct frame_state {
    sm_frame f;
    sm_cell *snap;                 /* [n * n] or NULL */
    unsigned char *done;           /* [n] rank r finished this frame */
    double *pval;                  /* [n] */
    unsigned char *has_pval;
    int *sidx;                     /* its sends */
    int scap;
} frame_state;

/* One item of the tape: an event (idx >= 0 into tev) or a line (idx < 0: line -1 - idx). */
typedef struct tape_item {
    int frame;
    int32_t idx;
} tape_item;

typedef struct tape_line {
    int rank, is_err;
    char *text;
} tape_line;

struct stepmodel {
    int n;
    tape_item *tape;
    size_t ntape, tcap;
    mlsys_event *tev;
    size_t ntev, tevcap;
    tape_line *tline;
    size_t ntline, tlcap;
    uint64_t tape_dropped;
    int (*keep)(void *u, const mlsys_event *e);
    void *keep_u;
    call_state *calls;
    int ncalls, ccap;
    frame_state *frames;
    int nframes, fcap;
    sm_send *sends;
    int nsends, scap;
    sm_cell *send_cells;           /* [nsends * n] the sender's chunks at send time */
    int *rank_frame;               /* [n] frame each rank is in (STEP events seen) */
    int *rank_call;                /* [n] call index a rank is in, -1 */
    int *rank_calls;               /* [n] calls begun */
    unsigned char *ended;
    double *pval;                  /* [n] value a rank holds outside collectives */
    unsigned char *has_pval;
    int last_data_call;
    int ncomplete;
    struct { uint64_t id; int send; } msg[SM_MSG_HASH];
};

static void *xcalloc(size_t n, size_t s)
{
    void *p = calloc(n ? n : 1, s ? s : 1);
    if (!p)
        abort();
    return p;
}

static void *xrealloc(void *p, size_t n)
{
    void *q = realloc(p, n ? n : 1);
    if (!q)
        abort();
    return q;
}

static int mod(int a, int n) { return (a % n + n) % n; }

static int is_reduction(int coll)
{
    return coll == MLSYS_COLL_REDUCE || coll == MLSYS_COLL_ALLREDUCE ||
           coll == MLSYS_COLL_REDUCE_SCATTER;
}

static int is_blocked(int coll)
{
    return coll == MLSYS_COLL_ALLGATHER || coll == MLSYS_COLL_REDUCE_SCATTER ||
           coll == MLSYS_COLL_GATHER || coll == MLSYS_COLL_SCATTER ||
           coll == MLSYS_COLL_ALLTOALL;
}

static size_t esize(int dt)
{
    return dt >= 0 && dt < MLSYS_DTYPE_COUNT ? mlsys_dtype_size((mlsys_dtype)dt) : 4;
}

/* Elements per rank of the call (the count argument). */
static uint64_t call_count(const sm_call *c)
{
    return c->bytes / esize(c->dtype);
}

/* Chunk k of the call's logical buffer: offset and length in elements. */
static void chunk_range(const sm_call *c, int n, int k, uint64_t *off, uint64_t *len)
{
    uint64_t count = call_count(c);
    if (is_blocked(c->coll)) {
        *off = (uint64_t)k * count;
        *len = count;
        return;
    }
    uint64_t base = count / (uint64_t)n, extra = count % (uint64_t)n, kk = (uint64_t)k;
    *off = kk * base + (kk < extra ? kk : extra);
    *len = base + (kk < extra ? 1 : 0);
}

static uint64_t total_elems(const sm_call *c, int n)
{
    return is_blocked(c->coll) ? call_count(c) * (uint64_t)n : call_count(c);
}

/* ---- lifetime ---- */

static void free_contents(stepmodel *m)
{
    for (size_t i = 0; i < m->ntline; i++)
        free(m->tline[i].text);
    free(m->tline);
    free(m->tev);
    free(m->tape);
    for (int i = 0; i < m->ncalls; i++) {
        free(m->calls[i].cells);
        free(m->calls[i].begin);
        free(m->calls[i].cur_step);
        free(m->calls[i].cur_label);
        free(m->calls[i].recv_elems);
    }
    for (int i = 0; i < m->nframes; i++) {
        free(m->frames[i].snap);
        free(m->frames[i].done);
        free(m->frames[i].pval);
        free(m->frames[i].has_pval);
        free(m->frames[i].sidx);
    }
    free(m->calls);
    free(m->frames);
    free(m->sends);
    free(m->send_cells);
    free(m->rank_frame);
    free(m->rank_call);
    free(m->rank_calls);
    free(m->ended);
    free(m->pval);
    free(m->has_pval);
}

static void open_frame(stepmodel *m, int call, int step, const char *label);
static void tape_event(stepmodel *m, const mlsys_event *e, int frame);

void sm_reset(stepmodel *m, int nranks)
{
    int (*keep)(void *, const mlsys_event *) = m->keep;
    void *keep_u = m->keep_u;
    free_contents(m);
    memset(m, 0, sizeof *m);
    m->keep = keep;
    m->keep_u = keep_u;
    m->n = nranks < 1 ? 1 : nranks > SM_MAX_RANKS ? SM_MAX_RANKS : nranks;
    m->rank_frame = xcalloc((size_t)m->n, sizeof(int));
    m->rank_call = xcalloc((size_t)m->n, sizeof(int));
    m->rank_calls = xcalloc((size_t)m->n, sizeof(int));
    m->ended = xcalloc((size_t)m->n, 1);
    m->pval = xcalloc((size_t)m->n, sizeof(double));
    m->has_pval = xcalloc((size_t)m->n, 1);
    for (int r = 0; r < m->n; r++)
        m->rank_call[r] = -1;
    m->last_data_call = -1;
    open_frame(m, -1, -1, "");
}

stepmodel *sm_create(void)
{
    stepmodel *m = xcalloc(1, sizeof *m);
    sm_reset(m, 1);
    return m;
}

void sm_free(stepmodel *m)
{
    if (!m)
        return;
    free_contents(m);
    free(m);
}

/* ---- frames ---- */

static void open_frame(stepmodel *m, int call, int step, const char *label)
{
    if (m->nframes == m->fcap) {
        m->fcap = m->fcap ? m->fcap * 2 : 64;
        m->frames = xrealloc(m->frames, (size_t)m->fcap * sizeof *m->frames);
    }
    frame_state *fs = &m->frames[m->nframes];
    memset(fs, 0, sizeof *fs);
    fs->f.call = call;
    fs->f.step = step;
    snprintf(fs->f.label, sizeof fs->f.label, "%s", label ? label : "");
    int dc = call >= 0 && m->calls[call].c.coll != MLSYS_COLL_BARRIER ? call : -1;
    if (call >= 0 && dc < 0)
        dc = -1;                     /* a barrier shows no data */
    else if (call < 0)
        dc = m->last_data_call;
    fs->f.data_call = dc;
    fs->done = xcalloc((size_t)m->n, 1);
    fs->pval = xcalloc((size_t)m->n, sizeof(double));
    fs->has_pval = xcalloc((size_t)m->n, 1);
    if (dc >= 0 && m->nframes < SM_SNAP_FRAMES)
        fs->snap = xcalloc((size_t)m->n * (size_t)m->n, sizeof(sm_cell));
    m->nframes++;
}

static void update_complete(stepmodel *m)
{
    while (m->ncomplete < m->nframes) {
        frame_state *fs = &m->frames[m->ncomplete];
        for (int r = 0; r < m->n; r++)
            if (!fs->done[r] && !m->ended[r])
                return;
        fs->f.complete = 1;
        m->ncomplete++;
    }
}

/* Rank r leaves frame k: its buffer and value as they are now belong to the frame. */
static void leave_frame(stepmodel *m, int r, int k)
{
    frame_state *fs = &m->frames[k];
    if (fs->done[r])
        return;
    fs->done[r] = 1;
    if (fs->snap && fs->f.data_call >= 0) {
        call_state *cs = &m->calls[fs->f.data_call];
        memcpy(fs->snap + (size_t)r * (size_t)m->n, cs->cells + (size_t)r * (size_t)m->n,
               (size_t)m->n * sizeof(sm_cell));
    }
    fs->pval[r] = m->pval[r];
    fs->has_pval[r] = m->has_pval[r];
}

/* ---- calls ---- */

static call_state *call_for(stepmodel *m, int idx, const mlsys_event *e)
{
    while (m->ncalls <= idx) {
        if (m->ncalls == m->ccap) {
            m->ccap = m->ccap ? m->ccap * 2 : 16;
            m->calls = xrealloc(m->calls, (size_t)m->ccap * sizeof *m->calls);
        }
        call_state *cs = &m->calls[m->ncalls++];
        memset(cs, 0, sizeof *cs);
        size_t nn = (size_t)m->n * (size_t)m->n;
        cs->cells = xcalloc(nn, sizeof(sm_cell));
        cs->begin = xcalloc(nn, sizeof(sm_cell));
        cs->cur_step = xcalloc((size_t)m->n, sizeof(int));
        cs->cur_label = xcalloc((size_t)m->n, sizeof *cs->cur_label);
        cs->recv_elems = xcalloc((size_t)m->n, sizeof(uint64_t));
        for (int r = 0; r < m->n; r++)
            cs->cur_step[r] = -1;
        cs->first_ag = -1;
        cs->c.coll = e->coll;
        cs->c.algo_idx = e->algo;
        cs->c.dtype = e->dtype;
        cs->c.op = e->op;
        cs->c.root = e->peer >= 0 && e->peer < m->n ? e->peer : 0;
        cs->c.bytes = e->bytes;
        cs->c.first_frame = -1;
        cs->c.last_step = -1;
        cs->c.by = e->tag >= MLSYS_ALGO_BY_RULE && e->tag <= MLSYS_ALGO_BY_RULE_NONE ? e->tag : -1;
        cs->c.wanted = e->chunk;
        snprintf(cs->c.algo, sizeof cs->c.algo, "%.23s", e->label);
        /* the progress thread's calls say " async" after the algorithm (core/icoll.c) */
        size_t al = strlen(cs->c.algo);
        if (al > 6 && !strcmp(cs->c.algo + al - 6, " async")) {
            cs->c.algo[al - 6] = 0;
            cs->c.async = 1;
        }
    }
    return &m->calls[idx];
}

/* What a rank's chunks hold when the call begins. */
static void init_cells(stepmodel *m, call_state *cs, int r)
{
    int n = m->n, coll = cs->c.coll, root = cs->c.root;
    sm_cell *c = cs->cells + (size_t)r * (size_t)n;
    for (int j = 0; j < n; j++) {
        uint64_t mk = 0;
        switch (coll) {
        case MLSYS_COLL_BROADCAST: case MLSYS_COLL_SCATTER:
            mk = r == root ? 1ull << root : 0;
            break;
        case MLSYS_COLL_ALLGATHER: case MLSYS_COLL_GATHER:
            mk = j == r ? 1ull << r : 0;
            break;
        case MLSYS_COLL_BARRIER:
            mk = 0;
            break;
        default:
            mk = 1ull << r;
        }
        uint64_t off, len;
        chunk_range(&cs->c, n, j, &off, &len);
        c[j].mask = len ? mk : 0;            /* count < N: the last chunks are empty */
        c[j].has_val = 0;
    }
    memcpy(cs->begin + (size_t)r * (size_t)n, c, (size_t)n * sizeof *c);
}

/* ---- where a message goes ---- */

static int label_has(const char *label, const char *w)
{
    return strstr(label, w) != NULL;
}

/* Does the receiver reduce this message into its copy? */
static int reduces(const sm_call *c, const char *label)
{
    if (!is_reduction(c->coll))
        return 0;
    if (label_has(label, "gather") || label_has(label, "sends to all") ||
        label_has(label, "broadcast") || label_has(label, "unfold") || label_has(label, "down"))
        return 0;
    return 1;
}

/* Chunks [lo, lo + k) (cyclic) whose lengths add up to elems; 0 when none. */
static uint64_t run_of(const sm_call *c, int n, int lo, uint64_t elems)
{
    uint64_t set = 0, sum = 0;
    for (int i = 0; i < n && sum < elems; i++) {
        uint64_t off, len;
        int j = mod(lo + i, n);
        chunk_range(c, n, j, &off, &len);
        sum += len;
        set |= 1ull << j;
    }
    return sum == elems ? set : 0;
}

static uint64_t all_chunks(int n)
{
    return n >= 64 ? ~0ull : (1ull << n) - 1;
}

/* The chunks a send carries (bit set over the sender's chunks) and, for all_to_all, where it
 * lands. Returns 0 when no rule places it. */
static uint64_t place(stepmodel *m, call_state *cs, int src, int dst, uint64_t bytes, int *land)
{
    const sm_call *c = &cs->c;
    int n = m->n, s = cs->cur_step[src];
    const char *label = cs->cur_label[src];
    uint64_t elems = bytes / esize(c->dtype), total = total_elems(c, n);
    *land = -1;
    if (c->coll == MLSYS_COLL_BARRIER || !elems)
        return 0;
    if (c->coll == MLSYS_COLL_ALLTOALL) {
        *land = src;
        return 1ull << dst;
    }
    if (elems >= total)
        return all_chunks(n);
    const sm_cell *have = cs->begin + (size_t)src * (size_t)n;
    uint64_t held = 0;
    for (int j = 0; j < n; j++)
        if (have[j].mask)
            held |= 1ull << j;
    int ring = !strcmp(c->algo, "ring"), ag = label_has(label, "all-gather");
    int agk = ag && cs->first_ag >= 0 ? s - cs->first_ag : 0;
    uint64_t set = 0;
    switch (c->coll) {
    case MLSYS_COLL_ALLREDUCE:
        if (ring)
            set = 1ull << (ag ? mod(src + 1 - agk, n) : mod(src - s, n));
        else if (!strcmp(c->algo, "recursive_halving") && elems % (total / (uint64_t)n ? total / (uint64_t)n : 1) == 0) {
            int k = (int)(elems / (total / (uint64_t)n));
            set = run_of(c, n, ag ? src & ~(k - 1) : dst & ~(k - 1), elems);
        }
        break;
    case MLSYS_COLL_ALLGATHER:
        set = ring ? 1ull << mod(src - s, n) : held;
        break;
    case MLSYS_COLL_REDUCE_SCATTER:
        if (ring)
            set = 1ull << mod(src - s - 1, n);
        else if (!strcmp(c->algo, "direct"))
            set = 1ull << dst;
        else {
            int k = (int)(elems / (call_count(c) ? call_count(c) : 1));
            set = k > 0 ? run_of(c, n, dst & ~(k - 1), elems) : 0;
        }
        break;
    case MLSYS_COLL_REDUCE:
        if (ring)
            set = label_has(label, "gather") ? 1ull << src : 1ull << mod(src - s - 1, n);
        break;
    case MLSYS_COLL_GATHER:
        set = held;
        break;
    case MLSYS_COLL_SCATTER:
        set = run_of(c, n, dst, elems);
        break;
    case MLSYS_COLL_BROADCAST: {
        if (label_has(label, "scatter")) {
            set = run_of(c, n, mod(dst - c->root, n), elems);
        } else if (ag) {
            set = 1ull << mod(mod(src - c->root, n) - agk, n);
        } else {
            /* a pipeline: segments fill the receiver's buffer from the front */
            uint64_t before = cs->recv_elems[dst], after = before + elems;
            cs->recv_elems[dst] = after;
            for (int j = 0; j < n; j++) {
                uint64_t off, len;
                chunk_range(c, n, j, &off, &len);
                if (off + len <= after && off + len > before)
                    set |= 1ull << j;
            }
            if (!set)
                return 0;
        }
        break;
    }
    default:
        break;
    }
    /* a placement must match the size of the message */
    uint64_t sum = 0;
    for (int j = 0; j < n; j++)
        if (set >> j & 1) {
            uint64_t off, len;
            chunk_range(c, n, j, &off, &len);
            sum += len;
        }
    if (c->coll == MLSYS_COLL_BROADCAST && !label_has(label, "scatter") && !ag)
        return set;
    return sum == elems ? set : 0;
}

static double apply_op(int op, double a, double b)
{
    switch (op) {
    case MLSYS_PROD: return a * b;
    case MLSYS_MIN: return a < b ? a : b;
    case MLSYS_MAX: return a > b ? a : b;
    default: return a + b;
    }
}

static int msg_find(stepmodel *m, uint64_t id, int create)
{
    uint64_t h = (id * 0x9e3779b97f4a7c15ull) >> 52;
    for (int i = 0; i < SM_MSG_HASH; i++) {
        int slot = (int)((h + (uint64_t)i) & (SM_MSG_HASH - 1));
        if (m->msg[slot].id == id)
            return slot;
        if (m->msg[slot].id == 0) {
            if (!create)
                return -1;
            m->msg[slot].id = id;
            m->msg[slot].send = -1;
            return slot;
        }
    }
    return -1;
}

static void msg_forget(stepmodel *m, int slot)
{
    /* backward-shift deletion keeps the probe chains whole */
    int i = slot;
    for (;;) {
        m->msg[i].id = 0;
        int j = i;
        for (;;) {
            j = (j + 1) & (SM_MSG_HASH - 1);
            if (m->msg[j].id == 0)
                return;
            int home = (int)((m->msg[j].id * 0x9e3779b97f4a7c15ull) >> 52);
            int between = i <= j ? (home > i && home <= j) : (home > i || home <= j);
            if (!between)
                break;
        }
        m->msg[i] = m->msg[j];
        i = j;
    }
}

static void on_send(stepmodel *m, const mlsys_event *e)
{
    int src = e->rank, dst = e->peer;
    if (dst < 0 || dst >= m->n)
        return;
    if (m->nsends == m->scap) {
        m->scap = m->scap ? m->scap * 2 : 256;
        m->sends = xrealloc(m->sends, (size_t)m->scap * sizeof *m->sends);
        m->send_cells = xrealloc(m->send_cells, (size_t)m->scap * (size_t)m->n * sizeof(sm_cell));
    }
    int si = m->nsends++;
    sm_send *s = &m->sends[si];
    memset(s, 0, sizeof *s);
    s->src = src;
    s->dst = dst;
    s->bytes = e->bytes;
    s->land = -1;
    s->msg_id = e->msg_id;
    int ci = m->rank_call[src];
    s->call = e->coll >= 0 ? ci : -1;
    sm_cell *snap = m->send_cells + (size_t)si * (size_t)m->n;
    memset(snap, 0, (size_t)m->n * sizeof *snap);
    if (s->call >= 0) {
        call_state *cs = &m->calls[ci];
        s->chunks = place(m, cs, src, dst, e->bytes, &s->land);
        s->reduce = reduces(&cs->c, cs->cur_label[src]);
        if (!s->chunks && cs->c.coll != MLSYS_COLL_BARRIER && e->bytes)
            cs->c.approx = 1;
        /* the sender's chunks as they are now: what it sends */
        memcpy(snap, cs->cells + (size_t)src * (size_t)m->n, (size_t)m->n * sizeof *snap);
        for (int j = 0; j < m->n; j++)
            if (s->chunks >> j & 1) {
                s->mask = snap[j].mask;
                s->val = snap[j].val;
                s->has_val = snap[j].has_val;
                break;
            }
    } else {
        s->val = m->pval[src];
        s->has_val = m->has_pval[src];
    }
    frame_state *fs = &m->frames[m->rank_frame[src]];
    if (fs->f.nsend == fs->scap) {
        fs->scap = fs->scap ? fs->scap * 2 : 8;
        fs->sidx = xrealloc(fs->sidx, (size_t)fs->scap * sizeof(int));
    }
    fs->sidx[fs->f.nsend++] = si;
    if (e->msg_id) {
        int slot = msg_find(m, e->msg_id, 1);
        if (slot >= 0)
            m->msg[slot].send = si;
    }
}

static void on_recv(stepmodel *m, const mlsys_event *e)
{
    if (!e->msg_id)
        return;
    int slot = msg_find(m, e->msg_id, 0);
    if (slot < 0)
        return;
    int si = m->msg[slot].send;
    msg_forget(m, slot);
    if (si < 0)
        return;
    sm_send *s = &m->sends[si];
    s->arrived = 1;
    if (s->call < 0 || !s->chunks)
        return;
    call_state *cs = &m->calls[s->call];
    int n = m->n;
    const sm_cell *from = m->send_cells + (size_t)si * (size_t)n;
    sm_cell *to = cs->cells + (size_t)s->dst * (size_t)n;
    for (int j = 0; j < n; j++) {
        if (!(s->chunks >> j & 1))
            continue;
        int at = s->land >= 0 ? s->land : j;
        if (s->reduce) {
            if (to[at].has_val && from[j].has_val)
                to[at].val = apply_op(cs->c.op, to[at].val, from[j].val);
            else if (!to[at].mask)
                to[at] = from[j];
            to[at].mask |= from[j].mask;
        } else {
            to[at] = from[j];
        }
    }
}

static void on_step(stepmodel *m, const mlsys_event *e)
{
    int r = e->rank;
    int k = m->rank_frame[r];
    leave_frame(m, r, k);
    m->rank_frame[r] = ++k;
    int ci = e->coll >= 0 ? m->rank_call[r] : -1;
    if (ci >= 0) {
        call_state *cs = &m->calls[ci];
        cs->cur_step[r] = e->step;
        snprintf(cs->cur_label[r], sizeof cs->cur_label[r], "%s", e->label);
        memcpy(cs->begin + (size_t)r * (size_t)m->n, cs->cells + (size_t)r * (size_t)m->n,
               (size_t)m->n * sizeof(sm_cell));
        if (e->step > cs->c.last_step)
            cs->c.last_step = e->step;
        if (cs->first_ag < 0 && label_has(e->label, "all-gather"))
            cs->first_ag = e->step;
    }
    while (m->nframes <= k) {
        open_frame(m, ci, e->step, e->label);
        if (ci >= 0 && m->calls[ci].c.first_frame < 0)
            m->calls[ci].c.first_frame = m->nframes - 1;
    }
    tape_event(m, e, k);            /* a step belongs to the frame it opens */
    update_complete(m);
}

/* ---- the tape ---- */

static int tape_room(stepmodel *m)
{
    if (m->ntape >= SM_TAPE_MAX) {
        m->tape_dropped++;
        return 0;
    }
    if (m->ntape == m->tcap) {
        m->tcap = m->tcap ? m->tcap * 2 : 1024;
        m->tape = xrealloc(m->tape, m->tcap * sizeof *m->tape);
    }
    return 1;
}

static void tape_event(stepmodel *m, const mlsys_event *e, int frame)
{
    if ((m->keep && !m->keep(m->keep_u, e)) || !tape_room(m))
        return;
    if (m->ntev == m->tevcap) {
        m->tevcap = m->tevcap ? m->tevcap * 2 : 1024;
        m->tev = xrealloc(m->tev, m->tevcap * sizeof *m->tev);
    }
    m->tev[m->ntev] = *e;
    m->tape[m->ntape++] = (tape_item){frame, (int32_t)m->ntev++};
}

void sm_line(stepmodel *m, int rank, int is_err, const char *text)
{
    if (!tape_room(m))
        return;
    if (m->ntline == m->tlcap) {
        m->tlcap = m->tlcap ? m->tlcap * 2 : 256;
        m->tline = xrealloc(m->tline, m->tlcap * sizeof *m->tline);
    }
    size_t len = strlen(text);
    char *t = xrealloc(NULL, len + 1);
    memcpy(t, text, len + 1);
    m->tline[m->ntline] = (tape_line){rank, is_err, t};
    int frame = rank >= 0 && rank < m->n ? m->rank_frame[rank] : m->nframes - 1;
    m->tape[m->ntape++] = (tape_item){frame, -1 - (int32_t)m->ntline++};
}

void sm_set_keep(stepmodel *m, int (*keep)(void *u, const mlsys_event *e), void *u)
{
    m->keep = keep;
    m->keep_u = u;
}

size_t sm_tape_len(const stepmodel *m) { return m->ntape; }
uint64_t sm_tape_dropped(const stepmodel *m) { return m->tape_dropped; }

int sm_tape_item(const stepmodel *m, size_t i, const mlsys_event **e, int *rank, int *is_err,
                 const char **text)
{
    const tape_item *it = &m->tape[i];
    if (it->idx >= 0) {
        *e = &m->tev[it->idx];
    } else {
        const tape_line *l = &m->tline[-1 - it->idx];
        *e = NULL;
        *rank = l->rank;
        *is_err = l->is_err;
        *text = l->text;
    }
    return it->frame;
}

void sm_cursor_init(sm_cursor *c)
{
    memset(c, 0, sizeof *c);
    c->frame = -1;
}

void sm_cursor_fini(sm_cursor *c)
{
    free(c->pending);
    sm_cursor_init(c);
}

static void feed_item(const stepmodel *m, size_t i, const sm_sink *s)
{
    const mlsys_event *e;
    int rank = -1, is_err = 0;
    const char *text = NULL;
    int f = sm_tape_item(m, i, &e, &rank, &is_err, &text);
    if (e) {
        if (s->event)
            s->event(s->u, e, f);
    } else if (s->line) {
        s->line(s->u, rank, is_err, text);
    }
}

size_t sm_sync(const stepmodel *m, sm_cursor *c, int k, const sm_sink *s)
{
    size_t fed = 0;
    if (k < c->frame || c->pos > m->ntape) {
        if (s->rewind)
            s->rewind(s->u);
        c->pos = 0;
        c->npend = 0;
    }
    c->frame = k;
    /* what waited for its frame, in tape order */
    size_t keep = 0;
    for (size_t j = 0; j < c->npend; j++) {
        size_t i = c->pending[j];
        if (m->tape[i].frame <= k) {
            feed_item(m, i, s);
            fed++;
        } else {
            c->pending[keep++] = i;
        }
    }
    c->npend = keep;
    for (; c->pos < m->ntape; c->pos++) {
        if (m->tape[c->pos].frame <= k) {
            feed_item(m, c->pos, s);
            fed++;
            continue;
        }
        if (c->npend == c->pcap) {
            c->pcap = c->pcap ? c->pcap * 2 : 256;
            c->pending = xrealloc(c->pending, c->pcap * sizeof *c->pending);
        }
        c->pending[c->npend++] = c->pos;
    }
    return fed;
}

void sm_event(stepmodel *m, const mlsys_event *e)
{
    int r = e->rank;
    if (r < 0 || r >= m->n)
        return;
    if (e->kind != MLSYS_EV_STEP)
        tape_event(m, e, m->rank_frame[r]);
    switch (e->kind) {
    case MLSYS_EV_COLL_BEGIN: {
        if (e->coll < 0 || e->coll >= MLSYS_COLL_COUNT)
            break;
        int idx = m->rank_calls[r]++;
        call_state *cs = call_for(m, idx, e);
        m->rank_call[r] = idx;
        init_cells(m, cs, r);
        if (cs->c.coll != MLSYS_COLL_BARRIER && idx > m->last_data_call)
            m->last_data_call = idx;
        break;
    }
    case MLSYS_EV_COLL_END:
        if (m->rank_call[r] >= 0) {
            call_state *cs = &m->calls[m->rank_call[r]];
            cs->c.ended++;
            cs->cur_step[r] = -1;
        }
        m->rank_call[r] = -1;
        break;
    case MLSYS_EV_STEP:
        on_step(m, e);
        break;
    case MLSYS_EV_SEND_BEGIN:
        on_send(m, e);
        break;
    case MLSYS_EV_RECV_END:
        on_recv(m, e);
        break;
    case MLSYS_EV_MARK:
        if (!strcmp(e->label, "chunks") && m->rank_call[r] >= 0) {
            call_state *cs = &m->calls[m->rank_call[r]];
            sm_cell *c = cs->cells + (size_t)r * (size_t)m->n;
            for (int j = 0; j < e->tag && j < 4; j++) {
                int k = e->chunk + j;
                if (k < 0 || k >= m->n)
                    continue;
                c[k].val = e->val[j];
                c[k].has_val = 1;
            }
            if (e->step == -2)
                memcpy(cs->begin + (size_t)r * (size_t)m->n, c, (size_t)m->n * sizeof *c);
        } else if (!strcmp(e->label, "values") && e->coll < 0 && m->rank_call[r] < 0 &&
                   e->chunk == 0 && e->tag >= 1) {
            m->pval[r] = e->val[0];
            m->has_pval[r] = 1;
        }
        break;
    default:
        break;
    }
}

void sm_rank_ended(stepmodel *m, int r)
{
    if (r < 0 || r >= m->n || m->ended[r])
        return;
    for (int k = m->rank_frame[r]; k < m->nframes; k++)
        leave_frame(m, r, k);
    m->ended[r] = 1;
    update_complete(m);
}

void sm_finish(stepmodel *m)
{
    for (int r = 0; r < m->n; r++)
        sm_rank_ended(m, r);
}

/* ---- reading ---- */

int sm_nranks(const stepmodel *m) { return m->n; }
int sm_nframes(const stepmodel *m) { return m->nframes; }
int sm_ncomplete(const stepmodel *m) { return m->ncomplete; }
int sm_ncalls(const stepmodel *m) { return m->ncalls; }

const sm_frame *sm_frame_at(const stepmodel *m, int k)
{
    if (k < 0 || k >= m->nframes)
        return NULL;
    return &m->frames[k].f;
}

const sm_send *sm_frame_send(const stepmodel *m, int k, int i)
{
    if (k < 0 || k >= m->nframes || i < 0 || i >= m->frames[k].f.nsend)
        return NULL;
    return &m->sends[m->frames[k].sidx[i]];
}

const sm_call *sm_call_at(const stepmodel *m, int i)
{
    return i >= 0 && i < m->ncalls ? &m->calls[i].c : NULL;
}

const sm_send *sm_send_at(const stepmodel *m, int i)
{
    return i >= 0 && i < m->nsends ? &m->sends[i] : NULL;
}

const sm_cell *sm_cells(const stepmodel *m, int k, int r)
{
    if (k < 0 || k >= m->nframes || r < 0 || r >= m->n)
        return NULL;
    const frame_state *fs = &m->frames[k];
    if (!fs->done[r] && m->rank_frame[r] == k && fs->f.data_call >= 0)
        return m->calls[fs->f.data_call].cells + (size_t)r * (size_t)m->n;   /* so far */
    if (!fs->snap || !fs->done[r])
        return NULL;
    return fs->snap + (size_t)r * (size_t)m->n;
}

int sm_p2p_value(const stepmodel *m, int k, int r, double *v)
{
    if (k < 0 || k >= m->nframes || r < 0 || r >= m->n || !m->frames[k].done[r] ||
        !m->frames[k].has_pval[r])
        return 0;
    *v = m->frames[k].pval[r];
    return 1;
}

int sm_call_chunks(const stepmodel *m, int call)
{
    const sm_call *c = sm_call_at(m, call);
    if (!c)
        return m->n;
    int k = 0;
    for (int j = 0; j < m->n; j++) {
        uint64_t off, len;
        chunk_range(c, m->n, j, &off, &len);
        k += len > 0;
    }
    return k > 0 ? k : m->n;
}

int sm_call_steps(const stepmodel *m, int call)
{
    const sm_call *c = sm_call_at(m, call);
    if (!c)
        return -1;
    if (c->ended >= m->n)
        return c->last_step + 1;
    int n = m->n, lg = 0;
    while ((1 << lg) < n)
        lg++;
    int pow2 = (1 << lg) == n;
    if (!strcmp(c->algo, "ring")) {
        if (c->coll == MLSYS_COLL_ALLREDUCE)
            return 2 * (n - 1);
        if (c->coll == MLSYS_COLL_ALLGATHER || c->coll == MLSYS_COLL_REDUCE_SCATTER)
            return n - 1;
        if (c->coll == MLSYS_COLL_REDUCE)
            return n;
    }
    if (pow2 && !strcmp(c->algo, "recursive_doubling"))
        return lg;
    if (!strcmp(c->algo, "direct"))
        return c->coll == MLSYS_COLL_ALLREDUCE || c->coll == MLSYS_COLL_BARRIER ? 2 : 1;
    if (!strcmp(c->algo, "dissemination"))
        return lg;
    return -1;
}

void sm_mask_text(uint64_t mk, int n, int w, int ascii, char *out, size_t len)
{
    int pc = __builtin_popcountll(mk);
    if (mk == 0) {
        snprintf(out, len, "%s", ascii ? "." : "·");
        return;
    }
    if (pc == n && n > 1) {
        snprintf(out, len, "all");
        return;
    }
    char t[64];
    int used = 0;
    for (int s = 0; s < 64 && used < (int)sizeof t - 4; s++)
        if (mk >> s & 1)
            used += snprintf(t + used, sizeof t - (size_t)used, "%s%d", used ? "+" : "", s);
    if ((int)strlen(t) <= w) {
        snprintf(out, len, "%s", t);
        return;
    }
    snprintf(out, len, "%d/%d", pc, n);
}

void sm_caption(const stepmodel *m, int k, int ascii, char *out, size_t n)
{
    const sm_frame *f = sm_frame_at(m, k);
    out[0] = 0;
    if (!f)
        return;
    int used = 0;
    const char *arrow = ascii ? "->" : "→";
    if (k == 0) {
        used = snprintf(out, n, "before the first step");
    } else if (f->call >= 0) {
        const sm_call *c = sm_call_at(m, f->call);
        int steps = sm_call_steps(m, f->call);
        if (steps > 0)
            used = snprintf(out, n, "%s step %d of %d (%s)", mlsys_coll_name((mlsys_coll)c->coll),
                            f->step + 1, steps, f->label);
        else
            used = snprintf(out, n, "%s step %d (%s)", mlsys_coll_name((mlsys_coll)c->coll),
                            f->step + 1, f->label);
    } else {
        used = snprintf(out, n, "lab step %d: %s", f->step, f->label);
    }
    if (used < 0 || (size_t)used >= n)
        return;
    if (f->nsend == 0) {
        snprintf(out + used, n - (size_t)used, f->complete || k == 0 ? ": no messages" : "");
        return;
    }
    const sm_send *s = sm_frame_send(m, k, 0);
    const sm_call *c = s->call >= 0 ? sm_call_at(m, s->call) : NULL;
    char what[96];
    if (c && c->coll == MLSYS_COLL_BARRIER) {
        snprintf(what, sizeof what, "a signal (no data)");
    } else if (c && s->chunks) {
        int first = __builtin_ctzll(s->chunks), cnt = __builtin_popcountll(s->chunks);
        char mt[40];
        sm_mask_text(s->mask, m->n, 12, ascii, mt, sizeof mt);
        if (cnt == m->n)
            snprintf(what, sizeof what, "its whole buffer (%s)", mt);
        else if (cnt == 1)
            snprintf(what, sizeof what, "chunk %d (%s)", first, mt);
        else
            snprintf(what, sizeof what, "%d chunks", cnt);
    } else if (s->has_val) {
        char v[32];
        snprintf(v, sizeof v, "%g", s->val);
        snprintf(what, sizeof what, "%s", v);
    } else {
        char b[32];
        snprintf(b, sizeof b, "%llu B", (unsigned long long)s->bytes);
        snprintf(what, sizeof what, "%s", b);
    }
    used += snprintf(out + used, n - (size_t)used, ": rank %d sends %s to rank %d", s->src, what,
                     s->dst);
    if (f->nsend > 1 && used > 0 && (size_t)used < n)
        snprintf(out + used, n - (size_t)used, "; %d message%s in all (%s on the arrows)",
                 f->nsend, f->nsend == 1 ? "" : "s", arrow);
}

int sm_call_why(const stepmodel *m, int call, char *out, size_t n)
{
    const sm_call *c = sm_call_at(m, call);
    out[0] = 0;
    if (!c)
        return 0;
    mlsys_coll coll = (mlsys_coll)c->coll;
    const char *why = NULL;
    const char *ruled = mlsys_algo_rule(coll, m->n, c->bytes, &why);
    const char *const *names = mlsys_algo_names(coll);
    int nn = 0;
    while (names && names[nn])
        nn++;
    const char *wanted = c->wanted >= 0 && c->wanted < nn ? names[c->wanted] : NULL;
    if (c->by == MLSYS_ALGO_BY_USER || c->by == MLSYS_ALGO_BY_LAB) {
        const char *who = c->by == MLSYS_ALGO_BY_USER ? "you chose" : "the lab chose";
        if (wanted && strcmp(wanted, c->algo)) {
            snprintf(out, n, "note: %s %s, which does not fit %d ranks and this size, so %s "
                     "ran instead", who, wanted, m->n, c->algo);
            return 1;
        }
        snprintf(out, n, "why: %s %s%s", who, c->algo, c->by == MLSYS_ALGO_BY_USER ?
                 " (--algo)" : "");
        return 0;
    }
    if (c->by == MLSYS_ALGO_BY_RULE_NONE) {
        snprintf(out, n, "why: %s has no algorithm of the name you chose, so its rule chose: "
                 "%s", mlsys_coll_name(coll), why ? why : "?");
        return 0;
    }
    if (c->by == MLSYS_ALGO_BY_RULE || !ruled || !strcmp(ruled, c->algo)) {
        if (ruled && strcmp(ruled, c->algo)) {
            snprintf(out, n, "note: the rule picks %s (%s), which does not fit; %s ran", ruled,
                     why ? why : "", c->algo);
            return 1;
        }
        snprintf(out, n, "why: %s", why ? why : "?");
        return 0;
    }
    /* a trace from before the events said who chose */
    snprintf(out, n, "why: %s ran (this trace does not say who chose it; the rule picks %s)",
             c->algo, ruled);
    return 0;
}

int sm_next_call_frame(const stepmodel *m, int k, int dir)
{
    int cur = k >= 0 && k < m->nframes ? m->frames[k].f.call : -1;
    for (int i = k + dir; i >= 0 && i < m->ncomplete; i += dir) {
        int c = m->frames[i].f.call;
        if (c >= 0 && c != cur && m->calls[c].c.first_frame == i)
            return i;
    }
    return -1;
}

uint64_t sm_messages(const stepmodel *m, int upto, uint64_t *bytes)
{
    uint64_t cnt = 0, b = 0;
    for (int k = 0; k <= upto && k < m->nframes; k++)
        for (int i = 0; i < m->frames[k].f.nsend; i++) {
            cnt++;
            b += m->sends[m->frames[k].sidx[i]].bytes;
        }
    if (bytes)
        *bytes = b;
    return cnt;
}
