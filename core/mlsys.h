/* mlsys.h - the public face of the MLSys Lab runtime: communicators, point-to-point,
 * collectives, events and the launcher. This header is the table of contents of core/:
 * prototypes are grouped under the file that implements them. core/ knows nothing of
 * chapters or of the terminal UI. */
#ifndef MLSYS_H
#define MLSYS_H

#include <stddef.h>
#include <stdint.h>
#include <stdarg.h>
#include <sys/types.h>

#define MLSYS_VERSION "0.1.0"

/* ---- types.c: element types, reduction operators, reduction kernels ---- */
typedef enum { MLSYS_F32, MLSYS_F64, MLSYS_I32, MLSYS_I64, MLSYS_DTYPE_COUNT } mlsys_dtype;
typedef enum { MLSYS_SUM, MLSYS_PROD, MLSYS_MIN, MLSYS_MAX, MLSYS_AVG, MLSYS_OP_COUNT,
               MLSYS_OP_NONE = -1 } mlsys_op;

size_t mlsys_dtype_size(mlsys_dtype dt);
const char *mlsys_dtype_name(mlsys_dtype dt);   /* "float", "double", "int32", "int64" */
const char *mlsys_op_name(mlsys_op op);         /* "sum", "prod", "min", "max", "avg" */
int mlsys_dtype_parse(const char *s, mlsys_dtype *out);  /* 0 on success, -1 unknown */
int mlsys_op_parse(const char *s, mlsys_op *out);
/* out[i] = a[i] (op) b[i] for i < count; out may alias a or b. AVG reduces as SUM
 * (the collective divides once at the end). Integer arithmetic wraps (no UB). */
void mlsys_reduce_local(void *out, const void *a, const void *b, size_t count,
                        mlsys_dtype dt, mlsys_op op);
/* buf[i] /= n for AVG; integers divide with truncation toward zero. */
void mlsys_scale_avg(void *buf, size_t count, mlsys_dtype dt, int n);

/* ---- error codes (every runtime call returns one; the message names who and what) ---- */
enum {
    MLSYS_OK = 0,
    MLSYS_ERR_ARG = -1,       /* bad argument: null buffer, peer out of range, bad type */
    MLSYS_ERR_TIMEOUT = -2,   /* waited longer than the timeout: deadlock suspected */
    MLSYS_ERR_ABORTED = -3,   /* the job is being torn down (another rank failed) */
    MLSYS_ERR_TRUNCATE = -4,  /* the message is larger than the receive buffer */
    MLSYS_ERR_SYS = -5,       /* a system call failed */
    MLSYS_ERR_UNSUPPORTED = -6/* the backend or algorithm cannot do this */
};

typedef struct mlsys_comm mlsys_comm;
typedef struct mlsys_request mlsys_request;

/* ---- comm.c: communicators, groups, counters, errors ---- */
/* Join the job described by the environment the launcher exported (MLSYS_JOB_FD, RANK,
 * WORLD_SIZE, ...). Returns NULL with a message on stderr when not started by a launcher. */
mlsys_comm *mlsys_init(void);
void mlsys_finalize(mlsys_comm *c);     /* frees c and every communicator split from it */
int mlsys_rank(const mlsys_comm *c);
int mlsys_size(const mlsys_comm *c);
int mlsys_world_rank(const mlsys_comm *c);   /* this process's rank in the whole job */
int mlsys_local_rank(const mlsys_comm *c);
const char *mlsys_backend_name(const mlsys_comm *c);
/* Collective over c: ranks with the same color form a new communicator, ordered by
 * (key, old rank). color < 0 returns *out = NULL for that rank. */
int mlsys_split(mlsys_comm *c, int color, int key, mlsys_comm **out);
/* The last error's message ("rank 1: recv from rank 0 tag 3 (16 B): ..."). */
const char *mlsys_errmsg(const mlsys_comm *c);
void mlsys_set_error(mlsys_comm *c, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
int mlsys_timeout_ms(const mlsys_comm *c);
void mlsys_set_timeout_ms(mlsys_comm *c, int ms);

/* Per-communicator counters, for tests and exercise checks (e.g. "2(N-1) sends"). */
typedef struct mlsys_counters {
    uint64_t sends, recvs;              /* point-to-point messages, including collectives' */
    uint64_t bytes_sent, bytes_recv;
    uint64_t coll_calls[16];            /* indexed by mlsys_coll */
} mlsys_counters;
const mlsys_counters *mlsys_get_counters(const mlsys_comm *c);
void mlsys_reset_counters(mlsys_comm *c);

/* ---- p2p.c: point-to-point ---- */
/* send is synchronous: it returns once the receiver has the data (like MPI_Ssend), so two
 * ranks that both send first deadlock, and the timeout reports it. Tags are >= 0. */
int mlsys_send(mlsys_comm *c, const void *buf, size_t count, mlsys_dtype dt, int peer, int tag);
int mlsys_recv(mlsys_comm *c, void *buf, size_t count, mlsys_dtype dt, int peer, int tag);
/* Non-blocking forms: the buffer belongs to the runtime until wait/test says done. The
 * transport is zero-copy (the receiver reads the sender's buffer), so writing a send buffer
 * before wait corrupts the message. */
int mlsys_isend(mlsys_comm *c, const void *buf, size_t count, mlsys_dtype dt, int peer,
                int tag, mlsys_request **req);
int mlsys_irecv(mlsys_comm *c, void *buf, size_t count, mlsys_dtype dt, int peer, int tag,
                mlsys_request **req);
/* Receive with reduction: out[i] = in[i] (op) message[i]. in may equal out. The transport
 * reduces piece by piece while copying, so no temporary of the message size is needed. */
int mlsys_irecv_reduce(mlsys_comm *c, const void *in, void *out, size_t count, mlsys_dtype dt,
                       mlsys_op op, int peer, int tag, mlsys_request **req);
int mlsys_recv_reduce(mlsys_comm *c, const void *in, void *out, size_t count, mlsys_dtype dt,
                      mlsys_op op, int peer, int tag);
int mlsys_wait(mlsys_request *req);                 /* completes and frees req; NULL is ok */
int mlsys_waitall(mlsys_request **reqs, int n);     /* sets each to NULL */
int mlsys_test(mlsys_request *req, int *done);      /* on done, still call wait to free */
/* Send to dst and receive from src at the same time (no deadlock in a ring). */
int mlsys_sendrecv(mlsys_comm *c, const void *sbuf, size_t scount, int dst, int stag,
                   void *rbuf, size_t rcount, int src, int rtag, mlsys_dtype dt);

/* ---- coll.c and core/coll/: collectives, algorithms behind one table per collective ---- */
typedef enum {
    MLSYS_COLL_BROADCAST, MLSYS_COLL_REDUCE, MLSYS_COLL_ALLREDUCE, MLSYS_COLL_ALLGATHER,
    MLSYS_COLL_REDUCE_SCATTER, MLSYS_COLL_GATHER, MLSYS_COLL_SCATTER, MLSYS_COLL_ALLTOALL,
    MLSYS_COLL_BARRIER, MLSYS_COLL_COUNT
} mlsys_coll;

/* In-place conventions (as NCCL): allreduce/bcast/reduce/alltoall: sendbuf == recvbuf;
 * allgather/gather: sendbuf == recvbuf + rank*count; reduce_scatter/scatter:
 * recvbuf == sendbuf + rank*count. count is per rank for allgather, reduce_scatter, gather,
 * scatter and alltoall (per pair); the whole vector for the others. Buffers that a rank does
 * not use (recvbuf of reduce/gather on a non-root, sendbuf of scatter on a non-root) may be
 * NULL and are never written. */
int mlsys_broadcast(mlsys_comm *c, void *buf, size_t count, mlsys_dtype dt, int root);
int mlsys_reduce(mlsys_comm *c, const void *sendbuf, void *recvbuf, size_t count,
                 mlsys_dtype dt, mlsys_op op, int root);
int mlsys_allreduce(mlsys_comm *c, const void *sendbuf, void *recvbuf, size_t count,
                    mlsys_dtype dt, mlsys_op op);
int mlsys_allgather(mlsys_comm *c, const void *sendbuf, void *recvbuf, size_t count,
                    mlsys_dtype dt);
int mlsys_reduce_scatter(mlsys_comm *c, const void *sendbuf, void *recvbuf, size_t count,
                         mlsys_dtype dt, mlsys_op op);
int mlsys_gather(mlsys_comm *c, const void *sendbuf, void *recvbuf, size_t count,
                 mlsys_dtype dt, int root);
int mlsys_scatter(mlsys_comm *c, const void *sendbuf, void *recvbuf, size_t count,
                  mlsys_dtype dt, int root);
int mlsys_alltoall(mlsys_comm *c, const void *sendbuf, void *recvbuf, size_t count,
                   mlsys_dtype dt);
int mlsys_barrier(mlsys_comm *c);

/* Algorithm choice. name NULL or "auto" restores the size/rank rule. Returns
 * MLSYS_ERR_ARG when the collective has no such algorithm. */
int mlsys_set_algo(mlsys_comm *c, mlsys_coll coll, const char *name);
/* Same algorithm name for every collective that has it ("ring" for all); the others keep
 * their rule. Returns the number of collectives that took it (0: unknown name). */
int mlsys_set_algo_all(mlsys_comm *c, const char *name);
/* Which algorithm a call of this size would use, and in *why a sentence saying why. */
const char *mlsys_algo_decide(const mlsys_comm *c, mlsys_coll coll, size_t bytes,
                              const char **why);
const char *mlsys_coll_name(mlsys_coll coll);   /* "all_reduce", ... (the curriculum's names) */
int mlsys_coll_parse(const char *s, mlsys_coll *out);
/* The algorithm names of one collective, NULL-terminated, for help texts and pickers. */
const char *const *mlsys_algo_names(mlsys_coll coll);
const char *mlsys_last_algo(const mlsys_comm *c);   /* name of the algorithm the last call ran */
/* Who chose a call's algorithm: its COLL_BEGIN event says so in tag (and in chunk the index
 * of the algorithm that was chosen when it did not fit the call and the baseline ran, else
 * -1). The user chooses with --algo (MLSYS_ALGO), a lab with mlsys_set_algo; BY_RULE_NONE:
 * the user named an algorithm this collective does not have, so its rule chose. */
enum { MLSYS_ALGO_BY_RULE, MLSYS_ALGO_BY_USER, MLSYS_ALGO_BY_LAB, MLSYS_ALGO_BY_RULE_NONE };

/* ---- icoll.c: non-blocking collectives ---- */
/* Start the collective and return at once; mlsys_wait / mlsys_waitall / mlsys_test complete
 * *req (wait frees it). Buffers and in-place conventions as the blocking forms above; they
 * belong to the runtime until the request completes. Every rank issues its non-blocking
 * collectives of a communicator in the same order (they match in issue order, as in MPI);
 * several may be in flight and be waited for in any order. The result equals the blocking
 * call's bit for bit under the same algorithm (mlsys_set_algo at issue time, or the size
 * rule), on every backend: a progress thread runs them while the caller computes (over MPI
 * it needs MPI_THREAD_SERIALIZED; without it they are MPI's own, MPI_Iallreduce & co.; under
 * nccl with "native" they are NCCL's, run from that thread). The rule while any are in
 * flight: compute, issue more, wait/test them; other calls that move messages (p2p,
 * blocking collectives, split) first wait for every one in flight (allocation from the
 * communication heap is safe: heap.c takes a lock). */
int mlsys_iallreduce(mlsys_comm *c, const void *sendbuf, void *recvbuf, size_t count,
                     mlsys_dtype dt, mlsys_op op, mlsys_request **req);
int mlsys_ireduce_scatter(mlsys_comm *c, const void *sendbuf, void *recvbuf, size_t count,
                          mlsys_dtype dt, mlsys_op op, mlsys_request **req);
int mlsys_iallgather(mlsys_comm *c, const void *sendbuf, void *recvbuf, size_t count,
                     mlsys_dtype dt, mlsys_request **req);

/* ---- trace.c: typed events in per-rank rings ---- */
typedef enum {
    MLSYS_EV_SEND_BEGIN, MLSYS_EV_SEND_END, MLSYS_EV_RECV_BEGIN, MLSYS_EV_RECV_END,
    MLSYS_EV_REDUCE, MLSYS_EV_COLL_BEGIN, MLSYS_EV_COLL_END, MLSYS_EV_STEP,
    MLSYS_EV_COMPUTE_BEGIN, MLSYS_EV_COMPUTE_END, MLSYS_EV_MEM, MLSYS_EV_FLOW, MLSYS_EV_MARK,
    MLSYS_EV_KIND_COUNT
} mlsys_event_kind;

/* Memory events (kind MLSYS_EV_MEM): a block of a pool changes hands. Pools and owners are
 * a lab's own numbering (KV-cache pool 0, sequence ids as owners; ZeRO shards; the RLHF roles'
 * weights, optimizer state, activations, KV cache); a pool belongs to the rank that emits its
 * records, so (rank, pool) names it. Names travel in the label of a POOL or OWNER event, never
 * inside other labels. The blocks view keeps, per pool, each block's owners and reference
 * count and each owner's block table, from these alone; the flow view reads the USAGE gauges.
 *
 *   op      block        owner          refs       index            aux          bytes, val[0]
 *   POOL    -1           role or -1     -          tokens/block     blocks       bytes per block
 *   OWNER   -1           the owner      -          -                -            label = its name
 *   ALLOC   the block    new owner      1          in owner's table -            -
 *   SHARE   the block    one more       new count  in owner's table -            -
 *   FREE    the block    who lets go    new count  -                -            cached: kept
 *   EVICT   the block    -1             0          -                -            -
 *   COW     old block    the writer     old count  in owner's table the new one  -
 *   USAGE   -1           role or -1     -          -                -            bytes in use
 *   WRITE   the block    -1 or owner    -          -                -            val[0] its value
 *   BUSY    the block    -1 or owner    -          -                -            -
 *
 * (step may carry the lab's iteration.) A POOL record for a pool that exists starts it afresh
 * (every block free, no owners; 0 blocks and no USAGE: gone from the picture). An ALLOC that
 * names a block already held moves it (FREE + ALLOC). WRITE gives the view a number that stands for the block's contents (a
 * gradient bucket's mean) to shade it by; BUSY marks it in flight (an all-reduce or a copy in
 * progress) until its next WRITE or FREE. */
typedef enum {
    MLSYS_MEM_POOL,     /* describe pool: aux = blocks, bytes = bytes per block, label name */
    MLSYS_MEM_OWNER,    /* name owner `owner` of the pool (label: "req 3", "actor") */
    MLSYS_MEM_ALLOC,    /* free block -> owner; refs = 1; index = its place in owner's table */
    MLSYS_MEM_SHARE,    /* one more owner takes the block (prefix hit); refs = new count */
    MLSYS_MEM_FREE,     /* owner lets go; refs = new count (0: free, or cached if cached = 1) */
    MLSYS_MEM_EVICT,    /* a cached block nobody references is reclaimed (its hash forgotten) */
    MLSYS_MEM_COW,      /* copy on write: owner's table entry `index` moves from the shared
                           block `block` to the fresh block `aux` (refs = block's new count) */
    MLSYS_MEM_USAGE,    /* a gauge: bytes in use in pool (weights, optimizer, activations...) */
    MLSYS_MEM_WRITE,    /* the block's contents change: val[0] stands for them (a shade) */
    MLSYS_MEM_BUSY,     /* the block is in flight (all-reduce, copy) until its next WRITE/FREE */
    MLSYS_MEM_OP_COUNT
} mlsys_mem_op;

typedef struct mlsys_mem_info {
    int16_t pool;       /* the lab's pool id (per rank) */
    int8_t op;          /* mlsys_mem_op */
    uint8_t cached;     /* FREE: 1 when the block stays cached for its contents */
    int32_t block;      /* block id in the pool, -1 for the pool itself */
    int32_t owner;      /* sequence / shard / role, -1 none */
    int32_t refs;       /* reference count after the change */
    int32_t index;      /* position in the owner's block table, -1; POOL: tokens per block */
    int32_t aux;        /* COW: the new block; POOL: blocks in the pool */
} mlsys_mem_info;

/* Flow events (kind MLSYS_EV_FLOW): a tensor or a batch moves between roles (the RLHF roles,
 * a trainer and a generator, the server's queue, scheduler and model). Roles are named once
 * with MLSYS_FLOW_ROLE; `phase` says which phase of the lab's step the move belongs to. A move
 * may put a number that stands for the batch in val[0] (mean reward, KL): the flow view writes
 * it on the arrow. bytes = the bytes moved. Roles are the lab's numbering across its ranks. */
typedef enum {
    MLSYS_FLOW_ROLE,     /* name role `from` (label), no movement */
    MLSYS_FLOW_PHASE,    /* a new phase begins (phase, label: "generate"; version = iteration);
                            version -1: the lab names a phase before any begins (its phases
                            in order, none current) */
    MLSYS_FLOW_TOKENS,   /* prompts or generated sequences */
    MLSYS_FLOW_LOGPROBS, /* per-token log-probabilities */
    MLSYS_FLOW_REWARDS,  /* scores or per-token rewards */
    MLSYS_FLOW_VALUES,   /* value estimates */
    MLSYS_FLOW_ADVANTAGES,
    MLSYS_FLOW_GRADIENTS,
    MLSYS_FLOW_WEIGHTS,  /* a weight sync: version = the weights' new version */
    MLSYS_FLOW_REQUESTS, /* requests between a server's queue, scheduler and model */
    MLSYS_FLOW_STEP,     /* an engine iteration ended, in numbers (see below); no movement */
    MLSYS_FLOW_WHAT_COUNT
} mlsys_flow_what;

typedef struct mlsys_flow_info {
    int16_t from, to;   /* roles, -1 none */
    int16_t what;       /* mlsys_flow_what */
    int16_t phase;      /* the lab's phase number, -1 */
    int32_t count;      /* sequences, tokens or tensors moved */
    int32_t version;    /* weights version (WEIGHTS), the lab's iteration otherwise */
    int32_t seq;        /* first sequence or request id in the batch, -1 */
    int32_t spare;      /* 0 */
} mlsys_flow_info;
/* MLSYS_FLOW_STEP, one per iteration of a serving engine (core/llm/engine.c), after it:
 * from = the role that ran it, to = -1, version = the step number, count = rows computed,
 * spare = tokens generated in it, seq = -1, phase = -1; val[0] = its seconds, val[1] =
 * requests waiting after it, val[2] = running after it, val[3] = finished so far. Who
 * prefilled and who decoded are that step's REQUESTS moves (same version). */

/* The names the trace writer and the views use: "alloc", "tokens". */
const char *mlsys_mem_op_name(int op);
const char *mlsys_flow_what_name(int what);

/* One fixed-size record (128 bytes). Fields a kind does not use are -1 or 0. The union holds
 * what differs by family: messages (communication, compute, steps, marks) or a memory or
 * flow record, chosen by kind. */
typedef struct mlsys_event {
    uint64_t t_ns;       /* CLOCK_MONOTONIC */
    uint64_t bytes;
    union {
        struct {
            uint64_t msg_id;     /* pairs a send with its receive: src, dst, sequence */
            uint64_t span_id;    /* pairs a begin with its end on one rank (p2p ops overlap) */
            int32_t peer;        /* world rank of the other side, or -1 */
            int32_t tag;
        };
        mlsys_mem_info mem;      /* kind MLSYS_EV_MEM */
        mlsys_flow_info flow;    /* kind MLSYS_EV_FLOW */
    };
    int32_t rank;        /* world rank that emitted it */
    int16_t kind;        /* mlsys_event_kind */
    int16_t coll;        /* mlsys_coll or -1 */
    int16_t algo;        /* index in the collective's algorithm table, or -1 */
    int16_t op;          /* mlsys_op or -1 */
    int32_t step;        /* algorithm step (or the lab's iteration), or -1 */
    int32_t chunk;       /* chunk index, or -1 */
    int32_t dtype;
    double val[4];       /* a few values for the views */
    char label[32];
} mlsys_event;

int mlsys_tracing(const mlsys_comm *c);        /* cheap: is anyone collecting events? */
void mlsys_emit(mlsys_comm *c, const mlsys_event *ev);   /* fills t_ns and rank */
/* Mark an algorithm step boundary: emits a STEP event and, in gated mode, waits here until
 * the viewer grants the next step. */
int mlsys_step(mlsys_comm *c, int step, const char *label);
/* Does mlsys_step wait for the viewer (a gated job)? c may be NULL (0). */
int mlsys_gated(const mlsys_comm *c);
/* Do collectives on c mark their algorithm steps (STEP events, and a gate each in gated
 * mode)? On by default. Off, a lab whose own steps are coarser than an algorithm's (RLHF's
 * phases) gates only where it calls mlsys_step; its collectives' messages are still traced. */
void mlsys_set_coll_steps(mlsys_comm *c, int on);
void mlsys_compute_begin(mlsys_comm *c, const char *label);
void mlsys_compute_end(mlsys_comm *c, const char *label);
/* A compute span measured already: a COMPUTE_BEGIN at t0_ns and a COMPUTE_END at t1_ns
 * (CLOCK_MONOTONIC, mlsys_now_ns), emitted now, with tag = row: 0 the rank's compute (the
 * forward), 1 a second thread of the rank (the serving engine's CPU work beside the forward),
 * which the timeline draws on the lane's second row. For spans two threads of one rank
 * measured: one thread emits both (a rank's ring has one writer). */
void mlsys_compute_span(mlsys_comm *c, int row, uint64_t t0_ns, uint64_t t1_ns,
                        const char *label);
/* Typed memory and flow records (see mlsys_mem_info, mlsys_flow_info); label may be NULL.
 * c may be NULL (nothing is emitted), so engines can take an optional communicator. */
void mlsys_emit_mem(mlsys_comm *c, const mlsys_mem_info *m, uint64_t bytes, const char *label);
void mlsys_emit_flow(mlsys_comm *c, const mlsys_flow_info *f, uint64_t bytes,
                     const char *label);
/* The same with val[0] = value (a WRITE's value, a batch's mean reward); without it val[0]
 * is NaN, "no value". */
void mlsys_emit_mem_value(mlsys_comm *c, const mlsys_mem_info *m, uint64_t bytes,
                          const char *label, double value);
void mlsys_emit_flow_value(mlsys_comm *c, const mlsys_flow_info *f, uint64_t bytes,
                           const char *label, double value);
const char *mlsys_event_kind_name(int kind);
/* Collecting a job's events, writing them as a trace file and reading one back: trace.h. */

/* ---- print.c: output in rank order ---- */
/* Every rank calls it; rank 0 prints the lines of ranks 0..N-1 in order. Collective. */
int mlsys_print_ordered(mlsys_comm *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* A line rank 0 printed for rank r with MLSYS_PRINT_TAGS=1 in the environment starts with
 * "\001r<r>\002": returns the text after the tag and sets *rank; any other line comes back
 * as it is, *rank untouched. */
const char *mlsys_print_untag(const char *line, int *rank);
/* Only rank 0 prints; others do nothing (not collective). */
void mlsys_print_root(mlsys_comm *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Is stdout a reader's terminal (progress lines may redraw in place)? isatty(1), except in
 * a rank under Open MPI's mpirun: its stdout is always a pseudo-terminal that mpirun reads
 * and forwards, wherever mpirun's own output goes (a pipe, a file). */
int mlsys_stdout_is_terminal(void);

/* ---- util.c: time, allocation, random numbers, sizes, percentiles ---- */
uint64_t mlsys_now_ns(void);
double mlsys_now_s(void);
void *mlsys_xmalloc(size_t n);                 /* never returns NULL: exits with a message */
void *mlsys_xcalloc(size_t n, size_t size);
void *mlsys_xrealloc(void *p, size_t n);
void *mlsys_alloc_aligned(size_t n);           /* page-aligned, zeroed; free with mlsys_free_aligned */
void mlsys_free_aligned(void *p, size_t n);
char *mlsys_xstrdup(const char *s);
/* "64K" "1M" "8" "2G" (binary units) -> bytes; -1 on anything else. */
int mlsys_parse_size(const char *s, uint64_t *out);
/* strtol with full validation: 0 on success. */
int mlsys_parse_long(const char *s, long *out);
void mlsys_format_size(uint64_t bytes, char *out, size_t n);   /* "64 MiB" */
void mlsys_format_approx(double bytes, char *out, size_t n);   /* "7.2 TiB", one decimal */
/* Bytes this process can still expect to allocate: the least of the kernel's MemAvailable,
 * what a cgroup v2 memory limit leaves, RLIMIT_AS and RLIMIT_DATA, and MLSYS_MEM_LIMIT when
 * set (a size such as "2G": tests, and sharing a machine). Sizes above it are refused before
 * they are allocated (model readers, the inference engine, train and the labs' ranks). */
uint64_t mlsys_mem_available(void);
/* The p-th percentile (0 to 100) of v[0..n): between the two values whose ranks enclose
 * p / 100 * (n - 1), linearly (numpy's default), so p = 50 is the median: the middle value,
 * or the mean of the two middle ones. Sorts v in place. 0 when n is 0. */
double mlsys_percentile(double *v, size_t n, double p);
/* *ts = the CLOCK_MONOTONIC time s seconds from now: the deadline pthread_cond_timedwait
 * takes on a condition variable whose clock is CLOCK_MONOTONIC (pthread_condattr_setclock),
 * which a change of the wall clock does not move. */
struct timespec;
void mlsys_deadline(struct timespec *ts, double s);

/* Counter-based generator: the same seed gives the same stream on every rank. */
typedef struct mlsys_rng { uint64_t key, ctr; int have_spare; double spare; } mlsys_rng;
void mlsys_rng_seed(mlsys_rng *r, uint64_t seed);
uint64_t mlsys_rng_u64(mlsys_rng *r);
double mlsys_rng_uniform(mlsys_rng *r);        /* [0, 1) */
double mlsys_rng_normal(mlsys_rng *r);         /* Box-Muller */

/* ---- launch.c: the fork launcher ---- */
typedef struct mlsys_launch_opts {
    int world_size;
    int timeout_ms;          /* p2p wait limit before "deadlock suspected"; 0 = default */
    int master_port;         /* exported as MASTER_PORT (informational for shm) */
    int trace_capacity;      /* events per rank ring; 0 = tracing off */
    int gated;               /* ranks wait at each step for a credit */
    const char *algo;        /* exported as MLSYS_ALGO, NULL = auto */
    const char *backend;     /* "shm" */
    int capture_output;      /* 1: stdout/stderr of ranks through pipes to the runner */
    /* > 0: a stop (Ctrl-C, SIGTERM, mlsys_job_stop) first sends SIGUSR1 to rank 0 alone and
     * leaves the job this long to end by itself (a server draining its requests and telling
     * its other ranks to stop); a second stop, or the time running out, stops every rank.
     * 0: every rank is stopped at once. */
    int stop_grace_ms;
} mlsys_launch_opts;

typedef struct mlsys_job mlsys_job;
/* Rank outcome after the job ended. */
typedef struct mlsys_rank_status {
    pid_t pid;
    int exited;      /* 1: normal exit with code; 0: killed by signal */
    int code;        /* exit code or signal number */
    int killed_by_us;/* we stopped it because another rank failed or on Ctrl-C */
} mlsys_rank_status;

/* Start a job: fork N ranks; each runs argv (exec) when argv != NULL, else calls
 * fn(comm, arg) in the forked child and exits with its return value. */
mlsys_job *mlsys_job_start(const mlsys_launch_opts *o, char *const argv[],
                           int (*fn)(mlsys_comm *, void *), void *arg, char *err, size_t errlen);
/* Callbacks the runner gets while it waits: a line of output, a batch of events. */
typedef struct mlsys_job_sink {
    void (*out_line)(void *u, int rank, int is_err, const char *line);
    void (*events)(void *u, const mlsys_event *ev, size_t n);
    void *u;
} mlsys_job_sink;
/* Wait for the job, pumping output and events into sink (may be NULL: output is printed,
 * stdout as is and stderr prefixed "[rank r] "). Returns 0 if every rank exited 0; else
 * non-zero, with a one-line reason in why ("rank 2 died by signal 11 (Segmentation fault)").
 * A poll step of at most step_ms lets an interactive caller regain control: then it returns
 * 1 while the job still runs (call again). step_ms < 0 waits to the end. */
int mlsys_job_wait(mlsys_job *j, const mlsys_job_sink *sink, int step_ms, char *why,
                   size_t whylen);
void mlsys_job_stop(mlsys_job *j);             /* SIGTERM, then SIGKILL after a grace */
const mlsys_rank_status *mlsys_job_status(const mlsys_job *j, int rank);
int mlsys_job_world_size(const mlsys_job *j);
uint64_t mlsys_job_events_lost(const mlsys_job *j);
/* Gate: in gated mode, let every rank pass one more step (returns the new credit). */
uint64_t mlsys_job_grant_step(mlsys_job *j);
void mlsys_job_free(mlsys_job *j);             /* stops it if still running, frees all */
int mlsys_job_failed_rank(const mlsys_job *j); /* first rank that failed, -1 */
/* Processes the ranks started and left running at the job's end (the launcher killed them);
 * *rank, when not NULL, gets the rank one of them came from (-1 when unknown). */
int mlsys_job_strays(const mlsys_job *j, int *rank);
uint64_t mlsys_job_t0_ns(const mlsys_job *j);  /* when the job started (event time base) */
int mlsys_job_gate_step(const mlsys_job *j, int rank);   /* step a rank waits at, -1 */
/* SIGINT/SIGTERM/SIGHUP then only set a flag that mlsys_job_wait turns into a clean stop. */
void mlsys_job_install_signal_stop(void);
/* 0, or the signal of the last stop asked for that way (SIGINT, SIGTERM, SIGHUP). */
/* In a child right after fork: die with the parent (deathsig), default signal handlers and
 * an empty mask, so nothing the parent set up leaks into the child. */
void mlsys_child_tie(pid_t parent, int deathsig);
int mlsys_job_stop_requested(void);
/* How many stops were asked for that way (a second Ctrl-C cuts a graceful stop short). */
int mlsys_job_stop_count(void);
/* Convenience for tests: run fn on N ranks and wait. 0 when all ranks returned 0. */
int mlsys_run_fn(int world_size, int timeout_ms, int (*fn)(mlsys_comm *, void *), void *arg,
                 char *why, size_t whylen);

#endif
