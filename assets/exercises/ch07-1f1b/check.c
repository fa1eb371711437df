/* check.c - ch07-1f1b, one rank (see ../harness.h). For P and M drawn from the seed, each
 * failure naming the stage, slot and micro-batch: one F and one B per (stage, micro-batch);
 * one task per slot, in order; F after the previous stage's F, B after the next stage's B
 * (the last stage: after its F); at most min(P - s, M) micro-batches in flight on stage s;
 * 2(M + P - 1) slots in all, the bubble (P - 1)/(M + P - 1). */
#include "harness.h"
#include "api.h"

static void check_schedule(harness *h, int P, int M, const pp_task *t)
{
    int n = 2 * M;
    int *fs = malloc(sizeof(int) * (size_t)P * M), *bs = malloc(sizeof(int) * (size_t)P * M);
    if (!fs || !bs)
        abort();
    for (int i = 0; i < P * M; i++)
        fs[i] = bs[i] = -1;
    int last = 0;
    for (int s = 0; s < P && !h->failed; s++)
        for (int k = 0; k < n && !h->failed; k++) {
            const pp_task *x = t + (size_t)s * n + k;
            if ((x->kind != 'F' && x->kind != 'B') || x->mb < 0 || x->mb >= M || x->slot < 0) {
                h_fail(h, "stage %d, task %d: kind '%c', micro-batch %d, slot %d: "
                       "want 'F' or 'B', micro-batch 0..%d, slot >= 0", s, k,
                       x->kind >= 32 && x->kind < 127 ? x->kind : '?', x->mb, x->slot, M - 1);
                break;
            }
            int *at = x->kind == 'F' ? fs : bs;
            if (at[s * M + x->mb] >= 0) {
                h_fail(h, "stage %d runs %c of micro-batch %d twice (slots %d and %d)",
                       s, x->kind, x->mb, at[s * M + x->mb], x->slot);
                break;
            }
            at[s * M + x->mb] = x->slot;
            if (k > 0 && x->slot <= t[(size_t)s * n + k - 1].slot)
                h_fail(h, "stage %d runs %c%d in slot %d after %c%d in slot %d: one "
                       "task per slot, in the order listed", s, x->kind, x->mb, x->slot,
                       t[(size_t)s * n + k - 1].kind, t[(size_t)s * n + k - 1].mb,
                       t[(size_t)s * n + k - 1].slot);
            if (x->slot + 1 > last)
                last = x->slot + 1;
        }
    /* dependencies */
    for (int s = 0; s < P && !h->failed; s++)
        for (int m = 0; m < M && !h->failed; m++) {
            int f = fs[s * M + m], b = bs[s * M + m];
            if (s > 0 && f <= fs[(s - 1) * M + m])
                h_fail(h, "stage %d runs F%d in slot %d, but stage %d's F%d ends only "
                       "after slot %d", s, m, f, s - 1, m, fs[(s - 1) * M + m]);
            else if (s < P - 1 && b <= bs[(s + 1) * M + m])
                h_fail(h, "stage %d runs B%d in slot %d, but stage %d's B%d ends only "
                       "after slot %d", s, m, b, s + 1, m, bs[(s + 1) * M + m]);
            else if (s == P - 1 && b <= f)
                h_fail(h, "the last stage %d runs B%d in slot %d, before its own F%d "
                       "(slot %d) has ended", s, m, b, m, f);
        }
    /* micro-batches in flight: from the start of F to the end of B */
    for (int s = 0; s < P && !h->failed; s++) {
        int cap = P - s < M ? P - s : M;
        for (int slot = 0; slot < last && !h->failed; slot++) {
            int held = 0;
            for (int m = 0; m < M; m++)
                held += fs[s * M + m] <= slot && slot <= bs[s * M + m];
            if (held > cap)
                h_fail(h, "stage %d holds %d micro-batches in slot %d; 1F1B holds at "
                       "most min(P - s, M) = %d there", s, held, slot, cap);
        }
    }
    int want = 2 * (M + P - 1);
    if (!h->failed && last != want)
        h_fail(h, "the schedule takes %d slots, a bubble of %.1f %%; 1F1B takes "
               "2(M + P - 1) = %d, a bubble of (P - 1)/(M + P - 1) = %.1f %%", last,
               100.0 * (P * (double)last - 2.0 * M * P) / (P * (double)last), want,
               100.0 * (P - 1) / (M + P - 1));
    free(fs);
    free(bs);
}

static void one_case(harness *h, int P, int M)
{
    h_case(h, "P=%d, M=%d", P, M);
    pp_task *t = malloc(sizeof(pp_task) * (size_t)P * 2 * M);
    if (!t)
        abort();
    for (int i = 0; i < P * 2 * M; i++)
        t[i] = (pp_task){'?', -1, -1};
    int rc = build_1f1b(P, M, t);
    h_returned(h, rc, "build_1f1b");
    check_schedule(h, P, M, t);
    free(t);
}

static void ex_check_main(harness *h)
{
    mlsys_rng g;
    mlsys_rng_seed(&g, h->seed);
    /* two drawn with M >= P, two with M < P, one deep pipeline; then the edges */
    int cases[8][2];
    for (int i = 0; i < 5; i++) {
        int P = 2 + (int)(mlsys_rng_u64(&g) % 7);
        int M = i < 2 ? P + (int)(mlsys_rng_u64(&g) % 9) :
                i < 4 ? 1 + (int)(mlsys_rng_u64(&g) % (P - 1)) : 1 + (int)(mlsys_rng_u64(&g) % 16);
        cases[i][0] = P;
        cases[i][1] = M;
    }
    cases[5][0] = 1; cases[5][1] = 1 + (int)(mlsys_rng_u64(&g) % 8);
    cases[6][0] = 2 + (int)(mlsys_rng_u64(&g) % 7); cases[6][1] = 1;
    cases[7][0] = 8; cases[7][1] = 16;
    for (int i = 0; i < 8; i++) {
        one_case(h, cases[i][0], cases[i][1]);
        if (!h_case_end(h))
            return;
    }
}
