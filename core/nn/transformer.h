/* transformer.h - the lab's Llama-style transformer: its configuration and weights (llama2.c's
 * layout), rotary embeddings, causal attention with grouped key/value heads, the SwiGLU gate,
 * and the whole model's forward and backward. The layers of core/nn/nn.h are its parts;
 * core/llm/infer.c runs inference on the same kernels, and core/llm/model.h reads and writes
 * the weights as llama2.c's files (core/llm builds on core/nn, never the reverse). */
#ifndef MLSYS_NN_TRANSFORMER_H
#define MLSYS_NN_TRANSFORMER_H

#include "nn.h"

/* ---- weights.c: the configuration and the weights, in llama2.c's layout ----
 * The types keep llama2.c's (and the rest of the lab's) llm_ names: they are the language
 * model's, whichever folder computes on them. */

/* Limits a file may not exceed (a header asking for more is rejected before any allocation).
 * Each dimension stays far below INT_MAX so llama2.c's int arithmetic cannot overflow. */
#define LLM_MAX_DIM     65536
#define LLM_MAX_LAYERS  1024
#define LLM_MAX_VOCAB   (1 << 20)
#define LLM_MAX_SEQ     (1 << 20)
#define LLM_MAX_FILE_BYTES (64ull << 30)   /* 64 GiB of weights */

/* The 7 int32 of llama2.c's header, in file order, plus what follows from them. */
typedef struct llm_config {
    int dim;          /* model width D */
    int hidden_dim;   /* FFN width H */
    int n_layers;     /* L */
    int n_heads;      /* query heads */
    int n_kv_heads;   /* key/value heads (divides n_heads; < n_heads is grouped-query) */
    int vocab_size;   /* V, always positive here; the file stores -V when wcls is separate */
    int seq_len;      /* S, longest context */
    int shared_classifier;   /* 1: logits use token_embedding (file vocab > 0); 0: own wcls */
    /* derived by llm_config_check */
    int head_size;    /* dim / n_heads (even: RoPE rotates pairs) */
    int kv_dim;       /* n_kv_heads * head_size */
} llm_config;

/* Every tensor, row-major, [out, in] for matrices (llama2.c's matmul reads W[d][n]).
 * All point into mem, in exactly this order, which is the order of the .bin payload. */
typedef struct llm_weights {
    float *token_embedding;  /* [V, D] */
    float *rms_att;          /* [L, D] */
    float *wq;               /* [L, D, D]       (out n_heads*head_size = D, in D) */
    float *wk;               /* [L, kv_dim, D] */
    float *wv;               /* [L, kv_dim, D] */
    float *wo;               /* [L, D, D] */
    float *rms_ffn;          /* [L, D] */
    float *w1;               /* [L, H, D]  gate */
    float *w2;               /* [L, D, H]  down */
    float *w3;               /* [L, H, D]  up */
    float *rms_final;        /* [D] */
    float *freq_cis_real;    /* [S, head_size/2] cos(pos·θ_i): written for old readers, run.c skips */
    float *freq_cis_imag;    /* [S, head_size/2] sin(pos·θ_i) */
    float *wcls;             /* [V, D]; == token_embedding when shared_classifier */
    float *mem;              /* the one allocation (or the payload of a mapped file) */
    size_t n_floats;         /* floats in mem == floats in the file payload */
    void *map;               /* a model file mapped whole (llm_checkpoint_read), or NULL */
    size_t map_len;
} llm_weights;

/* Validate c (every dimension positive and below the limits, n_heads | dim, n_kv_heads |
 * n_heads, even head_size) and fill head_size and kv_dim. 0 or -1 with a reason in err. */
int llm_config_check(llm_config *c, char *err, size_t errlen);
/* Trainable parameters (the RoPE tables excluded, wcls counted only when separate). */
size_t llm_param_count(const llm_config *c);
/* Floats of the file payload (parameters + the two RoPE tables); file = 28 + 4·this bytes. */
size_t llm_file_floats(const llm_config *c);
uint64_t llm_file_bytes(const llm_config *c);
/* Bytes of KV cache one token of context takes in float32: a key and a value of kv_dim
 * floats in every layer, 2 * n_layers * kv_dim * 4 (chapter 9's formula; a paged pool's
 * slot holds exactly this). */
size_t llm_kv_bytes(const llm_config *c);
/* One zeroed allocation carved into w; the RoPE tables are filled (θ_i = 10000^(-2i/hs)).
 * 0, or -1 when c is invalid. Free with llm_weights_free. */
int llm_weights_alloc(llm_weights *w, const llm_config *c, char *err, size_t errlen);
/* w carved over mem, llm_file_floats(c) floats that the caller owns (a model file's payload,
 * mapped): nothing allocated, nothing written. 0, or -1 when c is invalid. */
int llm_weights_over(llm_weights *w, const llm_config *c, float *mem, char *err,
                     size_t errlen);
void llm_weights_free(llm_weights *w);     /* frees mem, or unmaps map */
/* Offset (in floats, from mem) and length of each trainable tensor, in file order: lets an
 * optimizer walk the parameters without the RoPE tables. Returns the number of ranges (<= 12). */
int llm_weights_param_ranges(const llm_config *c, size_t off[12], size_t len[12]);

/* ==== the lab's Llama-style transformer (rope.c, attention.c, swiglu.c, transformer.c) ====
 * Shape legend of this section: B sequences, T tokens each (N = B·T rows), C = dim,
 * NH query heads, NKV key/value heads, HS = C/NH head size, KVD = NKV·HS, H = hidden_dim,
 * V = vocabulary, L = layers. Weights are llm_weights (above; llama2.c's
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
/* x [N,NX·HS] rotated in place, row i by position pos[i] (a table of at least max pos + 1
 * rows): the same rotation, for rows of many sequences at any positions (inference). */
void nn_rope_rows(float *x, const float *cos_t, const float *sin_t, const int *pos, int N,
                  int NX, int HS);

/* ---- attention.c: causal attention with grouped key/value heads (NKV divides NH) ---- */
/* One query row q [NH·HS] attends to npos key and value rows: row t of keys (values) at
 * k + r·ld (v + r·ld), r = rows[t] (rows NULL: r = t), each [NKV·HS]. out [NH·HS] =
 * softmax(q·kᵀ/√HS)·v per head; head h's probabilities [npos] land at att + h·att_stride.
 * The one attention: nn_attention_forward runs it on every row, inference on each row of a
 * step over the KV cache's slots (rows = the slots of positions 0..pos). */
void nn_attention_row(float *out, float *att, size_t att_stride, const float *q,
                      const float *k, const float *v, size_t ld, const int *rows, int npos,
                      int NH, int NKV, int HS);
/* out [B,T,NH·HS] = softmax(Q·Kᵀ/√HS, causal)·V per head; att [B,NH,T,T] keeps the
 * probabilities (zero above the diagonal). q [B,T,NH·HS], k and v [B,T,NKV·HS]. */
void nn_attention_forward(float *out, float *att, const float *q, const float *k,
                          const float *v, int B, int T, int NH, int NKV, int HS);
/* dq [B,T,NH·HS], dk and dv [B,T,NKV·HS] written; scratch [T,T]. */
void nn_attention_backward(float *dq, float *dk, float *dv, float *scratch, const float *dout,
                           const float *att, const float *q, const float *k, const float *v,
                           int B, int T, int NH, int NKV, int HS);

/* ---- swiglu.c: the gate of the MLP, y[n] = silu(a) ⊙ b ---- */
/* y may alias a or b (inference writes the gate over itself). */
void nn_swiglu_forward(float *y, const float *a, const float *b, size_t n);
/* da[n], db[n] written (may alias dy, not each other). */
void nn_swiglu_backward(float *da, float *db, const float *dy, const float *a, const float *b,
                        size_t n);

/* ---- transformer.c: the whole model ---- */
#define NN_TF_RMS_EPS 1e-5f   /* llama2.c's RMSNorm epsilon, in training and inference */
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
    float *xn_final;          /* [B,T,C] the final hidden state: the final RMSNorm's output,
                                 which the classifier (and a value or reward head) reads */
    float *logits;            /* [B,T,V] logits; probabilities after a forward with targets,
                                 then the logits' gradient during the backward */
    float *d_resid, *d_xn, *d_tmp, *dq;  /* [B,T,C] backward scratch, one layer's worth */
    float *dk, *dv;           /* [B,T,KVD] */
    float *d_h1, *d_h3, *d_hg;           /* [B,T,H] */
    float *d_att;             /* [T,T] */
    float *d_hidden;          /* [B,T,C] free for the caller: where a head writes the gradient
                                 of the final hidden state for nn_tf_backward_from */
    float *act_mem, *grad_mem;           /* the two allocations */
    size_t act_floats, act_bytes, grad_floats, grad_bytes;
} nn_tf;

/* Buffers for batches up to B x T (T <= seq_len). 0, or -1 on a bad size. */
int nn_tf_init(nn_tf *m, const llm_config *c, int B, int T);
/* Bytes of those buffers (activations and their gradients, before page rounding), from the
 * same table nn_tf_init carves, in double: what a B x T batch costs, known beforehand. */
double nn_tf_bytes(const llm_config *c, int B, int T);
void nn_tf_fini(nn_tf *m);
/* Seeded init (llama2.c's recipe): N(0, 0.02), wo and w2 N(0, 0.02/√(2L)), norms 1. */
void nn_tf_init_weights(llm_weights *w, const llm_config *c, uint64_t seed);
/* The body only: ids [B,T] (B <= m->B, T <= m->T) up to the final hidden state m->xn_final
 * [B,T,C], no logits: what a scalar head (a critic, a reward model) reads. Its backward is
 * nn_tf_backward_from with dlogits NULL. */
void nn_tf_forward_hidden(nn_tf *m, const llm_weights *w, const int *ids, int B, int T);
/* The body, then the classifier: ids, targets [B,T]; b <= m->B, T <= m->T. With targets: mean cross-entropy (probabilities
 * left in m->logits); targets NULL: logits left in m->logits, returns 0. */
float nn_tf_forward(nn_tf *m, const llm_weights *w, const int *ids, const int *targets, int B,
                    int T);
/* Backward of the last forward with targets: g += dloss · ∂loss/∂w (zero g first). hook may
 * be NULL. Order of completion: rms_final, wcls, then layer L-1 .. 0, the embedding last. */
void nn_tf_backward(nn_tf *m, const llm_weights *w, llm_weights *g, const int *ids,
                    const int *targets, float dloss, nn_tf_grad_hook hook, void *u);
/* Backward of the last forward (with or without targets) from any loss on its outputs: RL's.
 * dlogits [B,T,V] = ∂loss/∂logits (may be m->logits, which a forward without targets left
 * holding the logits; NULL: the loss does not read them) and dhidden [B,T,C] =
 * ∂loss/∂xn_final (e.g. m->d_hidden from nn_scalar_head_backward; NULL: none). g +=
 * ∂loss/∂w; hook and order as nn_tf_backward's. */
void nn_tf_backward_from(nn_tf *m, const llm_weights *w, llm_weights *g, const int *ids,
                         const float *dlogits, const float *dhidden, nn_tf_grad_hook hook,
                         void *u);
/* Tensors at the backward's granularity: 0 token_embedding, 1 + k·L + l the layer-l slice of
 * kind k (rms_att, wq, wk, wv, wo, rms_ffn, w1, w2, w3), 9L+1 rms_final, 9L+2 wcls (only when
 * not shared). nn_tf_tensor gives one's offset and length in w->mem (floats) and its name
 * ("wq.3"; name may be NULL); -1 when i is out of range. In file order: offsets increase. */
int nn_tf_tensor_count(const llm_config *c);
int nn_tf_tensor(const llm_config *c, const llm_weights *w, int i, size_t *off, size_t *len,
                 char *name, size_t namelen);

#endif
