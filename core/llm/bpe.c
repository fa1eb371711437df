/* bpe.c - the lab's byte-level BPE tokenizer: its table (bpe_train.c trains it on the
 * corpus), and an encoder that gives exactly what llama2.c's run.c encode() gives for the
 * same tokenizer.bin (best-scoring joined piece first, leftmost on ties) but in O(n log n)
 * with a heap instead of O(n^2) rescans.
 * Layout and scores are described in llm.h; decode(encode(x)) == x for any bytes. */
#include "llm.h"
#include "llm_internal.h"
#include "../mlsys.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N_SPECIAL 3
#define BYTE_TOKENS 256
#define BASE_VOCAB (N_SPECIAL + BYTE_TOKENS)
static const char *const special_pieces[N_SPECIAL] = {"<unk>", "<s>", "</s>"};

static uint64_t fnv(const void *p, size_t n)
{
    const unsigned char *s = p;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ s[i]) * 0x100000001b3ull;
    return h;
}

/* Bytes whose piece is the byte itself (and that merges may join): printable ASCII and '\n'. */
static int literal_byte(unsigned c)
{
    return (c >= 0x20 && c <= 0x7e) || c == '\n';
}

static int hex_digit(char c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

/* "<0xHH>" -> HH, else -1 (run.c's decode turns such pieces into the raw byte). */
static int hex_piece(const char *p, int len)
{
    if (len != 6 || memcmp(p, "<0x", 3) != 0 || !hex_digit(p[3]) || !hex_digit(p[4]) ||
        p[5] != '>')
        return -1;
    char h[3] = {p[3], p[4], 0};
    return (int)strtol(h, NULL, 16);
}

/* ---- the tokenizer table ---- */

int llm_tokenizer_lookup(const llm_tokenizer *t, const char *piece, int len)
{
    if (!t->table)
        return -1;
    size_t mask = t->table_cap - 1;
    for (size_t h = fnv(piece, (size_t)len) & mask;; h = (h + 1) & mask) {
        int id = t->table[h];
        if (id < 0)
            return -1;
        if (t->piece_len[id] == len && memcmp(t->piece[id], piece, (size_t)len) == 0)
            return id;
    }
}

static void table_build(llm_tokenizer *t)
{
    size_t cap = 16;
    while (cap < (size_t)t->vocab_size * 2 + 2)
        cap *= 2;
    free(t->table);
    t->table_cap = cap;
    t->table = mlsys_xmalloc(cap * sizeof(int));
    for (size_t i = 0; i < cap; i++)
        t->table[i] = -1;
    for (int id = 0; id < t->vocab_size; id++) {
        if (llm_tokenizer_lookup(t, t->piece[id], t->piece_len[id]) >= 0)
            continue;            /* a repeated piece: the first id wins (as a lookup would) */
        size_t h = fnv(t->piece[id], (size_t)t->piece_len[id]) & (cap - 1);
        while (t->table[h] >= 0)
            h = (h + 1) & (cap - 1);
        t->table[h] = id;
    }
}

/* Set id's piece and derive what decode emits for it. */
static void set_piece(llm_tokenizer *t, int id, const char *p, int len, float score)
{
    t->piece[id] = mlsys_xmalloc((size_t)len + 1);
    memcpy(t->piece[id], p, (size_t)len);
    t->piece[id][len] = '\0';
    t->piece_len[id] = len;
    t->score[id] = score;
    int hb = hex_piece(p, len);
    if (id < N_SPECIAL) {
        t->bytes[id] = t->piece[id];
        t->bytes_len[id] = 0;
    } else if (hb >= 0) {
        t->bytes[id] = mlsys_xmalloc(2);
        t->bytes[id][0] = (char)hb;
        t->bytes[id][1] = '\0';
        t->bytes_len[id] = 1;
    } else {
        t->bytes[id] = t->piece[id];
        t->bytes_len[id] = len;
    }
    if (len > t->max_token_length)
        t->max_token_length = len;
}

static void tok_alloc(llm_tokenizer *t, int cap)
{
    memset(t, 0, sizeof *t);
    t->piece = mlsys_xcalloc((size_t)cap, sizeof(char *));
    t->bytes = mlsys_xcalloc((size_t)cap, sizeof(char *));
    t->piece_len = mlsys_xcalloc((size_t)cap, sizeof(int));
    t->bytes_len = mlsys_xcalloc((size_t)cap, sizeof(int));
    t->score = mlsys_xcalloc((size_t)cap, sizeof(float));
}

void llm_tokenizer_free(llm_tokenizer *t)
{
    for (int i = 0; t->piece && i < t->vocab_size; i++) {
        if (t->bytes[i] != t->piece[i])
            free(t->bytes[i]);
        free(t->piece[i]);
    }
    free(t->piece);
    free(t->bytes);
    free(t->piece_len);
    free(t->bytes_len);
    free(t->score);
    free(t->table);
    memset(t, 0, sizeof *t);
}

static void base_vocab(llm_tokenizer *t)
{
    for (int i = 0; i < N_SPECIAL; i++)
        set_piece(t, i, special_pieces[i], (int)strlen(special_pieces[i]), LLM_TOK_SPECIAL_SCORE);
    for (int b = 0; b < BYTE_TOKENS; b++) {
        char p[8];
        int len;
        if (literal_byte((unsigned)b)) {
            p[0] = (char)b;
            len = 1;
        } else {
            len = snprintf(p, sizeof p, "<0x%02X>", b);
        }
        set_piece(t, LLM_TOK_BYTE0 + b, p, len, 0.0f);
    }
    t->vocab_size = BASE_VOCAB;
}

int llm_tokenizer_init(llm_tokenizer *t, int vocab_size, char *const *pieces, const int *lens,
                       const float *scores, char *err, size_t errlen)
{
    /* the encoder falls back to ids 3..258 for any byte it cannot look up whole: a smaller
     * vocabulary would make it emit ids past the end */
    if (vocab_size < BASE_VOCAB || vocab_size > LLM_MAX_VOCAB) {
        snprintf(err, errlen, "tokenizer: vocabulary of %d ids (need %d..%d: 3 specials and "
                 "256 bytes at least)", vocab_size, BASE_VOCAB, LLM_MAX_VOCAB);
        memset(t, 0, sizeof *t);
        return -1;
    }
    tok_alloc(t, vocab_size);
    for (int i = 0; i < vocab_size; i++) {
        set_piece(t, i, pieces[i], lens[i], scores[i]);
        t->vocab_size = i + 1;
    }
    /* ours when ids 3..258 are the byte pieces and the rest score -rank */
    int ours = vocab_size >= BASE_VOCAB;
    for (int b = 0; ours && b < BYTE_TOKENS; b++) {
        const char *p = t->piece[LLM_TOK_BYTE0 + b];
        int l = t->piece_len[LLM_TOK_BYTE0 + b];
        ours = hex_piece(p, l) == b || (l == 1 && (unsigned char)p[0] == b);
    }
    t->nmerges = ours ? vocab_size - BASE_VOCAB : 0;
    table_build(t);
    return 0;
}

/* ---- what training (bpe_train.c) needs of the table ---- */

void llm_tok_start(llm_tokenizer *t, int cap)
{
    tok_alloc(t, cap);
    base_vocab(t);
    table_build(t);
}

int llm_tok_add_merge(llm_tokenizer *t, const char *p, int len)
{
    int bad = 0;
    for (int k = 0; k + 2 < len; k++)
        bad |= memcmp(p + k, "<0x", 3) == 0;    /* run.c would read it as a byte */
    for (int k = 0; k < N_SPECIAL; k++)
        bad |= len == (int)strlen(special_pieces[k]) && memcmp(p, special_pieces[k],
                                                                (size_t)len) == 0;
    if (bad)
        return -1;
    int z = llm_tokenizer_lookup(t, p, len);
    if (z < 0) {                      /* a new token; scores fall with rank */
        z = t->vocab_size;
        set_piece(t, z, p, len, -(float)t->nmerges);
        t->vocab_size++;
        t->nmerges++;
        table_build(t);
    }
    return z;
}

/* ---- encoding: llama2.c's merge order, with a heap ---- */

typedef struct cand {
    float score;
    int left, right;      /* node indices (left < right; node order is text order) */
    int vl, vr;           /* their versions when the candidate was made */
    int id;               /* the merged token */
} cand;

static int cand_before(const cand *x, const cand *y)
{
    if (x->score != y->score)
        return x->score > y->score;
    return x->left < y->left;            /* leftmost first, as run.c's scan */
}

typedef struct heap {
    cand *c;
    size_t n;
} heap;

static void heap_push(heap *h, cand c)
{
    size_t i = h->n++;
    h->c[i] = c;
    while (i && cand_before(&h->c[i], &h->c[(i - 1) / 2])) {
        cand t = h->c[i];
        h->c[i] = h->c[(i - 1) / 2];
        h->c[(i - 1) / 2] = t;
        i = (i - 1) / 2;
    }
}

static cand heap_pop(heap *h)
{
    cand top = h->c[0];
    h->c[0] = h->c[--h->n];
    size_t i = 0;
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, m = i;
        if (l < h->n && cand_before(&h->c[l], &h->c[m]))
            m = l;
        if (r < h->n && cand_before(&h->c[r], &h->c[m]))
            m = r;
        if (m == i)
            break;
        cand t = h->c[i];
        h->c[i] = h->c[m];
        h->c[m] = t;
        i = m;
    }
    return top;
}

typedef struct enc {
    const llm_tokenizer *t;
    int *id, *prev, *next, *ver;
    char *buf;
    heap h;
} enc;

static void consider(enc *e, int l, int r)
{
    if (l < 0 || r < 0)
        return;
    const llm_tokenizer *t = e->t;
    int la = t->piece_len[e->id[l]], lb = t->piece_len[e->id[r]];
    memcpy(e->buf, t->piece[e->id[l]], (size_t)la);
    memcpy(e->buf + la, t->piece[e->id[r]], (size_t)lb);
    int z = llm_tokenizer_lookup(t, e->buf, la + lb);
    if (z < 0 || !(t->score[z] > -1e10f))
        return;
    cand c = {t->score[z], l, r, e->ver[l], e->ver[r], z};
    heap_push(&e->h, c);
}

size_t llm_bpe_encode(const llm_tokenizer *t, const char *s, size_t n, int *ids)
{
    /* 1. code points looked up whole, else one id per byte */
    size_t m = 0;
    int glen = 0;
    char g[4];
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if ((c & 0xC0) != 0x80)
            glen = 0;
        g[glen++] = (char)c;
        if (i + 1 < n && ((unsigned char)s[i + 1] & 0xC0) == 0x80 && glen < 4)
            continue;
        int id = llm_tokenizer_lookup(t, g, glen);
        if (id >= 0) {
            ids[m++] = id;
        } else {
            for (int k = 0; k < glen; k++)
                ids[m++] = LLM_TOK_BYTE0 + (unsigned char)g[k];
        }
        glen = 0;
    }
    if (m < 2)
        return m;
    /* 2. merges */
    enc e;
    e.t = t;
    e.id = mlsys_xmalloc(m * 4 * sizeof(int));
    e.prev = e.id + m;
    e.next = e.prev + m;
    e.ver = e.next + m;
    e.buf = mlsys_xmalloc((size_t)t->max_token_length * 2 + 2);
    e.h.c = mlsys_xmalloc((3 * m + 1) * sizeof(cand));
    e.h.n = 0;
    for (size_t i = 0; i < m; i++) {
        e.id[i] = ids[i];
        e.prev[i] = (int)i - 1;
        e.next[i] = i + 1 < m ? (int)i + 1 : -1;
        e.ver[i] = 0;
    }
    for (size_t i = 0; i + 1 < m; i++)
        consider(&e, (int)i, (int)i + 1);
    while (e.h.n) {
        cand c = heap_pop(&e.h);
        if (e.ver[c.left] != c.vl || e.ver[c.right] != c.vr || e.next[c.left] != c.right)
            continue;                                  /* stale */
        e.id[c.left] = c.id;
        e.ver[c.left]++;
        e.ver[c.right] = -1;                           /* gone */
        e.next[c.left] = e.next[c.right];
        if (e.next[c.right] >= 0)
            e.prev[e.next[c.right]] = c.left;
        consider(&e, e.prev[c.left], c.left);
        consider(&e, c.left, e.next[c.left]);
    }
    size_t k = 0;
    for (int i = 0; i >= 0; i = e.next[i])
        ids[k++] = e.id[i];
    free(e.id);
    free(e.buf);
    free(e.h.c);
    return k;
}

size_t llm_bpe_encode_prompt(const llm_tokenizer *t, const char *s, size_t n, int bos, int *ids)
{
    size_t k = 0;
    if (bos)
        ids[k++] = LLM_TOK_BOS;
    if (n == 0)
        return k;
    char *tmp = mlsys_xmalloc(n + 1);
    tmp[0] = ' ';
    memcpy(tmp + 1, s, n);
    k += llm_bpe_encode(t, tmp, n + 1, ids + k);
    free(tmp);
    return k;
}

long llm_bpe_decode(const llm_tokenizer *t, const int *ids, size_t n, char *out, size_t cap)
{
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= t->vocab_size)
            return -1;
        int l = t->bytes_len[ids[i]];
        if (out && total < cap)
            memcpy(out + total, t->bytes[ids[i]], (size_t)l <= cap - total ? (size_t)l
                                                                            : cap - total);
        total += (size_t)l;
    }
    return (long)total;
}

const char *llm_bpe_token_bytes(const llm_tokenizer *t, int prev, int id, int *len)
{
    if (id < 0 || id >= t->vocab_size) {
        *len = 0;
        return NULL;
    }
    const char *p = t->bytes[id];
    *len = t->bytes_len[id];
    if (prev == LLM_TOK_BOS && *len > 0 && p[0] == ' ') {
        p++;
        (*len)--;
    }
    return p;
}
