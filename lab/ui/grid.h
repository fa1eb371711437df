/* grid.h - an off-screen character grid: every view draws into one of these, and one place
 * (the curses shell) copies it to the terminal. A cell holds one Unicode character (a wide
 * character takes two cells, the right one a tail) and an attribute. Because drawing never
 * touches curses, golden-frame tests and headless runs dump the grid as plain text. */
#ifndef MLSYS_GRID_H
#define MLSYS_GRID_H

#include <stddef.h>
#include <stdint.h>

/* An attribute: style bits in the low byte, a colour pair index (0 = default) above them. */
typedef uint32_t grid_attr;
#define GRID_BOLD       0x01u
#define GRID_ITALIC     0x02u   /* the shell shows it as underline where italic is missing */
#define GRID_UNDERLINE  0x04u
#define GRID_REVERSE    0x08u
#define GRID_DIM        0x10u
#define GRID_STYLE_MASK 0xffu
#define GRID_PAIR(n)    (((grid_attr)(n) & 0xffu) << 8)
#define GRID_PAIR_OF(a) (((a) >> 8) & 0xffu)

#define GRID_TAIL 0u            /* ch of the right half of a wide character */
#define GRID_REPLACEMENT 0xfffdu

typedef struct grid_cell {
    uint32_t ch;                /* code point; GRID_TAIL right of a wide character */
    grid_attr attr;
} grid_cell;

typedef struct grid {
    int w, h;
    grid_cell *cells;           /* [h][w], row-major */
    int ascii;                  /* 1: every non-ASCII character is drawn as an ASCII stand-in */
    int cx0, cy0, cx1, cy1;     /* clip rectangle, half-open: x in [cx0, cx1) */
} grid;

/* The pieces of box drawing, for views that draw their own frames. */
typedef enum {
    GRID_H, GRID_V, GRID_TL, GRID_TR, GRID_BL, GRID_BR,
    GRID_T_DOWN, GRID_T_UP, GRID_T_RIGHT, GRID_T_LEFT, GRID_CROSS,
    GRID_DH, GRID_DV, GRID_DTL, GRID_DTR, GRID_DBL, GRID_DBR      /* double lines */
} grid_line;

/* grid.c: the grid */
grid *grid_create(int w, int h);                /* blank cells; w, h < 0 count as 0 */
void grid_free(grid *g);
void grid_resize(grid *g, int w, int h);        /* contents cleared, clip reset */
void grid_clear(grid *g);                       /* blank cells, clip reset */
void grid_set_ascii(grid *g, int on);
/* Narrow drawing to a rectangle (intersected with the grid); grid_unclip restores all. */
void grid_clip(grid *g, int x, int y, int w, int h);
void grid_unclip(grid *g);

/* One character at (x, y); outside the clip it is dropped. A wide character that would
 * straddle the clip edge becomes a blank; overwriting half of a wide character blanks the
 * other half. Control characters become U+FFFD; zero-width ones are dropped. Returns the
 * columns the character takes (0, 1 or 2), whether or not it was visible. */
int grid_set(grid *g, int x, int y, uint32_t cp, grid_attr a);
const grid_cell *grid_get(const grid *g, int x, int y);     /* NULL outside the grid */
/* UTF-8 text from (x, y) on one row, clipped; invalid bytes show as U+FFFD. Returns the
 * columns advanced (as if nothing were clipped). */
int grid_put(grid *g, int x, int y, const char *utf8, grid_attr a);
int grid_putn(grid *g, int x, int y, const char *utf8, size_t len, grid_attr a);
int grid_printf(grid *g, int x, int y, grid_attr a, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
/* Cells as laid out elsewhere (tails included), e.g. the lines of a rendered chapter. */
int grid_put_cells(grid *g, int x, int y, const grid_cell *c, int n);
void grid_fill(grid *g, int x, int y, int w, int h, uint32_t cp, grid_attr a);
void grid_hline(grid *g, int x, int y, int w, grid_attr a);
void grid_vline(grid *g, int x, int y, int h, grid_attr a);
/* A frame on the rectangle's border (w, h >= 2); double = 1 for double lines. */
void grid_box(grid *g, int x, int y, int w, int h, int dbl, grid_attr a);
uint32_t grid_line_cp(grid_line which, int ascii);

/* Plain-text dumps for golden frames: one line per row, each ending in '\n', trailing
 * blanks removed. grid_dump_attrs writes one character per cell instead: '.' for no style,
 * else the style bits as a digit/letter from "0123456789abcdefghijklmnopqrstuv"; colour
 * pairs are not shown. Both return malloc'd text. */
char *grid_dump(const grid *g);
char *grid_dump_attrs(const grid *g);
/* Row y as UTF-8 (trailing blanks removed); returns the length it needs (snprintf-like). */
size_t grid_row_text(const grid *g, int y, char *buf, size_t n);

/* grid.c: text helpers shared with the Markdown reader */
/* Decode one character of s[0..len); invalid or truncated sequences give U+FFFD and
 * consume one byte. Returns the bytes consumed (>= 1 when len > 0, 0 when len == 0). */
size_t grid_utf8_decode(const char *s, size_t len, uint32_t *cp);
int grid_utf8_encode(uint32_t cp, char out[4]);        /* bytes written, 1..4 */
/* Terminal columns of a code point: 0 (combining, zero-width), 1, or 2 (East Asian wide,
 * emoji). Locale-independent so that frames are the same everywhere; controls count 1
 * because they are shown as U+FFFD. */
int grid_cp_width(uint32_t cp);
int grid_text_width(const char *utf8, size_t len);
/* An ASCII stand-in for a character: box drawing to + - |, arrows to < > ^ v, '?' when
 * there is no good one. ASCII characters map to themselves. */
uint32_t grid_ascii_cp(uint32_t cp);

#endif
