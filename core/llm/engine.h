/* engine.h - the generation engine over the lab's model: the one loop that turns prompts
 * into tokens, whoever asks (`generate`, the HTTP server, the chapters, RLHF rollouts). In
 * the five parts nano-vllm has, one file each: the paged KV cache (paged.c: blocks, block
 * tables, reference counts, the prefix cache) with its replaceable block allocator
 * (block_alloc.c), a sequence (seq.c: one request's tokens, sampler, stop strings and
 * clock), the scheduler (sched.c: waiting and running queues, the replaceable admission
 * rule, chunked prefill, preemption), the model runner (runner.c: one forward over the
 * step's rows) and the engine loop (engine.c: the API below); what the engine measures and
 * tells (metrics, histograms, phase timing, events) hangs off the loop in engine_stats.c,
 * and batch.c generates a batch on it (submit, step until done). No curses, no HTTP: the
 * chapters, the commands and core/serve build on this header. */
#ifndef MLSYS_LLM_ENGINE_H
#define MLSYS_LLM_ENGINE_H

#include "llm.h"

/* ==== paged.c: the paged KV cache ====
 * The pool of llm_kv (token slots) cut into blocks of block_size consecutive slots: block b
 * holds slots b·bs .. b·bs+bs-1 of every layer. Each sequence has a block table (logical
 * block i -> physical block), so slot(seq, pos) = table[pos / bs]·bs + pos % bs: attention
 * reads keys and values through the table (the same llm_kv_ops the contiguous cache has).
 * A block has a reference count (the tables that hold it). A FULL block whose keys were
 * computed is registered in the prefix cache under a hash chain: hash(parent block's hash,
 * its bs tokens), so equal hashes mean equal prefixes up to that block, and a hit is
 * confirmed by comparing the tokens (a hash collision is a miss, never wrong keys). A block
 * nobody references goes back to the allocator: uncached ("free"), or still cached and
 * reusable until the allocator evicts it (least recently released first).
 * Positions are written once: reserve() makes new positions writable, copying a partial
 * last block that another table shares first (copy on write); full blocks never change. */

/* The block allocator: which unreferenced block to hand out next. A learner's version
 * replaces this table (chapter 9's LRU exercise). The pool holds every block whose reference
 * count is 0; the manager keeps the counts, the hashes and the tables. */
typedef struct llm_block_alloc_ops {
    const char *name;
    void *(*create)(int n_blocks);          /* all blocks 0..n_blocks-1 start in the pool */
    void (*destroy)(void *st);
    /* block's count fell to 0: it joins the pool; cached = 1 when it keeps a prefix-cache
     * entry (then it should be handed out as late as possible, oldest first) */
    void (*put)(void *st, int block, int cached);
    /* a cached block in the pool got a reference again (a prefix hit): it leaves the pool */
    void (*take)(void *st, int block);
    /* remove and return the block to hand out next, -1 when the pool is empty. The default:
     * an uncached block if any, else the cached block put longest ago (LRU eviction). */
    int (*get)(void *st);
    int (*count)(const void *st);           /* blocks in the pool */
} llm_block_alloc_ops;
extern const llm_block_alloc_ops llm_block_alloc_lru;   /* block_alloc.c */

typedef struct llm_paged_opts {
    int block_size;           /* tokens per block (0: 16) */
    int n_blocks;             /* blocks in the pool (0: n_seqs · ceil(max_len / block_size)) */
    int n_seqs;               /* block tables: sequence ids 0..n_seqs-1 */
    int max_len;              /* positions per sequence (0: seq_len) */
    int no_prefix_cache;      /* 1: never register or match blocks (every prefill computed) */
    const llm_block_alloc_ops *alloc;   /* NULL: llm_block_alloc_lru */
    mlsys_comm *comm;         /* memory events (POOL, OWNER, ALLOC, SHARE, FREE, EVICT, COW);
                                 NULL: none. Emitted by the thread that calls the ops. */
    int pool;                 /* the pool id in those events */
    int named_role;           /* 1: the POOL record's owner is role, the role that holds the
                                 pool (the flow view draws it in that role's box); 0: none */
    int role;
    int hash_bits;            /* tests only: keep this many bits of each chain hash (0: all
                                 64), so that different blocks collide on purpose */
} llm_paged_opts;
/* An llm_kv whose ops are the paged map. 0, or -1 with err (bad sizes). */
int llm_kv_init_paged(llm_kv *kv, const llm_config *c, const llm_paged_opts *o, char *err,
                      size_t errlen);
int llm_kv_is_paged(const llm_kv *kv);
/* reserve(seq, n) of the ops (see llm_kv_ops) allocates the blocks that cover positions
 * 0..n-1 and copies a shared partial last block before new positions land in it; it fails
 * (changing nothing) when the pool cannot give that many blocks. release(seq) lets go of
 * every block of the table, last block first (so a prefix's first blocks are evicted last). */

/* Prefix-cache hits for tokens[0..n): the longest run of leading full blocks, within the
 * first n-1 tokens (the last prompt token is always computed: its logits are needed), whose
 * hash chain and tokens are cached. Returns the tokens covered (a multiple of block_size);
 * *from_pool (may be NULL) = how many of those blocks nobody references now (taking them
 * uses up the pool like an allocation). Changes nothing. */
int llm_paged_match(const llm_kv *kv, const int *tokens, int n, int *from_pool);
/* Give the empty table of seq the blocks llm_paged_match finds (reference counts up, SHARE
 * events) and map their positions. Returns the tokens covered, -1 when seq is not empty. */
int llm_paged_attach(llm_kv *kv, int seq, const int *tokens, int n);
/* Positions 0..n-1 of seq hold the keys and values of tokens[0..n), or will once the forward
 * about to run has written them: register the full blocks among them that are not registered
 * yet (a block whose contents are cached already under another block stays unregistered).
 * The engine registers at planning time, so a request admitted later in the same step shares
 * blocks still being computed: its rows come after the writer's in that forward, and
 * llm_forward stores every row's keys and values before any row attends. */
void llm_paged_commit(llm_kv *kv, int seq, const int *tokens, int n);
/* child (empty) shares the blocks of parent that hold positions 0..n-1 (n <= parent's
 * positions; parallel sampling: the n samples of one prompt): reference counts up, SHARE
 * events. A partial last block is copied by whichever table writes into it first
 * (reserve's copy on write). 0, or -1 (bad ids, child not empty, n out of range). */
int llm_paged_fork(llm_kv *kv, int parent, int child, int n);
/* Roll seq back to its first n positions (speculative decoding's refused drafts): the
 * blocks wholly past them go back (FREE events, last first), the partial last one stays (its
 * later positions are written again). 0, or -1 (bad seq or n). */
int llm_paged_truncate(llm_kv *kv, int seq, int n);
/* Name the owner the events of seq's table carry (a request id) and emit OWNER (label). */
void llm_paged_set_owner(llm_kv *kv, int seq, int owner, const char *label);
/* seq's table: *blocks (valid until the next op), *n_blocks; returns the positions mapped. */
int llm_paged_table(const llm_kv *kv, int seq, const int **blocks, int *n_blocks);
int llm_paged_block_size(const llm_kv *kv);
int llm_paged_pool_count(const llm_kv *kv);     /* blocks the allocator can hand out now */
/* One block of the prefix chain: FNV-1a 64 over the parent hash and the tokens. */
uint64_t llm_paged_hash(uint64_t parent, const int *tokens, int n);
#define LLM_PAGED_ROOT_HASH 0x9e3779b97f4a7c15ull    /* the "parent" of a first block */

typedef struct llm_paged_stats {
    int n_blocks, block_size;
    int used;                 /* referenced by at least one table */
    int shared;               /* referenced by two or more */
    int cached;               /* in the pool but still a prefix-cache entry (evictable) */
    int free;                 /* in the pool, nothing cached */
    int registered;           /* prefix-cache entries, referenced or not */
    long tokens;              /* positions mapped over all tables */
    long table_blocks;        /* entries over all tables: blocks held without sharing */
    long allocs, hits, evictions, cows;   /* since init: blocks handed out, prefix hits
                                             (blocks), cached blocks evicted, copies */
    uint64_t bytes_per_block; /* K and V of block_size tokens, all layers */
} llm_paged_stats;
void llm_paged_stats_get(const llm_kv *kv, llm_paged_stats *st);
/* Every invariant: reference counts equal the table entries, a block is in the pool exactly
 * when its count is 0 and the allocator's count agrees, no table holds a block twice, table
 * lengths match positions, the hash table holds exactly the registered blocks. 0, or -1 with
 * the first violation in err. */
int llm_paged_check(const llm_kv *kv, char *err, size_t errlen);

/* ==== seq.c: one request ==== */
typedef enum {
    LLM_FINISH_NONE,          /* still going */
    LLM_FINISH_STOP,          /* drew EOS (or BOS), or produced a stop string */
    LLM_FINISH_LENGTH,        /* max_tokens, or the context (max_model_len) is full */
    LLM_FINISH_CANCEL,        /* llm_engine_cancel, or the engine was freed */
    LLM_FINISH_ERROR          /* the forward failed (a bug: message on stderr) */
} llm_finish;
const char *llm_finish_name(llm_finish f);     /* "stop", "length", "cancelled", "error" */

#define LLM_MAX_STOP 4            /* stop strings per request */
#define LLM_MAX_STOP_LEN 64       /* bytes per stop string */

/* Times on the engine's clock (seconds) and counts of one request. */
typedef struct llm_req_stats {
    double t_arrival;         /* llm_engine_submit */
    double t_first;           /* first token handed to the callback (0 before) */
    double t_finish;          /* final event (0 before) */
    double ttft, tpot, e2e;   /* set at the end: first - arrival; (finish - first) / (n_out
                                 - 1), 0 for one token; finish - arrival */
    int n_prompt, n_out;
    int n_cached;             /* prompt tokens found in the prefix cache at first admission */
    int preemptions;          /* times its blocks were taken back (recomputed later) */
    long json_allowed;        /* JSON mode: tokens the mask allowed, summed over the draws */
    double json_mask_s;       /* JSON mode: time in the mask (CLOCK_MONOTONIC seconds) */
} llm_req_stats;

typedef struct llm_engine_event {
    int id;                   /* the request */
    int index;                /* the choice: 0..n-1 (the request's n samples) */
    int token;                /* the new token, -1 for a final event without one */
    int n_out;                /* tokens this choice generated so far, this one included */
    const char *text;         /* output text now safe to show, valid UTF-8: bytes that could
                                 be the start of a stop string, and an incomplete UTF-8
                                 sequence, are held back until they cannot be (at the end,
                                 what never completed is U+FFFD); NULL without a tokenizer */
    int text_len;
    llm_finish finish;        /* NONE while it goes on; otherwise this is its LAST event */
    const llm_req_stats *st;
} llm_engine_event;
/* Called on the thread that runs llm_engine_step, without the engine's lock (it may call
 * llm_engine_submit and llm_engine_cancel). Every choice of an accepted request gets exactly
 * one event with finish != NONE, and none after it. */
typedef void (*llm_engine_fn)(void *u, const llm_engine_event *ev);
/* JSON mode, at every draw after the mask and before the token is drawn: the automaton's
 * state, the budget (tokens left, this one included), the mask and the logits as the model
 * gave them. */
typedef void (*llm_mask_fn)(void *u, const llm_json_state *s, int budget,
                            const unsigned char *allowed, int n_allowed, const float *logits);

typedef struct llm_request {
    const int *prompt;        /* [n_prompt] token ids (copied), 1 <= n_prompt <= the
                                 engine's max_model_len */
    int n_prompt;
    int max_tokens;           /* >= 1; cut to the room the context leaves (the last token
                                 drawn is never fed back: max_model_len - n_prompt + 1) */
    float temperature;        /* 0: greedy */
    float top_p;              /* (0, 1]; 0 is taken as 1 */
    int top_k;                /* 0: all */
    uint64_t seed;            /* the request's own sampler stream */
    const char *const *stop;  /* [n_stop] stop strings (copied; need the engine's tokenizer) */
    int n_stop;
    int ignore_eos;           /* 1: EOS and BOS do not end it (benchmarks) */
    int n;                    /* choices: samples of this one prompt (0 or 1: one; at most
                                 the engine's max_num_seqs). The prompt is prefilled once;
                                 choice i draws with seed + i from the same last logits, and
                                 the choices share the prompt's blocks (llm_paged_fork) */
    /* JSON mode (response_format json_object): the output is one JSON object or array. Each
     * token is drawn under json_mask.c's mask for the state the text so far left, within
     * the budget of tokens left, so the value always closes in time; its completion ends
     * the request (LLM_FINISH_STOP). It batches with every other request: the mask is
     * applied to this row's logits only. */
    int json;                 /* 1: on */
    llm_json_grammar *grammar;   /* NULL: the engine's (any object or array over its
                                    tokenizer); else a caller's (a schema), which must
                                    outlive the request (used on the stepping thread only) */
    const llm_json_state *json_start;   /* NULL: a fresh value; else the state the prompt's
                                           own text left (a prompt that opens the JSON) */
    llm_json_mask_fn mask;    /* NULL: llm_json_mask */
    llm_mask_fn on_mask;      /* may be NULL */
    int no_speculate;         /* 1: plain decoding even on an engine with a draft model (a
                                 JSON request never speculates) */
    llm_engine_fn on_event;   /* may be NULL */
    void *u;                  /* for on_event and on_mask */
} llm_request;

typedef enum { LLM_SEQ_WAITING, LLM_SEQ_RUNNING, LLM_SEQ_FINISHED } llm_seq_status;

typedef struct llm_seq {
    int id;                   /* unique per sequence: the request's id + index */
    int req_id, index;        /* its request, and which of its choices it is */
    llm_seq_status status;
    llm_finish finish;
    int *tok;                 /* [cap] the prompt, then the generated tokens */
    int n_tok, n_prompt, cap;
    int n_computed;           /* positions 0..n_computed-1 have keys and values cached */
    int n_sched;              /* rows this step: positions n_computed .. n_computed+n_sched-1 */
    int kv_seq;               /* its block table, -1 while it holds none */
    int max_tokens, ignore_eos;
    int admitted;             /* 1 after its first admission */
    llm_sampler sampler;
    int json;                 /* JSON mode (llm_request) */
    llm_json_grammar *grammar;
    llm_json_state js;        /* the automaton after the tokens so far */
    llm_json_mask_fn mask;
    llm_mask_fn on_mask;
    /* speculative decoding (an engine with a draft model) */
    int spec;                 /* 1: it is drafted for */
    int draft[LLM_SPEC_MAX_K];   /* this step's drafts */
    int d_fed;                /* positions 0..d_fed-1 hold keys and values in the draft's cache */
    llm_spec_stats spec_st;   /* its rounds */
    char *stop[LLM_MAX_STOP];
    int n_stop, stop_max;     /* stop_max: the longest stop string */
    char *text;               /* output bytes as the tokens give them (without a tokenizer:
                                 unused) */
    size_t text_len, text_cap, text_sent;
    char *emit;               /* the text last handed out, as valid UTF-8 */
    size_t emit_cap;
    /* choices 1..n-1 of a request wait here, on choice 0, until its prompt is prefilled:
     * then they fork its blocks and draw their first tokens from its logits */
    struct llm_seq *forks;    /* the first of them (linked by fnext) */
    struct llm_seq *fnext;
    int n_forks;
    llm_engine_fn on_event;
    void *u;
    llm_req_stats st;
    struct llm_seq *prev, *next;   /* its queue */
} llm_seq;
/* Choice index of request r (validated against the model: ids in the vocabulary, lengths
 * within max_len positions, sampler parameters, stop strings need t); it draws with seed +
 * index. NULL with err. */
llm_seq *llm_seq_create(int id, int index, const llm_request *r, const llm_config *c,
                        int max_len, const llm_tokenizer *t, char *err, size_t errlen);
void llm_seq_free(llm_seq *s);
/* Append a generated token; its bytes go to the text (t may be NULL). Returns why the
 * sequence ends now, or LLM_FINISH_NONE. A stop string cuts the text before it. */
llm_finish llm_seq_append(llm_seq *s, int tok, const llm_tokenizer *t, int max_len);
/* The text not handed out yet that is safe to show: all of it when final, else all but the
 * longest tail that begins a stop string and an incomplete UTF-8 sequence at its end. It is
 * handed out as valid UTF-8: bytes that can never be part of a character become U+FFFD (one
 * per maximal invalid subpart, as vLLM and Python's decoder replace them), and so does an
 * incomplete sequence at the end when final. Marks it handed out; *text (valid until the next
 * call) gets it; returns its length. */
int llm_seq_take_text(llm_seq *s, int final, const char **text);
/* The longest prefix of b[0..n) that is valid UTF-8 ending on a character's end, with *bad =
 * 1 when what stops it can never be valid (0: it is an incomplete sequence that could still
 * complete, or the end). */
size_t llm_utf8_valid_prefix(const char *b, size_t n, int *bad);

/* ==== sched.c: who runs this step ==== */
/* The admission rule: how many tokens of a waiting request's prompt to compute this step
 * (0: it keeps waiting, and so does everyone behind it: first come, first served). A
 * learner's rule replaces it (chapter 8). */
typedef struct llm_admit_query {
    int running;              /* seats taken: sequences in this step's batch so far, and the
                                 choices still to fork from running requests (a request of n
                                 samples is admitted only with n seats free: the engine checks
                                 that before asking) */
    int admitted;             /* of those, admitted in this step */
    int max_num_seqs;
    int budget;               /* tokens left of this step's max_num_batched_tokens */
    int free_blocks;          /* blocks the allocator can hand out now */
    int need_blocks;          /* blocks its whole remaining prompt takes from them (with n
                                 samples, the copies of a shared partial last block too) */
    int prompt_left;          /* tokens it still has to compute (prefix-cache hits excluded) */
    int waiting;              /* requests waiting, it included */
} llm_admit_query;
typedef int (*llm_admit_fn)(const llm_admit_query *q, void *u);
/* Continuous batching: a seat (running < max_num_seqs), room for the whole prompt's blocks
 * (need <= free), then min(prompt_left, budget): a prompt longer than the budget is
 * prefilled in chunks over several steps. */
int llm_admit_continuous(const llm_admit_query *q, void *u);
/* Static batching: admit only when nothing from earlier steps still runs (a batch waits
 * for its longest member; newcomers wait for the batch), then as continuous. */
int llm_admit_static(const llm_admit_query *q, void *u);

typedef struct llm_seq_queue {
    llm_seq *head, *tail;
    int n;
} llm_seq_queue;
void llm_queue_push_back(llm_seq_queue *q, llm_seq *s);
void llm_queue_push_front(llm_seq_queue *q, llm_seq *s);
void llm_queue_remove(llm_seq_queue *q, llm_seq *s);

typedef struct llm_sched_item {
    llm_seq *s;
    int start, n;             /* rows: positions start .. start+n-1 */
    int prefill;              /* 1: prompt (or recomputed) tokens; 0: a decode */
    int spec;                 /* a decode with this many drafts: its last spec rows are the
                                 draft's tokens, verified by the step's forward */
} llm_sched_item;
typedef struct llm_drafter llm_drafter;
typedef struct llm_step_item llm_step_item;
typedef struct llm_sched {
    int max_num_seqs, max_num_batched_tokens;
    llm_admit_fn admit;
    void *admit_u;
    llm_kv *kv;               /* paged */
    llm_seq_queue waiting, running;   /* running in admission order, newest last */
    int *free_kv;             /* [max_num_seqs] block tables not in use */
    int n_free_kv;
    /* this step's plan */
    llm_sched_item *items;    /* [max_num_seqs] */
    int n_items, rows, prefill_rows, decode_rows, n_admitted;
    int *preempted;           /* [max_num_seqs] request ids preempted this step */
    int n_preempted;
    int pending_forks;        /* seats held for choices that fork when their prompt is done */
    llm_drafter *spec;        /* speculative decoding: how many drafts a decode gets, and the
                                 draft's cache to release with a table (NULL: none) */
    int max_len;              /* positions per sequence (the cache's; a round stays within) */
    long preemptions, query_tokens, hit_tokens;   /* totals */
} llm_sched;
int llm_sched_init(llm_sched *sc, llm_kv *kv, int max_num_seqs, int max_num_batched_tokens,
                   llm_admit_fn admit, void *admit_u);
void llm_sched_fini(llm_sched *sc);
/* Plan one step: running sequences first (decodes, then unfinished prefills), each reserving
 * its blocks; when the pool is out, the newest running sequence not yet planned is preempted
 * (its blocks released, back to the front of the queue, recomputed when readmitted); then,
 * unless something was preempted, waiting requests in order while admit() says so (prefix
 * hits attached first). Fills items; returns the rows planned (0: nothing to run). */
int llm_sched_plan(llm_sched *sc);
/* s leaves the running queue and gives its blocks back (finished or cancelled). */
void llm_sched_retire(llm_sched *sc, llm_seq *s);
/* child (one of parent's forks, unlinked from it by the caller) takes a seat and a block
 * table that shares parent's computed positions, and runs from there (after parent in the
 * running queue). 0, or -1 when no table is free (child then waits for one as a request of
 * its own, its prompt computed again). */
int llm_sched_fork(llm_sched *sc, llm_seq *parent, llm_seq *child);

/* ==== runner.c: the forward of one step ==== */
/* A step's rows, prepared from a plan: (block table, position, token) per row, which rows
 * need logits, which items draw a token. A token that is not known yet when the rows are
 * prepared (the overlap scheduler plans step n+1 before step n has drawn its tokens: the
 * sequence holds -1 there) is left -1 and counted in n_future; llm_runner_resolve fills it in
 * once the token is in the sequence (the FutureMap of SGLang, with the sequence's own token
 * array as the slots). */
typedef struct llm_batch {
    llm_sched_item *items;    /* [max_seqs] the plan (a copy) */
    unsigned char *samples;   /* [max_seqs] 1: item i draws a token after the forward */
    int *lrow;                /* [max_seqs] its first row of logits, -1 */
    int n_items, n_admitted;  /* the admitted items are the last n_admitted */
    int rows, prefill_rows, decode_rows, n_future;
    int *rseq, *rpos, *rtok;  /* [max_rows] */
    unsigned char *want;      /* [max_rows] */
} llm_batch;
void llm_batch_init(llm_batch *b, int max_rows, int max_seqs);
void llm_batch_fini(llm_batch *b);
/* Drop item i (its sequence finished or was cancelled before the step ran); the rows must be
 * prepared again. */
void llm_batch_drop(llm_batch *b, int i);

typedef struct llm_runner {
    llm_fwd e;
    llm_kv *kv;
    int max_rows, max_seqs, max_logits;
    float *logits;            /* [max_logits, V] */
    float *masked;            /* [V] a JSON row's logits under its mask */
    unsigned char *allowed;   /* [V] that mask */
} llm_runner;
/* Rows of a step up to max_rows, items up to max_seqs, rows of logits up to max_logits (one
 * per item that draws; a speculative decode wants all its rows); the forward's scratch holds
 * fwd_rows rows (longer steps run in chunks). tp: a tensor-parallel group whose rank 0 this
 * is (NULL: none): the forward is this rank's share (llm_fwd_init_tp), kv holds its share of
 * the key/value heads (llm_tp_kv_config), and every forward goes through
 * llm_tp_lead_forward, the other ranks following (tp_step.h). 0, or -1 with err. */
int llm_runner_init(llm_runner *r, const llm_config *c, const llm_weights *w, llm_kv *kv,
                    int max_rows, int max_seqs, int max_logits, int fwd_rows, mlsys_comm *tp,
                    char *err, size_t errlen);
void llm_runner_fini(llm_runner *r);
/* Input preparation: b gets the items (copied unless they are b->items) and their rows. */
int llm_runner_prepare(const llm_runner *r, llm_batch *b, const llm_sched_item *items,
                       int n_items, int n_admitted, char *err, size_t errlen);
/* Rows whose token was unknown take it from their sequence now; returns those still unknown. */
int llm_runner_resolve(llm_batch *b);
/* The forward over b's rows (one GEMM per weight for the whole step: prefill chunks and
 * decodes together), logits where wanted. Touches no sequence: it may run on another thread
 * while the caller plans the next step. 0, or -1 with err. */
int llm_runner_forward(llm_runner *r, const llm_batch *b, char *err, size_t errlen);
/* Every item that draws a token draws it with its own sampler into next[i]; others get -1. */
void llm_runner_sample(llm_runner *r, const llm_batch *b, int *next);
/* The logits item i drew from (NULL when it draws nothing), valid until the next forward. */
const float *llm_runner_logits(const llm_runner *r, const llm_batch *b, int i);
/* A token for s drawn from logits with its own sampler; in JSON mode under the mask of its
 * automaton's state (on_mask called), the token then fed to the automaton. What
 * llm_runner_sample does per item, and for a choice that forks from another's logits.
 * -2 when JSON mode finds no token that may follow (a bug: the budget should prevent it). */
int llm_runner_draw(llm_runner *r, llm_seq *s, const float *logits);

/* ==== speculative.c: speculative decoding, a mode of the engine ====
 * The draft model runs beside the target with a paged cache of its own, whose table i serves
 * the sequence that holds the target's table i. A decode that speculates plans 1 + k rows
 * (its last committed token and k drafts, k = llm_drafter_k); before the step's forward the
 * draft phase catches the draft's cache up with what the sequence committed and drafts the
 * k tokens of every such sequence, one batched draft forward per draft position; the
 * target's forward then scores all of them together with everybody's other rows; after it,
 * the rule keeps a prefix of each sequence's drafts and adds one token of the target's, and
 * both caches are rolled back to what was committed (llm_paged_truncate). */
struct llm_drafter {
    int k;                    /* drafts per sequence and step, 1..LLM_SPEC_MAX_K */
    int V, max_seqs, max_rows;
    llm_fwd f;                /* the draft model's forward */
    llm_kv kv;                /* its paged cache */
    llm_spec_rule_fn rule;
    float temperature;        /* the draft's sampling temperature (0: each request's own) */
    llm_sampler q_smp;        /* the draft's distribution, the request's filters */
    int *rseq, *rpos, *rtok;  /* [max_rows] one draft forward's rows */
    unsigned char *want;
    int *row_of;              /* [max_seqs] an item's logits row in that forward, -1 */
    float *logits;            /* [max_seqs, V] */
    float *q;                 /* [max_seqs, k, V] each item's draft distributions */
    float *p;                 /* [k + 1, V] a verify's target distributions */
    llm_spec_stats st;        /* every round so far */
};
/* The draft model (its vocabulary and context the target's) with k drafts per sequence, a
 * cache of max_seqs tables of max_len positions in blocks of block_size, rule (NULL: the
 * standard one). 0, or -1 with err. */
int llm_drafter_init(llm_drafter *d, const llm_config *target, const llm_config *dc,
                     const llm_weights *dw, int k, int max_seqs, int max_len, int block_size,
                     llm_spec_rule_fn rule, float temperature, char *err, size_t errlen);
void llm_drafter_fini(llm_drafter *d);
/* The drafts s gets in a decode step with budget rows left (0: it decodes plainly): k, cut
 * so the round commits no token past max_tokens or the context. */
int llm_drafter_k(const llm_drafter *d, const llm_seq *s, int max_len, int budget);
/* The draft phase of batch b: every item with spec > 0 gets its drafts (into its sequence's
 * draft[] and b's rows). 0, or -1 with err. */
int llm_drafter_draft(llm_drafter *d, llm_batch *b, char *err, size_t errlen);
/* The verify of item i (sequence s, its k + 1 rows of target logits from logits): the rule,
 * then the committed tokens into out (the kept drafts, then the target's own); returns their
 * count, 1..k+1. The round's figures go to the drafter's and s's stats, and to it (NULL: not
 * wanted). */
int llm_drafter_verify(llm_drafter *d, llm_seq *s, int i, int k, const float *logits,
                       int *out, struct llm_step_item *it);
/* Roll both caches of s back to what it committed: the target's to n_computed positions,
 * the draft's to at most that. */
void llm_drafter_rollback(llm_drafter *d, llm_kv *target, llm_seq *s);

/* ==== engine.c: the engine (its API) ====
 * Threads: one thread drives llm_engine_step (and gets every callback); llm_engine_submit,
 * llm_engine_cancel, llm_engine_metrics, llm_engine_has_work and llm_engine_wait may be called
 * from any thread at any time. Submitted and cancelled requests take effect at the start of
 * the next step (and cancels also at the end of the current one). */
typedef struct llm_engine llm_engine;

typedef struct llm_engine_opts {
    int max_num_seqs;             /* sequences in a step's batch (0: 16) */
    int max_num_batched_tokens;   /* rows in a step's forward (0: 256; >= max_num_seqs) */
    int block_size;               /* tokens per KV block (0: 16) */
    int max_model_len;            /* positions a sequence may reach, prompt and output (0:
                                     not known, the model's seq_len): sizes the cache and the
                                     runner's scratch, not the model's longest context */
    int n_blocks;                 /* KV blocks (0: max_num_seqs · ceil(max_model_len /
                                     block_size); with max_model_len 0, at most what half the
                                     free memory holds); at least one full context's worth */
    int no_prefix_cache;          /* 1: prompts are always computed in full */
    llm_admit_fn admit;           /* NULL: llm_admit_continuous */
    void *admit_u;
    const llm_block_alloc_ops *alloc;   /* NULL: llm_block_alloc_lru */
    const llm_tokenizer *tok;     /* output text and stop strings; may be NULL (no text) */
    mlsys_comm *comm;             /* events, emitted by the stepping thread; NULL: none */
    double (*clock)(void *u);     /* seconds, thread-safe; NULL: mlsys_now_s */
    void *clock_u;
    /* 1: the overlap scheduler (SGLang's overlap loop, vLLM's async scheduling): while the
     * stepping thread runs the forward of step n, the engine's worker thread schedules step
     * n+1 and prepares its rows, taking the tokens step n is drawing as futures (resolved
     * before n+1 starts). It plans on that thread only when planning cannot preempt (the
     * pool holds every running sequence's next blocks) and no sequence of step n must stop
     * for its length; a sequence that stops on a token it drew leaves the plan before it
     * runs. Outputs are token for token those without overlap. */
    int overlap;
    /* Called at the end of every planning that found rows, inside the schedule phase, on the
     * thread that plans (the stepping thread, or with overlap the worker) (NULL: none): a
     * heavier scheduler's cost stands here (chapter 10 adds busy work to show what a Python
     * scheduler's milliseconds do to a step, with and without overlap). */
    void (*plan_hook)(void *u);
    void *plan_hook_u;
    /* Speculative decoding (speculative.c): a draft model with the target's vocabulary and
     * context; every decode of a request that does not opt out drafts spec_k tokens a step,
     * verified in the step's forward. The overlap scheduler is off then (a step's tokens are
     * not known in number before it runs). */
    int spec_k;                   /* 0: off; 1..LLM_SPEC_MAX_K */
    const llm_config *draft_c;
    const llm_weights *draft_w;
    llm_spec_rule_fn spec_rule;   /* NULL: llm_spec_rule_standard */
    float spec_draft_temperature; /* the draft's temperature; 0: each request's own */
    /* The paged cache's memory records alone, for a caller that names its own roles and
     * passes its own gates (the RLHF loop's generator): with mem_comm, POOL, OWNER, ALLOC,
     * SHARE, FREE, EVICT and COW go to mem_comm under pool id mem_pool, the POOL record owned
     * by role mem_role (-1: no role); no ROLE records, request or STEP flows, spans or gates.
     * Ignored when comm is set (the records then go there, pool 0, beside the rest). */
    mlsys_comm *mem_comm;
    int mem_pool;
    int mem_role;
    /* Tensor parallelism: a group whose rank 0 runs this engine (the leader). The runner's
     * forward is the leader's share of every layer (llm_fwd_init_tp) and sends each step's
     * rows to the other ranks first (llm_tp_lead_forward); the cache holds this rank's
     * key/value heads. The other ranks run no engine: each follows (tp_step.h) with
     * llm_fwd_init_tp over the same group and llm_tp_follower_kv(c, T, max_num_seqs,
     * n_blocks · block_size, max_model_len), n_blocks and max_model_len as this engine has
     * them (give both: free memory differs between machines), logits room for
     * max_num_seqs · (spec_k + 1) rows; llm_engine_free stops them. T must divide the heads,
     * the key/value heads and the MLP's hidden units. NULL: the whole model here. */
    mlsys_comm *tp;
} llm_engine_opts;
/* engine_mem.c: o's defaults filled in (n_blocks sized as above) and the bytes the engine
 * would allocate (the cache, the runner's scratch and logits, the draft's share, the block
 * tables) compared with the memory free now. 0, or -1 with one line in err: nothing is
 * allocated, so a lab can call it before its ranks start. llm_engine_create runs it. */
int llm_engine_plan(const llm_config *c, llm_engine_opts *o, char *err, size_t errlen);
/* Bytes the engine allocates with options o, n_blocks 0 sized by max_model_len as if it were
 * known (the free memory aside). Saturates at UINT64_MAX; 0 for bad options. */
uint64_t llm_engine_bytes(const llm_config *c, const llm_engine_opts *o);
/* Tensor parallelism: what a follower must be made with to run the forwards of an engine
 * created with o (opts.tp): its context, scratch rows (the chunks of a long step, so that
 * every rank runs the same all-reduces), cache and rows of logits. */
typedef struct llm_tp_shape {
    int max_num_seqs;         /* block tables */
    int n_slots;              /* n_blocks · block_size */
    int max_model_len;
    int fwd_rows;             /* the runner's llm_fwd rows */
    int max_logits;           /* rows of logits a step may want */
} llm_tp_shape;
/* engine_mem.c: plans o (llm_engine_plan) and fills in its n_blocks and max_model_len, so
 * that the engine created with o afterwards is sized as sh says whatever the free memory
 * does meanwhile. 0, or -1 with one line in err. */
int llm_engine_tp_shape(const llm_config *c, llm_engine_opts *o, llm_tp_shape *sh, char *err,
                        size_t errlen);
/* engine_stats.c: the all-reduces this engine's forwards ran on its tensor-parallel group and
 * the time spent in them (zeros without opts.tp). Stepping thread, or after it stopped. */
void llm_engine_tp_stats(const llm_engine *s, uint64_t *allreduces, uint64_t *ns);

/* Events with a comm (typed records of core/mlsys.h; the label of a compute span is only a
 * caption):
 *   memory  pool 0, the paged cache (paged.c): POOL once, OWNER per admission (owner =
 *           sequence id, label "req N"), ALLOC, SHARE (a prefix hit, or a choice forking
 *           its request's prompt), FREE (cached), EVICT, COW (a forked choice's first write
 *           into a shared partial block); the draft model's cache emits nothing. With
 *           mem_comm instead of comm, these alone, in pool mem_pool
 *   flow    MLSYS_FLOW_REQUESTS between roles 0 clients, 1 queue, 2 scheduler, 3 model
 *           (named by ROLE records at create); seq = the sequence id (a request's, or
 *           choice i's: the request's id + i), version = the step:
 *             clients -> queue       submitted       count = prompt tokens
 *             queue -> scheduler     admitted        count = tokens found in the prefix cache
 *             scheduler -> model     in this step    count = rows, phase 1 prefill / 0 decode
 *             scheduler -> queue     preempted       count = 0
 *             model -> clients       finished        count = tokens generated
 *   compute one span per phase of a step, emitted at the step's end with the times it
 *           measured (mlsys_compute_span): on row 0 the forward, label "forward P3:24 V4:5
 *           D0,1,2" (request 3 prefills 24 rows, 4 verifies a speculative round of 5, 0..2
 *           decode); on row 1 the CPU's other work: "schedule", "prepare", "draft",
 *           "launch", "token sample", "detokenize" (overlapped, the next step's "schedule"
 *           and "prepare" lie beside the forward)
 *   flow    MLSYS_FLOW_STEP after each step that ran a forward: rows, tokens generated,
 *           seconds, waiting / running / finished after it (core/mlsys.h)
 *   gates   llm_engine_step calls mlsys_step first, labelled "engine step N" (N: the step it
 *           will run) or, with nothing to do, "engine idle: no requests"; so a gated job
 *           (--gated) runs one engine iteration per grant. llm_engine_wait with nothing to do
 *           also stops at an "engine idle" gate when gated (and returns at once after it:
 *           the viewer decides how long the engine waits); not gated, an idle gate is said
 *           once per idle period, so a trace shows when the engine had nothing to do. */
/* The engine borrows c and w (they must outlive it). NULL with err on bad options, or when
 * what it would allocate is more than this machine has free (llm_engine_plan). */
llm_engine *llm_engine_create(const llm_config *c, const llm_weights *w,
                            const llm_engine_opts *o, char *err, size_t errlen);
/* Every choice still queued or running gets its final event (LLM_FINISH_CANCEL) first. */
void llm_engine_free(llm_engine *s);
/* Queue a request. Returns its id (>= 0, increasing in submission order; its n choices are
 * sequences id .. id+n-1) or -1 with err (a bad request: nothing is queued and no event will
 * come). */
int llm_engine_submit(llm_engine *s, const llm_request *r, char *err, size_t errlen);
/* Cancel request id: its choices' blocks go back to the pool and each gets its final event
 * (LLM_FINISH_CANCEL) at the next step boundary, unless it has finished by then.
 * 0, or -1 for an id never issued. */
int llm_engine_cancel(llm_engine *s, int id);

/* What one step did (valid until the next step). */
struct llm_step_item {
    int id;                   /* sequence: the request's id (+ i for its choice i) */
    int start, n;             /* positions start .. start+n-1 computed */
    int prefill;              /* 1 prompt or recomputed tokens, 0 a decode */
    int token;                /* the token it drew (a speculative round: its last committed),
                                 -1 (a prefill chunk before the end) */
    /* a speculative round: k drafts x with the draft's q(x) and the target's p(x), kept a
     * prefix of them, then y (the replacement, or the bonus when all were kept); committed
     * tokens (kept + 1, fewer when the sequence ended) */
    int k, kept, y, committed;
    int x[LLM_SPEC_MAX_K];
    float qx[LLM_SPEC_MAX_K], px[LLM_SPEC_MAX_K];
};
typedef struct llm_step_info {
    long step;                /* 1, 2, ... (steps that ran a forward) */
    int n_items;
    const llm_step_item *items;
    int rows, prefill_rows, decode_rows;
    int n_admitted;           /* sequences that got their first rows this step */
    int n_preempted;
    const int *preempted;     /* sequence ids */
    int n_finished;
    const int *finished;      /* sequence ids (cancelled ones included) */
    double t_start, t_end;    /* engine clock */
} llm_step_info;
/* One iteration: take in submissions and cancels, plan, one forward, stream the new tokens,
 * retire what finished. Returns 1 when a forward ran, 0 when there was nothing to run,
 * -1 on an internal error (message on stderr; the requests of the step are failed, and the
 * prefix cache may hold what that forward never wrote: free the engine). info
 * may be NULL. */
int llm_engine_step(llm_engine *s, llm_step_info *info);
int llm_engine_has_work(llm_engine *s);       /* queued, running or submitted-not-taken-in */
/* Sleep until there is work or timeout_s passes; returns llm_engine_has_work. */
int llm_engine_wait(llm_engine *s, double timeout_s);
/* For a caller that waits for work its own way (the HTTP face's loop): with nothing to do,
 * pass the "engine idle" gate (said once per idle period; gated, it waits there for the
 * viewer, as llm_engine_wait does). Returns llm_engine_has_work. */
int llm_engine_idle(llm_engine *s);
/* Step until no work is left (tests and batch runs). Returns steps run, or -1. */
long llm_engine_run(llm_engine *s);

/* The engine's cache (tests, the block-map lab): only while no step runs. */
const llm_kv *llm_engine_kv(const llm_engine *s);
/* Speculative decoding's figures so far (zeros without a draft model). Stepping thread. */
void llm_engine_spec_stats(const llm_engine *s, llm_spec_stats *st);


/* ==== engine_stats.c: what the engine measures ====
 * The metrics snapshot (with the TTFT and TPOT histograms), each step's phase timing, and
 * the events described above (flows, spans, step records, gates): the loop calls into it at
 * fixed points, so the step function itself only schedules, runs and streams. */
/* Where one step's time went, on CLOCK_MONOTONIC (mlsys_now_ns, whatever opts.clock is).
 * Without overlap the phases follow one another on the stepping thread: schedule (take in
 * submissions and cancels, plan), prepare (the rows), [draft: speculative decoding's draft
 * forwards], forward, sample (with speculation: the verifies), detokenize (tokens to text,
 * stop strings, the callbacks, retiring what finished): t0[schedule] = t_start, each
 * phase starts where the one before ended, t1[detokenize] = t_end. With overlap the stepping
 * thread's phases are, in order: [schedule, prepare: when this step was not planned ahead],
 * launch (resolve the futures, hand the next step's planning to the worker), forward,
 * [wait: for the worker, when it planned], sample, detokenize; they tile [t_start, t_end]
 * the same way, and the worker's schedule next and prepare next (the next step's) lie
 * inside [t0[launch], t1[wait]]. A phase that did not run has t0 = t1 = 0. */
typedef enum {
    LLM_PHASE_SCHEDULE, LLM_PHASE_PREPARE, LLM_PHASE_FORWARD, LLM_PHASE_SAMPLE,
    LLM_PHASE_DETOKENIZE, LLM_PHASE_LAUNCH, LLM_PHASE_WAIT,
    LLM_PHASE_SCHEDULE_NEXT, LLM_PHASE_PREPARE_NEXT,    /* overlapped: the next step's */
    LLM_PHASE_DRAFT,          /* speculative decoding: the draft forwards, before the forward */
    LLM_PHASE_COUNT
} llm_phase;
const char *llm_phase_name(int phase);   /* "schedule", "prepare", ... */
typedef struct llm_step_stats {
    long step;                /* the step (llm_step_info.step) */
    int overlapped;           /* 1: the next step's schedule and prepare ran beside the forward */
    int n_seqs, rows;         /* the forward's batch */
    uint64_t t_start, t_end;  /* ns */
    uint64_t t0[LLM_PHASE_COUNT], t1[LLM_PHASE_COUNT];
} llm_step_stats;
static inline uint64_t llm_phase_ns(const llm_step_stats *st, int phase)
{
    return st->t1[phase] - st->t0[phase];
}
/* The last step that ran a forward (zeros before the first). Stepping thread only. */
void llm_engine_last_stats(const llm_engine *s, llm_step_stats *st);

#define LLM_ENGINE_HIST_N 14       /* buckets: the bounds below, then +Inf */
extern const double llm_engine_hist_bounds[LLM_ENGINE_HIST_N - 1];   /* seconds, ascending */
typedef struct llm_engine_metrics {
    int running, waiting;     /* sequences now */
    long submitted, finished, cancelled, steps;
    int kv_blocks, kv_used, kv_cached, kv_free, block_size;
    uint64_t kv_bytes;        /* of the pool */
    long prompt_tokens;       /* tokens in: prompts of the requests finished */
    long generated_tokens;    /* tokens out: generated tokens streamed */
    long prefill_tokens;      /* prompt rows computed (recomputation included) */
    long decode_tokens;       /* decode rows computed */
    long prefix_query_tokens, prefix_hit_tokens;   /* at admissions */
    double prefix_hit_rate;   /* hit / query tokens, 0 when none */
    long preemptions;
    long spec_rounds, spec_drafted, spec_accepted;   /* speculative decoding */
    /* per finished request: per-bucket counts (not cumulative), sums, count */
    long ttft_hist[LLM_ENGINE_HIST_N], tpot_hist[LLM_ENGINE_HIST_N];
    double ttft_sum, tpot_sum;
    long ttft_count, tpot_count;
} llm_engine_metrics;
/* A consistent snapshot, taken at the end of the last step (any thread). */
void llm_engine_metrics_get(llm_engine *s, llm_engine_metrics *m);

/* ==== batch.c: B sequences on the engine (submit, step until done) ==== */
typedef struct llm_gen_opts {
    int max_new;              /* tokens to generate per sequence (fewer if the context ends) */
    int stop_at_eos;          /* 1: a sequence ends when it draws BOS or EOS (not stored) */
    float temperature;        /* 0: greedy; top_k, top_p as llm_request */
    int top_k;
    float top_p;
    int n;                    /* samples of each prompt (0 or 1: one): prompt b's are
                                 sequences b·n .. b·n+n-1, prefilled once, forking its blocks */
    uint64_t seed;            /* sequence s draws with seed + s ... */
    const uint64_t *seeds;    /* ... or sample i of prompt b with seeds[b] + i (NULL: seed) */
    llm_token_fn on_token;    /* every token as it is drawn, of sequence s (prompt tokens are
                                 not reported; may be NULL) */
    void *u;
} llm_gen_opts;
typedef struct llm_gen_stats {
    long prefill_tokens, decode_tokens;   /* prompt rows and decode rows the forwards ran */
    long steps;                           /* decode steps: forwards with no prompt rows */
    double prefill_s, decode_s;           /* wall time of the steps with prompt rows, and of
                                             the decode steps */
    double decode_cpu_s;                  /* this process's CPU time in decode steps (a
                                             shared machine's fair measure) */
    double prefill_cpu_s;                 /* and in the steps with prompt rows */
} llm_gen_stats;
/* Prompts b = 0..B-1 (1 <= n_prompt[b] <= the engine's max_model_len), n samples each:
 * sequence s = b·n + i goes to out[s] (room for max_new), n_out[s] its count. B requests
 * submitted to the engine, which is stepped until they are done (with its own other
 * requests, if it has any). With room for the B·n sequences and the prompts' rows in one
 * step (max_num_seqs >= B·n, max_num_batched_tokens >= the prompt tokens), the prompts are
 * prefilled in one forward and every later step decodes all unfinished sequences in one
 * forward. The stepping thread must be the caller's. 0, or -1 with err (a bad prompt:
 * nothing generated). */
int llm_generate(llm_engine *eng, int B, const int *const *prompts, const int *n_prompt,
                 int **out, int *n_out, const llm_gen_opts *o, llm_gen_stats *st, char *err,
                 size_t errlen);
/* One JSON-constrained sequence on the engine (a request with json = 1 and grammar g),
 * stepped until done: out (room for max_new) gets its tokens; the stats sum the engine's
 * forward and sample phases over its steps and the mask's share of them. max_new must
 * cover llm_json_min_close at the start. 0, or -1 with err. */
typedef struct llm_json_gen_opts {
    int max_new;
    float temperature;        /* sampling, as llm_request */
    int top_k;
    float top_p;
    uint64_t seed;
    llm_json_mask_fn mask;    /* NULL: llm_json_mask */
    const llm_json_state *start;   /* NULL: a fresh value; else the state the prompt's own
                                      text left (a prompt that opens the JSON itself) */
    llm_mask_fn on_step;      /* every draw, after the mask (NULL: nothing) */
    llm_token_fn on_token;
    void *u;
} llm_json_gen_opts;
typedef struct llm_json_gen_stats {
    long tokens, allowed_sum;        /* tokens generated; sum over steps of tokens allowed */
    double forward_s, mask_s, sample_s;   /* the forwards, the mask, the draws (no mask) */
    int done;                        /* 1: the value was completed */
} llm_json_gen_stats;
int llm_json_generate(llm_engine *eng, llm_json_grammar *g, const int *prompt, int n_prompt,
                      const llm_json_gen_opts *o, int *out, int *n_out,
                      llm_json_gen_stats *st, char *err, size_t errlen);
/* The reference without a cache: every step recomputes each sequence's whole prefix
 * (llm_forward_nocache; O(n^2) work for n tokens), prompt b's one sequence drawing with
 * samplers[b] (o->n, o->seed and o->seeds are not used). What the cached engine is tested
 * against, and `generate --no-cache`. 0, or -1 with err. */
int llm_generate_nocache(const llm_config *c, const llm_weights *w, llm_sampler *samplers,
                         int B, const int *const *prompts, const int *n_prompt, int **out,
                         int *n_out, const llm_gen_opts *o, llm_gen_stats *st, char *err,
                         size_t errlen);

#endif
