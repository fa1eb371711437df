/* api.h - ch07-1f1b: the 1F1B pipeline schedule generator, as the check calls it. */
#ifndef EX_API_H
#define EX_API_H

/* One task of one stage: the forward ('F') or backward ('B') of micro-batch mb (0..M-1),
 * run in time slot `slot` (0, 1, ...; every task lasts one slot). */
typedef struct pp_task {
    char kind;
    int mb;
    int slot;
} pp_task;

/* Fill tasks[s·2M .. s·2M + 2M-1] with the 2M tasks of stage s (0..P-1), in the order the
 * stage runs them, for the 1F1B schedule of P stages and M micro-batches. The rules:
 *   - stage s runs F of micro-batch m after stage s-1's F of m has ended (an earlier slot);
 *   - stage s runs B of m after stage s+1's B of m has ended; the last stage, after its own
 *     F of m;
 *   - a stage runs at most one task per slot;
 *   - 1F1B: stage s holds at most min(P - s, M) micro-batches (from the start of a
 *     micro-batch's F to the end of its B on that stage);
 *   - and it is not slower than fill-drain: 2(M + P - 1) slots in all, so the bubble is
 *     (P - 1) / (M + P - 1).
 * Returns 0, or -1 when P or M is below 1. */
int build_1f1b(int P, int M, pp_task *tasks);

#endif
