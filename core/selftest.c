/* selftest.c - the machine report that `mlsys-lab doctor` and ch01/verify-setup print: cores,
 * a real self-test of the shm backend (2 and then 4 ranks all-reduce r+1 and must get 3 and
 * 10), CUDA and the GPUs, and which backends (shm, mpi, nccl) can run here and why not. The
 * mpi backend counts as working only when 2 ranks of the lab the caller names have run under
 * mpirun (through this program's run command) and got the right sum. */
#include "probe.h"
#include "mlsys.h"
#include <stdio.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define W 50
#define MAX_TEST_RANKS 8

/* A section of the report: its title between two rules of W '=' (the labs' banner). */
static void section(const char *title)
{
    char rule[W + 1];
    memset(rule, '=', W);
    rule[W] = 0;
    printf("%s\n %s\n%s\n", rule, title, rule);
}

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
        char expr[64] = "";       /* "1 + 2 + 3 + 4" */
        for (int r = 1, k = 0; r <= n && k < (int)sizeof expr; r++)
            k += snprintf(expr + k, sizeof expr - (size_t)k, "%s%d", r > 1 ? " + " : "", r);
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

/* What the self-test job printed: both hello lines and rank 0's verdict on stdout, the last
 * lines of stderr (the ranks' errors, then the runner's one line on how the job ended). */
typedef struct mpi_capture {
    int hello[MPI_TEST_RANKS];   /* "Rank r/2: hello from PID" seen */
    int correct;                 /* rank 0 printed "correct: yes" */
    char last_err[3][512];
    int nerr;
    char part[2][512];           /* a line not ended yet, per stream */
    size_t plen[2];
} mpi_capture;

static void mpi_line(mpi_capture *m, int is_err, const char *line)
{
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

/* Bytes read from stream k, cut into lines (a line longer than the buffer is cut). */
static void mpi_bytes(mpi_capture *m, int k, const char *b, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (b[i] == '\n' || m->plen[k] == sizeof m->part[k] - 1) {
            char line[sizeof m->part[k]];
            memcpy(line, m->part[k], m->plen[k]);
            line[m->plen[k]] = 0;
            m->plen[k] = 0;
            mpi_line(m, k, line);
            if (b[i] == '\n')
                continue;
        }
        m->part[k][m->plen[k]++] = b[i];
    }
}

/* The runner's last line names the lab: "mlsys-lab: LAB: WHY" -> WHY. */
static const char *runner_reason(const char *line, const char *lab)
{
    char pre[256];
    int k = snprintf(pre, sizeof pre, "mlsys-lab: %s: ", lab);
    const char *s = k > 0 && (size_t)k < sizeof pre && !strncmp(line, pre, (size_t)k)
                  ? line + k : line;
    return strncmp(s, "--backend mpi: ", 15) ? s : s + 15;
}

/* Runs `mlsys-lab run LAB --world-size 2 --backend mpi`: this program's own run command, so
 * the job starts the one way every mpi job starts (the runner, mpirun, the MPI plugin).
 * Returns 1 when it passed; otherwise writes why into why. *ms gets the wall time. A job
 * still running timeout + 15 s later is stopped (mpirun hangs at times). */
static int mpi_selftest(const char *lab, int timeout_ms, char *why, size_t n, double *ms)
{
    char ranks[16], secs[32];
    snprintf(ranks, sizeof ranks, "%d", MPI_TEST_RANKS);
    snprintf(secs, sizeof secs, "%g", timeout_ms / 1000.0);
    char *args[] = {"/proc/self/exe", "run", (char *)lab, "--world-size", ranks,
                    "--backend", "mpi", "--timeout", secs, NULL};
    int po[2], pe[2];
    mpi_capture cap;
    memset(&cap, 0, sizeof cap);
    *ms = 0;
    if (pipe2(po, O_CLOEXEC) != 0)
        goto no_pipe;
    if (pipe2(pe, O_CLOEXEC) != 0) {
        close(po[0]);
        close(po[1]);
        goto no_pipe;
    }
    uint64_t t0 = mlsys_now_ns(), deadline = t0 + (uint64_t)(timeout_ms + 15000) * 1000000ull;
    fflush(NULL);
    pid_t parent = getpid(), pid = fork();
    if (pid == 0) {
        setpgid(0, 0);
        mlsys_child_tie(parent, SIGKILL);
        dup2(po[1], STDOUT_FILENO);
        dup2(pe[1], STDERR_FILENO);
        execv(args[0], args);
        _exit(127);
    }
    close(po[1]);
    close(pe[1]);
    if (pid < 0) {
        close(po[0]);
        close(pe[0]);
        snprintf(why, n, "the 2-rank self-test under mpirun did not start: %s", strerror(errno));
        return 0;
    }
    struct pollfd fds[2] = {{po[0], POLLIN, 0}, {pe[0], POLLIN, 0}};
    int open_fds = 2, late = 0;
    while (open_fds > 0) {
        uint64_t now = mlsys_now_ns();
        if (!late && now > deadline) {
            late = 1;                    /* the run command stops its mpirun on SIGTERM */
            kill(-pid, SIGTERM);
            deadline = now + 5000000000ull;
        } else if (late == 1 && now > deadline) {
            late = 2;
            kill(-pid, SIGKILL);
        }
        if (poll(fds, 2, 200) < 0 && errno != EINTR)
            break;
        for (int k = 0; k < 2; k++) {
            if (fds[k].fd < 0 || !(fds[k].revents & (POLLIN | POLLHUP | POLLERR)))
                continue;
            char buf[4096];
            ssize_t got = read(fds[k].fd, buf, sizeof buf);
            if (got > 0) {
                mpi_bytes(&cap, k, buf, (size_t)got);
            } else if (got == 0 || (errno != EINTR && errno != EAGAIN)) {
                close(fds[k].fd);
                fds[k].fd = -1;
                open_fds--;
                if (cap.plen[k])
                    mpi_bytes(&cap, k, "\n", 1);
            }
        }
    }
    for (int k = 0; k < 2; k++)
        if (fds[k].fd >= 0)
            close(fds[k].fd);
    int st = 0;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
        ;
    *ms = (double)(mlsys_now_ns() - t0) / 1e6;
    int rc = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    int ok = rc == 0 && !late && cap.correct;
    for (int r = 0; r < MPI_TEST_RANKS; r++)
        ok &= cap.hello[r];
    if (ok)
        return 1;
    const char *last = cap.nerr ? runner_reason(cap.last_err[cap.nerr - 1], lab) : "";
    if (late)
        snprintf(why, n, "the 2-rank self-test under mpirun did not finish in %d s (stopped)",
                 timeout_ms / 1000 + 15);
    else if (rc == 2 && cap.nerr && !cap.hello[0] && !cap.hello[1] &&
             strstr(cap.last_err[cap.nerr - 1], "--backend mpi: "))
        snprintf(why, n, "%.400s", last);          /* refused before a rank started */
    else if (rc)
        snprintf(why, n, "the 2-rank self-test under mpirun failed: %.300s%s%.250s",
                 cap.nerr ? last : "the job failed", cap.nerr > 1 ? "; last error: " : "",
                 cap.nerr > 1 ? cap.last_err[cap.nerr - 2] : "");
    else
        snprintf(why, n, "the 2-rank self-test under mpirun ended without both hello lines "
                 "and the right all_reduce sum");
    return 0;
no_pipe:
    snprintf(why, n, "the 2-rank self-test under mpirun did not start: %s", strerror(errno));
    return 0;
}

int probe_report(double timeout_s, const char *mpi_lab)
{
    int timeout_ms = (int)(timeout_s * 1000.0);
    char exe[4096] = "?";
    ssize_t el = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (el > 0)
        exe[el] = 0;

    section("MLSys Lab runtime");
    printf("[OK] mlsys-lab %s at %s\n", MLSYS_VERSION, exe);

    section("Cores and processes");
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    printf("[OK] %ld CPU core%s online (sysconf)\n", cores, cores == 1 ? "" : "s");
    printf("[OK] fork + exec: every rank is its own process (own memory, explicit messages)\n");
    printf("[INFO] more ranks than cores still work: waiting ranks spin, then sleep\n");

    section("Self-test (shm backend)");
    int st2 = selftest(2, timeout_ms);
    int st4 = selftest(4, timeout_ms);
    int shm_ok = st2 && st4;

    section("CUDA");
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

    section("Backends");
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
    int mpi_works = mpi_ok && mpi_selftest(mpi_lab, timeout_ms, mwhy, sizeof mwhy, &mms);
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

    section("Summary");
    int ready = shm_ok;
    if (ready) {
        printf("[OK] ready: runtime present, processes fork, the self-tests passed\n");
        printf("Next steps:\n");
        printf("  mlsys-lab run %s\n", mpi_lab);
        printf("  mlsys-lab list (every chapter's labs and exercises)\n");
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
