/* ch10-overlap - overlap the CPU's scheduling with the GPU's compute (api.h).
 *
 * This starter runs the three phases of every batch one after the other on one thread:
 * correct, but the GPU idles while the CPU schedules and the CPU idles while the GPU
 * computes. Start a thread for compute, and schedule batch i+1 while it computes batch i.
 *
 * The check runs your function in one process on drawn batch counts and phase lengths
 * (seed printed; `mlsys-lab check ch10-overlap --seed S` reruns it): each phase exactly
 * once, the order rules of api.h, and the overlap itself: compute(i) waits (up to 1 s) for
 * schedule(i+1) to begin, so a run without overlap is named at the batch where it happens.
 * It also prints your run's time beside N(s + c + p) and (s + c + p) + (N - 1)(max(s, c) + p)
 * (not checked: times on a shared machine vary).
 *
 *   mlsys-lab check ch10-overlap      mlsys-lab hint ch10-overlap */
#include "api.h"
#include <pthread.h>

int run_overlapped(int n, const batch_ops *ops)
{
    for (int i = 0; i < n; i++) {
        ops->schedule(ops->u, i);
        ops->compute(ops->u, i);      /* TODO: on a thread of its own */
        ops->post(ops->u, i);
    }
    return 0;
}
