/* ch05-manual-ddp - data parallelism by hand: the initial broadcast and the gradient sync.
 *
 * Every rank holds the whole model (a 16 -> 32 -> 4 MLP: tensors w1, b1, w2, b2 in an
 * nn_params, see api.h) and trains on its own 6 samples of each step's batch. Write:
 *   dp_broadcast_params()  every rank starts from rank 0's weights;
 *   dp_sync_grads()        one all_reduce(SUM) per parameter tensor, then divide by N.
 *
 * The check trains 5 SGD steps on 1, 2 and 4 ranks and asserts:
 *   - after dp_broadcast_params every rank holds rank 0's weights (the check starts the
 *     other ranks from slightly different weights on purpose);
 *   - after each dp_sync_grads the gradient equals one process's gradient on the whole
 *     batch (all ranks' samples together);
 *   - after 5 steps the parameters are bitwise identical on all ranks and equal that one
 *     process's parameters within 1e-5.
 *
 *   mlsys-lab check ch05-manual-ddp      mlsys-lab hint ch05-manual-ddp */
#include "mlsys.h"
#include "api.h"

int dp_broadcast_params(mlsys_comm *c, nn_params *p)
{
    (void)c;
    (void)p;
    /* TODO: give every rank rank 0's parameters */
    return 0;
}

int dp_sync_grads(mlsys_comm *c, nn_params *p)
{
    int n = mlsys_size(c);
    (void)n;
    (void)p;
    /* TODO: for each tensor p->t[i]: all_reduce its gradient (SUM), then divide by n */
    return 0;
}
