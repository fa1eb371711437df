/* api.h - ch11-json-mask: the mask step of JSON-constrained decoding, the function the learner
 * writes, as the check calls it. Its type is core/llm's seam llm_json_mask_fn: the engine
 * (llm_json_gen_opts.mask) can decode with it in place of the library's llm_json_mask. */
#ifndef EX_API_H
#define EX_API_H
#include "mlsys.h"
#include "llm/llm.h"

/* From the automaton's state s (core/llm/llm.h, json_mask.c), which tokens may come next?
 * For every token t = 0..g->V-1 write allowed[t] = 1 when
 *   - its bytes can continue valid JSON from s (llm_json_feed_token on a COPY of s says so;
 *     tokens with g->tok_len[t] == 0, the specials, never can), and
 *   - budget <= 0 (no limit), or the text can still be completed in time: budget counts the
 *     tokens left, this one included, and every token writes at least one byte, so the
 *     fewest bytes that close the text after t (llm_json_min_close) must be <= budget - 1;
 * else allowed[t] = 0. The end-of-text token g->eos (when >= 0) is allowed exactly when the
 * value is already complete (llm_json_done(s)). s is not changed. Returns how many tokens
 * are allowed. */
int json_mask(llm_json_grammar *g, const llm_json_state *s, int budget, unsigned char *allowed);

#endif
