/* model.c - the lab's model and tokenizer as a lab's --model and --tokenizer flags name them
 * (model.h): one loader for chapters 8-14's labs over the real model. */
#include "model.h"
#include "common.h"
#include <limits.h>

int common_load_model(const lab_args *a, const char *who, llm_config *c, llm_weights *w,
                      llm_tokenizer *t)
{
    char mp[PATH_MAX + 64], tp[PATH_MAX + 64], err[512];
    const char *mpath = lab_asset_path(lab_arg_text(a, "model"), mp, sizeof mp);
    const char *tpath = lab_asset_path(lab_arg_text(a, "tokenizer"), tp, sizeof tp);
    if (llm_checkpoint_read(mpath, c, w, err, sizeof err)) {
        fprintf(stderr, "mlsys-lab: %s: %s\n", who, err);
        return 2;
    }
    if (llm_tokfile_read(tpath, c->vocab_size, t, err, sizeof err)) {
        fprintf(stderr, "mlsys-lab: %s: %s\n", who, err);
        llm_weights_free(w);
        return 2;
    }
    return 0;
}
