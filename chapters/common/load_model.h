/* load_model.h - what the labs over the lab's language model share: the model and tokenizer
 * their --model and --tokenizer flags name, found from any folder and read in one call. */
#ifndef CHAPTERS_COMMON_LOAD_MODEL_H
#define CHAPTERS_COMMON_LOAD_MODEL_H

#include "../../lab/lab.h"
#include "../../core/llm/llm.h"

/* The files of the lab's "model" and "tokenizer" flags (lab_asset_path) read into c, w and t
 * (w NULL: the model's configuration only, from its header; t NULL: no tokenizer): 0, or 2
 * after one line on stderr, "mlsys-lab: WHO: why", with nothing left allocated. */
int common_load_model(const lab_args *a, const char *who, llm_config *c, llm_weights *w,
                      llm_tokenizer *t);

#endif
