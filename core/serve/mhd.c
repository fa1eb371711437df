/* mhd.c - the HTTP glue on libmicrohttpd (one thread polls every connection; an answer
 * waiting on the engine parks its connection): the listening socket, the limits on
 * connections (in all, per address, a deadline for each whole request, idle time, clients
 * that leave while parked), the routes, the bearer key (server.c compares it), the body
 * gathered up to its limit (413 past it), and the end of a connection (a request still
 * running is cancelled: its client left). The completions themselves: mhd_answer.c. Built
 * without libmicrohttpd: srv_http_start says so. */
#include "srv_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef HAVE_MHD
#include "mhd.h"

#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* ---- slow clients: every connection must deliver a whole request in time ----
 * libmicrohttpd's own timeout counts idle seconds only, so a client that sends one byte a
 * second holds its connection forever. The guard keeps each connection's deadline (from its
 * start, or from the end of its previous answer, until its request is whole) and a thread
 * that shuts down the sockets past theirs. It also watches the clients of the requests being
 * answered: libmicrohttpd does not look at a parked connection's socket, so a client that
 * leaves while its answer waits on the engine is found here (its job hung up, unparked, and
 * cancelled as the connection ends). A connection leaves the list in libmicrohttpd's
 * "closed" notice, which comes before the socket is closed, under the same lock as the
 * shutdown and the polls: the guard never touches a descriptor that another connection
 * reuses; a job leaves it (on_completed) before the HTTP side lets the job go. */
typedef struct watched {
    int fd, busy, cut;            /* busy: its request is whole (being answered) */
    double since;
    srv_job *job;                 /* the request being answered (no reference of its own) */
    int left;                     /* its client left: the job was hung up */
    struct watched *prev, *next;
} watched;

typedef struct guard {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    watched *head;
    int stop, started;
    pthread_t th;
    srv_server *s;
    struct pollfd *pf;            /* the clients polled in one turn, and their entries */
    watched **pw;
    size_t cap;
} guard;

/* The clients of the requests being answered that closed their end (or whose socket
 * failed): their jobs hang up (under g->mu). */
static void find_left(guard *g)
{
    size_t n = 0;
    for (watched *w = g->head; w; w = w->next) {
        if (!w->job || w->left || w->fd < 0)
            continue;
        if (n == g->cap) {
            g->cap = g->cap ? 2 * g->cap : 32;
            g->pf = mlsys_xrealloc(g->pf, g->cap * sizeof *g->pf);
            g->pw = mlsys_xrealloc(g->pw, g->cap * sizeof *g->pw);
        }
        g->pf[n] = (struct pollfd){.fd = w->fd, .events = POLLRDHUP};
        g->pw[n++] = w;
    }
    if (n == 0 || poll(g->pf, n, 0) <= 0)
        return;
    for (size_t i = 0; i < n; i++)
        if (g->pf[i].revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) {
            g->pw[i]->left = 1;
            srv_job_unpark(g->pw[i]->job, 1);
        }
}

static void *guard_main(void *arg)
{
    guard *g = arg;
    srv_server *s = g->s;
    double limit = s->o.request_timeout_s;
    pthread_mutex_lock(&g->mu);
    while (!g->stop) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        ts.tv_nsec += 100000000L;           /* a tenth of a second: deadlines are seconds */
        if (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&g->cv, &g->mu, &ts);
        double now = mlsys_now_s();
        for (watched *w = g->head; w; w = w->next)
            if (!w->busy && !w->cut && now - w->since > limit) {
                shutdown(w->fd, SHUT_RDWR);     /* its thread sees the end and closes it */
                w->cut = 1;
                pthread_mutex_lock(&s->mu);
                s->http.cut_slow++;
                pthread_mutex_unlock(&s->mu);
                if (s->o.log_requests)
                    fprintf(stderr, "serve: a connection cut: no whole request within %g s\n",
                            limit);
            }
        find_left(g);
    }
    pthread_mutex_unlock(&g->mu);
    return NULL;
}

static void on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                          enum MHD_ConnectionNotificationCode code)
{
    guard *g = ((srv_server *)cls)->guard;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        watched *w = mlsys_xcalloc(1, sizeof *w);
        w->fd = ci ? ci->connect_fd : -1;
        w->cut = w->fd < 0;
        w->since = mlsys_now_s();
        pthread_mutex_lock(&g->mu);
        w->next = g->head;
        if (g->head)
            g->head->prev = w;
        g->head = w;
        pthread_mutex_unlock(&g->mu);
        *socket_context = w;
    } else if (*socket_context) {
        watched *w = *socket_context;
        pthread_mutex_lock(&g->mu);
        if (w->prev)
            w->prev->next = w->next;
        else
            g->head = w->next;
        if (w->next)
            w->next->prev = w->prev;
        pthread_mutex_unlock(&g->mu);
        free(w);
        *socket_context = NULL;
    }
}

static watched *watched_of(struct MHD_Connection *c)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
}

/* The connection's request is whole (busy 1), or its answer is done and the next request's
 * deadline starts (busy 0: its job, if any, is no longer watched). */
static void watch_mark(srv_server *s, struct MHD_Connection *c, int busy)
{
    guard *g = s->guard;
    watched *w = watched_of(c);
    if (!w)
        return;
    pthread_mutex_lock(&g->mu);
    w->busy = busy;
    w->since = mlsys_now_s();
    if (!busy) {
        w->job = NULL;
        w->left = 0;
    }
    pthread_mutex_unlock(&g->mu);
}

void srv_watch_job(conn_ctx *cx)
{
    guard *g = cx->s->guard;
    watched *w = watched_of(cx->conn);
    if (!w)
        return;
    pthread_mutex_lock(&g->mu);
    w->job = cx->job;
    w->left = 0;
    pthread_mutex_unlock(&g->mu);
}

/* Every request being answered stops (the server closes, under g->mu): a parked
 * connection is unparked, and none parks again (srv_server.closing). */
static void hang_up_all(guard *g)
{
    pthread_mutex_lock(&g->mu);
    for (watched *w = g->head; w; w = w->next)
        if (w->job)
            srv_job_unpark(w->job, 1);
    pthread_mutex_unlock(&g->mu);
}

static guard *guard_start(srv_server *s, char *err, size_t errlen)
{
    guard *g = mlsys_xcalloc(1, sizeof *g);
    g->s = s;
    pthread_mutex_init(&g->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&g->cv, &ca);
    pthread_condattr_destroy(&ca);
    if (pthread_create(&g->th, NULL, guard_main, g) != 0) {
        snprintf(err, errlen, "cannot start the connections' guard thread");
        pthread_cond_destroy(&g->cv);
        pthread_mutex_destroy(&g->mu);
        free(g);
        return NULL;
    }
    g->started = 1;
    return g;
}

/* After the daemon stopped (no connection is left). */
static void guard_stop(guard *g)
{
    if (!g)
        return;
    pthread_mutex_lock(&g->mu);
    g->stop = 1;
    pthread_cond_signal(&g->cv);
    pthread_mutex_unlock(&g->mu);
    pthread_join(g->th, NULL);
    while (g->head) {
        watched *w = g->head;
        g->head = w->next;
        free(w);
    }
    free(g->pf);
    free(g->pw);
    pthread_cond_destroy(&g->cv);
    pthread_mutex_destroy(&g->mu);
    free(g);
}

static int authorized(struct MHD_Connection *c, srv_server *s)
{
    return srv_key_ok(s, MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization"));
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
    char nowhere[160];
    snprintf(nowhere, sizeof nowhere, "Invalid URL (%.10s %.120s)", method, url);
    if (strncmp(url, "/v1/", 4))
        return srv_reply_error(c, cx, 404, nowhere, "");
    if (!authorized(c, s))
        return srv_reply_error(c, cx, 401, "Incorrect API key provided", "");
    if (!strcmp(url, "/v1/models"))
        return get ? srv_reply(c, cx, 200, "application/json",
                           srv_resp_models(s->model_name, s->created))
                   : srv_reply_error(c, cx, 405, "use GET", "");
    int chat = !strcmp(url, "/v1/chat/completions");
    if (!chat && strcmp(url, "/v1/completions"))
        return srv_reply_error(c, cx, 404, nowhere, "");
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
        cx->conn = c;
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
    if (cx->job)                  /* a whole answer, unparked */
        return srv_completion_answer(c, cx);
    cx->t_recv = mlsys_now_s();
    watch_mark(s, c, 1);
    return route(c, cx, url, method);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    srv_server *s = cls;
    conn_ctx *cx = *con_cls;
    watch_mark(s, c, 0);          /* kept alive: the next request's deadline starts now */
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
    if (!(s->guard = guard_start(s, err, errlen))) {
        close(s->listen_fd);
        s->listen_fd = -1;
        return -1;
    }
    struct MHD_Daemon *d = MHD_start_daemon(
        MHD_USE_AUTO_INTERNAL_THREAD | MHD_ALLOW_SUSPEND_RESUME, 0, NULL, NULL,
        on_request, s, MHD_OPTION_LISTEN_SOCKET, s->listen_fd,
        MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
        MHD_OPTION_NOTIFY_CONNECTION, on_connection, s,
        MHD_OPTION_CONNECTION_LIMIT, (unsigned)s->o.max_connections,
        MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned)s->o.max_connections_per_ip,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)s->o.idle_timeout_s, MHD_OPTION_END);
    if (!d) {
        if (mhd_lib_why())
            snprintf(err, errlen, "%s", mhd_lib_why());
        else
            snprintf(err, errlen, "libmicrohttpd could not start on %s:%d", addr, s->port);
        close(s->listen_fd);
        s->listen_fd = -1;
        guard_stop(s->guard);
        s->guard = NULL;
        return -1;
    }
    s->daemon = d;
    s->listen_fd = -1;              /* the daemon's now: MHD_stop_daemon closes it */
    return 0;
}

void srv_http_stop(srv_server *s)
{
    if (s->daemon) {
        srv_loop_cancel_all(s->loop);
        /* libmicrohttpd must not stop with a connection parked: none parks from now on, and
         * the parked ones go back (their answers stop) */
        __atomic_store_n(&s->closing, 1, __ATOMIC_RELEASE);
        hang_up_all(s->guard);
        MHD_stop_daemon(s->daemon);
        s->daemon = NULL;
    }
    guard_stop(s->guard);
    s->guard = NULL;
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
