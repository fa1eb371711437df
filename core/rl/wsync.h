/* wsync.h - the weight sync of RLHF: a trainer rank hands a set of named float tensors to
 * the generator ranks over the runtime's broadcast (shm, MPI or NCCL, whichever the job
 * runs on), in buckets, with a version that must advance by one each time. rl.h includes
 * it; a caller may include either. */
#ifndef MLSYS_RL_WSYNC_H
#define MLSYS_RL_WSYNC_H

#include <stddef.h>
#include <stdint.h>
#include "../mlsys.h"

typedef struct rl_tensor {
    const char *name;   /* NULL reads as "" */
    float *data;        /* n floats: read on the root, written on the others */
    size_t n;
} rl_tensor;

/* The memory pool (per rank) whose records describe the staging buffer: a POOL record of
 * one block when it is allocated, USAGE gauges, BUSY/WRITE around each bucket staged
 * through it, and a POOL record of 0 blocks when it is freed. */
#define RL_WSYNC_POOL 14

/* Collective over comm. The root sends *version (the caller increments it before the call)
 * and t[0..n_tensors) in buckets of at most bucket_bytes: tensors are packed into a bucket in
 * order and one larger than what is left of a bucket is split across several. Every other
 * rank first gets a header (version, tensor count, each tensor's size and name) and checks
 * it: the version must be exactly its *version + 1 and the tensors must match the root's in
 * number, size and name. On any mismatch every rank returns -1, nothing is moved, and err
 * says why, naming the tensor (the refusing rank gives the details, the others name it).
 * On success the receivers' tensors hold the root's bit for bit and their *version is the
 * root's. The receivers follow the root's bucket_bytes (the plan is the root's).
 * A bucket whose floats are one contiguous range of memory on a rank (a piece of one tensor
 * filling the bucket, or neighbouring tensors that lie back to back) travels straight from
 * and into the tensors; other buckets are packed into a page-aligned staging buffer. On shm,
 * tensors in mlsys_alloc_aligned memory are read by the peers at memcpy speed. After a
 * failure during the transfer (a transport error) receivers may hold a mix: their version
 * is left as it was. The root emits one flow record (MLSYS_FLOW_WEIGHTS, from = root, to = -1,
 * count = tensors touched, seq = bucket index, version = the new version) per bucket.
 * Returns 0, or -1 with err filled (when err is not NULL). */
int rl_wsync(mlsys_comm *comm, int root, rl_tensor *t, int n_tensors, size_t bucket_bytes,
             uint64_t *version, char *err, size_t errlen);

/* The same with the records it emits chosen by the caller (NULL: rl_wsync's): a caller that
 * draws roles, not ranks (the RLHF loop), takes its own pool id for the staging buffer and
 * emits one flow record of its own for the whole hand-over. */
typedef struct rl_wsync_events {
    int pool;       /* the staging buffer's pool id in memory records (RL_WSYNC_POOL) */
    int no_flow;    /* 1: no flow record per bucket */
} rl_wsync_events;
int rl_wsync_with(mlsys_comm *comm, int root, rl_tensor *t, int n_tensors, size_t bucket_bytes,
                  uint64_t *version, const rl_wsync_events *ev, char *err, size_t errlen);

/* Buckets rl_wsync moves for these tensor sizes: ceil(total floats / floats per bucket),
 * floats per bucket = bucket_bytes / 4 (at least 1). */
size_t rl_wsync_buckets(const rl_tensor *t, int n_tensors, size_t bucket_bytes);

#endif
