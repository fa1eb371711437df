/* runner.h - the program's commands: running a lab headless (runner.c) and the worker entry
 * point every rank process starts in. main.c dispatches to these. */
#ifndef MLSYS_RUNNER_H
#define MLSYS_RUNNER_H

#include "../lab.h"

/* Events (and the ranks' output lines) collected for --trace: growing arrays. */
typedef struct trace_buf {
    mlsys_event *ev;
    size_t n, cap;
    mlsys_trace_line *lines;    /* texts malloc'd */
    size_t nl, lcap;
} trace_buf;

/* runner.c */
void trace_buf_collect(void *u, const mlsys_event *ev, size_t n);   /* a job sink's events */
void trace_buf_line(trace_buf *t, int rank, int is_err, const char *text);  /* now */
void trace_buf_free(trace_buf *t);
int runner_run(const lab *l, int argc, char **argv);       /* exit status */
int runner_worker(const lab *l, int argc, char **argv);    /* in each rank process */
int runner_fill_opts(const lab *l, const lab_args *a, mlsys_launch_opts *o, char *err, size_t n);
/* --trace FILE: refuse a directory, a device or an unwritable place before the job (2 with
 * err); the trace is written to tmp and renamed over FILE by runner_trace_commit. */
int runner_trace_prepare(const char *path, char *tmp, size_t n, char *err, size_t errlen);
int runner_trace_commit(const char *path, const char *tmp, const trace_buf *tb, uint64_t t0);
/* --algo NAME is a wish: a collective without NAME runs what its own rule picks, and one
 * whose call does not meet NAME's needs (a power-of-two rank count, an element per rank)
 * runs the baseline. runner_algo_note says so for one collective call (a COLL_BEGIN event
 * of rank 0: e->coll, e->bytes, e->dtype and e->label, the algorithm that ran): 1 with a
 * sentence in out when NAME did not run, else 0. runner_algo_warn says, before a job,
 * what NAME cannot do on nranks ranks (for the launcher form): 1 with a sentence, else 0. */
int runner_algo_note(const char *algo, int nranks, const mlsys_event *e, char *out, size_t n);
int runner_algo_warn(const char *algo, int nranks, char *out, size_t n);
int runner_check_backend(const lab *l, const char *backend, int world_size, const char *algo,
                         char *err, size_t n);

/* defined by chapters/ch01 (verify-setup grown up) and lab/bench.c */
int lab_doctor_main(void);
int bench_main(int argc, char **argv);

#endif
