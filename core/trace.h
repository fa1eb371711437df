/* trace.h - events in one home, the table of contents of core/trace*.c. A rank writes typed
 * events into its ring (mlsys.h: mlsys_emit and the memory and flow records; trace.c); the
 * launcher drains the rings into a job sink (ranks without a ring send theirs over TCP to
 * net_events.h's collector, which feeds the same sink); the trace collector keeps what a
 * sink receives with the ranks' output lines (trace_collect.c); the writer puts them in a
 * Chrome Trace Event file, atomically (trace.c); the reader turns such a file back into
 * events for a replay (trace_read.c). What a lab adds beyond messages: trace_values.h. */
#ifndef MLSYS_TRACE_H
#define MLSYS_TRACE_H

#include "mlsys.h"

/* A job's events and its ranks' output lines. The collector appends them as they arrive
 * (each rank's in order, ranks interleaved by batch); mlsys_trace_sort puts them in time
 * order; the reader returns them sorted. */
typedef struct mlsys_trace_line {
    uint64_t t_ns;
    int32_t rank, is_err;
    const char *text;           /* in an mlsys_trace: its own copy (malloc'd) */
} mlsys_trace_line;

typedef struct mlsys_trace {
    mlsys_event *ev;
    size_t n, cap;
    mlsys_trace_line *lines;
    size_t nl, lcap;
    int nranks;                 /* 1 + the highest rank seen (events' ranks and peers, lines'
                                 * ranks), at most MLSYS_TRACE_MAX_RANKS */
} mlsys_trace;

/* In a trace file a rank r has up to three tracks (Chrome "tid"): r itself, r + ASYNC for its
 * non-blocking collectives (they run on its progress thread and overlap its compute), and
 * r + HOST for the compute spans of its second thread (mlsys_compute_span with row 1). */
#define MLSYS_TRACE_TID_ASYNC 1000
#define MLSYS_TRACE_TID_HOST 2000
#define MLSYS_TRACE_MAX_RANKS 64    /* ranks a trace may have (as a job: the launcher's limit) */

/* ---- trace_collect.c: the collector ---- */
/* An mlsys_job_sink's events callback: appends ev[0..n) to the mlsys_trace u. */
void mlsys_trace_collect(void *u, const mlsys_event *ev, size_t n);
/* A rank's output line (copied), stamped now. */
void mlsys_trace_add_line(mlsys_trace *t, int rank, int is_err, const char *text);
/* Events and lines in time order; equal times keep the order they were collected in. */
void mlsys_trace_sort(mlsys_trace *t);
void mlsys_trace_free(mlsys_trace *t);      /* and empties *t: it can collect again */

/* ---- trace.c: the writer ---- */
/* Chrome Trace Event JSON (Perfetto, chrome://tracing): p2p ops as async spans, collectives
 * and compute as nested spans, one flow arrow per message, memory and flow records as
 * instants with their fields, output lines as instants of category "output". Times are
 * written relative to t0_ns. 0 on success, -1 when the file cannot be written. */
int mlsys_trace_write_json(const char *path, const mlsys_event *ev, size_t n, uint64_t t0_ns);
int mlsys_trace_write_json_lines(const char *path, const mlsys_event *ev, size_t n,
                                 const mlsys_trace_line *lines, size_t nl, uint64_t t0_ns);
/* A trace file (a --trace FILE) is checked before the job starts: a directory, a device or a
 * folder that cannot be written to would only show at the end. It is written to a temporary
 * file beside it (created now, so the folder is known to be writable; its name into tmp) and
 * renamed over path once complete, so an existing file is never cut short by a job that ends
 * badly. prepare: 0, or 2 with one line in err (tmp is then ""). commit: 0, or -1 with the
 * temporary file removed. */
int mlsys_trace_prepare(const char *path, char *tmp, size_t n, char *err, size_t errlen);
int mlsys_trace_commit(const char *path, const char *tmp, const mlsys_trace *t, uint64_t t0_ns);

/* ---- trace_read.c: the reader (needs cJSON; without it, one line says so) ---- */
/* A file the writer wrote, back into *t, sorted by time: its events (rank = the world rank,
 * a message's collective from the collective open on its rank) and its output lines. Fields
 * a newer writer adds are read when present. Only a regular file of at most 512 MiB is read.
 * 0, or -1 with one line in err and nothing allocated; a file with no event and no line of a
 * job is refused too. */
int mlsys_trace_load(const char *path, mlsys_trace *t, char *err, size_t errlen);
/* The same from text[0..len) (a file without events is accepted here). */
int mlsys_trace_parse(const char *text, size_t len, mlsys_trace *t, char *err, size_t errlen);

#endif
