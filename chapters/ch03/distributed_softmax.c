/* distributed_softmax.c - ch03/distributed-softmax (missing from the original; the
 * curriculum's exercise 4). A vector is sharded across ranks; softmax needs two global facts,
 * built from collectives: the maximum (all_reduce MAX, so exp never overflows) and the sum of
 * exp(x - max) (all_reduce SUM). Rank 0 then compares the gathered result with a serial
 * softmax and reports the largest error and the sum. --scale 1000 or --offset 1000 make
 * values large enough that the naive exp(x) overflows. Input: offset + scale · normals from
 * seed 42, the same vector on every rank (each keeps its shard). */
#include "../common/common.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

static const lab_flag sm_flags[] = {
    {"size", 'n', FLAG_INT, "16", NULL, 1, 1L << 24, "length of the whole vector"},
    {"scale", 0, FLAG_DOUBLE, "1", NULL, 0, 0, "multiply the values (1000: the naive exp overflows)"},
    {"offset", 0, FLAG_DOUBLE, "0", NULL, 0, 0, "add to the values (1000: large but not one-hot)"},
    {"world-size", 'w', FLAG_INT, "4", NULL, 1, 64, "number of ranks"},
    {NULL, 0, 0, NULL, NULL, 0, 0, NULL}
};

static void make_vector(float *x, long n, double scale, double offset)
{
    mlsys_rng g;
    mlsys_rng_seed(&g, 42);
    for (long i = 0; i < n; i++)
        x[i] = (float)(offset + scale * mlsys_rng_normal(&g));
}

/* Block distribution: the first (n mod N) ranks hold one element more. */
static void shard(long n, int ranks, int r, long *lo, long *len)
{
    long base = n / ranks, rem = n % ranks;
    *lo = r * base + (r < rem ? r : rem);
    *len = base + (r < rem ? 1 : 0);
}

static int sm_before(const lab_args *a)
{
    int n = (int)lab_arg_int(a, "world-size");
    common_box(stdout, COMMON_BOX_WIDTH, "Distributed softmax");
    printf("World size: %d\n", n);
    printf("Vector length: %ld, values: %g + %g · normal(0, 1)\n", lab_arg_int(a, "size"),
           lab_arg_double(a, "offset"), lab_arg_double(a, "scale"));
    printf("Steps: local max → all_reduce(MAX) → exp(x - global max) → all_reduce(SUM) → divide\n\n");
    fflush(stdout);
    return -1;
}

static int sm_rank(mlsys_comm *c, const lab_args *a)
{
    int r = mlsys_rank(c), n = mlsys_size(c), rc = 1;
    long total = lab_arg_int(a, "size"), lo, len;
    double scale = lab_arg_double(a, "scale"), offset = lab_arg_double(a, "offset");
    long pad = (total + n - 1) / n;
    float *x = mlsys_xmalloc((size_t)total * sizeof *x);
    float *p = mlsys_xcalloc((size_t)pad, sizeof *p);
    float *all = NULL;
    double *ref = NULL;

    make_vector(x, total, scale, offset);      /* every rank draws the same vector, keeps its shard */
    shard(total, n, r, &lo, &len);
    const float *xs = x + lo;

    mlsys_step(c, 0, "local max");
    float mx = -INFINITY;
    for (long i = 0; i < len; i++)
        if (xs[i] > mx)
            mx = xs[i];
    float gmax = mx;
    mlsys_step(c, 1, "all_reduce max");
    if (mlsys_allreduce(c, &gmax, &gmax, 1, MLSYS_F32, MLSYS_MAX) != MLSYS_OK)
        goto err;
    mlsys_step(c, 2, "local exp");
    double lsum = 0;
    for (long i = 0; i < len; i++) {
        p[i] = expf(xs[i] - gmax);
        lsum += p[i];
    }
    double gsum = lsum;
    mlsys_step(c, 3, "all_reduce sum");
    if (mlsys_allreduce(c, &gsum, &gsum, 1, MLSYS_F64, MLSYS_SUM) != MLSYS_OK)
        goto err;
    mlsys_step(c, 4, "divide");
    for (long i = 0; i < len; i++)
        p[i] = (float)(p[i] / gsum);
    if (mlsys_print_ordered(c, "Rank %d: elements [%ld, %ld), local max %.4f, local Σexp(x - "
                            "global max) %.6f\n", r, lo, lo + len, (double)mx, lsum))
        goto err;

    /* collect the shards on rank 0 (padded to equal length) to check against serial */
    if (r == 0)
        all = mlsys_xcalloc((size_t)pad * n, sizeof *all);
    if (mlsys_gather(c, p, all, (size_t)pad, MLSYS_F32, 0) != MLSYS_OK)
        goto err;
    if (r == 0) {
        ref = mlsys_xmalloc((size_t)total * sizeof *ref);
        double m = -INFINITY, s = 0, naive = 0, err = 0, psum = 0;
        for (long i = 0; i < total; i++)
            if (x[i] > m)
                m = x[i];
        for (long i = 0; i < total; i++) {
            ref[i] = exp((double)x[i] - m);
            s += ref[i];
            naive += expf(x[i]);
        }
        float *flat = mlsys_xmalloc((size_t)total * sizeof *flat);
        for (int q = 0; q < n; q++) {
            long qlo, qlen;
            shard(total, n, q, &qlo, &qlen);
            memcpy(flat + qlo, all + (size_t)q * pad, (size_t)qlen * sizeof *flat);
        }
        for (long i = 0; i < total; i++) {
            double d = fabs((double)flat[i] - ref[i] / s);
            if (d > err || isnan(d))
                err = isnan(d) ? INFINITY : d;
            psum += flat[i];
        }
        printf("\nGlobal max: %.4f\n", (double)gmax);
        printf("Global Σexp(x - global max): %.6f\n", gsum);
        char first[512];
        long k = total < 8 ? total : 8;
        printf("softmax[0..%ld] = %s\n", k - 1, common_list_prec(first, sizeof first, flat,
                                                                (size_t)k, 6));
        free(flat);
        printf("Max |distributed - serial| = %.3g\n", err);
        printf("Sum of the distributed softmax = %.9f\n", psum);
        printf("Checks: error < 1e-6: %s; sum within 1e-6 of 1: %s\n", err < 1e-6 ? "yes" : "NO",
               fabs(psum - 1.0) < 1e-6 ? "yes" : "NO");
        if (isinf(naive))
            printf("Without subtracting the max, exp(x) overflows float (max x = %.1f > 88.7):\n"
                   "the naive softmax would be inf/inf = NaN. The global max is what makes it "
                   "safe.\n", m);
        else
            printf("Here the naive exp(x) would still fit in a float (max x = %.1f); try "
                   "--offset 1000.\n", m);
        fflush(stdout);
        rc = err < 1e-6 && fabs(psum - 1.0) < 1e-6 ? 0 : 1;
    } else {
        rc = 0;
    }
    if (mlsys_barrier(c) != MLSYS_OK)
        goto err;
    goto out;
err:
    fprintf(stderr, "rank %d: %s\n", r, mlsys_errmsg(c));
    rc = 1;
out:
    free(x);
    free(p);
    free(all);
    free(ref);
    return rc;
}

const lab ch03_distributed_softmax_lab = {
    .id = "ch03/distributed-softmax",
    .title = "Distributed softmax",
    .summary = "softmax of a sharded vector from all_reduce MAX and SUM, checked against serial",
    .flags = sm_flags,
    .port = 29511,   /* not in the original (the script is missing there) */
    .min_ranks = 1,
    .max_ranks = 64,
    .before = sm_before,
    .rank_main = sm_rank,
    .view = "ring",
};
