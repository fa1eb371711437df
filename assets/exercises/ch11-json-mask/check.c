/* check.c - ch11-json-mask, rank side (see ../harness.h). Seeded token streams over a
 * vocabulary of JSON pieces: at every step the learner's mask must equal, token by token,
 * the library's llm_json_mask_plain (every token simulated, no cache); then a token the
 * reference allows is fed to the automaton. Half the streams run under a schema. */
#include "harness.h"
#include "api.h"

#define STREAMS 24
#define MAX_STEPS 80

static const char *const pieces[] = {
    "{", "}", "[", "]", ":", ",", "\"", " ", "  ", "\n", "{\"", "\"}", "\",", "\":", "\": ",
    "},", "],", ", ", ",\"", "[]", "{}", "[[", "[{", "\"name\"", "\"age\":", "\"active\"",
    "name", "age", "act", "ive", "true", "false", "null", "tr", "ue", "fal", "se", "nu", "ll",
    "0", "1", "7", "12", "345", "-", "1.", ".5", "e", "E+", "e-", "0.0", "-3", "\\", "\\n",
    "\\\"", "\\u", "hello", " world", "x", "a\"", "\"a", "\xc3\xa9", "\t", "}}", "]]", "]}",
    NULL
};

static int g_V, g_eos;
static const char *g_bytes[128];
static int g_lens[128];

static void build_vocab(void)
{
    int n = 0;
    for (int i = 0; pieces[i]; i++, n++) {
        g_bytes[n] = pieces[i];
        g_lens[n] = (int)strlen(pieces[i]);
    }
    static char letters[26][2];
    for (int c = 0; c < 26; c++, n++) {
        letters[c][0] = (char)('a' + c);
        g_bytes[n] = letters[c];
        g_lens[n] = 1;
    }
    g_bytes[n] = "<special>";       /* a special token: never allowed */
    g_lens[n++] = 0;
    g_eos = n;
    g_bytes[n] = "<eos>";
    g_lens[n++] = 0;
    g_V = n;
}

/* The token's text, escaped for one line. */
static const char *shown(int t, char *buf, size_t n)
{
    size_t k = 0;
    if (g_lens[t] == 0) {
        snprintf(buf, n, "%s", g_bytes[t]);
        return buf;
    }
    buf[k++] = '`';
    for (int i = 0; i < g_lens[t] && k + 6 < n; i++) {
        unsigned char b = (unsigned char)g_bytes[t][i];
        if (b == '\n')
            k += (size_t)snprintf(buf + k, n - k, "\\n");
        else if (b == '\t')
            k += (size_t)snprintf(buf + k, n - k, "\\t");
        else if (b < 32 || b > 126)
            k += (size_t)snprintf(buf + k, n - k, "\\x%02x", b);
        else
            buf[k++] = (char)b;
    }
    buf[k++] = '`';
    buf[k] = 0;
    return buf;
}

static void one_stream(harness *h, int sidx, llm_json_grammar *g, const char *schema,
                       mlsys_rng *r)
{
    llm_json_state s;
    llm_json_start(g, &s);
    int start_close = llm_json_min_close(g, &s);
    int budget = (sidx % 3 == 0) ? 0 : start_close + 8 + (int)(mlsys_rng_u64(r) % 25);
    h_case(h, "stream %d (%s, budget %d)", sidx, schema ? schema : "any JSON", budget);
    unsigned char ref[128], got[128];
    char text[512] = "";
    size_t tl = 0;
    for (int step = 0; step < MAX_STEPS && !h->failed; step++) {
        int nref = llm_json_mask_plain(g, &s, budget, ref);
        llm_json_state before = s;
        memset(got, 7, sizeof got);
        int ngot = json_mask(g, &s, budget, got);
        if (memcmp(&before, &s, sizeof s)) {
            h_fail(h, "step %d: your mask changed the state it was given", step);
            break;
        }
        for (int t = 0; t < g_V; t++)
            if ((got[t] != 0) != (ref[t] != 0) || got[t] > 1) {
                char tb[64], bb[32] = "no budget";
                if (budget > 0)
                    snprintf(bb, sizeof bb, "%d tokens left", budget);
                h_fail(h, "step %d (%s), after `%s`: token %d %s: the reference %s it, your "
                       "mask %s", step, bb, text, t,
                       shown(t, tb, sizeof tb),
                       ref[t] ? "allows" : "refuses",
                       got[t] > 1 ? "left allowed[t] unwritten" : got[t] ? "allows it" :
                       "refuses it");
                break;
            }
        if (h->failed)
            break;
        if (ngot != nref) {
            h_fail(h, "step %d, after `%s`: %d tokens allowed, but your mask returned %d", step,
                   text, nref, ngot);
            break;
        }
        if (nref == 0)
            break;
        int pick;
        if (ref[g_eos] && mlsys_rng_uniform(r) < 0.4) {
            pick = g_eos;
        } else {
            int k = (int)(mlsys_rng_u64(r) % (uint64_t)nref);
            for (pick = 0; pick < g_V; pick++)
                if (ref[pick] && k-- == 0)
                    break;
        }
        if (pick == g_eos)
            break;
        if (llm_json_feed_token(g, &s, pick) != 0)
            break;                      /* cannot happen: the reference allowed it */
        for (int i = 0; i < g_lens[pick] && tl + 5 < sizeof text; i++) {
            unsigned char b = (unsigned char)g_bytes[pick][i];
            if (b >= 32 && b <= 126) {
                text[tl++] = (char)b;
            } else {
                tl += (size_t)snprintf(text + tl, sizeof text - tl, "\\x%02x", b);
            }
        }
        text[tl] = 0;
        if (budget > 0 && --budget == 0)
            break;
    }
    h_returned(h, 0, "json_mask");
    if (!h->failed && sidx < 3)
        h_info(h, "stream %d: %s", sidx, text);
}

static void ex_check_main(harness *h)
{
    build_vocab();
    static const char *const spec = "name:string,age:integer,active:boolean";
    llm_json_schema sc;
    char err[256];
    llm_json_grammar free_g, schema_g;
    if (llm_json_schema_parse(&sc, spec, err, sizeof err) ||
        llm_json_grammar_init(&free_g, g_V, g_bytes, g_lens, g_eos, NULL, err, sizeof err) ||
        llm_json_grammar_init(&schema_g, g_V, g_bytes, g_lens, g_eos, &sc, err, sizeof err)) {
        h_rec(h, "error 0 runtime rank 0: the check's grammar: %s", err);
        h_exit(h, H_EXIT_REPORTED);
    }
    mlsys_rng r;
    mlsys_rng_seed(&r, h->seed);
    for (int i = 0; i < STREAMS; i++) {
        int use_schema = i % 2 == 1;
        one_stream(h, i, use_schema ? &schema_g : &free_g, use_schema ? spec : NULL, &r);
        if (!h_case_end(h))
            break;
    }
    llm_json_grammar_fini(&free_g);
    llm_json_grammar_fini(&schema_g);
}
