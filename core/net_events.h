/* net_events.h - events over TCP, for ranks that have no ring in a shared job segment (the
 * MPI backend, ranks on other hosts): the wire format, the rank side's calls (net_events.c)
 * and the runner's side, the collector (net_collector.c), which hands what it receives to
 * the same mlsys_job_sink the shm launcher feeds. A rank connects, sends a hello with the
 * job's token, waits for the ack, then sends frames of events; at the end a "bye" frame says
 * how many it sent and how many it lost. */
#ifndef MLSYS_NET_EVENTS_H
#define MLSYS_NET_EVENTS_H

#include "mlsys.h"
#include <poll.h>

#define NET_EV_MAGIC "MLSYSEV1"      /* 8 bytes, no NUL on the wire */
#define NET_EV_VERSION 2u            /* 2: the event union holds memory and flow records */
#define NET_EV_TOKEN_LEN 32          /* 128 bits as lower-case hex */
#define NET_EV_ACK 'K'               /* the collector's one-byte answer to a good hello */
#define NET_EV_MAX_BATCH 4096        /* events per frame, at most */

/* Native byte order: the hello's version field doubles as an order check. */
typedef struct net_ev_hello {
    char magic[8];
    uint32_t version;
    int32_t rank, size, pid;
    uint64_t mono_ns;                /* the rank's CLOCK_MONOTONIC when it said hello */
    char token[NET_EV_TOKEN_LEN];
    char boot_id[40];                /* /proc/sys/kernel/random/boot_id: same host, same clock */
} net_ev_hello;

enum { NET_EV_EVENTS = 1, NET_EV_BYE = 2 };

typedef struct net_ev_frame {
    uint32_t type;                   /* NET_EV_EVENTS: count events follow */
    uint32_t count;                  /* NET_EV_BYE: a net_ev_bye follows, count is 0 */
} net_ev_frame;

typedef struct net_ev_bye {
    uint64_t sent, lost;
} net_ev_bye;

struct mlsys_world;

/* net_events.c (rank side) */
/* Connect to addr ("host:port") with token and route the world's events there (w->emit,
 * w->tracing). A failed connection is said once on stderr; events are then counted as lost,
 * never dropped silently. Returns 0 when connected. */
int net_events_start(struct mlsys_world *w, const char *addr, const char *token);
void net_events_flush(struct mlsys_world *w);   /* send what is batched now */
void net_events_stop(struct mlsys_world *w);    /* flush, bye, close; says what was lost */
/* The host's boot id (or "" when unknown), for the hello and the collector's clock rule. */
void net_events_boot_id(char *out, size_t n);

/* net_collector.c (the runner's side): a listening socket, bound to loopback unless an
 * address is given, that accepts the ranks' streams and checks each hello against the job's
 * token. */
typedef struct collector collector;
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
