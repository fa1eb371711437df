/* transformer.h - the lab's Llama-style transformer for training: rotary embeddings,
 * causal attention with grouped key/value heads, the SwiGLU gate, and the whole model's
 * forward and backward over core/llm/model.h's weights (llama2.c's layout). The layers of
 * core/nn/nn.h are its parts; core/llm/infer.c is the inference side of the same model. */
#ifndef MLSYS_NN_TRANSFORMER_H
#define MLSYS_NN_TRANSFORMER_H

#include "nn.h"
#include "../llm/model.h"

/* ==== the lab's Llama-style transformer (rope.c, attention.c, swiglu.c, transformer.c) ====
 * Shape legend of this section: B sequences, T tokens each (N = B·T rows), C = dim,
 * NH query heads, NKV key/value heads, HS = C/NH head size, KVD = NKV·HS, H = hidden_dim,
 * V = vocabulary, L = layers. Weights are core/llm/model.h's llm_weights (llama2.c's
 * layout); their gradients are a second llm_weights from llm_weights_alloc, so the flat
 * gradient lines up with the flat weights float for float. */

/* ---- rope.c: rotary position embedding, pairs (2i, 2i+1) of each head, as run.c ---- */
/* cos_t, sin_t [T, HS/2]: the angle t·10000^(-2i/HS), computed in float as run.c does. */
void nn_rope_table(float *cos_t, float *sin_t, int T, int HS);
/* x [B,T,NX·HS] rotated in place, token t by its position t (NX heads of HS). */
void nn_rope_forward(float *x, const float *cos_t, const float *sin_t, int B, int T, int NX,
                     int HS);
/* dx [B,T,NX·HS] in place: the rotation backwards (a rotation's transpose). */
void nn_rope_backward(float *dx, const float *cos_t, const float *sin_t, int B, int T, int NX,
                      int HS);

/* ---- attention.c: causal attention with grouped key/value heads (NKV divides NH) ---- */
/* out [B,T,NH·HS] = softmax(Q·Kᵀ/√HS, causal)·V per head; att [B,NH,T,T] keeps the
 * probabilities (zero above the diagonal). q [B,T,NH·HS], k and v [B,T,NKV·HS]. */
void nn_attention_forward(float *out, float *att, const float *q, const float *k,
                          const float *v, int B, int T, int NH, int NKV, int HS);
/* dq [B,T,NH·HS], dk and dv [B,T,NKV·HS] written; scratch [T,T]. */
void nn_attention_backward(float *dq, float *dk, float *dv, float *scratch, const float *dout,
                           const float *att, const float *q, const float *k, const float *v,
                           int B, int T, int NH, int NKV, int HS);

/* ---- swiglu.c: the gate of the MLP, y[n] = silu(a) ⊙ b ---- */
void nn_swiglu_forward(float *y, const float *a, const float *b, size_t n);
/* da[n], db[n] written (may alias dy, not each other). */
void nn_swiglu_backward(float *da, float *db, const float *dy, const float *a, const float *b,
                        size_t n);

/* ---- transformer.c: the whole model ---- */
/* Called by the backward as tensor i (see nn_tf_tensor) holds its final gradient. */
typedef void (*nn_tf_grad_hook)(void *u, int i);

/* The activations of one forward (kept for the backward) and the backward's scratch: two
 * allocations (one per tensor family) carved into the named pointers below. Per-layer
 * families are [L, ...] with each layer sized for the largest batch (B, T of nn_tf_init). */
typedef struct nn_tf {
    llm_config c;
    int B, T;                 /* largest batch the buffers hold */
    int last_B, last_T;       /* of the last forward */
    float *rope_cos, *rope_sin;          /* [T, HS/2] */
    float *resid;             /* [L+1, B,T,C] residual stream entering layer l; [L] is the end */
    float *rstd_att;          /* [L, B,T] */
    float *xn_att;            /* [L, B,T,C] RMSNorm of resid[l] */
    float *q;                 /* [L, B,T,C]   after RoPE */
    float *k, *v;             /* [L, B,T,KVD] k after RoPE */
    float *att;               /* [L, B,NH,T,T] attention probabilities */
    float *atty;              /* [L, B,T,C] heads side by side, before Wo */
    float *resid_mid;         /* [L, B,T,C] resid[l] + attention: the MLP's input */
    float *rstd_ffn;          /* [L, B,T] */
    float *xn_ffn;            /* [L, B,T,C] */
    float *h1, *h3, *hg;      /* [L, B,T,H] gate W1·x, up W3·x, silu(h1) ⊙ h3 */
    float *rstd_final;        /* [B,T] */
    float *xn_final;          /* [B,T,C] */
    float *logits;            /* [B,T,V] logits; probabilities after a forward with targets,
                                 then the logits' gradient during the backward */
    float *d_resid, *d_xn, *d_tmp, *dq;  /* [B,T,C] backward scratch, one layer's worth */
    float *dk, *dv;           /* [B,T,KVD] */
    float *d_h1, *d_h3, *d_hg;           /* [B,T,H] */
    float *d_att;             /* [T,T] */
    float *act_mem, *grad_mem;           /* the two allocations */
    size_t act_floats, act_bytes, grad_floats, grad_bytes;
} nn_tf;

/* Buffers for batches up to B x T (T <= seq_len). 0, or -1 on a bad size. */
int nn_tf_init(nn_tf *m, const llm_config *c, int B, int T);
void nn_tf_fini(nn_tf *m);
/* Seeded init (llama2.c's recipe): N(0, 0.02), wo and w2 N(0, 0.02/√(2L)), norms 1. */
void nn_tf_init_weights(llm_weights *w, const llm_config *c, uint64_t seed);
/* ids, targets [B,T]; b <= m->B, T <= m->T. With targets: mean cross-entropy (probabilities
 * left in m->logits); targets NULL: logits left in m->logits, returns 0. */
float nn_tf_forward(nn_tf *m, const llm_weights *w, const int *ids, const int *targets, int B,
                    int T);
/* Backward of the last forward with targets: g += dloss · ∂loss/∂w (zero g first). hook may
 * be NULL. Order of completion: rms_final, wcls, then layer L-1 .. 0, the embedding last. */
void nn_tf_backward(nn_tf *m, const llm_weights *w, llm_weights *g, const int *ids,
                    const int *targets, float dloss, nn_tf_grad_hook hook, void *u);
/* Tensors at the backward's granularity: 0 token_embedding, 1 + k·L + l the layer-l slice of
 * kind k (rms_att, wq, wk, wv, wo, rms_ffn, w1, w2, w3), 9L+1 rms_final, 9L+2 wcls (only when
 * not shared). nn_tf_tensor gives one's offset and length in w->mem (floats) and its name
 * ("wq.3"; name may be NULL); -1 when i is out of range. In file order: offsets increase. */
int nn_tf_tensor_count(const llm_config *c);
int nn_tf_tensor(const llm_config *c, const llm_weights *w, int i, size_t *off, size_t *len,
                 char *name, size_t namelen);

#endif
