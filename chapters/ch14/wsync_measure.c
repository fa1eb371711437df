/* wsync_measure.c - the measured half of ch14/weight-update-demo: the shipped model's
 * tensors (the actor's weights, read with core/llm) go from rank 0, the trainer, to every
 * other rank, a generator, with rl_wsync (core/rl) for each bucket size asked for, timed
 * beside one plain broadcast of the same bytes; versions checked by rl_wsync itself, the
 * received weights hashed on every rank and compared with the trainer's at the end. For the
 * flow view: two roles, the trainer and the generators, a step of the job per section of the
 * measurement, and one arrow per version of the weights, trainer to generators. */
#include "../common/common.h"
#include "../../core/llm/model.h"
#include "../../core/rl/wsync.h"
#include <stdlib.h>
#include <string.h>

#define LAB_ID "ch14/weight-update-demo"

/* ---- what the flow view draws ---- */

enum { WU_TRAINER, WU_GENERATOR };

/* The two roles, named once (rank 0). */
void ch14_wu_roles(mlsys_comm *c)
{
    if (mlsys_rank(c) != 0)
        return;
    static const char *const name[2] = {"trainer", "generator"};
    for (int r = 0; r < 2; r++) {
        mlsys_flow_info f = {(int16_t)r, -1, MLSYS_FLOW_ROLE, -1, 0, 0, -1, 0};
        mlsys_emit_flow(c, &f, 0, name[r]);
    }
}

/* A section of the measurement: every rank passes a gate (in a gated run the viewer lets it
 * start; the collectives inside mark no steps, see wu_rank), then rank 0 names the phase.
 * 0, or an MLSYS_* code when the job was stopped. */
int ch14_wu_section(mlsys_comm *c, int *gate, const char *label)
{
    int rc = mlsys_step(c, *gate, label);
    if (rc == 0 && mlsys_rank(c) == 0) {
        mlsys_flow_info f = {-1, -1, MLSYS_FLOW_PHASE, (int16_t)*gate, 0, 0, -1, 0};
        mlsys_emit_flow(c, &f, 0, label);
    }
    ++*gate;
    return rc;
}

/* This rank's memory pool (0 the weights, 1 a broadcast buffer) under its role: declared,
 * then bytes in use (0 when it is freed). */
void ch14_wu_mem(mlsys_comm *c, int pool, uint64_t bytes, const char *label)
{
    int role = mlsys_rank(c) == 0 ? WU_TRAINER : WU_GENERATOR;
    mlsys_mem_info m = {.pool = (int16_t)pool, .op = MLSYS_MEM_POOL, .block = -1,
                        .owner = (int16_t)role, .refs = 0, .index = -1, .aux = 1};
    mlsys_emit_mem(c, &m, bytes, label);
    m.op = MLSYS_MEM_USAGE;
    m.aux = 0;
    mlsys_emit_mem(c, &m, bytes, label);
}

/* A version of the weights, trainer -> generators (rank 0 says it once for all). */
static void version_moved(mlsys_comm *c, int tensors, uint64_t version, uint64_t bytes)
{
    if (mlsys_rank(c) != 0)
        return;
    mlsys_flow_info f = {WU_TRAINER, WU_GENERATOR, MLSYS_FLOW_WEIGHTS, -1, tensors,
                         (int32_t)version, -1, 0};
    mlsys_emit_flow(c, &f, bytes, NULL);
}

/* The actor as rl_wsync sees it: copies x the model's tensors, either in one page-aligned
 * block (back to back, as a trainer keeps them) or each in its own allocation. */
typedef struct actor {
    rl_tensor *t;
    char (*names)[56];
    int nt, separate;
    float *block, **own;
    size_t floats;
} actor;

/* Bucket sizes from "64K,1M,16M": how many (at most max), -1 on a bad one. */
int ch14_bucket_list(const char *s, uint64_t *out, int max)
{
    char buf[256], *save = NULL;
    int n = 0;
    snprintf(buf, sizeof buf, "%s", s ? s : "");
    for (char *p = strtok_r(buf, ",", &save); p; p = strtok_r(NULL, ",", &save)) {
        uint64_t v;
        if (n == max || mlsys_parse_size(p, &v) != 0 || v < 4 || v > (1ull << 34))
            return -1;
        out[n++] = v;
    }
    return n ? n : -1;
}

static int actor_make(actor *ac, const llm_config *cfg, const llm_weights *w, int copies,
                      int separate, int fill)
{
    int per = nn_tf_tensor_count(cfg);
    memset(ac, 0, sizeof *ac);
    ac->nt = per * copies;
    ac->separate = separate;
    ac->t = mlsys_xcalloc((size_t)ac->nt, sizeof *ac->t);
    ac->names = mlsys_xcalloc((size_t)ac->nt, sizeof *ac->names);
    size_t off, len;
    for (int i = 0; i < per; i++) {
        nn_tf_tensor(cfg, w, i, &off, &len, NULL, 0);
        ac->floats += len * (size_t)copies;
    }
    if (separate)
        ac->own = mlsys_xcalloc((size_t)ac->nt, sizeof *ac->own);
    else
        ac->block = mlsys_alloc_aligned(ac->floats * sizeof(float));
    float *p = ac->block;
    for (int k = 0; k < copies; k++)
        for (int i = 0; i < per; i++) {
            rl_tensor *t = &ac->t[k * per + i];
            char nm[40];
            nn_tf_tensor(cfg, w, i, &off, &len, nm, sizeof nm);
            if (copies > 1)
                snprintf(ac->names[k * per + i], sizeof ac->names[0], "c%d/%s", k, nm);
            else
                snprintf(ac->names[k * per + i], sizeof ac->names[0], "%s", nm);
            t->name = ac->names[k * per + i];
            t->n = len;
            if (separate)
                t->data = ac->own[k * per + i] = mlsys_alloc_aligned(len * sizeof(float));
            else {
                t->data = p;
                p += len;
            }
            if (fill)
                memcpy(t->data, w->mem + off, len * sizeof(float));
        }
    return 0;
}

static void actor_free(actor *ac)
{
    if (ac->separate)
        for (int i = 0; i < ac->nt; i++)
            mlsys_free_aligned(ac->own[i], ac->t[i].n * sizeof(float));
    else
        mlsys_free_aligned(ac->block, ac->floats * sizeof(float));
    free(ac->own);
    free(ac->t);
    free(ac->names);
}

/* FNV-1a 64 over every tensor's bytes in order. */
static uint64_t actor_hash(const actor *ac)
{
    uint64_t h = 1469598103934665603ull;
    for (int i = 0; i < ac->nt; i++) {
        const unsigned char *p = (const unsigned char *)ac->t[i].data;
        for (size_t j = 0; j < ac->t[i].n * sizeof(float); j++)
            h = (h ^ p[j]) * 1099511628211ull;
    }
    return h;
}

/* Buckets of this plan whose floats are not contiguous on this rank (staged). */
static size_t staged_buckets(const actor *ac, size_t bucket_bytes)
{
    size_t bf = bucket_bytes / 4, pos = 0, staged = 0, nb = (ac->floats + bf - 1) / bf;
    int ti = 0;
    for (size_t b = 0; b < nb; b++) {
        size_t end = (b + 1) * bf < ac->floats ? (b + 1) * bf : ac->floats, start = b * bf;
        /* tensors overlapping [start, end): contiguous when each follows the one before */
        size_t tpos = pos;
        int k = ti, split = 0;
        while (k < ac->nt && tpos + ac->t[k].n <= start) {
            tpos += ac->t[k].n;
            k++;
        }
        ti = k;
        pos = tpos;
        for (float *next = NULL; k < ac->nt && tpos < end; tpos += ac->t[k].n, k++) {
            if (!ac->t[k].n)
                continue;
            if (next && ac->t[k].data != next)
                split = 1;
            next = ac->t[k].data + ac->t[k].n;
        }
        staged += (size_t)split;
    }
    return staged;
}

/* The trainer's step: the weights change, the version advances. fresh: every weight is
 * rewritten (its sign flipped), as an optimizer step does; else only each tensor's first. */
static void train_step(actor *ac, const float *first, uint64_t *version, int fresh)
{
    ++*version;
    for (int k = 0; k < ac->nt; k++) {
        if (!ac->t[k].n)
            continue;
        if (fresh)
            for (size_t j = 1; j < ac->t[k].n; j++)
                ac->t[k].data[j] = -ac->t[k].data[j];
        ac->t[k].data[0] = first[k] + (float)*version * 1e-3f;
    }
}

/* One bucket size, timed as `mlsys-lab bench` times a collective: per round, iters syncs back
 * to back, a barrier, then iters plain broadcasts of the same bytes and a barrier; the
 * average call of each, the median over ROUNDS rounds (after one warm-up call of each).
 * fresh: the trainer rewrites every weight (and the plain buffer) before each call, outside
 * the clock: each call is timed alone, from a barrier to a barrier. */
#define ROUNDS 3
/* One sync: rl_wsync without its per-bucket flow records, and one arrow for the version. */
static int sync_once(mlsys_comm *c, actor *ac, size_t bucket, uint64_t *version, char *err,
                     size_t errlen)
{
    static const rl_wsync_events ev = {RL_WSYNC_POOL, 1};
    int rc = rl_wsync_with(c, 0, ac->t, ac->nt, bucket, version, &ev, err, errlen);
    if (rc == 0)
        version_moved(c, ac->nt, *version, ac->floats * sizeof(float));
    return rc;
}

static int measure_one(mlsys_comm *c, actor *ac, const float *first, float *plain,
                       size_t bucket, int iters, int fresh, uint64_t *version, double *ts,
                       double *tb, char *err, size_t errlen)
{
    int root = mlsys_rank(c) == 0, rc = 0;
    double a[ROUNDS], b[ROUNDS];
    if (root)
        train_step(ac, first, version, 0);
    rc = sync_once(c, ac, bucket, version, err, errlen);
    if (rc == 0)
        rc = mlsys_broadcast(c, plain, ac->floats, MLSYS_F32, 0);
    for (int r = 0; r < ROUNDS && rc == 0; r++) {
        for (int which = 0; which < 2 && rc == 0; which++) {
            double acc = 0, t0;
            if ((rc = mlsys_barrier(c)) != 0)
                break;
            t0 = mlsys_now_s();
            for (int i = 0; i < iters && rc == 0; i++) {
                if (fresh) {
                    if (root && which == 0)
                        train_step(ac, first, version, 1);
                    else if (root)
                        for (size_t j = 0; j < ac->floats; j++)
                            plain[j] = -plain[j];
                    if ((rc = mlsys_barrier(c)) != 0)
                        break;
                    t0 = mlsys_now_s();
                } else if (root && which == 0) {
                    train_step(ac, first, version, 0);
                }
                rc = which == 0 ? sync_once(c, ac, bucket, version, err, errlen)
                                : mlsys_broadcast(c, plain, ac->floats, MLSYS_F32, 0);
                if (fresh && rc == 0 && (rc = mlsys_barrier(c)) == 0)
                    acc += mlsys_now_s() - t0;
            }
            if (!fresh && rc == 0 && (rc = mlsys_barrier(c)) == 0)
                acc = mlsys_now_s() - t0;
            (which == 0 ? a : b)[r] = acc / iters;
        }
    }
    if (rc != 0) {
        if (!err[0])
            snprintf(err, errlen, "rank %d: %s", mlsys_rank(c), mlsys_errmsg(c));
        return rc;
    }
    *ts = mlsys_percentile(a, ROUNDS, 50);
    *tb = mlsys_percentile(b, ROUNDS, 50);
    return 0;
}

int ch14_wsync_measure(mlsys_comm *c, const lab_args *a, int *gate)
{
    int me = mlsys_rank(c), n = mlsys_size(c), root = me == 0, rc = 1;
    int iters = (int)lab_arg_int(a, "iters"), copies = (int)lab_arg_int(a, "copies");
    int separate = lab_arg_bool(a, "separate"), fresh = lab_arg_bool(a, "fresh-weights");
    uint64_t bk[16];
    int nbk = ch14_bucket_list(lab_arg_str(a, "bucket-size"), bk, 16);
    char path[1024], err[512] = "";
    llm_config cfg;
    llm_weights w;
    lab_asset_path(lab_arg_str(a, "model"), path, sizeof path);
    if (llm_checkpoint_read(path, &cfg, &w, err, sizeof err) != 0) {
        fprintf(stderr, "mlsys-lab: %s: rank %d: %s\n", LAB_ID, me, err);
        return 1;
    }
    actor ac;
    actor_make(&ac, &cfg, &w, copies, separate, root);   /* generators start from zeros */
    llm_weights_free(&w);
    float *first = mlsys_xcalloc((size_t)ac.nt, sizeof *first);
    for (int k = 0; k < ac.nt; k++)
        first[k] = ac.t[k].n ? ac.t[k].data[0] : 0;
    float *plain = mlsys_alloc_aligned(ac.floats * sizeof(float));
    ch14_wu_mem(c, 0, ac.floats * sizeof(float), "weights");
    ch14_wu_mem(c, 1, ac.floats * sizeof(float), "broadcast buffer");
    uint64_t version = 0;
    if (root) {
        char rule[256], sz[32];
        common_rule(rule, sizeof rule, "=", 72);
        mlsys_format_approx((double)ac.floats * sizeof(float), sz, sizeof sz);
        printf("\n%s\n MEASURED HERE: the actor's weights, trainer (rank 0) -> %d generator%s, "
               "%s backend\n%s\n\n", rule, n - 1, n == 2 ? "" : "s", mlsys_backend_name(c),
               rule);
        printf("  %s%s: %d tensors, %s, %s\n", path, copies > 1 ? " (copies)" : "", ac.nt, sz,
               separate ? "each tensor in its own allocation"
                        : "back to back in one page-aligned block");
        printf("  rl_wsync: version header checked on every generator, then the floats in "
               "buckets;\n  beside it a plain broadcast of the same bytes. Time: the average "
               "of %d calls %s,\n  median of %d rounds\n", iters,
               fresh ? "each from a barrier to a barrier" : "back to back (as mlsys-lab bench "
               "times)", ROUNDS);
        printf("  %s\n\n", fresh ? "before each call the trainer rewrites every weight (and "
               "the broadcast its buffer)" : "the trainer changes one float per tensor "
               "between calls (--fresh-weights: all)");
        printf("  %9s %8s %7s %11s %10s %11s %10s %7s\n", "bucket", "buckets", "staged",
               "sync", "sync GB/s", "broadcast", "bcast GB/s", "ratio");
    }
    for (int i = 0; i < nbk; i++) {
        double ts, tb;
        char label[32], sz[16];
        mlsys_format_size(bk[i], sz, sizeof sz);
        snprintf(label, sizeof label, "sync, %s buckets", sz);
        err[0] = 0;
        if (ch14_wu_section(c, gate, label) != 0) {
            fprintf(stderr, "mlsys-lab: %s: rank %d: %s\n", LAB_ID, me, mlsys_errmsg(c));
            goto done;
        }
        if (measure_one(c, &ac, first, plain, bk[i], iters, fresh, &version, &ts, &tb, err,
                        sizeof err) != 0) {
            fprintf(stderr, "mlsys-lab: %s: %s\n", LAB_ID, err[0] ? err : mlsys_errmsg(c));
            goto done;
        }
        if (root) {
            double bytes = (double)ac.floats * sizeof(float);
            printf("  %9s %8zu %7zu %8.3f ms %10.2f %8.3f ms %10.2f %6.2fx\n", sz,
                   rl_wsync_buckets(ac.t, ac.nt, bk[i]), staged_buckets(&ac, bk[i]), ts * 1e3,
                   bytes / ts / 1e9, tb * 1e3, bytes / tb / 1e9, tb / ts);
        }
    }
    /* every generator's weights against the trainer's, and its version */
    uint64_t mine[2] = {actor_hash(&ac), version}, *all = root ? mlsys_xcalloc(2 * (size_t)n,
                                                                              sizeof *all) : NULL;
    if (mlsys_gather(c, mine, all, 2, MLSYS_I64, 0) != 0) {
        fprintf(stderr, "mlsys-lab: %s: hash gather failed: %s\n", LAB_ID, mlsys_errmsg(c));
        free(all);
        goto done;
    }
    rc = 0;
    if (root) {
        int same = 0;
        for (int r = 1; r < n; r++)
            same += all[2 * r] == mine[0] && all[2 * r + 1] == mine[1];
        printf("\n  versions 1..%llu, each checked by every generator as it arrived\n",
               (unsigned long long)version);
        printf("  generators bit-identical to the trainer: %d of %d (FNV-1a 0x%016llx, "
               "version %llu)%s\n", same, n - 1,
               (unsigned long long)mine[0], (unsigned long long)version,
               same == n - 1 ? "" : "  MISMATCH");
        for (int r = 1; r < n; r++)
            if (all[2 * r] != mine[0] || all[2 * r + 1] != mine[1])
                printf("    rank %d: hash 0x%016llx, version %llu\n", r,
                       (unsigned long long)all[2 * r], (unsigned long long)all[2 * r + 1]);
        printf("  GB/s = the weights' bytes over the time until every generator has them; "
               "ratio = sync / broadcast\n  bandwidth. staged = buckets packed through the "
               "staging buffer on the trainer.\n");
        rc = same == n - 1 ? 0 : 1;
        free(all);
    }
done:
    ch14_wu_mem(c, 1, 0, "broadcast buffer");
    mlsys_free_aligned(plain, ac.floats * sizeof(float));
    free(first);
    actor_free(&ac);
    return rc;
}
