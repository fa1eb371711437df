/* serve_bench.c - the serving engine's figures, each beside its reference in the same run
 * (tests/bench/serve.sh prints them; nothing is asserted):
 *   paged     decode tokens/s at batch 16 through block tables against the contiguous cache
 *             (a bare batched decode loop on each), and the engine's own decode against it
 *   prefix    32 requests sharing a system prompt of half the context: prompt rows computed
 *             on the shared part with and without the prefix cache, TTFT p50 of each
 *   batching  16 requests with seeded output lengths and staggered arrivals, continuous
 *             against static batching: TTFT p50/p99, throughput; and the cost of one decode
 *             step at batch 1, 4 and 16 (why idle slots cost little on one CPU core)
 * Usage: serve_bench MODEL [REPEAT] [paged|prefix|batching]. Throughputs are given in wall
 * time and per CPU second; latencies on this process's CPU clock (the fair measure on a
 * shared machine; run it with OPENBLAS_NUM_THREADS=1). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "../../core/llm/engine.h"
#include "../../core/nn/nn.h"

static llm_config C;
static llm_weights W;

static double cpu_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* The engines' clock in the latency figures: this process's CPU seconds, plus the idle gaps
 * the batching benchmark skips (waiting for an arrival costs no CPU): on a shared machine
 * wall time counts other people's jobs, CPU time only this one's work. */
static double g_idle;
static double cpu_clock(void *u)
{
    (void)u;
    return cpu_s() + g_idle;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double pct(double *v, int n, double p)
{
    if (n == 0)
        return 0.0;
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    double pos = p / 100.0 * (n - 1);
    int lo = (int)pos;
    return lo >= n - 1 ? v[n - 1] : v[lo] + (pos - lo) * (v[lo + 1] - v[lo]);
}

static void prompt(int *p, int n, int salt)
{
    p[0] = LLM_TOK_BOS;
    for (int i = 1; i < n; i++)
        p[i] = 3 + (i * 31 + salt * 17) % 400;
}

/* ---- paged against contiguous ---- */

/* The bare batched decode loop the engine is measured against (no scheduler, no requests):
 * every prompt in one forward, then one forward per step over all B sequences, greedy, on
 * the cache kv (contiguous or paged). Decode tokens/s in wall and CPU time. */
static void gen_once(llm_kv *kv, int B, int plen, int steps, double *wall, double *cpu)
{
    char err[256];
    llm_fwd e;
    llm_fwd_init(&e, &C, &W, 256, err, sizeof err);
    int V = C.vocab_size, n = B * plen;
    int *rseq = malloc(sizeof(int) * 3 * (size_t)n), *rpos = rseq + n, *rtok = rpos + n;
    unsigned char *want = calloc((size_t)n, 1);
    float *logits = malloc(sizeof(float) * (size_t)B * V);
    int *cur = malloc(sizeof(int) * (size_t)B);
    for (int b = 0; b < B; b++) {
        kv->ops->reserve(kv, b, plen);
        prompt(rtok + b * plen, plen, b);
        for (int t = 0; t < plen; t++)
            rseq[b * plen + t] = b, rpos[b * plen + t] = t, want[b * plen + t] = t == plen - 1;
    }
    if (llm_forward(&e, kv, n, rseq, rpos, rtok, want, logits, err, sizeof err))
        fprintf(stderr, "generate: %s\n", err);
    double t0 = mlsys_now_s(), c0 = cpu_s();
    for (int step = 0; step < steps; step++) {
        for (int b = 0; b < B; b++) {
            cur[b] = llm_argmax(logits + (size_t)b * V, V);
            rseq[b] = b, rpos[b] = plen + step;
            kv->ops->reserve(kv, b, plen + step + 1);
        }
        if (llm_forward(&e, kv, B, rseq, rpos, cur, NULL, logits, err, sizeof err))
            fprintf(stderr, "generate: %s\n", err);
    }
    *wall = (double)B * steps / (mlsys_now_s() - t0);
    *cpu = (double)B * steps / (cpu_s() - c0);
    for (int b = 0; b < B; b++)
        kv->ops->release(kv, b);
    free(rseq);
    free(want);
    free(logits);
    free(cur);
    llm_fwd_fini(&e);
}

/* The engine decoding B requests together (its scheduling and bookkeeping included). */
static void engine_once(int B, int plen, int steps, double *wall, double *cpu)
{
    char err[256];
    llm_engine_opts o = {.max_num_seqs = B, .max_num_batched_tokens = 1024};
    llm_engine *s = llm_engine_create(&C, &W, &o, err, sizeof err);
    int p[128];
    for (int b = 0; b < B; b++) {
        prompt(p, plen, b);
        llm_request r = {.prompt = p, .n_prompt = plen, .max_tokens = steps + 1,
                         .ignore_eos = 1};
        llm_engine_submit(s, &r, err, sizeof err);
    }
    llm_engine_step(s, NULL);              /* the prefill step (and the first tokens) */
    double t0 = mlsys_now_s(), c0 = cpu_s();
    llm_engine_run(s);
    double dt = mlsys_now_s() - t0, dc = cpu_s() - c0;
    *wall = B * steps / dt;
    *cpu = B * steps / dc;
    llm_engine_free(s);
}

static double med(double *v, int n)
{
    return pct(v, n, 50);
}

static void bench_paged(int repeat)
{
    char err[256];
    int B = 16, plen = 16, steps = 96;
    double cw[16], cc[16], pw[3][16], pc[3][16], ew[16], ec[16];
    int bss[3] = {1, 16, 64};
    for (int r = 0; r < repeat; r++) {
        llm_kv kv;
        llm_kv_init_contiguous(&kv, &C, B, 0, err, sizeof err);
        gen_once(&kv, B, plen, steps, &cw[r], &cc[r]);
        llm_kv_free(&kv);
        for (int k = 0; k < 3; k++) {
            llm_paged_opts po = {.block_size = bss[k], .n_seqs = B};
            llm_kv_init_paged(&kv, &C, &po, err, sizeof err);
            gen_once(&kv, B, plen, steps, &pw[k][r], &pc[k][r]);
            llm_kv_free(&kv);
        }
        engine_once(B, plen, steps, &ew[r], &ec[r]);
    }
    double c_w = med(cw, repeat), c_c = med(cc, repeat);
    printf("decode at batch 16, %d new tokens after %d-token prompts, greedy, median of %d:\n",
           steps, plen, repeat);
    printf("  %-34s %9.0f tokens/s wall %9.0f per CPU s\n", "contiguous cache (bare loop)",
           c_w, c_c);
    for (int k = 0; k < 3; k++) {
        double w = med(pw[k], repeat), c = med(pc[k], repeat);
        char name[64];
        snprintf(name, sizeof name, "paged, block size %d", bss[k]);
        printf("  %-34s %9.0f tokens/s wall %9.0f per CPU s   %.2fx / %.2fx of contiguous%s\n",
               name, w, c, w / c_w, c / c_c, bss[k] == 16 ? " (goal >= 0.9x)" : "");
    }
    double e_w = med(ew, repeat), e_c = med(ec, repeat);
    printf("  %-34s %9.0f tokens/s wall %9.0f per CPU s   %.2fx / %.2fx of contiguous\n",
           "the serving engine (paged 16)", e_w, e_c, e_w / c_w, e_c / c_c);
}

/* ---- prefix cache ---- */

typedef struct ttfts {
    double v[64];
    int n;
} ttfts;

static void on_ttft(void *u, const llm_engine_event *ev)
{
    ttfts *t = u;
    if (ev->finish != LLM_FINISH_NONE && t->n < 64)
        t->v[t->n++] = ev->st->ttft;
}

static void prefix_once(int no_prefix, int N, int S, int U, ttfts *t, llm_engine_metrics *m,
                        double *wall)
{
    char err[256];
    llm_engine_opts o = {.max_num_seqs = 16, .max_num_batched_tokens = 512,
                        .no_prefix_cache = no_prefix, .clock = cpu_clock};
    llm_engine *s = llm_engine_create(&C, &W, &o, err, sizeof err);
    int p[128];
    t->n = 0;
    prompt(p, S, 999);                       /* the shared system prompt */
    double t0 = cpu_clock(NULL);
    for (int i = 0; i < N; i++) {
        for (int k = 0; k < U; k++)
            p[S + k] = 3 + (i * 7 + k * 13) % 400;
        llm_request r = {.prompt = p, .n_prompt = S + U, .max_tokens = 16, .ignore_eos = 1,
                         .on_event = on_ttft, .u = t};
        llm_engine_submit(s, &r, err, sizeof err);
    }
    llm_engine_run(s);
    *wall = cpu_clock(NULL) - t0;
    llm_engine_metrics_get(s, m);
    llm_engine_free(s);
}

static void bench_prefix(int repeat)
{
    int N = 32, S = C.seq_len / 2, U = 16;
    double p50_on[16], p50_off[16], w_on[16], w_off[16];
    llm_engine_metrics on, off;
    for (int r = 0; r < repeat; r++) {
        ttfts t;
        prefix_once(0, N, S, U, &t, &on, &w_on[r]);
        p50_on[r] = pct(t.v, t.n, 50);
        prefix_once(1, N, S, U, &t, &off, &w_off[r]);
        p50_off[r] = pct(t.v, t.n, 50);
    }
    long shared_off = (long)N * S, shared_on = shared_off - on.prefix_hit_tokens;
    printf("prefix cache: %d requests at once, a shared system prompt of %d tokens (half the "
           "context)\n+ %d own tokens each, 16 generated, 16 running at once, median of %d:\n",
           N, S, U, repeat);
    printf("  prompt rows computed on the shared part: %ld without the cache, %ld with it: "
           "cut %.1f%% (goal >= 90%%)\n", shared_off, shared_on,
           100.0 * (double)(shared_off - shared_on) / (double)shared_off);
    printf("  prompt rows in all: %ld without, %ld with; hit rate %.1f%% of prompt tokens\n",
           off.prefill_tokens, on.prefill_tokens, 100.0 * on.prefix_hit_rate);
    printf("  TTFT p50 (CPU clock): %.2f ms without the cache, %.2f ms with it (%.2fx); whole "
           "burst %.1f ms and %.1f ms\n", med(p50_off, repeat) * 1e3, med(p50_on, repeat) * 1e3,
           med(p50_off, repeat) / med(p50_on, repeat), med(w_off, repeat) * 1e3,
           med(w_on, repeat) * 1e3);
}

/* ---- continuous against static batching ---- */

typedef struct wl {
    int n;
    int out_len[16];
    double arrive[16];        /* seconds after the start */
} wl;

typedef struct bres {
    double ttft[16];
    int n;
    long tokens;
} bres;

static void on_b(void *u, const llm_engine_event *ev)
{
    bres *b = u;
    if (ev->token >= 0)
        b->tokens++;
    if (ev->finish != LLM_FINISH_NONE)
        b->ttft[b->n++] = ev->st->ttft;
}

/* Arrivals on the CPU clock: when nothing runs, the clock jumps to the next arrival. */
static void batching_once(const wl *w, llm_admit_fn admit, bres *b, double *span)
{
    char err[256];
    llm_engine_opts o = {.max_num_seqs = 16, .max_num_batched_tokens = 512, .admit = admit,
                        .clock = cpu_clock};
    llm_engine *s = llm_engine_create(&C, &W, &o, err, sizeof err);
    memset(b, 0, sizeof *b);
    int p[128];
    double t0 = cpu_clock(NULL);
    int next = 0;
    while (next < w->n || llm_engine_has_work(s)) {
        double now = cpu_clock(NULL) - t0;
        while (next < w->n && w->arrive[next] <= now) {
            prompt(p, 12, next);
            llm_request r = {.prompt = p, .n_prompt = 12, .max_tokens = w->out_len[next],
                             .ignore_eos = 1, .on_event = on_b, .u = b};
            llm_engine_submit(s, &r, err, sizeof err);
            next++;
        }
        if (llm_engine_step(s, NULL) == 0 && next < w->n) {
            double wait = w->arrive[next] - (cpu_clock(NULL) - t0);
            if (wait > 0)
                g_idle += wait;
        }
    }
    *span = cpu_clock(NULL) - t0;
    llm_engine_free(s);
}

/* One decode step's time at batch B (median over steps of a run). */
static double step_cost(int B)
{
    char err[256];
    llm_engine_opts o = {.max_num_seqs = B, .max_num_batched_tokens = 1024};
    llm_engine *s = llm_engine_create(&C, &W, &o, err, sizeof err);
    int p[16];
    for (int b = 0; b < B; b++) {
        prompt(p, 12, b);
        llm_request r = {.prompt = p, .n_prompt = 12, .max_tokens = 40, .ignore_eos = 1};
        llm_engine_submit(s, &r, err, sizeof err);
    }
    llm_engine_step(s, NULL);
    double v[64];
    int n = 0;
    double c0 = cpu_s();
    while (n < 32 && llm_engine_step(s, NULL) > 0) {
        double c1 = cpu_s();
        v[n++] = c1 - c0;
        c0 = c1;
    }
    llm_engine_free(s);
    return pct(v, n, 50);
}

static void bench_batching(int repeat)
{
    double s1 = step_cost(1), s4 = step_cost(4), s16 = step_cost(16);
    printf("one decode step (CPU time, median): batch 1 %.3f ms, batch 4 %.3f ms (%.1fx), "
           "batch 16 %.3f ms (%.1fx)\n", s1 * 1e3, s4 * 1e3, s4 / s1, s16 * 1e3, s16 / s1);
    /* the workload: output lengths 8..72, arrivals on average every 3 batch-4 steps */
    wl w = {.n = 16};
    mlsys_rng r;
    mlsys_rng_seed(&r, 7);
    double t = 0.0, gap = 3.0 * s4;
    for (int i = 0; i < 16; i++) {
        w.out_len[i] = 8 + (int)(mlsys_rng_u64(&r) % 65);
        w.arrive[i] = t;
        t += -log(1.0 - mlsys_rng_uniform(&r)) * gap;
    }
    double c99[16], s99[16], c50[16], s50[16], cspan[16], sspan[16];
    long tok = 0;
    for (int k = 0; k < repeat; k++) {
        bres b;
        batching_once(&w, llm_admit_continuous, &b, &cspan[k]);
        c99[k] = pct(b.ttft, b.n, 99);
        c50[k] = pct(b.ttft, b.n, 50);
        tok = b.tokens;
        batching_once(&w, llm_admit_static, &b, &sspan[k]);
        s99[k] = pct(b.ttft, b.n, 99);
        s50[k] = pct(b.ttft, b.n, 50);
    }
    printf("continuous against static batching: 16 requests, %ld tokens (8..72 each), "
           "arrivals over %.1f ms,\ntimes on this process's CPU clock (idle gaps skipped), "
           "median of %d:\n", tok, w.arrive[15] * 1e3, repeat);
    printf("  %-11s TTFT p50 %8.2f ms  p99 %8.2f ms   %7.0f tokens/s, all done in %.1f ms\n",
           "continuous", med(c50, repeat) * 1e3, med(c99, repeat) * 1e3,
           tok / med(cspan, repeat), med(cspan, repeat) * 1e3);
    printf("  %-11s TTFT p50 %8.2f ms  p99 %8.2f ms   %7.0f tokens/s, all done in %.1f ms\n",
           "static", med(s50, repeat) * 1e3, med(s99, repeat) * 1e3, tok / med(sspan, repeat),
           med(sspan, repeat) * 1e3);
    printf("  TTFT p99 continuous / static: %.2f (goal <= 0.5)\n",
           med(c99, repeat) / med(s99, repeat));
}

int main(int argc, char **argv)
{
    char err[256];
    if (argc < 2) {
        fprintf(stderr, "usage: serve_bench MODEL [REPEAT] [paged|prefix|batching]\n");
        return 2;
    }
    int repeat = argc > 2 ? atoi(argv[2]) : 3;
    if (repeat < 1 || repeat > 16)
        repeat = 3;
    const char *only = argc > 3 ? argv[3] : NULL;
    if (llm_checkpoint_read(argv[1], &C, &W, err, sizeof err)) {
        fprintf(stderr, "serve_bench: %s\n", err);
        return 1;
    }
    printf("model: %s (dim %d, %d layers, context %d), GEMM %s\n", argv[1], C.dim, C.n_layers,
           C.seq_len, nn_gemm_kernel_name(nn_get_gemm_kernel()));
    if (!only || !strcmp(only, "paged"))
        bench_paged(repeat);
    if (!only || !strcmp(only, "prefix"))
        bench_prefix(repeat);
    if (!only || !strcmp(only, "batching"))
        bench_batching(repeat);
    llm_weights_free(&W);
    return 0;
}
