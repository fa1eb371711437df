/* fuzz_llm.c - libFuzzer target for the model's file readers: llama2.c's model .bin
 * (llm_checkpoint_read), tokenizer.bin (llm_tokfile_read, its vocabulary read to the end of
 * the file or announced by a model), the training checkpoint (llm_ckpt_read's model.train,
 * versions 1 and 2, beside a model.bin) and chapter 13's reward model (rl_rm_load). The
 * first byte picks the reader, the rest is the file. Besides crashes, leaks and undefined behaviour (ASan/UBSan), it checks the readers'
 * promises: 0 or -1; a refusal is one line that starts with the path; nothing stays
 * allocated after a refusal; what is accepted is usable: a tokenizer encodes and decodes any
 * bytes with ids in range, a model's configuration passes its own check, its weights are
 * finite and one forward runs. Built and run by tests/fuzz/run_llm.sh (clang
 * -fsanitize=fuzzer,address), which run.sh calls. */
#include "../../core/llm/llm.h"
#include "../../core/rl/rlhf.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char g_dir[256];

static void check(int cond, const char *what)
{
    if (!cond) {
        fprintf(stderr, "fuzz_llm: broken promise: %s\n", what);
        abort();
    }
}

/* the scratch directory goes with the fuzzer (a crash keeps it, beside its artifact) */
static void cleanup(void)
{
    const char *names[] = {"model.bin", "tokenizer.bin", "model.train", "reward.bin"};
    char p[400];
    for (int i = 0; i < 4; i++) {
        snprintf(p, sizeof p, "%s/%s", g_dir, names[i]);
        unlink(p);
    }
    rmdir(g_dir);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    setenv("MLSYS_MEM_LIMIT", "1G", 1);     /* what a reader may ask for, within the fuzzer's */
    const char *base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    snprintf(g_dir, sizeof g_dir, "%s/fuzz-llm-XXXXXX", base);
    check(mkdtemp(g_dir) != NULL, "a scratch directory");
    atexit(cleanup);
    return 0;
}

static void put(const char *path, const uint8_t *d, size_t n)
{
    FILE *f = fopen(path, "wb");
    check(f != NULL, "the input file can be written");
    if (n)
        check(fwrite(d, 1, n, f) == n, "the input file is written");
    fclose(f);
}

static void refused(int rc, const char *err, const char *path)
{
    check(rc == 0 || rc == -1, "the return value is 0 or -1");
    if (rc) {
        check(err[0] != 0, "a refusal has a message");
        check(strchr(err, '\n') == NULL, "the message is one line");
        check(strncmp(err, path, strlen(path)) == 0 || strstr(err, path) != NULL,
              "the message names the file");
    }
}

/* A model that was accepted is usable: its config holds, its weights are finite, and the
 * engine runs one forward (unless it declines the size, in one line). */
static void use_model(const llm_config *c, const llm_weights *w)
{
    llm_config cc = *c;
    char err[512];
    check(llm_config_check(&cc, err, sizeof err) == 0, "an accepted config passes its check");
    check(w->n_floats == llm_file_floats(c), "the weights fill the file's payload");
    for (size_t i = 0; i < w->n_floats; i++)
        check(isfinite(w->mem[i]), "accepted weights are finite");
    llm_fwd e;
    llm_kv kv;
    if (llm_fwd_init(&e, c, w, 1, err, sizeof err) != 0) {
        check(strchr(err, '\n') == NULL && err[0], "the engine declines in one line");
        return;
    }
    if (llm_kv_init_contiguous(&kv, c, 1, 1, err, sizeof err) == 0) {
        int seq = 0, pos = 0, tok = 1 % c->vocab_size;
        float *logits = malloc((size_t)c->vocab_size * sizeof(float));
        check(logits != NULL, "logits");
        check(kv.ops->reserve(&kv, 0, 1) == 0, "one position reserved");
        check(llm_forward(&e, &kv, 1, &seq, &pos, &tok, NULL, logits, err, sizeof err) == 0,
              "one forward of a valid row runs");
        free(logits);
        llm_kv_free(&kv);
    }
    llm_fwd_fini(&e);
}

/* A tokenizer that was accepted encodes and decodes any bytes, ids in range. */
static void use_tokenizer(const llm_tokenizer *t, const uint8_t *text, size_t n)
{
    check(t->vocab_size >= 259, "an accepted vocabulary holds the 3 specials and 256 bytes");
    if (n > 512)
        n = 512;
    int *ids = malloc((n + 2) * sizeof(int));
    check(ids != NULL, "ids");
    size_t k = llm_bpe_encode_prompt(t, (const char *)text, n, 1, ids);
    check(k <= n + 2, "no more ids than bytes (+ BOS and the dummy space)");
    for (size_t i = 0; i < k; i++)
        check(ids[i] >= 0 && ids[i] < t->vocab_size, "every id is in the vocabulary");
    long len = llm_bpe_decode(t, ids, k, NULL, 0);
    check(len >= 0, "what was encoded decodes");
    for (size_t i = 0; i + 1 < k; i++) {
        int l;
        llm_bpe_token_bytes(t, ids[i], ids[i + 1], &l);
        check(l >= 0, "a token's bytes");
    }
    free(ids);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    int which = data[0] % 5;
    const uint8_t *d = data + 1;
    size_t n = size - 1;
    char path[400], err[512];
    err[0] = 0;
    if (which == 0) {                       /* a model .bin */
        snprintf(path, sizeof path, "%s/model.bin", g_dir);
        put(path, d, n);
        llm_config c;
        llm_weights w;
        int rc = llm_checkpoint_read(path, &c, &w, err, sizeof err);
        refused(rc, err, path);
        if (rc) {
            check(w.mem == NULL, "nothing stays allocated after a refusal");
            return 0;
        }
        use_model(&c, &w);
        llm_weights_free(&w);
    } else if (which <= 2) {                /* tokenizer.bin, to its end or announced */
        int vocab = 0;
        if (which == 2 && n >= 4) {
            int32_t v;
            memcpy(&v, d, 4);
            vocab = v;
            d += 4;
            n -= 4;
        }
        snprintf(path, sizeof path, "%s/tokenizer.bin", g_dir);
        put(path, d, n);
        llm_tokenizer t;
        int rc = llm_tokfile_read(path, vocab, &t, err, sizeof err);
        refused(rc, err, path);
        if (rc) {
            check(t.piece == NULL && t.table == NULL, "nothing stays allocated after a refusal");
            return 0;
        }
        use_tokenizer(&t, d, n);
        llm_tokenizer_free(&t);
    } else if (which == 4) {                /* a reward model */
        snprintf(path, sizeof path, "%s/reward.bin", g_dir);
        put(path, d, n);
        rl_rm m;
        int rc = rl_rm_load(&m, path, err, sizeof err);
        refused(rc, err, path);
        if (rc) {
            check(m.w.mem == NULL && m.head == NULL, "nothing stays allocated after a refusal");
            return 0;
        }
        use_model(&m.c, &m.w);
        for (int i = 0; i <= m.c.dim; i++)
            check(isfinite(m.head[i]), "an accepted head is finite");
        rl_rm_free(&m);
    } else {                                /* model.train: the first half-word of the
                                               rest says where model.bin's bytes begin */
        size_t cut = n >= 2 ? ((size_t)d[0] | (size_t)d[1] << 8) : 0;
        d += n >= 2 ? 2 : 0;
        n -= n >= 2 ? 2 : 0;
        cut = cut <= n ? cut : n;
        snprintf(path, sizeof path, "%s/model.train", g_dir);
        put(path, d, n - cut);
        char bin[400];
        snprintf(bin, sizeof bin, "%s/model.bin", g_dir);
        put(bin, d + (n - cut), cut);
        llm_config c;
        llm_weights w;
        llm_train_state s;
        int stale = -1;
        int rc = llm_ckpt_read(g_dir, &c, &w, &s, &stale, err, sizeof err);
        check(rc == 0 || rc == -1, "the return value is 0 or -1");
        if (rc) {
            check(err[0] && strchr(err, '\n') == NULL, "a refusal is one line");
            check(w.mem == NULL && s.m == NULL, "nothing stays allocated after a refusal");
            return 0;
        }
        check(stale == 0 || stale == 1, "model.bin is the checkpoint's or one behind");
        check(s.n == llm_param_count(&c), "one moment per parameter");
        check(s.weights_hash == llm_weights_hash(&w), "the weights are the ones it records");
        use_model(&c, &w);
        llm_weights_free(&w);
        llm_train_state_free(&s);
    }
    return 0;
}
