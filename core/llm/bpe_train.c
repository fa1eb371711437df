/* bpe_train.c - training the lab's byte-level BPE tokenizer in three phases: the text cut
 * into unique pre-split chunks with their counts (count_chunks), the counts of adjacent pairs
 * (count_pairs), then merges, most frequent pair first, each re-counting only the words that
 * held the merged pair (merge_pairs). The table it fills is bpe.c's. */
#include "llm.h"
#include "llm_internal.h"
#include "../mlsys.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BASE_VOCAB (3 + 256)        /* the specials and the bytes (bpe.c) */

static uint64_t fnv(const void *p, size_t n)
{
    return llm_fnv1a64(p, n, LLM_FNV_INIT);
}

typedef struct word {
    int *sym;            /* current symbols (ids) */
    int len;
    int64_t freq;
    uint32_t stamp;      /* last merge that visited it */
} word;

typedef struct pair_slot {
    uint64_t key;        /* (a << 32 | b) + 1; 0 = empty */
    int64_t count;
    int *words;          /* words that contained the pair when it was counted (may be stale) */
    int nwords, capwords;
    int banned;
} pair_slot;

typedef struct pairs {
    pair_slot *slot;
    size_t cap, used;
} pairs;

static pair_slot *pair_get(pairs *ps, int a, int b);

static void pairs_grow(pairs *ps)
{
    pairs old = *ps;
    ps->cap = old.cap ? old.cap * 2 : 4096;
    ps->slot = mlsys_xcalloc(ps->cap, sizeof(pair_slot));
    ps->used = 0;
    for (size_t i = 0; i < old.cap; i++) {
        if (!old.slot[i].key)
            continue;
        uint64_t k = old.slot[i].key - 1;
        pair_slot *s = pair_get(ps, (int)(k >> 32), (int)(k & 0xffffffffu));
        uint64_t key = s->key;
        *s = old.slot[i];
        s->key = key;
    }
    free(old.slot);
}

static pair_slot *pair_get(pairs *ps, int a, int b)
{
    if ((ps->used + 1) * 2 > ps->cap)
        pairs_grow(ps);
    uint64_t key = ((uint64_t)(uint32_t)a << 32 | (uint32_t)b) + 1;
    size_t mask = ps->cap - 1;
    for (size_t h = (size_t)(key * 0x9e3779b97f4a7c15ull >> 20) & mask;; h = (h + 1) & mask) {
        if (ps->slot[h].key == key)
            return &ps->slot[h];
        if (!ps->slot[h].key) {
            ps->slot[h].key = key;
            ps->used++;
            return &ps->slot[h];
        }
    }
}

static void pair_add(pairs *ps, int a, int b, int64_t f, int w)
{
    pair_slot *s = pair_get(ps, a, b);
    s->count += f;
    if (f > 0 && (s->nwords == 0 || s->words[s->nwords - 1] != w)) {
        if (s->nwords == s->capwords) {
            s->capwords = s->capwords ? s->capwords * 2 : 4;
            s->words = realloc(s->words, (size_t)s->capwords * sizeof(int));
            if (!s->words) {
                fprintf(stderr, "bpe: out of memory\n");
                exit(1);
            }
        }
        s->words[s->nwords++] = w;
    }
}

enum { C_LETTER, C_DIGIT, C_PUNCT, C_SPACE, C_NEWLINE, C_OTHER };
static int cclass(unsigned char c)
{
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'))
        return C_LETTER;
    if (c >= '0' && c <= '9')
        return C_DIGIT;
    if (c == ' ')
        return C_SPACE;
    if (c == '\n')
        return C_NEWLINE;
    if (c > 0x20 && c < 0x7f)
        return C_PUNCT;
    return C_OTHER;
}

/* Length of the chunk at s[i..n): space+letters, space+punctuation, letters, punctuation,
 * spaces (the last one is kept for a following word), newlines, or a single byte. */
static size_t chunk_len(const unsigned char *s, size_t n, size_t i)
{
    int c = cclass(s[i]);
    size_t j = i + 1;
    if (c == C_SPACE) {
        if (j < n && (cclass(s[j]) == C_LETTER || cclass(s[j]) == C_PUNCT)) {
            int k = cclass(s[j]);
            while (j < n && cclass(s[j]) == k)
                j++;
            return j - i;
        }
        while (j < n && s[j] == ' ')
            j++;
        if (j < n && (cclass(s[j]) == C_LETTER || cclass(s[j]) == C_PUNCT))
            j--;                       /* the last space goes with the word after it */
        return j - i;
    }
    if (c == C_LETTER || c == C_PUNCT || c == C_NEWLINE) {
        while (j < n && cclass(s[j]) == c)
            j++;
        return j - i;
    }
    return 1;          /* digits and bytes that never merge */
}

/* Unique chunks: open addressing on the chunk's bytes (they stay in the text). */
typedef struct chunk_table {
    const char **key;
    int *len;
    int *word;
    size_t cap, used;
} chunk_table;

static void chunk_table_grow(chunk_table *ct)
{
    chunk_table old = *ct;
    ct->cap *= 2;
    ct->key = mlsys_xcalloc(ct->cap, sizeof(char *));
    ct->len = mlsys_xcalloc(ct->cap, sizeof(int));
    ct->word = mlsys_xcalloc(ct->cap, sizeof(int));
    for (size_t k = 0; k < old.cap; k++) {
        if (!old.key[k])
            continue;
        size_t h = fnv(old.key[k], (size_t)old.len[k]) & (ct->cap - 1);
        while (ct->key[h])
            h = (h + 1) & (ct->cap - 1);
        ct->key[h] = old.key[k];
        ct->len[h] = old.len[k];
        ct->word[h] = old.word[k];
    }
    free(old.key);
    free(old.len);
    free(old.word);
}

/* The words of the training text: each unique pre-split chunk that can merge (two bytes or
 * more; not digits, not other bytes), as byte ids, with how often it occurs, in the order
 * first seen. Phase 1. */
static word *count_chunks(const char *text, size_t n, int *nwords_out)
{
    const unsigned char *s = (const unsigned char *)text;
    chunk_table ct = {0};
    ct.cap = 1 << 12;
    ct.key = mlsys_xcalloc(ct.cap, sizeof(char *));
    ct.len = mlsys_xcalloc(ct.cap, sizeof(int));
    ct.word = mlsys_xcalloc(ct.cap, sizeof(int));
    word *words = NULL;
    int nwords = 0, capwords = 0;
    for (size_t i = 0; i < n;) {
        size_t l = chunk_len(s, n, i);
        int c0 = cclass(s[i]);
        if (l < 2 || c0 == C_DIGIT || c0 == C_OTHER) {
            i += l;
            continue;
        }
        if ((ct.used + 1) * 2 > ct.cap)
            chunk_table_grow(&ct);
        size_t h = fnv(s + i, l) & (ct.cap - 1);
        while (ct.key[h] && !(ct.len[h] == (int)l && memcmp(ct.key[h], s + i, l) == 0))
            h = (h + 1) & (ct.cap - 1);
        if (!ct.key[h]) {
            ct.key[h] = text + i;
            ct.len[h] = (int)l;
            if (nwords == capwords) {
                capwords = capwords ? capwords * 2 : 1024;
                words = realloc(words, (size_t)capwords * sizeof(word));
                if (!words) {
                    fprintf(stderr, "bpe: out of memory\n");
                    exit(1);
                }
            }
            word *w = &words[nwords];
            w->sym = mlsys_xmalloc(l * sizeof(int));
            for (size_t k = 0; k < l; k++)
                w->sym[k] = LLM_TOK_BYTE0 + s[i + k];
            w->len = (int)l;
            w->freq = 0;
            w->stamp = 0;
            ct.word[h] = nwords++;
            ct.used++;
        }
        words[ct.word[h]].freq++;
        i += l;
    }
    free(ct.key);
    free(ct.len);
    free(ct.word);
    *nwords_out = nwords;
    return words;
}

/* Every adjacent pair of every word, counted by the word's frequency. Phase 2. */
static void count_pairs(pairs *ps, const word *words, int nwords)
{
    for (int w = 0; w < nwords; w++)
        for (int k = 0; k + 1 < words[w].len; k++)
            pair_add(ps, words[w].sym[k], words[w].sym[k + 1], words[w].freq, w);
}

/* The pair to merge next: the most frequent (at least twice), ties to the smaller ids, for
 * determinism. NULL when none is left. */
static pair_slot *best_pair(pairs *ps)
{
    pair_slot *best = NULL;
    for (size_t i = 0; i < ps->cap; i++) {
        pair_slot *p = &ps->slot[i];
        if (!p->key || p->banned || p->count < 2)
            continue;
        if (!best || p->count > best->count || (p->count == best->count && p->key < best->key))
            best = p;
    }
    return best;
}

/* Replace (a, b) by z in the words that held the pair, re-counting only their pairs. */
static void apply_merge(pairs *ps, word *words, pair_slot *best, int a, int b, int z,
                        uint32_t merge_no)
{
    int nlist = best->nwords;
    int *list = best->words;
    best->words = NULL;
    best->nwords = best->capwords = 0;
    for (int li = 0; li < nlist; li++) {
        word *w = &words[list[li]];
        if (w->stamp == merge_no)
            continue;
        w->stamp = merge_no;
        int found = 0;
        for (int k = 0; k + 1 < w->len; k++)
            found |= w->sym[k] == a && w->sym[k + 1] == b;
        if (!found)
            continue;
        for (int k = 0; k + 1 < w->len; k++)
            pair_add(ps, w->sym[k], w->sym[k + 1], -w->freq, list[li]);
        int o = 0;
        for (int k = 0; k < w->len; k++) {
            if (k + 1 < w->len && w->sym[k] == a && w->sym[k + 1] == b) {
                w->sym[o++] = z;
                k++;
            } else {
                w->sym[o++] = w->sym[k];
            }
        }
        w->len = o;
        for (int k = 0; k + 1 < w->len; k++)
            pair_add(ps, w->sym[k], w->sym[k + 1], w->freq, list[li]);
    }
    free(list);
}

/* Merges, most frequent pair first, until vocab_size ids or no pair occurs twice. A pair whose
 * joined piece may not be a token (too long, reads as a byte or a special) is banned. Phase 3. */
static void merge_pairs(llm_tokenizer *t, pairs *ps, word *words, int vocab_size)
{
    char buf[1024];
    uint32_t merge_no = 0;
    pair_slot *best;
    while (t->vocab_size < vocab_size && (best = best_pair(ps)) != NULL) {
        int a = (int)((best->key - 1) >> 32), b = (int)((best->key - 1) & 0xffffffffu);
        int la = t->piece_len[a], lb = t->piece_len[b];
        int z = -1;
        if (la + lb < (int)sizeof buf) {
            memcpy(buf, t->piece[a], (size_t)la);
            memcpy(buf + la, t->piece[b], (size_t)lb);
            z = llm_tok_add_merge(t, buf, la + lb);
        }
        if (z < 0) {
            best->banned = 1;
            continue;
        }
        apply_merge(ps, words, best, a, b, z, ++merge_no);
    }
}

int llm_bpe_train(llm_tokenizer *t, const char *text, size_t n, int vocab_size, char *err,
                  size_t errlen)
{
    if (vocab_size < BASE_VOCAB || vocab_size > 65536) {
        snprintf(err, errlen, "bpe: vocabulary of %d ids (need %d..65536)", vocab_size,
                 BASE_VOCAB);
        memset(t, 0, sizeof *t);
        return -1;
    }
    llm_tok_start(t, vocab_size);
    int nwords;
    word *words = count_chunks(text, n, &nwords);
    pairs ps = {0};
    count_pairs(&ps, words, nwords);
    merge_pairs(t, &ps, words, vocab_size);
    for (size_t i = 0; i < ps.cap; i++)
        free(ps.slot[i].words);
    free(ps.slot);
    for (int w = 0; w < nwords; w++)
        free(words[w].sym);
    free(words);
    return 0;
}
