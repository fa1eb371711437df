/* view.c - the table of views (the order Tab cycles through) and the small helpers that the
 * views share: number and byte formats, ASCII stand-ins, clipped text, and the parser for
 * the "Rank R: [values]" lines that the chapter labs print. */
#include "view.h"
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const view_class *const view_classes[] = {
    &view_ring_class, &view_log_class, &view_plot_class, &view_timeline_class,
    &view_blocks_class, &view_flow_class, &view_serve_class, NULL
};

int view_count(void)
{
    int n = 0;
    while (view_classes[n])
        n++;
    return n;
}

const view_class *view_find(const char *name)
{
    for (int i = 0; name && view_classes[i]; i++)
        if (!strcmp(view_classes[i]->name, name))
            return view_classes[i];
    return NULL;
}

void view_fmt_value(double v, char *out, size_t n)
{
    if (isnan(v)) {
        snprintf(out, n, "nan");
        return;
    }
    if (isinf(v)) {
        snprintf(out, n, v > 0 ? "inf" : "-inf");
        return;
    }
    if (v == floor(v) && fabs(v) < 1e6)
        snprintf(out, n, "%.1f", v);
    else
        snprintf(out, n, "%.4g", v);
}

void view_fmt_bytes(uint64_t b, char *out, size_t n)
{
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)b;
    int u = 0;
    while (v >= 1024.0 && u < 4) {
        v /= 1024.0;
        u++;
    }
    if (u == 0)
        snprintf(out, n, "%llu B", (unsigned long long)b);
    else if (v == floor(v))
        snprintf(out, n, "%.0f %s", v, units[u]);
    else
        snprintf(out, n, "%.1f %s", v, units[u]);
}

const char *view_glyph(int ascii, const char *utf8, const char *plain)
{
    return ascii ? plain : utf8;
}

int view_put_clipped(grid *g, int x, int y, int w, const char *s, grid_attr a)
{
    if (w <= 0)
        return 0;
    int tw = grid_text_width(s, strlen(s));
    if (tw <= w)
        return grid_put(g, x, y, s, a);
    /* cut and add an ellipsis: one cell, or under --ascii three dots (a lone '.' is an
     * empty cell there, and '~' means "about") */
    int ew = g->ascii ? (w >= 4 ? 3 : 1) : 1;
    size_t i = 0, len = strlen(s);
    int col = 0;
    while (i < len) {
        uint32_t cp;
        size_t k = grid_utf8_decode(s + i, len - i, &cp);
        int cw = grid_cp_width(cp);
        if (col + cw > w - ew)
            break;
        col += cw;
        i += k;
    }
    grid_putn(g, x, y, s, i, a);
    for (int e = 0; e < ew; e++)
        grid_set(g, x + col + e, y, g->ascii ? '.' : 0x2026, a);
    return col + ew;
}

int view_parse_rank_values(const char *line, int *rank, double *out, int max)
{
    const char *p = line;
    while (*p == ' ')
        p++;
    if (strncmp(p, "Rank ", 5) != 0)
        return -1;
    p += 5;
    char *end;
    long r = strtol(p, &end, 10);
    if (end == p || *end != ':' || r < 0 || r > 1 << 20)
        return -1;
    p = end + 1;
    while (*p == ' ')
        p++;
    if (*p != '[')
        return -1;
    int n = 0, depth = 0;
    for (;;) {
        while (*p == ' ' || *p == ',')
            p++;
        if (*p == '[') {
            depth++;
            p++;
            continue;
        }
        if (*p == ']') {
            depth--;
            p++;
            if (depth == 0)
                break;
            continue;
        }
        if (!*p)
            return -1;
        double v = strtod(p, &end);
        if (end == p)
            return -1;
        if (n < max)
            out[n] = v;
        n++;
        p = end;
    }
    while (*p && isspace((unsigned char)*p))
        p++;
    if (*p)
        return -1;      /* more text after the list: not a values line */
    *rank = (int)r;
    return n < max ? n : max;
}

const char *view_line_rank(const char *line, int *rank)
{
    return mlsys_print_untag(line, rank);
}
