/* copy.c - copying and reducing large messages with non-temporal stores. A receiver that
 * copies 32 MiB out of a peer's heap never reads the destination again soon, so writing
 * around the cache saves the read-for-ownership of every line: a third less memory traffic,
 * which is what a memory-bound transport on two cores is made of. Below NT_MIN_BYTES the
 * data may still be in cache and plain memcpy wins. */
#include "internal.h"
#include <string.h>
#if defined(__x86_64__)
#include <emmintrin.h>
#endif

#define NT_MIN_BYTES (4u << 20)
#define BLOCK_BYTES 4096

#if defined(__x86_64__)
/* 16-byte aligned destination, length a multiple of 64. */
static void stream_64(void *dst, const void *src, size_t n)
{
    __m128i *d = dst;
    const __m128i *s = src;
    for (size_t i = 0; i < n / 16; i += 4) {
        __m128i a = _mm_loadu_si128(s + i), b = _mm_loadu_si128(s + i + 1);
        __m128i c = _mm_loadu_si128(s + i + 2), e = _mm_loadu_si128(s + i + 3);
        _mm_stream_si128(d + i, a);
        _mm_stream_si128(d + i + 1, b);
        _mm_stream_si128(d + i + 2, c);
        _mm_stream_si128(d + i + 3, e);
    }
}

/* memcpy for the head up to 16-byte alignment and for the tail; streaming in between. */
static void stream_copy(void *dst, const void *src, size_t n)
{
    size_t head = (16 - ((uintptr_t)dst & 15)) & 15;
    memcpy(dst, src, head);
    size_t body = (n - head) & ~(size_t)63;
    stream_64((char *)dst + head, (const char *)src + head, body);
    memcpy((char *)dst + head + body, (const char *)src + head + body, n - head - body);
    _mm_sfence();
}
#endif

void mlsys_copy_large(void *dst, const void *src, size_t n)
{
#if defined(__x86_64__)
    if (n >= NT_MIN_BYTES) {
        stream_copy(dst, src, n);
        return;
    }
#endif
    memcpy(dst, src, n);
}

/* out = a (op) b: small vectors straight through the kernel, large ones through
 * mlsys_reduce_many, which streams the result past the cache. */
void mlsys_reduce_large(void *out, const void *a, const void *b, size_t count, mlsys_dtype dt,
                        mlsys_op op)
{
    if (count * dt_size(dt) < NT_MIN_BYTES) {
        mlsys_reduce_local(out, a, b, count, dt, op);
        return;
    }
    const void *in[2] = {a, b};
    mlsys_reduce_many(out, in, 2, count, dt, op);
}

/* out = in[0] (op) in[1] (op) ... (op) in[n-1], in that order, reading each input once:
 * block by block into an L1 buffer, then out (streamed when large). out may be in[k]. */
void mlsys_reduce_many(void *out, const void *const *in, int n, size_t count, mlsys_dtype dt,
                       mlsys_op op)
{
    size_t es = dt_size(dt);
    if (n == 1) {
        mlsys_copy_large(out, in[0], count * es);
        return;
    }
    _Alignas(64) unsigned char tmp[BLOCK_BYTES];
    size_t per = BLOCK_BYTES / es;
    int stream = count * es >= NT_MIN_BYTES;
    for (size_t i = 0; i < count; i += per) {
        size_t m = count - i < per ? count - i : per, at = i * es;
        mlsys_reduce_local(tmp, (const char *)in[0] + at, (const char *)in[1] + at, m, dt, op);
        for (int k = 2; k < n; k++)
            mlsys_reduce_local(tmp, tmp, (const char *)in[k] + at, m, dt, op);
#if defined(__x86_64__)
        if (stream && m == per && (((uintptr_t)out + at) & 15) == 0) {
            stream_64((char *)out + at, tmp, BLOCK_BYTES);
            continue;
        }
#endif
        memcpy((char *)out + at, tmp, m * es);
    }
#if defined(__x86_64__)
    if (stream)
        _mm_sfence();
#endif
    (void)stream;
}
