/* test_ckpt_promises.c - promises of the checkpoint writer and reader that other tests let
 * slip: one damaged byte anywhere in the optimizer moments (m or v) or in the checksum
 * itself is refused by the checksum; bytes after the checksum are refused; model.bin one
 * checkpoint behind is known as stale, also after the same step was saved twice, and other
 * weights there are refused; and the writer makes a file durable before it commits it:
 * fsync(2) and fsync of the directory are watched here by interposing fsync and rename in
 * this program (the library's calls bind to them), so their order is checked. */
#include <check.h>
#include <dlfcn.h>
#include <limits.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "../../core/llm/llm.h"

static char g_dir[64];

static void setup(void)
{
    snprintf(g_dir, sizeof g_dir, "/tmp/mlsys-test-ckp-XXXXXX");
    ck_assert(mkdtemp(g_dir) != NULL);
}

static void teardown(void)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", g_dir);
}

/* ---- what the writer does, in order ---- */
enum { EV_FSYNC, EV_RENAME };
typedef struct fs_event {
    int kind;
    char a[512], b[512];          /* fsync: the path of the descriptor; rename: from, to */
} fs_event;
static fs_event g_ev[64];
static int g_nev, g_watch;

int fsync(int fd)
{
    static int (*real)(int);
    if (!real)
        real = (int (*)(int))dlsym(RTLD_NEXT, "fsync");
    if (g_watch && g_nev < 64) {
        char link[64];
        snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
        fs_event *e = &g_ev[g_nev++];
        e->kind = EV_FSYNC;
        ssize_t n = readlink(link, e->a, sizeof e->a - 1);
        e->a[n > 0 ? n : 0] = 0;
    }
    return real(fd);
}

int rename(const char *from, const char *to)
{
    static int (*real)(const char *, const char *);
    if (!real)
        real = (int (*)(const char *, const char *))dlsym(RTLD_NEXT, "rename");
    if (g_watch && g_nev < 64) {
        fs_event *e = &g_ev[g_nev++];
        e->kind = EV_RENAME;
        snprintf(e->a, sizeof e->a, "%s", from);
        snprintf(e->b, sizeof e->b, "%s", to);
    }
    return real(from, to);
}

/* A small model and a state, saved in g_dir as model.train and model.bin. */
static void write_ckpt(llm_config *c, llm_weights *w, llm_train_state *s)
{
    llm_config cc = {16, 32, 1, 2, 1, 270, 8, 1, 0, 0};
    char err[256];
    ck_assert_msg(llm_config_check(&cc, err, sizeof err) == 0, "%s", err);
    *c = cc;
    ck_assert_int_eq(llm_weights_alloc(w, c, err, sizeof err), 0);
    for (size_t i = 0; i < w->n_floats; i++)
        w->mem[i] = 0.01f * (float)(i % 97);
    memset(s, 0, sizeof *s);
    ck_assert_int_eq(llm_train_state_alloc(s, c), 0);
    for (size_t i = 0; i < s->n; i++) {
        s->m[i] = 1e-3f * (float)(i % 13);
        s->v[i] = 1e-6f * (float)(i % 7);
    }
    s->step = 3;
    s->run.steps = 10;
    s->lr = 1e-3f;
    s->beta1 = 0.9f;
    s->beta2 = 0.95f;
    s->eps = 1e-8f;
    ck_assert_msg(llm_ckpt_write(g_dir, c, w, s, err, sizeof err) == 0, "%s", err);
}

START_TEST(damaged_moment_byte_refused)
{
    llm_config c;
    llm_weights w;
    llm_train_state s;
    write_ckpt(&c, &w, &s);
    char path[128], err[512];
    snprintf(path, sizeof path, "%s/model.train", g_dir);
    struct stat st;
    ck_assert(stat(path, &st) == 0);
    /* the file ends with m[n], v[n] and the 8-byte checksum: damage one byte in the middle
     * of m, one in the last float of v (a low bit: the value stays finite), one in the sum */
    size_t n = s.n, size = (size_t)st.st_size;
    size_t at[3] = {size - 8 - 8 * n + 4 * (n / 2) + 1, size - 8 - 4, size - 3};
    const char *what[3] = {"m", "v", "the checksum"};
    for (int k = 0; k < 3; k++) {
        int fd = open(path, O_RDWR);
        unsigned char b;
        ck_assert(pread(fd, &b, 1, (off_t)at[k]) == 1);
        b ^= 0x01;
        ck_assert(pwrite(fd, &b, 1, (off_t)at[k]) == 1);
        llm_config c2;
        llm_weights w2;
        llm_train_state s2;
        ck_assert_msg(llm_ckpt_read(g_dir, &c2, &w2, &s2, NULL, err, sizeof err) != 0,
                      "a damaged byte in %s was accepted", what[k]);
        ck_assert_msg(strstr(err, "checksum"), "%s: %s", what[k], err);
        b ^= 0x01;                /* repaired: read again */
        ck_assert(pwrite(fd, &b, 1, (off_t)at[k]) == 1);
        close(fd);
        ck_assert_msg(llm_ckpt_read(g_dir, &c2, &w2, &s2, NULL, err, sizeof err) == 0, "%s",
                      err);
        ck_assert(memcmp(s2.m, s.m, n * sizeof(float)) == 0);
        llm_weights_free(&w2);
        llm_train_state_free(&s2);
    }
    llm_weights_free(&w);
    llm_train_state_free(&s);
}
END_TEST

/* Each file: its temporary written and fsync'd, then renamed into place, then its directory
 * fsync'd (so the rename itself survives a power cut). */
START_TEST(fsync_before_rename)
{
    llm_config c;
    llm_weights w;
    llm_train_state s;
    g_nev = 0;
    g_watch = 1;
    write_ckpt(&c, &w, &s);
    g_watch = 0;
    static const char *names[2] = {"model.train", "model.bin"};
    char real[PATH_MAX];
    ck_assert(realpath(g_dir, real) != NULL);
    for (int f = 0; f < 2; f++) {
        int r = -1;
        for (int i = 0; i < g_nev; i++)
            if (g_ev[i].kind == EV_RENAME && strstr(g_ev[i].b, names[f]) &&
                !strstr(g_ev[i].b, ".tmp."))
                r = i;
        ck_assert_msg(r >= 0, "%s was never renamed into place", names[f]);
        const char *tmp = g_ev[r].a;
        char tmp_real[PATH_MAX + 32];
        snprintf(tmp_real, sizeof tmp_real, "%s/%s", real, strrchr(tmp, '/') + 1);
        int synced = 0, dir_after = 0;
        for (int i = 0; i < r; i++)
            synced |= g_ev[i].kind == EV_FSYNC && !strcmp(g_ev[i].a, tmp_real);
        for (int i = r + 1; i < g_nev; i++)
            dir_after |= g_ev[i].kind == EV_FSYNC && !strcmp(g_ev[i].a, real);
        ck_assert_msg(synced, "%s: its temporary %s was not fsync'd before the rename", names[f],
                      tmp);
        ck_assert_msg(dir_after, "%s: the directory was not fsync'd after the rename",
                      names[f]);
    }
    llm_weights_free(&w);
    llm_train_state_free(&s);
}
END_TEST

/* The file is exactly as long as its header says: one byte (or four) more is refused, with
 * the size named, as one byte less is. */
START_TEST(trailing_bytes_refused)
{
    llm_config c;
    llm_weights w;
    llm_train_state s;
    write_ckpt(&c, &w, &s);
    char path[128], err[512];
    snprintf(path, sizeof path, "%s/model.train", g_dir);
    struct stat st;
    ck_assert(stat(path, &st) == 0);
    for (int extra = 1; extra <= 4; extra += 3) {
        int fd = open(path, O_WRONLY | O_APPEND);
        ck_assert(fd >= 0 && write(fd, "\0\0\0\0", (size_t)extra) == extra);
        close(fd);
        llm_config c2;
        llm_weights w2;
        llm_train_state s2;
        ck_assert_msg(llm_ckpt_read(g_dir, &c2, &w2, &s2, NULL, err, sizeof err) != 0,
                      "%d byte(s) after the checksum were accepted", extra);
        ck_assert_msg(strstr(err, "wrong size"), "%s", err);
        ck_assert(truncate(path, st.st_size) == 0);
        ck_assert_msg(llm_ckpt_read(g_dir, &c2, &w2, &s2, NULL, err, sizeof err) == 0, "%s",
                      err);
        llm_weights_free(&w2);
        llm_train_state_free(&s2);
    }
    llm_weights_free(&w);
    llm_train_state_free(&s);
}
END_TEST

static void copy_file(const char *from, const char *to)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd, "cp '%s' '%s'", from, to);
    ck_assert(system(cmd) == 0);
}

/* model.bin one checkpoint behind model.train (an interruption between the two renames) is
 * recognised as stale, also after the last step was saved a second time (a resume at the
 * last step does that): the second save records the predecessor the first recorded. A
 * model.bin of other weights is refused. */
START_TEST(stale_export_after_a_second_save)
{
    llm_config c;
    llm_weights w;
    llm_train_state s;
    write_ckpt(&c, &w, &s);                       /* A */
    char bin[128], old_bin[160], err[512];
    snprintf(bin, sizeof bin, "%s/model.bin", g_dir);
    snprintf(old_bin, sizeof old_bin, "%s/a.bin.keep", g_dir);
    copy_file(bin, old_bin);
    for (size_t i = 0; i < w.n_floats; i++)       /* B: other weights, a later step */
        w.mem[i] += 0.5f;
    s.step = 5;
    for (int save = 0; save < 2; save++) {
        ck_assert_msg(llm_ckpt_write(g_dir, &c, &w, &s, err, sizeof err) == 0, "%s", err);
        copy_file(old_bin, bin);                  /* the export still A's */
        llm_config c2;
        llm_weights w2;
        llm_train_state s2;
        int stale = -1;
        ck_assert_msg(llm_ckpt_read(g_dir, &c2, &w2, &s2, &stale, err, sizeof err) == 0,
                      "save %d: %s", save + 1, err);
        ck_assert_int_eq(stale, 1);
        ck_assert_uint_eq(s2.step, 5);
        llm_weights_free(&w2);
        llm_train_state_free(&s2);
    }
    /* weights of neither: refused, not overwritten */
    llm_weights other;
    ck_assert_int_eq(llm_weights_alloc(&other, &c, err, sizeof err), 0);
    for (size_t i = 0; i < other.n_floats; i++)
        other.mem[i] = -0.25f;
    ck_assert_int_eq(llm_checkpoint_write(bin, &c, &other, err, sizeof err), 0);
    llm_config c2;
    llm_weights w2;
    llm_train_state s2;
    ck_assert(llm_ckpt_read(g_dir, &c2, &w2, &s2, NULL, err, sizeof err) != 0);
    ck_assert_msg(strstr(err, "replaced"), "%s", err);
    llm_weights_free(&other);
    llm_weights_free(&w);
    llm_train_state_free(&s);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("ckpt_promises");
    TCase *tc = tcase_create("file");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, damaged_moment_byte_refused);
    tcase_add_test(tc, fsync_before_rename);
    tcase_add_test(tc, trailing_bytes_refused);
    tcase_add_test(tc, stale_export_after_a_second_save);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
