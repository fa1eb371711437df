/* ch08-admission - reference solution. A seat in the batch, room in the KV pool for the
 * whole prompt (so that a request admitted now is not preempted by its own prefill), and
 * some of the step's token budget; then as much of the prompt as the budget allows: a long
 * prompt is prefilled in chunks over several steps (chunked prefill). */
#include "api.h"

int admit_rule(const llm_admit_query *q, void *u)
{
    (void)u;
    if (q->running >= q->max_num_seqs)
        return 0;                       /* no seat */
    if (q->need_blocks > q->free_blocks)
        return 0;                       /* its prompt's blocks do not fit: wait */
    if (q->budget <= 0)
        return 0;
    return q->prompt_left < q->budget ? q->prompt_left : q->budget;
}
