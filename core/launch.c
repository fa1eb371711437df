/* launch.c - the fork launcher. It creates the job segment (an anonymous memfd, so nothing
 * is left in /dev/shm whatever happens), starts N ranks in a process group of their own
 * with torchrun's environment, pumps their output and events, and ends the whole job when
 * one rank fails or the user presses Ctrl-C. Ranks die with the launcher (PDEATHSIG). */
#include "internal.h"
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAX_RANKS SHM_MAX_RANKS
#define HEAP_BYTES (2ull << 30)     /* per rank, virtual: pages exist only once touched */
#define STOP_GRACE_NS 500000000ull
#define EVBATCH 4096

typedef struct linebuf { char *buf; size_t len, cap; } linebuf;

struct mlsys_job {
    mlsys_launch_opts o;
    int n;
    int fd;
    shm_header *h;
    size_t len;
    pid_t pgid;
    pid_t *pid;
    mlsys_rank_status *st;
    int *reaped;
    int (*pipes)[2];        /* read ends of stdout and stderr, -1 once closed */
    linebuf (*lines)[2];
    int alive;
    int failed;             /* first failing rank, -1 */
    int stopping;
    uint64_t stop_at;
    int interrupted;
    char reason[256];
    mlsys_event *ev;
};

static volatile sig_atomic_t g_stop_requested;

static void on_stop_signal(int sig)
{
    (void)sig;
    g_stop_requested = 1;
}

void mlsys_job_install_signal_stop(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
}

int mlsys_job_stop_requested(void)
{
    return g_stop_requested;
}

static void set_env_int(const char *k, long v)
{
    char b[32];
    snprintf(b, sizeof b, "%ld", v);
    setenv(k, b, 1);
}

void mlsys_child_tie(pid_t parent, int deathsig)
{
    prctl(PR_SET_PDEATHSIG, deathsig);
    if (getppid() != parent)      /* the parent died before prctl: nobody to wait for us */
        _exit(1);
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    signal(SIGHUP, SIG_DFL);
    signal(SIGPIPE, SIG_DFL);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
}

/* Rank r runs on the r-th allowed CPU (round robin), as mpirun binds to cores. Unbound, the
 * scheduler often puts a woken rank on its waker's core, and then every message of a 2-rank
 * job costs a context switch (18 us instead of 1 us for 8 B here). MLSYS_BIND=none: unbound. */
static void bind_rank(int rank)
{
    const char *b = getenv("MLSYS_BIND");
    if (b && !strcmp(b, "none"))
        return;
    cpu_set_t allowed, one;
    if (sched_getaffinity(0, sizeof allowed, &allowed) != 0)
        return;
    int ncpu = CPU_COUNT(&allowed), want = rank % (ncpu > 0 ? ncpu : 1), k = 0;
    for (int cpu = 0; cpu < CPU_SETSIZE; cpu++) {
        if (!CPU_ISSET(cpu, &allowed))
            continue;
        if (k++ == want) {
            CPU_ZERO(&one);
            CPU_SET(cpu, &one);
            sched_setaffinity(0, sizeof one, &one);
            return;
        }
    }
}

/* In the child, between fork and exec or fn: the rank's environment and wiring. */
static void child_setup(mlsys_job *j, int rank, pid_t parent)
{
    setpgid(0, rank == 0 ? 0 : j->pgid);
    mlsys_child_tie(parent, SIGKILL);
    bind_rank(rank);
    if (j->o.capture_output) {
        dup2(j->pipes[rank][0], STDOUT_FILENO);
        dup2(j->pipes[rank][1], STDERR_FILENO);
    }
    int jfd = dup(j->fd);      /* dup clears close-on-exec: the rank keeps the segment */
    for (int r = 0; r < j->n; r++)  /* and every rank's heap, at the same fd numbers */
        fcntl(j->h->heap_fd[r], F_SETFD, 0);
    set_env_int("MLSYS_JOB_FD", jfd);
    set_env_int("RANK", rank);
    set_env_int("WORLD_SIZE", j->n);
    set_env_int("LOCAL_RANK", rank);
    setenv("MASTER_ADDR", "127.0.0.1", 1);
    set_env_int("MASTER_PORT", j->o.master_port ? j->o.master_port : 29500);
    set_env_int("MLSYS_TIMEOUT_MS", j->o.timeout_ms > 0 ? j->o.timeout_ms : 30000);
    setenv("MLSYS_BACKEND", j->o.backend ? j->o.backend : "shm", 1);
    /* one BLAS thread per rank: N ranks on few cores must not each start a thread per core */
    setenv("OPENBLAS_NUM_THREADS", "1", 1);
    if (j->o.algo)
        setenv("MLSYS_ALGO", j->o.algo, 1);
    else
        unsetenv("MLSYS_ALGO");
}

mlsys_job *mlsys_job_start(const mlsys_launch_opts *o, char *const argv[],
                           int (*fn)(mlsys_comm *, void *), void *arg, char *err, size_t errlen)
{
    if (o->world_size < 1 || o->world_size > MAX_RANKS) {
        snprintf(err, errlen, "world size must be from 1 to %d, got %d", MAX_RANKS, o->world_size);
        return NULL;
    }
    mlsys_job *j = mlsys_xcalloc(1, sizeof *j);
    j->o = *o;
    j->n = o->world_size;
    j->failed = -1;
    j->len = shm_segment_size(j->n, (uint64_t)(o->trace_capacity > 0 ? o->trace_capacity : 0));
    j->fd = memfd_create("mlsys-job", MFD_CLOEXEC);
    if (j->fd < 0 || ftruncate(j->fd, (off_t)j->len) != 0) {
        snprintf(err, errlen, "cannot create the job segment (%zu B): %s", j->len, strerror(errno));
        if (j->fd >= 0)
            close(j->fd);
        free(j);
        return NULL;
    }
    j->h = mmap(NULL, j->len, PROT_READ | PROT_WRITE, MAP_SHARED, j->fd, 0);
    if (j->h == MAP_FAILED) {
        snprintf(err, errlen, "cannot map the job segment: %s", strerror(errno));
        close(j->fd);
        free(j);
        return NULL;
    }
    shm_segment_layout(j->h, j->n, (uint64_t)(o->trace_capacity > 0 ? o->trace_capacity : 0));
    j->h->gated = o->gated;
    cpu_set_t allowed;      /* the ranks' own affinity is one CPU each once bound */
    j->h->cpus = sched_getaffinity(0, sizeof allowed, &allowed) == 0 ? CPU_COUNT(&allowed) : 1;
    const char *hb = getenv("MLSYS_HEAP_BYTES");
    uint64_t heap = HEAP_BYTES;
    if (hb && mlsys_parse_size(hb, &heap) != 0)
        heap = HEAP_BYTES;
    j->h->heap_size = heap;
    for (int r = 0; r < SHM_MAX_RANKS; r++)
        j->h->heap_fd[r] = -1;
    for (int r = 0; r < j->n; r++) {
        int fd = memfd_create("mlsys-heap", MFD_CLOEXEC);
        if (fd < 0 || ftruncate(fd, (off_t)heap) != 0) {
            if (fd >= 0)
                close(fd);
            j->h->heap_size = 0;         /* no heaps: ranks fall back to process_vm_readv */
            break;
        }
        j->h->heap_fd[r] = fd;
    }
    j->h->t0_ns = mlsys_now_ns();
    j->h->magic = SHM_MAGIC;

    j->pid = mlsys_xcalloc((size_t)j->n, sizeof(pid_t));
    j->st = mlsys_xcalloc((size_t)j->n, sizeof *j->st);
    j->reaped = mlsys_xcalloc((size_t)j->n, sizeof(int));
    j->pipes = mlsys_xcalloc((size_t)j->n, sizeof *j->pipes);
    j->lines = mlsys_xcalloc((size_t)j->n, sizeof *j->lines);
    j->ev = mlsys_xmalloc(EVBATCH * sizeof(mlsys_event));
    fflush(stdout);
    fflush(stderr);
    pid_t parent = getpid();
    for (int r = 0; r < j->n; r++) {
        int po[2] = {-1, -1}, pe[2] = {-1, -1};
        if (o->capture_output && (pipe2(po, O_CLOEXEC) || pipe2(pe, O_CLOEXEC))) {
            snprintf(err, errlen, "cannot create pipes for rank %d: %s", r, strerror(errno));
            j->failed = r;
            break;
        }
        /* the child dups the write ends onto 1 and 2; keep them in pipes[] until then */
        j->pipes[r][0] = po[1];
        j->pipes[r][1] = pe[1];
        pid_t pid = fork();
        if (pid < 0) {
            snprintf(err, errlen, "cannot start rank %d: %s", r, strerror(errno));
            close(po[0]); close(po[1]); close(pe[0]); close(pe[1]);
            j->pipes[r][0] = j->pipes[r][1] = -1;
            j->failed = r;
            break;
        }
        if (pid == 0) {
            child_setup(j, r, parent);
            if (argv) {
                execv(argv[0], argv);
                fprintf(stderr, "mlsys-lab: rank %d: cannot run %s: %s\n", r, argv[0], strerror(errno));
                _exit(127);
            }
            mlsys_comm *c = mlsys_init();
            int rc = c ? fn(c, arg) : 1;
            fflush(stdout);
            fflush(stderr);
            if (c)
                mlsys_finalize(c);
            _exit(rc & 0xff);
        }
        if (r == 0)
            j->pgid = pid;
        setpgid(pid, j->pgid);
        j->pid[r] = pid;
        j->st[r].pid = pid;
        j->alive++;
        if (o->capture_output) {
            close(po[1]);
            close(pe[1]);
            j->pipes[r][0] = po[0];
            j->pipes[r][1] = pe[0];
            fcntl(po[0], F_SETFL, O_NONBLOCK);
            fcntl(pe[0], F_SETFL, O_NONBLOCK);
        } else {
            j->pipes[r][0] = j->pipes[r][1] = -1;
        }
    }
    if (j->failed >= 0) {          /* could not start every rank: undo the others */
        mlsys_job_free(j);
        return NULL;
    }
    return j;
}

static void emit_line(mlsys_job *j, const mlsys_job_sink *sink, int r, int is_err, const char *s)
{
    (void)j;
    if (sink && sink->out_line) {
        sink->out_line(sink->u, r, is_err, s);
    } else if (is_err) {
        fprintf(stderr, "[rank %d] %s\n", r, s);
    } else {
        fputs(s, stdout);
        fputc('\n', stdout);
    }
}

/* Read what a pipe has and hand over complete lines; 0 when the pipe is closed. */
static int pump(mlsys_job *j, const mlsys_job_sink *sink, int r, int which)
{
    int fd = j->pipes[r][which];
    linebuf *lb = &j->lines[r][which];
    char buf[8192];
    for (;;) {
        ssize_t got = read(fd, buf, sizeof buf);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0)
            return 1;      /* EAGAIN: nothing more now */
        if (got == 0) {
            if (lb->len) {
                lb->buf[lb->len] = 0;
                emit_line(j, sink, r, which, lb->buf);
                lb->len = 0;
            }
            close(fd);
            j->pipes[r][which] = -1;
            return 0;
        }
        for (ssize_t i = 0; i < got; i++) {
            if (lb->len + 2 > lb->cap) {
                lb->cap = lb->cap ? lb->cap * 2 : 256;
                lb->buf = realloc(lb->buf, lb->cap);
                if (!lb->buf)
                    abort();
            }
            if (buf[i] == '\n') {
                lb->buf[lb->len] = 0;
                emit_line(j, sink, r, which, lb->buf);
                lb->len = 0;
            } else {
                lb->buf[lb->len++] = buf[i];
            }
        }
    }
}

static void wake_all(mlsys_job *j)
{
    for (int r = 0; r < j->n; r++)
        shm_bell_ring(j->h, r);
}

static void begin_stop(mlsys_job *j)
{
    if (j->stopping)
        return;
    j->stopping = 1;
    j->stop_at = mlsys_now_ns() + STOP_GRACE_NS;
    atomic_store(&j->h->abort, 1);
    wake_all(j);
    for (int r = 0; r < j->n; r++)
        if (!j->reaped[r]) {
            kill(j->pid[r], SIGTERM);
            j->st[r].killed_by_us = 1;
        }
}

static void note_exit(mlsys_job *j, int r, int status)
{
    mlsys_rank_status *s = &j->st[r];
    j->reaped[r] = 1;
    j->alive--;
    if (WIFEXITED(status)) {
        s->exited = 1;
        s->code = WEXITSTATUS(status);
    } else {
        s->exited = 0;
        s->code = WIFSIGNALED(status) ? WTERMSIG(status) : -1;
    }
    int bad = !s->exited || s->code != 0;
    if (bad && j->failed < 0 && !(j->stopping && s->killed_by_us)) {
        j->failed = r;
        if (s->exited)
            snprintf(j->reason, sizeof j->reason, "rank %d exited with status %d", r, s->code);
        else
            snprintf(j->reason, sizeof j->reason, "rank %d died by signal %d (%s)", r, s->code,
                     strsignal(s->code));
        begin_stop(j);
    }
    if (!bad)
        s->killed_by_us = 0;
}

static void reap(mlsys_job *j)
{
    for (int r = 0; r < j->n; r++) {
        if (j->reaped[r])
            continue;
        int status;
        pid_t p = waitpid(j->pid[r], &status, WNOHANG);
        if (p == j->pid[r])
            note_exit(j, r, status);
    }
}

static void drain_events(mlsys_job *j, const mlsys_job_sink *sink)
{
    if (!j->h->ring_cap)
        return;
    int n;
    while ((n = trace_drain(j->h, j->n, j->ev, EVBATCH)) > 0)
        if (sink && sink->events)
            sink->events(sink->u, j->ev, (size_t)n);
}

static int open_pipes(const mlsys_job *j)
{
    int n = 0;
    for (int r = 0; r < j->n; r++)
        n += (j->pipes[r][0] >= 0) + (j->pipes[r][1] >= 0);
    return n;
}

int mlsys_job_wait(mlsys_job *j, const mlsys_job_sink *sink, int step_ms, char *why, size_t whylen)
{
    uint64_t start = mlsys_now_ns();
    struct pollfd *pfd = mlsys_xcalloc((size_t)j->n * 2, sizeof *pfd);
    int result = 1;
    for (;;) {
        if (g_stop_requested && !j->stopping) {
            j->interrupted = 1;
            snprintf(j->reason, sizeof j->reason, "interrupted: the job was stopped");
            begin_stop(j);
        }
        int np = 0;
        for (int r = 0; r < j->n; r++)
            for (int k = 0; k < 2; k++)
                if (j->pipes[r][k] >= 0)
                    pfd[np++] = (struct pollfd){.fd = j->pipes[r][k], .events = POLLIN};
        int tmo = j->h->ring_cap ? 2 : 20;
        if (np)
            poll(pfd, (nfds_t)np, tmo);
        else if (j->alive)
            usleep((useconds_t)tmo * 1000);
        for (int r = 0; r < j->n; r++)
            for (int k = 0; k < 2; k++)
                if (j->pipes[r][k] >= 0)
                    pump(j, sink, r, k);
        drain_events(j, sink);
        reap(j);
        if (j->stopping && j->alive && mlsys_now_ns() > j->stop_at)
            for (int r = 0; r < j->n; r++)
                if (!j->reaped[r])
                    kill(j->pid[r], SIGKILL);
        if (!j->alive && !open_pipes(j)) {
            drain_events(j, sink);
            result = (j->failed >= 0 || j->interrupted) ? 2 : 0;
            break;
        }
        if (step_ms >= 0 && mlsys_now_ns() - start >= (uint64_t)step_ms * 1000000ull) {
            free(pfd);
            return 1;
        }
    }
    free(pfd);
    if (why && whylen)
        snprintf(why, whylen, "%s", j->reason[0] ? j->reason : "all ranks finished");
    return result == 0 ? 0 : 2;
}

void mlsys_job_stop(mlsys_job *j)
{
    if (j->alive && !j->stopping) {
        j->interrupted = 1;
        snprintf(j->reason, sizeof j->reason, "interrupted: the job was stopped");
        begin_stop(j);
    }
}

const mlsys_rank_status *mlsys_job_status(const mlsys_job *j, int rank)
{
    return rank >= 0 && rank < j->n ? &j->st[rank] : NULL;
}

int mlsys_job_world_size(const mlsys_job *j)
{
    return j->n;
}

int mlsys_job_failed_rank(const mlsys_job *j)
{
    return j->failed;
}

uint64_t mlsys_job_events_lost(const mlsys_job *j)
{
    uint64_t lost = 0;
    if (j->h->ring_cap)
        for (int r = 0; r < j->n; r++)
            lost += atomic_load(&shm_ring_of(j->h, r)->lost);
    return lost;
}

uint64_t mlsys_job_t0_ns(const mlsys_job *j)
{
    return j->h->t0_ns;
}

uint64_t mlsys_job_grant_step(mlsys_job *j)
{
    uint64_t v = atomic_fetch_add(&j->h->gate_credit, 1) + 1;
    wake_all(j);
    return v;
}

/* Gated mode: the step each rank waits at (-1 when it is not at the gate). */
int mlsys_job_gate_step(const mlsys_job *j, int rank)
{
    shm_rank_state *s = shm_rank(j->h, rank);
    return atomic_load(&s->wait_kind) == WAIT_GATE ? atomic_load(&s->gate_step) : -1;
}

void mlsys_job_free(mlsys_job *j)
{
    if (!j)
        return;
    if (j->alive) {
        begin_stop(j);
        for (int r = 0; r < j->n; r++)
            if (!j->reaped[r] && j->pid[r] > 0) {
                kill(j->pid[r], SIGKILL);
                int status;
                if (waitpid(j->pid[r], &status, 0) == j->pid[r])
                    note_exit(j, r, status);
            }
    }
    for (int r = 0; r < j->n; r++)
        for (int k = 0; k < 2; k++) {
            if (j->pipes[r][k] >= 0)
                close(j->pipes[r][k]);
            free(j->lines[r][k].buf);
        }
    for (int r = 0; r < j->n; r++)
        if (j->h->heap_fd[r] >= 0)
            close(j->h->heap_fd[r]);
    munmap(j->h, j->len);
    close(j->fd);
    free(j->pid);
    free(j->st);
    free(j->reaped);
    free(j->pipes);
    free(j->lines);
    free(j->ev);
    free(j);
}

int mlsys_run_fn(int world_size, int timeout_ms, int (*fn)(mlsys_comm *, void *), void *arg,
                 char *why, size_t whylen)
{
    mlsys_launch_opts o = {.world_size = world_size, .timeout_ms = timeout_ms};
    mlsys_job *j = mlsys_job_start(&o, NULL, fn, arg, why, whylen);
    if (!j)
        return 2;
    int rc = mlsys_job_wait(j, NULL, -1, why, whylen);
    mlsys_job_free(j);
    return rc;
}
