/* internal.h - what core/ files share and nobody else sees: the communicator, the job
 * segment's layout, the transport interface and the progress loop. Labs and the UI use
 * mlsys.h only. */
#ifndef MLSYS_INTERNAL_H
#define MLSYS_INTERNAL_H

#include "mlsys.h"
#include <stdatomic.h>

/* ---- job segment (one memfd per job, mapped by the runner and every rank) ----
 * header | rank_state[N] | chan[N*N] (src-major: sender src, receiver dst) | rings[N]
 * No name in /dev/shm: the memory disappears when the last process holding it exits. */
#define SHM_MAGIC 0x4d4c5359534c4142ull   /* "MLSYSLAB" */
#define SHM_SLOTS 8                        /* outstanding messages per (src, dst) pair */
#define SHM_INLINE 2048                    /* messages up to this size travel in the slot */
#define SHM_MAX_RANKS 64

enum { SLOT_FREE = 0, SLOT_POSTED = 1, SLOT_DONE = 2 };
enum { WAIT_NONE = 0, WAIT_SEND = 1, WAIT_RECV = 2, WAIT_GATE = 3, WAIT_DONE = 4 };

/* A slot's first cache line holds the header and the first 24 bytes of an inline message,
 * so that a message of a few numbers moves between cores as one line. */
typedef struct shm_slot {
    _Alignas(64) _Atomic uint32_t state;  /* only the sender moves FREE->POSTED and DONE->FREE */
    uint32_t ctx;               /* communicator context: user p2p and collectives differ */
    int32_t tag;
    int32_t pid;                /* sender's pid, for process_vm_readv */
    uint64_t seq;               /* per (src, dst) sequence: matching is in posting order */
    uint64_t bytes;
    int8_t status;              /* receiver's verdict: 0 or an MLSYS_ERR_ code */
    uint8_t eager;              /* 1: the send completed at posting; the slot is reclaimed
                                 * by the sender's next post once the receiver is done */
    uint8_t in_heap;            /* bytes > SHM_INLINE: 1 = addr is an offset in the sender's
                                 * heap, 0 = an address in the sender (process_vm_readv) */
    uint8_t pad0;
    uint32_t pad1;
    union {                     /* offset 40 */
        uint64_t addr;          /* bytes > SHM_INLINE: where the sender's buffer is */
        unsigned char data[SHM_INLINE];   /* bytes <= SHM_INLINE: the message */
    } u;
} shm_slot;

/* The fast box: a ring of one-line cells per channel for the eager messages of collectives
 * up to FBOX_DATA bytes (shm_fbox.c). Only the sender writes a cell and only the receiver
 * writes fb_taken, so a message costs the two cache-line moves it must: the sender takes
 * the line the receiver polls, the receiver reads it back. FBOX_CELLS is how far a
 * broadcast's root may run ahead of a receiver; on oversubscribed cores every message it
 * runs ahead saves a switch later: 8 B broadcast on 4 ranks took 1.1 us a call with 16
 * cells, 0.58 with 64, 0.49 with 128 or 256 (OpenMPI 0.40-0.55). */
#define FBOX_CELLS 128
#define FBOX_DATA 32

typedef struct fbox_cell {
    _Alignas(64) _Atomic uint64_t pub;  /* k + 1 once it holds the channel's k-th cell message */
    uint64_t seq;               /* the message's per-(src, dst) sequence number */
    uint32_t ctx;
    int32_t tag;
    uint32_t bytes;
    uint32_t pad;
    unsigned char data[FBOX_DATA];
} fbox_cell;
_Static_assert(sizeof(fbox_cell) == 64, "a fast-box cell is one cache line");

/* One channel per ordered pair (src, dst). posted counts the sender's slot posts: a receiver
 * whose last look found nothing for it polls this one line, not every slot, and so never
 * pulls a slot's line away from a sender still writing it. */
typedef struct shm_chan {
    _Alignas(64) _Atomic uint64_t posted;   /* written by the sender only */
    _Alignas(64) _Atomic uint64_t fb_taken; /* written by the receiver only: cells consumed */
    fbox_cell fb[FBOX_CELLS];
    shm_slot slot[SHM_SLOTS];
} shm_chan;

/* What a rank remembers of its two channels with one peer (private memory). */
typedef struct shm_peer {
    uint64_t slot_posts;        /* to the peer: slot messages posted (mirrors chan.posted) */
    uint64_t fb_sent;           /* to the peer: cells posted */
    uint64_t fb_taken_seen;     /* to the peer: the last fb_taken we read */
    uint64_t fb_next;           /* from the peer: the next cell to consume */
    uint64_t slot_taken;        /* from the peer: slot messages consumed */
} shm_peer;

/* A fast-box message that arrived before its receive was posted (or while an older message
 * of the channel waits in a slot): kept here in arrival order until a receive takes it. */
typedef struct fbox_msg {
    struct fbox_msg *next;
    int src;
    uint32_t ctx;
    int32_t tag;
    uint32_t bytes;
    uint64_t seq;
    unsigned char data[FBOX_DATA];
} fbox_msg;

typedef struct shm_rank_state {
    /* written by every peer that wakes this rank: a cache line of its own */
    _Alignas(64) _Atomic uint32_t bell;  /* eventcount: bumped for a rank that sleeps */
    _Atomic uint32_t sleepers;  /* >0: the rank sleeps on bell (futex), or is about to */
    /* written by this rank only */
    _Alignas(64) _Atomic int32_t pid;
    _Atomic int32_t wait_kind;  /* WAIT_* published for the deadlock report */
    _Atomic int32_t wait_peer;  /* world rank */
    _Atomic int32_t wait_tag;
    _Atomic uint64_t wait_bytes;
    _Atomic uint64_t gate_passed;   /* steps this rank has passed in gated mode */
    _Atomic int32_t gate_step;      /* the step it waits at */
} shm_rank_state;

typedef struct shm_ring {
    _Atomic uint64_t head;      /* written by the rank */
    _Atomic uint64_t tail;      /* written by the runner */
    _Atomic uint64_t lost;      /* events dropped after back-pressure gave up */
    uint64_t pad[5];
    /* mlsys_event ev[cap] follows */
} shm_ring;

typedef struct shm_header {
    uint64_t magic;
    int32_t world;
    int32_t gated;
    int32_t cpus;               /* CPUs the runner spreads ranks over (each rank is bound to one) */
    int32_t pad0;
    uint64_t ring_cap;          /* events per ring, 0 = tracing off */
    uint64_t size;              /* bytes in the segment */
    uint64_t off_ranks, off_chan, off_rings, ring_stride;
    _Atomic int32_t abort;      /* set by the runner when the job is torn down */
    _Atomic int32_t runner_waiting;
    _Atomic uint32_t runner_bell;   /* bumped when a ring fills; the runner drains */
    _Atomic uint64_t gate_credit;   /* gated mode: steps every rank may pass */
    uint64_t t0_ns;
    uint64_t heap_size;         /* bytes of each rank's communication heap */
    int32_t heap_fd[SHM_MAX_RANKS];  /* memfd of each rank's heap (same number everywhere) */
    char pad[64];
} shm_header;

size_t shm_segment_size(int world, uint64_t ring_cap);
void shm_segment_layout(shm_header *h, int world, uint64_t ring_cap);
shm_rank_state *shm_rank(shm_header *h, int r);
shm_chan *shm_channel(shm_header *h, int src, int dst);
shm_ring *shm_ring_of(shm_header *h, int r);
mlsys_event *shm_ring_events(shm_ring *ring);
void shm_bell_init(void);
void shm_bell_ring(shm_header *h, int r);   /* after publishing a change: wake r if it sleeps */
#if defined(__x86_64__) || defined(__i386__)
#define cpu_relax() __builtin_ia32_pause()
#else
#define cpu_relax() atomic_signal_fence(memory_order_seq_cst)
#endif
/* Rank r waits until ready(arg) or timeout_ms passes: polls, yields, then sleeps on its
 * bell. Returns 1 when ready; 0 after a sleep (the caller looks again). */
typedef int (*shm_ready_fn)(void *arg);
int shm_bell_wait(shm_header *h, int r, shm_ready_fn ready, void *arg, int timeout_ms,
                  uint64_t spin_ns);

/* Element sizes: the one definition, inline for the runtime's hot paths; mlsys_dtype_size
 * (types.c) returns it to labs and plugins. */
static inline size_t dt_size(mlsys_dtype dt)
{
    switch (dt) {
    case MLSYS_F32: case MLSYS_I32: return 4;
    case MLSYS_F64: case MLSYS_I64: return 8;
    default: return 0;
    }
}

/* ---- requests ---- */
enum { REQ_SEND = 1, REQ_RECV = 2, REQ_COLL = 3 };   /* REQ_COLL: icoll.c's requests */

struct mlsys_request {
    mlsys_comm *comm;
    int kind;
    int peer_world;             /* world rank of the peer */
    int tag;
    uint32_t ctx;
    size_t bytes;
    const void *sbuf;           /* send: data; recv-reduce: the "in" operand */
    void *rbuf;
    mlsys_dtype dt;
    mlsys_op op;                /* MLSYS_OP_NONE for a plain receive */
    int done;
    int status;
    int slot;                   /* send: slot index once posted; -1 before */
    uint64_t scanned;           /* recv: the channel's posted count when a scan last found
                                 * nothing for it (UINT64_MAX: not yet looked) */
    uint64_t seq;
    uint64_t msg_id;
    uint64_t span_id;
    struct mlsys_request *next, *prev;   /* in the world's pending list */
};

typedef struct mlsys_world mlsys_world;

/* ---- transports: how bytes move (shm_p2p.c; an MPI plugin offers the same) ---- */
typedef struct transport_ops {
    const char *name;
    int (*post)(mlsys_request *r);       /* start a send or receive already in the pending list */
    int (*progress)(mlsys_world *w);     /* advance every pending request once */
    int (*wait)(mlsys_request *r);       /* until done, timeout or abort; returns its status */
    void (*cancel)(mlsys_request *r);    /* withdraw a request given up on */
    /* Optional shortcuts, used when nobody traces: move a message at once, without a
     * request, when the transport can finish it on the spot (an eager send with room for
     * it; a receive whose message is already first in line). Return 1 when done (a receive
     * sets *status: 0 or an MLSYS_ERR_ code), 0 to take the request path. */
    int (*send_now)(mlsys_comm *c, const void *buf, size_t bytes, int peer_world, int tag);
    int (*recv_now)(mlsys_comm *c, const void *in, void *out, size_t bytes, mlsys_dtype dt,
                    mlsys_op op, int peer_world, int tag, int *status);
    /* The backend's own collective (MPI_Allreduce, ncclAllReduce): the algorithm "native".
     * NULL, or MLSYS_ERR_UNSUPPORTED for a collective it lacks. args: core/coll/coll.h. */
    int (*native)(mlsys_comm *c, int coll, const void *args);
    void (*fini)(mlsys_world *w);        /* at mlsys_finalize */
    /* Optional: the backend's own non-blocking collective (MPI_Iallreduce & co.) for r, a
     * REQ_COLL request already in the pending list; progress/wait/cancel then treat r like
     * any other request, and the transport completes it itself (not with req_complete).
     * args: core/coll/coll.h. 0, or an error with the communicator's message. */
    int (*icoll)(mlsys_request *r, int coll, const void *args);
    /* Optional: the transport's side of child, a communicator of parent's group under a new
     * context (a progress thread's shadow), made by every member of parent at the same point
     * of its program (collective over parent). 0, or an error with parent's message. */
    int (*dup)(mlsys_comm *parent, mlsys_comm *child);
    /* 1: icoll.c's progress thread may drive this transport (one thread at a time, never two
     * at once), so the non-blocking collectives run our algorithms as on shm, bit for bit;
     * 0: they are the transport's icoll, or refused. */
    int serialized_threads;
} transport_ops;

extern const transport_ops shm_transport;

/* shm_p2p.c: a send to dst, at o or older in the pending list, still waits to be posted */
int shm_send_queued(const mlsys_request *o, int dst);
/* Tests only (test_order_stress), NULL in the runtime: called between a receive's look at
 * the fast box and its slot scan, the window a descheduled receiver leaves its sender. */
extern void (*shm_recv_window_hook)(mlsys_request *r);
/* shm_p2p.c: a receive gets a message's bytes (copied, or reduced into rbuf) and completes */
void shm_recv_finish(mlsys_request *r, const void *data, size_t n, uint64_t seq);
/* n bytes of data into a receive of cap bytes (reduced with in when op is not NONE): 0, or
 * MLSYS_ERR_TRUNCATE with the communicator's message */
int shm_recv_bytes(mlsys_comm *c, const void *in, void *out, size_t cap, mlsys_dtype dt,
                   mlsys_op op, int src, int tag, const void *data, size_t n);

/* shm_fbox.c */
int fbox_fits(const mlsys_request *r);        /* an eager message that fits a cell */
int fbox_post(mlsys_request *r);              /* 1: posted; 0: the ring is full */
int fbox_send_now(mlsys_comm *c, const void *buf, size_t bytes, int dst, int tag);
int fbox_recv_now(mlsys_comm *c, const void *in, void *out, size_t bytes, mlsys_dtype dt,
                  mlsys_op op, int src, int tag, int *status);
void fbox_drain(mlsys_world *w, int src);     /* take the cells that arrived from src */
fbox_msg *fbox_find(mlsys_world *w, const mlsys_request *r);   /* oldest kept match */
void fbox_forget(mlsys_world *w, fbox_msg *m);                  /* taken: unlink, free */
void fbox_fini(mlsys_world *w);

/* ---- the world (one per process) and communicators ---- */
struct mlsys_world {
    shm_header *h;
    size_t map_len;
    int rank, size, local_rank;
    uint64_t *send_seq;         /* [size]: next sequence number per destination */
    shm_peer *peers;            /* [size]: the shm transport's private view of each channel */
    fbox_msg *unexp, *unexp_tail;   /* fast-box messages no receive has taken yet */
    uint64_t *recv_seq;         /* [size]: last sequence consumed per source (diagnostics) */
    mlsys_request *pending;     /* all unfinished requests of this process, oldest first */
    mlsys_request *pending_tail;
    unsigned char *scratch;     /* page-aligned bounce for recv-reduce */
    size_t scratch_len;
    int cma_ok;                 /* process_vm_readv works here */
    uint32_t next_ctx;
    struct mlsys_comm *comms;   /* every communicator of this process, for finalize */
    int gated;
    uint64_t spin_ns;           /* how long a waiter spins: 0 when ranks outnumber cores */
    pid_t pid;                  /* getpid() is a system call: asked once */
    mlsys_request *free_reqs;   /* finished requests kept for reuse (p2p.c) */
    int nfree_reqs;
    uint64_t spans;             /* trace span counter */
    char **peer_heap;           /* [size]: mappings of the ranks' heaps, lazily */
    const transport_ops *tp;
    void *tp_state;             /* the transport's private state */
    int tracing;                /* someone collects events */
    /* where events go: NULL = this rank's ring in the job segment; a plugin sends them on */
    void (*emit)(mlsys_world *w, const mlsys_event *ev);
    /* icoll.c: the non-blocking collectives' engine (NULL until the first one), and 1 while
     * its progress thread may own the transport: then p2p calls of the main thread wait for
     * it first (icoll_fence). Written by the main thread only. */
    struct icoll_engine *icoll;
    _Atomic int icoll_busy;
};

struct mlsys_comm {
    mlsys_world *w;
    int rank, size;
    int *world_of;              /* [size]: group rank -> world rank */
    uint32_t ctx;               /* user p2p context; collectives use ctx + 1 */
    int in_coll;                /* >0 while inside a collective */
    int no_coll_steps;          /* mlsys_set_coll_steps(c, 0): its collectives mark no steps */
    int timeout_ms;
    int algo_forced[MLSYS_COLL_COUNT];   /* index into the table, -1 = rule */
    int8_t algo_by[MLSYS_COLL_COUNT];    /* who forced it: MLSYS_ALGO_BY_USER or _LAB */
    const char *last_algo;
    int split_count;
    mlsys_counters counters;
    int err;
    char errmsg[512];
    int cur_coll;               /* collective running now, -1 */
    int cur_algo;
    struct mlsys_comm *next_comm;
    /* icoll.c: the shadow communicator this one's non-blocking collectives run on (same
     * group, context ctx | ICOLL_CTX_BIT), made at the first one; is_shadow marks a shadow,
     * whose calls come from the progress thread and never fence; icoll_broken: an earlier
     * non-blocking collective failed, the shadow's sequence is lost */
    struct mlsys_comm *icoll_shadow;
    int is_shadow;
    int icoll_broken;
};

/* The context a message of c carries now: user p2p on ctx, collectives on ctx + 1 (odd). */
static inline uint32_t comm_ctx(const mlsys_comm *c)
{
    return c->ctx + (c->in_coll ? 1u : 0u);
}

static inline int ctx_is_coll(uint32_t ctx)
{
    return ctx & 1u;
}

/* A message's id, the same on both sides: source, destination and the pair's sequence. */
#define MSG_ID(src, dst, seq) (((uint64_t)(src) << 48) | ((uint64_t)(dst) << 40) | \
                               ((uint64_t)(seq) & ((1ull << 40) - 1)))

/* p2p.c */
void req_pending_add(mlsys_world *w, mlsys_request *r);
void req_pending_remove(mlsys_world *w, mlsys_request *r);
void req_complete(mlsys_request *r, int status);   /* counters, event, off the pending list */
void req_drop(mlsys_request *r);   /* given up on: withdrawn if in flight, then released */

/* comm.c */
mlsys_comm *comm_create(mlsys_world *w, int size, const int *world_of, uint32_t ctx);
mlsys_world *world_attach(int fd, int rank, int size, int local_rank);

/* copy.c: large copies and reductions with non-temporal stores (plain below 4 MiB) */
void mlsys_copy_large(void *dst, const void *src, size_t n);
void mlsys_reduce_large(void *out, const void *a, const void *b, size_t count, mlsys_dtype dt,
                        mlsys_op op);
void mlsys_reduce_many(void *out, const void *const *in, int n, size_t count, mlsys_dtype dt,
                       mlsys_op op);

/* util.c: like mlsys_alloc_aligned, without the promise of zeroes (scratch) */
void *mlsys_alloc_scratch(size_t n);

/* heap.c */
int heap_attach(mlsys_world *w);
void heap_detach(mlsys_world *w);
void *heap_alloc(size_t n, int zero);     /* NULL: no heap, or it is full */
int heap_free(void *p, size_t n);
int heap_offset(const void *p, size_t n, uint64_t *off);
const void *heap_peer(mlsys_world *w, int r, uint64_t off);

/* trace.c */
void trace_ev(mlsys_comm *c, int kind, int peer_world, int tag, uint64_t bytes,
              uint64_t msg_id, uint64_t span_id);
int trace_drain(shm_header *h, int world, mlsys_event *out, size_t max);
/* trace_collect.c: an output line with its own time (the reader's, from the file); text is
 * copied. (struct mlsys_trace: trace.h) */
struct mlsys_trace;
void trace_add_line_at(struct mlsys_trace *t, uint64_t t_ns, int rank, int is_err,
                       const char *text);

/* coll.c */
void coll_init_comm(mlsys_comm *c);              /* algorithm choice from MLSYS_ALGO */

/* icoll.c: non-blocking collectives. Split contexts use bits 1..27 (leader rank << 22), so
 * the top bit gives every communicator a second, disjoint pair for its shadow. */
#define ICOLL_CTX_BIT 0x80000000u
int icoll_wait(mlsys_request *r);                /* mlsys_wait of a REQ_COLL request */
int icoll_test(mlsys_request *r, int *done);
void icoll_drop(mlsys_request *r);               /* req_drop of a REQ_COLL request */
int icoll_fence(mlsys_comm *c);                  /* until the progress thread is idle */
void icoll_fini(mlsys_world *w);                 /* at mlsys_finalize, before the transport */
/* The main thread's p2p must wait while the progress thread owns the transport: one load
 * of a flag that is 0 unless non-blocking collectives were issued and not yet seen done. */
static inline int icoll_fence_needed(const mlsys_comm *c)
{
    return atomic_load_explicit(&c->w->icoll_busy, memory_order_relaxed) && !c->is_shadow;
}

#endif
