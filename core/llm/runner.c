/* runner.c - the model runner: the step's plan becomes the rows of ONE forward (sequence,
 * position, token), so every weight matrix is read once per step whether the rows are a
 * prompt chunk, a decode, or both mixed; then each sequence whose rows reached its last
 * token draws its next token from its own sampler (in JSON mode under its own mask, on its
 * row only). Split in its phases (prepare, forward, sample) so the engine can time each
 * and run the forward beside the next step's planning. The arithmetic is llm_forward's. */
#include "engine.h"
#include "tp_step.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void llm_batch_init(llm_batch *b, int max_rows, int max_seqs)
{
    memset(b, 0, sizeof *b);
    b->items = mlsys_xcalloc((size_t)max_seqs, sizeof *b->items);
    b->samples = mlsys_xcalloc((size_t)max_seqs, 1);
    b->lrow = mlsys_xcalloc((size_t)max_seqs, sizeof(int));
    b->rseq = mlsys_xmalloc((size_t)max_rows * 3 * sizeof(int));
    b->rpos = b->rseq + max_rows;
    b->rtok = b->rpos + max_rows;
    b->want = mlsys_xmalloc((size_t)max_rows);
}

void llm_batch_fini(llm_batch *b)
{
    free(b->items);
    free(b->samples);
    free(b->lrow);
    free(b->rseq);
    free(b->want);
    memset(b, 0, sizeof *b);
}

void llm_batch_drop(llm_batch *b, int i)
{
    if (i < 0 || i >= b->n_items)
        return;
    if (i >= b->n_items - b->n_admitted)
        b->n_admitted--;
    memmove(&b->items[i], &b->items[i + 1], (size_t)(b->n_items - i - 1) * sizeof *b->items);
    b->n_items--;
}

int llm_runner_init(llm_runner *r, const llm_config *c, const llm_weights *w, llm_kv *kv,
                    int max_rows, int max_seqs, int max_logits, int fwd_rows, mlsys_comm *tp,
                    char *err, size_t errlen)
{
    memset(r, 0, sizeof *r);
    /* the forward's scratch holds fwd_rows rows: a longer step is cut in chunks, several
     * GEMMs per weight, which changes nothing in the result (rows are independent) */
    if (fwd_rows < 1)
        fwd_rows = 1;         /* not even one fits: llm_fwd_init says why */
    if (llm_fwd_init_tp(&r->e, c, w, fwd_rows < max_rows ? fwd_rows : max_rows, tp, err,
                        errlen))
        return -1;
    r->kv = kv;
    r->max_rows = max_rows;
    r->max_seqs = max_seqs;
    r->max_logits = max_logits > max_seqs ? max_logits : max_seqs;
    r->logits = mlsys_xmalloc((size_t)r->max_logits * c->vocab_size * sizeof(float));
    r->masked = mlsys_xmalloc((size_t)c->vocab_size * sizeof(float));
    r->allowed = mlsys_xmalloc((size_t)c->vocab_size);
    return 0;
}

void llm_runner_fini(llm_runner *r)
{
    llm_fwd_fini(&r->e);
    free(r->logits);
    free(r->masked);
    free(r->allowed);
    memset(r, 0, sizeof *r);
}

int llm_runner_prepare(const llm_runner *r, llm_batch *b, const llm_sched_item *items,
                       int n_items, int n_admitted, char *err, size_t errlen)
{
    if (n_items > r->max_seqs) {
        snprintf(err, errlen, "runner: %d items planned, room for %d", n_items, r->max_seqs);
        return -1;
    }
    if (items != b->items)
        memcpy(b->items, items, (size_t)n_items * sizeof *items);
    b->n_items = n_items;
    b->n_admitted = n_admitted;
    b->rows = b->prefill_rows = b->decode_rows = b->n_future = 0;
    int n = 0, lrows = 0;
    for (int i = 0; i < n_items; i++) {
        const llm_sched_item *it = &b->items[i];
        const llm_seq *s = it->s;
        if (n + it->n > r->max_rows) {
            snprintf(err, errlen, "runner: %d rows planned, room for %d", n + it->n,
                     r->max_rows);
            return -1;
        }
        for (int k = 0; k < it->n; k++, n++) {
            int pos = it->start + k;
            b->rseq[n] = s->kv_seq;
            b->rpos[n] = pos;
            /* a speculative decode's drafts come from the draft phase, before the forward */
            b->rtok[n] = pos < s->n_tok ? s->tok[pos] : -1;
            b->n_future += b->rtok[n] < 0;
            /* logits only where the rows reach the sequence's last token, and on every
             * verify row */
            b->want[n] = it->spec > 0 || (k == it->n - 1 && pos + 1 == s->n_tok);
        }
        b->samples[i] = it->spec > 0 || it->start + it->n == s->n_tok;
        b->lrow[i] = b->samples[i] ? lrows : -1;
        lrows += it->spec > 0 ? it->n : b->samples[i];
        if (lrows > r->max_logits) {
            snprintf(err, errlen, "runner: %d rows of logits planned, room for %d", lrows,
                     r->max_logits);
            return -1;
        }
        if (it->prefill)
            b->prefill_rows += it->n;
        else
            b->decode_rows += it->n;
    }
    b->rows = n;
    return 0;
}

int llm_runner_resolve(llm_batch *b)
{
    if (!b->n_future)
        return 0;
    int left = 0, n = 0;
    for (int i = 0; i < b->n_items; i++) {
        const llm_sched_item *it = &b->items[i];
        for (int k = 0; k < it->n; k++, n++)
            if (b->rtok[n] < 0) {
                b->rtok[n] = it->s->tok[it->start + k];
                left += b->rtok[n] < 0;
            }
    }
    b->n_future = left;
    return left;
}

int llm_runner_forward(llm_runner *r, const llm_batch *b, char *err, size_t errlen)
{
    if (b->n_future) {
        snprintf(err, errlen, "runner: %d rows still wait for their token", b->n_future);
        return -1;
    }
    /* on a tensor-parallel group the leader's forward: the rows and their slots go to the
     * followers first (without a group, llm_forward itself) */
    if (b->rows > 0 && llm_tp_lead_forward(&r->e, r->kv, b->rows, b->rseq, b->rpos, b->rtok,
                                           b->want, r->logits, err, errlen))
        return -1;
    return 0;
}

int llm_runner_draw(llm_runner *r, llm_seq *s, const float *logits)
{
    if (!s->json)
        return llm_sample(&s->sampler, logits);
    /* JSON mode: the tokens that can follow from the automaton's state and still close the
     * value within the tokens left get their logits; every other one gets -inf */
    int V = r->e.c.vocab_size;
    int budget = s->max_tokens - (s->n_tok - s->n_prompt);
    uint64_t t0 = mlsys_now_ns();
    int n_ok = s->mask(s->grammar, &s->js, budget, r->allowed);
    uint64_t t1 = mlsys_now_ns();
    if (n_ok <= 0)
        return -2;
    if (s->on_mask)               /* outside the timed part: the hook's time is nobody's */
        s->on_mask(s->u, &s->js, budget, r->allowed, n_ok, logits);
    uint64_t t2 = mlsys_now_ns();
    for (int t = 0; t < V; t++)
        r->masked[t] = r->allowed[t] ? logits[t] : -INFINITY;
    s->st.json_mask_s += 1e-9 * (double)((t1 - t0) + (mlsys_now_ns() - t2));
    s->st.json_allowed += n_ok;
    int tok = llm_sample(&s->sampler, r->masked);
    if (!r->allowed[tok] || llm_json_feed_token(s->grammar, &s->js, tok))
        return -2;
    return tok;
}

const float *llm_runner_logits(const llm_runner *r, const llm_batch *b, int i)
{
    if (i < 0 || i >= b->n_items || b->lrow[i] < 0)
        return NULL;
    return r->logits + (size_t)b->lrow[i] * r->e.c.vocab_size;
}

void llm_runner_sample(llm_runner *r, const llm_batch *b, int *next)
{
    for (int i = 0; i < b->n_items; i++) {
        /* a speculative decode draws nothing here: its verify keeps drafts (the engine) */
        const float *row = b->items[i].spec > 0 ? NULL : llm_runner_logits(r, b, i);
        next[i] = row ? llm_runner_draw(r, b->items[i].s, row) : -1;
    }
}
