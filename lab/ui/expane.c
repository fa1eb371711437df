/* expane.c - the exercise pane beside the chapter tree: the selected exercise's title, kind,
 * task or drawn question, the learner's file, the last verdict laid out by its fields
 * (summary, file:line, the rank and element that differ, detail lines), an implement
 * exercise's contract (its api.h) and the hints shown so far. Keys: e opens the file in
 * $EDITOR (curses handed over through ui_shell_out), c checks it (exercise_check, after one
 * frame that says "checking…"), t shows the next hint (saved in the progress file), and a
 * predict question takes its answer in a field. */
#include "ui.h"
#include "../exercise/exercise.h"
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define EXP_MAX_EX 256          /* exercises whose last verdict this session keeps */
#define EXP_MAX_HINTS 16
#define EXP_FIELD_W 24          /* columns of the answer field */

enum { CHECK_IDLE, CHECK_ASKED, CHECK_SHOWN };  /* asked: c pressed; shown: "checking…" drawn */
enum { MSG_DIM, MSG_OK, MSG_ERR, MSG_WARN };

struct expane {
    ex_context cx;
    int cx_ok;
    char cx_err[512];
    const exercise *ex;         /* shown now, or NULL */
    int idx;                    /* its index in ex_at order, -1 */
    ex_verdict *verdict[EXP_MAX_EX];    /* the last check of each exercise, this session */
    unsigned char stale[EXP_MAX_EX];    /* its file was edited after that check */
    /* the shown exercise's progress */
    int hints, done, failed;
    /* predict: the question drawn when the exercise was opened */
    uint64_t seed;
    ex_question q;
    int typing, judged;
    char answer[64];
    int alen;
    ex_verdict pv;
    /* MLSYS_EX_SEED (tests): fixed seeds, base + k for the k-th question drawn */
    int seed_fixed;
    uint64_t seed_base, draws;
    int check_state;
    /* scrolling, and where the parts are (logical lines of the last layout) */
    int top, page, nlines;
    int want;                   /* a part to bring into view at the next draw: WANT_* */
    int verdict_line, verdict_end, hint_line[EXP_MAX_HINTS], field_line;
    char msg[700];
    int msg_kind;
    char editor[160];           /* what e runs, for the pane's text */
    char *contract;             /* implement: the shown exercise's api.h, or NULL */
};

enum { WANT_NONE, WANT_VERDICT, WANT_HINT, WANT_FIELD };

static int ex_index(const exercise *ex)
{
    for (int i = 0; i < ex_count(); i++)
        if (ex_at(i) == ex)
            return i;
    return -1;
}

static int nhints(const exercise *ex)
{
    int n = 0;
    while (ex->hints && ex->hints[n])
        n++;
    return n;
}

static void say(expane *p, int kind, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static void say(expane *p, int kind, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->msg, sizeof p->msg, fmt, ap);
    va_end(ap);
    p->msg_kind = kind;
}

expane *expane_create(void)
{
    expane *p = mlsys_xcalloc(1, sizeof *p);
    p->idx = -1;
    p->cx_ok = ex_context_init(&p->cx, p->cx_err, sizeof p->cx_err) == 0;
    ex_verdict_init(&p->pv);
    const char *s = getenv("MLSYS_EX_SEED");
    long v;
    if (s && *s && mlsys_parse_long(s, &v) == 0 && v > 0) {
        p->seed_fixed = 1;
        p->seed_base = (uint64_t)v;
    }
    return p;
}

void expane_free(expane *p)
{
    if (!p)
        return;
    for (int i = 0; i < EXP_MAX_EX; i++)
        if (p->verdict[i]) {
            ex_verdict_free(p->verdict[i]);
            free(p->verdict[i]);
        }
    ex_verdict_free(&p->pv);
    free(p->contract);
    free(p);
}

/* The shown exercise's hints, done and failed marks, from the progress file. */
static void load_state(expane *p)
{
    p->hints = p->done = p->failed = 0;
    if (!p->cx_ok || !p->ex)
        return;
    ex_progress pr;
    char msg[1024];
    int rc = ex_progress_load(&pr, p->cx.progress, msg, sizeof msg);
    if (rc != 0)
        say(p, MSG_ERR, "%s", msg);     /* unreadable, or corrupt and kept aside */
    if (rc < 0)
        return;
    ex_progress_entry *e = ex_progress_get(&pr, p->ex->id, 0);
    if (e) {
        p->hints = e->hints;
        p->done = e->done;
        p->failed = e->failed_at != 0;
    }
    ex_progress_free(&pr);
}

/* ---- the editor ---- */

/* The first word of cmd names a program that can run: a path, or a name found in PATH. */
static int runnable(const char *cmd)
{
    char word[PATH_MAX];
    size_t k = 0;
    while (*cmd == ' ' || *cmd == '\t')
        cmd++;
    while (cmd[k] && cmd[k] != ' ' && cmd[k] != '\t' && k + 1 < sizeof word) {
        word[k] = cmd[k];
        k++;
    }
    word[k] = 0;
    if (!k)
        return 0;
    if (strchr(word, '/'))
        return access(word, X_OK) == 0;
    const char *path = getenv("PATH");
    if (!path || !*path)
        path = "/usr/bin:/bin";
    while (*path) {
        const char *end = strchr(path, ':');
        size_t len = end ? (size_t)(end - path) : strlen(path);
        char full[PATH_MAX];
        if (ex_pathf(full, sizeof full, "%.*s/%s", (int)len, len ? path : ".", word) == 0 &&
            access(full, X_OK) == 0)
            return 1;
        path += len + (end != NULL);
    }
    return 0;
}

typedef struct editor_job {
    char *argv[8];
    char script[PATH_MAX + 16];
    char name[256];
    int err;                    /* errno when it could not start */
} editor_job;

/* $EDITOR (through sh, so that "emacs -nw" works; exec, so that no shell stands between
 * the editor and its Ctrl-C), else vi, nano or ed, whichever is here.
 * -1 when none is; note says when $EDITOR was set but cannot run. */
static int pick_editor(editor_job *j, char *file, char *note, size_t n)
{
    note[0] = 0;
    const char *env = getenv("EDITOR");
    if (env && *env) {
        if (runnable(env)) {
            snprintf(j->script, sizeof j->script, "exec %s \"$1\"", env);
            snprintf(j->name, sizeof j->name, "%s", env);
            j->argv[0] = "/bin/sh";
            j->argv[1] = "-c";
            j->argv[2] = j->script;
            j->argv[3] = "sh";
            j->argv[4] = file;
            j->argv[5] = NULL;
            return 0;
        }
        snprintf(note, n, "EDITOR=%s cannot run here; ", env);
    }
    static const char *const fallback[] = {"vi", "nano", "ed", NULL};
    for (int i = 0; fallback[i]; i++)
        if (runnable(fallback[i])) {
            snprintf(j->name, sizeof j->name, "%s", fallback[i]);
            j->argv[0] = j->name;
            j->argv[1] = file;
            j->argv[2] = NULL;
            return 0;
        }
    return -1;
}

/* Runs with curses suspended: the editor in the foreground, on the same terminal. */
static int run_editor(void *u)
{
    editor_job *j = u;
    pid_t pid = fork();
    if (pid < 0) {
        j->err = errno;
        return -1;
    }
    if (pid == 0) {
        signal(SIGINT, SIG_DFL);        /* ignored by ui_shell_out, and kept across exec */
        signal(SIGQUIT, SIG_DFL);
        signal(SIGPIPE, SIG_DFL);
        execvp(j->argv[0], j->argv);
        fprintf(stderr, "mlsys-lab: cannot run %s: %s\n", j->argv[0], strerror(errno));
        _exit(127);
    }
    int st;
    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR) {
            j->err = errno;
            return -1;
        }
    return st;
}

/* ---- which exercise ---- */

static void new_question(expane *p)
{
    if (p->seed_fixed)
        p->seed = p->seed_base + p->draws++;
    else
        p->seed = ex_random_seed() % 1000000000ull + 1;
    exercise_predict_draw(p->ex, p->seed, &p->q);
    p->judged = 0;
    p->alen = 0;
    p->answer[0] = 0;
    ex_verdict_free(&p->pv);
    ex_verdict_init(&p->pv);
}

void expane_show(expane *p, const exercise *ex)
{
    if (ex == p->ex)
        return;
    p->ex = ex;
    p->idx = ex ? ex_index(ex) : -1;
    p->top = 0;
    p->typing = 0;
    p->want = WANT_NONE;
    p->msg[0] = 0;
    p->check_state = CHECK_IDLE;
    free(p->contract);
    p->contract = NULL;
    if (!ex)
        return;
    load_state(p);
    if (p->cx_ok)
        p->contract = ex_contract_text(&p->cx, ex);
    if (ex->kind == EX_PREDICT)
        new_question(p);        /* new numbers each time the question is opened */
    editor_job j;
    char note[300], none[] = "";
    const char *env = getenv("EDITOR");
    if (pick_editor(&j, none, note, sizeof note) != 0)
        snprintf(p->editor, sizeof p->editor, "no editor: set EDITOR");
    else if (note[0])
        snprintf(p->editor, sizeof p->editor, "%.60s (EDITOR=%.60s cannot run here)", j.name, env);
    else if (env && *env)
        snprintf(p->editor, sizeof p->editor, "%.100s ($EDITOR)", j.name);
    else
        snprintf(p->editor, sizeof p->editor, "%.100s (set EDITOR for another)", j.name);
}

int expane_typing(const expane *p)
{
    return p->ex && p->typing;
}

static int is_file(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

static int edit(expane *p)
{
    const exercise *ex = p->ex;
    if (ex->kind == EX_PREDICT || !ex->workfile) {
        say(p, MSG_DIM, "a predict question has no file: Enter answers it here");
        return UI_HANDLED | UI_REDRAW;
    }
    if (!p->cx_ok) {
        say(p, MSG_ERR, "%s", p->cx_err);
        return UI_HANDLED | UI_REDRAW;
    }
    char path[PATH_MAX], err[512], note[300];
    ex_work_path(&p->cx, ex, path, sizeof path);
    int created = 0;
    if (!is_file(path)) {
        if (ex_workspace_sync(&p->cx, err, sizeof err) < 0) {
            say(p, MSG_ERR, "cannot create your file: %s", err);
            return UI_HANDLED | UI_REDRAW;
        }
        created = 1;
    }
    editor_job j;
    memset(&j, 0, sizeof j);
    if (pick_editor(&j, path, note, sizeof note) != 0) {
        say(p, MSG_ERR, "%sno editor found: set EDITOR, or install vi, nano or ed", note);
        return UI_HANDLED | UI_REDRAW;
    }
    int st = ui_shell_out(run_editor, &j);
    if (p->idx >= 0 && p->idx < EXP_MAX_EX && p->verdict[p->idx])
        p->stale[p->idx] = 1;
    if (st < 0)
        say(p, MSG_ERR, "%scannot start %s: %s", note, j.name, strerror(j.err));
    else if (WIFEXITED(st) && WEXITSTATUS(st) == 127)
        say(p, MSG_ERR, "%scannot run the editor %s", note, j.name);
    else if (WIFEXITED(st) && WEXITSTATUS(st) != 0)
        say(p, MSG_WARN, "%sthe editor %s exited with status %d; c checks your file", note,
            j.name, WEXITSTATUS(st));
    else if (WIFSIGNALED(st))
        say(p, MSG_WARN, "%sthe editor %s died by signal %d; c checks your file", note, j.name,
            WTERMSIG(st));
    else if (created)
        say(p, MSG_DIM, "back from %s (your file was made from the starter): c checks it", j.name);
    else
        say(p, MSG_DIM, "back from %s: c checks your file", j.name);
    return UI_HANDLED | UI_REDRAW;
}

/* ---- checking, hints, answers ---- */

static const char *sizes_text(const exercise *ex, char *buf, size_t n)
{
    buf[0] = 0;
    for (int i = 0; ex->impl && ex->impl->world_sizes && ex->impl->world_sizes[i]; i++)
        snprintf(buf + strlen(buf), n - strlen(buf), "%s%d", i ? ", " : "",
                 ex->impl->world_sizes[i]);
    return buf;
}

static void run_check(expane *p)
{
    const exercise *ex = p->ex;
    if (p->idx < 0 || p->idx >= EXP_MAX_EX)
        return;
    ex_verdict *v = p->verdict[p->idx];
    if (!v)
        v = p->verdict[p->idx] = mlsys_xcalloc(1, sizeof *v);
    ex_verdict_free(v);
    if (p->seed_fixed) {
        /* what exercise_check does, with the tests' seed */
        char err[512], path[PATH_MAX];
        if (ex_workspace_sync(&p->cx, err, sizeof err) < 0) {
            ex_verdict_init(v);
            ex_verdict_set(v, EX_ERROR, EXF_SETUP, "%s", err);
        } else {
            ex_work_path(&p->cx, ex, path, sizeof path);
            exercise_check_file(&p->cx, ex, path, p->seed_base, v);
        }
    } else {
        exercise_check(&p->cx, ex, v);
    }
    p->stale[p->idx] = 0;
    char msg[1024] = "";
    if (v->result != EX_ERROR && exercise_record(&p->cx, ex, v->result == EX_PASS, msg,
                                                 sizeof msg) != 0)
        say(p, MSG_ERR, "progress not saved: %s", msg);
    else if (v->result == EX_PASS)
        say(p, MSG_OK, "%s passed", ex->id);
    else if (v->result == EX_FAIL && v->failure == EXF_ANSWER)
        say(p, MSG_ERR, "%s: not yet; t gives a hint", ex->id);
    else if (v->result == EX_FAIL)
        say(p, MSG_ERR, "%s: not yet (%s); t gives a hint", ex->id, ex_failure_name(v->failure));
    else
        say(p, MSG_ERR, "%s could not be checked: %s", ex->id, v->summary);
    load_state(p);
    p->want = WANT_VERDICT;
}

static int hint(expane *p)
{
    const exercise *ex = p->ex;
    int nh = nhints(ex);
    if (!nh) {
        say(p, MSG_DIM, "%s has no hints", ex->id);
        return UI_HANDLED | UI_REDRAW;
    }
    if (!p->cx_ok) {
        say(p, MSG_ERR, "%s", p->cx_err);
        return UI_HANDLED | UI_REDRAW;
    }
    ex_progress pr;
    char msg[1024];
    if (ex_progress_load(&pr, p->cx.progress, msg, sizeof msg) < 0) {
        say(p, MSG_ERR, "%s", msg);
        return UI_HANDLED | UI_REDRAW;
    }
    ex_progress_entry *e = ex_progress_get(&pr, ex->id, 1);
    if (e->hints >= nh) {
        say(p, MSG_DIM, "all %d hints are shown; stuck still? mlsys-lab solution %s --force",
            nh, ex->id);
    } else {
        e->hints++;
        if (ex_progress_save(&pr, msg, sizeof msg) != 0)
            say(p, MSG_ERR, "hint %d of %d (not saved: %s)", e->hints, nh, msg);
        else if (e->hints < nh)
            say(p, MSG_DIM, "hint %d of %d; t shows the next", e->hints, nh);
        else
            say(p, MSG_DIM, "hint %d of %d, the last one", e->hints, nh);
    }
    ex_progress_free(&pr);
    load_state(p);
    p->want = WANT_HINT;
    return UI_HANDLED | UI_REDRAW;
}

static void submit(expane *p)
{
    ex_verdict *v = &p->pv;
    ex_verdict_free(v);
    ex_verdict_init(v);
    exercise_predict_judge(p->ex, p->seed, p->answer, v);
    const ex_question *q = &p->q;
    if (v->result != EX_PASS) {
        if (q->nchoices)
            ex_verdict_add(v, "the answer: %c) %s", 'a' + (int)q->answer,
                           q->choices[(int)q->answer]);
        else
            ex_verdict_add(v, "the answer: %.10g%s%s", q->answer, q->unit[0] ? " " : "", q->unit);
    }
    if (q->explain[0])
        ex_verdict_add(v, "%s", q->explain);
    p->typing = 0;
    p->judged = 1;
    char msg[1024] = "";
    if (!p->cx_ok)
        say(p, MSG_ERR, "progress not saved: %s", p->cx_err);
    else if (v->result != EX_ERROR && exercise_record(&p->cx, p->ex, v->result == EX_PASS, msg,
                                                      sizeof msg) != 0)
        say(p, MSG_ERR, "progress not saved: %s", msg);
    else if (v->result == EX_PASS)
        say(p, MSG_OK, "right; Enter draws another question");
    else
        say(p, MSG_ERR, "not quite; Enter draws a new question with other numbers");
    load_state(p);
    p->want = WANT_VERDICT;
}

/* The answer field has the keys: text, Backspace, Enter submits, Esc leaves. */
static int type_key(expane *p, int key)
{
    if (key == UI_KEY_ENTER) {
        submit(p);
    } else if (key == UI_KEY_ESC) {
        p->typing = 0;
        say(p, MSG_DIM, "Enter answers");
    } else if (key == UI_KEY_BACKSPACE) {
        if (p->alen > 0)
            p->answer[--p->alen] = 0;
    } else if (key == UI_CTRL('u')) {
        p->alen = 0;
        p->answer[0] = 0;
    } else if (key >= 0x20 && key < 0x7f && p->alen + 1 < (int)sizeof p->answer) {
        p->answer[p->alen++] = (char)key;
        p->answer[p->alen] = 0;
    }
    return UI_HANDLED | UI_REDRAW;     /* every key is the field's, q and digits too */
}

static int scroll_key(expane *p, int key, int focused)
{
    int d;
    switch (key) {
    case ' ': case UI_KEY_PGDN: case UI_CTRL('f'): d = p->page - 1; break;
    case 'b': case UI_KEY_PGUP: case UI_CTRL('b'): d = -(p->page - 1); break;
    case 'd': d = p->page / 2; break;
    case 'u': d = -p->page / 2; break;
    case UI_KEY_WHEEL_DOWN: d = 3; break;
    case UI_KEY_WHEEL_UP: d = -3; break;
    default:
        if (!focused)
            return 0;
        switch (key) {
        case 'j': case UI_KEY_DOWN: d = 1; break;
        case 'k': case UI_KEY_UP: d = -1; break;
        case 'g': case UI_KEY_HOME: d = -p->top; break;
        case 'G': case UI_KEY_END: d = p->nlines; break;
        default: return 0;
        }
    }
    p->top += d;
    p->want = WANT_NONE;
    return UI_HANDLED | UI_REDRAW;
}

int expane_key(expane *p, int key, int focused)
{
    if (!p->ex)
        return 0;
    if (p->typing)
        return type_key(p, key);
    if (p->check_state != CHECK_IDLE)
        return key == 'c' || key == 'e' || key == 't' ? UI_HANDLED : 0;
    const exercise *ex = p->ex;
    switch (key) {
    case 'e':
        return edit(p);
    case 'c':
        if (ex->kind == EX_PREDICT) {
            say(p, MSG_DIM, "a predict question is answered here: Enter, type, Enter");
            return UI_HANDLED | UI_REDRAW;
        }
        if (!p->cx_ok) {
            say(p, MSG_ERR, "%s", p->cx_err);
            return UI_HANDLED | UI_REDRAW;
        }
        p->check_state = CHECK_ASKED;
        p->want = WANT_VERDICT;
        if (ex->kind == EX_IMPLEMENT) {
            char sz[96];
            say(p, MSG_WARN, "checking… compile, then run on N = %s (Ctrl-C quits)",
                sizes_text(ex, sz, sizeof sz));
        } else {
            say(p, MSG_WARN, "checking your answers… (Ctrl-C quits)");
        }
        return UI_HANDLED | UI_REDRAW;
    case 't':
        return hint(p);
    case UI_KEY_ENTER:
        if (ex->kind != EX_PREDICT)
            return 0;
        if (p->judged)
            new_question(p);
        p->typing = 1;
        p->want = WANT_FIELD;
        say(p, MSG_DIM, "type your answer; Enter submits, Esc leaves the field");
        return UI_HANDLED | UI_REDRAW;
    case '/':
        say(p, MSG_DIM, "/ searches a chapter's text: select the chapter first");
        return UI_HANDLED | UI_REDRAW;
    }
    return scroll_key(p, key, focused);
}

int expane_tick(expane *p, int *timeout_ms)
{
    if (p->check_state == CHECK_ASKED) {
        *timeout_ms = 0;        /* come back right after the frame that says "checking…" */
        return 0;
    }
    if (p->check_state != CHECK_SHOWN)
        return 0;
    run_check(p);               /* blocks; Ctrl-C stops the ranks and the loop then quits */
    p->check_state = CHECK_IDLE;
    return UI_REDRAW;
}

int expane_keys(const expane *p, int focused, ui_key_help *out, int max)
{
    int k = 0;
    if (!p->ex || max < 8)
        return 0;
    if (p->typing) {
        out[k++] = (ui_key_help){"type", "answer"};
        out[k++] = (ui_key_help){"Enter", "submit"};
        out[k++] = (ui_key_help){"Backspace", "erase"};
        out[k++] = (ui_key_help){"Esc", "leave the field"};
    } else {
        out[k++] = (ui_key_help){"j/k", focused ? "scroll" : "move"};
        if (p->ex->kind == EX_PREDICT) {
            out[k++] = (ui_key_help){"Enter", p->judged ? "new question" : "answer"};
        } else {
            out[k++] = (ui_key_help){"e", "edit"};
            out[k++] = (ui_key_help){"c", "check"};
        }
        out[k++] = (ui_key_help){"t", "hint"};
        out[k++] = (ui_key_help){"Tab", focused ? "chapters" : "pane"};
        out[k++] = (ui_key_help){"space", "page"};
    }
    out[k] = (ui_key_help){NULL, NULL};
    return k;
}

/* ---- drawing ---- */

/* Lays out lines from the top of the body; only those in view are drawn (g NULL: counts). */
typedef struct pen {
    grid *g;
    int x, y, w, h;
    int top, line;
} pen;

static int pen_row(pen *pn)
{
    int r = pn->line++ - pn->top;
    return pn->g && r >= 0 && r < pn->h ? pn->y + r : -1;
}

static void pen_blank(pen *pn)
{
    pn->line++;
}

/* Bytes of s that fit in w columns, cut after a space or a '/' when one is there. */
static size_t fit(const char *s, size_t len, int w)
{
    if (grid_text_width(s, len) <= w)
        return len;
    size_t i = 0, space = 0, slash = 0;
    while (i < len) {
        uint32_t cp;
        size_t k = grid_utf8_decode(s + i, len - i, &cp);
        if (grid_text_width(s, i + k) > w)
            break;
        i += k;
        if (cp == ' ')
            space = i;
        else if (cp == '/')
            slash = i;
    }
    /* a break that does not leave the line nearly empty: after a space, else a '/' */
    if (space > i / 3)
        return space;
    if (slash > i / 3)
        return slash;
    return i ? i : 1;
}

/* Text at indent, wrapped to the body's width; each '\n' starts a line, and the lines a
 * long one wraps into are indented hang columns more than its own leading blanks. */
static void pen_text(pen *pn, int indent, int hang, const char *s, grid_attr a)
{
    while (s && *s) {
        const char *nl = strchr(s, '\n');
        size_t len = nl ? (size_t)(nl - s) : strlen(s);
        int lead = 0, first = 1;
        while ((size_t)lead < len && s[lead] == ' ')
            lead++;
        do {
            int in = indent + (first ? 0 : lead + hang);
            int room = pn->w - in > 8 ? pn->w - in : 8;
            size_t take = fit(s, len, room);
            size_t show = take;
            while (show > 0 && s[show - 1] == ' ')
                show--;
            int row = pen_row(pn);
            if (row >= 0)
                grid_putn(pn->g, pn->x + in, row, s, show, a);
            s += take;
            len -= take;
            while (len && *s == ' ') {      /* a wrapped line does not start with blanks */
                s++;
                len--;
            }
            first = 0;
        } while (len > 0);
        s = nl ? nl + 1 : NULL;
    }
}

static void heading(pen *pn, const char *text, const char *right, grid_attr ra)
{
    int row = pen_row(pn);
    if (row < 0)
        return;
    int w = grid_put(pn->g, pn->x, row, text, GRID_BOLD | GRID_PAIR(UI_PAIR_TITLE));
    if (right && *right)
        view_put_clipped(pn->g, pn->x + w + 2, row, pn->w - w - 2, right, ra);
}

static void draw_verdict(expane *p, pen *pn, const ex_verdict *v, int ascii, int predict)
{
    int row = pen_row(pn);
    const char *word = v->result == EX_PASS ? "PASS" : v->result == EX_FAIL ? "FAIL" : "ERROR";
    grid_attr wa = (v->result == EX_PASS ? GRID_PAIR(UI_PAIR_OK) : GRID_PAIR(UI_PAIR_ERR)) |
                   GRID_BOLD;
    if (row < 0 && predict) {
        if (v->detail)
            pen_text(pn, 4, 2, v->detail, 0);
        return;
    }
    if (row >= 0) {
        int x = pn->x + 2;
        x += grid_put(pn->g, x, row, v->result == EX_PASS ? view_glyph(ascii, "✓", "v") :
                      view_glyph(ascii, "✗", "x"), wa);
        x += 1;
        if (predict) {          /* "right: 112 messages", "99 is not it (too small)" */
            view_put_clipped(pn->g, x, row, pn->x + pn->w - x, v->summary, wa);
            if (v->detail)
                pen_text(pn, 4, 2, v->detail, 0);
            return;
        }
        x += grid_put(pn->g, x, row, word, wa);
        if (v->result == EX_FAIL && v->failure != EXF_ANSWER) {
            x += 2;
            x += grid_put(pn->g, x, row, ex_failure_name(v->failure), GRID_BOLD);
        }
        if (p->idx >= 0 && p->idx < EXP_MAX_EX && p->stale[p->idx])
            view_put_clipped(pn->g, x + 2, row, pn->x + pn->w - x - 2,
                             "(checked before your last edit)", GRID_DIM);
    }
    pen_text(pn, 4, 2, v->summary, 0);
    char line[PATH_MAX + 64];
    if (v->rank >= 0 || v->element >= 0) {
        char where[160] = "";
        if (v->world_size > 0)
            snprintf(where, sizeof where, "N = %d", v->world_size);
        if (v->rank >= 0)
            snprintf(where + strlen(where), sizeof where - strlen(where), "%srank %d",
                     where[0] ? ", " : "", v->rank);
        if (v->element >= 0)
            snprintf(where + strlen(where), sizeof where - strlen(where), "%selement %ld",
                     where[0] ? ", " : "", v->element);
        snprintf(line, sizeof line, "%-11s %s", v->failure == EXF_WRONG ? "differs at" :
                 "where", where);
        pen_text(pn, 4, 12, line, GRID_PAIR(UI_PAIR_WARN));
    }
    if (v->file[0] && v->line > 0) {
        const char *base = strrchr(v->file, '/');
        base = base ? base + 1 : v->file;
        if (v->col > 0)
            snprintf(line, sizeof line, "%-11s %s:%d:%d", "at", base, v->line, v->col);
        else
            snprintf(line, sizeof line, "%-11s %s:%d", "at", base, v->line);
        pen_text(pn, 4, 12, line, GRID_PAIR(UI_PAIR_WARN));
    }
    if (v->detail)
        pen_text(pn, 4, 2, v->detail, GRID_DIM);
}

/* The body; p->verdict_line and friends say where its parts start. */
static void layout(expane *p, pen *pn, int ascii)
{
    const exercise *ex = p->ex;
    char buf[PATH_MAX + 200];
    int row = pen_row(pn);
    if (row >= 0)
        view_put_clipped(pn->g, pn->x, row, pn->w, ex->title, GRID_BOLD | GRID_PAIR(UI_PAIR_TITLE));
    snprintf(buf, sizeof buf, "%s %s chapter %d", ex_kind_name(ex->kind),
             view_glyph(ascii, "·", "-"), ex->chapter);
    if (ex->lab)
        snprintf(buf + strlen(buf), sizeof buf - strlen(buf), " %s builds on the lab %s",
                 view_glyph(ascii, "·", "-"), ex->lab);
    pen_text(pn, 0, 2, buf, GRID_DIM);
    pen_blank(pn);

    heading(pn, "Task", NULL, 0);
    pen_text(pn, 2, 0, ex->task ? ex->task : "", 0);
    pen_blank(pn);

    p->field_line = -1;
    if (ex->kind == EX_PREDICT) {
        heading(pn, "Question", NULL, 0);
        pen_text(pn, 2, 0, p->q.text, GRID_BOLD);
        for (int i = 0; i < p->q.nchoices; i++) {
            snprintf(buf, sizeof buf, "%c) %s", 'a' + i, p->q.choices[i]);
            pen_text(pn, 4, 3, buf, 0);
        }
        pen_blank(pn);
        snprintf(buf, sizeof buf, "(%s)", p->q.nchoices ? "a letter" : p->q.unit[0] ?
                 p->q.unit : "a number");
        heading(pn, "Your answer", buf, GRID_DIM);
        p->field_line = pn->line;
        row = pen_row(pn);
        if (row >= 0) {
            int fx = pn->x + 2;
            grid_attr fa = p->typing ? GRID_UNDERLINE | GRID_BOLD : GRID_DIM;
            grid_put(pn->g, fx, row, "[", GRID_DIM);
            grid_fill(pn->g, fx + 1, row, EXP_FIELD_W, 1, ' ', p->typing ? GRID_UNDERLINE : 0);
            view_put_clipped(pn->g, fx + 1, row, EXP_FIELD_W, p->answer, fa);
            if (p->typing) {
                int cx = fx + 1 + grid_text_width(p->answer, (size_t)p->alen);
                if (cx < fx + 1 + EXP_FIELD_W)
                    grid_set(pn->g, cx, row, ' ', GRID_REVERSE);
            }
            grid_put(pn->g, fx + 1 + EXP_FIELD_W, row, "]", GRID_DIM);
            const char *how = p->typing ? "Enter submits, Esc leaves the field" :
                              p->judged ? "Enter draws a new question" : "Enter to answer";
            view_put_clipped(pn->g, fx + EXP_FIELD_W + 4, row,
                             pn->x + pn->w - (fx + EXP_FIELD_W + 4), how, GRID_DIM);
        }
        pen_blank(pn);
        p->verdict_line = pn->line;
        if (p->judged) {
            heading(pn, "Your last answer", NULL, 0);
            draw_verdict(p, pn, &p->pv, ascii, 1);
            pen_blank(pn);
        } else if (p->done || p->failed) {
            heading(pn, "Before", p->done ? "you answered this question right before (with other "
                    "numbers)" : "a try before was wrong", GRID_DIM);
            pen_blank(pn);
        }
    } else {
        heading(pn, "Your file", NULL, 0);
        char path[PATH_MAX];
        ex_work_path(&p->cx, ex, path, sizeof path);
        pen_text(pn, 2, 2, p->cx_ok ? path : p->cx_err,
                 p->cx_ok ? GRID_BOLD : GRID_PAIR(UI_PAIR_ERR));
        if (p->cx_ok && !is_file(path))
            pen_text(pn, 2, 2, "not there yet: e or c makes it from the starter", GRID_DIM);
        if (ex->kind == EX_IMPLEMENT) {
            char sz[96];
            snprintf(buf, sizeof buf, "write %s(); c runs it on N = %s",
                     ex->impl && ex->impl->function ? ex->impl->function : "the function",
                     sizes_text(ex, sz, sizeof sz));
        } else {
            snprintf(buf, sizeof buf, "fill in the answers from what the lab shows; c checks them");
        }
        pen_text(pn, 2, 2, buf, GRID_DIM);
        snprintf(buf, sizeof buf, "e opens it in %s", p->editor);
        pen_text(pn, 2, 2, buf, GRID_DIM);
        pen_blank(pn);

        p->verdict_line = pn->line;
        const ex_verdict *v = p->idx >= 0 && p->idx < EXP_MAX_EX ? p->verdict[p->idx] : NULL;
        if (p->check_state != CHECK_IDLE) {
            heading(pn, "Last check", NULL, 0);
            row = pen_row(pn);
            if (row >= 0)
                grid_put(pn->g, pn->x + 2, row,
                         view_glyph(ascii, "⋯ checking…", "... checking..."),
                         GRID_BOLD | GRID_PAIR(UI_PAIR_WARN));
        } else if (v) {
            heading(pn, "Last check", NULL, 0);
            draw_verdict(p, pn, v, ascii, 0);
        } else {
            heading(pn, "Last check", p->done ? "passed before; c checks it again" :
                    p->failed ? "failed before; c checks it again" : "not checked yet: c checks it",
                    p->done ? GRID_PAIR(UI_PAIR_OK) :
                    p->failed ? GRID_PAIR(UI_PAIR_ERR) : GRID_DIM);
        }
        pen_blank(pn);
        p->verdict_end = pn->line;  /* a check brings the verdict into view, not the rest */
        if (p->contract) {          /* what the starter's "see api.h" points to */
            heading(pn, "Contract", "api.h, beside your file", GRID_DIM);
            for (const char *l = p->contract; *l;) {    /* each line under its own hang */
                const char *e = strchr(l, '\n');
                size_t len = e ? (size_t)(e - l) : strlen(l);
                char line[1024];
                int keep = (int)(len < sizeof line ? len : sizeof line - 1);
                snprintf(line, sizeof line, "%.*s", keep, l);
                if (line[0])
                    pen_text(pn, 2, ex_contract_hang(line) - (int)strspn(line, " "), line, 0);
                else
                    pen_blank(pn);
                l += len + (e != NULL);
            }
            pen_blank(pn);
        }
    }

    if (ex->kind == EX_PREDICT)
        p->verdict_end = pn->line;
    int nh = nhints(ex), shown = p->hints < nh ? p->hints : nh;
    for (int i = 0; i < EXP_MAX_HINTS; i++)
        p->hint_line[i] = -1;
    if (nh == 0) {
        heading(pn, "Hints", "none for this one", GRID_DIM);
    } else {
        snprintf(buf, sizeof buf, "%d of %d shown%s", shown, nh, shown < nh ?
                 "; t shows the next" : "");
        heading(pn, "Hints", buf, GRID_DIM);
        for (int i = 0; i < shown; i++) {
            if (i < EXP_MAX_HINTS)
                p->hint_line[i] = pn->line;
            snprintf(buf, sizeof buf, "%d. %s", i + 1, ex->hints[i]);
            pen_text(pn, 2, 3, buf, 0);
        }
        if (shown == nh) {
            snprintf(buf, sizeof buf, "stuck still? mlsys-lab solution %s --force shows the "
                     "reference", ex->id);
            pen_text(pn, 2, 0, buf, GRID_DIM);
        }
    }
}

void expane_draw(expane *p, grid *g, int x, int y, int w, int h, int focused)
{
    if (!p->ex)
        return;
    int ascii = g->ascii;
    int bx = x + 1, bw = w - 2, by = y + 1, bh = h - 2;
    if (bw < 10 || bh < 3)
        return;
    /* a dry run finds where the parts are, then the wanted one comes into view */
    pen dry = {NULL, bx, by, bw, bh, 0, 0};
    layout(p, &dry, ascii);
    p->nlines = dry.line;
    p->page = bh;
    int want = -1, want_end = -1;
    if (p->want == WANT_VERDICT) {
        want = p->verdict_line;
        want_end = p->verdict_end;
    } else if (p->want == WANT_FIELD) {
        want = p->field_line;
        want_end = p->field_line + 1;
    } else if (p->want == WANT_HINT) {
        int i = p->hints - 1;
        if (i >= 0 && i < EXP_MAX_HINTS && p->hint_line[i] >= 0) {
            want = p->hint_line[i];
            want_end = i + 1 < EXP_MAX_HINTS && p->hint_line[i + 1] >= 0 ? p->hint_line[i + 1] :
                       p->nlines;
        }
    }
    if (want >= 0) {
        if (want_end > want + bh)
            want_end = want + bh;
        if (want_end > p->top + bh)
            p->top = want_end - bh;
        if (want < p->top)
            p->top = want;
        if (p->check_state == CHECK_IDLE)
            p->want = WANT_NONE;
    }
    int max = p->nlines - bh;
    if (p->top > max)
        p->top = max;
    if (p->top < 0)
        p->top = 0;

    char head[200];
    snprintf(head, sizeof head, "exercise %s", p->ex->id);
    view_put_clipped(g, bx, y, bw - 6, head, GRID_BOLD | (focused ? GRID_PAIR(UI_PAIR_SEL) : 0));
    if (p->nlines > bh) {
        int pct = (int)(100.0 * (p->top + bh) / p->nlines);
        grid_printf(g, x + w - 5, y, GRID_DIM, "%3d%%", pct > 100 ? 100 : pct);
    }
    grid_clip(g, bx, by, bw, bh);
    pen pn = {g, bx, by, bw, bh, p->top, 0};
    layout(p, &pn, ascii);
    grid_unclip(g);
    if (p->check_state == CHECK_ASKED)
        p->check_state = CHECK_SHOWN;       /* this frame says "checking…": now it may block */
    if (p->msg[0]) {
        grid_attr ma = p->msg_kind == MSG_ERR ? GRID_PAIR(UI_PAIR_ERR) :
                       p->msg_kind == MSG_OK ? GRID_PAIR(UI_PAIR_OK) | GRID_BOLD :
                       p->msg_kind == MSG_WARN ? GRID_PAIR(UI_PAIR_WARN) : GRID_DIM;
        view_put_clipped(g, bx, y + h - 1, bw, p->msg, ma);
    }
}
