/* pipeline_simulation.c - ch02/pipeline-simulation: a forward-only pipeline built on blocking
 * point-to-point. Stage s owns one dense layer H->H (weight [out, in], y = x·Wᵀ + b, then
 * ReLU) seeded with 1000+s; stage 0 creates micro-batch m (B×H normals seeded with m) and
 * every stage passes its activations on. Teaches that pipeline parallelism is just p2p
 * between neighbouring stages, and checks itself: the last stage recomputes each micro-batch
 * with all P layers in one process and reports the largest difference (0 with our kernels).
 * Every stage timestamps its events; rank 0 prints them merged in time order, so the lines
 * of different stages interleave the way the stages really ran: at the same time. */
#include "../common/common.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define W 60

static const lab_flag pipe_flags[] = {
    {"world-size", 'w', FLAG_INT, "4", NULL, 1, 64, "pipeline stages P, one per rank"},
    {"batch-size", 0, FLAG_INT, "32", NULL, 1, 1024,
     "rows per micro-batch B (the original's -b; -b is --backend wherever ranks run)"},
    {"hidden-size", 0, FLAG_INT, "64", NULL, 1, 1024, "layer width H"},
    {"num-microbatches", 'm', FLAG_INT, "4", NULL, 1, 256, "micro-batches M"},
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

/* One event of one stage, sent to rank 0 as EV_DOUBLES doubles. */
enum { EV_CREATED, EV_RECEIVED, EV_SENT, EV_COMPLETED };
#define EV_DOUBLES 7
typedef struct pipe_event {
    double t;                   /* seconds since the common start */
    int stage, kind, mb;
    double mean, sum, diff;     /* EV_COMPLETED only */
} pipe_event;

static void ev_pack(const pipe_event *e, double *d)
{
    d[0] = e->t;
    d[1] = e->stage;
    d[2] = e->kind;
    d[3] = e->mb;
    d[4] = e->mean;
    d[5] = e->sum;
    d[6] = e->diff;
}

static void ev_unpack(const double *d, pipe_event *e)
{
    e->t = d[0];
    e->stage = (int)d[1];
    e->kind = (int)d[2];
    e->mb = (int)d[3];
    e->mean = d[4];
    e->sum = d[5];
    e->diff = d[6];
}

/* Time order; on a tie, by stage, then by the order the stage logged them. */
static int ev_cmp(const void *pa, const void *pb)
{
    const pipe_event *a = pa, *b = pb;
    if (a->t != b->t)
        return a->t < b->t ? -1 : 1;
    if (a->stage != b->stage)
        return a->stage - b->stage;
    if (a->mb != b->mb)
        return a->mb - b->mb;
    return a->kind - b->kind;
}

static void ev_print(const pipe_event *e, const char *shape)
{
    int s = e->stage;
    switch (e->kind) {
    case EV_CREATED:
        printf("Stage 0: created input for micro-batch %d, shape %s", e->mb, shape);
        break;
    case EV_RECEIVED:
        printf("Stage %d: received micro-batch %d from stage %d", s, e->mb, s - 1);
        break;
    case EV_SENT:
        printf("Stage %d: sent micro-batch %d to stage %d", s, e->mb, s + 1);
        break;
    default:
        printf("Stage %d: completed micro-batch %d, output mean %.4f, checksum %.6f, max "
               "|pipelined - serial| = %.3g", s, e->mb, e->mean, e->sum, e->diff);
    }
    printf("   @ %.3f ms\n", e->t * 1e3);
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
    double max_diff = 0.0, t0;
    int nev = 0, cap = 2 * nmb;
    double *evs = mlsys_xcalloc((size_t)cap * EV_DOUBLES, sizeof *evs), *all = NULL;
    layer l;
    char shape[32], label[24];
    int dims[2] = {rows, h};

    layer_init(&l, h, s);
    common_shape(shape, sizeof shape, dims, 2);
    if (last) {
        ref = mlsys_xmalloc(elems * sizeof *ref);
        tmp = mlsys_xmalloc(elems * sizeof *tmp);
    }
    /* a common start: the clock is the same monotonic one in every process */
    if (mlsys_barrier(c) != MLSYS_OK)
        goto err;
    t0 = mlsys_now_s();
    if (mlsys_allreduce(c, &t0, &t0, 1, MLSYS_F64, MLSYS_MIN) != MLSYS_OK)
        goto err;
    mlsys_reset_counters(c);

#define LOG_EVENT(k, m_, mean_, sum_, diff_)                                                    \
    do {                                                                                       \
        pipe_event e_ = {mlsys_now_s() - t0, s, (k), (m_), (mean_), (sum_), (diff_)};          \
        ev_pack(&e_, evs + (size_t)nev++ * EV_DOUBLES);                                        \
    } while (0)

    for (int m = 0; m < nmb; m++) {
        mlsys_step(c, m, "micro-batch");
        if (s == 0) {
            make_input(x, rows, h, m);
            LOG_EVENT(EV_CREATED, m, 0, 0, 0);
        } else {
            /* the tag names the micro-batch, so the order of arrival is visible */
            if (mlsys_recv(c, x, elems, MLSYS_F32, s - 1, m) != MLSYS_OK)
                goto err;
            LOG_EVENT(EV_RECEIVED, m, 0, 0, 0);
        }
        snprintf(label, sizeof label, "F mb%d", m);
        mlsys_compute_begin(c, label);
        layer_forward(&l, x, y, rows);
        mlsys_compute_end(c, label);
        if (!last) {
            if (mlsys_send(c, y, elems, MLSYS_F32, s + 1, m) != MLSYS_OK)
                goto err;
            LOG_EVENT(EV_SENT, m, 0, 0, 0);
            continue;
        }
        double sum = 0.0, diff = 0.0, t_done = mlsys_now_s() - t0;   /* before the check */
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
        pipe_event e = {t_done, s, EV_COMPLETED, m, sum / (double)elems, sum, diff};
        ev_pack(&e, evs + (size_t)nev++ * EV_DOUBLES);
    }
#undef LOG_EVENT
    /* messages this rank sent during the pipeline (read before any collective adds some) */
    double sent = (double)mlsys_get_counters(c)->sends;
    /* every stage logged exactly 2M events (P = 1: created and completed) */
    if (s == 0)
        all = mlsys_xcalloc((size_t)p * cap * EV_DOUBLES, sizeof *all);
    if (mlsys_gather(c, evs, all, (size_t)cap * EV_DOUBLES, MLSYS_F64, 0) != MLSYS_OK)
        goto err;
    if (s == 0) {
        size_t total = (size_t)p * cap;
        pipe_event *ev = mlsys_xcalloc(total, sizeof *ev);
        for (size_t i = 0; i < total; i++)
            ev_unpack(all + i * EV_DOUBLES, &ev[i]);
        qsort(ev, total, sizeof *ev, ev_cmp);
        printf("Events of all stages, merged in time order (@ = ms since the common start;\n"
               "a \"sent\" line is logged when the send returned, once the next stage had\n"
               "the data). The stages run at the same time, so their lines interleave:\n"
               "stage 0 creates micro-batch 1 while stage 1 still works on micro-batch 0.\n"
               "With more ranks than cores, ranks also wait for a core: the times are noisy.\n\n");
        for (size_t i = 0; i < total; i++)
            ev_print(&ev[i], shape);
        fflush(stdout);
        free(ev);
    }
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
    mlsys_print_root(c, "Serial reference (%s %d layer%s in one process): max |pipelined - "
                     "serial| = %.3g over %d micro-batch%s\n", p == 1 ? "its" : "all", p,
                     p == 1 ? "" : "s", max_diff, nmb, nmb == 1 ? "" : "es");
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
    free(evs);
    free(all);
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
