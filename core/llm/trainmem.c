/* trainmem.c - what a training run needs in memory, worked out from its flags before any
 * rank starts, so that a size in range that cannot fit (a batch of a million sequences) is
 * refused in one line instead of killing a rank halfway. Per rank: the weights and their
 * gradients, AdamW's two moments (a 1/world shard under ZeRO, with its padded exchange
 * buffer), the activations of its share of the batch (nn_tf_bytes, the table nn_tf_init
 * allocates from), its token windows, and the data kit every rank builds (the corpus text
 * and its token ids); then the parent's own data kit and, on resume, the checkpoint it
 * holds. A floor rather than a ceiling: the libraries' own buffers come on top. */
#include "llm.h"

#include <stdio.h>
#include <string.h>

void llm_train_mem_estimate(const llm_config *cfg, int batch, int world, int zero,
                            size_t data_bytes, int resume, llm_train_mem *m)
{
    llm_config c = *cfg;
    char why[128];
    memset(m, 0, sizeof *m);
    if (llm_config_check(&c, why, sizeof why) || batch < 1 || world < 1)
        return;
    double nf = (double)llm_file_floats(&c), np = (double)llm_param_count(&c);
    double text = (double)(data_bytes ? data_bytes : LLM_DATAKIT_TRAIN_BYTES);
    text += text / 10;                             /* the validation split */
    int bl = batch / world > 0 ? batch / world : 1;
    m->weights = 4 * nf;
    m->grads = 4 * nf;
    m->optimizer = 8 * np / (zero ? world : 1);
    m->zero_buf = zero ? 4 * nf : 0;
    m->activations = nn_tf_bytes(&c, bl, c.seq_len);
    m->windows = 2.0 * 4 * bl * c.seq_len;
    m->data = text + 4 * text;                     /* the text, and at most one id per byte */
    m->per_rank = m->weights + m->grads + m->optimizer + m->zero_buf + m->activations +
                  m->windows + m->data;
    m->parent = m->data + (resume ? m->weights + 8 * np : 0);
    m->total = world * m->per_rank + m->parent;
}

int llm_train_mem_check(const llm_config *c, int batch, int world, int zero,
                        size_t data_bytes, int resume, char *err, size_t errlen)
{
    llm_train_mem m;
    llm_train_mem_estimate(c, batch, world, zero, data_bytes, resume, &m);
    double have = (double)mlsys_mem_available();
    if (m.total <= have)
        return 0;
    char need[32], free_[32], act[32];
    mlsys_format_approx(m.total, need, sizeof need);
    mlsys_format_approx(have, free_, sizeof free_);
    mlsys_format_approx(m.activations, act, sizeof act);
    int bl = batch / world > 0 ? batch / world : 1;
    snprintf(err, errlen, "the run needs at least %s of memory (%d rank%s, each with %s of "
             "activations for %d sequence%s of %d tokens), more than this machine has free: "
             "%s; lower --batch, --seq-len or the model's size", need, world,
             world == 1 ? "" : "s", act, bl, bl == 1 ? "" : "s", c->seq_len, free_);
    return -1;
}
