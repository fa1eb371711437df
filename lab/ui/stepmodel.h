/* stepmodel.h - the one replayable state every run view reads: events (live, gated or from a
 * trace) go in; out come frames, one per gate (the k-th mlsys_step of every rank opens frame
 * k), each with the collective call and step it belongs to, who sent which chunks to whom,
 * and what each rank's buffer holds after it (whose data, and the values). No curses here. */
#ifndef MLSYS_STEPMODEL_H
#define MLSYS_STEPMODEL_H

#include "../../core/mlsys.h"

#define SM_MAX_RANKS 64

typedef struct stepmodel stepmodel;

/* One chunk of one rank's buffer: whose contributions it holds and its first value. */
typedef struct sm_cell {
    uint64_t mask;          /* bit s: rank s's data is in it (summed when a reduction) */
    double val;
    int has_val;
} sm_cell;

typedef struct sm_call {
    int coll, algo_idx, dtype, op, root;
    uint64_t bytes;         /* as COLL_BEGIN says: per rank for the blocked collectives */
    char algo[24];
    int first_frame;        /* the frame its first step opened, -1 before */
    int last_step;          /* highest step number seen */
    int ended;              /* ranks that ended it */
    int approx;             /* some message could not be placed on chunks */
} sm_call;

typedef struct sm_send {
    int src, dst, call;     /* call -1: point-to-point */
    uint64_t bytes;
    uint64_t chunks;        /* bit j: chunk j of the sender's buffer travels */
    int land;               /* all_to_all: the receiver's chunk it lands in, else -1 */
    int reduce;             /* the receiver reduces it into its own copy */
    uint64_t mask;          /* whose data the first chunk carries */
    double val;             /* its first value (or the p2p value the sender held) */
    int has_val;
    int arrived;
    uint64_t msg_id;
} sm_send;

typedef struct sm_frame {
    int call;               /* the collective its step belongs to, -1: a lab step */
    int data_call;          /* the call whose buffers the frame shows, -1: none */
    int step;               /* step number from the STEP event; -1 for frame 0 */
    char label[32];
    int nsend;              /* its sends: sm_frame_send(m, k, 0..nsend-1) */
    int complete;           /* every rank passed it (or ended) */
} sm_frame;

/* stepmodel.c */
stepmodel *sm_create(void);
void sm_free(stepmodel *m);
void sm_reset(stepmodel *m, int nranks);          /* empty, for a new job of nranks */
void sm_event(stepmodel *m, const mlsys_event *e);
void sm_rank_ended(stepmodel *m, int rank);       /* frames stop waiting for it */
void sm_finish(stepmodel *m);                     /* the stream is over: close every frame */
int sm_nranks(const stepmodel *m);
int sm_nframes(const stepmodel *m);               /* frames opened so far (>= 1) */
int sm_ncomplete(const stepmodel *m);             /* frames 0..n-1 are complete */
const sm_frame *sm_frame_at(const stepmodel *m, int k);
const sm_call *sm_call_at(const stepmodel *m, int i);
int sm_ncalls(const stepmodel *m);
const sm_send *sm_send_at(const stepmodel *m, int i);
/* The i-th message sent in frame k (by a rank while it was in that frame). */
const sm_send *sm_frame_send(const stepmodel *m, int k, int i);
/* Rank r's chunks after frame k (sm_nranks cells), NULL when the frame shows no buffer;
 * for the frame a rank is still in, what it holds so far. */
const sm_cell *sm_cells(const stepmodel *m, int k, int r);
/* The value a rank held after frame k outside collectives (point-to-point labs): 1 if any. */
int sm_p2p_value(const stepmodel *m, int k, int r, double *v);
/* Steps the call will take (known when it ended, or from the algorithm), -1 unknown. */
int sm_call_steps(const stepmodel *m, int call);
/* "step 3 of 6 (reduce-scatter): rank 2 sends chunk 1 (0+1+2) to rank 3, ..." */
void sm_caption(const stepmodel *m, int k, int ascii, char *out, size_t n);
/* Whose data: "·" none, "2", "0+3", "0+1+2", "all", else "3/5" (fits in w columns). */
void sm_mask_text(uint64_t mask, int n, int w, int ascii, char *out, size_t len);
/* The frame that begins call i's steps, or -1; the next / previous call's from frame k. */
int sm_next_call_frame(const stepmodel *m, int k, int dir);
/* Calls and messages so far (the header and side panel read these). */
uint64_t sm_messages(const stepmodel *m, int upto_frame, uint64_t *bytes);

#endif
