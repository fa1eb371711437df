/* kvcache.c - the KV cache's physical pool and its simplest map: the contiguous cache, where
 * each sequence owns a fixed run of max_len slots (llama2.c's key_cache/value_cache, one row
 * per sequence). The forward reaches it only through llm_kv_ops, so chapter 9's paged cache
 * (block tables over the same pool) drops in without touching infer.c. */
#include "llm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct kv_contig {
    int max_len;              /* slots per sequence */
    int *reserved;            /* [n_seqs] positions 0..reserved-1 are mapped */
} kv_contig;

static int contig_reserve(llm_kv *kv, int seq, int n)
{
    kv_contig *p = kv->impl;
    if (seq < 0 || seq >= kv->n_seqs || n < 0 || n > p->max_len)
        return -1;
    if (n > p->reserved[seq])
        p->reserved[seq] = n;
    return 0;
}

/* (seq, pos) -> slot is arithmetic here: a sequence's positions are consecutive slots. */
static int contig_slot(const llm_kv *kv, int seq, int pos)
{
    const kv_contig *p = kv->impl;
    if (seq < 0 || seq >= kv->n_seqs || pos < 0 || pos >= p->reserved[seq])
        return -1;
    return seq * p->max_len + pos;
}

static void contig_release(llm_kv *kv, int seq)
{
    kv_contig *p = kv->impl;
    if (seq >= 0 && seq < kv->n_seqs)
        p->reserved[seq] = 0;
}

static void contig_destroy(llm_kv *kv)
{
    kv_contig *p = kv->impl;
    if (p)
        free(p->reserved);
    free(p);
    kv->impl = NULL;
}

static const llm_kv_ops contig_ops = {
    "contiguous", contig_reserve, contig_slot, contig_release, contig_destroy,
};

int llm_kv_init_contiguous(llm_kv *kv, const llm_config *c, int n_seqs, int max_len,
                           char *err, size_t errlen)
{
    memset(kv, 0, sizeof *kv);
    if (max_len <= 0)
        max_len = c->seq_len;
    if (n_seqs < 1 || max_len > c->seq_len || (long long)n_seqs * max_len > (1LL << 30)) {
        snprintf(err, errlen, "kv cache: %d sequences of %d positions: out of range "
                 "(seq_len %d)", n_seqs, max_len, c->seq_len);
        return -1;
    }
    kv->n_layers = c->n_layers;
    kv->kv_dim = c->kv_dim;
    kv->n_seqs = n_seqs;
    kv->n_slots = n_seqs * max_len;
    /* K and V: 2 · L · slots · KVD floats, the size formula of chapter 9; checked against
     * the machine before it is allocated (a long context times many sequences adds up) */
    size_t per = (size_t)c->n_layers * kv->n_slots * (size_t)c->kv_dim;
    kv->bytes = 2 * per * sizeof(float);
    if (kv->bytes > mlsys_mem_available()) {
        char a[32], b[32];
        mlsys_format_approx((double)kv->bytes, a, sizeof a);
        mlsys_format_approx((double)mlsys_mem_available(), b, sizeof b);
        snprintf(err, errlen, "kv cache: %d sequences of %d positions need %s, more than this "
                 "machine has free: %s", n_seqs, max_len, a, b);
        memset(kv, 0, sizeof *kv);
        return -1;
    }
    kv->k = mlsys_xcalloc(2 * per, sizeof(float));
    kv->v = kv->k + per;
    kv_contig *p = mlsys_xcalloc(1, sizeof *p);
    p->max_len = max_len;
    p->reserved = mlsys_xcalloc((size_t)n_seqs, sizeof(int));
    kv->impl = p;
    kv->ops = &contig_ops;
    return 0;
}

void llm_kv_free(llm_kv *kv)
{
    if (kv->ops && kv->ops->destroy)
        kv->ops->destroy(kv);
    free(kv->k);
    memset(kv, 0, sizeof *kv);
}
