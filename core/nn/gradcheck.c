/* gradcheck.c - the test every backward must pass: nudge one input by ±h, evaluate the loss
 * twice, and the slope (f(x+h) - f(x-h)) / 2h must match the analytic gradient. Central
 * differences are accurate to O(h²), one-sided ones only to O(h). Floats limit how small h
 * can be: the loss difference must stay well above the rounding noise of the forward. */
#include "nn.h"
#include <math.h>
#include <string.h>

double nn_gradcheck(nn_loss_fn f, void *ctx, float *x, const float *analytic, size_t n,
                    float h, double floor, size_t max_checks, nn_gradcheck_result *res)
{
    nn_gradcheck_result r;
    memset(&r, 0, sizeof r);
    size_t count = (max_checks && max_checks < n) ? max_checks : n;
    for (size_t k = 0; k < count; k++) {
        size_t i = count == n ? k : k * n / count;   /* evenly spread when sampling */
        float keep = x[i];
        float up = keep + h, down = keep - h;
        x[i] = up;
        double fp = f(ctx);
        x[i] = down;
        double fm = f(ctx);
        x[i] = keep;
        /* divide by the step the floats really took, not by the 2h we asked for */
        double numeric = (fp - fm) / ((double)up - (double)down);
        double a = analytic[i];
        double abs_err = fabs(a - numeric);
        double scale = fmax(fmax(fabs(a), fabs(numeric)), floor);
        double rel = abs_err / scale;
        if (abs_err > r.max_abs_err)
            r.max_abs_err = abs_err;
        if (rel > r.max_rel_err || r.checked == 0) {
            r.max_rel_err = rel;
            r.worst = i;
            r.worst_analytic = a;
            r.worst_numeric = numeric;
        }
        r.checked++;
    }
    if (res)
        *res = r;
    return r.max_rel_err;
}
