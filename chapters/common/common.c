/* common.c - banners and number formats shared by every lab, so that all chapters print
 * the same way: `=` rules of 50/60/70 with a title line, the double-line box, lists with one
 * decimal and shapes without the "torch.Size" wrapper; and what a lab's --backend asks of
 * this machine (core/probe.h answers). */
#include "common.h"
#include <ctype.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

char *common_rule(char *buf, size_t n, const char *ch, int width)
{
    size_t used = 0, cl = strlen(ch);
    if (n == 0)
        return buf;
    buf[0] = 0;
    for (int i = 0; i < width && used + cl < n; i++) {
        memcpy(buf + used, ch, cl);
        used += cl;
    }
    buf[used] = 0;
    return buf;
}

void common_banner(FILE *out, int width, const char *title)
{
    char rule[256];
    common_rule(rule, sizeof rule, "=", width);
    fprintf(out, "%s\n %s\n%s\n", rule, title, rule);
}

void common_root_banner(mlsys_comm *c, int width, const char *title)
{
    char rule[256];
    common_rule(rule, sizeof rule, "=", width);
    mlsys_print_root(c, "%s\n %s\n%s\n", rule, title, rule);
}

void common_box(FILE *out, int inner, const char *title)
{
    char bar[1024], up[256];
    size_t i;
    for (i = 0; title[i] && i + 1 < sizeof up; i++)
        up[i] = (char)toupper((unsigned char)title[i]);
    up[i] = 0;
    int len = (int)strlen(up);
    if (len > inner)
        len = inner;
    int left = (inner - len) / 2, right = inner - len - left;
    common_rule(bar, sizeof bar, "═", inner);
    fprintf(out, "╔%s╗\n", bar);
    fprintf(out, "║%*s%.*s%*s║\n", left, "", len, up, right, "");
    fprintf(out, "╚%s╝\n", bar);
}

char *common_list_prec(char *buf, size_t n, const float *v, size_t count, int decimals)
{
    size_t used = 0;
    if (n == 0)
        return buf;
    used += (size_t)snprintf(buf, n, "[");
    for (size_t i = 0; i < count && used < n; i++)
        used += (size_t)snprintf(buf + used, n - used, "%s%.*f", i ? ", " : "", decimals,
                                 (double)v[i]);
    if (used < n)
        snprintf(buf + used, n - used, "]");
    return buf;
}

char *common_list(char *buf, size_t n, const float *v, size_t count)
{
    return common_list_prec(buf, n, v, count, 1);
}

char *common_matrix(char *buf, size_t n, const float *v, size_t rows, size_t cols)
{
    size_t used = 0;
    char row[512];
    if (n == 0)
        return buf;
    used += (size_t)snprintf(buf, n, "[");
    for (size_t r = 0; r < rows && used < n; r++) {
        common_list(row, sizeof row, v + r * cols, cols);
        used += (size_t)snprintf(buf + used, n - used, "%s%s", r ? ", " : "", row);
    }
    if (used < n)
        snprintf(buf + used, n - used, "]");
    return buf;
}

char *common_shape(char *buf, size_t n, const int *dims, int ndims)
{
    size_t used = 0;
    if (n == 0)
        return buf;
    used += (size_t)snprintf(buf, n, "[");
    for (int i = 0; i < ndims && used < n; i++)
        used += (size_t)snprintf(buf + used, n - used, "%s%d", i ? ", " : "", dims[i]);
    if (used < n)
        snprintf(buf + used, n - used, "]");
    return buf;
}

char *common_sum_expr(char *buf, size_t n, int first, int last)
{
    size_t used = 0;
    if (n == 0)
        return buf;
    buf[0] = 0;
    if (last - first <= 5) {
        for (int i = first; i <= last && used < n; i++)
            used += (size_t)snprintf(buf + used, n - used, "%s%d", i > first ? " + " : "", i);
    } else {
        snprintf(buf, n, "%d + %d + … + %d", first, first + 1, last);
    }
    return buf;
}

void common_text_add(common_text *t, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int need = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (need < 0)
        return;
    if (t->len + (size_t)need + 1 > t->cap) {
        size_t cap = t->cap ? t->cap : 256;
        while (cap < t->len + (size_t)need + 1)
            cap *= 2;
        char *s = mlsys_xmalloc(cap);
        if (t->s)
            memcpy(s, t->s, t->len + 1);
        free(t->s);
        t->s = s;
        t->cap = cap;
    }
    va_start(ap, fmt);
    vsnprintf(t->s + t->len, t->cap - t->len, fmt, ap);
    va_end(ap);
    t->len += (size_t)need;
}

const char *common_text_str(const common_text *t)
{
    return t->s ? t->s : "";
}

void common_text_free(common_text *t)
{
    free(t->s);
    t->s = NULL;
    t->len = t->cap = 0;
}

int common_backend_check(const lab_args *a, int world_size)
{
    const char *b = lab_arg_str(a, "backend");
    const char *id = a->lab ? a->lab->id : "lab";
    char why[256];
    if (!b || !strcmp(b, "gloo") || !strcmp(b, "shm"))
        return 0;
    if (!strcmp(b, "nccl")) {
        int v, gpus = probe_gpu_count(why, sizeof why);
        if (!probe_nccl(&v, why, sizeof why)) {
            fprintf(stderr, "mlsys-lab: %s: backend nccl: %s (use --backend gloo)\n", id, why);
            return 2;
        }
        if (gpus < world_size) {
            fprintf(stderr, "mlsys-lab: %s: NCCL needs one GPU per rank: %d GPU%s found for %d "
                    "ranks (use --backend gloo)\n", id, gpus, gpus == 1 ? "" : "s", world_size);
            return 2;
        }
        return 0;
    }
    if (!strcmp(b, "mpi")) {
        char path[1024], ver[256];
        if (!probe_mpirun(path, sizeof path, ver, sizeof ver)) {
            fprintf(stderr, "mlsys-lab: %s: backend mpi: mpirun is not on PATH (install "
                    "openmpi-bin, or use --backend gloo)\n", id);
            return 2;
        }
    }
    return 0;
}

const char *common_device_name(const lab_args *a, int local_rank, char *buf, size_t n)
{
    const char *b = lab_arg_str(a, "backend");
    if (b && !strcmp(b, "nccl"))
        snprintf(buf, n, "cuda:%d", local_rank);
    else
        snprintf(buf, n, "CPU");
    return buf;
}
