/* test_train.c - `mlsys-lab train` and its per-rank trainer: the loss falls on a tiny model,
 * 2 ranks compute exactly the gradient 1 rank computes on the doubled batch (DDP and the
 * plain all-reduce), runs are deterministic, --resume continues bit for bit (also under
 * ZeRO-1/2), and bad input gets one line and exit 2 without touching a good checkpoint.
 * Tiny configurations (dim 32, seq 32, 64 KiB of text): seconds in all. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include "../../lab/cli/cli.h"
#include "../../core/llm/trainer.h"
#include "run_bin.h"

#define TINY "--dim 32 --layers 2 --heads 4 --kv-heads 2 --hidden 64 --seq-len 32 --vocab 300 " \
             "--batch 8 --data-bytes 64K --eval-every 10 --eval-batches 1 --warmup 4 --quiet"

static char g_dir[256];

static void make_dir(void)
{
    snprintf(g_dir, sizeof g_dir, "/tmp/mlsys-test-train-XXXXXX");
    ck_assert(mkdtemp(g_dir) != NULL);
}

static void remove_dir(void)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", g_dir);
}

/* Run the program with args; stderr to g_dir/err. Returns the exit status. */
static int run(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int run(const char *fmt, ...)
{
    char args[1024], cmd[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    snprintf(cmd, sizeof cmd, "'%s' train %s >/dev/null 2>'%s/err'", bin(), args, g_dir);
    int st = system(cmd);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    size_t got = fread(b, 1, (size_t)n, f);
    fclose(f);
    b[got] = 0;
    *len = got;
    return b;
}

/* 1 when the two files have the same bytes */
static int same_file(const char *a, const char *b)
{
    size_t na, nb;
    char *x = slurp(a, &na), *y = slurp(b, &nb);
    int same = x && y && na == nb && memcmp(x, y, na) == 0;
    free(x);
    free(y);
    return same;
}

static int err_lines(void)
{
    char p[300];
    size_t n;
    snprintf(p, sizeof p, "%s/err", g_dir);
    char *s = slurp(p, &n);
    int lines = 0;
    for (size_t i = 0; s && i < n; i++)
        lines += s[i] == '\n';
    if (s && lines != 1)
        fprintf(stderr, "stderr was:\n%s", s);
    free(s);
    return lines;
}

static int lab_rank(mlsys_comm *c, void *u)
{
    return train_rank_run(c, u);
}

START_TEST(deterministic_and_resume_bit_identical)
{
    make_dir();
    char a[300], b[300], c[300], z[300];
    ck_assert_int_eq(run(TINY " --steps 20 -w 2 --out %s/a", g_dir), 0);
    ck_assert_int_eq(run(TINY " --steps 20 -w 2 --out %s/b", g_dir), 0);
    snprintf(a, sizeof a, "%s/a/model.bin", g_dir);
    snprintf(b, sizeof b, "%s/b/model.bin", g_dir);
    ck_assert_msg(same_file(a, b), "two runs with the same seed and world size differ");
    /* a different seed gives another model (the comparison above can fail) */
    ck_assert_int_eq(run(TINY " --steps 20 -w 2 --seed 7 --out %s/s", g_dir), 0);
    snprintf(c, sizeof c, "%s/s/model.bin", g_dir);
    ck_assert(!same_file(a, c));
    /* 10 steps, stop, resume for the other 10 == 20 straight, weights and optimizer state */
    ck_assert_int_eq(run(TINY " --steps 20 --stop-at 10 -w 2 --out %s/c", g_dir), 0);
    ck_assert_int_eq(run(TINY " --steps 20 -w 2 --resume --out %s/c", g_dir), 0);
    snprintf(c, sizeof c, "%s/c/model.bin", g_dir);
    ck_assert_msg(same_file(a, c), "stop + resume differs from the straight run");
    snprintf(a, sizeof a, "%s/a/model.train", g_dir);
    snprintf(c, sizeof c, "%s/c/model.train", g_dir);
    ck_assert(same_file(a, c));
    /* ZeRO-1 and ZeRO-2 shard the optimizer (and the gradient) yet on 2 ranks reach the same
     * bits as DDP; resuming a ZeRO-2 run gathers and re-shards the moments */
    ck_assert_int_eq(run(TINY " --steps 20 -w 2 --zero 1 --out %s/z1", g_dir), 0);
    snprintf(z, sizeof z, "%s/z1/model.bin", g_dir);
    snprintf(a, sizeof a, "%s/a/model.bin", g_dir);
    ck_assert(same_file(a, z));
    ck_assert_int_eq(run(TINY " --steps 20 --stop-at 10 -w 2 --zero 2 --out %s/z2", g_dir), 0);
    ck_assert_int_eq(run(TINY " --steps 20 -w 2 --zero 2 --resume --out %s/z2", g_dir), 0);
    snprintf(z, sizeof z, "%s/z2/model.bin", g_dir);
    ck_assert(same_file(a, z));
    /* what a lab's rank_main runs (train_rank_run) trains the same model as the command */
    char flags[1024], out[300], *argv[64], *save = NULL;
    snprintf(out, sizeof out, "%s/lab", g_dir);
    snprintf(flags, sizeof flags, "train " TINY " --steps 20 -w 2 --out %s", out);
    int argc = 0;
    for (char *tok = strtok_r(flags, " ", &save); tok && argc < 63;
         tok = strtok_r(NULL, " ", &save))
        argv[argc++] = tok;
    train_lm_opts o;
    char err[512], why[256];
    ck_assert(train_parse(&o, argc, argv, err, sizeof err) == 0);
    ck_assert_msg(mlsys_run_fn(2, 30000, lab_rank, &o, why, sizeof why) == 0, "%s", why);
    snprintf(z, sizeof z, "%s/lab/model.bin", g_dir);
    ck_assert(same_file(a, z));
    remove_dir();
}
END_TEST

START_TEST(bad_input_one_line_exit_2)
{
    make_dir();
    ck_assert_int_eq(run(TINY " --dim 30 --out %s/x", g_dir), 2);
    ck_assert_int_eq(err_lines(), 1);
    ck_assert_int_eq(run(TINY " --kv-heads 3 --out %s/x", g_dir), 2);
    ck_assert_int_eq(err_lines(), 1);
    ck_assert_int_eq(run(TINY " -w 16 --out %s/x", g_dir), 2);       /* batch 8 */
    ck_assert_int_eq(err_lines(), 1);
    ck_assert_int_eq(run(TINY " -w 3 --out %s/x", g_dir), 2);        /* 8 does not divide */
    ck_assert_int_eq(err_lines(), 1);
    ck_assert_int_eq(run(TINY " --steps x --out %s/x", g_dir), 2);
    ck_assert_int_eq(err_lines(), 1);
    struct stat sb;
    char p[300], q[300], cmd[4096];
    snprintf(p, sizeof p, "%s/x", g_dir);
    ck_assert_msg(stat(p, &sb) != 0, "bad input created the output directory");

    /* a good checkpoint, then damage copies of it */
    ck_assert_int_eq(run(TINY " --steps 4 --out %s/good", g_dir), 0);
    snprintf(p, sizeof p, "%s/good/model.bin", g_dir);
    ck_assert_int_eq(run(TINY " --steps 8 --out %s/good", g_dir), 2);   /* no --resume/--force */
    ck_assert_int_eq(err_lines(), 1);
    snprintf(cmd, sizeof cmd, "cp -r %s/good %s/trunc && truncate -s 5000 %s/trunc/model.bin && "
             "cp -r %s/good %s/flip && printf 'X' | dd of=%s/flip/model.train bs=1 seek=300 "
             "conv=notrunc 2>/dev/null && cp -r %s/good %s/keep",
             g_dir, g_dir, g_dir, g_dir, g_dir, g_dir, g_dir, g_dir);
    ck_assert_int_eq(system(cmd), 0);
    snprintf(q, sizeof q, "%s/trunc/model.bin", g_dir);
    size_t before;
    char *orig = slurp(q, &before);
    ck_assert_int_eq(run(TINY " --steps 8 --resume --out %s/trunc", g_dir), 2);
    ck_assert_int_eq(err_lines(), 1);
    size_t after;
    char *now = slurp(q, &after);
    ck_assert(after == before && memcmp(orig, now, after) == 0);   /* left as it was */
    free(orig);
    free(now);
    ck_assert_int_eq(run(TINY " --steps 8 --resume --out %s/flip", g_dir), 2);
    ck_assert_int_eq(err_lines(), 1);
    /* a .train from another model */
    snprintf(cmd, sizeof cmd, "cp %s/trunc/model.train %s/keep/model.train.bak && "
             "'%s' train " TINY " --steps 4 --seed 99 --out %s/other >/dev/null 2>&1 && "
             "cp %s/other/model.train %s/keep/model.train", g_dir, g_dir, bin(), g_dir, g_dir,
             g_dir);
    ck_assert_int_eq(system(cmd), 0);
    ck_assert_int_eq(run(TINY " --steps 8 --resume --out %s/keep", g_dir), 2);
    ck_assert_int_eq(err_lines(), 1);
    snprintf(q, sizeof q, "%s/keep/model.bin", g_dir);
    ck_assert(same_file(p, q));
    remove_dir();
}
END_TEST

static char *err_text(void)
{
    char p[300];
    size_t n;
    snprintf(p, sizeof p, "%s/err", g_dir);
    char *s = slurp(p, &n);
    return s ? s : strdup("");
}

/* A run whose learning rate blows it up: the first step with a non-finite loss or gradient
 * stops it with one line naming the step, exit 1, and the last good checkpoint is left as it
 * was (no NaN weights written over it). On 2 ranks, both stop at the same step. */
START_TEST(divergence_stops_keeps_checkpoint)
{
    make_dir();
    ck_assert_int_eq(run(TINY " --steps 20 --stop-at 10 -w 2 --out %s/d", g_dir), 0);
    char p[300];
    snprintf(p, sizeof p, "%s/d/model.train", g_dir);
    size_t n0, n1;
    char *before = slurp(p, &n0);
    ck_assert(before);
    ck_assert_int_eq(run(TINY " --steps 20 -w 2 --lr 1e30 --resume --out %s/d", g_dir), 1);
    char *e = err_text();
    ck_assert_msg(err_lines() == 1, "%s", e);
    long step = 0;
    const char *at = strstr(e, ": step ");
    ck_assert_msg(at && sscanf(at, ": step %ld:", &step) == 1 && step > 10 && step <= 20 &&
                  strstr(e, "diverged") && strstr(e, "checkpoint of step 10 stays"), "%s", e);
    free(e);
    char *after = slurp(p, &n1);
    ck_assert(n0 == n1 && memcmp(before, after, n0) == 0);
    free(before);
    free(after);
    /* and what stayed resumes */
    ck_assert_int_eq(run(TINY " --steps 20 -w 2 --resume --out %s/d", g_dir), 0);
    remove_dir();
}
END_TEST

/* A checkpoint whose checksum is right but whose contents a run cannot continue from: each
 * refused by the reader in one line naming the file, and by the command with exit 2. */
START_TEST(resume_refuses_impossible_state)
{
    make_dir();
    ck_assert_int_eq(run(TINY " --steps 8 --stop-at 4 --out %s/g", g_dir), 0);
    char dir[300], err[512], cmd[1024];
    snprintf(dir, sizeof dir, "%s/g", g_dir);
    static const char *want[] = {"moment", "moment", "moment", "betas", "betas", "eps",
                                 "beyond its run"};
    for (int k = 0; k < 7; k++) {
        llm_config c;
        llm_weights w;
        llm_train_state st;
        snprintf(cmd, sizeof cmd, "rm -rf %s/b && cp -r %s %s/b", g_dir, dir, g_dir);
        ck_assert_int_eq(system(cmd), 0);
        snprintf(cmd, sizeof cmd, "%s/b", g_dir);
        ck_assert_msg(llm_ckpt_read(cmd, &c, &w, &st, NULL, err, sizeof err) == 0, "%s", err);
        switch (k) {
        case 0: st.m[7] = NAN; break;
        case 1: st.v[st.n - 1] = INFINITY; break;
        case 2: st.v[3] = -1e-3f; break;
        case 3: st.beta1 = 1.0f; break;
        case 4: st.beta2 = 1.5f; break;
        case 5: st.eps = 0.0f; break;
        case 6: st.step = st.run.steps + 1; break;
        }
        ck_assert_msg(llm_ckpt_write(cmd, &c, &w, &st, err, sizeof err) == 0, "%s", err);
        llm_weights_free(&w);
        llm_train_state_free(&st);
        ck_assert(llm_ckpt_read(cmd, &c, &w, &st, NULL, err, sizeof err) != 0);
        ck_assert_msg(strstr(err, want[k]) && strstr(err, "model.train") && !strchr(err, '\n'),
                      "case %d: %s", k, err);
    }
    ck_assert_int_eq(run(TINY " --steps 8 --resume --out %s/b", g_dir), 2);
    ck_assert_int_eq(err_lines(), 1);
    /* a changed --seed would rewrite the run's record: refused, naming both values */
    ck_assert_int_eq(run(TINY " --steps 8 --seed 7 --resume --out %s/g", g_dir), 2);
    ck_assert_int_eq(err_lines(), 1);
    char *e = err_text();
    ck_assert_msg(strstr(e, "--seed 7") && strstr(e, "1337"), "%s", e);
    free(e);
    ck_assert_int_eq(run(TINY " --steps 8 --seed 1337 --resume --out %s/g", g_dir), 0);
    remove_dir();
}
END_TEST

/* ---- in-process: the trainer's pieces ---- */

static llm_datakit g_kit;
static train_lm_opts g_o;

static void tiny_setup(int batch, float lr, long warmup)
{
    char err[512];
    char *argv[] = {"train", "--dim", "32", "--layers", "2", "--heads", "4", "--kv-heads", "2",
                    "--hidden", "64", "--seq-len", "32", "--vocab", "300", "--data-bytes",
                    "64K"};
    ck_assert(train_parse(&g_o, 17, argv, err, sizeof err) == 0);
    g_o.t.batch = batch;
    g_o.t.lr = lr;
    g_o.t.min_lr = lr / 10;
    g_o.t.warmup = warmup;
    g_o.t.steps = 30;
    llm_datakit_opts ko = {.seed = 1, .train_bytes = g_o.data_bytes, .vocab_size = 300};
    ck_assert_msg(llm_datakit_build(&g_kit, &ko, err, sizeof err) == 0, "%s", err);
    g_o.cfg.vocab_size = g_kit.tok.vocab_size;
}

START_TEST(loss_decreases)
{
    tiny_setup(8, 1e-2f, 0);
    train_lm m;
    train_ctx t;
    char err[512];
    ck_assert_msg(train_lm_init(&m, &g_o.cfg, &g_kit, g_o.t.batch, g_o.t.batch, g_o.seed,
                                g_o.data_seed, NULL, NULL, err, sizeof err) == 0, "%s", err);
    ck_assert_msg(train_ctx_init(&t, NULL, &g_o.t, &m.base, NULL, err, sizeof err) == 0, "%s",
                  err);
    float first = 0, last = 0, loss, lr, loss0 = 0;
    for (int s = 0; s < 30; s++) {
        ck_assert(train_step(&t, &loss, &lr) == 0);
        ck_assert(isfinite(loss));
        if (s == 0)
            loss0 = loss;
        if (s < 3)
            first += loss / 3;
        if (s >= 27)
            last += loss / 3;
    }
    double val;
    ck_assert(train_eval(&t, &val) == 0);
    printf("loss over 30 steps: %.3f -> %.3f (val %.3f; ln 300 = %.3f)\n", first, last, val,
           log(300.0));
    ck_assert(fabs(loss0 - log(300.0)) < 0.1);      /* a fresh model guesses uniformly */
    ck_assert_msg(last < first - 1.0, "loss %f -> %f", first, last);
    ck_assert(val < first - 1.0);
    train_ctx_fini(&t);
    train_lm_fini(&m);
    llm_datakit_free(&g_kit);
}
END_TEST

/* The checkpoint writer itself refuses weights that are not finite (a file its readers
 * would refuse), whatever put them there. */
START_TEST(save_refuses_nan_weights)
{
    tiny_setup(8, 1e-3f, 0);
    make_dir();
    train_lm m;
    train_ctx t;
    char err[512], p[300];
    ck_assert_msg(train_lm_init(&m, &g_o.cfg, &g_kit, 8, 8, g_o.seed, g_o.data_seed, NULL,
                                g_dir, err, sizeof err) == 0, "%s", err);
    ck_assert(train_ctx_init(&t, NULL, &g_o.t, &m.base, NULL, err, sizeof err) == 0);
    m.w.mem[5] = NAN;
    ck_assert(train_save(&t, err, sizeof err) != 0);
    ck_assert_msg(strstr(err, "weight 5 of") && strstr(err, "not saved"), "%s", err);
    snprintf(p, sizeof p, "%s/model.train", g_dir);
    struct stat sb;
    ck_assert(stat(p, &sb) != 0);
    m.w.mem[5] = 0.5f;
    ck_assert_msg(train_save(&t, err, sizeof err) == 0, "%s", err);
    ck_assert(stat(p, &sb) == 0);
    train_ctx_fini(&t);
    train_lm_fini(&m);
    llm_datakit_free(&g_kit);
    remove_dir();
}
END_TEST

START_TEST(schedule_shape)
{
    train_opts o;
    memset(&o, 0, sizeof o);
    o.lr = 1.0f;
    o.min_lr = 0.1f;
    o.warmup = 10;
    o.steps = 110;
    ck_assert(fabs(train_lr(&o, 0) - 0.1f) < 1e-6);          /* (0+1)/10 */
    ck_assert(fabs(train_lr(&o, 9) - 1.0f) < 1e-6);
    ck_assert(fabs(train_lr(&o, 10) - 1.0f) < 1e-6);         /* cosine starts at the top */
    ck_assert(fabs(train_lr(&o, 60) - 0.55f) < 1e-6);        /* halfway: the mean */
    ck_assert(fabs(train_lr(&o, 110) - 0.1f) < 1e-6);
}
END_TEST

/* 2 ranks on half batches each vs 1 rank on the whole: the same global windows, so the
 * averaged gradient must equal the single rank's (float sums in another order: 1e-5). */
typedef struct dp_arg {
    train_sync_kind sync;
    float *out;                   /* shared mapping: [n floats of rank 0's gradient] + loss */
    size_t n;
} dp_arg;

static int dp_rank(mlsys_comm *c, void *u)
{
    dp_arg *a = u;
    train_lm_opts o = g_o;
    o.t.sync = a->sync;
    o.world = mlsys_size(c);
    o.t.bucket_bytes = 4096;      /* many buckets: overlap really happens */
    train_lm m;
    train_ctx t;
    char err[512];
    if (train_lm_init(&m, &o.cfg, &g_kit, o.t.batch, o.t.batch / o.world, o.seed, o.data_seed,
                      NULL, NULL, err, sizeof err) != 0)
        return 1;
    if (train_ctx_init(&t, c, &o.t, &m.base, NULL, err, sizeof err) != 0)
        return 1;
    float loss;
    int rc = train_grad(&t, &loss);
    if (!rc && mlsys_rank(c) == 0) {
        memcpy(a->out, m.g.mem, a->n * sizeof(float));
        a->out[a->n] = loss;
    }
    train_ctx_fini(&t);
    train_lm_fini(&m);
    return rc ? 1 : 0;
}

START_TEST(dp_two_ranks_equal_one_on_the_doubled_batch)
{
    tiny_setup(8, 1e-3f, 0);
    train_lm m1;
    train_ctx one;
    char err[512], why[256];
    ck_assert(train_lm_init(&m1, &g_o.cfg, &g_kit, g_o.t.batch, g_o.t.batch, g_o.seed,
                            g_o.data_seed, NULL, NULL, err, sizeof err) == 0);
    ck_assert(train_ctx_init(&one, NULL, &g_o.t, &m1.base, NULL, err, sizeof err) == 0);
    float loss1;
    ck_assert(train_grad(&one, &loss1) == 0);
    size_t n = m1.g.n_floats;
    float *shared = mmap(NULL, (n + 1) * sizeof(float), PROT_READ | PROT_WRITE,
                         MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    ck_assert(shared != MAP_FAILED);
    for (int sync = 0; sync < 2; sync++) {
        dp_arg a = {(train_sync_kind)sync, shared, n};
        ck_assert_msg(mlsys_run_fn(2, 30000, dp_rank, &a, why, sizeof why) == 0, "%s", why);
        double worst = 0, gmax = 0;
        for (size_t i = 0; i < n; i++) {
            worst = fmax(worst, fabs(shared[i] - m1.g.mem[i]));
            gmax = fmax(gmax, fabs(m1.g.mem[i]));
        }
        printf("DP 2 ranks (%s) vs 1 rank: max |diff| %.3g (largest gradient %.3g), loss %.6f "
               "vs %.6f %s\n", sync ? "allreduce" : "ddp", worst, gmax, shared[n], loss1,
               worst < 1e-5 ? "OK" : "NOT OK");
        ck_assert(worst < 1e-5);
        ck_assert(gmax > 1e-3);                 /* a real gradient was compared */
        ck_assert(fabs(shared[n] - loss1) < 1e-5);
    }
    munmap(shared, (n + 1) * sizeof(float));
    train_ctx_fini(&one);
    train_lm_fini(&m1);
    llm_datakit_free(&g_kit);
}
END_TEST

int main(int argc, char **argv)
{
    (void)argc;
    nn_gemm_start(argv);      /* one BLAS thread from the start, as the command has */
    Suite *s = suite_create("train");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, schedule_shape);
    tcase_add_test(tc, loss_decreases);
    tcase_add_test(tc, save_refuses_nan_weights);
    tcase_add_test(tc, dp_two_ranks_equal_one_on_the_doubled_batch);
    tcase_add_test(tc, deterministic_and_resume_bit_identical);
    tcase_add_test(tc, bad_input_one_line_exit_2);
    tcase_add_test(tc, divergence_stops_keeps_checkpoint);
    tcase_add_test(tc, resume_refuses_impossible_state);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
