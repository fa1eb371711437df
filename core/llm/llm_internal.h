/* llm_internal.h - helpers shared inside core/ (core/llm, and core/rl's reward-model reader;
 * not part of the public API): open and read a regular file with a size limit, a checksum;
 * the tokenizer table's side of training. */
#ifndef MLSYS_LLM_INTERNAL_H
#define MLSYS_LLM_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include "model.h"

/* Read path into a new buffer (free it). Rejects what is not a regular file (directories,
 * /dev/zero) and files over max_bytes, before allocating. 0, or -1 with "PATH: why" in err. */
int llm_read_file(const char *path, uint64_t max_bytes, unsigned char **buf, size_t *len,
                  char *err, size_t errlen);
/* The first half of that: open path for reading without blocking (a FIFO with no writer
 * is refused, not waited for), check it is a regular file of at most max_bytes. *fd is
 * then the caller's to close. 0, or -1 with "PATH: why". */
int llm_open_regular(const char *path, uint64_t max_bytes, int *fd, uint64_t *size,
                     char *err, size_t errlen);
/* Exactly n bytes from fd, or -1 with "PATH: why". */
int llm_read_exact(int fd, void *buf, size_t n, const char *path, char *err, size_t errlen);
/* checkpoint.c's pieces that ckpt.c shares: the .bin header <-> config, and the first 136
 * bytes of a .train file (magic, version, header, counters, hyperparameters, hash, n). */
struct llm_train_state;
void llm_header_of(const llm_config *c, int32_t h[7]);
int llm_config_of_header(const int32_t h[7], llm_config *c, char *err, size_t errlen);
extern const char llm_train_magic[8];
void llm_train_head_put(unsigned char *p, const llm_config *c, const struct llm_train_state *s,
                        uint32_t version);
void llm_train_head_get(const unsigned char *p, struct llm_train_state *s);
uint64_t llm_fnv1a64(const void *p, size_t n, uint64_t h);
#define LLM_FNV_INIT 0xcbf29ce484222325ull

/* bpe.c, for bpe_train.c: a table of room for cap ids holding the 3 specials and the 256
 * bytes; and a merge's piece added as the next id (score -rank), or the id it already has;
 * -1 when the piece may not be a token (it would read as a byte, or as a special). */
struct llm_tokenizer;
void llm_tok_start(struct llm_tokenizer *t, int cap);
int llm_tok_add_merge(struct llm_tokenizer *t, const char *p, int len);

#endif
