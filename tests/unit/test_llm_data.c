/* test_llm_data.c - the data half of the lab's model: the seeded corpus and its grammar
 * acceptor, the byte-level BPE (round trips on hostile bytes, equality with a naive copy of
 * llama2.c's encode loop written here), tokenizer.bin and model .bin files checked byte by
 * byte against layouts this test writes by hand, corrupt inputs, the .train companion and
 * the data kit. */
#include "../../core/llm/llm.h"

#include <check.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char tmpdir[256];

static void mk_tmp(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/mlsys-llm-test-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(tmpdir));
}

static void rm_tmp(void)
{
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", tmpdir);
}

static char *tpath(const char *name)
{
    static char p[4][400];
    static int k;
    k = (k + 1) % 4;
    snprintf(p[k], sizeof p[k], "%s/%s", tmpdir, name);
    return p[k];
}

static void write_bytes(const char *path, const void *b, size_t n)
{
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(b, 1, n, f), n);
    fclose(f);
}

static unsigned char *slurp(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    ck_assert_ptr_nonnull(f);
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc((size_t)len + 1);
    ck_assert_uint_eq(fread(b, 1, (size_t)len, f), (size_t)len);
    fclose(f);
    *n = (size_t)len;
    return b;
}

/* ---- corpus ---- */

START_TEST(corpus_same_seed_same_bytes)
{
    llm_corpus a, b, c, v;
    ck_assert_int_eq(llm_corpus_generate(&a, 7, LLM_SPLIT_TRAIN, 300, 0), 0);
    ck_assert_int_eq(llm_corpus_generate(&b, 7, LLM_SPLIT_TRAIN, 0, a.len), 0);
    ck_assert_int_eq(llm_corpus_generate(&c, 8, LLM_SPLIT_TRAIN, 300, 0), 0);
    ck_assert_int_eq(llm_corpus_generate(&v, 7, LLM_SPLIT_VAL, 300, 0), 0);
    ck_assert_uint_eq(a.ndocs, 300);
    ck_assert_uint_eq(a.len, b.len);
    ck_assert(memcmp(a.text, b.text, a.len) == 0);
    ck_assert(c.len != a.len || memcmp(a.text, c.text, a.len) != 0);
    ck_assert(v.len != a.len || memcmp(a.text, v.text, a.len) != 0);
    /* document i does not depend on how many were made, and the file format is doc "\n\n" */
    char doc[LLM_DOC_MAX];
    for (size_t i = 0; i < a.ndocs; i += 37) {
        size_t n = llm_corpus_doc(7, LLM_SPLIT_TRAIN, i, doc, sizeof doc, NULL);
        ck_assert_uint_eq(n, llm_corpus_doc_len(&a, i));
        ck_assert(memcmp(doc, a.text + a.off[i], n) == 0);
        ck_assert(memcmp(a.text + a.off[i] + n, "\n\n", 2) == 0);
    }
    /* all three kinds occur, in roughly the designed 70/15/15 mix */
    ck_assert_uint_gt(a.kind_docs[LLM_DOC_STORY], 150);
    ck_assert_uint_gt(a.kind_docs[LLM_DOC_JSON], 15);
    ck_assert_uint_gt(a.kind_docs[LLM_DOC_SUMS], 15);
    char *path = tpath("corpus.txt");
    char err[256];
    ck_assert_int_eq(llm_corpus_write(path, &a, err, sizeof err), 0);
    size_t n;
    unsigned char *f = slurp(path, &n);
    ck_assert_uint_eq(n, a.len);
    ck_assert(memcmp(f, a.text, n) == 0);
    free(f);
    llm_corpus_free(&a);
    llm_corpus_free(&b);
    llm_corpus_free(&c);
    llm_corpus_free(&v);
}
END_TEST

/* Every unit of every generated document is accepted, and the splitter finds exactly the
 * units the generator says it wrote. */
START_TEST(grammar_accepts_everything_generated)
{
    char doc[LLM_DOC_MAX];
    size_t total = 0;
    for (uint64_t i = 0; i < 3000; i++) {
        llm_doc_info info;
        size_t n = llm_corpus_doc(1234 + i % 3, (llm_split)(i % 2), i, doc, sizeof doc, &info);
        size_t pos = 0, st, len;
        int complete, units = 0;
        while (llm_grammar_next_unit(doc, n, &pos, &st, &len, &complete)) {
            if (!complete || !llm_grammar_accepts_n(doc + st, len))
                ck_abort_msg("doc %llu: unit rejected: '%.*s'", (unsigned long long)i, (int)len,
                             doc + st);
            units++;
        }
        if (units != info.units)
            ck_abort_msg("doc %llu: %d units found, generator wrote %d", (unsigned long long)i,
                         units, info.units);
        total += (size_t)units;
        llm_grammar_stats s;
        llm_grammar_score(doc, n, &s);
        if (s.units != (size_t)units || s.accepted != s.units || s.kind_units[info.kind] != s.units)
            ck_abort_msg("doc %llu: score %zu/%zu", (unsigned long long)i, s.accepted, s.units);
    }
    ck_assert_uint_gt(total, 15000);
}
END_TEST

/* Mutations the grammar can never produce: each must be rejected. */
START_TEST(grammar_rejects_mutations)
{
    char doc[LLM_DOC_MAX], m[LLM_DOC_MAX + 64];
    size_t tried = 0;
    for (uint64_t i = 0; i < 600; i++) {
        llm_doc_info info;
        size_t n = llm_corpus_doc(99, LLM_SPLIT_TRAIN, i, doc, sizeof doc, &info);
        if (info.kind != LLM_DOC_STORY)
            continue;
        size_t pos = 0, st, len;
        int complete;
        while (llm_grammar_next_unit(doc, n, &pos, &st, &len, &complete)) {
            const char *s = doc + st;
            /* words: offsets of space-separated words */
            size_t w[64];
            int nw = 0;
            w[nw++] = 0;
            for (size_t k = 0; k < len; k++)
                if (s[k] == ' ' && nw < 64)
                    w[nw++] = k + 1;
            ck_assert_int_ge(nw, 3);
            /* 1. without its end mark */
            if (llm_grammar_accepts_n(s, len - 1))
                ck_abort_msg("accepted without end: '%.*s'", (int)len - 1, s);
            /* 2. first letter lower-cased */
            memcpy(m, s, len);
            m[0] = (char)(m[0] + 32);
            if (llm_grammar_accepts_n(m, len))
                ck_abort_msg("accepted lower-case start: '%.*s'", (int)len, m);
            /* 3. first two words swapped */
            size_t l0 = w[1] - 1, l1 = (nw > 2 ? w[2] - 1 : len) - w[1];
            if (l0 != l1 || memcmp(s, s + w[1], l0) != 0) {
                size_t k = 0;
                memcpy(m + k, s + w[1], l1);
                k += l1;
                m[k++] = ' ';
                memcpy(m + k, s, l0);
                k += l0;
                memcpy(m + k, s + w[1] + l1, len - w[1] - l1);
                if (llm_grammar_accepts_n(m, len))
                    ck_abort_msg("accepted swapped: '%.*s'", (int)len, m);
            }
            /* 4. a word replaced by one outside the vocabulary, 5. a word said twice */
            for (int j = 0; j < nw; j++) {
                size_t we = j + 1 < nw ? w[j + 1] - 1 : len;
                size_t k = 0;
                memcpy(m, s, w[j]);
                k = w[j];
                memcpy(m + k, "xyzzy", 5);
                k += 5;
                memcpy(m + k, s + we, len - we);
                k += len - we;
                if (llm_grammar_accepts_n(m, k))
                    ck_abort_msg("accepted unknown word: '%.*s'", (int)k, m);
                memcpy(m, s, we);
                k = we;
                m[k++] = ' ';
                memcpy(m + k, s + w[j], len - w[j]);
                k += len - w[j];
                if (llm_grammar_accepts_n(m, k))
                    ck_abort_msg("accepted repeated word: '%.*s'", (int)k, m);
                tried++;
            }
        }
    }
    ck_assert_uint_gt(tried, 10000);
    /* a few by hand */
    ck_assert_int_eq(llm_grammar_accepts("Lily went to the park with Tom."), 0);
    ck_assert_int_eq(llm_grammar_accepts("One day, Lily went to the park with Tom."), 1);
    ck_assert_int_eq(llm_grammar_accepts("One day, Lily went to the park with Tom"), 0);
    ck_assert_int_eq(llm_grammar_accepts("One day,  Lily went to the park with Tom."), 0);
    ck_assert_int_eq(llm_grammar_accepts("park the to went Lily day, One with Tom."), 0);
    ck_assert_int_eq(llm_grammar_accepts("Tom said, \"Look at the red ball!\""), 1);
    ck_assert_int_eq(llm_grammar_accepts("Tom said, \"Look at the red ball!"), 0);
    ck_assert_int_eq(llm_grammar_accepts(""), 0);
    ck_assert_int_eq(llm_grammar_accepts("   "), 0);
}
END_TEST

START_TEST(grammar_json_and_sums)
{
    const char *good[] = {
        "{\"name\": \"Lily\", \"age\": 7}",
        "{\"name\": \"Lily\", \"age\": 7, \"pet\": \"cat\", \"toy\": \"kite\", \"color\": \"red\", "
        "\"active\": true, \"friends\": [\"Tom\", \"Mia\"]}",
        " {\"age\":12,\"name\":\"Tom\" ,\"active\" : false} ",      /* any order, any spacing */
    };
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        ck_assert_msg(llm_grammar_accepts(good[i]) == 1, "%s", good[i]);
        ck_assert_int_eq(llm_json_viable_prefix(good[i], strlen(good[i])), 1);
        for (size_t k = 0; k < strlen(good[i]); k++)   /* every prefix is viable */
            if (!llm_json_viable_prefix(good[i], k))
                ck_abort_msg("prefix %zu of %s", k, good[i]);
    }
    struct { const char *s; int want; } bad[] = {
        {"{\"name\": \"Lily\", \"age\": 7", -1},              /* broken JSON */
        {"{\"name\": \"Lily\" \"age\": 7}", -1},
        {"{\"name\": \"Lily\", \"age\": 7,}", -1},
        {"{\"name\": Lily, \"age\": 7}", -1},
        {"{\"name\": \"Lily\", \"age\": 07}", -1},
        {"{\"name\": \"Lily\", \"age\": 7}}", -1},
        {"{\"name\": \"Li\x01ly\", \"age\": 7}", -1},
        {"{\"name\": \"Lily\", \"age\": \"7\"}", 0},          /* valid JSON, off schema */
        {"{\"name\": \"Lily\", \"age\": 70}", 0},
        {"{\"name\": \"Lily\", \"age\": 7.0}", 0},
        {"{\"name\": \"Lily\"}", 0},
        {"{\"name\": \"Lily\", \"age\": 7, \"age\": 8}", 0},
        {"{\"name\": \"Lily\", \"age\": 7, \"car\": \"red\"}", 0},
        {"{\"name\": \"Zed\", \"age\": 7}", 0},
        {"{\"name\": \"Lily\", \"age\": 7, \"pet\": \"ball\"}", 0},
        {"{\"name\": \"Lily\", \"age\": 7, \"friends\": [\"Lily\"]}", 0},
        {"{\"name\": \"Lily\", \"age\": 7, \"friends\": [\"Tom\", \"Tom\"]}", 0},
        {"{\"name\": \"Lily\", \"age\": 7, \"friends\": []}", 0},
        {"[1, 2]", 0},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ck_assert_msg(llm_json_record_check(bad[i].s, strlen(bad[i].s)) == bad[i].want, "%s",
                      bad[i].s);
        ck_assert_msg(llm_grammar_accepts(bad[i].s) == 0, "%s", bad[i].s);
    }
    ck_assert_int_eq(llm_json_viable_prefix("{\"a\" 1", 6), 0);
    ck_assert_int_eq(llm_json_viable_prefix("{\"a\": tx", 8), 0);
    ck_assert_int_eq(llm_json_viable_prefix("{\"a\": [1, tr", 12), 1);
    ck_assert_int_eq(llm_json_viable_prefix("", 0), 1);
    /* deep nesting is refused, not a stack overflow */
    size_t deep = 200000;
    char *d = malloc(deep);
    memset(d, '[', deep);
    ck_assert_int_eq(llm_json_record_check(d, deep), -1);
    ck_assert_int_eq(llm_json_viable_prefix(d, deep), 0);
    free(d);

    ck_assert_int_eq(llm_sum_check("12 + 7 = 19", 11), 1);
    ck_assert_int_eq(llm_sum_check("12 + 7 = 18", 11), 0);
    ck_assert_int_eq(llm_sum_check("12 - 7 = 5", 10), 1);
    ck_assert_int_eq(llm_sum_check("7 - 12 = 5", 10), 0);
    ck_assert_int_eq(llm_sum_check("12+7=19", 7), -1);
    ck_assert_int_eq(llm_sum_check("07 + 1 = 8", 10), -1);
    ck_assert_int_eq(llm_sum_check("1 + 1 = 2 ", 10), -1);
    ck_assert_int_eq(llm_sum_check("1 * 1 = 1", 9), -1);
    ck_assert_int_eq(llm_sum_check("9999999999 + 1 = 1", 19), -1);
    ck_assert_int_eq(llm_grammar_accepts("12 + 7 = 19"), 1);
    ck_assert_int_eq(llm_grammar_accepts("12 + 7 = 20"), 0);
    ck_assert_int_eq(llm_grammar_accepts("60 + 7 = 67"), 0);   /* right, but outside the grammar */
    /* every generated sum, with its result off by one, is rejected */
    char doc[LLM_DOC_MAX];
    int seen = 0;
    for (uint64_t i = 0; i < 400; i++) {
        llm_doc_info info;
        size_t n = llm_corpus_doc(5, LLM_SPLIT_VAL, i, doc, sizeof doc, &info);
        if (info.kind != LLM_DOC_SUMS)
            continue;
        size_t pos = 0, st, len;
        int complete;
        while (llm_grammar_next_unit(doc, n, &pos, &st, &len, &complete)) {
            char line[64], m[80];
            memcpy(line, doc + st, len);
            line[len] = 0;
            long a, b, c;
            char op;
            ck_assert_int_eq(sscanf(line, "%ld %c %ld = %ld", &a, &op, &b, &c), 4);
            ck_assert_int_eq(op == '+' ? a + b : a - b, c);
            snprintf(m, sizeof m, "%ld %c %ld = %ld", a, op, b, c + 1);
            ck_assert_int_eq(llm_grammar_accepts(m), 0);
            seen++;
        }
    }
    ck_assert_int_gt(seen, 50);
}
END_TEST

/* ---- BPE ---- */

static llm_tokenizer small_tok;

static void train_small(void)
{
    llm_corpus c;
    char err[256];
    ck_assert_int_eq(llm_corpus_generate(&c, 3, LLM_SPLIT_TRAIN, 0, 300000), 0);
    ck_assert_int_eq(llm_bpe_train(&small_tok, c.text, c.len, 512, err, sizeof err), 0);
    llm_corpus_free(&c);
}

static void roundtrip(const llm_tokenizer *t, const char *s, size_t n, const char *what)
{
    int *ids = malloc((n + 1) * sizeof(int));
    size_t k = llm_bpe_encode(t, s, n, ids);
    char *back = malloc(n + 1);
    long got = llm_bpe_decode(t, ids, k, back, n + 1);
    if (got != (long)n || memcmp(back, s, n) != 0)
        ck_abort_msg("%s: %zu bytes came back as %ld", what, n, got);
    if (k > n)
        ck_abort_msg("%s: %zu ids for %zu bytes", what, k, n);
    for (size_t i = 0; i < k; i++)
        if (ids[i] <= LLM_TOK_EOS || ids[i] >= t->vocab_size)
            ck_abort_msg("%s: id %d out of place", what, ids[i]);
    free(ids);
    free(back);
}

START_TEST(bpe_roundtrip_any_bytes)
{
    train_small();
    llm_tokenizer *t = &small_tok;
    ck_assert_int_eq(t->vocab_size, 512);
    ck_assert_int_eq(t->nmerges, 512 - 259);
    roundtrip(t, "", 0, "empty");
    const char *adv[] = {"<0x41>", "<s>", "</s>", "<unk>", "<0x0A><0x00>", "<0x", "<0x4",
                         "  Once upon a time,  ", "\n\n\n", "{\"name\": \"Lily\"}",
                         "\xc3\xa9t\xc3\xa9", "\xe2\x82\xac\x80\x80\x80\x80\x80", "\xff\xfe\xc0",
                         "a\x80\x80\x80\x80\x80\x80", "\xf0\x9f\x98\x80 emoji"};
    for (size_t i = 0; i < sizeof adv / sizeof adv[0]; i++)
        roundtrip(t, adv[i], strlen(adv[i]), adv[i]);
    roundtrip(t, "a\0b\0\0c", 6, "NULs");
    /* every piece of the vocabulary, back to back, and each piece alone */
    char all[8192];
    size_t n = 0;
    for (int i = 0; i < t->vocab_size; i++) {
        memcpy(all + n, t->piece[i], (size_t)t->piece_len[i]);
        n += (size_t)t->piece_len[i];
        roundtrip(t, t->piece[i], (size_t)t->piece_len[i], "piece");
    }
    roundtrip(t, all, n, "all pieces");
    /* random bytes, random ASCII, long runs */
    uint64_t x = 88172645463325252ull;
    for (int rep = 0; rep < 200; rep++) {
        size_t len = (size_t)(rep * 37 % 900);
        char buf[1000];
        for (size_t i = 0; i < len; i++) {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            buf[i] = rep % 2 ? (char)(x & 0xff) : (char)(0x20 + x % 95);
        }
        roundtrip(t, buf, len, rep % 2 ? "random bytes" : "random ascii");
    }
    size_t big = 1 << 20;
    char *run = malloc(big);
    memset(run, 'a', big);
    roundtrip(t, run, big, "1 MiB of a");
    memset(run, ' ', big);
    roundtrip(t, run, big, "1 MiB of spaces");
    memset(run, 0, big);
    roundtrip(t, run, big, "1 MiB of NUL");
    for (size_t i = 0; i < big; i++)
        run[i] = "the "[i % 4];
    roundtrip(t, run, big, "1 MiB of 'the '");
    free(run);
    int bad[2] = {5, 512};
    ck_assert_int_eq(llm_bpe_decode(t, bad, 2, NULL, 0), -1);
    llm_tokenizer_free(t);
}
END_TEST

/* llama2.c's run.c encode loop, written out naively: code points looked up whole (else one id
 * per byte, +3), then repeatedly merge the leftmost best-scoring pair whose joined pieces are
 * a piece, by linear search. */
static int ref_lookup(const llm_tokenizer *t, const char *s, int len)
{
    for (int i = 0; i < t->vocab_size; i++)
        if (t->piece_len[i] == len && memcmp(t->piece[i], s, (size_t)len) == 0)
            return i;
    return -1;
}

static size_t ref_encode(const llm_tokenizer *t, const char *text, int *tokens)
{
    char buf[64];
    size_t nt = 0;
    int sl = 0;
    for (const char *c = text; *c; c++) {
        if ((*c & 0xC0) != 0x80)
            sl = 0;
        buf[sl++] = *c;
        if ((*(c + 1) & 0xC0) == 0x80 && sl < 4)
            continue;
        int id = ref_lookup(t, buf, sl);
        if (id != -1)
            tokens[nt++] = id;
        else
            for (int i = 0; i < sl; i++)
                tokens[nt++] = (unsigned char)buf[i] + 3;
        sl = 0;
    }
    for (;;) {
        float best = -1e10f;
        int best_id = -1;
        size_t best_i = 0;
        for (size_t i = 0; i + 1 < nt; i++) {
            int la = t->piece_len[tokens[i]], lb = t->piece_len[tokens[i + 1]];
            memcpy(buf, t->piece[tokens[i]], (size_t)la);
            memcpy(buf + la, t->piece[tokens[i + 1]], (size_t)lb);
            int id = ref_lookup(t, buf, la + lb);
            if (id != -1 && t->score[id] > best) {
                best = t->score[id];
                best_id = id;
                best_i = i;
            }
        }
        if (best_id < 0)
            break;
        tokens[best_i] = best_id;
        memmove(tokens + best_i + 1, tokens + best_i + 2, (nt - best_i - 2) * sizeof(int));
        nt--;
    }
    return nt;
}

START_TEST(bpe_matches_llama2c_encode)
{
    train_small();
    llm_tokenizer *t = &small_tok;
    char doc[LLM_DOC_MAX + 2];
    int a[LLM_DOC_MAX + 2], b[LLM_DOC_MAX + 2];
    for (uint64_t i = 0; i < 60; i++) {
        doc[0] = ' ';
        size_t n = llm_corpus_doc(77, LLM_SPLIT_VAL, i, doc + 1, LLM_DOC_MAX, NULL) + 1;
        size_t ka = llm_bpe_encode(t, doc, n, a);
        size_t kb = ref_encode(t, doc, b);
        if (ka != kb || memcmp(a, b, ka * sizeof(int)) != 0)
            ck_abort_msg("doc %llu: %zu ids vs llama2.c's %zu", (unsigned long long)i, ka, kb);
        /* the prompt form is BOS + the same */
        size_t kp = llm_bpe_encode_prompt(t, doc + 1, n - 1, 1, a);
        ck_assert_uint_eq(kp, kb + 1);
        ck_assert_int_eq(a[0], LLM_TOK_BOS);
        ck_assert(memcmp(a + 1, b, kb * sizeof(int)) == 0);
    }
    /* runs of one character whose doubled piece is a token ("ll", "\n\n", "  "...): in
     * "lll" the pairs (0,1) and (1,2) tie, and run.c merges the leftmost; corpus text and
     * random bytes hold too few such runs to tell left from right */
    int doubled = 0;
    for (int id = 259; id < t->vocab_size; id++) {
        if (t->piece_len[id] != 2 || t->piece[id][0] != t->piece[id][1])
            continue;
        doubled++;
        char ch = t->piece[id][0];
        for (int k = 2; k <= 9; k++)
            for (int form = 0; form < 4; form++) {
                char s[32];
                size_t n = 0;
                if (form & 1)
                    s[n++] = form & 2 ? 'a' : ' ';
                for (int i = 0; i < k; i++)
                    s[n++] = ch;
                if (form & 2)
                    s[n++] = form & 1 ? '.' : 'e';
                s[n] = 0;
                size_t ka = llm_bpe_encode(t, s, n, a);
                size_t kb = ref_encode(t, s, b);
                if (ka != kb || memcmp(a, b, ka * sizeof(int)) != 0)
                    ck_abort_msg("run of %d x '%s' (form %d): %zu ids vs llama2.c's %zu, first "
                                 "%d vs %d", k, ch == '\n' ? "\\n" : t->piece[id] + 1, form,
                                 ka, kb, a[0], b[0]);
            }
    }
    printf("bpe: %d doubled pieces tried in runs of 2..9\n", doubled);
    ck_assert_msg(doubled >= 3, "only %d doubled pieces: the tie test proves little", doubled);
    uint64_t x = 1;
    for (int rep = 0; rep < 40; rep++) {   /* random text over the corpus' alphabet and more */
        char s[300];
        for (int i = 0; i < 299; i++) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            s[i] = (char)(1 + (x >> 33) % 255);
        }
        s[299] = 0;
        size_t ka = llm_bpe_encode(t, s, 299, a);
        size_t kb = ref_encode(t, s, b);
        if (ka != kb || memcmp(a, b, ka * sizeof(int)) != 0)
            ck_abort_msg("random %d: %zu ids vs llama2.c's %zu", rep, ka, kb);
    }
    llm_tokenizer_free(t);
}
END_TEST

START_TEST(bpe_vocabulary_layout)
{
    train_small();
    llm_tokenizer *t = &small_tok, t2;
    ck_assert_str_eq(t->piece[0], "<unk>");
    ck_assert_str_eq(t->piece[1], "<s>");
    ck_assert_str_eq(t->piece[2], "</s>");
    for (int b = 0; b < 256; b++) {
        const char *p = t->piece[3 + b];
        unsigned char v;
        int lit = (b >= 0x20 && b <= 0x7e) || b == '\n';
        if (lit) {
            ck_assert_int_eq(t->piece_len[3 + b], 1);
            ck_assert_int_eq((unsigned char)p[0], b);
        } else {
            ck_assert_int_eq(sscanf(p, "<0x%02hhX>", &v), 1);   /* run.c's decode rule */
            ck_assert_int_eq(v, b);
        }
    }
    for (int i = 259; i < t->vocab_size; i++) {
        unsigned char v;
        ck_assert_int_ne(sscanf(t->piece[i], "<0x%02hhX>", &v), 1);
        ck_assert_int_ge(t->piece_len[i], 2);
        ck_assert(t->score[i] == -(float)(i - 259));
        for (int k = 0; k < t->piece_len[i]; k++) {
            char c = t->piece[i][k];
            ck_assert_msg(!(c >= '0' && c <= '9'), "digit merged in '%s'", t->piece[i]);
        }
    }
    for (int i = 0; i < t->vocab_size; i++)       /* unique: run.c looks pieces up by bsearch */
        for (int j = 0; j < i; j++)
            ck_assert(!(t->piece_len[i] == t->piece_len[j] &&
                        memcmp(t->piece[i], t->piece[j], (size_t)t->piece_len[i]) == 0));
    ck_assert_int_ge(llm_tokenizer_lookup(t, " ", 1), 0);   /* run.c's dummy prefix */
    /* the same text trains the same tokenizer */
    llm_corpus c;
    char err[256];
    ck_assert_int_eq(llm_corpus_generate(&c, 3, LLM_SPLIT_TRAIN, 0, 300000), 0);
    ck_assert_int_eq(llm_bpe_train(&t2, c.text, c.len, 512, err, sizeof err), 0);
    for (int i = 0; i < t->vocab_size; i++)
        ck_assert(t->piece_len[i] == t2.piece_len[i] &&
                  memcmp(t->piece[i], t2.piece[i], (size_t)t->piece_len[i]) == 0);
    llm_tokenizer_free(&t2);
    /* a tiny text stops early instead of inventing merges */
    ck_assert_int_eq(llm_bpe_train(&t2, "ab ab", 5, 512, err, sizeof err), 0);
    ck_assert_int_lt(t2.vocab_size, 262);
    llm_tokenizer_free(&t2);
    ck_assert_int_eq(llm_bpe_train(&t2, "x", 1, 100, err, sizeof err), -1);
    llm_corpus_free(&c);
    llm_tokenizer_free(t);
}
END_TEST

/* ---- tokenizer.bin ---- */

START_TEST(tokfile_roundtrip_and_runc_layout)
{
    mk_tmp();
    train_small();
    llm_tokenizer *t = &small_tok, r;
    char err[256], *path = tpath("tokenizer.bin");
    ck_assert_int_eq(llm_tokfile_write(path, t, err, sizeof err), 0);
    /* read it the way run.c does: max_token_length, then score, len, bytes per id */
    size_t n;
    unsigned char *b = slurp(path, &n), *p = b;
    int32_t mtl;
    memcpy(&mtl, p, 4);
    p += 4;
    ck_assert_int_eq(mtl, t->max_token_length);
    for (int i = 0; i < t->vocab_size; i++) {
        float sc;
        int32_t len;
        memcpy(&sc, p, 4);
        memcpy(&len, p + 4, 4);
        ck_assert(sc == t->score[i]);
        ck_assert_int_eq(len, t->piece_len[i]);
        ck_assert_int_le(len, mtl);
        ck_assert(memcmp(p + 8, t->piece[i], (size_t)len) == 0);
        p += 8 + len;
    }
    ck_assert_uint_eq((size_t)(p - b), n);
    ck_assert(t->score[0] < -1e10f && t->score[1] < -1e10f && t->score[2] < -1e10f);
    /* (run.c merges only pieces scoring above -1e10: the specials never come out of a merge) */
    free(b);
    for (int pass = 0; pass < 2; pass++) {
        ck_assert_int_eq(llm_tokfile_read(path, pass ? 0 : t->vocab_size, &r, err, sizeof err), 0);
        ck_assert_int_eq(r.vocab_size, t->vocab_size);
        ck_assert_int_eq(r.nmerges, t->nmerges);
        for (int i = 0; i < t->vocab_size; i++) {
            ck_assert(r.score[i] == t->score[i]);
            ck_assert_int_eq(r.bytes_len[i], t->bytes_len[i]);
            ck_assert(memcmp(r.bytes[i], t->bytes[i], (size_t)r.bytes_len[i]) == 0);
        }
        const char *s = " Once upon a time, there was a girl named Lily. \x01\xff";
        int ia[128], ib[128];
        size_t ka = llm_bpe_encode(t, s, strlen(s), ia), kb = llm_bpe_encode(&r, s, strlen(s), ib);
        ck_assert_uint_eq(ka, kb);
        ck_assert(memcmp(ia, ib, ka * sizeof(int)) == 0);
        llm_tokenizer_free(&r);
    }
    /* fewer entries than asked for, or bytes left over */
    ck_assert_int_eq(llm_tokfile_read(path, t->vocab_size + 1, &r, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "truncated") != NULL, "%s", err);
    ck_assert_int_eq(llm_tokfile_read(path, t->vocab_size - 1, &r, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "bytes after") != NULL, "%s", err);
    llm_tokenizer_free(t);
    rm_tmp();
}
END_TEST

START_TEST(tokfile_rejects_corrupt)
{
    mk_tmp();
    llm_tokenizer r;
    char err[256];
    struct { const char *name; unsigned char bytes[32]; size_t n; const char *msg; } cases[] = {
        {"empty", {0}, 0, "truncated"},
        {"zero mtl", {0, 0, 0, 0}, 4, "max_token_length 0"},
        {"neg len", {8, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff}, 12, "length -1"},
        {"long len", {2, 0, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 'a', 'b', 'c'}, 15, "length 3"},
        {"cut piece", {8, 0, 0, 0, 0, 0, 0, 0, 5, 0, 0, 0, 'a', 'b'}, 14, "truncated inside"},
        {"cut entry", {8, 0, 0, 0, 0, 0, 0}, 7, "truncated at token 0"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *path = tpath(cases[i].name);
        write_bytes(path, cases[i].bytes, cases[i].n);
        ck_assert_int_eq(llm_tokfile_read(path, 0, &r, err, sizeof err) == 0 && cases[i].n == 0
                             ? -1 : llm_tokfile_read(path, 3, &r, err, sizeof err), -1);
        ck_assert_msg(strstr(err, cases[i].msg) && strstr(err, path), "%s: %s", cases[i].name,
                      err);
    }
    ck_assert_int_eq(llm_tokfile_read(tmpdir, 3, &r, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "directory") != NULL, "%s", err);
    ck_assert_int_eq(llm_tokfile_read("/dev/zero", 3, &r, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "not a regular file") != NULL, "%s", err);
    ck_assert_int_eq(llm_tokfile_read(tpath("missing"), 3, &r, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "cannot open") != NULL, "%s", err);
    rm_tmp();
}
END_TEST

/* ---- model .bin ---- */

static const llm_config tiny = {8, 16, 2, 2, 1, 12, 4, 1, 0, 0};

/* Tensor sizes of the tiny model, worked out by hand: head_size 4, kv_dim 4. */
static const size_t tiny_sizes[13] = {
    12 * 8,       /* token_embedding [12, 8] */
    2 * 8,        /* rms_att [2, 8] */
    2 * 8 * 8,    /* wq */
    2 * 4 * 8,    /* wk [2, kv_dim 4, 8] */
    2 * 4 * 8,    /* wv */
    2 * 8 * 8,    /* wo */
    2 * 8,        /* rms_ffn */
    2 * 16 * 8,   /* w1 */
    2 * 8 * 16,   /* w2 */
    2 * 16 * 8,   /* w3 */
    8,            /* rms_final */
    4 * 2,        /* freq_cis_real [seq 4, head_size/2 = 2] */
    4 * 2,        /* freq_cis_imag */
};

static float known(int tensor, size_t i)
{
    return (float)tensor * 100.0f + (float)i * 0.25f - 3.0f;
}

/* The expected file, laid out independently of checkpoint.c. */
static unsigned char *expected_file(int shared, size_t *n)
{
    size_t floats = 0;
    for (int k = 0; k < 13; k++)
        floats += tiny_sizes[k];
    if (!shared)
        floats += 12 * 8;
    *n = 28 + 4 * floats;
    unsigned char *b = malloc(*n), *p = b;
    int32_t h[7] = {8, 16, 2, 2, 1, shared ? 12 : -12, 4};
    memcpy(p, h, 28);
    p += 28;
    for (int k = 0; k < 13; k++)
        for (size_t i = 0; i < tiny_sizes[k]; i++) {
            float v;
            if (k == 11 || k == 12) {              /* RoPE: pos = i / 2, pair j = i % 2 */
                double theta = pow(10000.0, -(double)(2 * (i % 2)) / 4.0) * (double)(i / 2);
                v = (float)(k == 11 ? cos(theta) : sin(theta));
            } else {
                v = known(k, i);
            }
            memcpy(p, &v, 4);
            p += 4;
        }
    if (!shared)
        for (size_t i = 0; i < 12 * 8; i++) {
            float v = known(13, i);
            memcpy(p, &v, 4);
            p += 4;
        }
    return b;
}

static void fill_known(llm_weights *w)
{
    float *t[14] = {w->token_embedding, w->rms_att, w->wq, w->wk, w->wv, w->wo, w->rms_ffn,
                    w->w1, w->w2, w->w3, w->rms_final, NULL, NULL, w->wcls};
    for (int k = 0; k < 14; k++) {
        if (!t[k] || (k == 13 && w->wcls == w->token_embedding))
            continue;
        for (size_t i = 0; i < (k == 13 ? 96 : tiny_sizes[k]); i++)
            t[k][i] = known(k, i);
    }
}

START_TEST(checkpoint_bytes_exact)
{
    mk_tmp();
    for (int shared = 1; shared >= 0; shared--) {
        llm_config c = tiny;
        c.shared_classifier = shared;
        llm_weights w, r;
        llm_config rc;
        char err[256], *path = tpath(shared ? "tiny.bin" : "tiny-unshared.bin");
        ck_assert_int_eq(llm_weights_alloc(&w, &c, err, sizeof err), 0);
        ck_assert_ptr_eq(w.wq, w.token_embedding + 96 + 16);
        ck_assert(shared ? w.wcls == w.token_embedding : w.wcls == w.freq_cis_imag + 8);
        fill_known(&w);
        ck_assert_int_eq(llm_checkpoint_write(path, &c, &w, err, sizeof err), 0);
        size_t n, en;
        unsigned char *got = slurp(path, &n), *want = expected_file(shared, &en);
        ck_assert_uint_eq(n, en);
        for (size_t i = 0; i < n; i++) {
            if (i >= 28 + 4 * (96 + 16 + 128 + 64 + 64 + 128 + 16 + 256 * 3 + 8) &&
                i < 28 + 4 * (96 + 16 + 128 + 64 + 64 + 128 + 16 + 256 * 3 + 8 + 16)) {
                float a, b;                        /* RoPE: libm may round differently */
                size_t o = i - (i - 28) % 4;
                memcpy(&a, got + o, 4);
                memcpy(&b, want + o, 4);
                if (fabsf(a - b) > 1e-6f)
                    ck_abort_msg("rope float at %zu: %g vs %g", o, a, b);
                continue;
            }
            if (got[i] != want[i])
                ck_abort_msg("byte %zu: %02x, expected %02x (shared %d)", i, got[i], want[i],
                             shared);
        }
        /* llama2.c's size rule: 28 + 4·(params + seq·head_size) */
        size_t params = 96 + 16 + 128 + 64 + 64 + 128 + 16 + 256 * 3 + 8 + (shared ? 0 : 96);
        ck_assert_uint_eq(llm_param_count(&c), params);
        ck_assert_uint_eq(llm_file_bytes(&c), 28 + 4 * (params + 16));
        ck_assert_int_eq(llm_checkpoint_read(path, &rc, &r, err, sizeof err), 0);
        ck_assert_int_eq(rc.head_size, 4);
        ck_assert_int_eq(rc.kv_dim, 4);
        ck_assert_int_eq(rc.vocab_size, 12);
        ck_assert_int_eq(rc.shared_classifier, shared);
        ck_assert(memcmp(r.mem, w.mem, w.n_floats * 4) == 0);
        ck_assert(shared ? r.wcls == r.token_embedding : r.wcls[5] == known(13, 5));
        ck_assert(llm_weights_hash(&r) == llm_weights_hash(&w));
        size_t off[12], len[12];
        int nr = llm_weights_param_ranges(&c, off, len);
        ck_assert_int_eq(nr, shared ? 11 : 12);
        size_t sum = 0;
        for (int k = 0; k < nr; k++)
            sum += len[k];
        ck_assert_uint_eq(sum, params);
        ck_assert_uint_eq(off[10], 96 + 16 + 128 + 64 + 64 + 128 + 16 + 256 * 3);
        free(got);
        free(want);
        llm_weights_free(&w);
        llm_weights_free(&r);
    }
    rm_tmp();
}
END_TEST

static void expect_reject(const char *path, const char *msg)
{
    llm_config c;
    llm_weights w;
    char err[256];
    ck_assert_int_eq(llm_checkpoint_read(path, &c, &w, err, sizeof err), -1);
    ck_assert_ptr_null(w.mem);
    ck_assert_msg(strstr(err, msg) != NULL && strstr(err, path) == err, "want '%s': %s", msg,
                  err);
    ck_assert_ptr_null(strchr(err, '\n'));
}

START_TEST(checkpoint_rejects_bad_files)
{
    mk_tmp();
    size_t n;
    unsigned char *good = expected_file(1, &n), *b = malloc(n + 8);
    char *path = tpath("bad.bin");
    write_bytes(path, good, n - 4);
    expect_reject(path, "truncated");
    memcpy(b, good, n);
    memset(b + n, 0, 8);
    write_bytes(path, b, n + 1);
    expect_reject(path, "wrong size");
    write_bytes(path, good, 10);
    expect_reject(path, "the header alone");
    struct { int field; int32_t v; const char *msg; } hdr[] = {
        {0, 0, "dim 0 out of range"},          {0, -8, "dim -8 out of range"},
        {0, 1 << 30, "dim 1073741824 out of range"}, {2, 0, "n_layers 0"},
        {3, 3, "n_heads 3 does not divide dim 8"}, {4, 2, "n_kv_heads 2 does not divide n_heads 2"},
        {4, 0, "n_kv_heads 0"},                {5, 0, "vocab_size 0"},
        {5, INT32_MIN, "vocab_size 0"},        {6, -4, "seq_len -4"},
        {3, 8, "head_size 1"},                 {1, 1 << 17, "needs 25167996"},
        {6, 1 << 20, "truncated"},
    };
    for (size_t i = 0; i < sizeof hdr / sizeof hdr[0]; i++) {
        memcpy(b, good, n);
        memcpy(b + 4 * hdr[i].field, &hdr[i].v, 4);
        if (hdr[i].field == 4 && hdr[i].v == 2) {       /* 2 kv heads over 2 heads is fine... */
            int32_t one = 1;                            /* ...so make n_heads 1 */
            memcpy(b + 12, &one, 4);
            hdr[i].msg = "n_kv_heads 2 does not divide n_heads 1";
        }
        write_bytes(path, b, n);
        expect_reject(path, hdr[i].msg);
    }
    memcpy(b, good, n);
    float nan = NAN;
    memcpy(b + 28 + 40, &nan, 4);
    write_bytes(path, b, n);
    expect_reject(path, "not finite");
    expect_reject(tmpdir, "directory");
    expect_reject("/dev/zero", "not a regular file");
    expect_reject(tpath("nope.bin"), "cannot open");
    /* a failed write leaves the good file alone and no temporary behind */
    llm_config c = tiny;
    llm_weights w;
    char err[256];
    ck_assert_int_eq(llm_weights_alloc(&w, &c, err, sizeof err), 0);
    write_bytes(path, good, n);
    c.dim = 7;
    ck_assert_int_eq(llm_checkpoint_write(path, &c, &w, err, sizeof err), -1);
    size_t n2;
    unsigned char *still = slurp(path, &n2);
    ck_assert(n2 == n && memcmp(still, good, n) == 0);
    ck_assert_int_eq(llm_checkpoint_write(tpath("nodir/x.bin"), &tiny, &w, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "cannot create") != NULL, "%s", err);
    free(still);
    llm_weights_free(&w);
    free(good);
    free(b);
    rm_tmp();
}
END_TEST

START_TEST(train_state_roundtrip_and_checks)
{
    mk_tmp();
    llm_config c = tiny;
    llm_train_state s, r;
    char err[256], *path = tpath("tiny.train");
    ck_assert_int_eq(llm_train_state_alloc(&s, &c), 0);
    ck_assert_uint_eq(s.n, llm_param_count(&c));
    for (size_t i = 0; i < s.n; i++) {
        s.m[i] = (float)i * 0.5f;
        s.v[i] = (float)i * 0.125f + 1.0f;
    }
    s.step = 1234;
    s.tokens_seen = 5678901234ull;
    s.data_pos = 42;
    s.rng_key = 0xdeadbeefcafef00dull;
    s.rng_ctr = 77;
    s.lr = 3e-4f;
    s.beta1 = 0.9f;
    s.beta2 = 0.95f;
    s.eps = 1e-8f;
    s.weight_decay = 0.1f;
    s.weights_hash = 0x1122334455667788ull;
    ck_assert_int_eq(llm_train_state_write(path, &c, &s, err, sizeof err), 0);
    ck_assert_int_eq(llm_train_state_read(path, &c, &r, err, sizeof err), 0);
    ck_assert(r.step == 1234 && r.tokens_seen == 5678901234ull && r.data_pos == 42);
    ck_assert(r.rng_key == s.rng_key && r.rng_ctr == 77 && r.weights_hash == s.weights_hash);
    ck_assert(r.lr == s.lr && r.beta2 == s.beta2 && r.weight_decay == s.weight_decay);
    ck_assert(memcmp(r.m, s.m, s.n * 4) == 0 && memcmp(r.v, s.v, s.n * 4) == 0);
    llm_train_state_free(&r);
    size_t n;
    unsigned char *b = slurp(path, &n);
    ck_assert_uint_eq(n, 136 + 8 * s.n + 8);
    ck_assert(memcmp(b, "MLSYSTRN", 8) == 0);
    b[200] ^= 1;
    write_bytes(path, b, n);
    ck_assert_int_eq(llm_train_state_read(path, &c, &r, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "checksum") != NULL, "%s", err);
    b[200] ^= 1;
    write_bytes(path, b, n - 3);
    ck_assert_int_eq(llm_train_state_read(path, &c, &r, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "truncated") != NULL, "%s", err);
    b[0] = 'X';
    write_bytes(path, b, n);
    ck_assert_int_eq(llm_train_state_read(path, &c, &r, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "magic") != NULL, "%s", err);
    b[0] = 'M';
    write_bytes(path, b, n);
    llm_config other = c;
    other.n_layers = 3;
    ck_assert_int_eq(llm_train_state_read(path, &other, &r, err, sizeof err), -1);
    other = c;
    other.seq_len = 8;                  /* same number of moments, another shape */
    ck_assert_int_eq(llm_train_state_read(path, &other, &r, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "another model shape") != NULL, "%s", err);
    ck_assert_int_eq(llm_train_state_read(path, &c, &r, err, sizeof err), 0);
    llm_train_state_free(&r);
    free(b);
    llm_train_state_free(&s);
    rm_tmp();
}
END_TEST

/* ---- data kit ---- */

START_TEST(datakit_reproducible)
{
    mk_tmp();
    llm_datakit a, b;
    llm_datakit_opts o = {11, 200000, 30000, 400};
    char err[256];
    ck_assert_int_eq(llm_datakit_build(&a, &o, err, sizeof err), 0);
    ck_assert_int_eq(llm_datakit_build(&b, &o, err, sizeof err), 0);
    ck_assert_int_eq(a.tok.vocab_size, 400);
    ck_assert_uint_eq(a.n_train_ids, b.n_train_ids);
    ck_assert(memcmp(a.train_ids, b.train_ids, a.n_train_ids * sizeof(int)) == 0);
    ck_assert(memcmp(a.val_ids, b.val_ids, a.n_val_ids * sizeof(int)) == 0);
    /* per document: BOS, then " " + doc; decoding gives the text back */
    size_t k = 0;
    char buf[LLM_DOC_MAX + 2];
    for (size_t d = 0; d < a.val.ndocs; d++) {
        ck_assert_int_eq(a.val_ids[k], LLM_TOK_BOS);
        size_t e = k + 1;
        while (e < a.n_val_ids && a.val_ids[e] != LLM_TOK_BOS)
            e++;
        long n = llm_bpe_decode(&a.tok, a.val_ids + k + 1, e - k - 1, buf, sizeof buf);
        size_t len = llm_corpus_doc_len(&a.val, d);
        if (n != (long)len + 1 || buf[0] != ' ' ||
            memcmp(buf + 1, a.val.text + a.val.off[d], len) != 0)
            ck_abort_msg("val doc %zu does not decode back", d);
        k = e;
    }
    ck_assert_uint_eq(k, a.n_val_ids);
    ck_assert(a.val_bytes_per_token > 1.5 && a.val_bytes_per_token < 8.0);
    ck_assert_int_eq(llm_ids_write_u16(tpath("val.u16"), a.val_ids, a.n_val_ids, err,
                                       sizeof err), 0);
    size_t n;
    unsigned char *u = slurp(tpath("val.u16"), &n);
    ck_assert_uint_eq(n, 2 * a.n_val_ids);
    ck_assert_int_eq(u[0] | u[1] << 8, a.val_ids[0]);
    ck_assert_int_eq(u[2] | u[3] << 8, a.val_ids[1]);
    free(u);
    llm_datakit_free(&a);
    llm_datakit_free(&b);
    rm_tmp();
}
END_TEST

static Suite *llm_data_suite(void)
{
    Suite *s = suite_create("llm_data");
    TCase *c = tcase_create("corpus");
    tcase_set_timeout(c, 60);
    tcase_add_test(c, corpus_same_seed_same_bytes);
    tcase_add_test(c, grammar_accepts_everything_generated);
    tcase_add_test(c, grammar_rejects_mutations);
    tcase_add_test(c, grammar_json_and_sums);
    suite_add_tcase(s, c);
    TCase *b = tcase_create("bpe");
    tcase_set_timeout(b, 60);
    tcase_add_test(b, bpe_roundtrip_any_bytes);
    tcase_add_test(b, bpe_matches_llama2c_encode);
    tcase_add_test(b, bpe_vocabulary_layout);
    tcase_add_test(b, tokfile_roundtrip_and_runc_layout);
    tcase_add_test(b, tokfile_rejects_corrupt);
    suite_add_tcase(s, b);
    TCase *m = tcase_create("model-files");
    tcase_set_timeout(m, 60);
    tcase_add_test(m, checkpoint_bytes_exact);
    tcase_add_test(m, checkpoint_rejects_bad_files);
    tcase_add_test(m, train_state_roundtrip_and_checks);
    tcase_add_test(m, datakit_reproducible);
    suite_add_tcase(s, m);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(llm_data_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
