/* mhd_answer.c - a completion request at its end, on libmicrohttpd: the job made and handed
 * to the engine thread, then the answer whole or streamed as server-sent events (one event
 * per batch of new text, a final chunk, then [DONE]). One thread serves every connection:
 * an answer with nothing to send parks its connection (libmicrohttpd suspends it) and the
 * engine thread unparks it when the job has its next event or its end; mhd.c's guard
 * unparks those whose client left. */
#include "srv_internal.h"

#ifdef HAVE_MHD
#include "mhd.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Unparks a connection (job.c calls it under the job's lock, once per parking). */
static void resume_connection(void *u)
{
    MHD_resume_connection(u);
}

/* Parks cx's connection until its job's progress reaches wake_at (or it ends), under the
 * job's lock, from a libmicrohttpd callback of this connection (the only place where
 * libmicrohttpd lets it be suspended). The lock is held across the suspension, so whoever
 * unparks it resumes a connection that is suspended, never one about to be. 0 when the
 * server is closing (nothing parks any more: srv_http_stop unparked the rest). */
static int park(conn_ctx *cx, size_t wake_at)
{
    srv_job *j = cx->job;
    if (__atomic_load_n(&cx->s->closing, __ATOMIC_ACQUIRE))
        return 0;
    j->wake_at = wake_at;
    j->parked = 1;
    MHD_suspend_connection(cx->conn);
    return 1;
}

/* The answer moves: libmicrohttpd's idle clock starts again. It counts only the bytes it
 * moved itself, so a request the engine worked on for longer than the idle timeout (queued,
 * or a long answer) would otherwise be closed the moment its answer is ready. */
static void touch(conn_ctx *cx)
{
    /* a timeout set over none restarts the clock (libmicrohttpd's documented way) */
    MHD_set_connection_option(cx->conn, MHD_CONNECTION_OPTION_TIMEOUT, 0u);
    MHD_set_connection_option(cx->conn, MHD_CONNECTION_OPTION_TIMEOUT,
                              (unsigned)cx->s->o.idle_timeout_s);
}

enum MHD_Result srv_reply(struct MHD_Connection *c, conn_ctx *cx, int status,
                          const char *ctype, char *body)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(strlen(body), body,
                                                             MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", ctype);
    touch(cx);
    if (status == 401)
        MHD_add_response_header(r, "WWW-Authenticate", "Bearer");
    enum MHD_Result ret = MHD_queue_response(c, (unsigned)status, r);
    MHD_destroy_response(r);
    cx->status = status;
    srv_count(cx->s, status);
    return ret;
}

enum MHD_Result srv_reply_error(struct MHD_Connection *c, conn_ctx *cx, int status,
                                const char *msg, const char *param)
{
    return srv_reply(c, cx, status, "application/json", srv_resp_error(status, msg, param));
}

/* ---- a streamed completion: one event per batch of new text, then [DONE] ---- */

static void pend_set(conn_ctx *cx, char *ev)
{
    free(cx->pend);
    cx->pend = ev;
    cx->pend_n = strlen(ev);
    cx->pend_off = 0;
}

/* The next event of the stream in *out (1): per choice its opening, its new text (once it
 * has stream_interval new tokens, or at its end), its last chunk; once every choice is
 * closed, the end. 0: nothing is ready and the connection is parked until the job has more;
 * -1: nothing is ready and the stream stops (its client left, or the server closes). */
static int next_event(conn_ctx *cx, char **out)
{
    srv_job *j = cx->job;
    srv_server *s = cx->s;
    char *ev = NULL;
    pthread_mutex_lock(&j->mu);
    cx->seen = j->progress;
    int closed = 0;
    for (int i = 0; i < j->n && !ev; i++) {
        const srv_choice *c = &j->ch[i];
        if (!cx->opened[i]) {
            cx->opened[i] = 1;
            ev = srv_resp_chunk(j, i, s->model_name, j->created, NULL, 0, 1, 0);
        } else if (c->len > cx->sent[i] &&
                   (c->done || c->n_out - cx->sent_n[i] >= s->o.stream_interval)) {
            ev = srv_resp_chunk(j, i, s->model_name, j->created, c->text + cx->sent[i],
                                c->len - cx->sent[i], 0, 0);
            cx->sent[i] = c->len;
            cx->sent_n[i] = c->n_out;
        } else if (c->done && !cx->closed[i] && !j->failed) {
            cx->closed[i] = 1;
            int last = 1;
            for (int k = 0; k < j->n; k++)
                last &= cx->closed[k];
            ev = srv_resp_chunk(j, i, s->model_name, j->created, NULL, 0, 0, last ? 2 : 1);
        }
        closed += cx->closed[i];
    }
    if (!ev && j->done && (closed == j->n || j->failed)) {
        if (j->failed) {
            char *e = srv_resp_error(400, j->err, "");
            ev = mlsys_xmalloc(strlen(e) + 32);
            sprintf(ev, "data: %s\n\ndata: [DONE]\n\n", e);
            free(e);
        } else {
            ev = mlsys_xstrdup("data: [DONE]\n\n");
        }
        cx->final_sent = 1;
    }
    int rc = 1;
    if (!ev)
        rc = !j->hangup && park(cx, cx->seen + (size_t)s->o.stream_interval) ? 0 : -1;
    pthread_mutex_unlock(&j->mu);
    *out = ev;
    return rc;
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    conn_ctx *cx = cls;
    (void)pos;
    for (;;) {
        if (cx->pend && cx->pend_off < cx->pend_n) {
            size_t k = cx->pend_n - cx->pend_off;
            if (k > max)
                k = max;
            memcpy(buf, cx->pend + cx->pend_off, k);
            cx->pend_off += k;
            touch(cx);
            return (ssize_t)k;
        }
        if (cx->final_sent)
            return MHD_CONTENT_READER_END_OF_STREAM;
        char *ev;
        int rc = next_event(cx, &ev);
        if (rc < 0)
            return MHD_CONTENT_READER_END_WITH_ERROR;
        if (rc == 0)
            return 0;               /* parked: called again once unparked */
        pend_set(cx, ev);
    }
}

/* A whole answer: parked until its job ends, then written. MHD_YES while parked
 * (libmicrohttpd calls the access handler again once it is unparked); MHD_NO closes the
 * connection (on_completed cancels the job): its client left, or the server closes, before
 * the end. */
enum MHD_Result srv_completion_answer(struct MHD_Connection *c, conn_ctx *cx)
{
    srv_server *s = cx->s;
    srv_job *j = cx->job;
    pthread_mutex_lock(&j->mu);
    int done = j->done, gone = j->hangup, parked = 0;
    if (!done && !gone)
        parked = park(cx, (size_t)-1);
    pthread_mutex_unlock(&j->mu);
    if (parked)
        return MHD_YES;
    if (!done)
        return MHD_NO;
    if (j->failed)
        return srv_reply_error(c, cx, 400, j->err, "");
    if (j->finish == LLM_FINISH_ERROR)
        return srv_reply_error(c, cx, 500, "the engine failed on this request", "");
    /* its client is still here, so the server cut it (the drain ran out): no partial text
     * passed off as an answer */
    if (j->finish == LLM_FINISH_CANCEL)
        return srv_reply_error(c, cx, 503, "the server shut down before this request finished",
                               "");
    char *out = srv_resp_full(j, s->model_name, j->created);
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
    touch(cx);
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

/* ---- a completion request at its end ---- */
enum MHD_Result srv_completion(struct MHD_Connection *c, conn_ctx *cx, srv_kind kind)
{
    srv_server *s = cx->s;
    char *body = NULL;
    int rc = srv_make_job(s, kind, cx->body, cx->n, &cx->job, &body);
    if (rc)
        return srv_reply(c, cx, rc, "application/json", body);
    srv_job *j = cx->job;
    j->t_recv = cx->t_recv;
    j->resume = resume_connection;
    j->resume_u = c;
    srv_watch_job(cx);
    srv_loop_submit(s->loop, j);
    if (j->req.stream) {
        for (int i = 0; i < j->n; i++)         /* only a chat stream opens with the role */
            cx->opened[i] = kind != SRV_CHAT;
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
    return srv_completion_answer(c, cx);
}

#endif
