/* test_llm_files.c - the model's files keep their promises: readers bound what a header asks
 * for (a context of 2^20 with many heads) before allocating or computing, a vocabulary too
 * small for the byte fallback is refused, a FIFO with no writer is never waited for, and the
 * writers never replace what is not a regular file (a FIFO, a directory, a device node).
 * Through the library and through `generate` / `model info` / `model init`, each bad case
 * one line and exit 2. */
#include "../../core/llm/llm.h"
#include "../../lab/cli/generate.h"
#include "run_bin.h"

#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__)
#define UNDER_ASAN 1
#else
#define UNDER_ASAN 0
#endif

static char g_dir[256];

static void mk_dir(void)
{
    snprintf(g_dir, sizeof g_dir, "/tmp/mlsys-llm-files-XXXXXX");
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

/* tokenizer.bin with the three specials and the first nbytes byte pieces, written by hand
 * in llama2.c's layout (int32 max_token_length; per id f32 score, int32 length, bytes). */
static void write_byte_tokenizer(const char *path, int nbytes)
{
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    int32_t mtl = 6;
    fwrite(&mtl, 4, 1, f);
    const char *spec[3] = {"<unk>", "<s>", "</s>"};
    for (int i = 0; i < 3 + nbytes; i++) {
        char piece[8];
        int32_t len;
        float score = i < 3 ? -1e30f : 0.0f;
        if (i < 3) {
            len = (int32_t)strlen(spec[i]);
            memcpy(piece, spec[i], (size_t)len);
        } else {
            int b = i - 3;
            if ((b >= 0x20 && b <= 0x7e) || b == '\n') {
                piece[0] = (char)b;
                len = 1;
            } else {
                len = snprintf(piece, sizeof piece, "<0x%02X>", b);
            }
        }
        fwrite(&score, 4, 1, f);
        fwrite(&len, 4, 1, f);
        fwrite(piece, 1, (size_t)len, f);
    }
    fclose(f);
}

/* An all-zero model of the given shape (every logit 0: uniform predictions). */
static void write_model(const char *path, llm_config c)
{
    llm_weights w;
    char err[256];
    ck_assert_msg(llm_weights_alloc(&w, &c, err, sizeof err) == 0, "%s", err);
    ck_assert_msg(llm_checkpoint_write(path, &c, &w, err, sizeof err) == 0, "%s", err);
    llm_weights_free(&w);
}

/* A context of 2^20 positions and 32 heads of size 2 in an 8 MB file: inside every limit of
 * the header, yet 64 rows of attention scores would be 8.6 GB and one validation window of
 * the whole context 2^40 scores. */
static const llm_config long_ctx = {64, 64, 1, 32, 32, 259, 1 << 20, 1, 0, 0};

/* Run the program (args split by the shell) under `timeout secs`, with `pre` (shell, e.g. a
 * ulimit or an environment variable) before it; stdout and stderr apart. */
static bin_result run_limited(int secs, const char *pre, const char *args)
{
    char cmd[2048], errp[300];
    snprintf(errp, sizeof errp, "%s/stderr.txt", g_dir);
    snprintf(cmd, sizeof cmd, "%s exec timeout -k 5 %d '%s' %s 2>'%s'", pre, secs, bin(), args,
             errp);
    bin_result r = {-1, NULL, NULL};
    fflush(NULL);
    FILE *p = popen(cmd, "r");
    ck_assert_ptr_nonnull(p);
    r.out = slurp_fd(fileno(p));
    int st = pclose(p);
    r.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    FILE *e = fopen(errp, "r");
    r.err = e ? slurp_fd(fileno(e)) : strdup("");
    if (e)
        fclose(e);
    return r;
}

static int count_lines(const char *s)
{
    int n = 0;
    for (; s && *s; s++)
        n += *s == '\n';
    return n;
}

/* exit 2 and exactly one line on stderr that contains want */
static void expect_refused(bin_result r, const char *args, const char *want)
{
    ck_assert_msg(r.status == 2, "'%s': exit %d (want 2), stderr: %s", args, r.status, r.err);
    ck_assert_msg(count_lines(r.err) == 1, "'%s': stderr is not one line: %s", args, r.err);
    ck_assert_msg(strstr(r.err, want) != NULL, "'%s': '%s' not in: %s", args, want, r.err);
}

/* ---- item: readers bound what a header asks for ---- */

START_TEST(engine_and_cache_bound_what_the_header_asks)
{
    llm_config c = long_ctx;
    char err[512];
    ck_assert_int_eq(llm_config_check(&c, err, sizeof err), 0);
    /* the scratch, worked out independently: RoPE tables S·HS, and per row the residual
     * and its copies 4·D, keys and values 2·KVD, the MLP 2·H, scores NH·S, slots S */
    for (int R = 1; R <= 64; R *= 4) {
        double want = 4.0 * ((double)c.seq_len * c.head_size +
                             R * (4.0 * c.dim + 2.0 * c.kv_dim + 2.0 * c.hidden_dim +
                                  (double)c.n_heads * c.seq_len + c.seq_len));
        ck_assert_msg(fabs((double)llm_fwd_bytes(&c, R) - want) < 1.0, "R=%d: %llu vs %.0f",
                      R, (unsigned long long)llm_fwd_bytes(&c, R), want);
    }
    setenv("MLSYS_MEM_LIMIT", "1G", 1);
    ck_assert_uint_le(mlsys_mem_available(), 1ull << 30);
    llm_fwd e;
    ck_assert_int_eq(llm_fwd_init(&e, &c, NULL, 64, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "seq_len 1048576") && strstr(err, "32 heads"), "%s", err);
    ck_assert_ptr_null(e.mem);
    int r = llm_fwd_rows_that_fit(&c, 64);
    ck_assert_msg(r >= 1 && r < 64 && llm_fwd_bytes(&c, r) <= (1ull << 30) &&
                  llm_fwd_bytes(&c, 2 * r) > (1ull << 30), "rows that fit: %d", r);
    llm_kv kv;
    ck_assert_int_eq(llm_kv_init_contiguous(&kv, &c, 64, 0, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "kv cache") && strstr(err, "more than"), "%s", err);
    ck_assert_ptr_null(kv.k);
    /* the stated limit holds whatever the machine has */
    setenv("MLSYS_MEM_LIMIT", "1T", 1);
    c.n_heads = c.n_kv_heads = 32;
    ck_assert_uint_gt(llm_fwd_bytes(&c, 4096), LLM_FWD_MAX_BYTES);
    ck_assert_int_eq(llm_fwd_init(&e, &c, NULL, 4096, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "limit"), "%s", err);
    unsetenv("MLSYS_MEM_LIMIT");
}
END_TEST

START_TEST(checkpoint_read_checks_the_machine)
{
    mk_dir();
    write_model(at("long.bin"), long_ctx);
    llm_config c;
    llm_weights w;
    char err[512];
    setenv("MLSYS_MEM_LIMIT", "4M", 1);
    ck_assert_int_eq(llm_checkpoint_read(at("long.bin"), &c, &w, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "more than this machine has free") && strstr(err, "long.bin"),
                  "%s", err);
    ck_assert_ptr_null(w.mem);
    unsetenv("MLSYS_MEM_LIMIT");
    ck_assert_msg(llm_checkpoint_read(at("long.bin"), &c, &w, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(c.seq_len, 1 << 20);
    llm_weights_free(&w);
    /* a vocabulary of 2^20 announced by the caller for a 12-byte file: refused as truncated */
    FILE *f = fopen(at("short.tok"), "wb");
    int32_t hdr[3] = {4, 0, 1};
    fwrite(hdr, 4, 3, f);
    fclose(f);
    llm_tokenizer t;
    ck_assert_int_eq(llm_tokfile_read(at("short.tok"), LLM_MAX_VOCAB, &t, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "truncated"), "%s", err);
    rm_dir();
}
END_TEST

/* The model file is mapped, not read into a copy: the weights are the file's bytes (a
 * write to them stays in this process), every float is checked finite, and the first NaN or
 * infinity anywhere, first or last float included, is named by its index. */
START_TEST(checkpoint_mapped_and_checked)
{
    mk_dir();
    llm_config c = {16, 32, 1, 2, 2, 259, 8, 1, 0, 0};
    llm_weights w;
    char err[512];
    ck_assert_msg(llm_weights_alloc(&w, &c, err, sizeof err) == 0, "%s", err);
    for (size_t i = 0; i < w.n_floats; i++)
        w.mem[i] = (float)(i % 97) / 8.0f - 6.0f;
    size_t n = w.n_floats;
    ck_assert_msg(llm_checkpoint_write(at("m.bin"), &c, &w, err, sizeof err) == 0, "%s", err);
    llm_config rc;
    llm_weights r;
    ck_assert_msg(llm_checkpoint_read(at("m.bin"), &rc, &r, err, sizeof err) == 0, "%s", err);
    ck_assert_ptr_nonnull(r.map);
    ck_assert_uint_eq(r.n_floats, n);
    ck_assert(memcmp(r.mem, w.mem, n * sizeof(float)) == 0);
    r.mem[0] = 123.0f;                      /* private: the file keeps its bytes */
    llm_weights_free(&r);
    ck_assert(llm_checkpoint_read(at("m.bin"), &rc, &r, err, sizeof err) == 0);
    ck_assert(r.mem[0] == w.mem[0]);
    llm_weights_free(&r);
    size_t bad[3] = {0, n / 2 + 1, n - 1};
    float what[3] = {NAN, INFINITY, -INFINITY};
    for (int k = 0; k < 3; k++) {
        float keep = w.mem[bad[k]];
        w.mem[bad[k]] = what[k];
        ck_assert(llm_checkpoint_write(at("m.bin"), &c, &w, err, sizeof err) == 0);
        w.mem[bad[k]] = keep;
        ck_assert_int_eq(llm_checkpoint_read(at("m.bin"), &rc, &r, err, sizeof err), -1);
        char want[96];
        snprintf(want, sizeof want, "weight %zu of %zu is not finite", bad[k], n);
        ck_assert_msg(strstr(err, want), "%s (want %s)", err, want);
        ck_assert_ptr_null(r.mem);
    }
    llm_weights_free(&w);
    rm_dir();
}
END_TEST

/* generate and model info on the 2^20 context: they fit in 3 GB (the address space is
 * limited, or under ASan, where that cannot be, MLSYS_MEM_LIMIT) and end; with 64 MiB they
 * refuse in one line. Before, generate asked for 8.6 GB at once and model info computed one
 * window of the whole context. */
START_TEST(generate_and_info_on_a_long_context)
{
    mk_dir();
    write_model(at("long.bin"), long_ctx);
    write_byte_tokenizer(at("tok.bin"), 256);
    const char *pre = UNDER_ASAN ? "MLSYS_MEM_LIMIT=3G" : "ulimit -v 3000000;";
    char args[1024];
    snprintf(args, sizeof args, "generate --model %s --tokenizer %s --prompt 'Once' -n 4 "
             "--temperature 0", at("long.bin"), at("tok.bin"));
    bin_result r = run_limited(60, pre, args);
    ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
    ck_assert_msg(!strncmp(r.out, "Once", 4), "%s", r.out);
    bin_result_free(&r);
    snprintf(args, sizeof args, "model info %s --tokenizer %s --val-tokens 300 --samples 2",
             at("long.bin"), at("tok.bin"));
    r = run_limited(60, pre, args);
    ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
    /* an all-zero model predicts uniformly: the loss is ln V over exactly 300 predictions */
    double loss = 0;
    long ntok = 0;
    const char *l = strstr(r.out, "val loss");
    ck_assert_msg(l && sscanf(l, "val loss %lf (perplexity %*f; %ld tokens", &loss, &ntok) == 2,
                  "%s", r.out);
    ck_assert_int_eq(ntok, 300);
    ck_assert(fabs(loss - log(259.0)) < 1e-3);
    bin_result_free(&r);
    /* the engine sizes its cache and scratch by the positions the run reaches (5 here), not
     * by the context the header announces: 64 MB is plenty */
    snprintf(args, sizeof args, "generate --model %s --tokenizer %s -n 4", at("long.bin"),
             at("tok.bin"));
    r = run_limited(60, "MLSYS_MEM_LIMIT=64M", args);
    ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
    bin_result_free(&r);
    /* a run that reaches the whole context needs scores over 2^20 positions per row: refused
     * before anything is allocated */
    snprintf(args, sizeof args, "generate --model %s --tokenizer %s -n 1048575 --ignore-eos",
             at("long.bin"), at("tok.bin"));
    r = run_limited(60, "MLSYS_MEM_LIMIT=64M", args);
    expect_refused(r, args, "sequences of up to 1048576 tokens");
    bin_result_free(&r);
    rm_dir();
}
END_TEST

/* the window follows --val-tokens when it is shorter than the context (gen_measure) */
START_TEST(validation_windows_follow_val_tokens)
{
    mk_dir();
    llm_config c = long_ctx;
    c.seq_len = 4096;
    c.n_heads = c.n_kv_heads = 4;
    write_model(at("m.bin"), c);
    write_byte_tokenizer(at("tok.bin"), 256);
    llm_weights w;
    llm_tokenizer t;
    char err[512];
    ck_assert_msg(llm_checkpoint_read(at("m.bin"), &c, &w, err, sizeof err) == 0, "%s", err);
    ck_assert_msg(llm_tokfile_read(at("tok.bin"), c.vocab_size, &t, err, sizeof err) == 0, "%s",
                  err);
    gen_quality q;
    for (long vt = 50; vt <= 5000; vt *= 10) {
        ck_assert_msg(gen_measure(&c, &w, &t, 1, vt, 0, 1, 0.8f, &q, err, sizeof err) == 0, "%s",
                      err);
        /* windows of min(4096, vt): 50 -> 50, 500 -> 500, 5000 -> one window of 4096 */
        long want = vt < 4096 ? vt : 4096;
        ck_assert_msg(q.val_tokens == want, "--val-tokens %ld: %ld predictions", vt,
                      q.val_tokens);
        ck_assert(fabs(q.val_loss - log(259.0)) < 1e-3);
    }
    llm_tokenizer_free(&t);
    llm_weights_free(&w);
    rm_dir();
}
END_TEST

/* ---- item: a vocabulary under 259 ids ---- */

START_TEST(vocabulary_under_259_refused)
{
    mk_dir();
    write_byte_tokenizer(at("tok258.bin"), 255);     /* 3 + 255 = 258 ids */
    llm_config c = {32, 64, 1, 4, 2, 258, 32, 1, 0, 0};
    write_model(at("v258.bin"), c);
    llm_tokenizer t;
    char err[512];
    ck_assert_int_eq(llm_tokfile_read(at("tok258.bin"), 0, &t, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "258 tokens") && strstr(err, "259"), "%s", err);
    ck_assert_int_eq(llm_tokfile_read(at("tok258.bin"), 258, &t, err, sizeof err), -1);
    /* bytes 0xFF and 0xFE are exactly the ones past the end: text that holds them */
    const char *cmds[] = {"generate --model %s --tokenizer %s --prompt \"$(printf 'a\\377b')\" -n 3",
                          "model info %s --tokenizer %s --val-tokens 64 --samples 1"};
    for (int i = 0; i < 2; i++) {
        char args[1024];
        snprintf(args, sizeof args, cmds[i], at("v258.bin"), at("tok258.bin"));
        bin_result r = run_limited(60, "", args);
        expect_refused(r, args, "259");
        bin_result_free(&r);
    }
    /* 259 is enough */
    write_byte_tokenizer(at("tok259.bin"), 256);
    ck_assert_msg(llm_tokfile_read(at("tok259.bin"), 0, &t, err, sizeof err) == 0, "%s", err);
    int ids[8];
    ck_assert_uint_eq(llm_bpe_encode(&t, "\xff\xfe", 2, ids), 2);
    ck_assert_int_eq(ids[0], 3 + 0xff);
    llm_tokenizer_free(&t);
    rm_dir();
}
END_TEST

/* ---- item: a FIFO with no writer ---- */

START_TEST(fifo_with_no_writer_is_refused)
{
    mk_dir();
    ck_assert_int_eq(mkfifo(at("fifo"), 0644), 0);
    llm_config c = {32, 64, 1, 4, 2, 259, 32, 1, 0, 0};
    write_model(at("m.bin"), c);
    write_byte_tokenizer(at("tok.bin"), 256);
    llm_weights w;
    llm_config rc;
    llm_tokenizer t;
    char err[512];
    ck_assert_int_eq(llm_checkpoint_read(at("fifo"), &rc, &w, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "FIFO"), "%s", err);
    ck_assert_int_eq(llm_tokfile_read(at("fifo"), 0, &t, err, sizeof err), -1);
    ck_assert_msg(strstr(err, "FIFO"), "%s", err);
    const char *cmds[] = {"model info %s --tokenizer %s", "generate --model %s --tokenizer %s",
                          "model info %s --tokenizer %s", "generate --model %s --tokenizer %s"};
    for (int i = 0; i < 4; i++) {
        char args[1024];
        snprintf(args, sizeof args, cmds[i], i < 2 ? at("fifo") : at("m.bin"),
                 i < 2 ? at("tok.bin") : at("fifo"));
        bin_result r = run_limited(20, "", args);
        expect_refused(r, args, "FIFO");
        bin_result_free(&r);
    }
    rm_dir();
}
END_TEST

/* ---- item: writers never replace what is not a regular file ---- */

static void expect_kept(const char *path, mode_t type)
{
    struct stat st;
    ck_assert_int_eq(lstat(path, &st), 0);
    ck_assert_msg((st.st_mode & S_IFMT) == type, "%s was replaced (mode %o)", path,
                  (unsigned)st.st_mode);
}

START_TEST(writers_leave_what_is_not_a_regular_file)
{
    mk_dir();
    ck_assert_int_eq(mkfifo(at("fifo"), 0644), 0);
    ck_assert_int_eq(mkdir(at("dir"), 0755), 0);
    ck_assert_int_eq(symlink(at("nowhere"), at("dangling")), 0);
    struct { const char *name, *what; mode_t type; } t[] = {
        {"fifo", "a FIFO", S_IFIFO}, {"dir", "a directory", S_IFDIR},
        {"dangling", "a symbolic link to nothing", S_IFLNK}, {"full", "a device", S_IFCHR},
    };
    /* /dev/full's twin (char 1:7), only where we may make device nodes */
    int have_dev = mknod(at("full"), S_IFCHR | 0666, makedev(1, 7)) == 0;
    if (!have_dev)
        printf("writers: a device node cannot be made here (%s): the device case skipped\n",
               strerror(errno));
    llm_config c = {32, 64, 1, 4, 2, 259, 32, 1, 0, 0};
    llm_weights w;
    char err[512];
    ck_assert_int_eq(llm_weights_alloc(&w, &c, err, sizeof err), 0);
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        if (t[i].type == S_IFCHR && !have_dev)
            continue;
        char args[600];
        snprintf(args, sizeof args, "model init %s --dim 32 --layers 1 --heads 4 --kv-heads 2 "
                 "--hidden 64 --vocab 300 --seq-len 32", at(t[i].name));
        bin_result r = run_limited(20, "", args);
        expect_refused(r, args, t[i].what);
        bin_result_free(&r);
        expect_kept(at(t[i].name), t[i].type);
        ck_assert_int_eq(llm_checkpoint_write(at(t[i].name), &c, &w, err, sizeof err), -1);
        ck_assert_msg(strstr(err, t[i].what) && strstr(err, "not written"), "%s", err);
        expect_kept(at(t[i].name), t[i].type);
    }
    /* no temporary left behind */
    char cmd[400];
    snprintf(cmd, sizeof cmd, "ls '%s' | grep -q tmp", g_dir);
    ck_assert_msg(system(cmd) != 0, "a temporary file was left in %s", g_dir);
    /* a link to a regular file: the file is replaced, the link stays a link */
    write_model(at("real.bin"), (llm_config){8, 16, 1, 2, 1, 259, 4, 1, 0, 0});
    ck_assert_int_eq(symlink(at("real.bin"), at("link.bin")), 0);
    ck_assert_int_eq(llm_checkpoint_write(at("link.bin"), &c, &w, err, sizeof err), 0);
    expect_kept(at("link.bin"), S_IFLNK);
    llm_config back;
    llm_weights wb;
    ck_assert_msg(llm_checkpoint_read(at("real.bin"), &back, &wb, err, sizeof err) == 0, "%s",
                  err);
    ck_assert_int_eq(back.dim, 32);
    llm_weights_free(&wb);
    llm_weights_free(&w);
    rm_dir();
}
END_TEST

int main(void)
{
    Suite *s = suite_create("llm_files");
    TCase *tc = tcase_create("files");
    tcase_set_timeout(tc, 240);
    tcase_add_test(tc, engine_and_cache_bound_what_the_header_asks);
    tcase_add_test(tc, checkpoint_read_checks_the_machine);
    tcase_add_test(tc, checkpoint_mapped_and_checked);
    tcase_add_test(tc, generate_and_info_on_a_long_context);
    tcase_add_test(tc, validation_windows_follow_val_tokens);
    tcase_add_test(tc, vocabulary_under_259_refused);
    tcase_add_test(tc, fifo_with_no_writer_is_refused);
    tcase_add_test(tc, writers_leave_what_is_not_a_regular_file);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
