/* check.c - ch06-tp-linear, rank side (see ../harness.h). x, W and dy are drawn from the seed,
 * so every rank holds the whole serial problem, computes y = x·W, dW = xᵀ·dy and dx = dy·Wᵀ
 * in double itself, and compares its shard of each with what the learner's functions return.
 * The all-reduce counter must show one call in the column backward and one in the row
 * forward, none elsewhere; a guard after each output catches writes past its end. */
#include "harness.h"
#include "api.h"

#define GUARD 4
#define GUARD_VALUE 4242.0f

static float *fill(mlsys_rng *g, size_t n)
{
    float *p = malloc((n + GUARD) * sizeof(float));
    if (!p)
        abort();
    for (size_t i = 0; i < n; i++)
        p[i] = (float)(mlsys_rng_uniform(g) * 2.0 - 1.0);
    for (int k = 0; k < GUARD; k++)
        p[n + k] = GUARD_VALUE;
    return p;
}

/* The serial layer in double: y = x·W, dw = xᵀ·dy, dx = dy·Wᵀ (x [B, in], W [in, out]). */
static void serial(const float *x, const float *w, const float *dy, int B, int in, int out,
                   float *y, float *dw, float *dx)
{
    for (int i = 0; i < B; i++)
        for (int j = 0; j < out; j++) {
            double s = 0;
            for (int p = 0; p < in; p++)
                s += (double)x[i * in + p] * w[p * out + j];
            y[i * out + j] = (float)s;
        }
    for (int p = 0; p < in; p++)
        for (int j = 0; j < out; j++) {
            double s = 0;
            for (int i = 0; i < B; i++)
                s += (double)x[i * in + p] * dy[i * out + j];
            dw[p * out + j] = (float)s;
        }
    for (int i = 0; i < B; i++)
        for (int p = 0; p < in; p++) {
            double s = 0;
            for (int j = 0; j < out; j++)
                s += (double)dy[i * out + j] * w[p * out + j];
            dx[i * in + p] = (float)s;
        }
}

/* dst[rows, w] = columns c0 .. c0+w-1 of src[rows, ld] */
static float *cols(const float *src, int rows, int ld, int c0, int w)
{
    float *d = malloc(((size_t)rows * w + GUARD) * sizeof(float));
    if (!d)
        abort();
    for (int i = 0; i < rows; i++)
        memcpy(d + (size_t)i * w, src + (size_t)i * ld + c0, sizeof(float) * w);
    for (int k = 0; k < GUARD; k++)
        d[(size_t)rows * w + k] = GUARD_VALUE;
    return d;
}

/* Compare an output (with its guard) and name it: "column forward y_r (row 1, col 2 of y)". */
static int cmp(harness *h, const float *want, const float *got, int rows, int w, const char *what)
{
    size_t n = (size_t)rows * w;
    for (size_t i = 0; i < n; i++)
        if (!h_close(want[i], got[i], 1e-4, 1e-4)) {
            char a[48], b[48];
            h_fail(h, "rank %d, %s element %zu (row %zu, col %zu): expected %s, got %s",
                   h->rank, what, i, i / w, i % w, h_num(a, sizeof a, want[i]),
                   h_num(b, sizeof b, got[i]));
            return 0;
        }
    for (int k = 0; k < GUARD; k++)
        if (got[n + k] != GUARD_VALUE) {
            h_fail(h, "rank %d wrote past the end of %s (element %zu of %zu)", h->rank, what,
                   n + k, n);
            return 0;
        }
    return 1;
}

/* An all-reduce count after one call: rc checked first, then the counter. */
static void calls(harness *h, const char *fn, uint64_t want)
{
    uint64_t got = mlsys_get_counters(h->c)->coll_calls[MLSYS_COLL_ALLREDUCE];
    mlsys_reset_counters(h->c);
    if (!h->failed && got != want && h->size > 1)
        h_fail(h, "rank %d: %s made %llu all_reduce call%s; it needs %llu", h->rank, fn,
               (unsigned long long)got, got == 1 ? "" : "s", (unsigned long long)want);
}

static void one_case(harness *h, int k)
{
    int T = h->size, r = h->rank;
    mlsys_rng g;
    mlsys_rng_seed(&g, h->seed * 7919u + (uint64_t)k * 104729u + (uint64_t)T);
    int B = 2 + (int)(mlsys_rng_u64(&g) % 4);
    int in_r = 2 + (int)(mlsys_rng_u64(&g) % 6), out_r = 2 + (int)(mlsys_rng_u64(&g) % 6);
    int in = T * in_r, out = T * out_r;
    h_case(h, "T=%d, x [%d, %d], W [%d, %d]", T, B, in, in, out);
    float *x = fill(&g, (size_t)B * in), *w = fill(&g, (size_t)in * out);
    float *dy = fill(&g, (size_t)B * out);
    float *y = fill(&g, (size_t)B * out), *dw = fill(&g, (size_t)in * out);
    float *dx = fill(&g, (size_t)B * in);
    serial(x, w, dy, B, in, out, y, dw, dx);

    /* column-parallel: W_r = columns r·out_r.., dy_r the same columns of dy */
    float *w_c = cols(w, in, out, r * out_r, out_r), *dy_c = cols(dy, B, out, r * out_r, out_r);
    float *y_c = fill(&g, (size_t)B * out_r), *dw_c = fill(&g, (size_t)in * out_r);
    float *dx_c = fill(&g, (size_t)B * in);
    float *want_y = cols(y, B, out, r * out_r, out_r), *want_dw = cols(dw, in, out, r * out_r, out_r);
    int rc = col_forward(h->c, x, w_c, y_c, B, in, out_r);
    h_returned(h, rc, "col_forward");
    calls(h, "col_forward", 0);
    if (!h->failed)
        cmp(h, want_y, y_c, B, out_r, "column forward y_r (its columns of y = x·W)");
    if (!h->failed) {
        rc = col_backward(h->c, x, w_c, dy_c, dx_c, dw_c, B, in, out_r);
        h_returned(h, rc, "col_backward");
        calls(h, "col_backward", 1);
    }
    if (!h->failed)
        cmp(h, want_dw, dw_c, in, out_r, "column backward dw_r (its columns of dW = xᵀ·dy)");
    if (!h->failed)
        cmp(h, dx, dx_c, B, in, "column backward dx (the whole dy·Wᵀ)");

    /* row-parallel: W_r = rows r·in_r.., x_r = columns r·in_r.. of x */
    float *w_rw = malloc(((size_t)in_r * out + GUARD) * sizeof(float));
    if (!w_rw)
        abort();
    memcpy(w_rw, w + (size_t)r * in_r * out, sizeof(float) * (size_t)in_r * out);
    float *x_r = cols(x, B, in, r * in_r, in_r);
    float *y_w = fill(&g, (size_t)B * out), *dw_w = fill(&g, (size_t)in_r * out);
    float *dx_w = fill(&g, (size_t)B * in_r);
    float *want_dx = cols(dx, B, in, r * in_r, in_r);
    if (!h->failed) {
        rc = row_forward(h->c, x_r, w_rw, y_w, B, in_r, out);
        h_returned(h, rc, "row_forward");
        calls(h, "row_forward", 1);
    }
    if (!h->failed)
        cmp(h, y, y_w, B, out, "row forward y (the whole x·W)");
    if (!h->failed) {
        rc = row_backward(h->c, x_r, w_rw, dy, dx_w, dw_w, B, in_r, out);
        h_returned(h, rc, "row_backward");
        calls(h, "row_backward", 0);
    }
    if (!h->failed)
        cmp(h, dw + (size_t)r * in_r * out, dw_w, in_r, out, "row backward dw_r (its rows of "
            "dW = xᵀ·dy)");
    if (!h->failed)
        cmp(h, want_dx, dx_w, B, in_r, "row backward dx_r (its columns of dx = dy·Wᵀ)");
    float *all[] = {x, w, dy, y, dw, dx, w_c, dy_c, y_c, dw_c, dx_c, want_y, want_dw, w_rw, x_r,
                    y_w, dw_w, dx_w, want_dx};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
        free(all[i]);
}

static void ex_check_main(harness *h)
{
    for (int k = 0; k < 3; k++) {
        one_case(h, k);
        if (!h_case_end(h))
            return;
    }
}
