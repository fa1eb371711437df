/* minimal_inference_server.c - ch08/minimal-inference-server: the lab's own serving engine
 * (core/llm/engine.h) on the lab's model, fed the original script's workload (its eight
 * prompts, requests submitted in order at time 0). One line per engine step says who
 * prefills how many tokens and who decodes in that one forward; then each request's TTFT,
 * time per output token and latency, percentiles and throughput. Each request asks for its
 * own number of tokens (drawn from its seed up to --max-tokens), so requests finish at
 * different steps and continuous batching has seats to refill; --static runs the same
 * workload with static batching, --compare runs both and sets them side by side.
 * --simulate runs the original's fake server on a virtual clock instead (server_sim.c),
 * labelled as such. */
#include "ch08.h"
#include "../common/load_model.h"
#include "../../core/llm/engine.h"
#include "../../core/llm/tp_step.h"
#include "../../core/nn/nn.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>

static const lab_flag mis_flags[] = {
    {"num-requests", 0, FLAG_INT, "5", NULL, 1, 64, "number of requests submitted"},
    {"batch-size", 0, FLAG_INT, "4", NULL, 1, 64, "most requests running at once (the "
     "original's B; the engine's --max-num-seqs unless that is given)"},
    {"max-num-seqs", 0, FLAG_INT, "0", NULL, 0, 64, "sequences in one step's batch (0: "
     "--batch-size)"},
    {"max-num-batched-tokens", 0, FLAG_INT, "256", NULL, 1, 4096, "token budget of one step: "
     "prompt rows and decode rows together (a longer prompt is prefilled in chunks)"},
    {"block-size", 0, FLAG_INT, "16", NULL, 1, 128, "tokens per KV-cache block"},
    {"kv-blocks", 0, FLAG_INT, "0", NULL, 0, 65536, "KV-cache blocks (0: a full context per "
     "seat); few blocks force preemption"},
    {"max-tokens", 0, FLAG_INT, "20", NULL, 1, 128, "tokens generated per request at most "
     "(request i asks for a number drawn from its seed between a quarter of this and all)"},
    {"fixed-output", 0, FLAG_BOOL, NULL, NULL, 0, 0, "every request asks for --max-tokens (the "
     "original's workload: they all end together)"},
    {"static", 0, FLAG_BOOL, NULL, NULL, 0, 0, "static batching: a batch waits for its "
     "longest member, newcomers for the whole batch"},
    {"compare", 0, FLAG_BOOL, NULL, NULL, 0, 0, "run the workload with continuous and with "
     "static batching and compare them"},
    {"temperature", 0, FLAG_DOUBLE, "0.8", NULL, 0, 0, "sampling temperature (0: greedy)"},
    {"seed", 0, FLAG_INT, "42", NULL, 0, 1L << 40, "request i samples with seed + i; the "
     "simulation's random stream"},
    {"simulate", 0, FLAG_BOOL, NULL, NULL, 0, 0, "the original's fake server on a virtual "
     "clock (no model)"},
    {"eos-prob", 0, FLAG_DOUBLE, "0.1", NULL, 0, 0, "--simulate: chance that a decoded token "
     "is EOS (0: every request runs to --max-tokens)"},
    {"model", 0, FLAG_STR, "assets/models/model.bin", NULL, 0, 0, "llama2.c checkpoint"},
    {"tokenizer", 0, FLAG_STR, "assets/models/tokenizer.bin", NULL, 0, 0, "its tokenizer"},
    {"serve", 0, FLAG_STR, NULL, NULL, 0, 0, "[ADDR:]PORT: serve the model over HTTP, "
     "OpenAI-compatible (ADDR 127.0.0.1 unless given; port 0: a free one)"},
    {"api-key", 0, FLAG_STR, NULL, NULL, 0, 0, "--serve: requests to /v1/ need "
     "'Authorization: Bearer KEY' (or set MLSYS_LAB_API_KEY, out of the process list)"},
    {"served-model-name", 0, FLAG_STR, "mlsys-lab", NULL, 0, 0, "--serve: the model id "
     "requests name"},
    {"speculative", 0, FLAG_INT, "0", NULL, 0, 16, "--serve: greedy requests speculate with "
     "the draft model, K tokens drafted a step (in the batch)"},
    {"draft", 0, FLAG_STR, "assets/models/draft.bin", NULL, 0, 0, "--speculative: the draft "
     "model"},
    {"drain-timeout", 0, FLAG_DOUBLE, "10", NULL, 0, 3600, "--serve: seconds SIGINT/SIGTERM "
     "leaves the requests in flight before cancelling them"},
    {"stream-interval", 0, FLAG_INT, "1", NULL, 1, 1024, "--serve: a stream's event carries "
     "the text of this many new tokens (fewer events: less CPU per token)"},
    {"tensor-parallel-size", 't', FLAG_INT, "1", NULL, 1, 8, "ranks the model is split over "
     "(vLLM's flag), as chapter 6 splits a layer: each computes 1/T of every layer's heads "
     "and MLP units, two all-reduces per layer; rank 0 schedules, samples and serves"},
    {NULL, 0, 0, NULL, NULL, 0, 0, NULL}
};

/* What the callbacks fill in while the engine runs. Gated, the engine waits at a gate
 * before each step until the viewer lets it go: the steps a request's first token and its
 * end came in say how much of that waiting to take off its times (engine time). */
typedef struct mis_run {
    ch08_req *req;
    int *order, n_done;
    double t0;
    size_t *text_len;
    long step;                  /* the step running now (1 for the first) */
    long *first_step, *last_step;       /* [request]: the steps of its first and last event */
} mis_run;

/* What one run of the workload came to, for the closing notes and --compare: steps, times
 * in ms, and per request the step that prefilled it and the step it finished in. */
typedef struct mis_sum {
    long steps;
    double wall_ms, ttft_p50, ttft_p99, lat_p50, lat_p99, tokens_s;
    long *pre_step, *fin_step;      /* [N], 0 until known */
} mis_sum;

/* Request i's max_tokens: --max-tokens with --fixed-output; otherwise drawn from its own
 * stream, uniformly between a quarter of --max-tokens (at least 1) and all of it. */
static int request_max_tokens(const lab_args *a, int i)
{
    int hi = (int)lab_arg_int(a, "max-tokens"), lo = (hi + 3) / 4;
    if (lab_arg_bool(a, "fixed-output"))
        return hi;
    mlsys_rng r;
    mlsys_rng_seed(&r, (uint64_t)lab_arg_int(a, "seed") * 0x9e3779b97f4a7c15ull + (uint64_t)i);
    return lo + (int)(mlsys_rng_u64(&r) % (uint64_t)(hi - lo + 1));
}

static void on_event(void *u, const llm_engine_event *ev)
{
    mis_run *m = u;
    ch08_req *q = &m->req[ev->id];
    if (ev->token >= 0 && !m->first_step[ev->id])
        m->first_step[ev->id] = m->step;
    m->last_step[ev->id] = m->step;
    /* the start of the output for the table, newlines shown as \n */
    for (int i = 0; i < ev->text_len && m->text_len[ev->id] + 3 < 40; i++) {
        char ch = ev->text[i];
        size_t *k = &m->text_len[ev->id];
        if (ch == '\n' || ch == '"') {
            q->text[(*k)++] = '\\';
            q->text[(*k)++] = ch == '\n' ? 'n' : '"';
        } else {
            q->text[(*k)++] = (ch >= 32 && ch < 127) ? ch : '?';
        }
        q->text[*k] = 0;
    }
    if (ev->finish == LLM_FINISH_NONE)
        return;
    q->n_out = ev->st->n_out;
    q->n_cached = ev->st->n_cached;
    q->preemptions = ev->st->preemptions;
    q->finish = llm_finish_name(ev->finish);
    q->t_arrival = ev->st->t_arrival - m->t0;
    q->t_first = ev->st->t_first - m->t0;
    q->t_finish = ev->st->t_finish - m->t0;
    m->order[m->n_done++] = ev->id;
}

/* "r0:9 r1:9" and "r2 r3": who prefills how many rows, who decodes. */
static void step_line(const llm_step_info *in, double t_ms, char *out, size_t n)
{
    char pre[256] = "", dec[256] = "", fin[256] = "";
    size_t lp = 0, ld = 0, lf = 0;
    for (int i = 0; i < in->n_items; i++) {
        const llm_step_item *it = &in->items[i];
        if (it->prefill && lp < sizeof pre - 16)
            lp += (size_t)snprintf(pre + lp, sizeof pre - lp, "%sr%d:%d", lp ? " " : "", it->id,
                                   it->n);
        else if (!it->prefill && ld < sizeof dec - 8)
            ld += (size_t)snprintf(dec + ld, sizeof dec - ld, "%sr%d", ld ? " " : "", it->id);
    }
    for (int i = 0; i < in->n_finished && lf < sizeof fin - 8; i++)
        lf += (size_t)snprintf(fin + lf, sizeof fin - lf, "%s r%d", i ? "" : "   finished",
                               in->finished[i]);
    for (int i = 0; i < in->n_preempted && lf < sizeof fin - 16; i++)
        lf += (size_t)snprintf(fin + lf, sizeof fin - lf, "%s r%d", i ? "" : "   preempted",
                               in->preempted[i]);
    snprintf(out, n, "  step %3ld %9.2f ms  prefill %-18s decode %s%s", in->step, t_ms,
             lp ? pre : "-", ld ? dec : "-", fin);
}

/* Bad flags and files cost one line and exit 2 before the rank starts. */
static int mis_before(const lab_args *a)
{
    double eos = lab_arg_double(a, "eos-prob"), temp = lab_arg_double(a, "temperature");
    if (!(eos >= 0.0 && eos <= 1.0) || !(temp >= 0.0 && temp <= 100.0)) {
        fprintf(stderr, "mlsys-lab: ch08/minimal-inference-server: --eos-prob %g must be a "
                "probability, --temperature %g in [0, 100]\n", eos, temp);
        return 2;
    }
    int T = (int)lab_arg_int(a, "tensor-parallel-size");
    if (lab_arg_bool(a, "simulate")) {
        if (T > 1) {
            fprintf(stderr, "mlsys-lab: ch08/minimal-inference-server: --tensor-parallel-size "
                    "splits the lab's model over ranks; --simulate has no model\n");
            return 2;
        }
        return -1;
    }
    int serve = lab_arg_given(a, "serve");
    if (serve && T == 1)
        return ch08_serve_here() ? ch08_serve(a, NULL) : -1;
    if (serve) {            /* on T ranks: the model must split, then rank 0 serves */
        llm_config c;
        if (common_load_model(a, "ch08/minimal-inference-server", &c, NULL, NULL))
            return 2;
        return ch08_tp_check(&c, T) ? 2 : -1;
    }
    int seqs = (int)lab_arg_int(a, "max-num-seqs");
    if (seqs == 0)
        seqs = (int)lab_arg_int(a, "batch-size");
    if (lab_arg_int(a, "max-num-batched-tokens") < seqs) {
        fprintf(stderr, "mlsys-lab: ch08/minimal-inference-server: --max-num-batched-tokens "
                "%ld is below the %d sequences a step may decode\n",
                lab_arg_int(a, "max-num-batched-tokens"), seqs);
        return 2;
    }
    llm_config c;
    llm_weights w;
    llm_tokenizer t;
    if (common_load_model(a, "ch08/minimal-inference-server", &c, &w, &t))
        return 2;
    llm_weights_free(&w);
    llm_tokenizer_free(&t);
    if (ch08_tp_check(&c, T))
        return 2;
    int bs = (int)lab_arg_int(a, "block-size"), blocks = (int)lab_arg_int(a, "kv-blocks");
    if (bs > c.seq_len || (blocks > 0 && blocks < (c.seq_len + bs - 1) / bs)) {
        fprintf(stderr, "mlsys-lab: ch08/minimal-inference-server: --block-size %d and "
                "--kv-blocks %d: the pool must hold one full context of %d tokens\n", bs,
                blocks, c.seq_len);
        return 2;
    }
    return -1;
}

/* The workload once, with continuous (or static) batching. verbose: the banner, one line
 * per submission and per step, the report; otherwise nothing but sum. */
static int run_workload(mlsys_comm *c, const lab_args *a, const llm_config *cfg,
                        const llm_weights *w, llm_tokenizer *tok, int is_static, int verbose,
                        mis_sum *sum)
{
    char err[512], rule[256], mpath[4096];
    int N = (int)lab_arg_int(a, "num-requests");
    int seqs = (int)lab_arg_int(a, "max-num-seqs");
    if (seqs == 0)
        seqs = (int)lab_arg_int(a, "batch-size");
    llm_engine_opts o = {
        .max_num_seqs = seqs,
        .max_num_batched_tokens = (int)lab_arg_int(a, "max-num-batched-tokens"),
        .block_size = (int)lab_arg_int(a, "block-size"),
        .n_blocks = (int)lab_arg_int(a, "kv-blocks"),
        .admit = is_static ? llm_admit_static : NULL,
        .tok = tok,
        .comm = verbose ? c : NULL,
        .tp = mlsys_size(c) > 1 ? c : NULL,     /* --tensor-parallel-size: rank 0 leads */
    };
    int rc = 2;
    if (o.tp && llm_tp_announce(cfg, &o, err, sizeof err)) {
        fprintf(stderr, "mlsys-lab: ch08/minimal-inference-server: %s\n", err);
        return 2;
    }
    llm_engine *s = llm_engine_create(cfg, w, &o, err, sizeof err);
    if (!s) {
        fprintf(stderr, "mlsys-lab: ch08/minimal-inference-server: %s\n", err);
        if (o.tp)
            llm_tp_announce_cancel(c);      /* the others expected its steps */
        return 2;
    }
    lab_asset_path(lab_arg_str(a, "model"), mpath, sizeof mpath);    /* for the banner */
    if (verbose) {
        llm_paged_stats ps;
        llm_paged_stats_get(llm_engine_kv(s), &ps);
        common_box(stdout, 68, "Minimal inference server");
        printf("The lab's model (%s: dim %d, %d layers, context %d) behind its serving "
               "engine:\n%s batching, at most %d sequences and %d tokens per step, a paged KV "
               "cache of\n%d blocks x %d tokens (%llu bytes per token%s), prefix caching on.\n"
               "%d requests, max_tokens %s%ld, temperature %g, seed %ld (request i: seed + "
               "i)\n", mpath, cfg->dim, cfg->n_layers, cfg->seq_len,
               is_static ? "static" : "continuous", seqs, o.max_num_batched_tokens,
               ps.n_blocks, ps.block_size,
               (unsigned long long)(ps.bytes_per_block / (uint64_t)ps.block_size),
               o.tp ? " on each rank" : "", N,
               lab_arg_bool(a, "fixed-output") ? "" : "drawn per request, at most ",
               lab_arg_int(a, "max-tokens"), lab_arg_double(a, "temperature"),
               lab_arg_int(a, "seed"));
        if (o.tp)
            ch08_tp_banner(stdout, cfg, c);
    }
    mis_run m = {0};
    m.req = calloc((size_t)N, sizeof *m.req);
    m.order = calloc((size_t)N, sizeof(int));
    m.text_len = calloc((size_t)N, sizeof(size_t));
    m.first_step = calloc((size_t)N, sizeof(long));
    m.last_step = calloc((size_t)N, sizeof(long));
    int (*ids)[160] = calloc((size_t)N, sizeof *ids);
    if (verbose)
        printf("\n%s\nSubmitting %d requests (all at time 0, prompt i mod 8)\n%s\n",
               common_rule(rule, sizeof rule, "=", 70), N, rule);
    m.t0 = mlsys_now_s();
    for (int i = 0; i < N; i++) {
        const char *text = ch08_prompts[i % CH08_NPROMPTS];
        int n = (int)llm_bpe_encode_prompt(tok, text, strlen(text), 1, ids[i]);
        llm_request r = {.prompt = ids[i], .n_prompt = n, .max_tokens = request_max_tokens(a, i),
                         .temperature = (float)lab_arg_double(a, "temperature"),
                         .top_p = 0.95f, .seed = (uint64_t)lab_arg_int(a, "seed") + (uint64_t)i,
                         .on_event = on_event, .u = &m};
        int id = llm_engine_submit(s, &r, err, sizeof err);
        if (id < 0) {
            fprintf(stderr, "mlsys-lab: ch08/minimal-inference-server: request %d: %s\n", i,
                    err);
            goto done;
        }
        m.req[id] = (ch08_req){.id = id, .n_prompt = n, .finish = "?"};
        if (verbose)
            printf("  request %d: \"%s\" (%d tokens with BOS), max_tokens %d, queue length "
                   "%d\n", id, text, n, r.max_tokens, i + 1);
    }
    int st, gated = mlsys_gated(c);
    if (verbose) {
        printf("\n%s\nProcessing: one line per engine step (one forward for all its rows)%s\n"
               "%s\n", rule, gated ? ",\nat the engine's own time: its waits at the gates are "
               "left out" : "", rule);
        fflush(stdout);
    }
    llm_step_info info;
    /* gated: waited[k] is the time spent at the gates of steps 1..k (before each step, the
     * gap since the last one ended: the wait for the viewer, and printing a line) */
    long cap = 64;
    double *waited = mlsys_xcalloc((size_t)cap, sizeof *waited), prev_end = mlsys_now_s();
    uint64_t fwd_ns = 0;        /* the forwards' time, for the all-reduces' share */
    for (m.step = 1;; m.step++) {
        if (m.step + 1 >= cap) {
            cap *= 2;
            double *more = realloc(waited, (size_t)cap * sizeof *waited);
            if (!more) {
                fprintf(stderr, "mlsys-lab: ch08/minimal-inference-server: out of memory at "
                        "step %ld\n", m.step);
                st = -1;
                break;
            }
            waited = more;
        }
        st = llm_engine_step(s, &info);
        if (st <= 0) {      /* the engine's last call: it had nothing left to do */
            waited[m.step] = waited[m.step - 1] + (gated ? mlsys_now_s() - prev_end : 0.0);
            break;
        }
        waited[m.step] = waited[m.step - 1] + (gated ? info.t_start - prev_end : 0.0);
        prev_end = info.t_end;
        llm_step_stats ss;
        llm_engine_last_stats(s, &ss);
        fwd_ns += llm_phase_ns(&ss, LLM_PHASE_FORWARD);
        for (int i = 0; i < info.n_items; i++) {
            int id = info.items[i].id;
            if (info.items[i].prefill && id >= 0 && id < N && !sum->pre_step[id])
                sum->pre_step[id] = info.step;
        }
        for (int i = 0; i < info.n_finished; i++)
            if (info.finished[i] >= 0 && info.finished[i] < N)
                sum->fin_step[info.finished[i]] = info.step;
        sum->steps = info.step;
        if (verbose) {
            char line[1024];
            step_line(&info, (info.t_end - m.t0 - waited[m.step]) * 1e3, line, sizeof line);
            printf("%s\n", line);
            fflush(stdout);     /* the engine stops at a gate before each step (--gated) */
        }
    }
    if (st < 0) {
        free(waited);
        goto done;
    }
    double wall = mlsys_now_s() - m.t0, held = waited[m.step];
    if (gated) {            /* engine time: the end of its last step, the gates left out */
        wall = prev_end - m.t0 - waited[m.step - 1];
        for (int i = 0; i < N; i++) {
            m.req[i].t_first -= waited[m.first_step[i]];
            m.req[i].t_finish -= waited[m.last_step[i]];
        }
    }
    free(waited);
    /* the figures --compare sets side by side */
    double *ttft = calloc((size_t)N + 1, sizeof(double)), *lat = calloc((size_t)N + 1,
                                                                         sizeof(double));
    long tokens = 0;
    for (int k = 0; k < m.n_done; k++) {
        const ch08_req *q = &m.req[m.order[k]];
        ttft[k] = (q->t_first - q->t_arrival) * 1e3;
        lat[k] = (q->t_finish - q->t_arrival) * 1e3;
        tokens += q->n_out;
    }
    sum->wall_ms = wall * 1e3;
    sum->tokens_s = wall > 0 ? tokens / wall : 0.0;
    sum->ttft_p50 = mlsys_percentile(ttft, (size_t)m.n_done, 50);
    sum->ttft_p99 = mlsys_percentile(ttft, (size_t)m.n_done, 99);
    sum->lat_p50 = mlsys_percentile(lat, (size_t)m.n_done, 50);
    sum->lat_p99 = mlsys_percentile(lat, (size_t)m.n_done, 99);
    free(ttft);
    free(lat);
    if (verbose) {
        llm_engine_metrics met;
        llm_engine_metrics_get(s, &met);
        ch08_report(stdout, m.req, m.order, m.n_done, wall, 0, gated ? held : -1.0);
        printf("  %-24s %ld prompt rows + %ld decode rows in %ld steps; %ld of %ld prompt "
               "tokens found\n  %-24s in the prefix cache; %ld preemptions\n", "engine",
               met.prefill_tokens, met.decode_tokens, met.steps, met.prefix_hit_tokens,
               met.prefix_query_tokens, "", met.preemptions);
        if (o.tp) {
            uint64_t n_ar, ar_ns;
            llm_engine_tp_stats(s, &n_ar, &ar_ns);
            printf("  %-24s %d ranks: %llu all-reduces of [rows, %d] floats took %.2f ms of the\n"
                   "  %-24s forwards' %.2f ms on rank 0 (%.1f%%)\n", "tensor parallel",
                   mlsys_size(c), (unsigned long long)n_ar, cfg->dim, (double)ar_ns * 1e-6, "",
                   (double)fwd_ns * 1e-6, fwd_ns ? 100.0 * (double)ar_ns / (double)fwd_ns : 0.0);
        }
    }
    rc = 0;
done:
    free(m.req);
    free(m.order);
    free(m.text_len);
    free(m.first_step);
    free(m.last_step);
    free(ids);
    llm_engine_free(s);
    return rc;
}

/* What this run showed about batching, from its own steps: the first request beyond the
 * seats, when it was prefilled and when the seat it took was freed. */
static void batching_note(const lab_args *a, const mis_sum *u, int is_static)
{
    int N = (int)lab_arg_int(a, "num-requests"), seqs = (int)lab_arg_int(a, "max-num-seqs");
    if (seqs == 0)
        seqs = (int)lab_arg_int(a, "batch-size");
    if (N <= seqs) {
        printf("  3. Batching: with more requests than seats (--num-requests above\n"
               "     --batch-size) a newcomer waits for a seat: %s.\n", is_static ?
               "under --static, until the whole\n     batch is done" : "continuous batching "
               "gives it\n     the one the first finisher frees");
        return;
    }
    long first_fin = 0, last_fin = 0;
    int first = 0;
    for (int i = 0; i < seqs; i++) {
        if (!first_fin || (u->fin_step[i] && u->fin_step[i] < first_fin))
            first_fin = u->fin_step[i], first = i;
        if (u->fin_step[i] > last_fin)
            last_fin = u->fin_step[i];
    }
    long joined = u->pre_step[seqs];
    if (is_static)
        printf("  3. Static batching: the first %d requests finished between steps %ld and "
               "%ld;\n     r%d waited for the last of them and was prefilled in step %ld.\n",
               seqs, first_fin, last_fin, seqs, joined);
    else if (first_fin < last_fin)
        printf("  3. Continuous batching: r%d finished in step %ld while others ran until step "
               "%ld;\n     r%d took its seat in step %ld%s (under --static it waits for\n"
               "     the whole batch).\n", first, first_fin, last_fin, seqs, joined,
               joined == first_fin + 1 ? ", the very next step" : "");
    else
        printf("  3. The first %d requests all finished in step %ld: r%d had no seat before "
               "then;\n     continuous batching shows when lengths differ (without "
               "--fixed-output).\n", seqs, first_fin, seqs);
}

static int mis_real(mlsys_comm *c, const lab_args *a)
{
    llm_config cfg;
    llm_weights w;
    llm_tokenizer tok;
    if (common_load_model(a, "ch08/minimal-inference-server", &cfg, &w, &tok))
        return 2;
    int N = (int)lab_arg_int(a, "num-requests"), is_static = lab_arg_bool(a, "static");
    mis_sum u[3] = {{0}};
    for (int k = 0; k < 3; k++) {
        u[k].pre_step = calloc((size_t)N, sizeof(long));
        u[k].fin_step = calloc((size_t)N, sizeof(long));
    }
    int rc = run_workload(c, a, &cfg, &w, &tok, is_static, 1, &u[0]);
    if (rc)
        goto out;
    printf("\nWhat happened:\n"
           "  1. Each request: text -> token ids -> the waiting queue -> the scheduler -> the\n"
           "     model -> one token at a time back to its callback (streaming) -> text.\n"
           "  2. Each step is ONE forward over rows from several requests: whole prompt\n"
           "     chunks (prefill) and one row per running request (decode) together.\n");
    batching_note(a, &u[0], is_static);
    printf("  4. TTFT is queueing plus prefill; time per output token is the step time, which\n"
           "     grows with the batch on a CPU (the chapter says why a GPU differs).\n"
           "  5. KV memory comes in blocks from one pool; when it runs out the newest request\n"
           "     is preempted and recomputed (try --kv-blocks 8 --num-requests 8).\n");
    if (mlsys_size(c) > 1)
        printf("  6. Tensor parallelism: every forward ran on %d ranks, each with 1/%d of every\n"
               "     layer; the all-reduces above are what the split costs. On CPU cores that\n"
               "     share one memory it only adds work; on GPUs each holds and reads 1/%d of\n"
               "     the weights and KV cache, which is what a decode step waits for.\n",
               mlsys_size(c), mlsys_size(c), mlsys_size(c));
    if (lab_arg_bool(a, "compare")) {
        /* the same workload quietly with each rule, the run above having warmed the caches;
         * then the two side by side */
        if ((rc = run_workload(c, a, &cfg, &w, &tok, 0, 0, &u[1])) ||
            (rc = run_workload(c, a, &cfg, &w, &tok, 1, 0, &u[2])))
            goto out;
        char rule[256];
        printf("\n%s\nContinuous against static batching, the same %d requests\n%s\n",
               common_rule(rule, sizeof rule, "=", 70), N, rule);
        printf("  %-10s %5s %8s %10s %10s %10s %10s %9s\n", "", "steps", "last in", "TTFT p50",
               "TTFT p99", "e2e p50", "e2e p99", "tokens/s");
        for (int k = 1; k < 3; k++) {
            long last_in = 0;
            for (int i = 0; i < N; i++)
                last_in = u[k].pre_step[i] > last_in ? u[k].pre_step[i] : last_in;
            printf("  %-10s %5ld %8ld %7.2f ms %7.2f ms %7.2f ms %7.2f ms %9.0f\n",
                   k == 1 ? "continuous" : "static", u[k].steps, last_in, u[k].ttft_p50,
                   u[k].ttft_p99, u[k].lat_p50, u[k].lat_p99, u[k].tokens_s);
        }
        printf("  (last in: the step that prefilled the last request.) Static batching fills\n"
               "  the batch once and waits for its longest request, so newcomers wait for the\n"
               "  whole batch and seats stand empty. Steps are exact; times are this run's,\n"
               "  one after the other on a shared machine: make bench compares many runs.\n");
    }
out:
    for (int k = 0; k < 3; k++) {
        free(u[k].pre_step);
        free(u[k].fin_step);
    }
    llm_tokenizer_free(&tok);
    llm_weights_free(&w);
    return rc;
}

/* Ranks 1..T-1 of --tensor-parallel-size T: no scheduler, no HTTP; each runs its share of
 * the forwards of every engine rank 0 runs, until rank 0 says it is done. */
static int mis_follow(mlsys_comm *c, const lab_args *a)
{
    signal(SIGUSR1, SIG_IGN);       /* the launcher's stop is for rank 0, which drains */
    if (lab_arg_given(a, "serve") && lab_arg_int(a, "speculative") > 0 && !getenv("MLSYS_GEMM"))
        nn_set_gemm_kernel(NN_GEMM_INVARIANT);     /* as rank 0 (serve_http.c) */
    llm_config cfg;
    llm_weights w;
    if (common_load_model(a, "ch08/minimal-inference-server", &cfg, &w, NULL))
        return 2;
    char err[512];
    long engines, steps;
    int rc = 0;
    if (llm_tp_follow_engines(c, &cfg, &w, &engines, &steps, err, sizeof err)) {
        fprintf(stderr, "mlsys-lab: ch08/minimal-inference-server: %s\n", err);
        rc = 1;
    }
    llm_weights_free(&w);
    return rc;
}

static int mis_lead(mlsys_comm *c, const lab_args *a)
{
    if (lab_arg_given(a, "serve") && !lab_arg_bool(a, "simulate"))
        return ch08_serve(a, c);
    if (!lab_arg_bool(a, "simulate"))
        return mis_real(c, a);
    double eos = lab_arg_double(a, "eos-prob");
    ch08_sim_opts o = {(int)lab_arg_int(a, "num-requests"), (int)lab_arg_int(a, "batch-size"),
                       (int)lab_arg_int(a, "max-tokens"), eos,
                       (uint64_t)lab_arg_int(a, "seed")};
    common_box(stdout, 68, "Minimal inference server (simulation)");
    printf("SIMULATION of the original script: no model, random token ids, a virtual clock.\n"
           "Prefill costs 0.1 ms per prompt token, a decode step 10 ms whatever the batch.\n"
           "Max batch size %d, %d requests, max_tokens %d, EOS probability %g, seed %llu\n\n",
           o.batch_size, o.num_requests, o.max_tokens, o.eos_prob,
           (unsigned long long)o.seed);
    ch08_sim_result r;
    ch08_simulate(stdout, &o, &r);
    printf("\nWhat the simulation shows (and leaves out):\n"
           "  1. The request path: queue -> scheduler -> model runner -> response.\n"
           "  2. Prefill runs one request at a time and alone; decode batches every running\n"
           "     request in one step.\n"
           "  3. A bigger batch raises throughput (one 10 ms step serves all) at the cost of\n"
           "     latency (a newcomer waits for a seat).\n"
           "  4. Continuous batching, simplified: a finished request frees its seat and the\n"
           "     next one prefills while the others wait for the decode step.\n"
           "  5. Not here: a real model, a KV cache and its memory, streaming, chunked\n"
           "     prefill, preemption (run without --simulate for the real engine).\n");
    return 0;
}

static int mis_rank(mlsys_comm *c, const lab_args *a)
{
    if (mlsys_size(c) > 1 && mlsys_rank(c) > 0)
        return mis_follow(c, a);
    int rc = mis_lead(c, a);
    if (mlsys_size(c) > 1 && llm_tp_announce_end(c)) {
        fprintf(stderr, "mlsys-lab: ch08/minimal-inference-server: telling the other ranks "
                "that rank 0 is done: %s\n", mlsys_errmsg(c));
        rc = rc ? rc : 1;
    }
    return rc;
}

/* A server on tensor-parallel ranks ends the job itself: rank 0 drains its requests, then
 * stops the others (--drain-timeout, and a few seconds to spare). */
static double mis_stop_grace(const lab_args *a)
{
    if (!lab_arg_given(a, "serve") || lab_arg_int(a, "tensor-parallel-size") < 2)
        return 0.0;
    return lab_arg_double(a, "drain-timeout") + 5.0;
}

const lab ch08_minimal_inference_server_lab = {
    .id = "ch08/minimal-inference-server",
    .title = "Minimal inference server",
    .summary = "the lab's model served with continuous batching: who prefills and decodes "
               "each step, TTFT, TPOT, latency",
    .flags = mis_flags,
    .min_ranks = 1,
    .max_ranks = 8,
    .ranks_flag = "tensor-parallel-size",
    .before = mis_before,
    .rank_main = mis_rank,
    .view = "serve",
    .stop_grace_s = mis_stop_grace,
};
