/* nccl_plugin.h - the NCCL backend as a plugin: what $(BUILD)/libmlsys-nccl.so exports and
 * the names its loader (lab/nccl_probe.c) looks up with dlsym. The plugin is loaded at run
 * time, so mlsys-lab builds and starts on machines without CUDA; it is attached to a rank
 * after the shm world is up (the NCCL unique id travels over shm point-to-point), keeps shm
 * for point-to-point and adds the "native" collectives (ncclAllReduce & co.). */
#ifndef MLSYS_NCCL_PLUGIN_H
#define MLSYS_NCCL_PLUGIN_H

#include <stddef.h>
#include "../mlsys.h"

#define MLSYS_NCCL_PLUGIN_FILE "libmlsys-nccl.so"

struct mlsys_world;

/* GPUs the CUDA runtime sees (cudaGetDeviceCount, the count starting at 0). 0 with
 * *ngpus >= 1; -1 with *ngpus = 0 and the reason ("cudaGetDeviceCount: ...") otherwise. */
int mlsys_nccl_probe(int *ngpus, char *err, size_t n);
/* Collective over the world: cudaSetDevice(local rank), rank 0 makes the unique id and sends
 * it to the others over shm p2p, ncclCommInitRank; then w's transport becomes "nccl" (shm
 * point-to-point plus native collectives). 0, or -1 with "rank R: ..." in err. */
int mlsys_nccl_attach(struct mlsys_world *w, char *err, size_t n);
/* The same for code that holds only the world communicator (lab/ has no internal.h). */
int mlsys_nccl_attach_comm(mlsys_comm *c, char *err, size_t n);
/* One line for the banner: "NCCL 2.28.9, GPU 0 (NVIDIA H200), NCCL_ALGO=auto
 * NCCL_PROTO=auto". Works before attach too (then without the GPU). */
void mlsys_nccl_describe(char *buf, size_t n);
/* Device-side check of an attached communicator: every rank fills count floats on its GPU
 * with a kernel (element i of rank r = (i % 251 + 1) * (r + 1)), ncclAllReduce(SUM) in place,
 * and a second kernel counts the elements that differ from (i % 251 + 1) * N(N+1)/2.
 * Returns that count (0 = correct), or -1 with the reason. */
long mlsys_nccl_selftest(mlsys_comm *c, size_t count, char *err, size_t n);

/* Point-to-point on device buffers (a pipeline's activations stage to stage): within one
 * ncclGroup, send scount elements of dsend to dst and receive rcount into drecv from src
 * (dst or src -1: that half is not done), on c's NCCL communicator, synchronized before it
 * returns. Ranks are c's. 0, or -1 with "rank R: ..." in err. */
int mlsys_nccl_sendrecv(mlsys_comm *c, const void *dsend, size_t scount, int dst, void *drecv,
                        size_t rcount, int src, mlsys_dtype dt, char *err, size_t n);

typedef int (*mlsys_nccl_probe_fn)(int *, char *, size_t);
typedef int (*mlsys_nccl_attach_comm_fn)(mlsys_comm *, char *, size_t);
typedef void (*mlsys_nccl_describe_fn)(char *, size_t);
typedef long (*mlsys_nccl_selftest_fn)(mlsys_comm *, size_t, char *, size_t);
typedef int (*mlsys_nccl_sendrecv_fn)(mlsys_comm *, const void *, size_t, int, void *, size_t,
                                      int, mlsys_dtype, char *, size_t);

/* nccl_kernels.cu: plain C entry points (stream is a cudaStream_t) */
#ifdef __cplusplus
extern "C" {
#endif
/* d[i] = (i % 251 + 1) * scale for i < count. Returns a cudaError_t (0 = launched). */
int mlsys_cuda_fill(float *d, size_t count, float scale, void *stream);
/* *wrong (device memory) = the number of i with d[i] != (i % 251 + 1) * scale. */
int mlsys_cuda_count_wrong(const float *d, size_t count, float scale, unsigned long long *wrong,
                           void *stream);
#ifdef __cplusplus
}
#endif

#endif
