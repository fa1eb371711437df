/* lab.h - the declarative curriculum: chapters, their labs and each lab's flags, as tables
 * from which the CLI help, the flag parser, the UI forms and the checks are all derived.
 * A chapter lives in chapters/chNN/ and adds one line to the table in lab/chapters.c. */
#ifndef MLSYS_LAB_H
#define MLSYS_LAB_H

#include "../core/mlsys.h"
#include <stdio.h>

typedef enum { FLAG_INT, FLAG_SIZE, FLAG_DOUBLE, FLAG_STR, FLAG_CHOICE, FLAG_BOOL } lab_flag_type;

typedef struct lab_flag {
    const char *name;       /* long name without dashes: "world-size" */
    char short_name;        /* 'w', or 0: a letter of lab_short_flags only with its meaning */
    lab_flag_type type;
    const char *def;        /* default as text ("4", "64K", "shm"); NULL for switches */
    const char *choices;    /* FLAG_CHOICE: "shm|mpi|nccl|gloo" */
    /* [min, max] inclusive; 0,0 = none; max FLAG_NO_MAX: min or more. FLAG_DOUBLE: the
     * same, except that min 0 with max > 0 means "above 0" (a timeout of 0 makes no sense). */
    long min, max;
    const char *help;       /* NULL: a hidden flag (internal; not in the help or the forms) */
} lab_flag;
#define FLAG_NO_MAX (-1L)

/* A command of the program (train, generate, bench, ...), declared like a lab: its flags
 * in a table from which its help, its parser and its errors come (flags.c). */
typedef struct lab_command {
    const char *name;           /* "bench", "model info" */
    const char *args;           /* positional arguments for the usage line ("[COLLECTIVE]") */
    int min_pos, max_pos;       /* how many positional arguments it takes */
    const char *missing;        /* the one line when fewer are given ("which model file?") */
    const char *summary;        /* what it does, one line */
    const lab_flag *flags;      /* terminated by an entry with name == NULL; --help is added */
    const char *notes;          /* printed after the flag table, or NULL */
} lab_command;

/* Parsed values: one text per flag of lab->flags followed by the common flags (those of
 * lab_rank_flags first for a lab on ranks; or of the command's flags followed by --help),
 * and a command's positional arguments. */
typedef struct lab_args {
    const struct lab *lab;      /* the lab parsed for, or NULL for a command */
    const lab_command *cmd;     /* the command parsed for, or NULL for a lab */
    int nflags;
    const lab_flag **flags;     /* [nflags] lab flags, then common flags */
    const char **values;        /* [nflags] text value (default or given); NULL = unset switch */
    int *given;                 /* [nflags] 1 when given on the command line */
    const char **src;           /* [nflags] the value's text in argv, or the table's default */
    int npos;
    const char **pos;           /* [npos] positional arguments, pointing into argv */
    /* A single-process lab's communicator of one rank when someone collects its events (the
     * front end, --trace), else NULL: its engines emit memory and flow records through it
     * (mlsys_emit_mem and mlsys_emit_flow take NULL and then do nothing). Rank labs get
     * theirs as rank_main's argument. */
    mlsys_comm *comm;
} lab_args;

/* A reserved short flag means one thing in every lab and every command that has it
 * (flags.c's table): its letter and the long names that mean it ("operation|op"). */
typedef struct lab_short_flag {
    char letter;
    const char *names;          /* '|'-separated long names of the one meaning */
    const char *was;            /* what the letter meant somewhere before, or NULL */
} lab_short_flag;

typedef struct lab {
    const char *id;             /* "ch03/collective-cheatsheet" */
    const char *title;
    const char *summary;        /* one line for `list` */
    const lab_flag *flags;      /* terminated by an entry with name == NULL */
    int port;                   /* MASTER_PORT of the original script, 0 if single process */
    int min_ranks, max_ranks;   /* for labs with a world-size flag */
    /* The flag whose value is the number of ranks: NULL for "world-size"; chapter 6's labs
     * say "tp-size", so -t 4 starts four ranks. */
    const char *ranks_flag;
    /* In the runner, before any rank starts: the parent banner, or a complete answer with no
     * ranks (--show-deadlock, --visualize). Return -1 to go on and start the ranks, or an exit
     * status to stop there. NULL: go on. */
    int (*before)(const lab_args *a);
    /* Every rank runs this (NULL for single-process labs). Returns the rank's exit status. */
    int (*rank_main)(mlsys_comm *c, const lab_args *a);
    /* Single-process labs run this instead of ranks. */
    int (*main)(const lab_args *a);
    /* In the runner after the ranks ended, status 0 when all succeeded. NULL: nothing. */
    void (*after)(const lab_args *a, int status);
    /* When before() answered without ranks, events the front end plays in the lab's view
     * instead (a schedule drawn slot by slot): *ev malloc'ed, returns the count. NULL: none. */
    size_t (*synth_events)(const lab_args *a, mlsys_event **ev);
    const char *view;           /* the view the front end opens: "ring", "log", "timeline" */
    /* Seconds rank 0 may take to end the job after a stop (Ctrl-C, SIGTERM, the viewer's
     * stop): it gets SIGUSR1 (under mpi every rank does: the others must ignore it), and
     * the ranks are stopped only after that long or on a second stop. A server on
     * tensor-parallel ranks drains its requests and tells its other ranks to stop. NULL,
     * or 0 for these flags: every rank is stopped at once. */
    double (*stop_grace_s)(const lab_args *a);
} lab;

struct exercise;                /* lab/exercise/exercise.h */

typedef struct chapter {
    int number;
    const char *part;           /* "Part I: Distributed computing" */
    const char *title;
    const char *text_asset;     /* "assets/chapters/ch01.md", NULL when not written yet */
    const lab *const *labs;     /* NULL-terminated */
    const struct exercise *const *exercises;   /* NULL-terminated, or NULL for none yet */
} chapter;

/* assets.c */
/* A file by the path a user gave or the source tree has ("assets/models/model.bin"), looked
 * for in this order: rel itself when it is absolute or exists from the current folder (what
 * the user named), then under $MLSYS_LAB_SRC, then next to the program (one folder up for
 * build/mlsys-lab, or beside it). The first that exists goes into out, which it returns;
 * rel when none does, so that "cannot open" names the path asked for. The one search for
 * every caller: commands, the chapter reader and the labs. */
const char *lab_asset_path(const char *rel, char *out, size_t n);

/* chapters.c */
extern const chapter *const lab_chapters[];    /* NULL-terminated, in reading order */
const lab *lab_find(const char *id);           /* by id; NULL when unknown */

/* flags.c */
extern const lab_flag lab_common_flags[];      /* every lab's: --timeout, --algo, --trace, ... */
extern const lab_flag lab_rank_flags[];        /* and a rank lab's: --backend, --hostfile, ... */
/* Does the lab run on ranks (rank_main, more than one rank allowed)? Those have the common
 * flags of lab_rank_flags as well; a single-process lab refuses them in one line. */
int lab_on_ranks(const lab *l);
/* --backend's value names shared memory ("shm", its default; "gloo", the original's name;
 * NULL: a lab without the flag). */
int lab_backend_is_shm(const char *backend);
extern const lab_short_flag lab_short_flags[]; /* letter 0 ends it */
/* The entry of a letter, NULL when the letter is free. */
const lab_short_flag *lab_short_flag_of(char letter);
/* Parse argv (after the lab id) into a. On error writes one line to err and returns 2 (the
 * exit status for usage errors); returns 1 when --help was asked (help already printed).
 * On 1 and 2, a is already freed. */
int lab_args_parse(const lab *l, int argc, char **argv, lab_args *a, char *err, size_t errlen);
void lab_args_free(lab_args *a);
void lab_print_help(const lab *l, FILE *out);
/* The same for a command: argv[0] is the command's name; positional arguments go to a->pos.
 * Errors read "mlsys-lab NAME: ..." (one line in err, 2); --help prints the help (1). */
int lab_command_parse(const lab_command *c, int argc, char **argv, lab_args *a, char *err,
                      size_t errlen);
void lab_command_help(const lab_command *c, FILE *out);
/* Parse for a command and answer what the caller would: -1 to go on with a parsed, else the
 * exit status (0 after --help, 2 after the one line on stderr). */
int lab_command_args(const lab_command *c, int argc, char **argv, lab_args *a);
/* A command of subcommands (group "model": subs "model info", "model init", NULL-ended):
 * argv[1] names one, which goes into *which (then -1: go on with argc - 1, argv + 1); --help
 * prints every one's help (0); anything else is one line on stderr (2). */
int lab_subcommand(const char *group, const lab_command *const *subs, int argc, char **argv,
                   const lab_command **which);
const char *lab_arg_str(const lab_args *a, const char *name);   /* NULL when unknown/unset */
/* The same text where it lives as long as argv (or the flag table, for a default): for a
 * value kept after lab_args_free. NULL when unknown or unset. */
const char *lab_arg_text(const lab_args *a, const char *name);
long lab_arg_int(const lab_args *a, const char *name);
uint64_t lab_arg_size(const lab_args *a, const char *name);
double lab_arg_double(const lab_args *a, const char *name);
int lab_arg_bool(const lab_args *a, const char *name);
int lab_arg_given(const lab_args *a, const char *name);
/* Validate one value against its flag (used by the parser and by the UI form as you type). */
int lab_flag_check(const lab_flag *f, const char *value, char *err, size_t errlen);

#endif
