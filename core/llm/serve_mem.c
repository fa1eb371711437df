/* serve_mem.c - what a serving engine will take, reckoned before it takes it: the options'
 * defaults resolved; the KV pool sized by the run's longest sequence (max_model_len) rather
 * than the model's whole context, or, for a caller that cannot know it (a server), cut to
 * what half of the free memory holds; then the pool, the engine's scratch and the block
 * tables together against the memory this machine has free. llm_serve_create runs it first;
 * a lab's before() runs it to refuse in one line before any rank starts. */
#include "serve.h"

#include <stdio.h>

/* Bytes of one KV block: keys and values of every layer, the tokens it holds (prefix cache),
 * its bookkeeping. */
static double block_bytes(const llm_config *c, int bs)
{
    return 2.0 * c->n_layers * bs * (double)c->kv_dim * sizeof(float) + bs * sizeof(int) + 32;
}

/* The rest: the engine's scratch for a chunk of rows (scores over the context for every
 * head), the logits of a step, the block tables. */
static double fixed_bytes(const llm_config *c, const llm_serve_opts *o, int per_seq)
{
    int rows = o->max_num_batched_tokens < 256 ? o->max_num_batched_tokens : 256;
    return (double)llm_engine_bytes(c, rows) +
           (double)o->max_num_seqs * c->vocab_size * sizeof(float) * 2 +
           (double)o->max_num_seqs * per_seq * 12.0;
}

static void approx(double b, char *out, size_t n)
{
    mlsys_format_approx(b, out, n);
}

int llm_serve_plan(const llm_config *c, llm_serve_opts *o, llm_config *run, char *err,
                   size_t errlen)
{
    if (o->max_num_seqs <= 0)
        o->max_num_seqs = 16;
    if (o->max_num_batched_tokens <= 0)
        o->max_num_batched_tokens = 256;
    if (o->block_size <= 0)
        o->block_size = 16;
    if (o->max_model_len < 0 || o->max_model_len > c->seq_len) {
        snprintf(err, errlen, "serve: max_model_len %d: the model's context is %d tokens",
                 o->max_model_len, c->seq_len);
        return -1;
    }
    /* a caller that says how long its sequences get knows what its run needs: its cache is
     * that or nothing; one that does not (a server) gets what fits */
    int known = o->max_model_len > 0;
    if (!known)
        o->max_model_len = c->seq_len;
    *run = *c;
    run->seq_len = o->max_model_len;      /* the engine's view: no longer context than that */
    if (o->block_size > run->seq_len || o->max_num_seqs > 4096)
        return 0;                         /* llm_serve_create says what is out of range */
    int bs = o->block_size, per_seq = (run->seq_len + bs - 1) / bs;
    double have = (double)mlsys_mem_available(), per = block_bytes(run, bs);
    double rest = fixed_bytes(run, o, per_seq);
    if (o->n_blocks <= 0) {
        double want = (double)o->max_num_seqs * per_seq, fit = (have / 2 - rest) / per;
        if (want > fit && !known)         /* fewer full contexts at once (the scheduler
                                             preempts when the pool runs dry), one at least */
            want = fit > per_seq ? fit : per_seq;
        o->n_blocks = want > 1 << 30 ? 1 << 30 : (int)want;
    }
    double need = (double)o->n_blocks * per + rest;
    if (need > have) {
        char a[32], b[32], k[32], r[32];
        approx(need, a, sizeof a);
        approx(have, b, sizeof b);
        approx((double)o->n_blocks * per, k, sizeof k);
        approx(rest, r, sizeof r);
        snprintf(err, errlen, "serve: %s needed (a KV cache of %d blocks of %d tokens: %s, for "
                 "sequences of up to %d tokens; the engine's scratch: %s), more than this "
                 "machine has free: %s", a, o->n_blocks, bs, k, run->seq_len, r, b);
        return -1;
    }
    return 0;
}
