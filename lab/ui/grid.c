/* grid.c - the off-screen character grid (see grid.h): cells, clipping, box drawing with an
 * ASCII fallback, UTF-8 decoding and column widths, and the plain-text dumps that golden
 * frames compare. No curses here: the shell copies a finished grid to the terminal. */
#include "grid.h"
#include "../../core/mlsys.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- UTF-8 and widths ---- */

size_t grid_utf8_decode(const char *str, size_t len, uint32_t *cp)
{
    const unsigned char *s = (const unsigned char *)str;
    if (len == 0) {
        *cp = 0;
        return 0;
    }
    unsigned c = s[0];
    if (c < 0x80) {
        *cp = c;
        return 1;
    }
    size_t need;
    uint32_t v, min;
    if (c >= 0xc2 && c <= 0xdf) {
        need = 2; v = c & 0x1f; min = 0x80;
    } else if (c >= 0xe0 && c <= 0xef) {
        need = 3; v = c & 0x0f; min = 0x800;
    } else if (c >= 0xf0 && c <= 0xf4) {
        need = 4; v = c & 0x07; min = 0x10000;
    } else {
        *cp = GRID_REPLACEMENT;
        return 1;
    }
    if (len < need) {
        *cp = GRID_REPLACEMENT;
        return 1;
    }
    for (size_t i = 1; i < need; i++) {
        if ((s[i] & 0xc0) != 0x80) {
            *cp = GRID_REPLACEMENT;
            return 1;
        }
        v = (v << 6) | (s[i] & 0x3f);
    }
    if (v < min || v > 0x10ffff || (v >= 0xd800 && v <= 0xdfff)) {
        *cp = GRID_REPLACEMENT;
        return 1;
    }
    *cp = v;
    return need;
}

int grid_utf8_encode(uint32_t cp, char out[4])
{
    if (cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
        cp = GRID_REPLACEMENT;
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xc0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3f));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xe0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
        out[2] = (char)(0x80 | (cp & 0x3f));
        return 3;
    }
    out[0] = (char)(0xf0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
    out[3] = (char)(0x80 | (cp & 0x3f));
    return 4;
}

typedef struct cp_range { uint32_t lo, hi; } cp_range;

/* Combining marks and invisible format characters. */
static const cp_range zero_width[] = {
    {0x0300, 0x036f}, {0x0483, 0x0489}, {0x0591, 0x05bd}, {0x05bf, 0x05bf}, {0x05c1, 0x05c2},
    {0x05c4, 0x05c5}, {0x05c7, 0x05c7}, {0x0610, 0x061a}, {0x064b, 0x065f}, {0x0670, 0x0670},
    {0x06d6, 0x06dc}, {0x06df, 0x06e4}, {0x0e31, 0x0e31}, {0x0e34, 0x0e3a}, {0x0e47, 0x0e4e},
    {0x1ab0, 0x1aff}, {0x1dc0, 0x1dff}, {0x200b, 0x200f}, {0x202a, 0x202e}, {0x2060, 0x2064},
    {0x20d0, 0x20ff}, {0xfe00, 0xfe0f}, {0xfe20, 0xfe2f}, {0xfeff, 0xfeff},
    {0xe0001, 0xe007f}, {0xe0100, 0xe01ef},
};

/* East Asian wide and full-width characters and the emoji that terminals draw two wide. */
static const cp_range wide[] = {
    {0x1100, 0x115f}, {0x231a, 0x231b}, {0x2329, 0x232a}, {0x23e9, 0x23ec}, {0x23f0, 0x23f0},
    {0x23f3, 0x23f3}, {0x25fd, 0x25fe}, {0x2614, 0x2615}, {0x2648, 0x2653}, {0x267f, 0x267f},
    {0x2693, 0x2693}, {0x26a1, 0x26a1}, {0x26aa, 0x26ab}, {0x26bd, 0x26be}, {0x26c4, 0x26c5},
    {0x26ce, 0x26ce}, {0x26d4, 0x26d4}, {0x26ea, 0x26ea}, {0x26f2, 0x26f3}, {0x26f5, 0x26f5},
    {0x26fa, 0x26fa}, {0x26fd, 0x26fd}, {0x2705, 0x2705}, {0x270a, 0x270b}, {0x2728, 0x2728},
    {0x274c, 0x274c}, {0x274e, 0x274e}, {0x2753, 0x2755}, {0x2757, 0x2757}, {0x2795, 0x2797},
    {0x27b0, 0x27b0}, {0x27bf, 0x27bf}, {0x2b1b, 0x2b1c}, {0x2b50, 0x2b50}, {0x2b55, 0x2b55},
    {0x2e80, 0x303e}, {0x3041, 0x33ff}, {0x3400, 0x4dbf}, {0x4e00, 0x9fff}, {0xa000, 0xa4cf},
    {0xa960, 0xa97f}, {0xac00, 0xd7a3}, {0xf900, 0xfaff}, {0xfe10, 0xfe19}, {0xfe30, 0xfe6f},
    {0xff00, 0xff60}, {0xffe0, 0xffe6}, {0x16fe0, 0x16fe4}, {0x17000, 0x18aff},
    {0x1b000, 0x1b2ff}, {0x1f004, 0x1f004}, {0x1f0cf, 0x1f0cf}, {0x1f18e, 0x1f18e},
    {0x1f191, 0x1f19a}, {0x1f200, 0x1f251}, {0x1f300, 0x1f320}, {0x1f32d, 0x1f335},
    {0x1f337, 0x1f37c}, {0x1f37e, 0x1f393}, {0x1f3a0, 0x1f3ca}, {0x1f3cf, 0x1f3d3},
    {0x1f3e0, 0x1f3f0}, {0x1f3f4, 0x1f3f4}, {0x1f3f8, 0x1f43e}, {0x1f440, 0x1f440},
    {0x1f442, 0x1f4fc}, {0x1f4ff, 0x1f53d}, {0x1f54b, 0x1f54e}, {0x1f550, 0x1f567},
    {0x1f57a, 0x1f57a}, {0x1f595, 0x1f596}, {0x1f5a4, 0x1f5a4}, {0x1f5fb, 0x1f64f},
    {0x1f680, 0x1f6c5}, {0x1f6cc, 0x1f6cc}, {0x1f6d0, 0x1f6d2}, {0x1f6d5, 0x1f6d7},
    {0x1f6eb, 0x1f6ec}, {0x1f6f4, 0x1f6fc}, {0x1f7e0, 0x1f7eb}, {0x1f90c, 0x1f93a},
    {0x1f93c, 0x1f945}, {0x1f947, 0x1f9ff}, {0x1fa70, 0x1faff}, {0x20000, 0x2fffd},
    {0x30000, 0x3fffd},
};

static int in_ranges(uint32_t cp, const cp_range *r, size_t n)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (cp < r[mid].lo)
            hi = mid;
        else if (cp > r[mid].hi)
            lo = mid + 1;
        else
            return 1;
    }
    return 0;
}

static int is_control(uint32_t cp)
{
    return cp < 0x20 || (cp >= 0x7f && cp < 0xa0);
}

int grid_cp_width(uint32_t cp)
{
    if (cp < 0x300)
        return cp == 0xad ? 0 : 1;
    if (in_ranges(cp, zero_width, sizeof zero_width / sizeof zero_width[0]))
        return 0;
    if (in_ranges(cp, wide, sizeof wide / sizeof wide[0]))
        return 2;
    return 1;
}

int grid_text_width(const char *s, size_t len)
{
    int w = 0;
    size_t i = 0;
    while (i < len) {
        uint32_t cp;
        i += grid_utf8_decode(s + i, len - i, &cp);
        w += grid_cp_width(cp);
    }
    return w;
}

uint32_t grid_ascii_cp(uint32_t cp)
{
    if (cp < 0x80)
        return is_control(cp) ? '?' : cp;
    if (cp >= 0x2500 && cp <= 0x257f) {           /* box drawing */
        switch (cp) {
        case 0x2500: case 0x2501: case 0x2504: case 0x2505: case 0x2508: case 0x2509:
        case 0x254c: case 0x254d: case 0x2550: case 0x2574: case 0x2576: case 0x2578:
        case 0x257a: case 0x257c: case 0x257e:
            return '-';
        case 0x2502: case 0x2503: case 0x2506: case 0x2507: case 0x250a: case 0x250b:
        case 0x254e: case 0x254f: case 0x2551: case 0x2575: case 0x2577: case 0x2579:
        case 0x257b: case 0x257d: case 0x257f:
            return '|';
        case 0x2571: return '/';
        case 0x2572: return '\\';
        case 0x2573: return 'X';
        default: return '+';
        }
    }
    if (cp >= 0x2580 && cp <= 0x259f)              /* blocks and shades */
        return '#';
    switch (cp) {
    case 0xa0: return ' ';
    case 0xb7: case 0x2022: case 0x2219: case 0x22c5: case 0x25aa: case 0x25e6: case 0x2027:
        return '*';
    case 0xd7: case 0x2715: case 0x2717: case 0x2718: return 'x';
    case 0xf7: return '/';
    case 0xb1: return '+';
    case 0xb5: case 0x3bc: return 'u';
    case 0x2010: case 0x2011: case 0x2012: case 0x2013: case 0x2014: case 0x2015: case 0x2212:
        return '-';
    case 0x2018: case 0x2019: case 0x201a: case 0x2032: return '\'';
    case 0x201c: case 0x201d: case 0x201e: case 0x2033: return '"';
    case 0x2026: return '.';
    case 0x2190: case 0x21d0: case 0x25c0: case 0x25c4: case 0x25c2: case 0x27f5: return '<';
    case 0x2192: case 0x21d2: case 0x25b6: case 0x25ba: case 0x25b8: case 0x27f6: return '>';
    case 0x2191: case 0x21d1: case 0x25b2: case 0x25b4: return '^';
    case 0x2193: case 0x21d3: case 0x25bc: case 0x25be: return 'v';
    case 0x2194: case 0x21d4: case 0x27f7: return '-';
    case 0x2195: return '|';
    case 0x2248: case 0x223c: return '~';
    case 0x2264: case 0x226a: return '<';
    case 0x2265: case 0x226b: return '>';
    case 0x2260: return '#';
    case 0x2211: case 0x3a3: return 'S';
    case 0x221a: return 'V';
    case 0x221e: return '8';
    case 0x2713: case 0x2714: return 'v';
    case 0x25cf: case 0x25cb: case 0x25ef: return 'o';
    case 0x25a0: case 0x25a1: case 0x25fc: case 0x25fb: return '#';
    default: return '?';
    }
}

/* ---- the grid ---- */

grid *grid_create(int w, int h)
{
    grid *g = mlsys_xrealloc(NULL, sizeof *g);
    memset(g, 0, sizeof *g);
    grid_resize(g, w, h);
    return g;
}

void grid_free(grid *g)
{
    if (!g)
        return;
    free(g->cells);
    free(g);
}

void grid_resize(grid *g, int w, int h)
{
    g->w = w > 0 ? w : 0;
    g->h = h > 0 ? h : 0;
    g->cells = mlsys_xrealloc(g->cells, (size_t)g->w * (size_t)g->h * sizeof *g->cells);
    grid_clear(g);
}

void grid_unclip(grid *g)
{
    g->cx0 = 0;
    g->cy0 = 0;
    g->cx1 = g->w;
    g->cy1 = g->h;
}

void grid_clear(grid *g)
{
    size_t n = (size_t)g->w * (size_t)g->h;
    for (size_t i = 0; i < n; i++) {
        g->cells[i].ch = ' ';
        g->cells[i].attr = 0;
    }
    grid_unclip(g);
}

void grid_set_ascii(grid *g, int on)
{
    g->ascii = on ? 1 : 0;
}

static int clampi(long v, int lo, int hi)
{
    return v < lo ? lo : v > hi ? hi : (int)v;
}

void grid_clip(grid *g, int x, int y, int w, int h)
{
    if (w < 0)
        w = 0;
    if (h < 0)
        h = 0;
    g->cx0 = clampi(x, 0, g->w);
    g->cy0 = clampi(y, 0, g->h);
    g->cx1 = clampi((long)x + w, g->cx0, g->w);
    g->cy1 = clampi((long)y + h, g->cy0, g->h);
}

static int visible(const grid *g, int x, int y)
{
    return x >= g->cx0 && x < g->cx1 && y >= g->cy0 && y < g->cy1;
}

static grid_cell *cell(grid *g, int x, int y)
{
    return &g->cells[(size_t)y * (size_t)g->w + (size_t)x];
}

/* Before writing a cell, undo any wide character that it would cut in half. */
static void unsplit(grid *g, int x, int y)
{
    grid_cell *c = cell(g, x, y);
    if (c->ch == GRID_TAIL && x > 0) {
        cell(g, x - 1, y)->ch = ' ';
    } else if (x + 1 < g->w && cell(g, x + 1, y)->ch == GRID_TAIL) {
        cell(g, x + 1, y)->ch = ' ';
    }
}

static void raw_set(grid *g, int x, int y, uint32_t ch, grid_attr a)
{
    if (!visible(g, x, y))
        return;
    unsplit(g, x, y);
    grid_cell *c = cell(g, x, y);
    c->ch = ch;
    c->attr = a;
}

int grid_set(grid *g, int x, int y, uint32_t cp, grid_attr a)
{
    if (is_control(cp) || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
        cp = GRID_REPLACEMENT;
    int w = grid_cp_width(cp);
    if (w == 0)
        return 0;
    if (g->ascii && cp >= 0x80) {
        uint32_t s = grid_ascii_cp(cp);
        for (int i = 0; i < w; i++)
            raw_set(g, x + i, y, s, a);
        return w;
    }
    if (w == 1) {
        raw_set(g, x, y, cp, a);
        return 1;
    }
    /* A wide character needs both of its cells inside the clip, else it shows as blanks. */
    int both = visible(g, x, y) && visible(g, x + 1, y);
    if (!both) {
        raw_set(g, x, y, ' ', a);
        raw_set(g, x + 1, y, ' ', a);
        return 2;
    }
    unsplit(g, x, y);
    unsplit(g, x + 1, y);
    cell(g, x, y)->ch = cp;
    cell(g, x, y)->attr = a;
    cell(g, x + 1, y)->ch = GRID_TAIL;
    cell(g, x + 1, y)->attr = a;
    return 2;
}

const grid_cell *grid_get(const grid *g, int x, int y)
{
    if (x < 0 || y < 0 || x >= g->w || y >= g->h)
        return NULL;
    return &g->cells[(size_t)y * (size_t)g->w + (size_t)x];
}

int grid_putn(grid *g, int x, int y, const char *s, size_t len, grid_attr a)
{
    int col = 0;
    size_t i = 0;
    while (i < len) {
        uint32_t cp;
        i += grid_utf8_decode(s + i, len - i, &cp);
        /* Past the right edge nothing more can show; keep counting columns cheaply. */
        if ((long)x + col >= g->cx1) {
            col += grid_cp_width(is_control(cp) ? GRID_REPLACEMENT : cp);
            continue;
        }
        col += grid_set(g, x + col, y, cp, a);
    }
    return col;
}

int grid_put(grid *g, int x, int y, const char *s, grid_attr a)
{
    return grid_putn(g, x, y, s, strlen(s), a);
}

int grid_printf(grid *g, int x, int y, grid_attr a, const char *fmt, ...)
{
    char small[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (n < 0)
        return 0;
    if ((size_t)n < sizeof small)
        return grid_putn(g, x, y, small, (size_t)n, a);
    char *big = mlsys_xrealloc(NULL, (size_t)n + 1);
    va_start(ap, fmt);
    vsnprintf(big, (size_t)n + 1, fmt, ap);
    va_end(ap);
    int cols = grid_putn(g, x, y, big, (size_t)n, a);
    free(big);
    return cols;
}

int grid_put_cells(grid *g, int x, int y, const grid_cell *c, int n)
{
    for (int i = 0; i < n; i++) {
        if (c[i].ch == GRID_TAIL)
            continue;           /* the lead character already placed it */
        grid_set(g, x + i, y, c[i].ch, c[i].attr);
    }
    return n;
}

void grid_fill(grid *g, int x, int y, int w, int h, uint32_t cp, grid_attr a)
{
    for (int r = 0; r < h; r++)
        for (int i = 0; i < w; i++)
            grid_set(g, x + i, y + r, cp, a);
}

static const uint32_t line_utf8[] = {
    0x2500, 0x2502, 0x250c, 0x2510, 0x2514, 0x2518, 0x252c, 0x2534, 0x251c, 0x2524, 0x253c,
    0x2550, 0x2551, 0x2554, 0x2557, 0x255a, 0x255d,
};

uint32_t grid_line_cp(grid_line which, int ascii)
{
    if ((unsigned)which >= sizeof line_utf8 / sizeof line_utf8[0])
        return '?';
    if (!ascii)
        return line_utf8[which];
    if (which == GRID_H || which == GRID_DH)
        return which == GRID_DH ? '=' : '-';
    if (which == GRID_V || which == GRID_DV)
        return '|';
    return '+';
}

void grid_hline(grid *g, int x, int y, int w, grid_attr a)
{
    uint32_t cp = grid_line_cp(GRID_H, g->ascii);
    for (int i = 0; i < w; i++)
        grid_set(g, x + i, y, cp, a);
}

void grid_vline(grid *g, int x, int y, int h, grid_attr a)
{
    uint32_t cp = grid_line_cp(GRID_V, g->ascii);
    for (int i = 0; i < h; i++)
        grid_set(g, x, y + i, cp, a);
}

void grid_box(grid *g, int x, int y, int w, int h, int dbl, grid_attr a)
{
    if (w < 2 || h < 2)
        return;
    int d = dbl ? GRID_DH - GRID_H : 0;
    int as = g->ascii;
    uint32_t hz = grid_line_cp(GRID_H + d, as), vt = grid_line_cp(GRID_V + d, as);
    uint32_t tl = grid_line_cp(dbl ? GRID_DTL : GRID_TL, as);
    uint32_t tr = grid_line_cp(dbl ? GRID_DTR : GRID_TR, as);
    uint32_t bl = grid_line_cp(dbl ? GRID_DBL : GRID_BL, as);
    uint32_t br = grid_line_cp(dbl ? GRID_DBR : GRID_BR, as);
    for (int i = 1; i < w - 1; i++) {
        grid_set(g, x + i, y, hz, a);
        grid_set(g, x + i, y + h - 1, hz, a);
    }
    for (int i = 1; i < h - 1; i++) {
        grid_set(g, x, y + i, vt, a);
        grid_set(g, x + w - 1, y + i, vt, a);
    }
    grid_set(g, x, y, tl, a);
    grid_set(g, x + w - 1, y, tr, a);
    grid_set(g, x, y + h - 1, bl, a);
    grid_set(g, x + w - 1, y + h - 1, br, a);
}

/* ---- dumps ---- */

size_t grid_row_text(const grid *g, int y, char *buf, size_t n)
{
    size_t len = 0, keep = 0;
    if (y >= 0 && y < g->h) {
        for (int x = 0; x < g->w; x++) {
            const grid_cell *c = &g->cells[(size_t)y * (size_t)g->w + (size_t)x];
            if (c->ch == GRID_TAIL)
                continue;
            char u[4];
            int k = grid_utf8_encode(c->ch, u);
            for (int i = 0; i < k; i++) {
                if (len < n)
                    buf[len] = u[i];
                len++;
            }
            if (c->ch != ' ')
                keep = len;
        }
    }
    if (n > 0)
        buf[keep < n ? keep : n - 1] = '\0';
    return keep;
}

char *grid_dump(const grid *g)
{
    size_t cap = (size_t)g->w * 4 + 2, total = 0;
    char *out = mlsys_xrealloc(NULL, (size_t)g->h * cap + 1);
    for (int y = 0; y < g->h; y++) {
        size_t k = grid_row_text(g, y, out + total, cap);
        total += k;
        out[total++] = '\n';
    }
    out[total] = '\0';
    return out;
}

char *grid_dump_attrs(const grid *g)
{
    static const char digits[] = "0123456789abcdefghijklmnopqrstuv";
    size_t total = 0;
    char *out = mlsys_xrealloc(NULL, (size_t)g->h * ((size_t)g->w + 1) + 1);
    for (int y = 0; y < g->h; y++) {
        size_t start = total, keep = total;
        for (int x = 0; x < g->w; x++) {
            unsigned s = g->cells[(size_t)y * (size_t)g->w + (size_t)x].attr & 0x1fu;
            out[total++] = s ? digits[s] : '.';
            if (s)
                keep = total;
        }
        total = keep > start ? keep : start;
        out[total++] = '\n';
    }
    out[total] = '\0';
    return out;
}
