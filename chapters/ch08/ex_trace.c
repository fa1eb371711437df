/* ex_trace.c - Chapter 8's experiment: follow one request through the engine's step lines
 * and results table of minimal-inference-server (6 requests, 2 seats): the step that
 * prefills it, its decode steps, the step it finishes in, why it waited, and its TTFT, time
 * per output token and latency, which must add up. The step numbers are compared with a
 * fresh run of the lab (seeded sampling: the same steps every run). */
#include "../../lab/exercise/exercise.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TRACE_CMD "mlsys-lab run ch08/minimal-inference-server --num-requests 6 --batch-size 2"
#define REQ "r4"

/* Does the segment [p, e) hold the word w (followed by ':' , ' ' or its end)? */
static int seg_has(const char *p, const char *e, const char *w)
{
    size_t n = strlen(w);
    for (const char *q = p; q + n <= e; q++)
        if (!strncmp(q, w, n) && (q == p || q[-1] == ' ') &&
            (q + n == e || q[n] == ' ' || q[n] == ':' || q[n] == '\n'))
            return 1;
    return 0;
}

/* Rows of a step line: the prefill counts ("r4:11") and the decode names. */
static void line_rows(const char *pf, const char *dc, const char *end, int *prows, int *drows)
{
    *prows = *drows = 0;
    for (const char *q = pf; q < dc; q++)
        if (*q == ':')
            *prows += atoi(q + 1);
    for (const char *q = dc; q + 1 < end; q++)
        if (q[0] == ' ' && q[1] == 'r')
            (*drows)++;
}

/* Request 4's prefill step, decode steps and finishing step from the step lines; the rows
 * of its prefill step and of the step after it. */
static int trace_steps(const char *out, int *pre, int *dec, int *fin, int *prows, int *drows)
{
    *pre = *fin = -1;
    *dec = 0;
    *prows = *drows = -1;
    for (const char *p = out; (p = strstr(p, "  step ")) != NULL; p++) {
        const char *eol = strchr(p, '\n');
        if (!eol)
            eol = p + strlen(p);
        int step;
        const char *pf = strstr(p, "prefill "), *dc = strstr(p, "decode ");
        if (sscanf(p, "  step %d", &step) != 1 || !pf || !dc || pf > eol || dc > eol)
            continue;
        const char *fn = strstr(p, "finished");
        if (fn && fn > eol)
            fn = NULL;
        int pr, dr;
        line_rows(pf + 8, dc + 6, fn ? fn : eol, &pr, &dr);
        if (seg_has(pf + 8, dc, REQ) && *pre < 0) {
            *pre = step;
            *prows = pr;
        } else if (*pre > 0 && step == *pre + 1) {
            *drows = dr;
        }
        if (seg_has(dc + 7, fn ? fn : eol, REQ))
            (*dec)++;
        if (fn && seg_has(fn + 8, eol, REQ))
            *fin = step;
    }
    return *pre > 0 && *fin > 0 ? 0 : -1;
}

static int check_trace(const ex_context *cx, const exercise *ex, const char *file,
                       ex_verdict *v)
{
    (void)ex;
    static const char *const whys[] = {"seat", "memory", "budget", NULL};
    ex_answers a;
    char err[512];
    if (ex_answers_read(file, &a, err, sizeof err) != 0) {
        ex_verdict_set(v, EX_ERROR, EXF_SETUP, "%s", err);
        return v->result;
    }
    double pre, dec, fin, ttft, tpot, lat, ntok, prows, drows;
    int why;
    if (ex_answer_number(&a, "prefill_step", &pre, v) ||
        ex_answer_number(&a, "decode_steps", &dec, v) ||
        ex_answer_number(&a, "finish_step", &fin, v) ||
        ex_answer_choice(&a, "waited_for", whys, &why, v) ||
        ex_answer_number(&a, "prefill_rows", &prows, v) ||
        ex_answer_number(&a, "next_step_rows", &drows, v) ||
        ex_answer_number(&a, "tokens", &ntok, v) ||
        ex_answer_number(&a, "ttft_ms", &ttft, v) ||
        ex_answer_number(&a, "tpot_ms", &tpot, v) ||
        ex_answer_number(&a, "latency_ms", &lat, v))
        return v->result;
    if (!(ttft > 0) || !(tpot > 0) || !(lat > 0) || !(ntok >= 1)) {
        ex_verdict_set(v, EX_FAIL, EXF_ANSWER, "ttft_ms, tpot_ms and latency_ms are positive "
                       "times and tokens at least 1");
        return v->result;
    }
    /* latency = TTFT + (tokens - 1) · TPOT, up to the table's rounding to 0.01 ms */
    double want = ttft + (ntok - 1) * tpot;
    double tol = fmax(0.01 * lat, 0.005 * (ntok - 1) + 0.02);
    if (!(fabs(lat - want) <= tol)) {
        ex_verdict_set(v, EX_FAIL, EXF_ANSWER, "latency_ms = %g, but ttft_ms + (tokens - 1) x "
                       "tpot_ms = %g + %g x %g = %.2f: copy the three from request 4's row",
                       lat, ttft, ntok - 1, tpot, want);
        return v->result;
    }
    if (!cx->bin[0]) {
        ex_verdict_set(v, EX_ERROR, EXF_SETUP, "cannot find the mlsys-lab program (set "
                       "MLSYS_LAB_BIN)");
        return v->result;
    }
    char *argv[] = {(char *)cx->bin, "run", "ch08/minimal-inference-server", "--num-requests",
                    "6", "--batch-size", "2", NULL};
    char *out = NULL;
    int st = 0, p, d, f, pr, dr;
    if (ex_run_capture(argv, 120000, &out, &st) != 0 || st != 0 ||
        trace_steps(out, &p, &d, &f, &pr, &dr) != 0) {
        ex_verdict_set(v, EX_ERROR, EXF_SETUP, "`" TRACE_CMD "` failed or printed no step "
                       "lines for request 4 (status %d)", st);
        free(out);
        return v->result;
    }
    free(out);
    if (pre != p || dec != d || fin != f) {
        ex_verdict_set(v, EX_FAIL, EXF_ANSWER, "prefill_step %g, decode_steps %g, finish_step "
                       "%g: the step lines say otherwise for r4 (find \"r4:\" after prefill, "
                       "then count the lines whose decode list holds r4)", pre, dec, fin);
        return v->result;
    }
    if (prows != pr || drows != dr) {
        ex_verdict_set(v, EX_FAIL, EXF_ANSWER, "prefill_rows %g, next_step_rows %g: step %d "
                       "computes every prompt token it lists (add the numbers after ':'), "
                       "step %d one row per request it decodes", prows, drows, p, p + 1);
        return v->result;
    }
    if (ntok != d + 1) {
        ex_verdict_set(v, EX_FAIL, EXF_ANSWER, "tokens = %g: the prefill step draws the first "
                       "token and each of the %d decode steps one more", ntok, d);
        return v->result;
    }
    if (why != 0) {
        ex_verdict_set(v, EX_FAIL, EXF_ANSWER, "waited_for = %s: with --batch-size 2, how many "
                       "requests were running when request 4 arrived, and when did a place "
                       "free up?", whys[why]);
        return v->result;
    }
    ex_verdict_set(v, EX_PASS, EXF_NONE, "request 4: queued until step %d, prefilled there, "
                   "%d decode steps, finished in step %d", p, d, f);
    ex_verdict_add(v, "Its TTFT is almost all queueing: it waited for a seat while r0..r3 ran "
                   "(two at a time), then one step computed its %d prompt tokens and drew the "
                   "first token. Every later token costs one step, shared with whoever else "
                   "decodes: latency = TTFT + %d x TPOT.", pr, d);
    ex_verdict_add(v, "Prefill against decode: step %d ran %d prompt rows in one forward, step "
                   "%d ran %d rows, one per running request. A step's time follows its rows on "
                   "these CPU cores (compare the two steps' times in your run); on a GPU a "
                   "decode step costs about the same for 1 row or 64, because it reads every "
                   "weight once either way.", p, pr, p + 1, dr);
    return v->result;
}

static const char *const trace_hints[] = {
    "Which step line first shows r4 after the word prefill?",
    "Each decode step draws one token for r4: with the tokens its row of the results table "
    "gives, how many decode steps are there after the prefill step that drew the first?",
    "With two seats, what is request 4 waiting for while r0..r3 run?",
    "How many rows does a step compute for a prompt of 11 tokens, and how many for a request "
    "that decodes?",
    "TTFT ends with the first token, TPOT is the time per token after it: what do they add "
    "up to with the tokens that follow?",
    NULL
};

const exercise ch08_trace = {
    .id = "ch08-trace-request",
    .chapter = 8,
    .kind = EX_EXPERIMENT,
    .title = "Follow one request through the engine",
    .task = "Run `" TRACE_CMD "` and trace request 4: the step that prefills it, its decode "
            "steps, the step it finishes in, what it waited for, and its TTFT, time per "
            "output token and latency.",
    .hints = trace_hints,
    .lab = "ch08/minimal-inference-server",
    .starter = "starter.txt",
    .solution = "solution.txt",
    .workfile = "answers.txt",
    .check = check_trace,
};
