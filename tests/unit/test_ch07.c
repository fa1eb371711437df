/* test_ch07.c - chapter 7: the schedule generator's properties for many (P, M, v) against the
 * closed forms (bubble, total slots, peak activations), the validator catching corrupted
 * schedules, the 1F1B reference chart of the curriculum, and the two labs run through the
 * binary: the calculator's 19 reference rows in --compat, its product rule, bad input (exit
 * 2, one line on stderr), and --run's gradients equal to the serial model on 2 and 4 ranks. */
#include "run_bin.h"
#include <check.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/wait.h>
#include "../../chapters/ch07/schedule.h"

/* ---- the generator ---- */

static int min_i(int a, int b)
{
    return a < b ? a : b;
}

START_TEST(generator_properties)
{
    char err[256];
    for (int P = 1; P <= 8; P++)
        for (int M = 1; M <= 16; M++)
            for (int v = 1; v <= 4; v++)
                for (int k = 0; k < SCHED_COUNT; k++) {
                    if (k != SCHED_INTERLEAVED && v > 1)
                        continue;
                    schedule s;
                    ck_assert_msg(sched_build(&s, (sched_kind)k, P, M, v, err, sizeof err) == 0,
                                  "%s P=%d M=%d v=%d: %s", sched_name(k), P, M, v, err);
                    ck_assert_msg(sched_validate(&s, err, sizeof err) == 0,
                                  "%s P=%d M=%d v=%d: %s", sched_name(k), P, M, v, err);
                    double bub = sched_bubble(&s);
                    /* the closed forms, written out here rather than asked of the code */
                    if (k == SCHED_GPIPE || k == SCHED_1F1B) {
                        ck_assert_int_eq(s.total, 2 * (M + P - 1));
                        ck_assert_msg(fabs(bub - (double)(P - 1) / (M + P - 1)) < 1e-12,
                                      "%s P=%d M=%d bubble %f", sched_name(k), P, M, bub);
                    }
                    if (k == SCHED_INTERLEAVED && M % P == 0)
                        ck_assert_msg(fabs(bub - (double)(P - 1) / (v * M + P - 1)) < 1e-12,
                                      "interleaved P=%d M=%d v=%d bubble %f", P, M, v, bub);
                    if (k == SCHED_ZBH1 && M >= P)
                        ck_assert_msg(fabs(bub - (double)(P - 1) / (3 * M + P - 1)) < 1e-12,
                                      "zb-h1 P=%d M=%d bubble %f", P, M, bub);
                    for (int st = 0; st < P; st++) {
                        int peak = sched_peak_inflight(&s, st);
                        if (k == SCHED_GPIPE)
                            ck_assert_int_eq(peak, M);
                        if (k == SCHED_1F1B)
                            ck_assert_msg(peak == min_i(P - st, M), "1f1b P=%d M=%d stage %d "
                                          "peak %d", P, M, st, peak);
                        if (k == SCHED_ZBH1)
                            ck_assert_int_le(peak, min_i(P, M));
                        /* every stage does every pass of every micro-batch once */
                        int ops = 0;
                        for (int i = 0; i < s.n[st]; i++)
                            ops++;
                        ck_assert_int_eq(ops, (k == SCHED_ZBH1 ? 3 : 2) * M * s.v);
                    }
                    /* 1F1B and interleaved bubbles are never above GPipe's */
                    ck_assert(bub <= (double)(P - 1) / (M + P - 1) + 1e-12);
                    sched_free(&s);
                }
}
END_TEST

START_TEST(reference_chart_1f1b)
{
    static const char *want =
        "GPU 0:   F0 F1 F2 F3  .  .  . B0 F4 B1 F5 B2 F6 B3 F7 B4  . B5  . B6  . B7\n"
        "GPU 1:    . F0 F1 F2  .  . B0 F3 B1 F4 B2 F5 B3 F6 B4 F7 B5  . B6  . B7  .\n"
        "GPU 2:    .  . F0 F1  . B0 F2 B1 F3 B2 F4 B3 F5 B4 F6 B5 F7 B6  . B7  .  .\n"
        "GPU 3:    .  .  . F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5 F6 B6 F7 B7  .  .  .\n";
    schedule s;
    char err[128], *buf = NULL;
    size_t len = 0;
    ck_assert_int_eq(sched_build(&s, SCHED_1F1B, 4, 8, 1, err, sizeof err), 0);
    FILE *f = open_memstream(&buf, &len);
    sched_print_grid(&s, f);
    fclose(f);
    const char *rows = strstr(buf, "GPU 0:");
    ck_assert_ptr_nonnull(rows);
    ck_assert_str_eq(rows, want);
    free(buf);
    sched_free(&s);
    /* GPipe: F(s,m) at s+m and B(s,m) at (M+P-1) + (P-1-s) + m */
    ck_assert_int_eq(sched_build(&s, SCHED_GPIPE, 4, 8, 1, err, sizeof err), 0);
    for (int st = 0; st < 4; st++)
        for (int m = 0; m < 8; m++) {
            const sched_op *f_op = sched_at(&s, st, st + m);
            const sched_op *b_op = sched_at(&s, st, 11 + (3 - st) + m);
            ck_assert(f_op && f_op->kind == 'F' && f_op->mb == m);
            ck_assert(b_op && b_op->kind == 'B' && b_op->mb == m);
        }
    sched_free(&s);
}
END_TEST

START_TEST(validator_catches_corruption)
{
    char err[256];
    for (int k = 0; k < SCHED_COUNT; k++) {
        for (int trial = 0; trial < 5; trial++) {
            schedule s;
            ck_assert_int_eq(sched_build(&s, (sched_kind)k, 4, 8, 2, err, sizeof err), 0);
            ck_assert_int_eq(sched_validate(&s, err, sizeof err), 0);
            sched_op *ops = s.ops[1];
            int n = s.n[1];
            switch (trial) {
            case 0:                 /* stage 1's first F before stage 0's F has ended */
                ops[0].t0 = 0;
                break;
            case 1:                 /* one micro-batch done twice, another never */
                ops[n - 1].mb = ops[n - 2].mb;
                ops[n - 1].kind = ops[n - 2].kind;
                ops[n - 1].chunk = ops[n - 2].chunk;
                break;
            case 2:                 /* two ops at once on one stage */
                ops[n - 1].t0 = ops[n - 2].t0;
                break;
            case 3: {               /* the last B of stage 0 before stage 1's */
                sched_op *o = &s.ops[0][s.n[0] - 1];
                for (int i = 0; i < n; i++)
                    if (ops[i].kind == 'B' && ops[i].mb == o->mb && ops[i].chunk == o->chunk)
                        o->t0 = ops[i].t0;
                if (o->kind != 'B')
                    o->kind = 'F';  /* ZB-H1 ends with W: make it a second F instead */
                break;
            }
            default:                /* an op of a kind the schedule has not */
                ops[n - 1].kind = k == SCHED_ZBH1 ? 'X' : 'W';
                break;
            }
            ck_assert_msg(sched_validate(&s, err, sizeof err) != 0, "%s trial %d passed",
                          sched_name(k), trial);
            sched_free(&s);
        }
    }
}
END_TEST

START_TEST(synthetic_events_pair_up)
{
    schedule s;
    char err[128];
    mlsys_event *ev;
    ck_assert_int_eq(sched_build(&s, SCHED_ZBH1, 3, 5, 1, err, sizeof err), 0);
    size_t n = sched_events(&s, 1000, &ev);
    ck_assert_int_eq((int)n, 2 * 3 * 5 * 3);
    int open[3] = {0, 0, 0};
    uint64_t last = 0;
    for (size_t i = 0; i < n; i++) {
        ck_assert(ev[i].t_ns >= last);          /* in time order */
        last = ev[i].t_ns;
        ck_assert_int_eq((int)ev[i].t_ns, ev[i].step * 1000);
        open[ev[i].rank] += ev[i].kind == MLSYS_EV_COMPUTE_BEGIN ? 1 : -1;
        ck_assert(open[ev[i].rank] == 0 || open[ev[i].rank] == 1);
    }
    free(ev);
    sched_free(&s);
}
END_TEST

/* ---- the labs through the binary ---- */

/* run_bin.h's runner, under this suite's names */
typedef bin_result result;
#define run run_bin
#define result_free bin_result_free

START_TEST(calculator_compat_reference)
{
    static const double want[19][8] = {
        {1, 1, 64, 323.8, 0, 0.00, 68.72, 275.62}, {1, 2, 32, 192.8, 0, 0.00, 68.72, 135.62},
        {1, 4, 16, 127.3, 0, 0.00, 68.72, 65.62}, {1, 8, 8, 94.6, 0, 0.00, 68.72, 30.62},
        {1, 16, 4, 78.2, 0, 0.00, 68.72, 13.12}, {2, 1, 32, 166.0, 0, 5497.56, 68.72, 271.25},
        {2, 2, 16, 100.5, 0, 2748.78, 68.72, 131.25}, {2, 4, 8, 67.8, 1, 1374.39, 68.72, 61.25},
        {2, 8, 4, 51.4, 1, 687.19, 68.72, 26.25}, {2, 16, 2, 43.2, 1, 343.60, 68.72, 8.75},
        {4, 1, 16, 87.1, 0, 8246.34, 68.72, 262.50}, {4, 2, 8, 54.3, 1, 4123.17, 68.72, 122.50},
        {4, 4, 4, 38.0, 1, 2061.58, 68.72, 52.50}, {4, 8, 2, 29.8, 1, 1030.79, 68.72, 17.50},
        {4, 16, 1, 25.7, 1, 515.40, 68.72, 0.00}, {8, 1, 8, 47.6, 1, 9620.73, 68.72, 245.00},
        {8, 2, 4, 31.3, 1, 4810.36, 68.72, 105.00}, {8, 4, 2, 23.1, 1, 2405.18, 68.72, 35.00},
        {8, 8, 1, 19.0, 1, 1202.59, 68.72, 0.00},
    };
    result r = run("run ch07/parallel-strategy-calculator --compat");
    ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
    ck_assert_ptr_nonnull(strstr(r.out, "(65.5B actual)"));
    ck_assert_ptr_nonnull(strstr(r.out, "Total model memory: 785.7 GB"));
    const char *p = strstr(r.out, "-----\n");
    ck_assert_ptr_nonnull(p);
    p = strchr(p, '\n') + 1;
    for (int i = 0; i < 19; i++) {
        int tp, pp, dp;
        double mem, tc, pc, dc;
        char fits[8];
        int got = sscanf(p, "%d %d %d %lfGB %7s %lfGB %lfGB %lfGB", &tp, &pp, &dp, &mem, fits,
                         &tc, &pc, &dc);
        ck_assert_msg(got == 8, "row %d unreadable: %.80s", i, p);
        ck_assert_int_eq(tp, (int)want[i][0]);
        ck_assert_int_eq(pp, (int)want[i][1]);
        ck_assert_int_eq(dp, (int)want[i][2]);
        ck_assert_msg(fabs(mem - want[i][3]) < 0.05 && fabs(tc - want[i][5]) < 0.005 &&
                      fabs(pc - want[i][6]) < 0.005 && fabs(dc - want[i][7]) < 0.005,
                      "row %d: %.80s", i, p);
        ck_assert_str_eq(fits, want[i][4] ? "✓" : "✗");
        ck_assert_int_le(tp * pp * dp, 64);
        p = strchr(p, '\n') + 1;
    }
    ck_assert_msg(*p == '\n', "a 20th row: %.80s", p);
    ck_assert_ptr_nonnull(strstr(r.out, "Tensor Parallelism (TP): 2\n  Pipeline Parallelism (PP)"
                                        ": 16\n  Data Parallelism (DP): 2\n"));
    ck_assert_ptr_nonnull(strstr(r.out, "Memory per GPU: 43.2 GB (limit: 80.0 GB)"));
    ck_assert_ptr_nonnull(strstr(r.out, "Total communication: 421.07 GB per step"));
    result_free(&r);
}
END_TEST

/* Every row's tp*pp*dp <= G, PP costs nothing at pp = 1, "*" only when TP > GPUs per node. */
static void check_rows(const char *out, int G, int gpn, int *nrows)
{
    const char *p = strstr(out, "-----\n");
    ck_assert_ptr_nonnull(p);
    p = strchr(p, '\n') + 1;
    *nrows = 0;
    while (*p && *p != '\n') {
        int tp, pp, dp, used;
        char star;
        double mem, tc, pc, dc;
        char fits[8];
        ck_assert_int_eq(sscanf(p, "%d%c %d %d%n", &tp, &star, &pp, &dp, &used), 4);
        ck_assert_int_le(tp * pp * dp, G);
        if (strstr(out, "EP Comm")) {        /* --moe: EP ranks come out of the DP group */
            int ep, more;
            ck_assert_int_eq(sscanf(p + used, "%d%n", &ep, &more), 1);
            ck_assert_msg(ep >= 1 && dp % ep == 0, "ep %d dp %d", ep, dp);
            used += more;
        }
        ck_assert_msg((star == '*') == (tp > gpn), "marker wrong: %.60s", p);
        if (!strstr(p, "skipped")) {
            ck_assert_int_eq(sscanf(p + used, "%lfGB %7s %lfGB %lfGB %lfGB", &mem, fits, &tc, &pc,
                                    &dc), 5);
            if (pp == 1)
                ck_assert(pc == 0.0);
            if (tp == 1)
                ck_assert(tc == 0.0);
        }
        (*nrows)++;
        p = strchr(p, '\n') + 1;
    }
}

START_TEST(calculator_fixed)
{
    static const char *const cases[] = {"", "-g 24", "-g 8 --batch-size 4", "--params 7 --gpus 8 --memory "
                                        "24 --batch-size 8 --seq-len 2048", "-g 128 --moe"};
    static const int gs[] = {64, 24, 8, 8, 128};
    for (int i = 0; i < 5; i++) {
        result r = run("run ch07/parallel-strategy-calculator %s", cases[i]);
        ck_assert_msg(r.status == 0, "`%s`: exit %d: %s", cases[i], r.status, r.err);
        int n;
        check_rows(r.out, gs[i], 8, &n);
        ck_assert_int_gt(n, 0);
        result_free(&r);
    }
    /* the shape follows --params: 7B is not reported as 65.5B */
    result r = run("run ch07/parallel-strategy-calculator --params 7");
    ck_assert_ptr_nonnull(strstr(r.out, "Parameters: 7.0B (the shape below holds 7."));
    result_free(&r);
    /* MoE: --params counts the experts too, so 70B of MoE is a 70B shape that fits; the
     * first version put 64 experts on the dense 70B shape (2771.3B) and fit nowhere */
    r = run("run ch07/parallel-strategy-calculator --moe");
    ck_assert_msg(r.status == 0 && !strstr(r.out, "No configuration fits"), "%s", r.out);
    const char *hold = strstr(r.out, "Parameters: 70.0B (the shape below holds ");
    ck_assert_ptr_nonnull(hold);
    double held = atof(hold + strlen("Parameters: 70.0B (the shape below holds "));
    ck_assert_msg(fabs(held - 70.0) < 1.4, "the MoE shape holds %.1fB", held);
    ck_assert_ptr_nonnull(strstr(r.out, "MOE-SPECIFIC CONSIDERATIONS"));
    result_free(&r);
    r = run("run ch07/parallel-strategy-calculator --moe --compat");
    ck_assert_msg(r.status == 0 && strstr(r.out, "No configuration fits"), "%s", r.out);
    ck_assert_ptr_nonnull(strstr(r.out, "(2771.3B actual)"));
    result_free(&r);
}
END_TEST

/* A row of the default table: TP(*) PP DP [EP] Mem fits TPc PPc DPc [EPc] bubble. */
typedef struct calc_row {
    int tp, pp, dp, ep, fits, intra;
    double mem, tpc, ppc, dpc, epc, bubble, total;
} calc_row;

static int calc_rows(const char *out, calc_row *rows, int max)
{
    const char *p = strstr(out, "-----\n");
    ck_assert_ptr_nonnull(p);
    p = strchr(p, '\n') + 1;
    int n = 0, ep = strstr(out, "EP Comm") != NULL;
    while (*p && *p != '\n' && n < max) {
        calc_row *r = &rows[n];
        char star, fits[8];
        int used, more;
        memset(r, 0, sizeof *r);
        r->ep = 1;
        ck_assert_int_eq(sscanf(p, "%d%c %d %d%n", &r->tp, &star, &r->pp, &r->dp, &used), 4);
        if (ep) {
            ck_assert_int_eq(sscanf(p + used, "%d%n", &r->ep, &more), 1);
            used += more;
        }
        if (!strstr(p, "skipped") || strstr(p, "skipped") > strchr(p, '\n')) {
            ck_assert_int_eq(sscanf(p + used, "%lfGB %7s %lfGB %lfGB %lfGB%n", &r->mem, fits,
                                    &r->tpc, &r->ppc, &r->dpc, &more), 5);
            used += more;
            if (ep) {
                ck_assert_int_eq(sscanf(p + used, "%lfGB%n", &r->epc, &more), 1);
                used += more;
            }
            ck_assert_int_eq(sscanf(p + used, "%lf%%", &r->bubble), 1);
            r->fits = !strcmp(fits, "✓");
            r->intra = star != '*';
            r->total = r->tpc + r->ppc + r->dpc + r->epc;
            n++;
        }
        p = strchr(p, '\n') + 1;
    }
    return n;
}

/* The default mode follows the chapters: TP sends 8·b·s·h·(T-1)/T bytes per layer (chapter
 * 6's four ring all-reduces), Adam keeps 12 B per parameter (chapter 5), a row fits below
 * 90 % of the memory and says so, every row has its 1F1B bubble (P-1)/(M+P-1) with M the
 * replica's samples, and the pick is the rule the lab states: inside a node, then a bubble
 * under 20 %, then the least communication (else the least bubble). */
START_TEST(calculator_chapter_formulas)
{
    static const struct { const char *args; long B, S; double mem; } cases[] = {
        {"", 512, 4096, 80}, {"--batch-size 4", 4, 4096, 80},
        {"--batch-size 64 -g 32", 64, 4096, 80},
        {"--params 13 -g 16 --memory 40 -s 2048", 512, 2048, 40},
    };
    const calc_row *best_row = NULL;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        result r = run("run ch07/parallel-strategy-calculator %s", cases[c].args);
        ck_assert_msg(r.status == 0, "`%s`: exit %d: %s", cases[c].args, r.status, r.err);
        long H, L, V;
        const char *sh = strstr(r.out, "Shape: hidden ");
        ck_assert_ptr_nonnull(sh);
        ck_assert_int_eq(sscanf(sh, "Shape: hidden %ld, %ld layers, vocabulary %ld", &H, &L, &V), 3);
        double count = (double)V * H + (double)L * 12.0 * H * H;
        const char *o = strstr(r.out, "Optimizer memory: ");
        ck_assert_ptr_nonnull(o);
        ck_assert_msg(fabs(atof(o + 18) - 12.0 * count / 1e9) < 0.06, "`%s`: optimizer %.1f GB, "
                      "12 B x %.0f = %.1f", cases[c].args, atof(o + 18), count, 12.0 * count / 1e9);
        char limit[96];
        snprintf(limit, sizeof limit, "A layout fits below 90 %% of it, %.1f GB", 0.9 * cases[c].mem);
        ck_assert_msg(strstr(r.out, limit), "missing '%s'", limit);
        calc_row rows[64];
        int n = calc_rows(r.out, rows, 64);
        ck_assert_int_gt(n, 0);
        for (int i = 0; i < n; i++) {
            calc_row *w = &rows[i];
            double tokens = (double)cases[c].B / w->dp * cases[c].S;
            double tpc = w->tp > 1 ? 8.0 * tokens * H * 2 * (w->tp - 1) / w->tp *
                                     ceil((double)L / w->pp) / 1e9 : 0.0;
            ck_assert_msg(fabs(w->tpc - tpc) <= 0.006, "`%s` row %d/%d/%d: TP comm %.2f, chapter "
                          "6 gives %.2f", cases[c].args, w->tp, w->pp, w->dp, w->tpc, tpc);
            long m = cases[c].B / w->dp;
            double bubble = 100.0 * (w->pp - 1) / (double)(m + w->pp - 1);
            ck_assert_msg(fabs(w->bubble - bubble) <= 0.051, "row %d/%d/%d: bubble %.1f, want %.2f",
                          w->tp, w->pp, w->dp, w->bubble, bubble);
            if (fabs(w->mem - 0.9 * cases[c].mem) > 0.06)
                ck_assert_int_eq(w->fits, w->mem < 0.9 * cases[c].mem);
        }
        /* the rule, applied to the printed rows */
        int best = -1;
        for (int i = 0; i < n; i++) {
            const calc_row *a = &rows[i], *b = best >= 0 ? &rows[best] : NULL;
            if (!a->fits)
                continue;
            int wins;
            if (!b)
                wins = 1;
            else if (a->intra != b->intra)
                wins = a->intra;
            else if ((a->bubble <= 20.0) != (b->bubble <= 20.0))
                wins = a->bubble <= 20.0;
            else if (a->bubble > 20.0 && a->bubble != b->bubble)
                wins = a->bubble < b->bubble;
            else
                wins = a->total < b->total - 0.015;
            if (wins)
                best = i;
        }
        ck_assert_int_ge(best, 0);
        best_row = &rows[best];
        char want[160];
        snprintf(want, sizeof want, "Tensor Parallelism (TP): %d\n  Pipeline Parallelism (PP): "
                 "%d\n  Data Parallelism (DP): %d\n", best_row->tp, best_row->pp, best_row->dp);
        ck_assert_msg(strstr(r.out, want), "`%s`: want\n%s", cases[c].args, want);
        snprintf(want, sizeof want, "bubble %.1f %%", best_row->bubble);
        ck_assert_msg(strstr(r.out, want), "`%s`: the reasoning lacks '%s'", cases[c].args, want);
        snprintf(want, sizeof want, "(fits under %.1f GB, 90 %%", 0.9 * cases[c].mem);
        ck_assert_msg(strstr(r.out, want), "`%s`: lacks '%s'", cases[c].args, want);
        result_free(&r);
    }
}
END_TEST

static const char *const bad_cases[] = {
    "run ch07/pipeline-schedule-viz -m 0",
    "run ch07/pipeline-schedule-viz --schedule nope",
    "run ch07/pipeline-schedule-viz --layers 3 -P 4",
    "run ch07/pipeline-schedule-viz --run -P 4 --layers 2",
    /* interleaved asked for alone; with --schedule all the others run (test_cli_promises) */
    "run ch07/pipeline-schedule-viz --run -P 4 --virtual 3 --schedule interleaved",
    "run ch07/pipeline-schedule-viz --run -P 4 --layers 12 --schedule interleaved",
    "run ch07/pipeline-schedule-viz --run -P 4 --layers 10 --schedule 1f1b",
    "run ch07/parallel-strategy-calculator --gpus 0",
    "run ch07/parallel-strategy-calculator --compat --hidden 4096",
};

START_TEST(bad_input)
{
    const char *c = bad_cases[_i];
    result r = run("%s", c);
    ck_assert_msg(r.status == 2, "`%s`: exit %d, stderr: %s", c, r.status, r.err);
    ck_assert_msg(r.out[0] == 0, "`%s`: stdout should be empty, got: %s", c, r.out);
    size_t len = strlen(r.err);
    ck_assert_msg(len > 1 && r.err[len - 1] == '\n' && strchr(r.err, '\n') == r.err + len - 1,
                  "`%s`: want one line on stderr, got: '%s'", c, r.err);
    ck_assert_msg(!strncmp(r.err, "mlsys-lab: ", 11), "`%s`: %s", c, r.err);
    result_free(&r);
}
END_TEST

START_TEST(chart_defaults)
{
    result r = run("run ch07/pipeline-schedule-viz");
    ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
    /* the fixed naive bubble (the original printed 68.6%) and every section */
    ck_assert_ptr_nonnull(strstr(r.out, "Bubble ratio: 27.3% (24 idle of 4 x 22 slots)"));
    ck_assert_ptr_null(strstr(r.out, "68.6"));
    ck_assert_ptr_nonnull(strstr(r.out, " SUMMARY"));
    ck_assert_ptr_nonnull(strstr(r.out, "16              15.8%           84.2%"));
    ck_assert_ptr_nonnull(strstr(r.out, "per stage: 4, 3, 2, 1"));
    /* each grid: '.' share equals the printed bubble (checked on the 1F1B grid) */
    const char *g = strstr(r.out, " 1F1B (one forward");
    ck_assert_ptr_nonnull(g);
    g = strstr(g, "GPU 0:");
    int dots = 0, cells = 0;
    for (int row = 0; row < 4; row++) {
        const char *e = strchr(g, '\n');
        for (const char *q = g + 7; q < e; q++) {
            if (*q == '.')
                dots++;
            if (*q == '.' || *q == 'F' || *q == 'B')
                cells++;
        }
        g = e + 1;
    }
    ck_assert_int_eq(cells, 88);
    ck_assert_int_eq(dots, 24);
    result_free(&r);
}
END_TEST

START_TEST(run_matches_serial)
{
    static const int ranks[] = {2, 4};
    int n = ranks[_i];
    result r = run("run ch07/pipeline-schedule-viz --run -P %d --layers 8 --hidden 24 "
                   "--batch-size 4 -m 6", n);
    ck_assert_msg(r.status == 0, "-s %d: exit %d: %s\n%s", n, r.status, r.err, r.out);
    int seen = 0;
    for (const char *p = r.out; (p = strstr(p, "max |pipelined - serial| = ")); seen++) {
        double d = atof(p + strlen("max |pipelined - serial| = "));
        ck_assert_msg(d <= 1e-5, "-s %d: difference %g", n, d);
        p++;
    }
    ck_assert_int_eq(seen, SCHED_COUNT);
    /* the same loss whatever the schedule: one model, one data set */
    const char *l = strstr(r.out, "loss (mean over micro-batches): ");
    ck_assert_ptr_nonnull(l);
    char first[32];
    snprintf(first, sizeof first, "%.10s", l + 32);
    for (const char *p = l; (p = strstr(p, "loss (mean over micro-batches): ")); p++)
        ck_assert_int_eq(strncmp(p + 32, first, strlen(first)), 0);
    char pred[64];              /* 1F1B's prediction: (P-1)/(M+P-1) with M = 6 */
    snprintf(pred, sizeof pred, "predicted %.1f%%", 100.0 * (n - 1) / (6 + n - 1));
    ck_assert_msg(strstr(r.out, pred) != NULL, "no '%s' in:\n%s", pred, r.out);
    /* the messages each schedule sent: 2·M·(vP-1) of one activation, B x H floats, so
     * interleaving (v = 2) sends more messages of the same size */
    static const int vs[SCHED_COUNT] = {1, 1, 2, 1};   /* gpipe, 1f1b, interleaved, zb-h1 */
    const char *m = r.out;
    for (int k = 0; k < SCHED_COUNT; k++) {
        m = strstr(m, "messages: ");
        ck_assert_ptr_nonnull(m);
        long sends, bytes, want;
        char num[32];
        ck_assert_int_eq(sscanf(m, "messages: %ld point-to-point sends of %31s B each (2·M·(vP-1) "
                                "= %ld)", &sends, num, &want), 3);
        ck_assert_int_eq(sends, 2L * 6 * (vs[k] * n - 1));
        ck_assert_int_eq(want, sends);
        bytes = 0;
        for (const char *q = num; *q; q++)
            if (*q >= '0' && *q <= '9')
                bytes = bytes * 10 + (*q - '0');
        ck_assert_int_eq(bytes, 4 * 24 * 4);
        m++;
    }
    /* the reasons for the gap, and the oversubscription caveat exactly when it applies */
    ck_assert_ptr_null(strstr(r.out, "A backward costs about twice a forward here"));
    ck_assert_ptr_nonnull(strstr(r.out, "A backward costing\ntwice a forward is not a cause"));
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    ck_assert_int_eq(strstr(r.out, "mean nothing here") != NULL, cores < n);
    result_free(&r);
}
END_TEST

/* Interleaving's closed form needs M a multiple of P: where the lab drops it, it says so. */
START_TEST(chart_interleaved_needs_multiple)
{
    result r = run("run ch07/pipeline-schedule-viz -P 4 -m 6 --schedule interleaved");
    ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
    ck_assert_ptr_null(strstr(r.out, "closed form (P-1)/(v*M+P-1) ="));
    ck_assert_ptr_nonnull(strstr(r.out, "holds when M is a multiple of P"));
    ck_assert_ptr_nonnull(strstr(r.out, "with M = 6 and P = 4"));
    result_free(&r);
    r = run("run ch07/pipeline-schedule-viz -P 4 -m 8 --schedule interleaved");
    ck_assert_ptr_nonnull(strstr(r.out, "closed form (P-1)/(v*M+P-1) = 15.8%"));
    ck_assert_ptr_null(strstr(r.out, "holds when M is a multiple of P"));
    result_free(&r);
    /* one spelling: micro-batches */
    r = run("run ch07/pipeline-schedule-viz");
    ck_assert_ptr_null(strstr(r.out, "microbatch"));
    ck_assert_ptr_null(strstr(r.out, "MICROBATCH"));
    ck_assert_ptr_null(strstr(r.out, "Microbatch"));
    result_free(&r);
}
END_TEST

static Suite *ch07_suite(void)
{
    Suite *s = suite_create("ch07");
    TCase *t = tcase_create("ch07");
    tcase_set_timeout(t, 120);
    tcase_add_test(t, generator_properties);
    tcase_add_test(t, reference_chart_1f1b);
    tcase_add_test(t, validator_catches_corruption);
    tcase_add_test(t, synthetic_events_pair_up);
    tcase_add_test(t, calculator_compat_reference);
    tcase_add_test(t, calculator_fixed);
    tcase_add_test(t, calculator_chapter_formulas);
    tcase_add_loop_test(t, bad_input, 0, (int)(sizeof bad_cases / sizeof bad_cases[0]));
    tcase_add_test(t, chart_defaults);
    tcase_add_loop_test(t, run_matches_serial, 0, 2);
    tcase_add_test(t, chart_interleaved_needs_multiple);
    suite_add_tcase(s, t);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(ch07_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
