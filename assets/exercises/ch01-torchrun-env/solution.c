/* ch01-torchrun-env - reference solution: getenv() returns NULL for a missing variable,
 * so every lookup needs a default before it is printed. */
#include <stdio.h>
#include <stdlib.h>
#include "api.h"

void print_env(void)
{
    static const char *const names[] = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR",
                                        "MASTER_PORT"};
    for (int i = 0; i < 5; i++) {
        const char *v = getenv(names[i]);
        printf("%s=%s\n", names[i], v ? v : "not set");
    }
}
