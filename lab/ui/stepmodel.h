/* stepmodel.h - the one replayable state every run view reads: events (live, gated or from a
 * trace) and the ranks' output lines go in; out come frames, one per gate (the k-th
 * mlsys_step of every rank opens frame k), each with the collective call and step it belongs
 * to, who sent which chunks to whom, and what each rank's buffer holds after it (whose data,
 * and the values). Everything that came in is kept on a tape, each item in the frame it
 * belongs to, so that any view can be brought to any frame (sm_sync): forward by feeding what
 * it has not seen, back by feeding it again from the start. No curses here. */
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
    int async;              /* a non-blocking call (the progress thread ran it) */
    int by;                 /* who chose the algorithm: MLSYS_ALGO_BY_*, -1 unknown (old trace) */
    int wanted;             /* the algorithm chosen when it did not fit and another ran, -1 */
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
/* Chunks of call i's buffer that hold elements: N, or fewer when the call has fewer elements
 * than ranks (the others are empty: no cell is drawn for them). */
int sm_call_chunks(const stepmodel *m, int call);
/* Steps the call will take (known when it ended, or from the algorithm), -1 unknown. */
int sm_call_steps(const stepmodel *m, int call);
/* "step 3 of 6 (reduce-scatter): rank 2 sends chunk 1 (0+1+2) to rank 3, ..." */
void sm_caption(const stepmodel *m, int k, int ascii, char *out, size_t n);
/* Whose data: "·" none, "2", "0+3", "0+1+2", "all", else "3/5" (fits in w columns). */
void sm_mask_text(uint64_t mask, int n, int w, int ascii, char *out, size_t len);
/* Why call i ran its algorithm, in one sentence: who chose it (you with --algo, the lab, the
 * rule) and, when that one did not fit, what ran instead. Returns 1 when it says that the
 * chosen algorithm did not run (a note to stand out), else 0. */
int sm_call_why(const stepmodel *m, int call, char *out, size_t n);
/* The frame that begins call i's steps, or -1; the next / previous call's from frame k. */
int sm_next_call_frame(const stepmodel *m, int k, int dir);
/* Calls and messages so far (the header and side panel read these). */
uint64_t sm_messages(const stepmodel *m, int upto_frame, uint64_t *bytes);

/* ---- the tape ---- */
#define SM_TAPE_MAX (1u << 20)      /* items kept; later ones are counted (sm_tape_dropped) */

/* An output line (rank -1: the runner's own). It goes on the tape in the frame its rank is in
 * (the newest frame for the runner's). */
void sm_line(stepmodel *m, int rank, int is_err, const char *text);
/* Which events the tape keeps (those a view reads): keep(u, e) != 0. NULL keeps all. The
 * model itself reads every event whatever the filter says. */
void sm_set_keep(stepmodel *m, int (*keep)(void *u, const mlsys_event *e), void *u);
size_t sm_tape_len(const stepmodel *m);
uint64_t sm_tape_dropped(const stepmodel *m);   /* items that found the tape full */
/* Item i: its frame, and the event (NULL for a line, whose rank, stream and text come back). */
int sm_tape_item(const stepmodel *m, size_t i, const mlsys_event **e, int *rank, int *is_err,
                 const char **text);

/* A consumer of the tape (a view) and where it stands. */
typedef struct sm_sink {
    void (*rewind)(void *u);                                   /* forget, to be fed again */
    void (*event)(void *u, const mlsys_event *e, int frame);
    void (*line)(void *u, int rank, int is_err, const char *text);
    void *u;
} sm_sink;

typedef struct sm_cursor {
    size_t pos;                     /* tape items looked at */
    int frame;                      /* the frame the consumer was brought to, -1 none */
    size_t *pending;                /* looked at but of a later frame, in tape order */
    size_t npend, pcap;
} sm_cursor;

void sm_cursor_init(sm_cursor *c);
void sm_cursor_fini(sm_cursor *c);
/* Bring the consumer to frame k: afterwards it has been fed exactly the tape's items of
 * frames <= k, each rank's in tape order (items of different ranks in tape order within a
 * frame; one that waited for its frame comes when the frame is reached). Going back (k below
 * the consumer's frame) rewinds it and feeds it again from the start. Returns the items fed. */
size_t sm_sync(const stepmodel *m, sm_cursor *c, int k, const sm_sink *s);

#endif
