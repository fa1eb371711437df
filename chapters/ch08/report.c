/* report.c - the end of chapter 8's run: one line per request in the order they finished,
 * with its own time to first token (TTFT), time per output token (TPOT) and end-to-end
 * latency, each measured from that request's arrival (the original printed "now minus
 * creation" after the run, which is the total run time for every request); then the
 * p50/p90/p99 of each and the throughput. Used by the real engine (a gated run's times are
 * the engine's own, without the waits at its gates) and the simulation. */
#include "ch08.h"

#include <stdlib.h>
#include <string.h>

const char *const ch08_prompts[CH08_NPROMPTS] = {
    "What is the capital of France?",
    "Explain quantum computing in simple terms",
    "Write a haiku about programming",
    "What is machine learning?",
    "Tell me a joke",
    "How does the internet work?",
    "What is the meaning of life?",
    "Describe a beautiful sunset",
};

static void pct_line(FILE *out, const char *name, double *v, int n)
{
    if (n == 0) {
        fprintf(out, "  %-24s n/a\n", name);
        return;
    }
    double p50 = mlsys_percentile(v, (size_t)n, 50), p90 = mlsys_percentile(v, (size_t)n, 90);
    double p99 = mlsys_percentile(v, (size_t)n, 99);
    fprintf(out, "  %-24s p50 %9.2f   p90 %9.2f   p99 %9.2f ms\n", name, p50 * 1e3, p90 * 1e3,
            p99 * 1e3);
}

void ch08_report(FILE *out, const ch08_req *r, const int *order, int n, double wall_s,
                 int simulated, double gate_wait_s)
{
    char rule[256];
    double *ttft = malloc((size_t)(n + 1) * sizeof(double));
    double *tpot = malloc((size_t)(n + 1) * sizeof(double));
    double *e2e = malloc((size_t)(n + 1) * sizeof(double));
    int nt = 0, np = 0, ne = 0;
    long tokens = 0;
    fprintf(out, "\n%s\nResults (in completion order%s)\n%s\n", common_rule(rule, sizeof rule,
            "=", 70), simulated ? ", virtual milliseconds" : gate_wait_s >= 0 ?
            ", the engine's own time: waits at the gates left out" : "", rule);
    fprintf(out, "  %4s %7s %7s %-7s %10s %10s %11s%s\n", "req", "prompt", "tokens", "finish",
            "TTFT ms", "TPOT ms", "latency ms", simulated ? "" : "  output");
    for (int k = 0; k < n; k++) {
        const ch08_req *q = &r[order[k]];
        double t1 = q->t_first - q->t_arrival, lat = q->t_finish - q->t_arrival;
        double per = q->n_out > 1 ? (q->t_finish - q->t_first) / (q->n_out - 1) : 0.0;
        tokens += q->n_out;
        if (q->n_out > 0)
            ttft[nt++] = t1;
        if (q->n_out > 1)
            tpot[np++] = per;
        e2e[ne++] = lat;
        char tp[16] = "-";
        if (q->n_out > 1)
            snprintf(tp, sizeof tp, "%.2f", per * 1e3);
        fprintf(out, "  %4d %7d %7d %-7s %10.2f %10s %11.2f%s%s%s\n", q->id, q->n_prompt,
                q->n_out, q->finish, t1 * 1e3, tp, lat * 1e3, simulated ? "" : "  \"",
                simulated ? "" : q->text, simulated ? "" : "\"");
    }
    fprintf(out, "\n%s\nSummary\n%s\n", rule, rule);
    fprintf(out, "  %-24s %d\n", "requests", n);
    fprintf(out, "  %-24s %ld (first token and EOS included)\n", "tokens generated", tokens);
    if (gate_wait_s >= 0)
        fprintf(out, "  %-24s %.3f ms (the engine's own; the %.1f s it waited at its gates "
                "for you left out)\n", "total time", wall_s * 1e3, gate_wait_s);
    else
        fprintf(out, "  %-24s %.3f ms%s\n", "total time", wall_s * 1e3,
                simulated ? " (virtual clock)" : "");
    fprintf(out, "  %-24s %.1f tokens/s\n", "throughput", wall_s > 0 ? tokens / wall_s : 0.0);
    pct_line(out, "time to first token", ttft, nt);
    pct_line(out, "time per output token", tpot, np);
    pct_line(out, "end-to-end latency", e2e, ne);
    fprintf(out, "  (the original printed \"now - creation\" after the run for every request: "
            "%.1f ms each, the whole run)\n", wall_s * 1e3);
    free(ttft);
    free(tpot);
    free(e2e);
}
