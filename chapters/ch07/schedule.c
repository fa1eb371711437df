/* schedule.c - the pipeline schedule generator. GPipe, 1F1B and interleaved 1F1B are given as
 * an order of ops per stage; a small event simulation then starts every op at the earliest
 * slot where its stage is free and its input has arrived (F needs the F of the virtual stage
 * before it, B the B of the one after it). ZB-H1 is built greedily slot by slot: a free
 * stage runs a ready B first (the stage above waits for it), else the next F while it holds
 * fewer activations than 1F1B would, else a deferred W. Every op lasts one slot. */
#include "schedule.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const names[SCHED_COUNT] = {"gpipe", "1f1b", "interleaved", "zb-h1"};
static const char *const titles[SCHED_COUNT] = {
    "GPipe (fill-drain)", "1F1B (one forward, one backward)", "Interleaved 1F1B",
    "Zero-bubble ZB-H1 (backward split into B and W)"
};

const char *sched_name(sched_kind k)
{
    return k >= 0 && k < SCHED_COUNT ? names[k] : "?";
}

const char *sched_short(sched_kind k)
{
    static const char *const s[SCHED_COUNT] = {"GPipe", "1F1B", "interleaved 1F1B", "ZB-H1"};
    return k >= 0 && k < SCHED_COUNT ? s[k] : "?";
}

const char *sched_title(sched_kind k)
{
    return k >= 0 && k < SCHED_COUNT ? titles[k] : "?";
}

int sched_parse(const char *s, sched_kind *out)
{
    for (int k = 0; s && k < SCHED_COUNT; k++)
        if (!strcmp(s, names[k])) {
            *out = (sched_kind)k;
            return 0;
        }
    if (s && (!strcmp(s, "naive") || !strcmp(s, "fill-drain"))) {
        *out = SCHED_GPIPE;
        return 0;
    }
    return -1;
}

void sched_free(schedule *s)
{
    if (!s)
        return;
    for (int i = 0; s->ops && i < s->P; i++)
        free(s->ops[i]);
    free(s->ops);
    free(s->n);
    memset(s, 0, sizeof *s);
}

/* ---- building blocks ---- */

typedef struct plan {           /* the order of ops per stage, before times are known */
    sched_op **op;
    int *n, *cap;
    int P;
} plan;

static void plan_add(plan *p, int stage, char kind, int mb, int chunk)
{
    if (p->n[stage] == p->cap[stage]) {
        p->cap[stage] = p->cap[stage] ? p->cap[stage] * 2 : 16;
        p->op[stage] = realloc(p->op[stage], (size_t)p->cap[stage] * sizeof **p->op);
        if (!p->op[stage])
            abort();
    }
    p->op[stage][p->n[stage]++] = (sched_op){kind, mb, chunk, -1, 1};
}

static void plan_init(plan *p, int P)
{
    p->P = P;
    p->op = mlsys_xcalloc((size_t)P, sizeof *p->op);
    p->n = mlsys_xcalloc((size_t)P, sizeof *p->n);
    p->cap = mlsys_xcalloc((size_t)P, sizeof *p->cap);
}

/* End slot of each pass per (virtual stage, micro-batch); -1 while not placed. */
typedef struct ends {
    int V, M;
    int *f, *b, *w;
} ends;

static void ends_init(ends *e, int V, int M)
{
    e->V = V;
    e->M = M;
    size_t n = (size_t)V * (size_t)M;
    e->f = mlsys_xmalloc(n * sizeof *e->f);
    e->b = mlsys_xmalloc(n * sizeof *e->b);
    e->w = mlsys_xmalloc(n * sizeof *e->w);
    for (size_t i = 0; i < n; i++)
        e->f[i] = e->b[i] = e->w[i] = -1;
}

static void ends_free(ends *e)
{
    free(e->f);
    free(e->b);
    free(e->w);
}

#define AT(E, arr, vs, mb) ((E)->arr[(size_t)(vs) * (size_t)(E)->M + (size_t)(mb)])

/* The slot from which op (of virtual stage vs) may start, or -1 while its input is missing. */
static int ready_at(const ends *e, char kind, int vs, int mb)
{
    if (kind == 'F')
        return vs == 0 ? 0 : AT(e, f, vs - 1, mb);
    if (kind == 'B')
        return vs == e->V - 1 ? AT(e, f, vs, mb) : AT(e, b, vs + 1, mb);
    return AT(e, b, vs, mb);                        /* W after its own B */
}

static void record(ends *e, char kind, int vs, int mb, int end)
{
    if (kind == 'F')
        AT(e, f, vs, mb) = end;
    else if (kind == 'B')
        AT(e, b, vs, mb) = end;
    else
        AT(e, w, vs, mb) = end;
}

/* Times for a fixed order per stage: repeat passes over the stages, placing each stage's
 * next op when its input is known, until all are placed or nothing moves (a deadlock in
 * the order, which a correct generator never produces). */
static int simulate(schedule *s, plan *p, char *err, size_t errlen)
{
    int P = s->P, V = P * s->v, rc = 0;
    ends e;
    ends_init(&e, V, s->M);
    int *next = mlsys_xcalloc((size_t)P, sizeof *next), *free_at = mlsys_xcalloc((size_t)P,
                                                                                 sizeof(int));
    for (int moved = 1; moved;) {
        moved = 0;
        for (int st = 0; st < P; st++)
            while (next[st] < p->n[st]) {
                sched_op *op = &p->op[st][next[st]];
                int r = ready_at(&e, op->kind, op->chunk * P + st, op->mb);
                if (r < 0)
                    break;
                op->t0 = r > free_at[st] ? r : free_at[st];
                free_at[st] = op->t0 + op->dur;
                record(&e, op->kind, op->chunk * P + st, op->mb, free_at[st]);
                next[st]++;
                moved = 1;
            }
    }
    for (int st = 0; st < P; st++)
        if (next[st] < p->n[st]) {
            snprintf(err, errlen, "%s: stage %d cannot start op %d: its input never comes",
                     sched_name(s->kind), st, next[st]);
            rc = -1;
            break;
        }
    free(next);
    free(free_at);
    ends_free(&e);
    return rc;
}

/* ---- the orders ---- */

static void order_gpipe(plan *p, int M)
{
    for (int st = 0; st < p->P; st++) {
        for (int m = 0; m < M; m++)
            plan_add(p, st, 'F', m, 0);
        for (int m = 0; m < M; m++)
            plan_add(p, st, 'B', m, 0);
    }
}

/* PipeDream-flush: P-1-s forwards to fill the pipeline, then one forward and one backward in
 * turn, then the backwards still owed. */
static void order_1f1b(plan *p, int M)
{
    for (int st = 0; st < p->P; st++) {
        int warm = p->P - 1 - st < M ? p->P - 1 - st : M;
        int f = 0, b = 0;
        for (; f < warm; f++)
            plan_add(p, st, 'F', f, 0);
        for (; f < M; f++, b++) {
            plan_add(p, st, 'F', f, 0);
            plan_add(p, st, 'B', b, 0);
        }
        for (; b < M; b++)
            plan_add(p, st, 'B', b, 0);
    }
}

/* The k-th forward (or backward) a stage runs in the interleaved schedule: micro-batches go
 * in groups of P; a group passes chunk 0, then chunk 1, ... (backwards: the last chunk first). */
static void interleaved_nth(int k, int P, int M, int v, int backward, int *mb, int *chunk)
{
    int g = k / (P * v), in = k % (P * v);
    int gs = M - g * P < P ? M - g * P : P;        /* the last group may be short */
    *chunk = in / gs;
    *mb = g * P + in % gs;
    if (backward)
        *chunk = v - 1 - *chunk;
}

/* Megatron's interleaved 1F1B: a longer warm-up of (P-1-s)*2 + (v-1)*P forwards so that
 * every chunk has work queued, then 1F1B over (chunk, micro-batch) passes. */
static void order_interleaved(plan *p, int M, int v, int extra)
{
    int P = p->P, total = M * v;
    for (int st = 0; st < P; st++) {
        int warm = (P - 1 - st) * 2 + (v - 1) * P + extra;
        if (warm > total)
            warm = total;
        int f = 0, b = 0, mb, ch;
        for (; f < warm; f++) {
            interleaved_nth(f, P, M, v, 0, &mb, &ch);
            plan_add(p, st, 'F', mb, ch);
        }
        for (; f < total; f++, b++) {
            interleaved_nth(f, P, M, v, 0, &mb, &ch);
            plan_add(p, st, 'F', mb, ch);
            interleaved_nth(b, P, M, v, 1, &mb, &ch);
            plan_add(p, st, 'B', mb, ch);
        }
        for (; b < total; b++) {
            interleaved_nth(b, P, M, v, 1, &mb, &ch);
            plan_add(p, st, 'B', mb, ch);
        }
    }
}

/* ZB-H1: the 1F1B order, with each backward split in two. Stage s runs B as 1F1B does, and
 * the W of a micro-batch s backwards later (the last stage delays its W's the most); the W's
 * still owed go at the end. Delaying W lets the B's, which the stage above waits for, run
 * earlier, and the W's fill the slots where 1F1B idles; a stage holds at most P micro-batches
 * (F started, W not done), the first stage's peak in 1F1B. */
static void order_zbh1(plan *p, int M)
{
    for (int st = 0; st < p->P; st++) {
        int warm = p->P - 1 - st < M ? p->P - 1 - st : M;
        int d = st;
        int f = 0, b = 0, w = 0;
        for (; f < warm; f++)
            plan_add(p, st, 'F', f, 0);
        for (; f < M; f++) {
            plan_add(p, st, 'F', f, 0);
            plan_add(p, st, 'B', b++, 0);
            if (b - 1 - w >= d)
                plan_add(p, st, 'W', w++, 0);
        }
        for (; b < M; b++) {
            plan_add(p, st, 'B', b, 0);
            if (b - w >= d)
                plan_add(p, st, 'W', w++, 0);
        }
        for (; w < M; w++)
            plan_add(p, st, 'W', w, 0);
    }
}

int sched_build(schedule *s, sched_kind k, int P, int M, int v, char *err, size_t errlen)
{
    memset(s, 0, sizeof *s);
    if (k < 0 || k >= SCHED_COUNT) {
        snprintf(err, errlen, "unknown schedule %d", (int)k);
        return -1;
    }
    if (P < 1 || M < 1 || (k == SCHED_INTERLEAVED && v < 1)) {
        snprintf(err, errlen, "%s needs stages >= 1, micro-batches >= 1 and chunks >= 1 "
                 "(got P=%d, M=%d, v=%d)", sched_name(k), P, M, v);
        return -1;
    }
    if (P > 64) {
        snprintf(err, errlen, "at most 64 stages (got %d)", P);
        return -1;
    }
    s->kind = k;
    s->P = P;
    s->M = M;
    s->v = k == SCHED_INTERLEAVED ? v : 1;
    plan p;
    plan_init(&p, P);
    int rc = 0;
    switch (k) {
    case SCHED_GPIPE: order_gpipe(&p, M); rc = simulate(s, &p, err, errlen); break;
    case SCHED_1F1B: order_1f1b(&p, M); rc = simulate(s, &p, err, errlen); break;
    case SCHED_INTERLEAVED:
        /* with M not a multiple of P the last group is short, and Megatron's warm-up can
         * leave a stage waiting on itself: warm up longer until the order works (at worst
         * all forwards first, which always does) */
        for (int extra = 0; extra <= M * s->v; extra++) {
            order_interleaved(&p, M, s->v, extra);
            if ((rc = simulate(s, &p, err, errlen)) == 0)
                break;
            for (int st = 0; st < P; st++)
                p.n[st] = 0;
        }
        break;
    default: order_zbh1(&p, M); rc = simulate(s, &p, err, errlen); break;
    }
    s->ops = p.op;
    s->n = p.n;
    free(p.cap);
    if (rc) {
        sched_free(s);
        return -1;
    }
    for (int st = 0; st < P; st++)
        for (int i = 0; i < s->n[st]; i++) {
            int end = s->ops[st][i].t0 + s->ops[st][i].dur;
            if (end > s->total)
                s->total = end;
        }
    return 0;
}

/* ---- checks and measures ---- */

int sched_validate(const schedule *s, char *err, size_t errlen)
{
    int P = s->P, V = P * s->v, M = s->M, rc = 0;
    size_t cells = (size_t)V * (size_t)M;
    int *t[3], *cnt[3];                 /* F, B, W: start slot and how many were seen */
    for (int k = 0; k < 3; k++) {
        t[k] = mlsys_xmalloc(cells * sizeof(int));
        cnt[k] = mlsys_xcalloc(cells, sizeof(int));
    }
    int zb = s->kind == SCHED_ZBH1;
    for (int st = 0; st < P && !rc; st++) {
        for (int i = 0; i < s->n[st]; i++) {
            const sched_op *o = &s->ops[st][i];
            int k = o->kind == 'F' ? 0 : o->kind == 'B' ? 1 : o->kind == 'W' ? 2 : -1;
            if (k < 0 || (k == 2 && !zb) || o->mb < 0 || o->mb >= M || o->chunk < 0 ||
                o->chunk >= s->v || o->dur < 1 || o->t0 < 0) {
                snprintf(err, errlen, "stage %d op %d: not a valid op (%c mb %d chunk %d)", st,
                         i, o->kind, o->mb, o->chunk);
                rc = -1;
                break;
            }
            if (i > 0 && o->t0 < s->ops[st][i - 1].t0 + s->ops[st][i - 1].dur) {
                snprintf(err, errlen, "stage %d runs two ops at once at slot %d", st, o->t0);
                rc = -1;
                break;
            }
            size_t c = (size_t)(o->chunk * P + st) * (size_t)M + (size_t)o->mb;
            t[k][c] = o->t0;
            cnt[k][c]++;
        }
    }
    for (int vs = 0; vs < V && !rc; vs++)
        for (int m = 0; m < M && !rc; m++) {
            size_t c = (size_t)vs * (size_t)M + (size_t)m;
            int st = vs % P;
            if (cnt[0][c] != 1 || cnt[1][c] != 1 || cnt[2][c] != (zb ? 1 : 0)) {
                snprintf(err, errlen, "stage %d chunk %d mb %d: %d F, %d B, %d W (want 1, 1, "
                         "%d)", st, vs / P, m, cnt[0][c], cnt[1][c], cnt[2][c], zb);
                rc = -1;
            } else if (vs > 0 && t[0][c] < t[0][c - (size_t)M] + 1) {
                snprintf(err, errlen, "F of mb %d on stage %d starts at slot %d, before the F "
                         "on the stage before it ends", m, st, t[0][c]);
                rc = -1;
            } else if (vs < V - 1 && t[1][c] < t[1][c + (size_t)M] + 1) {
                snprintf(err, errlen, "B of mb %d on stage %d starts at slot %d, before the B "
                         "on the stage after it ends", m, st, t[1][c]);
                rc = -1;
            } else if (t[1][c] < t[0][c] + 1) {
                snprintf(err, errlen, "B of mb %d on stage %d starts before its F ends", m, st);
                rc = -1;
            } else if (zb && t[2][c] < t[1][c] + 1) {
                snprintf(err, errlen, "W of mb %d on stage %d starts before its B ends", m, st);
                rc = -1;
            }
        }
    /* the ops of a stage must be listed in time order without overlap (checked above) */
    for (int k = 0; k < 3; k++) {
        free(t[k]);
        free(cnt[k]);
    }
    return rc;
}

double sched_stage_bubble(const schedule *s, int stage)
{
    if (s->total <= 0)
        return 0.0;
    long busy = 0;
    for (int i = 0; i < s->n[stage]; i++)
        busy += s->ops[stage][i].dur;
    return 1.0 - (double)busy / (double)s->total;
}

double sched_bubble(const schedule *s)
{
    if (s->total <= 0)
        return 0.0;
    long busy = 0;
    for (int st = 0; st < s->P; st++)
        for (int i = 0; i < s->n[st]; i++)
            busy += s->ops[st][i].dur;
    return 1.0 - (double)busy / ((double)s->P * (double)s->total);
}

double sched_bubble_formula(sched_kind k, int P, int M, int v)
{
    switch (k) {
    case SCHED_GPIPE: case SCHED_1F1B:
        return (double)(P - 1) / (double)(M + P - 1);
    case SCHED_INTERLEAVED:
        if (v < 1 || M % P != 0)
            return -1.0;
        return (double)(P - 1) / (double)(v * M + P - 1);
    case SCHED_ZBH1:
        if (M < P)
            return -1.0;
        return (double)(P - 1) / (double)(3 * M + P - 1);
    default:
        return -1.0;
    }
}

int sched_peak_inflight(const schedule *s, int stage)
{
    int n = s->n[stage], peak = 0;
    /* +1 at an F's start, -1 at the end of the pass that frees it: B, or W in ZB-H1 */
    char last = s->kind == SCHED_ZBH1 ? 'W' : 'B';
    for (int i = 0; i < n; i++) {
        int t = s->ops[stage][i].t0, held = 0;
        for (int j = 0; j < n; j++) {
            const sched_op *o = &s->ops[stage][j];
            if (o->kind == 'F' && o->t0 <= t)
                held++;
            if (o->kind == last && o->t0 + o->dur <= t)
                held--;
        }
        if (held > peak)
            peak = held;
    }
    return peak;
}

const sched_op *sched_at(const schedule *s, int stage, int t)
{
    for (int i = 0; i < s->n[stage]; i++) {
        const sched_op *o = &s->ops[stage][i];
        if (t >= o->t0 && t < o->t0 + o->dur)
            return o;
    }
    return NULL;
}

char *sched_cell(const schedule *s, const sched_op *op, char *out, size_t n)
{
    if (s->kind == SCHED_INTERLEAVED)
        snprintf(out, n, "%c%d%c", op->kind, op->mb, 'a' + op->chunk % 26);
    else
        snprintf(out, n, "%c%d", op->kind, op->mb);
    return out;
}

/* The chart in blocks of slots that fit SCHED_CHART_COLS columns (a terminal of 80, or the
 * front end's log beside its prefix), each block with its own time axis. */
#define SCHED_CHART_COLS 78

void sched_print_grid(const schedule *s, FILE *out)
{
    char cell[32];
    int w = 3;                          /* the original's cells are 3 wide */
    for (int st = 0; st < s->P; st++)
        for (int i = 0; i < s->n[st]; i++) {
            int len = (int)strlen(sched_cell(s, &s->ops[st][i], cell, sizeof cell)) + 1;
            if (len > w)
                w = len;
        }
    char num[16];
    snprintf(num, sizeof num, "%d", s->total - 1);
    if ((int)strlen(num) + 1 > w)
        w = (int)strlen(num) + 1;
    int per = (SCHED_CHART_COLS - 8) / w;
    if (per < 1)
        per = 1;
    for (int b0 = 0; b0 < s->total; b0 += per) {
        int b1 = b0 + per < s->total ? b0 + per : s->total;
        if (b0)
            fputc('\n', out);
        fprintf(out, "Time →  ");
        for (int t = b0; t < b1; t++)
            fprintf(out, "%*d", w, t);
        fprintf(out, "\n");
        for (int i = 0; i < 8 + (b1 - b0) * w; i++)
            fputc('-', out);
        fputc('\n', out);
        for (int st = 0; st < s->P; st++) {
            fprintf(out, "GPU %d:  ", st);
            for (int t = b0; t < b1; t++) {
                const sched_op *o = sched_at(s, st, t);
                fprintf(out, "%*s", w, o ? sched_cell(s, o, cell, sizeof cell) : ".");
            }
            fputc('\n', out);
        }
    }
}

size_t sched_events(const schedule *s, uint64_t slot_ns, mlsys_event **ev)
{
    return sched_events_at(s, slot_ns, 0, -1, ev);
}

size_t sched_events_at(const schedule *s, uint64_t slot_ns, int first, int section,
                       mlsys_event **ev)
{
    size_t n = section >= 0 ? (size_t)s->P : 0;
    for (int st = 0; st < s->P; st++)
        n += (size_t)s->n[st] * 2;
    mlsys_event *e = mlsys_xcalloc(n ? n : 1, sizeof *e);
    size_t k = 0;
    for (int st = 0; section >= 0 && st < s->P; st++) {
        mlsys_event *x = &e[k++];
        x->kind = MLSYS_EV_STEP;
        x->t_ns = (uint64_t)first * slot_ns;
        x->rank = st;
        x->peer = x->tag = x->chunk = x->dtype = -1;
        x->coll = x->algo = x->op = -1;
        x->step = section;
        snprintf(x->label, sizeof x->label, "%s", sched_short(s->kind));
    }
    /* in time order (stage order within a slot), as a live job's events would arrive */
    for (int t = 0; t <= s->total; t++)
        for (int st = 0; st < s->P; st++)
            for (int i = 0; i < s->n[st]; i++) {
                const sched_op *o = &s->ops[st][i];
                int at_begin = o->t0 == t, at_end = o->t0 + o->dur == t;
                for (int half = 0; half < 2; half++) {
                    /* an op that ends at t is closed before the next one opens */
                    if (!(half == 0 ? at_end : at_begin))
                        continue;
                    mlsys_event *x = &e[k++];
                    x->kind = half == 0 ? MLSYS_EV_COMPUTE_END : MLSYS_EV_COMPUTE_BEGIN;
                    x->t_ns = (uint64_t)(first + t) * slot_ns;
                    x->rank = st;
                    x->peer = x->tag = x->chunk = x->dtype = -1;
                    x->coll = x->algo = x->op = -1;
                    x->step = first + t;
                    if (s->kind == SCHED_INTERLEAVED)
                        snprintf(x->label, sizeof x->label, "%c mb%d c%d", o->kind, o->mb,
                                 o->chunk);
                    else
                        snprintf(x->label, sizeof x->label, "%c mb%d", o->kind, o->mb);
                }
            }
    *ev = e;
    return k;
}
