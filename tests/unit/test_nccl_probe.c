/* test_nccl_probe.c - --backend nccl without a GPU: `mlsys-lab run ch01/hello-distributed
 * --backend nccl` (MLSYS_LAB_BIN, default build/mlsys-lab) exits 2 with exactly one stderr line,
 * "...: NCCL needs one GPU per rank: 0 GPUs found; use --backend shm"; nccl_available() says the
 * same with or without the plugin, whose own probe fails with a count of 0. The GPU count comes
 * from libcudart, independently; with a GPU present each test passes with a printed reason. */
#include "run_bin.h"
#include <check.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../../core/nccl/nccl_plugin.h"
#include "../../lab/backend/nccl_probe.h"

#define NO_GPU "NCCL needs one GPU per rank: 0 GPUs found; use --backend shm"

/* cudaGetDeviceCount through libcudart, independent of the code under test; 0 when there is
 * no runtime or no driver. */
static int gpu_count(char *why, size_t n)
{
    static const char *const names[] = {"libcudart.so", "libcudart.so.13", "libcudart.so.12",
                                        "/usr/local/cuda/lib64/libcudart.so", NULL};
    for (int i = 0; names[i]; i++) {
        void *h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
        if (!h)
            continue;
        int (*cnt)(int *) = (int (*)(int *))dlsym(h, "cudaGetDeviceCount");
        const char *(*es)(int) = (const char *(*)(int))dlsym(h, "cudaGetErrorString");
        int count = 0, rc = cnt ? cnt(&count) : -1;
        snprintf(why, n, "cudaGetDeviceCount: %s", rc == 0 ? "ok" : es ? es(rc) : "failed");
        dlclose(h);
        return rc == 0 ? count : 0;
    }
    snprintf(why, n, "no libcudart");
    return 0;
}

static int skip_if_gpu(void)
{
    char why[256];
    int g = gpu_count(why, sizeof why);
    if (g > 0) {
        printf("test_nccl_probe: skipped: %d GPU%s present, the no-GPU refusal does not apply "
               "(tests/gpu/run covers this machine)\n", g, g == 1 ? "" : "s");
        return 1;
    }
    return 0;
}

static char *read_stream(FILE *f)
{
    size_t cap = 4096, n = 0, got;
    char *s = malloc(cap);
    while ((got = fread(s + n, 1, cap - n - 1, f)) > 0) {
        n += got;
        if (cap - n < 1024)
            s = realloc(s, cap *= 2);
    }
    s[n] = 0;
    return s;
}

START_TEST(test_cli_refuses_nccl_without_gpu)
{
    if (skip_if_gpu())
        return;
    char cmd[2048], errpath[] = "/tmp/mlsys-test-nccl-XXXXXX";
    int fd = mkstemp(errpath);
    ck_assert_int_ge(fd, 0);
    close(fd);
    snprintf(cmd, sizeof cmd, "timeout -k 5 60 '%s' run ch01/hello-distributed --backend nccl "
             "2>%s", bin(), errpath);
    fflush(NULL);
    FILE *p = popen(cmd, "r");
    ck_assert_ptr_nonnull(p);
    char *out = read_stream(p);
    int st = pclose(p);
    FILE *e = fopen(errpath, "r");
    ck_assert_ptr_nonnull(e);
    char *err = read_stream(e);
    fclose(e);
    unlink(errpath);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 2, "exit status %d, stderr: %s",
                  WIFEXITED(st) ? WEXITSTATUS(st) : -1, err);
    ck_assert_str_eq(err, "mlsys-lab: ch01/hello-distributed: " NO_GPU "\n");
    ck_assert_str_eq(out, "");
    free(out);
    free(err);
}
END_TEST

START_TEST(test_available_says_no_gpu)
{
    if (skip_if_gpu())
        return;
    char why[512];
    ck_assert_int_eq(nccl_available(why, sizeof why), 0);
    ck_assert_str_eq(why, NO_GPU);
    char err[512];
    ck_assert_int_eq(nccl_backend_check("ch01/hello-distributed", 2, err, sizeof err), 2);
    ck_assert_str_eq(err, "mlsys-lab: ch01/hello-distributed: " NO_GPU);
}
END_TEST

/* No plugin at all (a build without CUDA): the same answer, since there is no GPU either. */
START_TEST(test_available_without_plugin)
{
    if (skip_if_gpu())
        return;
    char why[512];
    setenv("MLSYS_NCCL_PLUGIN", "/nonexistent/libmlsys-nccl.so", 1);
    ck_assert_int_eq(nccl_available(why, sizeof why), 0);
    ck_assert_str_eq(why, NO_GPU);
    /* and attaching says why it cannot */
    char path[512];
    ck_assert_str_eq(nccl_plugin_path(path, sizeof path), "/nonexistent/libmlsys-nccl.so");
}
END_TEST

/* A file that is not a plugin: refused, still the no-GPU line (no GPU is the first problem). */
START_TEST(test_available_bad_plugin)
{
    if (skip_if_gpu())
        return;
    char why[512], path[] = "/tmp/mlsys-test-notaplugin-XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(write(fd, "not an ELF file\n", 16), 16);
    close(fd);
    setenv("MLSYS_NCCL_PLUGIN", path, 1);
    ck_assert_int_eq(nccl_available(why, sizeof why), 0);
    ck_assert_str_eq(why, NO_GPU);
    unlink(path);
}
END_TEST

/* The plugin's probe itself, when the build made one: it fails and leaves the count at 0. */
START_TEST(test_plugin_probe_fails)
{
    if (skip_if_gpu())
        return;
    char dir[4096], path[4200];
    snprintf(dir, sizeof dir, "%s", bin());
    char *slash = strrchr(dir, '/');
    snprintf(path, sizeof path, "%.*s/%s", slash ? (int)(slash - dir) : 1, slash ? dir : ".",
             MLSYS_NCCL_PLUGIN_FILE);
    if (access(path, F_OK) != 0) {
        printf("test_nccl_probe: plugin probe: skipped: %s not built (no CUDA/NCCL here)\n", path);
        return;
    }
    /* the plugin needs the program's symbols only for attach; probe resolves lazily */
    void *h = dlopen(path, RTLD_LAZY | RTLD_LOCAL);
    ck_assert_msg(h != NULL, "%s: %s", path, dlerror());
    mlsys_nccl_probe_fn probe = (mlsys_nccl_probe_fn)dlsym(h, "mlsys_nccl_probe");
    ck_assert_ptr_nonnull(probe);
    int ngpus = 12345;
    char err[256] = "";
    ck_assert_int_ne(probe(&ngpus, err, sizeof err), 0);
    ck_assert_int_eq(ngpus, 0);
    ck_assert_msg(strncmp(err, "cudaGetDeviceCount: ", 20) == 0, "%s", err);
    mlsys_nccl_describe_fn describe = (mlsys_nccl_describe_fn)dlsym(h, "mlsys_nccl_describe");
    ck_assert_ptr_nonnull(describe);
    setenv("NCCL_ALGO", "Ring", 1);
    unsetenv("NCCL_PROTO");
    char line[512];
    describe(line, sizeof line);
    ck_assert_msg(strncmp(line, "NCCL 2.", 7) == 0, "%s", line);
    ck_assert_msg(strstr(line, "NCCL_ALGO=Ring NCCL_PROTO=auto") != NULL, "%s", line);
    dlclose(h);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("nccl_probe");
    TCase *tc = tcase_create("no_gpu");
    tcase_set_timeout(tc, 90);
    tcase_add_test(tc, test_cli_refuses_nccl_without_gpu);
    tcase_add_test(tc, test_available_says_no_gpu);
    tcase_add_test(tc, test_available_without_plugin);
    tcase_add_test(tc, test_available_bad_plugin);
    tcase_add_test(tc, test_plugin_probe_fails);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
