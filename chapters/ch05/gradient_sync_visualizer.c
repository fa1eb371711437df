/* gradient_sync_visualizer.c - ch05/gradient-sync-visualizer: a 4 -> 3 -> 2 network without
 * biases (18 parameters) on N ranks, each with its own data (seed 100·r). Every rank's
 * gradient is shown before and after the all-reduce, bucket by bucket (the buckets of our DDP
 * engine, ddp.c); then the proof that the synced gradient is the gradient of the whole
 * concatenated batch, computed in one process. The blocks view draws each rank's gradient. */
#include "../common/common.h"
#include "../../core/train/train.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define ROWS 8
#define IN 4
#define HID 3
#define OUT 2
#define NPARAM (HID * IN + OUT * HID)

static const lab_flag gsv_flags[] = {
    {"world-size", 'w', FLAG_INT, "4", NULL, 1, 64, "number of ranks"},
    {"bucket-size", 0, FLAG_SIZE, "24", NULL, 0, 1L << 20, "bucket size in bytes (6 floats)"},
    {"first-bucket", 0, FLAG_SIZE, "8", NULL, 0, 1L << 20, "first bucket in bytes (2 floats)"},
    {"zero", 0, FLAG_CHOICE, "0", "0|1|2|3", 0, 0, "mark the shard each rank owns under ZeRO"},
    {NULL, 0, 0, NULL, NULL, 0, 0, NULL}
};

static int gsv_before(const lab_args *a)
{
    int n = (int)lab_arg_int(a, "world-size");
    if (lab_arg_size(a, "bucket-size") < 4 || lab_arg_size(a, "first-bucket") < 4) {
        fprintf(stderr, "ch05/gradient-sync-visualizer: a bucket must hold at least one float "
                "(4 B): --bucket-size %llu, --first-bucket %llu\n",
                (unsigned long long)lab_arg_size(a, "bucket-size"),
                (unsigned long long)lab_arg_size(a, "first-bucket"));
        return 2;
    }
    if (atoi(lab_arg_str(a, "zero")) > 0 && n > NPARAM) {
        fprintf(stderr, "ch05/gradient-sync-visualizer: ZeRO needs at least one parameter per "
                "rank: %d parameters, %d ranks\n", NPARAM, n);
        return 2;
    }
    return -1;
}

/* Rank q's data: x[8,4] then t[8,2], normals from seed 100·q. */
static void draw_data(int q, float *x, float *t)
{
    mlsys_rng g;
    mlsys_rng_seed(&g, 100u * (uint64_t)q);
    for (int i = 0; i < ROWS * IN; i++)
        x[i] = (float)mlsys_rng_normal(&g);
    for (int i = 0; i < ROWS * OUT; i++)
        t[i] = (float)mlsys_rng_normal(&g);
}

/* Loss mean((y - t)²) over B rows and its gradients (written, not accumulated). */
static float forward_backward(const float *w1, const float *w2, float *g1, float *g2,
                              const float *x, const float *t, int B)
{
    float *h = mlsys_xcalloc((size_t)B * HID, sizeof(float));
    float *y = mlsys_xcalloc((size_t)B * OUT, sizeof(float));
    float *dh = mlsys_xcalloc((size_t)B * HID, sizeof(float));
    nn_linear_forward(h, x, w1, NULL, B, IN, HID);
    nn_relu_forward(h, h, (size_t)B * HID);
    nn_linear_forward(y, h, w2, NULL, B, HID, OUT);
    float loss = nn_mse_forward(y, t, (size_t)B * OUT);
    nn_mse_backward(y, y, t, (size_t)B * OUT, 1.0f);
    memset(g1, 0, HID * IN * sizeof(float));
    memset(g2, 0, OUT * HID * sizeof(float));
    nn_linear_backward(dh, g2, NULL, y, h, w2, B, HID, OUT);
    nn_relu_backward(dh, dh, h, (size_t)B * HID);
    nn_linear_backward(NULL, g1, NULL, dh, x, w1, B, IN, HID);
    free(h);
    free(y);
    free(dh);
    return loss;
}

/* The blocks view: this rank's gradient as pool 0, a block per parameter, each block's value
 * its gradient (WRITE) or, while its bucket's all-reduce runs, in flight (BUSY). */
static void emit_grads(mlsys_comm *c, const float *g, int lo, int hi, int op)
{
    for (int i = lo; i < hi; i++) {
        mlsys_mem_info m = {.pool = 0, .op = (int8_t)op, .block = i, .owner = -1, .index = -1};
        mlsys_emit_mem_value(c, &m, sizeof(float), NULL, g[i]);
    }
}

/* The gradient's blocks, each bucket their owner (its table: the bucket's parameters). */
static void show_buckets(mlsys_comm *c, const ddp *d)
{
    mlsys_mem_info m = {.pool = 0, .op = MLSYS_MEM_POOL, .block = -1, .owner = -1, .index = 0,
                        .aux = NPARAM};
    mlsys_emit_mem(c, &m, sizeof(float), "gradient");
    for (int k = 0; k < d->nbuckets; k++) {
        char name[16];
        snprintf(name, sizeof name, "b%d", k);
        m = (mlsys_mem_info){.pool = 0, .op = MLSYS_MEM_OWNER, .block = -1, .owner = k,
                             .index = -1};
        mlsys_emit_mem(c, &m, 0, name);
        for (size_t i = 0; i < d->b[k].n; i++) {
            m = (mlsys_mem_info){.pool = 0, .op = MLSYS_MEM_ALLOC,
                                 .block = (int32_t)(d->b[k].off + i), .owner = k, .refs = 1,
                                 .index = (int32_t)i};
            mlsys_emit_mem(c, &m, sizeof(float), NULL);
        }
    }
}

static int gsv_rank(mlsys_comm *c, const lab_args *a)
{
    int r = mlsys_rank(c), N = mlsys_size(c), rc = 0, bad = 0, verbose = lab_arg_bool(a, "verbose");
    int stage = atoi(lab_arg_str(a, "zero"));
    char rule[128];
    common_rule(rule, sizeof rule, "-", 60);
    nn_params p;
    nn_params_init(&p);
    nn_params_add2(&p, "w1", HID, IN);
    nn_params_add2(&p, "w2", OUT, HID);
    nn_params_alloc(&p, 1);
    float *w1 = p.t[0].data, *w2 = p.t[1].data, *g1 = p.t[0].grad, *g2 = p.t[1].grad;
    mlsys_rng g;
    mlsys_rng_seed(&g, 42);
    nn_init_linear(w1, HID * IN, IN, &g);
    nn_init_linear(w2, OUT * HID, HID, &g);
    ddp *d = NULL;
    float pre[NPARAM], x[ROWS * IN], t[ROWS * OUT];
    float *all = mlsys_xcalloc((size_t)N * NPARAM, sizeof(float));
    if ((rc = ddp_create(&d, NULL, &p, lab_arg_size(a, "bucket-size"),
                         lab_arg_size(a, "first-bucket"))) != 0)
        goto err;
    if ((rc = mlsys_broadcast(c, p.data, NPARAM, MLSYS_F32, 0)) != 0)
        goto err;

    if (r == 0) {
        common_box(stdout, COMMON_BOX_WIDTH, "Gradient sync visualizer");
        fflush(stdout);
    }
    mlsys_print_root(c, "World size: %d\nModel: Linear(4, 3, no bias) -> ReLU -> Linear(3, 2, "
                     "no bias):\nweights [3x4] and [2x3], %d parameters\n\n", N, NPARAM);

    /* ---- step 1: each rank's own data ---- */
    mlsys_print_root(c, "%s\nStep 1: every rank draws its own data (seed 100 x rank)\n%s\n", rule,
                     rule);
    draw_data(r, x, t);
    double mean = 0, var = 0;
    for (int i = 0; i < ROWS * IN; i++)
        mean += x[i];
    mean /= ROWS * IN;
    for (int i = 0; i < ROWS * IN; i++)
        var += (x[i] - mean) * (x[i] - mean);
    var /= ROWS * IN - 1;
    if ((rc = mlsys_print_ordered(c, "Rank %d: input mean %.4f, std %.4f\n", r, mean,
                                  sqrt(var))) != 0)
        goto err;

    /* ---- step 2: forward and backward ---- */
    mlsys_print_root(c, "\n%s\nStep 2: forward and backward on the local data\n%s\n", rule, rule);
    float loss = forward_backward(w1, w2, g1, g2, x, t, ROWS);
    memcpy(pre, p.grad, sizeof pre);
    if ((rc = mlsys_print_ordered(c, "Rank %d: loss %.6f\n", r, (double)loss)) != 0)
        goto err;
    if (verbose && (rc = mlsys_print_ordered(c, "Rank %d: grad w1[0,0] = %.6f, w2[0,0] = %.6f\n",
                                             r, (double)g1[0], (double)g2[0])) != 0)
        goto err;
    mlsys_print_root(c, "The gradients differ from rank to rank because the data differ.\n");
    show_buckets(c, d);
    emit_grads(c, p.grad, 0, NPARAM, MLSYS_MEM_WRITE);

    /* ---- step 3: all-reduce, bucket by bucket ---- */
    mlsys_print_root(c, "\n%s\nStep 3: all_reduce(SUM) / %d, bucket by bucket (reverse "
                     "order)\n%s\n", rule, N, rule);
    for (int k = 0; k < d->nbuckets; k++) {
        char lbl[48];
        ddp_bucket *b = &d->b[k];
        snprintf(lbl, sizeof lbl, "bucket %d", k);
        if ((rc = mlsys_step(c, k, lbl)) != 0)
            goto err;
        mlsys_print_root(c, "bucket %d: floats [%zu, %zu) of %s\n", k, b->off, b->off + b->n,
                         b->t_lo == b->t_hi ? p.t[b->t_lo].name : "w1 and w2");
        emit_grads(c, p.grad, (int)b->off, (int)(b->off + b->n), MLSYS_MEM_BUSY);
        float *gb = p.grad + b->off;
        if ((rc = mlsys_allreduce(c, gb, gb, b->n, MLSYS_F32, MLSYS_SUM)) != 0)
            goto err;
        for (size_t i = 0; i < b->n; i++)
            gb[i] /= (float)N;
        emit_grads(c, p.grad, (int)b->off, (int)(b->off + b->n), MLSYS_MEM_WRITE);
    }
    if (stage >= 2) {
        /* what ZeRO-2 keeps of the gradient: this rank's shard; the rest is let go */
        size_t off, len;
        nn_shard_range(NPARAM, r, N, &off, &len);
        if ((rc = mlsys_step(c, d->nbuckets, "ZeRO: own shard only")) != 0)
            goto err;
        for (int k = 0; k < d->nbuckets; k++)
            for (size_t i = d->b[k].off; i < d->b[k].off + d->b[k].n; i++)
                if (i < off || i >= off + len) {
                    mlsys_mem_info m = {.pool = 0, .op = MLSYS_MEM_FREE, .block = (int32_t)i,
                                        .owner = k, .refs = 0, .index = -1};
                    mlsys_emit_mem(c, &m, sizeof(float), NULL);
                }
        mlsys_print_root(c, "Under ZeRO-%d each rank would keep only its own shard of the "
                         "gradient (a reduce_scatter instead of the all_reduce).\n", stage);
    }
    if (verbose && (rc = mlsys_print_ordered(c, "Rank %d: grad w1[0,0] = %.6f, w2[0,0] = %.6f\n",
                                             r, (double)g1[0], (double)g2[0])) != 0)
        goto err;

    /* ---- step 4: the same on every rank? ---- */
    mlsys_print_root(c, "\n%s\nStep 4: are the gradients identical on every rank?\n%s\n", rule,
                     rule);
    for (int w = 0; w < 2; w++) {
        size_t n = p.t[w].numel;
        if ((rc = mlsys_allgather(c, p.t[w].grad, all, n, MLSYS_F32)) != 0)
            goto err;
        int close = 1;
        for (int q = 1; q < N; q++)
            for (size_t i = 0; i < n; i++) {
                double a0 = all[i], aq = all[(size_t)q * n + i];
                if (fabs(aq - a0) > 1e-8 + 1e-5 * fabs(a0))
                    close = 0;
            }
        mlsys_print_root(c, "%s %s gradient identical on all ranks: %s\n", close ? "✓" : "✗",
                         p.t[w].name, close ? "True" : "False");
    }

    /* ---- the key check: one process on the concatenated batch ---- */
    if (r == 0) {
        float *X = mlsys_xmalloc((size_t)N * ROWS * IN * sizeof(float));
        float *Tt = mlsys_xmalloc((size_t)N * ROWS * OUT * sizeof(float));
        float ref[NPARAM];
        nn_params q0;
        nn_params_init(&q0);
        nn_params_add2(&q0, "w1", HID, IN);
        nn_params_add2(&q0, "w2", OUT, HID);
        nn_params_alloc(&q0, 0);
        mlsys_rng_seed(&g, 42);
        nn_init_linear(q0.t[0].data, HID * IN, IN, &g);
        nn_init_linear(q0.t[1].data, OUT * HID, HID, &g);
        for (int q = 0; q < N; q++)
            draw_data(q, X + (size_t)q * ROWS * IN, Tt + (size_t)q * ROWS * OUT);
        forward_backward(q0.t[0].data, q0.t[1].data, ref, ref + HID * IN, X, Tt, N * ROWS);
        double md = 0;
        for (int i = 0; i < NPARAM; i++)
            md = fmax(md, fabs((double)ref[i] - (double)p.grad[i]));
        mlsys_print_root(c, "(one process: the MSE's gradient over all %d samples, computed "
                         "alone)\n", N * ROWS);
        mlsys_print_root(c, "[check] synced gradient = one process's: max |diff| %.2e < 1e-6: "
                         "%s\n", md, md < 1e-6 ? "PASS" : "FAIL");
        bad = md >= 1e-6;
        nn_params_fini(&q0);
        free(X);
        free(Tt);
    }
    mlsys_print_root(c, "\nMath insight: the loss of the whole batch of %d samples is the mean "
                     "of the\n%d shard loss%s (equal shards of %d), and the gradient is linear, "
                     "so its gradient\nis the mean of the %d local gradient%s: exactly what "
                     "all_reduce(SUM) / %d\ncomputes.\n", N * ROWS, N, N == 1 ? "" : "es", ROWS,
                     N, N == 1 ? "" : "s", N);
    if (verbose) {
        mlsys_print_root(c, "\n%s\nBonus: how much the sync changed each rank's gradient\n%s\n",
                         rule, rule);
        double ch[2];
        for (int w = 0; w < 2; w++) {
            double num = 0, den = 0;
            size_t o = p.t[w].offset;
            for (size_t i = 0; i < p.t[w].numel; i++) {
                num += fabs((double)p.grad[o + i] - (double)pre[o + i]);
                den += fabs((double)pre[o + i]);
            }
            ch[w] = num / (den + 1e-8 * (double)p.t[w].numel) * 100;
        }
        if ((rc = mlsys_print_ordered(c, "Rank %d: w1 changed %.1f%%, w2 changed %.1f%%\n", r,
                                      ch[0], ch[1])) != 0)
            goto err;
    }
    if ((rc = mlsys_barrier(c)) != 0)
        goto err;
    rc = bad;
    goto out;
err:
    fprintf(stderr, "rank %d: %s\n", r, mlsys_errmsg(c));
    rc = 1;
out:
    ddp_free(d);
    free(all);
    nn_params_fini(&p);
    return rc;
}

const lab ch05_gradient_sync_visualizer_lab = {
    .id = "ch05/gradient-sync-visualizer",
    .title = "Gradient sync visualizer",
    .summary = "each rank's gradient before and after the all-reduce, bucket by bucket",
    .flags = gsv_flags,
    .port = 29507,
    .min_ranks = 1,
    .max_ranks = 64,
    .before = gsv_before,
    .rank_main = gsv_rank,
    .view = "blocks",
};
