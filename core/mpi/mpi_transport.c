/* mpi_transport.c - the MPI backend: a plugin (libmlsys-mpi.so) that mlsys_init loads when
 * MLSYS_BACKEND=mpi. p2p is MPI_Issend/MPI_Irecv (synchronous, so two ranks that both send
 * first deadlock as on shm); MPI's collectives are the algorithm "native". Each communicator
 * has two MPI ones, for user messages (ctx) and collectives (ctx + 1), made by MPI_Comm_split
 * when mlsys_split runs (MPI_Comm_dup for a progress thread's shadow), so tags pass through
 * unchanged. The non-blocking collectives run our algorithms on icoll.c's progress thread,
 * as on shm, where MPI gives MPI_THREAD_SERIALIZED; else MPI_Iallreduce & co. */
#include "../coll/coll.h"
#include "../net_events.h"
#include <mpi.h>
#include <limits.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define SPIN_TESTS 2000       /* MPI_Test calls before a wait starts yielding the core */
#define YIELD_TESTS 20000     /* then sched_yield between tests, then short sleeps */
#define SLEEP_NS 50000

/* One posted request: its MPI requests (header + data when tracing), a bounce buffer for
 * recv-reduce, and the header. Indexed by mlsys_request.slot. */
typedef struct mpi_slot {
    MPI_Request req[2];
    MPI_Status st[2];
    int nreq;
    int data;                 /* which of req[] carries the data */
    void *tmp;                /* recv-reduce: the message lands here first */
    uint64_t hdr[2];          /* tracing: the sender's sequence number and byte count */
    int next_free;
} mpi_slot;

/* The MPI communicators of one mlsys communicator (keyed by its user context). */
typedef struct mpi_ctx {
    uint32_t ctx;
    MPI_Comm user, coll;
    int *local_of;            /* [world size]: world rank -> rank here, -1 if not a member */
} mpi_ctx;

static struct {
    int rank, size;
    int tag_ub;
    mpi_slot *slots;
    int nslots, free_head;
    mpi_ctx *ctxs;
    int nctx;
} g = {.free_head = -1};

static const char *mpi_errstr(int code, char *buf)
{
    int len = 0;
    if (MPI_Error_string(code, buf, &len) != MPI_SUCCESS)
        snprintf(buf, MPI_MAX_ERROR_STRING, "MPI error %d", code);
    return buf;
}

/* ---- communicators ---- */

static mpi_ctx *ctx_find(uint32_t ctx)
{
    ctx &= ~1u;
    for (int i = 0; i < g.nctx; i++)
        if (g.ctxs[i].ctx == ctx)
            return &g.ctxs[i];
    return NULL;
}

/* Register comm (and a duplicate for collectives) as the MPI side of context ctx. */
static int ctx_add(uint32_t ctx, MPI_Comm comm)
{
    mpi_ctx x = {.ctx = ctx, .user = comm};
    int rc = MPI_Comm_dup(comm, &x.coll);
    if (rc != MPI_SUCCESS)
        return rc;
    MPI_Group wg, cg;
    MPI_Comm_group(MPI_COMM_WORLD, &wg);
    MPI_Comm_group(comm, &cg);
    int *world = mlsys_xmalloc((size_t)g.size * sizeof(int));
    x.local_of = mlsys_xmalloc((size_t)g.size * sizeof(int));
    for (int i = 0; i < g.size; i++)
        world[i] = i;
    MPI_Group_translate_ranks(wg, g.size, world, cg, x.local_of);
    for (int i = 0; i < g.size; i++)
        if (x.local_of[i] == MPI_UNDEFINED)
            x.local_of[i] = -1;
    MPI_Group_free(&wg);
    MPI_Group_free(&cg);
    free(world);
    g.ctxs = realloc(g.ctxs, ((size_t)g.nctx + 1) * sizeof *g.ctxs);
    if (!g.ctxs) {
        fprintf(stderr, "mlsys-lab: out of memory in the MPI transport\n");
        exit(70);
    }
    g.ctxs[g.nctx++] = x;
    return MPI_SUCCESS;
}

/* Called by mlsys_split on every rank of parent once the groups are known: the same split,
 * made by MPI. Ordering by the new group rank keeps MPI's ranks equal to ours. */
int mlsys_mpi_split(mlsys_comm *parent, int color, int key, mlsys_comm *child);
int mlsys_mpi_split(mlsys_comm *parent, int color, int key, mlsys_comm *child)
{
    char es[MPI_MAX_ERROR_STRING];
    (void)key;
    mpi_ctx *p = ctx_find(parent->ctx);
    if (!p) {
        mlsys_set_error(parent, MLSYS_ERR_ARG, "rank %d: split: the parent has no MPI "
                        "communicator", parent->rank);
        return MLSYS_ERR_ARG;
    }
    MPI_Comm nc = MPI_COMM_NULL;
    int rc = MPI_Comm_split(p->user, child ? color : MPI_UNDEFINED, child ? child->rank : 0, &nc);
    if (rc == MPI_SUCCESS && child)
        rc = ctx_add(child->ctx, nc);
    if (rc != MPI_SUCCESS) {
        mlsys_set_error(parent, MLSYS_ERR_SYS, "rank %d: split (color %d): MPI_Comm_split: %s",
                        parent->rank, color, mpi_errstr(rc, es));
        return MLSYS_ERR_SYS;
    }
    return 0;
}

/* ---- slots ---- */

static int slot_get(void)
{
    if (g.free_head < 0) {
        int n = g.nslots ? g.nslots * 2 : 64;
        g.slots = realloc(g.slots, (size_t)n * sizeof *g.slots);
        if (!g.slots) {
            fprintf(stderr, "mlsys-lab: out of memory in the MPI transport\n");
            exit(70);
        }
        for (int i = n - 1; i >= g.nslots; i--) {
            g.slots[i].next_free = g.free_head;
            g.free_head = i;
        }
        g.nslots = n;
    }
    int i = g.free_head;
    g.free_head = g.slots[i].next_free;
    mpi_slot *s = &g.slots[i];
    memset(s, 0, sizeof *s);
    s->req[0] = s->req[1] = MPI_REQUEST_NULL;
    return i;
}

static void slot_put(int i)
{
    free(g.slots[i].tmp);
    g.slots[i].tmp = NULL;
    g.slots[i].next_free = g.free_head;
    g.free_head = i;
}

/* ---- point-to-point ---- */

/* A request that could not even be posted: done at once, with the error. */
static int post_failed(mlsys_request *r, int code)
{
    req_pending_remove(r->comm->w, r);
    r->done = 1;
    r->status = code;
    return code;
}

static const char *dir_name(const mlsys_request *r)
{
    return r->kind == REQ_SEND ? "send to" : r->kind == REQ_COLL ? "a non-blocking collective with"
                                                                  : "recv from";
}

static int mpi_post(mlsys_request *r)
{
    mlsys_comm *c = r->comm;
    char es[MPI_MAX_ERROR_STRING];
    mpi_ctx *x = ctx_find(r->ctx);
    if (!x) {
        mlsys_set_error(c, MLSYS_ERR_ARG, "rank %d: %s rank %d: context %u has no MPI "
                        "communicator", c->rank, dir_name(r), r->peer_world, r->ctx);
        return post_failed(r, MLSYS_ERR_ARG);
    }
    if (r->tag > g.tag_ub) {
        mlsys_set_error(c, MLSYS_ERR_ARG, "rank %d: %s rank %d: tag %d is above MPI_TAG_UB "
                        "(%d)", c->rank, dir_name(r), r->peer_world, r->tag, g.tag_ub);
        return post_failed(r, MLSYS_ERR_ARG);
    }
    if (r->bytes > (size_t)INT_MAX) {
        mlsys_set_error(c, MLSYS_ERR_UNSUPPORTED, "rank %d: %s rank %d: %zu B is more than one "
                        "MPI message carries here (2 GiB)", c->rank, dir_name(r), r->peer_world,
                        r->bytes);
        return post_failed(r, MLSYS_ERR_UNSUPPORTED);
    }
    MPI_Comm comm = (r->ctx & 1u) ? x->coll : x->user;
    int peer = x->local_of[r->peer_world];
    int header = c->w->tracing;     /* the same on every rank of a job */
    int i = slot_get();
    mpi_slot *s = &g.slots[i];
    int rc = MPI_SUCCESS, n = (int)r->bytes;
    r->slot = i;
    if (r->kind == REQ_SEND) {
        if (header) {
            s->hdr[0] = r->seq;
            s->hdr[1] = r->bytes;
            rc = MPI_Isend(s->hdr, 2, MPI_UINT64_T, peer, r->tag, comm, &s->req[s->nreq++]);
        }
        s->data = s->nreq;
        if (rc == MPI_SUCCESS)
            rc = MPI_Issend(r->sbuf, n, MPI_BYTE, peer, r->tag, comm, &s->req[s->nreq++]);
    } else {
        if (header)
            rc = MPI_Irecv(s->hdr, 2, MPI_UINT64_T, peer, r->tag, comm, &s->req[s->nreq++]);
        void *dst = r->rbuf;
        if (r->op != MLSYS_OP_NONE)
            dst = s->tmp = mlsys_xmalloc(r->bytes);
        s->data = s->nreq;
        if (rc == MPI_SUCCESS)
            rc = MPI_Irecv(dst, n, MPI_BYTE, peer, r->tag, comm, &s->req[s->nreq++]);
    }
    if (rc != MPI_SUCCESS) {
        mlsys_set_error(c, MLSYS_ERR_SYS, "rank %d: %s rank %d tag %d (%zu B): %s", c->rank,
                        dir_name(r), r->peer_world, r->tag, r->bytes, mpi_errstr(rc, es));
        for (int k = 0; k < s->nreq; k++)
            if (s->req[k] != MPI_REQUEST_NULL) {
                MPI_Cancel(&s->req[k]);
                MPI_Request_free(&s->req[k]);
            }
        s->tmp = NULL;           /* may still be written to: leak it rather than free it */
        slot_put(i);
        r->slot = -1;
        return post_failed(r, MLSYS_ERR_SYS);
    }
    return 0;
}

/* A non-blocking collective has completed: copy out of the bounce buffer (reduce_scatter in
 * place), complete r. Not req_complete: it is no message, and icoll.c counts it. */
static void finish_coll(mlsys_request *r, int mpi_rc)
{
    mlsys_comm *c = r->comm;
    mpi_slot *s = &g.slots[r->slot];
    char es[MPI_MAX_ERROR_STRING];
    int st = 0;
    if (mpi_rc != MPI_SUCCESS) {
        mlsys_set_error(c, MLSYS_ERR_SYS, "rank %d: non-blocking collective (%zu B): %s",
                        c->rank, r->bytes, mpi_errstr(mpi_rc, es));
        st = MLSYS_ERR_SYS;
    } else if (s->tmp && r->bytes) {
        memcpy(r->rbuf, s->tmp, r->bytes);
    }
    slot_put(r->slot);
    r->slot = -1;
    req_pending_remove(c->w, r);
    r->done = 1;
    r->status = st;
}

/* Every MPI request of r has completed: check, reduce, complete. */
static void finish(mlsys_request *r, int mpi_rc)
{
    mlsys_comm *c = r->comm;
    mpi_slot *s = &g.slots[r->slot];
    char es[MPI_MAX_ERROR_STRING];
    int st = 0;
    if (r->kind == REQ_COLL) {
        finish_coll(r, mpi_rc);
        return;
    }
    if (r->kind == REQ_RECV && s->nreq == 2) {
        r->msg_id = MSG_ID(r->peer_world, c->w->rank, s->hdr[0]);
        c->w->recv_seq[r->peer_world] = s->hdr[0];
    }
    int cls = MPI_SUCCESS;
    if (mpi_rc != MPI_SUCCESS)
        MPI_Error_class(mpi_rc, &cls);
    if (cls == MPI_ERR_TRUNCATE || (s->nreq == 2 && r->kind == REQ_RECV && s->hdr[1] > r->bytes)) {
        if (s->nreq == 2)
            mlsys_set_error(c, MLSYS_ERR_TRUNCATE, "rank %d: recv from rank %d tag %d: message "
                            "of %llu B does not fit the %zu B buffer", c->rank, r->peer_world,
                            r->tag, (unsigned long long)s->hdr[1], r->bytes);
        else
            mlsys_set_error(c, MLSYS_ERR_TRUNCATE, "rank %d: recv from rank %d tag %d: the "
                            "message does not fit the %zu B buffer", c->rank, r->peer_world,
                            r->tag, r->bytes);
        st = MLSYS_ERR_TRUNCATE;
    } else if (mpi_rc != MPI_SUCCESS) {
        mlsys_set_error(c, MLSYS_ERR_SYS, "rank %d: %s rank %d tag %d (%zu B): %s", c->rank,
                        dir_name(r), r->peer_world, r->tag, r->bytes, mpi_errstr(mpi_rc, es));
        st = MLSYS_ERR_SYS;
    } else if (r->kind == REQ_RECV) {
        int got = 0;
        MPI_Get_count(&s->st[s->data], MPI_BYTE, &got);
        if (r->op == MLSYS_OP_NONE) {
            r->bytes = (size_t)got;
        } else if ((size_t)got != r->bytes) {
            mlsys_set_error(c, MLSYS_ERR_TRUNCATE, "rank %d: recv-reduce from rank %d tag %d: "
                            "message of %d B, the reduction expects %zu B", c->rank,
                            r->peer_world, r->tag, got, r->bytes);
            st = MLSYS_ERR_TRUNCATE;
        } else {
            mlsys_reduce_local(r->rbuf, r->sbuf, s->tmp, r->bytes / mlsys_dtype_size(r->dt),
                               r->dt, r->op);
        }
    }
    slot_put(r->slot);
    r->slot = -1;
    req_complete(r, st);
}

/* Test r's MPI requests once; complete r when all are done. */
static void test_one(mlsys_request *r)
{
    mpi_slot *s = &g.slots[r->slot];
    int all = 1, err = MPI_SUCCESS;
    for (int k = 0; k < s->nreq; k++) {
        if (s->req[k] == MPI_REQUEST_NULL)
            continue;
        int flag = 0;
        int rc = MPI_Test(&s->req[k], &flag, &s->st[k]);
        if (rc != MPI_SUCCESS) {
            if (err == MPI_SUCCESS)
                err = rc;
            if (!flag && s->req[k] != MPI_REQUEST_NULL) {
                MPI_Request_free(&s->req[k]);
                s->req[k] = MPI_REQUEST_NULL;
            }
            continue;
        }
        if (!flag)
            all = 0;
    }
    if (all || err != MPI_SUCCESS) {
        if (!all)              /* an error with a request still running: stop waiting for it */
            for (int k = 0; k < s->nreq; k++)
                if (s->req[k] != MPI_REQUEST_NULL) {
                    MPI_Cancel(&s->req[k]);
                    MPI_Request_free(&s->req[k]);
                }
        finish(r, err);
    }
}

static int mpi_progress(mlsys_world *w)
{
    int n = 0;
    for (mlsys_request *r = w->pending, *next; r; r = next) {
        next = r->next;
        if (r->slot >= 0)
            test_one(r);
        n += r->done;
    }
    return n;
}

/* Spin, then yield, then sleep a little between tests: oversubscribed ranks (more ranks
 * than cores) must leave the core to the rank they wait for. */
static int mpi_wait(mlsys_request *r)
{
    mlsys_comm *c = r->comm;
    mlsys_world *w = c->w;
    uint64_t start = mlsys_now_ns();
    uint64_t limit = c->timeout_ms > 0 ? (uint64_t)c->timeout_ms * 1000000ull : 0;
    long tests = 0;
    while (!r->done) {
        mpi_progress(w);
        if (r->done)
            break;
        tests++;
        if (tests == SPIN_TESTS && w->emit)
            net_events_flush(w);         /* about to doze: let the viewer see why */
        if (tests < SPIN_TESTS)
            continue;
        uint64_t waited = mlsys_now_ns() - start;
        if (limit && waited > limit) {
            mlsys_set_error(c, MLSYS_ERR_TIMEOUT, "deadlock suspected after %.1f s: rank %d "
                            "waits in %s rank %d (tag %d, %zu B); under mpi a rank sees only "
                            "its own wait", (double)waited * 1e-9, w->rank, dir_name(r),
                            r->peer_world, r->tag, r->bytes);
            return MLSYS_ERR_TIMEOUT;
        }
        if (tests < YIELD_TESTS) {
            sched_yield();
        } else {
            struct timespec ts = {0, SLEEP_NS};
            nanosleep(&ts, NULL);
        }
    }
    return r->status;
}

/* A request given up on (timeout): withdraw what MPI allows. A receive cancels for sure and
 * its bounce buffer is freed; a synchronous send that nobody matched may stay in MPI's
 * hands (Open MPI cannot cancel sends), so its request is only released. */
static void mpi_cancel(mlsys_request *r)
{
    if (r->slot < 0)
        return;
    mpi_slot *s = &g.slots[r->slot];
    int safe = 1;
    if (r->kind == REQ_COLL) {
        /* MPI forbids cancelling or freeing a collective's request: leave it to MPI, with
         * its bounce buffer (MPI may still write there) */
        s->tmp = NULL;
        slot_put(r->slot);
        r->slot = -1;
        return;
    }
    for (int k = 0; k < s->nreq; k++) {
        if (s->req[k] == MPI_REQUEST_NULL)
            continue;
        MPI_Cancel(&s->req[k]);
        int flag = 0;
        if (r->kind == REQ_RECV) {
            for (int t = 0; t < 1000 && !flag; t++)
                MPI_Test(&s->req[k], &flag, MPI_STATUS_IGNORE);
        }
        if (!flag) {
            MPI_Request_free(&s->req[k]);
            safe = 0;
        }
    }
    if (!safe)
        s->tmp = NULL;           /* MPI may still write there: leak rather than free */
    slot_put(r->slot);
    r->slot = -1;
}

/* ---- native collectives ---- */

static MPI_Datatype mpi_type(mlsys_dtype dt)
{
    switch (dt) {
    case MLSYS_F32: return MPI_FLOAT;
    case MLSYS_F64: return MPI_DOUBLE;
    case MLSYS_I32: return MPI_INT32_T;
    case MLSYS_I64: return MPI_INT64_T;
    default: return MPI_DATATYPE_NULL;
    }
}

/* AVG reduces as SUM: coll_run divides once at the end, as for every algorithm. */
static MPI_Op mpi_op(mlsys_op op)
{
    switch (op) {
    case MLSYS_SUM: case MLSYS_AVG: return MPI_SUM;
    case MLSYS_PROD: return MPI_PROD;
    case MLSYS_MIN: return MPI_MIN;
    case MLSYS_MAX: return MPI_MAX;
    default: return MPI_OP_NULL;
    }
}

/* The in-place conventions of mlsys.h become MPI_IN_PLACE where MPI has the same meaning.
 * reduce_scatter differs (MPI puts the result at the start of the vector, ours stays at
 * rank * count), so it goes through a chunk-sized temporary. */
static int mpi_native(mlsys_comm *c, int coll, const void *args)
{
    const coll_args *a = args;
    char es[MPI_MAX_ERROR_STRING];
    mpi_ctx *x = ctx_find(c->ctx);
    if (!x) {
        mlsys_set_error(c, MLSYS_ERR_ARG, "rank %d: native %s: no MPI communicator", c->rank,
                        mlsys_coll_name((mlsys_coll)coll));
        return MLSYS_ERR_ARG;
    }
    MPI_Comm comm = x->coll;
    if (coll == MLSYS_COLL_BARRIER) {
        int rc = MPI_Barrier(comm);
        if (rc != MPI_SUCCESS) {
            mlsys_set_error(c, MLSYS_ERR_SYS, "rank %d: MPI_Barrier: %s", c->rank,
                            mpi_errstr(rc, es));
            return MLSYS_ERR_SYS;
        }
        return 0;
    }
    size_t es_ = mlsys_dtype_size(a->dt);
    size_t total = coll == MLSYS_COLL_ALLREDUCE || coll == MLSYS_COLL_REDUCE ||
                   coll == MLSYS_COLL_BROADCAST ? a->count : a->count * (size_t)c->size;
    if (a->count > (size_t)INT_MAX || total > (size_t)INT_MAX) {
        mlsys_set_error(c, MLSYS_ERR_UNSUPPORTED, "rank %d: native %s: %zu elements is more "
                        "than MPI's int count", c->rank, mlsys_coll_name((mlsys_coll)coll),
                        a->count);
        return MLSYS_ERR_UNSUPPORTED;
    }
    MPI_Datatype t = mpi_type(a->dt);
    MPI_Op op = mpi_op(a->op);
    int n = (int)a->count, me = c->rank, root = a->root;
    int is_root = me == root;
    const void *sb = a->sendbuf;
    void *rb = a->recvbuf;
    char *mine = rb ? (char *)rb + (size_t)me * a->count * es_ : NULL;
    const char *name = "?";
    int rc = MPI_SUCCESS;
    switch (coll) {
    case MLSYS_COLL_BROADCAST:
        name = "MPI_Bcast";
        rc = MPI_Bcast(rb, n, t, root, comm);
        break;
    case MLSYS_COLL_REDUCE:
        name = "MPI_Reduce";
        rc = MPI_Reduce(is_root && sb == rb ? MPI_IN_PLACE : sb, rb, n, t, op, root, comm);
        break;
    case MLSYS_COLL_ALLREDUCE:
        name = "MPI_Allreduce";
        rc = MPI_Allreduce(sb == rb ? MPI_IN_PLACE : sb, rb, n, t, op, comm);
        break;
    case MLSYS_COLL_ALLGATHER:
        name = "MPI_Allgather";
        rc = MPI_Allgather(sb == mine ? MPI_IN_PLACE : sb, n, t, rb, n, t, comm);
        break;
    case MLSYS_COLL_REDUCE_SCATTER: {
        name = "MPI_Reduce_scatter_block";
        void *tmp = mlsys_xmalloc(a->count * es_);
        rc = MPI_Reduce_scatter_block(sb, tmp, n, t, op, comm);
        if (rc == MPI_SUCCESS)
            memcpy(rb, tmp, a->count * es_);
        free(tmp);
        break;
    }
    case MLSYS_COLL_GATHER:
        name = "MPI_Gather";
        rc = MPI_Gather(is_root && sb == mine ? MPI_IN_PLACE : sb, n, t, rb, n, t, root, comm);
        break;
    case MLSYS_COLL_SCATTER: {
        name = "MPI_Scatter";
        const char *theirs = sb ? (const char *)sb + (size_t)me * a->count * es_ : NULL;
        rc = MPI_Scatter(sb, n, t, is_root && rb == theirs ? MPI_IN_PLACE : rb, n, t, root,
                         comm);
        break;
    }
    case MLSYS_COLL_ALLTOALL:
        name = "MPI_Alltoall";
        rc = MPI_Alltoall(sb == rb ? MPI_IN_PLACE : sb, n, t, rb, n, t, comm);
        break;
    default:
        mlsys_set_error(c, MLSYS_ERR_UNSUPPORTED, "rank %d: native: unknown collective %d",
                        c->rank, coll);
        return MLSYS_ERR_UNSUPPORTED;
    }
    if (rc != MPI_SUCCESS) {
        mlsys_set_error(c, MLSYS_ERR_SYS, "rank %d: %s (%zu elements, root %d): %s", c->rank,
                        name, a->count, root, mpi_errstr(rc, es));
        return MLSYS_ERR_SYS;
    }
    return 0;
}

/* The non-blocking forms for icoll.c: MPI_Iallreduce, MPI_Ireduce_scatter_block and
 * MPI_Iallgather on the collective communicator, one MPI request in r's slot; progress,
 * wait and the timeout are those of point-to-point requests. In-place conventions as in
 * mpi_native; reduce_scatter in place lands in a bounce buffer, copied at completion. */
static int mpi_icoll(mlsys_request *r, int coll, const void *args)
{
    const coll_args *a = args;
    mlsys_comm *c = r->comm;
    char es[MPI_MAX_ERROR_STRING];
    mpi_ctx *x = ctx_find(c->ctx);
    const char *name = coll == MLSYS_COLL_ALLREDUCE ? "MPI_Iallreduce"
                       : coll == MLSYS_COLL_REDUCE_SCATTER ? "MPI_Ireduce_scatter_block"
                       : coll == MLSYS_COLL_ALLGATHER ? "MPI_Iallgather" : NULL;
    if (!x || !name) {
        mlsys_set_error(c, MLSYS_ERR_UNSUPPORTED, "rank %d: non-blocking %s: %s", c->rank,
                        mlsys_coll_name((mlsys_coll)coll), x ? "not offered by the mpi backend"
                        : "no MPI communicator");
        return MLSYS_ERR_UNSUPPORTED;
    }
    size_t esz = mlsys_dtype_size(a->dt);
    size_t total = coll == MLSYS_COLL_ALLREDUCE ? a->count : a->count * (size_t)c->size;
    if (a->count > (size_t)INT_MAX || total > (size_t)INT_MAX) {
        mlsys_set_error(c, MLSYS_ERR_UNSUPPORTED, "rank %d: %s: %zu elements is more than "
                        "MPI's int count", c->rank, name, a->count);
        return MLSYS_ERR_UNSUPPORTED;
    }
    MPI_Datatype t = mpi_type(a->dt);
    int n = (int)a->count, i = slot_get(), rc = MPI_SUCCESS;
    mpi_slot *s = &g.slots[i];
    const char *sb = a->sendbuf;
    char *rb = a->recvbuf;
    r->slot = i;
    s->nreq = 1;
    s->data = 0;
    switch (coll) {
    case MLSYS_COLL_ALLREDUCE:
        rc = MPI_Iallreduce(sb == rb ? MPI_IN_PLACE : sb, rb, n, t, mpi_op(a->op), x->coll,
                            &s->req[0]);
        break;
    case MLSYS_COLL_ALLGATHER: {
        char *mine = rb ? rb + (size_t)c->rank * a->count * esz : NULL;
        rc = MPI_Iallgather(sb == mine ? MPI_IN_PLACE : sb, n, t, rb, n, t, x->coll, &s->req[0]);
        break;
    }
    default: {
        /* our result may sit inside the vector MPI reads: then a bounce buffer */
        void *dst = rb;
        if (rb && sb && rb < sb + total * esz && sb < rb + a->count * esz)
            dst = s->tmp = mlsys_xmalloc(a->count * esz);
        rc = MPI_Ireduce_scatter_block(sb, dst, n, t, mpi_op(a->op), x->coll, &s->req[0]);
        break;
    }
    }
    if (rc != MPI_SUCCESS) {
        mlsys_set_error(c, MLSYS_ERR_SYS, "rank %d: %s (%zu elements): %s", c->rank, name,
                        a->count, mpi_errstr(rc, es));
        slot_put(i);
        r->slot = -1;
        return MLSYS_ERR_SYS;
    }
    return 0;
}

/* ---- start and end ---- */

/* MPI_Finalize waits for every rank, so a rank that fails must not call it, or its failure
 * would wait for ranks blocked on it: at exit, finalize only when the rank succeeded;
 * otherwise mpirun sees the non-zero exit and stops the job. */
static void at_exit(int status, void *arg)
{
    (void)arg;
    int inited = 0, done = 0;
    MPI_Initialized(&inited);
    MPI_Finalized(&done);
    if (!inited || done || status != 0)
        return;
    fflush(stdout);
    fflush(stderr);
    MPI_Finalize();
}

static void mpi_fini(mlsys_world *w)
{
    /* requests nobody waited for: release their MPI side before comm.c frees them */
    for (mlsys_request *r = w->pending; r; r = r->next)
        mpi_cancel(r);
}

/* Every member of parent makes child (a shadow: parent's group under a new context) at the
 * same point: MPI_Comm_dup of parent's communicator is its MPI side. */
static int mpi_dup(mlsys_comm *parent, mlsys_comm *child)
{
    char es[MPI_MAX_ERROR_STRING];
    mpi_ctx *p = ctx_find(parent->ctx);
    MPI_Comm nc = MPI_COMM_NULL;
    int rc = p ? MPI_Comm_dup(p->user, &nc) : MPI_ERR_COMM;
    if (rc == MPI_SUCCESS)
        rc = ctx_add(child->ctx, nc);
    if (rc != MPI_SUCCESS) {
        mlsys_set_error(parent, MLSYS_ERR_SYS, "rank %d: the progress thread's communicator: "
                        "MPI_Comm_dup: %s", parent->rank, p ? mpi_errstr(rc, es)
                        : "the parent has no MPI communicator");
        return MLSYS_ERR_SYS;
    }
    return 0;
}

/* serialized_threads and icoll are set at attach, from the thread level MPI provides */
static transport_ops mpi_transport = {
    .name = "mpi",
    .post = mpi_post,
    .progress = mpi_progress,
    .wait = mpi_wait,
    .cancel = mpi_cancel,
    .native = mpi_native,
    .fini = mpi_fini,
    .icoll = mpi_icoll,
    .dup = mpi_dup,
};

static void set_env_int(const char *k, int v)
{
    char b[32];
    snprintf(b, sizeof b, "%d", v);
    setenv(k, b, 1);
}

int mlsys_mpi_attach(mlsys_world *w, char *err, size_t n);
int mlsys_mpi_attach(mlsys_world *w, char *err, size_t n)
{
    char es[MPI_MAX_ERROR_STRING];
    int inited = 0, provided = 0, rc;
    MPI_Initialized(&inited);
    /* SERIALIZED: the progress thread of the non-blocking collectives may call MPI while the
     * rank's own thread does not (icoll.c's fence); Open MPI needs no locks for it */
    const char *single = getenv("MLSYS_MPI_THREAD_SINGLE");     /* tests: the fallback */
    int want = single && *single == '1' ? MPI_THREAD_SINGLE : MPI_THREAD_SERIALIZED;
    if (!inited && (rc = MPI_Init_thread(NULL, NULL, want, &provided)) != 0) {
        snprintf(err, n, "MPI_Init failed: %s", mpi_errstr(rc, es));
        return -1;
    }
    if (inited)
        MPI_Query_thread(&provided);
    mpi_transport.serialized_threads = provided >= MPI_THREAD_SERIALIZED && want != MPI_THREAD_SINGLE;
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &g.rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g.size);
    int *ub = NULL, flag = 0;
    MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &flag);
    g.tag_ub = flag && ub ? *ub : 32767;
    const char *lr = getenv("OMPI_COMM_WORLD_LOCAL_RANK");
    long local;
    w->rank = g.rank;
    w->size = g.size;
    w->local_rank = lr && mlsys_parse_long(lr, &local) == 0 ? (int)local : g.rank;
    w->h = NULL;
    w->map_len = 0;
    w->tp = &mpi_transport;
    w->tp_state = &g;
    MPI_Comm world;
    if ((rc = MPI_Comm_dup(MPI_COMM_WORLD, &world)) != MPI_SUCCESS ||
        (rc = ctx_add(0, world)) != MPI_SUCCESS) {
        snprintf(err, n, "MPI_Comm_dup failed: %s", mpi_errstr(rc, es));
        return -1;
    }
    /* torchrun's names, so labs that read them see the same as under the shm launcher */
    set_env_int("RANK", w->rank);
    set_env_int("WORLD_SIZE", w->size);
    set_env_int("LOCAL_RANK", w->local_rank);
    on_exit(at_exit, NULL);
    return 0;
}
