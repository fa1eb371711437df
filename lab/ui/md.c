/* md.c - the chapter reader (see md.h). md4c parses the Markdown and calls us back per block,
 * span and run of text; we collect each block's inline text as styled characters, then wrap
 * it to the width left after the prefixes of the enclosing quotes and list items, and append
 * the finished lines to the document. Tables are measured once they are complete; code
 * blocks are copied line by line and clipped, never wrapped. */
#include "md.h"
#include "../../core/mlsys.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef HAVE_MD4C
#include <md4c.h>
#endif

#define MD_MAX_WIDTH 4096
#define CODE_INDENT 2
#define CODE_INDENT_MIN_WIDTH 24        /* narrower than this, code starts at the margin */
#define TAB_STOP 4

/* A growing array of cells. Inline text holds one cell per character (' ' for any space,
 * '\n' for a hard break, no tails); laid-out lines hold one cell per column. */
typedef struct cbuf {
    grid_cell *v;
    int n, cap;
} cbuf;

static void cb_push(cbuf *b, uint32_t ch, grid_attr a)
{
    if (b->n == b->cap) {
        b->cap = b->cap ? b->cap * 2 : 64;
        b->v = mlsys_xrealloc(b->v, (size_t)b->cap * sizeof *b->v);
    }
    b->v[b->n].ch = ch;
    b->v[b->n].attr = a;
    b->n++;
}

/* Append a character as columns: its cell and, when wide, a tail. */
static int cb_put_col(cbuf *b, uint32_t ch, grid_attr a)
{
    int w = grid_cp_width(ch);
    if (w == 0)
        return 0;
    cb_push(b, ch, a);
    if (w == 2)
        cb_push(b, GRID_TAIL, a);
    return w;
}

static void cb_free(cbuf *b)
{
    free(b->v);
    b->v = NULL;
    b->n = b->cap = 0;
}

static int is_ctrl(uint32_t cp)
{
    return cp < 0x20 || (cp >= 0x7f && cp < 0xa0);
}

/* Inline text: spaces and line ends fold to ' ', other controls to U+FFFD, and zero-width
 * characters are dropped (the grid would drop them anyway). */
static void inline_push_utf8(cbuf *b, const char *s, size_t len, grid_attr a)
{
    size_t i = 0;
    while (i < len) {
        uint32_t cp;
        i += grid_utf8_decode(s + i, len - i, &cp);
        if (cp == '\t' || cp == '\n' || cp == '\r' || cp == '\f' || cp == '\v')
            cp = ' ';
        else if (is_ctrl(cp))
            cp = GRID_REPLACEMENT;
        if (grid_cp_width(cp) == 0)
            continue;
        cb_push(b, cp, a);
    }
}

/* ---- the document ---- */

static void doc_add_line(md_doc *d, const grid_cell *c, int n, int kind, int level)
{
    if (n > d->width) {
        n = d->width;
        if (c[n].ch == GRID_TAIL && n > 0)
            n--;                /* the wide character at the edge does not fit */
    }
    while (n > 0 && c[n - 1].ch == ' ' && !(c[n - 1].attr & (GRID_REVERSE | GRID_UNDERLINE)))
        n--;
    if (d->nlines % 256 == 0)
        d->lines = mlsys_xrealloc(d->lines, ((size_t)d->nlines + 256) * sizeof *d->lines);
    md_line *l = &d->lines[d->nlines++];
    l->cells = mlsys_xrealloc(NULL, (size_t)(n ? n : 1) * sizeof *l->cells);
    if (n)
        memcpy(l->cells, c, (size_t)n * sizeof *c);
    /* A lone lead whose tail was cut off above shows as a blank. */
    if (n > 0 && grid_cp_width(l->cells[n - 1].ch) == 2) {
        l->cells[n - 1].ch = ' ';
        l->cells[n - 1].attr = 0;
    }
    l->len = n;
    l->kind = (unsigned char)kind;
    l->level = (unsigned char)level;
}

/* ---- word wrapping ---- */

typedef void (*line_fn)(void *ctx, const grid_cell *c, int n);

/* Greedy wrap of inline cells to avail columns. A line may break at a space (runs of spaces
 * count as one) and on either side of a wide character; a word longer than a line is cut.
 * Each finished line (one cell per column) goes to fn. */
static void wrap(const grid_cell *in, int n, int avail, line_fn fn, void *ctx)
{
    cbuf line = {0};
    int lw = 0, space = 0;
    grid_attr space_attr = 0;
    if (avail < 1)
        avail = 1;
    int i = 0;
    while (i < n) {
        uint32_t ch = in[i].ch;
        if (ch == '\n') {
            fn(ctx, line.v, line.n);
            line.n = lw = space = 0;
            i++;
            continue;
        }
        if (ch == ' ') {
            if (lw > 0 && !space) {
                space = 1;
                space_attr = in[i].attr;
            }
            i++;
            continue;
        }
        int j = i, tw = 0;
        if (grid_cp_width(ch) == 2) {
            j = i + 1;
            tw = 2;
        } else {
            while (j < n && in[j].ch != ' ' && in[j].ch != '\n' && grid_cp_width(in[j].ch) != 2) {
                tw += grid_cp_width(in[j].ch);
                j++;
            }
        }
        if (lw > 0 && lw + space + tw > avail) {
            fn(ctx, line.v, line.n);
            line.n = lw = space = 0;
        }
        if (space && lw > 0) {
            cb_push(&line, ' ', space_attr & ~(grid_attr)GRID_UNDERLINE);
            lw++;
            /* Keep an underline running through a link's spaces. */
            if ((space_attr & GRID_UNDERLINE) && (in[i].attr & GRID_UNDERLINE))
                line.v[line.n - 1].attr = space_attr;
        }
        space = 0;
        for (int k = i; k < j; k++) {
            int cw = grid_cp_width(in[k].ch);
            if (lw > 0 && lw + cw > avail) {
                fn(ctx, line.v, line.n);
                line.n = lw = 0;
            }
            lw += cb_put_col(&line, in[k].ch, in[k].attr);
        }
        i = j;
    }
    if (line.n > 0)
        fn(ctx, line.v, line.n);
    cb_free(&line);
}

#ifdef HAVE_MD4C

/* ---- helpers only the md4c renderer needs ---- */

static void cb_put_str(cbuf *b, const char *s, grid_attr a)
{
    size_t len = strlen(s), i = 0;
    while (i < len) {
        uint32_t cp;
        i += grid_utf8_decode(s + i, len - i, &cp);
        cb_put_col(b, cp, a);
    }
}

static char *cells_to_utf8(const grid_cell *c, int n, int collapse)
{
    size_t cap = (size_t)n * 4 + 1, len = 0;
    char *s = mlsys_xrealloc(NULL, cap);
    int space = 0;
    for (int i = 0; i < n; i++) {
        uint32_t ch = c[i].ch;
        if (ch == GRID_TAIL)
            continue;
        if (collapse && (ch == ' ' || ch == '\n')) {
            space = len > 0;
            continue;
        }
        if (space) {
            s[len++] = ' ';
            space = 0;
        }
        len += (size_t)grid_utf8_encode(ch, s + len);
    }
    s[len] = '\0';
    return s;
}

/* Width of the inline text on one line, and of its longest unbreakable piece. */
static void measure(const grid_cell *in, int n, int *natural, int *longest)
{
    int w = 0, word = 0, best = 0, space = 0;
    for (int i = 0; i < n; i++) {
        uint32_t ch = in[i].ch;
        if (ch == ' ' || ch == '\n') {
            space = w > 0;
            word = 0;
            continue;
        }
        int cw = grid_cp_width(ch);
        if (cw == 2)
            word = 0;
        w += space + cw;
        space = 0;
        word += cw;
        if (word > best)
            best = word;
        if (cw == 2)
            word = 0;
    }
    *natural = w;
    *longest = best;
}

/* ---- the renderer's state ---- */

typedef enum { C_QUOTE, C_UL, C_OL, C_LI } ckind;

typedef struct container {
    ckind kind;
    unsigned next;              /* C_OL: number of the next item */
    char delim;                 /* C_OL: '.' or ')' */
    int used;                   /* C_LI: the marker has been shown */
    int mw;                     /* C_LI: marker width in columns */
    char marker[24];            /* C_LI: "• " or "12. " */
} container;

typedef struct tcell {
    cbuf text;
    int align;                  /* 0 left, 1 centre, 2 right */
} tcell;

typedef struct trow {
    tcell *cells;
    int n, cap;
    int head;
} trow;

typedef struct render {
    md_doc *doc;
    int width, ascii;
    container *stack;
    int depth, cap;
    int lists;                  /* lists open */
    cbuf inl;                   /* inline text of the block being read */
    cbuf *cur;                  /* where text goes: &inl or a table cell */
    cbuf lb;                    /* the line being assembled */
    int em, strong, code, link, del, img;
    int heading;                /* level while inside a heading */
    int in_code;                /* inside a code or HTML block */
    char *code_raw;
    size_t code_len, code_cap;
    int need_blank;
    int line_kind, line_level;  /* what emit_wrapped lines are */
    /* the table being read */
    int in_table, in_head, tcols;
    trow *rows;
    int nrows, rows_cap;
} render;

static container *push_container(render *r, ckind k)
{
    if (r->depth == r->cap) {
        r->cap = r->cap ? r->cap * 2 : 16;
        r->stack = mlsys_xrealloc(r->stack, (size_t)r->cap * sizeof *r->stack);
    }
    container *c = &r->stack[r->depth++];
    memset(c, 0, sizeof *c);
    c->kind = k;
    return c;
}

static void pop_container(render *r)
{
    if (r->depth > 0)
        r->depth--;
}

static int prefix_width(const render *r)
{
    int w = 0;
    for (int i = 0; i < r->depth && w < r->width; i++) {
        if (r->stack[i].kind == C_QUOTE)
            w += 2;
        else if (r->stack[i].kind == C_LI)
            w += r->stack[i].mw;
    }
    return w;
}

/* The quote bars and list markers of the open containers. A list item shows its marker on
 * its first line and blanks of the same width after it (the hanging indent). Stops at the
 * width, so deep nesting costs no more than one line. */
static void build_prefix(render *r, cbuf *lb, int blank)
{
    grid_attr bar = GRID_PAIR(MD_PAIR_QUOTE), mark = GRID_PAIR(MD_PAIR_RULE);
    for (int i = 0; i < r->depth && lb->n < r->width; i++) {
        container *c = &r->stack[i];
        if (c->kind == C_QUOTE) {
            cb_put_col(lb, r->ascii ? '|' : 0x2502, bar);
            cb_push(lb, ' ', 0);
        } else if (c->kind == C_LI) {
            if (!blank && !c->used) {
                cb_put_str(lb, c->marker, mark);
                c->used = 1;
            } else {
                for (int k = 0; k < c->mw; k++)
                    cb_push(lb, ' ', 0);
            }
        }
    }
}

static void emit_blank(render *r)
{
    r->lb.n = 0;
    build_prefix(r, &r->lb, 1);
    doc_add_line(r->doc, r->lb.v, r->lb.n, MD_LINE_BLANK, 0);
}

/* Called before the first line of any block: one blank line separates blocks. */
static void start_block(render *r)
{
    if (r->need_blank && r->doc->nlines > 0)
        emit_blank(r);
    r->need_blank = 0;
}

static void emit_line(render *r, const grid_cell *c, int n, int kind, int level)
{
    start_block(r);
    r->lb.n = 0;
    build_prefix(r, &r->lb, 0);
    for (int i = 0; i < n; i++)
        cb_push(&r->lb, c[i].ch, c[i].attr);
    doc_add_line(r->doc, r->lb.v, r->lb.n, kind, level);
}

static void emit_wrapped_line(void *ctx, const grid_cell *c, int n)
{
    render *r = ctx;
    emit_line(r, c, n, r->line_kind, r->line_level);
}

static int avail_width(const render *r)
{
    int a = r->width - prefix_width(r);
    return a < 1 ? 1 : a;
}

/* Wrap and emit the collected inline text, then forget it. */
static void flush_inline(render *r, int kind, int level)
{
    if (r->inl.n > 0) {
        r->line_kind = kind;
        r->line_level = level;
        wrap(r->inl.v, r->inl.n, avail_width(r), emit_wrapped_line, r);
    }
    r->inl.n = 0;
}

static void emit_rule(render *r, uint32_t ch, grid_attr a, int kind, int level)
{
    cbuf rule = {0};
    int w = avail_width(r);
    for (int i = 0; i < w; i++)
        cb_push(&rule, ch, a);
    emit_line(r, rule.v, rule.n, kind, level);
    cb_free(&rule);
}

static grid_attr text_attr(const render *r)
{
    grid_attr a = 0;
    if (r->heading)
        a |= GRID_BOLD | GRID_PAIR(MD_PAIR_HEADING);
    if (r->in_table && r->in_head)
        a |= GRID_BOLD;
    if (r->strong)
        a |= GRID_BOLD;
    if (r->em)
        a |= GRID_ITALIC;
    if (r->del)
        a |= GRID_DIM;
    if (r->link) {
        a |= GRID_UNDERLINE;
        a = (a & ~(grid_attr)0xff00u) | GRID_PAIR(MD_PAIR_LINK);
    }
    if (r->code)
        a = (a & ~(grid_attr)0xff00u) | GRID_PAIR(MD_PAIR_CODE);
    return a;
}

/* ---- entities ---- */

typedef struct entity { const char *name; uint32_t cp; } entity;

static const entity entities[] = {
    {"amp", '&'}, {"lt", '<'}, {"gt", '>'}, {"quot", '"'}, {"apos", '\''},
    {"nbsp", 0xa0}, {"copy", 0xa9}, {"reg", 0xae}, {"deg", 0xb0}, {"plusmn", 0xb1},
    {"middot", 0xb7}, {"times", 0xd7}, {"divide", 0xf7}, {"ndash", 0x2013},
    {"mdash", 0x2014}, {"lsquo", 0x2018}, {"rsquo", 0x2019}, {"ldquo", 0x201c},
    {"rdquo", 0x201d}, {"bull", 0x2022}, {"hellip", 0x2026}, {"larr", 0x2190},
    {"uarr", 0x2191}, {"rarr", 0x2192}, {"darr", 0x2193}, {"harr", 0x2194},
    {"rArr", 0x21d2}, {"sum", 0x2211}, {"minus", 0x2212}, {"infin", 0x221e},
    {"asymp", 0x2248}, {"ne", 0x2260}, {"le", 0x2264}, {"ge", 0x2265}, {"Sigma", 0x3a3},
    {"alpha", 0x3b1}, {"beta", 0x3b2}, {"mu", 0x3bc}, {"Psi", 0x3a8},
};

/* "&name;" or "&#123;" or "&#x7b;" to a code point; 0 when unknown. */
static uint32_t entity_cp(const char *s, size_t n)
{
    if (n < 3 || s[0] != '&' || s[n - 1] != ';')
        return 0;
    s++;
    n -= 2;
    if (s[0] == '#') {
        uint32_t v = 0;
        int hex = n > 1 && (s[1] == 'x' || s[1] == 'X');
        size_t i = hex ? 2 : 1;
        if (i >= n)
            return 0;
        for (; i < n; i++) {
            int d;
            char ch = s[i];
            if (ch >= '0' && ch <= '9')
                d = ch - '0';
            else if (hex && ch >= 'a' && ch <= 'f')
                d = ch - 'a' + 10;
            else if (hex && ch >= 'A' && ch <= 'F')
                d = ch - 'A' + 10;
            else
                return 0;
            v = v * (hex ? 16u : 10u) + (uint32_t)d;
            if (v > 0x10ffff)
                return GRID_REPLACEMENT;
        }
        if (v == 0 || (v >= 0xd800 && v <= 0xdfff))
            return GRID_REPLACEMENT;
        return v;
    }
    for (size_t i = 0; i < sizeof entities / sizeof entities[0]; i++)
        if (strlen(entities[i].name) == n && memcmp(entities[i].name, s, n) == 0)
            return entities[i].cp;
    return 0;
}

/* ---- md4c callbacks ---- */

static void code_append(render *r, const char *s, size_t n)
{
    if (r->code_len + n + 1 > r->code_cap) {
        r->code_cap = (r->code_len + n + 1) * 2;
        r->code_raw = mlsys_xrealloc(r->code_raw, r->code_cap);
    }
    memcpy(r->code_raw + r->code_len, s, n);
    r->code_len += n;
}

static int on_text(MD_TEXTTYPE type, const MD_CHAR *s, MD_SIZE n, void *u)
{
    render *r = u;
    if (r->in_code) {
        code_append(r, s, n);
        return 0;
    }
    grid_attr a = text_attr(r);
    switch (type) {
    case MD_TEXT_NULLCHAR:
        cb_push(r->cur, GRID_REPLACEMENT, a);
        break;
    case MD_TEXT_BR:
        cb_push(r->cur, r->in_table ? ' ' : '\n', a);
        break;
    case MD_TEXT_SOFTBR:
        cb_push(r->cur, ' ', a);
        break;
    case MD_TEXT_ENTITY: {
        uint32_t cp = entity_cp(s, n);
        if (cp)
            cb_push(r->cur, cp, a);
        else
            inline_push_utf8(r->cur, s, n, a);
        break;
    }
    default:
        inline_push_utf8(r->cur, s, n, a);
        break;
    }
    return 0;
}

static int on_enter_span(MD_SPANTYPE type, void *detail, void *u)
{
    render *r = u;
    (void)detail;
    switch (type) {
    case MD_SPAN_EM: r->em++; break;
    case MD_SPAN_STRONG: r->strong++; break;
    case MD_SPAN_CODE: r->code++; break;
    case MD_SPAN_A: r->link++; break;
    case MD_SPAN_DEL: r->del++; break;
    case MD_SPAN_IMG:
        r->img++;
        inline_push_utf8(r->cur, "[image: ", 8, text_attr(r));
        break;
    default: break;
    }
    return 0;
}

static int on_leave_span(MD_SPANTYPE type, void *detail, void *u)
{
    render *r = u;
    (void)detail;
    switch (type) {
    case MD_SPAN_EM: r->em--; break;
    case MD_SPAN_STRONG: r->strong--; break;
    case MD_SPAN_CODE: r->code--; break;
    case MD_SPAN_A: r->link--; break;
    case MD_SPAN_DEL: r->del--; break;
    case MD_SPAN_IMG:
        r->img--;
        cb_push(r->cur, ']', text_attr(r));
        break;
    default: break;
    }
    return 0;
}

/* The bullet of a list nested `level` lists deep, or an item number. */
static void make_marker(render *r, container *li)
{
    container *list = NULL;
    int level = 0;
    for (int i = r->depth - 2; i >= 0; i--) {
        if (r->stack[i].kind == C_UL || r->stack[i].kind == C_OL) {
            if (!list)
                list = &r->stack[i];
            level++;
        }
    }
    if (list && list->kind == C_OL) {
        snprintf(li->marker, sizeof li->marker, "%u%c ", list->next, list->delim ? list->delim : '.');
        list->next++;
    } else {
        static const char *const utf8[] = {"\u2022 ", "\u25e6 ", "\u25aa "};
        static const char *const ascii[] = {"* ", "- ", "+ "};
        int k = level > 0 ? (level - 1) % 3 : 0;
        snprintf(li->marker, sizeof li->marker, "%s", r->ascii ? ascii[k] : utf8[k]);
    }
    li->mw = grid_text_width(li->marker, strlen(li->marker));
}

static void code_flush(render *r)
{
    int avail = avail_width(r);
    int indent = avail >= CODE_INDENT_MIN_WIDTH ? CODE_INDENT : 0;
    int room = avail - indent;
    grid_attr a = GRID_PAIR(MD_PAIR_CODE);
    cbuf line = {0};
    size_t i = 0, len = r->code_len;
    /* md4c ends every code line with '\n'; a missing final one still ends a line. */
    while (i < len) {
        line.n = 0;
        for (int k = 0; k < indent; k++)
            cb_push(&line, ' ', 0);
        int col = 0;
        while (i < len && r->code_raw[i] != '\n') {
            uint32_t cp;
            i += grid_utf8_decode(r->code_raw + i, len - i, &cp);
            if (cp == '\t') {
                do {
                    cb_push(&line, ' ', a);
                    col++;
                } while (col % TAB_STOP);
                continue;
            }
            if (cp == '\r')
                continue;
            if (is_ctrl(cp))
                cp = GRID_REPLACEMENT;
            col += cb_put_col(&line, cp, a);
        }
        if (i < len)
            i++;                /* the '\n' */
        if (col > room) {
            /* Clip: keep what fits before the indicator, never half a wide character. */
            int keep = indent + (room > 1 ? room - 1 : 0);
            if (keep < line.n && line.v[keep].ch == GRID_TAIL)
                line.v[keep - 1].ch = ' ';
            line.n = keep;
            cb_push(&line, r->ascii ? '>' : 0x203a, GRID_DIM | GRID_PAIR(MD_PAIR_RULE));
        }
        emit_line(r, line.v, line.n, MD_LINE_CODE, 0);
    }
    cb_free(&line);
    r->code_len = 0;
}

/* ---- tables ---- */

static trow *table_row(render *r)
{
    if (r->nrows == r->rows_cap) {
        r->rows_cap = r->rows_cap ? r->rows_cap * 2 : 8;
        r->rows = mlsys_xrealloc(r->rows, (size_t)r->rows_cap * sizeof *r->rows);
    }
    trow *row = &r->rows[r->nrows++];
    memset(row, 0, sizeof *row);
    row->head = r->in_head;
    return row;
}

static tcell *table_cell(render *r, int align)
{
    if (r->nrows == 0)
        table_row(r);
    trow *row = &r->rows[r->nrows - 1];
    if (row->n == row->cap) {
        row->cap = row->cap ? row->cap * 2 : 4;
        row->cells = mlsys_xrealloc(row->cells, (size_t)row->cap * sizeof *row->cells);
    }
    tcell *c = &row->cells[row->n++];
    memset(c, 0, sizeof *c);
    c->align = align;
    return c;
}

static void table_free(render *r)
{
    for (int i = 0; i < r->nrows; i++) {
        for (int k = 0; k < r->rows[i].n; k++)
            cb_free(&r->rows[i].cells[k].text);
        free(r->rows[i].cells);
    }
    r->nrows = 0;
}

/* Column widths for the room left after the borders: natural widths when they fit; else
 * the widest columns shrink first, down to their longest word; then below it. */
static void table_fit(const int *nat, const int *word, int nc, int room, int *w)
{
    long sum = 0;
    int maxnat = 1;
    for (int i = 0; i < nc; i++) {
        sum += nat[i];
        if (nat[i] > maxnat)
            maxnat = nat[i];
    }
    if (sum <= room) {
        memcpy(w, nat, (size_t)nc * sizeof *w);
        return;
    }
    for (int pass = 0; pass < 2; pass++) {
        /* Largest cap c with sum(max(floor, min(nat, c))) <= room. */
        int lo = 1, hi = maxnat, best = 0;
        while (lo <= hi) {
            int c = lo + (hi - lo) / 2;
            long s = 0;
            for (int i = 0; i < nc; i++) {
                int f = pass == 0 ? (word[i] < nat[i] ? word[i] : nat[i]) : 1;
                int v = nat[i] < c ? nat[i] : c;
                s += v > f ? v : f;
            }
            if (s <= room) {
                best = c;
                lo = c + 1;
            } else {
                hi = c - 1;
            }
        }
        if (best == 0 && pass == 0)
            continue;
        if (best == 0)
            best = 1;
        long used = 0;
        for (int i = 0; i < nc; i++) {
            int f = pass == 0 ? (word[i] < nat[i] ? word[i] : nat[i]) : 1;
            int v = nat[i] < best ? nat[i] : best;
            w[i] = v > f ? v : f;
            used += w[i];
        }
        /* Hand the columns left over to the narrowed columns, one each from the left. */
        for (int i = 0; i < nc && used < room; i++)
            if (w[i] < nat[i]) {
                w[i]++;
                used++;
            }
        return;
    }
}

typedef struct cell_lines {
    cbuf *v;
    int n, cap;
} cell_lines;

static void collect_line(void *ctx, const grid_cell *c, int n)
{
    cell_lines *cl = ctx;
    if (cl->n == cl->cap) {
        cl->cap = cl->cap ? cl->cap * 2 : 4;
        cl->v = mlsys_xrealloc(cl->v, (size_t)cl->cap * sizeof *cl->v);
    }
    cbuf *b = &cl->v[cl->n++];
    memset(b, 0, sizeof *b);
    for (int i = 0; i < n; i++)
        cb_push(b, c[i].ch, c[i].attr);
}

static void table_border(render *r, const int *w, int nc, grid_line l, grid_line m, grid_line e)
{
    grid_attr a = GRID_PAIR(MD_PAIR_RULE);
    uint32_t h = grid_line_cp(GRID_H, r->ascii);
    cbuf b = {0};
    cb_push(&b, grid_line_cp(l, r->ascii), a);
    for (int i = 0; i < nc && b.n <= r->width; i++) {
        for (int k = 0; k < w[i] + 2; k++)
            cb_push(&b, h, a);
        cb_push(&b, grid_line_cp(i + 1 < nc ? m : e, r->ascii), a);
    }
    emit_line(r, b.v, b.n, MD_LINE_TABLE, 0);
    cb_free(&b);
}

/* A table too wide for its columns' longest words is shown as records instead of being cut
 * inside words: per body row, its first cell after a bullet, then "heading: cell" for each
 * other column, wrapped with an indent (the last heading row names the columns). */
typedef struct indent_ctx {
    render *r;
    int first;                  /* the next line is a record's first */
    const char *lead, *hang;    /* prefixes of the first and the following lines */
} indent_ctx;

static void emit_indented(void *ctx, const grid_cell *c, int n)
{
    indent_ctx *ic = ctx;
    cbuf b = {0};
    cb_put_str(&b, ic->first ? ic->lead : ic->hang, ic->first ? GRID_PAIR(MD_PAIR_RULE) : 0);
    ic->first = 0;
    for (int i = 0; i < n; i++)
        cb_push(&b, c[i].ch, c[i].attr);
    emit_line(ic->r, b.v, b.n, MD_LINE_TEXT, 0);
    cb_free(&b);
}

static void table_records(render *r, int nc)
{
    const trow *head = NULL;
    for (int i = 0; i < r->nrows; i++)
        if (r->rows[i].head)
            head = &r->rows[i];
    int room = avail_width(r);
    cbuf t = {0};
    for (int ri = 0; ri < r->nrows; ri++) {
        const trow *row = &r->rows[ri];
        if (row->head)
            continue;
        for (int k = 0; k < row->n && k < nc; k++) {
            const cbuf *cell = &row->cells[k].text;
            t.n = 0;
            if (k > 0 && head && k < head->n && head->cells[k].text.n > 0) {
                for (int i = 0; i < head->cells[k].text.n; i++)
                    cb_push(&t, head->cells[k].text.v[i].ch,
                            head->cells[k].text.v[i].attr | GRID_BOLD);
                cb_put_str(&t, ": ", GRID_BOLD);
            }
            for (int i = 0; i < cell->n; i++)
                cb_push(&t, cell->v[i].ch, cell->v[i].attr | (k == 0 ? GRID_BOLD : 0));
            indent_ctx ic = {r, 1, k == 0 ? (r->ascii ? "* " : "\u25aa ") : "    ",
                             k == 0 ? "  " : "      "};
            int lead = k == 0 ? 2 : 4;
            wrap(t.v, t.n, room - lead > 8 ? room - lead : 8, emit_indented, &ic);
        }
    }
    cb_free(&t);
    table_free(r);
}

static void table_flush(render *r)
{
    int nc = r->tcols;
    for (int i = 0; i < r->nrows; i++)
        if (r->rows[i].n > nc)
            nc = r->rows[i].n;
    if (nc <= 0 || r->nrows == 0) {
        table_free(r);
        return;
    }
    int *nat = mlsys_xrealloc(NULL, (size_t)nc * 3 * sizeof *nat);
    int *word = nat + nc, *w = nat + 2 * nc;
    for (int i = 0; i < nc; i++)
        nat[i] = word[i] = 1;
    for (int i = 0; i < r->nrows; i++)
        for (int k = 0; k < r->rows[i].n; k++) {
            int a, b;
            measure(r->rows[i].cells[k].text.v, r->rows[i].cells[k].text.n, &a, &b);
            if (a > nat[k])
                nat[k] = a;
            if (b > word[k])
                word[k] = b;
        }
    long room = (long)avail_width(r) - (3L * nc + 1), words = 0;
    for (int i = 0; i < nc; i++)
        words += word[i] < nat[i] ? word[i] : nat[i];
    if (words > room) {
        /* the columns cannot keep their words whole: records, not broken words */
        free(nat);
        table_records(r, nc);
        return;
    }
    table_fit(nat, word, nc, room > 0 ? (int)(room < MD_MAX_WIDTH ? room : MD_MAX_WIDTH) : 0, w);
    if (room <= 0)
        for (int i = 0; i < nc; i++)
            w[i] = 1;

    grid_attr a = GRID_PAIR(MD_PAIR_RULE);
    uint32_t v = grid_line_cp(GRID_V, r->ascii);
    table_border(r, w, nc, GRID_TL, GRID_T_DOWN, GRID_TR);
    cell_lines *cl = mlsys_xrealloc(NULL, (size_t)nc * sizeof *cl);
    cbuf b = {0};
    for (int ri = 0; ri < r->nrows; ri++) {
        trow *row = &r->rows[ri];
        int height = 1;
        memset(cl, 0, (size_t)nc * sizeof *cl);
        for (int k = 0; k < row->n; k++) {
            wrap(row->cells[k].text.v, row->cells[k].text.n, w[k], collect_line, &cl[k]);
            if (cl[k].n > height)
                height = cl[k].n;
        }
        for (int y = 0; y < height; y++) {
            b.n = 0;
            cb_push(&b, v, a);
            for (int k = 0; k < nc && b.n <= r->width; k++) {
                cbuf *t = y < cl[k].n ? &cl[k].v[y] : NULL;
                int tw = t ? t->n : 0;
                int pad = w[k] > tw ? w[k] - tw : 0;
                int align = k < row->n ? row->cells[k].align : 0;
                int left = align == 2 ? pad : align == 1 ? pad / 2 : 0;
                cb_push(&b, ' ', 0);
                for (int s = 0; s < left; s++)
                    cb_push(&b, ' ', 0);
                for (int s = 0; s < tw && s < w[k]; s++) {
                    /* A wide character in a one-column cell cannot show. */
                    int cut = s + 1 == w[k] && s + 1 < tw && t->v[s + 1].ch == GRID_TAIL;
                    cb_push(&b, cut ? ' ' : t->v[s].ch, t->v[s].attr);
                }
                for (int s = left; s < pad; s++)
                    cb_push(&b, ' ', 0);
                cb_push(&b, ' ', 0);
                cb_push(&b, v, a);
            }
            emit_line(r, b.v, b.n, MD_LINE_TABLE, 0);
        }
        for (int k = 0; k < nc; k++) {
            for (int y = 0; y < cl[k].n; y++)
                cb_free(&cl[k].v[y]);
            free(cl[k].v);
        }
        if (row->head && (ri + 1 == r->nrows || !r->rows[ri + 1].head))
            table_border(r, w, nc, GRID_T_RIGHT, GRID_CROSS, GRID_T_LEFT);
    }
    table_border(r, w, nc, GRID_BL, GRID_T_UP, GRID_BR);
    cb_free(&b);
    free(cl);
    free(nat);
    table_free(r);
}

/* ---- blocks ---- */

static int on_enter_block(MD_BLOCKTYPE type, void *detail, void *u)
{
    render *r = u;
    switch (type) {
    case MD_BLOCK_QUOTE:
        flush_inline(r, MD_LINE_TEXT, 0);
        start_block(r);         /* the blank line before a quote has no bar */
        push_container(r, C_QUOTE);
        break;
    case MD_BLOCK_UL:
        flush_inline(r, MD_LINE_TEXT, 0);
        push_container(r, C_UL);
        r->lists++;
        break;
    case MD_BLOCK_OL: {
        const MD_BLOCK_OL_DETAIL *d = detail;
        flush_inline(r, MD_LINE_TEXT, 0);
        container *c = push_container(r, C_OL);
        c->next = d->start;
        c->delim = d->mark_delimiter;
        r->lists++;
        break;
    }
    case MD_BLOCK_LI: {
        const MD_BLOCK_LI_DETAIL *d = detail;
        flush_inline(r, MD_LINE_TEXT, 0);
        container *c = push_container(r, C_LI);
        make_marker(r, c);
        if (d && d->is_task)
            inline_push_utf8(&r->inl, d->task_mark == ' ' ? "[ ] " : "[x] ", 4, 0);
        break;
    }
    case MD_BLOCK_HR:
        flush_inline(r, MD_LINE_TEXT, 0);
        emit_rule(r, grid_line_cp(GRID_H, r->ascii), GRID_DIM | GRID_PAIR(MD_PAIR_RULE),
                  MD_LINE_RULE, 0);
        r->need_blank = 1;
        break;
    case MD_BLOCK_H: {
        const MD_BLOCK_H_DETAIL *d = detail;
        flush_inline(r, MD_LINE_TEXT, 0);
        r->heading = d->level >= 1 && d->level <= 6 ? (int)d->level : 6;
        break;
    }
    case MD_BLOCK_CODE:
    case MD_BLOCK_HTML:
        flush_inline(r, MD_LINE_TEXT, 0);
        r->in_code = 1;
        r->code_len = 0;
        break;
    case MD_BLOCK_TABLE: {
        const MD_BLOCK_TABLE_DETAIL *d = detail;
        flush_inline(r, MD_LINE_TEXT, 0);
        r->in_table = 1;
        r->tcols = d->col_count < 1024 ? (int)d->col_count : 1024;
        r->nrows = 0;
        break;
    }
    case MD_BLOCK_THEAD:
        r->in_head = 1;
        break;
    case MD_BLOCK_TBODY:
        r->in_head = 0;
        break;
    case MD_BLOCK_TR:
        table_row(r);
        break;
    case MD_BLOCK_TH:
    case MD_BLOCK_TD: {
        const MD_BLOCK_TD_DETAIL *d = detail;
        int align = d->align == MD_ALIGN_CENTER ? 1 : d->align == MD_ALIGN_RIGHT ? 2 : 0;
        r->cur = &table_cell(r, align)->text;
        break;
    }
    default:
        break;
    }
    return 0;
}

static void add_heading(render *r, int first_line, int level)
{
    md_doc *d = r->doc;
    if (d->nheadings % 32 == 0)
        d->headings = mlsys_xrealloc(d->headings, ((size_t)d->nheadings + 32) * sizeof *d->headings);
    md_heading *h = &d->headings[d->nheadings++];
    h->line = first_line;
    h->level = level;
    h->text = cells_to_utf8(r->inl.v, r->inl.n, 1);
}

static int on_leave_block(MD_BLOCKTYPE type, void *detail, void *u)
{
    render *r = u;
    (void)detail;
    switch (type) {
    case MD_BLOCK_P:
        flush_inline(r, MD_LINE_TEXT, 0);
        r->need_blank = 1;
        break;
    case MD_BLOCK_H: {
        int level = r->heading;
        r->heading = 0;
        if (r->inl.n > 0) {
            start_block(r);
            int first = r->doc->nlines;
            add_heading(r, first, level);
            flush_inline(r, MD_LINE_HEADING, level);
            if (level <= 2)
                emit_rule(r, grid_line_cp(level == 1 ? GRID_DH : GRID_H, r->ascii),
                          GRID_PAIR(MD_PAIR_RULE), MD_LINE_RULE, level);
        }
        r->need_blank = 1;
        break;
    }
    case MD_BLOCK_CODE:
    case MD_BLOCK_HTML:
        r->in_code = 0;
        code_flush(r);
        r->need_blank = 1;
        break;
    case MD_BLOCK_TABLE:
        r->in_table = 0;
        r->in_head = 0;
        r->cur = &r->inl;
        table_flush(r);
        r->need_blank = 1;
        break;
    case MD_BLOCK_TH:
    case MD_BLOCK_TD:
        r->cur = &r->inl;
        break;
    case MD_BLOCK_LI:
        flush_inline(r, MD_LINE_TEXT, 0);
        pop_container(r);
        break;
    case MD_BLOCK_UL:
    case MD_BLOCK_OL:
        flush_inline(r, MD_LINE_TEXT, 0);
        pop_container(r);
        if (--r->lists <= 0) {
            r->lists = 0;
            r->need_blank = 1;
        }
        break;
    case MD_BLOCK_QUOTE:
        flush_inline(r, MD_LINE_TEXT, 0);
        pop_container(r);
        r->need_blank = 1;
        break;
    default:
        break;
    }
    return 0;
}

static int render_md4c(md_doc *d, const char *text, size_t len)
{
    render r;
    memset(&r, 0, sizeof r);
    r.doc = d;
    r.width = d->width;
    r.ascii = (d->flags & MD_ASCII) != 0;
    r.cur = &r.inl;
    MD_PARSER p;
    memset(&p, 0, sizeof p);
    p.flags = MD_FLAG_TABLES | MD_FLAG_STRIKETHROUGH | MD_FLAG_TASKLISTS | MD_FLAG_NOHTML;
    p.enter_block = on_enter_block;
    p.leave_block = on_leave_block;
    p.enter_span = on_enter_span;
    p.leave_span = on_leave_span;
    p.text = on_text;
    int rc = md_parse(text, (MD_SIZE)len, &p, &r);
    flush_inline(&r, MD_LINE_TEXT, 0);
    table_free(&r);
    free(r.rows);
    free(r.stack);
    free(r.code_raw);
    cb_free(&r.inl);
    cb_free(&r.lb);
    return rc;
}

#endif /* HAVE_MD4C */

/* ---- the raw fallback ---- */

typedef struct raw_ctx {
    md_doc *doc;
    int kind;
} raw_ctx;

static void raw_line(void *ctx, const grid_cell *c, int n)
{
    raw_ctx *rc = ctx;
    doc_add_line(rc->doc, c, n, rc->kind, 0);
}

static void raw_wrap_str(md_doc *d, const char *s, size_t len, grid_attr a, int kind)
{
    cbuf in = {0};
    inline_push_utf8(&in, s, len, a);
    raw_ctx rc = {d, kind};
    wrap(in.v, in.n, d->width, raw_line, &rc);
    cb_free(&in);
}

/* Each source line wrapped; fenced or indented code clipped instead, so diagrams stay. */
static void render_raw(md_doc *d, const char *text, size_t len, const char *notice)
{
    raw_wrap_str(d, notice, strlen(notice), GRID_DIM | GRID_PAIR(MD_PAIR_NOTICE), MD_LINE_NOTICE);
    int fence = 0;
    size_t i = 0;
    cbuf line = {0};
    while (i < len) {
        size_t e = i;
        while (e < len && text[e] != '\n')
            e++;
        const char *s = text + i;
        size_t n = e - i;
        if (n > 0 && s[n - 1] == '\r')
            n--;
        size_t lead = 0;
        while (lead < n && s[lead] == ' ')
            lead++;
        int is_fence = n - lead >= 3 && (memcmp(s + lead, "```", 3) == 0 || memcmp(s + lead, "~~~", 3) == 0);
        if (is_fence)
            fence = !fence;
        if (n == 0) {
            doc_add_line(d, NULL, 0, MD_LINE_BLANK, 0);
        } else if (fence || is_fence || lead >= 4 || s[0] == '\t') {
            line.n = 0;
            size_t k = 0;
            int col = 0;
            while (k < n) {
                uint32_t cp;
                k += grid_utf8_decode(s + k, n - k, &cp);
                if (cp == '\t') {
                    do {
                        cb_push(&line, ' ', 0);
                        col++;
                    } while (col % TAB_STOP);
                    continue;
                }
                if (is_ctrl(cp))
                    cp = GRID_REPLACEMENT;
                col += cb_put_col(&line, cp, GRID_PAIR(MD_PAIR_CODE));
            }
            if (col > d->width) {
                int keep = d->width - 1;
                if (keep > 0 && keep < line.n && line.v[keep].ch == GRID_TAIL)
                    line.v[keep - 1].ch = ' ';
                line.n = keep > 0 ? keep : 0;
                cb_push(&line, (d->flags & MD_ASCII) ? '>' : 0x203a, GRID_DIM);
            }
            doc_add_line(d, line.v, line.n, MD_LINE_CODE, 0);
        } else {
            raw_wrap_str(d, s, n, 0, MD_LINE_TEXT);
        }
        i = e < len ? e + 1 : e;
    }
    cb_free(&line);
}

/* ---- public ---- */

int md_available(void)
{
#ifdef HAVE_MD4C
    return 1;
#else
    return 0;
#endif
}

static void doc_reset(md_doc *d)
{
    for (int i = 0; i < d->nlines; i++)
        free(d->lines[i].cells);
    for (int i = 0; i < d->nheadings; i++)
        free(d->headings[i].text);
    free(d->lines);
    free(d->headings);
    d->lines = NULL;
    d->headings = NULL;
    d->nlines = d->nheadings = 0;
}

md_doc *md_render(const char *text, size_t len, int width, unsigned flags)
{
    md_doc *d = mlsys_xrealloc(NULL, sizeof *d);
    memset(d, 0, sizeof *d);
    d->width = width < 1 ? 1 : width > MD_MAX_WIDTH ? MD_MAX_WIDTH : width;
    d->flags = flags;
    if (!text)
        len = 0;
    if (len > 0xffffffffu)
        len = 0xffffffffu;      /* md4c sizes are 32-bit */
#ifdef HAVE_MD4C
    if (!(flags & MD_RAW)) {
        if (render_md4c(d, text ? text : "", len) == 0)
            return d;
        doc_reset(d);
        d->raw = 1;
        render_raw(d, text, len, "(the Markdown reader failed on this text: showing it raw)");
        return d;
    }
    d->raw = 1;
    render_raw(d, text, len, "(raw text view)");
#else
    d->raw = 1;
    render_raw(d, text, len, "(built without md4c: showing the chapter as raw text)");
#endif
    return d;
}

void md_doc_free(md_doc *d)
{
    if (!d)
        return;
    doc_reset(d);
    free(d);
}

size_t md_line_text(const md_doc *d, int i, char *buf, size_t n)
{
    size_t len = 0;
    if (i >= 0 && i < d->nlines) {
        const md_line *l = &d->lines[i];
        for (int k = 0; k < l->len; k++) {
            if (l->cells[k].ch == GRID_TAIL)
                continue;
            char u[4];
            int m = grid_utf8_encode(l->cells[k].ch, u);
            for (int j = 0; j < m; j++, len++)
                if (len + 1 < n)
                    buf[len] = u[j];
        }
    }
    if (n > 0)
        buf[len < n ? len : n - 1] = '\0';
    return len;
}

static unsigned char fold(unsigned char c)
{
    return c >= 'A' && c <= 'Z' ? (unsigned char)(c - 'A' + 'a') : c;
}

/* Does needle start at column col of line l? *end gets the column after the match. */
static int match_at(const md_line *l, int col, const char *needle, size_t nlen, int *end)
{
    size_t m = 0;
    int k = col;
    while (m < nlen) {
        while (k < l->len && l->cells[k].ch == GRID_TAIL)
            k++;
        if (k >= l->len)
            return 0;
        char u[4];
        int ub = grid_utf8_encode(l->cells[k].ch, u);
        for (int j = 0; j < ub; j++) {
            if (m >= nlen)
                return 0;       /* the needle ends inside this character */
            if (fold((unsigned char)u[j]) != fold((unsigned char)needle[m]))
                return 0;
            m++;
        }
        k++;
    }
    while (k < l->len && l->cells[k].ch == GRID_TAIL)
        k++;
    *end = k;
    return 1;
}

int md_match_col(const md_doc *d, int i, const char *needle, int start_col, int *ncols)
{
    if (!needle || !*needle || i < 0 || i >= d->nlines)
        return -1;
    const md_line *l = &d->lines[i];
    size_t nlen = strlen(needle);
    for (int c = start_col < 0 ? 0 : start_col; c < l->len; c++) {
        int end;
        if (l->cells[c].ch != GRID_TAIL && match_at(l, c, needle, nlen, &end)) {
            if (ncols)
                *ncols = end - c;
            return c;
        }
    }
    return -1;
}

int md_search(const md_doc *d, const char *needle, int *lines, int max)
{
    int count = 0;
    if (!needle || !*needle)
        return 0;
    for (int i = 0; i < d->nlines; i++)
        if (md_match_col(d, i, needle, 0, NULL) >= 0) {
            if (lines && count < max)
                lines[count] = i;
            count++;
        }
    return count;
}

int md_search_next(const md_doc *d, const char *needle, int from, int dir)
{
    if (!needle || !*needle || d->nlines == 0)
        return -1;
    int n = d->nlines, step = dir < 0 ? -1 : 1;
    if (from < 0 || from >= n)
        from = step > 0 ? n - 1 : 0;
    for (int k = 1; k <= n; k++) {
        int i = ((from + step * k) % n + n) % n;
        if (md_match_col(d, i, needle, 0, NULL) >= 0)
            return i;
    }
    return -1;
}

void md_draw(const md_doc *d, grid *g, int x, int y, int w, int h, int top)
{
    int ox0 = g->cx0, oy0 = g->cy0, ox1 = g->cx1, oy1 = g->cy1;
    /* Draw inside the intersection of the caller's clip and the rectangle. */
    int x0 = x > ox0 ? x : ox0, y0 = y > oy0 ? y : oy0;
    long xe = (long)x + (w > 0 ? w : 0), ye = (long)y + (h > 0 ? h : 0);
    int x1 = xe < ox1 ? (int)xe : ox1, y1 = ye < oy1 ? (int)ye : oy1;
    if (x1 <= x0 || y1 <= y0)
        return;
    g->cx0 = x0;
    g->cy0 = y0;
    g->cx1 = x1;
    g->cy1 = y1;
    for (int row = 0; row < h; row++) {
        long li = (long)top + row;
        if (li < 0 || li >= d->nlines)
            continue;
        const md_line *l = &d->lines[li];
        grid_put_cells(g, x, y + row, l->cells, l->len < w ? l->len : w);
    }
    g->cx0 = ox0;
    g->cy0 = oy0;
    g->cx1 = ox1;
    g->cy1 = oy1;
}

char *md_read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    size_t cap = 8192, n = 0;
    char *buf = mlsys_xrealloc(NULL, cap);
    for (;;) {
        if (n + 4096 + 1 > cap) {
            cap *= 2;
            buf = mlsys_xrealloc(buf, cap);
        }
        size_t got = fread(buf + n, 1, cap - n - 1, f);
        n += got;
        if (got == 0)
            break;
    }
    int err = ferror(f);
    fclose(f);
    if (err) {
        free(buf);
        errno = EIO;
        return NULL;
    }
    buf[n] = '\0';
    if (len)
        *len = n;
    return buf;
}
