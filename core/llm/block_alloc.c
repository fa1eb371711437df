/* block_alloc.c - the paged KV cache's default block allocator: which unreferenced block to
 * hand out next. Two lists: uncached blocks (a stack: the last freed is reused first) and
 * cached blocks in the order they were released (least recently used at the head). An
 * allocation takes an uncached block while there is one and only then evicts the cached
 * block released longest ago, so the prefix cache keeps what was used most recently. The
 * manager (paged.c) calls these through llm_block_alloc_ops; a learner's version can too. */
#include "engine.h"

#include <stdlib.h>

enum { LRU_OUT = 0, LRU_FREE = 1, LRU_CACHED = 2 };

typedef struct lru {
    int n;
    int *prev, *next;         /* [n] links of the list the block is on, -1 at the ends */
    unsigned char *where;     /* [n] LRU_OUT, LRU_FREE or LRU_CACHED */
    int head[3], tail[3];     /* per list (index LRU_FREE, LRU_CACHED) */
    int count;
} lru;

static void unlink_block(lru *a, int b)
{
    int w = a->where[b];
    if (a->prev[b] >= 0)
        a->next[a->prev[b]] = a->next[b];
    else
        a->head[w] = a->next[b];
    if (a->next[b] >= 0)
        a->prev[a->next[b]] = a->prev[b];
    else
        a->tail[w] = a->prev[b];
    a->prev[b] = a->next[b] = -1;
    a->where[b] = LRU_OUT;
    a->count--;
}

static void push_front(lru *a, int w, int b)
{
    a->prev[b] = -1;
    a->next[b] = a->head[w];
    if (a->head[w] >= 0)
        a->prev[a->head[w]] = b;
    else
        a->tail[w] = b;
    a->head[w] = b;
    a->where[b] = (unsigned char)w;
    a->count++;
}

static void push_back(lru *a, int w, int b)
{
    a->next[b] = -1;
    a->prev[b] = a->tail[w];
    if (a->tail[w] >= 0)
        a->next[a->tail[w]] = b;
    else
        a->head[w] = b;
    a->tail[w] = b;
    a->where[b] = (unsigned char)w;
    a->count++;
}

static void *lru_create(int n)
{
    lru *a = mlsys_xcalloc(1, sizeof *a);
    a->n = n;
    a->prev = mlsys_xmalloc((size_t)n * sizeof(int));
    a->next = mlsys_xmalloc((size_t)n * sizeof(int));
    a->where = mlsys_xcalloc((size_t)n, 1);
    for (int w = 0; w < 3; w++)
        a->head[w] = a->tail[w] = -1;
    for (int b = n - 1; b >= 0; b--)      /* block 0 on top: the first handed out */
        push_front(a, LRU_FREE, b);
    return a;
}

static void lru_destroy(void *st)
{
    lru *a = st;
    if (!a)
        return;
    free(a->prev);
    free(a->next);
    free(a->where);
    free(a);
}

static void lru_put(void *st, int b, int cached)
{
    lru *a = st;
    if (b < 0 || b >= a->n || a->where[b] != LRU_OUT)
        return;               /* not ours to take: the manager's checker reports it */
    if (cached)
        push_back(a, LRU_CACHED, b);      /* most recently released at the tail */
    else
        push_front(a, LRU_FREE, b);
}

static void lru_take(void *st, int b)
{
    lru *a = st;
    if (b >= 0 && b < a->n && a->where[b] != LRU_OUT)
        unlink_block(a, b);
}

static int lru_get(void *st)
{
    lru *a = st;
    int b = a->head[LRU_FREE] >= 0 ? a->head[LRU_FREE] : a->head[LRU_CACHED];
    if (b >= 0)
        unlink_block(a, b);
    return b;
}

static int lru_count(const void *st)
{
    return ((const lru *)st)->count;
}

const llm_block_alloc_ops llm_block_alloc_lru = {
    "lru", lru_create, lru_destroy, lru_put, lru_take, lru_get, lru_count,
};
