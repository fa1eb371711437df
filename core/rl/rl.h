/* rl.h - the reinforcement-learning engine of MLSys Lab: CartPole, generalized advantage
 * estimation, the PPO losses and the PPO trainer that learns CartPole across ranks, and the
 * per-token rewards of RLHF. No curses, no chapter: chapters 12-14 are its clients. This
 * header is the table of contents of core/rl: prototypes sit under their file.
 * The functions marked SEAM have a contract a learner's exercise can implement in its
 * place: plain arrays in, plain arrays out, no state. */
#ifndef MLSYS_RL_H
#define MLSYS_RL_H

#include <stddef.h>
#include <stdint.h>
#include "../mlsys.h"
#include "../nn/nn.h"
#include "wsync.h"          /* wsync.c: the weight sync (its own header) */

/* Shape legend: T steps of one trajectory, E environments, A actions, B rows of a batch,
 * H hidden width, n rows handed to a loss. */

/* ---- cartpole.c: the pole-balancing environment ---- */
typedef enum {
    RL_CARTPOLE_V1,     /* gymnasium's CartPole-v1: the classic physics, Euler steps */
    RL_CARTPOLE_TOY     /* the tutorial's stand-in: not physics, noisy, at most 201 steps */
} rl_cartpole_kind;

#define RL_CARTPOLE_OBS 4           /* x, ẋ, θ, θ̇ */
#define RL_CARTPOLE_ACTIONS 2       /* 0 push left, 1 push right */
#define RL_CARTPOLE_MAX_STEPS 500   /* CartPole-v1's time limit (truncation) */

typedef struct rl_cartpole {
    rl_cartpole_kind kind;
    double x, x_dot, theta, theta_dot;   /* the state, kept in double as gymnasium does */
    int steps;                           /* steps taken in this episode */
} rl_cartpole;

/* A new episode: each state variable U(-0.05, 0.05) from r, steps = 0. */
void rl_cartpole_reset(rl_cartpole *e, rl_cartpole_kind kind, mlsys_rng *r);
/* obs[4] = (x, ẋ, θ, θ̇) as floats. */
void rl_cartpole_obs(const rl_cartpole *e, float *obs);
/* Push (action 1 right, 0 left) and advance one step; returns the reward. *terminated: the
 * pole fell or the cart left the track (v1: |θ| > 12°, |x| > 2.4); *truncated: v1's 500th
 * step without a fall. The toy environment draws its noise from r (v1 does not use r), ends
 * on |x| > 2.4, |θ| > 0.21 or a 201st step, always as terminated, and pays 0 on that last
 * step (1 on the others); v1 pays 1 on every step, the last one included. */
float rl_cartpole_step(rl_cartpole *e, int action, mlsys_rng *r, int *terminated,
                       int *truncated);

/* ---- gae.c: advantages and returns (SEAM: rl_gae) ---- */
/* Generalized advantage estimation over one trajectory of T steps:
 *   δ_t = r_t + γ·V_{t+1}·(1 - done_t) - V_t
 *   A_t = δ_t + γλ·(1 - done_t)·A_{t+1}          (computed backwards from t = T-1)
 * values[T] = V(s_t); done[t] = 1 when the episode ended with step t (its V_{t+1} is not used
 * and the sum restarts there; done may be NULL: none ended); V_T = last_value, the value of
 * the state after the last step (0 for a finished trajectory). Writes adv[T]; adv must not
 * alias the inputs. λ = 0 gives A_t = δ_t; λ = 1 gives A_t = G_t - V_t. */
void rl_gae(float *adv, const float *rewards, const float *values, const uint8_t *done,
            float last_value, int T, float gamma, float lambda);
/* Discounted returns G_t = r_t + γ·(1 - done_t)·G_{t+1}, G_T = last_value. */
void rl_discounted_returns(float *ret, const float *rewards, const uint8_t *done,
                           float last_value, int T, float gamma);

/* ---- ppo_loss.c: the PPO losses and their gradients (SEAM: rl_ppo_policy_loss) ---- */
/* One sample's clipped surrogate objective (to be maximised) for ratio r and advantage A:
 *   min(r·A, clip(r, 1-ε, 1+ε)·A)
 * *d_dr (may be NULL) = its derivative in r: A where the unclipped term is the smaller (or
 * they tie), 0 where the clip holds it. */
double rl_ppo_term(double ratio, double adv, double eps, double *d_dr);
/* The clipped policy loss over n samples, to be minimised:
 *   L = -(1/n) Σ min(r_i·A_i, clip(r_i, 1-ε, 1+ε)·A_i),   r_i = exp(logp_i - old_logp_i)
 * Writes dlogp[n] = ∂L/∂logp_i (may be NULL), and when not NULL *clipfrac = the share of
 * samples with |r_i - 1| > ε and *approx_kl = mean((r_i - 1) - log r_i), an estimate of
 * KL(old ‖ new). Returns L. */
double rl_ppo_policy_loss(float *dlogp, const float *logp, const float *old_logp,
                          const float *adv, int n, float eps, double *clipfrac,
                          double *approx_kl);
/* The value loss over n samples: L = (1/n) Σ ½·(v_i - R_i)², or with clip > 0 PPO's clipped
 * form ½·max((v_i - R_i)², (v_old_i + clip(v_i - v_old_i, -clip, clip) - R_i)²), which
 * keeps the value from moving more than clip away from the rollout's. Writes
 * dv[n] = ∂L/∂v_i (may be NULL); v_old may be NULL when clip <= 0. Returns L. */
double rl_value_loss(float *dv, const float *v, const float *v_old, const float *ret, int n,
                     float clip);
/* A categorical policy from logits[n,A]: logp_all[n,A] = log-softmax of each row (max
 * subtracted first), logp[n] = log-probability of actions[i] (actions may be NULL, logp
 * too), entropy[n] = -Σ_a p_a log p_a (may be NULL). */
void rl_categorical_forward(float *logp_all, float *logp, float *entropy,
                            const float *logits, const int *actions, int n, int A);
/* dlogits[n,A] = dlogp_i·(onehot(a_i) - p_i) + dent_i·(-p_i ⊙ (log p_i + H_i)): the
 * gradient of Σ_i dlogp_i·logp_i + dent_i·H_i through the softmax. dlogp or dent may be
 * NULL (zero). Reads the forward's logp_all and entropy. */
void rl_categorical_backward(float *dlogits, const float *dlogp, const float *dent,
                             const float *logp_all, const float *entropy, const int *actions,
                             int n, int A);

/* ---- agent.c: the actor and the critic, two tanh MLPs on core/nn ---- */
/* actor:  obs[In] → H → tanh → H → tanh → logits[A]
 * critic: obs[In] → H → tanh → H → tanh → value[1]
 * CleanRL's layout and initialisation: orthogonal weights with gain √2, the actor's last
 * layer gain 0.01 (the first policy is near uniform), the critic's 1; biases 0. All twelve
 * tensors sit in one nn_params (torch's names: "actor.0.weight" ...), so one optimizer, one
 * gradient norm and one all-reduce cover both networks. */
typedef struct rl_agent {
    int in, hidden, actions;
    nn_params p;
    int t[12];              /* tensor indices: actor 0-5, critic 6-11 (w, b per layer) */
} rl_agent;

/* What a forward keeps for its backward, for up to cap rows. */
typedef struct rl_agent_ws {
    int cap;
    float *ha1, *ha2;       /* [cap,H] actor's tanh outputs */
    float *hc1, *hc2;       /* [cap,H] critic's tanh outputs */
    float *logits;          /* [cap,A] */
    float *value;           /* [cap] */
    float *dh1, *dh2;       /* [cap,H] backward scratch */
} rl_agent_ws;

/* Declare, allocate (with gradients) and initialise from seed. 0, or -1 on bad sizes. */
int rl_agent_init(rl_agent *ag, int in, int hidden, int actions, uint64_t seed);
void rl_agent_fini(rl_agent *ag);
void rl_agent_ws_init(rl_agent_ws *ws, const rl_agent *ag, int cap);
void rl_agent_ws_fini(rl_agent_ws *ws);
/* Both networks on obs[B,In] (B <= ws->cap): ws->logits[B,A], ws->value[B]. */
void rl_agent_forward(const rl_agent *ag, rl_agent_ws *ws, const float *obs, int B);
/* Only the critic: value[B] (ws's critic buffers are used). */
void rl_agent_value(const rl_agent *ag, rl_agent_ws *ws, const float *obs, int B, float *value);
/* Backward of the last forward: gradients += from dlogits[B,A] and dvalue[B] (either may be
 * NULL). dlogits is read only. */
void rl_agent_backward(rl_agent *ag, rl_agent_ws *ws, const float *obs, const float *dlogits,
                       const float *dvalue, int B);

/* ---- ppo.c: PPO on vectorised CartPole, split across ranks ---- */
typedef struct rl_ppo_config {
    rl_cartpole_kind env;
    int num_envs;           /* environments, all ranks together (a multiple of the ranks) */
    int num_steps;          /* steps per environment per rollout */
    long total_steps;       /* environment steps of the whole run (sets the lr schedule) */
    int update_epochs;      /* passes over each rollout */
    int num_minibatches;    /* per pass */
    float lr;               /* Adam's, annealed linearly to 0 over the run if anneal_lr */
    int anneal_lr;
    float gamma, lambda;    /* GAE */
    float clip;             /* ε of the policy (and the value clip when clip_vloss) */
    float ent_coef, vf_coef, max_grad_norm;   /* max_grad_norm <= 0: no clipping */
    int norm_adv, clip_vloss;
    int hidden;
    uint64_t seed;
} rl_ppo_config;

/* CleanRL's defaults for CartPole-v1 (4 × 128, 4 epochs × 4 minibatches, ...) but the
 * learning rate: 1e-3, four times CleanRL's 2.5e-4. At 2.5e-4 an update moves the policy
 * by about 0.001 nats (approximate KL) and almost no ratio leaves [1 - ε, 1 + ε], in
 * PyTorch as here; at 1e-3 the clip acts early in the run and CartPole is solved sooner. */
void rl_ppo_defaults(rl_ppo_config *cfg);

/* What one iteration (a rollout and its updates) did. */
typedef struct rl_ppo_stats {
    long iteration;         /* 1, 2, ... */
    long global_step;       /* environment steps so far, all ranks */
    float lr;               /* the learning rate used */
    /* means over every minibatch of the update; clipfrac: the share of samples whose
     * ratio left [1 - ε, 1 + ε] */
    double policy_loss, value_loss, entropy, approx_kl, clipfrac;
    double explained_var;   /* 1 - Var(R - V)/Var(R) over the rollout */
    int episodes;           /* episodes that ended in this rollout, all ranks */
    const float *returns;   /* [episodes] their returns, by step then environment */
    long episodes_total;
    double mean100;         /* mean return of the last min(100, total) episodes; 0 if none */
} rl_ppo_stats;

typedef struct rl_ppo rl_ppo;

/* Can cfg run on world ranks? 0, or -1 with one line in err saying why not. */
int rl_ppo_check(const rl_ppo_config *cfg, int world, char *err, size_t errlen);

/* Build the trainer on communicator c (NULL: one process, no collectives). Every rank
 * calls it with the same cfg; rank r runs environments [r·E/N, (r+1)·E/N). Returns NULL
 * with a message in err on a bad configuration. */
rl_ppo *rl_ppo_create(const rl_ppo_config *cfg, mlsys_comm *c, char *err, size_t errlen);
/* One iteration: a rollout of num_steps on every environment, GAE, then update_epochs
 * passes of num_minibatches minibatches, each gradient all-reduced over the ranks. The
 * same on every rank (collective). Returns 0, 1 when total_steps is reached (nothing
 * done), or a runtime error code (<0) with the message in the communicator. */
int rl_ppo_iterate(rl_ppo *p, rl_ppo_stats *st);
const rl_agent *rl_ppo_agent(const rl_ppo *p);
void rl_ppo_free(rl_ppo *p);

/* ---- reward.c: the per-token reward of RLHF (SEAM: rl_token_rewards) ---- */
typedef enum {
    RL_REWARD_END,      /* the reward model's score on the last token (the usual choice) */
    RL_REWARD_SPREAD    /* score / T on every token */
} rl_reward_mode;

/* Per-token rewards of one response of T tokens: kl_t = logp_t - ref_logp_t (the sampled
 * token's log-ratio, the simple KL estimate; it can be negative), r_t = -β·kl_t, plus the
 * reward model's score as mode says. kl[T] may be NULL. Σ r_t = score - β·Σ kl_t in either
 * mode. */
void rl_token_rewards(float *rewards, float *kl, const float *logp, const float *ref_logp,
                      int T, float beta, float score, rl_reward_mode mode);

/* RLHF on the lab's language model (sums.c, reward_model.c, rlhf.c): see rlhf.h. */

#endif
