/* ch11_exercises.c - Chapter 11's exercises: the speculative acceptance rule (greedy exactly,
 * sampling statistically) and the JSON mask step, both the learner's version of a core/llm
 * seam; the speed-up of a draft length and cost (predict); acceptance, tokens per target
 * call and the best k measured on speculative-demo's simulator (experiment); viable-prefix
 * recognisers for three grammars (implement). */
#include "../../lab/exercise/exercise.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const int sizes_1[] = {1, 0};

/* ---- ch11-spec-accept (implement) ---- */

static const char *const spec_hints[] = {
    "The draft drew x with probability q(x). If you keep it with probability min(1, p(x)/q(x)), "
    "how often does a kept x come out, in total, and how much of p(x) is still missing?",
    "One uniform u in [0, 1) decides: which comparison keeps x exactly with probability "
    "p(x)/q(x), and why does it need no division?",
    "At a refusal, the missing mass is max(0, p - q) token by token. Why must the replacement "
    "never be a token where p <= q (the drafted x included)?",
    "With one-hot p and q (temperature 0), what does your rule do when the draft's token is the "
    "target's argmax, and what when it is not?",
    NULL
};

static const ex_implement spec_impl = {
    .function = "spec_accept", .world_sizes = sizes_1, .timeout_ms = 5000, .limit_ms = 60000,
};

static const exercise ch11_spec_accept = {
    .id = "ch11-spec-accept",
    .chapter = 11,
    .kind = EX_IMPLEMENT,
    .title = "Speculative decoding's acceptance rule",
    .task = "Write spec_accept(): keep the drafted token with probability min(1, p/q), else "
            "draw its replacement from norm(max(0, p - q)), so that the committed tokens follow "
            "the target's distribution exactly (greedy: exactly the target's argmax).",
    .hints = spec_hints,
    .lab = "ch11/speculative-demo",
    .starter = "starter.c",
    .solution = "solution.c",
    .workfile = "spec_accept.c",
    .impl = &spec_impl,
};

/* ---- ch11-json-mask (implement) ---- */

static const char *const mask_hints[] = {
    "llm_json_feed_token changes the state it is given when the token fits. Which state must "
    "you hand it, so that trying token 5 does not spoil the try of token 6?",
    "A budget of 3 tokens, this one included, leaves how many after it? Every token writes at "
    "least one byte: how many bytes can those tokens write at the least, and what must "
    "llm_json_min_close be after this token?",
    "What does budget <= 0 mean, and does the closing distance matter then?",
    "The end-of-text token has no bytes: feeding it always fails. When may the decoder still "
    "draw it?",
    NULL
};

static const ex_implement mask_impl = {
    .function = "json_mask", .world_sizes = sizes_1, .timeout_ms = 5000, .limit_ms = 60000,
};

static const exercise ch11_json_mask = {
    .id = "ch11-json-mask",
    .chapter = 11,
    .kind = EX_IMPLEMENT,
    .title = "The mask step of JSON-constrained decoding",
    .task = "Write json_mask(): from the automaton's state, allow exactly the tokens whose bytes "
            "continue valid JSON and after which the text can still be closed within the token "
            "budget, and the end-of-text token once the value is complete.",
    .hints = mask_hints,
    .lab = "ch11/json-constraint-demo",
    .starter = "starter.c",
    .solution = "solution.c",
    .workfile = "json_mask.c",
    .impl = &mask_impl,
};

/* ---- ch11-predict-speedup (predict) ---- */

static double expected_tokens(double a, int k)
{
    return a < 1.0 ? (1.0 - pow(a, k + 1)) / (1.0 - a) : k + 1.0;
}

static void draw_speedup(uint64_t seed, ex_question *q)
{
    mlsys_rng g;
    mlsys_rng_seed(&g, seed);
    static const double costs[] = {0.02, 0.05, 0.1};
    double a = 0.05 * (double)ex_draw_int(&g, 12, 18);
    int k = (int)ex_draw_int(&g, 2, 8);
    double c = costs[ex_draw_int(&g, 0, 2)];
    double e = expected_tokens(a, k), sp = e / (1.0 + k * c);
    snprintf(q->text, sizeof q->text,
             "A draft model proposes k = %d tokens per round; each draft is kept with "
             "probability %.2f independently, until the first refusal, and a round where all %d "
             "are kept adds a bonus token from the target. One draft call costs %.0f %% of a "
             "target forward. What speed-up over decoding with the target alone does "
             "speculation give (expected tokens per round / cost of a round in target "
             "forwards)? Two decimals.", k, a, k, 100.0 * c);
    q->answer = sp;
    q->rel_tol = 0.0;
    q->abs_tol = 0.006;
    snprintf(q->unit, sizeof q->unit, "x");
    snprintf(q->explain, sizeof q->explain,
             "Tokens per round: 1 + a + ... + a^k = (1 - %.2f^%d) / (1 - %.2f) = %.3f (without "
             "the bonus token (1 - a^k)/(1 - a) = %.3f). A round costs one target forward plus "
             "%d draft calls: 1 + %d x %.2f = %.2f. Speed-up %.3f / %.2f = %.2fx.", a, k + 1, a,
             e, a < 1.0 ? (1.0 - pow(a, k)) / (1.0 - a) : (double)k, k, k, c, 1.0 + k * c, e,
             1.0 + k * c, sp);
}

static const char *const speedup_hints[] = {
    "A round always yields at least one token (the replacement, or the bonus). With what "
    "probability does it yield a second, a third, ...?",
    "Summing 1 + a + a^2 + ... + a^k: which closed form does a geometric series have?",
    "What does a round cost in units of one target forward, counting k draft calls?",
    NULL
};

static const exercise ch11_predict_speedup = {
    .id = "ch11-predict-speedup",
    .chapter = 11,
    .kind = EX_PREDICT,
    .title = "Speed-up of speculative decoding for an acceptance rate, k and draft cost",
    .task = "Predict the expected speed-up (1 - a^(k+1)) / ((1 - a)(1 + k·c)) for a drawn "
            "acceptance rate a, draft length k and draft cost c.",
    .hints = speedup_hints,
    .lab = "ch11/speculative-demo",
    .draw = draw_speedup,
};

/* ---- ch11-acceptance-k (experiment) ---- */

#define SIM_ARGS "--simulate", "-a", "0.7", "--target-length", "100000"
#define SIM_CMD "mlsys-lab run ch11/speculative-demo --simulate -a 0.7 --target-length 100000"

/* Run the simulator with -k k; its effective acceptance (a fraction) and tokens per call. */
static int run_sim(const ex_context *cx, int k, double *alpha, double *tpc, ex_verdict *v)
{
    if (!cx->bin[0]) {
        ex_verdict_set(v, EX_ERROR, EXF_SETUP, "cannot find the mlsys-lab program to run "
                       "ch11/speculative-demo (set MLSYS_LAB_BIN)");
        return -1;
    }
    char ks[8];
    snprintf(ks, sizeof ks, "%d", k);
    char *argv[] = {(char *)cx->bin, "run", "ch11/speculative-demo", SIM_ARGS, "-k", ks, NULL};
    char *out = NULL;
    int st = 0;
    const char *p = NULL, *q = NULL;
    if (ex_run_capture(argv, 60000, &out, &st) == 0 && st == 0) {
        p = strstr(out, "tokens per target call:");
        q = strstr(out, "effective acceptance:");
    }
    if (!p || !q || sscanf(p, "tokens per target call: %lf", tpc) != 1 ||
        sscanf(q, "effective acceptance: %lf", alpha) != 1) {
        ex_verdict_set(v, EX_ERROR, EXF_SETUP, "`" SIM_CMD " -k %d` failed or printed no "
                       "statistics (status %d)", k, st);
        free(out);
        return -1;
    }
    *alpha /= 100.0;
    free(out);
    return 0;
}

static int best_k(double a, double c, double *best_val)
{
    int best = 1;
    *best_val = 0.0;
    for (int k = 1; k <= 16; k++) {
        double s = expected_tokens(a, k) / (1.0 + k * c);
        if (s > *best_val) {
            *best_val = s;
            best = k;
        }
    }
    return best;
}

static int check_acceptance(const ex_context *cx, const exercise *ex, const char *file,
                            ex_verdict *v)
{
    (void)ex;
    static const char *const yn[] = {"no", "yes", NULL};
    ex_answers an;
    char err[512];
    if (ex_answers_read(file, &an, err, sizeof err) != 0) {
        ex_verdict_set(v, EX_ERROR, EXF_SETUP, "%s", err);
        return v->result;
    }
    double alpha, t2, t8, f8, bk;
    int bonus;
    if (ex_answer_number(&an, "alpha", &alpha, v) ||
        ex_answer_number(&an, "tokens_per_call_k2", &t2, v) ||
        ex_answer_number(&an, "tokens_per_call_k8", &t8, v) ||
        ex_answer_number(&an, "formula_k8", &f8, v) ||
        ex_answer_choice(&an, "bonus", yn, &bonus, v) ||
        ex_answer_number(&an, "best_k", &bk, v))
        return v->result;
    if (!(alpha > 0.0 && alpha < 1.0)) {
        ex_verdict_set(v, EX_FAIL, EXF_ANSWER, "alpha = %g: the acceptance is a fraction between "
                       "0 and 1 (the lab prints a percentage)", alpha);
        return v->result;
    }
    double la2, lt2, la8, lt8;
    if (run_sim(cx, 2, &la2, &lt2, v) || run_sim(cx, 8, &la8, &lt8, v))
        return v->result;
    if (fabs(alpha - la8) > 0.0002) {
        ex_verdict_set(v, EX_FAIL, EXF_ANSWER, "alpha = %.4f, but the run with -k 8 measures an "
                       "effective acceptance of %.4f", alpha, la8);
        return v->result;
    }
    if (fabs(t2 - lt2) > 0.006 || fabs(t8 - lt8) > 0.006) {
        int which = fabs(t2 - lt2) > 0.006 ? 2 : 8;
        ex_verdict_set(v, EX_FAIL, EXF_ANSWER, "tokens_per_call_k%d = %.2f, but the run with -k "
                       "%d measures %.2f", which, which == 2 ? t2 : t8, which,
                       which == 2 ? lt2 : lt8);
        return v->result;
    }
    double nb = (1.0 - pow(alpha, 8)) / (1.0 - alpha), wb = expected_tokens(alpha, 8);
    if (fabs(f8 - nb) > 0.01 * nb) {
        ex_verdict_set(v, EX_FAIL, EXF_ANSWER, "formula_k8 = %.3f: with your alpha, "
                       "(1 - a^8)/(1 - a) = %.3f and (1 - a^9)/(1 - a) = %.3f; the measured %.2f "
                       "tokens per call follows %s", f8, nb, wb, t8,
                       fabs(t8 - nb) < fabs(t8 - wb) ? "the first" : "the second");
        return v->result;
    }
    if (bonus) {
        ex_verdict_set(v, EX_FAIL, EXF_ANSWER, "bonus = yes, but the measured %.2f tokens per "
                       "call at k = 8 matches (1 - a^8)/(1 - a) = %.3f, not 1 + a + ... + a^8 = "
                       "%.3f", t8, nb, wb);
        return v->result;
    }
    double val, val_k;
    int want = best_k(alpha, 0.05, &val);
    int k = (int)bk;
    val_k = k >= 1 && k <= 16 ? expected_tokens(alpha, k) / (1.0 + 0.05 * k) : 0.0;
    if (bk != (double)k || val_k < val * (1.0 - 1e-4)) {
        ex_verdict_set(v, EX_FAIL, EXF_ANSWER, "best_k = %g: with a bonus token and draft cost "
                       "0.05, k = %d gives %.3fx%s, k = %d gives %.3fx", bk, k, val_k,
                       k >= 1 && k <= 16 ? "" : " (k is 1..16)", want, val);
        return v->result;
    }
    ex_verdict_set(v, EX_PASS, EXF_NONE, "alpha %.4f: %.2f tokens per call at k = 2, %.2f at "
                   "k = 8, best k %d with a bonus token and draft cost 0.05", la8, lt2, lt8, want);
    ex_verdict_add(v, "The simulator keeps drafts at a rate of its own (%.4f at k = 2, %.4f at "
                   "k = 8: the rate does not depend on k) and adds no bonus token, so it "
                   "follows (1 - a^k)/(1 - a). With the bonus (the real engine adds it) each "
                   "round yields one token more, up to k + 1.", la2, la8);
    ex_verdict_add(v, "Past the best k each extra draft is kept with probability a^k, "
                   "too small to pay for its own cost.");
    return v->result;
}

static const char *const acceptance_hints[] = {
    "Which lines of the simulator's output give the effective acceptance and the tokens per "
    "target call? Is the acceptance printed as a fraction or a percentage?",
    "At k = 8, is the measured tokens per call closer to (1 - a^8)/(1 - a) or to "
    "(1 - a^9)/(1 - a)? What does that say about a round where all 8 are kept?",
    "For the best k, tabulate (1 - a^(k+1)) / ((1 - a)(1 + 0.05 k)) for k = 1..16: where does "
    "it stop growing?",
    NULL
};

static const exercise ch11_acceptance_k = {
    .id = "ch11-acceptance-k",
    .chapter = 11,
    .kind = EX_EXPERIMENT,
    .title = "Acceptance, tokens per target call and the best draft length",
    .task = "Run `" SIM_CMD "` with -k 2 and with -k 8; report the effective acceptance, "
            "tokens per target call, which formula the measurement follows, whether the "
            "simulator adds a bonus token, and the best k with a bonus token at draft cost 0.05.",
    .hints = acceptance_hints,
    .lab = "ch11/speculative-demo",
    .starter = "starter.txt",
    .solution = "solution.txt",
    .workfile = "answers.txt",
    .check = check_acceptance,
};

/* ---- ch11-grammars (implement) ---- */

static const char *const grammar_hints[] = {
    "After \"def\", what may come next, and what may not? Draw the states of the Python "
    "header as boxes and its bytes as arrows: how many boxes do you need?",
    "Which states are matches, and which only viable? Can any state you reach by valid bytes "
    "be a dead end?",
    "The e-mail's last label must be letters only, at least two. What do you have to remember "
    "about the label you are in, beyond which state you are in?",
    "The phone numbers come in four fixed shapes. Is the input a prefix of at least one of "
    "them, or equal to one?",
    NULL
};

static const ex_implement grammar_impl = {
    .function = "grammar_check", .world_sizes = sizes_1, .timeout_ms = 5000, .limit_ms = 30000,
};

static const exercise ch11_grammars = {
    .id = "ch11-grammars",
    .chapter = 11,
    .kind = EX_IMPLEMENT,
    .title = "Grammars for constrained decoding: a Python header, an e-mail, a phone number",
    .task = "Write grammar_check(): for a Python function header, an e-mail address and a US "
            "phone number, say whether a partial output is dead, still viable, or a match - "
            "what a constrained decoder needs after every token.",
    .hints = grammar_hints,
    .lab = "ch11/json-constraint-demo",
    .starter = "starter.c",
    .solution = "solution.c",
    .workfile = "grammars.c",
    .impl = &grammar_impl,
};

const exercise *const ch11_exercises[] = {
    &ch11_predict_speedup,
    &ch11_spec_accept,
    &ch11_acceptance_k,
    &ch11_json_mask,
    &ch11_grammars,
    NULL
};
