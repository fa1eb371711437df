/* model.h - the lab's Llama-style model as files: the configuration (llama2.c's 7-int header),
 * the weights carved from one allocation in llama2.c's order, the legacy "version 0" .bin
 * reader/writer and the companion "<model>.train" file that --resume needs (AdamW moments,
 * step counters, RNG state). The numerics live in core/nn; this header only knows shapes.
 * Implemented in checkpoint.c. */
#ifndef MLSYS_LLM_MODEL_H
#define MLSYS_LLM_MODEL_H

#include <stddef.h>
#include <stdint.h>

/* Limits a file may not exceed (a header asking for more is rejected before any allocation).
 * Each dimension stays far below INT_MAX so llama2.c's int arithmetic cannot overflow. */
#define LLM_MAX_DIM     65536
#define LLM_MAX_LAYERS  1024
#define LLM_MAX_VOCAB   (1 << 20)
#define LLM_MAX_SEQ     (1 << 20)
#define LLM_MAX_FILE_BYTES (64ull << 30)   /* 64 GiB of weights */

/* The 7 int32 of llama2.c's header, in file order, plus what follows from them. */
typedef struct llm_config {
    int dim;          /* model width D */
    int hidden_dim;   /* FFN width H */
    int n_layers;     /* L */
    int n_heads;      /* query heads */
    int n_kv_heads;   /* key/value heads (divides n_heads; < n_heads is grouped-query) */
    int vocab_size;   /* V, always positive here; the file stores -V when wcls is separate */
    int seq_len;      /* S, longest context */
    int shared_classifier;   /* 1: logits use token_embedding (file vocab > 0); 0: own wcls */
    /* derived by llm_config_check */
    int head_size;    /* dim / n_heads (even: RoPE rotates pairs) */
    int kv_dim;       /* n_kv_heads * head_size */
} llm_config;

/* Every tensor, row-major, [out, in] for matrices (llama2.c's matmul reads W[d][n]).
 * All point into mem, in exactly this order, which is the order of the .bin payload. */
typedef struct llm_weights {
    float *token_embedding;  /* [V, D] */
    float *rms_att;          /* [L, D] */
    float *wq;               /* [L, D, D]       (out n_heads*head_size = D, in D) */
    float *wk;               /* [L, kv_dim, D] */
    float *wv;               /* [L, kv_dim, D] */
    float *wo;               /* [L, D, D] */
    float *rms_ffn;          /* [L, D] */
    float *w1;               /* [L, H, D]  gate */
    float *w2;               /* [L, D, H]  down */
    float *w3;               /* [L, H, D]  up */
    float *rms_final;        /* [D] */
    float *freq_cis_real;    /* [S, head_size/2] cos(pos·θ_i): written for old readers, run.c skips */
    float *freq_cis_imag;    /* [S, head_size/2] sin(pos·θ_i) */
    float *wcls;             /* [V, D]; == token_embedding when shared_classifier */
    float *mem;              /* the one allocation */
    size_t n_floats;         /* floats in mem == floats in the file payload */
} llm_weights;

/* ---- checkpoint.c: config, weights, the .bin and .train files ---- */
/* Validate c (every dimension positive and below the limits, n_heads | dim, n_kv_heads |
 * n_heads, even head_size) and fill head_size and kv_dim. 0 or -1 with a reason in err. */
int llm_config_check(llm_config *c, char *err, size_t errlen);
/* Trainable parameters (the RoPE tables excluded, wcls counted only when separate). */
size_t llm_param_count(const llm_config *c);
/* Floats of the file payload (parameters + the two RoPE tables); file = 28 + 4·this bytes. */
size_t llm_file_floats(const llm_config *c);
uint64_t llm_file_bytes(const llm_config *c);
/* One zeroed allocation carved into w; the RoPE tables are filled (θ_i = 10000^(-2i/hs)).
 * 0, or -1 when c is invalid. Free with llm_weights_free. */
int llm_weights_alloc(llm_weights *w, const llm_config *c, char *err, size_t errlen);
void llm_weights_free(llm_weights *w);
/* Offset (in floats, from mem) and length of each trainable tensor, in file order: lets an
 * optimizer walk the parameters without the RoPE tables. Returns the number of ranges (<= 12). */
int llm_weights_param_ranges(const llm_config *c, size_t off[12], size_t len[12]);
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
