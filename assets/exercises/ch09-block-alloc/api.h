/* api.h - ch09-block-alloc: the paged KV cache's block allocator, the table of functions the
 * learner writes (core/llm/engine.h: llm_block_alloc_ops), as the cache calls it. */
#ifndef EX_API_H
#define EX_API_H
#include "llm/engine.h"

/* The cache (the "manager") keeps each block's reference count, its prefix-cache entry and
 * the block tables, and copies a shared partial block before a write (copy on write). When a
 * block's count falls to 0 it gives the block to the allocator: the POOL. The allocator
 * decides which pooled block to hand out next:
 *   create(n)        a pool of blocks 0..n-1, all of them uncached
 *   put(b, cached)   b's count fell to 0: b joins the pool; cached = 1 when b still holds a
 *                    prefix-cache entry (a prefix a later request may find again)
 *   take(b)          a cached block in the pool was found again (a prefix hit): it leaves
 *                    the pool without being handed out
 *   get()            remove and return the block to hand out: an uncached one while there is
 *                    any (any of them), else the cached block put LONGEST AGO (least recently
 *                    used: its prefix entry is evicted); -1 when the pool is empty
 *   count()          blocks in the pool
 *   destroy(st)      free the state */
extern const llm_block_alloc_ops my_block_alloc;

#endif
