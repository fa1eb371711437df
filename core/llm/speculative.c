/* speculative.c - speculative decoding: the draft model guesses k tokens cheaply, the target
 * scores all of them in one forward and keeps the longest prefix the acceptance rule allows,
 * plus one token of its own. The rule (llm_spec_rule_standard) is what makes the output
 * follow the target's distribution exactly; everything else here is bookkeeping of two KV
 * caches whose fill marks move back when drafts are refused. Contract and terms: llm.h. */
#include "llm.h"
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

/* A compute span with the round's numbers in typed fields (the label names only the phase):
 * val[0..2] the phase's counts, val[3] the round (step stays -1: a step on a compute span
 * means a schedule drawn in slots to the timeline). */
static void span(mlsys_comm *c, int begin, const char *label, long round, int chunk,
                 double v0, double v1, double v2)
{
    if (!c || !mlsys_tracing(c))
        return;
    mlsys_event e;
    memset(&e, 0, sizeof e);
    e.kind = begin ? MLSYS_EV_COMPUTE_BEGIN : MLSYS_EV_COMPUTE_END;
    e.peer = -1;
    e.coll = -1;
    e.algo = -1;
    e.op = -1;
    e.dtype = -1;
    e.step = -1;
    e.chunk = chunk;
    e.val[0] = v0;
    e.val[1] = v1;
    e.val[2] = v2;
    e.val[3] = (double)round;
    snprintf(e.label, sizeof e.label, "%s", label);
    mlsys_emit(c, &e);
}

int llm_spec_start(llm_spec *s, llm_fwd *target, llm_kv *tkv, int tseq, llm_fwd *draft,
                   llm_kv *dkv, int dseq, const int *prompt, int n, const llm_spec_opts *o,
                   char *err, size_t errlen)
{
    memset(s, 0, sizeof *s);
    const llm_config *tc = &target->c, *dc = &draft->c;
    if (tc->vocab_size != dc->vocab_size) {
        snprintf(err, errlen, "speculative: the draft's vocabulary (%d) is not the target's "
                 "(%d): they must share a tokenizer", dc->vocab_size, tc->vocab_size);
        return -1;
    }
    int S = tc->seq_len < dc->seq_len ? tc->seq_len : dc->seq_len;
    if (o->k < 1 || o->k > LLM_SPEC_MAX_K) {
        snprintf(err, errlen, "speculative: k %d out of range [1, %d]", o->k, LLM_SPEC_MAX_K);
        return -1;
    }
    if (n < 1 || n > S) {
        snprintf(err, errlen, "speculative: prompt of %d tokens (1..%d allowed)", n, S);
        return -1;
    }
    for (int i = 0; i < n; i++)
        if (prompt[i] < 0 || prompt[i] >= tc->vocab_size) {
            snprintf(err, errlen, "speculative: prompt token %d (id %d) out of range", i,
                     prompt[i]);
            return -1;
        }
    float dt = o->draft_temperature < 0.0f ? o->temperature : o->draft_temperature;
    if (llm_sampler_init(&s->ts, tc->vocab_size, o->temperature, o->top_k, o->top_p, 0) ||
        llm_sampler_init(&s->ds, tc->vocab_size, dt, o->top_k, o->top_p, 0)) {
        llm_sampler_fini(&s->ts);
        snprintf(err, errlen, "speculative: bad sampling parameters (temperature %g, top-p %g)",
                 (double)o->temperature, (double)o->top_p);
        return -1;
    }
    s->te = target, s->de = draft, s->tkv = tkv, s->dkv = dkv, s->tseq = tseq, s->dseq = dseq;
    s->o = *o;
    if (!s->o.rule)
        s->o.rule = llm_spec_rule_standard;
    mlsys_rng_seed(&s->rng, o->seed);
    s->V = tc->vocab_size;
    s->S = S;
    int K = o->k;
    size_t V = (size_t)s->V, rows = (size_t)S + (size_t)K + 1;
    s->ctx = mlsys_xmalloc(((size_t)S + 1) * sizeof(int));
    s->q = mlsys_xmalloc(((size_t)K + 2 * ((size_t)K + 1)) * V * sizeof(float));
    s->p = s->q + (size_t)K * V;
    s->logits = s->p + ((size_t)K + 1) * V;
    s->rseq = mlsys_xmalloc(3 * rows * sizeof(int));
    s->rpos = s->rseq + rows;
    s->rtok = s->rpos + rows;
    s->want = mlsys_xcalloc(rows, 1);
    memcpy(s->ctx, prompt, (size_t)n * sizeof(int));
    s->n = s->n_prompt = n;
    s->cap = o->max_new < S - n + 1 ? o->max_new : S - n + 1;
    if (s->cap < 0)
        s->cap = 0;
    s->done = s->cap == 0;

    /* prefill: every prompt token but the last, in both models (no logits needed: the
     * first round feeds the last token and reads the distributions there) */
    double t0 = mlsys_now_s();
    if (n > 1) {
        for (int i = 0; i < n - 1; i++) {
            s->rpos[i] = i;
            s->rtok[i] = prompt[i];
            s->want[i] = 0;
        }
        struct { llm_fwd *e; llm_kv *kv; int seq; } m[2] = {{target, tkv, tseq},
                                                                {draft, dkv, dseq}};
        for (int j = 0; j < 2; j++) {
            for (int i = 0; i < n - 1; i++)
                s->rseq[i] = m[j].seq;
            if (m[j].kv->ops->reserve(m[j].kv, m[j].seq, n - 1) != 0) {
                snprintf(err, errlen, "speculative: no room in the %s's kv cache for %d "
                         "positions", j ? "draft" : "target", n - 1);
                llm_spec_end(s);
                return -1;
            }
            if (llm_forward(m[j].e, m[j].kv, n - 1, s->rseq, s->rpos, s->rtok, s->want,
                            s->logits, err, errlen)) {
                llm_spec_end(s);
                return -1;
            }
        }
        s->st.target_forwards = 1;
        s->st.draft_forwards = 1;
    }
    s->t_fed = s->d_fed = n - 1;
    s->st.prefill_s = mlsys_now_s() - t0;
    s->st.total_s = s->st.prefill_s;
    return 0;
}

/* Commit one token; 1 when the sequence is finished after it (EOS, or the cap). */
static int commit(llm_spec *s, int tok)
{
    if (s->o.stop_at_eos && (tok == LLM_TOK_EOS || tok == LLM_TOK_BOS)) {
        s->done = 1;
        return 1;
    }
    int prev = s->ctx[s->n - 1];
    s->ctx[s->n++] = tok;
    s->st.tokens++;
    if (s->o.on_token)
        s->o.on_token(s->o.u, s->tseq, prev, tok);
    if (s->n - s->n_prompt >= s->cap)
        s->done = 1;
    return s->done;
}

int llm_spec_round(llm_spec *s, llm_spec_round_info *info, char *err, size_t errlen)
{
    llm_spec_round_info local;
    if (!info)
        info = &local;
    memset(info, 0, sizeof *info);
    if (s->done)
        return 0;
    double t_round = mlsys_now_s();
    size_t V = (size_t)s->V;
    int n0 = s->n;
    int left = s->cap - (n0 - s->n_prompt);
    /* drafts: at most k, one less than the tokens still wanted (the round adds one of its
     * own), and no position past the context: the verify feeds positions n0-1 .. n0-1+k */
    int k = s->o.k;
    if (k > left - 1)
        k = left - 1;
    if (k > s->S - n0)
        k = s->S - n0;
    if (k < 0)
        k = 0;
    info->k = k;
    long round = s->round_no++;

    /* ---- draft: k forwards, each one row (the first also catches up on tokens the last
     * round committed that the draft never saw: the bonus and the last kept draft) ---- */
    double t0 = mlsys_now_s();
    span(s->o.trace, 1, "draft", round, -1, k, 0, 0);
    if (k > 0) {
        llm_kv *kv = s->dkv;
        if (kv->ops->reserve(kv, s->dseq, n0 - 1 + k) != 0) {
            snprintf(err, errlen, "speculative: no room in the draft's kv cache for %d "
                     "positions", n0 - 1 + k);
            return -1;
        }
        for (int i = 0; i < k; i++) {
            int m = 0;
            if (i == 0) {
                for (int t = s->d_fed; t < n0; t++, m++) {
                    s->rseq[m] = s->dseq, s->rpos[m] = t, s->rtok[m] = s->ctx[t];
                    s->want[m] = t == n0 - 1;
                }
            } else {
                s->rseq[0] = s->dseq, s->rpos[0] = n0 - 1 + i, s->rtok[0] = info->x[i - 1];
                s->want[0] = 1;
                m = 1;
            }
            if (llm_forward(s->de, kv, m, s->rseq, s->rpos, s->rtok, s->want, s->logits, err,
                            errlen))
                return -1;
            s->st.draft_forwards++;
            float *q = s->q + (size_t)i * V;
            llm_sampler_probs(&s->ds, s->logits, q);
            int x = nn_sample_categorical(q, s->V, &s->rng);
            info->x[i] = x < 0 ? llm_argmax(s->logits, s->V) : x;
            info->qx[i] = q[info->x[i]];
        }
        s->d_fed = n0 - 1 + k;     /* ctx up to n0-1 and the drafts x_0..x_{k-2} */
    }
    span(s->o.trace, 0, "draft", round, -1, k, 0, 0);
    double t1 = mlsys_now_s();
    s->st.draft_s += t1 - t0;

    /* ---- verify: one target forward over the unfed committed tokens (normally just the
     * last) and the k drafts; the logits of the last k + 1 rows are p_0 .. p_k ---- */
    int m = 0;
    for (int t = s->t_fed; t < n0; t++, m++) {
        s->rseq[m] = s->tseq, s->rpos[m] = t, s->rtok[m] = s->ctx[t];
        s->want[m] = t == n0 - 1;
    }
    for (int i = 0; i < k; i++, m++) {
        s->rseq[m] = s->tseq, s->rpos[m] = n0 + i, s->rtok[m] = info->x[i];
        s->want[m] = 1;
    }
    span(s->o.trace, 1, "verify", round, -1, m, 0, 0);
    if (s->tkv->ops->reserve(s->tkv, s->tseq, n0 + k) != 0) {
        snprintf(err, errlen, "speculative: no room in the target's kv cache for %d positions",
                 n0 + k);
        return -1;
    }
    if (llm_forward(s->te, s->tkv, m, s->rseq, s->rpos, s->rtok, s->want, s->logits, err,
                    errlen))
        return -1;
    for (int i = 0; i <= k; i++)
        llm_sampler_probs(&s->ts, s->logits + (size_t)i * V, s->p + (size_t)i * V);
    s->st.rounds++;
    s->st.target_forwards++;
    span(s->o.trace, 0, "verify", round, -1, m, 0, 0);
    double t2 = mlsys_now_s();
    uint64_t t2_ns = mlsys_now_ns();
    s->st.verify_s += t2 - t1;

    /* ---- the rule, position by position, up to the first refusal ---- */
    int kept = 0, y = -1;
    for (int i = 0; i < k; i++) {
        const float *p = s->p + (size_t)i * V, *q = s->q + (size_t)i * V;
        info->px[i] = p[info->x[i]];
        s->st.pos_tried[i]++;
        double overlap = 0.0;
        for (int t = 0; t < s->V; t++)
            overlap += p[t] < q[t] ? p[t] : q[t];
        s->st.overlap_sum += overlap;
        if (s->o.rule(p, q, s->V, info->x[i], &s->rng, &y)) {
            s->st.pos_kept[i]++;
            kept++;
            continue;
        }
        if (y < 0 || y >= s->V)    /* a rule that returns nonsense gets the target's argmax */
            y = llm_argmax(s->logits + (size_t)i * V, s->V);
        break;
    }
    if (kept == k) {
        /* every draft kept: the target's distribution after the last one is free */
        y = nn_sample_categorical(s->p + (size_t)k * V, s->V, &s->rng);
        if (y < 0)
            y = llm_argmax(s->logits + (size_t)k * V, s->V);
        s->st.bonus += k > 0;
    }
    s->st.drafted += k;
    s->st.accepted += kept;
    s->st.kept_hist[kept]++;
    info->kept = kept;
    info->y = y;
    int fin = 0;
    for (int i = 0; i < kept && !fin; i++)
        fin = commit(s, info->x[i]);
    if (!fin)
        commit(s, y);
    info->committed = s->n - n0;
    /* roll back: the target's rows of refused drafts and the draft's rows past what was kept
     * hold keys of tokens that are not in the text; moving the fill marks back makes the
     * next round write over them */
    s->t_fed = n0 + kept < s->n - 1 ? n0 + kept : s->n - 1;
    if (s->d_fed > s->t_fed)
        s->d_fed = s->t_fed;
    double t3 = mlsys_now_s();
    s->st.rule_s += t3 - t2;
    /* the rule and the roll-back, as one span named by the outcome: "accepted 4 of 4", or
     * "rejected 2 of 4" (the 2nd draft refused) */
    char what[32];
    if (kept == k)
        snprintf(what, sizeof what, "accepted %d of %d", kept, k);
    else
        snprintf(what, sizeof what, "rejected %d of %d", kept + 1, k);
    mlsys_compute_span(s->o.trace, 0, t2_ns, mlsys_now_ns(), what);
    s->st.total_s += mlsys_now_s() - t_round;
    return s->done ? 0 : 1;
}

void llm_spec_end(llm_spec *s)
{
    if (s->tkv && s->tkv->ops)
        s->tkv->ops->release(s->tkv, s->tseq);
    if (s->dkv && s->dkv->ops)
        s->dkv->ops->release(s->dkv, s->dseq);
    llm_sampler_fini(&s->ts);
    llm_sampler_fini(&s->ds);
    free(s->ctx);
    free(s->q);
    free(s->rseq);
    free(s->want);
    s->ctx = NULL, s->q = NULL, s->rseq = NULL, s->want = NULL;
    s->tkv = s->dkv = NULL;
}

int llm_spec_generate(llm_fwd *target, llm_kv *tkv, llm_fwd *draft, llm_kv *dkv,
                      const int *prompt, int n_prompt, const llm_spec_opts *o, int *out,
                      int *n_out, llm_spec_stats *st, char *err, size_t errlen)
{
    llm_spec s;
    *n_out = 0;
    if (llm_spec_start(&s, target, tkv, 0, draft, dkv, 0, prompt, n_prompt, o, err, errlen))
        return -1;
    int r;
    while ((r = llm_spec_round(&s, NULL, err, errlen)) == 1)
        ;
    *n_out = s.n - s.n_prompt;
    memcpy(out, s.ctx + s.n_prompt, (size_t)*n_out * sizeof(int));
    if (st)
        *st = s.st;
    llm_spec_end(&s);
    return r < 0 ? -1 : 0;
}
