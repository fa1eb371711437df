/* sample.c - the one draw from a discrete distribution: the action of a policy (chapter
 * 12's CartPole agent picks left or right), a token of a language model (llm_sample), a
 * draft and a replacement token of speculative decoding. The distribution is any vector of non-negative weights; the draw
 * takes exactly one uniform from the caller's mlsys_rng, so a seed fixes the whole run. */
#include "nn.h"

/* Inverse CDF: with u uniform in [0, Σw), return the first i whose running sum
 * w[0] + ... + w[i] exceeds u. Each i is returned with probability w[i]/Σw because the
 * intervals [sum before i, sum through i) tile [0, Σw) with those lengths. Summing in double
 * keeps the intervals right for long vectors (a 32k vocabulary) of tiny floats.
 * The sum is computed first, so the weights need not be normalised. Rounding can leave u at
 * or past the final running sum; then the last index of positive weight is the answer (never
 * one of weight 0). The weights are p, or with q the positive part of p - q (what speculative
 * decoding draws a replacement from), computed as they are read. */
static int draw(const float *p, const float *q, int n, mlsys_rng *r)
{
    double total = 0.0;
    int last = -1;
    for (int i = 0; i < n; i++) {
        if (q) {
            if (p[i] > q[i]) {
                total += (double)p[i] - q[i];
                last = i;
            }
            continue;
        }
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
        if (q) {
            if (p[i] <= q[i])
                continue;
            cum += (double)p[i] - q[i];
        } else {
            cum += p[i];
        }
        if (u < cum)
            return i;
    }
    return last;
}

int nn_sample_categorical(const float *p, int n, mlsys_rng *r)
{
    return draw(p, NULL, n, r);
}

int nn_sample_categorical_excess(const float *p, const float *q, int n, mlsys_rng *r)
{
    return draw(p, q, n, r);
}
