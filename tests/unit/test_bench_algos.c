/* test_bench_algos.c - ch04/benchmark-algorithms as the real binary (MLSYS_LAB_BIN): a row
 * per size in the given order, elements = floor(size/4), Bandwidth = 2S(N-1)/N / Mean within
 * 1 %, Min <= Mean, results checked (an injected error caught), the model's crossover and
 * times recomputed from the curriculum's formulas, the measured crossover, the analysis and
 * the plot points consistent with the rows, bad flags exit 2. No timing is asserted. */
#include "run_bin.h"
#include <check.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define MAX_ROWS 32

typedef struct result {
    int status;
    char *out, *err;
} result;

/* Run `mlsys-lab run ch04/benchmark-algorithms ARGS...` (NULL-terminated), stdout and stderr
 * in files; inject sets MLSYS_BENCH_INJECT. */
static result run_lab(const char *inject, ...)
{
    char po[] = "/tmp/test_algos_outXXXXXX", pe[] = "/tmp/test_algos_errXXXXXX";
    int fo = mkstemp(po), fe = mkstemp(pe);
    ck_assert(fo >= 0 && fe >= 0);
    unlink(po);
    unlink(pe);
    const char *argv[48] = {bin(), "run", "ch04/benchmark-algorithms"};
    int argc = 3;
    va_list ap;
    va_start(ap, inject);
    for (const char *s; (s = va_arg(ap, const char *)) && argc < 47;)
        argv[argc++] = s;
    va_end(ap);
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
        unsetenv("MLSYS_ALGO");
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    int st;
    ck_assert(waitpid(pid, &st, 0) == pid);
    result r = {0, slurp_fd(fo), slurp_fd(fe)};
    close(fo);
    close(fe);
    ck_assert_msg(WIFEXITED(st), "the lab died by a signal");
    r.status = WEXITSTATUS(st);
    ck_assert_msg(r.status != 127, "cannot run %s (set MLSYS_LAB_BIN)", bin());
    return r;
}

static void result_free(result *r)
{
    free(r->out);
    free(r->err);
}

/* ---- parsing the table ---- */

typedef struct algo_cols {
    double mean_ms, min_ms, algbw, busbw;     /* bandwidths in bytes per second */
    int fell_back;                            /* "*" after the mean */
} algo_cols;

typedef struct row {
    double size;                              /* as printed, back in bytes */
    double size_tol;                          /* half a unit of the last printed digit */
    long elements;
    algo_cols a[2];
    char faster[32], check[32], rule[64];
} row;

typedef struct table {
    int na;
    char names[2][32];
    int nrows;
    row rows[MAX_ROWS];
} table;

static double unit_of(const char *u)
{
    static const char *const units[] = {"B", "KB", "MB", "GB", "TB"};
    for (int k = 0; k < 5; k++)
        if (!strncmp(u, units[k], strlen(units[k])) &&
            (u[strlen(units[k])] == 0 || u[strlen(units[k])] == '/'))
            return pow(1024, k);
    ck_abort_msg("unknown unit '%s'", u);
    return 0;
}

/* "12.34" "MB/s" -> bytes per second */
static double bw_of(const char *v, const char *u)
{
    ck_assert_msg(strstr(u, "/s") != NULL, "not a bandwidth: %s %s", v, u);
    return atof(v) * unit_of(u);
}

/* The table after the "Size  Elements" header: na from the group line above it. */
static void parse_table(const char *out, table *t)
{
    memset(t, 0, sizeof *t);
    const char *h = strstr(out, "\nSize ");
    ck_assert_msg(h != NULL, "no table header in:\n%s", out);
    /* the group line: "<name> ----" for each algorithm */
    const char *gl = h;                       /* the group line ends where the header starts */
    while (gl > out && gl[-1] != '\n')
        gl--;
    char group[512];
    snprintf(group, sizeof group, "%.*s", (int)(h - gl), gl);
    char *save = NULL;
    for (char *tok = strtok_r(group, " -", &save); tok; tok = strtok_r(NULL, " -", &save)) {
        ck_assert_int_lt(t->na, 2);
        snprintf(t->names[t->na++], sizeof t->names[0], "%s", tok);
    }
    ck_assert_int_ge(t->na, 1);
    const char *p = strchr(h + 1, '\n');      /* end of the header line */
    ck_assert(p);
    p = strchr(p + 1, '\n');                  /* end of the dashes */
    ck_assert(p);
    p++;
    while (*p && *p != '\n') {
        const char *e = strchr(p, '\n');
        char line[1024];
        snprintf(line, sizeof line, "%.*s", (int)(e ? e - p : (long)strlen(p)), p);
        p = e ? e + 1 : p + strlen(p);
        if (!(line[0] >= '0' && line[0] <= '9'))
            break;
        ck_assert_int_lt(t->nrows, MAX_ROWS);
        row *r = &t->rows[t->nrows++];
        char *tok[40];
        int nt = 0;
        save = NULL;
        for (char *s = strtok_r(line, " ", &save); s && nt < 40; s = strtok_r(NULL, " ", &save))
            tok[nt++] = s;
        int want = 3 + 6 * t->na + (t->na == 2 ? 1 : 0) + 2;
        ck_assert_msg(nt == want, "row has %d fields, want %d", nt, want);
        double unit = unit_of(tok[1]);
        r->size = atof(tok[0]) * unit;
        r->size_tol = 0.05 * unit * 1.0001;
        r->elements = atol(tok[2]);
        int k = 3;
        for (int j = 0; j < t->na; j++) {
            algo_cols *c = &r->a[j];
            c->fell_back = strchr(tok[k], '*') != NULL;
            c->mean_ms = atof(tok[k]);
            c->min_ms = atof(tok[k + 1]);
            c->algbw = bw_of(tok[k + 2], tok[k + 3]);
            c->busbw = bw_of(tok[k + 4], tok[k + 5]);
            k += 6;
        }
        if (t->na == 2)
            snprintf(r->faster, sizeof r->faster, "%s", tok[k++]);
        snprintf(r->check, sizeof r->check, "%s", tok[k++]);
        snprintf(r->rule, sizeof r->rule, "%s", tok[k++]);
    }
}

/* The number after "key" in out (the first occurrence after from). */
static double number_after(const char *out, const char *key)
{
    const char *p = strstr(out, key);
    ck_assert_msg(p != NULL, "no '%s' in:\n%s", key, out);
    return atof(p + strlen(key));
}

static int log2_ceil(int n)
{
    int l = 0;
    while ((1 << l) < n)
        l++;
    return l;
}

/* The properties every row must have (the [check] items of the curriculum). */
static void check_rows(const table *t, const double *sizes, int ns, int n)
{
    ck_assert_int_eq(t->nrows, ns);
    double factor = 2.0 * (n - 1) / n;
    for (int i = 0; i < ns; i++) {
        const row *r = &t->rows[i];
        ck_assert_msg(fabs(r->size - sizes[i]) <= r->size_tol, "row %d: size %.1f, want %.0f",
                      i, r->size, sizes[i]);
        ck_assert_int_eq(r->elements, (long)(sizes[i] / 4));
        double S = 4.0 * (double)r->elements;
        for (int j = 0; j < t->na; j++) {
            const algo_cols *c = &r->a[j];
            ck_assert_msg(c->mean_ms > 0 && c->min_ms > 0, "row %d: times must be positive", i);
            ck_assert_msg(c->min_ms <= c->mean_ms, "row %d %s: min %.6g > mean %.6g", i,
                          t->names[j], c->min_ms, c->mean_ms);
            double mean_s = c->mean_ms / 1e3;
            double busbw = 2.0 * S * (n - 1) / n / mean_s, algbw = S / mean_s;
            ck_assert_msg(fabs(c->busbw - busbw) <= 0.01 * busbw + 1e-9,
                          "row %d %s: Bandwidth %.6g B/s, 2S(N-1)/N/mean = %.6g", i, t->names[j],
                          c->busbw, busbw);
            ck_assert_msg(fabs(c->algbw - algbw) <= 0.01 * algbw,
                          "row %d %s: algbw %.6g B/s, S/mean = %.6g", i, t->names[j], c->algbw,
                          algbw);
            if (n > 1)
                ck_assert(fabs(c->busbw / c->algbw - factor) <= 0.02 * factor);
            ck_assert_msg(!c->fell_back || strcmp(t->names[j], "ring") == 0,
                          "row %d: %s fell back", i, t->names[j]);
        }
        ck_assert_str_eq(r->check, "ok");
        if (t->na == 2) {
            int first = r->a[0].mean_ms < r->a[1].mean_ms;
            int tie = r->a[0].mean_ms == r->a[1].mean_ms;
            ck_assert_msg(tie || !strcmp(r->faster, t->names[first ? 0 : 1]),
                          "row %d: Faster says %s, means %.6g and %.6g", i, r->faster,
                          r->a[0].mean_ms, r->a[1].mean_ms);
        }
    }
}

/* Sizes out of order (input order must be kept), one that is not a multiple of 4. */
static const struct {
    const char *ranks;
    int n;
} shapes[] = {{"2", 2}, {"3", 3}, {"4", 4}};

START_TEST(rows_follow_the_formulas)
{
    result r = run_lab(NULL, "--sizes", "65536,1000,4096,1001", "-w", shapes[_i].ranks, "-i",
                       "3", NULL);
    ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
    table t;
    parse_table(r.out, &t);
    ck_assert_int_eq(t.na, 2);
    ck_assert_str_eq(t.names[0], "ring");
    ck_assert_str_eq(t.names[1], "tree");
    const double sizes[] = {65536, 1000, 4096, 1001};
    check_rows(&t, sizes, 4, shapes[_i].n);
    ck_assert_ptr_nonnull(strstr(r.out, "[OK] every all_reduce result"));
    ck_assert_ptr_nonnull(strstr(r.out, "Message sizes: [64.0 KB, 1000.0 B, 4.0 KB, 1001.0 B]"));
    ck_assert_ptr_nonnull(strstr(r.out, "Iterations per test: 3"));
    result_free(&r);
}
END_TEST

/* The original's default sizes and formats, quickly: its size strings and element counts. */
START_TEST(default_size_formats)
{
    result r = run_lab(NULL, "--sizes", "1000,10000,100000,1000000", "-w", "2", "-i", "1",
                       NULL);
    ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
    ck_assert_ptr_nonnull(strstr(r.out, "[1000.0 B, 9.8 KB, 97.7 KB, 976.6 KB]"));
    table t;
    parse_table(r.out, &t);
    const long elems[] = {250, 2500, 25000, 250000};
    ck_assert_int_eq(t.nrows, 4);
    for (int i = 0; i < 4; i++)
        ck_assert_int_eq(t.rows[i].elements, elems[i]);
    result_free(&r);
}
END_TEST

START_TEST(one_algorithm)
{
    result r = run_lab(NULL, "--sizes", "4096,1024", "-w", "3", "-i", "2", "--algo", "tree",
                       NULL);
    ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
    table t;
    parse_table(r.out, &t);
    ck_assert_int_eq(t.na, 1);
    ck_assert_str_eq(t.names[0], "tree");
    const double sizes[] = {4096, 1024};
    check_rows(&t, sizes, 2, 3);
    ck_assert_ptr_nonnull(strstr(r.out, "Measured: only tree ran (--algo tree)"));
    result_free(&r);
}
END_TEST

/* The check must see a wrong element: the hook corrupts one per check call, so each row
 * counts one per algorithm and the run fails. */
START_TEST(injected_error_is_caught)
{
    result r = run_lab("1", "--sizes", "1024,8192", "-w", "3", "-i", "1", NULL);
    ck_assert_msg(r.status == 1, "exit %d with corrupted results", r.status);
    table t;
    parse_table(r.out, &t);
    ck_assert_int_eq(t.nrows, 2);
    for (int i = 0; i < 2; i++)
        ck_assert_str_eq(t.rows[i].check, "2!");
    ck_assert_ptr_nonnull(strstr(r.out, "[FAIL] 4 result elements differed"));
    result_free(&r);
}
END_TEST

/* The model's numbers from the curriculum's formulas, with alpha and beta given. */
static const struct {
    const char *ranks;
    int n;
} model_ranks[] = {{"2", 2}, {"4", 4}, {"5", 5}, {"8", 8}};

static void check_model_table(const char *out, const table *t, int n, double alpha, double beta,
                              double tol)
{
    const char *p = strstr(out, "\nSize       ring model");
    ck_assert_msg(p != NULL, "no model table");
    p = strchr(p + 1, '\n');
    p = strchr(p + 1, '\n') + 1;              /* after the units line */
    int L = log2_ceil(n);
    double B = beta * 1e3;                    /* bytes per us */
    for (int i = 0; i < t->nrows; i++) {
        char sz[16], unit[8], fast[16];
        double ring_ms, tree_ms;
        ck_assert_int_eq(sscanf(p, "%15s %7s %lf %lf %15s", sz, unit, &ring_ms, &tree_ms, fast),
                         5);
        double S = 4.0 * (double)t->rows[i].elements;
        double ring = 2.0 * (n - 1) * (alpha + S / (n * B)) / 1e3;
        double tree = 2.0 * L * (alpha + S / B) / 1e3;
        ck_assert_msg(fabs(ring_ms - ring) <= tol * ring, "ring model %.6g, want %.6g",
                      ring_ms, ring);
        ck_assert_msg(fabs(tree_ms - tree) <= tol * tree, "tree model %.6g, want %.6g",
                      tree_ms, tree);
        if (fabs(ring - tree) > 2 * tol * ring)
            ck_assert_str_eq(fast, ring <= tree ? "ring" : "tree");
        p = strchr(p, '\n') + 1;
    }
}

START_TEST(model_given)
{
    int n = model_ranks[_i].n;
    result r = run_lab(NULL, "--sizes", "1000,100000", "-w", model_ranks[_i].ranks, "-i", "1",
                       "--alpha", "10", "--beta", "2", NULL);
    ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
    ck_assert_ptr_nonnull(strstr(r.out, "alpha = 10 us per message, beta = 2 GB/s per link "
                                        "(given)"));
    int L = log2_ceil(n);
    double ab = 10.0 * 2.0 * 1e3;             /* alpha beta in bytes */
    if (n - 1 - L <= 0) {
        ck_assert_ptr_nonnull(strstr(r.out, "the model says ring is never slower (S* = 0)"));
    } else {
        double want = ab * (n - 1 - L) / (L - (double)(n - 1) / n);
        double got = number_after(r.out, "alpha beta = ");
        ck_assert_msg(fabs(got - want) <= 0.5, "S* = %.1f B, want %.1f", got, want);
        if (n == 4)
            ck_assert_ptr_nonnull(strstr(r.out, "= 0.8 alpha beta = 16000 B"));
    }
    table t;
    parse_table(r.out, &t);
    check_model_table(r.out, &t, n, 10.0, 2.0, 1e-3);
    result_free(&r);
}
END_TEST

/* Fitted alpha and beta: positive, and the crossover and model table follow from the values
 * printed (within their 4 significant digits). */
START_TEST(model_fitted)
{
    result r = run_lab(NULL, "--sizes", "1000,10000,100000,1000000", "-w", "4", "-i", "3",
                       NULL);
    ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
    const char *fit = strstr(r.out, "\nalpha = ");
    if (strstr(r.out, "cannot be fitted")) {
        result_free(&r);
        return;     /* a noisy machine can give a negative slope; the message says so */
    }
    ck_assert_msg(fit && strstr(fit, "(fitted to the 8 measured means"), "%s", r.out);
    double alpha = number_after(fit, "alpha = "), beta = number_after(fit, "beta = ");
    ck_assert(alpha > 0 && beta > 0);
    double want = 0.8 * alpha * beta * 1e3, got = number_after(r.out, "alpha beta = ");
    ck_assert_msg(fabs(got - want) <= 2e-3 * want + 0.5, "S* = %.1f, want %.1f", got, want);
    table t;
    parse_table(r.out, &t);
    /* alpha and beta are printed with 4 digits: the table used the exact ones */
    const char *p = strstr(r.out, "\nSize       ring model");
    ck_assert(p);
    check_model_table(r.out, &t, 4, alpha, beta, 3e-3);
    result_free(&r);
}
END_TEST

/* The "Measured:" line says what the Faster column says, over the sizes sorted. */
START_TEST(measured_crossover_matches_rows)
{
    result r = run_lab(NULL, "--sizes", "100000,1000,10000", "-w", "4", "-i", "2", NULL);
    ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
    table t;
    parse_table(r.out, &t);
    ck_assert_int_eq(t.nrows, 3);
    int order[3] = {1, 2, 0};                 /* 1000, 10000, 100000 */
    int ring[3], changes = 0;
    for (int k = 0; k < 3; k++) {
        const row *w = &t.rows[order[k]];
        ring[k] = w->a[0].mean_ms <= w->a[1].mean_ms;
        if (w->a[0].mean_ms == w->a[1].mean_ms)
            goto out;                          /* a tie at the printed precision: no claim */
        if (k)
            changes += ring[k] != ring[k - 1];
    }
    const char *m = strstr(r.out, "\nMeasured: ");
    ck_assert(m);
    if (changes == 0)
        ck_assert_msg(!strncmp(m + 11, ring[0] ? "ring was faster at every size" :
                               "tree was faster at every size", 29), "%.120s", m);
    else if (changes == 1 && !ring[0])
        ck_assert_msg(!strncmp(m + 11, "tree faster up to ", 18), "%.120s", m);
    else
        ck_assert_msg(strstr(m, "changes") != NULL || !strncmp(m + 11, "ring", 4), "%.120s", m);
    int agree_pos = 0;
    const char *ag = strstr(r.out, "agree on the faster algorithm at ");
    ck_assert(ag);
    agree_pos = atoi(ag + 33);
    ck_assert(agree_pos >= 0 && agree_pos <= 3);
out:
    result_free(&r);
}
END_TEST

/* ANALYSIS: first size against last, as given, with the original's verdict rules. */
START_TEST(analysis_follows_the_rows)
{
    result r = run_lab(NULL, "--sizes", "1024,262144", "-w", "2", "-i", "2", NULL);
    ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
    table t;
    parse_table(r.out, &t);
    for (int j = 0; j < 2; j++) {
        char key[64];
        snprintf(key, sizeof key, "Latency scaling (%s):\n", t.names[j]);
        const char *p = strstr(r.out, key);
        ck_assert_msg(p != NULL, "no %s", key);
        ck_assert_msg(strstr(p, "Message size increased 256x\n") != NULL, "%.200s", p);
        double lat = number_after(p, "Latency increased ");
        double want = t.rows[1].a[j].mean_ms / t.rows[0].a[j].mean_ms;
        ck_assert_msg(fabs(lat - want) <= 0.05 + 2e-3 * want, "latency ratio %.1f, want %.3f",
                      lat, want);
        const char *verdict = lat < 128 ? "sub-linearly" : lat < 256 ? "roughly linearly" :
                              "super-linearly";
        const char *end = strstr(p, "\nBandwidth comparison");
        ck_assert(end);
        char *v = strstr(p, verdict);
        if (fabs(lat - 128) > 0.1 && fabs(lat - 256) > 0.1)
            ck_assert_msg(v && v < end, "%s: want '%s' for %.1fx", t.names[j], verdict, lat);
    }
    result_free(&r);
}
END_TEST

/* The plot view's points: one per size and algorithm, x = the bytes moved, y = busbw in GB/s
 * (10^9), the same as the table's Bandwidth. */
START_TEST(plot_points)
{
    char path[] = "/tmp/test_algos_traceXXXXXX";
    int fd = mkstemp(path);
    ck_assert(fd >= 0);
    close(fd);
    result r = run_lab(NULL, "--sizes", "1000,65536,8192", "-w", "3", "-i", "2", "--trace", path,
                       NULL);
    ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
    table t;
    parse_table(r.out, &t);
    fd = open(path, O_RDONLY);
    ck_assert(fd >= 0);
    char *js = slurp_fd(fd);
    close(fd);
    unlink(path);
    for (int j = 0; j < 2; j++) {
        char key[64];
        snprintf(key, sizeof key, "\"name\":\"plot:%s busbw GB/s\"", t.names[j]);
        int k = 0;
        for (const char *p = js; (p = strstr(p, key)); p++, k++) {
            ck_assert_int_lt(k, 3);
            const char *v = strstr(p, "\"val\":[");
            ck_assert(v);
            double x, y;
            ck_assert_int_eq(sscanf(v + 7, "%lf,%lf", &x, &y), 2);
            ck_assert_msg(x == 4.0 * (double)t.rows[k].elements, "point %d x %.0f", k, x);
            double want = t.rows[k].a[j].busbw / 1e9;
            ck_assert_msg(fabs(y - want) <= 0.01 * want, "point %d y %.6g, table %.6g", k, y,
                          want);
        }
        ck_assert_int_eq(k, 3);
    }
    free(js);
    result_free(&r);
}
END_TEST

START_TEST(one_rank)
{
    result r = run_lab(NULL, "--sizes", "1000,4000", "-w", "1", "-i", "2", NULL);
    ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
    table t;
    parse_table(r.out, &t);
    ck_assert_int_eq(t.nrows, 2);
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 2; j++)
            ck_assert(t.rows[i].a[j].busbw == 0);     /* 2(N-1)/N = 0: nothing moves */
    ck_assert_ptr_nonnull(strstr(r.out, "1 rank: nothing is sent"));
    result_free(&r);
}
END_TEST

static const char *const bad[][6] = {
    {"--sizes", "2"},
    {"--sizes", "abc"},
    {"--sizes", "1000,,x"},
    {"--alpha", "1"},
    {"--beta", "3"},
    {"--alpha", "0", "--beta", "1"},
    {"--iterations", "0"},
    {"-w", "0"},
    {"--algo", "scatter_allgather"},
    {"--algo", "native"},
    {"--backend", "tcp"},
};

START_TEST(bad_flag_exits_2)
{
    const char *const *b = bad[_i];
    result r = run_lab(NULL, b[0], b[1], b[2], b[3], NULL);
    ck_assert_msg(r.status == 2, "%s %s: exit %d, want 2", b[0], b[1], r.status);
    size_t len = strlen(r.err);
    ck_assert_msg(len > 0 && r.err[len - 1] == '\n' && strchr(r.err, '\n') == r.err + len - 1,
                  "%s %s: stderr is not one line: '%s'", b[0], b[1], r.err);
    ck_assert_msg(!strncmp(r.err, "mlsys-lab: ", 11), "%s", r.err);
    ck_assert_msg(r.out[0] == 0, "%s %s: printed: %s", b[0], b[1], r.out);
    result_free(&r);
}
END_TEST

START_TEST(help_lists_flags)
{
    result r = run_lab(NULL, "--help", NULL);
    ck_assert_int_eq(r.status, 0);
    const char *flags[] = {"--sizes", "--world-size", "--backend", "--iterations", "--alpha",
                           "--beta", "--algo"};
    for (int i = 0; i < 7; i++)
        ck_assert_msg(strstr(r.out, flags[i]) != NULL, "help lacks %s", flags[i]);
    ck_assert_ptr_nonnull(strstr(r.out, "1000,10000,100000,1000000,10000000,100000000"));
    result_free(&r);
}
END_TEST

/* --backend mpi where mpirun and the plugin exist: the same table, MPI's own all_reduce with
 * --algo native. */
static int have_mpi(void)
{
    char plugin[4096];
    snprintf(plugin, sizeof plugin, "%s", bin());
    char *slash = strrchr(plugin, '/');
    snprintf(slash ? slash + 1 : plugin, sizeof plugin - (size_t)(slash ? slash + 1 - plugin : 0),
             "libmlsys-mpi.so");
    struct stat sb;
    return system("command -v mpirun >/dev/null 2>&1") == 0 && stat(plugin, &sb) == 0;
}

START_TEST(mpi_backend)
{
    if (!have_mpi())
        return;
    const char *algo[] = {"auto", "native"};
    for (int k = 0; k < 2; k++) {
        result r = run_lab(NULL, "--sizes", "1000,65536", "-w", "2", "-i", "2", "--backend",
                           "mpi", "--algo", algo[k], NULL);
        ck_assert_msg(r.status == 0, "%s: exit %d: %s", algo[k], r.status, r.err);
        table t;
        parse_table(r.out, &t);
        ck_assert_int_eq(t.na, k ? 1 : 2);
        if (k)
            ck_assert_str_eq(t.names[0], "native");
        const double sizes[] = {1000, 65536};
        check_rows(&t, sizes, 2, 2);
        ck_assert_ptr_nonnull(strstr(r.out, "(mpi transport)"));
        result_free(&r);
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("bench_algos");
    TCase *tc = tcase_create("bench_algos");
    tcase_set_timeout(tc, 120);
    tcase_add_loop_test(tc, rows_follow_the_formulas, 0, (int)(sizeof shapes / sizeof shapes[0]));
    tcase_add_test(tc, default_size_formats);
    tcase_add_test(tc, one_algorithm);
    tcase_add_test(tc, injected_error_is_caught);
    tcase_add_loop_test(tc, model_given, 0, (int)(sizeof model_ranks / sizeof model_ranks[0]));
    tcase_add_test(tc, model_fitted);
    tcase_add_test(tc, measured_crossover_matches_rows);
    tcase_add_test(tc, analysis_follows_the_rows);
    tcase_add_test(tc, plot_points);
    tcase_add_test(tc, one_rank);
    tcase_add_loop_test(tc, bad_flag_exits_2, 0, (int)(sizeof bad / sizeof bad[0]));
    tcase_add_test(tc, help_lists_flags);
    tcase_add_test(tc, mpi_backend);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
