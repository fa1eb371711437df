/* runner.h - the job runner, the one way a job starts: a lab's ranks (`mlsys-lab worker`),
 * a function on N forked ranks, or a program on N ranks, for the commands (run, train,
 * bench), the front end and the exercise judge; the checks and helpers every job shares
 * (launch options from a lab's flags, --algo that did not fit; the trace file is
 * core/trace.h's);
 * running a lab headless; and the worker entry point every rank process starts in. The mpi
 * backend (lab/backend/mpirun.c) runs its jobs with the same helpers. */
#ifndef MLSYS_RUNNER_H
#define MLSYS_RUNNER_H

#include "../lab.h"
#include "../../core/trace.h"
#include <sys/types.h>

/* What a job runs: exactly one of a lab (its ranks exec `mlsys-lab worker ID ARGS`, the
 * lab's flags as given), a function (forked ranks call fn(comm, arg)) or a program (argv,
 * NULL-terminated: argv[0] the path, exec'd on every rank). */
typedef struct runner_spec {
    const lab *l;
    int argc;
    char *const *argv;
    int (*fn)(mlsys_comm *c, void *arg);
    void *arg;
    int tagged;         /* 1: lines rank 0 prints for other ranks keep their rank (the log view) */
} runner_spec;

/* runner.c */
/* The program a lab's ranks exec, with "worker LAB FLAGS": mlsys-lab-rank beside this program
 * (or one folder up), which links no front-end library, else this program itself
 * (/proc/self/exe). Writes it into path and returns it. */
#define RUNNER_RANK_PROGRAM "mlsys-lab-rank"
const char *runner_rank_program(char *path, size_t n);
/* Start a job on the shm backend (fork, exec where the spec says). NULL with err. */
mlsys_job *runner_start(const mlsys_launch_opts *o, const runner_spec *s, char *err, size_t n);
/* A single-process lab (the front end's way): `mlsys-lab run ID ARGV` as a child in a process
 * group of its own, killed if this process dies, stdin from /dev/null, stdout and stderr on
 * two non-blocking pipes (fd[0], fd[1]). 0 with *pid; -1 with err. */
int runner_start_single(const lab *l, int argc, char *const argv[], pid_t *pid, int fd[2],
                        char *err, size_t n);
int runner_run(const lab *l, int argc, char **argv);       /* exit status */
int runner_worker(const lab *l, int argc, char **argv);    /* in each rank process */
int runner_fill_opts(const lab *l, const lab_args *a, mlsys_launch_opts *o, char *err, size_t n);
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

#endif
