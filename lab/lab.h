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
    char short_name;        /* 'w', or 0 for none */
    lab_flag_type type;
    const char *def;        /* default as text ("4", "64K", "gloo"); NULL for switches */
    const char *choices;    /* FLAG_CHOICE: "gloo|nccl|shm|mpi" */
    long min, max;          /* FLAG_INT and FLAG_SIZE bounds (inclusive); 0,0 = none */
    const char *help;
} lab_flag;

/* Parsed values: one text per flag of lab->flags followed by the common flags. */
typedef struct lab_args {
    const struct lab *lab;
    int nflags;
    const lab_flag **flags;     /* [nflags] lab flags, then common flags */
    const char **values;        /* [nflags] text value (default or given); NULL = unset switch */
    int *given;                 /* [nflags] 1 when given on the command line */
    /* A single-process lab's communicator of one rank when someone collects its events (the
     * front end, --trace), else NULL: its engines emit memory and flow records through it
     * (mlsys_emit_mem and mlsys_emit_flow take NULL and then do nothing). Rank labs get
     * theirs as rank_main's argument. */
    mlsys_comm *comm;
} lab_args;

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

/* chapters.c */
extern const chapter *const lab_chapters[];    /* NULL-terminated, in reading order */
const lab *lab_find(const char *id);           /* by id; NULL when unknown */

/* flags.c */
extern const lab_flag lab_common_flags[];      /* --timeout, --algo, --trace, ... */
/* Parse argv (after the lab id) into a. On error writes one line to err and returns 2 (the
 * exit status for usage errors); returns 1 when --help was asked (help already printed).
 * On 1 and 2, a is already freed. */
int lab_args_parse(const lab *l, int argc, char **argv, lab_args *a, char *err, size_t errlen);
void lab_args_free(lab_args *a);
void lab_print_help(const lab *l, FILE *out);
const char *lab_arg_str(const lab_args *a, const char *name);   /* NULL when unknown/unset */
long lab_arg_int(const lab_args *a, const char *name);
uint64_t lab_arg_size(const lab_args *a, const char *name);
double lab_arg_double(const lab_args *a, const char *name);
int lab_arg_bool(const lab_args *a, const char *name);
int lab_arg_given(const lab_args *a, const char *name);
/* Validate one value against its flag (used by the parser and by the UI form as you type). */
int lab_flag_check(const lab_flag *f, const char *value, char *err, size_t errlen);

#endif
