/* ch11-json-mask - the mask step of JSON-constrained decoding (see api.h).
 *
 * Before every token the decoder asks: which tokens of the vocabulary may come next, from
 * the automaton's current state? Those refused get logit -inf, so the sampler never draws
 * them, and the output is valid JSON, closed within the token budget, whatever the model
 * prefers. The automaton itself is given (llm_json_feed_token advances a state by a token's
 * bytes, or refuses; llm_json_min_close says how many bytes at least complete the text).
 *
 * The check (one rank) walks 24 seeded token streams over a 100-token vocabulary of JSON
 * pieces (half of them under the schema name:string,age:integer,active:boolean, budgets of
 * 0 = unlimited or 8..40 tokens): at every step your mask is compared, token by token, with
 * the library's llm_json_mask_plain, then a token the reference allows is taken (sometimes
 * the end-of-text token). The seed is printed: rerun it with --seed.
 *
 *   mlsys-lab check ch11-json-mask      mlsys-lab hint ch11-json-mask */
#include "mlsys.h"
#include "api.h"
#include <string.h>

int json_mask(llm_json_grammar *g, const llm_json_state *s, int budget, unsigned char *allowed)
{
    (void)s;
    (void)budget;
    int n = 0;
    for (int t = 0; t < g->V; t++) {
        /* TODO: try token t on a copy of the state; allow it only when it fits the grammar
         * and, with a budget, the text can still be closed in the tokens left after it */
        allowed[t] = g->tok_len[t] > 0;
        n += allowed[t];
    }
    /* TODO: the end-of-text token g->eos (when >= 0): only once the value is complete */
    return n;
}
