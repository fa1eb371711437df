/* srv_internal.h - what the files of the server room share: a parsed request (req_parse.c),
 * a job, the channel between the HTTP thread and the engine thread (job.c), the
 * engine loop (loop.c: every request, plain, JSON-mode or speculative, goes to the one
 * engine), the response writers (resp.c), the metrics text (metrics.c) and the HTTP glue
 * (mhd.c). */
#ifndef MLSYS_SERVE_INTERNAL_H
#define MLSYS_SERVE_INTERNAL_H

#include "http.h"

#include <pthread.h>
#include <stdint.h>

/* ---- req_parse.c: an OpenAI request body into a request ---- */
typedef enum { SRV_COMPLETION, SRV_CHAT } srv_kind;
typedef struct srv_req {
    srv_kind kind;
    char *prompt;                 /* the text to continue (chat: the messages, one a line) */
    int max_tokens;               /* -1 when not given */
    double temperature, top_p;
    int top_k;
    int has_seed;
    uint64_t seed;
    int n_stop;
    char stop[LLM_MAX_STOP][LLM_MAX_STOP_LEN + 1];
    int stream, include_usage, json_mode, ignore_eos;
    int n;                        /* choices, 1..SRV_MAX_N */
} srv_req;
#define SRV_MAX_N 8               /* OpenAI's n: samples of one prompt per request */
/* 0, or the HTTP status (400 bad JSON, types or values; 404 unknown model) with the message
 * in err and the offending field in param (may be ""). r is filled only on 0 (free it with
 * srv_req_free); nothing stays allocated otherwise. */
int srv_req_parse(const char *body, size_t n, srv_kind kind, const char *model_name,
                  srv_req *r, char *err, size_t errlen, char *param, size_t paramlen);
void srv_req_free(srv_req *r);

/* ---- job.c: one request in flight ----
 * Two owners: the HTTP side (until its response is gone) and the engine side (until the
 * final event of its last choice); the last one to let go frees it.
 * The HTTP side does not wait on a thread of its own: while its answer has nothing new to
 * send, its connection is parked (set aside by the HTTP library, parked = 1), and whoever
 * finds that it has something again (the engine thread, the end, a hang-up) unparks it
 * through resume(resume_u). Parked moves from nonzero to 0 under mu, once: the one who
 * moves it calls resume, so a connection is resumed once per parking and never after its
 * end. */
typedef struct srv_choice {       /* one of the request's n samples */
    char *text;                   /* its output (valid UTF-8: the engine holds back the rest) */
    size_t len, cap;
    int n_out, done;
    llm_finish finish;
} srv_choice;
typedef struct srv_job {
    pthread_mutex_t mu;
    int refs;
    srv_req req;
    int *prompt, n_prompt, max_tokens;
    uint64_t seed;
    long serial;                  /* the server's request number (the response id) */
    long created;                 /* unix seconds when it arrived: its responses' "created" */
    /* output, appended by the engine thread */
    int n;                        /* choices (req.n) */
    srv_choice ch[SRV_MAX_N];
    size_t progress;              /* tokens and ends over every choice: grows with every
                                     event a streamed answer may show */
    size_t wake_at;               /* the progress its parked stream wants: the engine
                                     unparks it no sooner (a whole answer: at the end) */
    int n_out, done;              /* tokens over every choice; every choice has ended */
    llm_finish finish;            /* the job's end: an error if a choice failed, else the
                                     first choice's */
    int cancel;                   /* the HTTP side gave up (client gone, shutdown) */
    int failed;                   /* the engine refused it: err */
    char err[256];
    /* times (mlsys_now_s): received in full, handed to the engine, first token, final */
    double t_recv, t_submit, t_first, t_final;
    int n_cached;
    /* the HTTP side's connection (under mu) */
    int parked;                   /* 0 running; 1 parked; 2 parked, its unparking queued */
    int hangup;                   /* its client left or the server closes: answer no more */
    void (*resume)(void *u);      /* unparks the connection (set before the first park) */
    void *resume_u;
    /* engine side */
    int engine_id;                /* -1 until submitted */
    int cancel_sent;
    int ended;                    /* choices that got their final event */
    void *loop;                   /* the srv_loop it was handed to */
    struct srv_job *qnext;        /* the submission queue */
    struct srv_job *anext, *aprev;   /* the engine thread's list of jobs in flight */
    struct srv_job *wnext;        /* the engine thread's list of jobs to unpark after a step */
} srv_job;
srv_job *srv_job_new(srv_req *req, int *prompt, int n_prompt, long serial);  /* takes both */
void srv_job_unref(srv_job *j);
/* The engine side delivers output of choice index (text may be NULL); finish != NONE ends
 * that choice, and the job with its last one. Returns 1 when the job's connection is parked
 * and now has what it waits for (a stream: its next event; a whole answer: the end): its
 * parked is 2 and the caller unparks it later with srv_job_unpark (one wake of the HTTP
 * thread for a whole step's events, not one per token per request). */
int srv_job_deliver(srv_job *j, int index, const char *text, int len, int n_out,
                    llm_finish finish, int n_cached);
/* Every choice ends with finish (a cancel before the engine ran it, a drain); a parked
 * connection is unparked. */
void srv_job_end(srv_job *j, llm_finish finish);
void srv_job_fail(srv_job *j, const char *err);
/* Unparks j's connection if it is still parked (queued or not); with hangup, its answer
 * stops too (the client left, or the server closes). */
void srv_job_unpark(srv_job *j, int hangup);

/* ---- loop.c: the engine thread ---- */
typedef struct srv_loop srv_loop;
srv_loop *srv_loop_start(const llm_config *c, const llm_weights *w, const llm_tokenizer *t,
                         const srv_opts *o, char *err, size_t errlen);
/* Hand j over (the loop takes a reference of its own). */
void srv_loop_submit(srv_loop *l, srv_job *j);
/* The client is gone: the request stops and its blocks go back at the next step. */
void srv_loop_cancel(srv_loop *l, srv_job *j);
int srv_loop_in_flight(srv_loop *l);            /* jobs handed over and not finished */
void srv_loop_cancel_all(srv_loop *l);
void srv_loop_stop(srv_loop *l);                /* ends the thread, frees the engine */
void srv_loop_metrics(srv_loop *l, llm_engine_metrics *m);

/* ---- resp.c: response bodies (malloc'd NUL-ended text) ---- */
/* {"error": {"message", "type", "param", "code"}} for an HTTP status */
char *srv_resp_error(int status, const char *msg, const char *param);
/* The whole response of a finished job: its choices in index order. */
char *srv_resp_full(const srv_job *j, const char *model, long created);
/* One server-sent event of choice index: "data: {chunk}\n\n" with text (first: the chat role
 * comes too), or with final its last chunk with finish_reason (final 2: the stream's last;
 * then, when include_usage asked for it, a chunk with "choices": [] and the usage). */
char *srv_resp_chunk(const srv_job *j, int index, const char *model, long created,
                     const char *text, size_t len, int first, int final);
char *srv_resp_models(const char *model, long created);
const char *srv_finish_reason(llm_finish f);

/* ---- metrics.c: GET /metrics ---- */
typedef struct srv_http_counters {
    long requests[6];             /* by status class: 2xx, 400, 401, 404, 413, other */
    long disconnects;             /* clients gone before their request finished */
    long cut_slow;                /* connections cut: no whole request in request_timeout_s */
    long overhead_count;
    double overhead_sum;          /* server time beyond the engine, non-streamed requests */
} srv_http_counters;
/* Prometheus text format (malloc'd). */
char *srv_metrics_text(const llm_engine_metrics *m, const srv_http_counters *h, int draining);

/* ---- server.c / mhd.c: the server ---- */
struct srv_server {
    const llm_config *c;
    const llm_tokenizer *t;
    srv_opts o;
    char model_name[128];
    char *api_key;                /* the whole key (NULL: none) */
    size_t api_key_len;
    srv_loop *loop;
    void *daemon;                 /* struct MHD_Daemon */
    void *guard;                  /* mhd.c: the connections' request deadlines */
    int listen_fd, port;
    volatile int draining;
    long created;                 /* unix seconds at start: /v1/models */
    pthread_mutex_t mu;           /* counters and serial */
    long serial;
    int open_jobs;                /* jobs made whose response is not finished (under mu) */
    int closing;                  /* the daemon stops: no connection parks any more (read
                                     under the job's mu, after srv_http_stop set it) */
    srv_http_counters http;
};
int srv_http_start(srv_server *s, char *err, size_t errlen);
void srv_http_stop(srv_server *s);
/* A request body at the end: parse, tokenize, validate. 0 and *job, or an HTTP status with
 * the error body in *body. */
int srv_make_job(srv_server *s, srv_kind kind, const char *data, size_t n, srv_job **job,
                 char **body);
void srv_count(srv_server *s, int status);
/* 1 when the Authorization header value h carries the server's key: the scheme "Bearer" in
 * any case, blanks, then the key compared in a time that does not depend on where a wrong
 * key first differs. 1 as well when the server has no key. */
int srv_key_ok(const srv_server *s, const char *h);

#endif
