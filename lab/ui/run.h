/* run.h - the run screen's parts and the state they share. One responsibility per file:
 * run_job.c owns the job (starting it, its output and events, the gate, its end, the trace
 * it writes), run_play.c the player (the step model every view reads, the frame shown, its
 * speed and animation, catching up with a job), run_draw.c what is on screen (the view tabs,
 * the view, the scrubber, the notices and the status line, the keys and the help), and
 * ui_run.c ties them into a screen class (create, tick, key, free). */
#ifndef MLSYS_RUN_H
#define MLSYS_RUN_H

#include "ui.h"
#include "stepmodel.h"
#include "../job/runner.h"

/* One view of the screen and how far the step model's tape has been fed to it. */
typedef struct run_view {
    const view_class *cls;
    void *data;
    sm_cursor cur;
} run_view;

/* An event or an output line waiting to go into the step model in time order. */
typedef struct run_item {
    uint64_t t;
    uint64_t seq;               /* arrival order: ties in time keep it */
    int line;                   /* 1: rank, is_err, text; 0: ev */
    int rank, is_err;
    char *text;
    mlsys_event ev;
} run_item;

typedef struct run {
    /* what runs */
    const lab *l;               /* NULL for a function job (tests) or a replay */
    int (*fn)(mlsys_comm *, void *);
    void *fn_arg;
    int fn_gated;
    int argc;
    char **argv;
    lab_args a;
    int have_args;
    int replay;
    char title[160];

    /* ---- run_job.c: the job ---- */
    mlsys_job *job;
    int started, done, result;  /* result: 0 all ranks ok */
    int ran_ranks;              /* ranks were started (not a lab that answered alone) */
    char notes[4][200];         /* where the chosen algorithm did not run, and why */
    int nnotes;
    unsigned noted;             /* collectives already noted (one bit each) */
    char why[256];
    int nranks;
    int gated;
    char forced[32];
    int *rank_state, *rank_code, *gate;
    struct run_watch { uint64_t addr, count; int dtype; } *watch;
    uint64_t grants, read_epoch;
    uint64_t *steps_seen;       /* STEP events per rank: its n-th step is its n-th gate */
    uint64_t events, lost;
    uint64_t pump_at;           /* when the ranks' output was last read (0: not started) */
    uint64_t line_t;            /* the time lines read now go in at: the read before */
    uint64_t *step_t;           /* [rank] the time of its newest STEP event */
    uint64_t *floor_t;          /* [rank] its lines go in no earlier: the gate it was let
                                   through (what it prints after that comes after it) */
    run_item *in;               /* not yet in the model (waiting for the time order) */
    size_t nin, incap;
    uint64_t inseq;
    const char *trace_path;     /* --trace */
    char trace_tmp[4200];       /* written there, renamed over trace_path at the end */
    mlsys_trace tb;             /* --trace: what the job sent, for the file */
    mlsys_trace rd;             /* a replay's trace */

    /* ---- run_play.c: the model and the player ---- */
    stepmodel *sm;
    run_view *v;
    int nviews, cur;
    int frame;                  /* the frame shown */
    int paused, speed;
    int animating;              /* the shown frame's arrival is being animated */
    uint64_t anim_t0;           /* when it began (or when the last frame was shown) */
    int want_next;              /* n asked for a step that is not recorded yet */
    int skipped;                /* frames the player jumped over to catch up with the job */
    char say[200];              /* what the last key did not do, and why (until the next key) */

    /* ---- run_draw.c ---- */
    ui_key_help keys[28];
    char tabkey[16];
    const char *help_lines[12];
} run;

/* run_job.c */
void job_alloc_ranks(run *r, int n);
int job_begin(run *r, char *err, size_t n);        /* 0, or -1 with a message in err */
void job_stop(run *r);
/* Pump output and events into the model; returns reaction flags. */
int job_pump(run *r);
void job_grant(run *r);                            /* one more step for every rank */
int job_all_at_gate(const run *r);
void job_line(run *r, int rank, int is_err, const char *text);   /* runner's own (rank -1) */
void job_replay_load(run *r);                      /* the replay's trace into the model */
void job_free(run *r);

/* run_play.c */
void play_create(run *r, const char *first_view);
void play_free(run *r);
void play_reset(run *r);                           /* a new job of r->nranks */
int play_last(const run *r);                       /* the last frame that can be shown */
void play_show(run *r, int k, int animate);
double play_anim(const run *r, uint64_t now);      /* progress into the shown frame */
/* Move on by itself (speed, gate, catching up); returns flags, lowers *tmo. */
int play_tick(run *r, uint64_t now, int *tmo);
/* The player's keys (space n b Home End [ ] { } + -); 0 when not one of them. */
int play_key(run *r, int key);
void play_sync(run *r, int view);                  /* feed a view up to the shown frame */
int play_speed_ms(const run *r);
int play_select_view(run *r, const char *name);    /* 1 when found */

/* run_draw.c */
void run_draw_screen(run *r, grid *g, int x, int y, int w, int h);
void run_draw_title(run *r, char *out, size_t n);
const ui_key_help *run_draw_keys(run *r);
const char *const *run_draw_help(run *r);

#endif
