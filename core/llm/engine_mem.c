/* engine_mem.c - what an engine will take, reckoned before it takes it: the options'
 * defaults resolved; the KV pool sized by the run's longest sequence (max_model_len) rather
 * than the model's whole context, or, for a caller that cannot know it (a server), cut to
 * what half of the free memory holds; then the pool, the runner's scratch, the logits, the
 * draft model's share and the block tables together against the memory this machine has
 * free. llm_engine_create runs it first; a lab's before() runs it to refuse in one line
 * before any rank starts. */
#include "engine_internal.h"

#include <stdio.h>

int eng_runner_rows(const llm_config *c, const llm_engine_opts *d)
{
    /* not fewer for want of free memory: the plan says what does not fit */
    int want = d->max_num_batched_tokens < 256 ? d->max_num_batched_tokens : 256;
    while (want > 1 && llm_fwd_bytes(c, want) > LLM_FWD_MAX_BYTES)
        want /= 2;
    return want;
}

int eng_max_logits(const llm_engine_opts *d)
{
    long n = (long)d->max_num_seqs * (d->spec_k > 0 ? d->spec_k + 1 : 1);
    return (int)(n < d->max_num_batched_tokens || d->spec_k <= 0 ? n
                                                                 : d->max_num_batched_tokens);
}

/* Bytes of one KV block: keys and values of every layer, the tokens it holds (the prefix
 * cache's), its bookkeeping. */
static double block_bytes(const llm_config *c, int bs)
{
    return 2.0 * c->n_layers * bs * (double)c->kv_dim * sizeof(float) + bs * sizeof(int) + 32;
}

/* Everything but the target's pool, for options whose defaults are filled in and c the
 * engine's view (its context cut to max_model_len): the runner's scratch and logits, the
 * block tables, on a tensor-parallel group this rank's copy of its share of the weights,
 * and with speculation the draft's cache, scratch and logits. */
static double rest_bytes(const llm_config *c, const llm_engine_opts *d)
{
    int per_seq = (d->max_model_len + d->block_size - 1) / d->block_size;
    double b = (double)llm_fwd_bytes(c, eng_runner_rows(c, d)) +
               (double)eng_max_logits(d) * c->vocab_size * sizeof(float) +
               (double)d->max_num_seqs * per_seq * 12.0;
    if (d->spec_k > 0 && d->draft_c) {
        llm_config dc = *d->draft_c;
        if (dc.seq_len > d->max_model_len)
            dc.seq_len = d->max_model_len;
        b += (double)d->max_num_seqs * per_seq * block_bytes(&dc, d->block_size) +
             (double)llm_fwd_bytes(&dc, 256) +
             (double)d->max_num_seqs * (d->spec_k + 1) * c->vocab_size * sizeof(float);
    }
    if (d->tp && mlsys_size(d->tp) > 1) {
        double T = mlsys_size(d->tp), D = c->dim;
        b += (double)c->n_layers * sizeof(float) *
             (2 * D * D / T + 2 * (double)c->kv_dim * D / T + 3 * D * c->hidden_dim / T);
    }
    return b;
}

/* Defaults and ranges; n_blocks left to the caller. known: the caller said how long its
 * sequences get. */
static int resolve(const llm_config *c, llm_engine_opts *o, int *known, char *err,
                   size_t errlen)
{
    if (o->max_num_seqs <= 0)
        o->max_num_seqs = 16;
    if (o->max_num_batched_tokens <= 0)
        o->max_num_batched_tokens = 256;
    if (o->block_size <= 0)
        o->block_size = 16;
    if (o->max_model_len < 0 || o->max_model_len > c->seq_len) {
        snprintf(err, errlen, "engine: max_model_len %d: the model's context holds %d tokens",
                 o->max_model_len, c->seq_len);
        return -1;
    }
    if (o->tp) {
        int T = mlsys_size(o->tp);
        if (mlsys_rank(o->tp) != 0 || c->n_heads % T || c->n_kv_heads % T ||
            c->hidden_dim % T) {
            snprintf(err, errlen, "engine: on rank %d of a tensor-parallel group of %d: the "
                     "engine runs on rank 0, and %d must divide the heads (%d), the key/value "
                     "heads (%d) and the MLP's hidden units (%d)", mlsys_rank(o->tp), T, T,
                     c->n_heads, c->n_kv_heads, c->hidden_dim);
            return -1;
        }
    }
    *known = o->max_model_len > 0;
    if (!*known)
        o->max_model_len = c->seq_len;
    if (o->max_num_seqs > 4096 || o->max_num_batched_tokens > 65536 ||
        o->max_num_batched_tokens < o->max_num_seqs || o->block_size > c->seq_len) {
        snprintf(err, errlen, "engine: max_num_seqs %d (1..4096), max_num_batched_tokens %d "
                 "(max_num_seqs..65536), block_size %d (1..%d, the model's context)",
                 o->max_num_seqs, o->max_num_batched_tokens, o->block_size, c->seq_len);
        return -1;
    }
    return 0;
}

int llm_engine_plan(const llm_config *c, llm_engine_opts *o, char *err, size_t errlen)
{
    int known;
    if (resolve(c, o, &known, err, errlen))
        return -1;
    llm_config run = *c;
    run.seq_len = o->max_model_len;       /* the engine's view: no longer context than that */
    int bs = o->block_size, per_seq = (run.seq_len + bs - 1) / bs;
    double rest = rest_bytes(&run, o);
    if (o->tp)                            /* this rank's key/value heads */
        llm_tp_kv_config(&run, mlsys_size(o->tp), &run);
    double have = (double)mlsys_mem_available(), per = block_bytes(&run, bs);
    if (o->n_blocks <= 0) {
        /* a caller that says how long its sequences get knows what its run needs: its cache
         * is that or nothing; one that does not (a server) gets what fits in half the free
         * memory: fewer full contexts at once (the scheduler preempts when the pool runs
         * dry), one at least */
        double want = (double)o->max_num_seqs * per_seq, fit = (have / 2 - rest) / per;
        if (want > fit && !known)
            want = fit > per_seq ? fit : per_seq;
        o->n_blocks = want > 1 << 30 ? 1 << 30 : (int)want;
    }
    if (o->n_blocks < per_seq) {
        snprintf(err, errlen, "engine: %d KV blocks of %d tokens hold less than one sequence "
                 "of %d tokens (%d blocks)", o->n_blocks, bs, run.seq_len, per_seq);
        return -1;
    }
    double need = (double)o->n_blocks * per + rest;
    if (need > have) {
        char a[32], b[32], k[32], r[32];
        mlsys_format_approx(need, a, sizeof a);
        mlsys_format_approx(have, b, sizeof b);
        mlsys_format_approx((double)o->n_blocks * per, k, sizeof k);
        mlsys_format_approx(rest, r, sizeof r);
        snprintf(err, errlen, "engine: %s needed (a KV cache of %d blocks of %d tokens: %s, "
                 "for sequences of up to %d tokens; scratch, logits and tables: %s), more than "
                 "this machine has free: %s", a, o->n_blocks, bs, k, run.seq_len, r, b);
        return -1;
    }
    return 0;
}

uint64_t llm_engine_bytes(const llm_config *c, const llm_engine_opts *o)
{
    llm_engine_opts d = *o;
    int known;
    char err[256];
    if (resolve(c, &d, &known, err, sizeof err))
        return 0;
    llm_config run = *c;
    run.seq_len = d.max_model_len;
    int per_seq = (run.seq_len + d.block_size - 1) / d.block_size;
    if (d.n_blocks <= 0)        /* as a known length sizes it (the free memory aside) */
        d.n_blocks = d.max_num_seqs * per_seq;
    double rest = rest_bytes(&run, &d);
    if (d.tp)
        llm_tp_kv_config(&run, mlsys_size(d.tp), &run);
    double b = (double)d.n_blocks * block_bytes(&run, d.block_size) + rest;
    return b >= 1.8e19 ? UINT64_MAX : (uint64_t)b;
}

int llm_engine_tp_shape(const llm_config *c, llm_engine_opts *o, llm_tp_shape *sh, char *err,
                        size_t errlen)
{
    llm_engine_opts d = *o;
    if (llm_engine_plan(c, &d, err, errlen))
        return -1;
    o->n_blocks = d.n_blocks;
    o->max_model_len = d.max_model_len;
    llm_config run = *c;
    run.seq_len = d.max_model_len;
    *sh = (llm_tp_shape){.max_num_seqs = d.max_num_seqs, .n_slots = d.n_blocks * d.block_size,
                         .max_model_len = d.max_model_len,
                         .fwd_rows = eng_runner_rows(&run, &d), .max_logits = eng_max_logits(&d)};
    return 0;
}
