/* p2p.c - the point-to-point API: argument checks, requests, counters and events, common
 * to every transport; the transport (shm_p2p.c, or a plugin's) moves the bytes. send is
 * synchronous (completes when the receiver has the data); isend/irecv return requests that
 * wait/test complete. */
#include "internal.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void req_pending_add(mlsys_world *w, mlsys_request *r)
{
    r->next = NULL;
    r->prev = w->pending_tail;
    if (w->pending_tail)
        w->pending_tail->next = r;
    else
        w->pending = r;
    w->pending_tail = r;
}

void req_pending_remove(mlsys_world *w, mlsys_request *r)
{
    if (r->prev)
        r->prev->next = r->next;
    else
        w->pending = r->next;
    if (r->next)
        r->next->prev = r->prev;
    else
        w->pending_tail = r->prev;
    r->next = r->prev = NULL;
}

void req_complete(mlsys_request *r, int status)
{
    mlsys_comm *c = r->comm;
    r->done = 1;
    r->status = status;
    req_pending_remove(c->w, r);
    if (r->kind == REQ_SEND) {
        c->counters.sends++;
        c->counters.bytes_sent += r->bytes;
    } else {
        c->counters.recvs++;
        c->counters.bytes_recv += r->bytes;
    }
    if (mlsys_tracing(c))
        trace_ev(c, r->kind == REQ_SEND ? MLSYS_EV_SEND_END : MLSYS_EV_RECV_END, r->peer_world,
                 r->tag, r->bytes, r->msg_id, r->span_id);
}

/* ---- public calls ---- */

static int check_peer(mlsys_comm *c, const char *what, int peer, int tag, const void *buf,
                      size_t count, mlsys_dtype dt)
{
    if (peer < 0 || peer >= c->size)
        mlsys_set_error(c, MLSYS_ERR_ARG, "rank %d: %s rank %d: no such rank (world of %d)",
                        c->rank, what, peer, c->size);
    else if (tag < 0)
        mlsys_set_error(c, MLSYS_ERR_ARG, "rank %d: %s rank %d: tag %d is negative", c->rank,
                        what, peer, tag);
    else if ((unsigned)dt >= MLSYS_DTYPE_COUNT)
        mlsys_set_error(c, MLSYS_ERR_ARG, "rank %d: %s rank %d: unknown element type", c->rank,
                        what, peer);
    else if (count && !buf)
        mlsys_set_error(c, MLSYS_ERR_ARG, "rank %d: %s rank %d: null buffer for %zu elements",
                        c->rank, what, peer, count);
    else
        return 0;
    return MLSYS_ERR_ARG;
}

/* Requests come from a small per-process free list: a small collective makes a few of them
 * per step, and malloc/free was a visible part of an 8-byte all_reduce's microsecond. */
#define REQ_CACHE 64

static mlsys_request *req_alloc(mlsys_world *w)
{
    mlsys_request *r = w->free_reqs;
    if (!r)
        return mlsys_xmalloc(sizeof *r);
    w->free_reqs = r->next;
    w->nfree_reqs--;
    return r;
}

static void req_release(mlsys_request *r)
{
    mlsys_world *w = r->comm->w;
    if (w->nfree_reqs >= REQ_CACHE) {
        free(r);
        return;
    }
    r->next = w->free_reqs;
    w->free_reqs = r;
    w->nfree_reqs++;
}

static mlsys_request *req_new(mlsys_comm *c, int kind, int peer, int tag, size_t bytes)
{
    mlsys_request *r = req_alloc(c->w);
    *r = (mlsys_request){.comm = c, .kind = kind, .peer_world = c->world_of[peer], .tag = tag,
                         .ctx = comm_ctx(c), .bytes = bytes,
                         .op = MLSYS_OP_NONE, .slot = -1, .scanned = UINT64_MAX};
    return r;
}

int mlsys_isend(mlsys_comm *c, const void *buf, size_t count, mlsys_dtype dt, int peer, int tag,
                mlsys_request **req)
{
    *req = NULL;
    int rc = check_peer(c, "send to", peer, tag, buf, count, dt);
    if (!rc && icoll_fence_needed(c))
        rc = icoll_fence(c);
    if (rc)
        return rc;
    size_t bytes = count * dt_size(dt);
    const transport_ops *tp = c->w->tp;
    if (tp->send_now && !mlsys_tracing(c) && tp->send_now(c, buf, bytes, c->world_of[peer], tag)) {
        c->counters.sends++;
        c->counters.bytes_sent += bytes;
        return 0;               /* done already: *req stays NULL, which wait accepts */
    }
    mlsys_request *r = req_new(c, REQ_SEND, peer, tag, bytes);
    r->sbuf = buf;
    r->dt = dt;
    r->seq = ++c->w->send_seq[r->peer_world];
    r->msg_id = MSG_ID(c->w->rank, r->peer_world, r->seq);
    req_pending_add(c->w, r);
    if (mlsys_tracing(c)) {
        r->span_id = ((uint64_t)c->w->rank << 40) | ++c->w->spans;
        trace_ev(c, MLSYS_EV_SEND_BEGIN, r->peer_world, tag, r->bytes, r->msg_id, r->span_id);
    }
    c->w->tp->post(r);
    *req = r;
    return 0;
}

/* A blocking receive with nothing else in flight may poll for its message a little before
 * it takes the request path: a small message of a collective usually lands within a few
 * hundred nanoseconds, and the request, its list and its progress cost as much again. */
#define RECV_NOW_POLLS 64

static int irecv_common(mlsys_comm *c, const void *in, void *out, size_t count, mlsys_dtype dt,
                        mlsys_op op, int peer, int tag, mlsys_request **req, int blocking)
{
    *req = NULL;
    int rc = check_peer(c, "recv from", peer, tag, out, count, dt);
    if (!rc && icoll_fence_needed(c))
        rc = icoll_fence(c);
    if (rc)
        return rc;
    if (op != MLSYS_OP_NONE && ((unsigned)op >= MLSYS_OP_COUNT || (count && !in))) {
        mlsys_set_error(c, MLSYS_ERR_ARG, "rank %d: recv-reduce from rank %d: bad operator or "
                        "null input", c->rank, peer);
        return MLSYS_ERR_ARG;
    }
    size_t bytes = count * dt_size(dt);
    const transport_ops *tp = c->w->tp;
    int st;
    if (tp->recv_now && !mlsys_tracing(c)) {
        int polls = blocking && !c->w->pending && c->w->spin_ns ? RECV_NOW_POLLS : 1;
        for (int i = 0; i < polls; i++) {
            if (tp->recv_now(c, in, out, bytes, dt, op, c->world_of[peer], tag, &st)) {
                c->counters.recvs++;
                c->counters.bytes_recv += st ? 0 : bytes;
                return st;      /* done already: *req stays NULL */
            }
            cpu_relax();
        }
    }
    mlsys_request *r = req_new(c, REQ_RECV, peer, tag, bytes);
    r->rbuf = out;
    r->sbuf = in;
    r->dt = dt;
    r->op = op;
    req_pending_add(c->w, r);
    if (mlsys_tracing(c)) {
        r->span_id = ((uint64_t)c->w->rank << 40) | ++c->w->spans;
        trace_ev(c, MLSYS_EV_RECV_BEGIN, r->peer_world, tag, r->bytes, 0, r->span_id);
    }
    c->w->tp->post(r);
    *req = r;
    return 0;
}

int mlsys_irecv(mlsys_comm *c, void *buf, size_t count, mlsys_dtype dt, int peer, int tag,
                mlsys_request **req)
{
    return irecv_common(c, NULL, buf, count, dt, MLSYS_OP_NONE, peer, tag, req, 0);
}

/* The reducing receives, blocking or not: MLSYS_OP_NONE is no operator. */
static int recv_reduce_common(mlsys_comm *c, const void *in, void *out, size_t count,
                              mlsys_dtype dt, mlsys_op op, int peer, int tag,
                              mlsys_request **req, int blocking)
{
    if (op == MLSYS_OP_NONE) {
        *req = NULL;
        mlsys_set_error(c, MLSYS_ERR_ARG, "rank %d: recv-reduce needs an operator", c->rank);
        return MLSYS_ERR_ARG;
    }
    return irecv_common(c, in, out, count, dt, op, peer, tag, req, blocking);
}

int mlsys_irecv_reduce(mlsys_comm *c, const void *in, void *out, size_t count, mlsys_dtype dt,
                       mlsys_op op, int peer, int tag, mlsys_request **req)
{
    return recv_reduce_common(c, in, out, count, dt, op, peer, tag, req, 0);
}

int mlsys_wait(mlsys_request *r)
{
    if (!r)
        return 0;
    if (r->kind == REQ_COLL)
        return icoll_wait(r);
    mlsys_world *w = r->comm->w;
    if (icoll_fence_needed(r->comm)) {
        int rc = icoll_fence(r->comm);
        if (rc)
            return rc;          /* the transport is not ours: finalize releases r */
    }
    int rc = w->tp->wait(r);
    if (!r->done) {
        /* Timed out or aborted: leave nothing in flight that points at the caller's buffer. */
        req_pending_remove(w, r);
        w->tp->cancel(r);
    }
    req_release(r);
    return rc;
}

void req_drop(mlsys_request *r)
{
    if (!r)
        return;
    if (r->kind == REQ_COLL) {
        icoll_drop(r);
        return;
    }
    if (!r->done && icoll_fence_needed(r->comm) && icoll_fence(r->comm))
        return;                 /* the transport is not ours: finalize releases r */
    if (!r->done) {
        req_pending_remove(r->comm->w, r);
        r->comm->w->tp->cancel(r);
    }
    req_release(r);
}

/* After the first failure the rest are withdrawn, not waited for: one timeout is enough. */
int mlsys_waitall(mlsys_request **reqs, int n)
{
    int first = 0;
    for (int i = 0; i < n; i++) {
        mlsys_request *r = reqs[i];
        reqs[i] = NULL;
        if (!r)
            continue;
        if (!first)
            first = mlsys_wait(r);
        else
            req_drop(r);
    }
    return first;
}

int mlsys_test(mlsys_request *r, int *done)
{
    if (!r) {
        *done = 1;
        return 0;
    }
    if (r->kind == REQ_COLL)
        return icoll_test(r, done);
    if (!r->done && icoll_fence_needed(r->comm)) {
        int rc = icoll_fence(r->comm);
        if (rc) {
            *done = 0;
            return rc;
        }
    }
    if (!r->done)
        r->comm->w->tp->progress(r->comm->w);
    *done = r->done;
    return r->done ? r->status : 0;
}

int mlsys_send(mlsys_comm *c, const void *buf, size_t count, mlsys_dtype dt, int peer, int tag)
{
    mlsys_request *r;
    int rc = mlsys_isend(c, buf, count, dt, peer, tag, &r);
    return rc ? rc : mlsys_wait(r);
}

int mlsys_recv(mlsys_comm *c, void *buf, size_t count, mlsys_dtype dt, int peer, int tag)
{
    mlsys_request *r;
    int rc = irecv_common(c, NULL, buf, count, dt, MLSYS_OP_NONE, peer, tag, &r, 1);
    return rc ? rc : mlsys_wait(r);
}

int mlsys_recv_reduce(mlsys_comm *c, const void *in, void *out, size_t count, mlsys_dtype dt,
                      mlsys_op op, int peer, int tag)
{
    mlsys_request *r;
    int rc = recv_reduce_common(c, in, out, count, dt, op, peer, tag, &r, 1);
    return rc ? rc : mlsys_wait(r);
}

int mlsys_sendrecv(mlsys_comm *c, const void *sbuf, size_t scount, int dst, int stag, void *rbuf,
                   size_t rcount, int src, int rtag, mlsys_dtype dt)
{
    mlsys_request *r[2] = {NULL, NULL};
    int rc = mlsys_irecv(c, rbuf, rcount, dt, src, rtag, &r[0]);
    if (!rc)
        rc = mlsys_isend(c, sbuf, scount, dt, dst, stag, &r[1]);
    int rc2 = mlsys_waitall(r, 2);
    return rc ? rc : rc2;
}
