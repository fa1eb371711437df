/* ppo_cartpole.c - ch12/ppo-cartpole: PPO that learns CartPole, on N ranks. The default is
 * core/rl's trainer with CleanRL's settings (4 environments x 128 steps per rollout, 4
 * epochs of 4 minibatches, 2x64 tanh actor and critic, GAE λ 0.95,
 * clip 0.2, entropy 0.01, value 0.5, gradient norm 0.5) but Adam at 1e-3 annealed, where
 * the clip acts (at CleanRL's 2.5e-4 it barely does), the environments split over the
 * ranks and each gradient all-reduced; the mean return of the last 100 episodes goes to
 * the plot view. The original script's behaviour stays behind two switches: --no-update
 * runs its episode loop, whose "update" never changes the networks, and --toy-env its
 * stand-in simulator instead of CartPole-v1's physics. */
#include "../common/common.h"
#include "../../core/rl/rl.h"
#include "../../core/trace_values.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define LAB_ID "ch12/ppo-cartpole"
#define SOLVED 475.0            /* CartPole-v1 counts as solved at a 100-episode mean of 475 */

static const lab_flag ppo_flags[] = {
    {"episodes", 0, FLAG_INT, "100", NULL, 1, 10000000,
     "--no-update: episodes to run (PPO runs --total-steps)"},
    {"gamma", 0, FLAG_DOUBLE, "0.99", NULL, 0, 0, "discount factor γ, from 0 to 1"},
    {"lam", 0, FLAG_DOUBLE, "0.95", NULL, 0, 0, "GAE's λ, from 0 to 1"},
    {"clip-epsilon", 0, FLAG_DOUBLE, "0.2", NULL, 0, 1, "PPO's clip ε"},
    {"total-steps", 0, FLAG_INT, "500000", NULL, 1, 1000000000,
     "PPO: environment steps in all (the learning rate anneals over them)"},
    {"num-envs", 0, FLAG_INT, "4", NULL, 1, 4096, "PPO: environments, all ranks together"},
    {"num-steps", 0, FLAG_INT, "128", NULL, 1, 100000, "PPO: steps per environment per rollout"},
    {"update-epochs", 0, FLAG_INT, "4", NULL, 1, 1000, "PPO: passes over each rollout"},
    {"num-minibatches", 0, FLAG_INT, "4", NULL, 1, 100000, "PPO: minibatches per pass"},
    {"learning-rate", 0, FLAG_DOUBLE, "1e-3", NULL, 0, 1,
     "PPO: Adam's learning rate (CleanRL's 2.5e-4 moves the policy too little to clip)"},
    {"no-anneal", 0, FLAG_BOOL, NULL, NULL, 0, 0, "PPO: keep the learning rate constant"},
    {"ent-coef", 0, FLAG_DOUBLE, "0.01", NULL, 0, 0, "PPO: weight of the entropy bonus"},
    {"vf-coef", 0, FLAG_DOUBLE, "0.5", NULL, 0, 0, "PPO: weight of the value loss"},
    {"max-grad-norm", 0, FLAG_DOUBLE, "0.5", NULL, 0, 0,
     "PPO: clip the gradient's norm to this (0: no clipping)"},
    {"hidden", 0, FLAG_INT, "64", NULL, 1, 4096, "width of the two hidden layers"},
    {"seed", 0, FLAG_INT, "1", NULL, 0, 1L << 40, "seed of weights, environments and shuffles"},
    {"print-every", 0, FLAG_INT, "25", NULL, 1, 1000000, "PPO: a progress line every N rollouts"},
    {"no-update", 0, FLAG_BOOL, NULL, NULL, 0, 0,
     "the original's loop: one episode at a time, networks never updated"},
    {"toy-env", 0, FLAG_BOOL, NULL, NULL, 0, 0,
     "the original's stand-in simulator instead of CartPole-v1's physics"},
    {"world-size", 'w', FLAG_INT, "1", NULL, 1, 64, "ranks (the environments are split)"},
    {NULL, 0, 0, NULL, NULL, 0, 0, NULL}
};

static void config_from(const lab_args *a, rl_ppo_config *k)
{
    rl_ppo_defaults(k);
    k->env = lab_arg_bool(a, "toy-env") ? RL_CARTPOLE_TOY : RL_CARTPOLE_V1;
    k->num_envs = (int)lab_arg_int(a, "num-envs");
    k->num_steps = (int)lab_arg_int(a, "num-steps");
    k->total_steps = lab_arg_int(a, "total-steps");
    k->update_epochs = (int)lab_arg_int(a, "update-epochs");
    k->num_minibatches = (int)lab_arg_int(a, "num-minibatches");
    k->lr = (float)lab_arg_double(a, "learning-rate");
    k->anneal_lr = !lab_arg_bool(a, "no-anneal");
    k->gamma = (float)lab_arg_double(a, "gamma");
    k->lambda = (float)lab_arg_double(a, "lam");
    k->clip = (float)lab_arg_double(a, "clip-epsilon");
    k->ent_coef = (float)lab_arg_double(a, "ent-coef");
    k->vf_coef = (float)lab_arg_double(a, "vf-coef");
    k->max_grad_norm = (float)lab_arg_double(a, "max-grad-norm");
    k->hidden = (int)lab_arg_int(a, "hidden");
    k->seed = (uint64_t)lab_arg_int(a, "seed");
}

static const char *env_name(const lab_args *a)
{
    return lab_arg_bool(a, "toy-env") ? "the tutorial's toy simulator (not CartPole physics)"
                                      : "CartPole-v1, in C";
}

/* Refuse what cannot run, in one line, before any rank starts; then the banner. */
static int ppo_before(const lab_args *a)
{
    int world = (int)lab_arg_int(a, "world-size");
    const char *range[] = {"gamma", "lam"};
    for (int i = 0; i < 2; i++) {
        double v = lab_arg_double(a, range[i]);
        if (v < 0.0 || v > 1.0) {
            fprintf(stderr, "mlsys-lab: %s: --%s must be between 0 and 1, got %g\n", LAB_ID,
                    range[i], v);
            return 2;
        }
    }
    const char *nonneg[] = {"ent-coef", "vf-coef", "max-grad-norm"};
    for (int i = 0; i < 3; i++)
        if (lab_arg_double(a, nonneg[i]) < 0.0) {
            fprintf(stderr, "mlsys-lab: %s: --%s cannot be negative\n", LAB_ID, nonneg[i]);
            return 2;
        }
    if (lab_arg_bool(a, "no-update") && world > 1) {
        fprintf(stderr, "mlsys-lab: %s: --no-update runs the original's single-process loop: "
                "use --world-size 1\n", LAB_ID);
        return 2;
    }
    rl_ppo_config k;
    char err[256];
    config_from(a, &k);
    if (!lab_arg_bool(a, "no-update") && rl_ppo_check(&k, world, err, sizeof err) != 0) {
        fprintf(stderr, "mlsys-lab: %s: %s\n", LAB_ID, err);
        return 2;
    }
    common_box(stdout, 68, "PPO on CartPole");
    printf("\nEnvironment: %s\n", env_name(a));
    if (!lab_arg_bool(a, "toy-env"))
        printf("  gravity 9.8, cart 1.0, pole 0.1 (half-length 0.5), force ±10, τ 0.02 s, "
               "Euler;\n  ends past 12° or |x| > 2.4, truncated at 500 steps, reward 1 per "
               "step\n");
    fflush(stdout);
    return -1;
}

/* ---- PPO, the default ---- */

static double mean_of(const float *v, int n)
{
    double s = 0.0;
    for (int i = 0; i < n; i++)
        s += v[i];
    return n ? s / n : 0.0;
}

static int ppo_run(mlsys_comm *c, const lab_args *a)
{
    int root = mlsys_rank(c) == 0, world = mlsys_size(c);
    rl_ppo_config k;
    config_from(a, &k);
    char err[256];
    rl_ppo *p = rl_ppo_create(&k, c, err, sizeof err);
    if (!p) {
        if (root)
            fprintf(stderr, "mlsys-lab: %s: %s\n", LAB_ID, err);
        return 2;
    }
    long batch = (long)k.num_envs * k.num_steps, iters = k.total_steps / batch;
    int every = (int)lab_arg_int(a, "print-every");
    int v1 = k.env == RL_CARTPOLE_V1;
    if (root) {
        printf("Ranks: %d, each running %d of the %d environments; gradients all-reduced\n",
               world, k.num_envs / world, k.num_envs);
        printf("\nConfiguration (CleanRL's defaults but the learning rate, 2.5e-4 there):\n");
        printf("  rollout %d environments x %d steps = %ld samples; %d epochs x %d minibatches "
               "of %ld\n", k.num_envs, k.num_steps, batch, k.update_epochs, k.num_minibatches,
               batch / k.num_minibatches);
        printf("  actor and critic 4 -> %d -> tanh -> %d -> tanh -> 2 | 1, orthogonal init\n",
               k.hidden, k.hidden);
        printf("  Adam lr %g%s, γ %g, λ %g, clip ε %g, entropy %g, value %g (clipped), max "
               "grad norm %g\n", (double)k.lr, k.anneal_lr ? " annealed to 0" : "",
               (double)k.gamma, (double)k.lambda, (double)k.clip, (double)k.ent_coef,
               (double)k.vf_coef, (double)k.max_grad_norm);
        printf("  advantages normalised per minibatch; seed %llu\n",
               (unsigned long long)k.seed);
        printf("\nTraining: %ld steps = %ld rollouts\n\n", iters * batch, iters);
        printf("(losses, approxkl and clipfrac: means over the update's %d minibatches)\n",
               k.update_epochs * k.num_minibatches);
        printf("%9s %8s %8s %8s %8s %8s %8s %8s %8s %9s\n", "step", "episodes", "mean100",
               "rollout", "policy", "value", "entropy", "approxkl", "clipfrac", "steps/s");
    }
    /* the first and last ten episodes, for the original's summary */
    float first10[10], last10[10];
    int nfirst = 0;
    long nlast = 0;
    long solved_step = -1, clip_step = 0;
    double solved_s = 0.0, best = 0.0, clip_sum = 0.0, clip_max = 0.0, kl_sum = 0.0;
    rl_ppo_stats st;
    double t0 = mlsys_now_s();
    int rc;
    while ((rc = rl_ppo_iterate(p, &st)) == 0) {
        double now = mlsys_now_s() - t0;
        clip_sum += st.clipfrac;
        kl_sum += st.approx_kl;
        if (st.clipfrac > clip_max) {
            clip_max = st.clipfrac;
            clip_step = st.global_step;
        }
        for (int i = 0; i < st.episodes; i++) {
            if (nfirst < 10)
                first10[nfirst++] = st.returns[i];
            last10[nlast++ % 10] = st.returns[i];
        }
        if (st.episodes_total > 0 && st.mean100 > best)
            best = st.mean100;
        if (solved_step < 0 && st.episodes_total >= 100 && st.mean100 >= SOLVED) {
            solved_step = st.global_step;
            solved_s = now;
        }
        if (root && st.episodes_total > 0) {
            mlsys_emit_point(c, "mean return, last 100 episodes", (double)st.global_step,
                             st.mean100);
            if (st.episodes > 0)
                mlsys_emit_point(c, "mean return, this rollout", (double)st.global_step,
                                 mean_of(st.returns, st.episodes));
        }
        if (root && (st.iteration % every == 0 || st.iteration == iters)) {
            char roll[16] = "       -";         /* no episode ended in this rollout */
            if (st.episodes)
                snprintf(roll, sizeof roll, "%8.1f", mean_of(st.returns, st.episodes));
            printf("%9ld %8ld %8.1f %s %8.4f %8.3f %8.3f %8.4f %8.3f %9.0f\n", st.global_step,
                   st.episodes_total, st.mean100, roll, st.policy_loss, st.value_loss,
                   st.entropy, st.approx_kl, st.clipfrac, st.global_step / now);
        }
    }
    double total_s = mlsys_now_s() - t0;
    long steps = st.global_step ? st.global_step : iters * batch;
    if (rc < 0) {
        if (root)
            fprintf(stderr, "mlsys-lab: %s: %s\n", LAB_ID, mlsys_errmsg(c));
        rl_ppo_free(p);
        return 1;
    }
    if (root) {
        int nl = nlast < 10 ? (int)nlast : 10;
        double f = mean_of(first10, nfirst), l = mean_of(last10, nl);
        printf("\nSummary\n");
        printf("  mean return of the first 10 episodes: %6.1f\n", f);
        printf("  mean return of the last 10 episodes:  %6.1f  (%+.1f)\n", l, l - f);
        if (v1) {
            if (solved_step >= 0)
                printf("  solved: the last 100 episodes averaged >= %.0f at step %ld, after "
                       "%.2f s\n", SOLVED, solved_step, solved_s);
            else
                printf("  not solved: the best 100-episode mean was %.1f (the bar is %.0f)\n",
                       best, SOLVED);
        }
        printf("  %ld environment steps in %.2f s on %d rank%s: %.0f steps/s\n", steps,
               total_s, world, world == 1 ? "" : "s", steps / total_s);
        long n_it = st.iteration ? st.iteration : iters;
        printf("  the clip: in the mean update %.2f%% of the samples left [%g, %g]\n"
               "  (the most: %.1f%% at step %ld); approximate KL %.4f per update on "
               "average\n", 100.0 * clip_sum / n_it, 1.0 - (double)k.clip, 1.0 + (double)k.clip,
               100.0 * clip_max, clip_step, kl_sum / n_it);
        printf("\nHow PPO learned here:\n"
               "  1. Collect: %d environments run the current policy for %d steps each.\n"
               "  2. Advantages: GAE with λ = %g turns rewards and the critic's values into\n"
               "     A_t; the critic's targets are A_t + V(s_t).\n"
               "  3. Update: %d passes of %d shuffled minibatches. The policy loss is\n"
               "     -min(r·A, clip(r, 1-ε, 1+ε)·A) with r = π_new(a|s) / π_old(a|s), ε = %g:\n"
               "     for A > 0 nothing is gained by pushing r past 1+ε, for A < 0 nothing by\n"
               "     pushing it below 1-ε, so one rollout cannot move the policy far.\n"
               "  The same clipped update trains language models in RLHF: stable, first-order,\n"
               "  and each batch of (expensive) generations is reused for several steps.\n",
               k.num_envs, k.num_steps, (double)k.lambda, k.update_epochs, k.num_minibatches,
               (double)k.clip);
    }
    rl_ppo_free(p);
    return 0;
}

/* ---- --no-update: the original's loop ---- */

/* The original's networks: 4 -> 64 -> ReLU -> out, weights N(0, 0.1), biases 0. */
typedef struct orig_net {
    float w1[64 * 4], b1[64], w2[2 * 64], b2[2];
    float h[64];
} orig_net;

static void orig_init(orig_net *n, int out, mlsys_rng *r)
{
    memset(n, 0, sizeof *n);
    nn_init_normal(n->w1, 64 * 4, 0.0f, 0.1f, r);
    nn_init_normal(n->w2, (size_t)64 * out, 0.0f, 0.1f, r);
}

static void orig_forward(orig_net *n, const float *obs, float *out, int k)
{
    nn_linear_forward(n->h, obs, n->w1, n->b1, 1, 4, 64);
    nn_relu_forward(n->h, n->h, 64);
    nn_linear_forward(out, n->h, n->w2, n->b2, 1, 64, k);
}

/* softmax with the maximum subtracted, and log(p + 1e-8) as the original takes it */
static void orig_probs(const float *logits, float *p)
{
    float m = logits[0] > logits[1] ? logits[0] : logits[1];
    float e0 = expf(logits[0] - m), e1 = expf(logits[1] - m);
    p[0] = e0 / (e0 + e1);
    p[1] = e1 / (e0 + e1);
}

#define MAX_EPISODE 1024

static int no_update_run(const lab_args *a)
{
    int episodes = (int)lab_arg_int(a, "episodes");
    float gamma = (float)lab_arg_double(a, "gamma"), lam = (float)lab_arg_double(a, "lam");
    float eps = (float)lab_arg_double(a, "clip-epsilon");
    rl_cartpole_kind kind = lab_arg_bool(a, "toy-env") ? RL_CARTPOLE_TOY : RL_CARTPOLE_V1;
    mlsys_rng r;
    mlsys_rng_seed(&r, (uint64_t)lab_arg_int(a, "seed"));
    orig_net actor, critic;
    orig_init(&actor, 2, &r);
    orig_init(&critic, 1, &r);
    printf("\n--no-update: the original's loop. One episode at a time, its steps collected,\n"
           "GAE computed, then an \"update\" that recomputes the losses with the same,\n"
           "never-changed networks: the ratio is exactly 1, nothing is clipped, and the\n"
           "returns cannot improve.\n");
    printf("\nConfiguration: %d episodes, γ %g, λ %g, clip ε %g, seed %ld\n", episodes,
           (double)gamma, (double)lam, (double)eps, lab_arg_int(a, "seed"));
    printf("\n%s\n", "Training:");
    printf("%s\n", "-----------------------------------------------------------------------");
    float *obs = malloc(MAX_EPISODE * 4 * sizeof *obs), *old = malloc(MAX_EPISODE * sizeof *old);
    float *val = malloc(MAX_EPISODE * sizeof *val), *rew = malloc(MAX_EPISODE * sizeof *rew);
    float *adv = malloc(MAX_EPISODE * sizeof *adv), *now = malloc(MAX_EPISODE * sizeof *now);
    float *ep_rewards = malloc((size_t)episodes * sizeof *ep_rewards);
    uint8_t *done = malloc(MAX_EPISODE);
    int *act = malloc(MAX_EPISODE * sizeof *act);
    int status = 0;
    for (int ep = 0; ep < episodes; ep++) {
        rl_cartpole env;
        rl_cartpole_reset(&env, kind, &r);
        int T = 0, term = 0, trunc = 0;
        float total = 0.0f;
        while (!term && !trunc && T < MAX_EPISODE) {
            float logits[2], p[2], v;
            rl_cartpole_obs(&env, obs + (size_t)T * 4);
            orig_forward(&actor, obs + (size_t)T * 4, logits, 2);
            orig_forward(&critic, obs + (size_t)T * 4, &v, 1);
            orig_probs(logits, p);
            act[T] = nn_sample_categorical(p, 2, &r);
            old[T] = logf(p[act[T]] + 1e-8f);
            val[T] = v;
            rew[T] = rl_cartpole_step(&env, act[T], &r, &term, &trunc);
            total += rew[T];
            done[T] = (uint8_t)(term || trunc);
            T++;
        }
        done[T - 1] = 1;            /* the original takes V = 0 after the last step */
        rl_gae(adv, rew, val, done, 0.0f, T, gamma, lam);
        /* the "update": the same networks, so the same log-probabilities */
        double vloss = 0.0, clipfrac;
        for (int t = 0; t < T; t++) {
            float logits[2], p[2], v;
            orig_forward(&actor, obs + (size_t)t * 4, logits, 2);
            orig_forward(&critic, obs + (size_t)t * 4, &v, 1);
            orig_probs(logits, p);
            now[t] = logf(p[act[t]] + 1e-8f);
            double ret = (double)val[t] + adv[t];
            vloss += (v - ret) * (v - ret);
        }
        double ploss = rl_ppo_policy_loss(NULL, now, old, adv, T, eps, &clipfrac, NULL);
        vloss /= T;
        /* with the ratio 1, the losses are plain functions of the advantages: the policy
         * loss is -mean(A), the value loss mean(A²). Say so if they are not. */
        double ma = 0.0, ma2 = 0.0;
        for (int t = 0; t < T; t++) {
            ma += adv[t];
            ma2 += (double)adv[t] * adv[t];
        }
        ma /= T;
        ma2 /= T;
        if (clipfrac != 0.0 || fabs(ploss + ma) > 1e-6 * (1.0 + fabs(ma)) ||
            fabs(vloss - ma2) > 1e-6 * (1.0 + ma2)) {
            fprintf(stderr, "mlsys-lab: %s: episode %d: the unchanged networks gave clip "
                    "fraction %g, policy loss %g (want %g), value loss %g (want %g)\n", LAB_ID,
                    ep + 1, clipfrac, ploss, -ma, vloss, ma2);
            status = 1;
        }
        ep_rewards[ep] = total;
        if ((ep + 1) % 10 == 0) {
            double avg = mean_of(ep_rewards + (ep + 1 - 10), 10);
            printf("Episode %4d | Reward: %6.1f | Avg(10): %6.1f | Clip: %.2f | policy loss "
                   "%+.4f | value loss %.4f\n", ep + 1, total, avg, clipfrac, ploss, vloss);
        }
    }
    int n10 = episodes < 10 ? episodes : 10;
    double first = 0, last = 0;
    for (int i = 0; i < n10; i++) {
        first += ep_rewards[i];
        last += ep_rewards[episodes - n10 + i];
    }
    first /= 10;                    /* the original divides by 10 even with fewer episodes */
    last /= 10;
    printf("\nSummary:\n  first 10 episodes: %.1f\n  last 10 episodes:  %.1f\n"
           "  difference:        %+.1f  (noise: the networks never changed)\n", first, last,
           last - first);
    printf("\nWithout --no-update the lab runs a real PPO that solves CartPole-v1.\n");
    free(obs);
    free(old);
    free(val);
    free(rew);
    free(adv);
    free(now);
    free(ep_rewards);
    free(done);
    free(act);
    return status;
}

static int ppo_rank(mlsys_comm *c, const lab_args *a)
{
    if (lab_arg_bool(a, "no-update"))
        return no_update_run(a);
    return ppo_run(c, a);
}

const lab ch12_ppo_cartpole_lab = {
    .id = LAB_ID,
    .title = "PPO on CartPole",
    .summary = "PPO with CleanRL's settings learns CartPole-v1 across ranks; returns plotted",
    .flags = ppo_flags,
    .port = 29512,
    .min_ranks = 1,
    .max_ranks = 64,
    .before = ppo_before,
    .rank_main = ppo_rank,
    .view = "plot",
};
