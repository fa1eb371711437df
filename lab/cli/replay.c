/* replay.c - `mlsys-lab replay FILE`: a trace written with --trace, read back into events and
 * output lines (core/trace_read.c), played in the same views as a live job. */
#include "cli.h"
#include "../ui/ui.h"
#include "../../core/trace.h"
#include <stdio.h>
#include <string.h>

const lab_command replay_command = {
    .name = "replay", .args = "FILE", .min_pos = 1, .max_pos = 1,
    .missing = "which trace? (mlsys-lab replay FILE, a file written with --trace)",
    .summary = "Play a trace written with --trace in the lab's views.",
    .flags = ui_flags,
};

int replay_main(int argc, char **argv)
{
    lab_args a;
    int rc = lab_command_args(&replay_command, argc, argv, &a);
    if (rc >= 0)
        return rc;
    ui_opts o;
    ui_opts_from(&a, &o);
    const char *path = a.pos[0];
    char err[512];
    mlsys_trace t;
    if (mlsys_trace_load(path, &t, err, sizeof err) != 0) {
        fprintf(stderr, "mlsys-lab: replay: %s\n", err);
        lab_args_free(&a);
        return 2;
    }
    const char *base = strrchr(path, '/');
    ui_screen *s = run_create_replay(base ? base + 1 : path, &t);
    lab_args_free(&a);
    return ui_run(&o, s);
}
