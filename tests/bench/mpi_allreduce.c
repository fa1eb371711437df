/* mpi_allreduce.c - the OpenMPI reference for `make bench`: MPI_Allreduce of floats (sum)
 * timed exactly as `mlsys-lab bench` times ours: warm-up calls, a barrier, n calls with
 * nothing else inside the loop, time = the max over ranks of each rank's average. Prints one
 * machine-readable line per size: "mpi allreduce ranks=N bytes=B time_us=T busbw=G".
 * Usage: mpirun -np N mpi_allreduce [--bytes-list 8,64K,1M] [--iters N] [--warmup N]
 *        [--in-place] [--check 0|1] */
#include <mpi.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_SIZES 256

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

static int usage(int rank, const char *what)
{
    if (rank == 0)
        fprintf(stderr, "mpi_allreduce: %s\nusage: mpi_allreduce [--bytes-list LIST] "
                "[--iters N] [--warmup N] [--in-place] [--check 0|1]\n", what);
    MPI_Finalize();
    return 2;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, n;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &n);

    unsigned long long sizes[MAX_SIZES] = {8, 64ull << 10, 1ull << 20, 64ull << 20};
    int nsizes = 4, iters = 20, warmup = 5, inplace = 0, check = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--in-place")) {
            inplace = 1;
            continue;
        }
        if (!v)
            return usage(rank, "a flag needs a value");
        i++;
        if (!strcmp(a, "--bytes-list")) {
            char *copy = strdup(v), *save = NULL;
            nsizes = 0;
            for (char *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
                if (nsizes == MAX_SIZES || !(sizes[nsizes] = parse_size(t))) {
                    free(copy);
                    return usage(rank, "bad --bytes-list");
                }
                nsizes++;
            }
            free(copy);
            if (!nsizes)
                return usage(rank, "empty --bytes-list");
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

    unsigned long long biggest = 0;
    for (int i = 0; i < nsizes; i++)
        biggest = sizes[i] > biggest ? sizes[i] : biggest;
    size_t cap = (size_t)(biggest / sizeof(float)) + 1;
    float *sbuf = NULL, *rbuf = NULL;
    if (posix_memalign((void **)&sbuf, 4096, cap * sizeof(float)) ||
        posix_memalign((void **)&rbuf, 4096, cap * sizeof(float))) {
        fprintf(stderr, "mpi_allreduce: rank %d: out of memory\n", rank);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    int status = 0;
    for (int s = 0; s < nsizes; s++) {
        size_t count = (size_t)(sizes[s] / sizeof(float));
        if (!count)
            continue;
        for (size_t i = 0; i < count; i++) {
            sbuf[i] = (float)((i * 7 + (size_t)rank * 37) % 1021) - 510.0f;
            rbuf[i] = sbuf[i];
        }
        const void *src = inplace ? MPI_IN_PLACE : sbuf;
        for (int i = 0; i < warmup; i++)
            MPI_Allreduce(src, rbuf, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        for (int i = 0; i < iters; i++)
            MPI_Allreduce(src, rbuf, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        double local = (MPI_Wtime() - t0) / iters, worst = 0;
        MPI_Allreduce(&local, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);

        long long wrong = 0, total = 0;
        if (check) {   /* one more call on fresh inputs, compared with the sum computed here */
            for (size_t i = 0; i < count; i++)
                sbuf[i] = rbuf[i] = (float)((i * 7 + (size_t)rank * 37) % 1021) - 510.0f;
            MPI_Allreduce(src, rbuf, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
            for (size_t i = 0; i < count; i++) {
                double want = 0;
                for (int r = 0; r < n; r++)
                    want += (double)((i * 7 + (size_t)r * 37) % 1021) - 510.0;
                wrong += rbuf[i] != (float)want;
            }
            MPI_Allreduce(&wrong, &total, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
        }
        double bytes = (double)count * sizeof(float);
        double algbw = bytes / (worst * 1e9), busbw = algbw * 2.0 * (n - 1) / n;
        if (rank == 0) {
            printf("mpi allreduce ranks=%d bytes=%.0f time_us=%.2f busbw=%.3f algbw=%.3f "
                   "wrong=%lld%s\n", n, bytes, worst * 1e6, busbw, algbw, total,
                   inplace ? " in_place=1" : "");
            fflush(stdout);
        }
        if (total)
            status = 1;
    }
    free(sbuf);
    free(rbuf);
    MPI_Finalize();
    return status;
}
