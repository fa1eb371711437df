/* comm.c - communicators: joining the job from the launcher's environment, group ranks,
 * split(color, key) into process groups, counters and the last error. Every communicator of
 * a process shares one "world": the mapping of the job segment and the pending requests. */
#include "internal.h"
#include "net_events.h"
#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <sys/mman.h>
#include <unistd.h>

#define CTX_STRIDE 2u    /* each communicator owns ctx (user p2p) and ctx + 1 (collectives) */

static int env_int(const char *name, int def)
{
    const char *s = getenv(name);
    long v;
    return s && mlsys_parse_long(s, &v) == 0 ? (int)v : def;
}

mlsys_world *world_attach(int fd, int rank, int size, int local_rank)
{
    shm_header probe;
    if (pread(fd, &probe, sizeof probe, 0) != (ssize_t)sizeof probe || probe.magic != SHM_MAGIC) {
        fprintf(stderr, "mlsys-lab: rank %d: the job segment (fd %d) is not a job segment\n",
                rank, fd);
        return NULL;
    }
    if (probe.world != size || rank < 0 || rank >= size) {
        fprintf(stderr, "mlsys-lab: rank %d: world size %d does not match the job's %d\n", rank,
                size, probe.world);
        return NULL;
    }
    void *p = mmap(NULL, probe.size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
        perror("mlsys-lab: mmap of the job segment");
        return NULL;
    }
    mlsys_world *w = mlsys_xcalloc(1, sizeof *w);
    w->h = p;
    w->map_len = probe.size;
    w->rank = rank;
    w->size = size;
    w->local_rank = local_rank;
    w->send_seq = mlsys_xcalloc((size_t)size, sizeof(uint64_t));
    w->recv_seq = mlsys_xcalloc((size_t)size, sizeof(uint64_t));
    w->peers = mlsys_xcalloc((size_t)size, sizeof(shm_peer));
    w->next_ctx = 1;
    w->gated = w->h->gated;
    w->tp = &shm_transport;
    /* Spin only when every rank has a core. Not this process's affinity: the launcher has
     * bound it to one CPU already; the runner recorded how many it spreads the ranks over. */
    cpu_set_t cpus;
    int ncpu = w->h->cpus > 0 ? w->h->cpus
               : sched_getaffinity(0, sizeof cpus, &cpus) == 0 ? CPU_COUNT(&cpus) : 1;
    w->spin_ns = size <= ncpu ? 5000 : 0;
    w->tracing = w->h->ring_cap != 0;
    shm_bell_init();
    w->pid = getpid();
    atomic_store(&shm_rank(w->h, rank)->pid, (int32_t)w->pid);
    heap_attach(w);              /* without a heap, large messages use process_vm_readv */
    return w;
}

mlsys_comm *comm_create(mlsys_world *w, int size, const int *world_of, uint32_t ctx)
{
    mlsys_comm *c = mlsys_xcalloc(1, sizeof *c);
    c->w = w;
    c->size = size;
    c->world_of = mlsys_xmalloc((size_t)size * sizeof(int));
    memcpy(c->world_of, world_of, (size_t)size * sizeof(int));
    c->rank = -1;
    for (int i = 0; i < size; i++)
        if (world_of[i] == w->rank)
            c->rank = i;
    c->ctx = ctx;
    c->timeout_ms = env_int("MLSYS_TIMEOUT_MS", 30000);
    c->cur_coll = c->cur_algo = -1;
    coll_init_comm(c);
    c->next_comm = w->comms;
    w->comms = c;
    return c;
}

/* A transport plugin may follow mlsys_split with its own split (MPI_Comm_split). */
static int (*g_split_hook)(mlsys_comm *parent, int color, int key, mlsys_comm *child);

/* MLSYS_BACKEND=mpi: load libmlsys-mpi.so (MLSYS_MPI_PLUGIN, or next to the program) and let
 * it join the job: rank, size and transport come from MPI; there is no job segment. */
static mlsys_world *world_attach_plugin(void)
{
    char path[PATH_MAX + 32], err[512];
    const char *p = getenv("MLSYS_MPI_PLUGIN");
    if (p && *p) {
        snprintf(path, sizeof path, "%s", p);
    } else {
        ssize_t n = readlink("/proc/self/exe", path, PATH_MAX);
        n = n < 0 ? 0 : n;
        path[n] = 0;
        char *slash = strrchr(path, '/');
        snprintf(slash ? slash + 1 : path, sizeof path - (size_t)(slash ? slash + 1 - path : 0),
                 "libmlsys-mpi.so");
    }
    void *so = dlopen(path, RTLD_NOW | RTLD_GLOBAL);
    int (*attach)(mlsys_world *, char *, size_t) = NULL;
    if (so)
        attach = (int (*)(mlsys_world *, char *, size_t))dlsym(so, "mlsys_mpi_attach");
    if (!attach) {
        const char *why = dlerror();
        fprintf(stderr, "mlsys-lab: backend mpi: cannot load the MPI plugin: %s (%s)\n", why,
                why && strstr(why, "undefined symbol") ? "the program must be linked with "
                "-rdynamic so the plugin finds the runtime" : "build it with `make`, which "
                "needs mpicc, or set MLSYS_MPI_PLUGIN");
        return NULL;
    }
    g_split_hook = (int (*)(mlsys_comm *, int, int, mlsys_comm *))dlsym(so, "mlsys_mpi_split");
    mlsys_world *w = mlsys_xcalloc(1, sizeof *w);
    if (attach(w, err, sizeof err) != 0) {
        fprintf(stderr, "mlsys-lab: backend mpi: %s\n", err);
        free(w);
        return NULL;
    }
    w->send_seq = mlsys_xcalloc((size_t)w->size, sizeof(uint64_t));
    w->recv_seq = mlsys_xcalloc((size_t)w->size, sizeof(uint64_t));
    w->next_ctx = 1;
    const char *ev = getenv("MLSYS_EVENTS_ADDR");
    if (ev && *ev)
        net_events_start(w, ev, getenv("MLSYS_EVENTS_TOKEN"));
    return w;
}

mlsys_comm *mlsys_init(void)
{
    const char *backend = getenv("MLSYS_BACKEND");
    mlsys_world *w;
    if (backend && !strcmp(backend, "mpi")) {
        w = world_attach_plugin();
    } else {
        int fd = env_int("MLSYS_JOB_FD", -1), rank = env_int("RANK", -1);
        int size = env_int("WORLD_SIZE", -1), local = env_int("LOCAL_RANK", rank);
        if (fd < 0 || rank < 0 || size < 1) {
            fprintf(stderr, "mlsys-lab: this process was not started by the launcher "
                            "(MLSYS_JOB_FD, RANK and WORLD_SIZE are not set); use `mlsys-lab "
                            "run LAB`\n");
            return NULL;
        }
        w = world_attach(fd, rank, size, local);
    }
    if (!w)
        return NULL;
    int size = w->size;
    int *ident = mlsys_xmalloc((size_t)size * sizeof(int));
    for (int i = 0; i < size; i++)
        ident[i] = i;
    mlsys_comm *c = comm_create(w, size, ident, 0);
    free(ident);
    return c;
}

void mlsys_finalize(mlsys_comm *c)
{
    if (!c)
        return;
    mlsys_world *w = c->w;
    icoll_fini(w);              /* non-blocking collectives in flight finish first */
    if (w->h)
        atomic_store(&shm_rank(w->h, w->rank)->wait_kind, WAIT_DONE);
    net_events_stop(w);
    if (w->tp->fini)
        w->tp->fini(w);
    while (w->pending) {          /* requests never waited for: drop them */
        mlsys_request *r = w->pending;
        w->pending = r->next;
        free(r);
    }
    while (w->free_reqs) {
        mlsys_request *r = w->free_reqs;
        w->free_reqs = r->next;
        free(r);
    }
    for (mlsys_comm *x = w->comms, *next; x; x = next) {
        next = x->next_comm;
        free(x->world_of);
        free(x);
    }
    mlsys_free_aligned(w->scratch, w->scratch_len);
    if (w->h) {
        heap_detach(w);
        munmap(w->h, w->map_len);
    }
    free(w->send_seq);
    free(w->recv_seq);
    free(w->peers);
    free(w);
}

int mlsys_rank(const mlsys_comm *c) { return c->rank; }
int mlsys_size(const mlsys_comm *c) { return c->size; }
int mlsys_world_rank(const mlsys_comm *c) { return c->w->rank; }
int mlsys_local_rank(const mlsys_comm *c) { return c->w->local_rank; }
const char *mlsys_backend_name(const mlsys_comm *c) { return c->w->tp->name; }
const char *mlsys_errmsg(const mlsys_comm *c) { return c->errmsg[0] ? c->errmsg : "no error"; }
int mlsys_timeout_ms(const mlsys_comm *c) { return c->timeout_ms; }
void mlsys_set_timeout_ms(mlsys_comm *c, int ms) { c->timeout_ms = ms; }
const mlsys_counters *mlsys_get_counters(const mlsys_comm *c) { return &c->counters; }
void mlsys_reset_counters(mlsys_comm *c) { memset(&c->counters, 0, sizeof c->counters); }

void mlsys_set_error(mlsys_comm *c, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->errmsg, sizeof c->errmsg, fmt, ap);
    va_end(ap);
    c->err = code;
}

/* Split: group rank 0 gathers every (color, key), sorts the members of each color and hands
 * each rank its group and a context number. The context is (leader's world rank, the
 * leader's counter): unique across the job, so groups that share processes never confuse
 * each other's messages. Runs on the collective context with plain p2p. */
typedef struct { int color, key, rank; } split_entry;

static int cmp_entry(const void *a, const void *b)
{
    const split_entry *x = a, *y = b;
    if (x->color != y->color)
        return x->color < y->color ? -1 : 1;
    if (x->key != y->key)
        return x->key < y->key ? -1 : 1;
    return x->rank < y->rank ? -1 : (x->rank > y->rank);
}

int mlsys_split(mlsys_comm *c, int color, int key, mlsys_comm **out)
{
    int n = c->size, rc = 0;
    *out = NULL;
    /* reply: [0] ctx, [1] size, [2..] world ranks of the members */
    int *reply = mlsys_xcalloc((size_t)n + 2, sizeof(int));
    split_entry *all = NULL;
    c->in_coll++;
    if (c->rank == 0) {
        all = mlsys_xcalloc((size_t)n, sizeof *all);
        all[0] = (split_entry){color, key, 0};
        for (int i = 1; i < n && !rc; i++) {
            int buf[2];
            rc = mlsys_recv(c, buf, 2, MLSYS_I32, i, 7);
            all[i] = (split_entry){buf[0], buf[1], i};
        }
        split_entry *sorted = mlsys_xmalloc((size_t)n * sizeof *sorted);
        memcpy(sorted, all, (size_t)n * sizeof *sorted);
        qsort(sorted, (size_t)n, sizeof *sorted, cmp_entry);
        int *msg = mlsys_xcalloc((size_t)n + 2, sizeof(int));
        for (int i = 0; i < n && !rc; i++) {
            int me = all[i].color;
            int cnt = 0;
            msg[0] = -1;
            if (me >= 0) {
                /* every color gets its own context from this leader's counter */
                int first = -1;
                for (int j = 0; j < n; j++)
                    if (sorted[j].color == me) {
                        if (first < 0)
                            first = j;
                        msg[2 + cnt++] = c->world_of[sorted[j].rank];
                    }
                int color_index = 0;
                for (int j = 0; j < first; j++)
                    if (sorted[j].color >= 0 && (j == 0 || sorted[j].color != sorted[j - 1].color))
                        color_index++;
                msg[0] = (int)(((uint32_t)c->w->rank << 22) |
                               ((c->w->next_ctx + (uint32_t)color_index) * CTX_STRIDE));
            }
            msg[1] = cnt;
            if (i == 0)
                memcpy(reply, msg, ((size_t)n + 2) * sizeof(int));
            else
                rc = mlsys_send(c, msg, (size_t)n + 2, MLSYS_I32, i, 8);
        }
        int colors = 0;
        for (int j = 0; j < n; j++)
            if (sorted[j].color >= 0 && (j == 0 || sorted[j].color != sorted[j - 1].color))
                colors++;
        c->w->next_ctx += (uint32_t)colors;
        free(msg);
        free(sorted);
        free(all);
    } else {
        int buf[2] = {color, key};
        rc = mlsys_send(c, buf, 2, MLSYS_I32, 0, 7);
        if (!rc)
            rc = mlsys_recv(c, reply, (size_t)n + 2, MLSYS_I32, 0, 8);
    }
    c->in_coll--;
    if (!rc && color >= 0 && reply[1] > 0)
        *out = comm_create(c->w, reply[1], reply + 2, (uint32_t)reply[0]);
    if (*out)
        (*out)->timeout_ms = c->timeout_ms;
    if (!rc && g_split_hook && (rc = g_split_hook(c, color, key, *out)) != 0)
        *out = NULL;            /* freed with the others at finalize */
    free(reply);
    return rc;
}
