/* cli.h - the program's commands, one file each under lab/cli/ (main.c dispatches to them):
 * each takes argv with argv[0] the command's name and returns the exit status (0 done, 1 a
 * job or a check failed, 2 a usage error, 130 stopped with Ctrl-C). */
#ifndef MLSYS_CLI_H
#define MLSYS_CLI_H

/* doctor.c */
int doctor_main(int argc, char **argv);

#endif
