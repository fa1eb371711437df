/* test_sched_overhead.c - the engine's step phases and its overlap scheduler (core/llm/engine.c)
 * on the shipped model under the batch-invariant GEMM: the overlapped engine's outputs equal
 * the plain engine's token for token (sampling, EOS, stop strings, cancels from callbacks,
 * requests arriving mid-run, chunked prefill, a pool small enough to preempt); the phase
 * times tile each step exactly (structure, no wall-clock thresholds); the lab's --simulate
 * goldens (the original's arithmetic, curriculum 10.3) and its flag errors. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../../core/llm/engine.h"
#include "../../core/nn/nn.h"
#include "run_bin.h"

#define MODEL "assets/models/model.bin"
#define TOKENIZER "assets/models/tokenizer.bin"
#define NREQ 28
#define MAXOUT 130

static llm_config g_c;
static llm_weights g_w;
static llm_tokenizer g_t;

static void load(void)
{
    char err[256];
    ck_assert_msg(llm_checkpoint_read(MODEL, &g_c, &g_w, err, sizeof err) == 0, "%s", err);
    ck_assert_msg(llm_tokfile_read(TOKENIZER, 0, &g_t, err, sizeof err) == 0, "%s", err);
    nn_set_gemm_kernel(NN_GEMM_INVARIANT);
}

typedef struct seen {
    int tok[NREQ][MAXOUT], n[NREQ], finals[NREQ], cancel_at[NREQ];
    llm_finish why[NREQ];
    char text[NREQ][1024];
    size_t text_len[NREQ];
    llm_engine *s;
} seen;

static void on_event(void *u, const llm_engine_event *ev)
{
    seen *w = u;
    int id = ev->id;
    if (ev->token >= 0 && w->n[id] < MAXOUT)
        w->tok[id][w->n[id]++] = ev->token;
    if (ev->text_len > 0 && w->text_len[id] + (size_t)ev->text_len < sizeof w->text[id]) {
        memcpy(w->text[id] + w->text_len[id], ev->text, (size_t)ev->text_len);
        w->text_len[id] += (size_t)ev->text_len;
    }
    if (ev->finish != LLM_FINISH_NONE) {
        w->finals[id]++;
        w->why[id] = ev->finish;
    } else if (w->cancel_at[id] && w->n[id] == w->cancel_at[id]) {
        ck_assert_int_eq(llm_engine_cancel(w->s, id), 0);
    }
}

/* Structure of one step's phases (engine.h): the stepping thread's phases tile [t_start,
 * t_end] end to end; with overlap the worker's planning lies inside [t0[launch],
 * t1[wait]]. */
static void check_tiling(const llm_step_stats *st, int overlap)
{
    uint64_t at = st->t_start, sum = 0;
    static const int plain[] = {LLM_PHASE_SCHEDULE, LLM_PHASE_PREPARE, LLM_PHASE_FORWARD,
                                LLM_PHASE_SAMPLE, LLM_PHASE_DETOKENIZE};
    static const int over[] = {LLM_PHASE_SCHEDULE, LLM_PHASE_PREPARE, LLM_PHASE_LAUNCH,
                               LLM_PHASE_FORWARD, LLM_PHASE_WAIT, LLM_PHASE_SAMPLE,
                               LLM_PHASE_DETOKENIZE};
    const int *order = overlap ? over : plain;
    int n = overlap ? 7 : 5;
    for (int i = 0; i < n; i++) {
        int p = order[i];
        if (!st->t1[p])
            continue;         /* did not run */
        ck_assert_msg(st->t0[p] == at, "phase %s starts at %llu, the previous ended at %llu",
                      llm_phase_name(p), (unsigned long long)st->t0[p],
                      (unsigned long long)at);
        ck_assert(st->t1[p] >= st->t0[p]);
        at = st->t1[p];
        sum += llm_phase_ns(st, p);
    }
    ck_assert_msg(at == st->t_end, "the last phase ends at %llu, the step at %llu",
                  (unsigned long long)at, (unsigned long long)st->t_end);
    ck_assert(sum == st->t_end - st->t_start);
    ck_assert(st->t1[LLM_PHASE_FORWARD] >= st->t0[LLM_PHASE_FORWARD]);
    if (overlap) {
        ck_assert(st->t1[LLM_PHASE_LAUNCH] > 0);
        ck_assert_int_eq(st->overlapped, st->t1[LLM_PHASE_SCHEDULE_NEXT] > 0);
        ck_assert_int_eq(st->overlapped, st->t1[LLM_PHASE_WAIT] > 0);
        if (st->overlapped) {
            ck_assert(st->t0[LLM_PHASE_SCHEDULE_NEXT] >= st->t0[LLM_PHASE_LAUNCH]);
            ck_assert(st->t1[LLM_PHASE_SCHEDULE_NEXT] <= st->t1[LLM_PHASE_WAIT]);
            if (st->t1[LLM_PHASE_PREPARE_NEXT]) {
                ck_assert(st->t0[LLM_PHASE_PREPARE_NEXT] == st->t1[LLM_PHASE_SCHEDULE_NEXT]);
                ck_assert(st->t1[LLM_PHASE_PREPARE_NEXT] <= st->t1[LLM_PHASE_WAIT]);
            }
        }
    } else {
        ck_assert(st->t1[LLM_PHASE_LAUNCH] == 0 && st->t1[LLM_PHASE_WAIT] == 0);
        ck_assert_int_eq(st->overlapped, 0);
    }
}

typedef struct scen {
    int max_num_seqs, max_tokens_batched, n_blocks, block_size;
} scen;

/* NREQ requests of every kind; a third arrive while the engine runs. Returns the steps that
 * planned ahead. */
static long run(const scen *sc, int overlap, seen *w)
{
    char err[256];
    memset(w, 0, sizeof *w);
    llm_engine_opts o = {.max_num_seqs = sc->max_num_seqs,
                        .max_num_batched_tokens = sc->max_tokens_batched,
                        .n_blocks = sc->n_blocks, .block_size = sc->block_size, .tok = &g_t,
                        .overlap = overlap};
    llm_engine *s = llm_engine_create(&g_c, &g_w, &o, err, sizeof err);
    ck_assert_msg(s != NULL, "%s", err);
    w->s = s;
    static const char *const stops[] = {"the", ". "};
    static int p[LLM_DOC_MAX + 2];   /* a whole document encoded */
    long ahead = 0, step = 0;
    int next = 0;
    w->cancel_at[5] = 3;
    w->cancel_at[17] = 9;
    while (next < NREQ || llm_engine_has_work(s)) {
        while (next < NREQ && (next < 2 * NREQ / 3 || step > 3 * (next - 2 * NREQ / 3))) {
            char doc[LLM_DOC_MAX];
            size_t dl = llm_corpus_doc(1, LLM_SPLIT_VAL, (uint64_t)next, doc, sizeof doc, NULL);
            int n = (int)llm_bpe_encode_prompt(&g_t, doc, dl, 1, p);
            n = 3 + (next * 7) % 40 < n ? 3 + (next * 7) % 40 : n;
            llm_request r = {.prompt = p, .n_prompt = n, .max_tokens = 4 + (next * 11) % 50,
                             .temperature = next % 3 == 0 ? 0.0f : 0.9f, .top_p = 0.9f,
                             .seed = 1000 + (uint64_t)next, .ignore_eos = next % 2,
                             .stop = next % 5 == 1 ? stops : NULL,
                             .n_stop = next % 5 == 1 ? 2 : 0, .on_event = on_event, .u = w};
            ck_assert_msg(llm_engine_submit(s, &r, err, sizeof err) == next, "%s", err);
            next++;
        }
        llm_step_info info;
        int rc = llm_engine_step(s, &info);
        ck_assert_int_ge(rc, 0);
        step++;
        if (rc == 1) {
            llm_step_stats st;
            llm_engine_last_stats(s, &st);
            ck_assert_int_eq(st.step, info.step);
            ck_assert_int_eq(st.rows, info.rows);
            check_tiling(&st, overlap);
            ahead += st.overlapped;
        }
    }
    llm_engine_metrics m;
    llm_engine_metrics_get(s, &m);
    ck_assert_int_eq(m.kv_used, 0);
    ck_assert_msg(llm_paged_check(llm_engine_kv(s), err, sizeof err) == 0, "%s", err);
    llm_engine_free(s);
    return ahead;
}

static void same_outputs(const scen *sc)
{
    static seen a, b;
    long ahead_plain = run(sc, 0, &a);
    long ahead = run(sc, 1, &b);
    ck_assert_int_eq(ahead_plain, 0);
    ck_assert_int_gt(ahead, 0);
    int stops = 0, cancels = 0, lengths = 0;
    for (int i = 0; i < NREQ; i++) {
        ck_assert_int_eq(a.finals[i], 1);
        ck_assert_int_eq(b.finals[i], 1);
        ck_assert_msg(a.why[i] == b.why[i], "request %d: %s against %s", i,
                      llm_finish_name(a.why[i]), llm_finish_name(b.why[i]));
        ck_assert_int_eq(a.n[i], b.n[i]);
        ck_assert_msg(!memcmp(a.tok[i], b.tok[i], (size_t)a.n[i] * sizeof(int)),
                      "request %d: tokens differ", i);
        ck_assert_int_eq(a.text_len[i], b.text_len[i]);
        ck_assert(!memcmp(a.text[i], b.text[i], a.text_len[i]));
        stops += a.why[i] == LLM_FINISH_STOP;
        cancels += a.why[i] == LLM_FINISH_CANCEL;
        lengths += a.why[i] == LLM_FINISH_LENGTH;
    }
    printf("  %d requests, %ld of the overlapped steps planned ahead: %d stopped, %d "
           "cancelled, %d at their length, same tokens\n", NREQ, ahead, stops, cancels,
           lengths);
    ck_assert_int_gt(stops, 0);        /* the cases the test is about happened */
    ck_assert_int_eq(cancels, 2);
}

START_TEST(overlap_same_tokens)
{
    load();
    scen sc = {8, 64, 0, 16};      /* chunked prefill: 64 rows a step */
    same_outputs(&sc);
    llm_weights_free(&g_w);
    llm_tokenizer_free(&g_t);
}
END_TEST

START_TEST(overlap_same_tokens_small_pool)
{
    load();
    /* 12 blocks of 8 for 6 seats: preemptions, and steps that cannot plan ahead */
    scen sc = {6, 48, 20, 8};
    same_outputs(&sc);
    llm_weights_free(&g_w);
    llm_tokenizer_free(&g_t);
}
END_TEST

/* ---- the phase spans the engine emits (the timeline's two rows) ---- */

typedef struct spans {
    uint64_t f0[256], f1[256];          /* the forwards (row 0) */
    int nf, n_host, inside, bad;
    uint64_t open[2];
    char names[512];
} spans;
static spans g_sp;

static void span_sink(void *u, const mlsys_event *ev, size_t n)
{
    (void)u;
    for (size_t i = 0; i < n; i++) {
        const mlsys_event *e = &ev[i];
        if (e->kind != MLSYS_EV_COMPUTE_BEGIN && e->kind != MLSYS_EV_COMPUTE_END)
            continue;
        if (e->tag != 0 && e->tag != 1) {
            g_sp.bad++;
            continue;
        }
        if (e->kind == MLSYS_EV_COMPUTE_BEGIN) {
            g_sp.open[e->tag] = e->t_ns;
            continue;
        }
        if (e->tag == 0 && g_sp.nf < 256) {
            g_sp.f0[g_sp.nf] = g_sp.open[0];
            g_sp.f1[g_sp.nf++] = e->t_ns;
            g_sp.bad += strncmp(e->label, "forward ", 8) != 0;
            /* ids and counts only (the last step's label is written after its requests
             * finished and were freed: read from them, it said "D-180385930,1,...") */
            for (const char *p = e->label + 8; *p; p++)
                g_sp.bad += !strchr("PD0123456789:, ", *p);
        } else if (e->tag == 1) {
            g_sp.n_host++;
            if (!strstr(g_sp.names, e->label) && strlen(g_sp.names) + strlen(e->label) + 2 <
                                                     sizeof g_sp.names) {
                strcat(g_sp.names, e->label);
                strcat(g_sp.names, ",");
            }
            /* a schedule inside a forward's interval: overlap, visible */
            if (!strcmp(e->label, "schedule"))
                for (int k = 0; k < g_sp.nf; k++)
                    g_sp.inside += g_sp.open[1] >= g_sp.f0[k] && e->t_ns <= g_sp.f1[k];
        }
    }
}

static int spans_rank(mlsys_comm *c, void *arg)
{
    char err[256];
    llm_config cfg;
    llm_weights w;
    if (llm_checkpoint_read(MODEL, &cfg, &w, err, sizeof err))
        return 1;
    /* 8 requests of 12 tokens: 12 steps (one prefill step, 11 decodes) */
    llm_engine_opts o = {.max_num_seqs = 8, .comm = c, .overlap = *(int *)arg};
    llm_engine *s = llm_engine_create(&cfg, &w, &o, err, sizeof err);
    if (!s)
        return 1;
    int p[8];
    for (int i = 0; i < 8; i++)
        p[i] = 3 + i * 17;
    for (int i = 0; i < 8; i++) {
        llm_request r = {.prompt = p, .n_prompt = 8, .max_tokens = 12, .ignore_eos = 1};
        p[0] = 3 + i;
        if (llm_engine_submit(s, &r, err, sizeof err) < 0)
            return 1;
    }
    long steps = llm_engine_run(s);
    llm_engine_free(s);
    llm_weights_free(&w);
    return steps == 12 ? 0 : 2;
}

static void spans_of(int overlap)
{
    memset(&g_sp, 0, sizeof g_sp);
    char why[512] = "";
    mlsys_launch_opts o = {.world_size = 1, .timeout_ms = 60000, .trace_capacity = 8192};
    mlsys_job *j = mlsys_job_start(&o, NULL, spans_rank, &overlap, why, sizeof why);
    ck_assert_msg(j != NULL, "%s", why);
    mlsys_job_sink sink = {NULL, span_sink, NULL};
    ck_assert_msg(mlsys_job_wait(j, &sink, -1, why, sizeof why) == 0, "%s", why);
    mlsys_job_free(j);
}

START_TEST(phase_spans)
{
    spans_of(0);
    ck_assert_int_eq(g_sp.bad, 0);
    ck_assert_int_eq(g_sp.nf, 12);                /* one forward span per step */
    ck_assert_int_eq(g_sp.n_host, 12 * 4);        /* schedule, prepare, sample, detokenize */
    ck_assert_int_eq(g_sp.inside, 0);             /* nothing beside a forward */
    ck_assert_msg(strstr(g_sp.names, "schedule,") && strstr(g_sp.names, "prepare,") &&
                  strstr(g_sp.names, "token sample,") && strstr(g_sp.names, "detokenize,"),
                  "%s", g_sp.names);
    spans_of(1);
    ck_assert_int_eq(g_sp.bad, 0);
    ck_assert_int_eq(g_sp.nf, 12);
    ck_assert_msg(strstr(g_sp.names, "launch,"), "%s", g_sp.names);
    printf("  overlapped: %d of 12 steps' schedule spans lie inside the forward before them\n",
           g_sp.inside);
}
END_TEST

/* ---- the lab ---- */

START_TEST(simulate_goldens)
{
    bin_result r = run_bin("run ch10/scheduling-overhead-benchmark --simulate");
    ck_assert_msg(r.status == 0, "%s", r.err);
    /* N(s+c+p) = 20 x 13 = 260 ms; (s+c+p) + (N-1)(max(s,c)+p) = 13 + 19 x 11 = 222 ms */
    ck_assert_msg(strstr(r.out, "SIMULATION"), "%s", r.out);
    ck_assert_msg(strstr(r.out, "sequential  260.00 ms"), "%s", r.out);
    ck_assert_msg(strstr(r.out, "original    222.00 ms"), "%s", r.out);
    /* SGLang's loop: (s+c+p) + (N-1) max(c, s+p) = 13 + 19 x 10 = 203 ms */
    ck_assert_msg(strstr(r.out, "SGLang's    203.00 ms"), "%s", r.out);
    ck_assert_msg(strstr(r.out, "98.52 batches/s"), "%s", r.out);
    ck_assert_msg(strstr(r.out, "speedup 1.28x, saved 57.00 ms (21.9%)"), "%s", r.out);
    ck_assert_msg(strstr(r.out, "76.92 batches/s"), "%s", r.out);
    ck_assert_msg(strstr(r.out, "90.09 batches/s"), "%s", r.out);
    ck_assert_msg(strstr(r.out, "speedup 1.17x"), "%s", r.out);
    ck_assert_msg(strstr(r.out, "saved 38.00 ms (14.6%)"), "%s", r.out);
    ck_assert_msg(strstr(r.out, "overhead 23.1%"), "%s", r.out);
    ck_assert_msg(strstr(r.out, "reduction 67%"), "%s", r.out);
    /* the drawing: 4 batches, 2 characters per ms: 104 characters sequential, 92 overlapped,
     * the overlapped CPU line opening with 8 S */
    const char *cpu = strstr(r.out, "  CPU |");
    ck_assert_ptr_nonnull(cpu);
    const char *e = strchr(cpu + 7, '|');
    ck_assert_int_eq((int)(e - cpu - 7), 104);
    const char *ocpu = strstr(e, "  CPU |");
    ck_assert_ptr_nonnull(ocpu);
    ck_assert(!strncmp(ocpu + 7, "SSSSSSSS.", 9));
    e = strchr(ocpu + 7, '|');
    ck_assert_int_eq((int)(e - ocpu - 7), 92);
    /* SGLang's: S of the first batch, then 4 forwards back to back (80 C in a row), then the
     * last batch's P: 86 characters on each lane */
    const char *scpu = strstr(e, "  CPU |"), *sgpu = scpu ? strstr(scpu, "  GPU |") : NULL;
    ck_assert(scpu && sgpu);
    ck_assert_int_eq((int)(strchr(scpu + 7, '|') - scpu - 7), 86);
    ck_assert_int_eq((int)(strchr(sgpu + 7, '|') - sgpu - 7), 86);
    ck_assert(!strncmp(sgpu + 7 + 4, "CCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCCC..|",
                       83));
    bin_result_free(&r);
    /* s > c: overlapped per batch = s + p */
    r = run_bin("run ch10/scheduling-overhead-benchmark --simulate --scheduling-ms 12 "
                "--compute-ms 5 --postprocess-ms 1 --batches 10");
    ck_assert_msg(r.status == 0, "%s", r.err);
    /* sequential 10 x 18 = 180; overlapped 18 + 9 x 13 = 135 */
    ck_assert_msg(strstr(r.out, "sequential  180.00 ms"), "%s", r.out);
    ck_assert_msg(strstr(r.out, "original    135.00 ms"), "%s", r.out);
    bin_result_free(&r);
    /* s + p above c: SGLang's loop is bound by the CPU, max(c, s + p) = 5 a batch, against
     * the original's max(s, c) + p = 6: 90, 9 + 9 x 6 = 63 and 9 + 9 x 5 = 54 */
    r = run_bin("run ch10/scheduling-overhead-benchmark --simulate --scheduling-ms 3 "
                "--compute-ms 4 --postprocess-ms 2 --batches 10");
    ck_assert_msg(r.status == 0, "%s", r.err);
    ck_assert_msg(strstr(r.out, "sequential  90.00 ms"), "%s", r.out);
    ck_assert_msg(strstr(r.out, "original    63.00 ms"), "%s", r.out);
    ck_assert_msg(strstr(r.out, "SGLang's    54.00 ms"), "%s", r.out);
    ck_assert_msg(strstr(r.out, "no, s + p - c per batch remains"), "%s", r.out);
    bin_result_free(&r);
}
END_TEST

START_TEST(flag_errors)
{
    static const char *const bad[][2] = {
        {"--batch-sizes 0", "--batch-sizes '0'"}, {"--batch-sizes 1,x", "--batch-sizes '1,x'"},
        {"--batch-sizes 1,,2", "comma-separated"}, {"--batch-sizes ''", "needs a value"},
        {"--batches 0", "--batches"}, {"--scheduling-ms -1", "--scheduling-ms"},
        {"--steps 0", "--steps"}, {"--steps 100 --prompt-len 64", "context of"},
        {"--bogus", "unknown flag '--bogus'"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        bin_result r = run_bin("run ch10/scheduling-overhead-benchmark %s", bad[i][0]);
        ck_assert_msg(r.status == 2, "%s: status %d", bad[i][0], r.status);
        /* one line, naming the lab and what is wrong; nothing on stdout */
        ck_assert_msg(strstr(r.err, "mlsys-lab: ch10/scheduling-overhead-benchmark: ") == r.err &&
                      strstr(r.err, bad[i][1]) && strchr(r.err, '\n') == r.err + strlen(r.err) - 1,
                      "%s: %s", bad[i][0], r.err);
        ck_assert_msg(!strstr(r.out, "WITHOUT OVERLAP"), "%s", r.out);
        bin_result_free(&r);
    }
}
END_TEST

START_TEST(lab_runs_small)
{
    bin_result r = run_bin("run ch10/scheduling-overhead-benchmark --batch-sizes 1,2 "
                           "--steps 4 --rounds 1");
    ck_assert_msg(r.status == 0, "%s", r.err);
    ck_assert_msg(strstr(r.out, "schedule") && strstr(r.out, "forward") &&
                  strstr(r.out, "detokenize") && strstr(r.out, "same tokens"), "%s", r.out);
    ck_assert_msg(!strstr(r.out, "DIFFER"), "%s", r.out);
    bin_result_free(&r);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("sched_overhead");
    TCase *tc = tcase_create("engine");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, overlap_same_tokens);
    tcase_add_test(tc, overlap_same_tokens_small_pool);
    tcase_add_test(tc, phase_spans);
    suite_add_tcase(s, tc);
    TCase *lab = tcase_create("lab");
    tcase_set_timeout(lab, 300);
    tcase_add_test(lab, simulate_goldens);
    tcase_add_test(lab, flag_errors);
    tcase_add_test(lab, lab_runs_small);
    suite_add_tcase(s, lab);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed != 0;
}
