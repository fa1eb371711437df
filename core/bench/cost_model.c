/* cost_model.c - what a collective's size means and what it should cost: the count and buffer
 * shapes of each collective, nccl-tests' bus-bandwidth factor (with the reason for it), and
 * the alpha-beta model of each algorithm. Shared by `mlsys-lab bench` and the labs that time
 * collectives (ch04/benchmark-algorithms). */
#include "bench.h"
#include <string.h>

/* ---- the collective's shape: counts, buffers, busbw factor ---- */

/* Collectives whose count is per rank: the table size S is the whole buffer of n blocks. */
int bench_per_rank_count(mlsys_coll coll)
{
    return coll == MLSYS_COLL_ALLGATHER || coll == MLSYS_COLL_REDUCE_SCATTER ||
           coll == MLSYS_COLL_GATHER || coll == MLSYS_COLL_SCATTER ||
           coll == MLSYS_COLL_ALLTOALL;
}

int bench_is_reduction(mlsys_coll coll)
{
    return coll == MLSYS_COLL_ALLREDUCE || coll == MLSYS_COLL_REDUCE ||
           coll == MLSYS_COLL_REDUCE_SCATTER;
}

int bench_is_rooted(mlsys_coll coll)
{
    return coll == MLSYS_COLL_BROADCAST || coll == MLSYS_COLL_REDUCE ||
           coll == MLSYS_COLL_GATHER || coll == MLSYS_COLL_SCATTER;
}

/* Elements of the send and the receive buffer that one call uses. */
size_t bench_send_elems(mlsys_coll coll, size_t count, int n)
{
    switch (coll) {
    case MLSYS_COLL_REDUCE_SCATTER: case MLSYS_COLL_SCATTER: case MLSYS_COLL_ALLTOALL:
        return count * (size_t)n;
    default:
        return count;
    }
}

size_t bench_recv_elems(mlsys_coll coll, size_t count, int n)
{
    switch (coll) {
    case MLSYS_COLL_ALLGATHER: case MLSYS_COLL_GATHER: case MLSYS_COLL_ALLTOALL:
        return count * (size_t)n;
    default:
        return count;
    }
}

/* busbw = algbw x factor, the nccl-tests convention (doc/PERFORMANCE.md). */
double bench_busbw_factor(mlsys_coll coll, int n)
{
    switch (coll) {
    case MLSYS_COLL_ALLREDUCE: return 2.0 * (n - 1) / n;
    case MLSYS_COLL_BROADCAST: case MLSYS_COLL_REDUCE: return 1.0;
    default: return (double)(n - 1) / n;
    }
}

const char *bench_busbw_formula(mlsys_coll coll)
{
    switch (coll) {
    case MLSYS_COLL_ALLREDUCE: return "2(n-1)/n";
    case MLSYS_COLL_BROADCAST: case MLSYS_COLL_REDUCE: return "1";
    default: return "(n-1)/n";
    }
}

/* Why that factor, in one line: what the busiest link must carry whatever the algorithm. */
const char *bench_busbw_reason(mlsys_coll coll)
{
    switch (coll) {
    case MLSYS_COLL_ALLREDUCE:
        return "each rank must send and receive 2(n-1)/n of the buffer (a reduce-scatter, then "
               "an all-gather), so busbw compares with the bandwidth of one link";
    case MLSYS_COLL_ALLGATHER:
        return "each rank must receive the n-1 blocks of S/n that it lacks";
    case MLSYS_COLL_REDUCE_SCATTER:
        return "each rank must receive n-1 blocks of S/n to reduce into its own block";
    case MLSYS_COLL_ALLTOALL:
        return "each rank keeps one block of S/n and must exchange the other n-1";
    case MLSYS_COLL_BROADCAST:
        return "the whole buffer must leave the root once and reach every rank";
    case MLSYS_COLL_REDUCE:
        return "the whole buffer must reach the root once, reduced on the way";
    case MLSYS_COLL_GATHER:
        return "the root's link must carry the n-1 blocks of the other ranks in";
    case MLSYS_COLL_SCATTER:
        return "the root's link must carry the n-1 blocks of the other ranks out";
    default:
        return "";
    }
}

/* ---- the alpha-beta cost model (optional column) ---- */

static int log2_ceil(int n)
{
    int k = 0;
    while ((1 << k) < n)
        k++;
    return k;
}

/* Predicted time in us of algorithm algo for a table size of S bytes on n ranks: steps * alpha
 * plus the bytes on the busiest path / beta. Returns -1 for an algorithm we have no model of.
 * beta is in GB/s = 1e3 bytes per us. */
double bench_model_us(mlsys_coll coll, const char *algo, double S, int n, double a, double b)
{
    double B = b * 1e3, L = log2_ceil(n), N = n;
    if (n < 2 || !algo)
        return 0.0;
    int ring = !strcmp(algo, "ring"), tree = !strcmp(algo, "tree");
    int rd = !strcmp(algo, "recursive_doubling"), rh = !strcmp(algo, "recursive_halving");
    int direct = !strcmp(algo, "direct");
    switch (coll) {
    case MLSYS_COLL_ALLREDUCE:
        if (ring) return 2 * (N - 1) * (a + S / (N * B));
        if (tree) return 2 * L * (a + S / B);
        if (rd) return L * (a + S / B);
        if (rh) return 2 * L * a + 2 * (N - 1) / N * S / B;
        break;
    case MLSYS_COLL_ALLGATHER: case MLSYS_COLL_REDUCE_SCATTER:
        if (ring || direct) return (N - 1) * (a + S / (N * B));
        if (rd || rh) return L * a + (N - 1) / N * S / B;
        break;
    case MLSYS_COLL_ALLTOALL: case MLSYS_COLL_GATHER: case MLSYS_COLL_SCATTER:
        if (direct) return (N - 1) * (a + S / (N * B));
        if (tree) return L * a + (N - 1) / N * S / B;
        break;
    case MLSYS_COLL_BROADCAST: case MLSYS_COLL_REDUCE:
        if (direct) return (N - 1) * (a + S / B);
        if (tree) return L * (a + S / B);
        if (!strcmp(algo, "scatter_allgather"))
            return (L + N - 1) * a + 2 * (N - 1) / N * S / B;
        break;
    default:
        break;
    }
    return -1.0;
}
