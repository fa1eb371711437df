/* view.h - the visual grammars of the front end as classes: each view is a constant table of
 * function pointers (create, free, reset, rewind, event, line, draw, key) with a name and a
 * help line, and keeps its private state behind a data pointer. Views never touch curses:
 * they draw into an off-screen grid (grid.h), so tests render them from synthetic events
 * and compare frames with the goldens in tests/frames. Also the palette, keys and reaction flags
 * that views share with the shell (lab/ui.h). */
#ifndef MLSYS_VIEW_H
#define MLSYS_VIEW_H

#include "../../../core/mlsys.h"
#include "../grid.h"

/* ---- reaction flags: what a key handler or a tick asks of the loop ---- */
#define UI_HANDLED  0x01    /* the key was used here */
#define UI_REDRAW   0x02    /* draw again (the loop draws at most once per turn) */
#define UI_RELAYOUT 0x04    /* sizes changed: lay out again, then draw */
#define UI_BACK     0x08    /* leave this screen */
#define UI_QUIT     0x10    /* leave the program */

/* ---- keys: curses codes mapped to these, so views and tests need no curses ---- */
enum {
    UI_KEY_NONE = -1,
    UI_KEY_TAB = 9, UI_KEY_ENTER = 10, UI_KEY_ESC = 27, UI_KEY_BACKSPACE = 127,
    UI_KEY_UP = 0x1001, UI_KEY_DOWN, UI_KEY_LEFT, UI_KEY_RIGHT, UI_KEY_PGUP, UI_KEY_PGDN,
    UI_KEY_HOME, UI_KEY_END, UI_KEY_BTAB, UI_KEY_DEL, UI_KEY_F1, UI_KEY_F5, UI_KEY_F10,
    UI_KEY_RESIZE, UI_KEY_WHEEL_UP, UI_KEY_WHEEL_DOWN, UI_KEY_CLICK
};
#define UI_CTRL(c) ((c) & 0x1f)

/* ---- palette: colour pair numbers in grid attributes (md.h uses 1..6) ---- */
enum {
    UI_PAIR_TITLE = 7,      /* the top bar */
    UI_PAIR_BAR,            /* the footer and status bars */
    UI_PAIR_KEY,            /* a key name in the footer */
    UI_PAIR_SEL,            /* the selected row */
    UI_PAIR_ERR,            /* failures, invalid input */
    UI_PAIR_OK,             /* success */
    UI_PAIR_WARN,           /* waiting, approximations */
    UI_PAIR_DIM,            /* secondary text, empty cells */
    UI_PAIR_FULL,           /* a cell that holds every rank's contribution */
    UI_PAIR_PARTIAL,        /* a cell that holds some ranks' contributions */
    UI_PAIR_RANK0,          /* ranks 0..7: text colour; UI_PAIR_RANK0 + (r % 8) */
    UI_PAIR_CELL0 = UI_PAIR_RANK0 + 8,   /* ranks 0..7 as a cell background */
    UI_PAIR_COUNT = UI_PAIR_CELL0 + 8
};
#define UI_RANK_ATTR(r) GRID_PAIR(UI_PAIR_RANK0 + ((r) < 0 ? 0 : (r) % 8))
#define UI_CELL_ATTR(r) GRID_PAIR(UI_PAIR_CELL0 + ((r) < 0 ? 0 : (r) % 8))

/* A key and what it does, for the footer and the help overlay. */
typedef struct ui_key_help {
    const char *key;        /* "space", "n", "+/-" */
    const char *what;       /* "pause", "step" */
} ui_key_help;

/* Rank states the shell reports to the views (ctx->rank_state). */
enum { VIEW_RANK_UNKNOWN, VIEW_RANK_RUNNING, VIEW_RANK_DONE, VIEW_RANK_FAILED,
       VIEW_RANK_STOPPED };

struct stepmodel;

/* What the shell tells a view at draw time, besides its own state. The view has been fed the
 * step model's tape up to `frame` (lab/ui/stepmodel.h): everything it draws is that frame. */
typedef struct view_ctx {
    int nranks;             /* world size of the job (0 when not known yet) */
    double anim;            /* progress into the shown frame: 0..1 (1 = settled) */
    int ascii;              /* no characters beyond ASCII */
    int live;               /* a job is running (not a replay, not ended) */
    const int *gate_step;   /* [nranks] step each rank waits at, -1 = not at the gate; or NULL */
    const int *rank_state;  /* [nranks] VIEW_RANK_*, or NULL */
    const int *rank_code;   /* [nranks] exit code, or minus the signal that killed it; or NULL */
    const struct stepmodel *sm;     /* the step model: frames, their captions, calls */
    int frame;              /* the frame shown */
} view_ctx;

/* A view is a class: what it reads from the tape, how it draws, its keys. The shell feeds it
 * the tape's items up to the frame shown (stepmodel.h's sm_sync): forward by what it has not
 * seen, back by rewind() and everything again from the start. */
typedef struct view_class {
    const char *name;                   /* "ring": what lab->view names */
    const char *title;                  /* "ring / graph" */
    const char *help;                   /* one line for the help overlay */
    const ui_key_help *keys;            /* its own keys, NULL-terminated by key == NULL */
    /* More lines for the help overlay (NULL-terminated), or NULL. */
    const char *const *(*notes)(int ascii);
    void *(*create)(void);
    void (*free)(void *data);
    void (*reset)(void *data, int nranks);                 /* a new job: empty, defaults */
    /* The same job again from its start: forget what was fed, keep what the learner set
     * (zoom, filter, selection) and what spans the whole run (a shade's scale). */
    void (*rewind)(void *data);
    /* Does the view read events like e? NULL: none (the tape keeps only what some view
     * reads). */
    int (*wants)(const mlsys_event *e);
    void (*event)(void *data, const mlsys_event *ev, int frame);   /* in tape order */
    void (*line)(void *data, int rank, int is_err, const char *text);   /* rank -1: runner */
    void (*draw)(void *data, grid *g, int x, int y, int w, int h, const view_ctx *ctx);
    int (*key)(void *data, int key);    /* reaction flags; 0 when not used */
} view_class;

/* view.c: the list of views and helpers they share */
extern const view_class *const view_classes[];     /* NULL-terminated, Tab order */
const view_class *view_find(const char *name);     /* NULL when unknown */
/* A value as the labs print it: integers with one decimal ("10.0"), else %.4g. */
void view_fmt_value(double v, char *out, size_t n);
/* Bytes as "8 B", "64 KiB", "1.5 MiB". */
void view_fmt_bytes(uint64_t b, char *out, size_t n);
/* s, or its ASCII stand-in when ascii is set. */
const char *view_glyph(int ascii, const char *utf8, const char *plain);
/* Text clipped to w columns with an ellipsis when it does not fit; returns columns used. */
int view_put_clipped(grid *g, int x, int y, int w, const char *s, grid_attr a);
/* Parse a printed list "[1.0, 2.0]" or matrix "[[1.0, 2.0], [3.0, 4.0]]" that follows
 * "Rank R:" in a line of lab output. Returns the count (<= max) and the rank in *rank, or -1
 * when the line is not of that shape. */
int view_parse_rank_values(const char *line, int *rank, double *out, int max);

/* A line of rank 0's output that core/print.c tagged for another rank ("\001r3\002text"):
 * returns the text after the tag and sets *rank to the rank it names; any other line comes
 * back as it is, *rank untouched. */
const char *view_line_rank(const char *line, int *rank);

extern const view_class view_ring_class, view_log_class, view_plot_class, view_timeline_class;
extern const view_class view_blocks_class, view_flow_class, view_serve_class;
/* How many views there are (view_classes without its NULL). */
int view_count(void);

#endif
