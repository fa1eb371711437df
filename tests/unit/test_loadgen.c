/* test_loadgen.c - `mlsys-lab loadgen` against a fake server on a loopback port that answers
 * every request with the same canned bytes: broken answers (a JSON body cut short, a body
 * shorter than its Content-Length, no usage, a stream with no events, without [DONE], with an
 * error event, an HTTP error) are failures that say why, and only whole answers succeed; a
 * URL's path is honoured (a prefix before /v1) or refused; each bad flag is named alone;
 * --disconnect 1 says what it did. */
#include <check.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include "../../lab/cli/cli.h"
#include "run_bin.h"

/* ---- the fake server ---- */
static const char *g_reply;       /* what every connection gets, then the close */
static char g_path[256];          /* the path of the last request */
static int g_lfd, g_port, g_stop;
static pthread_t g_th;

static void *serve_main(void *u)
{
    (void)u;
    while (!__atomic_load_n(&g_stop, __ATOMIC_ACQUIRE)) {
        struct pollfd p = {.fd = g_lfd, .events = POLLIN};
        if (poll(&p, 1, 50) <= 0)
            continue;
        int fd = accept(g_lfd, NULL, NULL);
        if (fd < 0)
            continue;
        char req[8192];
        size_t n = 0;
        char *end = NULL;
        while (n < sizeof req - 1 && !end) {   /* the head, then the body it announces */
            ssize_t k = recv(fd, req + n, sizeof req - 1 - n, 0);
            if (k <= 0)
                break;
            n += (size_t)k;
            req[n] = 0;
            end = strstr(req, "\r\n\r\n");
        }
        if (end) {
            const char *cl = strstr(req, "Content-Length: ");
            size_t want = (size_t)(end + 4 - req) + (cl ? strtoul(cl + 16, NULL, 10) : 0);
            while (n < want && n < sizeof req - 1) {
                ssize_t k = recv(fd, req + n, sizeof req - 1 - n, 0);
                if (k <= 0)
                    break;
                n += (size_t)k;
            }
            sscanf(req, "POST %255s", g_path);
            if (send(fd, g_reply, strlen(g_reply), MSG_NOSIGNAL) < 0)
                perror("fake server: send");
        }
        close(fd);
    }
    return NULL;
}

static void serve(const char *reply)
{
    g_reply = reply;
    g_stop = 0;
    g_lfd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t l = sizeof a;
    ck_assert(bind(g_lfd, (struct sockaddr *)&a, sizeof a) == 0 && listen(g_lfd, 64) == 0);
    getsockname(g_lfd, (struct sockaddr *)&a, &l);
    g_port = ntohs(a.sin_port);
    ck_assert(pthread_create(&g_th, NULL, serve_main, NULL) == 0);
}

static void unserve(void)
{
    __atomic_store_n(&g_stop, 1, __ATOMIC_RELEASE);
    pthread_join(g_th, NULL);
    close(g_lfd);
}

/* ---- loadgen in this process, its stdout and stderr captured ---- */
typedef struct lg_out {
    int rc;
    char *out, *err;
} lg_out;

static lg_out loadgen(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static lg_out loadgen(const char *fmt, ...)
{
    char line[1024], *argv[40], *save = NULL;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    int argc = 0;
    argv[argc++] = "loadgen";
    for (char *t = strtok_r(line, " ", &save); t && argc < 39; t = strtok_r(NULL, " ", &save))
        argv[argc++] = t;
    argv[argc] = NULL;
    char op[] = "/tmp/mlsys-lg-out-XXXXXX", ep[] = "/tmp/mlsys-lg-err-XXXXXX";
    int ofd = mkstemp(op), efd = mkstemp(ep);
    ck_assert(ofd >= 0 && efd >= 0);
    fflush(NULL);
    int o1 = dup(1), o2 = dup(2);
    dup2(ofd, 1);
    dup2(efd, 2);
    lg_out r;
    r.rc = loadgen_main(argc, argv);
    fflush(NULL);
    dup2(o1, 1);
    dup2(o2, 2);
    close(o1);
    close(o2);
    r.out = slurp_fd(ofd);
    r.err = slurp_fd(efd);
    close(ofd);
    close(efd);
    unlink(op);
    unlink(ep);
    return r;
}

static void lg_free(lg_out *r)
{
    free(r->out);
    free(r->err);
}

/* The number after a report's label ("Successful requests:"), -1 when absent. */
static long field(const char *out, const char *label)
{
    const char *p = strstr(out, label);
    return p ? atol(p + strlen(label)) : -1;
}

/* Two requests against reply: both fail (exit 1), stderr says "2 requests failed: why". */
static void both_fail(const char *reply, const char *extra, const char *why)
{
    serve(reply);
    lg_out r = loadgen("--url http://127.0.0.1:%d --requests 2 --concurrency 1 --timeout 20 %s",
                       g_port, extra);
    unserve();
    ck_assert_msg(r.rc == 1, "exit %d, stderr: %s", r.rc, r.err);
    ck_assert_msg(field(r.out, "Successful requests:") == 0, "%s", r.out);
    ck_assert_msg(strstr(r.err, "2 requests failed: ") && strstr(r.err, why),
                  "wanted '%s' in: %s", why, r.err);
    lg_free(&r);
}

static void both_succeed(const char *reply, const char *extra)
{
    serve(reply);
    lg_out r = loadgen("--url http://127.0.0.1:%d --requests 2 --concurrency 1 --timeout 20 %s",
                       g_port, extra);
    unserve();
    ck_assert_msg(r.rc == 0, "exit %d, stderr: %s", r.rc, r.err);
    ck_assert_msg(field(r.out, "Successful requests:") == 2 &&
                  field(r.out, "Total generated tokens:") == 6, "%s", r.out);
    ck_assert_str_eq(r.err, "");
    lg_free(&r);
}

#define OK_BODY "{\"id\":\"cmpl-1\",\"object\":\"text_completion\",\"choices\":[{\"index\":0," \
                "\"text\":\" there\",\"finish_reason\":\"length\"}],\"usage\":{" \
                "\"prompt_tokens\":4,\"completion_tokens\":3,\"total_tokens\":7}}"
#define SSE_HEAD "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n"
#define EV(text) "data: {\"object\":\"text_completion\",\"choices\":[{\"index\":0,\"text\":\"" \
                 text "\",\"finish_reason\":null}]}\n\n"
#define USAGE_EV "data: {\"object\":\"text_completion\",\"choices\":[],\"usage\":{" \
                 "\"prompt_tokens\":4,\"completion_tokens\":3,\"total_tokens\":7}}\n\n"
#define WHOLE_STREAM EV("") EV(" there") EV(" was") USAGE_EV "data: [DONE]\n\n"

static char g_buf[8192];

/* A response with status and body, its Content-Length `claimed` (-1: the body's own). */
static const char *plain(const char *status, const char *body, long claimed)
{
    snprintf(g_buf, sizeof g_buf, "HTTP/1.1 %s\r\nContent-Type: application/json\r\n"
             "Content-Length: %ld\r\n\r\n%s", status, claimed >= 0 ? claimed : (long)strlen(body),
             body);
    return g_buf;
}

/* A 200 with body in chunks of `piece` bytes, and the last chunk when `end`. */
static const char *chunked(const char *body, size_t piece, int end)
{
    size_t n = (size_t)snprintf(g_buf, sizeof g_buf, "HTTP/1.1 200 OK\r\nContent-Type: "
                                "text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n");
    for (size_t off = 0, len = strlen(body); off < len; off += piece) {
        size_t k = len - off < piece ? len - off : piece;
        n += (size_t)snprintf(g_buf + n, sizeof g_buf - n, "%zx\r\n%.*s\r\n", k, (int)k,
                              body + off);
    }
    if (end)
        snprintf(g_buf + n, sizeof g_buf - n, "0\r\n\r\n");
    return g_buf;
}

START_TEST(plain_answers)
{
    both_succeed(plain("200 OK", OK_BODY, -1), "");
    /* the JSON is cut short, though the length agrees with it */
    both_fail(plain("200 OK", "{\"choices\":[{\"text\":\"hi\"", -1), "",
              "not one complete JSON object");
    /* fewer bytes than the Content-Length, then the close */
    both_fail(plain("200 OK", OK_BODY, 400), "", "closed inside the body");
    /* whole, but no usage; no choices */
    both_fail(plain("200 OK", "{\"choices\":[{\"text\":\" there\"}]}", -1), "",
              "no usage.completion_tokens");
    both_fail(plain("200 OK", "{}", -1), "", "no choices[0] text");
    both_fail(plain("503 Service Unavailable", "{\"error\":{\"message\":\"the server is "
                    "shutting down\"}}", -1), "", "HTTP 503: the server is shutting down");
    both_fail("", "", "closed before a response");
}
END_TEST

START_TEST(stream_answers)
{
    both_succeed(SSE_HEAD WHOLE_STREAM, "--stream");
    /* chunked in pieces that cut events and lines anywhere: the same */
    both_succeed(chunked(WHOLE_STREAM, 7, 1), "--stream");
}
END_TEST

START_TEST(broken_streams_fail)
{
    both_fail(SSE_HEAD, "--stream", "the stream ended without an event");
    both_fail(SSE_HEAD "data: [DONE]\n\n", "--stream", "without an event (only [DONE])");
    both_fail(SSE_HEAD EV(" there") EV(" was") USAGE_EV, "--stream",
              "ended without [DONE] (after 3 events)");
    both_fail(SSE_HEAD EV(" there") "data: {\"error\":{\"message\":\"boom\"}}\n\n"
              "data: [DONE]\n\n", "--stream", "the stream carried an error: boom");
    both_fail(SSE_HEAD EV(" there") "data: {\"choices\":[{\"te\n\n" "data: [DONE]\n\n",
              "--stream", "an event is not a JSON object");
    both_fail(SSE_HEAD EV(" there") "data: [DONE]\n\n", "--stream", "the stream had no usage");
    both_fail(SSE_HEAD EV(" there") USAGE_EV "data: [DONE]\n\n" EV("x"), "--stream",
              "data after [DONE]");
    both_fail(chunked(WHOLE_STREAM, 7, 0), "--stream", "without its last chunk");
}
END_TEST

START_TEST(url_paths)
{
    serve(plain("200 OK", OK_BODY, -1));
    lg_out r = loadgen("--url http://127.0.0.1:%d/proxy/v1/ --requests 1", g_port);
    ck_assert_msg(r.rc == 0, "%s", r.err);
    ck_assert_str_eq(g_path, "/proxy/v1/completions");
    lg_free(&r);
    r = loadgen("--url http://127.0.0.1:%d --requests 1 --chat", g_port);
    ck_assert_str_eq(g_path, "/v1/chat/completions");
    lg_free(&r);
    static const char *bad[] = {"/foo", "/v10", "/v1x", "/v1/completions"};
    for (int i = 0; i < 4; i++) {
        r = loadgen("--url http://127.0.0.1:%d%s --requests 1", g_port, bad[i]);
        ck_assert_int_eq(r.rc, 2);
        ck_assert_msg(strstr(r.err, "--url ") && strstr(r.err, bad[i]) &&
                      strchr(r.err, '\n') == r.err + strlen(r.err) - 1, "%s", r.err);
        lg_free(&r);
    }
    unserve();
}
END_TEST

START_TEST(flag_errors_name_the_flag)
{
    lg_out r = loadgen("--url http://127.0.0.1:1 --disconnect 2");
    ck_assert_int_eq(r.rc, 2);
    ck_assert_msg(strstr(r.err, "--disconnect 2") && !strstr(r.err, "--temperature"), "%s",
                  r.err);
    lg_free(&r);
    r = loadgen("--url http://127.0.0.1:1 --temperature 3");
    ck_assert_int_eq(r.rc, 2);
    ck_assert_msg(strstr(r.err, "--temperature 3") && !strstr(r.err, "--disconnect"), "%s",
                  r.err);
    lg_free(&r);
    r = loadgen("--requests 3");
    ck_assert_int_eq(r.rc, 2);
    ck_assert_msg(strstr(r.err, "--url is required"), "%s", r.err);
    lg_free(&r);
}
END_TEST

START_TEST(disconnect_all_says_so)
{
    serve(plain("200 OK", OK_BODY, -1));
    lg_out r = loadgen("--url http://127.0.0.1:%d --requests 3 --disconnect 1", g_port);
    unserve();
    ck_assert_msg(r.rc == 0, "exit %d: %s", r.rc, r.err);
    ck_assert_msg(field(r.out, "Abandoned by the client (--disconnect):") == 3 &&
                  strstr(r.out, "Every request sent was abandoned by the client"), "%s", r.out);
    lg_free(&r);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("loadgen");
    TCase *tc = tcase_create("client");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, plain_answers);
    tcase_add_test(tc, stream_answers);
    tcase_add_test(tc, broken_streams_fail);
    tcase_add_test(tc, url_paths);
    tcase_add_test(tc, flag_errors_name_the_flag);
    tcase_add_test(tc, disconnect_all_says_so);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
