/* ch12-gae - reference solution: one backward pass, cut at the ends of episodes. */
#include "api.h"

void gae(float *adv, const float *rewards, const float *values, const uint8_t *done,
         float last_value, int T, float gamma, float lambda)
{
    double next_adv = 0.0, next_value = last_value;
    for (int t = T - 1; t >= 0; t--) {
        double keep = done && done[t] ? 0.0 : 1.0;
        double delta = rewards[t] + gamma * next_value * keep - values[t];
        next_adv = delta + (double)gamma * lambda * keep * next_adv;
        adv[t] = (float)next_adv;
        next_value = values[t];
    }
}

void discounted_returns(float *ret, const float *rewards, const uint8_t *done,
                        float last_value, int T, float gamma)
{
    double g = last_value;
    for (int t = T - 1; t >= 0; t--) {
        if (done && done[t])
            g = 0.0;
        g = rewards[t] + gamma * g;
        ret[t] = (float)g;
    }
}
