/* ch04_exercises.c - Chapter 4's exercises: the ring/tree crossover measured with the benchmark
 * and its alpha-beta model (experiment), and predict questions: steps of ring and tree,
 * the busbw factor of each collective, the model's crossover size, a topology matrix read
 * by eye, and an all-reduce's time from its bus bandwidth. Answers come from the formulas
 * of the curriculum (section 4), computed here. */
#include "../../lab/exercise/exercise.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static int log2_ceil(int n)
{
    int l = 0;
    while ((1 << l) < n)
        l++;
    return l;
}

/* ---- ch04-crossover (experiment) ---- */

/* From `mlsys-lab bench` output: the model column (us) of the rows of 1024 and 1048576
 * bytes, and the #wrong counts. 0 when both rows were found. */
static int parse_bench(const char *out, double model[2], long *wrong)
{
    int found = 0;
    *wrong = 0;
    for (const char *p = out; *p;) {
        const char *e = strchr(p, '\n');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        char line[512];
        snprintf(line, sizeof line, "%.*s", (int)(len < sizeof line - 1 ? len : sizeof line - 1), p);
        p += len + (e != NULL);
        if (line[0] == '#')
            continue;
        char *tok[20];
        int nt = 0;
        for (char *save, *t = strtok_r(line, " \t", &save); t && nt < 20; t = strtok_r(NULL, " \t", &save))
            tok[nt++] = t;
        if (nt < 15)
            continue;
        long size = strtol(tok[0], NULL, 10);
        *wrong += strtol(tok[8], NULL, 10) + strtol(tok[12], NULL, 10);
        int idx = size == 1024 ? 0 : size == 1048576 ? 1 : -1;
        if (idx < 0)
            continue;
        char *end;
        double m = strtod(tok[13], &end);
        if (end == tok[13])
            return -1;       /* "-": no model for this algorithm */
        model[idx] = m;
        found |= 1 << idx;
    }
    return found == 3 ? 0 : -1;
}

/* The benchmark of ch04-crossover, in one place: the check runs it, the task shows it, and
 * the chapter text and the starter must quote it (tests/unit/test_truth.c holds them to it). */
#define CROSSOVER_BENCH "--world-size 8 --sizes 1K,1M --alpha 10 --beta 5"

static int run_bench(const ex_context *cx, const char *algo, double model[2], ex_verdict *v)
{
    char args[] = CROSSOVER_BENCH;
    char *argv[24];
    int k = 0;
    argv[k++] = (char *)cx->bin;
    argv[k++] = "bench";
    for (char *save, *t = strtok_r(args, " ", &save); t && k < 16; t = strtok_r(NULL, " ", &save))
        argv[k++] = t;
    argv[k++] = "--algo";
    argv[k++] = (char *)algo;
    argv[k++] = "-n";
    argv[k++] = "2";
    argv[k++] = "--warmup_iters";
    argv[k++] = "1";
    argv[k] = NULL;
    char *out;
    int st;
    long wrong = 0;
    if (ex_run_capture(argv, 120000, &out, &st) != 0 || st != 0 ||
        parse_bench(out, model, &wrong) != 0) {
        ex_verdict_set(v, EX_ERROR, EXF_SETUP, "the benchmark (--algo %s) did not give a model "
                       "column (status %d)", algo, st);
        if (out)
            ex_verdict_add(v, "%s", out);
        free(out);
        return -1;
    }
    free(out);
    if (wrong) {
        ex_verdict_set(v, EX_ERROR, EXF_SETUP, "the benchmark (--algo %s) reports %ld wrong "
                       "results: a runtime bug, not yours", algo, wrong);
        return -1;
    }
    return 0;
}

static int check_crossover(const ex_context *cx, const exercise *ex, const char *file,
                           ex_verdict *v)
{
    (void)ex;
    static const char *const algos[] = {"ring", "tree", NULL};
    static const char *const sizes[] = {"1K", "1M"};
    ex_answers a;
    char err[512];
    if (ex_answers_read(file, &a, err, sizeof err) != 0) {
        ex_verdict_set(v, EX_ERROR, EXF_SETUP, "%s", err);
        return v->result;
    }
    double t[2][2];       /* [algo][size] */
    int measured[2], model[2];
    for (int s = 0; s < 2; s++)
        for (int k = 0; k < 2; k++) {
            char key[48];
            snprintf(key, sizeof key, "%s_time_%s_us", algos[k], sizes[s]);
            if (ex_answer_number(&a, key, &t[k][s], v))
                return v->result;
            if (!(t[k][s] > 0.0) || !isfinite(t[k][s])) {
                ex_verdict_set(v, EX_FAIL, EXF_ANSWER, "%s = %g: a time is positive", key,
                               t[k][s]);
                return v->result;
            }
        }
    for (int s = 0; s < 2; s++) {
        char key[48];
        snprintf(key, sizeof key, "measured_faster_%s", sizes[s]);
        if (ex_answer_choice(&a, key, algos, &measured[s], v))
            return v->result;
        snprintf(key, sizeof key, "model_faster_%s", sizes[s]);
        if (ex_answer_choice(&a, key, algos, &model[s], v))
            return v->result;
    }
    for (int s = 0; s < 2; s++) {
        int faster = t[0][s] <= t[1][s] ? 0 : 1;
        if (t[0][s] == t[1][s])
            continue;                  /* a tie: either answer follows */
        if (measured[s] != faster) {
            ex_verdict_set(v, EX_FAIL, EXF_ANSWER, "measured_faster_%s = %s, but your own "
                           "numbers say %s (%g us) beat %s (%g us)", sizes[s], algos[measured[s]],
                           algos[faster], t[faster][s], algos[1 - faster], t[1 - faster][s]);
            return v->result;
        }
    }
    if (!cx->bin[0]) {
        ex_verdict_set(v, EX_ERROR, EXF_SETUP, "cannot find the mlsys-lab program to run the "
                       "benchmark (set MLSYS_LAB_BIN)");
        return v->result;
    }
    double m[2][2];
    for (int k = 0; k < 2; k++)
        if (run_bench(cx, algos[k], m[k], v) != 0)
            return v->result;
    for (int s = 0; s < 2; s++) {
        int faster = m[0][s] <= m[1][s] ? 0 : 1;
        if (model[s] != faster) {
            ex_verdict_set(v, EX_FAIL, EXF_ANSWER, "model_faster_%s = %s, but the model column "
                           "says %s: read it again", sizes[s], algos[model[s]], algos[1 - model[s]]);
            return v->result;
        }
    }
    ex_verdict_set(v, EX_PASS, EXF_NONE, "your conclusions follow from your measurements and "
                   "from the model");
    ex_verdict_add(v, "model: 1 KiB ring %.1f us vs tree %.1f us; 1 MiB ring %.1f us vs tree "
                   "%.1f us", m[0][0], m[1][0], m[0][1], m[1][1]);
    ex_verdict_add(v, "Tree pays alpha only 2 ceil(log2 N) = 6 times, Ring 2(N-1) = 14 times, but Tree "
                   "moves the whole buffer at every step and Ring only S/N: latency wins small "
                   "messages, bandwidth wins large ones. Where your measurements disagree with "
                   "the model, ask what the model leaves out (8 ranks on few cores, copies).");
    return v->result;
}

static const char *const crossover_hints[] = {
    "Which column of the benchmark is the time, and which one is the model's prediction?",
    "How many messages does each algorithm send per rank, and how big is each?",
    "At 1 KiB, which matters more: the per-message latency alpha, or the bytes over beta? "
    "And at 1 MiB?",
    NULL
};

static const exercise ch04_crossover = {
    .id = "ch04-crossover",
    .chapter = 4,
    .kind = EX_EXPERIMENT,
    .title = "When Ring beats Tree: measured and modelled",
    .task = "Run `mlsys-lab bench " CROSSOVER_BENCH " --algo ring`, and the same with --algo "
            "tree; say which wins at 1 KiB and at 1 MiB, by your measurements and by the "
            "alpha-beta model.",
    .hints = crossover_hints,
    .starter = "starter.txt",
    .solution = "solution.txt",
    .workfile = "answers.txt",
    .check = check_crossover,
};

/* ---- ch04-topology (experiment) ---- */

/* The facts of a saved `nvidia-smi topo -m`, read by the header's column names (so that NIC
 * columns are never taken for GPUs). */
typedef struct topo_facts {
    int ngpu;
    int nv[16][16];             /* NVLink links between GPUs, 0 = PCIe only */
    char affinity[16][64];
    int nnic;
    char nic_name[8][16];
    int nic_rank[16][8];        /* GPU x NIC: PIX 0, PXB 1, PHB 2, NODE 3, SYS 4 */
} topo_facts;

static int pcie_rank(const char *c)
{
    static const char *const order[] = {"PIX", "PXB", "PHB", "NODE", "SYS"};
    for (int i = 0; i < 5; i++)
        if (!strcmp(c, order[i]))
            return i;
    return 9;
}

static char *trim_ws(char *s)
{
    while (*s == ' ')
        s++;
    size_t n = strlen(s);
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\r'))
        s[--n] = 0;
    return s;
}

static int parse_topo(const char *path, topo_facts *t)
{
    memset(t, 0, sizeof *t);
    char *text = ex_read_file(path, NULL);
    if (!text)
        return -1;
    int col_gpu[32], col_nic[32], col_aff = -1, ncols = 0, have_header = 0;
    for (int i = 0; i < 32; i++)
        col_gpu[i] = col_nic[i] = -1;
    for (char *save, *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        if (strstr(line, "Legend"))
            break;
        int is_header = !have_header && strstr(line, "GPU0") != NULL;
        char *f[32];
        int nf = 0;
        for (char *p = line; nf < 32;) {
            char *tab = strchr(p, '\t');
            f[nf++] = p;
            if (!tab)
                break;
            *tab = 0;
            p = tab + 1;
        }
        if (!have_header) {
            if (!is_header)
                continue;
            ncols = nf;
            for (int j = 0; j < nf; j++) {
                char *name = trim_ws(f[j]);
                if (!strncmp(name, "GPU", 3) && name[3] >= '0' && name[3] <= '9' && t->ngpu < 16)
                    col_gpu[j] = t->ngpu++;
                else if (!strncmp(name, "NIC", 3) && t->nnic < 8) {
                    snprintf(t->nic_name[t->nnic], sizeof t->nic_name[0], "%s", name);
                    col_nic[j] = t->nnic++;
                } else if (!strcmp(name, "CPU Affinity"))
                    col_aff = j;
            }
            have_header = 1;
            continue;
        }
        char *label = trim_ws(f[0]);
        if (strncmp(label, "GPU", 3) != 0)
            continue;
        int row = atoi(label + 3);
        if (row < 0 || row >= t->ngpu)
            continue;
        for (int j = 1; j < nf && j < ncols; j++) {
            char *c = trim_ws(f[j]);
            if (col_gpu[j] >= 0 && !strncmp(c, "NV", 2))
                t->nv[row][col_gpu[j]] = atoi(c + 2);
            else if (col_nic[j] >= 0)
                t->nic_rank[row][col_nic[j]] = pcie_rank(c);
            else if (j == col_aff)
                snprintf(t->affinity[row], sizeof t->affinity[0], "%s", c);
        }
    }
    free(text);
    return have_header && t->ngpu >= 4 ? 0 : -1;
}

static void strip_spaces(char *s)
{
    char *d = s;
    for (; *s; s++)
        if (*s != ' ')
            *d++ = *s;
    *d = 0;
}

static int check_topology(const ex_context *cx, const exercise *ex, const char *file,
                          ex_verdict *v)
{
    char matrix[PATH_MAX], err[512];
    ex_asset_path(cx, ex, "topo.txt", matrix, sizeof matrix);
    topo_facts t;
    if (parse_topo(matrix, &t) != 0) {
        ex_verdict_set(v, EX_ERROR, EXF_SETUP, "cannot read the topology matrix %s", matrix);
        return v->result;
    }
    ex_answers a;
    if (ex_answers_read(file, &a, err, sizeof err) != 0) {
        ex_verdict_set(v, EX_ERROR, EXF_SETUP, "%s", err);
        return v->result;
    }
    int pcie = 0;
    for (int i = 0; i < t.ngpu; i++)
        for (int j = i + 1; j < t.ngpu; j++)
            pcie += t.nv[i][j] == 0;
    int best = 0;
    for (int k = 1; k < t.nnic; k++)
        if (t.nic_rank[3][k] < t.nic_rank[3][best])
            best = k;
    double x;
    const char *s;
    if (ex_answer_number(&a, "nvlinks_gpu0_gpu1", &x, v))
        goto hint;
    if (x != t.nv[0][1]) {
        ex_verdict_set(v, EX_FAIL, EXF_ANSWER, "nvlinks_gpu0_gpu1 = %g: read the cell of row "
                       "GPU0, column GPU1 again (NV# means # links)", x);
        goto hint;
    }
    if (ex_answer_number(&a, "nvlinks_gpu2_gpu3", &x, v))
        goto hint;
    if (x != t.nv[2][3]) {
        ex_verdict_set(v, EX_FAIL, EXF_ANSWER, "nvlinks_gpu2_gpu3 = %g: read row GPU2, column "
                       "GPU3 again", x);
        goto hint;
    }
    if (ex_answer_number(&a, "pcie_only_pairs", &x, v))
        goto hint;
    if (x != pcie) {
        ex_verdict_set(v, EX_FAIL, EXF_ANSWER, "pcie_only_pairs = %g: count the GPU pairs "
                       "without NV#, each pair once, and only GPU columns (NIC0 and NIC1 are "
                       "network cards)", x);
        goto hint;
    }
    if (!(s = ex_answer_get(&a, "cpu_affinity_gpu2", v)))
        goto hint;
    char mine[160], want[64];
    snprintf(mine, sizeof mine, "%s", s);
    snprintf(want, sizeof want, "%s", t.affinity[2]);
    strip_spaces(mine);
    strip_spaces(want);
    if (strcmp(mine, want)) {
        ex_verdict_set(v, EX_FAIL, EXF_ANSWER, "cpu_affinity_gpu2 = %s: that is not the CPU "
                       "Affinity column of row GPU2", s);
        goto hint;
    }
    if (!(s = ex_answer_get(&a, "nic_near_gpu3", v)))
        goto hint;
    if (strcasecmp(s, t.nic_name[best])) {
        ex_verdict_set(v, EX_FAIL, EXF_ANSWER, "nic_near_gpu3 = %s: compare the two NIC cells of "
                       "row GPU3 (PIX is closest, then PXB, PHB, NODE, SYS)", s);
        goto hint;
    }
    ex_verdict_set(v, EX_PASS, EXF_NONE, "you read the topology right");
    ex_verdict_add(v, "NVLink pairs {0,1} (NV%d) and {2,3} (NV%d); the %d other pairs cross "
                   "the CPUs' interconnect (SYS). Keep tensor parallelism inside an NVLink pair, "
                   "and give each pair the NIC on its side.", t.nv[0][1], t.nv[2][3], pcie);
    return v->result;
hint:
    ex_verdict_add(v, "the matrix: %s", matrix);
    ex_verdict_add(v, "analyse it with:");
    ex_verdict_add(v, "$ mlsys-lab run ch04/topology-inspector --matrix %s", matrix);
    return v->result;
}

static const char *const topology_lab_hints[] = {
    "Which columns of the header are GPUs, and which are network cards?",
    "Is the matrix symmetric? Which half do you read so that each pair counts once?",
    "Which column holds the CPU cores close to a GPU?",
    "Of PIX, PXB, PHB, NODE and SYS, which is the shortest path?",
    NULL
};

static const exercise ch04_topology = {
    .id = "ch04-topology",
    .chapter = 4,
    .kind = EX_EXPERIMENT,
    .title = "Read a GPU box's topology with the inspector",
    .task = "Analyse a saved topo -m matrix of a 4-GPU box with two NICs: NVLink counts, "
            "PCIe-only pairs, a GPU's CPU affinity and its nearest NIC.",
    .hints = topology_lab_hints,
    .lab = "ch04/topology-inspector",
    .starter = "starter.txt",
    .solution = "solution.txt",
    .workfile = "answers.txt",
    .check = check_topology,
};

/* ---- predict ---- */

static void draw_steps(uint64_t seed, ex_question *q)
{
    mlsys_rng g;
    mlsys_rng_seed(&g, seed);
    int n = (int)ex_draw_int(&g, 2, 128);
    int tree = (int)ex_draw_int(&g, 0, 1);
    int l = log2_ceil(n);
    if (tree) {
        snprintf(q->text, sizeof q->text,
                 "A (non-pipelined) binomial-tree all-reduce (ceil(log2 N) rounds each way) on "
                 "N = %d ranks reduces up to the root, then broadcasts down. How many steps "
                 "does it take?", n);
        q->answer = 2.0 * l;
        snprintf(q->explain, sizeof q->explain,
                 "A binomial tree over N ranks needs ceil(log2 N) = %d rounds: %d steps up and "
                 "%d down, 2 x %d = %d. Compare the ring's 2(N-1) = %d.", l, l, l, l, 2 * l,
                 2 * (n - 1));
    } else {
        snprintf(q->text, sizeof q->text,
                 "A ring all-reduce on N = %d ranks. How many steps does it take, counting both "
                 "phases?", n);
        q->answer = 2.0 * (n - 1);
        snprintf(q->explain, sizeof q->explain,
                 "N-1 steps of reduce-scatter and N-1 of all-gather: 2(N-1) = %d. A tree needs "
                 "2 ceil(log2 N) = %d (a binomial tree), so the ring's latency grows much "
                 "faster with N.",
                 2 * (n - 1), 2 * l);
    }
    snprintf(q->unit, sizeof q->unit, "steps");
}

static const char *const steps_hints[] = {
    "In a ring, how many steps until every rank has seen every chunk once? And back again?",
    "In a binomial tree, every round halves the ranks that still hold a partial sum. How "
    "many rounds until one is left?",
    NULL
};

static const exercise ch04_predict_steps = {
    .id = "ch04-predict-steps",
    .chapter = 4,
    .kind = EX_PREDICT,
    .title = "Steps of Ring and Tree",
    .task = "Predict the number of steps of a ring or a tree all-reduce on N ranks.",
    .hints = steps_hints,
    .draw = draw_steps,
};

static void draw_busbw(uint64_t seed, ex_question *q)
{
    mlsys_rng g;
    mlsys_rng_seed(&g, seed);
    static const char *const ops[] = {"all_reduce", "all_gather", "reduce_scatter", "all_to_all",
                                      "broadcast", "reduce"};
    int op = (int)ex_draw_int(&g, 0, 5);
    int n = (int)ex_draw_int(&g, 2, 64);
    double f;
    const char *why;
    if (op == 0) {
        f = 2.0 * (n - 1) / n;
        why = "every rank sends and receives 2(N-1)/N of the buffer: a reduce-scatter, then an "
              "all-gather";
    } else if (op <= 3) {
        f = (double)(n - 1) / n;
        why = "every rank must receive the (N-1)/N of the buffer that it does not have";
    } else {
        f = 1.0;
        why = "the root's whole buffer must cross a link once";
    }
    snprintf(q->text, sizeof q->text,
             "In nccl-tests (and mlsys-lab bench), busbw = algbw x factor, so that busbw can be "
             "compared with one link's bandwidth. What is the factor for %s on N = %d ranks? "
             "(A fraction like 7/4 is fine.)", ops[op], n);
    q->answer = f;
    q->rel_tol = 1e-3;
    snprintf(q->explain, sizeof q->explain, "%s: %s, so the factor is %.4g.", ops[op], why, f);
}

static const char *const busbw_hints[] = {
    "How much of the buffer must cross the links per rank for this collective, at the least?",
    "Why does a ring all-reduce move the data twice?",
    NULL
};

static const exercise ch04_predict_busbw = {
    .id = "ch04-predict-busbw",
    .chapter = 4,
    .kind = EX_PREDICT,
    .title = "The busbw factor of a collective",
    .task = "Predict the factor between algbw and busbw for a collective on N ranks.",
    .hints = busbw_hints,
    .draw = draw_busbw,
};

static void draw_crossover(uint64_t seed, ex_question *q)
{
    mlsys_rng g;
    mlsys_rng_seed(&g, seed);
    int n = (int)ex_draw_int(&g, 4, 64);
    int alpha = (int)ex_draw_int(&g, 1, 50);          /* us */
    int beta = (int)ex_draw_int(&g, 1, 100);          /* GB/s */
    int l = log2_ceil(n);
    double ab = alpha * 1e-6 * beta * 1e9;            /* bytes */
    double s = ab * (n - 1 - l) / (l - (double)(n - 1) / n);
    snprintf(q->text, sizeof q->text,
             "The alpha-beta model: T_ring = 2(N-1)(alpha + S/(N beta)) and T_tree = "
             "2 ceil(log2 N)(alpha + S/beta). With N = %d ranks, alpha = %d us and beta = %d GB/s "
             "(10^9 bytes/s), at which message size S (in bytes) do they take the same time? "
             "(within 5%%)", n, alpha, beta);
    q->answer = s;
    q->rel_tol = 0.05;
    snprintf(q->unit, sizeof q->unit, "bytes");
    snprintf(q->explain, sizeof q->explain,
             "Set them equal with L = ceil(log2 N) = %d: S* = alpha beta (N-1-L) / (L - (N-1)/N) "
             "= %.0f x %d / %.4f = %.0f bytes. Below S*, Tree is faster (fewer alphas); above, "
             "Ring (less data per step).", l, ab, n - 1 - l, l - (double)(n - 1) / n, s);
}

static const char *const crossover_model_hints[] = {
    "Write T_ring = T_tree and collect the terms with S on one side. What is L for this N?",
    "What is alpha x beta in bytes when alpha is in microseconds and beta in GB/s?",
    NULL
};

static const exercise ch04_predict_crossover = {
    .id = "ch04-predict-crossover",
    .chapter = 4,
    .kind = EX_PREDICT,
    .title = "The ring/tree crossover size in the alpha-beta model",
    .task = "Compute the message size where Ring and Tree take equal time, for given N, alpha "
            "and beta.",
    .hints = crossover_model_hints,
    .draw = draw_crossover,
};

static void draw_topology(uint64_t seed, ex_question *q)
{
    mlsys_rng g;
    mlsys_rng_seed(&g, seed);
    int n = ex_draw_int(&g, 0, 1) ? 8 : 4;
    static const char *const pcie[] = {"SYS", "NODE", "PHB", "PXB", "PIX"};
    static const int links[] = {1, 2, 4, 6, 8, 12, 18};
    int nv[8][8];
    char code[8][8][8];
    int pcie_pairs = 0;
    for (int a = 0; a < n; a++) {
        snprintf(code[a][a], sizeof code[a][a], "X");
        nv[a][a] = 0;
        for (int b = a + 1; b < n; b++) {
            if (ex_draw_int(&g, 0, 2)) {
                nv[a][b] = links[ex_draw_int(&g, 0, 6)];
                snprintf(code[a][b], sizeof code[a][b], "NV%d", nv[a][b]);
            } else {
                nv[a][b] = 0;
                snprintf(code[a][b], sizeof code[a][b], "%s", pcie[ex_draw_int(&g, 0, 4)]);
                pcie_pairs++;
            }
            nv[b][a] = nv[a][b];
            memcpy(code[b][a], code[a][b], sizeof code[b][a]);
        }
    }
    size_t k = 0;
    char m[700];
    k += (size_t)snprintf(m + k, sizeof m - k, "      ");
    for (int b = 0; b < n; b++) {
        char hdr[16];
        snprintf(hdr, sizeof hdr, "GPU%d", b);
        k += (size_t)snprintf(m + k, sizeof m - k, "%-6s", hdr);
    }
    for (int a = 0; a < n && k < sizeof m; a++) {
        k += (size_t)snprintf(m + k, sizeof m - k, "\nGPU%d  ", a);
        for (int b = 0; b < n && k < sizeof m; b++)
            k += (size_t)snprintf(m + k, sizeof m - k, "%-6s", code[a][b]);
    }
    int which = (int)ex_draw_int(&g, 0, 1);
    if (which) {
        snprintf(q->text, sizeof q->text,
                 "The matrix of `nvidia-smi topo -m` for %d GPUs (NV# = NVLink with # links; "
                 "SYS, NODE, PHB, PXB, PIX = PCIe paths only):\n%s\nHow many GPU pairs are "
                 "joined by PCIe only (no NVLink)?", n, m);
        q->answer = pcie_pairs;
        snprintf(q->explain, sizeof q->explain,
                 "Count the cells above the diagonal that are not NV#: %d of the %d pairs. The "
                 "matrix is symmetric, so each pair appears twice; count it once.", pcie_pairs,
                 n * (n - 1) / 2);
    } else {
        int a = (int)ex_draw_int(&g, 0, n - 2);
        int b = (int)ex_draw_int(&g, a + 1, n - 1);
        snprintf(q->text, sizeof q->text,
                 "The matrix of `nvidia-smi topo -m` for %d GPUs (NV# = NVLink with # links; "
                 "SYS, NODE, PHB, PXB, PIX = PCIe paths only):\n%s\nHow many NVLink links join "
                 "GPU%d and GPU%d? (0 when they have none)", n, m, a, b);
        q->answer = nv[a][b];
        snprintf(q->explain, sizeof q->explain,
                 "Row GPU%d, column GPU%d reads %s: %d link%s. More links, more bandwidth: "
                 "an NVLink 3.0 link gives about 25 GB/s each way.", a, b, code[a][b], nv[a][b],
                 nv[a][b] == 1 ? "" : "s");
    }
    snprintf(q->unit, sizeof q->unit, "%s", which ? "pairs" : "links");
}

static const char *const topology_hints[] = {
    "Is the matrix symmetric? Which half do you count so that each pair counts once?",
    "What does the number after NV mean?",
    NULL
};

static const exercise ch04_predict_topology = {
    .id = "ch04-predict-topology",
    .chapter = 4,
    .kind = EX_PREDICT,
    .title = "Read a GPU topology matrix",
    .task = "From a topo -m matrix, count the PCIe-only pairs or the NVLink links of a pair.",
    .hints = topology_hints,
    .draw = draw_topology,
};

static void draw_time(uint64_t seed, ex_question *q)
{
    mlsys_rng g;
    mlsys_rng_seed(&g, seed);
    static const int ns[] = {2, 4, 8, 16};
    int n = ns[ex_draw_int(&g, 0, 3)];
    int gb = (int)ex_draw_int(&g, 1, 16);
    static const int bws[] = {12, 16, 25, 50, 100, 200, 300, 450};
    int bw = bws[ex_draw_int(&g, 0, 7)];
    double f = 2.0 * (n - 1) / n;
    double t_ms = (double)gb * 1e9 * f / (bw * 1e9) * 1e3;
    snprintf(q->text, sizeof q->text,
             "An all_reduce of %d GB (%d x 10^9 bytes) on N = %d GPUs reaches a bus bandwidth "
             "busbw = %d GB/s (busbw = algbw x 2(N-1)/N, algbw = size / time). How long does "
             "it take, in milliseconds?", gb, gb, n, bw);
    q->answer = t_ms;
    q->rel_tol = 0.02;
    snprintf(q->unit, sizeof q->unit, "ms");
    snprintf(q->explain, sizeof q->explain,
             "algbw = busbw / (2(N-1)/N) = %d / %.4g = %.4g GB/s, so time = size / algbw = "
             "%d GB / %.4g GB/s = %.4g ms.", bw, f, bw / f, gb, bw / f, t_ms);
}

static const char *const time_hints[] = {
    "From busbw, how do you get back to algbw for an all_reduce on N ranks?",
    "algbw is size over time: what is the time, once the units (GB/s, ms) agree?",
    NULL
};

static const exercise ch04_predict_time = {
    .id = "ch04-predict-time",
    .chapter = 4,
    .kind = EX_PREDICT,
    .title = "An all-reduce's time from its bus bandwidth",
    .task = "Predict how long an all_reduce takes from its size, N and busbw.",
    .hints = time_hints,
    .draw = draw_time,
};

static void draw_speedup(uint64_t seed, ex_question *q)
{
    mlsys_rng g;
    mlsys_rng_seed(&g, seed);
    double tn = (double)ex_draw_int(&g, 15, 60) / 10.0;           /* ms */
    double tp = tn * (double)ex_draw_int(&g, 80, 400) / 10.0;
    tp = round(tp * 10.0) / 10.0;
    snprintf(q->text, sizeof q->text,
             "A 1 GB all_reduce on 8 GPUs takes %.1f ms when the GPUs talk over PCIe and %.1f ms "
             "over NVLink. What is NVLink's speed-up?", tp, tn);
    q->answer = tp / tn;
    q->rel_tol = 0.01;
    snprintf(q->unit, sizeof q->unit, "x");
    snprintf(q->explain, sizeof q->explain,
             "speed-up = t_PCIe / t_NVLink = %.1f / %.1f = %.2f. The tutorial's figures: about "
             "16 GB/s effective over PCIe 4.0 against about 450 GB/s over NVLink 4.0, a gap of "
             "about 28x; the topology decides which you get.", tp, tn, tp / tn);
}

static const char *const speedup_hints[] = {
    "Is a speed-up the ratio of times or of bandwidths, and which way up?",
    NULL
};

static const exercise ch04_predict_speedup = {
    .id = "ch04-predict-speedup",
    .chapter = 4,
    .kind = EX_PREDICT,
    .title = "NVLink against PCIe",
    .task = "Work out NVLink's speed-up from two measured all_reduce times.",
    .hints = speedup_hints,
    .draw = draw_speedup,
};

const exercise *const ch04_exercises[] = {
    &ch04_predict_steps,
    &ch04_predict_busbw,
    &ch04_crossover,
    &ch04_predict_crossover,
    &ch04_predict_topology,
    &ch04_topology,
    &ch04_predict_time,
    &ch04_predict_speedup,
    NULL
};
