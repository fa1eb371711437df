/* send_recv_basic.c - ch02/send-recv-basic: a chain relay with blocking point-to-point.
 * Rank 0 sends 42, every middle rank receives, adds 10 and forwards, the last rank receives.
 * Teaches send/recv pairing and why two ranks that both send first deadlock (our send is
 * synchronous, so the deadlock is real: --show-deadlock explains it without running ranks).
 * Fixed from the original: the final value is 42 + 10*(N-2) (only the N-2 middle ranks
 * add) and it says so; N < 2 is refused by the flag table. */
#include "../common/common.h"
#include "../../core/trace_values.h"
#include <string.h>

#define W 50
#define TAG 0

static const lab_flag srb_flags[] = {
    {"world-size", 'w', FLAG_INT, "4", NULL, 2, 64,
     "number of ranks in the chain (needs a sender and a receiver: at least 2)"},
    {"show-deadlock", 0, FLAG_BOOL, NULL, NULL, 0, 0,
     "explain the send/send deadlock and its fix, without starting ranks"},
    {NULL, 0, 0, NULL, NULL, 0, 0, NULL}
};

static void show_deadlock(void)
{
    common_banner(stdout, W, "Deadlock: both ranks send first");
    printf("Rank 0:  send(to 1)  ... waits for rank 1 to receive\n");
    printf("Rank 1:  send(to 0)  ... waits for rank 0 to receive\n");
    printf("\n");
    printf("A blocking send returns only once the receiver has the data (our runtime\n");
    printf("makes send synchronous, like MPI_Ssend). Both ranks sit in send, nobody\n");
    printf("ever reaches recv: each waits for the other forever. The runtime's\n");
    printf("watchdog (--timeout SECONDS) then reports \"deadlock suspected\" with the\n");
    printf("wait-for graph instead of hanging.\n");
    printf("\n");
    common_banner(stdout, W, "Fix 1: interleave the calls");
    printf("Rank 0:  send(to 1), then recv(from 1)\n");
    printf("Rank 1:  recv(from 0), then send(to 0)\n");
    printf("Every send meets a receive that is already waiting. In a chain or ring:\n");
    printf("even ranks send first, odd ranks receive first.\n");
    printf("\n");
    common_banner(stdout, W, "Fix 2: non-blocking calls");
    printf("Both ranks: irecv(from peer) and isend(to peer), then wait for both.\n");
    printf("Neither call blocks, so both ranks reach their wait with both operations\n");
    printf("posted; the order of irecv and isend does not matter. Only the waits\n");
    printf("block, and by then every send has a matching receive.\n");
    printf("(Or use sendrecv, which does both halves in one call.)\n");
}

static int srb_before(const lab_args *a)
{
    if (lab_arg_bool(a, "show-deadlock")) {
        show_deadlock();
        fflush(stdout);
        return 0;
    }
    int n = (int)lab_arg_int(a, "world-size");
    common_banner(stdout, W, "Point-to-point: chain relay");
    printf("World size: %d\n", n);
    printf("Pattern: ");
    for (int r = 0; r < n; r++) {
        if (n > 10 && r == 4) {
            printf("… → ");
            r = n - 2;
            continue;
        }
        printf("%d%s", r, r + 1 < n ? " → " : "\n");
    }
    printf("Each middle rank adds 10 before forwarding\n\n");
    fflush(stdout);
    return -1;
}

static int srb_rank(mlsys_comm *c, const lab_args *a)
{
    int r = mlsys_rank(c), n = mlsys_size(c), rc = 0;
    float v = 0.0f;
    common_text out = {0};
    char rule[128];
    (void)a;
    common_rule(rule, sizeof rule, "=", W);

    /* One step per hop, so that the viewer (and a gated run) moves the value one rank at a
     * time: at hop h rank h sends and rank h+1 receives; the others wait at the gate. Each
     * value a rank creates, receives or computes is published for the views. */
    for (int h = 0; h < n - 1; h++) {
        if (mlsys_step(c, h, "relay hop") != MLSYS_OK)
            goto err;
        if (h == r - 1) {
            if (mlsys_recv(c, &v, 1, MLSYS_F32, r - 1, TAG) != MLSYS_OK)
                goto err;
            common_text_add(&out, "Rank %d: received %.1f from rank %d\n", r, (double)v, r - 1);
            if (r < n - 1) {
                v += 10.0f;
                common_text_add(&out, "Rank %d: added 10, now %.1f\n", r, (double)v);
            }
            double d = v;
            mlsys_emit_values(c, h, &d, 1);
        }
        if (h == r) {
            if (r == 0) {
                v = 42.0f;
                common_text_add(&out, "Rank 0: created value %.1f\n", (double)v);
                double d = v;
                mlsys_emit_values(c, h, &d, 1);
            }
            if (mlsys_send(c, &v, 1, MLSYS_F32, r + 1, TAG) != MLSYS_OK)
                goto err;
            common_text_add(&out, "Rank %d: sent %.1f to rank %d\n", r, (double)v, r + 1);
        }
    }
    if (r == n - 1) {
        long expected = 42 + 10L * (n - 2);
        common_text_add(&out, "Rank %d: final value %.1f\n", r, (double)v);
        common_text_add(&out, "\n%s\n Chain complete\n%s\n", rule, rule);
        common_text_add(&out, "original value: 42.0\n");
        common_text_add(&out, "after %d addition%s (one per middle rank): %.1f\n", n - 2,
                        n - 2 == 1 ? "" : "s", (double)v);
        common_text_add(&out, "expected = 42 + 10*(N-2) = 42 + 10*%d = %ld\n", n - 2, expected);
        common_text_add(&out, "correct: %s\n", v == (float)expected ? "yes" : "NO");
        rc = v == (float)expected ? 0 : 1;
    }
    if (mlsys_print_ordered(c, "%s", common_text_str(&out)) != MLSYS_OK)
        goto err;
    if (mlsys_barrier(c) != MLSYS_OK)
        goto err;
    common_text_free(&out);
    return rc;
err:
    fprintf(stderr, "rank %d: %s\n", r, mlsys_errmsg(c));
    common_text_free(&out);
    return 1;
}

const lab ch02_send_recv_basic_lab = {
    .id = "ch02/send-recv-basic",
    .title = "Point-to-point: chain relay",
    .summary = "42 travels 0 → 1 → … → N-1 by blocking send/recv; each middle rank adds 10",
    .flags = srb_flags,
    .port = 29501,
    .min_ranks = 2,
    .max_ranks = 64,
    .before = srb_before,
    .rank_main = srb_rank,
    .view = "ring",
};
