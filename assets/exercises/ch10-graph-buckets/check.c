/* check.c - ch10-graph-buckets, one rank (see ../harness.h). A seeded MLP, plans captured for
 * drawn sets of sizes, and every batch from 1 to 4 above the largest: the bucket, the output
 * against the eager interpreter's (1e-5), a guard past y, and the plans' static inputs (set
 * to a sentinel first): the chosen plan holds the batch's rows then zeros, no other plan is
 * touched, and above the largest size none is. */
#include "harness.h"
#include "api.h"

#define SENTINEL -7.25f
#define GUARD 4

static void one_case(harness *h, const int *sizes, int n, int k)
{
    mlsys_rng g;
    mlsys_rng_seed(&g, h->seed * 613u + (uint64_t)k);
    int dims[4] = {8 + (int)(mlsys_rng_u64(&g) % 24), 16 + (int)(mlsys_rng_u64(&g) % 48),
                   16 + (int)(mlsys_rng_u64(&g) % 48), 4 + (int)(mlsys_rng_u64(&g) % 12)};
    char list[64] = "";
    for (int i = 0; i < n; i++)
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s%d", i ? " " : "", sizes[i]);
    h_case(h, "MLP %d -> %d -> %d -> %d, graphs of %s rows", dims[0], dims[1], dims[2], dims[3],
           list);
    graph_model m;
    graph_plan plans[8];
    char err[256];
    if (graph_mlp_init(&m, dims, 4, h->seed + (uint64_t)k)) {
        h_fail(h, "rank %d: the model (a bug of the check)", h->rank);
        return;
    }
    for (int i = 0; i < n; i++)
        if (graph_capture(&plans[i], &m, sizes[i], err, sizeof err))
            abort();
    graph_eager *e = graph_eager_create(), *e2 = graph_eager_create();
    int maxb = sizes[n - 1];
    float *x = malloc(sizeof(float) * (size_t)(maxb + 4) * dims[0]);
    float *y = malloc(sizeof(float) * ((size_t)(maxb + 4) * dims[3] + GUARD));
    float *want = malloc(sizeof(float) * (size_t)(maxb + 4) * dims[3]);
    if (!x || !y || !want)
        abort();
    for (int bs = 1; bs <= maxb + 4 && !h->failed; bs++) {
        int ref = -1, ri = -1;
        for (int i = 0; i < n && ref < 0; i++)
            if (sizes[i] >= bs)
                ref = sizes[i], ri = i;
        int got = pick_bucket(sizes, n, bs);
        h_returned(h, 0, "pick_bucket");
        if (got != ref) {
            h_fail(h, "batch %d: pick_bucket gives %d; the smallest of %s that holds %d row%s "
                   "is %d", bs, got, list, bs, bs == 1 ? "" : "s", ref);
            break;
        }
        for (size_t i = 0; i < (size_t)bs * dims[0]; i++)
            x[i] = (float)mlsys_rng_normal(&g);
        for (size_t i = 0; i < (size_t)bs * dims[3] + GUARD; i++)
            y[i] = SENTINEL;
        for (int i = 0; i < n; i++)
            for (size_t j = 0; j < (size_t)sizes[i] * dims[0]; j++)
                plans[i].static_in[j] = SENTINEL;
        if (graph_run_eager(e2, &m, bs, x, want, err, sizeof err))
            abort();
        int rc = run_batch(plans, sizes, n, &m, e, bs, x, y);
        h_returned(h, rc, "run_batch");
        char what[64];
        snprintf(what, sizeof what, "batch %d, y", bs);
        if (!h_cmp_f32(h, want, y, (size_t)bs * dims[3], 1e-5, 1e-5, what, 0))
            break;
        for (int gd = 0; gd < GUARD; gd++)
            if (y[(size_t)bs * dims[3] + gd] != SENTINEL) {
                h_fail(h, "batch %d: run_batch wrote past row %d of y (the padded rows' "
                       "outputs are to be dropped)", bs, bs);
                break;
            }
        for (int i = 0; i < n && !h->failed; i++) {
            const float *in = plans[i].static_in;
            int touched = in[0] != SENTINEL;
            if (i != ri && touched)
                h_fail(h, "batch %d: the plan of %d rows was replayed; %s", bs, sizes[i],
                       ri < 0 ? "no graph holds this batch: run it eagerly" :
                       "only the smallest that holds it may be");
            else if (i == ri && !touched)
                h_fail(h, "batch %d: the plan of %d rows was not replayed (ran eagerly?)", bs,
                       sizes[i]);
            else if (i == ri)
                for (size_t j = 0; j < (size_t)sizes[i] * dims[0]; j++) {
                    float w = j < (size_t)bs * dims[0] ? x[j] : 0.0f;
                    if (in[j] != w) {
                        h_fail(h, "batch %d in the graph of %d: its input row %zu, element %zu "
                               "is %g, not %s", bs, sizes[i], j / dims[0], j % dims[0], in[j],
                               j < (size_t)bs * dims[0] ? "the batch's" : "0 (padding)");
                        break;
                    }
                }
        }
    }
    free(x);
    free(y);
    free(want);
    graph_eager_free(e);
    graph_eager_free(e2);
    for (int i = 0; i < n; i++)
        graph_plan_free(&plans[i]);
    graph_model_free(&m);
}

static void ex_check_main(harness *h)
{
    static const int s1[] = {1, 2, 4, 8, 16}, s2[] = {1, 4, 16}, s3[] = {2, 8, 24, 32};
    static const int *const sets[] = {s1, s2, s3};
    static const int ns[] = {5, 3, 4};
    mlsys_rng g;
    mlsys_rng_seed(&g, h->seed);
    int first = (int)(mlsys_rng_u64(&g) % 3);
    for (int k = 0; k < 3; k++) {
        int i = (first + k) % 3;
        one_case(h, sets[i], ns[i], k);
        if (!h_case_end(h))
            return;
    }
}
