/* api.h - ch13-rm-loss: the pairwise loss a reward model is trained with, and its gradient,
 * the function the learner writes, as the check calls it. */
#ifndef EX_API_H
#define EX_API_H

/* n preference pairs: r_w[i] is the reward model's score of the response people preferred,
 * r_l[i] of the one they rejected. Returns the mean Bradley-Terry loss
 *   L = (1/n) * sum_i -log sigmoid(r_w[i] - r_l[i])
 * and writes its gradient d_rw[i] = dL/dr_w[i], d_rl[i] = dL/dr_l[i] (either may be NULL).
 * It must stay finite for any finite scores: a margin of -200 costs 200, not inf. n >= 1. */
double rm_pairwise_loss(const float *r_w, const float *r_l, int n, float *d_rw, float *d_rl);

#endif
