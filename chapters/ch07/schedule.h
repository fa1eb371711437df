/* schedule.h - pipeline schedules as data: which stage runs which forward (F), backward (B)
 * or weight-gradient (W) pass of which micro-batch in which time slot, for GPipe, 1F1B,
 * interleaved 1F1B and zero-bubble ZB-H1. Pure C with no UI: the lab prints the Gantt chart
 * from it, --run executes it across ranks, the timeline is fed from it, and the tests check
 * its properties (dependencies, bubble, peak activations) against the closed forms. */
#ifndef CH07_SCHEDULE_H
#define CH07_SCHEDULE_H

#include "../../core/mlsys.h"
#include <stddef.h>
#include <stdio.h>

typedef enum { SCHED_GPIPE, SCHED_1F1B, SCHED_INTERLEAVED, SCHED_ZBH1, SCHED_COUNT } sched_kind;

/* One pass of one micro-batch through one model chunk on one stage. In GPipe, 1F1B and
 * interleaved, B is the whole backward (input and weight gradients); in ZB-H1 the backward
 * is split into B (input gradient only: the next stage up the pipeline waits for it) and W
 * (weight gradient: nobody waits for it, so it can fill idle slots). */
typedef struct sched_op {
    char kind;          /* 'F', 'B' or 'W' */
    int mb;             /* micro-batch, 0..M-1 */
    int chunk;          /* model chunk on this stage, 0..v-1 (0 unless interleaved) */
    int t0, dur;        /* first slot and length in slots (1 in every schedule here) */
} sched_op;

/* Virtual stage of a chunk: chunk c of stage s holds virtual stage c*P + s, so a
 * micro-batch visits stages 0..P-1 with chunk 0, then 0..P-1 again with chunk 1, ... */
typedef struct schedule {
    sched_kind kind;
    int P, M, v;        /* stages, micro-batches, chunks per stage (1 unless interleaved) */
    int *n;             /* [P] ops per stage */
    sched_op **ops;     /* [P][n[s]] in the order the stage runs them (increasing t0) */
    int total;          /* slots from the first op's start to the last op's end */
} schedule;

/* ---- schedule.c ---- */
const char *sched_name(sched_kind k);           /* "gpipe", "1f1b", "interleaved", "zb-h1" */
const char *sched_title(sched_kind k);          /* "GPipe (fill-drain)", ... */
const char *sched_short(sched_kind k);          /* "GPipe", "1F1B", "interleaved 1F1B", "ZB-H1" */
int sched_parse(const char *s, sched_kind *out);    /* 0, or -1 for an unknown name */
/* Build the schedule. v is used by SCHED_INTERLEAVED only (others take 1). Returns 0, or -1
 * with a reason in err (P, M or v below 1). */
int sched_build(schedule *s, sched_kind k, int P, int M, int v, char *err, size_t errlen);
void sched_free(schedule *s);
/* Check every rule a pipeline must obey: each (virtual stage, micro-batch) has exactly one
 * F, one B and (ZB-H1 only) one W; F runs after the F of the virtual stage before it has
 * ended; B after the B of the virtual stage after it (the last one: after its own F); W
 * after its B; no stage runs two ops at once. 0 when valid, else -1 with the first broken
 * rule in err. */
int sched_validate(const schedule *s, char *err, size_t errlen);
/* Idle slots / (P * total), counted from the schedule itself. */
double sched_bubble(const schedule *s);
double sched_stage_bubble(const schedule *s, int stage);
/* The bubble's closed form, or -1 where none is known: (P-1)/(M+P-1) for GPipe and 1F1B,
 * (P-1)/(v*M+P-1) for interleaved (M a multiple of P), (P-1)/(3M+P-1) for ZB-H1 with
 * equal F, B and W costs (M >= P). */
double sched_bubble_formula(sched_kind k, int P, int M, int v);
/* Most micro-batch activations a stage holds at once: one is held from the start of its F
 * until its last backward pass on that stage ends (B, or W in ZB-H1). Interleaved counts
 * (chunk, micro-batch) pairs: each is 1/v of a stage's layers. */
int sched_peak_inflight(const schedule *s, int stage);
/* The op a stage runs in slot t, or NULL when idle. */
const sched_op *sched_at(const schedule *s, int stage, int t);
/* "F3", "B12"; interleaved adds the chunk as a letter: "F3a", "B3b". Returns out. */
char *sched_cell(const schedule *s, const sched_op *op, char *out, size_t n);
/* The Gantt chart as the original prints it: "Time →" and slot numbers in right-aligned
 * cells, a rule of dashes, then one "GPU s:" row per stage with '.' for idle slots; a chart
 * wider than 78 columns is printed in blocks of slots, each with its own axis. */
void sched_print_grid(const schedule *s, FILE *out);
/* COMPUTE_BEGIN/END events for the timeline, one per op, with rank = stage, label
 * "F mb3" ("F mb3 c1" interleaved), t_ns = slot * slot_ns, and step = the slot number (>= 0
 * marks a synthetic slot clock; real compute events carry step -1). *ev is malloc'ed;
 * returns the count. sched_events_at starts at slot `first` and, before the first op, puts a
 * lab step (STEP, coll -1, label the schedule's title) on every stage: a section of its own
 * in the timeline, when several schedules follow each other. */
size_t sched_events(const schedule *s, uint64_t slot_ns, mlsys_event **ev);
size_t sched_events_at(const schedule *s, uint64_t slot_ns, int first, int section,
                       mlsys_event **ev);

#endif
