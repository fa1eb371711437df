/* cartpole.c - the cart-pole balancing task, in C: gymnasium's CartPole-v1 (the classic
 * Barto-Sutton-Anderson physics, explicit Euler at 50 steps a second) and the tutorial's
 * toy stand-in, kept so that its behaviour can be reproduced. One struct per environment;
 * a vectorised trainer keeps an array of them. */
#include "rl.h"
#include <math.h>

/* CartPole-v1's constants */
#define GRAVITY 9.8
#define MASS_CART 1.0
#define MASS_POLE 0.1
#define TOTAL_MASS (MASS_CART + MASS_POLE)
#define HALF_LENGTH 0.5                         /* half the pole's length */
#define POLE_MASS_LENGTH (MASS_POLE * HALF_LENGTH)
#define FORCE 10.0
#define TAU 0.02                                /* seconds per step */
#define THETA_LIMIT (12.0 * 2.0 * M_PI / 360.0) /* 12 degrees, 0.2094 rad */
#define X_LIMIT 2.4

static double uniform(mlsys_rng *r, double lo, double hi)
{
    return lo + (hi - lo) * mlsys_rng_uniform(r);
}

void rl_cartpole_reset(rl_cartpole *e, rl_cartpole_kind kind, mlsys_rng *r)
{
    e->kind = kind;
    e->x = uniform(r, -0.05, 0.05);
    e->x_dot = uniform(r, -0.05, 0.05);
    e->theta = uniform(r, -0.05, 0.05);
    e->theta_dot = uniform(r, -0.05, 0.05);
    e->steps = 0;
}

void rl_cartpole_obs(const rl_cartpole *e, float *obs)
{
    obs[0] = (float)e->x;
    obs[1] = (float)e->x_dot;
    obs[2] = (float)e->theta;
    obs[3] = (float)e->theta_dot;
}

/* The pole's angular acceleration from the equations of motion of a cart and a pole
 * (the pole a uniform rod, no friction), with F the push and temp the cart's share of it:
 *   temp = (F + m·l·θ̇²·sin θ) / M
 *   θ̈ = (g·sin θ - cos θ·temp) / (l·(4/3 - m·cos²θ / M))
 *   ẍ = temp - m·l·θ̈·cos θ / M
 * then one Euler step: the positions move with the old velocities, then the velocities
 * change (gymnasium's "euler" integrator, its default). */
static float step_v1(rl_cartpole *e, int action, int *terminated, int *truncated)
{
    double force = action == 1 ? FORCE : -FORCE;
    double c = cos(e->theta), s = sin(e->theta);
    double temp = (force + POLE_MASS_LENGTH * e->theta_dot * e->theta_dot * s) / TOTAL_MASS;
    double theta_acc = (GRAVITY * s - c * temp) /
                       (HALF_LENGTH * (4.0 / 3.0 - MASS_POLE * c * c / TOTAL_MASS));
    double x_acc = temp - POLE_MASS_LENGTH * theta_acc * c / TOTAL_MASS;
    e->x += TAU * e->x_dot;
    e->x_dot += TAU * x_acc;
    e->theta += TAU * e->theta_dot;
    e->theta_dot += TAU * theta_acc;
    e->steps++;
    *terminated = e->x < -X_LIMIT || e->x > X_LIMIT || e->theta < -THETA_LIMIT ||
                  e->theta > THETA_LIMIT;
    *truncated = !*terminated && e->steps >= RL_CARTPOLE_MAX_STEPS;
    return 1.0f;                /* every step, the one that ends the episode included */
}

/* The tutorial's simulator, as it is: the push changes ẋ directly and θ̇ by ±0.5 in the
 * direction of the lean (so pushing right makes a pole leaning right fall faster), plus
 * Gaussian noise of standard deviation 0.01 on both velocities. The positions move with the
 * new velocities. The step that ends an episode pays 0, so a return is the steps minus 1. */
static float step_toy(rl_cartpole *e, int action, mlsys_rng *r, int *terminated,
                      int *truncated)
{
    double force = action == 1 ? FORCE : -FORCE;
    e->x_dot += TAU * force + 0.01 * mlsys_rng_normal(r);
    e->x += TAU * e->x_dot;
    e->theta_dot += 0.05 * force * (e->theta > 0 ? 1.0 : -1.0) + 0.01 * mlsys_rng_normal(r);
    e->theta += TAU * e->theta_dot;
    e->steps++;
    *terminated = fabs(e->x) > X_LIMIT || fabs(e->theta) > 0.21 || e->steps > 200;
    *truncated = 0;
    return *terminated ? 0.0f : 1.0f;
}

float rl_cartpole_step(rl_cartpole *e, int action, mlsys_rng *r, int *terminated,
                       int *truncated)
{
    if (e->kind == RL_CARTPOLE_TOY)
        return step_toy(e, action, r, terminated, truncated);
    return step_v1(e, action, terminated, truncated);
}
