/* loadgen.c - `mlsys-lab loadgen --url URL --concurrency C --requests N`: C client threads
 * send N completion requests (seeded prompts and lengths) to an OpenAI-compatible server and
 * time them: TTFT, TPOT, end-to-end latency (mean, p50, p90, p99) and tokens/s, in the shape
 * of vLLM's benchmark_serving; bounded in count and in time (--timeout). A request counts only
 * when its answer is whole: a complete JSON body with choices and usage, or a stream of JSON
 * events ending in [DONE]; each failure says why. --disconnect P makes a client walk away
 * from a share of its requests mid-stream (the server must cancel). */
#include "cli.h"
#include "loadgen_http.h"
#include "../../core/serve/http.h"

#include <math.h>
#include <stdarg.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#ifdef HAVE_CJSON
#include <cjson/cJSON.h>
#endif

static const lab_flag loadgen_flags[] = {
    {"url", 0, FLAG_STR, NULL, NULL, 0, 0, "the server: http://HOST:PORT, or the base of its "
     "API: http://HOST:PORT/PREFIX/v1"},
    {"concurrency", 0, FLAG_INT, "4", NULL, 1, 1024, "requests in flight at once"},
    {"requests", 0, FLAG_INT, "64", NULL, 1, 100000, "requests sent in all"},
    {"max-tokens", 0, FLAG_INT, "32", NULL, 1, 4096, "max_tokens of each request"},
    {"vary-output", 0, FLAG_BOOL, NULL, NULL, 0, 0, "draw each request's max_tokens in "
     "[max/4, max] (seeded)"},
    {"ignore-eos", 0, FLAG_BOOL, NULL, NULL, 0, 0, "ask the server to run to max_tokens"},
    {"stream", 0, FLAG_BOOL, NULL, NULL, 0, 0, "stream the tokens (server-sent events): "
     "TTFT is then the first token's arrival"},
    {"chat", 0, FLAG_BOOL, NULL, NULL, 0, 0, "POST /v1/chat/completions instead of "
     "/v1/completions"},
    {"temperature", 0, FLAG_DOUBLE, "0", NULL, 0, 0, "sampling temperature in [0, 2] (0: "
     "greedy)"},
    {"seed", 0, FLAG_INT, "42", NULL, 0, 1L << 40, "prompts, lengths, disconnects; request "
     "i samples with seed + i"},
    {"disconnect", 0, FLAG_DOUBLE, "0", NULL, 0, 0, "share of requests the client abandons "
     "after its first token (streamed) or once sent"},
    {"model", 0, FLAG_STR, "mlsys-lab", NULL, 0, 0, "the model the requests name"},
    {"api-key", 0, FLAG_STR, NULL, NULL, 0, 0, "sent as 'Authorization: Bearer KEY' (default: "
     "$MLSYS_LAB_API_KEY)"},
    {"timeout", 0, FLAG_DOUBLE, "300", NULL, 0, 86400, "seconds for the whole run (requests "
     "not started by then are skipped)"},
    {NULL, 0, 0, NULL, NULL, 0, 0, NULL}
};

const lab_command loadgen_command = {
    .name = "loadgen",
    .args = "",
    .summary = "Load an OpenAI-compatible server: TTFT, TPOT, latency percentiles, tokens/s.",
    .flags = loadgen_flags,
};

static const char *const lg_prompts[] = {
    "Once upon a time", "Tom and Lily went to the park", "The little dog was sad because",
    "One day, a girl named Sue found a", "The sun was hot and the birds", "Ben liked to play "
    "with his red ball", "There was a big tree near the house", "Mom said, \"Let's bake a",
};
#define LG_NPROMPTS ((int)(sizeof lg_prompts / sizeof *lg_prompts))

#define LG_MAX_BODY (1u << 20)   /* bytes of an answer kept (more: a failure) */

typedef struct lg_req {
    int max_tokens, prompt, abandon;
    double t0, t_first, t_end;
    int status, ok, aborted, n_prompt, n_out, got_first;
    double engine_ms, server_ms;
    char err[512];                /* why it failed ("" while it has not) */
    char *buf;                    /* the body, or the stream's unparsed end */
    size_t bl, bcap;
    int events, done, after_done; /* stream: JSON events, [DONE] seen, data after it */
} lg_req;

typedef struct lg_run {
    lg_url url;
    char path[600];
    const char *key, *model;
    int n, conc, stream, chat, ignore_eos;
    double temperature, deadline, timeout;
    long seed;
    lg_req *req;
    int next;
    pthread_mutex_t mu;
} lg_run;

static void fail(lg_req *q, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void fail(lg_req *q, const char *fmt, ...)
{
    if (q->err[0])
        return;                   /* the first reason stands */
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(q->err, sizeof q->err, fmt, ap);
    va_end(ap);
}

/* Append to the request's buffer; 0, or -1 past LG_MAX_BODY. */
static int keep(lg_req *q, const char *d, size_t n)
{
    if (q->bl + n + 1 > LG_MAX_BODY)
        return -1;
    if (q->bl + n + 1 > q->bcap) {
        size_t cap = (q->bl + n + 1) * 2;
        char *b = mlsys_xmalloc(cap);
        if (q->bl)
            memcpy(b, q->buf, q->bl);
        free(q->buf);
        q->buf = b;
        q->bcap = cap;
    }
    memcpy(q->buf + q->bl, d, n);
    q->bl += n;
    q->buf[q->bl] = 0;
    return 0;
}

/* A short, one-line sample of text for a reason. */
static void sample(const char *s, size_t n, char *out, size_t cap)
{
    size_t k = 0;
    for (size_t i = 0; i < n && k + 1 < cap && i < 80; i++)
        out[k++] = s[i] == '\n' || s[i] == '\r' ? ' ' : s[i];
    out[k] = 0;
}

#ifdef HAVE_CJSON
/* choices[0]'s text (a completion's "text", a chat's message or delta "content"), or NULL. */
static const char *choice_text(const cJSON *o)
{
    const cJSON *c = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(o, "choices"), 0);
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(c, "text");
    if (!cJSON_IsString(t))
        t = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(c, "message"),
                                             "content");
    if (!cJSON_IsString(t))
        t = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(c, "delta"),
                                             "content");
    return cJSON_IsString(t) ? t->valuestring : NULL;
}

/* The usage object's counts into q; 1 when there was one. */
static int take_usage(lg_req *q, const cJSON *o)
{
    const cJSON *u = cJSON_GetObjectItemCaseSensitive(o, "usage");
    const cJSON *pt = cJSON_GetObjectItemCaseSensitive(u, "prompt_tokens");
    const cJSON *ct = cJSON_GetObjectItemCaseSensitive(u, "completion_tokens");
    if (!cJSON_IsNumber(ct))
        return 0;
    q->n_out = ct->valueint;
    q->n_prompt = cJSON_IsNumber(pt) ? pt->valueint : -1;
    return 1;
}

/* An error body's message ({"error": {"message": ...}}), or NULL. */
static const char *error_message(const cJSON *o)
{
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(o, "error");
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(e, "message");
    return cJSON_IsString(m) ? m->valuestring : e ? "(no message)" : NULL;
}
#endif

/* One server-sent event's data: a JSON chunk (its text marks the first token, its usage
 * counts), an error, or [DONE]. */
static void sse_event(lg_req *q, const char *data)
{
    char s[96];
    if (q->done) {
        q->after_done = 1;
        sample(data, strlen(data), s, sizeof s);
        fail(q, "data after [DONE]: %s", s);
        return;
    }
    if (!strcmp(data, "[DONE]")) {
        q->done = 1;
        return;
    }
#ifdef HAVE_CJSON
    cJSON *o = cJSON_Parse(data);
    if (!cJSON_IsObject(o)) {
        sample(data, strlen(data), s, sizeof s);
        fail(q, "an event is not a JSON object: %s", s);
        cJSON_Delete(o);
        return;
    }
    const char *em = error_message(o);
    if (em)
        fail(q, "the stream carried an error: %.200s", em);
    q->events++;
    const char *t = choice_text(o);
    if (t && *t && !q->got_first) {
        q->got_first = 1;
        q->t_first = mlsys_now_s();
    }
    take_usage(q, o);
    cJSON_Delete(o);
#else
    q->events++;
    if (!q->got_first && (strstr(data, "\"text\":\"") || strstr(data, "\"content\":\"")) &&
        !strstr(data, "\"text\":\"\"") && !strstr(data, "\"content\":\"\"")) {
        q->got_first = 1;
        q->t_first = mlsys_now_s();
    }
#endif
}

/* A streamed body, piece by piece: events end with a blank line; the unfinished end waits. */
static int on_body(void *u, const char *data, size_t n)
{
    lg_req *q = u;
    if (!data)
        return 0;
    if (keep(q, data, n)) {
        fail(q, "an event longer than %u bytes", LG_MAX_BODY);
        return 1;
    }
    char *e, *p = q->buf;
    while ((e = strstr(p, "\n\n"))) {
        *e = 0;
        for (char *l = p, *nl; l; l = nl) {   /* one or more lines; only data lines count */
            nl = strchr(l, '\n');
            if (nl)
                *nl++ = 0;
            if (!strncmp(l, "data:", 5))
                sse_event(q, l[5] == ' ' ? l + 6 : l + 5);
        }
        p = e + 2;
    }
    q->bl -= (size_t)(p - q->buf);
    memmove(q->buf, p, q->bl + 1);
    return q->abandon && q->got_first;
}

/* A whole (non-streamed) body is kept, up to LG_MAX_BODY. */
static int on_body_plain(void *u, const char *data, size_t n)
{
    lg_req *q = u;
    if (!data) {                  /* sent: a client that walks away does it now, a few
                                     milliseconds in (its request is then running) */
        if (q->abandon)
            usleep((useconds_t)(1000 + (q->prompt * 997) % 9000));
        return q->abandon;
    }
    if (keep(q, data, n)) {
        fail(q, "a body over %u bytes", LG_MAX_BODY);
        return 1;
    }
    return 0;
}

/* A whole answer: a JSON object with a choice's text and the usage; or, not 200, why. */
static void judge_plain(lg_req *q)
{
    char s[96];
    sample(q->buf ? q->buf : "", q->bl, s, sizeof s);
#ifdef HAVE_CJSON
    const char *end = NULL;
    cJSON *o = q->bl ? cJSON_ParseWithLengthOpts(q->buf, q->bl, &end, 0) : NULL;
    while (o && end && end < q->buf + q->bl && strchr(" \t\r\n", *end))
        end++;
    int whole = o && end == q->buf + q->bl;
    if (q->status != 200) {
        const char *em = whole ? error_message(o) : NULL;
        fail(q, "HTTP %d: %.200s", q->status, em ? em : s);
    } else if (!whole || !cJSON_IsObject(o)) {
        fail(q, "the body is not one complete JSON object (%zu bytes: %s)", q->bl, s);
    } else if (!choice_text(o)) {
        fail(q, "the answer has no choices[0] text");
    } else if (!take_usage(q, o)) {
        fail(q, "the answer has no usage.completion_tokens");
    }
    cJSON_Delete(o);
#else
    if (q->status != 200)
        fail(q, "HTTP %d: %s", q->status, s);
    else if (q->bl < 2 || q->buf[0] != '{' || !strstr(q->buf, "\"completion_tokens\":"))
        fail(q, "the body is not a complete answer (%zu bytes: %s)", q->bl, s);
    else {
        q->n_out = atoi(strstr(q->buf, "\"completion_tokens\":") + 20);
        const char *pt = strstr(q->buf, "\"prompt_tokens\":");
        q->n_prompt = pt ? atoi(pt + 16) : -1;
    }
#endif
}

/* A whole stream: 200, JSON events, [DONE] last. */
static void judge_stream(lg_req *q)
{
    char s[96];
    if (q->status != 200) {
        sample(q->buf ? q->buf : "", q->bl, s, sizeof s);
        fail(q, "HTTP %d: %s", q->status, s);
    } else if (!q->events) {
        fail(q, "the stream ended without an event%s", q->done ? " (only [DONE])" : "");
    } else if (!q->done) {
        fail(q, "the stream ended without [DONE] (after %d events)", q->events);
    } else if (q->bl) {
        sample(q->buf, q->bl, s, sizeof s);
        fail(q, "bytes after the last event: %s", s);
    }
}

static void run_one(lg_run *g, int i)
{
    lg_req *q = &g->req[i];
    char body[1024];
    const char *p = lg_prompts[q->prompt];
    char ptext[200];
    size_t k = 0;                  /* the prompt, JSON-escaped (only quotes occur) */
    for (const char *c = p; *c && k + 3 < sizeof ptext; c++) {
        if (*c == '"')
            ptext[k++] = '\\';
        ptext[k++] = *c;
    }
    ptext[k] = 0;
    snprintf(body, sizeof body, "{\"model\":\"%s\",%s%s%s,\"max_tokens\":%d,\"temperature\":%g,"
             "\"seed\":%ld,\"stream\":%s%s%s}", g->model,
             g->chat ? "\"messages\":[{\"role\":\"user\",\"content\":\"" : "\"prompt\":\"",
             ptext, g->chat ? "\"}]" : "\"", q->max_tokens, g->temperature, g->seed + i,
             g->stream ? "true,\"stream_options\":{\"include_usage\":true}" : "false",
             g->ignore_eos ? ",\"ignore_eos\":true" : "", "");
    lg_response r;
    q->n_out = q->n_prompt = -1;
    q->t0 = mlsys_now_s();
    double left = g->deadline - q->t0;
    int rc = lg_post(&g->url, g->path, g->key, body, left > 1 ? left : 1,
                     g->stream ? on_body : on_body_plain, q, &r);
    q->t_end = mlsys_now_s();
    q->status = r.status;
    q->aborted = r.aborted && q->abandon && !q->err[0];
    q->engine_ms = r.engine_ms;
    q->server_ms = r.server_ms;
    if (rc)
        fail(q, "%s", r.err);
    else if (!q->aborted && g->stream)
        judge_stream(q);
    else if (!q->aborted)
        judge_plain(q);
    if (!g->stream && !q->err[0]) {
        q->t_first = q->t_end;
        q->got_first = 1;
    }
    if (g->stream && !q->err[0] && !q->aborted && q->n_out < 0)
        fail(q, "the stream had no usage (stream_options.include_usage was asked for)");
    q->ok = !q->aborted && !q->err[0];
    free(q->buf);
    q->buf = NULL;
    q->bl = q->bcap = 0;
}

static void *worker(void *arg)
{
    lg_run *g = arg;
    for (;;) {
        pthread_mutex_lock(&g->mu);
        int i = g->next < g->n && mlsys_now_s() < g->deadline ? g->next++ : -1;
        pthread_mutex_unlock(&g->mu);
        if (i < 0)
            return NULL;
        run_one(g, i);
    }
}

static void stats(const char *title, const char *name, double *v, int n)
{
    double sum = 0;
    for (int i = 0; i < n; i++)
        sum += v[i];
    char l[64];
    printf("%s\n", title);
    snprintf(l, sizeof l, "Mean %s (ms):", name);
    printf("%-40s %.2f\n", l, n ? sum / n : 0);
    snprintf(l, sizeof l, "Median %s (ms):", name);
    printf("%-40s %.2f\n", l, mlsys_percentile(v, (size_t)n, 50));
    snprintf(l, sizeof l, "P90 %s (ms):", name);
    printf("%-40s %.2f\n", l, mlsys_percentile(v, (size_t)n, 90));
    snprintf(l, sizeof l, "P99 %s (ms):", name);
    printf("%-40s %.2f\n", l, mlsys_percentile(v, (size_t)n, 99));
}

typedef struct lg_reason {
    const char *why;
    int n;
} lg_reason;

static int report(lg_run *g, double dur)
{
    int ok = 0, failed = 0, abandoned = 0, skipped = 0, n_t = 0, n_o = 0, n_x = 0, nr = 0;
    lg_reason reasons[4];         /* the first distinct ones */
    long in = 0, out = 0;
    double *ttft = calloc((size_t)g->n + 1, sizeof(double));
    double *tpot = calloc((size_t)g->n + 1, sizeof(double));
    double *e2e = calloc((size_t)g->n + 1, sizeof(double));
    double *over = calloc((size_t)g->n + 1, sizeof(double));
    double *cover = calloc((size_t)g->n + 1, sizeof(double));
    for (int i = 0; i < g->n; i++) {
        lg_req *q = &g->req[i];
        if (q->t0 == 0) {
            skipped++;
            continue;
        }
        if (q->aborted) {
            abandoned++;
            continue;
        }
        if (!q->ok) {
            failed++;
            int r = 0;
            while (r < nr && strcmp(reasons[r].why, q->err))
                r++;
            if (r < nr)
                reasons[r].n++;
            else if (nr < 4)
                reasons[nr++] = (lg_reason){q->err, 1};
            continue;
        }
        ok++;
        in += q->n_prompt > 0 ? q->n_prompt : 0;
        out += q->n_out;
        e2e[n_t] = (q->t_end - q->t0) * 1e3;
        ttft[n_t++] = ((q->got_first ? q->t_first : q->t_end) - q->t0) * 1e3;
        if (q->n_out > 1)
            tpot[n_o++] = (q->t_end - q->t_first) * 1e3 / (q->n_out - 1);
        if (q->engine_ms >= 0 && q->server_ms >= 0) {
            over[n_x] = q->server_ms - q->engine_ms;
            cover[n_x++] = e2e[n_t - 1] - q->engine_ms;
        }
    }
    printf("============ Serving Benchmark Result ============\n");
    printf("%-40s %d\n", "Successful requests:", ok);
    printf("%-40s %d\n", "Failed requests:", failed);
    if (abandoned)
        printf("%-40s %d\n", "Abandoned by the client (--disconnect):", abandoned);
    if (skipped)
        printf("%-40s %d\n", "Not sent (--timeout reached):", skipped);
    printf("%-40s %.2f\n", "Benchmark duration (s):", dur);
    printf("%-40s %ld\n", "Total input tokens:", in);
    printf("%-40s %ld\n", "Total generated tokens:", out);
    printf("%-40s %.2f\n", "Request throughput (req/s):", dur > 0 ? ok / dur : 0);
    printf("%-40s %.2f\n", "Output token throughput (tok/s):", dur > 0 ? out / dur : 0);
    printf("%-40s %.2f\n", "Total Token throughput (tok/s):", dur > 0 ? (in + out) / dur : 0);
    if (g->stream) {
        stats("---------------Time to First Token----------------", "TTFT", ttft, n_t);
        stats("-----Time per Output Token (excl. 1st token)------", "TPOT", tpot, n_o);
    } else {
        /* a non-streamed answer arrives whole: its first token comes with its last */
        printf("(TTFT and TPOT need --stream: a non-streamed answer arrives whole)\n");
    }
    stats("----------------End-to-end Latency----------------", "E2EL", e2e, n_t);
    if (n_x) {
        printf("------Beyond the engine (non-streamed, server's timers)------\n");
        printf("%-40s %.3f\n", "Median server time - engine (ms):", mlsys_percentile(over, (size_t)n_x, 50));
        printf("%-40s %.3f\n", "P90 server time - engine (ms):", mlsys_percentile(over, (size_t)n_x, 90));
        printf("%-40s %.3f\n", "Median client E2EL - engine (ms):", mlsys_percentile(cover, (size_t)n_x, 50));
    }
    printf("==================================================\n");
    /* every failure counted under its reason (the first distinct ones, most often first) */
    for (int a = 0; a < nr; a++)
        for (int b = a + 1; b < nr; b++)
            if (reasons[b].n > reasons[a].n) {
                lg_reason t = reasons[a];
                reasons[a] = reasons[b];
                reasons[b] = t;
            }
    int shown = 0;
    for (int r = 0; r < nr; r++)
        shown += reasons[r].n;
    for (int r = 0; r < nr; r++)
        fprintf(stderr, "mlsys-lab loadgen: %d request%s failed: %s\n", reasons[r].n,
                reasons[r].n == 1 ? "" : "s", reasons[r].why);
    if (failed > shown)
        fprintf(stderr, "mlsys-lab loadgen: %d more failed for other reasons\n",
                failed - shown);
    if (!ok && !failed && abandoned == g->n)
        printf("Every request sent was abandoned by the client, as --disconnect asked: the "
               "server was loaded, nothing was timed.\n");
    else if (!ok && !failed)
        fprintf(stderr, "mlsys-lab loadgen: no request finished (%d abandoned, %d not sent "
                "before --timeout)\n", abandoned, skipped);
    free(ttft);
    free(tpot);
    free(e2e);
    free(over);
    free(cover);
    /* abandoning every request is what --disconnect 1 asks for, not a failure */
    return failed || (ok == 0 && abandoned != g->n) ? 1 : 0;
}

int loadgen_main(int argc, char **argv)
{
    lab_args a;
    int rc = lab_command_args(&loadgen_command, argc, argv, &a);
    if (rc >= 0)
        return rc;
    lg_run g;
    memset(&g, 0, sizeof g);
    const char *url = lab_arg_str(&a, "url");
    if (!url) {
        fprintf(stderr, "mlsys-lab loadgen: --url is required (http://HOST:PORT)\n");
        lab_args_free(&a);
        return 2;
    }
    if (lg_url_parse(url, &g.url)) {
        fprintf(stderr, "mlsys-lab loadgen: --url %s: expected http://HOST:PORT, or "
                "http://HOST:PORT/PREFIX/v1\n", url);
        lab_args_free(&a);
        return 2;
    }
    /* the server's root, or the base of its API (a prefix before /v1, as a proxy adds);
     * any other path would be replaced without a word: refused */
    size_t pl = strlen(g.url.path);
    if (pl && (pl < 3 || strcmp(g.url.path + pl - 3, "/v1"))) {
        fprintf(stderr, "mlsys-lab loadgen: --url %s: the path %s is neither the server's root "
                "nor an API base ending in /v1\n", url, g.url.path);
        lab_args_free(&a);
        return 2;
    }
    g.chat = lab_arg_bool(&a, "chat");
    snprintf(g.path, sizeof g.path, "%s%s", pl ? g.url.path : "/v1",
             g.chat ? "/chat/completions" : "/completions");
    g.key = lab_arg_str(&a, "api-key");
    if (!g.key && getenv(SRV_KEY_ENV) && *getenv(SRV_KEY_ENV))
        g.key = getenv(SRV_KEY_ENV);
    g.model = lab_arg_str(&a, "model");
    g.n = (int)lab_arg_int(&a, "requests");
    g.conc = (int)lab_arg_int(&a, "concurrency");
    g.stream = lab_arg_bool(&a, "stream");
    g.ignore_eos = lab_arg_bool(&a, "ignore-eos");
    g.temperature = lab_arg_double(&a, "temperature");
    g.seed = lab_arg_int(&a, "seed");
    g.timeout = lab_arg_double(&a, "timeout");
    int max = (int)lab_arg_int(&a, "max-tokens"), vary = lab_arg_bool(&a, "vary-output");
    double disc = lab_arg_double(&a, "disconnect");
    const char *bad = !(g.temperature >= 0 && g.temperature <= 2) ? "temperature"
                    : !(disc >= 0 && disc <= 1) ? "disconnect"
                    : !(g.timeout > 0) ? "timeout" : NULL;
    if (bad) {
        fprintf(stderr, "mlsys-lab loadgen: --%s %s: must lie in %s\n", bad,
                lab_arg_str(&a, bad), !strcmp(bad, "temperature") ? "[0, 2]"
                : !strcmp(bad, "disconnect") ? "[0, 1] (a share of the requests)"
                : "(0, 86400] seconds");
        lab_args_free(&a);
        return 2;
    }
    g.req = mlsys_xcalloc((size_t)g.n, sizeof *g.req);
    mlsys_rng rng;
    mlsys_rng_seed(&rng, (uint64_t)g.seed);
    for (int i = 0; i < g.n; i++) {
        lg_req *q = &g.req[i];
        q->prompt = (int)(mlsys_rng_u64(&rng) % LG_NPROMPTS);
        int lo = max / 4 > 0 ? max / 4 : 1;
        q->max_tokens = vary ? lo + (int)(mlsys_rng_u64(&rng) % (uint64_t)(max - lo + 1)) : max;
        q->abandon = mlsys_rng_uniform(&rng) < disc;
    }
    pthread_mutex_init(&g.mu, NULL);
    printf("loadgen: %d requests, %d at a time, to http://%s:%d%s (max_tokens %d%s%s%s)\n",
           g.n, g.conc < g.n ? g.conc : g.n, g.url.host, g.url.port, g.path, max, vary ? " varied" : "",
           g.stream ? ", streamed" : "", g.ignore_eos ? ", ignore_eos" : "");
    fflush(stdout);
    double t0 = mlsys_now_s();
    g.deadline = t0 + g.timeout;
    int nt = g.conc < g.n ? g.conc : g.n;
    pthread_t *th = mlsys_xcalloc((size_t)nt, sizeof *th);
    int started = 0;
    for (int i = 0; i < nt; i++)
        started += pthread_create(&th[i], NULL, worker, &g) == 0;
    for (int i = 0; i < started; i++)
        pthread_join(th[i], NULL);
    double dur = mlsys_now_s() - t0;
    rc = report(&g, dur);
    free(th);
    free(g.req);
    pthread_mutex_destroy(&g.mu);
    lab_args_free(&a);
    return rc;
}
