/* test_exercises_infer.c - chapters 6-10's exercises beside what they teach: the kinds each
 * chapter has; the 1F1B solution is the lab's schedule and the block-hash solution the
 * engine's hash (compiled in from assets/exercises/); predict answers recomputed from the
 * question text; experiment answers that break the formulas refused, naming the rule.
 * (dev-check, in test_exercises, proves that starters fail and solutions pass.) */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../../lab/exercise/exercise.h"
#include "../../chapters/ch07/schedule.h"
#include "../../core/llm/engine.h"

/* the reference solutions, as the learner's file would be compiled */
#include "../../assets/exercises/ch07-1f1b/solution.c"
#undef EX_API_H
#include "../../assets/exercises/ch09-block-hash/solution.c"

START_TEST(test_kinds_per_chapter)
{
    static const char *const ids[] = {
        "ch06-tp-linear", "ch07-1f1b", "ch08-admission", "ch08-predict-kv-size",
        "ch08-trace-request", "ch09-block-alloc", "ch09-block-hash", "ch09-predict-kv-bytes",
        "ch09-prefix-sharing", "ch10-graph-buckets", "ch10-predict-launch",
        "ch10-dispatch-overhead", "ch10-overlap", NULL};
    for (int i = 0; ids[i]; i++) {
        const exercise *ex = ex_find(ids[i]);
        ck_assert_msg(ex != NULL, "missing %s", ids[i]);
        ck_assert_int_eq(ex->chapter, atoi(ids[i] + 2));
        ck_assert_msg(ex->hints && ex->hints[0] && ex->hints[1], "%s: fewer than 2 hints", ids[i]);
    }
    for (int ch = 6; ch <= 10; ch++) {
        int k[3] = {0};
        for (int i = 0; i < ex_count(); i++)
            if (ex_at(i)->chapter == ch)
                k[ex_at(i)->kind]++;
        ck_assert_msg(k[EX_IMPLEMENT] >= 1, "chapter %d has no implement exercise", ch);
        if (ch >= 8)
            ck_assert_msg(k[EX_PREDICT] >= 1 && k[EX_EXPERIMENT] >= 1,
                          "chapter %d: %d predict, %d experiment", ch, k[EX_PREDICT],
                          k[EX_EXPERIMENT]);
    }
}
END_TEST

/* The solution's schedule is the lab's 1F1B, task for task and slot for slot. */
START_TEST(test_1f1b_solution_is_the_generator)
{
    for (int P = 1; P <= 8; P++)
        for (int M = 1; M <= 16; M++) {
            pp_task *t = malloc(sizeof(pp_task) * (size_t)P * 2 * M);
            ck_assert_ptr_nonnull(t);
            ck_assert_int_eq(build_1f1b(P, M, t), 0);
            schedule s;
            char err[256];
            ck_assert_int_eq(sched_build(&s, SCHED_1F1B, P, M, 1, err, sizeof err), 0);
            for (int st = 0; st < P; st++) {
                ck_assert_int_eq(s.n[st], 2 * M);
                for (int k = 0; k < 2 * M; k++) {
                    const sched_op *o = &s.ops[st][k];
                    const pp_task *x = &t[(size_t)st * 2 * M + k];
                    ck_assert_msg(o->kind == x->kind && o->mb == x->mb && o->t0 == x->slot,
                                  "P=%d M=%d stage %d task %d: lab %c%d@%d, solution %c%d@%d",
                                  P, M, st, k, o->kind, o->mb, o->t0, x->kind, x->mb, x->slot);
                }
            }
            ck_assert_int_eq(s.total, 2 * (M + P - 1));
            sched_free(&s);
            free(t);
        }
}
END_TEST

START_TEST(test_block_hash_solution_is_the_engines)
{
    mlsys_rng g;
    mlsys_rng_seed(&g, 99);
    int tok[16];
    uint64_t a = ROOT_HASH, b = LLM_PAGED_ROOT_HASH;
    ck_assert(a == b);
    for (int i = 0; i < 200; i++) {
        int n = 1 + (int)(mlsys_rng_u64(&g) % 16);
        for (int k = 0; k < n; k++)
            tok[k] = (int)(mlsys_rng_u64(&g) % 70000) - (i % 7 == 0 ? 5 : 0);
        a = block_hash(a, tok, n);
        b = llm_paged_hash(b, tok, n);
        ck_assert_msg(a == b, "block %d: %016llx vs the engine's %016llx", i,
                      (unsigned long long)a, (unsigned long long)b);
    }
}
END_TEST

static double num_after(const char *s, const char *key)
{
    const char *p = strstr(s, key);
    ck_assert_msg(p != NULL, "'%s' not in: %s", key, s);
    return strtod(p + strlen(key), NULL);
}

static void judge(const exercise *ex, uint64_t seed, double x, int pass)
{
    char a[64];
    snprintf(a, sizeof a, "%.17g", x);
    ex_verdict v;
    ex_verdict_init(&v);
    int r = exercise_predict_judge(ex, seed, a, &v);
    ck_assert_msg(r == (pass ? EX_PASS : EX_FAIL), "%s seed %llu answer %s: %s (%s)", ex->id,
                  (unsigned long long)seed, a, pass ? "rejected" : "accepted", v.summary);
    ex_verdict_free(&v);
}

/* KV bytes recomputed from the question: 2 · layers · KV heads · head_dim · bytes. */
START_TEST(test_predict_kv_answers)
{
    const exercise *k8 = ex_find("ch08-predict-kv-size"), *k9 = ex_find("ch09-predict-kv-bytes");
    for (uint64_t seed = 1; seed <= 60; seed++) {
        ex_question q;
        exercise_predict_draw(k8, seed, &q);
        double L = num_after(q.text, "model with "), H = num_after(q.text, "hidden size ");
        double NH;
        const char *h = strstr(q.text, "attention heads");
        ck_assert_ptr_nonnull(h);
        while (h > q.text && h[-1] == ' ')
            h--;
        while (h > q.text && h[-1] >= '0' && h[-1] <= '9')
            h--;
        NH = atof(h);
        double ctx = num_after(q.text, "Its context is "), gb = num_after(q.text, "tokens, and ");
        double tok = 2 * L * NH * (H / NH) * 2, req = tok * ctx;
        double want = strstr(q.text, "one token") ? tok : strstr(q.text, "one request") ? req :
                      floor(gb * 1e9 / req);
        judge(k8, seed, want, 1);
        judge(k8, seed, want + (want > 10 ? want * 0.01 : 1), 0);
        exercise_predict_draw(k9, seed, &q);
        double l9 = num_after(q.text, " has "), kv = num_after(q.text, "layers and ");
        double hd = num_after(q.text, "heads of dimension "), w = num_after(q.text, "holds ");
        double bpe = strstr(q.text, "FP8") ? 1 : 2, t9 = 2 * l9 * kv * hd * bpe;
        double c9 = strstr(q.text, "full context of ") ? num_after(q.text, "full context of ") : 0;
        double want9 = c9 > 0 ? floor((80 - w - 2) * 1e9 / (t9 * c9)) : t9;
        judge(k9, seed, want9, 1);
        judge(k9, seed, c9 > 0 ? want9 + 1 : t9 * 2, 0);   /* query heads counted: GQA missed */
    }
}
END_TEST

/* Launch overhead and overlap recomputed from the question text. */
START_TEST(test_predict_launch_answers)
{
    const exercise *ex = ex_find("ch10-predict-launch");
    int seen[4] = {0};
    for (uint64_t seed = 1; seed <= 90; seed++) {
        ex_question q;
        exercise_predict_draw(ex, seed, &q);
        if (strstr(q.text, "kernels one by one")) {
            double k = num_after(q.text, "launches "), l = num_after(q.text, "costs ");
            double c = num_after(q.text, "adds up to ");
            int speed = strstr(q.text, "speed-up") != NULL;
            double want = speed ? (k * l + c) / (l + c) : k * l + c;
            seen[speed]++;
            judge(ex, seed, want, 1);
            judge(ex, seed, speed ? (k * l + c) / c : k * l, 0);
        } else {
            double n = num_after(q.text, "runs "), s = num_after(q.text, "needs ");
            double c = num_after(q.text, "scheduling, then "), p = num_after(q.text, "compute, then ");
            /* the original's loop keeps post-processing on the critical path,
             * (N-1)(max(s, c) + p); SGLang's hides it under the next forward, max(c, s + p) */
            int sglang = strstr(q.text, "SGLang") != NULL;
            double orig = (s + c + p) + (n - 1) * (fmax(s, c) + p);
            double sgl = (s + c + p) + (n - 1) * fmax(c, s + p);
            double seq = n * (s + c + p), ovl = sglang ? sgl : orig, other = sglang ? orig : sgl;
            seen[2 + sglang]++;
            judge(ex, seed, seq / ovl, 1);
            /* wrong answers, where they are more than 1 % off: a steady state taken for the
             * whole run, and the other loop's formula */
            double wrong[2] = {seq / (n * (fmax(s, c) + p)) * 1.05, seq / other};
            for (int w = 0; w < 2; w++)
                if (fabs(wrong[w] - seq / ovl) > 0.01 * seq / ovl)
                    judge(ex, seed, wrong[w], 0);
        }
    }
    ck_assert(seen[0] && seen[1] && seen[2] && seen[3]);
}
END_TEST

static char g_dir[PATH_MAX];

static void expect_answers(const char *id, const char *text, const char *needle)
{
    ex_context cx;
    char err[512];
    ck_assert_msg(ex_context_init(&cx, err, sizeof err) == 0, "%s", err);
    char path[PATH_MAX + 16];
    snprintf(path, sizeof path, "%s/answers.txt", g_dir);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    fclose(f);
    ex_verdict v;
    exercise_check_file(&cx, ex_find(id), path, 0, &v);
    ck_assert_msg(v.result == EX_FAIL, "%s with\n%s: %s", id, text, v.summary);
    ck_assert_msg(strstr(v.summary, needle) != NULL, "%s: '%s' not in: %s", id, needle,
                  v.summary);
    ex_verdict_free(&v);
}

/* Answers that break the formulas fail before any lab runs, saying which rule they break. */
START_TEST(test_experiment_answers_refused)
{
    snprintf(g_dir, sizeof g_dir, "%s/mlsys-ex-infer-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") :
             "/tmp");
    ck_assert_ptr_nonnull(mkdtemp(g_dir));
    setenv("MLSYS_LAB_HOME", g_dir, 1);
    setenv("XDG_STATE_HOME", g_dir, 1);
    static const char prefix_ok[] = "tokens_found = 6336\nrows_with_cache = 2464\n"
        "rows_without_cache = 8800\nformula_saved_percent = 81.0\n";
    char buf[512];
    snprintf(buf, sizeof buf, "found_per_request = 72\n%s", prefix_ok);   /* partial block */
    expect_answers("ch09-prefix-sharing", buf, "FULL blocks");
    expect_answers("ch09-prefix-sharing", "found_per_request = 64\ntokens_found = 6400\n"
                   "rows_with_cache = 2400\nrows_without_cache = 8800\nformula_saved_percent = "
                   "81.0\n", "every request but the first");
    expect_answers("ch09-prefix-sharing", "found_per_request = 64\ntokens_found = 6336\n"
                   "rows_with_cache = 2464\nrows_without_cache = 8800\nformula_saved_percent = "
                   "82.5\n", "1 - (S + N x U)");
    /* the times of a request must add up: latency = TTFT + (tokens - 1) x TPOT */
    expect_answers("ch08-trace-request", "prefill_step = 41\ndecode_steps = 19\nfinish_step = 60\n"
                   "waited_for = seat\nprefill_rows = 26\nnext_step_rows = 2\ntokens = 20\n"
                   "ttft_ms = 42.03\ntpot_ms = 0.45\nlatency_ms = 60.0\n", "ttft_ms + (tokens - 1)");
    /* the dispatch figures must follow from the two times, within their rounding */
    static const char disp[] = "eager_us = 0.83\nplan_us = 0.72\nspeedup = %s\nremoved_per_op_us "
        "= %s\nremoved_percent = %s\nsaving_min_us = %s\nsaving_max_us = 0.14\n"
        "small_within_noise = %s\noutputs_equal = yes\nlarge_removed_percent = -1.9\n"
        "large_saving_min_us = -152.78\nlarge_saving_max_us = 92.15\nlarge_within_noise = %s\n"
        "pays_most = %s\n";
    snprintf(buf, sizeof buf, disp, "1.5", "0.023", "13.8", "0.10", "no", "yes", "small");
    expect_answers("ch10-dispatch-overhead", buf, "speedup is eager / plan");
    snprintf(buf, sizeof buf, disp, "1.16", "0.11", "13.8", "0.10", "no", "yes", "small");
    expect_answers("ch10-dispatch-overhead", buf, "(eager - plan) / 5 ops");   /* not per op */
    snprintf(buf, sizeof buf, disp, "1.16", "0.023", "15.3", "0.10", "no", "yes", "small");
    expect_answers("ch10-dispatch-overhead", buf, "100 x (eager - plan) / eager"); /* of plan */
    /* the large model's difference crosses 0 over the repeats: noise, not a saving */
    snprintf(buf, sizeof buf, disp, "1.16", "0.023", "13.8", "0.10", "no", "no", "small");
    expect_answers("ch10-dispatch-overhead", buf, "that is within noise");
    snprintf(buf, sizeof buf, disp, "1.16", "0.023", "13.8", "0.10", "no", "yes", "large");
    expect_answers("ch10-dispatch-overhead", buf, "pays_most = large");
    /* a small saving that also crosses 0 is noise too, and then the plan shows nothing */
    snprintf(buf, sizeof buf, disp, "1.16", "0.023", "13.8", "-0.02", "no", "yes", "small");
    expect_answers("ch10-dispatch-overhead", buf, "that is within noise");
    snprintf(buf, sizeof buf, disp, "1.16", "0.023", "13.8", "-0.02", "yes", "yes", "small");
    expect_answers("ch10-dispatch-overhead", buf, "neither");
    snprintf(buf, sizeof buf, disp, "1.16", "0.023", "13.8", "0.13", "no", "yes", "small");
    expect_answers("ch10-dispatch-overhead", buf, "lies between");   /* 0.11 below the least */
    char cmd[PATH_MAX + 16];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    ck_assert_int_eq(system(cmd), 0);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("exercises_infer");
    TCase *t = tcase_create("exercises_infer");
    tcase_set_timeout(t, 60);
    tcase_add_test(t, test_kinds_per_chapter);
    tcase_add_test(t, test_1f1b_solution_is_the_generator);
    tcase_add_test(t, test_block_hash_solution_is_the_engines);
    tcase_add_test(t, test_predict_kv_answers);
    tcase_add_test(t, test_predict_launch_answers);
    tcase_add_test(t, test_experiment_answers_refused);
    suite_add_tcase(s, t);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
