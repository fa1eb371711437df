/* loadgen_http.c - loadgen's HTTP/1.1 client on plain sockets: connect (TCP_NODELAY), send
 * one POST with "Connection: close", read the head (status, Transfer-Encoding, the server's
 * timing headers), then the body, undoing chunked transfer coding on the fly; a body cut
 * short (fewer bytes than its Content-Length, no last chunk) is an error. */
#include "loadgen_http.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

int lg_url_parse(const char *s, lg_url *u)
{
    memset(u, 0, sizeof *u);
    if (strncmp(s, "http://", 7))
        return -1;
    s += 7;
    size_t h = strcspn(s, ":/");
    if (h == 0 || h >= sizeof u->host)
        return -1;
    memcpy(u->host, s, h);
    s += h;
    u->port = 80;
    if (*s == ':') {
        char *end;
        long p = strtol(s + 1, &end, 10);
        if (end == s + 1 || p < 1 || p > 65535)
            return -1;
        u->port = (int)p;
        s = end;
    }
    if (*s && *s != '/')
        return -1;
    snprintf(u->path, sizeof u->path, "%s", s);
    size_t n = strlen(u->path);
    while (n > 0 && u->path[n - 1] == '/')
        u->path[--n] = 0;
    return 0;
}

static int connect_to(const lg_url *u, double timeout_s, char *err, size_t errlen)
{
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_STREAM;
    char ps[16];
    snprintf(ps, sizeof ps, "%d", u->port);
    int g = getaddrinfo(u->host, ps, &hints, &res);
    if (g) {
        snprintf(err, errlen, "%.200s: %s", u->host, gai_strerror(g));
        return -1;
    }
    int fd = socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
    struct timeval tv = {(time_t)timeout_s, (suseconds_t)((timeout_s - (time_t)timeout_s) * 1e6)};
    if (fd >= 0) {
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    }
    if (fd < 0 || connect(fd, res->ai_addr, res->ai_addrlen)) {
        snprintf(err, errlen, "connect to %.200s:%d: %s", u->host, u->port, strerror(errno));
        if (fd >= 0)
            close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    return fd;
}

static int send_all(int fd, const char *p, size_t n)
{
    while (n > 0) {
        ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
        if (k <= 0)
            return -1;
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

/* The chunked decoder's state between reads. */
typedef struct dechunk {
    int chunked;
    long left;                /* bytes left in the current chunk; -1: a size line is next */
    char line[64];
    size_t ll;
    int crlf;                 /* bytes of the CRLF after a chunk still to skip */
    int end;
} dechunk;

/* Feed raw body bytes; the decoded ones go to fn. Returns 1 when fn asked to stop. */
static int body_feed(dechunk *d, const char *p, size_t n, lg_body_fn fn, void *fu)
{
    if (!d->chunked)
        return n && fn ? fn(fu, p, n) : 0;
    while (n > 0 && !d->end) {
        if (d->crlf > 0) {
            d->crlf--;
            p++, n--;
        } else if (d->left < 0) {
            char c = *p++;
            n--;
            if (c == '\n') {
                d->line[d->ll] = 0;
                d->left = strtol(d->line, NULL, 16);
                d->ll = 0;
                if (d->left == 0)
                    d->end = 1;
            } else if (c != '\r' && d->ll + 1 < sizeof d->line) {
                d->line[d->ll++] = c;
            }
        } else {
            size_t k = n < (size_t)d->left ? n : (size_t)d->left;
            if (k && fn && fn(fu, p, k))
                return 1;
            p += k, n -= k;
            d->left -= (long)k;
            if (d->left == 0) {
                d->left = -1;
                d->crlf = 2;
            }
        }
    }
    return 0;
}

static double header_ms(const char *head, const char *name)
{
    const char *h = strcasestr(head, name);
    return h ? atof(h + strlen(name)) : -1.0;
}

int lg_post(const lg_url *u, const char *path, const char *key, const char *body,
            double timeout_s, lg_body_fn fn, void *fu, lg_response *r)
{
    memset(r, 0, sizeof *r);
    r->engine_ms = r->server_ms = -1;
    int fd = connect_to(u, timeout_s, r->err, sizeof r->err);
    if (fd < 0)
        return -1;
    size_t bl = strlen(body);
    char head[1024];
    int hl = snprintf(head, sizeof head, "POST %s HTTP/1.1\r\nHost: %s:%d\r\nContent-Type: "
                      "application/json\r\nContent-Length: %zu\r\nConnection: close\r\n"
                      "%s%s%s\r\n", path, u->host, u->port, bl, key ? "Authorization: Bearer " : "",
                      key ? key : "", key ? "\r\n" : "");
    if (send_all(fd, head, (size_t)hl) || send_all(fd, body, bl)) {
        snprintf(r->err, sizeof r->err, "send: %s", strerror(errno));
        close(fd);
        return -1;
    }
    if (fn && fn(fu, NULL, 0)) {        /* the caller walks away once it has sent */
        r->aborted = 1;
        close(fd);
        return 0;
    }
    char buf[16384], resp_head[8192];
    size_t have = 0;
    long long length = -1, got = 0;   /* Content-Length (-1: none), body bytes read */
    int in_body = 0, rc = 0;
    dechunk d = {.left = -1};
    for (;;) {
        ssize_t k = recv(fd, buf, sizeof buf, 0);
        if (k < 0) {
            snprintf(r->err, sizeof r->err, "recv: %s", strerror(errno));
            rc = -1;
            break;
        }
        if (k == 0)
            break;
        const char *p = buf;
        size_t n = (size_t)k;
        if (!in_body) {
            size_t take = n < sizeof resp_head - 1 - have ? n : sizeof resp_head - 1 - have;
            memcpy(resp_head + have, buf, take);
            have += take;
            resp_head[have] = 0;
            char *end = strstr(resp_head, "\r\n\r\n");
            if (!end) {
                if (have == sizeof resp_head - 1) {
                    snprintf(r->err, sizeof r->err, "response head too long");
                    rc = -1;
                    break;
                }
                continue;
            }
            size_t head_len = (size_t)(end - resp_head) + 4;
            *end = 0;
            in_body = 1;
            if (sscanf(resp_head, "HTTP/1.%*d %d", &r->status) != 1) {
                snprintf(r->err, sizeof r->err, "not an HTTP response");
                rc = -1;
                break;
            }
            d.chunked = strcasestr(resp_head, "Transfer-Encoding: chunked") != NULL;
            const char *cl = strcasestr(resp_head, "\r\nContent-Length:");
            if (cl && !d.chunked)
                length = strtoll(cl + 17, NULL, 10);
            r->engine_ms = header_ms(resp_head, "X-Mlsys-Engine-Ms:");
            r->server_ms = header_ms(resp_head, "X-Mlsys-Server-Ms:");
            /* the body bytes that came with the head */
            size_t before = have - take;          /* head bytes from earlier reads */
            p = buf + (head_len - before);
            n = (size_t)k - (head_len - before);
        }
        got += (long long)n;
        if (body_feed(&d, p, n, fn, fu)) {
            r->aborted = 1;
            break;
        }
        if (d.end || (length >= 0 && got >= length))
            break;
    }
    close(fd);
    if (!rc && !r->status && !r->aborted) {
        snprintf(r->err, sizeof r->err, "the connection closed before a response");
        rc = -1;
    } else if (!rc && !r->aborted && d.chunked && !d.end) {
        snprintf(r->err, sizeof r->err, "the connection closed inside the body (a chunked "
                 "body without its last chunk)");
        rc = -1;
    } else if (!rc && !r->aborted && length >= 0 && got < length) {
        snprintf(r->err, sizeof r->err, "the connection closed inside the body (%lld of its "
                 "%lld bytes)", got, length);
        rc = -1;
    }
    return rc;
}
