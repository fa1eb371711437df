/* bench_rank.c - one rank of `mlsys-lab bench`: every requested size measured with the core's
 * engine for every algorithm asked (out-of-place and in-place), rank 0 printing nccl-tests'
 * tables, the footer with the busbw factor, why each algorithm ran, and the JSON; and the
 * one-core memcpy ceiling. */
#include "bench_cmd.h"
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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

int bench_rank_main(mlsys_comm *c, void *arg)
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

int bench_memcpy(const bench_cfg *g)
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
