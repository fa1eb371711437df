/* ch07-1f1b - reference solution. The order of each stage first: P-1-s warm-up forwards
 * (at most M), then alternate one forward and one backward while forwards remain, then the
 * remaining backwards. Then the slots: every task starts as early as its stage and its
 * dependency allow, stage by stage in a sweep that repeats until all are placed (the order
 * is deadlock-free, so each sweep places at least one task). */
#include "api.h"
#include <stdlib.h>

int build_1f1b(int P, int M, pp_task *tasks)
{
    if (P < 1 || M < 1)
        return -1;
    for (int s = 0; s < P; s++) {
        pp_task *t = tasks + (size_t)s * 2 * M;
        int warm = P - 1 - s < M ? P - 1 - s : M, f = 0, b = 0, k = 0;
        while (f < warm)
            t[k++] = (pp_task){'F', f++, -1};
        while (f < M) {
            t[k++] = (pp_task){'F', f++, -1};
            t[k++] = (pp_task){'B', b++, -1};
        }
        while (b < M)
            t[k++] = (pp_task){'B', b++, -1};
    }
    /* end[s][kind][mb]: the slot after the task ends, -1 while unplaced */
    int *fend = malloc(sizeof(int) * (size_t)P * M), *bend = malloc(sizeof(int) * (size_t)P * M);
    int *next = calloc((size_t)P, sizeof(int)), *free_at = calloc((size_t)P, sizeof(int));
    if (!fend || !bend || !next || !free_at) {
        free(fend); free(bend); free(next); free(free_at);
        return -1;
    }
    for (int i = 0; i < P * M; i++)
        fend[i] = bend[i] = -1;
    int left = 2 * M * P;
    while (left > 0) {
        for (int s = 0; s < P; s++)
            while (next[s] < 2 * M) {
                pp_task *t = tasks + (size_t)s * 2 * M + next[s];
                int dep;
                if (t->kind == 'F')
                    dep = s == 0 ? 0 : fend[(s - 1) * M + t->mb];
                else
                    dep = s == P - 1 ? fend[s * M + t->mb] : bend[(s + 1) * M + t->mb];
                if (dep < 0)
                    break;                  /* its dependency is not placed yet */
                t->slot = dep > free_at[s] ? dep : free_at[s];
                free_at[s] = t->slot + 1;
                (t->kind == 'F' ? fend : bend)[s * M + t->mb] = t->slot + 1;
                next[s]++;
                left--;
            }
    }
    free(fend); free(bend); free(next); free(free_at);
    return 0;
}
