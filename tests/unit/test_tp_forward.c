/* test_tp_forward.c - the forward on tensor-parallel ranks (llm_fwd_init_tp, core/llm/
 * infer.c) against the unsplit forward of the same weights: a prefill and decode steps over a
 * KV cache, on T = 2 and 4 forked ranks. Every rank must produce the same logits bit for bit
 * (each all-reduce leaves the same sums everywhere); against T = 1 the logits differ only by
 * the order of float additions (each all-reduce adds T partial products of a split inner
 * dimension), stated here as |diff| <= 1e-5 · (1 + max |logit|); and with the shipped model
 * the greedy tokens of the test prompts are T = 1's. A T that does not divide the heads, the
 * key/value heads or the hidden units is refused in one line; each rank's weights and KV cache
 * are its share (1/T of the layers' matrices). */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include "../../core/llm/llm.h"
#include "../../core/nn/nn.h"
#include "../../core/nn/transformer.h"

#define STEPS 12              /* decode steps after the prefill */
#define MAXV 512

/* What the ranks hand back through shared memory. */
typedef struct shared {
    float logits[8][1 + STEPS][MAXV];   /* [rank][step][vocab]: step 0 the prefill's last row */
    int tokens[8][1 + STEPS];
    size_t shard_floats[8];
    int kv_dim[8];
    char err[8][200];
} shared;

typedef struct job {
    llm_config c;
    llm_weights w;
    const int *prompt;
    int np;
    shared *out;
} job;

/* Prefill the prompt, then STEPS greedy steps; logits of each step into out. 0 or -1. */
static int run_model(const llm_config *c, const llm_weights *w, mlsys_comm *tp, const int *prompt,
                     int np, float (*logits)[MAXV], int *tokens, size_t *shard, int *kvd,
                     char *err, size_t n)
{
    llm_fwd e;
    llm_kv kv;
    llm_config kc;
    int T = tp ? mlsys_size(tp) : 1;
    if (llm_fwd_init_tp(&e, c, w, 64, tp, err, n))
        return -1;
    if (llm_tp_kv_config(c, T, &kc) || llm_kv_init_contiguous(&kv, &kc, 1, 0, err, n)) {
        llm_fwd_fini(&e);
        return -1;
    }
    *shard = e.shard ? e.shard_layer * (size_t)c->n_layers : 0;
    *kvd = kv.kv_dim;
    int seq[64], pos[64], rc = -1;
    unsigned char want[64];
    float *lg = malloc((size_t)c->vocab_size * sizeof *lg);
    if (kv.ops->reserve(&kv, 0, np + STEPS) != 0)
        goto out;
    for (int i = 0; i < np; i++) {
        seq[i] = 0;
        pos[i] = i;
        want[i] = i == np - 1;
    }
    int tok[64];
    memcpy(tok, prompt, (size_t)np * sizeof *tok);
    if (llm_forward(&e, &kv, np, seq, pos, tok, want, lg, err, n))
        goto out;
    for (int s = 0; s <= STEPS; s++) {
        memcpy(logits[s], lg, (size_t)c->vocab_size * sizeof *lg);
        int best = 0;
        for (int v = 1; v < c->vocab_size; v++)
            if (lg[v] > lg[best])
                best = v;
        tokens[s] = best;
        if (s == STEPS)
            break;
        int p = np + s;
        if (llm_forward(&e, &kv, 1, &seq[0], &p, &best, NULL, lg, err, n))
            goto out;
    }
    rc = 0;
out:
    free(lg);
    llm_kv_free(&kv);
    llm_fwd_fini(&e);
    return rc;
}

static int rank_fn(mlsys_comm *comm, void *arg)
{
    job *j = arg;
    int r = mlsys_rank(comm);
    return run_model(&j->c, &j->w, comm, j->prompt, j->np, j->out->logits[r], j->out->tokens[r],
                     &j->out->shard_floats[r], &j->out->kv_dim[r], j->out->err[r],
                     sizeof j->out->err[r]) ? 1 : 0;
}

/* T ranks against the unsplit forward; returns the largest |diff| relative to 1 + max|logit|
 * and sets *same_tokens. */
static double compare(job *j, int T, int *same_tokens)
{
    static float ref[1 + STEPS][MAXV];
    static int rtok[1 + STEPS];
    size_t shard;
    int kvd;
    char err[200];
    ck_assert_msg(run_model(&j->c, &j->w, NULL, j->prompt, j->np, ref, rtok, &shard, &kvd, err,
                            sizeof err) == 0, "%s", err);
    memset(j->out, 0, sizeof *j->out);
    char why[256];
    int rc = mlsys_run_fn(T, 60000, rank_fn, j, why, sizeof why);
    ck_assert_msg(rc == 0, "T=%d: %s; %s", T, why, j->out->err[0]);
    const llm_config *c = &j->c;
    size_t full = (size_t)c->n_layers * (2ull * c->dim * c->dim + 2ull * c->kv_dim * c->dim +
                                         3ull * c->hidden_dim * c->dim);
    double worst = 0;
    *same_tokens = 1;
    for (int r = 0; r < T; r++) {
        ck_assert_uint_eq(j->out->shard_floats[r] * (size_t)T, full);   /* 1/T of the layers */
        ck_assert_int_eq(j->out->kv_dim[r] * T, c->kv_dim);             /* its heads' cache */
        for (int s = 0; s <= STEPS; s++) {
            /* every rank the same bits: the all-reduces leave one sum everywhere */
            ck_assert_msg(memcmp(j->out->logits[r][s], j->out->logits[0][s],
                                 (size_t)c->vocab_size * sizeof(float)) == 0,
                          "T=%d rank %d step %d: logits differ from rank 0's", T, r, s);
        }
    }
    for (int s = 0; s <= STEPS; s++) {
        double mx = 0, d = 0;
        for (int v = 0; v < c->vocab_size; v++) {
            mx = fmax(mx, fabs(ref[s][v]));
            d = fmax(d, fabs((double)ref[s][v] - j->out->logits[0][s][v]));
        }
        worst = fmax(worst, d / (1 + mx));
        *same_tokens &= rtok[s] == j->out->tokens[0][s];
    }
    printf("T=%d (dim %d, %d heads, %d kv heads, hidden %d): max |logit diff| / (1 + max|logit|) "
           "= %.2e %s; greedy tokens %s\n", T, c->dim, c->n_heads, c->n_kv_heads, c->hidden_dim,
           worst, worst <= 1e-5 ? "OK" : "NOT OK", *same_tokens ? "equal" : "DIFFER");
    return worst;
}

static shared *g_out;

START_TEST(random_model_t2_t4)
{
    job j = {.out = g_out};
    j.c = (llm_config){.dim = 64, .hidden_dim = 128, .n_layers = 2, .n_heads = 8,
                       .n_kv_heads = 4, .vocab_size = 256, .seq_len = 64, .shared_classifier = 1};
    char err[200];
    ck_assert_msg(llm_weights_alloc(&j.w, &j.c, err, sizeof err) == 0, "%s", err);
    llm_config_check(&j.c, err, sizeof err);
    nn_tf_init_weights(&j.w, &j.c, 7);
    static const int prompt[] = {3, 17, 200, 41, 5, 99, 128, 64};
    j.prompt = prompt;
    j.np = 8;
    for (int T = 2; T <= 4; T *= 2) {
        int same;
        double worst = compare(&j, T, &same);
        ck_assert_msg(worst <= 1e-5, "T=%d: relative logit diff %.3g", T, worst);
    }
    llm_weights_free(&j.w);
}
END_TEST

START_TEST(shipped_model_greedy)
{
    const char *root = getenv("MLSYS_LAB_SRC");
    char mp[1024], tp[1024];
    snprintf(mp, sizeof mp, "%s/assets/models/model.bin", root ? root : ".");
    snprintf(tp, sizeof tp, "%s/assets/models/tokenizer.bin", root ? root : ".");
    job j = {.out = g_out};
    llm_tokenizer t;
    char err[300];
    if (llm_checkpoint_read(mp, &j.c, &j.w, err, sizeof err) != 0) {
        printf("shipped model: %s, skipped\n", err);
        return;
    }
    ck_assert_msg(llm_tokfile_read(tp, j.c.vocab_size, &t, err, sizeof err) == 0, "%s", err);
    static const char *const prompts[] = {"Once upon a time", "12 + 30 =",
                                          "{\"name\": \"Tom\","};
    for (int k = 0; k < 3; k++) {
        int ids[64];
        size_t n = llm_bpe_encode_prompt(&t, prompts[k], strlen(prompts[k]), 1, ids);
        j.prompt = ids;
        j.np = (int)n;
        int same;
        double worst = compare(&j, 2, &same);
        ck_assert_msg(worst <= 1e-5, "'%s': relative logit diff %.3g", prompts[k], worst);
        ck_assert_msg(same, "'%s': the greedy tokens of T=2 differ from T=1's", prompts[k]);
    }
    llm_tokenizer_free(&t);
    llm_weights_free(&j.w);
}
END_TEST

static int refuse_fn(mlsys_comm *comm, void *arg)
{
    job *j = arg;
    llm_fwd e;
    char err[300] = "";
    int rc = llm_fwd_init_tp(&e, &j->c, &j->w, 4, comm, err, sizeof err);
    if (mlsys_rank(comm) == 0)
        snprintf(j->out->err[0], sizeof j->out->err[0], "%s", err);
    return rc == -1 ? 0 : 1;
}

START_TEST(refuses_uneven_split)
{
    job j = {.out = g_out};
    j.c = (llm_config){.dim = 64, .hidden_dim = 128, .n_layers = 1, .n_heads = 8,
                       .n_kv_heads = 2, .vocab_size = 256, .seq_len = 32, .shared_classifier = 1};
    char err[200], why[256];
    ck_assert(llm_weights_alloc(&j.w, &j.c, err, sizeof err) == 0);
    memset(g_out->err[0], 0, sizeof g_out->err[0]);
    ck_assert_msg(mlsys_run_fn(4, 30000, refuse_fn, &j, why, sizeof why) == 0, "%s", why);
    ck_assert_msg(strstr(g_out->err[0], "tensor parallelism over 4 ranks needs 4 to divide") &&
                  strstr(g_out->err[0], "key/value heads (2)") && !strchr(g_out->err[0], '\n'),
                  "%s", g_out->err[0]);
    llm_config kc;
    ck_assert_int_eq(llm_tp_kv_config(&j.c, 4, &kc), -1);
    ck_assert_int_eq(llm_tp_kv_config(&j.c, 2, &kc), 0);
    ck_assert_int_eq(kc.kv_dim, j.c.kv_dim / 2);
    llm_weights_free(&j.w);
}
END_TEST

int main(int argc, char **argv)
{
    nn_gemm_start(argv);
    (void)argc;
    g_out = mmap(NULL, sizeof *g_out, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (g_out == MAP_FAILED)
        return 1;
    Suite *s = suite_create("tp_forward");
    TCase *tc = tcase_create("tp");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, refuses_uneven_split);
    tcase_add_test(tc, random_model_t2_t4);
    tcase_add_test(tc, shipped_model_greedy);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int nf = srunner_ntests_failed(sr);
    srunner_free(sr);
    return nf ? 1 : 0;
}
