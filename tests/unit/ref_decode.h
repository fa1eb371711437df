/* ref_decode.h - the tests' reference decoder, independent of the generation engine: one
 * sequence on a contiguous KV cache, its prompt in one forward, then one forward per token
 * (what llm_generate did before it ran on the engine), plain or under JSON mode's mask.
 * With the batch-invariant GEMM the engine must draw exactly these tokens. Header-only: each suite is its own executable. */
#ifndef MLSYS_TEST_REF_DECODE_H
#define MLSYS_TEST_REF_DECODE_H

#include <check.h>
#include <math.h>
#include <stdlib.h>
#include "../../core/llm/llm.h"

/* Up to max_new tokens after prompt[0..n) into out, drawn with smp; stop_at_eos: BOS or EOS
 * ends it (not stored). Stops at the context like the engine (seq_len - n + 1 tokens).
 * Returns the count. */
static inline int ref_decode(const llm_config *c, const llm_weights *w, llm_sampler *smp,
                      const int *prompt, int n, int max_new, int stop_at_eos, int *out)
{
    char err[256];
    llm_fwd e;
    llm_kv kv;
    int S = c->seq_len, V = c->vocab_size;
    ck_assert_msg(llm_fwd_init(&e, c, w, n > 64 ? 64 : n, err, sizeof err) == 0, "%s", err);
    ck_assert_msg(llm_kv_init_contiguous(&kv, c, 1, 0, err, sizeof err) == 0, "%s", err);
    int *rows = malloc(sizeof(int) * 3 * (size_t)n);
    unsigned char *want = calloc((size_t)n, 1);
    float *logits = malloc(sizeof(float) * (size_t)V);
    for (int i = 0; i < n; i++)
        rows[i] = 0, rows[n + i] = i, rows[2 * n + i] = prompt[i];
    want[n - 1] = 1;
    ck_assert(kv.ops->reserve(&kv, 0, n) == 0);
    ck_assert_msg(llm_forward(&e, &kv, n, rows, rows + n, rows + 2 * n, want, logits, err,
                              sizeof err) == 0, "%s", err);
    int cap = max_new < S - n + 1 ? max_new : S - n + 1, k = 0;
    while (k < cap) {
        int tok = llm_sample(smp, logits);
        if (stop_at_eos && (tok == LLM_TOK_EOS || tok == LLM_TOK_BOS))
            break;
        out[k++] = tok;
        if (k == cap)
            break;
        int pos = n + k - 1, s0 = 0;
        ck_assert(kv.ops->reserve(&kv, 0, pos + 1) == 0);
        ck_assert(llm_forward(&e, &kv, 1, &s0, &pos, &tok, NULL, logits, err, sizeof err) == 0);
    }
    free(rows);
    free(want);
    free(logits);
    llm_kv_free(&kv);
    llm_fwd_fini(&e);
    return k;
}

/* The same under JSON mode's mask (what llm_json_generate did before the engine): each
 * token drawn from the logits with every token g's automaton refuses (or that could not close
 * the value within the tokens left) at -inf, fed to the automaton; it stops when the value is
 * complete. Returns the count; *done = 1 when complete. */
static inline int ref_decode_json(const llm_config *c, const llm_weights *w, llm_sampler *smp,
                           llm_json_grammar *g, const int *prompt, int n, int max_new,
                           int *out, int *done)
{
    char err[256];
    llm_fwd e;
    llm_kv kv;
    int V = c->vocab_size;
    ck_assert_msg(llm_fwd_init(&e, c, w, n > 64 ? 64 : n, err, sizeof err) == 0, "%s", err);
    ck_assert_msg(llm_kv_init_contiguous(&kv, c, 1, 0, err, sizeof err) == 0, "%s", err);
    int *rows = malloc(sizeof(int) * 3 * (size_t)n);
    unsigned char *want = calloc((size_t)n, 1), *allowed = malloc((size_t)V);
    float *logits = malloc(sizeof(float) * (size_t)V);
    for (int i = 0; i < n; i++)
        rows[i] = 0, rows[n + i] = i, rows[2 * n + i] = prompt[i];
    want[n - 1] = 1;
    ck_assert(kv.ops->reserve(&kv, 0, n) == 0);
    ck_assert(llm_forward(&e, &kv, n, rows, rows + n, rows + 2 * n, want, logits, err,
                          sizeof err) == 0);
    llm_json_state js;
    llm_json_start(g, &js);
    int k = 0;
    while (k < max_new && !llm_json_done(&js)) {
        ck_assert(llm_json_mask(g, &js, max_new - k, allowed) > 0);
        for (int t = 0; t < V; t++)
            if (!allowed[t])
                logits[t] = -INFINITY;
        int tok = llm_sample(smp, logits);
        ck_assert(allowed[tok] && llm_json_feed_token(g, &js, tok) == 0);
        out[k++] = tok;
        if (llm_json_done(&js))
            break;
        int pos = n + k - 1, s0 = 0;
        ck_assert(kv.ops->reserve(&kv, 0, pos + 1) == 0);
        ck_assert(llm_forward(&e, &kv, 1, &s0, &pos, &tok, NULL, logits, err, sizeof err) == 0);
    }
    *done = llm_json_done(&js);
    free(rows);
    free(want);
    free(allowed);
    free(logits);
    llm_kv_free(&kv);
    llm_fwd_fini(&e);
    return k;
}

#endif
