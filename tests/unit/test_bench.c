/* test_bench.c - `mlsys-lab bench` run as the real binary (env MLSYS_LAB_BIN, default
 * build/mlsys-lab): the table parses, every #wrong is 0, count = size / element size,
 * busbw = algbw x the nccl-tests factor and algbw = size / time within the printed rounding,
 * the checker catches an injected wrong element, and bad flags exit 2 with one line.
 * No timing is asserted. */
#include "run_bin.h"
#include <check.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include "../../core/mlsys.h"

#define MAX_ROWS 64

/* Run `mlsys-lab bench ARGS...` with stdout and stderr in files; returns the exit status. */
static int run_bench(const char *const *args, char **out, char **err, const char *inject)
{
    char po[] = "/tmp/test_bench_outXXXXXX", pe[] = "/tmp/test_bench_errXXXXXX";
    int fo = mkstemp(po), fe = mkstemp(pe);
    ck_assert(fo >= 0 && fe >= 0);
    unlink(po);
    unlink(pe);
    const char *argv[40] = {bin(), "bench"};
    int argc = 2;
    for (int i = 0; args[i] && argc < 39; i++)
        argv[argc++] = args[i];
    argv[argc] = NULL;
    pid_t pid = fork();
    ck_assert(pid >= 0);
    if (pid == 0) {
        dup2(fo, 1);
        dup2(fe, 2);
        if (inject)
            setenv("MLSYS_BENCH_INJECT", inject, 1);
        else
            unsetenv("MLSYS_BENCH_INJECT");
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    int st;
    ck_assert(waitpid(pid, &st, 0) == pid);
    *out = slurp_fd(fo);
    *err = slurp_fd(fe);
    close(fo);
    close(fe);
    ck_assert_msg(WIFEXITED(st), "bench died by a signal");
    ck_assert_msg(WEXITSTATUS(st) != 127, "cannot run %s (set MLSYS_LAB_BIN)", bin());
    return WEXITSTATUS(st);
}

typedef struct row {
    unsigned long long size, count;
    char type[16], redop[16], algo[32];
    int root;
    double t[2], algbw[2], busbw[2];
    long wrong[2];
} row;

typedef struct table {
    int nrows;
    row rows[MAX_ROWS];
} table;

/* The data lines of every table in out, in order: a new table starts after "# algorithm:" or
 * at the column header. Returns the number of tables. */
static int parse_tables(const char *out, table *tabs, int max)
{
    int nt = 0;
    char *copy = strdup(out), *save = NULL;
    for (char *ln = strtok_r(copy, "\n", &save); ln; ln = strtok_r(NULL, "\n", &save)) {
        if (strstr(ln, "#wrong") && ln[0] == '#') {
            ck_assert_msg(nt < max, "more tables than expected");
            tabs[nt++].nrows = 0;
            continue;
        }
        if (ln[0] == '#')
            continue;
        ck_assert_msg(nt > 0, "a row before the header: %s", ln);
        table *t = &tabs[nt - 1];
        ck_assert(t->nrows < MAX_ROWS);
        row *r = &t->rows[t->nrows++];
        int got = sscanf(ln, "%llu %llu %15s %15s %d %lf %lf %lf %ld %lf %lf %lf %ld %31s",
                         &r->size, &r->count, r->type, r->redop, &r->root, &r->t[0],
                         &r->algbw[0], &r->busbw[0], &r->wrong[0], &r->t[1], &r->algbw[1],
                         &r->busbw[1], &r->wrong[1], r->algo);
        ck_assert_msg(got == 14, "row does not parse (%d fields): %s", got, ln);
    }
    free(copy);
    return nt;
}

/* "# Avg bus bandwidth    : X" of the k-th table. */
static double avg_busbw(const char *out, int k)
{
    const char *p = out;
    for (int i = 0; i <= k; i++) {
        p = strstr(p, "# Avg bus bandwidth");
        ck_assert_msg(p != NULL, "no Avg bus bandwidth line %d", k);
        p++;
    }
    const char *colon = strchr(p, ':');
    ck_assert(colon != NULL);
    return atof(colon + 1);
}

/* The per-row properties every table must have: values printed with 2 decimals. */
static void check_row(const row *r, const char *type, size_t esize, double factor)
{
    ck_assert_str_eq(r->type, type);
    ck_assert_msg(r->count * esize == r->size, "count %llu x %zu != size %llu", r->count, esize,
                  r->size);
    for (int k = 0; k < 2; k++) {
        ck_assert_msg(r->wrong[k] == 0, "size %llu: %ld wrong", r->size, r->wrong[k]);
        ck_assert(r->t[k] > 0);
        double bw = (double)r->size / (r->t[k] * 1e3);           /* GB/s from B and us */
        double tol = 0.0051 + bw * 0.005 / r->t[k] * 1.01;       /* algbw and time rounding */
        ck_assert_msg(fabs(r->algbw[k] - bw) <= tol, "size %llu: algbw %.2f, size/time %.4f",
                      r->size, r->algbw[k], bw);
        double want = r->algbw[k] * factor;
        ck_assert_msg(fabs(r->busbw[k] - want) <= 0.0051 + 0.0051 * factor,
                      "size %llu: busbw %.2f != algbw %.2f x %.4f", r->size, r->busbw[k],
                      r->algbw[k], factor);
    }
}

/* The JSON file (-J) carries 6 significant digits: there busbw / algbw must be the factor
 * and algbw must be size / time to 1e-4, whatever the size. Returns the rows seen. */
static int check_json(const char *path, double factor)
{
    int fd = open(path, O_RDONLY);
    ck_assert_msg(fd >= 0, "no JSON file %s", path);
    char *js = slurp_fd(fd);
    close(fd);
    int rows = 0;
    for (const char *p = js; (p = strstr(p, "{\"size\": ")); rows++) {
        double size = atof(p + 9);
        p++;
        for (int k = 0; k < 2; k++) {
            const char *t = strstr(p, "\"time_us\": "), *a = strstr(p, "\"algbw_gbs\": ");
            const char *b = strstr(p, "\"busbw_gbs\": ");
            ck_assert(t && a && b);
            double tv = atof(t + 11), av = atof(a + 13), bv = atof(b + 13);
            ck_assert(tv > 0 && av > 0);
            ck_assert_msg(fabs(av - size / (tv * 1e3)) <= 1e-4 * av, "algbw %g != %g / %g us",
                          av, size, tv);
            ck_assert_msg(fabs(bv - av * factor) <= 1e-4 * av, "busbw %g != %g x %g", bv, av,
                          factor);
            p = b + 1;
        }
    }
    free(js);
    return rows;
}

START_TEST(all_reduce_table)
{
    const char *args[] = {"--minbytes", "8", "--maxbytes", "64K", "-f", "8", "-n", "3",
                          "--warmup_iters", "1", "--world-size", "2", NULL};
    char *out, *err;
    int rc = run_bench(args, &out, &err, NULL);
    ck_assert_msg(rc == 0, "exit %d: %s", rc, err);
    table t[2];
    ck_assert_int_eq(parse_tables(out, t, 2), 1);
    /* nccl-tests' sweep: 8, 64, 512, 4096, 32768 (the next, 262144, is over 64 KiB) */
    int k = 0;
    double sum = 0;
    for (unsigned long long s = 8; s <= 65536; s *= 8, k++) {
        ck_assert_int_lt(k, t[0].nrows);
        const row *r = &t[0].rows[k];
        ck_assert_uint_eq(r->size, s);
        ck_assert_str_eq(r->redop, "sum");
        ck_assert_int_eq(r->root, -1);
        check_row(r, "float", 4, 2.0 * (2 - 1) / 2);
        sum += r->busbw[0] + r->busbw[1];
    }
    ck_assert_int_eq(t[0].nrows, k);
    ck_assert(fabs(avg_busbw(out, 0) - sum / (2 * k)) <= 0.006);
    ck_assert_ptr_nonnull(strstr(out, "# Out of bounds values : 0 OK"));
    ck_assert_ptr_nonnull(strstr(out, "2(n-1)/n"));
    free(out);
    free(err);
}
END_TEST

/* Every collective on 3 ranks (a factor that is not 1, per-rank counts that must round to
 * multiples of 3 elements), each with its own type, operator and root. */
static const struct {
    const char *coll, *type, *op, *root;
    size_t esize;
    int per_rank;
    double factor;
} cases[] = {
    {"all_reduce", "int32", "prod", "0", 4, 0, 4.0 / 3},
    {"all_gather", "double", "sum", "0", 8, 1, 2.0 / 3},
    {"reduce_scatter", "int64", "avg", "0", 8, 1, 2.0 / 3},
    {"broadcast", "float", "sum", "2", 4, 0, 1.0},
    {"reduce", "double", "min", "1", 8, 0, 1.0},
    {"all_to_all", "int32", "sum", "0", 4, 1, 2.0 / 3},
    {"gather", "int64", "sum", "2", 8, 1, 2.0 / 3},
    {"scatter", "float", "sum", "1", 4, 1, 2.0 / 3},
    {"all_reduce", "float", "avg", "0", 4, 0, 4.0 / 3},
    {"reduce_scatter", "float", "max", "0", 4, 1, 2.0 / 3},
};

START_TEST(every_collective)
{
    char path[] = "/tmp/test_bench_jsonXXXXXX";
    int fd = mkstemp(path);
    ck_assert(fd >= 0);
    close(fd);
    /* -w is the world size here as in every command (nccl-tests' warm-up letter no more) */
    const char *args[] = {cases[_i].coll, "--datatype", cases[_i].type, "-o", cases[_i].op, "-r",
                          cases[_i].root, "--minbytes", "10", "--maxbytes", "20K", "-f", "7", "-n",
                          "2", "--warmup_iters", "1", "-w", "3", "-J", path, NULL};
    char *out, *err;
    int rc = run_bench(args, &out, &err, NULL);
    ck_assert_msg(rc == 0, "%s: exit %d: %s", cases[_i].coll, rc, err);
    ck_assert_msg(strstr(out, "on 3 ranks") != NULL, "-w 3 is 3 ranks: %s", out);
    table t[2];
    ck_assert_int_eq(parse_tables(out, t, 2), 1);
    size_t unit = cases[_i].esize * (cases[_i].per_rank ? 3 : 1);
    int k = 0;
    for (unsigned long long s = 10; s <= 20480; s *= 7) {
        unsigned long long want = s / unit * unit;
        if (!want)
            continue;          /* less than one element per rank: skipped, said in a comment */
        ck_assert_int_lt(k, t[0].nrows);
        const row *r = &t[0].rows[k++];
        ck_assert_uint_eq(r->size, want);
        int reduction = !strcmp(cases[_i].coll, "all_reduce") ||
                        !strcmp(cases[_i].coll, "reduce") ||
                        !strcmp(cases[_i].coll, "reduce_scatter");
        ck_assert_str_eq(r->redop, reduction ? cases[_i].op : "none");
        int rooted = !strcmp(cases[_i].coll, "broadcast") || !strcmp(cases[_i].coll, "reduce") ||
                     !strcmp(cases[_i].coll, "gather") || !strcmp(cases[_i].coll, "scatter");
        ck_assert_int_eq(r->root, rooted ? atoi(cases[_i].root) : -1);
        check_row(r, cases[_i].type, cases[_i].esize, cases[_i].factor);
    }
    ck_assert_int_eq(t[0].nrows, k);
    ck_assert_int_gt(k, 0);
    ck_assert_int_eq(check_json(path, cases[_i].factor), k);
    unlink(path);
    free(out);
    free(err);
}
END_TEST

/* The checker must see a wrong element: the hook corrupts element 0 of one checked rank's
 * result after each check call, so each column counts exactly one and the exit status is 1. */
START_TEST(injected_error_is_counted)
{
    const char *colls[] = {"all_reduce", "reduce", "all_gather", "scatter"};
    for (int c = 0; c < 4; c++) {
        const char *args[] = {colls[c], "-r", "1", "--minbytes", "24", "--maxbytes", "1536", "-f",
                              "8", "-n", "1", "--warmup_iters", "0", "--world-size", "3", NULL};
        char *out, *err;
        int rc = run_bench(args, &out, &err, "1");
        ck_assert_msg(rc == 1, "%s: exit %d with a corrupted element", colls[c], rc);
        table t[2];
        ck_assert_int_eq(parse_tables(out, t, 2), 1);
        ck_assert_int_eq(t[0].nrows, 3);
        for (int i = 0; i < t[0].nrows; i++)
            for (int k = 0; k < 2; k++)
                ck_assert_msg(t[0].rows[i].wrong[k] == 1, "%s size %llu: #wrong %ld, want 1",
                              colls[c], t[0].rows[i].size, t[0].rows[i].wrong[k]);
        ck_assert_ptr_nonnull(strstr(out, "# Out of bounds values : 6 FAILED"));
        free(out);
        free(err);
    }
}
END_TEST

/* --algo all: one table per algorithm of the collective, in the table's order; each row ran
 * that algorithm or the baseline it falls back to. */
START_TEST(algo_all_tables)
{
    const char *args[] = {"--algo", "all", "--minbytes", "8", "--maxbytes", "64K", "-f", "64",
                          "-n", "1", "--warmup_iters", "0", "--world-size", "3", NULL};
    char *out, *err;
    int rc = run_bench(args, &out, &err, NULL);
    ck_assert_msg(rc == 0, "exit %d: %s", rc, err);
    const char *const *names = mlsys_algo_names(MLSYS_COLL_ALLREDUCE);
    int n = 0;
    while (names[n])
        n++;
    table t[16];
    ck_assert_int_eq(parse_tables(out, t, 16), n);
    const char *p = out;
    for (int a = 0; a < n; a++) {
        char want[64];
        snprintf(want, sizeof want, "# algorithm: %s\n", names[a]);
        p = strstr(p, want);
        ck_assert_msg(p != NULL, "no table for %s (or out of order)", names[a]);
        ck_assert_int_eq(t[a].nrows, 3);
        for (int i = 0; i < t[a].nrows; i++) {
            const char *ran = t[a].rows[i].algo;
            ck_assert_msg(!strcmp(ran, names[a]) || !strcmp(ran, names[0]),
                          "table %s: row ran %s", names[a], ran);
            check_row(&t[a].rows[i], "float", 4, 4.0 / 3);
        }
    }
    free(out);
    free(err);
}
END_TEST

START_TEST(json_output)
{
    char path[] = "/tmp/test_bench_jsonXXXXXX";
    int fd = mkstemp(path);
    ck_assert(fd >= 0);
    close(fd);
    const char *args[] = {"--minbytes", "8", "--maxbytes", "4K", "-f", "8", "-n", "1",
                          "--warmup_iters", "0", "-J", path, NULL};
    char *out, *err;
    int rc = run_bench(args, &out, &err, NULL);
    ck_assert_msg(rc == 0, "exit %d: %s", rc, err);
    fd = open(path, O_RDONLY);
    ck_assert(fd >= 0);
    char *js = slurp_fd(fd);
    close(fd);
    unlink(path);
    ck_assert_ptr_nonnull(strstr(js, "\"collective\": \"all_reduce\""));
    ck_assert_ptr_nonnull(strstr(js, "\"world_size\": 2"));
    int sizes = 0;
    for (const char *p = js; (p = strstr(p, "\"size\": ")); p++)
        sizes++;
    ck_assert_int_eq(sizes, 4);          /* 8, 64, 512, 4096 */
    ck_assert_ptr_nonnull(strstr(js, "\"size\": 4096, \"count\": 1024"));
    ck_assert(js[0] == '{' && strstr(js, "}\n") != NULL);
    free(js);
    free(out);
    free(err);
}
END_TEST

START_TEST(memcpy_ceiling)
{
    const char *args[] = {"--memcpy", "--maxbytes", "1M", "-n", "2", "--warmup_iters", "1", NULL};
    char *out, *err;
    ck_assert_int_eq(run_bench(args, &out, &err, NULL), 0);
    ck_assert_ptr_nonnull(strstr(out, "memcpy bytes=1048576 time_us="));
    free(out);
    free(err);
}
END_TEST

static const char *const bad[][8] = {
    {"--no-such-flag"},
    {"-x"},
    {"--minbytes", "abc"},
    {"--minbytes", "0"},
    {"--maxbytes"},
    {"--minbytes", "1M", "--maxbytes", "1K"},
    {"-f", "1"},
    {"-n", "0"},
    {"--warmup_iters", "-1"},
    {"-c", "2"},
    {"-o", "xor"},
    {"--datatype", "half"},
    {"--world-size", "0"},
    {"--world-size", "65"},
    {"-r", "2", "--world-size", "2"},
    {"not_a_collective"},
    {"all_reduce", "broadcast"},
    {"--algo", "no_such_algo"},
    {"--sizes", "8,x"},
    {"--sizes", "8", "--minbytes", "8"},
    {"--alpha", "1"},
    {"--timeout", "0"},
    {"--memcpy=1"},
    {"--algo", "native"},
    {"--backend", "tcp"},
};

START_TEST(bad_flag_exits_2)
{
    char *out, *err;
    int rc = run_bench((const char *const *)bad[_i], &out, &err, NULL);
    ck_assert_msg(rc == 2, "%s: exit %d, want 2", bad[_i][0], rc);
    size_t len = strlen(err);
    ck_assert_msg(len > 0 && err[len - 1] == '\n' && strchr(err, '\n') == err + len - 1,
                  "%s: stderr is not one line: '%s'", bad[_i][0], err);
    ck_assert_msg(strncmp(err, "mlsys-lab bench: ", 17) == 0, "no prefix: %s", err);
    ck_assert_msg(out[0] == 0, "%s: printed a table: %s", bad[_i][0], out);
    free(out);
    free(err);
}
END_TEST

/* --backend mpi where mpirun and the plugin exist: the same tables under mpirun, with MPI's
 * own collective as the algorithm "native" after ours. */
static int have_mpi(void)
{
    char plugin[4096];
    snprintf(plugin, sizeof plugin, "%s", bin());
    char *slash = strrchr(plugin, '/');
    size_t off = slash ? (size_t)(slash + 1 - plugin) : 0;
    snprintf(plugin + off, sizeof plugin - off, "libmlsys-mpi.so");
    return system("command -v mpirun >/dev/null 2>&1") == 0 && access(plugin, R_OK) == 0;
}

START_TEST(mpi_backend_tables)
{
    if (!have_mpi())
        return;
    const char *colls[] = {"all_reduce", "all_gather", "broadcast"};
    const double factors[] = {4.0 / 3, 2.0 / 3, 1.0};
    for (int c = 0; c < 3; c++) {
        const char *args[] = {colls[c], "--backend", "mpi", "--algo", "all", "--minbytes", "24",
                              "--maxbytes", "24K", "-f", "32", "-n", "2", "--warmup_iters", "1",
                              "--world-size", "3", NULL};
        char *out, *err;
        int rc = run_bench(args, &out, &err, NULL);
        ck_assert_msg(rc == 0, "%s: exit %d: %s", colls[c], rc, err);
        ck_assert_msg(strstr(out, "on 3 ranks (mpi backend)") != NULL, "%s", out);
        mlsys_coll coll;
        ck_assert_int_eq(mlsys_coll_parse(colls[c], &coll), 0);
        const char *const *names = mlsys_algo_names(coll);
        int n = 0;
        while (names[n])
            n++;
        table t[16];
        ck_assert_int_eq(parse_tables(out, t, 16), n + 1);
        ck_assert_ptr_nonnull(strstr(out, "# algorithm: native\n"));
        for (int a = 0; a <= n; a++) {
            ck_assert_int_eq(t[a].nrows, 3);
            for (int i = 0; i < 3; i++) {
                if (a == n)
                    ck_assert_str_eq(t[a].rows[i].algo, "native");
                check_row(&t[a].rows[i], "float", 4, factors[c]);
            }
        }
        free(out);
        free(err);
    }
}
END_TEST

START_TEST(mpi_backend_injected_error)
{
    if (!have_mpi())
        return;
    const char *args[] = {"--backend", "mpi", "--algo", "native", "--minbytes", "24", "--maxbytes",
                          "1536", "-f", "8", "-n", "1", "--warmup_iters", "0", "--world-size", "3",
                          NULL};
    char *out, *err;
    int rc = run_bench(args, &out, &err, "1");
    ck_assert_msg(rc == 1, "exit %d with a corrupted element", rc);
    ck_assert_ptr_nonnull(strstr(out, "# Out of bounds values : 6 FAILED"));
    free(out);
    free(err);
}
END_TEST

START_TEST(help_exits_0)
{
    const char *args[] = {"--help", NULL};
    char *out, *err;
    ck_assert_int_eq(run_bench(args, &out, &err, NULL), 0);
    ck_assert_ptr_nonnull(strstr(out, "usage: mlsys-lab bench"));
    ck_assert_ptr_nonnull(strstr(out, "--warmup_iters"));
    free(out);
    free(err);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("bench");
    TCase *tc = tcase_create("bench");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, all_reduce_table);
    tcase_add_loop_test(tc, every_collective, 0, (int)(sizeof cases / sizeof cases[0]));
    tcase_add_test(tc, injected_error_is_counted);
    tcase_add_test(tc, algo_all_tables);
    tcase_add_test(tc, json_output);
    tcase_add_test(tc, memcpy_ceiling);
    tcase_add_loop_test(tc, bad_flag_exits_2, 0, (int)(sizeof bad / sizeof bad[0]));
    tcase_add_test(tc, help_exits_0);
    tcase_add_test(tc, mpi_backend_tables);
    tcase_add_test(tc, mpi_backend_injected_error);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
