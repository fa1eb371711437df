/* doctor.c - `mlsys-lab doctor`: what works on this machine, with real self-tests. It prints
 * the machine report of core/selftest.c, the same one ch01/verify-setup prints (the doctor
 * is that lab grown up into a command); its mpi self-test runs ch01/hello-distributed under
 * mpirun. */
#include "cli.h"
#include "../../core/probe.h"

static const lab_flag doctor_flags[] = {
    {"timeout", 0, FLAG_DOUBLE, "30", NULL, 0, 86400,
     "seconds a self-test's blocked send/recv waits before 'deadlock suspected'"},
    {NULL, 0, 0, NULL, NULL, 0, 0, NULL}
};

const lab_command doctor_command = {
    .name = "doctor",
    .args = "",
    .summary = "What works on this machine (cores, backends, GPUs), with real self-tests.",
    .flags = doctor_flags,
};

int doctor_main(int argc, char **argv)
{
    lab_args a;
    int rc = lab_command_args(&doctor_command, argc, argv, &a);
    if (rc >= 0)
        return rc;
    double t = lab_arg_double(&a, "timeout");
    lab_args_free(&a);
    return probe_report(t, "ch01/hello-distributed");
}
