/* mpirun.c - --backend mpi: builds the mpirun line (--allow-run-as-root as root,
 * --oversubscribe beyond the slots, ob1 over self/vader/tcp), runs `mlsys-lab worker LAB ...`
 * under it in a session of its own, and gives what the shm launcher gives: lines per rank
 * (--tag-output), events over TCP (core/net_collector.c), one line on how the job ended. Ctrl-C:
 * SIGTERM to mpirun, then SIGKILL to whatever is left in its session. */
#include "mpirun.h"
#include "../../core/net_events.h"
#include "../job/runner.h"
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define STOP_GRACE_NS 5000000000ull      /* mpirun needs ~2.5 s to tear a job down */
#define DRAIN_NS 2000000000ull           /* output still arriving after mpirun ended */
#define REPORT_GRACE_NS 5000000000ull    /* from mpirun's failure report to its exit */
#define HANG_NS 10000000000ull           /* mpirun alone in its session: hung at its end */
#define LEFTOVER_GRACE_NS 1000000000ull  /* ranks told to stop may take a moment to go */
#define MAX_ARGS 64
#define MAX_POLL 256

typedef struct linebuf { char *buf; size_t len, cap; } linebuf;

typedef struct boxbuf {                  /* mpirun's "-----" framed reports */
    char **lines;
    int n, cap;
} boxbuf;

struct mpirun_job {
    mpirun_opts o;
    pid_t pid;                           /* mpirun, leader of its own session */
    int fd[2];                           /* its stdout and stderr, -1 once closed */
    linebuf lb[2];
    boxbuf box[2];
    collector *col;
    int reaped, status;                  /* reaped: mpirun ended (a zombie until collected) */
    int collected;                       /* its status is in status */
    int stopping, interrupted, cleaned;
    uint64_t t0, stop_at, ended_at;
    int graceful;                        /* SIGUSR1 went to the ranks (o.stop_grace_ms) */
    uint64_t grace_until;
    int fail_rank;
    char fail[200];
    uint64_t report_at;                  /* when mpirun reported a failure */
    uint64_t next_scan, quiet_since;     /* watching for an mpirun that hangs at its end */
    int saw_ranks, hung;
    int nonzero;                         /* mpirun said a rank exited non-zero, not which */
    int leftovers;                       /* processes of the session killed at the end */
    unsigned char *noise;                /* per rank: inside Open MPI's crash backtrace */
    int swept;                           /* files the transport left were removed */
};

const char *mpirun_find(char *path, size_t n)
{
    const char *env = getenv("PATH");
    char dirs[4096];
    snprintf(dirs, sizeof dirs, "%s", env && *env ? env : "/usr/local/bin:/usr/bin:/bin");
    char *save = NULL;
    for (char *d = strtok_r(dirs, ":", &save); d; d = strtok_r(NULL, ":", &save)) {
        snprintf(path, n, "%s/mpirun", *d ? d : ".");
        if (access(path, X_OK) == 0)
            return path;
    }
    return NULL;
}

const char *mpirun_plugin_path(char *path, size_t n)
{
    const char *p = getenv("MLSYS_MPI_PLUGIN");
    if (p && *p) {
        snprintf(path, n, "%s", p);
        return path;
    }
    char exe[PATH_MAX];
    runner_rank_program(exe, sizeof exe);      /* mlsys-lab-rank, else this program */
    if (!strcmp(exe, "/proc/self/exe")) {      /* mpirun needs a real path */
        ssize_t k = readlink("/proc/self/exe", exe, sizeof exe - 1);
        exe[k < 0 ? 0 : k] = 0;
    }
    char *slash = strrchr(exe, '/');
    if (slash)
        *slash = 0;
    snprintf(path, n, "%s/libmlsys-mpi.so", exe);
    return path;
}

/* Slots the hosts offer: --host "a,b:2" counts 1 + 2; a hostfile counts slots=N per line
 * (1 without); one host counts its cores. */
static int count_slots(const mpirun_opts *o)
{
    int slots = 0;
    if (o->host) {
        char buf[1024];
        snprintf(buf, sizeof buf, "%s", o->host);
        char *save = NULL;
        for (char *h = strtok_r(buf, ",", &save); h; h = strtok_r(NULL, ",", &save)) {
            char *colon = strrchr(h, ':');
            long v;
            slots += colon && mlsys_parse_long(colon + 1, &v) == 0 && v > 0 ? (int)v : 1;
        }
    }
    if (o->hostfile) {
        FILE *f = fopen(o->hostfile, "r");
        char line[1024];
        while (f && fgets(line, sizeof line, f)) {
            char *p = line;
            while (isspace((unsigned char)*p))
                p++;
            if (!*p || *p == '#')
                continue;
            int n = 1;                   /* "host slots=4 max_slots=8": the slots= word */
            char *save = NULL;
            const char *sep = " \t\r\n";
            for (char *w = strtok_r(p, sep, &save); w; w = strtok_r(NULL, sep, &save))
                if (!strncmp(w, "slots=", 6))
                    n = atoi(w + 6);
            slots += n > 0 ? n : 1;
        }
        if (f)
            fclose(f);
    }
    if (!o->host && !o->hostfile) {
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        slots = cores > 0 ? (int)cores : 1;
    }
    return slots;
}

/* Words that a shell would split or expand get single quotes (for the -v line only). */
static void print_quoted(FILE *f, const char *s)
{
    int plain = *s != 0;
    for (const char *p = s; *p; p++)
        if (!isalnum((unsigned char)*p) && !strchr("-_./:=,@+", *p))
            plain = 0;
    if (plain) {
        fputs(s, f);
        return;
    }
    fputc('\'', f);
    for (; *s; s++)
        if (*s == '\'')
            fputs("'\\''", f);
        else
            fputc(*s, f);
    fputc('\'', f);
}

static void set_env_int(const char *k, long v)
{
    char b[32];
    snprintf(b, sizeof b, "%ld", v);
    setenv(k, b, 1);
}

/* In the child, before exec: a session of its own (Ctrl-C reaches only the runner, and the
 * session finds every process of the job later), gone with the runner, the job's env. */
static void child_setup(mpirun_job *j, int out[2], int err[2], pid_t parent)
{
    setsid();
    mlsys_child_tie(parent, SIGTERM);
    dup2(out[1], STDOUT_FILENO);
    dup2(err[1], STDERR_FILENO);
    int devnull = open("/dev/null", O_RDONLY);
    if (devnull >= 0)
        dup2(devnull, STDIN_FILENO);
    setenv("MLSYS_BACKEND", "mpi", 1);
    setenv("OPENBLAS_NUM_THREADS", "1", 1);    /* one BLAS thread per rank (mpirun passes it on) */
    set_env_int("MLSYS_TIMEOUT_MS", j->o.timeout_ms > 0 ? j->o.timeout_ms : 30000);
    if (j->o.algo)
        setenv("MLSYS_ALGO", j->o.algo, 1);
    else
        unsetenv("MLSYS_ALGO");
    if (j->col) {
        setenv("MLSYS_EVENTS_ADDR", collector_addr(j->col), 1);
        setenv("MLSYS_EVENTS_TOKEN", collector_token(j->col), 1);
    } else {
        unsetenv("MLSYS_EVENTS_ADDR");
        unsetenv("MLSYS_EVENTS_TOKEN");
    }
    if (j->o.tagged)
        setenv("MLSYS_PRINT_TAGS", "1", 1);
    else
        unsetenv("MLSYS_PRINT_TAGS");
    unsetenv("MLSYS_JOB_FD");
}

mpirun_job *mpirun_start(const mpirun_opts *o, const char *prog, char *const args[], char *err,
                         size_t n)
{
    char mpirun[PATH_MAX];
    if (!mpirun_find(mpirun, sizeof mpirun)) {
        snprintf(err, n, "mpirun is not on PATH (install openmpi-bin and libopenmpi-dev, or use "
                 "--backend shm)");
        return NULL;
    }
    if (o->world_size < 1) {
        snprintf(err, n, "world size must be at least 1, got %d", o->world_size);
        return NULL;
    }
    mpirun_job *j = mlsys_xcalloc(1, sizeof *j);
    j->o = *o;
    j->noise = mlsys_xcalloc((size_t)o->world_size, 1);
    j->fd[0] = j->fd[1] = -1;
    j->fail_rank = -1;
    if (o->events && !(j->col = collector_open(o->events_addr, o->world_size, err, n))) {
        free(j->noise);
        free(j);
        return NULL;
    }
    if (j->col)
        collector_set_verbose(j->col, o->verbose);

    /* the line */
    const char *argv[MAX_ARGS + 256];
    char np[16];
    int k = 0;
    snprintf(np, sizeof np, "%d", o->world_size);
    argv[k++] = mpirun;
    if (geteuid() == 0)
        argv[k++] = "--allow-run-as-root";
    if (o->world_size > count_slots(o))
        argv[k++] = "--oversubscribe";
    argv[k++] = "-np";
    argv[k++] = np;
    if (o->hostfile) {
        argv[k++] = "--hostfile";
        argv[k++] = o->hostfile;
    }
    if (o->host) {
        argv[k++] = "--host";
        argv[k++] = o->host;
    }
    argv[k++] = "--bind-to";       /* like the shm launcher: ranks float over the cores */
    argv[k++] = "none";
    if (!getenv("OMPI_MCA_pml")) {    /* a cluster's own choice (OMPI_MCA_*) wins */
        argv[k++] = "--mca";
        argv[k++] = "pml";
        argv[k++] = "ob1";
    }
    if (!getenv("OMPI_MCA_btl")) {
        argv[k++] = "--mca";
        argv[k++] = "btl";
        argv[k++] = "self,vader,tcp";
    }
    if (!getenv("OMPI_MCA_opal_signal")) {
        /* Open MPI's own crash handler prints a backtrace, and a signal that lands while a
         * rank is inside malloc (MPI_Init allocates a lot) deadlocks it in that handler: the
         * default action ends the rank, and the launcher says how in one line */
        argv[k++] = "--mca";
        argv[k++] = "opal_signal";
        argv[k++] = "";
    }
    argv[k++] = "--tag-output";
    /* -x NAME forwards the value child_setup puts in mpirun's environment */
    const char *fwd[16];
    int nf = 0;
    fwd[nf++] = "MLSYS_BACKEND";
    fwd[nf++] = "MLSYS_TIMEOUT_MS";
    fwd[nf++] = "OPENBLAS_NUM_THREADS";
    if (o->algo)
        fwd[nf++] = "MLSYS_ALGO";
    if (j->col) {
        fwd[nf++] = "MLSYS_EVENTS_ADDR";
        fwd[nf++] = "MLSYS_EVENTS_TOKEN";
    }
    if (getenv("MLSYS_MPI_PLUGIN"))
        fwd[nf++] = "MLSYS_MPI_PLUGIN";
    if (o->tagged)
        fwd[nf++] = "MLSYS_PRINT_TAGS";
    if (getenv("MLSYS_DEBUG"))
        fwd[nf++] = "MLSYS_DEBUG";
    if (getenv("MLSYS_GEMM"))       /* every host computes with the same kernel */
        fwd[nf++] = "MLSYS_GEMM";
#if defined(__SANITIZE_ADDRESS__)
    /* A sanitizer build: Open MPI's libraries are dlopened and gone by exit, so the leak
     * checker cannot name (or suppress) what they never free; ranks under mpirun skip it. */
    if (!getenv("ASAN_OPTIONS"))
        setenv("ASAN_OPTIONS", "detect_leaks=0", 1);
    fwd[nf++] = "ASAN_OPTIONS";
#endif
    for (int i = 0; i < nf; i++) {
        argv[k++] = "-x";
        argv[k++] = fwd[i];
    }
    argv[k++] = prog;
    for (int i = 0; args && args[i] && k < MAX_ARGS + 255; i++)
        argv[k++] = args[i];
    argv[k] = NULL;
    if (o->verbose) {
        fprintf(stderr, "mlsys-lab: mpirun line:");
        for (int i = 0; i < k; i++) {
            fputc(' ', stderr);
            print_quoted(stderr, argv[i]);
        }
        fputc('\n', stderr);
        if (j->col)
            fprintf(stderr, "mlsys-lab: events: collector on %s (MLSYS_EVENTS_ADDR), token in "
                    "MLSYS_EVENTS_TOKEN\n", collector_addr(j->col));
    }

    int out[2] = {-1, -1}, er[2] = {-1, -1};
    if (pipe2(out, O_CLOEXEC) != 0 || pipe2(er, O_CLOEXEC) != 0) {
        snprintf(err, n, "cannot create pipes: %s", strerror(errno));
        goto fail;
    }
    fflush(stdout);
    fflush(stderr);
    pid_t parent = getpid();
    j->t0 = mlsys_now_ns();
    pid_t pid = fork();
    if (pid < 0) {
        snprintf(err, n, "cannot start mpirun: %s", strerror(errno));
        goto fail;
    }
    if (pid == 0) {
        child_setup(j, out, er, parent);
        execv(mpirun, (char *const *)argv);
        fprintf(stderr, "mlsys-lab: cannot run %s: %s\n", mpirun, strerror(errno));
        _exit(127);
    }
    close(out[1]);
    close(er[1]);
    j->pid = pid;
    j->fd[0] = out[0];
    j->fd[1] = er[0];
    fcntl(out[0], F_SETFL, O_NONBLOCK);
    fcntl(er[0], F_SETFL, O_NONBLOCK);
    return j;
fail:
    for (int i = 0; i < 2; i++) {
        if (out[i] >= 0)
            close(out[i]);
        if (er[i] >= 0)
            close(er[i]);
    }
    collector_close(j->col);
    free(j->noise);
    free(j);
    return NULL;
}

/* ---- output ---- */

/* Open MPI's own report of a signal in a rank ("[host:pid] *** Process received signal ***"
 * to "*** End of error message ***", a backtrace of two dozen lines): noise next to our
 * one line naming the rank and the signal, so it is shown only with --verbose. */
static int crash_noise(mpirun_job *j, int rank, const char *text)
{
    if (j->o.verbose || rank < 0 || rank >= j->o.world_size || text[0] != '[')
        return 0;
    const char *end = strstr(text, "] ");
    if (!end || !strchr(text, ':') || strchr(text, ':') > end)
        return 0;
    const char *msg = end + 2;
    if (!strncmp(msg, "*** Process received signal ***", 31)) {
        j->noise[rank] = 1;
        return 1;
    }
    if (!j->noise[rank])
        return 0;
    if (!strncmp(msg, "*** End of error message ***", 28))
        j->noise[rank] = 0;
    return 1;
}

int mpirun_untag(char *line, int *rank, int *is_err, char **text)
{
    char *p = line;
    if (*p++ != '[')
        return 0;
    while (isdigit((unsigned char)*p))
        p++;
    if (*p++ != ',')
        return 0;
    char *r = p;
    while (isdigit((unsigned char)*p))
        p++;
    if (p == r || *p != ']')
        return 0;
    *rank = atoi(r);
    p++;
    if (!strncmp(p, "<stdout>:", 9))
        *is_err = 0;
    else if (!strncmp(p, "<stderr>:", 9) || !strncmp(p, "<stddiag>:", 10))
        *is_err = 1;
    else
        return 0;
    *text = strchr(p, ':') + 1;
    /* mpirun tags what it reads from a rank in chunks: a chunk that ends inside a line comes
     * out untagged-and-unterminated, and the rest of the line follows with the same tag
     * again ("[1,0]<stdout>:R[1,0]<stdout>:ank 2"). Cut those repeated tags out. */
    size_t tl = (size_t)(*text - line);
    char *q = *text;
    while ((q = strchr(q, '[')) != NULL) {
        if (!strncmp(q, line, tl))
            memmove(q, q + tl, strlen(q + tl) + 1);
        else
            q++;
    }
    return 1;
}

static void deliver(const mlsys_job_sink *sink, int rank, int is_err, const char *s)
{
    if (sink && sink->out_line) {
        sink->out_line(sink->u, rank, is_err, s);
    } else if (rank >= 0 && is_err) {
        fprintf(stderr, "[rank %d] %s\n", rank, s);
    } else {
        FILE *f = is_err ? stderr : stdout;
        fputs(s, f);
        fputc('\n', f);
        if (!is_err)
            fflush(stdout);
    }
}

/* Read what mpirun says about a failure out of one of its framed reports. */
static int parse_report(mpirun_job *j, const char *t)
{
    const char *p;
    int rank = -1, code = 0, pid = 0;
    char sig_name[64] = "", node[128] = "";
    if ((p = strstr(t, "Process name: [["))) {
        const char *q = strstr(p, "],");
        if (q && sscanf(q + 2, "%d", &rank) == 1 && (p = strstr(t, "Exit code:")) &&
            sscanf(p + 10, "%d", &code) == 1) {
            snprintf(j->fail, sizeof j->fail, "rank %d exited with status %d", rank, code);
            j->fail_rank = rank;
            return 1;
        }
    }
    if ((p = strstr(t, "process rank ")) && strstr(t, "exited on signal") &&
        sscanf(p, "process rank %d with PID %d on node %127s exited on signal %d (%63[^)])",
               &rank, &pid, node, &code, sig_name) >= 4) {
        snprintf(j->fail, sizeof j->fail, "rank %d died by signal %d (%s)", rank, code,
                 sig_name[0] ? sig_name : strsignal(code));
        j->fail_rank = rank;
        return 1;
    }
    if ((p = strstr(t, "MPI_ABORT was invoked on rank ")) && sscanf(p + 30, "%d", &rank) == 1) {
        const char *q = strstr(p, "errorcode ");
        if (q)
            code = atoi(q + 10);
        snprintf(j->fail, sizeof j->fail, "rank %d called MPI_Abort (error code %d)", rank, code);
        j->fail_rank = rank;
        return 1;
    }
    if ((p = strstr(t, "process rank ")) && strstr(t, "exiting improperly") &&
        sscanf(p, "process rank %d", &rank) == 1) {
        snprintf(j->fail, sizeof j->fail, "rank %d ended without finishing MPI (it exited 0 "
                 "while others still ran, or was killed)", rank);
        j->fail_rank = rank;
        return 1;
    }
    if (strstr(t, "Primary job") && strstr(t, "non-zero exit code")) {
        j->nonzero = 1;              /* mpirun names the rank only once it has joined MPI */
        return 1;
    }
    return 0;
}

static void box_flush(mpirun_job *j, const mlsys_job_sink *sink, int which, int closed)
{
    boxbuf *b = &j->box[which];
    if (!b->n)
        return;
    size_t len = 0;
    for (int i = 0; i < b->n; i++)
        len += strlen(b->lines[i]) + 1;
    char *all = mlsys_xmalloc(len + 1), *p = all;
    for (int i = 0; i < b->n; i++)
        p += sprintf(p, "%s ", b->lines[i]);
    *p = 0;
    /* squeeze runs of spaces, mpirun wraps its sentences at odd places */
    char *w = all;
    for (char *r = all; *r; r++)
        if (!(*r == ' ' && w > all && w[-1] == ' '))
            *w++ = *r;
    *w = 0;
    int known = 0;
    if (closed) {
        if (j->fail_rank >= 0)
            known = strstr(all, "Process name:") || strstr(all, "exited on signal") ||
                    strstr(all, "MPI_ABORT") || strstr(all, "exiting improperly") ||
                    strstr(all, "Primary job");
        else if ((known = parse_report(j, all)) && j->fail_rank >= 0)
            j->report_at = mlsys_now_ns();
    }
    if (!known || j->o.verbose)
        for (int i = 0; i < b->n; i++)
            deliver(sink, -1, which, b->lines[i]);
    for (int i = 0; i < b->n; i++)
        free(b->lines[i]);
    b->n = 0;
    free(all);
}

static int is_rule(const char *s)
{
    size_t n = strlen(s);
    return n >= 20 && strspn(s, "-") == n;
}

static void handle_line(mpirun_job *j, const mlsys_job_sink *sink, int which, char *line)
{
    int rank, is_err;
    char *text;
    if (mpirun_untag(line, &rank, &is_err, &text)) {
        if (!(is_err && crash_noise(j, rank, text)))
            deliver(sink, rank, is_err, text);
        return;
    }
    boxbuf *b = &j->box[which];
    if (is_rule(line) && b->n) {        /* the closing rule */
        if (b->n == b->cap) {
            b->cap = b->cap ? b->cap * 2 : 16;
            b->lines = realloc(b->lines, (size_t)b->cap * sizeof *b->lines);
        }
        b->lines[b->n++] = mlsys_xstrdup(line);
        box_flush(j, sink, which, 1);
        return;
    }
    if (is_rule(line) || b->n) {
        if (b->n == b->cap) {
            b->cap = b->cap ? b->cap * 2 : 16;
            b->lines = realloc(b->lines, (size_t)b->cap * sizeof *b->lines);
        }
        if (!b->lines)
            abort();
        b->lines[b->n++] = mlsys_xstrdup(line);
        if (b->n > 200)                  /* not a report after all */
            box_flush(j, sink, which, 0);
        return;
    }
    /* mpirun passing on the graceful stop's SIGUSR1: what it means is rank 0's to say */
    if (j->graceful && !strncmp(line, "mpirun: Forwarding signal ", 26) && !j->o.verbose)
        return;
    deliver(sink, -1, which, line);
}

/* Read a pipe dry, handing over complete lines; close it at EOF. */
static void pump(mpirun_job *j, const mlsys_job_sink *sink, int which)
{
    linebuf *lb = &j->lb[which];
    char buf[8192];
    while (j->fd[which] >= 0) {
        ssize_t got = read(j->fd[which], buf, sizeof buf);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0)
            return;
        if (got == 0) {
            if (lb->len) {
                lb->buf[lb->len] = 0;
                handle_line(j, sink, which, lb->buf);
                lb->len = 0;
            }
            close(j->fd[which]);
            j->fd[which] = -1;
            return;
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
                handle_line(j, sink, which, lb->buf);
                lb->len = 0;
            } else {
                lb->buf[lb->len++] = buf[i];
            }
        }
    }
}

/* ---- ending ---- */

/* The processes of mpirun's session other than mpirun (local ranks, daemons, agents): how
 * many are alive, and with do_kill, SIGKILL them. */
static int scan_session(mpirun_job *j, int do_kill)
{
    DIR *d = opendir("/proc");
    int n = 0;
    if (!d)
        return 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!isdigit((unsigned char)e->d_name[0]))
            continue;
        char path[300], buf[1024];
        snprintf(path, sizeof path, "/proc/%s/stat", e->d_name);
        FILE *f = fopen(path, "r");
        if (!f)
            continue;
        size_t got = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[got] = 0;
        char *rp = strrchr(buf, ')');
        char state;
        int ppid, pgrp, sid;
        if (!rp || sscanf(rp + 1, " %c %d %d %d", &state, &ppid, &pgrp, &sid) != 4)
            continue;
        pid_t pid = (pid_t)atoi(e->d_name);
        if (sid != j->pid || state == 'Z' || pid == j->pid)
            continue;
        if (!do_kill || kill(pid, SIGKILL) == 0)
            n++;
    }
    closedir(d);
    return n;
}

/* ---- what Open MPI leaves when mpirun is killed ----
 * mpirun cleans its session directory (<tmp>/ompi.<host>.<uid>/pid.<pid>) and the ranks'
 * shared-memory segments (/dev/shm/vader_segment.<host>.<uid>.<jobid>.<local rank>) only
 * when it ends on its own. The session directory is named by mpirun's pid, which is ours
 * until we collect it; its contact.txt starts with mpirun's job id, whose upper 16 bits (the
 * job family) every job id of this mpirun shares. So only this mpirun's files are removed. */

static void remove_tree(const char *dir, int depth)
{
    DIR *d = depth < 8 ? opendir(dir) : NULL;
    if (d) {
        struct dirent *e;
        while ((e = readdir(d))) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
                continue;
            char p[PATH_MAX];
            if (snprintf(p, sizeof p, "%s/%s", dir, e->d_name) >= (int)sizeof p)
                continue;
            struct stat st;
            if (lstat(p, &st) == 0 && S_ISDIR(st.st_mode))
                remove_tree(p, depth + 1);
            else
                unlink(p);
        }
        closedir(d);
    }
    rmdir(dir);
}

/* Find <base>/ompi.*<uid>/pid.<pid> of this mpirun; 0 with its path. */
static int session_dir(pid_t pid, char *out, size_t n)
{
    const char *t = getenv("TMPDIR");
    const char *bases[] = {t && *t ? t : "/tmp", "/tmp", "/dev/shm"};
    for (int b = 0; b < 3; b++) {
        DIR *d = opendir(bases[b]);
        if (!d)
            continue;
        struct dirent *e;
        int found = 0;
        while (!found && (e = readdir(d))) {
            if (strncmp(e->d_name, "ompi.", 5) != 0)
                continue;
            struct stat st;
            if (snprintf(out, n, "%s/%s/pid.%d", bases[b], e->d_name, (int)pid) < (int)n &&
                stat(out, &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == geteuid())
                found = 1;
        }
        closedir(d);
        if (found)
            return 0;
    }
    return -1;
}

/* Remove what the job's transport left: its vader segments and mpirun's session directory.
 * Returns how many segments were removed. */
static int clean_transport(mpirun_job *j)
{
    char dir[PATH_MAX], path[PATH_MAX + 32];
    if (j->swept || session_dir(j->pid, dir, sizeof dir) != 0)
        return 0;
    j->swept = 1;
    snprintf(path, sizeof path, "%s/contact.txt", dir);
    FILE *f = fopen(path, "r");
    unsigned long long jobid = 0;
    int have = f && fscanf(f, "%llu", &jobid) == 1 && jobid > 0xffff;
    if (f)
        fclose(f);
    int removed = 0;
    DIR *d = have ? opendir("/dev/shm") : NULL;
    struct dirent *e;
    while (d && (e = readdir(d))) {
        /* vader_segment.<host>.<uid>.<jobid hex>.<local rank> */
        if (strncmp(e->d_name, "vader_segment.", 14) != 0)
            continue;
        char name[256];
        snprintf(name, sizeof name, "%s", e->d_name);
        char *last = strrchr(name, '.');
        if (!last || !last[1] || strspn(last + 1, "0123456789") != strlen(last + 1))
            continue;
        *last = 0;
        char *idp = strrchr(name, '.'), *end;
        if (!idp)
            continue;
        unsigned long long id = strtoull(idp + 1, &end, 16);
        if (*end || end == idp + 1 || (id >> 16) != (jobid >> 16))
            continue;
        struct stat st;
        snprintf(path, sizeof path, "/dev/shm/%s", e->d_name);
        if (lstat(path, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == geteuid() &&
            unlink(path) == 0)
            removed++;
    }
    if (d)
        closedir(d);
    remove_tree(dir, 0);
    return removed;
}

/* SIGKILL mpirun (unless it has ended) and everything left in its session. */
static int kill_session(mpirun_job *j)
{
    if (!j->reaped)
        kill(j->pid, SIGKILL);
    return scan_session(j, 1);
}

/* Has mpirun ended? It stays a zombie (WNOWAIT), so no new process can get its pid, the
 * session id that kill_session trusts, until the session is cleaned and it is collected. */
static int mpirun_ended(mpirun_job *j)
{
    siginfo_t si;
    si.si_pid = 0;
    return waitid(P_PID, (id_t)j->pid, &si, WEXITED | WNOHANG | WNOWAIT) == 0 &&
           si.si_pid == j->pid;
}

static void begin_stop(mpirun_job *j)
{
    if (j->stopping || j->reaped)
        return;
    j->stopping = 1;
    j->stop_at = mlsys_now_ns() + STOP_GRACE_NS;
    kill(j->pid, SIGTERM);
}

/* A stop asked for: with o.stop_grace_ms, the first one is SIGUSR1, which mpirun passes to
 * every rank (rank 0 ends the job its own way; the others ignore it); after that, or when the
 * grace runs out, SIGTERM. */
static void request_stop(mpirun_job *j)
{
    if (j->o.stop_grace_ms > 0 && !j->graceful) {
        j->graceful = 1;
        j->grace_until = mlsys_now_ns() + (uint64_t)j->o.stop_grace_ms * 1000000ull;
        kill(j->pid, SIGUSR1);
        return;
    }
    j->interrupted = 1;
    begin_stop(j);
}

void mpirun_stop(mpirun_job *j)
{
    if (!j->reaped && !j->stopping)
        request_stop(j);
}

int mpirun_wait(mpirun_job *j, const mlsys_job_sink *sink, int step_ms, char *why, size_t n)
{
    uint64_t start = mlsys_now_ns();
    struct pollfd pfd[MAX_POLL];
    for (;;) {
        if (!j->stopping && !j->reaped &&
            ((mlsys_job_stop_requested() && (!j->graceful || mlsys_job_stop_count() > 1)) ||
             (j->graceful && mlsys_now_ns() > j->grace_until)))
            request_stop(j);
        int np = 0;
        for (int k = 0; k < 2; k++)
            if (j->fd[k] >= 0)
                pfd[np++] = (struct pollfd){.fd = j->fd[k], .events = POLLIN};
        if (j->col)
            np += collector_pollfds(j->col, pfd + np, MAX_POLL - np);
        poll(pfd, (nfds_t)np, 20);
        pump(j, sink, 0);
        pump(j, sink, 1);
        if (j->col)
            collector_pump(j->col, sink);
        uint64_t now = mlsys_now_ns();
        if (!j->reaped && mpirun_ended(j)) {
            j->reaped = 1;
            j->ended_at = now;
        }
        if (j->stopping && !j->reaped && now > j->stop_at) {
            j->leftovers += kill_session(j);
            j->stop_at = now + STOP_GRACE_NS;
        }
        /* Open MPI 4.1's mpirun can hang in its own teardown (PMIx_server_finalize) after a
         * failure or after the ranks ended: then it is stopped here */
        if (!j->reaped && j->report_at && now - j->report_at > REPORT_GRACE_NS) {
            j->leftovers += kill_session(j);
            j->report_at = 0;
        }
        if (!j->reaped && now >= j->next_scan) {
            j->next_scan = now + 500000000ull;
            if (scan_session(j, 0)) {
                j->saw_ranks = 1;
                j->quiet_since = 0;
            } else if (j->saw_ranks && !j->quiet_since) {
                j->quiet_since = now;
            } else if (j->saw_ranks && now - j->quiet_since > HANG_NS) {
                kill_session(j);
                j->hung = 1;
            }
        }
        if (j->reaped && !j->cleaned &&
            (now - j->ended_at > LEFTOVER_GRACE_NS || !scan_session(j, 0))) {
            j->leftovers += kill_session(j);     /* what did not leave on its own */
            clean_transport(j);             /* only there when mpirun could not clean */
            j->cleaned = 1;
            j->collected = waitpid(j->pid, &j->status, 0) == j->pid;
        }
        if (j->cleaned && ((j->fd[0] < 0 && j->fd[1] < 0) || now - j->ended_at > DRAIN_NS))
            break;
        if (step_ms >= 0 && now - start >= (uint64_t)step_ms * 1000000ull)
            return 1;
    }
    for (int k = 0; k < 2; k++) {
        if (j->fd[k] >= 0) {
            close(j->fd[k]);
            j->fd[k] = -1;
        }
        box_flush(j, sink, k, 0);
    }
    if (j->col)
        collector_finish(j->col, sink, 2000);
    int ok = !j->interrupted && WIFEXITED(j->status) && WEXITSTATUS(j->status) == 0;
    if (why && n) {
        if (ok)
            snprintf(why, n, "all ranks finished");
        else if (j->interrupted)
            snprintf(why, n, "interrupted: the job was stopped");
        else if (j->fail[0])
            snprintf(why, n, "%s", j->fail);
        else if (j->nonzero && WIFEXITED(j->status))
            snprintf(why, n, "a rank exited with status %d before it joined MPI (mpirun does "
                     "not say which; see the lines above)", WEXITSTATUS(j->status));
        else if (j->hung)
            snprintf(why, n, "mpirun did not exit %d s after every process of the job had ended "
                     "(Open MPI hangs in its teardown at times); it was killed, so how the "
                     "ranks ended is unknown", (int)(HANG_NS / 1000000000ull));
        else if (WIFEXITED(j->status))
            snprintf(why, n, "mpirun exited with status %d", WEXITSTATUS(j->status));
        else
            snprintf(why, n, "mpirun died by signal %d (%s)", WTERMSIG(j->status),
                     strsignal(WTERMSIG(j->status)));
        if (j->leftovers && !ok) {
            size_t len = strlen(why);
            snprintf(why + len, n - len, "; %d leftover process%s of the job killed",
                     j->leftovers, j->leftovers == 1 ? "" : "es");
        }
    }
    return ok ? 0 : 2;
}

int mpirun_exit_status(const mpirun_job *j)
{
    if (!j->collected)
        return -1;
    return WIFEXITED(j->status) ? WEXITSTATUS(j->status) : 128 + WTERMSIG(j->status);
}

int mpirun_failed_rank(const mpirun_job *j) { return j->fail_rank; }
uint64_t mpirun_t0_ns(const mpirun_job *j) { return j->t0; }
const char *mpirun_events_addr(const mpirun_job *j)
{
    return j->col ? collector_addr(j->col) : NULL;
}
uint64_t mpirun_events_lost(const mpirun_job *j) { return j->col ? collector_lost(j->col) : 0; }
int mpirun_events_refused(const mpirun_job *j) { return j->col ? collector_refused(j->col) : 0; }

int mpirun_events_incomplete(const mpirun_job *j, char *buf, size_t n)
{
    buf[0] = 0;
    return j->col ? collector_incomplete(j->col, buf, n) : 0;
}

void mpirun_free(mpirun_job *j)
{
    if (!j)
        return;
    if (!j->reaped) {
        kill(j->pid, SIGTERM);
        for (int i = 0; i < 100 && !(j->reaped = mpirun_ended(j)); i++)
            usleep(50000);
    }
    if (!j->collected) {
        kill_session(j);
        clean_transport(j);
        waitpid(j->pid, &j->status, 0);
        j->collected = 1;
    }
    for (int k = 0; k < 2; k++) {
        if (j->fd[k] >= 0)
            close(j->fd[k]);
        free(j->lb[k].buf);
        for (int i = 0; i < j->box[k].n; i++)
            free(j->box[k].lines[i]);
        free(j->box[k].lines);
    }
    collector_close(j->col);
    free(j->noise);
    free(j);
}

/* ---- the runner's entry ---- */

/* --trace: every output line goes into the trace under the rank that printed it (the tag
 * rank 0 puts on lines it prints for others taken off) and is printed as deliver() would. */
static void trace_line(void *u, int rank, int is_err, const char *line)
{
    int owner = rank;
    const char *text = mlsys_print_untag(line, &owner);
    if (rank >= 0)
        mlsys_trace_add_line(u, owner, is_err, text);
    deliver(NULL, rank, is_err, text);
}

int runner_run_mpi(const lab *l, const lab_args *a, int argc, char **argv)
{
    char err[512], exe[PATH_MAX + 64];
    mlsys_launch_opts lo;
    /* (the backend's own checks: mpirun on PATH, the plugin built) */
    if (runner_fill_opts(l, a, &lo, err, sizeof err) != 0) {
        fprintf(stderr, "%s\n", err);
        return 2;
    }
    if (lo.gated) {
        fprintf(stderr, "mlsys-lab: %s: --gated needs the shm backend (under mpi the ranks do "
                "not wait for a viewer)\n", l->id);
        return 2;
    }
    runner_rank_program(exe, sizeof exe);      /* mlsys-lab-rank, else this program */
    if (!strcmp(exe, "/proc/self/exe")) {      /* mpirun needs a real path */
        ssize_t k = readlink("/proc/self/exe", exe, sizeof exe - 1);
        exe[k < 0 ? 0 : k] = 0;
    }

    const char *trace = lab_arg_str(a, "trace");
    char trace_tmp[PATH_MAX + 32] = "";
    if (trace && mlsys_trace_prepare(trace, trace_tmp, sizeof trace_tmp, err, sizeof err) != 0) {
        fprintf(stderr, "mlsys-lab: %s: %s\n", l->id, err);
        return 2;
    }
    mpirun_opts o = {
        .world_size = lo.world_size,
        .timeout_ms = lo.timeout_ms,
        .algo = lo.algo,
        .hostfile = lab_arg_str(a, "hostfile"),
        .host = lab_arg_str(a, "host"),
        .events_addr = lab_arg_str(a, "events-addr"),
        .events = trace != NULL,
        .verbose = lab_arg_bool(a, "verbose"),
        .tagged = trace != NULL,        /* the trace keeps each output line's own rank */
        .stop_grace_ms = lo.stop_grace_ms,
    };
    char **args = mlsys_xcalloc((size_t)argc + 3, sizeof(char *));
    args[0] = "worker";
    args[1] = (char *)l->id;
    for (int i = 0; i < argc; i++)
        args[2 + i] = argv[i];
    mpirun_job *j = mpirun_start(&o, exe, args, err, sizeof err);
    free(args);
    if (!j) {
        fprintf(stderr, "mlsys-lab: %s: %s\n", l->id, err);
        if (trace_tmp[0])
            unlink(trace_tmp);
        return 2;
    }
    mlsys_job_install_signal_stop();
    mlsys_trace tb = {0};
    mlsys_job_sink sink = {trace ? trace_line : NULL, mlsys_trace_collect, &tb};
    char why[300];
    int rc = mpirun_wait(j, o.events ? &sink : NULL, -1, why, sizeof why);
    fflush(stdout);                 /* the ranks' lines, before ours on stderr */
    if (trace && mlsys_job_stop_requested()) {
        unlink(trace_tmp);          /* stopped by the user: an existing trace stays as it was */
    } else if (trace) {
        char missing[256];
        int nmiss = mpirun_events_incomplete(j, missing, sizeof missing);
        if (mlsys_trace_commit(trace, trace_tmp, &tb, mpirun_t0_ns(j)) != 0)
            fprintf(stderr, "mlsys-lab: %s: cannot write the trace to %s\n", l->id, trace);
        else
            fprintf(stderr, "mlsys-lab: trace: %zu events written to %s (%llu lost)\n", tb.n,
                    trace, (unsigned long long)mpirun_events_lost(j));
        if (nmiss)
            fprintf(stderr, "mlsys-lab: trace: the event stream of rank%s %s ended without its "
                    "final record: the last events of %s may be missing\n", nmiss > 1 ? "s" : "",
                    missing, nmiss > 1 ? "those ranks" : "that rank");
    }
    mlsys_trace_free(&tb);
    int status = mpirun_exit_status(j);
    int interrupted = mlsys_job_stop_requested();
    mpirun_free(j);
    if (!rc && interrupted && o.stop_grace_ms > 0) {
        rc = interrupted == SIGINT ? 130 : 0;   /* rank 0 ended the job as asked */
    } else if (rc) {
        fprintf(stderr, "mlsys-lab: %s: %s\n", l->id, why);
        rc = interrupted ? 130 : status > 0 && status < 128 ? status : 1;
    }
    return rc;
}
