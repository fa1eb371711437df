/* tokfile.c - llama2.c's tokenizer.bin: int32 max_token_length, then for each id a float32
 * score, an int32 byte length and the piece's bytes (no terminator), native little-endian.
 * The number of entries is not stored: run.c takes it from the model header, and so can we.
 * Reading checks every length against the file before it trusts it. */
#include "llm.h"
#include "llm_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TOKFILE_MAX_BYTES (256ull << 20)
#define TOKFILE_MAX_PIECE (1 << 16)

int llm_tokfile_write(const char *path, const llm_tokenizer *t, char *err, size_t errlen)
{
    size_t n = 4;
    for (int i = 0; i < t->vocab_size; i++)
        n += 8 + (size_t)t->piece_len[i];
    unsigned char *b = malloc(n), *p = b;
    if (!b) {
        snprintf(err, errlen, "%s: cannot allocate %zu bytes", path, n);
        return -1;
    }
    int32_t mtl = t->max_token_length;
    memcpy(p, &mtl, 4);
    p += 4;
    for (int i = 0; i < t->vocab_size; i++) {
        int32_t len = t->piece_len[i];
        memcpy(p, &t->score[i], 4);
        memcpy(p + 4, &len, 4);
        memcpy(p + 8, t->piece[i], (size_t)len);
        p += 8 + len;
    }
    const void *parts[1] = {b};
    int rc = llm_write_atomic(path, parts, &n, 1, err, errlen);
    free(b);
    return rc;
}

int llm_tokfile_read(const char *path, int vocab_size, llm_tokenizer *t, char *err,
                     size_t errlen)
{
    unsigned char *b;
    size_t n;
    memset(t, 0, sizeof *t);
    if (vocab_size > LLM_MAX_VOCAB) {
        snprintf(err, errlen, "%s: vocabulary of %d ids asked for (at most %d)", path,
                 vocab_size, LLM_MAX_VOCAB);
        return -1;
    }
    if (llm_read_file(path, TOKFILE_MAX_BYTES, &b, &n, err, errlen))
        return -1;
    /* every entry takes 8 bytes at least: the file bounds what the first allocation may be,
     * whatever vocab_size asks for (the arrays grow if the file holds more) */
    size_t fits = n >= 4 ? (n - 4) / 8 + 1 : 1;
    int rc = -1, count = 0, cap = vocab_size > 0 ? vocab_size : 1024;
    if ((size_t)cap > fits)
        cap = (int)fits;
    char **pieces = calloc((size_t)cap, sizeof(char *));
    int *lens = calloc((size_t)cap, sizeof(int));
    float *scores = calloc((size_t)cap, sizeof(float));
    int32_t mtl;
    size_t off = 4;
    if (!pieces || !lens || !scores) {
        snprintf(err, errlen, "%s: out of memory", path);
        goto out;
    }
    if (n < 4) {
        snprintf(err, errlen, "%s: truncated: %zu bytes, no max_token_length", path, n);
        goto out;
    }
    memcpy(&mtl, b, 4);
    if (mtl <= 0 || mtl > TOKFILE_MAX_PIECE) {
        snprintf(err, errlen, "%s: max_token_length %d out of range 1..%d", path, (int)mtl,
                 TOKFILE_MAX_PIECE);
        goto out;
    }
    while (vocab_size > 0 ? count < vocab_size : off < n) {
        if (n - off < 8) {
            snprintf(err, errlen, "%s: truncated at token %d (offset %zu of %zu bytes)", path,
                     count, off, n);
            goto out;
        }
        float score;
        int32_t len;
        memcpy(&score, b + off, 4);
        memcpy(&len, b + off + 4, 4);
        if (len < 0 || len > mtl) {
            snprintf(err, errlen, "%s: token %d has length %d (max_token_length %d)", path,
                     count, (int)len, (int)mtl);
            goto out;
        }
        if (isnan(score)) {
            snprintf(err, errlen, "%s: token %d has a NaN score", path, count);
            goto out;
        }
        if ((size_t)len > n - off - 8) {
            snprintf(err, errlen, "%s: truncated inside token %d (%d bytes announced)", path,
                     count, (int)len);
            goto out;
        }
        if (count == cap) {
            if (cap >= LLM_MAX_VOCAB) {
                snprintf(err, errlen, "%s: more than %d tokens", path, LLM_MAX_VOCAB);
                goto out;
            }
            cap *= 2;
            char **np = realloc(pieces, (size_t)cap * sizeof(char *));
            if (np)
                pieces = np;
            int *nl = realloc(lens, (size_t)cap * sizeof(int));
            if (nl)
                lens = nl;
            float *ns = realloc(scores, (size_t)cap * sizeof(float));
            if (ns)
                scores = ns;
            if (!np || !nl || !ns) {
                snprintf(err, errlen, "%s: out of memory", path);
                goto out;
            }
        }
        pieces[count] = (char *)b + off + 8;
        lens[count] = len;
        scores[count] = score;
        count++;
        off += 8 + (size_t)len;
    }
    if (off != n) {
        snprintf(err, errlen, "%s: %zu bytes after the %d tokens the model asks for", path,
                 n - off, count);
        goto out;
    }
    if (count < LLM_TOK_BYTE0 + 256) {
        snprintf(err, errlen, "%s: %d tokens: a vocabulary needs at least %d (3 specials and "
                 "256 bytes)", path, count, LLM_TOK_BYTE0 + 256);
        goto out;
    }
    if (llm_tokenizer_init(t, count, pieces, lens, scores, err, errlen))
        goto out;
    if (t->max_token_length > mtl) {       /* cannot happen: lengths were checked above */
        snprintf(err, errlen, "%s: a piece is longer than max_token_length", path);
        llm_tokenizer_free(t);
        goto out;
    }
    t->max_token_length = mtl;             /* keep the file's value (run.c sizes buffers by it) */
    rc = 0;
out:
    free(pieces);
    free(lens);
    free(scores);
    free(b);
    return rc;
}
