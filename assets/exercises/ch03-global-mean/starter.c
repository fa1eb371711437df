/* ch03-global-mean - the global mean of one number per rank.
 *
 * Each rank holds one number v. Make global_mean() return, on every rank, the mean of all
 * ranks' numbers: sum them with one collective, then divide.
 *
 * The check runs N = 1, 2, 3, 4, 8 with random v per rank (and some large ones) and asserts
 * that every rank's result equals sum(v)/N within 1e-9 (relative).
 *
 *   mlsys-lab check ch03-global-mean      mlsys-lab hint ch03-global-mean */
#include "mlsys.h"
#include "api.h"
#include <math.h>

double global_mean(mlsys_comm *c, double v)
{
    (void)c;
    /* TODO: every rank must see the same answer, not only its own number */
    return v;
}
