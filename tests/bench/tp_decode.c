/* tp_decode.c - what tensor parallelism costs on CPU ranks, for tests/bench/tp.sh: the lab's
 * model decodes B sequences (a 16-token prompt each, then STEPS greedy tokens, every decode
 * step one batched forward) on T ranks, rank 0 leading with the KV cache's map and the others
 * following (core/llm/tp_step.c). Prints, per T: tokens, wall seconds, CPU seconds of all
 * ranks, tokens per CPU-second, and the share of rank 0's decode time spent in the layers'
 * all-reduces (two per layer per step). Usage: tp_decode MODEL TOKENIZER T... */
#include "../../core/llm/tp_step.h"
#include "../../core/nn/nn.h"
#include "../../core/nn/transformer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#define B 8
#define PROMPT 16
#define STEPS 64

typedef struct result {
    double wall, cpu[8], ar_s;
    long tokens, allreduces;
    char err[8][200];
} result;

static llm_config g_c;
static llm_weights g_w;
static int g_prompt[B][PROMPT];
static result *g_res;

static double cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int rank_fn(mlsys_comm *c, void *arg)
{
    (void)arg;
    int r = mlsys_rank(c), T = mlsys_size(c), V = g_c.vocab_size;
    char *err = g_res->err[r];
    size_t n = sizeof g_res->err[r];
    llm_fwd e;
    llm_kv kv;
    llm_config kc;
    int maxlen = PROMPT + STEPS + 1;
    float *lg = malloc((size_t)B * PROMPT * V * sizeof *lg);
    if (llm_fwd_init_tp(&e, &g_c, &g_w, B * PROMPT, T > 1 ? c : NULL, err, n) ||
        llm_tp_kv_config(&g_c, T, &kc))
        return 1;
    double c0 = cpu_s(), t0 = mlsys_now_s();
    int rc = 0;
    if (r == 0) {
        if (llm_kv_init_contiguous(&kv, &kc, B, maxlen, err, n))
            return 1;
        int seq[B * PROMPT], pos[B * PROMPT], tok[B * PROMPT], next[B];
        unsigned char want[B * PROMPT];
        for (int s = 0; s < B; s++) {
            kv.ops->reserve(&kv, s, maxlen);
            for (int t = 0; t < PROMPT; t++) {
                int i = s * PROMPT + t;
                seq[i] = s, pos[i] = t, tok[i] = g_prompt[s][t], want[i] = t == PROMPT - 1;
            }
        }
        rc = llm_tp_lead_forward(&e, &kv, B * PROMPT, seq, pos, tok, want, lg, err, n);
        for (int step = 0; step < STEPS && !rc; step++) {
            for (int s = 0; s < B; s++) {
                const float *l = lg + (size_t)s * V;
                int best = 0;
                for (int v = 1; v < V; v++)
                    best = l[v] > l[best] ? v : best;
                next[s] = best;
                seq[s] = s, pos[s] = PROMPT + step, tok[s] = next[s], want[s] = 1;
            }
            rc = llm_tp_lead_forward(&e, &kv, B, seq, pos, tok, want, lg, err, n);
        }
        if (T > 1)
            llm_tp_lead_stop(&e);
        g_res->wall = mlsys_now_s() - t0;
        g_res->tokens = (long)B * STEPS;
        g_res->ar_s = (double)e.tp_allreduce_ns * 1e-9;
        g_res->allreduces = (long)e.tp_allreduces;
    } else {
        long steps;
        if (llm_tp_follower_kv(&kv, &g_c, T, B, B * maxlen, maxlen, err, n))
            return 1;
        rc = llm_tp_follow(&e, &kv, lg, &steps, err, n);
    }
    g_res->cpu[r] = cpu_s() - c0;
    llm_kv_free(&kv);
    llm_fwd_fini(&e);
    free(lg);
    return rc ? 1 : 0;
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: tp_decode MODEL TOKENIZER T...\n");
        return 2;
    }
    nn_gemm_start(argv);
    char err[300];
    llm_tokenizer tk;
    if (llm_checkpoint_read(argv[1], &g_c, &g_w, err, sizeof err) ||
        llm_tokfile_read(argv[2], g_c.vocab_size, &tk, err, sizeof err)) {
        fprintf(stderr, "tp_decode: %s\n", err);
        return 1;
    }
    static const char *const texts[B] = {
        "Once upon a time, there was a little dog named Max who",
        "One day, a girl named Lily went to the park with her mom and",
        "{\"name\": \"Tom\", \"age\": 7, \"likes\": [\"cats\", \"cake\"",
        "12 + 30 = 42. 7 + 8 = 15. 21 + 5 = 26. 9 + 9 =",
        "The big red ball rolled down the hill and the boy ran after",
        "Sam had a toy car. He liked to play with it every day in",
        "Anna saw a bird in the tree. The bird was blue and it sang",
        "It was a sunny day. Ben and his sister went to the beach to"};
    for (int s = 0; s < B; s++) {
        int ids[256];
        size_t k = llm_bpe_encode_prompt(&tk, texts[s], strlen(texts[s]), 1, ids);
        for (int t = 0; t < PROMPT; t++)
            g_prompt[s][t] = ids[t < (int)k ? t : (int)k - 1];
    }
    g_res = mmap(NULL, sizeof *g_res, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    printf("  %2s %8s %9s %9s %16s %17s\n", "T", "tokens", "wall s", "CPU s", "tokens/CPU-s",
           "all-reduce share");
    for (int i = 3; i < argc; i++) {
        int T = atoi(argv[i]);
        char why[256];
        memset(g_res, 0, sizeof *g_res);
        if (T < 1 || T > 8 || mlsys_run_fn(T, 300000, rank_fn, NULL, why, sizeof why) != 0) {
            printf("  %2d failed: %s %s\n", T, why, g_res->err[0]);
            continue;
        }
        double cpu = 0;
        for (int r = 0; r < T; r++)
            cpu += g_res->cpu[r];
        printf("  %2d %8ld %9.3f %9.3f %16.0f %16.1f%%  (%ld all-reduces of [rows, %d])\n", T,
               g_res->tokens, g_res->wall, cpu, g_res->tokens / cpu,
               100.0 * g_res->ar_s / g_res->wall, g_res->allreduces, g_c.dim);
    }
    llm_tokenizer_free(&tk);
    llm_weights_free(&g_w);
    return 0;
}
