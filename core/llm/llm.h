/* llm.h - the data half of the lab's own language model: a seeded corpus of tiny stories,
 * JSON records and sums (corpus.c), the grammar acceptor that scores generated text
 * (grammar.c), a byte-level BPE tokenizer (bpe.c) in llama2.c's tokenizer.bin format
 * (tokfile.c), and the "data kit" that turns a seed into token ids (datakit.c). The model
 * files are in model.h. Table of contents: prototypes sit under the file that has them. */
#ifndef MLSYS_LLM_H
#define MLSYS_LLM_H

#include <stddef.h>
#include <stdint.h>
#include "model.h"

/* ---- corpus.c: the seeded generator ---- */
typedef enum { LLM_DOC_STORY, LLM_DOC_JSON, LLM_DOC_SUMS, LLM_DOC_KINDS } llm_doc_kind;
typedef enum { LLM_SPLIT_TRAIN = 0, LLM_SPLIT_VAL = 1 } llm_split;
#define LLM_DOC_MAX 4096          /* no document is longer (terminator included) */

/* A story is one line of sentences; a JSON document is 1-3 record lines; a sums document is
 * 2-5 lines "A + B = C" / "A - B = C". Lines inside a document end with '\n' except the last. */
typedef struct llm_doc_info {
    llm_doc_kind kind;
    int units;                    /* sentences or lines the generator emitted */
} llm_doc_info;

/* Document `index` of `split` for `seed` into out (cap >= LLM_DOC_MAX), NUL-terminated.
 * Each document has its own RNG stream, so document i is the same however many are made.
 * Returns its length. info may be NULL. */
size_t llm_corpus_doc(uint64_t seed, llm_split split, uint64_t index, char *out, size_t cap,
                      llm_doc_info *info);

/* Documents 0..ndocs-1 of a split, stored back to back as "doc\n\n" (the text file format). */
typedef struct llm_corpus {
    char *text;                   /* NUL-terminated */
    size_t len;                   /* bytes of text */
    size_t ndocs;
    size_t *off;                  /* [ndocs+1]: doc i is text[off[i] .. off[i+1]-2) */
    size_t kind_docs[LLM_DOC_KINDS];
} llm_corpus;
/* Generate documents until max_docs documents or max_bytes bytes of text (whichever comes
 * first; 0 = no limit, not both 0). Same (seed, split) => the same bytes. */
int llm_corpus_generate(llm_corpus *c, uint64_t seed, llm_split split, size_t max_docs,
                        size_t max_bytes);
static inline size_t llm_corpus_doc_len(const llm_corpus *c, size_t i)
{
    return c->off[i + 1] - c->off[i] - 2;
}
void llm_corpus_free(llm_corpus *c);
int llm_corpus_write(const char *path, const llm_corpus *c, char *err, size_t errlen);

/* ---- grammar.c: does the grammar accept a sentence or a line ---- */
/* One unit (NUL-terminated): a story sentence, a JSON record line or a sum line. Leading and
 * trailing spaces are ignored. 1: the grammar could produce it, 0: not. */
int llm_grammar_accepts(const char *unit);
int llm_grammar_accepts_n(const char *unit, size_t n);
/* JSON line: 1 valid JSON that fits the record schema, 0 valid JSON but off schema,
 * -1 not JSON. (Any JSON whitespace and key order are allowed.) */
int llm_json_record_check(const char *s, size_t n);
/* 1 when s is a prefix of some syntactically valid JSON value (for constrained decoding). */
int llm_json_viable_prefix(const char *s, size_t n);
/* Sum line "A + B = C" or "A - B = C" (single spaces, no leading zeros):
 * 1 correct, 0 well formed but wrong, -1 malformed. The reward of chapter 13. */
int llm_sum_check(const char *s, size_t n);
/* Next unit of generated text starting at *pos: story sentences end at . ! ? (a closing quote
 * may follow) before a space or the end; JSON and sum lines end at a newline. Returns 1 with
 * [*start, *start + *len) and *pos advanced, 0 at the end. *complete is 0 for a story
 * fragment cut off without its end mark. */
int llm_grammar_next_unit(const char *text, size_t n, size_t *pos, size_t *start, size_t *len,
                          int *complete);
typedef struct llm_grammar_stats {
    size_t units, accepted;                  /* complete units, and those accepted */
    size_t kind_units[LLM_DOC_KINDS], kind_accepted[LLM_DOC_KINDS];
    size_t incomplete;                       /* story fragments without an end mark */
} llm_grammar_stats;
/* Score generated text: the share accepted/units is `model info`'s quality figure. */
void llm_grammar_score(const char *text, size_t n, llm_grammar_stats *st);

/* ---- bpe.c: byte-level BPE in llama2.c's sentencepiece layout ----
 * ids 0 <unk>, 1 <s> (BOS), 2 </s> (EOS), 3..258 the 256 bytes (id = 3 + byte), then merges.
 * A byte's piece is itself for printable ASCII and '\n', "<0xXX>" otherwise (run.c turns
 * those back into the byte). A merge's score is -rank (earlier merges win), bytes score 0,
 * the three specials -1e30 so run.c's merge loop (threshold -1e10) never produces them. */
#define LLM_TOK_UNK 0
#define LLM_TOK_BOS 1
#define LLM_TOK_EOS 2
#define LLM_TOK_BYTE0 3
#define LLM_TOK_SPECIAL_SCORE (-1e30f)

typedef struct llm_tokenizer {
    int vocab_size;
    int max_token_length;     /* longest piece, as tokenizer.bin's first int */
    char **piece;             /* [vocab] pieces as stored in tokenizer.bin, NUL-terminated */
    int *piece_len;
    char **bytes;             /* [vocab] what decode emits (specials: nothing) */
    int *bytes_len;
    float *score;
    int nmerges;              /* ids 259..259+nmerges-1 are merges (0 for foreign vocabularies) */
    int *table;               /* open-addressing hash of pieces -> id */
    size_t table_cap;
} llm_tokenizer;

/* Train on text (any bytes; NUL bytes act as hard separators) up to vocab_size (>= 259) ids.
 * Merges join printable ASCII and newlines only, never digits (sums stay digit by digit),
 * never across a word boundary (pre-split: optional space + letters, optional space +
 * punctuation, single digits, spaces, newlines). Stops early when no pair occurs twice. */
int llm_bpe_train(llm_tokenizer *t, const char *text, size_t n, int vocab_size, char *err,
                  size_t errlen);
/* Build from pieces and scores (what tokfile.c reads). Copies everything. */
int llm_tokenizer_init(llm_tokenizer *t, int vocab_size, char *const *pieces,
                       const int *lens, const float *scores, char *err, size_t errlen);
void llm_tokenizer_free(llm_tokenizer *t);
/* Bytes -> ids, exactly as llama2.c's encode() merges (without its BOS and dummy-prefix
 * space): bytes grouped as UTF-8 code points looked up whole, else one id per byte; then the
 * adjacent pair whose joined pieces form the best-scoring piece is merged, leftmost first,
 * until none does. ids needs room for n. Returns the count. */
size_t llm_bpe_encode(const llm_tokenizer *t, const char *s, size_t n, int *ids);
/* What run.c feeds the model for a prompt: [BOS if bos] + encode(" " + s) (the dummy prefix
 * only when n > 0). ids needs room for n + 2. */
size_t llm_bpe_encode_prompt(const llm_tokenizer *t, const char *s, size_t n, int bos, int *ids);
/* Ids -> bytes. Returns the byte count (out may be NULL or short: it writes at most cap bytes
 * and always returns the full length), or -1 on an id out of range. */
long llm_bpe_decode(const llm_tokenizer *t, const int *ids, size_t n, char *out, size_t cap);
/* One token as a streaming decoder shows it (run.c's rule: after BOS a leading space goes). */
const char *llm_bpe_token_bytes(const llm_tokenizer *t, int prev, int id, int *len);
int llm_tokenizer_lookup(const llm_tokenizer *t, const char *piece, int len);  /* id or -1 */

/* ---- tokfile.c: llama2.c's tokenizer.bin ----
 * int32 max_token_length, then per id: float32 score, int32 length, the piece's bytes. */
int llm_tokfile_write(const char *path, const llm_tokenizer *t, char *err, size_t errlen);
/* vocab_size > 0 reads exactly that many entries (as run.c does, from the model's header) and
 * rejects trailing bytes; vocab_size <= 0 reads entries until the end of the file. */
int llm_tokfile_read(const char *path, int vocab_size, llm_tokenizer *t, char *err,
                     size_t errlen);
/* (checkpoint.c) The one loader of the lab's model files: the model mpath into c and w (w
 * NULL: the configuration only, llm_checkpoint_read), then the tokenizer tpath into t unless
 * t is NULL, whose vocabulary must be the model's. 0, or -1 with "PATH: why" in err and
 * nothing allocated. */
int llm_model_read(const char *mpath, const char *tpath, llm_config *c, llm_weights *w,
                   llm_tokenizer *t, char *err, size_t errlen);

/* ---- datakit.c: seed -> corpus -> tokenizer -> token ids ---- */
#define LLM_DATAKIT_TRAIN_BYTES ((size_t)2 << 20)   /* training text when 0 is asked */
typedef struct llm_datakit_opts {
    uint64_t seed;
    size_t train_bytes;       /* text of the training split (0: 2 MiB) */
    size_t val_bytes;         /* text of the validation split (0: train_bytes / 10) */
    int vocab_size;           /* 0: 512 */
} llm_datakit_opts;
typedef struct llm_datakit {
    llm_corpus train, val;
    llm_tokenizer tok;        /* trained on the training split */
    int *train_ids, *val_ids; /* per document: BOS, encode(" " + doc) — run.c's layout */
    size_t n_train_ids, n_val_ids;
    double corpus_s, bpe_s, encode_s;        /* wall time of each stage */
    double val_bytes_per_token;              /* document bytes / non-BOS tokens, validation */
} llm_datakit;
int llm_datakit_build(llm_datakit *k, const llm_datakit_opts *o, char *err, size_t errlen);
void llm_datakit_free(llm_datakit *k);
/* ---- trainmem.c: what a training run needs in memory, before it starts ----
 * Bytes per rank of each part, and the whole job (world ranks and the parent). A floor: the
 * libraries' own buffers come on top. */
typedef struct llm_train_mem {
    double weights, grads, optimizer, zero_buf, activations, windows, data;   /* per rank */
    double per_rank, parent, total;
} llm_train_mem;
/* batch: sequences per step, all ranks; zero: the ZeRO stage (0: none); data_bytes: the
 * training text (0: the data kit's default); resume: the parent holds a checkpoint. */
void llm_train_mem_estimate(const llm_config *c, int batch, int world, int zero,
                            size_t data_bytes, int resume, llm_train_mem *m);
/* 0 when the estimate fits in mlsys_mem_available(); -1 with one line in err otherwise. */
int llm_train_mem_check(const llm_config *c, int batch, int world, int zero,
                        size_t data_bytes, int resume, char *err, size_t errlen);
/* Ids as llama2.c's pretokenized shards: little-endian uint16 (needs vocab <= 65536). */
int llm_ids_write_u16(const char *path, const int *ids, size_t n, char *err, size_t errlen);
/* Write path atomically: temporary file beside it (path.tmp.PID), fsync, rename (used by
 * every writer). What stands at path must be nothing or a regular file (a link to one: the
 * file it names is replaced, the link stays); a directory, a device or a FIFO is refused
 * with "PATH: not written: it is a FIFO ..." and left alone. 0 or -1 with err. */
int llm_write_atomic(const char *path, const void *const *parts, const size_t *sizes,
                     int nparts, char *err, size_t errlen);

/* ==== inference: KV cache, forward, sampler, batched generation ====
 * (kvcache.c, infer.c, sampler.c; the engine that generates with them: engine.h). Shape
 * legend: R rows of one forward call (each row is one token of some sequence at some
 * position), D = dim, KVD = kv_dim, H = hidden_dim, V = vocab, S = seq_len, L = layers, NH
 * query heads. The model is llama2.c's run.c's
 * (RMSNorm eps 1e-5, RoPE on adjacent pairs, grouped-query attention, SwiGLU, classifier),
 * computed by core/nn's kernels, the training forward's: with a batch-invariant GEMM
 * (NN_GEMM_INVARIANT) a row's logits are the same bits in any batch, prefill or decode. */
#include "../mlsys.h"

/* ---- kvcache.c: where the keys and values of every (sequence, position) live ----
 * Two levels, as SGLang and vLLM split it: a POOL of physical token slots, K and V stored
 * [L, n_slots, KVD] (slot s of layer l starts at k + (l·n_slots + s)·KVD), and a MAP from
 * (seq, pos) to a slot, behind ops. The forward only ever asks the map "which slot holds
 * (seq, pos)" and then reads/writes the pool, so a paged cache (chapter 9: block tables,
 * shared prefixes with reference counts) is a second set of ops over the same pool layout.
 * Contract of the ops:
 *   reserve(seq, n): make positions 0..n-1 of seq mapped (allocating what is missing);
 *                    0, or -1 when the pool or the sequence is full (nothing changes then)
 *   slot(seq, pos):  the slot of a reserved position, or -1
 *   release(seq):    the sequence is done; its slots may be reused (positions unmapped)
 *   destroy():       free the implementation's private state (the pool is freed by llm_kv_free)
 * Rolling back (speculative decoding) needs no op: writing position p again overwrites it. */
typedef struct llm_kv llm_kv;
typedef struct llm_kv_ops {
    const char *name;
    int (*reserve)(llm_kv *kv, int seq, int n);
    int (*slot)(const llm_kv *kv, int seq, int pos);
    void (*release)(llm_kv *kv, int seq);
    void (*destroy)(llm_kv *kv);
} llm_kv_ops;
struct llm_kv {
    const llm_kv_ops *ops;
    int n_layers, kv_dim;
    int n_seqs;               /* sequence ids are 0..n_seqs-1 */
    int n_slots;              /* physical token slots in the pool */
    float *k, *v;             /* [L, n_slots, KVD] each, one allocation (k first) */
    size_t bytes;             /* of that allocation */
    void *impl;               /* the map's private state */
};
/* The contiguous cache: sequence i owns slots i·max_len .. i·max_len + max_len-1 (run.c's
 * key_cache, one row per sequence). max_len <= 0 means c->seq_len. 0 or -1 with err. */
int llm_kv_init_contiguous(llm_kv *kv, const llm_config *c, int n_seqs, int max_len,
                           char *err, size_t errlen);
void llm_kv_free(llm_kv *kv);
static inline float *llm_kv_k(const llm_kv *kv, int layer, int slot)
{
    return kv->k + ((size_t)layer * kv->n_slots + (size_t)slot) * (size_t)kv->kv_dim;
}
static inline float *llm_kv_v(const llm_kv *kv, int layer, int slot)
{
    return kv->v + ((size_t)layer * kv->n_slots + (size_t)slot) * (size_t)kv->kv_dim;
}

/* ---- infer.c: the forward for inference ---- */
/* The runner: weights (borrowed, not copied) and scratch for up to max_rows rows, all carved
 * from one allocation at init, so a forward allocates nothing. */
typedef struct llm_fwd {
    llm_config c;
    const llm_weights *w;
    int max_rows;             /* R per internal chunk; longer calls are cut into chunks */
    float *rope_cos, *rope_sin;   /* [S, HS/2] run.c's angles pos·10000^(-2i/HS) */
    float *x;                 /* [R, D] residual stream */
    float *xb, *xb2;          /* [R, D] normed input; attention output / gathered rows */
    float *q;                 /* [R, D] queries after RoPE */
    float *k, *v;             /* [R, KVD] this call's new keys (after RoPE) and values */
    float *hb, *hb2;          /* [R, H] gate W1·x then silu(gate)⊙up, and up W3·x */
    float *att;               /* [R, NH, S] attention scores, then probabilities */
    int *slots;               /* [R, S] each row's cache slots for positions 0..pos */
    float *mem;
    size_t bytes;
    /* Tensor parallelism (llm_fwd_init_tp): this rank's share of every layer, on tp */
    mlsys_comm *tp;           /* NULL: the whole model here */
    int tp_size, tp_rank;
    int nh, nkv, hid;         /* heads, key/value heads, MLP hidden units held here */
    float *shard;             /* per layer: Wq, Wk, Wv rows; Wo columns; W1, W3 rows; W2
                                 columns, copied contiguous (NULL without tp) */
    size_t shard_layer;       /* floats of one layer's share */
    uint64_t tp_allreduces;   /* all-reduces run, and the time spent in them (ns): the */
    uint64_t tp_allreduce_ns; /* price of the split, as ch06's tp-mlp measures it */
} llm_fwd;
/* The stated limit of one engine's scratch; init also refuses what the machine cannot hold
 * (mlsys_mem_available), before allocating. */
#define LLM_FWD_MAX_BYTES (16ull << 30)
int llm_fwd_init(llm_fwd *e, const llm_config *c, const llm_weights *w, int max_rows,
                    char *err, size_t errlen);
/* Bytes llm_fwd_init allocates for max_rows rows (saturates at UINT64_MAX). */
uint64_t llm_fwd_bytes(const llm_config *c, int max_rows);
/* The most rows, want or fewer (halving), whose scratch fits; 0 when not even one does. */
int llm_fwd_rows_that_fit(const llm_config *c, int want);
void llm_fwd_fini(llm_fwd *e);
/* The forward scratch of one rank of a tensor-parallel group tp of T ranks (Megatron's
 * split, as ch06's tp-attention and tp-mlp teach): rank r computes heads
 * [r·NH/T, (r+1)·NH/T) with their key/value heads (Wq, Wk, Wv by rows: column-parallel; Wo
 * by columns: row-parallel) and MLP hidden units [r·H/T, (r+1)·H/T) (W1, W3 by rows; W2 by
 * columns); each half of a layer ends in one all-reduce (SUM) of its [rows, D] output, so
 * every rank holds the whole residual stream and computes the same logits. Its share of the
 * weights is copied out of w (w is still read for the embeddings, norms and classifier); its
 * KV cache holds only its key/value heads: kv_dim / T (llm_tp_kv_config). T must divide
 * n_heads, n_kv_heads and hidden_dim, else -1 with one line in err. tp NULL or of one rank:
 * llm_fwd_init. Every rank of tp calls llm_forward with the same rows (collective). */
int llm_fwd_init_tp(llm_fwd *e, const llm_config *c, const llm_weights *w, int max_rows,
                    mlsys_comm *tp, char *err, size_t errlen);
/* The configuration a tensor-parallel rank's KV cache is made for (llm_kv_init_*): c with
 * kv_dim / T; 0, or -1 when T does not divide the key/value heads. */
int llm_tp_kv_config(const llm_config *c, int tp_size, llm_config *out);
/* One forward over n rows: row i is token tok[i] of sequence seq[i] at position pos[i]. The
 * caller reserved positions 0..pos[i] of each sequence in kv, and every position a row
 * attends to (0..pos[i]) was written earlier or is a row of this call (rows of one sequence
 * go in increasing pos). Every weight matrix is applied as one GEMM over the rows: a decode
 * step of B sequences (B rows), a prefill (the prompt's rows), or both mixed. want[i] != 0
 * asks for row i's logits (want NULL: every row); they are packed in row order into
 * logits [count of wanted rows, V]. Returns 0, or -1 on a bad row (message in err). */
int llm_forward(llm_fwd *e, llm_kv *kv, int n, const int *seq, const int *pos,
                const int *tok, const unsigned char *want, float *logits, char *err,
                size_t errlen);
/* The same model with no cache kept: tokens [T] at positions 0..T-1 in one fresh prefill
 * (a cache of this call only), every key and value recomputed; logits [T, V] for every
 * position (last_only: [V] for the last). T <= S. The reference the cached path is tested
 * against, and the validation loss. Allocates. 0 / -1. */
int llm_forward_nocache(const llm_config *c, const llm_weights *w, const int *tokens, int T,
                        int last_only, float *logits);

/* ---- sampler.c: the next token from one row of logits ---- */
/* temperature 0: greedy (argmax, lowest id on ties). Otherwise softmax(logits / temperature),
 * then keep the top_k most likely (top_k <= 0 or >= V: all), then the smallest most-likely
 * set whose probability reaches top_p (top_p >= 1: all), renormalise and draw with the
 * sampler's own mlsys_rng stream. Same seed, same logits => same tokens. */
typedef struct llm_sampler {
    int vocab;
    float temperature, top_p;
    int top_k;
    mlsys_rng rng;
    float *prob;              /* [V] scratch */
    int *idx;                 /* [V] scratch: candidates, most likely first */
    float *cand;              /* [V] scratch: the candidates' probabilities, in that order */
} llm_sampler;
/* 0, or -1 when a parameter is out of range (temperature < 0, top_p not in (0,1]). */
int llm_sampler_init(llm_sampler *s, int vocab, float temperature, int top_k, float top_p,
                     uint64_t seed);
void llm_sampler_fini(llm_sampler *s);
int llm_sample(llm_sampler *s, const float *logits);
int llm_argmax(const float *x, int n);
/* The distribution llm_sample draws from, into prob [V] (zeros outside the kept set);
 * greedy gives a one-hot. For tests and for speculative decoding's acceptance rule. */
void llm_sampler_probs(llm_sampler *s, const float *logits, float *prob);

/* A token as soon as it is chosen, of sequence seq after prev (generation callbacks: the
 * engine's llm_generate, speculative and JSON-constrained decoding). */
typedef void (*llm_token_fn)(void *u, int seq, int prev, int tok);

/* ---- speculative.c: a small draft model proposes, the target verifies ----
 * (Speculative decoding is a mode of the generation engine: engine.h, opts.spec_k.) Each
 * step the draft decodes k tokens one by one with its own KV cache (x_i drawn from its
 * distribution q_i); the target scores them in the step's one forward over k + 1 rows (the
 * last committed token and the k drafts) and gets p_0..p_k. Position by position a rule
 * keeps x_i or, at the first refusal, puts a token of its own in its place and drops the
 * rest; when all k are kept, a bonus token is drawn from p_k. So a round yields 1..k+1 tokens
 * for one target forward. With the standard rule (accept with min(1, p/q), else draw from
 * norm(max(0, p - q))) the tokens follow the target's own distribution exactly; at
 * temperature 0 p and q are one-hot and the output is the target's greedy decoding, token
 * for token, as long as the target computes a row the same way alone and among k + 1 rows
 * (a batch-invariant GEMM: see the chapter 11 text; OpenBLAS is not). */
#define LLM_SPEC_MAX_K 16
/* The rule at one drafted position (the seam a learner's exercise replaces): p [V] the
 * target's distribution, q [V] the draft's, x the drafted token (drawn from q). Return 1 to
 * keep x; 0 to refuse it, with *y the token that takes its place. rng is the sequence's own
 * stream (draws from it are reproducible by seed). */
typedef int (*llm_spec_rule_fn)(const float *p, const float *q, int V, int x, mlsys_rng *rng,
                                int *y);
/* The standard rule: u < p(x)/q(x) keeps x (so p >= q always keeps it); else
 * y ~ norm(max(0, p - q)) (p itself when that is all zero, which only rounding can cause). */
int llm_spec_rule_standard(const float *p, const float *q, int V, int x, mlsys_rng *rng,
                           int *y);
/* What speculation did, summed over rounds (an engine's, or one request's). */
typedef struct llm_spec_stats {
    long rounds;              /* verifies: one target forward's rows for one sequence each */
    long draft_forwards;      /* draft forwards (each covers every sequence drafting) */
    long drafted, accepted;   /* draft tokens proposed and kept */
    long bonus;               /* rounds where all were kept (a bonus token from p_k) */
    long tokens;              /* tokens committed by rounds */
    long pos_tried[LLM_SPEC_MAX_K], pos_kept[LLM_SPEC_MAX_K];   /* per draft position i: the
                                 rounds that reached it, and those that kept it */
    long kept_hist[LLM_SPEC_MAX_K + 1];   /* rounds by number of drafts kept */
    double overlap_sum;       /* over the positions evaluated, sum of Σ_x min(p(x), q(x)): the
                                 probability the standard rule keeps a draft there, so
                                 overlap_sum / Σ pos_tried is the acceptance to expect */
    double draft_s;           /* wall time of the draft forwards */
} llm_spec_stats;
/* The expected tokens per target forward when each draft is kept with probability a,
 * independently: 1 + a + ... + a^k = (1 - a^(k+1)) / (1 - a) (k + 1 at a = 1). */
double llm_spec_expected_tokens(double a, int k);

/* ---- json_mask.c: decoding that can only write JSON ----
 * A pushdown automaton reads the output byte by byte: a lexical mode (inside a string, a
 * number, a literal, between tokens...) and a stack of the containers still open. Before
 * every token the mask asks, for each token of the vocabulary, whether its bytes can follow
 * from the current state; those that cannot get logit -inf, so the sampler never draws them.
 * The state is carried from token to token (never the whole prefix parsed again), and what
 * can be known per token is known at init: its bytes, and whether it is plain string text
 * (then inside a string it is always allowed and changes nothing). Masks are cached per state.
 * The language: one object or array at the top (of the schema, when one is given), any JSON
 * inside it, with these restrictions that keep every output parseable and finite: strings
 * hold printable ASCII and the escapes \" \\ \/ \b \f \n \r \t (no \u), no two whitespace
 * bytes in a row, at most LLM_JSON_MAX_DEPTH open containers. A budget (tokens left) makes
 * the mask refuse any token after which the text could no longer be closed in time, so an
 * output is complete JSON whatever the model prefers. */
#define LLM_JSON_MAX_DEPTH 16
#define LLM_JSON_MAX_KEYS 16
#define LLM_JSON_KEY_MAX 32
typedef enum {
    LLM_JT_ANY, LLM_JT_STRING, LLM_JT_INTEGER, LLM_JT_NUMBER, LLM_JT_BOOLEAN, LLM_JT_NULL,
    LLM_JT_ARRAY, LLM_JT_OBJECT, LLM_JT_CONTAINER, LLM_JT_COUNT
} llm_json_type;
/* A small schema: an object with exactly these keys (any order, each once) and value types. */
typedef struct llm_json_schema {
    int n_keys;
    char key[LLM_JSON_MAX_KEYS][LLM_JSON_KEY_MAX];
    llm_json_type type[LLM_JSON_MAX_KEYS];
} llm_json_schema;
/* "name:string,age:integer,active:boolean" (types: string integer number boolean null array
 * object any; keys of letters, digits, '_' and '-'). 0, or -1 with err. */
int llm_json_schema_parse(llm_json_schema *s, const char *spec, char *err, size_t errlen);
const char *llm_json_type_name(llm_json_type t);

/* The automaton's whole state: a few bytes, copied freely (the mask copies it per token). */
typedef struct llm_json_state {
    uint8_t mode;             /* lexical mode (llm_json_mode_name) */
    uint8_t depth;            /* containers open */
    uint8_t vtype;            /* llm_json_type the pending value must have */
    uint8_t sub;              /* literal: which word; escape: key or value string */
    uint8_t pos;              /* literal: letters typed; schema key: bytes typed */
    uint8_t ws;               /* the last byte was whitespace */
    int8_t cur_key;           /* schema key whose value is pending, -1 */
    uint8_t pad;
    uint16_t key_cand;        /* schema keys the key being typed still matches */
    uint16_t seen;            /* schema keys written (at their closing quote) */
    uint8_t stack[LLM_JSON_MAX_DEPTH];   /* 'o' object, 'a' array, 'S' the schema object */
} llm_json_state;

#define LLM_JSON_CACHE 64
typedef struct llm_json_grammar {
    int V;
    const unsigned char **tok;    /* [V] each token's bytes (borrowed) */
    int *tok_len;                 /* [V] 0 for specials (never allowed) */
    unsigned char *tok_plain;     /* [V] 1: printable ASCII without '"' and '\' */
    int eos;                      /* allowed once the value is complete; -1 none */
    int has_schema;
    llm_json_schema schema;
    int key_len[LLM_JSON_MAX_KEYS], key_cost[LLM_JSON_MAX_KEYS];
    /* mask cache, direct-mapped by a hash of the state: per token the closing distance
     * after it (LLM_JSON_NEVER when the token cannot follow) */
    llm_json_state cache_key[LLM_JSON_CACHE];
    unsigned char cache_used[LLM_JSON_CACHE];
    uint16_t *cache_dist;         /* [LLM_JSON_CACHE, V] */
    long hits, misses;
} llm_json_grammar;
#define LLM_JSON_NEVER 0xffff

/* Over any vocabulary: tokens t = 0..V-1 are bytes[t][0..lens[t]) (lens 0: never allowed),
 * eos the id that may end the text (-1: none). schema NULL: any object or array. The byte
 * arrays are borrowed and must outlive g. */
int llm_json_grammar_init(llm_json_grammar *g, int V, const char *const *bytes,
                          const int *lens, int eos, const llm_json_schema *schema, char *err,
                          size_t errlen);
/* The same over a tokenizer's vocabulary (its decoded bytes; the specials are never allowed,
 * EOS ends the text). */
int llm_json_grammar_init_tok(llm_json_grammar *g, const llm_tokenizer *t,
                              const llm_json_schema *schema, char *err, size_t errlen);
void llm_json_grammar_fini(llm_json_grammar *g);
void llm_json_start(const llm_json_grammar *g, llm_json_state *s);
/* Feed bytes: 0 and s advanced, or -1 and s unchanged when they cannot continue valid JSON. */
int llm_json_feed(const llm_json_grammar *g, llm_json_state *s, const char *b, int n);
int llm_json_feed_token(const llm_json_grammar *g, llm_json_state *s, int tok);
int llm_json_done(const llm_json_state *s);          /* the top value is complete */
/* The fewest bytes that complete the text from s (0 when done): the budget's measure. */
int llm_json_min_close(const llm_json_grammar *g, const llm_json_state *s);
const char *llm_json_mode_name(const llm_json_state *s);
/* The mask step (the seam): allowed[t] = 1 when token t may come next from s and, when
 * budget > 0 (tokens left, this one included), the text can still be completed within
 * budget. Returns the number allowed (0 only when budget is below llm_json_min_close). */
typedef int (*llm_json_mask_fn)(llm_json_grammar *g, const llm_json_state *s, int budget,
                                unsigned char *allowed);
int llm_json_mask(llm_json_grammar *g, const llm_json_state *s, int budget,
                  unsigned char *allowed);
/* The same with no cache and no per-token shortcut: every token simulated from s (the
 * reference the fast mask is tested against, and the cost it saves). */
int llm_json_mask_plain(llm_json_grammar *g, const llm_json_state *s, int budget,
                        unsigned char *allowed);

#endif
