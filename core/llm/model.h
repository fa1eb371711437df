/* model.h - the lab's Llama-style model as files: the legacy "version 0" .bin reader/writer
 * (llama2.c's 7-int header, then the weights in file order) and the companion "<model>.train"
 * file that --resume needs (AdamW moments, step counters, RNG state): checkpoint.c; and the
 * training checkpoint that keeps weights and state together through any interruption:
 * ckpt.c. The configuration and the weights themselves (llm_config, llm_weights) are
 * core/nn/transformer.h's: core/llm builds on core/nn, never the reverse. */
#ifndef MLSYS_LLM_MODEL_H
#define MLSYS_LLM_MODEL_H

#include <stddef.h>
#include <stdint.h>
#include "../nn/transformer.h"

/* ---- checkpoint.c: the .bin and .train files ---- */
/* Write path atomically (temporary file in the same directory, fsync, rename). */
int llm_checkpoint_write(const char *path, const llm_config *c, const llm_weights *w,
                         char *err, size_t errlen);
/* Read and validate path; on success c and w are filled (free w). w NULL: only the header is
 * read, and checked against the file's size (the configuration, without reading or
 * allocating the weights). On error nothing is allocated and err holds "PATH: what is
 * wrong". */
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
/* What a training run was started with, kept in its checkpoint (version 2) so that a resume
 * can tell a continuation of the run from a different run (llm_run_compare). */
typedef struct llm_run_record {
    uint64_t data_seed, data_bytes;  /* corpus and tokenizer: seed, bytes of training text */
    uint64_t init_seed;              /* the weights' first draw */
    uint64_t steps, warmup;          /* the schedule */
    uint32_t batch, world;           /* sequences per step (all ranks), ranks */
    uint32_t zero, sync;             /* ZeRO stage, gradient sync (0 ddp, 1 all-reduce) */
    float lr, min_lr, weight_decay, clip;
} llm_run_record;

typedef struct llm_train_state {
    uint64_t step, tokens_seen, data_pos;
    uint64_t rng_key, rng_ctr;       /* an mlsys_rng's key and counter */
    float lr, beta1, beta2, eps, weight_decay;
    uint64_t weights_hash;           /* llm_weights_hash of the weights saved with it */
    size_t n;
    float *m, *v;                    /* [n] each, one allocation */
    uint32_t version;                /* of the file it was read from (1 or 2) */
    llm_run_record run;              /* version 2: the run (lr and weight_decay as above) */
    uint64_t prev_weights_hash;      /* version 2: the checkpoint's before it (0: none) */
} llm_train_state;
int llm_train_state_alloc(llm_train_state *s, const llm_config *c);
void llm_train_state_free(llm_train_state *s);
int llm_train_state_write(const char *path, const llm_config *c, const llm_train_state *s,
                          char *err, size_t errlen);
/* Reads and checks magic, version, checksum, and that the header equals c's. */
int llm_train_state_read(const char *path, const llm_config *c, llm_train_state *s,
                         char *err, size_t errlen);

/* ---- ckpt.c: a training checkpoint that survives any interruption ----
 * DIR/model.train, version 2, holds everything a resume needs under one checksum:
 *   the 136 bytes of version 1 (version field 2) | the run record (88 bytes: u64 data_seed,
 *   data_bytes, init_seed, steps, warmup | u32 batch, world, zero, sync | f32 min_lr, clip |
 *   u64 the previous checkpoint's weights hash | 16 reserved zero bytes) |
 *   f32 weights[n_floats] (the .bin's payload) | f32 m[n] | f32 v[n] |
 *   u64 FNV-1a 64 of all bytes before it
 * It is written to a temporary file and renamed into place: that one rename commits the
 * checkpoint, so an interruption at any moment (SIGKILL, Ctrl-C, a full disk) leaves the
 * previous checkpoint whole or the new one, never a mix, and the previous one stays until
 * the new one is complete. DIR/model.bin (llama2.c's file) is an export of the same weights
 * written after it: after an interruption between the two it is the previous step's model
 * (complete, one checkpoint behind) until the next checkpoint or resume rewrites it. */
#define LLM_CKPT_TRAIN "model.train"
#define LLM_CKPT_BIN "model.bin"
/* Write DIR/model.train (s->run and the weights included) and then DIR/model.bin. 0 or -1. */
int llm_ckpt_write(const char *dir, const llm_config *c, const llm_weights *w,
                   const llm_train_state *s, char *err, size_t errlen);
/* Read DIR's checkpoint into c, w and s (free w and s): version 2 on its own, version 1 with
 * its model.bin (the weights hash must match). With version 2, model.bin may be missing or
 * the previous checkpoint's (then *bin_stale, when not NULL, is 1: rewrite it); other
 * weights or a damaged file there are refused, not overwritten. 0, or -1 with "PATH: why". */
int llm_ckpt_read(const char *dir, llm_config *c, llm_weights *w, llm_train_state *s,
                  int *bin_stale, char *err, size_t errlen);
/* Remove what interrupted writes left in DIR: NAME.tmp.PID of a process that is gone.
 * Returns how many files were removed. */
int llm_ckpt_sweep(const char *dir);
/* A resume's run against the checkpoint's. Differences that would silently change the run
 * or rewrite its record (--data-seed, --data-bytes, --seed, --batch, the world size) refuse it: -1 with one line in err
 * naming the checkpoint's value and the given one. Differences that only steer it (--lr,
 * --min-lr, --warmup, --steps, --wd, --clip, --zero, --sync) are accepted: 0, and notes gets
 * one line saying which (empty when none); the given values are recorded at the next
 * checkpoint. A version 1 state has no run record: only its data seed (rng_key) is known. */
int llm_run_compare(const llm_train_state *stored, const llm_run_record *given, char *notes,
                    size_t nlen, char *err, size_t errlen);

#endif
