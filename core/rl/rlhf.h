/* rlhf.h - RLHF on the lab's own language model (chapter 13): the sums task and its readable
 * rule (sums.c), the reward model, a transformer with a scalar head trained on preference
 * pairs with the Bradley-Terry loss (reward_model.c), and the four-model PPO/GRPO loop with
 * its placement over ranks (rlhf.c). No curses, no chapter: ch13/rlhf-loop, ch14's
 * memory timeline and `mlsys-lab train --reward-model` are its clients. */
#ifndef MLSYS_RLHF_H
#define MLSYS_RLHF_H

#include "rl.h"
#include "../nn/transformer.h"
#include "../llm/llm.h"

/* ---- sums.c: the task, "A + B =" answered by the model, and the rule that judges it ---- */
typedef struct rl_sum {
    int a, b;
    char op;                /* '+' or '-' (a >= b for '-') */
} rl_sum;

/* A problem with operands in 0..max_operand (a >= b for '-'; a third are '-'). */
void rl_sum_draw(rl_sum *p, int max_operand, mlsys_rng *r);
int rl_sum_answer(const rl_sum *p);
/* "A + B =" into out (cap >= 32); returns its length. */
int rl_sum_prompt(const rl_sum *p, char *out, size_t cap);
/* The rule on a response (the text the model wrote after the prompt): the line "A + B =" +
 * response, cut at the first newline, checked by llm_sum_check: 1 right, 0 wrong, -1 not a
 * sum line. */
int rl_sum_judge(const rl_sum *p, const char *resp, size_t n);
/* A wrong answer near the right one (±1..±3 or a digit changed), never negative, never the
 * right one. */
int rl_sum_wrong(const rl_sum *p, mlsys_rng *r);
/* Held out of the reward model's training: a fixed fifth of the problems, by a hash. */
int rl_sum_held_out(const rl_sum *p);

/* ---- reward_model.c: a small transformer with a scalar head ---- */
#define RL_RM_T 16          /* tokens of one scored line, BOS included, at most */
typedef struct rl_rm {
    llm_config c;
    llm_weights w;          /* the body (llama2.c's layout) */
    float *head;            /* [dim + 1]: weight, then bias */
} rl_rm;

/* Body copied from w (a language model: the reward model starts from its features), head
 * zero. 0 or -1 with err. */
int rl_rm_init(rl_rm *m, const llm_config *c, const llm_weights *w, char *err, size_t errlen);
void rl_rm_free(rl_rm *m);
/* Scores of B sequences: ids [B,T] right-padded, len[B] >= 1 real tokens each; the head reads
 * the final hidden state of each sequence's last real token. tf holds B x T. */
void rl_rm_score(const rl_rm *m, nn_tf *tf, const int *ids, const int *len, int B, int T,
                 float *score);
/* Scores of B text lines ("3 + 4 = 7"), each BOS + encode(" " + line) cut at RL_RM_T tokens;
 * tf holds B x RL_RM_T. */
void rl_rm_score_lines(const rl_rm *m, nn_tf *tf, const llm_tokenizer *tok,
                       const char *const *lines, int B, float *score);
/* The Bradley-Terry loss over P pairs: ids [2P,T] (rows 0..P-1 the preferred, P..2P-1 the
 * rejected), L = (1/P) Σ -log σ(r_w - r_l) = (1/P) Σ softplus(r_l - r_w). Adds its gradient
 * to g (the body's, llm_weights of the same config) and ghead [dim+1] when they are not
 * NULL; *correct = pairs with r_w > r_l, a tie (r_w = r_l) counting half: a model that
 * cannot tell the two apart is right by chance half the time. Returns L. */
double rl_rm_pair_loss(const rl_rm *m, nn_tf *tf, const int *ids, const int *len, int P, int T,
                       llm_weights *g, float *ghead, double *correct);
/* Files: "MLSYSRM1", int32 header[7] (llama2.c's), then the body payload and the head. */
int rl_rm_save(const rl_rm *m, const char *path, char *err, size_t errlen);
int rl_rm_load(rl_rm *m, const char *path, char *err, size_t errlen);

/* Training on pairs made from the rule: for a drawn problem, the line with the right sum is
 * preferred to one with a wrong sum near it. Held-out problems (rl_sum_held_out) are kept for
 * the accuracy. */
typedef struct rl_rm_train_opts {
    int steps, pairs;       /* AdamW steps, pairs per step */
    float lr;
    int max_operand;
    int eval_pairs;         /* held-out pairs for the accuracy */
    uint64_t seed;
    int quiet;              /* 0: a line every log_every steps on stdout */
    int log_every;
} rl_rm_train_opts;
void rl_rm_train_defaults(rl_rm_train_opts *o);
typedef struct rl_rm_report {
    double first_loss, last_loss;   /* mean over the first and the last 10 steps */
    double train_acc, heldout_acc;  /* preference accuracy after training */
    double heldout_acc0;            /* before training (head zero: every pair a tie, 50 %) */
    double seconds;
} rl_rm_report;
/* Train m in place (one process). tok tokenizes the lines. 0 or -1 with err. */
int rl_rm_train(rl_rm *m, const llm_tokenizer *tok, const rl_rm_train_opts *o,
                rl_rm_report *rep, char *err, size_t errlen);
/* Preference accuracy on n held-out pairs drawn from seed (one process); a tie counts half,
 * so a model that scores every line alike is at chance, 0.5. */
double rl_rm_accuracy(const rl_rm *m, const llm_tokenizer *tok, int max_operand, int n,
                      uint64_t seed, int held_out);

/* ---- rlhf.c: the four-model loop (actor, reference, reward model, critic) and the
 * generator that holds a copy of the actor's weights, over ranks ---- */
typedef enum { RL_ALGO_PPO, RL_ALGO_GRPO } rl_algo;
typedef enum { RL_PLACE_COLOCATED, RL_PLACE_SPLIT } rl_placement;
typedef enum {
    RL_PH_GENERATE, RL_PH_SCORE, RL_PH_ADVANTAGE, RL_PH_TRAIN, RL_PH_SYNC, RL_PH_COUNT
} rl_phase;
/* Roles: the flow view's boxes and the memory events' owners. */
enum { RL_ROLE_ACTOR, RL_ROLE_REFERENCE, RL_ROLE_REWARD, RL_ROLE_CRITIC, RL_ROLE_GENERATOR,
       RL_ROLE_COUNT };
/* Memory kinds of a role: pool = role * RL_MEM_KINDS + kind. */
enum { RL_MEM_WEIGHTS, RL_MEM_OPTIMIZER, RL_MEM_ACTIVATIONS, RL_MEM_KV, RL_MEM_KINDS };
const char *rl_phase_name(int ph);
const char *rl_role_name(int role);
const char *rl_mem_kind_name(int kind);

typedef struct rl_rlhf_config {
    rl_algo algo;
    rl_placement placement;
    int gen_ranks;          /* split: the first gen_ranks ranks generate, the others train */
    int prompts;            /* problems per iteration, all ranks together */
    int group;              /* samples per problem (GRPO's group; PPO: 1 unless asked) */
    int max_new;            /* tokens per response at most (cut after its newline) */
    int max_operand;
    float temperature;
    float beta;             /* the KL penalty's weight */
    float gamma, lambda;    /* GAE (PPO) */
    float clip;             /* PPO's ε (and the value clip) */
    float lr, critic_lr;
    int epochs, minibatches;    /* per iteration; minibatches split each rank's sequences */
    size_t bucket_bytes;    /* split: the weight broadcast's bucket */
    uint64_t seed;
    int no_fork;            /* 1: a group's answers as requests of their own, each prefilling
                               the prompt (tests: the forks draw the same tokens) */
} rl_rlhf_config;
void rl_rlhf_defaults(rl_rlhf_config *k);
/* Can k run on world ranks? 0, or -1 with one line in err. */
int rl_rlhf_check(const rl_rlhf_config *k, int world, char *err, size_t errlen);

/* One iteration, the same on every rank (reduced over the trainers). */
typedef struct rl_rlhf_stats {
    int iteration;
    int sequences, tokens;          /* responses and their tokens, all ranks */
    double reward;                  /* the reward model's mean score */
    double right, wrong, malformed; /* the rule's verdicts, shares of the responses */
    double kl;                      /* mean over responses of Σ_t (log π - log π_ref) */
    double policy_loss, value_loss, clipfrac, approx_kl;   /* last minibatch */
    double ratio_dev0;              /* max |ratio - 1| of the first update (0: exact) */
    long prompt_rows;               /* prompt rows this rank's generator computed (none on a
                                       split run's trainer): a group's prompt once, its G
                                       answers forking its blocks */
    double phase_s[RL_PH_COUNT];    /* wall seconds, as the first trainer saw them */
    double total_s;
    double cpu_s;                   /* CPU seconds of the first trainer's process */
    uint64_t version;               /* the generator's weights after the sync */
} rl_rlhf_stats;

typedef struct rl_rlhf rl_rlhf;
/* Every rank calls it with the same k; actor is the policy to start from (the reference is a
 * copy, the critic a copy with a zero value head), rm the reward model (copied), tok the
 * tokenizer (borrowed). c NULL: one process. NULL with err on failure. The loop's steps are
 * its phases: the collectives it runs on c (and on the communicators it splits from c) mark
 * none (mlsys_set_coll_steps(c, 0)). */
rl_rlhf *rl_rlhf_create(const rl_rlhf_config *k, mlsys_comm *c, const llm_config *mc,
                        const llm_weights *actor, const rl_rm *rm, const llm_tokenizer *tok,
                        char *err, size_t errlen);
/* One iteration: generate, score, advantage, train, sync, each phase after a step of the job
 * that every rank passes (mlsys_step: a gate in a gated run; each phase's clock starts after
 * it) and named by a MLSYS_FLOW_PHASE record, its moves between the roles in flow records.
 * 0, or -1 with err. */
int rl_rlhf_iterate(rl_rlhf *h, rl_rlhf_stats *st, char *err, size_t errlen);
/* Bytes this rank holds for role and memory kind (what its USAGE events said). The
 * generator's KV cache is the engine's paged cache, whose block records (ALLOC, SHARE, COW,
 * FREE in pool RL_ROLE_GENERATOR · RL_MEM_KINDS + RL_MEM_KV, its POOL record owned by the
 * generator) say what it holds: 0 here. */
uint64_t rl_rlhf_mem(const rl_rlhf *h, int role, int kind);
/* Up to n responses of the last iteration on this rank as text lines ("3 + 4 = 7"). */
int rl_rlhf_samples(const rl_rlhf *h, char (*lines)[64], int n);
/* The last iteration's answers as tokens, this rank's generated ones (on one process: all):
 * answer s (of problem s / group) is (*tok)[s·max_new ..], (*n)[s] tokens cut after its
 * newline; *lo, *count: the range s = lo .. lo+count-1 this rank generated. */
void rl_rlhf_answers(const rl_rlhf *h, const int **tok, const int **n, int *lo, int *count);
void rl_rlhf_free(rl_rlhf *h);

/* GRPO's advantage of each of n samples of one group: (R_i - mean) / (std + 1e-6), std the
 * population standard deviation. R_i is the reward model's score of answer i alone: GRPO
 * keeps the KL out of the reward (it is a term of the loss, rl_grpo_loss). */
void rl_grpo_advantages(float *adv, const float *R, int n);
/* GRPO's loss as DeepSeekMath defines it (Shao et al. 2024, eq. 3), over S answers of one
 * minibatch, answer i of len[i] tokens packed one after the other in lp, old_lp, ref_lp:
 *   L = -(1/S) Σ_i (1/len_i) Σ_t [ min(ρ A_i, clip(ρ, 1-ε, 1+ε) A_i) - β k3 ]
 *   ρ = exp(lp - old_lp),  k3 = π_ref/π - log(π_ref/π) - 1 = e^(ref_lp - lp) - (ref_lp - lp) - 1
 * k3 is an unbiased, never negative estimate of KL(π ‖ π_ref) per token (core/nn's NN_KL_K3).
 * Each answer weighs the same whatever its length (the mean of its tokens first). adv[S] is
 * A_i. Writes dlp = ∂L/∂lp when not NULL; *clipfrac (tokens with |ρ-1| > ε), *approx_kl (the
 * mean of (ρ-1) - log ρ, to the old policy) and *kl_ref (the mean k3 per token) when not
 * NULL. Returns L. */
double rl_grpo_loss(float *dlp, const float *lp, const float *old_lp, const float *ref_lp,
                    const float *adv, const int *len, int S, float clip, float beta,
                    double *clipfrac, double *approx_kl, double *kl_ref);

#endif
