/* loadgen_http.h - the small HTTP/1.1 client of `mlsys-lab loadgen` (loadgen_http.c): plain
 * sockets, one request per connection, the response head parsed, a chunked body decoded as
 * it arrives and handed to a callback piece by piece (so a stream's first token is timed
 * when it lands). No libcurl. */
#ifndef MLSYS_LOADGEN_HTTP_H
#define MLSYS_LOADGEN_HTTP_H

#include <stddef.h>

typedef struct lg_url {
    char host[256];
    int port;
    char path[512];           /* "" when the URL has none */
} lg_url;
/* "http://HOST[:PORT][/PATH]" (PORT 80 by default). 0, or -1. */
int lg_url_parse(const char *s, lg_url *u);

/* Called once with data NULL when the request is sent, then with each piece of the decoded
 * body as it arrives; return 1 to stop reading and close the connection at once (a client
 * that goes away), 0 to go on. */
typedef int (*lg_body_fn)(void *u, const char *data, size_t n);

typedef struct lg_response {
    int status;               /* 0 when no response head came */
    double engine_ms, server_ms;   /* X-Mlsys-Engine-Ms / X-Mlsys-Server-Ms, -1 if absent */
    int aborted;              /* the callback stopped it */
    char err[512];            /* connection or protocol failure, "" otherwise */
} lg_response;

/* POST body to u.host:u.port path (a bearer key if key != NULL), within timeout_s for the
 * whole exchange. 0 when a whole response was read (any status), -1 with r->err (no
 * connection, no response, or a body that stopped short of its length or last chunk). */
int lg_post(const lg_url *u, const char *path, const char *key, const char *body,
            double timeout_s, lg_body_fn fn, void *fu, lg_response *r);

#endif
