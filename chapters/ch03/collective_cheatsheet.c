/* collective_cheatsheet.c - ch03/collective-cheatsheet: what each collective does, shown as
 * every rank's buffer before and after the call. broadcast, scatter, gather, all_gather,
 * reduce, all_reduce, reduce_scatter (SUM), with inputs built from the rank so the rule is
 * visible. Fixed from the original: reduce_scatter uses an N-element input [1..N]·(r+1) so
 * it works for any N, explanations are computed from N, and reduce leaves the non-root
 * buffers unchanged. When the learner picks an algorithm (--algo), reduce and all_reduce
 * carry at least one element per rank, so that an algorithm that cuts the buffer into N
 * chunks (ring) really runs instead of falling back. */
#include "../common/common.h"
#include "../../core/trace_values.h"
#include <stdlib.h>
#include <string.h>

#define W 50

static const lab_flag cs_flags[] = {
    {"operation", 'o', FLAG_CHOICE, "all",
     "broadcast|scatter|gather|all_gather|reduce|all_reduce|reduce_scatter|all", 0, 0,
     "which collective to show"},
    {"world-size", 'w', FLAG_INT, "4", NULL, 1, 64, "number of ranks"},
    {NULL, 0, 0, NULL, NULL, 0, 0, NULL}
};

static const char *const ops[] = {"broadcast", "scatter", "gather", "all_gather", "reduce",
                                  "all_reduce", "reduce_scatter", NULL};

static int cs_before(const lab_args *a)
{
    int n = (int)lab_arg_int(a, "world-size");
    common_box(stdout, COMMON_BOX_WIDTH, "Collective operations cheatsheet");
    printf("World size: %d\n", n);
    printf("Operation: %s\n\n", lab_arg_str(a, "operation"));
    fflush(stdout);
    return -1;
}

/* One "Rank r: ..." line per rank, in rank order. */
static int show(mlsys_comm *c, const float *v, size_t rows, size_t cols)
{
    size_t cap = rows * cols * 24 + 64;
    char *s = mlsys_xmalloc(cap);
    if (rows > 1)
        common_matrix(s, cap, v, rows, cols);
    else
        common_list(s, cap, v, cols);
    int rc = mlsys_print_ordered(c, "Rank %d: %s\n", mlsys_rank(c), s);
    free(s);
    return rc;
}

static void header(mlsys_comm *c, const char *title)
{
    char rule[128], up[64];
    size_t i;
    for (i = 0; title[i] && i + 1 < sizeof up; i++)
        up[i] = (char)(title[i] >= 'a' && title[i] <= 'z' ? title[i] - 32 : title[i]);
    up[i] = 0;
    common_rule(rule, sizeof rule, "=", W);
    mlsys_print_root(c, "%s\n %s\n%s\nBEFORE:\n", rule, up, rule);
}

/* Elements of a reduce or all_reduce: base, or N when the algorithm the learner chose needs
 * one element per rank and base is too few (with auto the rule never picks one that does
 * not fit, and the output stays as it always was). */
static size_t fit_count(mlsys_coll coll, const char *algo, size_t base, int n)
{
    if (!algo || !*algo || !strcmp(algo, "auto"))
        return base;
    int idx = mlsys_algo_index(coll, algo);
    if (idx < 0)            /* the backend's own ("native"): the same counts as ring, so the */
        return base < (size_t)n ? (size_t)n : base;      /* two can be compared line by line */
    if (mlsys_algo_fits(coll, idx, n, base) || !mlsys_algo_fits(coll, idx, n, (size_t)n))
        return base;
    return (size_t)n;
}

/* The vector [(i+1)·(r+1)] of count elements. */
static void ramp(float *in, size_t count, int r)
{
    for (size_t i = 0; i < count; i++)
        in[i] = (float)(i + 1) * (float)(r + 1);
}

/* Run one collective with its before/after display. Returns 0 or a runtime error. */
static int run_op(mlsys_comm *c, const char *op, const char *algo)
{
    int r = mlsys_rank(c), n = mlsys_size(c), rc = 0;
    long tri = (long)n * (n + 1) / 2;      /* 1 + 2 + ... + N */
    char expr[128], buf[1024];
    common_sum_expr(expr, sizeof expr, 1, n);
    float *in = mlsys_xcalloc((size_t)n * 2 + 4, sizeof *in);
    float *out = mlsys_xcalloc((size_t)n * 2 + 4, sizeof *out);

    header(c, op);
    if (!strcmp(op, "broadcast")) {
        for (int i = 0; i < 3; i++)
            in[i] = r == 0 ? 42.0f + (float)i : 0.0f;
        if ((rc = show(c, in, 1, 3)))
            goto out;
        if ((rc = mlsys_broadcast(c, in, 3, MLSYS_F32, 0)))
            goto out;
        mlsys_print_root(c, "AFTER:\n");
        if ((rc = show(c, in, 1, 3)))
            goto out;
        mlsys_print_root(c, "broadcast copied rank 0's [42.0, 43.0, 44.0] into the buffer of "
                            "%s %d rank%s.\n", n == 1 ? "its" : "all", n, n == 1 ? "" : "s");
    } else if (!strcmp(op, "scatter")) {
        if (r == 0)
            for (int i = 0; i < n; i++) {
                in[2 * i] = 10.0f * (float)i;
                in[2 * i + 1] = 10.0f * (float)i + 1.0f;
            }
        if ((rc = r == 0 ? show(c, in, (size_t)n, 2) : show(c, out, 1, 2)))
            goto out;
        if ((rc = mlsys_scatter(c, r == 0 ? in : NULL, out, 2, MLSYS_F32, 0)))
            goto out;
        mlsys_print_root(c, "AFTER:\n");
        if ((rc = show(c, out, 1, 2)))
            goto out;
        mlsys_print_root(c, "scatter cut rank 0's %d×2 matrix into %d chunk%s: chunk i = "
                            "[10i, 10i+1] went to rank i (rank %d got [%.1f, %.1f]).\n", n, n,
                            n == 1 ? "" : "s",
                            n - 1, 10.0 * (n - 1), 10.0 * (n - 1) + 1);
    } else if (!strcmp(op, "gather")) {
        in[0] = 100.0f * (float)r;
        in[1] = 100.0f * (float)r + 1.0f;
        if ((rc = show(c, in, 1, 2)))
            goto out;
        if ((rc = mlsys_gather(c, in, r == 0 ? out : NULL, 2, MLSYS_F32, 0)))
            goto out;
        mlsys_print_root(c, "AFTER:\n");
        if ((rc = r == 0 ? show(c, out, (size_t)n, 2) : show(c, in, 1, 2)))
            goto out;
        mlsys_print_root(c, "gather collected one row per rank on rank 0: row i = rank i's "
                            "[100i, 100i+1]; the %d other rank%s %s input.\n", n - 1,
                         n == 2 ? "" : "s", n == 2 ? "keeps its" : "keep their");
    } else if (!strcmp(op, "all_gather")) {
        in[0] = (float)(r + 1);
        if ((rc = show(c, in, 1, 1)))
            goto out;
        if ((rc = mlsys_allgather(c, in, out, 1, MLSYS_F32)))
            goto out;
        mlsys_print_root(c, "AFTER:\n");
        if ((rc = show(c, out, 1, (size_t)n)))
            goto out;
        mlsys_print_root(c, "all_gather gave every rank the list of all %d input%s, "
                            "[1.0 .. %d.0]; the inputs are untouched (out-of-place).\n", n,
                            n == 1 ? "" : "s", n);
    } else if (!strcmp(op, "reduce") && fit_count(MLSYS_COLL_REDUCE, algo, 1, n) > 1) {
        size_t cnt = fit_count(MLSYS_COLL_REDUCE, algo, 1, n);
        ramp(in, cnt, r);
        if ((rc = show(c, in, 1, cnt)))
            goto out;
        if ((rc = mlsys_reduce(c, in, r == 0 ? in : NULL, cnt, MLSYS_F32, MLSYS_SUM, 0)))
            goto out;
        mlsys_print_root(c, "AFTER:\n");
        if ((rc = show(c, in, 1, cnt)))
            goto out;
        mlsys_print_root(c, "reduce(SUM) left element i = (i+1)·(%s) = (i+1)·%ld on rank 0 "
                            "only; the other ranks' buffers are unchanged. (%zu elements, one "
                            "per rank, so that an algorithm that cuts the buffer into %d chunks, as "
                            "ring does, can run.)\n", expr, tri, cnt, n);
    } else if (!strcmp(op, "reduce")) {
        in[0] = (float)(r + 1);
        if ((rc = show(c, in, 1, 1)))
            goto out;
        /* in place at the root; the others' buffers are only read */
        if ((rc = mlsys_reduce(c, in, r == 0 ? in : NULL, 1, MLSYS_F32, MLSYS_SUM, 0)))
            goto out;
        mlsys_print_root(c, "AFTER:\n");
        if ((rc = show(c, in, 1, 1)))
            goto out;
        mlsys_print_root(c, "reduce(SUM) left %s = %ld on rank 0 only; %s.\n", expr, tri,
                         n == 1 ? "there is no other rank" : n == 2 ? "rank 1's buffer is unchanged"
                                                               : "the other ranks' buffers are unchanged");
    } else if (!strcmp(op, "all_reduce") && fit_count(MLSYS_COLL_ALLREDUCE, algo, 2, n) > 2) {
        size_t cnt = fit_count(MLSYS_COLL_ALLREDUCE, algo, 2, n);
        ramp(in, cnt, r);
        if ((rc = show(c, in, 1, cnt)))
            goto out;
        if ((rc = mlsys_allreduce(c, in, in, cnt, MLSYS_F32, MLSYS_SUM)))
            goto out;
        mlsys_print_root(c, "AFTER:\n");
        if ((rc = show(c, in, 1, cnt)))
            goto out;
        mlsys_print_root(c, "all_reduce(SUM) gave every rank element i = (i+1)·(%s) = "
                            "(i+1)·%ld, in place. (%zu elements, one per rank, so that an algorithm "
                            "that cuts the buffer into %d chunks, as ring does, can run.)\n",
                         expr, tri, cnt, n);
    } else if (!strcmp(op, "all_reduce")) {
        in[0] = (float)(r + 1);
        in[1] = 2.0f * (float)(r + 1);
        if ((rc = show(c, in, 1, 2)))
            goto out;
        if ((rc = mlsys_allreduce(c, in, in, 2, MLSYS_F32, MLSYS_SUM)))
            goto out;
        mlsys_print_root(c, "AFTER:\n");
        if ((rc = show(c, in, 1, 2)))
            goto out;
        mlsys_print_root(c, "all_reduce(SUM) gave every rank [%s, 2·(%s)] = [%ld.0, %ld.0], in "
                            "place.\n", expr, expr, tri, 2 * tri);
    } else if (!strcmp(op, "reduce_scatter")) {
        for (int i = 0; i < n; i++)
            in[i] = (float)(i + 1) * (float)(r + 1);
        if ((rc = show(c, in, 1, (size_t)n)))
            goto out;
        if ((rc = mlsys_reduce_scatter(c, in, out, 1, MLSYS_F32, MLSYS_SUM)))
            goto out;
        mlsys_print_root(c, "AFTER:\n");
        if ((rc = show(c, out, 1, 1)))
            goto out;
        size_t used = 0;
        buf[0] = 0;
        for (int i = 0; i < n && i < 8 && used < sizeof buf; i++)
            used += (size_t)snprintf(buf + used, sizeof buf - used, "%s%ld", i ? ", " : "",
                                     (long)(i + 1) * tri);
        mlsys_print_root(c, "reduce_scatter(SUM) summed element i over the ranks and left it "
                            "on rank i: (i+1)·(%s) = (i+1)·%ld, so %s%s.\n", expr, tri, buf,
                         n > 8 ? ", …" : "");
    }
out:
    free(in);
    free(out);
    return rc;
}

static int cs_rank(mlsys_comm *c, const lab_args *a)
{
    const char *want = lab_arg_str(a, "operation");
    int all = !strcmp(want, "all"), k = 0;
    char sep[256];
    common_rule(sep, sizeof sep, "─", W);
    for (int i = 0; ops[i]; i++) {
        if (!all && strcmp(ops[i], want))
            continue;
        mlsys_step(c, k++, ops[i]);
        if (run_op(c, ops[i], lab_arg_str(a, "algo")) != MLSYS_OK || mlsys_barrier(c) != MLSYS_OK) {
            fprintf(stderr, "rank %d: %s: %s\n", mlsys_rank(c), ops[i], mlsys_errmsg(c));
            return 1;
        }
        if (all)
            mlsys_print_root(c, "%s\n\n", sep);
        else
            mlsys_print_root(c, "\n");
    }
    return 0;
}

const lab ch03_collective_cheatsheet_lab = {
    .id = "ch03/collective-cheatsheet",
    .title = "Collective operations cheatsheet",
    .summary = "each collective's before and after, on every rank",
    .flags = cs_flags,
    .port = 29503,
    .min_ranks = 1,
    .max_ranks = 64,
    .before = cs_before,
    .rank_main = cs_rank,
    .view = "ring",
};
