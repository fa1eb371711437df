/* generate.c - `mlsys-lab generate`: the lab's model writes text, token by token as it is
 * drawn (greedy, temperature, top-k, top-p, seeded), on the generation engine (submit the
 * sequences, step until done: one forward per step for the whole batch, the paged KV cache)
 * or without a cache (the reference), in named steps (options, load, setup, decode,
 * report). Bad input (files, flags, a prompt longer than the context) costs one line and
 * exit 2. Also the loading both it and `model` (model.c) use. */
#include "generate.h"
#include "cli.h"
#include "../../core/llm/engine.h"
#include "../../core/nn/nn.h"

#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

static const lab_flag generate_flags[] = {
    {"model", 0, FLAG_STR, GEN_DEFAULT_MODEL, NULL, 0, 0, "llama2.c checkpoint"},
    {"tokenizer", 0, FLAG_STR, GEN_DEFAULT_TOKENIZER, NULL, 0, 0, "llama2.c tokenizer.bin"},
    {"prompt", 0, FLAG_STR, NULL, NULL, 0, 0, "text to continue (default: start a document)"},
    {"steps", 'n', FLAG_INT, "256", NULL, 0, LLM_MAX_SEQ,
     "new tokens per sequence (fewer when the context ends)"},
    {"temperature", 0, FLAG_DOUBLE, "1.0", NULL, 0, FLAG_NO_MAX, "0 is greedy"},
    {"top-k", 0, FLAG_INT, "0", NULL, 0, LLM_MAX_VOCAB, "keep the K likeliest (0: all)"},
    {"top-p", 0, FLAG_DOUBLE, "0.9", NULL, 0, 1, "nucleus: the likeliest tokens up to P"},
    {"seed", 0, FLAG_INT, "42", NULL, 0, LONG_MAX, "sequence b draws with seed S+b"},
    {"batch", 0, FLAG_INT, "1", NULL, 1, 4096,
     "sequences decoded together, one forward per step"},
    {"no-cache", 0, FLAG_BOOL, NULL, NULL, 0, 0,
     "recompute the whole prefix every step (the reference path)"},
    {"ignore-eos", 0, FLAG_BOOL, NULL, NULL, 0, 0,
     "do not stop at the end of a document (benchmarks)"},
    {NULL, 0, 0, NULL, NULL, 0, 0, NULL}
};

const lab_command generate_command = {
    .name = "generate",
    .args = "",
    .summary = "Text from the lab's model, streamed token by token (one sequence or a batch).",
    .flags = generate_flags,
};

/* Peak resident memory of this process (VmHWM), in KiB; -1 if unknown. */
static long peak_rss_kib(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kib = -1;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "VmHWM:", 6))
            kib = strtol(line + 6, NULL, 10);
    if (f)
        fclose(f);
    if (kib < 0) {
        struct rusage ru;
        if (getrusage(RUSAGE_SELF, &ru) == 0)
            kib = ru.ru_maxrss;
    }
    return kib;
}

/* The model and a tokenizer whose vocabulary is the model's. 0, or 2 with the reason
 * printed (one line). */
int gen_load_pair(const char *cmd, const char *mpath, const char *tpath, llm_config *c,
                  llm_weights *w, llm_tokenizer *t)
{
    char err[512];
    memset(w, 0, sizeof *w);
    memset(t, 0, sizeof *t);
    if (llm_model_read(mpath, tpath, c, w, t, err, sizeof err)) {
        fprintf(stderr, "mlsys-lab %s: %s\n", cmd, err);
        return 2;
    }
    return 0;
}

/* ---- generate ---- */

/* Ctrl-C while text streams: the line written so far is ended, then exit 130 (the status
 * every command gives for Ctrl-C). Output is written with SIGINT blocked and flushed, so the
 * handler (always on the main thread) never lands inside a half-written buffer and may write
 * the newline itself. */
static volatile sig_atomic_t g_mid_line;
static pid_t g_main_tid;

static void on_interrupt(int sig)
{
    /* BLAS threads do not block the signal: one that catches it hands it to the main
     * thread, where it waits while a write is in progress */
    if (syscall(SYS_gettid) != g_main_tid) {
        syscall(SYS_tgkill, getpid(), g_main_tid, sig);
        return;
    }
    if (g_mid_line) {
        ssize_t w = write(STDOUT_FILENO, "\n", 1);
        (void)w;
    }
    _exit(sig == SIGINT ? 130 : 128 + sig);
}

static void out_begin(sigset_t *old)
{
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    sigprocmask(SIG_BLOCK, &set, old);
}

static void out_end(const char *last, int len, sigset_t *old)
{
    fflush(stdout);
    if (len > 0)
        g_mid_line = last[len - 1] != '\n';
    sigprocmask(SIG_SETMASK, old, NULL);
}

typedef struct gen_stream {
    const llm_tokenizer *t;
    int B;
} gen_stream;

/* With one sequence, each token is written the moment it is drawn. */
static void stream_token(void *u, int seq, int prev, int tok)
{
    gen_stream *s = u;
    int len;
    const char *p = llm_bpe_token_bytes(s->t, prev, tok, &len);
    if (s->B == 1 && seq == 0 && p && len > 0) {
        sigset_t old;
        out_begin(&old);
        fwrite(p, 1, (size_t)len, stdout);
        out_end(p, len, &old);
    }
}

/* A token sequence written as run.c shows it (a leading space after BOS dropped). */
static void print_tokens(const llm_tokenizer *t, int prev, const int *ids, int n)
{
    sigset_t old;
    out_begin(&old);
    for (int i = 0; i < n; i++) {
        int len;
        const char *p = llm_bpe_token_bytes(t, prev, ids[i], &len);
        if (p && len > 0) {
            fwrite(p, 1, (size_t)len, stdout);
            g_mid_line = p[len - 1] != '\n';
        }
        prev = ids[i];
    }
    out_end(NULL, 0, &old);
}

static void print_newline(void)
{
    sigset_t old;
    out_begin(&old);
    fputc('\n', stdout);
    out_end("\n", 1, &old);
}

/* ---- the command, step by step ---- */

/* One run of the command: its options, the model, the decoding state. */
typedef struct gen_run {
    const char *mpath, *tpath, *prompt;
    long steps, top_k, seed;
    float temperature, top_p;
    int B, no_cache, ignore_eos;
    char mfound[PATH_MAX + 64], tfound[PATH_MAX + 64];
    llm_config c;
    llm_weights w;
    llm_tokenizer t;
    int loaded;
    int *pids, np;              /* the prompt's ids, BOS first */
    long room;                  /* new tokens the context leaves */
    llm_engine *eng;            /* the generation engine (with the cache) */
    uint64_t kv_bytes;          /* its KV pool */
    llm_sampler *smp;           /* [B] the reference's samplers (--no-cache) */
    int **out, *n_out;          /* [B] the new tokens of each sequence */
    const int **prompts;
    int *n_prompt;
    llm_gen_stats st;
} gen_run;

/* The flags into g. -1 to go on, else the exit status (0 after --help, 2). */
static int gen_options(gen_run *g, int argc, char **argv)
{
    lab_args a;
    int rc = lab_command_args(&generate_command, argc, argv, &a);
    if (rc >= 0)
        return rc;
    g->mpath = lab_arg_text(&a, "model");
    g->tpath = lab_arg_text(&a, "tokenizer");
    g->prompt = lab_arg_given(&a, "prompt") ? lab_arg_text(&a, "prompt") : "";
    g->steps = lab_arg_int(&a, "steps");
    g->top_k = lab_arg_int(&a, "top-k");
    g->seed = lab_arg_int(&a, "seed");
    g->B = (int)lab_arg_int(&a, "batch");
    g->temperature = (float)lab_arg_double(&a, "temperature");
    g->top_p = (float)lab_arg_double(&a, "top-p");
    g->no_cache = lab_arg_bool(&a, "no-cache");
    g->ignore_eos = lab_arg_bool(&a, "ignore-eos");
    lab_args_free(&a);
    return -1;
}

/* The model and its tokenizer (found from any folder), the prompt's ids, and whether the
 * context holds them. 0, or 2 after one line. */
static int gen_load(gen_run *g)
{
    const char *mpath = lab_asset_path(g->mpath, g->mfound, sizeof g->mfound);
    const char *tpath = lab_asset_path(g->tpath, g->tfound, sizeof g->tfound);
    int rc = gen_load_pair("generate", mpath, tpath, &g->c, &g->w, &g->t);
    if (rc)
        return rc;
    g->loaded = 1;
    size_t plen = strlen(g->prompt);
    g->pids = mlsys_xmalloc((plen + 2) * sizeof(int));
    g->np = (int)llm_bpe_encode_prompt(&g->t, g->prompt, plen, 1, g->pids);
    if (g->np > g->c.seq_len) {
        fprintf(stderr, "mlsys-lab generate: the prompt is %d tokens (BOS included); the model's "
                "context is %d\n", g->np, g->c.seq_len);
        return 2;
    }
    g->room = g->c.seq_len - g->np + 1;
    if (g->steps > g->room)
        fprintf(stderr, "mlsys-lab generate: -n %ld: the context leaves room for %ld new "
                "tokens\n", g->steps, g->room);
    return 0;
}

/* The engine sized for this run: B seats, every prompt's rows in one step, a KV cache for
 * the positions this run can reach (not the whole context); --no-cache: one sampler per
 * sequence for the reference. 0, or 2 after one line. */
static int gen_setup(gen_run *g)
{
    char err[512];
    int B = g->B;
    g->out = mlsys_xcalloc((size_t)B, sizeof *g->out);
    g->n_out = mlsys_xcalloc((size_t)B, sizeof(int));
    g->prompts = mlsys_xcalloc((size_t)B, sizeof *g->prompts);
    g->n_prompt = mlsys_xcalloc((size_t)B, sizeof(int));
    for (int b = 0; b < B; b++) {
        g->out[b] = mlsys_xmalloc((size_t)(g->steps > 0 ? g->steps : 1) * sizeof(int));
        g->prompts[b] = g->pids;
        g->n_prompt[b] = g->np;
    }
    if (g->no_cache) {
        g->smp = mlsys_xcalloc((size_t)B, sizeof *g->smp);
        for (int b = 0; b < B; b++)
            if (llm_sampler_init(&g->smp[b], g->c.vocab_size, g->temperature, (int)g->top_k,
                                 g->top_p, (uint64_t)g->seed + (uint64_t)b)) {
                fprintf(stderr, "mlsys-lab generate: bad sampling parameters\n");
                return 2;
            }
        return 0;
    }
    long reach = g->np + (g->steps < g->room ? g->steps : g->room);
    llm_engine_opts o = {
        .max_num_seqs = B,
        .max_num_batched_tokens = g->np < B ? B : g->np,
        .max_model_len = (int)(reach < g->c.seq_len ? reach : g->c.seq_len),
    };
    if (o.max_num_batched_tokens < B)
        o.max_num_batched_tokens = B;
    /* what does not fit in the free memory is refused here, in one line (llm_engine_plan) */
    g->eng = llm_engine_create(&g->c, &g->w, &o, err, sizeof err);
    if (!g->eng) {
        fprintf(stderr, "mlsys-lab generate: %s\n", err);
        return 2;
    }
    g->kv_bytes = llm_engine_kv(g->eng)->bytes;
    return 0;
}

/* Decode: one sequence streams as it is drawn (Ctrl-C ends its line, exit 130), a batch is
 * printed once done, one line per sequence. 0, or 1 after one line. */
static int gen_decode(gen_run *g)
{
    char err[512];
    int B = g->B;
    gen_stream gs = {&g->t, B};
    /* the batch is B samples of the one prompt: prefilled once, its blocks forked */
    llm_gen_opts o = {
        .max_new = (int)(g->steps < g->room ? g->steps : g->room),
        .stop_at_eos = !g->ignore_eos, .temperature = g->temperature, .top_k = (int)g->top_k,
        .top_p = g->top_p, .n = B, .seed = (uint64_t)g->seed, .on_token = stream_token,
        .u = &gs,
    };
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_interrupt;
    g_main_tid = (pid_t)syscall(SYS_gettid);
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    if (B == 1)
        print_tokens(&g->t, LLM_TOK_UNK, g->pids, g->np);
    int rc = g->no_cache
                 ? llm_generate_nocache(&g->c, &g->w, g->smp, B, (const int *const *)g->prompts,
                                        g->n_prompt, g->out, g->n_out, &o, &g->st, err,
                                        sizeof err)
                 : llm_generate(g->eng, 1, (const int *const *)g->prompts, g->n_prompt, g->out,
                                g->n_out, &o, &g->st, err, sizeof err);
    if (rc) {
        fprintf(stderr, "mlsys-lab generate: %s\n", err);
        return 1;
    }
    if (B == 1) {
        print_newline();
    } else {
        for (int b = 0; b < B; b++) {
            sigset_t old;
            out_begin(&old);
            printf("[%d] ", b);
            g_mid_line = 1;
            out_end(NULL, 0, &old);
            print_tokens(&g->t, LLM_TOK_UNK, g->pids, g->np);
            print_tokens(&g->t, g->pids[g->np - 1], g->out[b], g->n_out[b]);
            print_newline();
        }
    }
    fflush(stdout);
    return 0;
}

/* One line on stderr: tokens, prefill and decode times, the rates, the cache, memory, and
 * the CPU time of prefill and decode together (what the serving benchmarks divide the
 * tokens by). The decode rate counts the tokens fed through decode steps per second of
 * decoding (the first new token of each sequence comes out of the prefill). */
static void gen_report(const gen_run *g)
{
    const llm_gen_stats *st = &g->st;
    long gen = 0;
    for (int b = 0; b < g->B; b++)
        gen += g->n_out[b];
    double dec_rate = st->decode_s > 0 ? st->decode_tokens / st->decode_s : 0.0;
    double cpu_rate = st->decode_cpu_s > 0 ? st->decode_tokens / st->decode_cpu_s : 0.0;
    char kvs[32];
    mlsys_format_size(g->no_cache ? 0 : g->kv_bytes, kvs, sizeof kvs);
    fprintf(stderr, "generate: %d x %ld tokens (%s, %s), prompt %d tokens: prefill %.1f ms, "
            "decode %ld steps %.3f s = %.1f tokens/s (%.1f per CPU second); kv cache %s; "
            "peak RSS %.1f MiB; CPU %.1f ms in all\n", g->B, g->B ? gen / g->B : 0,
            g->no_cache ? "no cache" : "kv cache", nn_gemm_kernel_name(nn_get_gemm_kernel()),
            g->np, st->prefill_s * 1e3, st->steps, st->decode_s, dec_rate, cpu_rate, kvs,
            peak_rss_kib() / 1024.0, (st->prefill_cpu_s + st->decode_cpu_s) * 1e3);
}

static void gen_free(gen_run *g)
{
    for (int b = 0; b < g->B; b++) {
        if (g->smp && g->smp[b].prob)
            llm_sampler_fini(&g->smp[b]);
        if (g->out)
            free(g->out[b]);
    }
    free(g->smp);
    free(g->out);
    free(g->n_out);
    free(g->prompts);
    free(g->n_prompt);
    free(g->pids);
    llm_engine_free(g->eng);
    if (g->loaded) {
        llm_tokenizer_free(&g->t);
        llm_weights_free(&g->w);
    }
}

int generate_main(int argc, char **argv)
{
    gen_run *g = mlsys_xcalloc(1, sizeof *g);
    int rc = gen_options(g, argc, argv);
    if (rc < 0 && !(rc = gen_load(g)) && !(rc = gen_setup(g)) && !(rc = gen_decode(g)))
        gen_report(g);
    gen_free(g);
    free(g);
    return rc < 0 ? 0 : rc;
}
