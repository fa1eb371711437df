/* trace_values.h - what a lab can add to its event stream so that the front end shows more
 * than messages: the values a rank holds (MARK "values"), a buffer the viewer may read while
 * the ranks wait at a gate (MARK "watch"), points for the plot view (MARK "plot:<series>"),
 * and the size/rank rule of a collective without a communicator (for the ring view's "why"). */
#ifndef MLSYS_TRACE_VALUES_H
#define MLSYS_TRACE_VALUES_H

#include "mlsys.h"

/* Labels of the MARK events below; the views recognise them by these. */
#define MLSYS_MARK_VALUES "values"
#define MLSYS_MARK_WATCH "watch"
#define MLSYS_MARK_PLOT "plot:"
#define MLSYS_MARK_BUBBLE "bubble"
#define MLSYS_MARK_GATE "gate"

/* ---- trace_values.c ---- */
/* v[0..n) as MARK events of up to four values each: label "values", chunk = index of val[0],
 * tag = values in this event, bytes = n (the whole vector), step = step. Nothing when no one
 * collects events. */
void mlsys_emit_values(mlsys_comm *c, int step, const double *v, int n);
/* The same for a typed buffer (converted to double). */
void mlsys_emit_buffer(mlsys_comm *c, int step, const void *buf, size_t count, mlsys_dtype dt);
/* Tell the viewer which buffer this rank's cells show: MARK "watch" with val[0] = address,
 * bytes = count, dtype = dt, followed by its current values. In gated mode the viewer reads
 * it (process_vm_readv) while every rank waits at the gate. buf NULL ends the watch; call
 * that before freeing the buffer. */
void mlsys_watch_buffer(mlsys_comm *c, const void *buf, size_t count, mlsys_dtype dt);
/* One point of a plot series: MARK "plot:<series>", val[0] = x, val[1] = y. */
void mlsys_emit_point(mlsys_comm *c, const char *series, double x, double y);
/* The lab's own measure of the lab step it is in (the timeline's section): this rank's busy
 * time and the section's span in nanoseconds (MARK "bubble", val[0] busy, val[1] span). The
 * timeline then shows the bubble the lab computed from them, 1 - busy / span per lane and
 * 1 - sum(busy) / (N span) overall, so that the view and the lab print one number. */
void mlsys_emit_bubble(mlsys_comm *c, double busy_ns, double span_ns);
/* (MARK "gate": core/trace.c's mlsys_step emits it when a gated rank passes its gate, so the
 * timeline can tell waiting at a gate from communicating.) */

/* The algorithm the size/rank rule of coll picks for nranks and bytes (NULL for an unknown
 * collective), and the rule in words in *why. Same tables as mlsys_algo_decide, but needs
 * no communicator: the front end asks it about jobs it watches. */
const char *mlsys_algo_rule(mlsys_coll coll, int nranks, size_t bytes, const char **why);
/* The index of an algorithm name in coll's table, -1 when absent. */
int mlsys_algo_index(mlsys_coll coll, const char *name);
/* Does algorithm idx of coll accept nranks and count (its constraints)? 1 yes, 0 no. */
int mlsys_algo_fits(mlsys_coll coll, int idx, int nranks, size_t count);

/* Viewer side: read count elements of type dt at addr in process pid into out as doubles.
 * Returns 0, or -1 (errno set) when the memory cannot be read. */
int mlsys_values_read(pid_t pid, uint64_t addr, size_t count, int dt, double *out);

#endif
