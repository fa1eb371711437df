/* home.c - the home screen: on the left the tree of the four parts and fourteen chapters,
 * each with its labs and exercises and a progress mark; on the right the reader, which lays
 * out the chapter's Markdown (lab/md.h) for the pane's width, scrolls, and searches with `/`,
 * or, on an exercise, the exercise pane (lab/expane.c). Enter on a lab opens its launcher
 * form. A chapter whose text is not written yet says so. */
#include "ui.h"
#include "md.h"
#include "../exercise/exercise.h"
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define HOME_ROWS 512
#define HOME_MAX_EX 256

enum { ROW_PART, ROW_CHAPTER, ROW_LAB, ROW_EXERCISE, ROW_NOTE };

typedef struct row {
    int kind;
    int ch;                     /* index in lab_chapters */
    const lab *l;
    const exercise *ex;
} row;

typedef struct home {
    row rows[HOME_ROWS];
    int nrows, sel, top;
    unsigned char expanded[64];
    int focus;                  /* 0 tree, 1 reader */
    /* the reader */
    md_doc *doc;
    int doc_key;                /* chapter index */
    int doc_width;
    char doc_title[160];
    int rtop, rpage;
    int searching;
    char needle[64], typed[64];
    int tlen;
    int match;                  /* line of the current match */
    char rmsg[160];
    /* exercise progress, read again now and then: 1 passed, -1 failed, 0 not tried */
    time_t progress_at;
    signed char ex_mark[HOME_MAX_EX];
    expane *pane;               /* beside the tree when an exercise is selected */
    /* geometry of the last draw, for mouse clicks */
    int tree_x, tree_y, tree_w, tree_h, read_x;
    int digits;                 /* a chapter number being typed */
    uint64_t digits_at;
    ui_key_help keys[16];
} home;

static int nchapters(void)
{
    int n = 0;
    while (lab_chapters[n])
        n++;
    return n;
}

static int exercise_index(const exercise *ex)
{
    for (int i = 0; i < ex_count(); i++)
        if (ex_at(i) == ex)
            return i;
    return -1;
}

static void rebuild(home *h)
{
    h->nrows = 0;
    for (int i = 0; lab_chapters[i] && h->nrows < HOME_ROWS - 40; i++) {
        const chapter *c = lab_chapters[i];
        if (i == 0 || strcmp(c->part, lab_chapters[i - 1]->part))
            h->rows[h->nrows++] = (row){ROW_PART, i, NULL, NULL};
        h->rows[h->nrows++] = (row){ROW_CHAPTER, i, NULL, NULL};
        if (!h->expanded[i])
            continue;
        int any = 0;
        for (int k = 0; c->labs && c->labs[k] && h->nrows < HOME_ROWS - 1; k++, any++)
            h->rows[h->nrows++] = (row){ROW_LAB, i, c->labs[k], NULL};
        for (int k = 0; c->exercises && c->exercises[k] && h->nrows < HOME_ROWS - 1; k++, any++)
            h->rows[h->nrows++] = (row){ROW_EXERCISE, i, NULL, c->exercises[k]};
        if (!any)
            h->rows[h->nrows++] = (row){ROW_NOTE, i, NULL, NULL};
    }
    if (h->sel >= h->nrows)
        h->sel = h->nrows - 1;
}

static void load_progress(home *h)
{
    time_t now = time(NULL);
    if (h->progress_at && now - h->progress_at < 1)
        return;
    h->progress_at = now;
    memset(h->ex_mark, 0, sizeof h->ex_mark);
    ex_context cx;
    char err[256];
    if (ex_context_init(&cx, err, sizeof err) != 0)
        return;
    ex_progress p;
    memset(&p, 0, sizeof p);
    if (ex_progress_load(&p, cx.progress, err, sizeof err) < 0)
        return;
    for (int i = 0; i < ex_count() && i < HOME_MAX_EX; i++) {
        ex_progress_entry *e = ex_progress_get(&p, ex_at(i)->id, 0);
        h->ex_mark[i] = !e ? 0 : e->done ? 1 : e->failed_at ? -1 : 0;
    }
    ex_progress_free(&p);
}

/* ---- assets ---- */

char *home_read_asset(const char *rel, size_t *len)
{
    char path[PATH_MAX + 64];
    return md_read_file(lab_asset_path(rel, path, sizeof path), len);
}

/* ---- the reader ---- */

static void append(char **buf, size_t *len, size_t *cap, const char *s)
{
    size_t k = strlen(s);
    if (*len + k + 1 > *cap) {
        *cap = (*len + k + 1) * 2;
        *buf = mlsys_xrealloc(*buf, *cap);
    }
    memcpy(*buf + *len, s, k + 1);
    *len += k;
}

/* The text the reader shows for a row: the chapter's file, or what stands in for it. */
static char *doc_text(const row *rw, size_t *len, char *title, size_t tn)
{
    const chapter *c = lab_chapters[rw->ch];
    char line[1024];
    char *buf = NULL;
    size_t used = 0, cap = 0;
    snprintf(title, tn, "Chapter %d: %s", c->number, c->title);
    if (c->text_asset) {
        char *t = home_read_asset(c->text_asset, len);
        if (t)
            return t;
    }
    snprintf(line, sizeof line, "# Chapter %d — %s\n\n**The text of this chapter is not "
             "written yet.**\n\n", c->number, c->title);
    append(&buf, &used, &cap, line);
    int nl = 0;
    for (int k = 0; c->labs && c->labs[k]; k++, nl++) {
        if (k == 0)
            append(&buf, &used, &cap, "Its labs already run:\n\n");
        snprintf(line, sizeof line, "- `%s`: %s\n", c->labs[k]->id, c->labs[k]->summary);
        append(&buf, &used, &cap, line);
    }
    if (!nl)
        append(&buf, &used, &cap, "Its labs are not written yet either.\n");
    *len = used;
    return buf;
}

static const row *reader_row(const home *h)
{
    int i = h->sel;
    while (i > 0 && h->rows[i].kind == ROW_PART)
        i++;
    if (i >= h->nrows)
        i = h->nrows - 1;
    return &h->rows[i];
}

static void ensure_doc(home *h, int width)
{
    const row *rw = reader_row(h);
    int key = rw->ch;
    if (h->doc && h->doc_key == key && h->doc_width == width)
        return;
    int same = h->doc && h->doc_key == key;
    /* keep the reading position across a resize: the same heading, or the same fraction */
    double frac = same && h->doc->nlines ? (double)h->rtop / h->doc->nlines : 0;
    md_doc_free(h->doc);
    size_t len = 0;
    char *text = doc_text(rw, &len, h->doc_title, sizeof h->doc_title);
    unsigned flags = ui_options()->ascii ? MD_ASCII : 0;
    h->doc = md_render(text ? text : "", text ? len : 0, width, flags);
    free(text);
    h->doc_key = key;
    h->doc_width = width;
    h->rtop = same ? (int)(frac * h->doc->nlines) : 0;
    if (!same)
        h->rmsg[0] = 0;
}

static void clamp_reader(home *h)
{
    int max = h->doc ? h->doc->nlines - h->rpage : 0;
    if (max < 0)
        max = 0;
    if (h->rtop > max)
        h->rtop = max;
    if (h->rtop < 0)
        h->rtop = 0;
}

/* first: the first match at or below the top line; else the next one after (dir > 0) or
 * before (dir < 0) the current match. */
static void search(home *h, int dir, int first)
{
    if (!h->doc || !h->needle[0] || !h->doc->nlines)
        return;
    int from = first ? (h->rtop > 0 ? h->rtop - 1 : h->doc->nlines - 1) : h->match;
    int at = md_search_next(h->doc, h->needle, from, dir);
    if (at < 0) {
        snprintf(h->rmsg, sizeof h->rmsg, "not found: %s", h->needle);
        return;
    }
    int lines[1];
    int total = md_search(h->doc, h->needle, lines, 1), idx = 1;
    int *all = mlsys_xcalloc((size_t)(total > 0 ? total : 1), sizeof *all);
    int k = md_search(h->doc, h->needle, all, total);
    for (int i = 0; i < k && i < total; i++)
        if (all[i] == at)
            idx = i + 1;
    free(all);
    int wrapped = dir > 0 ? at <= from : at >= from;
    h->match = at;
    h->rtop = at > 2 ? at - 2 : 0;
    clamp_reader(h);
    snprintf(h->rmsg, sizeof h->rmsg, "/%s: match %d of %d%s", h->needle, idx, total,
             wrapped && !first ? " (wrapped)" : "");
}

/* ---- drawing ---- */

static void mark(home *h, const row *rw, char *out, size_t n, grid_attr *a, int ascii)
{
    *a = GRID_DIM;
    out[0] = 0;
    if (rw->kind == ROW_LAB) {
        int p = ui_progress_lab(rw->l->id);
        snprintf(out, n, "%s", p > 0 ? (ascii ? "v" : "✓") : p < 0 ? (ascii ? "x" : "✗") :
                 (ascii ? "o" : "·"));
        *a = p > 0 ? GRID_PAIR(UI_PAIR_OK) | GRID_BOLD : p < 0 ? GRID_PAIR(UI_PAIR_ERR) : GRID_DIM;
    } else if (rw->kind == ROW_EXERCISE) {
        int i = exercise_index(rw->ex);
        int m = i >= 0 && i < HOME_MAX_EX ? h->ex_mark[i] : 0;
        snprintf(out, n, "%s", m > 0 ? (ascii ? "v" : "✓") : m < 0 ? (ascii ? "x" : "✗") :
                 (ascii ? "o" : "·"));
        *a = m > 0 ? GRID_PAIR(UI_PAIR_OK) | GRID_BOLD : m < 0 ? GRID_PAIR(UI_PAIR_ERR) : GRID_DIM;
    } else if (rw->kind == ROW_CHAPTER) {
        const chapter *c = lab_chapters[rw->ch];
        int total = 0, done = 0;
        for (int k = 0; c->labs && c->labs[k]; k++, total++)
            done += ui_progress_lab(c->labs[k]->id) > 0;
        for (int k = 0; c->exercises && c->exercises[k]; k++) {
            int i = exercise_index(c->exercises[k]);
            total++;
            done += i >= 0 && i < HOME_MAX_EX && h->ex_mark[i] > 0;
        }
        if (total)
            snprintf(out, n, "%d/%d", done, total);
        *a = total && done == total ? GRID_PAIR(UI_PAIR_OK) : GRID_DIM;
    }
}

static void draw_tree(home *h, grid *g, int x, int y, int w, int hh)
{
    int ascii = g->ascii;
    if (h->sel < h->top)
        h->top = h->sel;
    if (h->sel >= h->top + hh)
        h->top = h->sel - hh + 1;
    if (h->top < 0)
        h->top = 0;
    for (int i = h->top; i < h->nrows && i < h->top + hh; i++) {
        const row *rw = &h->rows[i];
        int ry = y + i - h->top, sel = i == h->sel;
        grid_attr base = sel ? (h->focus == 0 ? GRID_PAIR(UI_PAIR_SEL) | GRID_REVERSE :
                                GRID_UNDERLINE) : 0;
        if (sel)
            grid_fill(g, x, ry, w, 1, ' ', base);
        char text[200], m[32];
        grid_attr ma;
        const chapter *c = lab_chapters[rw->ch];
        switch (rw->kind) {
        case ROW_PART:
            view_put_clipped(g, x, ry, w, c->part, GRID_BOLD | GRID_PAIR(UI_PAIR_TITLE));
            continue;
        case ROW_CHAPTER:
            snprintf(text, sizeof text, "%s %2d %s", h->expanded[rw->ch] ? (ascii ? "-" : "▾") :
                     (ascii ? "+" : "▸"), c->number, c->title);
            break;
        case ROW_LAB:
            snprintf(text, sizeof text, "      lab %s", strchr(rw->l->id, '/') ?
                     strchr(rw->l->id, '/') + 1 : rw->l->id);
            break;
        case ROW_EXERCISE:
            snprintf(text, sizeof text, "      ex  %s", rw->ex->title);
            break;
        default:
            snprintf(text, sizeof text, "      (no labs or exercises yet)");
            break;
        }
        mark(h, rw, m, sizeof m, &ma, ascii);
        int mw = (int)strlen(m) ? grid_text_width(m, strlen(m)) : 0;
        grid_attr ta = base | (rw->kind == ROW_CHAPTER ? GRID_BOLD : 0) |
                       (rw->kind == ROW_NOTE ? GRID_DIM : 0);
        if (rw->kind == ROW_CHAPTER && !c->text_asset && !sel)
            ta |= GRID_DIM;
        view_put_clipped(g, x + 1, ry, w - mw - 3, text, ta);
        if (mw)
            grid_put(g, x + w - mw - 1, ry, m, sel ? base : ma);
    }
}

static void draw_reader(home *h, grid *g, int x, int y, int w, int hh)
{
    ensure_doc(h, w - 2 > 20 ? w - 2 : 20);
    h->rpage = hh - 2;
    clamp_reader(h);
    char head[220];
    int pct = h->doc->nlines > h->rpage ? (int)(100.0 * (h->rtop + h->rpage) / h->doc->nlines) : 100;
    if (pct > 100)
        pct = 100;
    snprintf(head, sizeof head, "%s", h->doc_title);
    grid_attr ha = GRID_BOLD | (h->focus == 1 ? GRID_PAIR(UI_PAIR_SEL) : 0);
    view_put_clipped(g, x + 1, y, w - 8, head, ha);
    grid_printf(g, x + w - 5, y, GRID_DIM, "%3d%%", pct);
    md_draw(h->doc, g, x + 1, y + 1, w - 2, h->rpage, h->rtop);
    /* highlight the matches on screen */
    if (h->needle[0])
        for (int i = 0; i < h->rpage && h->rtop + i < h->doc->nlines; i++) {
            int col = 0, ncols;
            while ((col = md_match_col(h->doc, h->rtop + i, h->needle, col, &ncols)) >= 0) {
                for (int k = 0; k < ncols; k++) {
                    const grid_cell *c = grid_get(g, x + 1 + col + k, y + 1 + i);
                    if (c && c->ch != GRID_TAIL)
                        grid_set(g, x + 1 + col + k, y + 1 + i, c->ch, c->attr | GRID_REVERSE);
                }
                col += ncols > 0 ? ncols : 1;
            }
        }
    int by = y + hh - 1;
    if (h->searching) {
        grid_printf(g, x + 1, by, GRID_BOLD, "/%s", h->typed);
        grid_set(g, x + 2 + grid_text_width(h->typed, strlen(h->typed)), by, ' ', GRID_REVERSE);
    } else if (h->rmsg[0]) {
        view_put_clipped(g, x + 1, by, w - 2, h->rmsg, h->rmsg[0] == 'n' ?
                         GRID_PAIR(UI_PAIR_ERR) : GRID_DIM);
    }
}

static void home_draw(ui_screen *s, grid *g, int x, int y, int w, int hh)
{
    home *h = s->data;
    load_progress(h);
    int tw = w * 38 / 100;
    if (tw > 46)
        tw = 46;
    if (tw < 30)
        tw = 30;
    h->tree_x = x;
    h->tree_y = y + 1;
    h->tree_w = tw;
    h->tree_h = hh - 1;
    h->read_x = x + tw + 1;
    grid_put(g, x + 1, y, "Chapters", GRID_BOLD | (h->focus == 0 ? GRID_PAIR(UI_PAIR_SEL) : 0));
    draw_tree(h, g, x, y + 1, tw, hh - 1);
    grid_vline(g, x + tw, y, hh, GRID_PAIR(UI_PAIR_DIM));
    const row *rw = &h->rows[h->sel];
    if (rw->kind == ROW_EXERCISE) {
        expane_show(h->pane, rw->ex);
        expane_draw(h->pane, g, x + tw + 1, y, w - tw - 1, hh, h->focus == 1);
    } else {
        expane_show(h->pane, NULL);     /* coming back to an exercise opens it afresh */
        draw_reader(h, g, x + tw + 1, y, w - tw - 1, hh);
    }
}

static void home_title(ui_screen *s, char *out, size_t n)
{
    home *h = s->data;
    (void)h;
    int nl = 0;
    for (int i = 0; lab_chapters[i]; i++)
        for (int k = 0; lab_chapters[i]->labs && lab_chapters[i]->labs[k]; k++)
            nl++;
    snprintf(out, n, "%d chapters, %d labs, %d exercises", nchapters(), nl, ex_count());
}

static const ui_key_help *home_keys(ui_screen *s)
{
    home *h = s->data;
    int k = 0;
    if (h->searching) {
        h->keys[k++] = (ui_key_help){"Enter", "search"};
        h->keys[k++] = (ui_key_help){"Esc", "cancel"};
    } else if (h->rows[h->sel].kind == ROW_EXERCISE) {
        expane_show(h->pane, h->rows[h->sel].ex);
        k = expane_keys(h->pane, h->focus == 1, h->keys, (int)(sizeof h->keys / sizeof h->keys[0]));
    } else if (h->focus == 0) {
        h->keys[k++] = (ui_key_help){"j/k", "move"};
        h->keys[k++] = (ui_key_help){"1-14", "chapter"};
        const row *rw = &h->rows[h->sel];
        h->keys[k++] = (ui_key_help){"Enter", rw->kind == ROW_LAB ? "launch" : rw->kind ==
                                     ROW_CHAPTER ? "open/close" : "read"};
        h->keys[k++] = (ui_key_help){"Tab", "reader"};
        h->keys[k++] = (ui_key_help){"space", "page"};
        h->keys[k++] = (ui_key_help){"/", "search"};
    } else {
        h->keys[k++] = (ui_key_help){"j/k", "scroll"};
        h->keys[k++] = (ui_key_help){"space/b", "page"};
        h->keys[k++] = (ui_key_help){"/", "search"};
        h->keys[k++] = (ui_key_help){"n/N", "next/prev"};
        h->keys[k++] = (ui_key_help){"Tab", "chapters"};
    }
    h->keys[k] = (ui_key_help){NULL, NULL};
    return h->keys;
}

static const char *const *home_help(ui_screen *s)
{
    (void)s;
    static char marks[200];
    int ascii = ui_options()->ascii;
    /* the same glyphs as the tree draws (draw_tree and mark) */
    snprintf(marks, sizeof marks, "Marks: %s a lab that ran to the end or an exercise that "
             "passed, %s one that failed, %s not tried yet; 2/5 counts what is done.",
             ascii ? "v" : "✓", ascii ? "x" : "✗", ascii ? "o" : "·");
    static const char *lines[] = {
        "Left: the chapters. Enter opens a chapter; on a lab it opens the launcher form.",
        "Digits jump to a chapter: 3, or 1 then 4 for chapter 14.",
        NULL,
        "Right: the chapter's text. / searches it (any case), n and N go to the next match.",
        "g and G jump to the top and the end; the mouse wheel scrolls when it is on.",
        "On an exercise the right side is its pane: e opens your file in your editor, c "
        "checks it, t shows the next hint (one at a time, and remembered). A predict "
        "question: Enter, type the answer, Enter; each time you open it the numbers are new.",
        "h or Left goes back (to the tree, then to the chapter); q leaves the text for the "
        "tree, and on the tree quits.",
        NULL
    };
    lines[2] = marks;
    return lines;
}

/* ---- keys ---- */

static void select_row(home *h, int i)
{
    if (i < 0)
        i = 0;
    if (i >= h->nrows)
        i = h->nrows - 1;
    int dir = i >= h->sel ? 1 : -1;
    while (i >= 0 && i < h->nrows && h->rows[i].kind == ROW_PART)
        i += dir;
    if (i < 0 || i >= h->nrows) {
        i = h->sel;
    }
    h->sel = i;
}

static int activate(home *h)
{
    row *rw = &h->rows[h->sel];
    if (rw->kind == ROW_CHAPTER) {
        h->expanded[rw->ch] = !h->expanded[rw->ch];
        rebuild(h);
        return UI_HANDLED | UI_REDRAW;
    }
    if (rw->kind == ROW_LAB) {
        ui_push(form_create(rw->l));
        return UI_HANDLED | UI_REDRAW;
    }
    h->focus = 1;
    return UI_HANDLED | UI_REDRAW;
}

static int reader_key(home *h, int key)
{
    switch (key) {
    case 'j': case UI_KEY_DOWN: h->rtop++; break;
    case 'k': case UI_KEY_UP: h->rtop--; break;
    case ' ': case UI_KEY_PGDN: case UI_CTRL('f'): h->rtop += h->rpage - 1; break;
    case 'b': case UI_KEY_PGUP: case UI_CTRL('b'): h->rtop -= h->rpage - 1; break;
    case 'd': h->rtop += h->rpage / 2; break;
    case 'u': h->rtop -= h->rpage / 2; break;
    case 'g': case UI_KEY_HOME: h->rtop = 0; break;
    case 'G': case UI_KEY_END: h->rtop = h->doc ? h->doc->nlines : 0; break;
    case 'n': search(h, 1, 0); break;
    case 'N': search(h, -1, 0); break;
    case UI_KEY_TAB: case UI_KEY_ESC: case 'h': case UI_KEY_LEFT: case 'q':
        h->focus = 0;           /* q backs out of the reader to the tree; there it quits */
        break;
    default:
        return 0;
    }
    clamp_reader(h);
    return UI_HANDLED | UI_REDRAW;
}

/* On an exercise row the pane has the first say; with the pane focused only the keys that
 * go back to the tree are left for the tree. */
static int pane_key(home *h, int key)
{
    const row *rw = &h->rows[h->sel];
    if (rw->kind != ROW_EXERCISE)
        return -1;
    expane_show(h->pane, rw->ex);
    if (key == UI_KEY_WHEEL_UP || key == UI_KEY_WHEEL_DOWN) {
        if (ui_mouse_x() < h->read_x)
            return -1;
        return expane_key(h->pane, key, 1);
    }
    if (key == UI_KEY_CLICK && !expane_typing(h->pane))
        return -1;
    int r = expane_key(h->pane, key, h->focus == 1);
    if (r) {
        h->progress_at = 0;     /* a check, an answer or a hint: the marks now */
        return r;
    }
    if (h->focus == 1) {
        if (key == UI_KEY_TAB || key == UI_KEY_ESC || key == UI_KEY_LEFT || key == 'h' ||
            key == 'q') {
            h->focus = 0;
            return UI_HANDLED | UI_REDRAW;
        }
        if (key >= '0' && key <= '9')
            return -1;
        return 0;               /* not the pane's keys; Q and F10 still work */
    }
    if (key == UI_KEY_ENTER || key == 'l' || key == UI_KEY_RIGHT || key == UI_KEY_TAB) {
        h->focus = 1;
        return UI_HANDLED | UI_REDRAW;
    }
    if (key == UI_KEY_LEFT) {
        while (h->sel > 0 && h->rows[h->sel].kind != ROW_CHAPTER)
            h->sel--;
        return UI_HANDLED | UI_REDRAW;
    }
    return -1;
}

static int home_key(ui_screen *s, int key)
{
    home *h = s->data;
    int pr = h->searching ? -1 : pane_key(h, key);
    if (pr >= 0)
        return pr;
    if (h->searching) {
        if (key == UI_KEY_ENTER) {
            h->searching = 0;
            snprintf(h->needle, sizeof h->needle, "%s", h->typed);
            search(h, 1, 1);
        } else if (key == UI_KEY_ESC) {
            h->searching = 0;
        } else if (key == UI_KEY_BACKSPACE) {
            if (h->tlen > 0)
                h->typed[--h->tlen] = 0;
            else
                h->searching = 0;
        } else if (key >= 0x20 && key < 0x7f && h->tlen + 1 < (int)sizeof h->typed) {
            h->typed[h->tlen++] = (char)key;
            h->typed[h->tlen] = 0;
        }
        return UI_HANDLED | UI_REDRAW;
    }
    if (key == '/') {
        h->searching = 1;
        h->tlen = 0;
        h->typed[0] = 0;
        h->focus = 1;
        return UI_HANDLED | UI_REDRAW;
    }
    if (key == UI_KEY_WHEEL_UP || key == UI_KEY_WHEEL_DOWN) {
        int in_tree = ui_mouse_x() < h->read_x;
        if (in_tree)
            select_row(h, h->sel + (key == UI_KEY_WHEEL_UP ? -3 : 3));
        else
            h->rtop += key == UI_KEY_WHEEL_UP ? -3 : 3;
        clamp_reader(h);
        return UI_HANDLED | UI_REDRAW;
    }
    if (key == UI_KEY_CLICK) {
        int mx = ui_mouse_x(), my = ui_mouse_y();
        if (mx < h->read_x && my >= h->tree_y && my < h->tree_y + h->tree_h) {
            int i = h->top + my - h->tree_y;
            if (i < h->nrows && h->rows[i].kind != ROW_PART) {
                if (i == h->sel)
                    return activate(h);
                h->sel = i;
            }
            h->focus = 0;
        } else if (mx >= h->read_x) {
            h->focus = 1;
        }
        return UI_HANDLED | UI_REDRAW;
    }
    if (key >= '0' && key <= '9') {
        /* digits jump to a chapter: "3", or "1" "4" typed within a second for 14 */
        uint64_t now = mlsys_now_ns();
        int d = key - '0';
        int num = h->digits && now - h->digits_at < 1000000000ull ? h->digits * 10 + d : d;
        int found = -1;
        for (int i = 0; i < h->nrows; i++)
            if (h->rows[i].kind == ROW_CHAPTER && lab_chapters[h->rows[i].ch]->number == num)
                found = i;
        if (found < 0 && num != d) {
            num = d;             /* "1" "9" is not a chapter: start again with 9 */
            for (int i = 0; i < h->nrows; i++)
                if (h->rows[i].kind == ROW_CHAPTER && lab_chapters[h->rows[i].ch]->number == num)
                    found = i;
        }
        h->digits = num;
        h->digits_at = now;
        if (found >= 0) {
            h->sel = found;
            h->focus = 0;
        }
        return UI_HANDLED | UI_REDRAW;
    }
    if (h->focus == 1)
        return reader_key(h, key);
    switch (key) {
    case 'j': case UI_KEY_DOWN: select_row(h, h->sel + 1); break;
    case 'k': case UI_KEY_UP: select_row(h, h->sel - 1); break;
    case 'g': case UI_KEY_HOME: h->sel = 0; select_row(h, 1); break;
    case 'G': case UI_KEY_END: select_row(h, h->nrows - 1); break;
    case UI_KEY_PGDN: select_row(h, h->sel + 10); break;
    case UI_KEY_PGUP: select_row(h, h->sel - 10); break;
    case UI_KEY_ENTER: return activate(h);
    case 'l': case UI_KEY_RIGHT: {
        row *rw = &h->rows[h->sel];
        if (rw->kind == ROW_CHAPTER && !h->expanded[rw->ch])
            return activate(h);
        if (rw->kind == ROW_LAB)
            return activate(h);
        h->focus = 1;
        break;
    }
    case 'h': case UI_KEY_LEFT: {
        row *rw = &h->rows[h->sel];
        if (rw->kind != ROW_CHAPTER) {
            while (h->sel > 0 && h->rows[h->sel].kind != ROW_CHAPTER)
                h->sel--;
        } else if (h->expanded[rw->ch]) {
            h->expanded[rw->ch] = 0;
            rebuild(h);
        }
        break;
    }
    case UI_KEY_TAB: h->focus = 1; break;
    case UI_KEY_ESC: break;     /* the first screen: Esc does not quit, q does */
    case ' ': case 'b': case 'n': case 'N': case 'd': case 'u':
        return reader_key(h, key);
    default:
        return 0;
    }
    return UI_HANDLED | UI_REDRAW;
}

static int home_tick(ui_screen *s, uint64_t now_ns, int *timeout_ms)
{
    home *h = s->data;
    (void)now_ns;
    int r = expane_tick(h->pane, timeout_ms);
    if (r)
        h->progress_at = 0;
    return r;
}

static void home_free(ui_screen *s)
{
    home *h = s->data;
    expane_free(h->pane);
    md_doc_free(h->doc);
    free(h);
    free(s);
}

static int home_typing(ui_screen *s)
{
    home *h = s->data;
    return h->searching || (h->rows[h->sel].kind == ROW_EXERCISE && expane_typing(h->pane));
}

static int home_inner(ui_screen *s)
{
    home *h = s->data;
    return h->focus == 1;
}

static const ui_screen_class home_class = {
    .name = "home",
    .title = home_title,
    .keys = home_keys,
    .help = home_help,
    .draw = home_draw,
    .key = home_key,
    .tick = home_tick,
    .free = home_free,
    .typing = home_typing,
    .inner = home_inner,
};

ui_screen *home_create(void)
{
    home *h = mlsys_xcalloc(1, sizeof *h);
    h->expanded[0] = 1;
    rebuild(h);
    h->sel = 1;                 /* chapter 1, below the first part's title */
    h->doc_key = -1;
    h->pane = expane_create();
    ui_screen *s = mlsys_xcalloc(1, sizeof *s);
    s->cls = &home_class;
    s->data = h;
    return s;
}
