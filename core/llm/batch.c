/* batch.c - B sequences generated together on the engine, nano-vllm's `generate`: submit one
 * request per prompt, step the engine until they are done, collect the tokens as they come
 * (and one JSON-constrained sequence the same way).
 * With seats and a token budget for all of them, the first step prefills every prompt in one
 * forward and every later step decodes every unfinished sequence in one forward, so each
 * weight is read once per step however many sequences there are. Beside it, the reference
 * without a cache: each step recomputes every prefix from scratch. */
#include "engine.h"

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

/* One call's sequences, as the engine's callbacks fill them. */
typedef struct gen_call {
    const llm_gen_opts *o;
    int n;                    /* samples per prompt */
    int **out, *n_out;
    int *last;                /* [B·n] the token before the next one (on_token's prev) */
    int left;                 /* sequences not finished */
} gen_call;

typedef struct gen_seq {
    gen_call *call;
    int b;
} gen_seq;

static void on_event(void *u, const llm_engine_event *ev)
{
    gen_seq *g = u;
    gen_call *k = g->call;
    int b = g->b * k->n + ev->index;
    /* a BOS or EOS that ended the sequence is not part of its output */
    int special = ev->finish == LLM_FINISH_STOP &&
                  (ev->token == LLM_TOK_EOS || ev->token == LLM_TOK_BOS);
    if (ev->token >= 0 && !special) {
        k->out[b][k->n_out[b]++] = ev->token;
        if (k->o->on_token)
            k->o->on_token(k->o->u, b, k->last[b], ev->token);
        k->last[b] = ev->token;
    }
    if (ev->finish != LLM_FINISH_NONE)
        k->left--;
}

int llm_generate(llm_engine *eng, int B, const int *const *prompts, const int *n_prompt,
                 int **out, int *n_out, const llm_gen_opts *o, llm_gen_stats *st, char *err,
                 size_t errlen)
{
    memset(st, 0, sizeof *st);
    if (B < 1) {
        snprintf(err, errlen, "generate: %d sequences: at least 1", B);
        return -1;
    }
    int n = o->n > 1 ? o->n : 1;
    gen_call k = {o, n, out, n_out, mlsys_xmalloc((size_t)B * n * sizeof(int)), 0};
    gen_seq *gs = mlsys_xmalloc((size_t)B * sizeof *gs);
    int *ids = mlsys_xmalloc((size_t)B * sizeof(int));
    int rc = 0;
    for (int b = 0; b < B; b++) {
        ids[b] = -1;
        for (int i = 0; i < n; i++) {
            n_out[b * n + i] = 0;
            k.last[b * n + i] = n_prompt[b] > 0 && prompts[b] ? prompts[b][n_prompt[b] - 1]
                                                             : -1;
        }
    }
    /* submit every sequence, or none: a bad prompt cancels those already in */
    for (int b = 0; b < B && o->max_new > 0; b++) {
        gs[b] = (gen_seq){&k, b};
        llm_request r = {
            .prompt = prompts[b], .n_prompt = n_prompt[b], .max_tokens = o->max_new,
            .temperature = o->temperature, .top_p = o->top_p, .top_k = o->top_k,
            .seed = o->seeds ? o->seeds[b] : o->seed + (uint64_t)b * (uint64_t)n,
            .ignore_eos = !o->stop_at_eos, .n = n, .on_event = on_event, .u = &gs[b],
        };
        char why[256];
        ids[b] = llm_engine_submit(eng, &r, why, sizeof why);
        if (ids[b] < 0) {
            snprintf(err, errlen, "generate: sequence %d: %s", b, why);
            for (int i = 0; i < b; i++)
                llm_engine_cancel(eng, ids[i]);
            rc = -1;
            break;
        }
        k.left += n;
    }
    /* step until they are done; a step with prompt rows is prefill time, one without is a
     * decode step (the first new token of each sequence comes out of its prefill) */
    int idle = 0;
    while (k.left > 0) {
        double t0 = mlsys_now_s(), c0 = cpu_s();
        llm_step_info info;
        int ran = llm_engine_step(eng, &info);
        double dt = mlsys_now_s() - t0, dc = cpu_s() - c0;
        if (ran < 0) {
            if (!rc)
                snprintf(err, errlen, "generate: the engine failed (see the message above)");
            rc = -1;
            continue;             /* the step failed its requests: they end now */
        }
        if (ran == 0) {
            /* nothing could run: an admission rule that never admits what waits */
            if (++idle == 1000) {
                snprintf(err, errlen, "generate: the engine admits none of the %d sequences "
                         "left", k.left);
                rc = -1;
                for (int b = 0; b < B; b++)
                    if (ids[b] >= 0)
                        llm_engine_cancel(eng, ids[b]);
            }
            continue;
        }
        idle = 0;
        if (info.prefill_rows > 0) {
            st->prefill_tokens += info.prefill_rows;
            st->prefill_s += dt;
            st->prefill_cpu_s += dc;
        } else {
            st->decode_tokens += info.decode_rows;
            st->steps++;
            st->decode_s += dt;
            st->decode_cpu_s += dc;
        }
    }
    if (rc)
        for (int s = 0; s < B * n; s++)
            n_out[s] = 0;
    free(k.last);
    free(gs);
    free(ids);
    return rc;
}

/* ---- one JSON-constrained sequence ---- */

typedef struct json_call {
    const llm_json_gen_opts *o;
    int *out, n_out, prev, ended;
    llm_finish why;
    llm_req_stats st;
} json_call;

static void on_json_event(void *u, const llm_engine_event *ev)
{
    json_call *k = u;
    if (ev->token >= 0) {
        k->out[k->n_out++] = ev->token;
        if (k->o->on_token)
            k->o->on_token(k->o->u, 0, k->prev, ev->token);
        k->prev = ev->token;
    }
    if (ev->finish != LLM_FINISH_NONE) {
        k->ended = 1;
        k->why = ev->finish;
        k->st = *ev->st;
    }
}

static void on_json_mask(void *u, const llm_json_state *js, int budget,
                         const unsigned char *allowed, int n_allowed, const float *logits)
{
    json_call *k = u;
    k->o->on_step(k->o->u, js, budget, allowed, n_allowed, logits);
}

int llm_json_generate(llm_engine *eng, llm_json_grammar *g, const int *prompt, int n_prompt,
                      const llm_json_gen_opts *o, int *out, int *n_out,
                      llm_json_gen_stats *st, char *err, size_t errlen)
{
    memset(st, 0, sizeof *st);
    *n_out = 0;
    json_call k;
    memset(&k, 0, sizeof k);
    k.o = o;
    k.out = out;
    k.prev = n_prompt > 0 && prompt ? prompt[n_prompt - 1] : -1;
    llm_request r = {
        .prompt = prompt, .n_prompt = n_prompt, .max_tokens = o->max_new,
        .temperature = o->temperature, .top_k = o->top_k, .top_p = o->top_p, .seed = o->seed,
        .ignore_eos = 1, .json = 1, .grammar = g, .json_start = o->start, .mask = o->mask,
        .on_mask = o->on_step ? on_json_mask : NULL, .on_event = on_json_event, .u = &k,
    };
    char why[256];
    if (llm_engine_submit(eng, &r, why, sizeof why) < 0) {
        snprintf(err, errlen, "json generate: %s", why);
        return -1;
    }
    double sample_s = 0;
    while (!k.ended) {
        int ran = llm_engine_step(eng, NULL);
        if (ran <= 0)
            continue;
        llm_step_stats ss;
        llm_engine_last_stats(eng, &ss);
        st->forward_s += 1e-9 * (double)llm_phase_ns(&ss, LLM_PHASE_FORWARD);
        sample_s += 1e-9 * (double)llm_phase_ns(&ss, LLM_PHASE_SAMPLE);
    }
    *n_out = k.n_out;
    st->tokens = k.n_out;
    st->allowed_sum = k.st.json_allowed;
    st->mask_s = k.st.json_mask_s;
    st->sample_s = sample_s > st->mask_s ? sample_s - st->mask_s : 0.0;
    st->done = k.why == LLM_FINISH_STOP;
    if (k.why == LLM_FINISH_ERROR || k.why == LLM_FINISH_CANCEL) {
        snprintf(err, errlen, "json generate: the request %s", llm_finish_name(k.why));
        return -1;
    }
    return 0;
}

/* ---- the reference: no cache, every prefix recomputed ---- */

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

int llm_generate_nocache(const llm_config *c, const llm_weights *w, llm_sampler *samplers,
                         int B, const int *const *prompts, const int *n_prompt, int **out,
                         int *n_out, const llm_gen_opts *o, llm_gen_stats *st, char *err,
                         size_t errlen)
{
    int S = c->seq_len, V = c->vocab_size;
    memset(st, 0, sizeof *st);
    for (int b = 0; b < B; b++) {
        if (!prompts[b] || n_prompt[b] < 1 || n_prompt[b] > S) {
            snprintf(err, errlen, "generate: sequence %d: prompt of %d tokens (1..%d allowed)",
                     b, n_prompt[b], S);
            return -1;
        }
        n_out[b] = 0;
    }
    float *logits = mlsys_xmalloc((size_t)V * sizeof(float));
    int *hist = mlsys_xmalloc((size_t)S * sizeof(int));
    double t0 = mlsys_now_s();
    for (int b = 0; b < B; b++) {
        int room = S - n_prompt[b] + 1;   /* the last token drawn is never fed back */
        int cap = o->max_new < room ? o->max_new : room;
        if (cap <= 0)
            continue;
        memcpy(hist, prompts[b], (size_t)n_prompt[b] * sizeof(int));
        int n = n_prompt[b];
        /* the whole prefix again, every step: O(n^2) work for n tokens */
        for (;;) {
            double c0 = cpu_s(), w0 = mlsys_now_s();
            llm_forward_nocache(c, w, hist, n, 1, logits);
            int tok = llm_sample(&samplers[b], logits);
            if (n == n_prompt[b]) {
                st->prefill_tokens += n;
                st->prefill_cpu_s += cpu_s() - c0;
            } else {
                st->decode_tokens++;
                st->steps++;
                st->decode_s += mlsys_now_s() - w0;
                st->decode_cpu_s += cpu_s() - c0;
            }
            if (take(b, tok, cap, out, n_out, hist[n - 1], o))
                break;
            hist[n++] = tok;
        }
    }
    st->prefill_s = mlsys_now_s() - t0 - st->decode_s;
    free(logits);
    free(hist);
    return 0;
}
