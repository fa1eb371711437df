/* generate.h - `mlsys-lab generate` (text from the lab's model, streamed token by token, one
 * sequence or a batch) and `mlsys-lab model` (info: configuration, size, validation loss and
 * the grammar's acceptance share; init: a seeded random model for tests and benchmarks). */
#ifndef MLSYS_LAB_GENERATE_H
#define MLSYS_LAB_GENERATE_H

#include "../../core/llm/llm.h"

#define GEN_DEFAULT_MODEL "assets/models/model.bin"
#define GEN_DEFAULT_TOKENIZER "assets/models/tokenizer.bin"

/* generate.c */
int generate_main(int argc, char **argv);     /* exit status 0, 1 or 2 */
int model_main(int argc, char **argv);        /* "model info FILE", "model init FILE" */

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
