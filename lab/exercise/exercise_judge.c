/* exercise_judge.c - one world size of an implement exercise's check: the compiled program
 * runs on n ranks (world_start, world_wait) and named judging steps read, in order, what
 * went wrong: a rank that hung, one that crashed (at which line of the learner's file), the
 * earliest case's errors and wrong values, a rank that stopped unexplained, processes left
 * running. The first step that finds something gives the verdict. */
#include "exercise.h"
#include "../job/runner.h"
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TAIL_LINES 8
#define MAX_CASES 256
#define HARNESS_REPORTED 3          /* harness.h: H_EXIT_REPORTED */

/* ---- what the ranks printed and recorded ---- */

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

/* ---- one world size, step by step ---- */

/* What one run on n ranks left for the judging steps to read. */
typedef struct world {
    const ex_context *cx;
    const exercise *ex;
    const char *exe, *learner;
    int n, limit;               /* ranks; the time limit, ms */
    char dir[PATH_MAX];         /* where the ranks leave their records */
    mlsys_job *j;
    run_state s;                /* the last lines of each rank */
    rank_records *rr;           /* [n] */
    char (*labels)[200];        /* [MAX_CASES] the check's name of each case */
    int *hung;                  /* [n] 1: still running at the time limit */
    int stopped, interrupted;
    int rc;                     /* the job's */
    char why[256];
} world;

/* The program on n ranks under the exercise's watchdog (timeout) and a time limit, with
 * room for the watchdog to speak first. 0, or -1 with v set (a setup error). */
static int world_start(world *w, uint64_t seed, ex_verdict *v)
{
    const ex_implement *im = w->ex->impl;
    if (ex_make_tmpdir(w->dir, sizeof w->dir) != 0) {
        w->dir[0] = 0;
        ex_verdict_set(v, EX_ERROR, EXF_SETUP, "cannot create a temp dir: %s", strerror(errno));
        return -1;
    }
    int timeout = w->cx->timeout_override_ms ? w->cx->timeout_override_ms : im->timeout_ms;
    w->limit = im->limit_ms > 0 ? im->limit_ms : 15000;
    if (w->limit < 2 * timeout + 2000)
        w->limit = 2 * timeout + 2000;
    if (w->cx->limit_override_ms)
        w->limit = w->cx->limit_override_ms;
    int port = im->master_port ? im->master_port : 29500;
    char sseed[32], sport[16], err[256];
    snprintf(sseed, sizeof sseed, "%llu", (unsigned long long)seed);
    snprintf(sport, sizeof sport, "%d", port);
    char *argv[] = {(char *)w->exe, w->dir, sseed, sport, NULL};
    mlsys_launch_opts o = {.world_size = w->n, .timeout_ms = timeout, .master_port = port,
                           .backend = "shm", .capture_output = 1};
    runner_spec spec = {.argv = argv};
    w->j = runner_start(&o, &spec, err, sizeof err);
    if (!w->j) {
        ex_verdict_set(v, EX_ERROR, EXF_SETUP, "cannot start %d ranks: %s", w->n, err);
        return -1;
    }
    return 0;
}

/* Until every rank ended; at the time limit, note who still ran and stop the job. Then
 * read what each rank recorded. */
static void world_wait(world *w, ex_verdict *info)
{
    mlsys_job_sink sink = {on_line, NULL, &w->s};
    uint64_t deadline = mlsys_now_ns() + (uint64_t)w->limit * 1000000ull;
    while ((w->rc = mlsys_job_wait(w->j, &sink, 100, w->why, sizeof w->why)) == 1) {
        if (!w->stopped && mlsys_now_ns() > deadline) {
            for (int r = 0; r < w->n; r++) {
                const mlsys_rank_status *st = mlsys_job_status(w->j, r);
                w->hung[r] = !st->exited && st->code == 0;
            }
            mlsys_job_stop(w->j);
            w->stopped = 1;
        }
    }
    w->interrupted = mlsys_job_stop_requested();
    for (int r = 0; r < w->n; r++)
        read_records(w->dir, r, &w->rr[r], w->labels, info);
}

static const char *label(const world *w, int k, char *buf, size_t n)
{
    return case_label(w->labels, k, buf, n, w->n);
}

/* 1. a rank that never finished. 1 when it judged. */
static int judge_hang(const world *w, ex_verdict *v)
{
    char lab[200];
    for (int r = 0; w->stopped && r < w->n; r++)
        if (w->hung[r]) {
            v->rank = r;
            ex_verdict_set(v, EX_FAIL, EXF_HANG, "%s: rank %d did not finish within %d s: an "
                           "endless loop, or waiting on something that never comes?",
                           label(w, w->rr[r].last_case, lab, sizeof lab), r, w->limit / 1000);
            return 1;
        }
    return 0;
}

/* 2. a rank that died by a signal (with the line of the learner's file it died in), under a
 * sanitizer, or exited on its own before the end. */
static int judge_crash(const world *w, ex_verdict *v)
{
    char lab[200];
    for (int r = 0; r < w->n; r++) {
        const mlsys_rank_status *st = mlsys_job_status(w->j, r);
        const rank_records *rr = &w->rr[r];
        if (st->killed_by_us || rr->done)
            continue;
        if (!st->exited) {
            char where[PATH_MAX + 300] = "";
            v->rank = r;
            locate_crash(w->exe, w->learner, rr, v, where, sizeof where);
            ex_verdict_set(v, EX_FAIL, EXF_CRASH, "%s: rank %d crashed: signal %d (%s)%s",
                           label(w, rr->last_case, lab, sizeof lab), r, st->code,
                           strsignal(st->code), where);
            return 1;
        }
        if (st->code == HARNESS_REPORTED || rr->err_case)
            continue;
        char san[200];
        v->rank = r;
        if (sanitizer_line(&w->s.tail[r], san, sizeof san))
            ex_verdict_set(v, EX_FAIL, EXF_CRASH, "%s: rank %d crashed: %s",
                           label(w, rr->last_case, lab, sizeof lab), r, san);
        else
            ex_verdict_set(v, EX_FAIL, EXF_CRASH, "%s: rank %d exited with status %d before "
                           "the check finished (exit() or abort() in your code?)",
                           label(w, rr->last_case, lab, sizeof lab), r, st->code);
        return 1;
    }
    return 0;
}

/* 3. errors and wrong results of the earliest case that has any: runtime errors, deadlocks
 * (the report that shows the whole cycle, when a rank saw it), a rank that never came back
 * to the checker's meeting point, wrong values, and last the ranks that were only torn down
 * because of another. */
static int judge_first_case(const world *w, ex_verdict *v)
{
    const rank_records *rr = w->rr;
    char lab[200];
    int first = 0, n = w->n;
    for (int r = 0; r < n; r++) {
        if (rr[r].err_case && (!first || rr[r].err_case < first))
            first = rr[r].err_case;
        if (rr[r].fail_case && (!first || rr[r].fail_case < first))
            first = rr[r].fail_case;
    }
    if (!first)
        return 0;
    label(w, first, lab, sizeof lab);
    for (int r = 0; r < n; r++)
        if (rr[r].err_case == first && !strcmp(rr[r].err_kind, "runtime")) {
            v->rank = r;
            ex_verdict_set(v, EX_FAIL, EXF_RUNTIME, "%s: %s", lab, rr[r].err);
            return 1;
        }
    int best = -1;
    for (int r = 0; r < n; r++)
        if (rr[r].err_case == first && !strcmp(rr[r].err_kind, "deadlock") &&
            (best < 0 || (strstr(rr[r].err, "cycle") && !strstr(rr[best].err, "cycle"))))
            best = r;
    if (best >= 0) {
        v->rank = best;
        ex_verdict_set(v, EX_FAIL, EXF_DEADLOCK, "%s: %s", lab, rr[best].err);
        return 1;
    }
    for (int r = 0; r < n; r++)
        if (rr[r].last_case == first && rr[r].returned < first && !rr[r].err_case) {
            v->rank = r;
            ex_verdict_set(v, EX_FAIL, EXF_HANG, "%s: rank %d did not return from %s while the "
                           "other ranks waited for it (an endless loop, or a wait on something "
                           "that never comes?)", lab, r, w->ex->impl->function);
            return 1;
        }
    for (int r = 0; r < n; r++)
        if (rr[r].fail_case == first) {
            v->rank = rank_of(rr[r].fail) >= 0 ? rank_of(rr[r].fail) : r;
            v->element = element_of(rr[r].fail);
            ex_verdict_set(v, EX_FAIL, EXF_WRONG, "%s: %s", lab, rr[r].fail);
            return 1;
        }
    for (int r = 0; r < n; r++)
        if (rr[r].err_case == first) {
            v->rank = r;
            ex_verdict_set(v, EX_FAIL, EXF_RUNTIME, "%s: %s", lab, rr[r].err);
            return 1;
        }
    return 0;
}

/* A rank without its "done" record that none of the steps above explained. */
static int judge_unfinished(const world *w, ex_verdict *v)
{
    for (int r = 0; r < w->n; r++)
        if (!w->rr[r].done) {
            v->rank = r;
            ex_verdict_set(v, EX_FAIL, EXF_CRASH, "N=%d: rank %d stopped before the check "
                           "finished (%s)", w->n, r, w->rc ? w->why : "no record");
            return 1;
        }
    return 0;
}

/* 4. processes the ranks started and left running: a leak that would outlive the job (the
 * launcher has killed them); a fail, so that it is seen and fixed. */
static int judge_strays(const world *w, ex_verdict *v)
{
    int stray_rank = -1, strays = mlsys_job_strays(w->j, &stray_rank), n = w->n;
    if (!strays)
        return 0;
    v->rank = stray_rank;
    if (stray_rank >= 0)
        ex_verdict_set(v, EX_FAIL, EXF_RUNTIME, "N=%d: rank %d left %d process%s running after "
                       "it finished (a fork() without wait()?); the lab killed %s", n,
                       stray_rank, strays, strays == 1 ? "" : "es", strays == 1 ? "it" : "them");
    else
        ex_verdict_set(v, EX_FAIL, EXF_RUNTIME, "N=%d: the ranks left %d process%s running "
                       "after they finished (a fork() without wait()?); the lab killed %s", n,
                       strays, strays == 1 ? "" : "es", strays == 1 ? "it" : "them");
    return 1;
}

int ex_judge_world(const ex_context *cx, const exercise *ex, const char *exe,
                   const char *learner, int n, uint64_t seed, ex_verdict *v, ex_verdict *info)
{
    world w;
    memset(&w, 0, sizeof w);
    w.cx = cx;
    w.ex = ex;
    w.exe = exe;
    w.learner = learner;
    w.n = n;
    w.s.tail = mlsys_xcalloc((size_t)n, sizeof(rank_tail));
    w.s.nranks = n;
    w.rr = mlsys_xcalloc((size_t)n, sizeof *w.rr);
    w.labels = mlsys_xcalloc(MAX_CASES, sizeof *w.labels);
    w.hung = mlsys_xcalloc((size_t)n, sizeof(int));
    int result = -1;
    if (world_start(&w, seed, v) == 0) {
        world_wait(&w, info);
        v->world_size = n;
        if (w.interrupted)
            ex_verdict_set(v, EX_ERROR, EXF_SETUP, "interrupted");
        else if (!judge_hang(&w, v) && !judge_crash(&w, v) && !judge_first_case(&w, v) &&
                 !judge_unfinished(&w, v) && !judge_strays(&w, v))
            result = 0;
        if (result != 0 && v->failure != EXF_SETUP)
            add_tails(v, &w.s);
        mlsys_job_free(w.j);
    }
    free(w.s.tail);
    free(w.rr);
    free(w.labels);
    free(w.hung);
    if (w.dir[0])
        ex_remove_tree(w.dir);
    return result;
}
