/* test_paged_kv.c - the paged KV cache (core/llm/paged.c, block_alloc.c): the forward through
 * block tables gives the contiguous cache's logits bit for bit; greedy outputs of the serving
 * engine with block sizes 1, 16 and 64, and with prefix sharing, equal the contiguous cache's
 * on 50 prompts of the shipped model; 10,000 random admit / extend / fork / finish / preempt
 * operations keep every invariant, and every position reads back the keys its own prefix
 * wrote (a wrong share, a missed copy on write or an evicted block in use would not); the
 * LRU allocator's order (chapter 9's exercise scenario); copy on write; eviction order. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "../../core/llm/engine.h"
#include "../../core/nn/nn.h"
#include "ref_decode.h"

#define MODEL "assets/models/model.bin"
#define TOKENIZER "assets/models/tokenizer.bin"

static llm_config g_c;
static llm_weights g_w;
static llm_tokenizer g_t;

static void load(void)
{
    char err[256];
    ck_assert_msg(llm_checkpoint_read(MODEL, &g_c, &g_w, err, sizeof err) == 0, "%s", err);
    ck_assert_msg(llm_tokfile_read(TOKENIZER, 0, &g_t, err, sizeof err) == 0, "%s", err);
    nn_set_gemm_kernel(NN_GEMM_INVARIANT);   /* a row gives the same bits in any batch */
}

static void unload(void)
{
    llm_weights_free(&g_w);
    llm_tokenizer_free(&g_t);
}

/* ---- the forward through block tables ---- */

START_TEST(forward_paged_bitwise_equals_contiguous)
{
    load();
    char err[256];
    for (int kern = 0; kern < 3; kern++) {
        if (kern == 1 && !nn_have_blas())
            continue;
        nn_set_gemm_kernel((nn_gemm_kernel)kern);
        int bss[3] = {1, 16, 64};
        for (int k = 0; k < 3; k++) {
            llm_kv a, b;
            ck_assert(llm_kv_init_contiguous(&a, &g_c, 3, 0, err, sizeof err) == 0);
            llm_paged_opts po = {.block_size = bss[k], .n_seqs = 3};
            ck_assert_msg(llm_kv_init_paged(&b, &g_c, &po, err, sizeof err) == 0, "%s", err);
            llm_fwd e;
            ck_assert(llm_fwd_init(&e, &g_c, &g_w, 64, err, sizeof err) == 0);
            /* three sequences of 40 tokens in one call, then a decode row each */
            int n = 120, seq[120], pos[120], tok[120];
            for (int r = 0; r < n; r++) {
                seq[r] = r / 40;
                pos[r] = r % 40;
                tok[r] = 3 + (r * 37 + seq[r] * 11) % 400;
            }
            float *la = malloc((size_t)n * g_c.vocab_size * sizeof(float));
            float *lb = malloc((size_t)n * g_c.vocab_size * sizeof(float));
            for (int s = 0; s < 3; s++) {
                ck_assert(a.ops->reserve(&a, s, 41) == 0);
                ck_assert(b.ops->reserve(&b, s, 41) == 0);
            }
            ck_assert(llm_forward(&e, &a, n, seq, pos, tok, NULL, la, err, sizeof err) == 0);
            ck_assert(llm_forward(&e, &b, n, seq, pos, tok, NULL, lb, err, sizeof err) == 0);
            ck_assert_msg(!memcmp(la, lb, (size_t)n * g_c.vocab_size * sizeof(float)),
                          "block size %d, %s kernel: logits differ", bss[k],
                          nn_gemm_kernel_name((nn_gemm_kernel)kern));
            int s3[3] = {0, 1, 2}, p3[3] = {40, 40, 40}, t3[3] = {7, 8, 9};
            ck_assert(llm_forward(&e, &a, 3, s3, p3, t3, NULL, la, err, sizeof err) == 0);
            ck_assert(llm_forward(&e, &b, 3, s3, p3, t3, NULL, lb, err, sizeof err) == 0);
            ck_assert(!memcmp(la, lb, 3 * (size_t)g_c.vocab_size * sizeof(float)));
            free(la);
            free(lb);
            llm_fwd_fini(&e);
            llm_kv_free(&a);
            llm_kv_free(&b);
        }
    }
    nn_set_gemm_kernel(NN_GEMM_INVARIANT);
    unload();
}
END_TEST

/* ---- greedy outputs: the engine on pages against the reference on a contiguous cache ---- */

#define NPROMPT 50
#define NEW 12

typedef struct prompts {
    int *ids[NPROMPT];
    int n[NPROMPT];
} prompts;

/* 50 prompts: the beginnings of validation documents of the lab's corpus; with shared, each
 * begins with the same 40-token system prompt (the first document's start). */
static void make_prompts(prompts *p, int shared)
{
    char doc[LLM_DOC_MAX];
    int sys[160], nsys = 0;
    if (shared) {
        llm_corpus_doc(1, LLM_SPLIT_VAL, 999, doc, sizeof doc, NULL);
        nsys = (int)llm_bpe_encode_prompt(&g_t, doc, strlen(doc) < 150 ? strlen(doc) : 150, 1,
                                          sys);
        if (nsys > 40)
            nsys = 40;
    }
    for (int i = 0; i < NPROMPT; i++) {
        size_t len = llm_corpus_doc(1, LLM_SPLIT_VAL, (uint64_t)i, doc, sizeof doc, NULL);
        size_t take = 12 + (size_t)(i * 7) % 40;
        if (take > len)
            take = len;
        p->ids[i] = malloc((take + 2 + 64) * sizeof(int));
        int k = 0;
        if (shared) {
            memcpy(p->ids[i], sys, (size_t)nsys * sizeof(int));
            k = nsys;
            k += (int)llm_bpe_encode(&g_t, doc, take, p->ids[i] + k);
        } else {
            k = (int)llm_bpe_encode_prompt(&g_t, doc, take, 1, p->ids[i]);
        }
        p->n[i] = k;
    }
}

static void free_prompts(prompts *p)
{
    for (int i = 0; i < NPROMPT; i++)
        free(p->ids[i]);
}

/* The reference: each prompt alone on a contiguous cache, greedy (ref_decode.h). */
static void reference(const prompts *p, int out[NPROMPT][NEW], int n_out[NPROMPT])
{
    for (int i = 0; i < NPROMPT; i++) {
        llm_sampler smp;
        llm_sampler_init(&smp, g_c.vocab_size, 0.0f, 0, 1.0f, 1);
        n_out[i] = ref_decode(&g_c, &g_w, &smp, p->ids[i], p->n[i], NEW, 0, out[i]);
        llm_sampler_fini(&smp);
    }
}

typedef struct collected {
    int tok[NPROMPT][NEW];
    int n[NPROMPT];
    int finals[NPROMPT];
} collected;

static void collect(void *u, const llm_engine_event *ev)
{
    collected *c = u;
    if (ev->token >= 0 && c->n[ev->id] < NEW)
        c->tok[ev->id][c->n[ev->id]++] = ev->token;
    if (ev->finish != LLM_FINISH_NONE)
        c->finals[ev->id]++;
}

static void engine_run(const prompts *p, int block_size, int no_prefix, collected *c,
                       llm_engine_metrics *m)
{
    char err[256];
    memset(c, 0, sizeof *c);
    llm_engine_opts o = {.max_num_seqs = 16, .max_num_batched_tokens = 96,
                        .block_size = block_size, .no_prefix_cache = no_prefix};
    llm_engine *s = llm_engine_create(&g_c, &g_w, &o, err, sizeof err);
    ck_assert_msg(s != NULL, "%s", err);
    for (int i = 0; i < NPROMPT; i++) {
        llm_request r = {.prompt = p->ids[i], .n_prompt = p->n[i], .max_tokens = NEW,
                         .ignore_eos = 1, .on_event = collect, .u = c};
        ck_assert_int_eq(llm_engine_submit(s, &r, err, sizeof err), i);
    }
    ck_assert(llm_engine_run(s) > 0);
    llm_engine_metrics_get(s, m);
    ck_assert_int_eq(m->kv_used, 0);
    ck_assert_int_eq(llm_paged_check(llm_engine_kv(s), err, sizeof err), 0);
    llm_engine_free(s);
}

static int ref[NPROMPT][NEW], nref[NPROMPT];    /* the reference of the current prompts */

static void expect_equal(const prompts *p, int bs, int no_prefix, const char *what,
                         llm_engine_metrics *m)
{
    static collected c;
    engine_run(p, bs, no_prefix, &c, m);
    int mism = 0;
    for (int i = 0; i < NPROMPT; i++) {
        ck_assert_int_eq(c.finals[i], 1);
        if (c.n[i] != nref[i] || memcmp(c.tok[i], ref[i], (size_t)nref[i] * sizeof(int)))
            mism++;
    }
    printf("  %s, block size %d: %d/%d prompts equal to the contiguous cache (%s)\n", what, bs,
           NPROMPT - mism, NPROMPT, mism ? "NOT OK" : "OK");
    ck_assert_int_eq(mism, 0);
}

START_TEST(greedy_paged_equals_contiguous)
{
    load();
    prompts p;
    make_prompts(&p, 0);
    reference(&p, ref, nref);
    int bss[3] = {1, 16, 64};
    llm_engine_metrics m;
    for (int k = 0; k < 3; k++)
        expect_equal(&p, bss[k], 1, "paged", &m);
    free_prompts(&p);
    unload();
}
END_TEST

START_TEST(greedy_prefix_sharing_equals_contiguous)
{
    load();
    prompts p;
    make_prompts(&p, 1);
    reference(&p, ref, nref);
    llm_engine_metrics on, off;
    expect_equal(&p, 16, 0, "prefix cache", &on);
    expect_equal(&p, 16, 1, "no prefix cache", &off);
    /* 40 shared tokens = 2 full blocks of 16 hit for every request but the first ones */
    ck_assert_int_gt(on.prefix_hit_tokens, 0);
    ck_assert_int_eq(off.prefix_hit_tokens, 0);
    ck_assert_int_eq(on.prefill_tokens + on.prefix_hit_tokens, off.prefill_tokens);
    printf("  prefix cache: %ld of %ld prompt tokens found cached, %ld prefill rows instead "
           "of %ld\n", on.prefix_hit_tokens, on.prefix_query_tokens, on.prefill_tokens,
           off.prefill_tokens);
    free_prompts(&p);
    unload();
}
END_TEST

/* ---- the property test: 2 x 5,000 operations (block sizes 4 and 3, a pool of 20 blocks
 * for 8 tables of up to 32 positions, so the pool runs out and cached blocks are evicted) */

#define PSEQ 8
#define PLEN 32
typedef struct model_seq {
    int active;               /* holds a table */
    int parked;               /* preempted: tokens kept, no table */
    int tok[PLEN + 8];
    int n;                    /* tokens whose keys are written */
} model_seq;

/* What position p of a sequence must hold: a number made from its whole prefix. */
static float content(const int *tok, int p)
{
    return (float)(llm_paged_hash(7, tok, p + 1) % 1000003);
}

static void write_positions(llm_kv *kv, int s, const int *tok, int from, int to)
{
    for (int p = from; p < to; p++) {
        int sl = kv->ops->slot(kv, s, p);
        ck_assert_int_ge(sl, 0);
        llm_kv_k(kv, 0, sl)[0] = content(tok, p);
        llm_kv_v(kv, 0, sl)[0] = -content(tok, p);
    }
}

static void check_all(llm_kv *kv, model_seq *ms, int op)
{
    char err[256];
    ck_assert_msg(llm_paged_check(kv, err, sizeof err) == 0, "op %d: %s", op, err);
    for (int s = 0; s < PSEQ; s++) {
        if (!ms[s].active) {
            ck_assert_int_eq(llm_paged_table(kv, s, NULL, NULL), 0);
            continue;
        }
        for (int p = 0; p < ms[s].n; p++) {
            int sl = kv->ops->slot(kv, s, p);
            ck_assert_msg(sl >= 0 && llm_kv_k(kv, 0, sl)[0] == content(ms[s].tok, p) &&
                          llm_kv_v(kv, 0, sl)[0] == -content(ms[s].tok, p),
                          "op %d: sequence %d position %d reads another prefix's keys", op, s,
                          p);
        }
    }
}

START_TEST(property_random_ops)
{
    llm_config c = {.dim = 8, .hidden_dim = 8, .n_layers = 2, .n_heads = 2, .n_kv_heads = 1,
                    .vocab_size = 16, .seq_len = PLEN};
    char err[256];
    ck_assert(llm_config_check(&c, err, sizeof err) == 0);
    mlsys_rng r;
    mlsys_rng_seed(&r, 2024);
    long counts[6] = {0}, refused = 0;
    int bss[2] = {4, 3};
    for (int round = 0; round < 2; round++) {
        llm_kv kv;
        llm_paged_opts po = {.block_size = bss[round], .n_blocks = 20, .n_seqs = PSEQ};
        ck_assert(llm_kv_init_paged(&kv, &c, &po, err, sizeof err) == 0);
        model_seq ms[PSEQ];
        memset(ms, 0, sizeof ms);
        long done0 = counts[0] + counts[1] + counts[2] + counts[3] + counts[4];
        for (int op = 0; counts[0] + counts[1] + counts[2] + counts[3] + counts[4] - done0 <
                         5000; op++) {
            int s = (int)(mlsys_rng_u64(&r) % PSEQ);
            int kind = (int)(mlsys_rng_u64(&r) % 6);
            model_seq *m = &ms[s];
            if (kind <= 1 && !m->active) {
                /* admit: a parked sequence again, or a new prompt from two templates (so
                 * prefixes repeat) with a random tail */
                if (!m->parked) {
                    int tmpl = (int)(mlsys_rng_u64(&r) % 2), n = 2 + (int)(mlsys_rng_u64(&r) % 20);
                    for (int i = 0; i < n; i++)
                        m->tok[i] = i < 9 ? (tmpl * 5 + i) % 16 : (int)(mlsys_rng_u64(&r) % 3);
                    m->n = n;
                }
                int hit = llm_paged_attach(&kv, s, m->tok, m->n);
                ck_assert_int_ge(hit, 0);
                ck_assert_int_eq(hit % bss[round], 0);
                ck_assert_int_lt(hit, m->n);
                /* the hit positions must already hold this prefix's keys */
                for (int p = 0; p < hit; p++) {
                    int sl = kv.ops->slot(&kv, s, p);
                    ck_assert(llm_kv_k(&kv, 0, sl)[0] == content(m->tok, p));
                }
                if (kv.ops->reserve(&kv, s, m->n) != 0) {
                    kv.ops->release(&kv, s);
                    refused++;
                } else {
                    write_positions(&kv, s, m->tok, hit, m->n);
                    llm_paged_commit(&kv, s, m->tok, m->n);
                    m->active = 1;
                    m->parked = 0;
                }
                counts[0]++;
            } else if (kind == 2 && m->active && m->n < PLEN) {
                /* extend by 1..4 new tokens */
                int k = 1 + (int)(mlsys_rng_u64(&r) % 4);
                if (m->n + k > PLEN)
                    k = PLEN - m->n;
                for (int i = 0; i < k; i++)
                    m->tok[m->n + i] = (int)(mlsys_rng_u64(&r) % 3);
                if (kv.ops->reserve(&kv, s, m->n + k) != 0) {
                    refused++;
                } else {
                    write_positions(&kv, s, m->tok, m->n, m->n + k);
                    m->n += k;
                    llm_paged_commit(&kv, s, m->tok, m->n);
                }
                counts[1]++;
            } else if (kind == 3 && m->active) {
                /* fork a prefix (all of it, or its first positions) into an empty table */
                int ch = (int)(mlsys_rng_u64(&r) % PSEQ);
                if (!ms[ch].active && ch != s) {
                    int nf = mlsys_rng_u64(&r) % 2 ? m->n
                                                   : 1 + (int)(mlsys_rng_u64(&r) % (uint64_t)m->n);
                    ck_assert(llm_paged_fork(&kv, s, ch, m->n + 1) == -1);
                    ck_assert(llm_paged_fork(&kv, s, ch, nf) == 0);
                    ms[ch] = *m;
                    ms[ch].n = nf;
                    counts[2]++;
                }
            } else if (kind == 4 && m->active) {
                kv.ops->release(&kv, s);      /* finish */
                m->active = m->parked = 0;
                counts[3]++;
            } else if (kind == 5 && m->active) {
                kv.ops->release(&kv, s);      /* preempt: recomputed at its next admission */
                m->active = 0;
                m->parked = 1;
                counts[4]++;
            }
            check_all(&kv, ms, op);
        }
        llm_paged_stats st;
        llm_paged_stats_get(&kv, &st);
        printf("  block size %d: %ld blocks handed out, %ld prefix hits, %ld evictions, %ld "
               "copies on write\n", bss[round], st.allocs, st.hits, st.evictions, st.cows);
        ck_assert_int_gt(st.hits, 0);
        ck_assert_int_gt(st.evictions, 0);
        ck_assert_int_gt(st.cows, 0);
        for (int s = 0; s < PSEQ; s++)
            kv.ops->release(&kv, s);
        llm_paged_stats_get(&kv, &st);
        ck_assert_int_eq(st.used, 0);
        ck_assert_int_eq(st.free + st.cached, st.n_blocks);
        ck_assert(llm_paged_check(&kv, err, sizeof err) == 0);
        llm_kv_free(&kv);
    }
    printf("  operations: %ld admit, %ld extend, %ld fork, %ld finish, %ld preempt (%ld "
           "refused: pool full)\n", counts[0], counts[1], counts[2], counts[3], counts[4],
           refused);
    ck_assert_int_eq(counts[0] + counts[1] + counts[2] + counts[3] + counts[4], 10000);
}
END_TEST

/* The checker itself catches a table entry duplicated (a block held twice, another leaked)
 * and an entry pointing at a block still in the pool: each mutation of a good state is
 * reported. */
static void corrupt_and_expect(int which)
{
    llm_config c = {.dim = 8, .hidden_dim = 8, .n_layers = 1, .n_heads = 2, .n_kv_heads = 1,
                    .vocab_size = 16, .seq_len = 16};
    char err[256];
    ck_assert(llm_config_check(&c, err, sizeof err) == 0);
    llm_kv kv;
    llm_paged_opts po = {.block_size = 4, .n_blocks = 8, .n_seqs = 2};
    ck_assert(llm_kv_init_paged(&kv, &c, &po, err, sizeof err) == 0);
    ck_assert(kv.ops->reserve(&kv, 0, 9) == 0);
    ck_assert(llm_paged_check(&kv, err, sizeof err) == 0);
    const int *blk;
    llm_paged_table(&kv, 0, &blk, NULL);
    int *t = (int *)blk, saved[3] = {t[0], t[1], t[2]};
    if (which == 0)
        t[1] = t[0];
    else
        t[2] = 7;
    ck_assert_msg(llm_paged_check(&kv, err, sizeof err) != 0, "mutation %d not caught", which);
    printf("  mutation %d caught: %s\n", which, err);
    memcpy(t, saved, sizeof saved);
    ck_assert(llm_paged_check(&kv, err, sizeof err) == 0);
    llm_kv_free(&kv);
}

START_TEST(checker_catches_corruption)
{
    corrupt_and_expect(0);
    corrupt_and_expect(1);
}
END_TEST

/* ---- the LRU allocator: chapter 9's exercise scenario on blocks ---- */

START_TEST(lru_allocator_order)
{
    const llm_block_alloc_ops *a = &llm_block_alloc_lru;
    void *st = a->create(3);
    /* A, B, C handed out (0, 1, 2); the pool is empty */
    ck_assert_int_eq(a->get(st), 0);
    ck_assert_int_eq(a->get(st), 1);
    ck_assert_int_eq(a->get(st), 2);
    ck_assert_int_eq(a->get(st), -1);
    ck_assert_int_eq(a->count(st), 0);
    /* released in the order C, A (both cached), B stays pinned */
    a->put(st, 2, 1);
    a->put(st, 0, 1);
    /* A is used again (a prefix hit): it leaves the pool */
    a->take(st, 0);
    a->put(st, 0, 1);
    /* now C is the least recently released: D evicts C */
    ck_assert_int_eq(a->get(st), 2);
    ck_assert_int_eq(a->get(st), 0);
    ck_assert_int_eq(a->get(st), -1);    /* B is pinned: nothing evictable */
    /* an uncached block goes before any cached one */
    a->put(st, 1, 1);
    a->put(st, 2, 0);
    ck_assert_int_eq(a->count(st), 2);
    ck_assert_int_eq(a->get(st), 2);
    ck_assert_int_eq(a->get(st), 1);
    a->destroy(st);
}
END_TEST

/* ---- copy on write, eviction order, the hash check ---- */

START_TEST(cow_and_eviction)
{
    llm_config c = {.dim = 8, .hidden_dim = 8, .n_layers = 2, .n_heads = 2, .n_kv_heads = 1,
                    .vocab_size = 16, .seq_len = 32};
    char err[256];
    ck_assert(llm_config_check(&c, err, sizeof err) == 0);
    llm_kv kv;
    llm_paged_opts po = {.block_size = 4, .n_blocks = 6, .n_seqs = 4};
    ck_assert(llm_kv_init_paged(&kv, &c, &po, err, sizeof err) == 0);
    int tok[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
    /* sequence 0: 6 positions = one full block + a partial one */
    ck_assert(kv.ops->reserve(&kv, 0, 6) == 0);
    write_positions(&kv, 0, tok, 0, 6);
    llm_paged_commit(&kv, 0, tok, 6);
    ck_assert(llm_paged_fork(&kv, 0, 1, 6) == 0);
    llm_paged_stats st;
    llm_paged_stats_get(&kv, &st);
    ck_assert_int_eq(st.used, 2);
    ck_assert_int_eq(st.shared, 2);
    const int *b0, *b1;
    llm_paged_table(&kv, 0, &b0, NULL);
    llm_paged_table(&kv, 1, &b1, NULL);
    ck_assert_int_eq(b0[1], b1[1]);
    int shared_last = b0[1];
    /* sequence 1 diverges: its partial block is copied, sequence 0's stays */
    int tok1[12] = {1, 2, 3, 4, 5, 6, 15, 15, 15, 15, 15, 15};
    ck_assert(kv.ops->reserve(&kv, 1, 7) == 0);
    llm_paged_table(&kv, 1, &b1, NULL);
    ck_assert_int_ne(b1[1], shared_last);
    ck_assert_int_eq(b0[1], shared_last);
    write_positions(&kv, 1, tok1, 6, 7);
    for (int p = 0; p < 6; p++) {     /* the copy carries the first 6 positions */
        int sl = kv.ops->slot(&kv, 1, p);
        ck_assert(llm_kv_k(&kv, 1, sl)[0] == llm_kv_k(&kv, 1, kv.ops->slot(&kv, 0, p))[0]);
    }
    ck_assert(llm_kv_k(&kv, 0, kv.ops->slot(&kv, 0, 5))[0] == content(tok, 5));
    llm_paged_stats_get(&kv, &st);
    ck_assert_int_eq(st.cows, 1);
    ck_assert_int_eq(st.shared, 1);           /* only the full first block */
    /* sequence 0 writes on: no copy now, the partial block is its own again */
    ck_assert(kv.ops->reserve(&kv, 0, 8) == 0);
    llm_paged_stats_get(&kv, &st);
    ck_assert_int_eq(st.cows, 1);
    ck_assert(llm_paged_check(&kv, err, sizeof err) == 0);

    /* eviction: both finish; the full block {1,2,3,4} stays cached and is found again */
    write_positions(&kv, 0, tok, 6, 8);
    llm_paged_commit(&kv, 0, tok, 8);
    kv.ops->release(&kv, 0);
    kv.ops->release(&kv, 1);
    ck_assert_int_eq(llm_paged_match(&kv, tok, 9, NULL), 8);
    ck_assert_int_eq(llm_paged_match(&kv, tok, 8, NULL), 4);   /* the last token is computed */
    int other[4] = {1, 2, 3, 5};
    ck_assert_int_eq(llm_paged_match(&kv, other, 5, NULL), 0);  /* tokens differ: no hit */
    /* a sequence that needs every block evicts the cached ones, least recently used first:
     * block {5..8} (released first, the tail before the head) before {1..4} */
    ck_assert(kv.ops->reserve(&kv, 2, 4 * 4) == 0);            /* 4 of 6 blocks: the 4 free */
    ck_assert_int_eq(llm_paged_match(&kv, tok, 9, NULL), 8);
    ck_assert(kv.ops->reserve(&kv, 2, 5 * 4) == 0);            /* a 5th: evicts {5..8} */
    ck_assert_int_eq(llm_paged_match(&kv, tok, 9, NULL), 4);
    ck_assert(kv.ops->reserve(&kv, 2, 6 * 4) == 0);            /* a 6th: evicts {1..4} */
    ck_assert_int_eq(llm_paged_match(&kv, tok, 9, NULL), 0);
    ck_assert(kv.ops->reserve(&kv, 2, 7 * 4) != 0);            /* pool empty: refused */
    ck_assert_int_eq(llm_paged_table(&kv, 2, NULL, NULL), 24); /* unchanged */
    llm_paged_stats_get(&kv, &st);
    ck_assert_int_eq(st.evictions, 2);
    ck_assert(llm_paged_check(&kv, err, sizeof err) == 0);
    llm_kv_free(&kv);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("paged_kv");
    TCase *tu = tcase_create("units");
    tcase_set_timeout(tu, 300);
    tcase_add_test(tu, lru_allocator_order);
    tcase_add_test(tu, cow_and_eviction);
    tcase_add_test(tu, checker_catches_corruption);
    tcase_add_test(tu, property_random_ops);
    suite_add_tcase(s, tu);
    TCase *tm = tcase_create("model");
    tcase_set_timeout(tm, 600);
    tcase_add_test(tm, forward_paged_bitwise_equals_contiguous);
    tcase_add_test(tm, greedy_paged_equals_contiguous);
    tcase_add_test(tm, greedy_prefix_sharing_equals_contiguous);
    suite_add_tcase(s, tm);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
