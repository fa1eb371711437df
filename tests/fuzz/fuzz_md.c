/* fuzz_md.c - libFuzzer target for the chapter reader: any bytes are laid out at several
 * widths, in UTF-8 and ASCII mode, through md4c and through the raw fallback, then drawn into
 * a grid and searched. Besides crashes it checks the reader's promises: no line wider than
 * the document, no tail without its lead, every line reachable by md_line_text.
 * Built and run by tests/fuzz/run.sh (clang -fsanitize=fuzzer,address). */
#include "../../lab/ui/md.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void check_doc(const md_doc *d)
{
    for (int i = 0; i < d->nlines; i++) {
        const md_line *l = &d->lines[i];
        if (l->len < 0 || l->len > d->width) {
            fprintf(stderr, "line %d is %d columns wide, width %d\n", i, l->len, d->width);
            abort();
        }
        for (int k = 0; k < l->len; k++) {
            uint32_t ch = l->cells[k].ch;
            if (ch == GRID_TAIL && (k == 0 || grid_cp_width(l->cells[k - 1].ch) != 2)) {
                fprintf(stderr, "line %d column %d: tail without a wide lead\n", i, k);
                abort();
            }
            if (ch != GRID_TAIL && (ch < 0x20 || (ch >= 0x7f && ch < 0xa0))) {
                fprintf(stderr, "line %d column %d: control character %u\n", i, k, ch);
                abort();
            }
        }
    }
    for (int i = 0; i < d->nheadings; i++)
        if (d->headings[i].line < 0 || d->headings[i].line > d->nlines || !d->headings[i].text)
            abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const int widths[] = {1, 2, 9, 40, 123};
    const char *text = (const char *)data;
    unsigned flags = size > 0 ? (data[0] & 3u) : 0;
    char needle[8] = "";
    if (size > 4) {
        size_t n = data[1] % 6 + 1;
        if (n > size - 2)
            n = size - 2;
        memcpy(needle, text + 2, n);
        needle[n] = '\0';
    }
    for (size_t wi = 0; wi < sizeof widths / sizeof widths[0]; wi++) {
        int w = widths[wi];
        md_doc *d = md_render(text, size, w, flags);
        check_doc(d);
        int h = d->nlines < 50 ? d->nlines + 1 : 50;
        grid *g = grid_create(w, h);
        grid_set_ascii(g, (int)(flags & MD_ASCII));
        md_draw(d, g, 0, 0, w, h, d->nlines > h ? d->nlines - h : 0);
        md_draw(d, g, w / 3, 1, w / 2, h - 1, 1);
        char *dump = grid_dump(g);
        free(dump);
        int hits[4];
        int n = md_search(d, needle, hits, 4);
        for (int i = 0; i < n && i < 4; i++)
            if (md_match_col(d, hits[i], needle, 0, NULL) < 0)
                abort();
        (void)md_search_next(d, needle, 0, 1);
        (void)md_search_next(d, needle, 0, -1);
        char buf[64];
        for (int i = 0; i < d->nlines && i < 8; i++)
            md_line_text(d, i, buf, sizeof buf);
        grid_free(g);
        md_doc_free(d);
    }
    /* The grid itself: arbitrary UTF-8 put at odd places with a clip. */
    grid *g = grid_create(13, 3);
    grid_clip(g, 2, 0, 7, 2);
    grid_putn(g, -3, 0, text, size, GRID_BOLD);
    grid_putn(g, 5, 1, text, size, 0);
    grid_unclip(g);
    grid_box(g, 0, 0, 13, 3, (int)(flags & 1u), 0);
    free(grid_dump(g));
    grid_free(g);
    return 0;
}
