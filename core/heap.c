/* heap.c - each rank's communication heap: a memfd that the launcher created for it and
 * that every rank of the job can map. Buffers from mlsys_alloc_aligned live here, so a
 * receiver copies (or reduces) straight out of the sender's memory at memcpy speed, without
 * the page pinning of process_vm_readv (about 3x slower on this machine). Other buffers
 * still work through process_vm_readv. First-fit free list, page granularity. */
#include "internal.h"
#include <pthread.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define PAGE 4096ull

typedef struct heap_block {
    uint64_t off, len;
    int dirty;              /* holds kept pages: not zero any more */
    struct heap_block *next;
} heap_block;

static struct {
    mlsys_world *w;
    char *base;
    uint64_t size, brk;
    heap_block *free;       /* sorted by offset, coalesced */
    uint64_t kept;          /* bytes on the free list whose pages were not given back */
    uint64_t keep_max;      /* keep_limit() */
} g_heap;

/* Freed pages stay resident up to a limit: a collective's scratch is freed at the end of
 * every call and allocated again at the next one, and giving its pages back meant a
 * fallocate and a page fault per page each call (64 KiB reduce_scatter on 4 ranks spent
 * 2 ms a call in them, 30x OpenMPI's time; 64 MiB, 350 ms). The limit: a sixteenth of the
 * machine's memory shared by the ranks, at least 16 MiB and at most 256 MiB per rank.
 * Above it, pages go back to the system. */
static uint64_t keep_limit(int world)
{
    long pages = sysconf(_SC_PHYS_PAGES), psize = sysconf(_SC_PAGESIZE);
    uint64_t share = pages > 0 && psize > 0
                         ? (uint64_t)pages * (uint64_t)psize / 16 / (uint64_t)(world > 0 ? world : 1)
                         : 0;
    uint64_t lo = 16ull << 20, hi = 256ull << 20;
    return share < lo ? lo : share > hi ? hi : share;
}

int heap_attach(mlsys_world *w)
{
    if (!w->h)
        return -1;
    int fd = w->h->heap_fd[w->rank];
    if (fd < 0 || !w->h->heap_size)
        return -1;
    void *p = mmap(NULL, w->h->heap_size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE,
                   fd, 0);
    if (p == MAP_FAILED)
        return -1;
    g_heap.w = w;
    g_heap.base = p;
    g_heap.size = w->h->heap_size;
    g_heap.brk = 0;
    g_heap.kept = 0;
    g_heap.keep_max = keep_limit(w->size);
    g_heap.free = NULL;
    w->peer_heap = mlsys_xcalloc((size_t)w->size, sizeof(char *));
    w->peer_heap[w->rank] = p;
    return 0;
}

void heap_detach(mlsys_world *w)
{
    for (int r = 0; w->peer_heap && r < w->size; r++)
        if (w->peer_heap[r])
            munmap(w->peer_heap[r], w->h->heap_size);
    free(w->peer_heap);
    w->peer_heap = NULL;
    while (g_heap.free) {
        heap_block *b = g_heap.free;
        g_heap.free = b->next;
        free(b);
    }
    g_heap.w = NULL;
    g_heap.base = NULL;
}

static void *heap_alloc_locked(size_t n, int zero)
{
    if (!g_heap.base)
        return NULL;
    uint64_t len = ((uint64_t)(n ? n : 1) + PAGE - 1) & ~(PAGE - 1);
    for (heap_block **pp = &g_heap.free; *pp; pp = &(*pp)->next) {
        heap_block *b = *pp;
        if (b->len < len)
            continue;
        uint64_t off = b->off;
        int dirty = b->dirty;
        b->off += len;
        b->len -= len;
        if (dirty)
            g_heap.kept -= len < g_heap.kept ? len : g_heap.kept;
        if (!b->len) {
            *pp = b->next;
            free(b);
        }
        if (dirty && zero)
            memset(g_heap.base + off, 0, len);
        return g_heap.base + off;
    }
    if (g_heap.brk + len > g_heap.size)
        return NULL;
    uint64_t off = g_heap.brk;
    g_heap.brk += len;
    return g_heap.base + off;
}

/* Give the range back to the free list, and its pages back to the system unless they are
 * kept for the next allocation (keep_limit). */
static int heap_free_locked(void *p, size_t n)
{
    char *c = p;
    if (!g_heap.base || c < g_heap.base || c >= g_heap.base + g_heap.size)
        return 0;
    uint64_t off = (uint64_t)(c - g_heap.base);
    uint64_t len = ((uint64_t)(n ? n : 1) + PAGE - 1) & ~(PAGE - 1);
    int keep = g_heap.kept + len <= g_heap.keep_max;
    if (keep)
        g_heap.kept += len;
    else
        fallocate(g_heap.w->h->heap_fd[g_heap.w->rank], FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                  (off_t)off, (off_t)len);
    heap_block **pp = &g_heap.free;
    while (*pp && (*pp)->off < off)
        pp = &(*pp)->next;
    heap_block *b = mlsys_xmalloc(sizeof *b);
    *b = (heap_block){off, len, keep, *pp};
    *pp = b;
    /* merge with the next, then with the previous */
    if (b->next && b->off + b->len == b->next->off) {
        heap_block *nx = b->next;
        b->len += nx->len;
        b->dirty |= nx->dirty;
        b->next = nx->next;
        free(nx);
    }
    for (heap_block *q = g_heap.free; q && q != b; q = q->next)
        if (q->next == b && q->off + q->len == b->off) {
            q->len += b->len;
            q->dirty |= b->dirty;
            q->next = b->next;
            free(b);
            break;
        }
    return 1;
}

/* Is [p, p+n) inside this rank's heap? Then *off is its offset there. */
int heap_offset(const void *p, size_t n, uint64_t *off)
{
    const char *c = p;
    if (!g_heap.base || c < g_heap.base || c + n > g_heap.base + g_heap.brk)
        return 0;
    *off = (uint64_t)(c - g_heap.base);
    return 1;
}

/* The address of offset off in rank r's heap, mapping that heap on first use. */
const void *heap_peer(mlsys_world *w, int r, uint64_t off)
{
    if (!w->peer_heap[r]) {
        void *p = mmap(NULL, w->h->heap_size, PROT_READ, MAP_SHARED | MAP_NORESERVE,
                       w->h->heap_fd[r], 0);
        if (p == MAP_FAILED)
            return NULL;
        w->peer_heap[r] = p;
    }
    return w->peer_heap[r] + off;
}

/* The non-blocking collectives' progress thread allocates scratch here too (core/icoll.c),
 * so the free list is guarded; the lock is uncontended in programs without icolls. */
static pthread_mutex_t heap_mu = PTHREAD_MUTEX_INITIALIZER;

void *heap_alloc(size_t n, int zero)
{
    pthread_mutex_lock(&heap_mu);
    void *p = heap_alloc_locked(n, zero);
    pthread_mutex_unlock(&heap_mu);
    return p;
}

int heap_free(void *p, size_t n)
{
    pthread_mutex_lock(&heap_mu);
    int r = heap_free_locked(p, n);
    pthread_mutex_unlock(&heap_mu);
    return r;
}
