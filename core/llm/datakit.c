/* datakit.c - the "data kit" the train command starts from: seed -> corpus (train and
 * validation splits) -> BPE tokenizer trained on the training split -> token ids laid out as
 * run.c expects (each document: BOS, then the document with run.c's dummy-prefix space).
 * Deterministic for a seed; times each stage and measures compression on validation text. */
#include "llm.h"
#include "../mlsys.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* BOS + encode(" " + doc) for every document; also counts document bytes and tokens. */
static int *encode_split(const llm_tokenizer *t, const llm_corpus *c, size_t *nids,
                         size_t *doc_bytes, size_t *doc_tokens)
{
    int *ids = mlsys_xmalloc((c->len + 2 * c->ndocs + 1) * sizeof(int));
    size_t k = 0;
    *doc_bytes = *doc_tokens = 0;
    for (size_t i = 0; i < c->ndocs; i++) {
        size_t len = llm_corpus_doc_len(c, i);
        size_t got = llm_bpe_encode_prompt(t, c->text + c->off[i], len, 1, ids + k);
        k += got;
        *doc_bytes += len;
        *doc_tokens += got - 1;
    }
    *nids = k;
    return ids;
}

int llm_datakit_build(llm_datakit *k, const llm_datakit_opts *o, char *err, size_t errlen)
{
    memset(k, 0, sizeof *k);
    size_t tb = o->train_bytes ? o->train_bytes : LLM_DATAKIT_TRAIN_BYTES;
    size_t vb = o->val_bytes ? o->val_bytes : tb / 10;
    int vocab = o->vocab_size ? o->vocab_size : 512;
    double t0 = mlsys_now_s();
    if (llm_corpus_generate(&k->train, o->seed, LLM_SPLIT_TRAIN, 0, tb) ||
        llm_corpus_generate(&k->val, o->seed, LLM_SPLIT_VAL, 0, vb)) {
        snprintf(err, errlen, "datakit: cannot generate the corpus");
        llm_datakit_free(k);
        return -1;
    }
    double t1 = mlsys_now_s();
    /* the tokenizer sees what the model will see: " " + doc, documents kept apart by NUL */
    char *bt = mlsys_xmalloc(k->train.len + 1);
    size_t n = 0;
    for (size_t i = 0; i < k->train.ndocs; i++) {
        size_t len = llm_corpus_doc_len(&k->train, i);
        bt[n++] = ' ';
        memcpy(bt + n, k->train.text + k->train.off[i], len);
        n += len;
        bt[n++] = '\0';
    }
    int rc = llm_bpe_train(&k->tok, bt, n, vocab, err, errlen);
    free(bt);
    if (rc) {
        llm_datakit_free(k);
        return -1;
    }
    double t2 = mlsys_now_s();
    size_t db, dt;
    k->train_ids = encode_split(&k->tok, &k->train, &k->n_train_ids, &db, &dt);
    k->val_ids = encode_split(&k->tok, &k->val, &k->n_val_ids, &db, &dt);
    k->val_bytes_per_token = dt ? (double)db / (double)dt : 0.0;
    double t3 = mlsys_now_s();
    k->corpus_s = t1 - t0;
    k->bpe_s = t2 - t1;
    k->encode_s = t3 - t2;
    return 0;
}

void llm_datakit_free(llm_datakit *k)
{
    llm_corpus_free(&k->train);
    llm_corpus_free(&k->val);
    if (k->tok.piece)
        llm_tokenizer_free(&k->tok);
    free(k->train_ids);
    free(k->val_ids);
    memset(k, 0, sizeof *k);
}

int llm_ids_write_u16(const char *path, const int *ids, size_t n, char *err, size_t errlen)
{
    uint16_t *b = malloc(n ? n * 2 : 1);
    if (!b) {
        snprintf(err, errlen, "%s: cannot allocate %zu ids", path, n);
        return -1;
    }
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] > 65535) {
            snprintf(err, errlen, "%s: id %d at %zu does not fit 16 bits", path, ids[i], i);
            free(b);
            return -1;
        }
        b[i] = (uint16_t)ids[i];
    }
    const void *parts[1] = {b};
    size_t sz = n * 2;
    int rc = llm_write_atomic(path, parts, &sz, 1, err, errlen);
    free(b);
    return rc;
}
