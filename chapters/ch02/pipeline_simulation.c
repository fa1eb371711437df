/* pipeline_simulation.c - ch02/pipeline-simulation: a forward-only pipeline built on blocking
 * point-to-point. Stage s owns one dense layer H->H (weight [out, in], y = x·Wᵀ + b, then
 * ReLU) seeded with 1000+s; stage 0 creates micro-batch m (B×H normals seeded with m) and
 * every stage passes its activations on. Teaches that pipeline parallelism is just p2p
 * between neighbouring stages, and checks itself: the last stage recomputes each micro-batch
 * with all P layers in one process and reports the largest difference (0 with our kernels). */
#include "../common/common.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define W 60

static const lab_flag pipe_flags[] = {
    {"world-size", 'w', FLAG_INT, "4", NULL, 1, 64, "pipeline stages P, one per rank"},
    {"batch-size", 'b', FLAG_INT, "32", NULL, 1, 1024, "rows per micro-batch B"},
    {"hidden-size", 0, FLAG_INT, "64", NULL, 1, 1024, "layer width H"},
    {"num-microbatches", 'm', FLAG_INT, "4", NULL, 1, 256, "micro-batches M"},
    {"backend", 0, FLAG_CHOICE, "gloo", "gloo|nccl|shm|mpi",
     0, 0, "transport; no short alias here, -b is the batch size"},
    {"visualize", 0, FLAG_BOOL, NULL, NULL, 0, 0,
     "draw how micro-batches fill a pipeline, without starting ranks"},
    {NULL, 0, 0, NULL, NULL, 0, 0, NULL}
};

typedef struct layer {
    int h;
    float *w;   /* [h out][h in] */
    float *b;   /* [h] */
} layer;

/* nn.Linear's default init: weight and bias uniform in ±1/√in, from seed 1000 + stage. */
static void layer_init(layer *l, int h, int stage)
{
    mlsys_rng g;
    float bound = 1.0f / sqrtf((float)h);
    l->h = h;
    l->w = mlsys_xmalloc((size_t)h * h * sizeof *l->w);
    l->b = mlsys_xmalloc((size_t)h * sizeof *l->b);
    mlsys_rng_seed(&g, 1000u + (uint64_t)stage);
    for (size_t i = 0; i < (size_t)h * h; i++)
        l->w[i] = (float)((2.0 * mlsys_rng_uniform(&g) - 1.0) * bound);
    for (int i = 0; i < h; i++)
        l->b[i] = (float)((2.0 * mlsys_rng_uniform(&g) - 1.0) * bound);
}

static void layer_free(layer *l)
{
    free(l->w);
    free(l->b);
}

/* out[B][H] = ReLU(x[B][H] · Wᵀ + b). out must not alias x. */
static void layer_forward(const layer *l, const float *x, float *out, int rows)
{
    int h = l->h;
    for (int i = 0; i < rows; i++) {
        const float *xi = x + (size_t)i * h;
        for (int o = 0; o < h; o++) {
            const float *wo = l->w + (size_t)o * h;
            float acc = l->b[o];
            for (int k = 0; k < h; k++)
                acc += xi[k] * wo[k];
            out[(size_t)i * h + o] = acc > 0.0f ? acc : 0.0f;
        }
    }
}

/* Micro-batch m's input: B×H standard normals from seed m (the same on every rank). */
static void make_input(float *x, int rows, int h, int m)
{
    mlsys_rng g;
    mlsys_rng_seed(&g, (uint64_t)m);
    for (size_t i = 0; i < (size_t)rows * h; i++)
        x[i] = (float)mlsys_rng_normal(&g);
}

/* The single-process reference: all P layers, one after another, on micro-batch m. */
static void serial_reference(float *out, float *tmp, int stages, int rows, int h, int m)
{
    make_input(tmp, rows, h, m);
    for (int s = 0; s < stages; s++) {
        layer l;
        layer_init(&l, h, s);
        layer_forward(&l, tmp, out, rows);
        layer_free(&l);
        memcpy(tmp, out, (size_t)rows * h * sizeof *out);
    }
}

static void visualize(void)
{
    char rule[256];
    common_rule(rule, sizeof rule, "=", W);
    printf("%s\n Pipeline parallelism: a 12-layer model on 5 stages\n%s\n", rule, rule);
    printf("  Stage 0: embedding\n");
    printf("  Stage 1: layers 0-3\n");
    printf("  Stage 2: layers 4-7\n");
    printf("  Stage 3: layers 8-11\n");
    printf("  Stage 4: head\n\n");
    printf("Forward passes of 4 micro-batches (MB) over time:\n\n");
    common_text row = {0};
    common_text_add(&row, "  time →  ");
    for (int t = 0; t < 8; t++)
        common_text_add(&row, " t%d  ", t);
    while (row.len && row.s[row.len - 1] == ' ')
        row.s[--row.len] = 0;
    printf("%s\n", common_text_str(&row));
    for (int s = 0; s < 5; s++) {
        common_text_free(&row);
        common_text_add(&row, "  Stage %d ", s);
        for (int t = 0; t < 8; t++) {
            int mb = t - s;
            if (mb >= 0 && mb < 4)
                common_text_add(&row, " MB%d ", mb);
            else
                common_text_add(&row, "  .  ");
        }
        while (row.len && row.s[row.len - 1] == ' ')
            row.s[--row.len] = 0;          /* no trailing blanks */
        printf("%s\n", common_text_str(&row));
    }
    common_text_free(&row);
    printf("\nEach stage starts one slot after the one before it. Once the pipeline is\n");
    printf("full, stage s works on micro-batch t-s at time t: all stages are busy at\n");
    printf("once, on different micro-batches. The dots are the bubble: slots where a\n");
    printf("stage has nothing to do while the pipeline fills and drains.\n");
}

static int pipe_before(const lab_args *a)
{
    if (lab_arg_bool(a, "visualize")) {
        visualize();
        fflush(stdout);
        return 0;
    }
    int p = (int)lab_arg_int(a, "world-size");
    if (common_backend_check(a, p) != 0)
        return 2;
    char rule[256];
    common_rule(rule, sizeof rule, "=", W);
    printf("%s\n Pipeline simulation: forward pass through Linear+ReLU stages\n%s\n", rule, rule);
    printf("Stages (P): %d\n", p);
    printf("Batch size (B): %ld\n", lab_arg_int(a, "batch-size"));
    printf("Hidden size (H): %ld\n", lab_arg_int(a, "hidden-size"));
    printf("Micro-batches (M): %ld\n\n", lab_arg_int(a, "num-microbatches"));
    fflush(stdout);
    return -1;
}

static int pipe_rank(mlsys_comm *c, const lab_args *a)
{
    int s = mlsys_rank(c), p = mlsys_size(c), rc = 1;
    int rows = (int)lab_arg_int(a, "batch-size"), h = (int)lab_arg_int(a, "hidden-size");
    int nmb = (int)lab_arg_int(a, "num-microbatches");
    size_t elems = (size_t)rows * h;
    float *x = mlsys_alloc_aligned(elems * sizeof *x);
    float *y = mlsys_alloc_aligned(elems * sizeof *y);
    float *ref = NULL, *tmp = NULL;
    int last = s == p - 1;
    double max_diff = 0.0;
    common_text out = {0};
    layer l;
    char shape[32], label[24];
    int dims[2] = {rows, h};

    layer_init(&l, h, s);
    common_shape(shape, sizeof shape, dims, 2);
    if (last) {
        ref = mlsys_xmalloc(elems * sizeof *ref);
        tmp = mlsys_xmalloc(elems * sizeof *tmp);
    }
    mlsys_reset_counters(c);

    for (int m = 0; m < nmb; m++) {
        mlsys_step(c, m, "micro-batch");
        if (s == 0) {
            make_input(x, rows, h, m);
            common_text_add(&out, "Stage 0: created input for micro-batch %d, shape %s\n", m,
                            shape);
        } else {
            /* the tag names the micro-batch, so the order of arrival is visible */
            if (mlsys_recv(c, x, elems, MLSYS_F32, s - 1, m) != MLSYS_OK)
                goto err;
            common_text_add(&out, "Stage %d: received micro-batch %d from stage %d\n", s, m, s - 1);
        }
        snprintf(label, sizeof label, "F mb%d", m);
        mlsys_compute_begin(c, label);
        layer_forward(&l, x, y, rows);
        mlsys_compute_end(c, label);
        if (!last) {
            if (mlsys_send(c, y, elems, MLSYS_F32, s + 1, m) != MLSYS_OK)
                goto err;
            common_text_add(&out, "Stage %d: sent micro-batch %d to stage %d\n", s, m, s + 1);
            continue;
        }
        double sum = 0.0, diff = 0.0;
        for (size_t i = 0; i < elems; i++)
            sum += y[i];
        serial_reference(ref, tmp, p, rows, h, m);
        for (size_t i = 0; i < elems; i++) {
            double d = fabs((double)y[i] - (double)ref[i]);
            if (d > diff || isnan(d))
                diff = isnan(d) ? INFINITY : d;
        }
        if (diff > max_diff)
            max_diff = diff;
        common_text_add(&out, "Stage %d: completed micro-batch %d, output mean %.4f, checksum "
                        "%.6f, max |pipelined - serial| = %.3g\n", s, m, sum / (double)elems,
                        sum, diff);
    }
    /* messages this rank sent during the pipeline (read before any collective adds some) */
    double sent = (double)mlsys_get_counters(c)->sends;
    if (mlsys_print_ordered(c, "%s", common_text_str(&out)) != MLSYS_OK)
        goto err;
    if (mlsys_allreduce(c, &sent, &sent, 1, MLSYS_F64, MLSYS_SUM) != MLSYS_OK)
        goto err;
    if (mlsys_allreduce(c, &max_diff, &max_diff, 1, MLSYS_F64, MLSYS_MAX) != MLSYS_OK)
        goto err;
    if (mlsys_barrier(c) != MLSYS_OK)
        goto err;

    char rule[256];
    common_rule(rule, sizeof rule, "=", W);
    mlsys_print_root(c, "\n%s\n Pipeline summary\n%s\n", rule, rule);
    mlsys_print_root(c, "Stages: %d\nMicro-batches: %d\nBatch size: %d\nHidden size: %d\n", p,
                     nmb, rows, h);
    mlsys_print_root(c, "Messages sent: %.0f (expected (P-1)*M = %d), %zu bytes each\n", sent,
                     (p - 1) * nmb, elems * sizeof(float));
    mlsys_print_root(c, "Serial reference (all %d layers in one process): max |pipelined - "
                     "serial| = %.3g over %d micro-batches\n", p, max_diff, nmb);
    mlsys_print_root(c, "\nIn a real pipeline:\n"
                        "  - stages work on different micro-batches at the same time\n"
                        "  - the backward pass sends gradients the other way, stage s to s-1\n"
                        "  - 1F1B interleaves forward and backward to hold fewer activations\n");
    rc = (max_diff == 0.0 || max_diff < 1e-6) ? 0 : 1;
    goto out;
err:
    fprintf(stderr, "rank %d: %s\n", s, mlsys_errmsg(c));
    rc = 1;
out:
    common_text_free(&out);
    layer_free(&l);
    free(ref);
    free(tmp);
    mlsys_free_aligned(x, elems * sizeof *x);
    mlsys_free_aligned(y, elems * sizeof *y);
    return rc;
}

const lab ch02_pipeline_simulation_lab = {
    .id = "ch02/pipeline-simulation",
    .title = "Pipeline simulation",
    .summary = "forward-only pipeline of Linear+ReLU stages, one per rank, checked against a "
               "serial run",
    .flags = pipe_flags,
    .port = 29502,
    .min_ranks = 1,
    .max_ranks = 64,
    .before = pipe_before,
    .rank_main = pipe_rank,
    .view = "timeline",
};
