/* exercise_commands.c - the flags of the exercise commands (exercises, check, hint, watch,
 * reset, solution, dev-check) as lab_command tables, so that their help, parsing and errors
 * come from lab/flags.c like every other command's. The commands live in exercise_cli.c. */
#include "exercise.h"

#define END {NULL, 0, 0, NULL, NULL, 0, 0, NULL}

static const lab_flag exercises_flags[] = {
    {"chapter", 0, FLAG_INT, NULL, NULL, 1, 99, "only this chapter's exercises"},
    END
};
const lab_command exercises_command = {
    .name = "exercises", .args = "", .summary = "The exercises, with what is done.",
    .flags = exercises_flags,
};

static const lab_flag check_flags[] = {
    {"all", 0, FLAG_BOOL, NULL, NULL, 0, 0, "check every exercise (no ID)"},
    {"seed", 0, FLAG_INT, "0", NULL, 0, FLAG_NO_MAX,
     "the number a predict question showed: answers that question (with --answer)"},
    {"answer", 0, FLAG_STR, NULL, NULL, 0, 0, "your answer to a predict question"},
    END
};
const lab_command check_command = {
    .name = "check", .args = "[ID]", .max_pos = 1,
    .summary = "Check an exercise (the next pending one without ID), or answer a predict "
               "question.",
    .flags = check_flags,
    .notes = "A predict question shows its number N; `check ID --seed N --answer VALUE` "
             "answers that question.",
};

const lab_command hint_command = {
    .name = "hint", .args = "ID", .min_pos = 1, .max_pos = 1, .missing = "which exercise?",
    .summary = "The next hint for an exercise, one at a time.",
    .flags = (const lab_flag[]){END},
};

static const lab_flag watch_flags[] = {
    {"poll", 0, FLAG_BOOL, NULL, NULL, 0, 0,
     "look at the files every second instead of inotify (also MLSYS_WATCH_POLL=1)"},
    {"max-checks", 0, FLAG_INT, "0", NULL, 0, FLAG_NO_MAX, "stop after N checks (0: never)"},
    END
};
const lab_command watch_command = {
    .name = "watch", .args = "[ID]", .max_pos = 1,
    .summary = "Check again whenever an exercise file is saved.",
    .flags = watch_flags,
};

static const lab_flag reset_flags[] = {
    {"all", 0, FLAG_BOOL, NULL, NULL, 0, 0, "every exercise"},
    END
};
const lab_command reset_command = {
    .name = "reset", .args = "ID", .max_pos = 1,
    .summary = "Put the starter back (the old file is kept as .bak).",
    .flags = reset_flags,
};

static const lab_flag solution_flags[] = {
    {"force", 0, FLAG_BOOL, NULL, NULL, 0, 0, "show it before the exercise passes"},
    END
};
const lab_command solution_command = {
    .name = "solution", .args = "ID", .min_pos = 1, .max_pos = 1, .missing = "which exercise?",
    .summary = "The reference solution, once the exercise passes.",
    .flags = solution_flags,
};

const lab_command dev_check_command = {
    .name = "dev-check", .args = "",
    .summary = "Prove the exercises consistent: every starter fails, every solution passes.",
    .flags = (const lab_flag[]){END},
};
