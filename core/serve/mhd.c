/* mhd.c - the HTTP glue on libmicrohttpd (a thread per connection): the routes, the bearer
 * key, the body limit, a completion answered whole or streamed as server-sent events, and a
 * client that goes away noticed while its request runs (its socket polled between tokens)
 * and cancelled in the engine at once. Built without libmicrohttpd: srv_http_start says so. */
#include "srv_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef HAVE_MHD
#include <errno.h>
#include <microhttpd.h>
#include <netdb.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

typedef struct conn_ctx {
    srv_server *s;
    char *body;
    size_t n, cap;
    int too_large, status;
    srv_job *job;
    int fd;
    /* streaming */
    size_t sent;                  /* bytes of the job's text sent */
    int first_sent, final_sent;
    char *pend;                   /* an event not yet copied out whole */
    size_t pend_n, pend_off;
    double t_recv;
} conn_ctx;

/* The client closed its end (or the socket failed). */
static int client_gone(int fd)
{
    if (fd < 0)
        return 0;
    struct pollfd p = {.fd = fd, .events = POLLRDHUP};
    return poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL));
}

static enum MHD_Result reply(struct MHD_Connection *c, conn_ctx *cx, int status,
                             const char *ctype, char *body)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(strlen(body), body,
                                                             MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", ctype);
    if (status == 401)
        MHD_add_response_header(r, "WWW-Authenticate", "Bearer");
    enum MHD_Result ret = MHD_queue_response(c, (unsigned)status, r);
    MHD_destroy_response(r);
    cx->status = status;
    srv_count(cx->s, status);
    return ret;
}

static enum MHD_Result reply_error(struct MHD_Connection *c, conn_ctx *cx, int status,
                                   const char *msg, const char *param)
{
    return reply(c, cx, status, "application/json", srv_resp_error(status, msg, param));
}

/* ---- a streamed completion: one event per batch of new text, then [DONE] ---- */
static void pend_set(conn_ctx *cx, char *ev)
{
    free(cx->pend);
    cx->pend = ev;
    cx->pend_n = strlen(ev);
    cx->pend_off = 0;
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    conn_ctx *cx = cls;
    srv_job *j = cx->job;
    srv_server *s = cx->s;
    (void)pos;
    for (;;) {
        if (cx->pend && cx->pend_off < cx->pend_n) {
            size_t k = cx->pend_n - cx->pend_off;
            if (k > max)
                k = max;
            memcpy(buf, cx->pend + cx->pend_off, k);
            cx->pend_off += k;
            return (ssize_t)k;
        }
        if (cx->final_sent)
            return MHD_CONTENT_READER_END_OF_STREAM;
        pthread_mutex_lock(&j->mu);
        size_t len = j->len;
        int done = j->done, failed = j->failed;
        char *text = NULL;
        if (len > cx->sent) {
            text = mlsys_xmalloc(len - cx->sent);
            memcpy(text, j->text + cx->sent, len - cx->sent);
        }
        pthread_mutex_unlock(&j->mu);
        if (!cx->first_sent || text) {
            pend_set(cx, srv_resp_chunk(j, s->model_name, s->created, text, len - cx->sent,
                                        !cx->first_sent, 0));
            cx->first_sent = 1;
            cx->sent = len;
            free(text);
            continue;
        }
        if (done) {
            char *ev = failed ? NULL : srv_resp_chunk(j, s->model_name, s->created, NULL, 0,
                                                       0, 1);
            if (failed) {
                char *e = srv_resp_error(400, j->err, "");
                ev = mlsys_xmalloc(strlen(e) + 16);
                sprintf(ev, "data: %s\n\n", e);
                free(e);
            }
            char *all = mlsys_xmalloc(strlen(ev) + 16);
            sprintf(all, "%sdata: [DONE]\n\n", ev);
            free(ev);
            pend_set(cx, all);
            cx->final_sent = 1;
            continue;
        }
        if (!srv_job_wait(j, cx->sent, 0.05) && client_gone(cx->fd))
            return MHD_CONTENT_READER_END_WITH_ERROR;
    }
}

/* ---- a completion request at its end ---- */
static enum MHD_Result completion(struct MHD_Connection *c, conn_ctx *cx, srv_kind kind)
{
    srv_server *s = cx->s;
    char *body = NULL;
    int rc = srv_make_job(s, kind, cx->body, cx->n, &cx->job, &body);
    if (rc)
        return reply(c, cx, rc, "application/json", body);
    srv_job *j = cx->job;
    j->t_recv = cx->t_recv;
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    cx->fd = ci ? ci->connect_fd : -1;
    srv_loop_submit(s->loop, j);
    if (j->req.stream) {
        cx->first_sent = kind != SRV_CHAT;     /* only a chat stream opens with the role */
        struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096,
                                                                   stream_read, cx, NULL);
        if (!r)
            return MHD_NO;
        MHD_add_response_header(r, "Content-Type", "text/event-stream");
        MHD_add_response_header(r, "Cache-Control", "no-cache");
        enum MHD_Result ret = MHD_queue_response(c, MHD_HTTP_OK, r);
        MHD_destroy_response(r);
        cx->status = 200;
        srv_count(s, 200);
        return ret;
    }
    for (;;) {
        pthread_mutex_lock(&j->mu);
        int done = j->done;
        size_t len = j->len;
        pthread_mutex_unlock(&j->mu);
        if (done)
            break;
        if (!srv_job_wait(j, len, 0.05) && client_gone(cx->fd))
            return MHD_NO;          /* completed() cancels it */
    }
    if (j->failed)
        return reply_error(c, cx, 400, j->err, "");
    if (j->finish == LLM_FINISH_ERROR)
        return reply_error(c, cx, 500, "the engine failed on this request", "");
    char *out = srv_resp_full(j, s->model_name, s->created);
    struct MHD_Response *r = MHD_create_response_from_buffer(strlen(out), out,
                                                             MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(out);
        return MHD_NO;
    }
    double engine = j->t_final - j->t_submit, server = mlsys_now_s() - cx->t_recv;
    char v[32];
    MHD_add_response_header(r, "Content-Type", "application/json");
    snprintf(v, sizeof v, "%.4f", engine * 1e3);
    MHD_add_response_header(r, "X-Mlsys-Engine-Ms", v);
    snprintf(v, sizeof v, "%.4f", server * 1e3);
    MHD_add_response_header(r, "X-Mlsys-Server-Ms", v);
    enum MHD_Result ret = MHD_queue_response(c, MHD_HTTP_OK, r);
    MHD_destroy_response(r);
    cx->status = 200;
    srv_count(s, 200);
    pthread_mutex_lock(&s->mu);
    s->http.overhead_sum += server - engine;
    s->http.overhead_count++;
    pthread_mutex_unlock(&s->mu);
    return ret;
}

static int authorized(struct MHD_Connection *c, srv_server *s)
{
    if (!s->api_key[0])
        return 1;
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    return h && !strncmp(h, "Bearer ", 7) && !strcmp(h + 7, s->api_key);
}

static enum MHD_Result route(struct MHD_Connection *c, conn_ctx *cx, const char *url,
                             const char *method)
{
    srv_server *s = cx->s;
    int get = !strcmp(method, "GET"), post = !strcmp(method, "POST");
    if (s->draining && strcmp(url, "/metrics"))
        return reply_error(c, cx, 503, "the server is shutting down", "");
    if (!strcmp(url, "/health"))
        return get ? reply(c, cx, 200, "application/json", mlsys_xstrdup("{\"status\":\"ok\"}"))
                   : reply_error(c, cx, 405, "use GET", "");
    if (!strcmp(url, "/metrics")) {
        if (!get)
            return reply_error(c, cx, 405, "use GET", "");
        llm_serve_metrics m;
        srv_side_stats side;
        srv_http_counters h;
        srv_loop_metrics(s->loop, &m, &side);
        pthread_mutex_lock(&s->mu);
        h = s->http;
        pthread_mutex_unlock(&s->mu);
        return reply(c, cx, 200, "text/plain; version=0.0.4",
                     srv_metrics_text(&m, &side, &h, s->draining));
    }
    if (strncmp(url, "/v1/", 4))
        return reply_error(c, cx, 404, "no such route", "");
    if (!authorized(c, s))
        return reply_error(c, cx, 401, "Incorrect API key provided", "");
    if (!strcmp(url, "/v1/models"))
        return get ? reply(c, cx, 200, "application/json",
                           srv_resp_models(s->model_name, s->created))
                   : reply_error(c, cx, 405, "use GET", "");
    int chat = !strcmp(url, "/v1/chat/completions");
    if (!chat && strcmp(url, "/v1/completions"))
        return reply_error(c, cx, 404, "no such route", "");
    if (!post)
        return reply_error(c, cx, 405, "use POST", "");
    if (cx->too_large) {
        char msg[128];
        snprintf(msg, sizeof msg, "the body is over the limit of %zu bytes", s->o.max_body);
        return reply_error(c, cx, 413, msg, "");
    }
    return completion(c, cx, chat ? SRV_CHAT : SRV_COMPLETION);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version,
                                  const char *upload_data, size_t *upload_size, void **con_cls)
{
    srv_server *s = cls;
    conn_ctx *cx = *con_cls;
    (void)version;
    if (!cx) {
        cx = mlsys_xcalloc(1, sizeof *cx);
        cx->s = s;
        cx->fd = -1;
        *con_cls = cx;
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
        if (cl && strtoull(cl, NULL, 10) > s->o.max_body)
            cx->too_large = 1;
        return MHD_YES;
    }
    if (*upload_size) {
        if (!cx->too_large && cx->n + *upload_size > s->o.max_body) {
            cx->too_large = 1;
            free(cx->body);
            cx->body = NULL;
            cx->n = cx->cap = 0;
        }
        if (!cx->too_large) {
            if (cx->n + *upload_size + 1 > cx->cap) {
                size_t cap = (cx->n + *upload_size + 1) * 2;
                char *b = mlsys_xmalloc(cap);
                if (cx->n)
                    memcpy(b, cx->body, cx->n);
                free(cx->body);
                cx->body = b;
                cx->cap = cap;
            }
            memcpy(cx->body + cx->n, upload_data, *upload_size);
            cx->n += *upload_size;
        }
        *upload_size = 0;
        return MHD_YES;
    }
    cx->t_recv = mlsys_now_s();
    return route(c, cx, url, method);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    srv_server *s = cls;
    conn_ctx *cx = *con_cls;
    (void)c;
    if (!cx)
        return;
    if (cx->job) {
        pthread_mutex_lock(&cx->job->mu);
        int done = cx->job->done;
        pthread_mutex_unlock(&cx->job->mu);
        if (!done) {
            srv_loop_cancel(s->loop, cx->job);
            pthread_mutex_lock(&s->mu);
            s->http.disconnects++;
            pthread_mutex_unlock(&s->mu);
        }
        srv_job_unref(cx->job);
        pthread_mutex_lock(&s->mu);
        s->open_jobs--;
        pthread_mutex_unlock(&s->mu);
    }
    if (s->o.log_requests)
        fprintf(stderr, "serve: request done: status %d%s\n", cx->status,
                toe == MHD_REQUEST_TERMINATED_COMPLETED_OK ? "" : " (connection ended early)");
    free(cx->body);
    free(cx->pend);
    free(cx);
    *con_cls = NULL;
}

/* A listening socket on addr:port (port 0: any free one). fd, or -1 with err. */
static int listen_on(const char *addr, int port, int *bound, char *err, size_t errlen)
{
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE;
    char ps[16];
    snprintf(ps, sizeof ps, "%d", port);
    int g = getaddrinfo(addr, ps, &hints, &res);
    if (g != 0) {
        snprintf(err, errlen, "address %s: %s", addr, gai_strerror(g));
        return -1;
    }
    int fd = socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
    if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) ||
        bind(fd, res->ai_addr, res->ai_addrlen) || listen(fd, 256)) {
        snprintf(err, errlen, "cannot listen on %s:%d: %s", addr, port, strerror(errno));
        if (fd >= 0)
            close(fd);
        freeaddrinfo(res);
        return -1;
    }
    freeaddrinfo(res);
    struct sockaddr_in sin;
    socklen_t sl = sizeof sin;
    getsockname(fd, (struct sockaddr *)&sin, &sl);
    *bound = ntohs(sin.sin_port);
    return fd;
}

int srv_http_start(srv_server *s, char *err, size_t errlen)
{
    signal(SIGPIPE, SIG_IGN);
    const char *addr = s->o.addr && *s->o.addr ? s->o.addr : "127.0.0.1";
    s->listen_fd = listen_on(addr, s->o.port, &s->port, err, errlen);
    if (s->listen_fd < 0)
        return -1;
    struct MHD_Daemon *d = MHD_start_daemon(
        MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION, 0, NULL, NULL,
        on_request, s, MHD_OPTION_LISTEN_SOCKET, s->listen_fd,
        MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
        MHD_OPTION_CONNECTION_LIMIT, (unsigned)s->o.max_connections,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)300, MHD_OPTION_END);
    if (!d) {
        snprintf(err, errlen, "libmicrohttpd could not start on %s:%d", addr, s->port);
        close(s->listen_fd);
        s->listen_fd = -1;
        return -1;
    }
    s->daemon = d;
    s->listen_fd = -1;              /* the daemon's now: MHD_stop_daemon closes it */
    return 0;
}

void srv_http_stop(srv_server *s)
{
    if (s->daemon) {
        srv_loop_cancel_all(s->loop);   /* handler threads waiting on jobs return */
        MHD_stop_daemon(s->daemon);
        s->daemon = NULL;
    }
    if (s->listen_fd >= 0)
        close(s->listen_fd);
    s->listen_fd = -1;
}

#else

int srv_http_start(srv_server *s, char *err, size_t errlen)
{
    (void)s;
    snprintf(err, errlen, "built without libmicrohttpd");
    return -1;
}

void srv_http_stop(srv_server *s)
{
    (void)s;
}

#endif
