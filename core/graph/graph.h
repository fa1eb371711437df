/* graph.h - a forward pass as a list of ops, run two ways: EAGERLY, op by op through a
 * generic interpreter that looks every op and tensor up by name, checks shapes and takes
 * buffers at every call (what a framework's dispatcher does before each kernel launch), and
 * as a CAPTURED PLAN, resolved once into function pointers with every buffer bound, then
 * replayed (what a CUDA graph does on a GPU: one launch for the whole sequence). On a GPU
 * the same two ways run in CUDA through a plugin (cuda_graph.cu, built by nvcc as
 * libmlsys-cudagraph.so and loaded with dlopen), so the lab starts where CUDA is absent.
 * Chapter 10's MLP: 512 -> 1024 -> ReLU -> 1024 -> 1024 -> ReLU -> 1024 -> 512. */
#ifndef MLSYS_GRAPH_H
#define MLSYS_GRAPH_H

#include <stddef.h>
#include <stdint.h>

#define GRAPH_MAX_OPS 16
#define GRAPH_MAX_PARAMS 16
#define GRAPH_MAX_LAYERS 8

/* ---- graph.c: the model as data, the interpreter, the plan ---- */
typedef struct graph_param {
    const char *name;         /* "fc1.weight" */
    int rows, cols;           /* a weight is [out, in]; a bias [1, out] */
    float *data;
} graph_param;

typedef struct graph_op {
    const char *kind;         /* "linear" or "relu": found in the kernel table by name */
    const char *in, *out;     /* tensor names ("x", "h1", ..., "y") */
    const char *weight, *bias;/* parameter names (linear only) */
} graph_op;

typedef struct graph_model {
    int n_ops, n_params;
    graph_op ops[GRAPH_MAX_OPS];
    graph_param params[GRAPH_MAX_PARAMS];
    int n_dims, dims[GRAPH_MAX_LAYERS + 1];   /* features in, hidden..., out */
    char names[GRAPH_MAX_OPS * 2][24];        /* storage for the generated names */
    float *mem;                               /* the parameters, one allocation */
} graph_model;

/* The MLP dims[0] -> dims[1] -> ReLU -> ... -> dims[n-1] (no ReLU after the last linear),
 * weights ~ N(0, 1/in) and biases ~ N(0, 0.01) from seed. n_dims in [2, GRAPH_MAX_LAYERS+1]. */
int graph_mlp_init(graph_model *m, const int *dims, int n_dims, uint64_t seed);
void graph_model_free(graph_model *m);
int graph_kernels_per_forward(const graph_model *m);   /* = n_ops */

/* The eager interpreter: each call resolves every op by name, checks shapes, takes its
 * output buffer from a small cache and returns the input's when nothing reads it any more.
 * x [batch, dims[0]] -> y [batch, dims[last]]. 0, or -1 with err (a bad shape or name). */
typedef struct graph_eager graph_eager;
graph_eager *graph_eager_create(void);
void graph_eager_free(graph_eager *e);
int graph_run_eager(graph_eager *e, const graph_model *m, int batch, const float *x, float *y,
                    char *err, size_t errlen);

/* The plan: capture() runs the interpreter's resolution once for one batch size, binds a
 * static input, every intermediate and a static output, and records (kernel, buffers, shapes)
 * per op. replay() copies x into the static input, runs the recorded ops, copies the static
 * output to y: no lookups, no checks, no allocation. A plan serves one batch size only. */
typedef struct graph_step {
    void (*fn)(const struct graph_step *s);
    const float *in, *w, *b;
    float *out;
    int rows, in_f, out_f;
} graph_step;
typedef struct graph_plan {
    int batch, n_steps, in_f, out_f;
    graph_step steps[GRAPH_MAX_OPS];
    float *static_in, *static_out;
    float *mem;
} graph_plan;
int graph_capture(graph_plan *p, const graph_model *m, int batch, char *err, size_t errlen);
void graph_replay(const graph_plan *p, const float *x, float *y);
void graph_plan_free(graph_plan *p);
/* The smallest captured size >= bs from sizes[0..n) (ascending), or -1: run eagerly. */
int graph_bucket(const int *sizes, int n, int bs);

/* ---- cuda_loader.c: the CUDA side, through the plugin ---- */
/* What the plugin runs: the same MLP on the GPU, `iterations` forwards eagerly (one launch
 * per op) and as one captured CUDA graph replayed after copying the input into its static
 * buffer; timed with CUDA events. */
typedef struct graph_cuda_opts {
    int batch, iterations, warmup;
    int n_dims, dims[GRAPH_MAX_LAYERS + 1];
    const float *w[GRAPH_MAX_LAYERS], *b[GRAPH_MAX_LAYERS];   /* host, [out, in] and [out] */
    const float *x;                                            /* host [batch, dims[0]] */
} graph_cuda_opts;
typedef struct graph_cuda_result {
    char device[256];
    int kernels;              /* launches per eager forward */
    double eager_ms, graph_ms, capture_ms;   /* totals over the iterations; capture once */
    double max_diff;          /* graph output against eager output */
    float *y_eager, *y_graph; /* caller's buffers [batch, dims[last]] */
} graph_cuda_result;
/* The plugin's one entry point (extern "C" in cuda_graph.cu). */
typedef int (*graph_cuda_fn)(const graph_cuda_opts *o, graph_cuda_result *r, char *err,
                             size_t errlen);
#define GRAPH_CUDA_SYMBOL "mlsys_cuda_graph_mlp"
#define GRAPH_CUDA_PLUGIN "libmlsys-cudagraph.so"
/* The plugin's path: MLSYS_CUDAGRAPH_PLUGIN, else next to the running program. */
const char *graph_cuda_plugin_path(char *buf, size_t n);
/* Load it: the entry point, or NULL with the reason ("not built: ...", dlerror). */
graph_cuda_fn graph_cuda_load(char *why, size_t n);

#endif
