/* api.h - ch01-even-odd: the hook the learner writes, as the check calls it. */
#ifndef EX_API_H
#define EX_API_H

/* Called once on every rank with its rank and the world size; prints to stdout. */
void on_rank_hello(int rank, int world_size);

#endif
