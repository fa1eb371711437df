/* rlhf_loop.c - ch13/rlhf-loop: RLHF on the lab's own model. The actor (the shipped model)
 * answers sums "A + B =", the reward model (`mlsys-lab train --reward-model`, or trained here
 * when no file is given) scores the lines, the reference and the critic score the tokens, and
 * PPO (or GRPO) updates the actor; per iteration the reward (the score minus β·KL; GRPO's:
 * the score), the rule's share of right sums, the KL to the reference and the phases' times.
 * --simulate: the original's placeholder. */
#include "../common/common.h"
#include "../common/load_model.h"
#include "../../core/rl/rlhf.h"
#include "../../core/llm/model.h"
#include "../../core/trace_values.h"
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define LAB_ID "ch13/rlhf-loop"

static const lab_flag loop_flags[] = {
    {"rl-algo", 0, FLAG_CHOICE, "ppo", "ppo|grpo", 0, 0,
     "ppo (critic, GAE) or grpo (group-relative advantages, no critic)"},
    {"placement", 0, FLAG_CHOICE, "colocated", "colocated|split", 0, 0,
     "every role on every rank, or generating ranks apart from training ranks"},
    {"gen-ranks", 0, FLAG_INT, "1", NULL, 1, 63, "split: ranks that generate (the first ones)"},
    {"iterations", 0, FLAG_INT, "20", NULL, 1, 100000, "generate-score-train-sync rounds"},
    {"prompts", 0, FLAG_INT, "32", NULL, 1, 4096, "problems per iteration, all ranks"},
    {"group", 0, FLAG_INT, NULL, NULL, 1, 64, "samples per problem (ppo 1, grpo 4)"},
    {"max-new", 0, FLAG_INT, "4", NULL, 1, 12, "tokens of an answer at most"},
    {"max-operand", 0, FLAG_INT, "9", NULL, 0, 49, "operands 0..N"},
    {"temperature", 0, FLAG_DOUBLE, "1.0", NULL, 0, 10, "sampling temperature"},
    {"kl-coef", 0, FLAG_DOUBLE, "0.1", NULL, 0, 100, "β of the KL penalty"},
    {"lr", 0, FLAG_DOUBLE, "1e-4", NULL, 0, 1, "the actor's AdamW learning rate"},
    {"critic-lr", 0, FLAG_DOUBLE, "1e-4", NULL, 0, 1, "the critic's"},
    {"epochs", 0, FLAG_INT, "2", NULL, 1, 100, "passes over each batch"},
    {"minibatches", 0, FLAG_INT, "2", NULL, 1, 4096, "per pass, per rank"},
    {"bucket-kb", 0, FLAG_INT, "256", NULL, 1, 1 << 20, "split: weight broadcast bucket (KiB)"},
    {"model", 0, FLAG_STR, "assets/models/model.bin", NULL, 0, 0, "the actor to start from"},
    {"tokenizer", 0, FLAG_STR, "assets/models/tokenizer.bin", NULL, 0, 0, "its tokenizer"},
    {"reward-model", 0, FLAG_STR, NULL, NULL, 0, 0,
     "reward model file (mlsys-lab train --reward-model); none: trained here first"},
    {"rm-steps", 0, FLAG_INT, "600", NULL, 1, 1000000, "steps of the reward model trained here"},
    {"seed", 0, FLAG_INT, "1", NULL, 0, 1L << 40, "seed of problems and samples"},
    {"simulate", 0, FLAG_BOOL, NULL, NULL, 0, 0,
     "the original's placeholder run: random numbers, no model"},
    {"world-size", 'w', FLAG_INT, "1", NULL, 1, 64, "ranks"},
    {NULL, 0, 0, NULL, NULL, 0, 0, NULL}
};

static void config_from(const lab_args *a, rl_rlhf_config *k)
{
    rl_rlhf_defaults(k);
    k->algo = strcmp(lab_arg_str(a, "rl-algo"), "grpo") ? RL_ALGO_PPO : RL_ALGO_GRPO;
    k->placement = strcmp(lab_arg_str(a, "placement"), "split") ? RL_PLACE_COLOCATED
                                                                 : RL_PLACE_SPLIT;
    k->gen_ranks = (int)lab_arg_int(a, "gen-ranks");
    k->prompts = (int)lab_arg_int(a, "prompts");
    k->group = lab_arg_given(a, "group") ? (int)lab_arg_int(a, "group")
                                         : k->algo == RL_ALGO_GRPO ? 4 : 1;
    k->max_new = (int)lab_arg_int(a, "max-new");
    k->max_operand = (int)lab_arg_int(a, "max-operand");
    k->temperature = (float)lab_arg_double(a, "temperature");
    k->beta = (float)lab_arg_double(a, "kl-coef");
    k->lr = (float)lab_arg_double(a, "lr");
    k->critic_lr = (float)lab_arg_double(a, "critic-lr");
    k->epochs = (int)lab_arg_int(a, "epochs");
    k->minibatches = (int)lab_arg_int(a, "minibatches");
    k->bucket_bytes = (size_t)lab_arg_int(a, "bucket-kb") << 10;
    k->seed = (uint64_t)lab_arg_int(a, "seed");
}

/* ---- --simulate: the original's placeholder pipeline (curriculum §13.3) ---- */

static double unif(mlsys_rng *r, double lo, double hi)
{
    return lo + (hi - lo) * mlsys_rng_uniform(r);
}

static int simulate(const lab_args *a)
{
    const float beta = 0.02f, gamma = 1.0f, lam = 0.95f, eps = 0.2f;
    mlsys_rng r;
    mlsys_rng_seed(&r, (uint64_t)lab_arg_int(a, "seed"));
    common_box(stdout, 68, "RLHF loop (placeholder)");
    printf("\nSIMULATION: random numbers stand in for every model (the original's "
           "rlhf_loop_pseudo.py);\nnothing here learns. Run without --simulate for the real "
           "loop.\n\nbatch size: 4 prompts\n");
    float lp[4][30], ref[4][30], val[4][30], rew[4][30], adv[4][30];
    int len[4], total = 0;
    float score[4];
    double kl_avg = 0.0, vloss = 0.0, ploss = 0.0;
    int nv = 0, np = 0;
    printf("\n1. generate\n");
    for (int i = 0; i < 4; i++) {
        len[i] = 10 + (int)(mlsys_rng_u64(&r) % 21);
        total += len[i];
        printf("   response %d: %d tokens\n", i + 1, len[i]);
    }
    printf("2. score\n");
    for (int i = 0; i < 4; i++) {
        score[i] = (float)unif(&r, -1, 1);
        printf("   response %d: reward %.3f\n", i + 1, score[i]);
    }
    for (int i = 0; i < 4; i++) {
        double kl = 0.0;
        for (int t = 0; t < len[i]; t++) {
            lp[i][t] = (float)unif(&r, -3, -0.1);
            ref[i][t] = (float)unif(&r, -3, -0.1);
            kl += lp[i][t] - ref[i][t];
            val[i][t] = 0.5f * (float)(len[i] - t) / (float)len[i];
        }
        kl_avg += kl / len[i] / 4.0;
    }
    printf("3. KL: average %.4f\n4. values:", kl_avg);
    for (int i = 0; i < 4; i++) {
        double m = 0.0;
        for (int t = 0; t < len[i]; t++)
            m += val[i][t];
        printf(" %.3f", m / len[i]);
    }
    printf("\n5. rewards (last token, RM score):\n");
    for (int i = 0; i < 4; i++) {
        rl_token_rewards(rew[i], NULL, lp[i], ref[i], len[i], beta, score[i], RL_REWARD_END);
        printf("   response %d: %.4f (%.3f)\n", i + 1, rew[i][len[i] - 1], score[i]);
    }
    printf("6. GAE, normalised per response\n");
    for (int i = 0; i < 4; i++) {
        rl_gae(adv[i], rew[i], val[i], NULL, 0.0f, len[i], gamma, lam);
        double m = 0.0, v = 0.0;
        for (int t = 0; t < len[i]; t++)
            m += adv[i][t];
        m /= len[i];
        for (int t = 0; t < len[i]; t++)
            v += (adv[i][t] - m) * (adv[i][t] - m);
        double sd = sqrt(v / len[i]);
        for (int t = 0; t < len[i]; t++)
            adv[i][t] = (float)((adv[i][t] - m) / (sd + 1e-8));
        printf("   response %d: mean %.4f\n", i + 1, 0.0);
    }
    for (int i = 0; i < 4; i++)
        for (int t = 0; t < len[i]; t++) {
            ploss += -adv[i][t];            /* ratio 1: the placeholder's "update" */
            np++;
            vloss += (val[i][t] - rew[i][t]) * (val[i][t] - rew[i][t]);
            nv++;
        }
    printf("7. PPO (placeholder: new log-prob := old, ratio 1, clip ε %.1f)\n", (double)eps);
    printf("   policy loss %.4f, value loss %.4f, clip fraction 0.00%%\n",
           ploss / np + 0.0, vloss / nv);
    printf("\nsummary: %d tokens generated, 4 responses scored, average KL %.4f, β %.2f, "
           "total KL penalty %.4f\n", total, kl_avg, (double)beta, kl_avg * beta);
    printf("(placeholder numbers: the real loop is `mlsys-lab run %s`)\n", LAB_ID);
    return 0;
}

/* ---- the real loop ---- */

/* The reward model trained by before() goes to the ranks (separate processes) as a file
 * named by this variable; a rank without it trains its own (the same one: it is seeded). */
#define RM_ENV "MLSYS_RLHF_REWARD_MODEL"
static rl_rm g_rm;
static int g_have_rm;
static int g_rm_steps = -1, g_rm_maxop = -1;    /* what the kept one was trained with */
static char g_rm_tmp[64];

static int load_models(const lab_args *a, llm_config *c, llm_weights *w, llm_tokenizer *t,
                       int quiet)
{
    char err[512];
    if (common_load_model(a, LAB_ID, c, w, t))
        return 2;
    const char *rmp = lab_arg_text(a, "reward-model");
    if (!rmp && quiet && getenv(RM_ENV))
        rmp = getenv(RM_ENV);                   /* a rank: the one before() trained */
    int steps = (int)lab_arg_int(a, "rm-steps"), maxop = (int)lab_arg_int(a, "max-operand");
    /* the front end runs before() in one long process: a model trained for the same flags
     * is kept; a file, or other flags, replace it */
    if (g_have_rm && (rmp || steps != g_rm_steps || maxop != g_rm_maxop)) {
        rl_rm_free(&g_rm);
        g_have_rm = 0;
    }
    if (rmp) {
        if (rl_rm_load(&g_rm, rmp, err, sizeof err)) {
            fprintf(stderr, "mlsys-lab: %s: %s\n", LAB_ID, err);
            goto fail;
        }
        if (g_rm.c.vocab_size != c->vocab_size) {
            fprintf(stderr, "mlsys-lab: %s: %s: vocabulary %d, the model's %d\n", LAB_ID,
                    rmp, g_rm.c.vocab_size, c->vocab_size);
            rl_rm_free(&g_rm);
            goto fail;
        }
        g_have_rm = 1;
        if (!quiet)
            printf("Reward model: %s\n", rmp);
        return 0;
    }
    if (g_have_rm)
        goto share;
    /* none given: the same recipe as `mlsys-lab train --reward-model`, here */
    char dp[PATH_MAX + 64];
    llm_config dc;
    llm_weights dw;
    const char *dpath = lab_asset_path("assets/models/draft.bin", dp, sizeof dp);
    if (llm_checkpoint_read(dpath, &dc, &dw, err, sizeof err) ||
        rl_rm_init(&g_rm, &dc, &dw, err, sizeof err)) {
        fprintf(stderr, "mlsys-lab: %s: %s\n", LAB_ID, err);
        goto fail;
    }
    llm_weights_free(&dw);
    rl_rm_train_opts o;
    rl_rm_train_defaults(&o);
    o.steps = steps;
    o.max_operand = maxop;
    rl_rm_report rep;
    if (!quiet) {
        printf("Reward model: none given, training one (draft.bin's body + a scalar head, %d "
               "steps of %d pairs)...\n", o.steps, o.pairs);
        fflush(stdout);
    }
    if (rl_rm_train(&g_rm, t, &o, &rep, err, sizeof err)) {
        fprintf(stderr, "mlsys-lab: %s: %s\n", LAB_ID, err);
        rl_rm_free(&g_rm);
        goto fail;
    }
    if (!quiet)
        printf("  held-out preference accuracy %.1f%% (%.1f s); `mlsys-lab train "
               "--reward-model` keeps one in a file\n", 100.0 * rep.heldout_acc, rep.seconds);
    g_have_rm = 1;
    g_rm_steps = steps;
    g_rm_maxop = maxop;
share:
    if (!quiet) {
        /* for the ranks: they are processes of their own */
        snprintf(g_rm_tmp, sizeof g_rm_tmp, "/tmp/mlsys-rlhf-rm-%d.bin", (int)getpid());
        if (rl_rm_save(&g_rm, g_rm_tmp, err, sizeof err) == 0)
            setenv(RM_ENV, g_rm_tmp, 1);
        else
            g_rm_tmp[0] = '\0';
    }
    return 0;
fail:
    llm_tokenizer_free(t);
    llm_weights_free(w);
    return 2;
}

static int loop_before(const lab_args *a)
{
    if (lab_arg_bool(a, "simulate"))
        return -1;
    rl_rlhf_config k;
    char err[256];
    unsetenv(RM_ENV);
    config_from(a, &k);
    if (rl_rlhf_check(&k, (int)lab_arg_int(a, "world-size"), err, sizeof err)) {
        fprintf(stderr, "mlsys-lab: %s: %s\n", LAB_ID, err);
        return 2;
    }
    common_box(stdout, 68, "RLHF on the lab's model");
    printf("\nTask: the model completes \"A + B =\" (operands 0..%d); the rule: right sum 1, "
           "wrong 0, no sum line -1\n", k.max_operand);
    /* the reward model once, here: the ranks inherit it */
    llm_config c;
    llm_weights w;
    llm_tokenizer t;
    int rc = load_models(a, &c, &w, &t, 0);
    if (rc)
        return rc;
    llm_tokenizer_free(&t);
    llm_weights_free(&w);
    fflush(stdout);
    return -1;
}

static int loop_rank(mlsys_comm *c, const lab_args *a)
{
    if (lab_arg_bool(a, "simulate"))
        return mlsys_rank(c) == 0 ? simulate(a) : 0;
    int root = mlsys_rank(c) == 0;
    rl_rlhf_config k;
    config_from(a, &k);
    llm_config mc;
    llm_weights w;
    llm_tokenizer t;
    int rc = load_models(a, &mc, &w, &t, 1);
    if (rc)
        return rc;
    char err[512];
    rl_rlhf *h = rl_rlhf_create(&k, c, &mc, &w, &g_rm, &t, err, sizeof err);
    if (!h) {
        fprintf(stderr, "mlsys-lab: %s: %s\n", LAB_ID, err);
        rc = 2;
        goto out;
    }
    int iters = (int)lab_arg_int(a, "iterations"), world = mlsys_size(c);
    if (root) {
        printf("Roles: actor (the shipped model, trained), reference (frozen copy), reward "
               "model,\n       %s; a generator holds the actor's weights for the KV-cache "
               "engine\n", k.algo == RL_ALGO_PPO ? "critic (a copy with a value head)"
                                                  : "no critic (GRPO)");
        if (k.placement == RL_PLACE_SPLIT)
            printf("Placement: split: rank%s 0..%d generate, ranks %d..%d score and train; "
                   "weights broadcast in %zu KiB buckets\n", k.gen_ranks > 1 ? "s" : "",
                   k.gen_ranks - 1, k.gen_ranks, world - 1, k.bucket_bytes >> 10);
        else if (world == 1)
            printf("Placement: colocated: every role in this one process\n");
        else
            printf("Placement: colocated: all roles on each of %d ranks, gradients "
                   "all-reduced\n", world);
        printf("%s: %d problems x %d sample%s, answers of <= %d tokens, β %g, lr %g, %d "
               "epochs x %d minibatches\n\n", k.algo == RL_ALGO_PPO ? "PPO" : "GRPO",
               k.prompts, k.group, k.group == 1 ? "" : "s", k.max_new, (double)k.beta,
               (double)k.lr, k.epochs, k.minibatches);
        /* the reward column names what it holds: not the rule printed above */
        if (k.algo == RL_ALGO_PPO)
            printf("score-βKL: the reward model's score of an answer minus β x its KL to the "
                   "reference,\nwhat PPO maximises (right and no-sum are the rule's verdicts)"
                   "\n");
        else
            printf("RM score: the reward model's score of an answer, what GRPO compares "
                   "within a group;\nits loss holds the KL to the reference (k3), not its "
                   "reward (right and no-sum: the rule's)\n");
        printf("iter %s %7s %7s %8s %7s %6s %6s  %s\n",
               k.algo == RL_ALGO_PPO ? "score-βKL" : " RM score", "right", "no-sum", "KL",
               "ratio0", "s/it", "cpu s", "% generate/score/advantage/train/sync");
        fflush(stdout);
    }
    /* the first and the last W iterations' means: one iteration's batch is a small sample */
    int W = iters >= 10 ? 5 : iters / 2 > 0 ? iters / 2 : 1;
    double head[3] = {0}, tail[3] = {0}, sum_s = 0, ph_s[RL_PH_COUNT] = {0}, sync_later = 0;
    rl_rlhf_stats st;
    for (int i = 0; i < iters; i++) {
        if ((rc = rl_rlhf_iterate(h, &st, err, sizeof err)) != 0) {
            fprintf(stderr, "mlsys-lab: %s: %s\n", LAB_ID, err);
            rc = 1;
            goto out;
        }
        /* PPO's reward is the score minus β·KL; GRPO's the score (its KL is in the loss) */
        double rew = k.algo == RL_ALGO_PPO ? st.reward - (double)k.beta * st.kl : st.reward;
        double v[3] = {rew, st.right, st.kl};
        for (int q = 0; q < 3; q++) {
            if (i < W)
                head[q] += v[q] / W;
            if (i >= iters - W)
                tail[q] += v[q] / W;
        }
        sum_s += st.total_s;
        for (int p = 0; p < RL_PH_COUNT; p++)
            ph_s[p] += st.phase_s[p];
        if (i > 0)
            sync_later += st.phase_s[RL_PH_SYNC];
        if (!root)
            continue;
        mlsys_emit_point(c, k.algo == RL_ALGO_PPO ? "score - β·KL" : "RM score",
                         st.iteration, rew);
        mlsys_emit_point(c, "KL to reference", st.iteration, st.kl);
        mlsys_emit_point(c, "right sums %", st.iteration, 100.0 * st.right);
        char sh[64];
        int n = 0;
        for (int p = 0; p < RL_PH_COUNT; p++)
            n += snprintf(sh + n, sizeof sh - (size_t)n, "%s%.0f", p ? "/" : "",
                          100.0 * st.phase_s[p] / (st.total_s > 0 ? st.total_s : 1));
        printf("%4d %+9.3f %6.1f%% %6.1f%% %8.4f %7.0e %6.3f %6.3f  %s\n", st.iteration,
               rew, 100.0 * st.right, 100.0 * st.malformed, st.kl, st.ratio_dev0,
               st.total_s, st.cpu_s, sh);
        fflush(stdout);
    }
    if (root) {
        char lines[6][64];
        int n = rl_rlhf_samples(h, lines, 6);
        printf("\nLast answers (rank 0's):");
        for (int j = 0; j < n; j++)
            printf("%s %s", j % 3 ? "  |" : "\n ", lines[j]);
        printf("\n\nMeans of the first and the last %d iteration%s: %s %+.3f -> %+.3f, "
               "right sums %.1f%% -> %.1f%%,\nKL to the reference %.4f -> %.4f nats per answer; "
               "%.2f s per iteration\n", W, W == 1 ? "" : "s",
               k.algo == RL_ALGO_PPO ? "score - β·KL" : "RM score", head[0], tail[0],
               100.0 * head[1], 100.0 * tail[1], head[2], tail[2], sum_s / iters);
        printf("Phases, all iterations (the first trainer's clock):");
        for (int p = 0; p < RL_PH_COUNT; p++)
            printf(" %s %.1f%%", rl_phase_name(p), 100.0 * ph_s[p] / (sum_s > 0 ? sum_s : 1));
        printf("\n");
        if (k.placement == RL_PLACE_SPLIT && iters > 1 && sync_later > 0) {
            /* the first sync also pays the first touch of the buffers: left out */
            double mb = (double)llm_param_count(&mc) * 4.0 / 1048576.0;
            double per = sync_later / (iters - 1);
            printf("Weight sync: %.2f MiB (%d tensors, buckets of %zu KiB) in %.2f ms per "
                   "iteration after the first, %.2f GB/s (compare mlsys-lab bench "
                   "broadcast)\n", mb, nn_tf_tensor_count(&mc), k.bucket_bytes >> 10,
                   1e3 * per, mb * 1048576.0 / per / 1e9);
        }
        printf("ratio0 is max |π/π_old - 1| of each iteration's first update: old and new "
               "log-probs come from the same forward, so it is 0\n");
    }
    rc = 0;
out:
    rl_rlhf_free(h);
    llm_tokenizer_free(&t);
    llm_weights_free(&w);
    return rc;
}

static void loop_after(const lab_args *a, int status)
{
    (void)a;
    (void)status;
    if (g_rm_tmp[0])
        unlink(g_rm_tmp);
}

const lab ch13_rlhf_loop_lab = {
    .id = LAB_ID,
    .title = "The RLHF loop",
    .summary = "PPO/GRPO on the lab's model: four models, reward and KL plotted, flow view",
    .flags = loop_flags,
    .port = 29513,
    .min_ranks = 1,
    .max_ranks = 64,
    .before = loop_before,
    .rank_main = loop_rank,
    .after = loop_after,
    .view = "flow",
};
