/* test_labs.c - the labs of chapters 1-3 run for real: `mlsys-lab run LAB ...` (the binary
 * named by MLSYS_LAB_BIN, default build/mlsys-lab) through popen, its stdout parsed, and
 * every [check] property of the curriculum asserted from the printed numbers, for several
 * rank counts. References are computed here, independently of the lab's own checks, from
 * the formulas (42 + 10(N-2), N(N+1)/2, ...) or from the same seeds through mlsys_rng.
 * Bad input must give exit status 2, one line on stderr, nothing on stdout and no process
 * left behind. Never a wall-clock assertion. */
#include "run_bin.h"
#include <check.h>
#include <ctype.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>
#include "../../lab/lab.h"

/* ---- running the binary ---- */

typedef struct run_result {
    char *out, *err;
    int status;           /* exit code, or 128 + signal */
    int nlines;
    char **lines;         /* stdout split at '\n' */
} run_result;

static char *read_all(FILE *f)
{
    size_t cap = 4096, n = 0;
    char *s = malloc(cap);
    size_t got;
    while ((got = fread(s + n, 1, cap - n - 1, f)) > 0) {
        n += got;
        if (cap - n < 2048) {
            cap *= 2;
            s = realloc(s, cap);
        }
    }
    s[n] = 0;
    return s;
}

/* Children left behind: with this process as child subreaper, a rank that outlives its job
 * is reparented to us. Waits up to 2 s for stragglers to exit, then counts live ones. */
static int leftover_processes(char *names, size_t n)
{
    names[0] = 0;
    for (int tries = 0; tries < 40; tries++) {
        while (waitpid(-1, NULL, WNOHANG) > 0)
            ;
        int live = 0;
        size_t used = 0;
        DIR *d = opendir("/proc");
        struct dirent *e;
        while (d && (e = readdir(d))) {
            if (!isdigit((unsigned char)e->d_name[0]))
                continue;
            char path[300], buf[512];
            snprintf(path, sizeof path, "/proc/%s/stat", e->d_name);
            FILE *f = fopen(path, "r");
            if (!f)
                continue;
            size_t len = fread(buf, 1, sizeof buf - 1, f);
            fclose(f);
            buf[len] = 0;
            char *rp = strrchr(buf, ')');
            char state;
            int ppid;
            if (!rp || sscanf(rp + 2, "%c %d", &state, &ppid) != 2)
                continue;
            if (ppid == getpid() && state != 'Z') {
                live++;
                used += (size_t)snprintf(names + used, used < n ? n - used : 0, "%s ", buf);
            }
        }
        if (d)
            closedir(d);
        if (!live)
            return 0;
        usleep(50000);
    }
    return 1;
}

static run_result run(const char *fmt, ...)
{
    run_result r = {0};
    char args[2048], cmd[4096], errpath[] = "/tmp/mlsys-test-stderr-XXXXXX";
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    int fd = mkstemp(errpath);
    ck_assert_int_ge(fd, 0);
    close(fd);
    prctl(PR_SET_CHILD_SUBREAPER, 1);
    /* the outer timeout is a watchdog only: a deadlock shows as status 124 */
    snprintf(cmd, sizeof cmd, "exec timeout -k 5 120 '%s' %s 2>%s", bin(), args, errpath);
    fflush(NULL);
    FILE *p = popen(cmd, "r");
    ck_assert_ptr_nonnull(p);
    r.out = read_all(p);
    int st = pclose(p);
    r.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    FILE *e = fopen(errpath, "r");
    r.err = e ? read_all(e) : strdup("");
    if (e)
        fclose(e);
    unlink(errpath);
    char names[1024];
    ck_assert_msg(!leftover_processes(names, sizeof names), "`%s`: processes left behind: %s",
                  args, names);
    /* split stdout into lines (a copy, so out stays whole) */
    char *copy = strdup(r.out);
    int cap = 64;
    r.lines = malloc((size_t)cap * sizeof *r.lines);
    for (char *save = NULL, *l = strtok_r(copy, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
        if (r.nlines == cap) {
            cap *= 2;
            r.lines = realloc(r.lines, (size_t)cap * sizeof *r.lines);
        }
        r.lines[r.nlines++] = l;
    }
    if (r.nlines == 0)
        free(copy);
    return r;
}

static void run_free(run_result *r)
{
    if (r->nlines)
        free(r->lines[0]);
    free(r->lines);
    free(r->out);
    free(r->err);
}

#define ASSERT_OK(r, what) \
    ck_assert_msg((r).status == 0, "%s: exit %d\nstdout:\n%s\nstderr:\n%s", (what), (r).status, \
                  (r).out, (r).err)

/* Index of the first line at or after from that starts with prefix, or -1. */
static int find_line(const run_result *r, int from, const char *prefix)
{
    for (int i = from < 0 ? 0 : from; i < r->nlines; i++)
        if (!strncmp(r->lines[i], prefix, strlen(prefix)))
            return i;
    return -1;
}

static int count_prefix(const run_result *r, const char *prefix)
{
    int n = 0;
    for (int i = 0; i < r->nlines; i++)
        n += !strncmp(r->lines[i], prefix, strlen(prefix));
    return n;
}

/* Every number in "[[0.0, 1.0], [10.0, 11.0]]" (or any text after the first '['). */
static int parse_floats(const char *s, double *out, int max)
{
    int n = 0;
    const char *p = strchr(s, '[');
    if (!p)
        return 0;
    while (*p && n < max) {
        if (isdigit((unsigned char)*p) || ((*p == '-' || *p == '+') &&
                                           isdigit((unsigned char)p[1]))) {
            char *end;
            out[n++] = strtod(p, &end);
            p = end;
        } else {
            p++;
        }
    }
    return n;
}

/* ---- ch01/verify-setup and doctor ---- */

static void check_verify_output(const run_result *r)
{
    ck_assert_msg(strstr(r->out, "[OK] self-test, 2 ranks: all_reduce(SUM) of r+1 = 3.0") != NULL,
                  "%s", r->out);
    ck_assert_msg(strstr(r->out, "[OK] self-test, 4 ranks: all_reduce(SUM) of r+1 = 10.0") != NULL,
                  "%s", r->out);
    ck_assert_msg(strstr(r->out, "[OK] shm") != NULL, "%s", r->out);
    ck_assert_msg(strstr(r->out, "CPU core") != NULL, "%s", r->out);
    ck_assert_msg(strstr(r->out, " mpi ") != NULL && strstr(r->out, " nccl ") != NULL, "%s",
                  r->out);
    ck_assert_ptr_null(strstr(r->out, "[FAIL]"));
}

START_TEST(verify_setup)
{
    run_result r = run("run ch01/verify-setup");
    ASSERT_OK(r, "verify-setup");
    check_verify_output(&r);
    run_free(&r);
    r = run("doctor");
    ASSERT_OK(r, "doctor");
    check_verify_output(&r);
    run_free(&r);
}
END_TEST

/* ---- ch01/hello-distributed ---- */

START_TEST(hello)
{
    static const int sizes[] = {1, 2, 4, 8};
    int n = sizes[_i];
    run_result r = run("run ch01/hello-distributed -w %d", n);
    ASSERT_OK(r, "hello");
    int seen_rank[8] = {0}, pids[8], hellos = 0;
    for (int i = 0; i < r.nlines; i++) {
        int rank, size, pid;
        char dev[32];
        if (sscanf(r.lines[i], "Rank %d/%d: hello from PID %d on %31s", &rank, &size, &pid,
                   dev) != 4)
            continue;
        ck_assert_int_eq(size, n);
        ck_assert(rank >= 0 && rank < n);
        ck_assert_msg(!seen_rank[rank], "rank %d said hello twice", rank);
        seen_rank[rank] = 1;
        pids[rank] = pid;
        hellos++;
    }
    ck_assert_int_eq(hellos, n);
    for (int a = 0; a < n; a++)
        for (int b = a + 1; b < n; b++)
            ck_assert_msg(pids[a] != pids[b], "ranks %d and %d share PID %d", a, b, pids[a]);
    /* every rank's gathered row i is [10i, 10i+1] */
    for (int rank = 0; rank < n; rank++) {
        char prefix[64];
        snprintf(prefix, sizeof prefix, "Rank %d gathered:", rank);
        int li = find_line(&r, 0, prefix);
        ck_assert_msg(li >= 0, "no gathered line for rank %d", rank);
        double v[32];
        ck_assert_int_eq(parse_floats(r.lines[li], v, 32), 2 * n);
        for (int i = 0; i < n; i++) {
            ck_assert_double_eq(v[2 * i], 10.0 * i);
            ck_assert_double_eq(v[2 * i + 1], 10.0 * i + 1);
        }
        snprintf(prefix, sizeof prefix, "Rank %d: sum = ", rank);
        li = find_line(&r, 0, prefix);
        ck_assert_int_ge(li, 0);
        ck_assert_double_eq(atof(r.lines[li] + strlen(prefix)), n * (n - 1) / 2.0);
    }
    int li = find_line(&r, 0, "all_reduce(SUM) of the ranks: ");
    ck_assert_int_ge(li, 0);
    ck_assert_double_eq(atof(strchr(r.lines[li], ':') + 1), n * (n - 1) / 2.0);
    li = find_line(&r, 0, "expected: ");
    ck_assert_int_ge(li, 0);
    ck_assert_int_eq(atol(strrchr(r.lines[li], '=') + 1), n * (n - 1) / 2);
    ck_assert_int_eq(count_prefix(&r, "correct: yes"), 1);
    char done[64];
    snprintf(done, sizeof done, "All %d process%s finished.", n, n == 1 ? "" : "es");
    ck_assert_int_ge(find_line(&r, 0, done), 0);
    run_free(&r);
}
END_TEST

/* ---- ch02/send-recv-basic ---- */

START_TEST(send_recv)
{
    static const int sizes[] = {2, 3, 4, 8};
    int n = sizes[_i];
    long want = 42 + 10L * (n - 2);
    run_result r = run("run ch02/send-recv-basic -w %d --timeout 10", n);
    ASSERT_OK(r, "send-recv-basic");
    char prefix[96];
    snprintf(prefix, sizeof prefix, "Rank %d: final value ", n - 1);
    int li = find_line(&r, 0, prefix);
    ck_assert_msg(li >= 0, "no final value line:\n%s", r.out);
    ck_assert_double_eq(atof(r.lines[li] + strlen(prefix)), (double)want);
    li = find_line(&r, 0, "expected = 42 + 10*(N-2)");
    ck_assert_int_ge(li, 0);
    ck_assert_int_eq(atol(strrchr(r.lines[li], '=') + 1), want);
    /* the relay: rank r receives 42 + 10(r-1), prints "received" before "sent" */
    for (int rank = 1; rank < n - 1; rank++) {
        double got, sent;
        int from, to;
        snprintf(prefix, sizeof prefix, "Rank %d: received ", rank);
        int lr = find_line(&r, 0, prefix);
        snprintf(prefix, sizeof prefix, "Rank %d: sent ", rank);
        int ls = find_line(&r, 0, prefix);
        ck_assert_msg(lr >= 0 && ls >= 0 && lr < ls, "rank %d: received must come before sent",
                      rank);
        ck_assert_int_eq(sscanf(r.lines[lr], "Rank %*d: received %lf from rank %d", &got, &from), 2);
        ck_assert_int_eq(sscanf(r.lines[ls], "Rank %*d: sent %lf to rank %d", &sent, &to), 2);
        ck_assert_double_eq(got, 42.0 + 10.0 * (rank - 1));
        ck_assert_double_eq(sent, got + 10.0);
        ck_assert_int_eq(from, rank - 1);
        ck_assert_int_eq(to, rank + 1);
    }
    ck_assert_int_ge(find_line(&r, 0, "Rank 0: sent 42.0 to rank 1"), 0);
    run_free(&r);
}
END_TEST

START_TEST(show_deadlock)
{
    run_result r = run("run ch02/send-recv-basic --show-deadlock");
    ASSERT_OK(r, "--show-deadlock");
    ck_assert_msg(strstr(r.out, "eadlock") != NULL, "%s", r.out);
    ck_assert_ptr_nonnull(strstr(r.out, "irecv"));
    ck_assert_ptr_null(strstr(r.out, "Chain complete"));    /* no ranks ran */
    ck_assert_ptr_null(strstr(r.out, "final value"));
    run_free(&r);
}
END_TEST

/* ---- ch02/pipeline-simulation ---- */

/* The test's own model: stage s = Linear(H, H) with weights and bias uniform in ±1/√H from
 * seed 1000+s (weights first, row-major [out][in], then bias), ReLU; input normals from
 * seed m. Returns the sum of the last stage's outputs. */
static double reference_checksum(int stages, int rows, int h, int m)
{
    size_t e = (size_t)rows * h;
    double *x = malloc(e * sizeof *x), *y = malloc(e * sizeof *y);
    float *w = malloc((size_t)h * h * sizeof *w), *b = malloc((size_t)h * sizeof *b);
    mlsys_rng g;
    mlsys_rng_seed(&g, (uint64_t)m);
    for (size_t i = 0; i < e; i++)
        x[i] = (float)mlsys_rng_normal(&g);
    for (int s = 0; s < stages; s++) {
        float bound = 1.0f / sqrtf((float)h);
        mlsys_rng_seed(&g, 1000u + (uint64_t)s);
        for (size_t i = 0; i < (size_t)h * h; i++)
            w[i] = (float)((2.0 * mlsys_rng_uniform(&g) - 1.0) * bound);
        for (int i = 0; i < h; i++)
            b[i] = (float)((2.0 * mlsys_rng_uniform(&g) - 1.0) * bound);
        for (int i = 0; i < rows; i++)
            for (int o = 0; o < h; o++) {
                double acc = b[o];
                for (int k = 0; k < h; k++)
                    acc += x[(size_t)i * h + k] * w[(size_t)o * h + k];
                y[(size_t)i * h + o] = acc > 0 ? acc : 0;
            }
        memcpy(x, y, e * sizeof *x);
    }
    double sum = 0;
    for (size_t i = 0; i < e; i++)
        sum += x[i];
    free(x);
    free(y);
    free(w);
    free(b);
    return sum;
}

START_TEST(pipeline)
{
    static const struct { int p, b, h, m; } cases[] = {
        {1, 4, 8, 3}, {2, 4, 8, 3}, {4, 4, 8, 5}, {4, 32, 64, 4}, {3, 2, 16, 2},
    };
    int p = cases[_i].p, b = cases[_i].b, h = cases[_i].h, m = cases[_i].m;
    run_result r = _i == 3 ? run("run ch02/pipeline-simulation")
                           : run("run ch02/pipeline-simulation -w %d --batch-size %d --hidden-size %d -m %d",
                                 p, b, h, m);
    ASSERT_OK(r, "pipeline-simulation");
    char prefix[96], shape[32];
    snprintf(shape, sizeof shape, "shape [%d, %d]", b, h);
    ck_assert_int_eq(count_prefix(&r, "Stage 0: created input for micro-batch"), m);
    ck_assert_msg(strstr(r.out, shape) != NULL, "no %s in\n%s", shape, r.out);
    /* the last stage completes micro-batches in order 0..M-1, each with mean >= 0 */
    snprintf(prefix, sizeof prefix, "Stage %d: completed micro-batch ", p - 1);
    int from = 0;
    for (int k = 0; k < m; k++) {
        int li = find_line(&r, from, prefix);
        ck_assert_msg(li >= 0, "micro-batch %d not completed in order:\n%s", k, r.out);
        int mb;
        double mean, sum, diff;
        ck_assert_int_eq(sscanf(r.lines[li] + strlen(prefix), "%d, output mean %lf, checksum "
                                "%lf, max |pipelined - serial| = %lf", &mb, &mean, &sum, &diff), 4);
        ck_assert_int_eq(mb, k);
        ck_assert(mean >= 0.0);
        ck_assert(diff <= 1e-6);
        ck_assert(fabs(mean - sum / (b * h)) < 1e-4);
        double want = reference_checksum(p, b, h, k);
        ck_assert_msg(fabs(sum - want) <= 1e-4 * (1.0 + fabs(want)),
                      "micro-batch %d: checksum %.6f, the test's own serial model says %.6f", k,
                      sum, want);
        from = li + 1;
    }
    ck_assert_int_eq(count_prefix(&r, prefix), m);
    /* a middle stage receives micro-batch k before it sends it */
    for (int s = 1; s < p - 1; s++)
        for (int k = 0; k < m; k++) {
            char rcv[96], snd[96];
            snprintf(rcv, sizeof rcv, "Stage %d: received micro-batch %d from stage %d", s, k, s - 1);
            snprintf(snd, sizeof snd, "Stage %d: sent micro-batch %d to stage %d", s, k, s + 1);
            int a = find_line(&r, 0, rcv), c = find_line(&r, 0, snd);
            ck_assert_msg(a >= 0 && c > a, "stage %d micro-batch %d: receive then send", s, k);
        }
    /* (P-1)·M messages of B·H·4 bytes */
    int li = find_line(&r, 0, "Messages sent: ");
    ck_assert_int_ge(li, 0);
    long msgs, bytes, expected;
    ck_assert_int_eq(sscanf(r.lines[li], "Messages sent: %ld (expected (P-1)*M = %ld), %ld bytes",
                            &msgs, &expected, &bytes), 3);
    ck_assert_int_eq(msgs, (long)(p - 1) * m);
    ck_assert_int_eq(bytes, (long)b * h * 4);
    run_free(&r);
}
END_TEST

START_TEST(pipeline_visualize)
{
    run_result r = run("run ch02/pipeline-simulation --visualize");
    ASSERT_OK(r, "--visualize");
    ck_assert_ptr_nonnull(strstr(r.out, "MB3"));
    ck_assert_ptr_nonnull(strstr(r.out, "layers 8-11"));
    ck_assert_int_eq(count_prefix(&r, "Stage 0: created"), 0);   /* no ranks ran */
    run_free(&r);
}
END_TEST

/* ---- ch02/async-communication ---- */

static unsigned long long hex_after(const char *s, const char *key)
{
    const char *p = strstr(s, key);
    ck_assert_msg(p != NULL, "no '%s' in %s", key, s);
    return strtoull(p + strlen(key), NULL, 16);
}

START_TEST(async_comm)
{
    run_result r = run("run ch02/async-communication --work 4");
    ASSERT_OK(r, "async-communication");
    int l0 = find_line(&r, 0, "Rank 0: sent 16 MiB, checksum ");
    int l1 = find_line(&r, 0, "Rank 1: received 16 MiB, checksum ");
    ck_assert_msg(l0 >= 0 && l1 >= 0, "%s", r.out);
    ck_assert_uint_eq(hex_after(r.lines[l0], "checksum 0x"), hex_after(r.lines[l1], "checksum 0x"));
    ck_assert_ptr_nonnull(strstr(r.lines[l1], " 0 of 4194304 elements wrong"));
    ck_assert_ptr_nonnull(strstr(r.lines[l1], "received data equals what was sent: yes"));
    /* the three times are printed by both ranks, finite and positive (never compared) */
    for (int rank = 0; rank < 2; rank++) {
        char prefix[32];
        snprintf(prefix, sizeof prefix, "Rank %d (", rank);
        int li = find_line(&r, 0, prefix);
        ck_assert_int_ge(li, 0);
        double tc, tk, to;
        const char *p = strstr(r.lines[li], "t_comm = ");
        ck_assert_ptr_nonnull(p);
        ck_assert_int_eq(sscanf(p, "t_comm = %lf ms, t_compute = %lf ms, t_overlapped = %lf ms",
                                &tc, &tk, &to), 3);
        ck_assert(isfinite(tc) && tc > 0 && isfinite(tk) && tk > 0 && isfinite(to) && to > 0);
    }
    ck_assert_ptr_nonnull(strstr(r.out, "process_vm_readv"));
    run_free(&r);

    /* another size, not a power of two */
    r = run("run ch02/async-communication --work 1 --size 12340");
    ASSERT_OK(r, "async-communication --size 12340");
    l0 = find_line(&r, 0, "Rank 0: sent ");
    l1 = find_line(&r, 0, "Rank 1: received ");
    ck_assert_uint_eq(hex_after(r.lines[l0], "checksum 0x"), hex_after(r.lines[l1], "checksum 0x"));
    ck_assert_ptr_nonnull(strstr(r.lines[l1], " 0 of 3085 elements wrong"));
    run_free(&r);
}
END_TEST

START_TEST(async_reuse_buffer)
{
    /* zero-copy transport: overwriting a large send buffer before wait corrupts the message */
    run_result r = run("run ch02/async-communication --reuse-buffer");
    ASSERT_OK(r, "--reuse-buffer");
    int l0 = find_line(&r, 0, "Rank 0: isend");
    int l1 = find_line(&r, 0, "Rank 1: received checksum");
    ck_assert_msg(l0 >= 0 && l1 >= 0, "%s", r.out);
    ck_assert_uint_ne(hex_after(r.lines[l0], "checksum 0x"), hex_after(r.lines[l1], "checksum 0x"));
    ck_assert_ptr_nonnull(strstr(r.lines[l1], "CORRUPTED"));
    ck_assert_ptr_nonnull(strstr(r.out, "zero-copy"));
    run_free(&r);
}
END_TEST

/* ---- ch03/collective-cheatsheet ---- */

#define MAXN 8

typedef struct op_view {
    int found;
    int nb[MAXN], na[MAXN];            /* values per rank */
    double before[MAXN][2 * MAXN], after[MAXN][2 * MAXN];
    char explain[512];
} op_view;

/* Find the section " NAME" and read the BEFORE/AFTER rank lines and the explanation. */
static void read_op(const run_result *r, const char *upper, int n, op_view *v)
{
    memset(v, 0, sizeof *v);
    char title[64];
    snprintf(title, sizeof title, " %s", upper);
    int li = -1;
    for (int i = 0; i < r->nlines; i++)
        if (!strcmp(r->lines[i], title)) {
            li = i;
            break;
        }
    if (li < 0)
        return;
    v->found = 1;
    int b = find_line(r, li, "BEFORE:"), a = find_line(r, li, "AFTER:");
    ck_assert_msg(b > li && a > b, "%s: no BEFORE/AFTER", upper);
    for (int k = 0; k < n; k++) {
        char prefix[32];
        snprintf(prefix, sizeof prefix, "Rank %d: ", k);
        ck_assert_msg(!strncmp(r->lines[b + 1 + k], prefix, strlen(prefix)),
                      "%s BEFORE line %d: %s", upper, k, r->lines[b + 1 + k]);
        ck_assert_msg(!strncmp(r->lines[a + 1 + k], prefix, strlen(prefix)),
                      "%s AFTER line %d: %s", upper, k, r->lines[a + 1 + k]);
        v->nb[k] = parse_floats(r->lines[b + 1 + k], v->before[k], 2 * MAXN);
        v->na[k] = parse_floats(r->lines[a + 1 + k], v->after[k], 2 * MAXN);
    }
    ck_assert_int_eq(a, b + 1 + n);
    snprintf(v->explain, sizeof v->explain, "%s", a + 1 + n < r->nlines ? r->lines[a + 1 + n] : "");
}

static void check_cheatsheet(const run_result *r, int n, const char *only)
{
    double tri = n * (n + 1) / 2.0;
    char num[64];
    op_view v;
#define WANT(name) (!only || !strcmp(only, name))

    read_op(r, "BROADCAST", n, &v);
    ck_assert_int_eq(v.found, WANT("broadcast"));
    for (int k = 0; v.found && k < n; k++) {
        ck_assert_int_eq(v.nb[k], 3);
        ck_assert_int_eq(v.na[k], 3);
        for (int i = 0; i < 3; i++) {
            ck_assert_double_eq(v.before[k][i], k == 0 ? 42.0 + i : 0.0);
            ck_assert_double_eq(v.after[k][i], 42.0 + i);
        }
    }
    read_op(r, "SCATTER", n, &v);
    ck_assert_int_eq(v.found, WANT("scatter"));
    for (int k = 0; v.found && k < n; k++) {
        if (k == 0) {
            ck_assert_int_eq(v.nb[0], 2 * n);
            for (int i = 0; i < n; i++) {
                ck_assert_double_eq(v.before[0][2 * i], 10.0 * i);
                ck_assert_double_eq(v.before[0][2 * i + 1], 10.0 * i + 1);
            }
        }
        ck_assert_int_eq(v.na[k], 2);
        ck_assert_double_eq(v.after[k][0], 10.0 * k);
        ck_assert_double_eq(v.after[k][1], 10.0 * k + 1);
    }
    read_op(r, "GATHER", n, &v);
    ck_assert_int_eq(v.found, WANT("gather"));
    for (int k = 0; v.found && k < n; k++) {
        ck_assert_int_eq(v.nb[k], 2);
        ck_assert_double_eq(v.before[k][0], 100.0 * k);
        ck_assert_double_eq(v.before[k][1], 100.0 * k + 1);
        if (k == 0) {
            ck_assert_int_eq(v.na[0], 2 * n);
            for (int i = 0; i < n; i++) {
                ck_assert_double_eq(v.after[0][2 * i], 100.0 * i);
                ck_assert_double_eq(v.after[0][2 * i + 1], 100.0 * i + 1);
            }
        } else {
            ck_assert_int_eq(v.na[k], 2);
            ck_assert_double_eq(v.after[k][0], 100.0 * k);
            ck_assert_double_eq(v.after[k][1], 100.0 * k + 1);
        }
    }
    read_op(r, "ALL_GATHER", n, &v);
    ck_assert_int_eq(v.found, WANT("all_gather"));
    for (int k = 0; v.found && k < n; k++) {
        ck_assert_int_eq(v.nb[k], 1);
        ck_assert_double_eq(v.before[k][0], k + 1.0);
        ck_assert_int_eq(v.na[k], n);
        for (int i = 0; i < n; i++)
            ck_assert_double_eq(v.after[k][i], i + 1.0);
    }
    read_op(r, "REDUCE", n, &v);
    ck_assert_int_eq(v.found, WANT("reduce"));
    for (int k = 0; v.found && k < n; k++) {
        ck_assert_int_eq(v.na[k], 1);
        ck_assert_double_eq(v.before[k][0], k + 1.0);
        /* root gets N(N+1)/2; the others' buffers are unchanged */
        ck_assert_double_eq(v.after[k][0], k == 0 ? tri : k + 1.0);
    }
    if (v.found) {
        snprintf(num, sizeof num, "= %.0f", tri);
        ck_assert_msg(strstr(v.explain, num) != NULL, "reduce explanation: %s", v.explain);
    }
    read_op(r, "ALL_REDUCE", n, &v);
    ck_assert_int_eq(v.found, WANT("all_reduce"));
    for (int k = 0; v.found && k < n; k++) {
        ck_assert_int_eq(v.na[k], 2);
        ck_assert_double_eq(v.before[k][0], k + 1.0);
        ck_assert_double_eq(v.before[k][1], 2.0 * (k + 1));
        ck_assert_double_eq(v.after[k][0], tri);
        ck_assert_double_eq(v.after[k][1], 2 * tri);
    }
    if (v.found) {
        snprintf(num, sizeof num, "[%.1f, %.1f]", tri, 2 * tri);
        ck_assert_msg(strstr(v.explain, num) != NULL, "all_reduce explanation: %s", v.explain);
    }
    read_op(r, "REDUCE_SCATTER", n, &v);
    ck_assert_int_eq(v.found, WANT("reduce_scatter"));
    for (int k = 0; v.found && k < n; k++) {
        ck_assert_int_eq(v.nb[k], n);
        for (int i = 0; i < n; i++)
            ck_assert_double_eq(v.before[k][i], (i + 1.0) * (k + 1.0));
        ck_assert_int_eq(v.na[k], 1);
        ck_assert_double_eq(v.after[k][0], (k + 1) * tri);
    }
    if (v.found) {
        snprintf(num, sizeof num, "(i+1)·%.0f", tri);
        ck_assert_msg(strstr(v.explain, num) != NULL, "reduce_scatter explanation: %s", v.explain);
    }
#undef WANT
}

START_TEST(cheatsheet_all)
{
    int n = _i + 1;      /* 1..8 */
    run_result r = run("run ch03/collective-cheatsheet -w %d", n);
    ASSERT_OK(r, "collective-cheatsheet");
    check_cheatsheet(&r, n, NULL);
    run_free(&r);
}
END_TEST

START_TEST(cheatsheet_one)
{
    static const char *const ops[] = {"reduce_scatter", "broadcast", "gather", "all_reduce"};
    static const int sizes[] = {6, 3, 5, 7};
    run_result r = run("run ch03/collective-cheatsheet --operation %s -w %d", ops[_i], sizes[_i]);
    ASSERT_OK(r, "collective-cheatsheet --operation");
    check_cheatsheet(&r, sizes[_i], ops[_i]);
    run_free(&r);
}
END_TEST

/* ---- ch03/distributed-mean ---- */

/* The mean of `count` draws normal + shift from seed, as the lab's data is defined. */
static double ref_mean(uint64_t seed, long count, double shift)
{
    mlsys_rng g;
    double s = 0;
    mlsys_rng_seed(&g, seed);
    for (long i = 0; i < count; i++)
        s += (float)mlsys_rng_normal(&g) + shift;
    return s / (double)count;
}

/* Printed with 4 decimals: two roundings of 5e-5 each, plus float32 arithmetic. */
#define TOL4 1.1e-4

START_TEST(distributed_mean)
{
    static const struct { int n; long d; } cases[] = {{4, 100}, {1, 100}, {6, 100}, {8, 7}};
    int n = cases[_i].n;
    long d = cases[_i].d;
    run_result r = run("run ch03/distributed-mean -w %d -d %ld", n, d);
    ASSERT_OK(r, "distributed-mean");
    double local[MAXN], dist[MAXN], m2[MAXN], g2[MAXN], before[MAXN], after[MAXN];
    long size[MAXN];
    for (int k = 0; k < n; k++) {
        char prefix[48];
        snprintf(prefix, sizeof prefix, "Rank %d: local mean ", k);
        int li = find_line(&r, 0, prefix);
        ck_assert_int_ge(li, 0);
        ck_assert_int_eq(sscanf(r.lines[li], "Rank %*d: local mean %lf, distributed mean %lf",
                                &local[k], &dist[k]), 2);
        snprintf(prefix, sizeof prefix, "Rank %d: size ", k);
        li = find_line(&r, 0, prefix);
        ck_assert_int_ge(li, 0);
        ck_assert_int_eq(sscanf(r.lines[li], "Rank %*d: size %ld, local mean %lf, global weighted "
                                "mean %lf", &size[k], &m2[k], &g2[k]), 3);
        snprintf(prefix, sizeof prefix, "Rank %d: before grad[0] = ", k);
        li = find_line(&r, 0, prefix);
        ck_assert_int_ge(li, 0);
        before[k] = atof(r.lines[li] + strlen(prefix));
        snprintf(prefix, sizeof prefix, "Rank %d: after grad[0] = ", k);
        li = find_line(&r, 0, prefix);
        ck_assert_int_ge(li, 0);
        after[k] = atof(r.lines[li] + strlen(prefix));
    }
    /* demo 1: the same distributed mean everywhere, equal to the average of local means */
    double avg = 0;
    for (int k = 0; k < n; k++) {
        ck_assert_double_eq(dist[k], dist[0]);
        ck_assert_msg(fabs(local[k] - ref_mean(42u + k, d, k)) <= 5.1e-5, "rank %d local mean", k);
        avg += local[k] / n;
    }
    ck_assert_msg(fabs(avg - dist[0]) <= TOL4, "average of local means %.6f vs %.4f", avg, dist[0]);
    /* demo 2: rank 3 holds ⌊D/2⌋, the rest D; one weighted mean Σ n·m / Σ n */
    double num = 0, den = 0;
    for (int k = 0; k < n; k++) {
        ck_assert_int_eq(size[k], k == 3 ? d / 2 : d);
        ck_assert_double_eq(g2[k], g2[0]);
        ck_assert_msg(fabs(m2[k] - ref_mean(42u + k, size[k], k)) <= 5.1e-5, "rank %d mean", k);
        num += size[k] * m2[k];
        den += size[k];
    }
    ck_assert_msg(fabs(num / den - g2[0]) <= TOL4, "weighted mean %.6f vs %.4f", num / den, g2[0]);
    int li = find_line(&r, 0, "Σcount = ");
    ck_assert_int_ge(li, 0);
    ck_assert_double_eq(atof(r.lines[li] + strlen("Σcount = ")), den);
    /* demo 3: identical after values, equal to the average of the before values */
    double bavg = 0;
    for (int k = 0; k < n; k++) {
        ck_assert_double_eq(after[k], after[0]);
        bavg += before[k] / n;
    }
    ck_assert_msg(fabs(bavg - after[0]) <= TOL4, "gradient average %.6f vs %.4f", bavg, after[0]);
    run_free(&r);
}
END_TEST

/* ---- ch03/distributed-softmax ---- */

START_TEST(distributed_softmax)
{
    static const struct { int n; long size; double scale, offset; } cases[] = {
        {4, 16, 1, 0}, {3, 7, 1, 0}, {4, 16, 1000, 0}, {4, 1000, 1, 1000}, {1, 5, 2, 0},
        {4, 3, 1, 0}, {8, 100003, 3, 0},
    };
    int n = cases[_i].n;
    long size = cases[_i].size;
    double scale = cases[_i].scale, offset = cases[_i].offset;
    run_result r = run("run ch03/distributed-softmax -w %d --size %ld --scale %g --offset %g", n,
                       size, scale, offset);
    ASSERT_OK(r, "distributed-softmax");
    /* the shards tile [0, size) in rank order */
    long next = 0;
    for (int k = 0; k < n; k++) {
        char prefix[48];
        snprintf(prefix, sizeof prefix, "Rank %d: elements [", k);
        int li = find_line(&r, 0, prefix);
        ck_assert_int_ge(li, 0);
        long lo, hi;
        ck_assert_int_eq(sscanf(r.lines[li] + strlen(prefix), "%ld, %ld)", &lo, &hi), 2);
        ck_assert_int_eq(lo, next);
        ck_assert(hi >= lo);
        next = hi;
    }
    ck_assert_int_eq(next, size);
    int li = find_line(&r, 0, "Max |distributed - serial| = ");
    ck_assert_int_ge(li, 0);
    double err = atof(r.lines[li] + strlen("Max |distributed - serial| = "));
    ck_assert_msg(err < 1e-6, "error %g", err);
    li = find_line(&r, 0, "Sum of the distributed softmax = ");
    ck_assert_int_ge(li, 0);
    double sum = atof(r.lines[li] + strlen("Sum of the distributed softmax = "));
    ck_assert_msg(fabs(sum - 1.0) < 1e-6, "sum %.9f", sum);
    /* the first values against the test's own serial softmax of the same input */
    li = find_line(&r, 0, "softmax[0..");
    ck_assert_int_ge(li, 0);
    double shown[8];
    int k = parse_floats(strchr(r.lines[li], '='), shown, 8);
    ck_assert_int_eq(k, size < 8 ? size : 8);
    double *x = malloc((size_t)size * sizeof *x), mx = -INFINITY, z = 0;
    mlsys_rng g;
    mlsys_rng_seed(&g, 42);
    for (long i = 0; i < size; i++) {
        x[i] = (float)(offset + scale * mlsys_rng_normal(&g));
        mx = x[i] > mx ? x[i] : mx;
    }
    for (long i = 0; i < size; i++)
        z += exp(x[i] - mx);
    for (int i = 0; i < k; i++)
        ck_assert_msg(fabs(shown[i] - exp(x[i] - mx) / z) < 1e-6, "softmax[%d] = %.6f, want %.8f",
                      i, shown[i], exp(x[i] - mx) / z);
    free(x);
    if (mx > 88.8)      /* the lab must say that the naive exp would overflow */
        ck_assert_ptr_nonnull(strstr(r.out, "overflows"));
    run_free(&r);
}
END_TEST

/* ---- bad input: exit 2, one line on stderr, nothing on stdout ---- */

START_TEST(bad_input)
{
    static const char *const cases[] = {
        "run ch99/no-such-lab",
        "run ch01/hello-distributed --bogus",
        "run ch01/hello-distributed --world-size 0",
        "run ch01/hello-distributed --world-size -1",
        "run ch01/hello-distributed --world-size 100000",
        "run ch01/hello-distributed --world-size abc",
        "run ch01/hello-distributed -w",
        "run ch01/hello-distributed -w 4 -w 8",
        "run ch01/hello-distributed --backend tcp",
        "run ch02/send-recv-basic -w 1",
        "run ch02/pipeline-simulation --batch-size nccl",
        "run ch02/async-communication --size 6",
        "run ch02/async-communication --size 1Q",
        "run ch03/collective-cheatsheet -o alltoall",
        "run ch03/distributed-mean -d 1",
        "run ch03/distributed-softmax --scale nan",
        "run ch03/distributed-softmax --timeout 0",
        "run ch01/hello-distributed stray",
    };
    const char *c = cases[_i];
    run_result r = run("%s", c);
    ck_assert_msg(r.status == 2, "`%s`: exit %d, stderr: %s", c, r.status, r.err);
    ck_assert_msg(r.out[0] == 0, "`%s`: stdout should be empty, got: %s", c, r.out);
    size_t len = strlen(r.err);
    ck_assert_msg(len > 1 && r.err[len - 1] == '\n' && strchr(r.err, '\n') == r.err + len - 1,
                  "`%s`: want one line on stderr, got: '%s'", c, r.err);
    ck_assert_msg(!strncmp(r.err, "mlsys-lab: ", 11), "`%s`: %s", c, r.err);
    run_free(&r);
}
END_TEST

START_TEST(send_recv_one_rank_message)
{
    run_result r = run("run ch02/send-recv-basic -w 1");
    ck_assert_int_eq(r.status, 2);
    ck_assert_msg(strstr(r.err, "--world-size") && strstr(r.err, "from 2"), "%s", r.err);
    run_free(&r);
}
END_TEST

/* ---- help: every flag of the lab, common ones included ---- */

START_TEST(help)
{
    static const char *const ids[] = {
        "ch01/verify-setup", "ch01/hello-distributed", "ch02/send-recv-basic",
        "ch02/pipeline-simulation", "ch02/async-communication", "ch03/collective-cheatsheet",
        "ch03/distributed-mean", "ch03/distributed-softmax",
    };
    const lab *l = lab_find(ids[_i]);
    ck_assert_ptr_nonnull(l);
    run_result r = run("run %s --help", ids[_i]);
    ASSERT_OK(r, "--help");
    char usage[128];
    snprintf(usage, sizeof usage, "usage: mlsys-lab run %s", ids[_i]);
    ck_assert_msg(strstr(r.out, usage) != NULL, "%s", r.out);
    for (int i = 0; l->flags[i].name; i++) {
        char name[64];
        snprintf(name, sizeof name, "--%s", l->flags[i].name);
        ck_assert_msg(strstr(r.out, name) != NULL, "%s lacks %s", ids[_i], name);
    }
    for (int i = 0; lab_common_flags[i].name; i++) {
        char name[64];
        snprintf(name, sizeof name, "--%s", lab_common_flags[i].name);
        ck_assert_msg(strstr(r.out, name) != NULL, "%s lacks %s", ids[_i], name);
    }
    run_free(&r);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("labs");
    TCase *tc = tcase_create("run");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, verify_setup);
    tcase_add_loop_test(tc, hello, 0, 4);
    tcase_add_loop_test(tc, send_recv, 0, 4);
    tcase_add_test(tc, show_deadlock);
    tcase_add_loop_test(tc, pipeline, 0, 5);
    tcase_add_test(tc, pipeline_visualize);
    tcase_add_test(tc, async_comm);
    tcase_add_test(tc, async_reuse_buffer);
    tcase_add_loop_test(tc, cheatsheet_all, 0, 8);
    tcase_add_loop_test(tc, cheatsheet_one, 0, 4);
    tcase_add_loop_test(tc, distributed_mean, 0, 4);
    tcase_add_loop_test(tc, distributed_softmax, 0, 7);
    tcase_add_loop_test(tc, bad_input, 0, 18);
    tcase_add_test(tc, send_recv_one_rank_message);
    tcase_add_loop_test(tc, help, 0, 8);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
