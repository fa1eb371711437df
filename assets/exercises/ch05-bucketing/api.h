/* api.h - ch05-bucketing: gradient bucketing, the function the learner writes, as the check
 * calls it. */
#ifndef EX_API_H
#define EX_API_H
#include "mlsys.h"

/* One parameter tensor's gradient: numel floats at grad (each tensor is its own allocation). */
typedef struct grad_tensor {
    const char *name;
    float *grad;
    size_t numel;
} grad_tensor;

/* Average the gradients of the n tensors t[0..n-1] over the ranks of c, in buckets: lay the
 * tensors end to end in the order given, cut that sequence into buckets of bucket_bytes
 * (the last one may be shorter; a tensor may be split between two buckets), and for each
 * bucket: copy its part of the gradients into a bucket buffer, all_reduce the buffer (SUM),
 * divide by the number of ranks and copy the result back. One all_reduce per bucket.
 * bucket_bytes is a multiple of 4. Returns 0, or the runtime's error code. */
int bucketed_sync_grads(mlsys_comm *c, grad_tensor *t, int n, size_t bucket_bytes);

#endif
