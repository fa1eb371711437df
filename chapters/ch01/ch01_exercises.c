/* ch01_exercises.c - Chapter 1's exercises: observe hello-distributed on 8 ranks (experiment),
 * even/odd work by rank and the torchrun-style environment (implement), and predict
 * questions on the all_reduce of the ranks, the all_gather layout and local ranks. The
 * experiment's check runs the lab itself and compares the learner's answers with it. */
#include "../../lab/exercise/exercise.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- ch01-world-size-8 (experiment) ---- */

typedef struct hello_run {
    int hello_lines, distinct_pids, rows;
    double row7[2];
    int have_row7;
    double sum;
    int have_sum;
} hello_run;

static void parse_hello(const char *out, hello_run *h)
{
    memset(h, 0, sizeof *h);
    long pids[256];
    int npids = 0;
    for (const char *p = out; *p;) {
        const char *e = strchr(p, '\n');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        char line[512];
        snprintf(line, sizeof line, "%.*s", (int)(len < sizeof line - 1 ? len : sizeof line - 1), p);
        const char *q;
        long pid;
        int i;
        double a, b;
        if ((q = strstr(line, "hello from PID ")) && sscanf(q + 15, "%ld", &pid) == 1) {
            h->hello_lines++;
            int seen = 0;
            for (int k = 0; k < npids; k++)
                seen |= pids[k] == pid;
            if (!seen && npids < 256)
                pids[npids++] = pid;
        } else if (sscanf(line, " from rank %d: [%lf, %lf]", &i, &a, &b) == 3) {
            h->rows++;
            if (i == 7) {
                h->row7[0] = a;
                h->row7[1] = b;
                h->have_row7 = 1;
            }
        } else if ((q = strstr(line, "all_reduce(SUM) of the ranks: ")) &&
                   sscanf(q + 30, "%lf", &a) == 1) {
            h->sum = a;
            h->have_sum = 1;
        }
        p += len + (e != NULL);
    }
    h->distinct_pids = npids;
}

static int parse_pair(const char *s, double *a, double *b)
{
    char buf[160];
    size_t k = 0;
    for (; *s && k + 1 < sizeof buf; s++)
        buf[k++] = (*s == '[' || *s == ']' || *s == '(' || *s == ')') ? ' ' : *s;
    buf[k] = 0;
    char tail;
    return sscanf(buf, " %lf , %lf %c", a, b, &tail) == 2 ? 0 : -1;
}

static int same_count(ex_verdict *v, const char *key, double answer, int measured, const char *what)
{
    if (answer == (double)measured)
        return 1;
    ex_verdict_set(v, EX_FAIL, EXF_ANSWER, "%s = %g, but the run printed %s; look again at its "
                   "output", key, answer, what);
    return 0;
}

static int check_world8(const ex_context *cx, const exercise *ex, const char *file, ex_verdict *v)
{
    (void)ex;
    ex_answers a;
    char err[512];
    if (ex_answers_read(file, &a, err, sizeof err) != 0) {
        ex_verdict_set(v, EX_ERROR, EXF_SETUP, "%s", err);
        return v->result;
    }
    double hello, pids, rows, sum, r0, r1;
    if (ex_answer_number(&a, "hello_lines", &hello, v) || ex_answer_number(&a, "distinct_pids", &pids, v) ||
        ex_answer_number(&a, "gathered_rows", &rows, v))
        return v->result;
    const char *row = ex_answer_get(&a, "row_from_rank_7", v);
    if (!row)
        return v->result;
    if (parse_pair(row, &r0, &r1) != 0) {
        ex_verdict_set(v, EX_FAIL, EXF_ANSWER, "row_from_rank_7 = %s: write the row as two "
                       "numbers, e.g. 1.0, 2.0", row);
        return v->result;
    }
    if (ex_answer_number(&a, "sum", &sum, v))
        return v->result;

    if (!cx->bin[0]) {
        ex_verdict_set(v, EX_ERROR, EXF_SETUP, "cannot find the mlsys-lab program to run the lab "
                       "(set MLSYS_LAB_BIN)");
        return v->result;
    }
    char *argv[] = {(char *)cx->bin, "run", "ch01/hello-distributed", "--world-size", "8", NULL};
    char *out;
    int st;
    if (ex_run_capture(argv, 60000, &out, &st) != 0 || st != 0) {
        ex_verdict_set(v, EX_ERROR, EXF_SETUP, "the lab itself failed (status %d)", st);
        if (out)
            ex_verdict_add(v, "%s", out);
        free(out);
        return v->result;
    }
    hello_run h;
    parse_hello(out, &h);
    free(out);
    char what[128];
    snprintf(what, sizeof what, "%d hello lines", h.hello_lines);
    if (!same_count(v, "hello_lines", hello, h.hello_lines, what))
        return v->result;
    snprintf(what, sizeof what, "%d different PIDs", h.distinct_pids);
    if (!same_count(v, "distinct_pids", pids, h.distinct_pids, what))
        return v->result;
    snprintf(what, sizeof what, "%d rows after the all_gather", h.rows);
    if (!same_count(v, "gathered_rows", rows, h.rows, what))
        return v->result;
    if (!h.have_row7 || !h.have_sum) {
        ex_verdict_set(v, EX_ERROR, EXF_SETUP, "the lab's output has no row from rank 7 or no sum");
        return v->result;
    }
    if (fabs(r0 - h.row7[0]) > 1e-6 || fabs(r1 - h.row7[1]) > 1e-6) {
        ex_verdict_set(v, EX_FAIL, EXF_ANSWER, "row_from_rank_7 = %g, %g, but the run shows a "
                       "different row from rank 7", r0, r1);
        return v->result;
    }
    if (fabs(sum - h.sum) > 1e-6) {
        ex_verdict_set(v, EX_FAIL, EXF_ANSWER, "sum = %g, but the run's all_reduce gave %g", sum,
                       h.sum);
        return v->result;
    }
    ex_verdict_set(v, EX_PASS, EXF_NONE, "your answers match a fresh run on 8 ranks");
    ex_verdict_add(v, "%d hello lines from %d PIDs: 8 processes, not threads; %d gathered rows, "
                   "the last [%.1f, %.1f]; sum %.1f = 8*7/2", h.hello_lines, h.distinct_pids,
                   h.rows, h.row7[0], h.row7[1], h.sum);
    return v->result;
}

static const char *const world8_hints[] = {
    "Did you run it with --world-size 8 (or -w 8)? How many ranks does the banner say?",
    "Two ranks with the same PID would be one process; what do the PIDs tell you?",
    "Rank r contributes [10r, 10r+1]: what is that for r = 7?",
    "What is 0 + 1 + ... + (N-1) for N = 8?",
    NULL
};

static const exercise ch01_world_size_8 = {
    .id = "ch01-world-size-8",
    .chapter = 1,
    .kind = EX_EXPERIMENT,
    .title = "Run the first program on 8 ranks",
    .task = "Run hello-distributed with --world-size 8 and answer from its output: hello "
            "lines, distinct PIDs, gathered rows and the all_reduce result.",
    .hints = world8_hints,
    .lab = "ch01/hello-distributed",
    .starter = "starter.txt",
    .solution = "solution.txt",
    .workfile = "answers.txt",
    .check = check_world8,
};

/* ---- implement ---- */

static const int sizes_3_4_8[] = {3, 4, 8, 0};
static const int sizes_2_4[] = {2, 4, 0};

static const char *const even_odd_hints[] = {
    "Which argument tells a rank who it is?",
    "Which C operator tells even from odd?",
    "The check counts lines: does each rank print its tag exactly once, and never the other?",
    NULL
};

static const ex_implement even_odd_impl = {
    .function = "on_rank_hello", .world_sizes = sizes_3_4_8, .timeout_ms = 5000,
    .limit_ms = 12000, .master_port = 29500,
};

static const exercise ch01_even_odd = {
    .id = "ch01-even-odd",
    .chapter = 1,
    .kind = EX_IMPLEMENT,
    .title = "Even ranks and odd ranks do different work",
    .task = "Make even ranks print an \"even data\" line and odd ranks an \"odd data\" line, "
            "once each.",
    .hints = even_odd_hints,
    .lab = "ch01/hello-distributed",
    .starter = "starter.c",
    .solution = "solution.c",
    .workfile = "even_odd.c",
    .impl = &even_odd_impl,
};

static const char *const env_hints[] = {
    "Which C library call reads an environment variable, and what does it return when the "
    "variable is not there?",
    "Could one loop over the five names print all five lines?",
    "What does printf do with a NULL string? Do you want to find out?",
    NULL
};

static const ex_implement env_impl = {
    .function = "print_env", .world_sizes = sizes_2_4, .timeout_ms = 5000, .limit_ms = 12000,
    .master_port = 29500,
};

static const exercise ch01_torchrun_env = {
    .id = "ch01-torchrun-env",
    .chapter = 1,
    .kind = EX_IMPLEMENT,
    .title = "The torchrun-style environment of a rank",
    .task = "Print RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT as NAME=value, "
            "with \"not set\" for a missing one.",
    .hints = env_hints,
    .lab = "ch01/hello-distributed",
    .starter = "starter.c",
    .solution = "solution.c",
    .workfile = "print_env.c",
    .impl = &env_impl,
};

/* ---- predict ---- */

static void draw_sum(uint64_t seed, ex_question *q)
{
    mlsys_rng g;
    mlsys_rng_seed(&g, seed);
    int n = (int)ex_draw_int(&g, 2, 64);
    int plus_one = (int)ex_draw_int(&g, 0, 1);
    if (plus_one) {
        snprintf(q->text, sizeof q->text,
                 "verify-setup's self-test on N = %d ranks: rank r contributes r + 1 to an "
                 "all_reduce(SUM). What value does every rank get?", n);
        q->answer = (double)n * (n + 1) / 2.0;
        snprintf(q->explain, sizeof q->explain,
                 "1 + 2 + ... + N = N(N+1)/2 = %d x %d / 2 = %.0f, the same on every rank: "
                 "all_reduce leaves the result everywhere.", n, n + 1, q->answer);
    } else {
        snprintf(q->text, sizeof q->text,
                 "hello-distributed on N = %d ranks: each rank contributes its rank number r to "
                 "an all_reduce(SUM). What value does every rank get?", n);
        q->answer = (double)n * (n - 1) / 2.0;
        snprintf(q->explain, sizeof q->explain,
                 "0 + 1 + ... + (N-1) = N(N-1)/2 = %d x %d / 2 = %.0f, on every rank.", n, n - 1,
                 q->answer);
    }
}

static const char *const sum_hints[] = {
    "Which numbers are added, from the first rank to the last?",
    "What is the sum 1 + 2 + ... + k in closed form?",
    NULL
};

static const exercise ch01_predict_sum = {
    .id = "ch01-predict-sum",
    .chapter = 1,
    .kind = EX_PREDICT,
    .title = "What all_reduce(SUM) of the ranks gives",
    .task = "Predict the all_reduce result of rank numbers for a given world size.",
    .hints = sum_hints,
    .lab = "ch01/hello-distributed",
    .draw = draw_sum,
};

static void draw_gather(uint64_t seed, ex_question *q)
{
    mlsys_rng g;
    mlsys_rng_seed(&g, seed);
    int n = (int)ex_draw_int(&g, 2, 16);
    int j = (int)ex_draw_int(&g, 0, 2 * n - 1);
    snprintf(q->text, sizeof q->text,
             "hello-distributed on N = %d ranks: rank r contributes the 2 floats [10r, 10r+1] to "
             "an all_gather, whose result is one buffer of 2N floats, rank 0's pair first. What "
             "is element %d of that buffer (counting from 0)?", n, j);
    q->answer = 10.0 * (j / 2) + (j % 2);
    snprintf(q->explain, sizeof q->explain,
             "Element j belongs to rank j/2 = %d (position j%%2 = %d in its pair): 10 x %d + %d "
             "= %.0f. all_gather places rank i's piece at offset i x count.", j / 2, j % 2,
             j / 2, j % 2, q->answer);
}

static const char *const gather_hints[] = {
    "Which rank's pair holds element j, if every rank adds 2 elements in rank order?",
    "Is element j the first or the second of that pair?",
    NULL
};

static const exercise ch01_predict_gather = {
    .id = "ch01-predict-gather",
    .chapter = 1,
    .kind = EX_PREDICT,
    .title = "Where all_gather puts each rank's data",
    .task = "Predict one element of hello-distributed's gathered buffer.",
    .hints = gather_hints,
    .lab = "ch01/hello-distributed",
    .draw = draw_gather,
};

static void draw_local_rank(uint64_t seed, ex_question *q)
{
    mlsys_rng g;
    mlsys_rng_seed(&g, seed);
    int machines = (int)ex_draw_int(&g, 2, 8);
    static const int per[] = {2, 4, 8};
    int gp = per[ex_draw_int(&g, 0, 2)];
    int r = (int)ex_draw_int(&g, 0, machines * gp - 1);
    int which = (int)ex_draw_int(&g, 0, 1);
    if (which) {
        snprintf(q->text, sizeof q->text,
                 "A job runs on %d machines with %d ranks (one per GPU) on each; global ranks "
                 "are handed out machine by machine, starting at machine 0. On which machine "
                 "(counting from 0) does global rank %d run?", machines, gp, r);
        q->answer = r / gp;
        snprintf(q->explain, sizeof q->explain,
                 "Machine m holds global ranks m x %d ... m x %d + %d, so rank %d is on "
                 "machine %d / %d = %d.", gp, gp, gp - 1, r, r, gp, r / gp);
    } else {
        snprintf(q->text, sizeof q->text,
                 "A job runs on %d machines with %d ranks (one per GPU) on each; global ranks "
                 "are handed out machine by machine. What is the LOCAL_RANK of global rank %d "
                 "(its index on its own machine, which picks its GPU)?", machines, gp, r);
        q->answer = r % gp;
        snprintf(q->explain, sizeof q->explain,
                 "LOCAL_RANK = RANK mod ranks-per-machine = %d mod %d = %d; that is the GPU it "
                 "uses, cuda:%d.", r, gp, r % gp, r % gp);
    }
}

static const char *const local_rank_hints[] = {
    "Which global ranks live on machine 0? And on machine 1?",
    "Which arithmetic operation gives the position inside a group of equal size?",
    NULL
};

static const exercise ch01_predict_local_rank = {
    .id = "ch01-predict-local-rank",
    .chapter = 1,
    .kind = EX_PREDICT,
    .title = "Global rank, local rank and machine",
    .task = "Predict a rank's LOCAL_RANK or machine in a multi-machine job.",
    .hints = local_rank_hints,
    .draw = draw_local_rank,
};

const exercise *const ch01_exercises[] = {
    &ch01_world_size_8,
    &ch01_predict_sum,
    &ch01_predict_gather,
    &ch01_even_odd,
    &ch01_predict_local_rank,
    &ch01_torchrun_env,
    NULL
};
