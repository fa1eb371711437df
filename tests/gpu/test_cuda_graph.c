/* test_cuda_graph.c - GPU checks of chapter 10's CUDA-graph plugin (core/graph/cuda_graph.cu),
 * run by tests/gpu/run: for the chapter's MLP at batch 32 and 1 and an odd shape, the graph's
 * output equals the eager launches' (max |diff| < 1e-5) and both equal the CPU's forward to
 * float rounding; the timings are printed (eager and graph per iteration), never asserted.
 * Prints one line per case and "N passed, M failed". Usage: test_cuda_graph PLUGIN.so */
#include "../../core/graph/graph.h"
#include "../../core/mlsys.h"
#include "../../core/nn/nn.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int passed, failed;

static void check(int ok, const char *name, const char *fmt, double v)
{
    printf("%s %s: ", ok ? "ok  " : "FAIL", name);
    printf(fmt, v);
    printf("\n");
    ok ? passed++ : failed++;
}

static void one(graph_cuda_fn fn, const int *dims, int nd, int batch, int iters)
{
    char name[96], err[512];
    snprintf(name, sizeof name, "mlp %d-%d-...-%d batch %d", dims[0], dims[1], dims[nd - 1],
             batch);
    graph_model m;
    graph_mlp_init(&m, dims, nd, 42);
    size_t in_n = (size_t)batch * dims[0], out_n = (size_t)batch * dims[nd - 1];
    float *x = malloc(in_n * sizeof(float)), *ye = malloc(out_n * sizeof(float));
    float *yg = malloc(out_n * sizeof(float)), *yc = malloc(out_n * sizeof(float));
    mlsys_rng r;
    mlsys_rng_seed(&r, 43);
    for (size_t i = 0; i < in_n; i++)
        x[i] = (float)mlsys_rng_normal(&r);
    graph_cuda_opts o = {.batch = batch, .iterations = iters, .warmup = 10, .n_dims = nd, .x = x};
    memcpy(o.dims, dims, (size_t)nd * sizeof(int));
    for (int l = 0; l + 1 < nd; l++)
        o.w[l] = m.params[2 * l].data, o.b[l] = m.params[2 * l + 1].data;
    graph_cuda_result res = {.y_eager = ye, .y_graph = yg};
    if (fn(&o, &res, err, sizeof err)) {
        printf("FAIL %s: %s\n", name, err);
        failed++;
        goto out;
    }
    printf("     %s on %s: eager %.4f ms, graph %.4f ms per iteration (%.2fx), capture %.3f "
           "ms\n", name, res.device, res.eager_ms / iters, res.graph_ms / iters,
           res.graph_ms > 0 ? res.eager_ms / res.graph_ms : 0.0, res.capture_ms);
    check(res.max_diff < 1e-5, name, "graph against eager max |diff| %.2e", res.max_diff);
    nn_set_gemm_kernel(NN_GEMM_REF);
    graph_eager *e = graph_eager_create();
    graph_run_eager(e, &m, batch, x, yc, err, sizeof err);
    graph_eager_free(e);
    double worst = 0, scale = 0;
    for (size_t i = 0; i < out_n; i++) {
        worst = fmax(worst, fabs((double)yg[i] - yc[i]));
        scale = fmax(scale, fabs((double)yc[i]));
    }
    check(worst <= 1e-4 * (1 + scale), name, "graph against the CPU max |diff| %.2e", worst);
out:
    free(x), free(ye), free(yg), free(yc);
    graph_model_free(&m);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: test_cuda_graph PLUGIN.so\n");
        return 2;
    }
    setenv("MLSYS_CUDAGRAPH_PLUGIN", argv[1], 1);
    char why[512];
    graph_cuda_fn fn = graph_cuda_load(why, sizeof why);
    if (!fn) {
        printf("FAIL plugin loads: %s\n0 passed, 1 failed\n", why);
        return 1;
    }
    static const int mlp[4] = {512, 1024, 1024, 512}, odd[4] = {37, 100, 3, 9};
    one(fn, mlp, 4, 32, 1000);
    one(fn, mlp, 4, 1, 1000);
    one(fn, odd, 4, 5, 100);
    printf("cuda graph: %d passed, %d failed\n", passed, failed);
    return failed != 0;
}
