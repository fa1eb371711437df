/* test_ch14.c - chapter 14's calculators through the real program. memory-timeline
 * --faithful against every golden of the curriculum (§14.2: phase totals for 7B, 13B, 70B and
 * 405B, bars, sort order, the scaling split with its bug, the batch table, the advice and its
 * TP cap); the corrected default against its own definitions (real parameter counts, grouped
 * KV heads, fixed + scaling = total, the batch table's row equal to the total, the ceiling of
 * GPUs), training per GPU of a layout under each ZeRO stage against the formula.
 * weight-update-demo against §14.3's goldens at 140 and 14 GB, its filters and iteration
 * timelines, a real broadcast measured on 2 ranks, and the actor's weights handed
 * over with rl_wsync on 2 and 3 ranks (bucket counts from the model's size, every generator
 * bit-identical), a bad bucket list refused, --backend nccl without a GPU in one line. */
#include "run_bin.h"
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The number after the first occurrence of key at or after from. */
static double after(const char *from, const char *key)
{
    const char *p = strstr(from, key);
    ck_assert_msg(p != NULL, "missing: %s", key);
    return strtod(p + strlen(key), NULL);
}

/* The TOTAL of the phase whose title starts with name. */
static double phase_total(const char *out, const char *name)
{
    const char *p = strstr(out, name);
    ck_assert_msg(p != NULL, "no phase %s", name);
    return after(p, "TOTAL");
}

START_TEST(memory_faithful_goldens)
{
    struct { const char *m; double gen, score, train, fixed, scaling, full; } g[] = {
        {"70b", 443.5, 161.5, 1227.4, 560.0, 968.8, 1528.8},
        {"7b", 48.3, 18.3, 133.5, 56.0, 109.8, 165.8},
        {"13b", 86.7, 32.7, 241.6, 104.0, 196.3, 300.3},
        {"405b", 2499.6, 877.6, 6818.2, 3240.0, 5265.9, 8505.9},
    };
    for (int i = 0; i < 4; i++) {
        bin_result b = run_bin("run ch14/memory-timeline --faithful --model-size %s", g[i].m);
        ck_assert_msg(b.status == 0, "%s: exit %d: %s", g[i].m, b.status, b.err);
        ck_assert(fabs(phase_total(b.out, "GENERATION") - g[i].gen) < 0.051);
        ck_assert(fabs(phase_total(b.out, "SCORING") - g[i].score) < 0.051);
        ck_assert(fabs(phase_total(b.out, "TRAINING") - g[i].train) < 0.051);
        ck_assert(fabs(after(b.out, "fixed (optimizer states):") - g[i].fixed) < 0.051);
        ck_assert(fabs(after(b.out, "weights and gradients):") - g[i].scaling) < 0.051);
        ck_assert(fabs(after(b.out, "required with everything resident:") - g[i].full) <
                  0.051);
        bin_result_free(&b);
    }
    /* the fits / exceeds lines, 7B and 70B */
    bin_result b = run_bin("run ch14/memory-timeline --faithful --model-size 7b");
    ck_assert(strstr(b.out, "✓ fits in one GPU (80 GB): 60% of it"));
    ck_assert(strstr(b.out, "✓ fits in one GPU (80 GB): 23% of it"));
    ck_assert(strstr(b.out, "needs 1.7× that"));
    /* 7B batch table (S = 2048): KV, activations, total, fits */
    const char *rows7[] = {"1       1.1          5.4       62.4  ✓", "2       2.1         10.7 "
                           "      68.9  ✓", "4       4.3         21.5       81.8  ✗",
                           "32      34.4        171.8      262.2  ✗"};
    for (int i = 0; i < 4; i++)
        ck_assert_msg(strstr(b.out, rows7[i]), "7b row: %s", rows7[i]);
    ck_assert(strstr(b.out, "tensor parallel: 1\n  data/pipeline parallel: 8"));
    bin_result_free(&b);
    b = run_bin("run ch14/memory-timeline --faithful");
    ck_assert(strstr(b.out, "needs 5.5× that") && strstr(b.out, "needs 2.0× that") &&
              strstr(b.out, "needs 15.3× that"));
    const char *rows70[] = {"1       5.4         26.8      592.2  ✗", "16      85.9        "
                            "429.5     1075.4  ✗", "32     171.8        859.0     1590.8  ✗"};
    for (int i = 0; i < 3; i++)
        ck_assert_msg(strstr(b.out, rows70[i]), "70b row: %s", rows70[i]);
    ck_assert(strstr(b.out, "available: 640.0 GB") && strstr(b.out, "needs 19 GPUs of 80 GB"));
    /* bars: ⌊GB·50 / (1.1·1227.4)⌋: 140 → 5, 560 → 20, 107.4 → 3, 21.5 → 0; sorted, the
     * equal sizes in their order */
    ck_assert(strstr(b.out, "  Optimizer states            560.0 GB ████████████████████\n"
                            "  Actor weights               140.0 GB █████\n"
                            "  Critic weights              140.0 GB █████\n"));
    ck_assert(strstr(b.out, "  Activations                 107.4 GB ███\n"));
    ck_assert(strstr(b.out, "  KV cache                     21.5 GB \n"));
    bin_result_free(&b);
    b = run_bin("run ch14/memory-timeline --faithful --model-size 13b");
    ck_assert(strstr(b.out, "tensor parallel: 2\n  data/pipeline parallel: 4"));
    bin_result_free(&b);
    /* rounded, not the ceiling: 165.8 / 80 = 2.07 prints 2 */
    b = run_bin("run ch14/memory-timeline --faithful --model-size 7b --num-gpus 2");
    ck_assert(strstr(b.out, "needs 2 GPUs of 80 GB"));
    bin_result_free(&b);
    /* the TP cap: 405B on 128 GPUs wants ⌊8505.9/80·0.7⌋ = 74, capped at 8 */
    b = run_bin("run ch14/memory-timeline --faithful --model-size 405b --num-gpus 128");
    ck_assert(strstr(b.out, "tensor parallel: 8\n  data/pipeline parallel: 16"));
    bin_result_free(&b);
    b = run_bin("run ch14/memory-timeline --faithful --gpu-memory 80.0");
    ck_assert(strstr(b.out, "GPU memory: 80.0 GB x 8 GPUs"));
    bin_result_free(&b);
}
END_TEST

START_TEST(memory_corrected)
{
    /* real parameter counts, from the shapes */
    struct { const char *m; const char *params; double kv_token; } r[] = {
        {"7b", "6.74B", 524288}, {"13b", "13.02B", 819200}, {"70b", "68.98B", 327680},
        {"405b", "405.85B", 516096},
    };
    for (int i = 0; i < 4; i++) {
        bin_result b = run_bin("run ch14/memory-timeline --model-size %s --batch-size 8 -s 1024",
                               r[i].m);
        ck_assert_int_eq(b.status, 0);
        char key[64];
        snprintf(key, sizeof key, "(%s parameters", r[i].params);
        ck_assert_msg(strstr(b.out, key), "%s: %s", r[i].m, key);
        ck_assert(fabs(after(b.out, "KV cache\n") - r[i].kv_token) < 0.5);
        double fixed = after(b.out, "optimizer state):"), scaling = after(b.out,
                                                                          "activations):");
        double total = after(b.out, "  total:"), need = after(b.out, "resident:");
        ck_assert(fabs(fixed + scaling - total) < 0.11 && fabs(total - need) < 0.051);
        /* the table's row at the run's batch (8) is that same total */
        const char *row = strstr(b.out, "\n       8 ");
        ck_assert(row != NULL);
        double kv, act, tot;
        ck_assert(sscanf(row, " %*d %lf %lf %lf", &kv, &act, &tot) == 3);
        ck_assert_msg(fabs(tot - total) < 0.051, "%s: row %g total %g", r[i].m, tot, total);
        bin_result_free(&b);
    }
    /* 7B (6.74B): 4 bf16 copies 53.9 + 2 x 12 bytes x 6.74B of Adam 161.7 + 2 gradient
     * copies 27.0 + KV 4.3 + activations 21.5 = 268.4 GB: on 2 x 80 it needs ⌈3.35⌉ = 4 */
    bin_result b = run_bin("run ch14/memory-timeline --model-size 7b --num-gpus 2");
    ck_assert(fabs(after(b.out, "resident:") - 268.4) < 0.11);
    ck_assert(strstr(b.out, "needs 4 GPUs of 80 GB even with perfect sharding"));
    /* scoring runs the actor too (the old log-probabilities): four copies of the weights */
    const char *sc = strstr(b.out, "SCORING");
    ck_assert(sc && strstr(sc, "Actor weights") && strstr(sc, "Actor weights") <
              strstr(sc, "TRAINING"));
    bin_result_free(&b);
    /* 7B on 8 x 80 GB: the original's TP 2 x DP 4 is advice, with what it costs a GPU:
     * 268.4 / 2 = 134.2 GB without ZeRO (does not fit), 268.4 / 8 = 33.5 with ZeRO-3 */
    b = run_bin("run ch14/memory-timeline --model-size 7b");
    ck_assert(strstr(b.out, "tensor parallel 2 x data parallel 4"));
    ck_assert(strstr(b.out, "without ZeRO each GPU holds 134.2 GB (everything / TP: does not fit)"));
    ck_assert(strstr(b.out, "with ZeRO-3 across the data-parallel ranks too, 33.5 GB (fits)"));
    bin_result_free(&b);
    b = run_bin("run ch14/memory-timeline --model-size 7b --num-gpus 2");
    /* per GPU with perfect sharding: generation on 2 GPUs */
    double gen = phase_total(b.out, "GENERATION");
    char want[96];
    snprintf(want, sizeof want, "sharded perfectly over 2 GPUs: %.1f GB each", gen / 2);
    ck_assert_msg(strstr(b.out, want), "%s", want);
    bin_result_free(&b);
}
END_TEST

/* Training per GPU of a layout tp x pp x dp under each ZeRO stage, by the formula from the
 * lab's own inputs (its parameter count and activation bytes per token): two trained models,
 * 2 + 2 + 12 bytes per parameter of weights, gradients and Adam; tp x pp shard all of it, dp
 * only what the stage shards (1: optimizer, 2: + gradients, 3: + weights); the activations
 * of B x S tokens over every GPU. */
START_TEST(memory_layouts_replicated_or_sharded)
{
    struct { long tp, pp, dp; } lay[] = {{1, 1, 8}, {8, 2, 2}, {2, 1, 4}, {4, 4, 1}};
    for (int i = 0; i < 4; i++) {
        bin_result b = i == 0 ? run_bin("run ch14/memory-timeline")
                              : run_bin("run ch14/memory-timeline --tp-size %ld --pp-size %ld "
                                        "--dp-size %ld", lay[i].tp, lay[i].pp, lay[i].dp);
        ck_assert_int_eq(b.status, 0);
        double P = after(b.out, "Model: Llama-2-70B (") * 1e9;
        double act = after(b.out, "activations ") * 4 * 2048 / 1e9;
        double mp = (double)lay[i].tp * lay[i].pp, dp = (double)lay[i].dp;
        char head[64];
        snprintf(head, sizeof head, "tp %ld x pp %ld x dp %ld\n", lay[i].tp, lay[i].pp,
                 lay[i].dp);
        const char *t = strstr(b.out, head);
        ck_assert_msg(t != NULL, "no layout %s", head);
        for (int z = 0; z <= 3; z++) {
            double w = 2 * 2 * P / 1e9 / mp / (z >= 3 ? dp : 1);
            double g = 2 * 2 * P / 1e9 / mp / (z >= 2 ? dp : 1);
            double o = 2 * 12 * P / 1e9 / mp / (z >= 1 ? dp : 1);
            double want = w + g + o + act / (mp * dp);
            char key[16];
            snprintf(key, sizeof key, "ZeRO-%d ", z);
            const char *row = strstr(t, key);
            ck_assert(row != NULL);
            row = strchr(row, ')') + 1;
            double c[5];
            ck_assert(sscanf(row, "%lf %lf %lf %lf %lf", &c[0], &c[1], &c[2], &c[3], &c[4]) == 5);
            /* P is printed to 10 million parameters: 0.2 GB of slack at ZeRO-0 */
            ck_assert_msg(fabs(c[4] - want) < 0.25, "%s ZeRO-%d: %g, formula %g", head, z, c[4],
                          want);
            ck_assert_msg(fabs(c[0] + c[1] + c[2] + c[3] - c[4]) < 0.21, "a row adds up");
            const char *eol = strchr(row, '\n');
            int tick = !strncmp(eol - 3, "✓", 3);
            ck_assert_msg(tick == (c[4] <= 80.0), "%s ZeRO-%d: %.1f GB marked %s", head, z, c[4],
                          tick ? "fits" : "does not fit");
        }
        if (i == 0) {
            /* ZeRO-3 over the 8 GPUs is the training phase "sharded perfectly" */
            double tr = phase_total(b.out, "TRAINING");
            char want[64];
            snprintf(want, sizeof want, "%.1f ✗", tr / 8);
            ck_assert_msg(strstr(strstr(b.out, "ZeRO-3 "), want) != NULL, "ZeRO-3 %s", want);
        }
        bin_result_free(&b);
    }
    /* a layout the batch cannot feed, and TP across nodes, are named */
    bin_result b = run_bin("run ch14/memory-timeline --tp-size 16 --dp-size 32 --zero 3");
    ck_assert_int_eq(b.status, 0);
    ck_assert(strstr(b.out, "✗ dp 32 is above the batch of 4 sequences: 28 replicas"));
    ck_assert(strstr(b.out, "✗ tp 16 spans nodes"));
    ck_assert(strstr(b.out, "ZeRO-1 (") == NULL);      /* --zero 3: that stage alone */
    bin_result_free(&b);
    b = run_bin("run ch14/memory-timeline --zero 4");
    ck_assert_int_eq(b.status, 2);
    bin_result_free(&b);
}
END_TEST

START_TEST(weight_update_goldens)
{
    bin_result b = run_bin("run ch14/weight-update-demo --no-measure");
    ck_assert_msg(b.status == 0, "exit %d: %s", b.status, b.err);
    const char *lines[] = {"NVMe SSD                                20.10 s  acceptable",
                           "HDD / NFS                              11.7 min  slow",
                           "NCCL over NVLink                         0.32 s  excellent",
                           "NCCL over InfiniBand (400 Gb/s)          2.85 s  good",
                           "NCCL over 100 Gb/s Ethernet             11.30 s  acceptable",
                           "CUDA IPC handle                          1.0 ms  zero copy"};
    for (int i = 0; i < 6; i++)
        ck_assert_msg(strstr(b.out, lines[i]), "missing: %s", lines[i]);
    /* across nodes: SSD, HDD, IB, Ethernet only */
    const char *cross = strstr(b.out, "across nodes");
    const char *next = strstr(cross, "CUDA IPC: SHARE");
    ck_assert(cross && next);
    int n = 0;
    for (const char *p = cross; (p = strstr(p, "\n  ")) && p < next; p++)
        n++;
    ck_assert_int_eq(n, 5);                 /* the header and four methods */
    ck_assert(!strstr(cross, "NVLink          ") || strstr(cross, "NVLink          ") > next);
    /* one transfer per iteration, trainer -> engine; the original's return transfer named */
    ck_assert(strstr(b.out, "iteration           50.00 s   the transfer is 0.0 % of it"));
    ck_assert(strstr(b.out, "weights -> engine    2.85 s   (trainer to engine only"));
    ck_assert(strstr(b.out, "iteration           52.85 s   the transfer is 5.4 % of it"));
    ck_assert(strstr(b.out, "the original adds a return transfer, engine -> trainer, of the "
                            "same cost: 55.70 s,\n   10.2 %"));
    ck_assert(!strstr(b.out, "weights -> trainer"));
    ck_assert(strstr(b.out, "new actor weights: 140 GB"));
    ck_assert(!strstr(b.out, "MEASURED HERE"));
    bin_result_free(&b);
    b = run_bin("run ch14/weight-update-demo --no-measure --model-size 14");
    const char *l14[] = {"2.10 s  good", "1.2 min  slow", "41.1 ms  excellent",
                         "0.33 s  excellent", "1.22 s  good", "1.0 ms  zero copy"};
    for (int i = 0; i < 6; i++)
        ck_assert_msg(strstr(b.out, l14[i]), "14 GB: %s", l14[i]);
    ck_assert(strstr(b.out, "new actor weights: 14.0 GB"));
    bin_result_free(&b);
}
END_TEST

START_TEST(weight_update_measured)
{
    bin_result b = run_bin("run ch14/weight-update-demo -w 2 --measure-bytes 1M --iters 3");
    ck_assert_msg(b.status == 0, "exit %d: %s", b.status, b.err);
    const char *m = strstr(b.out, "MEASURED HERE: rank 0 broadcasts to 1 rank (shm backend)");
    ck_assert_ptr_nonnull(m);
    for (int k = 0; k < 2; k++) {
        const char *row = strstr(m, k ? "\n       1 MiB" : "\n       4 MiB");
        ck_assert_msg(row != NULL, "no row %d", k);
        double ms, gbps;
        char unit[8];
        ck_assert(sscanf(row, " %*d %7s %lf ms %lf", unit, &ms, &gbps) == 3);
        ck_assert(ms > 0 && gbps > 0 && isfinite(gbps));
    }
    ck_assert(strstr(m, "NCCL and CUDA IPC: not measured, no GPU here") ||
              strstr(m, "GPU here: --backend nccl") || strstr(m, "GPUs here: --backend nccl"));
    bin_result_free(&b);
    b = run_bin("run ch14/weight-update-demo -w 1");
    ck_assert_int_eq(b.status, 0);
    ck_assert(strstr(b.out, "needs a receiver"));
    bin_result_free(&b);
}
END_TEST

/* The model's bytes: 28-byte header, then floats; the RoPE tables are not sent. */
START_TEST(weight_sync_measured)
{
    static const char *const extra[3] = {"", " --separate", " --fresh-weights"};
    for (int k = 0; k < 3; k++) {
        bin_result b = run_bin("run ch14/weight-update-demo -w %d --measure-bytes 1M --iters 2 "
                               "--bucket-size 4K,1M,64M%s", k == 1 ? 3 : 2, extra[k]);
        ck_assert_msg(b.status == 0, "exit %d: %s", b.status, b.err);
        const char *m = strstr(b.out, "MEASURED HERE: the actor's weights");
        ck_assert_ptr_nonnull(m);
        const char *tn = strstr(m, " tensors, ");
        ck_assert_ptr_nonnull(tn);
        ck_assert_int_eq((int)strtol(tn - 2, NULL, 10), 47);   /* 2 + 9 x 5 layers */
        /* floats sent: 3954176 B / 4 -> 4K buckets hold 1024 floats */
        const char *rows[3] = {"\n      4 KiB      966", "\n      1 MiB        4",
                               "\n     64 MiB        1"};
        for (int i = 0; i < 3; i++) {
            const char *r = strstr(m, rows[i]);
            ck_assert_msg(r != NULL, "no row %s in %s", rows[i] + 1, m);
            double ms, gbps, bms, bgbps, ratio;
            ck_assert(sscanf(r, " %*d %*s %*d %*d %lf ms %lf %lf ms %lf %lfx", &ms, &gbps, &bms,
                             &bgbps, &ratio) == 5);
            /* the rates are the weights' 3954176 bytes over the times printed beside them
             * (to 0.01 GB/s and 0.001 ms; a loaded machine may well read 0.00 GB/s) */
            ck_assert(ms > 0 && bms > 0);
            double want = 3954176 / (ms * 1e6), bwant = 3954176 / (bms * 1e6);
            ck_assert_msg(fabs(gbps - want) <= 0.006 + want * 0.0006 / ms,
                          "sync %.3f ms printed %.2f GB/s, its bytes give %.4f", ms, gbps, want);
            ck_assert_msg(fabs(bgbps - bwant) <= 0.006 + bwant * 0.0006 / bms,
                          "broadcast %.3f ms printed %.2f GB/s, its bytes give %.4f", bms, bgbps,
                          bwant);
            ck_assert_msg(fabs(ratio - bms / ms) <= 0.006 + (bms / ms) * 0.0006 * (1 / ms + 1 / bms),
                          "ratio %.2fx, the times give %.4f", ratio, bms / ms);
        }
        ck_assert(strstr(m, k == 1 ? "generators bit-identical to the trainer: 2 of 2"
                                   : "generators bit-identical to the trainer: 1 of 1"));
        ck_assert(strstr(m, k == 2 ? "the trainer rewrites every weight"
                                   : "the trainer changes one float per tensor"));
        ck_assert(strstr(m, "version 21)"));    /* 3 sizes x (1 warm-up + 3 rounds x 2) */
        bin_result_free(&b);
    }
    /* the model is read before any rank starts: a bad file is one line and exit 2 */
    bin_result bad = run_bin("run ch14/weight-update-demo -w 2 --model /nonexistent/m.bin");
    ck_assert_int_eq(bad.status, 2);
    ck_assert_msg(strstr(bad.err, "mlsys-lab: ch14/weight-update-demo: /nonexistent/m.bin") &&
                  strchr(bad.err, '\n') == bad.err + strlen(bad.err) - 1, "%s", bad.err);
    ck_assert_msg(!strstr(bad.out, "ESTIMATES"), "%s", bad.out);
    bin_result_free(&bad);
    bin_result b = run_bin("run ch14/weight-update-demo -w 2 --bucket-size 2");
    ck_assert_int_eq(b.status, 2);
    ck_assert(strstr(b.err, "--bucket-size 2"));
    bin_result_free(&b);
    /* where NCCL cannot run, the runner refuses before anything is printed: one line, 2 */
    b = run_bin("run ch14/weight-update-demo -w 2 --backend nccl");
    if (strstr(b.err, "0 GPUs found")) {
        ck_assert_int_eq(b.status, 2);
        ck_assert_str_eq(b.out, "");
        ck_assert_ptr_eq(strchr(b.err, '\n'), b.err + strlen(b.err) - 1);
    }
    bin_result_free(&b);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("ch14");
    TCase *tc = tcase_create("ch14");
    tcase_set_timeout(tc, 180);
    tcase_add_test(tc, memory_faithful_goldens);
    tcase_add_test(tc, memory_corrected);
    tcase_add_test(tc, memory_layouts_replicated_or_sharded);
    tcase_add_test(tc, weight_update_goldens);
    tcase_add_test(tc, weight_update_measured);
    tcase_add_test(tc, weight_sync_measured);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
