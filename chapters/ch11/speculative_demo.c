/* speculative_demo.c - ch11/speculative-demo: speculative decoding for real, on the
 * generation engine with the lab's draft model proposing and its target model verifying
 * (core/llm/speculative.c). Shows a prompt round by round (drafts with q, the target's p,
 * kept or refused), then measures over corpus-like prompts: acceptance per draft position,
 * tokens per target forward beside (1 - a^(k+1)) / (1 - a), wall time against the target
 * alone, and whether the tokens equal the target's greedy decoding; a k sweep goes to the
 * plot view, the engine's steps (draft, forward) to a trace.
 * --simulate keeps the original script's random-number model, labelled as such. */
#include "../common/common.h"
#include "models.h"
#include "../../core/trace_values.h"
#include "../../core/nn/nn.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <time.h>
#include <unistd.h>

#define LAB_ID "ch11/speculative-demo"

static const lab_flag spec_flags[] = {
    {"draft-length", 'k', FLAG_INT, "5", NULL, 1, LLM_SPEC_MAX_K, "tokens drafted per round"},
    {"target-length", 0, FLAG_INT, "50", NULL, 1, 1000000, "tokens to generate (per "
     "prompt; the model's context of 128 caps it)"},
    {"acceptance-rate", 'a', FLAG_DOUBLE, "0.75", NULL, 0, 0, "--simulate: base agreement "
     "probability, 0 to 1"},
    {"draft-cost", 0, FLAG_DOUBLE, "0.1", NULL, 0, 0, "--simulate: one draft call's cost "
     "relative to a target call (>= 0)"},
    {"seed", 0, FLAG_INT, "42", NULL, 0, 1L << 40, "random seed"},
    {"simulate", 0, FLAG_BOOL, NULL, NULL, 0, 0, "the original's simulation (random numbers, "
     "no model)"},
    {"prompts", 0, FLAG_INT, "8", NULL, 1, 10000, "corpus prompts measured"},
    {"temperature", 0, FLAG_DOUBLE, "0", NULL, 0, 0, "0: greedy (exactly the target's "
     "tokens); > 0: sampling (the target's distribution)"},
    {"sweep", 0, FLAG_INT, "8", NULL, 0, LLM_SPEC_MAX_K, "measure k = 1..N as well (plot "
     "view); 0: no sweep"},
    {"gemm", 0, FLAG_CHOICE, "invariant", "invariant|ref|blas|auto", 0, 0, "matrix kernel: "
     "invariant and ref compute a row the same alone or in a batch, blas does not"},
    {"model", 0, FLAG_STR, CH11_MODEL, NULL, 0, 0, "target model"},
    {"draft", 0, FLAG_STR, CH11_DRAFT, NULL, 0, 0, "draft model (same tokenizer)"},
    {"tokenizer", 0, FLAG_STR, CH11_TOKENIZER, NULL, 0, 0, "tokenizer of both"},
    {NULL, 0, 0, NULL, NULL, 0, 0, NULL}
};

/* ==== the original's simulation ==== */

/* 57 short words standing in for the original's vocabulary (only their count matters). */
static const char *const sim_words[57] = {
    "the", "a", "cat", "dog", "sat", "on", "mat", "and", "ran", "to", "big", "red", "sun",
    "was", "in", "it", "he", "she", "they", "we", "is", "at", "by", "for", "with", "from",
    "up", "down", "out", "over", "new", "old", "good", "day", "way", "man", "boy", "girl",
    "home", "tree", "road", "sky", "sea", "hill", "town", "car", "bird", "fish", "book",
    "door", "hand", "head", "eye", "time", "year", "one", "two",
};

typedef struct sim_result {
    long tokens, target_calls, draft_calls, accepted, rejected;
    char preview[400];
} sim_result;

static double uni(mlsys_rng *r, double a, double b)
{
    return a + (b - a) * mlsys_rng_uniform(r);
}

/* The original's loop: k random words with q ~ U(0.3, 0.9); the "target" agrees with
 * probability a (p = q·U(0.9, 1.5)) or not (p = q·U(0.1, 0.8)), p capped at 1; keep when
 * p >= q, else with probability p/q; the first refusal is replaced by a correction and ends
 * the round. No bonus token when all k are kept (the original's convention). */
static void simulate(int k, long n, double a, uint64_t seed, sim_result *res)
{
    mlsys_rng r;
    mlsys_rng_seed(&r, seed);
    memset(res, 0, sizeof *res);
    size_t used = 0;
    int shown = 0;
    while (res->tokens < n) {
        long left = n - res->tokens;
        int kr = left < k ? (int)left : k;
        res->draft_calls++;
        res->target_calls++;
        for (int i = 0; i < kr; i++) {
            int w = (int)(mlsys_rng_u64(&r) % 57);
            double q = uni(&r, 0.3, 0.9);
            double p = mlsys_rng_uniform(&r) < a ? q * uni(&r, 0.9, 1.5) : q * uni(&r, 0.1, 0.8);
            if (p > 1.0)
                p = 1.0;
            int keep = p >= q || mlsys_rng_uniform(&r) < p / q;
            char word[32];
            if (keep) {
                res->accepted++;
                snprintf(word, sizeof word, "%s", sim_words[w]);
            } else {
                res->rejected++;
                snprintf(word, sizeof word, "[corrected_%d]", i);
                (void)(mlsys_rng_u64(&r) % 100);       /* the correction's random id */
            }
            res->tokens++;
            if (shown < 20 && used + 40 < sizeof res->preview) {
                used += (size_t)snprintf(res->preview + used, sizeof res->preview - used,
                                         "%s%s", shown ? " " : "", word);
                shown++;
            }
            if (!keep)
                break;
        }
    }
}

static int run_simulation(const lab_args *a)
{
    int k = (int)lab_arg_int(a, "draft-length");
    long n = lab_arg_int(a, "target-length");
    double acc = lab_arg_double(a, "acceptance-rate"), cost = lab_arg_double(a, "draft-cost");
    uint64_t seed = (uint64_t)lab_arg_int(a, "seed");
    sim_result s;
    simulate(k, n, acc, seed, &s);
    common_box(stdout, 68, "Speculative decoding (simulation)");
    printf("\nSIMULATION: the original script's model, random numbers and no language model "
           "(run without --simulate for the real draft and target models)\n\n");
    printf("Configuration:\n  draft length (k):    %d\n  target length:       %ld tokens\n"
           "  base acceptance:     %.2f\n  draft cost:          %.2f of a target call\n\n", k,
           n, acc, cost);
    printf("Running speculative decoding...\n\nGenerated: %s ...\n\n", s.preview);
    printf("Generation statistics:\n  total tokens:        %ld\n  target calls:        %ld\n"
           "  draft calls:         %ld\n  accepted drafts:     %ld\n  rejected drafts:     %ld\n\n",
           s.tokens, s.target_calls, s.draft_calls, s.accepted, s.rejected);
    double tpc = (double)s.tokens / (double)s.target_calls;
    double eff = s.accepted + s.rejected ? (double)s.accepted / (double)(s.accepted + s.rejected)
                                         : 0.0;
    double speed = (double)s.tokens / ((double)s.target_calls + (double)s.draft_calls * cost);
    printf("Performance:\n  tokens per target call: %.2f\n  effective acceptance:   %.2f%%\n"
           "  speedup:                %.2fx\n\n", tpc, 100.0 * eff, speed);
    /* the closed forms this simulator converges to (curriculum 11.2) */
    double p_acc = acc * (5.0 / 6.0 + 0.19 / 1.2) + (1.0 - acc) * 0.45;
    double e_no_bonus = p_acc < 1.0 ? (1.0 - pow(p_acc, k)) / (1.0 - p_acc) : k;
    printf("Expected for this simulator: acceptance %.4f per draft, %.3f tokens per call "
           "without the bonus token\n  ((1 - a^k)/(1 - a): the original adds no token when all "
           "k are kept; with one, 1 + a + ... + a^k = %.3f)\n\n", p_acc, e_no_bonus,
           llm_spec_expected_tokens(p_acc, k));
    printf("Analysis:\n"
           "  Draft: the small model proposes %d tokens at %.0f%% of a target call each.\n"
           "  Verify: one target pass scores all of them at once.\n"
           "  Rule: keep a draft when p >= q, otherwise with probability p/q; at the first\n"
           "  refusal draw a replacement from max(0, p - q) and drop the rest.\n"
           "  The output then follows the target's distribution exactly.\n"
           "  Here %.0f%% of the drafts were kept, so each target call gave %.2f tokens.\n"
           "  Helps most: high acceptance, long outputs, memory-bound decoding.\n"
           "  Helps least: low acceptance, short outputs, compute-bound steps.\n",
           k, 100.0 * cost, 100.0 * eff, tpc);
    return 0;
}

/* ==== the real models ==== */

typedef struct spec_ctx {
    ch11_models m;
    int n_prompts, n_new;
    float temperature;
    uint64_t seed;
    mlsys_comm *c;
    /* the target alone, greedy or sampled, per prompt (measured once, reused by the sweep) */
    int **base_out, *base_n;
    double base_wall, base_cpu, step_s;     /* step_s: one decode step of the target alone */
    long base_tokens;
} spec_ctx;

typedef struct spec_meas {
    llm_spec_stats st;          /* summed over the prompts */
    long target_forwards;       /* the engine's steps: one target forward each */
    double wall, cpu, verify_s, rule_s;
    long equal, compared;       /* tokens equal to the target alone, position by position */
    int prompts_differ;
} spec_meas;

/* 988544 -> "988,544" */
static const char *thousands(size_t v, char *buf, size_t n)
{
    char raw[32];
    int len = snprintf(raw, sizeof raw, "%zu", v), o = 0;
    for (int i = 0; i < len && o + 2 < (int)n; i++) {
        if (i && (len - i) % 3 == 0)
            buf[o++] = ',';
        buf[o++] = raw[i];
    }
    buf[o] = 0;
    return buf;
}

static double cpu_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cap_new(const spec_ctx *x, int n_prompt)
{
    int room = x->m.tc.seq_len - n_prompt + 1;
    return x->n_new < room ? x->n_new : room;
}

static int measure_base(spec_ctx *x, char *err, size_t n)
{
    x->base_out = mlsys_xcalloc((size_t)x->n_prompts, sizeof(int *));
    x->base_n = mlsys_xcalloc((size_t)x->n_prompts, sizeof(int));
    double steps_s = 0;
    long steps = 0;
    for (int i = 0; i < x->n_prompts; i++) {
        int ids[LLM_DOC_MAX];
        char text[128];
        int np = ch11_prompt(&x->m, i, ids, text, sizeof text);
        int max_new = cap_new(x, np);
        x->base_out[i] = mlsys_xmalloc((size_t)(max_new > 0 ? max_new : 1) * sizeof(int));
        llm_gen_opts o = {.max_new = max_new, .stop_at_eos = 0, .temperature = x->temperature,
                          .top_p = 1.0f, .seed = x->seed + (uint64_t)i};
        llm_gen_stats st;
        const int *pp = ids;
        double w0 = mlsys_now_s(), c0 = cpu_now();
        int rc = llm_generate(x->m.eng, 1, &pp, &np, &x->base_out[i], &x->base_n[i], &o, &st,
                              err, n);
        x->base_wall += mlsys_now_s() - w0;
        x->base_cpu += cpu_now() - c0;
        if (rc)
            return -1;
        x->base_tokens += x->base_n[i];
        steps_s += st.decode_s;
        steps += st.steps;
    }
    x->step_s = steps ? steps_s / (double)steps : 0.0;
    return 0;
}

/* The generation engine with the draft model, k drafts a step, one sequence at a time (so
 * it is compared with the target alone, one at a time), events to comm (NULL: none). */
static llm_engine *spec_engine(spec_ctx *x, int k, mlsys_comm *comm, char *err, size_t n)
{
    llm_engine_opts o = {.max_num_seqs = 1, .max_num_batched_tokens = 256, .spec_k = k,
                         .draft_c = &x->m.dc, .draft_w = &x->m.dw, .comm = comm};
    return llm_engine_create(&x->m.tc, &x->m.tw, &o, err, n);
}

typedef struct spec_out {
    int *tok, n, cap;
} spec_out;

static void on_spec_event(void *u, const llm_engine_event *ev)
{
    spec_out *o = u;
    if (ev->token >= 0 && o->n < o->cap)
        o->tok[o->n++] = ev->token;
}

/* Prompt i on engine e (to the end of its tokens): out gets them; the steps' phases go to
 * r (verify: the target's forward of a round; rule: the verifies and the rest of sampling). */
static int run_prompt(spec_ctx *x, llm_engine *e, int i, spec_out *out, spec_meas *r,
                      char *err, size_t n)
{
    int ids[LLM_DOC_MAX];
    char text[128];
    int np = ch11_prompt(&x->m, i, ids, text, sizeof text);
    llm_request q = {.prompt = ids, .n_prompt = np, .max_tokens = cap_new(x, np),
                     .temperature = x->temperature, .top_p = 1.0f,
                     .seed = x->seed + (uint64_t)i, .ignore_eos = 1, .on_event = on_spec_event,
                     .u = out};
    if (llm_engine_submit(e, &q, err, n) < 0)
        return -1;
    while (llm_engine_has_work(e)) {
        llm_step_info info;
        int ran = llm_engine_step(e, &info);
        if (ran < 0) {
            snprintf(err, n, "the engine failed (see above)");
            return -1;
        }
        if (ran == 0 || !r)
            continue;
        r->target_forwards++;
        llm_step_stats st;
        llm_engine_last_stats(e, &st);
        if (info.prefill_rows == 0) {
            r->verify_s += 1e-9 * (double)llm_phase_ns(&st, LLM_PHASE_FORWARD);
            r->rule_s += 1e-9 * (double)llm_phase_ns(&st, LLM_PHASE_SAMPLE);
        }
    }
    return 0;
}

static int measure_spec(spec_ctx *x, int k, int trace, spec_meas *r, char *err, size_t n)
{
    memset(r, 0, sizeof *r);
    llm_engine *e = spec_engine(x, k, trace ? x->c : NULL, err, n);
    if (!e)
        return -1;
    int rc = 0;
    for (int i = 0; i < x->n_prompts && !rc; i++) {
        spec_out o = {mlsys_xmalloc((size_t)(x->n_new + 1) * sizeof(int)), 0, x->n_new + 1};
        double w0 = mlsys_now_s(), c0 = cpu_now();
        rc = run_prompt(x, e, i, &o, r, err, n);
        r->wall += mlsys_now_s() - w0;
        r->cpu += cpu_now() - c0;
        int same = o.n == x->base_n[i];
        for (int t = 0; t < o.n && t < x->base_n[i]; t++) {
            r->equal += o.tok[t] == x->base_out[i][t];
            same &= o.tok[t] == x->base_out[i][t];
        }
        r->compared += x->base_n[i] > o.n ? x->base_n[i] : o.n;
        r->prompts_differ += !same;
        free(o.tok);
    }
    llm_engine_spec_stats(e, &r->st);
    llm_engine_free(e);
    return rc;
}

static double alpha_of(const llm_spec_stats *st)
{
    long tried = 0;
    for (int i = 0; i < LLM_SPEC_MAX_K; i++)
        tried += st->pos_tried[i];
    return tried ? (double)st->accepted / (double)tried : 0.0;
}

/* One prompt, round by round: each draft with q(x), the target's p(x), kept or refused. */
static int show_rounds(spec_ctx *x, int k, int max_rounds, char *err, size_t n)
{
    int ids[LLM_DOC_MAX];
    char text[128], a[48], b[48];
    int np = ch11_prompt(&x->m, 0, ids, text, sizeof text);
    llm_engine *e = spec_engine(x, k, NULL, err, n);
    if (!e)
        return -1;
    spec_out out = {mlsys_xmalloc((size_t)(x->n_new + 1) * sizeof(int)), 0, x->n_new + 1};
    llm_request q = {.prompt = ids, .n_prompt = np, .max_tokens = cap_new(x, np),
                     .temperature = x->temperature, .top_p = 1.0f, .seed = x->seed,
                     .ignore_eos = 1, .on_event = on_spec_event, .u = &out};
    if (llm_engine_submit(e, &q, err, n) < 0) {
        free(out.tok);
        llm_engine_free(e);
        return -1;
    }
    printf("prompt: \"%s\"\n", text);
    int shown = 0;
    while (llm_engine_has_work(e)) {
        llm_step_info info;
        if (llm_engine_step(e, &info) < 0) {
            snprintf(err, n, "the engine failed (see above)");
            free(out.tok);
            llm_engine_free(e);
            return -1;
        }
        if (info.n_items < 1 || info.items[0].k == 0 || shown >= max_rounds)
            continue;
        const llm_step_item *it = &info.items[0];
        shown++;
        printf("round %d: the draft proposes %d, the target scores %d rows in one forward\n",
               shown, it->k, it->k + 1);
        for (int i = 0; i < it->k && i <= it->kept; i++) {
            char tq[64];
            snprintf(tq, sizeof tq, "'%s'", ch11_tok_text(&x->m, it->x[i], a, sizeof a));
            if (x->temperature > 0.0f)
                printf("   %-14s q %.2f  p %.2f  %s", tq, (double)it->qx[i], (double)it->px[i],
                       i < it->kept ? "kept" : "refused");
            else
                printf("   %-14s %s", tq, i < it->kept ? "kept (the target's argmax too)"
                       : "refused");
            if (i == it->kept)
                printf(": the target's %s is '%s'", x->temperature > 0.0f ? "draw from "
                       "max(0, p - q)" : "argmax", ch11_tok_text(&x->m, it->y, b, sizeof b));
            printf("\n");
        }
        if (it->kept + 1 < it->k)
            printf("   (%d more drafts dropped unseen)\n", it->k - it->kept - 1);
        if (it->kept == it->k)
            printf("   all kept: bonus token '%s' from the target's last row\n",
                   ch11_tok_text(&x->m, it->y, b, sizeof b));
        printf("   +%d token%s for one target forward\n", it->committed,
               it->committed == 1 ? "" : "s");
    }
    char txt[4096];
    long len = llm_bpe_decode(&x->m.tok, out.tok, (size_t)out.n, txt, sizeof txt - 1);
    if (len >= (long)sizeof txt)
        len = (long)sizeof txt - 1;
    txt[len < 0 ? 0 : len] = 0;
    for (long i = 0; i < len; i++)
        if (txt[i] == '\n')
            txt[i] = ' ';
    llm_spec_stats st;
    llm_engine_spec_stats(e, &st);
    printf("...\ntext: %s%s\n", text, txt);
    printf("(%d tokens in %ld rounds)\n\n", out.n, st.rounds);
    free(out.tok);
    llm_engine_free(e);
    return 0;
}

static void print_measurement(const spec_ctx *x, int k, const spec_meas *r)
{
    const llm_spec_stats *st = &r->st;
    double a = alpha_of(st), tpf = st->rounds ? (double)st->tokens / st->rounds : 0;
    long tried = 0;
    for (int i = 0; i < k; i++)
        tried += st->pos_tried[i];
    printf("tokens %ld in %ld rounds: %ld target forwards (verify), %ld draft forwards\n",
           st->tokens, st->rounds, st->rounds, st->draft_forwards);
    printf("acceptance by draft position (kept / reached):");
    for (int i = 0; i < k; i++)
        printf("%s%d: %.2f", i % 8 == 0 ? "\n  " : "  ", i + 1,
               st->pos_tried[i] ? (double)st->pos_kept[i] / st->pos_tried[i] : 0.0);
    printf("\nacceptance a = %.3f (kept %ld of %ld drafts evaluated; %ld drafted)\n", a,
           st->accepted, tried, st->drafted);
    printf("  expected from the two distributions, mean of sum_x min(p, q): %.3f\n",
           tried ? st->overlap_sum / (double)tried : 0.0);
    printf("tokens per target forward %.2f, expected (1 - a^(k+1)) / (1 - a) = %.2f\n", tpf,
           llm_spec_expected_tokens(a, k));
    double speed = r->wall > 0 ? x->base_wall / r->wall : 0.0;
    double cspeed = r->cpu > 0 ? x->base_cpu / r->cpu : 0.0;
    printf("wall time: speculative %.1f ms, target alone %.1f ms\n  speed-up %.2fx "
           "(CPU time %.2fx)\n", 1e3 * r->wall, 1e3 * x->base_wall, speed, cspeed);
    /* where the time went, in units of one decode step of the target alone */
    if (x->step_s > 0 && st->rounds && st->draft_forwards) {
        double d = st->draft_s / st->draft_forwards / x->step_s;
        double v = r->verify_s / st->rounds / x->step_s;
        double per_round = (st->draft_s + r->verify_s + r->rule_s) / st->rounds / x->step_s;
        printf("cost of a round, in decode steps of the target alone (%.0f us each):\n"
               "  %.2f draft forwards x %.2f + one verify of %d rows %.2f + rule %.2f = %.2f\n",
               1e6 * x->step_s, (double)st->draft_forwards / st->rounds, d, k + 1, v,
               r->rule_s / st->rounds / x->step_s, per_round);
        printf("  so %.2f tokens cost %.2f steps: %.2fx. If a forward of %d rows cost what\n"
               "  one row costs (memory-bound decode, as on a GPU): %.2f / (1 + %.2f) = "
               "%.2fx\n", tpf, per_round, tpf / per_round, k + 1, tpf,
               (double)st->draft_forwards / st->rounds * d,
               tpf / (1.0 + (double)st->draft_forwards / st->rounds * d));
    }
}

/* How far apart the target's logits are when the last k + 1 positions of prompt 0's text are
 * computed in one forward (a verify) or one row at a time (plain decoding): the rounding
 * difference a batch-variant GEMM brings. Largest |difference| over those rows' logits. */
static double logit_drift(spec_ctx *x, int k, char *err, size_t n)
{
    int ids[LLM_DOC_MAX + 256];
    char text[128];
    int np = ch11_prompt(&x->m, 0, ids, text, sizeof text);
    memcpy(ids + np, x->base_out[0], (size_t)x->base_n[0] * sizeof(int));
    int total = np + x->base_n[0], V = x->m.tc.vocab_size;
    if (total > x->m.tc.seq_len)
        total = x->m.tc.seq_len;
    if (k + 1 > total)
        return 0.0;
    float *one = mlsys_xmalloc((size_t)(k + 1) * V * sizeof(float));
    float *many = mlsys_xmalloc((size_t)(k + 1) * V * sizeof(float));
    int seq[LLM_SPEC_MAX_K + 1] = {0}, pos[LLM_SPEC_MAX_K + 1];
    double worst = -1.0;
    llm_kv *kv = &x->m.tkv;
    if (kv->ops->reserve(kv, 0, total) != 0) {
        snprintf(err, n, "no room in the kv cache");
        goto out;
    }
    for (int t = 0; t < total; t++) {          /* one row at a time */
        int r = t - (total - k - 1);
        if (llm_forward(&x->m.te, kv, 1, seq, &t, &ids[t], NULL,
                        r >= 0 ? one + (size_t)r * V : many, err, n))
            goto out;
    }
    for (int i = 0; i <= k; i++)                /* then the last k + 1 again, together */
        pos[i] = total - k - 1 + i;
    if (llm_forward(&x->m.te, kv, k + 1, seq, pos, &ids[total - k - 1], NULL, many, err, n))
        goto out;
    worst = 0.0;
    for (size_t i = 0; i < (size_t)(k + 1) * V; i++)
        worst = fmax(worst, fabs((double)one[i] - many[i]));
out:
    kv->ops->release(kv, 0);
    free(one);
    free(many);
    return worst;
}

static int run_real(mlsys_comm *c, const lab_args *a)
{
    spec_ctx x;
    memset(&x, 0, sizeof x);
    char err[512];
    int k = (int)lab_arg_int(a, "draft-length"), sweep = (int)lab_arg_int(a, "sweep");
    const char *gemm = ch11_set_gemm(lab_arg_str(a, "gemm"));
    if (ch11_models_load(&x.m, lab_arg_str(a, "model"), lab_arg_str(a, "draft"),
                         lab_arg_str(a, "tokenizer"), 1, LLM_SPEC_MAX_K + 1, err, sizeof err)) {
        fprintf(stderr, "mlsys-lab: %s: %s\n", LAB_ID, err);
        return 2;
    }
    x.n_prompts = (int)lab_arg_int(a, "prompts");
    x.n_new = (int)lab_arg_int(a, "target-length");
    x.temperature = (float)lab_arg_double(a, "temperature");
    x.seed = (uint64_t)lab_arg_int(a, "seed");
    x.c = c;
    int rc = 1;
    common_box(stdout, 68, "Speculative decoding");
    printf("\nReal models (--simulate runs the original's simulation instead)\n");
    char pt[32], pd[32];
    printf("target  %s: %s parameters (dim %d, %d layers)\n", lab_arg_str(a, "model"),
           thousands(llm_param_count(&x.m.tc), pt, sizeof pt), x.m.tc.dim, x.m.tc.n_layers);
    printf("draft   %s: %s parameters (dim %d, %d layers)\n        same tokenizer "
           "(%d ids)\n",
           lab_arg_str(a, "draft"), thousands(llm_param_count(&x.m.dc), pd, sizeof pd),
           x.m.dc.dim, x.m.dc.n_layers, x.m.tc.vocab_size);
    printf("GEMM    %s (%s)\n", gemm, strcmp(gemm, "blas") ? "batch-invariant: a row is "
           "computed\n        the same alone and among k + 1 rows" : "OpenBLAS: one row and "
           "k + 1 rows\n        may round differently");
    if (x.temperature == 0.0f)
        printf("decoding greedy (temperature 0): the output must be the target's own\n");
    else
        printf("decoding sampled at temperature %.2f: the output follows the target's\n"
               "        distribution (tests/unit/test_speculative.c, a chi-square test)\n",
               (double)x.temperature);
    printf("k = %d, %d new tokens per prompt, %d prompts from the corpus's validation split\n\n",
           k, x.n_new, x.n_prompts);

    common_banner(stdout, 70, "One prompt, round by round");
    if (show_rounds(&x, k, 4, err, sizeof err))
        goto fail;

    if (measure_base(&x, err, sizeof err))
        goto fail;
    spec_meas r;
    if (measure_spec(&x, k, 1, &r, err, sizeof err))
        goto fail;
    char title[96];
    snprintf(title, sizeof title, "Measured over %d prompts (k = %d)", x.n_prompts, k);
    common_banner(stdout, 70, title);
    print_measurement(&x, k, &r);
    if (x.temperature == 0.0f) {
        printf("exactness: %ld of %ld tokens equal to the target's greedy decoding\n"
               "  (%d of %d prompts differ; GEMM %s)\n", r.equal, r.compared,
               r.prompts_differ, x.n_prompts, gemm);
        double d = logit_drift(&x, k, err, sizeof err);
        if (d < 0)
            goto fail;
        printf("  logits, %d rows in one forward against one at a time: max |diff| %.2g\n"
               "  (%s)\n\n", k + 1, d, d == 0.0 ? "bit for bit" : "rounding: a near tie can "
               "flip a token");
    }
    else
        printf("(sampled: the tokens are not compared with one run of the target alone;\n"
               " their distribution is)\n\n");

    if (sweep > 0) {
        common_banner(stdout, 70, "k sweep (plot view: tokens per forward, expected, "
                      "speed-up)");
        printf("  k   accept  tokens/fwd  expected  speed-up%s\n",
               x.temperature == 0.0f ? "  equal" : "");
        for (int kk = 1; kk <= sweep; kk++) {
            spec_meas s;
            if (measure_spec(&x, kk, 0, &s, err, sizeof err))
                goto fail;
            double al = alpha_of(&s.st);
            double tpf = s.st.rounds ? (double)s.st.tokens / s.st.rounds : 0;
            double e = llm_spec_expected_tokens(al, kk), sp = x.base_wall / s.wall;
            printf("  %-3d %6.3f  %10.2f  %8.2f  %7.2fx", kk, al, tpf, e, sp);
            if (x.temperature == 0.0f)
                printf("  %ld/%ld", s.equal, s.compared);
            printf("\n");
            fflush(stdout);
            mlsys_emit_point(c, "tokens per forward", kk, tpf);
            mlsys_emit_point(c, "expected", kk, e);
            mlsys_emit_point(c, "speed-up", kk, sp);
        }
        printf("\n");
    }
    rc = 0;
fail:
    if (rc)
        fprintf(stderr, "mlsys-lab: %s: %s\n", LAB_ID, err);
    if (x.base_out)
        for (int i = 0; i < x.n_prompts; i++)
            free(x.base_out[i]);
    free(x.base_out);
    free(x.base_n);
    ch11_models_free(&x.m);
    fflush(stdout);
    return rc;
}

/* In the runner, before the rank starts: ranges the flag table cannot say, and the model
 * files read (a usage error exits 2 here, in one line, not as a failed rank). */
static int spec_before(const lab_args *a)
{
    double acc = lab_arg_double(a, "acceptance-rate"), cost = lab_arg_double(a, "draft-cost");
    double t = lab_arg_double(a, "temperature");
    if (!(acc >= 0.0 && acc <= 1.0) || !(cost >= 0.0 && cost <= 1e6) ||
        !(t >= 0.0 && t <= 100.0)) {
        fprintf(stderr, "mlsys-lab: %s: --acceptance-rate must be in [0, 1], --draft-cost and "
                "--temperature at least 0\n", LAB_ID);
        return 2;
    }
    if (lab_arg_bool(a, "simulate"))
        return -1;
    /* the three files read whole here, so a bad one is one line and exit 2, not a rank's
     * failure */
    ch11_models m;
    char err[512];
    if (ch11_models_load(&m, lab_arg_str(a, "model"), lab_arg_str(a, "draft"),
                         lab_arg_str(a, "tokenizer"), 0, 0, err, sizeof err)) {
        fprintf(stderr, "mlsys-lab: %s: %s\n", LAB_ID, err);
        return 2;
    }
    ch11_models_free(&m);
    return -1;
}

static int spec_rank(mlsys_comm *c, const lab_args *a)
{
    if (lab_arg_bool(a, "simulate"))
        return run_simulation(a);
    return run_real(c, a);
}

const lab ch11_speculative_demo_lab = {
    .id = LAB_ID,
    .title = "Speculative decoding",
    .summary = "the lab's draft model proposes, its target verifies k + 1 tokens in one "
               "forward; acceptance, tokens per forward, speed-up, k sweep",
    .flags = spec_flags,
    .min_ranks = 1,
    .max_ranks = 1,
    .before = spec_before,
    .rank_main = spec_rank,
    .view = "plot",
};
