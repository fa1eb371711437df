/* loadgen.c - `mlsys-lab loadgen --url URL --concurrency C --requests N`: C client threads
 * send N completion requests (seeded prompts and lengths) to an OpenAI-compatible server and
 * time them: TTFT, TPOT, end-to-end latency (mean, p50, p90, p99) and tokens/s, in the shape
 * of vLLM's benchmark_serving; bounded in count and in time (--timeout). --disconnect P
 * makes a client walk away from a share of its requests mid-stream (the server must cancel). */
#include "cli.h"
#include "loadgen_http.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const lab_flag loadgen_flags[] = {
    {"url", 0, FLAG_STR, NULL, NULL, 0, 0, "the server: http://HOST:PORT (a /v1 path may "
     "follow)"},
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
    {"api-key", 0, FLAG_STR, NULL, NULL, 0, 0, "sent as 'Authorization: Bearer KEY'"},
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

typedef struct lg_req {
    int max_tokens, prompt, abandon;
    double t0, t_first, t_end;
    int status, ok, aborted, n_prompt, n_out, got_first;
    double engine_ms, server_ms;
    char err[512];
    char tail[256];               /* the stream's unparsed end */
    size_t tl;
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

static int json_int(const char *s, const char *key)
{
    const char *p = strstr(s, key);
    return p ? atoi(p + strlen(key)) : -1;
}

/* One server-sent event's JSON: the first non-empty text, the usage. */
static void sse_event(lg_req *q, const char *ev)
{
    const char *t = strstr(ev, "\"text\":\"");
    if (!t)
        t = strstr(ev, "\"content\":\"");
    if (t && !q->got_first) {
        t = strchr(t, ':') + 2;
        if (*t != '"') {
            q->got_first = 1;
            q->t_first = mlsys_now_s();
        }
    }
    int pt = json_int(ev, "\"prompt_tokens\":"), ct = json_int(ev, "\"completion_tokens\":");
    if (pt >= 0)
        q->n_prompt = pt;
    if (ct >= 0)
        q->n_out = ct;
}

static int on_body(void *u, const char *data, size_t n)
{
    lg_req *q = u;
    size_t off = 0;
    if (!data)
        return 0;
    while (off < n) {             /* events end with a blank line; keep the unfinished end */
        size_t k = n - off < sizeof q->tail - 1 - q->tl ? n - off : sizeof q->tail - 1 - q->tl;
        memcpy(q->tail + q->tl, data + off, k);
        q->tl += k;
        off += k;
        q->tail[q->tl] = 0;
        char *e;
        while ((e = strstr(q->tail, "\n\n"))) {
            *e = 0;
            if (!strncmp(q->tail, "data: ", 6) && strcmp(q->tail + 6, "[DONE]"))
                sse_event(q, q->tail + 6);
            size_t used = (size_t)(e - q->tail) + 2;
            memmove(q->tail, q->tail + used, q->tl - used + 1);
            q->tl -= used;
        }
        if (q->tl == sizeof q->tail - 1) {      /* an event longer than the buffer: its start
                                                    was seen; keep the last bytes */
            sse_event(q, q->tail);
            memmove(q->tail, q->tail + q->tl / 2, q->tl - q->tl / 2 + 1);
            q->tl -= q->tl / 2;
        }
        if (q->abandon && q->got_first)
            return 1;
    }
    return 0;
}

/* The whole body of a non-streamed response is gathered in tail's place: only the usage
 * and the status matter, so the last 256 bytes (where usage sits) are kept. */
static int on_body_plain(void *u, const char *data, size_t n)
{
    lg_req *q = u;
    if (!data) {                  /* sent: a client that walks away does it now, a few
                                     milliseconds in (its request is then running) */
        if (q->abandon)
            usleep((useconds_t)(1000 + (q->prompt * 997) % 9000));
        return q->abandon;
    }
    for (size_t i = 0; i < n; i++) {
        if (q->tl == sizeof q->tail - 1) {
            memmove(q->tail, q->tail + 128, q->tl - 128);
            q->tl -= 128;
        }
        q->tail[q->tl++] = data[i];
    }
    q->tail[q->tl] = 0;
    return 0;
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
    q->t0 = mlsys_now_s();
    double left = g->deadline - q->t0;
    int rc = lg_post(&g->url, g->path, g->key, body, left > 1 ? left : 1,
                     g->stream ? on_body : on_body_plain, q, &r);
    q->t_end = mlsys_now_s();
    q->status = r.status;
    q->aborted = r.aborted;
    q->engine_ms = r.engine_ms;
    q->server_ms = r.server_ms;
    if (rc) {
        snprintf(q->err, sizeof q->err, "%s", r.err);
        return;
    }
    if (!g->stream) {
        q->n_prompt = json_int(q->tail, "\"prompt_tokens\":");
        q->n_out = json_int(q->tail, "\"completion_tokens\":");
        q->t_first = q->t_end;
        q->got_first = 1;
    }
    q->ok = r.status == 200 && !r.aborted && q->n_out >= 0;
    if (r.status != 200)
        snprintf(q->err, sizeof q->err, "HTTP %d: %.100s", r.status, q->tail);
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

static int report(lg_run *g, double dur)
{
    int ok = 0, failed = 0, abandoned = 0, skipped = 0, n_t = 0, n_o = 0, n_x = 0;
    long in = 0, out = 0;
    double *ttft = calloc((size_t)g->n + 1, sizeof(double));
    double *tpot = calloc((size_t)g->n + 1, sizeof(double));
    double *e2e = calloc((size_t)g->n + 1, sizeof(double));
    double *over = calloc((size_t)g->n + 1, sizeof(double));
    double *cover = calloc((size_t)g->n + 1, sizeof(double));
    const char *first_err = NULL;
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
            if (!first_err)
                first_err = q->err;
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
    if (first_err)
        fprintf(stderr, "mlsys-lab loadgen: %d requests failed; the first: %s\n", failed,
                first_err);
    free(ttft);
    free(tpot);
    free(e2e);
    free(over);
    free(cover);
    return failed || ok == 0 ? 1 : 0;
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
    if (!url || lg_url_parse(url, &g.url)) {
        fprintf(stderr, "mlsys-lab loadgen: --url %s: expected http://HOST:PORT[/v1]\n",
                url ? url : "(missing)");
        lab_args_free(&a);
        return 2;
    }
    g.chat = lab_arg_bool(&a, "chat");
    snprintf(g.path, sizeof g.path, "%s%s", strstr(g.url.path, "/v1") ? g.url.path : "/v1",
             g.chat ? "/chat/completions" : "/completions");
    g.key = lab_arg_str(&a, "api-key");
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
    if (!(g.temperature >= 0 && g.temperature <= 2) || !(disc >= 0 && disc <= 1)) {
        fprintf(stderr, "mlsys-lab loadgen: --temperature %g must lie in [0, 2], --disconnect "
                "%g in [0, 1]\n", g.temperature, disc);
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
