/* ch01-torchrun-env - the environment a launcher gives each rank.
 *
 * Like torchrun, our launcher tells every rank who it is through environment variables:
 * RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT. Make print_env() print each
 * as one line NAME=value, and NAME=not set for a variable that is missing.
 *
 * The check runs N = 2 and 4 ranks and compares every line with the rank's real place in
 * the job; then it unsets LOCAL_RANK and MASTER_PORT and expects "not set" for them.
 *
 *   mlsys-lab check ch01-torchrun-env      mlsys-lab hint ch01-torchrun-env */
#include <stdio.h>
#include <stdlib.h>
#include "api.h"

void print_env(void)
{
    const char *rank = getenv("RANK");
    printf("RANK=%s\n", rank ? rank : "not set");
    /* TODO: WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT, the same way */
}
