/* test_ch10.c - chapter 10's CUDA-graph lab and its engine (core/graph): the eager
 * interpreter and the captured plan equal bit for bit and equal to an independent forward in
 * double; bad names and shapes refused; the graph pool's bucket rule (the curriculum's table);
 * the plugin loader's reasons (not built, no device); the lab: the original's simulation
 * goldens, and without a GPU one line saying so before the labelled CPU analogue. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <unistd.h>
#include "../../core/graph/graph.h"
#include "../../core/mlsys.h"
#include "run_bin.h"

/* The MLP in double, written from its definition: linear, ReLU, ..., linear. */
static void reference(const graph_model *m, int batch, const float *x, double *y)
{
    int maxw = 0;
    for (int i = 0; i < m->n_dims; i++)
        maxw = m->dims[i] > maxw ? m->dims[i] : maxw;
    double *a = malloc((size_t)batch * maxw * sizeof(double));
    double *b = malloc((size_t)batch * maxw * sizeof(double));
    for (int i = 0; i < batch * m->dims[0]; i++)
        a[i] = x[i];
    for (int l = 0; l + 1 < m->n_dims; l++) {
        int in = m->dims[l], out = m->dims[l + 1];
        const float *W = m->params[2 * l].data, *B = m->params[2 * l + 1].data;
        for (int r = 0; r < batch; r++)
            for (int o = 0; o < out; o++) {
                double s = B[o];
                for (int i = 0; i < in; i++)
                    s += (double)W[(size_t)o * in + i] * a[(size_t)r * in + i];
                b[(size_t)r * out + o] = l + 2 < m->n_dims && s < 0 ? 0 : s;
            }
        double *t = a;
        a = b, b = t;
    }
    memcpy(y, a, (size_t)batch * m->dims[m->n_dims - 1] * sizeof(double));
    free(a), free(b);
}

START_TEST(eager_equals_plan_equals_reference)
{
    static const int shapes[][6] = {{4, 512, 1024, 1024, 512}, {3, 7, 13, 5},
                                    {2, 3, 1}, {5, 16, 9, 33, 8, 3}};
    static const int batches[] = {1, 3, 32};
    char err[256];
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        int nd = shapes[si][0];
        graph_model m;
        ck_assert(graph_mlp_init(&m, shapes[si] + 1, nd, 7 + si) == 0);
        ck_assert_int_eq(graph_kernels_per_forward(&m), 2 * (nd - 1) - 1);
        for (size_t bi = 0; bi < 3; bi++) {
            int B = batches[bi], in = m.dims[0], out = m.dims[nd - 1];
            float *x = malloc((size_t)B * in * sizeof(float));
            float *ye = malloc((size_t)B * out * sizeof(float));
            float *yp = malloc((size_t)B * out * sizeof(float));
            double *yr = malloc((size_t)B * out * sizeof(double));
            mlsys_rng r;
            mlsys_rng_seed(&r, 100 + bi);
            for (int i = 0; i < B * in; i++)
                x[i] = (float)mlsys_rng_normal(&r);
            graph_eager *e = graph_eager_create();
            graph_plan p;
            ck_assert_msg(graph_capture(&p, &m, B, err, sizeof err) == 0, "%s", err);
            for (int rep = 0; rep < 3; rep++) {     /* the eager buffer cache is reused */
                ck_assert_msg(graph_run_eager(e, &m, B, x, ye, err, sizeof err) == 0, "%s", err);
                graph_replay(&p, x, yp);
                ck_assert_msg(!memcmp(ye, yp, (size_t)B * out * sizeof(float)),
                              "shape %zu batch %d: eager and replay differ", si, B);
            }
            reference(&m, B, x, yr);
            double worst = 0, scale = 0;
            for (int i = 0; i < B * out; i++) {
                worst = fmax(worst, fabs(ye[i] - yr[i]));
                scale = fmax(scale, fabs(yr[i]));
            }
            ck_assert_msg(worst <= 1e-4 * (1 + scale), "shape %zu batch %d: %.3g from the "
                          "double forward", si, B, worst);
            graph_plan_free(&p);
            graph_eager_free(e);
            free(x), free(ye), free(yp), free(yr);
        }
        graph_model_free(&m);
    }
}
END_TEST

START_TEST(bad_models_refused)
{
    graph_model m;
    char err[256];
    int bad[3] = {4, 0, 4};
    ck_assert(graph_mlp_init(&m, bad, 3, 1) == -1);
    ck_assert(graph_mlp_init(&m, bad, 1, 1) == -1);
    int dims[3] = {4, 6, 2};
    ck_assert(graph_mlp_init(&m, dims, 3, 1) == 0);
    float x[8] = {0}, y[4];
    graph_eager *e = graph_eager_create();
    /* an op the kernel table does not have */
    m.ops[1].kind = "gelu";
    ck_assert(graph_run_eager(e, &m, 2, x, y, err, sizeof err) == -1);
    ck_assert(strstr(err, "gelu"));
    graph_plan p;
    ck_assert(graph_capture(&p, &m, 2, err, sizeof err) == -1);
    m.ops[1].kind = "relu";
    /* a weight that does not fit its input */
    m.params[2].cols = 5;
    ck_assert(graph_run_eager(e, &m, 2, x, y, err, sizeof err) == -1);
    ck_assert(strstr(err, "fc2.weight"));
    ck_assert(graph_capture(&p, &m, 2, err, sizeof err) == -1);
    m.params[2].cols = 6;
    /* a tensor nobody produced */
    m.ops[2].in = "h9";
    ck_assert(graph_run_eager(e, &m, 2, x, y, err, sizeof err) == -1);
    ck_assert(strstr(err, "h9"));
    graph_eager_free(e);
    graph_model_free(&m);
}
END_TEST

/* The curriculum's exercise 2: bucket(5) = 8, bucket(16) = 16, bucket(17) = fallback. */
START_TEST(bucket_rule)
{
    static const int pool[] = {1, 2, 4, 8, 16};
    static const int asked[][2] = {{1, 1}, {2, 2}, {3, 4}, {5, 8}, {8, 8}, {9, 16}, {16, 16},
                                   {17, -1}, {1000, -1}};
    for (size_t i = 0; i < sizeof asked / sizeof asked[0]; i++)
        ck_assert_int_eq(graph_bucket(pool, 5, asked[i][0]), asked[i][1]);
    ck_assert_int_eq(graph_bucket(pool, 0, 1), -1);
}
END_TEST

START_TEST(plugin_reasons)
{
    char why[512];
    setenv("MLSYS_CUDAGRAPH_PLUGIN", "/nonexistent/libmlsys-cudagraph.so", 1);
    ck_assert(graph_cuda_load(why, sizeof why) == NULL);
    ck_assert_msg(strstr(why, "not built"), "%s", why);
    /* the real plugin, when this build made one: it loads, and on a machine without a GPU
     * its entry point answers with a reason instead of crashing */
    char path[512];
    const char *b = bin();
    snprintf(path, sizeof path, "%.*s%s", (int)(strrchr(b, '/') ? strrchr(b, '/') - b + 1 : 0),
             b, "libmlsys-cudagraph.so");
    if (access(path, R_OK)) {
        printf("plugin: %s is not built in this build, skipped\n", path);
        return;
    }
    setenv("MLSYS_CUDAGRAPH_PLUGIN", path, 1);
    graph_cuda_fn fn = graph_cuda_load(why, sizeof why);
    ck_assert_msg(fn != NULL, "%s", why);
    graph_model m;
    int dims[3] = {8, 16, 4};
    ck_assert(graph_mlp_init(&m, dims, 3, 1) == 0);
    float x[16] = {0}, ye[8], yg[8];
    graph_cuda_opts o = {.batch = 2, .iterations = 3, .warmup = 1, .n_dims = 3, .x = x};
    memcpy(o.dims, dims, sizeof dims);
    o.w[0] = m.params[0].data, o.b[0] = m.params[1].data;
    o.w[1] = m.params[2].data, o.b[1] = m.params[3].data;
    graph_cuda_result r = {.y_eager = ye, .y_graph = yg};
    int rc = fn(&o, &r, why, sizeof why);
    if (rc != 0)
        printf("plugin without a GPU: %s\n", why);
    else
        ck_assert(r.max_diff < 1e-5);    /* a GPU after all: the outputs must agree */
    graph_model_free(&m);
}
END_TEST

START_TEST(lab_simulation_goldens)
{
    bin_result r = run_bin("run ch10/cuda-graph-simple --simulate");
    ck_assert_int_eq(r.status, 0);
    ck_assert(strstr(r.out, "SIMULATION"));
    ck_assert(strstr(r.out, "5 x 0.05 + 0.5 = 0.75 ms per iteration, 750.0 ms total"));
    ck_assert(strstr(r.out, "1 x 0.05 + 0.5 = 0.55 ms per iteration, 550.0 ms total"));
    ck_assert(strstr(r.out, "speedup 1.36x"));
    ck_assert(strstr(r.out, "0.25 ms -> 0.05 ms"));
    /* vLLM's capture sizes: 1, 2, 4, then multiples of 8 */
    ck_assert(strstr(r.out, "batch  5 -> graph  8 (padded)") &&
              strstr(r.out, "batch 13 -> graph 16 (padded)") &&
              strstr(r.out, "batch 17 -> graph 24 (padded)") && strstr(r.out, "33 -> eager"));
    ck_assert(strstr(r.out, "graph-safe generator"));
    bin_result_free(&r);
}
END_TEST

START_TEST(lab_cpu_analogue)
{
    char why[256];
    /* --force-cpu always; and the default path where this machine has no GPU */
    bin_result r = run_bin("run ch10/cuda-graph-simple --force-cpu --iterations 6");
    ck_assert_int_eq(r.status, 0);
    ck_assert(strstr(r.out, "CPU analogue"));
    ck_assert(strstr(r.out, "eager (interpreter, op by op)"));
    /* both sizes, outputs equal bit for bit */
    const char *p = r.out;
    int equal = 0;
    while ((p = strstr(p, "equal bit for bit")))
        equal++, p++;
    ck_assert_int_eq(equal, 2);
    ck_assert(!strstr(r.out, "NOT EQUAL"));
    /* each block: the saving, its spread over the repeats, and the verdict that spread
     * gives: within noise exactly when the repeats saw both a gain and a loss */
    p = r.out;
    for (int k = 0; k < 2; k++) {
        p = strstr(p, "eager (interpreter, op by op):");
        ck_assert(p != NULL);
        double e, g, save, lo, hi;
        int reps;
        ck_assert(sscanf(p, "eager (interpreter, op by op): %lf", &e) == 1);
        ck_assert(sscanf(strstr(p, "replayed:"), "replayed: %lf", &g) == 1);
        ck_assert(sscanf(strstr(p, "saving per forward:"), "saving per forward: %lf us, from "
                         "%lf to %lf in %d repeats", &save, &lo, &hi, &reps) == 4);
        ck_assert_int_eq(reps, 7);
        ck_assert_msg(lo <= save + 0.005 && save - 0.005 <= hi, "%g not in [%g, %g]", save, lo, hi);
        ck_assert(fabs(save - (e - g)) <= 0.011);
        const char *next = strstr(p + 1, "eager (interpreter, op by op):");
        const char *noise = strstr(p, "within noise:"), *real = strstr(p, "a real ");
        int is_noise = noise && (!next || noise < next), is_real = real && (!next || real < next);
        ck_assert_msg(is_noise != is_real, "one verdict per block");
        if (lo < -0.005 && hi > 0.005)
            ck_assert_msg(is_noise, "[%g, %g] crosses 0 but is called real", lo, hi);
        if (lo > 0.005 || hi < -0.005)
            ck_assert_msg(is_real, "[%g, %g] on one side of 0 but called noise", lo, hi);
        p++;
    }
    bin_result_free(&r);
    r = run_bin("run ch10/cuda-graph-simple --force-cpu --iterations 6 --repeats 1");
    ck_assert_int_eq(r.status, 2);      /* one repeat has no spread */
    bin_result_free(&r);
    int fd = open("/dev/nvidiactl", O_RDONLY);
    if (fd >= 0) {
        close(fd);
        printf("lab: a GPU driver is here; the no-GPU line is not checked\n");
        return;
    }
    (void)why;
    r = run_bin("run ch10/cuda-graph-simple --iterations 3");
    ck_assert_int_eq(r.status, 0);
    /* the first line after the banner says why, then the analogue, labelled */
    const char *no = strstr(r.out, "No GPU here (");
    ck_assert_msg(no, "%s", r.out);
    ck_assert(strstr(no, "running the CPU analogue instead, not CUDA."));
    ck_assert(strstr(no, "):\nrunning"));      /* the reason, then the line, nothing between */
    ck_assert(strstr(no, "CPU analogue of a CUDA graph") > no);
    ck_assert(strstr(r.out, "The original's simulation"));
    bin_result_free(&r);
    r = run_bin("run ch10/cuda-graph-simple --batch 0");
    ck_assert_int_eq(r.status, 2);
    bin_result_free(&r);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("ch10");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, eager_equals_plan_equals_reference);
    tcase_add_test(tc, bad_models_refused);
    tcase_add_test(tc, bucket_rule);
    tcase_add_test(tc, plugin_reasons);
    tcase_add_test(tc, lab_simulation_goldens);
    tcase_add_test(tc, lab_cpu_analogue);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed != 0;
}
