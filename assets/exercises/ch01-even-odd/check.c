/* check.c - ch01-even-odd, rank side (see ../harness.h): call the hook with stdout
 * captured, then count the lines with each tag. */
#include "harness.h"
#include "api.h"

static void ex_check_main(harness *h)
{
    h_case(h, "N=%d", h->size);
    h_capture_begin(h);
    on_rank_hello(h->rank, h->size);
    char *out = h_capture_end(h);
    h_returned(h, 0, "on_rank_hello");
    int even = h_count_lines(out, "even data"), odd = h_count_lines(out, "odd data");
    int want_even = h->rank % 2 == 0;
    const char *mine = want_even ? "even data" : "odd data";
    const char *other = want_even ? "odd data" : "even data";
    int n_mine = want_even ? even : odd, n_other = want_even ? odd : even;
    if (n_other)
        h_fail(h, "rank %d printed a line with \"%s\", but %d is %s", h->rank, other, h->rank,
               want_even ? "even" : "odd");
    else if (n_mine != 1)
        h_fail(h, "rank %d printed %d lines with \"%s\" (expected exactly one)", h->rank, n_mine,
               mine);
    free(out);
    h_case_end(h);
}
