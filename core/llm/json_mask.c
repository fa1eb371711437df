/* json_mask.c - grammar-constrained decoding for JSON: a pushdown automaton over bytes (a
 * lexical mode plus a stack of open containers) and a mask over the vocabulary computed from
 * it before every token (the engine applies it to a JSON request's row: seq.c, runner.c;
 * llm_json_generate in batch.c runs one such request). The automaton also knows the
 * fewest bytes that would close the text from any state, so a token budget can be honoured:
 * the mask refuses a token after which the text could not be finished in time. What the
 * language allows, and why: llm.h. Byte-level reference for the tests: grammar.c's
 * llm_json_viable_prefix, which parses the whole prefix every time. */
#include "llm.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Lexical modes. "After" means a value just ended inside a container. */
enum {
    M_VALUE,        /* a value must start (after ':' or an array's ',', or at the top) */
    M_ARR_FIRST,    /* after '[': a value or ']' */
    M_OBJ_FIRST,    /* after '{': a key or '}' */
    M_OBJ_KEY,      /* after an object's ',': a key */
    M_KEY,          /* inside a key string */
    M_COLON,        /* after a key: ':' */
    M_AFTER,        /* after a value in a container: ',' or the closing bracket */
    M_STR,          /* inside a value string */
    M_ESC,          /* after a backslash in a string (sub: 1 key, 0 value) */
    M_NUM_MINUS,    /* "-": a digit must follow */
    M_NUM_ZERO,     /* "0" or "-0": no more integer digits */
    M_NUM_INT,      /* integer digits */
    M_NUM_DOT,      /* "." : a digit must follow */
    M_NUM_FRAC,     /* fraction digits */
    M_NUM_E,        /* "e": a sign or a digit */
    M_NUM_ESIGN,    /* "e+": a digit */
    M_NUM_EXP,      /* exponent digits */
    M_LIT,          /* true / false / null, sub = which, pos = letters typed */
    M_DONE,         /* the top value is complete: nothing more */
    M_COUNT
};

static const char *const mode_names[M_COUNT] = {
    "value", "array-first", "object-first", "object-key", "key", "colon", "after-value",
    "string", "escape", "number-minus", "number-zero", "number-int", "number-dot",
    "number-frac", "number-e", "number-esign", "number-exp", "literal", "done",
};

static const char *const lit_word[3] = {"true", "false", "null"};

static const char *const type_names[LLM_JT_COUNT] = {
    "any", "string", "integer", "number", "boolean", "null", "array", "object", "container",
};

const char *llm_json_type_name(llm_json_type t)
{
    return t >= 0 && t < LLM_JT_COUNT ? type_names[t] : "?";
}

const char *llm_json_mode_name(const llm_json_state *s)
{
    return s->mode < M_COUNT ? mode_names[s->mode] : "?";
}

int llm_json_schema_parse(llm_json_schema *sc, const char *spec, char *err, size_t errlen)
{
    memset(sc, 0, sizeof *sc);
    const char *p = spec;
    while (*p) {
        const char *colon = strchr(p, ':');
        const char *end = strchr(p, ',');
        if (!end)
            end = p + strlen(p);
        if (!colon || colon > end) {
            snprintf(err, errlen, "schema: '%.*s' is not KEY:TYPE", (int)(end - p), p);
            return -1;
        }
        int kl = (int)(colon - p);
        if (kl < 1 || kl >= LLM_JSON_KEY_MAX) {
            snprintf(err, errlen, "schema: key '%.*s' must have 1 to %d characters", kl, p,
                     LLM_JSON_KEY_MAX - 1);
            return -1;
        }
        for (int i = 0; i < kl; i++) {
            char c = p[i];
            if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  c == '_' || c == '-')) {
                snprintf(err, errlen, "schema: key '%.*s': letters, digits, '_' and '-' only",
                         kl, p);
                return -1;
            }
        }
        if (sc->n_keys == LLM_JSON_MAX_KEYS) {
            snprintf(err, errlen, "schema: more than %d keys", LLM_JSON_MAX_KEYS);
            return -1;
        }
        for (int i = 0; i < sc->n_keys; i++)
            if ((int)strlen(sc->key[i]) == kl && !memcmp(sc->key[i], p, (size_t)kl)) {
                snprintf(err, errlen, "schema: key '%.*s' given twice", kl, p);
                return -1;
            }
        int tl = (int)(end - colon - 1), t;
        for (t = 0; t < LLM_JT_CONTAINER; t++)
            if ((int)strlen(type_names[t]) == tl && !memcmp(type_names[t], colon + 1, (size_t)tl))
                break;
        if (t == LLM_JT_CONTAINER) {
            snprintf(err, errlen, "schema: type '%.*s' of key '%.*s' is not one of string, "
                     "integer, number, boolean, null, array, object, any", tl, colon + 1, kl, p);
            return -1;
        }
        memcpy(sc->key[sc->n_keys], p, (size_t)kl);
        sc->key[sc->n_keys][kl] = 0;
        sc->type[sc->n_keys] = (llm_json_type)t;
        sc->n_keys++;
        p = *end ? end + 1 : end;
    }
    if (sc->n_keys == 0) {
        snprintf(err, errlen, "schema: no keys (KEY:TYPE,KEY:TYPE...)");
        return -1;
    }
    return 0;
}

/* ---- the automaton ---- */

static int top_of(const llm_json_state *s)
{
    return s->depth ? s->stack[s->depth - 1] : 0;
}

static uint16_t all_keys(const llm_json_grammar *g)
{
    return (uint16_t)((1u << g->schema.n_keys) - 1u);
}

/* A value ended: back in the container (or done at the top). */
static int value_end(llm_json_state *s)
{
    s->mode = s->depth == 0 ? M_DONE : M_AFTER;
    s->vtype = LLM_JT_ANY;
    s->sub = s->pos = 0;
    return 0;
}

static int push(llm_json_state *s, uint8_t kind, uint8_t mode)
{
    if (s->depth >= LLM_JSON_MAX_DEPTH)
        return -1;
    s->stack[s->depth++] = kind;
    s->mode = mode;
    s->vtype = LLM_JT_ANY;
    return 0;
}

static int pop(llm_json_state *s)
{
    if (s->depth == 0 || s->depth > LLM_JSON_MAX_DEPTH)
        return -1;
    s->stack[--s->depth] = 0;          /* keeps equal states byte-for-byte equal */
    if (s->depth == 0)
        s->seen = 0, s->cur_key = -1, s->key_cand = 0;
    return value_end(s);
}

static int ws_byte(unsigned char c)
{
    return c == ' ' || c == '\n' || c == '\t' || c == '\r';
}

/* One whitespace byte between tokens, never two in a row. */
static int take_ws(llm_json_state *s)
{
    if (s->ws)
        return -1;
    s->ws = 1;
    return 0;
}

static int type_allows(int vtype, int kind)
{
    switch (vtype) {
    case LLM_JT_ANY: return 1;
    case LLM_JT_CONTAINER: return kind == LLM_JT_OBJECT || kind == LLM_JT_ARRAY;
    case LLM_JT_NUMBER: return kind == LLM_JT_NUMBER || kind == LLM_JT_INTEGER;
    default: return vtype == kind;
    }
}

/* The first byte of a value, of the type the state asks for. */
static int value_begin(const llm_json_grammar *g, llm_json_state *s, unsigned char c)
{
    int vt = s->vtype;
    switch (c) {
    case '{':
        if (!type_allows(vt, LLM_JT_OBJECT))
            return -1;
        return push(s, s->depth == 0 && g->has_schema ? 'S' : 'o', M_OBJ_FIRST);
    case '[':
        if (!type_allows(vt, LLM_JT_ARRAY))
            return -1;
        return push(s, 'a', M_ARR_FIRST);
    case '"':
        if (!type_allows(vt, LLM_JT_STRING))
            return -1;
        s->mode = M_STR;
        return 0;
    case 't': case 'f': case 'n': {
        int w = c == 't' ? 0 : c == 'f' ? 1 : 2;
        if (!type_allows(vt, w == 2 ? LLM_JT_NULL : LLM_JT_BOOLEAN))
            return -1;
        s->mode = M_LIT;
        s->sub = (uint8_t)w;
        s->pos = 1;
        return 0;
    }
    default:
        if (c != '-' && !(c >= '0' && c <= '9'))
            return -1;
        if (!type_allows(vt, LLM_JT_INTEGER))
            return -1;
        s->mode = c == '-' ? M_NUM_MINUS : c == '0' ? M_NUM_ZERO : M_NUM_INT;
        return 0;       /* vtype stays: an integer may not take '.' or 'e' */
    }
}

static int key_begin(const llm_json_grammar *g, llm_json_state *s)
{
    s->mode = M_KEY;
    s->pos = 0;
    if (top_of(s) == 'S')
        s->key_cand = (uint16_t)(all_keys(g) & ~s->seen);
    return 0;
}

static int digit(unsigned char c)
{
    return c >= '0' && c <= '9';
}

static int step(const llm_json_grammar *g, llm_json_state *s, unsigned char c)
{
    int top = top_of(s);
    switch (s->mode) {
    case M_VALUE:
    case M_ARR_FIRST:
        if (ws_byte(c))
            return take_ws(s);
        s->ws = 0;
        if (s->mode == M_ARR_FIRST && c == ']')
            return pop(s);
        return value_begin(g, s, c);
    case M_OBJ_FIRST:
        if (ws_byte(c))
            return take_ws(s);
        s->ws = 0;
        if (c == '}') {
            if (top == 'S' && (s->seen & all_keys(g)) != all_keys(g))
                return -1;
            return pop(s);
        }
        return c == '"' ? key_begin(g, s) : -1;
    case M_OBJ_KEY:
        if (ws_byte(c))
            return take_ws(s);
        s->ws = 0;
        return c == '"' ? key_begin(g, s) : -1;
    case M_KEY:
        if (top == 'S') {
            /* a schema key: each byte keeps the keys it still spells */
            if (c == '"') {
                for (int i = 0; i < g->schema.n_keys; i++)
                    if ((s->key_cand >> i & 1) && g->key_len[i] == s->pos) {
                        s->cur_key = (int8_t)i;
                        s->seen |= (uint16_t)(1u << i);
                        s->key_cand = 0;
                        s->pos = 0;
                        s->mode = M_COLON;
                        return 0;
                    }
                return -1;
            }
            uint16_t keep = 0;
            for (int i = 0; i < g->schema.n_keys; i++)
                if ((s->key_cand >> i & 1) && s->pos < g->key_len[i] &&
                    (unsigned char)g->schema.key[i][s->pos] == c)
                    keep |= (uint16_t)(1u << i);
            if (!keep)
                return -1;
            s->key_cand = keep;
            s->pos++;
            return 0;
        }
        if (c == '"') {
            s->mode = M_COLON;
            return 0;
        }
        if (c == '\\') {
            s->mode = M_ESC;
            s->sub = 1;
            return 0;
        }
        return c >= 0x20 && c < 0x7f ? 0 : -1;
    case M_STR:
        if (c == '"')
            return value_end(s);
        if (c == '\\') {
            s->mode = M_ESC;
            s->sub = 0;
            return 0;
        }
        return c >= 0x20 && c < 0x7f ? 0 : -1;
    case M_ESC:
        if (!c || !strchr("\"\\/bfnrt", c))
            return -1;
        s->mode = s->sub ? M_KEY : M_STR;
        s->sub = 0;
        return 0;
    case M_COLON:
        if (ws_byte(c))
            return take_ws(s);
        s->ws = 0;
        if (c != ':')
            return -1;
        s->mode = M_VALUE;
        s->vtype = (uint8_t)(top == 'S' ? g->schema.type[s->cur_key] : LLM_JT_ANY);
        return 0;
    case M_AFTER:
        if (ws_byte(c))
            return take_ws(s);
        s->ws = 0;
        if (c == ',') {
            if (top == 'a') {
                s->mode = M_VALUE;
                s->vtype = LLM_JT_ANY;
                return 0;
            }
            if (top == 'S' && (s->seen & all_keys(g)) == all_keys(g))
                return -1;                     /* every key is there: only '}' */
            s->mode = M_OBJ_KEY;
            return 0;
        }
        if (c == '}' && (top == 'o' || (top == 'S' && s->seen == all_keys(g))))
            return pop(s);
        if (c == ']' && top == 'a')
            return pop(s);
        return -1;
    case M_NUM_MINUS:
        if (!digit(c))
            return -1;
        s->mode = c == '0' ? M_NUM_ZERO : M_NUM_INT;
        return 0;
    case M_NUM_ZERO:
    case M_NUM_INT:
        if (digit(c)) {
            if (s->mode == M_NUM_ZERO)
                return -1;                     /* no leading zeros */
            return 0;
        }
        if (c == '.' && s->vtype != LLM_JT_INTEGER) {
            s->mode = M_NUM_DOT;
            return 0;
        }
        if ((c == 'e' || c == 'E') && s->vtype != LLM_JT_INTEGER) {
            s->mode = M_NUM_E;
            return 0;
        }
        break;                                 /* a delimiter ends the number */
    case M_NUM_DOT:
        if (!digit(c))
            return -1;
        s->mode = M_NUM_FRAC;
        return 0;
    case M_NUM_FRAC:
        if (digit(c))
            return 0;
        if (c == 'e' || c == 'E') {
            s->mode = M_NUM_E;
            return 0;
        }
        break;
    case M_NUM_E:
        if (c == '+' || c == '-') {
            s->mode = M_NUM_ESIGN;
            return 0;
        }
        if (!digit(c))
            return -1;
        s->mode = M_NUM_EXP;
        return 0;
    case M_NUM_ESIGN:
        if (!digit(c))
            return -1;
        s->mode = M_NUM_EXP;
        return 0;
    case M_NUM_EXP:
        if (digit(c))
            return 0;
        break;
    case M_LIT:
        if (lit_word[s->sub][s->pos] != (char)c)
            return -1;
        s->pos++;
        if (!lit_word[s->sub][s->pos])
            return value_end(s);
        return 0;
    default:
        return -1;                             /* done: nothing may follow */
    }
    /* a complete number meets the byte after it: the number ends, the byte is read again */
    value_end(s);
    return step(g, s, c);
}

int llm_json_feed(const llm_json_grammar *g, llm_json_state *s, const char *b, int n)
{
    llm_json_state t = *s;
    for (int i = 0; i < n; i++)
        if (step(g, &t, (unsigned char)b[i]))
            return -1;
    *s = t;
    return 0;
}

int llm_json_feed_token(const llm_json_grammar *g, llm_json_state *s, int tok)
{
    if (tok < 0 || tok >= g->V || g->tok_len[tok] == 0)
        return -1;
    return llm_json_feed(g, s, (const char *)g->tok[tok], g->tok_len[tok]);
}

int llm_json_done(const llm_json_state *s)
{
    return s->mode == M_DONE;
}

void llm_json_start(const llm_json_grammar *g, llm_json_state *s)
{
    memset(s, 0, sizeof *s);
    s->mode = M_VALUE;
    s->vtype = (uint8_t)(g->has_schema ? LLM_JT_OBJECT : LLM_JT_CONTAINER);
    s->cur_key = -1;
}

/* ---- the distance to a complete text ---- */

/* The shortest value of type t: 0, "", [], {}, true, null; the schema object in full. */
static int minval(const llm_json_grammar *g, int t, int depth)
{
    switch (t) {
    case LLM_JT_STRING: case LLM_JT_ARRAY: case LLM_JT_CONTAINER: return 2;
    case LLM_JT_BOOLEAN: case LLM_JT_NULL: return 4;
    case LLM_JT_OBJECT: {
        if (depth > 0 || !g->has_schema)
            return 2;
        int sum = 0;                       /* '{' + keys (the first without its comma) + '}' */
        for (int i = 0; i < g->schema.n_keys; i++)
            sum += g->key_cost[i];
        return sum + 1;
    }
    default: return 1;
    }
}

/* The schema object's keys not yet written, each with its comma, then '}'. */
static int rest_schema(const llm_json_grammar *g, uint16_t seen)
{
    int sum = 1;
    for (int i = 0; i < g->schema.n_keys; i++)
        if (!(seen >> i & 1))
            sum += g->key_cost[i];
    return sum;
}

/* Closing an enclosing container once the value inside it has ended. */
static int after_cost(const llm_json_grammar *g, const llm_json_state *s, int kind)
{
    return kind == 'S' ? rest_schema(g, s->seen) : 1;
}

int llm_json_min_close(const llm_json_grammar *g, const llm_json_state *s)
{
    int d = s->depth, top = top_of(s), cost = 0;
    int below = d - 1;          /* frames under the top one, closed after it */
    switch (s->mode) {
    case M_DONE:
        return 0;
    case M_VALUE:
        cost = minval(g, s->vtype, d);
        if (d == 0)
            return cost;
        cost += after_cost(g, s, top);
        break;
    case M_ARR_FIRST:
        cost = 1;
        break;
    case M_OBJ_FIRST:
        cost = top == 'S' ? rest_schema(g, s->seen) - (s->seen != all_keys(g)) : 1;
        break;
    case M_OBJ_KEY:
        /* '"":0}' in a free object; in the schema object the comma is typed already */
        cost = top == 'S' ? rest_schema(g, s->seen) - 1 : 5;
        break;
    case M_KEY:
        if (top == 'S') {
            int best = -1;
            for (int i = 0; i < g->schema.n_keys; i++)
                if (s->key_cand >> i & 1) {
                    int c = g->key_len[i] - s->pos + 2 + minval(g, g->schema.type[i], d) +
                            rest_schema(g, (uint16_t)(s->seen | (1u << i)));
                    if (best < 0 || c < best)
                        best = c;
                }
            cost = best;
        } else {
            cost = 4;           /* '"', ':', '0', '}' */
        }
        break;
    case M_ESC:
        if (s->sub) {
            cost = 5;           /* the escaped byte, then '":0}' */
            break;
        }
        cost = 2 + after_cost(g, s, top);
        break;
    case M_COLON:
        cost = top == 'S' ? 1 + minval(g, g->schema.type[s->cur_key], d) +
            rest_schema(g, s->seen) : 3;
        break;
    case M_AFTER:
        cost = after_cost(g, s, top);
        break;
    case M_STR:
        cost = 1 + after_cost(g, s, top);
        break;
    case M_NUM_MINUS: case M_NUM_DOT: case M_NUM_E: case M_NUM_ESIGN:
        cost = 1 + after_cost(g, s, top);
        break;
    case M_NUM_ZERO: case M_NUM_INT: case M_NUM_FRAC: case M_NUM_EXP:
        cost = after_cost(g, s, top);
        break;
    case M_LIT:
        cost = (int)strlen(lit_word[s->sub]) - s->pos + after_cost(g, s, top);
        break;
    default:
        return 0;
    }
    for (int i = below - 1; i >= 0; i--)
        cost += after_cost(g, s, s->stack[i]);
    return cost;
}

/* ---- the grammar over a vocabulary ---- */

int llm_json_grammar_init(llm_json_grammar *g, int V, const char *const *bytes,
                          const int *lens, int eos, const llm_json_schema *schema, char *err,
                          size_t errlen)
{
    memset(g, 0, sizeof *g);
    if (V < 1) {
        snprintf(err, errlen, "json mask: empty vocabulary");
        return -1;
    }
    g->V = V;
    g->eos = eos >= 0 && eos < V ? eos : -1;
    g->tok = mlsys_xmalloc((size_t)V * sizeof *g->tok);
    g->tok_len = mlsys_xmalloc((size_t)V * sizeof(int));
    g->tok_plain = mlsys_xmalloc((size_t)V);
    for (int t = 0; t < V; t++) {
        g->tok[t] = (const unsigned char *)bytes[t];
        g->tok_len[t] = t == g->eos ? 0 : lens[t];
        int plain = g->tok_len[t] > 0;
        for (int i = 0; i < g->tok_len[t] && plain; i++) {
            unsigned char c = g->tok[t][i];
            plain = c >= 0x20 && c < 0x7f && c != '"' && c != '\\';
        }
        g->tok_plain[t] = (unsigned char)plain;
    }
    if (schema) {
        g->has_schema = 1;
        g->schema = *schema;
        for (int i = 0; i < schema->n_keys; i++) {
            g->key_len[i] = (int)strlen(schema->key[i]);
            /* ',' '"' key '"' ':' value */
            g->key_cost[i] = g->key_len[i] + 4 + minval(g, schema->type[i], 1);
        }
    }
    g->cache_dist = mlsys_xmalloc((size_t)LLM_JSON_CACHE * V * sizeof(uint16_t));
    return 0;
}

int llm_json_grammar_init_tok(llm_json_grammar *g, const llm_tokenizer *t,
                              const llm_json_schema *schema, char *err, size_t errlen)
{
    int V = t->vocab_size;
    const char **b = mlsys_xmalloc((size_t)V * sizeof *b);
    int *len = mlsys_xmalloc((size_t)V * sizeof(int));
    for (int i = 0; i < V; i++) {
        b[i] = t->bytes[i];
        len[i] = i == LLM_TOK_BOS || i == LLM_TOK_EOS || i == LLM_TOK_UNK ? 0 : t->bytes_len[i];
    }
    int rc = llm_json_grammar_init(g, V, b, len, LLM_TOK_EOS, schema, err, errlen);
    free(b);
    free(len);
    return rc;
}

void llm_json_grammar_fini(llm_json_grammar *g)
{
    free(g->tok);
    free(g->tok_len);
    free(g->tok_plain);
    free(g->cache_dist);
    memset(g, 0, sizeof *g);
}

/* The distance to a complete text after token t, or LLM_JSON_NEVER. */
static uint16_t dist_after(const llm_json_grammar *g, const llm_json_state *s, int t)
{
    if (g->tok_len[t] == 0)
        return LLM_JSON_NEVER;
    llm_json_state n = *s;
    for (int i = 0; i < g->tok_len[t]; i++)
        if (step(g, &n, g->tok[t][i]))
            return LLM_JSON_NEVER;
    int d = llm_json_min_close(g, &n);
    return (uint16_t)(d < LLM_JSON_NEVER ? d : LLM_JSON_NEVER - 1);
}

/* allowed[] from per-token distances and the budget; EOS only once the value is done. */
static int finish_mask(const llm_json_grammar *g, const llm_json_state *s, const uint16_t *dist,
                       int budget, unsigned char *allowed)
{
    int n = 0;
    for (int t = 0; t < g->V; t++) {
        int ok = dist[t] != LLM_JSON_NEVER && (budget <= 0 || dist[t] <= budget - 1);
        allowed[t] = (unsigned char)ok;
        n += ok;
    }
    if (g->eos >= 0 && llm_json_done(s)) {
        allowed[g->eos] = 1;
        n++;
    }
    return n;
}

int llm_json_mask_plain(llm_json_grammar *g, const llm_json_state *s, int budget,
                        unsigned char *allowed)
{
    uint16_t *dist = mlsys_xmalloc((size_t)g->V * sizeof(uint16_t));
    for (int t = 0; t < g->V; t++)
        dist[t] = dist_after(g, s, t);
    int n = finish_mask(g, s, dist, budget, allowed);
    free(dist);
    return n;
}

static unsigned state_hash(const llm_json_state *s)
{
    const unsigned char *b = (const unsigned char *)s;
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < sizeof *s; i++)
        h = (h ^ b[i]) * 16777619u;
    return h % LLM_JSON_CACHE;
}

int llm_json_mask(llm_json_grammar *g, const llm_json_state *s, int budget,
                  unsigned char *allowed)
{
    unsigned h = state_hash(s);
    uint16_t *dist = g->cache_dist + (size_t)h * g->V;
    if (g->cache_used[h] && !memcmp(&g->cache_key[h], s, sizeof *s)) {
        g->hits++;
        return finish_mask(g, s, dist, budget, allowed);
    }
    g->misses++;
    /* inside a value string (or a free object's key) plain text changes nothing: those
     * tokens keep the state, and the distance with it, without being simulated */
    int plain_same = s->mode == M_STR || (s->mode == M_KEY && top_of(s) != 'S');
    uint16_t here = 0;
    if (plain_same) {
        int d = llm_json_min_close(g, s);
        here = (uint16_t)(d < LLM_JSON_NEVER ? d : LLM_JSON_NEVER - 1);
    }
    for (int t = 0; t < g->V; t++)
        dist[t] = plain_same && g->tok_plain[t] ? here : dist_after(g, s, t);
    g->cache_key[h] = *s;
    g->cache_used[h] = 1;
    return finish_mask(g, s, dist, budget, allowed);
}

/* ---- constrained generation ---- */
