/* md.h - the chapter reader: Markdown (parsed by md4c) laid out for a given width as a list
 * of styled lines that any view copies into a grid. Headings, emphasis, lists with hanging
 * indents, block quotes, tables sized to their content, and code blocks that are never
 * wrapped (so box-drawing diagrams survive). Without md4c the raw text is shown wrapped. */
#ifndef MLSYS_MD_H
#define MLSYS_MD_H

#include "grid.h"

#include <stddef.h>

/* md_render flags */
#define MD_ASCII 0x1u       /* ASCII bullets, rules and table borders (--ascii) */
#define MD_RAW   0x2u       /* show the raw text wrapped, as when md4c is missing */

/* Colour pairs the reader uses (GRID_PAIR_OF of a cell's attribute); the shell maps each
 * to colours, and pair 0 is the terminal's default. */
#define MD_PAIR_HEADING 1
#define MD_PAIR_CODE    2   /* code blocks and `code` spans */
#define MD_PAIR_QUOTE   3   /* the bar of a block quote */
#define MD_PAIR_LINK    4
#define MD_PAIR_RULE    5   /* heading rules, horizontal rules, table borders */
#define MD_PAIR_NOTICE  6   /* the "md4c missing" line */

typedef enum {
    MD_LINE_TEXT,           /* paragraph or list text */
    MD_LINE_BLANK,          /* spacing between blocks (may carry a quote bar) */
    MD_LINE_HEADING,        /* heading text; level in md_line.level */
    MD_LINE_RULE,           /* the rule under an h1/h2, or a thematic break */
    MD_LINE_CODE,           /* one line of a code block, clipped with '›' ('>' in ASCII) */
    MD_LINE_TABLE,          /* border or row of a table */
    MD_LINE_NOTICE          /* the reader's own notice */
} md_line_kind;

typedef struct md_line {
    grid_cell *cells;       /* [len]: one per column, GRID_TAIL right of wide characters */
    int len;                /* columns used, always <= the document width */
    unsigned char kind;     /* md_line_kind */
    unsigned char level;    /* heading level 1..6 for MD_LINE_HEADING and its rule, else 0 */
} md_line;

typedef struct md_heading {
    int line;               /* index of its first line */
    int level;              /* 1..6 */
    char *text;             /* UTF-8, the heading's words on one line */
} md_heading;

typedef struct md_doc {
    int width;              /* the width it was laid out for (>= 1) */
    unsigned flags;
    int raw;                /* 1 when shown as raw text (MD_RAW or no md4c) */
    int nlines;
    md_line *lines;
    int nheadings;
    md_heading *headings;   /* in reading order: a table of contents */
} md_doc;

/* md.c */
int md_available(void);     /* 1 when built with md4c */
/* Lay out text[0..len) (any bytes; invalid UTF-8 shows as U+FFFD) for width columns
 * (clamped to 1..4096). Never fails: allocation failures exit with a message. */
md_doc *md_render(const char *text, size_t len, int width, unsigned flags);
void md_doc_free(md_doc *d);
/* The plain text of line i (UTF-8); returns the length it needs (snprintf-like). */
size_t md_line_text(const md_doc *d, int i, char *buf, size_t n);
/* Lines that contain needle, ignoring ASCII case: up to max indices into lines[], in
 * order; returns how many lines match in all (may exceed max). An empty needle matches
 * nothing. */
int md_search(const md_doc *d, const char *needle, int *lines, int max);
/* The next matching line after from (dir > 0) or before it (dir < 0), wrapping around the
 * document; from itself is tried last. -1 when nothing matches. */
int md_search_next(const md_doc *d, const char *needle, int from, int dir);
/* The first column >= start_col of line i where needle starts (ASCII case ignored), and its
 * width in columns through *ncols; -1 when absent. For highlighting matches. */
int md_match_col(const md_doc *d, int i, const char *needle, int start_col, int *ncols);
/* Copy lines top.. into the rectangle (x, y, w, h) of g, one line per row, clipped. */
void md_draw(const md_doc *d, grid *g, int x, int y, int w, int h, int top);
/* A whole file, NUL-terminated, length in *len; NULL (errno set) when unreadable. */
char *md_read_file(const char *path, size_t *len);

#endif
