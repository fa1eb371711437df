/* ch01-even-odd - different work on different ranks.
 *
 * Every rank runs the same program; the rank number is how they do different things.
 * on_rank_hello() is called once on every rank. Make even ranks print a line containing
 * "even data" and odd ranks a line containing "odd data" (exactly one such line each,
 * besides the hello line that is already there).
 *
 * The check runs N = 3, 4 and 8 ranks and reads what each rank printed.
 *
 *   mlsys-lab check ch01-even-odd      mlsys-lab hint ch01-even-odd */
#include <stdio.h>
#include "api.h"

void on_rank_hello(int rank, int world_size)
{
    printf("Rank %d of %d: hello\n", rank, world_size);
    /* TODO: one line with "even data" on even ranks, "odd data" on odd ranks */
}
