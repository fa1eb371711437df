/* bench.h - measuring and modelling collectives, nccl-tests' way: one measurement of one
 * size (measure.c), and what a size means and should cost (cost_model.c: counts, busbw factor,
 * alpha-beta model). `mlsys-lab bench` (lab/cli/bench.c) prints tables from it; the labs that
 * time collectives (ch04/benchmark-algorithms) use the same engine. Table of contents:
 * prototypes sit under the file that has them. */
#ifndef MLSYS_BENCH_H
#define MLSYS_BENCH_H

#include "../mlsys.h"

/* What one measurement calls: the collective and its arguments, and how it is timed. */
typedef struct bench_call {
    mlsys_coll coll;
    mlsys_dtype dt;
    mlsys_op op;              /* reductions only */
    int root;                 /* rooted collectives only */
    long iters, warmup;       /* timed calls, untimed calls before them */
    int check;                /* 1: one more call on fresh inputs, checked element by element */
    int per_call;             /* 1: also time each call alone (min_us): a clock read per call */
    const char *who;          /* prefix of error messages; NULL: "mlsys-lab bench" */
} bench_call;

/* One measured placement of one size. Every rank gets the same numbers. */
typedef struct bench_result {
    uint64_t bytes;           /* S actually used: count x element size (x n for per-rank) */
    size_t count;             /* the count argument of the call; 0: nothing was measured */
    double time_us;           /* max over ranks of each rank's average per call */
    double min_us;            /* max over ranks of each rank's fastest call (per_call), else 0 */
    double algbw, busbw;      /* GB/s of 1e9 bytes: S / time, algbw x the nccl-tests factor */
    uint64_t wrong;           /* wrong elements summed over ranks (0 without check) */
    const char *algo;         /* what ran: mlsys_last_algo after any fallback */
} bench_result;

typedef struct bench_ctx bench_ctx;

/* ---- measure.c ---- */
/* The count argument for a requested size of bytes on n ranks, and the S it really uses
 * (rounded down to whole elements, and to n blocks for per-rank collectives). */
size_t bench_count(const bench_call *k, uint64_t bytes, int n, uint64_t *used);
/* Every rank of c: the buffers for requested sizes up to max_bytes, and the known inputs.
 * MLSYS_BENCH_INJECT=1 in the environment corrupts one checked element (a test hook). */
bench_ctx *bench_ctx_new(mlsys_comm *c, const bench_call *k, uint64_t max_bytes);
void bench_ctx_free(bench_ctx *b);
/* Collective over c: forces algorithm algo ("auto", a name of the collective's table or
 * "native") for k->coll and leaves it so, then warm-up, one barrier, iters calls with nothing
 * else inside the timed loop, the max over ranks, and the check outside the loop.
 * inplace: 0 out-of-place, 1 in-place (the conventions of mlsys.h). Returns 0, or 1 after
 * one line on stderr naming the rank, the call and the size. */
int bench_measure(bench_ctx *b, uint64_t bytes, int inplace, const char *algo, bench_result *r);

/* ---- cost_model.c ---- */
/* Collectives whose count is per rank (the table size S is the whole buffer of n blocks);
 * those that reduce; those with a root. */
int bench_per_rank_count(mlsys_coll coll);
int bench_is_reduction(mlsys_coll coll);
int bench_is_rooted(mlsys_coll coll);
/* Elements of the send and of the receive buffer that one call of count uses on n ranks. */
size_t bench_send_elems(mlsys_coll coll, size_t count, int n);
size_t bench_recv_elems(mlsys_coll coll, size_t count, int n);
/* busbw = algbw x this (2(n-1)/n all_reduce, (n-1)/n all_gather, reduce_scatter, ..., 1
 * broadcast and reduce); the formula as text; why, in one line. */
double bench_busbw_factor(mlsys_coll coll, int n);
const char *bench_busbw_formula(mlsys_coll coll);
const char *bench_busbw_reason(mlsys_coll coll);
/* The alpha-beta prediction in us of algo for a size of S bytes on n ranks, alpha in us per
 * message, beta in GB/s per link; -1 when there is no model of that algorithm. It is linear
 * in alpha and 1/beta. */
double bench_model_us(mlsys_coll coll, const char *algo, double S, int n, double alpha_us,
                      double beta_gbs);

#endif
