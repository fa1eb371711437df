/* test_timeline.c - the timeline view from synthetic events: a generated 1F1B schedule drawn
 * slot by slot (golden frame, bubble in the title equal to the schedule's), compute and
 * communication on separate rows with the collective named (golden), zoom and scroll keys,
 * an axis that grows in steps while live instead of rescaling with every event, a gated
 * wait squeezed out of the picture and out of the bubble, a span shorter than a column that
 * keeps its column (a round's outcome), no empty second row without communication, and the
 * lab's phase in each section's title. GENERATE=1 rewrites the goldens. */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../../lab/ui/views/view.h"
#include "../../chapters/ch07/schedule.h"

#include "golden.h"

static char *render(void *d, int w, int h, int live)
{
    view_ctx c;
    memset(&c, 0, sizeof c);
    c.anim = 1.0;
    c.ascii = 1;
    c.live = live;
    grid *g = grid_create(w, h);
    grid_set_ascii(g, 1);
    view_timeline_class.draw(d, g, 0, 0, w, h, &c);
    char *s = grid_dump(g);
    grid_free(g);
    return s;
}

static mlsys_event ev(int kind, int rank, uint64_t t, const char *label)
{
    mlsys_event e;
    memset(&e, 0, sizeof e);
    e.kind = (int16_t)kind;
    e.rank = rank;
    e.peer = e.tag = e.step = e.chunk = e.dtype = -1;
    e.coll = e.algo = e.op = -1;
    e.t_ns = t;
    if (label)
        snprintf(e.label, sizeof e.label, "%s", label);
    return e;
}

/* The text of line y of a frame (without the newline). */
static void line_of(const char *f, int y, char *out, size_t n)
{
    for (int i = 0; i < y && f; i++) {
        f = strchr(f, '\n');
        if (f)
            f++;
    }
    size_t len = f ? strcspn(f, "\n") : 0;
    snprintf(out, n, "%.*s", (int)len, f ? f : "");
}

START_TEST(schedule_slots)
{
    const view_class *c = &view_timeline_class;
    void *d = c->create();
    c->reset(d, 4);
    schedule s;
    char err[128];
    ck_assert_int_eq(sched_build(&s, SCHED_1F1B, 4, 8, 1, err, sizeof err), 0);
    mlsys_event *e;
    size_t n = sched_events(&s, 1000000, &e);
    for (size_t i = 0; i < n; i++)
        c->event(d, &e[i], 0);
    free(e);
    /* 4 + 88 + 7 columns: 88 = 4 per slot, so each slot is exactly four cells */
    char *f = render(d, 99, 14, 0);
    golden("timeline_1f1b_slots", f);
    ck_assert_msg(strstr(f, "bubble 27.3% overall") != NULL, "%s", f);
    /* every lane: the schedule's own idle share, in '.' cells */
    for (int r = 0; r < 4; r++) {
        char row[256];
        line_of(f, 2 + r, row, sizeof row);         /* one row a lane: no communication */
        int dots = 0, letters = 0;
        for (int k = 4; k < 4 + 88; k++) {
            dots += row[k] == '.';
            letters += row[k] == 'F' || row[k] == 'B' || (row[k] >= '0' && row[k] <= '9');
        }
        ck_assert_msg(dots == 24 && letters == 64, "lane %d: %d dots %d busy: %s", r, dots,
                      letters, row);
        ck_assert_msg(strstr(row, "27.3%") != NULL, "%s", row);
        /* stage r starts with r idle slots, then F0 */
        ck_assert_msg(!strncmp(row + 4 + 4 * r, "F0", 2), "lane %d: %s", r, row);
    }
    free(f);
    sched_free(&s);
    c->free(d);
}
END_TEST

static void feed_comm(void *d)
{
    const view_class *c = &view_timeline_class;
    mlsys_event e;
    uint64_t ms = 1000000;
    e = ev(MLSYS_EV_COMPUTE_BEGIN, 0, 0, "F mb0");
    c->event(d, &e, 0);
    e = ev(MLSYS_EV_COMPUTE_END, 0, 4 * ms, "F mb0");
    c->event(d, &e, 0);
    e = ev(MLSYS_EV_SEND_BEGIN, 0, 4 * ms, NULL);
    e.peer = 1;
    c->event(d, &e, 0);
    e = ev(MLSYS_EV_RECV_BEGIN, 1, 1 * ms, NULL);
    e.peer = 0;
    c->event(d, &e, 0);
    /* rank 0 computes B while its send is still in flight: overlap */
    e = ev(MLSYS_EV_COMPUTE_BEGIN, 0, 5 * ms, "B mb0");
    c->event(d, &e, 0);
    e = ev(MLSYS_EV_SEND_END, 0, 6 * ms, NULL);
    c->event(d, &e, 0);
    e = ev(MLSYS_EV_RECV_END, 1, 6 * ms, NULL);
    c->event(d, &e, 0);
    e = ev(MLSYS_EV_COMPUTE_BEGIN, 1, 6 * ms, "F mb0");
    c->event(d, &e, 0);
    e = ev(MLSYS_EV_COMPUTE_END, 0, 9 * ms, "B mb0");
    c->event(d, &e, 0);
    e = ev(MLSYS_EV_COMPUTE_END, 1, 10 * ms, "F mb0");
    c->event(d, &e, 0);
    for (int r = 0; r < 2; r++) {
        e = ev(MLSYS_EV_COLL_BEGIN, r, 10 * ms, NULL);
        e.coll = MLSYS_COLL_ALLREDUCE;
        c->event(d, &e, 0);
        e = ev(MLSYS_EV_COLL_END, r, 16 * ms, NULL);
        e.coll = MLSYS_COLL_ALLREDUCE;
        c->event(d, &e, 0);
    }
}

START_TEST(comm_rows_and_keys)
{
    const view_class *c = &view_timeline_class;
    void *d = c->create();
    c->reset(d, 2);
    feed_comm(d);
    char *f = render(d, 75, 10, 0);
    golden("timeline_comm_rows", f);
    char r0[128], c0[128];
    line_of(f, 2, r0, sizeof r0);
    line_of(f, 3, c0, sizeof c0);
    ck_assert_msg(strstr(r0, "F0") && strstr(r0, "B0"), "%s", r0);
    ck_assert_msg(strstr(c0, "all_reduce") && strstr(c0, "C>1"), "%s", c0);
    /* overlap: a column where rank 0 computes B and its send is still open */
    int overlap = 0;
    for (int k = 4; k < 68; k++)
        overlap |= (r0[k] == 'B' || r0[k] == '0') && c0[k] == 'C';
    ck_assert_msg(overlap, "\n%s\n%s", r0, c0);
    /* zoom in, scroll, back to the whole run */
    ck_assert_int_ne(c->key(d, '>') & UI_REDRAW, 0);
    char *z = render(d, 75, 10, 0);
    ck_assert_ptr_nonnull(strstr(z, "zoom x2"));
    ck_assert_str_ne(z, f);
    ck_assert_int_ne(c->key(d, 'g'), 0);
    char *g0 = render(d, 75, 10, 0);
    line_of(g0, 2, r0, sizeof r0);
    ck_assert_msg(!strncmp(r0 + 4, "F0", 2), "%s", r0);     /* the start is in view */
    ck_assert_int_ne(c->key(d, 'l'), 0);
    char *g1 = render(d, 75, 10, 0);
    ck_assert_str_ne(g0, g1);
    ck_assert_int_ne(c->key(d, 'z'), 0);
    char *back = render(d, 75, 10, 0);
    ck_assert_str_eq(back, f);
    ck_assert_int_eq(c->key(d, 'q'), 0);                     /* not ours */
    free(z);
    free(g0);
    free(g1);
    free(back);
    free(f);
    c->free(d);
}
END_TEST

START_TEST(axis_grows_in_steps)
{
    const view_class *c = &view_timeline_class;
    void *d = c->create();
    c->reset(d, 1);
    char last[64] = "", row[128];
    int changes = 0;
    for (int i = 0; i < 100; i++) {
        uint64_t t = (uint64_t)i * 1000000;
        mlsys_event e = ev(MLSYS_EV_COMPUTE_BEGIN, 0, t, "F mb0");
        c->event(d, &e, 0);
        e = ev(MLSYS_EV_COMPUTE_END, 0, t + 500000, "F mb0");
        c->event(d, &e, 0);
        char *f = render(d, 60, 8, 1);
        line_of(f, 4, row, sizeof row);          /* the axis labels under the lane (one row:
                                                    no communication) */
        ck_assert_msg(strstr(row, "ms") || strstr(row, "us"), "no axis labels: %s", row);
        const char *end = row + strlen(row);
        while (end > row && end[-1] == ' ')
            end--;
        const char *st = end;
        while (st > row && st[-1] != ' ')
            st--;
        while (st > row + 1 && st[-1] == ' ' && st[-2] != ' ')
            st--;
        char lab[64];
        snprintf(lab, sizeof lab, "%.*s", (int)(end - st), st);
        if (strcmp(lab, last)) {
            changes++;
            snprintf(last, sizeof last, "%s", lab);
        }
        free(f);
    }
    /* 0.5 ms to 99.5 ms in doublings: at most 8 different ends, not one per event */
    ck_assert_msg(changes <= 9, "axis end changed %d times (last %s)", changes, last);
    c->free(d);
}
END_TEST

START_TEST(gated_wait_squeezed)
{
    const view_class *c = &view_timeline_class;
    void *d = c->create();
    c->reset(d, 1);
    uint64_t ms = 1000000;
    mlsys_event e = ev(MLSYS_EV_COMPUTE_BEGIN, 0, 0, "F mb0");
    c->event(d, &e, 0);
    e = ev(MLSYS_EV_COMPUTE_END, 0, 10 * ms, "F mb0");
    c->event(d, &e, 0);
    /* ten seconds at a gate, nobody doing anything */
    e = ev(MLSYS_EV_COMPUTE_BEGIN, 0, 10010 * ms, "B mb0");
    c->event(d, &e, 0);
    e = ev(MLSYS_EV_COMPUTE_END, 0, 10020 * ms, "B mb0");
    c->event(d, &e, 0);
    char *f = render(d, 60, 8, 0);
    ck_assert_msg(strstr(f, "~") != NULL, "%s", f);
    char row[128];
    line_of(f, 2, row, sizeof row);
    int fs = 0, bs = 0;
    for (const char *p = row; *p; p++) {
        fs += *p == 'F' || (p > row && p[-1] == 'F' && *p == '0');
        bs += *p == 'B' || (p > row && p[-1] == 'B' && *p == '0');
    }
    /* both bursts keep most of the width: the wait did not push them to the edges */
    ck_assert_msg(fs > 15 && bs > 15, "%s", row);
    ck_assert_msg(strstr(row, "0.0%") != NULL, "the wait counted as bubble: %s", row);
    free(f);
    c->free(d);
}
END_TEST

/* Waits at a gate inside a collective (gated mode: STEP, then MARK "gate" when the rank
 * passed): not bubble, not communication, and squeezed off the axis. */
START_TEST(gate_waits_inside_a_collective)
{
    const view_class *c = &view_timeline_class;
    void *d = c->create();
    c->reset(d, 2);
    uint64_t ms = 1000000;
    for (int r = 0; r < 2; r++) {
        mlsys_event e = ev(MLSYS_EV_COMPUTE_BEGIN, r, 0, "F mb0");
        c->event(d, &e, 0);
        e = ev(MLSYS_EV_COMPUTE_END, r, 8 * ms, "F mb0");
        c->event(d, &e, 0);
        e = ev(MLSYS_EV_COLL_BEGIN, r, 8 * ms, "ring");
        e.coll = MLSYS_COLL_ALLREDUCE;
        c->event(d, &e, 0);
        for (int k = 0; k < 3; k++) {      /* three algorithm steps, 10 s at each gate */
            uint64_t t0 = 8 * ms + (uint64_t)k * 10002 * ms;
            e = ev(MLSYS_EV_STEP, r, t0, "reduce-scatter");
            e.coll = MLSYS_COLL_ALLREDUCE;
            e.step = k;
            c->event(d, &e, 0);
            e = ev(MLSYS_EV_MARK, r, t0 + 10000 * ms, "gate");
            e.step = k;
            c->event(d, &e, 0);
        }
        e = ev(MLSYS_EV_COLL_END, r, 8 * ms + 3 * 10002 * ms, "ring");
        e.coll = MLSYS_COLL_ALLREDUCE;
        c->event(d, &e, 0);
        e = ev(MLSYS_EV_COMPUTE_BEGIN, r, 8 * ms + 3 * 10002 * ms, "B mb0");
        c->event(d, &e, 0);
        e = ev(MLSYS_EV_COMPUTE_END, r, 16 * ms + 3 * 10002 * ms, "B mb0");
        c->event(d, &e, 0);
    }
    char *f = render(d, 70, 10, 0), row[128];
    /* busy: 16 ms of compute in 22 ms (the 30 s of waits are nobody's bubble): 27% */
    line_of(f, 2, row, sizeof row);
    ck_assert_msg(strstr(row, " 27.3%"), "lane 0: %s\n%s", row, f);
    ck_assert_msg(strstr(f, "~") && !strstr(f, " s\n"), "the waits stay on the axis:\n%s", f);
    free(f);
    c->free(d);
}
END_TEST

/* TP's labels: forward and backward of the same kernel have one letter but not one look;
 * the legend names what the lanes show; texts never run into each other. */
START_TEST(legend_directions_and_texts)
{
    const view_class *c = &view_timeline_class;
    void *d = c->create();
    c->reset(d, 1);
    uint64_t ms = 1000000;
    static const char *const seq[] = {"col GEMM", "GELU", "row GEMM", "row GEMM bwd",
                                      "GELU bwd", "col GEMM bwd"};
    for (int i = 0; i < 6; i++) {
        mlsys_event e = ev(MLSYS_EV_COMPUTE_BEGIN, 0, (uint64_t)i * 4 * ms, seq[i]);
        c->event(d, &e, 0);
        e = ev(MLSYS_EV_COMPUTE_END, 0, (uint64_t)i * 4 * ms + 3 * ms, seq[i]);
        c->event(d, &e, 0);
    }
    /* two collectives back to back, each a few columns wide: names must not run together */
    static const int colls[] = {MLSYS_COLL_BROADCAST, MLSYS_COLL_ALLREDUCE};
    for (int i = 0; i < 2; i++) {
        mlsys_event e = ev(MLSYS_EV_COLL_BEGIN, 0, 24 * ms + (uint64_t)i * ms, "direct");
        e.coll = (int16_t)colls[i];
        c->event(d, &e, 0);
        e = ev(MLSYS_EV_COLL_END, 0, 25 * ms + (uint64_t)i * ms, "direct");
        e.coll = (int16_t)colls[i];
        c->event(d, &e, 0);
    }
    grid *g = grid_create(80, 8);
    grid_set_ascii(g, 1);
    view_ctx ctx;
    memset(&ctx, 0, sizeof ctx);
    ctx.anim = 1.0;
    ctx.ascii = 1;
    view_timeline_class.draw(d, g, 0, 0, 80, 8, &ctx);
    char *f = grid_dump(g), *at = grid_dump_attrs(g);
    char row[128], arow[128];
    line_of(f, 1, row, sizeof row);
    ck_assert_msg(strstr(row, "c col GEMM") && strstr(row, "G GELU") && strstr(row, "r row GEMM")
                  && strstr(row, "backward"), "legend: %s", row);
    line_of(f, 2, row, sizeof row);
    line_of(at, 2, arow, sizeof arow);
    /* the first 'c' span (forward) is not reversed, the last (backward) is: bit 8 */
    const char *first = strchr(row + 4, 'c'), *last = strrchr(row, 'c');
    ck_assert_ptr_nonnull(first);
    ck_assert(first != last);
    int fa = arow[first - row], la = arow[last - row];
    int fr = fa == '.' ? 0 : fa >= 'a' ? fa - 'a' + 10 : fa - '0';
    int lr = la == '.' ? 0 : la >= 'a' ? la - 'a' + 10 : la - '0';
    ck_assert_msg(!(fr & 8) && (lr & 8), "forward %c, backward %c in\n%s", fa, la, arow);
    line_of(f, 3, row, sizeof row);
    ck_assert_msg(!strstr(row, "broadcasall") && !strstr(row, "broadcastall"), "%s", row);
    free(f);
    free(at);
    grid_free(g);
    c->free(d);
}
END_TEST

/* A lab without compute spans (train-lm) gets no made-up 100% bubble. */
START_TEST(no_compute_no_bubble)
{
    const view_class *c = &view_timeline_class;
    void *d = c->create();
    c->reset(d, 2);
    for (int r = 0; r < 2; r++) {
        mlsys_event e = ev(MLSYS_EV_COLL_BEGIN, r, 1000, "ring");
        e.coll = MLSYS_COLL_ALLREDUCE;
        c->event(d, &e, 0);
        e = ev(MLSYS_EV_COLL_END, r, 9000000, "ring");
        e.coll = MLSYS_COLL_ALLREDUCE;
        c->event(d, &e, 0);
    }
    char *f = render(d, 70, 10, 0);
    ck_assert_msg(strstr(f, "no compute spans") && strstr(f, "n/a") && !strstr(f, "100.0%"),
                  "%s", f);
    free(f);
    c->free(d);
}
END_TEST

/* Each schedule of --schedule all is a section: named, with its own bubble; a shows the
 * whole run; the interleaved chunks carry their letter. */
START_TEST(schedules_as_sections)
{
    const view_class *c = &view_timeline_class;
    void *d = c->create();
    c->reset(d, 4);
    char err[128];
    int first = 0;
    static const sched_kind ks[] = {SCHED_GPIPE, SCHED_1F1B, SCHED_INTERLEAVED, SCHED_ZBH1};
    double bubble[4];
    for (int i = 0; i < 4; i++) {
        schedule s;
        ck_assert_int_eq(sched_build(&s, ks[i], 4, 8, 2, err, sizeof err), 0);
        bubble[i] = sched_bubble(&s);
        mlsys_event *e;
        size_t n = sched_events_at(&s, 1000000, first, i, &e);
        for (size_t k = 0; k < n; k++)
            c->event(d, &e[k], e[k].kind == MLSYS_EV_STEP ? i + 1 : i);
        free(e);
        first += s.total + 2;
        sched_free(&s);
        /* drawn now, the newest section is this schedule, with its own bubble */
        char *f = render(d, 120, 14, 0), want[96];
        snprintf(want, sizeof want, "%s - step %d of %d", sched_short(ks[i]), i + 1, i + 1);
        ck_assert_msg(strstr(f, want), "no '%s' in\n%s", want, f);
        snprintf(want, sizeof want, "bubble %.1f%% overall", 100.0 * bubble[i]);
        ck_assert_msg(strstr(f, want), "no '%s' in\n%s", want, f);
        if (ks[i] == SCHED_INTERLEAVED)
            ck_assert_msg(strstr(f, "F0a") && strstr(f, "F0b"), "%s", f);
        if (i == 2)
            golden("timeline_interleaved_section", f);
        free(f);
    }
    ck_assert_int_ne(c->key(d, 'a') & UI_REDRAW, 0);
    char *f = render(d, 120, 14, 0);
    ck_assert_msg(strstr(f, "the whole run"), "%s", f);
    free(f);
    c->free(d);
}
END_TEST

/* A lab that measured its own section (MARK "bubble") sees its figure, not another one. */
START_TEST(lab_measured_bubble)
{
    const view_class *c = &view_timeline_class;
    void *d = c->create();
    c->reset(d, 2);
    uint64_t ms = 1000000;
    for (int r = 0; r < 2; r++) {
        mlsys_event e = ev(MLSYS_EV_STEP, r, 0, "1F1B");
        e.step = 0;
        c->event(d, &e, 1);
        e = ev(MLSYS_EV_COMPUTE_BEGIN, r, 2 * ms, "F mb0");
        c->event(d, &e, 1);
        e = ev(MLSYS_EV_COMPUTE_END, r, (uint64_t)(6 + 2 * r) * ms, "F mb0");
        c->event(d, &e, 1);
        e = ev(MLSYS_EV_MARK, r, 12 * ms, "bubble");
        e.val[0] = (4.0 + 2 * r) * ms;       /* busy: 4 ms and 6 ms of a 10 ms span */
        e.val[1] = 10.0 * ms;
        c->event(d, &e, 1);
    }
    char *f = render(d, 90, 10, 0), row[128];
    ck_assert_msg(strstr(f, "bubble 50.0% measured by the lab (span 10.00 ms)"), "%s", f);
    line_of(f, 2, row, sizeof row);             /* one row a lane: no communication */
    ck_assert_msg(strstr(row, " 60.0%"), "%s", row);
    line_of(f, 3, row, sizeof row);
    ck_assert_msg(strstr(row, " 40.0%"), "%s", row);
    free(f);
    c->free(d);
}
END_TEST

/* The lab's printed chart: the interleaved schedule's 38 slots in blocks no wider than 78
 * columns (the front end's log at 80 no longer cuts it at slot 24), every slot once. */
START_TEST(chart_in_blocks)
{
    schedule s;
    char err[128];
    ck_assert_int_eq(sched_build(&s, SCHED_INTERLEAVED, 4, 8, 2, err, sizeof err), 0);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    sched_print_grid(&s, f);
    fclose(f);
    int widest = 0, slots = 0, last = -1;
    for (char *line = strtok(buf, "\n"); line; line = strtok(NULL, "\n")) {
        int w = grid_text_width(line, strlen(line));
        if (w > widest)
            widest = w;
        if (!strncmp(line, "Time", 4))
            for (char *p = line + 8; *p; ) {
                char *end;
                long v = strtol(p, &end, 10);
                if (end == p)
                    break;
                ck_assert_int_eq(v, last + 1);
                last = (int)v;
                slots++;
                p = end;
            }
    }
    ck_assert_msg(widest <= 78, "a line of %d columns", widest);
    ck_assert_int_eq(slots, s.total);
    free(buf);
    sched_free(&s);
}
END_TEST

/* A serving engine's step: the forward on row 0, its CPU phases (tag 1, emitted after the
 * forward with their own times) on the second row named "cpu", each kind in the legend by
 * its word; the bubble counts the forward's row only. */
START_TEST(second_thread_row)
{
    const view_class *c = &view_timeline_class;
    void *d = c->create();
    c->reset(d, 1);
    /* plain: s 0-10, p 10-20, f 20-60, t 60-70, d 70-80; overlapped: l 80-90, f 90-130
     * beside s 90-110 and p 110-120, t 130-140, d 140-150 (ms) */
    static const struct { int row; uint64_t t0, t1; const char *label; } sp[] = {
        {1, 0, 10, "schedule"}, {1, 10, 20, "prepare"}, {0, 20, 60, "forward P0:16 P1:16"},
        {1, 60, 70, "token sample"}, {1, 70, 80, "detokenize"}, {1, 80, 90, "launch"},
        {1, 90, 110, "schedule"}, {1, 110, 120, "prepare"}, {0, 90, 130, "forward D0,1"},
        {1, 130, 140, "token sample"}, {1, 140, 150, "detokenize"}};
    for (size_t i = 0; i < sizeof sp / sizeof sp[0]; i++) {
        mlsys_event e = ev(MLSYS_EV_COMPUTE_BEGIN, 0, sp[i].t0 * 1000000 + 1, sp[i].label);
        e.tag = sp[i].row;
        c->event(d, &e, 0);
        e = ev(MLSYS_EV_COMPUTE_END, 0, sp[i].t1 * 1000000 + 1, sp[i].label);
        e.tag = sp[i].row;
        c->event(d, &e, 0);
    }
    char *f = render(d, 4 + 150 / 2 + 7, 8, 0);   /* 75 columns: 2 ms each */
    char legend[256], r0[256], cpu[256];
    line_of(f, 1, legend, sizeof legend);
    line_of(f, 2, r0, sizeof r0);
    line_of(f, 3, cpu, sizeof cpu);
    static const char *const entries[] = {"s schedule", "p prepare", "f forward",
                                          "t token sample", "d detokenize", "l launch"};
    for (size_t i = 0; i < 6; i++)
        ck_assert_msg(strstr(legend, entries[i]) != NULL, "no '%s' in: %s", entries[i], legend);
    ck_assert_msg(!strstr(legend, "forward P"), "%s", legend);
    ck_assert_msg(!strncmp(cpu, "cpu", 3), "%s", f);
    /* columns of 2 ms from 4: the forward's row idle while the CPU plans, busy beside it
     * when overlapped */
    ck_assert_msg(r0[4] == '.' && r0[4 + 10] == 'f' && r0[4 + 32] == '.', "%s", f);
    ck_assert_msg(cpu[4] == 's' && cpu[4 + 6] == 'p' && cpu[4 + 32] == 't' && cpu[4 + 36] == 'd', "%s", f);
    ck_assert_msg(r0[4 + 50] == 'f' && cpu[4 + 50] == 's' && cpu[4 + 57] == 'p', "%s", f);
    /* bubble: the forward's row busy 80 of 150 ms */
    ck_assert_msg(strstr(f, "bubble 46.7% overall"), "%s", f);
    free(f);
    c->free(d);
}
END_TEST

/* A round's outcome, far shorter than a column, beside long spans that share its column
 * (speculative decoding: draft, verify, then "accepted 4 of 4" or "rejected 2 of 4" in a few
 * microseconds): each outcome keeps its column, so every round says how it ended. */
START_TEST(short_spans_keep_their_column)
{
    const view_class *c = &view_timeline_class;
    void *d = c->create();
    c->reset(d, 1);
    uint64_t us = 1000, t = 0;
    int rounds = 23, rejected = 8;      /* rounds 0, 3, ..., 21 are refused */
    for (int i = 0; i < rounds; i++) {
        mlsys_event e = ev(MLSYS_EV_COMPUTE_BEGIN, 0, t, "draft");
        c->event(d, &e, 0);
        e = ev(MLSYS_EV_COMPUTE_END, 0, t += 1500 * us, "draft");
        c->event(d, &e, 0);
        e = ev(MLSYS_EV_COMPUTE_BEGIN, 0, t, "verify");
        c->event(d, &e, 0);
        e = ev(MLSYS_EV_COMPUTE_END, 0, t += 2700 * us, "verify");
        c->event(d, &e, 0);
        const char *out = i % 3 ? "accepted 4 of 4" : "rejected 2 of 4";
        e = ev(MLSYS_EV_COMPUTE_BEGIN, 0, t, out);
        c->event(d, &e, 0);
        e = ev(MLSYS_EV_COMPUTE_END, 0, t += 5 * us, out);
        c->event(d, &e, 0);
    }
    /* 96.7 ms over 80 columns: a round in 3.5 columns (so most outcomes share a column with
     * the next round's draft), the outcome in 1/200 of one */
    char *f = render(d, 91, 8, 0), row[128];
    line_of(f, 2, row, sizeof row);
    int a = 0, r = 0;
    for (const char *p = row + 4; *p && p < row + 84; p++) {
        a += *p == 'a';
        r += *p == 'r';
    }
    ck_assert_msg(a == rounds - rejected && r == rejected, "%d accepted, %d rejected of %d "
                  "rounds: %s", a, r, rounds, row);
    ck_assert_msg(strstr(f, "a accepted") && strstr(f, "r rejected"), "%s", f);
    /* one rank, no messages: no empty second row under the lane */
    line_of(f, 3, row, sizeof row);
    ck_assert_msg(!strchr(row, '|') || strstr(row, "---"), "a second row: %s", row);
    free(f);
    c->free(d);
}
END_TEST

/* An engine's steps inside a lab's phase ("batch 4 overlap", a FLOW_PHASE record): every
 * section it holds names the phase in its title, so each frame says what it shows. */
START_TEST(phase_names_its_sections)
{
    const view_class *c = &view_timeline_class;
    void *d = c->create();
    c->reset(d, 1);
    uint64_t ms = 1000000, t = ms;
    static const char *const phases[] = {"batch 1 plain", "batch 4 overlap"};
    int frame = 0;
    for (int p = 0; p < 2; p++) {
        mlsys_event e = ev(MLSYS_EV_FLOW, 0, t, phases[p]);
        e.flow = (mlsys_flow_info){-1, -1, MLSYS_FLOW_PHASE, (int16_t)p, 4, p, -1, 0};
        c->event(d, &e, frame);
        e = ev(MLSYS_EV_STEP, 0, t += ms, phases[p]);
        e.step = p;
        c->event(d, &e, ++frame);
        for (int k = 1; k <= 2; k++) {
            char lab[32];
            snprintf(lab, sizeof lab, "engine step %d", k);
            e = ev(MLSYS_EV_STEP, 0, t += ms, lab);
            e.step = k;
            c->event(d, &e, ++frame);
            e = ev(MLSYS_EV_COMPUTE_BEGIN, 0, t += ms, "forward");
            c->event(d, &e, frame);
            e = ev(MLSYS_EV_COMPUTE_END, 0, t += 2 * ms, "forward");
            c->event(d, &e, frame);
        }
    }
    char *f = render(d, 100, 8, 0);
    ck_assert_msg(strstr(f, "timeline - batch 4 overlap - engine step 2 - step 6 of 6"), "%s", f);
    free(f);
    c->free(d);
    /* the phase's own step says its name once */
    d = c->create();
    c->reset(d, 1);
    mlsys_event e = ev(MLSYS_EV_FLOW, 0, ms, "batch 1 plain");
    e.flow = (mlsys_flow_info){-1, -1, MLSYS_FLOW_PHASE, 0, 1, 0, -1, 0};
    c->event(d, &e, 0);
    e = ev(MLSYS_EV_STEP, 0, 2 * ms, "batch 1 plain");
    e.step = 0;
    c->event(d, &e, 1);
    e = ev(MLSYS_EV_COMPUTE_BEGIN, 0, 3 * ms, "forward");
    c->event(d, &e, 1);
    e = ev(MLSYS_EV_COMPUTE_END, 0, 4 * ms, "forward");
    c->event(d, &e, 1);
    f = render(d, 100, 8, 0);
    ck_assert_msg(strstr(f, "timeline - batch 1 plain - step 1 of 1 -"), "%s", f);
    free(f);
    c->free(d);
}
END_TEST

static Suite *timeline_suite(void)
{
    Suite *s = suite_create("timeline");
    TCase *t = tcase_create("timeline");
    tcase_add_test(t, schedule_slots);
    tcase_add_test(t, comm_rows_and_keys);
    tcase_add_test(t, axis_grows_in_steps);
    tcase_add_test(t, gated_wait_squeezed);
    tcase_add_test(t, gate_waits_inside_a_collective);
    tcase_add_test(t, legend_directions_and_texts);
    tcase_add_test(t, no_compute_no_bubble);
    tcase_add_test(t, schedules_as_sections);
    tcase_add_test(t, lab_measured_bubble);
    tcase_add_test(t, chart_in_blocks);
    tcase_add_test(t, second_thread_row);
    tcase_add_test(t, short_spans_keep_their_column);
    tcase_add_test(t, phase_names_its_sections);
    suite_add_tcase(s, t);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(timeline_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
