/* test_paged_promises.c - promises of the paged KV cache (core/llm/paged.c) that other tests
 * let slip: a hash hit is confirmed by the tokens (with 2-bit test hashes every chain
 * collides, and no block of another content is shared); a released prefix goes back last
 * block first, so one eviction takes its tail and keeps its head findable; a match says
 * how many of its hits come out of the pool; and the copy-on-write event names the block
 * copied and the copy, so that a map rebuilt from the cache's own events equals the tables
 * after a real fork. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include "../../core/llm/engine.h"

static llm_config small_config(void)
{
    llm_config c = {.dim = 8, .hidden_dim = 8, .n_layers = 1, .n_heads = 2, .n_kv_heads = 1,
                    .vocab_size = 64, .seq_len = 64};
    char err[256];
    ck_assert_msg(llm_config_check(&c, err, sizeof err) == 0, "%s", err);
    return c;
}

/* A sequence holding tok[0..n) with its full blocks registered. */
static void fill(llm_kv *kv, int seq, const int *tok, int n)
{
    ck_assert(kv->ops->reserve(kv, seq, n) == 0);
    llm_paged_commit(kv, seq, tok, n);
}

START_TEST(collisions_never_share)
{
    llm_config c = small_config();
    char err[256];
    llm_kv kv;
    llm_paged_opts po = {.block_size = 4, .n_blocks = 32, .n_seqs = 4, .hash_bits = 2};
    ck_assert(llm_kv_init_paged(&kv, &c, &po, err, sizeof err) == 0);
    /* eight prompts of three full blocks (+1 token): with four hash values, first blocks of
     * different content collide */
    int tok[8][13];
    for (int k = 0; k < 8; k++)
        for (int i = 0; i < 13; i++)
            tok[k][i] = 1 + (k * 7 + i * 3) % 60;
    int collided = 0;
    for (int a = 0; a < 8; a++)
        for (int b = a + 1; b < 8; b++)
            collided += (llm_paged_hash(LLM_PAGED_ROOT_HASH, tok[a], 4) & 3) ==
                        (llm_paged_hash(LLM_PAGED_ROOT_HASH, tok[b], 4) & 3);
    ck_assert_int_gt(collided, 0);        /* the test means something */
    for (int k = 0; k < 8; k++) {
        /* before prompt k is in, it finds nothing, whatever collides with it */
        ck_assert_int_eq(llm_paged_match(&kv, tok[k], 13, NULL), 0);
        fill(&kv, 0, tok[k], 13);
        kv.ops->release(&kv, 0);
        /* and afterwards every prompt in so far finds exactly its own three blocks */
        for (int j = 0; j <= k; j++)
            ck_assert_int_eq(llm_paged_match(&kv, tok[j], 13, NULL), 12);
    }
    /* a prompt whose first block is prompt 0's and whose second differs: one block */
    int mix[13];
    memcpy(mix, tok[0], sizeof mix);
    mix[5] = 63;
    ck_assert_int_eq(llm_paged_match(&kv, mix, 13, NULL), 4);
    ck_assert(llm_paged_check(&kv, err, sizeof err) == 0);
    llm_kv_free(&kv);
}
END_TEST

/* A 3-block prefix (+ a partial block) released, then a sequence that needs every free block
 * and one cached one: the tail block goes, the first two blocks are still found. */
START_TEST(release_order_keeps_the_head)
{
    llm_config c = small_config();
    char err[256];
    llm_kv kv;
    llm_paged_opts po = {.block_size = 4, .n_blocks = 5, .n_seqs = 2};
    ck_assert(llm_kv_init_paged(&kv, &c, &po, err, sizeof err) == 0);
    int tok[14];
    for (int i = 0; i < 14; i++)
        tok[i] = 1 + i;
    fill(&kv, 0, tok, 14);                /* blocks A B C (full) D (2 of 4), one never used */
    kv.ops->release(&kv, 0);
    ck_assert_int_eq(llm_paged_match(&kv, tok, 14, NULL), 12);
    /* three blocks: the unused one and D (nothing cached in them) first, then one cached */
    ck_assert(kv.ops->reserve(&kv, 1, 12) == 0);
    ck_assert_int_eq(llm_paged_match(&kv, tok, 14, NULL), 8);
    ck_assert(kv.ops->reserve(&kv, 1, 16) == 0);   /* the next eviction: B */
    ck_assert_int_eq(llm_paged_match(&kv, tok, 14, NULL), 4);
    llm_kv_free(&kv);
}
END_TEST

/* from_pool: the hits nobody holds (taking them uses up the pool like an allocation). */
START_TEST(from_pool_counted)
{
    llm_config c = small_config();
    char err[256];
    llm_kv kv;
    llm_paged_opts po = {.block_size = 4, .n_blocks = 8, .n_seqs = 3};
    ck_assert(llm_kv_init_paged(&kv, &c, &po, err, sizeof err) == 0);
    int tok[13];
    for (int i = 0; i < 13; i++)
        tok[i] = 2 + i;
    fill(&kv, 0, tok, 13);
    int fp = -1;
    ck_assert_int_eq(llm_paged_match(&kv, tok, 13, &fp), 12);
    ck_assert_int_eq(fp, 0);              /* sequence 0 holds all three */
    kv.ops->release(&kv, 0);
    ck_assert_int_eq(llm_paged_match(&kv, tok, 13, &fp), 12);
    ck_assert_int_eq(fp, 3);              /* all three wait in the pool */
    /* sequence 1 takes the first two again (a prompt of 9 tokens: two full blocks) */
    ck_assert_int_eq(llm_paged_attach(&kv, 1, tok, 9), 8);
    ck_assert_int_eq(llm_paged_match(&kv, tok, 13, &fp), 12);
    ck_assert_int_eq(fp, 1);
    llm_kv_free(&kv);
}
END_TEST

/* ---- the copy-on-write event, from a real fork in a job ---- */
typedef struct cow_shared {
    int n_tab[2], tab[2][8];      /* the tables at the end, as the rank saw them */
    int done;
} cow_shared;
static cow_shared *g_shared;
static int g_map[4][8], g_cows, g_cow_src, g_cow_dst;

static int cow_rank(mlsys_comm *comm, void *u)
{
    (void)u;
    llm_config c = small_config();
    char err[256];
    llm_kv kv;
    llm_paged_opts po = {.block_size = 4, .n_blocks = 8, .n_seqs = 2, .comm = comm};
    if (llm_kv_init_paged(&kv, &c, &po, err, sizeof err))
        return 1;
    int tok[6] = {1, 2, 3, 4, 5, 6};
    if (kv.ops->reserve(&kv, 0, 6))       /* one full block and a partial one */
        return 1;
    llm_paged_commit(&kv, 0, tok, 6);
    if (llm_paged_fork(&kv, 0, 1, 6) || kv.ops->reserve(&kv, 1, 7))   /* the child writes */
        return 1;
    for (int s = 0; s < 2; s++) {
        const int *b;
        int n;
        llm_paged_table(&kv, s, &b, &n);
        g_shared->n_tab[s] = n;
        memcpy(g_shared->tab[s], b, (size_t)n * sizeof(int));
    }
    g_shared->done = 1;
    llm_kv_free(&kv);
    return 0;
}

static void cow_sink(void *u, const mlsys_event *ev, size_t n)
{
    (void)u;
    for (size_t i = 0; i < n; i++) {
        const mlsys_mem_info *m = &ev[i].mem;
        if (ev[i].kind != MLSYS_EV_MEM || m->owner < 0 || m->owner > 3 || m->index < 0 ||
            m->index > 7)
            continue;
        if (m->op == MLSYS_MEM_ALLOC || m->op == MLSYS_MEM_SHARE)
            g_map[m->owner][m->index] = m->block;
        if (m->op == MLSYS_MEM_COW) {
            g_map[m->owner][m->index] = m->aux;
            g_cows++;
            g_cow_src = m->block;
            g_cow_dst = m->aux;
        }
    }
}

START_TEST(cow_event_names_source_and_copy)
{
    g_shared = mmap(NULL, sizeof *g_shared, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
                    -1, 0);
    ck_assert(g_shared != MAP_FAILED);
    memset(g_map, 0xff, sizeof g_map);
    char why[256] = "";
    mlsys_launch_opts o = {.world_size = 1, .timeout_ms = 30000, .trace_capacity = 1024};
    mlsys_job *j = mlsys_job_start(&o, NULL, cow_rank, NULL, why, sizeof why);
    ck_assert_msg(j != NULL, "%s", why);
    mlsys_job_sink sink = {NULL, cow_sink, NULL};
    ck_assert_msg(mlsys_job_wait(j, &sink, -1, why, sizeof why) == 0, "%s", why);
    mlsys_job_free(j);
    ck_assert(g_shared->done);
    ck_assert_int_eq(g_cows, 1);
    /* the parent keeps the block copied, the child holds the copy */
    ck_assert_int_eq(g_shared->tab[0][1], g_cow_src);
    ck_assert_int_eq(g_shared->tab[1][1], g_cow_dst);
    ck_assert_int_ne(g_cow_src, g_cow_dst);
    for (int s = 0; s < 2; s++)
        for (int i = 0; i < g_shared->n_tab[s]; i++)
            ck_assert_msg(g_map[s][i] == g_shared->tab[s][i], "sequence %d entry %d: the events "
                          "say block %d, the table holds %d", s, i, g_map[s][i],
                          g_shared->tab[s][i]);
    munmap(g_shared, sizeof *g_shared);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("paged_promises");
    TCase *tc = tcase_create("paged");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, collisions_never_share);
    tcase_add_test(tc, release_order_keeps_the_head);
    tcase_add_test(tc, from_pool_counted);
    tcase_add_test(tc, cow_event_names_source_and_copy);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
