/* tp_step.h - a serving step's forward on tensor-parallel ranks. Rank 0 of the group (the
 * leader) schedules, owns the KV cache's map (paged or contiguous) and samples, as one
 * process does; before each forward it sends the step's rows and the cache slots they reach
 * to the other ranks (the followers), and every rank then runs llm_forward on its share of
 * the layers (llm_fwd_init_tp): two all-reduces per layer, the same logits everywhere. A
 * follower has no scheduler and no block allocator: its cache holds its key/value heads in a
 * pool of the leader's size, and answers slot(seq, pos) with the slot the leader sent, so
 * each key and value lands where the leader's does. */
#ifndef MLSYS_LLM_TP_STEP_H
#define MLSYS_LLM_TP_STEP_H

#include "engine.h"

/* A follower's cache for a leader whose cache has n_seqs sequences of at most max_len
 * positions in n_slots slots: c's layers, kv_dim / tp_size. 0, or -1 with err. */
int llm_tp_follower_kv(llm_kv *kv, const llm_config *c, int tp_size, int n_seqs, int n_slots,
                       int max_len, char *err, size_t errlen);

/* On the leader (rank 0 of e's group), in place of llm_forward: the rows go to the followers
 * (one broadcast of their size, one of the rows and slots), then llm_forward runs here.
 * Collective over the group with llm_tp_follow. 0, or -1 with err. */
int llm_tp_lead_forward(llm_fwd *e, llm_kv *kv, int n, const int *seq, const int *pos,
                        const int *tok, const unsigned char *want, float *logits, char *err,
                        size_t errlen);
/* The leader's last call: the followers' llm_tp_follow returns 0. */
int llm_tp_lead_stop(llm_fwd *e);

/* On a follower: run every forward the leader announces, on kv (llm_tp_follower_kv), the
 * logits into logits [max rows, V] (computed, then dropped: the leader samples), until the
 * leader stops (0) or a step fails (-1 with err). *steps counts the forwards run. */
int llm_tp_follow(llm_fwd *e, llm_kv *kv, float *logits, long *steps, char *err,
                  size_t errlen);

/* ---- engine after engine on one group ----
 * A lab may run several engines on its group, one after another (a workload under each
 * batching rule, then a server). Before each llm_engine_create with opts.tp, the leader
 * announces it: llm_tp_announce fills in o's n_blocks and max_model_len (so that the engine
 * is sized as the followers are told) and sends its shape (llm_engine_tp_shape); the engine
 * runs, and llm_engine_free stops the followers' forwards. After the last engine,
 * llm_tp_announce_end. A follower runs llm_tp_follow_engines until then. A follower waits for
 * the next step or engine as long as it takes (a server may sit idle for hours): it does not
 * time out there, but ends when the job is torn down (a rank that died). */
int llm_tp_announce(const llm_config *c, llm_engine_opts *o, char *err, size_t errlen);
/* The leader, when the engine it announced could not be created: the followers stop
 * waiting for its steps (and wait for the next announcement). */
int llm_tp_announce_cancel(mlsys_comm *tp);
int llm_tp_announce_end(mlsys_comm *tp);
/* On a follower of tp (rank > 0): for each engine announced, its share of the model from c
 * and w (llm_fwd_init_tp), a follower cache (llm_tp_follower_kv) and llm_tp_follow, until
 * the leader's end. 0, or -1 with err (a bad shape, no memory, a failed step). *engines and
 * *steps (may be NULL) count the engines followed and the forwards run. */
int llm_tp_follow_engines(mlsys_comm *tp, const llm_config *c, const llm_weights *w,
                          long *engines, long *steps, char *err, size_t errlen);

#endif
