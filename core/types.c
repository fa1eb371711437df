/* types.c - element types and reduction operators: names, sizes and the kernels that
 * combine two vectors. Integer kernels compute in unsigned arithmetic so that overflow
 * wraps as on the wire instead of being undefined behaviour. */
#include "internal.h"
#include <string.h>

static const char *const dtype_names[MLSYS_DTYPE_COUNT] = {
    [MLSYS_F32] = "float", [MLSYS_F64] = "double", [MLSYS_I32] = "int32", [MLSYS_I64] = "int64",
};
static const char *const op_names[MLSYS_OP_COUNT] = {"sum", "prod", "min", "max", "avg"};

size_t mlsys_dtype_size(mlsys_dtype dt)
{
    return dt_size(dt);
}

const char *mlsys_dtype_name(mlsys_dtype dt)
{
    return (unsigned)dt < MLSYS_DTYPE_COUNT ? dtype_names[dt] : "?";
}

const char *mlsys_op_name(mlsys_op op)
{
    return (unsigned)op < MLSYS_OP_COUNT ? op_names[op] : "none";
}

int mlsys_dtype_parse(const char *s, mlsys_dtype *out)
{
    static const struct { const char *alias; mlsys_dtype dt; } aliases[] = {
        {"float", MLSYS_F32}, {"f32", MLSYS_F32}, {"float32", MLSYS_F32},
        {"double", MLSYS_F64}, {"f64", MLSYS_F64}, {"float64", MLSYS_F64},
        {"int32", MLSYS_I32}, {"i32", MLSYS_I32}, {"int", MLSYS_I32},
        {"int64", MLSYS_I64}, {"i64", MLSYS_I64},
    };
    for (size_t i = 0; s && i < sizeof aliases / sizeof aliases[0]; i++)
        if (strcmp(s, aliases[i].alias) == 0) {
            *out = aliases[i].dt;
            return 0;
        }
    return -1;
}

int mlsys_op_parse(const char *s, mlsys_op *out)
{
    for (int i = 0; s && i < MLSYS_OP_COUNT; i++)
        if (strcmp(s, op_names[i]) == 0) {
            *out = (mlsys_op)i;
            return 0;
        }
    if (s && strcmp(s, "product") == 0) {
        *out = MLSYS_PROD;
        return 0;
    }
    return -1;
}

/* One kernel per (type, op): the loops are simple enough for the compiler to vectorise. */
#define KERNELS(T, U, NAME)                                                                \
    static void NAME##_sum(T *o, const T *a, const T *b, size_t n)                \
    { for (size_t i = 0; i < n; i++) o[i] = (T)((U)a[i] + (U)b[i]); }                      \
    static void NAME##_prod(T *o, const T *a, const T *b, size_t n)               \
    { for (size_t i = 0; i < n; i++) o[i] = (T)((U)a[i] * (U)b[i]); }                      \
    static void NAME##_min(T *o, const T *a, const T *b, size_t n)                \
    { for (size_t i = 0; i < n; i++) o[i] = b[i] < a[i] ? b[i] : a[i]; }                   \
    static void NAME##_max(T *o, const T *a, const T *b, size_t n)                \
    { for (size_t i = 0; i < n; i++) o[i] = b[i] > a[i] ? b[i] : a[i]; }

KERNELS(float, float, f32)
KERNELS(double, double, f64)
KERNELS(int32_t, uint32_t, i32)
KERNELS(int64_t, uint64_t, i64)

typedef void (*kernel_fn)(void *, const void *, const void *, size_t);
#define ROW(NAME) {(kernel_fn)NAME##_sum, (kernel_fn)NAME##_prod, (kernel_fn)NAME##_min,  \
                   (kernel_fn)NAME##_max, (kernel_fn)NAME##_sum}
static const kernel_fn kernels[MLSYS_DTYPE_COUNT][MLSYS_OP_COUNT] = {
    [MLSYS_F32] = ROW(f32), [MLSYS_F64] = ROW(f64), [MLSYS_I32] = ROW(i32), [MLSYS_I64] = ROW(i64),
};

/* out may alias a or b exactly (in-place reductions); the compiler's alias check keeps the
 * vectorised loop correct for that case. */
void mlsys_reduce_local(void *out, const void *a, const void *b, size_t count, mlsys_dtype dt,
                        mlsys_op op)
{
    if ((unsigned)dt >= MLSYS_DTYPE_COUNT || (unsigned)op >= MLSYS_OP_COUNT || count == 0)
        return;
    kernels[dt][op](out, a, b, count);
}

void mlsys_scale_avg(void *buf, size_t count, mlsys_dtype dt, int n)
{
    if (n <= 1)
        return;
    switch (dt) {
    case MLSYS_F32: { float *p = buf; for (size_t i = 0; i < count; i++) p[i] /= (float)n; break; }
    case MLSYS_F64: { double *p = buf; for (size_t i = 0; i < count; i++) p[i] /= n; break; }
    case MLSYS_I32: { int32_t *p = buf; for (size_t i = 0; i < count; i++) p[i] /= n; break; }
    case MLSYS_I64: { int64_t *p = buf; for (size_t i = 0; i < count; i++) p[i] /= n; break; }
    default: break;
    }
}
