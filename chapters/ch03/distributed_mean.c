/* distributed_mean.c - ch03/distributed-mean: the global mean of data sharded across ranks.
 * Demo 1: equal shards, all_reduce(SUM) / N of the vectors. Demo 2: unequal shards need
 * weights, Σsum / Σcount. Demo 3: the same all_reduce-then-divide is data parallelism's
 * gradient synchronisation. Fixed from the original: demo 2 works for any N (rank 3 holds
 * ⌊D/2⌋ elements, every other rank D). Data: normals seeded 42+r (demos 1-2), 123+r (3). */
#include "../common/common.h"
#include <stdlib.h>
#include <string.h>

#define GRAD_LEN 10

static const lab_flag mean_flags[] = {
    {"data-size", 'd', FLAG_INT, "100", NULL, 2, 1L << 24, "elements per rank D"},
    {"world-size", 'w', FLAG_INT, "4", NULL, 1, 64, "number of ranks"},
    {NULL, 0, 0, NULL, NULL, 0, 0, NULL}
};

static void draw(float *x, long n, uint64_t seed, float shift)
{
    mlsys_rng g;
    mlsys_rng_seed(&g, seed);
    for (long i = 0; i < n; i++)
        x[i] = (float)mlsys_rng_normal(&g) + shift;
}

static double sum_of(const float *x, long n)
{
    double s = 0;
    for (long i = 0; i < n; i++)
        s += x[i];
    return s;
}

/* Demo 2's shard sizes: rank 3 holds half, the others D (the original's [D, D, D, D/2]). */
static long shard_size(int r, long d)
{
    return r == 3 ? d / 2 : d;
}

static int mean_before(const lab_args *a)
{
    int n = (int)lab_arg_int(a, "world-size");
    common_box(stdout, COMMON_BOX_WIDTH, "Distributed mean");
    printf("World size: %d\n", n);
    printf("Data size per rank (D): %ld\n\n", lab_arg_int(a, "data-size"));
    fflush(stdout);
    return -1;
}

static int mean_rank(mlsys_comm *c, const lab_args *a)
{
    int r = mlsys_rank(c), n = mlsys_size(c), rc = 1;
    long d = lab_arg_int(a, "data-size");
    float *x = mlsys_xmalloc((size_t)d * sizeof *x);
    float *avg = mlsys_xmalloc((size_t)d * sizeof *avg);
    float grad[GRAD_LEN];
    char rule[128];
    common_rule(rule, sizeof rule, "=", 50);

    /* ---- demo 1: equal sizes ---- */
    mlsys_step(c, 0, "equal shards");
    mlsys_print_root(c, "%s\n Demo 1: equal shard sizes\n%s\n", rule, rule);
    draw(x, d, 42u + (uint64_t)r, (float)r);
    double local = sum_of(x, d) / (double)d;
    memcpy(avg, x, (size_t)d * sizeof *x);
    if (mlsys_allreduce(c, avg, avg, (size_t)d, MLSYS_F32, MLSYS_SUM) != MLSYS_OK)
        goto err;
    for (long i = 0; i < d; i++)
        avg[i] /= (float)n;
    double dist = sum_of(avg, d) / (double)d;
    if (mlsys_print_ordered(c, "Rank %d: local mean %.4f, distributed mean %.4f\n", r, local,
                            dist))
        goto err;
    mlsys_print_root(c, "The distributed mean is the mean of the element-wise average\n"
                        "(all_reduce SUM, then / %d). With equal sizes it equals the average\n"
                        "of the local means; rank r's data has mean ≈ r, so ≈ (N-1)/2 = %.1f.\n\n",
                     n, (n - 1) / 2.0);

    /* ---- demo 2: unequal sizes ---- */
    mlsys_step(c, 1, "unequal shards");
    if (mlsys_barrier(c) != MLSYS_OK)
        goto err;
    mlsys_print_root(c, "%s\n Demo 2: unequal shard sizes\n%s\n", rule, rule);
    long mine = shard_size(r, d);
    draw(x, mine, 42u + (uint64_t)r, (float)r);
    double s = sum_of(x, mine), cnt = (double)mine;
    double lmean = s / cnt;
    if (mlsys_allreduce(c, &s, &s, 1, MLSYS_F64, MLSYS_SUM) != MLSYS_OK ||
        mlsys_allreduce(c, &cnt, &cnt, 1, MLSYS_F64, MLSYS_SUM) != MLSYS_OK)
        goto err;
    if (mlsys_print_ordered(c, "Rank %d: size %ld, local mean %.4f, global weighted mean %.4f\n",
                            r, mine, lmean, s / cnt))
        goto err;
    if (r == 0) {
        double num = 0, den = 0;
        common_text t = {0};
        for (int q = 0; q < n; q++) {
            num += (double)q * (double)shard_size(q, d);
            den += (double)shard_size(q, d);
            if (q < 6)
                common_text_add(&t, "%s%d·%ld", q ? " + " : "", q, shard_size(q, d));
            else if (q == 6)
                common_text_add(&t, " + …");
        }
        mlsys_print_root(c, "Σcount = %.0f. Global mean = Σsum / Σcount, not the plain average "
                            "of the\nlocal means. With shard means ≈ r: (%s)/%.0f = %.3f.\n\n",
                         cnt, common_text_str(&t), den, num / den);
        common_text_free(&t);
    }

    /* ---- demo 3: gradient synchronisation ---- */
    mlsys_step(c, 2, "gradient sync");
    if (mlsys_barrier(c) != MLSYS_OK)
        goto err;
    mlsys_print_root(c, "%s\n Demo 3: gradient synchronisation\n%s\n", rule, rule);
    mlsys_print_root(c, "Data-parallel training step on every rank:\n"
                        "  1. forward on the local batch\n"
                        "  2. backward: local gradients\n"
                        "  3. for each parameter: all_reduce(SUM), then / N\n"
                        "  4. optimizer step: identical on every rank\n");
    draw(grad, GRAD_LEN, 123u + (uint64_t)r, 0.0f);
    mlsys_print_root(c, "Before all_reduce:\n");
    if (mlsys_print_ordered(c, "Rank %d: before grad[0] = %.4f\n", r, (double)grad[0]))
        goto err;
    if (mlsys_allreduce(c, grad, grad, GRAD_LEN, MLSYS_F32, MLSYS_SUM) != MLSYS_OK)
        goto err;
    for (int i = 0; i < GRAD_LEN; i++)
        grad[i] /= (float)n;
    mlsys_print_root(c, "After all_reduce / %d:\n", n);
    if (mlsys_print_ordered(c, "Rank %d: after grad[0] = %.4f\n", r, (double)grad[0]))
        goto err;
    mlsys_print_root(c, "Every rank now holds the same averaged gradient.\n");
    if (mlsys_barrier(c) != MLSYS_OK)
        goto err;
    rc = 0;
    goto out;
err:
    fprintf(stderr, "rank %d: %s\n", r, mlsys_errmsg(c));
out:
    free(x);
    free(avg);
    return rc;
}

const lab ch03_distributed_mean_lab = {
    .id = "ch03/distributed-mean",
    .title = "Distributed mean",
    .summary = "global mean of sharded data: equal and unequal shards, gradient sync",
    .flags = mean_flags,
    .port = 29504,
    .min_ranks = 1,
    .max_ranks = 64,
    .before = mean_before,
    .rank_main = mean_rank,
    .view = "ring",
};
