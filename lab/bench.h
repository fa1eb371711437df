/* bench.h - `mlsys-lab bench`, an nccl-tests-style benchmark of the collectives: one table
 * per algorithm with time, algbw, busbw and #wrong for out-of-place and in-place calls.
 * lab/main.c dispatches `mlsys-lab bench ...` to bench_main with argv[0] = "bench". */
#ifndef MLSYS_LAB_BENCH_H
#define MLSYS_LAB_BENCH_H

/* bench.c */
/* Parse the flags, run the job, print the table. Exit status: 0 fine, 1 the job failed or
 * some results were wrong, 2 a bad flag or value (one line on stderr). */
int bench_main(int argc, char **argv);

#endif
