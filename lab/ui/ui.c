/* ui.c - the shell of the front end: curses set-up and tear-down (also on Ctrl-C, SIGTERM,
 * SIGHUP and crashes), colours (256, 16 or none), the screen stack and its event loop, the
 * title bar, footer, help overlay and the "terminal too small" notice, and the one place
 * where the off-screen grid is copied to curses. Without ncursesw it says so and stops. */
#include "ui.h"
#include <errno.h>
#include <langinfo.h>
#include <locale.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define UI_IDLE_MS 500          /* the loop wakes this often when nothing happens */
#define UI_MAX_SCREENS 8

/* The shell's keys: one meaning each on every screen. q goes back one screen (on the first
 * one it quits); Q quits from anywhere, asking first while a job runs; Esc goes back too. */
static const ui_key_help foot_back[] = {{"?/F1", "help"}, {"q", "back"}, {NULL, NULL}};
static const ui_key_help foot_quit[] = {{"?/F1", "help"}, {"q", "quit"}, {NULL, NULL}};
static const ui_key_help foot_typing[] = {{"F1", "help"}, {NULL, NULL}};
/* The help's lists: [busy] (a job runs: Ctrl-C and q stop its ranks) */
static const ui_key_help help_back[2][5] = {
    {{"?/F1", "this help (j/k scroll it)"}, {"q/Esc", "go back one step"},
     {"Q/F10", "quit the lab"}, {"Ctrl-C", "quit at once"}, {NULL, NULL}},
    {{"?/F1", "this help (j/k scroll it)"}, {"q/Esc", "stop every rank and go back (asks first)"},
     {"Q/F10", "quit the lab (asks first while a job runs)"},
     {"Ctrl-C", "stop every rank and quit"}, {NULL, NULL}},
};
static const ui_key_help help_quit[2][4] = {
    {{"?/F1", "this help (j/k scroll it)"}, {"q/Q/F10", "quit the lab"},
     {"Ctrl-C", "quit at once"}, {NULL, NULL}},
    {{"?/F1", "this help (j/k scroll it)"}, {"q/Q/F10", "quit the lab (asks first)"},
     {"Ctrl-C", "stop every rank and quit"}, {NULL, NULL}},
};
static const ui_key_help help_typing[2][4] = {
    {{"F1", "this help (j/k scroll it)"}, {"Esc", "leave the field"},
     {"Ctrl-C", "quit at once"}, {NULL, NULL}},
    {{"F1", "this help (j/k scroll it)"}, {"Esc", "leave the field"},
     {"Ctrl-C", "stop every rank and quit"}, {NULL, NULL}},
};

const ui_key_help *ui_global_keys(int depth, int typing, int busy, int help)
{
    busy = busy != 0;
    if (typing)
        return help ? help_typing[busy] : foot_typing;
    if (depth <= 1)
        return help ? help_quit[busy] : foot_quit;
    return help ? help_back[busy] : foot_back;
}

int ui_shell_key(int key, int typing, int busy)
{
    if (key == UI_KEY_F1 || (key == '?' && !typing))
        return UI_SHELL_HELP;
    if (key == UI_KEY_F10 || (key == 'Q' && !typing))
        return busy ? UI_SHELL_CONFIRM : UI_SHELL_QUIT;
    return UI_SHELL_PASS;
}

/* ---- options ---- */

static ui_opts g_opts;

const ui_opts *ui_options(void)
{
    return &g_opts;
}

/* The front end's flags, shared by `mlsys-lab ui` and `mlsys-lab replay`. */
const lab_flag ui_flags[] = {
    {"no-color", 0, FLAG_BOOL, NULL, NULL, 0, 0, "no colours (also NO_COLOR=1)"},
    {"no-colour", 0, FLAG_BOOL, NULL, NULL, 0, 0, NULL},
    {"ascii", 0, FLAG_BOOL, NULL, NULL, 0, 0,
     "ASCII only (the default where the terminal is not UTF-8)"},
    {"no-mouse", 0, FLAG_BOOL, NULL, NULL, 0, 0, "no wheel or clicks"},
    {NULL, 0, 0, NULL, NULL, 0, 0, NULL}
};

const lab_command ui_command = {
    .name = "ui", .args = "",
    .summary = "Open the lab (what no command does in a terminal).",
    .flags = ui_flags,
};

void ui_opts_from(const lab_args *a, ui_opts *o)
{
    const char *nc = getenv("NO_COLOR");
    o->color = !(nc && *nc) && !lab_arg_bool(a, "no-color") && !lab_arg_bool(a, "no-colour");
    o->mouse = !lab_arg_bool(a, "no-mouse");
    setlocale(LC_ALL, "");
    const char *cs = nl_langinfo(CODESET);
    o->ascii = lab_arg_bool(a, "ascii") ||
               !(cs && (!strcmp(cs, "UTF-8") || !strcmp(cs, "utf8")));
    g_opts = *o;
}

/* ---- capture of in-process output (a lab's before/after hooks) ---- */

char *ui_capture(int (*fn)(void *), void *arg, int *rc)
{
    fflush(stdout);
    fflush(stderr);
    int fd = memfd_create("mlsys-ui-capture", MFD_CLOEXEC);
    int so = dup(STDOUT_FILENO), se = dup(STDERR_FILENO);
    if (fd < 0 || so < 0 || se < 0) {
        if (fd >= 0)
            close(fd);
        if (so >= 0)
            close(so);
        if (se >= 0)
            close(se);
        *rc = fn(arg);
        return NULL;
    }
    dup2(fd, STDOUT_FILENO);
    dup2(fd, STDERR_FILENO);
    *rc = fn(arg);
    fflush(stdout);
    fflush(stderr);
    dup2(so, STDOUT_FILENO);
    dup2(se, STDERR_FILENO);
    close(so);
    close(se);
    off_t len = lseek(fd, 0, SEEK_END);
    char *text = mlsys_xrealloc(NULL, (size_t)(len > 0 ? len : 0) + 1);
    size_t got = 0;
    if (len > 0 && lseek(fd, 0, SEEK_SET) == 0)
        while (got < (size_t)len) {
            ssize_t k = read(fd, text + got, (size_t)len - got);
            if (k <= 0)
                break;
            got += (size_t)k;
        }
    text[got] = 0;
    close(fd);
    return text;
}

/* ---- parts every screen shares ---- */

static void draw_footer_with(grid *g, int y, int w, const ui_key_help *keys,
                             const ui_key_help *global_keys);

void ui_draw_footer(grid *g, int y, int w, const ui_key_help *keys)
{
    draw_footer_with(g, y, w, keys, foot_back);
}

static void draw_footer_with(grid *g, int y, int w, const ui_key_help *keys,
                             const ui_key_help *global_keys)
{
    grid_fill(g, 0, y, w, 1, ' ', GRID_PAIR(UI_PAIR_BAR) | GRID_REVERSE);
    /* the global keys (help, back) always fit: the screen's own keys get what is left */
    int reserve = 0;
    for (const ui_key_help *k = global_keys; k->key; k++)
        reserve += grid_text_width(k->key, strlen(k->key)) + 1 +
                   grid_text_width(k->what, strlen(k->what)) + 2;
    int x = 1;
    for (int pass = 0; pass < 2; pass++) {
        const ui_key_help *k = pass == 0 ? keys : global_keys;
        for (; k && k->key; k++) {
            int kw = grid_text_width(k->key, strlen(k->key));
            int ww = grid_text_width(k->what, strlen(k->what));
            if (x + kw + 1 + ww + 2 + (pass == 0 ? reserve : 0) > w) {
                if (pass == 0)
                    break;              /* what does not fit is in the help overlay */
                return;
            }
            x += grid_put(g, x, y, k->key, GRID_PAIR(UI_PAIR_KEY) | GRID_REVERSE | GRID_BOLD);
            x += 1;
            x += grid_put(g, x, y, k->what, GRID_PAIR(UI_PAIR_BAR) | GRID_REVERSE);
            x += 2;
        }
    }
}

/* Lay out text in lines of at most w columns, breaking at spaces; calls put for each line
 * (put may be NULL to count). Returns the number of lines. */
static int wrap_text(const char *s, int w, void (*put)(void *, const char *, size_t), void *u)
{
    int n = 0;
    while (*s) {
        size_t len = strlen(s), take = len;
        if (grid_text_width(s, len) > w) {
            take = 0;
            size_t last_space = 0, i = 0;
            while (i < len) {
                uint32_t cp;
                size_t k = grid_utf8_decode(s + i, len - i, &cp);
                if (grid_text_width(s, i + k) > w)
                    break;
                if (cp == ' ')
                    last_space = i;
                i += k;
            }
            take = last_space ? last_space : (i ? i : 1);
        }
        if (put)
            put(u, s, take);
        n++;
        s += take;
        while (*s == ' ')
            s++;
    }
    return n;
}

/* The overlay's rows: the keys (screen's, then the shell's), a blank row, the wrapped lines.
 * Drawn from row `top` on so that a tall help scrolls inside a short terminal. */
typedef struct help_rows {
    grid *g;
    int x, y, h, top, row, kw, w;
} help_rows;

static int help_visible(help_rows *hr)
{
    return hr->row >= hr->top && hr->row - hr->top < hr->h;
}

static void put_help_line(void *u, const char *s, size_t len)
{
    help_rows *p = u;
    if (p->g && help_visible(p))
        grid_putn(p->g, p->x, p->y + p->row - p->top, s, len, GRID_DIM);
    p->row++;
}

static int help_body(help_rows *hr, const ui_key_help *global, const ui_key_help *keys,
                     const char *const *lines)
{
    hr->row = 0;
    for (int pass = 0; pass < 2; pass++) {
        for (const ui_key_help *k = pass ? global : keys; k && k->key; k++) {
            if (hr->g && help_visible(hr)) {
                int ry = hr->y + hr->row - hr->top;
                grid_put(hr->g, hr->x, ry, k->key, GRID_PAIR(UI_PAIR_KEY) | GRID_BOLD);
                view_put_clipped(hr->g, hr->x + 2 + hr->kw, ry, hr->w - hr->kw - 2, k->what, 0);
            }
            hr->row++;
        }
        if (pass == 0 && keys && keys->key)
            hr->row++;
    }
    if (lines && lines[0])
        hr->row++;
    for (int i = 0; lines && lines[i]; i++)
        wrap_text(lines[i], hr->w, put_help_line, hr);
    return hr->row;
}

int ui_draw_help_at(grid *g, const char *title, const ui_key_help *global,
                    const ui_key_help *keys, const char *const *lines, int *top)
{
    int kw = 0;
    for (int pass = 0; pass < 2; pass++)
        for (const ui_key_help *k = pass ? global : keys; k && k->key; k++) {
            int w = grid_text_width(k->key, strlen(k->key));
            if (w > kw)
                kw = w;
        }
    int w = g->w - 8 < 84 ? g->w - 8 : 84;
    help_rows hr = {NULL, 0, 0, 0, 0, 0, kw, w - 6};
    int total = help_body(&hr, global, keys, lines);
    int h = total + 4;
    if (h > g->h - 2)
        h = g->h - 2;
    int body = h - 4, maxtop = total - body > 0 ? total - body : 0;
    if (*top > maxtop)
        *top = maxtop;
    if (*top < 0)
        *top = 0;
    int x = (g->w - w) / 2, y = (g->h - h) / 2;
    grid_fill(g, x, y, w, h, ' ', 0);
    grid_box(g, x, y, w, h, 1, GRID_PAIR(UI_PAIR_TITLE) | GRID_BOLD);
    grid_printf(g, x + 2, y, GRID_BOLD, " help: %s ", title);
    hr = (help_rows){g, x + 3, y + 2, body, *top, 0, kw, w - 6};
    help_body(&hr, global, keys, lines);
    char close[96];
    if (maxtop > 0)
        snprintf(close, sizeof close, " %d-%d of %d %s j/k scroll %s Esc closes ", *top + 1,
                 *top + body, total, g->ascii ? "-" : "·", g->ascii ? "-" : "·");
    else
        snprintf(close, sizeof close, " Esc or any key closes ");
    int cw = grid_text_width(close, strlen(close));
    grid_put(g, x + w - 3 - cw, y + h - 1, close, GRID_DIM);
    return *top < maxtop;
}

void ui_draw_help(grid *g, const char *title, const ui_key_help *global,
                  const ui_key_help *keys, const char *const *lines)
{
    int top = 0;
    ui_draw_help_at(g, title, global, keys, lines, &top);
}

void ui_draw_confirm_quit(grid *g)
{
    ui_draw_confirm(g, 0);
}

void ui_draw_confirm(grid *g, int back)
{
    const char *a = "A job is running.";
    const char *b = back ? "Stop every rank and go back?" : "Quit MLSys Lab and stop every rank?";
    const char *c = back ? "y back    n or Esc stay" : "y quit    n or Esc stay";
    int w = 44, h = 7, x = (g->w - w) / 2, y = (g->h - h) / 2;
    grid_fill(g, x, y, w, h, ' ', 0);
    grid_box(g, x, y, w, h, 1, GRID_PAIR(UI_PAIR_WARN) | GRID_BOLD);
    grid_put(g, x + 2, y, back ? " back? " : " quit? ", GRID_BOLD);
    grid_put(g, x + 3, y + 2, a, GRID_BOLD);
    grid_put(g, x + 3, y + 3, b, 0);
    grid_put(g, x + 3, y + 5, c, GRID_PAIR(UI_PAIR_KEY) | GRID_BOLD);
}

void ui_draw_too_small(grid *g, int need_w, int need_h)
{
    char a[96], b[96];
    snprintf(a, sizeof a, "MLSys Lab needs a terminal of at least %dx%d;", need_w, need_h);
    snprintf(b, sizeof b, "this one is %dx%d. Enlarge it, or press q to quit.", g->w, g->h);
    const char *lines[] = {a, b};
    grid_clear(g);
    for (int i = 0; i < 2; i++) {
        int len = (int)strlen(lines[i]);
        int y = g->h / 2 - 1 + i;
        if (len <= g->w) {
            grid_put(g, (g->w - len) / 2, y < 0 ? 0 : y, lines[i], GRID_BOLD);
            continue;
        }
        /* narrower than the sentence: wrap it by words */
        int row = i * (g->h / 2 > 2 ? g->h / 2 : 1);
        const char *p = lines[i];
        while (*p && row < g->h) {
            int take = (int)strlen(p);
            if (take > g->w) {
                take = g->w;
                while (take > 0 && p[take] != ' ')
                    take--;
                if (take == 0)
                    take = g->w;
            }
            grid_putn(g, 0, row++, p, (size_t)take, GRID_BOLD);
            p += take;
            while (*p == ' ')
                p++;
        }
    }
}

#ifdef HAVE_NCURSES
#include <curses.h>
#include <wchar.h>

/* ---- terminal state, restored on every way out ---- */

static volatile sig_atomic_t g_curses_on;
static int g_full_redraw;       /* the terminal was handed to another program: repaint all */
static ui_screen *g_stack[UI_MAX_SCREENS];
static int g_nstack;
static int g_mx, g_my;

int ui_mouse_x(void) { return g_mx; }
int ui_mouse_y(void) { return g_my; }

static void restore_terminal(void)
{
    if (g_curses_on) {
        g_curses_on = 0;
        endwin();
        fflush(stdout);
    }
}

/* A crash of the front end itself: give the terminal back, then die of the same signal.
 * The ranks die with us (the launcher set PR_SET_PDEATHSIG). */
static void on_fatal(int sig)
{
    restore_terminal();
    signal(sig, SIG_DFL);
    raise(sig);
}

static void install_fatal_handlers(void)
{
    static const int sigs[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_fatal;
        sigemptyset(&sa.sa_mask);
        sa.sa_flags = SA_RESETHAND;
        sigaction(sigs[i], &sa, NULL);
    }
    signal(SIGPIPE, SIG_IGN);
}

/* ---- colours ---- */

static int g_color_on;

static void pair(int n, int fg, int bg)
{
    init_pair((short)n, (short)fg, (short)bg);
}

static void setup_colors(void)
{
    g_color_on = 0;
    if (!g_opts.color || !has_colors() || start_color() == ERR)
        return;
    use_default_colors();
    g_color_on = 1;
    int c256 = COLORS >= 256 && COLOR_PAIRS >= UI_PAIR_COUNT;
    /* rank hues chosen to stay apart from the "complete" green and "partial" yellow */
    static const int rank256[8] = {33, 208, 170, 37, 203, 99, 142, 130};
    static const int rank8[8] = {COLOR_BLUE, COLOR_MAGENTA, COLOR_CYAN, COLOR_RED,
                                 COLOR_BLUE, COLOR_MAGENTA, COLOR_CYAN, COLOR_RED};
    pair(1, c256 ? 75 : COLOR_CYAN, -1);            /* MD_PAIR_HEADING */
    pair(2, c256 ? 114 : COLOR_GREEN, -1);          /* MD_PAIR_CODE */
    pair(3, c256 ? 67 : COLOR_BLUE, -1);            /* MD_PAIR_QUOTE */
    pair(4, c256 ? 81 : COLOR_CYAN, -1);            /* MD_PAIR_LINK */
    pair(5, c256 ? 60 : COLOR_BLUE, -1);            /* MD_PAIR_RULE */
    pair(6, c256 ? 214 : COLOR_YELLOW, -1);         /* MD_PAIR_NOTICE */
    pair(UI_PAIR_TITLE, c256 ? 75 : COLOR_CYAN, -1);
    pair(UI_PAIR_BAR, c256 ? 250 : COLOR_WHITE, -1);
    pair(UI_PAIR_KEY, c256 ? 226 : COLOR_YELLOW, -1);
    pair(UI_PAIR_SEL, c256 ? 75 : COLOR_CYAN, -1);
    pair(UI_PAIR_ERR, c256 ? 196 : COLOR_RED, -1);
    pair(UI_PAIR_OK, c256 ? 40 : COLOR_GREEN, -1);
    pair(UI_PAIR_WARN, c256 ? 214 : COLOR_YELLOW, -1);
    pair(UI_PAIR_DIM, c256 ? 244 : COLOR_WHITE, -1);
    pair(UI_PAIR_FULL, COLOR_BLACK, c256 ? 41 : COLOR_GREEN);
    pair(UI_PAIR_PARTIAL, COLOR_BLACK, c256 ? 221 : COLOR_YELLOW);
    for (int r = 0; r < 8; r++) {
        pair(UI_PAIR_RANK0 + r, c256 ? rank256[r] : rank8[r], -1);
        pair(UI_PAIR_CELL0 + r, COLOR_BLACK, c256 ? rank256[r] : rank8[r]);
    }
}

/* In monochrome, the pairs that carry meaning become attributes. */
static attr_t mono_attr(unsigned p)
{
    switch (p) {
    case UI_PAIR_SEL: case UI_PAIR_FULL: return A_REVERSE;
    case UI_PAIR_ERR: case UI_PAIR_KEY: case 1: return A_BOLD;
    default: return 0;
    }
}

static attr_t curses_attr(grid_attr a)
{
    attr_t at = 0;
    if (a & GRID_BOLD)
        at |= A_BOLD;
    if (a & GRID_UNDERLINE)
        at |= A_UNDERLINE;
    if (a & GRID_ITALIC)
#ifdef A_ITALIC
        at |= A_ITALIC;
#else
        at |= A_UNDERLINE;
#endif
    if (a & GRID_REVERSE)
        at |= A_REVERSE;
    if (a & GRID_DIM)
        at |= A_DIM;
    unsigned p = GRID_PAIR_OF(a);
    if (p && !g_color_on)
        at |= mono_attr(p);
    return at;
}

/* ---- the one place that writes to the terminal ---- */

static grid *g_prev;

static void blit(const grid *g, int force)
{
    if (!g_prev || g_prev->w != g->w || g_prev->h != g->h) {
        grid_free(g_prev);
        g_prev = grid_create(g->w, g->h);
        force = 1;
    }
    for (int y = 0; y < g->h; y++)
        for (int x = 0; x < g->w; x++) {
            const grid_cell *c = &g->cells[(size_t)y * (size_t)g->w + (size_t)x];
            grid_cell *p = &g_prev->cells[(size_t)y * (size_t)g->w + (size_t)x];
            if (!force && c->ch == p->ch && c->attr == p->attr)
                continue;
            *p = *c;
            if (c->ch == GRID_TAIL)
                continue;
            /* the bottom-right corner cannot be written without scrolling some terminals */
            if (y == g->h - 1 && x == g->w - 1)
                continue;
            wchar_t wc[2] = {(wchar_t)(g->ascii && c->ch >= 0x80 ? '?' : c->ch), 0};
            cchar_t cc;
            unsigned pn = GRID_PAIR_OF(c->attr);
            setcchar(&cc, wc, curses_attr(c->attr), (short)(g_color_on ? pn : 0), NULL);
            mvadd_wch(y, x, &cc);
        }
    wnoutrefresh(stdscr);
    doupdate();
}

static int map_key(int ch)
{
    switch (ch) {
    case KEY_UP: return UI_KEY_UP;
    case KEY_DOWN: return UI_KEY_DOWN;
    case KEY_LEFT: return UI_KEY_LEFT;
    case KEY_RIGHT: return UI_KEY_RIGHT;
    case KEY_PPAGE: return UI_KEY_PGUP;
    case KEY_NPAGE: return UI_KEY_PGDN;
    case KEY_HOME: return UI_KEY_HOME;
    case KEY_END: return UI_KEY_END;
    case KEY_BTAB: return UI_KEY_BTAB;
    case KEY_DC: return UI_KEY_DEL;
    case KEY_F(1): return UI_KEY_F1;
    case KEY_F(5): return UI_KEY_F5;
    case KEY_F(10): return UI_KEY_F10;
    case KEY_RESIZE: return UI_KEY_RESIZE;
    case KEY_ENTER: case '\r': case '\n': return UI_KEY_ENTER;
    case KEY_BACKSPACE: case 8: case 127: return UI_KEY_BACKSPACE;
    case KEY_MOUSE: {
        MEVENT me;
        if (getmouse(&me) != OK)
            return UI_KEY_NONE;
        g_mx = me.x;
        g_my = me.y;
        if (me.bstate & BUTTON4_PRESSED)
            return UI_KEY_WHEEL_UP;
#ifdef BUTTON5_PRESSED
        if (me.bstate & BUTTON5_PRESSED)
            return UI_KEY_WHEEL_DOWN;
#endif
        if (me.bstate & (BUTTON1_PRESSED | BUTTON1_CLICKED))
            return UI_KEY_CLICK;
        return UI_KEY_NONE;
    }
    default:
        return ch >= 0 && ch < 0x1000 ? ch : UI_KEY_NONE;
    }
}

static void enable_mouse(void)
{
    if (!g_opts.mouse)
        return;
    mousemask(BUTTON1_PRESSED | BUTTON1_CLICKED | BUTTON4_PRESSED
#ifdef BUTTON5_PRESSED
              | BUTTON5_PRESSED
#endif
              , NULL);
    mouseinterval(0);
}

int ui_shell_out(int (*fn)(void *), void *arg)
{
    if (!g_curses_on)
        return fn(arg);
    /* like system(): the program in the terminal gets Ctrl-C and Ctrl-\, not us */
    struct sigaction ign, old_int, old_quit;
    memset(&ign, 0, sizeof ign);
    ign.sa_handler = SIG_IGN;
    sigemptyset(&ign.sa_mask);
    sigaction(SIGINT, &ign, &old_int);
    sigaction(SIGQUIT, &ign, &old_quit);
    def_prog_mode();
    endwin();
    g_curses_on = 0;
    fflush(stdout);
    int rc = fn(arg);
    reset_prog_mode();
    g_curses_on = 1;
    keypad(stdscr, TRUE);
    curs_set(0);
    enable_mouse();
    clearok(curscr, TRUE);
    refresh();
    g_full_redraw = 1;
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGQUIT, &old_quit, NULL);
    return rc;
}

void ui_push(ui_screen *s)
{
    if (g_nstack == UI_MAX_SCREENS) {
        s->cls->free(s);
        return;
    }
    g_stack[g_nstack++] = s;
}

static void pop(void)
{
    if (g_nstack > 0) {
        ui_screen *s = g_stack[--g_nstack];
        s->cls->free(s);
    }
}

static int screen_typing(ui_screen *s)
{
    return s->cls->typing && s->cls->typing(s);
}

static int screen_busy(ui_screen *s)
{
    return s->cls->busy && s->cls->busy(s);
}

/* The depth the shell's keys are told about: a screen with a part to back out of counts
 * as one deeper, so that its q says "back". */
static int key_depth(ui_screen *s)
{
    return g_nstack + (s->cls->inner && s->cls->inner(s) ? 1 : 0);
}

static void draw_all(grid *g, int help_open, int *help_top, int *help_more, int confirm)
{
    grid_clear(g);
    if (g->w < UI_MIN_W || g->h < UI_MIN_H) {
        ui_draw_too_small(g, UI_MIN_W, UI_MIN_H);
        return;
    }
    ui_screen *s = g_stack[g_nstack - 1];
    int typing = screen_typing(s);
    char title[256] = "";
    if (s->cls->title)
        s->cls->title(s, title, sizeof title);
    grid_fill(g, 0, 0, g->w, 1, ' ', GRID_PAIR(UI_PAIR_TITLE) | GRID_REVERSE);
    int x = 1 + grid_put(g, 1, 0, "MLSys Lab", GRID_PAIR(UI_PAIR_TITLE) | GRID_REVERSE | GRID_BOLD);
    if (title[0]) {
        x += grid_put(g, x, 0, g->ascii ? " - " : " · ", GRID_PAIR(UI_PAIR_TITLE) | GRID_REVERSE);
        view_put_clipped(g, x, 0, g->w - x - 1, title, GRID_PAIR(UI_PAIR_TITLE) | GRID_REVERSE);
    }
    const ui_key_help *keys = s->cls->keys ? s->cls->keys(s) : NULL;
    s->cls->draw(s, g, 0, 1, g->w, g->h - 2);
    grid_unclip(g);
    int busy = screen_busy(s);
    draw_footer_with(g, g->h - 1, g->w, keys, ui_global_keys(key_depth(s), typing, busy, 0));
    if (help_open)
        *help_more = ui_draw_help_at(g, title[0] ? title : s->cls->name,
                                     ui_global_keys(key_depth(s), typing, busy, 1), keys,
                                     s->cls->help ? s->cls->help(s) : NULL, help_top);
    if (confirm)
        ui_draw_confirm(g, confirm == 2);
}

/* Keys while the help is open: scrolling keys scroll it, any other closes it. */
static int help_scroll_key(int key, int *top, int page)
{
    switch (key) {
    case 'j': case UI_KEY_DOWN: case UI_KEY_WHEEL_DOWN: (*top)++; return 1;
    case 'k': case UI_KEY_UP: case UI_KEY_WHEEL_UP: (*top)--; return 1;
    case ' ': case UI_KEY_PGDN: *top += page; return 1;
    case 'b': case UI_KEY_PGUP: *top -= page; return 1;
    case 'g': case UI_KEY_HOME: *top = 0; return 1;
    case 'G': case UI_KEY_END: *top = 1 << 20; return 1;
    default: return 0;
    }
}

int ui_run(const ui_opts *o, ui_screen *first)
{
    g_opts = *o;
    g_nstack = 0;
    ui_push(first);
    if (!isatty(STDIN_FILENO) || !isatty(STDOUT_FILENO)) {
        fprintf(stderr, "mlsys-lab: the front end needs a terminal (stdin and stdout); "
                "try `mlsys-lab list` and `mlsys-lab run LAB`\n");
        while (g_nstack)
            pop();
        return 2;
    }
    /* Ctrl-C, SIGTERM and SIGHUP only set a flag (the job's stop flag); the loop below
     * then stops the job, restores the terminal and leaves. Installed before initscr so
     * that curses keeps its hands off them. */
    mlsys_job_install_signal_stop();
    install_fatal_handlers();
    atexit(restore_terminal);
    if (!initscr()) {
        fprintf(stderr, "mlsys-lab: cannot initialise the terminal (TERM=%s)\n",
                getenv("TERM") ? getenv("TERM") : "");
        while (g_nstack)
            pop();
        return 2;
    }
    g_curses_on = 1;
    cbreak();
    noecho();
    nonl();
    keypad(stdscr, TRUE);
    set_escdelay(25);
    curs_set(0);
    setup_colors();
    enable_mouse();
    grid *g = grid_create(COLS, LINES);
    grid_set_ascii(g, g_opts.ascii);
    int flags = UI_REDRAW, help_open = 0, help_top = 0, help_more = 0, confirm = 0;
    int force = 1, status = 0;
    while (g_nstack > 0) {
        if (mlsys_job_stop_requested()) {
            status = 130;
            break;
        }
        int tmo = UI_IDLE_MS;
        ui_screen *s = g_stack[g_nstack - 1];
        if (s->cls->tick)
            flags |= s->cls->tick(s, mlsys_now_ns(), &tmo);
        if (flags & (UI_BACK | UI_QUIT)) {
            if (flags & UI_QUIT)
                break;
            pop();
            flags = UI_REDRAW;
            continue;
        }
        if (g_full_redraw) {
            g_full_redraw = 0;
            force = 1;
            flags |= UI_REDRAW;
        }
        if (flags & (UI_REDRAW | UI_RELAYOUT)) {
            draw_all(g, help_open, &help_top, &help_more, confirm);
            blit(g, force);
            force = 0;
            flags = 0;
        }
        timeout(tmo < 0 ? 0 : tmo);
        int ch = getch();
        if (ch == ERR)
            continue;
        int key = map_key(ch);
        if (key == UI_KEY_NONE)
            continue;
        if (key == UI_KEY_RESIZE) {
            grid_resize(g, COLS, LINES);
            clearok(stdscr, TRUE);
            force = 1;
            flags |= UI_RELAYOUT | UI_REDRAW;
            continue;
        }
        if (g->w < UI_MIN_W || g->h < UI_MIN_H) {
            if (key == 'q' || key == 'Q' || key == UI_KEY_F10)
                break;
            continue;
        }
        if (confirm) {
            int back = confirm == 2;
            confirm = 0;
            flags |= UI_REDRAW;
            if (back && (key == 'y' || key == 'Y' || key == 'q' || key == UI_KEY_ENTER)) {
                pop();
                continue;
            }
            if (!back && (key == 'y' || key == 'Y' || key == 'Q' || key == UI_KEY_ENTER))
                break;
            continue;
        }
        if (help_open) {
            if (help_scroll_key(key, &help_top, g->h / 2)) {
                flags |= UI_REDRAW;
                continue;
            }
            help_open = 0;
            flags |= UI_REDRAW;
            continue;
        }
        int typing = screen_typing(s);
        switch (ui_shell_key(key, typing, screen_busy(s))) {
        case UI_SHELL_HELP:
            help_open = 1;
            help_top = 0;
            flags |= UI_REDRAW;
            continue;
        case UI_SHELL_QUIT:
            flags |= UI_QUIT;
            break;
        case UI_SHELL_CONFIRM:
            confirm = 1;
            flags |= UI_REDRAW;
            continue;
        default:
            break;
        }
        if (flags & UI_QUIT)
            break;
        int r = s->cls->key ? s->cls->key(s, key) : 0;
        flags |= r;
        if (!(r & UI_HANDLED) && ((key == 'q' && !typing) || key == UI_KEY_ESC)) {
            if (screen_busy(s) && g_nstack > 1) {
                confirm = 2;            /* going back stops the job: ask, as Q does */
                flags |= UI_REDRAW;
                continue;
            }
            flags |= UI_BACK;
        }
        if (flags & UI_QUIT)
            break;
        if (flags & UI_BACK) {
            pop();
            flags = UI_REDRAW;
        }
    }
    /* stop any job (the screens' free does it), then give the terminal back */
    while (g_nstack)
        pop();
    grid_free(g);
    grid_free(g_prev);
    g_prev = NULL;
    restore_terminal();
    if (status == 130)
        fprintf(stderr, "mlsys-lab: interrupted; every rank was stopped\n");
    return status;
}

#else   /* no ncursesw: the commands still exist and say why they cannot run */

int ui_mouse_x(void) { return 0; }
int ui_mouse_y(void) { return 0; }

int ui_shell_out(int (*fn)(void *), void *arg)
{
    return fn(arg);
}

void ui_push(ui_screen *s)
{
    s->cls->free(s);
}

int ui_run(const ui_opts *o, ui_screen *first)
{
    (void)o;
    first->cls->free(first);
    fprintf(stderr, "mlsys-lab: this build has no terminal UI (ncursesw was not found: "
            "install libncurses-dev and rebuild); `mlsys-lab list` and `mlsys-lab run LAB` "
            "work without it\n");
    return 2;
}

#endif

int ui_is_terminal(void)
{
    return isatty(STDIN_FILENO) && isatty(STDOUT_FILENO);
}

int ui_is_flag(const char *arg)
{
    if (!arg || strncmp(arg, "--", 2))
        return 0;
    for (const lab_flag *f = ui_flags; f->name; f++)
        if (!strcmp(arg + 2, f->name))
            return 1;
    return 0;
}

int ui_main(int argc, char **argv)
{
    lab_args a;
    int rc = lab_command_args(&ui_command, argc, argv, &a);
    if (rc >= 0)
        return rc;
    ui_opts o;
    ui_opts_from(&a, &o);
    lab_args_free(&a);
    return ui_run(&o, home_create());
}
