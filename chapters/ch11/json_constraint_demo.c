/* json_constraint_demo.c - ch11/json-constraint-demo: the lab's model writing JSON under a
 * grammar mask (core/llm/json_mask.c). The original's walkthrough step by step with the real
 * mask over the real 512-token vocabulary (state, stack, allowed count, the likeliest allowed
 * tokens, the choice), the same prompt and seed without the mask, then many seeds and
 * prompts: the share of outputs cJSON parses with and without the constraint, and the mask's
 * cost per token beside the forward's. --schema constrains to an object with given keys and
 * types. --simulate keeps the original script's 17-token automaton, labelled. */
#include "../common/common.h"
#include "models.h"
#ifdef HAVE_CJSON
#include <cjson/cJSON.h>
#endif
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LAB_ID "ch11/json-constraint-demo"

static const lab_flag json_flags[] = {
    {"seed", 0, FLAG_INT, "42", NULL, 0, 1L << 40, "random seed"},
    {"simulate", 0, FLAG_BOOL, NULL, NULL, 0, 0, "the original's simulation: a 17-token "
     "vocabulary and uniform choices, no model"},
    {"prompt", 0, FLAG_STR, NULL, NULL, 0, 0, "text before the JSON (unset: the start of a "
     "document; text that opens JSON itself, like {\"name\": \", is continued)"},
    {"schema", 0, FLAG_STR, NULL, NULL, 0, 0, "an object with these keys and types, e.g. "
     "name:string,age:integer,active:boolean (unset: any JSON object or array)"},
    {"max-tokens", 0, FLAG_INT, "48", NULL, 4, 120, "token budget of one output"},
    {"temperature", 0, FLAG_DOUBLE, "0.8", NULL, 0, 0, "sampling temperature (0: greedy)"},
    {"runs", 0, FLAG_INT, "200", NULL, 0, 100000, "seeds x prompts measured, with and without "
     "the mask"},
    {"model", 0, FLAG_STR, CH11_MODEL, NULL, 0, 0, "model"},
    {"tokenizer", 0, FLAG_STR, CH11_TOKENIZER, NULL, 0, 0, "its tokenizer"},
    {NULL, 0, 0, NULL, NULL, 0, 0, NULL}
};

/* ==== the original's simulation: 17 tokens, a table automaton, uniform choices ==== */

enum { S_START, S_OBJ_START, S_OBJ_KEY, S_OBJ_COLON, S_OBJ_VALUE, S_OBJ_COMMA, S_ARR_START,
       S_ARR_VALUE, S_ARR_COMMA, S_DONE, S_COUNT };
static const char *const sim_state[S_COUNT] = {
    "START", "OBJECT_START", "OBJECT_KEY", "OBJECT_COLON", "OBJECT_VALUE", "OBJECT_COMMA",
    "ARRAY_START", "ARRAY_VALUE", "ARRAY_COMMA", "DONE",
};
static const char *const sim_vocab[17] = {
    "{", "}", "[", "]", ":", ",", "\"name\"", "\"value\"", "\"id\"", "\"type\"", "\"hello\"",
    "\"world\"", "123", "456", "true", "false", "null",
};

typedef struct sim_json {
    int state;
    char stack[64];
    int depth;
} sim_json;

/* The original's allowed sets, ascending ids (the original's table; its values never include
 * "id" or "type", which it keeps for keys). */
static int sim_allowed(const sim_json *s, int *ids)
{
    static const int value_ids[] = {0, 2, 6, 7, 10, 11, 12, 13, 14, 15, 16};
    int n = 0;
    switch (s->state) {
    case S_START: ids[n++] = 0; ids[n++] = 2; break;
    case S_OBJ_START: ids[n++] = 1; /* fall through */
    case S_OBJ_KEY: for (int i = 6; i <= 9; i++) ids[n++] = i; break;
    case S_OBJ_COLON: ids[n++] = 4; break;
    case S_OBJ_VALUE: case S_ARR_VALUE:
        for (size_t i = 0; i < sizeof value_ids / sizeof value_ids[0]; i++)
            ids[n++] = value_ids[i];
        break;
    case S_OBJ_COMMA:
        ids[n++] = 1;
        if (s->depth && s->stack[s->depth - 1] == 'o')
            ids[n++] = 5;
        break;
    case S_ARR_START:
        for (size_t i = 0; i < sizeof value_ids / sizeof value_ids[0]; i++) {
            ids[n++] = value_ids[i];
            if (value_ids[i] == 2)
                ids[n++] = 3;              /* ']' in id order */
        }
        break;
    case S_ARR_COMMA: ids[n++] = 3; ids[n++] = 5; break;
    default: break;
    }
    return n;
}

static void sim_advance(sim_json *s, int id)
{
    const char *t = sim_vocab[id];
    if (id == 0 || id == 2) {
        if (s->depth < (int)sizeof s->stack)
            s->stack[s->depth++] = id == 0 ? 'o' : 'a';
        s->state = id == 0 ? S_OBJ_START : S_ARR_START;
    } else if (id == 1 || id == 3) {
        if (s->depth && s->stack[s->depth - 1] == (id == 1 ? 'o' : 'a'))
            s->depth--;
        s->state = s->depth == 0 ? S_DONE : s->stack[s->depth - 1] == 'o' ? S_OBJ_COMMA
                                                                         : S_ARR_COMMA;
    } else if (id == 4) {
        s->state = S_OBJ_VALUE;
    } else if (id == 5) {
        s->state = s->depth && s->stack[s->depth - 1] == 'o' ? S_OBJ_KEY : S_ARR_VALUE;
    } else if (t[0] == '"' && (s->state == S_OBJ_START || s->state == S_OBJ_KEY)) {
        s->state = S_OBJ_COLON;
    } else if (s->state == S_OBJ_VALUE) {
        s->state = S_OBJ_COMMA;
    } else {
        s->state = S_ARR_COMMA;
    }
}

/* cJSON parses the whole text: one value, nothing but whitespace after it. Built without
 * cJSON, the lab's own automaton decides (an object or array, complete, then nothing). */
static int parses(const char *text, size_t n)
{
#ifdef HAVE_CJSON
    char *z = malloc(n + 1);
    memcpy(z, text, n);
    z[n] = 0;
    cJSON *j = cJSON_ParseWithOpts(z, NULL, 1);
    int ok = j != NULL;
    cJSON_Delete(j);
    free(z);
    return ok;
#else
    static const char *none[1] = {""};
    static const int zero[1] = {0};
    llm_json_grammar g;
    char err[64];
    if (llm_json_grammar_init(&g, 1, none, zero, -1, NULL, err, sizeof err))
        return 0;
    llm_json_state s;
    llm_json_start(&g, &s);
    size_t end = n;
    while (end > 0 && (text[end - 1] == ' ' || text[end - 1] == '\n'))
        end--;
    int ok = llm_json_feed(&g, &s, text, (int)end) == 0 && llm_json_done(&s);
    llm_json_grammar_fini(&g);
    return ok;
#endif
}

/* Up to max_tokens uniform choices from the allowed set; text gets the concatenation. When
 * show, a line per step (the original's demonstration), with the real automaton's count of
 * allowed tokens over the same 17 texts beside it. */
static int sim_generate(mlsys_rng *r, int max_tokens, int show, llm_json_grammar *real,
                        char *text, size_t cap)
{
    sim_json s = {S_START, {0}, 0};
    llm_json_state rs;
    llm_json_start(real, &rs);
    size_t used = 0;
    text[0] = 0;
    int steps = 0;
    for (; steps < max_tokens && s.state != S_DONE; steps++) {
        int ids[17];
        unsigned char ok[17];
        int n = sim_allowed(&s, ids);
        int pick = ids[mlsys_rng_u64(r) % (uint64_t)n];
        if (show) {
            int rn = llm_json_mask(real, &rs, 0, ok);
            printf("step %2d  %-13s allowed %2d, masked %2d:\n        ", steps + 1,
                   sim_state[s.state], n, 17 - n);
            for (int i = 0; i < n; i++)
                printf(" %s", sim_vocab[ids[i]]);
            printf("\n         chosen %-8s (the real automaton allows %d of these 17)\n",
                   sim_vocab[pick], rn);
        }
        used += (size_t)snprintf(text + used, cap - used, "%s", sim_vocab[pick]);
        sim_advance(&s, pick);
        llm_json_feed_token(real, &rs, pick);
        if (used + 16 >= cap)
            break;
    }
    return s.state == S_DONE;
}

static int run_simulation(const lab_args *a)
{
    uint64_t seed = (uint64_t)lab_arg_int(a, "seed");
    int lens[17];
    for (int i = 0; i < 17; i++)
        lens[i] = (int)strlen(sim_vocab[i]);
    llm_json_grammar real;
    char err[256], text[1024];
    if (llm_json_grammar_init(&real, 17, sim_vocab, lens, -1, NULL, err, sizeof err)) {
        fprintf(stderr, "mlsys-lab: %s: %s\n", LAB_ID, err);
        return 1;
    }
    common_box(stdout, 68, "JSON constraint decoding (simulation)");
    printf("\nSIMULATION: the original script's 17-token vocabulary and uniform random\n"
           "choices, no model (run without --simulate for the lab's model under the real\n"
           "mask)\n\n");
    common_banner(stdout, 70, "Token masking, step by step");
    mlsys_rng r;
    mlsys_rng_seed(&r, seed);
    int done = sim_generate(&r, 10, 1, &real, text, sizeof text);
    printf("\nJSON: %s  (%s)\n\n", text, done ? (parses(text, strlen(text)) ?
           "complete, cJSON parses it" : "complete, but cJSON refuses it") :
           "not complete after 10 steps");
    common_banner(stdout, 70, "Constrained against unconstrained");
    char free_text[256];
    size_t used = 0;
    for (int i = 0; i < 10; i++)
        used += (size_t)snprintf(free_text + used, sizeof free_text - used, "%s",
                                 sim_vocab[mlsys_rng_u64(&r) % 17]);
    printf("unconstrained (10 tokens drawn from all 17):\n  %s\n  -> %s\n", free_text,
           parses(free_text, used) ? "valid JSON" : "not JSON");
    mlsys_rng_seed(&r, 42);                 /* the original re-seeds with 42 here */
    done = sim_generate(&r, 15, 0, &real, text, sizeof text);
    printf("constrained (at most 15 tokens):\n  %s\n  -> %s\n\n", text,
           done ? (parses(text, strlen(text)) ? "valid JSON" : "complete but not JSON")
                : "valid so far, cut off by the 15-token limit");
    printf("Where constraints are used: a JSON schema (name: string, age: number,\n"
           "active: boolean), SQL (only column names after SELECT, table names after\n"
           "FROM), function calls matching a signature, regular expressions (an e-mail\n"
           "address), programming languages. Libraries: outlines, guidance, lmql.\n\n"
           "Why it works: a masked token can never be drawn, so every output stays\n"
           "valid; the model still chooses among the valid tokens, so quality barely\n"
           "changes; the cost is one mask per token; it composes with speculative\n"
           "decoding, beam search and any sampler. Real systems precompile the grammar\n"
           "into automata, as the lab's real mode does per state.\n");
    llm_json_grammar_fini(&real);
    return 0;
}

/* ==== the real model ==== */

typedef struct json_ctx {
    ch11_models m;
    llm_json_grammar g;
    int max_new;
    float temperature;
    uint64_t seed;
} json_ctx;

/* Bytes of tokens as the automaton read them. */
static size_t tok_bytes(const ch11_models *m, const int *ids, int n, char *out, size_t cap)
{
    size_t used = 0;
    for (int i = 0; i < n; i++) {
        int l = m->tok.bytes_len[ids[i]];
        if (used + (size_t)l + 1 > cap)
            break;
        memcpy(out + used, m->tok.bytes[ids[i]], (size_t)l);
        used += (size_t)l;
    }
    out[used] = 0;
    return used;
}

/* The prompt's own text, when it opens the JSON ("{\"name\": \""): the automaton's state
 * after it (the constraint continues it). 1 when it does, 0 otherwise. */
static int prompt_state(json_ctx *x, const char *text, llm_json_state *s)
{
    llm_json_start(&x->g, s);
    if (!*text)
        return 0;
    char buf[600];
    snprintf(buf, sizeof buf, " %s", text);            /* the dummy-prefix space */
    llm_json_state t = *s;
    if (llm_json_feed(&x->g, &t, buf, (int)strlen(buf)) || t.depth == 0) {
        return 0;
    }
    *s = t;
    return 1;
}

/* The walkthrough: a line per step with the automaton's state, how many tokens the mask
 * left, the share of the model's probability it removed, the likeliest allowed tokens. */
typedef struct walk {
    json_ctx *x;
    int step;
} walk;

static void walk_step(void *u, const llm_json_state *s, int budget, const unsigned char *allowed,
                      int n_allowed, const float *logits)
{
    walk *w = u;
    int V = w->x->g.V;
    if (w->step++ >= 12)
        return;
    char stack[LLM_JSON_MAX_DEPTH + 3], b[48];
    int k = 0;
    stack[k++] = '[';
    for (int i = 0; i < s->depth; i++)
        stack[k++] = (char)(s->stack[i] == 'S' ? 'S' : s->stack[i]);
    stack[k++] = ']';
    stack[k] = 0;
    /* the model's own distribution (at the sampling temperature) and what the mask keeps */
    double mx = -INFINITY, z = 0, kept = 0;
    float tp = w->x->temperature > 0 ? w->x->temperature : 1.0f;
    for (int t = 0; t < V; t++)
        if (logits[t] > mx)
            mx = logits[t];
    for (int t = 0; t < V; t++) {
        double e = exp((logits[t] - mx) / tp);
        z += e;
        kept += allowed[t] ? e : 0;
    }
    printf("step %2d  %-12s %-6s allowed %3d/%d, masked %4.1f%% of p, budget %d\n",
           w->step, llm_json_mode_name(s), stack, n_allowed, V, 100.0 * (1.0 - kept / z),
           budget);
    printf("         likeliest allowed:");
    int best[3] = {-1, -1, -1};
    for (int t = 0; t < V; t++) {
        if (!allowed[t])
            continue;
        for (int j = 0; j < 3; j++)
            if (best[j] < 0 || logits[t] > logits[best[j]]) {
                for (int m = 2; m > j; m--)
                    best[m] = best[m - 1];
                best[j] = t;
                break;
            }
    }
    for (int j = 0; j < 3 && best[j] >= 0; j++)
        printf(" '%s' %.2f", ch11_tok_text(&w->x->m, best[j], b, sizeof b),
               exp((logits[best[j]] - mx) / tp) / kept);
    printf("\n");
}

static void walk_token(void *u, int seq, int prev, int tok)
{
    (void)seq, (void)prev;
    walk *w = u;
    char b[48];
    if (w->step <= 12)
        printf("         chosen '%s'\n", ch11_tok_text(&w->x->m, tok, b, sizeof b));
}

/* One constrained output from prompt text; out/bytes get the tokens and the JSON text
 * (prompt's own JSON part included when it opens the JSON). */
static int constrained(json_ctx *x, const char *ptext, uint64_t seed, llm_json_mask_fn mask,
                       walk *w, char *json, size_t cap, llm_json_gen_stats *st, char *err,
                       size_t n)
{
    int ids[600], out[128], no;
    int np = (int)llm_bpe_encode_prompt(&x->m.tok, ptext, strlen(ptext), 1, ids);
    llm_json_state start;
    int cont = prompt_state(x, ptext, &start);
    llm_json_gen_opts o = {.max_new = x->max_new, .temperature = x->temperature,
                           .top_p = 0.95f, .seed = seed, .mask = mask,
                           .start = cont ? &start : NULL, .on_token = w ? walk_token : NULL,
                           .u = w, .on_step = w ? walk_step : NULL};
    int rc = llm_json_generate(x->m.eng, &x->g, ids, np, &o, out, &no, st, err, n);
    if (rc)
        return -1;
    size_t used = 0;
    if (cont)
        used = (size_t)snprintf(json, cap, "%s", ptext);
    tok_bytes(&x->m, out, no, json + used, cap - used);
    return 0;
}

/* The model alone, same prompt and seed, until EOS or the same budget. */
static int unconstrained(json_ctx *x, const char *ptext, uint64_t seed, char *text, size_t cap,
                         char *err, size_t n)
{
    int ids[600], out[128], no;
    int np = (int)llm_bpe_encode_prompt(&x->m.tok, ptext, strlen(ptext), 1, ids);
    llm_json_state start;
    int cont = prompt_state(x, ptext, &start);
    llm_gen_opts o = {.max_new = x->max_new, .stop_at_eos = 1, .temperature = x->temperature,
                      .top_p = 0.95f, .seed = seed};
    llm_gen_stats st;
    int *po = out;
    const int *pp = ids;
    int rc = llm_generate(x->m.eng, 1, &pp, &np, &po, &no, &o, &st, err, n);
    if (rc)
        return -1;
    size_t used = cont ? (size_t)snprintf(text, cap, "%s", ptext) : 0;
    tok_bytes(&x->m, out, no, text + used, cap - used);
    return 0;
}

static void printable(const char *s, char *out, size_t cap)
{
    size_t o = 0;
    for (; *s && o + 3 < cap; s++) {
        if (*s == '\n') {
            out[o++] = '\\';
            out[o++] = 'n';
        } else {
            out[o++] = *s;
        }
    }
    out[o] = 0;
}

static int run_real(const lab_args *a)
{
    json_ctx x;
    memset(&x, 0, sizeof x);
    char err[512];
    const char *schema_spec = lab_arg_str(a, "schema"), *prompt = lab_arg_str(a, "prompt");
    if (!prompt)
        prompt = "";                   /* unset: the start of a document */
    llm_json_schema sc;
    if (schema_spec && *schema_spec && llm_json_schema_parse(&sc, schema_spec, err, sizeof err)) {
        fprintf(stderr, "mlsys-lab: %s: --schema %s\n", LAB_ID, err);
        return 2;
    }
    if (ch11_models_load(&x.m, lab_arg_str(a, "model"), NULL, lab_arg_str(a, "tokenizer"), 1,
                         16, err, sizeof err)) {
        fprintf(stderr, "mlsys-lab: %s: %s\n", LAB_ID, err);
        return 2;
    }
    int has_schema = schema_spec && *schema_spec;
    if (llm_json_grammar_init_tok(&x.g, &x.m.tok, has_schema ? &sc : NULL, err, sizeof err)) {
        fprintf(stderr, "mlsys-lab: %s: %s\n", LAB_ID, err);
        ch11_models_free(&x.m);
        return 2;
    }
    x.max_new = (int)lab_arg_int(a, "max-tokens");
    x.temperature = (float)lab_arg_double(a, "temperature");
    x.seed = (uint64_t)lab_arg_int(a, "seed");
    llm_json_state st0;
    llm_json_start(&x.g, &st0);
    int rc = 1;
    if (!(x.temperature >= 0.0f && x.temperature <= 100.0f)) {
        fprintf(stderr, "mlsys-lab: %s: --temperature must be at least 0\n", LAB_ID);
        rc = 2;
        goto out;
    }
    if (x.max_new < llm_json_min_close(&x.g, &st0)) {
        fprintf(stderr, "mlsys-lab: %s: --max-tokens %d cannot hold the shortest output of "
                "this schema (%d bytes)\n", LAB_ID, x.max_new, llm_json_min_close(&x.g, &st0));
        rc = 2;
        goto out;
    }
    common_box(stdout, 68, "JSON constraint decoding");
    printf("\nReal model (--simulate runs the original's 17-token simulation instead)\n");
    printf("model    %s (%d-token vocabulary)\n", lab_arg_str(a, "model"), x.m.tc.vocab_size);
    if (has_schema) {
        printf("grammar  one object with exactly these keys, in any order:\n        ");
        for (int i = 0; i < sc.n_keys; i++)
            printf(" %s (%s)", sc.key[i], llm_json_type_name(sc.type[i]));
        printf("\n");
    } else {
        printf("grammar  one JSON object or array (any JSON inside)\n");
    }
    printf("budget   %d tokens: a token after which the text could not be closed\n"
           "         in time is masked too\nsampling temperature %.2f, top-p 0.95, seed %llu\n"
           "\n", x.max_new, (double)x.temperature, (unsigned long long)x.seed);

    /* 1. the walkthrough */
    common_banner(stdout, 70, "Token masking, step by step (the real mask)");
    printf("prompt: \"%s\"%s\n", prompt, *prompt ? "" : " (the start of a document)");
    walk w = {&x, 0};
    char json[2048], shown[4200];
    llm_json_gen_stats gst;
    if (constrained(&x, prompt, x.seed, NULL, &w, json, sizeof json, &gst, err, sizeof err))
        goto fail;
    if (gst.tokens > 12)
        printf("... (%ld more steps)\n", gst.tokens - 12);
    printable(json, shown, sizeof shown);
    printf("\noutput: %s\n  -> %s\n\n", shown, parses(json, strlen(json)) ? "cJSON parses it" :
           "cJSON refuses it");

    /* 2. the same prompt and seed without the mask */
    common_banner(stdout, 70, "Constrained against unconstrained (same prompt, same seed)");
    char free_text[2048];
    if (unconstrained(&x, prompt, x.seed, free_text, sizeof free_text, err, sizeof err))
        goto fail;
    printable(free_text, shown, sizeof shown);
    printf("unconstrained: %s\n  -> %s\n", shown, parses(free_text, strlen(free_text)) ?
           "valid JSON" : "not JSON");
    printable(json, shown, sizeof shown);
    printf("constrained:   %s\n  -> %s\n\n", shown, parses(json, strlen(json)) ? "valid JSON"
           : "not JSON");

    /* 3. many seeds and prompts */
    int runs = (int)lab_arg_int(a, "runs");
    if (runs > 0) {
        static const char *const prompts[] = {"", "Once upon a time", "{\"name\": \"",
                                              "12 + 7 =", "The dog"};
        const int np = (int)(sizeof prompts / sizeof prompts[0]);
        char title[96];
        snprintf(title, sizeof title, "%d runs: %d prompts x %d seeds", runs, np,
                 (runs + np - 1) / np);
        common_banner(stdout, 70, title);
        int ok_c = 0, ok_u = 0, closed = 0;
        double mask_s = 0, fwd_s = 0, samp_s = 0, plain_s = 0;
        long toks = 0, plain_toks = 0, allowed = 0;
        long hits0 = x.g.hits, miss0 = x.g.misses;
        for (int i = 0; i < runs; i++) {
            const char *p = prompts[i % np];
            uint64_t seed = x.seed + (uint64_t)i;
            if (constrained(&x, p, seed, NULL, NULL, json, sizeof json, &gst, err, sizeof err))
                goto fail;
            ok_c += parses(json, strlen(json));
            closed += gst.tokens < x.max_new;
            mask_s += gst.mask_s, fwd_s += gst.forward_s, samp_s += gst.sample_s;
            toks += gst.tokens;
            allowed += gst.allowed_sum;
            if (unconstrained(&x, p, seed, free_text, sizeof free_text, err, sizeof err))
                goto fail;
            ok_u += parses(free_text, strlen(free_text));
        }
        long hits = x.g.hits - hits0, misses = x.g.misses - miss0;
        /* the same decode with the plain mask (every token simulated, no cache), on a share */
        int plain_runs = runs < 20 ? runs : 20;
        for (int i = 0; i < plain_runs; i++) {
            if (constrained(&x, prompts[i % np], x.seed + (uint64_t)i, llm_json_mask_plain,
                            NULL, json, sizeof json, &gst, err, sizeof err))
                goto fail;
            plain_s += gst.mask_s;
            plain_toks += gst.tokens;
        }
        printf("prompts:");
        for (int i = 0; i < np; i++)
            printf(" \"%s\"", prompts[i]);
#ifdef HAVE_CJSON
        printf("\nvalid JSON (cJSON parses the whole output):\n");
#else
        printf("\nvalid JSON (built without cJSON: the lab's own automaton decides):\n");
#endif
        printf("  constrained    %4d of %d (%.1f%%); %d closed before the budget forced it\n",
               ok_c, runs, 100.0 * ok_c / runs, closed);
        printf("  unconstrained  %4d of %d (%.1f%%)  (until EOS or %d tokens)\n", ok_u, runs,
               100.0 * ok_u / runs, x.max_new);
        double fwd_tok = toks ? fwd_s / toks : 0, mask_tok = toks ? mask_s / toks : 0;
        double plain_tok = plain_toks ? plain_s / plain_toks : 0;
        printf("cost per token (%ld tokens; %.0f tokens allowed on average):\n", toks,
               toks ? (double)allowed / toks : 0.0);
        printf("  forward        %7.1f us\n", 1e6 * fwd_tok);
        printf("  sampling       %7.1f us\n", toks ? 1e6 * samp_s / toks : 0.0);
        printf("  mask           %7.1f us = %.1f%% of the decode time per token\n"
               "                 (forward + sampling + mask); cache hits %.0f%%\n",
               1e6 * mask_tok,
               100.0 * mask_tok / (fwd_tok + mask_tok + (toks ? samp_s / toks : 0)),
               hits + misses ? 100.0 * hits / (hits + misses) : 0.0);
        printf("  plain mask     %7.1f us (every token simulated, no cache; %d runs)\n\n",
               1e6 * plain_tok, plain_runs);
    }
    rc = 0;
    goto out;
fail:
    fprintf(stderr, "mlsys-lab: %s: %s\n", LAB_ID, err);
out:
    llm_json_grammar_fini(&x.g);
    ch11_models_free(&x.m);
    fflush(stdout);
    return rc;
}

static int json_main(const lab_args *a)
{
    if (lab_arg_bool(a, "simulate"))
        return run_simulation(a);
    return run_real(a);
}

const lab ch11_json_constraint_demo_lab = {
    .id = LAB_ID,
    .title = "JSON constraint decoding",
    .summary = "the lab's model writes JSON under a grammar mask (a pushdown automaton over "
               "its vocabulary); valid share with and without, mask cost per token",
    .flags = json_flags,
    .main = json_main,
    .view = "log",
};
