/* weight_update_demo.c - ch14/weight-update-demo: how updated weights get from the trainer to
 * the inference engine. First the original's estimates: transfer time = size / bandwidth +
 * setup for disk, NCCL over NVLink, InfiniBand and Ethernet, and CUDA IPC (a handle, no
 * copy), for co-located, same-node and cross-node designs, then what an RLHF iteration pays
 * for it (one transfer, trainer to engine: the original counted a return one too). Then
 * measurements: the lab's ranks broadcast a model-sized buffer from rank 0, and the real
 * actor weights go from the trainer to the generators with rl_wsync (wsync_measure.c), over
 * our shared-memory runtime (or MPI with --backend mpi). GPU paths say in one line when there
 * is no GPU here. */
#include "../common/common.h"
#include "../common/load_model.h"
#include "../../core/llm/model.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define LAB_ID "ch14/weight-update-demo"

/* wsync_measure.c */
int ch14_bucket_list(const char *s, uint64_t *out, int max);
int ch14_wsync_measure(mlsys_comm *c, const lab_args *a, int *gate);
void ch14_wu_roles(mlsys_comm *c);
int ch14_wu_section(mlsys_comm *c, int *gate, const char *label);
void ch14_wu_mem(mlsys_comm *c, int pool, uint64_t bytes, const char *label);

static const lab_flag wu_flags[] = {
    {"model-size", 0, FLAG_DOUBLE, "140", NULL, 0, 1000000,
     "weights to move, GB (140: a 70B model in bf16; the original's -m: -m is "
     "--microbatches in every lab)"},
    {"measure-bytes", 0, FLAG_SIZE, "256M", NULL, 8, 1L << 40, "size of the buffer broadcast for real"},
    {"iters", 0, FLAG_INT, "5", NULL, 1, 1000,
     "timed calls per size: the buffer's broadcast, median of N; the weight sync and its "
     "broadcast, average of N back to back, median of 3 rounds"},
    {"no-measure", 0, FLAG_BOOL, NULL, NULL, 0, 0, "print the estimates only"},
    {"world-size", 'w', FLAG_INT, "2", NULL, 1, 64,
     "ranks: rank 0 is the trainer, the others receive"},
    {"model", 0, FLAG_STR, "assets/models/model.bin", NULL, 0, 0,
     "the actor whose weights the trainer hands over (llama2.c checkpoint)"},
    {"bucket-size", 0, FLAG_STR, "64K,1M,16M", NULL, 0, 0,
     "weight-sync bucket sizes to measure, comma-separated (each at least 4 bytes)"},
    {"copies", 0, FLAG_INT, "1", NULL, 1, 64,
     "hand over this many copies of the actor at once (a bigger model of the same tensors)"},
    {"separate", 0, FLAG_BOOL, NULL, NULL, 0, 0,
     "each tensor in its own allocation: small tensors are packed through the staging buffer"},
    {"fresh-weights", 0, FLAG_BOOL, NULL, NULL, 0, 0,
     "the trainer rewrites every weight before each sync, as an optimizer step does"},
    {NULL, 0, 0, NULL, NULL, 0, 0, NULL}
};

typedef struct method {
    const char *display;
    double gbps;            /* GB/s; 0 = zero copy */
    double setup_ms;
    int across_nodes, same_gpu;
} method;

static const method methods[] = {
    {"NVMe SSD", 7.0, 100, 1, 1},
    {"HDD / NFS", 0.2, 500, 1, 1},
    {"NCCL over NVLink", 450, 10, 0, 1},
    {"NCCL over InfiniBand (400 Gb/s)", 50, 50, 1, 1},
    {"NCCL over 100 Gb/s Ethernet", 12.5, 100, 1, 1},
    {"CUDA IPC handle", 0, 1, 0, 1},
};
#define NMETHODS ((int)(sizeof methods / sizeof methods[0]))

static double transfer_ms(const method *m, double gb)
{
    return m->gbps > 0 ? gb / m->gbps * 1000.0 + m->setup_ms : m->setup_ms;
}

static void format_time(double ms, char *buf, size_t n)
{
    if (ms < 100)
        snprintf(buf, n, "%.1f ms", ms);
    else if (ms < 60000)
        snprintf(buf, n, "%.2f s", ms / 1000);
    else
        snprintf(buf, n, "%.1f min", ms / 60000);
}

static const char *note(const method *m, double ms)
{
    if (m->gbps == 0)
        return "zero copy: only a handle moves";
    if (ms < 1000)
        return "excellent";
    if (ms < 10000)
        return "good";
    if (ms < 60000)
        return "acceptable";
    return "slow";
}

/* The size as the original echoes it: "140" by default, "140.0" when given. */
static void size_text(const lab_args *a, char *buf, size_t n)
{
    double v = lab_arg_double(a, "model-size");
    if (lab_arg_given(a, "model-size") && v == floor(v))
        snprintf(buf, n, "%.1f", v);
    else
        snprintf(buf, n, "%g", v);
}

static void table(const char *title, double gb, int cross_node)
{
    char t[32], thin[256];
    common_rule(thin, sizeof thin, "-", 72);
    printf("\n%s\n%s\n", title, thin);
    printf("  %-34s %12s  %s\n", "method", "time", "note");
    for (int i = 0; i < NMETHODS; i++) {
        const method *m = &methods[i];
        if (cross_node && !m->across_nodes)
            continue;
        double ms = transfer_ms(m, gb);
        format_time(ms, t, sizeof t);
        printf("  %-34s %12s  %s\n", m->display, t, note(m, ms));
    }
}

static void box(const char *title, const char *const *lines)
{
    char bar[512];
    common_rule(bar, sizeof bar, "─", 68);
    printf("┌%s┐\n", bar);
    printf("│ %-67s│\n", title);
    for (int i = 0; lines[i]; i++) {
        int cols = 0;
        for (const char *p = lines[i]; *p; p++)
            cols += ((unsigned char)*p & 0xC0) != 0x80;
        printf("│   %s%*s│\n", lines[i], 65 - cols > 0 ? 65 - cols : 0, "");
    }
    printf("└%s┘\n", bar);
}

/* The weights move one way: the trainer keeps its own copy and sends the new version to the
 * engine; nothing comes back. The original also counted a "return direction", a second
 * transfer engine -> trainer each iteration: named here with what it would have cost. */
static void timeline(const char *label, double transfer_s)
{
    double gen = 30.0, train = 20.0, total = gen + transfer_s + train;
    double twice = gen + 2 * transfer_s + train;
    printf("\n%s\n", label);
    printf("  generation         %6.2f s\n", gen);
    printf("  training           %6.2f s\n", train);
    printf("  weights -> engine  %6.2f s   (trainer to engine only: nothing comes back)\n",
           transfer_s);
    printf("  iteration          %6.2f s   the transfer is %.1f %% of it\n", total,
           100.0 * transfer_s / total);
    printf("  (the original adds a return transfer, engine -> trainer, of the same cost: "
           "%.2f s,\n   %.1f %%; no RLHF system sends the weights back)\n", twice,
           100.0 * 2 * transfer_s / twice);
}

static int wu_before(const lab_args *a)
{
    double gb = lab_arg_double(a, "model-size");
    char st[32], rule[256];
    if (!lab_arg_bool(a, "no-measure") && lab_arg_int(a, "world-size") >= 2) {
        /* the ranks read the model: a bad file is said here, in one line, before anything */
        llm_config mc;
        llm_weights mw;
        if (common_load_model(a, LAB_ID, &mc, &mw, NULL))
            return 2;
        llm_weights_free(&mw);
    }
    size_text(a, st, sizeof st);
    common_rule(rule, sizeof rule, "=", 72);
    common_box(stdout, 68, "Weight update in RLHF");
    printf("\nAfter every training step the inference engine needs the new actor weights: %s "
           "GB here.\nTime = size / bandwidth + setup; a handle moves no weights at all.\n", st);
    printf("\n%s\n ESTIMATES\n%s\n", rule, rule);
    table("Co-located (trainer and engine share GPUs: every method applies)", gb, 0);
    table("Disaggregated, same node", gb, 0);
    table("Disaggregated, across nodes (NVLink and IPC stop at the node)", gb, 1);

    printf("\n%s\n CUDA IPC: SHARE, DO NOT COPY\n%s\n\n", rule, rule);
    char t1[512];
    snprintf(t1, sizeof t1, "%s GB moved: %s / 450 GB/s = %.0f ms over NVLink", st, st,
             gb / 450 * 1000);
    const char *copy[] = {t1, "the receiver owns a second copy of every weight", NULL};
    const char *share[] = {"about 100 bytes moved: a handle to the allocation",
                           "device, address, size and strides, and a reference count",
                           "the receiver maps the same memory and wraps it in a tensor",
                           "about 1 ms; works only on the same GPU, one handle per shard",
                           NULL};
    box("Copy the weights", copy);
    box("Share a handle", share);

    printf("\n%s\n HOW VERL HANDS WEIGHTS OVER (hybrid engine)\n%s\n\n", rule, rule);
    const char *v1[] = {"training leaves the actor sharded, e.g. over 4 GPUs round-robin", NULL};
    const char *v2[] = {"each layer is gathered whole for inference: a brief memory spike", NULL};
    const char *v3[] = {"per-GPU IPC handles (about 100 bytes each) go to a coordinator", NULL};
    const char *v4[] = {"the engine rebuilds tensors from the handles: pointer assignment",
                        NULL};
    box("1. FSDP shards", v1);
    box("2. all-gather to full layers", v2);
    box("3. IPC handles", v3);
    box("4. load by pointer", v4);
    printf("Gains: no data moves, microseconds, one copy of the memory. Costs: tensor\n"
           "lifetimes to manage, the gather's spike, training and generation must take turns.\n");

    printf("\n%s\n WHAT AN ITERATION PAYS (generation 30 s, training 20 s)\n%s\n", rule, rule);
    timeline("CUDA IPC (co-located):", transfer_ms(&methods[5], gb) / 1000);
    timeline("NCCL over InfiniBand (disaggregated):", transfer_ms(&methods[3], gb) / 1000);
    fflush(stdout);
    if (lab_arg_bool(a, "no-measure"))
        return 0;
    if (lab_arg_int(a, "world-size") < 2) {
        printf("\nMeasuring a transfer needs a receiver: run with --world-size 2 or more.\n");
        return 0;
    }
    /* every rank holds a buffer of --measure-bytes: all of them must fit in what is free */
    uint64_t big = lab_arg_size(a, "measure-bytes");
    long ranks = lab_arg_int(a, "world-size");
    if ((double)big * (double)ranks > (double)mlsys_mem_available()) {
        char want[32], have[32];
        mlsys_format_approx((double)big * (double)ranks, want, sizeof want);
        mlsys_format_approx((double)mlsys_mem_available(), have, sizeof have);
        fprintf(stderr, "mlsys-lab: %s: --measure-bytes %s on %ld ranks needs %s (a buffer "
                "per rank), more than this machine has free: %s\n", LAB_ID,
                lab_arg_str(a, "measure-bytes"), ranks, want, have);
        return 2;
    }
    uint64_t bk[16];
    if (ch14_bucket_list(lab_arg_str(a, "bucket-size"), bk, 16) < 0) {
        fprintf(stderr, "mlsys-lab: %s: --bucket-size %s: want up to 16 sizes of 4 B to 16 GiB "
                "such as 64K,1M,16M\n", LAB_ID, lab_arg_str(a, "bucket-size"));
        return 2;
    }
return -1;       /* the runner has refused a backend that cannot run here */
}

/* Broadcast bytes from rank 0 iters times after one warm-up; the median seconds. The first
 * word carries a stamp each time, checked on the receivers. */
static int timed_bcast(mlsys_comm *c, uint64_t bytes, int iters, double *median,
                       const char **algo)
{
    size_t count = (size_t)(bytes / 4);
    float *buf = mlsys_alloc_aligned(count * 4);
    ch14_wu_mem(c, 1, count * 4, "broadcast buffer");
    double *t = calloc((size_t)iters, sizeof *t);
    int rc = 0;
    for (int i = -1; i < iters && rc == 0; i++) {
        if (mlsys_rank(c) == 0) {
            buf[0] = (float)(i + 2);
            buf[count - 1] = (float)(i + 2);
        }
        if ((rc = mlsys_barrier(c)) != 0)
            break;
        double t0 = mlsys_now_s();
        rc = mlsys_broadcast(c, buf, count, MLSYS_F32, 0);
        *algo = mlsys_last_algo(c);         /* before the barrier names its own */
        if (rc == 0)
            rc = mlsys_barrier(c);          /* done when the last receiver has it */
        double dt = mlsys_now_s() - t0;
        if (rc == 0 && (buf[0] != (float)(i + 2) || buf[count - 1] != (float)(i + 2))) {
            fprintf(stderr, "rank %d: broadcast %d delivered stale data\n", mlsys_rank(c), i);
            rc = 1;
        }
        if (i >= 0)
            t[i] = dt;
    }
    *median = mlsys_percentile(t, (size_t)iters, 50);
    free(t);
    ch14_wu_mem(c, 1, 0, "broadcast buffer");
    mlsys_free_aligned(buf, count * 4);
    return rc;
}

static int wu_rank(mlsys_comm *c, const lab_args *a)
{
    int root = mlsys_rank(c) == 0, n = mlsys_size(c), iters = (int)lab_arg_int(a, "iters");
    int gate = 0;
    /* the job's steps are the sections of the measurement (ch14_wu_section), not the
     * broadcasts' algorithm steps; the flow view draws a trainer and its generators */
    mlsys_set_coll_steps(c, 0);
    ch14_wu_roles(c);
    uint64_t big = lab_arg_size(a, "measure-bytes");
    uint64_t sizes[2] = {4u << 20, big};    /* the lab's own 1M-parameter model is ~4 MB */
    int nsizes = big == sizes[0] ? 1 : 2;
    double gb = lab_arg_double(a, "model-size");
    if (root) {
        char rule[256];
        common_rule(rule, sizeof rule, "=", 72);
        printf("\n%s\n MEASURED HERE: rank 0 broadcasts to %d rank%s (%s backend)\n%s\n\n", rule,
               n - 1, n == 2 ? "" : "s", mlsys_backend_name(c), rule);
        printf("  %10s %12s %10s %14s  %s\n", "size", "median", "GB/s", "algorithm",
               "140 GB at this rate");
    }
    for (int k = 0; k < nsizes; k++) {
        double s;
        const char *algo = "?";
        char label[32], sz[16];
        mlsys_format_size(sizes[k], sz, sizeof sz);
        snprintf(label, sizeof label, "broadcast %s", sz);
        if (ch14_wu_section(c, &gate, label) != 0) {
            fprintf(stderr, "mlsys-lab: %s: rank %d: %s\n", LAB_ID, mlsys_rank(c),
                    mlsys_errmsg(c));
            return 1;
        }
        int rc = timed_bcast(c, sizes[k], iters, &s, &algo);
        if (rc) {
            if (root)
                fprintf(stderr, "mlsys-lab: %s: broadcast of %llu bytes failed: %s\n", LAB_ID,
                        (unsigned long long)sizes[k], mlsys_errmsg(c));
            return 1;
        }
        if (root) {
            char sz[32], tt[32];
            mlsys_format_size(sizes[k], sz, sizeof sz);
            double rate = (double)sizes[k] / 1e9 / s;
            format_time(gb / rate * 1000.0, tt, sizeof tt);
            printf("  %10s %9.3f ms %10.2f %14s  %s\n", sz, s * 1000, rate, algo, tt);
        }
    }
    if (root) {
        char why[256];
        int gpus = probe_gpu_count(why, sizeof why);
        printf("\n  GB/s here is the model's bytes over the time until every rank has them.\n");
        if (gpus <= 0)
            printf("  NCCL and CUDA IPC: not measured, no GPU here (%s).\n", why);
        else
            printf("  %d GPU%s here: --backend nccl measures the NCCL broadcast; CUDA IPC is "
                   "not measured by this lab.\n", gpus, gpus == 1 ? "" : "s");
    }
    return ch14_wsync_measure(c, a, &gate);
}

const lab ch14_weight_update_demo_lab = {
    .id = LAB_ID,
    .title = "Weight update demo",
    .summary = "weight-sync times by method and design, and a real broadcast measured here",
    .flags = wu_flags,
    .port = 29514,
    .min_ranks = 1,
    .max_ranks = 64,
    .before = wu_before,
    .rank_main = wu_rank,
    .view = "flow",
};
