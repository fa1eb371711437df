/* batch.c - generation of B sequences at once, the loop a server's model runner runs: one
 * prefill forward for all the prompts (each wants the logits of its last token only), then
 * decode steps where every unfinished sequence contributes one row to a single forward, so
 * each weight is read once per step however many sequences there are. */
#include "llm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Record token tok of sequence b; 1 when the sequence is finished after it. */
static int take(int b, int tok, int cap, int **out, int *n_out, int prev,
                const llm_gen_opts *o)
{
    if (o->stop_at_eos && (tok == LLM_TOK_EOS || tok == LLM_TOK_BOS))
        return 1;
    out[b][n_out[b]++] = tok;
    if (o->on_token)
        o->on_token(o->u, b, prev, tok);
    return n_out[b] >= cap;
}

int llm_generate(llm_fwd *e, llm_kv *kv, llm_sampler *samplers, int B,
                 const int *const *prompts, const int *n_prompt, int **out, int *n_out,
                 const llm_gen_opts *o, llm_gen_stats *st, char *err, size_t errlen)
{
    const llm_config *c = &e->c;
    int S = c->seq_len, V = c->vocab_size;
    memset(st, 0, sizeof *st);
    if (B < 1 || B > e->max_rows || (!o->no_cache && kv->n_seqs < B)) {
        snprintf(err, errlen, "generate: %d sequences: the engine holds %d rows, the cache "
                 "%d sequences", B, e->max_rows, o->no_cache ? B : kv->n_seqs);
        return -1;
    }
    long total = 0;
    for (int b = 0; b < B; b++) {
        if (n_prompt[b] < 1 || n_prompt[b] > S) {
            snprintf(err, errlen, "generate: sequence %d: prompt of %d tokens (1..%d allowed)",
                     b, n_prompt[b], S);
            return -1;
        }
        total += n_prompt[b];
        n_out[b] = 0;
    }
    int rc = -1;
    /* one allocation per call, none per token */
    size_t nrow = (size_t)(total > B ? total : B);
    float *logits = mlsys_xmalloc((size_t)B * V * sizeof(float));
    int *rseq = mlsys_xmalloc(nrow * 3 * sizeof(int)), *rpos = rseq + nrow, *rtok = rpos + nrow;
    unsigned char *want = mlsys_xcalloc(nrow, 1);
    int *cap = mlsys_xmalloc((size_t)B * 3 * sizeof(int)), *active = cap + B, *rowb = active + B;
    int *hist = o->no_cache ? mlsys_xmalloc((size_t)S * sizeof(int)) : NULL;
    for (int b = 0; b < B; b++) {
        int room = S - n_prompt[b] + 1;   /* the last token drawn is never fed back */
        cap[b] = o->max_new < room ? o->max_new : room;
        active[b] = cap[b] > 0;
    }

    /* prefill: every prompt's rows in one forward (chunked by the engine) */
    double t0 = mlsys_now_s();
    int n_act = 0;
    for (int b = 0; b < B; b++)
        if (active[b])
            rowb[n_act++] = b;
    if (!o->no_cache) {
        int n = 0;
        for (int k = 0; k < n_act; k++) {
            int b = rowb[k];
            if (kv->ops->reserve(kv, b, n_prompt[b]) != 0) {
                snprintf(err, errlen, "generate: sequence %d: no room in the kv cache for %d "
                         "positions", b, n_prompt[b]);
                goto done;
            }
            for (int t = 0; t < n_prompt[b]; t++, n++) {
                rseq[n] = b, rpos[n] = t, rtok[n] = prompts[b][t];
                want[n] = t == n_prompt[b] - 1;
            }
        }
        if (n > 0 && llm_forward(e, kv, n, rseq, rpos, rtok, want, logits, err, errlen))
            goto done;
        st->prefill_tokens = n;
    } else {
        for (int k = 0; k < n_act; k++) {
            int b = rowb[k];
            if (llm_forward_nocache(c, e->w, prompts[b], n_prompt[b], 1,
                                    logits + (size_t)k * V)) {
                snprintf(err, errlen, "generate: sequence %d: bad prompt", b);
                goto done;
            }
            st->prefill_tokens += n_prompt[b];
        }
    }
    for (int k = 0; k < n_act; k++) {
        int b = rowb[k];
        int tok = llm_sample(&samplers[b], logits + (size_t)k * V);
        if (take(b, tok, cap[b], out, n_out, prompts[b][n_prompt[b] - 1], o))
            active[b] = 0;
    }
    st->prefill_s = mlsys_now_s() - t0;

    /* decode: one row per unfinished sequence, its last token at the next position */
    t0 = mlsys_now_s();
    double c0 = cpu_s();
    for (;;) {
        n_act = 0;
        for (int b = 0; b < B; b++)
            if (active[b]) {
                rowb[n_act] = b;
                rseq[n_act] = b;
                rpos[n_act] = n_prompt[b] + n_out[b] - 1;
                rtok[n_act] = out[b][n_out[b] - 1];
                n_act++;
            }
        if (n_act == 0)
            break;
        if (!o->no_cache) {
            for (int k = 0; k < n_act; k++)
                if (kv->ops->reserve(kv, rseq[k], rpos[k] + 1) != 0) {
                    snprintf(err, errlen, "generate: sequence %d: no room in the kv cache for "
                             "position %d", rseq[k], rpos[k]);
                    goto done;
                }
            if (llm_forward(e, kv, n_act, rseq, rpos, rtok, NULL, logits, err, errlen))
                goto done;
        } else {
            /* the whole prefix again, every step: O(n²) work for n tokens */
            for (int k = 0; k < n_act; k++) {
                int b = rowb[k];
                memcpy(hist, prompts[b], (size_t)n_prompt[b] * sizeof(int));
                memcpy(hist + n_prompt[b], out[b], (size_t)n_out[b] * sizeof(int));
                llm_forward_nocache(c, e->w, hist, rpos[k] + 1, 1, logits + (size_t)k * V);
            }
        }
        st->decode_tokens += n_act;
        st->steps++;
        for (int k = 0; k < n_act; k++) {
            int b = rowb[k];
            int tok = llm_sample(&samplers[b], logits + (size_t)k * V);
            if (take(b, tok, cap[b], out, n_out, rtok[k], o))
                active[b] = 0;
        }
    }
    st->decode_s = mlsys_now_s() - t0;
    st->decode_cpu_s = cpu_s() - c0;
    rc = 0;
done:
    if (!o->no_cache)
        for (int b = 0; b < B; b++)
            kv->ops->release(kv, b);
    free(logits);
    free(rseq);
    free(want);
    free(cap);
    free(hist);
    return rc;
}
