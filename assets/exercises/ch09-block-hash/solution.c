/* ch09-block-hash - reference solution: FNV-1a 64 over the parent hash's 8 bytes and then
 * each token's 4 bytes, least significant byte first, the same bytes on every machine. The
 * parent makes it a chain: block k's hash covers blocks 0..k. XOR-then-multiply mixes each
 * byte into all the higher bits, so the order of the tokens matters. */
#include "api.h"

static uint64_t fnv_bytes(uint64_t h, uint64_t v, int nbytes)
{
    for (int i = 0; i < nbytes; i++) {
        h ^= (v >> (8 * i)) & 0xff;
        h *= FNV_PRIME;
    }
    return h;
}

uint64_t block_hash(uint64_t parent, const int *tokens, int n)
{
    uint64_t h = fnv_bytes(FNV_OFFSET, parent, 8);
    for (int k = 0; k < n; k++)
        h = fnv_bytes(h, (uint32_t)tokens[k], 4);
    return h;
}
