/* check.c - ch11-spec-accept, rank side (see ../harness.h). Greedy: one-hot p and q compared
 * exactly with llm_spec_rule_standard. Sampling: x ~ q then the learner's rule, many times
 * per seeded (p, q): every replacement must lie where p > q, the kept share must match
 * sum min(p, q), and the committed tokens must follow p (chi-square at p-value 1e-7). */
#include "harness.h"
#include "llm/llm.h"
#include "nn/nn.h"
#include "api.h"

#define GREEDY 3000
#define CASES 5
#define DRAWS 200000
#define VMAX 12

/* Chi-square's upper 1e-7 point for df degrees of freedom (Wilson-Hilferty, z = 5.2). */
static double chi2_limit(int df)
{
    double a = 2.0 / (9.0 * df), z = 5.2;
    double c = 1.0 - a + z * sqrt(a);
    return df * c * c * c;
}

static void greedy(harness *h)
{
    h_case(h, "greedy: %d one-hot (p, q) pairs against llm_spec_rule_standard", GREEDY);
    mlsys_rng g;
    mlsys_rng_seed(&g, h->seed);
    float p[64], q[64];
    for (int i = 0; i < GREEDY && !h->failed; i++) {
        int V = 2 + (int)(mlsys_rng_u64(&g) % 63);
        int a = (int)(mlsys_rng_u64(&g) % (uint64_t)V);
        int x = mlsys_rng_uniform(&g) < 0.5 ? a : (int)(mlsys_rng_u64(&g) % (uint64_t)V);
        memset(p, 0, sizeof p);
        memset(q, 0, sizeof q);
        p[a] = 1.0f;
        q[x] = 1.0f;
        mlsys_rng r1, r2;
        mlsys_rng_seed(&r1, h->seed + 1000u + (uint64_t)i);
        r2 = r1;
        int ry = -1, ly = -1;
        int rk = llm_spec_rule_standard(p, q, V, x, &r1, &ry);
        int lk = spec_accept(p, q, V, x, &r2, &ly);
        if ((lk != 0) != (rk != 0))
            h_fail(h, "pair %d (V=%d): the draft's token %d, the target's argmax %d: "
                   "expected %s, your rule %s it", i, V, x, a, rk ? "keep" : "refuse",
                   lk ? "kept" : "refused");
        else if (!rk && ly != ry)
            h_fail(h, "pair %d (V=%d): token %d refused, the replacement must be the "
                   "target's argmax %d, got %d", i, V, x, ry, ly);
    }
    h_returned(h, 0, "spec_accept");
}

/* A random distribution over V tokens, some of them 0 (never all). */
static void draw_dist(mlsys_rng *g, float *d, int V)
{
    double s = 0.0, w[VMAX];
    for (int i = 0; i < V; i++) {
        w[i] = mlsys_rng_uniform(g) < 0.2 ? 0.0 : exp(1.2 * mlsys_rng_normal(g));
        s += w[i];
    }
    if (s == 0.0) {
        w[0] = 1.0;
        s = 1.0;
    }
    for (int i = 0; i < V; i++)
        d[i] = (float)(w[i] / s);
}

static void sampling(harness *h, int c)
{
    mlsys_rng g, rule;
    mlsys_rng_seed(&g, h->seed * 31u + (uint64_t)c);
    mlsys_rng_seed(&rule, h->seed * 77u + (uint64_t)c);
    int V = 4 + (int)(mlsys_rng_u64(&g) % (VMAX - 3));
    float p[VMAX], q[VMAX];
    draw_dist(&g, p, V);
    draw_dist(&g, q, V);
    h_case(h, "sampling case %d: V=%d, %d draws", c, V, DRAWS);
    double alpha = 0.0, ps = 0.0, qs = 0.0;
    for (int i = 0; i < V; i++) {
        ps += p[i];
        qs += q[i];
    }
    for (int i = 0; i < V; i++)
        alpha += fmin(p[i] / ps, q[i] / qs);
    long count[VMAX] = {0}, kept = 0;
    for (long n = 0; n < DRAWS && !h->failed; n++) {
        int x = nn_sample_categorical(q, V, &g), y = -1;
        int k = spec_accept(p, q, V, x, &rule, &y);
        if (k) {
            kept++;
            count[x]++;
        } else if (y < 0 || y >= V) {
            h_fail(h, "draw %ld: token %d refused, the replacement %d is not a token (0..%d)",
                   n, x, y, V - 1);
        } else if (!(p[y] > q[y])) {
            h_fail(h, "draw %ld: token %d refused, replacement token %d has p = %.4f <= q = "
                   "%.4f: max(0, p - q) is 0 there, it can never be drawn", n, x, y,
                   (double)p[y], (double)q[y]);
        } else {
            count[y]++;
        }
    }
    h_returned(h, 0, "spec_accept");
    if (h->failed)
        return;
    double ex = DRAWS * alpha, sd = sqrt(DRAWS * alpha * (1.0 - alpha));
    double z = sd > 0 ? fabs(kept - ex) / sd : (kept == (long)ex ? 0.0 : 1e9);
    if (z > 5.5) {
        h_fail(h, "kept %ld of %d drafts (%.4f), expected sum_x min(p, q) = %.4f (z = %.1f, "
               "limit 5.5)", kept, DRAWS,
               (double)kept / DRAWS, alpha, z);
        return;
    }
    double chi = 0.0, worst = -1.0, tv = 0.0;
    int df = -1, wt = 0;
    for (int i = 0; i < V; i++) {
        double e = DRAWS * p[i] / ps;
        tv += 0.5 * fabs(count[i] / (double)DRAWS - p[i] / ps);
        if (p[i] == 0.0f) {
            if (count[i]) {
                h_fail(h, "token %d has target p = 0, yet %ld of the committed tokens are %d",
                       i, count[i], i);
                return;
            }
            continue;
        }
        df++;
        double term = (count[i] - e) * (count[i] - e) / e;
        chi += term;
        if (term > worst) {
            worst = term;
            wt = i;
        }
    }
    if (df > 0 && chi > chi2_limit(df)) {
        h_fail(h, "token %d: target p = %.4f, your rule committed it %.4f of the time "
               "(chi-square %.1f over %d degrees of freedom, limit %.1f; total-variation "
               "distance %.4f)", wt,
               (double)p[wt] / ps, count[wt] / (double)DRAWS, chi, df, chi2_limit(df), tv);
        return;
    }
    h_info(h, "case %d: V=%2d, kept %.4f (expected %.4f), chi-square %5.1f (limit %.1f), "
           "total variation from p %.4f", c, V, (double)kept / DRAWS, alpha, chi,
           chi2_limit(df > 0 ? df : 1), tv);
}

static void ex_check_main(harness *h)
{
    greedy(h);
    if (!h_case_end(h))
        return;
    for (int c = 1; c <= CASES; c++) {
        sampling(h, c);
        if (!h_case_end(h))
            return;
    }
}
