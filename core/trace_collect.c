/* trace_collect.c - the collector: a job's events and its ranks' output lines kept in growing
 * arrays while the job runs (an mlsys_job_sink's callback feeds it), for the trace file, a
 * lab that reads its own job's events back, or the front end's player.
 * Also the one sort into time order that the reader and those labs share. */
#include "internal.h"
#include "trace.h"
#include <stdlib.h>
#include <string.h>

/* What a record says about the job's size: its rank, and the peer of a message (a rank
 * beyond what a job can have, from a damaged file, does not count). */
static void see_rank(mlsys_trace *t, int rank)
{
    if (rank >= 0 && rank < MLSYS_TRACE_MAX_RANKS && rank + 1 > t->nranks)
        t->nranks = rank + 1;
}

void mlsys_trace_collect(void *u, const mlsys_event *ev, size_t n)
{
    mlsys_trace *t = u;
    if (n == 0)
        return;                 /* (and no memcpy into a trace that has no array yet) */
    if (t->n + n > t->cap) {
        size_t cap = t->cap ? t->cap : 4096;
        while (cap < t->n + n)
            cap *= 2;
        t->ev = mlsys_xrealloc(t->ev, cap * sizeof *t->ev);
        t->cap = cap;
    }
    memcpy(t->ev + t->n, ev, n * sizeof *ev);
    t->n += n;
    for (size_t i = 0; i < n; i++) {
        see_rank(t, ev[i].rank);
        if (ev[i].kind != MLSYS_EV_MEM && ev[i].kind != MLSYS_EV_FLOW)
            see_rank(t, ev[i].peer);
    }
}

/* A line with its own time (the reader's, from the file) or stamped now. */
void trace_add_line_at(mlsys_trace *t, uint64_t t_ns, int rank, int is_err, const char *text)
{
    if (t->nl == t->lcap) {
        t->lcap = t->lcap ? t->lcap * 2 : 256;
        t->lines = mlsys_xrealloc(t->lines, t->lcap * sizeof *t->lines);
    }
    t->lines[t->nl++] = (mlsys_trace_line){t_ns, rank, is_err, mlsys_xstrdup(text)};
    see_rank(t, rank);
}

void mlsys_trace_add_line(mlsys_trace *t, int rank, int is_err, const char *text)
{
    trace_add_line_at(t, mlsys_now_ns(), rank, is_err, text);
}

/* A stable sort by time: qsort is not stable, so the key carries the position. */
typedef struct order_key {
    uint64_t t_ns;
    size_t at;
} order_key;

static int by_key(const void *a, const void *b)
{
    const order_key *x = a, *y = b;
    if (x->t_ns != y->t_ns)
        return x->t_ns < y->t_ns ? -1 : 1;
    return x->at < y->at ? -1 : x->at > y->at;
}

/* Permute n records of size sz at *base into the keys' order (keys[i].at: where the i-th
 * record is now); the old array is freed, the new one is exactly n long. */
static void *reorder(void *base, size_t n, size_t sz, order_key *keys)
{
    qsort(keys, n, sizeof *keys, by_key);
    char *out = mlsys_xmalloc(n * sz), *in = base;
    for (size_t i = 0; i < n; i++)
        memcpy(out + i * sz, in + keys[i].at * sz, sz);
    free(base);
    return out;
}

void mlsys_trace_sort(mlsys_trace *t)
{
    size_t most = t->n > t->nl ? t->n : t->nl;
    if (!most)
        return;
    order_key *keys = mlsys_xmalloc(most * sizeof *keys);
    if (t->n) {
        for (size_t i = 0; i < t->n; i++)
            keys[i] = (order_key){t->ev[i].t_ns, i};
        t->ev = reorder(t->ev, t->n, sizeof *t->ev, keys);
        t->cap = t->n;
    }
    if (t->nl) {
        for (size_t i = 0; i < t->nl; i++)
            keys[i] = (order_key){t->lines[i].t_ns, i};
        t->lines = reorder(t->lines, t->nl, sizeof *t->lines, keys);
        t->lcap = t->nl;
    }
    free(keys);
}

void mlsys_trace_free(mlsys_trace *t)
{
    for (size_t i = 0; i < t->nl; i++)
        free((char *)t->lines[i].text);
    free(t->lines);
    free(t->ev);
    memset(t, 0, sizeof *t);
}
