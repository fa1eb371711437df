/* speculative.c - speculative decoding as a mode of the engine: the draft model guesses k
 * tokens for every sequence that speculates, the target scores all of them in the step's
 * one forward, and each sequence keeps the longest prefix the acceptance rule allows, plus
 * one token of its own. The rule (llm_spec_rule_standard) is what makes the output follow
 * the target's distribution exactly; the rest is the draft's cache, kept beside the target's
 * block for block, and rolling both back past the refused drafts. Terms: llm.h; the engine's
 * side: engine.h. */
#include "engine.h"
#include "../nn/nn.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Why it is exact: x comes from q and is kept with probability min(1, p(x)/q(x)), so token t
 * is produced by "draft t, keep it" with probability q(t)·min(1, p(t)/q(t)) = min(p(t), q(t)).
 * A refusal happens with probability β = Σ_t (q(t) - min(p(t), q(t))) = Σ_t max(0, p(t) - q(t))
 * (both sums are 1 - Σ min(p, q)), and then t is drawn from max(0, p - q) / β. Adding the
 * two paths: min(p, q) + max(0, p - q) = p(t). At temperature 0 both are one-hot: the draft's
 * argmax is kept exactly when it is the target's, and otherwise the residual is the target's
 * argmax, so the output is the target's greedy decoding. */
int llm_spec_rule_standard(const float *p, const float *q, int V, int x, mlsys_rng *rng,
                           int *y)
{
    double u = mlsys_rng_uniform(rng);
    /* u < p/q without dividing: q(x) > 0 because x was drawn from q */
    if ((double)q[x] * u < (double)p[x])
        return 1;
    /* the residual max(0, p - q), renormalised by the draw itself; p when it is all zero,
     * which only rounding can cause */
    int t = nn_sample_categorical_excess(p, q, V, rng);
    *y = t >= 0 ? t : nn_sample_categorical(p, V, rng);
    return 0;
}

double llm_spec_expected_tokens(double a, int k)
{
    if (a >= 1.0)
        return k + 1.0;
    return (1.0 - pow(a, k + 1)) / (1.0 - a);
}

/* ---- the drafter ---- */

int llm_drafter_init(llm_drafter *d, const llm_config *target, const llm_config *dc,
                     const llm_weights *dw, int k, int max_seqs, int max_len, int block_size,
                     llm_spec_rule_fn rule, float temperature, char *err, size_t errlen)
{
    memset(d, 0, sizeof *d);
    if (!dc || !dw) {
        snprintf(err, errlen, "speculative: no draft model");
        return -1;
    }
    if (dc->vocab_size != target->vocab_size) {
        snprintf(err, errlen, "speculative: the draft's vocabulary (%d) is not the target's "
                 "(%d): they must share a tokenizer", dc->vocab_size, target->vocab_size);
        return -1;
    }
    if (dc->seq_len < max_len) {
        snprintf(err, errlen, "speculative: the draft's context (%d) is shorter than the "
                 "sequences' (%d)", dc->seq_len, max_len);
        return -1;
    }
    if (k < 1 || k > LLM_SPEC_MAX_K || !(temperature >= 0.0f)) {
        snprintf(err, errlen, "speculative: k %d out of range [1, %d], or a draft temperature "
                 "%g below 0", k, LLM_SPEC_MAX_K, (double)temperature);
        return -1;
    }
    d->k = k;
    d->V = target->vocab_size;
    d->max_seqs = max_seqs;
    /* the first draft forward of a step catches each sequence up: its whole context at most */
    d->max_rows = max_seqs * max_len;
    d->rule = rule ? rule : llm_spec_rule_standard;
    d->temperature = temperature;
    /* the draft's view, as the target's: no longer context than the sequences reach */
    llm_config cut = *dc;
    cut.seq_len = max_len;
    int rows = llm_fwd_rows_that_fit(&cut, d->max_rows < 256 ? d->max_rows : 256);
    if (llm_fwd_init(&d->f, &cut, dw, rows > 0 ? rows : 1, err, errlen))
        return -1;
    llm_paged_opts po = {.block_size = block_size, .n_seqs = max_seqs, .max_len = max_len,
                         .no_prefix_cache = 1, .pool = 1};
    if (llm_kv_init_paged(&d->kv, &cut, &po, err, errlen)) {
        llm_fwd_fini(&d->f);
        return -1;
    }
    llm_sampler_init(&d->q_smp, d->V, 1.0f, 0, 1.0f, 0);
    d->rseq = mlsys_xmalloc((size_t)d->max_rows * 3 * sizeof(int));
    d->rpos = d->rseq + d->max_rows;
    d->rtok = d->rpos + d->max_rows;
    d->want = mlsys_xmalloc((size_t)d->max_rows);
    d->row_of = mlsys_xmalloc((size_t)max_seqs * sizeof(int));
    d->logits = mlsys_xmalloc((size_t)max_seqs * d->V * sizeof(float));
    d->q = mlsys_xmalloc((size_t)max_seqs * k * d->V * sizeof(float));
    d->p = mlsys_xmalloc((size_t)(k + 1) * d->V * sizeof(float));
    return 0;
}

void llm_drafter_fini(llm_drafter *d)
{
    if (!d->rseq)
        return;
    llm_fwd_fini(&d->f);
    llm_kv_free(&d->kv);
    llm_sampler_fini(&d->q_smp);
    free(d->rseq);
    free(d->want);
    free(d->row_of);
    free(d->logits);
    free(d->q);
    free(d->p);
    memset(d, 0, sizeof *d);
}

int llm_drafter_k(const llm_drafter *d, const llm_seq *s, int max_len, int budget)
{
    if (!d || !s->spec)
        return 0;
    int k = d->k;
    int left = s->max_tokens - (s->n_tok - s->n_prompt);   /* tokens it may still commit */
    if (k > left - 1)
        k = left - 1;         /* the round adds one token of its own */
    if (k > max_len - s->n_tok)
        k = max_len - s->n_tok;   /* the verify feeds positions n_tok-1 .. n_tok-1+k */
    if (k > budget - 1)
        k = budget - 1;
    return k > 0 ? k : 0;
}

/* The draft's distribution for s: its sampling filters, at the draft's temperature (or
 * s's own). */
static void draft_probs(llm_drafter *d, const llm_seq *s, const float *logits, float *q)
{
    d->q_smp.temperature = d->temperature > 0.0f ? d->temperature : s->sampler.temperature;
    d->q_smp.top_k = s->sampler.top_k;
    d->q_smp.top_p = s->sampler.top_p;
    llm_sampler_probs(&d->q_smp, logits, q);
}

int llm_drafter_draft(llm_drafter *d, llm_batch *b, char *err, size_t errlen)
{
    int kmax = 0, V = d->V;
    for (int i = 0; i < b->n_items; i++) {
        const llm_sched_item *it = &b->items[i];
        if (it->spec <= 0)
            continue;
        llm_seq *s = it->s;
        kmax = it->spec > kmax ? it->spec : kmax;
        /* positions 0 .. n_tok+k-2: the context and the drafts x_0 .. x_{k-2} */
        if (d->kv.ops->reserve(&d->kv, s->kv_seq, s->n_tok - 1 + it->spec) != 0) {
            snprintf(err, errlen, "speculative: no room in the draft's cache for %d positions",
                     s->n_tok - 1 + it->spec);
            return -1;
        }
    }
    if (kmax == 0)
        return 0;
    double t0 = mlsys_now_s();
    /* draft position j for every sequence that drafts that far: one forward (the first also
     * catches the draft's cache up on what the sequence committed since it last drafted) */
    for (int j = 0; j < kmax; j++) {
        int m = 0, wanted = 0;
        for (int i = 0; i < b->n_items; i++) {
            const llm_sched_item *it = &b->items[i];
            d->row_of[i] = -1;
            if (it->spec <= j)
                continue;
            llm_seq *s = it->s;
            int n0 = s->n_tok;
            int from = j == 0 ? s->d_fed : n0 - 1 + j;
            for (int t = from; t < n0 + j; t++, m++) {
                d->rseq[m] = s->kv_seq;
                d->rpos[m] = t;
                d->rtok[m] = t < n0 ? s->tok[t] : s->draft[t - n0];
                d->want[m] = t == n0 - 1 + j;
            }
            d->row_of[i] = wanted++;
        }
        if (llm_forward(&d->f, &d->kv, m, d->rseq, d->rpos, d->rtok, d->want, d->logits, err,
                        errlen))
            return -1;
        d->st.draft_forwards++;
        for (int i = 0; i < b->n_items; i++) {
            if (d->row_of[i] < 0)
                continue;
            llm_seq *s = b->items[i].s;
            const float *lg = d->logits + (size_t)d->row_of[i] * V;
            float *q = d->q + ((size_t)i * d->k + j) * V;
            draft_probs(d, s, lg, q);
            int x = nn_sample_categorical(q, V, &s->sampler.rng);
            s->draft[j] = x >= 0 ? x : llm_argmax(lg, V);
        }
    }
    /* the drafts are the verify rows the runner left for them */
    int row = 0;
    for (int i = 0; i < b->n_items; row += b->items[i].n, i++) {
        const llm_sched_item *it = &b->items[i];
        if (it->spec <= 0)
            continue;
        llm_seq *s = it->s;
        for (int j = 0; j < it->spec; j++)
            if (b->rtok[row + 1 + j] < 0) {
                b->rtok[row + 1 + j] = s->draft[j];
                b->n_future--;
            }
        s->d_fed = s->n_tok - 1 + it->spec;   /* the context, and x_0 .. x_{k-2} */
    }
    d->st.draft_s += mlsys_now_s() - t0;
    return 0;
}

int llm_drafter_verify(llm_drafter *d, llm_seq *s, int i, int k, const float *logits,
                       int *out, llm_step_item *it)
{
    int V = d->V;
    for (int j = 0; j <= k; j++)
        llm_sampler_probs(&s->sampler, logits + (size_t)j * V, d->p + (size_t)j * V);
    int kept = 0, y = -1;
    for (int j = 0; j < k; j++) {
        const float *p = d->p + (size_t)j * V, *q = d->q + ((size_t)i * d->k + j) * V;
        int x = s->draft[j];
        double overlap = 0.0;
        for (int t = 0; t < V; t++)
            overlap += p[t] < q[t] ? p[t] : q[t];
        d->st.overlap_sum += overlap;
        s->spec_st.overlap_sum += overlap;
        d->st.pos_tried[j]++;
        s->spec_st.pos_tried[j]++;
        if (it) {
            it->x[j] = x;
            it->qx[j] = q[x];
            it->px[j] = p[x];
        }
        if (d->rule(p, q, V, x, &s->sampler.rng, &y)) {
            d->st.pos_kept[j]++;
            s->spec_st.pos_kept[j]++;
            kept++;
            continue;
        }
        if (y < 0 || y >= V)      /* a rule that returns nonsense gets the target's argmax */
            y = llm_argmax(logits + (size_t)j * V, V);
        break;
    }
    if (kept == k) {
        /* every draft kept: the target's distribution after the last one is free */
        y = nn_sample_categorical(d->p + (size_t)k * V, V, &s->sampler.rng);
        if (y < 0)
            y = llm_argmax(logits + (size_t)k * V, V);
        d->st.bonus += k > 0;
        s->spec_st.bonus += k > 0;
    }
    d->st.rounds++, s->spec_st.rounds++;
    d->st.drafted += k, s->spec_st.drafted += k;
    d->st.accepted += kept, s->spec_st.accepted += kept;
    d->st.kept_hist[kept]++, s->spec_st.kept_hist[kept]++;
    memcpy(out, s->draft, (size_t)kept * sizeof(int));
    out[kept] = y;
    if (it) {
        it->k = k;
        it->kept = kept;
        it->y = y;
    }
    return kept + 1;
}

void llm_drafter_rollback(llm_drafter *d, llm_kv *target, llm_seq *s)
{
    llm_paged_truncate(target, s->kv_seq, s->n_computed);
    if (s->d_fed > s->n_computed)
        s->d_fed = s->n_computed;
    llm_paged_truncate(&d->kv, s->kv_seq, s->d_fed);
}
