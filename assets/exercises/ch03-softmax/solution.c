/* ch03-softmax - reference solution, in four steps:
 *   1. m = all_reduce(MAX) of the local maxima (-inf for an empty shard);
 *   2. e_i = exp(x_i - m) locally: every exponent is <= 0, so nothing overflows;
 *   3. s = all_reduce(SUM) of the local sums of e;
 *   4. y_i = e_i / s.
 * Subtracting the same m everywhere changes nothing mathematically (it cancels in the
 * ratio), and it is what makes inputs like 1000 safe. */
#include "mlsys.h"
#include "api.h"
#include <math.h>

int distributed_softmax(mlsys_comm *c, const float *x, float *y, size_t n)
{
    float m = -INFINITY;
    for (size_t i = 0; i < n; i++)
        if (x[i] > m)
            m = x[i];
    int rc = mlsys_allreduce(c, &m, &m, 1, MLSYS_F32, MLSYS_MAX);
    if (rc)
        return rc;
    double s = 0.0;
    for (size_t i = 0; i < n; i++) {
        y[i] = expf(x[i] - m);
        s += y[i];
    }
    rc = mlsys_allreduce(c, &s, &s, 1, MLSYS_F64, MLSYS_SUM);
    if (rc)
        return rc;
    for (size_t i = 0; i < n; i++)
        y[i] = (float)(y[i] / s);
    return 0;
}
