/* cuda_graph.cu - chapter 10 on a GPU, built by nvcc into libmlsys-cudagraph.so and loaded
 * with dlopen (cuda_loader.c): the MLP of graph.h in CUDA, run `iterations` times eagerly
 * (one kernel launch per op, as a framework issues them) and as one CUDA graph captured from
 * a stream and replayed (one launch for the whole forward), each timed with CUDA events; the
 * two outputs are compared. Kernels: a tiled SGEMM with the bias fused, and ReLU. */
#include "graph.h"

#include <cuda_runtime.h>
#include <stdio.h>
#include <string.h>

#define TILE 16

/* y[r, o] = sum_i x[r, i] · w[o, i] + b[o]: each block computes a TILE x TILE tile of y,
 * walking the inner dimension a tile at a time through shared memory. */
__global__ void linear_kernel(const float *x, const float *w, const float *b, float *y,
                              int rows, int in_f, int out_f)
{
    __shared__ float xs[TILE][TILE + 1], ws[TILE][TILE + 1];
    int r = blockIdx.y * TILE + threadIdx.y;      /* row of y */
    int o = blockIdx.x * TILE + threadIdx.x;      /* column of y */
    float acc = 0.0f;
    for (int t = 0; t < in_f; t += TILE) {
        int xi = t + threadIdx.x, wi = t + threadIdx.y;
        xs[threadIdx.y][threadIdx.x] = r < rows && xi < in_f ? x[(size_t)r * in_f + xi] : 0.0f;
        int wo = blockIdx.x * TILE + threadIdx.x;
        ws[threadIdx.y][threadIdx.x] = wo < out_f && wi < in_f ? w[(size_t)wo * in_f + wi] : 0.0f;
        __syncthreads();
        for (int k = 0; k < TILE; k++)
            acc += xs[threadIdx.y][k] * ws[k][threadIdx.x];
        __syncthreads();
    }
    if (r < rows && o < out_f)
        y[(size_t)r * out_f + o] = acc + b[o];
}

__global__ void relu_kernel(const float *x, float *y, size_t n)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

typedef struct dev_mlp {
    int batch, layers;
    int dims[GRAPH_MAX_LAYERS + 1];
    float *w[GRAPH_MAX_LAYERS], *b[GRAPH_MAX_LAYERS];
    float *x;                          /* static input */
    float *h[2 * GRAPH_MAX_LAYERS];    /* each op's output; the last is the output */
    int n_ops;
} dev_mlp;

/* One forward: a launch per op, in order, on stream s. */
static void forward(const dev_mlp *m, cudaStream_t s)
{
    const float *cur = m->x;
    int op = 0;
    for (int l = 0; l < m->layers; l++) {
        int in = m->dims[l], out = m->dims[l + 1];
        dim3 block(TILE, TILE), grid((out + TILE - 1) / TILE, (m->batch + TILE - 1) / TILE);
        linear_kernel<<<grid, block, 0, s>>>(cur, m->w[l], m->b[l], m->h[op], m->batch, in, out);
        cur = m->h[op++];
        if (l + 1 < m->layers) {
            size_t n = (size_t)m->batch * out;
            relu_kernel<<<(unsigned)((n + 255) / 256), 256, 0, s>>>(cur, m->h[op], n);
            cur = m->h[op++];
        }
    }
}

#define CK(call)                                                                          \
    do {                                                                                  \
        cudaError_t e_ = (call);                                                          \
        if (e_ != cudaSuccess) {                                                          \
            snprintf(err, errlen, "%s: %s", #call, cudaGetErrorString(e_));               \
            goto out;                                                                     \
        }                                                                                 \
    } while (0)

extern "C" int mlsys_cuda_graph_mlp(const graph_cuda_opts *o, graph_cuda_result *r, char *err,
                                    size_t errlen)
{
    int rc = -1, count = 0;
    dev_mlp m;
    memset(&m, 0, sizeof m);
    cudaStream_t s = NULL;
    cudaGraph_t graph = NULL;
    cudaGraphExec_t exec = NULL;
    cudaEvent_t e0 = NULL, e1 = NULL;
    float *dx = NULL, ms = 0.0f;
    size_t out_n = 0, in_n = 0;
    cudaDeviceProp prop;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count < 1) {
        snprintf(err, errlen, "no CUDA device");
        return -1;
    }
    CK(cudaSetDevice(0));
    CK(cudaGetDeviceProperties(&prop, 0));
    snprintf(r->device, sizeof r->device, "%s", prop.name);
    m.batch = o->batch;
    m.layers = o->n_dims - 1;
    memcpy(m.dims, o->dims, sizeof m.dims);
    in_n = (size_t)o->batch * o->dims[0];
    out_n = (size_t)o->batch * o->dims[o->n_dims - 1];
    for (int l = 0; l < m.layers; l++) {
        size_t wn = (size_t)o->dims[l + 1] * o->dims[l];
        CK(cudaMalloc(&m.w[l], wn * sizeof(float)));
        CK(cudaMalloc(&m.b[l], (size_t)o->dims[l + 1] * sizeof(float)));
        CK(cudaMemcpy(m.w[l], o->w[l], wn * sizeof(float), cudaMemcpyHostToDevice));
        CK(cudaMemcpy(m.b[l], o->b[l], (size_t)o->dims[l + 1] * sizeof(float),
                      cudaMemcpyHostToDevice));
        int ops = l + 1 < m.layers ? 2 : 1;
        for (int k = 0; k < ops; k++)
            CK(cudaMalloc(&m.h[m.n_ops++], (size_t)o->batch * o->dims[l + 1] * sizeof(float)));
    }
    r->kernels = m.n_ops;
    CK(cudaMalloc(&m.x, in_n * sizeof(float)));
    CK(cudaMalloc(&dx, in_n * sizeof(float)));       /* "the real input", copied in per step */
    CK(cudaMemcpy(dx, o->x, in_n * sizeof(float), cudaMemcpyHostToDevice));
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));

    /* eager: warm up, then time the launches one by one */
    CK(cudaMemcpyAsync(m.x, dx, in_n * sizeof(float), cudaMemcpyDeviceToDevice, s));
    for (int i = 0; i < o->warmup; i++)
        forward(&m, s);
    CK(cudaStreamSynchronize(s));
    CK(cudaEventRecord(e0, s));
    for (int i = 0; i < o->iterations; i++) {
        CK(cudaMemcpyAsync(m.x, dx, in_n * sizeof(float), cudaMemcpyDeviceToDevice, s));
        forward(&m, s);
    }
    CK(cudaEventRecord(e1, s));
    CK(cudaEventSynchronize(e1));
    CK(cudaEventElapsedTime(&ms, e0, e1));
    r->eager_ms = ms;
    CK(cudaMemcpy(r->y_eager, m.h[m.n_ops - 1], out_n * sizeof(float), cudaMemcpyDeviceToHost));

    /* capture one forward (the input copy included) and instantiate it */
    CK(cudaEventRecord(e0, s));
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    cudaMemcpyAsync(m.x, dx, in_n * sizeof(float), cudaMemcpyDeviceToDevice, s);
    forward(&m, s);
    CK(cudaStreamEndCapture(s, &graph));
    CK(cudaGraphInstantiate(&exec, graph, 0));
    CK(cudaEventRecord(e1, s));
    CK(cudaEventSynchronize(e1));
    CK(cudaEventElapsedTime(&ms, e0, e1));
    r->capture_ms = ms;
    CK(cudaMemset(m.h[m.n_ops - 1], 0, out_n * sizeof(float)));   /* no stale eager result */
    for (int i = 0; i < o->warmup; i++)
        CK(cudaGraphLaunch(exec, s));
    CK(cudaStreamSynchronize(s));
    CK(cudaEventRecord(e0, s));
    for (int i = 0; i < o->iterations; i++)
        CK(cudaGraphLaunch(exec, s));
    CK(cudaEventRecord(e1, s));
    CK(cudaEventSynchronize(e1));
    CK(cudaEventElapsedTime(&ms, e0, e1));
    r->graph_ms = ms;
    CK(cudaMemcpy(r->y_graph, m.h[m.n_ops - 1], out_n * sizeof(float), cudaMemcpyDeviceToHost));
    r->max_diff = 0.0;
    for (size_t i = 0; i < out_n; i++) {
        double d = r->y_graph[i] - r->y_eager[i];
        d = d < 0 ? -d : d;
        if (d > r->max_diff)
            r->max_diff = d;
    }
    rc = 0;
out:
    if (exec)
        cudaGraphExecDestroy(exec);
    if (graph)
        cudaGraphDestroy(graph);
    if (e0)
        cudaEventDestroy(e0);
    if (e1)
        cudaEventDestroy(e1);
    if (s)
        cudaStreamDestroy(s);
    for (int l = 0; l < GRAPH_MAX_LAYERS; l++) {
        cudaFree(m.w[l]);
        cudaFree(m.b[l]);
    }
    for (int k = 0; k < m.n_ops; k++)
        cudaFree(m.h[k]);
    cudaFree(m.x);
    cudaFree(dx);
    return rc;
}
