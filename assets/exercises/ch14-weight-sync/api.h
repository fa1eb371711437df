/* api.h - ch14-weight-sync: the weight-sync step of a disaggregated RLHF system (one trainer
 * rank ships a new version of the weights to the generator ranks), the function the learner
 * writes, as the check calls it. */
#ifndef EX_API_H
#define EX_API_H
#include "mlsys.h"
#include <stdint.h>

/* One weight tensor: numel floats at data (each tensor is its own allocation). */
typedef struct ws_tensor {
    const char *name;
    float *data;
    size_t numel;
} ws_tensor;

#define WS_OK 0
#define WS_STALE 1          /* refused: a generator already holds this version or a newer one */
#define WS_MISMATCH 2       /* refused: a generator's tensors differ in count or total size */

/* Collective: every rank of c calls it with the same trainer and bucket_bytes. Rank trainer
 * holds the new weights in t[0..n-1] and their version in *version (left unchanged); every
 * other rank is a generator, holding its current weights in t and their version in *version.
 *   1. header: the trainer broadcasts three int64 {version, n, total floats} (one broadcast);
 *   2. each generator judges it: WS_MISMATCH when n or the total differ from its own tensors,
 *      else WS_STALE when the header's version is not newer than its *version, else WS_OK;
 *   3. agreement: one all_reduce(MAX) of each rank's verdict (the trainer's is WS_OK), so a
 *      refusal anywhere stops every rank before any weight moves;
 *   4. buckets (only when everyone agreed): the tensors laid end to end in order, cut into
 *      buckets of bucket_bytes (a multiple of 4; the last may be shorter; a tensor may span
 *      buckets): the trainer packs each bucket, one broadcast each, the generators unpack it;
 *   5. each generator sets *version to the header's.
 * A refused sync leaves every generator's tensors and version exactly as they were. Returns
 * the agreed verdict (the same on every rank), or the runtime's error code (< 0). */
int weight_sync(mlsys_comm *c, int trainer, ws_tensor *t, int n, size_t bucket_bytes,
                uint64_t *version);

#endif
