/* http.h - the server room: the serving engine (core/llm/engine.h) behind an OpenAI-compatible
 * HTTP API on libmicrohttpd. One engine thread runs the engine loop; one HTTP thread serves
 * every connection: it parses a request into an engine request, hands it over through a
 * queue and streams the tokens back (an answer waiting on the engine sets its connection
 * aside until the engine has its next event). No curses, no chapter knowledge: ch08's --serve and the tests build on this header. */
#ifndef MLSYS_SERVE_HTTP_H
#define MLSYS_SERVE_HTTP_H

#include "../llm/engine.h"

typedef struct srv_opts {
    const char *addr;             /* IPv4 address or host name to listen on (NULL: 127.0.0.1) */
    int port;                     /* 0: a free port the kernel picks (srv_port says which) */
    const char *api_key;          /* NULL: none; else /v1/... need "Authorization: Bearer KEY"
                                     (1 to SRV_MAX_KEY visible ASCII bytes, kept whole) */
    const char *model_name;       /* the id of /v1/models and the "model" requests must name */
    size_t max_body;              /* bytes of a request body (0: 1 MiB); more: 413 */
    int max_connections;          /* 0: 512 */
    int max_connections_per_ip;   /* 0: half of max_connections (one address never takes
                                     them all); past it a connection is closed at once */
    int request_timeout_s;        /* 0: 10; from a connection's start (or its previous
                                     answer) until its request is whole, head and body:
                                     a client trickling bytes is cut off after it */
    int idle_timeout_s;           /* 0: 10; a connection with no traffic either way */
    llm_engine_opts engine;       /* the engine's options (tok is set from the tokenizer) */
    int speculative_k;            /* 0: off; K: greedy requests speculate, K drafts a step
                                     from the draft below, in the engine's batch */
    const llm_config *draft_c;    /* the draft model (same vocabulary and context) */
    const llm_weights *draft_w;
    int log_requests;             /* 1: one line per request on stderr */
    int stream_interval;          /* a stream's event carries a choice's text once it has this
                                     many new tokens, or at its end (0: 1, every token) */
} srv_opts;

typedef struct srv_server srv_server;

#define SRV_MAX_KEY 4096          /* bytes of an API key (a request header must carry it) */
/* The variable the server's key may come from instead of the command line (where the
 * process list shows it). */
#define SRV_KEY_ENV "MLSYS_LAB_API_KEY"

/* 1 when this build has the HTTP server (libmicrohttpd and cJSON), else 0 and why in err. */
int srv_available(char *err, size_t errlen);
/* Start the engine thread and the HTTP daemon. c, w, t (and the draft) are borrowed and must
 * outlive the server. NULL with err (a bad address, a port in use, bad engine options). */
srv_server *srv_start(const llm_config *c, const llm_weights *w, const llm_tokenizer *t,
                      const srv_opts *o, char *err, size_t errlen);
int srv_port(const srv_server *s);
/* Stop accepting work (new requests get 503), let the requests in flight finish for at most
 * drain_s seconds, cancel what is left. Returns the requests cancelled that way. */
int srv_drain(srv_server *s, double drain_s);
/* Stop the daemon and the engine thread and free everything (call srv_drain first for a
 * clean end: requests still in flight are cancelled). */
void srv_stop(srv_server *s);
/* Block until SIGINT, SIGTERM or SIGUSR1 (the launcher's stop of a job on several ranks;
 * installs the handlers), then srv_drain(drain_s). Returns the signal number. */
int srv_run_until_signal(srv_server *s, double drain_s);

#endif
