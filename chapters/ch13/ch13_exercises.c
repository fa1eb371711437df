/* ch13_exercises.c - Chapter 13's exercises: per-token rewards with the KL penalty and an adaptive
 * KL coefficient (the learner's version of core/rl's seam rl_token_rewards), the reward
 * model's pairwise loss and its gradient, the tensor shapes of one RLHF step (predict), and
 * beta at 0 and at 10 on reward-calculator (experiment). */
#include "../../lab/exercise/exercise.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const int sizes_1[] = {1, 0};

/* ---- ch13-token-rewards (implement) ---- */

static const char *const rewards_hints[] = {
    "For one token, which log-probability is subtracted from which to get its KL estimate, "
    "and what sign does the penalty -beta * kl_t have when the actor likes the token more "
    "than the reference does?",
    "Where does the score go when spread is 0, and how much of it does each token get when "
    "spread is 1? Do the two modes give the same sum?",
    "The controller: (kl - target) / target is the relative error. Clipped to [-0.2, 0.2], by "
    "how much at most can one update change beta?",
    NULL
};

static const ex_implement rewards_impl = {
    .function = "token_rewards", .world_sizes = sizes_1, .timeout_ms = 5000, .limit_ms = 30000,
};

static const exercise ch13_token_rewards = {
    .id = "ch13-token-rewards",
    .chapter = 13,
    .kind = EX_IMPLEMENT,
    .title = "Per-token rewards with the KL penalty, and an adaptive beta",
    .task = "Write token_rewards(): r_t = -beta * (log pi - log pi_ref) plus the reward "
            "model's score on the last token (or spread evenly), and kl_controller(): beta "
            "scaled by 1 + 0.1 * clip((kl - target) / target, -0.2, 0.2).",
    .hints = rewards_hints,
    .lab = "ch13/reward-calculator",
    .starter = "starter.c",
    .solution = "solution.c",
    .workfile = "token_rewards.c",
    .impl = &rewards_impl,
};

/* ---- ch13-rm-loss (implement) ---- */

static const char *const rm_hints[] = {
    "-log sigmoid(m) = log(1 + e^(-m)). For m = -200, what is e^(-m) in a float, or even in a "
    "double, and what does log of it give?",
    "log(1 + e^(-m)) = -m + log(1 + e^(m)). Which of the two forms is safe when m is very "
    "negative, and which when m is very positive?",
    "d/dm of log(1 + e^(-m)) is -e^(-m) / (1 + e^(-m)) = -sigmoid(-m). How do r_w and r_l "
    "enter m, and what does the mean over n pairs do to each gradient?",
    NULL
};

static const ex_implement rm_impl = {
    .function = "rm_pairwise_loss", .world_sizes = sizes_1, .timeout_ms = 5000,
    .limit_ms = 30000,
};

static const exercise ch13_rm_loss = {
    .id = "ch13-rm-loss",
    .chapter = 13,
    .kind = EX_IMPLEMENT,
    .title = "The reward model's pairwise loss and its gradient",
    .task = "Write rm_pairwise_loss(): the mean of -log sigmoid(r_w - r_l) over preference "
            "pairs, finite for any margin, and its gradient in every r_w and r_l.",
    .hints = rm_hints,
    .lab = "ch13/reward-calculator",
    .starter = "starter.c",
    .solution = "solution.c",
    .workfile = "rm_loss.c",
    .impl = &rm_impl,
};

/* ---- ch13-predict-shapes (predict) ---- */

static void draw_shapes(uint64_t seed, ex_question *q)
{
    mlsys_rng g;
    mlsys_rng_seed(&g, seed);
    static const int bs[] = {4, 8, 16, 32};
    static const int ts[] = {64, 100, 128, 256};
    static const int vs[] = {32000, 50257, 128256};
    int B = bs[ex_draw_int(&g, 0, 3)], T = ts[ex_draw_int(&g, 0, 3)];
    int V = vs[ex_draw_int(&g, 0, 2)], P = 16 * (int)ex_draw_int(&g, 2, 8);
    static const char *const what[] = {
        "the actor's logits over the response tokens",
        "the reference model's log-probabilities of the sampled response tokens",
        "the critic's values",
        "the reward model's scores",
        "the per-token rewards (score and KL penalty)",
        "the prompts, padded",
    };
    int w = (int)ex_draw_int(&g, 0, 5);
    long long n[6] = {(long long)B * T * V, (long long)B * T, (long long)B * T, B,
                      (long long)B * T, (long long)B * P};
    char a[32];
    snprintf(q->text, sizeof q->text,
             "One RLHF step: a batch of %d prompts padded to %d tokens, responses of %d tokens, a "
             "vocabulary of %d. How many numbers does %s hold, for the whole batch?", B, P, T, V,
             what[w]);
    q->answer = (double)n[w];
    snprintf(q->unit, sizeof q->unit, "numbers");
    snprintf(q->explain, sizeof q->explain,
             "%s: %s. The shapes of a step: prompts (B, P) = (%d, %d); responses (B, T); actor "
             "logits (B, T, V), reduced to the sampled tokens' log-probs (B, T); reference "
             "log-probs (B, T); critic values (B, T); reward-model scores (B), one per "
             "response; per-token rewards, advantages and returns (B, T).", what[w],
             ex_fmt_int(a, sizeof a, n[w]), B, P);
}

static const char *const shapes_hints[] = {
    "Which models give one number per token of the response, and which one number per "
    "response?",
    "Before the sampled token's log-probability is picked, how many numbers does the actor "
    "produce per position?",
    NULL
};

static const exercise ch13_predict_shapes = {
    .id = "ch13-predict-shapes",
    .chapter = 13,
    .kind = EX_PREDICT,
    .title = "The tensors of one RLHF step",
    .task = "Predict the size of one tensor of an RLHF step (logits, log-probs, values, scores, "
            "rewards or prompts) for a drawn batch, prompt length, response length and "
            "vocabulary.",
    .hints = shapes_hints,
    .lab = "ch13/reward-calculator",
    .draw = draw_shapes,
};

/* ---- ch13-beta (experiment) ---- */

#define RC_CMD "mlsys-lab run ch13/reward-calculator"

/* The lab's net reward with --kl-coef beta. */
static int net_reward(const ex_context *cx, const char *beta, double *net, double *k3,
                      ex_verdict *v)
{
    if (!cx->bin[0]) {
        ex_verdict_set(v, EX_ERROR, EXF_SETUP, "cannot find the mlsys-lab program to run "
                       "ch13/reward-calculator (set MLSYS_LAB_BIN)");
        return -1;
    }
    char *argv[] = {(char *)cx->bin, "run", "ch13/reward-calculator", "--kl-coef",
                    (char *)beta, NULL};
    char *out = NULL;
    int st = 0;
    const char *p = NULL, *q = NULL;
    if (ex_run_capture(argv, 60000, &out, &st) == 0 && st == 0) {
        p = strstr(out, "net reward Σr_t");
        q = strstr(out, "k3 estimator");
    }
    if (!p || !q || sscanf(p + strlen("net reward Σr_t"), "%lf", net) != 1 ||
        sscanf(q + strlen("k3 estimator"), "%lf", k3) != 1) {
        ex_verdict_set(v, EX_ERROR, EXF_SETUP, "`" RC_CMD " --kl-coef %s` failed or printed no "
                       "summary (status %d)", beta, st);
        free(out);
        return -1;
    }
    free(out);
    return 0;
}

static int check_beta(const ex_context *cx, const exercise *ex, const char *file, ex_verdict *v)
{
    (void)ex;
    static const char *const who[] = {"score", "kl", NULL};
    ex_answers an;
    char err[512];
    if (ex_answers_read(file, &an, err, sizeof err) != 0) {
        ex_verdict_set(v, EX_ERROR, EXF_SETUP, "%s", err);
        return v->result;
    }
    double n0, n10, k3, bneg;
    int dom;
    if (ex_answer_number(&an, "net_beta0", &n0, v) ||
        ex_answer_number(&an, "net_beta10", &n10, v) ||
        ex_answer_choice(&an, "dominates_beta10", who, &dom, v) ||
        ex_answer_number(&an, "k3", &k3, v) ||
        ex_answer_number(&an, "beta_negative", &bneg, v))
        return v->result;
    double l0, l10, lk3, dummy;
    if (net_reward(cx, "0", &l0, &lk3, v) || net_reward(cx, "10", &l10, &dummy, v))
        return v->result;
    if (fabs(n0 - l0) > 6e-5 || fabs(n10 - l10) > 6e-5) {
        int z = fabs(n0 - l0) > 6e-5;
        ex_verdict_set(v, EX_FAIL, EXF_ANSWER, "net_beta%s = %g, but `" RC_CMD " --kl-coef %s` "
                       "prints a net reward of %+.4f", z ? "0" : "10", z ? n0 : n10,
                       z ? "0" : "10", z ? l0 : l10);
        return v->result;
    }
    if (dom != 1) {
        ex_verdict_set(v, EX_FAIL, EXF_ANSWER, "dominates_beta10 = score, but at beta 10 the KL "
                       "part of the net reward is %+.4f against the score's +0.5000", l10 - 0.5);
        return v->result;
    }
    if (fabs(k3 - lk3) > 6e-5) {
        ex_verdict_set(v, EX_FAIL, EXF_ANSWER, "k3 = %g, but the lab's k3 estimate of the "
                       "response's KL is %+.4f", k3, lk3);
        return v->result;
    }
    /* the sweep of the response with sum KL = +2.3 and score 0.5: net < 0 once beta > 0.5/2.3 */
    if (fabs(bneg - 0.25) > 1e-9) {
        ex_verdict_set(v, EX_FAIL, EXF_ANSWER, "beta_negative = %g: in the sweep of the response "
                       "with sum KL = +2.3, the first beta with a negative net reward is 0.25 "
                       "(0.5 - 0.25 x 2.3 = -0.075; 0.1 still gives +0.27)", bneg);
        return v->result;
    }
    ex_verdict_set(v, EX_PASS, EXF_NONE, "beta 0: the net reward is the score, %+.4f; beta 10: "
                   "%+.4f, the KL term decides", l0, l10);
    ex_verdict_add(v, "This response's sum of log-ratios is negative (-0.2), so at beta 10 the "
                   "\"penalty\" is a bonus of +2.0, four times the score: the single-sample "
                   "estimate can be negative, while k3 (%+.4f) cannot. Any beta that large "
                   "lets the KL estimate, not the reward model, steer the policy.", lk3);
    return v->result;
}

static const char *const beta_hints[] = {
    "Which line of the summary gives the net reward, and what does it become when beta is 0?",
    "At beta 10, how large is beta * sum KL next to the score of 0.5? Which sign does it have "
    "for this response, and why?",
    "In the sweep of the response more confident than the reference (sum KL = +2.3), where "
    "does the net reward column first go below 0?",
    NULL
};

static const exercise ch13_beta = {
    .id = "ch13-beta",
    .chapter = 13,
    .kind = EX_EXPERIMENT,
    .title = "The KL coefficient at 0 and at 10",
    .task = "Run `" RC_CMD " --kl-coef 0` and `--kl-coef 10`: report both net rewards, what "
            "dominates at beta 10, the k3 estimate of the KL, and the first beta of the sweep "
            "at which the confident response's net reward turns negative.",
    .hints = beta_hints,
    .lab = "ch13/reward-calculator",
    .starter = "starter.txt",
    .solution = "solution.txt",
    .workfile = "answers.txt",
    .check = check_beta,
};

const exercise *const ch13_exercises[] = {
    &ch13_predict_shapes,
    &ch13_token_rewards,
    &ch13_beta,
    &ch13_rm_loss,
    NULL
};
