/* mhd.c - the HTTP glue on libmicrohttpd (a thread per connection): the listening socket,
 * the routes, the bearer key, the body gathered up to its limit (413 past it), and the end of
 * a connection (a request still running is cancelled: its client left). The completions
 * themselves: mhd_answer.c. Built without libmicrohttpd: srv_http_start says so. */
#include "srv_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef HAVE_MHD
#include "mhd.h"

#include <errno.h>
#include <netdb.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

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
        return srv_reply_error(c, cx, 503, "the server is shutting down", "");
    if (!strcmp(url, "/health"))
        return get ? srv_reply(c, cx, 200, "application/json", mlsys_xstrdup("{\"status\":\"ok\"}"))
                   : srv_reply_error(c, cx, 405, "use GET", "");
    if (!strcmp(url, "/metrics")) {
        if (!get)
            return srv_reply_error(c, cx, 405, "use GET", "");
        llm_engine_metrics m;
        srv_http_counters h;
        srv_loop_metrics(s->loop, &m);
        pthread_mutex_lock(&s->mu);
        h = s->http;
        pthread_mutex_unlock(&s->mu);
        return srv_reply(c, cx, 200, "text/plain; version=0.0.4",
                     srv_metrics_text(&m, &h, s->draining));
    }
    if (strncmp(url, "/v1/", 4))
        return srv_reply_error(c, cx, 404, "no such route", "");
    if (!authorized(c, s))
        return srv_reply_error(c, cx, 401, "Incorrect API key provided", "");
    if (!strcmp(url, "/v1/models"))
        return get ? srv_reply(c, cx, 200, "application/json",
                           srv_resp_models(s->model_name, s->created))
                   : srv_reply_error(c, cx, 405, "use GET", "");
    int chat = !strcmp(url, "/v1/chat/completions");
    if (!chat && strcmp(url, "/v1/completions"))
        return srv_reply_error(c, cx, 404, "no such route", "");
    if (!post)
        return srv_reply_error(c, cx, 405, "use POST", "");
    if (cx->too_large) {
        char msg[128];
        snprintf(msg, sizeof msg, "the body is over the limit of %zu bytes", s->o.max_body);
        return srv_reply_error(c, cx, 413, msg, "");
    }
    return srv_completion(c, cx, chat ? SRV_CHAT : SRV_COMPLETION);
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
