/* api.h - ch05-manual-ddp: the two functions of hand-written data parallelism, as the check
 * calls them. The model's parameters and gradients live in one nn_params (core/nn/nn.h):
 * p->t[i] is tensor i (data, grad, numel), and p->data / p->grad hold all of them back to
 * back, p->numel floats each. */
#ifndef EX_API_H
#define EX_API_H
#include "mlsys.h"
#include "nn/nn.h"

/* Make every rank's parameters equal to rank 0's. Called once, before training.
 * Returns 0, or the runtime's error code when a call failed. */
int dp_broadcast_params(mlsys_comm *c, nn_params *p);

/* After backward: replace every rank's gradients by their mean over all ranks (all_reduce
 * SUM, then divide by the number of ranks). Returns 0, or the runtime's error code. */
int dp_sync_grads(mlsys_comm *c, nn_params *p);

#endif
