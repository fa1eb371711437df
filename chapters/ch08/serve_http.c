/* serve_http.c - ch08/minimal-inference-server --serve [ADDR:]PORT: the engine behind
 * core/serve/'s OpenAI-compatible server (127.0.0.1 unless given; port 0: a free one), its
 * key from --api-key or MLSYS_LAB_API_KEY; a ready line, then it serves until SIGINT (exit 130)
 * or SIGTERM (exit 0), draining within --drain-timeout. Headless in the runner's process; in
 * the front end in the rank, with the engine's events for the views; with
 * --tensor-parallel-size T on rank 0 of T ranks (the others follow its engine). */
#include "ch08.h"
#include "../common/load_model.h"
#include "../../core/llm/tp_step.h"
#include "../../core/serve/http.h"
#include "../../core/nn/nn.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* "8000", "0.0.0.0:8000", "localhost:0" -> addr, port. 0, or -1. */
static int split_addr(const char *spec, char *addr, size_t n, int *port)
{
    const char *colon = strrchr(spec, ':');
    const char *p = colon ? colon + 1 : spec;
    char *end;
    long v = strtol(p, &end, 10);
    if (!*p || *end || v < 0 || v > 65535)
        return -1;
    *port = (int)v;
    if (colon && colon > spec)
        snprintf(addr, n, "%.*s", (int)(colon - spec), spec);
    else
        snprintf(addr, n, "127.0.0.1");
    return 0;
}

int ch08_serve_here(void)
{
    /* the front end runs before() with stdout in a memfd it reads afterwards: a server that
     * never returns must not run there, but in the lab's rank (events for the live views) */
    char link[256];
    ssize_t n = readlink("/proc/self/fd/1", link, sizeof link - 1);
    if (n <= 0)
        return 1;
    link[n] = 0;
    return strstr(link, "memfd:") == NULL;
}

int ch08_serve(const lab_args *a, mlsys_comm *comm)
{
    const char *me = "mlsys-lab: ch08/minimal-inference-server";
    char err[512], addr[256], mpath[4096], dpath[4096];
    int port;
    if (!srv_available(err, sizeof err)) {
        fprintf(stderr, "%s: --serve: %s\n", me, err);
        return 2;
    }
    if (split_addr(lab_arg_str(a, "serve"), addr, sizeof addr, &port)) {
        fprintf(stderr, "%s: --serve %s: expected [ADDR:]PORT with PORT in 0..65535\n", me,
                lab_arg_str(a, "serve"));
        return 2;
    }
    int k = (int)lab_arg_int(a, "speculative");
    llm_config c, dc;
    llm_weights w, dw;
    llm_tokenizer t;
    memset(&dw, 0, sizeof dw);
    lab_asset_path(lab_arg_str(a, "model"), mpath, sizeof mpath);
    if (common_load_model(a, "ch08/minimal-inference-server", &c, &w, &t))
        return 2;
    int rc = 2;
    if (k > 0) {
        /* greedy requests must get the target's own greedy tokens: a verify forward of k + 1
         * rows must compute each row as a one-row forward would, which the batch-invariant
         * GEMM guarantees and BLAS does not (MLSYS_GEMM picks another kernel on purpose) */
        if (!getenv("MLSYS_GEMM"))
            nn_set_gemm_kernel(NN_GEMM_INVARIANT);
        lab_asset_path(lab_arg_str(a, "draft"), dpath, sizeof dpath);
        if (llm_checkpoint_read(dpath, &dc, &dw, err, sizeof err)) {
            fprintf(stderr, "%s: --speculative: %s\n", me, err);
            goto out;
        }
    }
    int seqs = (int)lab_arg_int(a, "max-num-seqs");
    if (seqs == 0)
        seqs = 16;
    const char *key = lab_arg_str(a, "api-key"), *key_from = "--api-key";
    if (!lab_arg_given(a, "api-key") && getenv(SRV_KEY_ENV) && *getenv(SRV_KEY_ENV)) {
        key = getenv(SRV_KEY_ENV);
        key_from = SRV_KEY_ENV;
    }
    srv_opts o = {
        .addr = addr, .port = port,
        .api_key = key,
        .model_name = lab_arg_str(a, "served-model-name"),
        .engine = {
            .max_num_seqs = seqs,
            .max_num_batched_tokens = (int)lab_arg_int(a, "max-num-batched-tokens"),
            .block_size = (int)lab_arg_int(a, "block-size"),
            .n_blocks = (int)lab_arg_int(a, "kv-blocks"),
            .comm = comm,
        },
        .speculative_k = k, .draft_c = k > 0 ? &dc : NULL, .draft_w = k > 0 ? &dw : NULL,
        .stream_interval = (int)lab_arg_int(a, "stream-interval"),
    };
    if (o.engine.max_num_batched_tokens < seqs)
        o.engine.max_num_batched_tokens = seqs;
    int T = comm ? mlsys_size(comm) : 1;
    if (T > 1) {
        /* --tensor-parallel-size: this engine leads the other ranks, which are told its
         * shape first (the options the server's engine gets, speculation included) */
        o.engine.tp = comm;
        llm_engine_opts eo = o.engine;
        eo.spec_k = k;
        eo.draft_c = o.draft_c;
        eo.draft_w = o.draft_w;
        if (llm_tp_announce(&c, &eo, err, sizeof err)) {
            fprintf(stderr, "%s: --tensor-parallel-size %d: %s\n", me, T, err);
            goto out;
        }
        o.engine.n_blocks = eo.n_blocks;
        o.engine.max_model_len = eo.max_model_len;
    }
    srv_server *s = srv_start(&c, &w, &t, &o, err, sizeof err);
    if (!s) {
        if (T > 1)
            llm_tp_announce_cancel(comm);   /* the others expected its steps */
        if (key && strstr(err, "API key"))
            fprintf(stderr, "%s: %s: %s\n", me, key_from, err);
        else
            fprintf(stderr, "%s: --serve: %s\n", me, err);
        goto out;
    }
    printf("Serving %s (dim %d, %d layers, context %d) as model \"%s\": continuous batching, "
           "%d sequences per step, %s GEMM%s%s\n", mpath, c.dim, c.n_layers, c.seq_len,
           o.model_name, seqs, nn_gemm_kernel_name(nn_get_gemm_kernel()),
           key ? ", bearer key required from " : "", key ? key_from : "");
    if (k > 0)
        printf("Speculative decoding with %s, k = %d: greedy requests draft k tokens a "
               "step, verified in the batch's forward\n", dpath, k);
    if (T > 1)
        ch08_tp_banner(stdout, &c, comm);
    printf("URL: http://%s:%d/v1  (GET /health, GET /metrics, GET /v1/models, "
           "POST /v1/completions, POST /v1/chat/completions)\n", addr, srv_port(s));
    printf("ready: listening on %s:%d (Ctrl-C or SIGTERM: drain and exit)\n", addr,
           srv_port(s));
    fflush(stdout);
    double drain = lab_arg_double(a, "drain-timeout");
    int sig = srv_run_until_signal(s, drain);
    if (sig == SIGUSR1)         /* on T ranks: the launcher passes Ctrl-C or SIGTERM on so */
        printf("stop asked for: stopped accepting; draining the requests in flight (at most "
               "%g s)\n", drain);
    else
        printf("signal %d: stopped accepting; draining the requests in flight (at most %g s)\n",
               sig, drain);
    fflush(stdout);
    srv_stop(s);
    printf("stopped cleanly\n");
    fflush(stdout);
    rc = sig == SIGINT ? 130 : 0;
out:
    if (k > 0)
        llm_weights_free(&dw);
    llm_tokenizer_free(&t);
    llm_weights_free(&w);
    return rc;
}
