/* side.c - the requests the batched engine cannot run, decoded one at a time on the engine
 * thread with a single-sequence engine of their own: response_format json_object under the
 * JSON mask (core/llm/json_mask.c, the whole request in one go), and every request of a
 * server started with --speculative K (core/llm/speculative.c, one round per turn of the
 * loop, so a cancel lands between rounds). Text and stop strings go through an llm_seq. */
#include "srv_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct srv_side {
    const llm_config *c;
    const llm_tokenizer *t;
    int k;                        /* speculative: tokens drafted per round (0: off) */
    llm_engine te, de;
    llm_kv tkv, dkv;
    int have_te, have_tkv, have_de, have_dkv, have_g;
    llm_json_grammar g;
    /* the request in progress */
    srv_job *j;
    llm_seq *seq;
    llm_finish fin;               /* set by a stop string or max_tokens */
    int spec_on;                  /* llm_spec started */
    llm_spec sp;
    pthread_mutex_t mu;           /* st */
    srv_side_stats st;
};

int srv_hist_bucket(double x)
{
    int b = 0;
    while (b < LLM_SERVE_HIST_N - 1 && x > llm_serve_hist_bounds[b])
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
    int rows = llm_engine_rows_that_fit(c, 64);
    if (rows < spec_k + 1)
        rows = spec_k + 1;
    if (llm_engine_init(&sd->te, c, w, rows, err, errlen))
        goto fail;
    sd->have_te = 1;
    if (llm_kv_init_contiguous(&sd->tkv, c, 1, 0, err, errlen))
        goto fail;
    sd->have_tkv = 1;
    if (llm_json_grammar_init_tok(&sd->g, t, NULL, err, errlen))
        goto fail;
    sd->have_g = 1;
    if (spec_k > 0) {
        if (!dc || !dw || dc->vocab_size != c->vocab_size || dc->seq_len != c->seq_len) {
            snprintf(err, errlen, "--speculative needs a draft model with the target's "
                     "vocabulary (%d) and context (%d)", c->vocab_size, c->seq_len);
            goto fail;
        }
        if (llm_engine_init(&sd->de, dc, dw, 8, err, errlen))
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
    if (sd->have_g)
        llm_json_grammar_fini(&sd->g);
    if (sd->have_dkv)
        llm_kv_free(&sd->dkv);
    if (sd->have_de)
        llm_engine_fini(&sd->de);
    if (sd->have_tkv)
        llm_kv_free(&sd->tkv);
    if (sd->have_te)
        llm_engine_fini(&sd->te);
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
    srv_job_deliver(sd->j, text, n, sd->seq->n_tok - sd->seq->n_prompt, LLM_FINISH_NONE, 0);
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
    sd->seq = llm_seq_create(0, &r, sd->c, sd->t, err, sizeof err);
    if (!sd->seq) {
        srv_job_fail(j, err);
        return -1;
    }
    sd->j = j;
    sd->fin = LLM_FINISH_NONE;
    if (j->req.json_mode || sd->k == 0)
        return 0;
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
    srv_job_deliver(j, text, n, n_out, f, 0);
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
    llm_seq_free(sd->seq);
    sd->seq = NULL;
    sd->j = NULL;
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
    if (!sd->spec_on) {           /* the JSON mask: the whole request now */
        llm_json_gen_opts o = {.max_new = j->max_tokens, .on_token = on_token, .u = sd};
        int room = sd->c->seq_len - j->n_prompt + 1;
        if (o.max_new > room)
            o.max_new = room;
        int *out = mlsys_xmalloc((size_t)(o.max_new > 0 ? o.max_new : 1) * sizeof(int));
        int n_out = 0;
        llm_json_gen_stats st;
        int rc = o.max_new < 1 ? -1 :
            llm_json_generate(&sd->te, &sd->tkv, &sd->seq->sampler, &sd->g, j->prompt,
                              j->n_prompt, &o, out, &n_out, &st, err, sizeof err);
        sd->tkv.ops->release(&sd->tkv, 0);
        free(out);
        if (rc) {
            fprintf(stderr, "mlsys-lab serve: json request %ld: %s\n", j->serial,
                    o.max_new < 1 ? "no room left in the context" : err);
            finish(sd, LLM_FINISH_ERROR);
        } else {
            /* a complete value is a natural end, even on the last token allowed */
            finish(sd, st.done ? LLM_FINISH_STOP
                       : sd->fin != LLM_FINISH_NONE ? sd->fin : LLM_FINISH_LENGTH);
        }
        return 0;
    }
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
