/* ch08-admission - the continuous-batching admission rule (api.h).
 *
 * This starter is static batching's cousin that never looks at memory or seats: it admits
 * every prompt whole. Write the rule the engine uses: a free seat in the batch, room in the
 * KV pool for the whole remaining prompt, then as many prompt tokens as the step's budget
 * leaves (a longer prompt continues in the next steps).
 *
 * The check runs the real serving engine (a small model with seeded weights) on seeded
 * workloads (the seed is printed; `mlsys-lab check ch08-admission --seed S` reruns it) with
 * your rule, compares every decision with the reference rule's, and checks after each step
 * the batch limit, the token budget and the KV pool's invariants, naming the step and the
 * request where yours differs.
 *
 *   mlsys-lab check ch08-admission      mlsys-lab hint ch08-admission */
#include "api.h"

int admit_rule(const llm_admit_query *q, void *u)
{
    (void)u;
    /* TODO: when must a waiting request wait? (seats, blocks, budget) */
    return q->prompt_left;
}
