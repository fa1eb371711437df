/* check.c - ch11-grammars, rank side (see ../harness.h). The curriculum's accept and reject
 * lists, every prefix of every accepted string (a constrained decoder walks through them all),
 * then seeded strings - generated matches, and mutations of them - compared prefix by prefix
 * with the reference state machines below (the reference solution's, renamed). */
#include "harness.h"
#include "api.h"

#define FUZZ 400

/* ---- the reference ---- */
static int r_is_alpha(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

static int r_is_digit(char c)
{
    return c >= '0' && c <= '9';
}

static int r_name_start(char c)
{
    return r_is_alpha(c) || c == '_';
}

static int r_name_char(char c)
{
    return r_name_start(c) || r_is_digit(c);
}

static int r_pydef(const char *s, size_t n)
{
    /* 0-2 "def", 3 first space, 4 spaces before the name, 5 in the name, 6 spaces after it,
     * 7 after '(', 8 in a parameter, 9 after a parameter, 11 after ',', 10 after ')', 12 ':' */
    int st = 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        switch (st) {
        case 0: case 1: case 2:
            if (c != "def"[st])
                return GR_DEAD;
            st++;
            break;
        case 3: if (c != ' ') return GR_DEAD; st = 4; break;
        case 4: if (c == ' ') break; if (!r_name_start(c)) return GR_DEAD; st = 5; break;
        case 5:
            if (r_name_char(c)) break;
            if (c == ' ') { st = 6; break; }
            if (c == '(') { st = 7; break; }
            return GR_DEAD;
        case 6: if (c == ' ') break; if (c != '(') return GR_DEAD; st = 7; break;
        case 7:
            if (c == ' ') break;
            if (c == ')') { st = 10; break; }
            if (!r_name_start(c)) return GR_DEAD;
            st = 8;
            break;
        case 8: case 9:
            if (st == 8 && r_name_char(c)) break;
            if (c == ' ') { st = 9; break; }
            if (c == ',') { st = 11; break; }
            if (c == ')') { st = 10; break; }
            return GR_DEAD;
        case 11: if (c == ' ') break; if (!r_name_start(c)) return GR_DEAD; st = 8; break;
        case 10: if (c == ' ') break; if (c != ':') return GR_DEAD; st = 12; break;
        default: return GR_DEAD;
        }
    }
    return st == 12 ? GR_MATCH : GR_VIABLE;
}

static int r_email(const char *s, size_t n)
{
    /* 0 start, 1 in the local part, 2 after '@', 3 in the first label, 4 after a dot,
     * 5 in a later label; letters counts the label's letters, -1 once it holds another byte */
    int st = 0, letters = 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        int local = r_is_alpha(c) || r_is_digit(c) || strchr("._+-", c) != NULL;
        int label = r_is_alpha(c) || r_is_digit(c) || c == '-';
        if (c == 0)
            return GR_DEAD;
        switch (st) {
        case 0: case 1:
            if (st == 1 && c == '@') { st = 2; break; }
            if (!local) return GR_DEAD;
            st = 1;
            break;
        case 2: if (!label) return GR_DEAD; st = 3; break;
        case 3: case 5:
            if (c == '.') { st = 4; break; }
            if (!label) return GR_DEAD;
            if (st == 5 && letters >= 0)
                letters = r_is_alpha(c) ? letters + 1 : -1;
            break;
        case 4:
            if (!label) return GR_DEAD;
            st = 5;
            letters = r_is_alpha(c) ? 1 : -1;
            break;
        }
    }
    return st == 5 && letters >= 2 ? GR_MATCH : GR_VIABLE;
}

static int r_phone(const char *s, size_t n)
{
    static const char *const forms[] = {"+1-(DDD) DDD-DDDD", "+1-DDD-DDD-DDDD",
                                        "(DDD) DDD-DDDD", "DDD-DDD-DDDD"};
    int best = GR_DEAD;
    for (int f = 0; f < 4; f++) {
        size_t len = strlen(forms[f]), i;
        if (n > len)
            continue;
        for (i = 0; i < n; i++)
            if (forms[f][i] == 'D' ? !r_is_digit(s[i]) : s[i] != forms[f][i])
                break;
        if (i < n)
            continue;
        int v = n == len ? GR_MATCH : GR_VIABLE;
        best = v > best ? v : best;
    }
    return best;
}

static int ref_check(int grammar, const char *s, size_t n)
{
    switch (grammar) {
    case GR_PYDEF: return r_pydef(s, n);
    case GR_EMAIL: return r_email(s, n);
    case GR_PHONE: return r_phone(s, n);
    }
    return GR_DEAD;
}

/* ---- the check ---- */

static const char *const gname[] = {"pydef", "email", "phone"};
static const char *const vname[] = {"GR_DEAD", "GR_VIABLE", "GR_MATCH"};

static const char *vn(int v)
{
    return v >= 0 && v <= 2 ? vname[v] : "not a verdict";
}

/* Every prefix of s[0..n) against the reference; 0 after a failure. */
static int prefixes(harness *h, int g, const char *s, size_t n, const char *origin)
{
    for (size_t k = 0; k <= n; k++) {
        int want = ref_check(g, s, k), got = grammar_check(g, s, k);
        if (got != want) {
            char of[160] = "";
            if (k < n)
                snprintf(of, sizeof of, " (a prefix of %s)", origin);
            h_fail(h, "grammar %s, input \"%.*s\"%s: expected %s, got %s", gname[g], (int)k,
                   s, of, vn(want), vn(got));
            return 0;
        }
    }
    return 1;
}

static void fixed(harness *h)
{
    h_case(h, "the curriculum's lists, and every prefix of each accepted string");
    static const struct { int g; const char *s; int v; } t[] = {
        {GR_PYDEF, "def f(a, b):", GR_MATCH}, {GR_PYDEF, "def  go( ) :", GR_MATCH},
        {GR_PYDEF, "def _x1(self,y,z_2):", GR_MATCH}, {GR_PYDEF, "def f():", GR_MATCH},
        {GR_PYDEF, "def (a):", GR_DEAD}, {GR_PYDEF, "deff(a):", GR_DEAD},
        {GR_PYDEF, "def f(a,):", GR_DEAD}, {GR_PYDEF, "def f(a b):", GR_DEAD},
        {GR_PYDEF, "def 1f():", GR_DEAD}, {GR_PYDEF, "def f(a):x", GR_DEAD},
        {GR_PYDEF, "def f(a, b)", GR_VIABLE},
        {GR_EMAIL, "alice@example.com", GR_MATCH}, {GR_EMAIL, "a.b+c@x-1.y.org", GR_MATCH},
        {GR_EMAIL, "alice@", GR_VIABLE}, {GR_EMAIL, "@x.com", GR_DEAD},
        {GR_EMAIL, "a@b.c", GR_VIABLE}, {GR_EMAIL, "a@b", GR_VIABLE},
        {GR_EMAIL, "a@b.c1", GR_VIABLE}, {GR_EMAIL, "a@@b.com", GR_DEAD},
        {GR_EMAIL, "a@b..com", GR_DEAD}, {GR_EMAIL, "a b@c.com", GR_DEAD},
        {GR_PHONE, "+1-555-123-4567", GR_MATCH}, {GR_PHONE, "(555) 123-4567", GR_MATCH},
        {GR_PHONE, "555-123-4567", GR_MATCH}, {GR_PHONE, "+1-(555) 123-4567", GR_MATCH},
        {GR_PHONE, "555-12", GR_VIABLE}, {GR_PHONE, "555-1234567", GR_DEAD},
        {GR_PHONE, "(555)123-4567", GR_DEAD}, {GR_PHONE, "555-123-45678", GR_DEAD},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        size_t n = strlen(t[i].s);
        int got = grammar_check(t[i].g, t[i].s, n);
        if (got != t[i].v) {
            h_fail(h, "grammar %s, input \"%s\": expected %s, got %s", gname[t[i].g], t[i].s,
                   vn(t[i].v), vn(got));
            return;
        }
        if (t[i].v == GR_MATCH) {
            for (size_t k = 0; k < n; k++) {
                int v = grammar_check(t[i].g, t[i].s, k);
                if (v == GR_DEAD) {
                    h_fail(h, "grammar %s, input \"%.*s\" (a prefix of \"%s\", which matches): "
                           "expected it still viable, got GR_DEAD", gname[t[i].g], (int)k,
                           t[i].s, t[i].s);
                    return;
                }
            }
        }
    }
}

static char pick(mlsys_rng *r, const char *set)
{
    return set[mlsys_rng_u64(r) % strlen(set)];
}

static void put_name(mlsys_rng *r, char *b, size_t *k)
{
    b[(*k)++] = pick(r, "abfgxyz_ABQ");
    for (int i = (int)(mlsys_rng_u64(r) % 4); i > 0; i--)
        b[(*k)++] = pick(r, "abcxyz_019");
}

static void put_spaces(mlsys_rng *r, char *b, size_t *k, int lo, int hi)
{
    for (int i = lo + (int)(mlsys_rng_u64(r) % (unsigned)(hi - lo + 1)); i > 0; i--)
        b[(*k)++] = ' ';
}

/* A match of grammar g into b (room for 96 bytes); its length. */
static size_t gen(mlsys_rng *r, int g, char *b)
{
    size_t k = 0;
    if (g == GR_PYDEF) {
        memcpy(b, "def", 3);
        k = 3;
        put_spaces(r, b, &k, 1, 2);
        put_name(r, b, &k);
        put_spaces(r, b, &k, 0, 1);
        b[k++] = '(';
        put_spaces(r, b, &k, 0, 1);
        int np = (int)(mlsys_rng_u64(r) % 4);
        for (int p = 0; p < np; p++) {
            if (p) {
                b[k++] = ',';
                put_spaces(r, b, &k, 0, 1);
            }
            put_name(r, b, &k);
            put_spaces(r, b, &k, 0, 1);
        }
        b[k++] = ')';
        put_spaces(r, b, &k, 0, 1);
        b[k++] = ':';
    } else if (g == GR_EMAIL) {
        for (int i = 1 + (int)(mlsys_rng_u64(r) % 6); i > 0; i--)
            b[k++] = pick(r, "abz09._+-");
        b[k++] = '@';
        for (int l = 1 + (int)(mlsys_rng_u64(r) % 3); l > 0; l--) {
            for (int i = 1 + (int)(mlsys_rng_u64(r) % 5); i > 0; i--)
                b[k++] = pick(r, "abxy09-");
            b[k++] = '.';
        }
        for (int i = 2 + (int)(mlsys_rng_u64(r) % 3); i > 0; i--)
            b[k++] = pick(r, "comrgXY");
    } else {
        static const char *const forms[] = {"+1-(DDD) DDD-DDDD", "+1-DDD-DDD-DDDD",
                                            "(DDD) DDD-DDDD", "DDD-DDD-DDDD"};
        const char *f = forms[mlsys_rng_u64(r) % 4];
        for (; *f; f++)
            b[k++] = *f == 'D' ? pick(r, "0123456789") : *f;
    }
    return k;
}

static void fuzz(harness *h, int g, mlsys_rng *r)
{
    h_case(h, "grammar %s: %d seeded matches and mutations of them, prefix by prefix",
           gname[g], FUZZ);
    static const char alpha[] = "abdefxz_019 ().,:@+-";
    for (int i = 0; i < FUZZ && !h->failed; i++) {
        char b[128], orig[136];
        size_t n = gen(r, g, b);
        int m = (int)(mlsys_rng_u64(r) % 4);     /* 0: as generated */
        size_t at = mlsys_rng_u64(r) % (n + 1);
        if (m == 1 && at < n)
            b[at] = pick(r, alpha);              /* replace a byte */
        else if (m == 2 && at < n) {
            memmove(b + at, b + at + 1, n - at - 1);     /* delete one */
            n--;
        } else if (m == 3) {
            memmove(b + at + 1, b + at, n - at);         /* insert one */
            b[at] = pick(r, alpha);
            n++;
        }
        snprintf(orig, sizeof orig, "\"%.*s\"", (int)n, b);
        prefixes(h, g, b, n, orig);
    }
    h_returned(h, 0, "grammar_check");
}

static void ex_check_main(harness *h)
{
    fixed(h);
    h_returned(h, 0, "grammar_check");
    if (!h_case_end(h))
        return;
    mlsys_rng r;
    mlsys_rng_seed(&r, h->seed);
    for (int g = 0; g < 3; g++) {
        fuzz(h, g, &r);
        if (!h_case_end(h))
            return;
    }
}
