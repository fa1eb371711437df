/* engine_internal.h - the engine's state, shared by its loop (engine.c) and what it measures
 * and tells (engine_stats.c). Nothing outside those files includes it: the API is engine.h.
 * eng_* are the helpers one file offers the other. */
#ifndef MLSYS_LLM_ENGINE_INTERNAL_H
#define MLSYS_LLM_ENGINE_INTERNAL_H

#include "engine.h"

#include <pthread.h>

enum { ENG_ROLE_CLIENT, ENG_ROLE_QUEUE, ENG_ROLE_SCHED, ENG_ROLE_MODEL, ENG_ROLE_COUNT };

struct llm_engine {
    llm_config c;
    const llm_weights *w;
    llm_engine_opts o;
    int max_len;              /* positions per sequence (opts.max_model_len, resolved) */
    llm_kv kv;
    llm_sched sc;
    llm_runner run;
    llm_json_grammar json;    /* JSON mode's default grammar (over opts.tok) */
    int have_json;
    llm_drafter draft;        /* speculative decoding (opts.spec_k) */
    int have_draft;
    /* shared with other threads, under mu */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    llm_seq_queue inbox;      /* submitted, not taken in yet */
    int *cancels;             /* request ids to cancel */
    int n_cancels, cap_cancels;
    int next_id;
    int busy;                 /* sequences taken in and not finished yet */
    llm_engine_metrics snap;
    /* the stepping thread's own */
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
    double t_step;            /* engine clock at the step's start */
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

/* ---- engine.c ---- */
double eng_now(const llm_engine *s);            /* the engine's clock (opts.clock) */

/* ---- engine_mem.c ---- */
/* The runner's scratch rows for options d (defaults filled in): a step's rows, at most 256
 * per internal chunk (a longer step is several GEMMs per weight, which changes nothing in
 * the result), fewer when a long context takes each row's scratch past LLM_FWD_MAX_BYTES. */
int eng_runner_rows(const llm_config *c, const llm_engine_opts *d);
/* Rows of logits a step may want: one per sequence, or with speculation k + 1 per decode. */
int eng_max_logits(const llm_engine_opts *d);

/* ---- engine_stats.c ---- */
void eng_stats_init(llm_engine *s);             /* the metrics' constants; ROLE records */
/* The phase p ends now; it began where the previous one of its thread ended (*mark). */
void eng_phase_at(llm_engine *s, int p, uint64_t *mark);
void eng_phase(llm_engine *s, int p);           /* on the stepping thread */
/* One sequence moving between roles (engine.h: what count and phase carry). */
void eng_flow(llm_engine *s, int from, int to, int seq, int count, int phase);
/* The gate before a step ("engine step N") or while idle ("engine idle"). */
void eng_gate(llm_engine *s, int idle);
/* A step begins: its clock, its number's gate already said. */
void eng_step_start(llm_engine *s, llm_step_info *info);
/* It runs batch b: the step's number, the flows of who is admitted and who runs. */
void eng_step_runs(llm_engine *s, const llm_batch *b);
/* q is finished: its counts and times join the metrics and the histograms. */
void eng_count_finished(llm_engine *s, const llm_seq *q);
/* The end of a step that ran batch b: the snapshot other threads read, the STEP record, the
 * phase spans, info's figures; drawn = tokens drawn. */
void eng_step_end(llm_engine *s, const llm_batch *b, int k, int drawn, llm_step_info *info);
/* The end of a step with nothing to run. */
void eng_step_idle(llm_engine *s, llm_step_info *info);
/* The snapshot of the metrics that llm_engine_metrics_get hands out. */
void eng_publish(llm_engine *s);

#endif
