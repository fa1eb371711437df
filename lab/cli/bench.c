/* bench.c - `mlsys-lab bench`: an nccl-tests-style benchmark of our collectives over the
 * measuring engine in core/bench. This half is the command: its flags, the sweep of sizes,
 * the checks before a job, and the job itself (forked ranks through the runner, or under
 * mpirun with --backend mpi, where "native" is MPI's own); bench_rank.c is what each rank
 * does and what rank 0 prints. --memcpy: the one-core ceiling. */
#include "bench_cmd.h"
#include "../backend/mpirun.h"
#include "../job/runner.h"
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- flags ---- */

static const lab_flag bench_flags[] = {
    {"minbytes", 0, FLAG_SIZE, "8", NULL, 1, FLAG_NO_MAX,
     "smallest size (nccl-tests' -b)"},
    {"maxbytes", 'e', FLAG_SIZE, "64M", NULL, 1, FLAG_NO_MAX, "largest size"},
    {"stepfactor", 'f', FLAG_INT, "2", NULL, 2, 1024, "multiply the size by N each step"},
    {"stepbytes", 'i', FLAG_SIZE, NULL, NULL, 1, FLAG_NO_MAX, "add SIZE each step instead"},
    {"sizes", 0, FLAG_STR, NULL, NULL, 0, 0, "exact sizes instead of a sweep: 1024,1M,100M"},
    {"iters", 'n', FLAG_INT, "20", NULL, 1, 100000000, "timed calls per size"},
    {"warmup_iters", 0, FLAG_INT, "5", NULL, 0, 100000000,
     "untimed calls before (nccl-tests' -w)"},
    {"check", 'c', FLAG_INT, "1", NULL, 0, 1,
     "check every result against the known inputs"},
    {"op", 'o', FLAG_CHOICE, "sum", "sum|prod|min|max|avg|product", 0, 0,
     "the reduction's operator"},
    {"datatype", 'd', FLAG_CHOICE, "float",
     "float|double|int32|int64|f32|float32|f64|float64|i32|int|i64", 0, 0, "element type"},
    {"root", 'r', FLAG_INT, "0", NULL, 0, BENCH_MAX_RANKS - 1,
     "root rank of broadcast, reduce, gather, scatter"},
    {"output_file", 'J', FLAG_STR, NULL, NULL, 0, 0, "also write the results as JSON"},
    {"world-size", 'w', FLAG_INT, "2", NULL, 1, BENCH_MAX_RANKS, "ranks"},
    {"algo", 0, FLAG_STR, "auto", NULL, 0, 0,
     "an algorithm of the collective, auto or all (mpi: native is MPI's own)"},
    {"timeout", 0, FLAG_DOUBLE, "30", NULL, 0, 86400,
     "seconds a blocked send/recv waits before 'deadlock suspected'"},
    {"alpha", 0, FLAG_DOUBLE, NULL, NULL, 0, 100000000,
     "cost model: latency per message in us (with --beta)"},
    {"beta", 0, FLAG_DOUBLE, NULL, NULL, 0, 100000000,
     "cost model: bandwidth of one link in GB/s (with --alpha)"},
    {"memcpy", 0, FLAG_BOOL, NULL, NULL, 0, 0,
     "measure the one-core memcpy ceiling at --maxbytes instead"},
    {"backend", 'b', FLAG_CHOICE, "shm", "shm|gloo|mpi", 0, 0,
     "shm: forked ranks, our transport; mpi: under mpirun (--algo native is MPI's)"},
    {"mpi-rank", 0, FLAG_BOOL, NULL, NULL, 0, 0, NULL},     /* internal: one rank under mpirun */
    {NULL, 0, 0, NULL, NULL, 0, 0, NULL}
};

const lab_command bench_command = {
    .name = "bench",
    .args = "[COLLECTIVE]",
    .min_pos = 0,
    .max_pos = 1,
    .summary = "An nccl-tests-style benchmark of the runtime's collectives on N local ranks.\n"
               "COLLECTIVE: all_reduce (default), all_gather, reduce_scatter, broadcast, "
               "reduce,\n            all_to_all, gather, scatter",
    .flags = bench_flags,
    .notes = "algbw = size / time; busbw = algbw x factor: 2(n-1)/n all_reduce; (n-1)/n\n"
             "all_gather, reduce_scatter, all_to_all, gather, scatter; 1 broadcast, reduce.\n"
             "For the per-rank collectives the size is the whole buffer of n blocks.\n"
             "nccl-tests' -b and -w are --backend and --world-size here, as in every command\n"
             "and lab (mlsys-lab help flags): use --minbytes and --warmup_iters.\n",
};

/* One line on stderr and the usage status. */
static int usage_error(const char *fmt, const char *a, const char *b)
{
    fprintf(stderr, "mlsys-lab bench: ");
    fprintf(stderr, fmt, a, b ? b : "");
    fprintf(stderr, " (see mlsys-lab bench --help)\n");
    return 2;
}

static int parse_size_list(const char *v, bench_cfg *g)
{
    char *copy = mlsys_xstrdup(v), *save = NULL;
    int rc = 0;
    g->nsizes = 0;
    for (char *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        uint64_t s;
        if (mlsys_parse_size(t, &s) != 0 || s == 0) {
            rc = usage_error("--sizes: \"%s\" is not a size above 0 (use 8, 64K, 64M)", t, NULL);
            break;
        }
        if (g->nsizes == BENCH_MAX_SIZES) {
            rc = usage_error("--sizes: more than %s sizes", "4096", NULL);
            break;
        }
        g->sizes[g->nsizes++] = s;
    }
    if (!rc && g->nsizes == 0)
        rc = usage_error("--sizes: \"%s\" names no size", v, NULL);
    free(copy);
    return rc;
}

/* Parse argv into g (the table above does the flags). Returns 0, 2 for a usage error, or 1
 * after --help. */
static int parse_args(int argc, char **argv, bench_cfg *g)
{
    lab_args a;
    int rc = lab_command_args(&bench_command, argc, argv, &a);
    if (rc >= 0)
        return rc == 0 ? 1 : rc;
    if (a.npos == 1 && (mlsys_coll_parse(a.pos[0], &g->coll) != 0 ||
                        g->coll == MLSYS_COLL_BARRIER)) {
        rc = usage_error("unknown collective \"%s\": use all_reduce, all_gather, "
                         "reduce_scatter, broadcast, reduce, all_to_all, gather, scatter%s",
                         a.pos[0], NULL);
        goto out;
    }
    g->minbytes = lab_arg_size(&a, "minbytes");
    g->maxbytes = lab_arg_size(&a, "maxbytes");
    g->stepfactor = lab_arg_int(&a, "stepfactor");
    g->stepbytes = lab_arg_given(&a, "stepbytes") && !lab_arg_given(&a, "stepfactor")
                       ? lab_arg_size(&a, "stepbytes") : 0;
    g->iters = lab_arg_int(&a, "iters");
    g->warmup = lab_arg_int(&a, "warmup_iters");
    g->check = (int)lab_arg_int(&a, "check");
    mlsys_op_parse(lab_arg_str(&a, "op"), &g->op);          /* the choices are its words */
    mlsys_dtype_parse(lab_arg_str(&a, "datatype"), &g->dt);
    g->root = (int)lab_arg_int(&a, "root");
    g->json_path = lab_arg_text(&a, "output_file");
    g->world_size = (int)lab_arg_int(&a, "world-size");
    g->algo = lab_arg_text(&a, "algo");
    g->timeout_s = lab_arg_double(&a, "timeout");
    g->alpha_us = lab_arg_double(&a, "alpha");
    g->beta_gbs = lab_arg_double(&a, "beta");
    g->memcpy_mode = lab_arg_bool(&a, "memcpy");
    g->mpi = !strcmp(lab_arg_str(&a, "backend"), "mpi");
    g->mpi_rank = lab_arg_bool(&a, "mpi-rank");
    rc = 0;
    if (lab_arg_given(&a, "sizes")) {
        if (lab_arg_given(&a, "minbytes") || lab_arg_given(&a, "maxbytes")) {
            rc = usage_error("--sizes replaces --minbytes/--maxbytes: give one or the other%s",
                             "", NULL);
            goto out;
        }
        g->size_list = 1;
        rc = parse_size_list(lab_arg_str(&a, "sizes"), g);
    }
out:
    lab_args_free(&a);        /* g's texts point into argv (lab_arg_text) */
    return rc;
}

/* The sweep: min, min*f, ... <= max (or min, min+step, ...), as nccl-tests. */
static int make_sweep(bench_cfg *g)
{
    if (g->minbytes > g->maxbytes) {
        char lo[32], hi[32];
        snprintf(lo, sizeof lo, "%" PRIu64, g->minbytes);
        snprintf(hi, sizeof hi, "%" PRIu64, g->maxbytes);
        return usage_error("--minbytes (%s B) is larger than -e/--maxbytes (%s B)", lo, hi);
    }
    g->nsizes = 0;
    for (uint64_t s = g->minbytes; s <= g->maxbytes;) {
        if (g->nsizes == BENCH_MAX_SIZES)
            return usage_error("more than %s sizes: use a larger step", "4096", NULL);
        g->sizes[g->nsizes++] = s;
        uint64_t next = g->stepbytes ? s + g->stepbytes : s * (uint64_t)g->stepfactor;
        if (next <= s)
            break;
        s = next;
    }
    return 0;
}

/* Check what needs the rank count and the collective: root, algorithm, memory. */
static int validate(bench_cfg *g)
{
    if (g->root >= g->world_size) {
        char r[16], n[16];
        snprintf(r, sizeof r, "%d", g->root);
        snprintf(n, sizeof n, "%d", g->world_size);
        return usage_error("--root %s is not a rank of a %s-rank job", r, n);
    }
    if ((g->alpha_us > 0) != (g->beta_gbs > 0))
        return usage_error("--alpha and --beta go together%s", "", NULL);
    const char *const *names = mlsys_algo_names(g->coll);
    g->nalgos = 0;
    if (!strcmp(g->algo, "native") && !g->mpi)
        return usage_error("--algo native is the backend's own collective: it needs --backend "
                           "mpi (shm has only ours)%s", "", NULL);
    if (!strcmp(g->algo, "all")) {
        for (int i = 0; names && names[i] && g->nalgos < 31; i++)
            g->algos[g->nalgos++] = names[i];
        if (g->mpi)
            g->algos[g->nalgos++] = "native";      /* MPI's own, last */
    } else {
        int ok = !strcmp(g->algo, "auto") || !strcmp(g->algo, "native");
        for (int i = 0; !ok && names && names[i]; i++)
            ok = !strcmp(names[i], g->algo);
        if (!ok) {
            char list[256] = "";
            for (int i = 0; names && names[i]; i++) {
                strncat(list, names[i], sizeof list - strlen(list) - 1);
                strncat(list, ", ", sizeof list - strlen(list) - 1);
            }
            strncat(list, g->mpi ? "native, auto, all" : "auto, all",
                    sizeof list - strlen(list) - 1);
            fprintf(stderr, "mlsys-lab bench: --algo: %s has no algorithm \"%s\": use %s\n",
                    mlsys_coll_name(g->coll), g->algo, list);
            return 2;
        }
        g->algos[g->nalgos++] = g->algo;
    }
    if (g->nalgos == 0)
        return usage_error("--algo all: %s has no algorithms%s", mlsys_coll_name(g->coll), NULL);
    uint64_t biggest = 0;
    for (int i = 0; i < g->nsizes; i++)
        biggest = g->sizes[i] > biggest ? g->sizes[i] : biggest;
    long pages = sysconf(_SC_PHYS_PAGES), psize = sysconf(_SC_PAGESIZE);
    double need = 2.0 * (double)biggest * g->world_size;
    if (pages > 0 && psize > 0 && need > 0.8 * (double)pages * (double)psize) {
        char a[32], b[32];
        snprintf(a, sizeof a, "%.1f GiB", need / (1u << 30));
        snprintf(b, sizeof b, "%.1f GiB", (double)pages * (double)psize / (1u << 30));
        return usage_error("the buffers need %s (2 x the largest size x ranks) and the machine "
                           "has %s: use a smaller --maxbytes", a, b);
    }
    if (g->json_path && !g->mpi_rank) {
        FILE *f = fopen(g->json_path, "w");
        if (!f)
            return usage_error("-J/--output_file: cannot write \"%s\"%s", g->json_path, NULL);
        fclose(f);
    }
    return 0;
}

/* One rank of a --backend mpi job: join the job mpirun started (the MPI plugin) and run. */
static int bench_mpi_rank(bench_cfg *g)
{
    mlsys_comm *c = mlsys_init();
    if (!c)
        return 1;
    setvbuf(stdout, NULL, _IOLBF, 0);
    int rc = bench_rank_main(c, g);
    fflush(stdout);
    mlsys_finalize(c);
    return rc;
}

/* --backend mpi: run `mlsys-lab bench ARGS --mpi-rank` under mpirun (lab/mpirun.h) and say
 * how it ended. Exit status as bench_main's. */
static int bench_run_mpi(const bench_cfg *g, int argc, char **argv)
{
    char path[PATH_MAX], exe[PATH_MAX], err[512], why[300];
    struct stat sb;
    if (!mpirun_find(path, sizeof path)) {
        fprintf(stderr, "mlsys-lab bench: --backend mpi: mpirun is not on PATH (install "
                "openmpi-bin and libopenmpi-dev, or use --backend shm)\n");
        return 2;
    }
    if (stat(mpirun_plugin_path(path, sizeof path), &sb) != 0) {
        fprintf(stderr, "mlsys-lab bench: --backend mpi: the MPI plugin %s is missing (build it "
                "with `make`, which needs mpicc from libopenmpi-dev)\n", path);
        return 2;
    }
    ssize_t k = readlink("/proc/self/exe", exe, sizeof exe - 1);
    exe[k < 0 ? 0 : k] = 0;
    char **args = mlsys_xcalloc((size_t)argc + 2, sizeof(char *));
    args[0] = "bench";
    for (int i = 1; i < argc; i++)
        args[i] = argv[i];
    args[argc] = "--mpi-rank";
    mpirun_opts o = {
        .world_size = g->world_size,
        .timeout_ms = (int)(g->timeout_s * 1000 + 0.5),
    };
    mlsys_job_install_signal_stop();
    mpirun_job *j = mpirun_start(&o, exe, args, err, sizeof err);
    free(args);
    if (!j) {
        fprintf(stderr, "mlsys-lab bench: %s\n", err);
        return 1;
    }
    int rc = mpirun_wait(j, NULL, -1, why, sizeof why);
    if (rc) {
        int only_wrong = mpirun_failed_rank(j) == 0 &&
                         mpirun_exit_status(j) == BENCH_EXIT_WRONG;
        if (!only_wrong)
            fprintf(stderr, "mlsys-lab bench: %s\n", why);
        rc = mlsys_job_stop_requested() ? 130 : 1;    /* Ctrl-C: 130, as every command */
    }
    mpirun_free(j);
    return rc;
}

int bench_main(int argc, char **argv)
{
    bench_cfg g;
    memset(&g, 0, sizeof g);
    g.coll = MLSYS_COLL_ALLREDUCE;      /* the other defaults are bench_flags' */
    g.sizes = mlsys_xcalloc(BENCH_MAX_SIZES, sizeof *g.sizes);
    int rc = parse_args(argc, argv, &g);
    if (rc == 1) {
        rc = 0;
        goto out;
    }
    if (rc)
        goto out;
    if (g.memcpy_mode) {
        rc = bench_memcpy(&g);
        goto out;
    }
    if (!g.size_list && (rc = make_sweep(&g)))
        goto out;
    if ((rc = validate(&g)))
        goto out;
    if (g.mpi_rank) {
        rc = bench_mpi_rank(&g);
        goto out;
    }
    if (g.mpi) {
        rc = bench_run_mpi(&g, argc, argv);
        goto out;
    }

    mlsys_launch_opts o;
    memset(&o, 0, sizeof o);
    o.world_size = g.world_size;
    o.timeout_ms = (int)(g.timeout_s * 1000 + 0.5);
    o.backend = "shm";
    char why[256] = "";
    mlsys_job_install_signal_stop();
    runner_spec spec = {.fn = bench_rank_main, .arg = &g};
    mlsys_job *j = runner_start(&o, &spec, why, sizeof why);
    if (!j) {
        fprintf(stderr, "mlsys-lab bench: %s\n", why);
        rc = 1;
        goto out;
    }
    rc = mlsys_job_wait(j, NULL, -1, why, sizeof why);
    if (rc) {
        const mlsys_rank_status *s0 = mlsys_job_status(j, 0);
        int only_wrong = mlsys_job_failed_rank(j) == 0 && s0->exited &&
                         s0->code == BENCH_EXIT_WRONG;
        if (!only_wrong)
            fprintf(stderr, "mlsys-lab bench: %s\n", why);
        rc = mlsys_job_stop_requested() ? 130 : 1;    /* Ctrl-C: 130, as every command */
    }
    mlsys_job_free(j);
out:
    free(g.sizes);
    return rc;
}
