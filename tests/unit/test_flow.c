/* test_flow.c - the flow view from synthetic streams of typed flow and memory records
 * (mlsys.h's mlsys_flow_info, and USAGE gauges with a role as owner) read through the step
 * model: one RLHF iteration of four roles, a phase per step (generate -> score -> advantage
 * -> train -> sync), batches between roles, each role's memory, reward and KL curves beside;
 * and a server's queue, scheduler and model. Golden frames in tests/frames/flow_*.txt
 * (GENERATE=1 rewrites them) and properties that need no golden: the phase shown is the
 * step's, a move shows in its own step only, gauges say the bytes that were sent. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../../lab/ui/views/view.h"
#include "../../lab/ui/stepmodel.h"
#include "../../core/trace_values.h"

#include "golden.h"
#include "run_bin.h"
#include "../../core/trace.h"

static stepmodel *sm;
static sm_cursor cur;
static void *fv;
static uint64_t now_t;

static void f_rewind(void *u) { (void)u; view_flow_class.rewind(fv); }
static void f_event(void *u, const mlsys_event *e, int f) { (void)u; view_flow_class.event(fv, e, f); }

static void fresh(int nranks)
{
    if (!sm)
        sm = sm_create();
    if (!fv)
        fv = view_flow_class.create();
    sm_reset(sm, nranks);
    sm_cursor_fini(&cur);
    view_flow_class.reset(fv, nranks);
    now_t = 1000;
}

static void done(void)
{
    view_flow_class.free(fv);
    fv = NULL;
    sm_free(sm);
    sm = NULL;
    sm_cursor_fini(&cur);
}

static mlsys_event base(int kind, int rank)
{
    mlsys_event e;
    memset(&e, 0, sizeof e);
    e.kind = (int16_t)kind;
    e.rank = rank;
    e.t_ns = now_t += 1000;
    e.coll = e.algo = e.op = -1;
    e.step = e.chunk = e.dtype = -1;
    e.val[0] = NAN;
    return e;
}

static void flow(int from, int to, int what, int phase, int count, int version, uint64_t bytes,
                 const char *label, double val)
{
    mlsys_event e = base(MLSYS_EV_FLOW, 0);
    e.flow = (mlsys_flow_info){(int16_t)from, (int16_t)to, (int16_t)what, (int16_t)phase, count,
                               version, -1, 0};
    e.bytes = bytes;
    e.val[0] = val;
    if (label)
        snprintf(e.label, sizeof e.label, "%s", label);
    sm_event(sm, &e);
}

static void usage(int pool, int role, uint64_t bytes, const char *name)
{
    mlsys_event e = base(MLSYS_EV_MEM, 0);
    e.mem = (mlsys_mem_info){(int16_t)pool, MLSYS_MEM_USAGE, 0, -1, role, 0, -1, 0};
    e.bytes = bytes;
    snprintf(e.label, sizeof e.label, "%s", name);
    sm_event(sm, &e);
}

static void point(const char *series, double x, double y)
{
    mlsys_event e = base(MLSYS_EV_MARK, 0);
    snprintf(e.label, sizeof e.label, "%s%s", MLSYS_MARK_PLOT, series);
    e.val[0] = x;
    e.val[1] = y;
    sm_event(sm, &e);
}

static void step(int k, const char *label)
{
    mlsys_event e = base(MLSYS_EV_STEP, 0);
    e.peer = e.tag = -1;
    e.step = k;
    snprintf(e.label, sizeof e.label, "%s", label);
    sm_event(sm, &e);
}

static char *render_at(int frame, int w, int h, int ascii, double anim)
{
    sm_sink sk = {f_rewind, f_event, NULL, NULL};
    int k = frame >= 0 ? frame : sm_nframes(sm) - 1;
    sm_sync(sm, &cur, k, &sk);
    view_ctx ctx;
    memset(&ctx, 0, sizeof ctx);
    ctx.nranks = sm_nranks(sm);
    ctx.anim = anim;
    ctx.ascii = ascii;
    ctx.sm = sm;
    ctx.frame = k;
    grid *g = grid_create(w, h);
    grid_set_ascii(g, ascii);
    view_flow_class.draw(fv, g, 0, 0, w, h, &ctx);
    char *s = grid_dump(g);
    grid_free(g);
    return s;
}

enum { ACTOR, REF, REWARD, CRITIC, GEN };
enum { P_GEN, P_SCORE, P_ADV, P_TRAIN, P_SYNC };

static void usage_on(int rank, int pool, int role, uint64_t bytes, const char *name)
{
    mlsys_event e = base(MLSYS_EV_MEM, rank);
    e.mem = (mlsys_mem_info){(int16_t)pool, MLSYS_MEM_USAGE, 0, -1, role, 0, -1, 0};
    e.bytes = bytes;
    snprintf(e.label, sizeof e.label, "%s", name);
    sm_event(sm, &e);
}

static void step_on(int rank, int k, const char *label)
{
    mlsys_event e = base(MLSYS_EV_STEP, rank);
    e.peer = e.tag = -1;
    e.step = k;
    snprintf(e.label, sizeof e.label, "%s", label);
    sm_event(sm, &e);
}

/* Does one line of the frame hold both a and b (in that order)? */
static int line_has(const char *frame, const char *a, const char *b)
{
    for (const char *p = strstr(frame, a); p; p = strstr(p + 1, a)) {
        const char *nl = strchr(p, '\n'), *q = strstr(p, b);
        if (q && (!nl || q < nl))
            return 1;
    }
    return 0;
}

/* In an --ascii frame, the ranks written on the bottom border of the box whose title is name
 * ("r0-1"); "" when none, "?" when there is no such box. */
static void box_ranks(const char *frame, const char *name, char *out, size_t cap)
{
    char want[48];
    snprintf(want, sizeof want, "+ %s ", name);
    snprintf(out, cap, "?");
    const char *hit = strstr(frame, want);
    if (!hit)
        return;
    const char *line = hit;
    while (line > frame && line[-1] != '\n')
        line--;
    size_t c = (size_t)(hit - line);
    const char *end = strchr(hit + 1, '+');
    const char *eol = strchr(hit, '\n');
    if (!end || (eol && end > eol))
        return;
    size_t e = (size_t)(end - line);
    for (const char *l = eol; l && *l; l = strchr(l + 1, '\n')) {
        const char *row = l + 1;
        const char *nl = strchr(row, '\n');
        size_t len = nl ? (size_t)(nl - row) : strlen(row);
        if (len > e && row[c] == '+' && row[e] == '+') {
            size_t a = c + 1, b = e;        /* the border's text, its - = and spaces cut */
            while (a < b && strchr("-= ", row[a]))
                a++;
            while (b > a && strchr("-= ", row[b - 1]))
                b--;
            snprintf(out, cap, "%.*s", (int)(b - a), row + a);
            return;
        }
    }
}

static void block_rec(int rank, int pool, int op, int block, int owner, int refs, int aux,
                      uint64_t bytes)
{
    mlsys_event e = base(MLSYS_EV_MEM, rank);
    e.mem = (mlsys_mem_info){(int16_t)pool, (int8_t)op, 0, block, owner, refs, -1, aux};
    e.bytes = bytes;
    if (op == MLSYS_MEM_POOL) {         /* as the paged cache names it, 4 tokens a block */
        snprintf(e.label, sizeof e.label, "kv cache");
        e.mem.index = 4;
    }
    sm_event(sm, &e);
}

/* Two iterations of the RLHF loop as ch13/rlhf-loop emits them under split placement on two
 * ranks: rank 0 generates, rank 1 holds the four models. The lab names its roles and its
 * phases first; every rank passes a gate per phase; the generator's paged KV cache (a pool of
 * blocks) fills and empties within generate (two different amounts, one per iteration, a
 * block shared by two sequences); the records of the roles come in the ranks' order (the
 * generator's first), the boxes in the order of the roles' ids. grpo: no critic, its
 * advantages say so, and its prompts are prefilled once for 4 answers each. */
static void rlhf_scene_opts(int grpo)
{
    fresh(2);
    static const char *const roles[] = {"actor", "reference", "reward", "critic", "generator"};
    static const char *const phases[] = {"generate", "score", "advantage", "train", "sync"};
    usage_on(0, 16, GEN, 4u << 20, "weights");
    block_rec(0, 19, MLSYS_MEM_POOL, -1, GEN, 0, 32, 10u << 10);
    for (int r = 0; r < 5; r++)
        if (!(grpo && r == CRITIC))
            flow(r, -1, MLSYS_FLOW_ROLE, -1, 0, 0, 0, roles[r], NAN);
    for (int p = 0; p < 5; p++)
        flow(-1, -1, MLSYS_FLOW_PHASE, p, 0, -1, 0, phases[p], NAN);
    usage_on(1, 0, ACTOR, 8u << 20, "weights+grads");
    usage_on(1, 1, ACTOR, 8u << 20, "optimizer");
    usage_on(1, 4, REF, 4u << 20, "weights");
    usage_on(1, 8, REWARD, 512u << 10, "weights");
    if (!grpo)
        usage_on(1, 12, CRITIC, 8u << 20, "weights+grads");
    int k = 0;
    for (int it = 1; it <= 2; it++) {
        for (int p = 0; p < 5; p++) {
            char lb[32];
            snprintf(lb, sizeof lb, "%s %d", phases[p], it);
            step_on(0, k, lb);
            step_on(1, k, lb);
            k++;
            flow(-1, -1, MLSYS_FLOW_PHASE, p, 0, it, 0, phases[p], NAN);
            switch (p) {
            case P_GEN:
                for (int b = 0; b < 8 + 2 * it; b++)
                    block_rec(0, 19, MLSYS_MEM_ALLOC, b, 100 + b, 1, 0, 10u << 10);
                block_rec(0, 19, MLSYS_MEM_SHARE, 0, 99, 2, 0, 10u << 10);
                block_rec(0, 19, MLSYS_MEM_FREE, 0, 99, 1, 0, 10u << 10);
                for (int b = 8 + 2 * it - 1; b >= 0; b--)
                    block_rec(0, 19, MLSYS_MEM_FREE, b, 100 + b, 0, 0, 10u << 10);
                flow(GEN, GEN, MLSYS_FLOW_TOKENS, p, grpo ? 2 : 8, it, 0,
                     grpo ? "prefills, 4 forks each" : "prefills", NAN);
                flow(GEN, ACTOR, MLSYS_FLOW_TOKENS, p, 8, it, 8 * 4 * 4, NULL, NAN);
                break;
            case P_SCORE:
                usage_on(1, 2, ACTOR, 3u << 20, "activations");
                flow(ACTOR, REF, MLSYS_FLOW_TOKENS, p, 8, it, 8 * 10 * 4, NULL, NAN);
                flow(ACTOR, REWARD, MLSYS_FLOW_TOKENS, p, 8, it, 0, "lines", NAN);
                if (!grpo)
                    flow(ACTOR, CRITIC, MLSYS_FLOW_TOKENS, p, 8, it, 8 * 10 * 4, NULL, NAN);
                flow(REF, ACTOR, MLSYS_FLOW_LOGPROBS, p, 27, it, 27 * 4, "log-probs, KL",
                     0.5 * (it - 1));
                flow(REWARD, ACTOR, MLSYS_FLOW_REWARDS, p, 8, it, 8 * 4, "scores", 0.25 * it);
                if (!grpo)
                    flow(CRITIC, ACTOR, MLSYS_FLOW_VALUES, p, 27, it, 27 * 4, NULL, NAN);
                usage_on(1, 2, ACTOR, 0, "activations");
                break;
            case P_ADV:
                if (grpo)
                    flow(ACTOR, ACTOR, MLSYS_FLOW_ADVANTAGES, p, 8, it, 8 * 4,
                         "advantages by group, no critic", NAN);
                else
                    flow(ACTOR, ACTOR, MLSYS_FLOW_ADVANTAGES, p, 27, it, 27 * 4,
                         "advantages by GAE", NAN);
                break;
            case P_TRAIN:
                usage_on(1, 2, ACTOR, 5u << 20, "activations");
                if (!grpo)
                    flow(ACTOR, CRITIC, MLSYS_FLOW_VALUES, p, 27, it, 27 * 4, "returns", NAN);
                flow(ACTOR, ACTOR, MLSYS_FLOW_GRADIENTS, p, 4, it, 4u << 20, "updates", NAN);
                usage_on(1, 2, ACTOR, 0, "activations");
                break;
            case P_SYNC:
                flow(ACTOR, GEN, MLSYS_FLOW_WEIGHTS, p, 47, it, 4u << 20, NULL, NAN);
                point("score - beta*KL", it, 0.25 * it);
                point("KL", it, 0.01 * it);
                break;
            }
        }
    }
    sm_finish(sm);
}

static void rlhf_scene(void)
{
    rlhf_scene_opts(0);
}

START_TEST(rlhf_goldens)
{
    rlhf_scene();
    /* frames: 0 before, then generate=1, score=2, advantage=3, train=4, sync=5; again 6.. */
    char *f = render_at(7, 120, 30, 0, 1.0);        /* iteration 2, score */
    golden("flow_rlhf_score_120", f);
    free(f);
    f = render_at(7, 80, 24, 1, 1.0);
    golden("flow_rlhf_score_80_ascii", f);
    for (const char *p = f; *p; p++)
        ck_assert_msg((unsigned char)*p < 0x80, "non-ASCII byte in the --ascii frame");
    free(f);
    f = render_at(8, 120, 30, 0, 0.5);               /* advantage, the packets moving */
    golden("flow_rlhf_advantage_moving", f);
    free(f);
    f = render_at(6, 120, 30, 0, 1.0);               /* iteration 2, generate */
    golden("flow_rlhf_generate_120", f);
    free(f);
    done();
}
END_TEST

START_TEST(rlhf_properties)
{
    rlhf_scene();
    static const char *const phases[] = {"generate", "score", "advantage", "train", "sync"};
    /* the moves of each phase, as the loop emits them, in words under the chart */
    static const char *const says[5][3] = {
        {"generator → actor: 8 sequences", "generator → generator: 8 prefills", NULL},
        {"reference → actor: 27 log-probs, KL", "reward → actor: 8 scores = ",
         "critic → actor: 27 values"},
        {"actor → actor: 27 advantages by GAE", NULL, NULL},
        {"actor → critic: 27 returns", "actor → actor: 4 updates", NULL},
        {"actor → generator: weights v", NULL, NULL},
    };
    for (int k = 1; k <= 10; k++) {
        char *f = render_at(k, 120, 30, 0, 1.0), want[40];
        /* the phase of the step is the one marked, and the iteration is the step's */
        snprintf(want, sizeof want, "[%s]", phases[(k - 1) % 5]);
        ck_assert_msg(strstr(f, want), "step %d: %s not marked in\n%s", k, want, f);
        snprintf(want, sizeof want, "iteration %d", (k - 1) / 5 + 1);
        ck_assert_msg(strstr(f, want), "step %d: no '%s' in\n%s", k, want, f);
        /* every move of the phase is drawn in its frame, and none of another phase's */
        for (int p = 0; p < 5; p++)
            for (int j = 0; j < 3 && says[p][j]; j++)
                ck_assert_msg(!!strstr(f, says[p][j]) == (p == (k - 1) % 5),
                              "step %d: '%s' %s\n%s", k, says[p][j],
                              p == (k - 1) % 5 ? "missing" : "from another phase", f);
        free(f);
        /* which rank holds which role: the generator rank 0, the four models rank 1 */
        f = render_at(k, 120, 30, 1, 1.0);
        static const char *const who[5][2] = {{"generator", "r0"}, {"actor", "r1"},
                                              {"reference", "r1"}, {"reward", "r1"},
                                              {"critic", "r1"}};
        for (int j = 0; j < 5; j++) {
            char rs[32];
            box_ranks(f, who[j][0], rs, sizeof rs);
            ck_assert_msg(!strcmp(rs, who[j][1]), "step %d: %s on '%s', not %s\n%s", k,
                          who[j][0], rs, who[j][1], f);
        }
        free(f);
    }
    /* the reward the lab put on the batch */
    char *f = render_at(7, 120, 30, 1, 1.0);
    ck_assert_msg(strstr(f, "8 scores = 0.5"), "%s", f);
    free(f);
    /* the KV cache: the most it held during generate (it is empty again at the phase's end),
     * each iteration its own amount, the shared block counted once; 0 in the other phases,
     * and before the first (the pool is there, empty) */
    f = render_at(1, 120, 30, 1, 1.0);
    ck_assert_msg(line_has(f, "kv cache", "100 KiB") && strstr(f, " 10 of 32 blocks"), "%s", f);
    free(f);
    f = render_at(6, 120, 30, 1, 1.0);
    ck_assert_msg(line_has(f, "kv cache", "120 KiB") && strstr(f, " 12 of 32 blocks"), "%s", f);
    free(f);
    for (int k = 0; k <= 7; k += 7) {
        f = render_at(k, 120, 30, 1, 1.0);
        ck_assert_msg(line_has(f, "kv cache", " 0 B") && strstr(f, " 0 of 32 blocks"), "%s", f);
        free(f);
    }
    /* the lab named its phases first: all five in order from the start, none current */
    f = render_at(0, 120, 30, 0, 1.0);
    ck_assert_msg(strstr(f, "generate → score → advantage → train → sync") && !strstr(f, "["),
                  "%s", f);
    free(f);
    /* the actor's activations: 3 MiB at their most while scoring, 5 MiB while training */
    f = render_at(2, 120, 30, 1, 1.0);
    ck_assert_msg(strstr(f, "3 MiB") && !strstr(f, "5 MiB"), "%s", f);
    free(f);
    f = render_at(4, 120, 30, 1, 1.0);
    ck_assert_msg(strstr(f, "5 MiB"), "%s", f);
    free(f);
    /* the curves beside: after both syncs */
    f = render_at(10, 120, 30, 1, 1.0);
    ck_assert_msg(strstr(f, "score - beta*KL 0.5") && strstr(f, "KL 0.02"), "%s", f);
    free(f);
    /* stepping back rebuilds: step 2 after step 10 is step 2 */
    char *a = render_at(2, 100, 24, 0, 1.0);
    char *b = render_at(10, 100, 24, 0, 1.0);
    char *c = render_at(2, 100, 24, 0, 1.0);
    ck_assert_str_eq(a, c);
    ck_assert_str_ne(a, b);
    free(a);
    free(b);
    free(c);
    done();
}
END_TEST

/* The boxes follow the roles' ids whichever record came first, and a line names its ranks
 * when they held different amounts (colocated: both ranks hold every role). */
START_TEST(rlhf_ranks_and_order)
{
    fresh(2);
    usage_on(1, 19, GEN, 300u << 10, "kv cache");   /* a rank's record before any name */
    usage_on(0, 19, GEN, 200u << 10, "kv cache");
    usage_on(0, 16, GEN, 4u << 20, "weights");
    usage_on(1, 16, GEN, 4u << 20, "weights");
    flow(GEN, -1, MLSYS_FLOW_ROLE, -1, 0, 0, 0, "generator", NAN);
    flow(ACTOR, -1, MLSYS_FLOW_ROLE, -1, 0, 0, 0, "actor", NAN);
    usage_on(0, 0, ACTOR, 8u << 20, "weights+grads");
    usage_on(1, 0, ACTOR, 8u << 20, "weights+grads");
    step_on(0, 0, "generate 1");
    step_on(1, 0, "generate 1");
    flow(-1, -1, MLSYS_FLOW_PHASE, P_GEN, 0, 1, 0, "generate", NAN);
    sm_finish(sm);
    char *f = render_at(1, 120, 20, 1, 1.0), ra[32], rg[32];
    const char *a = strstr(f, "+ actor "), *g = strstr(f, "+ generator ");
    ck_assert_msg(a && g && a < g, "the actor (id 0) first:\n%s", f);
    box_ranks(f, "actor", ra, sizeof ra);
    box_ranks(f, "generator", rg, sizeof rg);
    ck_assert_msg(!strcmp(ra, "r0-1") && !strcmp(rg, "r0-1"), "%s / %s\n%s", ra, rg, f);
    ck_assert_msg(line_has(f, "r0 kv c", "200 KiB") && line_has(f, "r1 kv c", "300 KiB"),
                  "%s", f);
    /* a box's lines in the order of their pools (the lab's), then of their ranks */
    const char *w = strstr(f, "weights"), *k0 = strstr(f, "r0 kv"), *k1 = strstr(f, "r1 kv");
    ck_assert_msg(w && k0 && k1 && strchr(w, '\n') < k0 && strchr(k0, '\n') < k1, "%s", f);
    ck_assert_msg(!strstr(f, "r0 weights") && !strstr(f, "r0-1 weights"), "%s", f);
    free(f);
    /* one rank: no rank names */
    done();
    fresh(1);
    flow(ACTOR, -1, MLSYS_FLOW_ROLE, -1, 0, 0, 0, "actor", NAN);
    usage_on(0, 0, ACTOR, 8u << 20, "weights+grads");
    sm_finish(sm);
    f = render_at(0, 100, 12, 1, 1.0);
    box_ranks(f, "actor", ra, sizeof ra);
    ck_assert_msg(!strcmp(ra, ""), "'%s' on one rank:\n%s", ra, f);
    free(f);
    done();
}
END_TEST

/* A paged KV cache whose POOL record names the generator: the box shows it from that record
 * on, counts the blocks its block records leave referenced (a shared block once, a copy on
 * write one more) and shows the most of them during the frame, with their bytes. */
START_TEST(block_pool_counts_blocks)
{
    fresh(1);
    flow(GEN, -1, MLSYS_FLOW_ROLE, -1, 0, 0, 0, "generator", NAN);
    const uint64_t bb = 16u << 10;
    block_rec(0, 19, MLSYS_MEM_POOL, -1, GEN, 0, 32, bb);
    step_on(0, 0, "generate 1");
    flow(-1, -1, MLSYS_FLOW_PHASE, P_GEN, 0, 1, 0, "generate", NAN);
    for (int b = 0; b < 5; b++)                         /* five sequences, a block each */
        block_rec(0, 19, MLSYS_MEM_ALLOC, b, 100 + b, 1, 0, bb);
    for (int k = 2; k <= 4; k++)                        /* three more share block 0 */
        block_rec(0, 19, MLSYS_MEM_SHARE, 0, 200 + k, k, 0, bb);
    block_rec(0, 19, MLSYS_MEM_COW, 0, 202, 3, 5, bb);  /* one writes: its own copy, block 5 */
    for (int b = 1; b < 6; b++)
        block_rec(0, 19, MLSYS_MEM_FREE, b, 100 + b, 0, 0, bb);
    for (int k = 2; k >= 0; k--)
        block_rec(0, 19, MLSYS_MEM_FREE, 0, 100, k, 0, bb);
    step_on(0, 1, "score 1");
    flow(-1, -1, MLSYS_FLOW_PHASE, P_SCORE, 0, 1, 0, "score", NAN);
    sm_finish(sm);
    /* before a block is used: the pool is there, empty */
    char *f = render_at(0, 100, 12, 1, 1.0);
    ck_assert_msg(line_has(f, "kv cache", "0 B") && strstr(f, "0 of 32 blocks"), "%s", f);
    free(f);
    f = render_at(1, 100, 12, 1, 1.0);
    ck_assert_msg(line_has(f, "kv cache", "96 KiB") && strstr(f, "6 of 32 blocks"), "%s", f);
    free(f);
    f = render_at(2, 100, 12, 1, 1.0);
    ck_assert_msg(line_has(f, "kv cache", "0 B") && strstr(f, "0 of 32 blocks"), "%s", f);
    free(f);
    done();
}
END_TEST

/* GRPO: no critic box; the advantage phase says how its advantages come without one. */
START_TEST(rlhf_grpo_without_a_critic)
{
    rlhf_scene_opts(1);
    char *f = render_at(3, 120, 30, 0, 1.0);
    ck_assert_msg(!strstr(f, "╔ critic") && !strstr(f, "┌ critic"),
                  "a critic box under GRPO:\n%s", f);
    ck_assert_msg(strstr(f, "8 advantages by group, no critic"), "%s", f);
    ck_assert_msg(strstr(f, "flow · 4 roles"), "%s", f);
    free(f);
    done();
}
END_TEST

/* A lab run with --trace into a temporary file, read back into *d, and a fresh view model
 * for its ranks. args: the command line before --trace. */
static void traced_run(mlsys_trace *d, const char *args)
{
    char path[] = "/tmp/mlsys-test-flow-XXXXXX", err[256];
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    close(fd);
    bin_result r = run_bin("%s--trace %s", args, path);
    ck_assert_msg(r.status == 0, "the lab (it needs assets/models): %s", r.err);
    bin_result_free(&r);
    ck_assert_msg(mlsys_trace_load(path, d, err, sizeof err) == 0, "%s", err);
    unlink(path);
    fresh(d->nranks);
}

/* The real loop (ch13/rlhf-loop on the shipped model, split placement on two ranks, one
 * iteration) through its trace: a frame per phase and nothing else (the collectives inside the
 * phases mark no steps: one frame for the whole weight sync), each phase's moves in its own
 * frame, the generator's KV cache at its most during generate, which rank holds which role,
 * and the weight broadcast's root named as a world rank (1), as its messages are. */
START_TEST(rlhf_from_a_real_run)
{
    mlsys_trace d;
    traced_run(&d, "run ch13/rlhf-loop --iterations 1 --prompts 8 --rm-steps 20 "
                   "--placement split -w 2 ");
    int roots = 0;
    for (size_t i = 0; i < d.n; i++) {
        const mlsys_event *e = &d.ev[i];
        sm_event(sm, e);
        if (e->kind == MLSYS_EV_COLL_BEGIN && e->coll == MLSYS_COLL_BROADCAST &&
            e->bytes == 256u << 10) {
            ck_assert_msg(e->peer == 1, "rank %d: a weight bucket's root named %d", e->rank,
                          e->peer);
            roots++;
        }
    }
    ck_assert_int_gt(roots, 0);
    sm_finish(sm);
    ck_assert_int_eq(sm_nframes(sm), 1 + 5);
    static const char *const phases[] = {"generate", "score", "advantage", "train", "sync"};
    static const char *const says[5][3] = {
        {"generator -> actor: 8 sequences", NULL, NULL},
        {"reference -> actor: ", "reward -> actor: 8 scores = ", "critic -> actor: "},
        {"advantages by GAE", NULL, NULL},
        {"actor -> actor: 4 updates", "critic -> critic: 4 updates", NULL},
        {"actor -> generator: weights v1", NULL, NULL},
    };
    for (int k = 1; k <= 5; k++) {
        char *f = render_at(k, 120, 40, 1, 1.0), want[40], rs[32];
        snprintf(want, sizeof want, "[%s]", phases[k - 1]);
        ck_assert_msg(strstr(f, want), "frame %d: %s not marked\n%s", k, want, f);
        for (int p = 0; p < 5; p++)
            for (int j = 0; j < 3 && says[p][j]; j++)
                ck_assert_msg(!!strstr(f, says[p][j]) == (p == k - 1), "frame %d: '%s' %s\n%s",
                              k, says[p][j], p == k - 1 ? "missing" : "from another phase", f);
        box_ranks(f, "generator", rs, sizeof rs);
        ck_assert_msg(!strcmp(rs, "r0"), "frame %d: generator on '%s'\n%s", k, rs, f);
        box_ranks(f, "actor", rs, sizeof rs);
        ck_assert_msg(!strcmp(rs, "r1"), "frame %d: actor on '%s'\n%s", k, rs, f);
        /* the KV cache holds 8 prompts and answers while generating, nothing after */
        ck_assert_msg(line_has(f, "kv cache", " 0 B") == (k != 1), "frame %d:\n%s", k, f);
        free(f);
    }
    mlsys_trace_free(&d);
    done();
}
END_TEST

/* The generator's KV pages in a real GRPO run (ch13/rlhf-loop, one rank, one iteration): the
 * engine's paged cache writes its block records under the generator's pool alone (a group's
 * samples fork their prompt: SHARE records, and a copy on write of its partial last block),
 * no engine step gates (one frame per phase), and the generator's box during generate reads
 * the peak the trace's own records give: blocks handed out (ALLOC, the copies included) less
 * blocks whose count fell to 0 (FREE, COW), at its highest within the phase, and their
 * bytes. */
START_TEST(rlhf_grpo_kv_blocks_from_a_real_run)
{
    mlsys_trace d;
    traced_run(&d, "run ch13/rlhf-loop --rl-algo grpo --iterations 1 --prompts 4 "
                   "--rm-steps 20 ");
    const int kv_pool = 4 * 4 + 3;      /* the generator's (role 4) KV cache (kind 3) */
    int pools = 0, n_blocks = 0, held = 0, peak = -1, ph = -1, allocs = 0, shares = 0, cows = 0;
    uint64_t block_bytes = 0;
    for (size_t i = 0; i < d.n; i++) {
        const mlsys_event *e = &d.ev[i];
        sm_event(sm, e);
        ck_assert_msg(e->kind != MLSYS_EV_FLOW || e->flow.what != MLSYS_FLOW_REQUESTS,
                      "an engine's request flow in the RLHF trace");
        if (e->kind == MLSYS_EV_FLOW && e->flow.what == MLSYS_FLOW_PHASE)
            ph = e->flow.phase;
        if (e->kind != MLSYS_EV_MEM || e->mem.pool != kv_pool)
            continue;
        switch (e->mem.op) {
        case MLSYS_MEM_POOL:
            pools++;
            ck_assert_int_eq(e->mem.owner, 4);
            n_blocks = e->mem.aux;
            block_bytes = e->bytes;
            break;
        case MLSYS_MEM_ALLOC: allocs++; held++; break;
        case MLSYS_MEM_COW:     /* the copy came by an ALLOC: the old block's count drops */
            cows++;
            held -= e->mem.refs == 0;
            break;
        case MLSYS_MEM_SHARE: shares++; break;
        case MLSYS_MEM_FREE: held -= e->mem.refs == 0; break;
        case MLSYS_MEM_USAGE:
            ck_abort_msg("a USAGE gauge beside the KV cache's blocks");
            break;
        default: break;
        }
        ck_assert_int_ge(held, 0);
        if (ph == 0 && held > peak)
            peak = held;
    }
    sm_finish(sm);
    ck_assert_int_eq(pools, 1);
    ck_assert_int_gt(allocs, 0);
    ck_assert_msg(shares > 0 && cows > 0, "%d shares, %d copies on write", shares, cows);
    ck_assert_int_eq(held, 0);
    ck_assert_int_gt(peak, 0);
    ck_assert_int_eq(sm_nframes(sm), 1 + 5);
    char *f = render_at(1, 120, 40, 1, 1.0), want[48], bytes[24];
    ck_assert_msg(strstr(f, "[generate]"), "%s", f);
    snprintf(want, sizeof want, " %d of %d blocks", peak, n_blocks);
    ck_assert_msg(strstr(f, want), "the trace's peak is%s:\n%s", want, f);
    view_fmt_bytes((uint64_t)peak * block_bytes, bytes, sizeof bytes);
    ck_assert_msg(line_has(f, "kv cache", bytes), "kv cache %s:\n%s", bytes, f);
    free(f);
    f = render_at(2, 120, 40, 1, 1.0);
    snprintf(want, sizeof want, " 0 of %d blocks", n_blocks);
    ck_assert_msg(strstr(f, "[score]") && strstr(f, want), "%s", f);
    free(f);
    mlsys_trace_free(&d);
    done();
}
END_TEST

/* ch14/weight-update-demo's hand-over through its trace: a trainer and the generators, one
 * arrow trainer -> generator per version (never a role sending to itself, never a bucket), a
 * step per section of the measurement. */
START_TEST(wsync_from_a_real_run)
{
    mlsys_trace d;
    traced_run(&d, "run ch14/weight-update-demo -w 3 --measure-bytes 1M --iters 2 "
                   "--bucket-size 1M,64M ");
    int seen[64] = {0}, moves = 0;
    for (size_t i = 0; i < d.n; i++) {
        const mlsys_event *e = &d.ev[i];
        sm_event(sm, e);
        if (e->kind != MLSYS_EV_FLOW || e->flow.what != MLSYS_FLOW_WEIGHTS)
            continue;
        ck_assert_msg(e->flow.from == 0 && e->flow.to == 1, "weights %d -> %d", e->flow.from,
                      e->flow.to);
        ck_assert(e->flow.version >= 1 && e->flow.version < 64);
        seen[e->flow.version]++;
        moves++;
    }
    sm_finish(sm);
    /* 2 bucket sizes x (1 warm-up + 3 rounds x 2 calls): versions 1..14, once each */
    ck_assert_int_eq(moves, 14);
    for (int v = 1; v <= 14; v++)
        ck_assert_msg(seen[v] == 1, "version %d moved %d times", v, seen[v]);
    /* broadcast 4 MiB, broadcast 1 MiB, sync with 1 MiB buckets, with 64 MiB buckets */
    ck_assert_int_eq(sm_nframes(sm), 1 + 4);
    char *f = render_at(3, 120, 40, 1, 1.0), rs[32];
    ck_assert_msg(strstr(f, "[sync, 1 MiB buckets]"), "%s", f);
    ck_assert_msg(strstr(f, "trainer -> generator: weights v7"), "%s", f);
    ck_assert_msg(!strstr(f, "weights v8"), "%s", f);
    box_ranks(f, "trainer", rs, sizeof rs);
    ck_assert_msg(!strcmp(rs, "r0"), "trainer on '%s'\n%s", rs, f);
    box_ranks(f, "generator", rs, sizeof rs);
    ck_assert_msg(!strcmp(rs, "r1-2"), "generator on '%s'\n%s", rs, f);
    free(f);
    mlsys_trace_free(&d);
    done();
}
END_TEST

/* A server: requests flow from the queue through the scheduler to the model and back. */
START_TEST(server_flow)
{
    fresh(1);
    static const char *const roles[] = {"queue", "scheduler", "model"};
    for (int r = 0; r < 3; r++)
        flow(r, -1, MLSYS_FLOW_ROLE, -1, 0, 0, 0, roles[r], NAN);
    usage(0, 2, 12u << 20, "KV cache");
    step(0, "iteration 1");
    flow(-1, -1, MLSYS_FLOW_PHASE, 0, 0, 1, 0, "schedule", NAN);
    flow(0, 1, MLSYS_FLOW_REQUESTS, 0, 3, 1, 0, NULL, NAN);
    flow(1, 2, MLSYS_FLOW_REQUESTS, 0, 2, 1, 0, NULL, NAN);
    /* one request of the serving engine: seq = its id, count its own (tokens, rows) */
    mlsys_event e = base(MLSYS_EV_FLOW, 0);
    e.flow = (mlsys_flow_info){2, 0, MLSYS_FLOW_REQUESTS, -1, 24, 1, 3, 0};
    sm_event(sm, &e);
    sm_finish(sm);
    char *f = render_at(1, 100, 20, 0, 1.0);
    golden("flow_server", f);
    ck_assert_msg(strstr(f, "queue → scheduler: 3 requests") &&
                  strstr(f, "scheduler → model: 2 requests"), "%s", f);
    ck_assert_ptr_nonnull(strstr(f, "12 MiB"));
    ck_assert_msg(strstr(f, "model → queue: req 3: 24"), "%s", f);
    free(f);
    done();
}
END_TEST

START_TEST(empty_and_tiny)
{
    fresh(1);
    char *f = render_at(0, 90, 8, 0, 1.0);
    golden("flow_empty", f);
    free(f);
    done();
    rlhf_scene();
    for (int w = 1; w < 50; w += 3)
        for (int h = 1; h < 14; h += 2)
            free(render_at(7, w, h, w % 2, 0.5));
    done();
}
END_TEST

int main(void)
{
    Suite *s = suite_create("flow");
    TCase *tc = tcase_create("flow");
    tcase_add_test(tc, rlhf_goldens);
    tcase_add_test(tc, rlhf_properties);
    tcase_add_test(tc, rlhf_ranks_and_order);
    tcase_add_test(tc, rlhf_grpo_without_a_critic);
    tcase_add_test(tc, block_pool_counts_blocks);

    tcase_add_test(tc, server_flow);
    tcase_add_test(tc, empty_and_tiny);
    suite_add_tcase(s, tc);
    TCase *run = tcase_create("flow-real-run");     /* the lab on the shipped model */
    tcase_set_timeout(run, 240);
    tcase_add_test(run, rlhf_from_a_real_run);
    tcase_add_test(run, rlhf_grpo_kv_blocks_from_a_real_run);
    tcase_add_test(run, wsync_from_a_real_run);
    suite_add_tcase(s, run);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
