/* tp_step.c - a serving step's forward on tensor-parallel ranks (tp_step.h): the leader's
 * message, the followers' loop and the followers' cache, which knows no allocator and maps
 * (seq, pos) to the slot the leader's map gave. The message, in int32: the row count n (-1:
 * stop) and the payload's length; then the rows' sequences, positions, tokens and wanted
 * flags, and for every sequence of the step the slots of its positions 0..p (p its last row's
 * position), which is every slot the forward reads or writes for it. */
#include "tp_step.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the follower's cache ---- */

typedef struct kv_follow {
    int max_len;
    int *slot;                /* [n_seqs, max_len] the leader's slot of (seq, pos), -1 none */
} kv_follow;

static int follow_reserve(llm_kv *kv, int seq, int n)
{
    (void)kv;
    (void)seq;
    (void)n;
    return 0;                 /* the leader reserved: its slots arrive with each step */
}

static int follow_slot(const llm_kv *kv, int seq, int pos)
{
    const kv_follow *f = kv->impl;
    if (seq < 0 || seq >= kv->n_seqs || pos < 0 || pos >= f->max_len)
        return -1;
    return f->slot[(size_t)seq * f->max_len + pos];
}

static void follow_release(llm_kv *kv, int seq)
{
    kv_follow *f = kv->impl;
    if (seq >= 0 && seq < kv->n_seqs)
        for (int p = 0; p < f->max_len; p++)
            f->slot[(size_t)seq * f->max_len + p] = -1;
}

static void follow_destroy(llm_kv *kv)
{
    kv_follow *f = kv->impl;
    if (f)
        free(f->slot);
    free(f);
}

static const llm_kv_ops follow_ops = {
    "follower", follow_reserve, follow_slot, follow_release, follow_destroy,
};

int llm_tp_follower_kv(llm_kv *kv, const llm_config *c, int tp_size, int n_seqs, int n_slots,
                       int max_len, char *err, size_t errlen)
{
    memset(kv, 0, sizeof *kv);
    if (tp_size < 1 || c->n_kv_heads % tp_size || n_seqs < 1 || n_slots < 1 || max_len < 1 ||
        max_len > c->seq_len || (long long)n_seqs * max_len > (1LL << 30)) {
        snprintf(err, errlen, "follower cache: %d sequences of %d positions in %d slots over "
                 "%d ranks: out of range", n_seqs, max_len, n_slots, tp_size);
        return -1;
    }
    kv->n_layers = c->n_layers;
    kv->kv_dim = c->kv_dim / tp_size;
    kv->n_seqs = n_seqs;
    kv->n_slots = n_slots;
    size_t per = (size_t)c->n_layers * (size_t)n_slots * (size_t)kv->kv_dim;
    kv->bytes = 2 * per * sizeof(float);
    if (kv->bytes > mlsys_mem_available()) {
        char a[32];
        mlsys_format_approx((double)kv->bytes, a, sizeof a);
        snprintf(err, errlen, "follower cache: %s, more than this machine has free", a);
        return -1;
    }
    kv->k = mlsys_xcalloc(2 * per, sizeof(float));
    kv->v = kv->k + per;
    kv_follow *f = mlsys_xcalloc(1, sizeof *f);
    f->max_len = max_len;
    f->slot = mlsys_xmalloc((size_t)n_seqs * max_len * sizeof(int));
    for (size_t i = 0; i < (size_t)n_seqs * max_len; i++)
        f->slot[i] = -1;
    kv->impl = f;
    kv->ops = &follow_ops;
    return 0;
}

/* ---- the leader ---- */

int llm_tp_lead_forward(llm_fwd *e, llm_kv *kv, int n, const int *seq, const int *pos,
                        const int *tok, const unsigned char *want, float *logits, char *err,
                        size_t errlen)
{
    if (!e->tp)
        return llm_forward(e, kv, n, seq, pos, tok, want, logits, err, errlen);
    /* the step's sequences and the last position each reaches */
    int *last = mlsys_xmalloc(2 * (size_t)(n > 0 ? n : 1) * sizeof(int)), *ids = last + n;
    int nseq = 0;
    size_t len = 4 * (size_t)n;
    for (int r = 0; r < n; r++) {
        int k = 0;
        while (k < nseq && ids[k] != seq[r])
            k++;
        if (k == nseq) {
            ids[nseq] = seq[r];
            last[nseq++] = pos[r];
        } else if (pos[r] > last[k]) {
            last[k] = pos[r];
        }
    }
    for (int k = 0; k < nseq; k++)
        len += 2 + (size_t)last[k] + 1;
    int32_t head[2] = {n, (int32_t)len};
    int32_t *msg = mlsys_xmalloc((len > 0 ? len : 1) * sizeof *msg), *p = msg;
    for (int r = 0; r < n; r++) {
        p[r] = seq[r];
        p[n + r] = pos[r];
        p[2 * n + r] = tok[r];
        p[3 * n + r] = !want || want[r];
    }
    p += 4 * (size_t)n;
    for (int k = 0; k < nseq; k++) {
        *p++ = ids[k];
        *p++ = last[k] + 1;
        for (int t = 0; t <= last[k]; t++)
            *p++ = kv->ops->slot(kv, ids[k], t);
    }
    int rc = -1;
    if (mlsys_broadcast(e->tp, head, 2, MLSYS_I32, 0) ||
        (len && mlsys_broadcast(e->tp, msg, len, MLSYS_I32, 0)))
        snprintf(err, errlen, "tensor parallelism: sending the step's rows: %s",
                 mlsys_errmsg(e->tp));
    else
        rc = llm_forward(e, kv, n, seq, pos, tok, want, logits, err, errlen);
    free(msg);
    free(last);
    return rc;
}

int llm_tp_lead_stop(llm_fwd *e)
{
    int32_t head[2] = {-1, 0};
    return e->tp ? mlsys_broadcast(e->tp, head, 2, MLSYS_I32, 0) : 0;
}

/* ---- a follower ---- */

/* A broadcast from the leader that may be long in coming (the next step of an idle server,
 * the next engine): no deadlock timeout while it waits; a torn-down job still ends it. */
static int wait_leader(mlsys_comm *tp, int32_t *buf, size_t n)
{
    int limit = mlsys_timeout_ms(tp);
    mlsys_set_timeout_ms(tp, 0);
    int rc = mlsys_broadcast(tp, buf, n, MLSYS_I32, 0);
    mlsys_set_timeout_ms(tp, limit);
    return rc;
}

int llm_tp_follow(llm_fwd *e, llm_kv *kv, float *logits, long *steps, char *err,
                  size_t errlen)
{
    kv_follow *f = kv->impl;
    int32_t *msg = NULL;
    size_t cap = 0;
    unsigned char *want = NULL;
    int rc = -1;
    *steps = 0;
    if (kv->ops != &follow_ops || !e->tp) {
        snprintf(err, errlen, "tensor parallelism: a follower needs its group and a follower "
                 "cache");
        return -1;
    }
    for (;;) {
        int32_t head[2];
        if (wait_leader(e->tp, head, 2)) {
            snprintf(err, errlen, "rank %d: waiting for the leader's step: %s",
                     mlsys_rank(e->tp), mlsys_errmsg(e->tp));
            break;
        }
        int n = head[0];
        size_t len = (size_t)(uint32_t)head[1];
        if (n < 0) {
            rc = 0;                                 /* the leader stopped */
            break;
        }
        if (len > cap) {
            free(msg);
            msg = mlsys_xmalloc(len * sizeof *msg);
            cap = len;
            free(want);
            want = mlsys_xmalloc(len);          /* len >= 4n */
        }
        if (len && mlsys_broadcast(e->tp, msg, len, MLSYS_I32, 0)) {
            snprintf(err, errlen, "rank %d: receiving the step's rows: %s", mlsys_rank(e->tp),
                     mlsys_errmsg(e->tp));
            break;
        }
        const int32_t *seq = msg, *pos = msg + n, *tok = msg + 2 * (size_t)n;
        for (int r = 0; r < n; r++)
            want[r] = (unsigned char)msg[3 * (size_t)n + r];
        int bad = 0;
        for (const int32_t *p = msg + 4 * (size_t)n; p < msg + len && !bad;) {
            int s = p[0], cnt = p[1];
            if (s < 0 || s >= kv->n_seqs || cnt < 0 || cnt > f->max_len ||
                p + 2 + cnt > msg + len) {
                bad = 1;
                break;
            }
            memcpy(f->slot + (size_t)s * f->max_len, p + 2, (size_t)cnt * sizeof(int));
            p += 2 + cnt;
        }
        if (bad) {
            snprintf(err, errlen, "rank %d: a malformed step from the leader", mlsys_rank(e->tp));
            break;
        }
        if (llm_forward(e, kv, n, seq, pos, tok, want, logits, err, errlen))
            break;
        (*steps)++;
    }
    free(msg);
    free(want);
    return rc;
}

/* ---- engine after engine ---- */

enum { SHAPE_MORE, SHAPE_SEQS, SHAPE_SLOTS, SHAPE_LEN, SHAPE_ROWS, SHAPE_LOGITS, SHAPE_N };

int llm_tp_announce(const llm_config *c, llm_engine_opts *o, char *err, size_t errlen)
{
    llm_tp_shape sh;
    if (!o->tp) {
        snprintf(err, errlen, "tensor parallelism: no group to announce the engine to");
        return -1;
    }
    if (llm_engine_tp_shape(c, o, &sh, err, errlen))
        return -1;
    int32_t m[SHAPE_N] = {1, sh.max_num_seqs, sh.n_slots, sh.max_model_len, sh.fwd_rows,
                          sh.max_logits};
    if (mlsys_size(o->tp) > 1 && mlsys_broadcast(o->tp, m, SHAPE_N, MLSYS_I32, 0)) {
        snprintf(err, errlen, "tensor parallelism: announcing the engine: %s",
                 mlsys_errmsg(o->tp));
        return -1;
    }
    return 0;
}

int llm_tp_announce_cancel(mlsys_comm *tp)
{
    int32_t head[2] = {-1, 0};
    return mlsys_size(tp) > 1 ? mlsys_broadcast(tp, head, 2, MLSYS_I32, 0) : 0;
}

int llm_tp_announce_end(mlsys_comm *tp)
{
    int32_t m[SHAPE_N] = {0};
    return mlsys_size(tp) > 1 ? mlsys_broadcast(tp, m, SHAPE_N, MLSYS_I32, 0) : 0;
}

int llm_tp_follow_engines(mlsys_comm *tp, const llm_config *c, const llm_weights *w,
                          long *engines, long *steps, char *err, size_t errlen)
{
    int T = mlsys_size(tp), rank = mlsys_rank(tp);
    long n_eng = 0, n_steps = 0;
    int rc = 0;
    if (rank == 0) {
        snprintf(err, errlen, "tensor parallelism: rank 0 leads; it does not follow");
        return -1;
    }
    for (;;) {
        int32_t m[SHAPE_N];
        if (wait_leader(tp, m, SHAPE_N)) {
            snprintf(err, errlen, "rank %d: waiting for the leader's next engine: %s", rank,
                     mlsys_errmsg(tp));
            rc = -1;
            break;
        }
        if (!m[SHAPE_MORE])
            break;
        if (m[SHAPE_SEQS] < 1 || m[SHAPE_LEN] < 1 || m[SHAPE_LEN] > c->seq_len ||
            m[SHAPE_ROWS] < 1 || m[SHAPE_LOGITS] < 1 || m[SHAPE_LOGITS] > (1 << 20)) {
            snprintf(err, errlen, "rank %d: a malformed engine shape from the leader", rank);
            rc = -1;
            break;
        }
        /* the engine's view of the model: its context cut to max_model_len */
        llm_config cut = *c;
        cut.seq_len = m[SHAPE_LEN];
        llm_fwd e;
        llm_kv kv;
        if (llm_fwd_init_tp(&e, &cut, w, m[SHAPE_ROWS], tp, err, errlen)) {
            rc = -1;
            break;
        }
        if (llm_tp_follower_kv(&kv, &cut, T, m[SHAPE_SEQS], m[SHAPE_SLOTS], m[SHAPE_LEN], err,
                               errlen)) {
            llm_fwd_fini(&e);
            rc = -1;
            break;
        }
        float *logits = mlsys_xmalloc((size_t)m[SHAPE_LOGITS] * c->vocab_size * sizeof *logits);
        long k = 0;
        rc = llm_tp_follow(&e, &kv, logits, &k, err, errlen);
        free(logits);
        llm_kv_free(&kv);
        llm_fwd_fini(&e);
        n_eng++;
        n_steps += k;
        if (rc)
            break;
    }
    if (engines)
        *engines = n_eng;
    if (steps)
        *steps = n_steps;
    return rc;
}
