/* test_blocks.c - the blocks view rendered off-screen from synthetic "blk:" events (the schema
 * of lab/ui/views/blocks.h): golden frames in tests/frames/blocks_*.txt (GENERATE=1 rewrites
 * them) for gradients with buckets and an owned shard, ASCII, the "before" picture and KV-like
 * page states; and properties that do not need a golden: row -1 is the sender's rank, repeated
 * phases and clears from several ranks count once, shades follow the values. */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../../lab/ui/views/view.h"
#include "../../chapters/common/blocks.h"

#include "golden.h"

static char *render(void *d, int w, int h, int ascii)
{
    view_ctx ctx;
    memset(&ctx, 0, sizeof ctx);
    ctx.nranks = 4;
    ctx.anim = 1.0;
    ctx.failed_rank = -1;
    ctx.frame = -1;
    ctx.ascii = ascii;
    grid *g = grid_create(w, h);
    grid_set_ascii(g, ascii);
    view_blocks_class.draw(d, g, 0, 0, w, h, &ctx);
    char *s = grid_dump(g);
    grid_free(g);
    return s;
}

static void send(void *d, int rank, const char *label, int row, int chunk, int tag, int step,
                 const double *v, int nv)
{
    mlsys_event e;
    memset(&e, 0, sizeof e);
    e.kind = MLSYS_EV_MARK;
    e.rank = rank;
    e.peer = row;
    e.chunk = chunk;
    e.tag = tag;
    e.step = step;
    for (int i = 0; i < nv && i < 4; i++)
        e.val[i] = v[i];
    snprintf(e.label, sizeof e.label, "%s", label);
    view_blocks_class.event(d, &e);
}

static void send_row(void *d, int rank, const double *v, int n, int states)
{
    for (int i = 0; i < n; i += 4)
        send(d, rank, states ? "blk:state" : "blk:val", -1, i, n - i < 4 ? n - i : 4, -1, v + i,
             n - i < 4 ? n - i : 4);
}

/* The gradient-sync picture: 4 ranks x 18 values, buckets [16,18) [10,16) [4,10) [0,4). */
static void *grads_scene(int synced)
{
    void *d = view_blocks_class.create();
    view_blocks_class.reset(d, 4);
    static const int off[4] = {16, 10, 4, 0}, len[4] = {2, 6, 6, 4};
    for (int r = 0; r < 4; r++) {
        send(d, r, "blk:clear", -1, -1, 0, 1, NULL, 0);
        send(d, r, "blk:phase:local gradients", -1, -1, 0, -1, NULL, 0);
        send(d, r, "blk:size", -1, -1, 18, -1, NULL, 0);
        for (int k = 0; k < 4; k++) {
            char name[32];
            snprintf(name, sizeof name, "blk:group:b%d", k);
            send(d, r, name, -1, off[k], len[k], k, NULL, 0);
        }
        double v[18], st[18];
        for (int i = 0; i < 18; i++) {
            v[i] = ((i * 7 + r * 5) % 11 - 5) / 5.0;
            st[i] = i / 5 == r ? BLK_OWNED : BLK_USED;
        }
        send_row(d, r, st, 18, 1);
        send_row(d, r, v, 18, 0);
    }
    if (synced) {
        for (int r = 0; r < 4; r++)
            send(d, r, "blk:phase:all-reduce bucket 1", -1, -1, 0, 1, NULL, 0);
        for (int r = 0; r < 4; r++) {
            double v[6] = {0.1, -0.2, 0.3, -0.4, 0.5, 1.0};
            send(d, r, "blk:val", -1, 10, 4, -1, v, 4);
            send(d, r, "blk:val", -1, 14, 2, -1, v + 4, 2);
        }
    }
    return d;
}

START_TEST(golden_gradients)
{
    void *d = grads_scene(1);
    char *f = render(d, 80, 14, 0);
    golden("blocks_grad4_bucket1", f);
    free(f);
    f = render(d, 80, 14, 1);
    golden("blocks_grad4_bucket1_ascii", f);
    free(f);
    /* p shows the picture before the phase: bucket 1 still differs from rank to rank */
    ck_assert_int_ne(view_blocks_class.key(d, 'p') & UI_REDRAW, 0);
    f = render(d, 80, 14, 0);
    golden("blocks_grad4_before", f);
    ck_assert_ptr_nonnull(strstr(f, "showing: before"));
    ck_assert_ptr_nonnull(strstr(f, "local gradients"));
    free(f);
    view_blocks_class.free(d);
}
END_TEST

/* After the all-reduce the bucket's blocks are the same on every row; before it they are not. */
static void bucket_cells(const char *frame, int row_line, char *out, int first, int n)
{
    const char *p = frame;
    for (int i = 0; i < row_line && p; i++) {
        p = strchr(p, '\n');
        if (p)
            p++;
    }
    ck_assert_ptr_nonnull(p);
    /* label width 6 + 2: blocks start at column 8; 4 columns each (3 cells + gap) */
    for (int k = 0; k < n; k++)
        out[k] = p[8 + (first + k) * 4];
    out[n] = 0;
}

START_TEST(synced_rows_identical)
{
    void *d = grads_scene(1);
    char *f = render(d, 80, 14, 1);
    char rows[4][8];
    /* rows: line 3 + 2 per rank (the blocks line, then the owned marks) */
    for (int r = 0; r < 4; r++)
        bucket_cells(f, 3 + 2 * r, rows[r], 10, 6);
    for (int r = 1; r < 4; r++)
        ck_assert_str_eq(rows[r], rows[0]);
    free(f);
    view_blocks_class.key(d, 'p');
    f = render(d, 80, 14, 1);
    for (int r = 0; r < 4; r++)
        bucket_cells(f, 3 + 2 * r, rows[r], 10, 6);
    ck_assert(strcmp(rows[0], rows[1]) || strcmp(rows[1], rows[2]) || strcmp(rows[2], rows[3]));
    free(f);
    view_blocks_class.free(d);
}
END_TEST

START_TEST(pages_and_states)
{
    void *d = view_blocks_class.create();
    view_blocks_class.reset(d, 1);
    /* three sequences of KV pages, sent by rank 0 for explicit rows */
    for (int s = 0; s < 3; s++) {
        char name[32];
        snprintf(name, sizeof name, "blk:name:seq %d", s);
        send(d, 0, "blk:size", s, -1, 8, -1, NULL, 0);
        send(d, 0, name, s, -1, 0, -1, NULL, 0);
        double st[8], v[8];
        for (int i = 0; i < 8; i++) {
            st[i] = i < 2 ? BLK_SHARED : i < 5 + s ? BLK_USED : i == 7 ? BLK_EVICTED : BLK_FREE;
            v[i] = 0.25 * (i % 4 + 1);
        }
        for (int i = 0; i < 8; i += 4) {
            send(d, 0, "blk:state", s, i, 4, -1, st + i, 4);
            send(d, 0, "blk:val", s, i, 4, -1, v + i, 4);
        }
        send(d, 0, "blk:group:table", s, 0, 5 + s, 10 + s, NULL, 0);
    }
    send(d, 0, "blk:phase:prefix shared", -1, -1, 0, -1, NULL, 0);
    char *f = render(d, 60, 10, 1);
    golden("blocks_pages_ascii", f);
    ck_assert_ptr_nonnull(strstr(f, "seq 2"));
    ck_assert_ptr_nonnull(strstr(f, "x"));
    free(f);
    view_blocks_class.free(d);
}
END_TEST

START_TEST(empty_and_tiny)
{
    void *d = view_blocks_class.create();
    view_blocks_class.reset(d, 2);
    char *f = render(d, 70, 5, 0);
    golden("blocks_empty", f);
    free(f);
    view_blocks_class.free(d);
    d = grads_scene(0);
    for (int w = 1; w < 30; w += 3)
        for (int h = 1; h < 8; h += 2)
            free(render(d, w, h, w % 2));
    view_blocks_class.free(d);
}
END_TEST

START_TEST(dedupe_and_rows)
{
    void *d = view_blocks_class.create();
    view_blocks_class.reset(d, 3);
    double one = 1.0;
    send(d, 2, "blk:size", -1, -1, 3, -1, NULL, 0);
    send(d, 2, "blk:val", -1, 1, 1, -1, &one, 1);
    send(d, 1, "blk:clear", -1, -1, 0, 5, NULL, 0);     /* generation 5 clears once */
    char *f = render(d, 40, 8, 1);
    ck_assert_ptr_null(strstr(f, "rank 2"));
    free(f);
    send(d, 2, "blk:size", -1, -1, 3, -1, NULL, 0);
    send(d, 2, "blk:val", -1, 1, 1, -1, &one, 1);
    send(d, 0, "blk:clear", -1, -1, 0, 5, NULL, 0);     /* repeat from rank 0: ignored */
    f = render(d, 40, 8, 1);
    ck_assert_ptr_nonnull(strstr(f, "rank 2  000 ### 000"));
    free(f);
    send(d, 0, "blk:phase:one", -1, -1, 0, -1, NULL, 0);
    send(d, 1, "blk:phase:one", -1, -1, 0, -1, NULL, 0);
    view_blocks_class.key(d, 'p');
    f = render(d, 40, 8, 1);
    /* the repeat did not replace "before" with the phase's own picture: still rank 2 there */
    ck_assert_ptr_nonnull(strstr(f, "rank 2"));
    free(f);
    view_blocks_class.free(d);
}
END_TEST

static Suite *blocks_suite(void)
{
    Suite *s = suite_create("blocks");
    TCase *tc = tcase_create("blocks");
    tcase_add_test(tc, golden_gradients);
    tcase_add_test(tc, synced_rows_identical);
    tcase_add_test(tc, pages_and_states);
    tcase_add_test(tc, empty_and_tiny);
    tcase_add_test(tc, dedupe_and_rows);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(blocks_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
