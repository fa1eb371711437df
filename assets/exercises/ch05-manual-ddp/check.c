/* check.c - ch05-manual-ddp, rank side (see ../harness.h). Each rank trains the same small
 * MLP on its shard of every step's batch with the learner's broadcast and gradient sync, and
 * alongside it, alone, a reference copy on the whole batch: one process's training. Ranks
 * other than 0 start from perturbed weights, so a missing broadcast cannot go unnoticed. */
#include "harness.h"
#include "api.h"

#define IN 16
#define HID 32
#define CLS 4
#define PER_RANK 6          /* samples per rank per step */
#define STEPS 5
#define LR 0.1f

static void build(nn_params *p)
{
    nn_params_init(p);
    nn_params_add2(p, "w1", HID, IN);
    nn_params_add1(p, "b1", HID);
    nn_params_add2(p, "w2", CLS, HID);
    nn_params_add1(p, "b2", CLS);
    if (nn_params_alloc(p, 1) != 0)
        abort();
}

static void init_weights(nn_params *p, uint64_t seed)
{
    mlsys_rng g;
    mlsys_rng_seed(&g, seed * 31u + 7u);
    nn_init_linear(p->t[0].data, p->t[0].numel, IN, &g);
    nn_init_linear(p->t[1].data, p->t[1].numel, IN, &g);
    nn_init_linear(p->t[2].data, p->t[2].numel, HID, &g);
    nn_init_linear(p->t[3].data, p->t[3].numel, HID, &g);
}

/* The batch of one step, all ranks' samples: x[rows, IN], y[rows]. */
static void make_batch(uint64_t seed, int step, int rows, float *x, int *y)
{
    mlsys_rng g;
    mlsys_rng_seed(&g, seed * 1000003u + (uint64_t)step * 7919u + 11u);
    for (int i = 0; i < rows * IN; i++)
        x[i] = (float)mlsys_rng_normal(&g);
    for (int i = 0; i < rows; i++)
        y[i] = (int)(mlsys_rng_u64(&g) % CLS);
}

/* Zero the gradients, then forward and backward of the mean cross-entropy over B rows. */
static void grads(nn_params *p, const float *x, const int *y, int B)
{
    const float *w1 = p->t[0].data, *b1 = p->t[1].data, *w2 = p->t[2].data, *b2 = p->t[3].data;
    float *dw1 = p->t[0].grad, *db1 = p->t[1].grad, *dw2 = p->t[2].grad, *db2 = p->t[3].grad;
    float *pre = malloc(sizeof(float) * (size_t)B * HID), *hid = malloc(sizeof(float) * (size_t)B * HID);
    float *lg = malloc(sizeof(float) * (size_t)B * CLS), *dh = malloc(sizeof(float) * (size_t)B * HID);
    if (!pre || !hid || !lg || !dh)
        abort();
    nn_params_zero_grad(p);
    for (int r = 0; r < B; r++)
        for (int j = 0; j < HID; j++) {
            float s = b1[j];
            for (int k = 0; k < IN; k++)
                s += x[r * IN + k] * w1[j * IN + k];
            pre[r * HID + j] = s;
        }
    nn_relu_forward(hid, pre, (size_t)B * HID);
    for (int r = 0; r < B; r++)
        for (int j = 0; j < CLS; j++) {
            float s = b2[j];
            for (int k = 0; k < HID; k++)
                s += hid[r * HID + k] * w2[j * HID + k];
            lg[r * CLS + j] = s;
        }
    nn_softmax_ce(lg, lg, y, B, CLS, 1.0f);        /* lg becomes dlogits */
    for (int r = 0; r < B; r++)
        for (int j = 0; j < CLS; j++) {
            db2[j] += lg[r * CLS + j];
            for (int k = 0; k < HID; k++)
                dw2[j * HID + k] += lg[r * CLS + j] * hid[r * HID + k];
        }
    for (int r = 0; r < B; r++)
        for (int k = 0; k < HID; k++) {
            float s = 0.0f;
            for (int j = 0; j < CLS; j++)
                s += lg[r * CLS + j] * w2[j * HID + k];
            dh[r * HID + k] = s;
        }
    nn_relu_backward(dh, dh, pre, (size_t)B * HID);
    for (int r = 0; r < B; r++)
        for (int j = 0; j < HID; j++) {
            db1[j] += dh[r * HID + j];
            for (int k = 0; k < IN; k++)
                dw1[j * IN + k] += dh[r * HID + j] * x[r * IN + k];
        }
    free(pre);
    free(hid);
    free(lg);
    free(dh);
}

static void sgd(nn_params *p)
{
    for (size_t i = 0; i < p->numel; i++)
        p->data[i] -= LR * p->grad[i];
}

/* First element where got differs from want beyond the tolerance: 1 and its place, or 0. */
static int first_diff(const nn_params *want, const float *w, const float *g, double abs_tol,
                      double rel_tol, int *tensor, size_t *elem)
{
    for (int t = 0; t < want->count; t++)
        for (size_t k = 0; k < want->t[t].numel; k++) {
            size_t i = want->t[t].offset + k;
            if (!h_close(w[i], g[i], abs_tol, rel_tol)) {
                *tensor = t;
                *elem = k;
                return 1;
            }
        }
    return 0;
}

static void run_cases(harness *h)
{
    int n = h->size, rows = n * PER_RANK;
    h_case(h, "N=%d, the initial broadcast", n);
    nn_params p, ref;
    build(&p);
    build(&ref);
    init_weights(&p, h->seed);
    init_weights(&ref, h->seed);
    if (h->rank != 0) {             /* a different start: only the broadcast fixes it */
        mlsys_rng g;
        mlsys_rng_seed(&g, h->seed * 17u + (uint64_t)h->rank);
        for (size_t i = 0; i < p.numel; i++)
            p.data[i] += 0.05f * (float)mlsys_rng_normal(&g);
    }
    float *x = malloc(sizeof(float) * (size_t)rows * IN);
    int *y = malloc(sizeof(int) * (size_t)rows);
    if (!x || !y)
        abort();
    char a[48], b[48];
    int t;
    size_t e;

    int rc = dp_broadcast_params(h->c, &p);
    h_returned(h, rc, "dp_broadcast_params");
    if (first_diff(&ref, ref.data, p.data, 0.0, 0.0, &t, &e)) {
        h_fail(h, "after dp_broadcast_params, rank %d: %s element %zu is %s, rank 0's is %s "
               "(this rank started from other weights: did it receive rank 0's?)", h->rank,
               ref.t[t].name, e, h_num(a, sizeof a, p.t[t].data[e]),
               h_num(b, sizeof b, ref.t[t].data[e]));
    }
    if (!h_case_end(h))
        goto out;
    h_case(h, "N=%d, %d steps of %d samples per rank", n, STEPS, PER_RANK);
    for (int step = 1; step <= STEPS; step++) {
        make_batch(h->seed, step, rows, x, y);
        grads(&p, x + (size_t)h->rank * PER_RANK * IN, y + h->rank * PER_RANK, PER_RANK);
        grads(&ref, x, y, rows);
        rc = dp_sync_grads(h->c, &p);
        h_returned(h, rc, "dp_sync_grads");
        if (first_diff(&ref, ref.grad, p.grad, 1e-6, 1e-4, &t, &e)) {
            double want = ref.t[t].grad[e], got = p.t[t].grad[e];
            const char *why = "";
            if (n > 1 && fabs(got - n * want) <= 1e-4 * fabs(n * want) + 1e-6)
                why = ": that is N times the mean, so the division by N is missing";
            h_fail(h, "step %d, rank %d: the gradient of %s, element %zu, is %s after "
                   "dp_sync_grads; one process on the whole batch gets %s%s", step, h->rank,
                   ref.t[t].name, e, h_num(a, sizeof a, got), h_num(b, sizeof b, want), why);
        }
        /* the ranks agree whether to go on, so that none calls the learner's code alone */
        int any = h->failed;
        if (mlsys_allreduce(h->c, &any, &any, 1, MLSYS_I32, MLSYS_MAX) != MLSYS_OK)
            h_sync_failed(h);
        if (any)
            break;
        sgd(&p);
        sgd(&ref);
    }
    if (!h->failed && first_diff(&ref, ref.data, p.data, 1e-5, 1e-5, &t, &e))
        h_fail(h, "after %d steps, rank %d: %s element %zu is %s, one process on the whole "
               "batches gets %s", STEPS, h->rank, ref.t[t].name, e,
               h_num(a, sizeof a, p.t[t].data[e]), h_num(b, sizeof b, ref.t[t].data[e]));
    /* bitwise identical on every rank: the elementwise MIN and MAX over ranks agree */
    float *lo = malloc(sizeof(float) * p.numel), *hi = malloc(sizeof(float) * p.numel);
    if (!lo || !hi)
        abort();
    if (mlsys_allreduce(h->c, p.data, lo, p.numel, MLSYS_F32, MLSYS_MIN) != MLSYS_OK ||
        mlsys_allreduce(h->c, p.data, hi, p.numel, MLSYS_F32, MLSYS_MAX) != MLSYS_OK)
        h_sync_failed(h);
    for (size_t i = 0; i < p.numel && !h->failed; i++)
        if (memcmp(&lo[i], &hi[i], sizeof(float)) != 0) {
            h_fail(h, "after %d steps the ranks' parameters differ at flat element %zu (from "
                   "%s to %s): replicas must stay identical", STEPS, i,
                   h_num(a, sizeof a, lo[i]), h_num(b, sizeof b, hi[i]));
            break;
        }
    if (!h->failed && h->rank == 0 && n == 4)
        h_info(h, "N=4: %zu parameters in %d tensors, identical on every rank and equal to one "
               "process's after %d steps", p.numel, p.count, STEPS);
    free(lo);
    free(hi);
    h_case_end(h);
out:
    free(x);
    free(y);
    nn_params_fini(&p);
    nn_params_fini(&ref);
}

static void ex_check_main(harness *h)
{
    run_cases(h);
}
