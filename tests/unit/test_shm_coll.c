/* test_shm_coll.c - the shared-memory all-reduce (shm_direct) on buffers in the ranks'
 * heaps, where it really reads its peers' memory: every type and operator, in place and out
 * of place, counts around the slice boundaries and one past the streaming threshold, against
 * a serial reference; and the fall-back to the ring when one rank's buffer is not in its
 * heap (all ranks must agree, or the job deadlocks). Large counts use integer-valued data so
 * that the order of additions cannot hide a wrong result. */
#include "../../core/mlsys.h"
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct scenario {
    size_t count;
    int inplace;
    int one_rank_malloc;     /* rank 1 uses malloc: everybody must fall back */
} scenario;

static double input(int rank, size_t i, mlsys_dtype dt, mlsys_op op)
{
    if (op == MLSYS_PROD)
        return (double)((rank + (int)i) % 3 + 1) * ((i + (size_t)rank) % 5 == 0 ? -1 : 1);
    double v = (double)((int)(i % 97) - 40 + rank * 7);
    return dt == MLSYS_I32 || dt == MLSYS_I64 ? v : v * 0.5;
}

static void store(void *buf, size_t i, mlsys_dtype dt, double v)
{
    switch (dt) {
    case MLSYS_F32: ((float *)buf)[i] = (float)v; break;
    case MLSYS_F64: ((double *)buf)[i] = v; break;
    case MLSYS_I32: ((int32_t *)buf)[i] = (int32_t)v; break;
    default: ((int64_t *)buf)[i] = (int64_t)v; break;
    }
}

static double load(const void *buf, size_t i, mlsys_dtype dt)
{
    switch (dt) {
    case MLSYS_F32: return ((const float *)buf)[i];
    case MLSYS_F64: return ((const double *)buf)[i];
    case MLSYS_I32: return ((const int32_t *)buf)[i];
    default: return (double)((const int64_t *)buf)[i];
    }
}

static double expected(int n, size_t i, mlsys_dtype dt, mlsys_op op)
{
    double acc = input(0, i, dt, op);
    for (int r = 1; r < n; r++) {
        double v = input(r, i, dt, op);
        switch (op) {
        case MLSYS_PROD: acc *= v; break;
        case MLSYS_MIN: acc = v < acc ? v : acc; break;
        case MLSYS_MAX: acc = v > acc ? v : acc; break;
        default: acc += v; break;
        }
    }
    if (op == MLSYS_AVG)
        acc = dt == MLSYS_I32 || dt == MLSYS_I64 ? (double)((int64_t)acc / n) : acc / n;
    return acc;
}

static int run(mlsys_comm *c, void *arg)
{
    const scenario *s = arg;
    int r = mlsys_rank(c), n = mlsys_size(c);
    for (int dt = 0; dt < MLSYS_DTYPE_COUNT; dt++) {
        size_t es = mlsys_dtype_size((mlsys_dtype)dt), bytes = s->count * es + es;
        int use_malloc = s->one_rank_malloc && r == 1;
        for (int op = 0; op < MLSYS_OP_COUNT; op++) {
            if (s->count > 100000 && op != MLSYS_SUM && op != MLSYS_MAX)
                continue;            /* keep the large case quick */
            void *in = use_malloc ? malloc(bytes) : mlsys_alloc_aligned(bytes);
            void *out = s->inplace ? in : use_malloc ? malloc(bytes) : mlsys_alloc_aligned(bytes);
            for (size_t i = 0; i < s->count; i++)
                store(in, i, (mlsys_dtype)dt, input(r, i, (mlsys_dtype)dt, (mlsys_op)op));
            mlsys_set_algo(c, MLSYS_COLL_ALLREDUCE, "shm_direct");
            int rc = mlsys_allreduce(c, in, out, s->count, (mlsys_dtype)dt, (mlsys_op)op);
            if (rc) {
                fprintf(stderr, "rank %d: %s\n", r, mlsys_errmsg(c));
                return 1;
            }
            for (size_t i = 0; i < s->count; i++) {
                double want = expected(n, i, (mlsys_dtype)dt, (mlsys_op)op);
                double got = load(out, i, (mlsys_dtype)dt);
                double tol = dt == MLSYS_F32 ? 1e-3 * (1 + (want < 0 ? -want : want)) : 1e-9;
                if (got - want > tol || want - got > tol) {
                    fprintf(stderr, "rank %d, %s %s, count %zu, element %zu: expected %g, got %g\n",
                            r, mlsys_dtype_name((mlsys_dtype)dt), mlsys_op_name((mlsys_op)op),
                            s->count, i, want, got);
                    return 1;
                }
            }
            if (use_malloc) {
                free(in);
                if (!s->inplace)
                    free(out);
            } else {
                mlsys_free_aligned(in, bytes);
                if (!s->inplace)
                    mlsys_free_aligned(out, bytes);
            }
        }
    }
    return 0;
}

START_TEST(test_shm_direct_matches_reference)
{
    static const size_t counts[] = {0, 1, 5, 7, 13, 4099};
    char why[512];
    for (int n = 1; n <= 6; n++)
        for (size_t k = 0; k < sizeof counts / sizeof counts[0]; k++)
            for (int inplace = 0; inplace < 2; inplace++) {
                scenario s = {counts[k], inplace, 0};
                ck_assert_msg(mlsys_run_fn(n, 20000, run, &s, why, sizeof why) == 0,
                              "N=%d count=%zu inplace=%d: %s", n, counts[k], inplace, why);
            }
}
END_TEST

START_TEST(test_shm_direct_large_streams)
{
    char why[512];
    for (int n = 2; n <= 4; n++)
        for (int inplace = 0; inplace < 2; inplace++) {
            scenario s = {(5u << 20) / 4 * 4 + 3, inplace, 0};   /* > 4 MiB per rank slice at N=2 */
            ck_assert_msg(mlsys_run_fn(n, 60000, run, &s, why, sizeof why) == 0,
                          "N=%d inplace=%d: %s", n, inplace, why);
        }
}
END_TEST

START_TEST(test_falls_back_together)
{
    char why[512];
    for (int n = 2; n <= 4; n++) {
        scenario s = {1000, 0, 1};
        ck_assert_msg(mlsys_run_fn(n, 20000, run, &s, why, sizeof why) == 0, "N=%d: %s", n, why);
    }
}
END_TEST

static int which_ran(mlsys_comm *c, void *arg)
{
    (void)arg;
    size_t n = 4096;
    float *heap = mlsys_alloc_aligned(n * 4), *plain = malloc(n * 4);
    memset(plain, 0, n * 4);
    mlsys_set_algo(c, MLSYS_COLL_ALLREDUCE, "shm_direct");
    if (mlsys_allreduce(c, heap, heap, n, MLSYS_F32, MLSYS_SUM) ||
        strcmp(mlsys_last_algo(c), "shm_direct"))
        return 1;
    /* auto: 4 MiB and more picks shm_direct */
    mlsys_set_algo(c, MLSYS_COLL_ALLREDUCE, NULL);
    const char *why;
    if (strcmp(mlsys_algo_decide(c, MLSYS_COLL_ALLREDUCE, 4u << 20, &why), "shm_direct"))
        return 2;
    if (strcmp(mlsys_algo_decide(c, MLSYS_COLL_ALLREDUCE, 1u << 20, &why), "ring"))
        return 3;
    free(plain);
    return 0;
}

START_TEST(test_rule_and_name)
{
    char why[512];
    ck_assert_msg(mlsys_run_fn(3, 20000, which_ran, NULL, why, sizeof why) == 0, "%s", why);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("shm_coll");
    TCase *t = tcase_create("shm_direct");
    tcase_set_timeout(t, 120);
    tcase_add_test(t, test_shm_direct_matches_reference);
    tcase_add_test(t, test_shm_direct_large_streams);
    tcase_add_test(t, test_falls_back_together);
    tcase_add_test(t, test_rule_and_name);
    suite_add_tcase(s, t);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
