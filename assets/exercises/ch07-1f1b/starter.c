/* ch07-1f1b - the 1F1B schedule generator (api.h).
 *
 * This starter builds fill-drain (GPipe): every stage runs all M forwards, then all M
 * backwards, each task placed in the earliest slot its stage and its dependency allow
 * (place_asap, which you may keep). It is correct but holds all M micro-batches on every
 * stage. Change the ORDER of each stage's tasks so that stage s never holds more than
 * min(P - s, M) micro-batches, in 2(M + P - 1) slots.
 *
 * The check runs your generator for P and M drawn from a seed (printed; rerun with
 * `mlsys-lab check ch07-1f1b --seed S`), P from 1 to 8 and M from 1 to 16, and names the
 * stage, slot and micro-batch where a rule breaks.
 *
 *   mlsys-lab check ch07-1f1b      mlsys-lab hint ch07-1f1b */
#include "api.h"
#include <stdlib.h>

/* Give every task, in each stage's order, the earliest slot after its stage's previous task
 * and after the task it depends on. 0, or -1 when the order can never run (a deadlock). */
static int place_asap(int P, int M, pp_task *tasks)
{
    int *fend = malloc(sizeof(int) * (size_t)P * M), *bend = malloc(sizeof(int) * (size_t)P * M);
    int *next = calloc((size_t)P, sizeof(int)), *free_at = calloc((size_t)P, sizeof(int));
    int rc = 0, left = 2 * M * P;
    if (!fend || !bend || !next || !free_at)
        rc = -1;
    for (int i = 0; !rc && i < P * M; i++)
        fend[i] = bend[i] = -1;
    while (!rc && left > 0) {
        int placed = 0;
        for (int s = 0; s < P; s++)
            while (next[s] < 2 * M) {
                pp_task *t = tasks + (size_t)s * 2 * M + next[s];
                int dep;
                if (t->kind == 'F')
                    dep = s == 0 ? 0 : fend[(s - 1) * M + t->mb];
                else
                    dep = s == P - 1 ? fend[s * M + t->mb] : bend[(s + 1) * M + t->mb];
                if (dep < 0)
                    break;
                t->slot = dep > free_at[s] ? dep : free_at[s];
                free_at[s] = t->slot + 1;
                (t->kind == 'F' ? fend : bend)[s * M + t->mb] = t->slot + 1;
                next[s]++;
                left--;
                placed++;
            }
        if (!placed)
            rc = -1;                        /* every stage waits for another: a deadlock */
    }
    free(fend); free(bend); free(next); free(free_at);
    return rc;
}

int build_1f1b(int P, int M, pp_task *tasks)
{
    if (P < 1 || M < 1)
        return -1;
    for (int s = 0; s < P; s++) {
        pp_task *t = tasks + (size_t)s * 2 * M;
        int k = 0;
        /* TODO: 1F1B runs a few warm-up forwards, then alternates one forward and one
         * backward, then drains the backwards. How many warm-up forwards on stage s? */
        for (int f = 0; f < M; f++)
            t[k++] = (pp_task){'F', f, -1};
        for (int b = 0; b < M; b++)
            t[k++] = (pp_task){'B', b, -1};
    }
    return place_asap(P, M, tasks);
}
