/* engine.c - the engine loop and its API: requests come in from any thread (submit, cancel),
 * one thread calls llm_engine_step, and each step takes in what arrived, asks the scheduler
 * for a plan, runs it through the model runner, streams every new token to its request's
 * callback and retires what finished. With the overlap option a worker thread plans the next
 * step while this thread runs the forward. What the engine measures and the events it emits
 * are engine_stats.c's; this file only calls them at fixed points. */
#include "engine_internal.h"
#include "tp_step.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sched.h>
#include <unistd.h>

double eng_now(const llm_engine *s)
{
    return s->o.clock ? s->o.clock(s->o.clock_u) : mlsys_now_s();
}

static int plan_into(llm_engine *s, int k, int cancels_too, int ph_sched, int ph_prep,
                     uint64_t *mark);

/* ---- the overlap worker ---- */

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

/* ---- create, submit, cancel ---- */

llm_engine *llm_engine_create(const llm_config *c, const llm_weights *w,
                              const llm_engine_opts *o, char *err, size_t errlen)
{
    /* defaults, and a context and a cache sized by what the run needs, checked against the
     * free memory before anything is allocated (engine_mem.c); from here on c is the
     * engine's view of the model, its context cut to max_model_len */
    llm_engine_opts d = *o;
    if (llm_engine_plan(c, &d, err, errlen))
        return NULL;
    llm_config run = *c;
    run.seq_len = d.max_model_len;
    c = &run;
    if (d.tok && d.tok->vocab_size != c->vocab_size) {
        snprintf(err, errlen, "engine: the tokenizer has %d ids, the model %d",
                 d.tok->vocab_size, c->vocab_size);
        return NULL;
    }
    llm_engine *s = mlsys_xcalloc(1, sizeof *s);
    s->c = *c;
    s->w = w;
    s->o = d;
    s->max_len = d.max_model_len;
    if (d.spec_k > 0) {
        /* a step's tokens are not known in number before it runs: nothing is planned ahead */
        s->o.overlap = 0;
        if (llm_drafter_init(&s->draft, c, d.draft_c, d.draft_w, d.spec_k, d.max_num_seqs,
                             d.max_model_len, d.block_size, d.spec_rule,
                             d.spec_draft_temperature, err, errlen)) {
            free(s);
            return NULL;
        }
        s->have_draft = 1;
    }
    /* the cache's memory records: with the engine's other events (comm, pool 0), or alone
     * under the caller's pool and role (mem_comm) */
    llm_paged_opts po = {.block_size = d.block_size, .n_blocks = d.n_blocks,
                         .n_seqs = d.max_num_seqs, .max_len = d.max_model_len,
                         .no_prefix_cache = d.no_prefix_cache, .alloc = d.alloc,
                         .comm = d.comm ? d.comm : d.mem_comm};
    if (!d.comm && d.mem_comm) {
        po.pool = d.mem_pool;
        po.named_role = d.mem_role >= 0;
        po.role = d.mem_role;
    }
    /* on a tensor-parallel group this rank's cache holds its share of the key/value heads
     * (engine_mem.c checked that the group's size divides them) */
    llm_config kvc = *c;
    if (d.tp)
        llm_tp_kv_config(c, mlsys_size(d.tp), &kvc);
    if (llm_kv_init_paged(&s->kv, &kvc, &po, err, errlen)) {
        llm_drafter_fini(&s->draft);
        free(s);
        return NULL;
    }
    llm_sched_init(&s->sc, &s->kv, d.max_num_seqs, d.max_num_batched_tokens, d.admit,
                   d.admit_u);
    s->sc.max_len = d.max_model_len;
    s->sc.spec = s->have_draft ? &s->draft : NULL;
    if (llm_runner_init(&s->run, c, w, &s->kv, d.max_num_batched_tokens, d.max_num_seqs,
                        eng_max_logits(&d), eng_runner_rows(c, &d), d.tp, err, errlen)) {
        llm_sched_fini(&s->sc);
        llm_kv_free(&s->kv);
        llm_drafter_fini(&s->draft);
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
    /* JSON mode's grammar over the tokenizer's vocabulary: any object or array */
    char jerr[256];
    if (d.tok && llm_json_grammar_init_tok(&s->json, d.tok, NULL, jerr, sizeof jerr) == 0)
        s->have_json = 1;
    eng_stats_init(s);
    return s;
}

int llm_engine_submit(llm_engine *s, const llm_request *r, char *err, size_t errlen)
{
    double t = eng_now(s);
    int n = r->n > 1 ? r->n : 1;
    if (r->n < 0 || n > s->o.max_num_seqs) {
        snprintf(err, errlen, "n %d: 1 to %d samples (the engine runs %d sequences at once)",
                 r->n, s->o.max_num_seqs, s->o.max_num_seqs);
        return -1;
    }
    llm_request rq = *r;
    if (rq.json && !rq.grammar && s->have_json)
        rq.grammar = &s->json;
    r = &rq;
    llm_seq *q = llm_seq_create(-1, 0, r, &s->c, s->max_len, s->o.tok, err, errlen);
    if (!q)
        return -1;
    q->st.t_arrival = t;
    /* drafted for on an engine with a draft model, unless it opts out (JSON never: a draft
     * would have to write under the mask too) */
    q->spec = s->have_draft && !r->no_speculate && !r->json;
    /* choices 1..n-1 wait on choice 0 until its prompt is prefilled (then they fork) */
    llm_seq **tail = &q->forks;
    for (int i = 1; i < n; i++) {
        llm_seq *f = llm_seq_create(-1, i, r, &s->c, s->max_len, s->o.tok, err, errlen);
        f->st.t_arrival = t;
        f->spec = q->spec;
        *tail = f;
        tail = &f->fnext;
        q->n_forks++;
    }
    pthread_mutex_lock(&s->mu);
    int id = s->next_id;
    s->next_id += n;
    q->id = q->req_id = id;
    for (llm_seq *f = q->forks; f; f = f->fnext) {
        f->req_id = id;
        f->id = id + f->index;
    }
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

/* ---- delivering and retiring ---- */

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
    double t = eng_now(s);
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
    llm_engine_event ev = {q->req_id, q->index, token, q->st.n_out, NULL, 0, why, &q->st};
    if (s->o.tok)
        ev.text_len = llm_seq_take_text(q, why != LLM_FINISH_NONE, &ev.text);
    if (q->on_event)
        q->on_event(q->u, &ev);
    if (why == LLM_FINISH_NONE)
        return;
    eng_flow(s, ENG_ROLE_MODEL, ENG_ROLE_CLIENT, q->id, q->st.n_out, -1);
    note_finished(s, q->id);
    pthread_mutex_lock(&s->mu);
    s->busy--;
    pthread_mutex_unlock(&s->mu);
    eng_count_finished(s, q);
    /* choices that never forked from it end with it (cancelled, failed, or the engine's end) */
    while (q->forks) {
        llm_seq *f = q->forks;
        q->forks = f->fnext;
        q->n_forks--;
        f->fnext = NULL;
        f->status = LLM_SEQ_FINISHED;
        deliver(s, f, -1, why == LLM_FINISH_ERROR ? why : LLM_FINISH_CANCEL);
    }
    llm_seq_free(q);
}

/* The next live sequence of request id (running first, then waiting), NULL when none. */
static llm_seq *find_live(llm_engine *s, int id)
{
    for (llm_seq *q = s->sc.running.head; q; q = q->next)
        if (q->req_id == id)
            return q;
    for (llm_seq *q = s->sc.waiting.head; q; q = q->next)
        if (q->req_id == id)
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

/* Submissions join the waiting queue; with cancels_too, cancels free their blocks now,
 * except for a request the next step's plan computes known tokens for (its rows may fill
 * blocks the prefix cache already lists): that cancel waits for a step boundary where
 * nothing is planned ahead (a prompt being prefilled may then run one step more). */
static void take_in(llm_engine *s, int cancels_too)
{
    pthread_mutex_lock(&s->mu);
    llm_seq_queue in = s->inbox;
    memset(&s->inbox, 0, sizeof s->inbox);
    for (llm_seq *q = in.head; q; q = q->next)
        s->busy += 1 + q->n_forks;
    int nc = cancels_too ? s->n_cancels : 0;
    int *cancels = NULL;
    if (nc) {
        cancels = mlsys_xmalloc((size_t)nc * sizeof(int));
        memcpy(cancels, s->cancels, (size_t)nc * sizeof(int));
        s->n_cancels = 0;
    }
    pthread_mutex_unlock(&s->mu);
    while (in.head) {
        llm_seq *q = in.head;
        eng_flow(s, ENG_ROLE_CLIENT, ENG_ROLE_QUEUE, q->id, q->n_prompt, -1);
        llm_queue_remove(&in, q);
        llm_queue_push_back(&s->sc.waiting, q);
    }
    for (int i = 0; i < nc; i++) {
        /* every choice of the request; one the plan made ahead still needs waits */
        int retry = 0;
        llm_seq *q;
        while ((q = find_live(s, cancels[i])) != NULL && !retry) {
            if (s->ahead && !droppable(&s->bt[s->cur ^ 1], q))
                retry = 1;
            else
                deliver(s, q, -1, LLM_FINISH_CANCEL);
        }
        if (retry)
            llm_engine_cancel(s, cancels[i]);
    }
    free(cancels);
}

/* ---- planning ---- */

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
        eng_flow(s, ENG_ROLE_SCHED, ENG_ROLE_QUEUE, sc->preempted[i], 0, -1);
    if (s->o.plan_hook && rows > 0)
        s->o.plan_hook(s->o.plan_hook_u);
    eng_phase_at(s, ph_sched, mark);
    if (rows == 0) {
        s->bt[k].n_items = 0;
        return 0;
    }
    if (llm_runner_prepare(&s->run, &s->bt[k], sc->items, sc->n_items, sc->n_admitted, err,
                           sizeof err)) {
        fprintf(stderr, "engine: step %ld: %s\n", s->step_no + 1, err);
        return -1;
    }
    eng_phase_at(s, ph_prep, mark);
    return rows;
}

/* The batch this step runs: the plan made ahead by the previous step (prepared again when a
 * request left it), or one made now. NULL when there is nothing to run; *rc -1 on an error. */
static llm_batch *this_step(llm_engine *s, int *rc, char *err, size_t errlen)
{
    *rc = 0;
    if (s->ahead) {
        s->cur ^= 1;
        s->ahead = 0;
        llm_batch *b = &s->bt[s->cur];
        if (b->n_items > 0) {           /* else every request in it finished meanwhile */
            if (s->dirty)
                *rc = llm_runner_prepare(&s->run, b, b->items, b->n_items, b->n_admitted, err,
                                         errlen);
            s->dirty = 0;
            return b;
        }
    }
    s->dirty = 0;
    int rows = plan_into(s, s->cur, 1, LLM_PHASE_SCHEDULE, LLM_PHASE_PREPARE, &s->mark);
    if (rows < 0)
        *rc = -1;
    return rows > 0 ? &s->bt[s->cur] : NULL;
}

/* With overlap, the next step may be planned while this one's forward runs: nothing can be
 * preempted (the pool holds every running sequence's blocks up to its last token, the
 * futures counted), no sequence of this step must stop for its length, and no cancel is
 * waiting. */
static int can_plan_ahead(llm_engine *s, const llm_batch *b)
{
    if (!s->o.overlap)
        return 0;
    for (int i = 0; i < b->n_items; i++) {
        const llm_seq *q = b->items[i].s;
        if (b->samples[i] && (q->n_tok + 1 - q->n_prompt >= q->max_tokens ||
                              q->n_tok + 1 > s->max_len))
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

/* Hand the next step's planning to the worker: the tokens this step is drawing are futures
 * (-1) it plans around. */
static void plan_ahead_start(llm_engine *s, const llm_batch *b)
{
    for (int i = 0; i < b->n_items; i++)
        if (b->samples[i]) {
            llm_seq *q = b->items[i].s;
            q->tok[q->n_tok++] = -1;
        }
    s->st.overlapped = 1;
    pthread_mutex_lock(&s->wmu);
    s->w_k = s->cur ^ 1;
    s->w_done = 0;
    s->w_job = 1;
    pthread_cond_broadcast(&s->wcv);
    pthread_mutex_unlock(&s->wmu);
}

static void plan_ahead_wait(llm_engine *s, const llm_batch *b)
{
    pthread_mutex_lock(&s->wmu);
    while (!s->w_done)
        pthread_cond_wait(&s->wcv, &s->wmu);
    s->ahead = s->w_rows > 0;
    pthread_mutex_unlock(&s->wmu);
    eng_phase(s, LLM_PHASE_WAIT);
    for (int i = 0; i < b->n_items; i++)
        if (b->samples[i])
            b->items[i].s->n_tok--;
}

/* ---- the step ---- */

/* q's new token into its text, out to its callback; q retires (and is freed) when that ends
 * it. Returns why it ended, LLM_FINISH_NONE while it goes on. */
static llm_finish append(llm_engine *s, llm_seq *q, int tok)
{
    if (tok < 0) {            /* JSON mode: no token may follow (the budget should prevent it) */
        fprintf(stderr, "engine: request %d: no token may follow the JSON state %s\n",
                q->req_id, llm_json_mode_name(&q->js));
        deliver(s, q, -1, LLM_FINISH_ERROR);
        return LLM_FINISH_ERROR;
    }
    llm_finish why = llm_seq_append(q, tok, s->o.tok, s->max_len);
    s->m.generated_tokens++;
    deliver(s, q, tok, why);
    return why;
}

/* The prompt of item i's sequence (choice 0 of a request of n samples) has just been
 * computed: the other choices fork its blocks now (reference counts; the first write into
 * its partial last block copies that block). Returns those that did (linked by fnext); one
 * that found no free table waits as a request of its own. */
static llm_seq *fork_choices(llm_engine *s, const llm_batch *b, int i)
{
    llm_seq *q = b->items[i].s, *done = NULL, **tail = &done;
    while (q->forks) {
        llm_seq *f = q->forks;
        q->forks = f->fnext;
        q->n_forks--;
        f->fnext = NULL;
        if (llm_sched_fork(&s->sc, q, f) == 0) {
            eng_flow(s, ENG_ROLE_QUEUE, ENG_ROLE_SCHED, f->id, f->n_computed, -1);
            *tail = f;
            tail = &f->fnext;
        } else {
            llm_queue_push_back(&s->sc.waiting, f);
        }
    }
    return done;
}

/* A speculative decode after the forward: the rule keeps a prefix of its drafts and adds a
 * token of the target's; they go out one by one (the sequence may end on any of them), and
 * both caches roll back past what was refused. Returns the tokens committed. */
static int commit_round(llm_engine *s, const llm_batch *b, int i)
{
    llm_seq *q = b->items[i].s;
    llm_step_item *it = &s->items[i];
    int out[LLM_SPEC_MAX_K + 1];
    int n = llm_drafter_verify(&s->draft, q, i, b->items[i].spec,
                               llm_runner_logits(&s->run, b, i), out, it);
    llm_finish why = LLM_FINISH_NONE;
    int c = 0;
    while (c < n && why == LLM_FINISH_NONE) {
        it->token = out[c];
        q->spec_st.tokens++;
        why = append(s, q, out[c++]);     /* q is freed when that token ends it */
    }
    it->committed = c;
    s->draft.st.tokens += c;
    if (why == LLM_FINISH_NONE) {
        q->n_computed = q->n_tok - 1;     /* the last token is fed by the next round */
        llm_drafter_rollback(&s->draft, &s->kv, q);
    }
    return c;
}

/* After the forward: draw the tokens (sample phase), then stream them and retire what
 * finished (detokenize phase). rc != 0: the forward failed and its requests fail. Returns
 * the tokens drawn. */
static int stream_tokens(llm_engine *s, const llm_batch *b, int rc, const char *err)
{
    if (!rc)
        llm_runner_sample(&s->run, b, s->next);
    eng_phase(s, LLM_PHASE_SAMPLE);
    for (int i = 0; i < b->n_items; i++) {
        const llm_sched_item *it = &b->items[i];
        llm_step_item *si = &s->items[i];
        memset(si, 0, sizeof *si);
        si->id = it->s->id;
        si->start = it->start;
        si->n = it->n;
        si->prefill = it->prefill;
        si->token = rc || s->next[i] < 0 ? -1 : s->next[i];
    }
    if (rc) {
        fprintf(stderr, "engine: step %ld: %s\n", s->step_no, err);
        for (int i = 0; i < b->n_items; i++)
            deliver(s, b->items[i].s, -1, LLM_FINISH_ERROR);
        return 0;
    }
    int drawn = 0;
    for (int i = 0; i < b->n_items; i++) {
        llm_seq *q = b->items[i].s;
        if (b->items[i].spec > 0) {
            drawn += commit_round(s, b, i);
            continue;
        }
        if (s->next[i] == -1)
            continue;
        llm_seq *forked = q->forks ? fork_choices(s, b, i) : NULL;
        drawn += append(s, q, s->next[i]) != LLM_FINISH_ERROR;
        while (forked) {          /* the other choices draw from the same logits */
            llm_seq *f = forked;
            forked = f->fnext;
            f->fnext = NULL;
            int t = llm_runner_draw(&s->run, f, llm_runner_logits(&s->run, b, i));
            drawn += append(s, f, t) != LLM_FINISH_ERROR;
        }
    }
    return drawn;
}

/* One iteration, in the order nano-vllm's step reads: schedule, run, postprocess. */
int llm_engine_step(llm_engine *s, llm_step_info *info)
{
    char err[256] = "";
    if (s->o.comm) {          /* the gate comes before the step and is not timed */
        pthread_mutex_lock(&s->mu);
        int idle = s->inbox.n == 0 && s->n_cancels == 0 && s->busy == 0;
        pthread_mutex_unlock(&s->mu);
        eng_gate(s, idle);
    }
    eng_step_start(s, info);
    int rc;
    llm_batch *b = this_step(s, &rc, err, sizeof err);
    if (!b) {
        if (rc)
            return -1;
        eng_step_idle(s, info);
        return 0;
    }
    eng_step_runs(s, b);      /* its number, and who is admitted and runs (flows) */
    if (!rc && s->have_draft) {   /* speculative decoding: the drafts to verify */
        rc = llm_drafter_draft(&s->draft, b, err, sizeof err);
        eng_phase(s, LLM_PHASE_DRAFT);
    }
    if (!rc && llm_runner_resolve(b)) {
        rc = -1;
        snprintf(err, sizeof err, "a token planned ahead never came");
    }
    /* the sequences move on to where this forward leaves them */
    for (int i = 0; i < b->n_items; i++) {
        b->items[i].s->n_computed += b->items[i].n;
        b->items[i].s->n_sched = 0;
    }
    int ahead = !rc && can_plan_ahead(s, b);
    if (ahead)
        plan_ahead_start(s, b);
    if (s->o.overlap)
        eng_phase(s, LLM_PHASE_LAUNCH);
    if (!rc)
        rc = llm_runner_forward(&s->run, b, err, sizeof err);
    eng_phase(s, LLM_PHASE_FORWARD);
    if (ahead)
        plan_ahead_wait(s, b);
    int drawn = stream_tokens(s, b, rc, err);
    take_in(s, 1);            /* cancels the callbacks asked for */
    eng_step_end(s, b, s->cur, drawn, info);
    return rc ? -1 : 1;
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
    int rc = 0, w = llm_engine_has_work(s);
    if (!w && mlsys_gated(s->o.comm)) {
        /* gated: the engine waits for the viewer at an idle gate, never silently */
        eng_gate(s, 1);
        return llm_engine_has_work(s);
    }
    if (!w)
        eng_gate(s, 1);
    pthread_mutex_lock(&s->mu);
    while (!(s->inbox.n > 0 || s->n_cancels > 0 || s->busy > 0) && rc != ETIMEDOUT)
        rc = pthread_cond_timedwait(&s->cv, &s->mu, &ts);
    pthread_mutex_unlock(&s->mu);
    return llm_engine_has_work(s);
}

int llm_engine_idle(llm_engine *s)
{
    if (llm_engine_has_work(s))
        return 1;
    eng_gate(s, 1);
    return llm_engine_has_work(s);
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

const llm_kv *llm_engine_kv(const llm_engine *s)
{
    return &s->kv;
}

void llm_engine_spec_stats(const llm_engine *s, llm_spec_stats *st)
{
    if (s->have_draft)
        *st = s->draft.st;
    else
        memset(st, 0, sizeof *st);
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
    if (s->o.tp && llm_tp_lead_stop(&s->run.e))
        fprintf(stderr, "engine: the tensor-parallel followers were not told to stop: %s\n",
                mlsys_errmsg(s->o.tp));
    llm_runner_fini(&s->run);
    if (s->have_json)
        llm_json_grammar_fini(&s->json);
    llm_drafter_fini(&s->draft);
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
