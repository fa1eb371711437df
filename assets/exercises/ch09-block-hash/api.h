/* api.h - ch09-block-hash: the key of one full KV block in the prefix cache, the function
 * the learner writes, as the check calls it. */
#ifndef EX_API_H
#define EX_API_H
#include <stdint.h>

/* FNV-1a, 64 bits: h = OFFSET; for each byte: h ^= byte; h *= PRIME. */
#define FNV_OFFSET 0xcbf29ce484222325ull
#define FNV_PRIME 0x00000100000001b3ull
/* The "parent" of a sequence's first block (the engine's LLM_PAGED_ROOT_HASH). */
#define ROOT_HASH 0x9e3779b97f4a7c15ull

/* The hash of one full block of n tokens whose previous block hashed to parent (ROOT_HASH
 * for the first block): a chain, so that equal hashes mean equal prefixes, not only equal
 * blocks. It must change when any token, the order of the tokens or the parent changes.
 * (The engine's, llm_paged_hash: FNV-1a over the parent's 8 bytes, least significant first,
 * then each token's 4 bytes, least significant first.) */
uint64_t block_hash(uint64_t parent, const int *tokens, int n);

#endif
