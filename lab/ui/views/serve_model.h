/* serve_model.h - what the serve view knows of a serving engine, rebuilt from its typed
 * records alone (core/llm/engine.h: REQUESTS moves between clients, queue, scheduler and
 * model, a STEP record per engine step): each request's state (waiting, running, finished),
 * tokens in and out, the last step's batch (who prefills how many rows, who decodes) and the
 * throughput. No curses, no grid: tests feed it events and read the numbers. */
#ifndef MLSYS_SERVE_MODEL_H
#define MLSYS_SERVE_MODEL_H

#include "../../../core/mlsys.h"

/* The engine's role numbers (core/llm/engine.c names them with ROLE records). */
enum { SVM_CLIENTS, SVM_QUEUE, SVM_SCHED, SVM_MODEL };
enum { SVM_WAITING, SVM_RUNNING, SVM_FINISHED };

#define SVM_BATCH 64                /* items of one step kept */
#define SVM_HIST 256                /* steps kept for the throughput curve */

typedef struct svm_req {
    int id, state;
    int prompt;                     /* prompt tokens (0: not seen submitted) */
    int cached;                     /* found in the prefix cache at its first admission */
    int pos;                        /* positions computed so far (0 again when preempted) */
    int out;                        /* tokens generated */
    int preempted;                  /* times */
    long step_in, step_done;        /* the step it was admitted in first / finished in, -1 */
    int admitted;                   /* seen admitted at least once */
} svm_req;

typedef struct svm_item {
    int id, rows, prefill;          /* prefill 1: prompt (or recomputed) rows, 0: a decode */
} svm_item;

typedef struct svm_step {
    long step;
    int rows, prefill_rows, decode_rows, tokens;
    double secs;                    /* NaN: the STEP record has not come */
    int waiting, running, finished; /* after it (the STEP record's) */
    char batch[48];                 /* "P3:24 P5:8 D0,1,2" (cut with "..") */
} svm_step;

typedef struct serve_model {
    int seen;                       /* any of the engine's records came */
    svm_req *r;                     /* by id order of arrival */
    int nr, cap;
    svm_item batch[SVM_BATCH];      /* the last step's items (the first SVM_BATCH) */
    int nbatch, nbatch_all;         /* kept, and all of them */
    svm_step last;                  /* the last step (step 0: none yet) */
    svm_step hist[SVM_HIST];        /* the last SVM_HIST steps, oldest first */
    int nhist;
    int admitted_now[SVM_BATCH], nadmitted;     /* ids admitted / preempted / finished */
    int preempted_now[SVM_BATCH], npreempted;   /* in the last step */
    int finished_now[SVM_BATCH], nfinished;
    long tokens_total, rows_total, steps_total;
    double secs_total;              /* engine time of the steps with a STEP record */
} serve_model;

void svm_init(serve_model *m);
void svm_free(serve_model *m);      /* and empty again */
/* Does the model read e? (REQUESTS and STEP flow records.) */
int svm_wants(const mlsys_event *e);
void svm_event(serve_model *m, const mlsys_event *e);
/* Requests in a state, and the i-th of them (in id order; finished: newest first). */
int svm_count(const serve_model *m, int state);
const svm_req *svm_nth(const serve_model *m, int state, int i);
const svm_req *svm_find(const serve_model *m, int id);
/* Tokens per second over the steps with a STEP record (engine time, not waits at gates);
 * the last step's alone in *last (0 when none). */
double svm_tokens_per_s(const serve_model *m, double *last);
/* "P3:24 P5:8 D0,1,2" style, in words: "prefill req 3 (24), req 5 (8); decode req 0, 1, 2". */
void svm_batch_text(const serve_model *m, char *out, size_t n);
/* One request's move between the engine's roles with its count in its own unit, for an arrow:
 * "req 3: 24 prompt tokens", "req 3 admitted, 16 cached", "req 3: 24 rows this step",
 * "req 3 preempted", "req 3 finished: 20 tokens". Returns 0 when from -> to is none of the
 * engine's moves (out then says "req 3: 24"). */
int svm_move_text(int from, int to, int seq, int count, char *out, size_t n);

#endif
