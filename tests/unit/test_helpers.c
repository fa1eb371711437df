/* test_helpers.c - the things the tree keeps one of: the percentile (against values worked
 * out by hand with numpy's rule), the monotonic deadline, the KV bytes per token (against a
 * real paged pool's slot and the chapter's heads x head_dim formula), the search for shipped
 * files (its documented order, each step alone), and the model loader (the configuration
 * from the header alone: a file whose weights are bad still gives its config, one cut short
 * does not; a tokenizer that is not the model's is refused with nothing allocated). */
#include "../../core/mlsys.h"
#include "../../core/llm/llm.h"
#include "../../core/llm/engine.h"
#include "../../lab/lab.h"
#include <check.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* ---- percentile ---- */

START_TEST(percentile_by_numpys_rule)
{
    /* numpy.percentile(v, p) (linear) for these, worked out by hand:
     * pos = p/100 * (n-1), then v[lo] + frac * (v[lo+1] - v[lo]) on the sorted values */
    double a[] = {4, 1, 3, 2};                   /* sorted 1 2 3 4 */
    ck_assert_double_eq_tol(mlsys_percentile(a, 4, 50), 2.5, 1e-12);
    ck_assert_double_eq(a[0], 1);                /* sorted in place */
    ck_assert_double_eq(a[3], 4);
    ck_assert_double_eq_tol(mlsys_percentile(a, 4, 0), 1, 1e-12);
    ck_assert_double_eq_tol(mlsys_percentile(a, 4, 100), 4, 1e-12);
    ck_assert_double_eq_tol(mlsys_percentile(a, 4, 25), 1.75, 1e-12);   /* pos 0.75 */
    double b[10];
    for (int i = 0; i < 10; i++)
        b[i] = 10 - i;                           /* 10 .. 1 */
    ck_assert_double_eq_tol(mlsys_percentile(b, 10, 90), 9.1, 1e-12);   /* pos 8.1 */
    ck_assert_double_eq_tol(mlsys_percentile(b, 10, 99), 9.91, 1e-12);  /* pos 8.91 */
    ck_assert_double_eq_tol(mlsys_percentile(b, 10, 50), 5.5, 1e-12);
    double odd[] = {7, -3, 5, 100, 0};           /* sorted -3 0 5 7 100: the middle */
    ck_assert_double_eq(mlsys_percentile(odd, 5, 50), 5);
    double one[] = {42};
    ck_assert_double_eq(mlsys_percentile(one, 1, 99), 42);
    ck_assert_double_eq(mlsys_percentile(NULL, 0, 50), 0);
    double two[] = {20, 10};
    ck_assert_double_eq_tol(mlsys_percentile(two, 2, 99), 19.9, 1e-12);
}
END_TEST

/* ---- deadline ---- */

static double mono_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

START_TEST(deadline_is_monotonic_now_plus)
{
    static const double secs[] = {0.25, 0.9999999, 1.5, 3600.0, 0.0, -2.0};
    for (size_t i = 0; i < sizeof secs / sizeof secs[0]; i++) {
        struct timespec ts;
        double before = mono_s();
        mlsys_deadline(&ts, secs[i]);
        double after = mono_s();
        double at = (double)ts.tv_sec + ts.tv_nsec * 1e-9, add = secs[i] > 0 ? secs[i] : 0;
        ck_assert_msg(ts.tv_nsec >= 0 && ts.tv_nsec < 1000000000L, "tv_nsec %ld", ts.tv_nsec);
        ck_assert_msg(at >= before + add - 1e-6 && at <= after + add + 1e-6,
                      "%g s: %.9f not within [%.9f, %.9f]", secs[i], at, before + add,
                      after + add);
    }
}
END_TEST

/* ---- KV bytes ---- */

START_TEST(kv_bytes_is_a_pool_slot)
{
    /* grouped-query (2 KV heads for 8 query heads), so kv_dim differs from dim */
    llm_config c = {64, 128, 3, 8, 2, 300, 64, 1, 0, 0};
    char err[256];
    ck_assert_int_eq(llm_config_check(&c, err, sizeof err), 0);
    /* the chapter's formula: K and V, every layer, KV heads x head_dim floats */
    ck_assert_uint_eq(llm_kv_bytes(&c), 2u * 3 * 2 * (64 / 8) * 4);
    llm_kv kv;
    llm_paged_opts po = {.block_size = 16, .n_blocks = 4, .n_seqs = 1};
    ck_assert_msg(llm_kv_init_paged(&kv, &c, &po, err, sizeof err) == 0, "%s", err);
    ck_assert_uint_eq(llm_kv_bytes(&c) * (size_t)kv.n_slots, kv.bytes);
    llm_kv_free(&kv);
}
END_TEST

/* ---- the search for shipped files ---- */

static char g_dir[] = "/tmp/mlsys-test-helpers-XXXXXX";

static void put(const char *path)
{
    char cmd[PATH_MAX + 64];
    snprintf(cmd, sizeof cmd, "mkdir -p \"$(dirname '%s')\" && : > '%s'", path, path);
    ck_assert_int_eq(system(cmd), 0);
}

static void dir_setup(void)
{
    snprintf(g_dir, sizeof g_dir, "/tmp/mlsys-test-helpers-XXXXXX");    /* afresh for every test */
    ck_assert_ptr_nonnull(mkdtemp(g_dir));
}

static void dir_teardown(void)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    ck_assert_int_eq(system(cmd), 0);
}

START_TEST(asset_search_order)
{
    char cwd[PATH_MAX + 16], src[PATH_MAX + 16], p[PATH_MAX + 64], out[PATH_MAX + 64];
    snprintf(cwd, sizeof cwd, "%s/cwd", g_dir);
    snprintf(src, sizeof src, "%s/src", g_dir);
    snprintf(p, sizeof p, "%s/assets/both.bin", cwd);
    put(p);
    snprintf(p, sizeof p, "%s/assets/both.bin", src);
    put(p);
    snprintf(p, sizeof p, "%s/assets/src_only.bin", src);
    put(p);
    ck_assert_int_eq(chdir(cwd), 0);
    setenv("MLSYS_LAB_SRC", src, 1);
    /* 1. what the user named from the current folder wins over the source tree */
    ck_assert_str_eq(lab_asset_path("assets/both.bin", out, sizeof out), "assets/both.bin");
    /* 2. then the source tree */
    snprintf(p, sizeof p, "%s/assets/src_only.bin", src);
    ck_assert_str_eq(lab_asset_path("assets/src_only.bin", out, sizeof out), p);
    /* an absolute path is itself, even where it does not exist */
    ck_assert_str_eq(lab_asset_path("/no/such/file.bin", out, sizeof out), "/no/such/file.bin");
    /* none: the name as asked, for the open to name */
    ck_assert_str_eq(lab_asset_path("assets/nowhere.bin", out, sizeof out),
                     "assets/nowhere.bin");
    ck_assert_str_eq(lab_asset_path("", out, sizeof out), "");
    /* 3. next to the program: one folder up of this test (BUILD/tests/..) */
    unsetenv("MLSYS_LAB_SRC");
    char exe[PATH_MAX], up[PATH_MAX + 128], rel[64];
    ssize_t k = readlink("/proc/self/exe", exe, sizeof exe - 1);
    ck_assert_int_gt(k, 0);
    exe[k] = 0;
    *strrchr(exe, '/') = 0;
    snprintf(rel, sizeof rel, "helpers-asset-%d.bin", (int)getpid());
    snprintf(up, sizeof up, "%s/../%s", exe, rel);
    put(up);
    char real[PATH_MAX];
    ck_assert_ptr_nonnull(realpath(up, real));
    lab_asset_path(rel, out, sizeof out);
    unlink(up);
    ck_assert_str_eq(out, real);
}
END_TEST

/* ---- the model loader ---- */

static const llm_config small = {32, 64, 2, 4, 4, 259, 32, 1, 0, 0};

/* A model file whose first weight is `first` (written into the file after the header, so
 * that a value the writer would refuse can be planted too). */
static void write_model(const char *path, llm_config c, float first)
{
    llm_weights w;
    char err[256];
    ck_assert_msg(llm_weights_alloc(&w, &c, err, sizeof err) == 0, "%s", err);
    ck_assert_msg(llm_checkpoint_write(path, &c, &w, err, sizeof err) == 0, "%s", err);
    llm_weights_free(&w);
    FILE *f = fopen(path, "r+b");
    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(fseek(f, 28, SEEK_SET), 0);
    ck_assert_int_eq(fwrite(&first, 4, 1, f), 1);
    ck_assert_int_eq(fclose(f), 0);
}

/* llama2.c's tokenizer file: n pieces "<k>", scores 0. */
static void write_tokenizer(const char *path, int n)
{
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    int32_t mtl = 8;
    fwrite(&mtl, 4, 1, f);
    for (int i = 0; i < n; i++) {
        char piece[16];
        int32_t len = (int32_t)snprintf(piece, sizeof piece, "<%d>", i);
        float score = 0;
        fwrite(&score, 4, 1, f);
        fwrite(&len, 4, 1, f);
        fwrite(piece, 1, (size_t)len, f);
    }
    ck_assert_int_eq(fclose(f), 0);
}

START_TEST(config_from_the_header_alone)
{
    char bad[PATH_MAX], cut[PATH_MAX], err[512];
    snprintf(bad, sizeof bad, "%s/nan.bin", g_dir);
    snprintf(cut, sizeof cut, "%s/cut.bin", g_dir);
    write_model(bad, small, NAN);          /* a weight the full read refuses */
    write_model(cut, small, 0);
    ck_assert_int_eq(truncate(cut, 28 + 4 * (off_t)llm_file_floats(&small) - 4), 0);
    llm_config c;
    llm_weights w;
    ck_assert_int_eq(llm_checkpoint_read(bad, &c, &w, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "not finite"), "%s", err);
    memset(&c, 0, sizeof c);
    ck_assert_msg(llm_checkpoint_read(bad, &c, NULL, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(c.dim, small.dim);
    ck_assert_int_eq(c.n_layers, small.n_layers);
    ck_assert_int_eq(c.vocab_size, small.vocab_size);
    ck_assert_int_eq(c.kv_dim, small.dim);      /* derived: the header was checked */
    /* the size is still held against the header */
    ck_assert_int_eq(llm_checkpoint_read(cut, &c, NULL, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "truncated"), "%s", err);
    ck_assert_int_eq(llm_model_read(bad, NULL, &c, NULL, NULL, err, sizeof err), 0);
}
END_TEST

START_TEST(model_and_its_tokenizer)
{
    char m[PATH_MAX], t_ok[PATH_MAX], t_other[PATH_MAX], err[512];
    snprintf(m, sizeof m, "%s/m.bin", g_dir);
    snprintf(t_ok, sizeof t_ok, "%s/ok.tok", g_dir);
    snprintf(t_other, sizeof t_other, "%s/other.tok", g_dir);
    write_model(m, small, 0.5f);
    write_tokenizer(t_ok, small.vocab_size);
    write_tokenizer(t_other, small.vocab_size + 5);
    llm_config c;
    llm_weights w;
    llm_tokenizer t;
    ck_assert_msg(llm_model_read(m, t_ok, &c, &w, &t, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(t.vocab_size, c.vocab_size);
    ck_assert_float_eq(w.mem[0], 0.5f);
    llm_tokenizer_free(&t);
    llm_weights_free(&w);
    /* another vocabulary: refused, saying both sizes, the weights given back */
    memset(&w, 0, sizeof w);
    ck_assert_int_eq(llm_model_read(m, t_other, &c, &w, &t, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "264 ids") && strstr(err, "259"), "%s", err);
    ck_assert_ptr_null(w.mem);
    /* the configuration and the tokenizer, no weights */
    ck_assert_msg(llm_model_read(m, t_ok, &c, NULL, &t, err, sizeof err) == 0, "%s", err);
    llm_tokenizer_free(&t);
    ck_assert_int_eq(llm_model_read(t_ok, t_ok, &c, NULL, &t, err, sizeof err), -1);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("helpers");
    TCase *tc = tcase_create("one_of_each");
    tcase_add_test(tc, percentile_by_numpys_rule);
    tcase_add_test(tc, deadline_is_monotonic_now_plus);
    tcase_add_test(tc, kv_bytes_is_a_pool_slot);
    suite_add_tcase(s, tc);
    TCase *tf = tcase_create("files");
    tcase_add_checked_fixture(tf, dir_setup, dir_teardown);
    tcase_add_test(tf, asset_search_order);
    tcase_add_test(tf, config_from_the_header_alone);
    tcase_add_test(tf, model_and_its_tokenizer);
    suite_add_tcase(s, tf);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
