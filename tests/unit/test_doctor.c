/* test_doctor.c - `mlsys-lab doctor` on the mpi backend, run as the real binary (env
 * MLSYS_LAB_BIN, default build/mlsys-lab): where mpirun and the plugin exist the backend is
 * [OK] only after its 2-rank self-test under mpirun; with the plugin missing or broken
 * (MLSYS_MPI_PLUGIN) or no mpirun on PATH it is [NO] and says why, and the doctor itself still
 * passes (mpi is optional). */
#include "run_bin.h"
#include <check.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* `mlsys-lab doctor` with one environment variable set (name NULL: none); stdout in *out. */
static int doctor(const char *name, const char *value, char **out)
{
    char po[] = "/tmp/test_doctor_outXXXXXX";
    int fo = mkstemp(po);
    ck_assert(fo >= 0);
    unlink(po);
    char exe[4096];
    ck_assert(realpath(bin(), exe) != NULL);
    pid_t pid = fork();
    ck_assert(pid >= 0);
    if (pid == 0) {
        dup2(fo, 1);
        int devnull = open("/dev/null", O_WRONLY);
        dup2(devnull, 2);
        if (name)
            setenv(name, value, 1);
        execl(exe, exe, "doctor", (char *)NULL);
        _exit(127);
    }
    int st;
    ck_assert(waitpid(pid, &st, 0) == pid);
    *out = slurp_fd(fo);
    close(fo);
    ck_assert(WIFEXITED(st));
    return WEXITSTATUS(st);
}

/* The one line about the mpi backend. */
static char *mpi_line(const char *out)
{
    const char *p = strstr(out, "] mpi ");
    ck_assert_msg(p != NULL, "no mpi line in:\n%s", out);
    while (p > out && p[-1] != '\n')
        p--;
    const char *e = strchr(p, '\n');
    return strndup(p, e ? (size_t)(e - p) : strlen(p));
}

static int have_mpi(void)
{
    char plugin[4096];
    snprintf(plugin, sizeof plugin, "%s", bin());
    char *slash = strrchr(plugin, '/');
    size_t off = slash ? (size_t)(slash + 1 - plugin) : 0;
    snprintf(plugin + off, sizeof plugin - off, "libmlsys-mpi.so");
    return system("command -v mpirun >/dev/null 2>&1") == 0 && access(plugin, R_OK) == 0;
}

START_TEST(mpi_works)
{
    if (!have_mpi())
        return;
    char *out;
    ck_assert_int_eq(doctor(NULL, NULL, &out), 0);
    char *l = mpi_line(out);
    ck_assert_msg(!strncmp(l, "[OK] mpi", 8) && strstr(l, "self-test: 2 ranks under mpirun"),
                  "%s", l);
    free(l);
    free(out);
}
END_TEST

START_TEST(plugin_missing)
{
    if (system("command -v mpirun >/dev/null 2>&1") != 0)
        return;
    char *out;
    ck_assert_int_eq(doctor("MLSYS_MPI_PLUGIN", "/nonexistent/libmlsys-mpi.so", &out), 0);
    char *l = mpi_line(out);
    ck_assert_msg(!strncmp(l, "[NO] mpi", 8) &&
                  strstr(l, "the MPI plugin /nonexistent/libmlsys-mpi.so is missing"), "%s", l);
    free(l);
    free(out);
}
END_TEST

START_TEST(plugin_broken)
{
    if (system("command -v mpirun >/dev/null 2>&1") != 0)
        return;
    char *out;
    ck_assert_int_eq(doctor("MLSYS_MPI_PLUGIN", "/etc/passwd", &out), 0);
    char *l = mpi_line(out);
    ck_assert_msg(!strncmp(l, "[NO] mpi", 8) && strstr(l, "self-test under mpirun failed") &&
                  strstr(l, "cannot load the MPI plugin"), "%s", l);
    free(l);
    free(out);
}
END_TEST

START_TEST(no_mpirun)
{
    char *out;
    ck_assert_int_eq(doctor("PATH", "/nonexistent", &out), 0);
    char *l = mpi_line(out);
    ck_assert_msg(!strncmp(l, "[NO] mpi", 8) && strstr(l, "mpirun is not on PATH"), "%s", l);
    free(l);
    ck_assert_ptr_nonnull(strstr(out, "[OK] shm"));
    free(out);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("doctor");
    TCase *tc = tcase_create("doctor");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, mpi_works);
    tcase_add_test(tc, plugin_missing);
    tcase_add_test(tc, plugin_broken);
    tcase_add_test(tc, no_mpirun);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
