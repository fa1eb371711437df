/* ch14-weight-sync - reference solution: header, agreement, buckets, version. */
#include "mlsys.h"
#include "api.h"
#include <stdlib.h>
#include <string.h>

int weight_sync(mlsys_comm *c, int trainer, ws_tensor *t, int n, size_t bucket_bytes,
                uint64_t *version)
{
    int me_trains = mlsys_rank(c) == trainer;
    size_t total = 0;
    for (int i = 0; i < n; i++)
        total += t[i].numel;
    int64_t hdr[3] = {(int64_t)*version, n, (int64_t)total};
    int rc = mlsys_broadcast(c, hdr, 3, MLSYS_I64, trainer);
    if (rc != MLSYS_OK)
        return rc;
    int verdict = WS_OK;
    if (!me_trains) {
        if (hdr[1] != n || hdr[2] != (int64_t)total)
            verdict = WS_MISMATCH;
        else if ((uint64_t)hdr[0] <= *version)
            verdict = WS_STALE;
    }
    rc = mlsys_allreduce(c, &verdict, &verdict, 1, MLSYS_I32, MLSYS_MAX);
    if (rc != MLSYS_OK)
        return rc;
    if (verdict != WS_OK)
        return verdict;
    size_t cap = bucket_bytes / sizeof(float);
    float *bucket = malloc(cap * sizeof(float));
    if (!bucket)
        return MLSYS_ERR_SYS;
    int ti = 0;
    size_t off = 0;                      /* position inside tensor ti */
    for (size_t start = 0; start < total; start += cap) {
        size_t len = total - start < cap ? total - start : cap;
        /* the pieces of this bucket: from (ti, off) on, len floats */
        int pi = ti;
        size_t poff = off;
        for (size_t k = 0; k < len;) {
            size_t take = t[pi].numel - poff < len - k ? t[pi].numel - poff : len - k;
            if (me_trains)
                memcpy(bucket + k, t[pi].data + poff, take * sizeof(float));
            k += take;
            poff += take;
            if (poff == t[pi].numel) {
                pi++;
                poff = 0;
            }
        }
        rc = mlsys_broadcast(c, bucket, len, MLSYS_F32, trainer);
        if (rc != MLSYS_OK)
            break;
        for (size_t k = 0; k < len;) {
            size_t take = t[ti].numel - off < len - k ? t[ti].numel - off : len - k;
            if (!me_trains)
                memcpy(t[ti].data + off, bucket + k, take * sizeof(float));
            k += take;
            off += take;
            if (off == t[ti].numel) {
                ti++;
                off = 0;
            }
        }
    }
    free(bucket);
    if (rc != MLSYS_OK)
        return rc;
    if (!me_trains)
        *version = (uint64_t)hdr[0];
    return WS_OK;
}
