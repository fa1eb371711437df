/* ch08.h - what the files of chapter 8's lab share: the workload of the original script (its
 * eight prompts, in its arrival order), one record per request, the report printed at the
 * end (per-request TTFT, time per output token and latency, then percentiles and
 * throughput), and the original's simulation on a virtual clock (server_sim.c). */
#ifndef CH08_H
#define CH08_H

#include "../common/common.h"
#include "../../core/llm/llm.h"

#define CH08_NPROMPTS 8
extern const char *const ch08_prompts[CH08_NPROMPTS];   /* request i asks prompt i mod 8 */

/* One request as the report sees it (times in seconds from the run's start). */
typedef struct ch08_req {
    int id;
    int n_prompt, n_out;
    int n_cached;             /* prompt tokens found in the prefix cache */
    int preemptions;
    const char *finish;       /* "stop", "length", "eos" (simulation) */
    double t_arrival, t_first, t_finish;
    char text[96];            /* the start of its output, escaped; "" for the simulation */
} ch08_req;

/* report.c */
/* The per-request table in completion order (order[] = ids), then percentiles of TTFT, time
 * per output token and end-to-end latency, total tokens, wall time and throughput.
 * gate_wait_s >= 0: a gated run whose times are the engine's own, that much waiting at the
 * gates for the viewer left out (said in the header and the summary); < 0: not gated. */
void ch08_report(FILE *out, const ch08_req *r, const int *order, int n, double wall_s,
                 int simulated, double gate_wait_s);

/* server_sim.c: the original's scheduler and fake model, virtual milliseconds */
typedef struct ch08_sim_opts {
    int num_requests, batch_size, max_tokens;
    double eos_prob;
    uint64_t seed;
} ch08_sim_opts;
typedef struct ch08_sim_result {
    int prefills, decode_steps;
    long tokens;
    double virtual_ms;
} ch08_sim_result;
/* Run it, printing the step log and the report to out; r gets the counts. */
int ch08_simulate(FILE *out, const ch08_sim_opts *o, ch08_sim_result *r);

/* serve_http.c: --serve [ADDR:]PORT: the HTTP server until SIGINT/SIGTERM; its exit status.
 * comm: the rank's (engine events) or NULL. ch08_serve_here: 1 when before() may serve in
 * this process (headless), 0 inside the front end (serve in the rank). */
int ch08_serve(const lab_args *a, mlsys_comm *comm);
int ch08_serve_here(void);

/* tensor_parallel.c: --tensor-parallel-size T */
/* 0 when T ranks can split model c (T divides its heads, key/value heads and MLP hidden
 * units); else 2 after one line on stderr naming the sizes that can. */
int ch08_tp_check(const llm_config *c, int T);
/* What each rank of tp computes, three lines for the banner. */
void ch08_tp_banner(FILE *out, const llm_config *c, mlsys_comm *tp);

#endif
