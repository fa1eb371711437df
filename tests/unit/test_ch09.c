/* test_ch09.c - chapter 9's labs through the program: the calculator's table, capacity and
 * fragmentation goldens of the curriculum (every model and GPU listed there, the original's
 * crash now "n/a"), the custom row against the formula, the lab model's row against its
 * real pool; the prefix-sharing demo's trie counts and tree, its formulas (defaults, N = 1,
 * the closed form of the saving), and the engine's measured prompt rows, which equal the
 * formula S + N x U when the system prompt fills whole blocks. */
#include "run_bin.h"
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CALC "run ch09/kv-cache-calculator"
#define DEMO "run ch09/prefix-sharing-demo"

static void has(const char *out, const char *want)
{
    ck_assert_msg(strstr(out, want) != NULL, "missing: \"%s\"", want);
}

START_TEST(calculator_table)
{
    bin_result r = run_bin(CALC);
    ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
    /* binary units named as such: 2^10 bytes are a KiB, not a KB */
    has(r.out, "LLaMA-7B        32       32         512.00 KiB   4.00 GiB     16.00 GiB\n");
    has(r.out, "LLaMA-13B       40       40         800.00 KiB   6.25 GiB     25.00 GiB\n");
    has(r.out, "LLaMA-70B       80       8          320.00 KiB   2.50 GiB     10.00 GiB\n");
    has(r.out, "Mistral-7B      32       8          128.00 KiB   1.00 GiB     4.00 GiB\n");
    /* Qwen-72B keeps a KV head per query head (64); Qwen2-72B groups them into 8 */
    has(r.out, "Qwen-72B        80       64         2.50 MiB     20.00 GiB    80.00 GiB\n");
    has(r.out, "Qwen2-72B       80       8          320.00 KiB   2.50 GiB     10.00 GiB\n");
    has(r.out, "DeepSeek-67B    95       8          380.00 KiB   2.97 GiB     11.88 GiB\n");
    ck_assert_msg(strstr(r.out, " KB") == NULL && strstr(r.out, " MB") == NULL,
                  "a binary unit named KB or MB");
    /* the lab's model: 5 layers x 2 KV heads x 32 x 4 bytes x 2, equal to its real pool */
    has(r.out, "lab model fp32  5        2          2.50 KiB");
    has(r.out, "2560 bytes per token slot ✓");
    /* the default (70B on 80 GB) never fits: four lines, no numbers */
    const char *p = r.out;
    int nofit = 0;
    while ((p = strstr(p, "does not fit in GPU memory")))
        nofit++, p++;
    ck_assert_int_eq(nofit, 4);
    /* fragmentation for LLaMA-70B */
    has(r.out, "Without paging (every request reserves the max): 250.00 GiB\n"
               "  With paging (blocks as tokens arrive): 15.62 GiB\n"
               "  Memory saved: 234.38 GiB (93.8% reduction)");
    has(r.out, "125.00 GiB\n  With paging (blocks as tokens arrive): 31.25 GiB\n"
               "  Memory saved: 93.75 GiB (75.0% reduction)");
    has(r.out, "200.00 GiB\n  With paging (blocks as tokens arrive): 25.00 GiB\n"
               "  Memory saved: 175.00 GiB (87.5% reduction)");
    has(r.out, "400.00 GiB\n  With paging (blocks as tokens arrive): 25.00 GiB\n"
               "  Memory saved: 375.00 GiB (93.8% reduction)");
    /* insight 4 by the formula: (640 - 140 - 20) GB over 327680 B a token */
    has(r.out, "357 requests at 4K context, 44 at 32K, 11 at 128K");
    bin_result_free(&r);
}
END_TEST

/* One capacity block: available, KV per request, max, without, with, improvement. */
static void cap(const char *out, int ctx, const char *avail, const char *kv, int max,
                int without, int with, const char *impr)
{
    char want[512];
    snprintf(want, sizeof want, "@ %d context length:\n  Available for KV cache: %s GB\n"
             "  KV per request: %s GB\n  At full utilisation: %d requests\n"
             "  Without PagedAttention: ~%d concurrent requests\n"
             "  With PagedAttention: ~%d concurrent requests\n  Improvement: %s", ctx, avail,
             kv, max, without, with, impr);
    has(out, want);
}

/* The capacity block of one context by the formula, every quantity in GB = 10^9 bytes:
 * free = GPU - weights - 2, per request = 2·L·H·D·2·ctx, max = floor(free / per request),
 * 50 % and 95 % of it without and with paging. */
static void cap_formula(const char *out, int ctx, double gpu, double weights, long L, long H,
                        long D)
{
    double avail = gpu - weights - 2.0, kv = 2.0 * L * H * D * 2 * ctx / 1e9;
    long max = (long)(avail / kv), without = (long)(max * 0.5), with = (long)(max * 0.95);
    char a[16], k[16], impr[16];
    snprintf(a, sizeof a, "%.1f", avail);
    snprintf(k, sizeof k, "%.2f", kv);
    if (without > 0)
        snprintf(impr, sizeof impr, "%.0f%%", ((double)with / without - 1.0) * 100.0);
    else
        snprintf(impr, sizeof impr, "n/a");
    cap(out, ctx, a, k, (int)max, (int)without, (int)with, impr);
}

START_TEST(calculator_capacity_goldens)
{
    bin_result r = run_bin(CALC " --model mistral-7b --gpu h100");
    ck_assert_int_eq(r.status, 0);
    /* by hand: 64 GB free, 131072 x 8192 B = 1.07 GB a request, 59 fit; 29 and 56 */
    cap(r.out, 8192, "64.0", "1.07", 59, 29, 56, "93%");
    has(r.out, "at 8K context it counted 64 requests where 59 fit.)");
    static const int ctxs[4] = {2048, 4096, 8192, 32768};
    for (int i = 0; i < 4; i++)
        cap_formula(r.out, ctxs[i], 80, 14, 32, 8, 128);
    bin_result_free(&r);
    r = run_bin(CALC " --model llama-7b --gpu h100");
    for (int i = 0; i < 4; i++)
        cap_formula(r.out, ctxs[i], 80, 14, 32, 32, 128);
    bin_result_free(&r);
    r = run_bin(CALC " --model llama-7b --gpu 4090");
    ck_assert_int_eq(r.status, 0);       /* the original crashed at 32K */
    for (int i = 0; i < 4; i++)
        cap_formula(r.out, ctxs[i], 24, 14, 32, 32, 128);
    cap(r.out, 32768, "8.0", "17.18", 0, 0, 0, "n/a");
    bin_result_free(&r);
    r = run_bin(CALC " --model llama-13b --gpu h100");
    for (int i = 0; i < 4; i++)
        cap_formula(r.out, ctxs[i], 80, 26, 40, 40, 128);
    bin_result_free(&r);
    r = run_bin(CALC " --model llama-13b --gpu a100-40");
    ck_assert_int_eq(r.status, 0);
    for (int i = 0; i < 3; i++)
        cap_formula(r.out, ctxs[i], 40, 26, 40, 40, 128);
    cap(r.out, 8192, "12.0", "6.71", 1, 0, 0, "n/a");
    bin_result_free(&r);
    /* 13B on the 4090 and the big three everywhere do not fit */
    const char *nofit[] = {"--model llama-13b --gpu 4090", "--model qwen-72b --gpu a100", "--model deepseek-67b"};
    for (int i = 0; i < 3; i++) {
        r = run_bin(CALC " %s", nofit[i]);
        ck_assert_int_eq(r.status, 0);
        has(r.out, "@ 32768 context: the model does not fit in GPU memory");
        bin_result_free(&r);
    }
}
END_TEST

START_TEST(calculator_custom_and_bad_input)
{
    /* the Custom row: 2 x 10 x 4 x 64 x 2 = 10240 bytes per token; weights taken as 14 GB */
    bin_result r = run_bin(CALC " --custom --layers 10 --heads 4 --dim 64 --gpu a100-40");
    ck_assert_int_eq(r.status, 0);
    has(r.out, "Custom          10       4          10.00 KiB    80.00 MiB    320.00 MiB\n");
    has(r.out, "CAPACITY ANALYSIS: Custom on A100 40GB");
    /* 40 - 14 - 2 = 24 GB; 2048 x 10240 B = 0.021 GB -> 1144 requests */
    cap(r.out, 2048, "24.0", "0.02", 1144, 572, 1086, "90%");
    has(r.out, "FRAGMENTATION ANALYSIS: Custom");
    /* the saving depends on the scenario only, never on the model */
    has(r.out, "(93.8% reduction)");
    has(r.out, "(75.0% reduction)");
    has(r.out, "(87.5% reduction)");
    bin_result_free(&r);
    const char *bad[] = {"--model llama-8b", "--gpu v100", "--custom --layers 0",
                         "--lab-model /nonexistent/model.bin"};
    for (int i = 0; i < 3; i++) {
        r = run_bin(CALC " %s", bad[i]);
        ck_assert_msg(r.status == 2, "'%s': exit %d", bad[i], r.status);
        bin_result_free(&r);
    }
    /* a missing lab model is a note, not a failure: the rest does not need it */
    r = run_bin(CALC " %s", bad[3]);
    ck_assert_int_eq(r.status, 0);
    has(r.out, "(the lab's model: /nonexistent/model.bin");
    bin_result_free(&r);
}
END_TEST

START_TEST(prefix_demo_trie_and_formulas)
{
    bin_result r = run_bin(DEMO " --num-requests 100 --engine-system-len 32 --engine-user-len 8");
    ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
    has(r.out, "Total tokens across all requests: 57");
    has(r.out, "Unique KV cache entries: 26\n  Shared prefix accesses: 31");
    has(r.out, "Memory savings: 54.4%");
    has(r.out, "└── [root]\n    └── [0 \"you\"] (refs: 6)\n        └── [1 \"are\"] (refs: 6)\n"
               "            └── [2 \"a\"] (refs: 6)\n"
               "                ├── [3 \"helpful\"] (refs: 4)\n"
               "                │   └── [4 \"assistant.\"] (refs: 4)\n"
               "                └── [17 \"coding\"] (refs: 2)\n"
               "                    └── [4 \"assistant.\"] (refs: 2)\n");
    /* per request: new nodes 11, 1, 2, 4, 6, 2 (unique = its own token count) */
    has(r.out, "Tokens: 11, KV indices assigned: 11 unique");
    has(r.out, "Tokens: 7, KV indices assigned: 7 unique");
    has(r.out, "Without sharing: N x (S + U) x b = 19.66 GB\n"
               "  With sharing: (S + N x U) x b = 3.44 GB\n  Saved: 16.22 GB (82.5%)");
    has(r.out, "System prompt (shared): 163.84 MB (cached once)\n"
               "  User prompts (unique): 3.28 GB");
    has(r.out, "Without sharing: 34.41 GB\n  With sharing: 1.97 GB\n  Saved: 32.44 GB (94.3%)");
    bin_result_free(&r);
    /* the saving's closed form (N-1)·S / (N·(S+U)) for a few shapes; N = 1 saves nothing */
    long shapes[4][3] = {{1, 500, 100}, {7, 300, 50}, {40, 1000, 10}, {3, 0, 100}};
    for (int i = 0; i < 4; i++) {
        long N = shapes[i][0], S = shapes[i][1], U = shapes[i][2];
        r = run_bin(DEMO " --num-requests %ld --system-prompt-len %ld --user-prompt-len %ld "
                    "--engine-system-len 16 --engine-user-len 8", N, S, U);
        ck_assert_int_eq(r.status, 0);
        char want[128];
        snprintf(want, sizeof want, "GB (%.1f%%)\n\nWith sharing breakdown",
                 100.0 * (double)(N - 1) * S / ((double)N * (S + U)));
        has(r.out, want);
        bin_result_free(&r);
    }
}
END_TEST

/* The engine: with a system prompt of whole blocks, the first request computes S + U rows
 * and every other one U: S + N·U rows, (N-1)·S found cached; without the cache N·(S+U). */
static long field(const char *out, const char *label, int col)
{
    const char *p = strstr(out, label);
    ck_assert_msg(p != NULL, "missing \"%s\"", label);
    p += strlen(label);
    long a = -1, b = -1;
    sscanf(p, " %ld %ld", &a, &b);
    return col ? b : a;
}

START_TEST(prefix_demo_engine)
{
    struct { long N, S, U, bs; } c[3] = {{20, 64, 16, 16}, {9, 72, 10, 16}, {5, 40, 8, 8}};
    for (int i = 0; i < 3; i++) {
        bin_result r = run_bin(DEMO " --num-requests %ld --engine-system-len %ld --engine-user-len %ld "
                               "--block-size %ld --max-num-seqs 4", c[i].N, c[i].S, c[i].U,
                               c[i].bs);
        ck_assert_msg(r.status == 0, "exit %d: %s", r.status, r.err);
        long full = c[i].S / c[i].bs * c[i].bs;      /* what whole blocks cover */
        long rows_on = field(r.out, "prompt rows computed", 0);
        long rows_off = field(r.out, "prompt rows computed", 1);
        long hit = field(r.out, "prompt tokens found cached", 0);
        ck_assert_int_eq(rows_off, c[i].N * (c[i].S + c[i].U));
        ck_assert_int_eq(hit, (c[i].N - 1) * full);
        ck_assert_int_eq(rows_on + hit, rows_off);
        if (full == c[i].S)
            ck_assert_int_eq(rows_on, c[i].S + c[i].N * c[i].U);   /* the formula exactly */
        /* sharing: fewer physical blocks than table entries at the peak */
        long held = field(r.out, "KV blocks held at the peak step", 0);
        long entries = field(r.out, "block-table entries at that step", 0);
        ck_assert_int_lt(held, entries);
        ck_assert_int_eq(field(r.out, "KV blocks held at the peak step", 1),
                         field(r.out, "block-table entries at that step", 1));
        bin_result_free(&r);
    }
    bin_result r = run_bin(DEMO " --engine-system-len 120 --engine-user-len 8");
    ck_assert_int_eq(r.status, 2);
    bin_result_free(&r);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("ch09");
    TCase *tc = tcase_create("labs");
    tcase_set_timeout(tc, 240);
    tcase_add_test(tc, calculator_table);
    tcase_add_test(tc, calculator_capacity_goldens);
    tcase_add_test(tc, calculator_custom_and_bad_input);
    tcase_add_test(tc, prefix_demo_trie_and_formulas);
    tcase_add_test(tc, prefix_demo_engine);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
