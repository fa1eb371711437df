/* verify_setup.c - ch01/verify-setup, also `mlsys-lab doctor`. Teaches what a distributed
 * program needs from its machine: cores, separate processes, a working transport, and which
 * backends (shm, mpi, nccl) can run here and why not. Unlike the original, the self-test is
 * real: 2 and then 4 ranks all-reduce r+1 and must get 3 and 10 (forked by mlsys_run_fn);
 * the mpi backend counts as working only when 2 ranks of ch01/hello-distributed have run
 * under mpirun through the MPI plugin (lab/mpirun.h) and got the right sum. Single process. */
#include "../common/common.h"
#include "../../lab/backend/mpirun.h"
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define W 50
#define MAX_TEST_RANKS 8

/* Shared with the forked self-test ranks (MAP_SHARED survives fork). */
typedef struct selftest_result {
    float value[MAX_TEST_RANKS];
    int done[MAX_TEST_RANKS];
} selftest_result;

/* Every rank contributes r+1; after all_reduce(SUM) every rank must hold N(N+1)/2. */
static int selftest_rank(mlsys_comm *c, void *arg)
{
    selftest_result *res = arg;
    int r = mlsys_rank(c), n = mlsys_size(c);
    float v = (float)(r + 1);
    if (mlsys_allreduce(c, &v, &v, 1, MLSYS_F32, MLSYS_SUM) != MLSYS_OK) {
        fprintf(stderr, "rank %d: self-test all_reduce failed: %s\n", r, mlsys_errmsg(c));
        return 1;
    }
    if (r < MAX_TEST_RANKS) {
        res->value[r] = v;
        res->done[r] = 1;
    }
    return v == (float)(n * (n + 1) / 2) ? 0 : 1;
}

/* Runs one self-test and prints its line. Returns 1 when it passed. */
static int selftest(int n, int timeout_ms)
{
    selftest_result *res = mmap(NULL, sizeof *res, PROT_READ | PROT_WRITE,
                                MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    int expected = n * (n + 1) / 2, ok = 0;
    char why[256] = "";
    if (res == MAP_FAILED) {
        printf("[FAIL] self-test, %d ranks: cannot map shared memory\n", n);
        return 0;
    }
    memset(res, 0, sizeof *res);
    fflush(NULL);   /* the forked ranks must not inherit unwritten output */
    int rc = mlsys_run_fn(n, timeout_ms, selftest_rank, res, why, sizeof why);
    int all_done = 1, all_equal = 1;
    for (int r = 0; r < n; r++) {
        all_done &= res->done[r];
        all_equal &= res->value[r] == res->value[0];
    }
    if (rc == 0 && all_done && all_equal && res->value[0] == (float)expected) {
        ok = 1;
        char expr[128];
        common_sum_expr(expr, sizeof expr, 1, n);
        printf("[OK] self-test, %d ranks: all_reduce(SUM) of r+1 = %.1f on every rank "
               "(expected %s = %d)\n", n, (double)res->value[0], expr, expected);
    } else if (rc != 0) {
        printf("[FAIL] self-test, %d ranks: %s\n", n, why[0] ? why : "a rank failed");
    } else {
        printf("[FAIL] self-test, %d ranks: rank 0 got %.1f, expected %d\n", n,
               (double)res->value[0], expected);
    }
    munmap(res, sizeof *res);
    return ok;
}

/* ---- the mpi backend: a real 2-rank job under mpirun ---- */

#define MPI_TEST_RANKS 2

typedef struct mpi_capture {
    int hello[MPI_TEST_RANKS];   /* "Rank r/2: hello from PID" seen */
    int correct;                 /* rank 0 printed "correct: yes" */
    char last_err[3][256];       /* the last lines on stderr (mpirun's and the ranks') */
    int nerr;
} mpi_capture;

static void mpi_line(void *u, int rank, int is_err, const char *line)
{
    mpi_capture *m = u;
    (void)rank;
    if (is_err) {
        if (!line[0])
            return;
        if (m->nerr == 3) {
            memmove(m->last_err[0], m->last_err[1], sizeof m->last_err[0] * 2);
            m->nerr = 2;
        }
        snprintf(m->last_err[m->nerr++], sizeof m->last_err[0], "%s", line);
        return;
    }
    int r, of;
    if (sscanf(line, "Rank %d/%d: hello from PID", &r, &of) == 2 && of == MPI_TEST_RANKS &&
        r >= 0 && r < MPI_TEST_RANKS)
        m->hello[r] = 1;
    if (!strcmp(line, "correct: yes"))
        m->correct = 1;
}

/* Runs `mlsys-lab worker ch01/hello-distributed -w 2 --backend mpi` under mpirun. Returns 1
 * when it passed; otherwise writes why into why. *ms gets the wall time. */
static int mpi_selftest(int timeout_ms, char *why, size_t n, double *ms)
{
    char plugin[PATH_MAX], exe[PATH_MAX], err[512], reason[300];
    struct stat sb;
    if (stat(mpirun_plugin_path(plugin, sizeof plugin), &sb) != 0) {
        snprintf(why, n, "the MPI plugin %.300s is missing (build it with `make`, which needs "
                 "mpicc from libopenmpi-dev)", plugin);
        return 0;
    }
    ssize_t k = readlink("/proc/self/exe", exe, sizeof exe - 1);
    exe[k < 0 ? 0 : k] = 0;
    char ranks[16];
    snprintf(ranks, sizeof ranks, "%d", MPI_TEST_RANKS);
    char *args[] = {"worker", "ch01/hello-distributed", "--world-size", ranks, "--backend",
                    "mpi", NULL};
    mpirun_opts o = {.world_size = MPI_TEST_RANKS, .timeout_ms = timeout_ms};
    mpi_capture cap;
    memset(&cap, 0, sizeof cap);
    mlsys_job_sink sink = {mpi_line, NULL, &cap};
    uint64_t t0 = mlsys_now_ns(), deadline = t0 + (uint64_t)(timeout_ms + 15000) * 1000000ull;
    fflush(NULL);
    mpirun_job *j = mpirun_start(&o, exe, args, err, sizeof err);
    if (!j) {
        snprintf(why, n, "mpirun did not start: %.300s", err);
        return 0;
    }
    int rc, late = 0;
    while ((rc = mpirun_wait(j, &sink, 200, reason, sizeof reason)) == 1)
        if (!late && mlsys_now_ns() > deadline) {
            late = 1;                /* mpirun hangs at times: stop it, then collect it */
            mpirun_stop(j);
        }
    *ms = (double)(mlsys_now_ns() - t0) / 1e6;
    mpirun_free(j);
    char *above = strstr(reason, "; see the lines above");    /* captured here, not shown */
    if (above)
        memmove(above, above + 21, strlen(above + 21) + 1);
    int ok = rc == 0 && !late && cap.correct;
    for (int r = 0; r < MPI_TEST_RANKS; r++)
        ok &= cap.hello[r];
    if (ok)
        return 1;
    if (late)
        snprintf(why, n, "the 2-rank self-test under mpirun did not finish in %d s (stopped)",
                 timeout_ms / 1000 + 15);
    else if (rc)
        snprintf(why, n, "the 2-rank self-test under mpirun failed: %.300s%s%.250s", reason,
                 cap.nerr ? "; last error: " : "", cap.nerr ? cap.last_err[cap.nerr - 1] : "");
    else
        snprintf(why, n, "the 2-rank self-test under mpirun ended without both hello lines "
                 "and the right all_reduce sum");
    return 0;
}

static int run_doctor(double timeout_s)
{
    int timeout_ms = (int)(timeout_s * 1000.0);
    char exe[4096] = "?";
    ssize_t el = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (el > 0)
        exe[el] = 0;

    common_banner(stdout, W, "MLSys Lab runtime");
    printf("[OK] mlsys-lab %s at %s\n", MLSYS_VERSION, exe);

    common_banner(stdout, W, "Cores and processes");
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    printf("[OK] %ld CPU core%s online (sysconf)\n", cores, cores == 1 ? "" : "s");
    printf("[OK] fork + exec: every rank is its own process (own memory, explicit messages)\n");
    printf("[INFO] more ranks than cores still work: waiting ranks spin, then sleep\n");

    common_banner(stdout, W, "Self-test (shm backend)");
    int st2 = selftest(2, timeout_ms);
    int st4 = selftest(4, timeout_ms);
    int shm_ok = st2 && st4;

    common_banner(stdout, W, "CUDA");
    char why[256];
    int gpus = probe_gpu_count(why, sizeof why);
    if (gpus > 0) {
        int rt, drv;
        probe_cuda_versions(&rt, &drv);
        long cudnn = probe_cudnn_version();
        printf("[OK] CUDA runtime %d.%d, driver %d.%d\n", rt / 1000, (rt % 1000) / 10,
               drv / 1000, (drv % 1000) / 10);
        if (cudnn)
            printf("[OK] cuDNN %ld\n", cudnn);
        else
            printf("[INFO] cuDNN not found (no chapter needs it)\n");
        printf("[OK] %d GPU%s\n", gpus, gpus == 1 ? "" : "s");
        for (int i = 0; i < gpus; i++) {
            char name[256];
            double gib = 0;
            if (probe_gpu_info(i, name, sizeof name, &gib) == 0)
                printf("     GPU %d: %s, %.1f GiB\n", i, name, gib);
            else
                printf("     GPU %d: (name unknown: no driver API)\n", i);
        }
    } else {
        printf("[INFO] no GPU: %s\n", why);
        printf("[INFO] CPU + the shm backend (--backend gloo) is all every chapter needs\n");
    }

    common_banner(stdout, W, "Backends");
    if (shm_ok)
        printf("[OK] shm   (gloo)  CPU, one machine: shared memory between processes\n");
    else
        printf("[NO] shm   (gloo)  CPU, one machine: the self-test failed (see above)\n");
    char path[1024], ver[256];
    int mpi_ok = probe_mpirun(path, sizeof path, ver, sizeof ver);
    const char *mv = strstr(ver, "Open MPI") ? strstr(ver, "Open MPI") : ver;
    char mpiver[256];
    snprintf(mpiver, sizeof mpiver, "%s", mv[0] ? mv : "version unknown");
    char *paren = strchr(mpiver, ')');
    if (paren && paren[1] == ' ')
        memmove(paren, paren + 1, strlen(paren));     /* "Open MPI) 4.1.4" -> "Open MPI 4.1.4" */
    char mwhy[700];
    double mms = 0;
    int mpi_works = mpi_ok && mpi_selftest(timeout_ms, mwhy, sizeof mwhy, &mms);
    if (mpi_works)
        printf("[OK] mpi           HPC clusters: mpirun at %s, %s; self-test: %d ranks under "
               "mpirun all-reduced through the MPI plugin (%.0f ms)\n", path, mpiver,
               MPI_TEST_RANKS, mms);
    else if (mpi_ok)
        printf("[NO] mpi           HPC clusters: mpirun at %s, %s, but %s\n", path, mpiver,
               mwhy);
    else
        printf("[NO] mpi           HPC clusters: mpirun is not on PATH (install openmpi-bin and "
               "libopenmpi-dev)\n");
    int nccl_ver = 0;
    char nwhy[256];
    int nccl_lib = probe_nccl(&nccl_ver, nwhy, sizeof nwhy);
    int nccl_ok = nccl_lib && gpus > 0;
    if (!nccl_lib)
        printf("[NO] nccl          GPU, NVIDIA only: %s\n", nwhy);
    else if (gpus == 0)
        printf("[NO] nccl          GPU, NVIDIA only: NCCL needs one GPU per rank: 0 GPUs found\n");
    else
        printf("[OK] nccl          GPU, NVIDIA only: NCCL %d.%d.%d, up to %d rank%s (one GPU "
               "each)\n", nccl_ver / 10000, (nccl_ver / 100) % 100, nccl_ver % 100, gpus,
               gpus == 1 ? "" : "s");
    if (nccl_ok)
        printf("Recommendation: use --backend nccl for GPU runs\n");
    if (mpi_works)
        printf("Recommendation: --backend mpi runs the same labs under mpirun (and across "
               "hosts with --host or --hostfile)\n");
    if (shm_ok)
        printf("Recommendation: use --backend gloo (shm) for CPU runs and testing\n");

    common_banner(stdout, W, "Summary");
    int ready = shm_ok;
    if (ready) {
        printf("[OK] ready: runtime present, processes fork, the self-tests passed\n");
        printf("Next steps:\n");
        printf("  mlsys-lab run ch01/hello-distributed\n");
        printf("  then chapter 2: mlsys-lab run ch02/send-recv-basic\n");
    } else {
        printf("[WARN] not ready: the shm self-test failed; the distributed labs will not run\n");
    }
    if (nccl_ok)
        printf("[TIP] CUDA and NCCL are both here: try --backend nccl (one GPU per rank)\n");
    else
        printf("[TIP] every exercise works on CPU with --backend gloo (our shm transport)\n");
    fflush(stdout);
    return ready ? 0 : 1;
}

static int verify_main(const lab_args *a)
{
    double t = lab_arg_double(a, "timeout");
    return run_doctor(t > 0 ? t : 30.0);
}

int lab_doctor_main(void)
{
    return run_doctor(30.0);
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
