/* checkpoint.c - llama2.c's legacy "version 0" model file and the lab's training companion.
 * The .bin is 7 int32 (dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size — negative
 * when the classifier has its own weights —, seq_len) and then float32 tensors in the order of
 * llm_weights; run.c reads it unchanged. Everything is validated against the file size before
 * any allocation; writes are atomic. The ".train" file layout is documented in model.h. */
#include "model.h"
#include "llm.h"
#include "llm_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define HEADER_BYTES 28   /* the 7 int32 of the config */

uint64_t llm_weights_hash(const llm_weights *w)
{
    return llm_fnv1a64(w->mem, w->n_floats * sizeof(float), LLM_FNV_INIT);
}

void llm_header_of(const llm_config *c, int32_t h[7])
{
    h[0] = c->dim;
    h[1] = c->hidden_dim;
    h[2] = c->n_layers;
    h[3] = c->n_heads;
    h[4] = c->n_kv_heads;
    h[5] = c->shared_classifier ? c->vocab_size : -c->vocab_size;
    h[6] = c->seq_len;
}

int llm_config_of_header(const int32_t h[7], llm_config *c, char *err, size_t errlen)
{
    memset(c, 0, sizeof *c);
    c->dim = h[0];
    c->hidden_dim = h[1];
    c->n_layers = h[2];
    c->n_heads = h[3];
    c->n_kv_heads = h[4];
    c->shared_classifier = h[5] > 0;
    c->vocab_size = h[5] == INT32_MIN ? 0 : h[5] < 0 ? -h[5] : h[5];
    c->seq_len = h[6];
    return llm_config_check(c, err, errlen);
}

int llm_checkpoint_write(const char *path, const llm_config *c, const llm_weights *w,
                         char *err, size_t errlen)
{
    llm_config cc = *c;
    char why[200];
    if (llm_config_check(&cc, why, sizeof why)) {
        snprintf(err, errlen, "%s: not written: %s", path, why);
        return -1;
    }
    if (w->n_floats != llm_file_floats(&cc)) {
        snprintf(err, errlen, "%s: not written: weights hold %zu floats, the config needs %zu",
                 path, w->n_floats, llm_file_floats(&cc));
        return -1;
    }
    int32_t h[7];
    llm_header_of(&cc, h);
    const void *parts[2] = {h, w->mem};
    size_t sz[2] = {HEADER_BYTES, w->n_floats * sizeof(float)};
    return llm_write_atomic(path, parts, sz, 2, err, errlen);
}

/* Every float finite: an exponent of all ones is an infinity or a NaN. One pass without a
 * branch per float, which the compiler turns into vector code: the scan runs at the speed
 * of memory, the whole file being read once here. */
static int all_finite(const float *f, size_t n)
{
    const uint32_t *u = (const uint32_t *)(const void *)f;
    uint32_t bad = 0;
    for (size_t i = 0; i < n; i++)
        bad |= (uint32_t)((u[i] & 0x7f800000u) == 0x7f800000u);
    return !bad;
}

int llm_checkpoint_read(const char *path, llm_config *c, llm_weights *w, char *err,
                        size_t errlen)
{
    int fd;
    uint64_t n;
    char why[200];
    if (w)
        memset(w, 0, sizeof *w);
    if (llm_open_regular(path, LLM_MAX_FILE_BYTES, &fd, &n, err, errlen))
        return -1;
    int32_t h[7];
    int rc = -1;
    if (n < HEADER_BYTES) {
        snprintf(err, errlen, "%s: truncated: %llu bytes, the header alone is %d", path,
                 (unsigned long long)n, HEADER_BYTES);
        goto out;
    }
    /* the header first: what it asks for is checked against the file and the machine
     * before anything is allocated, and the payload is read straight into the weights */
    if (llm_read_exact(fd, h, sizeof h, path, err, errlen))
        goto out;
    if (llm_config_of_header(h, c, why, sizeof why)) {
        snprintf(err, errlen, "%s: bad header: %s", path, why);
        goto out;
    }
    uint64_t want = llm_file_bytes(c);
    if (n != want) {
        snprintf(err, errlen, "%s: %s: %llu bytes, the header (dim %d, %d layers, vocab %d%s, "
                 "seq %d) needs %llu", path, n < want ? "truncated" : "wrong size",
                 (unsigned long long)n, c->dim, c->n_layers, c->vocab_size,
                 c->shared_classifier ? "" : " unshared", c->seq_len, (unsigned long long)want);
        goto out;
    }
    if (!w) {                   /* the configuration is all the caller wants */
        rc = 0;
        goto out;
    }
    if (want > mlsys_mem_available()) {
        char a[32], b[32];
        mlsys_format_approx((double)want, a, sizeof a);
        mlsys_format_approx((double)mlsys_mem_available(), b, sizeof b);
        snprintf(err, errlen, "%s: %s of weights, more than this machine has free: %s", path,
                 a, b);
        goto out;
    }
    /* The file mapped whole, as llama2.c's run.c does: the weights are the page cache's
     * pages, shared with every process that reads the model, and nothing is copied or
     * zeroed (a write, by a trainer, copies one page: MAP_PRIVATE). Where a file system
     * cannot map it, it is read into an allocation instead. */
    void *map = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_POPULATE, fd, 0);
    if (map != MAP_FAILED) {
        if (llm_weights_over(w, c, (float *)(void *)((char *)map + HEADER_BYTES), why,
                             sizeof why)) {
            munmap(map, n);
            snprintf(err, errlen, "%s: %s", path, why);
            goto out;
        }
        w->map = map;
        w->map_len = n;
    } else {
        if (llm_weights_alloc(w, c, why, sizeof why)) {
            snprintf(err, errlen, "%s: %s", path, why);
            goto out;
        }
        if (llm_read_exact(fd, w->mem, w->n_floats * sizeof(float), path, err, errlen)) {
            llm_weights_free(w);
            goto out;
        }
    }
    if (!all_finite(w->mem, w->n_floats)) {
        size_t i = 0;
        while (isfinite(w->mem[i]))
            i++;
        snprintf(err, errlen, "%s: weight %zu of %zu is not finite", path, i, w->n_floats);
        llm_weights_free(w);
        goto out;
    }
    rc = 0;
out:
    close(fd);
    return rc;
}

int llm_model_read(const char *mpath, const char *tpath, llm_config *c, llm_weights *w,
                   llm_tokenizer *t, char *err, size_t errlen)
{
    if (llm_checkpoint_read(mpath, c, w, err, errlen))
        return -1;
    if (!t)
        return 0;
    if (llm_tokfile_read(tpath, 0, t, err, errlen))
        goto fail;
    if (t->vocab_size != c->vocab_size) {
        snprintf(err, errlen, "%s has %d ids, the vocabulary of %s has %d: a tokenizer must be "
                 "its model's", tpath, t->vocab_size, mpath, c->vocab_size);
        llm_tokenizer_free(t);
        goto fail;
    }
    return 0;
fail:
    if (w)
        llm_weights_free(w);
    return -1;
}

/* ---- the .train companion ---- */
const char llm_train_magic[8] = {'M', 'L', 'S', 'Y', 'S', 'T', 'R', 'N'};
#define train_magic llm_train_magic
#define TRAIN_VERSION 1u
#define TRAIN_HEAD 136   /* bytes before m[] */

int llm_train_state_alloc(llm_train_state *s, const llm_config *c)
{
    memset(s, 0, sizeof *s);
    s->n = llm_param_count(c);
    s->m = calloc(2 * s->n + 1, sizeof(float));
    if (!s->m)
        return -1;
    s->v = s->m + s->n;
    return 0;
}

void llm_train_state_free(llm_train_state *s)
{
    free(s->m);
    memset(s, 0, sizeof *s);
}

void llm_train_head_put(unsigned char *p, const llm_config *c, const llm_train_state *s,
                        uint32_t ver)
{
    uint32_t zero = 0;
    int32_t h[7];
    uint64_t n = s->n;
    float hp[5] = {s->lr, s->beta1, s->beta2, s->eps, s->weight_decay};
    uint64_t u[5] = {s->step, s->tokens_seen, s->data_pos, s->rng_key, s->rng_ctr};
    llm_header_of(c, h);
    memcpy(p, train_magic, 8);
    memcpy(p + 8, &ver, 4);
    memcpy(p + 12, &zero, 4);
    memcpy(p + 16, h, 28);
    memcpy(p + 44, u, 40);
    memcpy(p + 84, hp, 20);
    memcpy(p + 104, &zero, 4);
    memcpy(p + 108, &s->weights_hash, 8);
    memcpy(p + 116, &n, 8);
    memset(p + 124, 0, TRAIN_HEAD - 124);   /* reserved */
}

void llm_train_head_get(const unsigned char *p, llm_train_state *s)
{
    uint64_t u[5], wh;
    float hp[5];
    memcpy(u, p + 44, 40);
    memcpy(hp, p + 84, 20);
    memcpy(&wh, p + 108, 8);
    s->step = u[0];
    s->tokens_seen = u[1];
    s->data_pos = u[2];
    s->rng_key = u[3];
    s->rng_ctr = u[4];
    s->lr = hp[0];
    s->beta1 = hp[1];
    s->beta2 = hp[2];
    s->eps = hp[3];
    s->weight_decay = hp[4];
    s->weights_hash = wh;
}

int llm_train_state_write(const char *path, const llm_config *c, const llm_train_state *s,
                          char *err, size_t errlen)
{
    llm_config cc = *c;
    char why[200];
    if (llm_config_check(&cc, why, sizeof why) || s->n != llm_param_count(&cc)) {
        snprintf(err, errlen, "%s: not written: %s", path,
                 s->n != llm_param_count(&cc) ? "moments do not match the config" : why);
        return -1;
    }
    unsigned char head[TRAIN_HEAD];
    llm_train_head_put(head, &cc, s, TRAIN_VERSION);
    uint64_t sum = llm_fnv1a64(head, sizeof head, LLM_FNV_INIT);
    sum = llm_fnv1a64(s->m, s->n * sizeof(float), sum);
    sum = llm_fnv1a64(s->v, s->n * sizeof(float), sum);
    const void *parts[4] = {head, s->m, s->v, &sum};
    size_t sz[4] = {sizeof head, s->n * sizeof(float), s->n * sizeof(float), 8};
    return llm_write_atomic(path, parts, sz, 4, err, errlen);
}

int llm_train_state_read(const char *path, const llm_config *c, llm_train_state *s,
                         char *err, size_t errlen)
{
    llm_config cc = *c;
    char why[200];
    memset(s, 0, sizeof *s);
    if (llm_config_check(&cc, why, sizeof why)) {
        snprintf(err, errlen, "%s: %s", path, why);
        return -1;
    }
    size_t np = llm_param_count(&cc);
    uint64_t want = TRAIN_HEAD + 8ull * np + 8;
    unsigned char *b;
    size_t n;
    if (llm_read_file(path, want + 4096, &b, &n, err, errlen))
        return -1;
    int rc = -1;
    uint64_t sum, nn;
    uint32_t ver;
    int32_t h[7], mine[7];
    if (n < 16 || memcmp(b, train_magic, 8) != 0) {
        snprintf(err, errlen, "%s: not an MLSys Lab training state (bad magic)", path);
        goto out;
    }
    memcpy(&ver, b + 8, 4);
    if (ver != TRAIN_VERSION) {
        snprintf(err, errlen, "%s: version %u, this build reads %u", path, ver, TRAIN_VERSION);
        goto out;
    }
    if (n != want) {
        snprintf(err, errlen, "%s: %s: %zu bytes, expected %llu", path,
                 n < want ? "truncated" : "wrong size", n, (unsigned long long)want);
        goto out;
    }
    memcpy(&sum, b + n - 8, 8);
    if (llm_fnv1a64(b, n - 8, LLM_FNV_INIT) != sum) {
        snprintf(err, errlen, "%s: checksum mismatch (the file is damaged)", path);
        goto out;
    }
    memcpy(h, b + 16, 28);
    llm_header_of(&cc, mine);
    if (memcmp(h, mine, 28) != 0) {
        snprintf(err, errlen, "%s: saved for another model shape (dim %d, %d layers)", path,
                 (int)h[0], (int)h[2]);
        goto out;
    }
    memcpy(&nn, b + 116, 8);
    if (nn != np) {
        snprintf(err, errlen, "%s: holds %llu moments per tensor set, the model has %zu", path,
                 (unsigned long long)nn, np);
        goto out;
    }
    if (llm_train_state_alloc(s, &cc)) {
        snprintf(err, errlen, "%s: cannot allocate %zu moments", path, 2 * np);
        goto out;
    }
    s->version = TRAIN_VERSION;
    llm_train_head_get(b, s);
    memcpy(s->m, b + TRAIN_HEAD, np * sizeof(float));
    memcpy(s->v, b + TRAIN_HEAD + 4 * np, np * sizeof(float));
    rc = 0;
out:
    free(b);
    return rc;
}
