/* simple_ddp.c - ch05/simple-ddp: data-parallel training of a 784 -> 256 -> 10 MLP on a fixed
 * random dataset, first by hand (one all_reduce per tensor after backward), then with our DDP
 * engine (core/train/ddp.c: reverse-order buckets, all-reduces overlapped with backward), and
 * with --zero 1|2|3 with a ZeRO stage (zero.c), whose memory and traffic are printed per rank
 * next to the formulas. Both methods print the same times per step (the median step and the
 * spread of the others), --sweep times the gradient sync for a range of bucket sizes, and
 * every [check] of the curriculum is printed as a PASS/FAIL line. */
#include "../common/common.h"
#include "../../core/train/train.h"
#include <math.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SAMPLES 1000
#define CLASSES 10
#define LR 0.01f

static const lab_flag ddp_flags[] = {
    {"batch-size", 0, FLAG_INT, "32", NULL, 1, 100000, "samples per rank per step"},
    {"epochs", 0, FLAG_INT, "1", NULL, 1, 1000, "epochs per method (each one really runs)"},
    {"world-size", 'w', FLAG_INT, "4", NULL, 1, 64, "number of ranks"},
    {"bucket-size", 0, FLAG_SIZE, "128K", NULL, 0, 1L << 31,
     "DDP bucket size in bytes (the model's 814120 B make 8 buckets)"},
    {"first-bucket", 0, FLAG_SIZE, "8K", NULL, 0, 1L << 31,
     "size of the first bucket (8K: the last layer's gradients, launched before backward ends)"},
    {"zero", 0, FLAG_CHOICE, "0", "0|1|2|3", 0, 0,
     "also train with ZeRO stage 1, 2 or 3 and print memory and traffic per rank"},
    {"optim", 0, FLAG_CHOICE, "sgd", "sgd|adamw", 0, 0,
     "optimizer (AdamW: 8 B of state per parameter)"},
    {"hidden", 0, FLAG_STR, "256", NULL, 0, 0,
     "hidden widths, comma-separated: e.g. 2048,2048 for two layers of 2048"},
    {"max-steps", 0, FLAG_INT, "0", NULL, 0, 1000000,
     "stop each method after this many steps (0: all)"},
    {"no-overlap", 0, FLAG_BOOL, NULL, NULL, 0, 0,
     "DDP: launch every bucket after backward (blocking)"},
    {"sweep", 0, FLAG_BOOL, NULL, NULL, 0, 0,
     "also time the gradient sync alone for buckets of 1 KiB to 1 MiB"},
    {NULL, 0, 0, NULL, NULL, 0, 0, NULL}
};

static int parse_shape(const char *hidden, mlp_shape *s)
{
    memset(s, 0, sizeof *s);
    s->dims[0] = 784;
    int n = 1;
    const char *p = hidden;
    while (p && *p) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 1 || v > 65536 || n >= MLP_MAX_LAYERS)
            return -1;
        s->dims[n++] = (int)v;
        p = *end == ',' ? end + 1 : end;
        if (*end && *end != ',')
            return -1;
    }
    s->dims[n] = CLASSES;
    s->nl = n;
    return 0;
}

static size_t shape_params(const mlp_shape *s)
{
    size_t n = 0;
    for (int l = 0; l < s->nl; l++)
        n += (size_t)s->dims[l + 1] * (size_t)(s->dims[l] + 1);
    return n;
}

/* What the job needs at least, from its flags: on every rank the two models that are alive
 * together (method 1's and the DDP engine's: weights and gradients, 4 bytes each), AdamW's
 * two moments, the activations and their gradients for a batch, and the dataset. Sizes in
 * range can ask for more than any machine has (--hidden 65536,65536 is 4.3 G parameters):
 * refused before the ranks start instead of growing until the machine runs out. */
static double ddp_memory(const mlp_shape *s, long batch, int world, int adamw)
{
    double params = (double)shape_params(s), widths = 0;
    for (int l = 0; l <= s->nl; l++)
        widths += s->dims[l];
    double per_rank = 4.0 * (4 * params + (adamw ? 2 * params : 0) + 2.0 * batch * widths +
                             (double)SAMPLES * 784);
    return per_rank * world;
}

static int ddp_before(const lab_args *a)
{
    mlp_shape s;
    int n = (int)lab_arg_int(a, "world-size");
    if (parse_shape(lab_arg_str(a, "hidden"), &s)) {
        fprintf(stderr, "ch05/simple-ddp: --hidden wants widths like 256 or 2048,2048, got '%s'\n",
                lab_arg_str(a, "hidden"));
        return 2;
    }
    if (lab_arg_size(a, "bucket-size") < 4 || lab_arg_size(a, "first-bucket") < 4) {
        fprintf(stderr, "ch05/simple-ddp: a bucket must hold at least one float (4 B): "
                "--bucket-size %llu, --first-bucket %llu\n",
                (unsigned long long)lab_arg_size(a, "bucket-size"),
                (unsigned long long)lab_arg_size(a, "first-bucket"));
        return 2;
    }
    if (atoi(lab_arg_str(a, "zero")) > 0 && shape_params(&s) < (size_t)n) {
        fprintf(stderr, "ch05/simple-ddp: ZeRO needs at least one parameter per rank: %zu "
                "parameters, %d ranks\n", shape_params(&s), n);
        return 2;
    }
    long b = lab_arg_int(a, "batch-size");
    double need = ddp_memory(&s, b, n, !strcmp(lab_arg_str(a, "optim"), "adamw"));
    if (need > (double)mlsys_mem_available()) {
        char x[32], y[32];
        mlsys_format_approx(need, x, sizeof x);
        mlsys_format_approx((double)mlsys_mem_available(), y, sizeof y);
        fprintf(stderr, "ch05/simple-ddp: %zu parameters on %d ranks need at least %s of memory, "
                "more than this machine has free: %s; use smaller --hidden widths or fewer "
                "ranks\n", shape_params(&s), n, x, y);
        return 2;
    }
    common_box(stdout, COMMON_BOX_WIDTH, "Simple DDP");
    printf("World size: %d\n", n);
    printf("Batch size per rank: %ld\n", b);
    printf("Effective batch size: %ld\n", b * n);
    printf("Epochs: %ld\n\n", lab_arg_int(a, "epochs"));
    fflush(stdout);
    return -1;
}

/* ---- data and the distributed sampler ---- */

typedef struct dataset {
    float *x;           /* [SAMPLES, 784] standard normals, seed 0 */
    int *y;             /* [SAMPLES] uniform in 0..9 */
} dataset;

static void make_data(dataset *d)
{
    mlsys_rng g;
    mlsys_rng_seed(&g, 0);
    d->x = mlsys_xmalloc((size_t)SAMPLES * 784 * sizeof(float));
    d->y = mlsys_xmalloc(SAMPLES * sizeof(int));
    for (size_t i = 0; i < (size_t)SAMPLES * 784; i++)
        d->x[i] = (float)mlsys_rng_normal(&g);
    for (int i = 0; i < SAMPLES; i++)
        d->y[i] = (int)(mlsys_rng_u64(&g) % CLASSES);
}

/* The indices rank r of N takes in an epoch: Fisher-Yates on mlsys_rng seeded 0 + epoch,
 * padded to ceil(1000/N)·N by repeating from the start, then positions r, r+N, ... */
static int sampler(int epoch, int r, int N, int *out)
{
    int perm[SAMPLES];
    mlsys_rng g;
    mlsys_rng_seed(&g, (uint64_t)epoch);
    for (int i = 0; i < SAMPLES; i++)
        perm[i] = i;
    for (int i = SAMPLES - 1; i > 0; i--) {
        int j = (int)(mlsys_rng_u64(&g) % (uint64_t)(i + 1));
        int t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    int per = (SAMPLES + N - 1) / N, k = 0;
    for (int pos = r; pos < per * N; pos += N)
        out[k++] = perm[pos % SAMPLES];
    return k;
}

static void gather_batch(const dataset *d, const int *idx, int B, float *x, int *y)
{
    for (int i = 0; i < B; i++) {
        memcpy(x + (size_t)i * 784, d->x + (size_t)idx[i] * 784, 784 * sizeof(float));
        y[i] = d->y[idx[i]];
    }
}

/* ---- training ---- */

typedef struct trainer {
    mlsys_comm *c;
    const lab_args *a;
    mlp_shape s;
    dataset data;
    int N, r, B, epochs, max_steps, adamw;
    int *idx;           /* [per rank samples] */
    float *x;           /* [B, 784] */
    int *y;
    double ref_err;     /* step-1 gradient against one process, rank 0 */
    int calls_min, calls_max;
    double epoch_s;
    float last_loss;    /* the last epoch's loss, mean over every rank's samples */
    int steps;
    struct step_time *st;   /* [steps] this rank's times of each step of the last method */
    int st_cap;
} trainer;

/* One training step's times in seconds, on this rank's clock. sync: blocked after backward
 * until the gradients are averaged (the manual loop's all-reduces; DDP's wait for the
 * buckets still in flight). A gated step's wait for the viewer is not counted. */
typedef struct step_time {
    double step, fwd, bwd, sync, opt;
    int full;           /* a batch of the full --batch-size */
} step_time;

static int hook_ddp(void *u, int t)
{
    return ddp_grad_ready(u, t);
}

/* Rank 0: the gradient one process computes on the union of the N ranks' first batches,
 * with the current parameters, against g (the synced one): max |diff| / max |ref|. */
static double union_gradient_error(trainer *T, const nn_params *p, int B)
{
    nn_params q;
    nn_params_init(&q);
    mlp_declare(&q, &T->s);
    nn_params_alloc(&q, 1);
    memcpy(q.data, p->data, p->numel * sizeof(float));
    int NB = T->N * B;
    float *x = mlsys_xmalloc((size_t)NB * 784 * sizeof(float));
    int *y = mlsys_xmalloc((size_t)NB * sizeof(int));
    int *idx = mlsys_xmalloc(((size_t)SAMPLES / (size_t)T->N + 2) * sizeof(int));
    for (int q2 = 0; q2 < T->N; q2++) {
        sampler(0, q2, T->N, idx);
        gather_batch(&T->data, idx, B, x + (size_t)q2 * B * 784, y + q2 * B);
    }
    mlp_acts m;
    mlp_acts_init(&m, &T->s, NB);
    mlp_forward_backward(&T->s, &q, &m, x, y, NB, NULL, NULL);
    double md = 0, mr = 0;
    for (size_t i = 0; i < p->numel; i++) {
        md = fmax(md, fabs((double)p->grad[i] - (double)q.grad[i]));
        mr = fmax(mr, fabs((double)q.grad[i]));
    }
    mlp_acts_fini(&m, &T->s);
    free(x);
    free(y);
    free(idx);
    nn_params_fini(&q);
    return mr > 0 ? md / mr : md;
}

/* "mean over the 4 ranks' 1000 samples" (the words after a loss) */
static void loss_scope(int N, double samples, char *out, size_t n)
{
    if (N == 1)
        snprintf(out, n, "mean over the %.0f samples", samples);
    else
        snprintf(out, n, "mean over the %d ranks' %.0f samples", N, samples);
}

typedef struct optim {
    nn_sgd sgd;
    nn_adamw adam;
    int adamw;
} optim;

static void optim_init(optim *o, int adamw, size_t n)
{
    o->adamw = adamw;
    if (adamw)
        nn_adamw_init(&o->adam, LR, 0.9f, 0.999f, 1e-8f, 0.01f, 0, n);
    else
        nn_sgd_init(&o->sgd, LR, 0.0f, 0, n);
}

static void optim_step(optim *o, float *w, const float *g)
{
    if (o->adamw)
        nn_adamw_step(&o->adam, w, g);
    else
        nn_sgd_step(&o->sgd, w, g);
}

static void optim_fini(optim *o)
{
    if (o->adamw)
        nn_adamw_fini(&o->adam);
    else
        nn_sgd_fini(&o->sgd);
}

/* method 0: manual, 1: our DDP engine, 2+k: ZeRO-k (z given). Leaves the model in p. */
static int train(trainer *T, int method, nn_params *p, ddp *d, zero *z, common_text *log,
                 uint64_t *zsent, int *zsent_ok, uint64_t zwant)
{
    mlsys_comm *c = T->c;
    mlp_acts m;
    optim o;
    int rc = 0, per = 0;
    const char *tag = method == 0 ? "manual" : method == 1 ? "ddp" : "zero";
    mlp_acts_init(&m, &T->s, T->B);
    if (!z)
        optim_init(&o, T->adamw, p->numel);
    T->calls_min = 1 << 30;
    T->calls_max = -1;
    T->steps = 0;
    double t0 = mlsys_now_s(), skipped = 0;   /* skipped: gate waits and the step-1 check */
    for (int e = 0; e < T->epochs && !rc; e++) {
        if (T->max_steps && T->steps >= T->max_steps)
            break;                          /* every rank stops at the same step */
        per = sampler(e, T->r, T->N, T->idx);
        double lsum[2] = {0, 0};            /* loss x samples, samples: summed over ranks */
        int nb = 0;
        for (int at = 0; at < per && !rc; at += T->B) {
            if (T->max_steps && T->steps >= T->max_steps)
                break;
            int B = per - at < T->B ? per - at : T->B;
            const mlsys_counters *k = mlsys_get_counters(c);
            uint64_t calls0 = k->coll_calls[MLSYS_COLL_ALLREDUCE], sent0 = k->bytes_sent;
            char lbl[32];
            snprintf(lbl, sizeof lbl, "%s step %d", tag, T->steps + 1);
            double g0 = mlsys_now_s();
            if ((rc = mlsys_step(c, T->steps, lbl)) != 0)
                break;
            if (T->steps == T->st_cap) {
                T->st_cap = T->st_cap ? 2 * T->st_cap : 64;
                T->st = realloc(T->st, (size_t)T->st_cap * sizeof *T->st);
                if (!T->st)
                    abort();
            }
            step_time *st = &T->st[T->steps];
            memset(st, 0, sizeof *st);
            st->full = B == T->B;
            double ts = mlsys_now_s();
            skipped += ts - g0;
            gather_batch(&T->data, T->idx + at, B, T->x, T->y);
            float loss;
            if (z) {
                mlsys_compute_begin(c, "step zero");
                loss = zero_step(z, T->x, T->y, B, &rc);
                mlsys_compute_end(c, "step zero");
                uint64_t sent = mlsys_get_counters(c)->bytes_sent - sent0;
                *zsent = sent;
                if (sent != zwant)
                    *zsent_ok = 0;
            } else {
                nn_params_zero_grad(p);
                if (d)
                    ddp_begin(d);
                double f0 = mlsys_now_s();
                mlsys_compute_begin(c, "F");
                loss = mlp_forward_loss(&T->s, p, &m, T->x, T->y, B);
                mlsys_compute_end(c, "F");
                double b0 = mlsys_now_s();
                mlsys_compute_begin(c, "B");
                mlp_backward(&T->s, p, &m, B, d ? hook_ddp : NULL, d);
                mlsys_compute_end(c, "B");
                double s0 = mlsys_now_s();
                if (d) {
                    rc = ddp_finish(d);
                } else {
                    for (int t = 0; t < p->count && !rc; t++) {
                        rc = mlsys_allreduce(c, p->t[t].grad, p->t[t].grad, p->t[t].numel,
                                             MLSYS_F32, MLSYS_SUM);
                        for (size_t i = 0; i < p->t[t].numel; i++)
                            p->t[t].grad[i] /= (float)T->N;
                    }
                }
                double s1 = mlsys_now_s();
                st->fwd = b0 - f0;
                st->bwd = s0 - b0;
                st->sync = s1 - s0;
                int calls = (int)(mlsys_get_counters(c)->coll_calls[MLSYS_COLL_ALLREDUCE] - calls0);
                if (calls < T->calls_min)
                    T->calls_min = calls;
                if (calls > T->calls_max)
                    T->calls_max = calls;
                if (rc)
                    break;
                if (T->steps == 0 && T->r == 0) {
                    double r0 = mlsys_now_s();      /* the check is not part of the step time */
                    T->ref_err = union_gradient_error(T, p, B);
                    double r1 = mlsys_now_s();
                    skipped += r1 - r0;
                    ts += r1 - r0;
                }
                double o0 = mlsys_now_s();
                mlsys_compute_begin(c, "step");
                optim_step(&o, p->data, p->grad);
                mlsys_compute_end(c, "step");
                st->opt = mlsys_now_s() - o0;
            }
            st->step = mlsys_now_s() - ts;
            lsum[0] += (double)loss * B;
            lsum[1] += B;
            nb++;
            T->steps++;
        }
        /* the epoch's loss over every rank's samples (a rank alone sees only its shard) */
        if (!rc)
            rc = mlsys_allreduce(c, lsum, lsum, 2, MLSYS_F64, MLSYS_SUM);
        T->last_loss = !rc && lsum[1] > 0 ? (float)(lsum[0] / lsum[1]) : 0.0f;
        if (T->r == 0 && !rc) {
            char who[64];
            loss_scope(T->N, lsum[1], who, sizeof who);
            common_text_add(log, "  epoch %d: sampler seed %d, rank 0 first index %d, "
                            "%d batch%s per rank,\n    loss %.4f (%s)\n", e, e, T->idx[0],
                            nb, nb == 1 ? "" : "es", (double)T->last_loss, who);
        }
    }
    T->epoch_s = mlsys_now_s() - t0 - skipped;
    mlp_acts_fini(&m, &T->s);
    if (!z)
        optim_fini(&o);
    return rc;
}

static uint64_t fnv1a(const void *p, size_t n)
{
    const unsigned char *b = p;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) {
        h ^= b[i];
        h *= 1099511628211ull;
    }
    return h;
}

/* 1 when every rank's parameters hash to rank 0's; rank 0 prints the check. */
static int check_identical(mlsys_comm *c, const float *w, size_t n, const char *what, int *bad)
{
    int N = mlsys_size(c);
    int64_t mine = (int64_t)fnv1a(w, n * sizeof(float));
    int64_t *all = mlsys_xcalloc((size_t)N, sizeof *all);
    int rc = mlsys_allgather(c, &mine, all, 1, MLSYS_I64);
    int same = 1;
    for (int q = 1; q < N; q++)
        same &= all[q] == all[0];
    if (!rc) {
        char who[32];
        if (N == 1)
            snprintf(who, sizeof who, "the 1 rank");
        else
            snprintf(who, sizeof who, "all %d ranks", N);
        mlsys_print_root(c, "[check] %s: parameters bitwise identical on %s: %s\n", what, who,
                         same ? "PASS" : "FAIL");
        if (!same)
            (*bad)++;
    }
    free(all);
    return rc;
}

/* The blocks view's picture of DDP (pool DDP_POOL of each rank): a block per bucket, each
 * bucket its own owner; the engine's bucket hook then writes a bucket's mean gradient when
 * its all-reduce is launched (and marks it in flight) and again after the average. */
#define DDP_POOL 0

static void show_buckets(mlsys_comm *c, const ddp *d)
{
    if (!mlsys_tracing(c))
        return;
    mlsys_mem_info m = {.pool = DDP_POOL, .op = MLSYS_MEM_POOL, .block = -1, .owner = -1,
                        .index = 0, .aux = d->nbuckets};
    mlsys_emit_mem(c, &m, d->bucket_elems * sizeof(float), "buckets");
    for (int k = 0; k < d->nbuckets; k++) {
        char name[32];
        snprintf(name, sizeof name, "bucket %d", k);
        m = (mlsys_mem_info){.pool = DDP_POOL, .op = MLSYS_MEM_OWNER, .block = -1, .owner = k,
                             .index = -1};
        mlsys_emit_mem(c, &m, 0, name);
        m = (mlsys_mem_info){.pool = DDP_POOL, .op = MLSYS_MEM_ALLOC, .block = k, .owner = k,
                             .refs = 1, .index = -1};   /* one block each: no table to show */
        mlsys_emit_mem(c, &m, d->b[k].n * sizeof(float), NULL);
    }
}

static void emit_bucket(void *arg, const ddp *d, int k)
{
    mlsys_comm *c = arg;
    if (!mlsys_tracing(c))
        return;
    const float *g = d->p->grad + d->b[k].off;
    double s = 0;
    for (size_t i = 0; i < d->b[k].n; i++)
        s += g[i];
    mlsys_mem_info m = {.pool = DDP_POOL, .op = MLSYS_MEM_WRITE, .block = k, .owner = k,
                        .index = -1};
    mlsys_emit_mem_value(c, &m, d->b[k].n * sizeof(float), NULL, s / (double)d->b[k].n);
    if (d->b[k].launched) {             /* at launch: in flight until the average */
        m.op = MLSYS_MEM_BUSY;
        mlsys_emit_mem(c, &m, d->b[k].n * sizeof(float), NULL);
    }
}

static void print_buckets(mlsys_comm *c, const ddp *d, const nn_params *p)
{
    char sz[32];
    for (int k = 0; k < d->nbuckets && k < 12; k++) {
        char names[128] = "";
        size_t used = 0;
        for (int t = d->b[k].t_hi; t >= d->b[k].t_lo; t--)
            used += (size_t)snprintf(names + used, used < sizeof names ? sizeof names - used : 0,
                                     "%s%s", t == d->b[k].t_hi ? "" : ",", p->t[t].name);
        mlsys_format_size((uint64_t)d->b[k].n * 4, sz, sizeof sz);
        mlsys_print_root(c, "  bucket %d: floats [%zu, %zu) = %s, tensors %s\n", k,
                         d->b[k].off, d->b[k].off + d->b[k].n, sz, names);
    }
    if (d->nbuckets > 12)
        mlsys_print_root(c, "  ... %d buckets in all\n", d->nbuckets);
}

static int run_zero(trainer *T, int stage, const float *ddp_final, size_t numel, int *bad,
                    common_text *log)
{
    mlsys_comm *c = T->c;
    int rc;
    nn_params p;
    nn_params_init(&p);
    mlp_declare(&p, &T->s);
    nn_params_alloc(&p, 0);
    mlp_init(&p, &T->s, 42);
    zero_optim zo = { T->adamw, LR };
    zero *z = NULL;
    if ((rc = zero_create(&z, c, stage, &T->s, &p, zo, T->B)) != 0) {
        nn_params_fini(&p);
        return rc;
    }
    nn_params_fini(&p);
    int N = T->N, K = T->adamw ? 8 : 0;
    zero_mem want;
    zero_formula_mem(stage, z->P, N, K, z->max_tensor, z->max_layer, &want);
    uint64_t swant = zero_formula_sent(stage, z->P, N), sent = 0;
    int sent_ok = 1;
    /* the blocks view: this rank's parameters, gradients and optimizer state, a block per
     * piece of every tensor, the pieces this stage keeps held; the buckets of DDP go */
    mlsys_mem_info gone = {.pool = DDP_POOL, .op = MLSYS_MEM_POOL, .block = -1, .owner = -1,
                           .index = 0, .aux = 0};
    mlsys_emit_mem(c, &gone, 0, "buckets");
    mlsys_step(c, 0, "ZeRO pieces");
    zero_show(z);
    rc = train(T, 2 + stage, NULL, NULL, z, log, &sent, &sent_ok, swant);
    float *mine = mlsys_xmalloc(numel * sizeof(float));
    if (!rc)
        rc = zero_full_params(z, mine);
    double md = 0, mr = 0;
    for (size_t i = 0; i < numel; i++) {
        md = fmax(md, fabs((double)mine[i] - (double)ddp_final[i]));
        mr = fmax(mr, fabs((double)ddp_final[i]));
    }
    double rel = mr > 0 ? md / mr : md;
    if (!rc)
        rc = mlsys_allreduce(c, &rel, &rel, 1, MLSYS_F64, MLSYS_MAX);
    free(mine);
    if (rc) {
        zero_free(z);
        return rc;
    }
    char rule[128];
    common_rule(rule, sizeof rule, "=", 60);
    mlsys_print_root(c, "\n%s\nZeRO-%d on %d rank%s (%s)\n%s\n", rule, stage, N, N == 1 ? "" : "s",
                     T->adamw ? "AdamW: K = 8 B of optimizer state per parameter"
                              : "SGD: K = 0, plain SGD keeps no state", rule);
    mlsys_print_root(c, "%s", common_text_str(log));
    mlsys_print_root(c, "ZeRO-%d - Average loss: %.4f (last epoch, all ranks)\n", stage,
                     (double)T->last_loss);
    size_t psi = 0;
    for (int t = 0; t < z->nt; t++)
        psi += z->numel[t];
    mlsys_print_root(c, "Ψ = %zu parameters, fp32 (4 B each); every tensor padded to a "
                     "multiple of N:\nΨ' = %zu\n", psi, z->P);
    mlsys_print_root(c, "Each rank owns 1/N of every tensor (Ψ'/N = %zu values).\n", z->S);
    static const char *const pf[] = {"", "4Ψ'", "4Ψ'", "4Ψ'/N"};
    static const char *const gf[] = {"", "4Ψ'", "4Ψ'/N", "4Ψ'/N"};
    static const char *const tf[] = {"", "0", "4·max layer", "8·max layer"};
    static const char *const sf[] = {"",
        "all_reduce 2(N-1)/N·4Ψ' + all_gather (N-1)/N·4Ψ'",
        "reduce_scatter (N-1)/N·4Ψ' + all_gather (N-1)/N·4Ψ'",
        "all_gather (N-1)/N·4Ψ' twice + reduce_scatter (N-1)/N·4Ψ'"};
    int mem_ok = z->mem.params == want.params && z->mem.grads == want.grads &&
                 z->mem.optim == want.optim && z->mem.temp_peak == want.temp_peak;
    rc = mlsys_print_ordered(c,
        "Rank %d: params %zu B (%s = %zu), grads %zu B (%s = %zu),\n"
        "        optimizer %zu B (KΨ'/N = %zu),\n        temp peak %zu B (%s = %zu)\n"
        "Rank %d: sent per step %llu B\n        (%s = %llu)\n",
        T->r, z->mem.params, pf[stage], want.params, z->mem.grads, gf[stage], want.grads,
        z->mem.optim, want.optim, z->mem.temp_peak, tf[stage], want.temp_peak,
        T->r, (unsigned long long)sent, sf[stage], (unsigned long long)swant);
    int ok[2] = { mem_ok, sent_ok };
    if (!rc)
        rc = mlsys_allreduce(c, ok, ok, 2, MLSYS_I32, MLSYS_MIN);
    if (!rc) {
        mlsys_print_root(c, "DDP for comparison: params 4Ψ = %zu B, grads 4Ψ = %zu B,\n"
                         "optimizer KΨ = %zu B on every rank; sends 2(N-1)/N·4Ψ.\n",
                         4 * psi, 4 * psi, (size_t)K * psi);
        if (stage == 1)
            mlsys_print_root(c, "This ZeRO-1 sends what stage 1 is often described as: an "
                             "all_reduce of the\ngradients, then an all_gather of the updated "
                             "parameters (3 units, 1.5x DDP).\nA reduce_scatter in place of "
                             "the all_reduce would send 2 units, as ZeRO-2 does\nand the ZeRO "
                             "paper's stage 1 does; the optimizer state never travels.\n");
        /* AdamW divides by sqrt(v): where a gradient is rounding noise, the order of the
         * sums (ring reduce_scatter against DDP's all-reduce) can flip its sign, and the
         * update by lr with it. The 1e-6 bound holds for SGD; AdamW gets 1e-3. */
        double tol = T->adamw ? 1e-3 : 1e-6;
        mlsys_print_root(c, "[check] ZeRO-%d final parameters = DDP's: rel diff %.1e < %g: %s\n",
                         stage, rel, tol, rel < tol ? "PASS" : "FAIL");
        if (T->adamw)
            mlsys_print_root(c, "  (AdamW turns summation-order noise in near-zero gradients "
                             "into steps of lr:\n  bound 1e-3; with SGD the bound is 1e-6)\n");
        mlsys_print_root(c, "[check] bytes allocated = formulas on every rank: %s\n",
                         ok[0] ? "PASS" : "FAIL");
        mlsys_print_root(c, "[check] bytes sent per step = formula on every rank, every step: "
                         "%s\n", ok[1] ? "PASS" : "FAIL");
        *bad += (rel >= tol) + !ok[0] + !ok[1];
    }
    zero_free(z);
    return rc;
}

/* ---- times ---- */

/* What one method's steps took: the median step by step time (its own parts, so they add
 * up to no more than its step time), the spread of the other timed steps, and the
 * communication alone (with nothing to hide behind). Rank 0's clock. */
typedef struct method_times {
    step_time med;
    double lo, hi;          /* fastest and slowest timed step */
    int n;                  /* timed steps */
    int every;              /* 1: too few steps, every one is timed (the first included) */
    double alone;           /* the method's communication alone, median */
    int calls;              /* all-reduces per step */
} method_times;

/* The timed steps: full batches after the first (a warm-up), or every step when there are
 * no such; the median of them by step time (the lower one of an even count). */
static void summarise(const trainer *T, int calls, method_times *mt)
{
    memset(mt, 0, sizeof *mt);
    mt->calls = calls;
    int *idx = mlsys_xmalloc((size_t)(T->steps ? T->steps : 1) * sizeof *idx), n = 0;
    for (int i = 1; i < T->steps; i++)
        if (T->st[i].full)
            idx[n++] = i;
    if (n == 0) {
        mt->every = 1;
        for (int i = 0; i < T->steps; i++)
            idx[n++] = i;
    }
    for (int i = 1; i < n; i++)             /* insertion sort by step time */
        for (int j = i; j > 0 && T->st[idx[j]].step < T->st[idx[j - 1]].step; j--) {
            int t = idx[j];
            idx[j] = idx[j - 1];
            idx[j - 1] = t;
        }
    mt->n = n;
    if (n) {
        mt->med = T->st[idx[(n - 1) / 2]];
        mt->lo = T->st[idx[0]].step;
        mt->hi = T->st[idx[n - 1]].step;
    }
    mt->alone = mt->med.sync;
    free(idx);
}

#define ALONE_REPEATS 5

/* The sync of d's buckets alone: every bucket launched after backward (nothing to hide
 * behind), each repeat started together by a barrier, one warm-up first; the median of
 * ALONE_REPEATS on this rank's clock into *med. The gradients are averaged again each
 * time, which leaves them as they were up to rounding; nothing is drawn. */
static int sync_alone(mlsys_comm *c, ddp *d, double *med)
{
    void (*cb)(void *, const ddp *, int) = d->on_bucket;
    int overlap = d->overlap, rc = 0;
    double t[ALONE_REPEATS];
    d->on_bucket = NULL;
    d->overlap = 0;
    for (int i = -1; i < ALONE_REPEATS && !rc; i++) {
        if ((rc = mlsys_barrier(c)) != 0)
            break;
        double t0 = mlsys_now_s();
        ddp_begin(d);
        rc = ddp_finish(d);
        if (i >= 0)
            t[i] = mlsys_now_s() - t0;
    }
    d->on_bucket = cb;
    d->overlap = overlap;
    ddp_begin(d);
    if (!rc) {
        *med = mlsys_percentile(t, ALONE_REPEATS, 50);
    }
    return rc;
}

/* The machine's cores online (a rank itself may be pinned to one of them). */
static int cores_here(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

/* ms rounded to the microsecond, as printed: the figures a learner copies add up */
static double ms3(double s)
{
    return round(s * 1e6) / 1e3;
}

static void print_times(mlsys_comm *c, int N, const method_times *man, const method_times *dd,
                        int overlap)
{
    const method_times *m[2] = {man, dd};
    static const char *const name[2] = {"manual", "DDP"};
    if (man->every)
        mlsys_print_root(c, "\nTimes per step in ms (rank 0), the median step of all %d: too "
                         "few steps to leave\nthe first (a warm-up) out.\n", man->n);
    else
        mlsys_print_root(c, "\nTimes per step in ms (rank 0), the median step of %d: the first "
                         "(a warm-up)\nand a short last batch are left out.\n", man->n);
    mlsys_print_root(c, "  %-6s %7s %8s %9s %9s %8s %10s %7s\n", "method", "step", "forward",
                     "backward", "optimizer", "in sync", "comm alone", "hidden");
    for (int i = 0; i < 2; i++) {
        double hidden = m[i]->alone - m[i]->med.sync;
        if (i == 0 || hidden < 0)
            hidden = 0;                 /* the manual loop has nothing to hide behind */
        mlsys_print_root(c, "  %-6s %7.3f %8.3f %9.3f %9.3f %8.3f %10.3f %7.3f\n", name[i],
                         ms3(m[i]->med.step), ms3(m[i]->med.fwd), ms3(m[i]->med.bwd),
                         ms3(m[i]->med.opt), ms3(m[i]->med.sync), ms3(m[i]->alone),
                         ms3(hidden));
    }
    if (man->n > 1)
        mlsys_print_root(c, "  noise: those %d steps took %.3f to %.3f (manual), %.3f to %.3f "
                         "(DDP)\n", man->n, ms3(man->lo), ms3(man->hi), ms3(dd->lo),
                         ms3(dd->hi));
    else
        mlsys_print_root(c, "  noise: one step, nothing to compare it with (run more steps: "
                         "--epochs 2)\n");
    mlsys_print_root(c, "  in sync: blocked after backward until the gradients are averaged "
                     "(waiting for\n  slower ranks included).\n"
                     "  comm alone: the same all-reduces with nothing to hide behind (manual:\n"
                     "  its own; DDP: its %d bucket%s launched after backward, median of %d "
                     "repeats).\n  hidden = comm alone - in sync: what ran while backward "
                     "computed%s.\n", dd->calls, dd->calls == 1 ? "" : "s", ALONE_REPEATS,
                     overlap ? "" : " (--no-overlap: nothing)");
    int cores = cores_here();
    if (cores >= 2 * N)
        mlsys_print_root(c, "Machine: %d cores for %d rank%s and %s progress thread%s: a core "
                         "each, so the\n  all-reduces can run beside backward.\n", cores, N,
                         N == 1 ? "" : "s", N == 1 ? "its" : "their", N == 1 ? "" : "s");
    else
        mlsys_print_root(c, "Machine: %d core%s for %d rank%s and %s %d progress thread%s: they "
                         "take turns on\n  the cores, so little communication can hide behind "
                         "backward here.\n", cores, cores == 1 ? "" : "s", N, N == 1 ? "" : "s",
                         N == 1 ? "its" : "their", N, N == 1 ? "" : "s");
    const step_time *t = &man->med;
    double f = ms3(t->fwd), b = ms3(t->bwd), k = ms3(t->sync), st = ms3(t->step);
    mlsys_print_root(c, "Manual step breakdown (the median step, nothing overlapped):\n"
                     "  t_fwd %.3f ms, t_bwd_compute %.3f ms, t_comm %.3f ms, t_step %.3f ms\n"
                     "  ratio t_comm / (t_fwd + t_bwd_compute) = %.4g\n", f, b, k, st,
                     f + b > 0 ? k / (f + b) : 0.0);
}

/* --sweep: the sync alone of this model's gradients with buckets of 1 KiB to 1 MiB (the
 * first bucket the same size), so the per-call cost shows. */
static int bucket_sweep(mlsys_comm *c, nn_params *p)
{
    static const size_t kib[] = {1, 4, 16, 64, 256, 1024};
    mlsys_print_root(c, "\nBucket-size sweep: averaging this model's %zu B of gradients "
                     "alone, every bucket\nlaunched after backward; median of %d repeats after "
                     "a warm-up, each started\ntogether by a barrier (rank 0's clock).\n",
                     p->numel * 4, ALONE_REPEATS);
    mlsys_print_root(c, "  %8s %12s %10s %16s\n", "bucket", "all-reduces", "sync ms",
                     "per all-reduce");
    for (size_t i = 0; i < sizeof kib / sizeof kib[0]; i++) {
        ddp *d = NULL;
        double med = 0;
        int rc = ddp_create(&d, c, p, kib[i] * 1024, kib[i] * 1024);
        if (!rc)
            rc = sync_alone(c, d, &med);
        int nb = d ? d->nbuckets : 0;
        ddp_free(d);
        if (rc)
            return rc;
        char sz[32];
        mlsys_format_size((uint64_t)kib[i] * 1024, sz, sizeof sz);
        mlsys_print_root(c, "  %8s %12d %10.3f %13.1f us\n", sz, nb, ms3(med),
                         med * 1e6 / nb);
    }
    mlsys_print_root(c, "Every all-reduce pays a fixed cost (its launch, a handshake per ring "
                     "step) on top\nof its bytes: fewer, larger buckets pay it fewer times. "
                     "Past a few hundred KiB the\nbytes dominate, and a larger bucket only "
                     "starts its all-reduce later in backward.\n");
    return 0;
}

static int ddp_rank(mlsys_comm *c, const lab_args *a)
{
    trainer T;
    memset(&T, 0, sizeof T);
    T.c = c;
    T.a = a;
    T.N = mlsys_size(c);
    T.r = mlsys_rank(c);
    T.B = (int)lab_arg_int(a, "batch-size");
    T.epochs = (int)lab_arg_int(a, "epochs");
    T.max_steps = (int)lab_arg_int(a, "max-steps");
    T.adamw = !strcmp(lab_arg_str(a, "optim"), "adamw");
    int stage = atoi(lab_arg_str(a, "zero"));
    parse_shape(lab_arg_str(a, "hidden"), &T.s);
    make_data(&T.data);
    T.idx = mlsys_xmalloc(((size_t)SAMPLES / (size_t)T.N + 2) * sizeof(int));
    T.x = mlsys_xmalloc((size_t)T.B * 784 * sizeof(float));
    T.y = mlsys_xmalloc((size_t)T.B * sizeof(int));
    int rc = 0, bad = 0;
    char rule[128];
    common_rule(rule, sizeof rule, "=", 60);
    common_text log1 = {0}, log2 = {0}, log3 = {0};
    nn_params p1, p2;
    nn_params_init(&p1);
    nn_params_init(&p2);
    ddp *d = NULL;

    /* ---- method 1: by hand ---- */
    mlsys_print_root(c, "%s\nMethod 1: manual gradient synchronisation\n%s\n", rule, rule);
    mlp_declare(&p1, &T.s);
    nn_params_alloc(&p1, 1);
    mlp_init(&p1, &T.s, 42);
    for (int t = 0; t < p1.count && !rc; t++)
        rc = mlsys_broadcast(c, p1.t[t].data, p1.t[t].numel, MLSYS_F32, 0);
    if (!rc)
        rc = mlsys_barrier(c);
    if (!rc)
        rc = train(&T, 0, &p1, NULL, NULL, &log1, NULL, NULL, 0);
    if (rc)
        goto err;
    float loss1 = T.last_loss;
    int calls1[2] = { T.calls_min, T.calls_max };
    double ref1 = T.ref_err;
    method_times mt1, mt2;
    summarise(&T, T.calls_max, &mt1);
    mlsys_print_root(c, "%s", common_text_str(&log1));
    mlsys_print_root(c, "Manual - Average loss: %.4f (last epoch, all ranks)\n", (double)loss1);
    mlsys_print_root(c, "Manual - %d step%s in %.2f ms\n", T.steps, T.steps == 1 ? "" : "s",
                     T.epoch_s * 1e3);

    /* ---- method 2: our DDP engine ---- */
    mlsys_print_root(c, "\n%s\nMethod 2: our DDP engine (buckets, overlap)\n%s\n", rule, rule);
    mlp_declare(&p2, &T.s);
    nn_params_alloc(&p2, 1);
    mlp_init(&p2, &T.s, 42);
    if ((rc = ddp_create(&d, c, &p2, lab_arg_size(a, "bucket-size"),
                         lab_arg_size(a, "first-bucket"))) != 0)
        goto err;
    d->overlap = !lab_arg_bool(a, "no-overlap");
    d->on_bucket = emit_bucket;
    d->on_bucket_arg = c;
    show_buckets(c, d);                 /* the buckets in the blocks view */
    if ((rc = ddp_broadcast_params(d)) != 0)
        goto err;
    size_t gb = p2.numel * 4;
    mlsys_print_root(c, "Gradients: %zu B in %d tensors; buckets of %zu B in reverse order,\n"
                     "the first %zu B; %s\n", gb, p2.count, d->bucket_elems * 4,
                     d->first_elems * 4,
                     d->overlap ? "each all-reduced as soon as backward has written it"
                                : "all launched after backward (--no-overlap)");
    if (gb <= d->first_elems * 4)
        mlsys_print_root(c, "Buckets: 1 (all %zu B fit in the first bucket)\n", gb);
    else
        mlsys_print_root(c, "Buckets: %d = 1 + ⌈(%zu - %zu) / %zu⌉\n", d->nbuckets, gb,
                         d->first_elems * 4, d->bucket_elems * 4);
    print_buckets(c, d, &p2);
    rc = train(&T, 1, &p2, d, NULL, &log2, NULL, NULL, 0);
    if (rc)
        goto err;
    float loss2 = T.last_loss;
    int calls2[2] = { T.calls_min, T.calls_max };
    double ref2 = T.ref_err;
    summarise(&T, T.calls_max, &mt2);
    mlsys_print_root(c, "%s", common_text_str(&log2));
    mlsys_print_root(c, "DDP - Average loss: %.4f (last epoch, all ranks)\n", (double)loss2);
    mlsys_print_root(c, "DDP - %d step%s in %.2f ms\n", T.steps, T.steps == 1 ? "" : "s",
                     T.epoch_s * 1e3);
    if ((rc = sync_alone(c, d, &mt2.alone)) != 0)
        goto err;
    print_times(c, T.N, &mt1, &mt2, d->overlap);

    mlsys_print_root(c, "\nWhat the engine adds over the manual loop:\n"
                     "  1. buckets: %d all-reduce%s per step instead of one per tensor (%d)\n"
                     "  2. each bucket's all-reduce runs while backward computes the rest\n"
                     "  3. the buckets are views of one flat gradient buffer, reused every step\n"
                     "  4. one broadcast of rank 0's parameters at start-up\n\n",
                     d->nbuckets, d->nbuckets == 1 ? "" : "s", p2.count);
    mlsys_print_root(c, "[check] all-reduces per step, manual: %d (= %d tensors): %s\n",
                     calls1[1], p1.count,
                     calls1[0] == p1.count && calls1[1] == p1.count ? "PASS" : "FAIL");
    bad += !(calls1[0] == p1.count && calls1[1] == p1.count);
    int nbk = d->nbuckets;
    mlsys_print_root(c, "[check] all-reduces per step, bucketed: %d (= %d bucket%s): %s\n",
                     calls2[1], nbk, nbk == 1 ? "" : "s",
                     calls2[0] == nbk && calls2[1] == nbk ? "PASS" : "FAIL");
    bad += !(calls2[0] == nbk && calls2[1] == nbk);
    double dl = fabs((double)loss1 - (double)loss2);
    mlsys_print_root(c, "[check] |loss_manual - loss_bucketed| = %.2e < 1e-4: %s\n", dl,
                     dl < 1e-4 ? "PASS" : "FAIL");
    bad += !(dl < 1e-4);
    if (T.r == 0) {
        if (T.N == 1)
            mlsys_print_root(c, "(one process's: the step-1 gradient computed alone on the same "
                             "batch;\n max |diff| / max |gradient|)\n");
        else
            mlsys_print_root(c, "(one process's: the step-1 gradient one process computes on "
                             "the %d ranks'\n first batches together; max |diff| / max "
                             "|gradient|)\n", T.N);
        mlsys_print_root(c, "[check] manual gradient of step 1 = one process's: %.1e < 1e-5: "
                         "%s\n", ref1, ref1 < 1e-5 ? "PASS" : "FAIL");
        mlsys_print_root(c, "[check] bucketed gradient of step 1 = one process's: %.1e < 1e-5: "
                         "%s\n", ref2, ref2 < 1e-5 ? "PASS" : "FAIL");
        bad += !(ref1 < 1e-5) + !(ref2 < 1e-5);
    }
    if ((rc = check_identical(c, p1.data, p1.numel, "manual", &bad)) != 0 ||
        (rc = check_identical(c, p2.data, p2.numel, "bucketed", &bad)) != 0)
        goto err;
    if (lab_arg_bool(a, "sweep") && (rc = bucket_sweep(c, &p2)) != 0)
        goto err;
    if (stage > 0 && (rc = run_zero(&T, stage, p2.data, p2.numel, &bad, &log3)) != 0)
        goto err;
    rc = mlsys_allreduce(c, &bad, &bad, 1, MLSYS_I32, MLSYS_MAX);
    if (rc)
        goto err;
    mlsys_print_root(c, "\n%s\n", bad ? "Some checks FAILED" : "All checks passed");
    rc = bad ? 1 : 0;
    goto out;
err:
    fprintf(stderr, "rank %d: %s\n", T.r, mlsys_errmsg(c));
    rc = 1;
out:
    ddp_free(d);
    nn_params_fini(&p1);
    nn_params_fini(&p2);
    common_text_free(&log1);
    common_text_free(&log2);
    common_text_free(&log3);
    free(T.data.x);
    free(T.data.y);
    free(T.idx);
    free(T.x);
    free(T.y);
    free(T.st);
    return rc;
}

const lab ch05_simple_ddp_lab = {
    .id = "ch05/simple-ddp",
    .title = "Simple DDP",
    .summary = "manual gradient sync against our DDP engine (buckets, overlap); --zero 1|2|3",
    .flags = ddp_flags,
    .port = 29506,
    .min_ranks = 1,
    .max_ranks = 64,
    .before = ddp_before,
    .rank_main = ddp_rank,
    .view = "timeline",
};
