/* metrics.c - GET /metrics in Prometheus's text format (version 0.0.4, names as
 * `promtool check metrics` wants them: counters end in _total, nothing else does): requests
 * running and waiting, KV blocks used and cached, the prefix-cache hit rate, TTFT and TPOT
 * histograms, tokens in and out, speculative decoding's rounds, HTTP responses by status and
 * the server's time beyond the engine (a summary): the engine's figures (every request runs
 * there). */
#include "srv_internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct buf {
    char *p;
    size_t n, cap;
} buf;

static void out(buf *b, const char *fmt, ...)
{
    va_list ap;
    for (;;) {
        va_start(ap, fmt);
        int k = vsnprintf(b->p + b->n, b->cap - b->n, fmt, ap);
        va_end(ap);
        if (k >= 0 && (size_t)k < b->cap - b->n) {
            b->n += (size_t)k;
            return;
        }
        size_t cap = b->cap * 2 + (size_t)(k > 0 ? k : 256);
        char *t = mlsys_xmalloc(cap);
        memcpy(t, b->p, b->n + 1);
        free(b->p);
        b->p = t;
        b->cap = cap;
    }
}

static void metric(buf *b, const char *name, const char *type, const char *help, double v)
{
    out(b, "# HELP %s %s\n# TYPE %s %s\n%s %.17g\n", name, help, name, type, name, v);
}

static void histogram(buf *b, const char *name, const char *help, const long *h, double sum,
                      long count)
{
    out(b, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    long cum = 0;
    for (int i = 0; i < LLM_ENGINE_HIST_N; i++) {
        cum += h[i];
        if (i < LLM_ENGINE_HIST_N - 1)
            out(b, "%s_bucket{le=\"%g\"} %ld\n", name, llm_engine_hist_bounds[i], cum);
        else
            out(b, "%s_bucket{le=\"+Inf\"} %ld\n", name, cum);
    }
    out(b, "%s_sum %.17g\n%s_count %ld\n", name, sum, name, count);
}

char *srv_metrics_text(const llm_engine_metrics *m, const srv_http_counters *h, int draining)
{
    buf b = {mlsys_xmalloc(4096), 0, 4096};
    b.p[0] = 0;
    metric(&b, "mlsys_num_requests_running", "gauge",
           "Sequences being decoded in the engine's batch.", m->running);
    metric(&b, "mlsys_num_requests_waiting", "gauge",
           "Sequences waiting for a seat in the batch.", m->waiting);
    metric(&b, "mlsys_kv_blocks_capacity", "gauge", "KV-cache blocks in the pool.",
           m->kv_blocks);
    metric(&b, "mlsys_kv_blocks_used", "gauge",
           "KV-cache blocks referenced by a running request.", m->kv_used);
    metric(&b, "mlsys_kv_blocks_cached", "gauge",
           "Unreferenced KV-cache blocks kept for the prefix cache.", m->kv_cached);
    metric(&b, "mlsys_kv_blocks_free", "gauge", "KV-cache blocks holding nothing.", m->kv_free);
    metric(&b, "mlsys_kv_block_size_tokens", "gauge", "Tokens per KV-cache block.",
           m->block_size);
    metric(&b, "mlsys_prefix_cache_hit_rate", "gauge",
           "Prompt tokens found in the prefix cache over prompt tokens looked up.",
           m->prefix_hit_rate);
    metric(&b, "mlsys_prefix_cache_queries_total", "counter",
           "Prompt tokens looked up in the prefix cache.", (double)m->prefix_query_tokens);
    metric(&b, "mlsys_prefix_cache_hits_total", "counter",
           "Prompt tokens found in the prefix cache.", (double)m->prefix_hit_tokens);
    metric(&b, "mlsys_prompt_tokens_total", "counter", "Prompt tokens of finished requests.",
           (double)m->prompt_tokens);
    metric(&b, "mlsys_generation_tokens_total", "counter", "Tokens generated.",
           (double)m->generated_tokens);
    metric(&b, "mlsys_preemptions_total", "counter",
           "Requests preempted (blocks taken back, recomputed).", (double)m->preemptions);
    metric(&b, "mlsys_requests_cancelled_total", "counter",
           "Requests cancelled in the engine (client gone, shutdown).", (double)m->cancelled);
    metric(&b, "mlsys_engine_steps_total", "counter", "Engine steps (forwards).",
           (double)m->steps);
    metric(&b, "mlsys_spec_rounds_total", "counter",
           "Speculative rounds (a sequence's drafts verified in a step's forward).",
           (double)m->spec_rounds);
    metric(&b, "mlsys_spec_draft_tokens_total", "counter", "Speculative tokens drafted.",
           (double)m->spec_drafted);
    metric(&b, "mlsys_spec_accepted_tokens_total", "counter", "Speculative tokens kept.",
           (double)m->spec_accepted);
    histogram(&b, "mlsys_time_to_first_token_seconds", "Time to first token (engine clock).",
              m->ttft_hist, m->ttft_sum, m->ttft_count);
    histogram(&b, "mlsys_time_per_output_token_seconds",
              "Time per output token after the first.", m->tpot_hist, m->tpot_sum,
              m->tpot_count);
    static const char *cls[6] = {"2xx", "400", "401", "404", "413", "other"};
    out(&b, "# HELP mlsys_http_responses_total HTTP responses by status.\n"
        "# TYPE mlsys_http_responses_total counter\n");
    for (int i = 0; i < 6; i++)
        out(&b, "mlsys_http_responses_total{code=\"%s\"} %ld\n", cls[i], h->requests[i]);
    metric(&b, "mlsys_http_client_disconnects_total", "counter",
           "Clients gone before their request finished (cancelled in the engine).",
           (double)h->disconnects);
    metric(&b, "mlsys_http_slow_clients_cut_total", "counter",
           "Connections closed because their request was not whole within the request "
           "timeout.", (double)h->cut_slow);
    /* a summary without quantiles: its sum and count, as Prometheus's clients write one */
    out(&b, "# HELP mlsys_http_overhead_seconds Server time beyond the engine of non-streamed "
        "requests.\n# TYPE mlsys_http_overhead_seconds summary\n"
        "mlsys_http_overhead_seconds_sum %.17g\nmlsys_http_overhead_seconds_count %ld\n",
        h->overhead_sum, h->overhead_count);
    metric(&b, "mlsys_server_draining", "gauge", "1 after SIGINT/SIGTERM: new requests get "
           "503.", draining);
    struct timespec cpu;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &cpu);
    metric(&b, "process_cpu_seconds_total", "counter",
           "User and system CPU time of the server process, every thread's.",
           (double)cpu.tv_sec + 1e-9 * (double)cpu.tv_nsec);
    return b.p;
}
