/* serve_model.c - the serve view's model: a serving engine's queue, batches and throughput
 * rebuilt from its REQUESTS moves and STEP records (see serve_model.h and core/llm/engine.h
 * for what each move's count and phase say), and each move in words with its unit (the
 * flow view's arrows). A request's tokens out come from the rows it
 * computed: once its positions reach its prompt, each step that computes its last row draws
 * one token (after a preemption it recomputes and catches up). */
#include "serve_model.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void svm_init(serve_model *m)
{
    memset(m, 0, sizeof *m);
    m->last.secs = NAN;
}

void svm_free(serve_model *m)
{
    free(m->r);
    svm_init(m);
}

int svm_wants(const mlsys_event *e)
{
    return e->kind == MLSYS_EV_FLOW &&
           (e->flow.what == MLSYS_FLOW_REQUESTS || e->flow.what == MLSYS_FLOW_STEP);
}

static svm_req *req_of(serve_model *m, int id)
{
    for (int i = m->nr - 1; i >= 0; i--)
        if (m->r[i].id == id)
            return &m->r[i];
    if (m->nr == m->cap) {
        m->cap = m->cap ? 2 * m->cap : 64;
        svm_req *p = realloc(m->r, (size_t)m->cap * sizeof *p);
        if (!p)
            abort();
        m->r = p;
    }
    svm_req *q = &m->r[m->nr++];
    memset(q, 0, sizeof *q);
    q->id = id;
    q->state = SVM_WAITING;
    q->step_in = q->step_done = -1;
    return q;
}

static void note(int *ids, int *n, int id)
{
    if (*n < SVM_BATCH)
        ids[(*n)++] = id;
}

/* A new step's records begin: the last step's batch and lists start afresh. */
static void open_step(serve_model *m, long step)
{
    if (m->last.step == step)
        return;
    m->last = (svm_step){.step = step, .secs = NAN};
    m->nbatch = m->nbatch_all = m->nadmitted = m->npreempted = m->nfinished = 0;
}

/* The batch in short: "P3:24 P5:8 D0,1,2" (prefills first, as the engine's compute span). */
static void short_batch(const serve_model *m, char *out, size_t n)
{
    size_t len = 0;
    out[0] = 0;
    for (int pass = 1; pass >= 0; pass--) {
        int k = 0;
        for (int i = 0; i < m->nbatch && len < n; i++) {
            const svm_item *it = &m->batch[i];
            if (it->prefill != pass)
                continue;
            len += (size_t)(pass ? snprintf(out + len, n - len, "%sP%d:%d", len ? " " : "",
                                            it->id, it->rows)
                                 : snprintf(out + len, n - len, "%s%d", k ? "," :
                                            len ? " D" : "D", it->id));
            k++;
        }
    }
    if (len >= n && n > 3)
        memcpy(out + n - 3, "..", 3);
}

static void step_record(serve_model *m, const mlsys_event *e)
{
    const mlsys_flow_info *f = &e->flow;
    open_step(m, f->version);
    svm_step *s = &m->last;
    s->rows = f->count;
    s->tokens = f->spare;
    s->secs = e->val[0];
    s->waiting = isfinite(e->val[1]) ? (int)e->val[1] : 0;
    s->running = isfinite(e->val[2]) ? (int)e->val[2] : 0;
    s->finished = isfinite(e->val[3]) ? (int)e->val[3] : 0;
    m->tokens_total += f->spare;
    m->rows_total += f->count;
    m->steps_total++;
    if (isfinite(s->secs) && s->secs > 0)
        m->secs_total += s->secs;
    short_batch(m, s->batch, sizeof s->batch);
    if (m->nhist == SVM_HIST) {
        memmove(m->hist, m->hist + 1, (SVM_HIST - 1) * sizeof m->hist[0]);
        m->nhist--;
    }
    m->hist[m->nhist++] = *s;
}

void svm_event(serve_model *m, const mlsys_event *e)
{
    if (!svm_wants(e))
        return;
    m->seen = 1;
    const mlsys_flow_info *f = &e->flow;
    if (f->what == MLSYS_FLOW_STEP) {
        step_record(m, e);
        return;
    }
    if (f->seq < 0)
        return;
    svm_req *q = req_of(m, f->seq);
    if (f->from == SVM_CLIENTS && f->to == SVM_QUEUE) {             /* submitted */
        q->prompt = f->count;
        q->state = SVM_WAITING;
    } else if (f->from == SVM_QUEUE && f->to == SVM_SCHED) {        /* admitted */
        open_step(m, f->version);
        q->state = SVM_RUNNING;
        q->pos = f->count;
        if (!q->admitted) {
            q->cached = f->count;
            q->step_in = f->version;
        }
        q->admitted = 1;
        note(m->admitted_now, &m->nadmitted, q->id);
    } else if (f->from == SVM_SCHED && f->to == SVM_MODEL) {        /* in this step */
        open_step(m, f->version);
        q->state = SVM_RUNNING;
        q->pos += f->count;
        if (q->prompt > 0 && q->pos >= q->prompt && q->pos - q->prompt + 1 > q->out)
            q->out = q->pos - q->prompt + 1;
        if (m->nbatch < SVM_BATCH)
            m->batch[m->nbatch++] = (svm_item){q->id, f->count, f->phase == 1};
        m->nbatch_all++;
        if (f->phase == 1)
            m->last.prefill_rows += f->count;
        else
            m->last.decode_rows += f->count;
    } else if (f->from == SVM_SCHED && f->to == SVM_QUEUE) {        /* preempted */
        open_step(m, f->version);
        q->state = SVM_WAITING;
        q->pos = 0;
        q->preempted++;
        note(m->preempted_now, &m->npreempted, q->id);
    } else if (f->from == SVM_MODEL && f->to == SVM_CLIENTS) {      /* finished */
        open_step(m, f->version);
        q->state = SVM_FINISHED;
        q->out = f->count;
        q->step_done = f->version;
        note(m->finished_now, &m->nfinished, q->id);
    }
}

int svm_count(const serve_model *m, int state)
{
    int n = 0;
    for (int i = 0; i < m->nr; i++)
        n += m->r[i].state == state;
    return n;
}

const svm_req *svm_nth(const serve_model *m, int state, int i)
{
    int fin = state == SVM_FINISHED;
    for (int k = 0; k < m->nr; k++) {
        const svm_req *q = &m->r[fin ? m->nr - 1 - k : k];
        if (q->state == state && i-- == 0)
            return q;
    }
    return NULL;
}

const svm_req *svm_find(const serve_model *m, int id)
{
    for (int i = 0; i < m->nr; i++)
        if (m->r[i].id == id)
            return &m->r[i];
    return NULL;
}

double svm_tokens_per_s(const serve_model *m, double *last)
{
    if (last)
        *last = m->nhist && m->last.step == m->hist[m->nhist - 1].step &&
                isfinite(m->last.secs) && m->last.secs > 0 ? m->last.tokens / m->last.secs : 0;
    return m->secs_total > 0 ? (double)m->tokens_total / m->secs_total : 0;
}

void svm_batch_text(const serve_model *m, char *out, size_t n)
{
    size_t len = 0;
    out[0] = 0;
#define PUT(...) (len += (size_t)snprintf(out + len, len < n ? n - len : 0, __VA_ARGS__))
    for (int pass = 1; pass >= 0; pass--) {
        int k = 0;
        for (int i = 0; i < m->nbatch; i++) {
            const svm_item *it = &m->batch[i];
            if (it->prefill != pass)
                continue;
            if (pass)
                PUT("%sreq %d (%d)", k ? ", " : "prefill ", it->id, it->rows);
            else
                PUT("%s%d", k ? ", " : len ? "; decode req " : "decode req ", it->id);
            k++;
        }
    }
    if (m->nbatch_all > m->nbatch)
        PUT(" (and %d more)", m->nbatch_all - m->nbatch);
#undef PUT
    if (len >= n && n > 4)
        memcpy(out + n - 4, "...", 4);
}

int svm_move_text(int from, int to, int seq, int count, char *out, size_t n)
{
    const char *s = count == 1 ? "" : "s";
    if (from == SVM_CLIENTS && to == SVM_QUEUE)
        snprintf(out, n, "req %d: %d prompt token%s", seq, count, s);
    else if (from == SVM_QUEUE && to == SVM_SCHED && count > 0)
        snprintf(out, n, "req %d admitted, %d cached", seq, count);
    else if (from == SVM_QUEUE && to == SVM_SCHED)
        snprintf(out, n, "req %d admitted", seq);
    else if (from == SVM_SCHED && to == SVM_MODEL)
        snprintf(out, n, "req %d: %d row%s this step", seq, count, s);
    else if (from == SVM_SCHED && to == SVM_QUEUE)
        snprintf(out, n, "req %d preempted", seq);
    else if (from == SVM_MODEL && to == SVM_CLIENTS)
        snprintf(out, n, "req %d finished: %d token%s", seq, count, s);
    else {
        snprintf(out, n, "req %d: %d", seq, count);
        return 0;
    }
    return 1;
}
