/* test_nn.c - core/nn's numerics against independent references: the GEMM kernels (reference,
 * OpenBLAS, batch-invariant) against a double-precision triple loop (all transposes, odd
 * shapes, strides), and the batch-invariant ones bit for bit against themselves; every
 * layer's forward against its definition in double and its backward against central finite
 * differences, under both GEMM kernels; the cross-entropy on huge logits; a small MLP's whole
 * gradient, and its loss falling under SGD. */
#include "../../core/nn/nn.h"
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- helpers ---- */

static float *vec(size_t n)
{
    return mlsys_xcalloc(n ? n : 1, sizeof(float));
}

static void fill(float *x, size_t n, float lo, float hi, mlsys_rng *r)
{
    for (size_t i = 0; i < n; i++)
        x[i] = (float)(lo + (hi - lo) * mlsys_rng_uniform(r));
}

/* Values in ±[lo, hi], never closer than lo to zero (keeps ReLU's kink out of ±h). */
static void fill_away_from_zero(float *x, size_t n, float lo, float hi, mlsys_rng *r)
{
    for (size_t i = 0; i < n; i++) {
        float m = (float)(lo + (hi - lo) * mlsys_rng_uniform(r));
        x[i] = mlsys_rng_uniform(r) < 0.5 ? -m : m;
    }
}

/* The gradient checker's floor for a tensor: 5% of its largest analytic entry. The forward
 * runs in float, so the loss carries rounding noise of about 1e-7 of its size, and divided
 * by 2h that noise swamps entries far smaller than the tensor's typical gradient. Against
 * this floor, any entry off by more than 0.05% of the tensor's scale still fails TOL. */
static double grad_floor(const float *g, size_t n)
{
    double m = 0.0;
    for (size_t i = 0; i < n; i++)
        m = fmax(m, fabs(g[i]));
    return fmax(0.05 * m, 1e-6);
}

#define TOL 1e-2

/* Loop tests run with _i even under the reference kernel and odd under BLAS. */
static const char *use_kernel(int i)
{
    nn_gemm_kernel k = (i % 2 && nn_have_blas()) ? NN_GEMM_BLAS : NN_GEMM_REF;
    ck_assert_int_eq(nn_set_gemm_kernel(k), 0);
    ck_assert_int_eq(nn_get_gemm_kernel(), k);
    return nn_gemm_kernel_name(k);
}

/* ---- GEMM ---- */

/* op(X)[r][c] for a row-major X with leading dimension ld */
static double at(const float *X, int trans, int ld, int r, int c)
{
    return trans ? X[(size_t)c * ld + r] : X[(size_t)r * ld + c];
}

/* Runs one GEMM shape under every kernel (reference, BLAS, the batch-invariant one on this
 * CPU's instructions and in plain C) and checks each against a double triple loop. The
 * tolerance scales with Σ|alpha·a·b| + |beta·c|, the size of what was summed. */
#define NKERN 4
static void check_gemm(int ta, int tb, int M, int N, int K, float alpha, float beta, int pad,
                       mlsys_rng *r)
{
    static const char *names[NKERN] = {"ref", "blas", "invariant", "invariant (plain C)"};
    int lda = (ta ? M : K) + pad, ldb = (tb ? K : N) + pad, ldc = N + pad;
    int arows = ta ? K : M, brows = tb ? N : K;
    size_t nc = (size_t)M * ldc;
    float *A = vec((size_t)arows * lda + 1), *B = vec((size_t)brows * ldb + 1);
    float *C0 = vec(nc + 1), *Ck[NKERN];
    fill(A, (size_t)arows * lda, -1, 1, r);
    fill(B, (size_t)brows * ldb, -1, 1, r);
    fill(C0, nc, -1, 1, r);
    if (beta == 0.0f)           /* beta = 0 must not read C: NaN there must not survive */
        for (size_t i = 0; i < nc; i++)
            C0[i] = NAN;
    for (int k = 0; k < NKERN; k++) {
        Ck[k] = vec(nc + 1);
        memcpy(Ck[k], C0, nc * sizeof(float));
    }
    nn_gemm_ref(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, Ck[0], ldc);
    ck_assert_int_eq(nn_set_gemm_kernel(nn_have_blas() ? NN_GEMM_BLAS : NN_GEMM_REF), 0);
    nn_gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, Ck[1], ldc);
    ck_assert_int_eq(nn_set_gemm_kernel(NN_GEMM_INVARIANT), 0);
    nn_gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, Ck[2], ldc);
    nn_gemm_invariant_generic(1);
    nn_gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, Ck[3], ldc);
    nn_gemm_invariant_generic(0);

    for (int i = 0; i < M; i++) {
        for (int j = 0; j < N; j++) {
            double s = 0.0, mag = 0.0;
            for (int k = 0; k < K; k++) {
                double p = at(A, ta, lda, i, k) * at(B, tb, ldb, k, j);
                s += p;
                mag += fabs(p);
            }
            double c0 = beta == 0.0f ? 0.0 : C0[(size_t)i * ldc + j];
            double want = alpha * s + beta * c0;
            double tol = 1e-5 * (fabs(alpha) * mag + fabs(beta * c0)) + 1e-6;
            for (int k = 0; k < NKERN; k++) {
                double got = Ck[k][(size_t)i * ldc + j];
                ck_assert_msg(fabs(got - want) <= tol,
                              "%s gemm ta=%d tb=%d M=%d N=%d K=%d: C[%d,%d] = %g, want %g",
                              names[k], ta, tb, M, N, K, i, j, got, want);
            }
        }
        /* padding columns past N belong to someone else: untouched */
        for (int j = N; j < ldc; j++)
            for (int k = 0; k < NKERN; k++)
                ck_assert_msg(memcmp(&Ck[k][(size_t)i * ldc + j], &C0[(size_t)i * ldc + j],
                                     4) == 0, "%s gemm wrote past N", names[k]);
    }
    free(A);
    free(B);
    free(C0);
    for (int k = 0; k < NKERN; k++)
        free(Ck[k]);
}

START_TEST(test_gemm_kernels)
{
    static const int shapes[][3] = { { 1, 1, 1 }, { 3, 5, 7 }, { 17, 13, 9 }, { 33, 65, 31 },
                                     { 64, 64, 64 }, { 5, 1, 129 }, { 1, 37, 2 },
                                     { 2, 3, 1 }, { 100, 7, 50 } };
    static const float alphas[] = { 1.0f, 0.5f, -1.25f }, betas[] = { 0.0f, 1.0f, 0.25f };
    mlsys_rng r;
    mlsys_rng_seed(&r, 11);
    int n = 0;
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
        for (int t = 0; t < 4; t++, n++)
            check_gemm(t & 1, t >> 1, shapes[s][0], shapes[s][1], shapes[s][2],
                       alphas[n % 3], betas[(n / 3) % 3], n % 2 ? 3 : 0, &r);
    for (int k = 0; k < 24; k++) {      /* random shapes, all four layouts */
        int M = 1 + (int)(mlsys_rng_u64(&r) % 70), N = 1 + (int)(mlsys_rng_u64(&r) % 70);
        int K = 1 + (int)(mlsys_rng_u64(&r) % 70);
        check_gemm(k & 1, (k >> 1) & 1, M, N, K, alphas[k % 3], betas[(k / 3) % 3], k % 5,
                   &r);
    }
}
END_TEST

START_TEST(test_gemm_degenerate)
{
    mlsys_rng r;
    mlsys_rng_seed(&r, 12);
    for (int t = 0; t < 4; t++) {
        check_gemm(t & 1, t >> 1, 4, 3, 0, 1.0f, 0.5f, 0, &r);  /* K = 0: C = beta·C */
        check_gemm(t & 1, t >> 1, 4, 3, 0, 1.0f, 0.0f, 1, &r);  /* K = 0, beta 0: zeros */
        check_gemm(t & 1, t >> 1, 4, 3, 5, 0.0f, 0.5f, 0, &r);  /* alpha = 0 */
    }
    float C[2] = { 7, 8 };                   /* M = 0 or N = 0: nothing is touched */
    nn_gemm(0, 0, 0, 2, 3, 1.0f, C, 3, C, 2, 0.0f, C, 2);
    nn_gemm_ref(0, 0, 1, 0, 3, 1.0f, C, 3, C, 1, 0.0f, C, 1);
    ck_assert(C[0] == 7 && C[1] == 8);
}
END_TEST

START_TEST(test_gemm_kernel_choice)
{
    /* CK_FORK gives this test a fresh process: nn_gemm_start reads the environment (argv
     * NULL: it lowers OpenBLAS's thread count instead of starting the program again) */
    ck_assert_int_eq(nn_get_gemm_kernel(), nn_have_blas() ? NN_GEMM_BLAS : NN_GEMM_REF);
    setenv("MLSYS_GEMM", "ref", 1);
    nn_gemm_start(NULL);
    ck_assert_int_eq(nn_get_gemm_kernel(), NN_GEMM_REF);
    setenv("MLSYS_GEMM", "invariant", 1);
    nn_gemm_start(NULL);
    ck_assert_int_eq(nn_get_gemm_kernel(), NN_GEMM_INVARIANT);
    setenv("MLSYS_GEMM", "fastest", 1);          /* unknown: said on stderr, kernel kept */
    nn_gemm_start(NULL);
    ck_assert_int_eq(nn_get_gemm_kernel(), NN_GEMM_INVARIANT);
    ck_assert_str_eq(nn_gemm_kernel_name(NN_GEMM_REF), "ref");
    ck_assert_str_eq(nn_gemm_kernel_name(NN_GEMM_BLAS), "blas");
    ck_assert_str_eq(nn_gemm_kernel_name(NN_GEMM_INVARIANT), "invariant");
    if (nn_have_blas()) {
        ck_assert_int_eq(nn_set_gemm_kernel(NN_GEMM_BLAS), 0);
        ck_assert_int_eq(nn_get_gemm_kernel(), NN_GEMM_BLAS);
        const char *nt = getenv("OPENBLAS_NUM_THREADS");
        ck_assert_int_eq(nn_blas_threads(), nt && atoi(nt) > 0 ? atoi(nt) : 1);
    } else {
        ck_assert_int_eq(nn_set_gemm_kernel(NN_GEMM_BLAS), -1);
        ck_assert_int_eq(nn_get_gemm_kernel(), NN_GEMM_INVARIANT);
        ck_assert_int_eq(nn_blas_threads(), 0);
    }
    ck_assert_int_eq(nn_set_gemm_kernel((nn_gemm_kernel)7), -1);
}
END_TEST

/* The batch-invariant kernel's promise, bit for bit: row i of A multiplied alone gives the
 * row that it gives inside any batch of 1..128 rows, at the batch's first, middle or last
 * position, for the model's shapes (N x K of every projection of the lab's model and of the
 * test models) and odd ones, in every layout, on this CPU's instructions and in plain C.
 * The reference kernel makes the same promise and is held to it too. BLAS makes none: how
 * many rows it rounds differently is printed, not asserted. */
static int rows_differ(nn_gemm_kernel k, int ta, int tb, int N, int K, int Mmax, int Mstep,
                       const float *A, const float *B, float *Cb, float *C1)
{
    int lda = ta ? Mmax : K, ldb = tb ? K : N, bad = 0;
    ck_assert_int_eq(nn_set_gemm_kernel(k), 0);
    for (int M = 1; M <= Mmax; M += (M < 17 ? 1 : Mstep)) {
        nn_gemm(ta, tb, M, N, K, 1.0f, A, lda, B, ldb, 0.0f, Cb, N);
        int probe[3] = {0, M / 2, M - 1};
        for (int p = 0; p < 3; p++) {
            int i = probe[p];
            /* the row alone: for op(A) = Aᵀ, column i of the stored [K, Mmax] matrix */
            nn_gemm(ta, tb, 1, N, K, 1.0f, ta ? A + i : A + (size_t)i * lda, lda, B, ldb, 0.0f,
                    C1, N);
            bad += memcmp(C1, Cb + (size_t)i * N, (size_t)N * sizeof(float)) != 0;
        }
    }
    return bad;
}

START_TEST(test_gemm_batch_invariant)
{
    static const int nk[][2] = {{128, 128}, {64, 128}, {352, 128}, {128, 352}, {512, 128},
                                {41, 32}, {72, 32}, {7, 13}, {1, 1}, {33, 9}, {16, 100}};
    mlsys_rng r;
    mlsys_rng_seed(&r, 77);
    int Mmax = 128;
    float *A = vec((size_t)Mmax * 512), *B = vec(512 * 512), *Cb = vec((size_t)Mmax * 512);
    float *C1 = vec(512);
    fill(A, (size_t)Mmax * 512, -1, 1, &r);
    fill(B, 512 * 512, -1, 1, &r);
    int blas_bad = 0, blas_total = 0;
    for (size_t s = 0; s < sizeof nk / sizeof nk[0]; s++) {
        int N = nk[s][0], K = nk[s][1];
        for (int t = 0; t < 4; t++) {
            int ta = t >> 1, tb = t & 1;
            int big = (size_t)N * K > 20000;
            /* every M from 1 to 16, then steps of 7 (1, 2, ..., 16, 17, 24, ..., 122, 128 is
             * reached through Mstep 1 on the fast kernel for the NT layout) */
            int step = !ta && tb ? 1 : 7;
            ck_assert_msg(!rows_differ(NN_GEMM_INVARIANT, ta, tb, N, K, Mmax, step, A, B, Cb,
                                       C1), "invariant (%s) N=%d K=%d ta=%d tb=%d: a row "
                          "differs from itself alone", nn_gemm_invariant_isa(), N, K, ta, tb);
            nn_gemm_invariant_generic(1);
            ck_assert_msg(!rows_differ(NN_GEMM_INVARIANT, ta, tb, N, K, big ? 33 : Mmax,
                                       big ? 16 : 7, A, B, Cb, C1),
                          "invariant (plain C) N=%d K=%d ta=%d tb=%d: a row differs", N, K,
                          ta, tb);
            nn_gemm_invariant_generic(0);
            if (!big)
                ck_assert_msg(!rows_differ(NN_GEMM_REF, ta, tb, N, K, Mmax, 7, A, B, Cb, C1),
                              "ref N=%d K=%d ta=%d tb=%d: a row differs", N, K, ta, tb);
            if (nn_have_blas() && !ta && tb) {
                blas_bad += rows_differ(NN_GEMM_BLAS, ta, tb, N, K, Mmax, 1, A, B, Cb, C1);
                blas_total += 3 * Mmax;
            }
        }
    }
    printf("batch invariance: invariant (%s) and ref rows identical alone and in 1..128 rows "
           "OK; blas (x·Wᵀ): %d of %d probed rows differ\n", nn_gemm_invariant_isa(),
           blas_bad, blas_total);
    free(A);
    free(B);
    free(Cb);
    free(C1);
}
END_TEST

/* ---- gradient checks of every layer ---- */

/* One layer under test. The scalar loss is L = Σ y ⊙ R for a fixed random R, so
 * dL/dy = R: the backward is fed R and must produce dL/dx, dL/dw, dL/db. */
typedef enum { OP_LINEAR, OP_LINEAR_NOBIAS, OP_RELU, OP_GELU, OP_SILU, OP_SOFTMAX,
               OP_RMSNORM, OP_LAYERNORM, OP_LAYERNORM_NOBIAS, OP_EMBEDDING, OP_COUNT } op_kind;
static const char *const op_names[OP_COUNT] = {
    "linear", "linear (no bias)", "relu", "gelu", "silu", "softmax", "rmsnorm", "layernorm",
    "layernorm (no bias)", "embedding"
};

typedef struct op_case {
    op_kind op;
    int B, D, O;                 /* linear: x[B,D], w[O,D]; norms over D; embedding: V = O */
    float *x, *w, *b, *y, *R, *s1, *s2;
    float *dx, *dw, *db;
    int *ids;
    size_t nx, nw, nb, ny;
} op_case;

static void op_forward(op_case *c)
{
    switch (c->op) {
    case OP_LINEAR:
    case OP_LINEAR_NOBIAS:
        nn_linear_forward(c->y, c->x, c->w, c->b, c->B, c->D, c->O);
        break;
    case OP_RELU: nn_relu_forward(c->y, c->x, c->nx); break;
    case OP_GELU: nn_gelu_forward(c->y, c->x, c->nx); break;
    case OP_SILU: nn_silu_forward(c->y, c->x, c->nx); break;
    case OP_SOFTMAX: nn_softmax_forward(c->y, c->x, c->B, c->D); break;
    case OP_RMSNORM: nn_rmsnorm_forward(c->y, c->s1, c->x, c->w, c->B, c->D, 1e-5f); break;
    case OP_LAYERNORM:
    case OP_LAYERNORM_NOBIAS:
        nn_layernorm_forward(c->y, c->s1, c->s2, c->x, c->w, c->b, c->B, c->D, 1e-5f);
        break;
    case OP_EMBEDDING: nn_embedding_forward(c->y, c->ids, c->w, c->B, c->O, c->D); break;
    default: break;
    }
}

static void op_backward(op_case *c)
{
    switch (c->op) {
    case OP_LINEAR:
    case OP_LINEAR_NOBIAS:
        nn_linear_backward(c->dx, c->dw, c->db, c->R, c->x, c->w, c->B, c->D, c->O);
        break;
    case OP_RELU: nn_relu_backward(c->dx, c->R, c->x, c->nx); break;
    case OP_GELU: nn_gelu_backward(c->dx, c->R, c->x, c->nx); break;
    case OP_SILU: nn_silu_backward(c->dx, c->R, c->x, c->nx); break;
    case OP_SOFTMAX: nn_softmax_backward(c->dx, c->R, c->y, c->B, c->D); break;
    case OP_RMSNORM:
        nn_rmsnorm_backward(c->dx, c->dw, c->R, c->x, c->w, c->s1, c->B, c->D);
        break;
    case OP_LAYERNORM:
    case OP_LAYERNORM_NOBIAS:
        nn_layernorm_backward(c->dx, c->dw, c->db, c->R, c->x, c->w, c->s1, c->s2, c->B, c->D);
        break;
    case OP_EMBEDDING: nn_embedding_backward(c->dw, c->R, c->ids, c->B, c->O, c->D); break;
    default: break;
    }
}

static double op_loss(void *ctx)
{
    op_case *c = ctx;
    op_forward(c);
    double s = 0.0;
    for (size_t i = 0; i < c->ny; i++)
        s += (double)c->y[i] * c->R[i];
    return s;
}

static void op_setup(op_case *c, op_kind op, mlsys_rng *r)
{
    memset(c, 0, sizeof *c);
    c->op = op;
    c->B = 5;
    c->D = 7;
    c->O = 6;
    c->nx = (size_t)c->B * c->D;
    c->ny = c->nx;
    switch (op) {
    case OP_LINEAR:
    case OP_LINEAR_NOBIAS:
        c->nw = (size_t)c->O * c->D;
        c->nb = op == OP_LINEAR ? (size_t)c->O : 0;
        c->ny = (size_t)c->B * c->O;
        break;
    case OP_RMSNORM: c->nw = (size_t)c->D; break;
    case OP_LAYERNORM: c->nw = c->nb = (size_t)c->D; break;
    case OP_LAYERNORM_NOBIAS: c->nw = (size_t)c->D; break;
    case OP_EMBEDDING:       /* B ids into a table of O rows of D; x unused */
        c->nx = 0;
        c->nw = (size_t)c->O * c->D;
        break;
    default: break;
    }
    c->x = vec(c->nx);
    c->dx = vec(c->nx);
    c->w = vec(c->nw);
    c->dw = vec(c->nw);
    c->b = c->nb ? vec(c->nb) : NULL;
    c->db = c->nb ? vec(c->nb) : NULL;
    c->y = vec(c->ny);
    c->R = vec(c->ny);
    c->s1 = vec((size_t)c->B);
    c->s2 = vec((size_t)c->B);
    c->ids = mlsys_xcalloc((size_t)c->B, sizeof(int));
    if (op == OP_RELU)
        fill_away_from_zero(c->x, c->nx, 0.05f, 2.0f, r);
    else
        fill(c->x, c->nx, -2.5f, 2.5f, r);
    if (op == OP_RMSNORM || op == OP_LAYERNORM || op == OP_LAYERNORM_NOBIAS)
        fill(c->w, c->nw, 0.5f, 1.5f, r);   /* gains near 1 */
    else
        fill(c->w, c->nw, -1, 1, r);
    if (c->b)
        fill(c->b, c->nb, -1, 1, r);
    fill(c->R, c->ny, -1, 1, r);
    if (op == OP_EMBEDDING) {
        c->ny = (size_t)c->B * c->D;
        static const int ids[5] = { 2, 0, 2, 5, 2 };    /* id 2 three times: scatter-add */
        memcpy(c->ids, ids, sizeof ids);
    }
}

static void op_free(op_case *c)
{
    free(c->x); free(c->dx); free(c->w); free(c->dw); free(c->b); free(c->db);
    free(c->y); free(c->R); free(c->s1); free(c->s2); free(c->ids);
}

static void expect_grad(const char *what, const char *kernel, op_case *c, float *x,
                        const float *g, size_t n)
{
    if (!n)
        return;
    nn_gradcheck_result res;
    double err = nn_gradcheck(op_loss, c, x, g, n, 1e-2f, grad_floor(g, n), 0, &res);
    printf("gradcheck %-20s %-3s [%s]: max rel err %.2e over %zu entries\n",
           op_names[c->op], what, kernel, err, res.checked);
    ck_assert_msg(err < TOL, "%s d%s [%s]: entry %zu analytic %.6g numeric %.6g (rel %.3g)",
                  op_names[c->op], what, kernel, res.worst, res.worst_analytic,
                  res.worst_numeric, err);
}

/* _i = 2·op + kernel: every layer under both GEMM kernels */
START_TEST(test_layer_gradcheck)
{
    const char *kernel = use_kernel(_i);
    op_kind op = (op_kind)(_i / 2);
    mlsys_rng r;
    mlsys_rng_seed(&r, 100 + (uint64_t)op);
    op_case c;
    op_setup(&c, op, &r);
    op_forward(&c);                 /* the backward may read what the forward saved */
    op_backward(&c);
    expect_grad("x", kernel, &c, c.x, c.dx, c.nx);
    expect_grad("w", kernel, &c, c.w, c.dw, c.nw);
    expect_grad("b", kernel, &c, c.b, c.db, c.nb);

    /* parameter gradients accumulate: a second backward doubles them */
    if (c.nw) {
        float *once = vec(c.nw);
        memcpy(once, c.dw, c.nw * sizeof(float));
        op_forward(&c);
        op_backward(&c);
        for (size_t i = 0; i < c.nw; i++)
            ck_assert_msg(fabsf(c.dw[i] - 2 * once[i]) <= 1e-5f * (1 + fabsf(once[i])),
                          "%s: dw does not accumulate", op_names[op]);
        free(once);
    }
    op_free(&c);
}
END_TEST

/* The forward of each layer against its definition, evaluated independently in double (a
 * gradient check only proves the backward consistent with the forward, not the forward). */
static void ref_forward(const op_case *c, double *out)
{
    int B = c->B, D = c->D, O = c->O;
    for (int b = 0; b < B; b++) {
        const float *x = c->x + (size_t)b * D;
        double mu = 0.0, ms = 0.0, var = 0.0, z = 0.0;
        for (int i = 0; i < D && c->nx; i++) {
            mu += x[i] / (double)D;
            ms += (double)x[i] * x[i] / D;
        }
        for (int i = 0; i < D && c->nx; i++) {
            var += ((double)x[i] - mu) * ((double)x[i] - mu) / D;
            z += exp((double)x[i]);
        }
        for (int o = 0; o < (c->op <= OP_LINEAR_NOBIAS ? O : D); o++) {
            double v = 0.0, xi = c->nx ? x[o] : 0.0;
            switch (c->op) {
            case OP_LINEAR:
            case OP_LINEAR_NOBIAS:
                v = c->b ? c->b[o] : 0.0;
                for (int i = 0; i < D; i++)
                    v += (double)x[i] * c->w[(size_t)o * D + i];
                break;
            case OP_RELU: v = xi > 0 ? xi : 0.0; break;
            case OP_GELU: v = 0.5 * xi * (1.0 + erf(xi / sqrt(2.0))); break;
            case OP_SILU: v = xi / (1.0 + exp(-xi)); break;
            case OP_SOFTMAX: v = exp(xi) / z; break;
            case OP_RMSNORM: v = xi / sqrt(ms + 1e-5) * c->w[o]; break;
            case OP_LAYERNORM:
            case OP_LAYERNORM_NOBIAS:
                v = (xi - mu) / sqrt(var + 1e-5) * c->w[o] + (c->b ? c->b[o] : 0.0);
                break;
            case OP_EMBEDDING: v = c->w[(size_t)c->ids[b] * D + o]; break;
            default: break;
            }
            out[(size_t)b * (c->op <= OP_LINEAR_NOBIAS ? O : D) + o] = v;
        }
    }
}

/* _i = 2·op + kernel */
START_TEST(test_layer_forward)
{
    const char *kernel = use_kernel(_i);
    op_kind op = (op_kind)(_i / 2);
    mlsys_rng r;
    mlsys_rng_seed(&r, 200 + (uint64_t)op);
    op_case c;
    op_setup(&c, op, &r);
    op_forward(&c);
    double *want = mlsys_xcalloc(c.ny, sizeof(double));
    ref_forward(&c, want);
    for (size_t i = 0; i < c.ny; i++)
        ck_assert_msg(fabs(c.y[i] - want[i]) <= 1e-5 * (1 + fabs(want[i])),
                      "%s [%s]: y[%zu] = %.7g, want %.7g", op_names[op], kernel, i, c.y[i],
                      want[i]);
    /* elementwise layers also run in place (y = x) */
    if (op == OP_RELU || op == OP_GELU || op == OP_SILU || op == OP_SOFTMAX) {
        float *y = c.y;
        c.y = c.x;
        op_forward(&c);
        ck_assert(memcmp(c.x, y, c.ny * sizeof(float)) == 0);
        c.y = y;
    }
    free(want);
    op_free(&c);
}
END_TEST

/* The checker itself must catch a wrong gradient: a 5% error is far above its noise. */
START_TEST(test_gradcheck_catches_errors)
{
    mlsys_rng r;
    mlsys_rng_seed(&r, 7);
    op_case c;
    op_setup(&c, OP_LAYERNORM, &r);
    op_forward(&c);
    op_backward(&c);
    nn_gradcheck_result res;
    double floor = grad_floor(c.dx, c.nx);
    ck_assert(nn_gradcheck(op_loss, &c, c.x, c.dx, c.nx, 1e-2f, floor, 0, &res) < TOL);
    ck_assert_uint_eq(res.checked, c.nx);
    c.dx[3] *= 1.05f;
    ck_assert(nn_gradcheck(op_loss, &c, c.x, c.dx, c.nx, 1e-2f, floor, 0, &res) > TOL);
    ck_assert_uint_eq(res.worst, 3);
    /* sampling checks max_checks entries, evenly spread */
    nn_gradcheck(op_loss, &c, c.x, c.dx, c.nx, 1e-2f, floor, 4, &res);
    ck_assert_uint_eq(res.checked, 4);
    op_free(&c);
}
END_TEST

/* ---- losses ---- */

typedef struct loss_case {
    int B, C, mse;
    float *logits, *probs, *target;
    int *targets;
} loss_case;

static double loss_eval(void *ctx)
{
    loss_case *l = ctx;
    if (l->mse)
        return nn_mse_forward(l->logits, l->target, (size_t)l->B * l->C);
    return nn_softmax_ce_forward(l->probs, l->logits, l->targets, l->B, l->C);
}

/* _i = kernel (losses do not multiply, but every check runs under both kernels) */
START_TEST(test_loss_gradcheck)
{
    const char *kernel = use_kernel(_i);
    mlsys_rng r;
    mlsys_rng_seed(&r, 21);
    loss_case l = { .B = 6, .C = 9 };
    size_t n = (size_t)l.B * l.C;
    l.logits = vec(n);
    l.probs = vec(n);
    l.target = vec(n);
    l.targets = mlsys_xcalloc((size_t)l.B, sizeof(int));
    float *d = vec(n), *fused = vec(n);
    fill(l.logits, n, -3, 3, &r);
    fill(l.target, n, -1, 1, &r);
    for (int b = 0; b < l.B; b++)
        l.targets[b] = (int)(mlsys_rng_u64(&r) % (uint64_t)l.C);

    /* cross-entropy against its definition, in double */
    double want = 0.0;
    for (int b = 0; b < l.B; b++) {
        double s = 0.0;
        for (int c = 0; c < l.C; c++)
            s += exp(l.logits[b * l.C + c]);
        want += log(s) - l.logits[b * l.C + l.targets[b]];
    }
    want /= l.B;
    float loss = nn_softmax_ce_forward(l.probs, l.logits, l.targets, l.B, l.C);
    ck_assert_msg(fabs(loss - want) < 1e-5 * fabs(want), "ce %g, want %g", loss, want);

    nn_softmax_ce_backward(d, l.probs, l.targets, l.B, l.C, 1.0f);
    nn_gradcheck_result res;
    double err = nn_gradcheck(loss_eval, &l, l.logits, d, n, 1e-2f, grad_floor(d, n), 0, &res);
    printf("gradcheck %-20s     [%s]: max rel err %.2e over %zu entries\n", "softmax ce",
           kernel, err, res.checked);
    ck_assert_msg(err < TOL, "softmax ce: entry %zu analytic %g numeric %g", res.worst,
                  res.worst_analytic, res.worst_numeric);

    /* the fused form gives the same loss and the same gradient; dloss scales it */
    float lf = nn_softmax_ce(fused, l.logits, l.targets, l.B, l.C, 0.25f);
    ck_assert(fabsf(lf - loss) <= 1e-6f * fabsf(loss));
    for (size_t i = 0; i < n; i++)
        ck_assert_msg(fabsf(fused[i] - 0.25f * d[i]) <= 1e-7f, "fused dlogits[%zu]", i);

    /* mse */
    l.mse = 1;
    double mw = 0.0;
    for (size_t i = 0; i < n; i++)
        mw += ((double)l.logits[i] - l.target[i]) * ((double)l.logits[i] - l.target[i]);
    ck_assert(fabs(nn_mse_forward(l.logits, l.target, n) - mw / n) < 1e-6 * mw / n);
    nn_mse_backward(d, l.logits, l.target, n, 1.0f);
    err = nn_gradcheck(loss_eval, &l, l.logits, d, n, 1e-2f, grad_floor(d, n), 0, &res);
    printf("gradcheck %-20s     [%s]: max rel err %.2e over %zu entries\n", "mse", kernel, err,
           res.checked);
    ck_assert_msg(err < TOL, "mse: entry %zu analytic %g numeric %g", res.worst,
                  res.worst_analytic, res.worst_numeric);

    free(l.logits); free(l.probs); free(l.target); free(l.targets); free(d); free(fused);
}
END_TEST

START_TEST(test_ce_huge_logits)
{
    /* rows: a huge winner, a huge loser as target, float's extremes, all equal */
    float logits[4][3] = { { 1e30f, 0.0f, -1e30f },
                           { 1e4f, -1e4f, 0.0f },
                           { 3e38f, -3e38f, 3e38f },
                           { 88.0f, 88.0f, 88.0f } };
    int targets[4] = { 0, 2, 0, 1 };
    /* exact per-row losses: max - l_t + log Σ e^{l - max} */
    double want[4] = { 0.0, 1e4, log(2.0), log(3.0) };
    float probs[12], d[12], d2[12];
    for (int b = 0; b < 4; b++) {
        float loss = nn_softmax_ce_forward(probs, logits[b], &targets[b], 1, 3);
        ck_assert_msg(isfinite(loss), "row %d: loss %g", b, loss);
        ck_assert_msg(fabs(loss - want[b]) <= 1e-6 * (1 + want[b]), "row %d: %g, want %g", b,
                      loss, want[b]);
        nn_softmax_ce_backward(d, probs, &targets[b], 1, 3, 1.0f);
        float lf = nn_softmax_ce(d2, logits[b], &targets[b], 1, 3, 1.0f);
        ck_assert(lf == loss);
        double sum = 0.0;
        for (int c = 0; c < 3; c++) {
            ck_assert(isfinite(d[c]) && isfinite(d2[c]) && d[c] == d2[c]);
            sum += d[c];
        }
        ck_assert(fabs(sum) < 1e-6);        /* softmax minus one-hot sums to zero */
    }
    /* all four rows at once: the mean, and in place (dlogits aliasing logits) */
    float mean = nn_softmax_ce(&logits[0][0], &logits[0][0], targets, 4, 3, 1.0f);
    ck_assert(fabs(mean - (want[0] + want[1] + want[2] + want[3]) / 4) < 1e-3);
    /* row 1 put all its mass on class 0, its target is 2: dlogits = (p - onehot)/B */
    ck_assert(fabsf(logits[1][0] - 0.25f) < 1e-6f && fabsf(logits[1][2] + 0.25f) < 1e-6f);
}
END_TEST

/* ---- a whole model: MLP gradient check and training ---- */

/* x[B,In] → linear → act → linear → softmax CE, parameters in one nn_params set */
typedef struct mlp {
    int B, In, H, C, gelu;
    nn_params p;
    float *w1, *b1, *w2, *b2;      /* views into p.data */
    float *x, *h, *a, *logits, *dlogits, *da, *dh;
    int *targets;
} mlp;

static void mlp_create(mlp *m, int B, int In, int H, int C, int smooth, uint64_t seed)
{
    memset(m, 0, sizeof *m);
    m->B = B; m->In = In; m->H = H; m->C = C; m->gelu = smooth;
    nn_params_init(&m->p);
    int i1 = nn_params_add2(&m->p, "fc1.weight", H, In);
    int i2 = nn_params_add1(&m->p, "fc1.bias", H);
    int i3 = nn_params_add2(&m->p, "fc2.weight", C, H);
    int i4 = nn_params_add1(&m->p, "fc2.bias", C);
    ck_assert_int_eq(nn_params_alloc(&m->p, 1), 0);
    m->w1 = m->p.t[i1].data; m->b1 = m->p.t[i2].data;
    m->w2 = m->p.t[i3].data; m->b2 = m->p.t[i4].data;
    mlsys_rng r;
    mlsys_rng_seed(&r, seed);
    nn_init_linear(m->w1, (size_t)H * In, In, &r);
    nn_init_linear(m->b1, (size_t)H, In, &r);
    nn_init_linear(m->w2, (size_t)C * H, H, &r);
    nn_init_linear(m->b2, (size_t)C, H, &r);
    m->x = vec((size_t)B * In);
    m->h = vec((size_t)B * H); m->a = vec((size_t)B * H);
    m->da = vec((size_t)B * H); m->dh = vec((size_t)B * H);
    m->logits = vec((size_t)B * C); m->dlogits = vec((size_t)B * C);
    m->targets = mlsys_xcalloc((size_t)B, sizeof(int));
    fill(m->x, (size_t)B * In, 0, 1, &r);                /* pixel-like inputs */
    for (int b = 0; b < B; b++)
        m->targets[b] = (int)(mlsys_rng_u64(&r) % (uint64_t)C);
}

static void mlp_free(mlp *m)
{
    nn_params_fini(&m->p);
    free(m->x); free(m->h); free(m->a); free(m->da); free(m->dh);
    free(m->logits); free(m->dlogits); free(m->targets);
}

static float mlp_forward(mlp *m)
{
    size_t nh = (size_t)m->B * m->H;
    nn_linear_forward(m->h, m->x, m->w1, m->b1, m->B, m->In, m->H);
    if (m->gelu)
        nn_gelu_forward(m->a, m->h, nh);
    else
        nn_relu_forward(m->a, m->h, nh);
    nn_linear_forward(m->logits, m->a, m->w2, m->b2, m->B, m->H, m->C);
    return nn_softmax_ce_forward(m->dlogits, m->logits, m->targets, m->B, m->C);
}

/* the backward is the forward read from the bottom up */
static float mlp_forward_backward(mlp *m)
{
    size_t nh = (size_t)m->B * m->H;
    float loss = mlp_forward(m);
    nn_softmax_ce_backward(m->dlogits, m->dlogits, m->targets, m->B, m->C, 1.0f);
    nn_linear_backward(m->da, nn_params_find(&m->p, "fc2.weight")->grad,
                       nn_params_find(&m->p, "fc2.bias")->grad, m->dlogits, m->a, m->w2,
                       m->B, m->H, m->C);
    if (m->gelu)
        nn_gelu_backward(m->dh, m->da, m->h, nh);
    else
        nn_relu_backward(m->dh, m->da, m->h, nh);
    nn_linear_backward(NULL, nn_params_find(&m->p, "fc1.weight")->grad,
                       nn_params_find(&m->p, "fc1.bias")->grad, m->dh, m->x, m->w1, m->B,
                       m->In, m->H);
    return loss;
}

static double mlp_loss(void *ctx)
{
    return mlp_forward(ctx);
}

/* The whole flat gradient vector of a GELU MLP against finite differences (GELU, not ReLU:
 * a ±h nudge of a weight can push a hidden unit across ReLU's kink, where the slope jumps). */
START_TEST(test_mlp_gradcheck)
{
    const char *kernel = use_kernel(_i);
    mlp m;
    mlp_create(&m, 4, 10, 8, 5, 1, 31);
    nn_params_zero_grad(&m.p);
    mlp_forward_backward(&m);
    nn_gradcheck_result res;
    double err = nn_gradcheck(mlp_loss, &m, m.p.data, m.p.grad, m.p.numel, 1e-2f,
                              grad_floor(m.p.grad, m.p.numel), 0, &res);
    printf("gradcheck %-20s all [%s]: max rel err %.2e over %zu entries\n", "mlp (gelu)",
           kernel, err, res.checked);
    ck_assert_msg(err < TOL, "mlp: entry %zu analytic %g numeric %g (rel %g)", res.worst,
                  res.worst_analytic, res.worst_numeric, err);
    mlp_free(&m);
}
END_TEST

/* A few SGD steps on one fixed batch must lower the loss (a ReLU MLP shaped like chapter 5's,
 * smaller); both kernels must follow the same trajectory to float rounding. */
enum { STEPS = 30 };

START_TEST(test_mlp_trains)
{
    float losses[2][STEPS];
    for (int k = 0; k < 2; k++) {
        use_kernel(k);
        mlp m;
        mlp_create(&m, 16, 64, 32, 10, 0, 5);
        nn_sgd opt;
        nn_sgd_init(&opt, 0.5f, 0.0f, 0, m.p.numel);
        for (int s = 0; s < STEPS; s++) {
            nn_params_zero_grad(&m.p);
            losses[k][s] = mlp_forward_backward(&m);
            nn_sgd_step(&opt, m.p.data + opt.offset, m.p.grad + opt.offset);
        }
        nn_sgd_fini(&opt);
        mlp_free(&m);
    }
    printf("mlp sgd: loss %.4f -> %.4f (ref), %.4f -> %.4f (%s)\n", losses[0][0],
           losses[0][STEPS - 1], losses[1][0], losses[1][STEPS - 1],
           nn_have_blas() ? "blas" : "ref");
    ck_assert(fabsf(losses[0][0] - logf(10.0f)) < 0.5f);     /* starts near chance */
    ck_assert_msg(losses[0][STEPS - 1] < 0.5f * losses[0][0], "loss %g -> %g", losses[0][0],
                  losses[0][STEPS - 1]);
    for (int s = 0; s < STEPS; s++)
        ck_assert_msg(fabsf(losses[0][s] - losses[1][s]) < 1e-3f, "step %d: ref %g blas %g", s,
                      losses[0][s], losses[1][s]);
}
END_TEST

static Suite *nn_suite(void)
{
    Suite *s = suite_create("nn");
    TCase *tc = tcase_create("gemm");
    tcase_add_test(tc, test_gemm_kernels);
    tcase_add_test(tc, test_gemm_degenerate);
    tcase_add_test(tc, test_gemm_kernel_choice);
    tcase_add_test(tc, test_gemm_batch_invariant);
    suite_add_tcase(s, tc);
    tc = tcase_create("gradcheck");
    tcase_add_loop_test(tc, test_layer_forward, 0, 2 * OP_COUNT);
    tcase_add_loop_test(tc, test_layer_gradcheck, 0, 2 * OP_COUNT);
    tcase_add_test(tc, test_gradcheck_catches_errors);
    tcase_add_loop_test(tc, test_loss_gradcheck, 0, 2);
    tcase_add_test(tc, test_ce_huge_logits);
    suite_add_tcase(s, tc);
    tc = tcase_create("mlp");
    tcase_add_loop_test(tc, test_mlp_gradcheck, 0, 2);
    tcase_add_test(tc, test_mlp_trains);
    suite_add_tcase(s, tc);
    return s;
}

int main(int argc, char **argv)
{
    (void)argc;
    nn_gemm_start(argv);      /* BLAS threads and MLSYS_GEMM, as every program of the lab */
    SRunner *sr = srunner_create(nn_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
