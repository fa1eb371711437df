/* cli.h - the program's commands, one file each under lab/cli/ (main.c dispatches to them):
 * each takes argv with argv[0] the command's name and returns the exit status (0 done, 1 a
 * job or a check failed, 2 a usage error, 130 stopped with Ctrl-C). */
#ifndef MLSYS_CLI_H
#define MLSYS_CLI_H

#include "../../core/llm/trainer.h"

/* bench.c: parse the flags, run the job, print the table. Exit status: 0 fine, 1 the job
 * failed or some results were wrong, 2 a bad flag or value (one line on stderr). */
int bench_main(int argc, char **argv);

/* doctor.c */
int doctor_main(int argc, char **argv);

/* train.c: `mlsys-lab train`; train_parse fills o from the flags (defaults first): 0, 1 for
 * --help (printed), 2 with one line in err. */
int train_main(int argc, char **argv);
int train_parse(train_lm_opts *o, int argc, char **argv, char *err, size_t errlen);

#endif
