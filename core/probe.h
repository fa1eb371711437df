/* probe.h - what this machine has and can run, found at run time so that nothing here needs
 * CUDA, NCCL or MPI to build or fails without them (probe.c), and the machine report with
 * real self-tests that `mlsys-lab doctor` and ch01/verify-setup print (selftest.c). */
#ifndef MLSYS_PROBE_H
#define MLSYS_PROBE_H

#include <stddef.h>

/* ---- probe.c ---- */
/* GPUs the CUDA runtime sees (cudaGetDeviceCount through dlopen of libcudart); 0 when there
 * is no runtime, no driver or no device, with the reason in why. */
int probe_gpu_count(char *why, size_t n);
/* Name and memory (GiB) of GPU i through the driver API (libcuda.so.1); -1 when unknown. */
int probe_gpu_info(int i, char *name, size_t n, double *gib);
/* CUDA runtime and driver versions as 12040 etc.; 0 when unknown. */
void probe_cuda_versions(int *runtime, int *driver);
/* cuDNN version (e.g. 90100) or 0. */
long probe_cudnn_version(void);
/* libnccl.so.2 loads: 1 and *version (e.g. 22703); 0 with why. */
int probe_nccl(int *version, char *why, size_t n);
/* mpirun on PATH: 1 with its path and the first line of `mpirun --version`; 0 otherwise. */
int probe_mpirun(char *path, size_t pn, char *version, size_t vn);

/* ---- selftest.c ---- */
/* The machine report, on stdout: the runtime, the cores, a real self-test of the shm backend
 * (2 and then 4 ranks all-reduce r+1 and must all hold N(N+1)/2; a blocked send or receive
 * gives up after timeout_s), CUDA and the GPUs, and which backends (shm, mpi, nccl) can run
 * here and why not. The mpi backend counts as working only when a real job under mpirun
 * passed: this program's own run command, `run MPI_LAB --world-size 2 --backend mpi`, where
 * the lab MPI_LAB prints "Rank r/2: hello from PID ..." on each rank and "correct: yes" once
 * its all-reduce is right; when ready, the report suggests running it. Exit status: 0 ready
 * (the shm self-test passed), 1 not. */
int probe_report(double timeout_s, const char *mpi_lab);

#endif
