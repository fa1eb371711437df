/* coll.h - how collective algorithms plug in: one signature for every algorithm of a
 * collective, one table per collective with a decide() rule, and the helpers that all
 * algorithms share. Algorithms use only the point-to-point API of mlsys.h. */
#ifndef MLSYS_COLL_H
#define MLSYS_COLL_H

#include "../internal.h"

typedef struct coll_args {
    const void *sendbuf;
    void *recvbuf;
    size_t count;        /* as in mlsys.h: per rank for allgather/reduce_scatter/gather/... */
    mlsys_dtype dt;
    mlsys_op op;         /* MLSYS_OP_NONE for data movement */
    int root;
} coll_args;

/* The dispatcher (coll_run) calls an algorithm only with validated arguments, more than one
 * rank and count > 0. An algorithm never divides for AVG: it reduces AVG as SUM and the
 * dispatcher scales once at the end. Every rank calls mlsys_step() the same number of times
 * in one call (idle ranks too), so that gated mode grants "step k" to all ranks at once. */
typedef int (*coll_fn)(mlsys_comm *c, const coll_args *a);

/* Constraints an algorithm states; the dispatcher falls back to the table's first entry
 * ("direct") when a call does not meet them, and says so in the debug log. */
enum {
    COLL_NEEDS_POW2 = 1 << 0,          /* rank count a power of two */
    COLL_NEEDS_COUNT_GE_RANKS = 1 << 1 /* count >= ranks (one element per chunk at least) */
};

typedef struct coll_algo {
    const char *name;    /* "ring", "tree", "recursive_doubling", "recursive_halving", "direct" */
    coll_fn fn;
    unsigned constraints;
    const char *summary; /* one line for --help and the UI picker */
} coll_algo;

typedef struct coll_table {
    mlsys_coll coll;
    const char *name;            /* "all_reduce" */
    const coll_algo *algos;      /* algos[0] is the naive baseline every test compares with */
    int nalgos;
    const char *const *names;    /* NULL-terminated copy of the names */
    /* Index of the algorithm for this size and rank count; *why gets the rule in words.
     * bytes is count * element size of the call (so per rank for all_gather & co.). */
    int (*decide)(int nranks, size_t bytes, const char **why);
} coll_table;

extern const coll_table coll_broadcast_table, coll_reduce_table, coll_allreduce_table,
    coll_allgather_table, coll_reduce_scatter_table, coll_gather_table, coll_scatter_table,
    coll_alltoall_table, coll_barrier_table;

/* Size thresholds of the decide() rules, in one place so the texts and the code agree. */
#define COLL_STACK_SCRATCH 256u             /* scratch up to this size may live on the stack */
#define COLL_SMALL_BYTES (64u * 1024u)      /* below: latency-bound, fewest steps wins */
#define COLL_SEGMENT_BYTES (256u * 1024u)   /* pipelined broadcast segment */

/* Tags on the collective context: one band per collective, the step inside it. The context
 * already keeps them apart from user messages; distinct tags make deadlock reports readable. */
#define COLL_TAG(coll, step) ((((int)(coll) + 1) << 20) | ((int)(step) & 0xfffff))

/* coll.c */
const coll_table *coll_table_of(mlsys_coll coll);
int coll_run(mlsys_comm *c, mlsys_coll coll, const coll_args *a);

/* coll.c: helpers shared by the algorithms */
/* Chunk k of n of a vector of total elements: the first total % n chunks get one more. */
void coll_chunk(size_t total, int n, int k, size_t *off, size_t *len);
/* Copy of count elements (streamed past the cache when large and not overlapping, memmove
 * when they overlap); nothing when dst == src or count == 0. */
void coll_copy(void *dst, const void *src, size_t count, mlsys_dtype dt);
/* Send scount elements to dst while receiving rcount from src (either count may be 0: that
 * side is skipped, both ends compute the same sizes). dst/src < 0 skip a side too. */
int coll_exchange(mlsys_comm *c, const void *sbuf, size_t scount, int dst, void *rbuf,
                  size_t rcount, int src, int tag, mlsys_dtype dt);
/* The same with the receive reducing: out = in (op) message. */
int coll_exchange_reduce(mlsys_comm *c, const void *sbuf, size_t scount, int dst,
                         const void *in, void *out, size_t rcount, int src, int tag,
                         mlsys_dtype dt, mlsys_op op);
/* coll_exchange with work(arg) done between posting the send and receiving: local work
 * that overlaps the peer's reading of our message */
int coll_exchange_during(mlsys_comm *c, const void *sbuf, size_t scount, int dst, void *rbuf,
                         size_t rcount, int src, int tag, mlsys_dtype dt,
                         void (*work)(void *), void *arg);
int coll_send(mlsys_comm *c, const void *buf, size_t count, mlsys_dtype dt, int peer, int tag);
int coll_recv(mlsys_comm *c, void *buf, size_t count, mlsys_dtype dt, int peer, int tag);
int coll_recv_reduce(mlsys_comm *c, const void *in, void *out, size_t count, mlsys_dtype dt,
                     mlsys_op op, int peer, int tag);
/* Scratch of n bytes (never NULL, also for n == 0), from the shared heap when large so that
 * peers read it fast; free with coll_scratch_free (NULL is fine). */
void *coll_scratch(size_t n);
void coll_scratch_free(void *p);
int coll_is_pow2(int n);
int coll_log2_ceil(int n);      /* steps of a binomial tree: ceil(log2 n), 0 for n <= 1 */
int coll_pow2_floor(int n);     /* largest power of two <= n */
static inline char *coll_at(const void *base, size_t elems, mlsys_dtype dt)
{
    return (char *)base + elems * mlsys_dtype_size(dt);
}

/* broadcast.c */
int coll_broadcast_direct(mlsys_comm *c, const coll_args *a);
int coll_broadcast_tree(mlsys_comm *c, const coll_args *a);
int coll_broadcast_ring(mlsys_comm *c, const coll_args *a);
int coll_broadcast_scatter_allgather(mlsys_comm *c, const coll_args *a);
/* Binomial broadcast of buf from root, its steps numbered from step0. */
int coll_tree_bcast(mlsys_comm *c, void *buf, size_t count, mlsys_dtype dt, int root,
                    int step0);

/* reduce.c */
int coll_reduce_direct(mlsys_comm *c, const coll_args *a);
int coll_reduce_tree(mlsys_comm *c, const coll_args *a);
int coll_reduce_ring(mlsys_comm *c, const coll_args *a);
/* Binomial reduce to root. work: where this rank may accumulate (count elements); the root
 * passes its recvbuf, a rank with no writable buffer passes NULL and gets a scratch when it
 * has children. The result lands in the root's work. Steps numbered from step0. */
int coll_tree_reduce(mlsys_comm *c, const void *sendbuf, void *work, size_t count,
                     mlsys_dtype dt, mlsys_op op, int root, int step0);

/* allreduce.c */
int coll_allreduce_direct(mlsys_comm *c, const coll_args *a);
int coll_allreduce_ring(mlsys_comm *c, const coll_args *a);
int coll_allreduce_tree(mlsys_comm *c, const coll_args *a);
int coll_allreduce_recursive_doubling(mlsys_comm *c, const coll_args *a);
int coll_allreduce_recursive_halving(mlsys_comm *c, const coll_args *a);

/* allreduce_shm.c */
int coll_allreduce_shm_direct(mlsys_comm *c, const coll_args *a);

/* allgather.c */
int coll_allgather_direct(mlsys_comm *c, const coll_args *a);
int coll_allgather_ring(mlsys_comm *c, const coll_args *a);
int coll_allgather_recursive_doubling(mlsys_comm *c, const coll_args *a);

/* reduce_scatter.c */
int coll_reduce_scatter_direct(mlsys_comm *c, const coll_args *a);
int coll_reduce_scatter_ring(mlsys_comm *c, const coll_args *a);
int coll_reduce_scatter_recursive_halving(mlsys_comm *c, const coll_args *a);
/* Ring reduce-scatter of a vector of total elements cut into N chunks by coll_chunk():
 * rank r ends with the reduction of chunk r in out (len of chunk r elements). Uses two
 * chunk-sized scratch buffers; sendbuf is only read. Steps numbered from step0. */
int coll_ring_reduce_scatter(mlsys_comm *c, const void *sendbuf, void *out, size_t total,
                             mlsys_dtype dt, mlsys_op op, int step0);

/* gather.c */
int coll_gather_direct(mlsys_comm *c, const coll_args *a);
int coll_gather_tree(mlsys_comm *c, const coll_args *a);

/* scatter.c */
int coll_scatter_direct(mlsys_comm *c, const coll_args *a);
int coll_scatter_tree(mlsys_comm *c, const coll_args *a);

/* alltoall.c */
int coll_alltoall_direct(mlsys_comm *c, const coll_args *a);

/* barrier.c */
int coll_barrier_direct(mlsys_comm *c, const coll_args *a);
int coll_barrier_dissemination(mlsys_comm *c, const coll_args *a);

#endif
