/* scheduling_overhead_benchmark.c - ch10/scheduling-overhead-benchmark: where a serving
 * step's time goes on the lab's engine (core/llm/engine.c): schedule, prepare the rows,
 * forward, sample, detokenize, per batch size, with each phase's share; then the same
 * requests through the overlap scheduler (the next step planned while this one's forward
 * runs), side by side in alternate runs: step time saved, tokens compared. --simulate prints
 * the original script's model instead (sched_sim.c), labelled. */
#include "../common/common.h"
#include "../common/load_model.h"
#include "../../core/llm/engine.h"
#include "../../core/nn/nn.h"
#include "sched_sim.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define LAB_ID "ch10/scheduling-overhead-benchmark"
#define MAX_SIZES 16

static const lab_flag soh_flags[] = {
    {"batch-sizes", 0, FLAG_STR, "1,2,4,8,16", NULL, 0, 0, "decode batch sizes measured "
     "(comma-separated, 1..64)"},
    {"steps", 0, FLAG_INT, "32", NULL, 1, 100, "decode steps per request"},
    {"prompt-len", 0, FLAG_INT, "16", NULL, 1, 64, "prompt tokens per request"},
    {"rounds", 0, FLAG_INT, "3", NULL, 1, 50, "alternate runs of each engine per batch size"},
    {"schedule-cost-us", 0, FLAG_INT, "0", NULL, 0, 100000, "busy CPU work added to every "
     "scheduling (a stand-in for a Python scheduler's cost)"},
    {"gpu-forward-ms", 0, FLAG_DOUBLE, "5", NULL, 0, 1000, "the what-if line: a GPU decode "
     "forward this long at every batch size"},
    {"model", 0, FLAG_STR, "assets/models/model.bin", NULL, 0, 0, "llama2.c checkpoint"},
    {"tokenizer", 0, FLAG_STR, "assets/models/tokenizer.bin", NULL, 0, 0, "its tokenizer "
     "(the detokenize phase)"},
    {"simulate", 0, FLAG_BOOL, NULL, NULL, 0, 0, "the original's simulation only (sleep-free: "
     "its formulas on a virtual clock)"},
    {"batches", 0, FLAG_INT, "20", NULL, 1, 1000000, "--simulate: batches"},
    {"scheduling-ms", 0, FLAG_DOUBLE, "2.0", NULL, 0, 100000, "--simulate: scheduling per "
     "batch"},
    {"compute-ms", 0, FLAG_DOUBLE, "10.0", NULL, 0, 100000, "--simulate: compute per batch"},
    {"postprocess-ms", 0, FLAG_DOUBLE, "1.0", NULL, 0, 100000, "--simulate: post-processing "
     "per batch"},
    {NULL, 0, 0, NULL, NULL, 0, 0, NULL}
};

/* "1,2,4" -> sizes; -1 with a message on anything else. */
static int parse_sizes(const char *text, int *out)
{
    int n = 0;
    const char *p = text;
    while (*p) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 1 || v > 64 || n == MAX_SIZES || (*end && *end != ',')) {
            fprintf(stderr, "mlsys-lab: %s: --batch-sizes '%s': up to %d sizes of 1..64, "
                    "comma-separated\n", LAB_ID, text, MAX_SIZES);
            return -1;
        }
        out[n++] = (int)v;
        p = *end ? end + 1 : end;
    }
    if (n == 0) {
        fprintf(stderr, "mlsys-lab: %s: --batch-sizes is empty\n", LAB_ID);
        return -1;
    }
    return n;
}

/* Sums over the decode steps of a run (ns), and the tokens it produced. */
typedef struct run_sum {
    double ph[LLM_PHASE_COUNT];
    double step, exposed_cpu, hidden_cpu;
    long steps, overlapped;
    double *step_ns;          /* [cap] each step's time: the median resists preemptions */
    long cap;
    double wall_s;
    int *tok;                 /* [B * steps] request-major */
    int *n;                   /* [B] */
    int max_out;
} run_sum;

/* The added scheduling cost: spin on the clock (a sleep would free the CPU, which a real
 * scheduler does not). */
static void busy_work(void *u)
{
    double until = mlsys_now_s() + *(const double *)u;
    volatile unsigned x = 0;
    while (mlsys_now_s() < until)
        x++;
}

static void on_event(void *u, const llm_engine_event *ev)
{
    run_sum *r = u;
    if (ev->token >= 0 && r->n[ev->id] < r->max_out)
        r->tok[(size_t)ev->id * r->max_out + r->n[ev->id]++] = ev->token;
}

/* The engine's options for B requests of plen + steps tokens: its cache sized for them,
 * not for the model's whole context. */
static llm_engine_opts soh_opts(int B, int plen, int steps, int seq_len)
{
    llm_engine_opts o = {.max_num_seqs = B,
                        .max_num_batched_tokens = B * plen > 256 ? B * plen : 256,
                        .max_model_len = plen + steps < seq_len ? plen + steps : seq_len};
    return o;
}

/* B requests of prompt_len tokens (distinct corpus documents), `steps` tokens each, greedy. */
static int run_engine(const llm_config *c, const llm_weights *w, const llm_tokenizer *t,
                      int **prompts, int plen, int B, int steps, int overlap,
                      mlsys_comm *comm, double *cost_s, run_sum *r)
{
    char err[256];
    llm_engine_opts o = soh_opts(B, plen, steps, c->seq_len);
    o.tok = t;
    o.overlap = overlap;
    o.comm = comm;
    o.plan_hook = *cost_s > 0 ? busy_work : NULL;
    o.plan_hook_u = cost_s;
    llm_engine *s = llm_engine_create(c, w, &o, err, sizeof err);
    if (!s) {
        fprintf(stderr, "mlsys-lab: %s: %s\n", LAB_ID, err);
        return -1;
    }
    for (int i = 0; i < B; i++) {
        llm_request q = {.prompt = prompts[i], .n_prompt = plen, .max_tokens = steps,
                         .ignore_eos = 1, .on_event = on_event, .u = r};
        if (llm_engine_submit(s, &q, err, sizeof err) < 0) {
            fprintf(stderr, "mlsys-lab: %s: %s\n", LAB_ID, err);
            llm_engine_free(s);
            return -1;
        }
    }
    double t0 = mlsys_now_s();
    while (llm_engine_has_work(s)) {
        llm_step_info info;
        int rc = llm_engine_step(s, &info);
        if (rc < 0) {
            llm_engine_free(s);
            return -1;
        }
        if (rc == 0 || info.prefill_rows > 0 || info.n_items != B)
            continue;             /* decode steps of the full batch only */
        llm_step_stats st;
        llm_engine_last_stats(s, &st);
        for (int p = 0; p < LLM_PHASE_COUNT; p++)
            r->ph[p] += (double)llm_phase_ns(&st, p);
        r->step += (double)(st.t_end - st.t_start);
        if (r->steps == r->cap) {
            r->cap = r->cap ? 2 * r->cap : 64;
            r->step_ns = realloc(r->step_ns, (size_t)r->cap * sizeof(double));
            if (!r->step_ns) {
                fprintf(stderr, "mlsys-lab: %s: out of memory\n", LAB_ID);
                exit(1);
            }
        }
        r->step_ns[r->steps] = (double)(st.t_end - st.t_start);
        r->hidden_cpu += (double)(llm_phase_ns(&st, LLM_PHASE_SCHEDULE_NEXT) +
                                  llm_phase_ns(&st, LLM_PHASE_PREPARE_NEXT));
        r->steps++;
        r->overlapped += st.overlapped;
    }
    r->wall_s += mlsys_now_s() - t0;
    llm_engine_free(s);
    return 0;
}

static double load_now(void)
{
    double l = -1;
    FILE *f = fopen("/proc/loadavg", "r");
    if (f) {
        if (fscanf(f, "%lf", &l) != 1)
            l = -1;
        fclose(f);
    }
    return l;
}

static double median_ms(run_sum *r)
{
    return mlsys_percentile(r->step_ns, (size_t)r->steps, 50) / 1e6;
}

static double ms(double ns, long n)
{
    return n > 0 ? ns / (double)n / 1e6 : 0.0;
}

static void print_plain_row(int B, run_sum *r)
{
    static const int order[] = {LLM_PHASE_SCHEDULE, LLM_PHASE_PREPARE, LLM_PHASE_FORWARD,
                                LLM_PHASE_SAMPLE, LLM_PHASE_DETOKENIZE};
    printf("  %5d |", B);
    for (int i = 0; i < 5; i++) {
        double v = ms(r->ph[order[i]], r->steps);
        printf(" %7.3f %4.1f%%", v, r->step > 0 ? 100.0 * r->ph[order[i]] / r->step : 0.0);
    }
    printf(" | %7.3f %7.3f\n", ms(r->step, r->steps), median_ms(r));
}

static int soh_main(mlsys_comm *comm, const lab_args *a)
{
    int sizes[MAX_SIZES], ns = parse_sizes(lab_arg_str(a, "batch-sizes"), sizes);
    if (ns < 0)
        return 2;
    llm_config c;
    llm_weights w;
    llm_tokenizer t;
    if (common_load_model(a, LAB_ID, &c, &w, &t))
        return 2;
    int steps = (int)lab_arg_int(a, "steps"), plen = (int)lab_arg_int(a, "prompt-len");
    int rounds = (int)lab_arg_int(a, "rounds"), maxb = 0;
    double cost = (double)lab_arg_int(a, "schedule-cost-us") * 1e-6;
    for (int i = 0; i < ns; i++)
        maxb = sizes[i] > maxb ? sizes[i] : maxb;
    /* prompts: the openings of the corpus's validation documents (repeated if short) */
    int **prompts = mlsys_xmalloc((size_t)maxb * sizeof(int *));
    int *ids = mlsys_xmalloc((LLM_DOC_MAX + 2) * sizeof(int));
    for (int i = 0; i < maxb; i++) {
        char doc[LLM_DOC_MAX];
        size_t dl = llm_corpus_doc(1, LLM_SPLIT_VAL, (uint64_t)i, doc, sizeof doc, NULL);
        int n = (int)llm_bpe_encode_prompt(&t, doc, dl, 1, ids);
        prompts[i] = mlsys_xmalloc((size_t)plen * sizeof(int));
        for (int k = 0; k < plen; k++)
            prompts[i][k] = n > 0 ? ids[k % n] : 3;
    }
    free(ids);
    run_sum *plain = calloc((size_t)ns, sizeof *plain), *ovl = calloc((size_t)ns, sizeof *ovl);
    int rc = 1, differ = 0;
    printf("Model %s: %d layers, dim %d; %s GEMM; %d decode steps per request, %d-token "
           "prompts,\n%d alternate runs of each engine per batch size (decode steps of the "
           "full batch counted).\n", lab_arg_str(a, "model"), c.n_layers, c.dim,
           nn_gemm_kernel_name(nn_get_gemm_kernel()), steps, plen, rounds);
    if (cost > 0)
        printf("Every scheduling does %.0f us of added busy work (--schedule-cost-us): a "
               "stand-in,\nnot this engine's own cost.\n", cost * 1e6);
    for (int i = 0; i < ns; i++) {
        int B = sizes[i];
        run_sum *rs[2] = {&plain[i], &ovl[i]};
        for (int m = 0; m < 2; m++) {
            rs[m]->max_out = steps;
            rs[m]->tok = mlsys_xcalloc((size_t)B * steps, sizeof(int));
            rs[m]->n = mlsys_xcalloc((size_t)B, sizeof(int));
        }
        for (int round = 0; round < rounds; round++)
            for (int k = 0; k < 2; k++) {
                int m = round % 2 ? 1 - k : k;      /* alternate which goes first */
                mlsys_comm *ev = round == 0 ? comm : NULL;
                char label[32];
                snprintf(label, sizeof label, "batch %d %s", B, m ? "overlap" : "plain");
                if (ev) {
                    /* a phase names the engine steps that follow it on the timeline: each
                     * frame says which batch size and which engine it shows */
                    mlsys_flow_info ph = {-1, -1, MLSYS_FLOW_PHASE, (int16_t)m, B, 2 * i + m,
                                          -1, 0};
                    mlsys_emit_flow(ev, &ph, 0, label);
                    mlsys_step(ev, 2 * i + m, label);
                }
                memset(rs[m]->n, 0, (size_t)B * sizeof(int));
                if (run_engine(&c, &w, &t, prompts, plen, B, steps, m, ev, &cost, rs[m]))
                    goto done;
            }
        if (memcmp(plain[i].tok, ovl[i].tok, (size_t)B * steps * sizeof(int)))
            differ++;
    }
    printf("\nWITHOUT OVERLAP: one decode step, ms and share of the step (mean over the steps)\n");
    printf("  batch | schedule        prepare         forward         sample          "
           "detokenize     | mean  median\n");
    for (int i = 0; i < ns; i++)
        print_plain_row(sizes[i], &plain[i]);
    printf("\nWITH OVERLAP: the worker thread schedules and prepares the next step while "
           "this one's forward runs\n");
    printf("  batch | plain step  overlap step   saved           | expected | forward  CPU on "
           "path  waiting | beside | tokens\n");
    for (int i = 0; i < ns; i++) {
        run_sum *p = &plain[i], *o = &ovl[i];
        double sp = median_ms(p), so = median_ms(o);
        double on_path = ms(o->ph[LLM_PHASE_SCHEDULE] + o->ph[LLM_PHASE_PREPARE] +
                            o->ph[LLM_PHASE_LAUNCH] + o->ph[LLM_PHASE_SAMPLE] +
                            o->ph[LLM_PHASE_DETOKENIZE], o->steps);
        /* with a core of its own the worker hides schedule + prepare, up to the forward */
        double fw = ms(p->ph[LLM_PHASE_FORWARD], p->steps);
        double sched = ms(p->ph[LLM_PHASE_SCHEDULE] + p->ph[LLM_PHASE_PREPARE], p->steps);
        printf("  %5d | %8.3f ms  %8.3f ms  %+8.3f ms %6.1f%% | %8.3f | %6.3f  %8.3f  %8.3f | "
               "%6.3f | %s\n", sizes[i], sp, so, sp - so, sp > 0 ? 100.0 * (sp - so) / sp : 0.0,
               sched < fw ? sched : fw,
               ms(o->ph[LLM_PHASE_FORWARD], o->steps), on_path,
               ms(o->ph[LLM_PHASE_WAIT], o->steps), ms(o->hidden_cpu, o->steps),
               memcmp(p->tok, o->tok, (size_t)sizes[i] * steps * sizeof(int)) ? "DIFFER"
                                                                              : "same tokens");
    }
    printf("  (ms per decode step; steps: medians, the rest: means. CPU on path: launch, "
           "sample,\n   detokenize, and any step not planned ahead; expected: the saving with a free "
           "core,\n   min(forward, schedule + prepare) of the plain engine; waiting: for the worker "
           "when its\n   planning outlasted the forward; beside: the worker's schedule + "
           "prepare of the next\n   step. It saves only where the worker has a core of its "
           "own: load %.2f on %ld cores.)\n",
           load_now(), sysconf(_SC_NPROCESSORS_ONLN));
    double g = lab_arg_double(a, "gpu-forward-ms");
    printf("\nWHAT IF the forward took %.1f ms at every batch size (a GPU decode step): the same "
           "CPU work\n", g);
    for (int i = 0; i < ns; i++) {
        const run_sum *p = &plain[i];
        double cpu = ms(p->ph[LLM_PHASE_SCHEDULE] + p->ph[LLM_PHASE_PREPARE] +
                        p->ph[LLM_PHASE_SAMPLE] + p->ph[LLM_PHASE_DETOKENIZE], p->steps);
        double sched = ms(p->ph[LLM_PHASE_SCHEDULE] + p->ph[LLM_PHASE_PREPARE], p->steps);
        printf("  batch %2d: %.3f ms of CPU = %.1f%% of the step; overlap would hide %.3f ms "
               "of it\n", sizes[i], cpu, 100.0 * cpu / (cpu + g), sched);
    }
    printf("  (arithmetic, not a measurement: a Python scheduler spends 1-5 ms here, not "
           "microseconds)\n");
    if (differ)
        printf("\n%d batch size(s) gave DIFFERENT tokens with overlap: a bug\n", differ);
    rc = differ ? 1 : 0;
done:
    for (int i = 0; i < ns; i++) {
        free(plain[i].tok), free(plain[i].n), free(plain[i].step_ns);
        free(ovl[i].tok), free(ovl[i].n), free(ovl[i].step_ns);
    }
    free(plain);
    free(ovl);
    for (int i = 0; i < maxb; i++)
        free(prompts[i]);
    free(prompts);
    llm_tokenizer_free(&t);
    llm_weights_free(&w);
    return rc;
}

/* Bad flags and files cost one line and exit 2 before the rank starts; --simulate answers
 * here, without ranks. */
static int soh_before(const lab_args *a)
{
    int sizes[MAX_SIZES];
    if (lab_arg_bool(a, "simulate")) {
        common_box(stdout, 68, "Scheduling overhead: the original's simulation");
        printf("\n");
        sched_sim_print(lab_arg_int(a, "batches"), lab_arg_double(a, "scheduling-ms"),
                        lab_arg_double(a, "compute-ms"), lab_arg_double(a, "postprocess-ms"));
        fflush(stdout);
        return 0;
    }
    int ns = parse_sizes(lab_arg_str(a, "batch-sizes"), sizes);
    if (ns < 0)
        return 2;
    llm_config c;
    if (common_load_model(a, LAB_ID, &c, NULL, NULL))
        return 2;
    long need = lab_arg_int(a, "prompt-len") + lab_arg_int(a, "steps");
    if (need > c.seq_len + 1) {
        fprintf(stderr, "mlsys-lab: %s: --prompt-len %ld + --steps %ld do not fit the model's "
                "context of %d tokens\n", LAB_ID, lab_arg_int(a, "prompt-len"),
                lab_arg_int(a, "steps"), c.seq_len);
        return 2;
    }
    /* what the engine will allocate for the largest batch, before a rank starts */
    int maxb = 0;
    for (int i = 0; i < ns; i++)
        maxb = sizes[i] > maxb ? sizes[i] : maxb;
    llm_engine_opts o = soh_opts(maxb, (int)lab_arg_int(a, "prompt-len"),
                                (int)lab_arg_int(a, "steps"), c.seq_len);
    char err[512];
    if (llm_engine_plan(&c, &o, err, sizeof err)) {
        fprintf(stderr, "mlsys-lab: %s: %s\n", LAB_ID, err);
        return 2;
    }
    common_box(stdout, 68, "Scheduling overhead on the serving engine");
    fflush(stdout);
    return -1;
}

const lab ch10_scheduling_overhead_benchmark_lab = {
    .id = LAB_ID,
    .title = "Scheduling overhead",
    .summary = "a serving step split into schedule, prepare, forward, sample and detokenize "
               "per batch size, then the overlap scheduler side by side",
    .flags = soh_flags,
    .min_ranks = 1,
    .max_ranks = 1,
    .before = soh_before,
    .rank_main = soh_main,
    .view = "timeline",
};
