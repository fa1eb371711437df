/* trace.c - typed events: each rank writes fixed-size records into its own single-producer
 * ring in the job segment; the runner drains the rings. A full ring makes the rank wait for
 * the runner (back-pressure); only if the runner stops draining for seconds are events
 * dropped, and then they are counted. Also the step gate, and the writer of trace files
 * (Chrome Trace Event JSON, put in place atomically). The collector and the reader are
 * trace_collect.c and trace_read.c (trace.h). */
#include "internal.h"
#include "trace.h"
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <math.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define BACKPRESSURE_NS 2000000000ull    /* wait this long for room before dropping */

int mlsys_tracing(const mlsys_comm *c)
{
    return c->w->tracing;
}

/* t_ns = 0: stamped now */
static void emit_at(mlsys_comm *c, const mlsys_event *ev, uint64_t t_ns)
{
    if (!c->w->tracing)
        return;
    if (!t_ns)
        t_ns = mlsys_now_ns();
    if (c->w->emit) {
        mlsys_event e = *ev;
        e.t_ns = t_ns;
        e.rank = c->w->rank;
        c->w->emit(c->w, &e);
        return;
    }
    shm_header *h = c->w->h;
    if (!h)
        return;
    shm_ring *ring = shm_ring_of(h, c->w->rank);
    uint64_t head = atomic_load_explicit(&ring->head, memory_order_relaxed);
    uint64_t waited_since = 0;
    while (head - atomic_load_explicit(&ring->tail, memory_order_acquire) >= h->ring_cap) {
        uint64_t now = mlsys_now_ns();
        if (!waited_since)
            waited_since = now;
        if (now - waited_since > BACKPRESSURE_NS || atomic_load(&h->abort)) {
            atomic_fetch_add(&ring->lost, 1);
            return;
        }
        atomic_fetch_add(&h->runner_bell, 1);
        struct timespec ts = {0, 200000};
        nanosleep(&ts, NULL);
    }
    mlsys_event *slot = &shm_ring_events(ring)[head % h->ring_cap];
    *slot = *ev;
    slot->t_ns = t_ns;
    slot->rank = c->w->rank;
    atomic_store_explicit(&ring->head, head + 1, memory_order_release);
}

void mlsys_emit(mlsys_comm *c, const mlsys_event *ev)
{
    emit_at(c, ev, 0);
}

static void ev_init(mlsys_comm *c, mlsys_event *e, int kind)
{
    memset(e, 0, sizeof *e);
    e->kind = (int16_t)kind;
    e->peer = -1;
    e->tag = -1;
    e->coll = (int16_t)c->cur_coll;
    e->algo = (int16_t)c->cur_algo;
    e->op = -1;
    e->step = -1;
    e->chunk = -1;
    e->dtype = -1;
}

void trace_ev(mlsys_comm *c, int kind, int peer_world, int tag, uint64_t bytes, uint64_t msg_id,
              uint64_t span_id)
{
    mlsys_event e;
    ev_init(c, &e, kind);
    e.peer = peer_world;
    e.tag = tag;
    e.bytes = bytes;
    e.msg_id = msg_id;
    e.span_id = span_id;
    mlsys_emit(c, &e);
}

static void labelled(mlsys_comm *c, int kind, int step, const char *label)
{
    mlsys_event e;
    ev_init(c, &e, kind);
    e.step = step;
    if (label)
        snprintf(e.label, sizeof e.label, "%s", label);
    mlsys_emit(c, &e);
}

void mlsys_compute_begin(mlsys_comm *c, const char *label)
{
    if (mlsys_tracing(c))
        labelled(c, MLSYS_EV_COMPUTE_BEGIN, -1, label);
}

void mlsys_compute_end(mlsys_comm *c, const char *label)
{
    if (mlsys_tracing(c))
        labelled(c, MLSYS_EV_COMPUTE_END, -1, label);
}

void mlsys_compute_span(mlsys_comm *c, int row, uint64_t t0_ns, uint64_t t1_ns,
                        const char *label)
{
    if (!c || !mlsys_tracing(c))
        return;
    mlsys_event e;
    ev_init(c, &e, MLSYS_EV_COMPUTE_BEGIN);
    e.tag = row;
    if (label)
        snprintf(e.label, sizeof e.label, "%s", label);
    emit_at(c, &e, t0_ns ? t0_ns : 1);
    e.kind = MLSYS_EV_COMPUTE_END;
    emit_at(c, &e, t1_ns > t0_ns ? t1_ns : t0_ns ? t0_ns : 1);
}

/* In gated mode every rank counts the steps it has passed and waits until the viewer's
 * credit covers the next one; the viewer grants one step to all ranks at a time. */
typedef struct gate_wait { shm_header *h; uint64_t want; } gate_wait;

static int gate_open(void *arg)
{
    const gate_wait *g = arg;
    return atomic_load(&g->h->gate_credit) >= g->want || atomic_load(&g->h->abort);
}

int mlsys_step(mlsys_comm *c, int step, const char *label)
{
    mlsys_world *w = c->w;
    if (c->in_coll && c->no_coll_steps)
        return 0;           /* a collective's step on a communicator that marks none */
    if (mlsys_tracing(c))
        labelled(c, MLSYS_EV_STEP, step, label);
    if (!w->gated || !w->h)
        return 0;
    shm_rank_state *s = shm_rank(w->h, w->rank);
    gate_wait g = {w->h, atomic_fetch_add(&s->gate_passed, 1) + 1};
    atomic_store(&s->gate_step, step);
    atomic_store(&s->wait_kind, WAIT_GATE);
    while (atomic_load(&w->h->gate_credit) < g.want) {
        if (atomic_load(&w->h->abort)) {
            atomic_store(&s->wait_kind, WAIT_NONE);
            mlsys_set_error(c, MLSYS_ERR_ABORTED, "rank %d: job aborted at step %d", c->rank, step);
            return MLSYS_ERR_ABORTED;
        }
        shm_bell_wait(w->h, w->rank, gate_open, &g, 100, w->spin_ns);
    }
    atomic_store(&s->wait_kind, WAIT_NONE);
    if (mlsys_tracing(c))           /* the gate opened: the time before was a wait */
        labelled(c, MLSYS_EV_MARK, step, "gate");
    return 0;
}

int mlsys_gated(const mlsys_comm *c)
{
    return c && c->w->gated && c->w->h;
}

void mlsys_set_coll_steps(mlsys_comm *c, int on)
{
    if (c)
        c->no_coll_steps = !on;
}

/* Runner side: move up to max events out of the rings, rank by rank. */
int trace_drain(shm_header *h, int world, mlsys_event *out, size_t max)
{
    size_t n = 0;
    if (!h->ring_cap)
        return 0;
    for (int r = 0; r < world && n < max; r++) {
        shm_ring *ring = shm_ring_of(h, r);
        uint64_t tail = atomic_load_explicit(&ring->tail, memory_order_relaxed);
        uint64_t head = atomic_load_explicit(&ring->head, memory_order_acquire);
        while (tail < head && n < max)
            out[n++] = shm_ring_events(ring)[tail++ % h->ring_cap];
        atomic_store_explicit(&ring->tail, tail, memory_order_release);
    }
    return (int)n;
}

/* ---- Chrome Trace Event JSON: a complete span per op, flow arrows per message ---- */

static const char *const kind_names[MLSYS_EV_KIND_COUNT] = {
    "send", "send_end", "recv", "recv_end", "reduce", "collective", "collective_end", "step",
    "compute", "compute_end", "mem", "flow", "mark",
};

const char *mlsys_event_kind_name(int kind)
{
    return kind >= 0 && kind < MLSYS_EV_KIND_COUNT ? kind_names[kind] : "?";
}

static void json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\')
            fprintf(f, "\\%c", ch);
        else if (ch < 0x20)
            fprintf(f, "\\u%04x", ch);
        else
            fputc(ch, f);
    }
    fputc('"', f);
}

/* A non-blocking collective runs on the rank's progress thread (core/icoll.c labels its spans
 * "<algo> async"): it overlaps the caller's compute spans without nesting in them, so it gets
 * a track of its own, MLSYS_TRACE_TID_ASYNC + rank (the reader maps it back). A compute span
 * of the rank's second thread (tag 1, mlsys_compute_span) overlaps its compute the same way:
 * track MLSYS_TRACE_TID_HOST + rank. */
static int trace_async_coll(const mlsys_event *e)
{
    size_t n = strnlen(e->label, sizeof e->label);
    return (e->kind == MLSYS_EV_COLL_BEGIN || e->kind == MLSYS_EV_COLL_END) && n >= 5 &&
           !memcmp(e->label + n - 5, "async", 5);
}

static const char *const mem_op_names[MLSYS_MEM_OP_COUNT] = {
    "pool", "owner", "alloc", "share", "free", "evict", "cow", "usage", "write", "busy",
};

static const char *const flow_what_names[MLSYS_FLOW_WHAT_COUNT] = {
    "role", "phase", "tokens", "logprobs", "rewards", "values", "advantages", "gradients",
    "weights", "requests", "step",
};

const char *mlsys_mem_op_name(int op)
{
    return op >= 0 && op < MLSYS_MEM_OP_COUNT ? mem_op_names[op] : "?";
}

const char *mlsys_flow_what_name(int what)
{
    return what >= 0 && what < MLSYS_FLOW_WHAT_COUNT ? flow_what_names[what] : "?";
}

/* The span name Perfetto shows for a memory or flow record ("alloc block 5", "tokens 0->1"). */
static void typed_name(const mlsys_event *e, char *name, size_t n)
{
    int lab = e->label[0] != 0;
    if (e->kind == MLSYS_EV_MEM) {
        const mlsys_mem_info *m = &e->mem;
        int k = snprintf(name, n, "%s", mlsys_mem_op_name(m->op));
        if (m->block >= 0 && (size_t)k < n)
            k += snprintf(name + k, n - (size_t)k, " block %d", m->block);
        if (lab && (size_t)k < n)
            snprintf(name + k, n - (size_t)k, " %s", e->label);
        return;
    }
    const mlsys_flow_info *f = &e->flow;
    if (f->what == MLSYS_FLOW_ROLE || f->what == MLSYS_FLOW_PHASE || f->what == MLSYS_FLOW_STEP)
        snprintf(name, n, "%s %s", mlsys_flow_what_name(f->what), e->label);
    else
        snprintf(name, n, "%s %d->%d%s%s", mlsys_flow_what_name(f->what), f->from, f->to,
                 lab ? " " : "", e->label);
}

/* The arguments that rebuild an event in a replay: the message fields, or the memory or flow
 * record that shares their place in the union (mlsys.h). */
static void write_args(FILE *f, const mlsys_event *e)
{
    fprintf(f, ",\"args\":{\"bytes\":%llu,", (unsigned long long)e->bytes);
    if (e->kind == MLSYS_EV_MEM) {
        const mlsys_mem_info *m = &e->mem;
        fprintf(f, "\"mem\":{\"pool\":%d,\"op\":%d,\"cached\":%u,\"block\":%d,\"owner\":%d,"
                   "\"refs\":%d,\"index\":%d,\"aux\":%d},", m->pool, m->op, m->cached, m->block,
                m->owner, m->refs, m->index, m->aux);
    } else if (e->kind == MLSYS_EV_FLOW) {
        const mlsys_flow_info *w = &e->flow;
        fprintf(f, "\"flow\":{\"from\":%d,\"to\":%d,\"what\":%d,\"phase\":%d,\"count\":%d,"
                   "\"version\":%d,\"seq\":%d,\"spare\":%d},", w->from, w->to, w->what,
                w->phase, w->count, w->version, w->seq, w->spare);
    } else {
        fprintf(f, "\"peer\":%d,\"tag\":%d,", e->peer, e->tag);
    }
    fprintf(f, "\"step\":%d,\"chunk\":%d,\"dtype\":%d,\"op\":%d,\"coll\":%d,\"algo\":%d,"
               "\"val\":[", e->step, e->chunk, e->dtype, e->op, e->coll, e->algo);
    for (int k = 0; k < 4; k++) {   /* JSON has no NaN: null stands for it (and infinities) */
        if (isfinite(e->val[k]))
            fprintf(f, "%s%.17g", k ? "," : "", e->val[k]);
        else
            fprintf(f, "%snull", k ? "," : "");
    }
    fprintf(f, "]");
    if ((e->kind == MLSYS_EV_MEM || e->kind == MLSYS_EV_FLOW) && e->label[0]) {
        fprintf(f, ",\"label\":");
        json_str(f, e->label);
    }
    fprintf(f, "}}");
}

/* Collectives and compute nest on the rank's track, so they become "B"/"E" spans; p2p ops
 * overlap (isend + irecv), so they become async "b"/"e" spans keyed by span_id; each message
 * gets a flow arrow ("s" at its send, "f" at its receive's end). Memory and flow records are
 * instants with their typed fields in args (a pool's USAGE also becomes a counter track);
 * output lines are instants of category "output" whose args hold the text. */
int mlsys_trace_write_json_lines(const char *path, const mlsys_event *ev, size_t n,
                                 const mlsys_trace_line *lines, size_t nl, uint64_t t0_ns)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return -1;
    fprintf(f, "{\"displayTimeUnit\":\"ns\",\"traceEvents\":[\n");
    fprintf(f, "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":0,\"args\":{\"name\":\"mlsys-lab job\"}}");
    for (size_t i = 0; i < n; i++) {
        const mlsys_event *e = &ev[i];
        double ts = (double)(e->t_ns - t0_ns) / 1000.0;
        const char *ph;
        char name[80];
        int async = 0, typed = e->kind == MLSYS_EV_MEM || e->kind == MLSYS_EV_FLOW;
        switch (e->kind) {
        case MLSYS_EV_SEND_BEGIN: case MLSYS_EV_RECV_BEGIN: ph = "b"; async = 1; break;
        case MLSYS_EV_SEND_END: case MLSYS_EV_RECV_END: ph = "e"; async = 1; break;
        case MLSYS_EV_COMPUTE_BEGIN: case MLSYS_EV_COLL_BEGIN: ph = "B"; break;
        case MLSYS_EV_COMPUTE_END: case MLSYS_EV_COLL_END: ph = "E"; break;
        default: ph = "i"; break;
        }
        switch (e->kind) {
        case MLSYS_EV_SEND_BEGIN: case MLSYS_EV_SEND_END:
            snprintf(name, sizeof name, "send to %d", e->peer); break;
        case MLSYS_EV_RECV_BEGIN: case MLSYS_EV_RECV_END:
            snprintf(name, sizeof name, "recv from %d", e->peer); break;
        case MLSYS_EV_COLL_BEGIN: case MLSYS_EV_COLL_END:
            snprintf(name, sizeof name, "%s %s", e->coll >= 0 ? mlsys_coll_name((mlsys_coll)e->coll)
                     : "collective", e->label); break;
        case MLSYS_EV_STEP:
            snprintf(name, sizeof name, "step %d %s", e->step, e->label); break;
        case MLSYS_EV_MEM: case MLSYS_EV_FLOW:
            typed_name(e, name, sizeof name); break;
        default:
            snprintf(name, sizeof name, "%s", e->label[0] ? e->label : mlsys_event_kind_name(e->kind));
        }
        fprintf(f, ",\n{\"name\":");
        json_str(f, name);
        fprintf(f, ",\"cat\":\"%s\",\"ph\":\"%s\",\"ts\":%.3f,\"pid\":0,\"tid\":%d",
                async ? "p2p" : mlsys_event_kind_name(e->kind), ph, ts,
                trace_async_coll(e) ? MLSYS_TRACE_TID_ASYNC + e->rank
                : (e->kind == MLSYS_EV_COMPUTE_BEGIN || e->kind == MLSYS_EV_COMPUTE_END) &&
                          e->tag == 1 ? MLSYS_TRACE_TID_HOST + e->rank : e->rank);
        if (async)
            fprintf(f, ",\"id\":\"0x%llx\"", (unsigned long long)e->span_id);
        if (ph[0] == 'i')
            fprintf(f, ",\"s\":\"t\"");
        write_args(f, e);    /* everything a replay needs to rebuild the event */
        if (!typed && e->msg_id && (e->kind == MLSYS_EV_SEND_BEGIN || e->kind == MLSYS_EV_RECV_END))
            fprintf(f, ",\n{\"name\":\"message\",\"cat\":\"msg\",\"ph\":\"%s\",\"id\":%llu,"
                       "\"ts\":%.3f,\"pid\":0,\"tid\":%d%s}",
                    e->kind == MLSYS_EV_SEND_BEGIN ? "s" : "f", (unsigned long long)e->msg_id, ts,
                    e->rank, e->kind == MLSYS_EV_RECV_END ? ",\"bp\":\"e\"" : "");
        if (e->kind == MLSYS_EV_MEM && e->mem.op == MLSYS_MEM_USAGE) {
            char track[64];
            if (e->label[0])
                snprintf(track, sizeof track, "%s bytes", e->label);
            else
                snprintf(track, sizeof track, "pool %d bytes", e->mem.pool);
            fprintf(f, ",\n{\"name\":");
            json_str(f, track);
            fprintf(f, ",\"cat\":\"mem_usage\",\"ph\":\"C\",\"ts\":%.3f,\"pid\":0,\"tid\":%d,"
                       "\"args\":{\"bytes\":%llu}}", ts, e->rank, (unsigned long long)e->bytes);
        }
    }
    for (size_t i = 0; i < nl; i++) {
        const mlsys_trace_line *l = &lines[i];
        if (l->rank < 0 || !l->text)
            continue;
        fprintf(f, ",\n{\"name\":\"output\",\"cat\":\"output\",\"ph\":\"i\",\"s\":\"t\","
                   "\"ts\":%.3f,\"pid\":0,\"tid\":%d,\"args\":{\"stream\":\"%s\",\"text\":",
                (double)(l->t_ns > t0_ns ? l->t_ns - t0_ns : 0) / 1000.0, l->rank,
                l->is_err ? "stderr" : "stdout");
        json_str(f, l->text);
        fprintf(f, "}}");
    }
    fprintf(f, "\n]}\n");
    return fclose(f) == 0 ? 0 : -1;
}

int mlsys_trace_write_json(const char *path, const mlsys_event *ev, size_t n, uint64_t t0_ns)
{
    return mlsys_trace_write_json_lines(path, ev, n, NULL, 0, t0_ns);
}

int mlsys_trace_prepare(const char *path, char *tmp, size_t n, char *err, size_t errlen)
{
    struct stat st;
    tmp[0] = 0;
    if (!*path) {
        snprintf(err, errlen, "--trace needs a file name");
        return 2;
    }
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
        snprintf(err, errlen, "--trace %s is a directory: name a file in it", path);
        return 2;
    }
    if (stat(path, &st) == 0 && !S_ISREG(st.st_mode)) {
        snprintf(err, errlen, "--trace %s is not a regular file (a device or a pipe)", path);
        return 2;
    }
    if (stat(path, &st) == 0 && access(path, W_OK) != 0) {
        snprintf(err, errlen, "--trace %s: cannot write it: %s", path, strerror(errno));
        return 2;
    }
    if (snprintf(tmp, n, "%s.tmp-%d", path, (int)getpid()) >= (int)n) {
        snprintf(err, errlen, "--trace %s: the name is too long", path);
        tmp[0] = 0;
        return 2;
    }
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) {
        snprintf(err, errlen, "--trace %s: cannot create a file there: %s", path, strerror(errno));
        tmp[0] = 0;
        return 2;
    }
    close(fd);
    return 0;
}

int mlsys_trace_commit(const char *path, const char *tmp, const mlsys_trace *t, uint64_t t0_ns)
{
    if (mlsys_trace_write_json_lines(tmp, t->ev, t->n, t->lines, t->nl, t0_ns) != 0 ||
        rename(tmp, path) != 0) {
        unlink(tmp);
        return -1;
    }
    return 0;
}

/* Memory and flow records: the typed halves of the event union (mlsys.h). val[0] is the
 * value that stands for the block or the batch, NaN when there is none. */
static void typed_emit(mlsys_comm *c, int kind, const void *info, size_t n, uint64_t bytes,
                       const char *label, double value)
{
    if (!c || !mlsys_tracing(c))
        return;
    mlsys_event e;
    ev_init(c, &e, kind);
    e.coll = -1;
    e.algo = -1;
    memcpy(&e.mem, info, n);       /* mem and flow start at the same place in the union */
    e.bytes = bytes;
    e.val[0] = value;
    if (label)
        snprintf(e.label, sizeof e.label, "%s", label);
    mlsys_emit(c, &e);
}

void mlsys_emit_mem(mlsys_comm *c, const mlsys_mem_info *m, uint64_t bytes, const char *label)
{
    typed_emit(c, MLSYS_EV_MEM, m, sizeof *m, bytes, label, NAN);
}

void mlsys_emit_flow(mlsys_comm *c, const mlsys_flow_info *f, uint64_t bytes, const char *label)
{
    typed_emit(c, MLSYS_EV_FLOW, f, sizeof *f, bytes, label, NAN);
}

void mlsys_emit_mem_value(mlsys_comm *c, const mlsys_mem_info *m, uint64_t bytes,
                          const char *label, double value)
{
    typed_emit(c, MLSYS_EV_MEM, m, sizeof *m, bytes, label, value);
}

void mlsys_emit_flow_value(mlsys_comm *c, const mlsys_flow_info *f, uint64_t bytes,
                           const char *label, double value)
{
    typed_emit(c, MLSYS_EV_FLOW, f, sizeof *f, bytes, label, value);
}
