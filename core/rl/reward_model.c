/* reward_model.c - chapter 13's reward model: the lab's transformer with a scalar head on the
 * final hidden state of a line's last token, trained on preference pairs (the right sum beats
 * a wrong one) with the Bradley-Terry loss -log σ(r_w - r_l), AdamW, one process. Also its
 * file ("MLSYSRM1": header, body, head) and the held-out preference accuracy. */
#include "rlhf.h"
#include "../llm/model.h"
#include "../llm/llm_internal.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define RM_T RL_RM_T

int rl_rm_init(rl_rm *m, const llm_config *c, const llm_weights *w, char *err, size_t errlen)
{
    memset(m, 0, sizeof *m);
    m->c = *c;
    if (llm_weights_alloc(&m->w, &m->c, err, errlen))
        return -1;
    memcpy(m->w.mem, w->mem, w->n_floats * sizeof(float));
    m->head = mlsys_xcalloc((size_t)c->dim + 1, sizeof(float));
    return 0;
}

void rl_rm_free(rl_rm *m)
{
    llm_weights_free(&m->w);
    free(m->head);
    m->head = NULL;
}

static const float *last_row(const nn_tf *tf, int b, int T, int len, int C)
{
    return tf->xn_final + ((size_t)b * T + (size_t)(len - 1)) * C;
}

void rl_rm_score(const rl_rm *m, nn_tf *tf, const int *ids, const int *len, int B, int T,
                 float *score)
{
    int C = m->c.dim;
    nn_tf_forward_hidden(tf, &m->w, ids, B, T);     /* a scalar head: no vocabulary logits */
    for (int b = 0; b < B; b++)
        nn_scalar_head_forward(&score[b], last_row(tf, b, T, len[b], C), m->head,
                               m->head + C, 1, C);
}

double rl_rm_pair_loss(const rl_rm *m, nn_tf *tf, const int *ids, const int *len, int P, int T,
                       llm_weights *g, float *ghead, double *correct)
{
    int C = m->c.dim, B = 2 * P;
    float *r = mlsys_xmalloc((size_t)B * sizeof(float));
    rl_rm_score(m, tf, ids, len, B, T, r);
    double loss = 0.0, ok = 0.0;
    float *dr = mlsys_xcalloc((size_t)B, sizeof(float));
    for (int i = 0; i < P; i++) {
        double d = (double)r[i] - r[P + i];          /* r_w - r_l */
        /* softplus(-d) without overflow; its derivative in d is -σ(-d) */
        loss += d > 0 ? log1p(exp(-d)) : -d + log1p(exp(d));
        double s = 1.0 / (1.0 + exp(d));
        dr[i] = (float)(-s / P);
        dr[P + i] = (float)(s / P);
        ok += d > 0 ? 1.0 : d == 0 ? 0.5 : 0.0;
    }
    if (correct)
        *correct = ok;
    if (g || ghead) {
        memset(tf->d_hidden, 0, (size_t)B * T * C * sizeof(float));
        float *scratch = ghead ? NULL : mlsys_xcalloc((size_t)C + 1, sizeof(float));
        float *gh = ghead ? ghead : scratch;
        for (int b = 0; b < B; b++) {
            const float *h = last_row(tf, b, T, len[b], C);
            float *dh = tf->d_hidden + ((size_t)b * T + (size_t)(len[b] - 1)) * C;
            nn_scalar_head_backward(dh, gh, gh + C,
                                    &dr[b], h, m->head, 1, C);
        }
        free(scratch);
        if (g)
            nn_tf_backward_from(tf, &m->w, g, ids, NULL, tf->d_hidden, NULL, NULL);
    }
    free(dr);
    free(r);
    return loss / P;
}

/* ---- files ---- */

int rl_rm_save(const rl_rm *m, const char *path, char *err, size_t errlen)
{
    int32_t hdr[7] = {m->c.dim, m->c.hidden_dim, m->c.n_layers, m->c.n_heads, m->c.n_kv_heads,
                      m->c.shared_classifier ? m->c.vocab_size : -m->c.vocab_size,
                      m->c.seq_len};
    const void *parts[4] = {"MLSYSRM1", hdr, m->w.mem, m->head};
    size_t sizes[4] = {8, sizeof hdr, m->w.n_floats * sizeof(float),
                       ((size_t)m->c.dim + 1) * sizeof(float)};
    return llm_write_atomic(path, parts, sizes, 4, err, errlen);
}

/* The reader keeps the promise of model.bin's (checkpoint.c): a regular file only (a FIFO
 * is refused, not waited on), the header checked and the size it implies compared with the
 * file's and with free memory before anything is allocated, every value finite, nothing
 * after the head, and every refusal one line naming the file. */
int rl_rm_load(rl_rm *m, const char *path, char *err, size_t errlen)
{
    memset(m, 0, sizeof *m);
    int fd;
    uint64_t n;
    char why[200];
    if (llm_open_regular(path, LLM_MAX_FILE_BYTES, &fd, &n, err, errlen))
        return -1;
    char magic[8];
    int32_t h[7];
    llm_config c;
    int rc = -1;
    if (n < 8 + sizeof h || llm_read_exact(fd, magic, 8, path, err, errlen) ||
        memcmp(magic, "MLSYSRM1", 8) || llm_read_exact(fd, h, sizeof h, path, err, errlen)) {
        snprintf(err, errlen, "%s: not a reward model (no MLSYSRM1 header)", path);
        goto out;
    }
    if (llm_config_of_header(h, &c, why, sizeof why)) {
        snprintf(err, errlen, "%s: bad header: %s", path, why);
        goto out;
    }
    uint64_t nf = llm_file_floats(&c), nh = (uint64_t)c.dim + 1;
    uint64_t want = 8 + sizeof h + 4 * (nf + nh);
    if (n != want) {
        snprintf(err, errlen, "%s: %s: %llu bytes, the header (dim %d, %d layers, vocab %d) "
                 "needs %llu", path, n < want ? "truncated" : "wrong size",
                 (unsigned long long)n, c.dim, c.n_layers, c.vocab_size,
                 (unsigned long long)want);
        goto out;
    }
    if (want > mlsys_mem_available()) {
        snprintf(err, errlen, "%s: %llu bytes of reward model, more than this machine has free",
                 path, (unsigned long long)want);
        goto out;
    }
    if (llm_weights_alloc(&m->w, &c, why, sizeof why)) {
        snprintf(err, errlen, "%s: %s", path, why);
        goto out;
    }
    m->c = c;
    m->head = mlsys_xcalloc(nh, sizeof(float));
    if (llm_read_exact(fd, m->w.mem, nf * sizeof(float), path, err, errlen) ||
        llm_read_exact(fd, m->head, nh * sizeof(float), path, err, errlen)) {
        rl_rm_free(m);
        goto out;
    }
    for (uint64_t i = 0; i < nf + nh; i++) {
        float v = i < nf ? m->w.mem[i] : m->head[i - nf];
        if (!isfinite(v)) {
            snprintf(err, errlen, "%s: %s %llu of %llu is not finite", path,
                     i < nf ? "weight" : "head value", (unsigned long long)(i < nf ? i : i - nf),
                     (unsigned long long)(i < nf ? nf : nh));
            rl_rm_free(m);
            goto out;
        }
    }
    rc = 0;
out:
    close(fd);
    return rc;
}

/* ---- training ---- */

void rl_rm_train_defaults(rl_rm_train_opts *o)
{
    o->steps = 600;
    o->pairs = 32;
    o->lr = 5e-4f;
    o->max_operand = 9;
    o->eval_pairs = 256;
    o->seed = 7;
    o->quiet = 1;
    o->log_every = 25;
}

/* BOS + " line" into ids[RM_T] (right-padded with BOS); returns the real length. */
static int encode_line(const llm_tokenizer *tok, const char *line, int *ids)
{
    int tmp[128];
    size_t n = strlen(line);
    if (n > 100)
        n = 100;
    int k = (int)llm_bpe_encode_prompt(tok, line, n, 1, tmp);
    if (k > RM_T)
        k = RM_T;
    for (int i = 0; i < RM_T; i++)
        ids[i] = i < k ? tmp[i] : LLM_TOK_BOS;
    return k;
}

/* A line that is no sum line: the prompt with nothing, a doubled space, stray characters
 * around the answer, or a word instead of it. */
static void junk_line(char *line, size_t cap, const char *pr, int c, mlsys_rng *r)
{
    static const char chars[] = "abcdefghijklmnopqrstuvwxyz.,:;!?\"'{}[]()+-=*#";
    char j[4];
    int nj = 1 + (int)(mlsys_rng_u64(r) % 3);
    for (int i = 0; i < nj; i++)
        j[i] = chars[mlsys_rng_u64(r) % (sizeof chars - 1)];
    j[nj] = '\0';
    switch (mlsys_rng_u64(r) % 6) {
    case 0: snprintf(line, cap, "%s", pr); break;
    case 1: snprintf(line, cap, "%s  %d", pr, c); break;
    case 2: snprintf(line, cap, "%s %d%s", pr, c, j); break;
    case 3: snprintf(line, cap, "%s %s", pr, j); break;
    case 4: snprintf(line, cap, "%s%s%d", pr, j, c); break;
    default: snprintf(line, cap, "%s %d %s", pr, c, j); break;
    }
}

/* P pairs into ids [2P, RM_T]: problems held out or not as held_out says. */
static void make_pairs(const llm_tokenizer *tok, int max_operand, int P, int held_out,
                       mlsys_rng *r, int *ids, int *len)
{
    for (int i = 0; i < P; i++) {
        rl_sum p;
        do
            rl_sum_draw(&p, max_operand, r);
        while (rl_sum_held_out(&p) != held_out);
        char pr[32], line[64];
        rl_sum_prompt(&p, pr, sizeof pr);
        snprintf(line, sizeof line, "%s %d", pr, rl_sum_answer(&p));
        len[i] = encode_line(tok, line, ids + (size_t)i * RM_T);
        /* three in eight rejected lines are no sum line at all: the rule ranks them last */
        uint64_t k = mlsys_rng_u64(r) % 8;
        if (k < 3)
            junk_line(line, sizeof line, pr, rl_sum_answer(&p), r);
        else
            snprintf(line, sizeof line, "%s %d", pr, rl_sum_wrong(&p, r));
        len[P + i] = encode_line(tok, line, ids + (size_t)(P + i) * RM_T);
    }
}

void rl_rm_score_lines(const rl_rm *m, nn_tf *tf, const llm_tokenizer *tok,
                       const char *const *lines, int B, float *score)
{
    int *ids = mlsys_xmalloc((size_t)B * RM_T * sizeof(int));
    int *len = mlsys_xmalloc((size_t)B * sizeof(int));
    int T = 1;
    for (int b = 0; b < B; b++) {
        len[b] = encode_line(tok, lines[b], ids + (size_t)b * RM_T);
        T = len[b] > T ? len[b] : T;
    }
    /* rows as long as the longest line, not RM_T: the padding after a line's last token is
     * never read (causal attention), so the scores are the same for less work */
    for (int b = 1; b < B; b++)
        memmove(ids + (size_t)b * T, ids + (size_t)b * RM_T, (size_t)T * sizeof(int));
    rl_rm_score(m, tf, ids, len, B, T, score);
    free(ids);
    free(len);
}

double rl_rm_accuracy(const rl_rm *m, const llm_tokenizer *tok, int max_operand, int n,
                      uint64_t seed, int held_out)
{
    const int P = 64;
    nn_tf tf;
    if (n <= 0 || nn_tf_init(&tf, &m->c, 2 * P, RM_T))
        return 0.0;
    int *ids = mlsys_xmalloc((size_t)2 * P * RM_T * sizeof(int));
    int *len = mlsys_xmalloc((size_t)2 * P * sizeof(int));
    mlsys_rng r;
    mlsys_rng_seed(&r, seed);
    double ok = 0.0;
    int done = 0;
    while (done < n) {
        int k = n - done < P ? n - done : P;
        make_pairs(tok, max_operand, P, held_out, &r, ids, len);
        /* the pairs beyond k are scored and ignored: the batch shape stays fixed */
        float s[2 * P];
        rl_rm_score(m, &tf, ids, len, 2 * P, RM_T, s);
        for (int i = 0; i < k; i++)         /* a tie is a coin flip: half right */
            ok += s[i] > s[P + i] ? 1.0 : s[i] == s[P + i] ? 0.5 : 0.0;
        done += k;
    }
    free(ids);
    free(len);
    nn_tf_fini(&tf);
    return ok / n;
}

int rl_rm_train(rl_rm *m, const llm_tokenizer *tok, const rl_rm_train_opts *o,
                rl_rm_report *rep, char *err, size_t errlen)
{
    memset(rep, 0, sizeof *rep);
    double t0 = mlsys_now_s();
    int P = o->pairs, C = m->c.dim;
    nn_tf tf;
    llm_weights g;
    if (nn_tf_init(&tf, &m->c, 2 * P, RM_T)) {
        snprintf(err, errlen, "reward model: cannot hold %d pairs", P);
        return -1;
    }
    if (llm_weights_alloc(&g, &m->c, err, errlen)) {
        nn_tf_fini(&tf);
        return -1;
    }
    float *ghead = mlsys_xcalloc((size_t)C + 1, sizeof(float));
    nn_adamw ob, oh;
    nn_adamw_init(&ob, o->lr, 0.9f, 0.95f, 1e-8f, 0.0f, 0, m->w.n_floats);
    nn_adamw_init(&oh, o->lr, 0.9f, 0.95f, 1e-8f, 0.0f, 0, (size_t)C + 1);
    int *ids = mlsys_xmalloc((size_t)2 * P * RM_T * sizeof(int));
    int *len = mlsys_xmalloc((size_t)2 * P * sizeof(int));
    mlsys_rng r;
    mlsys_rng_seed(&r, o->seed);
    rep->heldout_acc0 = rl_rm_accuracy(m, tok, o->max_operand, o->eval_pairs, o->seed ^ 0xe7a1,
                                       1);
    double first = 0.0, last = 0.0;
    int nfirst = 0, nlast = 0, seen_last = 0;
    double ok_last = 0.0;
    for (int s = 0; s < o->steps; s++) {
        make_pairs(tok, o->max_operand, P, 0, &r, ids, len);
        memset(g.mem, 0, g.n_floats * sizeof(float));
        memset(ghead, 0, ((size_t)C + 1) * sizeof(float));
        double ok;
        double loss = rl_rm_pair_loss(m, &tf, ids, len, P, RM_T, &g, ghead, &ok);
        /* a short cosine: the last steps settle */
        float lr = o->lr * (0.1f + 0.9f * 0.5f * (1.0f + cosf(3.14159265f * s / o->steps)));
        ob.lr = oh.lr = lr;
        nn_adamw_step(&ob, m->w.mem, g.mem);
        nn_adamw_step(&oh, m->head, ghead);
        if (s < 10) {
            first += loss;
            nfirst++;
        }
        if (s >= o->steps - 10) {
            last += loss;
            nlast++;
            ok_last += ok;
            seen_last += P;
        }
        if (!o->quiet && ((s + 1) % o->log_every == 0 || s == 0))
            printf("  step %4d  loss %.4f  batch accuracy %5.1f%%\n", s + 1, loss,
                   100.0 * ok / P);
    }
    rep->first_loss = nfirst ? first / nfirst : 0.0;
    rep->last_loss = nlast ? last / nlast : 0.0;
    rep->train_acc = seen_last ? ok_last / seen_last : 0.0;
    rep->heldout_acc = rl_rm_accuracy(m, tok, o->max_operand, o->eval_pairs, o->seed ^ 0xe7a1,
                                      1);
    rep->seconds = mlsys_now_s() - t0;
    nn_adamw_fini(&ob);
    nn_adamw_fini(&oh);
    free(ids);
    free(len);
    free(ghead);
    llm_weights_free(&g);
    nn_tf_fini(&tf);
    return 0;
}
