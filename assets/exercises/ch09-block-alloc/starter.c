/* ch09-block-alloc - the paged KV cache's block allocator (api.h).
 *
 * This starter keeps the pool as one stack: get() hands out the block put LAST, cached or
 * not. It never loses a block, but it evicts the prefix used most recently while older ones
 * and uncached blocks sit in the pool. Make get() hand out an uncached block while there is
 * one, else the cached block put longest ago; and make take() work.
 *
 * The check (seed printed; `mlsys-lab check ch09-block-alloc --seed S` reruns it): first your
 * functions alone against a model of the pool on drawn put/take/get sequences, naming the
 * operation and the block; then the real paged cache with your allocator and with the
 * reference one side by side on a drawn workload of prompts sharing prefixes (attach, reserve,
 * commit, fork, release), comparing prefix hits and evictions and running the cache's own
 * invariant checker after every operation.
 *
 *   mlsys-lab check ch09-block-alloc      mlsys-lab hint ch09-block-alloc */
#include "api.h"
#include <stdlib.h>

typedef struct pool {
    int n, top;
    int *stack;             /* the blocks in the pool, stack[top - 1] on top */
} pool;

static void *create(int n)
{
    pool *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    p->n = n;
    p->stack = malloc(sizeof(int) * (size_t)n);
    for (int b = n - 1; b >= 0; b--)
        p->stack[p->top++] = b;
    return p;
}

static void destroy(void *st)
{
    pool *p = st;
    if (p)
        free(p->stack);
    free(p);
}

static void put(void *st, int b, int cached)
{
    pool *p = st;
    (void)cached;           /* TODO: should a cached block go where an uncached one goes? */
    if (p->top < p->n)
        p->stack[p->top++] = b;
}

static void take(void *st, int b)
{
    (void)st;
    (void)b;                /* TODO: b must leave the pool (it is not on top, in general) */
}

static int get(void *st)
{
    pool *p = st;
    /* TODO: an uncached block first; else the cached one put longest ago */
    return p->top > 0 ? p->stack[--p->top] : -1;
}

static int count(const void *st)
{
    return ((const pool *)st)->top;
}

const llm_block_alloc_ops my_block_alloc = {"mine", create, destroy, put, take, get, count};
