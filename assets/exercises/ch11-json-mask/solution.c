/* ch11-json-mask - reference solution: every token simulated from the state. */
#include "mlsys.h"
#include "api.h"

int json_mask(llm_json_grammar *g, const llm_json_state *s, int budget, unsigned char *allowed)
{
    int n = 0;
    for (int t = 0; t < g->V; t++) {
        llm_json_state next = *s;
        int ok = llm_json_feed_token(g, &next, t) == 0 &&
                 (budget <= 0 || llm_json_min_close(g, &next) <= budget - 1);
        allowed[t] = (unsigned char)ok;
        n += ok;
    }
    if (g->eos >= 0 && llm_json_done(s)) {
        allowed[g->eos] = 1;
        n++;
    }
    return n;
}
