/* check.c - ch10-overlap, one rank (see ../harness.h). The phases are stubs that sleep and
 * log under a lock; the first broken rule (a phase twice or out of order, compute before its
 * schedule ended, post before its compute, a wrong result) is named with its batch. Overlap
 * is required, not timed: compute(i) waits up to 1 s for schedule(i+1) to begin. The run's
 * time is printed beside the sequential and overlapped formulas, for information. */
#include "harness.h"
#include "api.h"
#include <errno.h>
#include <pthread.h>
#include <time.h>

#define MAXN 64

typedef struct run {
    harness *h;
    int n;
    int s_us, c_us, p_us;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int sched_started[MAXN], sched_done[MAXN], comp_done[MAXN], posted[MAXN];
    int ncalls[3][MAXN];
    int busy, next_comp, next_post, no_wait;
    long value[MAXN], result[MAXN];
    char why[300];
} run;

static void sleep_us(int us)
{
    struct timespec ts = {us / 1000000, (long)(us % 1000000) * 1000};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
        ;
}

/* The first violation, kept (under the lock). */
static void violate(run *r, const char *fmt, int a, int b)
{
    if (!r->why[0])
        snprintf(r->why, sizeof r->why, fmt, a, b);
    r->no_wait = 1;
    pthread_cond_broadcast(&r->cv);
}

static int bad_index(run *r, int i, int phase)
{
    static const char *const names[] = {"schedule", "compute", "post"};
    if (i < 0 || i >= r->n) {
        char f[120];
        snprintf(f, sizeof f, "%s(%%d) called: batches are 0..%%d", names[phase]);
        violate(r, f, i, r->n - 1);
        return 1;
    }
    if (++r->ncalls[phase][i] > 1) {
        char f[120];
        snprintf(f, sizeof f, "%s(%%d) called %%d times: each phase runs once", names[phase]);
        violate(r, f, i, r->ncalls[phase][i]);
        return 1;
    }
    return 0;
}

static void st_schedule(void *u, int i)
{
    run *r = u;
    pthread_mutex_lock(&r->mu);
    if (bad_index(r, i, 0)) {
        pthread_mutex_unlock(&r->mu);
        return;
    }
    r->sched_started[i] = 1;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
    sleep_us(r->s_us);
    pthread_mutex_lock(&r->mu);
    r->value[i] = 1000 + 7L * i;
    r->sched_done[i] = 1;
    pthread_mutex_unlock(&r->mu);
}

static void st_compute(void *u, int i)
{
    run *r = u;
    pthread_mutex_lock(&r->mu);
    if (bad_index(r, i, 1)) {
        pthread_mutex_unlock(&r->mu);
        return;
    }
    if (!r->sched_done[i])
        violate(r, "compute(%d) started before schedule(%d) returned", i, i);
    else if (r->busy)
        violate(r, "compute(%d) started while compute(%d) still ran: one batch at a time", i,
                i - 1);
    else if (i != r->next_comp)
        violate(r, "compute(%d) ran before compute(%d): in order", i, r->next_comp);
    r->busy = 1;
    r->next_comp = i + 1;
    /* the overlap: batch i+1 must be scheduled while this one computes */
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_sec += 1;
    while (i + 1 < r->n && !r->sched_started[i + 1] && !r->no_wait)
        if (pthread_cond_timedwait(&r->cv, &r->mu, &dl) == ETIMEDOUT) {
            violate(r, "no overlap at batch %d: for 1 s of compute(%d), schedule of the next "
                    "batch never began (the CPU waited for the GPU)", i, i);
            break;
        }
    long v = r->value[i];
    pthread_mutex_unlock(&r->mu);
    sleep_us(r->c_us);
    pthread_mutex_lock(&r->mu);
    r->result[i] = 3 * v + 1;
    r->comp_done[i] = 1;
    r->busy = 0;
    pthread_mutex_unlock(&r->mu);
}

static void st_post(void *u, int i)
{
    run *r = u;
    pthread_mutex_lock(&r->mu);
    if (bad_index(r, i, 2)) {
        pthread_mutex_unlock(&r->mu);
        return;
    }
    if (!r->comp_done[i])
        violate(r, "post(%d) started before compute(%d) returned", i, i);
    else if (i != r->next_post)
        violate(r, "post(%d) ran before post(%d): in order", i, r->next_post);
    else if (r->result[i] != 3 * (1000 + 7L * i) + 1)
        violate(r, "post(%d) found batch %d's result wrong", i, i);
    r->next_post = i + 1;
    r->posted[i] = 1;
    pthread_mutex_unlock(&r->mu);
    sleep_us(r->p_us);
}

static void one_case(harness *h, int n, int s_us, int c_us, int p_us)
{
    h_case(h, "%d batch%s, schedule %.1f ms, compute %.1f ms, post %.1f ms", n,
           n == 1 ? "" : "es", s_us / 1e3, c_us / 1e3, p_us / 1e3);
    run *r = calloc(1, sizeof *r);
    if (!r)
        abort();
    r->h = h;
    r->n = n;
    r->s_us = s_us;
    r->c_us = c_us;
    r->p_us = p_us;
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->cv, NULL);
    batch_ops ops = {st_schedule, st_compute, st_post, r};
    double t0 = mlsys_now_s();
    int rc = run_overlapped(n, &ops);
    double ms = 1e3 * (mlsys_now_s() - t0);
    h_returned(h, rc, "run_overlapped");
    pthread_mutex_lock(&r->mu);
    if (r->why[0])
        h_fail(h, "%s", r->why);
    for (int i = 0; i < n && !h->failed; i++)
        if (!r->posted[i] || !r->comp_done[i] || !r->sched_done[i])
            h_fail(h, "batch %d: run_overlapped returned before its %s", i,
                   !r->sched_done[i] ? "schedule" : !r->comp_done[i] ? "compute" : "post");
    pthread_mutex_unlock(&r->mu);
    if (!h->failed) {
        double s = s_us / 1e3, c = c_us / 1e3, p = p_us / 1e3;
        double seq = n * (s + c + p), ovl = (s + c + p) + (n - 1) * (fmax(s, c) + p);
        h_info(h, "%d batch%s (s %.1f, c %.1f, p %.1f ms): yours %.1f ms; sequential N(s+c+p) "
               "= %.1f, overlapped (s+c+p) + (N-1)(max(s,c)+p) = %.1f: speed-up %.2fx of the "
               "formula's %.2fx (sleeps overshoot on a busy machine)", n, n == 1 ? "" : "es",
               s, c, p, ms, seq, ovl, seq / ms, seq / ovl);
    }
    pthread_mutex_destroy(&r->mu);
    pthread_cond_destroy(&r->cv);
    free(r);
}

static void ex_check_main(harness *h)
{
    mlsys_rng g;
    mlsys_rng_seed(&g, h->seed);
    int n = 8 + (int)(mlsys_rng_u64(&g) % 17);
    int c = 3000 + (int)(mlsys_rng_u64(&g) % 5) * 500, s = 500 + (int)(mlsys_rng_u64(&g) % 4) * 250;
    one_case(h, 1, s, c, 300);
    if (!h_case_end(h))
        return;
    one_case(h, n, s, c, 300);                  /* scheduling shorter than compute */
    if (!h_case_end(h))
        return;
    one_case(h, 6 + (int)(mlsys_rng_u64(&g) % 6), c, s, 0);   /* longer: the GPU waits */
    h_case_end(h);
}
