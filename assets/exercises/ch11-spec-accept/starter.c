/* ch11-spec-accept - the acceptance rule of speculative decoding (see api.h).
 *
 * The draft proposed token x with probability q[x]; the target gives it p[x]. Keep it with
 * probability min(1, p[x] / q[x]); at a refusal, draw the replacement from norm(max(0, p - q)).
 * Then the committed token follows p exactly, whatever q was.
 *
 * The check (one rank):
 *   - greedy: 3000 one-hot (p, q) pairs, compared exactly with core/llm/speculative.c's
 *     llm_spec_rule_standard: keep or refuse, and the replacement;
 *   - sampling: 5 seeded (p, q) pairs over 4..12 tokens, 200,000 draws each (x ~ q, then your
 *     rule): a replacement must have p(y) > q(y); the share of kept drafts must match
 *     sum_x min(p(x), q(x)) (z <= 5.5); the committed tokens must follow p (chi-square,
 *     p-value 1e-7). The seed is printed: rerun it with --seed.
 *
 *   mlsys-lab check ch11-spec-accept      mlsys-lab hint ch11-spec-accept */
#include "mlsys.h"
#include "api.h"

int spec_accept(const float *p, const float *q, int V, int x, mlsys_rng *rng, int *y)
{
    (void)p;
    (void)q;
    (void)V;
    (void)rng;
    /* TODO: draw u in [0, 1) and keep x when u < p[x] / q[x] */

    /* TODO: otherwise draw y from max(0, p - q), normalised: the sum of the positive parts,
     * then a second uniform times that sum, walked through the cumulative sum */
    *y = x;
    return 1;
}
