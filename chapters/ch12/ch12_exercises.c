/* ch12_exercises.c - Chapter 12's exercises: GAE and discounted returns, PPO's clipped objective
 * and its gradient (both the learner's version of a core/rl seam), an advantage by hand and
 * what a baseline does to REINFORCE's variance (predict), and what PPO learns on CartPole
 * against the original's loop that never updates (experiment on ppo-cartpole). */
#include "../../lab/exercise/exercise.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const int sizes_1[] = {1, 0};

/* ---- ch12-gae (implement) ---- */

static const char *const gae_hints[] = {
    "A_t needs A_{t+1}, and delta_t needs V_{t+1}: in which direction must the loop run so "
    "that both are known when you reach t?",
    "What is V_{t+1} for the last step, when done[T-1] is 0? And when it is 1?",
    "If an episode ends at step t, which of the next episode's values and advantages may "
    "leak into A_t? What do you multiply by (1 - done_t)?",
    "With lambda = 1 and every value 0, what do the advantages become? Is that a way to test "
    "your discounted_returns?",
    NULL
};

static const ex_implement gae_impl = {
    .function = "gae", .world_sizes = sizes_1, .timeout_ms = 5000, .limit_ms = 30000,
};

static const exercise ch12_gae = {
    .id = "ch12-gae",
    .chapter = 12,
    .kind = EX_IMPLEMENT,
    .title = "Generalized advantage estimation, backwards",
    .task = "Write gae() and discounted_returns(): one backward pass each, delta_t = r_t + "
            "gamma*V_{t+1} - V_t and A_t = delta_t + gamma*lambda*A_{t+1}, restarting where an "
            "episode ends (done[t] = 1).",
    .hints = gae_hints,
    .lab = "ch12/gae-visualizer",
    .starter = "starter.c",
    .solution = "solution.c",
    .workfile = "gae.c",
    .impl = &gae_impl,
};

/* ---- ch12-ppo-clip (implement) ---- */

static const char *const ppo_hints[] = {
    "For A > 0, which of r*A and clip(r)*A is the smaller when r = 1.5 and eps = 0.2? And for "
    "A < 0 with the same r?",
    "Where the clipped term is the one taken, does it change when r moves a little? What is "
    "its derivative in r then?",
    "r = exp(logp - old_logp): what is dr/dlogp? And what does the mean over n samples "
    "contribute to each dL/dlogp_i?",
    "The loss is to be minimised but the objective maximised: where does the minus sign go?",
    NULL
};

static const ex_implement ppo_impl = {
    .function = "ppo_policy_loss", .world_sizes = sizes_1, .timeout_ms = 5000,
    .limit_ms = 30000,
};

static const exercise ch12_ppo_clip = {
    .id = "ch12-ppo-clip",
    .chapter = 12,
    .kind = EX_IMPLEMENT,
    .title = "PPO's clipped objective and its gradient",
    .task = "Write ppo_term(): min(r*A, clip(r, 1-eps, 1+eps)*A) and its derivative in r, and "
            "ppo_policy_loss(): the negative mean over a batch with r = exp(logp - old_logp) "
            "and its gradient in every logp.",
    .hints = ppo_hints,
    .lab = "ch12/ppo-cartpole",
    .starter = "starter.c",
    .solution = "solution.c",
    .workfile = "ppo_clip.c",
    .impl = &ppo_impl,
};

/* ---- ch12-predict-gae (predict) ---- */

static void draw_gae(uint64_t seed, ex_question *q)
{
    mlsys_rng g;
    mlsys_rng_seed(&g, seed);
    static const double gammas[] = {0.9, 0.99, 1.0};
    static const double lambdas[] = {0.0, 0.5, 0.9, 0.95, 1.0};
    double r[3], v[3], d[3], a[3];
    for (int t = 0; t < 3; t++) {
        r[t] = 0.1 * (double)ex_draw_int(&g, 0, 10);
        v[t] = 0.1 * (double)ex_draw_int(&g, 1, 9);
    }
    double gm = gammas[ex_draw_int(&g, 0, 2)], lm = lambdas[ex_draw_int(&g, 0, 4)];
    for (int t = 0; t < 3; t++)
        d[t] = r[t] + (t < 2 ? gm * v[t + 1] : 0.0) - v[t];
    a[2] = d[2];
    a[1] = d[1] + gm * lm * a[2];
    a[0] = d[0] + gm * lm * a[1];
    snprintf(q->text, sizeof q->text,
             "A 3-step episode ends after its last step: rewards %.1f, %.1f, %.1f; the "
             "critic's values V(s_0..s_2) = %.1f, %.1f, %.1f. With gamma = %.2f and lambda = "
             "%.2f, what is the GAE advantage A_0 of the first step? Four decimals.",
             r[0], r[1], r[2], v[0], v[1], v[2], gm, lm);
    q->answer = a[0];
    q->abs_tol = 0.00051;
    q->rel_tol = 0.0;
    snprintf(q->explain, sizeof q->explain,
             "delta_t = r_t + gamma*V_{t+1} - V_t (no V after the end): delta = %.4f, %.4f, "
             "%.4f. Backwards with gamma*lambda = %.4f: A_2 = %.4f, A_1 = %.4f + %.4f*%.4f = "
             "%.4f, A_0 = %.4f + %.4f*%.4f = %.4f. (ch12/gae-visualizer prints the same sums "
             "for its own trajectory.)", d[0], d[1], d[2], gm * lm, a[2], d[1], gm * lm, a[2],
             a[1], d[0], gm * lm, a[1], a[0]);
}

static const char *const predict_gae_hints[] = {
    "What is each step's TD error delta_t, and what value follows the last step of an episode "
    "that ended?",
    "Which advantage can you write down first: A_0 or A_2?",
    "With lambda = 0, how much of the later deltas reaches A_0? With lambda = 1?",
    NULL
};

static const exercise ch12_predict_gae = {
    .id = "ch12-predict-gae",
    .chapter = 12,
    .kind = EX_PREDICT,
    .title = "An advantage by hand",
    .task = "Predict A_0 of a drawn 3-step episode for a drawn gamma and lambda.",
    .hints = predict_gae_hints,
    .lab = "ch12/gae-visualizer",
    .draw = draw_gae,
};

/* ---- ch12-predict-baseline (predict) ---- */

static void draw_baseline(uint64_t seed, ex_question *q)
{
    mlsys_rng g;
    mlsys_rng_seed(&g, seed);
    static const int cs[] = {10, 20, 50, 100, 200};
    static const int sds[] = {5, 10, 20, 40};
    int c = cs[ex_draw_int(&g, 0, 4)], sd = sds[ex_draw_int(&g, 0, 3)];
    double f = 1.0 + (double)c * c / ((double)sd * sd);
    snprintf(q->text, sizeof q->text,
             "REINFORCE on a policy with two actions: the score d log pi(a) / d theta of the "
             "sampled action is +1 or -1 with equal probability, whatever the return. The "
             "episode's return G has mean %d and standard deviation %d, independent of the "
             "action. The gradient estimate is g = score x G, or with a baseline b equal to "
             "the expected return, g = score x (G - %d). By what factor does the baseline "
             "divide the variance of g?", c, sd, c);
    q->answer = f;
    q->rel_tol = 0.01;
    q->abs_tol = 0.0;
    snprintf(q->unit, sizeof q->unit, "x");
    snprintf(q->explain, sizeof q->explain,
             "Both estimates have mean 0 here (the score averages to 0). Without the baseline "
             "E[g^2] = E[score^2] E[G^2] = %d^2 + %d^2 = %d; with it E[score^2] E[(G - %d)^2] = "
             "%d^2 = %d. Factor %d / %d = %.4g: the baseline removes the mean return, which "
             "only adds noise. A learned V(s) does the same per state, and GAE's A_t = G_t - "
             "V(s_t) at lambda = 1 is that estimate.", c, sd, c * c + sd * sd, c, sd, sd * sd,
             c * c + sd * sd, sd * sd, f);
}

static const char *const baseline_hints[] = {
    "What is the mean of score x G when the score is +1 or -1 with equal probability, "
    "independent of G?",
    "With mean 0, the variance is E[g^2]. What is E[G^2] for a mean c and standard deviation "
    "s, and what is E[(G - c)^2]?",
    NULL
};

static const exercise ch12_predict_baseline = {
    .id = "ch12-predict-baseline",
    .chapter = 12,
    .kind = EX_PREDICT,
    .title = "What a baseline does to the variance of REINFORCE",
    .task = "Predict by what factor subtracting the expected return divides the variance of a "
            "REINFORCE gradient estimate, for a drawn mean and spread of the return.",
    .hints = baseline_hints,
    .lab = "ch12/gae-visualizer",
    .draw = draw_baseline,
};

/* ---- ch12-ppo-learning (experiment) ---- */

#define PPO_CMD "mlsys-lab run ch12/ppo-cartpole"
#define NOUP_CMD "mlsys-lab run ch12/ppo-cartpole --no-update --toy-env"

static int run_lab(const ex_context *cx, char **argv_tail, const char *shown, char **out,
                   ex_verdict *v)
{
    if (!cx->bin[0]) {
        ex_verdict_set(v, EX_ERROR, EXF_SETUP, "cannot find the mlsys-lab program to run `%s` "
                       "(set MLSYS_LAB_BIN)", shown);
        return -1;
    }
    char *argv[12] = {(char *)cx->bin, "run", "ch12/ppo-cartpole"};
    int k = 3;
    for (int i = 0; argv_tail[i] && k < 11; i++)
        argv[k++] = argv_tail[i];
    argv[k] = NULL;
    int st = 0;
    *out = NULL;
    if (ex_run_capture(argv, 120000, out, &st) != 0 || st != 0) {
        ex_verdict_set(v, EX_ERROR, EXF_SETUP, "`%s` failed (status %d)", shown, st);
        free(*out);
        *out = NULL;
        return -1;
    }
    return 0;
}

static int check_ppo_learning(const ex_context *cx, const exercise *ex, const char *file,
                              ex_verdict *v)
{
    (void)ex;
    static const char *const yn[] = {"no", "yes", NULL};
    ex_answers an;
    char err[512];
    if (ex_answers_read(file, &an, err, sizeof err) != 0) {
        ex_verdict_set(v, EX_ERROR, EXF_SETUP, "%s", err);
        return v->result;
    }
    double f10, l10, clip, ratio;
    int solved;
    if (ex_answer_number(&an, "first10", &f10, v) || ex_answer_number(&an, "last10", &l10, v) ||
        ex_answer_choice(&an, "solved", yn, &solved, v) ||
        ex_answer_number(&an, "noupdate_clip", &clip, v) ||
        ex_answer_number(&an, "noupdate_ratio", &ratio, v))
        return v->result;
    char *out = NULL;
    char *none[] = {NULL};
    if (run_lab(cx, none, PPO_CMD, &out, v))
        return v->result;
    double rf = -1, rl = -1;
    const char *p = strstr(out, "first 10 episodes:"), *q = strstr(out, "last 10 episodes:");
    int rsolved = strstr(out, "solved: the last 100") != NULL;
    if (!p || !q || sscanf(p, "first 10 episodes: %lf", &rf) != 1 ||
        sscanf(q, "last 10 episodes: %lf", &rl) != 1) {
        ex_verdict_set(v, EX_ERROR, EXF_SETUP, "`" PPO_CMD "` printed no summary (a bug of the "
                       "lab, not yours)");
        free(out);
        return v->result;
    }
    free(out);
    /* a whole training run: early episodes are a random policy's, late ones capped at 500,
     * so the figures hold across machines within these margins */
    if (fabs(f10 - rf) > 3.0 || fabs(l10 - rl) > 50.0) {
        int first = fabs(f10 - rf) > 3.0;
        ex_verdict_set(v, EX_FAIL, EXF_ANSWER, "%s = %g, but this run of `" PPO_CMD "` printed "
                       "%.1f", first ? "first10" : "last10", first ? f10 : l10,
                       first ? rf : rl);
        return v->result;
    }
    if (solved != rsolved) {
        ex_verdict_set(v, EX_FAIL, EXF_ANSWER, "solved = %s, but this run %s", yn[solved],
                       rsolved ? "says the last 100 episodes averaged >= 475" :
                       "never reached an average of 475 over 100 episodes");
        return v->result;
    }
    if (!(l10 > 2.0 * f10)) {
        ex_verdict_set(v, EX_FAIL, EXF_ANSWER, "last10 = %g is not above twice first10 = %g: "
                       "the run you read did not learn; run the command as given", l10, f10);
        return v->result;
    }
    if (fabs(clip) > 1e-9 || fabs(ratio - 1.0) > 1e-9) {
        ex_verdict_set(v, EX_FAIL, EXF_ANSWER, "noupdate_clip = %g, noupdate_ratio = %g: in a "
                       "loop whose networks never change, what is pi_new / pi_old for every "
                       "sample, and how many samples can lie outside [1 - eps, 1 + eps]?",
                       clip, ratio);
        return v->result;
    }
    ex_verdict_set(v, EX_PASS, EXF_NONE, "PPO took CartPole from %.1f to %.1f (%s); the "
                   "original's loop clips nothing because its ratio is always 1", rf, rl,
                   rsolved ? "solved" : "not solved");
    ex_verdict_add(v, "With --no-update the policy never changes, so its \"improvement\" is "
                   "noise: the policy loss is just -mean(A) and the value loss mean(A^2).");
    return v->result;
}

static const char *const learning_hints[] = {
    "Which block at the end of the real run's output gives the first and last 10 episodes' "
    "mean return, and does it say the task was solved?",
    "In the --no-update loop the networks are never changed: what is the probability ratio "
    "pi_new(a|s) / pi_old(a|s) of every sample?",
    "If every ratio is 1, what share of samples can the clip touch?",
    NULL
};

static const exercise ch12_ppo_learning = {
    .id = "ch12-ppo-learning",
    .chapter = 12,
    .kind = EX_EXPERIMENT,
    .title = "What PPO learns on CartPole, and what a loop without updates does not",
    .task = "Run `" PPO_CMD "` and `" NOUP_CMD "`: report the real run's mean return of the "
            "first and last 10 episodes and whether it solved CartPole, and the clip fraction "
            "and the ratio of the loop that never updates.",
    .hints = learning_hints,
    .lab = "ch12/ppo-cartpole",
    .starter = "starter.txt",
    .solution = "solution.txt",
    .workfile = "answers.txt",
    .check = check_ppo_learning,
};

const exercise *const ch12_exercises[] = {
    &ch12_predict_gae,
    &ch12_gae,
    &ch12_ppo_clip,
    &ch12_ppo_learning,
    &ch12_predict_baseline,
    NULL
};
