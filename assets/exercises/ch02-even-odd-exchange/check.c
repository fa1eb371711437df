/* check.c - ch02-even-odd-exchange, rank side (see ../harness.h): every rank must hold its
 * partner's rank number, or -1 without a partner. */
#include "harness.h"
#include "api.h"

static void ex_check_main(harness *h)
{
    h_case(h, "N=%d", h->size);
    int got = -7;
    int rc = exchange_with_partner(h->c, &got);
    h_returned(h, rc, "exchange_with_partner");
    int partner = h->rank ^ 1;
    int want = partner < h->size ? partner : -1;
    if (got != want) {
        if (want < 0)
            h_fail(h, "rank %d has no partner (N = %d is odd): expected -1, got %d", h->rank,
                   h->size, got);
        else
            h_fail(h, "rank %d: expected its partner's rank %d, got %d", h->rank, want, got);
    }
    h_case_end(h);
}
