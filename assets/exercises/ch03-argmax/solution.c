/* ch03-argmax - reference solution: two all_reduces.
 * 1. all_reduce(MAX) of the local maxima gives the global maximum g on every rank.
 * 2. Each rank proposes itself if its local maximum equals g, and N otherwise; all_reduce(MIN)
 *    of the proposals is the lowest owner. (An all_gather of the local maxima, scanned in
 *    rank order, gives the same answer with N values per rank instead of one.) */
#include "mlsys.h"
#include "api.h"

int distributed_argmax(mlsys_comm *c, const float *vals, size_t k, float *max_value, int *owner)
{
    float m = vals[0];
    for (size_t i = 1; i < k; i++)
        if (vals[i] > m)
            m = vals[i];
    float g = m;
    int rc = mlsys_allreduce(c, &g, &g, 1, MLSYS_F32, MLSYS_MAX);
    if (rc)
        return rc;
    int me = m == g ? mlsys_rank(c) : mlsys_size(c);
    rc = mlsys_allreduce(c, &me, &me, 1, MLSYS_I32, MLSYS_MIN);
    if (rc)
        return rc;
    *max_value = g;
    *owner = me;
    return 0;
}
