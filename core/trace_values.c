/* trace_values.c - values, watched buffers and plot points as MARK events (the ring and plot
 * views read them), the collectives' size/rank rule asked without a communicator, and the
 * viewer's read of a watched buffer in a rank that waits at the gate. */
#include "trace_values.h"
#include "coll/coll.h"
#include <stdio.h>
#include <string.h>
#include <sys/uio.h>

static void mark_init(mlsys_event *e, const char *label)
{
    memset(e, 0, sizeof *e);
    e->kind = MLSYS_EV_MARK;
    e->peer = -1;
    e->tag = -1;
    e->coll = -1;
    e->algo = -1;
    e->op = -1;
    e->step = -1;
    e->chunk = -1;
    e->dtype = -1;
    snprintf(e->label, sizeof e->label, "%s", label);
}

void mlsys_emit_values(mlsys_comm *c, int step, const double *v, int n)
{
    if (!c || !mlsys_tracing(c) || n < 0 || (n > 0 && !v))
        return;
    mlsys_event e;
    mark_init(&e, MLSYS_MARK_VALUES);
    e.step = step;
    e.bytes = (uint64_t)n;
    if (n == 0) {              /* an empty vector is news too: the cells go blank */
        e.chunk = 0;
        e.tag = 0;
        mlsys_emit(c, &e);
        return;
    }
    for (int i = 0; i < n; i += 4) {
        int k = n - i < 4 ? n - i : 4;
        e.chunk = i;
        e.tag = k;
        memset(e.val, 0, sizeof e.val);
        for (int j = 0; j < k; j++)
            e.val[j] = v[i + j];
        mlsys_emit(c, &e);
    }
}

static double elem(const void *buf, size_t i, int dt)
{
    switch (dt) {
    case MLSYS_F32: return ((const float *)buf)[i];
    case MLSYS_F64: return ((const double *)buf)[i];
    case MLSYS_I32: return ((const int32_t *)buf)[i];
    case MLSYS_I64: return (double)((const int64_t *)buf)[i];
    default: return 0.0;
    }
}

void mlsys_emit_buffer(mlsys_comm *c, int step, const void *buf, size_t count, mlsys_dtype dt)
{
    if (!c || !mlsys_tracing(c) || (count && !buf) || (unsigned)dt >= MLSYS_DTYPE_COUNT)
        return;
    double v[4];
    mlsys_event e;
    mark_init(&e, MLSYS_MARK_VALUES);
    e.step = step;
    e.bytes = count;
    e.chunk = 0;
    e.tag = 0;
    if (!count)
        mlsys_emit(c, &e);
    for (size_t i = 0; i < count; i += 4) {
        size_t k = count - i < 4 ? count - i : 4;
        for (size_t j = 0; j < k; j++)
            v[j] = elem(buf, i + j, dt);
        e.chunk = (int32_t)i;
        e.tag = (int32_t)k;
        memset(e.val, 0, sizeof e.val);
        memcpy(e.val, v, k * sizeof v[0]);
        mlsys_emit(c, &e);
    }
}

void mlsys_watch_buffer(mlsys_comm *c, const void *buf, size_t count, mlsys_dtype dt)
{
    if (!c || !mlsys_tracing(c))
        return;
    mlsys_event e;
    mark_init(&e, MLSYS_MARK_WATCH);
    e.val[0] = (double)(uintptr_t)buf;     /* user-space addresses fit in 53 bits */
    e.bytes = buf ? count : 0;
    e.dtype = buf ? (int32_t)dt : -1;
    mlsys_emit(c, &e);
    if (buf)
        mlsys_emit_buffer(c, -1, buf, count, dt);
}

void mlsys_emit_point(mlsys_comm *c, const char *series, double x, double y)
{
    if (!c || !mlsys_tracing(c))
        return;
    char label[32];
    snprintf(label, sizeof label, "%s%s", MLSYS_MARK_PLOT, series ? series : "");
    mlsys_event e;
    mark_init(&e, label);
    e.val[0] = x;
    e.val[1] = y;
    mlsys_emit(c, &e);
}

void mlsys_emit_bubble(mlsys_comm *c, double busy_ns, double span_ns)
{
    if (!c || !mlsys_tracing(c))
        return;
    mlsys_event e;
    mark_init(&e, MLSYS_MARK_BUBBLE);
    e.val[0] = busy_ns;
    e.val[1] = span_ns;
    mlsys_emit(c, &e);
}

const char *mlsys_algo_rule(mlsys_coll coll, int nranks, size_t bytes, const char **why)
{
    static const char *dummy;
    const coll_table *t = coll_table_of(coll);
    if (!why)
        why = &dummy;
    if (!t) {
        *why = "unknown collective";
        return NULL;
    }
    int i = t->decide(nranks < 1 ? 1 : nranks, bytes, why);
    return i >= 0 && i < t->nalgos ? t->algos[i].name : NULL;
}

int mlsys_algo_index(mlsys_coll coll, const char *name)
{
    const coll_table *t = coll_table_of(coll);
    if (!t || !name)
        return -1;
    for (int i = 0; i < t->nalgos; i++)
        if (!strcmp(t->algos[i].name, name))
            return i;
    return -1;
}

int mlsys_algo_fits(mlsys_coll coll, int idx, int nranks, size_t count)
{
    const coll_table *t = coll_table_of(coll);
    if (!t || idx < 0 || idx >= t->nalgos)
        return 0;
    unsigned k = t->algos[idx].constraints;
    if ((k & COLL_NEEDS_POW2) && !coll_is_pow2(nranks))
        return 0;
    if ((k & COLL_NEEDS_COUNT_GE_RANKS) && count < (size_t)nranks)
        return 0;
    return 1;
}

int mlsys_values_read(pid_t pid, uint64_t addr, size_t count, int dt, double *out)
{
    if ((unsigned)dt >= MLSYS_DTYPE_COUNT || !addr)
        return -1;
    size_t es = dt_size((mlsys_dtype)dt);
    unsigned char tmp[4096];
    size_t per = sizeof tmp / es, done = 0;
    while (done < count) {
        size_t k = count - done < per ? count - done : per;
        struct iovec local = {tmp, k * es};
        struct iovec remote = {(void *)(uintptr_t)(addr + done * es), k * es};
        ssize_t got = process_vm_readv(pid, &local, 1, &remote, 1, 0);
        if (got != (ssize_t)(k * es))
            return -1;
        for (size_t i = 0; i < k; i++)
            out[done + i] = elem(tmp, i, dt);
        done += k;
    }
    return 0;
}
