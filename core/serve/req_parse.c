/* req_parse.c - an OpenAI request body (POST /v1/completions or /v1/chat/completions) into
 * a request, with cJSON: every field's type and range checked, the errors OpenAI gives (400
 * with the field's name, 404 for a model we do not serve). The fuzz target
 * tests/fuzz/fuzz_serve.c feeds it arbitrary bytes. */
#include "srv_internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef HAVE_CJSON
#include <cjson/cJSON.h>

typedef struct parse_ctx {
    char *err, *param;
    size_t errlen, paramlen;
} parse_ctx;

static int bad(parse_ctx *p, int status, const char *param, const char *msg)
{
    snprintf(p->err, p->errlen, "%s", msg);
    snprintf(p->param, p->paramlen, "%s", param);
    return status;
}

/* A number field in [lo, hi] (absent: keeps *v). 0 or 400. */
static int get_number(parse_ctx *p, const cJSON *o, const char *name, double lo, double hi,
                      double *v)
{
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, name);
    char msg[160];
    if (!x || cJSON_IsNull(x))
        return 0;
    if (!cJSON_IsNumber(x) || !isfinite(x->valuedouble)) {
        snprintf(msg, sizeof msg, "'%s' must be a number", name);
        return bad(p, 400, name, msg);
    }
    if (x->valuedouble < lo || x->valuedouble > hi) {
        snprintf(msg, sizeof msg, "'%s' is %g; it must lie in [%g, %g]", name, x->valuedouble,
                 lo, hi);
        return bad(p, 400, name, msg);
    }
    *v = x->valuedouble;
    return 0;
}

/* An integer field in [lo, hi] (absent: 0 and *given = 0). */
static int get_int(parse_ctx *p, const cJSON *o, const char *name, double lo, double hi,
                   double *v, int *given)
{
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, name);
    char msg[160];
    *given = 0;
    if (!x || cJSON_IsNull(x))
        return 0;
    if (!cJSON_IsNumber(x) || !isfinite(x->valuedouble) ||
        floor(x->valuedouble) != x->valuedouble) {
        snprintf(msg, sizeof msg, "'%s' must be an integer", name);
        return bad(p, 400, name, msg);
    }
    if (x->valuedouble < lo || x->valuedouble > hi) {
        snprintf(msg, sizeof msg, "'%s' is %.0f; it must lie in [%.0f, %.0f]", name,
                 x->valuedouble, lo, hi);
        return bad(p, 400, name, msg);
    }
    *v = x->valuedouble;
    *given = 1;
    return 0;
}

static int get_bool(parse_ctx *p, const cJSON *o, const char *name, int *v)
{
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, name);
    char msg[160];
    if (!x || cJSON_IsNull(x))
        return 0;
    if (!cJSON_IsBool(x)) {
        snprintf(msg, sizeof msg, "'%s' must be a boolean", name);
        return bad(p, 400, name, msg);
    }
    *v = cJSON_IsTrue(x);
    return 0;
}

static int add_stop(parse_ctx *p, srv_req *r, const cJSON *x)
{
    if (!cJSON_IsString(x) || !x->valuestring)
        return bad(p, 400, "stop", "'stop' must be a string or an array of strings");
    size_t n = strlen(x->valuestring);
    if (n == 0 || n > LLM_MAX_STOP_LEN) {
        char msg[128];
        snprintf(msg, sizeof msg, "a stop string must have 1 to %d bytes", LLM_MAX_STOP_LEN);
        return bad(p, 400, "stop", msg);
    }
    if (r->n_stop >= LLM_MAX_STOP) {
        char msg[128];
        snprintf(msg, sizeof msg, "at most %d stop strings", LLM_MAX_STOP);
        return bad(p, 400, "stop", msg);
    }
    memcpy(r->stop[r->n_stop++], x->valuestring, n + 1);
    return 0;
}

/* Text of a chat message's content: a string, or an array of {"type":"text","text":...}. */
static int content_text(parse_ctx *p, const cJSON *c, char **out, size_t *len, size_t *cap)
{
    const cJSON *parts[64];
    int np = 0;
    if (cJSON_IsString(c) && c->valuestring) {
        parts[np++] = c;
    } else if (cJSON_IsArray(c)) {
        const cJSON *it;
        cJSON_ArrayForEach(it, c) {
            const cJSON *ty = cJSON_GetObjectItemCaseSensitive(it, "type");
            const cJSON *tx = cJSON_GetObjectItemCaseSensitive(it, "text");
            if (!cJSON_IsObject(it) || !cJSON_IsString(ty) || strcmp(ty->valuestring, "text") ||
                !cJSON_IsString(tx) || np == 64)
                return bad(p, 400, "messages", "a content part must be {\"type\": \"text\", "
                           "\"text\": string} (at most 64 parts)");
            parts[np++] = tx;
        }
    } else {
        return bad(p, 400, "messages", "a message's 'content' must be a string or an array "
                   "of text parts");
    }
    for (int i = 0; i < np; i++) {
        size_t n = strlen(parts[i]->valuestring);
        if (*len + n + 2 > *cap) {
            size_t nc = (*len + n + 2) * 2;
            char *t = mlsys_xmalloc(nc);
            if (*len)
                memcpy(t, *out, *len);
            free(*out);
            *out = t;
            *cap = nc;
        }
        memcpy(*out + *len, parts[i]->valuestring, n);
        *len += n;
        (*out)[*len] = 0;
    }
    return 0;
}

/* The messages, one a line: a small model has no chat template, so the conversation is the
 * text it continues. */
static int chat_prompt(parse_ctx *p, const cJSON *root, srv_req *r)
{
    const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(root, "messages");
    if (!msgs)
        return bad(p, 400, "messages", "'messages' is required");
    if (!cJSON_IsArray(msgs) || cJSON_GetArraySize(msgs) < 1)
        return bad(p, 400, "messages", "'messages' must be a non-empty array");
    char *out = NULL;
    size_t len = 0, cap = 0;
    const cJSON *m;
    cJSON_ArrayForEach(m, msgs) {
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
        const cJSON *content = cJSON_GetObjectItemCaseSensitive(m, "content");
        if (!cJSON_IsObject(m) || !cJSON_IsString(role) || !content) {
            free(out);
            return bad(p, 400, "messages", "each message needs a string 'role' and a "
                       "'content'");
        }
        if (len > 0) {
            if (len + 2 > cap) {
                cap = (len + 2) * 2;
                char *t = mlsys_xmalloc(cap);
                memcpy(t, out, len);
                free(out);
                out = t;
            }
            out[len++] = '\n';
            out[len] = 0;
        }
        int rc = content_text(p, content, &out, &len, &cap);
        if (rc) {
            free(out);
            return rc;
        }
    }
    r->prompt = out ? out : mlsys_xstrdup("");
    return 0;
}

static int completion_prompt(parse_ctx *p, const cJSON *root, srv_req *r)
{
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(root, "prompt");
    if (!x)
        return bad(p, 400, "prompt", "'prompt' is required");
    if (cJSON_IsArray(x) && cJSON_GetArraySize(x) == 1)
        x = cJSON_GetArrayItem(x, 0);
    if (!cJSON_IsString(x) || !x->valuestring)
        return bad(p, 400, "prompt", "'prompt' must be a string (or an array of one string)");
    r->prompt = mlsys_xstrdup(x->valuestring);
    return 0;
}

/* OpenAI (and vLLM) fields this server does not serve. One policy: a field left out, null or
 * at its neutral value (the value that asks for nothing) is accepted; any other value is 400
 * naming the field, never ignored. Fields we do not know at all are ignored, as vLLM does. */
typedef enum { NEUTRAL_FALSE, NEUTRAL_ZERO, NEUTRAL_ONE, NEUTRAL_EMPTY, NEUTRAL_NONE } neutral;
static const struct unserved {
    const char *name;
    neutral ok;                   /* the value accepted besides null */
    const char *what;             /* what the field asks for */
} unserved[] = {
    {"logprobs", NEUTRAL_FALSE, "log-probabilities of the tokens"},
    {"top_logprobs", NEUTRAL_ZERO, "the most likely tokens at each position"},
    {"echo", NEUTRAL_FALSE, "the prompt echoed in the answer"},
    {"best_of", NEUTRAL_ONE, "several candidates ranked on the server"},
    {"suffix", NEUTRAL_EMPTY, "text inserted before a suffix"},
    {"presence_penalty", NEUTRAL_ZERO, "a penalty on tokens already present"},
    {"frequency_penalty", NEUTRAL_ZERO, "a penalty by token frequency"},
    {"repetition_penalty", NEUTRAL_ONE, "a penalty on repeated tokens"},
    {"logit_bias", NEUTRAL_EMPTY, "biases added to token logits"},
    {"min_p", NEUTRAL_ZERO, "min-p sampling"},
    {"min_tokens", NEUTRAL_ZERO, "a minimum number of tokens"},
    {"tools", NEUTRAL_EMPTY, "tool calls"},
    {"tool_choice", NEUTRAL_NONE, "tool calls"},
    {"functions", NEUTRAL_EMPTY, "function calls"},
    {"function_call", NEUTRAL_NONE, "function calls"},
};

static int is_neutral(const cJSON *x, neutral ok)
{
    if (!x || cJSON_IsNull(x))
        return 1;
    switch (ok) {
    case NEUTRAL_FALSE:           /* chat's logprobs; completions' is a count (0 asks too) */
        return cJSON_IsFalse(x);
    case NEUTRAL_ZERO:
        return cJSON_IsNumber(x) && x->valuedouble == 0;
    case NEUTRAL_ONE:
        return cJSON_IsNumber(x) && x->valuedouble == 1;
    case NEUTRAL_EMPTY:
        return (cJSON_IsString(x) && !x->valuestring[0]) ||
               ((cJSON_IsArray(x) || cJSON_IsObject(x)) && !x->child);
    case NEUTRAL_NONE:
        return cJSON_IsString(x) && !strcmp(x->valuestring, "none");
    }
    return 0;
}

static int refuse_unserved(parse_ctx *p, const cJSON *root)
{
    for (size_t i = 0; i < sizeof unserved / sizeof unserved[0]; i++) {
        const struct unserved *u = &unserved[i];
        if (is_neutral(cJSON_GetObjectItemCaseSensitive(root, u->name), u->ok))
            continue;
        char msg[200];
        snprintf(msg, sizeof msg, "'%s' is not served here (%s); leave it out or null", u->name,
                 u->what);
        return bad(p, 400, u->name, msg);
    }
    return 0;
}

static int parse_fields(parse_ctx *p, const cJSON *root, srv_kind kind, const char *model_name,
                        srv_req *r)
{
    int rc, given;
    double v;
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    if (model && !cJSON_IsNull(model)) {
        if (!cJSON_IsString(model))
            return bad(p, 400, "model", "'model' must be a string");
        if (model_name && strcmp(model->valuestring, model_name)) {
            char msg[300];
            snprintf(msg, sizeof msg, "The model '%.200s' does not exist", model->valuestring);
            return bad(p, 404, "model", msg);
        }
    }
    /* n: samples of the one prompt (choices), prefilled once and sharing its KV blocks */
    if ((rc = get_int(p, root, "n", 1, SRV_MAX_N, &v, &given)))
        return rc;
    r->n = given ? (int)v : 1;
    r->max_tokens = -1;
    if ((rc = get_int(p, root, "max_tokens", 1, 1 << 20, &v, &given)))
        return rc;
    if (given)
        r->max_tokens = (int)v;
    if (kind == SRV_CHAT) {
        if ((rc = get_int(p, root, "max_completion_tokens", 1, 1 << 20, &v, &given)))
            return rc;
        if (given)
            r->max_tokens = (int)v;
    }
    r->temperature = 1.0;
    r->top_p = 1.0;
    if ((rc = get_number(p, root, "temperature", 0, 2, &r->temperature)) ||
        (rc = get_number(p, root, "top_p", 0, 1, &r->top_p)))
        return rc;
    if (r->top_p <= 0)
        return bad(p, 400, "top_p", "'top_p' must be above 0");
    if ((rc = get_int(p, root, "top_k", -1, 1 << 20, &v, &given)))
        return rc;
    r->top_k = given && v > 0 ? (int)v : 0;
    if ((rc = get_int(p, root, "seed", -9007199254740991.0, 9007199254740991.0, &v, &given)))
        return rc;
    r->has_seed = given;
    r->seed = given ? (uint64_t)(int64_t)v : 0;
    const cJSON *stop = cJSON_GetObjectItemCaseSensitive(root, "stop");
    if (stop && cJSON_IsArray(stop)) {
        const cJSON *it;
        cJSON_ArrayForEach(it, stop)
            if ((rc = add_stop(p, r, it)))
                return rc;
    } else if (stop && !cJSON_IsNull(stop) && (rc = add_stop(p, r, stop))) {
        return rc;
    }
    if ((rc = refuse_unserved(p, root)))
        return rc;
    if ((rc = get_bool(p, root, "stream", &r->stream)) ||
        (rc = get_bool(p, root, "ignore_eos", &r->ignore_eos)))
        return rc;
    const cJSON *so = cJSON_GetObjectItemCaseSensitive(root, "stream_options");
    if (so && !cJSON_IsNull(so)) {
        if (!cJSON_IsObject(so))
            return bad(p, 400, "stream_options", "'stream_options' must be an object");
        if (!r->stream)
            return bad(p, 400, "stream_options", "'stream_options' is only allowed when "
                       "'stream' is true");
        if ((rc = get_bool(p, so, "include_usage", &r->include_usage)))
            return rc;
    }
    const cJSON *rf = cJSON_GetObjectItemCaseSensitive(root, "response_format");
    if (rf && !cJSON_IsNull(rf)) {
        const cJSON *ty = cJSON_GetObjectItemCaseSensitive(rf, "type");
        if (!cJSON_IsObject(rf) || !cJSON_IsString(ty))
            return bad(p, 400, "response_format", "'response_format' must be an object with "
                       "a string 'type'");
        if (!strcmp(ty->valuestring, "json_object"))
            r->json_mode = 1;
        else if (strcmp(ty->valuestring, "text"))
            return bad(p, 400, "response_format", "'response_format.type' must be 'text' or "
                       "'json_object' (json_schema is not served)");
    }
    return kind == SRV_CHAT ? chat_prompt(p, root, r) : completion_prompt(p, root, r);
}

int srv_req_parse(const char *body, size_t n, srv_kind kind, const char *model_name,
                  srv_req *r, char *err, size_t errlen, char *param, size_t paramlen)
{
    parse_ctx p = {err, param, errlen, paramlen};
    memset(r, 0, sizeof *r);
    r->kind = kind;
    if (memchr(body, 0, n))
        return bad(&p, 400, "", "the body holds a NUL byte: not JSON");
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(body, n, &end, 0);
    if (!root)
        return bad(&p, 400, "", "We could not parse the JSON body of your request");
    int rc = 0;
    for (const char *q = end; q && q < body + n; q++)
        if (*q != ' ' && *q != '\t' && *q != '\n' && *q != '\r') {
            rc = bad(&p, 400, "", "We could not parse the JSON body of your request (bytes "
                     "after the value)");
            break;
        }
    if (!rc && !cJSON_IsObject(root))
        rc = bad(&p, 400, "", "the body must be a JSON object");
    if (!rc)
        rc = parse_fields(&p, root, kind, model_name, r);
    cJSON_Delete(root);
    if (rc)
        srv_req_free(r);
    return rc;
}

#else

int srv_req_parse(const char *body, size_t n, srv_kind kind, const char *model_name,
                  srv_req *r, char *err, size_t errlen, char *param, size_t paramlen)
{
    (void)body; (void)n; (void)kind; (void)model_name;
    memset(r, 0, sizeof *r);
    snprintf(err, errlen, "built without cJSON");
    snprintf(param, paramlen, "%s", "");
    return 500;
}

#endif

void srv_req_free(srv_req *r)
{
    free(r->prompt);
    r->prompt = NULL;
}
