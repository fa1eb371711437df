/* ch14_exercises.c - Chapter 14's exercises: the weight-sync step between a trainer rank and the
 * generator ranks on real ranks (implement), the share of an iteration the weight transfer
 * takes (predict), and a memory plan and a 64-GPU design for 70B checked against
 * memory-timeline's own figures, replicated and sharded layouts told apart by ZeRO stage
 * (experiment). */
#include "../../lab/exercise/exercise.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const int sizes_2_3[] = {2, 3, 0};

/* ---- ch14-weight-sync (implement) ---- */

static const char *const sync_hints[] = {
    "A generator can only judge an offer once it knows the version and the shapes. Which "
    "single collective gives every rank the trainer's header?",
    "If one generator refuses and the others go on, which ranks wait forever in the next "
    "broadcast? How does one all_reduce(MAX) of the verdicts make every rank decide alike?",
    "The buckets: how many floats fit in bucket_bytes, and where in which tensor does bucket k "
    "start when the tensors are laid end to end?",
    "Which rank is the root of each broadcast? Does your code still work when the trainer is "
    "not rank 0?",
    "After a refusal, which of the generator's tensors or its version may have changed?",
    NULL
};

static const ex_implement sync_impl = {
    .function = "weight_sync", .world_sizes = sizes_2_3, .timeout_ms = 5000, .limit_ms = 60000,
};

static const exercise ch14_weight_sync = {
    .id = "ch14-weight-sync",
    .chapter = 14,
    .kind = EX_IMPLEMENT,
    .title = "The weight sync: header, agreement, buckets, version",
    .task = "Write weight_sync(): the trainer broadcasts a header (version, count, size), the "
            "generators judge it (stale or mismatched versions are refused), one all_reduce "
            "makes every rank agree, then the weights go out in buckets and arrive "
            "bit-identical, and the generators take the new version.",
    .hints = sync_hints,
    .lab = "ch14/weight-update-demo",
    .starter = "starter.c",
    .solution = "solution.c",
    .workfile = "weight_sync.c",
    .impl = &sync_impl,
};

/* ---- ch14-predict-transfer (predict) ---- */

static void draw_transfer(uint64_t seed, ex_question *q)
{
    mlsys_rng g;
    mlsys_rng_seed(&g, seed);
    static const int sizes[] = {14, 70, 140, 280, 810};
    static const int ts[] = {2, 5, 10, 20};
    static const int gens[] = {20, 30, 60};
    static const int trains[] = {10, 20, 40};
    int S = sizes[ex_draw_int(&g, 0, 4)], t = ts[ex_draw_int(&g, 0, 3)];
    int G = gens[ex_draw_int(&g, 0, 2)], R = trains[ex_draw_int(&g, 0, 2)];
    /* the weights move one way, trainer -> generator; the original also counted a transfer
     * back, 2t/(G+R+2t): a near miss the tolerance rejects */
    double it = G + R + (double)t, share = 100.0 * t / it, twice = 100.0 * 2 * t / (it + t);
    snprintf(q->text, sizeof q->text,
             "A disaggregated RLHF loop moves %d GB of new weights from the trainer to the "
             "generator in %d s. One iteration is %d s of generation, %d s of training and "
             "that transfer, one after the other. What percentage of the iteration does the "
             "transfer take? One decimal.",
             S, t, G, R);
    q->answer = share;
    q->abs_tol = 0.051;
    q->rel_tol = 0.0;
    snprintf(q->unit, sizeof q->unit, "%%");
    snprintf(q->explain, sizeof q->explain,
             "The link carries %d / %d = %.1f GB/s (%.0f Gb/s). Iteration: %d + %d + %d = "
             "%.0f s; the transfer is %d s of it, %.1f %%. The weights go one way: the "
             "trainer keeps its own copy, so nothing comes back (the original tutorial counted "
             "a return transfer too: %.1f %%). ch14/weight-update-demo prints the same sums "
             "for 30 s + 20 s. To hide it: stream buckets layer by layer while training "
             "finishes, broadcast in a pipeline, or let generation run one version behind "
             "(asynchronous RLHF).", S, t, (double)S / t, 8.0 * S / t, G, R, t, it, t, share,
             twice);
}

static const char *const transfer_hints[] = {
    "How long is one iteration: generation, training and one transfer?",
    "What fraction of that is the transfer, in percent? The weights only go to the generator.",
    NULL
};

static const exercise ch14_predict_transfer = {
    .id = "ch14-predict-transfer",
    .chapter = 14,
    .kind = EX_PREDICT,
    .title = "What the weight transfer costs an iteration",
    .task = "Predict the share of an RLHF iteration the weight transfer (trainer to "
            "generator) takes, for a drawn size, transfer time, generation time and training "
            "time.",
    .hints = transfer_hints,
    .lab = "ch14/weight-update-demo",
    .draw = draw_transfer,
};

/* ---- ch14-memory-plan (experiment) ---- */

#define MT_CMD "mlsys-lab run ch14/memory-timeline"
#define MT_BATCH 4              /* the lab's default batch: sequences a DP replica can take */

/* memory-timeline's output with the extra flags (NULL-terminated, at most 8); NULL with v set
 * when it failed. The caller frees it. */
static char *run_timeline(const ex_context *cx, const char *const *extra, ex_verdict *v)
{
    if (!cx->bin[0]) {
        ex_verdict_set(v, EX_ERROR, EXF_SETUP, "cannot find the mlsys-lab program to run "
                       "ch14/memory-timeline (set MLSYS_LAB_BIN)");
        return NULL;
    }
    char *argv[16] = {(char *)cx->bin, "run", "ch14/memory-timeline"};
    int n = 3;
    for (int i = 0; extra && extra[i] && n < 15; i++)
        argv[n++] = (char *)extra[i];
    argv[n] = NULL;
    char *out = NULL;
    int st = 0;
    if (ex_run_capture(argv, 60000, &out, &st) == 0 && st == 0)
        return out;
    free(out);
    ex_verdict_set(v, EX_ERROR, EXF_SETUP, "`" MT_CMD "` failed (status %d)", st);
    return NULL;
}

/* One row of the layout table: "ZeRO-k (...)  weights gradients optimizer activations total
 * ✓|✗". 0, or -1 when out has none. */
static int zero_row(const char *out, int k, double c[5], int *ok)
{
    char key[16];
    snprintf(key, sizeof key, "ZeRO-%d ", k);
    const char *p = strstr(out, key), *q = p ? strchr(p, ')') : NULL;
    if (!q || sscanf(q + 1, "%lf %lf %lf %lf %lf", &c[0], &c[1], &c[2], &c[3], &c[4]) != 5)
        return -1;
    const char *eol = strchr(q, '\n');
    *ok = eol && eol - q > 3 && !strncmp(eol - 3, "✓", 3);
    return 0;
}

/* The lab's phase totals (generation, scoring, training), per-GPU shares over 8 GPUs, the
 * actor's weights in GB and training per GPU on 8 GPUs of plain data parallelism (ZeRO-0).
 * 0, or -1 with v set. */
static int timeline(const ex_context *cx, double tot[3], double per8[3], double *actor,
                    double *replicated, ex_verdict *v)
{
    char *out = run_timeline(cx, NULL, v);
    if (!out)
        return -1;
    int found = 0, ok;
    const char *p = out, *a = strstr(out, "Actor weights");
    for (int i = 0; i < 3; i++) {
        p = strstr(p, "TOTAL");
        const char *q = p ? strstr(p, "over 8 GPUs:") : NULL;
        if (!p || !q || sscanf(p, "TOTAL %lf", &tot[i]) != 1 ||
            sscanf(q, "over 8 GPUs: %lf", &per8[i]) != 1)
            break;
        p = q;
        found++;
    }
    double row[5];
    if (!a || sscanf(a, "Actor weights %lf", actor) != 1 || zero_row(out, 0, row, &ok))
        found = 0;
    *replicated = row[4];
    free(out);
    if (found != 3) {
        ex_verdict_set(v, EX_ERROR, EXF_SETUP, "`" MT_CMD "` printed no phase totals or no "
                       "layout table");
        return -1;
    }
    return 0;
}

static int check_memory_plan(const ex_context *cx, const exercise *ex, const char *file,
                             ex_verdict *v)
{
    (void)ex;
    static const char *const yn[] = {"no", "yes", NULL};
    ex_answers an;
    char err[512];
    if (ex_answers_read(file, &an, err, sizeof err) != 0) {
        ex_verdict_set(v, EX_ERROR, EXF_SETUP, "%s", err);
        return v->result;
    }
    double g8, t8, r8, tmin, tg, tp, pp, dp, zr, tgb, gtp, grep, sync;
    int fits;
    if (ex_answer_number(&an, "gen_per_gpu_8", &g8, v) ||
        ex_answer_number(&an, "replicated_per_gpu_8", &r8, v) ||
        ex_answer_number(&an, "train_per_gpu_8", &t8, v) ||
        ex_answer_choice(&an, "train_fits_8", yn, &fits, v) ||
        ex_answer_number(&an, "train_min_gpus", &tmin, v) ||
        ex_answer_number(&an, "train_gpus", &tg, v) || ex_answer_number(&an, "tp", &tp, v) ||
        ex_answer_number(&an, "pp", &pp, v) || ex_answer_number(&an, "dp", &dp, v) ||
        ex_answer_number(&an, "zero", &zr, v) ||
        ex_answer_number(&an, "train_gpu_gb", &tgb, v) ||
        ex_answer_number(&an, "gen_tp", &gtp, v) ||
        ex_answer_number(&an, "gen_replicas", &grep, v) ||
        ex_answer_number(&an, "sync_s", &sync, v))
        return v->result;
    double tot[3], per8[3], actor, repl;
    if (timeline(cx, tot, per8, &actor, &repl, v))
        return v->result;
    if (fabs(g8 - per8[0]) > 0.051 || fabs(t8 - per8[2]) > 0.051) {
        int gen = fabs(g8 - per8[0]) > 0.051;
        ex_verdict_set(v, EX_FAIL, EXF_ANSWER, "%s = %g, but `" MT_CMD "` gives %.1f GB of %s "
                       "over 8 GPUs (%.1f GB / 8, everything sharded: ZeRO-3)",
                       gen ? "gen_per_gpu_8" : "train_per_gpu_8", gen ? g8 : t8,
                       gen ? per8[0] : per8[2], gen ? "generation" : "training",
                       gen ? tot[0] : tot[2]);
        return v->result;
    }
    if (fabs(r8 - repl) > 0.051) {
        ex_verdict_set(v, EX_FAIL, EXF_ANSWER, "replicated_per_gpu_8 = %g, but with plain data "
                       "parallelism (ZeRO-0) each of the 8 GPUs holds %.1f GB: the whole actor "
                       "and critic, their gradients and optimizer state, and an eighth of the "
                       "activations (the lab's ZeRO-0 row)", r8, repl);
        return v->result;
    }
    if (fits != (per8[2] <= 80.0)) {
        ex_verdict_set(v, EX_FAIL, EXF_ANSWER, "train_fits_8 = %s, but %.1f GB per GPU %s 80 GB",
                       yn[fits], per8[2], per8[2] <= 80.0 ? "fits in" : "exceeds");
        return v->result;
    }
    int need = (int)ceil(tot[2] / 80.0 - 1e-9);
    if (tmin != need) {
        ex_verdict_set(v, EX_FAIL, EXF_ANSWER, "train_min_gpus = %g: %.1f GB of training, "
                       "sharded whole (ZeRO-3) over N GPUs of 80 GB, fits from N = ceil(%.1f / "
                       "80) = %d", tmin, tot[2], tot[2], need);
        return v->result;
    }
    int T = (int)tg, a = (int)tp, b = (int)pp, c = (int)dp, z = (int)zr, gt = (int)gtp,
        gr = (int)grep;
    const char *bad = NULL;
    char why[256];
    if (tg != T || tp != a || pp != b || dp != c || zr != z || gtp != gt || grep != gr ||
        a < 1 || b < 1 || c < 1 || gt < 1 || gr < 1 || T < 1)
        bad = "GPU counts, parallel degrees and the ZeRO stage are whole numbers";
    else if (z < 0 || z > 3)
        bad = "the ZeRO stage is 0 (plain DP), 1, 2 or 3";
    else if (a * b * c != T)
        bad = "tp x pp x dp must equal train_gpus";
    else if (a > 8 || gt > 8)
        bad = "tensor parallelism stays inside a node of 8 GPUs (tp, gen_tp <= 8)";
    else if (b > 80)
        bad = "70B has 80 layers: at most 80 pipeline stages";
    else if (T < need)
        bad = "the training group must hold the training phase: train_gpus >= train_min_gpus";
    else if (gt * gr != 64 - T)
        bad = "the generation group is the other 64 - train_gpus GPUs: gen_tp x gen_replicas";
    else if (tot[0] / gt > 80.0)
        bad = "each generation replica holds the generation phase over its gen_tp GPUs: it "
              "must fit in 80 GB each";
    snprintf(why, sizeof why, "train %d GPUs = tp %d x pp %d x dp %d under ZeRO-%d, generation "
             "%d x %d: ", T, a, b, c, z, gr, gt);
    if (bad) {
        ex_verdict_set(v, EX_FAIL, EXF_ANSWER, "%s%s", why, bad);
        if (strstr(bad, "replica holds"))
            ex_verdict_add(v, "%.1f GB / %d = %.1f GB per GPU", tot[0], gt, tot[0] / gt);
        return v->result;
    }
    /* the layout's training memory per GPU, as the lab computes it for that layout */
    char sa[16], sb[16], sc[16], sz[16];
    snprintf(sa, sizeof sa, "%d", a);
    snprintf(sb, sizeof sb, "%d", b);
    snprintf(sc, sizeof sc, "%d", c);
    snprintf(sz, sizeof sz, "%d", z);
    const char *extra[] = {"--tp-size", sa, "--pp-size", sb, "--dp-size", sc, "--zero", sz,
                           NULL};
    char *out = run_timeline(cx, extra, v);
    if (!out)
        return v->result;
    double row[5];
    int ok = 0;
    int found = zero_row(out, z, row, &ok) == 0;
    free(out);
    if (!found) {
        ex_verdict_set(v, EX_ERROR, EXF_SETUP, "`" MT_CMD " --tp-size %d --pp-size %d "
                       "--dp-size %d --zero %d` printed no ZeRO-%d row", a, b, c, z, z);
        return v->result;
    }
    if (row[4] > 80.0) {
        ex_verdict_set(v, EX_FAIL, EXF_ANSWER, "%straining does not fit: %.1f GB per GPU "
                       "(weights %.1f, gradients %.1f, optimizer %.1f, activations %.1f)", why,
                       row[4], row[0], row[1], row[2], row[3]);
        if (z < 3)
            ex_verdict_add(v, "data parallelism copies what ZeRO-%d leaves whole on each of its "
                           "%d replicas; tensor and pipeline parallelism (%d GPUs) shard "
                           "everything", z, c, a * b);
        return v->result;
    }
    if (c > MT_BATCH) {
        ex_verdict_set(v, EX_FAIL, EXF_ANSWER, "%sit fits in memory (%.1f GB per GPU), but "
                       "each data-parallel replica needs a sequence of the batch of %d: dp <= %d",
                       why, row[4], MT_BATCH, MT_BATCH);
        return v->result;
    }
    if (fabs(tgb - row[4]) > 0.051) {
        ex_verdict_set(v, EX_FAIL, EXF_ANSWER, "train_gpu_gb = %g, but your layout holds %.1f "
                       "GB of training per GPU (`" MT_CMD " --tp-size %d --pp-size %d "
                       "--dp-size %d --zero %d`)", tgb, row[4], a, b, c, z);
        return v->result;
    }
    double want_sync = actor / 50.0 + 0.05;
    if (fabs(sync - want_sync) > 0.011) {
        ex_verdict_set(v, EX_FAIL, EXF_ANSWER, "sync_s = %g: the actor's %.1f GB over "
                       "InfiniBand (50 GB/s, 50 ms setup) take %.2f s (`mlsys-lab run "
                       "ch14/weight-update-demo --model-size %.1f`)", sync, actor, want_sync,
                       actor);
        return v->result;
    }
    ex_verdict_set(v, EX_PASS, EXF_NONE, "training %.1f GB: on 8 GPUs %.1f GB each as plain "
                   "DP replicas, %.1f sharded whole (ZeRO-3), so it fits from %d; your design: "
                   "train %d = %d x %d x %d under ZeRO-%d (%.1f GB per GPU), generation %d x "
                   "TP %d (%.1f GB per GPU), %.2f s per sync", tot[2], repl, per8[2], need, T,
                   a, b, c, z, row[4], gr, gt, tot[0] / gt, want_sync);
    ex_verdict_add(v, "Generation fits on 8 GPUs (%.1f GB each) but training needs %.1f even "
                   "sharded: the optimizer states of two trained models dominate. Data "
                   "parallelism divides memory only where ZeRO shards it; co-located, the "
                   "phases take turns on the same GPUs; disaggregated, each group is sized for "
                   "its own phase and the weights cross the network after every step.",
                   per8[0], per8[2]);
    return v->result;
}

static const char *const plan_hints[] = {
    "Which line under each phase says what one GPU holds when the phase is sharded perfectly "
    "over 8 GPUs? Which ZeRO stage shards everything like that?",
    "Plain data parallelism (ZeRO-0): what does each replica hold of the actor and the critic, "
    "their gradients and their optimizer state?",
    "Over how many GPUs of 80 GB must the training total be spread before each GPU holds at "
    "most 80 GB?",
    "In a 64-GPU design, which group must hold the training phase and which the generation "
    "phase? How many GPUs does one generation replica need for its total?",
    "Tensor and pipeline parallelism shard every state of the model; data parallelism divides "
    "only what the ZeRO stage shards. `--tp-size T --pp-size P --dp-size D` prints all four "
    "stages for a layout: which is the smallest that fits in 80 GB?",
    "What does the weight-update demo's time formula (size / bandwidth + setup) give for the "
    "actor's weights over InfiniBand?",
    NULL
};

static const exercise ch14_memory_plan = {
    .id = "ch14-memory-plan",
    .chapter = 14,
    .kind = EX_EXPERIMENT,
    .title = "A memory plan for 70B RLHF, and a 64-GPU design",
    .task = "Run `" MT_CMD "`: report generation and training per GPU on 8 GPUs, training "
            "as plain data-parallel replicas and sharded whole (ZeRO-3), whether it fits, and "
            "the fewest GPUs it needs; then design 64 GPUs (training TP x PP x DP under a ZeRO "
            "stage, generation replicas x TP) that holds every phase, and the weight sync time "
            "over InfiniBand.",
    .hints = plan_hints,
    .lab = "ch14/memory-timeline",
    .starter = "starter.txt",
    .solution = "solution.txt",
    .workfile = "answers.txt",
    .check = check_memory_plan,
};

const exercise *const ch14_exercises[] = {
    &ch14_predict_transfer,
    &ch14_weight_sync,
    &ch14_memory_plan,
    NULL
};
