/* server_sim.c - ch08/minimal-inference-server --simulate: the original script's server, kept
 * because its round numbers teach: a FIFO queue, at most B running requests, and a rule that
 * runs ONE prefill per step whenever a seat is free (prefill first) and otherwise decodes
 * every running request together. Its "model" costs L·len/100 ms per prefill and L ms per
 * decode step whatever the batch (L = 10), draws random token ids, and ends a request with
 * probability --eos-prob per decoded token or at max_tokens. The original slept those
 * numbers as SECONDS; here they are milliseconds on a virtual clock, so a run is instant
 * and, with --eos-prob 0, exact: 5 requests, B = 4 -> 5 prefills, 38 decode steps, 100
 * tokens, 382.5 ms. Nothing here is the lab's real engine (that is core/llm/engine.h). */
#include "ch08.h"

#include <stdlib.h>
#include <string.h>

#define SIM_L 10.0            /* the original's latency parameter, in ms */
#define SIM_EOS 1             /* its tokenizer: 0 pad, 1 EOS, 2 unk, words 3..999 */

typedef struct sim_req {
    int n_prompt, n_out, finished, prefilled;
} sim_req;

/* The original's tokenizer counted whitespace-separated words. */
static int word_count(const char *s)
{
    int n = 0, in = 0;
    for (; *s; s++) {
        int sp = *s == ' ' || *s == '\t' || *s == '\n';
        n += !sp && !in;
        in = !sp;
    }
    return n;
}

int ch08_simulate(FILE *out, const ch08_sim_opts *o, ch08_sim_result *res)
{
    int N = o->num_requests, B = o->batch_size;
    sim_req *q = calloc((size_t)N, sizeof *q);
    ch08_req *rep = calloc((size_t)N, sizeof *rep);
    int *waiting = malloc((size_t)N * sizeof(int)), *running = malloc((size_t)N * sizeof(int));
    int *order = malloc((size_t)N * sizeof(int));
    int nw = 0, hw = 0, nr = 0, nd = 0;
    char rule[256];
    mlsys_rng rng;
    mlsys_rng_seed(&rng, o->seed);
    memset(res, 0, sizeof *res);

    fprintf(out, "%s\nSubmitting %d requests (all at time 0, prompt i mod 8)\n%s\n",
            common_rule(rule, sizeof rule, "=", 70), N, rule);
    for (int i = 0; i < N; i++) {
        q[i].n_prompt = word_count(ch08_prompts[i % CH08_NPROMPTS]);
        rep[i] = (ch08_req){.id = i, .n_prompt = q[i].n_prompt, .finish = "length"};
        waiting[nw++] = i;
        fprintf(out, "  request %d: \"%s\" (%d words = tokens), queue length %d\n", i,
                ch08_prompts[i % CH08_NPROMPTS], q[i].n_prompt, nw - hw);
    }
    fprintf(out, "\n%s\nProcessing (one line per step, virtual clock)\n%s\n", rule, rule);
    double t = 0.0;           /* ms */
    for (int step = 1;; step++) {
        /* 1. finished requests leave the running list only now, at the next step */
        int k = 0;
        for (int i = 0; i < nr; i++)
            if (!q[running[i]].finished)
                running[k++] = running[i];
        nr = k;
        if (hw < nw && nr < B) {
            /* 2. one prefill, alone: it can never yield EOS */
            int id = waiting[hw++];
            t += SIM_L * q[id].n_prompt / 100.0;
            q[id].prefilled = 1;
            q[id].n_out = 1;
            (void)(3 + mlsys_rng_u64(&rng) % 997);       /* its token id: not shown */
            rep[id].t_first = t / 1e3;
            running[nr++] = id;
            res->prefills++;
            fprintf(out, "  step %3d %9.2f ms  prefill r%d:%d   (running %d)\n", step, t, id,
                    q[id].n_prompt, nr);
            if (q[id].n_out >= o->max_tokens) {
                q[id].finished = 1;
                rep[id].t_finish = t / 1e3;
                rep[id].n_out = 1;
                order[nd++] = id;
            }
        } else if (nr > 0) {
            /* 3. one decode step for every running request, one cost for the batch */
            t += SIM_L;
            res->decode_steps++;
            char line[512];
            int len = snprintf(line, sizeof line, "  step %3d %9.2f ms  decode", step, t);
            char done[256] = "";
            size_t dl = 0;
            for (int i = 0; i < nr; i++) {
                int id = running[i];
                int eos = mlsys_rng_uniform(&rng) < o->eos_prob;
                if (!eos)
                    (void)(3 + mlsys_rng_u64(&rng) % 997);
                q[id].n_out++;        /* the EOS token is counted, as the original does */
                if (len < (int)sizeof line - 8)
                    len += snprintf(line + len, sizeof line - (size_t)len, " r%d", id);
                if (eos || q[id].n_out >= o->max_tokens) {
                    q[id].finished = 1;
                    rep[id].finish = eos ? "eos" : "length";
                    rep[id].t_finish = t / 1e3;
                    rep[id].n_out = q[id].n_out;
                    order[nd++] = id;
                    if (dl < sizeof done - 24)
                        dl += (size_t)snprintf(done + dl, sizeof done - dl, " r%d(%d)", id,
                                               q[id].n_out);
                }
            }
            fprintf(out, "%s%s%s\n", line, dl ? "   finished" : "", done);
        } else {
            break;            /* 4. nothing waits, nothing runs */
        }
    }
    for (int i = 0; i < N; i++)
        res->tokens += q[i].n_out;
    res->virtual_ms = t;
    fprintf(out, "\n  %d prefills (one request each), %d decode steps, %ld tokens, %.1f ms of "
            "virtual time\n", res->prefills, res->decode_steps, res->tokens, t);
    ch08_report(out, rep, order, nd, t / 1e3, 1, -1);
    free(q);
    free(rep);
    free(waiting);
    free(running);
    free(order);
    return 0;
}
