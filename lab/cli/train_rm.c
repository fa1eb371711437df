/* train_rm.c - `mlsys-lab train --reward-model`: chapter 13's reward model, a small
 * transformer (the draft model's body by default) with a scalar head, trained in one process
 * on preference pairs labelled by a rule ("the line whose sum is right beats one whose sum is
 * wrong or that is no sum line"); prints the held-out preference accuracy, writes the file. */
#include "cli.h"
#include "generate.h"
#include "../lab.h"
#include "../../core/rl/rlhf.h"
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

int train_rm_run(const lab_args *a)
{
    char err[1024];
    int rc;
    rl_rm_train_opts o;
    rl_rm_train_defaults(&o);
    if (lab_arg_given(a, "steps"))
        o.steps = (int)lab_arg_int(a, "steps");
    if (lab_arg_given(a, "lr"))
        o.lr = (float)lab_arg_double(a, "lr");
    if (lab_arg_given(a, "batch"))
        o.pairs = (int)lab_arg_int(a, "batch");
    if (lab_arg_given(a, "seed"))
        o.seed = (uint64_t)lab_arg_int(a, "seed");
    o.max_operand = (int)lab_arg_int(a, "max-operand");
    o.quiet = lab_arg_bool(a, "quiet");
    o.log_every = (int)lab_arg_int(a, "log-every");
    char init[PATH_MAX + 64], tokp[PATH_MAX + 64], out[PATH_MAX + 32];
    const char *ip = lab_asset_path(lab_arg_text(a, "rm-init"), init, sizeof init);
    const char *tp = lab_asset_path(GEN_DEFAULT_TOKENIZER, tokp, sizeof tokp);
    const char *dir = lab_arg_text(a, "out");
    snprintf(out, sizeof out, "%s/reward.bin", dir);
    if (o.max_operand > 49) {
        fprintf(stderr, "mlsys-lab train: --max-operand must be at most 49 (the corpus' sums)\n");
        return 2;
    }
    if (o.steps > 1000000 || o.pairs > 4096) {
        fprintf(stderr, "mlsys-lab train: --reward-model: at most 1000000 steps of 4096 pairs\n");
        return 2;
    }
    llm_config c;
    llm_weights w;
    llm_tokenizer t;
    if ((rc = gen_load_pair("train", ip, tp, &c, &w, &t)))
        return rc;
    rl_rm m;
    rl_rm_report rep;
    rc = 1;
    if (rl_rm_init(&m, &c, &w, err, sizeof err)) {
        fprintf(stderr, "mlsys-lab train: %s\n", err);
        goto done_w;
    }
    if (!o.quiet) {
        printf("Reward model: %s's body (%zu parameters) + a scalar head on the last token\n",
               ip, llm_param_count(&c));
        printf("Rule: for \"A + B =\" (operands 0..%d), the line with the right sum beats one "
               "with a wrong sum\n      or one that is no sum line; a fifth of the problems is "
               "held out\n", o.max_operand);
        printf("Loss: Bradley-Terry, -log σ(r_preferred - r_rejected); AdamW lr %g, %d steps "
               "of %d pairs\n\n", (double)o.lr, o.steps, o.pairs);
        fflush(stdout);
    }
    if (rl_rm_train(&m, &t, &o, &rep, err, sizeof err)) {
        fprintf(stderr, "mlsys-lab train: %s\n", err);
        goto done;
    }
    mkdir(dir, 0777);
    if (rl_rm_save(&m, out, err, sizeof err)) {
        fprintf(stderr, "mlsys-lab train: %s\n", err);
        goto done;
    }
    printf("loss %.4f -> %.4f (first and last 10 steps); training pairs %.1f%% right at the "
           "end\n", rep.first_loss, rep.last_loss, 100.0 * rep.train_acc);
    printf("held-out preference accuracy %.1f%% (%d pairs of problems never trained on; "
           "%.1f%% before)\n", 100.0 * rep.heldout_acc, o.eval_pairs, 100.0 * rep.heldout_acc0);
    printf("saved %s (%.1f s)\n", out, rep.seconds);
    rc = 0;
done:
    rl_rm_free(&m);
done_w:
    llm_weights_free(&w);
    llm_tokenizer_free(&t);
    return rc;
}
