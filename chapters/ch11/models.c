/* models.c - chapter 11's model plumbing: load the target/draft pair and the tokenizer,
 * make the corpus-like prompts both labs measure on, print tokens safely. */
#include "models.h"
#include "../common/common.h"
#include "../../core/nn/nn.h"
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int ch11_models_load(ch11_models *m, const char *model, const char *draft, const char *tok,
                     int run, int target_rows, char *err, size_t n)
{
    memset(m, 0, sizeof *m);
    char e[400], pm[PATH_MAX], pd[PATH_MAX], pt[PATH_MAX];
    model = lab_asset_path(model, pm, sizeof pm);
    draft = draft ? lab_asset_path(draft, pd, sizeof pd) : NULL;
    tok = lab_asset_path(tok, pt, sizeof pt);
    if (llm_checkpoint_read(model, &m->tc, &m->tw, e, sizeof e)) {
        snprintf(err, n, "%s (the lab's model: see assets/models/README.md)", e);
        return -1;
    }
    if (draft) {
        if (llm_checkpoint_read(draft, &m->dc, &m->dw, e, sizeof e)) {
            snprintf(err, n, "%s (the draft model: see assets/models/README.md)", e);
            llm_weights_free(&m->tw);
            return -1;
        }
        m->have_draft = 1;
        if (m->dc.vocab_size != m->tc.vocab_size) {
            snprintf(err, n, "%s: vocabulary %d, the target's is %d: a draft must share the "
                     "target's tokenizer", draft, m->dc.vocab_size, m->tc.vocab_size);
            goto fail;
        }
    }
    if (llm_tokfile_read(tok, m->tc.vocab_size, &m->tok, e, sizeof e)) {
        snprintf(err, n, "%s", e);
        goto fail;
    }
    if (!run)
        return 0;
    llm_engine_opts eo = {.max_num_seqs = 1, .max_num_batched_tokens = 256};
    if (llm_fwd_init(&m->te, &m->tc, &m->tw, target_rows, err, n) ||
        llm_kv_init_contiguous(&m->tkv, &m->tc, 1, 0, err, n) ||
        !(m->eng = llm_engine_create(&m->tc, &m->tw, &eo, err, n))) {
        llm_kv_free(&m->tkv);
        llm_fwd_fini(&m->te);
        llm_tokenizer_free(&m->tok);
        goto fail;
    }
    m->have_run = 1;
    return 0;
fail:
    llm_weights_free(&m->tw);
    if (m->have_draft)
        llm_weights_free(&m->dw);
    memset(m, 0, sizeof *m);
    return -1;
}

void ch11_models_free(ch11_models *m)
{
    if (m->have_run) {
        llm_engine_free(m->eng);
        llm_kv_free(&m->tkv);
        llm_fwd_fini(&m->te);
    }
    llm_tokenizer_free(&m->tok);
    llm_weights_free(&m->tw);
    if (m->have_draft)
        llm_weights_free(&m->dw);
    memset(m, 0, sizeof *m);
}

int ch11_prompt(const ch11_models *m, int i, int *ids, char *text, size_t cap)
{
    char doc[LLM_DOC_MAX];
    size_t len = llm_corpus_doc(1, LLM_SPLIT_VAL, (uint64_t)i, doc, sizeof doc, NULL);
    size_t want = 12 + (size_t)(i % 8) * 4, cut = want < len ? want : len;
    while (cut < len && cut < want + 16 && doc[cut] != ' ' && doc[cut] != '\n')
        cut++;                                     /* finish the word */
    if (cut >= cap)
        cut = cap - 1;
    memcpy(text, doc, cut);
    text[cut] = 0;
    for (size_t k = 0; k < cut; k++)
        if (text[k] == '\n')
            text[k] = ' ';
    return (int)llm_bpe_encode_prompt(&m->tok, doc, cut, 1, ids);
}

const char *ch11_tok_text(const ch11_models *m, int id, char *buf, size_t n)
{
    size_t used = 0;
    buf[0] = 0;
    if (id < 0 || id >= m->tok.vocab_size)
        return buf;
    if (id == LLM_TOK_EOS || id == LLM_TOK_BOS) {
        snprintf(buf, n, "%s", id == LLM_TOK_EOS ? "</s>" : "<s>");
        return buf;
    }
    for (int k = 0; k < m->tok.bytes_len[id] && used + 5 < n; k++) {
        unsigned char c = (unsigned char)m->tok.bytes[id][k];
        if (c == '\n')
            used += (size_t)snprintf(buf + used, n - used, "\\n");
        else if (c < 0x20 || c >= 0x7f)
            used += (size_t)snprintf(buf + used, n - used, "\\x%02x", c);
        else
            buf[used++] = (char)c, buf[used] = 0;
    }
    return buf;
}

const char *ch11_set_gemm(const char *choice)
{
    if (choice && !strcmp(choice, "ref"))
        nn_set_gemm_kernel(NN_GEMM_REF);
    else if (choice && !strcmp(choice, "blas"))
        nn_set_gemm_kernel(NN_GEMM_BLAS);
    else if (choice && !strcmp(choice, "invariant"))
        nn_set_gemm_kernel(NN_GEMM_INVARIANT);
    return nn_gemm_kernel_name(nn_get_gemm_kernel());
}
