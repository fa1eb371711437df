/* commands.c - the commands whose flags are declared in tables (lab.h's lab_command): one
 * list, so that `mlsys-lab help flags` and the tests can walk every command's flags as they
 * walk every lab's. */
#include "cli.h"
#include "../exercise/exercise.h"
#include "../ui/ui.h"

const lab_command *const cli_declared[] = {
    &train_command, &generate_command, &model_info_command, &model_init_command,
    &bench_command, &doctor_command, &exercises_command, &check_command, &hint_command,
    &watch_command, &reset_command, &solution_command, &dev_check_command, &ui_command,
    &replay_command, &loadgen_command, NULL
};
