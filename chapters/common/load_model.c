/* load_model.c - the lab's model and tokenizer as a lab's --model and --tokenizer flags name
 * them (load_model.h): chapters 8-14's labs over the real model read them here, through the
 * one loader (core/llm's llm_model_read) and the one search for shipped files
 * (lab_asset_path). */
#include "load_model.h"
#include <limits.h>

int common_load_model(const lab_args *a, const char *who, llm_config *c, llm_weights *w,
                      llm_tokenizer *t)
{
    char mp[PATH_MAX + 64], tp[PATH_MAX + 64], err[512];
    const char *mpath = lab_asset_path(lab_arg_text(a, "model"), mp, sizeof mp);
    const char *tpath = t ? lab_asset_path(lab_arg_text(a, "tokenizer"), tp, sizeof tp) : NULL;
    if (llm_model_read(mpath, tpath, c, w, t, err, sizeof err)) {
        fprintf(stderr, "mlsys-lab: %s: %s\n", who, err);
        return 2;
    }
    return 0;
}
