/* mpirun.h - jobs under Open MPI's mpirun (--backend mpi): the runner builds the mpirun line,
 * starts it in a session of its own, pumps its output (ranks' lines arrive tagged with their
 * rank), collects the ranks' events over TCP, says in one line how the job ended, and on
 * Ctrl-C or failure leaves no process of the job behind. Shaped like mlsys_job (launch.c). */
#ifndef MLSYS_MPIRUN_H
#define MLSYS_MPIRUN_H

#include "../lab.h"

typedef struct mpirun_opts {
    int world_size;
    int timeout_ms;            /* exported as MLSYS_TIMEOUT_MS */
    const char *algo;          /* exported as MLSYS_ALGO; NULL = auto */
    const char *hostfile;      /* mpirun --hostfile */
    const char *host;          /* mpirun --host */
    const char *events_addr;   /* where the collector listens; NULL = loopback */
    int events;                /* stream the ranks' events back (a trace or a view wants them) */
    int verbose;               /* print the mpirun line and mpirun's own reports */
    int tagged;                /* lines rank 0 prints for another rank keep their rank
                                  (MLSYS_PRINT_TAGS=1 for the ranks, as runner_spec's) */
    int stop_grace_ms;         /* > 0: a stop first sends SIGUSR1 to mpirun, which passes it
                                  to every rank, and gives the job this long to end itself
                                  (mlsys_launch_opts.stop_grace_ms) */
} mpirun_opts;

typedef struct mpirun_job mpirun_job;

/* mpirun.c */
const char *mpirun_find(char *path, size_t n);    /* mpirun on PATH, or NULL */
/* The plugin the ranks will load (MLSYS_MPI_PLUGIN, else next to this program). */
const char *mpirun_plugin_path(char *path, size_t n);
/* Start prog (absolute path) with args under mpirun. NULL with one line in err. */
mpirun_job *mpirun_start(const mpirun_opts *o, const char *prog, char *const args[], char *err,
                         size_t n);
/* As mlsys_job_wait: 0 when every rank exited 0, 2 with the reason in why otherwise; with
 * step_ms >= 0 returns 1 after that long while the job still runs. */
int mpirun_wait(mpirun_job *j, const mlsys_job_sink *sink, int step_ms, char *why, size_t n);
void mpirun_stop(mpirun_job *j);                  /* SIGTERM to mpirun, SIGKILL after a grace
                                                     (SIGUSR1 first with o.stop_grace_ms) */
int mpirun_exit_status(const mpirun_job *j);      /* mpirun's, once it ended (-1 before) */
int mpirun_failed_rank(const mpirun_job *j);      /* as mpirun reported it, or -1 */
uint64_t mpirun_t0_ns(const mpirun_job *j);
const char *mpirun_events_addr(const mpirun_job *j);   /* the collector's, NULL without */
uint64_t mpirun_events_lost(const mpirun_job *j);
int mpirun_events_refused(const mpirun_job *j);
/* Ranks whose event stream ended without its final record ("1, 3"); returns how many. */
int mpirun_events_incomplete(const mpirun_job *j, char *buf, size_t n);
void mpirun_free(mpirun_job *j);                  /* stops it if still running */

/* One line of mpirun's --tag-output ("[1,3]<stdout>:text", modified in place): rank 3,
 * stream 0 (1 for stderr and stddiag), *text the rank's own text, with the repeated tags of
 * a line mpirun forwarded in pieces cut out. 0 when the line is not tagged. */
int mpirun_untag(char *line, int *rank, int *is_err, char **text);

/* The runner's entry for --backend mpi: runs lab l under mpirun with the parsed flags a
 * (argv: the lab's flags as given, passed on to `mlsys-lab worker`). Exit status. */
int runner_run_mpi(const lab *l, const lab_args *a, int argc, char **argv);

#endif
