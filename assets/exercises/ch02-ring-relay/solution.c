/* ch02-ring-relay - reference solution. Rank 0 must send first and receive last; every
 * other rank receives first and then sends. If rank 0 also waited to receive first, every
 * rank would wait for its left neighbour and nobody would ever send: a deadlock.
 * The value coming back is 42 + 10(N-1): N-1 ranks each add 10. */
#include "mlsys.h"
#include "api.h"

float ring_relay(mlsys_comm *c)
{
    int r = mlsys_rank(c), n = mlsys_size(c);
    int right = (r + 1) % n, left = (r + n - 1) % n;
    float v = 0.0f;
    if (r == 0) {
        v = 42.0f;
        if (mlsys_send(c, &v, 1, MLSYS_F32, right, 0) != MLSYS_OK)
            return -1.0f;
        if (mlsys_recv(c, &v, 1, MLSYS_F32, left, 0) != MLSYS_OK)
            return -1.0f;
        return v;
    }
    if (mlsys_recv(c, &v, 1, MLSYS_F32, left, 0) != MLSYS_OK)
        return -1.0f;
    v += 10.0f;
    if (mlsys_send(c, &v, 1, MLSYS_F32, right, 0) != MLSYS_OK)
        return -1.0f;
    return v;
}
