/* form.c - the lab launcher: one row per flag of the lab and per common flag (timeout, algo,
 * trace, gated), prefilled with the defaults and checked with lab_flag_check on every key,
 * so a wrong value is red before the learner launches. Enter starts a real job through the
 * runner (ui_run.c) and opens the live views. A free-text field (a file name, a prompt)
 * takes every printable key while it is empty or being edited, q included, so that "qq.json"
 * typed into an empty trace field is a name: Up/Down leave it, Enter or Esc ends the typing,
 * and Esc otherwise goes back (q too, from a field that holds a value not touched yet).
 * After a launch the selection rests on the Launch button. */
#include "ui.h"
#include "../job/runner.h"
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FORM_MAX 48
#define VAL_MAX 200

typedef struct field {
    const lab_flag *f;
    char val[VAL_MAX];
    int len, cur;
    int on;                     /* FLAG_BOOL */
    char err[240];
} field;

typedef struct form {
    const lab *l;
    field fl[FORM_MAX];
    int n;
    int sel;                    /* n = the Launch button */
    int editing;                /* typing into the selected free-text field: Enter ends it */
    int top;
    char msg[600];
    int msg_err;
    char algos[512];            /* "auto|ring|tree|..." for the --algo picker */
    ui_key_help keys[12];
} form;

/* Only the flags that apply to this lab: --help is not a value, the mpi-only ones matter
 * headless only; a lab without ranks has no algorithm, gate, timeout or trace; a lab whose
 * rank count is another flag (chapter 6's tp-size) takes no world size. */
static int hidden_flag(const lab *l, const lab_flag *f)
{
    if (!strcmp(f->name, "help") || !strncmp(f->help, "--backend mpi", 13) ||
        !strcmp(f->name, "verbose"))
        return 1;
    if (!l->rank_main && (!strcmp(f->name, "algo") || !strcmp(f->name, "gated") ||
                          !strcmp(f->name, "timeout") || !strcmp(f->name, "trace") ||
                          !strcmp(f->name, "world-size")))
        return 1;
    return l->ranks_flag && strcmp(l->ranks_flag, "world-size") && !strcmp(f->name, "world-size");
}

/* The value without the spaces around it (what is checked and launched). */
static void trimmed(const field *fd, char *out, size_t n)
{
    const char *b = fd->val, *e = fd->val + fd->len;
    while (b < e && isspace((unsigned char)*b))
        b++;
    while (e > b && isspace((unsigned char)e[-1]))
        e--;
    snprintf(out, n, "%.*s", (int)(e - b), b);
}

/* A flag's help in the learner's words: the common flags get a sentence of their own, and
 * asides meant for command-line users or for readers of the original scripts are cut. */
static void help_text(const lab_flag *f, char *out, size_t n)
{
    static const struct { const char *name, *text; } own[] = {
        {"timeout", "seconds a stuck send or receive waits before it is called a deadlock"},
        {"algo", "how the collectives move data; auto lets each one pick by its size"},
        {"trace", "a file name: the run is saved there, for Perfetto or for replay"},
        {"gated", "the ranks stop at every step until you press n"},
        {"backend", "how the ranks talk: shm (or gloo) is shared memory on this machine"},
    };
    for (size_t i = 0; i < sizeof own / sizeof own[0]; i++)
        if (!strcmp(f->name, own[i].name)) {
            snprintf(out, n, "%s", own[i].text);
            return;
        }
    snprintf(out, n, "%s", f->help ? f->help : "");
    char *cut = strstr(out, "; no short alias");
    if (cut)
        *cut = 0;
    char *aside;
    while ((aside = strstr(out, " (the original")) != NULL) {
        char *close = strchr(aside, ')');
        if (!close)
            break;
        memmove(aside, close + 1, strlen(close + 1) + 1);
    }
    /* "the original" elsewhere: say which one; "--beta": the field is called beta here */
    char *o;
    const char *with = "the tutorial script";
    while ((o = strstr(out, "the original")) != NULL &&
           strlen(out) + strlen(with) - 12 < n) {
        memmove(o + strlen(with), o + 12, strlen(o + 12) + 1);
        memcpy(o, with, strlen(with));
    }
    for (char *d = out; (d = strstr(d, "--")) != NULL;)
        if (isalpha((unsigned char)d[2]) && (d == out || d[-1] == ' ' || d[-1] == '('))
            memmove(d, d + 2, strlen(d + 2) + 1);
        else
            d += 2;
}

static void check(field *fd)
{
    char v[VAL_MAX];
    fd->err[0] = 0;
    if (fd->f->type == FLAG_BOOL)
        return;
    trimmed(fd, v, sizeof v);
    if (!v[0]) {
        if (!fd->f->def)
            return;             /* an optional text (--trace): empty means not given */
        snprintf(fd->err, sizeof fd->err, "a value is needed (default %s)", fd->f->def);
        return;
    }
    if (lab_flag_check(fd->f, v, fd->err, sizeof fd->err) != 0 && !fd->err[0])
        snprintf(fd->err, sizeof fd->err, "not a valid value");
}

static int all_valid(const form *fm, int *first_bad)
{
    for (int i = 0; i < fm->n; i++)
        if (fm->fl[i].err[0]) {
            *first_bad = i;
            return 0;
        }
    return 1;
}

/* Choices to cycle through with left/right: a choice flag's list, or the algorithm names. */
static const char *choices_of(const form *fm, const field *fd)
{
    if (fd->f->type == FLAG_CHOICE)
        return fd->f->choices;
    if (!strcmp(fd->f->name, "algo"))
        return fm->algos;
    return NULL;
}

static void cycle(form *fm, field *fd, int dir)
{
    const char *ch = choices_of(fm, fd);
    if (!ch)
        return;
    char words[32][48];
    int nw = 0, at = -1;
    const char *p = ch;
    while (*p && nw < 32) {
        const char *bar = strchr(p, '|');
        size_t len = bar ? (size_t)(bar - p) : strlen(p);
        snprintf(words[nw], sizeof words[nw], "%.*s", (int)(len < 47 ? len : 47), p);
        if (!strcmp(words[nw], fd->val))
            at = nw;
        nw++;
        p = bar ? bar + 1 : p + len;
    }
    if (!nw)
        return;
    at = at < 0 ? 0 : (at + dir + nw) % nw;
    snprintf(fd->val, sizeof fd->val, "%.47s", words[at]);
    fd->len = fd->cur = (int)strlen(fd->val);
    check(fd);
}

static void collect_algos(form *fm)
{
    size_t used = (size_t)snprintf(fm->algos, sizeof fm->algos, "auto");
    for (int c = 0; c < MLSYS_COLL_COUNT; c++) {
        const char *const *names = mlsys_algo_names((mlsys_coll)c);
        for (int i = 0; names && names[i]; i++) {
            char want[64];
            snprintf(want, sizeof want, "|%s|", names[i]);
            char have[sizeof fm->algos + 2];
            snprintf(have, sizeof have, "|%s|", fm->algos);
            if (strstr(have, want) || used + strlen(names[i]) + 2 >= sizeof fm->algos)
                continue;
            used += (size_t)snprintf(fm->algos + used, sizeof fm->algos - used, "|%s", names[i]);
        }
    }
}

static void add_field(form *fm, const lab_flag *f)
{
    if (fm->n == FORM_MAX || hidden_flag(fm->l, f))
        return;
    for (int i = 0; i < fm->n; i++)
        if (!strcmp(fm->fl[i].f->name, f->name))
            return;             /* a lab flag that shadows a common one */
    field *fd = &fm->fl[fm->n++];
    memset(fd, 0, sizeof *fd);
    fd->f = f;
    snprintf(fd->val, sizeof fd->val, "%s", f->def ? f->def : "");
    fd->len = fd->cur = (int)strlen(fd->val);
    check(fd);
}

/* The number of ranks the form would start (its world-size or tp-size field), or 0. */
static int form_ranks(const form *fm)
{
    const char *name = fm->l->ranks_flag ? fm->l->ranks_flag : "world-size";
    for (int i = 0; i < fm->n; i++)
        if (!strcmp(fm->fl[i].f->name, name) && !fm->fl[i].err[0]) {
            char v[VAL_MAX];
            trimmed(&fm->fl[i], v, sizeof v);
            return atoi(v);
        }
    return 0;
}

/* On the algo field with a chosen algorithm: where it will not run (the same rules as the
 * run's notice and the command line's, lab/cli/runner.c). */
static int algo_warning(const form *fm, const field *fd, char *out, size_t n)
{
    if (strcmp(fd->f->name, "algo") || fd->err[0])
        return 0;
    char v[VAL_MAX];
    trimmed(fd, v, sizeof v);
    return runner_algo_warn(v, form_ranks(fm), out, n);
}

static int form_typing(ui_screen *s);

/* ---- drawing ---- */

static void form_title(ui_screen *s, char *out, size_t n)
{
    form *fm = s->data;
    snprintf(out, n, "launch %s", fm->l->id);
}

static const ui_key_help *form_keys(ui_screen *s)
{
    form *fm = s->data;
    int k = 0;
    fm->keys[k++] = (ui_key_help){"Enter", "launch"};
    fm->keys[k++] = (ui_key_help){"Up/Down", "field"};
    if (fm->sel < fm->n) {
        const field *fd = &fm->fl[fm->sel];
        if (fd->f->type == FLAG_BOOL)
            fm->keys[k++] = (ui_key_help){"space", "toggle"};
        else if (choices_of(fm, fd))
            fm->keys[k++] = (ui_key_help){"Left/Right", "choose"};
        if (fd->f->type != FLAG_BOOL)
            fm->keys[k++] = (ui_key_help){"type", "edit"};
    }
    if (form_typing(s))             /* q is text here: say how to leave */
        fm->keys[k++] = fm->editing ? (ui_key_help){"Enter/Esc", "done"} :
                        (ui_key_help){"Esc", "back"};
    fm->keys[k] = (ui_key_help){NULL, NULL};
    return fm->keys;
}

static int has_field(const form *fm, const char *name)
{
    for (int i = 0; i < fm->n; i++)
        if (!strcmp(fm->fl[i].f->name, name))
            return 1;
    return 0;
}

/* The help explains only the fields this form shows. */
static const char *const *form_help(ui_screen *s)
{
    form *fm = s->data;
    static const char *lines[6];
    int k = 0;
    lines[k++] = "Every value is checked as you type; a red line says what is wrong. Spaces "
                 "around a value do not count.";
    lines[k++] = "An empty text field (a file name, a prompt) takes every key, q and ? too, and "
                 "so does one you are editing: Up/Down leave it, Enter or Esc ends the typing, "
                 "Esc again goes back.";
    if (has_field(fm, "gated"))
        lines[k++] = "gated: the real ranks stop at each algorithm step until you press n in "
                     "the views.";
    if (has_field(fm, "algo"))
        lines[k++] = "algo: auto lets each collective choose by its size and rank count; a "
                     "name asks for that algorithm, and the form, the run and its log say "
                     "where it cannot run.";
    if (has_field(fm, "trace"))
        lines[k++] = "trace: a file name saves the run as a Chrome trace, for Perfetto or to "
                     "replay here later.";
    if (!fm->l->rank_main)
        lines[k++] = "This lab is one process: it has no ranks, algorithms or gates to set.";
    lines[k] = NULL;
    return lines;
}

static void form_draw(ui_screen *s, grid *g, int x, int y, int w, int h)
{
    form *fm = s->data;
    const lab *l = fm->l;
    int row = y + 1;
    grid_printf(g, x + 2, row++, GRID_BOLD, "%s", l->title);
    view_put_clipped(g, x + 2, row++, w - 4, l->summary, GRID_DIM);
    char info[160];
    snprintf(info, sizeof info, "opens in the %s view%s", l->view ? l->view : "log",
             l->rank_main ? "" : " (a single process: its output only)");
    view_put_clipped(g, x + 2, row++, w - 4, info, GRID_DIM);
    row++;
    int nw = 14, vw = 26;
    for (int i = 0; i < fm->n; i++)
        if ((int)strlen(fm->fl[i].f->name) + 2 > nw)
            nw = (int)strlen(fm->fl[i].f->name) + 2;
    int rows_avail = h - (row - y) - 5;
    if (fm->sel < fm->top)
        fm->top = fm->sel;
    if (fm->sel < fm->n && fm->sel >= fm->top + rows_avail)
        fm->top = fm->sel - rows_avail + 1;
    for (int i = fm->top; i < fm->n && row < y + h - 5; i++) {
        field *fd = &fm->fl[i];
        int sel = i == fm->sel;
        grid_attr na = sel ? GRID_PAIR(UI_PAIR_SEL) | GRID_BOLD : 0;
        grid_put(g, x + 2, row, sel ? (g->ascii ? ">" : "▸") : " ", na);
        grid_put(g, x + 4, row, fd->f->name, na);
        int vx = x + 4 + nw;
        if (fd->f->type == FLAG_BOOL) {
            grid_put(g, vx, row, fd->on ? "[x]" : "[ ]", sel ? GRID_REVERSE : GRID_BOLD);
        } else {
            const char *ch = choices_of(fm, fd);
            grid_attr va = fd->err[0] ? GRID_PAIR(UI_PAIR_ERR) | GRID_BOLD : GRID_BOLD;
            grid_put(g, vx, row, ch ? (g->ascii ? "<" : "‹") : "[", GRID_DIM);
            grid_fill(g, vx + 1, row, vw, 1, ' ', sel ? GRID_UNDERLINE : 0);
            view_put_clipped(g, vx + 1, row, vw, fd->val, va | (sel ? GRID_UNDERLINE : 0));
            grid_put(g, vx + 1 + vw, row, ch ? (g->ascii ? ">" : "›") : "]", GRID_DIM);
            if (sel) {
                int cx = vx + 1 + grid_text_width(fd->val, (size_t)fd->cur);
                if (cx < vx + 1 + vw) {
                    const grid_cell *c = grid_get(g, cx, row);
                    grid_set(g, cx, row, c && c->ch != ' ' ? c->ch : ' ', va | GRID_REVERSE);
                }
            }
        }
        int hx = vx + vw + 4;
        char help[400];
        if (fd->err[0])
            view_put_clipped(g, hx, row, x + w - hx - 1, fd->err, GRID_PAIR(UI_PAIR_ERR));
        else if (algo_warning(fm, fd, help, sizeof help))
            view_put_clipped(g, hx, row, x + w - hx - 1, help, GRID_PAIR(UI_PAIR_WARN));
        else {
            help_text(fd->f, help, sizeof help);
            view_put_clipped(g, hx, row, x + w - hx - 1, help, GRID_DIM);
        }
        row++;
    }
    row++;
    int bad;
    int ok = all_valid(fm, &bad);
    grid_attr ba = fm->sel == fm->n ? GRID_PAIR(UI_PAIR_SEL) | GRID_REVERSE | GRID_BOLD : GRID_BOLD;
    grid_put(g, x + 4, row, ok ? "[ Launch ]" : "[ fix the red values first ]", ok ? ba :
             GRID_PAIR(UI_PAIR_ERR) | GRID_BOLD);
    row += 2;
    if (fm->msg[0]) {
        view_put_clipped(g, x + 4, row, w - 8, fm->msg, fm->msg_err ?
                         GRID_PAIR(UI_PAIR_ERR) | GRID_BOLD : GRID_DIM);
    } else if (fm->sel < fm->n) {
        /* the selected field's whole help or warning, for narrow terminals that clip it */
        const field *fd = &fm->fl[fm->sel];
        char text[400];
        grid_attr ta = GRID_DIM;
        if (fd->err[0]) {
            snprintf(text, sizeof text, "%s: %s", fd->f->name, fd->err);
            ta = GRID_PAIR(UI_PAIR_ERR);
        } else if (algo_warning(fm, fd, text, sizeof text)) {
            ta = GRID_PAIR(UI_PAIR_WARN);
        } else {
            help_text(fd->f, text, sizeof text);
        }
        const char *p = text;
        for (int line = 0; line < 3 && *p && row < y + h; line++, row++) {
            int take = (int)strlen(p);
            if (take > w - 8) {
                take = w - 8;
                while (take > 0 && p[take] != ' ')
                    take--;
                if (take == 0)
                    take = w - 8;
            }
            grid_putn(g, x + 4, row, p, (size_t)take, ta);
            p += take;
            while (*p == ' ')
                p++;
        }
    }
}

/* ---- keys ---- */

static void move_sel(form *fm, int d)
{
    fm->sel = (fm->sel + d + fm->n + 1) % (fm->n + 1);
}

static int launch(form *fm)
{
    int bad;
    if (!all_valid(fm, &bad)) {
        fm->sel = bad;
        snprintf(fm->msg, sizeof fm->msg, "%s: %s", fm->fl[bad].f->name, fm->fl[bad].err);
        fm->msg_err = 1;
        return UI_HANDLED | UI_REDRAW;
    }
    char *argv[2 * FORM_MAX + 1];
    char names[FORM_MAX][64], vals[FORM_MAX][VAL_MAX];
    int argc = 0;
    for (int i = 0; i < fm->n; i++) {
        field *fd = &fm->fl[i];
        snprintf(names[i], sizeof names[i], "--%s", fd->f->name);
        if (fd->f->type == FLAG_BOOL) {
            if (fd->on)
                argv[argc++] = names[i];
            continue;
        }
        trimmed(fd, vals[i], sizeof vals[i]);
        if (!vals[i][0])
            continue;
        argv[argc++] = names[i];
        argv[argc++] = vals[i];
    }
    argv[argc] = NULL;
    char err[600];
    ui_screen *r = run_create_job(fm->l, argc, argv, err, sizeof err);
    if (!r) {
        snprintf(fm->msg, sizeof fm->msg, "cannot launch: %.560s", err);
        fm->msg_err = 1;
        return UI_HANDLED | UI_REDRAW;
    }
    fm->msg[0] = 0;
    fm->editing = 0;
    fm->sel = fm->n;                /* back from the run: q goes back, Enter runs it again */
    ui_push(r);
    return UI_HANDLED | UI_REDRAW;
}

/* A free-text field (a file name, not the algorithm's choice). */
static int is_text(const form *fm, const field *fd)
{
    (void)fm;
    return fd->f->type == FLAG_STR && strcmp(fd->f->name, "algo") != 0;
}

static int edit(field *fd, int key)
{
    if (key == UI_KEY_BACKSPACE) {
        if (fd->cur > 0) {
            /* remove one UTF-8 character before the cursor */
            int k = fd->cur - 1;
            while (k > 0 && ((unsigned char)fd->val[k] & 0xc0) == 0x80)
                k--;
            memmove(fd->val + k, fd->val + fd->cur, (size_t)(fd->len - fd->cur) + 1);
            fd->len -= fd->cur - k;
            fd->cur = k;
        }
    } else if (key == UI_KEY_DEL) {
        if (fd->cur < fd->len) {
            int k = fd->cur + 1;
            while (k < fd->len && ((unsigned char)fd->val[k] & 0xc0) == 0x80)
                k++;
            memmove(fd->val + fd->cur, fd->val + k, (size_t)(fd->len - k) + 1);
            fd->len -= k - fd->cur;
        }
    } else if (key == UI_CTRL('u')) {
        fd->val[0] = 0;
        fd->len = fd->cur = 0;
    } else if (key == UI_KEY_HOME || key == UI_CTRL('a')) {
        fd->cur = 0;
        return 1;
    } else if (key == UI_KEY_END || key == UI_CTRL('e')) {
        fd->cur = fd->len;
        return 1;
    } else if (key >= 0x20 && key < 0x7f) {
        if (fd->len + 1 >= VAL_MAX)
            return 1;
        memmove(fd->val + fd->cur + 1, fd->val + fd->cur, (size_t)(fd->len - fd->cur) + 1);
        fd->val[fd->cur++] = (char)key;
        fd->len++;
    } else {
        return 0;
    }
    check(fd);
    return 1;
}

static int form_key(ui_screen *s, int key)
{
    form *fm = s->data;
    field *fd = fm->sel < fm->n ? &fm->fl[fm->sel] : NULL;
    fm->msg_err = fm->msg_err && key != UI_KEY_UP && key != UI_KEY_DOWN;
    if (fm->editing && (key == UI_KEY_ENTER || key == UI_KEY_ESC)) {
        fm->editing = 0;            /* the name is done; Enter again launches */
        return UI_HANDLED | UI_REDRAW;
    }
    switch (key) {
    case UI_KEY_UP: case UI_KEY_BTAB:
        fm->editing = 0;
        move_sel(fm, -1);
        return UI_HANDLED | UI_REDRAW;
    case UI_KEY_DOWN: case UI_KEY_TAB:
        fm->editing = 0;
        move_sel(fm, 1);
        return UI_HANDLED | UI_REDRAW;
    case UI_KEY_ENTER: case UI_KEY_F5:
        return launch(fm);
    case UI_KEY_ESC:
        return UI_HANDLED | UI_BACK;
    default:
        break;
    }
    if (!fd) {                  /* on the Launch button */
        if (key == ' ')
            return launch(fm);
        if (key == 'j')
            move_sel(fm, 1);
        else if (key == 'k')
            move_sel(fm, -1);
        else
            return 0;           /* q backs out here */
        return UI_HANDLED | UI_REDRAW;
    }
    if (fd->f->type == FLAG_BOOL) {
        if (key == ' ' || key == UI_KEY_LEFT || key == UI_KEY_RIGHT || key == 'x') {
            fd->on = !fd->on;
            return UI_HANDLED | UI_REDRAW;
        }
        if (key == 'j' || key == 'k') {
            move_sel(fm, key == 'j' ? 1 : -1);
            return UI_HANDLED | UI_REDRAW;
        }
        return 0;
    }
    if (key == ' ' && choices_of(fm, fd)) {
        cycle(fm, fd, 1);            /* a choice never holds a space: space picks the next */
        return UI_HANDLED | UI_REDRAW;
    }
    if (key == UI_KEY_LEFT || key == UI_KEY_RIGHT) {
        if (choices_of(fm, fd))
            cycle(fm, fd, key == UI_KEY_RIGHT ? 1 : -1);
        else if (key == UI_KEY_LEFT && fd->cur > 0)
            fd->cur--;
        else if (key == UI_KEY_RIGHT && fd->cur < fd->len)
            fd->cur++;
        fm->editing = is_text(fm, fd);      /* moving the cursor in a name starts editing */
        return UI_HANDLED | UI_REDRAW;
    }
    if ((key == 'q' || key == 'Q') && !form_typing(s))
        return 0;                   /* a number, a choice or an untouched text: back */
    if (edit(fd, key)) {
        fm->editing = is_text(fm, fd);      /* a key typed into a name: it has every key */
        return UI_HANDLED | UI_REDRAW;
    }
    return 0;
}

static void form_free(ui_screen *s)
{
    free(s->data);
    free(s);
}

/* A selected free-text field takes every printable key while it is empty (a name may start
 * with q) or being edited; one that holds a value not touched yet, a number and a choice
 * (which never hold a q) leave q to go back. */
static int form_typing(ui_screen *s)
{
    form *fm = s->data;
    if (fm->sel >= fm->n || !is_text(fm, &fm->fl[fm->sel]))
        return 0;
    return fm->editing || fm->fl[fm->sel].len == 0;
}

static const ui_screen_class form_class = {
    .name = "form",
    .title = form_title,
    .keys = form_keys,
    .help = form_help,
    .draw = form_draw,
    .key = form_key,
    .tick = NULL,
    .free = form_free,
    .typing = form_typing,
};

ui_screen *form_create(const lab *l)
{
    form *fm = mlsys_xcalloc(1, sizeof *fm);
    fm->l = l;
    collect_algos(fm);
    for (const lab_flag *f = l->flags; f && f->name; f++)
        add_field(fm, f);
    for (const lab_flag *f = lab_rank_flags; lab_on_ranks(l) && f->name; f++)
        add_field(fm, f);
    for (const lab_flag *f = lab_common_flags; f->name; f++)
        add_field(fm, f);
    ui_screen *s = mlsys_xcalloc(1, sizeof *s);
    s->cls = &form_class;
    s->data = fm;
    return s;
}
