/* verify_setup.c - ch01/verify-setup: what a distributed program needs from its machine,
 * checked for real: cores, separate processes, a working transport (2 and 4 ranks
 * all-reduce), which backends (shm, mpi, nccl) can run here and why not. Unlike the
 * original, the self-tests really run; the report is core/selftest.c's, the same one
 * `mlsys-lab doctor` prints (its mpi self-test runs ch01/hello-distributed). Single process. */
#include "../common/common.h"

static int verify_main(const lab_args *a)
{
    double t = lab_arg_double(a, "timeout");
    return probe_report(t > 0 ? t : 30.0, "ch01/hello-distributed");
}

const lab ch01_verify_setup_lab = {
    .id = "ch01/verify-setup",
    .title = "Verify your setup",
    .summary = "cores, backends (shm, mpi, nccl), GPUs, and a real 2- and 4-rank self-test",
    .flags = (const lab_flag[]){{NULL, 0, 0, NULL, NULL, 0, 0, NULL}},
    .port = 0,   /* single process; the self-test ranks use the runtime's own rendezvous */
    .min_ranks = 1,
    .max_ranks = 1,
    .main = verify_main,
    .view = "log",
};
