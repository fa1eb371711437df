/* server.c - the server's life: start (engine thread, then the HTTP daemon), turning a
 * request body into a job (parse, tokenize, check the context), counting responses, the
 * drain on shutdown (503 for newcomers, a bound for those in flight) and the signal wait. */
#include "srv_internal.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

int srv_available(char *err, size_t errlen)
{
#if defined(HAVE_MHD) && defined(HAVE_CJSON)
    (void)err;
    (void)errlen;
    return 1;
#elif defined(HAVE_CJSON)
    snprintf(err, errlen, "this build has no HTTP server: it was built without libmicrohttpd "
             "(apt-get install libmicrohttpd-dev, then make)");
    return 0;
#else
    snprintf(err, errlen, "this build has no HTTP server: it was built without cJSON "
             "(apt-get install libcjson-dev, then make)");
    return 0;
#endif
}

/* A key a client can send whole in a header: 1 to SRV_MAX_KEY bytes, each visible ASCII
 * (a blank at either end would be trimmed off the header, a control byte refused). */
static int key_valid(const char *key, char *err, size_t errlen)
{
    size_t n = strlen(key);
    if (n == 0 || n > SRV_MAX_KEY) {
        snprintf(err, errlen, "the API key has %zu bytes; it must have 1 to %d", n,
                 SRV_MAX_KEY);
        return 0;
    }
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)key[i] < 0x21 || (unsigned char)key[i] > 0x7e) {
            snprintf(err, errlen, "the API key's byte %zu is 0x%02x; a key is visible ASCII "
                     "(no blanks, no control bytes)", i + 1, (unsigned char)key[i]);
            return 0;
        }
    return 1;
}

int srv_key_ok(const srv_server *s, const char *h)
{
    if (!s->api_key)
        return 1;
    if (!h || strncasecmp(h, "bearer", 6) || (h[6] != ' ' && h[6] != '\t'))
        return 0;
    h += 7;
    while (*h == ' ' || *h == '\t')
        h++;
    /* every byte of the key is looked at whatever the header holds: the time tells a
     * client the length it sent, not how much of the key it got right */
    size_t n = strlen(h);
    unsigned char diff = n != s->api_key_len;
    for (size_t i = 0; i < s->api_key_len; i++)
        diff |= (unsigned char)s->api_key[i] ^ (unsigned char)(i < n ? h[i] : 0);
    return diff == 0;
}

srv_server *srv_start(const llm_config *c, const llm_weights *w, const llm_tokenizer *t,
                      const srv_opts *o, char *err, size_t errlen)
{
    if (!srv_available(err, errlen))
        return NULL;
    if (o->api_key && !key_valid(o->api_key, err, errlen))
        return NULL;
    srv_server *s = mlsys_xcalloc(1, sizeof *s);
    s->c = c;
    s->t = t;
    s->o = *o;
    snprintf(s->model_name, sizeof s->model_name, "%s",
             o->model_name && *o->model_name ? o->model_name : "mlsys-lab");
    if (o->api_key) {
        s->api_key = mlsys_xstrdup(o->api_key);
        s->api_key_len = strlen(o->api_key);
    }
    s->o.api_key = s->api_key;
    if (s->o.max_body == 0)
        s->o.max_body = 1u << 20;
    if (s->o.max_connections <= 0)
        s->o.max_connections = 512;
    if (s->o.stream_interval <= 0)
        s->o.stream_interval = 1;
    if (s->o.max_connections_per_ip <= 0)
        s->o.max_connections_per_ip = s->o.max_connections > 1 ? s->o.max_connections / 2 : 1;
    if (s->o.request_timeout_s <= 0)
        s->o.request_timeout_s = 10;
    if (s->o.idle_timeout_s <= 0)
        s->o.idle_timeout_s = 10;
    s->listen_fd = -1;
    s->created = (long)time(NULL);
    pthread_mutex_init(&s->mu, NULL);
    s->loop = srv_loop_start(c, w, t, &s->o, err, errlen);
    if (!s->loop) {
        pthread_mutex_destroy(&s->mu);
        free(s->api_key);
        free(s);
        return NULL;
    }
    if (srv_http_start(s, err, errlen) != 0) {
        srv_loop_stop(s->loop);
        pthread_mutex_destroy(&s->mu);
        free(s->api_key);
        free(s);
        return NULL;
    }
    return s;
}

int srv_port(const srv_server *s)
{
    return s->port;
}

void srv_count(srv_server *s, int status)
{
    int k = status < 300 ? 0 : status == 400 ? 1 : status == 401 ? 2 : status == 404 ? 3
          : status == 413 ? 4 : 5;
    pthread_mutex_lock(&s->mu);
    s->http.requests[k]++;
    pthread_mutex_unlock(&s->mu);
}

static int err_body(char **body, int status, const char *msg, const char *param)
{
    *body = srv_resp_error(status, msg, param);
    return status;
}

int srv_make_job(srv_server *s, srv_kind kind, const char *data, size_t n, srv_job **job,
                 char **body)
{
    char err[512], param[64];
    srv_req r;
    *job = NULL;
    int rc = srv_req_parse(data ? data : "", n, kind, s->model_name, &r, err, sizeof err,
                           param, sizeof param);
    if (rc)
        return err_body(body, rc, err, param);
    size_t len = strlen(r.prompt);
    int *ids = mlsys_xmalloc((len + 3) * sizeof(int));
    int np = (int)llm_bpe_encode_prompt(s->t, r.prompt, len, 1, ids);
    if (np > s->c->seq_len) {
        snprintf(err, sizeof err, "This model's maximum context length is %d tokens; your "
                 "prompt has %d tokens (BOS included)", s->c->seq_len, np);
        free(ids);
        srv_req_free(&r);
        return err_body(body, 400, err, kind == SRV_CHAT ? "messages" : "prompt");
    }
    int room = s->c->seq_len - np + 1;   /* new tokens the context leaves */
    int max_tokens = r.max_tokens > 0 ? r.max_tokens : kind == SRV_CHAT ? room : 16;
    uint64_t seed = r.seed;
    pthread_mutex_lock(&s->mu);
    long serial = ++s->serial;
    s->open_jobs++;               /* until its response is done (mhd.c's on_completed) */
    pthread_mutex_unlock(&s->mu);
    if (!r.has_seed)
        seed = mlsys_now_ns() ^ ((uint64_t)serial * 0x9e3779b97f4a7c15ull);
    srv_job *j = srv_job_new(&r, ids, np, serial);
    j->created = (long)time(NULL);
    j->max_tokens = max_tokens;
    j->seed = seed;
    *job = j;
    return 0;
}

static int open_jobs(srv_server *s)
{
    pthread_mutex_lock(&s->mu);
    int n = s->open_jobs;
    pthread_mutex_unlock(&s->mu);
    return n;
}

int srv_drain(srv_server *s, double drain_s)
{
    s->draining = 1;
    double t0 = mlsys_now_s();
    /* the engine done with them, and their responses written out */
    while ((srv_loop_in_flight(s->loop) > 0 || open_jobs(s) > 0) && mlsys_now_s() - t0 < drain_s)
        usleep(10000);
    int left = srv_loop_in_flight(s->loop);
    if (left > 0) {
        srv_loop_cancel_all(s->loop);
        double t1 = mlsys_now_s();
        while (srv_loop_in_flight(s->loop) > 0 && mlsys_now_s() - t1 < 5.0)
            usleep(10000);
    }
    return left;
}

void srv_stop(srv_server *s)
{
    if (!s)
        return;
    s->draining = 1;
    srv_http_stop(s);
    srv_loop_stop(s->loop);
    pthread_mutex_destroy(&s->mu);
    free(s->api_key);
    free(s);
}

static volatile sig_atomic_t g_signal;

static void on_signal(int sig)
{
    g_signal = sig;
}

int srv_run_until_signal(srv_server *s, double drain_s)
{
    struct sigaction sa, old_int, old_term, old_usr1;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGTERM, &sa, &old_term);
    sigaction(SIGUSR1, &sa, &old_usr1);     /* the launcher's stop of a job on several ranks */
    signal(SIGPIPE, SIG_IGN);
    while (!g_signal)
        usleep(20000);
    int sig = g_signal;
    srv_drain(s, drain_s);
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGTERM, &old_term, NULL);
    sigaction(SIGUSR1, &old_usr1, NULL);
    return sig;
}
