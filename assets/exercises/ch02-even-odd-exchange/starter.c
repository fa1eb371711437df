/* ch02-even-odd-exchange - partners swap numbers at the same time.
 *
 * Rank r pairs with r XOR 1 (0 with 1, 2 with 3, ...) and the two swap their rank
 * numbers. The last rank of an odd N has no partner and sets *received = -1.
 *
 * This version makes both partners send first. Our send is synchronous (it returns once the
 * receiver has the data), so... run the check and see what the watchdog says. Then fix it
 * with mlsys_isend/mlsys_irecv: post both, then wait for both.
 *
 * The check runs N = 2, 3, 4, 8 under a 5 s watchdog.
 *
 *   mlsys-lab check ch02-even-odd-exchange      mlsys-lab hint ch02-even-odd-exchange */
#include "mlsys.h"
#include "api.h"

int exchange_with_partner(mlsys_comm *c, int *received)
{
    int r = mlsys_rank(c), n = mlsys_size(c);
    int partner = r ^ 1;
    if (partner >= n) {
        *received = -1;
        return 0;
    }
    int rc = mlsys_send(c, &r, 1, MLSYS_I32, partner, 0);
    if (rc)
        return rc;
    return mlsys_recv(c, received, 1, MLSYS_I32, partner, 0);
}
