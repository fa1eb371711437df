/* common.h - what the chapters' labs share: banners in the two styles of the originals
 * (`=` rules with a title, a double-line box with a centred upper-case title), the number
 * formats ("[1.0, 2.0]", shapes "[4, 8]"), a growing text buffer for per-rank output that is
 * printed in rank order at the end, and the checks of a lab's --backend (the machine's
 * probes and the machine report are core/probe.h's). */
#ifndef CHAPTERS_COMMON_H
#define CHAPTERS_COMMON_H

#include "../../lab/lab.h"
#include "../../core/probe.h"
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

/* Text that a rank collects while it works, printed in rank order at a collective point. */
typedef struct common_text {
    char *s;
    size_t len, cap;
} common_text;
void common_text_add(common_text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
const char *common_text_str(const common_text *t);   /* "" when empty */
void common_text_free(common_text *t);

/* What a rank's device is called in the hello lines: "CPU" or "cuda:<local rank>". */
const char *common_device_name(const lab_args *a, int local_rank, char *buf, size_t n);

#endif
