/* sampler.c - turning one row of logits into the next token: greedy, temperature, top-k and
 * top-p (nucleus), drawn from a seeded mlsys_rng stream so a seed replays the same text (the
 * draw itself is core/nn's one categorical draw, nn_sample_categorical).
 * Every choice is deterministic, ties included (the lower id wins), which is what lets the
 * tests demand identical tokens from the cached, uncached and batched forwards. */
#include "llm.h"
#include "../nn/nn.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int llm_sampler_init(llm_sampler *s, int vocab, float temperature, int top_k, float top_p,
                     uint64_t seed)
{
    memset(s, 0, sizeof *s);
    if (vocab < 1 || !(temperature >= 0.0f) || !isfinite(temperature) || !(top_p > 0.0f) ||
        !(top_p <= 1.0f))
        return -1;
    s->vocab = vocab;
    s->temperature = temperature;
    s->top_k = top_k;
    s->top_p = top_p;
    mlsys_rng_seed(&s->rng, seed);
    s->prob = mlsys_xmalloc((size_t)vocab * sizeof(float));
    s->idx = mlsys_xmalloc((size_t)vocab * sizeof(int));
    s->cand = mlsys_xmalloc((size_t)vocab * sizeof(float));
    return 0;
}

void llm_sampler_fini(llm_sampler *s)
{
    free(s->prob);
    free(s->idx);
    free(s->cand);
    memset(s, 0, sizeof *s);
}

/* The first index of the largest value: a strict > keeps the lowest id among equals. */
int llm_argmax(const float *x, int n)
{
    int best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best])
            best = i;
    return best;
}

/* Most likely first; equal probabilities by id, so the order never depends on qsort. */
static int by_prob_desc(const void *a, const void *b, void *u)
{
    const float *p = u;
    int i = *(const int *)a, j = *(const int *)b;
    if (p[i] != p[j])
        return p[i] > p[j] ? -1 : 1;
    return (i > j) - (i < j);
}

/* s->prob = softmax(logits / T); s->idx[0..n) = the candidates that survive top-k and top-p
 * (most likely first, or every id in order when neither filter is on). Returns n and the
 * candidates' total probability in *mass (what the draw is scaled by: renormalising without
 * dividing). Dividing by T > 1 flattens the distribution, T < 1 sharpens it toward argmax. */
static int candidates(llm_sampler *s, const float *logits, double *mass)
{
    int V = s->vocab;
    float *p = s->prob;
    float mx = -INFINITY;
    for (int i = 0; i < V; i++) {
        p[i] = logits[i] / s->temperature;
        if (p[i] > mx)
            mx = p[i];
    }
    /* subtract the maximum so the largest exponent is e^0: no overflow for any logits */
    double sum = 0.0;
    for (int i = 0; i < V; i++) {
        p[i] = expf(p[i] - mx);
        sum += p[i];
    }
    for (int i = 0; i < V; i++)
        p[i] = (float)(p[i] / sum);
    for (int i = 0; i < V; i++)
        s->idx[i] = i;
    int k = s->top_k > 0 && s->top_k < V ? s->top_k : V;
    if (k == V && s->top_p >= 1.0f) {
        *mass = 1.0;
        return V;
    }
    qsort_r(s->idx, (size_t)V, sizeof(int), by_prob_desc, p);
    double kept = 0.0;
    for (int i = 0; i < k; i++)
        kept += p[s->idx[i]];
    if (s->top_p < 1.0f) {
        /* nucleus: the shortest head of the sorted list whose share of what top-k kept
         * reaches top_p; at least one token, so a tiny top_p is greedy */
        double cum = 0.0;
        int n = 0;
        while (n < k) {
            cum += p[s->idx[n++]];
            if (cum >= s->top_p * kept)
                break;
        }
        k = n;
        kept = cum;
    }
    *mass = kept;
    return k;
}

int llm_sample(llm_sampler *s, const float *logits)
{
    if (s->temperature == 0.0f)
        return llm_argmax(logits, s->vocab);
    double mass;              /* the draw sums the candidates' weights itself */
    int n = candidates(s, logits, &mass);
    /* inverse CDF over the kept candidates in their order (most likely first; every id in
     * id order when nothing is filtered): renormalised without dividing */
    for (int i = 0; i < n; i++)
        s->cand[i] = s->prob[s->idx[i]];
    int k = nn_sample_categorical(s->cand, n, &s->rng);
    return k >= 0 ? s->idx[k] : s->idx[0];
}

void llm_sampler_probs(llm_sampler *s, const float *logits, float *prob)
{
    int V = s->vocab;
    memset(prob, 0, (size_t)V * sizeof(float));
    if (s->temperature == 0.0f) {
        prob[llm_argmax(logits, V)] = 1.0f;
        return;
    }
    double mass;
    int n = candidates(s, logits, &mass);
    for (int i = 0; i < n; i++)
        prob[s->idx[i]] = (float)(s->prob[s->idx[i]] / mass);
}
