/* test_views.c - the front end's views rendered off-screen from synthetic events: golden
 * frames (the .txt files in tests/frames; GENERATE=1 rewrites them), the ring view's cells checked
 * against the closed-form tables of what each rank holds after each step (recursive doubling
 * and the ring), the log/plot/timeline views, the shell's own parts, the trace reader
 * (events -> Chrome JSON -> events), the "Rank r: [..]" parser, the value helpers of
 * core/trace_values.h against a real job, and (printed, not asserted) drawing and event
 * rates. */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "../../lab/ui/ui.h"
#include "../../lab/ui/views/view.h"
#include "../../lab/ui/stepmodel.h"
#include "../../lab/ui/run.h"
#include "../../core/trace_values.h"

#define W 118
#define H 36

/* ---- goldens ---- */

#include "golden.h"

/* Every view reads one step model, as in the run screen: the tests feed events to it (feed)
 * and render() brings the view to the frame asked (-1: the newest) before drawing. */
static stepmodel *tsm;
static sm_cursor tcur;
static const view_class *tcls;
static void *td;

static void fresh(const view_class *c, void *d, int n)
{
    if (!tsm)
        tsm = sm_create();
    sm_reset(tsm, n);
    sm_cursor_fini(&tcur);
    c->reset(d, n);
}

static void feed(const view_class *c, void *d, const mlsys_event *e)
{
    (void)c;
    (void)d;
    sm_event(tsm, e);
}

static void t_rewind(void *u)
{
    (void)u;
    if (tcls->rewind)
        tcls->rewind(td);
}

static void t_event(void *u, const mlsys_event *e, int frame)
{
    (void)u;
    if (tcls->event)
        tcls->event(td, e, frame);
}

static void t_line(void *u, int rank, int is_err, const char *text)
{
    (void)u;
    if (tcls->line)
        tcls->line(td, rank, is_err, text);
}

static char *render(const view_class *cls, void *d, int w, int h, const view_ctx *ctx0, int ascii)
{
    view_ctx ctx = *ctx0;
    if (tsm) {
        int k = ctx.frame >= 0 ? ctx.frame : sm_nframes(tsm) - 1;
        tcls = cls;
        td = d;
        sm_sink sk = {t_rewind, t_event, t_line, NULL};
        sm_sync(tsm, &tcur, k, &sk);
        ctx.sm = tsm;
        ctx.frame = k;
    }
    grid *g = grid_create(w, h);
    grid_set_ascii(g, ascii);
    cls->draw(d, g, 0, 0, w, h, &ctx);
    char *s = grid_dump(g);
    grid_free(g);
    return s;
}

static view_ctx settled(int n)
{
    view_ctx c;
    memset(&c, 0, sizeof c);
    c.nranks = n;
    c.anim = 1.0;
    c.frame = -1;           /* the newest frame */
    return c;
}

/* ---- synthetic events ---- */

static uint64_t now_t = 1000;

static mlsys_event ev(int kind, int rank)
{
    mlsys_event e;
    memset(&e, 0, sizeof e);
    e.kind = (int16_t)kind;
    e.rank = rank;
    e.peer = e.tag = e.step = e.chunk = e.dtype = -1;
    e.coll = e.algo = e.op = -1;
    e.t_ns = now_t += 1000;
    return e;
}

static void coll_begin(const view_class *c, void *d, int n, int coll, int algo, const char *name,
                       uint64_t bytes)
{
    for (int r = 0; r < n; r++) {
        mlsys_event e = ev(MLSYS_EV_COLL_BEGIN, r);
        e.coll = (int16_t)coll;
        e.algo = (int16_t)algo;
        e.dtype = MLSYS_F32;
        e.op = coll == MLSYS_COLL_ALLREDUCE ? MLSYS_SUM : -1;
        e.bytes = bytes;
        snprintf(e.label, sizeof e.label, "%s", name);
        /* who chose: the rule when it picks this one, else the learner (--algo) */
        const char *ruled = mlsys_algo_rule((mlsys_coll)coll, n, bytes, NULL);
        e.tag = ruled && !strcmp(ruled, name) ? MLSYS_ALGO_BY_RULE : MLSYS_ALGO_BY_USER;
        feed(c, d, &e);
    }
}

static void coll_end(const view_class *c, void *d, int n, int coll, const char *name,
                     uint64_t bytes)
{
    for (int r = 0; r < n; r++) {
        mlsys_event e = ev(MLSYS_EV_COLL_END, r);
        e.coll = (int16_t)coll;
        e.bytes = bytes;
        snprintf(e.label, sizeof e.label, "%s", name);
        feed(c, d, &e);
    }
}

static void step_all(const view_class *c, void *d, int n, int coll, int step, const char *label)
{
    for (int r = 0; r < n; r++) {
        mlsys_event e = ev(MLSYS_EV_STEP, r);
        e.coll = (int16_t)coll;
        e.step = step;
        snprintf(e.label, sizeof e.label, "%s", label);
        feed(c, d, &e);
    }
}

static uint64_t seq;

/* Sends first (the sender's state as it sends), then the receives. */
static void messages(const view_class *c, void *d, int n, const int *to, uint64_t bytes, int coll)
{
    uint64_t id0 = seq;
    for (int r = 0; r < n; r++) {
        if (to[r] < 0)
            continue;
        mlsys_event e = ev(MLSYS_EV_SEND_BEGIN, r);
        e.peer = to[r];
        e.bytes = bytes;
        e.coll = (int16_t)coll;
        e.msg_id = ((uint64_t)r << 40) | (id0 + (uint64_t)r + 1);
        feed(c, d, &e);
    }
    for (int r = 0; r < n; r++) {
        if (to[r] < 0)
            continue;
        mlsys_event e = ev(MLSYS_EV_RECV_END, to[r]);
        e.peer = r;
        e.bytes = bytes;
        e.coll = (int16_t)coll;
        e.msg_id = ((uint64_t)r << 40) | (id0 + (uint64_t)r + 1);
        feed(c, d, &e);
    }
    seq += (uint64_t)n + 1;
}

/* Recursive doubling on n (a power of two) ranks, count floats, up to and including step
 * last (-1: the whole call). */
static void rd_allreduce(const view_class *c, void *d, int n, int count, int last)
{
    coll_begin(c, d, n, MLSYS_COLL_ALLREDUCE, 3, "recursive_doubling", (uint64_t)count * 4);
    int steps = 0;
    while ((1 << steps) < n)
        steps++;
    for (int k = 0; k < steps && (last < 0 || k <= last); k++) {
        step_all(c, d, n, MLSYS_COLL_ALLREDUCE, k, "exchange");
        int to[64];
        for (int r = 0; r < n; r++)
            to[r] = r ^ (1 << k);
        messages(c, d, n, to, (uint64_t)count * 4, MLSYS_COLL_ALLREDUCE);
    }
    if (last < 0) {
        /* the result as core/coll.c reports it: the first value of each chunk */
        for (int r = 0; r < n; r++) {
            mlsys_event e = ev(MLSYS_EV_MARK, r);
            snprintf(e.label, sizeof e.label, "chunks");
            e.step = -3;
            e.chunk = 0;
            e.tag = count < 4 ? count : 4;
            for (int j = 0; j < e.tag; j++)
                e.val[j] = 10.0 * (j + 1);
            feed(c, d, &e);
        }
        coll_end(c, d, n, MLSYS_COLL_ALLREDUCE, "recursive_doubling", (uint64_t)count * 4);
    }
}

/* The row of cells in rank r's box, as words. */
static int box_cells(const char *frame, int r, char words[][16], int max)
{
    char tag[32];
    snprintf(tag, sizeof tag, "┌ rank %d ", r);       /* the box's title, not the caption */
    const char *p = strstr(frame, tag);
    if (!p) {
        snprintf(tag, sizeof tag, "+ rank %d ", r);
        p = strstr(frame, tag);
    }
    if (!p)
        return -1;
    p += strlen(tag) - strlen(strchr(tag, ' '));      /* at the space after the corner */
    /* column of the box's left edge, on this line */
    const char *line = p;
    while (line > frame && line[-1] != '\n')
        line--;
    int col = 0;
    for (const char *q = line; q < p; col++) {
        uint32_t cp;
        q += grid_utf8_decode(q, strlen(q), &cp);
    }
    /* the line after the chunk names ("c0 c1 ..."), a few lines below the title */
    const char *cells = line, *two = NULL;
    for (int i = 0; i < 4; i++) {
        cells = strchr(cells, '\n');
        if (!cells)
            return -1;
        cells++;
        if (i == 1)
            two = cells;       /* without chunk names: title, role, then the cells */
        const char *q = cells;
        for (int c = 0; c <= col && *q && *q != '\n'; c++) {
            uint32_t cp;
            q += grid_utf8_decode(q, strlen(q), &cp);
        }
        while (*q == ' ')
            q++;
        if (!strncmp(q, "c0 ", 3)) {
            cells = strchr(cells, '\n');
            if (!cells)
                return -1;
            cells++;
            break;
        }
        if (i == 3)
            cells = two;
    }
    /* skip to the column after the box's left border */
    const char *q = cells;
    for (int i = 0; i < col && *q && *q != '\n'; i++) {
        uint32_t cp;
        q += grid_utf8_decode(q, strlen(q), &cp);
    }
    uint32_t cp;
    q += grid_utf8_decode(q, strlen(q), &cp);      /* the border */
    int n = 0;
    while (*q && *q != '\n' && n < max) {
        while (*q == ' ')
            q++;
        if (!*q || *q == '\n')
            break;
        if (!strncmp(q, "│", strlen("│")) || *q == '|')
            break;
        int k = 0;
        while (*q && *q != ' ' && *q != '\n' && k < 15)
            words[n][k++] = *q++;
        words[n][k] = 0;
        n++;
    }
    return n;
}

/* Independent of the view: the text of a set of contributors for n ranks (cells of eight
 * columns): "2", "0+1", "0+2+3", "all", else "5/8". */
static void set_text(const int *has, int n, char *out, size_t len)
{
    int cnt = 0, r[64];
    for (int i = 0; i < n; i++)
        if (has[i])
            r[cnt++] = i;
    if (cnt == n)
        snprintf(out, len, "all");
    else {
        /* the ranks joined by "+" when that fits the 8 columns of a cell, else "k/n" */
        char t[128];
        int used = 0;
        for (int i = 0; i < cnt; i++)
            used += snprintf(t + used, sizeof t - (size_t)used, "%s%d", i ? "+" : "", r[i]);
        if (used <= 8)
            snprintf(out, len, "%.8s", t);
        else
            snprintf(out, len, "%d/%d", cnt, n);
    }
}

/* ---- the ring view ---- */

START_TEST(ring_recursive_doubling_cells)
{
    const view_class *c = &view_ring_class;
    void *d = c->create();
    fresh(c, d, 4);
    view_ctx ctx = settled(4);
    for (int last = 0; last < 2; last++) {
        fresh(c, d, 4);
        rd_allreduce(c, d, 4, 2, last);
        char *f = render(c, d, W, H, &ctx, 0);
        /* after step k, rank r holds the sum over the ranks that share r's bits above k */
        for (int r = 0; r < 4; r++) {
            int has[4] = {0};
            for (int s = 0; s < 4; s++)
                has[s] = (s >> (last + 1)) == (r >> (last + 1));
            char want[32], words[8][16];
            set_text(has, 4, want, sizeof want);
            int nw = box_cells(f, r, words, 8);
            /* one cell per chunk that exists: 2 elements on 4 ranks make 2 chunks (the two
             * empty ones are not drawn as data that never arrived) */
            ck_assert_msg(nw == 2, "rank %d: %d cells", r, nw);
            for (int i = 0; i < 2; i++)
                ck_assert_msg(!strcmp(words[i], want), "step %d rank %d cell %d: want %s got %s",
                              last, r, i, want, words[i]);
        }
        free(f);
    }
    c->free(d);
}
END_TEST

/* Ring all-reduce of 4 elements on 4 ranks: the chunk a rank receives follows from its
 * step (RS: (r-k-1) mod N reduced, AG: (r-k) mod N overwritten), as in core/coll/allreduce.c. */
static void ring_step(const view_class *c, void *d, int n, int step)
{
    step_all(c, d, n, MLSYS_COLL_ALLREDUCE, step, step < n - 1 ? "reduce-scatter" : "all-gather");
    int to[64];
    for (int r = 0; r < n; r++)
        to[r] = (r + 1) % n;
    messages(c, d, n, to, 4, MLSYS_COLL_ALLREDUCE);
}

START_TEST(ring_allreduce_cells_follow_the_table)
{
    const int n = 4;
    const view_class *c = &view_ring_class;
    void *d = c->create();
    fresh(c, d, n);
    coll_begin(c, d, n, MLSYS_COLL_ALLREDUCE, 1, "ring", 16);
    view_ctx ctx = settled(n);
    for (int step = 0; step < 2 * (n - 1); step++) {
        ring_step(c, d, n, step);
        char *f = render(c, d, W, H, &ctx, 0);
        for (int r = 0; r < n; r++) {
            char words[8][16];
            ck_assert_int_eq(box_cells(f, r, words, 8), n);
            for (int ch = 0; ch < n; ch++) {
                int dist = ((r - ch) % n + n) % n, has[8] = {0};
                int rs = step < n - 1 ? step : n - 2;       /* RS steps done */
                if (dist >= 1 && dist - 1 <= rs)
                    for (int j = 0; j <= dist; j++)
                        has[((r - j) % n + n) % n] = 1;     /* ranks r-dist .. r */
                else
                    has[r] = 1;
                if (step >= n - 1 && dist <= step - (n - 1))
                    for (int j = 0; j < n; j++)
                        has[j] = 1;                         /* all-gathered */
                char want[32];
                set_text(has, n, want, sizeof want);
                ck_assert_msg(!strcmp(words[ch], want), "step %d rank %d chunk %d: want %s got %s",
                              step, r, ch, want, words[ch]);
            }
        }
        if (step == n - 2)
            golden("ring_ring4_after_reduce_scatter", f);
        free(f);
    }
    c->free(d);
}
END_TEST

/* Five ranks at 80x24: boxes keep apart (every message gets an arrow) and narrow cells still
 * show their values ("10", not nothing). */
START_TEST(ring_five_ranks_small)
{
    const int n = 5;
    const view_class *c = &view_ring_class;
    void *d = c->create();
    fresh(c, d, n);
    coll_begin(c, d, n, MLSYS_COLL_ALLREDUCE, 1, "ring", 20);
    for (int r = 0; r < n; r++) {            /* input values: chunk j of rank r = 10 j + r */
        for (int j = 0; j < n; j += 4) {
            mlsys_event e = ev(MLSYS_EV_MARK, r);
            snprintf(e.label, sizeof e.label, "chunks");
            e.step = -2;
            e.chunk = j;
            e.tag = n - j < 4 ? n - j : 4;
            for (int k = 0; k < e.tag; k++)
                e.val[k] = 10.0 * (j + k + 1) + r;
            feed(c, d, &e);
        }
    }
    ring_step(c, d, n, 0);
    view_ctx ctx = settled(n);
    char *f = render(c, d, 78, 19, &ctx, 0);
    /* the boxes: no two share a row and touch columns (a border next to a border) */
    ck_assert_msg(!strstr(f, "┐┌") && !strstr(f, "┘└") && !strstr(f, "││") &&
                  !strstr(f, "┐ ┌") && !strstr(f, "┘ └"), "boxes touch:\n%s", f);
    /* five messages, five arrow heads */
    static const char *const heads[] = {"▶", "◀", "▲", "▼", "↗", "↘", "↙", "↖"};
    int nh = 0;
    for (size_t h = 0; h < 8; h++)
        for (const char *p = f; (p = strstr(p, heads[h])) != NULL; p += strlen(heads[h]))
            nh++;
    ck_assert_msg(nh >= n, "%d arrow heads for %d messages:\n%s", nh, n, f);
    /* after step 0 rank r holds in chunk r-1 its own value and rank r-1's summed (ring
     * reduce-scatter: rank s sends chunk s to s+1): every such sum is on screen, and every
     * untouched value of rank 1 */
    for (int r = 0; r < n; r++) {
        int j = (r + n - 1) % n, sum = 2 * 10 * (j + 1) + r + (r + n - 1) % n;
        char want[16];
        snprintf(want, sizeof want, " %d ", sum);
        ck_assert_msg(strstr(f, want), "sum %s dropped:\n%s", want, f);
    }
    for (int j = 1; j < n; j++) {
        char want[16];
        snprintf(want, sizeof want, " %d ", 10 * (j + 1) + 1);
        ck_assert_msg(strstr(f, want), "value %s dropped:\n%s", want, f);
    }
    free(f);
    c->free(d);
}
END_TEST

START_TEST(ring_golden_frames)
{
    const view_class *c = &view_ring_class;
    void *d = c->create();
    fresh(c, d, 4);
    rd_allreduce(c, d, 4, 2, 0);
    view_ctx ctx = settled(4);
    ctx.anim = 0.5;
    char *f = render(c, d, W, H, &ctx, 0);
    golden("ring_rd4_step0_moving", f);
    free(f);
    /* the whole call, with the values the ranks printed, every rank done */
    fresh(c, d, 4);
    for (int r = 0; r < 4; r++) {
        char line[64];
        snprintf(line, sizeof line, "Rank %d: [%d.0, %d.0]", r, r + 1, 2 * (r + 1));
        sm_line(tsm, 0, 0, line);
    }
    rd_allreduce(c, d, 4, 2, -1);
    for (int r = 0; r < 4; r++) {
        char line[64];
        snprintf(line, sizeof line, "Rank %d: [10.0, 20.0]", r);
        sm_line(tsm, 0, 0, line);
    }
    int states[4] = {VIEW_RANK_DONE, VIEW_RANK_DONE, VIEW_RANK_DONE, VIEW_RANK_DONE};
    ctx = settled(4);
    ctx.rank_state = states;
    f = render(c, d, W, H, &ctx, 0);
    golden("ring_rd4_done", f);
    ck_assert_ptr_nonnull(strstr(f, "10.0     20.0"));    /* the values under the cells */
    ck_assert_ptr_nonnull(strstr(f, "algorithm recursive_doubling"));
    ck_assert_ptr_nonnull(strstr(f, "why: < 64 KiB"));
    free(f);
    f = render(c, d, W, H, &ctx, 1);
    golden("ring_rd4_done_ascii", f);
    for (const char *p = f; *p; p++)
        ck_assert_msg((unsigned char)*p < 0x80, "non-ASCII byte in the --ascii frame");
    free(f);
    /* a failed rank and a gated one */
    int st2[4] = {VIEW_RANK_RUNNING, VIEW_RANK_RUNNING, VIEW_RANK_FAILED, VIEW_RANK_STOPPED};
    int codes[4] = {0, 0, -11, -15};
    int gate[4] = {1, 1, -1, -1};
    ctx.rank_state = st2;
    ctx.rank_code = codes;
    ctx.gate_step = gate;
    f = render(c, d, W, H, &ctx, 0);
    golden("ring_rd4_failed", f);
    ck_assert_ptr_nonnull(strstr(f, "✗ segfault"));
    ck_assert_ptr_nonnull(strstr(f, "⏸ waits"));      /* no step number that could disagree */
    free(f);
    c->free(d);
}
END_TEST

START_TEST(ring_grid_for_many_ranks)
{
    const int n = 12;
    const view_class *c = &view_ring_class;
    void *d = c->create();
    fresh(c, d, n);
    coll_begin(c, d, n, MLSYS_COLL_ALLREDUCE, 0, "direct", 8);
    step_all(c, d, n, MLSYS_COLL_ALLREDUCE, 0, "reduce at rank 0");
    int to[64];
    for (int r = 0; r < n; r++)
        to[r] = r ? 0 : -1;
    messages(c, d, n, to, 8, MLSYS_COLL_ALLREDUCE);
    view_ctx ctx = settled(n);
    char *f = render(c, d, W, H, &ctx, 0);
    golden("ring_direct12_grid", f);
    /* every rank has a box, rank 0 holds all after the reduce, the others themselves */
    for (int r = 0; r < n; r++) {
        char tag[32];
        snprintf(tag, sizeof tag, " rank %d ", r);
        ck_assert_msg(strstr(f, tag) != NULL, "no box for rank %d", r);
    }
    char words[8][16];
    ck_assert_int_ge(box_cells(f, 0, words, 8), 2);   /* 12 chunks: the first, then … */
    ck_assert_str_eq(words[0], "all");
    ck_assert_int_ge(box_cells(f, 7, words, 8), 2);
    ck_assert_str_eq(words[0], "7");
    ck_assert_ptr_nonnull(strstr(f, "11 messages"));
    free(f);
    c->free(d);
}
END_TEST

START_TEST(ring_small_area_and_p2p)
{
    const view_class *c = &view_ring_class;
    void *d = c->create();
    fresh(c, d, 3);
    int to[3] = {1, 2, -1};
    messages(c, d, 3, to, 16, -1);
    view_ctx ctx = settled(3);
    char *f = render(c, d, 78, 20, &ctx, 0);
    golden("ring_p2p3_small", f);
    ck_assert_ptr_nonnull(strstr(f, "point-to-point messages only"));
    free(f);
    /* far too small: nothing is drawn outside the area and nothing crashes */
    f = render(c, d, 10, 2, &ctx, 0);
    free(f);
    c->free(d);
}
END_TEST

/* ---- log, plot, timeline ---- */

START_TEST(log_orders)
{
    const view_class *c = &view_log_class;
    void *d = c->create();
    fresh(c, d, 3);
    c->line(d, -1, 0, "World size: 3");
    c->line(d, 1, 0, "rank 1 says hello");
    c->line(d, 0, 0, "rank 0 says hello");
    c->line(d, 2, 1, "rank 2: something went wrong");
    c->line(d, 0, 0, "rank 0 again");
    view_ctx ctx = settled(3);
    char *f = render(c, d, 80, 12, &ctx, 0);
    golden("log_interleaved", f);
    const char *a = strstr(f, "rank 1 says"), *b = strstr(f, "rank 0 says");
    ck_assert(a && b && a < b);
    free(f);
    ck_assert_int_ne(c->key(d, 'o') & UI_HANDLED, 0);
    f = render(c, d, 80, 12, &ctx, 0);
    golden("log_rank_order", f);
    a = strstr(f, "rank 0 again");
    b = strstr(f, "rank 1 says");
    ck_assert(a && b && a < b);
    free(f);
    /* the filter cycles all -> runner -> 0 -> 1 -> 2 -> all */
    c->key(d, 'f');
    c->key(d, 'f');
    f = render(c, d, 80, 12, &ctx, 0);
    ck_assert_ptr_nonnull(strstr(f, "showing rank 0"));
    ck_assert_ptr_null(strstr(f, "rank 1 says"));
    free(f);
    c->free(d);
}
END_TEST

/* A line longer than the view wraps under its own text (no verdict cut off at 80 columns);
 * w cuts lines instead, with the ellipsis. */
START_TEST(log_wraps_long_lines)
{
    const view_class *c = &view_log_class;
    void *d = c->create();
    c->reset(d, 2);
    const char *chk = "[check] synced gradient = gradient of the MSE over all 32 samples in one "
                      "process: max |diff| 7.45e-09 < 1e-6: PASS";
    c->line(d, 0, 0, chk);
    c->line(d, 1, 0, "short");
    view_ctx ctx = settled(2);
    char *f = render(c, d, 78, 10, &ctx, 0);
    ck_assert_msg(strstr(f, "PASS") && !strstr(f, "…"), "%s", f);
    /* every word of the line is on screen, in order, the second row under the text */
    const char *p = f;
    for (const char *w = "synced gradient MSE 32 samples process: 7.45e-09 PASS"; *w;) {
        char word[32];
        size_t n = strcspn(w, " ");
        snprintf(word, sizeof word, "%.*s", (int)n, w);
        p = strstr(p, word);
        ck_assert_msg(p != NULL, "'%s' missing or out of order:\n%s", word, f);
        w += n + (w[n] == ' ');
    }
    ck_assert_msg(strstr(f, "\n     process: "), "the continuation is under the text:\n%s", f);
    free(f);
    ck_assert_int_ne(c->key(d, 'w') & UI_REDRAW, 0);
    f = render(c, d, 78, 10, &ctx, 0);
    ck_assert_msg(!strstr(f, "PASS") && strstr(f, "…"), "%s", f);
    free(f);
    c->free(d);
}
END_TEST

/* f offers every rank of the job, not only those that printed (old code: all, runner, 0). */
START_TEST(log_filter_reaches_every_rank)
{
    const view_class *c = &view_log_class;
    void *d = c->create();
    fresh(c, d, 5);
    c->line(d, -1, 0, "World size: 5");
    c->line(d, 0, 0, "rank 0 only");
    view_ctx ctx = settled(5);
    for (int k = 0; k < 6; k++)          /* all -> runner -> 0 1 2 3 4 */
        c->key(d, 'f');
    char *f = render(c, d, 80, 12, &ctx, 0);
    ck_assert_msg(strstr(f, "showing rank 4"), "%s", f);
    free(f);
    c->key(d, 'f');
    f = render(c, d, 80, 12, &ctx, 0);
    ck_assert_msg(strstr(f, "showing all"), "%s", f);
    free(f);
    c->key(d, 'F');                      /* backwards: the last rank again */
    f = render(c, d, 80, 12, &ctx, 0);
    ck_assert_msg(strstr(f, "showing rank 4"), "%s", f);
    free(f);
    c->free(d);
}
END_TEST

START_TEST(line_rank_tags)
{
    int r = 0;
    ck_assert_str_eq(view_line_rank("\001r3\002Rank 3: received 62.0", &r), "Rank 3: received 62.0");
    ck_assert_int_eq(r, 3);
    r = 7;
    ck_assert_str_eq(view_line_rank("Rank 3: plain", &r), "Rank 3: plain");
    ck_assert_int_eq(r, 7);
    ck_assert_str_eq(view_line_rank("\001rx\002text", &r), "\001rx\002text");
    ck_assert_str_eq(view_line_rank("\001r12", &r), "\001r12");
    ck_assert_int_eq(r, 7);
}
END_TEST

/* Every rank prints in rank order through rank 0 (mlsys_print_ordered); the run screen's
 * log must still put each line under the rank that wrote it. */
static int ordered_rank(mlsys_comm *c, void *arg)
{
    (void)arg;
    return mlsys_print_ordered(c, "Rank %d: hello\nRank %d: again\n", mlsys_rank(c),
                               mlsys_rank(c));
}

START_TEST(run_log_tags_lines_with_their_rank)
{
    char err[256];
    ui_screen *s = run_create_fn("ordered", 4, 0, ordered_rank, NULL, err, sizeof err);
    ck_assert_msg(s != NULL, "%s", err);
    run_stats_t st;
    for (int i = 0; i < 500; i++) {
        int tmo = 10;
        s->cls->tick(s, mlsys_now_ns(), &tmo);
        run_stats(s, &st);
        if (st.done)
            break;
        usleep(5000);
    }
    ck_assert(st.done && st.result == 0);
    s->cls->key(s, UI_KEY_END);              /* every line to the views */
    s->cls->key(s, '2');                     /* the log */
    grid *g = grid_create(100, 30);
    s->cls->draw(s, g, 0, 1, 100, 28);
    char *f = grid_dump(g);
    for (int r = 0; r < 4; r++) {
        char want[64];
        snprintf(want, sizeof want, "[r%d] Rank %d: hello", r, r);
        ck_assert_msg(strstr(f, want), "missing \"%s\" in\n%s", want, f);
        snprintf(want, sizeof want, "[r%d] Rank %d: again", r, r);
        ck_assert_msg(strstr(f, want), "missing \"%s\" in\n%s", want, f);
    }
    ck_assert_msg(!strchr(f, '\001'), "no tag is left on screen");
    free(f);
    grid_free(g);
    s->cls->free(s);
}
END_TEST

/* Headless (no MLSYS_PRINT_TAGS) the text is byte for byte what the ranks printed. */
typedef struct lines_t { char buf[2048]; size_t n; int ranks[16]; int nl; } lines_t;
static void keep_line(void *u, int rank, int is_err, const char *line)
{
    lines_t *l = u;
    (void)is_err;
    l->n += (size_t)snprintf(l->buf + l->n, sizeof l->buf - l->n, "%s\n", line);
    if (l->nl < 16)
        l->ranks[l->nl++] = rank;
}

START_TEST(print_ordered_untagged_headless)
{
    unsetenv("MLSYS_PRINT_TAGS");
    mlsys_launch_opts o = {.world_size = 3, .timeout_ms = 10000, .capture_output = 1};
    char err[256];
    mlsys_job *j = mlsys_job_start(&o, NULL, ordered_rank, NULL, err, sizeof err);
    ck_assert_msg(j != NULL, "%s", err);
    lines_t l;
    memset(&l, 0, sizeof l);
    mlsys_job_sink sink = {keep_line, NULL, &l};
    int rc;
    while ((rc = mlsys_job_wait(j, &sink, 50, err, sizeof err)) == 1)
        ;
    mlsys_job_free(j);
    ck_assert_int_eq(rc, 0);
    ck_assert_str_eq(l.buf, "Rank 0: hello\nRank 0: again\nRank 1: hello\nRank 1: again\n"
                            "Rank 2: hello\nRank 2: again\n");
}
END_TEST

START_TEST(plot_sweep)
{
    const view_class *c = &view_plot_class;
    void *d = c->create();
    fresh(c, d, 1);
    for (int i = 0; i <= 10; i++) {
        mlsys_event e = ev(MLSYS_EV_MARK, 0);
        snprintf(e.label, sizeof e.label, "%sbusbw GB/s", MLSYS_MARK_PLOT);
        e.val[0] = (double)(1024 << (i * 1));
        e.val[1] = 10.0 * i / (i + 2.0);
        feed(c, d, &e);
        snprintf(e.label, sizeof e.label, "%salgbw GB/s", MLSYS_MARK_PLOT);
        e.val[1] = 6.0 * i / (i + 2.0);
        feed(c, d, &e);
    }
    view_ctx ctx = settled(1);
    char *f = render(c, d, 100, 24, &ctx, 0);
    golden("plot_sweep", f);
    ck_assert_ptr_nonnull(strstr(f, "busbw GB/s"));
    ck_assert_ptr_nonnull(strstr(f, "log2 x"));
    ck_assert_ptr_nonnull(strstr(f, "1M"));
    free(f);
    c->free(d);
}
END_TEST

START_TEST(timeline_spans)
{
    const view_class *c = &view_timeline_class;
    void *d = c->create();
    fresh(c, d, 2);
    now_t = 0;
    for (int r = 0; r < 2; r++) {
        now_t = 1000000ull * (uint64_t)r;
        mlsys_event e = ev(MLSYS_EV_COMPUTE_BEGIN, r);
        snprintf(e.label, sizeof e.label, "F mb0");
        feed(c, d, &e);
        now_t += 3000000;
        e = ev(MLSYS_EV_COMPUTE_END, r);
        feed(c, d, &e);
        e = ev(MLSYS_EV_SEND_BEGIN, r);
        e.peer = 1 - r;
        feed(c, d, &e);
        now_t += 1000000;
        e = ev(MLSYS_EV_SEND_END, r);
        feed(c, d, &e);
    }
    view_ctx ctx = settled(2);
    char *f = render(c, d, 80, 8, &ctx, 0);
    golden("timeline_two_ranks", f);
    ck_assert_ptr_nonnull(strstr(f, "FFFF"));
    free(f);
    c->free(d);
}
END_TEST

/* ---- the shell's parts ---- */

START_TEST(shell_parts)
{
    grid *g = grid_create(60, 20);
    ui_draw_too_small(g, UI_MIN_W, UI_MIN_H);
    char *f = grid_dump(g);
    golden("ui_too_small", f);
    ck_assert_ptr_nonnull(strstr(f, "at least 80x24"));
    ck_assert_ptr_nonnull(strstr(f, "this one is 60x20"));
    free(f);
    grid_resize(g, 100, 30);
    static const ui_key_help keys[] = {{"space", "pause"}, {"n", "step"}, {NULL, NULL}};
    static const ui_key_help global[] = {{"?/F1", "help"}, {"q", "back"}, {NULL, NULL}};
    static const char *const lines[] = {"A help line that is long enough to be wrapped onto a "
                                        "second line of the overlay, at a space.", NULL};
    ui_draw_footer(g, 29, 100, keys);
    ui_draw_help(g, "test", global, keys, lines);
    f = grid_dump(g);
    golden("ui_help_footer", f);
    ck_assert_ptr_nonnull(strstr(f, "space pause  n step  ?/F1 help  q back"));
    free(f);
    grid_free(g);
}
END_TEST

static const lab_flag form_flags[] = {
    {"world-size", 'w', FLAG_INT, "4", NULL, 1, 64, "number of ranks"},
    {"size", 's', FLAG_SIZE, "64K", NULL, 1, 1L << 30, "bytes per message"},
    {"mode", 0, FLAG_CHOICE, "fast", "fast|slow", 0, 0, "how"},
    {NULL, 0, 0, NULL, NULL, 0, 0, NULL}
};
static int form_rank_main(mlsys_comm *c, const lab_args *a)
{
    (void)c;
    (void)a;
    return 0;
}
static const lab form_lab = {.id = "test/form", .title = "Form test", .summary = "a lab",
                             .flags = form_flags, .rank_main = form_rank_main, .view = "ring"};

START_TEST(form_validates_as_you_type)
{
    ui_screen *s = form_create(&form_lab);
    grid *g = grid_create(120, 40);
    s->cls->draw(s, g, 0, 1, 120, 38);
    char *f = grid_dump(g);
    golden("form_defaults", f);
    ck_assert_ptr_nonnull(strstr(f, "[ Launch ]"));
    free(f);
    /* world-size: clear it and type 99 (above the maximum of 64) */
    s->cls->key(s, UI_CTRL('u'));
    s->cls->key(s, '9');
    s->cls->key(s, '9');
    grid_clear(g);
    s->cls->draw(s, g, 0, 1, 120, 38);
    f = grid_dump(g);
    ck_assert_msg(strstr(f, "fix the red values first") != NULL, "%s", f);
    ck_assert_msg(strstr(f, "64") != NULL, "the message names the bound: %s", f);
    free(f);
    s->cls->key(s, UI_KEY_BACKSPACE);
    grid_clear(g);
    s->cls->draw(s, g, 0, 1, 120, 38);
    f = grid_dump(g);
    ck_assert_ptr_nonnull(strstr(f, "[ Launch ]"));     /* 9 is fine */
    free(f);
    /* choices cycle with the arrows */
    s->cls->key(s, UI_KEY_DOWN);
    s->cls->key(s, UI_KEY_DOWN);
    s->cls->key(s, UI_KEY_RIGHT);
    grid_clear(g);
    s->cls->draw(s, g, 0, 1, 120, 38);
    f = grid_dump(g);
    ck_assert_ptr_nonnull(strstr(f, "slow"));
    free(f);
    grid_free(g);
    s->cls->free(s);
}
END_TEST

static int form_count(ui_screen *s, const char *needle)
{
    grid *g = grid_create(140, 40);
    s->cls->draw(s, g, 0, 1, 140, 38);
    char *f = grid_dump(g);
    int n = 0;
    for (const char *p = f; (p = strstr(p, needle)) != NULL; p++)
        n++;
    free(f);
    grid_free(g);
    return n;
}

static const lab_flag single_flags[] = {
    {"batch", 'b', FLAG_INT, "8", NULL, 1, 64,
     "micro-batches; no short alias here, -b is the batch size"},
    {"epochs", 0, FLAG_INT, "1", NULL, 1, 9, "epochs per method (the original ignored it)"},
    {NULL, 0, 0, NULL, NULL, 0, 0, NULL}
};
static int single_main(const lab_args *a)
{
    (void)a;
    return 0;
}
static const lab single_lab = {.id = "test/single", .title = "One process", .summary = "s",
                               .flags = single_flags, .main = single_main, .view = "log"};
static const lab_flag tp_flags[] = {
    {"tp-size", 't', FLAG_INT, "2", NULL, 1, 8, "tensor-parallel ranks"},
    {"world-size", 'w', FLAG_INT, "4", NULL, 1, 64, "number of ranks"},
    {NULL, 0, 0, NULL, NULL, 0, 0, NULL}
};
static const lab tp_lab = {.id = "test/tp", .title = "TP", .summary = "t", .flags = tp_flags,
                           .rank_main = form_rank_main, .ranks_flag = "tp-size", .view = "ring"};

START_TEST(form_shows_only_flags_that_apply)
{
    ui_screen *s = form_create(&single_lab);
    ck_assert_int_eq(form_count(s, " algo "), 0);
    ck_assert_int_eq(form_count(s, " gated "), 0);
    ck_assert_int_eq(form_count(s, " timeout "), 0);
    ck_assert_int_eq(form_count(s, " trace "), 0);
    ck_assert_int_ge(form_count(s, " epochs "), 1);
    /* learner wording: no command-line asides, no notes about the original script */
    ck_assert_int_eq(form_count(s, "short alias"), 0);
    ck_assert_int_eq(form_count(s, "the original"), 0);
    ck_assert_int_eq(form_count(s, "epochs per method"), 1);
    s->cls->free(s);
    s = form_create(&tp_lab);
    ck_assert_int_eq(form_count(s, " world-size "), 0);
    ck_assert_int_eq(form_count(s, " tp-size "), 1);
    ck_assert_int_eq(form_count(s, " algo "), 1);
    s->cls->free(s);
}
END_TEST

START_TEST(form_trims_and_warns_about_the_algorithm)
{
    ui_screen *s = form_create(&form_lab);
    s->cls->key(s, UI_CTRL('u'));            /* world-size: "5 " with a trailing space */
    s->cls->key(s, '5');
    s->cls->key(s, ' ');
    ck_assert_int_eq(form_count(s, "[ Launch ]"), 1);
    ck_assert_int_eq(form_count(s, "fix the red values"), 0);
    /* algo: pick recursive_doubling: 5 ranks is not a power of two, said before launch */
    for (int i = 0; i < 5; i++)             /* size, mode, backend, timeout, algo */
        s->cls->key(s, UI_KEY_DOWN);
    const char *want = "recursive_doubling";
    int found = 0;
    for (int i = 0; i < 12 && !found; i++) {
        s->cls->key(s, UI_KEY_RIGHT);
        found = form_count(s, want) > 0;
    }
    ck_assert(found);
    ck_assert_int_ge(form_count(s, "not a power of two"), 1);
    s->cls->free(s);
}
END_TEST

/* ---- parsers ---- */

START_TEST(rank_values_parser)
{
    double v[16];
    int r;
    ck_assert_int_eq(view_parse_rank_values("Rank 3: [10.0, 20.0]", &r, v, 16), 2);
    ck_assert_int_eq(r, 3);
    ck_assert(v[0] == 10.0 && v[1] == 20.0);
    ck_assert_int_eq(view_parse_rank_values("Rank 0: [[0.0, 1.0], [10.0, 11.0]]", &r, v, 16), 4);
    ck_assert(v[3] == 11.0);
    ck_assert_int_eq(view_parse_rank_values("Rank 1: [-1.5e3]", &r, v, 16), 1);
    ck_assert(v[0] == -1500.0);
    ck_assert_int_eq(view_parse_rank_values("Rank 1: []", &r, v, 16), 0);
    ck_assert_int_eq(view_parse_rank_values("Rank 1: [1.0, 2.0] and more", &r, v, 16), -1);
    ck_assert_int_eq(view_parse_rank_values("Rank x: [1.0]", &r, v, 16), -1);
    ck_assert_int_eq(view_parse_rank_values("Rank 1: [1.0, oops]", &r, v, 16), -1);
    ck_assert_int_eq(view_parse_rank_values("Rank 1: [1.0, 2.0", &r, v, 16), -1);
    ck_assert_int_eq(view_parse_rank_values("hello", &r, v, 16), -1);
}
END_TEST

START_TEST(replay_round_trip)
{
    /* events -> the Chrome JSON that --trace writes -> events again */
    static mlsys_event got[256];
    int n = 0;
    now_t = 5000;
    seq = 0;
    mlsys_event e;
    for (int r = 0; r < 4; r++) {
        e = ev(MLSYS_EV_COLL_BEGIN, r);
        e.coll = MLSYS_COLL_ALLREDUCE;
        e.bytes = 8;
        snprintf(e.label, sizeof e.label, "recursive_doubling");
        got[n++] = e;
    }
    for (int k = 0; k < 2; k++) {
        for (int r = 0; r < 4; r++) {
            e = ev(MLSYS_EV_STEP, r);
            e.coll = MLSYS_COLL_ALLREDUCE;
            e.step = k;
            snprintf(e.label, sizeof e.label, "exchange");
            got[n++] = e;
        }
        for (int r = 0; r < 4; r++) {
            e = ev(MLSYS_EV_SEND_BEGIN, r);
            e.peer = r ^ (1 << k);
            e.bytes = 8;
            e.msg_id = ((uint64_t)r << 40) | (uint64_t)(k + 1);
            e.span_id = ((uint64_t)r << 40) | (uint64_t)(2 * k + 1);
            got[n++] = e;
        }
        for (int r = 0; r < 4; r++) {
            e = ev(MLSYS_EV_RECV_END, r);
            e.peer = r ^ (1 << k);
            e.bytes = 8;
            e.msg_id = ((uint64_t)(r ^ (1 << k)) << 40) | (uint64_t)(k + 1);
            e.span_id = ((uint64_t)r << 40) | (uint64_t)(2 * k + 2);
            got[n++] = e;
        }
    }
    for (int r = 0; r < 4; r++) {
        e = ev(MLSYS_EV_COLL_END, r);
        e.coll = MLSYS_COLL_ALLREDUCE;
        e.bytes = 8;
        snprintf(e.label, sizeof e.label, "recursive_doubling");
        got[n++] = e;
    }
    char path[] = "/tmp/mlsys-test-trace-XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    close(fd);
    ck_assert_int_eq(mlsys_trace_write_json(path, got, (size_t)n, 1000), 0);
    mlsys_trace rd;
    char err[256];
    int rc = mlsys_trace_load(path, &rd, err, sizeof err);
    mlsys_event *back = rd.ev;
    size_t nb = rd.n;
    int nranks = rd.nranks;
    unlink(path);
#ifdef HAVE_CJSON
    ck_assert_msg(rc == 0, "replay: %s", err);
    ck_assert_int_eq((int)nb, n);
    ck_assert_int_eq(nranks, 4);
    for (int i = 0; i < n; i++) {
        ck_assert_int_eq(back[i].kind, got[i].kind);
        ck_assert_int_eq(back[i].rank, got[i].rank);
        ck_assert_uint_eq(back[i].bytes, got[i].bytes);
        if (got[i].kind == MLSYS_EV_SEND_BEGIN || got[i].kind == MLSYS_EV_RECV_END) {
            ck_assert_int_eq(back[i].peer, got[i].peer);
            ck_assert_uint_eq(back[i].msg_id, got[i].msg_id);
            ck_assert_int_eq(back[i].coll, MLSYS_COLL_ALLREDUCE);   /* from the open span */
        }
        if (got[i].kind == MLSYS_EV_STEP) {
            ck_assert_int_eq(back[i].step, got[i].step);
            ck_assert_str_eq(back[i].label, "exchange");
        }
        if (got[i].kind == MLSYS_EV_COLL_BEGIN || got[i].kind == MLSYS_EV_COLL_END) {
            ck_assert_int_eq(back[i].coll, MLSYS_COLL_ALLREDUCE);
            ck_assert_str_eq(back[i].label, "recursive_doubling");
        }
    }
    /* played into the ring view, the replay leaves every rank with all contributions */
    const view_class *c = &view_ring_class;
    void *d = c->create();
    fresh(c, d, nranks);
    for (size_t i = 0; i < nb; i++)
        feed(c, d, &back[i]);
    sm_finish(tsm);
    view_ctx ctx = settled(4);
    char *f = render(&view_ring_class, d, W, H, &ctx, 0);
    for (int r = 0; r < 4; r++) {
        char words[8][16];
        ck_assert_int_eq(box_cells(f, r, words, 8), 2);     /* 2 elements: 2 chunks */
        ck_assert_str_eq(words[0], "all");
        ck_assert_str_eq(words[1], "all");
    }
    free(f);
    view_ring_class.free(d);
    mlsys_trace_free(&rd);
    /* and what is not a trace says so */
    ck_assert_int_eq(mlsys_trace_parse("{\"a\":1}", 7, &rd, err, sizeof err), -1);
    ck_assert_ptr_nonnull(strstr(err, "traceEvents"));
    ck_assert_int_eq(mlsys_trace_parse("{not json", 9, &rd, err, sizeof err), -1);
#else
    ck_assert_int_eq(rc, -1);
    ck_assert_ptr_nonnull(strstr(err, "cJSON"));
#endif
}
END_TEST

/* ---- a replay shows the ranks' output and speaks of no ranks to stop ---- */

START_TEST(replay_log_and_help)
{
    static mlsys_event ev[2];
    memset(ev, 0, sizeof ev);
    for (int r = 0; r < 2; r++) {
        ev[r].kind = MLSYS_EV_MARK;
        ev[r].rank = r;
        ev[r].t_ns = 2000 + (uint64_t)r;
        ev[r].coll = ev[r].algo = ev[r].op = -1;
        snprintf(ev[r].label, sizeof ev[r].label, "x");
    }
    mlsys_trace_line lines[2] = {{2500, 0, 0, "Rank 0: hello from the trace"},
                                 {2600, 1, 1, "Rank 1: an error line"}};
    char path[] = "/tmp/mlsys-test-replay-XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    close(fd);
    ck_assert_int_eq(mlsys_trace_write_json_lines(path, ev, 2, lines, 2, 1000), 0);
    mlsys_trace rd;
    char err[256];
    int rc = mlsys_trace_load(path, &rd, err, sizeof err);
    unlink(path);
#ifdef HAVE_CJSON
    ck_assert_msg(rc == 0, "%s", err);
    ui_screen *s = run_create_replay("t.json", &rd);
    run_stats_t st;
    run_stats(s, &st);
    ck_assert_str_eq(st.view, "log");           /* nothing else to show: it opens there */
    s->cls->key(s, UI_KEY_END);
    grid *g = grid_create(100, 30);
    s->cls->draw(s, g, 0, 1, 100, 28);
    char *f = grid_dump(g);
    ck_assert_msg(strstr(f, "[r0] Rank 0: hello from the trace") &&
                  strstr(f, "[r1]! Rank 1: an error line"), "%s", f);
    ck_assert_msg(strstr(f, "b/n Home/End [/] {/}"), "the scrubber says its keys:\n%s", f);
    free(f);
    const char *const *help = s->cls->help(s);
    for (int i = 0; help[i]; i++)
        ck_assert_msg(!strstr(help[i], "gated on") && !strstr(help[i], "form"), "%s", help[i]);
    const ui_key_help *k = ui_global_keys(2, 0, s->cls->busy ? s->cls->busy(s) : 0, 1);
    for (; k->key; k++)
        ck_assert_msg(!strstr(k->what, "stop every rank"), "%s %s", k->key, k->what);
    grid_free(g);
    s->cls->free(s);
#else
    ck_assert_int_eq(rc, -1);
#endif
}
END_TEST

/* ---- a finished job's views catch up: no minutes of animation behind the job ---- */

static double secs(void);

static int many_steps(mlsys_comm *c, void *arg)
{
    (void)arg;
    for (int i = 0; i < 120; i++) {
        int rc = mlsys_step(c, i, "step");
        if (rc)
            return rc;
        mlsys_emit_point(c, "loss", i, 1.0 / (i + 1));
    }
    return 0;
}

START_TEST(finished_job_catches_up)
{
    char err[256];
    ui_screen *s = run_create_fn("steps", 2, 0, many_steps, NULL, err, sizeof err);
    ck_assert_msg(s != NULL, "%s", err);
    run_stats_t st;
    for (int i = 0; i < 3000; i++) {
        int tmo = 10;
        s->cls->tick(s, mlsys_now_ns(), &tmo);
        run_stats(s, &st);
        if (st.done)
            break;
        usleep(2000);
    }
    ck_assert(st.done && st.result == 0);
    /* 120 steps at 700 ms each would take minutes: the player catches up within the last
     * step's animation (waited for, up to 10 s) */
    double t0 = secs();
    while (secs() - t0 < 10) {
        int tmo = 10;
        s->cls->tick(s, mlsys_now_ns(), &tmo);
        run_stats(s, &st);
        if (st.frame == st.last)
            break;
        usleep(20000);
    }
    ck_assert_msg(st.frame == st.last && st.last >= 120, "frame %d of %d after %.1f s", st.frame,
                  st.last, secs() - t0);
    ck_assert_int_gt(st.skipped, 0);
    s->cls->key(s, '3');                       /* the plot: every point the ranks sent */
    grid *g = grid_create(100, 30);
    s->cls->draw(s, g, 0, 1, 100, 28);
    char *f = grid_dump(g);
    ck_assert_msg(strstr(f, "loss") && !strstr(f, "no points yet"), "%s", f);
    ck_assert_msg(strstr(f, "skipped"), "the status line says it skipped steps:\n%s", f);
    free(f);
    /* and b steps back through what it jumped over */
    s->cls->key(s, 'b');
    run_stats(s, &st);
    ck_assert_int_eq(st.frame, st.last - 1);
    grid_free(g);
    s->cls->free(s);
}
END_TEST

/* A rank that says what it did, then takes its gate (as ch08's loop prints a step's line
 * and steps again): the runner reads the line and the gate's STEP event in one pump, and
 * the log must show each line in the frame it was printed in, not one step late. */
static int print_then_step(mlsys_comm *c, void *arg)
{
    (void)arg;
    for (int k = 0; k < 6; k++) {
        printf("done with frame %d\n", k);
        fflush(stdout);
        int rc = mlsys_step(c, k + 1, "next");
        if (rc)
            return rc;
    }
    return 0;
}

START_TEST(log_lines_stay_in_their_frame)
{
    char err[256];
    ui_screen *s = run_create_fn("lines", 1, 1, print_then_step, NULL, err, sizeof err);
    ck_assert_msg(s != NULL, "%s", err);
    for (int i = 0; i < 6; i++)
        s->cls->key(s, '+');                    /* grant the steps as fast as they come */
    s->cls->key(s, ' ');                        /* a gated run starts paused: play */
    run_stats_t st;
    double t0 = secs();
    do {
        int tmo = 10;
        s->cls->tick(s, mlsys_now_ns(), &tmo);
        run_stats(s, &st);
        usleep(3000);
    } while (!st.done && secs() - t0 < 25);
    ck_assert_msg(st.done && st.result == 0, "the gated job did not end (%d)", st.result);
    int found = 0;
    const stepmodel *m = ((run *)s->data)->sm;
    for (size_t i = 0; i < sm_tape_len(m); i++) {
        const mlsys_event *e;
        int rank, is_err, k;
        const char *text;
        int frame = sm_tape_item(m, i, &e, &rank, &is_err, &text);
        if (e || sscanf(text, "done with frame %d", &k) != 1)
            continue;
        ck_assert_msg(frame == k, "\"%s\" is in frame %d", text, frame);
        found++;
    }
    ck_assert_int_eq(found, 6);
    s->cls->free(s);
}
END_TEST

/* ---- core/trace_values.c against a real job ---- */

static int values_rank(mlsys_comm *c, void *arg)
{
    (void)arg;
    int r = mlsys_rank(c);
    double v[6];
    for (int i = 0; i < 6; i++)
        v[i] = 10.0 * r + i;
    mlsys_emit_values(c, 7, v, 6);
    float buf[3] = {(float)r + 1, 2.0f * ((float)r + 1), -1.0f};
    mlsys_watch_buffer(c, buf, 3, MLSYS_F32);
    mlsys_emit_point(c, "bw", 1024.0, 2.5 + r);
    int rc = mlsys_step(c, 0, "hold");       /* gated: waits here while the test reads buf */
    mlsys_watch_buffer(c, NULL, 0, MLSYS_F32);
    return rc;
}

typedef struct seen {
    double vals[4][6];
    int nvals[4];
    uint64_t addr[4];
    int points;
} seen;

static void seen_events(void *u, const mlsys_event *ev, size_t n)
{
    seen *s = u;
    for (size_t i = 0; i < n; i++) {
        const mlsys_event *e = &ev[i];
        if (e->kind != MLSYS_EV_MARK || e->rank < 0 || e->rank >= 4)
            continue;
        if (!strcmp(e->label, MLSYS_MARK_VALUES) && e->step == 7)
            for (int j = 0; j < e->tag; j++) {
                s->vals[e->rank][e->chunk + j] = e->val[j];
                s->nvals[e->rank]++;
            }
        if (!strcmp(e->label, MLSYS_MARK_WATCH) && e->bytes == 3)
            s->addr[e->rank] = (uint64_t)e->val[0];
        if (!strncmp(e->label, MLSYS_MARK_PLOT, strlen(MLSYS_MARK_PLOT)))
            s->points++;
    }
}

START_TEST(values_and_watched_buffers)
{
    mlsys_launch_opts o = {.world_size = 4, .timeout_ms = 10000, .trace_capacity = 4096,
                           .gated = 1};
    char err[256];
    mlsys_job *j = mlsys_job_start(&o, NULL, values_rank, NULL, err, sizeof err);
    ck_assert_msg(j != NULL, "%s", err);
    seen s;
    memset(&s, 0, sizeof s);
    mlsys_job_sink sink = {NULL, seen_events, &s};
    /* wait until every rank stands at the gate */
    int waiting = 0;
    for (int it = 0; it < 5000 && waiting < 4; it++) {
        ck_assert_int_eq(mlsys_job_wait(j, &sink, 1, err, sizeof err), 1);
        waiting = 0;
        for (int r = 0; r < 4; r++)
            waiting += mlsys_job_gate_step(j, r) == 0;
    }
    ck_assert_int_eq(waiting, 4);
    mlsys_job_wait(j, &sink, 5, err, sizeof err);
    for (int r = 0; r < 4; r++) {
        ck_assert_int_eq(s.nvals[r], 6);
        for (int i = 0; i < 6; i++)
            ck_assert(s.vals[r][i] == 10.0 * r + i);
        ck_assert_msg(s.addr[r] != 0, "rank %d announced no buffer", r);
        double got[3];
        const mlsys_rank_status *st = mlsys_job_status(j, r);
        ck_assert_msg(mlsys_values_read(st->pid, s.addr[r], 3, MLSYS_F32, got) == 0,
                      "cannot read rank %d: %s", r, strerror(errno));
        ck_assert(got[0] == r + 1.0 && got[1] == 2.0 * (r + 1) && got[2] == -1.0);
    }
    ck_assert_int_eq(s.points, 4);
    mlsys_job_grant_step(j);
    int rc;
    while ((rc = mlsys_job_wait(j, &sink, 50, err, sizeof err)) == 1)
        ;
    ck_assert_msg(rc == 0, "%s", err);
    mlsys_job_free(j);
    /* reading memory that is not there fails cleanly */
    double x;
    ck_assert_int_eq(mlsys_values_read(getpid(), 0, 1, MLSYS_F64, &x), -1);
}
END_TEST

START_TEST(algo_rule_without_a_comm)
{
    const char *why;
    const char *a = mlsys_algo_rule(MLSYS_COLL_ALLREDUCE, 4, 8, &why);
    ck_assert_str_eq(a, "recursive_doubling");
    ck_assert_ptr_nonnull(strstr(why, "64 KiB"));
    ck_assert_str_eq(mlsys_algo_rule(MLSYS_COLL_ALLREDUCE, 4, 1 << 20, &why), "ring");
    ck_assert_str_eq(mlsys_algo_rule(MLSYS_COLL_ALLREDUCE, 16, 1 << 20, &why), "recursive_halving");
    ck_assert_int_eq(mlsys_algo_index(MLSYS_COLL_ALLREDUCE, "ring"), 1);
    ck_assert_int_eq(mlsys_algo_index(MLSYS_COLL_ALLREDUCE, "nope"), -1);
    ck_assert_int_eq(mlsys_algo_fits(MLSYS_COLL_ALLREDUCE, 1, 4, 2), 0);   /* ring: count < N */
    ck_assert_int_eq(mlsys_algo_fits(MLSYS_COLL_ALLREDUCE, 1, 4, 4), 1);
    ck_assert_ptr_null(mlsys_algo_rule((mlsys_coll)99, 4, 8, &why));
}
END_TEST

/* ---- measured, not asserted ---- */

static double secs(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

START_TEST(measure_draw_and_events)
{
    const view_class *c = &view_ring_class;
    void *d = c->create();
    fresh(c, d, 8);
    rd_allreduce(c, d, 8, 4, -1);
    view_ctx ctx = settled(8);
    ctx.anim = 0.5;
    ctx.sm = tsm;
    ctx.frame = sm_nframes(tsm) - 1;
    grid *g = grid_create(120, 37);
    int frames = 2000;
    double t0 = secs();
    for (int i = 0; i < frames; i++) {
        grid_clear(g);
        c->draw(d, g, 0, 0, 120, 37, &ctx);
    }
    double per = (secs() - t0) / frames;
    /* a million point-to-point events (half sends, half receives) through every view */
    int nev = 1000000;
    mlsys_event *evs = malloc((size_t)nev * sizeof *evs);
    for (int i = 0; i < nev; i += 2) {
        int r = (i / 2) % 8;
        evs[i] = ev(MLSYS_EV_SEND_BEGIN, r);
        evs[i].peer = (r + 1) % 8;
        evs[i].bytes = 64;
        evs[i].msg_id = ((uint64_t)r << 40) | (uint64_t)(i + 1);
        evs[i + 1] = ev(MLSYS_EV_RECV_END, (r + 1) % 8);
        evs[i + 1].peer = r;
        evs[i + 1].bytes = 64;
        evs[i + 1].msg_id = evs[i].msg_id;
    }
    void **vd = calloc((size_t)view_count(), sizeof *vd);    /* one per view class */
    for (int k = 0; view_classes[k]; k++) {
        vd[k] = view_classes[k]->create();
        view_classes[k]->reset(vd[k], 8);
    }
    t0 = secs();
    for (int i = 0; i < nev; i++)
        for (int k = 0; view_classes[k]; k++)
            if (view_classes[k]->event)
                view_classes[k]->event(vd[k], &evs[i], 0);
    double ev_s = secs() - t0;
    printf("measure: ring view, 8 ranks, 120x37: %.1f us per frame (%d frames)\n", per * 1e6,
           frames);
    printf("measure: %d events into all views: %.3f s, %.1f M events/s\n", nev, ev_s,
           nev / ev_s / 1e6);
    for (int k = 0; view_classes[k]; k++)
        view_classes[k]->free(vd[k]);
    free(vd);
    free(evs);
    grid_free(g);
    c->free(d);
}
END_TEST

/* A job that emits about a million events per second (4 ranks x 250k/s) for one second:
 * the run screen must keep drawing (views coalesce) and account for every event: what it
 * received plus what the job reports lost is what the ranks emitted. */
#define FLOOD_PER_RANK 250000

static int flood_rank(mlsys_comm *c, void *arg)
{
    (void)arg;
    mlsys_event e;
    memset(&e, 0, sizeof e);
    e.kind = MLSYS_EV_MARK;
    e.peer = e.tag = e.step = -1;
    e.coll = e.algo = e.op = -1;
    snprintf(e.label, sizeof e.label, "flood");
    uint64_t t0 = mlsys_now_ns();
    for (int i = 0; i < FLOOD_PER_RANK; i++) {
        e.chunk = i;
        mlsys_emit(c, &e);
        if (i % 1000 == 999)
            while (mlsys_now_ns() < t0 + (uint64_t)(i + 1) * 4000ull) {
                struct timespec ts = {0, 100000};
                nanosleep(&ts, NULL);
            }
    }
    return 0;
}

START_TEST(flood_of_events)
{
    char err[256];
    ui_screen *s = run_create_fn("flood", 4, 0, flood_rank, NULL, err, sizeof err);
    ck_assert_msg(s != NULL, "%s", err);
    grid *g = grid_create(120, 40);
    double worst = 0, t_start = secs();
    int turns = 0;
    run_stats_t st;
    for (;;) {
        double t0 = secs();
        int tmo = 500;
        s->cls->tick(s, mlsys_now_ns(), &tmo);
        grid_clear(g);
        s->cls->draw(s, g, 0, 1, 120, 38);
        double dt = secs() - t0;
        if (dt > worst)
            worst = dt;
        turns++;
        run_stats(s, &st);
        if (st.done && st.queued == 0)
            break;
        ck_assert_msg(secs() - t_start < 30, "the flood job did not end");
        struct timespec ts = {0, (tmo > 10 ? 10 : tmo) * 1000000L};
        nanosleep(&ts, NULL);
    }
    double total = secs() - t_start;
    printf("measure: flood of %d events (4 ranks, ~1M/s): %.2f s, %d loop turns, worst turn "
           "%.1f ms; received %llu, fast-forwarded %llu, lost %llu\n", 4 * FLOOD_PER_RANK,
           total, turns, worst * 1e3, (unsigned long long)st.events,
           (unsigned long long)st.forwarded, (unsigned long long)st.lost);
    ck_assert_int_eq(st.result, 0);
    ck_assert_uint_eq(st.events + st.lost, 4ull * FLOOD_PER_RANK);
    grid_free(g);
    s->cls->free(s);
}
END_TEST

static Suite *views_suite(void)
{
    Suite *s = suite_create("views");
    TCase *t = tcase_create("views");
    tcase_set_timeout(t, 60);
    tcase_add_test(t, ring_recursive_doubling_cells);
    tcase_add_test(t, ring_allreduce_cells_follow_the_table);
    tcase_add_test(t, ring_golden_frames);
    tcase_add_test(t, ring_five_ranks_small);
    tcase_add_test(t, ring_grid_for_many_ranks);
    tcase_add_test(t, ring_small_area_and_p2p);
    tcase_add_test(t, log_orders);
    tcase_add_test(t, log_filter_reaches_every_rank);
    tcase_add_test(t, log_wraps_long_lines);
    tcase_add_test(t, line_rank_tags);
    tcase_add_test(t, run_log_tags_lines_with_their_rank);
    tcase_add_test(t, print_ordered_untagged_headless);
    tcase_add_test(t, plot_sweep);
    tcase_add_test(t, timeline_spans);
    tcase_add_test(t, shell_parts);
    tcase_add_test(t, form_validates_as_you_type);
    tcase_add_test(t, form_shows_only_flags_that_apply);
    tcase_add_test(t, form_trims_and_warns_about_the_algorithm);
    tcase_add_test(t, rank_values_parser);
    tcase_add_test(t, replay_round_trip);
    tcase_add_test(t, replay_log_and_help);
    tcase_add_test(t, finished_job_catches_up);
    tcase_add_test(t, log_lines_stay_in_their_frame);
    tcase_add_test(t, values_and_watched_buffers);
    tcase_add_test(t, algo_rule_without_a_comm);
    tcase_add_test(t, measure_draw_and_events);
    tcase_add_test(t, flood_of_events);
    suite_add_tcase(s, t);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(views_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
