/* common.h - what the chapters' labs share: banners in the two styles of the originals
 * (`=` rules with a title, a double-line box with a centred upper-case title), the number
 * formats ("[1.0, 2.0]", shapes "[4, 8]"), a growing text buffer for per-rank output that is
 * printed in rank order at the end, probes of the machine (GPUs, NCCL, mpirun) and the
 * machine report with its self-tests. */
#ifndef CHAPTERS_COMMON_H
#define CHAPTERS_COMMON_H

#include "../../lab/lab.h"
#include <stdio.h>

/* common.c: formatting */
#define COMMON_BOX_WIDTH 58                 /* inside width of the box banner */
/* A rule of width copies of ch (a UTF-8 string: "=", "─") into buf; returns buf. */
char *common_rule(char *buf, size_t n, const char *ch, int width);
/* rule, " title", rule (style a) to a stream, or through mlsys_print_root on rank 0. */
void common_banner(FILE *out, int width, const char *title);
void common_root_banner(mlsys_comm *c, int width, const char *title);
/* ╔═══╗ / ║ TITLE ║ / ╚═══╝ with the title upper-cased and centred (style b). */
void common_box(FILE *out, int inner, const char *title);
/* "[1.0, 2.0]" with one decimal (decimals >= 0 chooses another precision). */
char *common_list(char *buf, size_t n, const float *v, size_t count);
char *common_list_prec(char *buf, size_t n, const float *v, size_t count, int decimals);
/* "[[0.0, 1.0], [10.0, 11.0]]": rows x cols, row-major. */
char *common_matrix(char *buf, size_t n, const float *v, size_t rows, size_t cols);
/* "[4, 8]" */
char *common_shape(char *buf, size_t n, const int *dims, int ndims);
/* "1+2+3+4" for n <= 6, "1+2+…+n" otherwise (first = 0 or 1). */
char *common_sum_expr(char *buf, size_t n, int first, int last);

/* A shipped file (assets/models/model.bin) found from the current folder, $MLSYS_LAB_SRC or
 * the program's place; returns out (rel itself when none exists: the open then says so). */
const char *common_asset_path(const char *rel, char *out, size_t n);

/* Text that a rank collects while it works, printed in rank order at a collective point. */
typedef struct common_text {
    char *s;
    size_t len, cap;
} common_text;
void common_text_add(common_text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
const char *common_text_str(const common_text *t);   /* "" when empty */
void common_text_free(common_text *t);

/* probe.c: what this machine has; nothing here fails without a GPU */
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
/* What a rank's device is called in the hello lines: "CPU" or "cuda:<local rank>". */
const char *common_device_name(const lab_args *a, int local_rank, char *buf, size_t n);

/* selftest.c: the machine report of ch01/verify-setup and `mlsys-lab doctor`, with the
 * self-tests (ranks really started; a p2p wait gives up after timeout_s). Exit status: 0
 * ready (the shm self-test passed), 1 not. */
int probe_report(double timeout_s);

#endif
