/* test_texts.c - the chapter texts and the README held to the program they describe. Every
 * `mlsys-lab` command they show (in code blocks, with continuation lines and shell variables,
 * or inline in the prose) names a real lab or command and its flags parse with that table,
 * placeholders such as N or FILE filled with a valid value; nothing runs. Every flag a
 * chapter names on its own (`--spread`, `-k`) is a flag of one of its labs or of a command.
 * And every deterministic number a text quotes from a lab (not a timing) is read from the
 * lab's own output and must stand in the text as the lab prints it. */
#include "run_bin.h"
#include <check.h>
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../../lab/lab.h"
#include "../../lab/cli/cli.h"

#define MAX_WORDS 64

static char *slurp(const char *rel)
{
    char path[4096];
    FILE *f = fopen(lab_asset_path(rel, path, sizeof path), "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    size_t got = fread(s, 1, (size_t)n, f);
    s[got] = 0;
    fclose(f);
    return s;
}

/* ---- the commands a text shows ---- */

typedef struct text_cmd {
    int line;                   /* where it starts in its file */
    char text[1024];            /* the words after mlsys-lab, one space apart */
} text_cmd;

typedef struct cmd_list {
    text_cmd *v;
    int n, cap;
    char flags[256][48];        /* flags named alone in the prose: "--spread", "-k" */
    int flag_line[256];
    int nflags;
} cmd_list;

static void add_cmd(cmd_list *l, int line, const char *text)
{
    if (l->n == l->cap)
        l->v = realloc(l->v, (size_t)(l->cap = l->cap ? 2 * l->cap : 64) * sizeof *l->v);
    l->v[l->n].line = line;
    snprintf(l->v[l->n].text, sizeof l->v[l->n].text, "%s", text);
    l->n++;
}

/* A shell line as the reader would type it: variables of the block expanded, the comment,
 * a trailing '&' and what follows a pipe or a redirection cut off. */
typedef struct shell_vars {
    char name[8][32], value[8][256];
    int n;
} shell_vars;

static void shell_clean(const char *in, const shell_vars *sv, char *out, size_t n)
{
    size_t o = 0;
    for (const char *p = in; *p && o + 1 < n; p++) {
        if (*p == '#' && (p == in || isspace((unsigned char)p[-1])))
            break;
        if (*p == '|' || *p == '>' || *p == ';')
            break;
        if (*p == '$') {
            int k = 0;
            char name[32];
            while (k < 31 && (isalnum((unsigned char)p[1 + k]) || p[1 + k] == '_'))
                name[k] = p[1 + k], k++;
            name[k] = 0;
            for (int i = 0; i < sv->n; i++)
                if (!strcmp(sv->name[i], name)) {
                    o += (size_t)snprintf(out + o, n - o, "%s", sv->value[i]);
                    p += k;
                    break;
                }
            if (o >= n)
                o = n - 1;
            if (k && p[0] != '$')
                continue;
        }
        out[o++] = *p;
    }
    out[o] = 0;
    while (o && (isspace((unsigned char)out[o - 1]) || out[o - 1] == '&'))
        out[--o] = 0;
}

/* After "mlsys-lab" or "build/mlsys-lab" at the start of s (spaces before it allowed), the
 * rest; NULL when s does not start so. */
static const char *after_program(const char *s)
{
    while (*s == ' ' || *s == '\t' || *s == '$')
        s++;
    if (!strncmp(s, "build/", 6))
        s += 6;
    if (strncmp(s, "mlsys-lab", 9) != 0 || (s[9] != ' ' && s[9] != 0))
        return NULL;
    s += 9;
    while (*s == ' ')
        s++;
    return s;
}

/* A word that reads as a lab id: chNN/name */
static int is_lab_word(const char *s)
{
    return s[0] == 'c' && s[1] == 'h' && isdigit((unsigned char)s[2]) &&
           isdigit((unsigned char)s[3]) && s[4] == '/';
}

/* The inline code span src[0..len) as one line, its line breaks and indents one space. */
static void span_text(const char *src, size_t len, char *out, size_t n)
{
    size_t o = 0;
    for (size_t i = 0; i < len && o + 1 < n; i++) {
        if (src[i] == '\n') {
            while (i + 1 < len && src[i + 1] == ' ')
                i++;
            out[o++] = ' ';
        } else {
            out[o++] = src[i];
        }
    }
    out[o] = 0;
}

/* One inline code span's contents: a command, a lab id with flags, or a flag alone. */
static void take_span(cmd_list *l, int line, const char *span)
{
    const char *rest = after_program(span);
    char run[1100];
    if (rest) {
        add_cmd(l, line, rest);
    } else if (is_lab_word(span)) {
        snprintf(run, sizeof run, "run %s", span);
        add_cmd(l, line, run);
    } else if (span[0] == '-' && l->nflags < 256) {
        size_t k = strcspn(span, " =");
        int flag = k >= 2 && k < 48;
        for (size_t i = 1; flag && i < k; i++)
            flag = isalnum((unsigned char)span[i]) || span[i] == '-';
        flag = flag && isalpha((unsigned char)span[span[1] == '-' ? 2 : 1]);
        flag = flag && (span[1] == '-' || k == 2);      /* -std=c11 is the compiler's */
        if (flag) {
            snprintf(l->flags[l->nflags], sizeof l->flags[0], "%.*s", (int)k, span);
            l->flag_line[l->nflags++] = line;
        }
    }
}

static int starts_fence(const char *ln)
{
    while (*ln == ' ')
        ln++;
    return !strncmp(ln, "```", 3);
}

static int by_line(const void *a, const void *b)
{
    const text_cmd *x = a, *y = b;
    return x->line - y->line;
}

static void collect(const char *text, cmd_list *l)
{
    memset(l, 0, sizeof *l);
    /* code blocks, line by line: a logical line joins physical lines ending in '\' */
    int line = 1, fence = 0;
    shell_vars sv = {.n = 0};
    for (const char *p = text; *p;) {
        const char *eol = strchr(p, '\n');
        if (starts_fence(p)) {
            fence = !fence;
            sv.n = 0;
        } else if (fence) {
            char logical[2048];
            size_t o = 0;
            int first = line;
            for (;;) {
                size_t ln = eol ? (size_t)(eol - p) : strlen(p);
                int cont = ln && p[ln - 1] == '\\';
                size_t take = cont ? ln - 1 : ln;
                if (o + take + 1 < sizeof logical) {
                    memcpy(logical + o, p, take);
                    o += take;
                }
                logical[o] = 0;
                if (!cont || !eol)
                    break;
                p = eol + 1;
                eol = strchr(p, '\n');
                line++;
            }
            const char *eq = strchr(logical, '=');      /* NAME=value: a variable */
            if (eq && eq > logical && !strchr(logical, ' ') && sv.n < 8) {
                snprintf(sv.name[sv.n], sizeof sv.name[0], "%.*s", (int)(eq - logical), logical);
                snprintf(sv.value[sv.n], sizeof sv.value[0], "%s", eq + 1);
                sv.n++;
            }
            char clean[2048];
            shell_clean(logical, &sv, clean, sizeof clean);
            const char *rest = after_program(clean);
            if (rest)
                add_cmd(l, first, rest);
        }
        if (!eol)
            break;
        p = eol + 1;
        line++;
    }
    /* inline code spans outside the code blocks; one may run over a line break, never over
     * a blank line */
    line = 1;
    fence = 0;
    int bol = 1;
    for (const char *p = text; *p; p++) {
        if (bol && starts_fence(p))
            fence = !fence;
        bol = *p == '\n';
        if (*p == '\n') {
            line++;
            continue;
        }
        if (fence || *p != '`')
            continue;
        if (p[1] == '`') {                  /* `` in prose: not a span this reader takes */
            while (p[1] == '`')
                p++;
            continue;
        }
        const char *e = p + 1;
        while (*e && *e != '`' && !(e[0] == '\n' && e[1] == '\n'))
            e++;
        if (*e != '`')
            continue;
        char span[1024];
        span_text(p + 1, (size_t)(e - p - 1), span, sizeof span);
        take_span(l, line, span);
        for (const char *c = p; c < e; c++)
            line += *c == '\n';
        p = e;
    }
    if (l->n)
        qsort(l->v, (size_t)l->n, sizeof *l->v, by_line);
}

/* ---- parsing a command as the program would ---- */

/* A word a text writes for "a value of your choice". */
static int is_placeholder(const char *w)
{
    if (w[0] == '<' || !strcmp(w, "...") || !strcmp(w, "…"))
        return 1;
    int upper = 0;
    for (const char *c = w; *c; c++) {
        if (isupper((unsigned char)*c))
            upper = 1;
        else if (*c != '_' && *c != ':' && *c != '[' && *c != ']')
            return 0;
    }
    return upper;
}

/* A valid value for flag f, in place of a placeholder. */
static const char *sample_value(const lab_flag *f, char *buf, size_t n)
{
    switch (f->type) {
    case FLAG_INT:
    case FLAG_SIZE:
        snprintf(buf, n, "%ld", f->min > 0 ? f->min : 1);
        return buf;
    case FLAG_DOUBLE:
        return "1";
    case FLAG_CHOICE:
        snprintf(buf, n, "%.*s", (int)strcspn(f->choices, "|"), f->choices);
        return buf;
    default:
        return "x";
    }
}

static const lab_flag *flag_in(const lab_flag *t, const char *word)
{
    for (; t && t->name; t++) {
        if (word[1] == '-' && !strcmp(word + 2, t->name))
            return t;
        if (word[1] != '-' && word[2] == 0 && t->short_name && word[1] == t->short_name)
            return t;
    }
    return NULL;
}

static const lab_command *command_named(const char *w0, const char *w1, int *words)
{
    for (int i = 0; cli_declared[i]; i++) {
        const char *name = cli_declared[i]->name;
        size_t k = strlen(w0);
        if (!strcmp(name, w0)) {
            *words = 1;
            return cli_declared[i];
        }
        if (w1 && !strncmp(name, w0, k) && name[k] == ' ' && !strcmp(name + k + 1, w1)) {
            *words = 2;
            return cli_declared[i];
        }
    }
    return NULL;
}

/* Split s into words (quotes kept together, quote marks dropped). */
static int split_words(char *s, char **w, int max)
{
    int n = 0;
    while (*s && n < max) {
        while (*s == ' ' || *s == '\t')
            s++;
        if (!*s)
            break;
        char *o = s;
        w[n++] = s;
        char q = 0;
        while (*s && (q || (*s != ' ' && *s != '\t'))) {
            if (!q && (*s == '\'' || *s == '"'))
                q = *s++;
            else if (q && *s == q)
                q = 0, s++;
            else
                *o++ = *s++;
        }
        if (*s)
            s++;
        *o = 0;
    }
    return n;
}

/* 0: the command parses; 1: skipped (its lab is a placeholder); 2: refused, why in err. */
static int check_command(const char *text, char *err, size_t errlen)
{
    char copy[1024], *w[MAX_WORDS];
    snprintf(copy, sizeof copy, "%s", text);
    int n = split_words(copy, w, MAX_WORDS);
    for (int i = 0; i < n; i++)         /* --help parses; left out, it prints nothing here */
        if (!strcmp(w[i], "--help") || !strcmp(w[i], "-h")) {
            memmove(w + i, w + i + 1, (size_t)(n - i - 1) * sizeof *w);
            n--, i--;
        }
    if (n == 0)
        return 1;                       /* `mlsys-lab` alone opens the lab */
    if (!strcmp(w[0], "run")) {
        if (n < 2 || is_placeholder(w[1]))
            return 1;
        const lab *l = lab_find(w[1]);
        if (!l) {
            snprintf(err, errlen, "unknown lab '%s'", w[1]);
            return 2;
        }
        char vals[MAX_WORDS][32];
        for (int i = 3; i < n; i++) {
            const lab_flag *f = w[i - 1][0] == '-' ? flag_in(l->flags, w[i - 1]) : NULL;
            if (!f && w[i - 1][0] == '-')
                f = flag_in(lab_common_flags, w[i - 1]);
            if (f && f->type != FLAG_BOOL && is_placeholder(w[i]))
                w[i] = (char *)sample_value(f, vals[i], sizeof vals[i]);
        }
        lab_args a;
        int rc = lab_args_parse(l, n - 2, w + 2, &a, err, errlen);
        if (rc == 0)
            lab_args_free(&a);
        return rc == 2 ? 2 : 0;
    }
    if (!strcmp(w[0], "list") || !strcmp(w[0], "version") || !strcmp(w[0], "help")) {
        if (n == 1 || (!strcmp(w[0], "help") && n == 2 && !strcmp(w[1], "flags")))
            return 0;
        snprintf(err, errlen, "'%s' takes no argument '%s'", w[0], w[1]);
        return 2;
    }
    int words = 0;
    const lab_command *c = command_named(w[0], n > 1 ? w[1] : NULL, &words);
    if (!c) {
        snprintf(err, errlen, "unknown command '%s'", w[0]);
        return 2;
    }
    char vals[MAX_WORDS][32];
    for (int i = words + 1; i < n; i++) {
        const lab_flag *f = w[i - 1][0] == '-' ? flag_in(c->flags, w[i - 1]) : NULL;
        if (f && f->type != FLAG_BOOL && is_placeholder(w[i]))
            w[i] = (char *)sample_value(f, vals[i], sizeof vals[i]);
    }
    lab_args a;
    int rc = lab_command_parse(c, n - (words - 1), w + (words - 1), &a, err, errlen);
    if (rc == 0)
        lab_args_free(&a);
    return rc == 2 ? 2 : 0;
}

/* Is word (a flag named alone in chapter ch's prose) a flag of one of its labs or of every
 * lab (of a lab on ranks: --backend and its kin too), or, spelt long, of a command? ch 0:
 * any lab's (the README). A letter means what it means in the chapter's own labs:
 * generate's -n says nothing of a lab's. */
static int flag_known(int ch, const char *word)
{
    if (flag_in(lab_common_flags, word))
        return 1;
    for (int i = 0; word[1] == '-' && cli_declared[i]; i++)
        if (flag_in(cli_declared[i]->flags, word))
            return 1;
    for (int i = 0; lab_chapters[i]; i++) {
        if (ch && lab_chapters[i]->number != ch)
            continue;
        for (int k = 0; lab_chapters[i]->labs && lab_chapters[i]->labs[k]; k++)
            if (flag_in(lab_chapters[i]->labs[k]->flags, word) ||
                (lab_on_ranks(lab_chapters[i]->labs[k]) && flag_in(lab_rank_flags, word)))
                return 1;
    }
    return 0;
}

/* The texts: every chapter's, then the README (chapter 0). */
static const char *text_file(int i, int *ch)
{
    static char name[64];
    if (i < 14) {
        *ch = i + 1;
        snprintf(name, sizeof name, "assets/chapters/ch%02d.md", i + 1);
        return name;
    }
    *ch = 0;
    return "README.md";
}
#define N_TEXTS 15

START_TEST(commands_parse)
{
    int ch;
    const char *file = text_file(_i, &ch);
    char *text = slurp(file);
    ck_assert_msg(text != NULL, "%s: cannot read it", file);
    cmd_list l;
    collect(text, &l);
    int parsed = 0, bad = 0;
    char report[8192] = "";
    size_t ro = 0;
    for (int i = 0; i < l.n; i++) {
        char err[600] = "";
        int rc = check_command(l.v[i].text, err, sizeof err);
        parsed += rc == 0;
        if (rc == 2 && ro + 1 < sizeof report) {
            bad++;
            ro += (size_t)snprintf(report + ro, sizeof report - ro, "\n  %s:%d: mlsys-lab %s: %s",
                                   file, l.v[i].line, l.v[i].text, err);
        }
    }
    for (int i = 0; i < l.nflags; i++)
        if (!flag_known(ch, l.flags[i]) && ro + 1 < sizeof report) {
            bad++;
            ro += (size_t)snprintf(report + ro, sizeof report - ro,
                                   "\n  %s:%d: `%s` is no flag of %s", file, l.flag_line[i],
                                   l.flags[i], ch ? "this chapter's labs" : "any lab");
        }
    ck_assert_msg(bad == 0, "%d refused:%s", bad, report);
    /* every text but the first chapters shows commands; none may be silently skipped */
    ck_assert_msg(parsed >= 1, "%s: no command found", file);
    free(l.v);
    free(text);
}
END_TEST

/* The reader itself: a command of three physical lines with a variable and a comment, a
 * span that runs over a line break, and a wrong flag in each place is found. */
START_TEST(reader_finds_what_it_must)
{
    const char *md =
        "Run `mlsys-lab run\n   ch08/minimal-inference-server -n 8` and `--nope`.\n"
        "```\n"
        "L=ch09/kv-cache-calculator\n"
        "build/mlsys-lab run $L --model \\\n"
        "    mistral-7b --gpu a100  # a comment\n"
        "mlsys-lab run ch14/memory-timeline -m 7b &\n"
        "mlsys-lab check ch12-gae --seed N --answer VALUE\n"
        "```\n"
        "And `ch11/speculative-demo --temperature 1`.\n";
    cmd_list l;
    collect(md, &l);
    ck_assert_int_eq(l.n, 5);
    ck_assert_str_eq(l.v[0].text, "run ch08/minimal-inference-server -n 8");
    ck_assert_int_eq(l.v[0].line, 1);
    ck_assert_str_eq(l.v[1].text, "run ch09/kv-cache-calculator --model     mistral-7b --gpu a100");
    ck_assert_int_eq(l.v[1].line, 5);
    ck_assert_str_eq(l.v[2].text, "run ch14/memory-timeline -m 7b");
    ck_assert_int_eq(l.v[2].line, 7);
    ck_assert_str_eq(l.v[4].text, "run ch11/speculative-demo --temperature 1");
    ck_assert_int_eq(l.v[4].line, 10);
    ck_assert_int_eq(l.nflags, 1);
    ck_assert_int_eq(l.flag_line[0], 2);
    ck_assert_str_eq(l.flags[0], "--nope");
    char err[600];
    ck_assert_int_eq(check_command(l.v[0].text, err, sizeof err), 2);   /* -n: not there */
    ck_assert_int_eq(check_command(l.v[1].text, err, sizeof err), 0);
    ck_assert_int_eq(check_command(l.v[2].text, err, sizeof err), 2);   /* -m: microbatches */
    ck_assert_int_eq(check_command(l.v[3].text, err, sizeof err), 0);   /* placeholders */
    ck_assert_int_eq(check_command("run ch13/reward-calculator -k 0", err, sizeof err), 2);
    ck_assert_int_eq(check_command("train --nope", err, sizeof err), 2);
    ck_assert_int_eq(check_command("model info assets/models/model.bin", err, sizeof err), 0);
    ck_assert_int_eq(check_command("frobnicate", err, sizeof err), 2);
    ck_assert_int_eq(flag_known(13, "--spread"), 1);
    ck_assert_int_eq(flag_known(13, "-k"), 0);
    ck_assert_int_eq(flag_known(9, "-m"), 0);
    ck_assert_int_eq(flag_known(11, "-n"), 0);          /* generate's -n is not the lab's */
    ck_assert_int_eq(flag_known(11, "--disconnect"), 1);   /* loadgen's, spelt long */
    free(l.v);
}
END_TEST


/* ---- numbers a text quotes from a lab ---- */

/* The i-th number of s: a digit, or a sign (+, -, U+2212) before one, that does not go on a
 * word (fp32, δ_1, wq.3); its value in *v. 0 when there are fewer. */
static int nth_number(const char *s, int i, double *v)
{
    for (const char *p = s; *p; p++) {
        int neg = 0;
        const char *d = p;
        if ((*p == '+' || *p == '-') && isdigit((unsigned char)p[1]))
            neg = *p == '-', d = p + 1;
        else if (!strncmp(p, "\xe2\x88\x92", 3) && isdigit((unsigned char)p[3]))
            neg = 1, d = p + 3;
        else if (!isdigit((unsigned char)*p))
            continue;
        if (p > s && (isalnum((unsigned char)p[-1]) || p[-1] == '_' || p[-1] == '.')) {
            while (isdigit((unsigned char)d[1]) || d[1] == '.')   /* all of it: A_{t+1} */
                d++;
            p = d;
            continue;
        }
        char *end;
        double x = strtod(d, &end);
        if (i-- == 0) {
            *v = neg ? -x : x;
            return 1;
        }
        p = end - 1;
    }
    return 0;
}

/* v as a text writes it. spec: a digit, the decimals; 'g' drops trailing zeros; '+' always
 * a sign; 'u' U+2212 for minus; ',' thousands apart. */
static void fmt_number(double v, const char *spec, char *out, size_t n)
{
    int dec = 0, trim = 0, plus = 0, uminus = 0, commas = 0;
    for (const char *c = spec; *c; c++) {
        if (isdigit((unsigned char)*c))
            dec = *c - '0';
        trim |= *c == 'g';
        plus |= *c == '+';
        uminus |= *c == 'u';
        commas |= *c == ',';
    }
    char digits[64];
    snprintf(digits, sizeof digits, "%.*f", dec, fabs(v));
    if (trim && strchr(digits, '.')) {
        char *e = digits + strlen(digits) - 1;
        while (*e == '0')
            *e-- = 0;
        if (*e == '.')
            *e = 0;
    }
    int zero = strspn(digits, "0.") == strlen(digits);
    const char *sign = v < 0 && !zero ? (uminus ? "\xe2\x88\x92" : "-") : plus ? "+" : "";
    size_t o = (size_t)snprintf(out, n, "%s", sign);
    size_t intlen = strcspn(digits, ".");
    for (size_t i = 0; digits[i] && o + 1 < n; i++) {
        if (commas && i && i < intlen && (intlen - i) % 3 == 0)
            out[o++] = ',';
        out[o++] = digits[i];
    }
    out[o] = 0;
}

/* s with every run of white space one space (a text wraps its lines anywhere) */
static char *squash(const char *s)
{
    char *o = malloc(strlen(s) + 1), *q = o;
    for (; *s; s++) {
        if (isspace((unsigned char)*s)) {
            if (q > o && q[-1] != ' ')
                *q++ = ' ';
        } else {
            *q++ = *s;
        }
    }
    *q = 0;
    return o;
}

/* A number the text quotes: the phrase as the text writes it, {i} or {i:spec} standing for
 * the i-th number after anchor in the lab's output, written by spec (the tie's own when the
 * placeholder has none). */
typedef struct tie {
    const char *anchor, *spec, *phrase;
} tie;

typedef struct tie_set {
    const char *file, *cmd;
    tie ties[16];
} tie_set;

/* The phrase with its numbers from out filled in; 0 and why in err when out lacks them. */
static int tie_fill(const tie *t, const char *out, char *phrase, size_t n, char *err,
                    size_t errlen)
{
    const char *at = strstr(out, t->anchor);
    if (!at) {
        snprintf(err, errlen, "the lab no longer prints \"%s\"", t->anchor);
        return 0;
    }
    at += strlen(t->anchor);
    size_t o = 0;
    for (const char *p = t->phrase; *p && o + 1 < n;) {
        if (*p != '{') {
            phrase[o++] = *p++;
            continue;
        }
        char *end;
        int idx = (int)strtol(p + 1, &end, 10);
        char spec[16];
        snprintf(spec, sizeof spec, "%s", t->spec);
        if (*end == ':') {
            size_t k = strcspn(end + 1, "}");
            snprintf(spec, sizeof spec, "%.*s", (int)k, end + 1);
            end += k + 1;
        }
        double v;
        if (!nth_number(at, idx, &v)) {
            snprintf(err, errlen, "no number %d after \"%s\" in the lab's output", idx, t->anchor);
            return 0;
        }
        char num[64];
        fmt_number(v, spec, num, sizeof num);
        o += (size_t)snprintf(phrase + o, n - o, "%s", num);
        p = end + 1;
    }
    phrase[o < n ? o : n - 1] = 0;
    return 1;
}

static const tie_set tie_sets[] = {
    {"assets/chapters/ch08.md", "run ch08/minimal-inference-server --simulate --eos-prob 0", {
        {"tokens generated", "0", "{0} tokens, "},
        {"total time", "1", "{0} ms of virtual time"},
        {"throughput", "1", "{0} tokens/s"},
    }},
    {"assets/chapters/ch08.md", "run ch08/minimal-inference-server --compare", {
        {"r3 finished in step", "0", "request 3 asks for 8 tokens and finishes in step {0},\n"
         "while the others decode on until step {1}; request 4 takes the freed seat in step {2}"},
        {"\n  continuous ", "0", "continuous batching needs {0} steps and prefills its last "
         "request in step {1}"},
        {"\n  static ", "0", "static batching {0} steps and step {1}"},
    }},
    {"assets/chapters/ch08.md", "run ch08/minimal-inference-server -t 2 --temperature 0", {
        {"x 16 tokens (", "0", "{0} bytes per token on each rank"},
        {"\n  engine ", "0", "the default workload's {2} steps cost"},
        {"\n  tensor parallel ", "0", "cost {1} all-reduces of [rows, {2}] floats"},
    }},
    {"assets/chapters/ch08.md", "run ch08/minimal-inference-server --temperature 0", {
        {"x 16 tokens (", "0", "on each rank instead of {0}"},
    }},
    {"assets/chapters/ch09.md", "run ch09/kv-cache-calculator", {
        {"LLaMA-7B ", "g2", "| LLaMA-7B | {2} KiB | {3} GiB | {4} GiB |"},
        {"LLaMA-13B ", "g2", "| LLaMA-13B | {2} KiB | {3} GiB | {4} GiB |"},
        {"LLaMA-70B ", "g2", "| LLaMA-70B | {2} KiB | {3} GiB | {4} GiB |"},
        {"Mistral-7B ", "g2", "| Mistral-7B | {2} KiB | {3} GiB | {4} GiB |"},
        {"lab model fp32 ", "g2", "| the lab's model (FP32) | {2} KiB |"},
        {"lab model fp32 ", ",0", "FP32: 2 × 5 × 2 × 32 × 4 = {10} bytes per token"},
        {"LLaMA-70B on 8 x 80 GB:", "0", "leaves about {0} GB for the cache"},
        {"LLaMA-70B on 8 x 80 GB:", "0", "At {3:,0} bytes a token that is {4:2} million tokens: "
         "{5} requests at 4K tokens each, {7} at 32K, {9} at 128K."},
    }},
    {"assets/chapters/ch09.md", "run ch09/kv-cache-calculator --model mistral-7b", {
        {"@ 8192 context length:", "0", "{1:2} GB) per request, {2} in {0} GB in theory, {3} "
         "without paging and {4} with."},
        {"at 8K context it counted", "0", "{0} Mistral-7B requests of 8K fit on an 80 GB GPU, "
         "it says, where {1} do"},
    }},
    {"assets/chapters/ch09.md", "run ch09/prefix-sharing-demo", {
        {"Total tokens across all requests:", "0", "{0} tokens need"},
        {"Unique KV cache entries:", "0", "need {0} entries"},
        {"Memory savings:", "1", "({0} % saved)"},
        {"prompt rows computed", ",0", "| prompt rows computed | {0} | {1} |"},
        {"prompt tokens found cached", ",0", "| prompt tokens found cached | {0} | {1} |"},
        {"Saved: 16.22 GB (", "1", "saves {0} % for 100 requests"},
        {"Saved: 32.44 GB (", "1", "few-shot examples {0} %"},
    }},
    {"assets/chapters/ch10.md", "run ch10/cuda-graph-simple --simulate", {
        {"eager: 5 x 0.05 + 0.5 =", "2", "= {0} ms per iteration ({1:1} ms for 1000)"},
        {"graph: 1 x 0.05 + 0.5 =", "2", "= {0} ms ({1:1} ms), a speed-up of {2}×"},
    }},
    {"assets/chapters/ch10.md", "run ch10/scheduling-overhead-benchmark --simulate", {
        {"sequential  ", "2", "{0:0} ms in turn, {1:0} ms the first way ({3}×), {6:0} ms the "
         "second ({8}×)"},
        {"Sequential:\n  total ", "2", "N(s + c + p) = {0:0} ms in turn ({1} batches/s)"},
        {"original    ", "2", "= {0:0} ms \"overlapped\""},
        {"SGLang's    ", "2", "max(c, s + p) = {0:0} ms ("},
        {"under batch n+1):\n  total ", "2", "({1} batches/s, "},
        {"SGLang's    ", "2", " batches/s, {2}×)"},
    }},
    {"assets/chapters/ch12.md", "run ch12/gae-visualizer", {
        {"λ=1.00 \n", "u4", "grows from {1} (λ = 0) through {4} (λ = 0.95) to {5} (λ = 1)"},
        {"δ_0 = 0.1 + 0.99·0.4 − 0.5 =", "u4", "δ = {0}, {5}, {9} and A = {15}, {13}, {11}"},
        {"after 10 steps a TD error still counts", "0", "still counts {0} %"},
    }},
    {"assets/chapters/ch13.md", "run ch14/memory-timeline --model-size 7b", {
        {"Actor weights", "1", "reference: weights, each | {0} |"},
        {"ZeRO-0 (plain DP: copies)", "1", "| gradients, actor and critic | {1} |"},
        {"ZeRO-0 (plain DP: copies)", "1", "m and v), actor and critic | {2} |"},
        {"KV cache  ", "1", "| KV cache of the batch | {0} |"},
        {"TRAINING (", "1", "| activations of the training pass | {2} |"},
        {"  total:", "1", "| all of it | {0} |"},
    }},
    {"assets/chapters/ch13.md", "run ch13/reward-calculator", {
        {"token     log π log π_ref", "u1", "The KL column reads {3:+u1}, {10:+u1}, {17:+u1}, "
         "{24:+u1}, {31:+u1}, {38:+u1}, {45:+u1}, {52:+u1};"},
        {"token     log π log π_ref", "+u4", "adds the score: {55}."},
        {"total KL ΣKL_t", "u4", "ΣKL = {0}, penalty"},
        {"KL penalty β·ΣKL_t", "u4", "penalty β·ΣKL = {0}, net reward"},
        {"net reward Σr_t", "+u4", "net reward {0} —"},
        {"KL by the k3 estimator", "+4", "KL at {0}."},
        {"(ΣKL = +2.3), where β bites:", "u4", "falls from {2} to {11} (moderate) at β = 0.05, "
         "to {17} (strong) at 0.25 and {20} (overwhelming) at 0.5"},
        {"high divergence", "4", "high divergence ({9:g1}, {11})"},
        {"less confident\n", "4", "less confident ({9:gu1}, {11})"},
    }},
    {"assets/chapters/ch14.md", "run ch14/memory-timeline", {
        {"GENERATION (", "1", "{5} GB for generation (the KV cache is only {3} GB)"},
        {"TRAINING (", "1", "{7} GB for training"},
        {"SCORING (", "1", "{5} GB for scoring (four copies of the weights"},
        {"TRAINING (", "1", "| Llama 2 70B | {7} GB | {9} |"},
        {"Adam's state dominates training:", "0", "of which {0} GB is Adam's state"},
        {"TRAINING (", "0", "training does not fit ({11} GB per GPU), while generation"},
        {"GENERATION (", "0", "while generation does ({9} GB)"},
        {"required with everything resident:", "0", "at once needs {0} GB, {2} GPUs of 80 GB"},
        {"ZeRO-0 (plain DP: copies)", "1", "plain data parallelism puts {4} GB on every GPU"},
        {"ZeRO-1 (optimizer)", "1", "ZeRO-1 brings it to {4} GB"},
        {"ZeRO-2 (+ gradients)", "1", "ZeRO-2 to {4} GB"},
        {"ZeRO-3 (+ weights: FSDP)", "1", "ZeRO-3 to the {4} GB of perfect sharding"},
    }},
    {"assets/chapters/ch14.md", "run ch14/memory-timeline --tp-size 8 --pp-size 2 --dp-size 2", {
        {"tp 8 x pp 2 x dp 2", "1", "fits only under ZeRO-3: {4}, {9}, {14} and {19} GB per GPU"},
    }},
    /* the split placement's peaks are the same in every run; colocated ones are not (the
     * two ranks' phases overlap as they happen to), so only its estimate is tied */
    {"assets/chapters/ch14.md", "run ch14/memory-timeline --measured", {
        {"split placement (rank 0 generates, rank 1 scores and trains)\n", "1",
         "{30} MiB while generating, {31} MiB at the peak, while scoring"},
        {"split placement (rank 0 generates, rank 1 scores and trains)\n", "1",
         "model's activations at once), estimate {35} MiB"},
        {"colocated placement (every role on both ranks, half the batch each)\n", "1",
         "the estimate is {35} MiB"},
    }},
    {"assets/chapters/ch14.md", "run ch14/memory-timeline --model-size 7b", {
        {"TRAINING (", "1", "| Llama 2 7B | {7} GB | {9} |"},
        {"rule of thumb", "1", "ZeRO-3 across all 8 ({5} GB a GPU with everything resident)"},
    }},
    {"assets/chapters/ch14.md", "run ch14/memory-timeline --model-size 405b", {
        {"TRAINING (", "1", "| Llama 3.1 405B | {7} GB | {9} |"},
    }},
    {"assets/chapters/ch14.md", "run ch14/memory-timeline --faithful", {
        {"GENERATION (", "1", "{5} GB to generate"},
        {"SCORING (", "1", "{2} GB to score"},
        {"TRAINING (", "1", "{6} GB to train"},
        {"total:", "1", "{0} GB in all, \"need"},
        {"does not fit: needs", "0", "\"need {0} GPUs\""},
    }},
    {"assets/chapters/ch14.md", "run ch14/weight-update-demo --no-measure", {
        {"  NVMe SSD", "2", "NVMe SSD {0} s"},
        {"  HDD / NFS", "1", "HDD {0} min"},
        {"  NCCL over NVLink", "2", "NVLink {0} s"},
        {"  NCCL over InfiniBand (400 Gb/s)", "2", "InfiniBand {0} s"},
        {"  NCCL over 100 Gb/s Ethernet", "2", "Ethernet {0} s"},
        {"  CUDA IPC handle", "1", "IPC handle {0} ms"},
    }},
};
#define N_TIE_SETS (int)(sizeof tie_sets / sizeof tie_sets[0])

START_TEST(numbers_as_the_lab_prints_them)
{
    const tie_set *ts = &tie_sets[_i];
    char *raw = slurp(ts->file);
    ck_assert_msg(raw != NULL, "%s: cannot read it", ts->file);
    char *text = squash(raw);
    bin_result r = run_bin("%s", ts->cmd);
    ck_assert_msg(r.status == 0, "mlsys-lab %s: exit %d: %s", ts->cmd, r.status, r.err);
    char report[8192] = "";
    size_t ro = 0;
    int bad = 0, n = 0;
    for (const tie *t = ts->ties; t->anchor; t++, n++) {
        char phrase[1024], err[512], *want;
        if (!tie_fill(t, r.out, phrase, sizeof phrase, err, sizeof err)) {
            bad++;
            ro += (size_t)snprintf(report + ro, sizeof report - ro, "\n  %s", err);
        } else if (!strstr(text, want = squash(phrase))) {
            bad++;
            ro += (size_t)snprintf(report + ro, sizeof report - ro,
                                   "\n  the text should read \"%s\"", want);
            free(want);
        } else {
            free(want);
        }
        if (ro >= sizeof report)
            ro = sizeof report - 1;
    }
    ck_assert_msg(bad == 0, "%s against `mlsys-lab %s`, %d of %d:%s", ts->file, ts->cmd, bad, n,
                  report);
    bin_result_free(&r);
    free(text);
    free(raw);
}
END_TEST

/* The number reader and writer themselves. */
START_TEST(numbers_read_and_written)
{
    double v;
    ck_assert(nth_number("fp32 a δ_1 wq.3 = -0.25, \xe2\x88\x92" "3 and +7", 0, &v));
    ck_assert(v == -0.25);
    ck_assert(nth_number("fp32 a δ_1 wq.3 = -0.25, \xe2\x88\x92" "3 and +7", 1, &v));
    ck_assert(v == -3);
    ck_assert(nth_number("0.99·0.4 x", 1, &v) && v == 0.4);
    ck_assert(!nth_number("none here: x1 y_2 A_{t+1}", 0, &v));
    char b[64];
    fmt_number(1680, ",0", b, sizeof b);
    ck_assert_str_eq(b, "1,680");
    fmt_number(-0.0750, "u4", b, sizeof b);
    ck_assert_str_eq(b, "\xe2\x88\x92" "0.0750");
    fmt_number(6.25, "g2", b, sizeof b);
    ck_assert_str_eq(b, "6.25");
    fmt_number(16.0, "g2", b, sizeof b);
    ck_assert_str_eq(b, "16");
    fmt_number(0.1955, "+4", b, sizeof b);
    ck_assert_str_eq(b, "+0.1955");
    fmt_number(-0.00001, "+u4", b, sizeof b);
    ck_assert_str_eq(b, "+0.0000");
    tie t = {"x:", "1", "a {1} b {0:0}"};
    char err[128];
    ck_assert(tie_fill(&t, "x: 12.34 then 5.67", b, sizeof b, err, sizeof err));
    ck_assert_str_eq(b, "a 5.7 b 12");
}
END_TEST

static Suite *texts_suite(void)
{
    Suite *s = suite_create("texts");
    TCase *t = tcase_create("commands");
    tcase_add_test(t, reader_finds_what_it_must);
    tcase_add_loop_test(t, commands_parse, 0, N_TEXTS);
    suite_add_tcase(s, t);
    TCase *n = tcase_create("numbers");
    tcase_set_timeout(n, 120);
    tcase_add_test(n, numbers_read_and_written);
    tcase_add_loop_test(n, numbers_as_the_lab_prints_them, 0, N_TIE_SETS);
    suite_add_tcase(s, n);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(texts_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
