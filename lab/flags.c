/* flags.c - the command-line parser every lab shares. A lab declares its flags as a table
 * (lab.h); this file parses argv against that table plus the common flags (--timeout, --algo,
 * --trace, --gated, --help; and --backend with mpirun's hosts for a lab that runs on ranks),
 * validates each value and prints the help. The same validator,
 * lab_flag_check, is what the UI form calls while the learner types.
 *
 * Bounds: FLAG_INT and FLAG_SIZE use [min, max] inclusive (0,0 = none). FLAG_DOUBLE uses the
 * same bounds, except that min == 0 with max > 0 means "above 0" (a timeout of 0 makes no
 * sense). */
#include "lab.h"
#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

const lab_flag lab_common_flags[] = {
    {"timeout", 0, FLAG_DOUBLE, "30", NULL, 0, 86400,
     "seconds a blocked send/recv waits before 'deadlock suspected'"},
    {"algo", 0, FLAG_STR, "auto", NULL, 0, 0,
     "collective algorithm (ring, tree, direct, ...) or auto"},
    {"trace", 0, FLAG_STR, NULL, NULL, 0, 0, "write a Chrome trace (Perfetto) to FILE"},
    {"gated", 0, FLAG_BOOL, NULL, NULL, 0, 0, "ranks wait at every step for the viewer"},
    {"verbose", 'v', FLAG_BOOL, NULL, NULL, 0, 0, "say more (under mpirun: the mpirun line)"},
    {"help", 'h', FLAG_BOOL, NULL, NULL, 0, 0, "show this help"},
    {NULL, 0, 0, NULL, NULL, 0, 0, NULL}
};

/* What every lab that runs on ranks adds (lab_on_ranks): the transport and mpirun's hosts.
 * "gloo", the original scripts' name for their CPU backend, is our shared memory. */
const lab_flag lab_rank_flags[] = {
    {"backend", 'b', FLAG_CHOICE, "shm", "shm|mpi|nccl|gloo", 0, 0,
     "transport: shared memory, mpirun (hosts too), NCCL (a GPU per rank); gloo = shm"},
    {"hostfile", 0, FLAG_STR, NULL, NULL, 0, 0,
     "--backend mpi: mpirun's hostfile (a host per line, slots=N)"},
    {"host", 0, FLAG_STR, NULL, NULL, 0, 0, "--backend mpi: hosts for mpirun (a,b:2,...)"},
    {"events-addr", 0, FLAG_STR, NULL, NULL, 0, 0,
     "--backend mpi: address the ranks send events to (default loopback; HOST[:PORT])"},
    {NULL, 0, 0, NULL, NULL, 0, 0, NULL}
};

int lab_on_ranks(const lab *l)
{
    return l && l->rank_main && l->max_ranks != 1;
}

int lab_backend_is_shm(const char *backend)
{
    return !backend || !strcmp(backend, "shm") || !strcmp(backend, "gloo");
}

/* The reserved short flags: a letter here means one thing in every lab and every command
 * that has it (tests/unit/test_flags.c holds every table to it). These are the letters of
 * the lab's common vocabulary, which a learner carries from one lab to the next; a letter
 * not here is a lab's or a command's own (bench's -e, ch12's -e) and means what its --help
 * says. Where two tables disagreed on a reserved letter, the other use kept its long name;
 * `was` says what the letter meant there, for the help and for the error of a letter typed
 * out of habit. */
const lab_short_flag lab_short_flags[] = {
    {'h', "help", NULL},
    {'v', "verbose", NULL},
    {'w', "world-size", "in bench, -w was --warmup_iters (nccl-tests' letter)"},
    {'b', "backend", "-b was --batch-size in ch02/pipeline-simulation, ch06/tp-mlp, "
     "ch06/tp-attention, ch07/pipeline-schedule-viz, ch07/parallel-strategy-calculator and "
     "ch14/memory-timeline, and --minbytes in bench"},
    {'t', "tp-size|tensor-parallel-size", NULL},
    {'H', "hidden-size", NULL},
    {'s', "seq-len", "-s was --stages in ch07/pipeline-schedule-viz, now -P"},
    {'m', "microbatches|num-microbatches",
     "-m was --memory in ch07/parallel-strategy-calculator and --model-size in "
     "ch14/memory-timeline and ch14/weight-update-demo"},
    {'o', "operation|op", NULL},
    {0, NULL, NULL}
};

const lab_short_flag *lab_short_flag_of(char letter)
{
    for (int i = 0; letter && lab_short_flags[i].letter; i++)
        if (lab_short_flags[i].letter == letter)
            return &lab_short_flags[i];
    return NULL;
}

static const char *const type_names[] = {
    [FLAG_INT] = "int", [FLAG_SIZE] = "size", [FLAG_DOUBLE] = "number",
    [FLAG_STR] = "text", [FLAG_CHOICE] = "choice", [FLAG_BOOL] = "switch",
};

/* The placeholder shown after a flag in the usage table. */
static const char *metavar(const lab_flag *f)
{
    if (!strcmp(f->name, "timeout"))
        return "SECONDS";
    if (!strcmp(f->name, "trace"))
        return "FILE";
    switch (f->type) {
    case FLAG_INT: return "N";
    case FLAG_SIZE: return "SIZE";
    case FLAG_DOUBLE: return "X";
    case FLAG_CHOICE: return "NAME";
    case FLAG_STR: return "NAME";
    default: return "";
    }
}

/* Bounds of a size as "64K", "1M": the units the parser accepts. */
static void size_text(long v, char *out, size_t n)
{
    static const char units[] = "KMG";
    int u = -1;
    while (u < 2 && v >= 1024 && v % 1024 == 0) {
        v /= 1024;
        u++;
    }
    if (u < 0)
        snprintf(out, n, "%ld", v);
    else
        snprintf(out, n, "%ld%c", v, units[u]);
}

/* Is word one of the '|'-separated choices? */
static int choice_ok(const char *choices, const char *word)
{
    size_t wl = strlen(word);
    const char *p = choices;
    while (p && *p) {
        const char *bar = strchr(p, '|');
        size_t len = bar ? (size_t)(bar - p) : strlen(p);
        if (len == wl && !strncmp(p, word, len))
            return 1;
        p = bar ? bar + 1 : NULL;
    }
    return 0;
}

/* --algo: "auto" or the name of an algorithm that at least one collective has. */
static int algo_ok(const char *v)
{
    if (!strcmp(v, "auto") || !strcmp(v, "native"))   /* native: the backend's own */
        return 1;
    for (int k = 0; k < MLSYS_COLL_COUNT; k++) {
        const char *const *names = mlsys_algo_names((mlsys_coll)k);
        for (int i = 0; names && names[i]; i++)
            if (!strcmp(names[i], v))
                return 1;
    }
    return 0;
}

/* "auto|ring|tree|..." without repeats, for the error message. */
static void algo_list(char *out, size_t n)
{
    size_t used = (size_t)snprintf(out, n, "auto|native");
    for (int k = 0; k < MLSYS_COLL_COUNT; k++) {
        const char *const *names = mlsys_algo_names((mlsys_coll)k);
        for (int i = 0; names && names[i]; i++) {
            int seen = 0;
            for (int k2 = 0; k2 < k && !seen; k2++) {
                const char *const *prev = mlsys_algo_names((mlsys_coll)k2);
                for (int j = 0; prev && prev[j] && !seen; j++)
                    seen = !strcmp(prev[j], names[i]);
            }
            for (int j = 0; j < i && !seen; j++)
                seen = !strcmp(names[j], names[i]);
            if (seen || used + strlen(names[i]) + 2 >= n)
                continue;
            used += (size_t)snprintf(out + used, n - used, "|%s", names[i]);
        }
    }
}

int lab_flag_check(const lab_flag *f, const char *value, char *err, size_t errlen)
{
    int bounded = f->min != 0 || f->max != 0;
    int no_max = f->max == FLAG_NO_MAX;          /* "min or more" */
    if (!value) {
        if (f->type == FLAG_BOOL)
            return 0;
        snprintf(err, errlen, "--%s needs a value", f->name);
        return -1;
    }
    switch (f->type) {
    case FLAG_INT: {
        long v;
        int bad = mlsys_parse_long(value, &v) != 0;
        if (!bad && bounded && (v < f->min || (!no_max && v > f->max)))
            bad = 1;
        if (!bad)
            return 0;
        if (no_max)
            snprintf(err, errlen, "--%s must be an integer of %ld or more, got '%s'", f->name,
                     f->min, value);
        else if (bounded)
            snprintf(err, errlen, "--%s must be an integer from %ld to %ld, got '%s'", f->name,
                     f->min, f->max, value);
        else
            snprintf(err, errlen, "--%s must be an integer, got '%s'", f->name, value);
        return -1;
    }
    case FLAG_SIZE: {
        uint64_t v;
        int bad = mlsys_parse_size(value, &v) != 0;
        if (!bad && bounded && (v < (uint64_t)f->min || (!no_max && v > (uint64_t)f->max)))
            bad = 1;
        if (!bad)
            return 0;
        if (no_max) {
            char lo[32];
            size_text(f->min, lo, sizeof lo);
            snprintf(err, errlen, "--%s must be a size (8, 64K, 1M, 2G) of %s or more, got '%s'",
                     f->name, lo, value);
        } else if (bounded) {
            char lo[32], hi[32];
            size_text(f->min, lo, sizeof lo);
            size_text(f->max, hi, sizeof hi);
            snprintf(err, errlen, "--%s must be a size (8, 64K, 1M, 2G) from %s to %s, got '%s'",
                     f->name, lo, hi, value);
        } else {
            snprintf(err, errlen, "--%s must be a size (8, 64K, 1M, 2G), got '%s'", f->name,
                     value);
        }
        return -1;
    }
    case FLAG_DOUBLE: {
        char *end;
        double v = strtod(value, &end);
        int bad = end == value || *end || !isfinite(v) || isspace((unsigned char)*value);
        int positive = f->min == 0 && f->max > 0;
        if (!bad && bounded) {
            if (positive ? (v <= 0 || v > (double)f->max)
                         : (v < (double)f->min || (!no_max && v > (double)f->max)))
                bad = 1;
        }
        if (!bad && !strcmp(f->name, "timeout") && v < 0.001) {
            snprintf(err, errlen, "--timeout must be at least 0.001 seconds (1 ms), got '%s'",
                     value);
            return -1;
        }
        if (!bad)
            return 0;
        if (end != value && !*end && !isfinite(v))
            snprintf(err, errlen, "--%s must be a number, got '%s' (a finite one)", f->name,
                     value);
        else if (no_max)
            snprintf(err, errlen, "--%s must be a number of %ld or more, got '%s'", f->name,
                     f->min, value);
        else if (positive)
            snprintf(err, errlen, "--%s must be a number above 0 and at most %ld, got '%s'",
                     f->name, f->max, value);
        else if (bounded)
            snprintf(err, errlen, "--%s must be a number from %ld to %ld, got '%s'", f->name,
                     f->min, f->max, value);
        else
            snprintf(err, errlen, "--%s must be a number, got '%s'", f->name, value);
        return -1;
    }
    case FLAG_CHOICE:
        if (choice_ok(f->choices, value))
            return 0;
        snprintf(err, errlen, "--%s must be one of %s, got '%s'", f->name, f->choices, value);
        return -1;
    case FLAG_STR:
        if (!*value) {
            snprintf(err, errlen, "--%s needs a value", f->name);
            return -1;
        }
        if (f == &lab_common_flags[1] && !algo_ok(value)) {      /* --algo of the labs */
            char list[512];
            algo_list(list, sizeof list);
            snprintf(err, errlen, "--algo must be one of %s, got '%s'", list, value);
            return -1;
        }
        return 0;
    case FLAG_BOOL:
        snprintf(err, errlen, "--%s is a switch and takes no value, got '%s'", f->name, value);
        return -1;
    }
    snprintf(err, errlen, "--%s has an unknown type", f->name);
    return -1;
}

static int count_flags(const lab_flag *t)
{
    int n = 0;
    while (t && t[n].name)
        n++;
    return n;
}

/* Index of a flag by long name, or -1. */
static int find_long(const lab_args *a, const char *name, size_t len)
{
    for (int i = 0; i < a->nflags; i++)
        if (strlen(a->flags[i]->name) == len && !strncmp(a->flags[i]->name, name, len))
            return i;
    return -1;
}

static int find_short(const lab_args *a, char ch)
{
    for (int i = 0; i < a->nflags; i++)
        if (a->flags[i]->short_name && a->flags[i]->short_name == ch)
            return i;
    return -1;
}

/* Does this word look like a flag rather than a value? "-1", "-0.5" and every other word
 * that reads whole as a number ("-inf", "-nan": then the check says what is wrong with it)
 * are values. */
static int looks_like_flag(const char *s)
{
    if (s[0] != '-' || s[1] == 0)
        return 0;
    if (isdigit((unsigned char)s[1]) || (s[1] == '.' && isdigit((unsigned char)s[2])))
        return 0;
    char *end;
    strtod(s, &end);
    if (end != s && *end == 0)
        return 0;
    return 1;
}

static void set_value(lab_args *a, int i, const char *v)
{
    free((void *)a->values[i]);
    a->values[i] = v ? mlsys_xstrdup(v) : NULL;
}

/* Do two valid texts mean the same value? ("8" and "08", "1M" and "1048576") */
static int same_value(const lab_flag *f, const char *x, const char *y)
{
    long a, b;
    uint64_t sa, sb;
    switch (f->type) {
    case FLAG_INT:
        return mlsys_parse_long(x, &a) == 0 && mlsys_parse_long(y, &b) == 0 && a == b;
    case FLAG_SIZE:
        return mlsys_parse_size(x, &sa) == 0 && mlsys_parse_size(y, &sb) == 0 && sa == sb;
    case FLAG_DOUBLE:
        return strtod(x, NULL) == strtod(y, NULL);
    default:
        return strcmp(x, y) == 0;
    }
}

/* Store a value given on the command line: validated, and the same flag twice must agree. */
static int give(lab_args *a, int i, const char *v, char *msg, size_t n)
{
    const lab_flag *f = a->flags[i];
    if (lab_flag_check(f, v, msg, n) != 0)
        return -1;
    const char *stored = v ? v : "1";
    if (a->given[i]) {
        if (!same_value(f, a->values[i], stored)) {
            snprintf(msg, n, "--%s given twice with different values ('%s' and '%s')",
                     f->name, a->values[i], stored);
            return -1;
        }
        return 0;
    }
    set_value(a, i, stored);
    a->given[i] = 1;
    a->src[i] = v ? v : "1";
    return 0;
}

/* A flag that only labs on ranks have, named to a lab that runs in one process: one line. */
static int rank_flag_elsewhere(const lab_args *a, const char *name, size_t len, char *msg,
                               size_t msglen)
{
    if (!a->lab || lab_on_ranks(a->lab))
        return 0;
    for (int i = 0; lab_rank_flags[i].name; i++)
        if (strlen(lab_rank_flags[i].name) == len && !strncmp(lab_rank_flags[i].name, name, len)) {
            snprintf(msg, msglen, "--%s is a flag of the labs that run on ranks; this lab runs "
                     "in one process", lab_rank_flags[i].name);
            return 1;
        }
    return 0;
}

/* The flags of up to three tables (a lab's, the rank labs' and the common ones; or the
 * command's and --help) into a, with up to max_pos positional arguments. 0, 1 when --help
 * was given (nothing printed), 2 with the reason in msg; a is filled in every case (the
 * caller frees it). */
static int parse(lab_args *a, const lab_flag *const tables[3], int max_pos, int argc,
                 char **argv, char *msg, size_t msglen)
{
    a->nflags = 0;
    for (int t = 0; t < 3; t++)
        a->nflags += count_flags(tables[t]);
    a->flags = mlsys_xcalloc((size_t)a->nflags + 1, sizeof *a->flags);
    a->values = mlsys_xcalloc((size_t)a->nflags + 1, sizeof *a->values);
    a->given = mlsys_xcalloc((size_t)a->nflags + 1, sizeof *a->given);
    a->src = mlsys_xcalloc((size_t)a->nflags + 1, sizeof *a->src);
    a->pos = mlsys_xcalloc((size_t)max_pos + 1, sizeof *a->pos);
    int k0 = 0;
    for (int t = 0; t < 3; t++)
        for (int i = 0; tables[t] && tables[t][i].name; i++)
            a->flags[k0++] = &tables[t][i];
    for (int i = 0; i < a->nflags; i++)
        if (a->flags[i]->type != FLAG_BOOL && a->flags[i]->def) {
            set_value(a, i, a->flags[i]->def);
            a->src[i] = a->flags[i]->def;
        }

    int want_help = 0;
    for (int k = 0; k < argc; k++) {
        const char *s = argv[k];
        if (s[0] == '-' && s[1] == '-' && s[2]) {
            const char *name = s + 2, *eq = strchr(name, '=');
            size_t len = eq ? (size_t)(eq - name) : strlen(name);
            int i = find_long(a, name, len);
            if (i < 0) {
                if (!rank_flag_elsewhere(a, name, len, msg, msglen))
                    snprintf(msg, msglen, "unknown flag '--%.*s' (see --help)", (int)len, name);
                return 2;
            }
            const lab_flag *f = a->flags[i];
            const char *v = NULL;
            if (eq) {
                v = eq + 1;
            } else if (f->type != FLAG_BOOL) {
                if (k + 1 >= argc || looks_like_flag(argv[k + 1])) {
                    snprintf(msg, msglen, "--%s needs a value", f->name);
                    return 2;
                }
                v = argv[++k];
            }
            if (give(a, i, v, msg, msglen) != 0)
                return 2;
            if (!strcmp(f->name, "help"))
                want_help = 1;
        } else if (s[0] == '-' && s[1] && s[1] != '-') {
            /* -w 4, -w4, -w=4; switches may be grouped: -h */
            for (const char *p = s + 1; *p; p++) {
                int i = find_short(a, *p);
                if (i < 0) {
                    const lab_short_flag *r = lab_short_flag_of(*p);
                    if (r && r->was)
                        snprintf(msg, msglen, "unknown flag '-%c' here: -%c means --%.*s "
                                 "wherever it exists (%s; see --help)", *p, *p,
                                 (int)strcspn(r->names, "|"), r->names, r->was);
                    else
                        snprintf(msg, msglen, "unknown flag '-%c' (see --help)", *p);
                    return 2;
                }
                const lab_flag *f = a->flags[i];
                if (f->type == FLAG_BOOL) {
                    if (p[1] == '=') {
                        if (give(a, i, p + 2, msg, msglen) != 0)
                            return 2;
                        break;
                    }
                    if (give(a, i, NULL, msg, msglen) != 0)
                        return 2;
                    if (!strcmp(f->name, "help"))
                        want_help = 1;
                    continue;
                }
                const char *v;
                if (p[1])
                    v = p[1] == '=' ? p + 2 : p + 1;
                else if (k + 1 < argc && !looks_like_flag(argv[k + 1]))
                    v = argv[++k];
                else {
                    snprintf(msg, msglen, "--%s needs a value", f->name);
                    return 2;
                }
                if (give(a, i, v, msg, msglen) != 0)
                    return 2;
                break;
            }
        } else if (a->npos < max_pos) {
            a->pos[a->npos++] = s;
        } else if (max_pos > 0) {
            snprintf(msg, msglen, "unexpected argument '%s' (one %s is enough)", s,
                     max_pos == 1 ? "argument" : "set of arguments");
            return 2;
        } else {
            snprintf(msg, msglen, "unexpected argument '%s' (flags start with --)", s);
            return 2;
        }
    }
    return want_help ? 1 : 0;
}

int lab_args_parse(const lab *l, int argc, char **argv, lab_args *a, char *err, size_t errlen)
{
    char msg[512];
    memset(a, 0, sizeof *a);
    a->lab = l;
    const lab_flag *const tables[3] = {l->flags, lab_on_ranks(l) ? lab_rank_flags : NULL,
                                       lab_common_flags};
    int rc = parse(a, tables, 0, argc, argv, msg, sizeof msg);
    if (rc == 1) {
        /* nothing to run: the values are freed here, like on an error */
        lab_print_help(l, stdout);
        fflush(stdout);
    } else if (rc == 2) {
        snprintf(err, errlen, "mlsys-lab: %s: %s", l->id, msg);
    }
    if (rc)
        lab_args_free(a);
    return rc;
}

/* What every command accepts besides its own flags. */
static const lab_flag command_common[] = {
    {"help", 'h', FLAG_BOOL, NULL, NULL, 0, 0, "show this help"},
    {NULL, 0, 0, NULL, NULL, 0, 0, NULL}
};

int lab_command_parse(const lab_command *c, int argc, char **argv, lab_args *a, char *err,
                      size_t errlen)
{
    char msg[512];
    memset(a, 0, sizeof *a);
    a->cmd = c;
    const lab_flag *const tables[3] = {c->flags, command_common, NULL};
    int rc = parse(a, tables, c->max_pos, argc - 1, argv + 1, msg, sizeof msg);
    if (rc == 1) {
        lab_command_help(c, stdout);
        fflush(stdout);
    } else if (rc == 0 && a->npos < c->min_pos) {
        snprintf(msg, sizeof msg, "%s", c->missing ? c->missing : "an argument is missing");
        rc = 2;
    }
    if (rc == 2)
        snprintf(err, errlen, "mlsys-lab %s: %s", c->name, msg);
    if (rc)
        lab_args_free(a);
    return rc;
}

int lab_subcommand(const char *group, const lab_command *const *subs, int argc, char **argv,
                   const lab_command **which)
{
    size_t gl = strlen(group);
    for (int i = 0; argc >= 2 && subs[i]; i++)
        if (!strcmp(argv[1], subs[i]->name + gl + 1)) {     /* "model info" -> "info" */
            *which = subs[i];
            return -1;
        }
    if (argc >= 2) {                    /* --help, as the parser reads it for any command */
        static const lab_flag none[] = {{NULL, 0, 0, NULL, NULL, 0, 0, NULL}};
        lab_args a;
        char msg[256];
        memset(&a, 0, sizeof a);
        const lab_flag *const tables[3] = {none, command_common, NULL};
        int rc = parse(&a, tables, 0, 1, argv + 1, msg, sizeof msg);
        lab_args_free(&a);
        if (rc == 1) {
            for (int i = 0; subs[i]; i++) {
                if (i)
                    printf("\n");
                lab_command_help(subs[i], stdout);
            }
            fflush(stdout);
            return 0;
        }
    }
    char want[256];
    size_t used = 0;
    want[0] = 0;
    for (int i = 0; subs[i] && used < sizeof want; i++)
        used += (size_t)snprintf(want + used, sizeof want - used, "%s'%s%s%s'",
                                 i == 0 ? "" : subs[i + 1] ? ", " : " or ", subs[i]->name + gl + 1,
                                 subs[i]->args && *subs[i]->args ? " " : "",
                                 subs[i]->args ? subs[i]->args : "");
    fprintf(stderr, "mlsys-lab %s: expected %s (see --help)\n", group, want);
    return 2;
}

int lab_command_args(const lab_command *c, int argc, char **argv, lab_args *a)
{
    char err[600];
    int rc = lab_command_parse(c, argc, argv, a, err, sizeof err);
    if (rc == 2)
        fprintf(stderr, "%s\n", err);
    return rc == 0 ? -1 : rc == 1 ? 0 : 2;
}

void lab_args_free(lab_args *a)
{
    if (a->values)
        for (int i = 0; i < a->nflags; i++)
            free((void *)a->values[i]);
    free(a->flags);
    free(a->values);
    free(a->given);
    free(a->pos);
    free(a->src);
    a->src = NULL;
    a->flags = NULL;
    a->values = NULL;
    a->given = NULL;
    a->pos = NULL;
    a->nflags = 0;
    a->npos = 0;
}

/* Left column of the help table: "-w, --world-size N". */
static void flag_spelling(const lab_flag *f, char *out, size_t n)
{
    const char *mv = metavar(f);
    if (f->short_name)
        snprintf(out, n, "-%c, --%s%s%s", f->short_name, f->name, *mv ? " " : "", mv);
    else
        snprintf(out, n, "    --%s%s%s", f->name, *mv ? " " : "", mv);
}

static void flag_default(const lab_flag *f, char *out, size_t n)
{
    if (f->type == FLAG_BOOL)
        snprintf(out, n, "off");
    else if (!f->def)
        snprintf(out, n, "-");
    else
        snprintf(out, n, "%s", f->def);
}

static void flag_help(const lab_flag *f, char *out, size_t n)
{
    char lo[32], hi[32];
    int bounded = f->min != 0 || f->max != 0;
    if (f->type == FLAG_CHOICE) {
        snprintf(out, n, "%s (%s)", f->help ? f->help : "", f->choices);
    } else if ((f->type == FLAG_INT || f->type == FLAG_SIZE) && f->max == FLAG_NO_MAX) {
        size_text(f->min, lo, sizeof lo);
        snprintf(out, n, "%s (%s or more)", f->help ? f->help : "",
                 f->type == FLAG_SIZE ? lo : (snprintf(hi, sizeof hi, "%ld", f->min), hi));
    } else if (f->type == FLAG_INT && bounded) {
        snprintf(out, n, "%s (%ld to %ld)", f->help ? f->help : "", f->min, f->max);
    } else if (f->type == FLAG_SIZE && bounded) {
        size_text(f->min, lo, sizeof lo);
        size_text(f->max, hi, sizeof hi);
        snprintf(out, n, "%s (%s to %s)", f->help ? f->help : "", lo, hi);
    } else {
        snprintf(out, n, "%s", f->help ? f->help : "");
    }
}

static void print_table(const lab_flag *t, FILE *out, int w_spell, int w_type, int w_def)
{
    for (int i = 0; t && t[i].name; i++) {
        char spell[96], def[64], help[512];
        if (!t[i].help)
            continue;                   /* hidden: internal */
        flag_spelling(&t[i], spell, sizeof spell);
        flag_default(&t[i], def, sizeof def);
        flag_help(&t[i], help, sizeof help);
        fprintf(out, "  %-*s  %-*s  %-*s  %s\n", w_spell, spell, w_type, type_names[t[i].type],
                w_def, def, help);
    }
}

static void widths(const lab_flag *t, int *w_spell, int *w_type, int *w_def)
{
    for (int i = 0; t && t[i].name; i++) {
        char spell[96], def[64];
        if (!t[i].help)
            continue;
        flag_spelling(&t[i], spell, sizeof spell);
        flag_default(&t[i], def, sizeof def);
        int a = (int)strlen(spell), b = (int)strlen(type_names[t[i].type]), c = (int)strlen(def);
        if (a > *w_spell)
            *w_spell = a;
        if (b > *w_type)
            *w_type = b;
        if (c > *w_def)
            *w_def = c;
    }
}

void lab_print_help(const lab *l, FILE *out)
{
    int ws = 0, wt = 4, wd = 7;
    const lab_flag *ranks = lab_on_ranks(l) ? lab_rank_flags : NULL;
    widths(l->flags, &ws, &wt, &wd);
    widths(ranks, &ws, &wt, &wd);
    widths(lab_common_flags, &ws, &wt, &wd);
    fprintf(out, "usage: mlsys-lab run %s [flags]\n\n", l->id);
    fprintf(out, "%s\n", l->title ? l->title : l->id);
    if (l->summary)
        fprintf(out, "%s\n", l->summary);
    fprintf(out, "\n  %-*s  %-*s  %-*s  %s\n", ws, "flag", wt, "type", wd, "default", "meaning");
    if (count_flags(l->flags) > 0) {
        fprintf(out, "lab flags:\n");
        print_table(l->flags, out, ws, wt, wd);
    }
    fprintf(out, "common flags:\n");
    print_table(ranks, out, ws, wt, wd);
    print_table(lab_common_flags, out, ws, wt, wd);
    fprintf(out, "\nValues: --flag value or --flag=value; sizes accept 8, 64K, 1M, 2G.\n"
            "Reserved short flags mean the same in every lab and command: mlsys-lab help flags\n");
}

void lab_command_help(const lab_command *c, FILE *out)
{
    int ws = 0, wt = 4, wd = 7;
    widths(c->flags, &ws, &wt, &wd);
    widths(command_common, &ws, &wt, &wd);
    fprintf(out, "usage: mlsys-lab %s%s%s [flags]\n\n", c->name, c->args && *c->args ? " " : "",
            c->args ? c->args : "");
    if (c->summary)
        fprintf(out, "%s\n", c->summary);
    fprintf(out, "\n  %-*s  %-*s  %-*s  %s\n", ws, "flag", wt, "type", wd, "default", "meaning");
    print_table(c->flags, out, ws, wt, wd);
    print_table(command_common, out, ws, wt, wd);
    if (c->notes)
        fprintf(out, "\n%s", c->notes);
    fprintf(out, "\nValues: --flag value or --flag=value; sizes accept 8, 64K, 1M, 2G.\n"
            "Reserved short flags mean the same in every lab and command: mlsys-lab help flags\n");
}

static int arg_index(const lab_args *a, const char *name)
{
    if (!a || !name)
        return -1;
    for (int i = 0; i < a->nflags; i++)
        if (!strcmp(a->flags[i]->name, name))
            return i;
    return -1;
}

const char *lab_arg_str(const lab_args *a, const char *name)
{
    int i = arg_index(a, name);
    return i < 0 ? NULL : a->values[i];
}

const char *lab_arg_text(const lab_args *a, const char *name)
{
    int i = arg_index(a, name);
    return i < 0 || !a->values[i] ? NULL : a->src[i];
}

long lab_arg_int(const lab_args *a, const char *name)
{
    const char *v = lab_arg_str(a, name);
    long x = 0;
    if (v && mlsys_parse_long(v, &x) == 0)
        return x;
    return 0;
}

uint64_t lab_arg_size(const lab_args *a, const char *name)
{
    const char *v = lab_arg_str(a, name);
    uint64_t x = 0;
    if (v && mlsys_parse_size(v, &x) == 0)
        return x;
    return 0;
}

double lab_arg_double(const lab_args *a, const char *name)
{
    const char *v = lab_arg_str(a, name);
    return v ? strtod(v, NULL) : 0.0;
}

int lab_arg_bool(const lab_args *a, const char *name)
{
    int i = arg_index(a, name);
    return i >= 0 && a->values[i] != NULL;
}

int lab_arg_given(const lab_args *a, const char *name)
{
    int i = arg_index(a, name);
    return i >= 0 && a->given[i];
}
