/* job.c - one request in flight between the HTTP thread and the engine thread: the output
 * text the engine appends, the final reason, the times, and the parking of its connection
 * (set aside while its answer has nothing to send, unparked when it has). Two references
 * (HTTP side, engine side); the last release frees it. */
#include "srv_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

srv_job *srv_job_new(srv_req *req, int *prompt, int n_prompt, long serial)
{
    srv_job *j = mlsys_xcalloc(1, sizeof *j);
    pthread_mutex_init(&j->mu, NULL);
    j->refs = 1;
    j->req = *req;
    memset(req, 0, sizeof *req);
    j->prompt = prompt;
    j->n_prompt = n_prompt;
    j->serial = serial;
    j->engine_id = -1;
    j->finish = LLM_FINISH_NONE;
    j->n = j->req.n >= 1 && j->req.n <= SRV_MAX_N ? j->req.n : 1;
    return j;
}

void srv_job_unref(srv_job *j)
{
    if (!j)
        return;
    pthread_mutex_lock(&j->mu);
    int left = --j->refs;
    pthread_mutex_unlock(&j->mu);
    if (left > 0)
        return;
    srv_req_free(&j->req);
    free(j->prompt);
    for (int i = 0; i < SRV_MAX_N; i++)
        free(j->ch[i].text);
    pthread_mutex_destroy(&j->mu);
    free(j);
}

/* Choice c ends with finish (under j->mu); the job ends with its last choice. */
static void end_choice(srv_job *j, srv_choice *c, llm_finish finish, double now)
{
    if (c->done)
        return;
    c->done = 1;
    j->progress++;
    c->finish = finish;
    if (finish == LLM_FINISH_ERROR || j->finish == LLM_FINISH_NONE)
        j->finish = finish;
    for (int i = 0; i < j->n; i++)
        if (!j->ch[i].done)
            return;
    j->done = 1;
    j->t_final = now;
}

/* A parked connection goes back to work (under j->mu): resume is called by the one who
 * moves parked to 0. */
static void unpark(srv_job *j)
{
    if (j->parked) {
        j->parked = 0;
        j->resume(j->resume_u);
    }
}

int srv_job_deliver(srv_job *j, int index, const char *text, int len, int n_out,
                    llm_finish finish, int n_cached)
{
    double now = mlsys_now_s();
    if (index < 0 || index >= j->n)
        return 0;
    pthread_mutex_lock(&j->mu);
    srv_choice *c = &j->ch[index];
    if (text && len > 0) {
        if (c->len + (size_t)len + 1 > c->cap) {
            size_t cap = (c->len + (size_t)len + 1) * 2;
            char *t = mlsys_xmalloc(cap);
            if (c->len)
                memcpy(t, c->text, c->len);
            free(c->text);
            c->text = t;
            c->cap = cap;
        }
        memcpy(c->text + c->len, text, (size_t)len);
        c->len += (size_t)len;
        c->text[c->len] = 0;
    }
    if (n_out > c->n_out) {
        if (j->n_out == 0)
            j->t_first = now;
        j->n_out += n_out - c->n_out;
        j->progress += (size_t)(n_out - c->n_out);
        c->n_out = n_out;
    }
    if (finish != LLM_FINISH_NONE) {
        if (index == 0)
            j->n_cached = n_cached;
        end_choice(j, c, finish, now);
    }
    /* the connection is unparked when it has what it waits for: a whole answer at the end,
     * a stream at its next event; the caller does it after the step */
    int wake = j->parked == 1 && (j->done || (j->req.stream && j->progress >= j->wake_at));
    if (wake)
        j->parked = 2;
    pthread_mutex_unlock(&j->mu);
    return wake;
}

void srv_job_end(srv_job *j, llm_finish finish)
{
    double now = mlsys_now_s();
    pthread_mutex_lock(&j->mu);
    for (int i = 0; i < j->n; i++)
        end_choice(j, &j->ch[i], finish, now);
    unpark(j);
    pthread_mutex_unlock(&j->mu);
}

void srv_job_fail(srv_job *j, const char *err)
{
    pthread_mutex_lock(&j->mu);
    j->failed = 1;
    snprintf(j->err, sizeof j->err, "%s", err);
    j->finish = LLM_FINISH_ERROR;
    j->done = 1;
    j->t_final = mlsys_now_s();
    unpark(j);
    pthread_mutex_unlock(&j->mu);
}

void srv_job_unpark(srv_job *j, int hangup)
{
    pthread_mutex_lock(&j->mu);
    if (hangup)
        j->hangup = 1;
    unpark(j);
    pthread_mutex_unlock(&j->mu);
}
