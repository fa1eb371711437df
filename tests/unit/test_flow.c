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

enum { ACTOR, REF, REWARD, CRITIC };
enum { P_GEN, P_SCORE, P_ADV, P_TRAIN, P_SYNC };

/* Two iterations of PPO-RLHF on 8 sequences of 64 tokens; reward rises, KL stays small. */
static void rlhf_scene(void)
{
    fresh(1);
    static const char *const roles[] = {"actor", "reference", "reward", "critic"};
    for (int r = 0; r < 4; r++)
        flow(r, -1, MLSYS_FLOW_ROLE, -1, 0, 0, 0, roles[r], NAN);
    usage(0, ACTOR, 4u << 20, "weights");
    usage(1, ACTOR, 8u << 20, "optimizer");
    usage(2, ACTOR, 1u << 20, "KV cache");
    usage(3, REF, 4u << 20, "weights");
    usage(4, REWARD, 2u << 20, "weights");
    usage(5, CRITIC, 4u << 20, "weights");
    usage(6, CRITIC, 8u << 20, "optimizer");
    static const char *const phases[] = {"generate", "score", "advantage", "train", "sync"};
    int k = 0;
    for (int it = 1; it <= 2; it++) {
        for (int p = 0; p < 5; p++) {
            step(k++, phases[p]);
            flow(-1, -1, MLSYS_FLOW_PHASE, p, 0, it, 0, phases[p], NAN);
            switch (p) {
            case P_GEN:
                usage(2, ACTOR, (uint64_t)(2 + it) << 20, "KV cache");
                break;
            case P_SCORE:
                flow(ACTOR, REF, MLSYS_FLOW_TOKENS, p, 8, it, 8 * 64 * 4, NULL, NAN);
                flow(ACTOR, REWARD, MLSYS_FLOW_TOKENS, p, 8, it, 8 * 64 * 4, NULL, NAN);
                flow(ACTOR, CRITIC, MLSYS_FLOW_TOKENS, p, 8, it, 8 * 64 * 4, NULL, NAN);
                flow(REWARD, ACTOR, MLSYS_FLOW_REWARDS, p, 8, it, 8 * 4, NULL, 0.25 * it);
                break;
            case P_ADV:
                flow(CRITIC, ACTOR, MLSYS_FLOW_VALUES, p, 8, it, 8 * 64 * 4, NULL, NAN);
                flow(REF, ACTOR, MLSYS_FLOW_LOGPROBS, p, 8, it, 8 * 64 * 4, NULL, NAN);
                break;
            case P_TRAIN:
                flow(ACTOR, CRITIC, MLSYS_FLOW_ADVANTAGES, p, 8, it, 8 * 64 * 4, NULL, NAN);
                break;
            case P_SYNC:
                flow(ACTOR, ACTOR, MLSYS_FLOW_WEIGHTS, p, 1, it, 4u << 20, NULL, NAN);
                point("reward", it, 0.25 * it);
                point("KL", it, 0.01 * it);
                break;
            }
        }
    }
    sm_finish(sm);
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
    done();
}
END_TEST

START_TEST(rlhf_properties)
{
    rlhf_scene();
    for (int k = 1; k <= 10; k++) {
        static const char *const phases[] = {"generate", "score", "advantage", "train", "sync"};
        char *f = render_at(k, 120, 30, 1, 1.0), want[40];
        /* the phase of the step is the one marked, and the iteration is the step's */
        snprintf(want, sizeof want, "[%s]", phases[(k - 1) % 5]);
        ck_assert_msg(strstr(f, want), "step %d: %s not marked in\n%s", k, want, f);
        snprintf(want, sizeof want, "iteration %d", (k - 1) / 5 + 1);
        ck_assert_msg(strstr(f, want), "step %d: no '%s' in\n%s", k, want, f);
        /* a move belongs to its phase: rewards show in score, not in advantage */
        int score = (k - 1) % 5 == P_SCORE;
        ck_assert_msg(!!strstr(f, "reward -> actor: 8 rewards") == score, "step %d:\n%s", k, f);
        free(f);
    }
    /* the reward the lab put on the batch, and the KV cache gauge of iteration 2 */
    char *f = render_at(7, 120, 30, 1, 1.0);
    ck_assert_msg(strstr(f, "8 rewards = 0.5"), "%s", f);
    ck_assert_msg(strstr(f, "4 MiB"), "%s", f);
    free(f);
    /* the curves beside: after both syncs, reward 0.5 and KL 0.02 */
    f = render_at(10, 120, 30, 1, 1.0);
    ck_assert_msg(strstr(f, "reward 0.5") && strstr(f, "KL 0.02"), "%s", f);
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
    tcase_add_test(tc, server_flow);
    tcase_add_test(tc, empty_and_tiny);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
