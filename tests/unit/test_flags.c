/* test_flags.c - the flag parser (lab/flags.c): defaults, every spelling of a value, every
 * class of error with its one-line message, help output, and the consistency of the real
 * chapter table (unique ids, unique flag names, every default valid). */
#include <check.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include "../../lab/lab.h"
#include "../../lab/cli/cli.h"

static const lab_flag tflags[] = {
    {"world-size", 'w', FLAG_INT, "4", NULL, 1, 64, "number of ranks"},
    {"size", 's', FLAG_SIZE, "64K", NULL, 1, 4L << 30, "bytes per message"},
    {"scale", 0, FLAG_DOUBLE, "1.5", NULL, 0, 0, "multiply values"},
    {"backend", 'b', FLAG_CHOICE, "gloo", "gloo|nccl|shm|mpi", 0, 0, "transport"},
    {"name", 0, FLAG_STR, "abc", NULL, 0, 0, "a name"},
    {"verbose", 'v', FLAG_BOOL, NULL, NULL, 0, 0, "say more"},
    {NULL, 0, 0, NULL, NULL, 0, 0, NULL}
};
static const lab tlab = {.id = "test/flags", .title = "Flag test", .summary = "a test lab",
                         .flags = tflags};

/* Parse a NULL-terminated list of words. */
static int parse_words(const lab *l, lab_args *a, char *err, size_t n, const char **words)
{
    int argc = 0;
    while (words[argc])
        argc++;
    char **argv = calloc((size_t)argc + 1, sizeof *argv);
    for (int i = 0; i < argc; i++)
        argv[i] = strdup(words[i]);
    err[0] = 0;
    int rc = lab_args_parse(l, argc, argv, a, err, n);
    /* values must not point into argv: free it now */
    for (int i = 0; i < argc; i++) {
        memset(argv[i], 'X', strlen(argv[i]));
        free(argv[i]);
    }
    free(argv);
    return rc;
}

#define PARSE(a, err, ...) parse_words(&tlab, (a), (err), sizeof(err), \
                                       (const char *[]){__VA_ARGS__, NULL})

/* Parsing must fail with status 2 and one line that names the lab and contains want. */
static void expect_error(const char *want, const char **words)
{
    lab_args a;
    char err[512];
    int rc = parse_words(&tlab, &a, err, sizeof err, words);
    ck_assert_int_eq(rc, 2);
    ck_assert_msg(strncmp(err, "mlsys-lab: test/flags: ", 23) == 0, "prefix missing: %s", err);
    ck_assert_msg(strchr(err, '\n') == NULL, "error must be one line: %s", err);
    ck_assert_msg(strstr(err, want) != NULL, "'%s' not in '%s'", want, err);
}
#define EXPECT_ERROR(want, ...) expect_error((want), (const char *[]){__VA_ARGS__, NULL})

START_TEST(defaults)
{
    lab_args a;
    char err[256];
    ck_assert_int_eq(parse_words(&tlab, &a, err, sizeof err, (const char *[]){NULL}), 0);
    ck_assert_int_eq(lab_arg_int(&a, "world-size"), 4);
    ck_assert_uint_eq(lab_arg_size(&a, "size"), 65536);
    ck_assert_double_eq_tol(lab_arg_double(&a, "scale"), 1.5, 1e-12);
    ck_assert_str_eq(lab_arg_str(&a, "backend"), "gloo");
    ck_assert_str_eq(lab_arg_str(&a, "name"), "abc");
    ck_assert_int_eq(lab_arg_bool(&a, "verbose"), 0);
    ck_assert_double_eq_tol(lab_arg_double(&a, "timeout"), 30.0, 1e-12);
    ck_assert_str_eq(lab_arg_str(&a, "algo"), "auto");
    ck_assert_ptr_null(lab_arg_str(&a, "trace"));
    ck_assert_int_eq(lab_arg_bool(&a, "gated"), 0);
    ck_assert_int_eq(lab_arg_bool(&a, "help"), 0);
    for (int i = 0; i < a.nflags; i++)
        ck_assert_int_eq(a.given[i], 0);
    ck_assert_int_eq(lab_arg_given(&a, "world-size"), 0);
    /* lab flags first, then the common ones */
    ck_assert_str_eq(a.flags[0]->name, "world-size");
    ck_assert_ptr_eq(a.lab, &tlab);
    int nc = 0;
    while (lab_common_flags[nc].name)
        nc++;
    ck_assert_int_eq(a.nflags, 6 + nc);
    /* unknown names answer "nothing" */
    ck_assert_ptr_null(lab_arg_str(&a, "no-such-flag"));
    ck_assert_int_eq(lab_arg_int(&a, "no-such-flag"), 0);
    ck_assert_int_eq(lab_arg_bool(&a, "no-such-flag"), 0);
    lab_args_free(&a);
}
END_TEST

START_TEST(spellings)
{
    lab_args a;
    char err[256];
    ck_assert_int_eq(PARSE(&a, err, "--world-size", "8", "--size=1M", "--scale", "-2.5",
                           "--backend=nccl", "--name", "x y", "--verbose"), 0);
    ck_assert_int_eq(lab_arg_int(&a, "world-size"), 8);
    ck_assert_uint_eq(lab_arg_size(&a, "size"), 1u << 20);
    ck_assert_double_eq_tol(lab_arg_double(&a, "scale"), -2.5, 1e-12);
    ck_assert_str_eq(lab_arg_str(&a, "backend"), "nccl");
    ck_assert_str_eq(lab_arg_str(&a, "name"), "x y");
    ck_assert_int_eq(lab_arg_bool(&a, "verbose"), 1);
    ck_assert_int_eq(lab_arg_given(&a, "world-size"), 1);
    ck_assert_int_eq(lab_arg_given(&a, "algo"), 0);
    lab_args_free(&a);

    /* short aliases: separate, attached, with '=' */
    ck_assert_int_eq(PARSE(&a, err, "-w", "16", "-s8", "-b=shm", "-v"), 0);
    ck_assert_int_eq(lab_arg_int(&a, "world-size"), 16);
    ck_assert_uint_eq(lab_arg_size(&a, "size"), 8);
    ck_assert_str_eq(lab_arg_str(&a, "backend"), "shm");
    ck_assert_int_eq(lab_arg_bool(&a, "verbose"), 1);
    lab_args_free(&a);

    /* common flags */
    ck_assert_int_eq(PARSE(&a, err, "--timeout", "0.5", "--trace=out.json", "--gated",
                           "--algo", "auto"), 0);
    ck_assert_double_eq_tol(lab_arg_double(&a, "timeout"), 0.5, 1e-12);
    ck_assert_str_eq(lab_arg_str(&a, "trace"), "out.json");
    ck_assert_int_eq(lab_arg_bool(&a, "gated"), 1);
    lab_args_free(&a);

    /* the same value twice is fine, however it is spelled */
    ck_assert_int_eq(PARSE(&a, err, "-w", "8", "--world-size=8", "-w", "08"), 0);
    ck_assert_int_eq(lab_arg_int(&a, "world-size"), 8);
    lab_args_free(&a);
    ck_assert_int_eq(PARSE(&a, err, "--size", "1M", "-s", "1048576", "-v", "--verbose"), 0);
    ck_assert_uint_eq(lab_arg_size(&a, "size"), 1u << 20);
    lab_args_free(&a);
}
END_TEST

START_TEST(sizes)
{
    static const struct { const char *text; uint64_t bytes; } cases[] = {
        {"8", 8}, {"64K", 64u << 10}, {"1M", 1u << 20}, {"2G", 2ull << 30}, {"16m", 16u << 20},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        lab_args a;
        char err[256];
        ck_assert_msg(PARSE(&a, err, "--size", cases[i].text) == 0, "%s: %s", cases[i].text, err);
        ck_assert_uint_eq(lab_arg_size(&a, "size"), cases[i].bytes);
        lab_args_free(&a);
    }
    EXPECT_ERROR("--size must be a size (8, 64K, 1M, 2G) from 1 to 4G, got '12Q'", "--size", "12Q");
    EXPECT_ERROR("got '0'", "--size", "0");
    EXPECT_ERROR("got '5G'", "-s", "5G");
    EXPECT_ERROR("got '-1'", "--size", "-1");
}
END_TEST

START_TEST(errors)
{
    lab_args a;
    char err[512];
    ck_assert_int_eq(PARSE(&a, err, "--world-size", "abc"), 2);
    ck_assert_str_eq(err, "mlsys-lab: test/flags: --world-size must be an integer from 1 to 64, "
                          "got 'abc'");
    EXPECT_ERROR("unknown flag '--bogus'", "--bogus");
    EXPECT_ERROR("unknown flag '--bogus'", "--bogus=1");
    EXPECT_ERROR("unknown flag '-q'", "-q");
    EXPECT_ERROR("--world-size needs a value", "--world-size");
    EXPECT_ERROR("--world-size needs a value", "--world-size", "--verbose");
    EXPECT_ERROR("--world-size needs a value", "-w");
    EXPECT_ERROR("--name needs a value", "--name=");
    EXPECT_ERROR("from 1 to 64, got '0'", "--world-size", "0");
    EXPECT_ERROR("from 1 to 64, got '-1'", "--world-size", "-1");
    EXPECT_ERROR("from 1 to 64, got '100000'", "-w", "100000");
    EXPECT_ERROR("from 1 to 64, got '65'", "-w65");
    EXPECT_ERROR("got '4.5'", "-w", "4.5");
    EXPECT_ERROR("got '4x'", "-w", "4x");
    EXPECT_ERROR("got '99999999999999999999999'", "-w", "99999999999999999999999");
    EXPECT_ERROR("--scale must be a number, got 'x'", "--scale", "x");
    EXPECT_ERROR("--scale must be a number, got 'nan'", "--scale", "nan");
    EXPECT_ERROR("--scale must be a number, got 'inf'", "--scale", "inf");
    EXPECT_ERROR("--timeout must be a number above 0", "--timeout", "0");
    EXPECT_ERROR("--timeout must be a number above 0", "--timeout", "-3");
    EXPECT_ERROR("got '1e9'", "--timeout", "1e9");
    EXPECT_ERROR("--backend must be one of gloo|nccl|shm|mpi, got 'tcp'", "--backend", "tcp");
    EXPECT_ERROR("got 'glo'", "-b", "glo");
    EXPECT_ERROR("got 'gloox'", "-b", "gloox");
    EXPECT_ERROR("--world-size given twice with different values ('4' and '8')", "-w", "4",
                 "--world-size", "8");
    EXPECT_ERROR("--backend given twice", "-b", "gloo", "-b", "nccl");
    EXPECT_ERROR("--size given twice with different values ('1M' and '1K')", "--size", "1M",
                 "--size", "1K");
    EXPECT_ERROR("--verbose is a switch and takes no value, got '1'", "--verbose=1");
    EXPECT_ERROR("unexpected argument 'extra'", "extra");
    EXPECT_ERROR("unexpected argument 'extra'", "-w", "2", "extra");
    EXPECT_ERROR("--algo must be one of auto", "--algo", "no-such-algorithm");
    /* a failed parse leaves nothing to free, and freeing twice is harmless */
    ck_assert_int_eq(PARSE(&a, err, "--bogus"), 2);
    lab_args_free(&a);
}
END_TEST

START_TEST(flag_check)
{
    char err[256];
    const lab_flag *w = &tflags[0], *b = &tflags[3], *v = &tflags[5];
    ck_assert_int_eq(lab_flag_check(w, "1", err, sizeof err), 0);
    ck_assert_int_eq(lab_flag_check(w, "64", err, sizeof err), 0);
    ck_assert_int_ne(lab_flag_check(w, "", err, sizeof err), 0);
    ck_assert_int_ne(lab_flag_check(w, "6 4", err, sizeof err), 0);
    ck_assert_int_ne(lab_flag_check(w, NULL, err, sizeof err), 0);
    ck_assert_str_eq(err, "--world-size needs a value");
    ck_assert_int_ne(lab_flag_check(w, "0", err, sizeof err), 0);
    ck_assert_str_eq(err, "--world-size must be an integer from 1 to 64, got '0'");
    ck_assert_int_eq(lab_flag_check(b, "mpi", err, sizeof err), 0);
    ck_assert_int_ne(lab_flag_check(b, "mp", err, sizeof err), 0);
    ck_assert_int_eq(lab_flag_check(v, NULL, err, sizeof err), 0);
    /* an unbounded int accepts any integer */
    lab_flag any = {"n", 0, FLAG_INT, "0", NULL, 0, 0, "any"};
    ck_assert_int_eq(lab_flag_check(&any, "-123456", err, sizeof err), 0);
    ck_assert_int_ne(lab_flag_check(&any, "1.0", err, sizeof err), 0);
    ck_assert_str_eq(err, "--n must be an integer, got '1.0'");
}
END_TEST

/* Read a whole FILE* written by the code under test. */
static char *slurp(FILE *f)
{
    fflush(f);
    long n = ftell(f);
    rewind(f);
    char *s = calloc((size_t)n + 1, 1);
    ck_assert_int_eq(fread(s, 1, (size_t)n, f), (size_t)n);
    return s;
}

START_TEST(help)
{
    FILE *f = tmpfile();
    lab_print_help(&tlab, f);
    char *s = slurp(f);
    ck_assert_msg(strstr(s, "usage: mlsys-lab run test/flags") != NULL, "%s", s);
    /* every flag with its type, default and help text, on one line */
    const char *rows[][4] = {
        {"-w, --world-size", "int", "4", "number of ranks (1 to 64)"},
        {"-s, --size", "size", "64K", "bytes per message (1 to 4G)"},
        {"--scale", "number", "1.5", "multiply values"},
        {"-b, --backend", "choice", "gloo", "gloo|nccl|shm|mpi"},
        {"--name", "text", "abc", "a name"},
        {"-v, --verbose", "switch", "off", "say more"},
        {"--timeout SECONDS", "number", "30", "deadlock"},
        {"--algo", "text", "auto", "algorithm"},
        {"--trace FILE", "text", "-", "trace"},
        {"--gated", "switch", "off", "step"},
        {"-h, --help", "switch", "off", "help"},
    };
    long type_col = -1;
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        const char *line = strstr(s, rows[i][0]);
        ck_assert_msg(line != NULL, "no row for %s in\n%s", rows[i][0], s);
        const char *eol = strchr(line, '\n');
        const char *bol = line;
        while (bol > s && bol[-1] != '\n')
            bol--;
        for (int k = 1; k < 4; k++) {
            const char *hit = strstr(line, rows[i][k]);
            ck_assert_msg(hit && hit < eol, "row %s lacks '%s'", rows[i][0], rows[i][k]);
        }
        /* aligned: the type column starts at the same offset on every row */
        const char *t = strstr(line + strlen(rows[i][0]), rows[i][1]);
        long col = (long)(t - bol);
        if (type_col < 0)
            type_col = col;
        ck_assert_msg(col == type_col, "row %s: type at column %ld, not %ld", rows[i][0], col,
                      type_col);
    }
    free(s);
    fclose(f);
}
END_TEST

START_TEST(help_flag)
{
    /* --help and -h print the help on stdout and return 1 */
    const char *variants[][4] = {{"--help", NULL}, {"-h", NULL},
                                 {"-w", "8", "--help", NULL}};
    for (int v = 0; v < 3; v++) {
        FILE *f = tmpfile();
        int saved = dup(1);
        fflush(stdout);
        dup2(fileno(f), 1);
        lab_args a;
        char err[256];
        int rc = parse_words(&tlab, &a, err, sizeof err, variants[v]);
        fflush(stdout);
        dup2(saved, 1);
        close(saved);
        ck_assert_int_eq(rc, 1);
        fseek(f, 0, SEEK_END);
        char *s = slurp(f);
        ck_assert_msg(strstr(s, "usage: mlsys-lab run test/flags") != NULL, "got: %s", s);
        free(s);
        fclose(f);
        lab_args_free(&a);
    }
}
END_TEST

START_TEST(real_labs)
{
    lab_args a;
    char err[512];
    const lab *hello = lab_find("ch01/hello-distributed");
    const lab *pipe = lab_find("ch02/pipeline-simulation");
    const lab *srb = lab_find("ch02/send-recv-basic");
    const lab *cs = lab_find("ch03/collective-cheatsheet");
    const lab *mean = lab_find("ch03/distributed-mean");
    ck_assert_ptr_nonnull(hello);
    ck_assert_ptr_null(lab_find("ch01/no-such-lab"));
    ck_assert_ptr_null(lab_find(NULL));

    ck_assert_int_eq(parse_words(hello, &a, err, sizeof err, (const char *[]){NULL}), 0);
    ck_assert_int_eq(lab_arg_int(&a, "world-size"), 4);
    ck_assert_str_eq(lab_arg_str(&a, "backend"), "shm");
    lab_args_free(&a);
    /* gloo, the original's name, is accepted and means shared memory */
    ck_assert_int_eq(parse_words(hello, &a, err, sizeof err,
                                 (const char *[]){"-b", "gloo", NULL}), 0);
    ck_assert_str_eq(lab_arg_str(&a, "backend"), "gloo");
    ck_assert(lab_backend_is_shm(lab_arg_str(&a, "backend")));
    lab_args_free(&a);
    ck_assert(lab_backend_is_shm(NULL) && lab_backend_is_shm("shm"));
    ck_assert(!lab_backend_is_shm("mpi") && !lab_backend_is_shm("nccl"));

    /* pipeline: -b is --backend as in every lab (the original's -b, the batch size, is
     * --batch-size only) */
    ck_assert_int_eq(parse_words(pipe, &a, err, sizeof err,
                                 (const char *[]){"--batch-size", "16", "-m", "3",
                                                  "--hidden-size", "8", "-b", "shm", NULL}), 0);
    ck_assert_int_eq(lab_arg_int(&a, "batch-size"), 16);
    ck_assert_int_eq(lab_arg_int(&a, "num-microbatches"), 3);
    ck_assert_int_eq(lab_arg_int(&a, "hidden-size"), 8);
    ck_assert_str_eq(lab_arg_str(&a, "backend"), "shm");
    lab_args_free(&a);
    ck_assert_int_eq(parse_words(pipe, &a, err, sizeof err, (const char *[]){NULL}), 0);
    ck_assert_int_eq(lab_arg_int(&a, "batch-size"), 32);
    ck_assert_int_eq(lab_arg_int(&a, "hidden-size"), 64);
    ck_assert_int_eq(lab_arg_int(&a, "num-microbatches"), 4);
    ck_assert_int_eq(lab_arg_int(&a, "world-size"), 4);
    lab_args_free(&a);
    ck_assert_int_eq(parse_words(pipe, &a, err, sizeof err,
                                 (const char *[]){"--batch-size", "nccl", NULL}), 2);
    ck_assert_msg(strstr(err, "--batch-size must be an integer") != NULL, "%s", err);
    ck_assert_int_eq(parse_words(pipe, &a, err, sizeof err,
                                 (const char *[]){"-b", "16", NULL}), 2);
    ck_assert_msg(strstr(err, "--backend must be one of") != NULL, "%s", err);

    /* send-recv needs two ranks */
    ck_assert_int_eq(parse_words(srb, &a, err, sizeof err, (const char *[]){"-w", "1", NULL}), 2);
    ck_assert_str_eq(err, "mlsys-lab: ch02/send-recv-basic: --world-size must be an integer "
                          "from 2 to 64, got '1'");
    ck_assert_int_eq(parse_words(srb, &a, err, sizeof err,
                                 (const char *[]){"--show-deadlock", NULL}), 0);
    ck_assert_int_eq(lab_arg_bool(&a, "show-deadlock"), 1);
    lab_args_free(&a);

    ck_assert_int_eq(parse_words(cs, &a, err, sizeof err, (const char *[]){NULL}), 0);
    ck_assert_str_eq(lab_arg_str(&a, "operation"), "all");
    lab_args_free(&a);
    ck_assert_int_eq(parse_words(cs, &a, err, sizeof err,
                                 (const char *[]){"-o", "reduce_scatter", NULL}), 0);
    lab_args_free(&a);
    ck_assert_int_eq(parse_words(cs, &a, err, sizeof err,
                                 (const char *[]){"-o", "alltoall", NULL}), 2);

    ck_assert_int_eq(parse_words(mean, &a, err, sizeof err, (const char *[]){"-d", "7", NULL}), 0);
    ck_assert_int_eq(lab_arg_int(&a, "data-size"), 7);
    lab_args_free(&a);
    ck_assert_int_eq(parse_words(mean, &a, err, sizeof err, (const char *[]){NULL}), 0);
    ck_assert_int_eq(lab_arg_int(&a, "data-size"), 100);
    lab_args_free(&a);
}
END_TEST

/* The curriculum table is consistent: 14 chapters in order, unique lab ids that lab_find
 * finds, no flag name or short alias used twice within a lab (common flags included), every
 * default accepted by its own validator, and a world-size flag that agrees with the lab's
 * rank bounds. */
START_TEST(table_consistent)
{
    int nch = 0;
    char err[256];
    for (; lab_chapters[nch]; nch++) {
        const chapter *ch = lab_chapters[nch];
        ck_assert_int_eq(ch->number, nch + 1);
        ck_assert_ptr_nonnull(ch->title);
        ck_assert_ptr_nonnull(ch->part);
        ck_assert_ptr_nonnull(ch->labs);
        for (int k = 0; ch->labs[k]; k++) {
            const lab *l = ch->labs[k];
            char prefix[8];
            snprintf(prefix, sizeof prefix, "ch%02d/", ch->number);
            ck_assert_msg(strncmp(l->id, prefix, 5) == 0, "%s is not in %s", l->id, prefix);
            ck_assert_ptr_eq(lab_find(l->id), l);
            ck_assert_msg((l->rank_main != NULL) != (l->main != NULL), "%s: rank_main xor main",
                          l->id);
            for (int i = 0; l->flags[i].name; i++) {
                const lab_flag *f = &l->flags[i];
                if (f->type != FLAG_BOOL && f->def)
                    ck_assert_msg(lab_flag_check(f, f->def, err, sizeof err) == 0, "%s --%s: %s",
                                  l->id, f->name, err);
                for (int j = 0; l->flags[j].name; j++) {
                    if (j != i) {
                        ck_assert_str_ne(f->name, l->flags[j].name);
                        ck_assert(!f->short_name || f->short_name != l->flags[j].short_name);
                    }
                }
                for (int j = 0; lab_common_flags[j].name; j++) {
                    ck_assert_str_ne(f->name, lab_common_flags[j].name);
                    ck_assert(!f->short_name || f->short_name != lab_common_flags[j].short_name);
                }
                for (int j = 0; lab_rank_flags[j].name; j++) {
                    ck_assert_str_ne(f->name, lab_rank_flags[j].name);
                    ck_assert(!f->short_name || f->short_name != lab_rank_flags[j].short_name);
                }
                if (!strcmp(f->name, "world-size")) {
                    ck_assert_int_eq(f->min, l->min_ranks);
                    ck_assert_int_eq(f->max, l->max_ranks);
                }
            }
        }
    }
    ck_assert_int_eq(nch, 14);
    for (int i = 0; lab_common_flags[i].name; i++) {
        const lab_flag *f = &lab_common_flags[i];
        if (f->type != FLAG_BOOL && f->def && strcmp(f->name, "algo"))
            ck_assert_msg(lab_flag_check(f, f->def, err, sizeof err) == 0, "--%s: %s", f->name, err);
    }
    for (int i = 0; lab_rank_flags[i].name; i++) {
        const lab_flag *f = &lab_rank_flags[i];
        if (f->type != FLAG_BOOL && f->def)
            ck_assert_msg(lab_flag_check(f, f->def, err, sizeof err) == 0, "--%s: %s", f->name, err);
    }
}
END_TEST

/* A value that reads as a non-finite number is a value with an error, not a missing value;
 * a timeout too small to be a whole millisecond is refused (it used to mean 30 s). */
START_TEST(nonfinite_and_tiny)
{
    EXPECT_ERROR("--scale must be a number, got '-inf' (a finite one)", "--scale", "-inf");
    EXPECT_ERROR("--scale must be a number, got '-nan' (a finite one)", "--scale", "-nan");
    EXPECT_ERROR("--scale must be a number, got '-Infinity' (a finite one)", "--scale",
                 "-Infinity");
    EXPECT_ERROR("--timeout must be at least 0.001 seconds", "--timeout", "1e-300");
    EXPECT_ERROR("--timeout must be at least 0.001 seconds", "--timeout", "0.0004");
    lab_args a;
    char err[512];
    ck_assert_int_eq(PARSE(&a, err, "--timeout", "0.001", "--scale", "-2.5"), 0);
    ck_assert(lab_arg_double(&a, "scale") == -2.5);
    lab_args_free(&a);
    /* a real flag after a flag that needs a value is still a flag */
    EXPECT_ERROR("--scale needs a value", "--scale", "--verbose");
}
END_TEST

/* Is name one of the '|'-separated names? */
static int one_of(const char *names, const char *name)
{
    size_t n = strlen(name);
    for (const char *p = names; p && *p;) {
        size_t len = strcspn(p, "|");
        if (len == n && !strncmp(p, name, n))
            return 1;
        p += len + (p[len] == '|');
    }
    return 0;
}

static void check_letters(const char *who, const lab_flag *t)
{
    for (int i = 0; t && t[i].name; i++) {
        if (!t[i].short_name)
            continue;
        const lab_short_flag *r = lab_short_flag_of(t[i].short_name);
        if (!r)
            continue;                   /* not reserved: the table's own letter */
        ck_assert_msg(one_of(r->names, t[i].name), "%s: -%c is --%s here but means --%s "
                      "everywhere", who, t[i].short_name, t[i].name, r->names);
    }
}

/* Issue 27 item 1: --backend is a common flag of exactly the labs that run on ranks (named
 * here, not derived from the table under test), declared by none of them, offered in their
 * help; a single-process lab refuses it (and mpirun's host flags) in one line. */
START_TEST(backend_common)
{
    static const char *const on_ranks[] = {
        "ch01/hello-distributed", "ch02/send-recv-basic", "ch02/pipeline-simulation",
        "ch02/async-communication", "ch03/collective-cheatsheet", "ch03/distributed-mean",
        "ch03/distributed-softmax", "ch04/benchmark-algorithms", "ch05/simple-ddp",
        "ch05/gradient-sync-visualizer", "ch05/train-lm", "ch06/tp-linear", "ch06/tp-mlp",
        "ch06/tp-attention", "ch07/pipeline-schedule-viz", "ch12/ppo-cartpole",
        "ch13/rlhf-loop", "ch14/weight-update-demo", NULL};
    int seen = 0, single = 0;
    for (int i = 0; lab_chapters[i]; i++)
        for (int k = 0; lab_chapters[i]->labs[k]; k++) {
            const lab *l = lab_chapters[i]->labs[k];
            int listed = 0;
            for (int j = 0; on_ranks[j]; j++)
                listed |= !strcmp(on_ranks[j], l->id);
            if (listed != lab_on_ranks(l) && strcmp(l->id, "ch08/minimal-inference-server"))
                ck_abort_msg("%s: runs on ranks %d, listed %d", l->id, lab_on_ranks(l), listed);
            for (int j = 0; l->flags[j].name; j++)
                ck_assert_msg(strcmp(l->flags[j].name, "backend"), "%s declares --backend",
                              l->id);
            lab_args a;
            char err[512];
            int rc = parse_words(l, &a, err, sizeof err,
                                 (const char *[]){"--backend", "mpi", NULL});
            FILE *f = tmpfile();
            lab_print_help(l, f);
            char *help = slurp(f);
            if (lab_on_ranks(l)) {
                seen++;
                ck_assert_msg(rc == 0, "%s: %s", l->id, err);
                ck_assert_str_eq(lab_arg_str(&a, "backend"), "mpi");
                lab_args_free(&a);
                ck_assert_int_eq(parse_words(l, &a, err, sizeof err, (const char *[]){NULL}), 0);
                ck_assert_str_eq(lab_arg_str(&a, "backend"), "shm");
                lab_args_free(&a);
                ck_assert_msg(strstr(help, "-b, --backend NAME") != NULL, "%s:\n%s", l->id, help);
                ck_assert_msg(strstr(help, "--hostfile") != NULL, "%s", l->id);
            } else {
                single++;
                ck_assert_int_eq(rc, 2);
                ck_assert_msg(strstr(err, "--backend is a flag of the labs that run on ranks") &&
                              !strchr(err, '\n'), "%s: %s", l->id, err);
                ck_assert_int_eq(parse_words(l, &a, err, sizeof err,
                                             (const char *[]){"--hostfile", "h", NULL}), 2);
                ck_assert_msg(strstr(err, "--hostfile is a flag of the labs"), "%s", err);
                ck_assert_msg(strstr(help, "-b, --backend") == NULL, "%s offers it", l->id);
                ck_assert_int_eq(parse_words(l, &a, err, sizeof err, (const char *[]){NULL}), 0);
                ck_assert_ptr_null(lab_arg_str(&a, "backend"));
                lab_args_free(&a);
            }
            free(help);
            fclose(f);
        }
    ck_assert_int_ge(seen, 18);
    ck_assert_int_ge(single, 10);
}
END_TEST

/* Issue 19 item 18: a reserved letter means one thing in every lab and every command. */
START_TEST(short_flags_one_meaning)
{
    for (int i = 0; lab_short_flags[i].letter; i++)
        for (int j = i + 1; lab_short_flags[j].letter; j++)
            ck_assert_msg(lab_short_flags[i].letter != lab_short_flags[j].letter,
                          "-%c is in the table twice", lab_short_flags[i].letter);
    int nlabs = 0, ncmds = 0;
    check_letters("common flags", lab_common_flags);
    check_letters("common flags of labs on ranks", lab_rank_flags);
    for (int i = 0; lab_chapters[i]; i++)
        for (int k = 0; lab_chapters[i]->labs && lab_chapters[i]->labs[k]; k++, nlabs++)
            check_letters(lab_chapters[i]->labs[k]->id, lab_chapters[i]->labs[k]->flags);
    for (int i = 0; cli_declared[i]; i++, ncmds++)
        check_letters(cli_declared[i]->name, cli_declared[i]->flags);
    ck_assert_int_ge(nlabs, 18);
    ck_assert_int_ge(ncmds, 6);
    /* the clashes the issue names are gone: -w and -b mean one thing in bench and the labs */
    ck_assert_str_eq(lab_short_flag_of('w')->names, "world-size");
    ck_assert_str_eq(lab_short_flag_of('b')->names, "backend");
    /* and the checker itself refuses a table that reuses a letter (run in a child: the
     * failure is the expected outcome) */
    static const lab_flag bad[] = {
        {"batch-size", 'b', FLAG_INT, "4", NULL, 1, 8, "rows"},
        {NULL, 0, 0, NULL, NULL, 0, 0, NULL}
    };
    pid_t pid = fork();
    if (pid == 0) {
        close(2);
        check_letters("planted", bad);
        _exit(0);
    }
    int st;
    ck_assert(waitpid(pid, &st, 0) == pid);
    ck_assert_msg(!(WIFEXITED(st) && WEXITSTATUS(st) == 0), "a reused -b passed the check");
}
END_TEST

static const lab_flag cflags[] = {
    {"out", 0, FLAG_STR, "out", NULL, 0, 0, "a folder"},
    {"bytes", 0, FLAG_SIZE, "8", NULL, 1, FLAG_NO_MAX, "at least one byte"},
    {"rate", 0, FLAG_DOUBLE, "1", NULL, 0, FLAG_NO_MAX, "0 or more"},
    {"world-size", 'w', FLAG_INT, "2", NULL, 1, 8, "ranks"},
    {"secret", 0, FLAG_BOOL, NULL, NULL, 0, 0, NULL},
    {NULL, 0, 0, NULL, NULL, 0, 0, NULL}
};
static const lab_command tcmd = {.name = "thing", .args = "FILE", .min_pos = 1, .max_pos = 1,
                                 .missing = "which file?", .summary = "a test command",
                                 .flags = cflags};

static int cparse(lab_args *a, char *err, size_t n, const char **words)
{
    int argc = 0;
    while (words[argc])
        argc++;
    return lab_command_parse(&tcmd, argc, (char **)words, a, err, n);
}
#define CPARSE(a, err, ...) \
    cparse((a), (err), sizeof(err), (const char *[]){"thing", __VA_ARGS__, NULL})

/* A command's table: positional arguments, the one line of its errors, bounds without an
 * upper end, hidden flags, and values that outlive the parse (lab_arg_text). */
START_TEST(commands)
{
    lab_args a;
    char err[512];
    ck_assert_int_eq(CPARSE(&a, err, "f.bin", "--bytes", "1M", "-w", "3", "--rate=0"), 0);
    ck_assert_int_eq(a.npos, 1);
    ck_assert_str_eq(a.pos[0], "f.bin");
    ck_assert_uint_eq(lab_arg_size(&a, "bytes"), 1u << 20);
    ck_assert_int_eq(lab_arg_int(&a, "world-size"), 3);
    ck_assert(lab_arg_double(&a, "rate") == 0.0);
    ck_assert_str_eq(lab_arg_text(&a, "out"), "out");       /* the table's default */
    ck_assert_ptr_null(lab_arg_text(&a, "secret"));
    lab_args_free(&a);
    const char *words[] = {"thing", "--out", "dir", "x", "--secret", NULL};
    ck_assert_int_eq(lab_command_parse(&tcmd, 5, (char **)words, &a, err, sizeof err), 0);
    ck_assert_ptr_eq(lab_arg_text(&a, "out"), words[2]);     /* in argv, not a copy */
    ck_assert(lab_arg_bool(&a, "secret"));
    lab_args_free(&a);
    ck_assert_int_eq(CPARSE(&a, err, "--bytes", "8"), 2);
    ck_assert_str_eq(err, "mlsys-lab thing: which file?");
    ck_assert_int_eq(CPARSE(&a, err, "a", "b"), 2);
    ck_assert_str_eq(err, "mlsys-lab thing: unexpected argument 'b' (one argument is enough)");
    ck_assert_int_eq(CPARSE(&a, err, "a", "--bytes", "0"), 2);
    ck_assert_str_eq(err, "mlsys-lab thing: --bytes must be a size (8, 64K, 1M, 2G) of 1 or "
                          "more, got '0'");
    ck_assert_int_eq(CPARSE(&a, err, "a", "--rate", "-0.5"), 2);
    ck_assert_str_eq(err, "mlsys-lab thing: --rate must be a number of 0 or more, got '-0.5'");
    ck_assert_int_eq(CPARSE(&a, err, "a", "--rate", "1e300"), 0);       /* no upper end */
    lab_args_free(&a);
    /* a letter this command lacks says what it means everywhere else */
    ck_assert_int_eq(CPARSE(&a, err, "a", "-b", "8"), 2);
    ck_assert_msg(strstr(err, "-b means --backend") && strstr(err, "--minbytes in bench"), "%s",
                  err);
    ck_assert_int_eq(CPARSE(&a, err, "a", "-q"), 2);
    ck_assert_str_eq(err, "mlsys-lab thing: unknown flag '-q' (see --help)");
    /* the help comes from the table; the hidden flag is not in it */
    int fds[2];
    ck_assert(pipe(fds) == 0);
    FILE *f = fdopen(fds[1], "w");
    lab_command_help(&tcmd, f);
    fclose(f);
    char buf[4096];
    ssize_t got = read(fds[0], buf, sizeof buf - 1);
    close(fds[0]);
    ck_assert(got > 0);
    buf[got] = 0;
    ck_assert_msg(strstr(buf, "usage: mlsys-lab thing FILE [flags]") && strstr(buf, "--bytes") &&
                  strstr(buf, "(1 or more)") && strstr(buf, "-w, --world-size") &&
                  strstr(buf, "-h, --help") && !strstr(buf, "secret"), "%s", buf);
}
END_TEST

/* fd 1 or 2 into a temp file while fn runs; what was written, malloc'd. */
static char *capture(int fd, int (*fn)(void *), void *arg, int *rc)
{
    char path[] = "/tmp/test_flags_capXXXXXX";
    int tmp = mkstemp(path);
    ck_assert_int_ge(tmp, 0);
    unlink(path);
    fflush(NULL);
    int saved = dup(fd);
    dup2(tmp, fd);
    *rc = fn(arg);
    fflush(NULL);
    dup2(saved, fd);
    close(saved);
    char *out = calloc(1, 8192);
    ck_assert_int_ge(pread(tmp, out, 8191, 0), 0);
    close(tmp);
    return out;
}

static const lab_command sub_a = {.name = "thing a", .args = "FILE", .min_pos = 1,
                                  .max_pos = 1, .summary = "the first"};
static const lab_command sub_b = {.name = "thing b", .summary = "the second"};
static const lab_command *const subs[] = {&sub_a, &sub_b, NULL};
static const lab_command *g_which;

static int pick(void *arg)
{
    const char **words = arg;
    int argc = 0;
    while (words[argc])
        argc++;
    g_which = NULL;
    return lab_subcommand("thing", subs, argc, (char **)words, &g_which);
}

START_TEST(subcommands)
{
    int rc;
    const char *b[] = {"thing", "b", "--help", NULL};
    free(capture(1, pick, b, &rc));
    ck_assert_int_eq(rc, -1);                       /* picked; its own flags are its own */
    ck_assert_ptr_eq(g_which, &sub_b);
    const char *a[] = {"thing", "a", "f.bin", NULL};
    free(capture(1, pick, a, &rc));
    ck_assert_int_eq(rc, -1);
    ck_assert_ptr_eq(g_which, &sub_a);
    static const char *const helps[] = {"--help", "-h"};
    for (int i = 0; i < 2; i++) {
        const char *h[] = {"thing", helps[i], NULL};
        char *out = capture(1, pick, h, &rc);
        ck_assert_int_eq(rc, 0);
        ck_assert_msg(strstr(out, "usage: mlsys-lab thing a FILE") &&
                      strstr(out, "usage: mlsys-lab thing b") && strstr(out, "the second"),
                      "%s", out);
        free(out);
    }
    const char *none[] = {"thing", NULL}, *odd[] = {"thing", "c", NULL},
               *flag[] = {"thing", "--bytes", NULL};
    const char **bad[] = {none, odd, flag};
    for (int i = 0; i < 3; i++) {
        char *err = capture(2, pick, bad[i], &rc);
        ck_assert_int_eq(rc, 2);
        ck_assert_ptr_null(g_which);
        ck_assert_str_eq(err, "mlsys-lab thing: expected 'a FILE' or 'b' (see --help)\n");
        free(err);
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("flags");
    TCase *tc = tcase_create("parse");
    tcase_add_test(tc, defaults);
    tcase_add_test(tc, spellings);
    tcase_add_test(tc, sizes);
    tcase_add_test(tc, errors);
    tcase_add_test(tc, nonfinite_and_tiny);
    tcase_add_test(tc, flag_check);
    tcase_add_test(tc, help);
    tcase_add_test(tc, help_flag);
    tcase_add_test(tc, real_labs);
    tcase_add_test(tc, table_consistent);
    tcase_add_test(tc, short_flags_one_meaning);
    tcase_add_test(tc, backend_common);
    tcase_add_test(tc, commands);
    tcase_add_test(tc, subcommands);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
