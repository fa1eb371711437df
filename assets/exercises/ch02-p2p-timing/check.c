/* check.c - ch02-p2p-timing, rank side (see ../harness.h): both times positive and
 * finite on both ranks, and rank 1's buffer equal to rank 0's afterwards. No assertion on
 * which is faster: that is a measurement, shown, not judged. */
#include "harness.h"
#include "api.h"

#define COUNT (1u << 20)

static void ex_check_main(harness *h)
{
    h_case(h, "N=%d, %u floats", h->size, COUNT);
    float *buf = malloc(COUNT * sizeof *buf), *want = malloc(COUNT * sizeof *want);
    if (!buf || !want)
        abort();
    for (size_t i = 0; i < COUNT; i++) {
        want[i] = (float)((i * 7 + h->seed) % 1000);
        buf[i] = h->rank == 0 ? want[i] : 0.0f;
    }
    double tb = -1.0, tn = -1.0;
    int rc = time_p2p(h->c, buf, COUNT, &tb, &tn);
    h_returned(h, rc, "time_p2p");
    if (!(tb > 0.0) || !isfinite(tb))
        h_fail(h, "rank %d: the blocking time is %g us: measure it (mlsys_now_ns() before and "
               "after)", h->rank, tb);
    else if (!(tn > 0.0) || !isfinite(tn))
        h_fail(h, "rank %d: the non-blocking time is %g us: measure it (mlsys_now_ns() before "
               "and after)", h->rank, tn);
    else if (h->rank == 1)
        h_cmp_f32(h, want, buf, COUNT, 0.0, 0.0, "received", 0);
    if (!h->failed && h->rank == 0)
        h_info(h, "rank 0 measured: blocking %.1f us, isend + wait %.1f us for %zu bytes",
               tb, tn, COUNT * sizeof(float));
    free(buf);
    free(want);
    h_case_end(h);
}
