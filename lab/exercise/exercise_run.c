/* exercise_run.c - checking the learner's code: the learner's file and the exercise's
 * check.c (rank side, see assets/exercises/harness.h) are compiled with the system compiler
 * against the core library into a program in a temp dir; the launcher starts it on each
 * world size in turn under the exercise's p2p watchdog and a time limit; the records the
 * ranks leave say how it went. Compile errors keep the compiler's file:line; a rank that
 * dies, hangs or deadlocks is reported as such. Also: running a program with its output
 * captured, for experiments that run a lab. */
#include "exercise.h"
#include "../job/runner.h"
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define OUT_MAX (4u << 20)          /* captured output kept, bytes */
#define COMPILE_LIMIT_MS 60000
#define TAIL_LINES 8
#define MAX_CASES 256
#define HARNESS_REPORTED 3          /* harness.h: H_EXIT_REPORTED */

/* ---- running a program with its output captured ---- */

int ex_run_capture(char *const argv[], int timeout_ms, char **out, int *status)
{
    int p[2];
    *out = NULL;
    *status = 127;
    if (pipe2(p, O_CLOEXEC) != 0)
        return -1;
    fflush(stdout);
    fflush(stderr);
    sigset_t all, old;
    sigfillset(&all);
    sigprocmask(SIG_BLOCK, &all, &old);     /* until the child has default handlers */
    pid_t pid = fork();
    if (pid != 0)
        sigprocmask(SIG_SETMASK, &old, NULL);
    if (pid < 0) {
        close(p[0]);
        close(p[1]);
        return -1;
    }
    if (pid == 0) {
        setpgid(0, 0);
        dup2(p[1], STDOUT_FILENO);
        dup2(p[1], STDERR_FILENO);
        int devnull = open("/dev/null", O_RDONLY);
        if (devnull >= 0)
            dup2(devnull, STDIN_FILENO);
        signal(SIGINT, SIG_DFL);
        signal(SIGTERM, SIG_DFL);
        signal(SIGPIPE, SIG_DFL);
        signal(SIGHUP, SIG_DFL);
        sigprocmask(SIG_SETMASK, &old, NULL);
        execvp(argv[0], argv);
        fprintf(stderr, "cannot run %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    setpgid(pid, pid);
    close(p[1]);
    size_t cap = 8192, n = 0;
    char *buf = mlsys_xmalloc(cap);
    uint64_t deadline = mlsys_now_ns() + (uint64_t)timeout_ms * 1000000ull;
    int timed_out = 0, open_ = 1, stopped = 0;
    while (open_) {
        struct pollfd pfd = {.fd = p[0], .events = POLLIN};
        int64_t left = (int64_t)(deadline - mlsys_now_ns()) / 1000000;
        if (mlsys_job_stop_requested()) {      /* Ctrl-C: now, not when it is done */
            stopped = 1;
            kill(-pid, SIGKILL);
            break;
        }
        if (left <= 0) {
            timed_out = 1;
            kill(-pid, SIGKILL);
            break;
        }
        int rc = poll(&pfd, 1, left > 200 ? 200 : (int)left);
        if (rc < 0 && errno != EINTR)
            break;
        if (rc <= 0)
            continue;
        if (n + 4096 > cap && cap < OUT_MAX + 8192) {
            cap *= 2;
            buf = realloc(buf, cap);
            if (!buf)
                abort();
        }
        char sink[4096];
        char *dst = n + 4096 <= cap ? buf + n : sink;   /* past the limit: drain and drop */
        ssize_t got = read(p[0], dst, 4096);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0)
            open_ = 0;
        else if (dst != sink)
            n += (size_t)got;
    }
    close(p[0]);
    int st = 0;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
    kill(-pid, SIGKILL);              /* anything it left in its group */
    buf[n] = 0;
    *out = buf;
    if (stopped)
        *status = 130;
    else if (timed_out)
        *status = 124;
    else if (WIFEXITED(st))
        *status = WEXITSTATUS(st);
    else
        *status = 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
    return 0;
}

/* ---- temp dirs ----
 * mlsys-ex-<pid>-XXXXXX under $TMPDIR: the pid of the check that made it, so that a check
 * killed outright (SIGKILL, a crash) leaves a folder the next check recognises as stale
 * (its owner is gone) and removes. */

static void remove_tree(const char *dir);

static void sweep_stale_tmpdirs(const char *base)
{
    static int swept;
    if (swept++)
        return;
    DIR *d = opendir(base);
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d))) {
        int pid = 0, off = 0;
        if (sscanf(e->d_name, "mlsys-ex-%d-%n", &pid, &off) != 1 || !off || pid <= 0 ||
            strlen(e->d_name + off) != 6)
            continue;
        if (kill((pid_t)pid, 0) == 0 || errno != ESRCH)
            continue;                   /* its check still runs (or is not ours to judge) */
        char p[PATH_MAX];
        struct stat st;
        if (snprintf(p, sizeof p, "%s/%s", base, e->d_name) < (int)sizeof p &&
            lstat(p, &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == geteuid())
            remove_tree(p);
    }
    closedir(d);
}

static int make_tmpdir(char *out, size_t n)
{
    const char *t = getenv("TMPDIR");
    const char *base = t && *t ? t : "/tmp";
    sweep_stale_tmpdirs(base);
    snprintf(out, n, "%s/mlsys-ex-%d-XXXXXX", base, (int)getpid());
    return mkdtemp(out) ? 0 : -1;
}

static void remove_tree(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        char p[PATH_MAX];
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        struct stat st;
        if (lstat(p, &st) == 0 && S_ISDIR(st.st_mode))
            remove_tree(p);
        else
            unlink(p);
    }
    closedir(d);
    rmdir(dir);
}

/* ---- compiling ---- */

/* The first "FILE:LINE:COL: error: MSG" (or fatal error) of the compiler's output, preferring
 * the learner's file; or the linker's undefined/multiple definition. */
static void summarize_compile(const char *out, const char *learner, ex_verdict *v)
{
    const char *best = NULL, *any = NULL, *link = NULL;
    for (const char *p = out; *p;) {
        const char *e = strchr(p, '\n');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        char line[1024];
        snprintf(line, sizeof line, "%.*s", (int)(len < sizeof line - 1 ? len : sizeof line - 1), p);
        if (strstr(line, ": error:") || strstr(line, ": fatal error:")) {
            if (!any)
                any = p;
            if (!best && !strncmp(line, learner, strlen(learner)))
                best = p;
        } else if (!link && (strstr(line, "undefined reference") ||
                             strstr(line, "multiple definition"))) {
            link = p;
        }
        p += len + (e != NULL);
    }
    const char *pick = best ? best : any;
    if (pick) {
        const char *e = strchr(pick, '\n');
        size_t len = e ? (size_t)(e - pick) : strlen(pick);
        char line[1024];
        snprintf(line, sizeof line, "%.*s", (int)(len < sizeof line - 1 ? len : sizeof line - 1),
                 pick);
        /* FILE:LINE:COL: */
        char *c1 = strchr(line, ':');
        if (c1) {
            *c1 = 0;
            snprintf(v->file, sizeof v->file, "%s", line);
            v->line = atoi(c1 + 1);
            char *c2 = strchr(c1 + 1, ':');
            if (c2 && isdigit((unsigned char)c2[1]))
                v->col = atoi(c2 + 1);
            *c1 = ':';
        }
        const char *base = strrchr(line, '/');
        ex_verdict_set(v, EX_FAIL, EXF_COMPILE, "compile error: %s", base ? base + 1 : line);
    } else if (link) {
        const char *e = strchr(link, '\n');
        size_t len = e ? (size_t)(e - link) : strlen(link);
        const char *u = strstr(link, "undefined reference");
        const char *m = strstr(link, "multiple definition");
        const char *what = u && (size_t)(u - link) < len ? u : m;
        ex_verdict_set(v, EX_FAIL, EXF_COMPILE, "link error: %.*s", (int)(len - (size_t)(what - link)),
                       what);
    } else {
        ex_verdict_set(v, EX_FAIL, EXF_COMPILE, "the compiler failed (its output is below)");
    }
}

/* Did the compiler itself break (its driver reports a crashed or killed pass, or no memory)? */
static int compiler_broke(const char *out)
{
    static const char *const signs[] = {"internal compiler error", "terminated program cc1",
                                        "Killed signal terminated", "out of memory allocating",
                                        "virtual memory exhausted", "cannot allocate memory",
                                        "Segmentation fault signal terminated", NULL};
    for (int i = 0; signs[i]; i++)
        if (strcasestr(out, signs[i]))
            return 1;
    return 0;
}

static int compile(const ex_context *cx, const exercise *ex, const char *file, const char *exe,
                   ex_verdict *v)
{
    char inc_core[PATH_MAX + 8], inc_ex[PATH_MAX + 8], inc_id[PATH_MAX + 8], check[PATH_MAX];
    ex_pathf(inc_core, sizeof inc_core, "-I%s/core", cx->src);
    ex_pathf(inc_ex, sizeof inc_ex, "-I%s/assets/exercises", cx->src);
    ex_pathf(inc_id, sizeof inc_id, "-I%s/assets/exercises/%s", cx->src, ex->id);
    ex_asset_path(cx, ex, "check.c", check, sizeof check);
    const char *argv[32];
    int k = 0;
    argv[k++] = cx->cc;
    argv[k++] = "-std=c11";
    argv[k++] = "-O1";
    argv[k++] = "-g";
    argv[k++] = "-Wall";
    argv[k++] = "-D_GNU_SOURCE";
    argv[k++] = "-fdiagnostics-color=never";
#ifdef __SANITIZE_ADDRESS__
    argv[k++] = "-fsanitize=address,undefined";   /* the library was built with them */
#endif
    argv[k++] = inc_core;
    argv[k++] = inc_ex;
    argv[k++] = inc_id;
    argv[k++] = "-o";
    argv[k++] = exe;
    argv[k++] = file;
    argv[k++] = check;
    argv[k++] = cx->lib;
    argv[k++] = "-lm";
    argv[k++] = "-lpthread";
#ifdef HAVE_OPENBLAS
    argv[k++] = "-lopenblas";       /* core/nn's GEMM calls cblas_sgemm */
#endif
    argv[k] = NULL;
    char *out;
    int status;
    if (ex_run_capture((char *const *)argv, COMPILE_LIMIT_MS, &out, &status) != 0) {
        ex_verdict_set(v, EX_ERROR, EXF_SETUP, "cannot start the compiler %s: %s", cx->cc,
                       strerror(errno));
        return -1;
    }
    int rc = 0;
    if (status == 127) {
        ex_verdict_set(v, EX_ERROR, EXF_SETUP, "no C compiler: '%s' cannot run (install "
                       "build-essential, or set MLSYS_LAB_CC)", cx->cc);
        rc = -1;
    } else if (status == 124) {
        ex_verdict_set(v, EX_ERROR, EXF_SETUP, "the compiler took more than %d s", COMPILE_LIMIT_MS / 1000);
        rc = -1;
    } else if (status == 130) {
        ex_verdict_set(v, EX_ERROR, EXF_SETUP, "interrupted");
        rc = -1;
    } else if (status > 128 || compiler_broke(out)) {
        /* the compiler itself failed: not a verdict on the learner's code */
        if (status > 128)
            ex_verdict_set(v, EX_ERROR, EXF_SETUP, "the compiler %s was killed by signal %d "
                           "(%s): this is a problem of the lab or the machine (memory?), not of "
                           "your code", cx->cc, status - 128, strsignal(status - 128));
        else
            ex_verdict_set(v, EX_ERROR, EXF_SETUP, "the compiler %s crashed (an internal "
                           "compiler error, or it ran out of memory): this is a problem of the "
                           "lab or the machine, not of your code", cx->cc);
        ex_verdict_add(v, "%s", out);
        rc = -1;
    } else if (status != 0) {
        summarize_compile(out, file, v);
        ex_verdict_add(v, "%s", out);
        rc = -1;
    } else if (out[0]) {
        ex_verdict_add(v, "compiler warnings:\n%s", out);
    }
    free(out);
    return rc;
}

/* ---- one world size ---- */

typedef struct rank_tail {
    char lines[TAIL_LINES][200];
    int n;          /* lines seen */
} rank_tail;

typedef struct run_state {
    rank_tail *tail;
    int nranks;
} run_state;

static void on_line(void *u, int rank, int is_err, const char *line)
{
    run_state *s = u;
    (void)is_err;
    if (rank < 0 || rank >= s->nranks)
        return;
    rank_tail *t = &s->tail[rank];
    snprintf(t->lines[t->n % TAIL_LINES], sizeof t->lines[0], "%s", line);
    t->n++;
}

typedef struct rank_records {
    int last_case;
    int returned;       /* last case whose learner call came back */
    int done;
    int fail_case;
    char fail[400];
    int err_case;
    char err_kind[16];
    char err[700];
    int ncrash;                 /* return addresses the crash handler left, offsets in the program */
    unsigned long long crash_pc[48];
} rank_records;

static void read_records(const char *dir, int r, rank_records *rr, char (*labels)[200],
                         ex_verdict *info)
{
    memset(rr, 0, sizeof *rr);
    char path[PATH_MAX];
    ex_pathf(path, sizeof path, "%s/rank%d", dir, r);
    char *text = ex_read_file(path, NULL);
    if (!text)
        return;
    for (char *save, *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        int k = 0, off = 0;
        if (sscanf(line, "case %d %n", &k, &off) == 1 && off) {
            rr->last_case = k;
            if (k > 0 && k < MAX_CASES)
                snprintf(labels[k], sizeof labels[0], "%s", line + off);
        } else if (sscanf(line, "returned %d", &k) == 1) {
            rr->returned = k;
        } else if (sscanf(line, "fail %d %n", &k, &off) == 1 && off) {
            if (!rr->fail_case) {
                rr->fail_case = k;
                snprintf(rr->fail, sizeof rr->fail, "%s", line + off);
            }
        } else if (sscanf(line, "error %d %15s %n", &k, rr->err_kind, &off) == 2 && off) {
            if (!rr->err_case) {
                rr->err_case = k;
                snprintf(rr->err, sizeof rr->err, "%s", line + off);
            }
        } else if (!strncmp(line, "info ", 5)) {
            if (info && r == 0)
                ex_verdict_add(info, "  %s", line + 5);
        } else if (!strncmp(line, "crash ", 6)) {
            char *q = line + 6, *end;
            strtol(q, &end, 10);
            for (q = end; rr->ncrash < 48;) {
                unsigned long long pc = strtoull(q, &end, 16);
                if (end == q)
                    break;
                rr->crash_pc[rr->ncrash++] = pc;
                q = end;
            }
        } else if (!strcmp(line, "done")) {
            rr->done = 1;
        }
    }
    free(text);
}

static const char *case_label(char (*labels)[200], int k, char *buf, size_t n, int world)
{
    if (k > 0 && k < MAX_CASES && labels[k][0])
        snprintf(buf, n, "%s", labels[k]);
    else
        snprintf(buf, n, "N=%d", world);
    return buf;
}

static void add_tails(ex_verdict *v, const run_state *s)
{
    for (int r = 0; r < s->nranks; r++) {
        const rank_tail *t = &s->tail[r];
        if (!t->n)
            continue;
        int first = t->n > TAIL_LINES ? t->n - TAIL_LINES : 0;
        ex_verdict_add(v, "output of rank %d%s:", r, first ? " (last lines)" : "");
        for (int i = first; i < t->n; i++)
            ex_verdict_add(v, "  | %s", t->lines[i % TAIL_LINES]);
    }
}

/* Where in the learner's file a crash happened: addr2line on the return addresses the
 * harness left, innermost first; the first frame in the learner's file wins (for a crash
 * inside the runtime, that is the line that called it). 0 when found. */
static int locate_crash(const char *exe, const char *learner, const rank_records *rr,
                        ex_verdict *v, char *out, size_t n)
{
    if (!rr->ncrash)
        return -1;
    char *argv[64], addr[48][24];
    int k = 0;
    argv[k++] = "addr2line";
    argv[k++] = "-f";
    argv[k++] = "-e";
    argv[k++] = (char *)exe;
    for (int i = 0; i < rr->ncrash && k < 62; i++) {
        snprintf(addr[i], sizeof addr[i], "0x%llx", rr->crash_pc[i]);
        argv[k++] = addr[i];
    }
    argv[k] = NULL;
    char *text;
    int st;
    if (ex_run_capture(argv, 10000, &text, &st) != 0 || st != 0) {
        free(text);
        return -1;
    }
    int found = -1;
    char func[256] = "";
    int odd = 0;
    for (char *save, *line = strtok_r(text, "\n", &save); line && found < 0;
         line = strtok_r(NULL, "\n", &save), odd = !odd) {
        if (!odd) {
            snprintf(func, sizeof func, "%s", line);
            continue;
        }
        char *sp = strchr(line, ' ');          /* "(discriminator 2)" */
        if (sp)
            *sp = 0;
        char *colon = strrchr(line, ':');
        if (!colon)
            continue;
        *colon = 0;
        if (strcmp(line, learner) != 0)
            continue;
        int ln = atoi(colon + 1);
        if (ln <= 0)
            continue;
        snprintf(v->file, sizeof v->file, "%s", line);
        v->line = ln;
        const char *base = strrchr(line, '/');
        snprintf(out, n, " at %s:%d in %s", base ? base + 1 : line, ln, func);
        found = 0;
    }
    free(text);
    return found;
}

/* A sanitizer's report in a rank's output (the build with SAN=...): it exits with status 1
 * instead of dying by the signal. */
static int sanitizer_line(const rank_tail *t, char *out, size_t n)
{
    int first = t->n > TAIL_LINES ? t->n - TAIL_LINES : 0;
    for (int i = first; i < t->n; i++) {
        const char *l = t->lines[i % TAIL_LINES];
        const char *m = strstr(l, "AddressSanitizer:");
        if (!m)
            m = strstr(l, "runtime error:");
        if (m) {
            snprintf(out, n, "%s", m);
            return 1;
        }
    }
    return 0;
}

/* Which element the message names ("element 17"), -1. */
static long element_of(const char *msg)
{
    const char *e = strstr(msg, "element ");
    return e ? strtol(e + 8, NULL, 10) : -1;
}

static int rank_of(const char *msg)
{
    const char *e = strstr(msg, "rank ");
    return e ? (int)strtol(e + 5, NULL, 10) : -1;
}

/* Run the program on n ranks. 0 when every rank passed; else v says why. */
static int run_world(const ex_context *cx, const exercise *ex, const char *exe,
                     const char *learner, int n, uint64_t seed, ex_verdict *v, ex_verdict *info)
{
    const ex_implement *im = ex->impl;
    char dir[PATH_MAX];
    if (make_tmpdir(dir, sizeof dir) != 0) {
        ex_verdict_set(v, EX_ERROR, EXF_SETUP, "cannot create a temp dir: %s", strerror(errno));
        return -1;
    }
    int timeout = cx->timeout_override_ms ? cx->timeout_override_ms : im->timeout_ms;
    int limit = im->limit_ms > 0 ? im->limit_ms : 15000;
    if (limit < 2 * timeout + 2000)
        limit = 2 * timeout + 2000;      /* room for the watchdog to speak first */
    if (cx->limit_override_ms)
        limit = cx->limit_override_ms;
    int port = im->master_port ? im->master_port : 29500;
    char sseed[32], sport[16];
    snprintf(sseed, sizeof sseed, "%llu", (unsigned long long)seed);
    snprintf(sport, sizeof sport, "%d", port);
    char *argv[] = {(char *)exe, dir, sseed, sport, NULL};
    mlsys_launch_opts o = {.world_size = n, .timeout_ms = timeout, .master_port = port,
                           .backend = "shm", .capture_output = 1};
    run_state s = {mlsys_xcalloc((size_t)n, sizeof(rank_tail)), n};
    mlsys_job_sink sink = {on_line, NULL, &s};
    char err[256], why[256];
    int result = -1;
    runner_spec spec = {.argv = argv};
    mlsys_job *j = runner_start(&o, &spec, err, sizeof err);
    if (!j) {
        ex_verdict_set(v, EX_ERROR, EXF_SETUP, "cannot start %d ranks: %s", n, err);
        goto out;
    }
    uint64_t deadline = mlsys_now_ns() + (uint64_t)limit * 1000000ull;
    int *hung = mlsys_xcalloc((size_t)n, sizeof(int));
    int stopped = 0, rc;
    while ((rc = mlsys_job_wait(j, &sink, 100, why, sizeof why)) == 1) {
        if (!stopped && mlsys_now_ns() > deadline) {
            for (int r = 0; r < n; r++) {
                const mlsys_rank_status *st = mlsys_job_status(j, r);
                hung[r] = !st->exited && st->code == 0;
            }
            mlsys_job_stop(j);
            stopped = 1;
        }
    }
    int interrupted = mlsys_job_stop_requested();

    char (*labels)[200] = mlsys_xcalloc(MAX_CASES, sizeof *labels);
    rank_records *rr = mlsys_xcalloc((size_t)n, sizeof *rr);
    for (int r = 0; r < n; r++)
        read_records(dir, r, &rr[r], labels, info);
    char lab[200];
    v->world_size = n;

    if (interrupted) {
        ex_verdict_set(v, EX_ERROR, EXF_SETUP, "interrupted");
        goto judged;
    }
    /* 1. a rank that never finished */
    if (stopped) {
        for (int r = 0; r < n; r++)
            if (hung[r]) {
                v->rank = r;
                ex_verdict_set(v, EX_FAIL, EXF_HANG, "%s: rank %d did not finish within %d s: "
                               "an endless loop, or waiting on something that never comes?",
                               case_label(labels, rr[r].last_case, lab, sizeof lab, n), r,
                               limit / 1000);
                goto judged;
            }
    }
    /* 2. a rank that died by a signal, or exited on its own before the end */
    for (int r = 0; r < n; r++) {
        const mlsys_rank_status *st = mlsys_job_status(j, r);
        if (st->killed_by_us || rr[r].done)
            continue;
        if (!st->exited) {
            char where[PATH_MAX + 300] = "";
            v->rank = r;
            locate_crash(exe, learner, &rr[r], v, where, sizeof where);
            ex_verdict_set(v, EX_FAIL, EXF_CRASH, "%s: rank %d crashed: signal %d (%s)%s",
                           case_label(labels, rr[r].last_case, lab, sizeof lab, n), r, st->code,
                           strsignal(st->code), where);
            goto judged;
        }
        char san[200];
        if (st->code != HARNESS_REPORTED && !rr[r].err_case && sanitizer_line(&s.tail[r], san, sizeof san)) {
            v->rank = r;
            ex_verdict_set(v, EX_FAIL, EXF_CRASH, "%s: rank %d crashed: %s",
                           case_label(labels, rr[r].last_case, lab, sizeof lab, n), r, san);
            goto judged;
        }
        if (st->code != HARNESS_REPORTED && !rr[r].err_case) {
            v->rank = r;
            ex_verdict_set(v, EX_FAIL, EXF_CRASH, "%s: rank %d exited with status %d before the "
                           "check finished (exit() or abort() in your code?)",
                           case_label(labels, rr[r].last_case, lab, sizeof lab, n), r, st->code);
            goto judged;
        }
    }
    /* 3. errors and wrong results, earliest case first: runtime errors, deadlocks, wrong
     * values, and last the ranks that were only torn down because of another */
    int first = 0;
    for (int r = 0; r < n; r++) {
        if (rr[r].err_case && (!first || rr[r].err_case < first))
            first = rr[r].err_case;
        if (rr[r].fail_case && (!first || rr[r].fail_case < first))
            first = rr[r].fail_case;
    }
    if (first) {
        for (int r = 0; r < n; r++)
            if (rr[r].err_case == first && !strcmp(rr[r].err_kind, "runtime")) {
                v->rank = r;
                ex_verdict_set(v, EX_FAIL, EXF_RUNTIME, "%s: %s",
                               case_label(labels, first, lab, sizeof lab, n), rr[r].err);
                goto judged;
            }
        /* deadlocks: the report that shows the whole cycle, when a rank saw it */
        int best = -1;
        for (int r = 0; r < n; r++)
            if (rr[r].err_case == first && !strcmp(rr[r].err_kind, "deadlock") &&
                (best < 0 || (strstr(rr[r].err, "cycle") && !strstr(rr[best].err, "cycle"))))
                best = r;
        if (best >= 0) {
            v->rank = best;
            ex_verdict_set(v, EX_FAIL, EXF_DEADLOCK, "%s: %s",
                           case_label(labels, first, lab, sizeof lab, n), rr[best].err);
            goto judged;
        }
        /* the others gave up waiting at the checker's meeting point: who never came back? */
        for (int r = 0; r < n; r++)
            if (rr[r].last_case == first && rr[r].returned < first && !rr[r].err_case) {
                v->rank = r;
                ex_verdict_set(v, EX_FAIL, EXF_HANG, "%s: rank %d did not return from %s while "
                               "the other ranks waited for it (an endless loop, or a wait on "
                               "something that never comes?)",
                               case_label(labels, first, lab, sizeof lab, n), r, im->function);
                goto judged;
            }
        for (int r = 0; r < n; r++)
            if (rr[r].fail_case == first) {
                v->rank = rank_of(rr[r].fail) >= 0 ? rank_of(rr[r].fail) : r;
                v->element = element_of(rr[r].fail);
                ex_verdict_set(v, EX_FAIL, EXF_WRONG, "%s: %s",
                               case_label(labels, first, lab, sizeof lab, n), rr[r].fail);
                goto judged;
            }
        for (int r = 0; r < n; r++)
            if (rr[r].err_case == first) {
                v->rank = r;
                ex_verdict_set(v, EX_FAIL, EXF_RUNTIME, "%s: %s",
                               case_label(labels, first, lab, sizeof lab, n), rr[r].err);
                goto judged;
            }
    }
    for (int r = 0; r < n; r++)
        if (!rr[r].done) {
            v->rank = r;
            ex_verdict_set(v, EX_FAIL, EXF_CRASH, "N=%d: rank %d stopped before the check finished "
                           "(%s)", n, r, rc ? why : "no record");
            goto judged;
        }
    /* 4. processes the ranks started and left running: a leak that would outlive the job
     * (the launcher has killed them); a fail, so that it is seen and fixed */
    int stray_rank = -1, strays = mlsys_job_strays(j, &stray_rank);
    if (strays) {
        v->rank = stray_rank;
        if (stray_rank >= 0)
            ex_verdict_set(v, EX_FAIL, EXF_RUNTIME, "N=%d: rank %d left %d process%s running "
                           "after it finished (a fork() without wait()?); the lab killed %s",
                           n, stray_rank, strays, strays == 1 ? "" : "es",
                           strays == 1 ? "it" : "them");
        else
            ex_verdict_set(v, EX_FAIL, EXF_RUNTIME, "N=%d: the ranks left %d process%s running "
                           "after they finished (a fork() without wait()?); the lab killed %s",
                           n, strays, strays == 1 ? "" : "es", strays == 1 ? "it" : "them");
        goto judged;
    }
    result = 0;
judged:
    if (result != 0 && v->failure != EXF_SETUP)
        add_tails(v, &s);
    free(rr);
    free(labels);
    free(hung);
    mlsys_job_free(j);
out:
    free(s.tail);
    remove_tree(dir);
    return result;
}

/* ---- the check of one exercise ---- */

static int check_implement(const ex_context *cx, const exercise *ex, const char *file,
                           uint64_t seed, ex_verdict *v)
{
    if (!cx->lib[0] || access(cx->lib, R_OK) != 0) {
        ex_verdict_set(v, EX_ERROR, EXF_SETUP, "the core library libmlsys.a is not built next to "
                       "this program (run `make`, or set MLSYS_LAB_LIB)");
        return v->result;
    }
    if (access(file, R_OK) != 0) {
        ex_verdict_set(v, EX_ERROR, EXF_SETUP, "cannot read %s: %s", file, strerror(errno));
        return v->result;
    }
    char dir[PATH_MAX], exe[PATH_MAX + 8];
    if (make_tmpdir(dir, sizeof dir) != 0) {
        ex_verdict_set(v, EX_ERROR, EXF_SETUP, "cannot create a temp dir: %s", strerror(errno));
        return v->result;
    }
    snprintf(exe, sizeof exe, "%s/check", dir);
    ex_verdict info;
    ex_verdict_init(&info);
    if (compile(cx, ex, file, exe, v) == 0) {
        char sizes[128] = "";
        int ok = 1;
        for (int i = 0; ex->impl->world_sizes[i] && ok; i++) {
            ok = run_world(cx, ex, exe, file, ex->impl->world_sizes[i], seed, v, &info) == 0;
            snprintf(sizes + strlen(sizes), sizeof sizes - strlen(sizes), "%s%d", i ? ", " : "",
                     ex->impl->world_sizes[i]);
        }
        if (ok) {
            ex_verdict_set(v, EX_PASS, EXF_NONE, "passed on N = %s", sizes);
            if (info.detail)
                ex_verdict_add(v, "%s", info.detail);
        } else if (v->result != EX_ERROR) {
            ex_verdict_add(v, "inputs drawn from seed %llu (repeat with --seed %llu)",
                           (unsigned long long)seed, (unsigned long long)seed);
        }
    }
    ex_verdict_free(&info);
    remove_tree(dir);
    return v->result;
}

int exercise_check_file(const ex_context *cx, const exercise *ex, const char *file, uint64_t seed,
                        ex_verdict *v)
{
    ex_verdict_init(v);
    v->seed = seed ? seed : ex_random_seed() % 1000000000ull;
    switch (ex->kind) {
    case EX_IMPLEMENT:
        if (!ex->impl) {
            ex_verdict_set(v, EX_ERROR, EXF_SETUP, "%s has no run description", ex->id);
            return v->result;
        }
        return check_implement(cx, ex, file, v->seed, v);
    case EX_EXPERIMENT:
        if (!ex->check) {
            ex_verdict_set(v, EX_ERROR, EXF_SETUP, "%s has no check", ex->id);
            return v->result;
        }
        if (access(file, R_OK) != 0) {
            ex_verdict_set(v, EX_ERROR, EXF_SETUP, "cannot read %s: %s", file, strerror(errno));
            return v->result;
        }
        ex->check(cx, ex, file, v);
        return v->result;
    case EX_PREDICT:
        break;
    }
    ex_verdict_set(v, EX_ERROR, EXF_SETUP, "%s is answered, not checked: use "
                   "exercise_predict_judge", ex->id);
    return v->result;
}

int exercise_check(const ex_context *cx, const exercise *ex, ex_verdict *v)
{
    char err[512], path[PATH_MAX];
    if (ex->kind != EX_PREDICT && ex_workspace_sync(cx, err, sizeof err) < 0) {
        ex_verdict_init(v);
        ex_verdict_set(v, EX_ERROR, EXF_SETUP, "%s", err);
        return v->result;
    }
    ex_work_path(cx, ex, path, sizeof path);
    return exercise_check_file(cx, ex, path, 0, v);
}
