/* bench_cmd.h - what the two halves of `mlsys-lab bench` share: the options the command
 * parsed (bench.c, which the ranks inherit through fork) and the rank's work with rank 0's
 * tables (bench_rank.c). The measuring engine itself is core/bench/bench.h. */
#ifndef MLSYS_CLI_BENCH_CMD_H
#define MLSYS_CLI_BENCH_CMD_H

#include "../../core/bench/bench.h"
#include "cli.h"

#define BENCH_MAX_SIZES 4096
#define BENCH_MAX_RANKS 64
#define BENCH_EXIT_WRONG 3          /* rank 0's status when some results were wrong */

/* What the runner parsed; the ranks inherit it through fork. */
typedef struct bench_cfg {
    mlsys_coll coll;
    uint64_t minbytes, maxbytes, stepbytes;
    long stepfactor;
    long iters, warmup;
    int check;
    mlsys_op op;
    mlsys_dtype dt;
    int root;
    const char *json_path;
    int world_size;
    const char *algo;            /* "auto", "all" or a name of the collective's table */
    double timeout_s;
    double alpha_us, beta_gbs;   /* cost model, both > 0 when on */
    int memcpy_mode;
    int mpi;                     /* --backend mpi: the ranks run under mpirun */
    int mpi_rank;                /* this process is one of those ranks (hidden --mpi-rank) */
    int size_list;               /* sizes came from --sizes */
    uint64_t *sizes;             /* the requested sizes S (bytes), in order */
    int nsizes;
    const char *algos[32];       /* the tables to print: one algorithm name each */
    int nalgos;
} bench_cfg;

/* One measured placement (out-of-place or in-place) of one size. */
typedef struct bench_cell {
    double time_us, algbw, busbw;
    uint64_t wrong;
} bench_cell;

typedef struct bench_row {
    uint64_t bytes;              /* S actually used: count * esize (* n for per-rank counts) */
    size_t count;                /* the count argument of the call */
    bench_cell cell[2];          /* [0] out-of-place, [1] in-place */
    const char *algo;            /* what ran (mlsys_last_algo), after any fallback */
    const char *decided;         /* what mlsys_algo_decide names for this size */
    const char *why;
    double model_us;             /* alpha-beta prediction, < 0 when unknown */
} bench_row;

/* bench_rank.c */
/* One rank of the job (arg: the bench_cfg): every size and algorithm measured, rank 0
 * printing the tables (and the JSON). 0, 1 on an error, BENCH_EXIT_WRONG when results were
 * wrong. */
int bench_rank_main(mlsys_comm *c, void *arg);
/* --memcpy: the one-core ceiling at maxbytes, in this process. */
int bench_memcpy(const bench_cfg *g);

#endif
