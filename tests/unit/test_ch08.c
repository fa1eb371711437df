/* test_ch08.c - chapter 8's lab through the program: the simulation's golden (5 prefills, 38
 * decode steps, 100 tokens, 382.5 ms, 261.4 tokens/s, each request's own TTFT and latency)
 * and its scheduling properties over many seeds; the real engine's step lines (batch and
 * token budget respected, every request reported once, totals that add up, preemption with
 * a tiny pool); bad input exits 2 with one line. */
#include "run_bin.h"
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LAB "run ch08/minimal-inference-server"

START_TEST(simulation_golden)
{
    bin_result r = run_bin(LAB " --simulate --eos-prob 0");
    ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
    ck_assert_ptr_nonnull(strstr(r.out, "SIMULATION"));
    ck_assert_ptr_nonnull(strstr(r.out, "5 prefills (one request each), 38 decode steps, "
                                        "100 tokens, 382.5 ms of virtual time"));
    ck_assert_ptr_nonnull(strstr(r.out, "throughput               261.4 tokens/s"));
    /* the first four steps prefill requests 0..3 in order, at 0.6, 1.2, 1.7, 2.1 ms */
    ck_assert_ptr_nonnull(strstr(r.out, "step   1      0.60 ms  prefill r0:6"));
    ck_assert_ptr_nonnull(strstr(r.out, "step   2      1.20 ms  prefill r1:6"));
    ck_assert_ptr_nonnull(strstr(r.out, "step   3      1.70 ms  prefill r2:5"));
    ck_assert_ptr_nonnull(strstr(r.out, "step   4      2.10 ms  prefill r3:4"));
    ck_assert_ptr_nonnull(strstr(r.out, "step  24    192.50 ms  prefill r4:4"));
    /* each request's own TTFT and latency (the original printed the run time for all) */
    ck_assert_ptr_nonnull(strstr(r.out, "     0       6      20 length        0.60      10.08 "
                                        "     192.10"));
    ck_assert_ptr_nonnull(strstr(r.out, "     4       4      20 length      192.50      10.00 "
                                        "     382.50"));
    bin_result_free(&r);
}
END_TEST

/* The original's rule, checked from the step log: at most B running, prefills in
 * submission order, a prefill whenever a seat is free and someone waits, every request
 * once, 1..max tokens each, totals that add up. */
START_TEST(simulation_properties)
{
    for (int seed = 1; seed <= 12; seed++) {
        int n = 3 + seed % 9, b = 1 + seed % 5;
        bin_result r = run_bin(LAB " --simulate --num-requests %d --batch-size %d --seed %d --max-tokens %d", n, b,
                               seed, 5 + seed);
        ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
        int next_prefill = 0, running = 0, waiting = n, done = 0;
        int *seen = calloc((size_t)n, sizeof(int));
        for (char *line = strtok(r.out, "\n"); line; line = strtok(NULL, "\n")) {
            int step, id, k, run;
            double t;
            char rest[512];
            if (sscanf(line, " step %d %lf ms  prefill r%d:%d   (running %d)", &step, &t, &id,
                       &k, &run) == 5) {
                ck_assert_int_eq(id, next_prefill++);
                ck_assert_int_le(run, b);
                running = run;
                waiting--;
            } else if (sscanf(line, " step %d %lf ms  decode %511[^\n]", &step, &t, rest) == 3) {
                /* no decode while a seat is free and a request waits */
                ck_assert_msg(!(waiting > 0 && running < b), "seed %d: decoded with a free "
                              "seat and %d waiting", seed, waiting);
                char *f = strstr(rest, "finished");
                for (char *p = f; p && (p = strstr(p, " r")); p += 2) {
                    int rid, cnt;
                    if (sscanf(p, " r%d(%d)", &rid, &cnt) == 2) {
                        ck_assert(cnt >= 1 && cnt <= 5 + seed);
                        seen[rid]++;
                        done++;
                        running--;
                    }
                }
            }
        }
        ck_assert_int_eq(next_prefill, n);
        ck_assert_int_eq(done, n);
        for (int i = 0; i < n; i++)
            ck_assert_int_eq(seen[i], 1);
        free(seen);
        bin_result_free(&r);
    }
}
END_TEST

/* One step line: rows prefilled and decoded, sequences in the batch. */
static void parse_step(const char *line, int *rows, int *seqs)
{
    *rows = *seqs = 0;
    const char *p = strstr(line, "prefill ");
    const char *d = strstr(line, " decode ");
    const char *f = strstr(line, "finished");
    for (const char *q = p; q && (q = strstr(q, " r")) && q < d; q += 2) {
        int id, n;
        if (sscanf(q, " r%d:%d", &id, &n) == 2)
            *rows += n, (*seqs)++;
    }
    for (const char *q = d + 7; q && (q = strstr(q, " r")) && (!f || q < f); q += 2) {
        int id;
        if (sscanf(q, " r%d", &id) == 1)
            (*rows)++, (*seqs)++;
    }
}

/* The step a request's prefill runs in, and the step it finishes in, from the step lines. */
static void request_steps(const char *out, int id, long *pre, long *fin)
{
    char pk[16], fk[16];
    snprintf(pk, sizeof pk, " r%d:", id);
    snprintf(fk, sizeof fk, " r%d", id);
    *pre = *fin = 0;
    for (const char *p = out; (p = strstr(p, "\n  step ")) != NULL; p++) {
        const char *eol = strchr(p + 1, '\n');
        long step = strtol(p + 8, NULL, 10);
        const char *d = strstr(p, " decode "), *f = strstr(p, "finished");
        if (!eol || !d || d > eol)
            continue;
        const char *q = strstr(p, pk);
        if (q && q < d && !*pre)
            *pre = step;
        if (f && f < eol)
            for (const char *r = f; (r = strstr(r, fk)) && r < eol; r++)
                if (r[strlen(fk)] == ' ' || r[strlen(fk)] == '\n')
                    *fin = step;
    }
}

/* The default run shows continuous batching: its requests ask for different lengths, so
 * the four seats free at different steps, and request 4 is prefilled in the step right
 * after the first of them finished, while the others still decode. --fixed-output is the
 * original's workload, where all four end in one step; --compare sets static batching
 * beside it, whose newcomer waits for the whole batch. */
START_TEST(default_shows_continuous_batching)
{
    bin_result r = run_bin(LAB);
    ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
    long pre[5], fin[5], first = 0, last = 0;
    for (int i = 0; i < 5; i++)
        request_steps(r.out, i, &pre[i], &fin[i]);
    for (int i = 0; i < 4; i++) {
        ck_assert_msg(pre[i] == 1 && fin[i] > 1, "r%d: prefill %ld, finish %ld", i, pre[i],
                      fin[i]);
        first = !first || fin[i] < first ? fin[i] : first;
        last = fin[i] > last ? fin[i] : last;
    }
    ck_assert_msg(first < last, "the four seats all freed in step %ld", first);
    ck_assert_msg(pre[4] == first + 1, "r4 prefilled in step %ld, the first seat freed in %ld",
                  pre[4], first);
    char want[160];
    snprintf(want, sizeof want, "r4 took its seat in step %ld, the very next step", pre[4]);
    ck_assert_msg(strstr(r.out, want), "%s", want);
    /* each request asked for its own length, between a quarter of 20 and 20 */
    int lens = 0;
    for (const char *p = r.out; (p = strstr(p, "), max_tokens ")); p++) {
        int n = atoi(p + 14);
        ck_assert(n >= 5 && n <= 20);
        lens++;
    }
    ck_assert_int_eq(lens, 5);
    bin_result_free(&r);
    /* the original's workload: every request to 20 tokens, the four seats free together */
    r = run_bin(LAB " --fixed-output --temperature 0");
    ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
    for (int i = 0; i < 5; i++)
        request_steps(r.out, i, &pre[i], &fin[i]);
    ck_assert(fin[0] == fin[1] && fin[1] == fin[2] && fin[2] == fin[3]);
    ck_assert(strstr(r.out, "all finished in step"));
    bin_result_free(&r);
    /* continuous against static: static's newcomer waits for the longest of the batch */
    r = run_bin(LAB " --compare");
    ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
    const char *c = strstr(r.out, "\n  continuous "), *s = strstr(r.out, "\n  static ");
    ck_assert(c && s);
    long cs, cl, ss, sl;
    ck_assert(sscanf(c, " continuous %ld %ld", &cs, &cl) == 2);
    ck_assert(sscanf(s, " static %ld %ld", &ss, &sl) == 2);
    ck_assert_int_eq(cl, first + 1);           /* the same steps as the run above */
    ck_assert_int_eq(sl, last + 1);            /* static: after the batch's longest request */
    ck_assert_msg(ss > cs, "static took %ld steps, continuous %ld", ss, cs);
    bin_result_free(&r);
    /* --static alone runs static batching */
    r = run_bin(LAB " --static");
    ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
    request_steps(r.out, 4, &pre[4], &fin[4]);
    ck_assert_int_eq(pre[4], last + 1);
    ck_assert(strstr(r.out, "Static batching: the first 4 requests finished"));
    bin_result_free(&r);
}
END_TEST

START_TEST(engine_run)
{
    bin_result r = run_bin(LAB " --num-requests 8 --batch-size 3 --max-num-batched-tokens 24 --kv-blocks 8 "
                           "--max-tokens 30 --temperature 0");
    ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
    ck_assert_ptr_null(strstr(r.out, "SIMULATION"));
    ck_assert_ptr_nonnull(strstr(r.out, "time to first token      p50"));
    ck_assert_ptr_nonnull(strstr(r.out, "time per output token    p50"));
    ck_assert_ptr_nonnull(strstr(r.out, "end-to-end latency       p50"));
    int steps = 0, reported = 0, preempted = 0, finished = 0;
    long sum = 0, total = -1;
    char *save;
    for (char *line = strtok_r(r.out, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        int step;
        double t;
        if (sscanf(line, " step %d %lf ms", &step, &t) == 2) {
            int rows, seqs;
            parse_step(line, &rows, &seqs);
            ck_assert_msg(rows >= 1 && rows <= 24, "step %d: %d rows", step, rows);
            ck_assert_msg(seqs <= 3, "step %d: %d sequences", step, seqs);
            steps++;
            const char *pre = strstr(line, "preempted");
            preempted += pre != NULL;
            for (const char *p = strstr(line, "finished"); p && (p = strstr(p, " r")) &&
                 (!pre || p < pre); p += 2)
                finished++;
            continue;
        }
        int id, prompt, tok;
        char fin[16];
        if (sscanf(line, " %d %d %d %15s", &id, &prompt, &tok, fin) == 4 &&
            (!strcmp(fin, "length") || !strcmp(fin, "stop"))) {
            ck_assert(tok >= 1 && tok <= 30);
            reported++;
            sum += tok;
        }
        sscanf(line, " tokens generated %ld", &total);
    }
    ck_assert_int_gt(steps, 30);
    ck_assert_int_eq(reported, 8);
    ck_assert_int_eq(finished, 8);
    ck_assert_int_eq(sum, total);
    ck_assert_msg(preempted > 0, "8 blocks for 3 requests of ~50 tokens: expected preemption");
    bin_result_free(&r);
}
END_TEST

START_TEST(bad_input)
{
    const char *bad[] = {"--simulate --eos-prob 2", "--model /nonexistent.bin",
                         "--max-num-seqs 4 --max-num-batched-tokens 2", "-n 0",
                         "--block-size 0"};
    for (int i = 0; i < 5; i++) {
        bin_result r = run_bin(LAB " %s", bad[i]);
        ck_assert_msg(r.status == 2, "'%s': exit %d", bad[i], r.status);
        ck_assert_msg(strlen(r.err) > 0 && strchr(r.err, '\n') == r.err + strlen(r.err) - 1,
                      "'%s': expected one line on stderr, got: %s", bad[i], r.err);
        bin_result_free(&r);
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("ch08");
    TCase *tc = tcase_create("lab");
    tcase_set_timeout(tc, 240);
    tcase_add_test(tc, simulation_golden);
    tcase_add_test(tc, simulation_properties);
    tcase_add_test(tc, engine_run);
    tcase_add_test(tc, default_shows_continuous_batching);
    tcase_add_test(tc, bad_input);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
