/* ch11-spec-accept - reference solution: the acceptance rule of speculative decoding. */
#include "mlsys.h"
#include "api.h"

int spec_accept(const float *p, const float *q, int V, int x, mlsys_rng *rng, int *y)
{
    double u = mlsys_rng_uniform(rng);
    if (u * q[x] < p[x])                /* u < p/q; p >= q always passes */
        return 1;
    double sum = 0.0;
    for (int i = 0; i < V; i++)
        if (p[i] > q[i])
            sum += (double)p[i] - q[i];
    double r = mlsys_rng_uniform(rng) * sum, cum = 0.0;
    int last = -1;
    for (int i = 0; i < V; i++) {
        if (p[i] <= q[i])
            continue;
        cum += (double)p[i] - q[i];
        last = i;
        if (r < cum)
            break;
    }
    *y = last;                          /* rounding can leave r at the very end */
    return 0;
}
