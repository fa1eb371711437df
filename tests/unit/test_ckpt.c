/* test_ckpt.c - a training checkpoint survives any interruption, and a resume continues only
 * the run it holds. A tiny model trained with a checkpoint every step is killed with SIGKILL
 * at random moments, crashed at the four moments hardest on a writer (before and after each
 * rename), and run out of disk (a small tmpfs in a private mount namespace, where the
 * machine allows one) and out of file size (RLIMIT_FSIZE); after each, --resume starts from
 * the last complete step and the run ends byte-identical to an uninterrupted one. Then the
 * resume's refusals (--data-seed, --batch, --data-bytes, -w) and acceptances (--lr). */
#include "../../core/llm/llm.h"
#include "run_bin.h"
#include "ck_cut.h"

#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define TINY_BASE "--dim 32 --layers 2 --heads 4 --kv-heads 2 --hidden 64 --seq-len 32 " \
                  "--vocab 300 --eval-every 4 --eval-batches 1 --warmup 2 --ckpt-every 1"
#define TINY_LOUD TINY_BASE " --batch 8 --data-bytes 64K"
#define TINY TINY_LOUD " --quiet"

static char g_dir[256];

static void mk_dir(void)
{
    snprintf(g_dir, sizeof g_dir, "/tmp/mlsys-test-ckpt-XXXXXX");
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
    static char p[8][400];
    static int k;
    k = (k + 1) % 8;
    snprintf(p[k], sizeof p[k], "%s/%s", g_dir, name);
    return p[k];
}

/* Run `pre mlsys-lab train ARGS` through the shell; stderr into g_dir/err. Exit status. */
static int train(const char *pre, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int train(const char *pre, const char *fmt, ...)
{
    char args[1024], cmd[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    snprintf(cmd, sizeof cmd, "%s '%s' train %s >'%s/out' 2>'%s/err'", pre, bin(), args, g_dir,
             g_dir);
    int st = system(cmd);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static char *read_all(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    char *s = slurp_fd(fileno(f));
    fclose(f);
    if (len) {
        /* slurp_fd stops at nothing: the length is the file's */
        struct stat st;
        *len = stat(path, &st) == 0 ? (size_t)st.st_size : 0;
    }
    return s;
}

static int same_file(const char *a, const char *b)
{
    size_t na = 0, nb = 0;
    char *x = read_all(a, &na), *y = read_all(b, &nb);
    int same = x && y && na == nb && memcmp(x, y, na) == 0;
    free(x);
    free(y);
    return same;
}

static const char *err_text(void)
{
    static char buf[4096];
    char *s = read_all(at("err"), NULL);
    snprintf(buf, sizeof buf, "%s", s ? s : "");
    free(s);
    return buf;
}

/* no NAME.tmp.PID left in dir */
static int temporaries(const char *dir)
{
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL)
        n += strstr(e->d_name, ".tmp.") != NULL;
    if (d)
        closedir(d);
    return n;
}

/* The step of the checkpoint in dir (the library reads it whole), or -1 when there is none
 * (with err saying why when one is there but cannot be read). */
static long ckpt_step(const char *dir, char *err, size_t errlen)
{
    llm_config c;
    llm_weights w;
    llm_train_state s;
    char p[600];
    snprintf(p, sizeof p, "%s/model.train", dir);
    err[0] = 0;
    if (access(p, F_OK) != 0)
        return -1;
    if (llm_ckpt_read(dir, &c, &w, &s, NULL, err, errlen) != 0)
        return -2;
    long step = (long)s.step;
    llm_weights_free(&w);
    llm_train_state_free(&s);
    return step;
}

/* The uninterrupted run every interrupted one must end equal to: into g_dir/ref */
static void reference(const char *world, int steps)
{
    ck_assert_msg(train("", TINY " %s --steps %d --out %s", world, steps, at("ref")) == 0, "%s",
                  err_text());
}

static void expect_same_as_reference(const char *dir)
{
    char a[600], b[600];
    const char *files[] = {"model.bin", "model.train", "tokenizer.bin"};
    for (int i = 0; i < 3; i++) {
        snprintf(a, sizeof a, "%s/%s", dir, files[i]);
        snprintf(b, sizeof b, "%s/%s", at("ref"), files[i]);
        ck_assert_msg(same_file(a, b), "%s differs from the uninterrupted run's", a);
    }
    ck_assert_msg(temporaries(dir) == 0, "temporary files left in %s", dir);
}

/* ---- the four moments: a crash just before or after each of the two renames ---- */

START_TEST(crash_before_and_after_each_rename)
{
    mk_dir();
    reference("", 6);
    const char *points[4][2] = {
        {"MLSYS_CRASH_BEFORE_RENAME", "model.train"}, {"MLSYS_CRASH_AFTER_RENAME", "model.train"},
        {"MLSYS_CRASH_BEFORE_RENAME", "model.bin"}, {"MLSYS_CRASH_AFTER_RENAME", "model.bin"},
    };
    for (int i = 0; i < 4; i++) {
        char dir[64], pre[128], err[512];
        snprintf(dir, sizeof dir, "crash%d", i);
        ck_assert_int_eq(train("", TINY " --steps 6 --stop-at 2 --out %s", at(dir)), 0);
        /* the resumed run dies in its first checkpoint (step 3), at that moment */
        snprintf(pre, sizeof pre, "%s=%s", points[i][0], points[i][1]);
        int rc = train(pre, TINY " --steps 6 --resume --out %s", at(dir));
        ck_assert_msg(rc == 1 && strstr(err_text(), "signal 9"), "%s=%s: exit %d: %s",
                      points[i][0], points[i][1], rc, err_text());
        /* the last complete step: 2 before the commit of model.train, 3 after it */
        long step = ckpt_step(at(dir), err, sizeof err);
        long want = i == 0 ? 2 : 3;
        ck_assert_msg(step == want, "%s=%s: checkpoint at step %ld (want %ld) %s", points[i][0],
                      points[i][1], step, want, err);
        rc = train("", TINY " --steps 6 --resume --out %s", at(dir));
        ck_assert_msg(rc == 0, "%s=%s: resume: exit %d: %s", points[i][0], points[i][1], rc,
                      err_text());
        expect_same_as_reference(at(dir));
    }
    rm_dir();
}
END_TEST

/* ---- SIGKILL at random moments ---- */

/* pids whose command line holds needle (the run's own --out directory) */
static int procs_with(const char *needle)
{
    DIR *d = opendir("/proc");
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)) != NULL) {
        if (e->d_name[0] < '0' || e->d_name[0] > '9')
            continue;
        char p[300], buf[4096];
        snprintf(p, sizeof p, "/proc/%s/cmdline", e->d_name);
        FILE *f = fopen(p, "rb");
        if (!f)
            continue;
        size_t k = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        for (size_t i = 0; i < k; i++)
            if (!buf[i])
                buf[i] = ' ';
        buf[k] = 0;
        n += strstr(buf, needle) != NULL;
    }
    if (d)
        closedir(d);
    return n;
}

/* Start one run in dir (a resume when a checkpoint is there), SIGKILL it after wait_us
 * unless it ended first. 1 when it was killed, 0 when it ended (exit status in *status). */
static int run_and_kill(const char *dir, double wait_us, int *status)
{
    char args[1024];
    int have = access(at("run/model.train"), F_OK) == 0;
    snprintf(args, sizeof args, "exec '%s' train " TINY " -w 2 --steps 12 %s --out '%s' "
             ">/dev/null 2>'%s/err'", bin(), have ? "--resume" : "--force", dir, g_dir);
    fflush(NULL);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        execl("/bin/sh", "sh", "-c", args, (char *)NULL);
        _exit(127);
    }
    int st = 0, killed = 0, reaped = 0;
    if (wait_us >= 0) {
        usleep((useconds_t)wait_us);
        if (waitpid(pid, &st, WNOHANG) == pid) {
            reaped = 1;
        } else {
            kill(pid, SIGKILL);
            killed = 1;
        }
    }
    if (!reaped)
        waitpid(pid, &st, 0);
    /* waits for: the ranks, which die with their parent (PR_SET_PDEATHSIG), to be gone */
    for (int i = 0; i < 400 && procs_with(dir) > 0; i++)
        usleep(25000);
    ck_assert_msg(procs_with(dir) == 0, "ranks of the killed run still live");
    *status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    return killed;
}

START_TEST(sigkill_at_random_moments)
{
    mk_dir();
    uint64_t t0 = mlsys_now_ns();
    reference("-w 2", 12);
    /* the moments are drawn over the length of a whole run (measured, never asserted) */
    double run_ms = (double)(mlsys_now_ns() - t0) / 1e6;
    char dir[400];
    snprintf(dir, sizeof dir, "%s", at("run"));
    mlsys_rng g;
    mlsys_rng_seed(&g, 2222);
    long last = -1;
    int kills = 0, ends = 0, seen[64] = {0};
    for (int trial = 0; trial < 80 && kills < 16; trial++) {
        double wait_us = mlsys_rng_uniform(&g) * run_ms * 1000.0;
        int st;
        if (!run_and_kill(dir, wait_us, &st)) {
            /* it ended before the kill: it must have ended well, equal to the reference;
             * then the next trials start a fresh run */
            ck_assert_msg(st == 0, "trial %d: exit %d: %s", trial, st, err_text());
            expect_same_as_reference(dir);
            char cmd[500];
            snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
            ck_assert_int_eq(system(cmd), 0);
            last = -1;
            ends++;
            continue;
        }
        kills++;
        char err[512];
        long step = ckpt_step(dir, err, sizeof err);
        ck_assert_msg(step != -2, "trial %d: killed after %.0f us: the checkpoint is not "
                      "readable: %s", trial, wait_us, err);
        /* never behind a checkpoint that was already complete */
        ck_assert_msg(step >= last, "trial %d: checkpoint at step %ld after one at %ld", trial,
                      step, last);
        if (step >= 0 && step < 64)
            seen[step]++;
        last = step;
    }
    int st;
    ck_assert_int_eq(run_and_kill(dir, -1, &st), 0);      /* the last one runs to the end */
    ck_assert_msg(st == 0, "exit %d: %s", st, err_text());
    expect_same_as_reference(dir);
    int distinct = 0;
    for (int i = 0; i < 64; i++)
        distinct += seen[i] > 0;
    printf("ckpt: %d SIGKILLs (runs of %.0f ms), %d runs ended on their own, checkpoints "
           "found at %d distinct steps\n", kills, run_ms, ends, distinct);
    ck_assert_int_ge(kills, 16);
    rm_dir();
}
END_TEST

/* ---- out of disk, out of file size ---- */

static long file_size(const char *p)
{
    struct stat st;
    return stat(p, &st) == 0 ? (long)st.st_size : -1;
}

/* A tmpfs that holds one checkpoint and half of the next: the second checkpoint's
 * model.train cannot be written. The namespace is private (unshare -m): nothing of it is seen
 * outside, and what the run left is copied out before it goes. */
START_TEST(full_disk)
{
    if (system("unshare -m sh -c 'd=$(mktemp -d) && mount -t tmpfs -o size=64k tmpfs \"$d\" && "
               "umount \"$d\" && rmdir \"$d\"' >/dev/null 2>&1") != 0) {
        printf("ckpt: full disk skipped: no private mount namespace with a tmpfs here "
               "(unshare -m needs CAP_SYS_ADMIN)\n");
        return;
    }
    mk_dir();
    reference("", 6);
    long need = file_size(at("ref/model.train")) + file_size(at("ref/model.bin")) +
                file_size(at("ref/tokenizer.bin"));
    long size = ((need + file_size(at("ref/model.train")) / 2) / 4096 + 2) * 4096;
    ck_assert_int_eq(mkdir(at("mnt"), 0755), 0);
    ck_assert_int_eq(mkdir(at("saved"), 0755), 0);
    char pre[2048];
    snprintf(pre, sizeof pre, "unshare -m sh -c 'mount -t tmpfs -o size=%ld tmpfs %s && "
             "\"$0\" \"$@\"; rc=$?; cp -a %s/. %s/; exit $rc' ", size, at("mnt"), at("mnt"),
             at("saved"));
    int rc = train(pre, TINY " --steps 6 --out %s", at("mnt"));
    ck_assert_msg(rc == 1 && strstr(err_text(), "No space left on device"),
                  "exit %d (want 1, the disk full): %s", rc, err_text());
    char err[512];
    long step = ckpt_step(at("saved"), err, sizeof err);
    ck_assert_msg(step == 1, "after the full disk: checkpoint at step %ld %s", step, err);
    ck_assert_msg(temporaries(at("saved")) == 0, "the failed write left its temporary");
    rc = train("", TINY " --steps 6 --resume --out %s", at("saved"));
    ck_assert_msg(rc == 0, "resume after the full disk: exit %d: %s", rc, err_text());
    expect_same_as_reference(at("saved"));
    rm_dir();
}
END_TEST

/* the same through a file size limit (works everywhere): the resumed run's first checkpoint
 * cannot be written (SIGXFSZ ignored: the write fails with EFBIG) */
START_TEST(write_fails_midway)
{
    mk_dir();
    reference("", 6);
    ck_assert_int_eq(train("", TINY " --steps 6 --stop-at 3 --out %s", at("d")), 0);
    long limit_kib = file_size(at("ref/model.train")) / 2048;     /* half of model.train */
    char pre[128];
    snprintf(pre, sizeof pre, "trap '' XFSZ; ulimit -f %ld;", limit_kib * 2);
    int rc = train(pre, TINY " --steps 6 --resume --out %s", at("d"));
    ck_assert_msg(rc == 1, "exit %d (want 1): %s", rc, err_text());
    char err[512];
    ck_assert_int_eq(ckpt_step(at("d"), err, sizeof err), 3);
    ck_assert_int_eq(temporaries(at("d")), 0);
    ck_assert_int_eq(train("", TINY " --steps 6 --resume --out %s", at("d")), 0);
    expect_same_as_reference(at("d"));
    rm_dir();
}
END_TEST

/* stale temporaries of a writer that is gone are swept; a live writer's are not */
START_TEST(stale_temporaries_swept)
{
    mk_dir();
    FILE *f = fopen(at("model.train.tmp.999999999"), "w");     /* no such process */
    fputs("half", f);
    fclose(f);
    char mine[64];
    snprintf(mine, sizeof mine, "model.bin.tmp.%d", (int)getppid());   /* alive */
    f = fopen(at(mine), "w");
    fclose(f);
    f = fopen(at("notes.tmp.txt"), "w");       /* not a temporary of ours */
    fclose(f);
    ck_assert_int_eq(llm_ckpt_sweep(g_dir), 1);
    ck_assert(access(at("model.train.tmp.999999999"), F_OK) != 0);
    ck_assert(access(at(mine), F_OK) == 0);
    ck_assert(access(at("notes.tmp.txt"), F_OK) == 0);
    /* train sweeps its --out directory */
    ck_assert_int_eq(mkdir(at("o"), 0755), 0);
    f = fopen(at("o/model.train.tmp.999999998"), "w");
    ck_assert_ptr_nonnull(f);
    fclose(f);
    ck_assert_int_eq(train("", TINY " --steps 2 --out %s", at("o")), 0);
    ck_assert_int_eq(temporaries(at("o")), 0);
    rm_dir();
}
END_TEST

/* ---- resume: the same run, or another ---- */

START_TEST(resume_refuses_what_changes_the_run)
{
    mk_dir();
    ck_assert_int_eq(train("", TINY " --steps 6 --stop-at 3 --out %s", at("d")), 0);
    char *tok0 = read_all(at("d/tokenizer.bin"), NULL);
    struct {
        const char *flags, *stored, *given;
    } refuse[] = {
        {"--data-seed 2", "checkpoint's 1", "--data-seed 2"},
        {"--batch 16", "checkpoint's 8", "--batch 16"},
        {"--data-bytes 128K", "checkpoint's 65536", "--data-bytes 131072"},
        {"-w 2", "checkpoint's 1", "-w 2"},
    };
    for (size_t i = 0; i < sizeof refuse / sizeof refuse[0]; i++) {
        /* a flag given twice is refused by the parser: these cases leave TINY's out */
        const char *base = !strncmp(refuse[i].flags, "--batch", 7)
                               ? TINY_BASE " --data-bytes 64K --quiet"
                           : !strncmp(refuse[i].flags, "--data-bytes", 12)
                               ? TINY_BASE " --batch 8 --quiet"
                               : TINY;
        int rc = train("", "%s --steps 6 %s --resume --out %s", base, refuse[i].flags,
                       at("d"));
        const char *e = err_text();
        ck_assert_msg(rc == 2, "%s: exit %d: %s", refuse[i].flags, rc, e);
        ck_assert_msg(strchr(e, '\n') == strrchr(e, '\n') && strstr(e, refuse[i].stored) &&
                      strstr(e, refuse[i].given), "%s: %s", refuse[i].flags, e);
    }
    /* nothing was touched: not the tokenizer (a new data seed used to replace it) */
    char *tok1 = read_all(at("d/tokenizer.bin"), NULL);
    ck_assert_msg(tok0 && tok1 && !strcmp(tok0, tok1), "the tokenizer was rewritten");
    free(tok0);
    free(tok1);
    char err[512];
    ck_assert_int_eq(ckpt_step(at("d"), err, sizeof err), 3);
    /* a new learning rate steers the same run: accepted, said, and recorded */
    ck_assert_int_eq(train("", TINY_LOUD " --steps 6 --lr 1e-3 --resume --out %s", at("d")), 0);
    char *out = read_all(at("out"), NULL), cut[CK_CUT_ROOM];
    ck_assert_msg(out && strstr(out, "resuming") && strstr(out, "--lr 0.001 (was 0.003)") &&
                  strstr(out, "recorded"), "%s", ck_cut(out ? out : "", "resuming", cut,
                                                        sizeof cut));
    free(out);
    llm_config c;
    llm_weights w;
    llm_train_state st;
    ck_assert_msg(llm_ckpt_read(at("d"), &c, &w, &st, NULL, err, sizeof err) == 0, "%s", err);
    ck_assert(st.step == 6 && st.lr == 1e-3f && st.run.lr == 1e-3f && st.run.batch == 8 &&
              st.run.data_seed == 1 && st.run.data_bytes == 65536 && st.run.world == 1);
    llm_weights_free(&w);
    llm_train_state_free(&st);
    rm_dir();
}
END_TEST

int main(void)
{
    Suite *s = suite_create("ckpt");
    TCase *tc = tcase_create("interrupted");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, crash_before_and_after_each_rename);
    tcase_add_test(tc, sigkill_at_random_moments);
    tcase_add_test(tc, full_disk);
    tcase_add_test(tc, write_fails_midway);
    tcase_add_test(tc, stale_temporaries_swept);
    suite_add_tcase(s, tc);
    TCase *tr = tcase_create("resume");
    tcase_set_timeout(tr, 300);
    tcase_add_test(tr, resume_refuses_what_changes_the_run);
    suite_add_tcase(s, tr);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
