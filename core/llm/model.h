/* model.h - the lab's Llama-style model as files: the legacy "version 0" .bin reader/writer
 * (llama2.c's 7-int header, then the weights in file order) and the companion "<model>.train"
 * file that --resume needs (AdamW moments, step counters, RNG state). The configuration and
 * the weights themselves (llm_config, llm_weights) are core/nn/transformer.h's: core/llm
 * builds on core/nn, never the reverse. Implemented in checkpoint.c. */
#ifndef MLSYS_LLM_MODEL_H
#define MLSYS_LLM_MODEL_H

#include <stddef.h>
#include <stdint.h>
#include "../nn/transformer.h"

/* ---- checkpoint.c: the .bin and .train files ---- */
/* Write path atomically (temporary file in the same directory, fsync, rename). */
int llm_checkpoint_write(const char *path, const llm_config *c, const llm_weights *w,
                         char *err, size_t errlen);
/* Read and validate path; on success c and w are filled (free w). On error nothing is
 * allocated and err holds "PATH: what is wrong". */
int llm_checkpoint_read(const char *path, llm_config *c, llm_weights *w, char *err,
                        size_t errlen);
/* FNV-1a 64 of the payload floats: the .train file records it to prove it belongs to the .bin. */
uint64_t llm_weights_hash(const llm_weights *w);

/* The training companion "<model>.train" (little-endian, atomically written):
 *   "MLSYSTRN" | u32 version (1) | u32 reserved 0 | int32 header[7] (as the .bin's) |
 *   u64 step | u64 tokens_seen | u64 data_pos | u64 rng_key | u64 rng_ctr |
 *   f32 lr, beta1, beta2, eps, weight_decay | u32 reserved 0 | u64 weights_hash |
 *   u64 n (== llm_param_count) | 12 reserved zero bytes (136 so far) |
 *   f32 m[n] | f32 v[n] | u64 FNV-1a 64 of all bytes before it
 * m and v follow the trainable tensors in file order (no RoPE tables). */
typedef struct llm_train_state {
    uint64_t step, tokens_seen, data_pos;
    uint64_t rng_key, rng_ctr;       /* an mlsys_rng's key and counter */
    float lr, beta1, beta2, eps, weight_decay;
    uint64_t weights_hash;           /* llm_weights_hash of the .bin saved with it */
    size_t n;
    float *m, *v;                    /* [n] each, one allocation */
} llm_train_state;
int llm_train_state_alloc(llm_train_state *s, const llm_config *c);
void llm_train_state_free(llm_train_state *s);
int llm_train_state_write(const char *path, const llm_config *c, const llm_train_state *s,
                          char *err, size_t errlen);
/* Reads and checks magic, version, checksum, and that the header equals c's. */
int llm_train_state_read(const char *path, const llm_config *c, llm_train_state *s,
                         char *err, size_t errlen);

#endif
