/* model.c - `mlsys-lab model info FILE` (configuration, parameters, validation loss and the
 * share of generated units the grammar accepts: gen_measure) and `mlsys-lab model init FILE`
 * (a seeded random model in llama2.c's recipe, with a tokenizer trained on the corpus). */
#include "generate.h"
#include "cli.h"
#include "../../core/llm/engine.h"
#include "../../core/nn/nn.h"
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const lab_flag model_info_flags[] = {
    {"tokenizer", 0, FLAG_STR, GEN_DEFAULT_TOKENIZER, NULL, 0, 0, "llama2.c tokenizer.bin"},
    {"data-seed", 0, FLAG_INT, "1", NULL, 0, LONG_MAX,
     "the corpus whose validation split is measured"},
    /* 16384: the trainer's validation, 128 windows of 128 (assets/models/README.md) */
    {"val-tokens", 0, FLAG_INT, "16384", NULL, 1, 1L << 24,
     "predictions the loss averages: the validation split's first tokens, in windows of the "
     "context, as the trainer measures it"},
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
        llm_engine_opts eo = {.max_num_seqs = samples,
                              .max_num_batched_tokens = samples < 256 ? 256 : samples,
                              .max_model_len = SL};
        llm_engine *eng = llm_engine_create(c, w, &eo, err, errlen);
        if (!eng)
            goto out;
        int **outs = mlsys_xcalloc((size_t)samples, sizeof *outs);
        int *n_out = mlsys_xcalloc((size_t)samples, sizeof(int));
        const int **pr = mlsys_xcalloc((size_t)samples, sizeof *pr);
        int *np = mlsys_xcalloc((size_t)samples, sizeof(int));
        static const int bos = LLM_TOK_BOS;
        for (int b = 0; b < samples; b++) {
            outs[b] = mlsys_xmalloc((size_t)SL * sizeof(int));
            pr[b] = &bos;
            np[b] = 1;
        }
        /* the samples of one prompt (BOS): prefilled once, its block forked */
        llm_gen_opts o = {.max_new = SL, .stop_at_eos = 1, .temperature = temperature,
                          .top_p = 1.0f, .n = samples, .seed = seed};
        llm_gen_stats st;
        int grc = llm_generate(eng, 1, pr, np, outs, n_out, &o, &st, err, errlen);
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
        for (int b = 0; b < samples; b++)
            free(outs[b]);
        free(outs);
        free(n_out);
        free(pr);
        free(np);
        llm_engine_free(eng);
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
    mpath = lab_asset_path(mpath, mfound, sizeof mfound);
    tpath = lab_asset_path(tpath, tfound, sizeof tfound);
    if ((rc = gen_load_pair(cmd, mpath, tpath, &c, &w, &t)))
        return rc;
    char kvb[32], err[512];
    /* per token of context: K and V, every layer, kv_dim floats each (chapter 9's formula) */
    mlsys_format_size(llm_kv_bytes(&c), kvb, sizeof kvb);
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
    static const lab_command *const subs[] = {&model_info_command, &model_init_command, NULL};
    const lab_command *which;
    int rc = lab_subcommand("model", subs, argc, argv, &which);
    if (rc >= 0)
        return rc;
    return which == &model_info_command ? model_info(argc - 1, argv + 1)
                                        : model_init(argc - 1, argv + 1);
}
