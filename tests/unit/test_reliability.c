/* test_reliability.c - the program under misuse and accidents, driven as a learner would:
 * bad arguments refused in one line (exit 2), --gated without a front end, unwritable
 * --trace paths found before the job, replay of devices and huge files, a huge progress
 * file, learner code that forks, a compiler that crashes, Ctrl-C (exit 130 for every
 * command), stale temp folders, the event collector under a flood, and the Makefile's
 * record of the features it found. Each child runs under a time limit. */
#include "../../core/mlsys.h"
#include "../../core/net_events.h"
#include "run_bin.h"
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static char g_tmp[PATH_MAX];

static void fresh_env(void)
{
    snprintf(g_tmp, sizeof g_tmp, "%s/mlsys-rel-test-XXXXXX",
             getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    ck_assert_ptr_nonnull(mkdtemp(g_tmp));
    char home[PATH_MAX + 16], state[PATH_MAX + 16], tmp[PATH_MAX + 16];
    snprintf(home, sizeof home, "%s/home", g_tmp);
    snprintf(state, sizeof state, "%s/state", g_tmp);
    snprintf(tmp, sizeof tmp, "%s/tmp", g_tmp);
    mkdir(tmp, 0755);
    setenv("MLSYS_LAB_HOME", home, 1);
    setenv("XDG_STATE_HOME", state, 1);
    setenv("TMPDIR", tmp, 1);
}

static void remove_tmp(void)
{
    char cmd[PATH_MAX + 32];
    if (g_tmp[0] && strstr(g_tmp, "mlsys-rel-test-")) {
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_tmp);
        if (system(cmd) != 0)
            fprintf(stderr, "could not remove %s\n", g_tmp);
    }
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    ck_assert_msg(f != NULL, "cannot write %s: %s", path, strerror(errno));
    fputs(text, f);
    fclose(f);
}

typedef struct run_result {
    int status;         /* exit status, 128 + signal, or -1 when it had to be killed */
    int timed_out;
    char *out;          /* stdout and stderr together */
} run_result;

/* Run the program with args (NULL-terminated) for at most limit_s seconds; with sig_after_s
 * > 0, send it sig after that many seconds. Output goes to a file, read whole afterwards. */
static run_result run_limited(const char *const *args, int limit_s, int sig, double sig_after_s)
{
    char *argv[40];
    int k = 0;
    argv[k++] = (char *)bin();
    for (int i = 0; args[i] && k < 39; i++)
        argv[k++] = (char *)args[i];
    argv[k] = NULL;
    char outpath[PATH_MAX + 16];
    snprintf(outpath, sizeof outpath, "%s/out", g_tmp[0] ? g_tmp : "/tmp");
    int fd = open(outpath, O_RDWR | O_CREAT | O_TRUNC, 0644);
    ck_assert_int_ge(fd, 0);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        setpgid(0, 0);
        dup2(fd, 1);
        dup2(fd, 2);
        int devnull = open("/dev/null", O_RDONLY);
        dup2(devnull, 0);
        execv(argv[0], argv);
        _exit(127);
    }
    run_result r = {.status = -1};
    uint64_t t0 = mlsys_now_ns();
    int sent = 0, st = 0;
    for (;;) {
        pid_t w = waitpid(pid, &st, WNOHANG);
        if (w == pid)
            break;
        double el = (double)(mlsys_now_ns() - t0) * 1e-9;
        if (sig && !sent && el >= sig_after_s) {
            kill(pid, sig);
            sent = 1;
        }
        if (el > limit_s) {
            r.timed_out = 1;
            kill(-pid, SIGKILL);
            kill(pid, SIGKILL);
            waitpid(pid, &st, 0);
            break;
        }
        usleep(10000);
    }
    if (!r.timed_out)
        r.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    r.out = slurp_fd(fd);
    close(fd);
    return r;
}

static int count_lines(const char *s)
{
    int n = 0;
    for (; *s; s++)
        n += *s == '\n';
    return n;
}

/* ---- 18: bad input is one line and exit 2 ---- */

START_TEST(test_bad_input_refused)
{
    static const char *const cases[][6] = {
        {"list", "--bogus"}, {"list", "extra"}, {"version", "extra"}, {"doctor", "--bogus"},
        {"check", "--all", "extra"}, {"exercises", "--chapter", "0"},
        {"exercises", "--chapter", "-1"}, {"exercises", "--chapter", "999999999999"},
        {"run", "ch01/hello-distributed", "--timeout", "1e-300"},
        {"run", "ch03/distributed-softmax", "--offset", "-inf"},
    };
    fresh_env();
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        run_result r = run_limited(cases[i], 20, 0, 0);
        ck_assert_msg(r.status == 2, "%s %s: exit %d (want 2): %s", cases[i][0], cases[i][1],
                      r.status, r.out);
        ck_assert_msg(count_lines(r.out) == 1, "%s %s: not one line: %s", cases[i][0],
                      cases[i][1], r.out);
        free(r.out);
    }
    /* help is not an error */
    const char *help[] = {"check", "--help", NULL};
    run_result r = run_limited(help, 20, 0, 0);
    ck_assert_msg(r.status == 0 && strstr(r.out, "usage"), "check --help: %d %s", r.status, r.out);
    free(r.out);
    remove_tmp();
}
END_TEST

/* ---- 14: --gated without a front end ---- */

START_TEST(test_gated_headless_refused)
{
    fresh_env();
    const char *args[] = {"run", "ch01/hello-distributed", "-w", "2", "--gated", "--timeout",
                          "3", NULL};
    run_result r = run_limited(args, 15, 0, 0);
    ck_assert_msg(!r.timed_out, "--gated headless hangs: %s", r.out);
    ck_assert_msg(r.status == 2 && count_lines(r.out) == 1 && strstr(r.out, "--gated"),
                  "exit %d: %s", r.status, r.out);
    free(r.out);
    remove_tmp();
}
END_TEST

/* ---- 19: --trace checked before the job; an existing file survives a stopped job ---- */

START_TEST(test_trace_checked_first)
{
    fresh_env();
    char dir_trace[PATH_MAX + 16];
    snprintf(dir_trace, sizeof dir_trace, "%s", g_tmp);
    const char *bad[] = {"/dev/full", "/nonexistent/dir/x.json", dir_trace};
    for (int i = 0; i < 3; i++) {
        const char *args[] = {"run", "ch01/hello-distributed", "-w", "2", "--trace", bad[i],
                              NULL};
        run_result r = run_limited(args, 20, 0, 0);
        ck_assert_msg(r.status == 2, "--trace %s: exit %d: %s", bad[i], r.status, r.out);
        ck_assert_msg(!strstr(r.out, "Rank 0"), "--trace %s: the job ran first: %s", bad[i],
                      r.out);
        free(r.out);
    }
    /* a good existing trace is not cut short by a job stopped with Ctrl-C */
    char path[PATH_MAX + 16];
    snprintf(path, sizeof path, "%s/keep.json", g_tmp);
    write_file(path, "{\"traceEvents\":[]}\n");
    const char *args[] = {"run", "ch02/pipeline-simulation", "-w", "2", "--batch-size", "1024",
                          "--hidden-size", "1024", "-m", "256", "--trace", path, NULL};
    run_result r = run_limited(args, 30, SIGINT, 1.5);
    ck_assert_msg(r.status == 130, "exit %d after Ctrl-C (want 130): %s", r.status, r.out);
    int fd = open(path, O_RDONLY);
    char *text = slurp_fd(fd);
    close(fd);
    ck_assert_msg(!strcmp(text, "{\"traceEvents\":[]}\n"), "the old trace changed: %.80s", text);
    free(text);
    free(r.out);
    /* and no temp file is left next to it */
    DIR *d = opendir(g_tmp);
    for (struct dirent *e; d && (e = readdir(d));)
        ck_assert_msg(!strstr(e->d_name, "keep.json.tmp"), "left %s", e->d_name);
    closedir(d);
    remove_tmp();
}
END_TEST

/* ---- 16: replay of what is not a trace ---- */

START_TEST(test_replay_refuses_devices_and_huge_files)
{
    fresh_env();
    char sparse[PATH_MAX + 16];
    snprintf(sparse, sizeof sparse, "%s/sparse.json", g_tmp);
    int fd = open(sparse, O_WRONLY | O_CREAT, 0644);
    ck_assert_int_eq(ftruncate(fd, 8ll << 30), 0);     /* 8 GiB, no blocks */
    close(fd);
    const char *files[] = {"/dev/zero", sparse, "/proc/self/status"};
    for (int i = 0; i < 3; i++) {
        const char *args[] = {"replay", files[i], NULL};
        run_result r = run_limited(args, 20, 0, 0);
        ck_assert_msg(!r.timed_out, "replay %s does not end", files[i]);
        ck_assert_msg(r.status == 2 && count_lines(r.out) == 1, "replay %s: exit %d: %s",
                      files[i], r.status, r.out);
        free(r.out);
    }
    remove_tmp();
}
END_TEST

/* ---- 17: a huge progress file ---- */

START_TEST(test_huge_progress_file)
{
    fresh_env();
    char dir[PATH_MAX + 32], path[PATH_MAX + 48];
    snprintf(dir, sizeof dir, "%s/home", g_tmp);      /* MLSYS_LAB_HOME holds the progress */
    char cmd[PATH_MAX + 64];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s'", dir);
    ck_assert_int_eq(system(cmd), 0);
    snprintf(path, sizeof path, "%s/progress", dir);
    FILE *f = fopen(path, "w");
    fprintf(f, "# mlsys-lab progress 1\nch01-even-odd done hints=1 passed=1700000000\n");
    for (int i = 0; i < 150000; i++)
        fprintf(f, "ch99-made-up-%06d pending hints=0 passed=0\n", i);
    fclose(f);
    const char *args[] = {"list", NULL};
    run_result r = run_limited(args, 15, 0, 0);
    ck_assert_msg(!r.timed_out, "list on a 150k-line progress file takes more than 15 s");
    ck_assert_msg(r.status == 0, "exit %d: %.400s", r.status, r.out);
    /* 6.6 MB of valid lines is a large file, not a corrupt one (issue 22): read whole */
    ck_assert_msg(!strstr(r.out, "corrupt") && !strstr(r.out, "larger than"), "%.400s", r.out);
    /* the good entry survives */
    const char *line = strstr(r.out, "ch01-even-odd");
    ck_assert_msg(line && strstr(line, "done") && strstr(line, "done") < strchr(line, '\n'),
                  "%.400s", line ? line : r.out);
    free(r.out);
    remove_tmp();
}
END_TEST

/* ---- 13: learner code that forks ---- */

static void write_forking_even_odd(const char *extra)
{
    char path[PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/home/exercises/ch01-even-odd", g_tmp);
    char cmd[PATH_MAX + 96];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s'", path);
    ck_assert_int_eq(system(cmd), 0);
    strcat(path, "/even_odd.c");
    char text[2048];
    snprintf(text, sizeof text,
             "#include <stdio.h>\n#include <unistd.h>\n#include \"api.h\"\n"
             "void on_rank_hello(int rank, int world_size)\n{\n"
             "    printf(\"Rank %%d of %%d: hello\\n\", rank, world_size);\n"
             "    if (rank %% 2 == 0)\n"
             "        printf(\"Rank %%d: working on the even data\\n\", rank);\n"
             "    else\n"
             "        printf(\"Rank %%d: working on the odd data\\n\", rank);\n"
             "    fflush(stdout);\n"
             "    %s\n}\n", extra);
    write_file(path, text);
}

static int sleepers_with(const char *marker)
{
    int n = 0;
    DIR *d = opendir("/proc");
    for (struct dirent *e; d && (e = readdir(d));) {
        char p[300], buf[4096];
        snprintf(p, sizeof p, "/proc/%s/environ", e->d_name);
        int fd = open(p, O_RDONLY);
        if (fd < 0)
            continue;
        ssize_t got = read(fd, buf, sizeof buf - 1);
        close(fd);
        for (ssize_t i = 0; i < got; i += (ssize_t)strlen(buf + i) + 1) {
            buf[got] = 0;
            if (!strcmp(buf + i, marker))
                n++;
        }
    }
    if (d)
        closedir(d);
    return n;
}

START_TEST(test_check_with_forking_rank)
{
    fresh_env();
    char marker[64];
    snprintf(marker, sizeof marker, "MLSYS_REL_TEST=%d", (int)getpid());
    putenv(marker);
    /* a child that sleeps, one that escapes with setsid, one by a double fork */
    write_forking_even_odd("if (fork() == 0) { sleep(25); _exit(0); }\n"
                           "    if (fork() == 0) { setsid(); sleep(25); _exit(0); }\n"
                           "    if (fork() == 0) { if (fork() == 0) { sleep(25); _exit(0); } _exit(0); }");
    const char *args[] = {"check", "ch01-even-odd", NULL};
    run_result r = run_limited(args, 20, 0, 0);
    ck_assert_msg(!r.timed_out, "check waits for the learner's children: %s", r.out);
    ck_assert_msg(r.status == 1 && strstr(r.out, "FAIL") && strstr(r.out, "left"),
                  "exit %d: %s", r.status, r.out);
    usleep(200000);
    ck_assert_msg(sleepers_with(marker) == 0, "%d of the learner's processes still run",
                  sleepers_with(marker));
    free(r.out);

    /* Ctrl-C during such a check ends it at once, with 130 */
    write_forking_even_odd("if (fork() == 0) { sleep(25); _exit(0); }\n    sleep(25);");
    r = run_limited(args, 10, SIGINT, 2.0);
    ck_assert_msg(!r.timed_out, "Ctrl-C does not stop check: %s", r.out);
    ck_assert_msg(r.status == 130, "exit %d after Ctrl-C (want 130): %s", r.status, r.out);
    usleep(200000);
    ck_assert_int_eq(sleepers_with(marker), 0);
    free(r.out);
    /* and no temp folder of the check is left */
    char tmp[PATH_MAX + 16];
    snprintf(tmp, sizeof tmp, "%s/tmp", g_tmp);
    DIR *d = opendir(tmp);
    for (struct dirent *e; d && (e = readdir(d));)
        ck_assert_msg(strncmp(e->d_name, "mlsys-ex-", 9) != 0, "left %s", e->d_name);
    closedir(d);
    remove_tmp();
}
END_TEST

/* ---- 20: a compiler that crashes is the lab's error, not the learner's fail ---- */

START_TEST(test_compiler_crash_is_an_error)
{
    fresh_env();
    char cc[PATH_MAX + 16];
    snprintf(cc, sizeof cc, "%s/cc", g_tmp);
    static const char *const scripts[] = {
        "#!/bin/sh\nkill -SEGV $$\n",
        "#!/bin/sh\necho 'cc: internal compiler error: Killed signal terminated program cc1' >&2\n"
        "exit 4\n",
    };
    for (int i = 0; i < 2; i++) {
        write_file(cc, scripts[i]);
        chmod(cc, 0755);
        setenv("MLSYS_LAB_CC", cc, 1);
        const char *args[] = {"check", "ch01-even-odd", NULL};
        run_result r = run_limited(args, 20, 0, 0);
        ck_assert_msg(r.status == 2 && strstr(r.out, "ERROR") && !strstr(r.out, "FAIL"),
                      "case %d: exit %d: %s", i, r.status, r.out);
        ck_assert_msg(strstr(r.out, "not of your code"), "case %d: %s", i, r.out);
        free(r.out);
    }
    unsetenv("MLSYS_LAB_CC");
    remove_tmp();
}
END_TEST

/* ---- 20: stale temp folders of a check killed outright are swept ---- */

START_TEST(test_stale_tmpdirs_swept)
{
    fresh_env();
    pid_t dead = fork();
    if (dead == 0)
        _exit(0);
    waitpid(dead, NULL, 0);
    char stale[PATH_MAX + 64], alive[PATH_MAX + 64];
    snprintf(stale, sizeof stale, "%s/tmp/mlsys-ex-%d-abcdef", g_tmp, (int)dead);
    snprintf(alive, sizeof alive, "%s/tmp/mlsys-ex-%d-ghijkl", g_tmp, (int)getpid());
    ck_assert_int_eq(mkdir(stale, 0755), 0);
    ck_assert_int_eq(mkdir(alive, 0755), 0);
    const char *args[] = {"check", "ch01-even-odd", NULL};
    run_result r = run_limited(args, 60, 0, 0);
    ck_assert_msg(access(stale, F_OK) != 0, "the stale folder is still there: %s", r.out);
    ck_assert_msg(access(alive, F_OK) == 0, "the folder of a live process was removed");
    free(r.out);
    remove_tmp();
}
END_TEST

/* ---- 20: exit status 130 after Ctrl-C, for run and bench as for check ---- */

START_TEST(test_ctrl_c_is_130)
{
    fresh_env();
    const char *run[] = {"run", "ch02/pipeline-simulation", "-w", "2", "--batch-size", "1024",
                         "--hidden-size", "1024", "-m", "256", NULL};
    run_result r = run_limited(run, 20, SIGINT, 1.0);
    ck_assert_msg(r.status == 130, "run: exit %d: %s", r.status, r.out);
    free(r.out);
    const char *bench[] = {"bench", "all_reduce", "--minbytes", "64M", "--maxbytes", "64M", "-n",
                           "100000", "--world-size", "2", NULL};
    r = run_limited(bench, 20, SIGINT, 1.5);
    ck_assert_msg(r.status == 130, "bench: exit %d: %s", r.status, r.out);
    free(r.out);
    remove_tmp();
}
END_TEST

/* ---- 20: a flood of bad connections to the event collector is a few lines ---- */

START_TEST(test_collector_refusals_rate_limited)
{
    fresh_env();
    char errpath[PATH_MAX + 16];
    snprintf(errpath, sizeof errpath, "%s/err", g_tmp);
    int efd = open(errpath, O_RDWR | O_CREAT | O_TRUNC, 0644);
    int saved = dup(2);
    dup2(efd, 2);
    char err[256];
    collector *c = collector_open(NULL, 2, err, sizeof err);
    ck_assert_msg(c != NULL, "%s", err);
    const char *addr = collector_addr(c);
    const char *colon = strrchr(addr, ':');
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(colon + 1))};
    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    for (int i = 0; i < 60; i++) {
        int s = socket(AF_INET, SOCK_STREAM, 0);
        if (connect(s, (struct sockaddr *)&sa, sizeof sa) == 0) {
            static const char junk[64] = "GET / HTTP/1.0\r\n\r\n garbage garbage garbage";
            ssize_t w = write(s, junk, sizeof junk);
            (void)w;
        }
        close(s);
        if (i % 10 == 9)
            for (int k = 0; k < 20; k++) {
                collector_pump(c, NULL);
                usleep(2000);
            }
    }
    for (int k = 0; k < 50; k++) {
        collector_pump(c, NULL);
        usleep(2000);
    }
    int refused = collector_refused(c);
    collector_close(c);
    fflush(stderr);
    dup2(saved, 2);
    char *text = slurp_fd(efd);
    close(efd);
    ck_assert_msg(refused >= 20, "only %d refused", refused);
    ck_assert_msg(count_lines(text) <= 8, "%d lines for %d refusals:\n%s", count_lines(text),
                  refused, text);
    char want[64];
    snprintf(want, sizeof want, "refused %d event connections", refused);
    ck_assert_msg(strstr(text, want) != NULL, "no count: %s", text);
    free(text);
    remove_tmp();
}
END_TEST

/* ---- 11: the features a first make found are not kept forever ---- */

START_TEST(test_make_rebuilds_on_feature_change)
{
    fresh_env();
    if (access("Makefile", R_OK) != 0 || system("command -v make >/dev/null 2>&1") != 0) {
        fprintf(stderr, "skip: no Makefile here or no make\n");
        remove_tmp();
        return;
    }
    /* a pkg-config that says md4c is missing */
    char fake[PATH_MAX + 16], cmd[6 * PATH_MAX];
    snprintf(fake, sizeof fake, "%s/bin", g_tmp);
    mkdir(fake, 0755);
    snprintf(cmd, sizeof cmd, "%s/pkg-config", fake);
    write_file(cmd, "#!/bin/sh\nfor a; do [ \"$a\" = md4c ] && exit 1; done\n"
                    "PATH=${PATH#*:} exec pkg-config \"$@\"\n");
    chmod(cmd, 0755);
    char build[PATH_MAX + 16];
    snprintf(build, sizeof build, "%s/build", g_tmp);
    snprintf(cmd, sizeof cmd, "PATH='%s':\"$PATH\" make -s BUILD='%s' '%s/core/types.o' "
             ">'%s/make.log' 2>&1", fake, build, build, g_tmp);
    ck_assert_msg(system(cmd) == 0, "the first make failed");
    /* md4c appears: the object is out of date now */
    snprintf(cmd, sizeof cmd, "make -q BUILD='%s' '%s/core/types.o' >/dev/null 2>&1", build,
             build);
    int st = system(cmd);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 1,
                  "after md4c appeared, make still thinks the objects are up to date");
    /* and with nothing changed, it is up to date again once rebuilt */
    snprintf(cmd, sizeof cmd, "make -s BUILD='%s' '%s/core/types.o' >/dev/null 2>&1 && "
             "make -q BUILD='%s' '%s/core/types.o'", build, build, build, build);
    ck_assert_int_eq(system(cmd), 0);
    remove_tmp();
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("reliability");
    TCase *t = tcase_create("core");
    tcase_set_timeout(t, 120);
    tcase_add_test(t, test_bad_input_refused);
    tcase_add_test(t, test_gated_headless_refused);
    tcase_add_test(t, test_trace_checked_first);
    tcase_add_test(t, test_replay_refuses_devices_and_huge_files);
    tcase_add_test(t, test_huge_progress_file);
    tcase_add_test(t, test_check_with_forking_rank);
    tcase_add_test(t, test_compiler_crash_is_an_error);
    tcase_add_test(t, test_stale_tmpdirs_swept);
    tcase_add_test(t, test_ctrl_c_is_130);
    tcase_add_test(t, test_collector_refusals_rate_limited);
    tcase_add_test(t, test_make_rebuilds_on_feature_change);
    suite_add_tcase(s, t);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
