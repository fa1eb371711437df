/* mpi_coll.c - the OpenMPI reference for `make bench`: MPI_Allreduce, _Allgather,
 * _Reduce_scatter_block or _Bcast of floats timed as `mlsys-lab bench` times ours (warm-up,
 * barrier, n calls, max over ranks of the average; size = the whole buffer), then checked.
 * Prints "mpi COLL ranks=N bytes=B time_us=T busbw=G algbw=A iters=I wrong=W" per size.
 * Usage: mpirun -np N mpi_coll [--coll NAME] [--bytes-list 8,64K] [--iters-list 100,10] ... */
#include <mpi.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_SIZES 256

enum { C_ALLREDUCE, C_ALLGATHER, C_REDUCE_SCATTER, C_BROADCAST };

static const char *const coll_names[] = {"all_reduce", "all_gather", "reduce_scatter",
                                         "broadcast"};

/* "64K", "1M", "8": binary units, as mlsys-lab's sizes; 0 on anything else. */
static unsigned long long parse_size(const char *s)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || *s == '-')
        return 0;
    switch (*end) {
    case 'k': case 'K': v <<= 10; end++; break;
    case 'm': case 'M': v <<= 20; end++; break;
    case 'g': case 'G': v <<= 30; end++; break;
    default: break;
    }
    return *end ? 0 : v;
}

/* A comma list of sizes (or of plain numbers with sizes = 0). Returns the count, 0 on error. */
static int parse_list(const char *v, unsigned long long *out, int sizes)
{
    char *copy = strdup(v), *save = NULL;
    int n = 0;
    for (char *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        unsigned long long x = sizes ? parse_size(t) : strtoull(t, NULL, 10);
        if (n == MAX_SIZES || x == 0) {
            n = 0;
            break;
        }
        out[n++] = x;
    }
    free(copy);
    return n;
}

static int usage(int rank, const char *what)
{
    if (rank == 0)
        fprintf(stderr, "mpi_coll: %s\nusage: mpi_coll [--coll all_reduce|all_gather|"
                "reduce_scatter|broadcast] [--bytes-list LIST] [--iters-list LIST] [--iters N] "
                "[--warmup N] [--check 0|1]\n", what);
    MPI_Finalize();
    return 2;
}

/* The known input of rank r, element i: the same small integers as mlsys-lab bench uses. */
static float in_val(int r, size_t i)
{
    return (float)((long)((i * 7 + (size_t)r * 37) % 1021) - 510);
}

static void call(int coll, float *s, float *r, size_t count, int n)
{
    switch (coll) {
    case C_ALLREDUCE:
        MPI_Allreduce(s, r, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        break;
    case C_ALLGATHER:
        MPI_Allgather(s, (int)count, MPI_FLOAT, r, (int)count, MPI_FLOAT, MPI_COMM_WORLD);
        break;
    case C_REDUCE_SCATTER:
        MPI_Reduce_scatter_block(s, r, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        break;
    default:
        MPI_Bcast(r, (int)count, MPI_FLOAT, 0, MPI_COMM_WORLD);
        break;
    }
    (void)n;
}

/* Fresh inputs where the call reads, and the result's wrong elements after it. */
static long long check_once(int coll, float *s, float *r, size_t count, int rank, int n)
{
    size_t ns = coll == C_REDUCE_SCATTER ? count * (size_t)n : count;
    size_t nr = coll == C_ALLGATHER ? count * (size_t)n : count;
    for (size_t i = 0; i < ns; i++)
        s[i] = in_val(rank, i);
    for (size_t i = 0; i < nr; i++)
        r[i] = coll == C_BROADCAST && rank == 0 ? in_val(0, i) : -4194303.0f;
    call(coll, s, r, count, n);
    long long wrong = 0;
    for (size_t i = 0; i < nr; i++) {
        double want = 0;
        switch (coll) {
        case C_ALLREDUCE:
            for (int q = 0; q < n; q++)
                want += in_val(q, i);
            break;
        case C_ALLGATHER:
            want = in_val((int)(i / count), i % count);
            break;
        case C_REDUCE_SCATTER:
            for (int q = 0; q < n; q++)
                want += in_val(q, (size_t)rank * count + i);
            break;
        default:
            want = in_val(0, i);
            break;
        }
        wrong += r[i] != (float)want;
    }
    return wrong;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, n;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &n);

    unsigned long long sizes[MAX_SIZES] = {8, 64ull << 10, 1ull << 20, 64ull << 20};
    unsigned long long iters_list[MAX_SIZES];
    int nsizes = 4, niters = 0, iters = 20, warmup = -1, check = 1, coll = C_ALLREDUCE;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v)
            return usage(rank, "a flag needs a value");
        i++;
        if (!strcmp(a, "--coll")) {
            coll = -1;
            for (int k = 0; k < 4; k++) {
                char plain[32];          /* "allreduce" as well as "all_reduce" */
                const char *src = coll_names[k];
                size_t m = 0;
                for (; *src && m < sizeof plain - 1; src++)
                    if (*src != '_')
                        plain[m++] = *src;
                plain[m] = 0;
                if (!strcmp(v, coll_names[k]) || !strcmp(v, plain))
                    coll = k;
            }
            if (coll < 0)
                return usage(rank, "unknown --coll");
        } else if (!strcmp(a, "--bytes-list")) {
            if (!(nsizes = parse_list(v, sizes, 1)))
                return usage(rank, "bad --bytes-list");
        } else if (!strcmp(a, "--iters-list")) {
            if (!(niters = parse_list(v, iters_list, 0)))
                return usage(rank, "bad --iters-list");
        } else if (!strcmp(a, "--iters") || !strcmp(a, "-n")) {
            if ((iters = atoi(v)) < 1)
                return usage(rank, "--iters must be at least 1");
        } else if (!strcmp(a, "--warmup") || !strcmp(a, "-w")) {
            if ((warmup = atoi(v)) < 0)
                return usage(rank, "--warmup must be at least 0");
        } else if (!strcmp(a, "--check") || !strcmp(a, "-c")) {
            check = atoi(v);
        } else {
            return usage(rank, "unknown flag");
        }
    }
    if (niters && niters != nsizes)
        return usage(rank, "--iters-list needs one count per size of --bytes-list");

    int per_rank = coll == C_ALLGATHER || coll == C_REDUCE_SCATTER;
    double factor = coll == C_ALLREDUCE ? 2.0 * (n - 1) / n :
                    coll == C_BROADCAST ? 1.0 : (double)(n - 1) / n;
    unsigned long long biggest = 0;
    for (int i = 0; i < nsizes; i++)
        biggest = sizes[i] > biggest ? sizes[i] : biggest;
    size_t cap = (size_t)(biggest / sizeof(float)) + 1;
    float *sbuf = NULL, *rbuf = NULL;
    if (posix_memalign((void **)&sbuf, 4096, cap * sizeof(float)) ||
        posix_memalign((void **)&rbuf, 4096, cap * sizeof(float))) {
        fprintf(stderr, "mpi_coll: rank %d: out of memory\n", rank);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    int status = 0;
    for (int s = 0; s < nsizes; s++) {
        /* count per call: per rank for all_gather and reduce_scatter, whole vector otherwise */
        size_t count = (size_t)(sizes[s] / sizeof(float)) / (per_rank ? (size_t)n : 1);
        if (!count)
            continue;
        size_t total = count * (per_rank ? (size_t)n : 1);
        for (size_t i = 0; i < total; i++)
            sbuf[i] = rbuf[i] = in_val(rank, i);
        long it = niters ? (long)iters_list[s] : iters;
        long wu = warmup >= 0 ? warmup : (it / 10 < 3 ? 3 : it / 10);
        for (long i = 0; i < wu; i++)
            call(coll, sbuf, rbuf, count, n);
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        for (long i = 0; i < it; i++)
            call(coll, sbuf, rbuf, count, n);
        double local = (MPI_Wtime() - t0) / (double)it, worst = 0;
        MPI_Allreduce(&local, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        long long wrong = 0, sum = 0;
        if (check) {
            wrong = check_once(coll, sbuf, rbuf, count, rank, n);
            MPI_Allreduce(&wrong, &sum, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
        }
        double bytes = (double)total * sizeof(float);
        double algbw = bytes / (worst * 1e9), busbw = algbw * factor;
        if (rank == 0) {
            printf("mpi %s ranks=%d bytes=%.0f time_us=%.2f busbw=%.3f algbw=%.3f iters=%ld "
                   "wrong=%lld\n", coll_names[coll], n, bytes, worst * 1e6, busbw, algbw, it,
                   sum);
            fflush(stdout);
        }
        if (sum)
            status = 1;
    }
    free(sbuf);
    free(rbuf);
    MPI_Finalize();
    return status;
}
