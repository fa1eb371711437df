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

#include "llm.h"

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

#endif
