/* ch03-softmax - softmax of a vector sharded across ranks.
 *
 * softmax(x)_i = exp(x_i) / sum_j exp(x_j), over the WHOLE vector, which is cut into one
 * shard per rank (in rank order; shards may differ in size, and may be empty). Make
 * distributed_softmax() write this rank's part of the result.
 *
 * The check runs N = 1, 2, 3, 4 and asserts that the concatenated result equals a serial
 * softmax within 1e-6, that it sums to 1, and that inputs around 1000 do not overflow.
 *
 *   mlsys-lab check ch03-softmax      mlsys-lab hint ch03-softmax */
#include "mlsys.h"
#include "api.h"
#include <math.h>

int distributed_softmax(mlsys_comm *c, const float *x, float *y, size_t n)
{
    (void)c;
    /* TODO: this normalises by this rank's sum only, and exp(1000) is inf in a float */
    float s = 0.0f;
    for (size_t i = 0; i < n; i++)
        s += expf(x[i]);
    for (size_t i = 0; i < n; i++)
        y[i] = expf(x[i]) / s;
    return 0;
}
