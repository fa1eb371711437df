/* embedding.c - a lookup table of V rows of D floats (token embeddings, position
 * embeddings). Forward gathers one row per id; backward scatters the gradient rows back and
 * adds them up, because a token that appears twice in a batch gets both contributions. */
#include "nn.h"
#include <assert.h>
#include <string.h>

/* y[N,D] = table[ids[i], :] */
void nn_embedding_forward(float *y, const int *ids, const float *table, int N, int V, int D)
{
    (void)V;
    for (int i = 0; i < N; i++) {
        assert(ids[i] >= 0 && ids[i] < V);
        memcpy(y + (size_t)i * D, table + (size_t)ids[i] * D, (size_t)D * sizeof(float));
    }
}

/* dtable[ids[i], :] += dy[i, :]. Rows never looked up keep their gradient unchanged. */
void nn_embedding_backward(float *dtable, const float *dy, const int *ids, int N, int V, int D)
{
    (void)V;
    for (int i = 0; i < N; i++) {
        assert(ids[i] >= 0 && ids[i] < V);
        float *row = dtable + (size_t)ids[i] * D;
        const float *g = dy + (size_t)i * D;
        for (int d = 0; d < D; d++)
            row[d] += g[d];
    }
}
