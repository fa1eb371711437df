/* ch01-even-odd - reference solution: branch on the rank. Ranks share the code, not the
 * control flow: rank % 2 picks the branch, so half the processes take each one. */
#include <stdio.h>
#include "api.h"

void on_rank_hello(int rank, int world_size)
{
    printf("Rank %d of %d: hello\n", rank, world_size);
    if (rank % 2 == 0)
        printf("Rank %d: working on the even data\n", rank);
    else
        printf("Rank %d: working on the odd data\n", rank);
}
