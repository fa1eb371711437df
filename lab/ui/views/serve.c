/* serve.c - the serve view: a serving engine at work, from its typed records (serve_model.h).
 * The queue in three columns (waiting, running, finished), the step's batch in words (who
 * prefills how many tokens, who decodes; who was admitted, preempted, finished), the
 * throughput, and the recent steps one line each with tokens per step as a small curve. Works
 * for anything that drives the engine (a lab's loop, HTTP clients): it reads the engine. */
#include "view.h"
#include "serve_model.h"
#include "../stepmodel.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void *serve_create(void)
{
    serve_model *m = calloc(1, sizeof *m);
    if (!m)
        abort();
    svm_init(m);
    return m;
}

static void serve_reset(void *data, int nranks)
{
    (void)nranks;
    svm_free(data);
}

static void serve_rewind(void *data)
{
    svm_free(data);
}

static void serve_free(void *data)
{
    svm_free(data);
    free(data);
}

static void serve_event(void *data, const mlsys_event *e, int frame)
{
    (void)frame;
    svm_event(data, e);
}

/* The newest gate's label when the engine waits with nothing to do, else NULL. */
static const char *idle_gate(const view_ctx *ctx)
{
    if (!ctx->sm || !ctx->live)
        return NULL;
    const sm_frame *f = sm_frame_at(ctx->sm, sm_nframes(ctx->sm) - 1);
    return f && !strncmp(f->label, "engine idle", 11) ? f->label : NULL;
}

/* Text over at most h lines of w cells, broken at spaces (ASCII text). */
static void wrap(grid *g, int x, int y, int w, int h, const char *s, grid_attr a)
{
    for (int row = 0; row < h && *s && w > 0; row++) {
        int n = (int)strlen(s);
        if (n > w) {
            n = w;
            while (n > 0 && s[n] != ' ')
                n--;
            if (n == 0)
                n = w;
        }
        grid_putn(g, x, y + row, s, (size_t)n, a);
        s += n;
        while (*s == ' ')
            s++;
    }
}

/* ids as "req 3, 5, 7" into out (empty when n is 0). */
static void id_list(const char *what, const int *ids, int n, char *out, size_t len)
{
    size_t k = 0;
    out[0] = 0;
    for (int i = 0; i < n && k < len; i++)
        k += (size_t)snprintf(out + k, len - k, "%s%d", i ? ", " : what, ids[i]);
}

/* One request in a column of w cells. */
static void draw_req(grid *g, int x, int y, int w, const serve_model *m, const svm_req *q)
{
    int in_batch = 0;
    for (int i = 0; i < m->nbatch; i++)
        in_batch |= m->batch[i].id == q->id;
    char t[96];
    grid_attr a = UI_RANK_ATTR(q->id);
    if (q->state == SVM_WAITING) {
        if (q->preempted)
            snprintf(t, sizeof t, "req %-3d %d out, preempted", q->id, q->out);
        else
            snprintf(t, sizeof t, "req %-3d prompt %d", q->id, q->prompt);
        if (q->preempted)
            a = GRID_PAIR(UI_PAIR_WARN);
    } else if (q->state == SVM_RUNNING) {
        if (q->prompt > 0 && q->pos < q->prompt)
            snprintf(t, sizeof t, "req %-3d prefill %d/%d", q->id, q->pos, q->prompt);
        else
            snprintf(t, sizeof t, "req %-3d %d out", q->id, q->out);
        if (q->cached > 0) {
            size_t l = strlen(t);
            snprintf(t + l, sizeof t - l, ", %d cached", q->cached);
        }
        if (in_batch)
            a |= GRID_BOLD;
    } else {
        snprintf(t, sizeof t, "req %-3d %d out, step %ld", q->id, q->out, q->step_done);
        a = q->step_done == m->last.step ? GRID_PAIR(UI_PAIR_OK) | GRID_BOLD : GRID_DIM;
    }
    view_put_clipped(g, x, y, w, t, a);
}

/* The three queues side by side in rows y .. y+h-1. */
static void draw_queues(grid *g, int x, int y, int w, int h, const serve_model *m)
{
    static const char *const names[] = {"waiting", "running", "finished"};
    int cw = (w - 2) / 3;
    for (int s = 0; s < 3; s++) {
        int cx = x + s * (cw + 1), n = svm_count(m, s);
        char t[48];
        snprintf(t, sizeof t, "%s (%d)", names[s], n);
        view_put_clipped(g, cx, y, cw, t, GRID_BOLD | GRID_UNDERLINE);
        if (s)
            grid_vline(g, cx - 1, y, h, GRID_PAIR(UI_PAIR_DIM));
        int rows = h - 1, shown = n <= rows ? n : rows - 1;
        for (int i = 0; i < shown; i++)
            draw_req(g, cx, y + 1 + i, cw, m, svm_nth(m, s, i));
        if (shown < n && rows > 0) {
            snprintf(t, sizeof t, "+%d more", n - shown);
            view_put_clipped(g, cx, y + 1 + shown, cw, t, GRID_DIM);
        }
    }
}

/* The last steps, newest last, one line each, with tokens per step as a bar. */
static void draw_recent(grid *g, int x, int y, int w, int h, const serve_model *m, int ascii)
{
    view_put_clipped(g, x, y, w, "recent steps (P3:24: req 3 prefills 24 tokens; D0,1: "
                     "reqs 0 and 1 decode)", GRID_DIM);
    int n = h - 1 < m->nhist ? h - 1 : m->nhist, maxt = 1;
    for (int i = 0; i < m->nhist; i++)
        if (m->hist[i].tokens > maxt)
            maxt = m->hist[i].tokens;
    for (int i = 0; i < n; i++) {
        const svm_step *s = &m->hist[m->nhist - n + i];
        char t[160], bar[64] = "";
        int bw = (int)lround(8.0 * s->tokens / maxt);
        size_t k = 0;
        for (int b = 0; b < 8; b++)
            k += (size_t)snprintf(bar + k, sizeof bar - k, "%s", b < bw ? (ascii ? "#" : "▇")
                                  : " ");
        snprintf(t, sizeof t, "step %-4ld %4d rows %3d tok %s %7.2f ms  %s", s->step, s->rows,
                 s->tokens, bar, isfinite(s->secs) ? s->secs * 1e3 : 0.0, s->batch);
        view_put_clipped(g, x, y + 1 + i, w, t, s->step == m->last.step ? GRID_BOLD : 0);
    }
}

static void serve_draw(void *data, grid *g, int x, int y, int w, int h, const view_ctx *ctx)
{
    serve_model *m = data;
    int ascii = ctx->ascii || g->ascii;
    const char *dot = ascii ? " - " : " · ";
    char line[512], t[256];
    grid_clip(g, x, y, w, h);
    const char *idle = idle_gate(ctx);
    if (!m->seen) {
        view_put_clipped(g, x, y, w, "server", GRID_BOLD);
        view_put_clipped(g, x + 2, y + 2, w - 2, idle ? "the engine is idle: no request has "
                         "come yet" : "the engine has taken in no request yet",
                         idle ? GRID_PAIR(UI_PAIR_WARN) : GRID_DIM);
        wrap(g, x + 2, y + 3, w - 3, h - 3, "This view draws a serving engine's queue "
             "(waiting, running, finished), each step's batch and the throughput, from the "
             "engine's own records: chapter 8's server, chapter 9's cache demo, and requests "
             "that HTTP clients send.", GRID_DIM);
        grid_unclip(g);
        return;
    }
    double last_tps, tps = svm_tokens_per_s(m, &last_tps);
    snprintf(line, sizeof line, "server%sstep %ld%s%d waiting%s%d running%s%d finished%s%.0f "
             "tokens/s", dot, m->last.step, dot, svm_count(m, SVM_WAITING), dot,
             svm_count(m, SVM_RUNNING), dot, svm_count(m, SVM_FINISHED), dot, tps);
    view_put_clipped(g, x, y, w, line, GRID_BOLD);
    int cy = y + 1;
    if (idle) {
        snprintf(line, sizeof line, "%s%s", idle, ctx->gate_step ? " (the engine waits at "
                 "its gate: n lets it look for requests again)" : "");
        view_put_clipped(g, x, cy++, w, line, GRID_PAIR(UI_PAIR_WARN) | GRID_BOLD);
    }
    /* the step's batch, in words, over two lines when it needs them */
    svm_batch_text(m, t, sizeof t);
    if (m->last.step > 0) {
        char when[96] = "";
        if (isfinite(m->last.secs))
            snprintf(when, sizeof when, " (%d token%s out in %.2f ms, %.0f tokens/s)",
                     m->last.tokens, m->last.tokens == 1 ? "" : "s", m->last.secs * 1e3,
                     last_tps);
        snprintf(line, sizeof line, "step %ld%s: %s", m->last.step, when, t[0] ? t : "-");
        int lw = grid_text_width(line, strlen(line));
        if (lw <= w || h < 14) {
            view_put_clipped(g, x, cy++, w, line, 0);
        } else {
            snprintf(line, sizeof line, "step %ld%s:", m->last.step, when);
            view_put_clipped(g, x, cy++, w, line, 0);
            view_put_clipped(g, x + 2, cy++, w - 2, t[0] ? t : "-", 0);
        }
    }
    char a[96], p[96], f[96];
    id_list("admitted req ", m->admitted_now, m->nadmitted, a, sizeof a);
    id_list("preempted req ", m->preempted_now, m->npreempted, p, sizeof p);
    id_list("finished req ", m->finished_now, m->nfinished, f, sizeof f);
    snprintf(line, sizeof line, "%s%s%s%s%s", a, a[0] && (p[0] || f[0]) ? dot : "", p,
             p[0] && f[0] ? dot : "", f);
    if (line[0])
        view_put_clipped(g, x, cy++, w, line, m->npreempted ? GRID_PAIR(UI_PAIR_WARN) : GRID_DIM);
    cy++;
    /* the queues, then the recent steps when there is room for both */
    int left = y + h - cy, need = 1;
    for (int st = 0; st < 3; st++)
        if (1 + svm_count(m, st) > need)
            need = 1 + svm_count(m, st);
    /* the queues take what they need, up to three fifths; the recent steps the rest */
    int qh = need < 6 ? 6 : need, cap = left * 3 / 5 < 6 ? 6 : left * 3 / 5, recent = 0;
    if (qh > cap)
        qh = cap;
    if (qh > left)
        qh = left;
    if (m->nhist && left - qh - 1 >= 2) {
        recent = left - qh - 1;
        if (recent > m->nhist + 1)
            recent = m->nhist + 1;
    }
    if (qh >= 2)
        draw_queues(g, x, cy, w, qh, m);
    if (recent && m->nhist)
        draw_recent(g, x, cy + qh + 1, w, recent, m, ascii);
    grid_unclip(g);
}

static const char *const *serve_notes(int ascii)
{
    static const char *const lines[] = {
        "Each step is one forward of the model over rows of several requests: prompt chunks "
        "(prefill) and one row per running request (decode). Waiting requests are admitted "
        "while seats and KV blocks allow; a preempted one goes back to waiting and is "
        "recomputed. Tokens/s counts the engine's own time (not waits at gates).", NULL
    };
    (void)ascii;
    return lines;
}

static const ui_key_help serve_keys[] = {{NULL, NULL}};

const view_class view_serve_class = {
    .name = "serve",
    .title = "server",
    .help = "a serving engine: the queue (waiting, running, finished), each step's batch "
            "(who prefills, who decodes) and the throughput",
    .keys = serve_keys,
    .notes = serve_notes,
    .create = serve_create,
    .free = serve_free,
    .reset = serve_reset,
    .rewind = serve_rewind,
    .wants = svm_wants,
    .event = serve_event,
    .draw = serve_draw,
};
