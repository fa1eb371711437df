/* test_blocks.c - the blocks view from synthetic streams of typed memory records (mlsys.h's
 * mlsys_mem_info), read through the step model as the run screen reads them. Chapter 9's
 * block map: a paged KV cache whose sequences allocate, share a prefix, free into the cache,
 * are evicted and copy on write, with each sequence's block table, golden frames at several
 * steps (GENERATE=1 rewrites tests/frames/blocks_*.txt) and the same pictures rebuilt by
 * stepping back; chapter 5's gradients: buckets as owners, values as shades on one scale
 * for the whole run, a bucket in flight, rows equal after the all-reduce; and the view's
 * manners: its keys leave the arrows to the player, an empty view speaks to a learner, a
 * free block and a zero never share a glyph; the pool's line gives the pool's size, and the
 * step's line says why a serving engine's request let go of its blocks (preempted, finished). */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../../lab/ui/views/view.h"
#include "../../lab/ui/stepmodel.h"

#include "golden.h"

/* ---- a step model and the blocks view reading it ---- */

static stepmodel *sm;
static sm_cursor cur;
static void *bv;
static uint64_t now_t;

static void b_rewind(void *u) { (void)u; view_blocks_class.rewind(bv); }
static void b_event(void *u, const mlsys_event *e, int f) { (void)u; view_blocks_class.event(bv, e, f); }

static void fresh(int nranks)
{
    if (!sm)
        sm = sm_create();
    if (!bv)
        bv = view_blocks_class.create();
    sm_reset(sm, nranks);
    sm_cursor_fini(&cur);
    view_blocks_class.reset(bv, nranks);
    now_t = 1000;
}

static void done(void)
{
    view_blocks_class.free(bv);
    bv = NULL;
    sm_free(sm);
    sm = NULL;
    sm_cursor_fini(&cur);
}

/* One memory record of rank r. */
static void mem(int r, int pool, int op, int block, int owner, int refs, int index, int aux,
                uint64_t bytes, const char *label, double val)
{
    mlsys_event e;
    memset(&e, 0, sizeof e);
    e.kind = MLSYS_EV_MEM;
    e.rank = r;
    e.t_ns = now_t += 1000;
    e.coll = e.algo = e.op = -1;
    e.step = e.chunk = e.dtype = -1;
    e.mem = (mlsys_mem_info){(int16_t)pool, (int8_t)op, 0, block, owner, refs, index, aux};
    e.bytes = bytes;
    e.val[0] = val;
    if (label)
        snprintf(e.label, sizeof e.label, "%s", label);
    sm_event(sm, &e);
}

/* Every rank passes a step: a new frame. */
static void step(int nranks, int k, const char *label)
{
    for (int r = 0; r < nranks; r++) {
        mlsys_event e;
        memset(&e, 0, sizeof e);
        e.kind = MLSYS_EV_STEP;
        e.rank = r;
        e.t_ns = now_t += 1000;
        e.coll = e.algo = e.op = -1;
        e.peer = e.tag = e.chunk = e.dtype = -1;
        e.step = k;
        snprintf(e.label, sizeof e.label, "%s", label);
        sm_event(sm, &e);
    }
}

static char *render_at(int frame, int w, int h, int ascii, int attrs)
{
    sm_sink sk = {b_rewind, b_event, NULL, NULL};
    int k = frame >= 0 ? frame : sm_nframes(sm) - 1;
    sm_sync(sm, &cur, k, &sk);
    view_ctx ctx;
    memset(&ctx, 0, sizeof ctx);
    ctx.nranks = sm_nranks(sm);
    ctx.anim = 1.0;
    ctx.ascii = ascii;
    ctx.sm = sm;
    ctx.frame = k;
    grid *g = grid_create(w, h);
    grid_set_ascii(g, ascii);
    view_blocks_class.draw(bv, g, 0, 0, w, h, &ctx);
    char *s = attrs ? grid_dump_attrs(g) : grid_dump(g);
    grid_free(g);
    return s;
}

/* The text of line y of a frame. */
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

/* The line that starts with prefix (after blanks), or "" */
static void line_starting(const char *f, const char *prefix, char *out, size_t n)
{
    out[0] = 0;
    for (const char *p = f; p && *p;) {
        const char *q = p;
        while (*q == ' ')
            q++;
        if (!strncmp(q, prefix, strlen(prefix))) {
            size_t len = strcspn(p, "\n");
            snprintf(out, n, "%.*s", (int)len, p);
            return;
        }
        p = strchr(p, '\n');
        if (p)
            p++;
    }
}

/* The blocks of the map row labelled lab, as one character each ("32abc......."). */
static void map_row(const char *f, const char *lab, char *out, size_t n)
{
    char row[512];
    line_starting(f, lab, row, sizeof row);
    ck_assert_msg(row[0], "no row %s in\n%s", lab, f);
    size_t k = 0;
    for (const char *p = row + strlen(lab); *p && k + 1 < n; p++)
        if (*p != ' ')
            out[k++] = *p;
    out[k] = 0;
}

/* ---- chapter 9: a paged KV cache of 12 blocks of 4 tokens, three sequences ---- */

enum { KV = 0 };

static void kv_scene(void)
{
    fresh(1);
    mem(0, KV, MLSYS_MEM_POOL, -1, -1, 0, 4, 12, 4096, "KV cache", NAN);
    static const char *const names[] = {"req 0", "req 1", "req 2"};
    for (int s = 0; s < 3; s++)
        mem(0, KV, MLSYS_MEM_OWNER, -1, s, 0, -1, 0, 0, names[s], NAN);
    /* step 1: req 0 prefills 10 tokens: blocks 0 1 2 */
    step(1, 0, "iteration 1");
    for (int i = 0; i < 3; i++)
        mem(0, KV, MLSYS_MEM_ALLOC, i, 0, 1, i, 0, 4096, NULL, NAN);
    /* step 2: req 1 has the same 8-token prefix: shares 0 1, then its own block 3 */
    step(1, 1, "iteration 2");
    mem(0, KV, MLSYS_MEM_SHARE, 0, 1, 2, 0, 0, 4096, NULL, NAN);
    mem(0, KV, MLSYS_MEM_SHARE, 1, 1, 2, 1, 0, 4096, NULL, NAN);
    mem(0, KV, MLSYS_MEM_ALLOC, 3, 1, 1, 2, 0, 4096, NULL, NAN);
    /* req 2 shares the first block only and gets block 4 */
    mem(0, KV, MLSYS_MEM_SHARE, 0, 2, 3, 0, 0, 4096, NULL, NAN);
    mem(0, KV, MLSYS_MEM_ALLOC, 4, 2, 1, 1, 0, 4096, NULL, NAN);
    /* step 3: req 0 finishes: its blocks go back; block 2 (only its) stays cached */
    step(1, 2, "iteration 3");
    mem(0, KV, MLSYS_MEM_FREE, 0, 0, 2, -1, 0, 0, NULL, NAN);
    mem(0, KV, MLSYS_MEM_FREE, 1, 0, 1, -1, 0, 0, NULL, NAN);
    mlsys_event e;
    memset(&e, 0, sizeof e);
    e.kind = MLSYS_EV_MEM;
    e.rank = 0;
    e.t_ns = now_t += 1000;
    e.mem = (mlsys_mem_info){KV, MLSYS_MEM_FREE, 1, 2, 0, 0, -1, 0};
    e.val[0] = NAN;
    sm_event(sm, &e);
    /* step 4: req 2 writes into the shared block 0: copy on write into block 5 */
    step(1, 3, "iteration 4");
    mem(0, KV, MLSYS_MEM_COW, 0, 2, 1, 0, 5, 4096, NULL, NAN);
    /* step 5: the cache needs room: block 2 is evicted */
    step(1, 4, "iteration 5");
    mem(0, KV, MLSYS_MEM_EVICT, 2, -1, 0, -1, 0, 0, NULL, NAN);
    sm_finish(sm);
}

START_TEST(kv_block_map_goldens)
{
    kv_scene();
    static const char *const names[] = {"blocks_kv_step2_shared", "blocks_kv_step3_cached",
                                        "blocks_kv_step4_cow", "blocks_kv_step5_evicted"};
    for (int k = 2; k <= 5; k++) {
        char *f = render_at(k, 80, 16, 0, 0);
        golden(names[k - 2], f);
        free(f);
    }
    char *f = render_at(5, 120, 16, 1, 0);
    golden("blocks_kv_step5_wide_ascii", f);
    for (const char *p = f; *p; p++)
        ck_assert_msg((unsigned char)*p < 0x80, "non-ASCII byte in the --ascii frame");
    free(f);
    done();
}
END_TEST

/* What the map says at each step follows from the records, counted independently here. */
START_TEST(kv_counts_tables_and_marks)
{
    kv_scene();
    char *f = render_at(2, 80, 16, 1, 0), row[256], map[64];
    /* after step 2: block 0 held by 3 (refs 3), block 1 by 2, blocks 2 3 4 by one each */
    /* the pool's size: 12 blocks of 4 KiB */
    ck_assert_msg(strstr(f, "12 blocks x 4 tokens = 48 KiB, 5 used, 2 shared, 0 cached, 7 free"),
                  "%s", f);
    line_starting(f, "a req 0", row, sizeof row);
    ck_assert_msg(strstr(row, "| 0 1 2"), "req 0's table: %s", row);
    line_starting(f, "b req 1", row, sizeof row);
    ck_assert_msg(strstr(row, "| 0 1 3"), "req 1's table: %s", row);
    line_starting(f, "c req 2", row, sizeof row);
    ck_assert_msg(strstr(row, "| 0 4"), "req 2's table: %s", row);
    map_row(f, "KV cache ", map, sizeof map);
    ck_assert_str_eq(map, "32abc.......");
    free(f);
    /* step 3: req 0 gone; block 2 kept in the cache, blocks 0 1 still held by the others */
    f = render_at(3, 80, 16, 1, 0);
    map_row(f, "KV cache ", map, sizeof map);
    ck_assert_str_eq(map, "2bobc.......");
    ck_assert_ptr_null(strstr(f, "a req 0"));          /* no table left */
    ck_assert_msg(strstr(f, "4 used, 1 shared, 1 cached, 7 free"), "%s", f);
    free(f);
    /* step 4: copy on write: req 2's entry 0 now block 5, marked; block 0 back to refs 1 */
    f = render_at(4, 80, 16, 1, 0);
    line_starting(f, "c req 2", row, sizeof row);
    ck_assert_msg(strstr(row, "| 5* 4"), "req 2 after the copy: %s", row);
    map_row(f, "KV cache ", map, sizeof map);
    ck_assert_str_eq(map, "bbobcc......");
    free(f);
    /* step 5: the eviction shows as x in its step, and the copy's * is gone */
    f = render_at(5, 80, 16, 1, 0);
    map_row(f, "KV cache ", map, sizeof map);
    ck_assert_str_eq(map, "bbxbcc......");
    line_starting(f, "c req 2", row, sizeof row);
    ck_assert_msg(strstr(row, "| 5 4") && !strchr(row, '*'), "%s", row);
    free(f);
    done();
}
END_TEST

/* Stepping back rebuilds the earlier picture exactly: step 2 drawn after step 5 is step 2
 * drawn the first time. */
START_TEST(step_back_rebuilds)
{
    kv_scene();
    char *first = render_at(2, 100, 16, 0, 0);
    char *later = render_at(5, 100, 16, 0, 0);
    char *again = render_at(2, 100, 16, 0, 0);
    ck_assert_str_eq(first, again);
    ck_assert_str_ne(first, later);
    free(first);
    free(later);
    free(again);
    done();
}
END_TEST

/* ---- chapter 5: gradients in buckets on 4 ranks ---- */

static double grad(int r, int i)
{
    return ((i * 7 + r * 5) % 11 - 5) / 5.0;
}

static const int boff[4] = {16, 10, 4, 0}, blen[4] = {2, 6, 6, 4};

static void grads_scene(void)
{
    fresh(4);
    for (int r = 0; r < 4; r++) {
        mem(r, 0, MLSYS_MEM_POOL, -1, -1, 0, 0, 18, 4, "gradient", NAN);
        for (int k = 0; k < 4; k++) {
            char name[16];
            snprintf(name, sizeof name, "b%d", k);
            mem(r, 0, MLSYS_MEM_OWNER, -1, k, 0, -1, 0, 0, name, NAN);
            for (int i = 0; i < blen[k]; i++)
                mem(r, 0, MLSYS_MEM_ALLOC, boff[k] + i, k, 1, i, 0, 4, NULL, NAN);
        }
        for (int i = 0; i < 18; i++)
            mem(r, 0, MLSYS_MEM_WRITE, i, -1, 0, -1, 0, 4, NULL, grad(r, i));
    }
    /* bucket 1 in flight, then its average */
    step(4, 0, "bucket 1");
    for (int r = 0; r < 4; r++)
        for (int i = 10; i < 16; i++)
            mem(r, 0, MLSYS_MEM_BUSY, i, -1, 0, -1, 0, 4, NULL, NAN);
    step(4, 1, "bucket 1 done");
    for (int r = 0; r < 4; r++)
        for (int i = 10; i < 16; i++) {
            double s = 0;
            for (int q = 0; q < 4; q++)
                s += grad(q, i);
            mem(r, 0, MLSYS_MEM_WRITE, i, -1, 0, -1, 0, 4, NULL, s / 4);
        }
    sm_finish(sm);
}

/* The 18 blocks of rank r's row (ASCII: a shade glyph twice per block). */
static void row_blocks(const char *f, int r, char *out)
{
    char tag[16], map[64];
    snprintf(tag, sizeof tag, "r%d gradient ", r);
    map_row(f, tag, map, sizeof map);
    ck_assert_msg(strlen(map) == 36, "rank %d: '%s'", r, map);
    for (int k = 0; k < 18; k++)
        out[k] = map[2 * k];
    out[18] = 0;
}

START_TEST(gradients_buckets_and_scale)
{
    grads_scene();
    char *f = render_at(2, 80, 14, 1, 0);
    golden("blocks_grad4_averaged_ascii", f);
    char rows[4][20];
    for (int r = 0; r < 4; r++)
        row_blocks(f, r, rows[r]);
    /* after the average, bucket 1's blocks (10..15) are equal on every rank */
    for (int r = 1; r < 4; r++)
        ck_assert_msg(!memcmp(rows[r] + 10, rows[0] + 10, 6), "rank %d: %s vs %s", r, rows[r],
                      rows[0]);
    free(f);
    f = render_at(0, 80, 14, 1, 0);
    for (int r = 0; r < 4; r++)
        row_blocks(f, r, rows[r]);
    ck_assert(memcmp(rows[0] + 10, rows[1] + 10, 6) || memcmp(rows[1] + 10, rows[2] + 10, 6));
    /* one scale for the whole run: blocks no step touched keep their glyph (0..9) */
    char before[4][20];
    memcpy(before, rows, sizeof rows);
    free(f);
    f = render_at(2, 80, 14, 1, 0);
    for (int r = 0; r < 4; r++) {
        row_blocks(f, r, rows[r]);
        ck_assert_msg(!memcmp(rows[r], before[r], 10), "rank %d's untouched blocks changed: "
                      "%.10s then %.10s", r, before[r], rows[r]);
    }
    free(f);
    /* in flight at step 1: bucket 1's blocks are drawn reversed (style bit 8 = '8') */
    f = render_at(1, 80, 14, 1, 1);
    char *t = render_at(1, 80, 14, 1, 0), row[256], arow[256];
    const char *p = strstr(t, "r0 gradient");
    ck_assert_ptr_nonnull(p);
    int y = 0;
    for (const char *q = t; q < p; q++)
        y += *q == '\n';
    line_of(f, y, arow, sizeof arow);
    line_of(t, y, row, sizeof row);
    /* the label is 11 columns, a space, then a block every 3 columns */
    ck_assert_msg(strstr(row, "r0 gradient ") == row, "%s", row);
    ck_assert_msg(strchr("89abcdefghijklmnopqrstuv", arow[12 + 3 * 12]) != NULL,
                  "block 12 in flight not reversed: %s", arow);
    ck_assert_msg(strchr("89abcdefghijklmnopqrstuv", arow[12 + 3 * 2]) == NULL,
                  "block 2 not in flight but reversed: %s", arow);
    ck_assert_msg(strstr(t, "reversed: in flight"), "the legend names it: %s", t);
    free(f);
    free(t);
    done();
}
END_TEST

START_TEST(free_is_not_zero_and_keys)
{
    fresh(1);
    mem(0, 0, MLSYS_MEM_POOL, -1, -1, 0, 0, 4, 4, "shard", NAN);
    mem(0, 0, MLSYS_MEM_OWNER, -1, 0, 0, -1, 0, 0, "w1", NAN);
    mem(0, 0, MLSYS_MEM_ALLOC, 0, 0, 1, -1, 0, 4, NULL, NAN);
    mem(0, 0, MLSYS_MEM_WRITE, 0, -1, 0, -1, 0, 4, NULL, 0.0);
    mem(0, 0, MLSYS_MEM_ALLOC, 1, 0, 1, -1, 0, 4, NULL, NAN);
    mem(0, 0, MLSYS_MEM_WRITE, 1, -1, 0, -1, 0, 4, NULL, 1.0);
    for (int ascii = 0; ascii < 2; ascii++) {
        char *f = render_at(0, 60, 8, ascii, 0), row[256];
        line_starting(f, "shard", row, sizeof row);
        /* blocks 0 (value 0) and 2 (free) */
        uint32_t a, b;
        size_t i0 = 6, n = strlen(row);
        grid_utf8_decode(row + i0, n - i0, &a);
        size_t i2 = i0;
        for (int k = 0; k < 8 && i2 < n; k++) {     /* two blocks further: 8 columns */
            uint32_t cp;
            i2 += grid_utf8_decode(row + i2, n - i2, &cp);
        }
        grid_utf8_decode(row + i2, n - i2, &b);
        ck_assert_msg(a != b, "a zero and a free block share a glyph: '%s'", row);
        free(f);
    }
    /* the arrows are the player's; h/j/k/l are the view's */
    ck_assert_int_eq(view_blocks_class.key(bv, UI_KEY_LEFT), 0);
    ck_assert_int_eq(view_blocks_class.key(bv, UI_KEY_RIGHT), 0);
    ck_assert_int_ne(view_blocks_class.key(bv, 'l') & UI_HANDLED, 0);
    char *f = render_at(0, 60, 8, 1, 0);
    ck_assert_msg(strstr(f, "shard, block 1 (4 B): held by w1, value 1.0"), "%s", f);
    free(f);
    for (const ui_key_help *k = view_blocks_class.keys; k->key; k++)
        ck_assert_msg(!strstr(k->key, "arrow") && !strstr(k->key, "Left"), "%s", k->key);
    done();
}
END_TEST

START_TEST(empty_and_tiny)
{
    fresh(2);
    char *f = render_at(0, 90, 6, 0, 0);
    golden("blocks_empty", f);
    ck_assert_ptr_null(strstr(f, "blk:"));
    ck_assert_ptr_null(strstr(f, ".h"));
    free(f);
    done();
    kv_scene();
    for (int w = 1; w < 40; w += 3)
        for (int h = 1; h < 10; h += 2)
            free(render_at(5, w, h, w % 2, 0));
    done();
    grads_scene();
    for (int w = 1; w < 40; w += 3)
        for (int h = 1; h < 10; h += 2)
            free(render_at(2, w, h, w % 2, 0));
    done();
}
END_TEST

/* The paged cache reclaims a cached block and hands it out in one step (EVICT then ALLOC, as
 * core/llm/paged.c does): the step says so, though the block is in use again at its end. */
START_TEST(evicted_and_reused_in_one_step)
{
    fresh(1);
    mem(0, 0, MLSYS_MEM_POOL, -1, -1, 0, 4, 4, 1024, "kv cache", NAN);
    step(1, 0, "iteration 1");
    mem(0, 0, MLSYS_MEM_ALLOC, 0, 0, 1, 0, 0, 1024, NULL, NAN);
    mlsys_event e;
    memset(&e, 0, sizeof e);
    e.kind = MLSYS_EV_MEM;
    e.t_ns = now_t += 1000;
    e.mem = (mlsys_mem_info){0, MLSYS_MEM_FREE, 1, 0, 0, 0, -1, 0};
    e.val[0] = NAN;
    sm_event(sm, &e);
    step(1, 1, "iteration 2");
    mem(0, 0, MLSYS_MEM_EVICT, 0, -1, 0, -1, 0, 1024, NULL, NAN);
    mem(0, 0, MLSYS_MEM_ALLOC, 0, 1, 1, 0, 0, 1024, NULL, NAN);
    sm_finish(sm);
    char *f = render_at(1, 80, 10, 1, 0);
    ck_assert_msg(strstr(f, "kv cache, block 0 (1 KiB): cached"), "%s", f);
    free(f);
    f = render_at(2, 100, 10, 1, 0);
    ck_assert_msg(strstr(f, "block 0 (1 KiB): held by owner 1 (evicted from the cache in this "
                            "step"),
                  "%s", f);
    free(f);
    done();
}
END_TEST

/* Chapter 9's engine at scale: a block shared by twelve requests shows its count in two
 * digits and its line names them all (four by name, then how many more); the line above it
 * says what happened in the step shown (evictions with their blocks, a copy on write with its
 * owner), and nothing in a step where nothing did. */
static void free_cached(int block, int owner)
{
    mlsys_event e;
    memset(&e, 0, sizeof e);
    e.kind = MLSYS_EV_MEM;
    e.t_ns = now_t += 1000;
    e.mem = (mlsys_mem_info){0, MLSYS_MEM_FREE, 1, block, owner, 0, -1, 0};
    e.val[0] = NAN;
    sm_event(sm, &e);
}

START_TEST(many_owners_and_the_step_line)
{
    fresh(1);
    mem(0, 0, MLSYS_MEM_POOL, -1, -1, 0, 16, 64, 1024, "kv cache", NAN);
    for (int o = 0; o < 12; o++) {
        char nm[16];
        snprintf(nm, sizeof nm, "req %d", o);
        mem(0, 0, MLSYS_MEM_OWNER, -1, o, 0, -1, 0, 0, nm, NAN);
    }
    step(1, 1, "engine step 1");
    mem(0, 0, MLSYS_MEM_ALLOC, 0, 0, 1, 0, 0, 1024, NULL, NAN);
    for (int o = 1; o < 12; o++)
        mem(0, 0, MLSYS_MEM_SHARE, 0, o, o + 1, 0, 0, 1024, NULL, NAN);
    mem(0, 0, MLSYS_MEM_ALLOC, 5, 0, 1, 1, 0, 1024, NULL, NAN);
    mem(0, 0, MLSYS_MEM_ALLOC, 6, 1, 1, 1, 0, 1024, NULL, NAN);
    free_cached(5, 0);
    free_cached(6, 1);
    step(1, 2, "engine step 2");
    mem(0, 0, MLSYS_MEM_EVICT, 5, -1, 0, -1, 0, 1024, NULL, NAN);
    mem(0, 0, MLSYS_MEM_EVICT, 6, -1, 0, -1, 0, 1024, NULL, NAN);
    mem(0, 0, MLSYS_MEM_COW, 0, 1, 11, 0, 9, 1024, NULL, NAN);
    step(1, 3, "engine step 3");
    sm_finish(sm);
    char *f = render_at(1, 99, 24, 1, 0);
    ck_assert_msg(strstr(f, " 12 "), "a count of 12 in two digits: %s", f);
    ck_assert_msg(strstr(f, "block 0 (1 KiB): shared by req 0, req 1, req 2 and 9 more "
                            "(12 references)"), "%s", f);
    ck_assert_msg(strstr(f, "in this step: 3 allocated, 11 shared (prefix hits), 2 owners let "
                            "go of 2 blocks (2 kept cached)"), "%s", f);
    free(f);
    /* the shared block's two cells: the colours of its first two owners (req 0, req 1) */
    sm_sink sk = {b_rewind, b_event, NULL, NULL};
    sm_sync(sm, &cur, 1, &sk);
    view_ctx ctx = {.nranks = 1, .anim = 1.0, .ascii = 1, .sm = sm, .frame = 1};
    grid *g = grid_create(99, 24);
    view_blocks_class.draw(bv, g, 0, 0, 99, 24, &ctx);
    int found = 0;
    for (int y = 0; y < 24 && !found; y++) {
        char row[256];
        grid_row_text(g, y, row, sizeof row);
        const char *p = strstr(row, " 12 ");
        if (!p || strncmp(row, "  ", 2))
            continue;
        int x = (int)(p - row) + 1;
        ck_assert_int_eq(GRID_PAIR_OF(grid_get(g, x, y)->attr), UI_PAIR_CELL0 + 0);
        ck_assert_int_eq(GRID_PAIR_OF(grid_get(g, x + 1, y)->attr), UI_PAIR_CELL0 + 1);
        found = 1;
    }
    ck_assert_msg(found, "no map row with the count 12");
    grid_free(g);
    f = render_at(2, 99, 24, 1, 0);
    ck_assert_msg(strstr(f, "in this step: 2 evicted (blocks 5, 6), copy on write: req 1's "
                            "block 0 copied to 9"), "%s", f);
    ck_assert_msg(strstr(f, "(11 references)"), "%s", f);
    char row[256];
    line_starting(f, "b req 1 ", row, sizeof row);
    ck_assert_msg(strstr(row, "9*"), "req 1's table shows the copy: %s", row);
    free(f);
    f = render_at(3, 99, 24, 1, 0);
    ck_assert_msg(!strstr(f, "in this step:"), "nothing happened in step 3: %s", f);
    free(f);
    done();
}
END_TEST

/* A pool described again starts afresh; with no blocks and no gauge it leaves the picture. */
START_TEST(pool_described_again)
{
    fresh(1);
    mem(0, 0, MLSYS_MEM_POOL, -1, -1, 0, 0, 3, 4, "buckets", NAN);
    mem(0, 0, MLSYS_MEM_ALLOC, 1, 0, 1, -1, 0, 4, NULL, NAN);
    mem(0, 1, MLSYS_MEM_POOL, -1, -1, 0, 0, 2, 4, "params", NAN);
    char *f = render_at(0, 60, 8, 1, 0);
    ck_assert_ptr_nonnull(strstr(f, "buckets"));
    free(f);
    mem(0, 0, MLSYS_MEM_POOL, -1, -1, 0, 0, 0, 0, "buckets", NAN);
    mem(0, 2, MLSYS_MEM_USAGE, -1, -1, 0, -1, 0, 3 << 20, "temporary", NAN);
    f = render_at(0, 60, 8, 1, 0);
    ck_assert_msg(!strstr(f, "buckets") && strstr(f, "params") && strstr(f, "temporary") &&
                  strstr(f, "3 MiB"), "%s", f);
    free(f);
    done();
}
END_TEST

/* A serving engine's request moves (core/llm/engine.h's roles: 2 scheduler, 1 queue, 3 model,
 * 0 clients) say why a request let go of its blocks: preempted, or finished. */
static void request_moves(int from, int to, int seq, int count)
{
    mlsys_event e;
    memset(&e, 0, sizeof e);
    e.kind = MLSYS_EV_FLOW;
    e.t_ns = now_t += 1000;
    e.coll = e.algo = e.op = -1;
    e.flow = (mlsys_flow_info){(int16_t)from, (int16_t)to, MLSYS_FLOW_REQUESTS, -1, count, 0,
                               seq, 0};
    sm_event(sm, &e);
}

START_TEST(why_an_owner_let_go)
{
    fresh(1);
    mem(0, 0, MLSYS_MEM_POOL, -1, -1, 0, 16, 8, 40960, "kv cache", NAN);
    for (int o = 0; o < 4; o++) {
        char nm[16];
        snprintf(nm, sizeof nm, "req %d", o);
        mem(0, 0, MLSYS_MEM_OWNER, -1, o, 0, -1, 0, 0, nm, NAN);
    }
    step(1, 1, "engine step 1");
    for (int o = 0; o < 4; o++) {
        mem(0, 0, MLSYS_MEM_ALLOC, 2 * o, o, 1, 0, 0, 40960, NULL, NAN);
        mem(0, 0, MLSYS_MEM_ALLOC, 2 * o + 1, o, 1, 1, 0, 40960, NULL, NAN);
    }
    /* step 2: req 3 is preempted (the move may come before its blocks go) */
    step(1, 2, "engine step 2");
    request_moves(2, 1, 3, 0);
    free_cached(6, 3);
    mem(0, 0, MLSYS_MEM_FREE, 7, 3, 0, -1, 0, 40960, NULL, NAN);
    /* step 3: req 0 finishes (the move after its blocks) */
    step(1, 3, "engine step 3");
    free_cached(0, 0);
    free_cached(1, 0);
    request_moves(3, 0, 0, 20);
    /* step 4: req 1 finishes and req 2 is preempted */
    step(1, 4, "engine step 4");
    free_cached(2, 1);
    request_moves(3, 0, 1, 20);
    request_moves(2, 1, 2, 0);
    free_cached(4, 2);
    free_cached(5, 2);
    /* step 5: req 3 comes back and lets go again, with no move said: no reason given */
    step(1, 5, "engine step 5");
    mem(0, 0, MLSYS_MEM_ALLOC, 6, 3, 1, 0, 0, 40960, NULL, NAN);
    free_cached(6, 3);
    step(1, 6, "engine step 6");
    sm_finish(sm);
    char *f = render_at(2, 100, 12, 1, 0);
    ck_assert_msg(strstr(f, "in this step: req 3 was preempted and let go of 2 blocks (1 kept "
                            "cached, 1 freed)"), "%s", f);
    /* 8 blocks of 40 KiB */
    ck_assert_msg(strstr(f, "kv cache: 8 blocks x 16 tokens = 320 KiB, 6 used"), "%s", f);
    free(f);
    f = render_at(3, 100, 12, 1, 0);
    ck_assert_msg(strstr(f, "in this step: req 0 finished and let go of 2 blocks (2 kept "
                            "cached)"), "%s", f);
    free(f);
    f = render_at(4, 100, 12, 1, 0);
    ck_assert_msg(strstr(f, "in this step: 2 owners let go of 3 blocks (req 2 preempted; 3 kept "
                            "cached)"), "%s", f);
    free(f);
    f = render_at(5, 100, 12, 1, 0);
    ck_assert_msg(strstr(f, "in this step: 1 allocated, req 3 let go of 1 block (1 kept "
                            "cached)"), "%s", f);
    free(f);
    /* narrow: the line goes on over the blank line above it, nothing cut */
    f = render_at(2, 60, 18, 1, 0);
    ck_assert_msg(strstr(f, "in this step: req 3 was preempted and let go of 2 blocks (1\n") &&
                  strstr(f, "  kept cached, 1 freed)"), "%s", f);
    free(f);
    /* stepping back says it again: the reasons are rebuilt with the frame */
    f = render_at(2, 100, 12, 1, 0);
    ck_assert_msg(strstr(f, "req 3 was preempted and let go of 2 blocks"), "%s", f);
    free(f);
    done();
}
END_TEST

static Suite *blocks_suite(void)
{
    Suite *s = suite_create("blocks");
    TCase *tc = tcase_create("blocks");
    tcase_add_test(tc, kv_block_map_goldens);
    tcase_add_test(tc, kv_counts_tables_and_marks);
    tcase_add_test(tc, step_back_rebuilds);
    tcase_add_test(tc, gradients_buckets_and_scale);
    tcase_add_test(tc, free_is_not_zero_and_keys);
    tcase_add_test(tc, empty_and_tiny);
    tcase_add_test(tc, pool_described_again);
    tcase_add_test(tc, evicted_and_reused_in_one_step);
    tcase_add_test(tc, many_owners_and_the_step_line);
    tcase_add_test(tc, why_an_owner_let_go);
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
