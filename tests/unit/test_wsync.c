/* test_wsync.c - core/rl/wsync.c on 1..4 shm ranks: random tensor sets (empty, odd, split and
 * packed tensors) arrive bit for bit for buckets of 1 KiB..16 MiB in separate, contiguous and
 * heap memory, three versions in a row, in 1 + ceil(floats / bucket) broadcasts (2 + when the
 * names outgrow the header); a version that does not advance by one, a size, count or name that
 * differs, a bucket under one float: refused everywhere, tensor named, nothing moved. */
#include "../../core/rl/wsync.h"
#include "rank_fail.h"
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TIMEOUT_MS 20000
#define MAXT 24

enum { MEM_SEPARATE, MEM_CONTIGUOUS, MEM_HEAP, MEM_KINDS };

/* A tensor set drawn from seed: count, sizes and names the same on every rank. */
typedef struct tset {
    int nt;
    rl_tensor t[MAXT];
    char names[MAXT][16];
    float *block;       /* MEM_CONTIGUOUS / MEM_HEAP: the one allocation */
    size_t total;
    int mem;
} tset;

static void tset_make(tset *s, uint64_t seed, int mem, size_t big)
{
    mlsys_rng r;
    mlsys_rng_seed(&r, seed);
    memset(s, 0, sizeof *s);
    s->mem = mem;
    s->nt = 1 + (int)(mlsys_rng_u64(&r) % MAXT);
    for (int i = 0; i < s->nt; i++) {
        uint64_t kind = mlsys_rng_u64(&r) % 6;
        size_t n = kind == 0 ? 0 : kind == 1 ? 1 + mlsys_rng_u64(&r) % 7
                 : kind <= 3 ? 1 + mlsys_rng_u64(&r) % 3000 : 1 + mlsys_rng_u64(&r) % big;
        snprintf(s->names[i], sizeof s->names[i], "t%d.%zu", i, n);
        s->t[i].name = s->names[i];
        s->t[i].n = n;
        s->total += n;
    }
    if (mem == MEM_SEPARATE) {
        for (int i = 0; i < s->nt; i++)
            s->t[i].data = s->t[i].n ? mlsys_xcalloc(s->t[i].n, sizeof(float)) : NULL;
        return;
    }
    s->block = mem == MEM_HEAP ? mlsys_alloc_aligned((s->total + 1) * sizeof(float))
                               : mlsys_xcalloc(s->total + 1, sizeof(float));
    float *p = s->block;
    for (int i = 0; i < s->nt; i++) {
        s->t[i].data = p;
        p += s->t[i].n;
    }
}

static void tset_free(tset *s)
{
    if (s->mem == MEM_SEPARATE)
        for (int i = 0; i < s->nt; i++)
            free(s->t[i].data);
    else if (s->mem == MEM_HEAP)
        mlsys_free_aligned(s->block, (s->total + 1) * sizeof(float));
    else
        free(s->block);
}

/* Random bit patterns (NaNs included): the contents of version v. */
static void tset_fill(tset *s, uint64_t v)
{
    mlsys_rng r;
    mlsys_rng_seed(&r, 1000 + v);
    for (int i = 0; i < s->nt; i++)
        for (size_t j = 0; j < s->t[i].n; j++) {
            uint32_t u = (uint32_t)mlsys_rng_u64(&r);
            memcpy(&s->t[i].data[j], &u, 4);
        }
}

static int tset_equal(const tset *a, const tset *b)
{
    for (int i = 0; i < a->nt; i++)
        if (a->t[i].n && memcmp(a->t[i].data, b->t[i].data, a->t[i].n * sizeof(float)))
            return 0;
    return 1;
}

static const size_t buckets[] = {1024, 1000, 4096 + 12, 65536, 1 << 20, 16u << 20};
#define NBUCKETS ((int)(sizeof buckets / sizeof buckets[0]))

static int delivery_rank(mlsys_comm *c, void *arg)
{
    (void)arg;
    int me = mlsys_rank(c), n = mlsys_size(c), root = n - 1;
    char err[512];
    for (int bi = 0; bi < NBUCKETS; bi++)
        for (int mem = 0; mem < MEM_KINDS; mem++) {
            uint64_t seed = 77 + (uint64_t)bi * 10 + (uint64_t)mem;
            tset s, want;
            size_t big = buckets[bi] < 65536 ? 20000 : 300000;
            tset_make(&s, seed, (mem + me) % MEM_KINDS, big);   /* ranks differ in layout */
            tset_make(&want, seed, MEM_SEPARATE, big);
            uint64_t version = 3;
            for (int it = 0; it < 3; it++) {
                uint64_t v = 4 + (uint64_t)it;
                tset_fill(&want, v);
                if (me == root) {
                    tset_fill(&s, v);
                    version = v;
                }
                mlsys_reset_counters(c);
                int rc = rl_wsync(c, root, s.t, s.nt, buckets[bi], &version, err, sizeof err);
                FAIL_IF(rc != 0, "bucket %zu mem %d: %s", buckets[bi], mem, err);
                FAIL_IF(version != v, "version %llu, want %llu", (unsigned long long)version,
                        (unsigned long long)v);
                FAIL_IF(!tset_equal(&s, &want), "bucket %zu mem %d v%llu: data differs",
                        buckets[bi], mem, (unsigned long long)v);
                size_t bf = buckets[bi] / 4, nb = (s.total + bf - 1) / bf;
                uint64_t calls = mlsys_get_counters(c)->coll_calls[MLSYS_COLL_BROADCAST];
                FAIL_IF(n > 1 && calls != 1 + nb, "%llu broadcasts, want 1 + %zu",
                        (unsigned long long)calls, nb);
                FAIL_IF(rl_wsync_buckets(s.t, s.nt, buckets[bi]) != nb, "bucket count");
            }
            tset_free(&s);
            tset_free(&want);
        }
    return 0;
}

START_TEST(delivery)
{
    char why[512] = "";
    int rc = mlsys_run_fn(_i, TIMEOUT_MS, delivery_rank, NULL, why, sizeof why);
    ck_assert_msg(rc == 0, "%d ranks: %s", _i, why);
}
END_TEST

/* The refusals: case k breaks the last rank's view, then a good sync follows. */
enum { BAD_VERSION, BAD_VERSION_SKIP, BAD_SIZE, BAD_COUNT_FEWER, BAD_COUNT_MORE, BAD_NAME, BAD_BUCKET,
       BAD_CASES };

static int refuse_rank(mlsys_comm *c, void *arg)
{
    int k = *(int *)arg, me = mlsys_rank(c), n = mlsys_size(c), bad = n - 1;
    char err[512] = "";
    tset s;
    tset_make(&s, 5, MEM_SEPARATE, 5000);
    FAIL_IF(s.nt < 3, "the seed gives %d tensors", s.nt);
    for (int i = 0; i < s.nt; i++)      /* every tensor a size that can be broken */
        if (!s.t[i].n) {
            s.t[i].n = 1;
            s.t[i].data = mlsys_xcalloc(1, sizeof(float));
        }
    tset_fill(&s, me == 0 ? 1 : 0);
    uint64_t base = k == BAD_VERSION_SKIP ? 2 : 0, version = me == 0 ? base + 1 : base;
    int nt = s.nt;
    size_t bucket = 4096, saved_n = s.t[1].n;
    if (me == bad) {
        if (k == BAD_VERSION)
            version = 2;                 /* root sends 1: this one expects 3 */
        else if (k == BAD_VERSION_SKIP)
            version = 1;                 /* root sends 3: this one missed version 2 */
        else if (k == BAD_SIZE)
            s.t[1].n -= 1;
        else if (k == BAD_COUNT_FEWER)
            nt -= 1;
        else if (k == BAD_NAME)
            s.t[2].name = "imposter";
    }
    if (k == BAD_COUNT_MORE && me == 0)
        nt -= 1;                         /* the root has one tensor less than the others */
    if (k == BAD_BUCKET && me == 0)
        bucket = 3;
    int rc = rl_wsync(c, 0, s.t, nt, bucket, &version, err, sizeof err);
    FAIL_IF(rc != -1, "case %d: accepted", k);
    uint64_t kept = me == 0 ? base + 1 : me != bad ? base : k == BAD_VERSION ? 2
                  : k == BAD_VERSION_SKIP ? 1 : base;
    FAIL_IF(version != kept,
            "case %d: version changed to %llu", k, (unsigned long long)version);
    tset want;
    tset_make(&want, 5, MEM_SEPARATE, 5000);
    for (int i = 0; i < want.nt; i++)
        if (!want.t[i].n) {
            want.t[i].n = 1;
            want.t[i].data = mlsys_xcalloc(1, sizeof(float));
        }
    tset_fill(&want, me == 0 ? 1 : 0);
    s.t[1].n = saved_n;
    FAIL_IF(!tset_equal(&s, &want), "case %d: data moved on a refused sync", k);
    /* what the messages say */
    char tag[32];
    snprintf(tag, sizeof tag, "rank %d", me);
    FAIL_IF(!strstr(err, tag), "case %d: '%s' does not name rank %d", k, err, me);
    int detailed = k != BAD_BUCKET && (me == bad || (k == BAD_COUNT_MORE && me != 0));
    if (detailed) {
        const char *need[] = {
            [BAD_VERSION] = "version 1", [BAD_VERSION_SKIP] = "version 3", [BAD_SIZE] = "", [BAD_COUNT_FEWER] = "",
            [BAD_COUNT_MORE] = "", [BAD_NAME] = "'imposter'"};
        char tn[64] = "";
        if (k == BAD_VERSION || k == BAD_VERSION_SKIP)
            snprintf(tn, sizeof tn, "'%s'", s.t[0].name);        /* the first tensor */
        else if (k == BAD_SIZE)
            snprintf(tn, sizeof tn, "'%s'", s.t[1].name);
        else if (k == BAD_COUNT_FEWER || k == BAD_COUNT_MORE)
            snprintf(tn, sizeof tn, "'%s'", s.t[s.nt - 1].name);
        else
            snprintf(tn, sizeof tn, "'%s'", s.t[2].name);
        FAIL_IF(!strstr(err, tn) || !strstr(err, need[k]), "case %d: '%s' lacks %s %s", k, err,
                tn, need[k]);
        if (k == BAD_VERSION || k == BAD_VERSION_SKIP)
            FAIL_IF(!strstr(err, k == BAD_VERSION ? "holds 2 (expects 3)" : "holds 1 (expects 2)"),
                    "case %d: '%s'", k, err);
        if (k == BAD_SIZE) {
            char sz[64];
            snprintf(sz, sizeof sz, "%zu floats here, %zu on root", saved_n - 1, saved_n);
            FAIL_IF(!strstr(err, sz), "case %d: '%s' lacks '%s'", k, err, sz);
        }
    } else if (k == BAD_BUCKET) {
        FAIL_IF(!strstr(err, "root 0"), "case %d: '%s'", k, err);
        FAIL_IF(me == 0 && !strstr(err, "bucket of 3 B"), "case %d: '%s'", k, err);
    } else {
        snprintf(tag, sizeof tag, "refused by rank %d", bad);
        FAIL_IF(!strstr(err, tag), "case %d: '%s' lacks '%s'", k, err, tag);
    }
    /* the communicator is still in step: a good sync goes through */
    version = me == 0 ? 1 : 0;
    s.t[2].name = want.t[2].name;
    tset_fill(&want, 1);
    FAIL_IF(rl_wsync(c, 0, s.t, s.nt, 4096, &version, err, sizeof err) != 0, "after case %d: %s",
            k, err);
    FAIL_IF(version != 1 || !tset_equal(&s, &want), "after case %d: wrong delivery", k);
    tset_free(&s);
    tset_free(&want);
    return 0;
}

START_TEST(refusals)
{
    for (int n = 2; n <= 4; n++)
        for (int k = 0; k < BAD_CASES; k++) {
            char why[512] = "";
            int rc = mlsys_run_fn(n, TIMEOUT_MS, refuse_rank, &k, why, sizeof why);
            ck_assert_msg(rc == 0, "%d ranks, case %d: %s", n, k, why);
        }
}
END_TEST

/* 300 tensors with long names: the names travel in a second header broadcast. */
static int big_header_rank(mlsys_comm *c, void *arg)
{
    (void)arg;
    enum { NT = 300 };
    static char names[NT][40];
    static float data[NT][3], want[NT][3];
    rl_tensor t[NT];
    int me = mlsys_rank(c);
    for (int i = 0; i < NT; i++) {
        snprintf(names[i], sizeof names[i], "layers.%03d.attention.wq.weight", i);
        for (int j = 0; j < 3; j++) {
            want[i][j] = (float)(i * 3 + j) + 0.5f;
            data[i][j] = me == 0 ? want[i][j] : -1.0f;
        }
        t[i] = (rl_tensor){names[i], data[i], (size_t)(i % 4 == 3 ? 0 : 3)};
    }
    char err[256];
    uint64_t v = me == 0 ? 1 : 0;
    mlsys_reset_counters(c);
    FAIL_IF(rl_wsync(c, 0, t, NT, 64, &v, err, sizeof err) != 0, "%s", err);
    size_t floats = 0;
    for (int i = 0; i < NT; i++)
        floats += t[i].n;
    uint64_t calls = mlsys_get_counters(c)->coll_calls[MLSYS_COLL_BROADCAST];
    FAIL_IF(calls != 2 + (floats + 15) / 16, "%llu broadcasts for %zu floats",
            (unsigned long long)calls, floats);
    for (int i = 0; i < NT; i++)
        FAIL_IF(t[i].n && memcmp(data[i], want[i], sizeof want[i]), "tensor %d differs", i);
    names[NT - 1][0] = me == 2 ? 'X' : 'l';         /* a name deep in the second blob */
    v = me == 0 ? 2 : 1;
    int rc = rl_wsync(c, 0, t, NT, 64, &v, err, sizeof err);
    FAIL_IF(rc != -1, "a differing name accepted");
    FAIL_IF(me == 2 && !strstr(err, "'Xayers.299.attention.wq.weight' here"), "%s", err);
    return 0;
}

START_TEST(big_header)
{
    char why[512] = "";
    ck_assert_msg(mlsys_run_fn(3, TIMEOUT_MS, big_header_rank, NULL, why, sizeof why) == 0,
                  "%s", why);
}
END_TEST

static int one_rank(mlsys_comm *c, void *arg)
{
    (void)arg;
    char err[128];
    float x = 1;
    rl_tensor t = {"x", &x, 1};
    uint64_t v = 7;
    FAIL_IF(rl_wsync(c, 0, &t, 1, 4096, &v, err, sizeof err) != 0 || v != 7, "one rank");
    FAIL_IF(rl_wsync(c, 1, &t, 1, 4096, &v, err, sizeof err) != -1, "root out of range");
    return 0;
}

START_TEST(single_rank_and_args)
{
    char why[512] = "";
    ck_assert_msg(mlsys_run_fn(1, TIMEOUT_MS, one_rank, NULL, why, sizeof why) == 0, "%s", why);
    rl_tensor t = {"x", NULL, 0};
    ck_assert_uint_eq(rl_wsync_buckets(&t, 1, 4096), 0);
    rl_tensor u[2] = {{"a", NULL, 1025}, {"b", NULL, 1024}};
    ck_assert_uint_eq(rl_wsync_buckets(u, 2, 4096), 3);     /* 2049 floats, 1024 a bucket */
}
END_TEST

static Suite *wsync_suite(void)
{
    Suite *s = suite_create("wsync");
    TCase *d = tcase_create("delivery");
    tcase_add_loop_test(d, delivery, 1, 5);
    tcase_set_timeout(d, 120);
    suite_add_tcase(s, d);
    TCase *r = tcase_create("refusals");
    tcase_add_test(r, refusals);
    tcase_add_test(r, single_rank_and_args);
    tcase_add_test(r, big_header);
    tcase_set_timeout(r, 60);
    suite_add_tcase(s, r);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(wsync_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
