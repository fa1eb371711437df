/* test_ch11.c - chapter 11's labs run as a learner runs them: speculative-demo's simulation
 * against the curriculum's closed forms (invariants, p_acc = 0.991667a + 0.45(1 - a), tokens
 * per call (1 - p^k)/(1 - p) at n = 100,000, the edge cases), its real run (the target's greedy
 * tokens exactly under the reference GEMM, tokens per forward within 1..k+1, the timeline spans
 * and plot points in the trace); json-constraint-demo's simulation (the original's allowed-set
 * sizes per state over many seeds) and real run (every constrained output parses); bad input. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#ifdef HAVE_CJSON
#include <cjson/cJSON.h>
#endif
#include "run_bin.h"

#ifdef HAVE_CJSON
static double num_after(const char *s, const char *key)
{
    const char *p = strstr(s, key);
    ck_assert_msg(p, "no '%s' in the output", key);
    return strtod(p + strlen(key), NULL);
}

typedef struct sim_out {
    double tokens, target, draft, accepted, rejected, tpc, eff, speed;
} sim_out;

static sim_out run_sim(const char *args)
{
    bin_result r = run_bin("run ch11/speculative-demo --simulate %s", args);
    ck_assert_msg(r.status == 0, "%s: %s", args, r.err);
    ck_assert(strstr(r.out, "SIMULATION"));
    sim_out s = {
        num_after(r.out, "total tokens:"), num_after(r.out, "target calls:"),
        num_after(r.out, "draft calls:"), num_after(r.out, "accepted drafts:"),
        num_after(r.out, "rejected drafts:"), num_after(r.out, "tokens per target call:"),
        num_after(r.out, "effective acceptance:"), num_after(r.out, "speedup:"),
    };
    bin_result_free(&r);
    return s;
}

START_TEST(speculative_simulation)
{
    /* invariants at the defaults (k 5, n 50, a 0.75, cost 0.1) and a few others */
    static const char *const cases[] = {"", "-k 3 --target-length 77 -a 0.5 --draft-cost 0.2 --seed 9",
                                        "-k 8 --target-length 13 -a 0.9", "-k 1 --target-length 40"};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        sim_out s = run_sim(cases[i]);
        double n = i == 0 ? 50 : i == 1 ? 77 : i == 2 ? 13 : 40;
        double cost = i == 1 ? 0.2 : 0.1;
        ck_assert(s.tokens == n);
        ck_assert(s.draft == s.target);
        ck_assert(s.rejected <= s.target);
        ck_assert(s.accepted + s.rejected == s.tokens);
        ck_assert(fabs(s.tpc - s.tokens / s.target) < 0.006);
        ck_assert(fabs(s.speed - (s.tokens / s.target) / (1 + cost)) < 0.006);
    }
    /* the closed forms at n = 100,000 */
    static const double as[] = {0.5, 0.75, 0.9};
    for (int i = 0; i < 3; i++) {
        char args[64];
        snprintf(args, sizeof args, "--target-length 100000 -a %.2f", as[i]);
        sim_out s = run_sim(args);
        double p = 0.991667 * as[i] + 0.45 * (1 - as[i]);
        double tpc = (1 - pow(p, 5)) / (1 - p);
        printf("simulation a %.2f: acceptance %.2f%% (%.4f), tokens/call %.2f (%.3f)\n", as[i],
               s.eff, p, s.tpc, tpc);
        ck_assert(fabs(s.eff / 100 - p) < 0.01);
        ck_assert(fabs(s.tpc - tpc) < 0.05);
    }
    /* edge cases: a = 1 still refuses sometimes (p/q in [0.9, 1) is a coin), a = 0 often */
    sim_out one = run_sim("--target-length 100000 -a 1.0"), zero = run_sim("--target-length 100000 -a 0.0");
    ck_assert(fabs(one.eff / 100 - 0.991667) < 0.01);
    ck_assert(fabs(zero.eff / 100 - 0.45) < 0.01);
}
END_TEST

START_TEST(speculative_real)
{
    char trace[] = "/tmp/mlsys-test-ch11-XXXXXX";
    int fd = mkstemp(trace);
    ck_assert(fd >= 0);
    close(fd);
    bin_result r = run_bin("run ch11/speculative-demo --gemm ref --prompts 3 --target-length 24 -k 4 "
                           "--sweep 3 --trace %s", trace);
    ck_assert_msg(r.status == 0, "%s", r.err);
    ck_assert(strstr(r.out, "GEMM    ref"));
    /* greedy under the batch-invariant kernel: the target's tokens exactly */
    ck_assert_msg(strstr(r.out, "exactness: 72 of 72 tokens equal"), "%s", r.out);
    double tpf = num_after(r.out, "tokens per target forward");
    double exp_ = num_after(r.out, "expected (1 - a^(k+1)) / (1 - a) =");
    ck_assert(tpf >= 1.0 && tpf <= 5.0 && exp_ >= 1.0 && exp_ <= 5.0);
    ck_assert(strstr(r.out, "acceptance by draft position"));
    /* the sweep: k = 1..3, each exact */
    for (int k = 1; k <= 3; k++) {
        char line[32];
        snprintf(line, sizeof line, "\n  %-3d ", k);
        const char *p = strstr(r.out, line);
        ck_assert_msg(p, "no sweep line for k %d", k);
        const char *eol = strchr(p + 1, '\n');
        ck_assert(eol && strstr(p, "72/72") && strstr(p, "72/72") < eol);
    }
    bin_result_free(&r);
    /* the trace has the engine's draft phases and its verifying forwards as spans, and the
     * sweep as plot points */
    FILE *f = fopen(trace, "r");
    ck_assert(f);
    char *buf = malloc(1 << 22);
    size_t n = fread(buf, 1, (1 << 22) - 1, f);
    buf[n] = 0;
    fclose(f);
    unlink(trace);
    ck_assert(strstr(buf, "\"name\": \"draft\"") || strstr(buf, "\"name\":\"draft\""));
    /* the engine's forward names the sequence it verifies, with its 1 + k rows */
    ck_assert(strstr(buf, "\"name\":\"forward V0:5") || strstr(buf, "\"name\": \"forward V0:5"));
    /* the engine's steps as its STEP records, and its gates */
    ck_assert(strstr(buf, "\"name\":\"step step 1\"") && strstr(buf, "engine step 1"));
    ck_assert(strstr(buf, "plot:tokens per forward") && strstr(buf, "plot:speed-up"));
    free(buf);
}
END_TEST

static int lines_of(const char *s)
{
    int n = 0;
    for (; s && *s; s++)
        n += *s == '\n';
    return n;
}

/* Bad files are read before the rank starts: exit 2 and one line naming the file, whichever
 * of the three it is and whether it is missing or not a model at all. */
START_TEST(speculative_bad_input)
{
    bin_result r = run_bin("run ch11/speculative-demo --draft /nonexistent/draft.bin");
    ck_assert_int_eq(r.status, 2);
    ck_assert(strstr(r.err, "/nonexistent/draft.bin"));
    ck_assert_msg(lines_of(r.err) == 1, "%s", r.err);
    bin_result_free(&r);
    char junk[] = "/tmp/mlsys-test-ch11-junk-XXXXXX";
    int fd = mkstemp(junk);
    ck_assert(fd >= 0);
    ck_assert(write(fd, "not a model at all\n", 19) == 19);
    close(fd);
    static const char *const flags[3] = {"--model", "--draft", "--tokenizer"};
    for (int i = 0; i < 3; i++) {
        r = run_bin("run ch11/speculative-demo %s %s", flags[i], junk);
        ck_assert_msg(r.status == 2, "%s junk: exit %d, %s", flags[i], r.status, r.err);
        ck_assert_msg(strstr(r.err, junk) && lines_of(r.err) == 1, "%s junk: %s", flags[i],
                      r.err);
        bin_result_free(&r);
    }
    unlink(junk);
    r = run_bin("run ch11/speculative-demo -k 0");
    ck_assert_int_eq(r.status, 2);
    bin_result_free(&r);
    r = run_bin("run ch11/speculative-demo -k 17");
    ck_assert_int_eq(r.status, 2);
    bin_result_free(&r);
}
END_TEST

/* The original's allowed-set sizes per state (curriculum 11.3). */
static int table_size(const char *state)
{
    static const struct { const char *s; int n; } t[] = {
        {"START", 2}, {"OBJECT_START", 5}, {"OBJECT_KEY", 4}, {"OBJECT_COLON", 1},
        {"OBJECT_VALUE", 11}, {"OBJECT_COMMA", 2}, {"ARRAY_START", 12}, {"ARRAY_VALUE", 11},
        {"ARRAY_COMMA", 2},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
        if (!strcmp(t[i].s, state))
            return t[i].n;
    return -1;
}

static int parses(const char *s)
{
    cJSON *j = cJSON_ParseWithOpts(s, NULL, 1);
    int ok = j != NULL;
    cJSON_Delete(j);
    return ok;
}

START_TEST(json_simulation)
{
    int steps = 0, complete = 0, seen[16] = {0};
    for (int seed = 1; seed <= 40; seed++) {
        bin_result r = run_bin("run ch11/json-constraint-demo --simulate --seed %d", seed);
        ck_assert_int_eq(r.status, 0);
        ck_assert(strstr(r.out, "SIMULATION"));
        for (const char *p = r.out; (p = strstr(p, "\nstep ")); p++) {
            char state[32];
            int k, allowed, masked;
            ck_assert(sscanf(p, "\nstep %d %31s allowed %d, masked %d", &k, state, &allowed,
                             &masked) == 4);
            int want = table_size(state);
            ck_assert_msg(want == allowed, "seed %d: %s allows %d, the table says %d", seed,
                          state, allowed, want);
            ck_assert_int_eq(masked, 17 - allowed);
            seen[want]++;
            steps++;
        }
        /* a walkthrough that reached DONE is strict JSON */
        const char *j = strstr(r.out, "\nJSON: ");
        ck_assert(j);
        char text[512];
        ck_assert(sscanf(j, "\nJSON: %511s", text) == 1);
        if (strstr(j, "complete, cJSON parses it")) {
            ck_assert(parses(text));
            complete++;
        }
        ck_assert(!strstr(r.out, "complete, but cJSON refuses it"));
        bin_result_free(&r);
    }
    printf("json simulation: %d steps over 40 seeds, %d complete walkthroughs\n", steps,
           complete);
    ck_assert(steps > 100 && complete > 0);
    ck_assert(seen[2] && seen[5] && seen[1] && seen[11]);
}
END_TEST

START_TEST(json_real)
{
    bin_result r = run_bin("run ch11/json-constraint-demo --runs 10 --max-tokens 40");
    ck_assert_msg(r.status == 0, "%s", r.err);
    ck_assert(strstr(r.out, "constrained      10 of 10 (100.0%)"));
    ck_assert(strstr(r.out, "  -> cJSON parses it"));
    ck_assert(strstr(r.out, "mask") && strstr(r.out, "of the decode time per token"));
    ck_assert(strstr(r.out, "step  1  value"));
    bin_result_free(&r);
    /* a schema, and a prompt that opens the JSON itself */
    r = run_bin("run ch11/json-constraint-demo --runs 0 --schema name:string,age:integer "
                "--prompt 'Once upon a time'");
    ck_assert_msg(r.status == 0, "%s", r.err);
    const char *o = strstr(r.out, "\noutput: ");
    ck_assert(o);
    char text[1024];
    const char *eol = strchr(o + 9, '\n');
    snprintf(text, sizeof text, "%.*s", (int)(eol - o - 9), o + 9);
    cJSON *j = cJSON_ParseWithOpts(text, NULL, 1);
    ck_assert_msg(j, "%s", text);
    ck_assert(cJSON_IsString(cJSON_GetObjectItemCaseSensitive(j, "name")));
    ck_assert(cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(j, "age")));
    cJSON_Delete(j);
    bin_result_free(&r);
    r = run_bin("run ch11/json-constraint-demo --runs 0 --prompt '{\"name\": \"'");
    ck_assert_msg(r.status == 0, "%s", r.err);
    o = strstr(r.out, "\noutput: ");
    ck_assert(o && !strncmp(o + 9, "{\"name\": \"", 10));
    bin_result_free(&r);
    /* bad input */
    r = run_bin("run ch11/json-constraint-demo --schema name:text");
    ck_assert_int_eq(r.status, 2);
    ck_assert(strstr(r.err, "text"));
    bin_result_free(&r);
    r = run_bin("run ch11/json-constraint-demo --schema a:string,b:string,c:string,d:string,"
                "e:string,f:string,g:string --max-tokens 8");
    ck_assert_int_eq(r.status, 2);
    ck_assert(strstr(r.err, "shortest"));
    bin_result_free(&r);
}
END_TEST

#endif

int main(void)
{
#ifndef HAVE_CJSON
    printf("skipped: built without cJSON (libcjson-dev), which checks the outputs\n");
    return 0;
#else
    Suite *s = suite_create("ch11");
    TCase *tc = tcase_create("labs");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, speculative_simulation);
    tcase_add_test(tc, speculative_real);
    tcase_add_test(tc, speculative_bad_input);
    tcase_add_test(tc, json_simulation);
    tcase_add_test(tc, json_real);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed != 0;
#endif
}
