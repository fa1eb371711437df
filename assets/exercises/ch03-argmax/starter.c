/* ch03-argmax - distributed argmax: the global maximum and the rank that owns it.
 *
 * Each rank holds k values. Make distributed_argmax() return on every rank the largest value
 * of all ranks and the rank that holds it. Tie rule: when several ranks hold the maximum,
 * the answer is the LOWEST of those ranks (so every rank agrees on one owner).
 *
 * The check runs N = 1, 2, 3, 4, 8 with random values, with negative values only, with a tie
 * between two ranks and with every value equal; all ranks must return the same answer.
 *
 *   mlsys-lab check ch03-argmax      mlsys-lab hint ch03-argmax */
#include "mlsys.h"
#include "api.h"

int distributed_argmax(mlsys_comm *c, const float *vals, size_t k, float *max_value, int *owner)
{
    float m = vals[0];
    for (size_t i = 1; i < k; i++)
        if (vals[i] > m)
            m = vals[i];
    /* TODO: this is only this rank's maximum; find the global one and its owner */
    *max_value = m;
    *owner = mlsys_rank(c);
    return 0;
}
