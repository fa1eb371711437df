/* serve.c - the engine loop and its API: requests come in from any thread (submit, cancel),
 * one thread calls llm_serve_step, and each step takes in what arrived, asks the scheduler
 * for a plan, runs it through the model runner, streams every new token to its request's
 * callback and retires what finished. Metrics are a snapshot taken at the end of each step.
 * Events (optional): flow records between the roles client, queue, scheduler and model, a
 * compute span per step saying who prefills how much and who decodes, a STEP record per
 * step in numbers, the paged cache's memory records, and a gate (mlsys_step) before each
 * step, or "engine idle" while there is nothing to do. */
#include "serve.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { ROLE_CLIENT, ROLE_QUEUE, ROLE_SCHED, ROLE_MODEL, ROLE_COUNT };
static const char *const role_names[ROLE_COUNT] = {"clients", "queue", "scheduler", "model"};

const double llm_serve_hist_bounds[LLM_SERVE_HIST_N - 1] = {
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
};

struct llm_serve {
    llm_config c;
    const llm_weights *w;
    llm_serve_opts o;
    llm_kv kv;
    llm_sched sc;
    llm_runner run;
    /* shared with other threads, under mu */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    llm_seq_queue inbox;      /* submitted, not taken in yet */
    int *cancels;             /* ids to cancel */
    int n_cancels, cap_cancels;
    int next_id;
    int busy;                 /* requests taken in and not finished yet */
    llm_serve_metrics snap;
    /* the step thread's own */
    llm_serve_metrics m;
    long step_no;
    int *next;                /* [max_num_seqs] tokens drawn this step */
    llm_step_item *items;     /* [max_num_seqs] */
    int *finished;            /* ids finished this step */
    int n_finished, cap_finished;
    int gates;                /* gates emitted (mlsys_step's step number) */
    int idle_said;            /* an "engine idle" gate since the last forward */
};

static double now(const llm_serve *s)
{
    return s->o.clock ? s->o.clock(s->o.clock_u) : mlsys_now_s();
}

/* One request moving between roles (see serve.h for what count and phase carry). */
static void flow(llm_serve *s, int from, int to, int seq, int count, int phase)
{
    if (!s->o.comm)
        return;
    mlsys_flow_info f = {(int16_t)from, (int16_t)to, MLSYS_FLOW_REQUESTS, (int16_t)phase,
                         count, (int32_t)s->step_no, seq, 0};
    mlsys_emit_flow(s->o.comm, &f, 0, NULL);
}

/* Is anything queued, running or submitted? (under mu) */
static int work_locked(const llm_serve *s)
{
    return s->inbox.n > 0 || s->n_cancels > 0 || s->busy > 0;
}

/* The gate before a step with work ("engine step N"), or while there is none ("engine
 * idle"): gated, the stepping thread waits there for the viewer, once per call; not gated,
 * an idle gate is said once per idle period (a frame that says the engine had nothing). */
static void gate(llm_serve *s, int idle)
{
    if (!s->o.comm || (idle && s->idle_said && !mlsys_gated(s->o.comm)))
        return;
    char label[48];
    if (idle)
        snprintf(label, sizeof label, "engine idle: no requests");
    else
        snprintf(label, sizeof label, "engine step %ld", s->step_no + 1);
    s->idle_said = idle;
    mlsys_step(s->o.comm, ++s->gates, label);
}

/* The step in numbers (MLSYS_FLOW_STEP, core/mlsys.h). */
static void step_record(llm_serve *s, int rows, int tokens, double secs)
{
    if (!s->o.comm || !mlsys_tracing(s->o.comm))
        return;
    mlsys_event e;
    memset(&e, 0, sizeof e);
    e.kind = MLSYS_EV_FLOW;
    e.flow = (mlsys_flow_info){ROLE_MODEL, -1, MLSYS_FLOW_STEP, -1, rows, (int32_t)s->step_no,
                               -1, tokens};
    e.coll = e.algo = e.op = -1;
    e.step = (int32_t)s->step_no;
    e.chunk = -1;
    e.val[0] = secs;
    e.val[1] = s->m.waiting;
    e.val[2] = s->m.running;
    e.val[3] = (double)s->m.finished;
    snprintf(e.label, sizeof e.label, "step %ld", s->step_no);
    mlsys_emit(s->o.comm, &e);
}

llm_serve *llm_serve_create(const llm_config *c, const llm_weights *w,
                            const llm_serve_opts *o, char *err, size_t errlen)
{
    llm_serve_opts d = *o;
    if (d.max_num_seqs <= 0)
        d.max_num_seqs = 16;
    if (d.max_num_batched_tokens <= 0)
        d.max_num_batched_tokens = 256;
    if (d.block_size <= 0)
        d.block_size = 16;
    int per_seq = (c->seq_len + d.block_size - 1) / d.block_size;
    if (d.n_blocks <= 0)
        d.n_blocks = d.max_num_seqs * per_seq;
    if (d.max_num_seqs > 4096 || d.max_num_batched_tokens > 65536 ||
        d.max_num_batched_tokens < d.max_num_seqs || d.block_size > c->seq_len ||
        d.n_blocks < per_seq) {
        snprintf(err, errlen, "serve: max_num_seqs %d (1..4096), max_num_batched_tokens %d "
                 "(max_num_seqs..65536), block_size %d (1..%d), %d blocks (at least %d: one "
                 "full context)", d.max_num_seqs, d.max_num_batched_tokens, d.block_size,
                 c->seq_len, d.n_blocks, per_seq);
        return NULL;
    }
    if (d.tok && d.tok->vocab_size != c->vocab_size) {
        snprintf(err, errlen, "serve: the tokenizer has %d ids, the model %d",
                 d.tok->vocab_size, c->vocab_size);
        return NULL;
    }
    llm_serve *s = mlsys_xcalloc(1, sizeof *s);
    s->c = *c;
    s->w = w;
    s->o = d;
    llm_paged_opts po = {d.block_size, d.n_blocks, d.max_num_seqs, 0, d.no_prefix_cache,
                         d.alloc, d.comm, 0};
    if (llm_kv_init_paged(&s->kv, c, &po, err, errlen)) {
        free(s);
        return NULL;
    }
    llm_sched_init(&s->sc, &s->kv, d.max_num_seqs, d.max_num_batched_tokens, d.admit,
                   d.admit_u);
    if (llm_runner_init(&s->run, c, w, &s->kv, d.max_num_batched_tokens, d.max_num_seqs, err,
                        errlen)) {
        llm_sched_fini(&s->sc);
        llm_kv_free(&s->kv);
        free(s);
        return NULL;
    }
    pthread_mutex_init(&s->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&s->cv, &ca);
    pthread_condattr_destroy(&ca);
    s->next = mlsys_xmalloc((size_t)d.max_num_seqs * sizeof(int));
    s->items = mlsys_xcalloc((size_t)d.max_num_seqs, sizeof *s->items);
    s->m.block_size = d.block_size;
    s->m.kv_blocks = s->m.kv_free = d.n_blocks;
    s->m.kv_bytes = s->kv.bytes;
    s->snap = s->m;
    if (d.comm)
        for (int r = 0; r < ROLE_COUNT; r++) {
            mlsys_flow_info f = {(int16_t)r, -1, MLSYS_FLOW_ROLE, -1, 0, 0, -1, 0};
            mlsys_emit_flow(d.comm, &f, 0, role_names[r]);
        }
    return s;
}

int llm_serve_submit(llm_serve *s, const llm_request *r, char *err, size_t errlen)
{
    double t = now(s);
    llm_seq *q = llm_seq_create(-1, r, &s->c, s->o.tok, err, errlen);
    if (!q)
        return -1;
    q->st.t_arrival = t;
    pthread_mutex_lock(&s->mu);
    int id = q->id = s->next_id++;
    llm_queue_push_back(&s->inbox, q);
    s->snap.submitted++;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    return id;
}

int llm_serve_cancel(llm_serve *s, int id)
{
    pthread_mutex_lock(&s->mu);
    int rc = -1;
    if (id >= 0 && id < s->next_id) {
        if (s->n_cancels == s->cap_cancels) {
            s->cap_cancels = s->cap_cancels ? 2 * s->cap_cancels : 16;
            int *p = realloc(s->cancels, (size_t)s->cap_cancels * sizeof(int));
            if (!p) {
                fprintf(stderr, "serve: out of memory for cancels\n");
                exit(1);
            }
            s->cancels = p;
        }
        s->cancels[s->n_cancels++] = id;
        pthread_cond_broadcast(&s->cv);
        rc = 0;
    }
    pthread_mutex_unlock(&s->mu);
    return rc;
}

/* ---- the step ---- */

static void note_finished(llm_serve *s, int id)
{
    if (s->n_finished == s->cap_finished) {
        s->cap_finished = s->cap_finished ? 2 * s->cap_finished : 32;
        int *p = realloc(s->finished, (size_t)s->cap_finished * sizeof(int));
        if (!p) {
            fprintf(stderr, "serve: out of memory\n");
            exit(1);
        }
        s->finished = p;
    }
    s->finished[s->n_finished++] = id;
}

static void hist_add(long *h, double v)
{
    int b = 0;
    while (b < LLM_SERVE_HIST_N - 1 && v > llm_serve_hist_bounds[b])
        b++;
    h[b]++;
}

/* Deliver an event for q (token or -1) and, when why != NONE, retire and free it. */
static void deliver(llm_serve *s, llm_seq *q, int token, llm_finish why)
{
    double t = now(s);
    if (token >= 0 && q->st.t_first == 0.0)
        q->st.t_first = t;
    if (why != LLM_FINISH_NONE) {
        q->finish = why;
        q->st.t_finish = t;
        if (q->st.t_first > 0.0) {
            q->st.ttft = q->st.t_first - q->st.t_arrival;
            q->st.tpot = q->st.n_out > 1 ? (t - q->st.t_first) / (q->st.n_out - 1) : 0.0;
        }
        q->st.e2e = t - q->st.t_arrival;
        llm_sched_retire(&s->sc, q);
    }
    llm_serve_event ev = {q->id, token, q->st.n_out, NULL, 0, why, &q->st};
    if (s->o.tok)
        ev.text_len = llm_seq_take_text(q, why != LLM_FINISH_NONE, &ev.text);
    if (q->on_event)
        q->on_event(q->u, &ev);
    if (why == LLM_FINISH_NONE)
        return;
    flow(s, ROLE_MODEL, ROLE_CLIENT, q->id, q->st.n_out, -1);
    note_finished(s, q->id);
    pthread_mutex_lock(&s->mu);
    s->busy--;
    pthread_mutex_unlock(&s->mu);
    s->m.finished++;
    if (why == LLM_FINISH_CANCEL)
        s->m.cancelled++;
    s->m.prompt_tokens += q->n_prompt;
    if (q->st.t_first > 0.0) {
        hist_add(s->m.ttft_hist, q->st.ttft);
        s->m.ttft_sum += q->st.ttft;
        s->m.ttft_count++;
        if (q->st.n_out > 1) {
            hist_add(s->m.tpot_hist, q->st.tpot);
            s->m.tpot_sum += q->st.tpot;
            s->m.tpot_count++;
        }
    }
    llm_seq_free(q);
}

static llm_seq *find_live(llm_serve *s, int id)
{
    for (llm_seq *q = s->sc.running.head; q; q = q->next)
        if (q->id == id)
            return q;
    for (llm_seq *q = s->sc.waiting.head; q; q = q->next)
        if (q->id == id)
            return q;
    return NULL;
}

/* Submissions join the waiting queue; cancels free their blocks now. */
static void take_in(llm_serve *s)
{
    pthread_mutex_lock(&s->mu);
    llm_seq_queue in = s->inbox;
    memset(&s->inbox, 0, sizeof s->inbox);
    s->busy += in.n;
    int nc = s->n_cancels;
    int *cancels = NULL;
    if (nc) {
        cancels = mlsys_xmalloc((size_t)nc * sizeof(int));
        memcpy(cancels, s->cancels, (size_t)nc * sizeof(int));
        s->n_cancels = 0;
    }
    pthread_mutex_unlock(&s->mu);
    if (in.n) {
        while (in.head) {
            llm_seq *q = in.head;
            flow(s, ROLE_CLIENT, ROLE_QUEUE, q->id, q->n_prompt, -1);
            llm_queue_remove(&in, q);
            llm_queue_push_back(&s->sc.waiting, q);
        }
    }
    for (int i = 0; i < nc; i++) {
        llm_seq *q = find_live(s, cancels[i]);
        if (q)
            deliver(s, q, -1, LLM_FINISH_CANCEL);
    }
    free(cancels);
}

static void publish(llm_serve *s)
{
    llm_paged_stats ps;
    llm_paged_stats_get(&s->kv, &ps);
    s->m.running = s->sc.running.n;
    s->m.waiting = s->sc.waiting.n;
    s->m.steps = s->step_no;
    s->m.kv_used = ps.used;
    s->m.kv_cached = ps.cached;
    s->m.kv_free = ps.free;
    s->m.prefix_query_tokens = s->sc.query_tokens;
    s->m.prefix_hit_tokens = s->sc.hit_tokens;
    s->m.prefix_hit_rate = s->sc.query_tokens > 0
                               ? (double)s->sc.hit_tokens / (double)s->sc.query_tokens : 0.0;
    s->m.preemptions = s->sc.preemptions;
    pthread_mutex_lock(&s->mu);
    long submitted = s->snap.submitted;
    s->snap = s->m;
    s->snap.submitted = submitted;
    pthread_mutex_unlock(&s->mu);
}

/* "P3:24 P5:8 D0,1,2": who prefills how many rows, who decodes (cut to the label's size). */
static void step_label(const llm_sched *sc, char *out, size_t n)
{
    size_t len = 0;
    out[0] = 0;
    for (int pass = 1; pass >= 0; pass--) {
        int first = 1;
        for (int i = 0; i < sc->n_items && len + 1 < n; i++) {
            const llm_sched_item *it = &sc->items[i];
            if (it->prefill != pass)
                continue;
            int k = pass ? snprintf(out + len, n - len, "%sP%d:%d", len ? " " : "", it->s->id,
                                    it->n)
                         : snprintf(out + len, n - len, "%s%d", first ? (len ? " D" : "D") : ",",
                                    it->s->id);
            first = 0;
            len += (size_t)k < n - len ? (size_t)k : n - len - 1;
        }
    }
}

int llm_serve_step(llm_serve *s, llm_step_info *info)
{
    char err[256];
    if (s->o.comm) {
        pthread_mutex_lock(&s->mu);
        int idle = !work_locked(s);
        pthread_mutex_unlock(&s->mu);
        gate(s, idle);
    }
    double t0 = now(s);
    s->n_finished = 0;
    take_in(s);
    llm_sched *sc = &s->sc;
    int rows = llm_sched_plan(sc);
    if (info)
        memset(info, 0, sizeof *info);
    if (rows == 0) {
        publish(s);
        if (info) {
            info->n_finished = s->n_finished;
            info->finished = s->finished;
            info->t_start = t0;
            info->t_end = now(s);
        }
        return 0;
    }
    s->step_no++;
    for (int i = 0; i < sc->n_preempted; i++)
        flow(s, ROLE_SCHED, ROLE_QUEUE, sc->preempted[i], 0, -1);
    for (int i = sc->n_items - sc->n_admitted; i < sc->n_items; i++)
        flow(s, ROLE_QUEUE, ROLE_SCHED, sc->items[i].s->id, sc->items[i].s->n_computed, -1);
    for (int i = 0; i < sc->n_items; i++)
        flow(s, ROLE_SCHED, ROLE_MODEL, sc->items[i].s->id, sc->items[i].n,
             sc->items[i].prefill);
    char label[32] = "";
    if (s->o.comm) {
        step_label(sc, label, sizeof label);
        mlsys_compute_begin(s->o.comm, label);
    }
    int rc = llm_runner_run(&s->run, sc->items, sc->n_items, s->next, err, sizeof err);
    if (s->o.comm)
        mlsys_compute_end(s->o.comm, label);
    s->m.prefill_tokens += sc->prefill_rows;
    s->m.decode_tokens += sc->decode_rows;
    /* copy the plan: retiring a sequence frees it */
    int n_items = sc->n_items;
    for (int i = 0; i < n_items; i++) {
        const llm_sched_item *it = &sc->items[i];
        s->items[i] = (llm_step_item){it->s->id, it->start, it->n, it->prefill,
                                      rc ? -1 : s->next[i]};
    }
    if (rc) {
        fprintf(stderr, "serve: step %ld: %s\n", s->step_no, err);
        for (int i = 0; i < n_items; i++)
            deliver(s, sc->items[i].s, -1, LLM_FINISH_ERROR);
    }
    int drawn = 0;
    if (!rc) {
        for (int i = 0; i < n_items; i++) {
            llm_seq *q = sc->items[i].s;
            q->n_computed += q->n_sched;
            q->n_sched = 0;
            if (s->next[i] < 0)
                continue;
            llm_finish why = llm_seq_append(q, s->next[i], s->o.tok, s->c.seq_len);
            s->m.generated_tokens++;
            drawn++;
            deliver(s, q, s->next[i], why);
        }
    }
    take_in(s);           /* cancels the callbacks asked for */
    publish(s);
    s->idle_said = 0;
    step_record(s, rows, drawn, now(s) - t0);
    if (info) {
        info->step = s->step_no;
        info->n_items = n_items;
        info->items = s->items;
        info->rows = rows;
        info->prefill_rows = sc->prefill_rows;
        info->decode_rows = sc->decode_rows;
        info->n_admitted = sc->n_admitted;
        info->n_preempted = sc->n_preempted;
        info->preempted = sc->preempted;
        info->n_finished = s->n_finished;
        info->finished = s->finished;
        info->t_start = t0;
        info->t_end = now(s);
    }
    return rc ? -1 : 1;
}

int llm_serve_has_work(llm_serve *s)
{
    pthread_mutex_lock(&s->mu);
    int w = s->inbox.n > 0 || s->n_cancels > 0 || s->busy > 0;
    pthread_mutex_unlock(&s->mu);
    return w;
}

int llm_serve_wait(llm_serve *s, double timeout_s)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    long long ns = (long long)ts.tv_nsec + (long long)(timeout_s * 1e9);
    ts.tv_sec += (time_t)(ns / 1000000000LL);
    ts.tv_nsec = (long)(ns % 1000000000LL);
    pthread_mutex_lock(&s->mu);
    int rc = 0, w = work_locked(s);
    pthread_mutex_unlock(&s->mu);
    if (!w && mlsys_gated(s->o.comm)) {
        /* gated: the engine waits for the viewer at an idle gate, never silently */
        gate(s, 1);
        pthread_mutex_lock(&s->mu);
        w = work_locked(s);
        pthread_mutex_unlock(&s->mu);
        return w;
    }
    if (!w)
        gate(s, 1);
    pthread_mutex_lock(&s->mu);
    while (!work_locked(s) && rc != ETIMEDOUT)
        rc = pthread_cond_timedwait(&s->cv, &s->mu, &ts);
    w = work_locked(s);
    pthread_mutex_unlock(&s->mu);
    return w;
}

long llm_serve_run(llm_serve *s)
{
    long steps = 0;
    while (llm_serve_has_work(s)) {
        int rc = llm_serve_step(s, NULL);
        if (rc < 0)
            return -1;
        steps += rc;
    }
    return steps;
}

void llm_serve_metrics_get(llm_serve *s, llm_serve_metrics *m)
{
    pthread_mutex_lock(&s->mu);
    *m = s->snap;
    pthread_mutex_unlock(&s->mu);
}

const llm_kv *llm_serve_kv(const llm_serve *s)
{
    return &s->kv;
}

void llm_serve_free(llm_serve *s)
{
    if (!s)
        return;
    take_in(s);
    while (s->sc.running.head)
        deliver(s, s->sc.running.head, -1, LLM_FINISH_CANCEL);
    while (s->sc.waiting.head)
        deliver(s, s->sc.waiting.head, -1, LLM_FINISH_CANCEL);
    llm_runner_fini(&s->run);
    llm_sched_fini(&s->sc);
    llm_kv_free(&s->kv);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    free(s->cancels);
    free(s->next);
    free(s->items);
    free(s->finished);
    free(s);
}
