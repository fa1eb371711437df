/* check.c - ch08-admission, one rank (see ../harness.h). The real serving engine on a small
 * seeded model runs seeded workloads with the learner's rule; every call is compared with the
 * reference rule and named by step and request (the check mirrors the waiting queue:
 * submissions at the back, admissions out, preempted requests back at the front). After each
 * step: the batch limit, the token budget and llm_paged_check; then drawn queries alone. */
#include "harness.h"
#include "api.h"

#define MAXQ 64

typedef struct run {
    harness *h;
    long step;                  /* the step being planned (1, 2, ...) */
    int queue[MAXQ], nq;        /* the waiting queue at the start of the step, oldest first */
    int call;                   /* admission calls in this step */
    long calls;                 /* in all */
    int bad;
} run;

static const char *why_wait(const llm_admit_query *q)
{
    if (q->running >= q->max_num_seqs)
        return "no seat: running = max_num_seqs";
    if (q->need_blocks > q->free_blocks)
        return "its prompt needs more blocks than are free";
    return "no budget left";
}

static int wrapped(const llm_admit_query *q, void *u)
{
    run *r = u;
    int want = llm_admit_continuous(q, NULL);
    int got = admit_rule(q, NULL);
    int id = r->call < r->nq ? r->queue[r->call] : -1;
    r->call++;
    r->calls++;
    if (got != want && !r->bad) {
        r->bad = 1;
        char qs[200];
        snprintf(qs, sizeof qs, "running %d of max_num_seqs %d, budget %d, free_blocks %d, "
                 "need_blocks %d, prompt_left %d", q->running, q->max_num_seqs, q->budget,
                 q->free_blocks, q->need_blocks, q->prompt_left);
        if (r->step == 0)
            h_fail(r->h, "query %d: your rule returns %d, the reference %d (%s) [%s]", id, got,
                   want, want ? "min(prompt_left, budget)" : why_wait(q), qs);
        else if (want == 0)
            h_fail(r->h, "step %ld, request %d: your rule admits %d tokens, the reference "
                   "keeps it waiting (%s) [%s]", r->step, id, got, why_wait(q), qs);
        else if (got <= 0)
            h_fail(r->h, "step %ld, request %d: your rule keeps it waiting, the reference "
                   "admits min(prompt_left, budget) = %d tokens [%s]", r->step, id, want, qs);
        else
            h_fail(r->h, "step %ld, request %d: your rule admits %d tokens, the reference "
                   "min(prompt_left, budget) = %d [%s]", r->step, id, got, want, qs);
    }
    return got;
}

static void queue_remove(run *r, int id)
{
    for (int i = 0; i < r->nq; i++)
        if (r->queue[i] == id) {
            memmove(r->queue + i, r->queue + i + 1, sizeof(int) * (size_t)(r->nq - i - 1));
            r->nq--;
            return;
        }
}

static void one_case(harness *h, const llm_config *c, const llm_weights *w, int k)
{
    mlsys_rng g;
    mlsys_rng_seed(&g, h->seed * 1000003u + (uint64_t)k * 7919u);
    llm_engine_opts o;
    memset(&o, 0, sizeof o);
    o.max_num_seqs = 2 + (int)(mlsys_rng_u64(&g) % 4);
    o.max_num_batched_tokens = o.max_num_seqs + 8 + (int)(mlsys_rng_u64(&g) % 56);
    o.block_size = 8;
    int per_seq = c->seq_len / o.block_size;
    o.n_blocks = per_seq + (int)(mlsys_rng_u64(&g) % (per_seq * 2));
    int nreq = 8 + (int)(mlsys_rng_u64(&g) % 12);
    h_case(h, "max_num_seqs %d, max_num_batched_tokens %d, %d blocks of %d, %d requests",
           o.max_num_seqs, o.max_num_batched_tokens, o.n_blocks, o.block_size, nreq);
    run r;
    memset(&r, 0, sizeof r);
    r.h = h;
    o.admit = wrapped;
    o.admit_u = &r;
    char err[256];
    llm_engine *s = llm_engine_create(c, w, &o, err, sizeof err);
    if (!s) {
        h_fail(h, "rank %d: the engine refused its options: %s", h->rank, err);
        return;
    }
    int shared[48];
    for (int i = 0; i < 48; i++)
        shared[i] = 1 + (int)(mlsys_rng_u64(&g) % (uint64_t)(c->vocab_size - 1));
    int submitted = 0;
    for (long step = 1; !r.bad && !h->failed && step < 2000; step++) {
        /* a few at the start, then one more every other step */
        int now = step == 1 ? 3 + (int)(mlsys_rng_u64(&g) % 4) : (step % 2 == 0);
        for (int i = 0; i < now && submitted < nreq; i++, submitted++) {
            int tok[128];
            int max_tokens = 1 + (int)(mlsys_rng_u64(&g) % 16);
            int n = 1 + (int)(mlsys_rng_u64(&g) % (uint64_t)(c->seq_len - max_tokens));
            int pre = mlsys_rng_u64(&g) % 2 ? (int)(mlsys_rng_u64(&g) % 48) : 0;
            for (int j = 0; j < n; j++)
                tok[j] = j < pre ? shared[j] :
                         1 + (int)(mlsys_rng_u64(&g) % (uint64_t)(c->vocab_size - 1));
            llm_request q = {.prompt = tok, .n_prompt = n, .max_tokens = max_tokens,
                             .temperature = 0.0f, .ignore_eos = 1};
            int id = llm_engine_submit(s, &q, err, sizeof err);
            if (id < 0 || id >= MAXQ) {
                h_fail(h, "rank %d: the engine refused request %d: %s", h->rank, submitted, err);
                break;
            }
            r.queue[r.nq++] = id;
        }
        if (h->failed || (!llm_engine_has_work(s) && submitted == nreq))
            break;
        r.step = step;
        r.call = 0;
        llm_step_info info;
        int ran = llm_engine_step(s, &info);
        if (r.bad)
            break;
        if (ran < 0) {
            h_fail(h, "step %ld: the engine failed", step);
            break;
        }
        if (ran == 0)
            continue;
        if (info.n_items > o.max_num_seqs)
            h_fail(h, "step %ld: %d sequences in the batch, over max_num_seqs %d", step,
                   info.n_items, o.max_num_seqs);
        else if (info.rows > o.max_num_batched_tokens)
            h_fail(h, "step %ld: %d rows, over the token budget %d", step, info.rows,
                   o.max_num_batched_tokens);
        else if (llm_paged_check(llm_engine_kv(s), err, sizeof err) != 0)
            h_fail(h, "step %ld: the KV pool breaks an invariant: %s", step, err);
        /* the waiting queue after the step: admitted out, preempted back at the front */
        for (int i = 0; i < info.n_items; i++)
            if (info.items[i].prefill)
                queue_remove(&r, info.items[i].id);
        for (int i = 0; i < info.n_preempted; i++) {
            queue_remove(&r, info.preempted[i]);
            memmove(r.queue + 1, r.queue, sizeof(int) * (size_t)r.nq);
            r.queue[0] = info.preempted[i];
            r.nq++;
        }
    }
    h_returned(h, 0, "admit_rule");
    if (!h->failed && !r.bad && r.calls == 0)
        h_fail(h, "the engine never asked the rule (a bug of the check, not yours)");
    if (!h->failed)
        h_info(h, "case %d: %ld admission decisions, all the reference's", k + 1, r.calls);
    llm_engine_free(s);
}

/* The rule alone, on drawn queries the engine rarely asks (a full batch, an empty budget):
 * the engine keeps a block table per seat, so it stops asking when the seats are taken. */
static void alone(harness *h)
{
    h_case(h, "the rule alone on 500 drawn queries");
    mlsys_rng g;
    mlsys_rng_seed(&g, h->seed * 31u + 17u);
    run r;
    memset(&r, 0, sizeof r);
    r.h = h;
    for (int i = 0; i < 500 && !r.bad; i++) {
        llm_admit_query q;
        memset(&q, 0, sizeof q);
        q.max_num_seqs = 1 + (int)(mlsys_rng_u64(&g) % 8);
        q.running = (int)(mlsys_rng_u64(&g) % (uint64_t)(q.max_num_seqs + 2));
        q.admitted = q.running ? (int)(mlsys_rng_u64(&g) % (uint64_t)q.running) : 0;
        q.budget = (int)(mlsys_rng_u64(&g) % 80);
        q.free_blocks = (int)(mlsys_rng_u64(&g) % 20);
        q.need_blocks = (int)(mlsys_rng_u64(&g) % 20);
        q.prompt_left = 1 + (int)(mlsys_rng_u64(&g) % 100);
        q.waiting = 1 + (int)(mlsys_rng_u64(&g) % 10);
        r.step = 0;
        r.queue[0] = i;
        r.nq = 1;
        r.call = 0;
        wrapped(&q, &r);
    }
    h_returned(h, 0, "admit_rule");
}

static void ex_check_main(harness *h)
{
    llm_config c = {.dim = 32, .hidden_dim = 64, .n_layers = 1, .n_heads = 2, .n_kv_heads = 2,
                    .vocab_size = 96, .seq_len = 96, .shared_classifier = 1};
    llm_weights w;
    char err[256];
    if (llm_config_check(&c, err, sizeof err) || llm_weights_alloc(&w, &c, err, sizeof err)) {
        h_fail(h, "rank %d: the test model: %s", h->rank, err);
        h_case_end(h);
        return;
    }
    mlsys_rng g;
    mlsys_rng_seed(&g, h->seed ^ 0x5eed);
    size_t off[12], len[12];
    int nr = llm_weights_param_ranges(&c, off, len);
    for (int i = 0; i < nr; i++)
        for (size_t j = 0; j < len[i]; j++)
            w.mem[off[i] + j] = (float)(mlsys_rng_normal(&g) * 0.1);
    for (int k = 0; k < 3; k++) {
        one_case(h, &c, &w, k);
        if (!h_case_end(h))
            break;
    }
    llm_weights_free(&w);
    if (!h->failed) {
        alone(h);
        h_case_end(h);
    }
}
