/* runner.c - the one way a job starts (runner_start), and one lab run headless: parses its
 * flags, prints the parent's banner, starts the ranks through the launcher (fork + exec of
 * `mlsys-lab worker`), prints their output as it comes, writes the trace, and says in one
 * line how the job ended. Also the worker side: what each rank process does once exec'd
 * (mlsys-lab-rank, the slim program beside mlsys-lab, or `mlsys-lab worker`). */
#include "runner.h"
#include "../../core/coll/coll.h"
#include "../backend/mpirun.h"
#include "../backend/nccl_probe.h"
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define TRACE_RING_EVENTS 65536

const char *runner_rank_program(char *path, size_t n)
{
    char exe[PATH_MAX];
    ssize_t k = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (k > 0) {
        exe[k] = 0;
        char *slash = strrchr(exe, '/');
        if (slash) {
            *slash = 0;
            /* beside the program, or one folder up (a test binary in BUILD/tests) */
            static const char *const rel[] = {"/" RUNNER_RANK_PROGRAM, "/../" RUNNER_RANK_PROGRAM};
            for (int i = 0; i < 2; i++)
                if (snprintf(path, n, "%s%s", exe, rel[i]) < (int)n && access(path, X_OK) == 0)
                    return path;
        }
    }
    snprintf(path, n, "/proc/self/exe");
    return path;
}

mlsys_job *runner_start(const mlsys_launch_opts *o, const runner_spec *s, char *err, size_t n)
{
    char **wargv = NULL, prog[PATH_MAX + 64];
    char *const *argv = s->argv;
    if (s->l) {
        /* the ranks run mlsys-lab-rank (or this same program): worker LAB <the same flags> */
        wargv = mlsys_xcalloc((size_t)s->argc + 4, sizeof(char *));
        wargv[0] = (char *)runner_rank_program(prog, sizeof prog);
        wargv[1] = "worker";
        wargv[2] = (char *)s->l->id;
        for (int i = 0; i < s->argc; i++)
            wargv[3 + i] = s->argv[i];
        argv = wargv;
    } else if (s->fn) {
        argv = NULL;
    }
    if (s->tagged)
        setenv("MLSYS_PRINT_TAGS", "1", 1);
    mlsys_job *j = mlsys_job_start(o, argv, s->fn, s->arg, err, n);
    if (s->tagged)
        unsetenv("MLSYS_PRINT_TAGS");
    free(wargv);
    return j;
}

int runner_start_single(const lab *l, int argc, char *const argv[], pid_t *pid_out, int fd[2],
                        char *err, size_t n)
{
    int po[2], pe[2];
    if (pipe2(po, O_CLOEXEC))
        goto no_pipe;
    if (pipe2(pe, O_CLOEXEC)) {
        close(po[0]);
        close(po[1]);
        goto no_pipe;
    }
    char **cargv = mlsys_xcalloc((size_t)argc + 4, sizeof(char *));
    cargv[0] = "/proc/self/exe";
    cargv[1] = "run";
    cargv[2] = (char *)l->id;
    for (int i = 0; i < argc; i++)
        cargv[3 + i] = argv[i];
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid == 0) {
        setpgid(0, 0);
        mlsys_child_tie(parent, SIGKILL);
        dup2(po[1], STDOUT_FILENO);
        dup2(pe[1], STDERR_FILENO);
        int devnull = open("/dev/null", O_RDONLY);
        if (devnull >= 0)
            dup2(devnull, STDIN_FILENO);
        execv(cargv[0], cargv);
        _exit(127);
    }
    free(cargv);
    close(po[1]);
    close(pe[1]);
    if (pid < 0) {
        snprintf(err, n, "cannot start the lab: %s", strerror(errno));
        close(po[0]);
        close(pe[0]);
        return -1;
    }
    setpgid(pid, pid);
    fcntl(po[0], F_SETFL, O_NONBLOCK);
    fcntl(pe[0], F_SETFL, O_NONBLOCK);
    *pid_out = pid;
    fd[0] = po[0];
    fd[1] = pe[0];
    return 0;
no_pipe:
    snprintf(err, n, "cannot create pipes: %s", strerror(errno));
    return -1;
}

/* The entry of algorithm `name` in a collective's table, or NULL. */
static const coll_algo *algo_entry(mlsys_coll coll, const char *name)
{
    const coll_table *t = coll_table_of(coll);
    for (int i = 0; t && name && i < t->nalgos; i++)
        if (!strcmp(t->algos[i].name, name))
            return &t->algos[i];
    return NULL;
}

int runner_algo_note(const char *algo, int nranks, const mlsys_event *e, char *out, size_t n)
{
    out[0] = 0;
    if (!algo || !*algo || !strcmp(algo, "auto") || !strcmp(algo, "native") || nranks < 2 ||
        e->kind != MLSYS_EV_COLL_BEGIN || e->coll < 0 || e->coll >= MLSYS_COLL_COUNT ||
        !strcmp(e->label, algo) || e->tag == MLSYS_ALGO_BY_LAB)
        return 0;                   /* (the lab chose this call's algorithm itself) */
    mlsys_coll coll = (mlsys_coll)e->coll;
    const char *name = mlsys_coll_name(coll);
    const coll_algo *al = algo_entry(coll, algo);
    if (!al) {
        snprintf(out, n, "%s ran %s: it has no %s algorithm", name, e->label, algo);
        return 1;
    }
    size_t es = e->dtype >= 0 ? mlsys_dtype_size((mlsys_dtype)e->dtype) : 0;
    size_t count = es ? e->bytes / es : 0;
    if ((al->constraints & COLL_NEEDS_POW2) && !coll_is_pow2(nranks))
        snprintf(out, n, "%s ran %s: %s needs a power-of-two number of ranks, not %d", name,
                 e->label, algo, nranks);
    else if ((al->constraints & COLL_NEEDS_COUNT_GE_RANKS) && count < (size_t)nranks)
        snprintf(out, n, "%s of %zu element%s on %d ranks ran %s: %s needs at least one "
                 "element per rank", name, count, count == 1 ? "" : "s", nranks, e->label, algo);
    else
        snprintf(out, n, "%s ran %s instead of %s", name, e->label, algo);
    return 1;
}

int runner_algo_warn(const char *algo, int nranks, char *out, size_t n)
{
    out[0] = 0;
    if (!algo || !*algo || !strcmp(algo, "auto") || !strcmp(algo, "native"))
        return 0;
    char have[256] = "", lack[256] = "";
    size_t uh = 0, ul = 0;
    int nhave = 0, nlack = 0, pow2 = 0, per_rank = 0;
    for (int k = 0; k < MLSYS_COLL_COUNT; k++) {
        const coll_algo *al = algo_entry((mlsys_coll)k, algo);
        const char *name = mlsys_coll_name((mlsys_coll)k);
        if (!al) {
            if (ul < sizeof lack)
                ul += (size_t)snprintf(lack + ul, sizeof lack - ul, "%s%s", nlack ? ", " : "",
                                       name);
            nlack++;
            continue;
        }
        pow2 |= (al->constraints & COLL_NEEDS_POW2) != 0;
        per_rank |= (al->constraints & COLL_NEEDS_COUNT_GE_RANKS) != 0;
        if (uh < sizeof have)
            uh += (size_t)snprintf(have + uh, sizeof have - uh, "%s%s", nhave ? ", " : "", name);
        nhave++;
    }
    if (!nhave)
        return 0;                       /* not an algorithm: the field says so itself */
    /* what will not run comes first (the rank count, small calls), then who lacks it */
    size_t used = 0;
    if (pow2 && nranks > 1 && !coll_is_pow2(nranks))
        used = (size_t)snprintf(out, n, "%d ranks is not a power of two, so the baseline runs "
                                "instead; ", nranks);
    else if (per_rank)
        used = (size_t)snprintf(out, n, "a call with fewer elements than ranks runs the "
                                "baseline; ");
    if (used >= n)
        return 1;
    if (!nlack)
        snprintf(out + used, n - used, "every collective has %s", algo);
    else if (nlack <= nhave)
        snprintf(out + used, n - used, "%s %s no %s and %s", lack, nlack == 1 ? "has" : "have",
                 algo, nlack == 1 ? "picks its own" : "pick their own");
    else
        snprintf(out + used, n - used, "only %s %s %s; the others pick their own", have,
                 nhave == 1 ? "has" : "have", algo);
    return 1;
}

/* Backends other than shm answer here with the reason, before anything starts (before a
 * lab's banner too): mpi without mpirun or without its plugin, nccl without a GPU a rank. */
int runner_check_backend(const lab *l, const char *backend, int world_size, const char *algo,
                         char *err, size_t n)
{
    int shm = lab_backend_is_shm(backend);
    if (shm && algo && !strcmp(algo, "native")) {
        snprintf(err, n, "mlsys-lab: %s: --algo native is the backend's own collective: it "
                 "needs --backend mpi or nccl (shm has only ours)", l->id);
        return 2;
    }
    if (shm)
        return 0;
    if (!strcmp(backend, "mpi")) {
        char path[PATH_MAX];
        struct stat sb;
        if (!mpirun_find(path, sizeof path)) {
            snprintf(err, n, "mlsys-lab: %s: --backend mpi: mpirun is not on PATH (install "
                     "openmpi-bin and libopenmpi-dev, or use --backend shm)", l->id);
            return 2;
        }
        if (stat(mpirun_plugin_path(path, sizeof path), &sb) != 0) {
            snprintf(err, n, "mlsys-lab: %s: --backend mpi: the MPI plugin %s is missing (build "
                     "it with `make`, which needs mpicc from libopenmpi-dev)", l->id, path);
            return 2;
        }
        return 0;
    }
    if (!strcmp(backend, "nccl"))
        return nccl_backend_check(l->id, world_size, err, n);
    snprintf(err, n, "mlsys-lab: %s: the %s backend is not available in this build; use "
             "--backend shm", l->id, backend);
    return 2;
}

int runner_fill_opts(const lab *l, const lab_args *a, mlsys_launch_opts *o, char *err, size_t n)
{
    memset(o, 0, sizeof *o);
    o->world_size = l->rank_main
        ? (int)lab_arg_int(a, l->ranks_flag ? l->ranks_flag : "world-size") : 1;
    if (l->rank_main && o->world_size < 1)
        o->world_size = l->min_ranks > 0 ? l->min_ranks : 1;
    double t = lab_arg_double(a, "timeout");
    o->timeout_ms = t > 0 ? (int)(t * 1000.0) : 30000;
    o->master_port = l->port ? l->port : 29500;
    o->backend = "shm";
    o->capture_output = 1;
    o->gated = lab_arg_bool(a, "gated");
    double grace = l->stop_grace_s ? l->stop_grace_s(a) : 0.0;
    o->stop_grace_ms = grace > 0 ? (int)(grace < 86400 ? grace * 1000.0 : 86400e3) : 0;
    const char *algo = lab_arg_str(a, "algo");     /* validated by the flag parser */
    o->algo = algo && strcmp(algo, "auto") ? algo : NULL;
    /* a forced algorithm is checked against what ran (runner_algo_note): events needed */
    if (lab_arg_str(a, "trace") || o->algo)
        o->trace_capacity = TRACE_RING_EVENTS;
    /* under nccl the collectives are NCCL's unless --algo names one of ours */
    const char *backend = lab_arg_str(a, "backend");
    if (!o->algo && backend && !strcmp(backend, "nccl"))
        o->algo = "native";
    return runner_check_backend(l, lab_arg_str(a, "backend"), o->world_size, algo, err, n);
}

/* With --algo NAME: what rank 0's collective calls ran instead of NAME, one entry per
 * collective (so memory stays small however long the job runs). */
typedef struct algo_watch {
    const char *algo;
    int nranks;
    unsigned noted;                     /* collectives seen not running NAME */
    char fit[MLSYS_COLL_COUNT][200];    /* a call whose size or rank count did not suit NAME */
    char missing[400];                  /* collectives without NAME, and what they ran */
    size_t used;
    int nmissing;
} algo_watch;

static void algo_watch_event(algo_watch *w, const mlsys_event *e)
{
    char why[200];
    if (e->rank != 0 || e->coll < 0 || e->coll >= MLSYS_COLL_COUNT ||
        (w->noted & (1u << e->coll)) || !runner_algo_note(w->algo, w->nranks, e, why, sizeof why))
        return;
    w->noted |= 1u << e->coll;
    if (algo_entry((mlsys_coll)e->coll, w->algo))
        snprintf(w->fit[e->coll], sizeof w->fit[0], "%s", why);
    else if (w->used < sizeof w->missing)
        w->used += (size_t)snprintf(w->missing + w->used, sizeof w->missing - w->used,
                                    "%s%s (ran %s)", w->nmissing++ ? ", " : "",
                                    mlsys_coll_name((mlsys_coll)e->coll), e->label);
}

/* What the headless job's sink feeds: the algorithm watch (--algo) and the trace (--trace),
 * which also keeps every output line with the rank that printed it. */
typedef struct headless {
    algo_watch *aw;
    mlsys_trace *tb;
} headless;

static void headless_events(void *u, const mlsys_event *ev, size_t n)
{
    headless *h = u;
    for (size_t i = 0; h->aw && i < n; i++)
        algo_watch_event(h->aw, &ev[i]);
    if (h->tb)
        mlsys_trace_collect(h->tb, ev, n);
}

/* Printed as the launcher prints (stdout as it is, stderr after "[rank r] "), the tag that
 * names the rank a line of rank 0's belongs to taken off (MLSYS_PRINT_TAGS). */
static void headless_line(void *u, int rank, int is_err, const char *line)
{
    headless *h = u;
    int owner = rank;
    const char *text = mlsys_print_untag(line, &owner);
    if (h->tb)
        mlsys_trace_add_line(h->tb, owner, is_err, text);
    if (is_err)
        fprintf(stderr, "[rank %d] %s\n", rank, text);
    else {
        fputs(text, stdout);
        fputc('\n', stdout);
    }
}

/* After the job, on stderr: one line per collective whose call did not suit NAME, then one
 * naming the collectives that have no NAME; so that the algorithm never changes silently. */
static void algo_watch_report(const lab *l, const algo_watch *w)
{
    fflush(stdout);             /* after the ranks' lines, never inside one */
    for (int k = 0; k < MLSYS_COLL_COUNT; k++)
        if (w->fit[k][0])
            fprintf(stderr, "mlsys-lab: %s: --algo %s did not fit: %s\n", l->id, w->algo,
                    w->fit[k]);
    if (w->nmissing)
        fprintf(stderr, "mlsys-lab: %s: --algo %s: %s %s no %s algorithm\n", l->id, w->algo,
                w->missing, w->nmissing == 1 ? "has" : "have", w->algo);
}

int runner_run(const lab *l, int argc, char **argv)
{
    lab_args a;
    char err[512];
    int rc = lab_args_parse(l, argc, argv, &a, err, sizeof err);
    if (rc == 1)
        return 0;
    if (rc) {
        fprintf(stderr, "%s\n", err);
        return 2;
    }
    mlsys_launch_opts o;
    if ((rc = runner_fill_opts(l, &a, &o, err, sizeof err)) != 0) {
        fprintf(stderr, "%s\n", err);
        lab_args_free(&a);
        return rc;
    }
    const char *be = lab_arg_str(&a, "backend");
    if (o.gated && !(be && !strcmp(be, "mpi") && l->rank_main)) {
        fprintf(stderr, "mlsys-lab: %s: --gated makes the ranks wait for a viewer at every "
                "step: open the lab (mlsys-lab) and launch it from there\n", l->id);
        lab_args_free(&a);
        return 2;
    }
    const char *trace = lab_arg_str(&a, "trace");
    char trace_tmp[PATH_MAX + 32] = "";
    if (trace && mlsys_trace_prepare(trace, trace_tmp, sizeof trace_tmp, err, sizeof err) != 0) {
        fprintf(stderr, "mlsys-lab: %s: %s\n", l->id, err);
        lab_args_free(&a);
        return 2;
    }
    if (l->before && (rc = l->before(&a)) >= 0) {
        if (trace_tmp[0]) {
            unlink(trace_tmp);
            fprintf(stderr, "mlsys-lab: %s: --trace: nothing written to %s: no ranks started, "
                    "so there were no events to record\n", l->id, trace);
        }
        lab_args_free(&a);
        return rc;
    }
    if (!l->rank_main && !trace) {
        rc = l->main ? l->main(&a) : 0;     /* no one collects events: a.comm stays NULL */
        lab_args_free(&a);
        return rc;
    }
    const char *backend = lab_arg_str(&a, "backend");
    if (backend && !strcmp(backend, "mpi")) {
        if (trace_tmp[0])
            unlink(trace_tmp);       /* runner_run_mpi checks the path again itself */
        rc = runner_run_mpi(l, &a, argc, argv);
        if (l->after)
            l->after(&a, rc);
        lab_args_free(&a);
        return rc;
    }

    runner_spec spec = {.l = l, .argc = argc, .argv = argv, .tagged = trace != NULL};
    mlsys_job *j = runner_start(&o, &spec, err, sizeof err);   /* tagged: the trace keeps
                                                                 * each line's own rank */
    if (!j) {
        fprintf(stderr, "mlsys-lab: %s: %s\n", l->id, err);
        if (trace_tmp[0])
            unlink(trace_tmp);
        lab_args_free(&a);
        return 2;
    }
    mlsys_job_install_signal_stop();
    mlsys_trace tb = {0};
    headless hs = {NULL, trace ? &tb : NULL};
    mlsys_job_sink sink = {trace ? headless_line : NULL, headless_events, &hs};
    algo_watch *aw = NULL;
    if (o.algo) {                   /* events pass the watch on their way to the trace */
        aw = mlsys_xcalloc(1, sizeof *aw);
        aw->algo = o.algo;
        aw->nranks = o.world_size;
        hs.aw = aw;
    }
    char why[256];
    rc = mlsys_job_wait(j, o.trace_capacity ? &sink : NULL, -1, why, sizeof why);
    int interrupted = mlsys_job_stop_requested();
    fflush(stdout);                 /* the ranks' lines, before ours on stderr */
    if (trace && interrupted) {
        unlink(trace_tmp);          /* stopped by the user: an existing trace stays as it was */
    } else if (trace) {
        uint64_t lost = mlsys_job_events_lost(j);
        if (mlsys_trace_commit(trace, trace_tmp, &tb, mlsys_job_t0_ns(j)) != 0)
            fprintf(stderr, "mlsys-lab: %s: cannot write the trace to %s\n", l->id, trace);
        else
            fprintf(stderr, "mlsys-lab: trace: %zu events written to %s (%llu lost)\n", tb.n,
                    trace, (unsigned long long)lost);
    }
    if (aw && !interrupted)
        algo_watch_report(l, aw);
    free(aw);
    mlsys_trace_free(&tb);
    const mlsys_rank_status *st0 = mlsys_job_status(j, 0);
    int solo_code = !l->rank_main && st0 && st0->exited ? st0->code : -1;
    int strays_rank = -1, strays = mlsys_job_strays(j, &strays_rank);
    mlsys_job_free(j);
    if (strays)
        fprintf(stderr, "mlsys-lab: %s: %d process%s that the ranks started %s still running "
                "when the job ended; killed\n", l->id, strays, strays == 1 ? "" : "es",
                strays == 1 ? "was" : "were");
    if (!rc && interrupted && o.stop_grace_ms > 0) {
        rc = interrupted == SIGINT ? 130 : 0;   /* rank 0 ended the job as asked: Ctrl-C is
                                                   130, as every command */
    } else if (rc && solo_code >= 0 && !interrupted) {
        rc = solo_code;             /* one process: its own exit status, as without --trace */
    } else if (rc) {
        fprintf(stderr, "mlsys-lab: %s: %s\n", l->id, why);
        rc = interrupted ? 130 : 1;
    }
    if (l->after)
        l->after(&a, rc);
    lab_args_free(&a);
    return rc;
}

int runner_worker(const lab *l, int argc, char **argv)
{
    lab_args a;
    char err[512];
    if (lab_args_parse(l, argc, argv, &a, err, sizeof err) != 0) {
        fprintf(stderr, "%s\n", err);
        return 2;
    }
    mlsys_comm *c = mlsys_init();
    if (!c) {
        lab_args_free(&a);
        return 2;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);
    const char *backend = lab_arg_str(&a, "backend");
    if (backend && !strcmp(backend, "nccl") && nccl_attach(c, err, sizeof err) != 0) {
        fprintf(stderr, "mlsys-lab: %s\n", err);
        mlsys_finalize(c);
        lab_args_free(&a);
        return 2;
    }
    int rc;
    if (l->rank_main) {
        rc = l->rank_main(c, &a);
    } else {
        a.comm = c;                 /* a single-process lab's one rank: its engines emit */
        rc = l->main ? l->main(&a) : 0;
        a.comm = NULL;
    }
    fflush(stdout);
    mlsys_finalize(c);
    lab_args_free(&a);
    return rc;
}
