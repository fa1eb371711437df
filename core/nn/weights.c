/* weights.c - the shapes of the lab's Llama-style model: its configuration (llama2.c's 7-int
 * header) checked and completed, and every weight tensor carved from one allocation in
 * llama2.c's file order, so the flat vector IS the file's payload. The transformer
 * (transformer.c) computes on these weights; core/llm reads and writes them as files. */
#include "transformer.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define HEADER_BYTES 28   /* the 7 int32 of the config at the start of a .bin */

int llm_config_check(llm_config *c, char *err, size_t errlen)
{
    struct { const char *name; int v, max; } d[] = {
        {"dim", c->dim, LLM_MAX_DIM},          {"hidden_dim", c->hidden_dim, 4 * LLM_MAX_DIM},
        {"n_layers", c->n_layers, LLM_MAX_LAYERS}, {"n_heads", c->n_heads, LLM_MAX_DIM},
        {"n_kv_heads", c->n_kv_heads, LLM_MAX_DIM}, {"vocab_size", c->vocab_size, LLM_MAX_VOCAB},
        {"seq_len", c->seq_len, LLM_MAX_SEQ},
    };
    for (size_t i = 0; i < sizeof d / sizeof d[0]; i++)
        if (d[i].v <= 0 || d[i].v > d[i].max) {
            snprintf(err, errlen, "%s %d out of range 1..%d", d[i].name, d[i].v, d[i].max);
            return -1;
        }
    if (c->dim % c->n_heads) {
        snprintf(err, errlen, "n_heads %d does not divide dim %d", c->n_heads, c->dim);
        return -1;
    }
    if (c->n_heads % c->n_kv_heads) {
        snprintf(err, errlen, "n_kv_heads %d does not divide n_heads %d", c->n_kv_heads,
                 c->n_heads);
        return -1;
    }
    c->head_size = c->dim / c->n_heads;
    if (c->head_size % 2) {
        snprintf(err, errlen, "head_size %d (dim %d / n_heads %d) is odd: RoPE rotates pairs",
                 c->head_size, c->dim, c->n_heads);
        return -1;
    }
    c->kv_dim = c->n_kv_heads * c->head_size;
    if (llm_file_bytes(c) > LLM_MAX_FILE_BYTES) {
        snprintf(err, errlen, "%llu bytes of weights, more than the %llu allowed",
                 (unsigned long long)llm_file_bytes(c), (unsigned long long)LLM_MAX_FILE_BYTES);
        return -1;
    }
    return 0;
}

/* Tensor sizes in file order; the RoPE tables are entries 11 and 12, wcls 13. */
static void sizes(const llm_config *c, size_t s[14])
{
    size_t D = (size_t)c->dim, H = (size_t)c->hidden_dim, L = (size_t)c->n_layers;
    size_t V = (size_t)c->vocab_size, KV = (size_t)c->n_kv_heads * (size_t)(c->dim / c->n_heads);
    size_t rope = (size_t)c->seq_len * (size_t)(c->dim / c->n_heads) / 2;
    size_t t[14] = {V * D, L * D, L * D * D, L * KV * D, L * KV * D, L * D * D, L * D,
                    L * H * D, L * D * H, L * H * D, D, rope, rope,
                    c->shared_classifier ? 0 : V * D};
    memcpy(s, t, sizeof t);
}

size_t llm_file_floats(const llm_config *c)
{
    size_t s[14], n = 0;
    sizes(c, s);
    for (int i = 0; i < 14; i++)
        n += s[i];
    return n;
}

size_t llm_param_count(const llm_config *c)
{
    size_t s[14];
    sizes(c, s);
    return llm_file_floats(c) - s[11] - s[12];
}

size_t llm_kv_bytes(const llm_config *c)
{
    return (size_t)2 * (size_t)c->n_layers * (size_t)c->kv_dim * sizeof(float);
}

uint64_t llm_file_bytes(const llm_config *c)
{
    return HEADER_BYTES + 4ull * llm_file_floats(c);
}

int llm_weights_param_ranges(const llm_config *c, size_t off[12], size_t len[12])
{
    size_t s[14], o = 0;
    int k = 0;
    sizes(c, s);
    for (int i = 0; i < 14; i++) {
        if (i != 11 && i != 12 && s[i]) {
            off[k] = o;
            len[k] = s[i];
            k++;
        }
        o += s[i];
    }
    return k;
}

static void carve(llm_weights *w, const llm_config *c)
{
    size_t s[14];
    sizes(c, s);
    float **dst[14] = {&w->token_embedding, &w->rms_att, &w->wq, &w->wk, &w->wv, &w->wo,
                       &w->rms_ffn, &w->w1, &w->w2, &w->w3, &w->rms_final, &w->freq_cis_real,
                       &w->freq_cis_imag, &w->wcls};
    float *p = w->mem;
    for (int i = 0; i < 14; i++) {
        *dst[i] = p;
        p += s[i];
    }
    if (c->shared_classifier)
        w->wcls = w->token_embedding;
}

static void fill_rope(llm_weights *w, const llm_config *c)
{
    int half = c->head_size / 2;
    for (int pos = 0; pos < c->seq_len; pos++)
        for (int i = 0; i < half; i++) {
            double theta = pow(10000.0, -2.0 * i / c->head_size);
            w->freq_cis_real[(size_t)pos * half + i] = (float)cos(pos * theta);
            w->freq_cis_imag[(size_t)pos * half + i] = (float)sin(pos * theta);
        }
}

int llm_weights_alloc(llm_weights *w, const llm_config *c, char *err, size_t errlen)
{
    llm_config cc = *c;
    memset(w, 0, sizeof *w);
    if (llm_config_check(&cc, err, errlen))
        return -1;
    w->n_floats = llm_file_floats(&cc);
    w->mem = calloc(w->n_floats, sizeof(float));
    if (!w->mem) {
        snprintf(err, errlen, "cannot allocate %zu floats of weights", w->n_floats);
        return -1;
    }
    carve(w, &cc);
    fill_rope(w, &cc);
    return 0;
}

int llm_weights_over(llm_weights *w, const llm_config *c, float *mem, char *err,
                     size_t errlen)
{
    llm_config cc = *c;
    memset(w, 0, sizeof *w);
    if (llm_config_check(&cc, err, errlen))
        return -1;
    w->n_floats = llm_file_floats(&cc);
    w->mem = mem;
    carve(w, &cc);
    return 0;
}

void llm_weights_free(llm_weights *w)
{
    if (w->map)
        munmap(w->map, w->map_len);
    else
        free(w->mem);
    memset(w, 0, sizeof *w);
}
