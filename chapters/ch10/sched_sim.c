/* sched_sim.c - the original scheduling-overhead script's model (curriculum 10.3) on a virtual
 * clock, so its figures are the formulas exactly: sequential batches cost s + c + p each; the
 * "overlapped" ones (nothing ran concurrently in the original: the overlap was a max()) cost
 * max(s, c) + p after the first, post-processing still on the critical path. Beside it the
 * loop SGLang's overlap scheduler runs: batch n's results are processed, and batch n + 2
 * scheduled, while batch n + 1 computes, so a batch costs max(c, s + p). Then the two-lane
 * drawings and the analysis. */
#include "sched_sim.h"

#include <stdio.h>
#include <string.h>

typedef struct sim_totals {
    double total, sched, compute, post;     /* ms, summed over the batches */
} sim_totals;

typedef enum { SIM_SEQUENTIAL, SIM_ORIGINAL, SIM_SGLANG } sim_loop;

/* What each batch adds to the critical path. The first batch runs s, c and p in turn in
 * every loop; after it the original's hides s under the previous compute (max(s, c) + p),
 * SGLang's hides s and the previous batch's p under this compute (max(c, s + p)). */
static void simulate(long n, double s, double c, double p, sim_loop loop, sim_totals *t)
{
    memset(t, 0, sizeof *t);
    for (long i = 0; i < n; i++) {
        double si = s, ci = c, pi = p;
        if (loop == SIM_ORIGINAL && i > 0) {
            si = 0;                     /* hidden under the previous batch's compute */
            ci = c > s ? c : s;
        } else if (loop == SIM_SGLANG && i > 0) {
            si = pi = 0;                /* both under this batch's compute */
            ci = c > s + p ? c : s + p;
        }
        t->sched += si;
        t->compute += ci;
        t->post += pi;
        t->total += si + ci + pi;
    }
}

static void print_strategy(const char *name, long n, const sim_totals *t)
{
    double per = t->total / (double)n;
    printf("%s\n  total %.2f ms, %.2f batches/s\n", name, t->total,
           (double)n / (t->total / 1000.0));
    printf("  per batch: schedule %.2f ms, compute %.2f ms, post-process %.2f ms, total "
           "%.2f ms\n", t->sched / (double)n, t->compute / (double)n, t->post / (double)n, per);
    printf("  CPU overhead %.1f%% of the time\n",
           100.0 * (t->sched + t->post) / t->total);
}

static void run_of(char *line, int *len, int cap, char ch, int count)
{
    for (int i = 0; i < count && *len < cap - 1; i++)
        line[(*len)++] = ch;
    line[*len] = 0;
}

/* 4 batches at 2 characters per ms (lengths truncated): S schedule, C compute, P
 * post-process, '.' idle. */
static void draw(double s, double c, double p)
{
    enum { CAP = 512 };
    char cpu[CAP], gpu[CAP];
    int nc = 0, ng = 0, S = (int)(2 * s), C = (int)(2 * c), P = (int)(2 * p);
    int M = (int)(2 * (c > s ? c : s)), gap = s <= c ? (int)(2 * (c - s)) : 0;
    if (4 * (S + C + P) + S >= CAP - 1) {
        printf("\n(the drawing needs more than %d columns at 2 per ms: not drawn)\n", CAP);
        return;
    }
    printf("\nTimeline, 4 batches, 2 characters per ms (S schedule, C compute, P "
           "post-process, . idle)\nSequential:\n");
    for (int b = 0; b < 4; b++) {
        run_of(cpu, &nc, CAP, 'S', S), run_of(cpu, &nc, CAP, '.', C);
        run_of(cpu, &nc, CAP, 'P', P);
        run_of(gpu, &ng, CAP, '.', S), run_of(gpu, &ng, CAP, 'C', C);
        run_of(gpu, &ng, CAP, '.', P);
    }
    printf("  CPU |%s|\n  GPU |%s|\n", cpu, gpu);
    nc = ng = 0;
    run_of(cpu, &nc, CAP, 'S', S);
    run_of(gpu, &ng, CAP, '.', S);
    for (int b = 0; b < 4; b++) {
        run_of(cpu, &nc, CAP, 'S', S);
        run_of(cpu, &nc, CAP, '.', gap);
        run_of(gpu, &ng, CAP, 'C', M);
        run_of(cpu, &nc, CAP, 'P', P);
        run_of(gpu, &ng, CAP, '.', P);
    }
    printf("Overlapped, the original's loop (the next batch scheduled under this one):\n");
    printf("  CPU |%s|\n  GPU |%s|\n", cpu, gpu);
    /* SGLang's: under batch b's compute the CPU processes b - 1's results and schedules
     * b + 1; the GPU runs the batches back to back unless s + p is longer than c */
    int step = (int)(2 * (c > s + p ? c : s + p));
    nc = ng = 0;
    run_of(cpu, &nc, CAP, 'S', S);
    run_of(gpu, &ng, CAP, '.', S);
    for (int b = 0; b < 4; b++) {
        int busy = 0;
        if (b > 0)
            run_of(cpu, &nc, CAP, 'P', P), busy += P;
        if (b < 3)
            run_of(cpu, &nc, CAP, 'S', S), busy += S;
        run_of(cpu, &nc, CAP, '.', step - busy);
        run_of(gpu, &ng, CAP, 'C', C);
        run_of(gpu, &ng, CAP, '.', step - C);
    }
    run_of(cpu, &nc, CAP, 'P', P);
    run_of(gpu, &ng, CAP, '.', P);
    printf("Overlapped, SGLang's loop (results handled under the next compute):\n");
    printf("  CPU |%s|\n  GPU |%s|\n", cpu, gpu);
}

void sched_sim_print(long n, double s, double c, double p)
{
    sim_totals seq, ovl, sgl;
    simulate(n, s, c, p, SIM_SEQUENTIAL, &seq);
    simulate(n, s, c, p, SIM_ORIGINAL, &ovl);
    simulate(n, s, c, p, SIM_SGLANG, &sgl);
    printf("SIMULATION (the original's model on a virtual clock, not a measurement):\n"
           "  %ld batches; scheduling %.2f ms, compute %.2f ms, post-processing %.2f ms each\n"
           "  the overlap is modelled as a max(): nothing runs at once\n\n",
           n, s, c, p);
    print_strategy("Sequential:", n, &seq);
    print_strategy("Overlapped, the original's loop (post-processing on the critical path):",
                   n, &ovl);
    print_strategy("Overlapped, SGLang's loop (batch n's results handled under batch n+1):",
                   n, &sgl);
    printf("\nComparison:\n  sequential  %.2f ms = N (s + c + p)\n  original    %.2f ms = (s + c "
           "+ p) + (N - 1) (max(s, c) + p)\n  speedup %.2fx, saved %.2f ms (%.1f%%)\n",
           seq.total, ovl.total, seq.total / ovl.total, seq.total - ovl.total,
           100.0 * (seq.total - ovl.total) / seq.total);
    printf("  SGLang's    %.2f ms = (s + c + p) + (N - 1) max(c, s + p)\n  speedup %.2fx, saved "
           "%.2f ms (%.1f%%)\n", sgl.total, seq.total / sgl.total, seq.total - sgl.total,
           100.0 * (seq.total - sgl.total) / seq.total);
    draw(s, c, p);
    printf("\nAnalysis:\n  without overlap: overhead per batch s + p = %.1f ms of s + c + p = "
           "%.1f ms: overhead %.1f%%\n", s + p, s + c + p, 100.0 * (s + p) / (s + c + p));
    printf("  the original's: only p = %.1f ms stays in the way: reduction %.0f%% (s / (s + "
           "p))\n", p, 100.0 * s / (s + p));
    printf("  SGLang's: nothing stays while s + p <= c (here %.1f <= %.1f: %s):\n"
           "  the GPU runs the batches back to back; the price is planning batch n + 1\n"
           "  before batch n's tokens exist (futures, the chapter's FutureMap)\n", s + p, c,
           s + p <= c ? "yes" : "no, s + p - c per batch remains");
    printf("  helps most: long compute, costly scheduling, batched decoding;\n"
           "  least: short compute, scheduling longer than compute (then s + p per batch),\n"
           "  batches that depend tightly on the previous one's results.\n");
}
