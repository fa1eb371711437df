/* grammar_tables.h - the word classes and sentence templates shared by the generator
 * (corpus.c) and the acceptor (grammar.c): one table, so "every generated sentence is
 * accepted" holds by construction and a change to the grammar is made in one place.
 * Internal to core/llm. */
#ifndef MLSYS_LLM_GRAMMAR_TABLES_H
#define MLSYS_LLM_GRAMMAR_TABLES_H

/* A slot "{NAME}" in a template stands for one entry of a word class. */
typedef struct llm_word_class {
    const char *slot;             /* "NAME", "he", ... */
    const char *const *words;
    int n;
} llm_word_class;

/* One beat of a story: the generator emits between min and max distinct templates of it. */
typedef struct llm_beat {
    const char *name;
    const char *const *templates;
    int n, min, max;
} llm_beat;

extern const llm_word_class llm_word_classes[];
extern const int llm_n_word_classes;
extern const llm_beat llm_beats[];
extern const int llm_n_beats;
const llm_word_class *llm_find_class(const char *slot, int len);

/* JSON record schema: keys in the order the generator writes them. */
enum { LLM_JV_NAME, LLM_JV_AGE, LLM_JV_ANIMAL, LLM_JV_TOY, LLM_JV_COLOR, LLM_JV_BOOL,
       LLM_JV_NAMES };
typedef struct llm_json_key {
    const char *key;
    int type;                     /* LLM_JV_* */
    int required;
} llm_json_key;
extern const llm_json_key llm_json_keys[];
extern const int llm_n_json_keys;
#define LLM_AGE_MIN 2
#define LLM_AGE_MAX 12
#define LLM_FRIENDS_MAX 3
#define LLM_SUM_MAX_OPERAND 49

#endif
