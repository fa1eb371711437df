/* ch03-global-mean - reference solution: all_reduce(SUM) in double, then divide by N.
 * Every rank gets the same sum, so every rank returns the same mean. */
#include "mlsys.h"
#include "api.h"
#include <math.h>

double global_mean(mlsys_comm *c, double v)
{
    double sum = v;
    if (mlsys_allreduce(c, &sum, &sum, 1, MLSYS_F64, MLSYS_SUM) != MLSYS_OK)
        return NAN;
    return sum / mlsys_size(c);
}
