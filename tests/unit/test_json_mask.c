/* test_json_mask.c - the JSON automaton and mask (core/llm/json_mask.c): byte by byte against
 * grammar.c's whole-prefix parser (llm_json_viable_prefix) on random walks; the closing
 * distance proved exact (zero only when done, one byte lowers it by at most one and some byte
 * by exactly one); the fast mask (cache, plain-text shortcut) equal to the plain one; random
 * token walks under a budget always finish in time and parse with cJSON, with and without a
 * schema; the corpus's own JSON records pass the mask; the model constrained on 200 seeds and
 * prompts always writes JSON that cJSON parses; the original's 17-token vocabulary. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#ifdef HAVE_CJSON
#include <cjson/cJSON.h>
#endif
#include "../../core/llm/engine.h"
#include "../../core/nn/nn.h"

#ifdef HAVE_CJSON                 /* every test checks outputs with cJSON */
/* Single-byte vocabulary: token t is byte t (t = 0..255), token 256 is EOS. */
static char g_bytes[256][1];
static const char *g_bp[257];
static int g_blen[257];

static void byte_grammar(llm_json_grammar *g, const llm_json_schema *sc)
{
    char err[256];
    for (int i = 0; i < 256; i++) {
        g_bytes[i][0] = (char)i;
        g_bp[i] = g_bytes[i];
        g_blen[i] = 1;
    }
    g_bp[256] = "";
    g_blen[256] = 0;
    ck_assert_msg(llm_json_grammar_init(g, 257, g_bp, g_blen, 256, sc, err, sizeof err) == 0,
                  "%s", err);
}

static int feed_str(const llm_json_grammar *g, llm_json_state *s, const char *text)
{
    return llm_json_feed(g, s, text, (int)strlen(text));
}

/* cJSON parses the whole text: one value, nothing but whitespace after it. */
static int parses(const char *text, size_t n)
{
    char *z = malloc(n + 1);
    memcpy(z, text, n);
    z[n] = 0;
    cJSON *j = cJSON_ParseWithOpts(z, NULL, 1);
    int ok = j != NULL;
    cJSON_Delete(j);
    free(z);
    return ok;
}

START_TEST(automaton_cases)
{
    llm_json_grammar g;
    byte_grammar(&g, NULL);
    static const char *const good[] = {
        "{}", "[]", " {}", "{\"a\": 1}", "[1, -2.5e+3, 0, 0.25, true, false, null, \"x\"]",
        "{\"a\": {\"b\": [[], {}]}, \"c\": \"q\\\"\\\\\\/\\b\\f\\n\\r\\t\"}", "[ 1 ]",
        "{\"name\": \"Tom\", \"age\": 5, \"friends\": [\"Ann\", \"Bob\"]}", "[1E5,2e-1]",
    };
    static const char *const bad[] = {
        "1", "\"x\"", "{,}", "[1,]", "{\"a\"}", "{\"a\":}", "[01]", "[1.]", "[.5]", "[-]",
        "[tru]x", "{a: 1}", "[1  ]", "[\"\\u0041\"]", "[\"\\x\"]", "{}}", "[]]", "{} ", "[+1]",
        "[1e]", "[\"a\tb\"]", "[\"\x80\"]",
    };
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        llm_json_state s;
        llm_json_start(&g, &s);
        ck_assert_msg(feed_str(&g, &s, good[i]) == 0, "refused %s", good[i]);
        ck_assert_msg(llm_json_done(&s), "%s: not done (%s)", good[i], llm_json_mode_name(&s));
        ck_assert_int_eq(llm_json_min_close(&g, &s), 0);
        ck_assert(parses(good[i], strlen(good[i])));
    }
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        llm_json_state s;
        llm_json_start(&g, &s);
        /* refused somewhere, or never complete ("[tru]x" fails at ']') */
        int r = feed_str(&g, &s, bad[i]);
        ck_assert_msg(r == -1 || !llm_json_done(&s), "accepted %s", bad[i]);
    }
    /* the cJSON check itself takes the whole text only */
    ck_assert(!parses("{}{}", 4) && !parses("true null", 9) && parses("[1] ", 4));
    /* a refused feed leaves the state as it was */
    llm_json_state s, t;
    llm_json_start(&g, &s);
    ck_assert(feed_str(&g, &s, "{\"a\": [1") == 0);
    t = s;
    ck_assert(feed_str(&g, &s, ", }") == -1);
    ck_assert(!memcmp(&s, &t, sizeof s));
    /* depth: 16 containers open, not 17 */
    llm_json_start(&g, &s);
    ck_assert(feed_str(&g, &s, "[[[[[[[[[[[[[[[[") == 0);
    ck_assert(feed_str(&g, &s, "[") == -1);
    ck_assert_int_eq(llm_json_min_close(&g, &s), 16);
    llm_json_grammar_fini(&g);
}
END_TEST

/* ---- against the whole-prefix parser, byte by byte ---- */

/* Bytes a random walk is drawn from: structure often, text sometimes. */
static const char walk_bytes[] = "{}[]:,\"\"\"\"  0123456789-.eE+tfnrulsa\\/bxyzAB";

START_TEST(bytes_match_whole_prefix_parser)
{
    llm_json_grammar g;
    byte_grammar(&g, NULL);
    mlsys_rng r;
    mlsys_rng_seed(&r, 5);
    char text[128];
    long compared = 0, allowed_n = 0;
    for (int walk = 0; walk < 400; walk++) {
        llm_json_state s;
        llm_json_start(&g, &s);
        int n = 0;
        while (n < 100 && !llm_json_done(&s)) {
            /* every printable byte at this point: the automaton against the parser */
            for (int c = 0x21; c < 0x7f; c++) {
                llm_json_state t = s;
                int mine = llm_json_feed(&g, &t, (char *)&c, 1) == 0;
                text[n] = (char)c;
                int ref = llm_json_viable_prefix(text, (size_t)n + 1);
                /* where the language is narrower on purpose: the top is an object or an
                 * array, no \u escapes (whitespace is left out of the loop: one in a row) */
                int top_start = s.depth == 0 && !strcmp(llm_json_mode_name(&s), "value");
                int narrower = (top_start && c != '{' && c != '[') ||
                               (!strcmp(llm_json_mode_name(&s), "escape") && c == 'u');
                /* (ck_abort_msg: a passing ck_assert costs a write to Check's pipe) */
                if (mine && !ref)
                    ck_abort_msg("allowed '%c' after \"%.*s\", the parser refuses", c, n, text);
                if (!mine && ref && !narrower)
                    ck_abort_msg("refused '%c' after \"%.*s\" (%s), the parser accepts", c, n,
                                 text, llm_json_mode_name(&s));
                compared++;
                allowed_n += mine;
            }
            /* step: a random byte the automaton takes */
            for (int tries = 0; tries < 200; tries++) {
                char c = walk_bytes[mlsys_rng_u64(&r) % (sizeof walk_bytes - 1)];
                if (llm_json_feed(&g, &s, &c, 1) == 0) {
                    text[n++] = c;
                    break;
                }
            }
            text[n] = 0;
        }
        if (llm_json_done(&s))
            ck_assert_msg(parses(text, (size_t)n), "done but cJSON refuses: %s", text);
    }
    printf("bytes: %ld comparisons with the whole-prefix parser, %ld allowed\n", compared,
           allowed_n);
    llm_json_grammar_fini(&g);
}
END_TEST

/* ---- the closing distance is the true shortest completion ---- */

static void check_distance(const llm_json_grammar *g, const llm_json_state *s, const char *ctx)
{
    int d = llm_json_min_close(g, s);
    if ((d == 0) != llm_json_done(s))
        ck_abort_msg("%s: distance %d, done %d", ctx, d, llm_json_done(s));
    if (d == 0)
        return;
    int best = 1 << 30;
    for (int c = 0; c < 256; c++) {
        llm_json_state t = *s;
        char b = (char)c;
        if (llm_json_feed(g, &t, &b, 1))
            continue;
        int dt = llm_json_min_close(g, &t);
        if (dt < d - 1)
            ck_abort_msg("%s: byte 0x%02x brings the distance from %d to %d", ctx, c, d, dt);
        if (dt < best)
            best = dt;
    }
    if (best != d - 1)
        ck_abort_msg("%s: distance %d but the best next byte leaves %d", ctx, d, best);
}

static void walk_distances(const llm_json_schema *sc, const char *alphabet, int walks,
                           uint64_t seed)
{
    llm_json_grammar g;
    byte_grammar(&g, sc);
    mlsys_rng r;
    mlsys_rng_seed(&r, seed);
    char text[200];
    int na = (int)strlen(alphabet), done = 0;
    for (int w = 0; w < walks; w++) {
        llm_json_state s;
        llm_json_start(&g, &s);
        int n = 0;
        text[0] = 0;
        check_distance(&g, &s, "start");
        while (n < 150 && !llm_json_done(&s)) {
            for (int tries = 0; tries < 300; tries++) {
                char c = alphabet[mlsys_rng_u64(&r) % (uint64_t)na];
                if (llm_json_feed(&g, &s, &c, 1) == 0) {
                    text[n++] = c;
                    text[n] = 0;
                    break;
                }
            }
            check_distance(&g, &s, text);
        }
        if (llm_json_done(&s)) {
            done++;
            ck_assert_msg(parses(text, (size_t)n), "cJSON refuses %s", text);
        }
    }
    ck_assert(done > 0);
    llm_json_grammar_fini(&g);
}

START_TEST(distance_is_exact)
{
    walk_distances(NULL, walk_bytes, 300, 11);
    llm_json_schema sc;
    char err[256];
    ck_assert(llm_json_schema_parse(&sc, "name:string,age:integer,active:boolean,"
                                    "tags:array,x:number,meta:any,nil:null,o:object,nm:string",
                                    err, sizeof err) == 0);
    walk_distances(&sc, "{}[]:,\"\"\"\"\"\"  0123456789-.eE+truefalsnmgcivtxo\\/", 300, 12);
}
END_TEST

/* ---- the shipped tokenizer's vocabulary ---- */

static int load_tok(llm_tokenizer *t)
{
    const char *root = getenv("MLSYS_LAB_ROOT");
    char tp[512], err[256];
    snprintf(tp, sizeof tp, "%s/assets/models/tokenizer.bin", root ? root : ".");
    if (access(tp, R_OK)) {
        printf("json mask: %s is not there, skipped\n", tp);
        return 0;
    }
    ck_assert_msg(llm_tokfile_read(tp, 512, t, err, sizeof err) == 0, "%s", err);
    return 1;
}

/* Random token walks under a budget: each allowed token taken at random. The fast mask
 * equals the plain one at every step; every walk ends complete within the budget. */
static void token_walks(const llm_tokenizer *tok, const llm_json_schema *sc, int walks,
                        uint64_t seed)
{
    llm_json_grammar g;
    char err[256];
    ck_assert(llm_json_grammar_init_tok(&g, tok, sc, err, sizeof err) == 0);
    int V = g.V;
    unsigned char *a = malloc((size_t)V), *b = malloc((size_t)V);
    mlsys_rng r;
    mlsys_rng_seed(&r, seed);
    char text[2048];
    for (int w = 0; w < walks; w++) {
        llm_json_state s;
        llm_json_start(&g, &s);
        int budget = llm_json_min_close(&g, &s) + (int)(mlsys_rng_u64(&r) % 40);
        int n = 0, steps = 0;
        while (!llm_json_done(&s)) {
            ck_assert_msg(steps < budget, "walk %d: budget %d spent, not done", w, budget);
            int na = llm_json_mask(&g, &s, budget - steps, a);
            int nb = llm_json_mask_plain(&g, &s, budget - steps, b);
            ck_assert_int_eq(na, nb);
            ck_assert_msg(!memcmp(a, b, (size_t)V), "walk %d step %d: fast and plain masks "
                          "differ (%s)", w, steps, llm_json_mode_name(&s));
            ck_assert_msg(na > 0, "walk %d: nothing allowed at step %d", w, steps);
            ck_assert(!a[LLM_TOK_EOS] && !a[LLM_TOK_BOS]);
            int pick = (int)(mlsys_rng_u64(&r) % (uint64_t)na), t = 0;
            for (; t < V; t++)
                if (a[t] && pick-- == 0)
                    break;
            ck_assert(llm_json_feed_token(&g, &s, t) == 0);
            memcpy(text + n, tok->bytes[t], (size_t)tok->bytes_len[t]);
            n += tok->bytes_len[t];
            steps++;
        }
        /* done: only EOS */
        ck_assert_int_eq(llm_json_mask(&g, &s, 5, a), 1);
        ck_assert(a[LLM_TOK_EOS]);
        text[n] = 0;
        cJSON *j = cJSON_ParseWithOpts(text, NULL, 1);
        ck_assert_msg(j, "walk %d: cJSON refuses %s", w, text);
        if (sc) {
            ck_assert(cJSON_IsObject(j));
            ck_assert_int_eq(cJSON_GetArraySize(j), sc->n_keys);
            for (int k = 0; k < sc->n_keys; k++) {
                cJSON *v = cJSON_GetObjectItemCaseSensitive(j, sc->key[k]);
                ck_assert_msg(v, "%s: no key %s", text, sc->key[k]);
                switch (sc->type[k]) {
                case LLM_JT_STRING: ck_assert(cJSON_IsString(v)); break;
                case LLM_JT_INTEGER:
                    ck_assert(cJSON_IsNumber(v) && v->valuedouble == floor(v->valuedouble));
                    break;
                case LLM_JT_NUMBER: ck_assert(cJSON_IsNumber(v)); break;
                case LLM_JT_BOOLEAN: ck_assert(cJSON_IsBool(v)); break;
                case LLM_JT_NULL: ck_assert(cJSON_IsNull(v)); break;
                case LLM_JT_ARRAY: ck_assert(cJSON_IsArray(v)); break;
                case LLM_JT_OBJECT: ck_assert(cJSON_IsObject(v)); break;
                default: break;
                }
            }
        } else {
            ck_assert(cJSON_IsObject(j) || cJSON_IsArray(j));
        }
        cJSON_Delete(j);
    }
    printf("token walks: %d, cache %ld hits / %ld misses\n", walks, g.hits, g.misses);
    free(a), free(b);
    llm_json_grammar_fini(&g);
}

START_TEST(token_walks_finish_and_parse)
{
    llm_tokenizer tok;
    if (!load_tok(&tok))
        return;
    token_walks(&tok, NULL, 150, 21);
    llm_json_schema sc;
    char err[256];
    ck_assert(llm_json_schema_parse(&sc, "name:string,age:integer,active:boolean,score:number,"
                                    "tags:array", err, sizeof err) == 0);
    token_walks(&tok, &sc, 100, 22);
    llm_tokenizer_free(&tok);
}
END_TEST

/* The corpus's JSON records, tokenized as the model saw them, pass the mask token by token. */
START_TEST(corpus_records_pass)
{
    llm_tokenizer tok;
    if (!load_tok(&tok))
        return;
    llm_json_grammar g;
    char err[256];
    ck_assert(llm_json_grammar_init_tok(&g, &tok, NULL, err, sizeof err) == 0);
    unsigned char *a = malloc((size_t)g.V);
    int records = 0;
    for (uint64_t d = 0; d < 3000 && records < 150; d++) {
        char doc[LLM_DOC_MAX];
        llm_doc_info info;
        size_t len = llm_corpus_doc(1, LLM_SPLIT_VAL, d, doc, sizeof doc, &info);
        if (info.kind != LLM_DOC_JSON)
            continue;
        /* the first record line: what a constrained decode after BOS would write */
        size_t line = strcspn(doc, "\n");
        (void)len;
        int ids[LLM_DOC_MAX + 2];
        size_t n = llm_bpe_encode_prompt(&tok, doc, line, 1, ids);
        llm_json_state s;
        llm_json_start(&g, &s);
        for (size_t i = 1; i < n; i++) {        /* after BOS */
            llm_json_mask(&g, &s, 0, a);
            ck_assert_msg(a[ids[i]], "record %.*s: token %zu ('%s') refused in state %s",
                          (int)line, doc, i, tok.bytes[ids[i]], llm_json_mode_name(&s));
            ck_assert(llm_json_feed_token(&g, &s, ids[i]) == 0);
        }
        ck_assert_msg(llm_json_done(&s), "record %.*s: not complete", (int)line, doc);
        records++;
    }
    ck_assert(records >= 100);
    free(a);
    llm_json_grammar_fini(&g);
    llm_tokenizer_free(&tok);
}
END_TEST

/* ---- the model, constrained: 200 seeds and prompts, every output parses ---- */

START_TEST(model_constrained_outputs_parse)
{
    llm_tokenizer tok;
    if (!load_tok(&tok))
        return;
    const char *root = getenv("MLSYS_LAB_ROOT");
    char mp[512], err[256];
    snprintf(mp, sizeof mp, "%s/assets/models/model.bin", root ? root : ".");
    llm_config c;
    llm_weights w;
    ck_assert_msg(llm_checkpoint_read(mp, &c, &w, err, sizeof err) == 0, "%s", err);
    llm_engine_opts eo = {.max_num_seqs = 1};
    llm_engine *eng = llm_engine_create(&c, &w, &eo, err, sizeof err);
    ck_assert_msg(eng != NULL, "%s", err);
    llm_json_grammar g, gs;
    llm_json_schema sc;
    ck_assert(llm_json_schema_parse(&sc, "name:string,age:integer,active:boolean", err,
                                    sizeof err) == 0);
    ck_assert(llm_json_grammar_init_tok(&g, &tok, NULL, err, sizeof err) == 0);
    ck_assert(llm_json_grammar_init_tok(&gs, &tok, &sc, err, sizeof err) == 0);
    static const char *const prompts[] = {"", "Once upon a time", "{\"name\"", "12 + 7 =",
                                          "The dog"};
    int valid = 0, runs = 0, done_naturally = 0;
    long tokens = 0;
    for (int i = 0; i < 220; i++) {
        const char *p = prompts[i % 5];
        int ids[64], out[64], no;
        int n = (int)llm_bpe_encode_prompt(&tok, p, strlen(p), 1, ids);
        llm_json_grammar *gg = i % 4 == 3 ? &gs : &g;
        /* budgets from tight to loose (the schema object needs 33 bytes at least) */
        llm_json_gen_opts o = {.max_new = (gg == &gs ? 33 : 4) + i % 24, .temperature = 1.0f,
                               .top_p = 0.95f, .seed = (uint64_t)i};
        llm_json_gen_stats st;
        ck_assert_msg(llm_json_generate(eng, gg, ids, n, &o, out, &no, &st, err,
                                        sizeof err) == 0, "%s", err);
        char text[1024];
        long len = llm_bpe_decode(&tok, out, (size_t)no, text, sizeof text - 1);
        ck_assert(len >= 0 && len < (long)sizeof text);
        /* the bytes the automaton read: each token's own bytes (decode drops a leading
         * space after BOS, which only whitespace can be) */
        char raw[1024];
        size_t rl = 0;
        for (int k = 0; k < no; k++) {
            memcpy(raw + rl, tok.bytes[out[k]], (size_t)tok.bytes_len[out[k]]);
            rl += (size_t)tok.bytes_len[out[k]];
        }
        raw[rl] = 0;
        ck_assert_msg(st.done && no <= o.max_new, "seed %d: not complete in %d tokens: %s", i,
                      o.max_new, raw);
        ck_assert_msg(parses(raw, rl), "seed %d (prompt \"%s\"): cJSON refuses %s", i, p, raw);
        if (gg == &gs) {
            cJSON *j = cJSON_ParseWithOpts(raw, NULL, 1);
            ck_assert(cJSON_IsString(cJSON_GetObjectItemCaseSensitive(j, "name")));
            ck_assert(cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(j, "age")));
            ck_assert(cJSON_IsBool(cJSON_GetObjectItemCaseSensitive(j, "active")));
            cJSON_Delete(j);
        }
        valid++;
        runs++;
        tokens += no;
        done_naturally += no < o.max_new;
    }
    printf("model: %d of %d constrained outputs parse (%ld tokens, %d closed before the "
           "budget forced it)\n", valid, runs, tokens, done_naturally);
    ck_assert_int_eq(valid, runs);
    llm_json_grammar_fini(&g);
    llm_json_grammar_fini(&gs);
    llm_engine_free(eng);
    llm_weights_free(&w);
    llm_tokenizer_free(&tok);
}
END_TEST

/* The original's 17-token vocabulary through the real automaton: at the start only '{' and
 * '[' (the original's START: 2 allowed, 15 masked). */
START_TEST(toy_vocabulary)
{
    static const char *const v[17] = {"{", "}", "[", "]", ":", ",", "\"name\"", "\"value\"",
                                      "\"id\"", "\"type\"", "\"hello\"", "\"world\"", "123",
                                      "456", "true", "false", "null"};
    int lens[17];
    for (int i = 0; i < 17; i++)
        lens[i] = (int)strlen(v[i]);
    llm_json_grammar g;
    char err[256];
    ck_assert(llm_json_grammar_init(&g, 17, v, lens, -1, NULL, err, sizeof err) == 0);
    unsigned char a[17];
    llm_json_state s;
    llm_json_start(&g, &s);
    ck_assert_int_eq(llm_json_mask(&g, &s, 0, a), 2);
    ck_assert(a[0] && a[2]);
    /* after '{': '}' or any of the six quoted tokens as a key */
    ck_assert(llm_json_feed_token(&g, &s, 0) == 0);
    ck_assert_int_eq(llm_json_mask(&g, &s, 0, a), 7);
    ck_assert(llm_json_feed_token(&g, &s, 6) == 0);
    ck_assert_int_eq(llm_json_mask(&g, &s, 0, a), 1);     /* only ':' */
    ck_assert(a[4]);
    ck_assert(llm_json_feed_token(&g, &s, 4) == 0);
    /* a value: '{', '[', six strings, two numbers, three literals */
    ck_assert_int_eq(llm_json_mask(&g, &s, 0, a), 13);
    /* "123" then "456" would read as one number 123456: allowed, as JSON allows it */
    ck_assert(llm_json_feed_token(&g, &s, 12) == 0);
    ck_assert_int_eq(llm_json_mask(&g, &s, 0, a), 4);     /* '}', ',', 123, 456 */
    llm_json_grammar_fini(&g);
}
END_TEST

START_TEST(schema_parse)
{
    llm_json_schema sc;
    char err[256];
    ck_assert(llm_json_schema_parse(&sc, "a:string,b:integer", err, sizeof err) == 0);
    ck_assert_int_eq(sc.n_keys, 2);
    ck_assert_str_eq(sc.key[1], "b");
    ck_assert_int_eq(sc.type[1], LLM_JT_INTEGER);
    ck_assert(llm_json_schema_parse(&sc, "a:str", err, sizeof err) == -1);
    ck_assert(strstr(err, "'str'"));
    ck_assert(llm_json_schema_parse(&sc, "a", err, sizeof err) == -1);
    ck_assert(llm_json_schema_parse(&sc, "", err, sizeof err) == -1);
    ck_assert(llm_json_schema_parse(&sc, "a:string,a:number", err, sizeof err) == -1);
    ck_assert(strstr(err, "twice"));
    ck_assert(llm_json_schema_parse(&sc, "a\"b:string", err, sizeof err) == -1);
    ck_assert(llm_json_schema_parse(&sc, "a:string,", err, sizeof err) == 0);
    /* the schema object: keys in any order, each once, all of them */
    llm_json_grammar g;
    ck_assert(llm_json_schema_parse(&sc, "ab:integer,a:boolean", err, sizeof err) == 0);
    byte_grammar(&g, &sc);
    static const char *const good[] = {"{\"a\": true, \"ab\": 3}", "{\"ab\":-0,\"a\":false}"};
    static const char *const bad[] = {"{\"a\": true}", "{\"a\": 1, \"ab\": 3}",
                                      "{\"ab\": 3.5, \"a\": true}", "{\"a\": true, \"a\": true}",
                                      "[]", "{\"abc\": 1}", "{}"};
    for (int i = 0; i < 2; i++) {
        llm_json_state s;
        llm_json_start(&g, &s);
        ck_assert_msg(feed_str(&g, &s, good[i]) == 0 && llm_json_done(&s), "%s", good[i]);
    }
    for (int i = 0; i < 7; i++) {
        llm_json_state s;
        llm_json_start(&g, &s);
        ck_assert_msg(feed_str(&g, &s, bad[i]) == -1 || !llm_json_done(&s), "%s", bad[i]);
    }
    llm_json_state s;
    llm_json_start(&g, &s);
    /* {"ab":0,"a":true} is the shortest: 17 bytes */
    ck_assert_int_eq(llm_json_min_close(&g, &s), 17);
    llm_json_grammar_fini(&g);
}
END_TEST

#endif

int main(void)
{
#ifndef HAVE_CJSON
    printf("skipped: built without cJSON (libcjson-dev), which checks the outputs\n");
    return 0;
#else
    Suite *s = suite_create("json_mask");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, automaton_cases);
    tcase_add_test(tc, bytes_match_whole_prefix_parser);
    tcase_add_test(tc, distance_is_exact);
    tcase_add_test(tc, token_walks_finish_and_parse);
    tcase_add_test(tc, corpus_records_pass);
    tcase_add_test(tc, model_constrained_outputs_parse);
    tcase_add_test(tc, toy_vocabulary);
    tcase_add_test(tc, schema_parse);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed != 0;
#endif
}
