/* engine.c - the engine loop and its API: requests come in from any thread (submit, cancel),
 * one thread calls llm_engine_step, and each step takes in what arrived, asks the scheduler
 * for a plan, runs it through the model runner, streams every new token to its request's
 * callback and retires what finished. Metrics are a snapshot taken at the end of each step.
 * Each step's time is split in phases (schedule, prepare, forward, sample, detokenize); the
 * overlap option has a worker thread plan the next step while this thread runs the forward.
 * Events (optional): flow records between the roles client, queue, scheduler and model, one
 * compute span per phase (the forward on row 0, the CPU's phases on row 1), a STEP record
 * per step in numbers, the paged cache's memory records, and a gate (mlsys_step) before
 * each step, or "engine idle" while there is nothing to do. */
#include "engine.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sched.h>
#include <unistd.h>

enum { ROLE_CLIENT, ROLE_QUEUE, ROLE_SCHED, ROLE_MODEL, ROLE_COUNT };
static const char *const role_names[ROLE_COUNT] = {"clients", "queue", "scheduler", "model"};

const double llm_engine_hist_bounds[LLM_ENGINE_HIST_N - 1] = {
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
};

struct llm_engine {
    llm_config c;
    const llm_weights *w;
    llm_engine_opts o;
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
    llm_engine_metrics snap;
    /* the step thread's own */
    llm_engine_metrics m;
    long step_no;
    int *next;                /* [max_num_seqs] tokens drawn this step */
    llm_step_item *items;     /* [max_num_seqs] */
    int *finished;            /* ids finished this step */
    int n_finished, cap_finished;
    /* the step's rows: bt[cur] runs this step; with overlap, bt[cur ^ 1] holds the next
     * step's plan when ahead = 1 (dirty: an item left it, prepare it again) */
    llm_batch bt[2];
    int cur, ahead, dirty;
    int *pre[2], n_pre[2];    /* request ids preempted by each batch's planning */
    llm_step_stats st, last;
    uint64_t mark;            /* where the phase being timed began */
    /* the overlap worker: plans the next step into bt[w_k] while this thread runs the
     * forward (w_rows: the rows it planned, -1 on an error) */
    pthread_t worker;
    int worker_up;
    pthread_mutex_t wmu;
    pthread_cond_t wcv;
    int w_k, w_job, w_done, w_quit, w_rows;
    int gates;                /* gates emitted (mlsys_step's step number) */
    int idle_said;            /* an "engine idle" gate since the last forward */
};

static const char *const phase_names[LLM_PHASE_COUNT] = {
    "schedule", "prepare", "forward", "token sample", "detokenize", "launch", "wait",
    "schedule next", "prepare next",
};

const char *llm_phase_name(int phase)
{
    return phase >= 0 && phase < LLM_PHASE_COUNT ? phase_names[phase] : "?";
}

/* The phase p ends now; it began where the previous one of its thread ended (*mark). */
static void phase_end_at(llm_engine *s, int p, uint64_t *mark)
{
    uint64_t t = mlsys_now_ns();
    s->st.t0[p] = *mark;
    s->st.t1[p] = t;
    *mark = t;
}

static void phase_end(llm_engine *s, int p)
{
    phase_end_at(s, p, &s->mark);
}

static int plan_into(llm_engine *s, int k, int cancels_too, int ph_sched, int ph_prep,
                     uint64_t *mark);

static void *worker_main(void *u)
{
    llm_engine *s = u;
    pthread_mutex_lock(&s->wmu);
    for (;;) {
        while (!s->w_job && !s->w_quit)
            pthread_cond_wait(&s->wcv, &s->wmu);
        if (s->w_quit)
            break;
        s->w_job = 0;
        int k = s->w_k;
        pthread_mutex_unlock(&s->wmu);
        uint64_t mark = mlsys_now_ns();
        int rows = plan_into(s, k, 0, LLM_PHASE_SCHEDULE_NEXT, LLM_PHASE_PREPARE_NEXT, &mark);
        pthread_mutex_lock(&s->wmu);
        s->w_rows = rows;
        s->w_done = 1;
        pthread_cond_broadcast(&s->wcv);
    }
    pthread_mutex_unlock(&s->wmu);
    return NULL;
}

static double now(const llm_engine *s)
{
    return s->o.clock ? s->o.clock(s->o.clock_u) : mlsys_now_s();
}

/* One request moving between roles (see engine.h for what count and phase carry). */
static void flow(llm_engine *s, int from, int to, int seq, int count, int phase)
{
    if (!s->o.comm)
        return;
    mlsys_flow_info f = {(int16_t)from, (int16_t)to, MLSYS_FLOW_REQUESTS, (int16_t)phase,
                         count, (int32_t)s->step_no, seq, 0};
    mlsys_emit_flow(s->o.comm, &f, 0, NULL);
}

/* A rank is bound to one core (core/launch.c, as mpirun binds); its threads inherit that,
 * and a planner on the forward's core overlaps nothing: woken, it even takes the core from
 * the forward. So the worker gets the other cores when the stepping thread is bound to
 * some, every core when it is not (best effort: cgroups may narrow it). */
static void place_worker(pthread_t th)
{
    cpu_set_t mine, other;
    if (sched_getaffinity(0, sizeof mine, &mine) != 0)
        return;
    CPU_ZERO(&other);
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    for (long i = 0; i < n && i < CPU_SETSIZE; i++)
        if (!CPU_ISSET((int)i, &mine))
            CPU_SET((int)i, &other);
    if (CPU_COUNT(&other) > 0)
        pthread_setaffinity_np(th, sizeof other, &other);
}

/* Is anything queued, running or submitted? (under mu) */
static int work_locked(const llm_engine *s)
{
    return s->inbox.n > 0 || s->n_cancels > 0 || s->busy > 0;
}

/* The gate before a step with work ("engine step N"), or while there is none ("engine
 * idle"): gated, the stepping thread waits there for the viewer, once per call; not gated,
 * an idle gate is said once per idle period (a frame that says the engine had nothing). */
static void gate(llm_engine *s, int idle)
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
static void step_record(llm_engine *s, int rows, int tokens, double secs)
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

llm_engine *llm_engine_create(const llm_config *c, const llm_weights *w,
                            const llm_engine_opts *o, char *err, size_t errlen)
{
    llm_engine_opts d = *o;
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
        snprintf(err, errlen, "engine: max_num_seqs %d (1..4096), max_num_batched_tokens %d "
                 "(max_num_seqs..65536), block_size %d (1..%d), %d blocks (at least %d: one "
                 "full context)", d.max_num_seqs, d.max_num_batched_tokens, d.block_size,
                 c->seq_len, d.n_blocks, per_seq);
        return NULL;
    }
    if (d.tok && d.tok->vocab_size != c->vocab_size) {
        snprintf(err, errlen, "engine: the tokenizer has %d ids, the model %d",
                 d.tok->vocab_size, c->vocab_size);
        return NULL;
    }
    llm_engine *s = mlsys_xcalloc(1, sizeof *s);
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
    for (int i = 0; i < 2; i++) {
        llm_batch_init(&s->bt[i], d.max_num_batched_tokens, d.max_num_seqs);
        s->pre[i] = mlsys_xmalloc((size_t)d.max_num_seqs * sizeof(int));
    }
    if (d.overlap) {
        pthread_mutex_init(&s->wmu, NULL);
        pthread_cond_init(&s->wcv, NULL);
        if (pthread_create(&s->worker, NULL, worker_main, s) != 0) {
            fprintf(stderr, "engine: no worker thread: the overlap scheduler is off\n");
            s->o.overlap = 0;
            pthread_mutex_destroy(&s->wmu);
            pthread_cond_destroy(&s->wcv);
        } else {
            s->worker_up = 1;
            place_worker(s->worker);
        }
    }
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

int llm_engine_submit(llm_engine *s, const llm_request *r, char *err, size_t errlen)
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

int llm_engine_cancel(llm_engine *s, int id)
{
    pthread_mutex_lock(&s->mu);
    int rc = -1;
    if (id >= 0 && id < s->next_id) {
        if (s->n_cancels == s->cap_cancels) {
            s->cap_cancels = s->cap_cancels ? 2 * s->cap_cancels : 16;
            int *p = realloc(s->cancels, (size_t)s->cap_cancels * sizeof(int));
            if (!p) {
                fprintf(stderr, "engine: out of memory for cancels\n");
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

static void note_finished(llm_engine *s, int id)
{
    if (s->n_finished == s->cap_finished) {
        s->cap_finished = s->cap_finished ? 2 * s->cap_finished : 32;
        int *p = realloc(s->finished, (size_t)s->cap_finished * sizeof(int));
        if (!p) {
            fprintf(stderr, "engine: out of memory\n");
            exit(1);
        }
        s->finished = p;
    }
    s->finished[s->n_finished++] = id;
}

static void hist_add(long *h, double v)
{
    int b = 0;
    while (b < LLM_ENGINE_HIST_N - 1 && v > llm_engine_hist_bounds[b])
        b++;
    h[b]++;
}

/* Item index of q in b, -1. */
static int item_of(const llm_batch *b, const llm_seq *q)
{
    for (int i = 0; i < b->n_items; i++)
        if (b->items[i].s == q)
            return i;
    return -1;
}

/* Deliver an event for q (token or -1) and, when why != NONE, retire and free it (leaving
 * the next step's plan first: its item there is a decode whose token is q's last one). */
static void deliver(llm_engine *s, llm_seq *q, int token, llm_finish why)
{
    double t = now(s);
    if (why != LLM_FINISH_NONE && s->ahead) {
        llm_batch *nb = &s->bt[s->cur ^ 1];
        int i = item_of(nb, q);
        if (i >= 0) {
            llm_batch_drop(nb, i);
            s->dirty = 1;
        }
    }
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
    llm_engine_event ev = {q->id, token, q->st.n_out, NULL, 0, why, &q->st};
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

static llm_seq *find_live(llm_engine *s, int id)
{
    for (llm_seq *q = s->sc.running.head; q; q = q->next)
        if (q->id == id)
            return q;
    for (llm_seq *q = s->sc.waiting.head; q; q = q->next)
        if (q->id == id)
            return q;
    return NULL;
}

/* q may leave the plan made ahead: it is not in it, or only as a decode of a token still to
 * come (no block of the prefix cache waits for that row). */
static int droppable(const llm_batch *b, const llm_seq *q)
{
    int row = 0;
    for (int i = 0; i < b->n_items; row += b->items[i].n, i++)
        if (b->items[i].s == q)
            return b->items[i].n == 1 && !b->items[i].prefill && b->rtok[row] < 0;
    return 1;
}

/* Submissions join the waiting queue; with cancels = 1, cancels free their blocks now,
 * except for a request the next step's plan computes known tokens for (its rows may fill
 * blocks the prefix cache already lists): that cancel waits for a step boundary where
 * nothing is planned ahead (a prompt being prefilled may then run one step more). */
static void take_in(llm_engine *s, int cancels_too)
{
    pthread_mutex_lock(&s->mu);
    llm_seq_queue in = s->inbox;
    memset(&s->inbox, 0, sizeof s->inbox);
    s->busy += in.n;
    int nc = cancels_too ? s->n_cancels : 0;
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
        if (q && s->ahead && !droppable(&s->bt[s->cur ^ 1], q)) {
            llm_engine_cancel(s, cancels[i]);
            continue;
        }
        if (q)
            deliver(s, q, -1, LLM_FINISH_CANCEL);
    }
    free(cancels);
}

static void publish(llm_engine *s)
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

/* "forward P3:24 P5:8 D0,1,2": who prefills how many rows, who decodes (cut to the
 * label's size). */
static void step_label(const llm_step_item *items, int n_items, char *out, size_t n)
{
    size_t len = (size_t)snprintf(out, n, "forward");
    for (int pass = 1; pass >= 0; pass--) {
        int first = 1;
        for (int i = 0; i < n_items && len + 1 < n; i++) {
            const llm_step_item *it = &items[i];
            if (it->prefill != pass)
                continue;
            int k = pass ? snprintf(out + len, n - len, "%sP%d:%d", len ? " " : "", it->id,
                                    it->n)
                         : snprintf(out + len, n - len, "%s%d", first ? (len ? " D" : "D") : ",",
                                    it->id);
            first = 0;
            len += (size_t)k < n - len ? (size_t)k : n - len - 1;
        }
    }
}

/* Plan a step into bt[k] (schedule phase: take in, plan; prepare phase: the rows). Returns
 * the rows planned (0: nothing to run) or -1. */
static int plan_into(llm_engine *s, int k, int cancels_too, int ph_sched, int ph_prep,
                     uint64_t *mark)
{
    char err[256];
    take_in(s, cancels_too);
    llm_sched *sc = &s->sc;
    int rows = llm_sched_plan(sc);
    s->n_pre[k] = sc->n_preempted;
    memcpy(s->pre[k], sc->preempted, (size_t)sc->n_preempted * sizeof(int));
    for (int i = 0; i < sc->n_preempted; i++)
        flow(s, ROLE_SCHED, ROLE_QUEUE, sc->preempted[i], 0, -1);
    if (s->o.plan_hook && rows > 0)
        s->o.plan_hook(s->o.plan_hook_u);
    phase_end_at(s, ph_sched, mark);
    if (rows == 0) {
        s->bt[k].n_items = 0;
        return 0;
    }
    if (llm_runner_prepare(&s->run, &s->bt[k], sc->items, sc->n_items, sc->n_admitted, err,
                           sizeof err)) {
        fprintf(stderr, "engine: step %ld: %s\n", s->step_no + 1, err);
        return -1;
    }
    phase_end_at(s, ph_prep, mark);
    return rows;
}

/* The step begins: its number and its flows (admitted, and the rows each request runs). */
static void step_begins(llm_engine *s, const llm_batch *b)
{
    s->step_no++;
    for (int i = b->n_items - b->n_admitted; i < b->n_items; i++)
        flow(s, ROLE_QUEUE, ROLE_SCHED, b->items[i].s->id, b->items[i].s->n_computed, -1);
    for (int i = 0; i < b->n_items; i++)
        flow(s, ROLE_SCHED, ROLE_MODEL, b->items[i].s->id, b->items[i].n, b->items[i].prefill);
}

/* The next step may be planned while this one's forward runs: nothing can be preempted (the
 * pool holds every running sequence's blocks up to its last token, the futures counted), no
 * sequence of this step must stop for its length, and no cancel is waiting. */
static int can_plan_ahead(llm_engine *s, const llm_batch *b)
{
    for (int i = 0; i < b->n_items; i++) {
        const llm_seq *q = b->items[i].s;
        if (b->samples[i] && (q->n_tok + 1 - q->n_prompt >= q->max_tokens ||
                              q->n_tok + 1 > s->c.seq_len))
            return 0;
    }
    pthread_mutex_lock(&s->mu);
    int cancels = s->n_cancels;
    pthread_mutex_unlock(&s->mu);
    if (cancels)
        return 0;
    int bs = llm_paged_block_size(&s->kv), need = 0;
    for (const llm_seq *q = s->sc.running.head; q; q = q->next) {
        const int *blk;
        int nb = 0;
        llm_paged_table(&s->kv, q->kv_seq, &blk, &nb);
        int want = (q->n_tok + 1 + bs - 1) / bs;    /* + 1: a future token, at most */
        need += want > nb ? want - nb : 0;
    }
    return need <= llm_paged_pool_count(&s->kv);
}

static void emit_spans(llm_engine *s, const llm_batch *b)
{
    if (!s->o.comm)
        return;
    char label[32];
    step_label(s->items, b->n_items, label, sizeof label);   /* ids: b's sequences may be
                                                                  retired and freed by now */
    int order[LLM_PHASE_COUNT], n = 0;
    for (int p = 0; p < LLM_PHASE_COUNT; p++) {
        if (p == LLM_PHASE_WAIT || !s->st.t1[p])
            continue;             /* waiting is idle time: no span */
        int k = n++;
        while (k > 0 && s->st.t0[order[k - 1]] > s->st.t0[p]) {
            order[k] = order[k - 1];        /* in time order: the views draw them so */
            k--;
        }
        order[k] = p;
    }
    for (int i = 0; i < n; i++) {
        int p = order[i];
        const char *name = p == LLM_PHASE_FORWARD ? label
                           : p == LLM_PHASE_SCHEDULE_NEXT ? "schedule"
                           : p == LLM_PHASE_PREPARE_NEXT ? "prepare" : phase_names[p];
        mlsys_compute_span(s->o.comm, p == LLM_PHASE_FORWARD ? 0 : 1, s->st.t0[p], s->st.t1[p],
                           name);
    }
}

/* After the forward of b: draw the tokens (sample phase), stream them and retire what
 * finished (detokenize phase), fill info. rc != 0: the forward failed. */
static int step_ends(llm_engine *s, const llm_batch *b, int rc, const char *err,
                     llm_step_info *info, int k, double t0)
{
    if (!rc)
        llm_runner_sample(&s->run, b, s->next);
    phase_end(s, LLM_PHASE_SAMPLE);
    s->m.prefill_tokens += b->prefill_rows;
    s->m.decode_tokens += b->decode_rows;
    int n_items = b->n_items;
    for (int i = 0; i < n_items; i++) {
        const llm_sched_item *it = &b->items[i];
        s->items[i] = (llm_step_item){it->s->id, it->start, it->n, it->prefill,
                                      rc ? -1 : s->next[i]};
    }
    if (rc) {
        fprintf(stderr, "engine: step %ld: %s\n", s->step_no, err);
        for (int i = 0; i < n_items; i++)
            deliver(s, b->items[i].s, -1, LLM_FINISH_ERROR);
    }
    int drawn = 0;
    if (!rc) {
        for (int i = 0; i < n_items; i++) {
            llm_seq *q = b->items[i].s;
            if (s->next[i] < 0)
                continue;
            llm_finish why = llm_seq_append(q, s->next[i], s->o.tok, s->c.seq_len);
            s->m.generated_tokens++;
            drawn++;
            deliver(s, q, s->next[i], why);
        }
    }
    take_in(s, 1);        /* cancels the callbacks asked for */
    publish(s);
    s->idle_said = 0;
    step_record(s, b->rows, drawn, now(s) - t0);
    if (info) {
        info->step = s->step_no;
        info->n_items = n_items;
        info->items = s->items;
        info->rows = b->rows;
        info->prefill_rows = b->prefill_rows;
        info->decode_rows = b->decode_rows;
        info->n_admitted = b->n_admitted;
        info->n_preempted = s->n_pre[k];
        info->preempted = s->pre[k];
        info->n_finished = s->n_finished;
        info->finished = s->finished;
        info->t_end = now(s);
    }
    phase_end(s, LLM_PHASE_DETOKENIZE);
    s->st.t_end = s->mark;
    s->st.step = s->step_no;
    s->st.n_seqs = n_items;
    s->st.rows = b->rows;
    emit_spans(s, b);
    s->last = s->st;
    return rc ? -1 : 1;
}

static int nothing_to_run(llm_engine *s, llm_step_info *info, double t0)
{
    publish(s);
    if (info) {
        info->n_finished = s->n_finished;
        info->finished = s->finished;
        info->t_start = t0;
        info->t_end = now(s);
    }
    return 0;
}

/* Without overlap: every phase in turn on this thread. */
static int step_plain(llm_engine *s, llm_step_info *info, double t0)
{
    char err[256] = "";
    int rows = plan_into(s, 0, 1, LLM_PHASE_SCHEDULE, LLM_PHASE_PREPARE, &s->mark);
    if (rows < 0)
        return -1;
    if (rows == 0)
        return nothing_to_run(s, info, t0);
    llm_batch *b = &s->bt[0];
    step_begins(s, b);
    int rc = llm_runner_forward(&s->run, b, err, sizeof err);
    phase_end(s, LLM_PHASE_FORWARD);
    for (int i = 0; i < b->n_items; i++) {
        llm_seq *q = b->items[i].s;
        q->n_computed += q->n_sched;
        q->n_sched = 0;
    }
    if (info)
        info->t_start = t0;
    return step_ends(s, b, rc, err, info, 0, t0);
}

/* With overlap: this step (planned ahead by the previous one, or now) runs its forward on
 * this thread while the worker plans and prepares the next step; then wait for the worker
 * (when it is slower than the forward), sample, stream. */
static int step_overlap(llm_engine *s, llm_step_info *info, double t0)
{
    char err[256] = "";
    int planned = s->ahead;
    if (planned) {
        s->cur ^= 1;
        s->ahead = 0;
        if (s->bt[s->cur].n_items == 0)     /* every request in it finished meanwhile */
            planned = 0;
    }
    int k = s->cur, rc = 0;
    llm_batch *b = &s->bt[k];
    if (!planned) {
        s->dirty = 0;
        int rows = plan_into(s, k, 1, LLM_PHASE_SCHEDULE, LLM_PHASE_PREPARE, &s->mark);
        if (rows < 0)
            return -1;
        if (rows == 0)
            return nothing_to_run(s, info, t0);
    } else if (s->dirty) {
        s->dirty = 0;       /* a request left the plan: its rows again */
        rc = llm_runner_prepare(&s->run, b, b->items, b->n_items, b->n_admitted, err,
                                sizeof err);
    }
    step_begins(s, b);
    if (!rc && llm_runner_resolve(b)) {
        rc = -1;
        snprintf(err, sizeof err, "a token planned ahead never came");
    }
    /* the sequences move on to where this forward leaves them, the token each is drawing a
     * future (-1) until it is drawn: the worker plans from there */
    for (int i = 0; i < b->n_items; i++) {
        b->items[i].s->n_computed += b->items[i].n;
        b->items[i].s->n_sched = 0;
    }
    int job = !rc && can_plan_ahead(s, b);
    if (job) {
        for (int i = 0; i < b->n_items; i++)
            if (b->samples[i]) {
                llm_seq *q = b->items[i].s;
                q->tok[q->n_tok++] = -1;
            }
        s->st.overlapped = 1;
        pthread_mutex_lock(&s->wmu);
        s->w_k = k ^ 1;
        s->w_done = 0;
        s->w_job = 1;
        pthread_cond_broadcast(&s->wcv);
        pthread_mutex_unlock(&s->wmu);
    }
    phase_end(s, LLM_PHASE_LAUNCH);
    if (!rc)
        rc = llm_runner_forward(&s->run, b, err, sizeof err);
    phase_end(s, LLM_PHASE_FORWARD);
    if (job) {
        pthread_mutex_lock(&s->wmu);
        while (!s->w_done)
            pthread_cond_wait(&s->wcv, &s->wmu);
        s->ahead = s->w_rows > 0;
        pthread_mutex_unlock(&s->wmu);
        phase_end(s, LLM_PHASE_WAIT);
        for (int i = 0; i < b->n_items; i++)
            if (b->samples[i])
                b->items[i].s->n_tok--;
    }
    if (info)
        info->t_start = t0;
    return step_ends(s, b, rc, err, info, k, t0);
}

int llm_engine_step(llm_engine *s, llm_step_info *info)
{
    if (s->o.comm) {          /* the gate comes before the step and is not timed */
        pthread_mutex_lock(&s->mu);
        int idle = !work_locked(s);
        pthread_mutex_unlock(&s->mu);
        gate(s, idle);
    }
    double t0 = now(s);
    memset(&s->st, 0, sizeof s->st);
    s->st.t_start = s->mark = mlsys_now_ns();
    s->n_finished = 0;
    if (info)
        memset(info, 0, sizeof *info);
    return s->o.overlap ? step_overlap(s, info, t0) : step_plain(s, info, t0);
}

int llm_engine_has_work(llm_engine *s)
{
    pthread_mutex_lock(&s->mu);
    int w = s->inbox.n > 0 || s->n_cancels > 0 || s->busy > 0;
    pthread_mutex_unlock(&s->mu);
    return w;
}

int llm_engine_wait(llm_engine *s, double timeout_s)
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

long llm_engine_run(llm_engine *s)
{
    long steps = 0;
    while (llm_engine_has_work(s)) {
        int rc = llm_engine_step(s, NULL);
        if (rc < 0)
            return -1;
        steps += rc;
    }
    return steps;
}

void llm_engine_metrics_get(llm_engine *s, llm_engine_metrics *m)
{
    pthread_mutex_lock(&s->mu);
    *m = s->snap;
    pthread_mutex_unlock(&s->mu);
}

void llm_engine_last_stats(const llm_engine *s, llm_step_stats *st)
{
    *st = s->last;
}

const llm_kv *llm_engine_kv(const llm_engine *s)
{
    return &s->kv;
}

void llm_engine_free(llm_engine *s)
{
    if (!s)
        return;
    s->ahead = 0;             /* a plan made ahead is dropped with its requests */
    take_in(s, 1);
    while (s->sc.running.head)
        deliver(s, s->sc.running.head, -1, LLM_FINISH_CANCEL);
    while (s->sc.waiting.head)
        deliver(s, s->sc.waiting.head, -1, LLM_FINISH_CANCEL);
    if (s->worker_up) {
        pthread_mutex_lock(&s->wmu);
        s->w_quit = 1;
        pthread_cond_broadcast(&s->wcv);
        pthread_mutex_unlock(&s->wmu);
        pthread_join(s->worker, NULL);
        pthread_mutex_destroy(&s->wmu);
        pthread_cond_destroy(&s->wcv);
    }
    for (int i = 0; i < 2; i++) {
        llm_batch_fini(&s->bt[i]);
        free(s->pre[i]);
    }
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
