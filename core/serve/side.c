/* side.c - the requests the batched engine cannot run, decoded one at a time on the engine
 * thread with a single-sequence engine of their own: response_format json_object under the
 * JSON mask (core/llm/json_mask.c's automaton, one token per turn of the loop), and every
 * request of a server started with --speculative K (core/llm/speculative.c, one round per
 * turn), so batched requests step in between and a cancel lands at the next turn. Text and stop strings go through an llm_seq. */
#include "srv_internal.h"

#include <stdio.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

struct srv_side {
    const llm_config *c;
    const llm_tokenizer *t;
    int k;                        /* speculative: tokens drafted per round (0: off) */
    llm_fwd te, de;
    llm_kv tkv, dkv;
    int have_te, have_tkv, have_de, have_dkv, have_g;
    llm_json_grammar g;
    /* the request in progress */
    srv_job *j;
    llm_seq *seq;
    llm_finish fin;               /* set by a stop string or max_tokens */
    int spec_on;                  /* llm_spec started */
    llm_spec sp;
    int json_on;                  /* a JSON-mode request: one token per turn */
    llm_json_state js;
    int json_cap, json_n;         /* tokens it may take, taken */
    float *logits;                /* [V] the next token's */
    unsigned char *allowed;       /* [V] the mask */
    pthread_mutex_t mu;           /* st */
    srv_side_stats st;
};

int srv_hist_bucket(double x)
{
    int b = 0;
    while (b < LLM_ENGINE_HIST_N - 1 && x > llm_engine_hist_bounds[b])
        b++;
    return b;
}

srv_side *srv_side_create(const llm_config *c, const llm_weights *w, const llm_tokenizer *t,
                          int spec_k, const llm_config *dc, const llm_weights *dw, char *err,
                          size_t errlen)
{
    srv_side *sd = mlsys_xcalloc(1, sizeof *sd);
    pthread_mutex_init(&sd->mu, NULL);
    sd->c = c;
    sd->t = t;
    sd->k = spec_k;
    int rows = llm_fwd_rows_that_fit(c, 64);
    if (rows < spec_k + 1)
        rows = spec_k + 1;
    if (llm_fwd_init(&sd->te, c, w, rows, err, errlen))
        goto fail;
    sd->have_te = 1;
    if (llm_kv_init_contiguous(&sd->tkv, c, 1, 0, err, errlen))
        goto fail;
    sd->have_tkv = 1;
    if (llm_json_grammar_init_tok(&sd->g, t, NULL, err, errlen))
        goto fail;
    sd->have_g = 1;
    sd->logits = mlsys_xmalloc((size_t)c->vocab_size * sizeof(float));
    sd->allowed = mlsys_xmalloc((size_t)c->vocab_size);
    if (spec_k > 0) {
        if (!dc || !dw || dc->vocab_size != c->vocab_size || dc->seq_len != c->seq_len) {
            snprintf(err, errlen, "--speculative needs a draft model with the target's "
                     "vocabulary (%d) and context (%d)", c->vocab_size, c->seq_len);
            goto fail;
        }
        if (llm_fwd_init(&sd->de, dc, dw, 8, err, errlen))
            goto fail;
        sd->have_de = 1;
        if (llm_kv_init_contiguous(&sd->dkv, dc, 1, 0, err, errlen))
            goto fail;
        sd->have_dkv = 1;
    }
    return sd;
fail:
    srv_side_free(sd);
    return NULL;
}

void srv_side_free(srv_side *sd)
{
    if (!sd)
        return;
    if (sd->spec_on)
        llm_spec_end(&sd->sp);
    llm_seq_free(sd->seq);
    free(sd->logits);
    free(sd->allowed);
    if (sd->have_g)
        llm_json_grammar_fini(&sd->g);
    if (sd->have_dkv)
        llm_kv_free(&sd->dkv);
    if (sd->have_de)
        llm_fwd_fini(&sd->de);
    if (sd->have_tkv)
        llm_kv_free(&sd->tkv);
    if (sd->have_te)
        llm_fwd_fini(&sd->te);
    pthread_mutex_destroy(&sd->mu);
    free(sd);
}

srv_job *srv_side_current(const srv_side *sd)
{
    return sd ? sd->j : NULL;
}

/* Every token the decoder commits: into the text (stop strings), out to the client. */
static void on_token(void *u, int seq, int prev, int tok)
{
    srv_side *sd = u;
    (void)seq;
    (void)prev;
    if (sd->fin != LLM_FINISH_NONE)
        return;                   /* after a stop string: the round's leftovers */
    sd->fin = llm_seq_append(sd->seq, tok, sd->t, sd->c->seq_len);
    const char *text = NULL;
    int n = llm_seq_take_text(sd->seq, sd->fin != LLM_FINISH_NONE, &text);
    srv_job_deliver(sd->j, 0, text, n, sd->seq->n_tok - sd->seq->n_prompt, LLM_FINISH_NONE,
                    0);
}

/* JSON mode: the prompt prefilled, the automaton at its start. 0, or -1 with j failed. */
static int json_begin(srv_side *sd, srv_job *j)
{
    char err[256];
    int n = j->n_prompt, room = sd->c->seq_len - n + 1;
    sd->json_cap = j->max_tokens < room ? j->max_tokens : room;
    sd->json_n = 0;
    llm_json_start(&sd->g, &sd->js);
    int need = llm_json_min_close(&sd->g, &sd->js);
    int *rows = mlsys_xmalloc((size_t)n * 3 * sizeof(int));
    unsigned char *want = mlsys_xcalloc((size_t)n, 1);
    for (int i = 0; i < n; i++)
        rows[i] = 0, rows[n + i] = i, rows[2 * n + i] = j->prompt[i];
    want[n - 1] = 1;
    int rc = -1;
    if (sd->json_cap < need)
        snprintf(err, sizeof err, "response_format json_object: %d tokens cannot hold the "
                 "shortest JSON text (%d bytes)", sd->json_cap, need);
    else if (sd->tkv.ops->reserve(&sd->tkv, 0, n) != 0)
        snprintf(err, sizeof err, "no room in the cache for %d positions", n);
    else
        rc = llm_forward(&sd->te, &sd->tkv, n, rows, rows + n, rows + 2 * n, want, sd->logits,
                         err, sizeof err);
    free(rows);
    free(want);
    if (rc) {
        sd->tkv.ops->release(&sd->tkv, 0);
        srv_job_fail(j, err);
        llm_seq_free(sd->seq);
        sd->seq = NULL;
        sd->j = NULL;
        return -1;
    }
    sd->json_on = 1;
    return 0;
}

int srv_side_begin(srv_side *sd, srv_job *j)
{
    char err[256];
    const char *stops[LLM_MAX_STOP];
    for (int i = 0; i < j->req.n_stop; i++)
        stops[i] = j->req.stop[i];
    llm_request r = {
        .prompt = j->prompt, .n_prompt = j->n_prompt, .max_tokens = j->max_tokens,
        .temperature = (float)j->req.temperature, .top_p = (float)j->req.top_p,
        .top_k = j->req.top_k, .seed = j->seed, .stop = stops, .n_stop = j->req.n_stop,
        .ignore_eos = j->req.ignore_eos,
    };
    sd->seq = llm_seq_create(0, 0, &r, sd->c, 0, sd->t, err, sizeof err);
    if (!sd->seq) {
        srv_job_fail(j, err);
        return -1;
    }
    sd->j = j;
    sd->fin = LLM_FINISH_NONE;
    if (j->req.json_mode || sd->k == 0)
        return json_begin(sd, j);
    llm_spec_opts o = {
        .k = sd->k, .max_new = j->max_tokens, .stop_at_eos = !j->req.ignore_eos,
        .temperature = r.temperature, .top_k = r.top_k, .top_p = r.top_p == 0 ? 1 : r.top_p,
        .draft_temperature = -1, .seed = j->seed, .on_token = on_token, .u = sd,
    };
    if (llm_spec_start(&sd->sp, &sd->te, &sd->tkv, 0, &sd->de, &sd->dkv, 0, j->prompt,
                       j->n_prompt, &o, err, sizeof err)) {
        srv_job_fail(j, err);
        llm_seq_free(sd->seq);
        sd->seq = NULL;
        sd->j = NULL;
        return -1;
    }
    sd->spec_on = 1;
    return 0;
}

/* The request is over: final event, counters, the side is free. */
static void finish(srv_side *sd, llm_finish f)
{
    srv_job *j = sd->j;
    const char *text = NULL;
    int n = llm_seq_take_text(sd->seq, 1, &text);
    int n_out = sd->seq->n_tok - sd->seq->n_prompt;
    srv_job_deliver(j, 0, text, n, n_out, f, 0);
    pthread_mutex_lock(&sd->mu);
    sd->st.requests++;
    sd->st.prompt_tokens += j->n_prompt;
    sd->st.generated_tokens += n_out;
    if (n_out > 0) {
        double ttft = j->t_first - j->t_submit;
        sd->st.ttft_hist[srv_hist_bucket(ttft)]++;
        sd->st.ttft_sum += ttft;
        sd->st.ttft_count++;
        if (n_out > 1) {
            double tpot = (j->t_final - j->t_first) / (n_out - 1);
            sd->st.tpot_hist[srv_hist_bucket(tpot)]++;
            sd->st.tpot_sum += tpot;
            sd->st.tpot_count++;
        }
    }
    if (sd->spec_on) {
        sd->st.spec_rounds += sd->sp.st.rounds;
        sd->st.spec_drafted += sd->sp.st.drafted;
        sd->st.spec_accepted += sd->sp.st.accepted;
    }
    pthread_mutex_unlock(&sd->mu);
    if (sd->spec_on)
        llm_spec_end(&sd->sp);
    sd->spec_on = 0;
    if (sd->json_on)
        sd->tkv.ops->release(&sd->tkv, 0);
    sd->json_on = 0;
    llm_seq_free(sd->seq);
    sd->seq = NULL;
    sd->j = NULL;
}

/* JSON mode, one token: mask, draw, feed the automaton, then the forward for the next.
 * 1 while it goes on, 0 once finished. */
static int json_step(srv_side *sd)
{
    char err[256];
    srv_job *j = sd->j;
    int V = sd->c->vocab_size;
    int n_ok = llm_json_mask(&sd->g, &sd->js, sd->json_cap - sd->json_n, sd->allowed);
    if (n_ok <= 0) {
        fprintf(stderr, "mlsys-lab serve: json request %ld: no token may follow (state %s)\n",
                j->serial, llm_json_mode_name(&sd->js));
        finish(sd, LLM_FINISH_ERROR);
        return 0;
    }
    for (int t = 0; t < V; t++)
        if (!sd->allowed[t])
            sd->logits[t] = -INFINITY;
    int tok = llm_sample(&sd->seq->sampler, sd->logits);
    if (!sd->allowed[tok] || llm_json_feed_token(&sd->g, &sd->js, tok)) {
        fprintf(stderr, "mlsys-lab serve: json request %ld: the sampler drew a masked token\n",
                j->serial);
        finish(sd, LLM_FINISH_ERROR);
        return 0;
    }
    sd->json_n++;
    on_token(sd, 0, 0, tok);
    if (llm_json_done(&sd->js)) {           /* a complete value is a natural end */
        finish(sd, LLM_FINISH_STOP);
        return 0;
    }
    if (sd->fin != LLM_FINISH_NONE || sd->json_n >= sd->json_cap) {
        finish(sd, sd->fin != LLM_FINISH_NONE ? sd->fin : LLM_FINISH_LENGTH);
        return 0;
    }
    int pos = j->n_prompt + sd->json_n - 1, s0 = 0;
    if (sd->tkv.ops->reserve(&sd->tkv, 0, pos + 1) != 0 ||
        llm_forward(&sd->te, &sd->tkv, 1, &s0, &pos, &tok, NULL, sd->logits, err, sizeof err)) {
        fprintf(stderr, "mlsys-lab serve: json request %ld: the forward failed\n", j->serial);
        finish(sd, LLM_FINISH_ERROR);
        return 0;
    }
    return 1;
}

/* Why a decoder that stopped by itself stopped: a stop string or max_tokens (fin), else
 * EOS before the cap, else the cap or the context. */
static llm_finish natural_end(srv_side *sd)
{
    if (sd->fin != LLM_FINISH_NONE)
        return sd->fin;
    int n_out = sd->seq->n_tok - sd->seq->n_prompt;
    int room = sd->c->seq_len - sd->seq->n_prompt + 1;
    return n_out < sd->j->max_tokens && n_out < room ? LLM_FINISH_STOP : LLM_FINISH_LENGTH;
}

int srv_side_advance(srv_side *sd)
{
    char err[256];
    srv_job *j = sd->j;
    if (!j)
        return 0;
    if (__atomic_load_n(&j->cancel, __ATOMIC_ACQUIRE)) {
        finish(sd, LLM_FINISH_CANCEL);
        return 0;
    }
    if (sd->json_on)
        return json_step(sd);
    int rc = sd->fin != LLM_FINISH_NONE ? 0 : llm_spec_round(&sd->sp, NULL, err, sizeof err);
    if (rc > 0 && sd->fin == LLM_FINISH_NONE)
        return 1;
    if (rc < 0) {
        fprintf(stderr, "mlsys-lab serve: speculative request %ld: %s\n", j->serial, err);
        finish(sd, LLM_FINISH_ERROR);
    } else {
        finish(sd, natural_end(sd));
    }
    return 0;
}

void srv_side_stats_get(srv_side *sd, srv_side_stats *st)
{
    pthread_mutex_lock(&sd->mu);
    *st = sd->st;
    pthread_mutex_unlock(&sd->mu);
}
