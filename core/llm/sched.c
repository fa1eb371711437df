/* sched.c - the scheduler: each step decides who computes which tokens. Iteration-level
 * (continuous) batching as vLLM and SGLang do it: the batch is rebuilt every step, so a
 * request joins as soon as a seat and its blocks are free and leaves the step it finishes.
 * Running sequences go first (their decodes, then prompts still being prefilled in chunks),
 * then waiting requests in arrival order while the admission rule says yes, all under one
 * token budget per step. When the pool runs out of blocks the newest running sequence is
 * preempted: its blocks go back and it is recomputed later (recompute, not swap). */
#include "engine.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- queues (intrusive, doubly linked) ---- */

void llm_queue_push_back(llm_seq_queue *q, llm_seq *s)
{
    s->next = NULL;
    s->prev = q->tail;
    if (q->tail)
        q->tail->next = s;
    else
        q->head = s;
    q->tail = s;
    q->n++;
}

void llm_queue_push_front(llm_seq_queue *q, llm_seq *s)
{
    s->prev = NULL;
    s->next = q->head;
    if (q->head)
        q->head->prev = s;
    else
        q->tail = s;
    q->head = s;
    q->n++;
}

void llm_queue_remove(llm_seq_queue *q, llm_seq *s)
{
    if (s->prev)
        s->prev->next = s->next;
    else
        q->head = s->next;
    if (s->next)
        s->next->prev = s->prev;
    else
        q->tail = s->prev;
    s->prev = s->next = NULL;
    q->n--;
}

/* ---- the admission rules ---- */

int llm_admit_continuous(const llm_admit_query *q, void *u)
{
    (void)u;
    if (q->running >= q->max_num_seqs || q->need_blocks > q->free_blocks || q->budget <= 0)
        return 0;
    return q->prompt_left < q->budget ? q->prompt_left : q->budget;
}

int llm_admit_static(const llm_admit_query *q, void *u)
{
    if (q->running > q->admitted)
        return 0;             /* the current batch is still running: wait for all of it */
    return llm_admit_continuous(q, u);
}

/* ---- the scheduler ---- */

int llm_sched_init(llm_sched *sc, llm_kv *kv, int max_num_seqs, int max_num_batched_tokens,
                   llm_admit_fn admit, void *admit_u)
{
    memset(sc, 0, sizeof *sc);
    if (!llm_kv_is_paged(kv) || max_num_seqs < 1 || max_num_seqs > kv->n_seqs ||
        max_num_batched_tokens < max_num_seqs)
        return -1;
    sc->kv = kv;
    sc->max_num_seqs = max_num_seqs;
    sc->max_num_batched_tokens = max_num_batched_tokens;
    sc->admit = admit ? admit : llm_admit_continuous;
    sc->admit_u = admit_u;
    sc->free_kv = mlsys_xmalloc((size_t)max_num_seqs * sizeof(int));
    for (int i = 0; i < max_num_seqs; i++)
        sc->free_kv[i] = max_num_seqs - 1 - i;        /* table 0 on top */
    sc->n_free_kv = max_num_seqs;
    sc->items = mlsys_xcalloc((size_t)max_num_seqs, sizeof *sc->items);
    sc->preempted = mlsys_xmalloc((size_t)max_num_seqs * sizeof(int));
    return 0;
}

void llm_sched_fini(llm_sched *sc)
{
    free(sc->free_kv);
    free(sc->items);
    free(sc->preempted);
    memset(sc, 0, sizeof *sc);
}

/* s gives its block table back (its blocks to the pool, full ones stay cached). */
static void drop_kv(llm_sched *sc, llm_seq *s)
{
    if (s->kv_seq < 0)
        return;
    sc->kv->ops->release(sc->kv, s->kv_seq);
    if (sc->spec)             /* the draft's table beside it */
        sc->spec->kv.ops->release(&sc->spec->kv, s->kv_seq);
    s->d_fed = 0;
    sc->free_kv[sc->n_free_kv++] = s->kv_seq;
    s->kv_seq = -1;
    s->n_computed = 0;
}

void llm_sched_retire(llm_sched *sc, llm_seq *s)
{
    drop_kv(sc, s);
    if (s->status == LLM_SEQ_RUNNING) {
        sc->pending_forks -= s->n_forks;      /* its seats for choices never forked */
        llm_queue_remove(&sc->running, s);
    }
    else if (s->status == LLM_SEQ_WAITING)
        llm_queue_remove(&sc->waiting, s);
    s->status = LLM_SEQ_FINISHED;
}

/* Recompute later: keep its tokens, drop its cache, back to the head of the queue. */
static void preempt(llm_sched *sc, llm_seq *s)
{
    drop_kv(sc, s);
    sc->pending_forks -= s->n_forks;          /* held again when it is readmitted */
    llm_queue_remove(&sc->running, s);
    s->status = LLM_SEQ_WAITING;
    s->st.preemptions++;
    llm_queue_push_front(&sc->waiting, s);
    sc->preempted[sc->n_preempted++] = s->id;
    sc->preemptions++;
}

static int planned(const llm_sched *sc, const llm_seq *s)
{
    for (int i = 0; i < sc->n_items; i++)
        if (sc->items[i].s == s)
            return 1;
    return 0;
}

static void add_item(llm_sched *sc, llm_seq *s, int n, int prefill, int spec)
{
    llm_sched_item *it = &sc->items[sc->n_items++];
    it->s = s;
    it->start = s->n_computed;
    it->n = n;
    it->prefill = prefill;
    it->spec = spec;
    s->n_sched = n;
    /* its full blocks go into the prefix cache now, before the forward that fills them: a
     * request admitted later in this step already finds them (its rows come after these
     * in the forward, which stores every row's keys before any row attends); drafts are not
     * committed tokens, so a speculative decode registers none of its draft rows */
    int known = s->n_computed + n < s->n_tok ? s->n_computed + n : s->n_tok;
    while (known > 0 && s->tok[known - 1] < 0)
        known--;              /* the overlap scheduler's token not drawn yet: hashed later */
    llm_paged_commit(sc->kv, s->kv_seq, s->tok, known);
    sc->rows += n;
    if (prefill)
        sc->prefill_rows += n;
    else
        sc->decode_rows += n;
}

/* Reserve s's blocks for n more positions, preempting the newest unplanned running
 * sequences while the pool is short. 0, or -1 when s itself had to go. */
static int reserve_or_preempt(llm_sched *sc, llm_seq *s, int n)
{
    while (sc->kv->ops->reserve(sc->kv, s->kv_seq, s->n_computed + n) != 0) {
        llm_seq *v = sc->running.tail;
        while (v && (v == s || planned(sc, v)))
            v = v->prev;
        if (!v) {
            preempt(sc, s);
            return -1;
        }
        preempt(sc, v);
    }
    return 0;
}

/* Running sequences, in admission order: pass 0 plans the decodes (one row each), pass 1
 * the prompts still being prefilled (as many rows as the budget leaves). */
static void plan_running(llm_sched *sc, int *budget)
{
    for (int pass = 0; pass < 2; pass++) {
        llm_seq *s = sc->running.head;
        while (s && *budget > 0) {
            llm_seq *next = s->next;
            int left = s->n_tok - s->n_computed;
            int decode = left == 1 && s->n_computed >= s->n_prompt;
            if (pass == (decode ? 0 : 1) && !planned(sc, s)) {
                int n = left < *budget ? left : *budget;
                /* a speculative decode: its token and k drafts to verify */
                int k = decode ? llm_drafter_k(sc->spec, s, sc->max_len, *budget) : 0;
                n += k;
                if (reserve_or_preempt(sc, s, n) == 0) {
                    add_item(sc, s, n, !decode, k);
                    *budget -= n;
                }
                next = s->next;       /* preemption only removes sequences after s */
                if (s->status != LLM_SEQ_RUNNING)
                    break;            /* s went itself: everything after it is gone too */
            }
            s = next;
        }
    }
}

/* Waiting requests in order, while the rule admits them. */
static void plan_waiting(llm_sched *sc, int *budget)
{
    while (sc->waiting.head && *budget > 0 && sc->n_free_kv > 0) {
        llm_seq *s = sc->waiting.head;
        /* a request of n samples needs its n seats (and tables) from the start */
        int seats = sc->running.n + sc->pending_forks;
        if (seats + 1 + s->n_forks > sc->max_num_seqs ||
            sc->n_free_kv - sc->pending_forks < 1 + s->n_forks)
            break;
        int from_pool = 0;
        int hit = llm_paged_match(sc->kv, s->tok, s->n_tok, &from_pool);
        int bs = llm_paged_block_size(sc->kv);
        llm_admit_query q = {
            .running = seats,
            .admitted = sc->n_admitted,
            .max_num_seqs = sc->max_num_seqs,
            .budget = *budget,
            .free_blocks = llm_paged_pool_count(sc->kv),
            .need_blocks = (s->n_tok + bs - 1) / bs - hit / bs + from_pool +
                           (s->n_tok % bs ? s->n_forks : 0),
            .prompt_left = s->n_tok - hit,
            .waiting = sc->waiting.n,
        };
        int n = sc->admit(&q, sc->admit_u);
        if (n <= 0)
            break;
        if (n > q.prompt_left)
            n = q.prompt_left;
        if (n > *budget)
            n = *budget;
        int kv = sc->free_kv[--sc->n_free_kv];
        char name[32];
        snprintf(name, sizeof name, "req %d", s->id);
        llm_paged_set_owner(sc->kv, kv, s->id, name);
        s->n_computed = llm_paged_attach(sc->kv, kv, s->tok, s->n_tok);
        s->kv_seq = kv;
        if (sc->kv->ops->reserve(sc->kv, kv, s->n_computed + n) != 0) {
            drop_kv(sc, s);   /* the rule admitted more than the pool holds: wait */
            break;
        }
        sc->query_tokens += s->n_tok;
        sc->hit_tokens += s->n_computed;
        if (!s->admitted)
            s->st.n_cached = s->n_computed;
        s->admitted = 1;
        llm_queue_remove(&sc->waiting, s);
        s->status = LLM_SEQ_RUNNING;
        llm_queue_push_back(&sc->running, s);
        sc->pending_forks += s->n_forks;
        sc->n_admitted++;
        add_item(sc, s, n, 1, 0);
        *budget -= n;
    }
}

int llm_sched_plan(llm_sched *sc)
{
    sc->n_items = sc->rows = sc->prefill_rows = sc->decode_rows = 0;
    sc->n_admitted = sc->n_preempted = 0;
    int budget = sc->max_num_batched_tokens;
    plan_running(sc, &budget);
    /* after a preemption the pool is short: admitting more would only preempt again */
    if (sc->n_preempted == 0)
        plan_waiting(sc, &budget);
    return sc->rows;
}

int llm_sched_fork(llm_sched *sc, llm_seq *parent, llm_seq *child)
{
    if (parent->status == LLM_SEQ_RUNNING)
        sc->pending_forks--;                  /* its seat is taken now, or given up */
    if (sc->n_free_kv == 0 || parent->kv_seq < 0)
        return -1;
    int kv = sc->free_kv[--sc->n_free_kv];
    char name[32];
    snprintf(name, sizeof name, "req %d", child->id);
    llm_paged_set_owner(sc->kv, kv, child->id, name);
    if (llm_paged_fork(sc->kv, parent->kv_seq, kv, parent->n_computed) != 0) {
        sc->free_kv[sc->n_free_kv++] = kv;
        return -1;
    }
    child->kv_seq = kv;
    child->n_computed = parent->n_computed;
    child->admitted = 1;
    child->st.n_cached = parent->st.n_cached;
    child->status = LLM_SEQ_RUNNING;
    llm_queue_push_back(&sc->running, child);
    return 0;
}
