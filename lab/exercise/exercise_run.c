/* exercise_run.c - checking the learner's code: the learner's file and the exercise's
 * check.c (rank side, see assets/exercises/harness.h) are compiled with the system compiler
 * against the core library into a program in a temp dir, which exercise_judge.c runs on
 * each world size in turn. Compile errors keep the compiler's file:line. Also: running a
 * program with its output captured, for experiments that run a lab; the temp dirs. */
#include "exercise.h"
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
            ex_remove_tree(p);
    }
    closedir(d);
}

int ex_make_tmpdir(char *out, size_t n)
{
    const char *t = getenv("TMPDIR");
    const char *base = t && *t ? t : "/tmp";
    sweep_stale_tmpdirs(base);
    snprintf(out, n, "%s/mlsys-ex-%d-XXXXXX", base, (int)getpid());
    return mkdtemp(out) ? 0 : -1;
}

void ex_remove_tree(const char *dir)
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
            ex_remove_tree(p);
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
    if (ex_make_tmpdir(dir, sizeof dir) != 0) {
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
            ok = ex_judge_world(cx, ex, exe, file, ex->impl->world_sizes[i], seed, v,
                                &info) == 0;
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
    ex_remove_tree(dir);
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
