/* api.h - ch08-admission: the continuous-batching admission rule, the function the learner
 * writes, as the serving engine calls it (core/llm/engine.h: llm_admit_query). */
#ifndef EX_API_H
#define EX_API_H
#include "llm/engine.h"

/* The engine plans a step: first the running requests (one decode row each, or their next
 * prompt chunk), then the waiting requests, oldest first. For each waiting request it asks
 * this rule how many of its prompt tokens to compute in this step; 0 means it keeps waiting,
 * and so does everyone behind it (first come, first served). q holds:
 *   running       sequences in this step's batch so far    max_num_seqs  the most there may be
 *   budget        tokens left of the step's token budget  (prompt rows and decode rows share it)
 *   free_blocks   KV blocks the pool can hand out now      need_blocks   blocks its whole
 *                                                                        remaining prompt takes
 *   prompt_left   prompt tokens it still has to compute    admitted, waiting: for rules of
 *                                                                        your own
 * Return the tokens to compute now (0 .. min(prompt_left, budget)). u is unused (NULL). */
int admit_rule(const llm_admit_query *q, void *u);

#endif
