/* net_collector.c - receives the ranks' event streams over TCP for one job. The listener binds
 * to loopback unless the runner was given an address (clusters); a stream counts only after
 * a hello with the job's 128-bit token, and a wrong one is refused and said on stderr.
 * Events from another host (another boot id) are moved onto this host's clock by the offset
 * seen at hello time. Everything is non-blocking: the runner polls these fds with its pipes. */
#include "net_events.h"
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#define HELLO_TIMEOUT_NS 5000000000ull
#define MAX_PENDING 64                 /* connections that have not said hello yet */
#define POLL_MAX 256

enum { CONN_HELLO, CONN_ACTIVE };

typedef struct conn {
    int fd;
    int state;
    int rank;
    int64_t offset_ns;                 /* added to the rank's clock */
    uint64_t opened_ns;
    char peer[80];
    unsigned char *buf;
    size_t len, cap;
} conn;

struct collector {
    int lfd;
    int world;
    char addr[300];
    char token[NET_EV_TOKEN_LEN + 1];
    char boot_id[40];
    conn *conns;
    int nconns;
    int *connected, *said_bye;         /* [world] */
    uint64_t events, lost;
    int refused;
    int verbose;
    mlsys_event *out;                  /* aligned copy of one frame's events */
};

static void make_token(char *out)
{
    unsigned char b[NET_EV_TOKEN_LEN / 2];
    size_t got = 0;
    while (got < sizeof b) {
        ssize_t k = getrandom(b + got, sizeof b - got, 0);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0) {                    /* no entropy source: fall back to time and pid */
            uint64_t x = mlsys_now_ns() ^ ((uint64_t)getpid() << 32);
            mlsys_rng g;
            mlsys_rng_seed(&g, x);
            for (; got < sizeof b; got++)
                b[got] = (unsigned char)mlsys_rng_u64(&g);
            break;
        }
        got += (size_t)k;
    }
    for (size_t i = 0; i < sizeof b; i++)
        snprintf(out + 2 * i, 3, "%02x", b[i]);
}

/* "host", "host:port" or "[v6]:port" -> host and port (port "0" when none). */
static int split_addr(const char *addr, char *host, size_t hn, char *port, size_t pn)
{
    const char *colon = NULL;
    if (addr[0] == '[') {
        const char *end = strchr(addr, ']');
        if (!end || (size_t)(end - addr - 1) >= hn)
            return -1;
        memcpy(host, addr + 1, (size_t)(end - addr - 1));
        host[end - addr - 1] = 0;
        if (end[1] == ':')
            colon = end + 1;
        else if (end[1])
            return -1;
    } else {
        colon = strchr(addr, ':');
        if (colon && strchr(colon + 1, ':'))
            colon = NULL;                  /* a bare v6 address: no port */
        size_t len = colon ? (size_t)(colon - addr) : strlen(addr);
        if (len == 0 || len >= hn)
            return -1;
        memcpy(host, addr, len);
        host[len] = 0;
    }
    snprintf(port, pn, "%s", colon && colon[1] ? colon + 1 : "0");
    return 0;
}

collector *collector_open(const char *addr, int world, char *err, size_t n)
{
    char host[256], port[32];
    if (!addr || !*addr)
        addr = "127.0.0.1";
    if (split_addr(addr, host, sizeof host, port, sizeof port) != 0) {
        snprintf(err, n, "--events-addr: '%s' is not an address (want HOST or HOST:PORT)", addr);
        return NULL;
    }
    if (!strcmp(host, "0.0.0.0") || !strcmp(host, "::")) {
        snprintf(err, n, "--events-addr: give an address the ranks can reach, not the wildcard "
                 "%s", host);
        return NULL;
    }
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_NUMERICSERV}, *res = NULL;
    int gai = getaddrinfo(host, port, &hints, &res);
    if (gai) {
        snprintf(err, n, "--events-addr: cannot resolve %s: %s", host, gai_strerror(gai));
        return NULL;
    }
    int fd = -1, e = 0;
    for (struct addrinfo *ai = res; ai && fd < 0; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0) {
            e = errno;
            continue;
        }
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
        if (bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || listen(fd, 128) != 0) {
            e = errno;
            close(fd);
            fd = -1;
        }
    }
    freeaddrinfo(res);
    if (fd < 0) {
        snprintf(err, n, "cannot listen for events on %s:%s: %s", host, port, strerror(e));
        return NULL;
    }
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    getsockname(fd, (struct sockaddr *)&ss, &sl);
    int bound = ss.ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6 *)&ss)->sin6_port)
                                         : ntohs(((struct sockaddr_in *)&ss)->sin_port);
    collector *c = mlsys_xcalloc(1, sizeof *c);
    c->lfd = fd;
    c->world = world;
    snprintf(c->addr, sizeof c->addr, strchr(host, ':') ? "[%s]:%d" : "%s:%d", host, bound);
    make_token(c->token);
    net_events_boot_id(c->boot_id, sizeof c->boot_id);
    c->connected = mlsys_xcalloc((size_t)world, sizeof(int));
    c->said_bye = mlsys_xcalloc((size_t)world, sizeof(int));
    c->out = mlsys_xmalloc(NET_EV_MAX_BATCH * sizeof(mlsys_event));
    return c;
}

const char *collector_addr(const collector *c) { return c->addr; }
const char *collector_token(const collector *c) { return c->token; }
uint64_t collector_events(const collector *c) { return c->events; }
uint64_t collector_lost(const collector *c) { return c->lost; }
int collector_refused(const collector *c) { return c->refused; }
void collector_set_verbose(collector *c, int on) { c->verbose = on; }

int collector_pollfds(const collector *c, struct pollfd *p, int max)
{
    int k = 0;
    if (k < max)
        p[k++] = (struct pollfd){.fd = c->lfd, .events = POLLIN};
    for (int i = 0; i < c->nconns && k < max; i++)
        p[k++] = (struct pollfd){.fd = c->conns[i].fd, .events = POLLIN};
    return k;
}

static void conn_drop(collector *c, int i)
{
    close(c->conns[i].fd);
    free(c->conns[i].buf);
    c->conns[i] = c->conns[--c->nconns];
}

/* The first few refusals are said one by one; after that, only how many more there were
 * (once, when the collector closes): a flood of bad connections is not a flood of lines. */
#define REFUSALS_SAID 5

static void refuse(collector *c, int i, const char *why)
{
    if (c->refused < REFUSALS_SAID)
        fprintf(stderr, "mlsys-lab: refused an event connection from %s: %s\n",
                c->conns[i].peer, why);
    else if (c->refused == REFUSALS_SAID)
        fprintf(stderr, "mlsys-lab: refusing more event connections; only their number will "
                "be said\n");
    c->refused++;
    conn_drop(c, i);
}

static void accept_all(collector *c)
{
    for (;;) {
        struct sockaddr_storage ss;
        socklen_t sl = sizeof ss;
        int fd = accept4(c->lfd, (struct sockaddr *)&ss, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0)
            return;
        conn k = {.fd = fd, .state = CONN_HELLO, .rank = -1, .opened_ns = mlsys_now_ns()};
        char ip[INET6_ADDRSTRLEN] = "?";
        int port = 0;
        if (ss.ss_family == AF_INET6) {
            inet_ntop(AF_INET6, &((struct sockaddr_in6 *)&ss)->sin6_addr, ip, sizeof ip);
            port = ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
            snprintf(k.peer, sizeof k.peer, "[%s]:%d", ip, port);
        } else {
            inet_ntop(AF_INET, &((struct sockaddr_in *)&ss)->sin_addr, ip, sizeof ip);
            port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
            snprintf(k.peer, sizeof k.peer, "%s:%d", ip, port);
        }
        c->conns = realloc(c->conns, ((size_t)c->nconns + 1) * sizeof *c->conns);
        if (!c->conns) {
            fprintf(stderr, "mlsys-lab: out of memory in the event collector\n");
            exit(70);
        }
        c->conns[c->nconns++] = k;
        int pending = 0;
        for (int i = 0; i < c->nconns; i++)
            pending += c->conns[i].state == CONN_HELLO;
        if (pending > MAX_PENDING)
            refuse(c, c->nconns - 1, "too many connections waiting for their hello");
    }
}

static int token_equal(const char *a, const char *b)
{
    unsigned char d = 0;
    for (int i = 0; i < NET_EV_TOKEN_LEN; i++)
        d |= (unsigned char)(a[i] ^ b[i]);
    return d == 0;
}

/* A complete hello is in the buffer: accept the stream or refuse it. 0 = accepted. */
static int take_hello(collector *c, int i)
{
    conn *k = &c->conns[i];
    net_ev_hello h;
    memcpy(&h, k->buf, sizeof h);
    char why[96];
    if (memcmp(h.magic, NET_EV_MAGIC, sizeof h.magic) != 0) {
        refuse(c, i, "not an mlsys event stream");
        return -1;
    }
    if (h.version != NET_EV_VERSION) {
        refuse(c, i, "another protocol version or byte order");
        return -1;
    }
    if (!token_equal(h.token, c->token)) {
        refuse(c, i, "wrong token");
        return -1;
    }
    if (h.rank < 0 || h.rank >= c->world || h.size != c->world) {
        snprintf(why, sizeof why, "rank %d of %d does not belong to this job of %d ranks",
                 h.rank, h.size, c->world);
        refuse(c, i, why);
        return -1;
    }
    if (c->connected[h.rank]) {
        snprintf(why, sizeof why, "rank %d is already connected", h.rank);
        refuse(c, i, why);
        return -1;
    }
    char ack = NET_EV_ACK;
    if (send(k->fd, &ack, 1, MSG_NOSIGNAL) != 1) {
        refuse(c, i, "cannot answer the hello");
        return -1;
    }
    h.boot_id[sizeof h.boot_id - 1] = 0;
    k->offset_ns = c->boot_id[0] && !strcmp(h.boot_id, c->boot_id)
                   ? 0 : (int64_t)(mlsys_now_ns() - h.mono_ns);
    k->rank = h.rank;
    k->state = CONN_ACTIVE;
    c->connected[h.rank] = 1;
    if (c->verbose)
        fprintf(stderr, "mlsys-lab: events: rank %d (pid %d) connected from %s%s\n", h.rank,
                h.pid, k->peer, k->offset_ns ? ", another host: its clock is shifted onto ours"
                : "");
    return 0;
}

static void consume(conn *k, size_t n)
{
    memmove(k->buf, k->buf + n, k->len - n);
    k->len -= n;
}

/* Handle every complete message in conn i's buffer. 0 = keep the connection, -1 = gone. */
static int parse(collector *c, int i, const mlsys_job_sink *sink)
{
    for (;;) {
        conn *k = &c->conns[i];
        if (k->state == CONN_HELLO) {
            if (k->len < sizeof(net_ev_hello))
                return 0;
            if (take_hello(c, i) != 0)
                return -1;
            consume(&c->conns[i], sizeof(net_ev_hello));
            continue;
        }
        if (k->len < sizeof(net_ev_frame))
            return 0;
        net_ev_frame fr;
        memcpy(&fr, k->buf, sizeof fr);
        if (fr.type == NET_EV_BYE) {
            if (k->len < sizeof fr + sizeof(net_ev_bye))
                return 0;
            net_ev_bye bye;
            memcpy(&bye, k->buf + sizeof fr, sizeof bye);
            c->lost += bye.lost;
            c->said_bye[k->rank] = 1;
            conn_drop(c, i);          /* closing tells the rank its bye arrived */
            return -1;
        }
        if (fr.type != NET_EV_EVENTS || fr.count > NET_EV_MAX_BATCH) {
            fprintf(stderr, "mlsys-lab: event stream of rank %d (%s): bad frame (type %u, %u "
                    "events); closing it\n", k->rank, k->peer, fr.type, fr.count);
            conn_drop(c, i);
            return -1;
        }
        size_t need = sizeof fr + (size_t)fr.count * sizeof(mlsys_event);
        if (k->len < need)
            return 0;
        memcpy(c->out, k->buf + sizeof fr, (size_t)fr.count * sizeof(mlsys_event));
        for (uint32_t e = 0; e < fr.count; e++) {
            c->out[e].t_ns = (uint64_t)((int64_t)c->out[e].t_ns + k->offset_ns);
            c->out[e].rank = k->rank;
        }
        c->events += fr.count;
        if (sink && sink->events && fr.count)
            sink->events(sink->u, c->out, fr.count);
        consume(k, need);
    }
}

/* Read what conn i has. 0 = keep, -1 = gone. */
static int read_conn(collector *c, int i, const mlsys_job_sink *sink)
{
    for (;;) {
        conn *k = &c->conns[i];
        if (k->cap - k->len < 65536) {
            k->cap = k->cap ? k->cap * 2 : 131072;
            k->buf = realloc(k->buf, k->cap);
            if (!k->buf) {
                fprintf(stderr, "mlsys-lab: out of memory in the event collector\n");
                exit(70);
            }
        }
        ssize_t got = recv(k->fd, k->buf + k->len, k->cap - k->len, 0);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return 0;
        if (got <= 0) {
            if (k->state == CONN_HELLO)
                refuse(c, i, "closed before its hello");
            else
                conn_drop(c, i);      /* no bye: collector_incomplete names the rank */
            return -1;
        }
        k->len += (size_t)got;
        if (parse(c, i, sink) != 0)
            return -1;
    }
}

void collector_pump(collector *c, const mlsys_job_sink *sink)
{
    accept_all(c);
    uint64_t now = mlsys_now_ns();
    for (int i = 0; i < c->nconns;) {
        if (c->conns[i].state == CONN_HELLO && now - c->conns[i].opened_ns > HELLO_TIMEOUT_NS) {
            refuse(c, i, "no hello within 5 s");
            continue;
        }
        if (read_conn(c, i, sink) == 0)
            i++;
    }
}

void collector_finish(collector *c, const mlsys_job_sink *sink, int ms)
{
    uint64_t end = mlsys_now_ns() + (uint64_t)ms * 1000000ull;
    struct pollfd p[POLL_MAX];
    for (;;) {
        collector_pump(c, sink);
        int active = 0;
        for (int i = 0; i < c->nconns; i++)
            active += c->conns[i].state == CONN_ACTIVE;
        if (!active || mlsys_now_ns() > end)
            return;
        int np = collector_pollfds(c, p, POLL_MAX);
        poll(p, (nfds_t)np, 20);
    }
}

int collector_incomplete(const collector *c, char *buf, size_t n)
{
    int k = 0;
    size_t len = 0;
    buf[0] = 0;
    for (int r = 0; r < c->world; r++)
        if (!c->said_bye[r]) {
            if (len < n)
                len += (size_t)snprintf(buf + len, n - len, "%s%d", k ? ", " : "", r);
            k++;
        }
    return k;
}

void collector_close(collector *c)
{
    if (!c)
        return;
    if (c->refused > REFUSALS_SAID)
        fprintf(stderr, "mlsys-lab: refused %d event connections in all (%d more than said)\n",
                c->refused, c->refused - REFUSALS_SAID);
    while (c->nconns)
        conn_drop(c, 0);
    close(c->lfd);
    free(c->conns);
    free(c->connected);
    free(c->said_bye);
    free(c->out);
    free(c);
}
