/* models.h - what chapter 11's two labs share: the lab's target and draft models and their
 * tokenizer loaded once, the target on the generation engine (one sequence at a time) and
 * with a forward and cache of its own (to compare one row with many), the corpus-like
 * prompts they are measured on, and a token shown as printable text. */
#ifndef CH11_MODELS_H
#define CH11_MODELS_H

#include "../../lab/lab.h"
#include "../../core/llm/engine.h"

#define CH11_MODEL "assets/models/model.bin"
#define CH11_DRAFT "assets/models/draft.bin"
#define CH11_TOKENIZER "assets/models/tokenizer.bin"

typedef struct ch11_models {
    llm_config tc, dc;
    llm_weights tw, dw;
    llm_tokenizer tok;
    llm_fwd te;               /* the target's forward over target_rows rows ... */
    llm_kv tkv;               /* ... and a cache of one sequence (measurements) */
    llm_engine *eng;          /* the target on the generation engine, one sequence at a time */
    int have_draft, have_run;
} ch11_models;

/* Load the target (and the draft when draft is not NULL) and the tokenizer; 0, or -1 with
 * "PATH: why". With run, also the target's engine and its forward of target_rows rows. */
int ch11_models_load(ch11_models *m, const char *model, const char *draft, const char *tok,
                     int run, int target_rows, char *err, size_t n);
void ch11_models_free(ch11_models *m);
/* Prompt i: the opening words of validation document i of the corpus (data seed 1: stories,
 * JSON records and sums), cut at a word boundary after about 12-40 bytes, as the model saw
 * documents in training (BOS, " " + text). Returns the token count; text (cap >= 64) gets
 * the words. */
int ch11_prompt(const ch11_models *m, int i, int *ids, char *text, size_t cap);
/* Token id as printable text: newlines as "\n", other control bytes as "\xNN". */
const char *ch11_tok_text(const ch11_models *m, int id, char *buf, size_t n);
/* "--gemm auto|ref|blas|invariant": set the kernel (auto: the process's); returns its name. */
const char *ch11_set_gemm(const char *choice);

#endif
