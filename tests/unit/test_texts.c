/* test_texts.c - the chapter texts and the README held to the program they describe. Every
 * `mlsys-lab` command they show (in code blocks, with continuation lines and shell variables,
 * or inline in the prose) names a real lab or command and its flags parse with that table,
 * placeholders such as N or FILE filled with a valid value; nothing runs. Every flag a
 * chapter names on its own (`--spread`, `-k`) is a flag of one of its labs or of a command. */
#include <check.h>
#include <ctype.h>
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
 * lab, or, spelt long, of a command? ch 0: any lab's (the README). A letter means what it
 * means in the chapter's own labs: generate's -n says nothing of a lab's. */
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
            if (flag_in(lab_chapters[i]->labs[k]->flags, word))
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

static Suite *texts_suite(void)
{
    Suite *s = suite_create("texts");
    TCase *t = tcase_create("commands");
    tcase_add_test(t, reader_finds_what_it_must);
    tcase_add_loop_test(t, commands_parse, 0, N_TEXTS);
    suite_add_tcase(s, t);
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
