/* rank_fail.h - FAIL_IF for rank functions run by mlsys_run_fn: print the rank and the
 * reason on stderr and return 1, which ends the job with that rank named. Needs a
 * communicator called c in scope. Header-only: each suite is its own executable. */
#ifndef MLSYS_TEST_RANK_FAIL_H
#define MLSYS_TEST_RANK_FAIL_H

#include <stdio.h>

#define FAIL_IF(cond, ...)                                                                     \
    do {                                                                                       \
        if (cond) {                                                                            \
            fprintf(stderr, "rank %d: ", mlsys_rank(c));                                      \
            fprintf(stderr, __VA_ARGS__);                                                      \
            fprintf(stderr, "\n");                                                             \
            return 1;                                                                          \
        }                                                                                      \
    } while (0)

#endif
