/* exercise_cli.c - the exercise commands of `mlsys-lab`: exercises (the list with status),
 * check [ID|--all], hint ID (one guiding question at a time), watch (re-check on save, with
 * inotify or by polling), reset ID|--all, solution ID (once passed, or --force) and
 * dev-check (the curriculum is consistent: unique ids, every file present, every starter
 * fails its check and every solution passes). Verdicts come from exercise_run.c. */
#include "exercise.h"
#include <errno.h>
#include <math.h>
#include <poll.h>
#include <stdarg.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define WATCH_POLL_MS 500
#define WATCH_SETTLE_MS 150

static int context(ex_context *cx)
{
    char err[512];
    if (ex_context_init(cx, err, sizeof err) != 0) {
        fprintf(stderr, "mlsys-lab: %s\n", err);
        return -1;
    }
    return 0;
}

static int sync_workspace(const ex_context *cx)
{
    char err[512];
    if (ex_workspace_sync(cx, err, sizeof err) < 0) {
        fprintf(stderr, "mlsys-lab: %s\n", err);
        return -1;
    }
    return 0;
}

/* Load progress; a corrupt file has been backed up: say so. -1 when unreadable. */
static int load_progress(const ex_context *cx, ex_progress *p)
{
    char msg[1024];
    int rc = ex_progress_load(p, cx->progress, msg, sizeof msg);
    if (rc != 0)
        fprintf(stderr, "mlsys-lab: %s\n", msg);
    return rc < 0 ? -1 : 0;
}

static int save_progress(const ex_progress *p)
{
    char msg[1024];
    if (ex_progress_save(p, msg, sizeof msg) != 0) {
        fprintf(stderr, "mlsys-lab: %s\n", msg);
        return -1;
    }
    return 0;
}

static const exercise *find_or_complain(const char *id)
{
    const exercise *ex = ex_find(id);
    if (!ex)
        fprintf(stderr, "mlsys-lab: unknown exercise '%s' (see `mlsys-lab exercises`)\n",
                id ? id : "");
    return ex;
}

static const char *chapter_title(int number)
{
    for (int i = 0; lab_chapters[i]; i++)
        if (lab_chapters[i]->number == number)
            return lab_chapters[i]->title;
    return "";
}

static int is_done(ex_progress *p, const exercise *ex)
{
    ex_progress_entry *e = ex_progress_get(p, ex->id, 0);
    return e && e->done;
}

/* The first exercise not done yet (in curriculum order), optionally of a checkable kind. */
static const exercise *next_pending(ex_progress *p, int checkable_only)
{
    for (int i = 0; i < ex_count(); i++) {
        const exercise *ex = ex_at(i);
        if (checkable_only && ex->kind == EX_PREDICT)
            continue;
        if (!is_done(p, ex))
            return ex;
    }
    return NULL;
}

/* ---- printing a verdict ---- */

static void print_wrapped(FILE *out, const char *text, const char *indent, int width);

static void print_indented(FILE *out, const char *text, const char *indent)
{
    for (const char *p = text; p && *p;) {
        const char *e = strchr(p, '\n');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        fprintf(out, "%s%.*s\n", indent, (int)len, p);
        p += len + (e != NULL);
    }
}

static void print_verdict(FILE *out, const ex_context *cx, const exercise *ex, const ex_verdict *v)
{
    const char *word = v->result == EX_PASS ? "PASS" : v->result == EX_FAIL ? "FAIL" : "ERROR";
    fprintf(out, "%-5s %s: %s\n", word, ex->id, v->summary);
    if (v->result == EX_FAIL && v->failure != EXF_ANSWER && v->failure != EXF_COMPILE)
        fprintf(out, "      (%s)\n", ex_failure_name(v->failure));
    if (v->failure == EXF_COMPILE && v->file[0] && v->line && v->col)
        fprintf(out, "      at %s:%d:%d\n", v->file, v->line, v->col);
    else if (v->failure == EXF_COMPILE && v->file[0] && v->line)
        fprintf(out, "      at %s:%d\n", v->file, v->line);
    if (v->detail && (ex->kind == EX_IMPLEMENT || v->failure == EXF_SETUP))
        print_indented(out, v->detail, "      ");     /* compiler output: as it is */
    else if (v->detail)
        print_wrapped(out, v->detail, "      ", 96);
    if (v->result == EX_FAIL && ex->kind != EX_PREDICT) {
        char path[PATH_MAX];
        ex_work_path(cx, ex, path, sizeof path);
        fprintf(out, "      your file: %s\n      stuck? mlsys-lab hint %s\n", path, ex->id);
    }
}

/* ---- exercises ---- */

int exercises_main(int argc, char **argv)
{
    lab_args a;
    int rc = lab_command_args(&exercises_command, argc, argv, &a);
    if (rc >= 0)
        return rc;
    int chapter = lab_arg_given(&a, "chapter") ? (int)lab_arg_int(&a, "chapter") : 0;
    int known = !chapter;
    lab_args_free(&a);
    for (int k = 0; lab_chapters[k]; k++)
        known |= lab_chapters[k]->number == chapter;
    if (!known) {
        fprintf(stderr, "mlsys-lab exercises: --chapter must be the number of a chapter "
                "(see `mlsys-lab list`), got %d\n", chapter);
        return 2;
    }
    ex_context cx;
    ex_progress p;
    if (context(&cx) || sync_workspace(&cx) || load_progress(&cx, &p))
        return 2;
    int done = 0, total = 0, last = -1;
    for (int i = 0; i < ex_count(); i++) {
        total++;
        done += is_done(&p, ex_at(i));
    }
    printf("MLSys Lab exercises: %d of %d done\nworkspace: %s\nprogress:  %s\n", done, total,
           cx.workspace, cx.progress);
    for (int i = 0; i < ex_count(); i++) {
        const exercise *ex = ex_at(i);
        if (chapter && ex->chapter != chapter)
            continue;
        if (ex->chapter != last) {
            printf("\nChapter %d  %s\n", ex->chapter, chapter_title(ex->chapter));
            last = ex->chapter;
        }
        ex_progress_entry *e = ex_progress_get(&p, ex->id, 0);
        printf("  %-7s %-30s %-10s %s\n", e && e->done ? "[done]" : "[ ]", ex->id,
               ex_kind_name(ex->kind), ex->title);
    }
    const exercise *nx = next_pending(&p, 0);
    if (nx)
        printf("\nnext: %s (%s): mlsys-lab check %s\n", nx->id, ex_kind_name(nx->kind), nx->id);
    else
        printf("\nevery exercise is done\n");
    ex_progress_free(&p);
    return 0;
}

/* ---- check ---- */

/* Text wrapped at width columns, each line starting with indent. */
static void print_wrapped(FILE *out, const char *text, const char *indent, int width)
{
    const char *p = text;
    while (*p) {
        const char *nl = strchr(p, '\n');
        size_t para = nl ? (size_t)(nl - p) : strlen(p);
        const char *end = p + para;
        if (para > 2 && p[0] == '$' && p[1] == ' ') {     /* a command: never cut */
            fprintf(out, "%s%.*s\n", indent, (int)para, p);
            p = end;
        }
        while (p < end) {
            size_t room = (size_t)width - strlen(indent);
            size_t len = (size_t)(end - p);
            if (len > room) {
                len = room;
                while (len > 0 && p[len] != ' ')
                    len--;
                if (len == 0)               /* one long word: keep it whole */
                    while (p + len < end && p[len] != ' ')
                        len++;
            }
            fprintf(out, "%s%.*s\n", indent, (int)len, p);
            p += len;
            while (p < end && *p == ' ')
                p++;
        }
        if (!nl)
            break;
        if (para == 0)
            fprintf(out, "\n");
        p = nl + 1;
    }
}

static void strip_newline(char *s)
{
    size_t n = strlen(s);
    while (n && (s[n - 1] == '\n' || s[n - 1] == '\r'))
        s[--n] = 0;
}

/* The question of seed, with its number, so that it can be answered later with --seed. */
static void show_question(const exercise *ex, uint64_t seed, ex_question *q)
{
    exercise_predict_draw(ex, seed, q);
    printf("%s  %s  [predict, question %llu]\n", ex->id, ex->title, (unsigned long long)seed);
    print_wrapped(stdout, q->text, "  ", 90);
    for (int i = 0; i < q->nchoices; i++)
        printf("    %c) %s\n", 'a' + i, q->choices[i]);
}

/* Ask one drawn question; answer NULL reads a line from stdin. */
static void ask(const exercise *ex, uint64_t seed, const char *answer, ex_verdict *v)
{
    ex_question q;
    show_question(ex, seed, &q);
    char buf[256] = "";
    if (!answer) {
        printf("answer (%s)> ", q.nchoices ? "a letter" : q.unit[0] ? q.unit : "a number");
        fflush(stdout);
        if (!fgets(buf, sizeof buf, stdin))
            buf[0] = 0;
        strip_newline(buf);
        if (!isatty(STDIN_FILENO))
            printf("%s\n", buf);
        answer = buf;
    }
    ex_question_judge(&q, answer, v);
    v->seed = seed;
    if (v->result != EX_PASS) {
        if (q.nchoices)
            ex_verdict_add(v, "the answer: %c) %s", 'a' + (int)q.answer, q.choices[(int)q.answer]);
        else
            ex_verdict_add(v, "the answer: %.10g%s%s", q.answer, q.unit[0] ? " " : "", q.unit);
    }
    ex_verdict_add(v, "%s", q.explain);
    if (v->result != EX_PASS)
        ex_verdict_add(v, "next time the numbers are different: mlsys-lab check %s", ex->id);
}

static void record(const ex_context *cx, const exercise *ex, const ex_verdict *v)
{
    if (v->result == EX_ERROR)       /* could not check: neither a pass nor a fail */
        return;
    char msg[1024] = "";
    if (exercise_record(cx, ex, v->result == EX_PASS, msg, sizeof msg) != 0 || msg[0])
        fprintf(stderr, "mlsys-lab: %s\n", msg);
}

/* A new question's number (its seed): short enough to type back with --seed. */
static uint64_t question_number(void)
{
    return ex_random_seed() % 999999 + 1;
}

/* Check (or ask) one exercise and print the verdict; the exit status of `check`. */
static int check_one(const ex_context *cx, const exercise *ex, uint64_t seed, const char *answer)
{
    ex_verdict v;
    ex_verdict_init(&v);
    if (ex->kind == EX_PREDICT && answer && !seed) {
        /* each check draws new numbers: an answer given with no --seed was given before the
         * question existed. Show it and say how to answer it. */
        ex_question q;
        uint64_t s = question_number();
        show_question(ex, s, &q);
        fflush(stdout);
        fprintf(stderr, "mlsys-lab: check: %s draws its numbers when it is asked, so --answer "
                "alone answers a question you have not seen; this one is question %llu: "
                "mlsys-lab check %s --seed %llu --answer VALUE\n", ex->id,
                (unsigned long long)s, ex->id, (unsigned long long)s);
        ex_verdict_free(&v);
        return 2;
    }
    if (ex->kind == EX_PREDICT) {
        ask(ex, seed ? seed : question_number(), answer, &v);
    } else {
        char path[PATH_MAX];
        ex_work_path(cx, ex, path, sizeof path);
        printf("checking %s (%s): %s\n", ex->id, ex_kind_name(ex->kind), path);
        fflush(stdout);
        exercise_check_file(cx, ex, path, seed, &v);
    }
    print_verdict(stdout, cx, ex, &v);
    record(cx, ex, &v);
    int rc = v.result == EX_PASS ? 0 : v.result == EX_FAIL ? 1 : 2;
    ex_verdict_free(&v);
    fflush(stdout);
    return rc;
}

static int check_all(const ex_context *cx)
{
    int pass = 0, fail = 0, err = 0, asked = 0;
    for (int i = 0; i < ex_count(); i++) {
        const exercise *ex = ex_at(i);
        if (ex->kind == EX_PREDICT) {
            asked++;
            continue;
        }
        int rc = check_one(cx, ex, 0, NULL);
        pass += rc == 0;
        fail += rc == 1;
        err += rc == 2;
        if (mlsys_job_stop_requested())
            break;
    }
    printf("\n%d passed, %d failed%s%s; %d predict questions are asked one at a time "
           "(mlsys-lab check ID)\n", pass, fail, err ? ", " : "", err ? "some could not be checked" : "",
           asked);
    return fail || err ? 1 : 0;
}

int ex_check_main(int argc, char **argv)
{
    lab_args a;
    int rc = lab_command_args(&check_command, argc, argv, &a);
    if (rc >= 0)
        return rc;
    /* id and answer point into argv, which outlives a */
    const char *id = a.npos ? a.pos[0] : NULL, *answer = lab_arg_text(&a, "answer");
    uint64_t seed = (uint64_t)lab_arg_int(&a, "seed");
    int all = lab_arg_bool(&a, "all");
    lab_args_free(&a);
    if (all && (id || answer)) {
        fprintf(stderr, "mlsys-lab: check: --all checks every exercise: it takes no ID%s\n",
                answer ? " and no --answer" : "");
        return 2;
    }
    ex_context cx;
    if (context(&cx) || sync_workspace(&cx))
        return 2;
    mlsys_job_install_signal_stop();
    if (all) {
        rc = check_all(&cx);
        return mlsys_job_stop_requested() ? 130 : rc;
    }
    const exercise *ex;
    if (id) {
        if (!(ex = find_or_complain(id)))
            return 2;
    } else {
        ex_progress p;
        if (load_progress(&cx, &p))
            return 2;
        ex = next_pending(&p, 0);
        ex_progress_free(&p);
        if (!ex) {
            printf("every exercise is done; check one again with mlsys-lab check ID\n");
            return 0;
        }
    }
    rc = check_one(&cx, ex, seed, answer);
    return mlsys_job_stop_requested() ? 130 : rc;   /* Ctrl-C: 130, as every command */
}

/* ---- hint ---- */

/* Where an implement exercise's contract is, and (whole) its text: what the function gets,
 * returns and may call, which the starter's "see api.h" points to. */
static void print_contract(const ex_context *cx, const exercise *ex, int whole)
{
    char path[PATH_MAX];
    ex_contract_path(cx, ex, path, sizeof path);
    if (!path[0])
        return;
    char *text = whole ? ex_contract_text(cx, ex) : NULL;
    if (text) {
        printf("the contract your function keeps (api.h, beside your file: %s):\n", path);
        for (char *l = text; *l;) {        /* each line wrapped under its own hang */
            char *e = strchr(l, '\n'), *next = e ? e + 1 : l + strlen(l);
            if (e)
                *e = 0;
            int hang = ex_contract_hang(l), col = 0;
            size_t len = strlen(l);
            if (!len)
                printf("\n");
            while (len) {
                int room = 88 - col;
                size_t take = len;
                if ((int)take > room) {
                    take = (size_t)room;
                    while (take > 0 && l[take] != ' ')
                        take--;
                    if (take == 0)
                        take = (size_t)room;
                }
                printf("    %*s%.*s\n", col, "", (int)take, l);
                l += take;
                len -= take;
                while (len && *l == ' ') {
                    l++;
                    len--;
                }
                col = hang;
            }
            l = next;
        }
    } else {
        printf("the contract your function keeps: %s\n", path);
    }
    free(text);
}

int ex_hint_main(int argc, char **argv)
{
    lab_args a;
    int rc = lab_command_args(&hint_command, argc, argv, &a);
    if (rc >= 0)
        return rc;
    const exercise *ex = find_or_complain(a.pos[0]);
    lab_args_free(&a);
    rc = 0;
    ex_context cx;
    ex_progress p;
    if (!ex || context(&cx) || sync_workspace(&cx) || load_progress(&cx, &p))
        return 2;
    int nh = 0;
    while (ex->hints && ex->hints[nh])
        nh++;
    ex_progress_entry *e = ex_progress_get(&p, ex->id, 1);
    int first = e->hints == 0 || e->hints >= nh;
    if (nh == 0) {
        printf("%s has no hints\n", ex->id);
    } else if (e->hints < nh) {
        printf("hint %d of %d for %s:\n", e->hints + 1, nh, ex->id);
        print_wrapped(stdout, ex->hints[e->hints], "  ", 90);
        print_contract(&cx, ex, first);
        e->hints++;
        if (e->hints < nh)
            printf("(another: mlsys-lab hint %s)\n", ex->id);
        else
            printf("(that was the last hint; the solution: mlsys-lab solution %s --force)\n", ex->id);
        rc = save_progress(&p) ? 2 : 0;
    } else {
        printf("all %d hints for %s:\n", nh, ex->id);
        for (int i = 0; i < nh; i++) {
            char ind[16];
            snprintf(ind, sizeof ind, "  %d. ", i + 1);
            printf("%s", ind);
            print_wrapped(stdout, ex->hints[i], "", 86);
        }
        print_contract(&cx, ex, first);
        printf("(the solution: mlsys-lab solution %s --force)\n", ex->id);
    }
    ex_progress_free(&p);
    return rc;
}

/* ---- reset ---- */

static int reset_one(const ex_context *cx, ex_progress *p, const exercise *ex)
{
    char err[512], path[PATH_MAX];
    if (ex_workspace_reset(cx, ex, err, sizeof err) != 0) {
        fprintf(stderr, "mlsys-lab: reset %s: %s\n", ex->id, err);
        return -1;
    }
    ex_progress_entry *e = ex_progress_get(p, ex->id, 0);
    if (e) {
        e->done = 0;
        e->hints = 0;
        e->passed_at = 0;
    }
    ex_work_path(cx, ex, path, sizeof path);
    if (path[0])
        printf("reset %s: %s is the starter again (the previous version: %s.bak)\n", ex->id,
               path, path);
    else
        printf("reset %s: marked not done\n", ex->id);
    return 0;
}

int ex_reset_main(int argc, char **argv)
{
    lab_args a;
    int rc = lab_command_args(&reset_command, argc, argv, &a);
    if (rc >= 0)
        return rc;
    int all = lab_arg_bool(&a, "all");
    const char *id = a.npos ? a.pos[0] : NULL;
    lab_args_free(&a);
    if (all == !!id) {
        fprintf(stderr, "mlsys-lab reset: %s\n", all ? "--all resets every exercise: it "
                "takes no ID" : "which exercise? (an ID, or --all)");
        return 2;
    }
    const exercise *ex = all ? NULL : find_or_complain(id);
    ex_context cx;
    ex_progress p;
    if ((!all && !ex) || context(&cx) || load_progress(&cx, &p))
        return 2;
    int bad = 0;
    for (int i = 0; i < ex_count(); i++)
        if (all || ex_at(i) == ex)
            bad |= reset_one(&cx, &p, ex_at(i)) != 0;
    bad |= save_progress(&p) != 0;
    ex_progress_free(&p);
    return bad ? 1 : 0;
}

/* ---- solution ---- */

int ex_solution_main(int argc, char **argv)
{
    lab_args a;
    int rc = lab_command_args(&solution_command, argc, argv, &a);
    if (rc >= 0)
        return rc;
    const char *id = a.pos[0];
    int force = lab_arg_bool(&a, "force");
    lab_args_free(&a);
    const exercise *ex = find_or_complain(id);
    ex_context cx;
    ex_progress p;
    if (!ex || context(&cx) || load_progress(&cx, &p))
        return 2;
    int done = is_done(&p, ex);
    ex_progress_free(&p);
    if (!done && !force) {
        printf("%s is not done yet: the solution opens once it passes (mlsys-lab check %s), "
               "or with --force\n", ex->id, ex->id);
        return 1;
    }
    if (ex->kind == EX_PREDICT) {
        ex_question q;
        exercise_predict_draw(ex, ex_random_seed(), &q);
        printf("%s: how to work it out, on freshly drawn numbers:\n", ex->id);
        print_wrapped(stdout, q.text, "  ", 90);
        for (int i = 0; i < q.nchoices; i++)
            printf("    %c) %s\n", 'a' + i, q.choices[i]);
        if (q.nchoices)
            printf("answer: %c) %s\n", 'a' + (int)q.answer, q.choices[(int)q.answer]);
        else
            printf("answer: %.10g%s%s\n", q.answer, q.unit[0] ? " " : "", q.unit);
        print_wrapped(stdout, q.explain, "  ", 90);
        return 0;
    }
    char path[PATH_MAX];
    ex_asset_path(&cx, ex, ex->solution, path, sizeof path);
    char *text = ex_read_file(path, NULL);
    if (!text) {
        fprintf(stderr, "mlsys-lab: cannot read %s: %s\n", path, strerror(errno));
        return 2;
    }
    printf("reference solution of %s (%s):\n\n%s", ex->id, path, text);
    if (ex->kind == EX_EXPERIMENT)
        printf("\n(the measured numbers above are from one run; yours will differ, and the "
               "check accepts yours)\n");
    free(text);
    return 0;
}

/* ---- watch ---- */

typedef struct watched {
    const exercise *ex;
    char path[PATH_MAX];
    int wd;
    struct stat st;
    int have_st;
    int dirty;
} watched;

static int stat_changed(watched *w)
{
    struct stat st;
    int have = stat(w->path, &st) == 0;
    int changed = have != w->have_st ||
                  (have && (st.st_mtim.tv_sec != w->st.st_mtim.tv_sec ||
                            st.st_mtim.tv_nsec != w->st.st_mtim.tv_nsec ||
                            st.st_size != w->st.st_size || st.st_ino != w->st.st_ino));
    w->have_st = have;
    if (have)
        w->st = st;
    return changed;
}

/* Read what inotify has; mark the exercises whose file was written or replaced. */
static void read_events(int fd, watched *w, int nw)
{
    char buf[8192] __attribute__((aligned(__alignof__(struct inotify_event))));
    for (;;) {
        ssize_t got = read(fd, buf, sizeof buf);
        if (got <= 0)
            return;
        for (char *p = buf; p < buf + got;) {
            struct inotify_event *e = (struct inotify_event *)p;
            for (int i = 0; i < nw; i++)
                if (w[i].wd == e->wd && e->len && !strcmp(e->name, w[i].ex->workfile))
                    w[i].dirty = 1;
            p += sizeof *e + e->len;
        }
    }
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);      /* a signal cuts it short: the loop looks at the stop flag */
}

int ex_watch_main(int argc, char **argv)
{
    lab_args a;
    int rc = lab_command_args(&watch_command, argc, argv, &a);
    if (rc >= 0)
        return rc;
    const char *id = a.npos ? a.pos[0] : NULL;
    int poll_mode = lab_arg_bool(&a, "poll");
    long max_checks = lab_arg_int(&a, "max-checks");
    lab_args_free(&a);
    const char *env = getenv("MLSYS_WATCH_POLL");
    if (env && *env && strcmp(env, "0"))
        poll_mode = 1;
    const exercise *only = id ? find_or_complain(id) : NULL;
    if (id && !only)
        return 2;
    if (only && only->kind == EX_PREDICT) {
        fprintf(stderr, "mlsys-lab: %s is a predict question: answer it with mlsys-lab check %s\n",
                only->id, only->id);
        return 2;
    }
    ex_context cx;
    ex_progress p;
    if (context(&cx) || sync_workspace(&cx) || load_progress(&cx, &p))
        return 2;
    const exercise *current = only ? only : next_pending(&p, 1);
    ex_progress_free(&p);

    watched *w = mlsys_xcalloc((size_t)ex_count(), sizeof *w);
    int nw = 0;
    for (int i = 0; i < ex_count(); i++) {
        const exercise *ex = ex_at(i);
        if (ex->kind == EX_PREDICT || !ex->workfile || (only && ex != only))
            continue;
        w[nw].ex = ex;
        w[nw].wd = -1;
        ex_work_path(&cx, ex, w[nw].path, sizeof w[nw].path);
        stat_changed(&w[nw]);
        nw++;
    }
    int ifd = -1;
    if (!poll_mode) {
        ifd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
        for (int i = 0; ifd >= 0 && i < nw; i++) {
            char dir[PATH_MAX];
            ex_pathf(dir, sizeof dir, "%s/%s", cx.workspace, w[i].ex->id);
            w[i].wd = inotify_add_watch(ifd, dir, IN_CLOSE_WRITE | IN_MOVED_TO | IN_CREATE);
            if (w[i].wd < 0) {
                close(ifd);
                ifd = -1;
            }
        }
        if (ifd < 0) {
            fprintf(stderr, "mlsys-lab: watch: inotify is not available here (%s): polling every "
                    "%.1f s instead\n", strerror(errno), WATCH_POLL_MS / 1000.0);
            poll_mode = 1;
        }
    }
    mlsys_job_install_signal_stop();
    printf("watching %d exercise%s under %s (%s); save a file to check it again, Ctrl-C to stop\n",
           nw, nw == 1 ? "" : "s", cx.workspace, poll_mode ? "polling" : "inotify");
    fflush(stdout);
    if (current)
        check_one(&cx, current, 0, NULL);
    long checks = 0;
    while (!mlsys_job_stop_requested()) {
        int any = 0;
        if (!poll_mode) {
            struct pollfd pfd = {.fd = ifd, .events = POLLIN};
            if (poll(&pfd, 1, WATCH_POLL_MS) > 0)
                read_events(ifd, w, nw);
        } else {
            sleep_ms(WATCH_POLL_MS);
            for (int i = 0; i < nw; i++)
                if (stat_changed(&w[i]))
                    w[i].dirty = 1;
        }
        for (int i = 0; i < nw; i++)
            any |= w[i].dirty;
        if (!any || mlsys_job_stop_requested())
            continue;
        sleep_ms(WATCH_SETTLE_MS);          /* editors write in several steps */
        if (!poll_mode)
            read_events(ifd, w, nw);
        for (int i = 0; i < nw && !mlsys_job_stop_requested(); i++) {
            if (!w[i].dirty)
                continue;
            w[i].dirty = 0;
            stat_changed(&w[i]);
            printf("\n%s changed: checking it again\n", w[i].ex->id);
            fflush(stdout);
            int rc = check_one(&cx, w[i].ex, 0, NULL);
            if (rc == 0) {
                ex_progress q;
                if (load_progress(&cx, &q) == 0) {
                    const exercise *nx = next_pending(&q, 0);
                    if (nx)
                        printf("next: %s (%s)\n", nx->id, ex_kind_name(nx->kind));
                    ex_progress_free(&q);
                }
            }
            fflush(stdout);
            if (max_checks && ++checks >= max_checks)
                goto out;
        }
    }
out:
    if (ifd >= 0)
        close(ifd);
    free(w);
    printf("watch: stopped\n");
    /* Ctrl-C (or a SIGTERM) ends watch as it ends every command: 130 */
    return mlsys_job_stop_requested() ? 130 : 0;
}

/* ---- dev-check ---- */

static int dev_problem(FILE *out, const exercise *ex, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int dev_problem(FILE *out, const exercise *ex, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(out, "FAIL  %-30s ", ex ? ex->id : "(curriculum)");
    vfprintf(out, fmt, ap);
    fputc('\n', out);
    va_end(ap);
    fflush(out);
    return 1;
}

static int file_exists(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

/* Predict: on many seeds, the right answer passes, nothing and wrong answers fail, and an
 * answer just inside the tolerance passes. */
static int dev_predict(FILE *out, const exercise *ex)
{
    if (!ex->draw)
        return dev_problem(out, ex, "a predict exercise without a draw function");
    for (uint64_t seed = 1; seed <= 40; seed++) {
        ex_question q;
        exercise_predict_draw(ex, seed, &q);
        ex_verdict v;
        ex_verdict_init(&v);
        char right[64], wrong[3][64];
        int nwrong = 0;
        if (!q.text[0] || !q.explain[0])
            return dev_problem(out, ex, "seed %llu: no question text or explanation",
                               (unsigned long long)seed);
        if (q.nchoices) {
            if (q.answer < 0 || q.answer >= q.nchoices || q.answer != floor(q.answer))
                return dev_problem(out, ex, "seed %llu: the answer is not a choice",
                                   (unsigned long long)seed);
            snprintf(right, sizeof right, "%c", 'a' + (int)q.answer);
            for (int i = 0; i < q.nchoices && nwrong < 3; i++)
                if (i != (int)q.answer)
                    snprintf(wrong[nwrong++], sizeof wrong[0], "%c", 'a' + i);
        } else {
            if (!isfinite(q.answer))
                return dev_problem(out, ex, "seed %llu: the answer is not finite",
                                   (unsigned long long)seed);
            double tol = fmax(q.abs_tol, q.rel_tol * fabs(q.answer));
            snprintf(right, sizeof right, "%.17g", q.answer + 0.5 * tol);
            double off = fmax(3.0 * tol, fmax(1e-6 * fabs(q.answer), 1e-9)) + (tol == 0.0 ? 1.0 : 0.0);
            snprintf(wrong[nwrong++], sizeof wrong[0], "%.17g", q.answer + off);
            snprintf(wrong[nwrong++], sizeof wrong[0], "%.17g", q.answer - off);
        }
        if (ex_question_judge(&q, right, &v) != EX_PASS)
            return dev_problem(out, ex, "seed %llu: the right answer %s is rejected: %s",
                               (unsigned long long)seed, right, v.summary);
        if (ex_question_judge(&q, "", &v) != EX_FAIL)
            return dev_problem(out, ex, "seed %llu: no answer is accepted", (unsigned long long)seed);
        for (int i = 0; i < nwrong; i++)
            if (ex_question_judge(&q, wrong[i], &v) != EX_FAIL)
                return dev_problem(out, ex, "seed %llu: the wrong answer %s is accepted (right: "
                                   "%.10g)", (unsigned long long)seed, wrong[i], q.answer);
    }
    fprintf(out, "ok    %-30s predict     40 draws: right answers pass, others fail\n", ex->id);
    fflush(out);
    return 0;
}

static int dev_checked(const ex_context *cx, FILE *out, const exercise *ex)
{
    uint64_t t0 = mlsys_now_ns();
    const char *need[4] = {ex->starter, ex->solution, NULL, NULL};
    if (ex->kind == EX_IMPLEMENT) {
        need[2] = "check.c";
        need[3] = "api.h";
        if (!ex->impl || !ex->impl->world_sizes || !ex->impl->world_sizes[0])
            return dev_problem(out, ex, "no world sizes to run on");
    } else if (!ex->check) {
        return dev_problem(out, ex, "an experiment without a check function");
    }
    if (!ex->starter || !ex->solution || !ex->workfile)
        return dev_problem(out, ex, "starter, solution and workfile must all be named");
    for (int i = 0; i < 4; i++) {
        char p[PATH_MAX];
        if (!need[i])
            continue;
        ex_asset_path(cx, ex, need[i], p, sizeof p);
        if (!file_exists(p))
            return dev_problem(out, ex, "missing file %s", p);
    }
    char starter[PATH_MAX], solution[PATH_MAX];
    ex_asset_path(cx, ex, ex->starter, starter, sizeof starter);
    ex_asset_path(cx, ex, ex->solution, solution, sizeof solution);
    ex_verdict v;
    exercise_check_file(cx, ex, starter, 0, &v);
    if (v.result != EX_FAIL) {
        int r = dev_problem(out, ex, "the untouched starter does not fail its check: %s %s",
                            v.result == EX_PASS ? "it passes:" : "cannot check:", v.summary);
        if (v.detail)
            print_indented(out, v.detail, "      ");
        ex_verdict_free(&v);
        return r;
    }
    char why[200];
    snprintf(why, sizeof why, "%s: %.150s", ex_failure_name(v.failure), v.summary);
    ex_verdict_free(&v);
    exercise_check_file(cx, ex, solution, 0, &v);
    if (v.result != EX_PASS) {
        int r = dev_problem(out, ex, "the reference solution does not pass: %s", v.summary);
        if (v.detail)
            print_indented(out, v.detail, "      ");
        ex_verdict_free(&v);
        return r;
    }
    ex_verdict_free(&v);
    fprintf(out, "ok    %-30s %-11s starter fails (%s); solution passes [%.1f s]\n", ex->id,
            ex_kind_name(ex->kind), why, (double)(mlsys_now_ns() - t0) * 1e-9);
    fflush(out);
    return 0;
}

int ex_dev_check(const ex_context *cx, FILE *out)
{
    int problems = 0, n = ex_count();
    for (int i = 0; i < n; i++) {
        const exercise *ex = ex_at(i);
        char prefix[8];
        snprintf(prefix, sizeof prefix, "ch%02d-", ex->chapter);
        if (!ex->id || strncmp(ex->id, prefix, 5) != 0 || strlen(ex->id) < 7 ||
            strlen(ex->id) >= sizeof(((ex_progress_entry *)0)->id)) {
            problems += dev_problem(out, ex, "the id must be '%s<slug>' (chapter %d)", prefix,
                                    ex->chapter);
            continue;
        }
        for (const char *s = ex->id; *s; s++)
            if (!((*s >= 'a' && *s <= 'z') || (*s >= '0' && *s <= '9') || *s == '-')) {
                problems += dev_problem(out, ex, "the id may hold only a-z, 0-9 and '-'");
                break;
            }
        for (int j = 0; j < i; j++)
            if (!strcmp(ex_at(j)->id, ex->id))
                problems += dev_problem(out, ex, "the id is used twice");
        if (!ex->title || !ex->title[0] || !ex->task || !ex->task[0])
            problems += dev_problem(out, ex, "no title or task");
        if (!ex->hints || !ex->hints[0])
            problems += dev_problem(out, ex, "no hints");
        for (int k = 0; ex->hints && ex->hints[k]; k++)
            if (!strchr(ex->hints[k], '?'))
                problems += dev_problem(out, ex, "hint %d is not a guiding question", k + 1);
        if (ex->lab && !lab_find(ex->lab))
            problems += dev_problem(out, ex, "names the lab %s, which does not exist", ex->lab);
        if (i > 0 && ex->chapter < ex_at(i - 1)->chapter)
            problems += dev_problem(out, ex, "out of chapter order");
        if (ex->kind == EX_PREDICT) {
            if (ex->starter || ex->solution || ex->workfile)
                problems += dev_problem(out, ex, "a predict exercise has no files");
            else
                problems += dev_predict(out, ex);
        } else {
            problems += dev_checked(cx, out, ex);
        }
        if (mlsys_job_stop_requested())
            return 1;
    }
    fprintf(out, "\n%d exercises, %d problem%s\n", n, problems, problems == 1 ? "" : "s");
    return problems ? 1 : 0;
}

int ex_dev_check_main(int argc, char **argv)
{
    lab_args a;
    int rc = lab_command_args(&dev_check_command, argc, argv, &a);
    if (rc >= 0)
        return rc;
    lab_args_free(&a);
    ex_context cx;
    if (context(&cx))
        return 2;
    mlsys_job_install_signal_stop();
    printf("dev-check: every exercise of %s/assets/exercises\n", cx.src);
    return ex_dev_check(&cx, stdout) ? 1 : 0;
}
