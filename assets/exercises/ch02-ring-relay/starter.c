/* ch02-ring-relay - turn the chain into a ring.
 *
 * This is send-recv-basic's chain: 42 goes 0 -> 1 -> ... -> N-1 and each middle rank adds
 * 10. Make it a ring: every rank r > 0 adds 10 and sends to (r+1) mod N, so the last rank
 * sends back to rank 0, which receives the value and returns it. Ranks r > 0 return the
 * value they sent (42 + 10r).
 *
 * What value comes back to rank 0? The check runs N = 2, 3, 4, 8 under a 5 s watchdog: a
 * ring where everybody waits for somebody is reported as a deadlock.
 *
 *   mlsys-lab check ch02-ring-relay      mlsys-lab hint ch02-ring-relay */
#include "mlsys.h"
#include "api.h"

float ring_relay(mlsys_comm *c)
{
    int r = mlsys_rank(c), n = mlsys_size(c);
    float v = 0.0f;
    if (r == 0) {
        v = 42.0f;
        mlsys_send(c, &v, 1, MLSYS_F32, 1, 0);
        /* TODO: the value must come back to rank 0 */
    } else if (r < n - 1) {
        mlsys_recv(c, &v, 1, MLSYS_F32, r - 1, 0);
        v += 10.0f;
        mlsys_send(c, &v, 1, MLSYS_F32, r + 1, 0);
    } else {
        mlsys_recv(c, &v, 1, MLSYS_F32, r - 1, 0);
        /* TODO: the last rank is a relay too */
    }
    return v;
}
