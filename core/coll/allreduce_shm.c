/* allreduce_shm.c - all-reduce for ranks that share memory: each rank reads every other
 * rank's buffer where it lies, instead of passing partial sums round a ring. The ring
 * writes a partial sum at each of its N-1 reduce steps; here each element is written once,
 * after reading its N inputs, so memory traffic per rank falls from about 5(N-1)/N S to
 * (N+1)/N S + 2(N-1)/N S. What NCCL and MPI do inside a node, on our shared heaps.
 *
 * Contract: any count, op, type, in place or not. It needs every rank's send and receive
 * buffers in that rank's shared heap (mlsys_alloc_aligned in a job); when one rank's are not,
 * every rank learns it in step 0 and all of them run the ring instead.
 *
 * What each rank holds (N = 4, the vector cut into slices s0..s3 by coll_chunk):
 *   step 0  publish: everyone learns where everyone's buffers are (an all-gather of offsets)
 *   step 1  reduce:  rank r writes s_r = in0[s_r] op in1[s_r] op in2[s_r] op in3[s_r]
 *           (operands in rank order on every rank: the result does not depend on who adds)
 *   ...     barrier: every slice is final
 *   step 2  gather:  rank r copies s_k from rank k's receive buffer, for every k != r
 *   ...     barrier: nobody reuses a buffer while a peer still reads it
 * In place is safe: in step 1 rank r writes only s_r of its buffer, which no peer reads;
 * in step 2 peers read only s_k of rank k's buffer, which rank k does not write. */
#include "coll.h"
#include <stdlib.h>

typedef struct placement { int64_t ok, send_off, recv_off; } placement;

static int barrier(mlsys_comm *c)
{
    return coll_barrier_dissemination(c, NULL);
}

int coll_allreduce_shm_direct(mlsys_comm *c, const coll_args *a)
{
    int n = c->size, r = c->rank, rc;
    size_t es = dt_size(a->dt), bytes = a->count * es;
    placement mine = {0, 0, 0}, *all = mlsys_xcalloc((size_t)n, sizeof *all);
    uint64_t so, ro;
    if (c->w->h && heap_offset(a->sendbuf, bytes, &so) && heap_offset(a->recvbuf, bytes, &ro))
        mine = (placement){1, (int64_t)so, (int64_t)ro};
    all[r] = mine;
    if ((rc = mlsys_step(c, 0, "publish")))
        goto out;
    coll_args pub = {&all[r], all, 3, MLSYS_I64, MLSYS_OP_NONE, 0};
    if ((rc = coll_allgather_ring(c, &pub)))
        goto out;
    int everyone = 1;
    for (int k = 0; k < n; k++)
        everyone &= all[k].ok == 1;
    if (!everyone) {               /* the same verdict on every rank */
        rc = coll_allreduce_ring(c, a);
        goto out;
    }

    const void **in = mlsys_xcalloc((size_t)n, sizeof *in);
    size_t off, len;
    coll_chunk(a->count, n, r, &off, &len);
    for (int k = 0; k < n && !rc; k++) {
        const char *base = k == r ? a->sendbuf
                                  : heap_peer(c->w, c->world_of[k], (uint64_t)all[k].send_off);
        if (!base)
            rc = MLSYS_ERR_SYS;
        in[k] = base + off * es;
    }
    if (!rc && (rc = mlsys_step(c, 1, "reduce my slice")) == 0)
        mlsys_reduce_many(coll_at(a->recvbuf, off, a->dt), in, n, len, a->dt, a->op);
    free(in);
    if (!rc)
        rc = barrier(c);
    if (!rc)
        rc = mlsys_step(c, 2, "gather the slices");
    for (int k = 0; k < n && !rc; k++) {
        if (k == r)
            continue;
        coll_chunk(a->count, n, k, &off, &len);
        const char *theirs = heap_peer(c->w, c->world_of[k], (uint64_t)all[k].recv_off);
        if (!theirs) {
            rc = MLSYS_ERR_SYS;
            break;
        }
        mlsys_copy_large(coll_at(a->recvbuf, off, a->dt), theirs + off * es, len * es);
    }
    if (!rc)
        rc = barrier(c);
    if (rc == MLSYS_ERR_SYS)
        mlsys_set_error(c, rc, "rank %d: all_reduce: cannot map a peer's heap", r);
out:
    free(all);
    return rc;
}
