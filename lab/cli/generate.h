/* generate.h - what `mlsys-lab generate` (generate.c: text from the lab's model, streamed
 * token by token) and `mlsys-lab model` (model.c: info, init) share: finding and loading a
 * model with its tokenizer, and what `model info` measures (callable from tests). */
#ifndef MLSYS_LAB_GENERATE_H
#define MLSYS_LAB_GENERATE_H

#include "../../core/llm/llm.h"

#define GEN_DEFAULT_MODEL "assets/models/model.bin"
#define GEN_DEFAULT_TOKENIZER "assets/models/tokenizer.bin"

/* generate.c (the commands themselves are declared in cli.h) */
/* The model and a tokenizer whose vocabulary is the model's. 0, or 2 with the reason printed
 * (one line, "mlsys-lab CMD: ..."). */
int gen_load_pair(const char *cmd, const char *mpath, const char *tpath, llm_config *c,
                  llm_weights *w, llm_tokenizer *t);

/* model.c */

/* What `model info` measures, callable from tests. */
typedef struct gen_quality {
    double val_loss;          /* mean cross-entropy per token (nats) */
    long val_tokens;          /* predictions it averages */
    llm_grammar_stats gs;     /* over every sample */
    int samples;
    long sample_tokens;
} gen_quality;
/* Validation loss over windows of min(seq_len, val_tokens) tokens from the validation split
 * of the corpus for data_seed (as `train` evaluates), up to val_tokens predictions; then the
 * grammar score of `samples` sequences drawn from BOS at (seed, temperature), each at most
 * min(seq_len, GEN_SAMPLE_MAX) tokens. 0, or -1 with err. */
#define GEN_SAMPLE_MAX 1024
int gen_measure(const llm_config *c, const llm_weights *w, const llm_tokenizer *t,
                uint64_t data_seed, long val_tokens, int samples, uint64_t seed,
                float temperature, gen_quality *q, char *err, size_t errlen);

#endif
