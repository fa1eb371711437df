/* net_events.c - the rank side of events over TCP: w->emit batches events and sends them to
 * the runner's collector (MLSYS_EVENTS_ADDR) after a hello that carries the job's token
 * (MLSYS_EVENTS_TOKEN). A batch goes out when it is full, when it has waited 20 ms, when the
 * transport is about to sleep in a wait, and at the end. Blocking sends give back-pressure;
 * a send that fails closes the stream, and from then on every event is counted as lost.
 * Two threads may emit (a rank's and its non-blocking collectives' progress thread): the
 * batch is under a lock. */
#include "internal.h"
#include "net_events.h"
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define BATCH 256                     /* 32 KiB of events per frame */
#define BATCH_AGE_NS 20000000ull      /* a batch waits at most this long for company */
#define CONNECT_MS 5000

static struct {
    int fd;                           /* -1 when not connected */
    int started, said_loss;
    int rank;
    char addr[256];
    mlsys_event buf[BATCH];
    size_t n;
    uint64_t first_ns;                /* when the oldest event in buf was batched */
    uint64_t sent, lost;
    pthread_mutex_t mu;               /* the batch and the stream */
} g = {.fd = -1, .mu = PTHREAD_MUTEX_INITIALIZER};

void net_events_boot_id(char *out, size_t n)
{
    out[0] = 0;
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
    if (!f)
        return;
    if (!fgets(out, (int)n, f))
        out[0] = 0;
    out[strcspn(out, "\n")] = 0;
    fclose(f);
}

/* Write all of buf; 0, or -errno. */
static int send_all(int fd, const void *buf, size_t len)
{
    const char *p = buf;
    while (len) {
        ssize_t k = send(fd, p, len, MSG_NOSIGNAL);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return k < 0 ? -errno : -EPIPE;
        p += k;
        len -= (size_t)k;
    }
    return 0;
}

static void say_loss(const char *why)
{
    if (g.said_loss)
        return;
    g.said_loss = 1;
    fprintf(stderr, "mlsys-lab: rank %d: event stream to %s: %s; further events are counted "
            "as lost\n", g.rank, g.addr, why);
}

static void stream_broken(int err)
{
    if (g.fd >= 0)
        close(g.fd);
    g.fd = -1;
    say_loss(strerror(-err));
}

/* "host:port" (host may be [v6]) -> a connected, blocking socket, or -errno / -EINVAL. */
static int dial(const char *addr, char *why, size_t n)
{
    char host[256];
    const char *colon = strrchr(addr, ':');
    if (!colon || colon == addr || !colon[1] || (size_t)(colon - addr) >= sizeof host) {
        snprintf(why, n, "bad address '%s' (want host:port)", addr);
        return -EINVAL;
    }
    memcpy(host, addr, (size_t)(colon - addr));
    host[colon - addr] = 0;
    if (host[0] == '[' && host[strlen(host) - 1] == ']') {
        memmove(host, host + 1, strlen(host));
        host[strlen(host) - 1] = 0;
    }
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *res = NULL;
    int gai = getaddrinfo(host, colon + 1, &hints, &res);
    if (gai) {
        snprintf(why, n, "cannot resolve %s: %s", addr, gai_strerror(gai));
        return -EINVAL;
    }
    int fd = -1, err = ECONNREFUSED;
    for (struct addrinfo *ai = res; ai && fd < 0; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0) {
            err = errno;
            continue;
        }
        if (connect(fd, ai->ai_addr, ai->ai_addrlen) != 0 && errno != EINPROGRESS) {
            err = errno;
            close(fd);
            fd = -1;
            continue;
        }
        struct pollfd p = {.fd = fd, .events = POLLOUT};
        int soerr = 0;
        socklen_t sl = sizeof soerr;
        if (poll(&p, 1, CONNECT_MS) != 1)
            soerr = ETIMEDOUT;
        else if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) != 0)
            soerr = errno;
        if (soerr) {
            err = soerr;
            close(fd);
            fd = -1;
        }
    }
    freeaddrinfo(res);
    if (fd < 0) {
        snprintf(why, n, "cannot connect: %s", strerror(err));
        return -err;
    }
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    return fd;
}

static void flush_locked(void);

static void net_emit(mlsys_world *w, const mlsys_event *ev)
{
    (void)w;
    pthread_mutex_lock(&g.mu);
    if (g.fd < 0) {
        g.lost++;
    } else {
        if (g.n == 0)
            g.first_ns = ev->t_ns;
        g.buf[g.n++] = *ev;
        if (g.n == BATCH || ev->t_ns - g.first_ns > BATCH_AGE_NS)
            flush_locked();
    }
    pthread_mutex_unlock(&g.mu);
}

void net_events_flush(mlsys_world *w)
{
    (void)w;
    pthread_mutex_lock(&g.mu);
    flush_locked();
    pthread_mutex_unlock(&g.mu);
}

static void flush_locked(void)
{
    if (!g.n)
        return;
    if (g.fd < 0) {
        g.lost += g.n;
        g.n = 0;
        return;
    }
    net_ev_frame fr = {NET_EV_EVENTS, (uint32_t)g.n};
    int rc = send_all(g.fd, &fr, sizeof fr);
    if (!rc)
        rc = send_all(g.fd, g.buf, g.n * sizeof g.buf[0]);
    if (rc) {
        g.lost += g.n;
        stream_broken(rc);
    } else {
        g.sent += g.n;
    }
    g.n = 0;
}

int net_events_start(mlsys_world *w, const char *addr, const char *token)
{
    char why[300];
    g.started = 1;
    g.rank = w->rank;
    snprintf(g.addr, sizeof g.addr, "%s", addr);
    w->emit = net_emit;
    w->tracing = 1;
    if (!token || strlen(token) != NET_EV_TOKEN_LEN) {
        say_loss("no job token (MLSYS_EVENTS_TOKEN)");
        return -1;
    }
    int fd = dial(addr, why, sizeof why);
    if (fd < 0) {
        say_loss(why);
        return -1;
    }
    net_ev_hello h;
    memset(&h, 0, sizeof h);
    memcpy(h.magic, NET_EV_MAGIC, sizeof h.magic);
    h.version = NET_EV_VERSION;
    h.rank = w->rank;
    h.size = w->size;
    h.pid = (int32_t)getpid();
    h.mono_ns = mlsys_now_ns();
    memcpy(h.token, token, NET_EV_TOKEN_LEN);
    net_events_boot_id(h.boot_id, sizeof h.boot_id);
    char ack = 0;
    int rc = send_all(fd, &h, sizeof h);
    if (!rc) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, CONNECT_MS) != 1 || recv(fd, &ack, 1, 0) != 1)
            ack = 0;
    }
    if (rc || ack != NET_EV_ACK) {
        close(fd);
        say_loss(rc ? strerror(-rc) : "the collector refused the connection (wrong token?)");
        return -1;
    }
    g.fd = fd;
    return 0;
}

void net_events_stop(mlsys_world *w)
{
    if (!g.started)
        return;
    net_events_flush(w);
    if (g.fd >= 0) {
        net_ev_frame fr = {NET_EV_BYE, 0};
        net_ev_bye bye = {g.sent, g.lost};
        int rc = send_all(g.fd, &fr, sizeof fr);
        if (!rc)
            rc = send_all(g.fd, &bye, sizeof bye);
        if (rc)
            stream_broken(rc);
        else {
            /* wait for the collector to close its side, so the bye is read before we exit */
            shutdown(g.fd, SHUT_WR);
            struct pollfd p = {.fd = g.fd, .events = POLLIN};
            char c;
            if (poll(&p, 1, 2000) == 1)
                (void)!recv(g.fd, &c, 1, 0);
            close(g.fd);
            g.fd = -1;
        }
    }
    if (g.lost)
        fprintf(stderr, "mlsys-lab: rank %d: %llu events lost (stream to %s)\n", g.rank,
                (unsigned long long)g.lost, g.addr);
    w->emit = NULL;
    w->tracing = 0;
    g.started = 0;
}
