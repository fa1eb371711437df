/* generate.c - `mlsys-lab generate`: the lab's model writes text, token by token as it is
 * drawn (greedy, temperature, top-k, top-p, seeded), with a KV cache or without, one
 * sequence or a batch decoded in one forward per step; `mlsys-lab model info|init`. Bad
 * input (files, flags, a prompt longer than the context) costs one line and exit 2. */
#include "generate.h"
#include "cli.h"
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

static const lab_flag model_info_flags[] = {
    {"tokenizer", 0, FLAG_STR, GEN_DEFAULT_TOKENIZER, NULL, 0, 0, "llama2.c tokenizer.bin"},
    {"data-seed", 0, FLAG_INT, "1", NULL, 0, LONG_MAX,
     "the corpus whose validation split is measured"},
    {"val-tokens", 0, FLAG_INT, "8192", NULL, 1, 1L << 24, "predictions the loss averages"},
    {"samples", 0, FLAG_INT, "64", NULL, 0, 4096, "sequences drawn for the grammar's score"},
    {"seed", 0, FLAG_INT, "1234", NULL, 0, LONG_MAX, "seed of the samples"},
    {"temperature", 0, FLAG_DOUBLE, "0.8", NULL, 0, FLAG_NO_MAX, "of the samples"},
    {NULL, 0, 0, NULL, NULL, 0, 0, NULL}
};

const lab_command model_info_command = {
    .name = "model info",
    .args = "FILE",
    .min_pos = 1,
    .max_pos = 1,
    .missing = "which model file? (" GEN_DEFAULT_MODEL ")",
    .summary = "A model's configuration, parameters, validation loss (the corpus' validation\n"
               "split for --data-seed) and the share of generated units the grammar accepts.",
    .flags = model_info_flags,
};

static const lab_flag model_init_flags[] = {
    {"tokenizer", 0, FLAG_STR, NULL, NULL, 0, 0,
     "also train a BPE tokenizer on the lab's corpus, written to OUT; the model takes its "
     "vocabulary"},
    {"dim", 0, FLAG_INT, "128", NULL, 1, LLM_MAX_VOCAB, "model width"},
    {"layers", 0, FLAG_INT, "4", NULL, 1, LLM_MAX_VOCAB, "transformer layers"},
    {"heads", 0, FLAG_INT, "4", NULL, 1, LLM_MAX_VOCAB, "attention heads"},
    {"kv-heads", 0, FLAG_INT, "2", NULL, 1, LLM_MAX_VOCAB, "key/value heads"},
    {"hidden", 0, FLAG_INT, "352", NULL, 1, LLM_MAX_VOCAB, "width of the SwiGLU MLP"},
    {"vocab", 0, FLAG_INT, "512", NULL, 1, LLM_MAX_VOCAB, "vocabulary"},
    {"seq-len", 's', FLAG_INT, "256", NULL, 1, LLM_MAX_VOCAB, "longest context"},
    {"untied", 0, FLAG_BOOL, NULL, NULL, 0, 0, "an own classifier (not the embedding)"},
    {"seed", 0, FLAG_INT, "1", NULL, 0, LONG_MAX, "seed of the weights"},
    {"data-seed", 0, FLAG_INT, "1", NULL, 0, LONG_MAX, "seed of the tokenizer's corpus"},
    {NULL, 0, 0, NULL, NULL, 0, 0, NULL}
};

const lab_command model_init_command = {
    .name = "model init",
    .args = "FILE",
    .min_pos = 1,
    .max_pos = 1,
    .missing = "which file to write?",
    .summary = "A seeded random model (llama2.c's recipe), for tests and benchmarks.",
    .flags = model_init_flags,
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

/* A model or tokenizer file as given, from the current folder; one that is not there is
 * looked for as a shipped asset (assets/models/... from any folder: lab_asset_path). */
static const char *find_file(const char *given, char *out, size_t n)
{
    struct stat st;
    if (stat(given, &st) == 0) {
        snprintf(out, n, "%s", given);
        return out;
    }
    return lab_asset_path(given, out, n);
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
    lab_args a;
    int rc = lab_command_args(&generate_command, argc, argv, &a);
    if (rc >= 0)
        return rc;
    const char *cmd = "generate";
    const char *mpath = lab_arg_text(&a, "model"), *tpath = lab_arg_text(&a, "tokenizer");
    const char *prompt = lab_arg_given(&a, "prompt") ? lab_arg_text(&a, "prompt") : "";
    long steps = lab_arg_int(&a, "steps"), top_k = lab_arg_int(&a, "top-k");
    long seed = lab_arg_int(&a, "seed"), batch = lab_arg_int(&a, "batch");
    float temperature = (float)lab_arg_double(&a, "temperature");
    float top_p = (float)lab_arg_double(&a, "top-p");
    int no_cache = lab_arg_bool(&a, "no-cache"), ignore_eos = lab_arg_bool(&a, "ignore-eos");
    lab_args_free(&a);

    llm_config c;
    llm_weights w;
    llm_tokenizer t;
    char mfound[PATH_MAX + 64], tfound[PATH_MAX + 64];
    mpath = find_file(mpath, mfound, sizeof mfound);
    tpath = find_file(tpath, tfound, sizeof tfound);
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
    lab_args a;
    int rc = lab_command_args(&model_info_command, argc, argv, &a);
    if (rc >= 0)
        return rc;
    const char *cmd = "model info", *mpath = a.pos[0], *tpath = lab_arg_text(&a, "tokenizer");
    long data_seed = lab_arg_int(&a, "data-seed"), val_tokens = lab_arg_int(&a, "val-tokens");
    long samples = lab_arg_int(&a, "samples"), seed = lab_arg_int(&a, "seed");
    float temperature = (float)lab_arg_double(&a, "temperature");
    lab_args_free(&a);
    llm_config c;
    llm_weights w;
    llm_tokenizer t;
    char mfound[PATH_MAX + 64], tfound[PATH_MAX + 64];
    mpath = find_file(mpath, mfound, sizeof mfound);
    tpath = find_file(tpath, tfound, sizeof tfound);
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
        printf("val loss    %.4f (perplexity %.2f; %ld tokens of the validation split, data "
               "seed %ld)\n", q.val_loss, exp(q.val_loss), q.val_tokens, data_seed);
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
    lab_args a;
    int rc = lab_command_args(&model_init_command, argc, argv, &a);
    if (rc >= 0)
        return rc;
    const char *mpath = a.pos[0], *tpath = lab_arg_text(&a, "tokenizer");
    llm_config c;
    memset(&c, 0, sizeof c);
    c.dim = (int)lab_arg_int(&a, "dim");
    c.hidden_dim = (int)lab_arg_int(&a, "hidden");
    c.n_layers = (int)lab_arg_int(&a, "layers");
    c.n_heads = (int)lab_arg_int(&a, "heads");
    c.n_kv_heads = (int)lab_arg_int(&a, "kv-heads");
    c.vocab_size = (int)lab_arg_int(&a, "vocab");
    c.seq_len = (int)lab_arg_int(&a, "seq-len");
    c.shared_classifier = !lab_arg_bool(&a, "untied");
    long seed = lab_arg_int(&a, "seed"), data_seed = lab_arg_int(&a, "data-seed");
    lab_args_free(&a);
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
        lab_command_help(&model_info_command, stdout);
        printf("\n");
        lab_command_help(&model_init_command, stdout);
        return 0;
    }
    fprintf(stderr, "mlsys-lab model: expected 'info FILE' or 'init FILE' (see --help)\n");
    return 2;
}
