/* runner.c - the model runner: the step's plan becomes the rows of ONE forward (sequence,
 * position, token), so every weight matrix is read once per step whether the rows are a
 * prompt chunk, a decode, or both mixed; then each sequence whose rows reached its last
 * token draws its next token from its own sampler. The arithmetic is llm_forward's. */
#include "serve.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int llm_runner_init(llm_runner *r, const llm_config *c, const llm_weights *w, llm_kv *kv,
                    int max_rows, int max_seqs, char *err, size_t errlen)
{
    memset(r, 0, sizeof *r);
    /* the engine's scratch is cut in chunks of at most 256 rows: a longer step is several
     * GEMMs per weight, which changes nothing in the result (rows are independent) */
    if (llm_engine_init(&r->e, c, w, max_rows < 256 ? max_rows : 256, err, errlen))
        return -1;
    r->kv = kv;
    r->max_rows = max_rows;
    r->rseq = mlsys_xmalloc((size_t)max_rows * 3 * sizeof(int));
    r->rpos = r->rseq + max_rows;
    r->rtok = r->rpos + max_rows;
    r->want = mlsys_xmalloc((size_t)max_rows);
    r->logits = mlsys_xmalloc((size_t)max_seqs * c->vocab_size * sizeof(float));
    return 0;
}

void llm_runner_fini(llm_runner *r)
{
    llm_engine_fini(&r->e);
    free(r->rseq);
    free(r->want);
    free(r->logits);
    memset(r, 0, sizeof *r);
}

int llm_runner_run(llm_runner *r, const llm_sched_item *items, int n_items, int *next,
                   char *err, size_t errlen)
{
    int n = 0;
    for (int i = 0; i < n_items; i++) {
        const llm_sched_item *it = &items[i];
        const llm_seq *s = it->s;
        if (n + it->n > r->max_rows) {
            snprintf(err, errlen, "runner: %d rows planned, room for %d", n + it->n,
                     r->max_rows);
            return -1;
        }
        for (int k = 0; k < it->n; k++, n++) {
            r->rseq[n] = s->kv_seq;
            r->rpos[n] = it->start + k;
            r->rtok[n] = s->tok[it->start + k];
            /* logits only where the rows reach the sequence's last token */
            r->want[n] = k == it->n - 1 && it->start + it->n == s->n_tok;
        }
    }
    if (n > 0 && llm_forward(&r->e, r->kv, n, r->rseq, r->rpos, r->rtok, r->want, r->logits,
                             err, errlen))
        return -1;
    int V = r->e.c.vocab_size, w = 0;
    for (int i = 0; i < n_items; i++) {
        llm_seq *s = items[i].s;
        next[i] = -1;
        if (items[i].start + items[i].n == s->n_tok)
            next[i] = llm_sample(&s->sampler, r->logits + (size_t)w++ * V);
    }
    return 0;
}
