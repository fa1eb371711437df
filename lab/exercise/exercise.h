/* exercise.h - exercises as data (rustlings-style): each has metadata, hints written as
 * guiding questions, a starter, a reference solution and a check. Three kinds: predict (a
 * number or a choice, parameters drawn at random each time), experiment (run a lab, answer
 * from what was measured) and implement (a C function the learner writes, compiled against
 * the core library and run across ranks). This header is the table of contents of
 * lab/exercise/; the tables live in chapters/chNN/chNN_exercises.c. */
#ifndef MLSYS_EXERCISE_H
#define MLSYS_EXERCISE_H

#include "../lab.h"
#include <stdint.h>
#include <limits.h>

typedef enum { EX_PREDICT, EX_EXPERIMENT, EX_IMPLEMENT } ex_kind;

/* ---- verdicts: what a check says, structured for the CLI and the front-end pane ---- */
typedef enum { EX_PASS = 0, EX_FAIL = 1, EX_ERROR = 2 } ex_result;   /* ERROR: could not check */
typedef enum {
    EXF_NONE,         /* passed */
    EXF_ANSWER,       /* predict/experiment: an answer is missing or wrong */
    EXF_COMPILE,      /* the learner's file does not compile or link */
    EXF_WRONG,        /* it ran, the result differs from the reference */
    EXF_DEADLOCK,     /* the runtime's watchdog reported "deadlock suspected" */
    EXF_CRASH,        /* a rank died by a signal or exited early */
    EXF_HANG,         /* a rank did not finish within the run's limit */
    EXF_RUNTIME,      /* a runtime call returned an error (bad peer, truncation, ...) */
    EXF_SETUP         /* the check itself could not run: no compiler, library or file */
} ex_failure;

typedef struct ex_verdict {
    ex_result result;
    ex_failure failure;
    char summary[512];      /* one line: "N=3, length 7: rank 2, element 5: expected 9.0, got 3.0" */
    char file[PATH_MAX];    /* EXF_COMPILE: the file of the first error; EXF_CRASH: where in
                             * the learner's file it crashed ("" when unknown) */
    int line, col;          /* and its position, 0 when unknown */
    int world_size;         /* where it failed: world size and rank, -1 when not one */
    int rank;
    long element;           /* EXF_WRONG: first differing element, -1 when not an array */
    uint64_t seed;          /* the inputs' seed (predict: the question's), for --seed */
    char *detail;           /* further lines (diagnostics, output tail, measurements), or NULL */
    size_t detail_len, detail_cap;
} ex_verdict;

/* ---- predict: one drawn question ---- */
#define EX_MAX_CHOICES 6
typedef struct ex_question {
    char text[1024];        /* the question with its drawn numbers */
    int nchoices;           /* 0: a numeric answer */
    char choices[EX_MAX_CHOICES][120];
    double answer;          /* the number, or the index of the right choice */
    double rel_tol, abs_tol;/* accepted when |x - answer| <= max(abs_tol, rel_tol * |answer|) */
    char unit[24];          /* "bytes", "ms" or "" */
    char explain[1024];     /* how the answer follows, with the drawn numbers */
} ex_question;

/* ---- implement: how the learner's function is run ---- */
typedef struct ex_implement {
    const char *function;       /* "my_ring_allreduce", for messages */
    const int *world_sizes;     /* run on each of these, in order, stopping at the first failure; 0-terminated */
    int timeout_ms;             /* p2p watchdog in the ranks: "deadlock suspected" after this */
    int limit_ms;               /* the whole run of one world size: a hang after this */
    int master_port;            /* exported as MASTER_PORT (0: 29500) */
} ex_implement;

typedef struct ex_context ex_context;

typedef struct exercise {
    const char *id;             /* "ch03-ring-allreduce": chNN- then a slug */
    int chapter;
    ex_kind kind;
    const char *title;
    const char *task;           /* what to do, one to three sentences */
    const char *const *hints;   /* guiding questions, shown one at a time; NULL-terminated */
    const char *lab;            /* the lab it builds on ("ch03/distributed-mean") or NULL */
    /* files under assets/exercises/<id>/ (NULL for predict): the starter is copied to the
     * workspace as <workspace>/<id>/<workfile>; implement also has check.c and api.h there */
    const char *starter;        /* "starter.c" or "starter.txt" */
    const char *solution;       /* "solution.c" or "solution.txt" */
    const char *workfile;       /* "ring_allreduce.c", "answers.txt" */
    void (*draw)(uint64_t seed, ex_question *q);                     /* predict */
    /* experiment: judge the answers in file; implement: NULL (the generic runner) */
    int (*check)(const ex_context *cx, const struct exercise *ex, const char *file,
                 ex_verdict *v);
    const ex_implement *impl;   /* implement */
} exercise;

/* Where things are: found from /proc/self/exe (build/mlsys-lab -> ..) or the environment
 * (MLSYS_LAB_SRC, MLSYS_LAB_LIB, MLSYS_LAB_BIN, MLSYS_LAB_HOME, XDG_DATA_HOME,
 * XDG_STATE_HOME, MLSYS_LAB_CC). */
struct ex_context {
    char src[PATH_MAX];         /* source tree: core/mlsys.h and assets/exercises/ */
    char lib[PATH_MAX];         /* libmlsys.a ("" when not found: implement checks say why) */
    char bin[PATH_MAX];         /* the mlsys-lab program, for experiments ("" when not found) */
    char workspace[PATH_MAX];   /* <MLSYS_LAB_HOME>/exercises */
    char progress[PATH_MAX];    /* <ex_state_dir>/progress */
    char cc[256];               /* the system compiler: "cc" */
    int timeout_override_ms;    /* MLSYS_EX_TIMEOUT_MS (tests), 0 = the exercise's own */
    int limit_override_ms;      /* MLSYS_EX_LIMIT_MS (tests), 0 = the exercise's own */
};

/* ---- exercises_table.c: the exercises of lab_chapters[i]->exercises, in order ---- */
int ex_count(void);
const exercise *ex_at(int i);                   /* i < ex_count(), in curriculum order */
const exercise *ex_find(const char *id);        /* NULL when unknown */

/* ---- exercise.c: context, workspace, predict answers, verdicts ---- */
const char *ex_kind_name(ex_kind k);            /* "predict", "experiment", "implement" */
/* snprintf for paths: 0, or -1 when out was too small (then out is cut short). */
int ex_pathf(char *out, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
int ex_context_init(ex_context *cx, char *err, size_t n);   /* 0, or -1 with err */
/* Where the learner's state goes (exercise progress, the labs run to the end): MLSYS_LAB_HOME
 * itself when set, so that one learner's files and marks never mix with another's; else
 * $XDG_STATE_HOME/mlsys-lab, else ~/.local/state/mlsys-lab. 0, or -1 when none is set. */
int ex_state_dir(char *out, size_t n);
/* <src>/assets/exercises/<id>/<name> */
void ex_asset_path(const ex_context *cx, const exercise *ex, const char *name, char *out, size_t n);
/* <workspace>/<id>/<workfile>; "" for predict */
void ex_work_path(const ex_context *cx, const exercise *ex, char *out, size_t n);
/* Copy every missing starter into the workspace (existing files are never touched), and
 * beside each implement exercise's file its contract, api.h: read-only, put back when
 * missing or changed (an edited copy is kept as api.h.bak). Returns how many starters were
 * created, -1 with err on failure. */
int ex_workspace_sync(const ex_context *cx, char *err, size_t n);
/* Overwrite the workspace file with the starter; the old one is kept as <file>.bak. */
int ex_workspace_reset(const ex_context *cx, const exercise *ex, char *err, size_t n);
/* <workspace>/<id>/api.h for an implement exercise; "" for the others */
void ex_contract_path(const ex_context *cx, const exercise *ex, char *out, size_t n);
/* The shipped api.h of an implement exercise as text to read (what the function gets,
 * returns and may call): its comments as paragraphs, one line each (an indented formula or
 * table row stays a line of its own), its declarations one line each, no include guard;
 * malloc'd, NULL for the others. */
char *ex_contract_text(const ex_context *cx, const exercise *ex);
/* Where a line of that text continues when it wraps: 0 for a paragraph, under the second
 * column of a table row ("get()      remove and return..."), else two past its indent. */
int ex_contract_hang(const char *line);
int ex_copy_file(const char *from, const char *to, char *err, size_t n);
char *ex_read_file(const char *path, size_t *len);          /* malloc'd, NUL-terminated */

void ex_verdict_init(ex_verdict *v);
void ex_verdict_free(ex_verdict *v);
void ex_verdict_set(ex_verdict *v, ex_result r, ex_failure f, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
void ex_verdict_add(ex_verdict *v, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
const char *ex_failure_name(ex_failure f);      /* "compile error", "deadlock", ... */

/* Predict: draw the question of a seed, judge an answer ("42", "1.5e6", "7/4", "b", "yes").
 * An empty or unparsable answer fails. */
void exercise_predict_draw(const exercise *ex, uint64_t seed, ex_question *q);
int exercise_predict_judge(const exercise *ex, uint64_t seed, const char *answer, ex_verdict *v);
int ex_question_judge(const ex_question *q, const char *answer, ex_verdict *v);
uint64_t ex_random_seed(void);                  /* from /dev/urandom, or the clock */
/* For draw functions: a uniform integer in [lo, hi]; the choices of q with texts[0] the
 * right one, shuffled by r (q->answer becomes its index). */
long ex_draw_int(mlsys_rng *r, long lo, long hi);
void ex_set_choices(ex_question *q, mlsys_rng *r, const char *const *texts, int n);
char *ex_fmt_int(char *buf, size_t n, long long v);     /* "250,000,000" */

/* Answers files of experiments: "key = value" lines, '#' starts a comment. */
typedef struct ex_answers {
    int n;
    char key[32][48];
    char val[32][160];
} ex_answers;
int ex_answers_read(const char *path, ex_answers *a, char *err, size_t n);
/* The value of key, or NULL when absent or blank: then v says what to fill in (FAIL). */
const char *ex_answer_get(const ex_answers *a, const char *key, ex_verdict *v);
int ex_answer_number(const ex_answers *a, const char *key, double *out, ex_verdict *v);
int ex_answer_choice(const ex_answers *a, const char *key, const char *const *allowed,
                     int *out, ex_verdict *v);

/* ---- exercise_run.c: compiling and running the learner's code, running programs ---- */
/* The check of one exercise on one file (the workspace file, or a starter/solution for
 * dev-check). Implement: compile, run on each world size, compare. Experiment: ex->check.
 * Predict: EX_ERROR (use exercise_predict_judge). seed 0 draws one. Returns v->result. */
int exercise_check_file(const ex_context *cx, const exercise *ex, const char *file,
                        uint64_t seed, ex_verdict *v);
/* The same on the learner's workspace file: the call the front end makes. */
int exercise_check(const ex_context *cx, const exercise *ex, ex_verdict *v);
/* Run argv (no shell) with stdout and stderr captured together, killed after timeout_ms.
 * *status: exit code, 128 + signal, 124 on timeout, 127 when it cannot start. */
int ex_run_capture(char *const argv[], int timeout_ms, char **out, int *status);
/* A temp dir of this check (mlsys-ex-<pid>-XXXXXX under $TMPDIR; stale ones of checks gone
 * are swept), and removing one with what it holds. */
int ex_make_tmpdir(char *out, size_t n);
void ex_remove_tree(const char *dir);

/* ---- exercise_judge.c: one world size of an implement check ---- */
/* Run the compiled program exe on n ranks and judge it step by step (hang, crash, the
 * earliest case's errors and wrong values, unfinished ranks, stray processes). 0 when every
 * rank passed; else v says why. info collects rank 0's "info" lines. */
int ex_judge_world(const ex_context *cx, const exercise *ex, const char *exe,
                   const char *learner, int n, uint64_t seed, ex_verdict *v, ex_verdict *info);

/* ---- exercise_progress.c: progress in a plain-text file, written atomically ---- */
typedef struct ex_progress_entry {
    char id[64];
    int done;
    int hints;                  /* hints shown so far */
    long long passed_at;        /* unix time of the first pass, 0 */
    long long failed_at;        /* unix time of the last failed check or answer, 0 */
} ex_progress_entry;

typedef struct ex_progress {
    ex_progress_entry *e;
    int n, cap;
    char path[PATH_MAX];
    int *idx;                   /* hash index of e by id (open addressing), built lazily */
    int idx_cap;
} ex_progress;

/* A progress file larger than this is corrupt: far beyond what the lab writes (one short
 * line per exercise), and large enough that a valid file of 100,000 entries (4.8 MB, a
 * generated or merged one) is read whole. Reading costs what the file holds, not the limit. */
#define EX_PROGRESS_MAX_BYTES (64u << 20)

/* Missing file: empty progress, 0. A corrupt file (a line that does not parse, a repeated
 * id, over EX_PROGRESS_MAX_BYTES, not a regular file) is renamed to <path>.corrupt-<time>
 * (never overwritten) and reported in msg: returns 1 with the entries of the lines that did
 * parse (only the first EX_PROGRESS_MAX_BYTES are read). -1: unreadable. */
int ex_progress_load(ex_progress *p, const char *path, char *msg, size_t n);
/* Write temp + fsync + rename + fsync of the directory. 0, or -1 with msg. */
int ex_progress_save(const ex_progress *p, char *msg, size_t n);
ex_progress_entry *ex_progress_get(ex_progress *p, const char *id, int create);
void ex_progress_free(ex_progress *p);
/* Load, mark ex done (passed) or note a failed try (failed_at; done stays), save. For the
 * front end after exercise_check or a predict answer. */
int exercise_record(const ex_context *cx, const exercise *ex, int passed, char *msg, size_t n);

/* ---- exercise_cli.c: the commands (main.c's table calls these) ---- */
/* exercise_commands.c: their flags, declared like every command's (lab.h's lab_command) */
extern const lab_command exercises_command, check_command, hint_command, watch_command,
    reset_command, solution_command, dev_check_command;
int exercises_main(int argc, char **argv);      /* mlsys-lab exercises */
int ex_check_main(int argc, char **argv);       /* mlsys-lab check [ID|--all] */
int ex_hint_main(int argc, char **argv);        /* mlsys-lab hint ID */
int ex_watch_main(int argc, char **argv);       /* mlsys-lab watch */
int ex_reset_main(int argc, char **argv);       /* mlsys-lab reset ID|--all */
int ex_solution_main(int argc, char **argv);    /* mlsys-lab solution ID [--force] */
int ex_dev_check_main(int argc, char **argv);   /* mlsys-lab dev-check */
/* dev-check as a function (tests): 0 when the curriculum is consistent. */
int ex_dev_check(const ex_context *cx, FILE *out);

#endif
