/* minimal_inference_server.c - ch08/minimal-inference-server: the lab's own serving engine
 * (core/llm/engine.h) on the lab's model, fed the original script's workload (its eight
 * prompts, requests submitted in order at time 0). One line per engine step says who
 * prefills how many tokens and who decodes in that one forward; then each request's TTFT,
 * time per output token and latency, percentiles and throughput. --simulate runs the
 * original's fake server on a virtual clock instead (server_sim.c), labelled as such. */
#include "ch08.h"
#include "../common/model.h"
#include "../../core/llm/engine.h"

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
    {"max-tokens", 0, FLAG_INT, "20", NULL, 1, 128, "tokens generated per request at most"},
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
     "'Authorization: Bearer KEY'"},
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
    {NULL, 0, 0, NULL, NULL, 0, 0, NULL}
};

/* What the callbacks fill in while the engine runs. */
typedef struct mis_run {
    ch08_req *req;
    int *order, n_done;
    double t0;
    size_t *text_len;
} mis_run;

static void on_event(void *u, const llm_engine_event *ev)
{
    mis_run *m = u;
    ch08_req *q = &m->req[ev->id];
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
    if (lab_arg_bool(a, "simulate"))
        return -1;
    if (lab_arg_given(a, "serve"))
        return ch08_serve_here() ? ch08_serve(a, NULL) : -1;
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
    int bs = (int)lab_arg_int(a, "block-size"), blocks = (int)lab_arg_int(a, "kv-blocks");
    if (bs > c.seq_len || (blocks > 0 && blocks < (c.seq_len + bs - 1) / bs)) {
        fprintf(stderr, "mlsys-lab: ch08/minimal-inference-server: --block-size %d and "
                "--kv-blocks %d: the pool must hold one full context of %d tokens\n", bs,
                blocks, c.seq_len);
        return 2;
    }
    return -1;
}

static int mis_real(mlsys_comm *c, const lab_args *a)
{
    char err[512], rule[256], mpath[4096];
    llm_config cfg;
    llm_weights w;
    llm_tokenizer tok;
    if (common_load_model(a, "ch08/minimal-inference-server", &cfg, &w, &tok))
        return 2;
    common_asset_path(lab_arg_str(a, "model"), mpath, sizeof mpath);    /* for the banner */
    int N = (int)lab_arg_int(a, "num-requests");
    int seqs = (int)lab_arg_int(a, "max-num-seqs");
    if (seqs == 0)
        seqs = (int)lab_arg_int(a, "batch-size");
    llm_engine_opts o = {
        .max_num_seqs = seqs,
        .max_num_batched_tokens = (int)lab_arg_int(a, "max-num-batched-tokens"),
        .block_size = (int)lab_arg_int(a, "block-size"),
        .n_blocks = (int)lab_arg_int(a, "kv-blocks"),
        .tok = &tok,
        .comm = c,
    };
    int rc = 2;
    llm_engine *s = llm_engine_create(&cfg, &w, &o, err, sizeof err);
    if (!s) {
        fprintf(stderr, "mlsys-lab: ch08/minimal-inference-server: %s\n", err);
        goto out;
    }
    llm_paged_stats ps;
    llm_paged_stats_get(llm_engine_kv(s), &ps);
    common_box(stdout, 68, "Minimal inference server");
    printf("The lab's model (%s: dim %d, %d layers, context %d) behind its serving engine:\n"
           "continuous batching, at most %d sequences and %d tokens per step, a paged KV cache "
           "of\n%d blocks x %d tokens (%llu bytes per token), prefix caching on.\n"
           "%d requests, max_tokens %ld, temperature %g, seed %ld (request i: seed + i)\n",
           mpath, cfg.dim, cfg.n_layers, cfg.seq_len, seqs, o.max_num_batched_tokens,
           ps.n_blocks, ps.block_size,
           (unsigned long long)(ps.bytes_per_block / (uint64_t)ps.block_size), N,
           lab_arg_int(a, "max-tokens"), lab_arg_double(a, "temperature"),
           lab_arg_int(a, "seed"));

    mis_run m = {0};
    m.req = calloc((size_t)N, sizeof *m.req);
    m.order = calloc((size_t)N, sizeof(int));
    m.text_len = calloc((size_t)N, sizeof(size_t));
    int (*ids)[160] = calloc((size_t)N, sizeof *ids);
    printf("\n%s\nSubmitting %d requests (all at time 0, prompt i mod 8)\n%s\n",
           common_rule(rule, sizeof rule, "=", 70), N, rule);
    m.t0 = mlsys_now_s();
    for (int i = 0; i < N; i++) {
        const char *text = ch08_prompts[i % CH08_NPROMPTS];
        int n = (int)llm_bpe_encode_prompt(&tok, text, strlen(text), 1, ids[i]);
        llm_request r = {.prompt = ids[i], .n_prompt = n,
                         .max_tokens = (int)lab_arg_int(a, "max-tokens"),
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
        printf("  request %d: \"%s\" (%d tokens with BOS), queue length %d\n", id, text, n,
               i + 1);
    }
    printf("\n%s\nProcessing: one line per engine step (one forward for all its rows)\n%s\n",
           rule, rule);
    fflush(stdout);
    llm_step_info info;
    int st;
    while ((st = llm_engine_step(s, &info)) > 0) {
        char line[1024];
        step_line(&info, (info.t_end - m.t0) * 1e3, line, sizeof line);
        printf("%s\n", line);
        fflush(stdout);     /* the engine stops at a gate before each step (--gated) */
    }
    if (st < 0)
        goto done;
    double wall = mlsys_now_s() - m.t0;
    llm_engine_metrics met;
    llm_engine_metrics_get(s, &met);
    ch08_report(stdout, m.req, m.order, m.n_done, wall, 0);
    printf("  %-24s %ld prompt rows + %ld decode rows in %ld steps; %ld of %ld prompt tokens "
           "found\n  %-24s in the prefix cache; %ld preemptions\n", "engine", met.prefill_tokens,
           met.decode_tokens, met.steps, met.prefix_hit_tokens, met.prefix_query_tokens, "",
           met.preemptions);
    printf("\nWhat happened:\n"
           "  1. Each request: text -> token ids -> the waiting queue -> the scheduler -> the\n"
           "     model -> one token at a time back to its callback (streaming) -> text.\n"
           "  2. Each step is ONE forward over rows from several requests: whole prompt\n"
           "     chunks (prefill) and one row per running request (decode) together.\n");
    if (N > seqs)
        printf("  3. Continuous batching: r%d took the seat that the first request to finish\n"
               "     freed, in the very next step; it did not wait for the whole batch.\n", seqs);
    else
        printf("  3. Continuous batching: with more requests than seats (-n > -b), a newcomer\n"
               "     takes a seat the step one frees, not when the whole batch is done.\n");
    printf("  4. TTFT is queueing plus prefill; time per output token is the step time, which\n"
           "     grows with the batch on a CPU (the chapter says why a GPU differs).\n"
           "  5. KV memory comes in blocks from one pool; when it runs out the newest request\n"
           "     is preempted and recomputed later (try --kv-blocks 8 -n 8).\n");
    rc = 0;
done:
    free(m.req);
    free(m.order);
    free(m.text_len);
    free(ids);
    llm_engine_free(s);
out:
    llm_tokenizer_free(&tok);
    llm_weights_free(&w);
    return rc;
}

static int mis_rank(mlsys_comm *c, const lab_args *a)
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

const lab ch08_minimal_inference_server_lab = {
    .id = "ch08/minimal-inference-server",
    .title = "Minimal inference server",
    .summary = "the lab's model served with continuous batching: who prefills and decodes "
               "each step, TTFT, TPOT, latency",
    .flags = mis_flags,
    .min_ranks = 1,
    .max_ranks = 1,
    .before = mis_before,
    .rank_main = mis_rank,
    .view = "serve",
};
