/* ch14-weight-sync - ship a new version of the weights from the trainer to the generators.
 *
 * In a disaggregated RLHF system the trainer's GPUs update the actor and the generation
 * engine's GPUs must receive every new version before they sample again: a header first
 * (which version, how much), a check that the receiver wants it (it must be newer, and the
 * same shapes), then the weights in large buckets, never one message per tensor.
 *
 * The check runs 2 and 3 ranks (one trainer, the others generators; the trainer is rank 0
 * or the last rank) on 6 seeded tensors of 1..70,000 floats holding arbitrary bit patterns
 * (NaNs, -0, denormals included) and asserts:
 *   - a fresh version arrives bit-identical on every generator, which then holds its number;
 *   - one broadcast for the header, one all_reduce, then ceil(total bytes / bucket bytes)
 *     broadcasts for buckets of 4 KB, 64 KB and 1 MB;
 *   - a stale version (older than, or equal to, a generator's) and mismatched shapes are
 *     refused on every rank with WS_STALE / WS_MISMATCH after the header and the
 *     all_reduce only, the generators' weights and versions untouched.
 * A failure names the rank, the tensor and the element. The seed is printed.
 *
 *   mlsys-lab check ch14-weight-sync      mlsys-lab hint ch14-weight-sync */
#include "mlsys.h"
#include "api.h"
#include <stdlib.h>
#include <string.h>

int weight_sync(mlsys_comm *c, int trainer, ws_tensor *t, int n, size_t bucket_bytes,
                uint64_t *version)
{
    int rank = mlsys_rank(c);
    size_t total = 0;
    for (int i = 0; i < n; i++)
        total += t[i].numel;
    int64_t hdr[3] = {(int64_t)*version, n, (int64_t)total};
    int rc = mlsys_broadcast(c, hdr, 3, MLSYS_I64, trainer);
    if (rc != MLSYS_OK)
        return rc;
    (void)rank;
    (void)bucket_bytes;
    /* TODO: judge the header on the generators (shapes, then the version) */

    /* TODO: agree with one all_reduce(MAX) of the verdicts; stop everyone on a refusal */

    /* TODO: the buckets: pack on the trainer, broadcast, unpack on the generators */

    /* TODO: the generators take the new version */
    return WS_OK;
}
