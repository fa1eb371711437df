/* ch05-bucketing - reference solution. A bucket is a window [start, start + cap) over the
 * tensors laid end to end. Packing copies the pieces of the tensors that fall in the window
 * into one buffer; after the all-reduce the same pieces are copied back. Because the window
 * ignores tensor boundaries, every bucket but the last is full, and the number of
 * all-reduces is exactly ceil(total bytes / bucket bytes).
 * (PyTorch's DDP keeps each tensor whole inside one bucket, so its count can be a little
 * higher; the data moved is the same.) */
#include "mlsys.h"
#include "api.h"
#include <stdlib.h>
#include <string.h>

/* Copy the part of the tensors in [start, start + len) of the end-to-end sequence between
 * the tensors and buf: to buf when pack, back into the tensors otherwise. */
static void move_window(grad_tensor *t, int n, size_t start, size_t len, float *buf, int pack)
{
    size_t base = 0;
    for (int i = 0; i < n && len > 0; i++) {
        size_t lo = base, hi = base + t[i].numel;
        base = hi;
        if (hi <= start)
            continue;
        size_t from = start > lo ? start - lo : 0;           /* inside tensor i */
        size_t take = t[i].numel - from;
        if (take > len)
            take = len;
        if (pack)
            memcpy(buf, t[i].grad + from, take * sizeof(float));
        else
            memcpy(t[i].grad + from, buf, take * sizeof(float));
        buf += take;
        start += take;
        len -= take;
    }
}

int bucketed_sync_grads(mlsys_comm *c, grad_tensor *t, int n, size_t bucket_bytes)
{
    int world = mlsys_size(c);
    size_t cap = bucket_bytes / sizeof(float), total = 0;
    for (int i = 0; i < n; i++)
        total += t[i].numel;
    if (cap == 0 || total == 0)
        return total == 0 ? 0 : MLSYS_ERR_ARG;
    float *bucket = malloc((cap < total ? cap : total) * sizeof(float));
    if (!bucket)
        return MLSYS_ERR_SYS;
    int rc = 0;
    for (size_t start = 0; start < total && !rc; start += cap) {
        size_t len = total - start < cap ? total - start : cap;
        move_window(t, n, start, len, bucket, 1);
        rc = mlsys_allreduce(c, bucket, bucket, len, MLSYS_F32, MLSYS_SUM);
        for (size_t k = 0; !rc && k < len; k++)
            bucket[k] /= (float)world;
        if (!rc)
            move_window(t, n, start, len, bucket, 0);
    }
    free(bucket);
    return rc;
}
