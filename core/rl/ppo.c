/* ppo.c - proximal policy optimisation on vectorised CartPole, data parallel across ranks.
 * One iteration, the way CleanRL's ppo.py does it (with a larger learning rate, rl.h):
 *   1. rollout: every environment takes num_steps steps with the current policy; each step
 *      keeps the observation, the action, its log-probability and the critic's value;
 *   2. advantages: GAE per environment (rl_gae), returns = advantages + values;
 *   3. update: update_epochs passes over the rollout in num_minibatches shuffled
 *      minibatches; each minibatch's loss is the clipped policy loss + vf_coef · the value
 *      loss - ent_coef · the entropy, one Adam step after clipping the gradient's norm.
 *      What the update did is reported as means over all its minibatches: the clip
 *      fraction as CleanRL reports it, and the losses and the approximate KL too (CleanRL
 *      prints the last minibatch's, which says little about the clip: early minibatches,
 *      still near the old policy, clip nothing).
 * Across N ranks: rank r runs environments [r·E/N, (r+1)·E/N), each environment with its
 * own random stream (seeded by its global index), so the rollout does not depend on N. The
 * rollout (a few KB) is all-gathered, every rank shuffles it with the same generator, and
 * each rank computes the gradient of its 1/N slice of every minibatch; an all-reduce sums
 * the slices, weighted by their share, into the minibatch's gradient. So N ranks take the
 * same steps as one process, up to the order of float additions: identical in distribution,
 * and one rank is deterministic for a seed. */
#include "rl.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* one sample of the rollout as it travels between ranks */
enum { R_OBS = 0, R_ACT = 4, R_LOGP, R_VAL, R_ADV, R_RET, R_EPRET, REC };
#define WINDOW 100          /* "solved" is judged on the mean of the last 100 episodes */

struct rl_ppo {
    rl_ppo_config cfg;
    mlsys_comm *c;
    int rank, world;
    int E, El, e0, T;           /* environments: all, this rank's, its first; steps */
    int batch, mb;              /* samples per rollout (E·T) and per minibatch */
    long iters_total, iteration, global_step;
    rl_agent ag;
    rl_agent_ws ws;
    nn_adamw opt;
    rl_cartpole *env;           /* [El] */
    mlsys_rng *env_rng;         /* [El] resets and actions of each environment */
    mlsys_rng shuffle_rng;      /* the same on every rank */
    double *ep_ret;             /* [El] return of each running episode */
    float *next_obs;            /* [El,4] */
    /* this rank's rollout, environment-major: [El][T] */
    float *obs;                 /* [El,T,4] */
    int *act;
    float *logp, *val, *rew, *adv, *epret;
    uint8_t *done;
    float *lp_all;              /* [max(El, mb), A] log-probabilities of a forward */
    float *last_val;            /* [El] */
    float *local, *all;         /* [El·T, REC] and [E·T, REC] records */
    int *perm;                  /* [E·T] */
    /* one minibatch slice: [mb] rows each */
    float *m_obs, *m_logp, *m_old, *m_adv, *m_ret, *m_val, *m_ent, *m_dlogp, *m_dent, *m_dv;
    float *m_v, *m_dlogits;
    int *m_act;
    float *ep_returns;          /* [E·T] episodes that ended in this rollout */
    float window[WINDOW];
    long episodes_total;
};

void rl_ppo_defaults(rl_ppo_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    cfg->env = RL_CARTPOLE_V1;
    cfg->num_envs = 4;
    cfg->num_steps = 128;
    cfg->total_steps = 500000;
    cfg->update_epochs = 4;
    cfg->num_minibatches = 4;
    cfg->lr = 1e-3f;                /* CleanRL: 2.5e-4, where the clip never acts (rl.h) */
    cfg->anneal_lr = 1;
    cfg->gamma = 0.99f;
    cfg->lambda = 0.95f;
    cfg->clip = 0.2f;
    cfg->ent_coef = 0.01f;
    cfg->vf_coef = 0.5f;
    cfg->max_grad_norm = 0.5f;
    cfg->norm_adv = 1;
    cfg->clip_vloss = 1;
    cfg->hidden = 64;
    cfg->seed = 1;
}

/* independent streams from one seed: the agent's weights, the shuffle, each environment */
static uint64_t stream(uint64_t seed, uint64_t id)
{
    return seed * 0x100000001b3ull + id;
}

static void *zalloc(size_t n, size_t size)
{
    return mlsys_xcalloc(n ? n : 1, size);
}

int rl_ppo_check(const rl_ppo_config *k, int world, char *err, size_t errlen)
{
    if (k->num_envs < 1 || k->num_steps < 1 || k->update_epochs < 0 ||
        k->num_minibatches < 1 || k->hidden < 1) {
        snprintf(err, errlen, "environments, steps, minibatches and the hidden width must be "
                 "positive");
        return -1;
    }
    if (world < 1 || k->num_envs % world) {
        snprintf(err, errlen, "%d environments cannot be split evenly over %d ranks",
                 k->num_envs, world);
        return -1;
    }
    long batch = (long)k->num_envs * k->num_steps;
    if (batch % k->num_minibatches || batch / k->num_minibatches < world) {
        snprintf(err, errlen, "a rollout of %ld samples does not split into %d minibatches "
                 "of at least %d (one sample per rank)", batch, k->num_minibatches, world);
        return -1;
    }
    if (k->total_steps < batch) {
        snprintf(err, errlen, "%ld steps in all is less than one rollout (%d environments x "
                 "%d steps = %ld)", k->total_steps, k->num_envs, k->num_steps, batch);
        return -1;
    }
    return 0;
}

rl_ppo *rl_ppo_create(const rl_ppo_config *cfg, mlsys_comm *c, char *err, size_t errlen)
{
    int world = c ? mlsys_size(c) : 1, rank = c ? mlsys_rank(c) : 0;
    const rl_ppo_config *k = cfg;
    if (rl_ppo_check(cfg, world, err, errlen) != 0)
        return NULL;
    long batch = (long)k->num_envs * k->num_steps;
    rl_ppo *p = zalloc(1, sizeof *p);
    p->cfg = *cfg;
    p->c = c;
    p->rank = rank;
    p->world = world;
    p->E = k->num_envs;
    p->El = k->num_envs / world;
    p->e0 = rank * p->El;
    p->T = k->num_steps;
    p->batch = (int)batch;
    p->mb = (int)(batch / k->num_minibatches);
    p->iters_total = k->total_steps / batch;
    int A = RL_CARTPOLE_ACTIONS, El = p->El, T = p->T;
    if (rl_agent_init(&p->ag, RL_CARTPOLE_OBS, k->hidden, A, stream(k->seed, 0)) != 0) {
        snprintf(err, errlen, "cannot build the agent");
        free(p);
        return NULL;
    }
    int rows = El > p->mb ? El : p->mb;
    rl_agent_ws_init(&p->ws, &p->ag, rows);
    /* Adam as CleanRL configures torch's: betas (0.9, 0.999), eps 1e-5, no weight decay */
    nn_adamw_init(&p->opt, k->lr, 0.9f, 0.999f, 1e-5f, 0.0f, 0, p->ag.p.numel);
    mlsys_rng_seed(&p->shuffle_rng, stream(k->seed, 1));
    p->env = zalloc((size_t)El, sizeof *p->env);
    p->env_rng = zalloc((size_t)El, sizeof *p->env_rng);
    p->ep_ret = zalloc((size_t)El, sizeof *p->ep_ret);
    p->next_obs = zalloc((size_t)El * RL_CARTPOLE_OBS, sizeof(float));
    for (int e = 0; e < El; e++) {
        mlsys_rng_seed(&p->env_rng[e], stream(k->seed, 2 + (uint64_t)(p->e0 + e)));
        rl_cartpole_reset(&p->env[e], k->env, &p->env_rng[e]);
        rl_cartpole_obs(&p->env[e], p->next_obs + (size_t)e * RL_CARTPOLE_OBS);
    }
    size_t n = (size_t)El * T;
    p->obs = zalloc(n * RL_CARTPOLE_OBS, sizeof(float));
    p->act = zalloc(n, sizeof(int));
    p->logp = zalloc(n, sizeof(float));
    p->val = zalloc(n, sizeof(float));
    p->rew = zalloc(n, sizeof(float));
    p->adv = zalloc(n, sizeof(float));
    p->epret = zalloc(n, sizeof(float));
    p->done = zalloc(n, sizeof(uint8_t));
    p->lp_all = zalloc((size_t)rows * A, sizeof(float));
    p->last_val = zalloc((size_t)El, sizeof(float));
    p->local = zalloc(n * REC, sizeof(float));
    p->all = zalloc((size_t)p->batch * REC, sizeof(float));
    p->perm = zalloc((size_t)p->batch, sizeof(int));
    size_t m = (size_t)p->mb;
    p->m_obs = zalloc(m * RL_CARTPOLE_OBS, sizeof(float));
    float **bufs[] = {&p->m_logp, &p->m_old, &p->m_adv, &p->m_ret, &p->m_val, &p->m_ent,
                      &p->m_dlogp, &p->m_dent, &p->m_dv, &p->m_v};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        *bufs[i] = zalloc(m, sizeof(float));
    p->m_dlogits = zalloc(m * A, sizeof(float));
    p->m_act = zalloc(m, sizeof(int));
    p->ep_returns = zalloc((size_t)p->batch, sizeof(float));
    return p;
}

void rl_ppo_free(rl_ppo *p)
{
    if (!p)
        return;
    rl_agent_ws_fini(&p->ws);
    rl_agent_fini(&p->ag);
    nn_adamw_fini(&p->opt);
    void *bufs[] = {p->env, p->env_rng, p->ep_ret, p->next_obs, p->obs, p->act, p->logp,
                    p->val, p->rew, p->adv, p->epret, p->done, p->lp_all, p->last_val,
                    p->local, p->all, p->perm, p->m_obs, p->m_logp, p->m_old, p->m_adv,
                    p->m_ret, p->m_val, p->m_ent, p->m_dlogp, p->m_dent, p->m_dv, p->m_v,
                    p->m_dlogits, p->m_act, p->ep_returns};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        free(bufs[i]);
    free(p);
}

const rl_agent *rl_ppo_agent(const rl_ppo *p)
{
    return &p->ag;
}

/* num_steps steps of every local environment with the current policy */
static void rollout(rl_ppo *p)
{
    int El = p->El, T = p->T, A = RL_CARTPOLE_ACTIONS, D = RL_CARTPOLE_OBS;
    for (int t = 0; t < T; t++) {
        rl_agent_forward(&p->ag, &p->ws, p->next_obs, El);
        rl_categorical_forward(p->lp_all, NULL, NULL, p->ws.logits, NULL, El, A);
        for (int e = 0; e < El; e++) {
            size_t i = (size_t)e * T + t;
            const float *lp = p->lp_all + (size_t)e * A;
            float prob[RL_CARTPOLE_ACTIONS];
            for (int a = 0; a < A; a++)
                prob[a] = expf(lp[a]);
            int a = nn_sample_categorical(prob, A, &p->env_rng[e]);
            memcpy(p->obs + i * D, p->next_obs + (size_t)e * D, (size_t)D * sizeof(float));
            p->act[i] = a;
            p->logp[i] = lp[a];
            p->val[i] = p->ws.value[e];
            int term, trunc;
            p->rew[i] = rl_cartpole_step(&p->env[e], a, &p->env_rng[e], &term, &trunc);
            p->ep_ret[e] += p->rew[i];
            p->done[i] = (uint8_t)(term || trunc);
            p->epret[i] = NAN;
            if (p->done[i]) {
                p->epret[i] = (float)p->ep_ret[e];
                p->ep_ret[e] = 0.0;
                rl_cartpole_reset(&p->env[e], p->cfg.env, &p->env_rng[e]);
            }
            rl_cartpole_obs(&p->env[e], p->next_obs + (size_t)e * D);
        }
    }
    p->global_step += (long)p->E * T;
}

/* Advantages per environment, then this rank's records all-gathered into p->all. */
static int advantages_and_gather(rl_ppo *p)
{
    int El = p->El, T = p->T, D = RL_CARTPOLE_OBS;
    rl_agent_value(&p->ag, &p->ws, p->next_obs, El, p->last_val);
    for (int e = 0; e < El; e++) {
        size_t o = (size_t)e * T;
        rl_gae(p->adv + o, p->rew + o, p->val + o, p->done + o, p->last_val[e], T,
               p->cfg.gamma, p->cfg.lambda);
    }
    for (size_t i = 0; i < (size_t)El * T; i++) {
        float *r = p->local + i * REC;
        memcpy(r + R_OBS, p->obs + i * D, (size_t)D * sizeof(float));
        r[R_ACT] = (float)p->act[i];
        r[R_LOGP] = p->logp[i];
        r[R_VAL] = p->val[i];
        r[R_ADV] = p->adv[i];
        r[R_RET] = p->adv[i] + p->val[i];
        r[R_EPRET] = p->epret[i];
    }
    size_t count = (size_t)El * T * REC;
    if (p->world == 1) {
        memcpy(p->all, p->local, count * sizeof(float));
        return 0;
    }
    return mlsys_allgather(p->c, p->local, p->all, count, MLSYS_F32);
}

/* Episodes that ended in this rollout, in the order of (step, environment), on every rank
 * the same; and the 100-episode window. */
static void count_episodes(rl_ppo *p, rl_ppo_stats *st)
{
    int n = 0;
    for (int t = 0; t < p->T; t++)
        for (int g = 0; g < p->E; g++) {
            float r = p->all[((size_t)g * p->T + t) * REC + R_EPRET];
            if (isnan(r))
                continue;
            p->ep_returns[n++] = r;
            p->window[p->episodes_total % WINDOW] = r;
            p->episodes_total++;
        }
    long w = p->episodes_total < WINDOW ? p->episodes_total : WINDOW;
    double s = 0.0;
    for (long i = 0; i < w; i++)
        s += p->window[i];
    st->episodes = n;
    st->returns = p->ep_returns;
    st->episodes_total = p->episodes_total;
    st->mean100 = w ? s / (double)w : 0.0;
}

/* 1 - Var(R - V) / Var(R) over the rollout: how much of the returns the critic explains */
static double explained_variance(const rl_ppo *p)
{
    double sr = 0, sr2 = 0, sd = 0, sd2 = 0;
    for (int i = 0; i < p->batch; i++) {
        const float *r = p->all + (size_t)i * REC;
        double ret = r[R_RET], d = ret - r[R_VAL];
        sr += ret;
        sr2 += ret * ret;
        sd += d;
        sd2 += d * d;
    }
    double n = p->batch, var_r = sr2 / n - (sr / n) * (sr / n);
    double var_d = sd2 / n - (sd / n) * (sd / n);
    return var_r > 0 ? 1.0 - var_d / var_r : NAN;
}

/* One minibatch: the indices perm[first .. first + mb). Every rank normalises the
 * advantages over the whole minibatch, computes its slice's gradient, and the all-reduce
 * adds the slices. loss[] gets the slice's share of (policy, value, entropy, kl, clipfrac)
 * added, times weight. */
static int minibatch(rl_ppo *p, const int *idx, double weight, double loss[5])
{
    int mb = p->mb, A = RL_CARTPOLE_ACTIONS, D = RL_CARTPOLE_OBS;
    const rl_ppo_config *k = &p->cfg;
    double mean = 0.0, var = 0.0;
    if (k->norm_adv) {
        for (int i = 0; i < mb; i++)
            mean += p->all[(size_t)idx[i] * REC + R_ADV];
        mean /= mb;
        for (int i = 0; i < mb; i++) {
            double d = p->all[(size_t)idx[i] * REC + R_ADV] - mean;
            var += d * d;
        }
        var = mb > 1 ? var / (mb - 1) : 0.0;       /* torch's std() is the unbiased one */
    }
    double inv_std = k->norm_adv ? 1.0 / (sqrt(var) + 1e-8) : 1.0;
    size_t off, len;
    nn_shard_range((size_t)mb, p->rank, p->world, &off, &len);
    int n = (int)len;
    for (int i = 0; i < n; i++) {
        const float *r = p->all + (size_t)idx[off + (size_t)i] * REC;
        memcpy(p->m_obs + (size_t)i * D, r + R_OBS, (size_t)D * sizeof(float));
        p->m_act[i] = (int)r[R_ACT];
        p->m_old[i] = r[R_LOGP];
        p->m_val[i] = r[R_VAL];
        p->m_ret[i] = r[R_RET];
        p->m_adv[i] = (float)((r[R_ADV] - (k->norm_adv ? mean : 0.0)) * inv_std);
    }
    rl_agent_forward(&p->ag, &p->ws, p->m_obs, n);
    rl_categorical_forward(p->lp_all, p->m_logp, p->m_ent, p->ws.logits, p->m_act, n, A);
    memcpy(p->m_v, p->ws.value, (size_t)n * sizeof(float));
    double clipfrac, kl;
    double pg = rl_ppo_policy_loss(p->m_dlogp, p->m_logp, p->m_old, p->m_adv, n, k->clip,
                                   &clipfrac, &kl);
    double vl = rl_value_loss(p->m_dv, p->m_v, p->m_val, p->m_ret, n,
                              k->clip_vloss ? k->clip : 0.0f);
    double ent = 0.0;
    for (int i = 0; i < n; i++)
        ent += p->m_ent[i];
    ent /= n;
    /* the slice's losses are means over its n rows; the minibatch's are means over mb,
     * so each slice counts with weight n/mb */
    float share = (float)n / (float)mb;
    for (int i = 0; i < n; i++) {
        p->m_dlogp[i] *= share;
        p->m_dv[i] *= k->vf_coef * share;
        p->m_dent[i] = -k->ent_coef / (float)mb;
    }
    rl_categorical_backward(p->m_dlogits, p->m_dlogp, p->m_dent, p->lp_all, p->m_ent,
                            p->m_act, n, A);
    nn_params_zero_grad(&p->ag.p);
    rl_agent_backward(&p->ag, &p->ws, p->m_obs, p->m_dlogits, p->m_dv, n);
    float *g = p->ag.p.grad;
    size_t np = p->ag.p.numel;
    if (p->world > 1) {
        int rc = mlsys_allreduce(p->c, g, g, np, MLSYS_F32, MLSYS_SUM);
        if (rc)
            return rc;
    }
    if (k->max_grad_norm > 0.0f) {          /* torch's clip_grad_norm_ over all tensors */
        double norm = sqrt(nn_sumsq(g, np));
        double coef = k->max_grad_norm / (norm + 1e-6);
        if (coef < 1.0)
            nn_scale(g, np, (float)coef);
    }
    nn_adamw_step(&p->opt, p->ag.p.data, g);
    loss[0] += weight * pg * share;
    loss[1] += weight * vl * share;
    loss[2] += weight * ent * share;
    loss[3] += weight * kl * share;
    loss[4] += weight * clipfrac * share;
    return 0;
}

int rl_ppo_iterate(rl_ppo *p, rl_ppo_stats *st)
{
    memset(st, 0, sizeof *st);
    if (p->iteration >= p->iters_total)
        return 1;
    p->iteration++;
    const rl_ppo_config *k = &p->cfg;
    float lr = k->lr;
    if (k->anneal_lr)
        lr = (float)((1.0 - (double)(p->iteration - 1) / (double)p->iters_total) * k->lr);
    p->opt.lr = lr;
    rollout(p);
    int rc = advantages_and_gather(p);
    if (rc)
        return rc;
    st->iteration = p->iteration;
    st->global_step = p->global_step;
    st->lr = lr;
    count_episodes(p, st);
    st->explained_var = explained_variance(p);
    double loss[5] = {0};
    int B = p->batch;
    double weight = k->update_epochs > 0 ? 1.0 / ((double)k->update_epochs * k->num_minibatches)
                                         : 0.0;
    for (int e = 0; e < k->update_epochs; e++) {
        for (int i = 0; i < B; i++)
            p->perm[i] = i;
        for (int i = B - 1; i > 0; i--) {           /* Fisher-Yates, the same on every rank */
            int j = (int)(mlsys_rng_u64(&p->shuffle_rng) % (uint64_t)(i + 1));
            int tmp = p->perm[i];
            p->perm[i] = p->perm[j];
            p->perm[j] = tmp;
        }
        for (int m = 0; m < k->num_minibatches; m++)
            if ((rc = minibatch(p, p->perm + (size_t)m * p->mb, weight, loss)) != 0)
                return rc;
    }
    if (p->world > 1 && (rc = mlsys_allreduce(p->c, loss, loss, 5, MLSYS_F64, MLSYS_SUM)))
        return rc;
    st->policy_loss = loss[0];
    st->value_loss = loss[1];
    st->entropy = loss[2];
    st->approx_kl = loss[3];
    st->clipfrac = loss[4];
    return 0;
}
