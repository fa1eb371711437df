/* test_truth.c - chapters 1-4 teach only what is true: the overlap lab's numbers obey
 * t_overlapped >= max(t_comm, t_compute); the chapter texts keep no claim that the code or
 * NCCL contradicts; every exercise id is named in its chapter, and what the text says a
 * check uses (world sizes, watchdog, files, answer keys, the benchmark command) is what the
 * check uses; no lab that exists is called "being built"; and the labs' output agrees in
 * number ("1 rank", never "1 ranks"). Runs the built binary (MLSYS_LAB_BIN). */
#include "run_bin.h"
#include <check.h>
#include <math.h>
#include <regex.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include "../../lab/exercise/exercise.h"

/* ---- helpers ---- */

/* `mlsys-lab ARGS` with stdout and stderr together; *status its exit code. */
static char *run_out(int *status, const char *fmt, ...)
{
    char args[1024], cmd[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    snprintf(cmd, sizeof cmd, "exec timeout -k 5 120 '%s' %s 2>&1", bin(), args);
    fflush(NULL);
    FILE *p = popen(cmd, "r");
    ck_assert_ptr_nonnull(p);
    size_t cap = 1 << 16, n = 0, got;
    char *s = malloc(cap);
    while ((got = fread(s + n, 1, cap - n - 1, p)) > 0)
        if ((n += got) + 4096 > cap)
            s = realloc(s, cap *= 2);
    s[n] = 0;
    int st = pclose(p);
    *status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    return s;
}

static char *run_ok(const char *args)
{
    int st;
    char *out = run_out(&st, "%s", args);
    size_t len = strlen(out);
    ck_assert_msg(st == 0, "`mlsys-lab %s` exited %d:\n%s", args, st,
                  out + (len > 1500 ? len - 1500 : 0));
    return out;
}

/* Whitespace runs (line breaks of the Markdown) become one space. */
static void squeeze(char *s)
{
    char *d = s;
    int sp = 0;
    for (; *s; s++) {
        if (*s == ' ' || *s == '\n' || *s == '\t') {
            sp = 1;
            continue;
        }
        if (sp && d != s)
            *d++ = ' ';
        sp = 0;
        *d++ = *s;
    }
    *d = 0;
}

static const char *src_dir(void)
{
    static ex_context cx;
    static int done;
    if (!done) {
        char err[512];
        ck_assert_msg(ex_context_init(&cx, err, sizeof err) == 0, "%s", err);
        done = 1;
    }
    return cx.src;
}

/* A chapter's text, raw (paragraphs kept) or squeezed. */
static char *chapter_md(int ch, int squeezed)
{
    char path[PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/assets/chapters/ch%02d.md", src_dir(), ch);
    char *s = ex_read_file(path, NULL);
    ck_assert_msg(s != NULL, "cannot read %s", path);
    if (squeezed)
        squeeze(s);
    return s;
}

#define HAS(text, what) ck_assert_msg(strstr((text), (what)) != NULL, "missing: %s", (what))
#define LACKS(text, what) ck_assert_msg(strstr((text), (what)) == NULL, "still there: %s", (what))

/* ---- 1. the overlap lab ---- */

typedef struct times3 { double comm, comp, ov; } times3;

static int read_times(const char *out, int rank, times3 *t)
{
    char key[32];
    snprintf(key, sizeof key, "Rank %d (", rank);
    const char *p = strstr(out, key);
    p = p ? strstr(p, "t_comm = ") : NULL;
    return p && sscanf(p, "t_comm = %lf ms, t_compute = %lf ms, t_overlapped = %lf ms",
                       &t->comm, &t->comp, &t->ov) == 3 ? 0 : -1;
}

/* The ratios the lab prints are its own times' ratios: t_overlapped over max(t_comm,
 * t_compute) and over their sum, to the two decimals shown. (That overlap cannot beat the
 * longer job is a timing: tests/bench/overlap.sh reports it run after run.) */
START_TEST(async_ratios_are_computed)
{
    char *out = run_ok("run ch02/async-communication --work 1");
    for (int r = 0; r < 2; r++) {
        times3 t;
        ck_assert_msg(read_times(out, r, &t) == 0, "no times of rank %d in\n%s", r, out);
        char key[64];
        snprintf(key, sizeof key, "Rank %d: t_overlapped = ", r);
        const char *p = strstr(out, key);
        double rmax, rsum;
        ck_assert_msg(p && sscanf(p + strlen(key), "%lf x max(t_comm, t_compute), %lf x their sum",
                                  &rmax, &rsum) == 2, "no ratios of rank %d in\n%s", r, out);
        /* the times are printed to 3 decimals: their quotient is known to about 1e-3 / t */
        double tol = 0.006 + 2e-3 / fmin(t.ov, fmax(t.comm, t.comp));
        ck_assert_msg(fabs(rmax - t.ov / fmax(t.comm, t.comp)) <= tol,
                      "rank %d: printed %.2f x max, the times give %.4f", r, rmax,
                      t.ov / fmax(t.comm, t.comp));
        ck_assert_msg(fabs(rsum - t.ov / (t.comm + t.comp)) <= tol,
                      "rank %d: printed %.2f x sum, the times give %.4f", r, rsum,
                      t.ov / (t.comm + t.comp));
    }
    free(out);
}
END_TEST

/* The explanation says what ch02-predict-overlap answers: the sender takes about the max. */
START_TEST(async_explanation_agrees_with_predict)
{
    char *out = run_ok("run ch02/async-communication --work 1 --size 64K");
    char *sq = strdup(out);
    squeeze(sq);
    HAS(sq, "on rank 0's line t_overlapped is close to max(t_comm, t_compute)");
    HAS(sq, "ch02-predict-overlap");
    HAS(sq, "warm-up");
    free(sq);
    free(out);
    const exercise *ex = ex_find("ch02-predict-overlap");
    ck_assert_ptr_nonnull(ex);
    int seen = 0;
    for (uint64_t seed = 1; seed < 200 && !seen; seed++) {
        ex_question q;
        exercise_predict_draw(ex, seed, &q);
        int d, t;
        const char *p = strstr(q.text, "takes ");
        if (!strstr(q.text, "runs the computation") || !p ||
            sscanf(p, "takes %d ms and a computation on rank 0 takes %d ms", &d, &t) != 2)
            continue;
        char want[32];
        snprintf(want, sizeof want, "about %d ms", d > t ? d : t);
        ck_assert_str_eq(q.choices[(int)q.answer], want);
        seen = 1;
    }
    ck_assert(seen);
}
END_TEST

/* ---- 2-7. claims in the texts ---- */

START_TEST(ch04_host_memory_and_tuning_log)
{
    char *md = chapter_md(4, 1);
    LACKS(md, "never visits the host");
    HAS(md, "pinned host memory");
    HAS(md, "NCCL_P2P_DISABLE=1");
    HAS(md, "GPUDirect RDMA");
    LACKS(md, "No log line says which pair");
    HAS(md, "NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=TUNING");
    free(md);
    /* the inspector's quick reference says the same about P2P off */
    char *out = run_ok("run ch04/topology-inspector --matrix tests/fixtures/topo/pcie-8gpu.txt");
    HAS(out, "NCCL_P2P_DISABLE=1      no direct GPU-to-GPU copies: traffic goes through the host");
    free(out);
}
END_TEST

START_TEST(inspector_says_nvswitch)
{
    static const char *const runs[] = {
        "run ch04/topology-inspector --matrix tests/fixtures/topo/dgx-a100-8gpu-nv12.txt",
        "run ch04/topology-inspector --matrix tests/fixtures/topo/nvswitch-h100-8gpu-nics.txt",
    };
    for (int i = 0; i < 2; i++) {
        char *out = run_ok(runs[i]);
        char *sq = strdup(out);
        squeeze(sq);
        LACKS(sq, "straight between the two GPUs");
        LACKS(sq, "direct NVLink path");
        HAS(sq, "NVLink: k bonded links, GPU to GPU or through NVSwitch");
        HAS(sq, "Recommendation: all NVLink. Every GPU pair talks over NVLink, directly or "
                "through NVSwitch");
        free(sq);
        free(out);
    }
}
END_TEST

static int log2_ceil(int n)
{
    int l = 0;
    while ((1 << l) < n)
        l++;
    return l;
}

START_TEST(predict_steps_says_binomial)
{
    const exercise *ex = ex_find("ch04-predict-steps");
    ck_assert_ptr_nonnull(ex);
    int trees = 0;
    for (uint64_t seed = 1; seed <= 300; seed++) {
        ex_question q;
        exercise_predict_draw(ex, seed, &q);
        LACKS(q.text, "binary-tree");
        LACKS(q.text, "binary tree");
        int n;
        const char *p = strstr(q.text, "N = ");
        ck_assert_ptr_nonnull(p);
        ck_assert_int_eq(sscanf(p, "N = %d", &n), 1);
        if (strstr(q.text, "ring all-reduce")) {
            ck_assert_double_eq(q.answer, 2.0 * (n - 1));
            continue;
        }
        trees++;
        HAS(q.text, "binomial-tree");
        HAS(q.text, "ceil(log2 N) rounds");
        ck_assert_double_eq(q.answer, 2.0 * log2_ceil(n));
    }
    ck_assert_int_gt(trees, 0);
    char *md = chapter_md(4, 1);
    HAS(md, "A **binomial tree** over the ranks (⌈log₂N⌉ rounds each way)");
    LACKS(md, "A binary tree over the ranks");
    free(md);
}
END_TEST

/* ch03: per-rank bytes 2(N-1)/N D grow with N and stay below 2D; the table says so. */
START_TEST(ch03_ring_bytes_grow)
{
    char *md = chapter_md(3, 1);
    LACKS(md, "adding ranks does not add bytes per rank");
    HAS(md, "That grows with N");
    const char *row = strstr(md, "| bytes sent per rank |");
    const char *hdr = strstr(md, "| Ranks N |");
    ck_assert(row && hdr);
    int ns[5];
    double f[5];
    ck_assert_int_eq(sscanf(hdr, "| Ranks N | %d | %d | %d | %d | %d |", &ns[0], &ns[1], &ns[2],
                            &ns[3], &ns[4]), 5);
    ck_assert_int_eq(sscanf(row, "| bytes sent per rank | %lf·D | %lf·D | %lf·D | %lf·D | %lf·D |",
                            &f[0], &f[1], &f[2], &f[3], &f[4]), 5);
    for (int i = 0; i < 5; i++) {
        ck_assert_msg(fabs(f[i] - 2.0 * (ns[i] - 1) / ns[i]) < 0.006, "N=%d: %.2f", ns[i], f[i]);
        ck_assert(f[i] < 2.0);
        if (i)
            ck_assert(f[i] > f[i - 1]);
    }
    free(md);
}
END_TEST

/* ch04: the barrier's effect is quoted with the command that measures it, and that command
 * exists and prints the comparison. */
START_TEST(ch04_barrier_figure_measurable)
{
    char *md = chapter_md(4, 1);
    LACKS(md, "several times slower");
    HAS(md, "`mlsys-lab run ch04/benchmark-algorithms --world-size 4 --sizes 1K,1M "
            "--iterations 200 --barrier-in-loop`");
    free(md);
    char *out = run_ok("run ch04/benchmark-algorithms --world-size 2 --sizes 1K --iterations 5 "
                       "--barrier-in-loop");
    HAS(out, "THE ORIGINAL'S TIMING: A BARRIER INSIDE THE TIMED LOOP");
    const char *p = strstr(out, "1.0 KB       ring");
    ck_assert_msg(p != NULL, "no 1.0 KB ring row after the heading");
    double m, mb, ratio;
    ck_assert_int_eq(sscanf(p + 19, "%lf %lf %lfx", &m, &mb, &ratio), 3);
    ck_assert(m > 0 && mb > 0);
    /* the ratio of the two printed means, within their rounding to 0.001 ms (and 0.01) */
    ck_assert(ratio >= (mb - 0.0005) / (m + 0.0005) - 0.01);
    ck_assert(m <= 0.0005 || ratio <= (mb + 0.0005) / (m - 0.0005) + 0.01);
    free(out);
}
END_TEST

/* ---- 8. the text and the checks agree, chapters 1-4 ---- */

/* The exercise's paragraph: from its backticked id to the next blank line or the next
 * numbered item. Squeezed; the caller frees it. */
static char *exercise_paragraph(const char *raw, const char *id)
{
    char key[80];
    snprintf(key, sizeof key, "`%s`", id);
    const char *p = strstr(raw, key);
    if (!p)
        return NULL;
    const char *end = strstr(p, "\n\n");
    for (const char *q = p; *q && (!end || q < end); q++)
        if (q[0] == '\n' && q[1] >= '1' && q[1] <= '9' && q[2] == '.' && q[3] == ' ') {
            end = q;
            break;
        }
    size_t n = end ? (size_t)(end - p) : strlen(p);
    char *s = strndup(p, n);
    squeeze(s);
    return s;
}

/* Every "A, B and C ranks" list of para: each must be exactly the world sizes. Returns how
 * many lists there were. */
static int check_rank_lists(const char *id, const char *para, const int *sizes)
{
    regex_t re;
    ck_assert_int_eq(regcomp(&re, "([0-9]+)((, [0-9]+)*)( and ([0-9]+))? ranks?", REG_EXTENDED), 0);
    int lists = 0;
    const char *p = para;
    regmatch_t m[6];
    while (regexec(&re, p, 6, m, 0) == 0) {
        int got[16], ng = 0;
        for (const char *q = p + m[0].rm_so; q < p + m[0].rm_eo && ng < 16;) {
            if (*q >= '0' && *q <= '9') {
                got[ng++] = (int)strtol(q, (char **)&q, 10);
            } else
                q++;
        }
        int want = 0;
        while (sizes[want])
            want++;
        ck_assert_msg(ng == want, "%s: the text lists %d world sizes (%.*s), the check runs %d",
                      id, ng, (int)(m[0].rm_eo - m[0].rm_so), p + m[0].rm_so, want);
        for (int i = 0; i < ng; i++)
            ck_assert_msg(got[i] == sizes[i], "%s: the text says %.*s; the check runs size %d "
                          "where the text says %d", id, (int)(m[0].rm_eo - m[0].rm_so),
                          p + m[0].rm_so, sizes[i], got[i]);
        lists++;
        p += m[0].rm_eo;
    }
    regfree(&re);
    return lists;
}

START_TEST(text_matches_checks)
{
    int ch = _i + 1;
    char *raw = chapter_md(ch, 0), *sq = chapter_md(ch, 1);
    int seen = 0;
    for (int i = 0; i < ex_count(); i++) {
        const exercise *ex = ex_at(i);
        if (ex->chapter != ch)
            continue;
        seen++;
        char key[80];
        snprintf(key, sizeof key, "`%s`", ex->id);
        ck_assert_msg(strstr(raw, key) != NULL, "ch%02d.md never names exercise %s", ch, ex->id);
        char *para = exercise_paragraph(raw, ex->id);
        ck_assert_ptr_nonnull(para);
        if (ex->kind == EX_IMPLEMENT) {
            /* the world sizes the check runs, stated in the text, and the watchdog */
            ck_assert_msg(check_rank_lists(ex->id, para, ex->impl->world_sizes) > 0,
                          "%s: the text does not say on how many ranks the check runs:\n%s",
                          ex->id, para);
            const char *w = strstr(para, "-second watchdog");
            if (w) {
                while (w > para && w[-1] >= '0' && w[-1] <= '9')
                    w--;
                ck_assert_int_eq(atoi(w) * 1000, ex->impl->timeout_ms);
            }
        }
        if (ex->kind == EX_EXPERIMENT) {
            /* every answer key of the starter is named in the chapter */
            char path[PATH_MAX + 128];
            snprintf(path, sizeof path, "%s/assets/exercises/%s/%s", src_dir(), ex->id,
                     ex->starter);
            char *st = ex_read_file(path, NULL);
            ck_assert_msg(st != NULL, "cannot read %s", path);
            int keys = 0;
            for (char *save, *line = strtok_r(st, "\n", &save); line;
                 line = strtok_r(NULL, "\n", &save)) {
                char k[64];
                if (line[0] == '#' || sscanf(line, "%63[A-Za-z0-9_] =", k) != 1)
                    continue;
                snprintf(key, sizeof key, "`%s`", k);
                ck_assert_msg(strstr(para, key) != NULL, "%s: the text never names the answer "
                              "key %s", ex->id, k);
                keys++;
            }
            ck_assert_int_gt(keys, 0);
            free(st);
        }
        free(para);
    }
    ck_assert_int_gt(seen, 0);

    /* the files an experiment's check reads: named in the text by path */
    if (ch == 4) {
        HAS(sq, "assets/exercises/ch04-topology/topo.txt");
        const exercise *ex = ex_find("ch04-crossover");
        /* the benchmark command: one macro in ch04_exercises.c builds the check's argv and the
         * task; the text and the starter quote it */
        const char *a = strstr(ex->task, "`mlsys-lab bench ");
        ck_assert_ptr_nonnull(a);
        const char *b = strchr(a + 1, '`');
        ck_assert_ptr_nonnull(b);
        char *cmd = strndup(a + 1, (size_t)(b - a - 1));
        HAS(sq, cmd);
        char path[PATH_MAX + 64];
        snprintf(path, sizeof path, "%s/assets/exercises/ch04-crossover/starter.txt", src_dir());
        char *st = ex_read_file(path, NULL);
        ck_assert_ptr_nonnull(st);
        HAS(st, cmd);
        free(st);
        free(cmd);
    }

    /* no paragraph calls an existing lab "being built" */
    for (char *save, *para = strtok_r(raw, "\n", &save); para; para = strtok_r(NULL, "\n", &save)) {
        if (!strstr(para, "being built"))
            continue;
        for (const char *p = para; (p = strstr(p, "ch0")) != NULL; p++) {
            char id[64];
            if (sscanf(p, "%63[a-z0-9/-]", id) == 1 && strchr(id, '/'))
                ck_assert_msg(lab_find(id) == NULL, "ch%02d.md: %s \"being built\", but it "
                              "exists", ch, id);
        }
    }
    free(raw);
    free(sq);
}
END_TEST

/* ---- 8b. chapters 5-7: the parameters the texts quote are the checks' ---- */

static char *asset_text(const char *id, const char *name)
{
    char path[PATH_MAX + 128];
    snprintf(path, sizeof path, "%s/assets/exercises/%s/%s", src_dir(), id, name);
    char *s = ex_read_file(path, NULL);
    ck_assert_msg(s != NULL, "cannot read %s", path);
    return s;
}

START_TEST(part2_text_parameters)
{
    /* ch05-bucketing: the bucket sizes and tensor sizes of check.c, and the call counts
     * ceil(bytes / bucket) the text and the starter quote, recomputed here */
    char *chk = asset_text("ch05-bucketing", "check.c");
    HAS(chk, "{1024, 65536, 1048576}");
    HAS(chk, "{10, 10 * 256, 256, 256 * 784}");
    free(chk);
    long bytes = 4L * (10 + 10 * 256 + 256 + 256 * 784);
    char counts[64];
    snprintf(counts, sizeof counts, "%ld, %ld and %ld", (bytes + 1023) / 1024,
             (bytes + 65535) / 65536, (bytes + 1048575) / 1048576);
    char *md = chapter_md(5, 1);
    HAS(md, "buckets of 1 KB, 64 KB and 1 MB");
    HAS(md, "814,120 bytes");
    HAS(md, counts);
    HAS(md, "5 SGD steps");
    free(md);
    char *st = asset_text("ch05-bucketing", "starter.c");
    snprintf(counts, sizeof counts, "%ld, %ld and %ld", (bytes + 1023) / 1024,
             (bytes + 65535) / 65536, (bytes + 1048575) / 1048576);
    HAS(st, counts);
    HAS(st, "814,120 bytes");
    free(st);
    /* ch06-tp-overhead and ch07-layout: the command the check runs, in the text and the
     * starter */
    static const struct { const char *id, *cmd; int ch; } cmds[] = {
        {"ch06-tp-overhead", "mlsys-lab run ch06/tp-mlp --tp-size 4", 6},
        {"ch07-layout", "mlsys-lab run ch07/parallel-strategy-calculator --compat", 7},
    };
    for (int i = 0; i < 2; i++) {
        md = chapter_md(cmds[i].ch, 1);
        HAS(md, cmds[i].cmd);
        free(md);
        st = asset_text(cmds[i].id, "starter.txt");
        HAS(st, cmds[i].cmd);
        free(st);
    }
    const exercise *ex = ex_find("ch07-layout");
    ck_assert_ptr_nonnull(ex);
    HAS(ex->task, cmds[1].cmd);
    /* ch06-column-check runs T = 1, 2, 4 and 8: all four named in the starter */
    st = asset_text("ch06-column-check", "starter.txt");
    for (int t = 1; t <= 8; t *= 2) {
        char cmd[64];
        snprintf(cmd, sizeof cmd, "mlsys-lab run ch06/tp-linear --tp-size %d\n", t);
        HAS(st, cmd);
    }
    free(st);
}
END_TEST

/* ---- 9. wording ---- */

START_TEST(deadlock_fix_order_irrelevant)
{
    char *out = run_ok("run ch02/send-recv-basic --show-deadlock");
    char *sq = strdup(out);
    squeeze(sq);
    LACKS(sq, "Posting the receive first");
    HAS(sq, "the order of irecv and isend does not matter");
    free(sq);
    free(out);
    char *md = chapter_md(2, 1);
    LACKS(md, "before `wait` corrupts the message (here, always");
    HAS(md, "Writing an `isend` buffer before `wait` can corrupt the message");
    free(md);
}
END_TEST

START_TEST(softmax_label_global_max)
{
    char *out = run_ok("run ch03/distributed-softmax --world-size 2 --size 8");
    HAS(out, "Rank 0: elements [0, 4), local max");
    HAS(out, "local Σexp(x - global max)");
    LACKS(out, "local Σexp(x - max)");
    free(out);
}
END_TEST

/* The pipeline's events come in time order, so the stages interleave: stage 1 receives
 * micro-batch 0 before stage 0's synchronous send of micro-batch 1 can return. */
START_TEST(pipeline_events_in_time_order)
{
    char *out = run_ok("run ch02/pipeline-simulation --world-size 3 --num-microbatches 3");
    const char *a = strstr(out, "Stage 1: received micro-batch 0 from stage 0");
    const char *b = strstr(out, "Stage 0: sent micro-batch 1 to stage 1");
    ck_assert_msg(a && b && a < b, "stage 0's events all come first");
    double last = -1;
    int events = 0;
    for (const char *p = out; (p = strstr(p, "   @ ")) != NULL; p += 5) {
        double t;
        ck_assert_int_eq(sscanf(p, "   @ %lf ms", &t), 1);
        ck_assert_msg(t >= last, "events out of time order at %.3f ms", t);
        last = t;
        events++;
    }
    ck_assert_int_eq(events, 3 * 2 * 3);
    free(out);
}
END_TEST

/* "1 ranks", "1 additions", "the 1 other rank keep": no lab of chapters 1-4 says them. */
START_TEST(plural_agreement)
{
    static const char *const runs[] = {
        "run ch01/hello-distributed -w 1",
        "run ch02/send-recv-basic -w 3",
        "run ch02/pipeline-simulation -w 1 -m 1",
        "run ch02/async-communication --work 1 --size 4",
        "run ch03/collective-cheatsheet -w 1",
        "run ch03/collective-cheatsheet -w 2",
        "run ch04/benchmark-algorithms -w 1 --sizes 4 -i 1",
        NULL
    };
    regex_t re;
    ck_assert_int_eq(regcomp(&re, "(^|[^0-9.,x])1 (other |more )?(ranks|processes|additions|"
                             "slices|elements|layers|micro-batches|messages|stages|chunks|inputs|"
                             "means|calls|values|rows|steps|links|pairs|sizes)([^a-z]|$)|"
                             "1 other rank keep[^s]|all 1 ranks", REG_EXTENDED | REG_NEWLINE), 0);
    for (int i = 0; runs[i]; i++) {
        char *out = run_ok(runs[i]);
        regmatch_t m[1];
        if (regexec(&re, out, 1, m, 0) == 0)
            ck_abort_msg("`%s` says \"%.*s\"", runs[i], (int)(m[0].rm_eo - m[0].rm_so),
                         out + m[0].rm_so);
        free(out);
    }
    regfree(&re);
}
END_TEST

/* ---- 10. chapters 5-7: plurals, a learner's words, and the numbers the texts quote ---- */

START_TEST(plural_agreement_part2)
{
    static const char *const runs[] = {
        "run ch05/simple-ddp -w 1 --zero 3 --max-steps 2",
        "run ch05/simple-ddp -w 2 --max-steps 1",
        "run ch05/simple-ddp -w 2 --max-steps 2 --bucket-size 1M --first-bucket 1M",
        "run ch05/gradient-sync-visualizer -w 1 -v",
        "run ch06/tp-linear -t 1",
        "run ch06/tp-mlp -t 1",
        "run ch06/tp-attention -t 1",
        "run ch07/pipeline-schedule-viz -P 1 -m 1",
        "run ch07/pipeline-schedule-viz -P 2 -m 1 --run --layers 4 --hidden 8",
        "run ch07/parallel-strategy-calculator -g 1 --batch-size 1",
        NULL
    };
    regex_t re;
    ck_assert_int_eq(regcomp(&re, "(^|[^0-9.,x])1 (other |more )?(ranks|processes|additions|"
                             "slices|elements|layers|micro-batches|messages|stages|chunks|inputs|"
                             "means|calls|values|rows|steps|links|pairs|sizes|buckets|"
                             "all-reduces|batches|GPUs|nodes|tensors|sends)([^a-z]|$)|"
                             "[a-z]\\(s\\)|all 1 ranks", REG_EXTENDED | REG_NEWLINE), 0);
    for (int i = 0; runs[i]; i++) {
        char *out = run_ok(runs[i]);
        regmatch_t m[1];
        if (regexec(&re, out, 1, m, 0) == 0)
            ck_abort_msg("`%s` says \"%.*s\"", runs[i], (int)(m[0].rm_eo - m[0].rm_so),
                         out + m[0].rm_so);
        free(out);
    }
    regfree(&re);
}
END_TEST

/* Outside the Pitfalls sections the texts, the labs and their flags speak of the lab, not of
 * "the original" a learner never saw. */
START_TEST(part2_words)
{
    for (int ch = 5; ch <= 7; ch++) {
        char *md = chapter_md(ch, 0);
        char *pit = strstr(md, "\n## Pitfalls");
        ck_assert_ptr_nonnull(pit);
        char *next = strstr(pit + 1, "\n## ");
        /* everything but the Pitfalls section */
        size_t a = (size_t)(pit - md);
        char *rest = next ? next : pit + strlen(pit);
        char *outside = malloc(strlen(md) + 1);
        memcpy(outside, md, a);
        strcpy(outside + a, rest);
        squeeze(outside);
        LACKS(outside, "the original");
        LACKS(outside, "The original");
        LACKS(outside, "original tutorial's");
        free(outside);
        free(md);
    }
    static const char *const runs[] = {
        "run ch05/simple-ddp -w 2 --max-steps 2 --zero 1", "run ch05/simple-ddp --help",
        "run ch06/tp-linear -t 2", "run ch06/tp-mlp -t 2", "run ch07/parallel-strategy-calculator",
        "run ch07/parallel-strategy-calculator --help", "run ch07/pipeline-schedule-viz",
        NULL
    };
    for (int i = 0; runs[i]; i++) {
        char *out = run_ok(runs[i]);
        ck_assert_msg(!strstr(out, "original") && !strstr(out, "tutorial script"),
                      "`%s` speaks of the original:\n%s", runs[i], strstr(out, "original") ?
                      strstr(out, "original") - (strstr(out, "original") - out > 60 ? 60 : 0) :
                      strstr(out, "tutorial script"));
        free(out);
    }
    /* --hidden's help shows an example, not something that reads as the default */
    char *help = run_ok("run ch05/simple-ddp --help");
    const char *h = strstr(help, "--hidden");
    ck_assert_ptr_nonnull(h);
    const char *eol = strchr(h, '\n');
    const char *ex = strstr(h, "e.g. 2048,2048");
    ck_assert_msg(ex && ex < eol, "%.*s", (int)(eol - h), h);
    free(help);
    /* the calculator's rows are no wider than a terminal of 80 columns */
    static const char *const calc[] = {"run ch07/parallel-strategy-calculator",
                                       "run ch07/parallel-strategy-calculator --moe -g 128", NULL};
    for (int i = 0; calc[i]; i++) {
        char *out = run_ok(calc[i]);
        int col = 0;
        for (const unsigned char *p = (const unsigned char *)out; *p; p++) {
            if (*p == '\n') {
                col = 0;
                continue;
            }
            if ((*p & 0xc0) != 0x80 && ++col > 80) {
                const char *line = (const char *)p;
                while (line > out && line[-1] != '\n')
                    line--;
                ck_abort_msg("`%s`: a line wider than 80: %.100s", calc[i], line);
            }
        }
        free(out);
    }
}
END_TEST

START_TEST(part2_text_claims)
{
    /* ch05: which ZeRO stage costs more than DDP, with the lab's own bytes (4 ranks) */
    char *md = chapter_md(5, 1);
    LACKS(md, "ZeRO-1 and -2 cost no more communication than DDP");
    HAS(md, "1,831,788");
    HAS(md, "1,221,180");
    char *out = run_ok("run ch05/simple-ddp -w 4 --max-steps 2 --zero 1");
    HAS(out, "Rank 0: sent per step 1831788 B");
    free(out);
    ck_assert_int_eq(2 * 3 * 4 * 203530 / 4, 1221180);      /* DDP: 2(N-1)/N of 4Ψ */
    /* the sweep's table: bucket sizes and counts as the lab computes them */
    static const struct { const char *name; long bytes; } rows[] = {
        {"1 KiB", 1024}, {"4 KiB", 4096}, {"16 KiB", 16384}, {"64 KiB", 65536},
        {"256 KiB", 262144}, {"1 MiB", 1048576},
    };
    for (int i = 0; i < 6; i++) {
        char row[64];
        snprintf(row, sizeof row, "| %s | %ld |", rows[i].name,
                 (814120 + rows[i].bytes - 1) / rows[i].bytes);
        HAS(md, row);
    }
    HAS(md, "`simple-ddp --sweep`");
    free(md);
    /* ch06: TP bytes per rank grow with T; the NVLink share, from its formula */
    md = chapter_md(6, 1);
    HAS(md, "Only the number of all-reduces is independent of T");
    HAS(md, "2(T−1)/T is 1 at T = 2, 1.5 at T = 4, 1.75 at T = 8");
    double a100 = 1.0 * 312e12 / (4.0 * 8192 * 300e9), h100 = 7.0 * 989e12 / (4.0 * 8192 * 450e9);
    char fig[64];
    snprintf(fig, sizeof fig, "with h = 8192 and T = 2 it is %.0f %%", 100 * a100);
    HAS(md, fig);
    snprintf(fig, sizeof fig, "with T = 8 it is about %.2f", h100);
    HAS(md, fig);
    free(md);
    /* ch07: interleaving's messages, as --run counts them; top-k; the EP formula */
    md = chapter_md(7, 1);
    LACKS(md, "each smaller");
    LACKS(md, "(k = 1 or 2)");
    HAS(md, "8 of 256 routed experts in DeepSeek-V3");
    HAS(md, "sends 2·M·(P−1) = 48 messages of 65,536 bytes");
    HAS(md, "sends 2·M·(vP−1) = 112 of the same 65,536 bytes");
    HAS(md, "5.5 micro-batches' worth on stage 0 for P = 4, M = 8, v = 2");
    HAS(md, "2 · k · (b·s·h / EP) · (EP−1)/EP");
    LACKS(md, "| 2·k·b·s·h / E |");
    HAS(md, "needs M to be a multiple of P");
    free(md);
    out = run_ok("run ch07/pipeline-schedule-viz --run -P 4 -m 8 --schedule 1f1b");
    HAS(out, "messages: 48 point-to-point sends of 65,536 B each");
    free(out);
    out = run_ok("run ch07/pipeline-schedule-viz --run -P 4 -m 8 --schedule interleaved");
    HAS(out, "messages: 112 point-to-point sends of 65,536 B each");
    free(out);
    out = run_ok("run ch07/pipeline-schedule-viz -P 4 -m 8 --schedule interleaved");
    HAS(out, "Peak activation memory: 5.5 micro-batches' worth on stage 0");
    free(out);
}
END_TEST

/* `list`: every id in one column, the longest (ch07/parallel-strategy-calculator) included,
 * so the text after the ids starts at the same column on every lab and exercise line. */
START_TEST(list_aligned)
{
    char *out = run_ok("list");
    int col = -1, lines = 0, longest = 0;
    for (char *save, *l = strtok_r(out, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
        if (strncmp(l, "      lab  ", 11) && strncmp(l, "      ex   ", 11))
            continue;
        char *id = l + 11, *end = strchr(id, ' ');
        ck_assert_ptr_nonnull(end);
        char *text = end;
        while (*text == ' ')
            text++;
        int c = (int)(text - l);
        if (col < 0)
            col = c;
        ck_assert_msg(c == col, "column %d, not %d: %s", c, col, l);
        longest += !strncmp(id, "ch07/parallel-strategy-calculator ", 34);
        lines++;
    }
    ck_assert_int_gt(lines, 20);
    ck_assert_int_eq(longest, 1);
    free(out);
}
END_TEST

/* The shipped model's validation loss: `model info` measures by default the tokens the
 * README's table was measured on (the trainer's 128 windows of 128), so the two agree, and
 * each says which tokens it used. */
START_TEST(model_val_loss_agrees)
{
    char path[PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/assets/models/README.md", src_dir());
    char *readme = ex_read_file(path, NULL);
    ck_assert_ptr_nonnull(readme);
    const char *row = strstr(readme, "| model.bin | ");
    ck_assert_ptr_nonnull(row);
    double train, val;
    ck_assert_int_eq(sscanf(row, "| model.bin | %lf | %lf |", &train, &val), 2);
    char *sq = strdup(readme);
    squeeze(sq);
    HAS(sq, "validation is the first 128 windows of 128 tokens, 16,384 tokens");
    free(sq);
    snprintf(path, sizeof path, "model info %s/assets/models/model.bin --samples 0", src_dir());
    char *out = run_ok(path);
    const char *v = strstr(out, "val loss    ");
    ck_assert_ptr_nonnull(v);
    ck_assert_msg(fabs(atof(v + 12) - val) < 5e-5, "model info %.4f, README %.4f", atof(v + 12),
                  val);
    HAS(out, "16384 tokens of the validation split, its first 128 windows of 128");
    free(out);
    free(readme);
}
END_TEST

static Suite *truth_suite(void)
{
    Suite *s = suite_create("truth");
    TCase *t = tcase_create("truth");
    tcase_set_timeout(t, 240);
    tcase_add_test(t, async_ratios_are_computed);
    tcase_add_test(t, async_explanation_agrees_with_predict);
    tcase_add_test(t, ch04_host_memory_and_tuning_log);
    tcase_add_test(t, inspector_says_nvswitch);
    tcase_add_test(t, predict_steps_says_binomial);
    tcase_add_test(t, ch03_ring_bytes_grow);
    tcase_add_test(t, ch04_barrier_figure_measurable);
    tcase_add_loop_test(t, text_matches_checks, 0, 4);
    /* chapters 5-7: the same rules for their exercises */
    tcase_add_loop_test(t, text_matches_checks, 4, 7);
    /* chapters 8-10 */
    tcase_add_loop_test(t, text_matches_checks, 7, 10);
    tcase_add_test(t, part2_text_parameters);
    tcase_add_test(t, deadlock_fix_order_irrelevant);
    tcase_add_test(t, softmax_label_global_max);
    tcase_add_test(t, pipeline_events_in_time_order);
    tcase_add_test(t, plural_agreement);
    tcase_add_test(t, plural_agreement_part2);
    tcase_add_test(t, part2_words);
    tcase_add_test(t, part2_text_claims);
    tcase_add_test(t, list_aligned);
    tcase_add_test(t, model_val_loss_agrees);
    suite_add_tcase(s, t);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(truth_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
