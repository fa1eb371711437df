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

/* ---- datakit.c: seed -> corpus -> tokenizer -> token ids ---- */
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
/* Ids as llama2.c's pretokenized shards: little-endian uint16 (needs vocab <= 65536). */
int llm_ids_write_u16(const char *path, const int *ids, size_t n, char *err, size_t errlen);
/* Write path atomically: temporary file beside it, fsync, rename (used by every writer). */
int llm_write_atomic(const char *path, const void *const *parts, const size_t *sizes,
                     int nparts, char *err, size_t errlen);

#endif
