/* nccl_kernels.cu - the two CUDA kernels the NCCL backend's device checks need: fill a
 * buffer with a pattern that every rank can predict, and count the elements that differ from
 * the pattern after a collective (the nccl-tests "#wrong" idea, computed on the GPU so no
 * copy back is needed). Grid-stride loops; C entry points for nccl_transport.c. */
#include "nccl_plugin.h"
#include <cuda_runtime.h>

static __device__ float pattern(size_t i, float scale)
{
    return (float)(i % 251 + 1) * scale;
}

static __global__ void fill_kernel(float *d, size_t count, float scale)
{
    size_t stride = (size_t)blockDim.x * gridDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < count; i += stride)
        d[i] = pattern(i, scale);
}

static __global__ void count_wrong_kernel(const float *d, size_t count, float scale,
                                          unsigned long long *wrong)
{
    size_t stride = (size_t)blockDim.x * gridDim.x;
    unsigned long long mine = 0;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < count; i += stride)
        mine += d[i] != pattern(i, scale);
    if (mine)
        atomicAdd(wrong, mine);
}

static unsigned blocks_for(size_t count)
{
    size_t b = (count + 255) / 256;
    return (unsigned)(b < 1 ? 1 : b > 1024 ? 1024 : b);
}

extern "C" int mlsys_cuda_fill(float *d, size_t count, float scale, void *stream)
{
    fill_kernel<<<blocks_for(count), 256, 0, (cudaStream_t)stream>>>(d, count, scale);
    return (int)cudaGetLastError();
}

extern "C" int mlsys_cuda_count_wrong(const float *d, size_t count, float scale,
                                      unsigned long long *wrong, void *stream)
{
    cudaError_t e = cudaMemsetAsync(wrong, 0, sizeof *wrong, (cudaStream_t)stream);
    if (e != cudaSuccess)
        return (int)e;
    count_wrong_kernel<<<blocks_for(count), 256, 0, (cudaStream_t)stream>>>(d, count, scale,
                                                                           wrong);
    return (int)cudaGetLastError();
}
