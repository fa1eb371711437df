/* cuda_graph_simple.c - ch10/cuda-graph-simple: the same MLP forward launched op by op and as
 * one captured graph, timed per step, outputs compared. On a GPU it runs in CUDA through the
 * plugin (core/graph/cuda_graph.cu: eager kernel launches against a CUDA graph replayed).
 * Without one it says so in one line and runs the CPU analogue (core/graph/graph.c: a generic
 * interpreter dispatching op by op against a plan captured once with its buffers bound),
 * labelled as an analogue, and measured in repeats: the saving is printed with its spread
 * over them, and a saving whose sign changes from repeat to repeat is called noise.
 * --simulate prints the original script's arithmetic. */
#include "../common/common.h"
#include "../../core/graph/graph.h"
#include "../../core/nn/nn.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define LAB_ID "ch10/cuda-graph-simple"

static const lab_flag graph_flags[] = {
    {"force-cpu", 0, FLAG_BOOL, NULL, NULL, 0, 0, "skip the GPU even when there is one"},
    {"simulate", 0, FLAG_BOOL, NULL, NULL, 0, 0, "the original's simulation only (its "
     "assumed launch and compute times)"},
    {"iterations", 0, FLAG_INT, "200", NULL, 1, 10000000, "forwards timed per mode (the small "
     "CPU model: 200 times as many)"},
    {"repeats", 0, FLAG_INT, "7", NULL, 2, 1000, "CPU analogue: the forwards are timed in this "
     "many interleaved repeats, for the saving's spread"},
    {"batch", 0, FLAG_INT, "32", NULL, 1, 4096, "rows of the input"},
    {"seed", 0, FLAG_INT, "42", NULL, 0, 1L << 40, "seed of the weights and the input"},
    {NULL, 0, 0, NULL, NULL, 0, 0, NULL}
};

static const int mlp_dims[4] = {512, 1024, 1024, 512};

/* The original's simulation: launch 0.05 ms per kernel, 5 kernels, 0.5 ms of compute. */
#define SIM_LAUNCH_MS 0.05
#define SIM_KERNELS 5
#define SIM_COMPUTE_MS 0.5
#define SIM_ITERS 1000

static void print_simulation(void)
{
    double eager = SIM_KERNELS * SIM_LAUNCH_MS + SIM_COMPUTE_MS;
    double graph = 1 * SIM_LAUNCH_MS + SIM_COMPUTE_MS;
    printf("SIMULATION (the original's assumptions, not a measurement):\n"
           "  launch overhead %.2f ms per kernel, %d kernels per forward,\n"
           "  compute %.1f ms per forward, %d iterations\n", SIM_LAUNCH_MS, SIM_KERNELS,
           SIM_COMPUTE_MS, SIM_ITERS);
    printf("  eager: %d x %.2f + %.1f = %.2f ms per iteration, %.1f ms total\n", SIM_KERNELS,
           SIM_LAUNCH_MS, SIM_COMPUTE_MS, eager, eager * SIM_ITERS);
    printf("  graph: 1 x %.2f + %.1f = %.2f ms per iteration, %.1f ms total\n", SIM_LAUNCH_MS,
           SIM_COMPUTE_MS, graph, graph * SIM_ITERS);
    printf("  speedup %.2fx; launch overhead per iteration %.2f ms -> %.2f ms\n", eager / graph,
           SIM_KERNELS * SIM_LAUNCH_MS, SIM_LAUNCH_MS);
}

static void print_constraints(void)
{
    printf("\nWhat a graph needs: fixed shapes, buffers allocated before capture,\n"
           "control flow that does not depend on the data, and random numbers from a\n"
           "graph-safe generator (each replay moves its counter on: fresh dropout).\n"
           "What breaks it: dynamic shapes, CPU-GPU synchronisation inside, allocation\n"
           "during the run. Decoding fits (one token per sequence, the same shapes every\n"
           "step); prefill's attention does not (its shapes follow the prompts): vLLM\n"
           "replays graphs of the pieces between attention layers and runs attention\n"
           "eagerly.\n");
}

static void print_batch_sizes(void)
{
    static const int pool[] = {1, 2, 4, 8, 16, 24, 32};
    printf("\nSeveral batch sizes: one graph per size, captured ahead (here 1 2 4 8 16 24\n"
           "32: vLLM's 1, 2, 4, then multiples of 8; more graphs cost memory and start-up).\n"
           "A batch runs in the smallest graph that holds it, padded:\n");
    static const int asked[] = {1, 3, 5, 8, 13, 16, 17, 33};
    for (size_t i = 0; i < sizeof asked / sizeof asked[0]; i++) {
        int b = graph_bucket(pool, 7, asked[i]);
        if (b < 0)
            printf("  batch %2d -> eager (above the largest graph)\n", asked[i]);
        else
            printf("  batch %2d -> graph %2d%s\n", asked[i], b, b > asked[i] ? " (padded)" : "");
    }
}

static void fill(float *x, size_t n, mlsys_rng *r)
{
    for (size_t i = 0; i < n; i++)
        x[i] = (float)mlsys_rng_normal(r);
}

static double max_abs_diff(const float *a, const float *b, size_t n)
{
    double m = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (d > m || d != d)
            m = d;
    }
    return m;
}

/* Per forward, in ms of CPU time: the means over every repeat, and the saving (eager - plan)
 * of each repeat at its least and most; faster: repeats where the plan won. */
typedef struct cpu_result {
    double eager_ms, plan_ms, save_min, save_max, diff;
    int repeats, per_repeat, faster, ok;
} cpu_result;

/* This thread's CPU time: dispatch work is CPU work, and on a shared machine wall time also
 * counts the time other processes held the core. */
static double thread_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* iters forwards each way, in `repeats` repeats that alternate which side goes first (a
 * shared machine's load and a drifting clock then fall on both alike). Within a repeat each
 * side runs in twenty chunks and keeps its fastest: a chunk that another process
 * interrupted (its caches to refill) is slower, never faster. Each repeat gives one paired
 * saving, and their spread says how much of the difference is noise. */
static int cpu_measure(const int *dims, int n_dims, int batch, int iters, int repeats,
                       uint64_t seed, cpu_result *res, char *err, size_t n)
{
    graph_model m;
    graph_plan p;
    memset(res, 0, sizeof *res);
    if (graph_mlp_init(&m, dims, n_dims, seed)) {
        snprintf(err, n, "bad MLP shape");
        return -1;
    }
    if (graph_capture(&p, &m, batch, err, n)) {
        graph_model_free(&m);
        return -1;
    }
    size_t in_n = (size_t)batch * dims[0], out_n = (size_t)batch * dims[n_dims - 1];
    float *x = mlsys_xmalloc(in_n * sizeof(float));
    float *ye = mlsys_xmalloc(out_n * sizeof(float)), *yp = mlsys_xmalloc(out_n * sizeof(float));
    mlsys_rng r;
    mlsys_rng_seed(&r, seed + 1);
    fill(x, in_n, &r);
    graph_eager *e = graph_eager_create();
    int rc = -1;
    for (int w = 0; w < 3; w++) {               /* warm-up: caches, the buffer cache */
        if (graph_run_eager(e, &m, batch, x, ye, err, n))
            goto out;
        graph_replay(&p, x, yp);
    }
    int it = iters / repeats > 0 ? iters / repeats : 1;
    int chunks = it >= 20 ? 20 : it, per_chunk = it / chunks;
    res->repeats = repeats;
    res->per_repeat = chunks * per_chunk;
    for (int k = 0; k < repeats; k++) {
        double te = 0, tp = 0;
        for (int side = 0; side < 2; side++) {
            int eager = (side == 0) == (k % 2 == 0);
            double best = 0;
            for (int ch = 0; ch < chunks; ch++) {
                double t0 = thread_s();
                for (int i = 0; i < per_chunk; i++) {
                    if (!eager)
                        graph_replay(&p, x, yp);
                    else if (graph_run_eager(e, &m, batch, x, ye, err, n))
                        goto out;
                }
                double t = 1e3 * (thread_s() - t0) / per_chunk;
                best = ch == 0 || t < best ? t : best;
            }
            *(eager ? &te : &tp) = best;
        }
        double save = te - tp;
        res->save_min = k == 0 || save < res->save_min ? save : res->save_min;
        res->save_max = k == 0 || save > res->save_max ? save : res->save_max;
        res->faster += save > 0;
        res->eager_ms += te / repeats;
        res->plan_ms += tp / repeats;
    }
    res->diff = max_abs_diff(ye, yp, out_n);
    res->ok = 1;
    rc = 0;
out:
    graph_eager_free(e);
    free(x), free(ye), free(yp);
    graph_plan_free(&p);
    graph_model_free(&m);
    return rc;
}

/* Is the saving noise? When some repeats saw the plan win and others lose, the difference
 * is smaller than the run's own jitter: its sign is not known. */
static int within_noise(const cpu_result *c)
{
    return c->save_min <= 0.0 && c->save_max >= 0.0;
}

static void print_cpu(const char *what, const cpu_result *c, int kernels)
{
    double e = c->eager_ms, g = c->plan_ms;
    printf("%s\n", what);
    printf("  eager (interpreter, op by op): %9.2f us per forward (CPU time, mean)\n", 1e3 * e);
    printf("  captured plan, replayed:       %9.2f us per forward\n", 1e3 * g);
    printf("  saving per forward:            %9.2f us, from %.2f to %.2f in %d repeats\n",
           1e3 * (e - g), 1e3 * c->save_min, 1e3 * c->save_max, c->repeats);
    if (within_noise(c))
        printf("  within noise: the plan was faster in %d repeat%s and slower in %d; what it\n"
               "  removes is smaller than this forward's jitter from repeat to repeat\n",
               c->faster, c->faster == 1 ? "" : "s", c->repeats - c->faster);
    else
        printf("  a real %s: the plan was %s in all %d repeats\n", e > g ? "saving" : "loss",
               e > g ? "faster" : "slower", c->repeats);
    printf("  speed-up %.2fx; per op %.3f us (%.1f%% of the eager step)\n", g > 0 ? e / g : 0.0,
           1e3 * (e - g) / kernels, e > 0 ? 100.0 * (e - g) / e : 0.0);
    printf("  outputs: max |diff| %.2e (%s)\n", c->diff, c->diff == 0.0 ? "equal bit for bit"
           : "NOT EQUAL");
}

static int run_cpu(const lab_args *a, const char *why)
{
    int iters = (int)lab_arg_int(a, "iterations"), batch = (int)lab_arg_int(a, "batch");
    int repeats = (int)lab_arg_int(a, "repeats");
    uint64_t seed = (uint64_t)lab_arg_int(a, "seed");
    char err[256];
    if (why)
        printf("No GPU here (%s):\nrunning the CPU analogue instead, not CUDA.\n\n", why);
    else
        printf("--force-cpu: running the CPU analogue instead of CUDA.\n\n");
    common_banner(stdout, 70, "CPU analogue of a CUDA graph");
    printf("What stands for what: a kernel launch is one op dispatched by a generic\n"
           "interpreter (find the kernel by name, the tensors by name, check shapes,\n"
           "take an output buffer, release the input's); the graph is a plan captured\n"
           "once (kernels resolved to function pointers, every buffer bound) and\n"
           "replayed in one call after copying the input into its static buffer.\n"
           "Kernels: GEMM (%s) + bias, ReLU.\n\n", nn_gemm_kernel_name(nn_get_gemm_kernel()));
    cpu_result c;
    char what[160];
    if (cpu_measure(mlp_dims, 4, batch, iters, repeats, seed, &c, err, sizeof err))
        goto fail;
    snprintf(what, sizeof what, "MLP 512 -> 1024 -> ReLU -> 1024 -> 1024 -> ReLU -> 1024 -> 512\n"
             "batch %d, 5 ops; %d repeats of %d forwards each way, interleaved:", batch, repeats,
             c.per_repeat);
    print_cpu(what, &c, 5);
    static const int small[4] = {32, 64, 64, 32};
    if (cpu_measure(small, 4, 1, iters * 200, repeats, seed, &c, err, sizeof err))
        goto fail;
    snprintf(what, sizeof what, "\nThe same 5 ops at 1/16 of the width, batch 1 (tiny work per "
             "op);\n%d repeats of %d forwards each way:", repeats, c.per_repeat);
    print_cpu(what, &c, 5);
    printf("\nHere dispatch is a few C lookups, tens of nanoseconds per op: the plan\n"
           "saves only that, which shows where the arithmetic is tiny and drowns in\n"
           "the noise where it is not. A framework's Python dispatcher costs\n"
           "microseconds per op, and on a GPU every launch adds driver and queue time\n"
           "while the device may sit idle: that is the cost a CUDA graph removes.\n\n");
    common_banner(stdout, 70, "The original's simulation");
    print_simulation();
    return 0;
fail:
    fprintf(stderr, "mlsys-lab: %s: %s\n", LAB_ID, err);
    return 1;
}

static int run_gpu(const lab_args *a, graph_cuda_fn fn)
{
    int iters = (int)lab_arg_int(a, "iterations"), batch = (int)lab_arg_int(a, "batch");
    uint64_t seed = (uint64_t)lab_arg_int(a, "seed");
    graph_model m;
    graph_mlp_init(&m, mlp_dims, 4, seed);
    size_t in_n = (size_t)batch * mlp_dims[0], out_n = (size_t)batch * mlp_dims[3];
    float *x = mlsys_xmalloc(in_n * sizeof(float));
    float *ye = mlsys_xmalloc(out_n * sizeof(float)), *yg = mlsys_xmalloc(out_n * sizeof(float));
    float *yc = mlsys_xmalloc(out_n * sizeof(float));
    mlsys_rng r;
    mlsys_rng_seed(&r, seed + 1);
    fill(x, in_n, &r);
    graph_cuda_opts o = {.batch = batch, .iterations = iters, .warmup = 10, .n_dims = 4, .x = x};
    memcpy(o.dims, mlp_dims, sizeof mlp_dims);
    for (int l = 0; l < 3; l++) {
        o.w[l] = m.params[2 * l].data;
        o.b[l] = m.params[2 * l + 1].data;
    }
    graph_cuda_result res = {.y_eager = ye, .y_graph = yg};
    char err[512];
    int rc = 1;
    if (fn(&o, &res, err, sizeof err)) {
        fprintf(stderr, "mlsys-lab: %s: CUDA: %s\n", LAB_ID, err);
        goto out;
    }
    /* the CPU's answer for the same weights: a check of the kernels themselves */
    graph_eager *e = graph_eager_create();
    if (graph_run_eager(e, &m, batch, x, yc, err, sizeof err) == 0) {
        double e_ms = res.eager_ms / iters, g_ms = res.graph_ms / iters;
        printf("device: %s\n\n", res.device);
        printf("Eager: %d launches per forward, %d forwards\n  total %.2f ms, %.3f ms per "
               "iteration\n", res.kernels, iters, res.eager_ms, e_ms);
        printf("Graph: captured in %.3f ms: copy input -> Linear -> ReLU -> Linear -> ReLU -> "
               "Linear\n  total %.2f ms, %.3f ms per iteration (one launch each)\n",
               res.capture_ms, res.graph_ms, g_ms);
        printf("Comparison: eager %.3f ms, graph %.3f ms per iteration: speedup %.2fx, "
               "overhead saved %.4f ms per iteration\n", e_ms, g_ms, g_ms > 0 ? e_ms / g_ms : 0,
               (res.eager_ms - res.graph_ms) / iters);
        printf("Correctness: graph against eager max |diff| %.2e (%s 1e-5); against the CPU's "
               "GEMM %.2e (another summation order)\n", res.max_diff,
               res.max_diff < 1e-5 ? "<" : "NOT <", max_abs_diff(yg, yc, out_n));
        rc = res.max_diff < 1e-5 ? 0 : 1;
    } else {
        fprintf(stderr, "mlsys-lab: %s: %s\n", LAB_ID, err);
    }
    graph_eager_free(e);
out:
    free(x), free(ye), free(yg), free(yc);
    graph_model_free(&m);
    return rc;
}

static int graph_main(const lab_args *a)
{
    common_box(stdout, 68, "CUDA graphs: eager launches against one replay");
    printf("\n");
    int rc;
    if (lab_arg_bool(a, "simulate")) {
        print_simulation();
        rc = 0;
    } else if (lab_arg_bool(a, "force-cpu")) {
        rc = run_cpu(a, NULL);
    } else {
        char why[512];
        int gpus = probe_gpu_count(why, sizeof why);
        graph_cuda_fn fn = NULL;
        if (gpus > 0 && !(fn = graph_cuda_load(why, sizeof why)))
            gpus = 0;
        rc = gpus > 0 ? run_gpu(a, fn) : run_cpu(a, why);
    }
    print_constraints();
    print_batch_sizes();
    fflush(stdout);
    return rc;
}

const lab ch10_cuda_graph_simple_lab = {
    .id = LAB_ID,
    .title = "CUDA graphs",
    .summary = "an MLP launched op by op against one captured graph replayed (CUDA on a GPU, "
               "a labelled CPU analogue without one)",
    .flags = graph_flags,
    .main = graph_main,
    .view = "log",
};
