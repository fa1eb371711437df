/* ch09-block-alloc - reference solution. Two doubly linked lists threaded through arrays:
 * uncached blocks (any order: a stack) and cached blocks in the order they were put (the
 * head is the least recently used). take() unlinks from the middle in O(1), which is why the
 * lists are doubly linked; get() pops an uncached block, else the head of the cached list. */
#include "api.h"
#include <stdlib.h>

enum { OUT = 0, FREE = 1, CACHED = 2 };

typedef struct pool {
    int n, count;
    int *prev, *next;
    unsigned char *where;
    int head[3], tail[3];
} pool;

static void unlink_b(pool *p, int b)
{
    int w = p->where[b];
    if (p->prev[b] >= 0)
        p->next[p->prev[b]] = p->next[b];
    else
        p->head[w] = p->next[b];
    if (p->next[b] >= 0)
        p->prev[p->next[b]] = p->prev[b];
    else
        p->tail[w] = p->prev[b];
    p->where[b] = OUT;
    p->count--;
}

static void append(pool *p, int w, int b)
{
    p->next[b] = -1;
    p->prev[b] = p->tail[w];
    if (p->tail[w] >= 0)
        p->next[p->tail[w]] = b;
    else
        p->head[w] = b;
    p->tail[w] = b;
    p->where[b] = (unsigned char)w;
    p->count++;
}

static void *create(int n)
{
    pool *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    p->n = n;
    p->prev = malloc(sizeof(int) * (size_t)n);
    p->next = malloc(sizeof(int) * (size_t)n);
    p->where = calloc((size_t)n, 1);
    for (int w = 0; w < 3; w++)
        p->head[w] = p->tail[w] = -1;
    for (int b = 0; b < n; b++)
        append(p, FREE, b);
    return p;
}

static void destroy(void *st)
{
    pool *p = st;
    if (!p)
        return;
    free(p->prev);
    free(p->next);
    free(p->where);
    free(p);
}

static void put(void *st, int b, int cached)
{
    pool *p = st;
    if (b >= 0 && b < p->n && p->where[b] == OUT)
        append(p, cached ? CACHED : FREE, b);
}

static void take(void *st, int b)
{
    pool *p = st;
    if (b >= 0 && b < p->n && p->where[b] != OUT)
        unlink_b(p, b);
}

static int get(void *st)
{
    pool *p = st;
    int b = p->head[FREE] >= 0 ? p->head[FREE] : p->head[CACHED];
    if (b >= 0)
        unlink_b(p, b);
    return b;
}

static int count(const void *st)
{
    return ((const pool *)st)->count;
}

const llm_block_alloc_ops my_block_alloc = {"mine", create, destroy, put, take, get, count};
