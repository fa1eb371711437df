/* sample.c - one draw from a discrete distribution: the action of a policy (chapter 12's
 * CartPole agent picks left or right), a token of a language model, a resampled token of
 * speculative decoding. The distribution is any vector of non-negative weights; the draw
 * takes exactly one uniform from the caller's mlsys_rng, so a seed fixes the whole run. */
#include "nn.h"

/* Inverse CDF: with u uniform in [0, Σp), return the first i whose running sum
 * p[0] + ... + p[i] exceeds u. Each i is returned with probability p[i]/Σp because the
 * intervals [sum before i, sum through i) tile [0, Σp) with those lengths. Summing in double
 * keeps the intervals right for long vectors (a 32k vocabulary) of tiny floats.
 * The sum is computed first, so the weights need not be normalised. Rounding can leave u at
 * or past the final running sum; then the last index of positive weight is the answer (never
 * one of weight 0). */
int nn_sample_categorical(const float *p, int n, mlsys_rng *r)
{
    double total = 0.0;
    int last = -1;
    for (int i = 0; i < n; i++) {
        if (!(p[i] >= 0.0f))
            return -1;                  /* negative or NaN: not a distribution */
        if (p[i] > 0.0f) {
            total += p[i];
            last = i;
        }
    }
    if (last < 0 || !(total < 1e300))
        return -1;
    double u = mlsys_rng_uniform(r) * total, cum = 0.0;
    for (int i = 0; i < last; i++) {
        cum += p[i];
        if (u < cum)
            return i;
    }
    return last;
}
