/* launch.c - the fork launcher. It creates the job segment (an anonymous memfd, so nothing
 * is left in /dev/shm whatever happens), starts N ranks in a process group of their own
 * with torchrun's environment, pumps their output and events, and ends the whole job when
 * one rank fails or the user presses Ctrl-C. Ranks die with the launcher (PDEATHSIG). The
 * launcher waits on the ranks' pidfds (no polling for exits), and as a subreaper it ends
 * whatever the ranks left running (forks, daemons) when the job ends. */
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
#include <dirent.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAX_RANKS SHM_MAX_RANKS
#define HEAP_BYTES (2ull << 30)     /* per rank, virtual: pages exist only once touched */
#define STOP_GRACE_NS 500000000ull
#define DRAIN_NS 1000000000ull      /* output still in the pipes once every rank is gone */
#define EVBATCH 4096
#define WAKE_MS 100                 /* longest sleep: a signal that lands just before poll */

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
    int graceful;           /* rank 0 was asked to end the job (o.stop_grace_ms) */
    uint64_t grace_until;
    int interrupted;
    char reason[256];
    mlsys_event *ev;
    int *pidfd;             /* per rank, readable once it exits; -1 where unsupported */
    ino_t (*pipe_ino)[2];   /* inodes of the output pipes: whoever holds one is of the job */
    char token[48];         /* MLSYS_JOB_TOKEN=..., exported to the ranks */
    int swept;              /* the ranks' leftover descendants have been killed */
    int strays;             /* how many there were */
    int stray_rank;         /* the rank one of them came from (its RANK), -1 */
    uint64_t drain_until;
};

/* Jobs of this process that are still running: their ranks are never strays of another. */
#define MAX_LIVE_JOBS 64
static mlsys_job *g_live[MAX_LIVE_JOBS];

static void live_add(mlsys_job *j)
{
    for (int i = 0; i < MAX_LIVE_JOBS; i++)
        if (!g_live[i]) {
            g_live[i] = j;
            return;
        }
}

static void live_remove(mlsys_job *j)
{
    for (int i = 0; i < MAX_LIVE_JOBS; i++)
        if (g_live[i] == j)
            g_live[i] = NULL;
}

static int is_live_rank(pid_t pid)
{
    for (int i = 0; i < MAX_LIVE_JOBS; i++)
        for (int r = 0; g_live[i] && r < g_live[i]->n; r++)
            if (g_live[i]->pid[r] == pid && !g_live[i]->reaped[r])
                return 1;
    return 0;
}

static volatile sig_atomic_t g_stop_requested, g_stop_count;

static void on_stop_signal(int sig)
{
    g_stop_requested = sig;
    g_stop_count++;
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

int mlsys_job_stop_count(void)
{
    return g_stop_count;
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
    setenv("MLSYS_JOB_TOKEN", j->token, 1);
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
    j->pidfd = mlsys_xcalloc((size_t)j->n, sizeof(int));
    j->pipe_ino = mlsys_xcalloc((size_t)j->n, sizeof *j->pipe_ino);
    j->stray_rank = -1;
    for (int r = 0; r < j->n; r++)
        j->pidfd[r] = -1;
    live_add(j);
    static unsigned job_counter;
    snprintf(j->token, sizeof j->token, "%d-%u-%llx", (int)getpid(), ++job_counter,
             (unsigned long long)j->h->t0_ns);
    /* Orphans of the ranks (a learner's fork, setsid or double fork) come to us instead of
     * init, so that the job's end can find them and end them too. */
    prctl(PR_SET_CHILD_SUBREAPER, 1);
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
        /* Signals wait until the child has its own handlers (mlsys_child_tie): a SIGTERM
         * that came in between would run the parent's handler in the child. */
        sigset_t all, old;
        sigfillset(&all);
        sigprocmask(SIG_BLOCK, &all, &old);
        pid_t pid = fork();
        if (pid != 0)
            sigprocmask(SIG_SETMASK, &old, NULL);
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
#ifdef SYS_pidfd_open
        j->pidfd[r] = (int)syscall(SYS_pidfd_open, pid, 0);
        if (j->pidfd[r] >= 0)
            fcntl(j->pidfd[r], F_SETFD, FD_CLOEXEC);
#endif
        if (o->capture_output) {
            struct stat pst;
            if (fstat(po[0], &pst) == 0)
                j->pipe_ino[r][0] = pst.st_ino;
            if (fstat(pe[0], &pst) == 0)
                j->pipe_ino[r][1] = pst.st_ino;
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
    /* Once the job is being stopped (a rank failed, Ctrl-C), what the other ranks write on
     * stderr is the echo of it ("job aborted while waiting", "not run: an earlier ... failed"):
     * the job's one failure line says what happened, so their stderr is left out. Their
     * stdout, and everything the failed rank writes, still comes through. */
    if (is_err && j->stopping && r != j->failed)
        return;
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
            kill(j->pid[r], SIGCONT);     /* a stopped rank would hold SIGTERM until then */
            j->st[r].killed_by_us = 1;
        }
}

/* A stop with o.stop_grace_ms: rank 0 alone gets SIGUSR1 and ends the job its own way
 * (a server drains, then tells the other ranks to stop); the ranks are stopped only if the
 * job outlives the grace, or on a second stop. */
static void begin_graceful(mlsys_job *j)
{
    j->graceful = 1;
    j->grace_until = mlsys_now_ns() + (uint64_t)j->o.stop_grace_ms * 1000000ull;
    if (!j->reaped[0])
        kill(j->pid[0], SIGUSR1);
}

/* A stop asked for (a signal, mlsys_job_stop): gracefully the first time when the job was
 * started so, else (or after that) every rank. */
static void request_stop(mlsys_job *j)
{
    if (j->o.stop_grace_ms > 0 && !j->graceful) {
        begin_graceful(j);
        return;
    }
    j->interrupted = 1;
    snprintf(j->reason, sizeof j->reason, "interrupted: the job was stopped");
    begin_stop(j);
}

/* The state letter of a process ('R', 'S', 'T' stopped, 't' traced, 'Z'), 0 when gone. */
static char proc_state(pid_t pid, pid_t *pgrp)
{
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    ssize_t got = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (got <= 0)
        return 0;
    buf[got] = 0;
    char *rp = strrchr(buf, ')'), st = 0;
    int ppid = 0, pg = 0;
    if (!rp || sscanf(rp + 1, " %c %d %d", &st, &ppid, &pg) < 1)
        return 0;
    if (pgrp)
        *pgrp = (pid_t)pg;
    return st;
}

/* A rank stopped by a signal (SIGSTOP, Ctrl-Z) makes the others time out waiting for it:
 * the one to name is the stopped rank, not the first that gave up. -1 when none. */
static int stopped_rank(const mlsys_job *j)
{
    for (int r = 0; r < j->n; r++) {
        char st = j->reaped[r] ? 0 : proc_state(j->pid[r], NULL);
        if (st == 'T')
            return r;
    }
    return -1;
}

static void note_exit(mlsys_job *j, int r, int status)
{
    mlsys_rank_status *s = &j->st[r];
    j->reaped[r] = 1;
    j->alive--;
    if (j->pidfd[r] >= 0) {
        close(j->pidfd[r]);
        j->pidfd[r] = -1;
    }
    if (WIFEXITED(status)) {
        s->exited = 1;
        s->code = WEXITSTATUS(status);
    } else {
        s->exited = 0;
        s->code = WIFSIGNALED(status) ? WTERMSIG(status) : -1;
    }
    int bad = !s->exited || s->code != 0;
    if (bad && j->graceful && r == 0 && !s->exited && s->code == SIGUSR1) {
        /* rank 0 had no handler yet for the graceful stop: it was stopped, not failed */
        s->killed_by_us = 1;
        j->interrupted = 1;
        snprintf(j->reason, sizeof j->reason, "interrupted: the job was stopped");
        begin_stop(j);
    }
    if (bad && j->failed < 0 && !(j->stopping && s->killed_by_us)) {
        char what[96];
        if (s->exited)
            snprintf(what, sizeof what, "rank %d exited with status %d", r, s->code);
        else
            snprintf(what, sizeof what, "rank %d died by signal %d (%s)", r, s->code,
                     strsignal(s->code));
        int stopped = stopped_rank(j);
        if (stopped >= 0) {
            j->failed = stopped;
            snprintf(j->reason, sizeof j->reason, "rank %d was stopped by a signal (SIGSTOP or "
                     "Ctrl-Z) while the others waited for it; then %s", stopped, what);
        } else {
            j->failed = r;
            snprintf(j->reason, sizeof j->reason, "%s", what);
        }
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

/* ---- what the ranks leave behind ---- */

/* Does pid hold the write end of one of the job's output pipes (what a rank's child inherits
 * as its stdout or stderr)? Read ends do not count: a rank of another job forked later
 * without exec inherits those. */
static int holds_job_pipe(const mlsys_job *j, pid_t pid)
{
    char dir[64];
    snprintf(dir, sizeof dir, "/proc/%d/fd", (int)pid);
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    int found = 0;
    struct dirent *e;
    while (!found && (e = readdir(d))) {
        struct stat st;
        if (e->d_name[0] == '.' || fstatat(dirfd(d), e->d_name, &st, 0) != 0 ||
            !S_ISFIFO(st.st_mode))
            continue;
        int ours = 0;
        for (int r = 0; !ours && r < j->n; r++)
            ours = st.st_ino == j->pipe_ino[r][0] || st.st_ino == j->pipe_ino[r][1];
        if (!ours)
            continue;
        char info[300], text[256];
        snprintf(info, sizeof info, "/proc/%d/fdinfo/%s", (int)pid, e->d_name);
        int fd = open(info, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            continue;
        ssize_t got = read(fd, text, sizeof text - 1);
        close(fd);
        text[got > 0 ? got : 0] = 0;
        const char *fl = strstr(text, "flags:");
        unsigned long flags = fl ? strtoul(fl + 6, NULL, 8) : 0;
        found = (flags & O_ACCMODE) == O_WRONLY || (flags & O_ACCMODE) == O_RDWR;
    }
    closedir(d);
    return found;
}

/* Was pid started under this job (MLSYS_JOB_TOKEN in its environment)? *rank gets its RANK. */
static int has_job_token(const mlsys_job *j, pid_t pid, int *rank)
{
    char path[64], want[80];
    snprintf(path, sizeof path, "/proc/%d/environ", (int)pid);
    snprintf(want, sizeof want, "MLSYS_JOB_TOKEN=%s", j->token);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    char buf[16384];
    ssize_t got = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (got <= 0)
        return 0;
    buf[got] = 0;
    int found = 0;
    for (char *p = buf; p < buf + got; p += strlen(p) + 1) {
        if (!strcmp(p, want))
            found = 1;
        else if (!strncmp(p, "RANK=", 5))
            *rank = atoi(p + 5);
    }
    return found;
}

/* Our children right now (the runner is a subreaper: orphans of the ranks are among them). */
static int list_children(pid_t *out, int max)
{
    int n = 0;
    DIR *d = opendir("/proc/self/task");
    if (!d)
        return 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < max) {
        if (e->d_name[0] == '.')
            continue;
        char path[300], buf[4096];
        snprintf(path, sizeof path, "/proc/self/task/%s/children", e->d_name);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            continue;
        ssize_t got = read(fd, buf, sizeof buf - 1);
        close(fd);
        buf[got > 0 ? got : 0] = 0;
        for (char *p = buf, *end; n < max; p = end) {
            long v = strtol(p, &end, 10);
            if (end == p)
                break;
            out[n++] = (pid_t)v;
        }
    }
    closedir(d);
    return n;
}

/* Once every rank is gone: end whatever they started (a fork without wait, a daemon that
 * called setsid, a double fork), since it would hold the job's pipes and segment and outlive
 * the job. A process belongs to the job when it is in the job's process group, holds the job's
 * segment or pipes, or carries the job's token in its environment; no other process is
 * touched. Each is killed and collected; its own children then come to us, and the next round
 * takes them. */
static void sweep_strays(mlsys_job *j)
{
    pid_t kids[256];
    for (int round = 0; round < 64; round++) {
        int n = list_children(kids, 256), found = 0;
        for (int i = 0; i < n; i++) {
            int rank = -1;
            if (is_live_rank(kids[i]))
                continue;
            pid_t pg = 0;
            char st = proc_state(kids[i], &pg);
            if (!st)
                continue;
            int member = (pg == j->pgid && j->pgid > 0) || has_job_token(j, kids[i], &rank) ||
                         holds_job_pipe(j, kids[i]);
            if (!member)
                continue;
            if (st != 'Z') {
                j->strays++;
                if (j->stray_rank < 0)
                    j->stray_rank = rank;
            }
            kill(kids[i], SIGKILL);
            int status;
            while (waitpid(kids[i], &status, 0) < 0 && errno == EINTR)
                ;
            found++;
        }
        if (!found)
            break;
    }
}

int mlsys_job_strays(const mlsys_job *j, int *rank)
{
    if (rank)
        *rank = j->stray_rank;
    return j->strays;
}

/* After the last rank: flush what a pipe still holds as a line, then close it. */
static void close_pipes(mlsys_job *j, const mlsys_job_sink *sink)
{
    for (int r = 0; r < j->n; r++)
        for (int k = 0; k < 2; k++)
            if (j->pipes[r][k] >= 0) {
                pump(j, sink, r, k);
                if (j->pipes[r][k] < 0)
                    continue;
                linebuf *lb = &j->lines[r][k];
                if (lb->len) {
                    lb->buf[lb->len] = 0;
                    emit_line(j, sink, r, k, lb->buf);
                    lb->len = 0;
                }
                close(j->pipes[r][k]);
                j->pipes[r][k] = -1;
            }
}

static int ms_until(uint64_t now, uint64_t t)
{
    return t > now ? (int)((t - now) / 1000000ull) + 1 : 0;
}

int mlsys_job_wait(mlsys_job *j, const mlsys_job_sink *sink, int step_ms, char *why, size_t whylen)
{
    uint64_t start = mlsys_now_ns();
    struct pollfd *pfd = mlsys_xcalloc((size_t)j->n * 3, sizeof *pfd);
    int result = 1;
    for (;;) {
        if (g_stop_requested && !j->stopping && j->alive &&
            (!j->graceful || g_stop_count > 1 || mlsys_now_ns() > j->grace_until))
            request_stop(j);
        else if (j->graceful && !j->stopping && j->alive && mlsys_now_ns() > j->grace_until)
            request_stop(j);        /* mlsys_job_stop's grace ran out */
        /* Sleep until output, an exit (the ranks' pidfds), or the next deadline: no polling
         * for exits, so the job ends as soon as its last rank does. */
        int np = 0, blind = 0;
        for (int r = 0; r < j->n; r++) {
            for (int k = 0; k < 2; k++)
                if (j->pipes[r][k] >= 0)
                    pfd[np++] = (struct pollfd){.fd = j->pipes[r][k], .events = POLLIN};
            if (!j->reaped[r]) {
                if (j->pidfd[r] >= 0)
                    pfd[np++] = (struct pollfd){.fd = j->pidfd[r], .events = POLLIN};
                else
                    blind = 1;      /* no pidfd here: look for its exit every 20 ms */
            }
        }
        uint64_t now = mlsys_now_ns();
        int tmo = j->h->ring_cap ? 2 : blind ? 20 : WAKE_MS;
        if (j->stopping && j->alive && ms_until(now, j->stop_at) < tmo)
            tmo = ms_until(now, j->stop_at);
        if (j->graceful && !j->stopping && j->alive && ms_until(now, j->grace_until) < tmo)
            tmo = ms_until(now, j->grace_until);
        if (!j->alive && j->swept && ms_until(now, j->drain_until) < tmo)
            tmo = ms_until(now, j->drain_until);
        if (step_ms >= 0) {
            uint64_t end = start + (uint64_t)step_ms * 1000000ull;
            if (ms_until(now, end) < tmo)
                tmo = ms_until(now, end);
        }
        if (np)
            poll(pfd, (nfds_t)np, tmo);
        else if (tmo > 0)
            usleep((useconds_t)tmo * 1000);
        for (int r = 0; r < j->n; r++)
            for (int k = 0; k < 2; k++)
                if (j->pipes[r][k] >= 0)
                    pump(j, sink, r, k);
        fflush(stdout);         /* a line a rank printed is seen now (a server's "ready") */
        drain_events(j, sink);
        reap(j);
        now = mlsys_now_ns();
        if (j->stopping && j->alive && now > j->stop_at)
            for (int r = 0; r < j->n; r++)
                if (!j->reaped[r])
                    kill(j->pid[r], SIGKILL);
        if (!j->alive && !j->swept) {
            sweep_strays(j);
            j->swept = 1;
            j->drain_until = mlsys_now_ns() + DRAIN_NS;
            for (int r = 0; r < j->n; r++)
                for (int k = 0; k < 2; k++)
                    if (j->pipes[r][k] >= 0)
                        pump(j, sink, r, k);
        }
        if (!j->alive && (!open_pipes(j) || mlsys_now_ns() > j->drain_until)) {
            close_pipes(j, sink);     /* whoever still holds a pipe is not of this job */
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
    if (j->alive && !j->stopping)
        request_stop(j);
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
    /* a rank whose credit came is leaving its gate, not waiting there (it has not woken yet) */
    if (atomic_load(&s->wait_kind) != WAIT_GATE ||
        atomic_load(&j->h->gate_credit) >= atomic_load(&s->gate_passed))
        return -1;
    return atomic_load(&s->gate_step);
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
    if (!j->swept)
        sweep_strays(j);
    live_remove(j);
    for (int r = 0; r < j->n; r++)
        if (j->pidfd[r] >= 0)
            close(j->pidfd[r]);
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
    free(j->pidfd);
    free(j->pipe_ino);
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
