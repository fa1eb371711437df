/* api.h - ch01-torchrun-env: the function the learner writes, as the check calls it. */
#ifndef EX_API_H
#define EX_API_H

/* Print RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT as NAME=value lines on
 * stdout, with the value "not set" for a variable that is missing. */
void print_env(void);

#endif
