/* api.h - ch11-spec-accept: speculative decoding's acceptance rule at one drafted position,
 * the function the learner writes, as the check calls it. Its type is core/llm's seam
 * llm_spec_rule_fn: the engine (llm_engine_opts.spec_rule) can run it in place of the
 * standard one. */
#ifndef EX_API_H
#define EX_API_H
#include "mlsys.h"

/* p[V]: the target's distribution at this position, q[V]: the draft's, x: the drafted token
 * (it was drawn from q, so q[x] > 0). Keep x with probability min(1, p[x] / q[x]): return 1.
 * Otherwise return 0 with *y drawn from the residual norm(max(0, p - q)), the token that takes
 * x's place. Draw every random number from rng (mlsys_rng_uniform(rng) is uniform in [0, 1)).
 * With one-hot p and q (greedy decoding) this keeps x exactly when it is the target's argmax,
 * and *y is then the target's argmax. */
int spec_accept(const float *p, const float *q, int V, int x, mlsys_rng *rng, int *y);

#endif
