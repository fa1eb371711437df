/* alltoall.c - rank r's block j (count elements) lands in rank j's block r: a transpose of
 * the N x N matrix of blocks spread over the ranks. One algorithm, the pairwise exchange.
 *
 * Contract: sendbuf and recvbuf hold N * count elements; sendbuf is only read. In place:
 * sendbuf == recvbuf (the blocks are first copied aside: a block we still have to send
 * could otherwise be overwritten by one we receive). Any count >= 1.
 *
 * Pairwise exchange, N = 4; at step k rank r sends block (r + k) mod N to rank (r + k) mod N
 * and receives from rank (r - k) mod N, so every rank sends one block and receives one block
 * per step and no rank is the target of two senders at once:
 *
 *   step k   rank 0 sends to / gets from   rank 1       rank 2       rank 3
 *   1        1 / 3                         2 / 0        3 / 1        0 / 2
 *   2        2 / 2                         3 / 3        0 / 0        1 / 1
 *   3        3 / 1                         0 / 2        1 / 3        2 / 0
 *
 * Block r stays home (a local copy). N - 1 steps, (N - 1) blocks out and in per rank. */
#include "coll.h"
#include <stdlib.h>

int coll_alltoall_direct(mlsys_comm *c, const coll_args *a)
{
    int n = c->size, r = c->rank, rc = 0;
    size_t cnt = a->count, total = (size_t)n * cnt;
    void *tmp = NULL;
    const void *src = a->sendbuf;
    if (a->sendbuf == a->recvbuf) {
        tmp = coll_scratch(total * dt_size(a->dt));
        coll_copy(tmp, a->sendbuf, total, a->dt);
        src = tmp;
    }
    coll_copy(coll_at(a->recvbuf, (size_t)r * cnt, a->dt), coll_at(src, (size_t)r * cnt, a->dt),
              cnt, a->dt);
    for (int k = 1; k < n; k++) {
        if ((rc = mlsys_step(c, k - 1, "pairwise exchange")))
            break;
        int to = (r + k) % n, from = (r - k + n) % n;
        rc = coll_exchange(c, coll_at(src, (size_t)to * cnt, a->dt), cnt, to,
                           coll_at(a->recvbuf, (size_t)from * cnt, a->dt), cnt, from,
                           COLL_TAG(MLSYS_COLL_ALLTOALL, k - 1), a->dt);
        if (rc)
            break;
    }
    coll_scratch_free(tmp);
    return rc;
}

static const coll_algo algos[] = {
    {"direct", coll_alltoall_direct, 0, "pairwise exchange: step k, send to r+k, get from r-k"},
};
static const char *const names[] = {"direct", NULL};

static int decide(int n, size_t bytes, const char **why)
{
    (void)bytes;
    *why = n == 1 ? "1 rank: copy" : "direct: pairwise exchange in N-1 steps";
    return 0;
}

const coll_table coll_alltoall_table = {
    MLSYS_COLL_ALLTOALL, "all_to_all", algos, (int)(sizeof algos / sizeof algos[0]), names,
    decide,
};
