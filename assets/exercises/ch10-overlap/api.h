/* api.h - ch10-overlap: overlapping the CPU's scheduling of the next batch with the GPU's
 * compute of this one, the function the learner writes, as the check calls it. */
#ifndef EX_API_H
#define EX_API_H

/* The three phases of a batch, given by the check (each sleeps for its length):
 *   schedule(u, i)  the CPU prepares batch i
 *   compute(u, i)   the "GPU" runs batch i: one batch at a time, in order
 *   post(u, i)      the CPU handles batch i's result */
typedef struct batch_ops {
    void (*schedule)(void *u, int i);
    void (*compute)(void *u, int i);
    void (*post)(void *u, int i);
    void *u;
} batch_ops;

/* Run batches 0..n-1, each phase exactly once, with these rules:
 *   - compute(i) starts after schedule(i) has returned, and after compute(i-1) has returned;
 *   - post(i) starts after compute(i) has returned; posts in order;
 *   - OVERLAP: schedule(i+1) starts while compute(i) runs (compute needs a thread of its
 *     own: start one with pthread_create; the calling thread is the CPU).
 * Return 0 once every post has returned and your thread is joined; -1 on an error. */
int run_overlapped(int n, const batch_ops *ops);

#endif
