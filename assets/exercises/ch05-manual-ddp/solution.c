/* ch05-manual-ddp - reference solution: broadcast from rank 0, then one all_reduce per
 * tensor and a division by N, exactly as the hand-written loop of ch05/simple-ddp does.
 *
 * Why divide: each rank's loss is the mean over its own B/N samples, so its gradient is a
 * shard mean. The whole batch's mean loss is the mean of the N shard means, and the
 * gradient is linear: SUM / N of the shard gradients is the whole batch's gradient. */
#include "mlsys.h"
#include "api.h"

int dp_broadcast_params(mlsys_comm *c, nn_params *p)
{
    for (int i = 0; i < p->count; i++) {
        int rc = mlsys_broadcast(c, p->t[i].data, p->t[i].numel, MLSYS_F32, 0);
        if (rc)
            return rc;
    }
    return 0;
}

int dp_sync_grads(mlsys_comm *c, nn_params *p)
{
    int n = mlsys_size(c);
    for (int i = 0; i < p->count; i++) {
        nn_tensor *t = &p->t[i];
        int rc = mlsys_allreduce(c, t->grad, t->grad, t->numel, MLSYS_F32, MLSYS_SUM);
        if (rc)
            return rc;
        for (size_t k = 0; k < t->numel; k++)
            t->grad[k] /= (float)n;
    }
    return 0;
}
