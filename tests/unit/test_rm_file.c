/* test_rm_file.c - the reward model's file reader (core/rl/reward_model.c's rl_rm_load) keeps
 * the promises of model.bin's: a round trip is exact; a FIFO is refused at once, not waited
 * on; a header that asks for more than the file holds is refused before anything is
 * allocated (under a 1 GiB address-space limit, a flipped dim bit asks for more);
 * vocab = INT_MIN, NaN or Inf values, trailing or missing bytes are refused; every refusal
 * is one line naming the file and leaves nothing allocated. */
#include <check.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>
#include "../../core/rl/rlhf.h"
#include "../../core/nn/nn.h"

static char g_dir[64], g_path[128];

static void setup(void)
{
    snprintf(g_dir, sizeof g_dir, "/tmp/mlsys-test-rmf-XXXXXX");
    ck_assert(mkdtemp(g_dir) != NULL);
    snprintf(g_path, sizeof g_path, "%s/reward.bin", g_dir);
}

static void teardown(void)
{
    unlink(g_path);
    rmdir(g_dir);
}

/* A small reward model with every value set, saved at g_path. */
static void tiny(rl_rm *m)
{
    llm_config c = {8, 16, 1, 2, 1, 32, 8, 1, 0, 0};
    char err[256];
    llm_weights w;
    ck_assert_int_eq(llm_weights_alloc(&w, &c, err, sizeof err), 0);
    nn_tf_init_weights(&w, &c, 5);
    ck_assert_int_eq(rl_rm_init(m, &c, &w, err, sizeof err), 0);
    llm_weights_free(&w);
    for (int i = 0; i <= c.dim; i++)
        m->head[i] = 0.25f * (float)(i - 3);
    ck_assert_msg(rl_rm_save(m, g_path, err, sizeof err) == 0, "%s", err);
}

static unsigned char *file_bytes(size_t *n)
{
    FILE *f = fopen(g_path, "rb");
    ck_assert(f);
    fseek(f, 0, SEEK_END);
    *n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc(*n + 64);
    ck_assert(fread(b, 1, *n, f) == *n);
    fclose(f);
    return b;
}

static void put_bytes(const unsigned char *b, size_t n)
{
    FILE *f = fopen(g_path, "wb");
    ck_assert(f && fwrite(b, 1, n, f) == n);
    fclose(f);
}

/* The file as it stands is refused: -1, one line that names it and says `want`, nothing
 * left allocated. */
static void refused(const char *want)
{
    rl_rm m;
    char err[512] = "";
    ck_assert_int_eq(rl_rm_load(&m, g_path, err, sizeof err), -1);
    ck_assert_msg(strstr(err, g_path) == err, "does not start with the path: %s", err);
    ck_assert_msg(!strchr(err, '\n'), "more than one line: %s", err);
    ck_assert_msg(strstr(err, want), "'%s' not in: %s", want, err);
    ck_assert(m.w.mem == NULL && m.head == NULL);
}

START_TEST(round_trip_exact)
{
    rl_rm m, back;
    char err[256];
    tiny(&m);
    ck_assert_msg(rl_rm_load(&back, g_path, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(back.c.dim, 8);
    ck_assert_int_eq(back.c.vocab_size, 32);
    ck_assert(memcmp(back.w.mem, m.w.mem, m.w.n_floats * sizeof(float)) == 0);
    ck_assert(memcmp(back.head, m.head, 9 * sizeof(float)) == 0);
    rl_rm_free(&back);
    rl_rm_free(&m);
}
END_TEST

START_TEST(fifo_refused_at_once)
{
    ck_assert(mkfifo(g_path, 0600) == 0);
    alarm(20);                    /* the old reader waited for a writer forever */
    refused("FIFO");
    alarm(0);
}
END_TEST

/* A header whose dim has a high bit flipped asks for GBs; the file is a few KiB. The
 * size is compared before anything is allocated: under a 1 GiB address space the answer is
 * still the size, not an allocation failure or an abort. */
START_TEST(huge_header_refused_before_allocation)
{
    rl_rm m;
    tiny(&m);
    rl_rm_free(&m);
    size_t n;
    unsigned char *b = file_bytes(&n);
    int32_t h[7];
    memcpy(h, b + 8, sizeof h);
    h[0] = 8 | 1 << 14;           /* dim 16392 (2 heads still divide it): over 1 GiB */
    memcpy(b + 8, h, sizeof h);
    put_bytes(b, n);
    free(b);
    struct rlimit rl = {1ull << 30, 1ull << 30};
    ck_assert(setrlimit(RLIMIT_AS, &rl) == 0);
    refused("truncated");
}
END_TEST

START_TEST(bad_values_refused)
{
    rl_rm m;
    tiny(&m);
    size_t n, nf = m.w.n_floats;
    rl_rm_free(&m);
    unsigned char *good = file_bytes(&n), *b = malloc(n + 64);
    int32_t h[7];
    /* vocab INT_MIN: its sign is the classifier flag, its negation undefined */
    memcpy(b, good, n);
    memcpy(h, b + 8, sizeof h);
    h[5] = INT_MIN;
    memcpy(b + 8, h, sizeof h);
    put_bytes(b, n);
    refused("bad header");
    /* a NaN weight, an infinite head value */
    float nan = NAN, inf = -INFINITY;
    memcpy(b, good, n);
    memcpy(b + 36 + 4 * 5, &nan, 4);
    put_bytes(b, n);
    refused("weight 5 of");
    memcpy(b, good, n);
    memcpy(b + 36 + 4 * (nf + 2), &inf, 4);
    put_bytes(b, n);
    refused("head value 2 of 9 is not finite");
    /* bytes after the head, bytes missing, no magic */
    memcpy(b, good, n);
    memcpy(b + n, "extra", 5);
    put_bytes(b, n + 5);
    refused("wrong size");
    put_bytes(good, n - 4);
    refused("truncated");
    put_bytes(good, 20);
    refused("MLSYSRM1");
    memcpy(b, good, n);
    b[3] ^= 1;
    put_bytes(b, n);
    refused("MLSYSRM1");
    unlink(g_path);
    refused("cannot open");
    free(b);
    free(good);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("rm_file");
    TCase *tc = tcase_create("reader");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, round_trip_exact);
    tcase_add_test(tc, fifo_refused_at_once);
    tcase_add_test(tc, huge_header_refused_before_allocation);
    tcase_add_test(tc, bad_values_refused);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
