/* shm_p2p.c - the shared-memory transport's point-to-point. A send posts a descriptor in a
 * slot of the (sender, receiver) channel: small messages carry their bytes inline, large
 * ones the place of the sender's buffer: an offset in its shared heap (the receiver copies
 * straight from it) or an address (read with process_vm_readv). The receiver marks the slot
 * done, and only then does the send complete: synchronous sends, zero-copy isends. The
 * few-byte eager messages of collectives take the fast box instead (shm_fbox.c). Every
 * wait drives all pending requests, so an irecv completes while its rank blocks in a send. */
#include "internal.h"
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#define SCRATCH_BYTES (256 * 1024)    /* recv-reduce bounce for process_vm_readv: stays in L2 */

/* ---- sender side ---- */

/* Small messages of collectives are eager: the send completes once its bytes are in the
 * slot, as MPI's eager protocol, which halves a small collective's latency (one hop instead
 * of a round trip). User sends stay synchronous: chapter 2's deadlock must stay real.
 * Collective contexts are the odd ones (a communicator's ctx + 1). */
static int eager_ok(const mlsys_request *r)
{
    return ctx_is_coll(r->ctx) && r->bytes <= SHM_INLINE;
}

/* Sends post in sequence order: a slot freed between two attempts must not let a younger
 * message to the same peer go first (the receiver relies on it, see progress_recv). Is a
 * send to dst, at o or older, still waiting to be posted? */
int shm_send_queued(const mlsys_request *o, int dst)
{
    for (; o; o = o->prev)
        if (o->kind == REQ_SEND && o->slot < 0 && o->peer_world == dst)
            return 1;
    return 0;
}

static int try_post(mlsys_request *r)
{
    mlsys_world *w = r->comm->w;
    if (fbox_fits(r)) {
        if (!fbox_post(r))
            return 0;
        r->slot = SHM_SLOTS;    /* posted, in the fast box */
        return 1;
    }
    shm_chan *ch = shm_channel(w->h, w->rank, r->peer_world);
    /* Our own count of slot posts: the channel's copy is a line the receiver keeps reading,
     * and loading it cost 160 ns here. */
    uint64_t posted = w->peers[r->peer_world].slot_posts;
    for (int k = 0; k < SHM_SLOTS; k++) {
        int i = (int)((posted + (uint64_t)k) % SHM_SLOTS);   /* round robin: see progress_recv */
        shm_slot *s = &ch->slot[i];
        uint32_t st = atomic_load_explicit(&s->state, memory_order_acquire);
        if (st != SLOT_FREE && !(st == SLOT_DONE && s->eager))
            continue;
        s->ctx = r->ctx;
        s->tag = r->tag;
        s->pid = (int32_t)w->pid;
        s->seq = r->seq;
        s->bytes = r->bytes;
        s->status = 0;
        s->eager = (uint8_t)eager_ok(r);
        if (r->bytes <= SHM_INLINE) {
            if (r->bytes)
                memcpy(s->u.data, r->sbuf, r->bytes);
            s->in_heap = 0;
        } else {
            uint64_t off;
            s->in_heap = (uint8_t)heap_offset(r->sbuf, r->bytes, &off);
            s->u.addr = s->in_heap ? off : (uint64_t)(uintptr_t)r->sbuf;
        }
        atomic_store_explicit(&s->state, SLOT_POSTED, memory_order_release);
        atomic_store_explicit(&ch->posted, ++w->peers[r->peer_world].slot_posts,
                              memory_order_release);
        shm_bell_ring(w->h, r->peer_world);
        r->slot = i;
        return 1;
    }
    return 0;
}

static void progress_send(mlsys_request *r)
{
    mlsys_world *w = r->comm->w;
    if (r->slot < 0) {
        if (shm_send_queued(r->prev, r->peer_world))
            return;
        if (!try_post(r))
            return;
        if (eager_ok(r)) {
            req_complete(r, 0);
            return;
        }
    }
    shm_slot *s = &shm_channel(w->h, w->rank, r->peer_world)->slot[r->slot];
    if (atomic_load_explicit(&s->state, memory_order_acquire) != SLOT_DONE)
        return;
    int st = s->status;
    atomic_store_explicit(&s->state, SLOT_FREE, memory_order_release);
    if (st)
        mlsys_set_error(r->comm, st, "rank %d: send to rank %d tag %d (%zu B): the receiver's "
                        "buffer is smaller than the message", r->comm->rank, r->peer_world,
                        r->tag, r->bytes);
    req_complete(r, st);
}

/* ---- receiver side ---- */

static int read_remote(mlsys_world *w, pid_t pid, void *dst, uint64_t addr, size_t n)
{
    if (pid == w->pid) {
        memcpy(dst, (const void *)(uintptr_t)addr, n);
        return 0;
    }
    while (n) {
        struct iovec l = {dst, n}, rv = {(void *)(uintptr_t)addr, n};
        ssize_t got = process_vm_readv(pid, &l, 1, &rv, 1, 0);
        if (got < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        if (got == 0)
            return -EFAULT;
        dst = (char *)dst + got;
        addr += (uint64_t)got;
        n -= (size_t)got;
    }
    (void)w;
    return 0;
}

/* Copy (or reduce) the slot's message into the request's buffer. */
static int deliver(mlsys_request *r, shm_slot *s)
{
    mlsys_world *w = r->comm->w;
    size_t n = (size_t)s->bytes;
    if (n > SHM_INLINE && s->in_heap) {     /* straight from the sender's heap */
        const void *src = heap_peer(w, r->peer_world, s->u.addr);
        if (!src)
            return -EFAULT;
        if (r->op == MLSYS_OP_NONE)
            mlsys_copy_large(r->rbuf, src, n);
        else
            mlsys_reduce_large(r->rbuf, r->sbuf, src, n / dt_size(r->dt), r->dt, r->op);
        return 0;
    }
    if (r->op == MLSYS_OP_NONE) {
        if (n <= SHM_INLINE)
            memcpy(r->rbuf, s->u.data, n);
        else
            return read_remote(w, s->pid, r->rbuf, s->u.addr, n);
        return 0;
    }
    size_t es = dt_size(r->dt);
    if (n <= SHM_INLINE) {
        mlsys_reduce_local(r->rbuf, r->sbuf, s->u.data, n / es, r->dt, r->op);
        return 0;
    }
    if (s->pid == w->pid) {
        mlsys_reduce_local(r->rbuf, r->sbuf, (const void *)(uintptr_t)s->u.addr, n / es, r->dt,
                           r->op);
        return 0;
    }
    if (!w->scratch) {
        w->scratch_len = SCRATCH_BYTES;
        w->scratch = mlsys_alloc_aligned(w->scratch_len);
    }
    size_t piece = w->scratch_len / es * es;
    for (size_t off = 0; off < n; off += piece) {
        size_t len = n - off < piece ? n - off : piece;
        int rc = read_remote(w, s->pid, w->scratch, s->u.addr + off, len);
        if (rc)
            return rc;
        mlsys_reduce_local((char *)r->rbuf + off, (const char *)r->sbuf + off, w->scratch,
                           len / es, r->dt, r->op);
    }
    return 0;
}

/* 0, or MLSYS_ERR_TRUNCATE (and the communicator's message) when n bytes do not fit. */
static int fits(mlsys_comm *c, size_t cap, mlsys_op op, int src, int tag, uint64_t n)
{
    if (n <= cap && (op == MLSYS_OP_NONE || n == cap))
        return 0;
    mlsys_set_error(c, MLSYS_ERR_TRUNCATE, "rank %d: recv from rank %d tag %d: message of "
                    "%llu B does not fit the %zu B buffer", c->rank, src, tag,
                    (unsigned long long)n, cap);
    return MLSYS_ERR_TRUNCATE;
}

int shm_recv_bytes(mlsys_comm *c, const void *in, void *out, size_t cap, mlsys_dtype dt,
                   mlsys_op op, int src, int tag, const void *data, size_t n)
{
    int st = fits(c, cap, op, src, tag, n);
    if (st)
        return st;
    if (op == MLSYS_OP_NONE)
        memcpy(out, data, n);
    else
        mlsys_reduce_local(out, in, data, n / dt_size(dt), dt, op);
    return 0;
}

static void recv_done(mlsys_request *r, uint64_t seq, int st)
{
    mlsys_world *w = r->comm->w;
    r->msg_id = MSG_ID(r->peer_world, w->rank, seq);
    w->recv_seq[r->peer_world] = seq;
    req_complete(r, st);
}

void shm_recv_finish(mlsys_request *r, const void *data, size_t n, uint64_t seq)
{
    int st = shm_recv_bytes(r->comm, r->sbuf, r->rbuf, r->bytes, r->dt, r->op, r->peer_world,
                            r->tag, data, n);
    if (!st)
        r->bytes = n;
    recv_done(r, seq, st);
}

/* An older unmatched receive with the same source, context and tag goes first (MPI's
 * non-overtaking rule); so does every older one when this one would match the same slot. */
static int older_same_key(const mlsys_request *r)
{
    for (const mlsys_request *o = r->prev; o; o = o->prev)
        if (o->kind == REQ_RECV && o->peer_world == r->peer_world && o->ctx == r->ctx &&
            o->tag == r->tag)
            return 1;
    return 0;
}

/* small_only: take an inline message but leave a large one for the progress loop. */
/* The oldest message in a slot for r (and its sequence number), or NULL. */
static shm_slot *slot_match(mlsys_request *r, shm_chan *ch)
{
    mlsys_world *w = r->comm->w;
    uint64_t posted = atomic_load_explicit(&ch->posted, memory_order_acquire);
    if (posted == w->peers[r->peer_world].slot_taken)
        return NULL;            /* every slot message of the channel was taken */
    /* Nothing posted since a scan that found nothing for us? The sender tries the slot of
     * its post count first and publishes the slot before the count, so a look at that slot
     * (the two loads overlap) sees a new message as early as the count does, often earlier. */
    if (posted == r->scanned &&
        atomic_load_explicit(&ch->slot[posted % SHM_SLOTS].state, memory_order_acquire) !=
            SLOT_POSTED)
        return NULL;
    shm_slot *best = NULL;
    /* The scan is not a snapshot: with eager sends, a message can be posted into a slot
     * already passed while a later one lands in a slot still ahead, and the later one would
     * overtake. Everything posted before the candidate is visible once it is (the sender
     * publishes in order), so a second pass finds the true oldest. */
    for (int pass = 0; pass < 2; pass++) {
        for (int i = 0; i < SHM_SLOTS; i++) {
            shm_slot *s = &ch->slot[i];
            if (atomic_load_explicit(&s->state, memory_order_acquire) != SLOT_POSTED)
                continue;
            if (s->ctx != r->ctx || s->tag != r->tag)
                continue;
            if (!best || s->seq < best->seq)
                best = s;
        }
        if (!best) {
            r->scanned = posted;
            return NULL;
        }
    }
    return best;
}

/* Tests only (tests/unit/test_order_stress.c): called by a receive between its look at the
 * fast box and its slot scan, the window in which a rank descheduled on a loaded machine
 * lets its sender run ahead. NULL in the runtime: one load of a global on the request path. */
void (*shm_recv_window_hook)(mlsys_request *r);

/* small_only: take an inline message but leave a large one for the progress loop. Messages
 * come from two places, the fast box (kept copies) and the slots; the lower sequence number
 * goes first. */
static void progress_recv(mlsys_request *r, int small_only)
{
    mlsys_world *w = r->comm->w;
    if (r->done || older_same_key(r))
        return;
    fbox_drain(w, r->peer_world);       /* may hand r its message */
    if (r->done)
        return;
    shm_chan *ch = shm_channel(w->h, r->peer_world, w->rank);
    fbox_msg *kept = fbox_find(w, r);
    if (shm_recv_window_hook)
        shm_recv_window_hook(r);
    shm_slot *best = slot_match(r, ch);
    if (best) {
        /* The drain above looked at the fast box before this scan: a rank descheduled in
         * between may find a slot message whose sender posted an older cell of the same key
         * after that look (a lagging receive took the next collective's message). Every cell
         * sent before best is visible now that its slot was seen posted: drain again. The
         * slot is not taken yet, so the drain only keeps cells, and only when a slot
         * message matches: the fast-box path pays nothing. */
        fbox_drain(w, r->peer_world);
        kept = fbox_find(w, r);
    }
    if (kept && (!best || kept->seq < best->seq)) {
        shm_recv_finish(r, kept->data, kept->bytes, kept->seq);
        fbox_forget(w, kept);
        return;
    }
    if (!best || (small_only && best->bytes > SHM_INLINE))
        return;
    mlsys_comm *c = r->comm;
    int st = fits(c, r->bytes, r->op, r->peer_world, r->tag, best->bytes);
    if (!st) {
        int rc = deliver(r, best);
        if (rc) {
            mlsys_set_error(c, MLSYS_ERR_SYS, "rank %d: recv from rank %d tag %d (%llu B): "
                            "cannot read the sender's memory: %s", c->rank, r->peer_world,
                            r->tag, (unsigned long long)best->bytes, strerror(-rc));
            st = MLSYS_ERR_SYS;
        }
        r->bytes = (size_t)best->bytes;
    }
    uint64_t seq = best->seq;
    best->status = st;
    atomic_store_explicit(&best->state, SLOT_DONE, memory_order_release);
    w->peers[r->peer_world].slot_taken++;
    shm_bell_ring(w->h, r->peer_world);
    recv_done(r, seq, st);
}

/* Sends first: posting one takes a moment and lets the peer start its copy, whereas a
 * receive may copy megabytes. A rank that copied before posting its own send would make its
 * peer wait for the whole copy (sendrecv of 32 MiB took twice as long that way). */
static int shm_progress(mlsys_world *w)
{
    mlsys_request *r, *next;
    int n = 0;
    for (r = w->pending; r; r = next) {
        next = r->next;
        if (r->kind == REQ_SEND) {
            progress_send(r);
            n += r->done;
        }
    }
    for (r = w->pending; r; r = next) {
        next = r->next;
        if (r->kind == REQ_RECV) {
            progress_recv(r, 0);    /* may also finish others of its peer: they say done */
            n += r->done;
        }
    }
    return n;
}

/* ---- waiting, and what to say when waiting takes too long ---- */

static const char *wait_kind_name(int k)
{
    switch (k) {
    case WAIT_SEND: return "send to";
    case WAIT_RECV: return "recv from";
    case WAIT_GATE: return "the step gate";
    case WAIT_DONE: return "nothing (finished)";
    default: return "nothing (running)";
    }
}

/* 1 when the process is stopped by a signal (SIGSTOP, Ctrl-Z) or by a tracer: it then waits
 * for nothing yet will not move, whatever it published before it stopped. */
static int pid_stopped(pid_t pid)
{
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    ssize_t got = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (got <= 0)
        return 0;
    buf[got] = 0;
    const char *rp = strrchr(buf, ')');
    char st = 0;
    return rp && sscanf(rp + 1, " %c", &st) == 1 && (st == 'T' || st == 't');
}

/* One line naming who waits for whom, following the chain from this rank: the wait-for
 * graph of the job as the ranks published it. */
static const char *wait_graph(mlsys_comm *c, char *buf, size_t n)
{
    mlsys_world *w = c->w;
    size_t len = 0;
    int cur = w->rank, hops = 0;
    int *seen = mlsys_xcalloc((size_t)w->size, sizeof(int));
    buf[0] = 0;
    while (cur >= 0 && cur < w->size && len < n) {
        if (seen[cur]) {
            snprintf(buf + len, n - len, "; back to rank %d: a cycle", cur);
            break;
        }
        seen[cur] = 1;
        shm_rank_state *s = shm_rank(w->h, cur);
        int k = atomic_load(&s->wait_kind), peer = atomic_load(&s->wait_peer);
        pid_t pid = (pid_t)atomic_load(&s->pid);
        if (cur != w->rank && pid > 0 && pid_stopped(pid)) {
            snprintf(buf + len, n - len, "%srank %d is stopped (SIGSTOP or Ctrl-Z): it waits "
                     "for nothing and will not move until it gets SIGCONT", hops ? "; " : "",
                     cur);
            break;
        }
        if (k != WAIT_SEND && k != WAIT_RECV) {
            snprintf(buf + len, n - len, "%srank %d waits for %s", hops ? "; " : "", cur,
                     wait_kind_name(k));
            break;
        }
        len += (size_t)snprintf(buf + len, n - len, "%srank %d waits in %s rank %d (tag %d, "
                                "%llu B)", hops ? "; " : "", cur, wait_kind_name(k), peer,
                                atomic_load(&s->wait_tag),
                                (unsigned long long)atomic_load(&s->wait_bytes));
        cur = peer;
        hops++;
    }
    free(seen);
    return buf;
}

static void publish_wait(mlsys_world *w, const mlsys_request *r)
{
    shm_rank_state *s = shm_rank(w->h, w->rank);
    atomic_store(&s->wait_peer, r ? r->peer_world : -1);
    atomic_store(&s->wait_tag, r ? r->tag : -1);
    atomic_store(&s->wait_bytes, r ? r->bytes : 0);
    atomic_store(&s->wait_kind, r ? (r->kind == REQ_SEND ? WAIT_SEND : WAIT_RECV) : WAIT_NONE);
}

#define PUBLISH_AFTER_NS 1000000ull
#define FAST_POLLS 32

/* What a waiter polls: progress on every pending request, then whether its own is done (or
 * the job is being torn down). */
static int wait_ready(void *arg)
{
    mlsys_request *r = arg;
    mlsys_world *w = r->comm->w;
    shm_progress(w);
    return r->done || atomic_load_explicit(&w->h->abort, memory_order_relaxed);
}

static int shm_wait(mlsys_request *r)
{
    mlsys_comm *c = r->comm;
    mlsys_world *w = c->w;
    /* Most waits of a small message end within a few polls: no clock read until then (a
     * clock read costs as much as a poll, about 30 ns here). */
    for (int i = 0; i < FAST_POLLS; i++) {
        if (wait_ready(r) && r->done)
            return r->status;
        if (!w->spin_ns)
            break;
        cpu_relax();
    }
    uint64_t start = mlsys_now_ns();
    uint64_t limit = c->timeout_ms > 0 ? (uint64_t)c->timeout_ms * 1000000ull : 0;
    int published = 0;
    while (!r->done) {
        if (atomic_load(&w->h->abort)) {
            mlsys_set_error(c, MLSYS_ERR_ABORTED, "rank %d: job aborted while waiting in %s "
                            "rank %d", c->rank, r->kind == REQ_SEND ? "send to" : "recv from",
                            r->peer_world);
            publish_wait(w, NULL);
            return MLSYS_ERR_ABORTED;
        }
        uint64_t waited = mlsys_now_ns() - start;
        if (!published && waited > PUBLISH_AFTER_NS) {
            publish_wait(w, r);  /* only the deadlock report reads it: not on the fast path */
            published = 1;
        }
        if (limit && waited > limit) {
            char graph[400];
            wait_graph(c, graph, sizeof graph);
            mlsys_set_error(c, MLSYS_ERR_TIMEOUT, "deadlock suspected after %.1f s: %s",
                            (double)waited * 1e-9, graph);
            publish_wait(w, NULL);
            return MLSYS_ERR_TIMEOUT;
        }
        int sleep_ms = 50;
        if (limit && (limit - waited) / 1000000ull < (uint64_t)sleep_ms)
            sleep_ms = (int)((limit - waited) / 1000000ull) + 1;
        if (!shm_bell_wait(w->h, w->rank, wait_ready, r, sleep_ms, w->spin_ns))
            shm_progress(w);     /* after a sleep: whatever woke us */
    }
    if (published)
        publish_wait(w, NULL);
    return r->status;
}

static int shm_post(mlsys_request *r)
{
    if (r->kind == REQ_SEND)
        progress_send(r);
    else
        progress_recv(r, 1);    /* a large copy waits for wait/test: post sends first */
    return 0;
}

/* A request given up on (timeout, abort): withdraw a posted send so that nobody reads the
 * caller's buffer later. A receive has nothing in the segment to withdraw. */
static void shm_cancel(mlsys_request *r)
{
    if (r->kind == REQ_SEND && r->slot >= 0) {
        shm_slot *s = &shm_channel(r->comm->w->h, r->comm->w->rank, r->peer_world)->slot[r->slot];
        uint32_t expect = SLOT_POSTED;
        atomic_compare_exchange_strong(&s->state, &expect, SLOT_FREE);
    }
}

static void shm_fini(mlsys_world *w)
{
    fbox_fini(w);
}

const transport_ops shm_transport = {
    .name = "shm",
    .post = shm_post,
    .progress = shm_progress,
    .wait = shm_wait,
    .cancel = shm_cancel,
    .send_now = fbox_send_now,
    .recv_now = fbox_recv_now,
    .fini = shm_fini,
    .serialized_threads = 1,
};
