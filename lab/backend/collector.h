/* collector.h - the runner's side of events over TCP (core/net_events.h has the wire
 * format): a listening socket, bound to loopback unless an address is given, that accepts
 * the ranks' streams, checks each hello against the job's token and hands the events to the
 * same mlsys_job_sink callbacks the shm launcher feeds. */
#ifndef MLSYS_COLLECTOR_H
#define MLSYS_COLLECTOR_H

#include "../../core/mlsys.h"
#include <poll.h>

typedef struct collector collector;

/* collector.c */
/* Listen on addr ("127.0.0.1", "10.0.0.5:7000", NULL = loopback, any free port) for a job
 * of world ranks, with a fresh random token. NULL with one line in err on failure. */
collector *collector_open(const char *addr, int world, char *err, size_t n);
const char *collector_addr(const collector *c);     /* "host:port" for MLSYS_EVENTS_ADDR */
const char *collector_token(const collector *c);    /* for MLSYS_EVENTS_TOKEN */
/* Fill up to max pollfds (the listener and every stream); returns how many. */
int collector_pollfds(const collector *c, struct pollfd *p, int max);
/* Accept, read and deliver whatever is ready; never blocks. */
void collector_pump(collector *c, const mlsys_job_sink *sink);
/* After the job: wait up to ms for streams still open to finish (their bye). */
void collector_finish(collector *c, const mlsys_job_sink *sink, int ms);
uint64_t collector_events(const collector *c);      /* events delivered */
uint64_t collector_lost(const collector *c);        /* as the ranks counted them */
/* Ranks whose stream never ended with a bye: "1, 3" in buf; returns how many. */
int collector_incomplete(const collector *c, char *buf, size_t n);
int collector_refused(const collector *c);          /* connections refused so far */
void collector_set_verbose(collector *c, int on);   /* say where each rank connected from */
void collector_close(collector *c);

#endif
