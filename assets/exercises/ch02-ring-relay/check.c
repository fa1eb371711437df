/* check.c - ch02-ring-relay, rank side (see ../harness.h): rank 0 must get back
 * 42 + 10(N-1), rank r > 0 must have sent 42 + 10r. */
#include "harness.h"
#include "api.h"

static void ex_check_main(harness *h)
{
    h_case(h, "N=%d", h->size);
    float got = ring_relay(h->c);
    h_returned(h, 0, "ring_relay");
    char a[48], b[48];
    if (h->rank == 0) {
        double want = 42.0 + 10.0 * (h->size - 1);
        if (got != (float)want)
            h_fail(h, "rank 0: the value that came back is %s, expected 42 + 10(N-1) = %s",
                   h_num(a, sizeof a, got), h_num(b, sizeof b, want));
    } else {
        double want = 42.0 + 10.0 * h->rank;
        if (got != (float)want)
            h_fail(h, "rank %d: it passed on %s, expected 42 + 10 x %d = %s", h->rank,
                   h_num(a, sizeof a, got), h->rank, h_num(b, sizeof b, want));
    }
    h_case_end(h);
}
