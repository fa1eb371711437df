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

enum {
    OPT_MINBYTES, OPT_MAXBYTES, OPT_STEPFACTOR, OPT_STEPBYTES, OPT_ITERS, OPT_WARMUP, OPT_CHECK,
    OPT_OP, OPT_DATATYPE, OPT_ROOT, OPT_JSON, OPT_WORLD, OPT_ALGO, OPT_TIMEOUT, OPT_SIZES,
    OPT_ALPHA, OPT_BETA, OPT_MEMCPY, OPT_BACKEND, OPT_MPI_RANK, OPT_HELP
};

typedef struct bench_opt {
    const char *name;
    char short_name;
    int has_arg;
    int id;
    const char *meta;
    const char *help;
} bench_opt;

static const bench_opt opts[] = {
    {"minbytes", 'b', 1, OPT_MINBYTES, "SIZE", "smallest size, e.g. 8, 64K (default 8)"},
    {"maxbytes", 'e', 1, OPT_MAXBYTES, "SIZE", "largest size, e.g. 64M (default 64M)"},
    {"stepfactor", 'f', 1, OPT_STEPFACTOR, "N", "multiply the size by N each step (default 2)"},
    {"stepbytes", 'i', 1, OPT_STEPBYTES, "SIZE", "add SIZE each step instead"},
    {"sizes", 0, 1, OPT_SIZES, "LIST", "exact sizes instead of a sweep: 1024,1M,100M"},
    {"iters", 'n', 1, OPT_ITERS, "N", "timed calls per size (default 20)"},
    {"warmup_iters", 'w', 1, OPT_WARMUP, "N", "untimed calls before (default 5)"},
    {"check", 'c', 1, OPT_CHECK, "0|1", "check every result against the known inputs (default 1)"},
    {"op", 'o', 1, OPT_OP, "OP", "sum|prod|min|max|avg (default sum)"},
    {"datatype", 'd', 1, OPT_DATATYPE, "TYPE", "float|double|int32|int64 (default float)"},
    {"root", 'r', 1, OPT_ROOT, "N", "root rank of broadcast, reduce, gather, scatter (default 0)"},
    {"output_file", 'J', 1, OPT_JSON, "FILE", "also write the results as JSON"},
    {"world-size", 0, 1, OPT_WORLD, "N", "ranks (default 2)"},
    {"algo", 0, 1, OPT_ALGO, "NAME", "an algorithm of the collective, auto (default) or all"},
    {"timeout", 0, 1, OPT_TIMEOUT, "SECONDS", "p2p wait before 'deadlock suspected' (default 30)"},
    {"alpha", 0, 1, OPT_ALPHA, "US", "cost model: latency per message in us (with --beta)"},
    {"beta", 0, 1, OPT_BETA, "GB/s", "cost model: bandwidth of one link (with --alpha)"},
    {"memcpy", 0, 0, OPT_MEMCPY, NULL, "measure the one-core memcpy ceiling at -e SIZE instead"},
    {"backend", 0, 1, OPT_BACKEND, "NAME",
     "shm (default: forked ranks, our transport) or mpi (under mpirun; --algo native is MPI's)"},
    {"mpi-rank", 0, 0, OPT_MPI_RANK, NULL, NULL},    /* internal: one rank under mpirun */
    {"help", 'h', 0, OPT_HELP, NULL, "show this help"},
};
#define NOPTS ((int)(sizeof opts / sizeof opts[0]))

static void print_help(FILE *out)
{
    fprintf(out, "usage: mlsys-lab bench [COLLECTIVE] [flags]\n"
            "An nccl-tests-style benchmark of the runtime's collectives on N local ranks.\n"
            "COLLECTIVE: all_reduce (default), all_gather, reduce_scatter, broadcast, reduce,\n"
            "            all_to_all, gather, scatter\n\n");
    for (int i = 0; i < NOPTS; i++) {
        const bench_opt *o = &opts[i];
        char lhs[48];
        if (!o->help)
            continue;
        if (o->short_name)
            snprintf(lhs, sizeof lhs, "-%c, --%s%s%s", o->short_name, o->name,
                     o->meta ? " " : "", o->meta ? o->meta : "");
        else
            snprintf(lhs, sizeof lhs, "    --%s%s%s", o->name, o->meta ? " " : "",
                     o->meta ? o->meta : "");
        fprintf(out, "  %-30s %s\n", lhs, o->help);
    }
    fprintf(out, "\nalgbw = size / time; busbw = algbw x factor: 2(n-1)/n all_reduce; (n-1)/n\n"
            "all_gather, reduce_scatter, all_to_all, gather, scatter; 1 broadcast, reduce.\n"
            "For the per-rank collectives the size is the whole buffer of n blocks.\n");
}

/* One line on stderr and the usage status. */
static int usage_error(const char *fmt, const char *a, const char *b)
{
    fprintf(stderr, "mlsys-lab bench: ");
    fprintf(stderr, fmt, a, b ? b : "");
    fprintf(stderr, " (see mlsys-lab bench --help)\n");
    return 2;
}

static int parse_count(const char *flag, const char *v, long lo, long hi, long *out)
{
    if (mlsys_parse_long(v, out) != 0 || *out < lo || *out > hi) {
        char range[64];
        snprintf(range, sizeof range, "%ld..%ld", lo, hi);
        fprintf(stderr, "mlsys-lab bench: %s: \"%s\" is not a whole number in %s (see "
                "mlsys-lab bench --help)\n", flag, v, range);
        return 2;
    }
    return 0;
}

static int parse_positive(const char *flag, const char *v, double *out)
{
    char *end;
    double x = strtod(v, &end);
    if (!*v || *end || !(x > 0) || !isfinite(x))
        return usage_error("%s: \"%s\" is not a number above 0", flag, v);
    *out = x;
    return 0;
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

/* Parse argv into g. Returns 0, 2 for a usage error, or 1 after --help. */
static int parse_args(int argc, char **argv, bench_cfg *g)
{
    int have_coll = 0, got_b = 0, got_e = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *val = NULL;
        const bench_opt *o = NULL;
        char flag[64];
        if (a[0] == '-' && a[1] == '-' && a[2]) {
            const char *eq = strchr(a + 2, '=');
            size_t len = eq ? (size_t)(eq - a - 2) : strlen(a + 2);
            for (int k = 0; k < NOPTS; k++)
                if (strlen(opts[k].name) == len && !strncmp(opts[k].name, a + 2, len))
                    o = &opts[k];
            if (!o)
                return usage_error("unknown flag %s", a, NULL);
            if (eq)
                val = eq + 1;
        } else if (a[0] == '-' && a[1] && a[1] != '-') {
            for (int k = 0; k < NOPTS; k++)
                if (opts[k].short_name == a[1])
                    o = &opts[k];
            if (!o)
                return usage_error("unknown flag %s", a, NULL);
            if (a[2]) {
                if (!o->has_arg)
                    return usage_error("unknown flag %s", a, NULL);
                val = a + 2;
            }
        } else {
            if (have_coll)
                return usage_error("one collective only, got \"%s\" after \"%s\"", a,
                                   mlsys_coll_name(g->coll));
            if (mlsys_coll_parse(a, &g->coll) != 0 || g->coll == MLSYS_COLL_BARRIER)
                return usage_error("unknown collective \"%s\": use all_reduce, all_gather, "
                                   "reduce_scatter, broadcast, reduce, all_to_all, gather, "
                                   "scatter%s", a, NULL);
            have_coll = 1;
            continue;
        }
        snprintf(flag, sizeof flag, "--%s", o->name);
        if (o->has_arg && !val) {
            if (i + 1 >= argc)
                return usage_error("%s needs a value", flag, NULL);
            val = argv[++i];
        } else if (!o->has_arg && val) {
            return usage_error("%s takes no value", flag, NULL);
        }
        long l;
        uint64_t s;
        int rc = 0;
        switch (o->id) {
        case OPT_MINBYTES: case OPT_MAXBYTES: case OPT_STEPBYTES:
            if (mlsys_parse_size(val, &s) != 0 || s == 0)
                return usage_error("%s: \"%s\" is not a size above 0 (use 8, 64K, 64M)", flag,
                                   val);
            if (o->id == OPT_MINBYTES) {
                g->minbytes = s;
                got_b = 1;
            } else if (o->id == OPT_MAXBYTES) {
                g->maxbytes = s;
                got_e = 1;
            } else {
                g->stepbytes = s;
            }
            break;
        case OPT_STEPFACTOR:
            rc = parse_count(flag, val, 2, 1024, &l);
            g->stepfactor = l;
            g->stepbytes = 0;
            break;
        case OPT_SIZES:
            rc = parse_size_list(val, g);
            g->size_list = 1;
            break;
        case OPT_ITERS:
            rc = parse_count(flag, val, 1, 100000000, &l);
            g->iters = l;
            break;
        case OPT_WARMUP:
            rc = parse_count(flag, val, 0, 100000000, &l);
            g->warmup = l;
            break;
        case OPT_CHECK:
            rc = parse_count(flag, val, 0, 1, &l);
            g->check = (int)l;
            break;
        case OPT_OP:
            if (mlsys_op_parse(val, &g->op) != 0)
                return usage_error("%s: unknown operator \"%s\": use sum, prod, min, max, avg",
                                   flag, val);
            break;
        case OPT_DATATYPE:
            if (mlsys_dtype_parse(val, &g->dt) != 0)
                return usage_error("%s: unknown type \"%s\": use float, double, int32, int64",
                                   flag, val);
            break;
        case OPT_ROOT:
            rc = parse_count(flag, val, 0, BENCH_MAX_RANKS - 1, &l);
            g->root = (int)l;
            break;
        case OPT_JSON:
            if (!*val)
                return usage_error("%s needs a file name%s", flag, NULL);
            g->json_path = val;
            break;
        case OPT_WORLD:
            rc = parse_count(flag, val, 1, BENCH_MAX_RANKS, &l);
            g->world_size = (int)l;
            break;
        case OPT_ALGO:
            g->algo = val;
            break;
        case OPT_TIMEOUT:
            rc = parse_positive(flag, val, &g->timeout_s);
            if (!rc && g->timeout_s > 86400)
                rc = usage_error("%s: \"%s\" is more than a day", flag, val);
            break;
        case OPT_ALPHA:
            rc = parse_positive(flag, val, &g->alpha_us);
            break;
        case OPT_BETA:
            rc = parse_positive(flag, val, &g->beta_gbs);
            break;
        case OPT_MEMCPY:
            g->memcpy_mode = 1;
            break;
        case OPT_BACKEND:
            if (strcmp(val, "shm") && strcmp(val, "gloo") && strcmp(val, "mpi"))
                return usage_error("%s: unknown backend \"%s\": use shm or mpi", flag, val);
            g->mpi = !strcmp(val, "mpi");
            break;
        case OPT_MPI_RANK:
            g->mpi_rank = 1;
            break;
        case OPT_HELP:
            print_help(stdout);
            return 1;
        }
        if (rc)
            return rc;
    }
    if (g->size_list && (got_b || got_e))
        return usage_error("--sizes replaces -b/-e: give one or the other%s", "", NULL);
    return 0;
}

/* The sweep: min, min*f, ... <= max (or min, min+step, ...), as nccl-tests. */
static int make_sweep(bench_cfg *g)
{
    if (g->minbytes > g->maxbytes) {
        char lo[32], hi[32];
        snprintf(lo, sizeof lo, "%" PRIu64, g->minbytes);
        snprintf(hi, sizeof hi, "%" PRIu64, g->maxbytes);
        return usage_error("-b/--minbytes (%s B) is larger than -e/--maxbytes (%s B)", lo, hi);
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
    g.coll = MLSYS_COLL_ALLREDUCE;
    g.minbytes = 8;
    g.maxbytes = 64ull << 20;
    g.stepfactor = 2;
    g.iters = 20;
    g.warmup = 5;
    g.check = 1;
    g.op = MLSYS_SUM;
    g.dt = MLSYS_F32;
    g.world_size = 2;
    g.algo = "auto";
    g.timeout_s = 30;
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
