/* ui.h - the ncurses front end: a stack of screens (home, launcher form, live run or replay)
 * driven by one event loop that blocks in getch with a timeout, turns the reaction flags of
 * key handlers and ticks into at most one redraw per turn, renders every screen into an
 * off-screen grid and copies the grid to curses in one place (ui.c). Table of contents of
 * lab/ui/: ui*.c, home.c, expane.c and form.c. */
#ifndef MLSYS_UI_H
#define MLSYS_UI_H

#include "../lab.h"
#include "../../core/trace.h"
#include "views/view.h"

#define UI_MIN_W 80             /* below this the shell only says how big it needs to be */
#define UI_MIN_H 24

typedef struct ui_opts {
    int color;                  /* 1 colours (256 or 16 as the terminal has), 0 none */
    int ascii;                  /* 1: ASCII only (--ascii or a terminal that is not UTF-8) */
    int mouse;                  /* 1: wheel and clicks */
} ui_opts;

typedef struct ui_screen ui_screen;

/* A screen is a class, like a view: a table of functions and private data. */
typedef struct ui_screen_class {
    const char *name;
    /* The title bar's text after "MLSys Lab". */
    void (*title)(ui_screen *s, char *out, size_t n);
    /* The keys that work here now, for the footer and the help overlay (key == NULL ends). */
    const ui_key_help *(*keys)(ui_screen *s);
    /* Extra lines for the help overlay (NULL-terminated), or NULL. */
    const char *const *(*help)(ui_screen *s);
    /* The body: the rectangle between the title bar and the footer. */
    void (*draw)(ui_screen *s, grid *g, int x, int y, int w, int h);
    int (*key)(ui_screen *s, int key);
    /* Background work (a job's output and events, animation). Returns reaction flags and
     * lowers *timeout_ms to when it wants to run again (it starts at the idle timeout). */
    int (*tick)(ui_screen *s, uint64_t now_ns, int *timeout_ms);
    void (*free)(ui_screen *s);
    /* Optional. 1 while a text field has every key (q and Q are text then, only F1 opens
     * the help and Esc leaves the field). */
    int (*typing)(ui_screen *s);
    /* Optional. 1 while a job runs: Q then asks before it quits. */
    int (*busy)(ui_screen *s);
    /* Optional. 1 when q backs out of a part of this screen (home's reader) instead of
     * leaving it: the footer then says "q back" even on the first screen. */
    int (*inner)(ui_screen *s);
} ui_screen_class;

struct ui_screen {
    const ui_screen_class *cls;
    void *data;
};

/* ui.c: the shell */
/* The front end's flags (--no-color --ascii --no-mouse), `mlsys-lab ui` declared with them,
 * and the options they give with NO_COLOR and the locale (kept for ui_options()). */
extern const lab_flag ui_flags[];
extern const lab_command ui_command;
void ui_opts_from(const lab_args *a, ui_opts *o);
/* Run the loop on a first screen until the last screen is gone; frees every screen. */
int ui_run(const ui_opts *o, ui_screen *first);
void ui_push(ui_screen *s);             /* open a screen on top (from a key handler) */
const ui_opts *ui_options(void);
int ui_mouse_x(void);                   /* where the last click was (UI_KEY_CLICK) */
int ui_mouse_y(void);
/* The shell's own parts, drawn by every screen the same way (also used by tests). */
void ui_draw_footer(grid *g, int y, int w, const ui_key_help *keys);
void ui_draw_help(grid *g, const char *title, const ui_key_help *global,
                  const ui_key_help *keys, const char *const *lines);
/* The same scrolled down by *top rows (clamped here: the overlay scrolls when its text is
 * taller than the terminal); returns 1 when there is more to scroll to below. */
int ui_draw_help_at(grid *g, const char *title, const ui_key_help *global,
                    const ui_key_help *keys, const char *const *lines, int *top);
/* The shell's own keys as the footer (help 0) or the help overlay (help 1) lists them, for a
 * screen at depth (1: the first screen, where q quits) that is typing or not, with a job
 * running (busy) or not. */
const ui_key_help *ui_global_keys(int depth, int typing, int busy, int help);
/* The question Q asks while a job runs (also for tests); ui_draw_confirm(g, 1) is the one
 * q and Esc ask there (going back stops the job). */
void ui_draw_confirm_quit(grid *g);
void ui_draw_confirm(grid *g, int back);
/* What the shell does with a key before the screen sees it, given its state: for tests and
 * the loop alike. */
enum { UI_SHELL_PASS, UI_SHELL_HELP, UI_SHELL_QUIT, UI_SHELL_CONFIRM };
int ui_shell_key(int key, int typing, int busy);
void ui_draw_too_small(grid *g, int need_w, int need_h);
/* Hand the terminal to fn(arg) (an editor): curses is suspended (def_prog_mode, endwin),
 * SIGINT and SIGQUIT are ignored meanwhile as system() does (the program in the terminal
 * gets them; its child must set them back to SIG_DFL before exec), then curses comes back
 * (reset_prog_mode, refresh) and the next frame is drawn whole. Returns fn's result. */
int ui_shell_out(int (*fn)(void *), void *arg);
/* Call fn(arg) with stdout and stderr captured (a lab's before/after hooks print): returns
 * the text, malloc'd, and fn's result in *rc. */
char *ui_capture(int (*fn)(void *), void *arg, int *rc);

/* home.c: the chapter tree and the reader */
ui_screen *home_create(void);
/* A chapter text, found as every shipped file is (lab.h's lab_asset_path). */
char *home_read_asset(const char *rel, size_t *len);

/* expane.c: the exercise pane beside the chapter tree (home.c shows it for an exercise row) */
typedef struct expane expane;
expane *expane_create(void);
void expane_free(expane *p);
/* The exercise to show (NULL: none). Another one than before starts afresh: scrolled to
 * the top and, for a predict exercise, a question drawn with a new seed (MLSYS_EX_SEED, for
 * tests, fixes the seeds: that value plus one for each question drawn, and for checks). */
void expane_show(expane *p, const struct exercise *ex);
void expane_draw(expane *p, grid *g, int x, int y, int w, int h, int focused);
/* e edits, c checks, h hints, Enter answers a predict question (then the field has every
 * key until Enter or Esc), space/b page; j/k, g/G scroll when focused. Reaction flags; 0
 * when the key is not the pane's. */
int expane_key(expane *p, int key, int focused);
/* A check asked with c runs here (blocking) once a frame has said "checking…". */
int expane_tick(expane *p, int *timeout_ms);
int expane_typing(const expane *p);
/* The keys that work in the pane now, into out[max] ended by a NULL key; returns how many. */
int expane_keys(const expane *p, int focused, ui_key_help *out, int max);

/* form.c: the launcher form of one lab */
ui_screen *form_create(const lab *l);

/* ui_run.c: a live job or a replay in the views */
/* Start l with argv (flags after the lab id); NULL with a message in err on failure. */
ui_screen *run_create_job(const lab *l, int argc, char **argv, char *err, size_t n);
/* Play a trace's events (sorted by time, rank = world rank) and output lines in the same
 * views (core/trace.h's reader gives them); takes what t holds (t is emptied). */
ui_screen *run_create_replay(const char *title, mlsys_trace *t);
/* For tests and measurements: a job of fn on nranks forked ranks (no lab, no exec). */
ui_screen *run_create_fn(const char *title, int nranks, int gated,
                         int (*fn)(mlsys_comm *, void *), void *arg, char *err, size_t n);
typedef struct run_stats_t {
    uint64_t events, forwarded, lost, queued, phases;
    int done, result;
    int frame, last;            /* the frame shown, the last one that can be */
    int skipped;                /* frames the player jumped over to keep up */
    const char *view;           /* the current view's name */
} run_stats_t;
void run_stats(ui_screen *s, run_stats_t *st);

/* ui_progress.c: which labs ran to the end, in the state directory */
/* 1 ran and succeeded, -1 ran and failed, 0 never ran. */
int ui_progress_lab(const char *lab_id);
void ui_progress_record(const char *lab_id, int ok);

/* The commands main.c calls. */
int ui_main(int argc, char **argv);     /* mlsys-lab [--no-color] [--ascii] [--no-mouse] */
int ui_is_terminal(void);               /* stdin and stdout are a terminal */
int ui_is_flag(const char *arg);        /* one of the front end's own flags */

#endif
