/* hello_distributed.c - ch01/hello-distributed: the first multi-rank program. Teaches rank,
 * world size and process group: N separate processes (distinct PIDs) say hello, then share
 * data with one all_gather (rank r contributes [10r, 10r+1]) and one all_reduce (the sum of
 * the ranks, N(N-1)/2), with rank 0 acting as the coordinator that prints the summary. */
#include "../common/common.h"
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define W 50

static const lab_flag hello_flags[] = {
    {"world-size", 'w', FLAG_INT, "4", NULL, 1, 64, "number of ranks (processes)"},
    {NULL, 0, 0, NULL, NULL, 0, 0, NULL}
};

static int fail(mlsys_comm *c, const char *what)
{
    fprintf(stderr, "rank %d: %s failed: %s\n", mlsys_rank(c), what, mlsys_errmsg(c));
    return 1;
}

static int hello_before(const lab_args *a)
{
    int n = (int)lab_arg_int(a, "world-size");
    char why[256];
    int gpus = probe_gpu_count(why, sizeof why);
    common_banner(stdout, W, "Hello, distributed world");
    printf("World size: %d\n", n);
    printf("Backend: %s%s\n", lab_arg_str(a, "backend"),
           lab_backend_is_shm(lab_arg_str(a, "backend")) ? " (our shared-memory CPU transport)"
                                                         : "");
    if (gpus > 0)
        printf("CUDA available: yes (%d GPU%s)\n", gpus, gpus == 1 ? "" : "s");
    else
        printf("CUDA available: no\n");
    printf("Starting %d process%s...\n\n", n, n == 1 ? "" : "es");
    fflush(stdout);
    return -1;
}

static int hello_rank(mlsys_comm *c, const lab_args *a)
{
    int r = mlsys_rank(c), n = mlsys_size(c), rc = 1;
    char dev[32], buf[256];
    float mine[2] = {10.0f * (float)r, 10.0f * (float)r + 1.0f};
    float *all = mlsys_xcalloc((size_t)n * 2, sizeof *all);
    common_text row = {0};

    /* 1. every process says who it is: distinct PIDs prove these are processes */
    mlsys_step(c, 0, "hello");
    common_device_name(a, mlsys_local_rank(c), dev, sizeof dev);
    if (mlsys_print_ordered(c, "Rank %d/%d: hello from PID %d on %s\n", r, n, (int)getpid(),
                            dev))
        goto out_err;
    if (mlsys_print_ordered(c, "Rank %d: my data = %s\n", r, common_list(buf, sizeof buf, mine, 2)))
        goto out_err;

    /* 2. all_gather: every rank ends with every rank's vector */
    mlsys_step(c, 1, "all_gather");
    if (mlsys_allgather(c, mine, all, 2, MLSYS_F32) != MLSYS_OK) {
        rc = fail(c, "all_gather");
        goto out;
    }
    if (mlsys_barrier(c) != MLSYS_OK) {
        rc = fail(c, "barrier");
        goto out;
    }
    char rule[128];
    common_rule(rule, sizeof rule, "=", W);
    mlsys_print_root(c, "\n%s\n After all_gather, rank 0 holds:\n%s\n", rule, rule);
    for (int i = 0; i < n; i++)
        mlsys_print_root(c, "  from rank %d: %s\n", i, common_list(buf, sizeof buf, all + 2 * i, 2));
    mlsys_print_root(c, "Every rank's copy:\n");
    for (int i = 0; i < n; i++)
        common_text_add(&row, " %s", common_list(buf, sizeof buf, all + 2 * i, 2));
    if (mlsys_print_ordered(c, "Rank %d gathered:%s\n", r, common_text_str(&row)))
        goto out_err;

    /* 3. all_reduce(SUM) of the rank numbers */
    mlsys_step(c, 2, "all_reduce");
    float sum = (float)r;
    if (mlsys_allreduce(c, &sum, &sum, 1, MLSYS_F32, MLSYS_SUM) != MLSYS_OK) {
        rc = fail(c, "all_reduce");
        goto out;
    }
    long expected = (long)n * (n - 1) / 2;
    char expr[128];
    common_sum_expr(expr, sizeof expr, 0, n - 1);
    mlsys_print_root(c, "\nall_reduce(SUM) of the ranks: %.1f\n", (double)sum);
    mlsys_print_root(c, "expected: %s = %ld\n", expr, expected);
    mlsys_print_root(c, "correct: %s\n", sum == (float)expected ? "yes" : "NO");
    if (mlsys_print_ordered(c, "Rank %d: sum = %.1f\n", r, (double)sum))
        goto out_err;

    /* 4. the coordinator's note */
    mlsys_print_root(c, "\nRank 0 is the coordinator by convention:\n"
                        "  - it prints logs and summaries, so output is not repeated N times\n"
                        "  - it saves checkpoints, so one copy of the model is written\n"
                        "  - it orchestrates: hands out work, seeds, hyper-parameters\n"
                        "  - every rank still computes; rank 0 is not a server\n"
                        "  - any rank could play the role; 0 always exists, so it is 0\n");
    if (mlsys_barrier(c) != MLSYS_OK) {
        rc = fail(c, "barrier");
        goto out;
    }
    rc = sum == (float)expected ? 0 : 1;
    goto out;
out_err:
    rc = fail(c, "ordered print");
out:
    common_text_free(&row);
    free(all);
    return rc;
}

static void hello_after(const lab_args *a, int status)
{
    long n = lab_arg_int(a, "world-size");
    if (status == 0)
        printf("\nAll %ld process%s finished.\n", n, n == 1 ? "" : "es");
}

const lab ch01_hello_distributed_lab = {
    .id = "ch01/hello-distributed",
    .title = "Hello, distributed world",
    .summary = "N processes say hello, then one all_gather and one all_reduce",
    .flags = hello_flags,
    .port = 29500,
    .min_ranks = 1,
    .max_ranks = 64,
    .before = hello_before,
    .rank_main = hello_rank,
    .after = hello_after,
    .view = "ring",
};
