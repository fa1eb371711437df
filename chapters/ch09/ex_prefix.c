/* ex_prefix.c - Chapter 9's experiment: prefix sharing on the lab's engine with a system
 * prompt that does not fill whole blocks (prefix-sharing-demo --engine-system-len 72): the
 * tokens each later request finds, the prompt rows with and without the prefix cache, and
 * the formula's saving. The answers are held to the formulas for N = 100, S = 72, U = 16 and
 * blocks of 16; the lab is run to see that it prints the same. */
#include "../../lab/exercise/exercise.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PREFIX_CMD "mlsys-lab run ch09/prefix-sharing-demo --engine-system-len 72"
#define N_REQ 100
#define SYS 72
#define USER 16
#define BLOCK 16

static int check_prefix(const ex_context *cx, const exercise *ex, const char *file,
                        ex_verdict *v)
{
    (void)ex;
    ex_answers a;
    char err[512];
    if (ex_answers_read(file, &a, err, sizeof err) != 0) {
        ex_verdict_set(v, EX_ERROR, EXF_SETUP, "%s", err);
        return v->result;
    }
    double found, total, with, without, pct;
    if (ex_answer_number(&a, "found_per_request", &found, v) ||
        ex_answer_number(&a, "tokens_found", &total, v) ||
        ex_answer_number(&a, "rows_with_cache", &with, v) ||
        ex_answer_number(&a, "rows_without_cache", &without, v) ||
        ex_answer_number(&a, "formula_saved_percent", &pct, v))
        return v->result;
    const long f = SYS / BLOCK * BLOCK, t = (long)(N_REQ - 1) * f;
    const long wo = (long)N_REQ * (SYS + USER), w = wo - t;
    const double p = 100.0 * (1.0 - (double)(SYS + N_REQ * USER) / wo);
    if (found != f) {
        ex_verdict_set(v, EX_FAIL, EXF_ANSWER, "found_per_request = %g: the cache shares FULL "
                       "blocks of %d tokens only; how many whole blocks does a %d-token system "
                       "prompt fill?", found, BLOCK, SYS);
        return v->result;
    }
    if (total != t) {
        ex_verdict_set(v, EX_FAIL, EXF_ANSWER, "tokens_found = %g: every request but the first "
                       "finds %ld tokens", total, f);
        return v->result;
    }
    if (without != wo || with != w) {
        ex_verdict_set(v, EX_FAIL, EXF_ANSWER, "rows_with_cache = %g, rows_without_cache = %g: "
                       "without the cache every request computes its %d + %d prompt tokens; "
                       "with it, what it found is not computed", with, without, SYS, USER);
        return v->result;
    }
    if (!(fabs(pct - p) <= 0.1)) {
        ex_verdict_set(v, EX_FAIL, EXF_ANSWER, "formula_saved_percent = %g: 1 - (S + N x U) / "
                       "(N x (S + U)) with N = %d, S = %d, U = %d", pct, N_REQ, SYS, USER);
        return v->result;
    }
    if (!cx->bin[0]) {
        ex_verdict_set(v, EX_ERROR, EXF_SETUP, "cannot find the mlsys-lab program (set "
                       "MLSYS_LAB_BIN)");
        return v->result;
    }
    char *argv[] = {(char *)cx->bin, "run", "ch09/prefix-sharing-demo", "--engine-system-len",
                    "72", NULL};
    char *out = NULL;
    int st = 0;
    long lw = -1, lwo = -1, lt = -1;
    if (ex_run_capture(argv, 300000, &out, &st) == 0 && st == 0) {
        const char *r = strstr(out, "prompt rows computed"), *q = strstr(out, "prompt tokens "
                                                                        "found cached");
        if (!r || sscanf(r, "prompt rows computed %ld %ld", &lw, &lwo) != 2)
            lw = -1;
        if (!q || sscanf(q, "prompt tokens found cached %ld", &lt) != 1)
            lt = -1;
    }
    free(out);
    if (lw != w || lwo != wo || lt != t) {
        ex_verdict_set(v, EX_ERROR, EXF_SETUP, "`" PREFIX_CMD "` (status %d) did not print "
                       "%ld and %ld prompt rows and %ld tokens found (a bug of the lab, not "
                       "yours)", st, w, wo, t);
        return v->result;
    }
    ex_verdict_set(v, EX_PASS, EXF_NONE, "%ld of the %d system-prompt tokens are shared: "
                   "%ld prompt rows instead of %ld", f, SYS, w, wo);
    ex_verdict_add(v, "The last %d tokens of the system prompt share a block with each "
                   "request's own tokens, so that block differs per request and is computed "
                   "every time. The formula S + N x U assumes token-level sharing (a radix "
                   "tree, SGLang) and all requests resident at once; block-level sharing "
                   "(vLLM) loses the partial block, and the engine holds only its running "
                   "requests' blocks.", SYS - (int)f);
    return v->result;
}

static const char *const prefix_hints[] = {
    "Which blocks of a prompt go into the prefix cache: every block, or only full ones?",
    "72 tokens in blocks of 16: how many whole blocks, and where do the last 8 tokens go?",
    "The first request finds nothing. How many of the 100 find the shared blocks?",
    NULL
};

const exercise ch09_prefix = {
    .id = "ch09-prefix-sharing",
    .chapter = 9,
    .kind = EX_EXPERIMENT,
    .title = "Prefix sharing measured: full blocks only",
    .task = "Run `" PREFIX_CMD "` and report the tokens each later request finds cached, the "
            "prompt rows with and without the prefix cache, and the formula's saving.",
    .hints = prefix_hints,
    .lab = "ch09/prefix-sharing-demo",
    .starter = "starter.txt",
    .solution = "solution.txt",
    .workfile = "answers.txt",
    .check = check_prefix,
};
