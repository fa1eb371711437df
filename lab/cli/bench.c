/* bench.c - `mlsys-lab bench`: an nccl-tests-style benchmark of our collectives over the
 * measuring engine in core/bench (bench_measure: warm-up, barrier, n calls, max over ranks, a
 * check outside the loop). The runner starts N ranks (fork; under mpirun with --backend mpi,
 * where "native" is MPI's own) and rank 0 prints the table (time, algbw, busbw, #wrong) with
 * the busbw factor and the algorithm that ran and why. --memcpy: the one-core ceiling. */
#include "../../core/bench/bench.h"
#include "cli.h"
#include "../backend/mpirun.h"
#include "../job/runner.h"
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define BENCH_MAX_SIZES 4096
#define BENCH_MAX_RANKS 64
#define BENCH_EXIT_WRONG 3          /* rank 0's status when some results were wrong */

/* What the runner parsed; the ranks inherit it through fork. */
typedef struct bench_cfg {
    mlsys_coll coll;
    uint64_t minbytes, maxbytes, stepbytes;
    long stepfactor;
    long iters, warmup;
    int check;
    mlsys_op op;
    mlsys_dtype dt;
    int root;
    const char *json_path;
    int world_size;
    const char *algo;            /* "auto", "all" or a name of the collective's table */
    double timeout_s;
    double alpha_us, beta_gbs;   /* cost model, both > 0 when on */
    int memcpy_mode;
    int mpi;                     /* --backend mpi: the ranks run under mpirun */
    int mpi_rank;                /* this process is one of those ranks (hidden --mpi-rank) */
    int size_list;               /* sizes came from --sizes */
    uint64_t *sizes;             /* the requested sizes S (bytes), in order */
    int nsizes;
    const char *algos[32];       /* the tables to print: one algorithm name each */
    int nalgos;
} bench_cfg;

/* One measured placement (out-of-place or in-place) of one size. */
typedef struct bench_cell {
    double time_us, algbw, busbw;
    uint64_t wrong;
} bench_cell;

typedef struct bench_row {
    uint64_t bytes;              /* S actually used: count * esize (* n for per-rank counts) */
    size_t count;                /* the count argument of the call */
    bench_cell cell[2];          /* [0] out-of-place, [1] in-place */
    const char *algo;            /* what ran (mlsys_last_algo), after any fallback */
    const char *decided;         /* what mlsys_algo_decide names for this size */
    const char *why;
    double model_us;             /* alpha-beta prediction, < 0 when unknown */
} bench_row;

/* ---- rank 0's output ---- */

static void print_header(const bench_cfg *g, mlsys_comm *c)
{
    int n = mlsys_size(c);
    char lo[32], hi[32];
    mlsys_format_size(g->sizes[0], lo, sizeof lo);
    mlsys_format_size(g->sizes[g->nsizes - 1], hi, sizeof hi);   /* first and last, in order */
    printf("# mlsys-lab bench: %s on %d ranks (%s backend), %s, ", mlsys_coll_name(g->coll),
           n, mlsys_backend_name(c), mlsys_dtype_name(g->dt));
    if (bench_is_reduction(g->coll))
        printf("op %s, ", mlsys_op_name(g->op));
    if (bench_is_rooted(g->coll))
        printf("root %d, ", g->root);
    printf("algorithm %s\n", g->algo);
    uint64_t lo_b = g->sizes[0], hi_b = g->sizes[0];
    for (int i = 1; i < g->nsizes; i++) {
        lo_b = g->sizes[i] < lo_b ? g->sizes[i] : lo_b;
        hi_b = g->sizes[i] > hi_b ? g->sizes[i] : hi_b;
    }
    if (!g->size_list)
        hi_b = g->maxbytes;     /* as requested, like nccl-tests, even when the sweep stops short */
    printf("# minBytes %" PRIu64 " maxBytes %" PRIu64 " ", lo_b, hi_b);
    if (g->size_list)
        printf("step: list");
    else if (g->stepbytes)
        printf("step: %" PRIu64 "(bytes)", g->stepbytes);
    else
        printf("step: %ld(factor)", g->stepfactor);
    printf(" warmup iters: %ld iters: %ld validation: %d\n", g->warmup, g->iters, g->check);
    printf("# sizes %s .. %s; time = max over ranks of each rank's average over %ld calls "
           "(no barrier inside the timed loop)\n", lo, hi, g->iters);
    if (bench_per_rank_count(g->coll))
        printf("# size = the whole buffer of %d blocks; count = size / element size, each rank "
               "passes count/%d\n", n, n);
    if (g->coll == MLSYS_COLL_BROADCAST)
        printf("# broadcast has one buffer: both column groups time the same in-place call\n");
    printf("#\n# Using ranks\n");
}

static void print_table_head(const bench_cfg *g)
{
    int model = g->alpha_us > 0;
    /* the two column groups are 36 characters wide each and start at column 52 */
    printf("#\n#%51s%12s%-12s%12s%14s%s\n", "", "", "out-of-place", "", "", "in-place");
    printf("#%11s  %12s  %8s  %6s  %6s  %8s  %7s  %7s  %6s  %8s  %7s  %7s  %6s%s%s  %s\n",
           "size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong",
           "time", "algbw", "busbw", "#wrong", model ? "    " : "", model ? "model" : "",
           "algo");
    printf("#%11s  %12s  %8s  %6s  %6s  %8s  %7s  %7s  %6s  %8s  %7s  %7s%s%s\n",
           "(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "",
           "(us)", "(GB/s)", "(GB/s)", model ? "            " : "", model ? "(us)" : "");
}

static void print_row(const bench_cfg *g, const bench_row *w)
{
    size_t es = mlsys_dtype_size(g->dt);
    printf("%12" PRIu64 "  %12" PRIu64 "  %8s  %6s  %6d", w->bytes, w->bytes / es,
           mlsys_dtype_name(g->dt), bench_is_reduction(g->coll) ? mlsys_op_name(g->op) : "none",
           bench_is_rooted(g->coll) ? g->root : -1);
    for (int k = 0; k < 2; k++) {
        const bench_cell *x = &w->cell[k];
        printf("  %8.2f  %7.2f  %7.2f  ", x->time_us, x->algbw, x->busbw);
        if (g->check)
            printf("%6" PRIu64, x->wrong);
        else
            printf("%6s", "N/A");
    }
    if (g->alpha_us > 0) {
        if (w->model_us >= 0)
            printf("  %7.2f", w->model_us);
        else
            printf("  %7s", "-");
    }
    printf("  %s\n", w->algo);
    fflush(stdout);
}

/* The footer of one table: wrong values, average busbw, the factor, the algorithm and why. */
static uint64_t print_footer(const bench_cfg *g, const bench_row *rows, int n, const char *algo)
{
    uint64_t wrong = 0;
    double sum = 0;
    int cnt = 0;
    for (int i = 0; i < g->nsizes; i++) {
        if (!rows[i].count)
            continue;
        for (int k = 0; k < 2; k++) {
            wrong += rows[i].cell[k].wrong;
            sum += rows[i].cell[k].busbw;
            cnt++;
        }
    }
    if (g->check)
        printf("# Out of bounds values : %" PRIu64 " %s\n", wrong, wrong ? "FAILED" : "OK");
    printf("# Avg bus bandwidth    : %.3f\n", cnt ? sum / cnt : 0.0);
    printf("# busbw = algbw x %s = algbw x %.3f for %s on %d ranks: %s\n",
           bench_busbw_formula(g->coll), bench_busbw_factor(g->coll, n),
           mlsys_coll_name(g->coll), n, bench_busbw_reason(g->coll));
    /* group consecutive sizes that ran the same algorithm for the same reason */
    for (int i = 0; i < g->nsizes;) {
        if (!rows[i].count) {
            i++;
            continue;
        }
        int j = i;
        while (j + 1 < g->nsizes && rows[j + 1].count && !strcmp(rows[j + 1].algo, rows[i].algo) &&
               !strcmp(rows[j + 1].why, rows[i].why))
            j++;
        char lo[32], hi[32];
        mlsys_format_size(rows[i].bytes, lo, sizeof lo);
        mlsys_format_size(rows[j].bytes, hi, sizeof hi);
        printf("# algorithm %s for %s%s%s: ", rows[i].algo, lo, i == j ? "" : " .. ",
               i == j ? "" : hi);
        if (strcmp(algo, "auto"))
            printf("forced with --algo %s", algo);
        else
            printf("%s", rows[i].why);
        if (strcmp(rows[i].decided, rows[i].algo))
            printf(" (%s does not fit %d ranks and this count: the dispatcher fell back to %s; "
                   "MLSYS_DEBUG=1 says why)", rows[i].decided, n, rows[i].algo);
        printf("\n");
        i = j + 1;
    }
    if (g->alpha_us > 0)
        printf("# model: alpha-beta prediction of the algorithm that ran, alpha %.3g us per "
               "message, beta %.3g GB/s per link ('-': no model for it)\n", g->alpha_us,
               g->beta_gbs);
    printf("#\n");
    return wrong;
}

static void json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (; s && *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\')
            fprintf(f, "\\%c", ch);
        else if (ch < 0x20)
            fprintf(f, "\\u%04x", ch);
        else
            fputc(ch, f);
    }
    fputc('"', f);
}

static void json_cell(FILE *f, const char *name, const bench_cell *x, int check)
{
    fprintf(f, "\"%s\": {\"time_us\": %.6g, \"algbw_gbs\": %.6g, \"busbw_gbs\": %.6g, ", name,
            x->time_us, x->algbw, x->busbw);
    if (check)
        fprintf(f, "\"wrong\": %" PRIu64 "}", x->wrong);
    else
        fprintf(f, "\"wrong\": null}");
}

static int write_json(const bench_cfg *g, mlsys_comm *c, const bench_row *all_rows)
{
    size_t esize = mlsys_dtype_size(g->dt);
    FILE *f = fopen(g->json_path, "w");
    if (!f) {
        fprintf(stderr, "mlsys-lab bench: cannot write %s\n", g->json_path);
        return 1;
    }
    fprintf(f, "{\n  \"benchmark\": \"mlsys-lab bench\",\n  \"collective\": ");
    json_str(f, mlsys_coll_name(g->coll));
    fprintf(f, ",\n  \"world_size\": %d,\n  \"backend\": ", mlsys_size(c));
    json_str(f, mlsys_backend_name(c));
    fprintf(f, ",\n  \"datatype\": ");
    json_str(f, mlsys_dtype_name(g->dt));
    fprintf(f, ",\n  \"op\": ");
    json_str(f, bench_is_reduction(g->coll) ? mlsys_op_name(g->op) : "none");
    fprintf(f, ",\n  \"root\": %d,\n  \"iters\": %ld,\n  \"warmup_iters\": %ld,\n"
            "  \"check\": %d,\n  \"busbw_formula\": ", bench_is_rooted(g->coll) ? g->root : -1,
            g->iters, g->warmup, g->check);
    json_str(f, bench_busbw_formula(g->coll));
    fprintf(f, ",\n  \"busbw_factor\": %.6g,\n  \"tables\": [",
            bench_busbw_factor(g->coll, mlsys_size(c)));
    for (int t = 0; t < g->nalgos; t++) {
        const bench_row *rows = all_rows + (size_t)t * (size_t)g->nsizes;
        double sum = 0;
        int cnt = 0;
        fprintf(f, "%s\n    {\"algo\": ", t ? "," : "");
        json_str(f, g->algos[t]);
        fprintf(f, ", \"rows\": [");
        int first = 1;
        for (int i = 0; i < g->nsizes; i++) {
            const bench_row *w = &rows[i];
            if (!w->count)
                continue;
            fprintf(f, "%s\n      {\"size\": %" PRIu64 ", \"count\": %" PRIu64 ", \"algo\": ",
                    first ? "" : ",", w->bytes, w->bytes / esize);
            first = 0;
            json_str(f, w->algo);
            fprintf(f, ", \"why\": ");
            json_str(f, w->why);
            fprintf(f, ", ");
            json_cell(f, "out_of_place", &w->cell[0], g->check);
            fprintf(f, ", ");
            json_cell(f, "in_place", &w->cell[1], g->check);
            if (g->alpha_us > 0 && w->model_us >= 0)
                fprintf(f, ", \"model_us\": %.6g", w->model_us);
            fprintf(f, "}");
            sum += w->cell[0].busbw + w->cell[1].busbw;
            cnt += 2;
        }
        fprintf(f, "\n    ], \"avg_busbw_gbs\": %.6g}", cnt ? sum / cnt : 0.0);
    }
    fprintf(f, "\n  ]\n}\n");
    return fclose(f) == 0 ? 0 : 1;
}

/* ---- the rank's main ---- */

static int bench_rank_main(mlsys_comm *c, void *arg)
{
    const bench_cfg *g = arg;
    int me = mlsys_rank(c), n = mlsys_size(c);
    size_t es = mlsys_dtype_size(g->dt);
    bench_call k = {
        .coll = g->coll, .dt = g->dt, .op = g->op, .root = g->root, .iters = g->iters,
        .warmup = g->warmup, .check = g->check, .per_call = 0, .who = "mlsys-lab bench",
    };
    uint64_t biggest = 0;
    for (int i = 0; i < g->nsizes; i++)
        biggest = g->sizes[i] > biggest ? g->sizes[i] : biggest;
    bench_ctx *b = bench_ctx_new(c, &k, biggest);
    bench_row *all_rows = NULL;
    if (me == 0) {
        all_rows = mlsys_xcalloc((size_t)g->nalgos * (size_t)g->nsizes, sizeof *all_rows);
        print_header(g, c);
    }
    char host[64] = "?";
    gethostname(host, sizeof host - 1);
    int rc = mlsys_print_ordered(c, "#  Rank %2d Pid %6d on %10s backend %s\n", me,
                                 (int)getpid(), host, mlsys_backend_name(c));
    if (rc)
        fprintf(stderr, "mlsys-lab bench: rank %d: the rank list failed (%d): %s\n", me, rc,
                mlsys_errmsg(c));
    uint64_t wrong = 0;
    for (int t = 0; t < g->nalgos && !rc; t++) {
        const char *algo = g->algos[t];
        if ((rc = mlsys_set_algo(c, g->coll, algo))) {
            fprintf(stderr, "mlsys-lab bench: rank %d: set algorithm %s failed (%d): %s\n", me,
                    algo, rc, mlsys_errmsg(c));
            break;
        }
        bench_row *rows = all_rows ? all_rows + (size_t)t * (size_t)g->nsizes : NULL;
        if (me == 0) {
            if (g->nalgos > 1 || strcmp(algo, "auto"))
                printf("#\n# algorithm: %s\n", algo);
            print_table_head(g);
        }
        for (int i = 0; i < g->nsizes && !rc; i++) {
            bench_row row;
            memset(&row, 0, sizeof row);
            row.count = bench_count(&k, g->sizes[i], n, &row.bytes);
            if (!row.count) {
                if (me == 0)
                    printf("# %" PRIu64 " B skipped: less than one %s per rank\n", g->sizes[i],
                           mlsys_dtype_name(g->dt));
                if (rows)
                    rows[i] = row;
                continue;
            }
            const char *ran[2] = {"?", "?"};
            for (int p = 0; p < 2 && !rc; p++) {
                bench_result res;
                rc = bench_measure(b, g->sizes[i], p, algo, &res);
                row.cell[p] = (bench_cell){res.time_us, res.algbw, res.busbw, res.wrong};
                ran[p] = res.algo;
            }
            if (rc)
                break;
            row.decided = mlsys_algo_decide(c, g->coll, row.count * es, &row.why);
            row.algo = ran[0];
            if (!row.decided)
                row.decided = row.algo;
            if (!row.why)
                row.why = "";
            if (strcmp(ran[0], ran[1]) && me == 0)
                printf("# %" PRIu64 " B: in-place ran %s\n", row.bytes, ran[1]);
            row.model_us = g->alpha_us > 0 ? bench_model_us(g->coll, row.algo,
                                                            (double)row.bytes, n, g->alpha_us,
                                                            g->beta_gbs)
                                           : -1;
            if (me == 0) {
                rows[i] = row;
                print_row(g, &row);
            }
        }
        if (!rc && me == 0)
            wrong += print_footer(g, rows, n, algo);
    }
    if (!rc && me == 0) {
        printf("# Collective test concluded: %s\n", mlsys_coll_name(g->coll));
        fflush(stdout);
        if (g->json_path)
            rc = write_json(g, c, all_rows);
    }
    bench_ctx_free(b);
    free(all_rows);
    if (rc)
        return 1;
    return wrong ? BENCH_EXIT_WRONG : 0;
}

/* ---- the memcpy ceiling: one core, one buffer to another ---- */

static int bench_memcpy(const bench_cfg *g)
{
    size_t n = (size_t)g->maxbytes;
    unsigned char *src = mlsys_alloc_aligned(n), *dst = mlsys_alloc_aligned(n);
    memset(src, 0x5a, n);
    memset(dst, 0, n);
    for (long i = 0; i < g->warmup; i++)
        memcpy(dst, src, n);
    double best = 1e300;
    uint64_t t0 = mlsys_now_ns();
    for (long i = 0; i < g->iters; i++) {
        uint64_t a = mlsys_now_ns();
        memcpy(dst, src, n);
        double dt = (double)(mlsys_now_ns() - a) / 1e3;
        best = dt < best ? dt : best;
        src[(size_t)i % n] ^= dst[n - 1 - (size_t)i % n];   /* keeps every copy observable */
    }
    double avg = (double)(mlsys_now_ns() - t0) / 1e3 / (double)g->iters;
    char sz[32];
    mlsys_format_size(n, sz, sizeof sz);
    printf("# memcpy ceiling: one core copies %s in %.2f us on average (best %.2f us) over %ld "
           "copies after %ld warm-up: %.2f GB/s (best %.2f)\n", sz, avg, best, g->iters,
           g->warmup, (double)n / (avg * 1e3), (double)n / (best * 1e3));
    printf("memcpy bytes=%zu time_us=%.2f gbs=%.3f best_gbs=%.3f\n", n, avg,
           (double)n / (avg * 1e3), (double)n / (best * 1e3));
    mlsys_free_aligned(src, n);
    mlsys_free_aligned(dst, n);
    return 0;
}

/* ---- flags ---- */

static const lab_flag bench_flags[] = {
    {"minbytes", 0, FLAG_SIZE, "8", NULL, 1, FLAG_NO_MAX,
     "smallest size (nccl-tests' -b)"},
    {"maxbytes", 'e', FLAG_SIZE, "64M", NULL, 1, FLAG_NO_MAX, "largest size"},
    {"stepfactor", 'f', FLAG_INT, "2", NULL, 2, 1024, "multiply the size by N each step"},
    {"stepbytes", 0, FLAG_SIZE, NULL, NULL, 1, FLAG_NO_MAX,
     "add SIZE each step instead (nccl-tests' -i)"},
    {"sizes", 0, FLAG_STR, NULL, NULL, 0, 0, "exact sizes instead of a sweep: 1024,1M,100M"},
    {"iters", 'n', FLAG_INT, "20", NULL, 1, 100000000, "timed calls per size"},
    {"warmup_iters", 0, FLAG_INT, "5", NULL, 0, 100000000,
     "untimed calls before (nccl-tests' -w)"},
    {"check", 'c', FLAG_INT, "1", NULL, 0, 1,
     "check every result against the known inputs"},
    {"op", 'o', FLAG_CHOICE, "sum", "sum|prod|min|max|avg|product", 0, 0,
     "the reduction's operator"},
    {"datatype", 0, FLAG_CHOICE, "float",
     "float|double|int32|int64|f32|float32|f64|float64|i32|int|i64", 0, 0,
     "element type (nccl-tests' -d)"},
    {"root", 'r', FLAG_INT, "0", NULL, 0, BENCH_MAX_RANKS - 1,
     "root rank of broadcast, reduce, gather, scatter"},
    {"output_file", 'J', FLAG_STR, NULL, NULL, 0, 0, "also write the results as JSON"},
    {"world-size", 'w', FLAG_INT, "2", NULL, 1, BENCH_MAX_RANKS, "ranks"},
    {"algo", 0, FLAG_STR, "auto", NULL, 0, 0,
     "an algorithm of the collective, auto or all (mpi: native is MPI's own)"},
    {"timeout", 0, FLAG_DOUBLE, "30", NULL, 0, 86400,
     "seconds a blocked send/recv waits before 'deadlock suspected'"},
    {"alpha", 0, FLAG_DOUBLE, NULL, NULL, 0, 100000000,
     "cost model: latency per message in us (with --beta)"},
    {"beta", 0, FLAG_DOUBLE, NULL, NULL, 0, 100000000,
     "cost model: bandwidth of one link in GB/s (with --alpha)"},
    {"memcpy", 0, FLAG_BOOL, NULL, NULL, 0, 0,
     "measure the one-core memcpy ceiling at --maxbytes instead"},
    {"backend", 'b', FLAG_CHOICE, "shm", "shm|gloo|mpi", 0, 0,
     "shm: forked ranks, our transport; mpi: under mpirun (--algo native is MPI's)"},
    {"mpi-rank", 0, FLAG_BOOL, NULL, NULL, 0, 0, NULL},     /* internal: one rank under mpirun */
    {NULL, 0, 0, NULL, NULL, 0, 0, NULL}
};

const lab_command bench_command = {
    .name = "bench",
    .args = "[COLLECTIVE]",
    .min_pos = 0,
    .max_pos = 1,
    .summary = "An nccl-tests-style benchmark of the runtime's collectives on N local ranks.\n"
               "COLLECTIVE: all_reduce (default), all_gather, reduce_scatter, broadcast, "
               "reduce,\n            all_to_all, gather, scatter",
    .flags = bench_flags,
    .notes = "algbw = size / time; busbw = algbw x factor: 2(n-1)/n all_reduce; (n-1)/n\n"
             "all_gather, reduce_scatter, all_to_all, gather, scatter; 1 broadcast, reduce.\n"
             "For the per-rank collectives the size is the whole buffer of n blocks.\n"
             "The letters nccl-tests gives -b, -w, -d and -i mean --backend, --world-size,\n"
             "--data-size and --iterations in every command of the lab: use --minbytes,\n"
             "--warmup_iters, --datatype and --stepbytes.\n",
};

/* One line on stderr and the usage status. */
static int usage_error(const char *fmt, const char *a, const char *b)
{
    fprintf(stderr, "mlsys-lab bench: ");
    fprintf(stderr, fmt, a, b ? b : "");
    fprintf(stderr, " (see mlsys-lab bench --help)\n");
    return 2;
}

static int parse_size_list(const char *v, bench_cfg *g)
{
    char *copy = mlsys_xstrdup(v), *save = NULL;
    int rc = 0;
    g->nsizes = 0;
    for (char *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        uint64_t s;
        if (mlsys_parse_size(t, &s) != 0 || s == 0) {
            rc = usage_error("--sizes: \"%s\" is not a size above 0 (use 8, 64K, 64M)", t, NULL);
            break;
        }
        if (g->nsizes == BENCH_MAX_SIZES) {
            rc = usage_error("--sizes: more than %s sizes", "4096", NULL);
            break;
        }
        g->sizes[g->nsizes++] = s;
    }
    if (!rc && g->nsizes == 0)
        rc = usage_error("--sizes: \"%s\" names no size", v, NULL);
    free(copy);
    return rc;
}

/* Parse argv into g (the table above does the flags). Returns 0, 2 for a usage error, or 1
 * after --help. */
static int parse_args(int argc, char **argv, bench_cfg *g)
{
    lab_args a;
    int rc = lab_command_args(&bench_command, argc, argv, &a);
    if (rc >= 0)
        return rc == 0 ? 1 : rc;
    if (a.npos == 1 && (mlsys_coll_parse(a.pos[0], &g->coll) != 0 ||
                        g->coll == MLSYS_COLL_BARRIER)) {
        rc = usage_error("unknown collective \"%s\": use all_reduce, all_gather, "
                         "reduce_scatter, broadcast, reduce, all_to_all, gather, scatter%s",
                         a.pos[0], NULL);
        goto out;
    }
    g->minbytes = lab_arg_size(&a, "minbytes");
    g->maxbytes = lab_arg_size(&a, "maxbytes");
    g->stepfactor = lab_arg_int(&a, "stepfactor");
    g->stepbytes = lab_arg_given(&a, "stepbytes") && !lab_arg_given(&a, "stepfactor")
                       ? lab_arg_size(&a, "stepbytes") : 0;
    g->iters = lab_arg_int(&a, "iters");
    g->warmup = lab_arg_int(&a, "warmup_iters");
    g->check = (int)lab_arg_int(&a, "check");
    mlsys_op_parse(lab_arg_str(&a, "op"), &g->op);          /* the choices are its words */
    mlsys_dtype_parse(lab_arg_str(&a, "datatype"), &g->dt);
    g->root = (int)lab_arg_int(&a, "root");
    g->json_path = lab_arg_text(&a, "output_file");
    g->world_size = (int)lab_arg_int(&a, "world-size");
    g->algo = lab_arg_text(&a, "algo");
    g->timeout_s = lab_arg_double(&a, "timeout");
    g->alpha_us = lab_arg_double(&a, "alpha");
    g->beta_gbs = lab_arg_double(&a, "beta");
    g->memcpy_mode = lab_arg_bool(&a, "memcpy");
    g->mpi = !strcmp(lab_arg_str(&a, "backend"), "mpi");
    g->mpi_rank = lab_arg_bool(&a, "mpi-rank");
    rc = 0;
    if (lab_arg_given(&a, "sizes")) {
        if (lab_arg_given(&a, "minbytes") || lab_arg_given(&a, "maxbytes")) {
            rc = usage_error("--sizes replaces --minbytes/--maxbytes: give one or the other%s",
                             "", NULL);
            goto out;
        }
        g->size_list = 1;
        rc = parse_size_list(lab_arg_str(&a, "sizes"), g);
    }
out:
    lab_args_free(&a);        /* g's texts point into argv (lab_arg_text) */
    return rc;
}

/* The sweep: min, min*f, ... <= max (or min, min+step, ...), as nccl-tests. */
static int make_sweep(bench_cfg *g)
{
    if (g->minbytes > g->maxbytes) {
        char lo[32], hi[32];
        snprintf(lo, sizeof lo, "%" PRIu64, g->minbytes);
        snprintf(hi, sizeof hi, "%" PRIu64, g->maxbytes);
        return usage_error("--minbytes (%s B) is larger than -e/--maxbytes (%s B)", lo, hi);
    }
    g->nsizes = 0;
    for (uint64_t s = g->minbytes; s <= g->maxbytes;) {
        if (g->nsizes == BENCH_MAX_SIZES)
            return usage_error("more than %s sizes: use a larger step", "4096", NULL);
        g->sizes[g->nsizes++] = s;
        uint64_t next = g->stepbytes ? s + g->stepbytes : s * (uint64_t)g->stepfactor;
        if (next <= s)
            break;
        s = next;
    }
    return 0;
}

/* Check what needs the rank count and the collective: root, algorithm, memory. */
static int validate(bench_cfg *g)
{
    if (g->root >= g->world_size) {
        char r[16], n[16];
        snprintf(r, sizeof r, "%d", g->root);
        snprintf(n, sizeof n, "%d", g->world_size);
        return usage_error("--root %s is not a rank of a %s-rank job", r, n);
    }
    if ((g->alpha_us > 0) != (g->beta_gbs > 0))
        return usage_error("--alpha and --beta go together%s", "", NULL);
    const char *const *names = mlsys_algo_names(g->coll);
    g->nalgos = 0;
    if (!strcmp(g->algo, "native") && !g->mpi)
        return usage_error("--algo native is the backend's own collective: it needs --backend "
                           "mpi (shm has only ours)%s", "", NULL);
    if (!strcmp(g->algo, "all")) {
        for (int i = 0; names && names[i] && g->nalgos < 31; i++)
            g->algos[g->nalgos++] = names[i];
        if (g->mpi)
            g->algos[g->nalgos++] = "native";      /* MPI's own, last */
    } else {
        int ok = !strcmp(g->algo, "auto") || !strcmp(g->algo, "native");
        for (int i = 0; !ok && names && names[i]; i++)
            ok = !strcmp(names[i], g->algo);
        if (!ok) {
            char list[256] = "";
            for (int i = 0; names && names[i]; i++) {
                strncat(list, names[i], sizeof list - strlen(list) - 1);
                strncat(list, ", ", sizeof list - strlen(list) - 1);
            }
            strncat(list, g->mpi ? "native, auto, all" : "auto, all",
                    sizeof list - strlen(list) - 1);
            fprintf(stderr, "mlsys-lab bench: --algo: %s has no algorithm \"%s\": use %s\n",
                    mlsys_coll_name(g->coll), g->algo, list);
            return 2;
        }
        g->algos[g->nalgos++] = g->algo;
    }
    if (g->nalgos == 0)
        return usage_error("--algo all: %s has no algorithms%s", mlsys_coll_name(g->coll), NULL);
    uint64_t biggest = 0;
    for (int i = 0; i < g->nsizes; i++)
        biggest = g->sizes[i] > biggest ? g->sizes[i] : biggest;
    long pages = sysconf(_SC_PHYS_PAGES), psize = sysconf(_SC_PAGESIZE);
    double need = 2.0 * (double)biggest * g->world_size;
    if (pages > 0 && psize > 0 && need > 0.8 * (double)pages * (double)psize) {
        char a[32], b[32];
        snprintf(a, sizeof a, "%.1f GiB", need / (1u << 30));
        snprintf(b, sizeof b, "%.1f GiB", (double)pages * (double)psize / (1u << 30));
        return usage_error("the buffers need %s (2 x the largest size x ranks) and the machine "
                           "has %s: use a smaller -e", a, b);
    }
    if (g->json_path && !g->mpi_rank) {
        FILE *f = fopen(g->json_path, "w");
        if (!f)
            return usage_error("-J/--output_file: cannot write \"%s\"%s", g->json_path, NULL);
        fclose(f);
    }
    return 0;
}

/* One rank of a --backend mpi job: join the job mpirun started (the MPI plugin) and run. */
static int bench_mpi_rank(bench_cfg *g)
{
    mlsys_comm *c = mlsys_init();
    if (!c)
        return 1;
    setvbuf(stdout, NULL, _IOLBF, 0);
    int rc = bench_rank_main(c, g);
    fflush(stdout);
    mlsys_finalize(c);
    return rc;
}

/* --backend mpi: run `mlsys-lab bench ARGS --mpi-rank` under mpirun (lab/mpirun.h) and say
 * how it ended. Exit status as bench_main's. */
static int bench_run_mpi(const bench_cfg *g, int argc, char **argv)
{
    char path[PATH_MAX], exe[PATH_MAX], err[512], why[300];
    struct stat sb;
    if (!mpirun_find(path, sizeof path)) {
        fprintf(stderr, "mlsys-lab bench: --backend mpi: mpirun is not on PATH (install "
                "openmpi-bin and libopenmpi-dev, or use --backend shm)\n");
        return 2;
    }
    if (stat(mpirun_plugin_path(path, sizeof path), &sb) != 0) {
        fprintf(stderr, "mlsys-lab bench: --backend mpi: the MPI plugin %s is missing (build it "
                "with `make`, which needs mpicc from libopenmpi-dev)\n", path);
        return 2;
    }
    ssize_t k = readlink("/proc/self/exe", exe, sizeof exe - 1);
    exe[k < 0 ? 0 : k] = 0;
    char **args = mlsys_xcalloc((size_t)argc + 2, sizeof(char *));
    args[0] = "bench";
    for (int i = 1; i < argc; i++)
        args[i] = argv[i];
    args[argc] = "--mpi-rank";
    mpirun_opts o = {
        .world_size = g->world_size,
        .timeout_ms = (int)(g->timeout_s * 1000 + 0.5),
    };
    mlsys_job_install_signal_stop();
    mpirun_job *j = mpirun_start(&o, exe, args, err, sizeof err);
    free(args);
    if (!j) {
        fprintf(stderr, "mlsys-lab bench: %s\n", err);
        return 1;
    }
    int rc = mpirun_wait(j, NULL, -1, why, sizeof why);
    if (rc) {
        int only_wrong = mpirun_failed_rank(j) == 0 &&
                         mpirun_exit_status(j) == BENCH_EXIT_WRONG;
        if (!only_wrong)
            fprintf(stderr, "mlsys-lab bench: %s\n", why);
        rc = mlsys_job_stop_requested() ? 130 : 1;    /* Ctrl-C: 130, as every command */
    }
    mpirun_free(j);
    return rc;
}

int bench_main(int argc, char **argv)
{
    bench_cfg g;
    memset(&g, 0, sizeof g);
    g.coll = MLSYS_COLL_ALLREDUCE;      /* the other defaults are bench_flags' */
    g.sizes = mlsys_xcalloc(BENCH_MAX_SIZES, sizeof *g.sizes);
    int rc = parse_args(argc, argv, &g);
    if (rc == 1) {
        rc = 0;
        goto out;
    }
    if (rc)
        goto out;
    if (g.memcpy_mode) {
        rc = bench_memcpy(&g);
        goto out;
    }
    if (!g.size_list && (rc = make_sweep(&g)))
        goto out;
    if ((rc = validate(&g)))
        goto out;
    if (g.mpi_rank) {
        rc = bench_mpi_rank(&g);
        goto out;
    }
    if (g.mpi) {
        rc = bench_run_mpi(&g, argc, argv);
        goto out;
    }

    mlsys_launch_opts o;
    memset(&o, 0, sizeof o);
    o.world_size = g.world_size;
    o.timeout_ms = (int)(g.timeout_s * 1000 + 0.5);
    o.backend = "shm";
    char why[256] = "";
    mlsys_job_install_signal_stop();
    runner_spec spec = {.fn = bench_rank_main, .arg = &g};
    mlsys_job *j = runner_start(&o, &spec, why, sizeof why);
    if (!j) {
        fprintf(stderr, "mlsys-lab bench: %s\n", why);
        rc = 1;
        goto out;
    }
    rc = mlsys_job_wait(j, NULL, -1, why, sizeof why);
    if (rc) {
        const mlsys_rank_status *s0 = mlsys_job_status(j, 0);
        int only_wrong = mlsys_job_failed_rank(j) == 0 && s0->exited &&
                         s0->code == BENCH_EXIT_WRONG;
        if (!only_wrong)
            fprintf(stderr, "mlsys-lab bench: %s\n", why);
        rc = mlsys_job_stop_requested() ? 130 : 1;    /* Ctrl-C: 130, as every command */
    }
    mlsys_job_free(j);
out:
    free(g.sizes);
    return rc;
}
