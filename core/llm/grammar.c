/* grammar.c - the acceptor: says whether a sentence or line is one the corpus grammar could
 * produce. Story sentences are matched against the templates of grammar_tables.h (a slot
 * matches any word of its class); JSON lines go through a small strict JSON parser and then
 * the record schema; sums are checked for form and arithmetic. `model info` uses the share
 * of accepted units of generated text as its quality figure. */
#include "llm.h"
#include "grammar_tables.h"

#include <string.h>

/* ---- story sentences ---- */

/* Does s[0..end) match template t from here on? Slots try each word of their class
 * (classes are small and templates short, so plain backtracking is cheap). */
static int match(const char *t, const char *s, const char *end)
{
    while (*t) {
        if (*t == '{') {
            const char *close = strchr(t, '}');
            const llm_word_class *c = llm_find_class(t + 1, (int)(close - t - 1));
            if (!c)
                return 0;
            for (int i = 0; i < c->n; i++) {
                size_t wl = strlen(c->words[i]);
                if ((size_t)(end - s) >= wl && memcmp(s, c->words[i], wl) == 0 &&
                    match(close + 1, s + wl, end))
                    return 1;
            }
            return 0;
        }
        if (s == end || *s != *t)
            return 0;
        s++;
        t++;
    }
    return s == end;
}

static int story_accepts(const char *s, size_t n)
{
    for (int b = 0; b < llm_n_beats; b++)
        for (int i = 0; i < llm_beats[b].n; i++)
            if (match(llm_beats[b].templates[i], s, s + n))
                return 1;
    return 0;
}

/* ---- JSON: a strict recursive-descent parser that tells "bad" from "ran out of input" ---- */
enum { J_OK = 0, J_MORE = 1, J_BAD = 2 };
enum { JT_STR, JT_NUM, JT_TRUE, JT_FALSE, JT_NULL, JT_ARR, JT_OBJ };
#define J_MAX_DEPTH 64
#define J_STR_MAX 64
#define J_ARR_MAX 8

typedef struct jval {
    int type;
    char str[J_STR_MAX];       /* decoded string (JT_STR), truncated: str_long set */
    int str_len, str_long;
    int is_int;                /* JT_NUM: digits only (no sign, fraction, exponent) */
    long num;                  /* its value when is_int and short enough, else -1 */
    int n_items, items_all_str; /* JT_ARR */
    char items[J_ARR_MAX][J_STR_MAX];
    int item_len[J_ARR_MAX];
} jval;

typedef struct jparser {
    const char *s;
    size_t n, i;
} jparser;

typedef struct jmember {
    char key[J_STR_MAX];
    int key_len, key_long;
    jval val;
} jmember;
#define J_MEMBERS_MAX 16

static void skip_ws(jparser *p)
{
    while (p->i < p->n && (p->s[p->i] == ' ' || p->s[p->i] == '\t' || p->s[p->i] == '\n' ||
                           p->s[p->i] == '\r'))
        p->i++;
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* A string at p->i (the opening quote). Decoded bytes go to out (cap J_STR_MAX); \u escapes
 * are checked but kept as '?' (the schema has no use for them). */
static int parse_string(jparser *p, char *out, int *len, int *is_long)
{
    int k = 0;
    *is_long = 0;
    p->i++;
    for (;;) {
        if (p->i >= p->n)
            return J_MORE;
        unsigned char c = (unsigned char)p->s[p->i++];
        if (c == '"')
            break;
        if (c < 0x20)
            return J_BAD;
        if (c == '\\') {
            if (p->i >= p->n)
                return J_MORE;
            char e = p->s[p->i++];
            switch (e) {
            case '"': c = '"'; break;
            case '\\': c = '\\'; break;
            case '/': c = '/'; break;
            case 'b': c = '\b'; break;
            case 'f': c = '\f'; break;
            case 'n': c = '\n'; break;
            case 'r': c = '\r'; break;
            case 't': c = '\t'; break;
            case 'u':
                for (int h = 0; h < 4; h++) {
                    if (p->i >= p->n)
                        return J_MORE;
                    if (hexval(p->s[p->i++]) < 0)
                        return J_BAD;
                }
                c = '?';
                break;
            default: return J_BAD;
            }
        }
        if (k < J_STR_MAX - 1)
            out[k++] = (char)c;
        else
            *is_long = 1;
    }
    out[k] = '\0';
    *len = k;
    return J_OK;
}

static int is_digit(char c)
{
    return c >= '0' && c <= '9';
}

static int parse_number(jparser *p, jval *v)
{
    size_t start = p->i;
    int plain = 1;
    if (p->s[p->i] == '-') {
        plain = 0;
        if (++p->i >= p->n)
            return J_MORE;
    }
    if (!is_digit(p->s[p->i]))
        return J_BAD;
    if (p->s[p->i] == '0') {
        p->i++;
    } else {
        while (p->i < p->n && is_digit(p->s[p->i]))
            p->i++;
    }
    if (p->i < p->n && p->s[p->i] == '.') {
        plain = 0;
        if (++p->i >= p->n)
            return J_MORE;
        if (!is_digit(p->s[p->i]))
            return J_BAD;
        while (p->i < p->n && is_digit(p->s[p->i]))
            p->i++;
    }
    if (p->i < p->n && (p->s[p->i] == 'e' || p->s[p->i] == 'E')) {
        plain = 0;
        if (++p->i >= p->n)
            return J_MORE;
        if (p->s[p->i] == '+' || p->s[p->i] == '-')
            if (++p->i >= p->n)
                return J_MORE;
        if (!is_digit(p->s[p->i]))
            return J_BAD;
        while (p->i < p->n && is_digit(p->s[p->i]))
            p->i++;
    }
    v->type = JT_NUM;
    v->is_int = plain;
    v->num = -1;
    if (plain && p->i - start <= 9) {
        v->num = 0;
        for (size_t k = start; k < p->i; k++)
            v->num = v->num * 10 + (p->s[k] - '0');
    }
    return J_OK;
}

static int parse_literal(jparser *p, const char *word, int type, jval *v)
{
    size_t wl = strlen(word);
    for (size_t k = 0; k < wl; k++) {
        if (p->i + k >= p->n)
            return J_MORE;
        if (p->s[p->i + k] != word[k])
            return J_BAD;
    }
    p->i += wl;
    v->type = type;
    return J_OK;
}

static int parse_value(jparser *p, jval *v, int depth, jmember *members, int *nmembers);

/* Members of the outermost object are collected (for the schema) when members != NULL. */
static int parse_object(jparser *p, int depth, jmember *members, int *nmembers)
{
    p->i++;
    skip_ws(p);
    if (p->i >= p->n)
        return J_MORE;
    if (p->s[p->i] == '}') {
        p->i++;
        return J_OK;
    }
    for (;;) {
        skip_ws(p);
        if (p->i >= p->n)
            return J_MORE;
        if (p->s[p->i] != '"')
            return J_BAD;
        jmember scratch, *m = &scratch;
        if (members && *nmembers < J_MEMBERS_MAX)
            m = &members[*nmembers];
        int r = parse_string(p, m->key, &m->key_len, &m->key_long);
        if (r)
            return r;
        skip_ws(p);
        if (p->i >= p->n)
            return J_MORE;
        if (p->s[p->i++] != ':')
            return J_BAD;
        r = parse_value(p, &m->val, depth + 1, NULL, NULL);
        if (r)
            return r;
        if (members)
            (*nmembers)++;       /* counts past J_MEMBERS_MAX too: the schema rejects that */
        skip_ws(p);
        if (p->i >= p->n)
            return J_MORE;
        char c = p->s[p->i++];
        if (c == '}')
            return J_OK;
        if (c != ',')
            return J_BAD;
    }
}

static int parse_array(jparser *p, jval *v, int depth)
{
    p->i++;
    v->type = JT_ARR;
    v->n_items = 0;
    v->items_all_str = 1;
    skip_ws(p);
    if (p->i >= p->n)
        return J_MORE;
    if (p->s[p->i] == ']') {
        p->i++;
        return J_OK;
    }
    for (;;) {
        jval item;
        int r = parse_value(p, &item, depth + 1, NULL, NULL);
        if (r)
            return r;
        if (item.type != JT_STR || item.str_long)
            v->items_all_str = 0;
        else if (v->n_items < J_ARR_MAX) {
            memcpy(v->items[v->n_items], item.str, (size_t)item.str_len + 1);
            v->item_len[v->n_items] = item.str_len;
        }
        v->n_items++;
        skip_ws(p);
        if (p->i >= p->n)
            return J_MORE;
        char c = p->s[p->i++];
        if (c == ']')
            return J_OK;
        if (c != ',')
            return J_BAD;
    }
}

static int parse_value(jparser *p, jval *v, int depth, jmember *members, int *nmembers)
{
    if (depth > J_MAX_DEPTH)
        return J_BAD;
    skip_ws(p);
    if (p->i >= p->n)
        return J_MORE;
    char c = p->s[p->i];
    switch (c) {
    case '{': v->type = JT_OBJ; return parse_object(p, depth, members, nmembers);
    case '[': return parse_array(p, v, depth);
    case '"': v->type = JT_STR; return parse_string(p, v->str, &v->str_len, &v->str_long);
    case 't': return parse_literal(p, "true", JT_TRUE, v);
    case 'f': return parse_literal(p, "false", JT_FALSE, v);
    case 'n': return parse_literal(p, "null", JT_NULL, v);
    default:
        if (c == '-' || is_digit(c))
            return parse_number(p, v);
        return J_BAD;
    }
}

int llm_json_viable_prefix(const char *s, size_t n)
{
    jparser p = {s, n, 0};
    jval v;
    int r = parse_value(&p, &v, 0, NULL, NULL);
    if (r == J_MORE)
        return 1;
    if (r == J_BAD)
        return 0;
    skip_ws(&p);
    return p.i == n;
}

static int in_class(const char *slot, const char *s, int len)
{
    const llm_word_class *c = llm_find_class(slot, (int)strlen(slot));
    for (int i = 0; i < c->n; i++)
        if ((int)strlen(c->words[i]) == len && memcmp(c->words[i], s, (size_t)len) == 0)
            return 1;
    return 0;
}

static int str_in(const jval *v, const char *slot)
{
    return v->type == JT_STR && !v->str_long && in_class(slot, v->str, v->str_len);
}

static int schema_ok(const jmember *m, int nm)
{
    int seen[J_MEMBERS_MAX] = {0};
    const jval *name = NULL, *friends = NULL;
    if (nm > llm_n_json_keys)
        return 0;
    for (int i = 0; i < nm; i++) {
        int k;
        for (k = 0; k < llm_n_json_keys; k++)
            if (!m[i].key_long && (int)strlen(llm_json_keys[k].key) == m[i].key_len &&
                memcmp(llm_json_keys[k].key, m[i].key, (size_t)m[i].key_len) == 0)
                break;
        if (k == llm_n_json_keys || seen[k]++)
            return 0;                              /* unknown or repeated key */
        const jval *v = &m[i].val;
        switch (llm_json_keys[k].type) {
        case LLM_JV_NAME:
            if (!str_in(v, "NAME"))
                return 0;
            name = v;
            break;
        case LLM_JV_AGE:
            if (v->type != JT_NUM || !v->is_int || v->num < LLM_AGE_MIN || v->num > LLM_AGE_MAX)
                return 0;
            break;
        case LLM_JV_ANIMAL: if (!str_in(v, "PET")) return 0; break;
        case LLM_JV_TOY: if (!str_in(v, "TOY")) return 0; break;
        case LLM_JV_COLOR: if (!str_in(v, "COLOR")) return 0; break;
        case LLM_JV_BOOL: if (v->type != JT_TRUE && v->type != JT_FALSE) return 0; break;
        case LLM_JV_NAMES:
            if (v->type != JT_ARR || !v->items_all_str || v->n_items < 1 ||
                v->n_items > LLM_FRIENDS_MAX)
                return 0;
            for (int a = 0; a < v->n_items; a++) {
                if (!in_class("NAME", v->items[a], v->item_len[a]))
                    return 0;
                for (int b = 0; b < a; b++)
                    if (strcmp(v->items[a], v->items[b]) == 0)
                        return 0;                  /* friends are distinct */
            }
            friends = v;
            break;
        }
    }
    for (int k = 0; k < llm_n_json_keys; k++)
        if (llm_json_keys[k].required && !seen[k])
            return 0;
    if (friends)
        for (int a = 0; a < friends->n_items; a++)
            if (strcmp(friends->items[a], name->str) == 0)
                return 0;                          /* nobody is their own friend */
    return 1;
}

int llm_json_record_check(const char *s, size_t n)
{
    jparser p = {s, n, 0};
    jval v;
    jmember members[J_MEMBERS_MAX];
    int nm = 0;
    skip_ws(&p);
    int top_obj = p.i < n && s[p.i] == '{';
    int r = parse_value(&p, &v, 0, top_obj ? members : NULL, &nm);
    if (r != J_OK)
        return -1;
    skip_ws(&p);
    if (p.i != n)
        return -1;
    if (!top_obj)
        return 0;
    return schema_ok(members, nm) ? 1 : 0;
}

/* ---- sums ---- */

/* A non-negative decimal without leading zeros, at most 9 digits. */
static int read_uint(const char *s, size_t n, size_t *i, long *out)
{
    size_t st = *i;
    while (*i < n && is_digit(s[*i]))
        (*i)++;
    size_t len = *i - st;
    if (len == 0 || len > 9 || (len > 1 && s[st] == '0'))
        return -1;
    *out = 0;
    for (size_t k = st; k < *i; k++)
        *out = *out * 10 + (s[k] - '0');
    return 0;
}

static int sum_parse(const char *s, size_t n, long *a, char *op, long *b, long *c)
{
    size_t i = 0;
    if (read_uint(s, n, &i, a) || i + 3 > n || s[i] != ' ' || (s[i + 1] != '+' &&
        s[i + 1] != '-') || s[i + 2] != ' ')
        return -1;
    *op = s[i + 1];
    i += 3;
    if (read_uint(s, n, &i, b) || i + 3 > n || memcmp(s + i, " = ", 3) != 0)
        return -1;
    i += 3;
    if (read_uint(s, n, &i, c) || i != n)
        return -1;
    return 0;
}

int llm_sum_check(const char *s, size_t n)
{
    long a, b, c;
    char op;
    if (sum_parse(s, n, &a, &op, &b, &c))
        return -1;
    return (op == '+' ? a + b : a - b) == c ? 1 : 0;
}

static int sum_accepts(const char *s, size_t n)
{
    long a, b, c;
    char op;
    if (sum_parse(s, n, &a, &op, &b, &c))
        return 0;
    return a <= LLM_SUM_MAX_OPERAND && b <= LLM_SUM_MAX_OPERAND && llm_sum_check(s, n) == 1;
}

/* ---- units ---- */

static int is_space(char c)
{
    return c == ' ' || c == '\n';
}

int llm_grammar_accepts_n(const char *s, size_t n)
{
    while (n && is_space(*s)) {
        s++;
        n--;
    }
    while (n && is_space(s[n - 1]))
        n--;
    if (n == 0)
        return 0;
    if (s[0] == '{' || s[0] == '[')
        return llm_json_record_check(s, n) == 1;
    if (is_digit(s[0]))
        return sum_accepts(s, n);
    return story_accepts(s, n);
}

int llm_grammar_accepts(const char *unit)
{
    return unit ? llm_grammar_accepts_n(unit, strlen(unit)) : 0;
}

static int line_unit(char c)
{
    return c == '{' || c == '[' || is_digit(c);
}

int llm_grammar_next_unit(const char *text, size_t n, size_t *pos, size_t *start, size_t *len,
                          int *complete)
{
    size_t i = *pos;
    while (i < n && is_space(text[i]))
        i++;
    if (i >= n) {
        *pos = n;
        return 0;
    }
    *start = i;
    *complete = 1;
    if (line_unit(text[i])) {
        while (i < n && text[i] != '\n')
            i++;
        *len = i - *start;
        *pos = i;
        return 1;
    }
    for (; i < n; i++) {
        char c = text[i];
        if (c == '\n')
            break;                     /* a sentence broken by a newline ends there */
        if (c == '.' || c == '!' || c == '?') {
            size_t j = i + 1;
            if (j < n && text[j] == '"')
                j++;
            if (j == n || is_space(text[j])) {
                *len = j - *start;
                *pos = j;
                return 1;
            }
        }
    }
    if (i == n)
        *complete = 0;
    *len = i - *start;
    *pos = i;
    return 1;
}

void llm_grammar_score(const char *text, size_t n, llm_grammar_stats *st)
{
    memset(st, 0, sizeof *st);
    size_t pos = 0, start, len;
    int complete;
    while (llm_grammar_next_unit(text, n, &pos, &start, &len, &complete)) {
        if (!complete) {
            st->incomplete++;
            continue;
        }
        char c = text[start];
        int kind = (c == '{' || c == '[') ? LLM_DOC_JSON : is_digit(c) ? LLM_DOC_SUMS
                                                                      : LLM_DOC_STORY;
        int ok = llm_grammar_accepts_n(text + start, len);
        st->units++;
        st->accepted += (size_t)ok;
        st->kind_units[kind]++;
        st->kind_accepted[kind] += (size_t)ok;
    }
}
