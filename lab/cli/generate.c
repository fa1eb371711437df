/* generate.c - `mlsys-lab generate`: the lab's model writes text, token by token as it is
 * drawn (greedy, temperature, top-k, top-p, seeded), with a KV cache or without, one
 * sequence or a batch decoded in one forward per step; `mlsys-lab model info|init`. Bad
 * input (files, flags, a prompt longer than the context) costs one line and exit 2. */
#include "generate.h"
#include "../../core/nn/nn.h"

#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#define GEN_USAGE \
    "usage: mlsys-lab generate [--model FILE] [--tokenizer FILE] [--prompt TEXT] [-n STEPS]\n" \
    "         [--temperature T] [--top-k K] [--top-p P] [--seed S] [--batch B] [--no-cache]\n" \
    "         [--ignore-eos]\n" \
    "  --model FILE       llama2.c checkpoint (" GEN_DEFAULT_MODEL ")\n" \
    "  --tokenizer FILE   llama2.c tokenizer.bin (" GEN_DEFAULT_TOKENIZER ")\n" \
    "  --prompt TEXT      text to continue (default: start a document)\n" \
    "  -n STEPS           new tokens per sequence (256; fewer when the context ends)\n" \
    "  --temperature T    0 is greedy (1.0)     --top-k K   keep the K likeliest (0: all)\n" \
    "  --top-p P          nucleus, in (0,1] (0.9)   --seed S   sequence b uses S+b (42)\n" \
    "  --batch B          B sequences decoded together in one forward per step (1)\n" \
    "  --no-cache         recompute the whole prefix every step (the reference path)\n" \
    "  --ignore-eos       do not stop at the end of a document (benchmarks)\n"

#define MODEL_USAGE \
    "usage: mlsys-lab model info FILE [--tokenizer FILE] [--data-seed N] [--val-tokens N]\n" \
    "                            [--samples N] [--seed S] [--temperature T]\n" \
    "       mlsys-lab model init FILE [--tokenizer OUT] [--dim N] [--layers N] [--heads N]\n" \
    "                            [--kv-heads N] [--hidden N] [--vocab N] [--seq-len N]\n" \
    "                            [--untied] [--seed S] [--data-seed N]\n" \
    "  info: configuration, parameters, validation loss (the first --val-tokens, 16384, of\n" \
    "        the corpus' validation split for --data-seed, 1, in windows of the context, as\n" \
    "        the trainer measures it), and the share of generated units the grammar accepts\n" \
    "  init: a seeded random model (and with --tokenizer, a BPE tokenizer trained on the\n" \
    "        lab's corpus, whose vocabulary the model then takes)\n"

/* ---- small helpers ---- */

static int arg_long(const char *cmd, const char *name, const char *v, long lo, long hi,
                    long *out)
{
    if (!v) {
        fprintf(stderr, "mlsys-lab %s: %s needs a value\n", cmd, name);
        return 2;
    }
    if (mlsys_parse_long(v, out) != 0 || *out < lo || *out > hi) {
        fprintf(stderr, "mlsys-lab %s: %s '%s': expected a whole number in [%ld, %ld]\n", cmd,
                name, v, lo, hi);
        return 2;
    }
    return 0;
}

static int arg_float(const char *cmd, const char *name, const char *v, float *out)
{
    char *end;
    if (!v) {
        fprintf(stderr, "mlsys-lab %s: %s needs a value\n", cmd, name);
        return 2;
    }
    float f = strtof(v, &end);
    if (end == v || *end || !isfinite(f)) {
        fprintf(stderr, "mlsys-lab %s: %s '%s': expected a number\n", cmd, name, v);
        return 2;
    }
    *out = f;
    return 0;
}

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
static int load_pair(const char *cmd, const char *mpath, const char *tpath, llm_config *c,
                     llm_weights *w, llm_tokenizer *t)
{
    char err[512];
    memset(w, 0, sizeof *w);
    memset(t, 0, sizeof *t);
    if (llm_checkpoint_read(mpath, c, w, err, sizeof err)) {
        fprintf(stderr, "mlsys-lab %s: %s\n", cmd, err);
        return 2;
    }
    if (llm_tokfile_read(tpath, 0, t, err, sizeof err)) {
        fprintf(stderr, "mlsys-lab %s: %s\n", cmd, err);
        llm_weights_free(w);
        return 2;
    }
    if (t->vocab_size != c->vocab_size) {
        fprintf(stderr, "mlsys-lab %s: vocabulary mismatch: %s has %d ids, %s has %d\n", cmd,
                mpath, c->vocab_size, tpath, t->vocab_size);
        llm_tokenizer_free(t);
        llm_weights_free(w);
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

int generate_main(int argc, char **argv)
{
    const char *mpath = GEN_DEFAULT_MODEL, *tpath = GEN_DEFAULT_TOKENIZER, *prompt = "";
    long steps = 256, top_k = 0, seed = 42, batch = 1;
    float temperature = 1.0f, top_p = 0.9f;
    int no_cache = 0, ignore_eos = 0, rc;
    const char *cmd = "generate";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(GEN_USAGE, stdout);
            return 0;
        } else if (!strcmp(a, "--no-cache")) {
            no_cache = 1;
            continue;
        } else if (!strcmp(a, "--ignore-eos")) {
            ignore_eos = 1;
            continue;
        }
        if (!strcmp(a, "--model") || !strcmp(a, "--tokenizer") || !strcmp(a, "--prompt")) {
            if (!v) {
                fprintf(stderr, "mlsys-lab generate: %s needs a value\n", a);
                return 2;
            }
            if (!strcmp(a, "--model"))
                mpath = v;
            else if (!strcmp(a, "--tokenizer"))
                tpath = v;
            else
                prompt = v;
        } else if (!strcmp(a, "-n") || !strcmp(a, "--steps")) {
            if ((rc = arg_long(cmd, a, v, 0, LLM_MAX_SEQ, &steps)))
                return rc;
        } else if (!strcmp(a, "--top-k")) {
            if ((rc = arg_long(cmd, a, v, 0, LLM_MAX_VOCAB, &top_k)))
                return rc;
        } else if (!strcmp(a, "--seed")) {
            if ((rc = arg_long(cmd, a, v, 0, 0x7fffffffffffffffL, &seed)))
                return rc;
        } else if (!strcmp(a, "--batch")) {
            if ((rc = arg_long(cmd, a, v, 1, 4096, &batch)))
                return rc;
        } else if (!strcmp(a, "--temperature")) {
            if ((rc = arg_float(cmd, a, v, &temperature)))
                return rc;
            if (temperature < 0.0f) {
                fprintf(stderr, "mlsys-lab generate: --temperature %s: must be >= 0\n", v);
                return 2;
            }
        } else if (!strcmp(a, "--top-p")) {
            if ((rc = arg_float(cmd, a, v, &top_p)))
                return rc;
            if (!(top_p > 0.0f && top_p <= 1.0f)) {
                fprintf(stderr, "mlsys-lab generate: --top-p %s: must be in (0, 1]\n", v);
                return 2;
            }
        } else {
            fprintf(stderr, "mlsys-lab generate: unknown flag '%s' (see --help)\n", a);
            return 2;
        }
        i++;
    }

    llm_config c;
    llm_weights w;
    llm_tokenizer t;
    if ((rc = load_pair(cmd, mpath, tpath, &c, &w, &t)))
        return rc;
    size_t plen = strlen(prompt);
    int *pids = mlsys_xmalloc((plen + 2) * sizeof(int));
    int np = (int)llm_bpe_encode_prompt(&t, prompt, plen, 1, pids);
    int B = (int)batch;
    llm_engine e = {0};
    llm_kv kv = {0};
    llm_sampler *smp = mlsys_xcalloc((size_t)B, sizeof *smp);
    int **out = mlsys_xcalloc((size_t)B, sizeof *out);
    int *n_out = mlsys_xcalloc((size_t)B, sizeof(int));
    const int **prompts = mlsys_xcalloc((size_t)B, sizeof *prompts);
    int *n_prompt = mlsys_xcalloc((size_t)B, sizeof(int));
    char err[512];
    rc = 2;
    if (np > c.seq_len) {
        fprintf(stderr, "mlsys-lab generate: the prompt is %d tokens (BOS included); the model's "
                "context is %d\n", np, c.seq_len);
        goto done;
    }
    long room = c.seq_len - np + 1;
    if (steps > room)
        fprintf(stderr, "mlsys-lab generate: -n %ld: the context leaves room for %ld new "
                "tokens\n", steps, room);
    /* rows for the prompt (up to 64 per forward), fewer when a long context makes each row's
     * scratch large, and B at least (a decode step holds every sequence); the cache holds
     * the positions this run can reach, not the whole context */
    int rows = llm_engine_rows_that_fit(&c, np < 64 ? np : 64);
    rows = rows > B ? rows : B;
    long reach = np + (steps < room ? steps : room);
    int kv_len = reach < c.seq_len ? (int)reach : c.seq_len;
    if (llm_engine_init(&e, &c, &w, rows, err, sizeof err) ||
        (!no_cache && llm_kv_init_contiguous(&kv, &c, B, kv_len, err, sizeof err))) {
        fprintf(stderr, "mlsys-lab generate: %s\n", err);
        goto done;
    }
    for (int b = 0; b < B; b++) {
        if (llm_sampler_init(&smp[b], c.vocab_size, temperature, (int)top_k, top_p,
                             (uint64_t)seed + (uint64_t)b)) {
            fprintf(stderr, "mlsys-lab generate: bad sampling parameters\n");
            goto done;
        }
        out[b] = mlsys_xmalloc((size_t)(steps > 0 ? steps : 1) * sizeof(int));
        prompts[b] = pids;
        n_prompt[b] = np;
    }
    gen_stream gs = {&t, B};
    llm_gen_opts o = {(int)(steps < room ? steps : room), !ignore_eos, no_cache, stream_token,
                      &gs};
    llm_gen_stats st;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_interrupt;
    g_main_tid = (pid_t)syscall(SYS_gettid);
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    if (B == 1)
        print_tokens(&t, LLM_TOK_UNK, pids, np);
    if (llm_generate(&e, &kv, smp, B, (const int *const *)prompts, n_prompt, out, n_out, &o,
                     &st, err, sizeof err)) {
        fprintf(stderr, "mlsys-lab generate: %s\n", err);
        rc = 1;
        goto done;
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
            print_tokens(&t, LLM_TOK_UNK, pids, np);
            print_tokens(&t, pids[np - 1], out[b], n_out[b]);
            print_newline();
        }
    }
    fflush(stdout);
    long gen = 0;
    for (int b = 0; b < B; b++)
        gen += n_out[b];
    /* decode rate: the tokens fed through decode steps per second of decoding (the first
     * new token of each sequence comes out of the prefill) */
    double dec_rate = st.decode_s > 0 ? st.decode_tokens / st.decode_s : 0.0;
    double cpu_rate = st.decode_cpu_s > 0 ? st.decode_tokens / st.decode_cpu_s : 0.0;
    char kvs[32];
    mlsys_format_size(no_cache ? 0 : kv.bytes, kvs, sizeof kvs);
    fprintf(stderr, "generate: %d x %ld tokens (%s, %s), prompt %d tokens: prefill %.1f ms, "
            "decode %ld steps %.3f s = %.1f tokens/s (%.1f per CPU second); kv cache %s; "
            "peak RSS %.1f MiB\n", B,
            B ? gen / B : 0, no_cache ? "no cache" : "kv cache", nn_gemm_kernel_name(nn_get_gemm_kernel()),
            np, st.prefill_s * 1e3, st.steps, st.decode_s, dec_rate, cpu_rate, kvs,
            peak_rss_kib() / 1024.0);
    rc = 0;
done:
    for (int b = 0; b < B; b++) {
        if (smp[b].prob)
            llm_sampler_fini(&smp[b]);
        free(out[b]);
    }
    free(smp);
    free(out);
    free(n_out);
    free(prompts);
    free(n_prompt);
    free(pids);
    if (e.mem)
        llm_engine_fini(&e);
    if (kv.k)
        llm_kv_free(&kv);
    llm_tokenizer_free(&t);
    llm_weights_free(&w);
    return rc;
}

/* ---- model info ---- */

/* -log softmax(row)[target], in double: log Σ e^(x - max) + max - x_target. */
static double xent(const float *row, int V, int target)
{
    float mx = row[llm_argmax(row, V)];
    double s = 0.0;
    for (int i = 0; i < V; i++)
        s += exp((double)row[i] - mx);
    return log(s) + mx - row[target];
}

/* The first ids of the validation split: BOS + encode(" " + doc) per document, as the data
 * kit lays them out for training. Generates documents until `want` ids exist. */
static int *val_ids(const llm_tokenizer *t, uint64_t data_seed, size_t want, size_t *n)
{
    size_t bytes = want * 8 + 4096;
    for (;;) {
        llm_corpus cp;
        if (llm_corpus_generate(&cp, data_seed, LLM_SPLIT_VAL, 0, bytes))
            return NULL;
        int *ids = mlsys_xmalloc((cp.len + 2 * cp.ndocs + 1) * sizeof(int));
        size_t k = 0;
        for (size_t i = 0; i < cp.ndocs; i++)
            k += llm_bpe_encode_prompt(t, cp.text + cp.off[i], llm_corpus_doc_len(&cp, i), 1,
                                       ids + k);
        llm_corpus_free(&cp);
        if (k >= want || bytes > ((size_t)1 << 30)) {
            *n = k;
            return ids;
        }
        free(ids);
        bytes *= 2;
    }
}

int gen_measure(const llm_config *c, const llm_weights *w, const llm_tokenizer *t,
                uint64_t data_seed, long val_tokens, int samples, uint64_t seed,
                float temperature, gen_quality *q, char *err, size_t errlen)
{
    memset(q, 0, sizeof *q);
    int V = c->vocab_size, rc = -1;
    /* windows of T inputs and T shifted targets, back to back, as train_eval takes them;
     * a window is the context, or val_tokens when that is shorter (a header may ask for a
     * context of 2^20: one such window would cost 2^40 attention scores) */
    int T = val_tokens < c->seq_len ? (int)val_tokens : c->seq_len;
    /* a sample runs to the end of the context or GEN_SAMPLE_MAX tokens */
    int SL = c->seq_len < GEN_SAMPLE_MAX ? c->seq_len : GEN_SAMPLE_MAX;
    long nwin = val_tokens / T > 0 ? val_tokens / T : 1;
    size_t nids;
    int *ids = val_ids(t, data_seed, (size_t)nwin * T + 1, &nids);
    float *logits = mlsys_xmalloc((size_t)T * V * sizeof(float));
    if (!ids) {
        snprintf(err, errlen, "model info: cannot generate the validation split");
        free(logits);
        return -1;
    }
    if ((size_t)nwin * T + 1 > nids)
        nwin = (long)((nids - 1) / T);
    double sum = 0.0;
    for (long j = 0; j < nwin; j++) {
        const int *src = ids + (size_t)j * T;
        if (llm_forward_nocache(c, w, src, T, 0, logits)) {
            snprintf(err, errlen, "model info: validation window %ld: token out of range", j);
            goto out;
        }
        for (int i = 0; i < T; i++)
            sum += xent(logits + (size_t)i * V, V, src[i + 1]);
    }
    q->val_tokens = nwin * T;
    q->val_loss = q->val_tokens ? sum / q->val_tokens : NAN;

    /* the samples: all of them decoded together from BOS, each with its own stream */
    if (samples > 0) {
        llm_engine e;
        llm_kv kv;
        if (llm_engine_init(&e, c, w, samples, err, errlen))   /* one row per sample */
            goto out;
        if (llm_kv_init_contiguous(&kv, c, samples, SL, err, errlen)) {
            llm_engine_fini(&e);
            goto out;
        }
        llm_sampler *smp = mlsys_xcalloc((size_t)samples, sizeof *smp);
        int **outs = mlsys_xcalloc((size_t)samples, sizeof *outs);
        int *n_out = mlsys_xcalloc((size_t)samples, sizeof(int));
        const int **pr = mlsys_xcalloc((size_t)samples, sizeof *pr);
        int *np = mlsys_xcalloc((size_t)samples, sizeof(int));
        static const int bos = LLM_TOK_BOS;
        for (int b = 0; b < samples; b++) {
            llm_sampler_init(&smp[b], V, temperature, 0, 1.0f, seed + (uint64_t)b);
            outs[b] = mlsys_xmalloc((size_t)SL * sizeof(int));
            pr[b] = &bos;
            np[b] = 1;
        }
        llm_gen_opts o = {SL, 1, 0, NULL, NULL};
        llm_gen_stats st;
        int grc = llm_generate(&e, &kv, smp, samples, pr, np, outs, n_out, &o, &st, err,
                               errlen);
        char *text = mlsys_xmalloc((size_t)SL * 64 + 1);
        for (int b = 0; grc == 0 && b < samples; b++) {
            long n = llm_bpe_decode(t, outs[b], (size_t)n_out[b], text, (size_t)SL * 64);
            if (n < 0 || n > (long)SL * 64)
                n = 0;
            llm_grammar_stats gs;
            llm_grammar_score(text, (size_t)n, &gs);
            q->gs.units += gs.units;
            q->gs.accepted += gs.accepted;
            q->gs.incomplete += gs.incomplete;
            for (int k = 0; k < LLM_DOC_KINDS; k++) {
                q->gs.kind_units[k] += gs.kind_units[k];
                q->gs.kind_accepted[k] += gs.kind_accepted[k];
            }
            q->sample_tokens += n_out[b];
        }
        free(text);
        for (int b = 0; b < samples; b++) {
            llm_sampler_fini(&smp[b]);
            free(outs[b]);
        }
        free(smp);
        free(outs);
        free(n_out);
        free(pr);
        free(np);
        llm_kv_free(&kv);
        llm_engine_fini(&e);
        if (grc)
            goto out;
        q->samples = samples;
    }
    rc = 0;
out:
    free(ids);
    free(logits);
    return rc;
}

static int model_info(int argc, char **argv)
{
    const char *cmd = "model info", *mpath = NULL, *tpath = GEN_DEFAULT_TOKENIZER;
    /* 16384: the trainer's validation, 128 windows of 128 (assets/models/README.md) */
    long data_seed = 1, val_tokens = 16384, samples = 64, seed = 1234;
    float temperature = 0.8f;
    int rc;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(MODEL_USAGE, stdout);
            return 0;
        }
        if (a[0] != '-') {
            if (mpath) {
                fprintf(stderr, "mlsys-lab model info: one model at a time ('%s')\n", a);
                return 2;
            }
            mpath = a;
            continue;
        }
        if (!strcmp(a, "--tokenizer")) {
            if (!v) {
                fprintf(stderr, "mlsys-lab model info: --tokenizer needs a value\n");
                return 2;
            }
            tpath = v;
        } else if (!strcmp(a, "--data-seed")) {
            if ((rc = arg_long(cmd, a, v, 0, 0x7fffffffffffffffL, &data_seed)))
                return rc;
        } else if (!strcmp(a, "--val-tokens")) {
            if ((rc = arg_long(cmd, a, v, 1, 1L << 24, &val_tokens)))
                return rc;
        } else if (!strcmp(a, "--samples")) {
            if ((rc = arg_long(cmd, a, v, 0, 4096, &samples)))
                return rc;
        } else if (!strcmp(a, "--seed")) {
            if ((rc = arg_long(cmd, a, v, 0, 0x7fffffffffffffffL, &seed)))
                return rc;
        } else if (!strcmp(a, "--temperature")) {
            if ((rc = arg_float(cmd, a, v, &temperature)))
                return rc;
            if (temperature < 0.0f) {
                fprintf(stderr, "mlsys-lab model info: --temperature %s: must be >= 0\n", v);
                return 2;
            }
        } else {
            fprintf(stderr, "mlsys-lab model info: unknown flag '%s' (see --help)\n", a);
            return 2;
        }
        i++;
    }
    if (!mpath) {
        fprintf(stderr, "mlsys-lab model info: which model file? (%s)\n", GEN_DEFAULT_MODEL);
        return 2;
    }
    llm_config c;
    llm_weights w;
    llm_tokenizer t;
    if ((rc = load_pair(cmd, mpath, tpath, &c, &w, &t)))
        return rc;
    char kvb[32], err[512];
    /* per token of context: K and V, every layer, kv_dim floats each (chapter 9's formula) */
    mlsys_format_size((uint64_t)2 * c.n_layers * c.kv_dim * sizeof(float), kvb, sizeof kvb);
    printf("model       %s (%.2f MiB)\n", mpath, llm_file_bytes(&c) / 1048576.0);
    printf("tokenizer   %s (%d ids, %d merges)\n", tpath, t.vocab_size, t.nmerges);
    printf("config      dim %d, hidden %d, layers %d, heads %d, kv heads %d, head size %d, "
           "vocab %d, seq_len %d, classifier %s\n", c.dim, c.hidden_dim, c.n_layers, c.n_heads,
           c.n_kv_heads, c.head_size, c.vocab_size, c.seq_len,
           c.shared_classifier ? "shared" : "separate");
    printf("parameters  %zu\n", llm_param_count(&c));
    printf("kv cache    %s per token, float32\n", kvb);
    fflush(stdout);
    gen_quality q;
    double t0 = mlsys_now_s();
    if (gen_measure(&c, &w, &t, (uint64_t)data_seed, val_tokens, (int)samples, (uint64_t)seed,
                    temperature, &q, err, sizeof err)) {
        fprintf(stderr, "mlsys-lab model info: %s\n", err);
        rc = 1;
    } else {
        long win = c.seq_len < val_tokens ? c.seq_len : val_tokens;
        long nw = win > 0 ? q.val_tokens / win : 0;
        printf("val loss    %.4f (perplexity %.2f; %ld tokens of the validation split, its "
               "first %ld window%s of %ld, data seed %ld)\n", q.val_loss, exp(q.val_loss),
               q.val_tokens, nw, nw == 1 ? "" : "s", win, data_seed);
        double share = q.gs.units ? (double)q.gs.accepted / q.gs.units : 0.0;
        printf("grammar     %.1f%% accepted (%zu of %zu units; %d samples, %ld tokens, seed "
               "%ld, temperature %.2f; %zu unfinished)\n", 100.0 * share, q.gs.accepted,
               q.gs.units, q.samples, q.sample_tokens, seed, temperature, q.gs.incomplete);
        static const char *kinds[LLM_DOC_KINDS] = {"story sentences", "json lines",
                                                   "sum lines"};
        for (int k = 0; k < LLM_DOC_KINDS; k++)
            if (q.gs.kind_units[k])
                printf("            %-16s %zu of %zu\n", kinds[k], q.gs.kind_accepted[k],
                       q.gs.kind_units[k]);
        fprintf(stderr, "model info: measured in %.1f s\n", mlsys_now_s() - t0);
        rc = 0;
    }
    llm_tokenizer_free(&t);
    llm_weights_free(&w);
    return rc;
}

/* ---- model init ---- */

static int model_init(int argc, char **argv)
{
    const char *cmd = "model init", *mpath = NULL, *tpath = NULL;
    llm_config c = {128, 352, 4, 4, 2, 512, 256, 1, 0, 0};
    long seed = 1, data_seed = 1, val;
    int rc;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int *field = NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            fputs(MODEL_USAGE, stdout);
            return 0;
        }
        if (a[0] != '-') {
            if (mpath) {
                fprintf(stderr, "mlsys-lab model init: one model at a time ('%s')\n", a);
                return 2;
            }
            mpath = a;
            continue;
        }
        if (!strcmp(a, "--untied")) {
            c.shared_classifier = 0;
            continue;
        }
        if (!strcmp(a, "--tokenizer")) {
            if (!v) {
                fprintf(stderr, "mlsys-lab model init: --tokenizer needs a value\n");
                return 2;
            }
            tpath = v;
            i++;
            continue;
        }
        if (!strcmp(a, "--seed") || !strcmp(a, "--data-seed")) {
            if ((rc = arg_long(cmd, a, v, 0, 0x7fffffffffffffffL, &val)))
                return rc;
            *(a[2] == 's' ? &seed : &data_seed) = val;
            i++;
            continue;
        }
        if (!strcmp(a, "--dim"))
            field = &c.dim;
        else if (!strcmp(a, "--layers"))
            field = &c.n_layers;
        else if (!strcmp(a, "--heads"))
            field = &c.n_heads;
        else if (!strcmp(a, "--kv-heads"))
            field = &c.n_kv_heads;
        else if (!strcmp(a, "--hidden"))
            field = &c.hidden_dim;
        else if (!strcmp(a, "--vocab"))
            field = &c.vocab_size;
        else if (!strcmp(a, "--seq-len"))
            field = &c.seq_len;
        if (!field) {
            fprintf(stderr, "mlsys-lab model init: unknown flag '%s' (see --help)\n", a);
            return 2;
        }
        if ((rc = arg_long(cmd, a, v, 1, LLM_MAX_VOCAB, &val)))
            return rc;
        *field = (int)val;
        i++;
    }
    if (!mpath) {
        fprintf(stderr, "mlsys-lab model init: which file to write?\n");
        return 2;
    }
    char err[512];
    rc = 2;
    llm_weights w = {0};
    llm_datakit kit;
    int have_kit = 0;
    if (tpath) {
        /* a small slice of the corpus is enough to learn the merges of a few hundred ids */
        llm_datakit_opts ko = {(uint64_t)data_seed, 256 << 10, 16 << 10, c.vocab_size};
        if (llm_datakit_build(&kit, &ko, err, sizeof err) ||
            llm_tokfile_write(tpath, &kit.tok, err, sizeof err)) {
            fprintf(stderr, "mlsys-lab model init: %s\n", err);
            if (have_kit)
                llm_datakit_free(&kit);
            return 2;
        }
        have_kit = 1;
        c.vocab_size = kit.tok.vocab_size;
    }
    if (llm_config_check(&c, err, sizeof err) || llm_weights_alloc(&w, &c, err, sizeof err)) {
        fprintf(stderr, "mlsys-lab model init: %s\n", err);
        goto done;
    }
    /* llama2.c's recipe: N(0, 0.02) matrices, norms at 1 */
    mlsys_rng r;
    mlsys_rng_seed(&r, (uint64_t)seed);
    size_t off[12], len[12];
    int nr = llm_weights_param_ranges(&c, off, len);
    for (int k = 0; k < nr; k++)
        nn_init_normal(w.mem + off[k], len[k], 0.0f, 0.02f, &r);
    nn_init_const(w.rms_att, (size_t)c.n_layers * c.dim, 1.0f);
    nn_init_const(w.rms_ffn, (size_t)c.n_layers * c.dim, 1.0f);
    nn_init_const(w.rms_final, (size_t)c.dim, 1.0f);
    if (llm_checkpoint_write(mpath, &c, &w, err, sizeof err)) {
        fprintf(stderr, "mlsys-lab model init: %s\n", err);
        goto done;
    }
    printf("wrote %s: dim %d, layers %d, heads %d/%d, hidden %d, vocab %d, seq_len %d, %zu "
           "parameters%s%s\n", mpath, c.dim, c.n_layers, c.n_heads, c.n_kv_heads, c.hidden_dim,
           c.vocab_size, c.seq_len, llm_param_count(&c), tpath ? "; tokenizer " : "",
           tpath ? tpath : "");
    rc = 0;
done:
    if (have_kit)
        llm_datakit_free(&kit);
    llm_weights_free(&w);
    return rc;
}

int model_main(int argc, char **argv)
{
    if (argc >= 2 && !strcmp(argv[1], "info"))
        return model_info(argc - 1, argv + 1);
    if (argc >= 2 && !strcmp(argv[1], "init"))
        return model_init(argc - 1, argv + 1);
    if (argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
        fputs(MODEL_USAGE, stdout);
        return 0;
    }
    fprintf(stderr, "mlsys-lab model: expected 'info FILE' or 'init FILE' (see --help)\n");
    return 2;
}
