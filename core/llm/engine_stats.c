/* engine_stats.c - what the generation engine measures and tells, kept out of its loop: the
 * metrics (counters, the TTFT and TPOT histograms) and the snapshot other threads read, the
 * phases each step's time splits into, and the events a viewer or a trace gets (flows of
 * requests between the roles client, queue, scheduler and model; one compute span per phase;
 * a STEP record per step; the gate before each step). engine.c calls these at fixed points. */
#include "engine_internal.h"

#include <stdio.h>
#include <string.h>

static const char *const role_names[ENG_ROLE_COUNT] = {"clients", "queue", "scheduler",
                                                       "model"};

const double llm_engine_hist_bounds[LLM_ENGINE_HIST_N - 1] = {
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
};

static const char *const phase_names[LLM_PHASE_COUNT] = {
    "schedule", "prepare", "forward", "token sample", "detokenize", "launch", "wait",
    "schedule next", "prepare next", "draft",
};

const char *llm_phase_name(int phase)
{
    return phase >= 0 && phase < LLM_PHASE_COUNT ? phase_names[phase] : "?";
}

void eng_stats_init(llm_engine *s)
{
    s->m.block_size = llm_paged_block_size(&s->kv);
    s->m.kv_blocks = s->m.kv_free = (int)(s->kv.n_slots / s->m.block_size);
    s->m.kv_bytes = s->kv.bytes;
    s->snap = s->m;
    if (s->o.comm)
        for (int r = 0; r < ENG_ROLE_COUNT; r++) {
            mlsys_flow_info f = {(int16_t)r, -1, MLSYS_FLOW_ROLE, -1, 0, 0, -1, 0};
            mlsys_emit_flow(s->o.comm, &f, 0, role_names[r]);
        }
}

/* ---- timing ---- */

void eng_phase_at(llm_engine *s, int p, uint64_t *mark)
{
    uint64_t t = mlsys_now_ns();
    s->st.t0[p] = *mark;
    s->st.t1[p] = t;
    *mark = t;
}

void eng_phase(llm_engine *s, int p)
{
    eng_phase_at(s, p, &s->mark);
}

void eng_step_start(llm_engine *s, llm_step_info *info)
{
    s->t_step = eng_now(s);
    memset(&s->st, 0, sizeof s->st);
    s->st.t_start = s->mark = mlsys_now_ns();
    s->n_finished = 0;
    if (info)
        memset(info, 0, sizeof *info);
}

void llm_engine_tp_stats(const llm_engine *s, uint64_t *allreduces, uint64_t *ns)
{
    *allreduces = s->run.e.tp_allreduces;
    *ns = s->run.e.tp_allreduce_ns;
}

void llm_engine_last_stats(const llm_engine *s, llm_step_stats *st)
{
    *st = s->last;
}

/* ---- events ---- */

void eng_flow(llm_engine *s, int from, int to, int seq, int count, int phase)
{
    if (!s->o.comm)
        return;
    mlsys_flow_info f = {(int16_t)from, (int16_t)to, MLSYS_FLOW_REQUESTS, (int16_t)phase,
                         count, (int32_t)s->step_no, seq, 0};
    mlsys_emit_flow(s->o.comm, &f, 0, NULL);
}

void eng_step_runs(llm_engine *s, const llm_batch *b)
{
    s->step_no++;
    for (int i = b->n_items - b->n_admitted; i < b->n_items; i++)
        eng_flow(s, ENG_ROLE_QUEUE, ENG_ROLE_SCHED, b->items[i].s->id,
                 b->items[i].s->n_computed, -1);
    for (int i = 0; i < b->n_items; i++)
        eng_flow(s, ENG_ROLE_SCHED, ENG_ROLE_MODEL, b->items[i].s->id, b->items[i].n,
                 b->items[i].prefill);
}

/* Gated, the stepping thread waits here for the viewer, once per call; not gated, an idle
 * gate is said once per idle period (a frame that says the engine had nothing). */
void eng_gate(llm_engine *s, int idle)
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
    e.flow = (mlsys_flow_info){ENG_ROLE_MODEL, -1, MLSYS_FLOW_STEP, -1, rows,
                               (int32_t)s->step_no, -1, tokens};
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

/* "forward P3:24 P5:8 V4:5 D0,1,2": who prefills how many rows, who verifies a speculative
 * round of how many rows, who decodes (cut to the label's size). */
static void step_label(const llm_step_item *items, int n_items, char *out, size_t n)
{
    size_t len = (size_t)snprintf(out, n, "forward");
    for (int pass = 2; pass >= 0; pass--) {     /* prefills, verifies, decodes */
        int first = 1;
        for (int i = 0; i < n_items && len + 1 < n; i++) {
            const llm_step_item *it = &items[i];
            int kind = it->prefill ? 2 : it->k > 0 ? 1 : 0;
            if (kind != pass)
                continue;
            int k = pass ? snprintf(out + len, n - len, "%s%c%d:%d", len ? " " : "",
                                    pass == 2 ? 'P' : 'V', it->id, it->n)
                         : snprintf(out + len, n - len, "%s%d", first ? (len ? " D" : "D") : ",",
                                    it->id);
            first = 0;
            len += (size_t)k < n - len ? (size_t)k : n - len - 1;
        }
    }
}

/* One compute span per phase that ran, in time order (the views draw them so): the forward
 * on row 0, the CPU's other work on row 1. */
static void emit_spans(llm_engine *s, int n_items)
{
    if (!s->o.comm)
        return;
    char label[32];
    step_label(s->items, n_items, label, sizeof label);   /* ids: the batch's sequences may
                                                              be retired and freed by now */
    int order[LLM_PHASE_COUNT], n = 0;
    for (int p = 0; p < LLM_PHASE_COUNT; p++) {
        if (p == LLM_PHASE_WAIT || !s->st.t1[p])
            continue;             /* waiting is idle time: no span */
        int k = n++;
        while (k > 0 && s->st.t0[order[k - 1]] > s->st.t0[p]) {
            order[k] = order[k - 1];
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

/* ---- metrics ---- */

static void hist_add(long *h, double v)
{
    int b = 0;
    while (b < LLM_ENGINE_HIST_N - 1 && v > llm_engine_hist_bounds[b])
        b++;
    h[b]++;
}

void eng_count_finished(llm_engine *s, const llm_seq *q)
{
    s->m.finished++;
    if (q->finish == LLM_FINISH_CANCEL)
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
}

void eng_publish(llm_engine *s)
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
    if (s->sc.spec) {
        s->m.spec_rounds = s->sc.spec->st.rounds;
        s->m.spec_drafted = s->sc.spec->st.drafted;
        s->m.spec_accepted = s->sc.spec->st.accepted;
    }
    pthread_mutex_lock(&s->mu);
    long submitted = s->snap.submitted;
    s->snap = s->m;
    s->snap.submitted = submitted;
    pthread_mutex_unlock(&s->mu);
}

void llm_engine_metrics_get(llm_engine *s, llm_engine_metrics *m)
{
    pthread_mutex_lock(&s->mu);
    *m = s->snap;
    pthread_mutex_unlock(&s->mu);
}

/* ---- a step's end ---- */

void eng_step_end(llm_engine *s, const llm_batch *b, int k, int drawn, llm_step_info *info)
{
    s->m.prefill_tokens += b->prefill_rows;
    s->m.decode_tokens += b->decode_rows;
    eng_publish(s);
    s->idle_said = 0;
    step_record(s, b->rows, drawn, eng_now(s) - s->t_step);
    if (info) {
        info->step = s->step_no;
        info->n_items = b->n_items;
        info->items = s->items;
        info->rows = b->rows;
        info->prefill_rows = b->prefill_rows;
        info->decode_rows = b->decode_rows;
        info->n_admitted = b->n_admitted;
        info->n_preempted = s->n_pre[k];
        info->preempted = s->pre[k];
        info->n_finished = s->n_finished;
        info->finished = s->finished;
        info->t_start = s->t_step;
        info->t_end = eng_now(s);
    }
    eng_phase(s, LLM_PHASE_DETOKENIZE);
    s->st.t_end = s->mark;
    s->st.step = s->step_no;
    s->st.n_seqs = b->n_items;
    s->st.rows = b->rows;
    emit_spans(s, b->n_items);
    s->last = s->st;
}

void eng_step_idle(llm_engine *s, llm_step_info *info)
{
    eng_publish(s);
    if (info) {
        info->n_finished = s->n_finished;
        info->finished = s->finished;
        info->t_start = s->t_step;
        info->t_end = eng_now(s);
    }
}
