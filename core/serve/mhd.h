/* mhd.h - what the two libmicrohttpd files share (only with HAVE_MHD): a connection's
 * state, the replies, the completion handler and the guard's watch on its client. mhd.c: the daemon, the routes, the body
 * and the end of a connection; mhd_answer.c: a completion answered whole or streamed. */
#ifndef MLSYS_SERVE_MHD_H
#define MLSYS_SERVE_MHD_H

#include "srv_internal.h"

#include "mhd_lib.h"                /* before the library's header: loaded with dlopen */
#include <microhttpd.h>

/* One connection's request, from its first byte to its end (mhd.c's on_completed). */
typedef struct conn_ctx {
    srv_server *s;
    struct MHD_Connection *conn;
    char *body;
    size_t n, cap;
    int too_large, status;
    srv_job *job;
    /* streaming, per choice: bytes of its text sent, its opening (chat: the role) and its
     * last chunk sent; then the end ([DONE]) */
    size_t sent[SRV_MAX_N];
    int sent_n[SRV_MAX_N];        /* its tokens when it was last sent */
    unsigned char opened[SRV_MAX_N], closed[SRV_MAX_N];
    int final_sent;
    size_t seen;                  /* the job's progress when the stream last looked */
    char *pend;                   /* an event not yet copied out whole */
    size_t pend_n, pend_off;
    double t_recv;
} conn_ctx;

/* A response from a malloc'd body (taken), counted by status. */
enum MHD_Result srv_reply(struct MHD_Connection *c, conn_ctx *cx, int status,
                          const char *ctype, char *body);
enum MHD_Result srv_reply_error(struct MHD_Connection *c, conn_ctx *cx, int status,
                                const char *msg, const char *param);
/* POST /v1/completions or /v1/chat/completions with the whole body in cx: the job made,
 * handed to the engine, then answered whole (waiting, the client's socket watched) or as a
 * stream of server-sent events. */
enum MHD_Result srv_completion(struct MHD_Connection *c, conn_ctx *cx, srv_kind kind);
/* A whole answer's access handler call once its connection is unparked (and the first). */
enum MHD_Result srv_completion_answer(struct MHD_Connection *c, conn_ctx *cx);
/* mhd.c's guard watches the client of cx's job from now until the request's end: a client
 * that leaves hangs the job up (and unparks its connection: libmicrohttpd watches no parked
 * socket). */
void srv_watch_job(conn_ctx *cx);

#endif
