/* llm_internal.h - helpers shared by the file readers and writers of core/llm (not part of
 * the public API): read a whole regular file with a size limit, little-endian integers. */
#ifndef MLSYS_LLM_INTERNAL_H
#define MLSYS_LLM_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

/* Read path into a new buffer (free it). Rejects what is not a regular file (directories,
 * /dev/zero) and files over max_bytes, before allocating. 0, or -1 with "PATH: why" in err. */
int llm_read_file(const char *path, uint64_t max_bytes, unsigned char **buf, size_t *len,
                  char *err, size_t errlen);
uint64_t llm_fnv1a64(const void *p, size_t n, uint64_t h);
#define LLM_FNV_INIT 0xcbf29ce484222325ull

#endif
