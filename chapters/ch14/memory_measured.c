/* memory_measured.c - the measured half of ch14/memory-timeline: the lab's own RLHF loop
 * (core/rl/rlhf.c on the shipped model) runs two iterations on two ranks, colocated and then
 * split, and the memory per role and phase is read back from the runtime's memory events
 * (USAGE gauges and the paged KV cache's block records, summed over the ranks, the peak
 * within each phase), printed next to the estimates the chapter's formulas give for the same
 * model in float32. */
#include "../common/common.h"
#include "../../core/rl/rlhf.h"
#include "../../core/llm/model.h"
#include "../../core/trace.h"
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#define MIB (1024.0 * 1024.0)

typedef struct mm_job {
    rl_rlhf_config k;
    int iterations;
} mm_job;

static int mm_rank(mlsys_comm *c, void *arg)
{
    const mm_job *j = arg;
    char mp[PATH_MAX + 64], dp[PATH_MAX + 64], tp[PATH_MAX + 64], err[512];
    llm_config mc, dc;
    llm_weights w, dw;
    llm_tokenizer t;
    rl_rm rm;
    if (llm_model_read(lab_asset_path("assets/models/model.bin", mp, sizeof mp),
                       lab_asset_path("assets/models/tokenizer.bin", tp, sizeof tp), &mc, &w,
                       &t, err, sizeof err) ||
        llm_checkpoint_read(lab_asset_path("assets/models/draft.bin", dp, sizeof dp), &dc,
                            &dw, err, sizeof err) ||
        rl_rm_init(&rm, &dc, &dw, err, sizeof err)) {
        fprintf(stderr, "ch14/memory-timeline: %s\n", err);
        return 2;
    }
    /* memory does not depend on what the reward model learned: its untrained head will do */
    rl_rlhf *h = rl_rlhf_create(&j->k, c, &mc, &w, &rm, &t, err, sizeof err);
    int rc = h ? 0 : 2;
    rl_rlhf_stats st;
    for (int i = 0; h && i < j->iterations && rc == 0; i++)
        if (rl_rlhf_iterate(h, &st, err, sizeof err))
            rc = 1;
    if (rc)
        fprintf(stderr, "ch14/memory-timeline: rank %d: %s\n", mlsys_rank(c), err);
    rl_rlhf_free(h);
    rl_rm_free(&rm);
    llm_tokenizer_free(&t);
    llm_weights_free(&w);
    llm_weights_free(&dw);
    return rc;
}

/* peak[phase][role]: bytes of the role, all ranks, at its highest within the phase */
static int measure(rl_placement pl, int world, double peak[RL_PH_COUNT][RL_ROLE_COUNT])
{
    mm_job j;
    rl_rlhf_defaults(&j.k);
    j.k.placement = pl;
    j.k.prompts = 16;
    j.iterations = 2;
    mlsys_launch_opts lo;
    memset(&lo, 0, sizeof lo);
    lo.world_size = world;
    lo.timeout_ms = 120000;
    lo.master_port = 29514;
    lo.backend = "shm";
    lo.trace_capacity = 1 << 16;
    char err[512], why[256];
    mlsys_job *job = mlsys_job_start(&lo, NULL, mm_rank, &j, err, sizeof err);
    if (!job) {
        fprintf(stderr, "mlsys-lab: ch14/memory-timeline: %s\n", err);
        return -1;
    }
    mlsys_trace tb = {0};       /* the job's events, collected as they come */
    mlsys_job_sink sink = {NULL, mlsys_trace_collect, &tb};
    int rc = mlsys_job_wait(job, &sink, -1, why, sizeof why);
    mlsys_job_free(job);
    if (rc) {
        fprintf(stderr, "mlsys-lab: ch14/memory-timeline: %s\n", why);
        mlsys_trace_free(&tb);
        return -1;
    }
    mlsys_trace_sort(&tb);
    static double cur[64][RL_ROLE_COUNT * RL_MEM_KINDS];
    /* a pool of blocks (the generator's paged KV cache): its blocks in use, from the block
     * records (ALLOC hands one out, the copy of a copy on write included; FREE or COW that
     * leave a count of 0 give one back), times the bytes of a block its POOL record gives */
    static long blocks[64][RL_ROLE_COUNT * RL_MEM_KINDS];
    static double block_bytes[64][RL_ROLE_COUNT * RL_MEM_KINDS];
    memset(cur, 0, sizeof cur);
    memset(blocks, 0, sizeof blocks);
    memset(block_bytes, 0, sizeof block_bytes);
    memset(peak, 0, sizeof(double) * RL_PH_COUNT * RL_ROLE_COUNT);
    int ph = -1;
    for (size_t i = 0; i < tb.n; i++) {
        const mlsys_event *e = &tb.ev[i];
        if (e->kind == MLSYS_EV_FLOW && e->flow.what == MLSYS_FLOW_PHASE) {
            if (e->flow.version < 0)
                continue;                   /* the phases named at the start */
            ph = e->flow.phase;
        } else if (e->kind == MLSYS_EV_MEM && e->rank >= 0 && e->rank < 64 &&
                   e->mem.pool >= 0 && e->mem.pool < RL_ROLE_COUNT * RL_MEM_KINDS) {
            int rk = e->rank, pl = e->mem.pool;
            switch (e->mem.op) {
            case MLSYS_MEM_USAGE:
                cur[rk][pl] = (double)e->bytes;
                break;
            case MLSYS_MEM_POOL:
                /* a pool of blocks names its tokens per block in index */
                block_bytes[rk][pl] = e->mem.index > 0 ? (double)e->bytes : 0;
                continue;
            case MLSYS_MEM_ALLOC:
                blocks[rk][pl]++;
                break;
            case MLSYS_MEM_FREE:
            case MLSYS_MEM_COW:
                blocks[rk][pl] -= e->mem.refs == 0;
                break;
            default:
                continue;
            }
            if (e->mem.op != MLSYS_MEM_USAGE)
                cur[rk][pl] = (double)blocks[rk][pl] * block_bytes[rk][pl];
        } else {
            continue;
        }
        if (ph < 0 || ph >= RL_PH_COUNT)
            continue;
        for (int r = 0; r < RL_ROLE_COUNT; r++) {
            double s = 0;
            for (int k = 0; k < world && k < 64; k++)
                for (int m = 0; m < RL_MEM_KINDS; m++)
                    s += cur[k][r * RL_MEM_KINDS + m];
            if (s > peak[ph][r])
                peak[ph][r] = s;
        }
    }
    mlsys_trace_free(&tb);
    return 0;
}

/* The chapter's formulas for the lab's model in float32, per rank that holds the role. */
static void estimate(const llm_config *c, int B, int T, double est[RL_ROLE_COUNT])
{
    double P = (double)llm_file_floats(c) * 4.0;     /* the weights as loaded, RoPE tables too */
    double kv = (double)llm_kv_bytes(c) * B * T;
    est[RL_ROLE_ACTOR] = P + P + 2 * P + nn_tf_bytes(c, B, T);    /* w, grads, Adam, activ. */
    est[RL_ROLE_REFERENCE] = P;
    est[RL_ROLE_REWARD] = 0;                                     /* filled by the caller */
    est[RL_ROLE_CRITIC] = P + P + 2 * P;
    est[RL_ROLE_GENERATOR] = P + kv;
}

int mt_measured(const lab_args *a)
{
    (void)a;
    char mp[PATH_MAX + 64], dp[PATH_MAX + 64], err[512];
    llm_config mc, dc;           /* the configurations: the headers are enough */
    if (llm_checkpoint_read(lab_asset_path("assets/models/model.bin", mp, sizeof mp), &mc,
                            NULL, err, sizeof err) ||
        llm_checkpoint_read(lab_asset_path("assets/models/draft.bin", dp, sizeof dp), &dc,
                            NULL, err, sizeof err)) {
        fprintf(stderr, "mlsys-lab: ch14/memory-timeline: %s\n", err);
        return 2;
    }
    common_box(stdout, 68, "RLHF memory, measured");
    printf("\nThe lab's RLHF loop (ch13/rlhf-loop, PPO) on the shipped model (%zu parameters, "
           "float32),\n16 problems per iteration, 2 iterations on 2 ranks; memory from the "
           "runtime's memory events\n(USAGE gauges per role and the KV cache's blocks, all "
           "ranks summed, the peak within each\nphase), in MiB.\n", llm_param_count(&mc));
    static const char *const pname[2] = {"colocated", "split"};
    for (int p = 0; p < 2; p++) {
        double peak[RL_PH_COUNT][RL_ROLE_COUNT], est[RL_ROLE_COUNT];
        if (measure(p ? RL_PLACE_SPLIT : RL_PLACE_COLOCATED, 2, peak))
            return 1;
        /* the estimate: per rank holding the role; colocated: both ranks hold all roles with
         * half the batch; split: rank 0 the generator (whole batch), rank 1 the others */
        int ranks_tr = p ? 1 : 2, Bgen = p ? 16 : 8, Btr = p ? 8 : 4;
        estimate(&mc, Btr, 24, est);
        double e2[RL_ROLE_COUNT];
        estimate(&mc, Bgen, 24, e2);
        est[RL_ROLE_GENERATOR] = e2[RL_ROLE_GENERATOR] * (p ? 1 : 2);
        est[RL_ROLE_REWARD] = (double)llm_file_floats(&dc) * 4.0 + nn_tf_bytes(&dc, Btr, 16);
        for (int r = 0; r < RL_ROLE_GENERATOR; r++)
            est[r] *= ranks_tr;
        printf("\n%s placement (%s)\n", pname[p],
               p ? "rank 0 generates, rank 1 scores and trains"
                 : "every role on both ranks, half the batch each");
        printf("  %-10s", "role");
        for (int ph = 0; ph < RL_PH_COUNT; ph++)
            printf(" %9s", rl_phase_name(ph));
        printf(" %9s\n", "estimate");
        for (int r = 0; r < RL_ROLE_COUNT; r++) {
            printf("  %-10s", rl_role_name(r));
            for (int ph = 0; ph < RL_PH_COUNT; ph++)
                printf(" %9.2f", peak[ph][r] / MIB);
            printf(" %9.2f\n", est[r] / MIB);
        }
        double tot[RL_PH_COUNT] = {0}, et = 0;
        for (int r = 0; r < RL_ROLE_COUNT; r++) {
            et += est[r];
            for (int ph = 0; ph < RL_PH_COUNT; ph++)
                tot[ph] += peak[ph][r];
        }
        printf("  %-10s", "total");
        for (int ph = 0; ph < RL_PH_COUNT; ph++)
            printf(" %9.2f", tot[ph] / MIB);
        printf(" %9.2f\n", et / MIB);
        fflush(stdout);
    }
    printf("\nThe estimate is the chapter's formula in float32: weights 4P per copy, gradients 4P "
           "and Adam 8P per\ntrained model, KV cache 2·L·kv_dim·4 bytes per token, the "
           "training forward's activations\n(nn_tf_bytes); the critic's head and the reward "
           "model's activations are small.\n");
    return 0;
}
