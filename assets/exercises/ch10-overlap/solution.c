/* ch10-overlap - reference solution. A "GPU" thread computes the batches it is handed, in
 * order; the calling thread (the CPU) schedules batch i+1 as soon as batch i is handed over,
 * then waits for batch i's compute, post-processes it and hands over i+1. In the steady
 * state a batch costs max(schedule, compute) + post instead of their sum. */
#include "api.h"
#include <pthread.h>

typedef struct gpu {
    const batch_ops *ops;
    int n;
    int submitted, done;          /* batches handed over, batches computed */
    pthread_mutex_t mu;
    pthread_cond_t cv;
} gpu;

static void *gpu_main(void *arg)
{
    gpu *g = arg;
    for (int i = 0; i < g->n; i++) {
        pthread_mutex_lock(&g->mu);
        while (g->submitted <= i)
            pthread_cond_wait(&g->cv, &g->mu);
        pthread_mutex_unlock(&g->mu);
        g->ops->compute(g->ops->u, i);
        pthread_mutex_lock(&g->mu);
        g->done = i + 1;
        pthread_cond_broadcast(&g->cv);
        pthread_mutex_unlock(&g->mu);
    }
    return NULL;
}

static void submit(gpu *g, int i)
{
    pthread_mutex_lock(&g->mu);
    g->submitted = i + 1;
    pthread_cond_broadcast(&g->cv);
    pthread_mutex_unlock(&g->mu);
}

static void wait_done(gpu *g, int i)
{
    pthread_mutex_lock(&g->mu);
    while (g->done <= i)
        pthread_cond_wait(&g->cv, &g->mu);
    pthread_mutex_unlock(&g->mu);
}

int run_overlapped(int n, const batch_ops *ops)
{
    if (n <= 0)
        return 0;
    gpu g = {.ops = ops, .n = n};
    pthread_mutex_init(&g.mu, NULL);
    pthread_cond_init(&g.cv, NULL);
    pthread_t t;
    if (pthread_create(&t, NULL, gpu_main, &g) != 0)
        return -1;
    ops->schedule(ops->u, 0);
    submit(&g, 0);
    for (int i = 1; i < n; i++) {
        ops->schedule(ops->u, i);         /* while the GPU computes batch i-1 */
        wait_done(&g, i - 1);
        submit(&g, i);
        ops->post(ops->u, i - 1);
    }
    wait_done(&g, n - 1);
    ops->post(ops->u, n - 1);
    pthread_join(t, NULL);
    pthread_mutex_destroy(&g.mu);
    pthread_cond_destroy(&g.cv);
    return 0;
}
