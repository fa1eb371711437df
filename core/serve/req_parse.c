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
    if ((rc = get_bool(p, root, "stream", &r->stream)) ||
        (rc = get_bool(p, root, "ignore_eos", &r->ignore_eos)))
        return rc;
    const cJSON *so = cJSON_GetObjectItemCaseSensitive(root, "stream_options");
    if (so && !cJSON_IsNull(so)) {
        if (!cJSON_IsObject(so))
            return bad(p, 400, "stream_options", "'stream_options' must be an object");
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
