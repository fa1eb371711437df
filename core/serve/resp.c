/* resp.c - the bodies the server writes, in OpenAI's shapes (built with cJSON, so every
 * string is escaped): errors, a whole completion or chat completion with choices,
 * finish_reason and usage, one server-sent event of a stream, the model list. */
#include "srv_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *srv_finish_reason(llm_finish f)
{
    switch (f) {
    case LLM_FINISH_STOP: return "stop";
    case LLM_FINISH_LENGTH: return "length";
    case LLM_FINISH_CANCEL: return "abort";
    default: return "error";
    }
}

#ifdef HAVE_CJSON
#include <cjson/cJSON.h>

static char *print_free(cJSON *o)
{
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s ? s : mlsys_xstrdup("{}");
}

char *srv_resp_error(int status, const char *msg, const char *param)
{
    const char *type = status == 401 ? "authentication_error"
                     : status == 503 ? "service_unavailable"
                     : status >= 500 ? "server_error" : "invalid_request_error";
    const char *code = status == 404 && param && !strcmp(param, "model") ? "model_not_found"
                     : status == 413 ? "request_too_large"
                     : status == 401 ? "invalid_api_key" : NULL;
    cJSON *o = cJSON_CreateObject(), *e = cJSON_AddObjectToObject(o, "error");
    cJSON_AddStringToObject(e, "message", msg);
    cJSON_AddStringToObject(e, "type", type);
    if (param && *param)
        cJSON_AddStringToObject(e, "param", param);
    else
        cJSON_AddNullToObject(e, "param");
    if (code)
        cJSON_AddStringToObject(e, "code", code);
    else
        cJSON_AddNullToObject(e, "code");
    return print_free(o);
}

static void head(cJSON *o, const srv_job *j, const char *model, long created, int chunk)
{
    char id[48];
    int chat = j->req.kind == SRV_CHAT;
    snprintf(id, sizeof id, "%s-%ld", chat ? "chatcmpl" : "cmpl", j->serial);
    cJSON_AddStringToObject(o, "id", id);
    cJSON_AddStringToObject(o, "object", !chat ? "text_completion"
                            : chunk ? "chat.completion.chunk" : "chat.completion");
    cJSON_AddNumberToObject(o, "created", (double)created);
    cJSON_AddStringToObject(o, "model", model);
}

static void usage(cJSON *o, const srv_job *j)
{
    cJSON *u = cJSON_AddObjectToObject(o, "usage");
    cJSON_AddNumberToObject(u, "prompt_tokens", j->n_prompt);
    cJSON_AddNumberToObject(u, "completion_tokens", j->n_out);
    cJSON_AddNumberToObject(u, "total_tokens", j->n_prompt + j->n_out);
}

/* A string from bytes that need not end in NUL. */
static cJSON *str_n(const char *s, size_t n)
{
    char *t = mlsys_xmalloc(n + 1);
    memcpy(t, s, n);
    t[n] = 0;
    cJSON *x = cJSON_CreateString(t);
    free(t);
    return x;
}

char *srv_resp_full(const srv_job *j, const char *model, long created)
{
    cJSON *o = cJSON_CreateObject();
    head(o, j, model, created, 0);
    cJSON *ch = cJSON_AddArrayToObject(o, "choices");
    for (int i = 0; i < j->n; i++) {
        const srv_choice *k = &j->ch[i];
        cJSON *c = cJSON_CreateObject();
        cJSON_AddItemToArray(ch, c);
        cJSON_AddNumberToObject(c, "index", i);
        cJSON *text = str_n(k->text ? k->text : "", k->len);
        if (j->req.kind == SRV_CHAT) {
            cJSON *m = cJSON_AddObjectToObject(c, "message");
            cJSON_AddStringToObject(m, "role", "assistant");
            cJSON_AddItemToObject(m, "content", text);
        } else {
            cJSON_AddItemToObject(c, "text", text);
        }
        cJSON_AddNullToObject(c, "logprobs");
        cJSON_AddStringToObject(c, "finish_reason", srv_finish_reason(k->finish));
    }
    usage(o, j);
    return print_free(o);
}

/* "data: {json}\n\n" of o (freed), appended to *ev (malloc'd or NULL). */
static void add_event(char **ev, cJSON *o)
{
    char *body = print_free(o);
    size_t have = *ev ? strlen(*ev) : 0, n = strlen(body);
    char *t = mlsys_xmalloc(have + n + 9);
    if (have)
        memcpy(t, *ev, have);
    memcpy(t + have, "data: ", 6);
    memcpy(t + have + 6, body, n);
    memcpy(t + have + 6 + n, "\n\n", 3);
    free(body);
    free(*ev);
    *ev = t;
}

char *srv_resp_chunk(const srv_job *j, int index, const char *model, long created,
                     const char *text, size_t len, int first, int final)
{
    cJSON *o = cJSON_CreateObject();
    head(o, j, model, created, 1);
    cJSON *ch = cJSON_AddArrayToObject(o, "choices"), *c = cJSON_CreateObject();
    cJSON_AddItemToArray(ch, c);
    cJSON_AddNumberToObject(c, "index", index);
    if (j->req.kind == SRV_CHAT) {
        cJSON *d = cJSON_AddObjectToObject(c, "delta");
        if (first)
            cJSON_AddStringToObject(d, "role", "assistant");
        if (len > 0 || first)
            cJSON_AddItemToObject(d, "content", str_n(text ? text : "", len));
    } else {
        cJSON_AddItemToObject(c, "text", str_n(text ? text : "", len));
    }
    cJSON_AddNullToObject(c, "logprobs");
    if (final)
        cJSON_AddStringToObject(c, "finish_reason", srv_finish_reason(j->ch[index].finish));
    else
        cJSON_AddNullToObject(c, "finish_reason");
    /* stream_options.include_usage: every chunk says "usage": null, and one more chunk
     * after the last choice carries the usage with "choices": [] (OpenAI's shape) */
    if (j->req.include_usage)
        cJSON_AddNullToObject(o, "usage");
    char *ev = NULL;
    add_event(&ev, o);
    if (final == 2 && j->req.include_usage) {
        o = cJSON_CreateObject();
        head(o, j, model, created, 1);
        cJSON_AddArrayToObject(o, "choices");
        usage(o, j);
        add_event(&ev, o);
    }
    return ev;
}

char *srv_resp_models(const char *model, long created)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "object", "list");
    cJSON *d = cJSON_AddArrayToObject(o, "data"), *m = cJSON_CreateObject();
    cJSON_AddItemToArray(d, m);
    cJSON_AddStringToObject(m, "id", model);
    cJSON_AddStringToObject(m, "object", "model");
    cJSON_AddNumberToObject(m, "created", (double)created);
    cJSON_AddStringToObject(m, "owned_by", "mlsys-lab");
    return print_free(o);
}

#else

char *srv_resp_error(int status, const char *msg, const char *param)
{
    (void)status; (void)msg; (void)param;
    return mlsys_xstrdup("{}");
}
char *srv_resp_full(const srv_job *j, const char *model, long created)
{
    (void)j; (void)model; (void)created;
    return mlsys_xstrdup("{}");
}
char *srv_resp_chunk(const srv_job *j, int index, const char *model, long created,
                     const char *text, size_t len, int first, int final)
{
    (void)j; (void)index; (void)model; (void)created; (void)text; (void)len; (void)first;
    (void)final;
    return mlsys_xstrdup("");
}
char *srv_resp_models(const char *model, long created)
{
    (void)model; (void)created;
    return mlsys_xstrdup("{}");
}

#endif
