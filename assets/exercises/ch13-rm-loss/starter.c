/* ch13-rm-loss - the reward model's pairwise loss and its gradient (see api.h).
 *
 * Before RLHF, the reward model learns from comparisons: for each pair, people preferred
 * response w over response l. The model should score w higher; the loss -log sigmoid(r_w -
 * r_l) is the negative log-likelihood of the observed preference under Bradley-Terry.
 *
 * The check (one rank): hand values (margin 0 -> log 2 = 0.693147, gradients -/+ 0.5/n),
 * then 20 seeded batches of 1..512 pairs, some with margins past +-1000 (where exp overflows
 * even a double and log(1 + exp(x)) written naively is inf), against a stable reference
 * within 1e-5, and your gradient against central differences (h = 1e-2) of your own loss
 * where the margins are moderate.
 * Failures name the batch and the pair. The seed is printed.
 *
 *   mlsys-lab check ch13-rm-loss      mlsys-lab hint ch13-rm-loss */
#include "api.h"
#include <math.h>

double rm_pairwise_loss(const float *r_w, const float *r_l, int n, float *d_rw, float *d_rl)
{
    double sum = 0.0;
    for (int i = 0; i < n; i++) {
        double m = (double)r_w[i] - r_l[i];
        /* TODO: -log sigmoid(m), written so that it never overflows; and the gradient */
        sum += -m;
        if (d_rw)
            d_rw[i] = 0.0f;
        if (d_rl)
            d_rl[i] = 0.0f;
    }
    return sum / n;
}
