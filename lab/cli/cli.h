/* cli.h - the program's commands, one file each under lab/cli/ (main.c dispatches to them):
 * each takes argv with argv[0] the command's name and returns the exit status (0 done, 1 a
 * job or a check failed, 2 a usage error, 130 stopped with Ctrl-C). */
#ifndef MLSYS_CLI_H
#define MLSYS_CLI_H

#include "../lab.h"
#include "../../core/llm/trainer.h"

/* bench.c: parse the flags, run the job, print the table. Exit status: 0 fine, 1 the job
 * failed or some results were wrong, 2 a bad flag or value (one line on stderr). */
extern const lab_command bench_command;
int bench_main(int argc, char **argv);

/* doctor.c */
extern const lab_command doctor_command;
int doctor_main(int argc, char **argv);

/* loadgen.c: `mlsys-lab loadgen` against an OpenAI-compatible server */
extern const lab_command loadgen_command;
int loadgen_main(int argc, char **argv);

/* generate.c, model.c (and what `model info` measures: generate.h) */
extern const lab_command generate_command, model_info_command, model_init_command;
int generate_main(int argc, char **argv);
int model_main(int argc, char **argv);              /* "model info FILE", "model init FILE" */

/* replay.c: `mlsys-lab replay FILE [ui flags]` */
extern const lab_command replay_command;
int replay_main(int argc, char **argv);

/* train.c: `mlsys-lab train`; train_parse fills o from the flags (defaults first): 0, 1 for
 * --help (printed), 2 with one line in err. */
extern const lab_command train_command;
int train_main(int argc, char **argv);
int train_rm_run(const lab_args *a);        /* train_rm.c: train --reward-model, its flags */
int train_parse(train_lm_opts *o, int argc, char **argv, char *err, size_t errlen);

/* commands.c: every command declared with a flag table (help, tests of the short flags) */
extern const lab_command *const cli_declared[];

#endif
