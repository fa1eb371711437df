/* runner.h - the program's commands: running a lab headless (runner.c) and the worker entry
 * point every rank process starts in. main.c dispatches to these. */
#ifndef MLSYS_RUNNER_H
#define MLSYS_RUNNER_H

#include "../lab.h"

/* Events collected for --trace: a growing array. */
typedef struct trace_buf {
    mlsys_event *ev;
    size_t n, cap;
} trace_buf;

/* runner.c */
void trace_buf_collect(void *u, const mlsys_event *ev, size_t n);   /* a job sink's events */
int runner_run(const lab *l, int argc, char **argv);       /* exit status */
int runner_worker(const lab *l, int argc, char **argv);    /* in each rank process */
int runner_fill_opts(const lab *l, const lab_args *a, mlsys_launch_opts *o, char *err, size_t n);
/* --trace FILE: refuse a directory, a device or an unwritable place before the job (2 with
 * err); the trace is written to tmp and renamed over FILE by runner_trace_commit. */
int runner_trace_prepare(const char *path, char *tmp, size_t n, char *err, size_t errlen);
int runner_trace_commit(const char *path, const char *tmp, const trace_buf *tb, uint64_t t0);
int runner_check_backend(const lab *l, const char *backend, int world_size, const char *algo,
                         char *err, size_t n);

/* defined by chapters/ch01 (verify-setup grown up) and lab/bench.c */
int lab_doctor_main(void);
int bench_main(int argc, char **argv);

#endif
