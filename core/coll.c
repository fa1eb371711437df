/* coll.c - the collective dispatcher: argument checks, the choice of an algorithm from the
 * collective's table (forced by mlsys_set_algo / MLSYS_ALGO, or the table's decide() rule),
 * the fallback to "direct" when an algorithm's constraints are not met, events, counters and
 * the one AVG division. Also the helpers every algorithm in coll/ shares. */
#include "coll/coll.h"
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const coll_table *const tables[MLSYS_COLL_COUNT] = {
    [MLSYS_COLL_BROADCAST] = &coll_broadcast_table,
    [MLSYS_COLL_REDUCE] = &coll_reduce_table,
    [MLSYS_COLL_ALLREDUCE] = &coll_allreduce_table,
    [MLSYS_COLL_ALLGATHER] = &coll_allgather_table,
    [MLSYS_COLL_REDUCE_SCATTER] = &coll_reduce_scatter_table,
    [MLSYS_COLL_GATHER] = &coll_gather_table,
    [MLSYS_COLL_SCATTER] = &coll_scatter_table,
    [MLSYS_COLL_ALLTOALL] = &coll_alltoall_table,
    [MLSYS_COLL_BARRIER] = &coll_barrier_table,
};

static const char *const coll_names[MLSYS_COLL_COUNT] = {
    "broadcast", "reduce", "all_reduce", "all_gather", "reduce_scatter",
    "gather", "scatter", "all_to_all", "barrier",
};

const coll_table *coll_table_of(mlsys_coll coll)
{
    return (unsigned)coll < MLSYS_COLL_COUNT ? tables[coll] : NULL;
}

const char *mlsys_coll_name(mlsys_coll coll)
{
    return (unsigned)coll < MLSYS_COLL_COUNT ? coll_names[coll] : "?";
}

/* Lower case without '_', '-' and spaces: "All-Reduce", "allreduce", "all_reduce" agree. */
static void squash(const char *s, char *out, size_t n)
{
    size_t k = 0;
    for (; *s && k + 1 < n; s++)
        if (*s != '_' && *s != '-' && *s != ' ')
            out[k++] = (char)tolower((unsigned char)*s);
    out[k] = 0;
}

int mlsys_coll_parse(const char *s, mlsys_coll *out)
{
    static const struct { const char *alias; mlsys_coll coll; } aliases[] = {
        {"bcast", MLSYS_COLL_BROADCAST}, {"alltoall", MLSYS_COLL_ALLTOALL},
        {"a2a", MLSYS_COLL_ALLTOALL}, {"reducescatter", MLSYS_COLL_REDUCE_SCATTER},
    };
    char want[32], have[32];
    if (!s)
        return -1;
    squash(s, want, sizeof want);
    for (int i = 0; i < MLSYS_COLL_COUNT; i++) {
        squash(coll_names[i], have, sizeof have);
        if (strcmp(want, have) == 0) {
            *out = (mlsys_coll)i;
            return 0;
        }
    }
    for (size_t i = 0; i < sizeof aliases / sizeof aliases[0]; i++)
        if (strcmp(want, aliases[i].alias) == 0) {
            *out = aliases[i].coll;
            return 0;
        }
    return -1;
}

const char *const *mlsys_algo_names(mlsys_coll coll)
{
    const coll_table *t = coll_table_of(coll);
    return t ? t->names : NULL;
}

const char *mlsys_last_algo(const mlsys_comm *c)
{
    return c && c->last_algo ? c->last_algo : "none";
}

/* "native" is the backend's own collective (MPI_Allreduce, ncclAllReduce): every collective
 * accepts the name; the transport says at run time whether it has one. */
#define ALGO_NATIVE (-2)

static int find_algo(const coll_table *t, const char *name)
{
    if (strcmp(name, "native") == 0)
        return ALGO_NATIVE;
    for (int i = 0; i < t->nalgos; i++)
        if (strcmp(t->algos[i].name, name) == 0)
            return i;
    return -1;
}

static int is_auto(const char *name)
{
    return !name || !*name || strcmp(name, "auto") == 0;
}

int mlsys_set_algo(mlsys_comm *c, mlsys_coll coll, const char *name)
{
    const coll_table *t = coll_table_of(coll);
    if (!t) {
        mlsys_set_error(c, MLSYS_ERR_ARG, "rank %d: set algorithm: unknown collective %d",
                        c->rank, (int)coll);
        return MLSYS_ERR_ARG;
    }
    if (is_auto(name)) {
        c->algo_forced[coll] = -1;
        c->algo_by[coll] = MLSYS_ALGO_BY_RULE;
        return MLSYS_OK;
    }
    int i = find_algo(t, name);
    if (i == -1) {
        mlsys_set_error(c, MLSYS_ERR_ARG, "rank %d: %s has no algorithm \"%s\"", c->rank,
                        t->name, name);
        return MLSYS_ERR_ARG;
    }
    c->algo_forced[coll] = i;
    c->algo_by[coll] = MLSYS_ALGO_BY_LAB;     /* coll_init_comm says when it was the user */
    return MLSYS_OK;
}

int mlsys_set_algo_all(mlsys_comm *c, const char *name)
{
    int took = 0;
    for (int k = 0; k < MLSYS_COLL_COUNT; k++) {
        if (is_auto(name)) {
            c->algo_forced[k] = -1;
            c->algo_by[k] = MLSYS_ALGO_BY_RULE;
            took++;
            continue;
        }
        int i = find_algo(tables[k], name);
        if (i != -1) {
            c->algo_forced[k] = i;
            c->algo_by[k] = MLSYS_ALGO_BY_LAB;
            took++;
        }
    }
    return took;
}

/* MLSYS_ALGO is one algorithm name for every collective that has it ("ring"), or a list of
 * coll=algo pairs ("all_reduce=ring,broadcast=tree"); a bare name in the list applies to all. */
void coll_init_comm(mlsys_comm *c)
{
    for (int k = 0; k < MLSYS_COLL_COUNT; k++) {
        c->algo_forced[k] = -1;
        c->algo_by[k] = MLSYS_ALGO_BY_RULE;
    }
    c->cur_coll = c->cur_algo = -1;
    const char *env = getenv("MLSYS_ALGO");
    if (is_auto(env))
        return;
    char buf[256];
    snprintf(buf, sizeof buf, "%s", env);
    char *save = NULL;
    int asked[MLSYS_COLL_COUNT] = {0};      /* the user named an algorithm for it */
    for (char *item = strtok_r(buf, ", ", &save); item; item = strtok_r(NULL, ", ", &save)) {
        char *eq = strchr(item, '=');
        if (!eq) {
            for (int k = 0; k < MLSYS_COLL_COUNT; k++)
                asked[k] = 1;
            if (mlsys_set_algo_all(c, item) == 0)
                fprintf(stderr, "mlsys-lab: rank %d: MLSYS_ALGO: no collective has an algorithm "
                        "\"%s\"\n", c->rank, item);
            continue;
        }
        *eq = 0;
        mlsys_coll coll;
        if (mlsys_coll_parse(item, &coll) == 0)
            asked[coll] = 1;
        if (mlsys_coll_parse(item, &coll) != 0 || mlsys_set_algo(c, coll, eq + 1) != 0)
            fprintf(stderr, "mlsys-lab: rank %d: MLSYS_ALGO: ignoring \"%s=%s\"\n", c->rank, item,
                    eq + 1);
    }
    for (int k = 0; k < MLSYS_COLL_COUNT; k++)      /* what the environment set, the user chose */
        c->algo_by[k] = c->algo_forced[k] != -1 ? MLSYS_ALGO_BY_USER
                        : asked[k] ? MLSYS_ALGO_BY_RULE_NONE : MLSYS_ALGO_BY_RULE;
}

const char *mlsys_algo_decide(const mlsys_comm *c, mlsys_coll coll, size_t bytes,
                              const char **why)
{
    static const char *dummy;
    const coll_table *t = coll_table_of(coll);
    if (!why)
        why = &dummy;
    if (!t) {
        *why = "unknown collective";
        return NULL;
    }
    if (c && c->algo_forced[coll] == ALGO_NATIVE) {
        *why = "forced: the backend's own collective";
        return "native";
    }
    if (c && c->algo_forced[coll] >= 0) {
        *why = "forced (mlsys_set_algo or MLSYS_ALGO)";
        return t->algos[c->algo_forced[coll]].name;
    }
    int i = t->decide(c ? c->size : 1, bytes, why);
    return t->algos[i].name;
}

/* ---- the dispatcher ---- */

static int debug_on(void)
{
    static int on = -1;
    if (on < 0) {
        const char *s = getenv("MLSYS_DEBUG");
        on = s && *s && strcmp(s, "0") != 0;
    }
    return on;
}

static int is_rooted(mlsys_coll coll)
{
    return coll == MLSYS_COLL_BROADCAST || coll == MLSYS_COLL_REDUCE ||
           coll == MLSYS_COLL_GATHER || coll == MLSYS_COLL_SCATTER;
}

static int is_reduction(mlsys_coll coll)
{
    return coll == MLSYS_COLL_REDUCE || coll == MLSYS_COLL_ALLREDUCE ||
           coll == MLSYS_COLL_REDUCE_SCATTER;
}

/* Which buffers this rank must pass for this call: bit 0 sendbuf, bit 1 recvbuf. */
static unsigned needed_buffers(mlsys_coll coll, int is_root)
{
    switch (coll) {
    case MLSYS_COLL_BROADCAST: return 2;
    case MLSYS_COLL_REDUCE: case MLSYS_COLL_GATHER: return is_root ? 3 : 1;
    case MLSYS_COLL_SCATTER: return is_root ? 3 : 2;
    case MLSYS_COLL_BARRIER: return 0;
    default: return 3;
    }
}

static int check_args(mlsys_comm *c, mlsys_coll coll, const coll_args *a)
{
    const char *name = coll_names[coll];
    if (coll == MLSYS_COLL_BARRIER)
        return 0;
    if ((unsigned)a->dt >= MLSYS_DTYPE_COUNT) {
        mlsys_set_error(c, MLSYS_ERR_ARG, "rank %d: %s: unknown element type %d", c->rank, name,
                        (int)a->dt);
        return MLSYS_ERR_ARG;
    }
    if (is_reduction(coll) && (unsigned)a->op >= MLSYS_OP_COUNT) {
        mlsys_set_error(c, MLSYS_ERR_ARG, "rank %d: %s: unknown reduction operator %d", c->rank,
                        name, (int)a->op);
        return MLSYS_ERR_ARG;
    }
    if (is_rooted(coll) && (a->root < 0 || a->root >= c->size)) {
        mlsys_set_error(c, MLSYS_ERR_ARG, "rank %d: %s: root %d out of range (%d ranks)",
                        c->rank, name, a->root, c->size);
        return MLSYS_ERR_ARG;
    }
    /* count * size * N must fit in memory arithmetic (no division: this runs every call) */
    size_t total;
    if (__builtin_mul_overflow(a->count, dt_size(a->dt) * (size_t)c->size, &total)) {
        mlsys_set_error(c, MLSYS_ERR_ARG, "rank %d: %s: count %zu overflows", c->rank, name,
                        a->count);
        return MLSYS_ERR_ARG;
    }
    unsigned need = needed_buffers(coll, c->rank == a->root);
    if (a->count && (need & 1) && !a->sendbuf) {
        mlsys_set_error(c, MLSYS_ERR_ARG, "rank %d: %s: null sendbuf (count %zu)", c->rank, name,
                        a->count);
        return MLSYS_ERR_ARG;
    }
    if (a->count && (need & 2) && !a->recvbuf) {
        mlsys_set_error(c, MLSYS_ERR_ARG, "rank %d: %s: null %s (count %zu)", c->rank, name,
                        coll == MLSYS_COLL_BROADCAST ? "buffer" : "recvbuf", a->count);
        return MLSYS_ERR_ARG;
    }
    return 0;
}

static int constraints_met(const coll_algo *al, int n, size_t count)
{
    if ((al->constraints & COLL_NEEDS_POW2) && !coll_is_pow2(n))
        return 0;
    if ((al->constraints & COLL_NEEDS_COUNT_GE_RANKS) && count < (size_t)n)
        return 0;
    return 1;
}

/* One rank: what every collective leaves behind is a copy (or nothing). */
static void run_single(mlsys_coll coll, const coll_args *a)
{
    switch (coll) {
    case MLSYS_COLL_BROADCAST: case MLSYS_COLL_BARRIER:
        break;
    default:
        if (a->recvbuf && a->sendbuf)
            coll_copy(a->recvbuf, a->sendbuf, a->count, a->dt);
    }
}

/* A collective's begin or end; the begin says who chose the algorithm (tag) and, when the
 * chosen one did not fit and another ran, which it was (chunk). */
static void emit_coll(mlsys_comm *c, int kind, mlsys_coll coll, int algo, const coll_args *a,
                      size_t bytes, const char *label, int wanted)
{
    mlsys_event e;
    memset(&e, 0, sizeof e);
    e.kind = (int16_t)kind;
    e.coll = (int16_t)coll;
    e.algo = (int16_t)algo;
    e.op = (int16_t)(is_reduction(coll) ? a->op : -1);
    e.dtype = coll == MLSYS_COLL_BARRIER ? -1 : (int32_t)a->dt;
    e.bytes = bytes;
    /* the views highlight the root; a world rank, as every peer of an event */
    e.peer = is_rooted(coll) ? c->world_of[a->root] : -1;
    e.tag = kind == MLSYS_EV_COLL_BEGIN ? c->algo_by[coll] : -1;
    e.step = -1;
    e.chunk = kind == MLSYS_EV_COLL_BEGIN && wanted != algo ? wanted : -1;
    snprintf(e.label, sizeof e.label, "%s", label);
    mlsys_emit(c, &e);
}

/* For the front end's step model: the first element of each of the N chunks of the call's
 * logical buffer, before (MARK "chunks", step -2: the input) and after (step -3: the
 * result). chunk = first chunk index, tag = values in this event, bytes = N. Blocked
 * collectives (all_gather & co.) cut at count; the others cut as coll_chunk() does. */
static double chunk_value(const void *buf, size_t i, mlsys_dtype dt)
{
    switch (dt) {
    case MLSYS_F32: return ((const float *)buf)[i];
    case MLSYS_F64: return ((const double *)buf)[i];
    case MLSYS_I32: return ((const int32_t *)buf)[i];
    case MLSYS_I64: return (double)((const int64_t *)buf)[i];
    default: return 0.0;
    }
}

static void emit_chunks(mlsys_comm *c, mlsys_coll coll, const coll_args *a, int out)
{
    int n = c->size, r = c->rank, blocked = 0, own = 0, root = c->rank == a->root;
    const void *buf = out ? a->recvbuf : a->sendbuf;
    switch (coll) {
    case MLSYS_COLL_BARRIER: return;
    case MLSYS_COLL_ALLGATHER: blocked = 1; own = !out; break;
    case MLSYS_COLL_REDUCE_SCATTER: blocked = 1; own = out; break;
    case MLSYS_COLL_GATHER: blocked = 1; own = !out || !root; if (out && !root) return; break;
    case MLSYS_COLL_SCATTER: blocked = 1; own = out; if (!out && !root) return; break;
    case MLSYS_COLL_ALLTOALL: blocked = 1; break;
    case MLSYS_COLL_REDUCE: if (out && !root) return; break;
    default: break;
    }
    if (!buf || a->count == 0)
        return;
    mlsys_event e;
    memset(&e, 0, sizeof e);
    e.kind = MLSYS_EV_MARK;
    e.peer = e.tag = e.chunk = -1;
    e.coll = (int16_t)coll;
    e.algo = -1;
    e.op = -1;
    e.step = out ? -3 : -2;
    e.dtype = (int32_t)a->dt;
    e.bytes = (uint64_t)n;
    snprintf(e.label, sizeof e.label, "chunks");
    int lo = own ? r : 0, hi = own ? r + 1 : n;
    for (int k = lo; k < hi; k += 4) {
        e.chunk = k;
        e.tag = hi - k < 4 ? hi - k : 4;
        memset(e.val, 0, sizeof e.val);
        for (int j = 0; j < e.tag; j++) {
            size_t off, len;
            if (own)
                off = 0, len = 1;
            else if (blocked)
                off = (size_t)(k + j) * a->count, len = a->count;
            else
                coll_chunk(a->count, n, k + j, &off, &len);
            e.val[j] = len ? chunk_value(buf, off, a->dt) : 0.0;
        }
        mlsys_emit(c, &e);
    }
}

/* The backend's own collective, with the same events, counters and AVG division. */
static int run_native(mlsys_comm *c, mlsys_coll coll, const coll_args *a, size_t bytes)
{
    const transport_ops *tp = c->w->tp;
    if (!tp->native) {
        mlsys_set_error(c, MLSYS_ERR_UNSUPPORTED, "rank %d: %s: the %s backend has no native "
                        "collectives (--algo native needs --backend mpi or nccl)", c->rank,
                        mlsys_coll_name(coll), tp->name);
        return MLSYS_ERR_UNSUPPORTED;
    }
    c->in_coll++;
    c->counters.coll_calls[coll]++;
    int tracing = mlsys_tracing(c);
    if (tracing)
        emit_coll(c, MLSYS_EV_COLL_BEGIN, coll, -1, a, bytes, "native", -1);
    int rc = tp->native(c, coll, a);
    if (!rc && a->op == MLSYS_AVG && is_reduction(coll) && a->recvbuf &&
        (coll != MLSYS_COLL_REDUCE || c->rank == a->root))
        mlsys_scale_avg(a->recvbuf, a->count, a->dt, c->size);
    if (tracing)
        emit_coll(c, MLSYS_EV_COLL_END, coll, -1, a, bytes, "native", -1);
    c->last_algo = "native";
    c->in_coll--;
    return rc;
}

int coll_run(mlsys_comm *c, mlsys_coll coll, const coll_args *a)
{
    if (!c || !a)
        return MLSYS_ERR_ARG;
    const coll_table *t = coll_table_of(coll);
    if (!t) {
        mlsys_set_error(c, MLSYS_ERR_ARG, "rank %d: unknown collective %d", c->rank, (int)coll);
        return MLSYS_ERR_ARG;
    }
    int rc = check_args(c, coll, a);
    if (rc)
        return rc;

    int n = c->size;
    size_t bytes = coll == MLSYS_COLL_BARRIER ? 0 : a->count * dt_size(a->dt);
    if (c->algo_forced[coll] == ALGO_NATIVE)
        return run_native(c, coll, a, bytes);
    const char *why = "forced";
    int idx = c->algo_forced[coll];
    if (idx < 0 || idx >= t->nalgos)
        idx = t->decide(n, bytes, &why);
    size_t count = coll == MLSYS_COLL_BARRIER ? (size_t)n : a->count;
    int wanted = idx;
    if (n == 1) {
        idx = 0;
    } else if (!constraints_met(&t->algos[idx], n, count)) {
        if (debug_on())
            fprintf(stderr, "mlsys-lab: rank %d: %s: %s does not fit %d ranks and count %zu, "
                    "using %s\n", c->rank, t->name, t->algos[idx].name, n, a->count,
                    t->algos[0].name);
        idx = 0;
    }
    const coll_algo *al = &t->algos[idx];
    if (debug_on() && c->rank == 0)
        fprintf(stderr, "mlsys-lab: %s of %zu B on %d ranks: %s (%s)\n", t->name, bytes, n,
                al->name, why);

    c->in_coll++;
    int saved_coll = c->cur_coll, saved_algo = c->cur_algo;
    c->cur_coll = coll;
    c->cur_algo = idx;
    c->counters.coll_calls[coll]++;
    int tracing = mlsys_tracing(c);
    if (tracing) {
        emit_coll(c, MLSYS_EV_COLL_BEGIN, coll, idx, a, bytes, al->name,
                  n > 1 && c->algo_forced[coll] >= 0 ? wanted : idx);
        emit_chunks(c, coll, a, 0);
    }

    if (n == 1)
        run_single(coll, a);
    else if (a->count > 0 || coll == MLSYS_COLL_BARRIER)
        rc = al->fn(c, a);

    if (!rc && a->op == MLSYS_AVG && is_reduction(coll) && a->recvbuf) {
        if (coll != MLSYS_COLL_REDUCE || c->rank == a->root)
            mlsys_scale_avg(a->recvbuf, a->count, a->dt, n);
    }
    if (tracing) {
        if (!rc)
            emit_chunks(c, coll, a, 1);
        emit_coll(c, MLSYS_EV_COLL_END, coll, idx, a, bytes, al->name, idx);
    }
    c->last_algo = al->name;
    c->cur_coll = saved_coll;
    c->cur_algo = saved_algo;
    c->in_coll--;
    return rc;
}

/* ---- the public calls: pack the arguments, dispatch ---- */

int mlsys_broadcast(mlsys_comm *c, void *buf, size_t count, mlsys_dtype dt, int root)
{
    coll_args a = {buf, buf, count, dt, MLSYS_OP_NONE, root};
    return coll_run(c, MLSYS_COLL_BROADCAST, &a);
}

int mlsys_reduce(mlsys_comm *c, const void *sendbuf, void *recvbuf, size_t count,
                 mlsys_dtype dt, mlsys_op op, int root)
{
    coll_args a = {sendbuf, recvbuf, count, dt, op, root};
    return coll_run(c, MLSYS_COLL_REDUCE, &a);
}

int mlsys_allreduce(mlsys_comm *c, const void *sendbuf, void *recvbuf, size_t count,
                    mlsys_dtype dt, mlsys_op op)
{
    coll_args a = {sendbuf, recvbuf, count, dt, op, 0};
    return coll_run(c, MLSYS_COLL_ALLREDUCE, &a);
}

int mlsys_allgather(mlsys_comm *c, const void *sendbuf, void *recvbuf, size_t count,
                    mlsys_dtype dt)
{
    coll_args a = {sendbuf, recvbuf, count, dt, MLSYS_OP_NONE, 0};
    return coll_run(c, MLSYS_COLL_ALLGATHER, &a);
}

int mlsys_reduce_scatter(mlsys_comm *c, const void *sendbuf, void *recvbuf, size_t count,
                         mlsys_dtype dt, mlsys_op op)
{
    coll_args a = {sendbuf, recvbuf, count, dt, op, 0};
    return coll_run(c, MLSYS_COLL_REDUCE_SCATTER, &a);
}

int mlsys_gather(mlsys_comm *c, const void *sendbuf, void *recvbuf, size_t count,
                 mlsys_dtype dt, int root)
{
    coll_args a = {sendbuf, recvbuf, count, dt, MLSYS_OP_NONE, root};
    return coll_run(c, MLSYS_COLL_GATHER, &a);
}

int mlsys_scatter(mlsys_comm *c, const void *sendbuf, void *recvbuf, size_t count,
                  mlsys_dtype dt, int root)
{
    coll_args a = {sendbuf, recvbuf, count, dt, MLSYS_OP_NONE, root};
    return coll_run(c, MLSYS_COLL_SCATTER, &a);
}

int mlsys_alltoall(mlsys_comm *c, const void *sendbuf, void *recvbuf, size_t count,
                   mlsys_dtype dt)
{
    coll_args a = {sendbuf, recvbuf, count, dt, MLSYS_OP_NONE, 0};
    return coll_run(c, MLSYS_COLL_ALLTOALL, &a);
}

int mlsys_barrier(mlsys_comm *c)
{
    coll_args a = {NULL, NULL, 0, MLSYS_I32, MLSYS_OP_NONE, 0};
    return coll_run(c, MLSYS_COLL_BARRIER, &a);
}

/* ---- helpers for the algorithms ---- */

void coll_chunk(size_t total, int n, int k, size_t *off, size_t *len)
{
    size_t base = total / (size_t)n, rem = total % (size_t)n, uk = (size_t)k;
    *off = uk * base + (uk < rem ? uk : rem);
    *len = base + (uk < rem ? 1 : 0);
}

/* Large copies that do not overlap stream past the cache (mlsys_copy_large: 32 MiB went at
 * 10 GB/s through memmove here, 20+ streamed). */
void coll_copy(void *dst, const void *src, size_t count, mlsys_dtype dt)
{
    size_t n = count * dt_size(dt);
    if (!n || dst == src)
        return;
    const char *d = dst, *s = src;
    if (d + n <= s || s + n <= d)
        mlsys_copy_large(dst, src, n);
    else
        memmove(dst, src, n);
}

/* A 64-byte header in front of the buffer remembers its size and where it came from. Large
 * scratch lives in the rank's shared heap (mlsys_alloc_aligned): a peer that reads a
 * partial result out of it copies at memcpy speed instead of through process_vm_readv. */
#define SCRATCH_HDR 64

void *coll_scratch(size_t n)
{
    size_t total = n + SCRATCH_HDR;
    int big = total > SHM_INLINE;
    char *b = big ? mlsys_alloc_scratch(total) : mlsys_xmalloc(total);
    size_t *h = (size_t *)(void *)b;
    h[0] = total;
    h[1] = (size_t)big;
    return b + SCRATCH_HDR;
}

void coll_scratch_free(void *p)
{
    if (!p)
        return;
    char *b = (char *)p - SCRATCH_HDR;
    size_t *h = (size_t *)(void *)b;
    if (h[1])
        mlsys_free_aligned(b, h[0]);
    else
        free(b);
}

int coll_is_pow2(int n)
{
    return n > 0 && (n & (n - 1)) == 0;
}

int coll_log2_ceil(int n)
{
    int k = 0;
    while ((1 << k) < n)
        k++;
    return k;
}

int coll_pow2_floor(int n)
{
    int p = 1;
    while (p * 2 <= n)
        p *= 2;
    return p;
}

int coll_send(mlsys_comm *c, const void *buf, size_t count, mlsys_dtype dt, int peer, int tag)
{
    return count ? mlsys_send(c, buf, count, dt, peer, tag) : 0;
}

int coll_recv(mlsys_comm *c, void *buf, size_t count, mlsys_dtype dt, int peer, int tag)
{
    return count ? mlsys_recv(c, buf, count, dt, peer, tag) : 0;
}

int coll_recv_reduce(mlsys_comm *c, const void *in, void *out, size_t count, mlsys_dtype dt,
                     mlsys_op op, int peer, int tag)
{
    return count ? mlsys_recv_reduce(c, in, out, count, dt, op, peer, tag) : 0;
}

/* Post the send, then receive, then wait for the send: the send does not block, so neither
 * side can block the other, whatever order the two ranks call in. The send goes first:
 * when the peer's message is already here, the receive takes it at once (and reduces it),
 * and our own message should not wait behind that work while the peer waits for it (the
 * other order made 2-rank 8 B all_reduce alternate between a fast and a slow call). */
static int exchange(mlsys_comm *c, const void *sbuf, size_t scount, int dst, const void *in,
                    void *out, size_t rcount, int src, int tag, mlsys_dtype dt, mlsys_op op,
                    void (*work)(void *), void *arg)
{
    mlsys_request *sreq = NULL;
    int rc = 0;
    if (scount && dst >= 0)
        rc = mlsys_isend(c, sbuf, scount, dt, dst, tag, &sreq);
    if (!rc && work)
        work(arg);              /* while the peer reads what we sent */
    if (!rc && rcount && src >= 0)
        rc = op == MLSYS_OP_NONE ? mlsys_recv(c, out, rcount, dt, src, tag)
                                 : mlsys_recv_reduce(c, in, out, rcount, dt, op, src, tag);
    if (rc) {
        req_drop(sreq);         /* one failure is enough: no second timeout on the send */
        return rc;
    }
    return mlsys_wait(sreq);
}

int coll_exchange(mlsys_comm *c, const void *sbuf, size_t scount, int dst, void *rbuf,
                  size_t rcount, int src, int tag, mlsys_dtype dt)
{
    return exchange(c, sbuf, scount, dst, NULL, rbuf, rcount, src, tag, dt, MLSYS_OP_NONE,
                    NULL, NULL);
}

int coll_exchange_during(mlsys_comm *c, const void *sbuf, size_t scount, int dst, void *rbuf,
                         size_t rcount, int src, int tag, mlsys_dtype dt,
                         void (*work)(void *), void *arg)
{
    return exchange(c, sbuf, scount, dst, NULL, rbuf, rcount, src, tag, dt, MLSYS_OP_NONE,
                    work, arg);
}

int coll_exchange_reduce(mlsys_comm *c, const void *sbuf, size_t scount, int dst,
                         const void *in, void *out, size_t rcount, int src, int tag,
                         mlsys_dtype dt, mlsys_op op)
{
    return exchange(c, sbuf, scount, dst, in, out, rcount, src, tag, dt, op, NULL, NULL);
}
