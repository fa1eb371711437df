/* wsync.c - the weight sync of RLHF (wsync.h): a header broadcast (version, sizes, names),
 * an all-reduce of every rank's verdict on it, then the tensors' floats as one stream cut
 * into buckets of bucket_bytes, each broadcast from the tensors themselves when its floats
 * are contiguous on that rank, else through a page-aligned staging buffer. */
#include "wsync.h"
#include "../internal.h"    /* mlsys_alloc_scratch: page-aligned, not zeroed */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#define WSYNC_MAGIC 0x434e595357534c4dull     /* "MLSWSYNC" */
#define HDR_WORDS 6                            /* magic, version, count, bucket, blob, status */
#define INLINE_WORDS 250       /* a blob up to 2000 B rides in the header: 2 KiB in all, what
                                * the shm transport carries inline in a slot */

enum { ST_OK, ST_BAD_TENSOR, ST_NAME, ST_SIZE, ST_COUNT, ST_VERSION, ST_HEADER, ST_ROOT_ARGS };

static const char *status_text(int st)
{
    static const char *const t[] = {"ok", "a tensor without data", "a tensor name differs",
                                    "a tensor size differs", "the tensor count differs",
                                    "the version does not advance by one",
                                    "the header is not a weight sync", "bad arguments on the root"};
    return st >= 0 && st <= ST_ROOT_ARGS ? t[st] : "?";
}

static void seterr(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void seterr(char *err, size_t errlen, const char *fmt, ...)
{
    if (!err || !errlen)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

static const char *tname(const rl_tensor *t)
{
    return t->name ? t->name : "";
}

size_t rl_wsync_buckets(const rl_tensor *t, int n_tensors, size_t bucket_bytes)
{
    size_t total = 0, bf = bucket_bytes / sizeof(float) ? bucket_bytes / sizeof(float) : 1;
    for (int i = 0; i < n_tensors; i++)
        total += t[i].n;
    return (total + bf - 1) / bf;
}

/* The root's header blob: per tensor (n, name length), then the names, 8-byte padded. */
static uint64_t *blob_build(const rl_tensor *t, int nt, size_t *bytes)
{
    size_t names = 0;
    for (int i = 0; i < nt; i++)
        names += strlen(tname(&t[i]));
    size_t words = 2 * (size_t)nt + (names + 7) / 8;
    uint64_t *b = mlsys_xcalloc(words ? words : 1, sizeof *b);
    char *s = (char *)(b + 2 * nt);
    for (int i = 0; i < nt; i++) {
        size_t l = strlen(tname(&t[i]));
        b[2 * i] = t[i].n;
        b[2 * i + 1] = l;
        memcpy(s, tname(&t[i]), l);
        s += l;
    }
    *bytes = words * sizeof *b;
    return b;
}

/* A receiver's verdict on the root's header and blob; err gets the details. */
static int check_header(mlsys_comm *c, int root, const uint64_t *h, const uint64_t *blob,
                        size_t blob_bytes, const rl_tensor *t, int nt, uint64_t version,
                        char *err, size_t errlen)
{
    int me = mlsys_rank(c);
    size_t names_len = 0;
    for (size_t i = 0; h[0] == WSYNC_MAGIC && i < h[2] && 16 * (i + 1) <= blob_bytes; i++)
        names_len += (size_t)blob[2 * i + 1];
    if (h[0] == WSYNC_MAGIC && (h[2] > (uint64_t)(blob_bytes / 16) ||
                                16 * h[2] + names_len > blob_bytes))
        h = NULL;
    if (!h || h[0] != WSYNC_MAGIC) {
        seterr(err, errlen, "rank %d: weight sync: the header from root %d is not a weight "
               "sync's or is inconsistent (another collective crossed it)", me, root);
        return ST_HEADER;
    }
    if (h[5] != ST_OK)
        return ST_ROOT_ARGS;        /* the root says why itself */
    int nr = (int)h[2];
    const char *first = nt > 0 ? tname(&t[0]) : "(none)";
    if (h[1] != version + 1) {
        seterr(err, errlen, "rank %d: weight sync refused: root %d sends version %llu, this "
               "rank holds %llu (expects %llu); %d tensors from '%s' left as they were", me,
               root, (unsigned long long)h[1], (unsigned long long)version,
               (unsigned long long)(version + 1), nt, first);
        return ST_VERSION;
    }
    const char *names = (const char *)(blob + 2 * (size_t)nr);
    size_t off = 0;
    for (int i = 0; i < nr && i < nt; i++) {
        size_t l = (size_t)blob[2 * i + 1];
        const char *mine = tname(&t[i]);
        if (strlen(mine) != l || memcmp(mine, names + off, l) != 0) {
            seterr(err, errlen, "rank %d: weight sync v%llu: tensor %d is '%s' here but "
                   "'%.*s' on root %d", me, (unsigned long long)h[1], i, mine, (int)l,
                   names + off, root);
            return ST_NAME;
        }
        if (blob[2 * i] != t[i].n) {
            seterr(err, errlen, "rank %d: weight sync v%llu: tensor '%s' has %zu floats here, "
                   "%llu on root %d", me, (unsigned long long)h[1], mine, t[i].n,
                   (unsigned long long)blob[2 * i], root);
            return ST_SIZE;
        }
        if (t[i].n && !t[i].data) {
            seterr(err, errlen, "rank %d: weight sync v%llu: tensor '%s' has no data", me,
                   (unsigned long long)h[1], mine);
            return ST_BAD_TENSOR;
        }
        off += l;
    }
    if (nr != nt) {
        if (nr > nt) {
            size_t o = 0;
            for (int i = 0; i < nt; i++)
                o += (size_t)blob[2 * i + 1];
            seterr(err, errlen, "rank %d: weight sync v%llu: root %d sends %d tensors, this "
                   "rank has %d: no tensor '%.*s' here", me, (unsigned long long)h[1], root,
                   nr, nt, (int)blob[2 * nt + 1], names + o);
        } else {
            seterr(err, errlen, "rank %d: weight sync v%llu: root %d sends %d tensors, this "
                   "rank has %d: tensor '%s' is not on the root", me, (unsigned long long)h[1],
                   root, nr, nt, tname(&t[nr]));
        }
        return ST_COUNT;
    }
    return ST_OK;
}

/* A position in the stream of all floats: tensor ti, float off in it (never at a tensor's
 * end unless ti == nt). */
typedef struct cursor { int ti; size_t off; } cursor;

static void cursor_norm(const rl_tensor *t, int nt, cursor *k)
{
    while (k->ti < nt && k->off >= t[k->ti].n) {
        k->ti++;
        k->off = 0;
    }
}

/* Is the bucket of len floats at k one contiguous range of memory here? Its start in *p. */
static int bucket_contiguous(const rl_tensor *t, int nt, cursor k, size_t len, float **p)
{
    *p = t[k.ti].data + k.off;
    float *next = *p;
    while (len) {
        size_t take = t[k.ti].n - k.off < len ? t[k.ti].n - k.off : len;
        if (t[k.ti].data + k.off != next)
            return 0;
        next = t[k.ti].data + k.off + take;
        len -= take;
        k.ti++;
        k.off = 0;
        cursor_norm(t, nt, &k);
    }
    return 1;
}

/* Pack n floats into the staging buffer with non-temporal stores where the CPU has them:
 * the packed lines go to memory instead of staying modified in this core's cache, where a
 * receiver on another core would have to fetch them one by one (a broadcast of a 4 MiB
 * buffer just written with memcpy measured 2-4 ms here, 1-2 ms after streaming stores,
 * 0.1-1 ms for one written long before). */
static void pack_floats(float *dst, const float *src, size_t n)
{
#if defined(__SSE2__)
    size_t i = 0;
    for (; i < n && ((uintptr_t)(dst + i) & 15); i++)
        dst[i] = src[i];
    for (; i + 4 <= n; i += 4)
        _mm_stream_ps(dst + i, _mm_loadu_ps(src + i));
    for (; i < n; i++)
        dst[i] = src[i];
#else
    memcpy(dst, src, n * sizeof *dst);
#endif
}

/* Copy the bucket's floats between the tensors and buf: dir 0 packs, 1 unpacks. Returns the
 * number of tensors the bucket touches; k moves past the bucket. */
static int bucket_copy(rl_tensor *t, int nt, cursor *k, size_t len, float *buf, int dir)
{
    int touched = 0;
    while (len) {
        size_t take = t[k->ti].n - k->off < len ? t[k->ti].n - k->off : len;
        float *p = t[k->ti].data + k->off;
        if (dir == 0)
            pack_floats(buf, p, take);
        else if (dir == 1)
            memcpy(p, buf, take * sizeof *buf);
        if (buf)
            buf += take;
        len -= take;
        k->off += take;
        touched++;
        cursor_norm(t, nt, k);
    }
    return touched;
}

static void emit_staging(mlsys_comm *c, const rl_wsync_events *ev, int op, size_t bytes,
                         int blocks, double value)
{
    if (!mlsys_tracing(c))
        return;
    mlsys_mem_info m = {.pool = (int16_t)ev->pool, .op = (int8_t)op, .block = -1, .owner = -1,
                        .refs = 0, .index = -1, .aux = 0};
    if (op == MLSYS_MEM_POOL) {
        m.index = 0;
        m.aux = blocks;
        mlsys_emit_mem(c, &m, bytes, "wsync staging");
    } else if (op == MLSYS_MEM_USAGE) {
        mlsys_emit_mem(c, &m, bytes, "wsync staging");
    } else {
        m.block = 0;
        mlsys_emit_mem_value(c, &m, bytes, NULL, value);
    }
}

/* The buckets themselves, after every rank agreed on the header. */
static int move_buckets(mlsys_comm *c, int root, rl_tensor *t, int nt, size_t bf,
                        uint64_t version, const rl_wsync_events *ev, char *err, size_t errlen)
{
    int me = mlsys_rank(c), rc = 0;
    size_t total = 0;
    for (int i = 0; i < nt; i++)
        total += t[i].n;
    size_t stage_n = bf < total ? bf : total;
    float *stage = NULL;
    cursor k = {0, 0};
    cursor_norm(t, nt, &k);
    size_t nb = (total + bf - 1) / bf;
    for (size_t b = 0; b < nb && rc == 0; b++) {
        size_t len = total - b * bf < bf ? total - b * bf : bf;
        float *p;
        int direct = bucket_contiguous(t, nt, k, len, &p), touched;
        cursor start = k;
        if (!direct && !stage) {
            stage = mlsys_alloc_scratch(stage_n * sizeof *stage);  /* every float written */
            emit_staging(c, ev, MLSYS_MEM_POOL, stage_n * sizeof *stage, 1, 0);
            emit_staging(c, ev, MLSYS_MEM_USAGE, stage_n * sizeof *stage, 0, 0);
        }
        if (direct) {
            cursor e = k;
            touched = bucket_copy(t, nt, &e, len, NULL, 2);     /* count and advance only */
            k = e;
        } else if (me == root) {
            touched = bucket_copy(t, nt, &k, len, stage, 0);
#if defined(__SSE2__)
            _mm_sfence();       /* the streaming stores are visible before the send */
#endif
            p = stage;
        } else {
            cursor e = k;
            touched = bucket_copy(t, nt, &e, len, NULL, 2);
            p = stage;
        }
        if (!direct)
            emit_staging(c, ev, MLSYS_MEM_BUSY, len * sizeof *p, 0, 0);
        rc = mlsys_broadcast(c, p, len, MLSYS_F32, root);
        if (rc != 0) {
            seterr(err, errlen, "rank %d: weight sync v%llu: bucket %zu ('%s', %zu B) failed: "
                   "%s", me, (unsigned long long)version, b, tname(&t[start.ti]),
                   len * sizeof *p, mlsys_errmsg(c));
            break;
        }
        if (!direct && me != root)
            bucket_copy(t, nt, &k, len, stage, 1);
        if (!direct)
            emit_staging(c, ev, MLSYS_MEM_WRITE, len * sizeof *p, 0, (double)b);
        if (me == root && !ev->no_flow && mlsys_tracing(c)) {
            mlsys_flow_info f = {.from = (int16_t)root, .to = -1, .what = MLSYS_FLOW_WEIGHTS,
                                 .phase = -1, .count = touched, .version = (int32_t)version,
                                 .seq = (int32_t)b, .spare = 0};
            mlsys_emit_flow(c, &f, len * sizeof *p, tname(&t[start.ti]));
        }
    }
    if (stage) {
        emit_staging(c, ev, MLSYS_MEM_USAGE, 0, 0, 0);
        emit_staging(c, ev, MLSYS_MEM_POOL, 0, 0, 0);
        mlsys_free_aligned(stage, stage_n * sizeof *stage);
    }
    return rc ? -1 : 0;
}

int rl_wsync(mlsys_comm *comm, int root, rl_tensor *t, int n_tensors, size_t bucket_bytes,
             uint64_t *version, char *err, size_t errlen)
{
    return rl_wsync_with(comm, root, t, n_tensors, bucket_bytes, version, NULL, err, errlen);
}

int rl_wsync_with(mlsys_comm *comm, int root, rl_tensor *t, int n_tensors, size_t bucket_bytes,
                  uint64_t *version, const rl_wsync_events *ev, char *err, size_t errlen)
{
    static const rl_wsync_events plain = {RL_WSYNC_POOL, 0};
    if (!ev)
        ev = &plain;
    if (!comm || !version || root < 0 || root >= mlsys_size(comm) || n_tensors < 0 ||
        (n_tensors > 0 && !t)) {
        seterr(err, errlen, "weight sync: bad arguments (communicator, version, root %d, %d "
               "tensors)", root, n_tensors);
        return -1;
    }
    int me = mlsys_rank(comm), is_root = me == root;
    if (mlsys_size(comm) == 1)
        return 0;
    uint64_t hb[HDR_WORDS + INLINE_WORDS] = {WSYNC_MAGIC, *version, (uint64_t)n_tensors,
                                             bucket_bytes, 0, 0};
    uint64_t *h = hb, *blob = NULL;
    size_t blob_bytes = 0;
    char rootwhy[256] = "";
    if (is_root) {
        blob = blob_build(t, n_tensors, &blob_bytes);
        h[4] = blob_bytes;
        if (blob_bytes <= INLINE_WORDS * 8)
            memcpy(hb + HDR_WORDS, blob, blob_bytes);
        if (bucket_bytes < sizeof(float)) {
            snprintf(rootwhy, sizeof rootwhy, "bucket of %zu B holds no float", bucket_bytes);
            h[5] = ST_ROOT_ARGS;
        }
        for (int i = 0; i < n_tensors && h[5] == ST_OK; i++)
            if (t[i].n && !t[i].data) {
                snprintf(rootwhy, sizeof rootwhy, "tensor '%s' has no data", tname(&t[i]));
                h[5] = ST_ROOT_ARGS;
            }
    }
    /* one broadcast when the sizes and names fit in the header (the usual case), two else */
    int rc = mlsys_broadcast(comm, hb, HDR_WORDS + INLINE_WORDS, MLSYS_I64, root);
    if (rc == 0 && !is_root) {
        if (h[0] != WSYNC_MAGIC || h[4] > (1ull << 30) || h[4] % 8) {
            h[0] = 0;       /* refuse below; the root sends no blob after a bad header */
            h[4] = 0;
        }
        blob_bytes = (size_t)h[4];
        blob = mlsys_xcalloc(blob_bytes / 8 ? blob_bytes / 8 : 1, 8);
        if (blob_bytes <= INLINE_WORDS * 8)
            memcpy(blob, hb + HDR_WORDS, blob_bytes);
    }
    if (rc == 0 && blob_bytes > INLINE_WORDS * 8)
        rc = mlsys_broadcast(comm, blob, blob_bytes / 8, MLSYS_I64, root);
    if (rc != 0) {
        seterr(err, errlen, "rank %d: weight sync: header broadcast from root %d failed: %s",
               me, root, mlsys_errmsg(comm));
        free(blob);
        return -1;
    }
    int st = is_root ? (int)h[5]
                     : check_header(comm, root, h, blob, blob_bytes, t, n_tensors, *version,
                                    err, errlen);
    free(blob);
    int64_t verdict = st ? ((int64_t)st << 32) | me : 0, all = 0;
    if (mlsys_allreduce(comm, &verdict, &all, 1, MLSYS_I64, MLSYS_MAX) != 0) {
        seterr(err, errlen, "rank %d: weight sync: verdict all-reduce failed: %s", me,
               mlsys_errmsg(comm));
        return -1;
    }
    if (all) {
        int who = (int)(all & 0xffffffff), why = (int)(all >> 32);
        if (why == ST_ROOT_ARGS)
            seterr(err, errlen, "rank %d: weight sync v%llu refused: root %d: %s", me,
                   (unsigned long long)h[1], root, is_root ? rootwhy : "bad arguments there");
        else if (st == ST_OK)
            seterr(err, errlen, "rank %d: weight sync v%llu refused by rank %d: %s; nothing "
                   "moved", me, (unsigned long long)h[1], who, status_text(why));
        return -1;
    }
    size_t bf = (size_t)h[3] / sizeof(float);
    if (move_buckets(comm, root, t, n_tensors, bf, h[1], ev, err, errlen) != 0)
        return -1;
    *version = h[1];
    return 0;
}
