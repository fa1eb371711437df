/* shm.c - the job segment: its layout (header, per-rank state, one channel of slots per
 * ordered pair of ranks, per-rank event rings) and the doorbells through which ranks wake
 * each other. A waiter polls what it waits for briefly, then sleeps on a futex, so that more
 * ranks than cores still make progress and an idle rank costs no CPU. */
#include "internal.h"
#include <errno.h>
#include <linux/futex.h>
#include <linux/membarrier.h>
#include <sched.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define ALIGN_UP(x, a) (((x) + (a)-1) & ~((uint64_t)(a)-1))

void shm_segment_layout(shm_header *h, int world, uint64_t ring_cap)
{
    uint64_t off = ALIGN_UP(sizeof(shm_header), 4096);
    h->off_ranks = off;
    off = ALIGN_UP(off + (uint64_t)world * sizeof(shm_rank_state), 4096);
    h->off_chan = off;
    off = ALIGN_UP(off + (uint64_t)world * world * sizeof(shm_chan), 4096);
    h->off_rings = off;
    h->ring_stride = ring_cap ? ALIGN_UP(sizeof(shm_ring) + ring_cap * sizeof(mlsys_event), 4096) : 0;
    off += h->ring_stride * (uint64_t)world;
    h->world = world;
    h->ring_cap = ring_cap;
    h->size = off;
}

size_t shm_segment_size(int world, uint64_t ring_cap)
{
    shm_header h;
    shm_segment_layout(&h, world, ring_cap);
    return (size_t)h.size;
}

shm_rank_state *shm_rank(shm_header *h, int r)
{
    return (shm_rank_state *)((char *)h + h->off_ranks) + r;
}

shm_chan *shm_channel(shm_header *h, int src, int dst)
{
    return (shm_chan *)((char *)h + h->off_chan) + ((size_t)src * h->world + dst);
}

shm_ring *shm_ring_of(shm_header *h, int r)
{
    return (shm_ring *)((char *)h + h->off_rings + h->ring_stride * (uint64_t)r);
}

mlsys_event *shm_ring_events(shm_ring *ring)
{
    return (mlsys_event *)(ring + 1);
}

static long futex(_Atomic uint32_t *addr, int op, uint32_t val, const struct timespec *ts)
{
    return syscall(SYS_futex, (uint32_t *)addr, op, val, ts, NULL, 0);
}

/* The bell is bumped only for a rank that sleeps, or is about to: a spinning rank polls the
 * real condition (a slot, a flag) and would only pay for the bump, since it moves the bell's
 * cache line away from the core that spins on it. The ringer has published its change (a
 * slot's state, a flag) before it looks at sleepers; the sleeper bumps sleepers before its
 * last look at the condition. Both orders must hold across cores (a Dekker pair) or a wake-up
 * is lost: either each side fences, or, where the kernel offers it, the rare side (the
 * sleeper) fences both with membarrier and the frequent one (a rank ringing after every
 * message) needs none: a fence stalls the ringer until its stores reach the other core. */
static int light_ring;      /* this process registered for membarrier: ring without a fence */
static int heavy_wait;      /* sleepers call membarrier: ranks that registered may ring light */

void shm_bell_init(void)
{
    long q = syscall(SYS_membarrier, MEMBARRIER_CMD_QUERY, 0, 0);
    if (q < 0 || !(q & MEMBARRIER_CMD_GLOBAL_EXPEDITED))
        return;
    heavy_wait = 1;
    light_ring = syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED, 0, 0) == 0;
}

void shm_bell_ring(shm_header *h, int r)
{
    shm_rank_state *s = shm_rank(h, r);
    if (light_ring)
        atomic_signal_fence(memory_order_seq_cst);    /* the compiler keeps the order */
    else
        atomic_thread_fence(memory_order_seq_cst);
    if (atomic_load_explicit(&s->sleepers, memory_order_relaxed) == 0)
        return;
    atomic_fetch_add_explicit(&s->bell, 1, memory_order_seq_cst);
    futex(&s->bell, FUTEX_WAKE, 1 << 30, NULL);
}

/* The sleeper's half: a full fence here and, when the kernel has membarrier, on every core
 * that runs a registered ringer (the ranks call shm_bell_init before they send anything). */
static void sleeper_fence(void)
{
    atomic_thread_fence(memory_order_seq_cst);
    if (heavy_wait)
        syscall(SYS_membarrier, MEMBARRIER_CMD_GLOBAL_EXPEDITED, 0, 0);
}

/* Poll ready() for spin_ns (a message from a rank on the other core arrives within a
 * microsecond or two; when ranks outnumber cores the peer may share this core, and spinning
 * only delays it, so the caller passes 0), then between yields for a while (with more ranks
 * than cores the sender may need this very core; a yield is a system call, about 1.5 us in
 * this VM), then sleep on the futex. Spinning is bounded by time, not by a count: a pause
 * costs 10 ns on one machine and 60 ns in a VM. Returns 1 when ready() said so, 0 after a
 * sleep (woken, or timeout_ms passed): the caller re-checks what it waits for either way. */
#define YIELD_NS 100000ull

int shm_bell_wait(shm_header *h, int r, shm_ready_fn ready, void *arg, int timeout_ms,
                  uint64_t spin_ns)
{
    shm_rank_state *s = shm_rank(h, r);
    uint64_t t0 = mlsys_now_ns(), t = 0;
    while (t < spin_ns) {
        for (int i = 0; i < 16; i++) {
            if (ready(arg))
                return 1;
            cpu_relax();
        }
        t = mlsys_now_ns() - t0;
    }
    do {
        sched_yield();
        if (ready(arg))
            return 1;
        t = mlsys_now_ns() - t0;
    } while (t < YIELD_NS);
    struct timespec ts = {timeout_ms / 1000, (long)(timeout_ms % 1000) * 1000000L};
    atomic_fetch_add_explicit(&s->sleepers, 1, memory_order_seq_cst);
    sleeper_fence();
    uint32_t seen = atomic_load_explicit(&s->bell, memory_order_acquire);
    int ok = ready(arg);
    if (!ok)
        futex(&s->bell, FUTEX_WAIT, seen, &ts);
    atomic_fetch_sub_explicit(&s->sleepers, 1, memory_order_seq_cst);
    return ok;
}
