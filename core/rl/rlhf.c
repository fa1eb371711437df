/* rlhf.c - the four-model RLHF loop on the lab's language model: a generator (the actor's
 * weights copied into the KV-cache inference engine) samples answers to sums, the reference,
 * reward model and critic score them, GAE (PPO) or group-relative advantages (GRPO) follow,
 * then clipped PPO updates of the actor and value updates of the critic, and the new weights
 * go to the generator: a copy when colocated, a bucketed broadcast when split over ranks. */
#include "rlhf.h"
#include "wsync.h"
#include "../llm/engine.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Tokens per block of the generator's KV cache. A row here is at most 15 tokens (BOS, the
 * sum, the answer), so the usual 16 would give every sequence one block and leave nothing of
 * a prompt for a group's samples to share: with 4 a prompt's full blocks stay shared and only
 * its partial last block is copied on the first write (copy on write). */
#define RL_KV_BLOCK 4


/* ---- names ---- */

const char *rl_phase_name(int ph)
{
    static const char *const n[RL_PH_COUNT] = {"generate", "score", "advantage", "train",
                                               "sync"};
    return ph >= 0 && ph < RL_PH_COUNT ? n[ph] : "?";
}

const char *rl_role_name(int role)
{
    static const char *const n[RL_ROLE_COUNT] = {"actor", "reference", "reward", "critic",
                                                 "generator"};
    return role >= 0 && role < RL_ROLE_COUNT ? n[role] : "?";
}

const char *rl_mem_kind_name(int kind)
{
    static const char *const n[RL_MEM_KINDS] = {"weights", "optimizer", "activations",
                                                "kv cache"};
    return kind >= 0 && kind < RL_MEM_KINDS ? n[kind] : "?";
}

void rl_rlhf_defaults(rl_rlhf_config *k)
{
    memset(k, 0, sizeof *k);
    k->algo = RL_ALGO_PPO;
    k->placement = RL_PLACE_COLOCATED;
    k->gen_ranks = 1;
    k->prompts = 32;
    k->group = 1;
    k->max_new = 4;
    k->max_operand = 9;
    k->temperature = 1.0f;
    k->beta = 0.1f;
    k->gamma = 1.0f;
    k->lambda = 0.95f;
    k->clip = 0.2f;
    k->lr = 1e-4f;
    k->critic_lr = 1e-4f;
    k->epochs = 2;
    k->minibatches = 2;
    k->bucket_bytes = 256 << 10;
    k->seed = 1;
}

/* the trainers' ranks and how many sequences each holds */
static int n_trainers(const rl_rlhf_config *k, int world)
{
    return k->placement == RL_PLACE_SPLIT ? world - k->gen_ranks : world;
}

int rl_rlhf_check(const rl_rlhf_config *k, int world, char *err, size_t errlen)
{
    int N = k->prompts * k->group;
    int gens = k->placement == RL_PLACE_SPLIT ? k->gen_ranks : world;
    int tr = n_trainers(k, world);
    if (k->prompts < 1 || k->group < 1 || k->max_new < 1 || k->epochs < 1 ||
        k->minibatches < 1) {
        snprintf(err, errlen, "prompts, group, max-new, epochs and minibatches must be >= 1");
        return -1;
    }
    if (k->algo == RL_ALGO_GRPO && k->group < 2) {
        snprintf(err, errlen, "grpo compares the samples of a problem: --group must be >= 2");
        return -1;
    }
    if (k->placement == RL_PLACE_SPLIT && (world < 2 || k->gen_ranks < 1 || tr < 1)) {
        snprintf(err, errlen, "split placement needs generating and training ranks: %d "
                 "rank%s with %d generating", world, world == 1 ? "" : "s", k->gen_ranks);
        return -1;
    }
    if (k->max_operand < 0 || k->max_operand > 49) {
        snprintf(err, errlen, "max-operand must be between 0 and 49 (the corpus' sums)");
        return -1;
    }
    if (k->max_new > 12) {
        snprintf(err, errlen, "max-new must be at most 12 tokens (an answer and its newline)");
        return -1;
    }
    if (N % gens || N % tr || (N / tr) % k->group || (N / tr) % k->minibatches) {
        snprintf(err, errlen, "%d sequences (%d prompts x %d) must split evenly over %d "
                 "generating and %d training rank%s, whole groups, %d minibatch%s each", N,
                 k->prompts, k->group, gens, tr, tr == 1 ? "" : "s", k->minibatches,
                 k->minibatches == 1 ? "" : "es");
        return -1;
    }
    return 0;
}

void rl_grpo_advantages(float *adv, const float *R, int n)
{
    double m = 0.0, v = 0.0;
    for (int i = 0; i < n; i++)
        m += R[i];
    m /= n;
    for (int i = 0; i < n; i++)
        v += (R[i] - m) * (R[i] - m);
    double sd = sqrt(v / n);
    for (int i = 0; i < n; i++)
        adv[i] = (float)((R[i] - m) / (sd + 1e-6));
}

double rl_grpo_loss(float *dlp, const float *lp, const float *old_lp, const float *ref_lp,
                    const float *adv, const int *len, int S, float clip, float beta,
                    double *clipfrac, double *approx_kl, double *kl_ref)
{
    double loss = 0.0, akl = 0.0, k3s = 0.0;
    int clipped = 0, ntok = 0;
    for (int i = 0, q = 0; i < S; q += len[i], i++) {
        double w = 1.0 / ((double)S * len[i]);         /* 1/S · 1/len_i */
        for (int t = q; t < q + len[i]; t++) {
            double logratio = (double)lp[t] - old_lp[t], r = exp(logratio), d_dr;
            double term = rl_ppo_term(r, adv[i], clip, &d_dr);
            float k3, dk3, one = 1.0f;
            nn_kl_forward(&k3, &lp[t], &ref_lp[t], NULL, 1, NN_KL_K3);
            loss += w * (beta * (double)k3 - term);
            if (dlp) {
                nn_kl_backward(&dk3, NULL, &one, &lp[t], &ref_lp[t], NULL, 1, NN_KL_K3);
                dlp[t] = (float)(w * (beta * (double)dk3 - d_dr * r));
            }
            clipped += fabs(r - 1.0) > clip;
            akl += (r - 1.0) - logratio;
            k3s += k3;
            ntok++;
        }
    }
    if (clipfrac)
        *clipfrac = ntok ? (double)clipped / ntok : 0.0;
    if (approx_kl)
        *approx_kl = ntok ? akl / ntok : 0.0;
    if (kl_ref)
        *kl_ref = ntok ? k3s / ntok : 0.0;
    return loss;
}

/* ---- the loop's state ---- */

struct rl_rlhf {
    rl_rlhf_config k;
    mlsys_comm *c, *tc, *sc;    /* world; trainers; split: trainer root + generators */
    int rank, world, gen, train, tr_rank, n_tr, n_gen, gen_idx, first_trainer;
    const llm_tokenizer *tok;
    llm_config mc;
    int C, V, N, Nl, mb;        /* width, vocabulary, sequences, per trainer, per minibatch */
    /* generator */
    llm_weights gw;
    llm_engine *eng;            /* the generation engine over gw */
    uint64_t gen_act;           /* its bytes beside the KV cache (scratch, logits) */
    int have_gen;
    uint64_t gen_version;
    /* trainer */
    llm_weights aw, ag, rw, cw, cg;
    float *chead, *cghead;
    rl_rm rm;
    nn_adamw aopt, copt, hopt;
    nn_tf tf, rmtf;
    int have_train;
    uint64_t version;
    /* the iteration's batch: every sequence's problem and response (all ranks) */
    rl_sum *prob;
    int *resp, *nresp;          /* [N, max_new], [N] */
    /* this trainer's sequences [lo, lo + Nl) as rows */
    int lo;
    int t_cap;                  /* tokens of the longest row there can be: BOS, prompt, answer */
    int *ids, *plen;            /* [Nl, t_cap], [Nl]: chunk m's rows from ids + m·mb·t_cap,
                                   t_row[m] tokens each (padded to the chunk's longest) */
    int *t_row;                 /* [minibatches] */
    float *old_lp, *ref_lp, *val, *rew, *adv, *ret, *kl;    /* [Nl, max_new] */
    float *score;               /* [Nl] */
    int *judge;                 /* [Nl] */
    int iteration;
    long prompt_rows;           /* the generator's prompt rows, last iteration */
    int phase, gates;           /* the phase running; the gates passed (steps of the job) */
    uint64_t mem[RL_ROLE_COUNT][RL_MEM_KINDS];
};

uint64_t rl_rlhf_mem(const rl_rlhf *h, int role, int kind)
{
    return role >= 0 && role < RL_ROLE_COUNT && kind >= 0 && kind < RL_MEM_KINDS
               ? h->mem[role][kind] : 0;
}

static void set_mem(rl_rlhf *h, int role, int kind, uint64_t bytes)
{
    h->mem[role][kind] = bytes;
    mlsys_mem_info m = {.pool = (int16_t)(role * RL_MEM_KINDS + kind), .op = MLSYS_MEM_USAGE,
                        .block = -1, .owner = role, .refs = 0, .index = -1, .aux = 0};
    mlsys_emit_mem(h->c, &m, bytes, rl_mem_kind_name(kind));
}

/* A pool of bytes, used bytes of it in use now (weights: all; activations and KV cache: none
 * until a phase uses them). label NULL: the kind's name ("weights+grads" says what a trained
 * model's weights hold). */
static void declare_mem(rl_rlhf *h, int role, int kind, uint64_t bytes, uint64_t used,
                        const char *label)
{
    mlsys_mem_info m = {.pool = (int16_t)(role * RL_MEM_KINDS + kind), .op = MLSYS_MEM_POOL,
                        .block = -1, .owner = role, .refs = 0, .index = -1, .aux = 1};
    mlsys_emit_mem(h->c, &m, bytes, label ? label : rl_mem_kind_name(kind));
    set_mem(h, role, kind, used);
}

static int emits_flow(const rl_rlhf *h)
{
    return h->train && h->tr_rank == 0;
}

/* A move between roles (the first trainer speaks for all ranks); label NULL: the kind's word,
 * else what moves in words ("lines", "returns"). */
static void flow(rl_rlhf *h, int from, int to, int what, int count, uint64_t bytes,
                 double value, const char *label)
{
    if (!emits_flow(h))
        return;
    mlsys_flow_info f = {(int16_t)from, (int16_t)to, (int16_t)what, (int16_t)h->phase, count,
                         what == MLSYS_FLOW_WEIGHTS ? (int32_t)h->version : h->iteration, -1,
                         0};
    if (isnan(value))
        mlsys_emit_flow(h->c, &f, bytes, label);
    else
        mlsys_emit_flow_value(h->c, &f, bytes, label, value);
}

/* A phase begins: every rank passes a gate (a step of its own: in a gated run the viewer lets
 * the phase run, and the collectives inside it mark none), then the first trainer says which
 * phase it is. 0, or -1 with err (the job was stopped). */
static int phase(rl_rlhf *h, int ph, char *err, size_t errlen)
{
    h->phase = ph;
    if (h->c) {
        char label[32];
        snprintf(label, sizeof label, "%s %d", rl_phase_name(ph), h->iteration);
        int rc = mlsys_step(h->c, h->gates++, label);
        if (rc) {
            snprintf(err, errlen, "rank %d: %s: %s", h->rank, label, mlsys_errmsg(h->c));
            return -1;
        }
    }
    if (emits_flow(h)) {
        mlsys_flow_info f = {-1, -1, MLSYS_FLOW_PHASE, (int16_t)ph, 0, h->iteration, -1, 0};
        mlsys_emit_flow(h->c, &f, 0, rl_phase_name(ph));
    }
    return 0;
}

/* ---- create ---- */

/* Weights whose buffer lives in the communication heap (mlsys_alloc_aligned): what the
 * all-reduce and the weight broadcast move, so that a peer copies straight out of it instead
 * of through process_vm_readv. The same carving as llm_weights_alloc. */
static size_t heap_bytes(const llm_weights *w)
{
    return (w->n_floats * sizeof(float) + 4095) & ~(size_t)4095;
}

static int heap_weights(llm_weights *w, const llm_config *c, char *err, size_t errlen)
{
    if (llm_weights_alloc(w, c, err, errlen))
        return -1;
    float *old = w->mem, *mem = mlsys_alloc_aligned(heap_bytes(w));
    memcpy(mem, old, w->n_floats * sizeof(float));          /* the RoPE tables too */
    float **p[] = {&w->token_embedding, &w->rms_att, &w->wq, &w->wk, &w->wv, &w->wo,
                   &w->rms_ffn, &w->w1, &w->w2, &w->w3, &w->rms_final, &w->freq_cis_real,
                   &w->freq_cis_imag, &w->wcls};
    for (size_t i = 0; i < sizeof p / sizeof p[0]; i++)
        *p[i] = mem + (*p[i] - old);
    w->mem = mem;
    free(old);
    return 0;
}

static void heap_weights_free(llm_weights *w)
{
    if (w->mem)
        mlsys_free_aligned(w->mem, heap_bytes(w));
    memset(w, 0, sizeof *w);
}

static void copy_weights(llm_weights *dst, const llm_weights *src)
{
    memcpy(dst->mem, src->mem, src->n_floats * sizeof(float));
}

rl_rlhf *rl_rlhf_create(const rl_rlhf_config *k, mlsys_comm *c, const llm_config *mc,
                        const llm_weights *actor, const rl_rm *rm, const llm_tokenizer *tok,
                        char *err, size_t errlen)
{
    int world = c ? mlsys_size(c) : 1;
    if (rl_rlhf_check(k, world, err, errlen))
        return NULL;
    rl_rlhf *h = mlsys_xcalloc(1, sizeof *h);
    h->k = *k;
    h->c = c;
    h->rank = c ? mlsys_rank(c) : 0;
    h->world = world;
    h->tok = tok;
    h->mc = *mc;
    h->C = mc->dim;
    h->V = mc->vocab_size;
    h->N = k->prompts * k->group;
    h->n_tr = n_trainers(k, world);
    int split = k->placement == RL_PLACE_SPLIT;
    h->n_gen = split ? k->gen_ranks : world;
    h->gen = split ? h->rank < k->gen_ranks : 1;
    h->train = split ? h->rank >= k->gen_ranks : 1;
    h->first_trainer = split ? k->gen_ranks : 0;
    h->tr_rank = h->train ? h->rank - h->first_trainer : -1;
    h->gen_idx = h->gen ? h->rank : -1;
    h->Nl = h->N / h->n_tr;
    {
        /* BOS, then at most a token per byte of " A + B =" (ASCII), then the answer */
        rl_sum big = {k->max_operand, k->max_operand, '+'};
        char pr[32];
        h->t_cap = 2 + rl_sum_prompt(&big, pr, sizeof pr) + k->max_new;
    }
    h->mb = h->Nl / k->minibatches;
    h->lo = h->train ? h->tr_rank * h->Nl : 0;
    /* the loop's steps are its phases (phase()): its collectives mark none */
    mlsys_set_coll_steps(c, 0);
    if (c && split) {
        if (mlsys_split(c, h->train ? 1 : 2, h->rank, &h->tc) ||
            mlsys_split(c, h->gen || h->tr_rank == 0 ? 0 : -1, h->gen ? 1 : 0, &h->sc)) {
            snprintf(err, errlen, "rank %d: split: %s", h->rank, mlsys_errmsg(c));
            goto fail;
        }
        mlsys_set_coll_steps(h->tc, 0);
        mlsys_set_coll_steps(h->sc, 0);
        if (h->gen)
            h->tc = NULL;       /* the generators' own communicator is not used */
    } else {
        h->tc = c;
    }
    h->prob = mlsys_xcalloc((size_t)h->N, sizeof *h->prob);
    h->resp = mlsys_xcalloc((size_t)h->N * k->max_new, sizeof(int));
    h->nresp = mlsys_xcalloc((size_t)h->N, sizeof(int));
    if (c && h->rank == 0) {
        for (int r = 0; r < RL_ROLE_COUNT; r++) {
            if (r == RL_ROLE_CRITIC && k->algo == RL_ALGO_GRPO)
                continue;       /* GRPO has none: no box (its advantages say so) */
            mlsys_flow_info f = {(int16_t)r, -1, MLSYS_FLOW_ROLE, -1, 0, 0, -1, 0};
            mlsys_emit_flow(c, &f, 0, rl_role_name(r));
        }
        for (int ph = 0; ph < RL_PH_COUNT; ph++) {  /* the phases of an iteration, in order */
            mlsys_flow_info f = {-1, -1, MLSYS_FLOW_PHASE, (int16_t)ph, 0, -1, -1, 0};
            mlsys_emit_flow(c, &f, 0, rl_phase_name(ph));
        }
    }
    uint64_t wbytes = (uint64_t)actor->n_floats * sizeof(float);
    if (h->gen) {
        int rows = h->N / h->n_gen;
        if (heap_weights(&h->gw, mc, err, errlen))
            goto fail;
        copy_weights(&h->gw, actor);
        /* The engine's paged cache is the generator's KV memory: its block records (ALLOC,
         * SHARE when a group's samples fork their prompt, COW, FREE) go out under the
         * generator's own pool, and nothing else of the engine (the loop passes its own
         * gates, one per phase). No prefix cache: the weights change at every sync, so keys
         * computed last iteration are stale (vLLM resets its prefix cache on a weight update
         * for the same reason). */
        llm_engine_opts eo = {.max_num_seqs = rows, .max_num_batched_tokens = rows * h->t_cap,
                              .max_model_len = h->t_cap, .block_size = RL_KV_BLOCK,
                              .no_prefix_cache = 1, .mem_comm = c,
                              .mem_pool = RL_ROLE_GENERATOR * RL_MEM_KINDS + RL_MEM_KV,
                              .mem_role = RL_ROLE_GENERATOR};
        h->eng = llm_engine_create(mc, &h->gw, &eo, err, errlen);
        if (!h->eng)
            goto fail;
        h->have_gen = 1;
        uint64_t kvb = llm_engine_kv(h->eng)->bytes;
        h->gen_act = llm_engine_bytes(mc, &eo) - kvb;
        declare_mem(h, RL_ROLE_GENERATOR, RL_MEM_WEIGHTS, wbytes, wbytes, NULL);
        declare_mem(h, RL_ROLE_GENERATOR, RL_MEM_ACTIVATIONS, h->gen_act, 0, NULL);
    }
    if (h->train) {
        if (heap_weights(&h->aw, mc, err, errlen) || heap_weights(&h->ag, mc, err, errlen) ||
            llm_weights_alloc(&h->rw, mc, err, errlen) ||
            llm_weights_alloc(&h->cw, mc, err, errlen) || heap_weights(&h->cg, mc, err, errlen))
            goto fail;
        copy_weights(&h->aw, actor);
        copy_weights(&h->rw, actor);
        copy_weights(&h->cw, actor);
        h->chead = mlsys_xcalloc((size_t)h->C + 1, sizeof(float));
        h->cghead = mlsys_xcalloc((size_t)h->C + 1, sizeof(float));
        if (rl_rm_init(&h->rm, &rm->c, &rm->w, err, errlen))
            goto fail;
        memcpy(h->rm.head, rm->head, ((size_t)rm->c.dim + 1) * sizeof(float));
        if (nn_tf_init(&h->tf, mc, h->mb, h->t_cap) || nn_tf_init(&h->rmtf, &rm->c, h->mb,
                                                                  RL_RM_T)) {
            snprintf(err, errlen, "rank %d: cannot hold %d rows of %d tokens", h->rank, h->mb,
                     h->t_cap);
            goto fail;
        }
        nn_adamw_init(&h->aopt, k->lr, 0.9f, 0.95f, 1e-8f, 0.0f, 0, h->aw.n_floats);
        nn_adamw_init(&h->copt, k->critic_lr, 0.9f, 0.95f, 1e-8f, 0.0f, 0, h->cw.n_floats);
        nn_adamw_init(&h->hopt, k->critic_lr, 0.9f, 0.95f, 1e-8f, 0.0f, 0, (size_t)h->C + 1);
        h->have_train = 1;
        size_t Tl = (size_t)h->Nl * k->max_new;
        h->ids = mlsys_xcalloc((size_t)h->Nl * h->t_cap, sizeof(int));
        h->t_row = mlsys_xcalloc((size_t)k->minibatches, sizeof(int));
        h->plen = mlsys_xcalloc((size_t)h->Nl, sizeof(int));
        h->old_lp = mlsys_xcalloc(Tl, sizeof(float));
        h->ref_lp = mlsys_xcalloc(Tl, sizeof(float));
        h->val = mlsys_xcalloc(Tl, sizeof(float));
        h->rew = mlsys_xcalloc(Tl, sizeof(float));
        h->adv = mlsys_xcalloc(Tl, sizeof(float));
        h->ret = mlsys_xcalloc(Tl, sizeof(float));
        h->kl = mlsys_xcalloc(Tl, sizeof(float));
        h->score = mlsys_xcalloc((size_t)h->Nl, sizeof(float));
        h->judge = mlsys_xcalloc((size_t)h->Nl, sizeof(int));
        uint64_t rmb = (uint64_t)rm->w.n_floats * sizeof(float);
        int grpo = k->algo == RL_ALGO_GRPO;
        declare_mem(h, RL_ROLE_ACTOR, RL_MEM_WEIGHTS, 2 * wbytes, 2 * wbytes, "weights+grads");
        declare_mem(h, RL_ROLE_ACTOR, RL_MEM_OPTIMIZER, h->aopt.bytes, h->aopt.bytes, NULL);
        declare_mem(h, RL_ROLE_ACTOR, RL_MEM_ACTIVATIONS, h->tf.act_bytes + h->tf.grad_bytes, 0,
                    NULL);
        declare_mem(h, RL_ROLE_REFERENCE, RL_MEM_WEIGHTS, wbytes, wbytes, NULL);
        declare_mem(h, RL_ROLE_REWARD, RL_MEM_WEIGHTS, rmb, rmb, NULL);
        declare_mem(h, RL_ROLE_REWARD, RL_MEM_ACTIVATIONS, h->rmtf.act_bytes, 0, NULL);
        if (!grpo) {
            declare_mem(h, RL_ROLE_CRITIC, RL_MEM_WEIGHTS, 2 * wbytes, 2 * wbytes,
                        "weights+grads");
            uint64_t ob = h->copt.bytes + h->hopt.bytes;
            declare_mem(h, RL_ROLE_CRITIC, RL_MEM_OPTIMIZER, ob, ob, NULL);
        }
    }
    return h;
fail:
    rl_rlhf_free(h);
    return NULL;
}

void rl_rlhf_free(rl_rlhf *h)
{
    if (!h)
        return;
    if (h->have_gen) {
        llm_engine_free(h->eng);
    }
    heap_weights_free(&h->gw);
    if (h->have_train) {
        nn_tf_fini(&h->tf);
        nn_tf_fini(&h->rmtf);
        nn_adamw_fini(&h->aopt);
        nn_adamw_fini(&h->copt);
        nn_adamw_fini(&h->hopt);
    }
    heap_weights_free(&h->aw);
    heap_weights_free(&h->ag);
    llm_weights_free(&h->rw);
    llm_weights_free(&h->cw);
    heap_weights_free(&h->cg);
    rl_rm_free(&h->rm);
    free(h->chead);
    free(h->cghead);
    free(h->prob);
    free(h->resp);
    free(h->nresp);
    free(h->ids);
    free(h->plen);
    free(h->t_row);
    free(h->old_lp);
    free(h->ref_lp);
    free(h->val);
    free(h->rew);
    free(h->adv);
    free(h->ret);
    free(h->kl);
    free(h->score);
    free(h->judge);
    free(h);
}

/* ---- one iteration ---- */

static uint64_t mix(uint64_t x)
{
    x ^= x >> 31;
    x *= 0x7fb5d329728ea185ull;
    x ^= x >> 27;
    x *= 0x81dadef4bc2dd44dull;
    return x ^ (x >> 33);
}

/* BOS + encode(" A + B =") into ids (room for t_cap); returns its length. */
static int prompt_ids(const rl_rlhf *h, const rl_sum *p, int *ids)
{
    char pr[32];
    int n = rl_sum_prompt(p, pr, sizeof pr);
    int tmp[64];
    int k = (int)llm_bpe_encode_prompt(h->tok, pr, (size_t)n, 1, tmp);
    memcpy(ids, tmp, (size_t)k * sizeof(int));
    return k;
}

/* The response's text (without the prompt) into out. */
static void resp_text(const rl_rlhf *h, int i, char *out, size_t cap)
{
    long n = llm_bpe_decode(h->tok, h->resp + (size_t)i * h->k.max_new, (size_t)h->nresp[i],
                            out, cap - 1);
    if (n < 0)
        n = 0;
    if ((size_t)n > cap - 1)
        n = (long)cap - 1;
    out[n] = '\0';
}

/* The random stream of answer i to problem p of this iteration: the problem's seed + i. The
 * same whatever the placement (a sequence's stream does not depend on the rank that draws
 * it), and what the engine gives the n samples of one request (seed + i), so a group drawn
 * as n = G forks of its prompt equals G requests of their own. */
static uint64_t answer_seed(const rl_rlhf *h, int p, int i)
{
    return mix(h->k.seed ^ mix((uint64_t)h->iteration << 20 | (uint64_t)p)) + (uint64_t)i;
}

/* Answers per engine request: a group's G when every generator holds whole groups (the
 * prompt prefilled once, its blocks forked), else 1. */
static int answers_per_request(const rl_rlhf *h)
{
    return (h->N / h->n_gen) % h->k.group || h->k.no_fork ? 1 : h->k.group;
}

static int generate(rl_rlhf *h, char *err, size_t errlen)
{
    const rl_rlhf_config *k = &h->k;
    mlsys_rng r;
    mlsys_rng_seed(&r, mix(k->seed * 1000003u + (uint64_t)h->iteration));
    for (int p = 0; p < k->prompts; p++) {
        rl_sum s;
        rl_sum_draw(&s, k->max_operand, &r);
        for (int j = 0; j < k->group; j++)
            h->prob[p * k->group + j] = s;
    }
    int rows = h->N / h->n_gen;
    if (h->gen) {
        /* this generator's sequences lo .. lo+rows-1, a group's G answers to one problem side
         * by side: one request per problem with n = G samples (the prompt prefilled once, its
         * blocks forked), or one per sequence when a generator's share cuts a group */
        int lo = h->gen_idx * rows, n = answers_per_request(h), B = rows / n;
        uint64_t *seeds = mlsys_xcalloc((size_t)B, sizeof *seeds);
        int **pr = mlsys_xcalloc((size_t)B, sizeof *pr), *np = mlsys_xcalloc((size_t)B,
                                                                          sizeof(int));
        int **out = mlsys_xcalloc((size_t)rows, sizeof *out);
        for (int b = 0; b < B; b++) {
            int s = lo + b * n;
            seeds[b] = answer_seed(h, s / k->group, s % k->group);
            pr[b] = mlsys_xmalloc((size_t)h->t_cap * sizeof(int));
            np[b] = prompt_ids(h, &h->prob[s], pr[b]);
        }
        for (int b = 0; b < rows; b++)
            out[b] = h->resp + (size_t)(lo + b) * k->max_new;
        llm_gen_opts o = {.max_new = k->max_new, .temperature = k->temperature, .top_p = 1.0f,
                          .n = n, .seeds = seeds};
        llm_gen_stats gs;
        set_mem(h, RL_ROLE_GENERATOR, RL_MEM_ACTIVATIONS, h->gen_act);
        int rc = llm_generate(h->eng, B, (const int *const *)pr, np, out, h->nresp + lo, &o,
                              &gs, err, errlen);
        h->prompt_rows = gs.prefill_tokens;
        for (int b = 0; b < rows; b++) {
            /* the answer ends with its line: cut after the first token holding a newline */
            int *t = out[b], m = h->nresp[lo + b];
            for (int j = 0; j < m; j++) {
                int len;
                const char *s = llm_bpe_token_bytes(h->tok, j ? t[j - 1] : -1, t[j], &len);
                if (s && memchr(s, '\n', (size_t)len)) {
                    h->nresp[lo + b] = j + 1;
                    break;
                }
            }
            if (h->nresp[lo + b] < 1) {         /* the engine stopped early: one token */
                t[0] = LLM_TOK_EOS;
                h->nresp[lo + b] = 1;
            }
        }
        set_mem(h, RL_ROLE_GENERATOR, RL_MEM_ACTIVATIONS, 0);
        for (int b = 0; b < B; b++)
            free(pr[b]);
        free(seeds);
        free(pr);
        free(np);
        free(out);
        if (rc)
            return -1;
    }
    if (h->k.placement == RL_PLACE_SPLIT) {
        /* the sequences to every rank; each trainer keeps its share */
        for (int g = 0; g < h->n_gen; g++) {
            int lo = g * rows;
            if (mlsys_broadcast(h->c, h->resp + (size_t)lo * k->max_new,
                                (size_t)rows * k->max_new, MLSYS_I32, g) ||
                mlsys_broadcast(h->c, h->nresp + lo, (size_t)rows, MLSYS_I32, g)) {
                snprintf(err, errlen, "rank %d: sending sequences: %s", h->rank,
                         mlsys_errmsg(h->c));
                return -1;
            }
        }
    }
    if (emits_flow(h)) {
        int toks = 0, n = answers_per_request(h);
        char what[32];
        for (int i = 0; i < h->N; i++)
            toks += h->nresp[i];
        /* the engine's side: each prompt computed once, its answers forking its blocks */
        if (n > 1)
            snprintf(what, sizeof what, "prefills, %d forks each", n);
        else
            snprintf(what, sizeof what, "prefills");
        flow(h, RL_ROLE_GENERATOR, RL_ROLE_GENERATOR, MLSYS_FLOW_TOKENS, h->N / n, 0, NAN,
             what);
        flow(h, RL_ROLE_GENERATOR, RL_ROLE_ACTOR, MLSYS_FLOW_TOKENS, h->N,
             (uint64_t)toks * sizeof(int), NAN, NULL);
    }
    return 0;
}

/* Forward of chunk m (rows m·mb ..) through w; lp of each response token, at
 * lp[s·max_new + j] with s the row's index in the trainer's batch (local: in the chunk). */
static void chunk_logprobs(rl_rlhf *h, const llm_weights *w, int m, float *lp, int local)
{
    int T = h->t_row[m];
    nn_tf_forward(&h->tf, w, h->ids + (size_t)m * h->mb * h->t_cap, NULL, h->mb, T);
    for (int b = 0; b < h->mb; b++) {
        int s = m * h->mb + b, i = h->lo + s;
        for (int j = 0; j < h->nresp[i]; j++) {
            size_t row = (size_t)b * T + (size_t)(h->plen[s] - 1 + j);
            nn_logprob_forward(&lp[(size_t)(local ? b : s) * h->k.max_new + j],
                               h->tf.logits + row * h->V, &h->resp[(size_t)i * h->k.max_new + j],
                               NULL, 1, h->V);
        }
    }
}

/* The critic's values of chunk m (after a forward of cw's body: a value head reads the final
 * hidden state, no vocabulary logits) at every response token. */
static void chunk_values(rl_rlhf *h, int m, float *v, int local)
{
    int T = h->t_row[m];
    nn_tf_forward_hidden(&h->tf, &h->cw, h->ids + (size_t)m * h->mb * h->t_cap, h->mb, T);
    for (int b = 0; b < h->mb; b++) {
        int s = m * h->mb + b, i = h->lo + s;
        for (int j = 0; j < h->nresp[i]; j++) {
            size_t row = (size_t)b * T + (size_t)(h->plen[s] - 1 + j);
            nn_scalar_head_forward(&v[(size_t)(local ? b : s) * h->k.max_new + j],
                                   h->tf.xn_final + row * h->C, h->chead, h->chead + h->C, 1,
                                   h->C);
        }
    }
}

static void score(rl_rlhf *h)
{
    const rl_rlhf_config *k = &h->k;
    /* each chunk's rows as long as its longest (BOS, prompt, answer), as TRL pads: the
     * padding after a row's end is never read (causal attention) */
    for (int m = 0; m < k->minibatches; m++) {
        int T = 1, tmp[64];
        for (int b = 0; b < h->mb; b++) {
            int s = m * h->mb + b;
            h->plen[s] = prompt_ids(h, &h->prob[h->lo + s], tmp);
            T = h->plen[s] + h->nresp[h->lo + s] > T ? h->plen[s] + h->nresp[h->lo + s] : T;
        }
        h->t_row[m] = T;
        for (int b = 0; b < h->mb; b++) {
            int s = m * h->mb + b, i = h->lo + s, n = h->nresp[i];
            int *row = h->ids + (size_t)m * h->mb * h->t_cap + (size_t)b * T;
            prompt_ids(h, &h->prob[i], row);
            memcpy(row + h->plen[s], h->resp + (size_t)i * k->max_new, (size_t)n * sizeof(int));
            for (int t = h->plen[s] + n; t < T; t++)
                row[t] = LLM_TOK_BOS;
        }
    }
    set_mem(h, RL_ROLE_ACTOR, RL_MEM_ACTIVATIONS, h->tf.act_bytes);
    set_mem(h, RL_ROLE_REWARD, RL_MEM_ACTIVATIONS, h->rmtf.act_bytes);
    char (*lines)[64] = mlsys_xmalloc((size_t)h->mb * sizeof *lines);
    const char **lp = mlsys_xmalloc((size_t)h->mb * sizeof *lp);
    for (int m = 0; m < k->minibatches; m++) {
        chunk_logprobs(h, &h->rw, m, h->ref_lp, 0);
        chunk_logprobs(h, &h->aw, m, h->old_lp, 0);     /* the first update's very forward */
        if (k->algo == RL_ALGO_PPO)
            chunk_values(h, m, h->val, 0);
        for (int b = 0; b < h->mb; b++) {
            int s = m * h->mb + b, i = h->lo + s;
            char txt[64], pr[32];
            resp_text(h, i, txt, sizeof txt);
            h->judge[s] = rl_sum_judge(&h->prob[i], txt, strlen(txt));
            rl_sum_prompt(&h->prob[i], pr, sizeof pr);
            char *nl = strchr(txt, '\n');
            if (nl)
                *nl = '\0';
            snprintf(lines[b], sizeof lines[b], "%.24s%.38s", pr, txt);
            lp[b] = lines[b];
        }
        rl_rm_score_lines(&h->rm, &h->rmtf, h->tok, lp, h->mb, h->score + m * h->mb);
    }
    set_mem(h, RL_ROLE_REWARD, RL_MEM_ACTIVATIONS, 0);
    set_mem(h, RL_ROLE_ACTOR, RL_MEM_ACTIVATIONS, 0);
    free(lines);
    free(lp);
}

static int advantage(rl_rlhf *h, char *err, size_t errlen)
{
    const rl_rlhf_config *k = &h->k;
    int M = k->max_new;
    float R[64];
    for (int s = 0; s < h->Nl; s++) {
        int n = h->nresp[h->lo + s];
        size_t o = (size_t)s * M;
        rl_token_rewards(h->rew + o, h->kl + o, h->old_lp + o, h->ref_lp + o, n, k->beta,
                         h->score[s], RL_REWARD_END);
        if (k->algo == RL_ALGO_PPO) {
            rl_gae(h->adv + o, h->rew + o, h->val + o, NULL, 0.0f, n, k->gamma, k->lambda);
            for (int j = 0; j < n; j++)
                h->ret[o + j] = h->adv[o + j] + h->val[o + j];
        }
    }
    if (k->algo == RL_ALGO_GRPO) {
        /* DeepSeekMath's GRPO: the group compares the reward model's scores alone; the KL to
         * the reference is a term of the loss (k3, rl_grpo_loss), not folded in here */
        for (int g = 0; g < h->Nl; g += k->group) {
            float A[64];
            for (int j = 0; j < k->group; j++)
                R[j] = h->score[g + j];
            rl_grpo_advantages(A, R, k->group);
            for (int j = 0; j < k->group; j++)
                for (int q = 0; q < h->nresp[h->lo + g + j]; q++)
                    h->adv[(size_t)(g + j) * M + q] = A[j];
        }
        return 0;
    }
    /* PPO: advantages normalised over every response token of the batch, all trainers */
    double acc[3] = {0, 0, 0};
    for (int s = 0; s < h->Nl; s++)
        for (int j = 0; j < h->nresp[h->lo + s]; j++) {
            double a = h->adv[(size_t)s * M + j];
            acc[0] += a;
            acc[1] += a * a;
            acc[2] += 1;
        }
    if (h->tc && h->n_tr > 1 && mlsys_allreduce(h->tc, acc, acc, 3, MLSYS_F64, MLSYS_SUM)) {
        snprintf(err, errlen, "rank %d: advantage statistics: %s", h->rank, mlsys_errmsg(h->tc));
        return -1;
    }
    double mean = acc[0] / acc[2], sd = sqrt(fmax(acc[1] / acc[2] - mean * mean, 0.0));
    for (int s = 0; s < h->Nl; s++)
        for (int j = 0; j < h->nresp[h->lo + s]; j++)
            h->adv[(size_t)s * M + j] = (float)((h->adv[(size_t)s * M + j] - mean) /
                                                (sd + 1e-8));
    return 0;
}

/* Average the gradient over the trainers, clip its norm to 1. */
static int reduce_grad(rl_rlhf *h, float *g, size_t n, char *err, size_t errlen)
{
    if (h->tc && h->n_tr > 1 && mlsys_allreduce(h->tc, g, g, n, MLSYS_F32, MLSYS_AVG)) {
        snprintf(err, errlen, "rank %d: gradient all-reduce: %s", h->rank, mlsys_errmsg(h->tc));
        return -1;
    }
    double norm = sqrt(nn_sumsq(g, n));
    if (norm > 1.0)
        nn_scale(g, n, (float)(1.0 / norm));
    return 0;
}

static int train_chunk(rl_rlhf *h, int e, int m, rl_rlhf_stats *st, char *err, size_t errlen)
{
    const rl_rlhf_config *k = &h->k;
    int M = k->max_new, cap = h->mb * M, n = 0, T = h->t_row[m];
    float *lp = mlsys_xmalloc((size_t)cap * sizeof(float) * 6 + (size_t)h->mb * sizeof(float));
    float *olp = lp + cap, *ad = olp + cap, *dlp = ad + cap, *newlp = dlp + cap;
    float *rlp = newlp + cap, *seq_adv = rlp + cap;
    int *len = mlsys_xmalloc((size_t)h->mb * sizeof(int));
    int rc = -1;
    chunk_logprobs(h, &h->aw, m, newlp, 1);
    for (int b = 0; b < h->mb; b++) {
        int s = m * h->mb + b;
        len[b] = h->nresp[h->lo + s];
        seq_adv[b] = h->adv[(size_t)s * M];
        for (int j = 0; j < len[b]; j++) {
            lp[n] = newlp[(size_t)b * M + j];
            olp[n] = h->old_lp[(size_t)s * M + j];
            rlp[n] = h->ref_lp[(size_t)s * M + j];
            ad[n] = h->adv[(size_t)s * M + j];
            n++;
        }
    }
    if (e == 0 && m == 0)
        for (int q = 0; q < n; q++)
            st->ratio_dev0 = fmax(st->ratio_dev0, fabs(exp((double)lp[q] - olp[q]) - 1.0));
    if (k->algo == RL_ALGO_GRPO)
        st->policy_loss = rl_grpo_loss(dlp, lp, olp, rlp, seq_adv, len, h->mb, k->clip,
                                       k->beta, &st->clipfrac, &st->approx_kl, NULL);
    else
        st->policy_loss = rl_ppo_policy_loss(dlp, lp, olp, ad, n, k->clip, &st->clipfrac,
                                             &st->approx_kl);
    /* dlogits in place of the logits: the response rows from dlp, the others zero */
    n = 0;
    for (int b = 0; b < h->mb; b++) {
        int s = m * h->mb + b, i = h->lo + s, first = h->plen[s] - 1, nr = h->nresp[i];
        for (int t = 0; t < T; t++) {
            float *row = h->tf.logits + ((size_t)b * T + t) * h->V;
            if (t >= first && t < first + nr) {
                nn_logprob_backward(row, &dlp[n], row, &h->resp[(size_t)i * M + t - first],
                                    NULL, 1, h->V);
                n++;
            } else {
                memset(row, 0, (size_t)h->V * sizeof(float));
            }
        }
    }
    memset(h->ag.mem, 0, h->ag.n_floats * sizeof(float));
    nn_tf_backward_from(&h->tf, &h->aw, &h->ag, h->ids + (size_t)m * h->mb * h->t_cap,
                        h->tf.logits, NULL, NULL, NULL);
    if (reduce_grad(h, h->ag.mem, h->ag.n_floats, err, errlen))
        goto out;
    nn_adamw_step(&h->aopt, h->aw.mem, h->ag.mem);
    if (k->algo == RL_ALGO_PPO) {
        /* the critic: values against the returns, clipped around the rollout's */
        chunk_values(h, m, newlp, 1);
        n = 0;
        for (int b = 0; b < h->mb; b++) {
            int s = m * h->mb + b;
            for (int j = 0; j < h->nresp[h->lo + s]; j++) {
                lp[n] = newlp[(size_t)b * M + j];
                olp[n] = h->val[(size_t)s * M + j];
                ad[n] = h->ret[(size_t)s * M + j];
                n++;
            }
        }
        st->value_loss = rl_value_loss(dlp, lp, olp, ad, n, k->clip);
        memset(h->tf.d_hidden, 0, (size_t)h->mb * T * h->C * sizeof(float));
        memset(h->cghead, 0, ((size_t)h->C + 1) * sizeof(float));
        n = 0;
        for (int b = 0; b < h->mb; b++) {
            int s = m * h->mb + b;
            for (int j = 0; j < h->nresp[h->lo + s]; j++) {
                size_t row = (size_t)b * T + (size_t)(h->plen[s] - 1 + j);
                nn_scalar_head_backward(h->tf.d_hidden + row * h->C, h->cghead,
                                        h->cghead + h->C, &dlp[n++],
                                        h->tf.xn_final + row * h->C, h->chead, 1, h->C);
            }
        }
        memset(h->cg.mem, 0, h->cg.n_floats * sizeof(float));
        nn_tf_backward_from(&h->tf, &h->cw, &h->cg, h->ids + (size_t)m * h->mb * h->t_cap,
                            NULL, h->tf.d_hidden, NULL, NULL);
        if (reduce_grad(h, h->cg.mem, h->cg.n_floats, err, errlen) ||
            reduce_grad(h, h->cghead, (size_t)h->C + 1, err, errlen))
            goto out;
        nn_adamw_step(&h->copt, h->cw.mem, h->cg.mem);
        nn_adamw_step(&h->hopt, h->chead, h->cghead);
    }
    rc = 0;
out:
    free(lp);
    free(len);
    return rc;
}

static int sync_weights(rl_rlhf *h, char *err, size_t errlen)
{
    if (h->k.placement == RL_PLACE_COLOCATED) {
        h->version++;
        copy_weights(&h->gw, &h->aw);
        h->gen_version = h->version;
    } else {
        if (h->train)
            h->version++;
        if (h->sc) {
            int nt = nn_tf_tensor_count(&h->mc);
            rl_tensor *t = mlsys_xcalloc((size_t)nt, sizeof *t);
            char (*names)[32] = mlsys_xcalloc((size_t)nt, sizeof *names);
            llm_weights *w = h->train ? &h->aw : &h->gw;
            for (int i = 0; i < nt; i++) {
                size_t off, len;
                nn_tf_tensor(&h->mc, w, i, &off, &len, names[i], sizeof names[i]);
                t[i].name = names[i];
                t[i].data = w->mem + off;
                t[i].n = len;
            }
            uint64_t v = h->train ? h->version : h->gen_version;
            /* core/rl/wsync.c: header, version vote, buckets; its staging buffer in a pool
             * of no role, and one flow record of ours (below) for the whole hand-over */
            const rl_wsync_events ev = {RL_ROLE_COUNT * RL_MEM_KINDS, 1};
            int rc = rl_wsync_with(h->sc, 0, t, nt, h->k.bucket_bytes, &v, &ev, err, errlen);
            free(t);
            free(names);
            if (rc)
                return -1;
            if (h->gen)
                h->gen_version = v;
        }
    }
    flow(h, RL_ROLE_ACTOR, RL_ROLE_GENERATOR, MLSYS_FLOW_WEIGHTS, nn_tf_tensor_count(&h->mc),
         (uint64_t)h->aw.n_floats * sizeof(float), NAN, NULL);
    return 0;
}

static double cpu_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The score phase's sums over the trainers: score, right, wrong, no sum line, Σ KL_t (the
 * sampled tokens' log-ratios), response tokens; and its moves between the roles. */
static int score_sums(rl_rlhf *h, double sums[6], char *err, size_t errlen)
{
    int M = h->k.max_new, ppo = h->k.algo == RL_ALGO_PPO;
    for (int s = 0; s < h->Nl; s++) {
        int n = h->nresp[h->lo + s];
        sums[0] += h->score[s];
        sums[1] += h->judge[s] == 1;
        sums[2] += h->judge[s] == 0;
        sums[3] += h->judge[s] < 0;
        for (int j = 0; j < n; j++)
            sums[4] += h->old_lp[(size_t)s * M + j] - h->ref_lp[(size_t)s * M + j];
        sums[5] += n;
    }
    if (h->tc && h->n_tr > 1 && mlsys_allreduce(h->tc, sums, sums, 6, MLSYS_F64, MLSYS_SUM)) {
        snprintf(err, errlen, "rank %d: statistics: %s", h->rank, mlsys_errmsg(h->tc));
        return -1;
    }
    int N = h->N, T = (int)sums[5];
    uint64_t rows = 0;
    for (int m = 0; m < h->k.minibatches; m++)
        rows += (uint64_t)h->mb * (uint64_t)h->t_row[m];
    rows *= (uint64_t)h->n_tr;          /* about as many on every trainer */
    flow(h, RL_ROLE_ACTOR, RL_ROLE_REFERENCE, MLSYS_FLOW_TOKENS, N, rows * sizeof(int), NAN,
         NULL);
    flow(h, RL_ROLE_ACTOR, RL_ROLE_REWARD, MLSYS_FLOW_TOKENS, N, 0, NAN, "lines");
    if (ppo)
        flow(h, RL_ROLE_ACTOR, RL_ROLE_CRITIC, MLSYS_FLOW_TOKENS, N, rows * sizeof(int), NAN,
             NULL);
    flow(h, RL_ROLE_REFERENCE, RL_ROLE_ACTOR, MLSYS_FLOW_LOGPROBS, T,
         (uint64_t)T * sizeof(float), sums[4] / N, "log-probs, KL");
    flow(h, RL_ROLE_REWARD, RL_ROLE_ACTOR, MLSYS_FLOW_REWARDS, N, (uint64_t)N * sizeof(float),
         sums[0] / N, "scores");
    if (ppo)
        flow(h, RL_ROLE_CRITIC, RL_ROLE_ACTOR, MLSYS_FLOW_VALUES, T,
             (uint64_t)T * sizeof(float), NAN, NULL);
    return 0;
}

int rl_rlhf_iterate(rl_rlhf *h, rl_rlhf_stats *st, char *err, size_t errlen)
{
    memset(st, 0, sizeof *st);
    h->iteration++;
    st->iteration = h->iteration;
    const rl_rlhf_config *k = &h->k;
    int ppo = k->algo == RL_ALGO_PPO, updates = k->epochs * k->minibatches;
    double c0 = cpu_now_s(), t, sums[6] = {0};
    /* each phase's clock starts after its gate: a gated run does not time the viewer */
    if (phase(h, RL_PH_GENERATE, err, errlen))
        return -1;
    t = mlsys_now_s();
    if (generate(h, err, errlen))
        return -1;
    st->phase_s[RL_PH_GENERATE] = mlsys_now_s() - t;
    st->prompt_rows = h->gen ? h->prompt_rows : 0;
    if (phase(h, RL_PH_SCORE, err, errlen))
        return -1;
    t = mlsys_now_s();
    if (h->train) {
        score(h);
        if (score_sums(h, sums, err, errlen))
            return -1;
    }
    st->phase_s[RL_PH_SCORE] = mlsys_now_s() - t;
    if (phase(h, RL_PH_ADVANTAGE, err, errlen))
        return -1;
    t = mlsys_now_s();
    if (h->train) {
        if (advantage(h, err, errlen))
            return -1;
        int T = (int)sums[5];
        if (ppo) {
            flow(h, RL_ROLE_ACTOR, RL_ROLE_ACTOR, MLSYS_FLOW_REWARDS, T,
                 (uint64_t)T * sizeof(float), NAN, "rewards: score - beta*KL");
            flow(h, RL_ROLE_ACTOR, RL_ROLE_ACTOR, MLSYS_FLOW_ADVANTAGES, T,
                 (uint64_t)T * sizeof(float), NAN, "advantages by GAE");
        } else {
            flow(h, RL_ROLE_ACTOR, RL_ROLE_ACTOR, MLSYS_FLOW_ADVANTAGES, h->N,
                 (uint64_t)h->N * sizeof(float), NAN, "advantages by group, no critic");
        }
    }
    st->phase_s[RL_PH_ADVANTAGE] = mlsys_now_s() - t;
    if (phase(h, RL_PH_TRAIN, err, errlen))
        return -1;
    t = mlsys_now_s();
    if (h->train) {
        set_mem(h, RL_ROLE_ACTOR, RL_MEM_ACTIVATIONS, h->tf.act_bytes + h->tf.grad_bytes);
        for (int e = 0; e < k->epochs; e++)
            for (int m = 0; m < k->minibatches; m++)
                if (train_chunk(h, e, m, st, err, errlen))
                    return -1;
        set_mem(h, RL_ROLE_ACTOR, RL_MEM_ACTIVATIONS, 0);
        uint64_t gb = (uint64_t)h->ag.n_floats * sizeof(float);
        const char *upd = h->n_tr > 1 ? "updates, all-reduced" : "updates";
        if (ppo) {
            int T = (int)sums[5];
            flow(h, RL_ROLE_ACTOR, RL_ROLE_CRITIC, MLSYS_FLOW_VALUES, T,
                 (uint64_t)T * sizeof(float), NAN, "returns");
            flow(h, RL_ROLE_CRITIC, RL_ROLE_CRITIC, MLSYS_FLOW_GRADIENTS, updates, gb, NAN,
                 upd);
        }
        flow(h, RL_ROLE_ACTOR, RL_ROLE_ACTOR, MLSYS_FLOW_GRADIENTS, updates, gb, NAN, upd);
    }
    st->phase_s[RL_PH_TRAIN] = mlsys_now_s() - t;
    if (phase(h, RL_PH_SYNC, err, errlen))
        return -1;
    t = mlsys_now_s();
    if (sync_weights(h, err, errlen))
        return -1;
    st->phase_s[RL_PH_SYNC] = mlsys_now_s() - t;
    for (int p = 0; p < RL_PH_COUNT; p++)
        st->total_s += st->phase_s[p];
    st->cpu_s = cpu_now_s() - c0;
    double ratio = st->ratio_dev0;
    if (h->train && h->tc && h->n_tr > 1 &&
        mlsys_allreduce(h->tc, &ratio, &ratio, 1, MLSYS_F64, MLSYS_MAX)) {
        snprintf(err, errlen, "rank %d: statistics: %s", h->rank, mlsys_errmsg(h->tc));
        return -1;
    }
    double pack[20] = {sums[0], sums[1], sums[2], sums[3], sums[4], sums[5], ratio,
                       st->policy_loss, st->value_loss, st->clipfrac, st->approx_kl,
                       st->total_s, (double)h->version, 0, 0, 0, 0, 0, st->cpu_s};
    for (int p = 0; p < RL_PH_COUNT; p++)
        pack[13 + p] = st->phase_s[p];
    if (h->k.placement == RL_PLACE_SPLIT &&
        mlsys_broadcast(h->c, pack, 20, MLSYS_F64, h->first_trainer)) {
        snprintf(err, errlen, "rank %d: statistics: %s", h->rank, mlsys_errmsg(h->c));
        return -1;
    }
    st->sequences = h->N;
    st->tokens = (int)pack[5];
    st->reward = pack[0] / h->N;
    st->right = pack[1] / h->N;
    st->wrong = pack[2] / h->N;
    st->malformed = pack[3] / h->N;
    st->kl = pack[4] / h->N;
    st->ratio_dev0 = pack[6];
    st->policy_loss = pack[7];
    st->value_loss = pack[8];
    st->clipfrac = pack[9];
    st->approx_kl = pack[10];
    st->total_s = pack[11];
    st->version = (uint64_t)pack[12];
    st->cpu_s = pack[18];
    for (int p = 0; p < RL_PH_COUNT; p++)
        st->phase_s[p] = pack[13 + p];
    return 0;
}

int rl_rlhf_samples(const rl_rlhf *h, char (*lines)[64], int n)
{
    int k = 0;
    int lo = h->train ? h->lo : 0, cnt = h->train ? h->Nl : h->N / h->n_gen;
    for (int s = 0; s < cnt && k < n; s++, k++) {
        char txt[64], pr[32];
        resp_text(h, lo + s, txt, sizeof txt);
        char *nl = strchr(txt, '\n');
        if (nl)
            *nl = '\0';
        rl_sum_prompt(&h->prob[lo + s], pr, sizeof pr);
        snprintf(lines[k], 64, "%.24s%.38s", pr, txt);
    }
    return k;
}

void rl_rlhf_answers(const rl_rlhf *h, const int **tok, const int **n, int *lo, int *count)
{
    int rows = h->N / h->n_gen;
    *tok = h->resp;
    *n = h->nresp;
    *lo = h->gen ? h->gen_idx * rows : h->lo;
    *count = h->gen ? rows : h->Nl;
}
