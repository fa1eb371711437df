/* test_md.c - the off-screen grid and the Markdown chapter reader: exact frames for each kind
 * of block at widths 40 and 80 (expected lines written here by hand), golden frames under
 * tests/frames/ (GENERATE=1 rewrites them), wrapping and wide characters, search, empty and
 * huge inputs, the raw fallback, and every shipped chapter at widths 20..200. */
#include "../../lab/exercise/exercise.h"
#include "../../lab/ui/grid.h"
#include "../../lab/lab.h"
#include "../../lab/ui/md.h"

#include <check.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- helpers ---- */

/* Render md at width w, draw every line into a grid of that width, and dump it. */
static char *frame(const char *md, int w, unsigned flags)
{
    md_doc *d = md_render(md, strlen(md), w, flags);
    grid *g = grid_create(w, d->nlines);
    grid_set_ascii(g, (flags & MD_ASCII) != 0);
    md_draw(d, g, 0, 0, w, d->nlines, 0);
    char *s = grid_dump(g);
    grid_free(g);
    md_doc_free(d);
    return s;
}

#define ck_frame(md, w, flags, expected)                                                    \
    do {                                                                                    \
        char *got_ = frame((md), (w), (flags));                                             \
        ck_assert_msg(strcmp(got_, (expected)) == 0, "width %d:\n--- got ---\n%s--- want ---\n%s", \
                      (w), got_, (expected));                                               \
        free(got_);                                                                         \
    } while (0)

static const grid_cell *cell_of(const md_doc *d, int line, int col)
{
    ck_assert_int_lt(line, d->nlines);
    ck_assert_int_lt(col, d->lines[line].len);
    return &d->lines[line].cells[col];
}

/* Plain ifs in the loops: every ck_assert records its location through a pipe to the
 * parent (CK_FORK), which is slow when called per cell. */
static void assert_fits(const md_doc *d, int w)
{
    for (int i = 0; i < d->nlines; i++) {
        if (d->lines[i].len > w)
            ck_abort_msg("line %d is %d wide at width %d", i, d->lines[i].len, w);
        for (int k = 0; k < d->lines[i].len; k++) {
            uint32_t ch = d->lines[i].cells[k].ch;
            if (ch == GRID_TAIL && (k == 0 || grid_cp_width(d->lines[i].cells[k - 1].ch) != 2))
                ck_abort_msg("line %d col %d: tail without lead", i, k);
            if (ch != GRID_TAIL && ch < 0x20)
                ck_abort_msg("line %d col %d: control %u", i, k, ch);
        }
    }
}

static char *slurp(const char *path, size_t *len)
{
    char *t = md_read_file(path, len);
    ck_assert_msg(t != NULL, "cannot read %s (run the tests from the repository root)", path);
    return t;
}

/* Compare with tests/frames/<name>, or rewrite it when GENERATE=1. */
static void golden(const char *name, const char *got)
{
    char path[256];
    snprintf(path, sizeof path, "tests/frames/%s", name);
    const char *gen = getenv("GENERATE");
    if (gen && !strcmp(gen, "1")) {
        FILE *f = fopen(path, "wb");
        ck_assert_msg(f != NULL, "cannot write %s", path);
        fputs(got, f);
        fclose(f);
        return;
    }
    size_t len;
    char *want = md_read_file(path, &len);
    ck_assert_msg(want != NULL, "missing golden frame %s (make it with GENERATE=1)", path);
    ck_assert_msg(strcmp(got, want) == 0, "%s differs (GENERATE=1 rewrites it):\n--- got ---\n%s"
                  "--- want ---\n%s", path, got, want);
    free(want);
}

/* ---- grid ---- */

START_TEST(grid_put_and_clip)
{
    grid *g = grid_create(8, 3);
    ck_assert_int_eq(grid_put(g, 0, 0, "hello world", 0), 11);   /* columns, not clipped */
    ck_assert_int_eq(grid_put(g, -2, 1, "abcdef", 0), 6);
    grid_clip(g, 2, 2, 3, 1);
    grid_put(g, 0, 2, "0123456", GRID_BOLD);
    grid_unclip(g);
    char *s = grid_dump(g);
    ck_assert_str_eq(s, "hello wo\ncdef\n  234\n");
    free(s);
    ck_assert_int_eq(grid_get(g, 2, 2)->attr, GRID_BOLD);
    ck_assert_int_eq(grid_get(g, 1, 2)->attr, 0);
    ck_assert_ptr_null(grid_get(g, 8, 0));
    ck_assert_ptr_null(grid_get(g, 0, -1));
    grid_printf(g, 5, 1, 0, "%d", 42);
    char row[64];
    grid_row_text(g, 1, row, sizeof row);
    ck_assert_str_eq(row, "cdef 42");
    grid_free(g);
}
END_TEST

START_TEST(grid_wide_chars)
{
    grid *g = grid_create(6, 3);
    ck_assert_int_eq(grid_put(g, 0, 0, "中a文", 0), 5);
    ck_assert_uint_eq(grid_get(g, 0, 0)->ch, 0x4e2d);
    ck_assert_uint_eq(grid_get(g, 1, 0)->ch, GRID_TAIL);
    ck_assert_uint_eq(grid_get(g, 2, 0)->ch, 'a');
    ck_assert_uint_eq(grid_get(g, 4, 0)->ch, GRID_TAIL);
    /* A wide character at the last column does not fit: a blank instead. */
    grid_put(g, 5, 1, "文", 0);
    ck_assert_uint_eq(grid_get(g, 5, 1)->ch, ' ');
    /* Writing over either half of a wide character blanks the other half. */
    grid_put(g, 0, 2, "文文", 0);
    grid_put(g, 1, 2, "x", 0);
    grid_put(g, 2, 2, "y", 0);
    char *s = grid_dump(g);
    ck_assert_str_eq(s, "中a文\n\n xy\n");
    free(s);
    ck_assert_int_eq(grid_cp_width('a'), 1);
    ck_assert_int_eq(grid_cp_width(0x4e2d), 2);      /* CJK */
    ck_assert_int_eq(grid_cp_width(0x1f600), 2);     /* emoji */
    ck_assert_int_eq(grid_cp_width(0x0301), 0);      /* combining acute */
    ck_assert_int_eq(grid_cp_width(0x2500), 1);      /* box drawing */
    ck_assert_int_eq(grid_text_width("a中é", strlen("a中é")), 4);
    grid_free(g);
}
END_TEST

START_TEST(grid_utf8)
{
    uint32_t cp;
    ck_assert_uint_eq(grid_utf8_decode("\xe2\x94\x80", 3, &cp), 3);
    ck_assert_uint_eq(cp, 0x2500);
    ck_assert_uint_eq(grid_utf8_decode("\xe2\x94", 2, &cp), 1);        /* truncated */
    ck_assert_uint_eq(cp, GRID_REPLACEMENT);
    ck_assert_uint_eq(grid_utf8_decode("\xc0\xaf", 2, &cp), 1);        /* overlong */
    ck_assert_uint_eq(cp, GRID_REPLACEMENT);
    ck_assert_uint_eq(grid_utf8_decode("\xed\xa0\x80", 3, &cp), 1);    /* surrogate */
    ck_assert_uint_eq(cp, GRID_REPLACEMENT);
    ck_assert_uint_eq(grid_utf8_decode("\xff", 1, &cp), 1);
    ck_assert_uint_eq(cp, GRID_REPLACEMENT);
    ck_assert_uint_eq(grid_utf8_decode("", 0, &cp), 0);
    uint32_t samples[] = {'A', 0xe9, 0x2502, 0x4e2d, 0x1f600, 0x10ffff};
    for (size_t i = 0; i < sizeof samples / sizeof samples[0]; i++) {
        char buf[4];
        int n = grid_utf8_encode(samples[i], buf);
        ck_assert_uint_eq(grid_utf8_decode(buf, (size_t)n, &cp), (size_t)n);
        ck_assert_uint_eq(cp, samples[i]);
    }
    /* Controls never reach a cell. */
    grid *g = grid_create(4, 1);
    grid_put(g, 0, 0, "a\tb\x1b", 0);
    ck_assert_uint_eq(grid_get(g, 1, 0)->ch, GRID_REPLACEMENT);
    ck_assert_uint_eq(grid_get(g, 3, 0)->ch, GRID_REPLACEMENT);
    grid_free(g);
}
END_TEST

START_TEST(grid_boxes)
{
    grid *g = grid_create(6, 4);
    grid_box(g, 0, 0, 6, 4, 0, 0);
    grid_put(g, 1, 1, "ok", 0);
    char *s = grid_dump(g);
    ck_assert_str_eq(s, "┌────┐\n│ok  │\n│    │\n└────┘\n");
    free(s);
    grid_clear(g);
    grid_box(g, 0, 0, 4, 3, 1, 0);
    s = grid_dump(g);
    ck_assert_str_eq(s, "╔══╗\n║  ║\n╚══╝\n\n");
    free(s);
    grid_clear(g);
    grid_set_ascii(g, 1);
    grid_box(g, 1, 0, 5, 3, 0, 0);
    grid_hline(g, 0, 3, 3, 0);
    s = grid_dump(g);
    ck_assert_str_eq(s, " +---+\n |   |\n +---+\n---\n");
    free(s);
    /* The ASCII grid turns any non-ASCII text into stand-ins. */
    grid_clear(g);
    grid_put(g, 0, 0, "─│→≈", 0);
    grid_put(g, 0, 1, "中", 0);
    s = grid_dump(g);
    ck_assert_str_eq(s, "-|>~\n??\n\n\n");
    free(s);
    ck_assert_uint_eq(grid_line_cp(GRID_CROSS, 0), 0x253c);
    ck_assert_uint_eq(grid_line_cp(GRID_CROSS, 1), '+');
    /* A box clipped by the grid edge: no crash, only the visible part. */
    grid_set_ascii(g, 0);
    grid_clear(g);
    grid_box(g, 4, 2, 5, 5, 0, 0);
    ck_assert_uint_eq(grid_get(g, 4, 2)->ch, 0x250c);
    ck_assert_uint_eq(grid_get(g, 5, 3)->ch, ' ');
    grid_free(g);
}
END_TEST

START_TEST(grid_attr_dump)
{
    grid *g = grid_create(5, 1);
    grid_put(g, 0, 0, "ab", GRID_BOLD);
    grid_put(g, 2, 0, "c", GRID_ITALIC | GRID_PAIR(3));
    grid_put(g, 3, 0, "d", GRID_PAIR(3));
    char *s = grid_dump_attrs(g);
    ck_assert_str_eq(s, "112\n");
    free(s);
    ck_assert_uint_eq(GRID_PAIR_OF(grid_get(g, 3, 0)->attr), 3);
    grid_resize(g, 2, 2);
    s = grid_dump(g);
    ck_assert_str_eq(s, "\n\n");
    free(s);
    grid_free(g);
}
END_TEST

static const char *const chapter_files_raw[] = {
    "assets/chapters/ch01.md", "assets/chapters/ch02.md", "assets/chapters/ch03.md",
};

/* ---- blocks, exact frames ---- */

START_TEST(md_headings)
{
    ck_assert(md_available());
    ck_frame("# Title\n\ntext\n", 10, 0, "Title\n══════════\n\ntext\n");
    ck_frame("## Sub\n### Third\n", 8, 0, "Sub\n────────\n\nThird\n");
    ck_frame("# Title\n", 10, MD_ASCII, "Title\n==========\n");
    ck_frame("## Sub\n", 6, MD_ASCII, "Sub\n------\n");
    /* A long heading wraps; the rule spans the width. */
    ck_frame("# A heading that wraps at forty columns, really it does\n", 40, 0,
             "A heading that wraps at forty columns,\nreally it does\n"
             "════════════════════════════════════════\n");
    const char *two = "# One\n\ntext\n\n## Two *x*\n";
    md_doc *d = md_render(two, strlen(two), 40, 0);
    ck_assert_int_eq(d->nheadings, 2);
    ck_assert_int_eq(d->headings[0].level, 1);
    ck_assert_str_eq(d->headings[0].text, "One");
    ck_assert_int_eq(d->headings[0].line, 0);
    ck_assert_str_eq(d->headings[1].text, "Two x");
    ck_assert_int_eq(d->headings[1].line, 5);
    ck_assert_int_eq(d->lines[0].kind, MD_LINE_HEADING);
    ck_assert_int_eq(d->lines[1].kind, MD_LINE_RULE);
    ck_assert(cell_of(d, 0, 0)->attr & GRID_BOLD);
    ck_assert_int_eq(GRID_PAIR_OF(cell_of(d, 0, 0)->attr), MD_PAIR_HEADING);
    md_doc_free(d);
}
END_TEST

START_TEST(md_emphasis)
{
    const char *src = "a *b* **c** `d` [e](http://x.y) ~~f~~";
    md_doc *d = md_render(src, strlen(src), 80, 0);
    char buf[128];
    md_line_text(d, 0, buf, sizeof buf);
    ck_assert_str_eq(buf, "a b c d e f");       /* no markup characters, link target hidden */
    ck_assert_uint_eq(cell_of(d, 0, 0)->attr, 0);
    ck_assert_uint_eq(cell_of(d, 0, 2)->attr & GRID_STYLE_MASK, GRID_ITALIC);
    ck_assert_uint_eq(cell_of(d, 0, 4)->attr & GRID_STYLE_MASK, GRID_BOLD);
    ck_assert_int_eq(GRID_PAIR_OF(cell_of(d, 0, 6)->attr), MD_PAIR_CODE);
    ck_assert(cell_of(d, 0, 8)->attr & GRID_UNDERLINE);
    ck_assert_int_eq(GRID_PAIR_OF(cell_of(d, 0, 8)->attr), MD_PAIR_LINK);
    ck_assert(cell_of(d, 0, 10)->attr & GRID_DIM);
    md_doc_free(d);
    ck_frame("***both*** &amp; &lt;x&gt; &#x4e2d;\n", 40, 0, "both & <x> 中\n");
    ck_frame("![a cat](cat.png)\n", 40, 0, "[image: a cat]\n");
    /* Hard line break. */
    ck_frame("one  \ntwo\\\nthree\n", 40, 0, "one\ntwo\nthree\n");
}
END_TEST

START_TEST(md_paragraph_wrap)
{
    const char *p = "The quick brown fox jumps over the lazy dog and keeps running far away.";
    ck_frame(p, 40, 0, "The quick brown fox jumps over the lazy\ndog and keeps running far away.\n");
    ck_frame(p, 80, 0, "The quick brown fox jumps over the lazy dog and keeps running far away.\n");
    /* A word longer than the line is cut; runs of spaces collapse. */
    ck_frame("abcdefghij   kl", 4, 0, "abcd\nefgh\nij\nkl\n");
    ck_frame("first para\n\nsecond para\n", 40, 0, "first para\n\nsecond para\n");
}
END_TEST

START_TEST(md_lists)
{
    ck_frame("- alpha beta gamma delta\n- two\n", 20, 0, "• alpha beta gamma\n  delta\n• two\n");
    ck_frame("- alpha beta gamma delta\n- two\n", 20, MD_ASCII, "* alpha beta gamma\n  delta\n* two\n");
    ck_frame("3. one\n4. two two two two two\n", 14, 0, "3. one\n4. two two two\n   two two\n");
    ck_frame("- a\n  - b\n  - c\n- d\n", 40, 0, "• a\n  ◦ b\n  ◦ c\n• d\n");
    ck_frame("1) x\n2) y\n", 40, 0, "1) x\n2) y\n");
    /* Loose lists keep a blank line between items; blocks around a list are spaced. */
    ck_frame("before\n\n- a\n\n- b\n\nafter\n", 40, 0, "before\n\n• a\n\n• b\n\nafter\n");
    ck_frame("- [x] done\n- [ ] open\n", 40, 0, "• [x] done\n• [ ] open\n");
    ck_frame("- item\n- ### Head\n", 40, 0, "• item\n• Head\n");   /* no blank inside a tight list */
    /* Items with a code block keep the hanging indent. */
    ck_frame("- item\n\n  ```\n  code\n  ```\n", 40, 0, "• item\n\n    code\n");
}
END_TEST

START_TEST(md_quotes_rules)
{
    ck_frame("> one two three four\n", 12, 0, "│ one two\n│ three four\n");
    ck_frame("> a\n>\n> b\n", 40, MD_ASCII, "| a\n|\n| b\n");
    ck_frame("> outer\n>> inner\n", 40, 0, "│ outer\n│\n│ │ inner\n");
    ck_frame("text\n\n> q\n\nmore\n", 40, 0, "text\n\n│ q\n\nmore\n");
    ck_frame("a\n\n---\n\nb\n", 6, 0, "a\n\n──────\n\nb\n");
    ck_frame("a\n\n***\n", 5, MD_ASCII, "a\n\n-----\n");
}
END_TEST

START_TEST(md_tables)
{
    const char *t = "| a | bb |\n|---|---:|\n| ccc | d |\n";
    const char *want =
        "┌─────┬────┐\n"
        "│ a   │ bb │\n"
        "├─────┼────┤\n"
        "│ ccc │  d │\n"
        "└─────┴────┘\n";
    ck_frame(t, 80, 0, want);
    ck_frame(t, 40, 0, want);
    ck_frame(t, 40, MD_ASCII,
             "+-----+----+\n"
             "| a   | bb |\n"
             "+-----+----+\n"
             "| ccc |  d |\n"
             "+-----+----+\n");
    /* Too wide: the wide column shrinks (never below its longest word while that fits) and
     * its cells wrap inside the column. */
    const char *wide = "| word | a much longer cell text |\n|---|---|\n| x | y |\n";
    ck_frame(wide, 20, 0,
             "┌──────┬───────────┐\n"
             "│ word │ a much    │\n"
             "│      │ longer    │\n"
             "│      │ cell text │\n"
             "├──────┼───────────┤\n"
             "│ x    │ y         │\n"
             "└──────┴───────────┘\n");
    ck_frame(wide, 40, 0,
             "┌──────┬─────────────────────────┐\n"
             "│ word │ a much longer cell text │\n"
             "├──────┼─────────────────────────┤\n"
             "│ x    │ y                       │\n"
             "└──────┴─────────────────────────┘\n");
    /* Centred column, styled cell, wide characters in a cell. */
    ck_frame("| h |\n|:-:|\n| **x** |\n| 中文 |\n", 40, 0,
             "┌──────┐\n"
             "│  h   │\n"
             "├──────┤\n"
             "│  x   │\n"
             "│ 中文 │\n"
             "└──────┘\n");
    /* Narrower than the columns' longest words: no word is cut, the rows become records
     * (the first cell after a bullet, then "heading: cell" per column, indented). */
    const char *comm = "| stage | forward | backward | after the step | total |\n"
                       "|---|---|---|---|---|\n"
                       "| ZeRO-3 | all_gather: D | all_gather: D + reduce_scatter: D | 0 | 3D |\n"
                       "| DDP | 0 | all_reduce: 2D | 0 | 2D |\n";
    ck_frame(comm, 30, 0,
             "▪ ZeRO-3\n"
             "    forward: all_gather: D\n"
             "    backward: all_gather: D +\n"
             "      reduce_scatter: D\n"
             "    after the step: 0\n"
             "    total: 3D\n"
             "▪ DDP\n"
             "    forward: 0\n"
             "    backward: all_reduce: 2D\n"
             "    after the step: 0\n"
             "    total: 2D\n");
    ck_frame(comm, 30, MD_ASCII,
             "* ZeRO-3\n"
             "    forward: all_gather: D\n"
             "    backward: all_gather: D +\n"
             "      reduce_scatter: D\n"
             "    after the step: 0\n"
             "    total: 3D\n"
             "* DDP\n"
             "    forward: 0\n"
             "    backward: all_reduce: 2D\n"
             "    after the step: 0\n"
             "    total: 2D\n");
    /* The chapters of Part II at the reader's width in an 80-column terminal, and at 60:
     * every word of every table cell appears whole */
    static const char *const part2[] = {"assets/chapters/ch05.md", "assets/chapters/ch06.md",
                                        "assets/chapters/ch07.md"};
    for (int c = 0; c < 3; c++) {
        size_t len;
        char *text = slurp(part2[c], &len);
        for (int w = 40; w <= 60; w += 7) {
            char *shown = frame(text, w, 0);
            for (char *save, *line = strtok_r(text, "\n", &save); line;
                 line = strtok_r(NULL, "\n", &save)) {
                if (line[0] != '|' || strstr(line, "---"))
                    continue;
                char *copy = strdup(line);
                for (char *s2, *word = strtok_r(copy, " |", &s2); word;
                     word = strtok_r(NULL, " |", &s2)) {
                    if (strchr(word, '`') || strchr(word, '*') || strlen(word) < 4)
                        continue;           /* markup is not shown as written */
                    ck_assert_msg(strstr(shown, word) != NULL, "%s at width %d: \"%s\" is cut",
                                  part2[c], w, word);
                }
                free(copy);
            }
            free(shown);
            free(text);
            text = slurp(part2[c], &len);   /* strtok_r wrote into it */
        }
        free(text);
    }
    md_doc *d = md_render(t, strlen(t), 40, 0);
    ck_assert_int_eq(d->lines[0].kind, MD_LINE_TABLE);
    ck_assert(cell_of(d, 1, 2)->attr & GRID_BOLD);             /* header cell "a" */
    ck_assert(!(cell_of(d, 3, 2)->attr & GRID_BOLD));          /* body cell "ccc" */
    md_doc_free(d);
}
END_TEST

START_TEST(md_code_blocks)
{
    const char *src = "```\n┌─┐\n│x│\t|\n└─┘\n```\n";
    ck_frame(src, 40, 0, "  ┌─┐\n  │x│ |\n  └─┘\n");
    /* Below 24 columns code starts at the margin; long lines are clipped, never wrapped. */
    ck_frame("```\n0123456789abcdefghijklmnop\nshort\n```\n", 20, 0,
             "0123456789abcdefghi›\nshort\n");
    ck_frame("```\n0123456789abcdefghijklmnop\n```\n", 20, MD_ASCII, "0123456789abcdefghi>\n");
    ck_frame("```c\n  indented {\n\n  }\n```\n", 40, 0, "    indented {\n\n    }\n");
    ck_frame("text\n\n    indented code\n\nmore\n", 40, 0, "text\n\n  indented code\n\nmore\n");
    /* A wide character cut by the clip leaves a blank, not half a character. */
    ck_frame("```\nabcdefghijklmnopqr中文\n```\n", 20, 0, "abcdefghijklmnopqr ›\n");
    ck_frame("```\nabcdefghijklmnopq中文\n```\n", 20, 0, "abcdefghijklmnopq中›\n");
    md_doc *d = md_render(src, strlen(src), 40, 0);
    ck_assert_int_eq(d->nlines, 3);
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(d->lines[i].kind, MD_LINE_CODE);
    ck_assert_int_eq(GRID_PAIR_OF(cell_of(d, 0, 2)->attr), MD_PAIR_CODE);
    md_doc_free(d);
}
END_TEST

/* ---- wrapping properties ---- */

START_TEST(md_wrap_never_exceeds)
{
    /* A paragraph of words of many lengths, wrapped at every width from 1 to 100: no line is
     * wider than the width, and when every word fits, the words come out unchanged and in
     * order. */
    char src[4096] = "";
    char words[4096] = "";
    size_t n = 0;
    unsigned seed = 7;
    for (int i = 0; i < 300; i++) {
        seed = seed * 1103515245u + 12345u;
        int len = 1 + (int)((seed >> 16) % 12);
        for (int k = 0; k < len; k++)
            src[n++] = (char)('a' + (i + k) % 26);
        src[n++] = (i % 17 == 16) ? '\n' : ' ';
    }
    src[n] = '\0';
    memcpy(words, src, n + 1);
    for (size_t i = 0; i < n; i++)
        if (words[i] == '\n')
            words[i] = ' ';
    words[n - 1] = '\0';
    for (int w = 1; w <= 100; w++) {
        md_doc *d = md_render(src, n, w, 0);
        assert_fits(d, w);
        if (w >= 12) {
            char *joined = calloc(1, n + 64);
            char line[256];
            for (int i = 0; i < d->nlines; i++) {
                md_line_text(d, i, line, sizeof line);
                if (line[0] == ' ')
                    ck_abort_msg("width %d line %d starts with a space", w, i);
                if (i)
                    strcat(joined, " ");
                strcat(joined, line);
            }
            ck_assert_msg(strcmp(joined, words) == 0, "width %d: words changed", w);
            free(joined);
        }
        md_doc_free(d);
    }
}
END_TEST

START_TEST(md_wide_wrap)
{
    /* Lines may break between wide characters, and a wide character never straddles the
     * edge: at width 5 two of them fill four columns. */
    ck_frame("中文中文中 ab\n", 5, 0, "中文\n中文\n中 ab\n");
    ck_frame("中文中文中 ab\n", 80, 0, "中文中文中 ab\n");
    ck_frame("- 中文中文\n", 5, 0, "• 中\n  文\n  中\n  文\n");
    for (int w = 1; w <= 30; w++) {
        const char *s = "混合 mixed テキスト 😀 emoji and 한국어 text, 中文字符测试这是一个很长的句子";
        md_doc *d = md_render(s, strlen(s), w, 0);
        assert_fits(d, w);
        md_doc_free(d);
    }
}
END_TEST

/* ---- search ---- */

START_TEST(md_search_lines)
{
    const char *src = "Alpha\n\nbeta ALPHA\n\ngamma\n\n中文abc\n";
    md_doc *d = md_render(src, strlen(src), 40, 0);
    ck_assert_int_eq(d->nlines, 7);
    int hits[4] = {-1, -1, -1, -1};
    ck_assert_int_eq(md_search(d, "alpha", hits, 4), 2);
    ck_assert_int_eq(hits[0], 0);
    ck_assert_int_eq(hits[1], 2);
    ck_assert_int_eq(md_search(d, "ALP", hits, 1), 2);      /* counts past max */
    ck_assert_int_eq(md_search(d, "zzz", hits, 4), 0);
    ck_assert_int_eq(md_search(d, "", hits, 4), 0);
    ck_assert_int_eq(md_search(d, "a", NULL, 0), 4);
    ck_assert_int_eq(md_search_next(d, "alpha", 0, 1), 2);
    ck_assert_int_eq(md_search_next(d, "alpha", 2, 1), 0);  /* wraps around */
    ck_assert_int_eq(md_search_next(d, "alpha", 0, -1), 2);
    ck_assert_int_eq(md_search_next(d, "gamma", 4, 1), 4);  /* itself, last */
    ck_assert_int_eq(md_search_next(d, "zzz", 0, 1), -1);
    int nc = 0;
    ck_assert_int_eq(md_match_col(d, 2, "alpha", 0, &nc), 5);
    ck_assert_int_eq(nc, 5);
    ck_assert_int_eq(md_match_col(d, 2, "a", 2, &nc), 3);  /* "beta": the a at column 3 */
    ck_assert_int_eq(md_match_col(d, 6, "abc", 0, &nc), 4);   /* after two wide chars */
    ck_assert_int_eq(md_match_col(d, 6, "文", 0, &nc), 2);
    ck_assert_int_eq(nc, 2);
    ck_assert_int_eq(md_match_col(d, 6, "\xe6", 0, &nc), -1); /* half a character */
    ck_assert_int_eq(md_match_col(d, 99, "a", 0, &nc), -1);
    md_doc_free(d);
    /* Search sees the rendered text: table cells and code, not the markup. */
    const char *t = "| Key | Value |\n|---|---|\n| rank | id |\n\n```\nRank0 code\n```\n*em*phasis\n";
    d = md_render(t, strlen(t), 40, 0);
    ck_assert_int_eq(md_search(d, "RANK", hits, 4), 2);
    ck_assert_int_eq(md_search(d, "emphasis", hits, 4), 1);
    ck_assert_int_eq(md_search(d, "*em*", hits, 4), 0);
    md_doc_free(d);
}
END_TEST

/* ---- odd inputs ---- */

START_TEST(md_empty_and_odd)
{
    md_doc *d = md_render("", 0, 40, 0);
    ck_assert_int_eq(d->nlines, 0);
    ck_assert_int_eq(d->nheadings, 0);
    md_doc_free(d);
    d = md_render(NULL, 0, 40, 0);
    ck_assert_int_eq(d->nlines, 0);
    md_doc_free(d);
    d = md_render("   \n\n\t\n", 7, 40, 0);
    ck_assert_int_eq(d->nlines, 0);
    md_doc_free(d);
    /* Widths below 1 count as 1; every byte value is survivable. */
    d = md_render("hello", 5, 0, 0);
    ck_assert_int_eq(d->width, 1);
    ck_assert_int_eq(d->nlines, 5);
    md_doc_free(d);
    char bytes[256];
    for (int i = 0; i < 256; i++)
        bytes[i] = (char)i;
    for (int w = 1; w <= 50; w += 7) {
        d = md_render(bytes, sizeof bytes, w, 0);
        assert_fits(d, w);
        md_doc_free(d);
        d = md_render(bytes, sizeof bytes, w, MD_RAW);
        assert_fits(d, w);
        md_doc_free(d);
    }
    /* Drawing clips to the rectangle and to the grid, with any top line. */
    d = md_render("one two three\n\nfour\n", 20, 40, 0);
    grid *g = grid_create(10, 3);
    md_draw(d, g, 2, 1, 5, 5, 0);
    char *s = grid_dump(g);
    ck_assert_str_eq(s, "\n  one t\n\n");
    free(s);
    grid_clear(g);
    md_draw(d, g, 0, 0, 10, 3, 2);
    md_draw(d, g, 0, 0, 10, 3, -5);
    md_draw(d, g, 0, 0, 10, 3, 99);
    md_draw(d, g, 0, 0, 0, 0, 0);
    grid_free(g);
    md_doc_free(d);
}
END_TEST

START_TEST(md_huge_inputs)
{
    /* 200000 five-letter words: 13 fit on an 80-column line (13·5 + 12 = 77; a 14th would
     * need 83). */
    size_t nw = 200000, n = nw * 6;
    char *big = malloc(n + 1);
    for (size_t i = 0; i < nw; i++)
        memcpy(big + i * 6, "words ", 6);
    big[n] = '\0';
    md_doc *d = md_render(big, n, 80, 0);
    ck_assert_int_eq(d->nlines, (int)((nw + 12) / 13));
    assert_fits(d, 80);
    md_doc_free(d);
    free(big);
    /* A long list and deep nesting. */
    size_t items = 20000;
    char *list = malloc(items * 7 + 1);
    for (size_t i = 0; i < items; i++)
        memcpy(list + i * 7, "- item\n", 7);
    list[items * 7] = '\0';
    d = md_render(list, items * 7, 30, 0);
    ck_assert_int_eq(d->nlines, (int)items);
    char line[32];
    md_line_text(d, (int)items - 1, line, sizeof line);
    ck_assert_str_eq(line, "• item");
    md_doc_free(d);
    free(list);
    size_t depth = 5000;
    char *deep = malloc(depth * 2 + 16);
    memset(deep, '>', depth);
    memcpy(deep + depth, " deep text\n", 12);
    d = md_render(deep, strlen(deep), 20, 0);
    assert_fits(d, 20);
    md_doc_free(d);
    for (size_t i = 0; i < depth; i++)
        memcpy(deep + 2 * i, "- ", 2);
    memcpy(deep + 2 * depth, "x\n", 3);
    d = md_render(deep, strlen(deep), 20, 0);
    assert_fits(d, 20);
    md_doc_free(d);
    free(deep);
}
END_TEST

START_TEST(md_raw_fallback)
{
    const char *src = "# Title\n\n```\nlong code line here\n```\nsome words here\n";
    const char *body = "# Title\n\n```\nlong code l›\n```\nsome words\nhere\n";
    if (md_available()) {
        ck_frame(src, 12, MD_RAW,
                 "(raw text\nview)\n# Title\n\n```\nlong code l›\n```\nsome words\nhere\n");
    } else {
        char *got = frame(src, 12, MD_RAW);     /* a longer notice, then the same body */
        ck_assert(strlen(got) > strlen(body));
        ck_assert_str_eq(got + strlen(got) - strlen(body), body);
        free(got);
    }
    md_doc *d = md_render(src, strlen(src), 40, MD_RAW);
    ck_assert_int_eq(d->raw, 1);
    ck_assert_int_eq(d->lines[0].kind, MD_LINE_NOTICE);
    ck_assert_int_eq(GRID_PAIR_OF(d->lines[0].cells[0].attr), MD_PAIR_NOTICE);
    ck_assert_int_eq(d->lines[4].kind, MD_LINE_CODE);
    md_doc_free(d);
    d = md_render(src, strlen(src), 40, 0);
    ck_assert_int_eq(d->raw, !md_available());
    md_doc_free(d);
}
END_TEST

/* Built without md4c: chapters still show, as raw text under a notice that says why. */
START_TEST(md_chapters_without_md4c)
{
    size_t len;
    char *text = slurp(chapter_files_raw[_i], &len);
    for (int w = 20; w <= 200; w++) {
        md_doc *d = md_render(text, len, w, 0);
        ck_assert_int_eq(d->raw, 1);
        ck_assert_int_eq(d->lines[0].kind, MD_LINE_NOTICE);
        assert_fits(d, w);
        md_doc_free(d);
    }
    md_doc *d = md_render(text, len, 200, 0);
    char line[256];
    md_line_text(d, 0, line, sizeof line);
    ck_assert_msg(strstr(line, "md4c") != NULL, "notice does not say why: %s", line);
    md_doc_free(d);
    free(text);
}
END_TEST

/* ---- golden frames ---- */

static const char sample[] =
    "# Ring all-reduce\n"
    "\n"
    "Each rank sends to **rank r+1** and receives from *rank r−1*; see `mlsys_sendrecv` and\n"
    "[the chapter](ch03.md).\n"
    "\n"
    "## Steps\n"
    "\n"
    "1. Reduce-scatter: N−1 steps, each moving D/N bytes per rank.\n"
    "2. All-gather: N−1 more.\n"
    "   - every link busy at once\n"
    "\n"
    "> Per rank: 2(N−1)/N · D, whatever N is.\n"
    "\n"
    "| N | bytes per rank | steps |\n"
    "|---:|---|---:|\n"
    "| 2 | 1.00·D | 2 |\n"
    "| 8 | 1.75·D | 14 |\n"
    "\n"
    "```\n"
    "  ┌────┐      ┌────┐\n"
    "  │ r0 │ ───► │ r1 │\n"
    "  └────┘      └────┘\n"
    "```\n"
    "\n"
    "日本語のテキストも、幅の狭い端末では正しく折り返して表示します。\n";

START_TEST(md_golden_frames)
{
    char *s = frame(sample, 40, 0);
    golden("md_sample_w40.txt", s);
    free(s);
    s = frame(sample, 80, 0);
    golden("md_sample_w80.txt", s);
    free(s);
    s = frame(sample, 40, MD_ASCII);
    golden("md_sample_w40_ascii.txt", s);
    for (const char *p = s; *p; p++)
        if ((unsigned char)*p >= 0x80)
            ck_abort_msg("non-ASCII byte in the --ascii frame at offset %d", (int)(p - s));
    free(s);
    /* The first screen of chapter 2 as the reader shows it: 80×24 from line 0. */
    size_t len;
    char *text = slurp("assets/chapters/ch02.md", &len);
    md_doc *d = md_render(text, len, 80, 0);
    grid *g = grid_create(80, 24);
    md_draw(d, g, 0, 0, 80, 24, 0);
    s = grid_dump(g);
    golden("md_ch02_80x24.txt", s);
    free(s);
    grid_free(g);
    md_doc_free(d);
    free(text);
}
END_TEST

/* ---- shipped chapters ---- */

static const char *const chapter_files[] = {
    "assets/chapters/ch01.md", "assets/chapters/ch02.md", "assets/chapters/ch03.md",
};
static const char *const chapter_labs[][4] = {
    {"ch01/verify-setup", "ch01/hello-distributed", NULL, NULL},
    {"ch02/send-recv-basic", "ch02/pipeline-simulation", "ch02/async-communication", NULL},
    {"ch03/collective-cheatsheet", "ch03/distributed-mean", "ch03/distributed-softmax", NULL},
};

START_TEST(md_chapters_render)
{
    size_t len;
    char *text = slurp(chapter_files[_i], &len);
    char want[32];
    snprintf(want, sizeof want, "Chapter %d", _i + 1);
    for (int w = 20; w <= 200; w++) {
        md_doc *d = md_render(text, len, w, w % 3 == 0 ? MD_ASCII : 0);
        ck_assert_int_eq(d->raw, 0);
        ck_assert_int_gt(d->nlines, 100);
        assert_fits(d, w);
        ck_assert_int_gt(d->nheadings, 5);
        ck_assert_int_eq(d->headings[0].level, 1);
        ck_assert_msg(strncmp(d->headings[0].text, want, strlen(want)) == 0,
                      "%s: first heading is \"%s\"", chapter_files[_i], d->headings[0].text);
        md_doc_free(d);
    }
    /* Each chapter names its labs and how to run them, and has tables and diagrams. */
    for (int k = 0; chapter_labs[_i][k]; k++)
        ck_assert_msg(strstr(text, chapter_labs[_i][k]) != NULL, "%s does not mention %s",
                      chapter_files[_i], chapter_labs[_i][k]);
    ck_assert(strstr(text, "mlsys-lab run ") != NULL);
    ck_assert(strstr(text, "--world-size") != NULL);
    ck_assert(strstr(text, "|---") != NULL);
    ck_assert(strstr(text, "┌") != NULL);
    free(text);
}
END_TEST

/* Every chapter text shipped in assets/chapters (whoever wrote it) lays out at every width
 * from 20 to 200, in UTF-8 and ASCII, and draws into a grid. */
START_TEST(md_all_shipped_chapters)
{
    DIR *dir = opendir("assets/chapters");
    ck_assert_msg(dir != NULL, "no assets/chapters (run the tests from the repository root)");
    int files = 0;
    struct dirent *e;
    while ((e = readdir(dir)) != NULL) {
        size_t n = strlen(e->d_name);
        if (n < 4 || strcmp(e->d_name + n - 3, ".md") != 0)
            continue;
        char path[512];
        snprintf(path, sizeof path, "assets/chapters/%s", e->d_name);
        size_t len;
        char *text = slurp(path, &len);
        for (int w = 20; w <= 200; w++) {
            md_doc *d = md_render(text, len, w, w % 2 ? MD_ASCII : 0);
            if (d->raw || d->nlines == 0)
                ck_abort_msg("%s at width %d: raw %d, %d lines", path, w, d->raw, d->nlines);
            assert_fits(d, w);
            if (w % 30 == 0) {
                grid *g = grid_create(w, 40);
                grid_set_ascii(g, w % 2);
                md_draw(d, g, 0, 0, w, 40, d->nlines / 2);
                free(grid_dump(g));
                grid_free(g);
            }
            md_doc_free(d);
        }
        free(text);
        files++;
    }
    closedir(dir);
    ck_assert_int_ge(files, 3);
}
END_TEST

/* Every line of a fenced code block that fits in 78 columns appears, unchanged, as a code line
 * of the 80-column rendering: diagrams are never re-wrapped. */
START_TEST(md_chapters_diagrams_intact)
{
    size_t len;
    char *text = slurp(chapter_files[_i], &len);
    md_doc *d = md_render(text, len, 80, 0);
    int next = 0, fence = 0, checked = 0;
    char *save = NULL;
    for (char *ln = strtok_r(text, "\n", &save); ln; ln = strtok_r(NULL, "\n", &save)) {
        if (!strncmp(ln, "```", 3)) {
            fence = !fence;
            continue;
        }
        if (!fence)
            continue;
        size_t n = strlen(ln);
        while (n > 0 && ln[n - 1] == ' ')
            ln[--n] = '\0';
        if (n == 0 || grid_text_width(ln, n) > 78)
            continue;
        char want[512], got[512];
        snprintf(want, sizeof want, "  %s", ln);
        int found = 0;
        for (; next < d->nlines && !found; next++) {
            if (d->lines[next].kind != MD_LINE_CODE)
                continue;
            md_line_text(d, next, got, sizeof got);
            found = strcmp(got, want) == 0;
        }
        ck_assert_msg(found, "%s: code line not found intact: \"%s\"", chapter_files[_i], ln);
        checked++;
    }
    ck_assert_int_gt(checked, 10);
    md_doc_free(d);
    free(text);
}
END_TEST

/* Every `mlsys-lab run <id> <flags>` line in a chapter's code blocks names a real lab and
 * parses with that lab's flag table, and the chapter table points at this text. */
START_TEST(md_chapter_commands)
{
    size_t len;
    char *text = slurp(chapter_files[_i], &len);
    int commands = 0, fence = 0;
    char *save = NULL;
    for (char *ln = strtok_r(text, "\n", &save); ln; ln = strtok_r(NULL, "\n", &save)) {
        if (!strncmp(ln, "```", 3))
            fence = !fence;
        if (!fence || strncmp(ln, "mlsys-lab run ", 14) != 0)
            continue;
        char copy[512], *argv[32], *tsave = NULL;
        int argc = 0;
        snprintf(copy, sizeof copy, "%s", ln + 14);
        for (char *t = strtok_r(copy, " ", &tsave); t && argc < 32; t = strtok_r(NULL, " ", &tsave))
            argv[argc++] = t;
        ck_assert_int_ge(argc, 1);
        const lab *l = lab_find(argv[0]);
        ck_assert_msg(l != NULL, "%s: unknown lab in \"%s\"", chapter_files[_i], ln);
        lab_args a;
        char err[256] = "";
        int rc = lab_args_parse(l, argc - 1, argv + 1, &a, err, sizeof err);
        ck_assert_msg(rc == 0, "%s: \"%s\" does not parse: %s", chapter_files[_i], ln, err);
        lab_args_free(&a);
        commands++;
    }
    ck_assert_int_ge(commands, 2);
    /* Exercise ids quoted in the text ("`ch02-ring-relay`") exist in the exercise tables. */
    free(text);
    text = slurp(chapter_files[_i], &len);
    char prefix[24];
    snprintf(prefix, sizeof prefix, "`ch%02d-", _i + 1);
    int ids = 0;
    for (const char *p = strstr(text, prefix); p; p = strstr(p + 1, prefix)) {
        char id[64];
        size_t n = 0;
        for (const char *q = p + 1; *q && *q != '`' && n + 1 < sizeof id; q++)
            id[n++] = *q;
        id[n] = '\0';
        ck_assert_msg(ex_find(id) != NULL, "%s: unknown exercise %s", chapter_files[_i], id);
        ids++;
    }
    ck_assert_int_ge(ids, 3);
    int found = 0;
    for (int i = 0; lab_chapters[i]; i++)
        if (lab_chapters[i]->number == _i + 1) {
            found = 1;
            ck_assert_ptr_nonnull(lab_chapters[i]->text_asset);
            ck_assert_str_eq(lab_chapters[i]->text_asset, chapter_files[_i]);
        }
    ck_assert_msg(found, "chapter %d is not in the chapter table", _i + 1);
    free(text);
}
END_TEST

static Suite *md_suite(void)
{
    Suite *s = suite_create("md");
    TCase *g = tcase_create("grid");
    tcase_add_test(g, grid_put_and_clip);
    tcase_add_test(g, grid_wide_chars);
    tcase_add_test(g, grid_utf8);
    tcase_add_test(g, grid_boxes);
    tcase_add_test(g, grid_attr_dump);
    suite_add_tcase(s, g);
    TCase *f = tcase_create("fallback");
    tcase_set_timeout(f, 30);
    tcase_add_test(f, md_raw_fallback);
    suite_add_tcase(s, f);
    if (!md_available()) {
        /* The Markdown tests need md4c; the fallback is what such a build shows. */
        printf("md4c not built in: Markdown layout tests replaced by the raw-text checks\n");
        tcase_add_loop_test(f, md_chapters_without_md4c, 0, 3);
        return s;
    }
    TCase *b = tcase_create("blocks");
    tcase_add_test(b, md_headings);
    tcase_add_test(b, md_emphasis);
    tcase_add_test(b, md_paragraph_wrap);
    tcase_add_test(b, md_lists);
    tcase_add_test(b, md_quotes_rules);
    tcase_add_test(b, md_tables);
    tcase_add_test(b, md_code_blocks);
    suite_add_tcase(s, b);
    TCase *w = tcase_create("wrap-search");
    tcase_add_test(w, md_wrap_never_exceeds);
    tcase_add_test(w, md_wide_wrap);
    tcase_add_test(w, md_search_lines);
    suite_add_tcase(s, w);
    TCase *o = tcase_create("inputs");
    tcase_set_timeout(o, 30);
    tcase_add_test(o, md_empty_and_odd);
    tcase_add_test(o, md_huge_inputs);
    suite_add_tcase(s, o);
    TCase *c = tcase_create("chapters");
    tcase_set_timeout(c, 30);
    tcase_add_test(c, md_golden_frames);
    tcase_add_loop_test(c, md_chapters_render, 0, 3);
    tcase_add_loop_test(c, md_chapters_diagrams_intact, 0, 3);
    tcase_add_loop_test(c, md_chapter_commands, 0, 3);
    tcase_add_test(c, md_all_shipped_chapters);
    suite_add_tcase(s, c);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(md_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
