/* nccl_transport.c - the NCCL backend, built as libmlsys-nccl.so and loaded with dlopen (see
 * nccl_plugin.h). One GPU per rank; each NCCL communicator's unique id travels from its rank 0
 * over shm point-to-point, which stays the p2p path. The "native" hook runs NCCL's collectives
 * on device buffers (host -> device, run on the rank's stream, back). NCCL itself reads
 * NCCL_ALGO and NCCL_PROTO from the environment. */
#include "../coll/coll.h"
#include "nccl_plugin.h"

#include <cuda_runtime.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ID_TAG 0x7ffe4e43        /* tag of the unique-id messages (user context, never used by labs) */

typedef struct nccl_comm_entry {
    const mlsys_comm *c;
    uint32_t ctx;
    ncclComm_t comm;
    struct nccl_comm_entry *next;
} nccl_comm_entry;

typedef struct nccl_state {
    transport_ops ops;           /* shm's point-to-point plus native and fini */
    const transport_ops *base;   /* the transport we replaced (restored at fini) */
    int device;
    cudaStream_t stream;
    void *dbuf[3];               /* grow-only device buffers: send, receive, scratch */
    size_t dcap[3];
    nccl_comm_entry *comms;      /* one NCCL communicator per mlsys communicator used */
} nccl_state;

static char g_device_name[300];

/* ---- probe ---- */

int mlsys_nccl_probe(int *ngpus, char *err, size_t n)
{
    int count = 0;                 /* cudaGetDeviceCount leaves it alone when it fails */
    cudaError_t e = cudaGetDeviceCount(&count);
    *ngpus = 0;
    if (e != cudaSuccess) {
        snprintf(err, n, "cudaGetDeviceCount: %s", cudaGetErrorString(e));
        return -1;
    }
    if (count < 1) {
        snprintf(err, n, "cudaGetDeviceCount: 0 devices");
        return -1;
    }
    *ngpus = count;
    snprintf(err, n, "%d GPU%s", count, count == 1 ? "" : "s");
    return 0;
}

void mlsys_nccl_describe(char *buf, size_t n)
{
    int v = 0;
    const char *algo = getenv("NCCL_ALGO"), *proto = getenv("NCCL_PROTO");
    if (ncclGetVersion(&v) != ncclSuccess)
        v = 0;
    snprintf(buf, n, "NCCL %d.%d.%d%s%s, NCCL_ALGO=%s NCCL_PROTO=%s", v / 10000, (v / 100) % 100,
             v % 100, g_device_name[0] ? ", " : "", g_device_name, algo && *algo ? algo : "auto",
             proto && *proto ? proto : "auto");
}

/* ---- helpers ---- */

static int dtype_of(mlsys_dtype dt, ncclDataType_t *out)
{
    switch (dt) {
    case MLSYS_F32: *out = ncclFloat32; return 0;
    case MLSYS_F64: *out = ncclFloat64; return 0;
    case MLSYS_I32: *out = ncclInt32; return 0;
    case MLSYS_I64: *out = ncclInt64; return 0;
    default: return -1;
    }
}

/* AVG reduces as SUM: the dispatcher divides once at the end, as for every algorithm. */
static int op_of(mlsys_op op, ncclRedOp_t *out)
{
    switch (op) {
    case MLSYS_SUM: case MLSYS_AVG: *out = ncclSum; return 0;
    case MLSYS_PROD: *out = ncclProd; return 0;
    case MLSYS_MIN: *out = ncclMin; return 0;
    case MLSYS_MAX: *out = ncclMax; return 0;
    default: return -1;
    }
}

static mlsys_comm *world_comm(mlsys_world *w)
{
    for (mlsys_comm *c = w->comms; c; c = c->next_comm)
        if (c->ctx == 0 && c->size == w->size)
            return c;
    return NULL;
}

/* Device buffer k of at least bytes (never NULL on success). */
static void *dev_buf(nccl_state *st, int k, size_t bytes, cudaError_t *e)
{
    *e = cudaSuccess;
    if (bytes == 0)
        bytes = 16;
    if (st->dcap[k] < bytes) {
        if (st->dbuf[k])
            cudaFree(st->dbuf[k]);
        st->dbuf[k] = NULL;
        st->dcap[k] = 0;
        *e = cudaMalloc(&st->dbuf[k], bytes);
        if (*e != cudaSuccess)
            return NULL;
        st->dcap[k] = bytes;
    }
    return st->dbuf[k];
}

/* The NCCL communicator of c, created on first use: collective over c (every member calls
 * a collective at the same point), the id sent by c's rank 0 to each other member. */
static int comm_of(mlsys_comm *c, ncclComm_t *out, char *err, size_t n)
{
    nccl_state *st = c->w->tp_state;
    for (nccl_comm_entry *e = st->comms; e; e = e->next)
        if (e->c == c && e->ctx == c->ctx) {
            *out = e->comm;
            return 0;
        }
    ncclUniqueId id;
    memset(&id, 0, sizeof id);
    if (c->rank == 0) {
        ncclResult_t r = ncclGetUniqueId(&id);
        if (r != ncclSuccess) {
            snprintf(err, n, "rank %d: ncclGetUniqueId: %s", c->rank, ncclGetErrorString(r));
            return -1;
        }
    }
    /* the 128-byte id as 32 int32 over shm p2p: rank 0 to every other member */
    size_t words = sizeof id / sizeof(int32_t);
    if (c->rank == 0) {
        for (int p = 1; p < c->size; p++)
            if (mlsys_send(c, &id, words, MLSYS_I32, p, ID_TAG) != MLSYS_OK) {
                snprintf(err, n, "rank 0: sending the NCCL id to rank %d: %s", p,
                         mlsys_errmsg(c));
                return -1;
            }
    } else if (mlsys_recv(c, &id, words, MLSYS_I32, 0, ID_TAG) != MLSYS_OK) {
        snprintf(err, n, "rank %d: receiving the NCCL id from rank 0: %s", c->rank,
                 mlsys_errmsg(c));
        return -1;
    }
    ncclComm_t comm;
    ncclResult_t r = ncclCommInitRank(&comm, c->size, id, c->rank);
    if (r != ncclSuccess) {
        snprintf(err, n, "rank %d: ncclCommInitRank (%d ranks): %s", c->rank, c->size,
                 ncclGetErrorString(r));
        return -1;
    }
    nccl_comm_entry *e = mlsys_xcalloc(1, sizeof *e);
    e->c = c;
    e->ctx = c->ctx;
    e->comm = comm;
    e->next = st->comms;
    st->comms = e;
    *out = comm;
    return 0;
}

/* ---- native collectives ---- */

#define CU(call) do { cudaError_t e_ = (call); if (e_ != cudaSuccess) { \
        snprintf(err, sizeof err, "%s: %s", #call, cudaGetErrorString(e_)); goto fail; } } while (0)
#define NC(call) do { ncclResult_t r_ = (call); if (r_ != ncclSuccess) { \
        snprintf(err, sizeof err, "%s: %s", #call, ncclGetErrorString(r_)); goto fail; } } while (0)

static int nccl_native(mlsys_comm *c, int coll, const void *argp)
{
    const coll_args *a = argp;
    nccl_state *st = c->w->tp_state;
    char err[384] = "";
    ncclComm_t comm;
    ncclDataType_t dt = ncclFloat32;
    ncclRedOp_t op = ncclSum;
    cudaError_t ce;
    int n = c->size, r = c->rank;
    size_t es = mlsys_dtype_size(a->dt), cnt = a->count, bytes = cnt * es;
    cudaStream_t s = st->stream;

    /* the device is per thread: this may be icoll.c's progress thread */
    if ((ce = cudaSetDevice(st->device)) != cudaSuccess) {
        mlsys_set_error(c, MLSYS_ERR_SYS, "rank %d: cudaSetDevice(%d): %s", r, st->device,
                        cudaGetErrorString(ce));
        return MLSYS_ERR_SYS;
    }
    if (coll != MLSYS_COLL_BARRIER && dtype_of(a->dt, &dt) != 0) {
        mlsys_set_error(c, MLSYS_ERR_UNSUPPORTED, "rank %d: nccl: no NCCL type for %s", r,
                        mlsys_dtype_name(a->dt));
        return MLSYS_ERR_UNSUPPORTED;
    }
    if ((coll == MLSYS_COLL_REDUCE || coll == MLSYS_COLL_ALLREDUCE ||
         coll == MLSYS_COLL_REDUCE_SCATTER) && op_of(a->op, &op) != 0) {
        mlsys_set_error(c, MLSYS_ERR_UNSUPPORTED, "rank %d: nccl: no NCCL operator for %s", r,
                        mlsys_op_name(a->op));
        return MLSYS_ERR_UNSUPPORTED;
    }
    if (comm_of(c, &comm, err, sizeof err) != 0) {
        mlsys_set_error(c, MLSYS_ERR_SYS, "%s", err);
        return MLSYS_ERR_SYS;
    }
    char *d0, *d1;
    switch (coll) {
    case MLSYS_COLL_BROADCAST:
        d0 = dev_buf(st, 0, bytes, &ce);
        CU(ce);
        CU(cudaMemcpyAsync(d0, a->recvbuf, bytes, cudaMemcpyHostToDevice, s));
        NC(ncclBroadcast(d0, d0, cnt, dt, a->root, comm, s));
        CU(cudaMemcpyAsync(a->recvbuf, d0, bytes, cudaMemcpyDeviceToHost, s));
        break;
    case MLSYS_COLL_REDUCE:
        d0 = dev_buf(st, 0, bytes, &ce);
        CU(ce);
        d1 = dev_buf(st, 1, bytes, &ce);
        CU(ce);
        CU(cudaMemcpyAsync(d0, a->sendbuf, bytes, cudaMemcpyHostToDevice, s));
        NC(ncclReduce(d0, d1, cnt, dt, op, a->root, comm, s));
        if (r == a->root)
            CU(cudaMemcpyAsync(a->recvbuf, d1, bytes, cudaMemcpyDeviceToHost, s));
        break;
    case MLSYS_COLL_ALLREDUCE:
        d0 = dev_buf(st, 0, bytes, &ce);
        CU(ce);
        d1 = dev_buf(st, 1, bytes, &ce);
        CU(ce);
        CU(cudaMemcpyAsync(d0, a->sendbuf, bytes, cudaMemcpyHostToDevice, s));
        NC(ncclAllReduce(d0, d1, cnt, dt, op, comm, s));
        CU(cudaMemcpyAsync(a->recvbuf, d1, bytes, cudaMemcpyDeviceToHost, s));
        break;
    case MLSYS_COLL_ALLGATHER:
        d0 = dev_buf(st, 0, bytes, &ce);
        CU(ce);
        d1 = dev_buf(st, 1, bytes * (size_t)n, &ce);
        CU(ce);
        CU(cudaMemcpyAsync(d0, a->sendbuf, bytes, cudaMemcpyHostToDevice, s));
        NC(ncclAllGather(d0, d1, cnt, dt, comm, s));
        CU(cudaMemcpyAsync(a->recvbuf, d1, bytes * (size_t)n, cudaMemcpyDeviceToHost, s));
        break;
    case MLSYS_COLL_REDUCE_SCATTER:
        d0 = dev_buf(st, 0, bytes * (size_t)n, &ce);
        CU(ce);
        d1 = dev_buf(st, 1, bytes, &ce);
        CU(ce);
        CU(cudaMemcpyAsync(d0, a->sendbuf, bytes * (size_t)n, cudaMemcpyHostToDevice, s));
        NC(ncclReduceScatter(d0, d1, cnt, dt, op, comm, s));
        CU(cudaMemcpyAsync(a->recvbuf, d1, bytes, cudaMemcpyDeviceToHost, s));
        break;
    case MLSYS_COLL_GATHER:         /* grouped point-to-point: NCCL has no gather */
        d0 = dev_buf(st, 0, bytes, &ce);
        CU(ce);
        d1 = dev_buf(st, 1, bytes * (size_t)n, &ce);
        CU(ce);
        CU(cudaMemcpyAsync(d0, a->sendbuf, bytes, cudaMemcpyHostToDevice, s));
        NC(ncclGroupStart());
        if (r == a->root) {
            for (int p = 0; p < n; p++)
                if (p != r)
                    NC(ncclRecv(d1 + (size_t)p * bytes, cnt, dt, p, comm, s));
        } else {
            NC(ncclSend(d0, cnt, dt, a->root, comm, s));
        }
        NC(ncclGroupEnd());
        if (r == a->root) {
            CU(cudaMemcpyAsync(d1 + (size_t)r * bytes, d0, bytes, cudaMemcpyDeviceToDevice, s));
            CU(cudaMemcpyAsync(a->recvbuf, d1, bytes * (size_t)n, cudaMemcpyDeviceToHost, s));
        }
        break;
    case MLSYS_COLL_SCATTER:
        d0 = dev_buf(st, 0, bytes * (size_t)n, &ce);
        CU(ce);
        d1 = dev_buf(st, 1, bytes, &ce);
        CU(ce);
        if (r == a->root)
            CU(cudaMemcpyAsync(d0, a->sendbuf, bytes * (size_t)n, cudaMemcpyHostToDevice, s));
        NC(ncclGroupStart());
        if (r == a->root) {
            for (int p = 0; p < n; p++)
                if (p != r)
                    NC(ncclSend(d0 + (size_t)p * bytes, cnt, dt, p, comm, s));
        } else {
            NC(ncclRecv(d1, cnt, dt, a->root, comm, s));
        }
        NC(ncclGroupEnd());
        if (r == a->root)
            CU(cudaMemcpyAsync(d1, d0 + (size_t)r * bytes, bytes, cudaMemcpyDeviceToDevice, s));
        CU(cudaMemcpyAsync(a->recvbuf, d1, bytes, cudaMemcpyDeviceToHost, s));
        break;
    case MLSYS_COLL_ALLTOALL:
        d0 = dev_buf(st, 0, bytes * (size_t)n, &ce);
        CU(ce);
        d1 = dev_buf(st, 1, bytes * (size_t)n, &ce);
        CU(ce);
        CU(cudaMemcpyAsync(d0, a->sendbuf, bytes * (size_t)n, cudaMemcpyHostToDevice, s));
        NC(ncclGroupStart());
        for (int p = 0; p < n; p++)
            if (p != r) {
                NC(ncclSend(d0 + (size_t)p * bytes, cnt, dt, p, comm, s));
                NC(ncclRecv(d1 + (size_t)p * bytes, cnt, dt, p, comm, s));
            }
        NC(ncclGroupEnd());
        CU(cudaMemcpyAsync(d1 + (size_t)r * bytes, d0 + (size_t)r * bytes, bytes,
                           cudaMemcpyDeviceToDevice, s));
        CU(cudaMemcpyAsync(a->recvbuf, d1, bytes * (size_t)n, cudaMemcpyDeviceToHost, s));
        break;
    case MLSYS_COLL_BARRIER:        /* a one-element all-reduce, then wait for it */
        d0 = dev_buf(st, 2, sizeof(int32_t), &ce);
        CU(ce);
        NC(ncclAllReduce(d0, d0, 1, ncclInt32, ncclSum, comm, s));
        break;
    default:
        mlsys_set_error(c, MLSYS_ERR_UNSUPPORTED, "rank %d: nccl: no native form of collective "
                        "%d", r, coll);
        return MLSYS_ERR_UNSUPPORTED;
    }
    CU(cudaStreamSynchronize(s));
    return MLSYS_OK;
fail:
    mlsys_set_error(c, MLSYS_ERR_SYS, "rank %d: nccl %s (%zu B): %s", r,
                    mlsys_coll_name((mlsys_coll)coll), bytes, err);
    return MLSYS_ERR_SYS;
}

static void nccl_fini(mlsys_world *w)
{
    nccl_state *st = w->tp_state;
    if (!st)
        return;
    for (nccl_comm_entry *e = st->comms, *next; e; e = next) {
        next = e->next;
        ncclCommDestroy(e->comm);
        free(e);
    }
    for (int k = 0; k < 3; k++)
        if (st->dbuf[k])
            cudaFree(st->dbuf[k]);
    if (st->stream)
        cudaStreamDestroy(st->stream);
    w->tp = st->base;
    w->tp_state = NULL;
    free(st);
    if (w->tp && w->tp->fini)      /* the transport underneath, if it has an ending too */
        w->tp->fini(w);
}

/* ---- attach ---- */

int mlsys_nccl_attach(mlsys_world *w, char *err, size_t n)
{
    int ngpus = 0;
    char why[256];
    if (!w) {
        snprintf(err, n, "nccl: no world to attach to");
        return -1;
    }
    if (w->tp_state) {
        snprintf(err, n, "rank %d: nccl: the world already has a transport plugin", w->rank);
        return -1;
    }
    if (mlsys_nccl_probe(&ngpus, why, sizeof why) != 0) {
        snprintf(err, n, "rank %d: NCCL needs one GPU per rank: 0 GPUs found (%s)", w->rank, why);
        return -1;
    }
    if (w->local_rank >= ngpus) {
        snprintf(err, n, "rank %d: NCCL needs one GPU per rank: local rank %d, %d GPU%s found",
                 w->rank, w->local_rank, ngpus, ngpus == 1 ? "" : "s");
        return -1;
    }
    mlsys_comm *c = world_comm(w);
    if (!c) {
        snprintf(err, n, "rank %d: nccl: the world communicator is missing", w->rank);
        return -1;
    }
    cudaError_t e = cudaSetDevice(w->local_rank);
    if (e != cudaSuccess) {
        snprintf(err, n, "rank %d: cudaSetDevice(%d): %s", w->rank, w->local_rank,
                 cudaGetErrorString(e));
        return -1;
    }
    struct cudaDeviceProp prop;
    if (cudaGetDeviceProperties(&prop, w->local_rank) == cudaSuccess)
        snprintf(g_device_name, sizeof g_device_name, "GPU %d (%s)", w->local_rank, prop.name);
    nccl_state *st = mlsys_xcalloc(1, sizeof *st);
    st->device = w->local_rank;
    st->base = w->tp;
    st->ops = *w->tp;
    st->ops.name = "nccl";
    st->ops.native = nccl_native;
    st->ops.fini = nccl_fini;
    e = cudaStreamCreateWithFlags(&st->stream, cudaStreamNonBlocking);
    if (e != cudaSuccess) {
        snprintf(err, n, "rank %d: cudaStreamCreate: %s", w->rank, cudaGetErrorString(e));
        free(st);
        return -1;
    }
    w->tp_state = st;
    ncclComm_t comm;
    if (comm_of(c, &comm, err, n) != 0) {    /* the world's communicator, made now */
        cudaStreamDestroy(st->stream);
        st->stream = NULL;
        w->tp_state = NULL;
        free(st);
        return -1;
    }
    w->tp = &st->ops;
    return 0;
}

int mlsys_nccl_attach_comm(mlsys_comm *c, char *err, size_t n)
{
    return mlsys_nccl_attach(c ? c->w : NULL, err, n);
}

/* ---- point-to-point on device buffers ---- */

int mlsys_nccl_sendrecv(mlsys_comm *c, const void *dsend, size_t scount, int dst, void *drecv,
                        size_t rcount, int src, mlsys_dtype dt, char *errout, size_t n)
{
    char err[384] = "";
    ncclComm_t comm;
    ncclDataType_t t;
    nccl_state *st = c && c->w ? c->w->tp_state : NULL;
    if (!st) {
        snprintf(errout, n, "nccl sendrecv: the NCCL backend is not attached");
        return -1;
    }
    if (dtype_of(dt, &t) != 0 || dst >= c->size || src >= c->size) {
        snprintf(errout, n, "rank %d: nccl sendrecv: %s to %d, from %d: no such type or rank",
                 c->rank, mlsys_dtype_name(dt), dst, src);
        return -1;
    }
    if (cudaSetDevice(st->device) != cudaSuccess || comm_of(c, &comm, errout, n) != 0) {
        if (!errout[0])
            snprintf(errout, n, "rank %d: nccl sendrecv: cudaSetDevice(%d) failed", c->rank,
                     st->device);
        return -1;
    }
    cudaStream_t s = st->stream;
    NC(ncclGroupStart());
    if (dst >= 0)
        NC(ncclSend(dsend, scount, t, dst, comm, s));
    if (src >= 0)
        NC(ncclRecv(drecv, rcount, t, src, comm, s));
    NC(ncclGroupEnd());
    CU(cudaStreamSynchronize(s));
    return 0;
fail:
    snprintf(errout, n, "rank %d: nccl sendrecv (to %d: %zu, from %d: %zu): %s", c->rank, dst,
             scount, src, rcount, err);
    return -1;
}

/* ---- device-side self-test (tests/gpu) ---- */

long mlsys_nccl_selftest(mlsys_comm *c, size_t count, char *errout, size_t n)
{
    char err[384] = "";
    ncclComm_t comm;
    unsigned long long wrong = 0, *dwrong = NULL;
    float *d = NULL;
    nccl_state *st = c && c->w ? c->w->tp_state : NULL;
    if (!st) {
        snprintf(errout, n, "nccl selftest: the NCCL backend is not attached");
        return -1;
    }
    if (comm_of(c, &comm, errout, n) != 0)
        return -1;
    int r = c->rank, ranks = c->size;
    cudaStream_t s = st->stream;
    CU(cudaMalloc((void **)&d, (count ? count : 1) * sizeof *d));
    CU(cudaMalloc((void **)&dwrong, sizeof *dwrong));
    CU((cudaError_t)mlsys_cuda_fill(d, count, (float)(r + 1), s));
    NC(ncclAllReduce(d, d, count, ncclFloat32, ncclSum, comm, s));
    CU((cudaError_t)mlsys_cuda_count_wrong(d, count, (float)(ranks * (ranks + 1) / 2), dwrong, s));
    CU(cudaMemcpyAsync(&wrong, dwrong, sizeof wrong, cudaMemcpyDeviceToHost, s));
    CU(cudaStreamSynchronize(s));
    cudaFree(d);
    cudaFree(dwrong);
    return (long)wrong;
fail:
    if (d)
        cudaFree(d);
    if (dwrong)
        cudaFree(dwrong);
    snprintf(errout, n, "rank %d: nccl selftest (%zu floats): %s", r, count, err);
    return -1;
}
