/* seq.c - one request as the engine sees it: its tokens (the prompt, then what it generated),
 * how many of them have keys and values in the cache, its own sampler (so its draws never
 * depend on its neighbours in a batch), in JSON mode its automaton's state, its stop rules
 * (EOS, max_tokens, the context, stop strings, a complete JSON value) and its output text,
 * of which it hands out only what no stop string can still claim, as valid UTF-8. The
 * scheduler moves sequences between queues; this file never looks at the cache. */
#include "engine.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *llm_finish_name(llm_finish f)
{
    switch (f) {
    case LLM_FINISH_STOP: return "stop";
    case LLM_FINISH_LENGTH: return "length";
    case LLM_FINISH_CANCEL: return "cancelled";
    case LLM_FINISH_ERROR: return "error";
    default: return "none";
    }
}

llm_seq *llm_seq_create(int id, int index, const llm_request *r, const llm_config *c,
                        int max_len, const llm_tokenizer *t, char *err, size_t errlen)
{
    int S = max_len > 0 && max_len < c->seq_len ? max_len : c->seq_len;
    if (!r->prompt || r->n_prompt < 1 || r->n_prompt > S) {
        snprintf(err, errlen, "prompt of %d tokens: the context holds 1 to %d", r->n_prompt,
                 S);
        return NULL;
    }
    for (int i = 0; i < r->n_prompt; i++)
        if (r->prompt[i] < 0 || r->prompt[i] >= c->vocab_size) {
            snprintf(err, errlen, "prompt token %d is id %d: the vocabulary has ids 0 to %d",
                     i, r->prompt[i], c->vocab_size - 1);
            return NULL;
        }
    if (r->max_tokens < 1) {
        snprintf(err, errlen, "max_tokens %d: at least 1", r->max_tokens);
        return NULL;
    }
    float top_p = r->top_p == 0.0f ? 1.0f : r->top_p;
    if (!(r->temperature >= 0.0f) || !isfinite(r->temperature) || !(top_p > 0.0f) ||
        !(top_p <= 1.0f) || r->top_k < 0) {
        snprintf(err, errlen, "sampling: temperature %g (>= 0), top_p %g (in (0, 1]), top_k "
                 "%d (>= 0)", (double)r->temperature, (double)r->top_p, r->top_k);
        return NULL;
    }
    if (r->n_stop < 0 || r->n_stop > LLM_MAX_STOP || (r->n_stop > 0 && !r->stop)) {
        snprintf(err, errlen, "%d stop strings: at most %d", r->n_stop, LLM_MAX_STOP);
        return NULL;
    }
    if (r->n_stop > 0 && !t) {
        snprintf(err, errlen, "stop strings need a tokenizer (the engine has none)");
        return NULL;
    }
    for (int i = 0; i < r->n_stop; i++) {
        size_t n = r->stop[i] ? strlen(r->stop[i]) : 0;
        if (n < 1 || n > LLM_MAX_STOP_LEN) {
            snprintf(err, errlen, "stop string %d: 1 to %d bytes", i, LLM_MAX_STOP_LEN);
            return NULL;
        }
    }
    llm_json_state js;
    if (r->json) {
        if (!r->grammar || r->grammar->V != c->vocab_size) {
            snprintf(err, errlen, "JSON mode needs a grammar over the model's %d tokens (an "
                     "engine with a tokenizer has one)", c->vocab_size);
            return NULL;
        }
        if (r->json_start)
            js = *r->json_start;
        else
            llm_json_start(r->grammar, &js);
        int room = S + 1 - r->n_prompt, cap = r->max_tokens < room ? r->max_tokens : room;
        int need = llm_json_min_close(r->grammar, &js);
        if (cap < need) {
            snprintf(err, errlen, "JSON mode: %d tokens cannot hold the shortest JSON text "
                     "that closes it (%d bytes)", cap, need);
            return NULL;
        }
    }

    llm_seq *s = mlsys_xcalloc(1, sizeof *s);
    s->id = id;
    s->index = index;
    s->status = LLM_SEQ_WAITING;
    s->kv_seq = -1;
    /* room for every position plus the last token drawn, which is never fed back */
    s->cap = S + 1;
    s->tok = mlsys_xmalloc((size_t)s->cap * sizeof(int));
    memcpy(s->tok, r->prompt, (size_t)r->n_prompt * sizeof(int));
    s->n_tok = s->n_prompt = r->n_prompt;
    s->max_tokens = r->max_tokens < s->cap - s->n_prompt ? r->max_tokens : s->cap - s->n_prompt;
    s->ignore_eos = r->ignore_eos;
    if (r->json) {
        s->json = 1;
        s->grammar = r->grammar;
        s->js = js;
        s->mask = r->mask ? r->mask : llm_json_mask;
        s->on_mask = r->on_mask;
    }
    llm_sampler_init(&s->sampler, c->vocab_size, r->temperature, r->top_k, top_p,
                     r->seed + (uint64_t)index);
    for (int i = 0; i < r->n_stop; i++) {
        s->stop[i] = mlsys_xstrdup(r->stop[i]);
        int n = (int)strlen(s->stop[i]);
        s->stop_max = n > s->stop_max ? n : s->stop_max;
    }
    s->n_stop = r->n_stop;
    s->on_event = r->on_event;
    s->u = r->u;
    s->st.n_prompt = r->n_prompt;
    return s;
}

void llm_seq_free(llm_seq *s)
{
    if (!s)
        return;
    llm_sampler_fini(&s->sampler);
    for (int i = 0; i < s->n_stop; i++)
        free(s->stop[i]);
    free(s->text);
    free(s->emit);
    free(s->tok);
    free(s);
}

static void text_add(llm_seq *s, const char *b, int n)
{
    if (n <= 0)
        return;
    if (s->text_len + (size_t)n + 1 > s->text_cap) {
        s->text_cap = (s->text_len + (size_t)n + 1) * 2;
        char *p = realloc(s->text, s->text_cap);
        if (!p) {
            fprintf(stderr, "out of memory for a request's text\n");
            exit(1);
        }
        s->text = p;
    }
    memcpy(s->text + s->text_len, b, (size_t)n);
    s->text_len += (size_t)n;
    s->text[s->text_len] = 0;
}

/* The first stop string in the text, searched from where a new match could begin (one
 * whose end lies in the bytes just added). Returns its offset, or -1. */
static long find_stop(const llm_seq *s, size_t added)
{
    size_t from = s->text_len - added;
    from = from > (size_t)s->stop_max ? from - (size_t)s->stop_max + 1 : 0;
    long best = -1;
    for (int i = 0; i < s->n_stop; i++) {
        const char *m = memmem(s->text + from, s->text_len - from, s->stop[i],
                               strlen(s->stop[i]));
        if (m && (best < 0 || m - s->text < best))
            best = m - s->text;
    }
    return best;
}

llm_finish llm_seq_append(llm_seq *s, int tok, const llm_tokenizer *t, int max_len)
{
    int prev = s->tok[s->n_tok - 1];
    s->tok[s->n_tok++] = tok;
    s->st.n_out = s->n_tok - s->n_prompt;
    if (!s->ignore_eos && (tok == LLM_TOK_EOS || tok == LLM_TOK_BOS))
        return LLM_FINISH_STOP;           /* a special: no text */
    if (t) {
        int n = 0;
        const char *b = llm_bpe_token_bytes(t, prev, tok, &n);
        text_add(s, b, n);
        if (s->n_stop > 0 && n > 0) {
            long at = find_stop(s, (size_t)n);
            if (at >= 0) {
                s->text_len = (size_t)at;         /* the stop string is not output */
                s->text[at] = 0;
                if (s->text_sent > s->text_len)
                    s->text_sent = s->text_len;
                return LLM_FINISH_STOP;
            }
        }
    }
    if (s->json && llm_json_done(&s->js))
        return LLM_FINISH_STOP;           /* a complete value is a natural end */
    if (s->st.n_out >= s->max_tokens || s->n_tok > max_len)
        return LLM_FINISH_LENGTH;
    return LLM_FINISH_NONE;
}

/* Longest tail of the text that is a proper prefix of some stop string: it might still
 * become one, so it waits. */
static size_t held_back(const llm_seq *s)
{
    size_t best = 0;
    for (int i = 0; i < s->n_stop; i++) {
        size_t m = strlen(s->stop[i]);
        for (size_t k = m - 1; k > best; k--)
            if (k <= s->text_len && !memcmp(s->text + s->text_len - k, s->stop[i], k)) {
                best = k;
                break;
            }
    }
    return best;
}

/* ---- UTF-8: what a client may be handed ----
 * The well-formed sequences (Unicode's table 3-7): 00-7F; C2-DF then 80-BF; E0 A0-BF,
 * E1-EC 80-BF, ED 80-9F, EE-EF 80-BF, each then 80-BF; F0 90-BF, F1-F3 80-BF, F4 80-8F, each
 * then 80-BF 80-BF. A byte-level tokenizer can emit any byte, so a token may end inside a
 * character (the next token completes it) or produce bytes no decoder accepts. */

/* The sequence at b[0..n): > 0 its length when complete and valid; 0 when the bytes there
 * are a valid start cut off by the end; -k when its first k bytes can never be valid (the
 * maximal subpart that one U+FFFD replaces). */
static int utf8_seq(const unsigned char *b, size_t n)
{
    unsigned c = b[0];
    int len;
    unsigned lo = 0x80, hi = 0xbf;
    if (c < 0x80)
        return 1;
    if (c >= 0xc2 && c <= 0xdf)
        len = 2;
    else if (c >= 0xe0 && c <= 0xef) {
        len = 3;
        lo = c == 0xe0 ? 0xa0 : 0x80;
        hi = c == 0xed ? 0x9f : 0xbf;
    } else if (c >= 0xf0 && c <= 0xf4) {
        len = 4;
        lo = c == 0xf0 ? 0x90 : 0x80;
        hi = c == 0xf4 ? 0x8f : 0xbf;
    } else {
        return -1;            /* a continuation byte alone, C0, C1, F5-FF */
    }
    for (int i = 1; i < len; i++) {
        if ((size_t)i >= n)
            return 0;
        unsigned x = b[i];
        if (x < (i == 1 ? lo : 0x80) || x > (i == 1 ? hi : 0xbf))
            return -i;
    }
    return len;
}

size_t llm_utf8_valid_prefix(const char *b, size_t n, int *bad)
{
    size_t i = 0;
    *bad = 0;
    while (i < n) {
        int k = utf8_seq((const unsigned char *)b + i, n - i);
        if (k <= 0) {
            *bad = k < 0;
            break;
        }
        i += (size_t)k;
    }
    return i;
}

static void emit_add(llm_seq *s, size_t *len, const char *b, size_t n)
{
    if (*len + n > s->emit_cap) {
        s->emit_cap = (*len + n) * 2 + 16;
        char *p = realloc(s->emit, s->emit_cap);
        if (!p) {
            fprintf(stderr, "out of memory for a request's text\n");
            exit(1);
        }
        s->emit = p;
    }
    memcpy(s->emit + *len, b, n);
    *len += n;
}

int llm_seq_take_text(llm_seq *s, int final, const char **text)
{
    static const char replacement[3] = {(char)0xef, (char)0xbf, (char)0xbd};   /* U+FFFD */
    size_t upto = s->text_len;
    if (!final)
        upto -= held_back(s);
    *text = "";
    if (upto <= s->text_sent)
        return 0;
    size_t i = s->text_sent, len = 0;
    while (i < upto) {
        int bad;
        size_t ok = llm_utf8_valid_prefix(s->text + i, upto - i, &bad);
        emit_add(s, &len, s->text + i, ok);
        i += ok;
        if (i == upto)
            break;
        if (bad) {            /* never valid: its maximal subpart becomes one U+FFFD */
            emit_add(s, &len, replacement, 3);
            i += (size_t)-utf8_seq((const unsigned char *)s->text + i, upto - i);
        } else if (final) {   /* cut off at the very end, and nothing more comes */
            emit_add(s, &len, replacement, 3);
            i = upto;
        } else {
            break;            /* may complete with the next token: held back */
        }
    }
    s->text_sent = i;
    *text = len ? s->emit : "";
    return (int)len;
}
